"""--resize-shortest N --max-size M (DETR's and YOLOS's image processors) through `sluice run`, against
a reference computed here: the size from the processors' rule, re-derived below from what their
docs say (the shortest edge to N unless the longest would then pass M; then the longest to M, the
shortest in proportion), the image resized to it by PIL (what transformers' processors call, bilinear
by default), placed top left and padded bottom and right to the one batch shape, as the processors
pad a batch to its largest image.  Within one uint8 level; the padding exact.

The models are identities (test_interpolation.py's), so the stored logits are the model input."""
import json
import os

import h5py
import numpy as np
import pytest
from PIL import Image

from support.sluice_test import fresh_dir, sluice
from make_image_dataset import picture
from test_images import identity_model
from test_interpolation import float_identity

# Small stand-ins for DETR's 800 / 1333: N = 48, M = 80.  Landscape and portrait 4:3, a 3:2, a strip
# that the longest edge caps, one whose capped shortest edge is a tie (80 * 30 / 60 = 40.0; 80 * 45 /
# 120 = 30.0 ...), one that already has its size, and small ones that are enlarged.
N, M = 48, 80
SHAPES = [(75, 100), (100, 75), (60, 90), (30, 200), (45, 120), (48, 64), (24, 30), (33, 17), (96, 96), (250, 81)]


def detr_size(h, w, n, m, multiple=0):
    """(height, width) of an h x w image: transformers' DETR rule (get_size_with_aspect_ratio), and with
    `multiple` YOLOS's (the portrait test first, sides rounded down to multiples)."""
    raw = None
    if m:
        short, long = float(min(h, w)), float(max(h, w))
        if long / short * n > m:  # the longest edge would pass M: it gets M, the shortest in proportion
            raw = m * short / long
            n = int(round(raw))  # Python's round, as theirs: halves to even
    keeps = (h <= w and h == n) or (w <= h and w == n)
    def scaled(a, b):
        return int(raw * a / b) if raw is not None else int(n * a / b)
    if multiple:
        if w < h:
            oh, ow = scaled(h, w), n
        elif keeps:
            oh, ow = h, w
        else:
            oh, ow = n, scaled(w, h)
        oh, ow = oh - oh % multiple, ow - ow % multiple
    elif keeps:
        oh, ow = h, w
    elif w < h:
        oh, ow = scaled(h, w), n
    else:
        oh, ow = n, scaled(w, h)
    return max(oh, 1), max(ow, 1)


def test_the_rule_as_the_processors_document_it():
    # The docstring's examples, at DETR's own sizes: a 480x640 photo goes to 800x1066; a strip of
    # 500x2000 is capped at the longest edge 1333; a 1000x2000 one's shortest edge, 666.5, rounds to even.
    assert detr_size(480, 640, 800, 1333) == (800, 1066)
    assert detr_size(640, 480, 800, 1333) == (1066, 800)
    assert detr_size(500, 2000, 800, 1333) == (333, 1333)
    assert detr_size(1000, 2000, 800, 1333) == (666, 1333)
    assert detr_size(480, 640, 512, 1333, 16) == (512, 672)


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    d = tmp_path_factory.mktemp("shortest")
    for i, (h, w) in enumerate(SHAPES):
        picture(5, i, w, h, 0.0, False).resize((w, h)).save(d / f"{i:02d}-{h}x{w}.png")
    return str(d), {p: Image.open(d / p).convert("RGB") for p in sorted(os.listdir(d))}


def run(folder, out, model, *options, check=True):
    return sluice("run", "--input", folder, "--model", model, "--output", fresh_dir(out), "--outputs", "logits",
                  "--batch-size", 4, "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, *options,
                  check=check, timeout=120)


def stored(out):
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() if isinstance(k, bytes) else k for k in f["sample_key"][:]]
        status = f["sample_status"][:]
        bad = {keys[r["index"]]: r["reason"].decode().rstrip("\0") for r in f["bad_samples"][:]}
        return dict(zip(keys, f["outputs/logits"][:])), dict(zip(keys, status)), bad


def padded(img, canvas, pad, multiple=0):
    """PIL's resize to the rule's size, then the processor's pad: bottom and right, to `canvas`."""
    h, w = detr_size(img.height, img.width, N, M, multiple)
    x = np.asarray(img.resize((w, h), Image.BILINEAR)).transpose(2, 0, 1).astype(np.float64)
    out = np.empty((3, *canvas))
    out[:] = np.array(pad, np.float64)[:, None, None]
    out[:, :h, :w] = x
    return out, (h, w)


def test_resized_as_pil_at_the_rules_size_and_padded_bottom_right(pngs, tmp_path):
    folder, images = pngs
    # A dynamic height and width: every image is padded to M x M (the largest the rule gives).
    model = identity_model(str(tmp_path / "dyn.onnx"), None, None)
    out = str(tmp_path / "dyn")
    p = run(folder, out, model, "--resize-shortest", N, "--max-size", M, "--pad-value", 7)
    assert "resize the shortest edge to 48 unless the longest would pass 80" in p.stderr, p.stderr
    got, status, _ = stored(out)
    worst = 0
    for k, img in images.items():
        want, (h, w) = padded(img, (M, M), (7, 7, 7))
        assert got[k].shape == (3, M, M) and status[k] == 0, k
        assert np.array_equal(got[k][:, h:, :], want[:, h:, :]) and np.array_equal(got[k][:, :, w:], want[:, :, w:]), k
        worst = max(worst, np.abs(got[k] - want).max())
    print(f"--resize-shortest {N} --max-size {M} vs PIL BILINEAR at the rule's size: max |diff| {worst}")
    assert worst <= 1


def test_a_fixed_model_takes_what_fits_and_the_rest_are_bad_samples(pngs, tmp_path):
    folder, images = pngs
    # A model exported at a 4:3 landscape photo's size: portrait images come out taller than it.
    model = identity_model(str(tmp_path / "fixed.onnx"), 48, 64)
    out = str(tmp_path / "fixed")
    run(folder, out, model, "--resize-shortest", N, "--max-size", M, "--interpolation", "bicubic")
    got, status, bad = stored(out)
    for k, img in images.items():
        h, w = detr_size(img.height, img.width, N, M)
        if h <= 48 and w <= 64:
            small = np.asarray(img.resize((w, h), Image.BICUBIC)).transpose(2, 0, 1).astype(np.float64)
            assert status[k] == 0 and np.abs(got[k][:, :h, :w] - small).max() <= 1, k
            assert not got[k][:, h:, :].any() and not got[k][:, :, w:].any(), k
        else:
            assert status[k] == 1 and f"is {h}x{w}, larger than the model's input 48x64" in bad[k], (k, bad.get(k))
    assert 0 < len(bad) < len(images)


DETR_MEAN, DETR_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.mark.parametrize("kind", ["DetrImageProcessor", "YolosImageProcessor", "old DetrFeatureExtractor"])
def test_a_detr_or_yolos_preprocessor_config_is_followed(pngs, tmp_path, kind):
    """The processor's pixel_values for a batch padded to M x M: PIL bilinear at the rule's size,
    rescaled, normalized, zeros bottom and right (Sluice pads with the colour the normalization makes 0)."""
    folder, images = pngs
    d = tmp_path / "detr-model"
    d.mkdir()
    config = {"image_processor_type": kind, "do_resize": True, "size": {"shortest_edge": N, "longest_edge": M},
              "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": DETR_MEAN,
              "image_std": DETR_STD, "do_pad": True, "format": "coco_detection"}
    if kind.startswith("old"):  # transformers 4.2x wrote a bare size and max_size
        config = {k: v for k, v in config.items() if k not in ("image_processor_type", "size")}
        config.update({"feature_extractor_type": "DetrFeatureExtractor", "size": N, "max_size": M})
    (d / "preprocessor_config.json").write_text(json.dumps(config))
    multiple = 16 if kind.startswith("Yolos") else 0
    canvas = M - M % multiple if multiple else M
    model = float_identity(str(tmp_path / "id.onnx"), canvas, canvas)
    out = str(tmp_path / "hf")
    p = run(folder, out, model, "--preprocess-from", str(d))
    line = [x for x in p.stderr.splitlines() if "--preprocess-from" in x]
    want_line = f"--resize-shortest {N} --max-size {M}" + (" --size-multiple 16" if multiple else "") + " --pad-mean"
    assert line and want_line in line[0] and "--interpolation bilinear" in line[0], p.stderr
    got, status, _ = stored(out)
    worst = 0
    for k, img in images.items():
        x, (h, w) = padded(img, (canvas, canvas), (0, 0, 0), multiple)
        x[:, :h, :w] = (x[:, :h, :w] / 255 - np.array(DETR_MEAN)[:, None, None]) / np.array(DETR_STD)[:, None, None]
        assert status[k] == 0, k
        worst = max(worst, np.abs(got[k] - x).max())
    print(f"{kind} preprocessor_config.json vs PIL + numpy + zero pad: max |diff| {worst:.4g}")
    # One uint8 level over the std (the padding's too: its colour is round(255 * mean)), plus float32.
    assert worst <= 1 / 255 / min(DETR_STD) + 1e-5


@pytest.mark.parametrize("options,code,words", [
    (["--max-size", 80], 2, "goes with --resize-shortest"),
    (["--resize-shortest", 48, "--center-crop", 48], 2, "excludes --center-crop"),
    (["--resize-shortest", 48], 3, "add --max-size"),  # a dynamic model: no one size holds every image
])
def test_what_does_not_go_together_is_refused(pngs, tmp_path, options, code, words):
    folder, _ = pngs
    model = identity_model(str(tmp_path / "dyn.onnx"), None, None)
    p = run(folder, str(tmp_path / "o"), model, *options, check=False)
    assert p.returncode == code and words in p.stderr, p.stderr
