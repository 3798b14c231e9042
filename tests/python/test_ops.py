"""Every op of the CPU engine against onnxruntime, one small ONNX model per case.

Each case is a one-op (or few-op) model built with onnx.helper: a single runtime float32 input "x"
with odd extents (batch 3, 5 channels, 7x13 maps, ...), every other operand an initializer, and many
attribute combinations per op.  Sluice runs it through

    sluice forward --model M.onnx --input x.npy --outdir D --device cpu

and the outputs must match onnxruntime's (graph optimizations off): max|diff| / max|ref| <= 1e-4 for
floating outputs, exact equality for integer ones.  Cases run with and without Sluice's fusion
passes where those passes could change the graph.
"""
import os
import re
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = os.environ.get("SLUICE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SLUICE_BIN = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))
REL_TOL = 1e-4

if not os.access(SLUICE_BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {SLUICE_BIN} (set SLUICE_BIN)", allow_module_level=True)

X4 = (3, 5, 7, 13)  # the default input: batch 3, 5 channels, 7x13


def rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


class Case:
    """A model of `nodes` reading input x of `shape` and producing `outputs` (name -> onnx elem type)."""

    def __init__(self, nodes, inits=None, outputs=None, shape=X4, opset=17, x=None, fuse_variants=False):
        self.nodes = nodes
        self.inits = inits or {}
        self.outputs = outputs or {"y": TensorProto.FLOAT}
        self.shape = shape
        self.opset = opset
        self.x = x
        self.fuse_variants = fuse_variants

    def model(self):
        inits = []
        for name, value in self.inits.items():
            inits.append(numpy_helper.from_array(np.asarray(value), name))
        graph = helper.make_graph(
            self.nodes, "case",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(self.shape))],
            [helper.make_tensor_value_info(n, t, None) for n, t in self.outputs.items()],
            inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=8)
        return m


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), **attrs)


def file_name(output):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", output) + ".npy"


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("ops")


def check(case, workdir, request, x_dtype=np.float32):
    folder = workdir / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / "model.onnx"
    onnx.save(case.model(), model_path)
    x = case.x if case.x is not None else rand(case.shape, 7)
    if x_dtype == np.uint8:
        x = np.random.default_rng(3).integers(0, 256, case.shape).astype(np.uint8)
    np.save(folder / "x.npy", x)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    refs = sess.run(list(case.outputs), {"x": x.astype(np.float32)})
    for fuse in ([True, False] if case.fuse_variants else [True]):
        out = folder / ("out" if fuse else "out-nofuse")
        cmd = [SLUICE_BIN, "forward", "--model", str(model_path), "--input", str(folder / "x.npy"),
               "--outdir", str(out), "--device", "cpu", "--threads", "2"] + ([] if fuse else ["--no-fuse"])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"sluice forward failed ({r.returncode}): {r.stderr.strip()}"
        for name, ref in zip(case.outputs, refs):
            got = np.load(out / file_name(name))
            assert got.shape == ref.shape, f"{name}: shape {got.shape} != {ref.shape}"
            if np.issubdtype(ref.dtype, np.floating):
                assert got.dtype == ref.dtype, f"{name}: dtype {got.dtype} != {ref.dtype}"
                g64, r64 = got.astype(np.float64), ref.astype(np.float64)
                scale = max(np.abs(r64).max(initial=0.0), 1e-30)
                err = np.abs(g64 - r64).max(initial=0.0) / scale
                tol = REL_TOL if ref.dtype == np.float32 else 1e-3  # float16 rounding
                assert err <= tol, f"{name}: max|diff|/max|ref| = {err:.3g} (fuse={fuse})"
            else:
                assert got.dtype == ref.dtype, f"{name}: dtype {got.dtype} != {ref.dtype}"
                np.testing.assert_array_equal(got, ref, err_msg=f"{name} (fuse={fuse})")


# ---- Conv -----------------------------------------------------------------------------------------

def conv_case(c_out=4, k=(3, 3), group=1, bias=True, shape=X4, act=None, **attrs):
    c_in = shape[1]
    w = rand((c_out, c_in // group) + tuple(k), 1, 0.3)
    inits = {"w": w}
    ins = ["x", "w"]
    if bias:
        inits["b"] = rand((c_out,), 2)
        ins.append("b")
    nodes = [node("Conv", ins, ["c" if act else "y"], group=group, **attrs)]
    if act == "Relu":
        nodes.append(node("Relu", ["c"]))
    elif act == "Clip":
        inits["lo"], inits["hi"] = np.float32(-0.5), np.float32(0.8)
        nodes.append(node("Clip", ["c", "lo", "hi"]))
    elif act == "LeakyRelu":
        nodes.append(node("LeakyRelu", ["c"], alpha=0.2))
    elif act == "Add":  # residual: conv(x) + x, with as many output channels as input ones
        nodes.append(node("Add", ["c", "x"]))
    return Case(nodes, inits, shape=shape, fuse_variants=True)


CONV_CASES = {
    "3x3_pad1": dict(k=(3, 3), pads=[1, 1, 1, 1]),
    "3x3_nopad_nobias": dict(k=(3, 3), bias=False),
    "1x1": dict(k=(1, 1)),
    "1x1_stride2": dict(k=(1, 1), strides=[2, 2]),
    "3x2_stride_2x3_asym_pads": dict(k=(3, 2), strides=[2, 3], pads=[1, 0, 2, 1]),
    "5x5_stride2_pad2": dict(c_out=6, k=(5, 5), strides=[2, 2], pads=[2, 2, 2, 2]),
    "dilated_2x3": dict(k=(3, 3), dilations=[2, 3], pads=[2, 3, 2, 3]),
    "dilated_strided": dict(k=(2, 3), dilations=[3, 2], strides=[2, 1]),
    "depthwise": dict(c_out=5, group=5, k=(3, 3), pads=[1, 1, 1, 1]),
    "depthwise_stride2": dict(c_out=5, group=5, k=(3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    "depthwise_mult2_dilated": dict(c_out=10, group=5, k=(3, 3), dilations=[2, 2], pads=[2, 2, 2, 2]),
    "depthwise_5x5_nobias": dict(c_out=5, group=5, k=(5, 5), pads=[2, 1, 2, 3], bias=False),
    "auto_same_upper": dict(k=(3, 3), strides=[2, 2], auto_pad="SAME_UPPER"),
    "auto_same_lower": dict(k=(4, 4), strides=[2, 3], auto_pad="SAME_LOWER"),
    "auto_same_upper_even": dict(k=(2, 2), auto_pad="SAME_UPPER"),
    "auto_valid": dict(k=(3, 5), strides=[1, 2], auto_pad="VALID"),
    "kernel_shape_attr": dict(k=(3, 3), kernel_shape=[3, 3], pads=[0, 1, 0, 1]),
    "relu": dict(k=(3, 3), pads=[1, 1, 1, 1], act="Relu"),
    "clip": dict(k=(3, 3), pads=[1, 1, 1, 1], act="Clip"),
    "leakyrelu": dict(k=(1, 1), act="LeakyRelu"),
    "residual_add": dict(c_out=5, k=(3, 3), pads=[1, 1, 1, 1], act="Add"),
    "1d": dict(shape=(3, 5, 13), k=(3,), strides=[2], pads=[1, 2]),
    "1d_depthwise_dilated": dict(shape=(3, 5, 13), c_out=5, group=5, k=(3,), dilations=[2], pads=[2, 2]),
    "3d": dict(shape=(2, 5, 4, 6, 7), k=(3, 2, 3), pads=[1, 0, 1, 1, 1, 1], strides=[1, 2, 1]),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv(name, workdir, request):
    check(conv_case(**CONV_CASES[name]), workdir, request)


def test_conv_grouped(workdir, request):
    # 6 input channels in 3 groups of 2, 9 outputs
    check(conv_case(c_out=9, group=3, k=(3, 3), pads=[1, 1, 1, 1], shape=(3, 6, 7, 13)), workdir, request)


def test_batchnorm_after_conv_is_folded_or_not(workdir, request):
    c = conv_case(k=(3, 3), pads=[1, 1, 1, 1])
    c.nodes[0].output[0] = "c"
    c.inits.update(s=rand((4,), 3), bb=rand((4,), 4), m=rand((4,), 5), v=np.abs(rand((4,), 6)) + 0.5)
    c.nodes.append(node("BatchNormalization", ["c", "s", "bb", "m", "v"], epsilon=1e-3))
    check(c, workdir, request)


# ---- ConvTranspose --------------------------------------------------------------------------------

def deconv_case(c_out=4, k=(3, 3), group=1, bias=True, shape=X4, **attrs):
    c_in = shape[1]
    inits = {"w": rand((c_in, c_out // group) + tuple(k), 1, 0.3)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = rand((c_out,), 2)
        ins.append("b")
    return Case([node("ConvTranspose", ins, group=group, **attrs)], inits, shape=shape)


DECONV_CASES = {
    "2x2_stride2": dict(k=(2, 2), strides=[2, 2]),
    "3x3_stride2_pad1_outpad1": dict(k=(3, 3), strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    "4x4_stride2_pad1_nobias": dict(k=(4, 4), strides=[2, 2], pads=[1, 1, 1, 1], bias=False),
    "asym": dict(k=(3, 2), strides=[3, 2], pads=[1, 0, 2, 1], output_padding=[2, 1]),
    "dilated": dict(k=(3, 3), dilations=[2, 3], strides=[1, 2]),
    "grouped": dict(c_out=10, group=5, k=(3, 3), strides=[2, 1], pads=[1, 1, 1, 1]),
    "output_shape": dict(k=(3, 3), strides=[2, 2], output_shape=[15, 28]),
    "output_shape_odd": dict(k=(3, 3), strides=[3, 2], output_shape=[20, 26]),
    "same_upper": dict(k=(3, 3), strides=[2, 2], auto_pad="SAME_UPPER"),
    "same_lower": dict(k=(4, 3), strides=[2, 2], auto_pad="SAME_LOWER"),
    "1d": dict(shape=(3, 5, 13), k=(4,), strides=[3], pads=[1, 2]),
}


@pytest.mark.parametrize("name", list(DECONV_CASES))
def test_conv_transpose(name, workdir, request):
    check(deconv_case(**DECONV_CASES[name]), workdir, request)


# ---- BatchNormalization and activations -------------------------------------------------------------

def test_batchnorm(workdir, request):
    inits = dict(s=rand((5,), 3), b=rand((5,), 4), m=rand((5,), 5), v=np.abs(rand((5,), 6)) + 0.1)
    check(Case([node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-4)], inits, fuse_variants=True),
          workdir, request)


ACTIVATIONS = {
    "relu": ([node("Relu", ["x"])], {}),
    "leakyrelu": ([node("LeakyRelu", ["x"], alpha=0.13)], {}),
    "leakyrelu_default": ([node("LeakyRelu", ["x"])], {}),
    "sigmoid": ([node("Sigmoid", ["x"])], {}),
    "hardsigmoid": ([node("HardSigmoid", ["x"])], {}),
    "hardsigmoid_attrs": ([node("HardSigmoid", ["x"], alpha=0.3, beta=0.4)], {}),
    "hardswish": ([node("HardSwish", ["x"])], {}),
    "clip_both": ([node("Clip", ["x", "lo", "hi"])], dict(lo=np.float32(-0.3), hi=np.float32(0.6))),
    "clip_min_only": ([node("Clip", ["x", "lo"])], dict(lo=np.float32(-0.3))),
    "clip_max_only": ([node("Clip", ["x", "", "hi"])], dict(hi=np.float32(0.2))),
    "clip_none": ([node("Clip", ["x"])], {}),
    "identity": ([node("Identity", ["x"])], {}),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation(name, workdir, request):
    nodes, inits = ACTIVATIONS[name]
    check(Case(nodes, inits), workdir, request)


def test_clip_opset10_attributes(workdir, request):
    check(Case([node("Clip", ["x"], min=-0.25, max=0.5)], opset=10), workdir, request)


# ---- broadcasting arithmetic ----------------------------------------------------------------------

B_SHAPES = {"scalar": (), "one": (1,), "w": (13,), "h1": (7, 1), "c11": (5, 1, 1), "1c1w": (1, 5, 1, 13),
            "full": X4, "n111": (3, 1, 1, 1)}


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("bshape", list(B_SHAPES))
def test_binary_broadcast(op, bshape, workdir, request):
    b = rand(B_SHAPES[bshape], 11)
    if op == "Div":
        b = np.where(np.abs(b) < 0.2, 0.5, b).astype(np.float32)
    # Both operand orders: x op b, and b op x (broadcasting on the left).
    nodes = [node(op, ["x", "b"], ["y"]), node(op, ["b", "x"], ["y2"])]
    check(Case(nodes, {"b": b}, outputs={"y": TensorProto.FLOAT, "y2": TensorProto.FLOAT}), workdir, request)


def test_binary_of_broadcast_operands_on_both_sides(workdir, request):
    # x[3,5,7,13] reduced to [3,1,7,1] and [1,5,1,13]: each side broadcasts along different axes.
    nodes = [node("ReduceMean", ["x"], ["a"], axes=[1, 3]), node("ReduceMean", ["x"], ["b"], axes=[0, 2]),
             node("Mul", ["a", "b"], ["y"])]
    check(Case(nodes), workdir, request)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_int64(op, workdir, request):
    b = np.array([[3], [-2], [5], [7], [-4]], dtype=np.int64).reshape(5, 1, 1)
    nodes = [node("Cast", ["x"], ["xi"], to=TensorProto.INT64), node(op, ["xi", "b"], ["y"])]
    check(Case(nodes, {"b": b}, outputs={"y": TensorProto.INT64}, x=rand(X4, 9, 20.0)), workdir, request)


# ---- pooling --------------------------------------------------------------------------------------

MAXPOOL_CASES = {
    "2x2_s2": dict(kernel_shape=[2, 2], strides=[2, 2]),
    "3x3_s2_p1": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "3x3_s2_ceil": dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    "2x2_s2_ceil": dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    "3x2_asym": dict(kernel_shape=[3, 2], strides=[1, 3], pads=[1, 0, 0, 1]),
    "dilated": dict(kernel_shape=[2, 3], dilations=[2, 2], strides=[1, 2]),
    "dilated_ceil_pads": dict(kernel_shape=[3, 3], dilations=[2, 1], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    "same_upper": dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    "same_lower": dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER"),
    "valid": dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID"),
    "storage_order_ignored": dict(kernel_shape=[2, 2], storage_order=1),
}


@pytest.mark.parametrize("name", list(MAXPOOL_CASES))
def test_maxpool(name, workdir, request):
    check(Case([node("MaxPool", ["x"], **MAXPOOL_CASES[name])]), workdir, request)


def test_maxpool_indices(workdir, request):
    n = node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    check(Case([n], outputs={"y": TensorProto.FLOAT, "i": TensorProto.INT64}), workdir, request)


def test_maxpool_1d(workdir, request):
    check(Case([node("MaxPool", ["x"], kernel_shape=[3], strides=[2], pads=[1, 1])], shape=(3, 5, 13)), workdir, request)


AVGPOOL_CASES = {
    "2x2_s2": dict(kernel_shape=[2, 2], strides=[2, 2]),
    "3x3_p1_exclude": dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
    "3x3_p1_include": dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
    "3x3_s2_ceil_exclude": dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=0),
    "3x3_s2_ceil_include": dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1),
    "3x3_s2_p1_ceil_include": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                   count_include_pad=1),
    "asym_pads_include": dict(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 0, 2], count_include_pad=1),
    "same_upper": dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    "same_lower_include": dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER", count_include_pad=1),
}


@pytest.mark.parametrize("name", list(AVGPOOL_CASES))
def test_averagepool(name, workdir, request):
    check(Case([node("AveragePool", ["x"], **AVGPOOL_CASES[name])]), workdir, request)


def test_global_average_pool(workdir, request):
    check(Case([node("GlobalAveragePool", ["x"])]), workdir, request)


# ---- reductions, softmax, argmax, topk --------------------------------------------------------------

REDUCE_CASES = {
    "hw_keep": (17, dict(axes=[2, 3]), None),
    "c_nokeep": (17, dict(axes=[1], keepdims=0), None),
    "neg_axes": (17, dict(axes=[-1, 1]), None),
    "all_default": (17, dict(), None),
    "all_nokeep": (17, dict(keepdims=0), None),
    "input_axes_hw": (18, dict(), [2, 3]),
    "input_axes_nokeep": (18, dict(keepdims=0), [-2]),
    "input_no_axes": (18, dict(), None),
    "input_empty_noop": (18, dict(noop_with_empty_axes=1), []),
}


@pytest.mark.parametrize("name", list(REDUCE_CASES))
def test_reduce_mean(name, workdir, request):
    opset, attrs, axes = REDUCE_CASES[name]
    inits = {}
    ins = ["x"]
    if axes is not None:
        inits["axes"] = np.array(axes, dtype=np.int64)
        ins.append("axes")
    check(Case([node("ReduceMean", ins, **attrs)], inits, opset=opset), workdir, request)


@pytest.mark.parametrize("axis,opset", [(-1, 13), (1, 13), (2, 17), (0, 13), (1, 11), (2, 11)])
def test_softmax(axis, opset, workdir, request):
    check(Case([node("Softmax", ["x"], axis=axis)], opset=opset, x=rand(X4, 5, 3.0)), workdir, request)


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax(axis, keepdims, last, workdir, request):
    x = np.round(rand(X4, 13, 2.0))  # many ties, so select_last_index matters
    check(Case([node("ArgMax", ["x"], axis=axis, keepdims=keepdims, select_last_index=last)],
               outputs={"y": TensorProto.INT64}, x=x), workdir, request)


@pytest.mark.parametrize("axis,k", [(-1, 4), (1, 3), (2, 7), (0, 1)])
@pytest.mark.parametrize("largest", [0, 1])
def test_topk(axis, k, largest, workdir, request):
    inits = {"k": np.array([k], dtype=np.int64)}
    n = node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest, sorted=1)
    check(Case([n], inits, outputs={"v": TensorProto.FLOAT, "i": TensorProto.INT64}), workdir, request)


# ---- Resize ---------------------------------------------------------------------------------------

def resize_case(mode, coord, nearest="round_prefer_floor", scales=None, sizes=None, opset=13):
    inits = {}
    ins = ["x", ""]
    if scales is not None:
        inits["scales"] = np.array(scales, dtype=np.float32)
        ins.append("scales")
    else:
        inits["sizes"] = np.array(sizes, dtype=np.int64)
        ins += ["", "sizes"]
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    return Case([node("Resize", ins, **attrs)], inits, opset=opset)


RESIZE_TARGETS = {
    "up2": dict(scales=[1, 1, 2, 2]),
    "up_frac": dict(scales=[1, 1, 1.5, 2.3]),
    "down": dict(scales=[1, 1, 0.5, 0.6]),
    "sizes_up": dict(sizes=[3, 5, 16, 27]),
    "sizes_down": dict(sizes=[3, 5, 4, 9]),
}
COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("target", list(RESIZE_TARGETS))
def test_resize_linear(coord, target, workdir, request):
    check(resize_case("linear", coord, **RESIZE_TARGETS[target]), workdir, request)


@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("coord", COORDS + ["tf_half_pixel_for_nn"])
@pytest.mark.parametrize("target", ["up_frac", "down", "sizes_up"])
def test_resize_nearest(nearest, coord, target, workdir, request):
    check(resize_case("nearest", coord, nearest, **RESIZE_TARGETS[target]), workdir, request)


def test_resize_opset18_axes(workdir, request):
    n = node("Resize", ["x", "", "scales"], mode="linear", axes=[2, 3], coordinate_transformation_mode="half_pixel")
    check(Case([n], {"scales": np.array([2.0, 1.5], dtype=np.float32)}, opset=18), workdir, request)


@pytest.mark.parametrize("policy", ["stretch"])  # shape inference supports only stretch (model/)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset18_sizes_keep_aspect_ratio(policy, mode, workdir, request):
    n = node("Resize", ["x", "", "", "sizes"], mode=mode, axes=[2, 3], keep_aspect_ratio_policy=policy)
    check(Case([n], {"sizes": np.array([10, 30], dtype=np.int64)}, opset=18), workdir, request)


@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("target", ["down", "sizes_down", "up_frac", "shrink_by_5"])
def test_resize_antialias(mode, coord, exclude, target, workdir, request):
    # Opset 18's antialias: shrinking stretches the filter over every input pixel under an output.
    shape, kw = ((2, 3, 24, 31), dict(sizes=[2, 3, 5, 6])) if target == "shrink_by_5" else (X4, RESIZE_TARGETS[target])
    case = resize_case(mode, coord, opset=18, **kw)
    case.shape = shape
    case.nodes[0].attribute.extend([helper.make_attribute("antialias", 1), helper.make_attribute("exclude_outside", exclude)])
    check(case, workdir, request)


def test_resize_nearest_channel_axis(workdir, request):
    check(resize_case("nearest", "asymmetric", "floor", scales=[1, 2, 1, 0.5]), workdir, request)


# ---- Gemm and MatMul ------------------------------------------------------------------------------

GEMM_CASES = {
    "plain": dict(),
    "transB": dict(transB=1),
    "transA": dict(transA=1),
    "transAB": dict(transA=1, transB=1),
    "alpha_beta": dict(alpha=0.7, beta=-1.3),
    "c_scalar": dict(c=()),
    "c_row": dict(c=(1, 11)),
    "c_col": dict(c=(3, 1)),
    "c_full": dict(c=(3, 11)),
    "c_none": dict(c=None),
    "beta0": dict(beta=0.0),
}


@pytest.mark.parametrize("name", list(GEMM_CASES))
def test_gemm(name, workdir, request):
    a = dict(GEMM_CASES[name])
    c = a.pop("c", (11,))
    ta, tb = a.get("transA", 0), a.get("transB", 0)
    shape = (13, 3) if ta else (3, 13)
    inits = {"b": rand((11, 13) if tb else (13, 11), 1)}
    ins = ["x", "b"]
    if c is not None:
        inits["c"] = rand(c, 2)
        ins.append("c")
    check(Case([node("Gemm", ins, **a)], inits, shape=shape), workdir, request)


MATMUL_CASES = {
    "2d": ((3, 13), (13, 6)),
    "3d_by_2d": ((3, 7, 13), (13, 6)),
    "4d_broadcast_batch": ((3, 5, 7, 13), (5, 13, 4)),
    "4d_by_4d": ((3, 5, 7, 13), (1, 5, 13, 2)),
    "by_vector": ((3, 7, 13), (13,)),
}


@pytest.mark.parametrize("name", list(MATMUL_CASES))
def test_matmul(name, workdir, request):
    xs, bs = MATMUL_CASES[name]
    check(Case([node("MatMul", ["x", "b"])], {"b": rand(bs, 2)}, shape=xs), workdir, request)


def test_matmul_vector_on_the_left(workdir, request):
    # [13] @ x[3,13,6]: the left operand is a constant vector
    check(Case([node("MatMul", ["a", "x"])], {"a": rand((13,), 3)}, shape=(3, 13, 6)), workdir, request)


# ---- shapes and data movement -----------------------------------------------------------------------

def test_flatten(workdir, request):
    nodes = [node("Flatten", ["x"], [f"y{a}"], axis=a) for a in (0, 1, 2, 3, 4, -1)]
    check(Case(nodes, outputs={f"y{a}": TensorProto.FLOAT for a in (0, 1, 2, 3, 4, -1)}), workdir, request)


@pytest.mark.parametrize("target", [[0, -1], [3, 0, 91], [-1, 13], [3, 5, 7, 13, 1], [0, 0, 0, 0]])
def test_reshape(target, workdir, request):
    check(Case([node("Reshape", ["x", "s"])], {"s": np.array(target, dtype=np.int64)}), workdir, request)


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [3, 2, 1, 0], [1, 0, 3, 2], None])
def test_transpose(perm, workdir, request):
    attrs = {} if perm is None else dict(perm=perm)
    check(Case([node("Transpose", ["x"], **attrs)]), workdir, request)


def test_squeeze_unsqueeze(workdir, request):
    nodes = [node("Unsqueeze", ["x", "ua"], ["u"]), node("Squeeze", ["u", "sa"], ["y"]),
             node("Unsqueeze", ["x", "ub"], ["y2"])]
    inits = {"ua": np.array([0, -1], dtype=np.int64), "sa": np.array([0, 5], dtype=np.int64),
             "ub": np.array([2], dtype=np.int64)}
    check(Case(nodes, inits, outputs={"y": TensorProto.FLOAT, "y2": TensorProto.FLOAT}), workdir, request)


def test_squeeze_without_axes(workdir, request):
    check(Case([node("Squeeze", ["x"])], shape=(3, 1, 7, 1)), workdir, request)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_concat(axis, workdir, request):
    other = list(X4)
    other[axis] = 2
    inits = {"a": rand(tuple(other), 4)}
    check(Case([node("Concat", ["x", "a", "x"], axis=axis)], inits), workdir, request)


PAD_CASES = {
    "constant": ("constant", [0, 0, 1, 2, 0, 0, 3, 1], None),
    "constant_value": ("constant", [0, 1, 1, 0, 1, 0, 2, 2], 1.5),
    "constant_negative": ("constant", [0, 0, -1, 2, 0, 0, 1, -3], None),
    "reflect": ("reflect", [0, 0, 2, 3, 0, 0, 1, 4], None),
    "edge": ("edge", [0, 0, 3, 1, 0, 0, 2, 5], None),
    "edge_batch_channel": ("edge", [1, 2, 0, 0, 0, 1, 0, 0], None),
}


def test_pad_wrap_opset19(workdir, request):
    inits = {"p": np.array([0, 0, 3, 2, 0, 0, 1, 5], dtype=np.int64)}
    check(Case([node("Pad", ["x", "p"], mode="wrap")], inits, opset=19), workdir, request)


def test_pad_opset18_axes(workdir, request):
    inits = {"p": np.array([2, 1, 0, 3], dtype=np.int64), "ax": np.array([-1, 2], dtype=np.int64)}
    check(Case([node("Pad", ["x", "p", "", "ax"], mode="reflect")], inits, opset=18), workdir, request)


@pytest.mark.parametrize("name", list(PAD_CASES))
def test_pad(name, workdir, request):
    mode, pads, value = PAD_CASES[name]
    inits = {"p": np.array(pads, dtype=np.int64)}
    ins = ["x", "p"]
    if value is not None:
        inits["v"] = np.array(value, dtype=np.float32)
        ins.append("v")
    check(Case([node("Pad", ins, mode=mode)], inits, opset=13), workdir, request)


@pytest.mark.parametrize("to", [TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                                TensorProto.FLOAT])
def test_cast(to, workdir, request):
    x = np.abs(rand(X4, 5, 40.0)) if to == TensorProto.UINT8 else rand(X4, 5, 40.0)
    check(Case([node("Cast", ["x"], to=to)], outputs={"y": to}, x=x), workdir, request)


def test_cast_through_int_and_back(workdir, request):
    nodes = [node("Cast", ["x"], ["i"], to=TensorProto.INT64), node("Cast", ["i"], ["h"], to=TensorProto.FLOAT16),
             node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)]
    check(Case(nodes, x=rand(X4, 6, 100.0)), workdir, request)


def test_shape_slice_concat_reshape_chain(workdir, request):
    # The exporters' pattern: Shape -> Gather/Slice -> Concat -> Reshape, folded once shapes are fixed.
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "i0"], ["n"], axis=0),
             node("Unsqueeze", ["n", "ax"], ["n1"]), node("Slice", ["s", "st", "en"], ["hw"]),
             node("Concat", ["n1", "m1", "hw"], ["t"], axis=0), node("Reshape", ["x", "t"], ["y"]),
             node("Shape", ["x"], ["y2"], start=1, end=-1)]
    inits = {"i0": np.array(0, dtype=np.int64), "ax": np.array([0], dtype=np.int64),
             "st": np.array([2], dtype=np.int64), "en": np.array([4], dtype=np.int64),
             "m1": np.array([-1], dtype=np.int64)}
    check(Case(nodes, inits, opset=15, outputs={"y": TensorProto.FLOAT, "y2": TensorProto.INT64}), workdir, request)


GATHER_CASES = {
    "axis0": (0, [2, 0, 2]),
    "axis1_neg_index": (1, [-1, 0, 3]),
    "axis3_2d_indices": (3, [[0, 12], [5, -2]]),
    "scalar_index": (2, 4),
}


@pytest.mark.parametrize("name", list(GATHER_CASES))
def test_gather(name, workdir, request):
    axis, idx = GATHER_CASES[name]
    check(Case([node("Gather", ["x", "i"], axis=axis)], {"i": np.array(idx, dtype=np.int64)}), workdir, request)


SLICE_CASES = {
    "hw": ([1, 2], [6, 11], [2, 3], None),
    "steps": ([0, 1], [7, 13], [2, 3], [2, 3]),
    "negative_steps": ([-1, 10], [-100, 0], [2, 3], [-1, -3]),
    "clamped_ends": ([-3, 0], [1000, 2**62], [1, 3], None),
    "no_axes": ([1, 0, 2], [3, 5, 6], None, None),
    "empty": ([4], [2], [2], None),
}


@pytest.mark.parametrize("name", list(SLICE_CASES))
def test_slice(name, workdir, request):
    starts, ends, axes, steps = SLICE_CASES[name]
    inits = {"s": np.array(starts, dtype=np.int64), "e": np.array(ends, dtype=np.int64)}
    ins = ["x", "s", "e"]
    if axes is not None or steps is not None:
        inits["a"] = np.array(axes if axes is not None else list(range(len(starts))), dtype=np.int64)
        ins.append("a")
    if steps is not None:
        inits["st"] = np.array(steps, dtype=np.int64)
        ins.append("st")
    check(Case([node("Slice", ins)], inits), workdir, request)


# ---- the uint8 input path ---------------------------------------------------------------------------

def test_uint8_input_is_cast_to_float(workdir, request):
    # A float model fed uint8 data: Sluice puts its Normalize (a cast here) in front of the model.
    check(Case([node("Mul", ["x", "k"])], {"k": np.float32(0.5)}), workdir, request, x_dtype=np.uint8)


# ---- the command itself -------------------------------------------------------------------------------

def small_net():
    """Conv+Relu, depthwise conv, pool, Gemm: the GEMM paths whose blocking could depend on the batch."""
    inits = {"w1": rand((8, 5, 3, 3), 1, 0.3), "b1": rand((8,), 2), "w2": rand((8, 1, 3, 3), 3, 0.3),
             "wf": rand((10, 8), 4), "bf": rand((10,), 5)}
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2"], ["c2"], group=8, strides=[2, 2], pads=[1, 1, 1, 1]),
             node("GlobalAveragePool", ["c2"], ["g"]), node("Flatten", ["g"], ["f"]),
             node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    return Case(nodes, inits, shape=(None, 5, 7, 13))


def forward(model, x_path, out, *extra):
    cmd = [SLUICE_BIN, "forward", "--model", str(model), "--input", str(x_path), "--outdir", str(out)] + list(extra)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_forward_is_bit_identical_across_batches_and_threads(tmp_path):
    m = small_net().model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(m, tmp_path / "m.onnx")
    x = rand((5, 5, 7, 13), 21)
    np.save(tmp_path / "x5.npy", x)
    np.save(tmp_path / "x1.npy", x[3:4])
    r = forward(tmp_path / "m.onnx", tmp_path / "x5.npy", tmp_path / "o5", "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["y", "float32", "[5,10]"]  # one line per output: name, dtype, shape
    r = forward(tmp_path / "m.onnx", tmp_path / "x5.npy", tmp_path / "o5t1", "--threads", "1")
    assert r.returncode == 0, r.stderr
    r = forward(tmp_path / "m.onnx", tmp_path / "x1.npy", tmp_path / "o1", "--threads", "3")
    assert r.returncode == 0, r.stderr
    y5, y5t1, y1 = (np.load(tmp_path / d / "y.npy") for d in ("o5", "o5t1", "o1"))
    assert y5.tobytes() == y5t1.tobytes(), "2 threads and 1 thread differ"
    assert y5[3:4].tobytes() == y1.tobytes(), "sample 3 of a batch of 5 differs from the same sample alone"


def test_forward_errors(tmp_path):
    onnx.save(Case([node("Relu", ["x"])]).model(), tmp_path / "m.onnx")
    np.save(tmp_path / "i32.npy", np.zeros(X4, dtype=np.int32))
    np.save(tmp_path / "wrong_shape.npy", np.zeros((3, 5, 8, 13), dtype=np.float32))
    np.save(tmp_path / "x.npy", np.zeros(X4, dtype=np.float32))
    (tmp_path / "corrupt.onnx").write_bytes(b"\x08\x07garbage")
    cases = [  # (model, input, extra args, exit status, text the one error line names)
        ("m.onnx", "i32.npy", [], 3, "int32"),
        ("m.onnx", "wrong_shape.npy", [], 3, "shape"),
        ("m.onnx", "missing.npy", [], 3, "missing.npy"),
        ("corrupt.onnx", "x.npy", [], 3, "corrupt.onnx"),
        ("m.onnx", "x.npy", ["--device", "tpu"], 2, "tpu"),
        ("m.onnx", "x.npy", ["--threads", "-2"], 2, "threads"),
    ]
    for model, x, extra, status, text in cases:
        r = forward(tmp_path / model, tmp_path / x, tmp_path / "out", *extra)
        assert r.returncode == status, f"{model} {x} {extra}: exit {r.returncode}, stderr {r.stderr!r}"
        errors = [l for l in r.stderr.splitlines() if "error" in l]
        assert len(errors) == 1 and text in errors[0], r.stderr
