"""The synthetic source end to end: a model that passes its input through (x * 1) stores exactly
the samples data_tools/synthetic.py reproduces, in float32 and uint8, through the whole pipeline
(readers, slots, engine, writer, outputs.h5)."""
import os

import h5py
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from support.sluice_test import sluice
import synthetic


def passthrough_model(path, shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *shape])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", *shape])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    g = helper.make_graph([helper.make_node("Mul", ["x", "one"], ["y"])], "pass", [x], [y], [one])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_stored_samples_equal_the_python_reproduction(tmp_path, dtype):
    shape = (2, 5, 7)
    model = str(tmp_path / "pass.onnx")
    passthrough_model(model, shape)
    out = str(tmp_path / "run")
    n, seed = 45, 123
    sluice("run", "--model", model, "--samples", n, "--sample-shape", ",".join(map(str, shape)), "--input-dtype", dtype,
           "--seed", seed, "--batch-size", 4, "--output", out, "--quiet", "--device", "cpu", np_=2, check=True)
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        got = f["outputs/logits"][:]
    want = synthetic.samples(seed, shape, 0, n, dtype).astype(np.float32)  # uint8 is cast to float on the device
    assert got.shape == (n, *shape)
    np.testing.assert_array_equal(got, want)
    if dtype == "float32":
        assert got.min() >= -1 and got.max() < 1 and got.std() > 0.5
