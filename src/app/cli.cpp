// The command line: `sluice run`, `sluice inspect`, `sluice export`, `sluice forward`, `sluice profile`, `sluice check`,
// `sluice mpirun`, `sluice srun`, `sluice explain-job`, `sluice --version`.
// Usage errors exit 2 with one line; every other failure is a sluice::Error whose exit code says
// what kind it was (README, "Exit status").  Under a launcher every rank agrees on the outcome of its
// options before any other collective (cluster/launch.h): the lowest rank that failed prints its
// line, so an mpirun of 8 ranks with a typo prints one line, not eight, and a typo on one rank only
// ends every rank with its status instead of leaving the others waiting.
#include "app/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.h"
#include "cluster/launch.h"
#include "core/error.h"
#include "core/log.h"
#include "sluice/version.h"

namespace sluice {

namespace {

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

// Help names an option as `--cuda-graphs, --no-cuda-graphs`, without CLI11's `{false}` after a
// negated flag (which reads as the flag's default); flags state their default in their own text.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    if (positional) return CLI::Formatter::make_option_name(opt, positional);
    std::string out;
    for (const auto& n : opt->get_snames()) out += (out.empty() ? "-" : ", -") + n;
    for (const auto& n : opt->get_lnames()) out += (out.empty() ? "--" : ", --") + n;
    return out;
  }
};

// The command line with every option of `sub` given once: a repeated option's last occurrence
// wins (`--model a.onnx --model b.onnx` is b.onnx, `--mean 1 --mean 2` is 2, `--cuda-graphs
// --no-cuda-graphs` is off), as a later flag overrides a job file.  argv[0..first) is kept as is.
std::vector<std::string> last_occurrences(const CLI::App& sub, const std::vector<std::string>& args, std::size_t first) {
  struct Span {
    const CLI::Option* option;
    std::size_t begin, end;
  };
  std::vector<Span> spans;
  for (std::size_t i = first; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.rfind("--", 0) != 0 || a.size() < 3) continue;
    const std::size_t eq = a.find('=');
    const CLI::Option* o = sub.get_option_no_throw(a.substr(0, eq));
    if (!o) continue;
    std::size_t end = i + 1;
    const bool value_follows = eq == std::string::npos && o->get_type_size() != 0 && o->get_expected_min() > 0;
    if (value_follows && end < args.size() && args[end].rfind("--", 0) != 0) ++end;
    spans.push_back({o, i, end});
    i = end - 1;
  }
  std::vector<bool> drop(args.size(), false);
  for (std::size_t k = 0; k < spans.size(); ++k)
    for (std::size_t later = k + 1; later < spans.size(); ++later)
      if (spans[later].option == spans[k].option) {
        for (std::size_t i = spans[k].begin; i < spans[k].end; ++i) drop[i] = true;
        break;
      }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (!drop[i]) out.push_back(args[i]);
  return out;
}

// A list option given its values with spaces (`--mean "0.485 0.456 0.406"`, or unquoted): CLI11
// says only "Could not convert"; the fix is commas.
std::string list_hint(const CLI::App* sub, int argc, char** argv) {
  if (!sub) return "";
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    const CLI::Option* o = a.rfind("--", 0) == 0 ? sub->get_option_no_throw(a) : nullptr;
    if (!o || o->get_type_size() == 0) continue;
    const std::string v = argv[i + 1];
    const bool spaced = v.find(' ') != std::string::npos;
    const bool more = i + 2 < argc && argv[i + 2][0] != '-' && std::isdigit(static_cast<unsigned char>(argv[i + 2][0]));
    if (!spaced && !more) continue;
    std::string joined = v;
    for (char& c : joined)
      if (c == ' ') c = ',';
    if (!spaced) joined = str(v, ",", argv[i + 2], "...");
    return str("separate the values of ", a, " with commas, without spaces: ", a, " ", joined);
  }
  return "";
}

}  // namespace

int cli_main(int argc, char** argv) {
  // Help under a launcher: rank 0 prints it, once; the others have nothing to do.
  if (launcher_rank() != 0)
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return kExitOk;
  // `sluice explain-job FILE [OPTIONS]` is `sluice run --config FILE --dry-run [OPTIONS]`.
  std::vector<char*> args(argv, argv + argc);
  static char run_word[] = "run", config_flag[] = "--config", dry_flag[] = "--dry-run";
  if (argc >= 2 && std::string(argv[1]) == "explain-job") {
    if (argc >= 3 && (std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h")) {
      std::printf(
          "Usage: sluice explain-job FILE [options of sluice run]\n\n"
          "Prints the resolved job of the job file FILE (TOML) and the options given after it, where each\n"
          "value comes from (command line, job file, default), what each setting does, the input, the model\n"
          "and what the run would write; runs nothing.  The same as sluice run --config FILE --dry-run.\n"
          "sluice run --help lists the options.\n");
      return kExitOk;
    }
    if (argc < 3 || argv[2][0] == '-') {
      return settle_at_start(kExitUsage, "explain-job needs a job file: sluice explain-job FILE [options of sluice run]");
    }
    args = {argv[0], run_word, config_flag, argv[2], dry_flag};
    for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
    argc = static_cast<int>(args.size());
    args.push_back(nullptr);  // argv[argc] is NULL: MPI_Init walks the array to it (found by ASan)
    argv = args.data();
  }
  CLI::App app{"Sluice: batch inference of an ONNX model over a dataset on every GPU of a job, outputs to HDF5."};
  app.name("sluice");
  app.formatter(std::make_shared<HelpFormatter>());
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
  add_tokenize_command(app);
  add_params_command(app);

  // Rewritten into `run --config FILE --dry-run` above; listed here for --help.
  app.add_subcommand("explain-job", "Explain a job file without running it: sluice explain-job FILE [options of sluice run]")
      ->allow_extras();

  // The last of a repeated option wins (argv is rebuilt without the earlier ones).
  std::vector<std::string> kept;
  std::vector<char*> kept_argv;
  if (argc > 1 && argv[1][0] != '-') {
    const CLI::App* sub = nullptr;
    for (const CLI::App* c : static_cast<const CLI::App&>(app).get_subcommands([](const CLI::App*) { return true; }))
      if (c->get_name() == argv[1]) sub = c;
    if (sub && !sub->get_prefix_command()) {
      kept = last_occurrences(*sub, std::vector<std::string>(argv, argv + argc), 2);
      for (auto& a : kept) kept_argv.push_back(a.data());
      argc = static_cast<int>(kept_argv.size());
      kept_argv.push_back(nullptr);
      argv = kept_argv.data();
    }
  }

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
    std::string hint = list_hint(sub, argc, argv);
    if (hint.empty()) hint = option_hint(sub, argc, argv);
    return settle_at_start(kExitUsage, hint.empty() ? str(e.what(), " (see sluice ", sub ? sub->get_name() + " " : std::string(), "--help)")
                                                    : str(e.what(), "\nsluice: hint: ", hint));
  } catch (const Error& e) {
    return settle_at_start(e.exit_code(), error_text(e));
  } catch (const std::exception& e) {
    return settle_at_start(kExitFailure, e.what());
  }
}

}  // namespace sluice
