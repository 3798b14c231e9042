#!/usr/bin/env bash
# Every GPU check of the CUDA engine in one pass, for one call on the lent H200
# (/work/shared/device/README.md).  Run from the repository root after bundling:
#   /work/shared/device/bundle.sh .devrt build/sluice build/tests/sluice_gpu_tests build/tests/libsluice_nvtx_probe.so
#   set -o pipefail; bash tests/gpu/device_run.sh 2>&1 | tee $OUT/log
# RT names the bundle folder (default .devrt).
# Steps, most important first, each under a timeout and all under one deadline (DEADLINE seconds,
# default 540) so the call never runs past its limit: the gtest suite, compare_torch.py on
# ResNet-50 and DeepLabV3, the MPI/NCCL weight broadcast, compute-sanitizer, engine throughput.
# Detailed logs go to $OUT/*.log; this script prints the summary lines.
set -uo pipefail
OUT=${OUT:-/tmp/sluice-device}
mkdir -p "$OUT"
DEADLINE=${DEADLINE:-540}
STEPS=${STEPS:-gtest compare mpi sanitizer bench}
RT=${RT:-.devrt}
R="$PWD/$RT/run"
T="$PWD/$RT/bin/sluice_gpu_tests"
export SLUICE_BIN="$PWD/$RT/bin/sluice" SLUICE_ROOT="$PWD"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SECONDS=0

left() { echo $((DEADLINE - SECONDS)); }
# run NAME LIMIT CMD...: runs CMD under min(LIMIT, time left); prints rc and seconds.
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

echo "host $(hostname), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader

if want gtest; then
  # One process per group: an illegal address in one kernel poisons its whole CUDA context, and
  # must not take the other groups' results with it.
  GTEST_GROUPS="MemoryPlan.*:AlgoCacheFile.* CudaDevice.* CudaEngine.* NvtxInjection.* OpsIndices.*
    Precisions/Conv.*/fp32 Precisions/Conv.*/tf32 Precisions/Conv.*/fp16 Precisions/Conv.*/bf16
    Precisions/Ops.*/fp32 Precisions/Ops.*/tf32 Precisions/Ops.*/fp16 Precisions/Ops.*/bf16
    Precisions/Models.*:ModelsIndices.*"
  set -f   # the filters are not file patterns
  for g in $GTEST_GROUPS; do
    run "gtest $g" 90 "$R" "$T" --gtest_color=no --gtest_filter="$g" >> "$OUT/gtest.log" 2>&1
    echo "    $(grep -cE '^\[       OK \]' "$OUT/gtest.log") ok so far"
  done
  # The channels-last path at fp32/tf32 too (it is the default only for fp16/bf16).
  for g in "Precisions/Conv.*/fp32:Precisions/Conv.*/tf32" "Precisions/Ops.*/fp32:Precisions/Ops.*/tf32" \
           "Precisions/Models.*/fp32:Precisions/Models.*/tf32"; do
    SLUICE_CUDA_LAYOUT=nhwc run "gtest nhwc $g" 90 "$R" "$T" --gtest_color=no --gtest_filter="$g" >> "$OUT/gtest-nhwc.log" 2>&1
  done
  set +f
  echo "--- forced channels-last at fp32/tf32:"
  grep -E '^\[  (FAILED|PASSED)  \]' "$OUT/gtest-nhwc.log" | sort | uniq -c
  grep -B1 -A8 -E 'Failure$' "$OUT/gtest-nhwc.log" | head -60
  echo "--- default layouts:"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/gtest.log" | sort -u | head -80
  grep -E '^\[  (PASSED|SKIPPED) |tests ran' "$OUT/gtest.log" | sort | uniq -c | head -20
  grep -B1 -A10 -E 'Failure$' "$OUT/gtest.log" | grep -vE '^--$' | head -200
fi

if want compare; then
  run compare_torch 200 python3 tests/gpu/compare_torch.py --sluice "$R $SLUICE_BIN" \
      --workdir /tmp/sluice-ct > "$OUT/compare.log" 2>&1
  grep -vE 'Warning|warn|_C\._jit|^\s*$' "$OUT/compare.log" | tail -25
fi

if want mpi; then
  for np in 1 2; do
    run "mpi np=$np" 60 "$R" mpirun -np $np --oversubscribe "$T" --gtest_filter='WeightBroadcast*' >> "$OUT/mpi.log" 2>&1
    grep -E '^\[  (FAILED|PASSED) |^\[ weights|Failure' "$OUT/mpi.log" | tail -6
  done
fi

if want sanitizer; then
  run memcheck 90 "$R" "$SAN" --tool memcheck --error-exitcode 9 "$T" \
      --gtest_filter='Precisions/Ops.ChannelsLastConsumersMatchCpu/bf16:OpsIndices.*:Precisions/Ops.ResizeModesAndCoordinatesMatchCpu/fp32:Precisions/Ops.PadModesMatchCpu/fp32' \
      >> "$OUT/sanitizer.log" 2>&1
  grep -E 'ERROR SUMMARY|^\[  (FAILED|PASSED) ' "$OUT/sanitizer.log" | tail -4
  run racecheck 60 "$R" "$SAN" --tool racecheck --error-exitcode 9 "$T" \
      --gtest_filter='OpsIndices.TopK*:Precisions/Ops.SoftmaxOverChannelsAndLastAxisMatchesCpu/fp32:Precisions/Ops.ReduceMeanOverBlocksAndSplitAxesMatchesCpu/fp32:Precisions/Ops.GlobalAveragePoolMatchesCpu/fp32' \
      >> "$OUT/sanitizer.log" 2>&1
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (FAILED|PASSED) ' "$OUT/sanitizer.log" | tail -4
fi
if want bench; then
  # BENCH_DEEPLAB / BENCH_RESNET: precision:layout configurations; PROFILE=1 prints per-step times.
  for m in "deeplabv3_resnet50 3,512,512 16 argmax ${BENCH_DEEPLAB:-bf16:nhwc tf32:nchw fp32:nchw}" \
           "resnet50 3,224,224 128 logits ${BENCH_RESNET:-bf16:nhwc tf32:nchw}"; do
    set -- $m
    model=$1 shape=$2 batch=$3 head=$4
    shift 4
    [ -f "/tmp/sluice-ct/$model.onnx" ] || { echo "no /tmp/sluice-ct/$model.onnx for the benchmark"; continue; }
    SLUICE_BENCH_MODEL=/tmp/sluice-ct/$model.onnx SLUICE_BENCH_SHAPE=$shape SLUICE_BENCH_BATCH=$batch SLUICE_BENCH_HEAD=$head \
    SLUICE_BENCH_CONFIGS="$*" SLUICE_CUDA_PROFILE=${PROFILE:-0} \
      run "bench $model" 120 "$R" "$T" --gtest_also_run_disabled_tests --gtest_filter='Bench.*' >> "$OUT/bench.log" 2>&1
    grep -E '^\[ bench|Failure|what' "$OUT/bench.log" | tail -8
  done
  grep -E '^\[ profile' "$OUT/bench.log" | head -120
  run "torch bench" 60 python3 tests/gpu/torch_bench.py --model deeplabv3_resnet50 --batch 16 --size 512 \
      --configs ${TORCH_CONFIGS:-tf32:nchw bf16:channels_last} >> "$OUT/bench.log" 2>&1
  grep -E '^\[ torch' "$OUT/bench.log" | tail -8
fi

echo "=== done after $SECONDS s"
