#!/usr/bin/env bash
# README command 2: install the dependencies (Slurm and munge too, for the slurm tests), build, and
# run every test, three at a time (SLUICE_TEST_JOBS=1 runs them one by one): most test files wait on
# process starts, mpirun, throttled ranks and daemons more than they compute (python/test_zoo.py kept
# 0.65 of a core busy, mpi/test_errors.py 0.6, on the 2-core VM), so two at a time left CI's second
# core idle much of the time.  Tests labelled gpu skip with a message when no GPU is visible.
#   data_tools/run-tests.sh            all labels
#   data_tools/run-tests.sh -L unit    only the unit tests (any ctest arguments)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Each phase's seconds, so that a slow CI run says where its time went.
since=$(date +%s)
phase() { echo "run-tests: $1 took $(( $(date +%s) - since )) s" >&2; since=$(date +%s); }
SLUICE_WITH_SLURM=1 "$root/data_tools/install-deps.sh"
phase "installing the dependencies"
"$root/data_tools/build.sh"
phase "the build"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
ctest --test-dir "$root/build" --output-on-failure --timeout 900 --parallel "${SLUICE_TEST_JOBS:-3}" "$@" || status=$?
phase "the tests"
exit $status
