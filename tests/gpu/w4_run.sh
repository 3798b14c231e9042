#!/usr/bin/env bash
# Small jobs on a GPU host in one call: the algorithm cache's GPU tests (a warm second build measures
# nothing), then W4, files to masks, against PyTorch (data_tools/bench_w4.py: photos and model made
# there, Sluice cold and warm, 2,000 and 8,000 photos).  Builds nothing: bundle first, from the
# repository root,
#   /work/shared/device/bundle.sh .devrt build/sluice build/tests/sluice_gpu_tests
#   tar cJf devrt.tar.xz .devrt          # over the 64 MiB carry limit otherwise
# and there:
#   tar xJf devrt.tar.xz && bash tests/gpu/w4_run.sh 2>&1 | tail -40
# Steps (STEPS, default all: gtest bench profile) under one deadline (DEADLINE s, 570); COUNTS
# (2000,8000) the photo counts, BATCH (64) the batch size of both sides, SIDES (pytorch,sluice) which
# sides run, VARIANTS (both) which Sluice ways (bench_w4.py --variants: both | during | after),
# GTEST_FILTER the GPU tests of the gtest step (default: the algorithm cache's and the autotune's).
# The profile step times the bench's model (made by the bench step) with `sluice profile` at each
# --autotune mode and an empty cache: the forward pass each mode's choices give (steady state,
# compute alone) and how long each took to build.  Logs: $OUT/gtest.log, $OUT/bench.log,
# $OUT/w4.txt, $OUT/w4.json, $OUT/profile.txt, $OUT/logs/.
set -uo pipefail
DEADLINE=${DEADLINE:-570}
STEPS=${STEPS:-gtest bench profile}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"

echo "host $(hostname), $(date -u +%FT%TZ), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
host_nvjpeg

if want gtest; then
  run "gtest algorithm cache" 90 "$R" "$T" --gtest_color=no \
      --gtest_filter="${GTEST_FILTER:-CudaEngine.AlgorithmCacheRoundTrip:CudaEngine.ASecondBf16BuildOfASegmentationModelMeasuresNothing:CudaEngine.QuickAutotune*:CudaEngine.ACachedChoice*}" \
      > "$OUT/gtest.log" 2>&1
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|Failure|Expected|Which is' "$OUT/gtest.log" | head -20
fi
# The profile step's three builds and replays need about 40 s after the bench.
reserve=0
want profile && reserve=45
if want bench; then
  run "bench_w4" $(( $(left) - 5 - reserve )) python3 data_tools/bench_w4.py --sluice "$S" --runner "$R" \
      --work "${WORK:-/tmp/sluice-w4}" --counts "${COUNTS:-2000,8000}" --batch "${BATCH:-64}" --sides "${SIDES:-pytorch,sluice}" --variants "${VARIANTS:-both}" --out "$OUT" --deadline $(( $(left) - 15 - reserve )) > "$OUT/bench.log" 2>&1
  grep -E 'set-up:|FAILED|missing|skipped|exit [0-9]' "$OUT/bench.log" | grep -v warmup | cut -c1-230
  cat "$OUT/w4.txt" 2>/dev/null || tail -20 "$OUT/bench.log"
fi
if want profile; then
  W=${WORK:-/tmp/sluice-w4}
  counts=${COUNTS:-2000,8000}
  BIG=${counts##*,}
  if [ -f "$W/deeplabv3_resnet50.onnx" ] && [ -d "$W/photos-${BIG}" ]; then
    : > "$OUT/profile.txt"
    for mode in ${MODES:-full quick off}; do
      run "profile --autotune $mode" 40 "$R" "$S" profile --model "$W/deeplabv3_resnet50.onnx" --input "$W/photos-${BIG}" \
          --resize 512x512 --batch-size "${BATCH:-64}" --precision bf16 --algo-cache none --autotune "$mode" \
          --replays 20 --no-peaks --top 0 > "$OUT/profile-$mode.log" 2>&1
      echo "autotune $mode: $(grep -E '^engine:' "$OUT/profile-$mode.log" | sed 's/.*built in/built in/'); $(grep -E '^forward pass:' "$OUT/profile-$mode.log" | cut -d';' -f1)" | tee -a "$OUT/profile.txt"
    done
  else
    echo "=== profile: skipped (no model or photos from the bench step in $W)"
  fi
fi
echo "=== done after $SECONDS s"
