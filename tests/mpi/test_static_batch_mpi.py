"""A static-batch model under mpirun: rank 0 re-specializes it (or unrolls it into sub-batches) and
the other ranks get the rewritten graph, so every rank count gives the same rows; a model that can
only run on sub-batches at a batch that is no multiple of its own is one error on every rank, exit 3,
no hang."""
import os

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.sluice_test import error_lines, fresh_dir, sluice


def write_model(path, batch, mix):
    """Conv, then either a per-sample mean subtraction (re-specializable) or a mean over the batch
    (sub-batches only: with a batch of 1 it is still per sample; with more it mixes samples, which
    the batch-axis check refuses); the batch fixed at `batch` in the input and in a Reshape target."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    axes = numpy_helper.from_array(np.array([0] if mix else [1, 2, 3], np.int64), "axes")
    target = numpy_helper.from_array(np.array([batch, -1], np.int64), "t")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["c", "axes"], ["m"], keepdims=1),
             helper.make_node("Sub", ["c", "m"], ["d"]),
             helper.make_node("Reshape", ["d", "t"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 256])], initializer=[w, axes, target])
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString())
    return path


def run(model, out, np_, batch, check=True):
    return sluice("run", "--model", model, "--input", "synthetic", "--samples", 22, "--sample-shape", "3,8,8",
                  "--batch-size", batch, "--chunk-batches", 1, "--outputs", "logits", "--output", fresh_dir(str(out)),
                  "--device", "cpu", "--cpu-threads", 1, "--quiet", np_=np_, check=check, timeout=120)


@pytest.mark.parametrize("mix", [False, True], ids=["respecialized", "sub-batched"])
def test_every_rank_count_gives_the_same_rows(mix, tmp_path):
    model = write_model(tmp_path / "m.onnx", 1, mix)
    rows = {}
    for np_ in (1, 2, 3):
        run(model, tmp_path / f"np{np_}", np_, 6)
        with h5py.File(tmp_path / f"np{np_}" / "outputs.h5") as f:
            rows[np_] = f["outputs/logits"][:]
    assert rows[1].shape == (22, 256)
    for np_ in (2, 3):
        np.testing.assert_array_equal(rows[np_], rows[1])


@pytest.mark.parametrize("np_", [2, 3])
def test_no_multiple_of_the_model_batch_is_one_error_on_every_rank(np_, tmp_path):
    model = write_model(tmp_path / "m.onnx", 2, True)
    p = run(model, tmp_path / "bad", np_, 5, check=False)
    assert p.returncode == 3, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "multiple of 2" in lines[0], p.stderr
