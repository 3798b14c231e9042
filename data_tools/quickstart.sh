#!/usr/bin/env bash
# README command 1: install what the binary needs, build the binary alone (the tests are command 2's),
# and run the quickstart job (a tiny CNN over 512 synthetic images; on the GPU when there is one,
# else on the CPU).  Outputs go to sluice-out/quickstart (replaced on every run); `build/sluice
# inspect` summarizes them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLUICE_DEPS=run "$root/data_tools/install-deps.sh"
"$root/data_tools/build.sh" --quickstart
cd "$root"
build/sluice run --config jobs/quickstart.toml --overwrite "$@"
build/sluice inspect sluice-out/quickstart
