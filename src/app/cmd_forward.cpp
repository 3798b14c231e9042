// PLACEHOLDER: the real `sluice forward` replaces this file.
#include <CLI/CLI.hpp>
#include "app/commands.h"
namespace sluice {
void add_forward_command(CLI::App& app) { app.add_subcommand("forward", "(not built yet)"); }
}  // namespace sluice
