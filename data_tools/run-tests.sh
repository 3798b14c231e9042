#!/usr/bin/env bash
# README command 2: install the dependencies (Slurm and munge too, for the slurm tests), build, and
# run every test, two at a time (SLUICE_TEST_JOBS=1 runs them one by one).  Tests labelled gpu skip
# with a message when no GPU is visible.
#   data_tools/run-tests.sh            all labels
#   data_tools/run-tests.sh -L unit    only the unit tests (any ctest arguments)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLUICE_WITH_SLURM=1 "$root/data_tools/install-deps.sh"
"$root/data_tools/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$root/build" --output-on-failure --timeout 900 --parallel "${SLUICE_TEST_JOBS:-2}" "$@"
