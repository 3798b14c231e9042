#!/usr/bin/env bash
# Configures and builds Sluice in ./build (Release).
#   data_tools/build.sh              everything: the binary and the tests; the CUDA backend when nvcc
#                                    is found (CUDA in /usr/local/cuda is put on PATH first)
#   data_tools/build.sh --quickstart the binary alone (README command 1); the CUDA backend only
#                                    when a GPU is visible too, since without one the binary runs on
#                                    the CPU anyway
# Extra CMake arguments go in CMAKE_ARGS (e.g. -DSLUICE_CUDA=OFF to skip the CUDA backend).  Each
# mode sets SLUICE_TESTS and SLUICE_CUDA itself, so a tree configured by one builds right by the other.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
cuda=OFF
command -v nvcc >/dev/null && cuda=ON
if [ "${1:-}" = --quickstart ]; then
  tests=OFF targets=(--target sluice)
  nvidia-smi -L >/dev/null 2>&1 || cuda=OFF
else
  tests=ON targets=()
fi
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=$tests -DSLUICE_CUDA=$cuda ${CMAKE_ARGS:-} >/dev/null
cmake --build "$root/build" -j "$(nproc)" "${targets[@]}"
