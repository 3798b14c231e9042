#!/usr/bin/env python3
"""Checks a finished Sluice run against PyTorch eager on the same weights and the same samples.

    python3 data_tools/check_against_torch.py --run sluice-out/deeplabv3 --model deeplabv3_resnet50 \\
        --seed-weights 0 --precision tf32 --indices 0,1,517,1023

The model is rebuilt with data_tools/export_model.py's build() (same torchvision constructor, same
weight seed, same BatchNorm perturbation: the weights the exported .onnx holds); the samples are
regenerated with data_tools/synthetic.py from the run's job (seed, shape, dtype, preprocessing are
read from the rank files' `job` attribute).  The reference is torch at fp32 with TF32 off.  Torch
is also run at the run's precision, so its own error shows what that precision costs on this model.

Pass rule (fixed tolerances, as the README states them, relaxed only where torch itself cannot meet them):
  rel = max|sluice - ref| / max|ref| <= max(tol, 1.5 * torch_rel)   tol: fp32/tf32 1e-3, fp16/bf16 2e-2
  argmax agreement >= min(99.5 %, torch's own agreement - 0.5 points)
Exits 0 when every stored output passes, 1 otherwise.
"""
import argparse
import os
import sys
import tomllib

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_model  # noqa: E402
import synthetic  # noqa: E402

TOL = {"fp32": 1e-3, "tf32": 1e-3, "fp16": 2e-2, "bf16": 2e-2}


def pass_rule(precision, torch_err=0.0, torch_agree=1.0, whole=1.0):
    """The pass rule of this script and of tests/gpu/compare_torch.py, as two pairs of limits.

    Returns ((max error, min argmax agreement) fixed in advance, (max error, min agreement) at
    torch's own level: 1.5x torch's error, torch's agreement less 0.5 points).  Errors are
    max|diff|/max|ref|; torch_err and torch_agree are torch's at `precision` against the fp32
    reference; agreements are parts of `whole` (1.0, or 100.0 for percent).
    """
    return (TOL[precision], 0.995 * whole), (1.5 * torch_err, torch_agree - 0.005 * whole)


def job_of(run):
    with h5py.File(os.path.join(run, "rank-00000.h5"), "r") as f:
        text = f.attrs["job"]
    return tomllib.loads(text.decode() if isinstance(text, bytes) else text)


def rel_error(got, ref):
    """max|got - ref| / max|ref|, in float64."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))


def torch_forward(module, x, precision, device="cuda"):
    """module(x) as torch eager runs it at `precision` (fp32 with TF32 off is the reference; fp16 and
    bf16 under autocast), as a float32 tensor."""
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    with torch.inference_mode():
        if dtype is None:
            return module(x).float()
        with torch.autocast(device, dtype=dtype):
            return module(x).float()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seed-weights", type=int, default=0, help="export_model.py --seed used for the .onnx")
    ap.add_argument("--precision", default=None, help="the run's precision (default: from its job)")
    ap.add_argument("--indices", default="0,1,2,3")
    ap.add_argument("--device", default="cuda", help="where torch runs (cpu: fp32 only)")
    a = ap.parse_args()

    job = job_of(a.run)
    precision = a.precision or job["precision"]
    shape = tuple(job["sample-shape"])
    idx = [int(i) for i in a.indices.split(",")]
    tab = synthetic.table(job["seed"], job["input-dtype"])
    x = np.concatenate([synthetic.samples(job["seed"], shape, i, 1, job["input-dtype"], tab) for i in idx])
    x = x.astype(np.float32) * job["scale"]
    if job["mean"]:
        x -= np.asarray(job["mean"], np.float32).reshape(1, -1, 1, 1)
    if job["std"]:
        x /= np.asarray(job["std"], np.float32).reshape(1, -1, 1, 1)

    _, module = export_model.build(a.model, a.seed_weights)
    module = module.to(a.device).eval()
    xt = torch.from_numpy(x).to(a.device)
    ref = torch_forward(module, xt, "fp32", a.device).cpu().numpy()
    own = torch_forward(module, xt, precision, a.device).cpu().numpy()

    ok = True
    with h5py.File(os.path.join(a.run, "outputs.h5"), "r") as f:
        stored = {name: np.stack([f["outputs"][name][i] for i in idx]) for name in f["outputs"]}
    print(f"{a.model} on samples {idx} of {a.run}, precision {precision}, torch {torch.__version__}")
    ref_arg = ref.argmax(axis=1)
    own_agree = 100.0 * np.mean(own.argmax(axis=1) == ref_arg)
    torch_rel = rel_error(own, ref) if "logits" in stored else 0.0
    # Each check passes by the fixed limit or at torch's level, whichever is looser.
    (tol, fixed_need), (torch_limit, torch_need) = pass_rule(precision, torch_rel, own_agree, whole=100.0)
    if "logits" in stored:
        got = stored["logits"].astype(np.float32)
        rel = rel_error(got, ref)
        limit = max(tol, torch_limit)
        good = rel <= limit
        ok &= good
        print(f"logits: max|diff|/max|ref| = {rel:.3e} (torch at {precision}: {torch_rel:.3e}; limit {limit:.3e}) "
              f"{'PASS' if good else 'FAIL'}")
        got_arg = got.argmax(axis=1)
    else:
        got_arg = stored["argmax"]
    agree = 100.0 * float(np.mean(got_arg == ref_arg))
    need = min(fixed_need, torch_need)
    good = agree >= need
    ok &= good
    print(f"argmax agreement with torch fp32: {agree:.3f} % (torch at {precision}: {own_agree:.3f} %; need {need:.2f} %) "
          f"{'PASS' if good else 'FAIL'}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
