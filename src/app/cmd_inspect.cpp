// PLACEHOLDER: the real `sluice inspect` replaces this file.
#include <CLI/CLI.hpp>
#include "app/commands.h"
namespace sluice {
void add_inspect_command(CLI::App& app) { app.add_subcommand("inspect", "(not built yet)"); }
}  // namespace sluice
