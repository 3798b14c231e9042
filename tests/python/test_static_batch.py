"""Models exported with a fixed batch run at any --batch-size (model/batch_adapt.h).

Exported models: data_tools/export_model.py --static-batch does what users usually do,
torch.onnx.export(m, x[:1], path) with no dynamic axes, with the TorchScript exporter (opset 17) and,
where the local torch has it (>= 2.5), the dynamo exporter (opset 18); `sluice run` then reads 9
samples from an HDF5 file at --batch-size 4 and 7 (a partial last batch) and must match torch eager on
the same samples.  Crafted models (onnx.helper) put the batch into Reshape, Resize and Slice
constants the way exporters do, or mix samples so that only sub-batches are right; they are checked
per sample against onnxruntime at the model's own batch.
"""
import os
import subprocess

import h5py
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.sluice_test import torch_available

ROOT = os.environ.get("SLUICE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SLUICE_BIN = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))
TORCH_PY = os.environ.get("SLUICE_TORCH_PYTHON", "/usr/bin/python3")
EXPORT = os.path.join(ROOT, "data_tools", "export_model.py")
SIZE = 64
SAMPLES = 9
REL_TOL = 1e-4  # as tests/python/test_models.py

if not os.access(SLUICE_BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {SLUICE_BIN} (set SLUICE_BIN)", allow_module_level=True)


needs_torch = pytest.mark.skipif(not torch_available(TORCH_PY), reason=f"{TORCH_PY} has no torch/torchvision")


def sluice(*args, check=True):
    r = subprocess.run([SLUICE_BIN, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, f"sluice {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}"
    return r


def rel_err(got, ref):
    return np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    cache = tmp_path_factory.mktemp("static")

    def get(model, exporter):
        folder = cache / f"{model}-{exporter}"
        if not (folder / "model.onnx").exists():
            folder.mkdir(exist_ok=True)
            r = subprocess.run([TORCH_PY, EXPORT, "--model", model, "--out", str(folder / "model.onnx"), "--height",
                                str(SIZE), "--width", str(SIZE), "--batch", str(SAMPLES), "--static-batch", "--seed", "1",
                                "--exporter", exporter, "--save-reference", str(folder)], capture_output=True, text=True)
            if r.returncode == 2 and "unavailable" in r.stderr:
                pytest.skip(r.stderr.strip())
            assert r.returncode == 0, r.stderr
        return folder
    return get


@needs_torch
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("model", ["resnet18", "tiny_deeplab"])
def test_static_batch_export_runs_at_batch_4_and_7_like_torch(model, exporter, exports, tmp_path):
    folder = exports(model, exporter)
    x, ref = np.load(folder / "input.npy"), np.load(folder / "torch_output.npy")
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["images"] = x
    modes = ["auto", "sub-batch"] if model == "tiny_deeplab" else ["auto"]
    for batch in (4, 7):
        for mode in modes:
            out = tmp_path / f"run-{batch}-{mode}"
            r = sluice("run", "--model", folder / "model.onnx", "--input", tmp_path / "x.h5", "--input-dataset", "/images",
                       "--batch-size", batch, "--outputs", "logits", "--output", out, "--device", "cpu",
                       "--static-batch", mode)
            said = "re-specialized to batch" if mode == "auto" else "sub-batches"
            assert said in r.stderr, r.stderr
            with h5py.File(out / "outputs.h5") as f:
                got = f["outputs/logits"][:]
            assert got.shape == ref.shape
            err = rel_err(got, ref)
            assert err <= REL_TOL, f"{model} {exporter} batch {batch} {mode}: max|diff|/max|ref| = {err:.2e}"


# ---- crafted models ------------------------------------------------------------------------------

def model_of(nodes, inits, x_shape, y_shape, opset=17):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def conv_reshape_gemm(rng):
    """Flattening with a literal [1, C*H*W] target, as the dynamo exporter writes view(1, -1)."""
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "t": np.array([1, 4 * 6 * 6], np.int64),
             "fc": rng.standard_normal((144, 5)).astype(np.float32), "b": rng.standard_normal((1, 5)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "t"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    return model_of(nodes, inits, [1, 3, 6, 6], [1, 5])


def upsample_sizes(rng):
    """Resize with sizes [1, C, 2H, 2W] and a Slice [0:1] on the batch axis, then Reshape [1, -1]."""
    inits = {"w": rng.standard_normal((2, 3, 1, 1)).astype(np.float32), "sizes": np.array([1, 2, 10, 8], np.int64),
             "st": np.array([0, 1], np.int64), "en": np.array([1, 2], np.int64), "ax": np.array([0, 1], np.int64),
             "t": np.array([1, -1], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Resize", ["c", "", "", "sizes"], ["u"], mode="linear"),
             helper.make_node("Slice", ["u", "st", "en", "ax"], ["s"]),
             helper.make_node("Reshape", ["s", "t"], ["y"])]
    return model_of(nodes, inits, [1, 3, 5, 4], [1, 80])


def attention(rng):
    """Multi-head self-attention with the batch inside Reshape targets [1, 6, 2, 4] and [1, 6, 8]."""
    inits = {"wq": rng.standard_normal((8, 8)).astype(np.float32), "wk": rng.standard_normal((8, 8)).astype(np.float32),
             "wv": rng.standard_normal((8, 8)).astype(np.float32), "heads": np.array([1, 6, 2, 4], np.int64),
             "back": np.array([1, 6, 8], np.int64), "scale": np.array(0.5, np.float32)}
    nodes = []
    for n in "qkv":
        nodes += [helper.make_node("MatMul", ["x", f"w{n}"], [f"{n}0"]),
                  helper.make_node("Reshape", [f"{n}0", "heads"], [f"{n}1"]),
                  helper.make_node("Transpose", [f"{n}1"], [n], perm=[0, 2, 1, 3] if n != "k" else [0, 2, 3, 1])]
    nodes += [helper.make_node("MatMul", ["q", "k"], ["s0"]),
              helper.make_node("Mul", ["s0", "scale"], ["s1"]),
              helper.make_node("Softmax", ["s1"], ["a"], axis=-1),
              helper.make_node("MatMul", ["a", "v"], ["o"]),
              helper.make_node("Transpose", ["o"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "back"], ["y"])]
    return model_of(nodes, inits, [1, 6, 8], [1, 6, 8])


def as_strided_views(rng):
    """torch.export's as_strided: Reshape to 1-D, then Gather at constant offsets; one read of the whole
    tensor in order (ConvNeXt's and Swin's pooled head), one transposed within the sample."""
    c, h, w = 3, 4, 5
    ident = np.arange(c * h * w, dtype=np.int64).reshape(1, c * h * w, 1, 1)
    transposed = np.array([[[[ci * h * w + hi * w + wi for ci in range(c)] for hi in range(h)] for wi in range(w)]],
                          np.int64)  # [1, W, H, C]
    inits = {"flat": np.array([-1], np.int64), "ident": ident, "transposed": transposed,
             "back": np.array([1, -1], np.int64), "ax": np.array([-1, -2], np.int64)}
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "flat"], ["f"]),
             helper.make_node("Gather", ["f", "ident"], ["g1"], axis=0),
             helper.make_node("Gather", ["f", "transposed"], ["g2"], axis=0),
             helper.make_node("ReduceMean", ["g2", "ax"], ["m"], keepdims=1),  # [1, W, 1, 1]
             helper.make_node("Reshape", ["g1", "back"], ["y1"]),
             helper.make_node("Reshape", ["m", "back"], ["y2"]),
             helper.make_node("Concat", ["y1", "y2"], ["y"], axis=1)]
    return model_of(nodes, inits, [1, c, h, w], [1, c * h * w + w], opset=18)


def constant_query_attention(rng, fused_heads=False):
    """Cross-attention whose queries come from learned embeddings only (DETR's decoder, SigLIP's
    pooling probe): at batch 1 q is a constant without the batch.  transformers 4 writes the heads
    merged with the batch, k [B x H, S, d] and q [H, Q, d]; transformers 5 keeps them apart, k
    [B, H, S, d] and q [1, H, Q, d], which Sluice fuses into one attention node."""
    heads, seq, d, queries = 2, 6, 4, 3
    inits = {"wk": rng.standard_normal((8, 8)).astype(np.float32), "wv": rng.standard_normal((8, 8)).astype(np.float32),
             "split": np.array([1, seq, heads, d], np.int64), "scale": np.array(0.5, np.float32),
             "back": np.array([1, queries, heads * d], np.int64)}
    if fused_heads:
        inits["q"] = rng.standard_normal((1, heads, queries, d)).astype(np.float32)
        kperm, tperm = [0, 2, 3, 1], [0, 2, 1, 3]
    else:
        inits["q"] = rng.standard_normal((heads, queries, d)).astype(np.float32)
        inits["merge"] = np.array([heads, seq, d], np.int64)
        inits["unmerge"] = np.array([1, heads, queries, d], np.int64)
    nodes = []
    for n in "kv":
        nodes += [helper.make_node("MatMul", ["x", f"w{n}"], [f"{n}0"]),
                  helper.make_node("Reshape", [f"{n}0", "split"], [f"{n}1"]),
                  helper.make_node("Transpose", [f"{n}1"], [f"{n}2"], perm=[0, 2, 1, 3])]
        if not fused_heads:
            nodes.append(helper.make_node("Reshape", [f"{n}2", "merge"], [n]))
    if fused_heads:
        nodes += [helper.make_node("Transpose", ["k1"], ["k"], perm=kperm), helper.make_node("Identity", ["v2"], ["v"])]
        nodes += [helper.make_node("MatMul", ["q", "k"], ["s0"])]
    else:
        nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", ["q", "kt"], ["s0"])]
    nodes += [helper.make_node("Mul", ["s0", "scale"], ["s1"]),
              helper.make_node("Softmax", ["s1"], ["a"], axis=-1),
              helper.make_node("MatMul", ["a", "v"], ["o"])]
    if not fused_heads:
        nodes.append(helper.make_node("Reshape", ["o", "unmerge"], ["o4"]))
    nodes += [helper.make_node("Transpose", ["o" if fused_heads else "o4"], ["o5"], perm=tperm if fused_heads else [0, 2, 1, 3]),
              helper.make_node("Reshape", ["o5", "back"], ["y"])]
    return model_of(nodes, inits, [1, seq, 8], [1, queries, heads * d])


def constant_query_attention_4d(rng):
    return constant_query_attention(rng, fused_heads=True)


def batch_mixer(rng, batch=1):
    """Subtracts the mean over the batch: right only on the model's own batch, so only sub-batches are."""
    inits = {"ax": np.array([0], np.int64)}
    nodes = [helper.make_node("ReduceMean", ["x", "ax"], ["m"], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["y"])]
    return model_of(nodes, inits, [batch, 3, 4], [batch, 3, 4], opset=18)


def forward(model, x, tmp_path, mode="auto", check=True):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", x)
    r = sluice("forward", "--model", path, "--input", tmp_path / "x.npy", "--outdir", tmp_path / "o", "--device", "cpu",
               "--static-batch", mode, check=check)
    return r, (np.load(tmp_path / "o" / "y.npy") if r.returncode == 0 else None)


def per_sample_reference(model, x, model_batch=1):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"x": x[i:i + model_batch]})[0] for i in range(0, len(x), model_batch)])


@pytest.mark.parametrize("build", [conv_reshape_gemm, upsample_sizes, attention, as_strided_views,
                                   constant_query_attention, constant_query_attention_4d])
@pytest.mark.parametrize("batch", [4, 7])
def test_batch_carrying_constants_are_respecialized(build, batch, tmp_path):
    rng = np.random.default_rng(batch)
    model = build(rng)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = rng.standard_normal([batch] + shape[1:]).astype(np.float32)
    ref = per_sample_reference(model, x)
    for mode in ("respecialize", "sub-batch"):
        r, got = forward(model, x, tmp_path / mode, mode)
        assert got.shape == ref.shape and rel_err(got, ref) <= REL_TOL, f"{mode}: {rel_err(got, ref):.2e}\n{r.stderr}"
        assert ("re-specialized to batch" if mode == "respecialize" else "sub-batches") in r.stderr, r.stderr


def test_a_model_that_mixes_samples_runs_on_sub_batches(tmp_path):
    rng = np.random.default_rng(0)
    model = batch_mixer(rng)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    r, _ = forward(model, x, tmp_path / "strict", "respecialize", check=False)
    assert r.returncode == 3 and "reduces over the batch axis" in r.stderr, r.stderr
    r, got = forward(model, x, tmp_path / "auto")
    assert "5 sub-batches" in r.stderr, r.stderr
    # The warning says what it costs and how to export the model so that it needs no sub-batches.
    assert "warning" in r.stderr and "up to 5x the time per batch" in r.stderr, r.stderr
    assert "dynamic_shapes=" in r.stderr and "dynamic_axes=" in r.stderr, r.stderr
    ref = per_sample_reference(model, x)
    assert np.allclose(ref, 0) and rel_err(got + 1, ref + 1) <= REL_TOL  # each sample is its own batch: all zero


def test_sub_batches_need_a_multiple_of_the_model_batch(tmp_path):
    rng = np.random.default_rng(1)
    model = batch_mixer(rng, batch=2)
    x = rng.standard_normal((6, 3, 4)).astype(np.float32)
    _, got = forward(model, x, tmp_path / "six")
    ref = per_sample_reference(model, x, model_batch=2)
    assert rel_err(got, ref) <= REL_TOL
    r, _ = forward(model, x[:5], tmp_path / "five", check=False)
    assert r.returncode == 3 and "multiple of 2" in r.stderr and "reduces over the batch axis" in r.stderr, r.stderr
