#!/usr/bin/env bash
# Job-level checks and benchmarks of `sluice run` on a GPU host, in one call
# (/work/shared/device/README.md): the seed workload end to end against PyTorch, two ranks on one
# GPU, the pipeline under compute-sanitizer, throughput by precision against a PyTorch script, and,
# where the machine has two or more GPUs, the NCCL weight broadcast and multi-GPU scaling.
#   set -o pipefail; bash tests/gpu/job_run.sh 2>&1 | tee $OUT/log
# RT names the bundle folder (default .devrt); STEPS picks steps; DEADLINE (s) bounds the whole call.
set -uo pipefail
DEADLINE=${DEADLINE:-560}
STEPS=${STEPS:-export e2e np2 sanitizer bench multigpu}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
MODEL=jobs/models/deeplabv3_resnet50.onnx
WORK=${WORK:-/tmp/sluice-jobs}
mkdir -p "$WORK"
GPUS=$(nvidia-smi -L | wc -l)

# figures DIR: the report's job line (throughput, makespan, per-rank spread).
figures() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/report.json")); j = r["job"]
ranks = " ".join(f"r{k['rank']}:{k['samples']}/{k['images_per_s']:.0f}/{k['steady_images_per_s']:.0f}/comp{100*k['busy']['compute']:.0f}%" for k in r["ranks"])
print(f"    {r['name']} {r['precision']} np={r['world_size']}: {j['samples']} samples, {j['throughput']:.1f} images/s, "
      f"makespan {j['makespan_s']:.2f} s, rank min/mean/max {j['rank_images_per_s']['min']:.1f}/"
      f"{j['rank_images_per_s']['mean']:.1f}/{j['rank_images_per_s']['max']:.1f}, imbalance {j['imbalance']:.3f}, "
      f"setup {max(k['setup_s'] for k in r['ranks']):.1f} s, model load {r['model_load_s']:.2f} s, weights {r['weights_broadcast']}  [{ranks}]")
PY
}
job() {  # job NAME LIMIT ARGS...: sluice run of the seed workload into $WORK/NAME
  local name=$1 limit=$2
  shift 2
  rm -rf "${WORK:?}/$name"
  run "$name" "$limit" "$R" mpirun -np "${NP:-1}" --oversubscribe "$S" run --config jobs/deeplabv3.toml --device cuda \
      --output "$WORK/$name" --quiet "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -3 "$OUT/$name.log"
  [ -f "$WORK/$name/report.json" ] && figures "$WORK/$name"
  return $rc
}

echo "host $(hostname), $(date -u +%FT%TZ), $GPUS GPU(s), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
df -h /tmp | tail -1

if want export; then
  run export 150 python3 data_tools/export_model.py --model deeplabv3_resnet50 --out "$MODEL" --height 512 --width 512 \
      --seed 0 > "$OUT/export.log" 2>&1
  tail -1 "$OUT/export.log"
fi

if want e2e; then
  # The seed workload as shipped (tf32, float32 logits stored), then bf16; each checked against torch.
  job e2e-tf32 120 --samples 256
  run check-tf32 90 python3 data_tools/check_against_torch.py --run "$WORK/e2e-tf32" --model deeplabv3_resnet50 \
      --indices 0,1,77,130,255
  job e2e-bf16 90 --samples 128 --precision bf16 --outputs logits,argmax
  run check-bf16 90 python3 data_tools/check_against_torch.py --run "$WORK/e2e-bf16" --model deeplabv3_resnet50 \
      --indices 0,5,64,127
fi

if want np2; then
  # Two ranks share the one GPU (weights over MPI: NCCL refuses a shared GPU).
  NP=2 CUDA_VISIBLE_DEVICES=0 job np2 120 --samples 512 --outputs argmax --precision bf16
  run np2-coverage 30 python3 - "$WORK/np2" <<'PY'
import glob, sys, h5py, numpy as np
d = sys.argv[1]; idx = []
for p in sorted(glob.glob(d + "/rank-*.h5")):
    with h5py.File(p, "r") as f:
        idx.append(f["sample_index"][:]); print(p, f["sample_index"].shape[0], "rows")
idx = np.sort(np.concatenate(idx))
ok = np.array_equal(idx, np.arange(512))
with h5py.File(d + "/outputs.h5", "r") as f:
    print("outputs.h5 argmax", f["outputs/argmax"].shape, f["outputs/argmax"].dtype)
print("every sample once:", ok); sys.exit(0 if ok else 1)
PY
fi

if want sanitizer; then
  for tool in memcheck racecheck; do
    rm -rf "$WORK/san-$tool"
    run "$tool" 90 "$R" "$SAN" --tool "$tool" --error-exitcode 9 "$S" run --config jobs/quickstart.toml --device cuda \
        --samples 96 --outputs logits,argmax,softmax,topk --output "$WORK/san-$tool" --quiet --no-cuda-graphs \
        > "$OUT/sanitizer-$tool.log" 2>&1
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|status:' "$OUT/sanitizer-$tool.log" | tail -3
  done
fi

if want bench; then
  # End to end, float32 logits copied to the host every batch (--sink null: not stored; disk apart).
  for p in ${BENCH_PRECISIONS:-bf16 fp16 tf32 fp32}; do
    job "bench-$p" 100 --samples "${BENCH_SAMPLES:-1024}" --precision "$p" --sink null
  done
  # The same with the pipeline serialized (one slot each way), to show what the overlap buys.
  job bench-serial 100 --samples "${BENCH_SAMPLES:-1024}" --precision bf16 --sink null --prefetch 1 --egress-buffers 1
  # Stored argmax masks (uint8) to HDF5.
  job bench-argmax 100 --samples "${BENCH_SAMPLES:-1024}" --precision bf16 --outputs argmax
  run pytorch 150 python3 data_tools/bench_pytorch.py --model deeplabv3_resnet50 --batch 64 --size 512 --batches 12 \
      --precision ${TORCH_PRECISIONS:-bf16 tf32 fp32} > "$OUT/pytorch.log" 2>&1
  grep -E '^pytorch|^torch' "$OUT/pytorch.log"
fi

if want multigpu && [ "$GPUS" -ge 2 ]; then
  run broadcast 60 "$R" mpirun -np "$GPUS" --oversubscribe "$T" --gtest_filter='WeightBroadcast*' > "$OUT/broadcast.log" 2>&1
  grep -E '^\[  (FAILED|PASSED) |^\[ weights|Failure' "$OUT/broadcast.log" | tail -6
  for p in ${SCALE_PRECISIONS:-bf16 tf32}; do
    CUDA_VISIBLE_DEVICES=0 job "scale1-$p" 100 --samples "${SCALE_SAMPLES:-2048}" --precision "$p" --sink null
    NP=$GPUS job "scale$GPUS-$p" 100 --samples "${SCALE_SAMPLES:-2048}" --precision "$p" --sink null
  done
fi

echo "=== done after $SECONDS s"
