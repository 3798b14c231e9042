"""Sluice's CPU engine on real exported models, checked against onnxruntime and torch eager.

Models come from data_tools/export_model.py (torch runs in a separate interpreter, Debian's
/usr/bin/python3 by default: set SLUICE_TORCH_PYTHON to change it), exported once per session into a
temporary folder at a small input size.  Sluice runs them through the debug command

    sluice forward --model M.onnx --input x.npy --outdir D --device cpu

which writes each graph output to D/<name with characters outside [A-Za-z0-9_.-] replaced by _>.npy.
Also checked: bad models (corrupt file, external data escaping the model's folder, an unsupported
op) end with exit status 3 and one line naming the file or the op.
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import torch_available  # noqa: E402

ROOT = os.environ.get("SLUICE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SLUICE_BIN = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))
TORCH_PY = os.environ.get("SLUICE_TORCH_PYTHON", "/usr/bin/python3")
EXPORT = os.path.join(ROOT, "data_tools", "export_model.py")
HEIGHT = WIDTH = 96
REL_TOL = 1e-4
ARGMAX_AGREEMENT = 0.999

if not os.access(SLUICE_BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {SLUICE_BIN} (set SLUICE_BIN)", allow_module_level=True)


def forward_available():
    r = subprocess.run([SLUICE_BIN, "forward", "--help"], capture_output=True, text=True)
    return r.returncode == 0 and "--model" in r.stdout


needs_torch = pytest.mark.skipif(not torch_available(TORCH_PY), reason=f"{TORCH_PY} has no torch/torchvision")
pytestmark = pytest.mark.skipif(not forward_available(), reason="this sluice has no `forward` command yet")


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def export(cache, model, exporter="torchscript"):
    """Exports `model` once per session; returns its folder (model.onnx, input.npy, torch_output.npy)."""
    folder = cache / f"{model}-{exporter}"
    if not (folder / "model.onnx").exists():
        folder.mkdir(exist_ok=True)
        r = subprocess.run([TORCH_PY, EXPORT, "--model", model, "--out", str(folder / "model.onnx"),
                            "--height", str(HEIGHT), "--width", str(WIDTH), "--batch", "2", "--seed", "0",
                            "--exporter", exporter, "--save-reference", str(folder)],
                           capture_output=True, text=True)
        if r.returncode == 2 and "unavailable" in r.stderr:
            pytest.skip(r.stderr.strip())
        assert r.returncode == 0, r.stderr
    return folder


def file_name(output):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", output) + ".npy"


def sluice_forward(model, x, workdir, *extra):
    """Runs `sluice forward` on x; returns {output name: array} for the model's outputs."""
    workdir.mkdir(parents=True, exist_ok=True)
    x_path, out_dir = workdir / "x.npy", workdir / "out"
    np.save(x_path, x)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    r = subprocess.run([SLUICE_BIN, "forward", "--model", str(model), "--input", str(x_path), "--outdir",
                        str(out_dir), "--device", "cpu", *extra], capture_output=True, text=True)
    assert r.returncode == 0, f"sluice forward failed ({r.returncode}): {r.stderr}"
    names = [o.name for o in onnx.load(str(model), load_external_data=False).graph.output]
    return {n: np.load(out_dir / file_name(n)) for n in names}


def onnxruntime_run(model, x):
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def check_close(got, ref, what):
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    rel = np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert rel <= REL_TOL, f"{what}: max|diff|/max|ref| = {rel:.2e} > {REL_TOL}"
    agree = (got.argmax(axis=1) == ref.argmax(axis=1)).mean()
    assert agree >= ARGMAX_AGREEMENT, f"{what}: argmax over channels agrees on {agree:.4%} only"


def check_model(folder, tmp_path):
    model = folder / "model.onnx"
    x = np.load(folder / "input.npy")
    got = sluice_forward(model, x, tmp_path)
    assert len(got) == 1, list(got)
    y = next(iter(got.values()))
    check_close(y, onnxruntime_run(model, x), "vs onnxruntime")
    check_close(y, np.load(folder / "torch_output.npy"), "vs torch eager")
    return y


@needs_torch
@pytest.mark.parametrize("model", ["resnet18", "resnet50", "deeplabv3_resnet50"])
def test_torchscript_export_matches_onnxruntime_and_torch(model, cache, tmp_path):
    y = check_model(export(cache, model), tmp_path)
    assert y.shape == ((2, 21, HEIGHT, WIDTH) if model.startswith("deeplab") else (2, 1000))


@needs_torch
@pytest.mark.parametrize("model", ["mobilenet_v3_small", "efficientnet_b0", "lraspp_mobilenet_v3_large"])
def test_more_torchvision_exports_match(model, cache, tmp_path):
    # HardSwish/HardSigmoid, squeeze-excitation Mul, SiLU as Sigmoid*Mul, Resize from Shape subgraphs.
    check_model(export(cache, model), tmp_path)


@needs_torch
def test_dynamo_export_with_external_data_matches(cache, tmp_path):
    folder = export(cache, "resnet18", exporter="dynamo")  # skips when the local torch has no dynamo exporter
    check_model(folder, tmp_path)


@needs_torch
def test_external_data_copy_of_a_model_gives_the_same_output(cache, tmp_path):
    # The dynamo exporter's layout (weights in a side file) without needing torch >= 2.5.
    src = export(cache, "resnet18")
    m = onnx.load(str(src / "model.onnx"))
    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save_model(m, str(ext / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    assert (ext / "model.onnx.data").stat().st_size > 40_000_000
    assert (ext / "model.onnx").stat().st_size < 1_000_000
    x = np.load(src / "input.npy")
    y = next(iter(sluice_forward(ext / "model.onnx", x, tmp_path / "run").values()))
    check_close(y, np.load(src / "torch_output.npy"), "external data vs torch eager")


def test_quickstart_model_matches_onnxruntime_at_another_batch(tmp_path):
    model = os.path.join(ROOT, "jobs", "models", "quickstart.onnx")
    x = np.random.default_rng(7).standard_normal((3, 3, 64, 64)).astype(np.float32)
    got = sluice_forward(model, x, tmp_path)
    assert list(got) == ["logits"]
    assert got["logits"].shape == (3, 8, 64, 64)
    check_close(got["logits"], onnxruntime_run(model, x), "quickstart vs onnxruntime")


def conv_bn_residual_net(rng):
    """Conv+BatchNorm+Relu, a residual Add, Clip (ReLU6), LeakyRelu and a standalone BatchNorm, with
    the BatchNorms left in the graph (exporters fold them), so Sluice's own folding is exercised."""
    def const(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    def bn(prefix, c):
        return [const(f"{prefix}_g", rng.uniform(0.5, 1.5, c)), const(f"{prefix}_b", rng.uniform(-0.3, 0.3, c)),
                const(f"{prefix}_m", rng.uniform(-0.3, 0.3, c)), const(f"{prefix}_v", rng.uniform(0.5, 2.0, c))]

    inits = [const("w1", rng.standard_normal((8, 3, 3, 3)) * 0.3), const("w2", rng.standard_normal((8, 8, 3, 3)) * 0.15),
             const("b2", rng.standard_normal(8) * 0.1), const("w3", rng.standard_normal((8, 8, 1, 1)) * 0.3),
             const("lo", 0.0), const("hi", 6.0)] + bn("bn1", 8) + bn("bn2", 8) + bn("bn3", 8)
    P = [1, 1, 1, 1]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=P),
        helper.make_node("BatchNormalization", ["c1", "bn1_g", "bn1_b", "bn1_m", "bn1_v"], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=P),
        helper.make_node("BatchNormalization", ["c2", "bn2_g", "bn2_b", "bn2_m", "bn2_v"], ["n2"]),
        helper.make_node("Add", ["n2", "r1"], ["s"]),
        helper.make_node("Clip", ["s", "lo", "hi"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"]),
        helper.make_node("LeakyRelu", ["c3"], ["l3"], alpha=0.1),
        helper.make_node("BatchNormalization", ["l3", "bn3_g", "bn3_b", "bn3_m", "bn3_v"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 20, 20])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 20, 20])
    g = helper.make_graph(nodes, "convbn", [x], [y], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("fuse", [True, False])
def test_batchnorm_folding_and_fusion_keep_the_result(fuse, tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "convbn.onnx"
    path.write_bytes(conv_bn_residual_net(rng).SerializeToString())
    x = rng.standard_normal((2, 3, 20, 20)).astype(np.float32)
    got = sluice_forward(path, x, tmp_path / "run", *([] if fuse else ["--no-fuse"]))["y"]
    check_close(got, onnxruntime_run(path, x), f"conv/bn net ({'fused' if fuse else 'unfused'}) vs onnxruntime")


def old_opset_net(opset):
    """Ops whose spelling changed across opsets, in the spelling of `opset` (9, 10 or 11):
    Pad, Clip, Slice, Softmax (2-D coercion before 13), ReduceMean, Squeeze, Unsqueeze, TopK."""
    inits, nodes = [], []

    def ints(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
        return name

    def scalar(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v, np.float32), name))
        return name

    pads = [0, 0, 1, 1, 0, 0, 1, 1]
    if opset < 11:
        nodes.append(helper.make_node("Pad", ["x"], ["p"], pads=pads, value=0.5))
        nodes.append(helper.make_node("Clip", ["p"], ["c"], min=-1.0, max=1.5))
    else:
        nodes.append(helper.make_node("Pad", ["x", ints("pads", pads), scalar("pv", 0.5)], ["p"]))
        nodes.append(helper.make_node("Clip", ["p", scalar("lo", -1.0), scalar("hi", 1.5)], ["c"]))
    if opset < 10:
        nodes.append(helper.make_node("Slice", ["c"], ["s"], axes=[2, 3], starts=[1, 0], ends=[7, 8]))
    else:
        nodes.append(helper.make_node("Slice", ["c", ints("st", [1, 0]), ints("en", [7, 8]), ints("ax", [2, 3])], ["s"]))
    nodes += [helper.make_node("Softmax", ["s"], ["sm"], axis=1),  # over C*H*W at these opsets
              helper.make_node("ReduceMean", ["sm"], ["rm"], axes=[3], keepdims=1),
              helper.make_node("Squeeze", ["rm"], ["sq"], axes=[3]),
              helper.make_node("Unsqueeze", ["sq"], ["us"], axes=[1])]
    if opset < 10:
        nodes.append(helper.make_node("TopK", ["us"], ["y", "idx"], axis=3, k=2))
    else:
        nodes.append(helper.make_node("TopK", ["us", ints("k", [2])], ["y", "idx"], axis=3))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("idx", TensorProto.INT64, None)]
    g = helper.make_graph(nodes, f"opset{opset}", [x], outs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=6)


@pytest.mark.parametrize("opset", [9, 10, 11])
def test_old_opset_spellings_match_onnxruntime(opset, tmp_path):
    path = tmp_path / f"old{opset}.onnx"
    path.write_bytes(old_opset_net(opset).SerializeToString())
    x = np.random.default_rng(opset).standard_normal((2, 4, 6, 6)).astype(np.float32) * 2
    got = sluice_forward(path, x, tmp_path / "run")
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    y, idx = s.run(None, {"x": x})
    assert got["y"].shape == y.shape == (2, 1, 4, 2)
    rel = np.abs(got["y"] - y).max() / np.abs(y).max()
    assert rel <= REL_TOL, f"opset {opset}: max|diff|/max|ref| = {rel:.2e}"
    assert np.array_equal(got["idx"], idx)


@needs_torch
@pytest.mark.parametrize("opset", [9, 10, 11])
def test_quickstart_net_at_old_opsets_matches_onnxruntime(opset, tmp_path):
    # Upsample (9), Resize-10 and Resize-11 with the exporter's Shape/Gather/Cast/Div size subgraphs.
    path = tmp_path / f"quickstart{opset}.onnx"
    r = subprocess.run([TORCH_PY, os.path.join(ROOT, "data_tools", "make_quickstart_model.py"), "--opset",
                        str(opset), "--out", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(5).standard_normal((2, 3, 64, 64)).astype(np.float32)
    got = sluice_forward(path, x, tmp_path / "run")["logits"]
    check_close(got, onnxruntime_run(path, x), f"quickstart at opset {opset} vs onnxruntime")


# ---- bad models: exit status 3 and one clear line ----------------------------------------------

def relu_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def expect_bad_model(model, tmp_path, *needles):
    x_path = tmp_path / "x.npy"
    np.save(x_path, np.zeros((1, 4), np.float32))
    r = subprocess.run([SLUICE_BIN, "forward", "--model", str(model), "--input", str(x_path), "--outdir",
                        str(tmp_path / "out"), "--device", "cpu"], capture_output=True, text=True)
    assert r.returncode == 3, f"exit {r.returncode}: {r.stderr}"
    lines = [l for l in r.stderr.splitlines() if l.strip() and not l.startswith("sluice: hint: ")]
    assert len(lines) == 1, r.stderr  # one error line (and at most one hint line)
    assert len(r.stderr.splitlines()) <= 2, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_corrupt_model_is_exit_3_naming_the_file(tmp_path):
    bad = tmp_path / "corrupt.onnx"
    good = relu_model().SerializeToString()
    bad.write_bytes(good[: len(good) // 2] + b"\xff\xff\xff\xff\x0f")
    expect_bad_model(bad, tmp_path, "corrupt.onnx")


def test_external_data_escaping_the_folder_is_exit_3(tmp_path):
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())
    folder = tmp_path / "models"
    folder.mkdir()
    m = relu_model()
    w = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../secret.bin"), ("offset", "0"), ("length", "16")):
        e = w.external_data.add()
        e.key, e.value = k, v
    m.graph.initializer.append(w)
    m.graph.node[0].input[0] = "x"
    m.graph.node.append(helper.make_node("Add", ["y", "w"], ["z"]))
    m.graph.output[0].name = "z"
    path = folder / "escape.onnx"
    path.write_bytes(m.SerializeToString())
    expect_bad_model(path, tmp_path, "escape.onnx", "../secret.bin")


def test_unsupported_op_is_exit_3_naming_the_op(tmp_path):
    m = relu_model()
    m.graph.node.append(helper.make_node("Hardmax", ["y"], ["z"], axis=1, name="mix"))
    m.graph.output[0].name = "z"
    path = tmp_path / "hardmax.onnx"
    path.write_bytes(m.SerializeToString())
    expect_bad_model(path, tmp_path, "hardmax.onnx", "Hardmax")
