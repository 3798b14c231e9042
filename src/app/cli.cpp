// The command line: `sluice run`, `sluice inspect`, `sluice export`, `sluice forward`, `sluice profile`, `sluice check`,
// `sluice mpirun`, `sluice srun`, `sluice explain-job`, `sluice --version`.
// Usage errors exit 2 with one line; every other failure is a sluice::Error whose exit code says
// what kind it was (README, "Exit status").  Only rank 0 of a job prints usage errors, so an
// mpirun of 8 ranks with a typo prints one line, not eight.
#include "app/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/commands.h"
#include "cluster/mpi_context.h"
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

// The launcher's world size before MPI is initialized (1 for a plain process).
int launcher_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  }
  return 1;
}

void print_error_line(const std::string& message) {
  if (!message.empty() && launcher_rank() == 0) std::fprintf(stderr, "sluice: error: %s\n", message.c_str());
  std::fflush(stderr);
}

// A usage error found before MPI started, under a launcher: only rank 0 prints it, and the others
// must not exit first, or the launcher kills rank 0 before its line is out.  So every rank meets
// in one barrier after rank 0 printed, then all exit with the same status.
void settle_with_the_other_ranks() {
  if (launcher_size() < 2 || MpiContext::initialized()) return;
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return;
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
}

// "did you mean --batch-size?" for the first option on the command line that `sub` does not know.
std::string option_hint(const CLI::App* sub, int argc, char** argv) {
  if (!sub) return "";
  std::vector<std::string> names;
  for (const CLI::Option* o : sub->get_options())
    if (!o->get_group().empty())
      for (const auto& n : o->get_lnames()) names.push_back(n);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() < 3) continue;
    a = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
    if (sub->get_option_no_throw("--" + a)) continue;
    const std::string near = nearest_word(a.rfind("no-", 0) == 0 ? a.substr(3) : a, names);
    if (!near.empty()) return str("did you mean --", near, "? (sluice ", sub->get_name(), " --help lists every option)");
    return str("sluice ", sub->get_name(), " --help lists every option");
  }
  return "";
}

}  // namespace

int cli_main(int argc, char** argv) {
  // `sluice explain-job FILE [OPTIONS]` is `sluice run --config FILE --dry-run [OPTIONS]`.
  std::vector<char*> args(argv, argv + argc);
  static char run_word[] = "run", config_flag[] = "--config", dry_flag[] = "--dry-run";
  if (argc >= 2 && std::string(argv[1]) == "explain-job") {
    if (argc < 3 || argv[2][0] == '-') {
      print_error_line("explain-job needs a job file: sluice explain-job FILE [options of sluice run]");
      return kExitUsage;
    }
    args = {argv[0], run_word, config_flag, argv[2], dry_flag};
    for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
    argc = static_cast<int>(args.size());
    args.push_back(nullptr);  // argv[argc] is NULL: MPI_Init walks the array to it (found by ASan)
    argv = args.data();
  }
  CLI::App app{"Sluice: batch inference of an ONNX model over a dataset on every GPU of a job, outputs to HDF5."};
  app.name("sluice");
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION + " (git " + SLUICE_GIT_COMMIT + ")");
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return std::string(e.what()); });

  Commands commands;
  add_run_command(app, commands);
  add_inspect_command(app);
  add_forward_command(app);
  add_export_command(app);
  add_launch_commands(app);
  add_profile_command(app);
  add_check_command(app);

  // Subcommands without MPI (inspect, export, forward) run inside parse() through their CLI11 callbacks and
  // report a non-zero status with CLI::RuntimeError; `run` runs after parsing (it needs argv for MPI).
  try {
    // `sluice mpirun` and `sluice srun` pass their arguments to the launcher untouched, so CLI11
    // never parses them.
    if (argc > 1 && (std::string(argv[1]) == "mpirun" || std::string(argv[1]) == "srun"))
      return launch_command(argv[1], argc - 2, argv + 2);
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
    const std::string hint = option_hint(sub, argc, argv);
    print_error_line(hint.empty() ? str(e.what(), " (see sluice ", sub ? sub->get_name() + " " : std::string(), "--help)")
                                  : str(e.what(), "\nsluice: hint: ", hint));
    settle_with_the_other_ranks();
    return kExitUsage;
  } catch (const Error& e) {
    print_error_line(error_text(e));
    settle_with_the_other_ranks();
    return e.exit_code();
  } catch (const std::exception& e) {
    print_error_line(e.what());
    settle_with_the_other_ranks();
    return kExitFailure;
  }
}

}  // namespace sluice
