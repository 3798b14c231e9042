#!/usr/bin/env python3
"""The model zoo of tests/data/zoo on the CUDA engine, against onnxruntime's stored outputs.

Runs every export the manifest lists as ok through `sluice forward --device cuda` at each asked
precision (batch 3, the fixed input stored beside the model) and prints, per model and precision,
max|diff|/max|ref| over all outputs, or the first line of the error.  fp32 must be within 1e-4 of
onnxruntime (the CPU engine's bound, test_zoo.py); tf32, fp16 and bf16 errors are printed for the
comparison with torch's own error at those precisions.  Exit status 1 when an fp32 run fails or
misses the bound.

    python3 tests/gpu/zoo_cuda.py --sluice ".devrt/run sluice" --zoo tests/data/zoo --json out.json
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import numpy as np

FP32_TOL = 1e-4


def file_name(output):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", output) + ".npy"


def relative_error(got, ref):
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    return float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max(initial=0.0)) / scale


def run_one(sluice, zoo, name, precision):
    model = os.path.join(zoo, f"{name}.onnx")
    x = os.path.join(zoo, name.split(".")[0] + ".input.npy")
    ref = np.load(os.path.join(zoo, f"{name}.ref.npz"))
    with tempfile.TemporaryDirectory() as d:
        cmd = shlex.split(sluice) + ["forward", "--model", model, "--input", x, "--outdir", d, "--device", "cuda",
                                     "--precision", precision]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
            return None, (lines[-1] if lines else f"exit {r.returncode}")
        worst = 0.0
        for out in ref.files:
            got = np.load(os.path.join(d, file_name(out)))
            if got.shape != ref[out].shape:
                return None, f"{out}: shape {got.shape} != {ref[out].shape}"
            if got.dtype.kind in "iub":
                if not np.array_equal(got, ref[out]):
                    return None, f"{out}: integer outputs differ"
                continue
            worst = max(worst, relative_error(got, ref[out]))
        return worst, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default="sluice", help="command that runs sluice (e.g. '.devrt/run sluice')")
    ap.add_argument("--zoo", default=os.path.join(os.path.dirname(__file__), "..", "data", "zoo"))
    ap.add_argument("--precisions", default="fp32,tf32,bf16")
    ap.add_argument("--only", default="", help="a regular expression the export names must match")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    with open(os.path.join(a.zoo, "manifest.json")) as fh:
        manifest = json.load(fh)
    names = [f"{r['model']}.{r['exporter']}" for r in manifest if r["status"] == "ok"]
    if a.only:
        names = [n for n in names if re.search(a.only, n)]
    precisions = a.precisions.split(",")
    results, bad = {}, []
    print(f"{'export':40s} " + " ".join(f"{p:>10s}" for p in precisions))
    for name in names:
        row = {}
        cells = []
        for p in precisions:
            err, fail = run_one(a.sluice, a.zoo, name, p)
            row[p] = {"error": err, "failure": fail}
            cells.append(f"{err:10.2e}" if fail is None else f"{'FAIL':>10s}")
            if p == "fp32" and (fail is not None or err > FP32_TOL):
                bad.append(name)
        results[name] = row
        print(f"{name:40s} " + " ".join(cells), flush=True)
        for p in precisions:
            if row[p]["failure"]:
                print(f"    {p}: {row[p]['failure']}", flush=True)
    ok = len(names) - len(bad)
    print(f"zoo on cuda: {ok} of {len(names)} exports within {FP32_TOL:g} of onnxruntime at fp32; failing: {', '.join(bad) or 'none'}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
