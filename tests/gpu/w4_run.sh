#!/usr/bin/env bash
# Small jobs on a GPU host in one call: the algorithm cache's GPU tests (a warm second build measures
# nothing), then W4, files to masks, against PyTorch (data_tools/bench_w4.py: photos and model made
# there, Sluice cold and warm, 2,000 and 8,000 photos).  Builds nothing: bundle first, from the
# repository root,
#   /work/shared/device/bundle.sh .devrt build/sluice build/tests/sluice_gpu_tests
#   tar cJf devrt.tar.xz .devrt          # over the 64 MiB carry limit otherwise
# and there:
#   tar xJf devrt.tar.xz && bash tests/gpu/w4_run.sh 2>&1 | tail -40
# Steps (STEPS, default all) under one deadline (DEADLINE s, 570); COUNTS (2000,8000) the photo
# counts, BATCH (64) the batch size of both sides, SIDES (pytorch,sluice) which sides run.  Logs: $OUT/gtest.log, $OUT/bench.log, $OUT/w4.txt, $OUT/w4.json, $OUT/logs/.
set -uo pipefail
DEADLINE=${DEADLINE:-570}
STEPS=${STEPS:-gtest bench}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"

echo "host $(hostname), $(date -u +%FT%TZ), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
host_nvjpeg

if want gtest; then
  run "gtest algorithm cache" 90 "$R" "$T" --gtest_color=no \
      --gtest_filter='CudaEngine.AlgorithmCacheRoundTrip:CudaEngine.ASecondBf16BuildOfASegmentationModelMeasuresNothing' \
      > "$OUT/gtest.log" 2>&1
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|Failure|Expected|Which is' "$OUT/gtest.log" | head -20
fi
if want bench; then
  run "bench_w4" $(( $(left) - 5 )) python3 data_tools/bench_w4.py --sluice "$S" --runner "$R" \
      --work "${WORK:-/tmp/sluice-w4}" --counts "${COUNTS:-2000,8000}" --batch "${BATCH:-64}" --sides "${SIDES:-pytorch,sluice}" --out "$OUT" --deadline $(( $(left) - 15 )) > "$OUT/bench.log" 2>&1
  grep -E 'set-up:|FAILED|missing|skipped|exit [0-9]' "$OUT/bench.log" | grep -v warmup | cut -c1-230
  cat "$OUT/w4.txt" 2>/dev/null || tail -20 "$OUT/bench.log"
fi
echo "=== done after $SECONDS s"
