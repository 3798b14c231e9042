"""Detector, encoder and depth model from a folder of photos to their exported files under mpirun
-np 2: `sluice run --outputs detections | embedding | logits`, then `sluice export`.  The COCO boxes
must be the stored detections taken back through the letterbox, resize or center crop to each
photo's pixels (computed here from the resize rules, not by Sluice's code), the embeddings file the stored vectors in the
keys file's order.  And a model whose outputs do not fit the detection format is refused before any
batch, on 2 and 3 ranks, with one line naming the shapes."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from support.sluice_test import ROOT, error_lines, fresh_dir, sluice

Image = pytest.importorskip("PIL.Image")

ZOO = os.path.join(ROOT, "tests", "data", "zoo")
YOLO = os.path.join(ROOT, "tests", "data", "detect", "yolo_v8.onnx")
SIZES = [(80, 60), (50, 120), (64, 64), (130, 70), (33, 47)]  # (width, height)
TIMEOUT = 180


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    d = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(3)
    for i, (w, h) in enumerate(SIZES):
        small = (rng.random((max(h // 8, 1), max(w // 8, 1), 3)) * 255).astype(np.uint8)
        Image.fromarray(small).resize((w, h), Image.BILINEAR).save(d / f"{100 + i:012d}.jpg", quality=95)
    return str(d)


def stored(run, *names):
    with h5py.File(os.path.join(run, "outputs.h5")) as f:
        keys = [k.decode() if isinstance(k, bytes) else str(k) for k in f["sample_key"][:]]
        return keys, [f["outputs"][n][:] for n in names]


GEOMETRY = {"letterbox": ["--letterbox"], "exact": ["--resize", "64x64"],
            "crop": ["--resize", "72", "--center-crop", "64"]}


def back_to_photo(box, w, h, geometry, size=64):
    """Input pixels of a (size x size) model input to the photo's pixels, from torchvision's and
    the letterbox's rules: the resized photo (rw x rh) and where the input starts in it (ox, oy)."""
    if geometry == "letterbox":
        if w <= h:
            rh, rw = size, (2 * w * size + h) // (2 * h)
        else:
            rw, rh = size, (2 * h * size + w) // (2 * w)
        ox, oy = -((size - rw) // 2), -((size - rh) // 2)
    elif geometry == "exact":
        rw, rh, ox, oy = size, size, 0, 0
    else:  # shorter side to 72 (int(S * long / short)), then the centre 64 x 64 (round half to even)
        rh, rw = (72, 72 * w // h) if h <= w else (72 * h // w, 72)
        ox, oy = round((rw - size) / 2), round((rh - size) / 2)
    x1, y1, x2, y2 = box
    sx, sy = w / rw, h / rh
    return [min(max((x1 + ox) * sx, 0), w), min(max((y1 + oy) * sy, 0), h),
            min(max((x2 + ox) * sx, 0), w), min(max((y2 + oy) * sy, 0), h)]


@pytest.mark.parametrize("geometry", list(GEOMETRY))
def test_detections_from_photos_to_coco_json_and_csv(photos, geometry, tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--model", YOLO, "--input", photos, *GEOMETRY[geometry], "--scale", 1 / 255, "--outputs", "detections",
           "--detection-format", "yolo", "--score-threshold", 0.5, "--batch-size", 2, "--device", "cpu",
           "--cpu-threads", 1, "--output", run, "--quiet", np_=2, check=True, timeout=TIMEOUT)
    labels = tmp_path / "labels.txt"
    labels.write_text("1 person\n3 car\n18 dog\n")
    p = sluice("export", run, "--what", "detections", "--labels", labels, "--draw", np_=2, check=True, timeout=TIMEOUT)
    assert p.stdout.count("files written") == 1, p.stdout  # rank 0 alone
    keys, (dets, count) = stored(run, "detections", "detections_count")
    assert dets.shape == (len(SIZES), 100, 6) and count.sum() > 0
    with open(os.path.join(run, "export", "detections.json")) as f:
        coco = json.load(f)
    assert len(coco) == count.sum()
    by_file = {}
    for e in coco:
        by_file.setdefault(e["file_name"], []).append(e)
    category = {0: 1, 1: 3, 2: 18}
    for key, d, n in zip(keys, dets, count):
        w, h = SIZES[int(os.path.basename(key)[:12]) - 100]
        got = by_file.get(key, [])
        assert len(got) == n, key
        for e, row in zip(got, d[:n]):
            assert e["image_id"] == int(os.path.basename(key)[:12])
            assert e["category_id"] == category[int(row[5])]
            assert e["score"] == pytest.approx(float(row[4]), abs=1e-6)
            x1, y1, x2, y2 = back_to_photo(row[:4].astype(np.float64), w, h, geometry)
            np.testing.assert_allclose(e["bbox"], [x1, y1, x2 - x1, y2 - y1], atol=1e-3)
        # The preview: the photo at its size, the last (lowest-scored, drawn last) box's corner in
        # its class's VOC colour (class c: palette entry c + 1).
        with Image.open(os.path.join(run, "export", "draw", os.path.splitext(key)[0] + ".png")) as im:
            assert im.mode == "RGB" and im.size == (w, h)
            if n:
                x, y = (min(int(np.floor(v)), lim - 1) for v, lim in zip(got[-1]["bbox"][:2], (w, h)))
                colour = {0: (128, 0, 0), 1: (0, 128, 0), 2: (128, 128, 0)}[int(d[n - 1][5])]
                assert im.getpixel((x, y)) == colour, (key, x, y)
    lines = open(os.path.join(run, "export", "detections.csv")).read().splitlines()
    assert lines[0] == "key,category_id,label,score,x1,y1,x2,y2" and len(lines) == 1 + count.sum()
    assert {ln.split(",")[2] for ln in lines[1:]} <= {"person", "car", "dog"}


def test_embeddings_from_photos_to_one_float16_npy_and_keys(photos, tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--model", os.path.join(ZOO, "hf_clip_vision.torchscript.onnx"), "--input", photos, "--resize",
           "32x32", "--scale", 1 / 255, "--outputs", "embedding", "--batch-size", 2, "--device", "cpu",
           "--cpu-threads", 1, "--output", run, "--quiet", np_=2, check=True, timeout=TIMEOUT)
    sluice("export", run, np_=2, check=True, timeout=TIMEOUT)  # auto: embeddings
    keys, (emb,) = stored(run, "embedding")
    got = np.load(os.path.join(run, "export", "embeddings.npy"))
    assert got.dtype == np.float16 and got.shape == emb.shape == (len(SIZES), 32)
    order = open(os.path.join(run, "export", "embeddings.keys.txt")).read().splitlines()
    assert order == keys
    np.testing.assert_allclose(got.astype(np.float32), emb, atol=2.0 ** -11)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "emb.parquet"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "export_parquet.py"), run, "--out", str(out)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    table = pq.read_table(out).to_pydict()
    assert table["key"] == keys
    np.testing.assert_array_equal(np.array(table["embedding"], np.float32), emb)


def test_depth_maps_from_photos_to_npy_and_16_bit_png(photos, tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--model", os.path.join(ZOO, "hf_dpt.torchscript.onnx"), "--input", photos, "--resize", "32x32",
           "--scale", 1 / 255, "--outputs", "logits", "--batch-size", 2, "--device", "cpu", "--cpu-threads", 1,
           "--output", run, "--quiet", np_=2, check=True, timeout=TIMEOUT)
    sluice("export", run, "--what", "logits", np_=2, check=True, timeout=TIMEOUT)
    keys, (depth,) = stored(run, "logits")
    assert depth.shape == (len(SIZES), 64, 64)  # DPT upsamples its 32 x 32 input x2
    for key, d in zip(keys, depth):
        np.testing.assert_array_equal(np.load(os.path.join(run, "export", os.path.splitext(key)[0] + ".npy")), d)
    # 16-bit PNGs, each map over its own range, the range in dense_scale.csv.
    sluice("export", run, "--what", "dense", "--out", tmp_path / "png", np_=2, check=True, timeout=TIMEOUT)
    rows = [ln.split(",") for ln in open(tmp_path / "png" / "dense_scale.csv").read().splitlines()]
    assert rows[0] == ["key", "file", "min", "max"] and [r[0] for r in rows[1:]] == keys
    for (key, file, lo, hi), d in zip(rows[1:], depth):
        lo, hi = float(lo), float(hi)
        assert lo == d.min() and hi == d.max()
        with Image.open(tmp_path / "png" / file) as im:
            assert im.mode.startswith("I") and im.size == (64, 64)
            px = np.array(im).astype(np.float64)
        back = lo + px / 65535 * (hi - lo)
        assert np.abs(back - d).max() <= (hi - lo) / 65535 * 0.5 + 1e-6 * max(abs(lo), abs(hi))


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_classifier_asked_for_detections_is_refused_on_every_rank(ranks, tmp_path):
    p = sluice("run", "--model", os.path.join(ROOT, "jobs", "models", "quickstart.onnx"), "--samples", 16,
               "--outputs", "detections", "--detection-format", "detr", "--device", "cpu", "--cpu-threads", 1,
               "--output", tmp_path / "out", "--quiet", np_=ranks, timeout=TIMEOUT)
    assert p.returncode == 3, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1, p.stderr
    assert "[B, Q, C+1]" in lines[0] and "[32,8,64,64]" in lines[0], lines[0]
    assert not os.path.exists(tmp_path / "out" / "outputs.h5")


def test_a_resume_with_another_score_threshold_is_refused(photos, tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    job = ["--model", YOLO, "--input", photos, "--letterbox", "--outputs", "detections", "--batch-size", 2, "--device",
           "cpu", "--cpu-threads", 1, "--output", run, "--quiet"]
    sluice("run", *job, "--score-threshold", 0.5, np_=2, check=True, timeout=TIMEOUT)
    p = sluice("run", *job, "--score-threshold", 0.6, "--resume", np_=2, timeout=TIMEOUT)
    assert p.returncode == 3, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "score-threshold = 0.5" in lines[0] and "0.6" in lines[0], p.stderr


def test_draw_without_a_photo_folder_is_refused_before_anything_is_written(tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((4, 3, 64, 64), dtype=np.float32))
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--model", YOLO, "--input", tmp_path / "x.npy", "--outputs", "detections", "--device", "cpu",
           "--cpu-threads", 1, "--output", run, "--quiet", np_=2, check=True, timeout=TIMEOUT)
    p = sluice("export", run, "--draw", np_=2, timeout=TIMEOUT)
    assert p.returncode == 3, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "--draw" in lines[0] and "not a folder" in lines[0], p.stderr
    assert not os.path.exists(os.path.join(run, "export", "detections.json"))


def test_a_failed_detection_run_resumes_to_the_rows_of_an_unbroken_one(tmp_path):
    rng = np.random.default_rng(1)
    x = (np.kron(rng.random((16, 3, 8, 8)), np.ones((8, 8))) + 0.02 * rng.random((16, 3, 64, 64))).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    job = ["--model", YOLO, "--input", tmp_path / "x.npy", "--outputs", "detections", "--score-threshold", 0.55,
           "--batch-size", 2, "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, "--quiet"]
    whole, broken = str(tmp_path / "whole"), str(tmp_path / "broken")
    sluice("run", *job, "--output", whole, np_=2, check=True, timeout=TIMEOUT)
    p = sluice("run", *job, "--output", broken, "--fail-ranks", 1, "--fail-at-batch", 2, np_=2, timeout=TIMEOUT)
    assert p.returncode != 0 and not os.path.exists(os.path.join(broken, "outputs.h5")), p.stderr
    sluice("run", "--resume", "--output", broken, "--quiet", np_=2, check=True, timeout=TIMEOUT)
    _, (d0, c0) = stored(whole, "detections", "detections_count")
    _, (d1, c1) = stored(broken, "detections", "detections_count")
    assert c0.sum() > 0
    np.testing.assert_array_equal(c0, c1)
    np.testing.assert_array_equal(d0, d1)


def resized_size_and_offset(w, h, geometry, size):
    """The resized photo (rw x rh) and where the model input starts in it (ox, oy), by the
    letterbox's rule and torchvision's (shorter side to size * 9 / 8, then the centre size x size)."""
    if geometry == "letterbox":
        if w <= h:
            rh, rw = size, (2 * w * size + h) // (2 * h)
        else:
            rw, rh = size, (2 * h * size + w) // (2 * w)
        return rw, rh, -((size - rw) // 2), -((size - rh) // 2)
    if geometry == "exact":
        return size, size, 0, 0
    short = size * 9 // 8
    rh, rw = (short, short * w // h) if h <= w else (short * h // w, short)
    return rw, rh, round((rw - size) / 2), round((rh - size) / 2)


@pytest.mark.parametrize("geometry", ["exact", "letterbox", "crop"])
def test_depth_maps_at_the_photos_size_undo_the_resize_the_letterbox_and_the_crop(photos, geometry, tmp_path):
    # The tiny DPT maps its 32 x 32 input to 64 x 64.  The reference, with PIL's NEAREST throughout
    # (mode F): the map to the input's size, each input pixel to its place in the resized photo
    # (letterbox padding dropped, what the crop cut off NaN), that to the photo's size.
    size = 32
    flags = {"exact": ["--resize", "32x32"], "letterbox": ["--letterbox"],
             "crop": ["--resize", size * 9 // 8, "--center-crop", size]}[geometry]
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--model", os.path.join(ZOO, "hf_dpt.torchscript.onnx"), "--input", photos, *flags,
           "--scale", 1 / 255, "--outputs", "logits", "--batch-size", 2, "--device", "cpu", "--cpu-threads", 1,
           "--output", run, "--quiet", np_=2, check=True, timeout=TIMEOUT)
    out = tmp_path / "png"
    sluice("export", run, "--what", "dense", "--original-size", "--out", out, np_=2, check=True, timeout=TIMEOUT)
    keys, (depth,) = stored(run, "logits")
    rows = [ln.split(",") for ln in open(out / "dense_scale.csv").read().splitlines()[1:]]
    assert [r[0] for r in rows] == keys
    for (key, file, lo, hi), d in zip(rows, depth):
        w, h = SIZES[int(os.path.basename(key)[:12]) - 100]
        rw, rh, ox, oy = resized_size_and_offset(w, h, geometry, size)
        if (rw, rh, ox, oy) == (size, size, 0, 0):  # a plain resize (a square photo letterboxed too): one step
            ref = np.array(Image.fromarray(d).resize((w, h), Image.NEAREST))
        else:
            at_input = np.array(Image.fromarray(d).resize((size, size), Image.NEAREST))
            canvas = np.full((rh, rw), np.nan, np.float32)
            for y in range(rh):
                for x in range(rw):
                    iy, ix = y - oy, x - ox
                    if 0 <= iy < size and 0 <= ix < size:
                        canvas[y, x] = at_input[iy, ix]
            ref = np.array(Image.fromarray(canvas).resize((w, h), Image.NEAREST))
        assert bool(np.isnan(ref).any()) == (geometry == "crop"), key  # only a crop cuts pixels off
        lo, hi = float(np.float32(lo)), float(np.float32(hi))  # the table's shortest text of each float32
        assert lo == np.nanmin(ref) and hi == np.nanmax(ref), (key, lo, hi)
        with Image.open(out / file) as im:
            assert im.size == (w, h)
            px = np.array(im).astype(np.float64)
        want = np.where(np.isnan(ref), 0, np.floor((ref.astype(np.float64) - lo) / (hi - lo) * 65535 + 0.5))  # lround
        np.testing.assert_array_equal(px, want, err_msg=key)
