"""If nodes whose condition is a constant once the input shape is fixed are folded at load into
the branch they take (model/fold_if.h), on both engines' graph, against onnxruntime: conditions on
the input's shape (as the exporters write them), on a constant, nested Ifs, branches that read outer
tensors and hold their own constants, two Ifs whose branches use the same names, and an untaken
branch holding an op Sluice does not run.  An If on the input data is refused, naming the node.
"""
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from test_ops import SLUICE_BIN, Case, check, node, workdir  # noqa: F401  (workdir is a fixture)


def branch(nodes, outputs, inits=None):
    return helper.make_graph(nodes, "branch", [], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                             [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])


def shape_condition(axis, value, out):
    """out = (x.shape[axis] == value), the exporters' spelling."""
    return [node("Shape", ["x"], [out + "_s"]),
            node("Gather", [out + "_s", out + "_i"], [out + "_d"], axis=0),
            node("Equal", [out + "_d", out + "_v"], [out])], {out + "_i": np.int64(axis), out + "_v": np.int64(value)}


@pytest.mark.parametrize("width,taken", [(13, "then"), (12, "else")])
def test_if_on_the_input_shape_takes_its_branch(width, taken, workdir, request):
    cond, inits = shape_condition(3, 13, "c")
    then_b = branch([node("Relu", ["x"], ["t0"]), node("Mul", ["t0", "two"], ["t"])], ["t"], {"two": np.float32(2.0)})
    # The else branch holds NonZero, which Sluice does not run: fine while it is not taken.
    else_b = branch([node("Neg", ["x"], ["e0"]), node("NonZero", ["e0"], ["nz"]), node("Sigmoid", ["x"], ["e"])], ["e"])
    nodes = cond + [node("If", ["c"], ["r"], then_branch=then_b, else_branch=else_b), node("Add", ["r", "x"], ["y"])]
    check(Case(nodes, inits, shape=(3, 5, 7, width), opset=13), workdir, request)


def test_nested_ifs_and_a_constant_condition(workdir, request):
    c1, i1 = shape_condition(1, 5, "c1")
    inner_then = branch([node("Tanh", ["t0"], ["it"])], ["it"])          # reads the outer branch's t0
    inner_else = branch([node("Abs", ["t0"], ["ie"])], ["ie"])
    outer_then = branch([node("Mul", ["x", "k"], ["t0"]),
                         node("If", ["flag"], ["t1"], then_branch=inner_then, else_branch=inner_else),
                         node("Add", ["t1", "t0"], ["t"])], ["t"], {"k": np.float32(0.5)})
    outer_else = branch([node("Identity", ["x"], ["e"])], ["e"])
    nodes = c1 + [node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)]
    inits = dict(i1, flag=np.array(False))
    check(Case(nodes, inits, shape=(3, 5, 7, 13), opset=13), workdir, request)


def test_two_ifs_whose_branches_use_the_same_names(workdir, request):
    c, inits = shape_condition(0, 3, "c")
    def same(k):
        return branch([node("Mul", ["x", "w"], ["b0"]), node("Relu", ["b0"], ["out"])], ["out"], {"w": np.float32(k)})
    nodes = c + [node("If", ["c"], ["p"], then_branch=same(1.5), else_branch=same(-1.0)),
                 node("If", ["c"], ["q"], then_branch=same(-2.0), else_branch=same(3.0)),
                 node("Sub", ["p", "q"], ["y"])]
    check(Case(nodes, inits, shape=(3, 4, 6), opset=13), workdir, request)


def test_an_if_on_the_input_data_is_refused(tmp_path):
    then_b = branch([node("Relu", ["x"], ["t"])], ["t"])
    else_b = branch([node("Neg", ["x"], ["e"])], ["e"])
    nodes = [node("ReduceSum", ["x"], ["s"], keepdims=0), node("Greater", ["s", "zero"], ["c"]),
             node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)]
    m = Case(nodes, {"zero": np.float32(0)}, shape=(1, 4), opset=13).model()
    onnx.save(m, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    r = subprocess.run([SLUICE_BIN, "forward", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npy"),
                        "--outdir", str(tmp_path / "o"), "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert "If" in r.stderr and "depends on the input data" in r.stderr, r.stderr


# ---- data-dependent output counts -------------------------------------------------------------------

def forward_error(model, tmp_path, shape):
    onnx.save(model, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones(shape, np.float32))
    return subprocess.run([SLUICE_BIN, "forward", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npy"),
                           "--outdir", str(tmp_path / "o"), "--device", "cpu"], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("op", ["NonZero", "NonMaxSuppression"])
def test_post_processing_ops_are_refused_naming_the_export_without_them(op, tmp_path):
    if op == "NonZero":
        nodes, outs = [node("NonZero", ["x"], ["y"])], {"y": TensorProto.INT64}
    else:  # boxes [1, 4, 4] from x, scores [1, 1, 4]
        nodes = [node("Reshape", ["x", "bs"], ["boxes"]), node("ReduceMax", ["boxes"], ["s0"], axes=[2], keepdims=1),
                 node("Transpose", ["s0"], ["scores"], perm=[0, 2, 1]),
                 node("NonMaxSuppression", ["boxes", "scores", "k", "iou"], ["y"])]
        outs = {"y": TensorProto.INT64}
    m = Case(nodes, {"bs": np.array([1, 4, 4], np.int64), "k": np.array([2], np.int64), "iou": np.array([0.5], np.float32)},
             outputs=outs, shape=(1, 16), opset=13).model()
    r = forward_error(m, tmp_path, (1, 16))
    assert r.returncode == 3, r.stderr
    assert f"unsupported op {op}" in r.stderr and "without its post-processing" in r.stderr, r.stderr
    assert "--outputs detections" in r.stderr, r.stderr


def test_a_topk_whose_k_depends_on_the_data_is_refused(tmp_path):
    # k = the number of positive values: a data-dependent count of boxes.
    nodes = [node("Greater", ["x", "zero"], ["pos"]), node("Cast", ["pos"], ["pi"], to=TensorProto.INT64),
             node("ReduceSum", ["pi", "ax"], ["k"], keepdims=1), node("TopK", ["x", "k"], ["y", "i"], axis=1)]
    m = Case(nodes, {"zero": np.float32(0), "ax": np.array([1], np.int64)}, shape=(1, 6), opset=13).model()
    r = forward_error(m, tmp_path, (1, 6))
    assert r.returncode == 3, r.stderr
    assert "K input" in r.stderr and "without its post-processing" in r.stderr, r.stderr
