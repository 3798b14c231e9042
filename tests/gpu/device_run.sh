#!/usr/bin/env bash
# Every GPU check of the CUDA engine in one pass, for one call on a GPU host
# (/work/shared/device/README.md).  Run from the repository root after bundling:
#   /work/shared/device/bundle.sh .devrt build/sluice build/tests/sluice_gpu_tests build/tests/libsluice_nvtx_probe.so
#   set -o pipefail; bash tests/gpu/device_run.sh 2>&1 | tee $OUT/log
# RT names the bundle folder (default .devrt).  A bundle over the 64 MiB carry limit travels as an xz
# tarball (tar -cJf .devrt-x.tar.xz .devrt-x, carried, then `tar -xJf` there before this script).
# Steps (STEPS, default all but mpi and sanitizer), each under a timeout and all under one deadline
# (DEADLINE seconds, default 540) so the call never runs past its limit, in this order:
#   export     data_tools/export_model.py writes /tmp/sluice-ct/{resnet50,deeplabv3_resnet50}.onnx in the
#              background while the gtest step runs (bench and compare wait for it)
#   gtest      the whole suite in groups, then the conv/op/model tests in the layouts that are not the
#              default of their precision (SLUICE_CUDA_LAYOUT)
#   bench      the engine alone: BENCH_DEEPLAB / BENCH_RESNET list precision:layout[:atrous] configs
#              (per-step times: `sluice profile`, tests/gpu/engine_run.sh)
#   torch      PyTorch eager on DeepLabV3 (TORCH_CONFIGS), then ResNet-50 (TORCH_RESNET, may be empty)
#   compare    compare_torch.py on the exported models (COMPARE_ARGS, e.g. --models deeplabv3_resnet50)
#   mpi        the MPI/NCCL weight broadcast with 1 and 2 ranks
#   sanitizer  compute-sanitizer memcheck and racecheck on sampled tests
# Detailed logs go to $OUT/*.log (at most 8 files come back); this script prints the summary lines.
set -uo pipefail
DEADLINE=${DEADLINE:-540}
STEPS=${STEPS:-export gtest bench torch compare}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
CT=/tmp/sluice-ct
export SLUICE_BIN="$S" SLUICE_ROOT="$PWD"
EXPORTS=()
wait_exports() {
  [ ${#EXPORTS[@]} -eq 0 ] && return
  echo "=== waiting for the model exports ($SECONDS s)"
  wait "${EXPORTS[@]}"
  EXPORTS=()
  ls -la $CT/*.onnx 2>&1 | sed 's/^/    /'
}

echo "host $(hostname), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader

if want export; then
  mkdir -p $CT
  for m in "resnet50 224" "deeplabv3_resnet50 512"; do
    set -- $m
    [ -f "$CT/$1.onnx" ] && continue
    timeout 120 python3 data_tools/export_model.py --model "$1" --out "$CT/$1.onnx" --height "$2" --width "$2" --batch 1 \
      >> "$OUT/export.log" 2>&1 &
    EXPORTS+=($!)
  done
fi

if want gtest; then
  # One process per group: an illegal address in one kernel poisons its whole CUDA context, and
  # must not take the other groups' results with it.
  GTEST_GROUPS="MemoryPlan.*:AtrousLowering.* CudaDevice.* CudaEngine.* NvtxInjection.* OpsIndices.*
    Precisions/Conv.*/fp32 Precisions/Conv.*/tf32 Precisions/Conv.*/fp16 Precisions/Conv.*/bf16
    Precisions/Atrous.*/fp32_* Precisions/Atrous.*/tf32_* Precisions/Atrous.*/fp16_* Precisions/Atrous.*/bf16_*
    Precisions/Ops.*/fp32 Precisions/Ops.*/tf32 Precisions/Ops.*/fp16 Precisions/Ops.*/bf16
    Precisions/Models.*:ModelsIndices.*"
  set -f   # the filters are not file patterns
  for g in $GTEST_GROUPS; do
    run "gtest $g" 90 "$R" "$T" --gtest_color=no --gtest_filter="$g" >> "$OUT/gtest.log" 2>&1
    echo "    $(grep -cE '^\[       OK \]' "$OUT/gtest.log") ok so far"
  done
  # The other layout of each precision: channels-last at fp32, NCHW at tf32 and bf16.
  for lg in "nhwc Precisions/Conv.*/fp32:Precisions/Ops.*/fp32:Precisions/Models.*/fp32" \
            "nchw Precisions/Conv.*/tf32:Precisions/Conv.*/bf16:Precisions/Models.*/tf32:Precisions/Models.*/bf16" \
            "nchw Precisions/Ops.*/tf32:Precisions/Ops.*/bf16"; do
    set -- $lg
    SLUICE_CUDA_LAYOUT=$1 run "gtest $1 $2" 90 "$R" "$T" --gtest_color=no --gtest_filter="$2" >> "$OUT/gtest-layout.log" 2>&1
  done
  set +f
  echo "--- other layouts:"
  grep -E '^\[  (FAILED|PASSED)  \]' "$OUT/gtest-layout.log" | sort | uniq -c
  grep -B1 -A8 -E 'Failure$' "$OUT/gtest-layout.log" | head -60
  echo "--- default layouts:"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/gtest.log" | sort -u | head -80
  grep -E '^\[  (PASSED|SKIPPED) |tests ran' "$OUT/gtest.log" | sort | uniq -c | head -20
  grep -B1 -A10 -E 'Failure$' "$OUT/gtest.log" | grep -vE '^--$' | head -200
fi

bench() {   # bench MODEL SHAPE BATCH HEAD LIMIT CONFIGS...
  local model=$1 shape=$2 batch=$3 head=$4 limit=$5
  shift 5
  [ -f "$CT/$model.onnx" ] || { echo "no $CT/$model.onnx for the benchmark"; return; }
  SLUICE_BENCH_MODEL=$CT/$model.onnx SLUICE_BENCH_SHAPE=$shape SLUICE_BENCH_BATCH=$batch SLUICE_BENCH_HEAD=$head \
  SLUICE_BENCH_CONFIGS="$*" \
    run "bench $model" "$limit" "$R" "$T" --gtest_also_run_disabled_tests --gtest_filter='Bench.*' >> "$OUT/bench.log" 2>&1
  grep -E '^\[ bench|Failure|what' "$OUT/bench.log" | tail -12
}

if want bench; then
  wait_exports
  bench deeplabv3_resnet50 3,512,512 16 argmax 120 ${BENCH_DEEPLAB:-tf32:nhwc tf32:nchw bf16:nhwc bf16:nchw}
  bench resnet50 3,224,224 128 logits 60 ${BENCH_RESNET:-tf32:nhwc tf32:nchw bf16:nhwc bf16:nchw}
fi

if want torch; then
  run "torch bench deeplab" 60 python3 tests/gpu/torch_bench.py --model deeplabv3_resnet50 --batch 16 --size 512 \
      --configs ${TORCH_CONFIGS:-tf32:nchw bf16:channels_last} >> "$OUT/bench.log" 2>&1
  grep -E '^\[ torch' "$OUT/bench.log" | tail -8
fi

if want compare; then
  wait_exports
  run compare_torch 200 python3 tests/gpu/compare_torch.py --sluice "$R $SLUICE_BIN" --workdir $CT --reuse \
      ${COMPARE_ARGS:-} > "$OUT/compare.log" 2>&1
  grep -vE 'Warning|warn|_C\._jit|^\s*$' "$OUT/compare.log" | tail -25
fi

if want torch && [ -n "${TORCH_RESNET-tf32:channels_last bf16:channels_last}" ]; then
  run "torch bench resnet" 40 python3 tests/gpu/torch_bench.py --model resnet50 --batch 128 --size 224 \
      --configs ${TORCH_RESNET-tf32:channels_last bf16:channels_last} >> "$OUT/bench.log" 2>&1
  grep -E '^\[ torch.*resnet' "$OUT/bench.log" | tail -8
fi

if want mpi; then
  for np in 1 2; do
    run "mpi np=$np" 60 "$R" mpirun -np $np --oversubscribe "$T" --gtest_filter='WeightBroadcast*' >> "$OUT/mpi.log" 2>&1
    grep -E '^\[  (FAILED|PASSED) |^\[ weights|Failure' "$OUT/mpi.log" | tail -6
  done
fi

if want sanitizer; then
  run memcheck 90 "$R" "$SAN" --tool memcheck --error-exitcode 9 "$T" \
      --gtest_filter="${MEMCHECK_FILTER:-Precisions/Ops.ChannelsLastConsumersMatchCpu/bf16:OpsIndices.*:Precisions/Ops.ResizeModesAndCoordinatesMatchCpu/fp32:Precisions/Ops.PadModesMatchCpu/fp32}" \
      >> "$OUT/sanitizer.log" 2>&1
  grep -E 'ERROR SUMMARY|^\[  (FAILED|PASSED) ' "$OUT/sanitizer.log" | tail -4
  [ -n "${MEMCHECK_FILTER:-}" ] || {
    run racecheck 60 "$R" "$SAN" --tool racecheck --error-exitcode 9 "$T" \
        --gtest_filter='OpsIndices.TopK*:Precisions/Ops.SoftmaxOverChannelsAndLastAxisMatchesCpu/fp32:Precisions/Ops.ReduceMeanOverBlocksAndSplitAxesMatchesCpu/fp32:Precisions/Ops.GlobalAveragePoolMatchesCpu/fp32' \
        >> "$OUT/sanitizer.log" 2>&1
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (FAILED|PASSED) ' "$OUT/sanitizer.log" | tail -4
  }
fi

echo "=== done after $SECONDS s"
