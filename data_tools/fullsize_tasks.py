#!/usr/bin/env python3
"""Detector, detector, encoder and depth model from a folder of photos to their exported files under
mpirun, checked against independent references on the same inputs.  For the GPU host (torch,
torchvision, transformers, onnxruntime; random weights, nothing downloaded):

    PYTHONUNBUFFERED=1 python3 data_tools/fullsize_tasks.py \\
        --launch ".devrt/run mpirun -np 2 .devrt/bin/sluice" [--precisions fp32,bf16] [--photos 16]

  detr  DETR-R50 (transformers, ResNet-50 backbone, 100 queries, 91 classes), 800 x 800:
        `--outputs logits,detections --detection-format detr`, then `sluice export` (COCO JSON, CSV);
        against transformers' DetrImageProcessor.post_process_object_detection on onnxruntime's
        logits and boxes.
  yolo  a YOLOv8-style anchor-free head (DFL boxes, 80 sigmoid classes, strides 8/16/32) on
        torchvision's ResNet-50, 640 x 640 letterboxed: [B, 84, 8400]; against
        torchvision.ops.batched_nms on onnxruntime's raw output.
  clip  CLIP ViT-B/16 vision with its projection (image_embeds [B, 512]), 224 x 224:
        `--outputs embedding`, then `sluice export` (float16 .npy + keys); cosine similarity with
        onnxruntime's normalised embeddings.
  dpt   DPT (DPTForDepthEstimation, the default ViT-B/16 configuration), 384 x 384: `--outputs
        logits`, then `sluice export --what dense` (16-bit PNG + dense_scale.csv); against
        onnxruntime's depth.

Each model is exported at batch 1 (torch.onnx, TorchScript exporter; `--exporter dynamo` for the
other).  The inputs the references see are the ones Sluice fed its engine: an Identity model run
with the same preprocessing stores them.  Detections are matched as sets (DETR's queries are
unordered) within tolerances set by the precision; at bf16 the figure is the agreement (same-class
box at IoU >= 0.9) with the reference.  Each run's images/s is the report's job throughput.

`--tiny` runs the same flow with the repository's tiny models (tests/data/zoo, tests/data/detect)
and needs no torch: references from onnxruntime, torchvision through `--torch-python` (or
skipped), transformers' post-processing when importable, else its numpy port.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGENET = ["--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225"]
CLIP_NORM = ["--mean", "0.4815,0.4578,0.4082", "--std", "0.2686,0.2613,0.2758"]
HALF = ["--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5"]
SCALE = ["--scale", "0.00392156862745098"]
SIZES = [(640, 480), (480, 640), (800, 600), (500, 375), (1024, 768), (375, 500), (700, 700), (333, 250)]


# ---------------------------------------------------------------------------------- photos, runs
def make_photos(folder, n, seed=0):
    """JPEG photos of PIL-drawn shapes over a gradient, of several sizes and aspect ratios."""
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    for i in range(n):
        w, h = SIZES[i % len(SIZES)]
        base = rng.integers(0, 256, 3)
        ramp = np.linspace(0, 1, w)[None, :, None] * rng.integers(-120, 120, 3)
        vert = np.linspace(0, 1, h)[:, None, None] * rng.integers(-120, 120, 3)
        im = Image.fromarray(np.clip(base + ramp + vert, 0, 255).astype(np.uint8))
        d = ImageDraw.Draw(im)
        for _ in range(int(rng.integers(3, 9))):
            x0, y0 = int(rng.integers(0, w - 20)), int(rng.integers(0, h - 20))
            x1, y1 = int(rng.integers(x0 + 10, w)), int(rng.integers(y0 + 10, h))
            fill = tuple(int(v) for v in rng.integers(0, 256, 3))
            shape = int(rng.integers(0, 3))
            if shape == 0:
                d.rectangle([x0, y0, x1, y1], fill=fill)
            elif shape == 1:
                d.ellipse([x0, y0, x1, y1], fill=fill)
            else:
                d.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=fill)
        im.save(os.path.join(folder, f"{i:05d}.jpg"), quality=90)


def sluice(a, *args, timeout=300):
    cmd = shlex.split(a.launch) + [str(x) for x in args]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}")
    return time.time() - t0


def run(a, model, photos, out, flags, outputs, precision, *extra, batch=8):
    prec = [] if a.device == "cpu" else ["--precision", precision]
    sluice(a, "run", "--model", model, "--input", photos, *flags, "--outputs", outputs, "--device", a.device, *prec,
           "--batch-size", batch, "--output", out, "--quiet", "--algo-cache", os.path.join(a.work, "algo"), *extra)
    with open(os.path.join(out, "report.json")) as f:
        return float(json.load(f)["job"]["throughput"])


def stored(out, *names):
    import h5py
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() if isinstance(k, bytes) else str(k) for k in f["sample_key"][:]]
        return keys, [f["outputs"][n][:] for n in names]


def identity_model(path, h, w):
    """An Identity model of the detector's input size: `--outputs logits` of it stores the tensors
    the engine was fed, after decoding and preprocessing."""
    import onnx
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, h, w])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def fed_inputs(a, name, spec, photos):
    """The tensors Sluice's engine reads for these photos with this model's preprocessing."""
    path = os.path.join(a.work, f"identity_{spec['size'][0]}x{spec['size'][1]}.onnx")
    identity_model(path, *spec["size"])
    out = os.path.join(a.work, f"{name}-fed")
    run(a, path, photos, out, spec["flags"], "logits", "fp32")
    return stored(out, "logits")


def ort_outputs(model, x, names=None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    iname = sess.get_inputs()[0].name
    outs = [sess.run(names, {iname: x[i:i + 1]}) for i in range(len(x))]
    return [np.concatenate([o[k] for o in outs]) for k in range(len(outs[0]))], [o.name for o in sess.get_outputs()]


def rel(got, ref):
    ref = ref.astype(np.float64)
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


# ---------------------------------------------------------------------------------- references
def detr_reference(logits, boxes, h, w, thr):
    """transformers' post_process_object_detection (target size = the input), or its numpy port."""
    try:
        import torch
        from types import SimpleNamespace
        from transformers import DetrImageProcessor
        res = DetrImageProcessor().post_process_object_detection(
            SimpleNamespace(logits=torch.from_numpy(logits), pred_boxes=torch.from_numpy(boxes)), threshold=thr,
            target_sizes=[(h, w)] * len(logits))
        rows = [np.concatenate([r["boxes"].numpy(), r["scores"].numpy()[:, None], r["labels"].numpy()[:, None]], 1)
                for r in res]
        return rows, "transformers"
    except Exception as e:  # noqa: BLE001 - no transformers here (--tiny in CI): its numpy port
        why = type(e).__name__
    lg = logits.astype(np.float64)
    e = np.exp(lg - lg.max(-1, keepdims=True))
    prob = e / e.sum(-1, keepdims=True)
    scores, labels = prob[..., :-1].max(-1), prob[..., :-1].argmax(-1)
    cx, cy, bw, bh = np.moveaxis(boxes.astype(np.float64), -1, 0)
    xyxy = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], -1) * [w, h, w, h]
    rows = []
    for b in range(len(lg)):
        keep = np.nonzero(scores[b] > thr)[0]
        rows.append(np.concatenate([xyxy[b][keep], scores[b][keep, None], labels[b][keep, None]], 1))
    return rows, f"numpy port of transformers ({why})"


# batched_nms itself where no two scores tie; with ties (bf16 scores take few values) its own
# per-class path (torchvision.ops.nms for each class) with the kept rows ordered by score and then
# candidate index, since batched_nms's last sort is not stable and its top-K cut then keeps other
# rows of an equal score than a stable order does (seen on the CPU: 6 of 400 rows of bf16-valued
# scores differ from Sluice's, none with the tie order fixed).
NMS = r"""
import sys
import numpy as np, torch, torchvision
pred = torch.from_numpy(np.load(sys.argv[1]))
thr, iou, k = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rows, how = [], set()
for p in pred:
    p = p.T
    scores, labels = p[:, 4:].max(1)
    boxes = torchvision.ops.box_convert(p[:, :4], "cxcywh", "xyxy")
    m = scores > thr
    b, s, l = boxes[m], scores[m], labels[m]
    if len(s.unique()) == len(s):
        keep = torchvision.ops.batched_nms(b, s, l, iou)[:k]
        how.add("torchvision.ops.batched_nms")
    else:
        keep = torch.cat([torch.nonzero(l == c).flatten()[torchvision.ops.nms(b[l == c], s[l == c], iou)]
                          for c in l.unique()]) if len(s) else torch.zeros(0, dtype=torch.long)
        keep = keep[sorted(range(len(keep)), key=lambda i: (-float(s[keep[i]]), int(keep[i])))][:k]
        how.add("torchvision.ops.nms per class (tied scores by index)")
    rows.append(torch.cat([b[keep], s[keep, None], l[keep, None].float()], 1).numpy())
np.savez(sys.argv[5], *rows)
print(" + ".join(sorted(how)))
"""


def nms_reference(a, pred, thr, iou, k):
    """torchvision.ops.batched_nms over [B, 4+C, N] predictions (in this Python or --torch-python)."""
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "p.npy"), pred)
        r = subprocess.run([a.torch_python, "-c", NMS, os.path.join(d, "p.npy"), str(thr), str(iou), str(k),
                            os.path.join(d, "r.npz")], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return None, r.stderr.strip().splitlines()[-1:] or ["failed"]
        z = np.load(os.path.join(d, "r.npz"))
        return [z[f"arr_{i}"] for i in range(len(pred))], r.stdout.strip()


def iou1(p, q):
    w = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
    h = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
    u = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - w * h
    return w * h / u if u > 0 else 0.0


def compare_detections(dets, count, ref_rows, box_tol, score_tol):
    """(rows matched within the tolerances as sets, reference rows, rows agreeing at IoU >= 0.9 with
    the same class, max box and score differences over the matched rows, count mismatches)."""
    exact = agree = total = bad_count = 0
    dbox = dscore = 0.0
    for b, ref in enumerate(ref_rows):
        got = dets[b, :count[b]].astype(np.float64)
        bad_count += int(count[b] != len(ref))
        total += len(ref)
        free = list(range(len(got)))
        for row in ref:
            same = [i for i in free if got[i][5] == row[5]]
            close = [i for i in same if np.abs(got[i][:4] - row[:4]).max() <= box_tol and abs(got[i][4] - row[4]) <= score_tol]
            if close:
                i = min(close, key=lambda j: np.abs(got[j][:5] - row[:5]).max())
                exact += 1
                agree += 1
                dbox = max(dbox, float(np.abs(got[i][:4] - row[:4]).max()))
                dscore = max(dscore, abs(float(got[i][4] - row[4])))
                free.remove(i)
                continue
            best = max(same, key=lambda j: iou1(got[j], row), default=None)
            if best is not None and iou1(got[best], row) >= 0.9:
                agree += 1
                free.remove(best)
    return exact, total, agree, dbox, dscore, bad_count


# ---------------------------------------------------------------------------------- models
def calibrate_conv(model, conv, x, mean=0.0, std=1.0):
    """Rescales conv's weight and bias so its output over x has this mean and std (random weights
    otherwise leave a head's output nearly constant)."""
    import torch
    got = {}
    h = conv.register_forward_hook(lambda m, i, o: got.__setitem__("y", o.detach()))
    with torch.no_grad():
        model(x)
        h.remove()
        y = got["y"].transpose(0, 1).reshape(conv.out_channels, -1).double()
        mu, sd = y.mean(1), y.std(1).clamp_min(1e-12)
        conv.weight.mul_((std / sd).view(-1, *([1] * (conv.weight.dim() - 1))).float())
        conv.bias.copy_(((conv.bias.double() - mu) * std / sd + mean).float())


def build_detr(x):
    import torch
    import transformers as tf
    cfg = tf.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False,
                        backbone_config=tf.ResNetConfig(out_features=["stage4"]))
    m = tf.DetrForObjectDetection(cfg).eval()
    with torch.no_grad():  # scores spread over (0, 1) rather than all near 1/92
        m.class_labels_classifier.weight.mul_(10)
    return wrap(m, "logits", "pred_boxes")


def build_yolo(x, classes=80, reg_max=16):
    import torch
    import torchvision
    from torch import nn

    def conv(ci, co):  # ultralytics' Conv: convolution, batch norm, SiLU
        return nn.Sequential(nn.Conv2d(ci, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.SiLU())

    class YoloV8Like(nn.Module):
        """ResNet-50 features at strides 8, 16, 32; per level a box branch (4 x reg_max DFL bins)
        and a class branch (sigmoid scores); boxes decoded to cx, cy, w, h in input pixels around
        each cell's centre: the ultralytics v8 export's [B, 4+C, N]."""

        def __init__(self):
            super().__init__()
            r = torchvision.models.resnet50()
            self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2)
            self.l3, self.l4 = r.layer3, r.layer4
            self.box = nn.ModuleList(nn.Sequential(conv(c, 64), conv(64, 64), nn.Conv2d(64, 4 * reg_max, 1))
                                     for c in (512, 1024, 2048))
            self.cls = nn.ModuleList(nn.Sequential(conv(c, 128), conv(128, 128), nn.Conv2d(128, classes, 1))
                                     for c in (512, 1024, 2048))
            self.register_buffer("proj", torch.arange(reg_max, dtype=torch.float32).view(1, 1, reg_max, 1))

        def forward(self, x):
            f8 = self.stem(x)
            f16 = self.l3(f8)
            f32 = self.l4(f16)
            outs = []
            for f, s, box, cls in zip((f8, f16, f32), (8, 16, 32), self.box, self.cls):
                b, _, h, w = f.shape
                dist = (box(f).view(b, 4, reg_max, h * w).softmax(2) * self.proj).sum(2)  # l, t, r, b in cells
                ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                        indexing="ij")
                anchor = torch.stack([xs.reshape(-1), ys.reshape(-1)]) + 0.5  # [2, hw]
                lt, rb = dist[:, :2], dist[:, 2:]
                xy = (anchor + (rb - lt) / 2) * s
                wh = (lt + rb) * s
                outs.append(torch.cat([xy, wh, cls(f).sigmoid().view(b, classes, h * w)], 1))
            return torch.cat(outs, 2)

    m = YoloV8Like()
    # Batch-norm statistics of these photos (random init leaves them at 0 and 1), then heads whose
    # scores and box bins vary: class logits about N(-4, 1) (a tenth of the cells above 0.25, scores
    # spread over 0.25-0.6 rather than saturated near 1), DFL logits N(0, 1).
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.momentum = None
    m.train()
    with torch.no_grad():
        m(x)
    m.eval()
    for head in m.cls:
        calibrate_conv(m, head[-1], x, -4.0, 1.0)
    for head in m.box:
        calibrate_conv(m, head[-1], x, 0.0, 1.0)
    return m


def build_clip(x):
    import transformers as tf
    cfg = tf.CLIPVisionConfig(patch_size=16, image_size=224, projection_dim=512)
    return wrap(tf.CLIPVisionModelWithProjection(cfg).eval(), "image_embeds")


def build_dpt(x):
    import transformers as tf
    m = tf.DPTForDepthEstimation(tf.DPTConfig()).eval()
    w = wrap(m, "predicted_depth")
    calibrate_conv(w, m.head.head[4], x)  # the conv before the final ReLU: half the pixels pass
    return w


def wrap(model, *fields):
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            out = self.m(pixel_values=x)
            vals = tuple(getattr(out, f) for f in fields)
            return vals[0] if len(vals) == 1 else vals

    return Wrapped()


FULL = {
    "detr": dict(build=build_detr, size=(800, 800), flags=["--resize", "800x800", *SCALE, *IMAGENET], thr=0.0, k=100),
    "yolo": dict(build=build_yolo, size=(640, 640), flags=["--letterbox", "--pad-value", "114", *SCALE], thr=0.25,
                 iou=0.45, k=100),
    "clip": dict(build=build_clip, size=(224, 224), flags=["--resize", "224", "--center-crop", "224", *SCALE, *CLIP_NORM]),
    "dpt": dict(build=build_dpt, size=(384, 384), flags=["--resize", "384x384", *SCALE, *HALF]),
}
ZOO = os.path.join(ROOT, "tests", "data", "zoo")
TINY = {
    "detr": dict(file=os.path.join(ZOO, "hf_detr.torchscript.onnx"), size=(64, 64),
                 flags=["--resize", "64x64", *SCALE, *IMAGENET], thr=0.0, k=5),
    "yolo": dict(file=os.path.join(ROOT, "tests", "data", "detect", "yolo_v8.onnx"), size=(64, 64),
                 flags=["--letterbox", "--pad-value", "114", *SCALE], thr=0.5, iou=0.45, k=100),
    "clip": dict(file=os.path.join(ZOO, "hf_clip_vision.torchscript.onnx"), size=(32, 32),
                 flags=["--resize", "32", "--center-crop", "32", *SCALE, *CLIP_NORM]),
    "dpt": dict(file=os.path.join(ZOO, "hf_dpt.torchscript.onnx"), size=(32, 32), flags=["--resize", "32x32", *SCALE, *HALF]),
}


def export(a, name, spec, x):
    """The model at batch 1 as one ONNX file; x: calibration inputs (the fed tensors)."""
    if "file" in spec:
        return spec["file"]
    import onnx
    import torch
    torch.manual_seed(0)
    m = spec["build"](torch.from_numpy(x[:4])).eval()
    raw = os.path.join(a.work, f"{name}.raw", "model.onnx")
    os.makedirs(os.path.dirname(raw), exist_ok=True)
    with torch.no_grad():
        if a.exporter == "dynamo":
            torch.onnx.export(m, (torch.from_numpy(x[:1]),), raw, dynamo=True)
        else:
            torch.onnx.export(m, (torch.from_numpy(x[:1]),), raw, dynamo=False, opset_version=17)
    path = os.path.join(a.work, f"{name}.onnx")
    onnx.save(onnx.load(raw), path, save_as_external_data=False)
    shutil.rmtree(os.path.dirname(raw))
    return path


# ---------------------------------------------------------------------------------- checks
def detector_rows(a, fmt, spec, raws):
    h, w = spec["size"]
    if fmt == "detr":
        return detr_reference(raws[0], raws[1], h, w, spec["thr"])
    return nms_reference(a, raws[0], spec["thr"], spec["iou"], spec["k"])


def check_detector(a, name, spec, model, photos, keys, x):
    """Two checks per precision: the stored detections against the reference post-processing of
    the raw outputs Sluice computed in the same run (the decode and selection alone: float32
    rounding), and against the reference on onnxruntime's raw outputs within what the raw outputs
    themselves differ by (fp32), or as agreement (bf16)."""
    fmt = "detr" if name == "detr" else "yolo"
    head = ["--detection-format", fmt, "--score-threshold", spec["thr"], "--max-detections", spec["k"]]
    if fmt == "yolo":
        head += ["--iou-threshold", spec["iou"]]
    refs, onames = ort_outputs(model, x)
    h, w = spec["size"]
    ort_rows, how = detector_rows(a, fmt, spec, refs)
    lines = []
    for prec in a.precisions:
        out = os.path.join(a.work, f"{name}-{prec}")
        ips = run(a, model, photos, out, spec["flags"], "logits,detections", prec, *head)
        got_keys, (raw, dets, count) = stored(out, "logits", "detections", "detections_count")
        assert got_keys == keys, "the runs stored the photos in different orders"
        raws = [raw]
        if fmt == "detr":  # the boxes output, from a run of the same engine steps (same algorithm cache)
            out2 = os.path.join(a.work, f"{name}-{prec}-boxes")
            run(a, model, photos, out2, spec["flags"], "logits", prec, "--model-output", onames[1])
            raws.append(stored(out2, "logits")[1][0])
        if prec == a.precisions[0]:
            sluice(a, "export", out, "--what", "detections")
            with open(os.path.join(out, "export", "detections.json")) as f:
                coco = json.load(f)
            assert len(coco) == int(count.sum()), (len(coco), int(count.sum()))
            assert all(e["bbox"][2] >= 0 and e["bbox"][3] >= 0 for e in coco)
        rerr = max(rel(r, o) for r, o in zip(raws, refs))
        own_rows, own_how = detector_rows(a, fmt, spec, raws)
        if own_rows is None or ort_rows is None:
            lines.append(f"{name:5} {prec:5} raw {rerr:.2e} vs onnxruntime; detections: no torchvision here "
                         f"({count.sum()} stored), {ips:.0f} images/s")
            continue
        tight = prec in ("fp32", "tf32") or a.device == "cpu"
        # DETR's boxes output comes from a second run, whose bf16 values need not be this run's (its
        # graph and algorithm choices differ): at bf16 the rows are matched by class and score alone.
        own = compare_detections(dets, count, own_rows, 1e-3 if tight or fmt != "detr" else np.inf, 1e-5)
        if fmt == "detr":
            box_tol = float(np.abs(raws[1].astype(np.float64) - refs[1]).max()) * max(h, w) + 1e-3
            # softmax moves a probability p by at most 2 p max|d logit|
            score_tol = 2 * float(np.abs(raws[0].astype(np.float64) - refs[0]).max()) + 1e-5
        else:
            d = np.abs(raws[0].astype(np.float64) - refs[0])
            box_tol = 1.5 * float(d[:, :4].max()) + 1e-3
            score_tol = float(d[:, 4:].max()) + 1e-5
        exact, total, agree, dbox, dscore, bad = compare_detections(dets, count, ort_rows, box_tol, score_tol)
        ok_own = own[0] == own[1] and own[5] == 0
        verdict = "ok" if ok_own and (not tight or (exact == total and bad == 0)) else "MISS"
        lines.append(f"{name:5} {prec:5} {verdict}: {own[0]}/{own[1]} rows match {own_how} on Sluice's own raw outputs "
                     f"({'<= 1e-3 px' if tight or fmt != 'detr' else 'class and score'}, 1e-5; max |dbox| {own[3]:.1e} px); on onnxruntime's: {exact}/{total} within the "
                     f"raw outputs' own difference (boxes {box_tol:.2g} px, scores {score_tol:.1g}; raw max|diff|/max|ref| "
                     f"{rerr:.1e}), {agree}/{total} same class at IoU >= 0.9, counts differ on {bad}/{len(keys)} photos; "
                     f"{ips:.0f} images/s")
    return lines


def check_encoder(a, name, spec, model, photos, keys, x):
    refs, onames = ort_outputs(model, x)
    ref = refs[0][:, 0] if refs[0].ndim == 3 else refs[0]  # [B, T, D]: the first token, as the head reads it
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    lines = []
    for prec in a.precisions:
        out = os.path.join(a.work, f"{name}-{prec}")
        ips = run(a, model, photos, out, spec["flags"], "embedding", prec)
        got_keys, (emb,) = stored(out, "embedding")
        assert got_keys == keys
        if prec == a.precisions[0]:
            sluice(a, "export", out)
            npy = np.load(os.path.join(out, "export", "embeddings.npy"))
            order = open(os.path.join(out, "export", "embeddings.keys.txt")).read().splitlines()
            assert npy.dtype == np.float16 and order == keys
            assert np.abs(npy.astype(np.float32) - emb).max() <= 2.0 ** -11
        cos = (emb.astype(np.float64) * ref).sum(1) / np.linalg.norm(emb, axis=1)
        tight = prec in ("fp32", "tf32") or a.device == "cpu"
        bound = 1 - 1e-6 if tight else 0.999
        lines.append(f"{name:5} {prec:5} {'ok' if cos.min() >= bound else 'MISS'}: cosine with onnxruntime min "
                     f"{cos.min():.7f} (>= {bound}), max |diff| {np.abs(emb - ref).max():.2e}, "
                     f"export .npy float16 + keys ok, {ips:.0f} images/s")
    return lines


def check_dense(a, name, spec, model, photos, keys, x):
    from PIL import Image
    refs, onames = ort_outputs(model, x)
    ref = refs[0]
    lines = []
    for prec in a.precisions:
        out = os.path.join(a.work, f"{name}-{prec}")
        ips = run(a, model, photos, out, spec["flags"], "logits", prec)
        got_keys, (depth,) = stored(out, "logits")
        assert got_keys == keys and depth.shape == ref.shape, (depth.shape, ref.shape)
        png = "-"
        if prec == a.precisions[0]:
            sluice(a, "export", out, "--what", "dense")
            rows = [ln.split(",") for ln in open(os.path.join(out, "export", "dense_scale.csv")).read().splitlines()[1:]]
            worst = 0.0
            for (key, file, lo, hi), d in zip(rows, depth):
                lo, hi = float(lo), float(hi)
                with Image.open(os.path.join(out, "export", file)) as im:
                    back = lo + np.array(im).astype(np.float64) / 65535 * (hi - lo)
                worst = max(worst, float(np.abs(back - d).max() / max(hi - lo, 1e-30)))
            assert worst <= 0.5 / 65535 + 1e-6, worst
            png = f"{worst * 65535:.2f}/65535 of each range"
        r = rel(depth, ref)
        tight = prec in ("fp32", "tf32") or a.device == "cpu"
        bound = 1e-4 if tight else 3e-2
        lines.append(f"{name:5} {prec:5} {'ok' if r <= bound else 'MISS'}: depth max|diff|/max|ref| {r:.2e} vs "
                     f"onnxruntime (<= {bound:g}), {np.mean(ref > 0) * 100:.0f}% pixels non-zero, 16-bit PNG "
                     f"back to the map within {png}, {ips:.0f} images/s")
    return lines


def bench(a, name, spec, model, photos):
    """images/s on a larger folder (hard links to the same photos), one run per precision."""
    big = os.path.join(a.work, "bench-photos")
    if not os.path.isdir(big):
        os.makedirs(big)
        src = sorted(os.listdir(photos))
        for i in range(a.bench):
            os.link(os.path.join(photos, src[i % len(src)]), os.path.join(big, f"{i:06d}.jpg"))
    outputs = {"detr": "detections", "yolo": "detections", "clip": "embedding", "dpt": "logits"}[name]
    line = []
    for prec in a.precisions:
        out = os.path.join(a.work, f"{name}-bench-{prec}")
        ips = run(a, model, big, out, spec["flags"], outputs, prec, batch=32)
        shutil.rmtree(out)
        line.append(f"{prec} {ips:.0f}")
    return f"{name:5} throughput on {a.bench} photos, batch 32 (images/s, all ranks): " + ", ".join(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launch", default="mpirun -np 2 build/sluice", help="how to start sluice (a command line)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--only", default="detr,yolo,clip,dpt")
    ap.add_argument("--photos", type=int, default=16)
    ap.add_argument("--bench", type=int, default=0, help="also time each model on this many photos (0: no)")
    ap.add_argument("--tiny", action="store_true", help="the repository's tiny models: no torch needed")
    ap.add_argument("--exporter", default="torchscript", choices=["torchscript", "dynamo"])
    ap.add_argument("--torch-python", default=sys.executable, help="a Python with torch and torchvision (the NMS reference)")
    ap.add_argument("--work", default="", help="folder for models and runs (default: a temporary one)")
    ap.add_argument("--deadline", type=float, default=280)
    a = ap.parse_args()
    a.precisions = a.precisions.split(",") if a.device != "cpu" else ["fp32"]
    tmp = None
    if not a.work:
        tmp = tempfile.mkdtemp(prefix="sluice-fullsize-")
        a.work = tmp
    os.makedirs(a.work, exist_ok=True)
    start = time.time()
    photos = os.path.join(a.work, "photos")
    make_photos(photos, a.photos)
    specs = TINY if a.tiny else FULL
    failed = False
    summary, done = [], []
    try:
        for name in a.only.split(","):
            if time.time() - start > a.deadline:
                summary.append(f"{name:5} skipped: past the {a.deadline:.0f} s deadline")
                print(summary[-1], flush=True)
                failed = True
                continue
            t0 = time.time()
            spec = specs[name]
            try:
                keys, (x,) = fed_inputs(a, name, spec, photos)
                model = export(a, name, spec, x)
                check = {"detr": check_detector, "yolo": check_detector, "clip": check_encoder, "dpt": check_dense}[name]
                lines = check(a, name, spec, model, photos, keys, x)
                done.append((name, spec, model))
            except Exception as e:  # noqa: BLE001 - one model's failure is reported, the others still run
                lines = [f"{name:5} FAILED: {type(e).__name__}: {str(e)[-1500:]}"]
            lines[-1] += f"  [{time.time() - t0:.0f} s]"
            for ln in lines:
                print(ln, flush=True)
            summary += lines
            failed |= any(" MISS" in ln or "FAILED" in ln for ln in lines)
        for name, spec, model in done if a.bench else []:
            if time.time() - start > a.deadline:
                print(f"{name:5} throughput: skipped (deadline)")
                continue
            try:
                print(bench(a, name, spec, model, photos), flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"{name:5} throughput FAILED: {str(e)[-800:]}")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"--- {len(a.only.split(','))} models, {a.photos} photos, {a.launch}, {a.device}: "
          f"{'all ok' if not failed else 'FAILURES'} in {time.time() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
