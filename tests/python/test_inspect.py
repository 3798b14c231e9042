"""`sluice inspect` on the folders of real runs of each task output.  The heads that store datasets
under other names than the output's (topk and topk_probs: "<name>_values" and "<name>_indices";
detections: "<name>" and "<name>_count") are what a job promises, so a complete run of any of them
prints OK and exits 0, and a rank file that lost one of those datasets is NOT OK, naming it."""
import os
import sys

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, ROOT, sluice  # noqa: E402

if not os.access(BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {BIN} (set SLUICE_BIN)", allow_module_level=True)

YOLO = os.path.join(ROOT, "tests", "data", "detect", "yolo_v8.onnx")


def classifier(path, classes=10, output="y"):
    """A tiny classifier exported as torch.onnx.export writes one: batch 1, [1, 3, 8, 8] -> logits [1, classes]."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((classes, 3 * 8 * 8)).astype(np.float32), "fc"),
             numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "fcb")]
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "fc", "fcb"], [output], transB=1)]
    g = helper.make_graph(nodes, "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, classes])], initializer=inits)
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    return path


def run_job(tmp_path, outputs):
    if outputs == "detections":
        model, shape, extra = YOLO, "3,64,64", ["--detection-format", "yolo"]
    else:
        model, shape, extra = classifier(tmp_path / "cls.onnx"), "3,8,8", ["--top-k", 3]
    out = tmp_path / "run"
    p = sluice("run", "--model", model, "--input", "synthetic", "--samples", 9, "--sample-shape", shape,
               "--batch-size", 4, "--outputs", outputs, "--device", "cpu", "--cpu-threads", 2, "--output", out,
               "--quiet", *extra)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("outputs", ["topk_probs", "topk", "detections",
                                     "logits,argmax,softmax,topk,topk_probs,embedding"])
def test_inspect_says_ok_for_a_complete_run_of_each_output(tmp_path, outputs):
    out = run_job(tmp_path, outputs)
    p = sluice("inspect", out)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "OK", p.stdout + p.stderr
    assert "problem:" not in p.stdout, p.stdout


@pytest.mark.parametrize("outputs,dropped", [("topk_probs", "topk_probs_indices"), ("topk", "topk_values"),
                                             ("detections", "detections_count")])
def test_inspect_names_a_stored_dataset_a_rank_file_lost(tmp_path, outputs, dropped):
    out = run_job(tmp_path, outputs)
    with h5py.File(out / "rank-00000.h5", "r+") as f:
        del f["outputs"][dropped]
    p = sluice("inspect", out)
    assert p.returncode == 1 and p.stdout.splitlines()[-1] == "NOT OK", p.stdout + p.stderr
    assert f"problem: rank-00000.h5: dataset /outputs/{dropped} is missing (its job stores it)" in p.stdout, p.stdout


@pytest.mark.parametrize("output", ["topk_probs_values", "topk_indices"])
def test_a_model_output_named_as_a_heads_dataset_is_read_under_another_name(tmp_path, output):
    classifier(tmp_path / "cls.onnx", output=output)
    out = tmp_path / "run"
    p = sluice("run", "--model", tmp_path / "cls.onnx", "--input", "synthetic", "--samples", 5, "--sample-shape",
               "3,8,8", "--batch-size", 2, "--outputs", "topk_probs,topk", "--top-k", 3, "--device", "cpu",
               "--output", out, "--quiet")
    assert p.returncode == 0, p.stderr
    with h5py.File(out / "outputs.h5", "r") as f:
        assert sorted(f["outputs"]) == ["topk_indices", "topk_probs_indices", "topk_probs_values", "topk_values"]
        assert np.array_equal(f["outputs/topk_indices"][:], f["outputs/topk_probs_indices"][:])
    p = sluice("inspect", out)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "OK", p.stdout + p.stderr
