"""`sluice export --what detections | embeddings`: the files other tools read.  detections.json is
always JSON (a detection with a NaN or infinite value is left out, and a warning counts it), its
image ids are unique within the file and images.json beside it lists those images (id, file name,
original size) so that pycocotools' COCO().loadRes reads the results with no hand-made ground
truth; embeddings.keys.txt has one line per vector whatever the keys hold; float16 vectors refuse
values float16 cannot hold (--dtype float32 writes them as stored) and warn of those that become 0.

As in test_export.py, outputs.h5 is written with h5py in the run format (docs/file-formats.md) and
the real binary exports it.
"""
import csv
import io
import json
import math
import os
import re
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_export import manifest, sluice  # noqa: E402

# How each photo became the 64 x 64 model input (export/geometry.h): a plain resize.
GEOMETRY = json.dumps({"mode": "exact", "resize_short": 0, "resize_h": 64, "resize_w": 64, "crop_h": 0, "crop_w": 0,
                       "out_h": 64, "out_w": 64})


def det_run(folder, keys, dets, sizes, status=None, k=4):
    """A run folder whose outputs.h5 holds detections: dets[i] is sample i's rows (x1, y1, x2, y2,
    score, class) in model-input pixels; sizes[i] its photo's (height, width)."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(keys)
    rows = np.zeros((n, k, 6), np.float32)
    count = np.zeros(n, np.int32)
    for i, d in enumerate(dets):
        rows[i, :len(d)] = np.array(d, np.float32).reshape(-1, 6)
        count[i] = len(d)
    with h5py.File(folder / "outputs.h5", "w") as f:
        f["outputs/detections"] = rows
        f["outputs/detections_count"] = count
        f["sample_index"] = np.arange(n, dtype=np.int64)
        f["sample_key"] = np.array(keys, dtype=f"S{max(len(x) for x in keys)}")
        f["sample_status"] = np.zeros(n, np.uint8) if status is None else np.array(status, np.uint8)
        f["sample_size"] = np.array(sizes, np.int32)
        f.attrs["preprocess"] = GEOMETRY
    return folder


def emb_run(folder, keys, vectors, status=None):
    folder.mkdir(parents=True, exist_ok=True)
    n = len(keys)
    with h5py.File(folder / "outputs.h5", "w") as f:
        f["outputs/embedding"] = np.array(vectors, np.float32)
        f["sample_index"] = np.arange(n, dtype=np.int64)
        f["sample_key"] = np.array(keys, dtype=f"S{max(len(x) for x in keys)}")
        f["sample_status"] = np.zeros(n, np.uint8) if status is None else np.array(status, np.uint8)
    return folder


def coco_loads(out):
    """pycocotools reads the results against the export's own images.json (when installed)."""
    coco = pytest.importorskip("pycocotools.coco")
    gt = coco.COCO(str(out / "images.json"))
    return gt, gt.loadRes(str(out / "detections.json"))


# ---- 6: not-finite values -----------------------------------------------------------------------

def test_detections_with_values_that_are_not_finite_are_left_out_and_counted(tmp_path):
    nan, inf = float("nan"), float("inf")
    keys = [b"000000000007.jpg", b"000000000008.jpg", b"000000000009.jpg"]
    dets = [[[nan, 8, nan, 4, 0.9, 1], [1, 2, 30, 40, 0.8, 2]],
            [[4, 4, 20, 20, inf, 0], [2, 2, 9, 9, 0.5, 1]],
            [[1, 2, 3, -inf, 0.7, 0], [1, 2, 3, 4, 0.6, nan]]]
    run = det_run(tmp_path / "run", keys, dets, sizes=[[64, 64], [32, 128], [64, 64]])
    r = sluice("export", run)
    out = run / "export"
    text = (out / "detections.json").read_text()
    assert not re.search(r"nan|inf", text, re.I), text
    got = json.loads(text)  # strict JSON
    assert [(e["image_id"], e["category_id"], e["score"]) for e in got] == [(7, 2, pytest.approx(0.8)),
                                                                           (8, 1, pytest.approx(0.5))]
    assert got[0]["bbox"] == [1, 2, 29, 38]
    assert got[1]["bbox"] == [4, 1, 14, 3.5]  # x * 128/64, y * 32/64
    rows = list(csv.reader(io.StringIO((out / "detections.csv").read_text())))
    assert len(rows) == 3 and all(math.isfinite(float(v)) for row in rows[1:] for v in row[3:]), rows
    warning = [ln for ln in r.stderr.splitlines() if ln.startswith("export: warning:")]
    assert len(warning) == 1, r.stderr
    assert "4 detection(s)" in warning[0] and "'000000000007.jpg' (row 0, detection 0" in warning[0], warning
    assert "left out of detections.json and detections.csv" in warning[0], warning
    _, res = coco_loads(out)
    assert len(res.anns) == 2


def test_a_preview_skips_a_box_that_is_not_finite(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (64, 64), (10, 20, 30)).save(photos / "1.png")
    run = det_run(tmp_path / "run", [b"1.png"], [[[float("nan"), 0, 60, 60, 0.9, 0], [8, 8, 16, 16, 0.8, 0]]],
                  sizes=[[64, 64]])
    (run / "report.json").write_text(json.dumps({"job_toml": f'input = "{photos}"\n'}))
    sluice("export", run, "--draw")
    with Image.open(run / "export" / "draw" / "1.png") as im:
        assert im.getpixel((8, 8)) == (128, 0, 0) and im.getpixel((0, 30)) == (10, 20, 30)


def label_ink(im, x0, y0, x1, y1, background):
    """The pixels of the rectangle [x0, x1) x [y0, y1) that are not `background`, as {(x, y): rgb}."""
    return {(x, y): im.getpixel((x, y)) for y in range(y0, y1) for x in range(x0, x1)
            if im.getpixel((x, y)) != background}


def test_a_previews_boxes_carry_their_class_name_and_score(tmp_path):
    """Issue 38, item 3: each box of a preview has its label written on it, the class's name from
    --labels (else its id) and the score, in white on the box's colour, above the box (or inside it
    below the outline where there is no room), in Sluice's 5 x 7 font one column apart."""
    Image = pytest.importorskip("PIL.Image")
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (128, 128), (10, 20, 30)).save(photos / "1.png")
    # Model-input pixels (64 x 64, a plain resize): the photo's are twice these.
    dets = [[5, 20, 40, 50, 0.87, 1], [35, 20, 60, 50, 0.87, 1], [2, 1, 20, 15, 0.5, 0]]
    labels = tmp_path / "labels.txt"
    labels.write_text("person\ncat\n")
    green, red, white = (0, 128, 0), (128, 0, 0), (255, 255, 255)
    band = 9  # 7 rows of glyph and a margin of 1 above and below (scale 1 below 400 pixels)

    def preview(name, *extra):
        run = det_run(tmp_path / name, [b"1.png"], [dets], sizes=[[128, 128]])
        (run / "report.json").write_text(json.dumps({"job_toml": f'input = "{photos}"\n'}))
        sluice("export", run, "--draw", *extra)
        im = Image.open(run / "export" / "draw" / "1.png")
        assert im.mode == "RGB" and im.size == (128, 128)
        return im.convert("RGB")

    im = preview("cat", "--labels", labels)
    width = lambda n: 6 * n - 1 + 2  # noqa: E731: n characters
    # "CAT 0.87" above the first box (its top-left corner at (10, 40)): the band is the box's colour
    # with white letters, the letters' extent that of 8 characters.
    ink = label_ink(im, 10, 40 - band, 10 + width(8), 40, green)
    assert ink and set(ink.values()) == {white}, set(ink.values())
    xs = [x for x, _ in ink]
    ys = [y for _, y in ink]
    assert min(xs) == 11 and max(xs) == 11 + 6 * 7 + 4, (min(xs), max(xs))  # C's left stem to 7's right end
    assert min(ys) == 40 - band + 1 and max(ys) == 40 - 2, (min(ys), max(ys))
    assert im.getpixel((10 + width(8), 40 - band)) == (10, 20, 30)  # nothing past the label
    assert im.getpixel((10, 40)) == green  # the box's corner is the box's
    # The same label on the second box is the same pixels, shifted.
    second = label_ink(im, 70, 40 - band, 70 + width(8), 40, green)
    assert {(x - 60, y): v for (x, y), v in second.items()} == ink
    # No room above the third box (top at y = 2): "PERSON 0.50" inside it, below the 2-pixel outline.
    assert im.getpixel((4, 2)) == red and im.getpixel((4, 3)) == red
    inside = label_ink(im, 4, 4, 4 + width(11), 4 + band, red)
    assert inside and set(inside.values()) == {white}
    assert max(x for x, _ in inside) == 5 + 6 * 10 + 4  # "0" ends the 11 characters

    # Without --labels the class id stands for the name: "1 0.87", 6 characters; another name,
    # other letters.
    plain = preview("ids")
    ink_id = label_ink(plain, 10, 40 - band, 10 + width(6), 40, green)
    assert set(ink_id.values()) == {white} and max(x for x, _ in ink_id) == 11 + 6 * 5 + 4
    assert plain.getpixel((10 + width(6), 40 - band)) == (10, 20, 30)
    labels.write_text("person\ndog\n")
    dog = preview("dog", "--labels", labels)
    assert label_ink(dog, 10, 40 - band, 10 + width(8), 40, green) != ink


# ---- 7: unique image ids, and the images they name ----------------------------------------------

@pytest.mark.parametrize("keys,numbers", [
    ([b"cam1/000001.jpg", b"cam2/000001.jpg", b"cam2/000002.jpg"], False),  # two photos numbered 1
    ([b"2", b"x.jpg", b"c", b"7.png"], False),                             # "2" (row 0) and "c" (row 2)
    ([b"000000397133.jpg", b"a/000000000139.jpg", b"17.png"], True),       # COCO's own: the numbers
])
def test_image_ids_are_unique_and_images_json_lets_coco_load_the_results(tmp_path, keys, numbers):
    n = len(keys)
    sizes = [[40 + i, 100 + 3 * i] for i in range(n)]
    dets = [[[1, 2, 10 + i, 20, 0.9 - 0.1 * i, i % 2]] for i in range(n)]
    run = det_run(tmp_path / "run", keys, dets, sizes)
    r = sluice("export", run)
    out = run / "export"
    results = json.loads((out / "detections.json").read_text())
    images = json.loads((out / "images.json").read_text())
    assert images["annotations"] == []
    assert [c["id"] for c in images["categories"]] == [0, 1]
    ids = [im["id"] for im in images["images"]]
    assert len(set(ids)) == n, ids
    want_ids = [int(os.path.basename(k.decode()).split(".")[0]) for k in keys] if numbers else list(range(n))
    assert ids == want_ids
    assert [im["file_name"] for im in images["images"]] == [k.decode() for k in keys]
    assert [[im["height"], im["width"]] for im in images["images"]] == sizes
    by_id = {im["id"]: im["file_name"] for im in images["images"]}
    assert [by_id[e["image_id"]] for e in results] == [e["file_name"] for e in results] == [k.decode() for k in keys]
    assert ("image_id is each sample's index" in r.stdout) == (not numbers), r.stdout
    gt, res = coco_loads(out)
    assert sorted(gt.getImgIds()) == sorted(ids)
    assert {res.imgs[a["image_id"]]["file_name"] for a in res.anns.values()} == {k.decode() for k in keys}


def test_images_json_holds_the_good_samples_and_the_labels_categories(tmp_path):
    keys = [b"1.jpg", b"2.jpg", b"3.jpg"]
    run = det_run(tmp_path / "run", keys, [[[0, 0, 5, 5, 0.9, 1]], [], [[0, 0, 5, 5, 0.9, 0]]],
                  sizes=[[10, 20], [0, 0], [30, 40]], status=[0, 1, 0])
    labels = tmp_path / "labels.txt"
    labels.write_text("1 person\n3 car\n")
    sluice("export", run, "--labels", labels)
    images = json.loads((run / "export" / "images.json").read_text())
    assert images["images"] == [{"id": 1, "file_name": "1.jpg", "width": 20, "height": 10},
                                {"id": 3, "file_name": "3.jpg", "width": 40, "height": 30}]
    assert images["categories"] == [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
    assert "images.json" in {e["file"] for e in manifest(run / "export") if "file" in e}


# ---- 8: keys that hold a newline ----------------------------------------------------------------

def unescape(line):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r", "\\": "\\"}[m[1]], line)


def test_embedding_keys_with_newlines_stay_one_line_per_vector(tmp_path):
    keys = [b"a\nb.jpg", b"back\\slash\\n.jpg", b"plain.jpg", b"cr\r.jpg", b"last.jpg"]
    vectors = np.arange(20, dtype=np.float32).reshape(5, 4) / 8
    run = emb_run(tmp_path / "run", keys, vectors, status=[0, 0, 0, 0, 1])
    r = sluice("export", run)
    out = run / "export"
    emb = np.load(out / "embeddings.npy")
    raw = (out / "embeddings.keys.txt").read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.decode().split("\n")[:-1]
    assert len(lines) == len(emb) == 4, lines
    assert lines[2] == "plain.jpg"
    assert [unescape(ln) for ln in lines] == [k.decode() for k in keys[:4]]
    assert np.array_equal(emb.astype(np.float32), vectors[:4])
    assert "3 key(s) hold a backslash, newline or carriage return, as 'a\\nb.jpg' (row 0)" in r.stdout, r.stdout
    assert len(r.stdout.splitlines()) == 2, r.stdout  # the summary and the note, each one line


# ---- 10: float16 range, --dtype float32 ---------------------------------------------------------

def test_float16_embeddings_refuse_values_beyond_its_range_and_float32_writes_them(tmp_path):
    keys = [b"ok.jpg", b"big.jpg", b"tiny.jpg"]
    vectors = np.array([[0.5, -0.25, 0, 1], [1e5, 2e5, 0, 0], [1e-8, 1, 0, 0]], np.float32)
    run = emb_run(tmp_path / "run", keys, vectors)
    out = run / "export"
    r = sluice("export", run, check=False)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "'big.jpg' (row 1)" in err[0] and "100000" in err[0] and "--dtype float32" in err[0], err
    assert not (out / "embeddings.npy").exists() and not (out / "embeddings.keys.txt").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".sluice-partial")]
    r = sluice("export", run, "--dtype", "float32")
    got = np.load(out / "embeddings.npy")
    assert got.dtype == np.float32 and np.array_equal(got, vectors)
    assert (out / "embeddings.keys.txt").read_text().splitlines() == [k.decode() for k in keys]
    assert "warning" not in r.stderr, r.stderr
    # float16 again (its own header: the file is rewritten) without the big row: 1e-8 becomes 0, said.
    run2 = emb_run(tmp_path / "run2", keys, vectors, status=[0, 1, 0])
    r = sluice("export", run2)
    got = np.load(run2 / "export" / "embeddings.npy")
    assert got.dtype == np.float16 and got[1, 0] == 0 and np.array_equal(got, vectors[[0, 2]].astype(np.float16))
    warning = [ln for ln in r.stderr.splitlines() if ln.startswith("export: warning:")]
    assert len(warning) == 1 and "1 nonzero embedding value(s)" in warning[0] and "'tiny.jpg' (row 2" in warning[0] \
        and "--dtype float32" in warning[0], r.stderr


def test_dtype_is_for_embeddings_and_a_changed_dtype_rewrites_the_file(tmp_path):
    vectors = np.array([[0.5, 0.25], [1, 2]], np.float32)
    run = emb_run(tmp_path / "run", [b"a", b"b"], vectors)
    sluice("export", run)
    assert np.load(run / "export" / "embeddings.npy").dtype == np.float16
    r = sluice("export", run, "--dtype", "float32")
    assert "2 files written" in r.stdout, r.stdout
    assert np.load(run / "export" / "embeddings.npy").dtype == np.float32
    r = sluice("export", det_run(tmp_path / "det", [b"1.jpg"], [[]], [[5, 5]]), "--dtype", "float32", check=False)
    assert r.returncode == 2 and "--dtype applies to embeddings only" in r.stderr, r.stderr
