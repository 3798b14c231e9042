#!/usr/bin/env python3
"""End-to-end throughput of full-size transformer models with and without the attention fusion, on
the GPU host (torch, torchvision, timm, transformers; random weights, nothing downloaded):

    PYTHONUNBUFFERED=1 python3 data_tools/attention_bench.py --sluice ".devrt/run .devrt/bin/sluice" \\
        --out OUT [--only vit_b_16,swin_t] [--batches 20] [--deadline 300]

Each model (the builders of data_tools/fullsize_accuracy.py) is exported on the GPU at the
benchmark's batch with the TorchScript exporter (static shapes: no re-specialization at run time),
then run twice in the same call by `sluice run` (synthetic uint8 input, bf16, the model's output to
host memory, `--sink null`): with SLUICE_FUSE_ATTENTION=0 (before) and with the fusion (after).
Prints images/s and steady images/s (first batch left out) per run; `--profile` names models whose
`sluice profile` (before and after) is written to OUT/profile-MODEL-{before,after}.txt and .json.
torchvision's ViT-B and Swin-T exported at batch 256 merge the batch with the attention heads and
the windows inside the graph; the batch trace follows that (docs/export.md).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fullsize_accuracy import make  # noqa: E402

# model -> (batch, image size)
BATCH = {"vit_b_16": 256, "swin_t": 256, "convnext_tiny": 256, "deit_small_patch16_224": 256,
         "vit_small_patch14_dinov2": 256, "clip_vit_b16": 256, "segformer_b0": 64, "resnet50": 256,
         "deeplabv3_resnet50": 64}


def export(name, path):
    import torch
    torch.manual_seed(0)
    model, size = make(name)
    model = model.eval().cuda()
    x = torch.rand(BATCH[name], 3, size, size, device="cuda")
    # torchvision's ViT under no_grad takes nn.MultiheadAttention's fused fast path, an op the
    # TorchScript exporter cannot write: export with gradients on (the parameters require them)
    # and the fast path off.
    if hasattr(torch.backends, "mha"):
        torch.backends.mha.set_fastpath_enabled(False)
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17)
    del model, x
    torch.cuda.empty_cache()
    return size


def variant_env(spec):
    """'NAME:VAR=V,VAR=V' -> (NAME, {VAR: V})."""
    name, _, rest = spec.partition(":")
    return name, dict(kv.split("=", 1) for kv in rest.split(",") if kv)


def run(sluice, model, size, batch, batches, out, extra_env):
    env = dict(os.environ)
    env.update(extra_env)
    cmd = shlex.split(sluice) + ["run", "--model", model, "--input", "synthetic", "--input-dtype", "uint8",
                                 "--sample-shape", f"3,{size},{size}", "--batch-size", str(batch),
                                 "--samples", str(batch * batches), "--device", "cuda", "--precision", "bf16",
                                 "--sink", "null", "--output", out, "--overwrite", "--quiet"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]
    with open(os.path.join(out, "report.json")) as fh:
        rep = json.load(fh)
    ranks = rep.get("ranks") or []
    rk = ranks[0] if ranks else rep
    return (rk.get("images_per_s"), rk.get("steady_images_per_s"), time.time() - t0), ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="vit_b_16,deit_small_patch16_224,vit_small_patch14_dinov2,clip_vit_b16,swin_t,segformer_b0")
    ap.add_argument("--profile", default="vit_b_16")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--deadline", type=float, default=300)
    ap.add_argument("--profile-variants", default="", help="the variants (by name, comma-separated) that --profile runs; default all")
    ap.add_argument("--variant", action="append", default=None,
                    help="NAME:VAR=V,... a run per variant with these environment variables (default: "
                         "before:SLUICE_FUSE_ATTENTION=0 and after:SLUICE_FUSE_ATTENTION=1); profiles use them too")
    a = ap.parse_args()
    variants = [variant_env(v) for v in (a.variant or ["before:SLUICE_FUSE_ATTENTION=0", "after:SLUICE_FUSE_ATTENTION=1"])]
    os.makedirs(a.out, exist_ok=True)
    start = time.time()
    rows = []
    print(f"{'model':28} {'batch':>5} {'variant':7} {'images/s':>9} {'steady/s':>9} {'wall s':>7}")
    with tempfile.TemporaryDirectory() as d:
        for name in a.only.split(","):
            if time.time() - start > a.deadline:
                print(f"{name:28} skipped: past the deadline")
                continue
            path = os.path.join(d, f"{name}.onnx")
            t0 = time.time()
            try:
                size = export(name, path)
            except Exception as e:  # noqa: BLE001 - the exporter's own failure is the finding
                print(f"{name:28} export failed: {str(e).splitlines()[0][:160]}")
                continue
            print(f"{name:28} exported in {time.time() - t0:.0f} s")
            for tag, extra in variants:
                res, err = run(a.sluice, path, size, BATCH[name], a.batches, os.path.join(d, "out"), extra)
                if res is None:
                    print(f"{name:28} {BATCH[name]:5} {tag:7} failed: {err}")
                    continue
                ips, steady, wall = res
                print(f"{name:28} {BATCH[name]:5} {tag:7} {ips:9.0f} {steady:9.0f} {wall:7.1f}")
                rows.append({"model": name, "batch": BATCH[name], "variant": tag, "env": extra, "images_per_s": ips,
                             "steady_images_per_s": steady})
            if name in a.profile.split(","):
                for tag, extra in variants:
                    if a.profile_variants and tag not in a.profile_variants.split(","):
                        continue
                    env = dict(os.environ)
                    env.update(extra)
                    cmd = shlex.split(a.sluice) + ["profile", "--model", path, "--input-dtype", "uint8",
                                                   "--sample-shape", f"3,{size},{size}", "--batch-size", str(BATCH[name]),
                                                   "--device", "cuda", "--precision", "bf16", "--top", "25",
                                                   "--json", os.path.join(a.out, f"profile-{name}-{tag}.json")]
                    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
                    with open(os.path.join(a.out, f"profile-{name}-{tag}.txt"), "w") as fh:
                        fh.write(r.stdout + r.stderr)
                    print(f"{name:28} profile {tag}: exit {r.returncode}")
            os.remove(path)
    with open(os.path.join(a.out, "attention_bench.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    print(f"done in {time.time() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
