#!/usr/bin/env bash
# Builds the CPU-only unit tests, the fuzz replay drivers and the sluice binary with AddressSanitizer
# and UndefinedBehaviorSanitizer in build-asan/, and runs them; any report fails the run.
#
#   data_tools/asan.sh            unit tests + fuzz corpus replays (ctest -L unit)
#   data_tools/asan.sh --all      also the python and mpi tests, driving the sanitized binary
#
# Prints one line at the end: the result and how long the build and the tests took.  It does not
# run in CI (it takes longer than CI's budget on two cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-asan"
labels=(-L unit)
[ "${1:-}" = "--all" ] && labels=(-L 'unit|python|mpi')

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
start=$(date +%s)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
nice cmake --build "$build" -j"$(nproc)" >/dev/null
built=$(date +%s)

# Leaks: MPI, OpenBLAS and HDF5 keep allocations until exit by design, so leak reports are off; the
# rest stops at the first report.  The python and mpi tests run the binary through these too.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
set +e
nice ctest --test-dir "$build" "${labels[@]}" --output-on-failure --timeout 1800 -j1
status=$?
set -e
echo "asan: $([ $status = 0 ] && echo PASSED || echo FAILED) (build $((built - start)) s, tests $(( $(date +%s) - built )) s, labels ${labels[*]:1})"
exit $status
