#pragma once
namespace sluice {
// Parses the command line, runs the subcommand and maps errors to exit codes (README, "Exit status").
int cli_main(int argc, char** argv);
}  // namespace sluice
