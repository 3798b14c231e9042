"""torchvision's sequence-first attention on the CPU engine, against onnxruntime, with the Transposes
that model/push_transposes.cpp moves (SLUICE_PUSH_TRANSPOSES on and off).

The model is written here with onnx.helper the way torch 2.x's TorchScript exporter writes
torchvision's ViT encoder blocks at a static batch (nn.MultiheadAttention, batch_first,
need_weights=False: the in-projection on [S, N, E], unflatten/unsqueeze/transpose/squeeze/select,
q, k, v as [S, N x H, D] transposed to [N x H, S, D] and viewed [N, H, S, D], SDPA decomposed with
sqrt(scale) on q and on k transposed, permute (2, 0, 1, 3), the out-projection as a Gemm on
[S x N, E], back to [S, N, E] and [N, S, E]): the CI machines' torch 1.13 writes the older spelling.
It runs at its own batch and re-specialized to two others.
"""
import os
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, MPI_ENV, sluice  # noqa: E402

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

if not os.access(BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {BIN} (set SLUICE_BIN)", allow_module_level=True)

N, S, H, D, LAYERS, CLASSES = 4, 13, 3, 8, 2, 5
E = H * D


def build(path, rng):
    nodes, inits = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(name, v):
        return const(name, np.array(v, dtype=np.int64))

    def floats(name, shape, scale):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{len(nodes)}", **attrs))
        return outs[0]

    x = node("LayerNormalization", ["x", floats("ln0_g", [E], 1), floats("ln0_b", [E], 0.1)], ["x0"], epsilon=1e-6)
    ints("unflat", [S, N, 3, E])
    ints("zero", [0])
    ints("minus2", [-2])
    ints("heads3", [S, N * H, D])
    ints("heads4", [N, H, S, D])
    ints("heads4t", [N, H, D, S])
    ints("rows", [S * N, E])
    ints("back", [S, N, E])
    const("root_scale", np.array([D ** -0.25], dtype=np.float32))
    for i in range(LAYERS):
        p = f"l{i}_"
        xn = node("LayerNormalization", [x, floats(p + "ln_g", [E], 1), floats(p + "ln_b", [E], 0.1)], [p + "xn"],
                  epsilon=1e-6)
        xs = node("Transpose", [xn], [p + "xs"], perm=[1, 0, 2])
        proj = node("MatMul", [xs, floats(p + "w_in", [E, 3 * E], E ** -0.5)], [p + "proj0"])
        proj = node("Add", [floats(p + "b_in", [3 * E], 0.1), proj], [p + "proj"])
        proj = node("Reshape", [proj, "unflat"], [p + "proj4"])
        proj = node("Unsqueeze", [proj, "zero"], [p + "proj5"])
        proj = node("Transpose", [proj], [p + "proj5t"], perm=[3, 1, 2, 0, 4])
        qkv = node("Squeeze", [proj, "minus2"], [p + "qkv"])
        heads = []
        for j, name in enumerate("qkv"):
            sel = node("Gather", [qkv, ints(p + name + "_i", j)], [p + name + "_sel"], axis=0)
            r3 = node("Reshape", [sel, "heads3"], [p + name + "_r3"])
            heads.append(node("Transpose", [r3], [p + name + "_t3"], perm=[1, 0, 2]))
        q4 = node("Reshape", [heads[0], "heads4"], [p + "q4"])
        v4 = node("Reshape", [heads[2], "heads4"], [p + "v4"])
        kt = node("Transpose", [heads[1]], [p + "k_sw"], perm=[0, 2, 1])
        kt4 = node("Reshape", [kt, "heads4t"], [p + "kt4"])
        scores = node("MatMul", [node("Mul", [q4, "root_scale"], [p + "qs"]), node("Mul", [kt4, "root_scale"], [p + "ks"])],
                      [p + "scores"])
        att = node("MatMul", [node("Softmax", [scores], [p + "p"], axis=-1), v4], [p + "att"])
        att = node("Transpose", [att], [p + "att_p"], perm=[2, 0, 1, 3])
        att = node("Reshape", [att, "rows"], [p + "att_rows"])
        out = node("Gemm", [att, floats(p + "w_out", [E, E], E ** -0.5), floats(p + "b_out", [E], 0.1)], [p + "out_rows"],
                   transB=1)
        out = node("Reshape", [out, "back"], [p + "out_s"])
        out = node("Transpose", [out], [p + "out_b"], perm=[1, 0, 2])
        x = node("Add", [out, x], [p + "res"])
        mn = node("LayerNormalization", [x, floats(p + "ln2_g", [E], 1), floats(p + "ln2_b", [E], 0.1)], [p + "mn"],
                  epsilon=1e-6)
        m = node("Add", [node("MatMul", [mn, floats(p + "w1", [E, 2 * E], E ** -0.5)], [p + "m1"]),
                         floats(p + "b1", [2 * E], 0.1)], [p + "m1b"])
        m = node("Relu", [m], [p + "act"])
        m = node("Add", [node("MatMul", [m, floats(p + "w2", [2 * E, E], (2 * E) ** -0.5)], [p + "m2"]),
                         floats(p + "b2", [E], 0.1)], [p + "m2b"])
        x = node("Add", [x, m], [p + "out"])
    token = node("Gather", [x, ints("first", 0)], ["token"], axis=1)
    node("Gemm", ["token", floats("head_w", [CLASSES, E], E ** -0.5), floats("head_b", [CLASSES], 0.1)], ["logits"],
         transB=1)
    graph = helper.make_graph(nodes, "sequence_first_vit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, S, E])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [N, CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def relative_error(got, ref):
    return float(np.abs(got.astype(np.float64) - ref).max()) / max(float(np.abs(ref).max()), 1e-30)


@pytest.mark.parametrize("push", ["1", "0"])
def test_sequence_first_attention_matches_onnxruntime(push, tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "vit_blocks.onnx"
    build(path, rng)
    x = rng.standard_normal((12, S, E)).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = np.concatenate([sess.run(None, {"x": x[i:i + N]})[0] for i in range(0, 12, N)]).astype(np.float64)
    np.save(tmp_path / "x.npy", x)
    env = dict(MPI_ENV, SLUICE_PUSH_TRANSPOSES=push)
    for batch, mode in ((N, "auto"), (6, "respecialize"), (3, "respecialize")):
        out = tmp_path / f"out{batch}"
        p = sluice("run", "--model", path, "--input", tmp_path / "x.npy", "--batch-size", batch, "--static-batch", mode,
                   "--device", "cpu", "--cpu-threads", 2, "--outputs", "logits", "--output", out, "--quiet", env=env)
        assert p.returncode == 0, p.stderr.strip()
        with h5py.File(out / "outputs.h5", "r") as f:
            got = f["outputs"]["logits"][:]
        err = relative_error(got, ref)
        assert err <= 1e-4, f"batch {batch}: max|diff|/max|ref| = {err:.3g}"
