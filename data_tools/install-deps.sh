#!/usr/bin/env bash
# Installs everything Sluice needs to build, run and test on Debian 12 / Ubuntu 22.04+.
# Idempotent and non-interactive: apt packages are installed only when missing, pip packages are
# pinned in data_tools/requirements.txt.  Used by both README commands and by .ci/run.
#   SLUICE_SKIP_APT=1   skip the apt step (no root)
#   SLUICE_SKIP_PIP=1   skip the pip step
#   SLUICE_WITH_SLURM=1 also install Slurm and munge (the slurm-labelled tests need them)
#   SLUICE_DEPS=run     only what building and running Sluice needs (README command 1): no test
#                       framework, no torch, no Python packages but the wheels the binary links
#                       (pyarrow's Arrow and Parquet for Parquet inputs; nvJPEG's for a GPU build)
#   SLUICE_PYTHON=...   the Python whose pip installs the wheels (default python3); CMake asks the
#                       same one for pyarrow (cmake/Pyarrow.cmake)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nvjpeg_wheel=13.2.3.58   # PyPI nvidia-nvjpeg (CUDA 13), only where the toolkit lacks nvJPEG

deps=${SLUICE_DEPS:-all}
apt_pkgs=(build-essential cmake pkg-config git
          libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools libcli11-dev
          libonnx-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev libopenblas-dev
          libturbojpeg0-dev libspng-dev
          libicu-dev libpcre2-dev    # src/text/: Unicode normalization and properties, tokenizer.json's regexes
          python3-pip)               # the pyarrow wheel (Parquet inputs): Debian 12 packages no Arrow
if [ "$deps" != run ]; then
  apt_pkgs+=(libgtest-dev python3-torch python3-torchvision python3-numpy python3-h5py
             iproute2 util-linux mount)   # ip netns, nsenter, unshare: the multinode tests' simulated nodes
fi
if [ "${SLUICE_WITH_SLURM:-0}" = 1 ]; then apt_pkgs+=(slurm-wlm munge); fi

if [ "${SLUICE_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${apt_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "install-deps: apt packages: ${missing[*]}" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

if [ "${SLUICE_SKIP_PIP:-0}" != 1 ]; then
  py=${SLUICE_PYTHON:-python3}
  # PEP 668 distributions refuse pip outside a venv; --break-system-packages is accepted by pip >= 23.0.
  extra=()
  if "$py" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    [ -e "$("$py" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ] && extra+=(--break-system-packages)
  fi
  if [ "$deps" = run ]; then
    # Parquet inputs (src/io/parquet_source.cpp) link the Arrow and Parquet libraries of the pyarrow
    # wheel, pinned in requirements.txt (which the full install takes whole).
    pyarrow_pin=$(grep -oE '^pyarrow==[^ ]+' "$here/requirements.txt")
    "$py" -m pip install -q --disable-pip-version-check "${extra[@]}" "$pyarrow_pin"
  else
    "$py" -m pip install -q --disable-pip-version-check "${extra[@]}" -r "$here/requirements.txt"
  fi
  # nvJPEG (GPU JPEG decoding): part of the CUDA toolkit on GPU hosts, missing from some toolkit
  # installs; PyPI's nvidia-nvjpeg for the toolkit's major version ships the header and library that
  # cmake/FindNvjpeg.cmake then finds in site-packages/nvidia/cuNN.
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  # Only for a CUDA build: the tests' build always compiles it where nvcc is; command 1 only on a GPU host.
  if [ -x "$nvcc" ] && { [ "$deps" != run ] || nvidia-smi -L >/dev/null 2>&1; }; then
    cuda_inc=$(cd "$(dirname "$nvcc")/.." && pwd)/include
    cuda_major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    if [ ! -f "$cuda_inc/nvjpeg.h" ] && [ "$cuda_major" = 13 ]; then
      echo "install-deps: the CUDA toolkit has no nvJPEG: pip nvidia-nvjpeg==$nvjpeg_wheel" >&2
      "$py" -m pip install -q --disable-pip-version-check "${extra[@]}" "nvidia-nvjpeg==$nvjpeg_wheel"
    fi
  fi
fi
echo "install-deps: done" >&2
