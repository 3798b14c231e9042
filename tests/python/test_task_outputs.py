"""The task heads on the CPU engine against independent references on the same raw outputs:

- detections, yolo layouts: Sluice stores the model's raw prediction (`--outputs logits`) beside
  its detections; torchvision (box_convert, batched_nms, in /usr/bin/python3's torch) decodes and
  suppresses that same prediction.  The float32 decode and IoU are the same operations in both, so
  counts match exactly and rows to 1e-4 px;
- detections, YOLOv10's final rows [B, N, 6]: onnxruntime's rows above the threshold in score order;
- detections, DETR format (hf_detr, hf_yolos of the zoo): a numpy re-implementation of
  transformers' post_process_object_detection (softmax, drop no-object, max, corners times the
  input size) on onnxruntime's outputs for the same samples, to 1e-3 (the engines agree to 1e-4
  relative on the raw outputs; boxes are scaled by 64 px); a threshold between the samples' score
  levels keeps all of one sample's queries and none of another's;
- embedding: hf_clip_vision's first token, L2-normalised, against onnxruntime's reference, and
  --model-output picking the pooled output, --no-normalize, --output-dtype float16.

SLUICE_TASK_DEVICE=cuda runs the same checks on the CUDA engine (at fp32) on a GPU host.
"""
import os
import subprocess
import sys

import h5py
import numpy as np
import onnx
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, ROOT, error_lines, sluice, torch_available  # noqa: E402

ZOO = os.path.join(ROOT, "tests", "data", "zoo")
DETECT = os.path.join(ROOT, "tests", "data", "detect")
TORCH_PY = os.environ.get("SLUICE_TORCH_PYTHON", "/usr/bin/python3")
DEVICE = os.environ.get("SLUICE_TASK_DEVICE", "cpu")

if not os.access(BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {BIN} (set SLUICE_BIN)", allow_module_level=True)

TORCHVISION_NMS = r"""
import sys
import numpy as np, torch, torchvision
pred, layout, thr, iou, k, out = np.load(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
rows = []
for p in torch.from_numpy(pred):
    if layout == "v8":
        p = p.T
        scores, labels = p[:, 4:].max(1)
    else:
        scores, labels = p[:, 5:].max(1)
        scores = scores * p[:, 4]
    boxes = torchvision.ops.box_convert(p[:, :4], "cxcywh", "xyxy")
    m = scores > thr
    keep = torchvision.ops.batched_nms(boxes[m], scores[m], labels[m], iou)[:k]
    rows.append(torch.cat([boxes[m][keep], scores[m][keep, None], labels[m][keep, None].float()], 1).numpy())
np.savez(out, *rows)
"""


def run_heads(tmp_path, model, x, *args, batch=4):
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    p = sluice("run", "--model", model, "--input", tmp_path / "x.npy", "--batch-size", batch, "--device", DEVICE,
               "--cpu-threads", 2, "--output", out, "--quiet", *args)
    assert p.returncode == 0, p.stderr.strip()
    with h5py.File(out / "outputs.h5", "r") as f:
        return {k: f["outputs"][k][:] for k in f["outputs"]}


def check_rows(got, count, ref_rows, k, atol):
    for b, ref in enumerate(ref_rows):
        n = min(len(ref), k)
        assert count[b] == n, f"sample {b}: {count[b]} detections, the reference has {n}"
        np.testing.assert_allclose(got[b, :n], ref[:n], atol=atol, rtol=0, err_msg=f"sample {b}")
        assert not got[b, n:].any(), f"sample {b}: rows past the count are not zero"


@pytest.mark.skipif(not torch_available(TORCH_PY), reason=f"{TORCH_PY} has no torch/torchvision")
@pytest.mark.parametrize("layout", ["v8", "v5"])
@pytest.mark.parametrize("iou,k", [(0.45, 100), (0.7, 5)])
def test_yolo_detections_match_torchvision_batched_nms(layout, iou, k, tmp_path):
    rng = np.random.default_rng(7)
    # Smooth images (blocks of 8 px, a little noise against exact ties) so neighbouring candidates
    # overlap, as a detector's do; the threshold near the median score.
    x = (np.kron(rng.random((7, 3, 8, 8)), np.ones((8, 8))) + 0.02 * rng.random((7, 3, 64, 64))).astype(np.float32)
    thr = {"v8": 0.55, "v5": 0.2}[layout]
    outs = run_heads(tmp_path, os.path.join(DETECT, f"yolo_{layout}.onnx"), x, "--outputs", "logits,detections",
                     "--detection-format", "yolo", "--score-threshold", thr, "--iou-threshold", iou,
                     "--max-detections", k)
    assert outs["detections"].shape == (7, k, 6) and outs["detections"].dtype == np.float32
    assert outs["detections_count"].shape == (7,) and outs["detections_count"].dtype == np.int32
    np.save(tmp_path / "pred.npy", outs["logits"])
    r = subprocess.run([TORCH_PY, "-c", TORCHVISION_NMS, str(tmp_path / "pred.npy"), layout, str(thr), str(iou), str(k),
                        str(tmp_path / "ref.npz")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    ref = np.load(tmp_path / "ref.npz")
    ref_rows = [ref[f"arr_{i}"] for i in range(7)]
    # NMS must have had work to do (fewer kept than scored above the threshold), and a small K must
    # have cut the list, or the test would not test them.
    pred = outs["logits"] if layout == "v5" else np.swapaxes(outs["logits"], 1, 2)
    scores = pred[..., 4:].max(-1) if layout == "v8" else pred[..., 5:].max(-1) * pred[..., 4]
    above = (scores > thr).sum(1)
    if k == 100:
        assert all(len(rr) < a for rr, a in zip(ref_rows, above)), (above, [len(rr) for rr in ref_rows])
    else:
        assert all(len(rr) == k for rr in ref_rows), [len(rr) for rr in ref_rows]
    check_rows(outs["detections"], outs["detections_count"], ref_rows, k, 1e-4)


@pytest.mark.parametrize("fmt", ["yolov10", "auto"])
def test_yolov10_final_rows_are_kept_above_the_threshold_in_score_order(fmt, tmp_path):
    # The model's rows are final (x1, y1, x2, y2, score, class; the model has done its selection):
    # Sluice's stored rows (to onnxruntime's within 1e-4) above the threshold, sorted by score
    # (stable: equal scores keep the model's order), the first K, no suppression.
    import onnxruntime as ort
    rng = np.random.default_rng(11)
    x = (np.kron(rng.random((5, 3, 8, 8)), np.ones((8, 8))) + 0.02 * rng.random((5, 3, 64, 64))).astype(np.float32)
    model = os.path.join(DETECT, "yolo_v10.onnx")
    thr, k = 0.66, 20
    outs = run_heads(tmp_path, model, x, "--outputs", "logits,detections", "--detection-format", fmt,
                     "--score-threshold", thr, "--max-detections", k, batch=2)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    np.testing.assert_allclose(outs["logits"], ref, atol=1e-4, rtol=0)
    rows = []
    for r in outs["logits"]:
        keep = np.nonzero(r[:, 4] > thr)[0]
        rows.append(r[keep[np.argsort(-r[keep, 4], kind="stable")]])
    # The threshold cuts rows of every sample and K the list of some, or the test would not test them.
    assert all(0 < len(rr) < len(r) for rr, r in zip(rows, ref)) and any(len(rr) > k for rr in rows), [len(r) for r in rows]
    check_rows(outs["detections"], outs["detections_count"], rows, k, 1e-4)


def detr_reference(logits, boxes, width, height, thr):
    """transformers' post_process_object_detection, per sample, sorted by score (stable)."""
    e = np.exp(logits - logits.max(-1, keepdims=True))
    prob = e / e.sum(-1, keepdims=True)
    scores, labels = prob[..., :-1].max(-1), prob[..., :-1].argmax(-1)
    cx, cy, w, h = np.moveaxis(boxes, -1, 0)
    xyxy = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], -1) * [width, height, width, height]
    rows = []
    for b in range(len(logits)):
        keep = np.nonzero(scores[b] > thr)[0]
        keep = keep[np.argsort(-scores[b][keep], kind="stable")]
        rows.append(np.concatenate([xyxy[b][keep], scores[b][keep, None], labels[b][keep, None]], 1))
    return rows, scores


@pytest.mark.parametrize("name", ["hf_detr.torchscript", "hf_yolos.torchscript", "hf_detr.dynamo"])
@pytest.mark.parametrize("thr", [0.0, 0.26])
def test_detr_detections_match_the_transformers_post_processing(name, thr, tmp_path):
    model = os.path.join(ZOO, f"{name}.onnx")
    x = np.load(os.path.join(ZOO, name.split(".")[0] + ".input.npy"))
    ref = np.load(os.path.join(ZOO, f"{name}.ref.npz"))
    g = onnx.load(model).graph
    logits, boxes = (ref[o.name] for o in g.output)  # transformers' order: logits, pred_boxes
    height, width = x.shape[2:]
    rows, scores = detr_reference(logits.astype(np.float64), boxes.astype(np.float64), width, height, thr)
    # Which detections pass is only defined where no score is as close to the threshold as the engines are.
    assert np.abs(scores - thr).min() > 1e-4, scores
    k = 8
    outs = run_heads(tmp_path, model, x, "--outputs", "detections", "--detection-format", "auto",
                     "--score-threshold", thr, "--max-detections", k, batch=2)
    dets, count = outs["detections"], outs["detections_count"]
    # Random weights give every query nearly the same score (within 1e-7): the order among them is
    # the engines' rounding, so rows are matched as sets, and Sluice's must be sorted by score.
    for b, ref in enumerate(rows):
        assert count[b] == len(ref), f"sample {b}: {count[b]} detections, the reference has {len(ref)}"
        got = dets[b, :count[b]]
        assert np.all(np.diff(got[:, 4]) <= 0), got[:, 4]
        assert not dets[b, count[b]:].any()
        unmatched = list(range(len(got)))
        for row in ref:
            hit = [i for i in unmatched if np.abs(got[i] - row).max() <= 1e-3]
            assert hit, f"sample {b}: reference row {row} not among {got}"
            unmatched.remove(hit[0])


def rtdetr_reference(logits, boxes, width, height, thr, k):
    """transformers' RT-DETR post-processing (use_focal_loss): sigmoid, the top k over queries x
    classes, then the threshold."""
    scores = 1 / (1 + np.exp(-logits))
    classes = logits.shape[2]
    cx, cy, w, h = np.moveaxis(boxes, -1, 0)
    xyxy = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], -1) * [width, height, width, height]
    rows = []
    for b in range(len(logits)):
        flat = scores[b].reshape(-1)
        top = np.argsort(-flat, kind="stable")[:k]
        top = top[flat[top] > thr]
        q, c = top // classes, top % classes
        rows.append(np.concatenate([xyxy[b][q], flat[top, None], c[:, None]], 1))
    return rows, scores


def match_as_sets(dets, count, rows, atol):
    for b, ref in enumerate(rows):
        assert count[b] == len(ref), f"sample {b}: {count[b]} detections, the reference has {len(ref)}"
        got = dets[b, :count[b]]
        assert np.all(np.diff(got[:, 4]) <= 0), got[:, 4]
        assert not dets[b, count[b]:].any()
        unmatched = list(range(len(got)))
        for row in ref:
            hit = [i for i in unmatched if np.abs(got[i] - row).max() <= atol]
            assert hit, f"sample {b}: reference row {row} not among {got}"
            unmatched.remove(hit[0])


@pytest.mark.parametrize("name", ["hf_detr.torchscript", "hf_yolos.torchscript"])
@pytest.mark.parametrize("thr,k", [(0.0, 10), (0.5, 15)])
def test_rtdetr_format_matches_the_transformers_focal_post_processing(name, thr, k, tmp_path):
    # The zoo's DETR outputs read as sigmoid-scored: every (query, class) pair is a candidate.  Its
    # random weights give each class nearly one score over all queries, so K and the threshold are
    # chosen between the classes' levels (asserted below).
    model = os.path.join(ZOO, f"{name}.onnx")
    x = np.load(os.path.join(ZOO, name.split(".")[0] + ".input.npy"))
    ref = np.load(os.path.join(ZOO, f"{name}.ref.npz"))
    logits, boxes = (ref[o.name].astype(np.float64) for o in onnx.load(model).graph.output)
    height, width = x.shape[2:]
    rows, scores = rtdetr_reference(logits, boxes, width, height, thr, k)
    for s in scores.reshape(len(scores), -1):
        srt = np.sort(s)[::-1]
        assert srt[k - 1] - srt[k] > 1e-3 and np.abs(s - thr).min() > 1e-4, srt
    outs = run_heads(tmp_path, model, x, "--outputs", "detections", "--detection-format", "rtdetr",
                     "--score-threshold", thr, "--max-detections", k, batch=2)
    match_as_sets(outs["detections"], outs["detections_count"], rows, 1e-3)


CLIP = os.path.join(ZOO, "hf_clip_vision.torchscript.onnx")


def test_embedding_is_the_first_token_l2_normalised(tmp_path):
    x = np.load(os.path.join(ZOO, "hf_clip_vision.input.npy"))
    ref = np.load(os.path.join(ZOO, "hf_clip_vision.torchscript.ref.npz"))["onnx::Gather_235"][:, 0]
    outs = run_heads(tmp_path, CLIP, x, "--outputs", "embedding", batch=2)
    want = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    assert outs["embedding"].shape == want.shape and outs["embedding"].dtype == np.float32
    np.testing.assert_allclose(outs["embedding"], want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(outs["embedding"], axis=1), 1, atol=1e-6)


def test_model_output_picks_the_pooled_vector_and_no_normalize_keeps_it(tmp_path):
    x = np.load(os.path.join(ZOO, "hf_clip_vision.input.npy"))
    ref = np.load(os.path.join(ZOO, "hf_clip_vision.torchscript.ref.npz"))["237"]
    outs = run_heads(tmp_path, CLIP, x, "--outputs", "embedding,logits", "--model-output", "237", "--no-normalize",
                     "--output-dtype", "float16", batch=3)
    assert outs["embedding"].dtype == np.float16 and outs["embedding"].shape == ref.shape
    # float16 keeps 11 bits: half an ulp of the largest value.
    np.testing.assert_allclose(outs["embedding"].astype(np.float32), ref, atol=np.abs(ref).max() * 2.0 ** -11)
    np.testing.assert_allclose(outs["logits"].astype(np.float32), ref, atol=np.abs(ref).max() * 2.0 ** -11)


def test_an_unknown_model_output_is_refused_naming_the_outputs(tmp_path):
    np.save(tmp_path / "x.npy", np.load(os.path.join(ZOO, "hf_clip_vision.input.npy")))
    p = sluice("run", "--model", CLIP, "--input", tmp_path / "x.npy", "--device", "cpu", "--outputs", "embedding",
               "--model-output", "pooled", "--output", tmp_path / "out", "--quiet")
    assert p.returncode == 3, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "'pooled'" in lines[0] and "'237' [" in lines[0], p.stderr


def test_pooled_cnn_features_are_flattened_and_a_feature_map_is_refused(tmp_path):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (16, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["f"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["f"], ["pooled"])]
    g = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 16, 16])],
                          [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("f", TensorProto.FLOAT, None)], [w])
    path = str(tmp_path / "pool.onnx")
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8  # what the onnxruntime of CI reads
    onnx.save(m, path)
    x = rng.random((5, 3, 16, 16)).astype(np.float32)
    import onnxruntime as ort
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(["pooled"], {"x": x})[0].reshape(5, 16)
    outs = run_heads(tmp_path, path, x, "--outputs", "embedding", batch=2)
    np.testing.assert_allclose(outs["embedding"], ref / np.linalg.norm(ref, axis=1, keepdims=True), atol=1e-5)
    p = sluice("run", "--model", path, "--input", tmp_path / "x.npy", "--device", "cpu", "--outputs", "embedding",
               "--model-output", "f", "--output", tmp_path / "refused", "--quiet")
    assert p.returncode == 3, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "'f' of shape [32,16,16,16]" in lines[0] and "[B, T, D]" in lines[0], p.stderr


def test_inspect_keeps_its_dataset_columns_aligned_past_long_names(tmp_path):
    # /outputs/detections_count is longer than the column's usual 24 characters.
    rng = np.random.default_rng(3)
    x = rng.random((2, 3, 64, 64)).astype(np.float32)
    run_heads(tmp_path, os.path.join(DETECT, "yolo_v8.onnx"), x, "--outputs", "logits,detections",
              "--detection-format", "yolo", batch=2)
    p = sluice("inspect", tmp_path / "out")
    assert p.returncode == 0, p.stderr.strip()
    rows = [line for line in p.stdout.splitlines() if line.startswith("  /")]
    names = [r.split()[0] for r in rows]
    assert "/outputs/detections_count" in names and "/sample_index" in names, p.stdout
    starts = {r.index(r.split()[1], len(r.split()[0]) + 2) for r in rows}
    assert len(starts) == 1, "the type column starts at different places:\n" + "\n".join(rows)
