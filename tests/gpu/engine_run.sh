#!/usr/bin/env bash
# The engine's GPU checks and figures in one call on a GPU host.  Builds
# nothing: it takes the bundled binaries (/work/shared/device/README.md), here:
#   cmake --build build-cuda --target sluice sluice_gpu_tests
#   /work/shared/device/bundle.sh .devrt build-cuda/sluice build-cuda/tests/sluice_gpu_tests
#   tar cJf devrt.tar.xz .devrt          # carried with the call, unpacked there first
# there (two calls of under 8 minutes; the second exports again when the machine is a fresh one):
#   tar xJf devrt.tar.xz && STEPS="export gtest profile e2e compare" bash tests/gpu/engine_run.sh 2>&1 | tail -70
#   tar xJf devrt.tar.xz && STEPS="export models convgraph sanitizer" bash tests/gpu/engine_run.sh 2>&1 | tail -70
# Steps (STEPS, default all), each under a timeout and all under one deadline (DEADLINE seconds,
# default 470), most important first:
#   export   data_tools/export_model.py: deeplabv3_resnet50 and fcn_resnet50 at 512x512, resnet50,
#            efficientnet_b0 and mobilenet_v3_large at 224 (seed 0) into $MODELS_DIR, in the background
#   gtest    the engine's GPU tests (tails, fast kernels, ops, models) against the CPU engine
#   profile  `sluice profile` of DeepLabV3 b64 512x512 bf16 (fp32 logits) and ResNet-50 b256 uint8 bf16
#            (top-5), JSON in $OUT; they also fill the cuDNN algorithm cache the runs below reuse
#   e2e      the throughput targets, `sluice run` end to end: DeepLabV3 b64 bf16 and tf32 with fp32 logits
#            to pinned host memory (--sink null), bf16 with argmax stored; ResNet-50 b256 bf16, uint8
#            in, top-5 stored
#   compare  tests/gpu/compare_torch.py (ResNet-50, DeepLabV3; fp32, tf32, bf16) against torch eager
#   models   `sluice profile` of EfficientNet-B0, MobileNetV3-Large (b256) and FCN-ResNet50 (b32 512);
#            ResNet-50 again with the stem's 3 channels unpadded and padded to 8 (default: 4)
#   convgraph convolutions as cuDNN graphs: the conv/model tests with SLUICE_CUDA_CONV_GRAPH=force, then
#            DeepLabV3 and ResNet-50 profiled with SLUICE_CUDA_CONV_GRAPH=1 (graph or legacy per layer)
#   sanitizer compute-sanitizer memcheck on the tail and kernel tests (bf16), if time is left
# The last lines are a table: images/s against the targets, and each profile's slowest steps with
# their achieved fraction of the measured copy bandwidth (memory-bound) or GEMM rate (convolutions).
set -uo pipefail
DEADLINE=${DEADLINE:-470}
STEPS=${STEPS:-export gtest profile e2e compare models convgraph sanitizer}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
M=${MODELS_DIR:-/tmp/sluice-models}
CACHE=${CACHE:-/tmp/sluice-algo-cache}
WORK=${WORK:-/tmp/sluice-engine-runs}
export SLUICE_BIN="$S" SLUICE_ROOT="$PWD"
mkdir -p "$M" "$CACHE" "$WORK"
IMAGENET=(--scale 0.00392156862745098 --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225)

echo "host $(hostname), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total --format=csv,noheader

# export_bg NAME SIZE: the ONNX model into $M (skipped when it is there), in the background.
PIDS=()
export_bg() {
  [ -f "$M/$1.onnx" ] && return
  timeout 200 python3 data_tools/export_model.py --model "$1" --out "$M/$1.onnx" --height "$2" --width "$2" --batch 1 \
    --seed 0 >> "$OUT/export.log" 2>&1 &
  PIDS+=($!)
}
wait_model() {   # wait_model NAME: until the export of NAME is done (or gave up)
  local t=0
  while [ ! -f "$M/$1.onnx" ] && [ $t -lt 200 ] && [ "$(left)" -gt 10 ]; do
    local busy=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && busy=1; done
    [ $busy -eq 0 ] && break
    sleep 2
    t=$((t + 2))
  done
  [ -f "$M/$1.onnx" ] || { echo "=== no $M/$1.onnx (see $OUT/export.log)"; return 1; }
}

if want export; then
  export_bg deeplabv3_resnet50 512
  export_bg resnet50 224
  export_bg efficientnet_b0 224
  export_bg mobilenet_v3_large 224
  export_bg fcn_resnet50 512
fi

if want gtest; then
  # One process per group: an illegal address poisons its CUDA context, not the other groups.
  set -f
  for g in "TailLowering.*:Precisions/Tails.*" "Precisions/Kernels.*" \
           "Precisions/Ops.*:OpsIndices.*:AtrousLowering.*:Precisions/Atrous.*" \
           "Precisions/Models.*:ModelsIndices.*:CudaEngine.*:Precisions/Conv.*"; do
    run "gtest $g" 100 "$R" "$T" --gtest_color=no --gtest_filter="$g" >> "$OUT/gtest.log" 2>&1
  done
  set +f
  grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/gtest.log" | sort | uniq -c
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/gtest.log" | sort -u | head -30
  grep -B2 -A10 -E 'Failure$' "$OUT/gtest.log" | head -80
fi

# profile TAG MODEL ARGS...: `sluice profile` with its JSON in $OUT/profile-TAG.json.
profile() {
  local tag=$1 model=$2
  shift 2
  wait_model "$model" || return
  run "profile $tag" 120 "$R" "$S" profile --model "$M/$model.onnx" --device cuda --algo-cache "$CACHE" --replays 10 \
      --top 25 --json "$OUT/profile-$tag.json" "$@" > "$OUT/profile-$tag.txt" 2>&1
  head -45 "$OUT/profile-$tag.txt"
}

if want profile; then
  profile deeplabv3-bf16 deeplabv3_resnet50 --batch-size 64 --sample-shape 3,512,512 --precision bf16 --outputs logits
  profile resnet50-bf16 resnet50 --batch-size 256 --sample-shape 3,224,224 --input-dtype uint8 "${IMAGENET[@]}" \
      --precision bf16 --outputs topk
fi

# e2e TAG MODEL ARGS...: `sluice run` into $WORK/TAG; the report's figures.
e2e() {
  local tag=$1 model=$2
  shift 2
  wait_model "$model" || return
  rm -rf "${WORK:?}/$tag"
  run "e2e $tag" 100 "$R" mpirun -np 1 "$S" run --model "$M/$model.onnx" --device cuda --algo-cache "$CACHE" \
      --output "$WORK/$tag" --quiet --reader-threads 8 "$@" > "$OUT/e2e-$tag.log" 2>&1
  tail -2 "$OUT/e2e-$tag.log"
  [ -f "$WORK/$tag/report.json" ] && cp "$WORK/$tag/report.json" "$OUT/report-$tag.json"
}

if want e2e; then
  DL=(--input synthetic --sample-shape 3,512,512 --batch-size 64 --samples 1536 --chunk-batches 2)
  e2e deeplabv3-bf16-logits deeplabv3_resnet50 "${DL[@]}" --precision bf16 --outputs logits --sink null
  e2e deeplabv3-bf16-argmax deeplabv3_resnet50 "${DL[@]}" --precision bf16 --outputs argmax
  e2e deeplabv3-tf32-logits deeplabv3_resnet50 "${DL[@]}" --precision tf32 --outputs logits --sink null
  e2e resnet50-bf16-top5 resnet50 --input synthetic --sample-shape 3,224,224 --input-dtype uint8 "${IMAGENET[@]}" \
      --batch-size 256 --samples 40960 --chunk-batches 4 --precision bf16 --outputs topk --top-k 5
fi

if want compare; then
  wait_model resnet50 && wait_model deeplabv3_resnet50 &&
    run compare_torch 150 python3 tests/gpu/compare_torch.py --sluice "$R $S" --workdir "$M" --reuse \
        --models resnet50 deeplabv3_resnet50 --precisions fp32 tf32 bf16 > "$OUT/compare.log" 2>&1
  grep -vE 'Warning|warn|_C\._jit|^\s*$' "$OUT/compare.log" | tail -12
fi

if want models; then
  profile efficientnet_b0-bf16 efficientnet_b0 --batch-size 256 --sample-shape 3,224,224 --precision bf16 --outputs logits
  profile mobilenet_v3_large-bf16 mobilenet_v3_large --batch-size 256 --sample-shape 3,224,224 --precision bf16 --outputs logits
  profile fcn_resnet50-bf16 fcn_resnet50 --batch-size 32 --sample-shape 3,512,512 --precision bf16 --outputs argmax
  # The stem convolution's input channels: 3 as they come, and padded to 8 (the default pads to 4).
  for pad in 0 8; do
    SLUICE_CUDA_STEM_PAD=$pad profile resnet50-bf16-stem$pad resnet50 --batch-size 256 --sample-shape 3,224,224 \
        --input-dtype uint8 "${IMAGENET[@]}" --precision bf16 --outputs topk
  done
fi

if want convgraph; then
  # Convolutions as cuDNN graphs (conv_graph.h): first forced wherever cuDNN builds one, checked against
  # the CPU engine; then chosen per convolution against the legacy call (build time and speed).
  set -f
  SLUICE_CUDA_CONV_GRAPH=force run "gtest conv graphs" 120 "$R" "$T" --gtest_color=no \
      --gtest_filter='Precisions/Conv.*:Precisions/Models.*:Precisions/Atrous.*:ModelsIndices.*' > "$OUT/gtest-convgraph.log" 2>&1
  set +f
  grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/gtest-convgraph.log" | sort | uniq -c
  grep -B2 -A10 -E 'Failure$' "$OUT/gtest-convgraph.log" | head -40
  SLUICE_CUDA_CONV_GRAPH=1 profile deeplabv3-bf16-convgraph deeplabv3_resnet50 --batch-size 64 --sample-shape 3,512,512 \
      --precision bf16 --outputs logits
  SLUICE_CUDA_CONV_GRAPH=1 profile resnet50-bf16-convgraph resnet50 --batch-size 256 --sample-shape 3,224,224 \
      --input-dtype uint8 "${IMAGENET[@]}" --precision bf16 --outputs topk
fi

if want sanitizer; then
  run memcheck 90 "$R" "$SAN" --tool memcheck --error-exitcode 9 "$T" --gtest_color=no \
      --gtest_filter='Precisions/Tails.*/bf16:Precisions/Kernels.Pools*/bf16:Precisions/Kernels.GlobalPools*/bf16:Precisions/Kernels.Slices*/bf16:Precisions/Kernels.ChannelsLast*/bf16' \
      > "$OUT/sanitizer.log" 2>&1
  grep -E 'ERROR SUMMARY|^\[  (FAILED|PASSED) ' "$OUT/sanitizer.log" | tail -4
fi

for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
echo "=== done after $SECONDS s"
python3 tests/gpu/engine_summary.py "$OUT" | tee "$OUT/engine-summary.txt"
# At most 8 files come back from $OUT: this script's logs and JSON travel as one archive.
(
  cd "$OUT" || exit
  files=$(ls export.log gtest*.log profile-*.txt profile-*.json e2e-*.log report-*.json compare.log sanitizer.log 2>/dev/null)
  [ -n "$files" ] && tar czf engine-run.tgz $files && rm -f $files
)
