// `sluice params`: the SLUICE_* environment switches (core/params.h's table) with their class,
// default, the value this environment gives them and what each does.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "app/commands.h"
#include "core/error.h"
#include "core/params.h"

namespace sluice {

namespace {

void params_command(bool user_only) {
  std::size_t width = 0;
  for (const Param& p : params()) width = std::max(width, std::string(p.name).size());
  std::printf("%-*s  %-7s  %-7s  %-8s  %s\n", static_cast<int>(width), "name", "class", "default", "now", "what it does");
  for (const Param& p : params()) {
    if (user_only && p.cls != ParamClass::User) continue;
    const char* env = std::getenv(p.name);
    const std::string now = env && *env ? env : "-";
    std::string what = p.description;
    if (p.kind == ParamKind::On) what += " [0|1]";
    else if (*p.values) what += str(" [", p.values, "]");
    if (p.read == ParamRead::Once) what += " (read once a process)";
    if (env && *env) {   // say so here rather than at the run that reads it
      try {
        check_param_value(p, env);
      } catch (const UsageError& e) {
        what += str(" -- REFUSED: ", e.what());
      }
    }
    std::printf("%-*s  %-7s  %-7s  %-8s  %s\n", static_cast<int>(width), p.name, param_class_name(p.cls), *p.def ? p.def : "-",
                now.c_str(), what.c_str());
  }
}

}  // namespace

void add_params_command(CLI::App& app) {
  auto user_only = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("params", "List the SLUICE_* environment switches: name, class (user, test, measure), "
                                               "default, the value now set, and what each does");
  sub->add_flag("--user-only", *user_only, "only the switches for users (the rest are for tests and measurements)");
  sub->callback([user_only] { params_command(*user_only); });
}

}  // namespace sluice
