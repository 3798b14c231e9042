#!/usr/bin/env bash
# Configures and builds Sluice in ./build (Release).  The CUDA backend is built when nvcc is found
# (CUDA in /usr/local/cuda is put on PATH first); pass -DSLUICE_CUDA=OFF in CMAKE_ARGS to skip it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$root/build" -j "$(nproc)"
