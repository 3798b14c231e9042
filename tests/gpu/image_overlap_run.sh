#!/usr/bin/env bash
# W3 (jobs/resnet50_images.toml: ResNet-50 bf16 b256 over JPEG files, resize 256, crop 224, top-5)
# with nvJPEG called on the driver thread (SLUICE_DECODE_OVERLAP=0) and on decode threads of their
# own (1: two, 3: three), in one call on a GPU host, on the same files, with the floors beside them
# and the stored top-5 of every run compared with a run that cannot overlap anything.  Builds
# nothing: bundle as tests/gpu/image_run.sh says, then there:
#   tar xJf devrt.tar.xz && set -o pipefail && bash tests/gpu/image_overlap_run.sh 2>&1 | tee $OUT/log
# Steps (STEPS, default all), each under a timeout and all under one deadline (DEADLINE s, 260):
#   data     UNIQUE (4000) pictures by data_tools/make_image_dataset.py, copied to COUNT (20000)
#            files in $WORK/images (making a picture costs a core about 0.05 s; decoding does not
#            care that a file's bytes come again), and ResNet-50 exported, both in the background
#   gtest    the GPU image tests (nvJPEG vs TurboJPEG, kernel vs preprocess_rgb, whole batches,
#            batches decoded ahead vs one at a time)
#   floor    nvJPEG alone and the GPU image input alone (ImageBench, 4096 files in memory, b256),
#            and compute alone (W3's model and options on synthetic uint8 input, no files)
#   e2e      a warm-up, then W3 once per entry of VARIANTS (OVERLAP[:HANDLES]: SLUICE_DECODE_OVERLAP
#            and SLUICE_DECODE_HANDLES (own, the default, or shared), in that order),
#            SLUICE_IMAGE_STATS=1 (the decode's host time per batch), then the reference:
#            overlap 0 with --prefetch 1 (one in-slot: batch N+1 is read only after batch N is decoded)
#   compare  every run's stored outputs against the reference, row by row (sorted by key)
set -uo pipefail
DEADLINE=${DEADLINE:-260}
STEPS=${STEPS:-data gtest floor e2e compare}
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
W=${WORK:-/tmp/sluice-images}
M=$W/resnet50.onnx
COUNT=${COUNT:-20000}
UNIQUE=${UNIQUE:-4000}
VARIANTS=${VARIANTS:-0 1:own 1:shared 3:own 0 1:own}
RUNS=/tmp/sluice-runs
mkdir -p "$W" "$RUNS"
echo "host $(hostname), $(date -u +%FT%TZ), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
host_nvjpeg

BG=()
if want data; then
  ( python3 data_tools/make_image_dataset.py --out "$W/unique" --count "$UNIQUE" &&
    python3 - "$W/unique" "$W/images" "$COUNT" <<'PY'
import os, shutil, sys
src, dst, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".jpg"))
os.makedirs(dst, exist_ok=True)
for i in range(count):
    shutil.copyfile(files[i % len(files)], os.path.join(dst, f"{i:06d}.jpg"))
print(f"{count} files in {dst} from {len(files)} pictures")
PY
  ) > "$OUT/data.log" 2>&1 &
  BG+=($!)
  python3 data_tools/export_model.py --model resnet50 --out "$M" --height 224 --width 224 > "$OUT/export.log" 2>&1 &
  BG+=($!)
fi

if want gtest; then
  run "gtest images" 120 "$R" "$T" --gtest_color=no \
      --gtest_filter="${GTEST_FILTER:-NvjpegDecode.*:*GpuImageInputTest.*:GpuPreprocess*}" > "$OUT/gtest.log" 2>&1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED' "$OUT/gtest.log" | sort | uniq -c | head -30
  grep -B2 -A12 -E 'Failure$' "$OUT/gtest.log" | head -80
fi

if [ ${#BG[@]} -gt 0 ]; then
  echo "=== waiting for the files and the model ($SECONDS s)"
  wait "${BG[@]}"
  tail -2 "$OUT/data.log"
  tail -1 "$OUT/export.log"
fi

summary() {  # summary RUN-DIR: images/s, steady, busy fractions
  python3 - "$1/report.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("    no report:", e); sys.exit()
k = r["ranks"][0]
print(f"    images/s {k['images_per_s']:.0f} steady {k['steady_images_per_s']:.0f} samples {k['samples']} "
      f"bad {k['bad_samples']} busy", {s: round(v, 2) for s, v in k["busy"].items() if v > 0.005},
      "stall", {s: round(v, 2) for s, v in k["stall"].items()}, "|", k["limit"])
PY
}

if want floor; then
  SLUICE_IMAGE_DIR=$W/unique SLUICE_BENCH_IMAGES=4096 SLUICE_BENCH_BATCHES=256 SLUICE_BENCH_BACKENDS=auto \
    run "decoder alone" 60 "$R" "$T" --gtest_color=no --gtest_also_run_disabled_tests --gtest_filter='ImageBench.*' \
    > "$OUT/floor.log" 2>&1
  grep -E '^\[ bench' "$OUT/floor.log"
  rm -rf "$RUNS/compute"
  run "compute alone" 60 "$R" "$S" run --model "$M" --device cuda --samples 20480 --batch-size 256 \
      --sample-shape 3,224,224 --input-dtype uint8 --scale 0.00392156862745098 --mean 0.485,0.456,0.406 \
      --std 0.229,0.224,0.225 --precision bf16 --outputs topk --top-k 5 --sink null --output "$RUNS/compute" \
      --quiet >> "$OUT/floor.log" 2>&1
  summary "$RUNS/compute"
fi

W3=(run --config jobs/resnet50_images.toml --input "$W/images" --model "$M" --quiet)
if want e2e; then
  rm -rf "$RUNS"/w3-*
  SLUICE_DECODE_OVERLAP=1 run "w3 warm-up" 60 "$R" "$S" "${W3[@]}" --samples 2048 --output "$RUNS/w3-warm" \
      > "$OUT/w3-warm.log" 2>&1
  i=0
  for v in $VARIANTS; do
    i=$((i + 1))
    ov=${v%%:*}
    hd=own
    [[ $v == *:* ]] && hd=${v#*:}
    SLUICE_DECODE_OVERLAP=$ov SLUICE_DECODE_HANDLES=$hd SLUICE_IMAGE_STATS=1 run "w3 overlap=$ov handles=$hd (#$i)" 60 \
        "$R" "$S" "${W3[@]}" --output "$RUNS/w3-$i-overlap$ov-$hd" > "$OUT/w3.log.$i" 2>&1
    grep -E '^\[image stats\]|rror' "$OUT/w3.log.$i" | head -5
    summary "$RUNS/w3-$i-overlap$ov-$hd"
  done
  SLUICE_DECODE_OVERLAP=0 SLUICE_IMAGE_STATS=1 run "w3 reference (overlap=0, --prefetch 1)" 90 "$R" "$S" "${W3[@]}" \
      --prefetch 1 --output "$RUNS/w3-ref" > "$OUT/w3.log.ref" 2>&1
  grep -E '^\[image stats\]|rror' "$OUT/w3.log.ref" | head -5
  summary "$RUNS/w3-ref"
  cat "$OUT"/w3.log.* > "$OUT/w3.log" && rm -f "$OUT"/w3.log.*
fi

if want compare; then
  python3 - "$RUNS/w3-ref" "$RUNS"/w3-[0-9]* <<'PY'
import os, sys
import h5py, numpy as np
def load(d):
    with h5py.File(os.path.join(d, "outputs.h5"), "r") as f:
        keys = np.array([k.decode() for k in f["sample_key"][:]])
        order = np.argsort(keys, kind="stable")
        return keys[order], {n: f["outputs"][n][:][order] for n in f["outputs"]}
ref_keys, ref = load(sys.argv[1])
print(f"reference {sys.argv[1]}: {len(ref_keys)} rows, outputs {sorted(ref)}")
for d in sys.argv[2:]:
    try:
        keys, out = load(d)
    except Exception as e:
        print(f"  {os.path.basename(d)}: not readable ({e})"); continue
    if not np.array_equal(keys, ref_keys):
        print(f"  {os.path.basename(d)}: other keys ({len(keys)} rows)"); continue
    parts = []
    for n, a in ref.items():
        b = out[n]
        same = np.all((a == b).reshape(len(a), -1), axis=1)
        parts.append(f"{n} {int(same.sum())}/{len(a)} rows identical")
    print(f"  {os.path.basename(d)}: " + ", ".join(parts))
PY
fi
echo "=== done after $SECONDS s"
