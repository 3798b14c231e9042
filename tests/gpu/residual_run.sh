#!/usr/bin/env bash
# On the GPU host, in one call: the GPU tests of the fp32 residual stream, LayerNorm statistics,
# ScatterND reductions, Einsum diagonals, GatherND batch dims and Resize antialias, then the bf16
# accuracy of the full-size transformer models (data_tools/fullsize_accuracy.py) with the stream
# (as built) and, for the ViT-style models, without it (SLUICE_CUDA_RESIDUAL_FP32=0).  Run from a
# checkout holding BUNDLE (a packed .devrt, ../shared/device/README.md):
#     BUNDLE=.devgo-x/devrt.tar.xz bash tests/gpu/residual_run.sh      (results in $OUT)
set -uo pipefail
: "${BUNDLE:?set BUNDLE to the packed .devrt}" "${OUT:=/tmp/residual-run}"
mkdir -p "$OUT"
tar xJf "$BUNDLE"
export SLUICE_BIN=$PWD/.devrt/bin/sluice SLUICE_ROOT=$PWD SLUICE_NVTX_PROBE=$PWD/.devrt/bin/libsluice_nvtx_probe.so
timeout 120 .devrt/run .devrt/bin/sluice_gpu_tests \
  --gtest_filter='ResidualStream.*:*LayerNormStatistics*:*ScatterEinsum*:*TransformerOps*' > "$OUT/gtest.txt" 2>&1
echo "gtest exit $?"
grep -E "residual \]|FAILED|PASSED|Failure" "$OUT/gtest.txt" | head -40
models=vit_b_16,vit_small_patch14_dinov2,deit_small_patch16_224,clip_vit_b16,swin_t,segformer_b0,convnext_tiny
PYTHONUNBUFFERED=1 timeout 300 python3 data_tools/fullsize_accuracy.py --sluice ".devrt/run .devrt/bin/sluice" \
  --only "$models" --precisions bf16 --deadline 240 2>&1 | grep -vi warn | tee "$OUT/fullsize.txt"
if [ "${WITHOUT:-1}" = 1 ]; then
  SLUICE_CUDA_RESIDUAL_FP32=0 PYTHONUNBUFFERED=1 timeout 200 python3 data_tools/fullsize_accuracy.py \
    --sluice ".devrt/run .devrt/bin/sluice" --only vit_b_16,vit_small_patch14_dinov2 --precisions bf16 --deadline 150 2>&1 |
    grep -vi warn | tee "$OUT/fullsize-without-stream.txt"
fi
