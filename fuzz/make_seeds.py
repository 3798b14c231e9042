#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/README.md) under fuzz/corpus/:

  graph/  a few byte strings for the structure-aware graph target (any bytes are a recipe)
  onnx/   small valid models that reach every op of the loader, the folder and shape inference
          (opset 9 to 18 spellings), plus quickstart.onnx; and crafted-*.onnx, bad models that once
          crashed the process and their relatives, each listed in crafted.json with the words its error must
          contain (tests/unit/test_model_crafted.cpp and tests/python/test_crafted_inputs.py check them)
  job/    job files: the repository's, and ones using every value form the reader accepts
  hdf5/   tiny HDF5 inputs: float32, uint8, float16 compressed, and ones the reader refuses

Every model takes one input x [N, 3, 4, 4] float32; the tests prepare them with batch 2.  Run with
an interpreter that has onnx, onnxruntime, numpy and h5py (requirements.txt):  python3 fuzz/make_seeds.py
The output is deterministic, so rerunning it only changes files when this script changes.
"""
import json
import os
import shutil
import sys

import h5py
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")
INT64_MIN = -(2**63)


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def model(nodes, inits=(), opset=17, x_shape=("N", 3, 4, 4), out="y"):
    x = oh.make_tensor_value_info("x", TP.FLOAT, list(x_shape))
    y = oh.make_tensor_value_info(out, TP.FLOAT, None)
    graph = oh.make_graph(nodes, "g", [x], [y], initializer=list(inits))
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], producer_name="sluice-fuzz-seeds")
    m.ir_version = 8
    return m


def valid_models():
    """Name -> ModelProto: correct models covering the ops Sluice reads."""
    n = oh.make_node
    rng = np.random.default_rng(0)
    w = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32))
    models = {}

    def wn(name, *shape):
        t = w(*shape)
        t.name = name
        return t

    models["conv_bn_pool_gemm"] = model(
        [n("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
         n("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], epsilon=1e-5),
         n("Relu", ["bn"], ["r"]),
         n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
         n("Add", ["p", "p"], ["a"]),
         n("GlobalAveragePool", ["a"], ["g"]),
         n("Flatten", ["g"], ["f"], axis=1),
         n("Gemm", ["f", "G", "GB"], ["y"], transB=1)],
        [wn("W", 4, 3, 3, 3), wn("B", 4), wn("s", 4), wn("b", 4), wn("m", 4),
         numpy_helper.from_array(np.ones(4, np.float32), "v"), wn("G", 5, 4), wn("GB", 5)])
    # The TorchScript exporter's way of computing a Resize target from the input's shape.
    models["resize_from_shape"] = model(
        [n("Shape", ["x"], ["sh"]),
         n("Gather", ["sh", "i2"], ["h"], axis=0),
         n("Gather", ["sh", "i3"], ["w"], axis=0),
         n("Mul", ["h", "two"], ["h2"]),
         n("Mul", ["w", "two"], ["w2"]),
         n("Unsqueeze", ["h2", "ax0"], ["h2u"]),
         n("Unsqueeze", ["w2", "ax0"], ["w2u"]),
         n("Slice", ["sh", "s0", "s2", "ax0"], ["nc"]),
         n("Concat", ["nc", "h2u", "w2u"], ["sizes"], axis=0),
         n("Cast", ["sizes"], ["sizes64"], to=TP.INT64),
         n("Resize", ["x", "", "", "sizes64"], ["rs"], mode="linear", coordinate_transformation_mode="half_pixel"),
         n("Softmax", ["rs"], ["y"], axis=1)],
        [const("i2", 2), const("i3", 3), const("two", 2), const("ax0", [0]), const("s0", [0]), const("s2", [2])])
    models["slice_pad_transpose_reshape"] = model(
        [n("Slice", ["x", "st", "en", "axs", "stp"], ["sl"]),
         n("Pad", ["sl", "pads", "pv"], ["pd"], mode="constant"),
         n("Transpose", ["pd"], ["tr"], perm=[0, 2, 3, 1]),
         n("Reshape", ["tr", "rs"], ["re"]),
         n("Unsqueeze", ["re", "ax1"], ["un"]),
         n("Squeeze", ["un", "ax1"], ["sq"]),
         n("Reshape", ["sq", "back"], ["y"])],
        [const("st", [0, 3]), const("en", [4, -100]), const("axs", [2, 3]), const("stp", [2, -1]),
         const("pads", [0, 0, 1, 0, 0, 0, 1, 0]), const("pv", 0.5, np.float32), const("rs", [0, -1]),
         const("ax1", [1]), const("back", [0, 3, 4, 4])])
    models["convtranspose_concat_topk"] = model(
        [n("ConvTranspose", ["x", "T", "TB"], ["ct"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
         n("AveragePool", ["ct"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
         n("Concat", ["ap", "x"], ["cc"], axis=1),
         n("TopK", ["cc", "k"], ["tv", "ti"], axis=1),
         n("ArgMax", ["tv"], ["am"], axis=1, keepdims=1),
         n("Cast", ["am"], ["amf"], to=TP.FLOAT),
         n("Add", ["tv", "amf"], ["y"])],
        [wn("T", 3, 2, 3, 3), wn("TB", 2), const("k", [3])])
    # Shape arithmetic that folds away: every fold-only op.
    models["fold_only_ops"] = model(
        [n("Range", ["r0", "r1", "r2"], ["rg"]),
         n("ConstantOfShape", ["cs"], ["co"], value=numpy_helper.from_array(np.array([3], np.int64))),
         n("Expand", ["co", "cs2"], ["ex"]),
         n("Tile", ["ex", "rep"], ["ti"]),
         n("ReduceMean", ["x", "rax"], ["unused"], keepdims=1),
         n("Equal", ["rg", "rg"], ["eq"]),
         n("Where", ["eq", "rg", "rg"], ["wh"]),
         n("Less", ["wh", "r1"], ["ls"]),
         n("Greater", ["wh", "r0"], ["gt"]),
         n("Not", ["ls"], ["nt"]),
         n("Neg", ["wh"], ["ng"]),
         n("Abs", ["ng"], ["ab"]),
         n("Min", ["ab", "wh"], ["mn"]),
         n("Max", ["mn", "wh", "ab"], ["mx"]),
         n("Mod", ["mx", "three"], ["md"]),
         n("Div", ["md", "one"], ["dv"]),
         n("Sub", ["dv", "one"], ["sb"]),
         n("Cast", ["sb"], ["sf"], to=TP.FLOAT),
         n("Pow", ["sf", "twof"], ["pw"]),
         n("Sqrt", ["pw"], ["sqr"]),
         n("Exp", ["sqr"], ["e"]),
         n("Log", ["e"], ["l"]),
         n("Reciprocal", ["twof"], ["half"]),
         n("Floor", ["half"], ["fl"]),
         n("Ceil", ["half"], ["ce"]),
         n("Size", ["x"], ["sz"]),
         n("Identity", ["ti"], ["id"]),
         n("Reshape", ["x", "target"], ["y"])],
        [const("r0", 0), const("r1", 4), const("r2", 1), const("cs", [2]), const("cs2", [2, 2]), const("rep", [1, 2]),
         const("three", 3), const("one", 1), const("twof", 2.0, np.float32), const("rax", [2, 3]),
         const("target", [0, 3, 16])], opset=18)
    models["activations_matmul"] = model(
        [n("ReduceMean", ["x", "rax"], ["rm"], keepdims=1),
         n("Sub", ["x", "rm"], ["c"]),
         n("Sigmoid", ["c"], ["sg"]),
         n("HardSigmoid", ["sg"], ["hs"], alpha=0.2, beta=0.5),
         n("HardSwish", ["hs"], ["hw"]),
         n("LeakyRelu", ["hw"], ["lr"], alpha=0.1),
         n("Clip", ["lr", "lo", "hi"], ["cl"]),
         n("Dropout", ["cl"], ["dr"]),
         n("MatMul", ["dr", "M"], ["mm"]),
         n("Div", ["mm", "d"], ["y"])],
        [const("rax", [1], np.int64), const("lo", -1.0, np.float32), const("hi", 1.0, np.float32), wn("M", 4, 4),
         const("d", 2.0, np.float32)], opset=18)
    # Old spellings the loader rewrites.
    models["opset7_spellings"] = model(
        [n("Upsample", ["x"], ["up"], mode="nearest", scales=[1.0, 1.0, 2.0, 2.0]),
         n("Slice", ["up"], ["sl"], starts=[0], ends=[4], axes=[2]),
         n("Pad", ["sl"], ["pd"], pads=[0, 0, 0, 1, 0, 0, 0, 1], value=0.0),
         n("Clip", ["pd"], ["cl"], min=-1.0, max=1.0),
         n("TopK", ["cl"], ["tv", "ti"], k=2, axis=1),
         n("Softmax", ["tv"], ["sm"], axis=1),
         n("Squeeze", ["sm"], ["y"]),
         n("Unsqueeze", ["sm"], ["unused"], axes=[0])], opset=7)
    models["opset11_resize_reduce"] = model(
        [n("Resize", ["x", "roi", "scales"], ["rs"], mode="nearest"),
         n("ReduceMean", ["rs"], ["rm"], axes=[2, 3], keepdims=0),
         n("Unsqueeze", ["rm"], ["u1"], axes=[2]),
         n("Unsqueeze", ["u1"], ["y"], axes=[3])],
        [const("roi", [], np.float32), const("scales", [1.0, 1.0, 0.5, 0.5], np.float32)], opset=11)
    return models


def crafted_models():
    """Name -> (ModelProto, words the error must contain): models Sluice must refuse cleanly."""
    n = oh.make_node
    i64 = lambda name, v: const(name, v, np.int64)
    # The result of a crafted computation used as a Reshape target, so the value matters.
    def reshape_by(nodes, inits, value_name):
        return model(nodes + [n("Reshape", ["x", value_name], ["y"])], inits)

    def dead(nodes, inits, opset=17):
        # The crafted part hangs off the graph; folding still evaluates it.
        return model(nodes + [n("Relu", ["x"], ["y"])], inits, opset=opset)

    c = {}
    # ---- models that once crashed the process ----
    c["div_int64_min_by_minus_one"] = (reshape_by(
        [n("Div", ["a", "b"], ["q"])], [i64("a", [INT64_MIN]), i64("b", [-1])], "q"), "invalid target shape")
    c["mod_int64_min_by_minus_one"] = (reshape_by(
        [n("Mod", ["a", "b"], ["q"])], [i64("a", [INT64_MIN]), i64("b", [-1])], "q"), "cannot reshape")
    c["div_by_zero"] = (dead([n("Div", ["a", "b"], ["q"])], [i64("a", [7]), i64("b", [0])]), "integer division by zero")
    c["mod_by_zero"] = (dead([n("Mod", ["a", "b"], ["q"])], [i64("a", [7]), i64("b", [0])]), "integer modulo by zero")
    c["add_without_inputs"] = (dead([n("Add", [], ["q"])], []), "Add takes 2 inputs")
    c["relu_without_inputs"] = (model([n("Relu", [], ["y"])], []), "Relu takes 1 input")
    c["constantofshape_overflow_gather"] = (dead(
        [n("ConstantOfShape", ["s"], ["z"]), n("Gather", ["z", "i"], ["q"], axis=0)],
        [i64("s", [2**32, 2**32]), i64("i", [5])]), "would take more than 2^40 bytes")
    c["where_one_input"] = (dead([n("Where", ["c"], ["q"])], [const("c", [1], np.bool_)]), "Where takes 3 inputs")
    # ---- relatives found by reading the code and by fuzzing ----
    c["where_two_inputs"] = (dead([n("Where", ["c", "c"], ["q"])], [const("c", [1], np.bool_)]), "Where takes 3 inputs")
    c["constant_without_output"] = (dead([n("Constant", [], [], value_int=3)], []), "has no (named) output")
    c["topk_one_output"] = (model([n("TopK", ["x", "k"], ["y"], axis=1)], [i64("k", [1])]), "TopK gives 2 outputs")
    c["conv_missing_weights"] = (model([n("Conv", ["x", ""], ["y"])], []), "Conv takes 2 to 3 inputs")
    c["negative_initializer_dim"] = (None, "negative dimension")  # written by hand below
    c["constantofshape_negative"] = (dead([n("ConstantOfShape", ["s"], ["q"])], [i64("s", [2, -3])]), "negative dimension")
    c["constantofshape_empty_value"] = (dead(
        [n("ConstantOfShape", ["s"], ["q"], value=numpy_helper.from_array(np.zeros(0, np.float32)))],
        [i64("s", [2])]), "instead of one")
    c["gather_on_scalar"] = (dead([n("Gather", ["a", "i"], ["q"], axis=0)], [i64("a", 5), i64("i", 0)]),
                             "out of range for a tensor of rank 0")
    c["concat_scalars"] = (dead([n("Concat", ["a", "a"], ["q"], axis=0)], [i64("a", 5)]), "rank 0")
    c["tile_overflow"] = (dead([n("Tile", ["a", "r"], ["q"])], [i64("a", [[1, 2]]), i64("r", [4, 2**62])]), "overflows")
    c["reshape_target_overflow"] = (reshape_by([n("Identity", ["t"], ["q"])], [i64("t", [2**40, 2**40, -1])], "q"),
                                    "overflows")
    c["slice_extreme_steps"] = (reshape_by(
        [n("Slice", ["a", "s", "e", "ax", "st"], ["q"])],
        [i64("a", [1, 2, 3, 4]), i64("s", [INT64_MIN]), i64("e", [2**63 - 1]), i64("ax", [0]), i64("st", [INT64_MIN])],
        "q"), "cannot reshape")
    c["range_endless"] = (reshape_by([n("Range", ["a", "b", "d"], ["q"])], [i64("a", 0), i64("b", 2**63 - 1), i64("d", 1)],
                                     "q"), "only supported in shape computations that fold")
    c["range_infinite_float"] = (reshape_by(
        [n("Range", ["a", "b", "d"], ["f"]), n("Cast", ["f"], ["q"], to=TP.INT64)],
        [const("a", 0.0, np.float32), const("b", np.inf, np.float32), const("d", 1.0, np.float32)], "q"),
        "only supported in shape computations that fold")
    c["range_vector_start"] = (dead([n("Range", ["a", "b", "d"], ["q"])],
                                    [i64("a", []), i64("b", 4), i64("d", 1)]), "must be scalars")
    c["cast_nan_to_int"] = (reshape_by([n("Cast", ["f"], ["q"], to=TP.INT64)], [const("f", [np.nan, 1e30], np.float32)],
                                       "q"), "overflows")
    c["conv_group_zero"] = (model([n("Conv", ["x", "W"], ["y"], group=0)], [const("W", np.zeros((4, 3, 1, 1)), np.float32)]),
                            "group 0")
    c["conv_huge_kernel_dilation"] = (model(
        [n("Conv", ["x", "W"], ["y"], dilations=[2**40, 1])], [const("W", np.zeros((4, 3, 2, 1)), np.float32)]),
        "dilations")
    c["conv_bias_too_short"] = (model([n("Conv", ["x", "W", "B"], ["y"])],
                                      [const("W", np.zeros((4, 3, 1, 1)), np.float32), const("B", [1.0], np.float32)]),
                                "bias [1] must hold 4 values")
    c["convtranspose_short_output_shape"] = (model(
        [n("ConvTranspose", ["x", "W"], ["y"], output_shape=[8])], [const("W", np.zeros((3, 2, 1, 1)), np.float32)]),
        "output_shape [8] has too few values")
    c["maxpool_on_vector"] = (model([n("Flatten", ["x"], ["f"]), n("MaxPool", ["f"], ["y"], kernel_shape=[2])]),
                              "does not match a 1-D kernel")
    c["softmax_axis_out_of_range"] = (model([n("Softmax", ["x"], ["y"], axis=7)]), "axis 7 is out of range")
    c["batchnorm_wrong_channels"] = (model(
        [n("BatchNormalization", ["x", "s", "s", "s", "s"], ["y"])], [const("s", [1.0, 1.0], np.float32)]),
        "must hold 3 values")
    c["clip_vector_bounds"] = (model([n("Clip", ["x", "lo"], ["y"])], [const("lo", [0.0, 1.0], np.float32)]),
                               "min and max must be scalars")
    c["pad_overflow"] = (model([n("Pad", ["x", "p"], ["y"])], [i64("p", [0, 0, 0, 2**63 - 1, 0, 0, 0, 1])]), "overflows")
    c["resize_nan_scale"] = (model([n("Resize", ["x", "", "sc"], ["y"])], [const("sc", [1, 1, np.nan, 1], np.float32)]),
                             "is empty")
    c["huge_folded_constant"] = (model([n("ConstantOfShape", ["s"], ["big"]), n("Add", ["x", "big"], ["y"])],
                                       [i64("s", [2**20, 2**20, 2**20])]), "over 1 TiB")
    return c


def write_models(folder):
    os.makedirs(folder, exist_ok=True)
    for name, m in valid_models().items():
        # A seed must be a model onnxruntime runs, so the fuzzer starts from the real thing.
        try:
            session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            session.run(None, {"x": np.zeros((2, 3, 4, 4), np.float32)})
        except Exception as e:
            sys.exit(f"make_seeds: onnxruntime refuses the seed {name}: {e}")
        with open(os.path.join(folder, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())
    shutil.copy(os.path.join(ROOT, "jobs", "models", "quickstart.onnx"), os.path.join(folder, "quickstart.onnx"))
    manifest = {}
    for name, (m, words) in crafted_models().items():
        if m is None:  # an initializer with a negative dimension: the onnx helpers refuse to build one
            t = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[2, -1])
            m = model([oh.make_node("Relu", ["x"], ["y"])], [t])
        path = "crafted-" + name + ".onnx"
        with open(os.path.join(folder, path), "wb") as f:
            f.write(m.SerializeToString())
        manifest[path] = words
    with open(os.path.join(folder, "crafted.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


JOB_SEEDS = {
    "every_form.toml": (
        "# every value form the reader takes\n"
        "name = \"q\\\"uote\\t\\u00e9\"\n"
        "model = 'jobs/models/quickstart.onnx'\n"
        "samples = 1_024\nseed = 0x10\nbatch-size = 8\n"
        "sample-shape = [\n  3,  # channels\n  64,\n  64,\n]\n"
        "scale = 3.921568627e-3\nmean = [0.485, 0.456, 0.406]\nstd = [0.229, 0.224, 0.225]\n"
        "outputs = [\"logits\", \"argmax\"]\ncuda-graphs = false\nprogress-interval = 1e1\n"),
    "minimal.toml": "batch-size = 4\n",
    "refused_table.toml": "[run]\nbatch-size = 4\n",
    "refused_string_number.toml": "batch-size = \"16\"\n",
    "refused_nested.toml": "mean = [[1.0], [2.0]]\n",
}


def write_jobs(folder):
    os.makedirs(folder, exist_ok=True)
    for name in ("quickstart.toml", "deeplabv3.toml"):
        shutil.copy(os.path.join(ROOT, "jobs", name), os.path.join(folder, name))
    for name, text in JOB_SEEDS.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)


def write_hdf5(folder):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(1)

    def h5(name, **kw):
        # track_times=False keeps the bytes the same from run to run.
        return h5py.File(os.path.join(folder, name), "w", **kw)

    with h5("float32.h5") as f:
        f.create_dataset("images", data=rng.standard_normal((4, 3, 2, 2)).astype(np.float32), track_times=False)
    with h5("uint8_chunked.h5", libver="latest") as f:
        f.create_dataset("images", data=rng.integers(0, 255, (3, 3, 4, 4), dtype=np.uint8), chunks=(1, 3, 4, 4),
                         track_times=False)
    with h5("float16_deflate.h5") as f:
        f.create_dataset("images", data=rng.standard_normal((5, 2, 2)).astype(np.float16), chunks=(2, 2, 2),
                         compression="gzip", shuffle=True, track_times=False)
    with h5("float64_grouped.h5") as f:
        g = f.create_group("data")
        g.create_dataset("x", data=np.arange(6, dtype=np.float64).reshape(3, 2), track_times=False)
        f["images"] = g["x"]  # a hard link to the same dataset
    with h5("refused_int32.h5") as f:
        f.create_dataset("images", data=np.arange(8, dtype=np.int32).reshape(2, 4), track_times=False)
    with h5("refused_1d.h5") as f:
        f.create_dataset("images", data=np.arange(4, dtype=np.float32), track_times=False)


def write_recipes(folder):
    # The graph target reads bytes as choices, so any bytes are a recipe; a few fixed ones start it.
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(2)
    for i, n in enumerate([16, 48, 96, 160, 256, 400, 640, 1024]):
        with open(os.path.join(folder, f"recipe-{i}.bin"), "wb") as f:
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())


def main():
    write_models(os.path.join(CORPUS, "onnx"))
    write_recipes(os.path.join(CORPUS, "graph"))
    write_jobs(os.path.join(CORPUS, "job"))
    write_hdf5(os.path.join(CORPUS, "hdf5"))
    print(f"make_seeds: wrote {CORPUS}", file=sys.stderr)


if __name__ == "__main__":
    main()
