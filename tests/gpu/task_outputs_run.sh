#!/usr/bin/env bash
# The task heads on a GPU host in one call (bundle as tests/gpu/engine_run.sh says): the CUDA gtests
# of sluice.Detections and the embedding head against the CPU engine, then
# tests/python/test_task_outputs.py on the CUDA engine (SLUICE_TASK_DEVICE=cuda): detections
# against torchvision.ops.batched_nms and the transformers post-processing, embeddings against
# onnxruntime; with STEPS=fullsize, data_tools/fullsize_tasks.py: DETR-R50, a YOLOv8-style
# ResNet-50 detector, CLIP ViT-B/16 and DPT from a folder of photos to their exported files under
# mpirun -np 2, against onnxruntime, torchvision and transformers (one line per model and precision;
# BENCH photos for the throughput, FULLSIZE_DEADLINE seconds for the checks).
#   bash tests/gpu/task_outputs_run.sh 2>&1 | tail -30
#   STEPS="gtest fullsize" bash tests/gpu/task_outputs_run.sh
set -uo pipefail
DEADLINE=${DEADLINE:-300}
STEPS=${STEPS:-gtest pytest}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
status=0
if want gtest; then
  # SLUICE_ROOT: the prepared-model tests read tests/data of this tree, wherever the binary was built.
  run "gtest detections" 120 env SLUICE_ROOT="$PWD" "$R" "$T" --gtest_color=no --gtest_filter='CudaDetections.*:CudaEmbedding.*' \
    > "$OUT/task_gtest.log" 2>&1 || status=1
  tail -5 "$OUT/task_gtest.log"
fi
if want pytest; then
  # torchvision of the host's own python (the GPU host has no /usr/bin/python3 torch of its own).
  run "pytest task outputs (cuda)" 240 env SLUICE_BIN="$S" SLUICE_ROOT="$PWD" SLUICE_TASK_DEVICE=cuda \
    SLUICE_TORCH_PYTHON="${SLUICE_TORCH_PYTHON:-python3}" "$R" python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_task_outputs.py ${PYTEST_ARGS:-} > "$OUT/task_pytest.log" 2>&1 || status=1
  tail -5 "$OUT/task_pytest.log"
fi
if want fullsize; then
  run "full-size task models" $((${FULLSIZE_DEADLINE:-240} + 90)) env PYTHONUNBUFFERED=1 python3 \
    "$(dirname "${BASH_SOURCE[0]}")/../../data_tools/fullsize_tasks.py" --launch "$R mpirun -np 2 $S" \
    --bench "${BENCH:-128}" --deadline "${FULLSIZE_DEADLINE:-240}" > "$OUT/fullsize.log" 2>&1 || status=1
  grep -E '^(detr|yolo|clip|dpt|---)' "$OUT/fullsize.log"
  grep -q '^---' "$OUT/fullsize.log" || tail -20 "$OUT/fullsize.log"
fi
exit $status
