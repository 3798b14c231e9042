#!/usr/bin/env python3
"""Static-batch models on the CUDA engine: re-specialized and sub-batched, against torch eager.

Run ON THE GPU HOST from the repository root (python3 there has torch >= 2.5 with the dynamo
exporter, torchvision, onnx, h5py); it builds nothing:

    python3 tests/gpu/static_batch_check.py --sluice ".devrt/run .devrt/bin/sluice"

For each model (ResNet-18, the small DeepLab-like tiny_deeplab, DeepLabV3-ResNet50) and exporter
(TorchScript opset 17, dynamo opset 18), data_tools/export_model.py --static-batch exports it with
the batch fixed at 1, as users do, and saves torch's eager fp32 output on N seeded samples.  Then
`sluice run --device cuda --precision fp32` (CUDA graphs on) reads those samples from an HDF5 file
at each --batch-size and --static-batch mode (auto: re-specialized; sub-batch: the CUDA graph holds
batch-size forward passes) and the stored logits are compared with torch's.  Pass: max|diff|/max|ref|
<= 1e-3 (README, fp32) and the log names the way the batch was adapted.  Prints a table (images/s
from report.json is information only); exits 1 when a row fails, 2 when something could not run.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORT = os.path.join(ROOT, "data_tools", "export_model.py")
MODELS = {"resnet18": (16, 224), "tiny_deeplab": (16, 128), "deeplabv3_resnet50": (8, 256)}  # samples, size
REL_TOL = 1e-3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"), help="command that runs sluice")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--exporters", default="torchscript,dynamo")
    p.add_argument("--batches", default="8,7")
    p.add_argument("--modes", default="auto,sub-batch")
    p.add_argument("--workdir", default="/tmp/sluice-static-batch")
    p.add_argument("--device", default="cuda", help="cuda; cpu checks the script itself")
    a = p.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    rows, failed, broken = [], False, False
    for model in a.models.split(","):
        samples, size = MODELS[model]
        for exporter in a.exporters.split(","):
            d = os.path.join(a.workdir, f"{model}-{exporter}")
            if not os.path.exists(os.path.join(d, "model.onnx")):
                r = subprocess.run([sys.executable, EXPORT, "--model", model, "--out", os.path.join(d, "model.onnx"),
                                    "--height", str(size), "--width", str(size), "--batch", str(samples),
                                    "--static-batch", "--seed", "3", "--exporter", exporter, "--save-reference", d],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"export {model} {exporter} failed: {r.stderr.strip()[-400:]}", file=sys.stderr)
                    broken = True
                    continue
            x, ref = np.load(os.path.join(d, "input.npy")), np.load(os.path.join(d, "torch_output.npy"))
            with h5py.File(os.path.join(d, "x.h5"), "w") as f:
                f["images"] = x
            for batch in map(int, a.batches.split(",")):
                for mode in a.modes.split(","):
                    out = os.path.join(d, f"run-{batch}-{mode}")
                    cmd = shlex.split(a.sluice) + [
                        "run", "--model", os.path.join(d, "model.onnx"), "--input", os.path.join(d, "x.h5"),
                        "--input-dataset", "/images", "--batch-size", str(batch), "--static-batch", mode,
                        "--outputs", "logits", "--output", out, "--overwrite", "--device", a.device, "--precision", "fp32"]
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    if r.returncode != 0:
                        rows.append((model, exporter, batch, mode, "-", float("nan"), 0.0, "ERROR"))
                        print(f"{model} {exporter} {batch} {mode}: exit {r.returncode}: {r.stderr.strip()[-400:]}",
                              file=sys.stderr)
                        failed = True
                        continue
                    how = "sub-batches" if "sub-batches of" in r.stderr else "respecialized" if "re-specialized to" in r.stderr else "?"
                    with h5py.File(os.path.join(out, "outputs.h5")) as f:
                        got = f["outputs/logits"][:]
                    err = float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))
                    with open(os.path.join(out, "report.json")) as f:
                        ips = json.load(f)["job"]["throughput"]
                    ok = got.shape == ref.shape and err <= REL_TOL and how != "?" and \
                        (mode != "sub-batch" or how == "sub-batches")
                    failed |= not ok
                    rows.append((model, exporter, batch, mode, how, err, ips, "ok" if ok else "FAIL"))
    print(f"{'model':<20} {'exporter':<12} {'batch':>5} {'mode':<10} {'adapted':<14} {'rel err':>9} {'img/s':>8}  status")
    for r in rows:
        print(f"{r[0]:<20} {r[1]:<12} {r[2]:>5} {r[3]:<10} {r[4]:<14} {r[5]:>9.2e} {r[6]:>8.1f}  {r[7]}")
    print("FAILED" if failed or broken else "OK")
    return 1 if failed else 2 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
