#!/usr/bin/env bash
# The task heads on a GPU host in one call (bundle as tests/gpu/engine_run.sh says): the CUDA gtests
# of sluice.Detections and the embedding head against the CPU engine, then
# tests/python/test_task_outputs.py on the CUDA engine (SLUICE_TASK_DEVICE=cuda): detections
# against torchvision.ops.batched_nms and the transformers post-processing, embeddings against
# onnxruntime.
#   bash tests/gpu/task_outputs_run.sh 2>&1 | tail -30
set -uo pipefail
DEADLINE=${DEADLINE:-300}
STEPS=${STEPS:-gtest pytest}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
status=0
if want gtest; then
  run "gtest detections" 120 "$R" "$T" --gtest_color=no --gtest_filter='CudaDetections.*:CudaEmbedding.*' \
    > "$OUT/task_gtest.log" 2>&1 || status=1
  tail -5 "$OUT/task_gtest.log"
fi
if want pytest; then
  # torchvision of the host's own python (the GPU host has no /usr/bin/python3 torch of its own).
  run "pytest task outputs (cuda)" 240 env SLUICE_BIN="$S" SLUICE_ROOT="$PWD" SLUICE_TASK_DEVICE=cuda \
    SLUICE_TORCH_PYTHON="${SLUICE_TORCH_PYTHON:-python3}" "$R" python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_task_outputs.py > "$OUT/task_pytest.log" 2>&1 || status=1
  tail -5 "$OUT/task_pytest.log"
fi
exit $status
