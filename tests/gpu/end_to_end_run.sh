#!/usr/bin/env bash
# End-to-end GPU checks in one call on a GPU host (bundle as tests/gpu/engine_run.sh says): the
# image benchmark (JPEG files decoded by nvJPEG, the copy stream at high priority), DeepLabV3 end to
# end with float32 and with uint8 synthetic input (the input path's own limit apart from the
# engine's), the output-tail tests, and the CPU image path against the GPU one.
#   tar xJf devrt.tar.xz && bash tests/gpu/end_to_end_run.sh 2>&1 | tail -40
set -uo pipefail
DEADLINE=${DEADLINE:-420}
STEPS=${STEPS:-data models tails images deeplab}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
M=/tmp/sluice-models
W=/tmp/sluice-images
COUNT=${COUNT:-30000}
mkdir -p "$M" "$W"
IMAGENET=(--scale 0.00392156862745098 --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225)
host_nvjpeg

DATA_PID=""
if want data; then
  python3 data_tools/make_image_dataset.py --out "$W/images" --count "$COUNT" > "$OUT/data.log" 2>&1 &
  DATA_PID=$!
fi
EXPORT_PIDS=()
if want models; then
  for m in "resnet50 224" "deeplabv3_resnet50 512"; do
    set -- $m
    python3 data_tools/export_model.py --model "$1" --out "$M/$1.onnx" --height "$2" --width "$2" >> "$OUT/export.log" 2>&1 &
    EXPORT_PIDS+=($!)
  done
fi

if want tails; then
  run "gtest tails" 90 "$R" "$T" --gtest_color=no --gtest_filter='Precisions/Tails.*:TailLowering.*' > "$OUT/tails.log" 2>&1
  grep -E '^\[  (PASSED|FAILED) ' "$OUT/tails.log"
fi

[ ${#EXPORT_PIDS[@]} -gt 0 ] && wait "${EXPORT_PIDS[@]}"
e2e() {  # e2e TAG MODEL ARGS...
  local tag=$1 model=$2
  shift 2
  rm -rf "/tmp/sluice-runs/$tag"
  run "e2e $tag" 100 "$R" mpirun -np 1 "$S" run --model "$M/$model.onnx" --device cuda --output "/tmp/sluice-runs/$tag" \
      --quiet --reader-threads 8 "$@" > "$OUT/e2e-$tag.log" 2>&1
  grep -E '^ +0 |^limit|^job' "$OUT/e2e-$tag.log"
}
if want deeplab; then
  D=(--batch-size 64 --sample-shape 3,512,512 --chunk-batches 2 --precision bf16 --samples 3840)
  e2e dl-f32in-logits deeplabv3_resnet50 "${D[@]}" --input-dtype float32 --outputs logits --sink null
  e2e dl-u8in-logits deeplabv3_resnet50 "${D[@]}" --input-dtype uint8 "${IMAGENET[@]}" --outputs logits --sink null
  e2e dl-u8in-argmax deeplabv3_resnet50 "${D[@]}" --input-dtype uint8 "${IMAGENET[@]}" --outputs argmax --sink null
  e2e dl-u8in-argmax-stored deeplabv3_resnet50 "${D[@]}" --input-dtype uint8 "${IMAGENET[@]}" --outputs argmax
fi

if want images; then
  [ -n "$DATA_PID" ] && wait "$DATA_PID"
  tail -1 "$OUT/data.log"
  for b in 256; do
    rm -rf /tmp/sluice-runs/images
    run "images warm-up" 60 "$R" "$S" run --config jobs/resnet50_images.toml --input "$W/images" --model "$M/resnet50.onnx" \
        --samples 2048 --output /tmp/sluice-runs/images-warm --quiet > /dev/null 2>&1
    run "images b$b" 90 "$R" "$S" run --config jobs/resnet50_images.toml --input "$W/images" --model "$M/resnet50.onnx" \
        --batch-size "$b" --output /tmp/sluice-runs/images --quiet > "$OUT/images.log" 2>&1
    grep -E '^ +0 |^limit|^job' "$OUT/images.log"
    [ -f /tmp/sluice-runs/images/report.json ] && cp /tmp/sluice-runs/images/report.json "$OUT/report-images.json"
  done
  python3 - "$OUT/report-images.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); k = r["ranks"][0]
print("images stages:", {s: round(v, 2) for s, v in k["busy"].items()}, "stall", {s: round(v, 2) for s, v in k["stall"].items()})
PY
fi
echo "=== done after $SECONDS s"
