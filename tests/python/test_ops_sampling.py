"""DepthToSpace, SpaceToDepth, GatherElements, ScatterElements and GridSample on the CPU engine,
against onnxruntime (graph optimizations off), with the harness of test_ops.py: one small model per
case, odd extents, max|diff| / max|ref| <= 1e-4, integer outputs exact.  Indices and grids come
both as constants and from the input data (TopK's indices, a grid sliced out of the input), as the
detectors' heads and deformable attention compute them.
"""
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from test_ops import SLUICE_BIN, Case, check, node, rand, workdir  # noqa: F401  (workdir is a fixture)


def c64(v):
    return np.asarray(v, dtype=np.int64)


def ints(shape, lo, hi, seed):
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(np.int64)


# ---- DepthToSpace / SpaceToDepth -------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape,block", [((3, 12, 5, 7), 2), ((2, 18, 3, 4), 3), ((1, 4, 1, 1), 2), ((2, 5, 3, 3), 1)])
def test_depth_to_space(mode, shape, block, workdir, request):
    check(Case([node("DepthToSpace", ["x"], blocksize=block, mode=mode)], shape=shape, opset=13), workdir, request)


@pytest.mark.parametrize("shape,block", [((3, 5, 6, 10), 2), ((2, 3, 9, 6), 3), ((1, 1, 4, 4), 4)])
def test_space_to_depth(shape, block, workdir, request):
    check(Case([node("SpaceToDepth", ["x"], blocksize=block)], shape=shape, opset=13), workdir, request)


def test_pixel_shuffle_after_a_conv_and_back(workdir, request):
    # Swin2SR's upsampler: a Conv to 4x the channels, DepthToSpace(2) (CRD: torch's pixel_shuffle), then
    # SpaceToDepth undoes a DCR shuffle.
    w = rand((12, 3, 3, 3), 1, 0.3)
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), node("DepthToSpace", ["c"], ["up"], blocksize=2, mode="CRD"),
             node("DepthToSpace", ["c"], ["dcr"], blocksize=2, mode="DCR"), node("SpaceToDepth", ["dcr"], ["back"], blocksize=2),
             node("Sub", ["back", "c"], ["zero"]), node("Relu", ["up"], ["y"])]
    check(Case(nodes, {"w": w}, outputs={"y": TensorProto.FLOAT, "zero": TensorProto.FLOAT}, shape=(3, 3, 5, 7), opset=13),
          workdir, request)


# ---- GatherElements ----------------------------------------------------------------------------------

@pytest.mark.parametrize("axis,ishape", [(1, (3, 4, 7)), (2, (3, 5, 2)), (-1, (3, 2, 11)), (1, (3, 9, 3))])
def test_gather_elements_constant_indices(axis, ishape, workdir, request):
    x = (3, 5, 7)
    dim = x[axis]
    idx = ints(ishape, -dim, dim, 5)   # negative indices count from the end
    check(Case([node("GatherElements", ["x", "i"], axis=axis)], {"i": idx}, shape=x, opset=13), workdir, request)


@pytest.mark.parametrize("largest", [1, 0])
def test_gather_elements_with_topk_indices(largest, workdir, request):
    # YOLOv10's tail: TopK over the candidates' scores, then the boxes of those candidates.
    nodes = [node("ReduceMax", ["x"], ["score"], axes=[2], keepdims=1),
             node("TopK", ["score", "k"], ["top", "at"], axis=1, largest=largest),
             node("Expand", ["at", "shape"], ["at4"]),
             node("GatherElements", ["x", "at4"], ["y"], axis=1),
             node("GatherElements", ["score", "at"], ["s"], axis=1)]
    check(Case(nodes, {"k": c64([5]), "shape": c64([3, 5, 4])}, outputs={"y": TensorProto.FLOAT, "s": TensorProto.FLOAT},
               shape=(3, 11, 4), opset=13), workdir, request)


def test_gather_elements_int64_data(workdir, request):
    nodes = [node("ArgMax", ["x"], ["am"], axis=2, keepdims=1), node("GatherElements", ["am", "i"], ["y"], axis=1)]
    check(Case(nodes, {"i": ints((3, 6, 1), -5, 5, 2)}, outputs={"y": TensorProto.INT64}, shape=(3, 5, 7), opset=13),
          workdir, request)


# ---- ScatterElements ---------------------------------------------------------------------------------

def permutations(shape, axis, seed):
    """Indices of `shape` holding a permutation of the axis along it (no duplicates)."""
    rng = np.random.default_rng(seed)
    moved = np.moveaxis(np.zeros(shape, dtype=np.int64), axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    for r in range(flat.shape[0]):
        flat[r] = rng.permutation(flat.shape[1])
    return np.moveaxis(flat.reshape(moved.shape), -1, axis)


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_scatter_elements_updates_from_the_data(axis, workdir, request):
    x = (3, 5, 7)
    idx = permutations(x, axis, 3)
    idx[idx == 1] = 1 - x[axis]   # one index negative
    nodes = [node("Neg", ["x"], ["u"]), node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis)]
    check(Case(nodes, {"i": idx}, shape=x, opset=13), workdir, request)


def test_scatter_elements_part_of_an_axis(workdir, request):
    # Indices shorter than the data on the scattered and on another axis; distinct along the axis.
    idx = permutations((3, 5, 4), 1, 4)[:, :3, :]
    nodes = [node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)]
    check(Case(nodes, {"i": idx, "u": rand((3, 3, 4), 9)}, shape=(3, 5, 7), opset=13), workdir, request)


@pytest.mark.parametrize("reduction,opset", [("add", 16), ("mul", 16), ("max", 18), ("min", 18)])
def test_scatter_elements_reductions_with_duplicates(reduction, opset, workdir, request):
    idx = ints((3, 6, 7), 0, 3, 11)    # 6 updates into 3 rows: duplicates everywhere
    nodes = [node("Sigmoid", ["x"], ["s"]), node("ScatterElements", ["s", "i", "u"], ["y"], axis=1, reduction=reduction)]
    u = (np.random.default_rng(12).random((3, 6, 7)) + 0.5).astype(np.float32)
    check(Case(nodes, {"i": idx, "u": u}, shape=(3, 5, 7), opset=opset), workdir, request)


# ---- GridSample --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_constant_grid(mode, padding, align, workdir, request):
    # Grid values past [-1, 1] on both sides, so every padding mode matters.
    grid = (np.random.default_rng(21).random((2, 4, 9, 2)) * 3.2 - 1.6).astype(np.float32)
    check(Case([node("GridSample", ["x", "g"], mode=mode, padding_mode=padding, align_corners=align)], {"g": grid},
               shape=(2, 3, 5, 7), opset=16), workdir, request)


@pytest.mark.parametrize("mode,opset", [("bilinear", 16), ("linear", 20), ("nearest", 20)])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_grid_from_the_data(mode, opset, align, workdir, request):
    # Deformable attention's sampling: the grid is computed from the input (here two of its channels).
    nodes = [node("Slice", ["x", "s0", "s1", "ax"], ["two"]), node("Transpose", ["two"], ["g0"], perm=[0, 2, 3, 1]),
             node("Mul", ["g0", "k"], ["g"]),
             node("GridSample", ["x", "g"], mode=mode, padding_mode="zeros", align_corners=align)]
    check(Case(nodes, {"s0": c64([0]), "s1": c64([2]), "ax": c64([1]), "k": np.float32(1.3)}, shape=(3, 4, 6, 10),
               opset=opset), workdir, request)


def test_grid_sample_one_pixel_image(workdir, request):
    grid = (np.random.default_rng(22).random((2, 3, 3, 2)) * 2.4 - 1.2).astype(np.float32)
    nodes = [node("GridSample", ["x", "g"], ["a"], padding_mode="border", align_corners=1),
             node("GridSample", ["x", "g"], ["b"], padding_mode="reflection"),
             node("Add", ["a", "b"], ["y"])]
    check(Case(nodes, {"g": grid}, shape=(2, 2, 1, 1), opset=16), workdir, request)


# ---- the batch axis ----------------------------------------------------------------------------------

def static_model(nodes, inits, outputs, shape, opset=16):
    g = helper.make_graph(nodes, "case", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def forward(model, x, folder, mode):
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "m.onnx")
    np.save(folder / "x.npy", x)
    return subprocess.run([SLUICE_BIN, "forward", "--model", str(folder / "m.onnx"), "--input", str(folder / "x.npy"),
                           "--outdir", str(folder / "o"), "--device", "cpu", "--static-batch", mode],
                          capture_output=True, text=True, timeout=120)


def test_a_batch_one_model_of_these_ops_is_respecialized(tmp_path):
    """Exported at batch 1 with constant grids and indices of batch 1: re-specialized to batch 5 (the
    constants repeated per sample), every sample as onnxruntime computes it alone."""
    shape = (1, 8, 6, 10)
    grid = (np.random.default_rng(1).random((1, 4, 5, 2)) * 2.6 - 1.3).astype(np.float32)
    nodes = [node("GridSample", ["x", "g"], ["a"], align_corners=1, padding_mode="border"),
             node("GatherElements", ["x", "i"], ["b"], axis=3),
             node("ReduceMax", ["x"], ["m"], axes=[2, 3], keepdims=1),
             node("TopK", ["m", "k"], ["top", "at"], axis=1),
             node("GatherElements", ["m", "at"], ["c"], axis=1),
             node("ScatterElements", ["x", "j", "u"], ["d"], axis=2),
             node("DepthToSpace", ["x"], ["e"], blocksize=2, mode="CRD"),
             node("SpaceToDepth", ["e"], ["f"], blocksize=2)]
    inits = {"g": grid, "i": ints((1, 8, 6, 3), -10, 10, 2), "k": c64([3]),
             "j": permutations((1, 8, 6, 10), 2, 3)[:, :, :4, :], "u": rand((1, 8, 4, 10), 4)}
    outs = ["a", "b", "c", "d", "e", "f"]
    model = static_model(nodes, inits, outs, shape)
    x = rand((5,) + shape[1:], 9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    refs = [np.concatenate(r) for r in zip(*[sess.run(outs, {"x": x[i:i + 1]}) for i in range(5)])]
    r = forward(model, x, tmp_path / "re", "respecialize")
    assert r.returncode == 0, r.stderr
    for name, ref in zip(outs, refs):
        got = np.load(tmp_path / "re" / "o" / f"{name}.npy")
        assert got.shape == ref.shape, name
        assert np.abs(got - ref).max() <= 1e-4 * max(np.abs(ref).max(), 1e-30), name


@pytest.mark.parametrize("op", ["GatherElements", "ScatterElements"])
def test_along_the_batch_axis_is_refused_and_sub_batched(op, tmp_path):
    inits = {"i": c64([[0, 0, 0, 0, 0]])}
    ins = ["x", "i"]
    if op == "ScatterElements":
        inits["u"] = rand((1, 5), 3)
        ins.append("u")
    model = static_model([node(op, ins, ["y"], axis=0)], inits, ["y"], (1, 5), opset=13)
    x = rand((4, 5), 5)
    r = forward(model, x, tmp_path / "strict", "respecialize")
    assert r.returncode == 3, r.stderr
    assert ("selects along the batch axis" if op == "GatherElements" else "scatters along the batch axis") in r.stderr, r.stderr
    r = forward(model, x, tmp_path / "auto", "auto")
    assert r.returncode == 0 and "4 sub-batches" in r.stderr, r.stderr
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(4)])
    np.testing.assert_allclose(np.load(tmp_path / "auto" / "o" / "y.npy"), ref, rtol=1e-6)
