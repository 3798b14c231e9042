// The command line: `sluice run`, `sluice inspect`, `sluice forward`, `sluice profile`, `sluice --version`.
// Usage errors exit 2 with one line; every other failure is a sluice::Error whose exit code says
// what kind it was (README, "Exit status").  Only rank 0 of a job prints usage errors, so an
// mpirun of 8 ranks with a typo prints one line, not eight.
#include "app/cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "sluice/version.h"

namespace sluice {

namespace {

// The launcher's rank before MPI is initialized (mpirun, srun), 0 for a plain process.
int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

void print_error_line(const std::string& message) {
  if (!message.empty() && launcher_rank() == 0) std::fprintf(stderr, "sluice: error: %s\n", message.c_str());
}

}  // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{"Sluice: batch inference of an ONNX model over a dataset on every GPU of a job, outputs to HDF5."};
  app.name("sluice");
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION + " (git " + SLUICE_GIT_COMMIT + ")");
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return std::string(e.what()); });

  Commands commands;
  add_run_command(app, commands);
  add_inspect_command(app);
  add_forward_command(app);
  add_profile_command(app);

  // Subcommands without MPI (inspect, forward) run inside parse() through their CLI11 callbacks and
  // report a non-zero status with CLI::RuntimeError; `run` runs after parsing (it needs argv for MPI).
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      std::fputs(app.help().c_str(), stdout);
      return kExitUsage;
    }
    return commands.run(app.get_subcommands().front()->get_name(), argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    const CLI::App* sub = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
    print_error_line(str(e.what(), " (see sluice ", sub ? sub->get_name() + " " : std::string(), "--help)"));
    return kExitUsage;
  } catch (const Error& e) {
    print_error_line(e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    print_error_line(e.what());
    return kExitFailure;
  }
}

}  // namespace sluice
