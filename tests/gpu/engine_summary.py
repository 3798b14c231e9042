#!/usr/bin/env python3
"""The closing table of tests/gpu/engine_run.sh: end-to-end images/s against the throughput targets, then
each profile's forward pass and slowest steps with their achieved fraction of the ceilings measured in
the same run (copy bandwidth for memory-bound steps, GEMM rate for convolutions and products).

    python3 tests/gpu/engine_summary.py OUT_DIR

Reads OUT_DIR/report-TAG.json (sluice run) and OUT_DIR/profile-TAG.json (sluice profile --json).
"""
import glob
import json
import os
import sys

TARGETS = {  # run tag: (images/s target, what it measures)
    "deeplabv3-bf16-logits": (1400, "DeepLabV3 b64 bf16, fp32 logits to host"),
    "deeplabv3-tf32-logits": (750, "DeepLabV3 b64 tf32, fp32 logits to host"),
    "deeplabv3-bf16-argmax": (1500, "DeepLabV3 b64 bf16, argmax stored"),
    "resnet50-bf16-top5": (30000, "ResNet-50 b256 bf16, uint8 in, top-5 stored"),
}
COMPUTE_KINDS = {"Conv", "FusedConv", "ConvTranspose", "Gemm", "MatMul"}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def runs(out):
    print(f"{'end to end (sluice run)':<48} {'images/s':>9} {'steady':>9} {'target':>7}  {'':12} compute busy")
    for tag, (target, what) in TARGETS.items():
        r = load(os.path.join(out, f"report-{tag}.json"))
        if not r:
            print(f"{what:<48} {'-':>9} {'-':>9} {target:>7}  no report")
            continue
        rank = r["ranks"][0]
        got = r["job"]["throughput"]
        steady = rank.get("steady_images_per_s", 0.0)
        verdict = "met" if got >= target else ("met (steady)" if steady >= target else "MISS")
        print(f"{what:<48} {got:>9.0f} {steady:>9.0f} {target:>7}  {verdict:<12} {100 * rank['busy']['compute']:.0f} %")


def profiles(out):
    for path in sorted(glob.glob(os.path.join(out, "profile-*.json"))):
        p = load(path)
        if not p:
            continue
        tag = os.path.basename(path)[len("profile-"):-len(".json")]
        peaks = p["peaks"]
        bw, fl = peaks["copy_bytes_per_s"], peaks["matmul_flops_per_s"]
        print(f"\nprofile {tag}: forward {p['forward_ms']:.2f} ms = {p['images_per_s']:.0f} images/s (engine alone); "
              f"ceilings copy {bw / 1e9:.0f} GB/s, GEMM {fl / 1e12:.0f} TFLOP/s")
        steps = sorted(p["steps"], key=lambda s: -s["ms"])
        memory = [s for s in steps if s["kind"] not in COMPUTE_KINDS]
        mem_ms = sum(s["ms"] for s in memory)
        slow = [s for s in memory if s["bandwidth_fraction"] < 0.6 and s["ms"] > 0.02]
        print(f"  memory-bound steps: {len(memory)}, {mem_ms:.2f} ms of {p['steps_ms']:.2f}; below 60 % of copy "
              f"bandwidth (and over 20 us): {len(slow)} taking {sum(s['ms'] for s in slow):.2f} ms")
        print(f"  {'slowest steps':<46} {'kind':<12} {'ms':>7} {'share':>6} {'of bw':>6} {'of GEMM':>8}")
        for s in steps[:8] + [s for s in slow[:6] if s not in steps[:8]]:
            print(f"  {s['name'][-46:]:<46} {s['kind'][:12]:<12} {s['ms']:>7.3f} {100 * s['share']:>5.1f}% "
                  f"{100 * s['bandwidth_fraction']:>5.0f}% {100 * s['flops_fraction']:>7.0f}%")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs(sys.argv[1])
    profiles(sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
