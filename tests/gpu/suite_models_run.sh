#!/usr/bin/env bash
# The check before an issue that touched GPU code is resolved, in one call on a GPU host: the whole
# sluice_gpu_tests unfiltered and shuffled, its MPI tests under mpirun -np 2 and 3, then the
# transformer-era models end to end (data_tools/attention_bench.py, one variant: the defaults).
#   RT=.devgo-main/.devrt DEADLINE=480 MODELS=convnext_tiny,deit_small_patch16_224 bash tests/gpu/suite_models_run.sh
# Steps (STEPS, default "gtest mpi models"; "accuracy" adds the bf16 error of ACCURACY's models
# against torch autocast, data_tools/fullsize_accuracy.py), each under a timeout, all under DEADLINE seconds.
set -uo pipefail
DEADLINE=${DEADLINE:-480}
STEPS=${STEPS:-gtest mpi models}
MODELS=${MODELS:-convnext_tiny,deit_small_patch16_224,vit_small_patch14_dinov2,clip_vit_b16,vit_b_16,swin_t,segformer_b0}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
host_nvjpeg
export SLUICE_BIN="$S" SLUICE_ROOT="$PWD" SLUICE_NVTX_PROBE="$PWD/$RT/bin/libsluice_nvtx_probe.so"
echo "host $(hostname), $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if want gtest; then
  run gtest "${GTEST_LIMIT:-240}" "$R" "$T" --gtest_shuffle > "$OUT/gtest.log" 2>&1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$OUT/gtest.log"
  grep -E "^\[  FAILED  \]" "$OUT/gtest.log" | head -20
fi
if want mpi; then
  for np in 2 3; do
    run "mpi np$np" 60 "$R" mpirun -np "$np" --oversubscribe "$T" --gtest_filter='WeightBroadcast*' > "$OUT/mpi$np.log" 2>&1
    sed 's/\x1b\[[0-9;]*m//g' "$OUT/mpi$np.log" | grep -cE "^\[  PASSED  \] 3 tests" | sed "s/^/    ranks with [  PASSED  ] 3 tests: /"
  done
fi
if want models; then
  l=$(left)
  run models "$l" python3 data_tools/attention_bench.py --sluice "$R $S" --out "$OUT" --only "$MODELS" \
    --batches "${BATCHES:-12}" --profile "${PROFILE:-convnext_tiny}" --deadline $((l - 15)) --variant now: 2>&1 | tail -40
fi
if want accuracy; then
  l=$(left)
  run accuracy "$l" python3 data_tools/fullsize_accuracy.py --sluice "$R $S" --only "${ACCURACY:-clip_vit_b16,convnext_tiny}" \
    --precisions bf16 --batch "${ACCURACY_BATCH:-4}" --deadline $((l - 10)) > "$OUT/accuracy.log" 2>&1
  # Every result line (ok, MISS, failed, skipped), the header and the errors; the whole log is in $OUT.
  grep -E "^===|^model|ok \(|MISS|FAIL|failed|skipped|done in|over|error|Error" "$OUT/accuracy.log" | tail -20
fi
echo "=== done after $SECONDS s"
