"""`sluice profile` on the CPU engine: the table and the JSON agree with each other and with counts
made here by hand from the model's shapes.

The timings themselves are never asserted (they depend on the machine); what is checked is the
bookkeeping around them: every node of the prepared model has a step, the shares add up to 100 %,
the steps' times add up to the reported total, and the bytes and FLOPs of a convolution and a Gemm
are exactly what their shapes say.
"""
import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.sluice_test import BIN, ROOT, sluice

if not os.access(BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {BIN} (set SLUICE_BIN)", allow_module_level=True)

QUICKSTART_MODEL = os.path.join(ROOT, "jobs", "models", "quickstart.onnx")


def profile(tmp_path, *args):
    out = tmp_path / "profile.json"
    p = sluice("profile", "--device", "cpu", "--cpu-threads", "2", "--replays", "2", "--json", out, *args,
               timeout=120)
    assert p.returncode == 0, p.stderr
    with open(out) as f:
        return p.stdout, json.load(f)


def test_quickstart_profile_covers_every_node_and_adds_up(tmp_path):
    stdout, j = profile(tmp_path, "--model", QUICKSTART_MODEL, "--batch-size", "4", "--sample-shape", "3,64,64",
                        "--outputs", "logits,argmax", "--top", "0")
    steps = j["steps"]
    names = {s["name"] for s in steps}
    # Every convolution of the model is a step of its own (fused with its BatchNorm and ReLU, under the
    # Conv's name); the other op kinds of the model show up too.
    model = onnx.load(QUICKSTART_MODEL)
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    assert convs and set(convs) <= names, set(convs) - names
    kinds = {s["kind"] for s in steps}
    assert {"FusedConv", "MaxPool", "Concat", "Resize", "ArgMaxCast"} <= kinds, kinds
    # The bookkeeping.
    assert abs(sum(s["share"] for s in steps) - 1.0) < 1e-6
    assert abs(sum(s["ms"] for s in steps) - j["steps_ms"]) < 1e-6 * max(1.0, j["steps_ms"])
    assert abs(sum(k["ms"] for k in j["kinds"]) - j["steps_ms"]) < 1e-6 * max(1.0, j["steps_ms"])
    assert sum(k["steps"] for k in j["kinds"]) == len(steps)
    assert all(s["ms"] >= 0 and s["bytes"] > 0 for s in steps)
    assert j["forward_ms"] > 0 and j["replays"] == 2 and j["batch_size"] == 4
    assert j["peaks"]["copy_bytes_per_s"] > 0 and j["peaks"]["matmul_flops_per_s"] > 0
    for s in steps:
        if s["ms"] > 0:
            assert s["bandwidth_fraction"] == pytest.approx(s["bytes"] / (s["ms"] * 1e-3) / j["peaks"]["copy_bytes_per_s"])
    # The table lists every step (--top 0) and the totals by kind.
    for s in steps:
        assert s["name"][-40:] in stdout
    assert "by kind" in stdout and "ceilings: copy" in stdout


def conv_gemm_model(path):
    """x [B,3,16,16] -> Conv 8x3x3x3 stride 2 pad 1 (+bias) -> Relu -> GlobalAveragePool -> Flatten -> Gemm 10x8."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in [("W", (8, 3, 3, 3)), ("B", (8,)), ("W2", (10, 8)), ("C", (10,))]]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "W2", "C"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "conv_gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_conv_and_gemm_bytes_and_flops_match_hand_counts(tmp_path):
    model = tmp_path / "m.onnx"
    conv_gemm_model(str(model))
    b = 5
    _, j = profile(tmp_path, "--model", model, "--batch-size", b, "--sample-shape", "3,16,16")
    steps = {s["name"]: s for s in j["steps"]}
    conv, fc = steps["conv"], steps["fc"]
    assert conv["kind"] == "FusedConv" and fc["kind"] == "Gemm"
    # Conv: input, weights, bias and output once each, float32; 2 FLOPs per multiply-add, each of the
    # B*8*8*8 outputs a dot product over 3*3*3 taps.
    assert conv["bytes"] == 4 * (b * 3 * 16 * 16 + 8 * 3 * 3 * 3 + 8 + b * 8 * 8 * 8)
    assert conv["flops"] == 2 * (b * 8 * 8 * 8) * (3 * 3 * 3)
    # Gemm: A [B,8], W2 [10,8], C [10], Y [B,10]; M*N outputs with K = 8.
    assert fc["bytes"] == 4 * (b * 8 + 10 * 8 + 10 + b * 10)
    assert fc["flops"] == 2 * b * 10 * 8


def test_bad_arguments_give_one_clear_error(tmp_path):
    p = sluice("profile", "--model", QUICKSTART_MODEL, "--device", "cpu", "--replays", "0")
    assert p.returncode == 2 and "--replays" in p.stderr
    p = sluice("profile", "--model", QUICKSTART_MODEL, "--device", "cpu", "--sample-shape", "3,32,32,1")
    assert p.returncode != 0
    lines = [l for l in p.stderr.splitlines() if "error" in l]
    assert len(lines) == 1 and "shape" in lines[0], p.stderr


@pytest.mark.parametrize("args,words", [(["--scale", "nan"], "--scale nan is not a finite"),
                                        (["--std", "1e-45"], "below the smallest normal float32"),
                                        (["--cpu-threads", "40000"], "--cpu-threads 40000 is more threads")])
def test_preprocessing_and_threads_beyond_float32_or_the_machine_are_refused(args, words):
    p = sluice("profile", "--model", QUICKSTART_MODEL, "--device", "cpu", "--sample-shape", "3,64,64", "--replays", "1",
               *args, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = [line for line in p.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and words in lines[0], p.stderr


# `sluice profile` takes the options of `sluice run` and prepares the model through the same job plan
# (app/job_plan.h): what a run does to a model, the profile times.

def test_a_job_file_profiles_as_it_runs(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    conv_gemm_model(str(models / "m.onnx"))
    job = tmp_path / "job.toml"
    # Paths in a job file are relative to its folder, as for `sluice run`.
    job.write_text('model = "models/m.onnx"\nbatch-size = 3\nsample-shape = [3, 16, 16]\n'
                   'outputs = ["topk_probs", "argmax"]\ntop-k = 4\noutput = "unused-by-profile"\n')
    stdout, j = profile(tmp_path, "--config", job)
    assert j["batch_size"] == 3 and j["sample_shape"] == [3, 16, 16]
    assert j["outputs"] == ["topk_probs", "argmax"]
    assert "batch 3, sample [3,16,16] float32, outputs topk_probs,argmax" in stdout
    # The command line wins over the job file.
    _, j = profile(tmp_path, "--config", job, "--batch-size", "2")
    assert j["batch_size"] == 2


def test_topk_probs_is_a_head_the_profile_times(tmp_path):
    model = tmp_path / "m.onnx"
    conv_gemm_model(str(model))
    _, plain = profile(tmp_path, "--model", model, "--batch-size", 2, "--sample-shape", "3,16,16")
    _, topk = profile(tmp_path, "--model", model, "--batch-size", 2, "--sample-shape", "3,16,16",
                      "--outputs", "topk_probs", "--top-k", 3)
    assert topk["outputs"] == ["topk_probs"]
    assert len(topk["steps"]) > len(plain["steps"])  # the head's steps behind the model


def static_batch_model(path, batch=2):
    """conv_gemm with the batch fixed at `batch`, in the input and in a Reshape constant, as exporters leave it."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in [("W", (8, 3, 3, 3)), ("B", (8,)), ("W2", (10, 8)), ("C", (10,))]]
    inits.append(numpy_helper.from_array(np.array([batch, 8], dtype=np.int64), "shape"))
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2],
                         kernel_shape=[3, 3]),
        helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"),
        helper.make_node("Reshape", ["g", "shape"], ["f"], name="reshape"),
        helper.make_node("Gemm", ["f", "W2", "C"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "static", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_static_batch_chooses_how_a_fixed_batch_model_is_timed(tmp_path):
    model = tmp_path / "static.onnx"
    static_batch_model(str(model))
    args = ("--model", model, "--batch-size", 6, "--sample-shape", "3,16,16")
    _, whole = profile(tmp_path, *args, "--static-batch", "respecialize")
    _, parts = profile(tmp_path, *args, "--static-batch", "sub-batch")
    assert {s["name"] for s in whole["steps"]} >= {"conv", "fc"}
    # Three sub-batches of the model's own batch 2, each with its own steps.
    for k in range(3):
        assert {f"conv#sb{k}", f"fc#sb{k}"} <= {s["name"] for s in parts["steps"]}
    p = sluice("profile", *args, "--device", "cpu", "--static-batch", "sometimes")
    assert p.returncode == 2 and "--static-batch" in p.stderr


def test_image_inputs_are_profiled_at_their_decoded_size(tmp_path):
    from PIL import Image
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (30 + i, 40, 3), dtype=np.uint8)).save(images / f"{i}.jpg")
    model = tmp_path / "m.onnx"
    conv_gemm_model(str(model))  # [N, 3, 16, 16]
    _, j = profile(tmp_path, "--model", model, "--input", images, "--batch-size", 2, "--resize", 20,
                   "--center-crop", 16, "--scale", 0.00392156862745098)
    # The model takes uint8 [3, 16, 16], as `sluice run` feeds it after decoding, resizing and cropping.
    assert j["sample_shape"] == [3, 16, 16] and j["input_dtype"] == "uint8"
    # Image options on a tensor input: one clear error, as for `sluice run`.
    p = sluice("profile", "--model", model, "--device", "cpu", "--sample-shape", "3,16,16", "--resize", "16x16")
    assert p.returncode == 2, p.stderr
    lines = [l for l in p.stderr.splitlines() if "error" in l]
    assert len(lines) == 1 and "image inputs" in lines[0], p.stderr


def test_a_tensor_file_gives_the_profile_its_sample_shape(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((4, 3, 16, 16), dtype=np.uint8))
    model = tmp_path / "m.onnx"
    conv_gemm_model(str(model))
    _, j = profile(tmp_path, "--model", model, "--input", x, "--batch-size", 2)
    assert j["sample_shape"] == [3, 16, 16] and j["input_dtype"] == "uint8"


def test_attention_steps_count_their_two_products(tmp_path):
    # The zoo's ViT (2 layers, 2 heads of 16, 17 tokens) at batch 3: one attention step per layer,
    # 4·B·H·S·S_kv·D FLOPs each, its share and fraction of the matrix rate reported like a GEMM's.
    model = os.path.join(ROOT, "tests", "data", "zoo", "hf_vit.dynamo.onnx")
    stdout, j = profile(tmp_path, "--model", model, "--batch-size", "3", "--sample-shape", "3,32,32", "--top", "0")
    attention = [s for s in j["steps"] if s["kind"] == "Attention"]
    assert len(attention) == 2, [s["kind"] for s in j["steps"]]
    for s in attention:
        assert s["flops"] == 4 * 3 * 2 * 17 * 17 * 16
        # q, k, v and the output, float32 [3, 2, 17, 16] each (the export's mask of zeros is dropped)
        assert s["bytes"] == 4 * (3 * 2 * 17 * 16 * 4)
        assert 0 < s["share"] < 1
    kinds = {k["kind"]: k for k in j["kinds"]}
    assert kinds["Attention"]["steps"] == 2 and "Attention" in stdout
