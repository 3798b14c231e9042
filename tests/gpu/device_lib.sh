# shellcheck shell=bash disable=SC2034  # R, S, T and SAN are for the scripts that source it
# Shared by the scripts that run on a GPU host (device_run.sh, engine_run.sh, job_run.sh, ...):
# the bundle's paths and steps under one deadline so a call never runs past its limit.  Source it
# from the repository root after setting DEADLINE (seconds) and STEPS (the steps that run); it sets
#   OUT  the folder whose files come back (default /tmp/sluice-device; created)
#   RT   the bundle folder (default .devrt): R its runner, S its sluice, T its sluice_gpu_tests
#   SAN  compute-sanitizer
OUT=${OUT:-/tmp/sluice-device}
mkdir -p "$OUT"
RT=${RT:-.devrt}
R="$PWD/$RT/run"
S="$PWD/$RT/bin/sluice"
T="$PWD/$RT/bin/sluice_gpu_tests"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export PYTHONUNBUFFERED=1
SECONDS=0
left() { echo $((DEADLINE - SECONDS)); }
# run NAME LIMIT CMD...: runs CMD under min(LIMIT, time left); prints its status and duration.
run() {
  local name=$1 limit=$2
  shift 2
  local l
  l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -le 5 ]; then echo "=== $name: skipped (deadline)"; return 99; fi
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s): $*"
  timeout -k 5 "$limit" "$@"
  local rc=$?
  echo "=== $name: rc=$rc after $((SECONDS - t0)) s"
  return $rc
}
want() { [[ " $STEPS " == *" $1 "* ]]; }
# The bundle may carry the build machine's nvJPEG (PyPI's wheel); the host's toolkit copy is the
# one that matches its driver, so the bundle's is set aside where the host has one.
host_nvjpeg() {
  if [ -e "$RT/lib/libnvjpeg.so.13" ] && [ -e /usr/local/cuda/lib64/libnvjpeg.so.13 ]; then
    mkdir -p "$RT/unused" && mv "$RT/lib/libnvjpeg.so.13" "$RT/unused/"
  fi
}
