#!/usr/bin/env bash
# The GEMM branch's check in one call on a GPU host (after unpacking the bundle): the product tests,
# then CLIP ViT-B/16, ConvNeXt-T and ViT-B/16 end to end with the products' algorithm the
# heuristic's first (SLUICE_CUDA_GEMM_TUNE=0) and timed in full (=full), ConvNeXt-T also without and
# with the residual in the product (SLUICE_CUDA_GEMM_RESIDUAL), `sluice profile` of CLIP under both,
# and the bf16 accuracy of CLIP and ConvNeXt-T; each step under the time left of DEADLINE.
#   RT=.devrt DEADLINE=200 bash tests/gpu/gemm_run.sh
set -uo pipefail
DEADLINE=${DEADLINE:-200}
BATCHES=${BATCHES:-12}
# shellcheck source=tests/gpu/device_lib.sh
source tests/gpu/device_lib.sh
host_nvjpeg
export SLUICE_BIN="$S" SLUICE_ROOT="$PWD"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run gtest 40 "$R" "$T" --gtest_filter='GemmResidual.*:GemmTuning.*:Shapes/GemmEpilogue.*:GemmEpilogueFusion.*:CudaEngine.AlgorithmCacheRoundTrip' \
  > "$OUT/gtest.log" 2>&1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ (tuning|epilogue|residual) \]" "$OUT/gtest.log" | head -20
grep -E "^\[  FAILED  \]|Failure" -A3 "$OUT/gtest.log" | head -30
H=SLUICE_CUDA_GEMM_TUNE=0 F=SLUICE_CUDA_GEMM_TUNE=full
run clip 50 python3 data_tools/variant_bench.py "$R $S" "$OUT" clip_vit_b16 "$BATCHES" ${CLIP_PROFILE:-full} "heur:$H" "full:$F" 2>&1 |
  grep -vE "^\s*$" | tee "$OUT/clip.txt" | grep -E "images/s|exported|profile|GEMM|MatMul|Gemm|forward|Attn|by kind"
run convnext 35 python3 data_tools/variant_bench.py "$R $S" "$OUT" convnext_tiny "$BATCHES" - \
  "full:$F,SLUICE_CUDA_GEMM_RESIDUAL=0" "residual:$F,SLUICE_CUDA_GEMM_RESIDUAL=1" 2>&1 | grep -E "images/s|exported"
run vit 40 python3 data_tools/variant_bench.py "$R $S" "$OUT" vit_b_16 "$BATCHES" - "heur:$H" "full:$F" 2>&1 | grep -E "images/s|exported"
l=$(left)
run accuracy "$l" python3 data_tools/fullsize_accuracy.py --sluice "$R $S" --only clip_vit_b16,convnext_tiny --precisions bf16 \
  --batch 4 --deadline $((l - 10)) > "$OUT/accuracy.txt" 2>&1
tail -12 "$OUT/accuracy.txt"
echo "=== done after $SECONDS s"
