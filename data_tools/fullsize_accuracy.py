#!/usr/bin/env python3
"""Full-size transformer-era models on the CUDA engine against ONNX Runtime and against torch's own
error at each precision.  Runs on the GPU host (torch, torchvision, timm, transformers, onnxruntime;
random weights, nothing downloaded):

    PYTHONUNBUFFERED=1 python3 data_tools/fullsize_accuracy.py --sluice ".devrt/run .devrt/bin/sluice" \\
        [--only vit_b_16,swin_t] [--precisions fp32,tf32,bf16] [--batch 4] [--deadline 480]

For each model: export at batch 1 with the dynamo exporter (`torch.onnx.export(m, (x,), path)`,
as a user calls it), take ONNX Runtime's fp32 outputs one sample at a time as the reference, then
print max|diff| / max|ref| of
  - torch eager at fp32, at tf32 (matmuls and convolutions) and under bf16 autocast, and
  - `sluice forward --device cuda` at fp32, tf32 and bf16 (the batch-1 file re-specialized to --batch).
The bound the models issue sets: Sluice fp32 within 1e-4; tf32 and bf16 within 1.5x torch's own error.
"""
import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np


def make(name):
    import torchvision
    if name in ("vit_b_16", "swin_t", "convnext_tiny", "resnet50"):
        return getattr(torchvision.models, name)(), 224
    if name == "deeplabv3_resnet50":  # W1's model: its 'out' at 512 x 512
        import torch

        class Out(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None)

            def forward(self, x):
                return self.m(x)["out"]

        return Out(), 512
    if name in ("deit_small_patch16_224", "vit_small_patch14_dinov2"):
        import timm
        size = 224
        kw = {"img_size": 224} if "dinov2" in name else {}
        return timm.create_model(name, **kw), size
    import transformers as tf
    if name == "clip_vit_b16":
        cfg = tf.CLIPVisionConfig(patch_size=16, image_size=224)
        m = tf.CLIPVisionModelWithProjection(cfg)
        return wrap(m, "image_embeds"), 224
    if name == "segformer_b0":
        return wrap(tf.SegformerForSemanticSegmentation(tf.SegformerConfig()), "logits"), 512
    raise SystemExit(f"unknown model {name}")


def wrap(model, key):
    """A transformers model as a module that takes the image tensor and returns one tensor."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return getattr(self.m(pixel_values=x), key)

    return Wrapped()


def rel(got, ref):
    ref = ref.astype(np.float64)
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--only", default="vit_b_16,swin_t,convnext_tiny,deit_small_patch16_224,"
                                      "vit_small_patch14_dinov2,clip_vit_b16,segformer_b0")
    ap.add_argument("--precisions", default="fp32,tf32,bf16", help="the Sluice runs to make (torch's run at each anyway)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--deadline", type=float, default=480)
    a = ap.parse_args()
    import onnxruntime as ort
    import torch
    start = time.time()
    print(f"{'model':28} {'precision':9} {'torch':>10} {'sluice':>10}  bound")
    for name in a.only.split(","):
        if time.time() - start > a.deadline:
            print(f"{name:28} skipped: past the deadline")
            continue
        torch.manual_seed(0)
        model, size = make(name)
        model = model.eval()
        with torch.no_grad():
            for p in model.parameters():  # random init leaves many outputs nearly constant
                p.add_(0.02 * torch.randn_like(p))
        x = torch.rand(a.batch, 3, size, size)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.onnx")
            try:
                torch.onnx.export(model, (x[:1],), path)
            except Exception as e:  # noqa: BLE001 - the exporter's own failure is the finding
                print(f"{name:28} export failed: {str(e).splitlines()[0][:120]}")
                continue
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            iname = sess.get_inputs()[0].name
            ref = np.concatenate([sess.run(None, {iname: x[i:i + 1].numpy()})[0] for i in range(a.batch)])
            np.save(os.path.join(d, "x.npy"), x.numpy())
            torch_err = {}
            dev = model.cuda()
            xc = x.cuda()
            with torch.no_grad():
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                torch_err["fp32"] = rel(dev(xc).float().cpu().numpy(), ref)
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
                torch_err["tf32"] = rel(dev(xc).float().cpu().numpy(), ref)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    torch_err["bf16"] = rel(dev(xc).float().cpu().numpy(), ref)
            del dev, xc
            torch.cuda.empty_cache()
            for prec in a.precisions.split(","):
                out = os.path.join(d, f"out-{prec}")
                cmd = shlex.split(a.sluice) + ["forward", "--model", path, "--input", os.path.join(d, "x.npy"),
                                               "--outdir", out, "--device", "cuda", "--precision", prec]
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    last = [l for l in r.stderr.splitlines() if l.strip()][-1:] or [f"exit {r.returncode}"]
                    print(f"{name:28} {prec:9} {torch_err[prec]:10.2e} {'failed':>10}  {last[0][:140]}")
                    continue
                files = sorted(f for f in os.listdir(out) if f.endswith(".npy"))
                got = np.load(os.path.join(out, files[0]))
                err = rel(got, ref)
                bound = 1e-4 if prec == "fp32" else 1.5 * torch_err[prec]
                verdict = "ok" if err <= bound else "MISS"
                print(f"{name:28} {prec:9} {torch_err[prec]:10.2e} {err:10.2e}  {verdict} (<= {bound:.2e})")
    print(f"done in {time.time() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
