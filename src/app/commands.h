#pragma once
// The subcommands.  Each file adds its options to the CLI11 app and, when it is the chosen
// subcommand, runs through its callback; run_command needs argc/argv for MPI_Init.
#include <functional>
#include <map>
#include <string>

namespace CLI {
class App;
}

namespace sluice {

struct Commands {
  std::map<std::string, std::function<int(int, char**)>> handlers;
  int run(const std::string& name, int argc, char** argv) {
    auto it = handlers.find(name);
    return it == handlers.end() ? 0 : it->second(argc, argv);
  }
};

void add_run_command(CLI::App& app, Commands& commands);   // app/cmd_run.cpp
void add_inspect_command(CLI::App& app);                   // app/cmd_inspect.cpp
void add_forward_command(CLI::App& app);                   // app/cmd_forward.cpp
void add_export_command(CLI::App& app);                    // app/cmd_export.cpp
void add_launch_commands(CLI::App& app);                   // app/cmd_launch.cpp: mpirun, srun (help only)
int launch_command(const std::string& launcher, int argc, char** argv);  // the arguments after it
void add_profile_command(CLI::App& app);                   // app/cmd_profile.cpp
void add_check_command(CLI::App& app);                     // app/cmd_check.cpp
void add_tokenize_command(CLI::App& app);                  // app/cmd_tokenize.cpp
void add_params_command(CLI::App& app);                    // app/cmd_params.cpp

}  // namespace sluice
