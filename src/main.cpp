// sluice: the command-line entry point.  Everything else lives in sluice_lib.
#include "app/cli.h"

int main(int argc, char** argv) { return sluice::cli_main(argc, argv); }
