#!/usr/bin/env python3
"""Models exported the way users export them (batch fixed at 1) at the job's batch, beside
torch.compile in the same call.  GPU host only (torch, torchvision, transformers; random weights,
nothing downloaded):

    PYTHONUNBUFFERED=1 python3 data_tools/batch1_bench.py --sluice ".devrt/run .devrt/bin/sluice" \\
        [--only convnext_tiny,swin_t,detr_r50] [--batches 20] [--deadline 480]

For each model: `torch.onnx.export(m, (x,), path)` with x of batch 1 (torch 2.11's default, the
dynamo exporter), then `sluice run` at the model's batch (synthetic uint8 input, bf16, `--sink
null`), which must re-specialize the file to that batch: the row says how the batch was adapted
(re-specialized, or the sub-batch warning's reason) and the set-up time from report.json.  Then the
same module under torch.compile with bf16 autocast on float input already on the GPU (no input
conversion: torch's figure leaves out what Sluice's includes), the median of 3 timed runs of
`--batches` batches after the warm-up that compiles it.  Prints one row per model and the ratio.
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
SHAPES = {"convnext_tiny": (256, 224), "swin_t": (256, 224), "vit_b_16": (256, 224), "detr_r50": (32, 512)}


def build(name):
    if name != "detr_r50":
        return make(name)[0]
    import torch
    import transformers as tf
    cfg = tf.DetrConfig(use_pretrained_backbone=False)
    model = tf.DetrForObjectDetection(cfg)

    class Both(torch.nn.Module):  # the class logits and the boxes, both outputs a detector job reads
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            out = self.m(pixel_values=x)
            return out.logits, out.pred_boxes

    return Both()


def sluice_run(sluice, path, batch, size, batches, out):
    cmd = shlex.split(sluice) + ["run", "--model", path, "--input", "synthetic", "--input-dtype", "uint8",
                                 "--sample-shape", f"3,{size},{size}", "--batch-size", str(batch),
                                 "--samples", str(batch * batches), "--device", "cuda", "--precision", "bf16",
                                 "--sink", "null", "--output", out, "--overwrite"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    log = r.stderr
    adapted = "re-specialized"
    for line in log.splitlines():
        if "sub-batches" in line:
            adapted = "SUB-BATCHES: " + line.split("sub-batches", 1)[1].strip()[:200]
    if r.returncode != 0:
        return None, (log.strip().splitlines() or [f"exit {r.returncode}"])[-1][:300]
    with open(os.path.join(out, "report.json")) as fh:
        rep = json.load(fh)
    rk = (rep.get("ranks") or [rep])[0]
    return {"images_per_s": rk.get("images_per_s"), "steady": rk.get("steady_images_per_s"),
            "setup_s": rk.get("setup_s", rep.get("setup_s")), "adapted": adapted}, ""


def torch_compiled(model, batch, size, batches):
    import torch
    model = model.cuda().eval()
    f = torch.compile(model)
    x = torch.rand(batch, 3, size, size, device="cuda")
    t0 = time.time()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            f(x)
        torch.cuda.synchronize()
        warm = time.time() - t0
        rates = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batches):
                f(x)
            end.record()
            torch.cuda.synchronize()
            rates.append(batch * batches / (start.elapsed_time(end) / 1000))
    return sorted(rates)[1], warm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--only", default="convnext_tiny,swin_t,detr_r50")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--deadline", type=float, default=480)
    ap.add_argument("--no-torch", action="store_true", help="Sluice alone")
    a = ap.parse_args()
    import torch
    start = time.time()
    print(f"{'model':14} {'batch':>5} {'sluice/s':>9} {'steady/s':>9} {'set-up s':>8} {'compile/s':>9} "
          f"{'ratio':>6}  batch adapted")
    with tempfile.TemporaryDirectory() as d:
        for name in a.only.split(","):
            if time.time() - start > a.deadline:
                print(f"{name:14} skipped: past the deadline")
                continue
            batch, size = SHAPES[name]
            torch.manual_seed(0)
            model = build(name).eval()
            path = os.path.join(d, f"{name}.onnx")
            t0 = time.time()
            try:
                torch.onnx.export(model, (torch.rand(1, 3, size, size),), path)
            except Exception as e:  # noqa: BLE001 - the exporter's own failure is the finding
                print(f"{name:14} export failed: {str(e).splitlines()[0][:160]}")
                continue
            export_s = time.time() - t0
            res, err = sluice_run(a.sluice, path, batch, size, a.batches, os.path.join(d, "out"))
            if res is None:
                print(f"{name:14} {batch:5} sluice failed: {err}")
                continue
            rate, warm = (float("nan"), 0.0)
            if not a.no_torch and time.time() - start < a.deadline:
                try:
                    rate, warm = torch_compiled(model, batch, size, a.batches)
                except Exception as e:  # noqa: BLE001
                    print(f"{name:14} torch.compile failed: {str(e).splitlines()[0][:160]}")
            ratio = res["steady"] / rate if rate == rate and rate > 0 else float("nan")
            print(f"{name:14} {batch:5} {res['images_per_s']:9.0f} {res['steady']:9.0f} {res['setup_s']:8.1f} "
                  f"{rate:9.0f} {ratio:6.2f}  {res['adapted']} (export {export_s:.0f} s, compile warm-up {warm:.0f} s)")
            os.remove(path)
            del model
            torch.cuda.empty_cache()
    print(f"done in {time.time() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
