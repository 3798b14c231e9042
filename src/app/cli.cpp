// PLACEHOLDER: the CLI is being written.
#include "app/cli.h"
#include <cstdio>
#include "sluice/version.h"
namespace sluice {
int cli_main(int, char**) { std::printf("sluice %s (%s)\n", SLUICE_VERSION, SLUICE_GIT_COMMIT); return 0; }
}  // namespace sluice
