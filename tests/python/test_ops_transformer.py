"""The ops of transformer-era vision models on the CPU engine, against onnxruntime.

Same harness as test_ops.py (one small model per case, batch 3 and odd extents, graph optimizations
off in onnxruntime, max|diff| / max|ref| <= 1e-4): normalizations, Gelu, Split, GatherND, ScatterND,
Einsum, batched MatMul, Softmax on any axis, comparisons and logic at run time, Where, CumSum,
Trilu, ReduceL2 and the element-wise math these models use, and the fusions of the older exporters'
LayerNorm and Gelu spellings (checked with and without fusion).
"""
import numpy as np
import pytest
from onnx import TensorProto, helper

from test_ops import Case, check, node, rand, workdir  # noqa: F401  (workdir is a fixture)

X3 = (3, 7, 10)  # batch 3, 7 tokens, 10 features


def c64(v):
    return np.asarray(v, dtype=np.int64)


# ---- normalizations ---------------------------------------------------------------------------------

@pytest.mark.parametrize("axis,shape,with_bias,opset", [(-1, X3, True, 17), (-1, X3, False, 17), (1, X3, True, 18),
                                                         (2, (3, 5, 7, 13), True, 20), (-1, (3, 4, 1, 9), True, 21)])
def test_layer_normalization(axis, shape, with_bias, opset, workdir, request):
    norm = shape[axis:] if axis >= 0 else shape[axis:]
    inits = {"s": rand(norm, 1) + 1.0}
    ins = ["x", "s"]
    if with_bias:
        inits["b"] = rand(norm, 2)
        ins.append("b")
    check(Case([node("LayerNormalization", ins, axis=axis, epsilon=1e-3)], inits, shape=shape, opset=opset),
          workdir, request)


def test_layer_normalization_over_two_axes(workdir, request):
    check(Case([node("LayerNormalization", ["x", "s", "b"], axis=1)], {"s": rand((7, 10), 1), "b": rand((7, 10), 2)},
               shape=X3, opset=17), workdir, request)


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization_mean_and_inv_std_dev_outputs(axis, workdir, request):
    norm = X3[axis:]
    outs = {"y": TensorProto.FLOAT, "mean": TensorProto.FLOAT, "inv": TensorProto.FLOAT}
    check(Case([node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=axis, epsilon=1e-4)],
               {"s": rand(norm, 1), "b": rand(norm, 2)}, outs, shape=X3, opset=17), workdir, request)


@pytest.mark.parametrize("groups,opset", [(1, 18), (5, 18), (5, 21), (15, 21)])
def test_group_normalization(groups, opset, workdir, request):
    shape = (3, 15, 4, 6)
    per = 15 if opset >= 21 else groups
    check(Case([node("GroupNormalization", ["x", "s", "b"], num_groups=groups, epsilon=1e-4)],
               {"s": rand((per,), 1) + 1, "b": rand((per,), 2)}, shape=shape, opset=opset), workdir, request)


@pytest.mark.parametrize("shape", [(3, 5, 7, 13), (3, 4, 11)])
def test_instance_normalization(shape, workdir, request):
    c = shape[1]
    check(Case([node("InstanceNormalization", ["x", "s", "b"], epsilon=1e-5)],
               {"s": rand((c,), 1) + 1, "b": rand((c,), 2)}, shape=shape), workdir, request)


def decomposed_layernorm(eps=1e-5, opset=13, scale=True, bias=True, axes=(-1,)):
    """LayerNorm the way torch 1.13 writes it below opset 17."""
    red = {"axes": list(axes)} if opset < 18 else {}
    ins = lambda x: [x] + (["axes"] if opset >= 18 else [])  # noqa: E731
    nodes = [node("ReduceMean", ins("x"), ["m"], keepdims=1, **red), node("Sub", ["x", "m"], ["d"]),
             node("Pow", ["d", "two"], ["p"]), node("ReduceMean", ins("p"), ["v"], keepdims=1, **red),
             node("Add", ["v", "eps"], ["ve"]), node("Sqrt", ["ve"], ["s"]), node("Div", ["d", "s"], ["n" if scale else "y"])]
    inits = {"two": np.float32(2.0), "eps": np.float32(eps)}
    if opset >= 18:
        inits["axes"] = c64(axes)
    if scale:
        nodes.append(node("Mul", ["n", "g"], ["nb" if bias else "y"]))
        inits["g"] = rand((10,), 3) + 1
        if bias:
            nodes.append(node("Add", ["nb", "beta"], ["y"]))
            inits["beta"] = rand((10,), 4)
    return Case(nodes, inits, shape=X3, opset=opset, fuse_variants=True)


@pytest.mark.parametrize("opset,scale,bias", [(13, True, True), (13, False, False), (13, True, False), (18, True, True)])
def test_decomposed_layernorm_is_fused_and_matches(opset, scale, bias, workdir, request):
    check(decomposed_layernorm(opset=opset, scale=scale, bias=bias), workdir, request)


def test_decomposed_layernorm_over_two_axes(workdir, request):
    case = decomposed_layernorm(opset=13, scale=False, bias=False, axes=(1, 2))
    check(case, workdir, request)


# ---- Gelu ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate, workdir, request):
    x = rand(X3, 5, 3.0)
    check(Case([node("Gelu", ["x"], approximate=approximate)], shape=X3, opset=20, x=x), workdir, request)


@pytest.mark.parametrize("form", ["div_then_x_c_half", "mul_then_half_x_c"])
def test_erf_gelu_pattern_is_fused_and_matches(form, workdir, request):
    if form == "div_then_x_c_half":
        nodes = [node("Div", ["x", "sqrt2"], ["a"]), node("Erf", ["a"], ["e"]), node("Add", ["e", "one"], ["c"]),
                 node("Mul", ["x", "c"], ["d"]), node("Mul", ["d", "half"], ["y"])]
        inits = {"sqrt2": np.float32(np.sqrt(2.0)), "one": np.float32(1.0), "half": np.float32(0.5)}
    else:
        nodes = [node("Mul", ["x", "rs2"], ["a"]), node("Erf", ["a"], ["e"]), node("Add", ["one", "e"], ["c"]),
                 node("Mul", ["x", "half"], ["h"]), node("Mul", ["h", "c"], ["y"])]
        inits = {"rs2": np.float32(np.sqrt(0.5)), "one": np.float32(1.0), "half": np.float32(0.5)}
    check(Case(nodes, inits, shape=X3, opset=17, x=rand(X3, 6, 3.0), fuse_variants=True), workdir, request)


# ---- Split ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis,split,opset", [(1, [2, 5], 13), (2, [3, 3, 4], 17), (-1, None, 13), (0, [1, 2], 18)])
def test_split_input_form(axis, split, opset, workdir, request):
    parts = len(split) if split else 2
    outs = [f"y{i}" for i in range(parts)]
    ins = ["x", "split"] if split else ["x"]
    inits = {"split": c64(split)} if split else {}
    check(Case([node("Split", ins, outs, axis=axis)], inits, {o: TensorProto.FLOAT for o in outs}, shape=X3,
               opset=opset), workdir, request)


def test_split_attribute_form_opset11(workdir, request):
    outs = ["y0", "y1", "y2"]
    check(Case([node("Split", ["x"], outs, axis=2, split=[1, 4, 5])], {}, {o: TensorProto.FLOAT for o in outs},
               shape=X3, opset=11), workdir, request)


@pytest.mark.parametrize("num,axis", [(3, 2), (4, 1), (2, -1)])
def test_split_num_outputs_opset18(num, axis, workdir, request):
    outs = [f"y{i}" for i in range(num)]
    check(Case([node("Split", ["x"], outs, axis=axis, num_outputs=num)], {}, {o: TensorProto.FLOAT for o in outs},
               shape=X3, opset=18), workdir, request)


# ---- GatherND / ScatterND ------------------------------------------------------------------------------

@pytest.mark.parametrize("indices,batch_dims", [([[0, 1], [2, 6], [1, 3]], 0), ([[[1], [0]], [[2], [2]]], 0),
                                                ([[[4, 1]], [[0, 9]], [[6, 2]]], 1), ([[3], [5], [0]], 1)])
def test_gather_nd(indices, batch_dims, workdir, request):
    check(Case([node("GatherND", ["x", "i"], batch_dims=batch_dims)], {"i": c64(indices)}, shape=X3), workdir, request)


def test_gather_nd_with_runtime_indices(workdir, request):
    # Indices computed from the data (argmax over features), as detection heads do.
    nodes = [node("ArgMax", ["x"], ["am"], axis=2, keepdims=1), node("Unsqueeze", ["am", "ax"], ["i"]),
             node("GatherND", ["x", "am"], ["y"], batch_dims=2)]
    check(Case([nodes[0], node("GatherND", ["x", "am"], ["y"], batch_dims=2)], {}, shape=X3), workdir, request)


@pytest.mark.parametrize("reduction,opset", [("none", 13), ("add", 16), ("mul", 16), ("max", 18), ("min", 18)])
def test_scatter_nd(reduction, opset, workdir, request):
    attrs = {} if reduction == "none" else {"reduction": reduction}
    idx = c64([[[0], [4]], [[2], [6]]]) if reduction != "none" else c64([[[0], [4]], [[2], [6]]])
    check(Case([node("ScatterND", ["x", "i", "u"], **attrs)], {"i": c64([[0, 1], [2, 6], [1, 3]]),
                                                                   "u": rand((3, 10), 8)}, shape=X3, opset=opset),
          workdir, request)
    del idx


def test_scatter_nd_with_data_dependent_updates(workdir, request):
    nodes = [node("Slice", ["x", "st", "en", "ax"], ["u"]), node("Mul", ["u", "k"], ["u2"]),
             node("ScatterND", ["x", "i", "u2"], ["y"])]
    check(Case(nodes, {"st": c64([0]), "en": c64([1]), "ax": c64([1]), "k": np.float32(3.0),
                       "i": c64([[[0, 5]], [[1, 5]], [[2, 5]]])}, shape=X3), workdir, request)


# ---- Einsum and batched MatMul -------------------------------------------------------------------------

EINSUMS = {
    "attention_scores": ("bhqd,bhkd->bhqk", (3, 2, 5, 4), [(3, 2, 6, 4)]),
    "attention_values": ("bhqk,bhkd->bhqd", (3, 2, 5, 6), [(3, 2, 6, 4)]),
    "relative_position": ("bhwc,hkc->bhwk", (3, 2, 5, 4), [(2, 7, 4)]),
    "ellipsis_matmul": ("...ij,...jk->...ik", (3, 2, 5, 4), [(3, 2, 4, 6)]),
    "ellipsis_broadcast": ("...ij,...jk->...ik", (3, 2, 5, 4), [(1, 2, 4, 6)]),
    "implicit_output": ("bij,jk", (3, 5, 4), [(4, 6)]),
    "sum_axis": ("bij->bj", (3, 5, 4), []),
    "transpose": ("bij->bji", (3, 5, 4), []),
    "diagonal": ("bii->bi", (3, 5, 5), []),
    "outer": ("bi,j->bij", (3, 5), [(6,)]),
    "three_operands": ("bi,ij,jk->bk", (3, 5), [(5, 4), (4, 6)]),
    "maxvit_grid": ("bhnd,bhmd->bhnm", (3, 1, 9, 8), [(3, 1, 9, 8)]),
}


@pytest.mark.parametrize("name", list(EINSUMS))
def test_einsum(name, workdir, request):
    eq, xshape, others = EINSUMS[name]
    names = [f"w{i}" for i in range(len(others))]
    inits = {n: rand(s, 10 + i) for i, (n, s) in enumerate(zip(names, others))}
    check(Case([node("Einsum", ["x"] + names, equation=eq)], inits, shape=xshape, opset=12), workdir, request)


def test_einsum_of_two_runtime_operands(workdir, request):
    nodes = [node("Mul", ["x", "k"], ["q"]), node("Einsum", ["x", "q"], ["y"], equation="bqd,bkd->bqk")]
    check(Case(nodes, {"k": rand((10,), 3)}, shape=X3, opset=13), workdir, request)


@pytest.mark.parametrize("a,b", [((3, 2, 7, 10), (3, 2, 10, 5)), ((3, 2, 7, 10), (10, 5)), ((3, 1, 7, 10), (1, 4, 10, 5)),
                                 ((3, 7, 10), (2, 1, 10, 3))])
def test_batched_matmul_broadcasting(a, b, workdir, request):
    check(Case([node("MatMul", ["x", "w"])], {"w": rand(b, 4)}, shape=a), workdir, request)


def test_attention_block_of_two_runtime_matmuls(workdir, request):
    nodes = [node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), node("MatMul", ["x", "xt"], ["s"]),
             node("Softmax", ["s"], ["p"], axis=-1), node("MatMul", ["p", "x"], ["y"])]
    check(Case(nodes, {}, shape=X3), workdir, request)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_softmax_any_axis_opset13(axis, workdir, request):
    check(Case([node("Softmax", ["x"], axis=axis)], shape=(3, 5, 7, 13), opset=13), workdir, request)


# ---- comparisons, logic, Where --------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparison_at_run_time(op, workdir, request):
    x = np.round(rand(X3, 11, 2.0))  # ties, so Equal and the OrEqual forms see both outcomes
    check(Case([node(op, ["x", "t"], ["y"])], {"t": np.round(rand((10,), 12, 2.0))}, {"y": TensorProto.BOOL},
               shape=X3, x=x), workdir, request)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_at_run_time(op, workdir, request):
    nodes = [node("Greater", ["x", "z"], ["a"]), node("Less", ["x", "h"], ["b"]), node(op, ["a", "b"], ["c"]),
             node("Not", ["c"], ["y"])]
    check(Case(nodes, {"z": np.float32(0.0), "h": rand((7, 1), 3)}, {"y": TensorProto.BOOL}, shape=X3), workdir, request)


def test_where_masks_attention_scores(workdir, request):
    nodes = [node("Greater", ["x", "z"], ["m"]), node("Where", ["m", "x", "ninf"], ["s"]),
             node("Softmax", ["s"], ["y"], axis=-1)]
    check(Case(nodes, {"z": np.float32(-0.5), "ninf": np.float32(-1e4)}, shape=X3), workdir, request)


def test_where_with_broadcast_condition_and_int64(workdir, request):
    nodes = [node("Cast", ["x"], ["xi"], to=TensorProto.INT64), node("Less", ["xi", "zi"], ["m"]),
             node("Where", ["m", "xi", "big"], ["y"])]
    check(Case(nodes, {"zi": c64(1), "big": c64([7] * 10)}, {"y": TensorProto.INT64}, shape=X3, x=rand(X3, 2, 3.0)),
          workdir, request)


def test_isnan_isinf(workdir, request):
    x = rand(X3, 4)
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    x[2, 5, 4] = np.nan
    nodes = [node("IsNaN", ["x"], ["n"]), node("IsInf", ["x"], ["i"]), node("IsInf", ["x"], ["ip"], detect_negative=0),
             node("Or", ["n", "i"], ["y"]), node("Where", ["n", "zero", "x"], ["clean"]),
             node("Where", ["i", "zero", "clean"], ["z"])]
    check(Case(nodes, {"zero": np.float32(0.0)}, {"y": TensorProto.BOOL, "ip": TensorProto.BOOL, "z": TensorProto.FLOAT},
               shape=X3, x=x), workdir, request)


@pytest.mark.parametrize("op", ["Min", "Max"])
def test_min_max_at_run_time(op, workdir, request):
    check(Case([node(op, ["x", "t"])], {"t": rand((7, 1), 5)}, shape=X3), workdir, request)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(fmod, workdir, request):
    if fmod:
        nodes = [node("Mod", ["x", "d"], ["y"], fmod=1)]
        check(Case(nodes, {"d": np.float32(0.7)}, shape=X3, x=rand(X3, 3, 4.0)), workdir, request)
    else:
        nodes = [node("Cast", ["x"], ["xi"], to=TensorProto.INT64), node("Mod", ["xi", "d"], ["y"])]
        check(Case(nodes, {"d": c64([3, -3, 4, 5, -2, 7, 3, 3, 2, 9])}, {"y": TensorProto.INT64}, shape=X3,
                   x=rand(X3, 3, 9.0)), workdir, request)


# ---- math, CumSum, Trilu, reductions ---------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Cos", "Sin", "Sign", "Neg", "Erf", "Tanh", "Abs", "Exp", "Floor", "Ceil", "Round"])
def test_unary_math(op, workdir, request):
    x = rand(X3, 9, 2.5)
    x[0, 0, 0] = 0.0
    x[1, 1, 1] = 2.5  # Round: a tie, to even
    check(Case([node(op, ["x"])], shape=X3, x=x), workdir, request)


@pytest.mark.parametrize("axis,exclusive,reverse", [(1, 0, 0), (2, 1, 0), (-1, 0, 1), (1, 1, 1)])
def test_cumsum(axis, exclusive, reverse, workdir, request):
    check(Case([node("CumSum", ["x", "a"], exclusive=exclusive, reverse=reverse)], {"a": c64(axis)}, shape=X3),
          workdir, request)


@pytest.mark.parametrize("upper,k", [(1, 0), (0, 0), (1, 2), (0, -3), (1, -1)])
def test_trilu(upper, k, workdir, request):
    check(Case([node("Trilu", ["x", "k"], upper=upper)], {"k": c64(k)}, shape=X3, opset=14), workdir, request)


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceSum", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions(op, opset, workdir, request):
    axes = [-1]
    if opset >= 18 or op == "ReduceSum":
        nodes = [node(op, ["x", "axes"], keepdims=1)]
        inits = {"axes": c64(axes)}
    else:
        nodes = [node(op, ["x"], axes=axes, keepdims=1)]
        inits = {}
    check(Case(nodes, inits, shape=X3, opset=opset), workdir, request)


def test_swin_v2_cosine_attention_normalization(workdir, request):
    # q / max(||q||_2, eps) over the last axis, as F.normalize exports.
    nodes = [node("ReduceL2", ["x", "axes"], ["n"], keepdims=1), node("Clip", ["n", "eps"], ["c"]),
             node("Expand", ["c", "shape"], ["e"]), node("Div", ["x", "e"], ["y"])]
    check(Case(nodes, {"axes": c64([-1]), "eps": np.float32(1e-12), "shape": c64([3, 7, 10])}, shape=X3, opset=18),
          workdir, request)


# ---- input-independent subgraphs fold at load time ------------------------------------------------------

def test_detr_style_position_embedding_folds_and_matches(workdir, request):
    # A mask of ones for a fixed size, its CumSum, normalized, through Sin and Cos, concatenated and
    # added to the features: nothing of it depends on the input.
    mask = np.ones((1, 7), dtype=np.bool_)
    nodes = [node("Not", ["mask"], ["nm"]), node("Cast", ["nm"], ["f"], to=TensorProto.FLOAT),
             node("Equal", ["f", "zero"], ["ok"]), node("Cast", ["ok"], ["fo"], to=TensorProto.FLOAT),
             node("CumSum", ["fo", "one_i"], ["cs"]), node("Div", ["cs", "seven"], ["pos"]),
             node("Unsqueeze", ["pos", "last"], ["p3"]), node("Mul", ["p3", "freq"], ["ang"]),
             node("Sin", ["ang"], ["s"]), node("Cos", ["ang"], ["c"]), node("Concat", ["s", "c"], ["pe"], axis=-1),
             node("IsNaN", ["pe"], ["bad"]), node("Where", ["bad", "zero", "pe"], ["pe2"]), node("Add", ["x", "pe2"], ["y"])]
    inits = {"mask": np.zeros((1, 7), dtype=np.bool_) | ~mask, "zero": np.float32(0), "one_i": c64(1),
             "seven": np.float32(7.0), "last": c64([-1]), "freq": rand((5,), 3)}
    check(Case(nodes, inits, shape=X3, opset=13), workdir, request)


def test_swin_shifted_window_mask_folds_and_matches(workdir, request):
    # img_mask built by ScatterND on zeros, windows compared with Equal/Not, Where picks -100 or 0.
    nodes = [node("ConstantOfShape", ["shp"], ["z"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
             node("ScatterND", ["z", "idx", "upd"], ["img"]), node("Unsqueeze", ["img", "ax1"], ["a"]),
             node("Unsqueeze", ["img", "ax0"], ["b"]), node("Sub", ["a", "b"], ["d"]), node("Equal", ["d", "zf"], ["eq"]),
             node("Not", ["eq"], ["ne"]), node("Where", ["ne", "m100", "zf"], ["mask"]), node("Add", ["x", "mask"], ["s"]),
             node("Softmax", ["s"], ["y"], axis=-1)]
    inits = {"shp": c64([7]), "idx": c64([[4], [5], [6]]), "upd": np.float32([1, 2, 2]), "ax1": c64([1]),
             "ax0": c64([0]), "zf": np.float32(0.0), "m100": np.float32(-100.0)}
    check(Case(nodes, inits, shape=(3, 7, 7), opset=13), workdir, request)


# ---- Resize cubic (position-embedding interpolation) ----------------------------------------------

@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("target,a,exclude", [((3, 5, 11, 19), -0.75, 0), ((3, 5, 4, 6), -0.75, 0),
                                              ((3, 5, 14, 26), -0.5, 1), ((3, 5, 7, 13), -0.75, 0)])
def test_resize_cubic(coord, target, a, exclude, workdir, request):
    nodes = [node("Resize", ["x", "", "", "sizes"], mode="cubic", coordinate_transformation_mode=coord,
                  cubic_coeff_a=a, exclude_outside=exclude)]
    check(Case(nodes, {"sizes": c64(target)}, shape=(3, 5, 7, 13), opset=13), workdir, request)


# ---- Col2Im (MobileViT-V2's fold) ------------------------------------------------------------------

@pytest.mark.parametrize("image,block,attrs", [([6, 8], [2, 2], dict(strides=[2, 2])),
                                               ([5, 7], [3, 2], {}),
                                               ([6, 6], [3, 3], dict(strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 2]))])
def test_col2im(image, block, attrs, workdir, request):
    s, d = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    windows = [(image[i] + p[i] + p[i + 2] - (d[i] * (block[i] - 1) + 1)) // s[i] + 1 for i in range(2)]
    shape = (3, 2 * block[0] * block[1], windows[0] * windows[1])
    check(Case([node("Col2Im", ["x", "img", "blk"], **attrs)], {"img": c64(image), "blk": c64(block)}, shape=shape,
               opset=18), workdir, request)


def test_split_with_an_output_nobody_reads(workdir, request):
    # q, k, v = qkv.chunk(3) with v unused, as pruned heads and EVA-02's rotary halves leave it.
    nodes = [node("Split", ["x", "split"], ["q", "k", "v"], axis=2), node("Mul", ["q", "k"], ["y"])]
    check(Case(nodes, {"split": c64([4, 4, 2])}, shape=X3, opset=13), workdir, request)
