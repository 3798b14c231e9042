#!/usr/bin/env bash
# The GPU image path on a GPU host in one call: nvJPEG and the preprocessing kernel against the CPU
# (gtests), then the image benchmark (JPEG files to ResNet-50 top-5) against PyTorch.  Builds
# nothing: bundle first, from the repository root,
#   /work/shared/device/bundle.sh .devrt build/sluice build/tests/sluice_gpu_tests
#   tar cJf devrt.tar.xz .devrt          # over the 64 MiB carry limit otherwise
# and there:
#   tar xJf devrt.tar.xz && set -o pipefail && bash tests/gpu/image_run.sh 2>&1 | tee $OUT/log
# Steps (STEPS, default all), each under a timeout and all under one deadline (DEADLINE s, 560):
#   data    data_tools/make_image_dataset.py writes COUNT (50000) JPEGs, ~500x375 q90, into
#           $WORK/images, and data_tools/export_model.py ResNet-50; both in the background while
#           the gtests run
#   gtest   the GPU image tests (nvJPEG vs TurboJPEG, kernel vs preprocess_rgb, whole batches)
#   bench   data_tools/bench_images.py: decoders compared, nvJPEG alone, sluice end to end,
#           PyTorch (PIL DataLoader, torchvision GPU decode, + ResNet-50 bf16); BENCH_STEPS picks
# Logs: $OUT/{data,gtest,bench}.log; the summary lines go to stdout.
set -uo pipefail
DEADLINE=${DEADLINE:-560}
STEPS=${STEPS:-data gtest bench}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
WORK=${WORK:-/tmp/sluice-images}
COUNT=${COUNT:-50000}
MODEL=$WORK/resnet50.onnx
mkdir -p "$WORK"

echo "host $(hostname), $(date -u +%FT%TZ), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
host_nvjpeg
"$R" ldd "$S" | grep -E 'nvjpeg|turbojpeg|spng' | sed 's/^/    /'

BG=()
if want data; then
  if [ "$(find "$WORK/images" -name '*.jpg' 2>/dev/null | head -n "$COUNT" | wc -l)" -lt "$COUNT" ]; then
    rm -rf "$WORK/images"
    timeout 300 python3 data_tools/make_image_dataset.py --out "$WORK/images" --count "$COUNT" > "$OUT/data.log" 2>&1 &
    BG+=($!)
  fi
  [ -f "$MODEL" ] || { timeout 150 python3 data_tools/export_model.py --model resnet50 --out "$MODEL" --height 224 \
                         --width 224 >> "$OUT/data.log" 2>&1 & BG+=($!); }
fi

if want gtest; then
  run "gtest images" 150 "$R" "$T" --gtest_color=no \
      --gtest_filter='NvjpegDecode.*:*GpuImageInputTest.*:GpuPreprocess*' > "$OUT/gtest.log" 2>&1
  grep -E '^\[ (nvjpeg|image)' "$OUT/gtest.log" | sort | uniq -c | sort -rn | head -70 | sed 's/^ *[0-9]* //'
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/gtest.log"
  grep -B2 -A12 -E 'Failure$' "$OUT/gtest.log" | head -120
fi

if [ ${#BG[@]} -gt 0 ]; then
  echo "=== waiting for the data set and the model ($SECONDS s)"
  wait "${BG[@]}"
  tail -3 "$OUT/data.log"
  echo "    $(find "$WORK/images" -name '*.jpg' | wc -l) files, $(du -sh "$WORK/images" | cut -f1); model: $(ls -la "$MODEL" 2>&1)"
fi

if want bench; then
  # The folder was just written: it is in the page cache, as it would be on a second epoch.
  run bench_images 330 python3 data_tools/bench_images.py --images "$WORK/images" --model "$MODEL" --runner "$R" \
      --sluice "$S" --gpu-tests "$T" --workdir "$WORK" --steps "${BENCH_STEPS:-decoders,nvjpeg,sluice,pil,tvgpu,tvgpu_e2e}" \
      --timeout 150 > "$OUT/bench.log" 2>&1
  grep -vE 'Warning|warn\(' "$OUT/bench.log" | tail -60
fi

echo "=== done after $SECONDS s"
