"""A model that runs as sub-batches says so where users look: the warning at set-up, and after the run
the "slow:" line under the summary's set-up line (and report.json's batch_note), each with why,
what it costs and the export that avoids it; `sluice check` says it before any job (test_check.py).

Every export of the zoo re-specializes (test_zoo.py), so a zoo model is made to unroll with
--static-batch sub-batch; a crafted model that mixes its samples (test_static_batch.py's batch_mixer)
unrolls on its own."""
import json
import os

import numpy as np

from support.sluice_test import ROOT, fresh_dir, sluice
from test_static_batch import batch_mixer

ZOO = os.path.join(ROOT, "tests", "data", "zoo")
MODEL = os.path.join(ZOO, "tv_convnext.dynamo.onnx")  # [1, 3, 32, 32], re-specializes


def run(model, out, *options, shape="3,32,32"):
    p = sluice("run", "--model", model, "--input", "synthetic", "--sample-shape", shape, "--samples", 8,
               "--batch-size", 4, "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, "--output",
               fresh_dir(out), *options, timeout=300, check=True)
    with open(os.path.join(out, "report.json")) as f:
        return p, json.load(f)


def slow_line(p):
    lines = [x for x in p.stdout.splitlines() if x.startswith("slow: ")]
    assert len(lines) <= 1, p.stdout
    return lines[0] if lines else ""


def test_a_zoo_model_on_sub_batches_says_so_after_the_run(tmp_path):
    p, report = run(MODEL, str(tmp_path / "sub"), "--static-batch", "sub-batch")
    line = slow_line(p)
    assert "each batch of 4 ran as 4 sub-batches of 1 (not re-specialized: --static-batch sub-batch)" in line, p.stdout
    assert "up to 4x the time per batch" in line and "dynamic_shapes=" in line and "dynamic_axes=" in line, line
    assert p.stdout.splitlines().index(line) == [x.startswith("set-up: ") for x in p.stdout.splitlines()].index(True) + 1
    assert report["batch_note"] == line[len("slow: "):]
    # The same model re-specialized (the default): no such line, nothing in the report.
    p, report = run(MODEL, str(tmp_path / "auto"))
    assert slow_line(p) == "" and "batch_note" not in report, p.stdout
    assert "re-specialized to batch 4" in p.stderr, p.stderr


def test_a_model_that_mixes_samples_warns_at_set_up_and_after_the_run(tmp_path):
    path = tmp_path / "mix.onnx"
    path.write_bytes(batch_mixer(np.random.default_rng(0)).SerializeToString())
    p, report = run(str(path), str(tmp_path / "mix"), shape="3,4")
    warning = [x for x in p.stderr.splitlines() if "warning" in x and "sub-batches" in x]
    assert warning and "reduces over the batch axis" in warning[0] and "dynamic_axes=" in warning[0], p.stderr
    line = slow_line(p)
    assert "4 sub-batches of 1 (not re-specialized:" in line and "reduces over the batch axis" in line, p.stdout
    assert "up to 4x the time per batch" in line and "export the model with a dynamic batch" in line, line
    assert report["batch_note"] in line
