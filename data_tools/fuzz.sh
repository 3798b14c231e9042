#!/usr/bin/env bash
# Runs each libFuzzer target (fuzz/README.md) for N minutes, one after another at low priority, and
# prints a table of executions, corpus growth and findings.  A benchmark-like run, not part of CI
# (CI replays the corpora and the saved crashes: ctest -R fuzz_replay).
#
#   data_tools/fuzz.sh [MINUTES] [TARGET...]     default: 10 minutes each, targets onnx graph job hdf5
#
# Builds build-fuzz/ with clang (-DSLUICE_FUZZ=ON: libFuzzer, ASan, UBSan; installs clang with apt
# when it is missing).  The seeds in fuzz/corpus/<target> are read, never written; what the fuzzer
# learns goes to build-fuzz/corpus/<target> and is kept between runs.  Each finding is saved as
# fuzz/crashes/<target>/<kind>-<sha1> (crash, leak, timeout, oom): fix it, then commit the file,
# and ctest fuzz_replay_<target> replays it forever after.
#   SLUICE_FUZZ_JOBS=N   parallel fuzzing processes per target (default 1: the machine is shared)
#   SLUICE_FUZZ_RSS_MB   memory limit per process (default 3072)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
minutes=${1:-10}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(onnx graph job hdf5 image)
jobs=${SLUICE_FUZZ_JOBS:-1}
rss=${SLUICE_FUZZ_RSS_MB:-3072}
build="$root/build-fuzz"

# What each target's inputs look like: the largest input worth trying (bytes).
max_len() {
  case "$1" in
    onnx) echo 65536 ;;   # quickstart.onnx is 40 KB
    graph) echo 2048 ;;   # a recipe: a byte per choice
    job) echo 8192 ;;
    hdf5) echo 16384 ;;
    image) echo 32768 ;;  # the seeds are small JPEGs and PNGs
  esac
}

# libhdf5 (not instrumented, not ours) leaks on some corrupt files and asks malloc for terabytes
# when a corrupt size field says so; in a normal build that malloc returns NULL and HDF5 reports an
# error, so the hdf5 target lets it (and does not count the library's leaks).
sanitizer_env() {
  case "$1" in
    hdf5) echo "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0" ;;
    *) echo "ASAN_OPTIONS=detect_leaks=1" ;;
  esac
}

if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "fuzz: installing clang (libFuzzer) with apt" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang >/dev/null
fi

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_CUDA=OFF \
  -DSLUICE_TESTS=OFF -DSLUICE_FUZZ=ON >/dev/null
nice cmake --build "$build" -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null

# A finding whose fault is inside libhdf5 (the first stack frame that is not the sanitizer's, the
# fuzzer's or malloc's) is the library's, not ours.  A crash of that kind moves to
# fuzz/library-crashes/<target>/ (one file per faulting function), which
# tests/python/test_crafted_inputs.py runs through the binary to see the crash guard turn it into
# exit 3; an out-of-memory of that kind (libhdf5 mallocs what a corrupt size field says) is counted
# and dropped.  What stays in fuzz/crashes/<target>/ is ours to fix.
triage() {
  local t=$1 f frame fn kind lib="$root/fuzz/library-crashes/$t"
  lib_found=0
  for f in $(find "$root/fuzz/crashes/$t" -type f -newer "$build/fuzz-$t.start" ! -name '.*'); do
    frame=$(env "$(sanitizer_env "$t")" "$build/fuzz/fuzz_$t" -rss_limit_mb="$rss" "$f" 2>&1 |
            grep -E '^ +#[0-9]+ ' |
            grep -vE 'interceptor|libclang_rt|asan|__sanitizer|fuzzer::|memcpy|memmove|memset| in malloc | in calloc | in realloc | in operator new' |
            head -1 || true)
    grep -q 'libhdf5' <<<"$frame" || continue
    lib_found=$((lib_found + 1))
    fn=$(sed -nE 's/.* in ([A-Za-z0-9_]+) .*/\1/p' <<<"$frame")
    kind=$(basename "$f" | cut -d- -f1)
    if [ "$kind" = crash ] && [ -n "$fn" ] && ! ls "$lib"/*"-$fn" >/dev/null 2>&1; then
      mkdir -p "$lib"
      mv "$f" "$lib/$(basename "$f")-$fn"
      echo "fuzz: $(basename "$f"): a fault inside libhdf5 ($fn), kept in fuzz/library-crashes/$t/" >&2
    else
      rm "$f"
      echo "fuzz: $(basename "$f"): a $kind inside libhdf5 (${fn:-no symbol}), counted and dropped" >&2
    fi
  done
}

results=()
for t in "${targets[@]}"; do
  seeds="$root/fuzz/corpus/$t"
  work="$build/corpus/$t"
  crashes="$root/fuzz/crashes/$t"
  mkdir -p "$work" "$crashes"
  before=$(find "$crashes" -type f ! -name '.*' | wc -l)
  log="$build/fuzz-$t.log"
  touch "$build/fuzz-$t.start"
  echo "fuzz: $t for $minutes min (log: $log)" >&2
  dict=()
  [ -f "$root/fuzz/$t.dict" ] && dict=(-dict="$root/fuzz/$t.dict")
  start=$(date +%s)
  # Fork mode with -ignore_*: a finding is saved and the run goes on for the whole time.
  set +e
  env "$(sanitizer_env "$t")" nice -n 19 "$build/fuzz/fuzz_$t" "$work" "$seeds" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 \
    -ignore_ooms=1 -max_total_time=$((minutes * 60)) -max_len="$(max_len "$t")" -timeout=30 -rss_limit_mb="$rss" \
    -artifact_prefix="$crashes/" -print_final_stats=1 "${dict[@]}" >"$log" 2>&1
  status=$?
  set -e
  seconds=$(( $(date +%s) - start ))
  # Fork mode prints "#N: cov: C ft: F corp: K exec/s: E ..." lines; the last one holds the totals.
  last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -1 || true)
  execs=$(sed -nE 's/^#([0-9]+): .*/\1/p' <<<"$last")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(find "$work" -type f | wc -l)
  triage "$t"
  found=$(( $(find "$crashes" -type f ! -name '.*' | wc -l) - before ))
  results+=("$(printf '%-6s %8s %12s %8s %8s %8s %8s %7s' "$t" "$seconds" "${execs:-?}" "${cov:-?}" "$corp" "$found" \
               "$lib_found" "$status")")
done

# findings: new inputs in fuzz/crashes/<target> (ours to fix); library: faults inside libhdf5
printf '%-6s %8s %12s %8s %8s %8s %8s %7s\n' target seconds executions coverage corpus findings library status
printf '%s\n' "${results[@]}"
