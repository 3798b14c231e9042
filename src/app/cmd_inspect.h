#pragma once
// `sluice inspect DIR [--json]`: what a run folder holds.  The rank files (rank, attempt, committed
// rows and chunks, whether each was closed cleanly), the datasets with their shapes and types,
// sample coverage from the ledgers (complete, or the gaps and duplicates), whether outputs.h5
// exists and maps every index, and the figures of report.json.  A table goes to stdout, or with
// --json one JSON object.  Exit status 0 when every sample is committed exactly once and every
// file reads, 1 otherwise; a folder that is missing or holds no rank file is an InputError.
#include <ostream>
#include <string>

namespace CLI {
class App;
}

namespace sluice {

// Adds the subcommand; its callback throws CLI::RuntimeError(1) for an incomplete folder, which
// cli_main turns into the exit status without a message.
void add_inspect_command(CLI::App& app);

// The work behind it: prints the summary of `dir` to `out` and returns the exit status.
int inspect_run_folder(const std::string& dir, bool json, std::ostream& out);

}  // namespace sluice
