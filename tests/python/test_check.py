"""`sluice check --model M`: whether a model runs on each engine, its ops, and for a refused model
the missing ops, their nodes and the opset, in one screen; exit 0 when it runs, 3 when refused."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import ROOT, sluice  # noqa: E402

ZOO = os.path.join(ROOT, "tests", "data", "zoo")


def lines(p):
    return {line.split()[0]: line for line in p.stdout.splitlines() if line.strip()}


def one_op_model(path, node, inits=(), shape=(1, 3, 8, 8), opset=18):
    graph = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def test_a_transformer_that_runs_is_exit_0_with_its_op_counts():
    p = sluice("check", "--model", os.path.join(ZOO, "hf_vit.dynamo.onnx"))
    assert p.returncode == 0, p.stdout + p.stderr
    out = lines(p)
    assert "opset 20" in out["model"] and "[1,3,32,32] float32" in out["model"]
    assert "LayerNormalization 5" in out["ops"] and "Gelu 2" in out["ops"] and "MatMul 16" in out["ops"]
    assert out["cpu"].split()[1] == "runs"
    assert "cuda" in out  # not built, or its verdict
    assert len(p.stdout.splitlines()) <= 25


def test_a_model_with_an_op_no_engine_has_is_exit_3_naming_op_nodes_and_opset(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Hardmax", ["r"], ["h1"], name="head.hardmax.0", axis=1),
             helper.make_node("Hardmax", ["h1"], ["y"], name="head.hardmax.1", axis=1)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "hardmax.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    p = sluice("check", "--model", path)
    assert p.returncode == 3, p.stdout + p.stderr
    out = lines(p)
    assert out["ops"] == "ops    Hardmax 2, Relu 1"
    for line in (out["cpu"], out["cuda"]):
        assert "refused" in line or "not built" in line
    assert "Hardmax (2 nodes: 'head.hardmax.0', 'head.hardmax.1')" in out["cpu"]
    assert "(opset 19)" in out["cpu"]
    assert "Relu" not in out["cpu"]


def test_an_attribute_the_cpu_engine_refuses_is_exit_3_with_its_error(tmp_path):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear",
                            coordinate_transformation_mode="tf_crop_and_resize")
    scales = numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], dtype=np.float32), "scales")
    model = one_op_model(tmp_path / "crop.onnx", node, [scales])
    p = sluice("check", "--model", model, "--device", "cpu")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "coordinate_transformation_mode 'tf_crop_and_resize' is not implemented" in lines(p)["cpu"]


def test_cuda_must_be_proven_for_device_cuda(tmp_path):
    model = one_op_model(tmp_path / "relu.onnx", helper.make_node("Relu", ["x"], ["y"]))
    p = sluice("check", "--model", model, "--device", "cuda")
    cuda = lines(p)["cuda"]
    assert p.returncode == (0 if cuda.split()[1] == "runs" else 3), p.stdout
    if "not built" in cuda:
        assert "SLUICE_CUDA=OFF" in cuda
    assert sluice("check", "--model", model, "--device", "cpu").returncode == 0


def test_a_dynamic_sample_shape_needs_sample_shape(tmp_path):
    model = one_op_model(tmp_path / "dyn.onnx", helper.make_node("Relu", ["x"], ["y"]), shape=("N", 3, "H", "W"))
    p = sluice("check", "--model", model)
    assert p.returncode == 2 and "--sample-shape" in p.stderr, p.stderr
    p = sluice("check", "--model", model, "--sample-shape", "3,16,16")
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines(p)["model"].endswith("input 'x' [?,3,?,?] float32")


def test_an_op_that_only_folds_but_depends_on_the_data_is_refused(tmp_path):
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0), helper.make_node("Cast", ["m"], ["mi"], to=7),
             helper.make_node("Range", ["zero", "mi", "one"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=1)]
    inits = [numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array(1, dtype=np.int64), "one")]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "range.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    p = sluice("check", "--model", path)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "Range" in lines(p)["cpu"] and "refused" in lines(p)["cpu"]


def test_a_fixed_batch_model_says_whether_a_job_re_specializes_it(tmp_path):
    # torch.export's as_strided in ConvNeXt's head (a Gather over the flattened batch-1 tensor) no longer
    # keeps it from following the job's batch.
    p = sluice("check", "--model", os.path.join(ZOO, "tv_convnext.dynamo.onnx"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fixed at 1 in the model; re-specialized" in lines(p)["batch"], p.stdout
    assert "re-specialized to batch" not in p.stderr, p.stderr
    # A model that mixes the samples (a mean over the batch) runs only on sub-batches: the reason, the
    # cost and the export that avoids it.
    nodes = [helper.make_node("ReduceMean", ["x", "ax"], ["m"], keepdims=1), helper.make_node("Sub", ["x", "m"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([0], np.int64), "ax")])
    path = tmp_path / "mix.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    p = sluice("check", "--model", path)
    assert p.returncode == 0, p.stdout + p.stderr  # it runs, on sub-batches
    line = lines(p)["batch"]
    assert "not re-specialized" in line and "reduces over the batch axis" in line, line
    assert "256 of them" in line and "up to 256x the time per batch" in line, line
    assert "dynamic_shapes=" in line and "dynamic_axes=" in line, line
    assert len(p.stdout.splitlines()) <= 25
