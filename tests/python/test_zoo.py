"""The model zoo of tests/data/zoo on the CPU engine, against onnxruntime.

tests/data/zoo holds tiny random-weight configurations of torchvision, timm and transformers vision
models and a YOLO-style CSP net, each exported at batch 1 by torch 2.11's dynamo exporter and by its
TorchScript exporter where that works (some also by the dynamo exporter at opsets 18 and 21) (data_tools/export_zoo.py, run on the GPU host; manifest.json
lists every model, exporter, opset, op counts and each export that failed, with its error).  Beside
each model: a fixed input of 3 samples and onnxruntime's outputs for them, sample by sample.

Each model runs at batch 3 (the batch-1 export re-specialized: one test asserts that every export is) through
`sluice forward --device cpu` (every output) and `sluice run` (the first output, stored in HDF5),
within 1e-4 of onnxruntime relative to max|ref|: float32 accumulation-order differences over a few
small layers stay far below that.  Models that Sluice cannot run yet are expected failures that
name what is missing (strict: one that starts to pass must lose its entry).  The same builders
exported by the older torch of the CI machines (1.13, TorchScript, opsets 13 and 17) run too.
"""
import json
import os
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, sluice, torch_available  # noqa: E402

ROOT = os.environ.get("SLUICE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ZOO = os.path.join(ROOT, "tests", "data", "zoo")
REL_TOL = 1e-4
BATCH = 3
TORCH_PY = os.environ.get("SLUICE_TORCH_PYTHON", "/usr/bin/python3")

if not os.access(BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {BIN} (set SLUICE_BIN)", allow_module_level=True)

with open(os.path.join(ZOO, "manifest.json")) as fh:
    MANIFEST = json.load(fh)
EXPORTS = [f"{r['model']}.{r['exporter']}" for r in MANIFEST if r["status"] == "ok"]

# What each model that does not run yet is missing.
MISSING = {}

# Exports whose outputs no engine can be held to: RT-DETR's encoder picks its queries by TopK over
# scores that random weights leave nearly equal, so a last-bit difference picks other queries and
# other boxes (onnxruntime 1.23 against the references' 1.30: 5.2e-4 on the logits, 0.54 on the
# boxes; torch against onnxruntime 6.4e-4 and 0.67, in manifest.json).  They must load, trace the
# batch and run (test_every_batch_1_export_runs_at_the_job_batch_re_specialized); their ops are
# checked one by one against onnxruntime (tests/python/test_ops_sampling.py).
UNSTABLE = {f"hf_rtdetr.{e}": "RT-DETR's top-k query selection over random weights is not reproducible across "
            "engines (onnxruntime versions differ by 0.54 on the boxes)" for e in ("dynamo", "torchscript")}


def file_name(output):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", output) + ".npy"


def relative_error(got, ref):
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    return float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max(initial=0.0)) / scale


def cases():
    for name in EXPORTS:
        marks = [pytest.mark.xfail(reason=MISSING[name], strict=True)] if name in MISSING else []
        if name in UNSTABLE:
            marks.append(pytest.mark.skip(reason=UNSTABLE[name]))
        yield pytest.param(name, marks=marks, id=name)


def test_the_zoo_has_thirty_architectures_that_run():
    archs = {r["model"] for r in MANIFEST if r["status"] == "ok" and f"{r['model']}.{r['exporter']}" not in MISSING}
    assert len(archs) >= 30, sorted(archs)
    for r in MANIFEST:  # every export that failed says why
        assert r["status"] == "ok" or r.get("error"), r


def test_every_reference_output_carries_a_signal():
    # An output that is the same everywhere (a random head behind a ReLU gave all zeros once) would
    # be matched by an engine that computes nothing.
    flat = []
    for ref in sorted(f for f in os.listdir(ZOO) if f.endswith(".ref.npz")):
        data = np.load(os.path.join(ZOO, ref))
        for out in data.files:
            v = data[out].astype(np.float64)
            if v.size > 1 and v.std() <= 1e-6 * max(np.abs(v).max(), 1e-30):
                flat.append(f"{ref}:{out} (max|v| {np.abs(v).max():.3g})")
    assert not flat, flat


# Every export of the zoo is fixed at batch 1 (torch.onnx.export(m, (x,), path), no dynamic axes) and
# runs at batch 3 re-specialized, not as 3 sub-batches of 1 (about 10x slower on a GPU).  An export
# allowed to fall back names its reason here (strict: one that re-specializes must lose its entry);
# classifiers, segmenters, depth models and detectors may not fall back at all.
SUB_BATCHED = {}
NOT_A_TARGET = {"hf_clip_vision", "hf_siglip_vision", "hf_dinov2"}  # encoders: embeddings, no task head


def batch_of_run(stderr):
    """How `sluice forward`/`run` says it ran a batch-1 model at batch 3: 're-specialized' or 'sub-batches'."""
    if re.search(r"re-specialized to batch 3\b", stderr):
        return "re-specialized"
    m = re.search(r"each batch of 3 runs as 3 sub-batches of 1 \(not re-specialized: (.*?)\); expect", stderr)
    return f"sub-batches ({m.group(1)})" if m else f"? ({stderr.strip()[-300:]})"


def test_every_batch_1_export_runs_at_the_job_batch_re_specialized(tmp_path):
    table, wrong = [], []
    for name in EXPORTS:
        if name in MISSING:
            continue
        model = os.path.join(ZOO, f"{name}.onnx")
        x = os.path.join(ZOO, name.split(".")[0] + ".input.npy")
        r = subprocess.run([BIN, "forward", "--model", model, "--input", x, "--outdir", str(tmp_path / name), "--device",
                            "cpu", "--threads", "2"], capture_output=True, text=True, timeout=300)
        how = batch_of_run(r.stderr) if r.returncode == 0 else f"failed: {r.stderr.strip()[-300:]}"
        table.append(f"{name:34s} {how}")
        allowed = name in SUB_BATCHED and name.split(".")[0] in NOT_A_TARGET
        if (how == "re-specialized") == allowed or (how != "re-specialized" and not how.startswith("sub-batches")):
            wrong.append(table[-1])
    print("\n".join(table))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name", list(cases()))
def test_forward_on_cpu_matches_onnxruntime(name, tmp_path):
    model = os.path.join(ZOO, f"{name}.onnx")
    x = os.path.join(ZOO, name.split(".")[0] + ".input.npy")
    ref = np.load(os.path.join(ZOO, f"{name}.ref.npz"))
    r = subprocess.run([BIN, "forward", "--model", model, "--input", x, "--outdir", str(tmp_path), "--device", "cpu",
                        "--threads", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr.strip()
    for out in ref.files:
        got = np.load(tmp_path / file_name(out))
        assert got.shape == ref[out].shape, f"{out}: {got.shape} != {ref[out].shape}"
        err = relative_error(got, ref[out])
        assert err <= REL_TOL, f"{out}: max|diff|/max|ref| = {err:.3g}"


@pytest.mark.parametrize("name", list(cases()))
def test_run_at_batch_3_matches_onnxruntime(name, tmp_path):
    model = os.path.join(ZOO, f"{name}.onnx")
    x = os.path.join(ZOO, name.split(".")[0] + ".input.npy")
    ref = np.load(os.path.join(ZOO, f"{name}.ref.npz"))
    first = next(r for r in MANIFEST if f"{r['model']}.{r['exporter']}" == name)["outputs"]
    first = next(iter(first))
    p = sluice("run", "--model", model, "--input", x, "--batch-size", BATCH, "--device", "cpu", "--cpu-threads", 2,
               "--outputs", "logits", "--output", tmp_path / "out", "--quiet")
    assert p.returncode == 0, p.stderr.strip()
    with h5py.File(tmp_path / "out" / "outputs.h5", "r") as f:
        got = f["outputs"]["logits"][:]
    assert got.shape == ref[first].shape, f"{got.shape} != {ref[first].shape}"
    err = relative_error(got, ref[first])
    assert err <= REL_TOL, f"max|diff|/max|ref| = {err:.3g}"


# The exports of the older torch on the CI machines (1.13, TorchScript only): below opset 17 it
# writes LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div and GELU through Erf, which Sluice fuses back.
EXPORT_OLD = """
import sys, torch
sys.path.insert(0, sys.argv[4])
import export_zoo as z
name, opset, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
build, chw = z.ZOO[name]
torch.manual_seed(z.seed_of(name))
m = build().eval()
z.perturb(m, z.seed_of(name) + 1)
with torch.no_grad():
    torch.onnx.export(m, torch.randn((1,) + chw), out, opset_version=opset)
"""


@pytest.mark.skipif(not torch_available(TORCH_PY), reason=f"{TORCH_PY} has no torch/torchvision")
@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("model", ["tv_swin", "tv_convnext", "tv_shufflenet_v2", "yolo_csp"])
def test_exports_of_the_older_torch_match_onnxruntime(model, opset, tmp_path):
    import onnx
    import onnxruntime as ort
    path = tmp_path / "model.onnx"
    r = subprocess.run([TORCH_PY, "-c", EXPORT_OLD, model, str(opset), str(path), os.path.join(ROOT, "data_tools")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    if model in ("tv_swin", "tv_convnext"):
        assert ("LayerNormalization" in ops) == (opset >= 17) and "Erf" in ops, ops
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(opset).standard_normal((BATCH,) + tuple(sess.get_inputs()[0].shape[1:])).astype(np.float32)
    ref = np.concatenate([sess.run(None, {sess.get_inputs()[0].name: x[i:i + 1]})[0] for i in range(BATCH)])
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([BIN, "forward", "--model", str(path), "--input", str(tmp_path / "x.npy"), "--outdir",
                        str(tmp_path / "out"), "--device", "cpu", "--threads", "2"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr.strip()
    got = np.load(tmp_path / "out" / file_name(sess.get_outputs()[0].name))
    err = relative_error(got, ref)
    assert err <= REL_TOL, f"max|diff|/max|ref| = {err:.3g}"


# torch 1.13 exporting at a fixed batch of 4 writes the batch merged with the attention heads
# ([S, 4 x H, D], sequence-first attention) and with Swin's windows ([4 x windows, N, C]); the model
# still keeps samples apart, and Sluice re-specializes it to other batches.
# Gradients stay on: under no_grad torchvision's attention takes a fused fast path that the exporter
# cannot write.
EXPORT_STATIC = EXPORT_OLD.replace("with torch.no_grad():\n    ", "").replace("torch.randn((1,) + chw)",
                                                                             "torch.randn((4,) + chw)")


@pytest.mark.skipif(not torch_available(TORCH_PY), reason=f"{TORCH_PY} has no torch/torchvision")
@pytest.mark.parametrize("model", ["tv_vit", "tv_swin"])
def test_a_static_batch_export_that_merges_the_batch_with_heads_or_windows_runs_at_any_batch(model, tmp_path):
    import onnxruntime as ort
    path = tmp_path / "model.onnx"
    r = subprocess.run([TORCH_PY, "-c", EXPORT_STATIC, model, "17", str(path), os.path.join(ROOT, "data_tools")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(5).standard_normal((12,) + tuple(sess.get_inputs()[0].shape[1:])).astype(np.float32)
    ref = np.concatenate([sess.run(None, {name: x[i:i + 4]})[0] for i in range(0, 12, 4)])
    np.save(tmp_path / "x.npy", x)
    for batch, mode in ((4, "auto"), (6, "respecialize"), (3, "respecialize")):
        out = tmp_path / f"out{batch}"
        p = sluice("run", "--model", path, "--input", tmp_path / "x.npy", "--batch-size", batch, "--static-batch", mode,
                   "--device", "cpu", "--cpu-threads", 2, "--outputs", "logits", "--output", out, "--quiet")
        assert p.returncode == 0, p.stderr.strip()
        with h5py.File(out / "outputs.h5", "r") as f:
            got = f["outputs"]["logits"][:]
        err = relative_error(got, ref)
        assert err <= REL_TOL, f"batch {batch}: max|diff|/max|ref| = {err:.3g}"
