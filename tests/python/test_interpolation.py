"""--interpolation and --preprocess-from through `sluice run`, against PIL itself (what Hugging Face's
image processors call): bicubic within one uint8 level of PIL's Image.resize(BICUBIC) shrinking and
enlarging, nearest equal to PIL's NEAREST; a Hugging Face preprocessor_config.json and a timm
pretrained_cfg applied as their libraries apply them (resize, crop, rescale, normalize), options
given by hand kept, and what cannot be followed refused with exit 2.

The models are identities (uint8 [B, 3, H, W] -> Cast to float; float [B, 3, H, W] -> Identity
where the job normalizes), so the stored logits are the preprocessed tensor the engine saw, after
the job's scale, mean and std."""
import json
import os

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper, save
from PIL import Image

from support.sluice_test import fresh_dir, sluice
from make_image_dataset import picture
from test_images import identity_model

SHAPES = [(375, 500), (500, 375), (333, 500), (40, 52), (64, 64), (257, 300), (90, 1000), (231, 229)]


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    """Photo-like PNGs of many shapes (lossless: PIL and Sluice decode the same pixels)."""
    d = tmp_path_factory.mktemp("interp")
    for i, (h, w) in enumerate(SHAPES):
        picture(11, i, w, h, 0.0, False).resize((w, h)).save(d / f"{i:02d}-{h}x{w}.png")
    return str(d), {p: Image.open(d / p).convert("RGB") for p in sorted(os.listdir(d))}


def float_identity(path, h, w):
    """float32 [N, 3, h, w] -> itself: what the job's scale, mean and std make of the pixels."""
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 3, h, w])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3, h, w])
    g = helper.make_graph([helper.make_node("Identity", ["pixels"], ["logits"])], "identity", [x], [y])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def run(folder, out, model, *options, check=True):
    return sluice("run", "--input", folder, "--model", model, "--output", fresh_dir(out), "--outputs", "logits",
                  "--batch-size", 4, "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, *options,
                  check=check, timeout=120)


def stored(out):
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() if isinstance(k, bytes) else k for k in f["sample_key"][:]]
        return dict(zip(keys, f["outputs/logits"][:]))


def half_to_even(n):
    return round(n / 2)  # Python's round: torchvision's (and HF's) center-crop corner


def shorter_side(img, S, resample):
    w, h = img.size
    size = (S, S * h // w) if w <= h else (S * w // h, S)
    return img.resize(size, resample)


def center_crop(img, H, W):
    w, h = img.size
    top, left = half_to_even(h - H), half_to_even(w - W)
    return img.crop((left, top, left + W, top + H))


def chw(img):
    return np.asarray(img).transpose(2, 0, 1).astype(np.float64)


def agreement(got, want, what):
    diffs = np.concatenate([np.abs(got[k] - want[k]).ravel() for k in want])
    print(f"{what}: {len(want)} images, max |diff| {diffs.max():.3g}, {np.mean(diffs == 0) * 100:.2f}% equal")
    return diffs


def test_bicubic_shrinks_and_enlarges_as_pil(pngs, tmp_path):
    folder, images = pngs
    model = identity_model(str(tmp_path / "id56.onnx"), 56, 56)
    # Shrinking every image (shorter side 64, then a 56 crop) and enlarging the small one (40x52).
    out = str(tmp_path / "bicubic")
    run(folder, out, model, "--resize", 64, "--center-crop", 56, "--interpolation", "bicubic", "--quiet")
    got = stored(out)
    want = {k: chw(center_crop(shorter_side(im, 64, Image.BICUBIC), 56, 56)) for k, im in images.items()}
    diffs = agreement(got, want, "--interpolation bicubic vs PIL BICUBIC, shorter side 64 + crop 56")
    assert diffs.max() <= 1
    # Bicubic is not bilinear: the same job with the default filter differs from PIL's bicubic.
    out2 = str(tmp_path / "bilinear")
    run(folder, out2, model, "--resize", 64, "--center-crop", 56, "--quiet")
    assert agreement(stored(out2), want, "bilinear (default) vs PIL BICUBIC").max() > 1
    # Exact sizes, one up (40x52 -> 96x120) and the rest down.
    dyn = identity_model(str(tmp_path / "dyn.onnx"), None, None)
    out3 = str(tmp_path / "exact")
    run(folder, out3, dyn, "--resize", "96x120", "--interpolation", "bicubic", "--quiet")
    want3 = {k: chw(im.resize((120, 96), Image.BICUBIC)) for k, im in images.items()}
    assert agreement(stored(out3), want3, "bicubic exact 96x120 vs PIL").max() <= 1


def test_nearest_equals_pil(pngs, tmp_path):
    folder, images = pngs
    dyn = identity_model(str(tmp_path / "dyn.onnx"), None, None)
    out = str(tmp_path / "nearest")
    run(folder, out, dyn, "--resize", "48x80", "--interpolation", "nearest", "--quiet")
    want = {k: chw(im.resize((80, 48), Image.NEAREST)) for k, im in images.items()}
    assert agreement(stored(out), want, "nearest vs PIL NEAREST").max() == 0


MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def normalized(img, mean, std, scale=1 / 255):
    x = chw(img) * scale
    return (x - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]


def test_a_hugging_face_processor_config_is_followed(pngs, tmp_path):
    """CLIP's processor, scaled down: shortest edge 64, bicubic, center crop 56, rescale, normalize."""
    folder, images = pngs
    d = tmp_path / "clip-model"
    d.mkdir()
    (d / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": 64},
        "resample": 3, "do_center_crop": True, "crop_size": {"height": 56, "width": 56}, "do_rescale": True,
        "rescale_factor": 0.00392156862745098, "do_normalize": True, "image_mean": MEAN, "image_std": STD,
        "do_convert_rgb": True}))
    model = float_identity(str(tmp_path / "id56.onnx"), 56, 56)
    out = str(tmp_path / "hf")
    p = run(folder, out, model, "--preprocess-from", str(d))
    line = [x for x in p.stderr.splitlines() if "--preprocess-from" in x]
    assert line and "--resize 64 --center-crop 56x56 --interpolation bicubic --scale 0.00392156" in line[0], p.stderr
    want = {k: normalized(center_crop(shorter_side(im, 64, Image.BICUBIC), 56, 56), MEAN, STD)
            for k, im in images.items()}
    # One uint8 level over the std, plus float32 rounding.
    assert agreement(stored(out), want, "preprocessor_config.json vs PIL + numpy").max() <= 1 / 255 / min(STD) + 1e-5
    # An option given by hand wins, and says so.
    p = run(folder, out, model, "--preprocess-from", str(d), "--interpolation", "bilinear")
    assert "kept as given: --interpolation" in p.stderr
    with h5py.File(os.path.join(out, "rank-00000.h5"), "r") as f:
        job = f.attrs["job"]
    job = job.decode() if isinstance(job, bytes) else job
    assert 'interpolation = "bilinear"' in job and 'resize = "64"' in job


def test_a_timm_pretrained_cfg_is_followed(pngs, tmp_path):
    """timm's eval transform: Resize(floor(56 / 0.875) = 64, bicubic) + CenterCrop(56), ToTensor, Normalize."""
    folder, images = pngs
    d = tmp_path / "timm-model"
    d.mkdir()
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    (d / "config.json").write_text(json.dumps({"architecture": "tiny", "num_classes": 10, "pretrained_cfg": {
        "input_size": [3, 56, 56], "interpolation": "bicubic", "crop_pct": 0.875, "crop_mode": "center",
        "mean": mean, "std": std}}))
    model = float_identity(str(tmp_path / "id56.onnx"), 56, 56)
    out = str(tmp_path / "timm")
    p = run(folder, out, model, "--preprocess-from", str(d / "config.json"))
    assert "--resize 64 --center-crop 56 --interpolation bicubic" in p.stderr, p.stderr
    want = {k: normalized(center_crop(shorter_side(im, 64, Image.BICUBIC), 56, 56), mean, std)
            for k, im in images.items()}
    assert agreement(stored(out), want, "timm pretrained_cfg vs PIL + numpy").max() <= 1 / 255 / min(std) + 1e-5


@pytest.mark.parametrize("config,words", [
    ({"image_processor_type": "X", "size": {"longest_edge": 1333}}, "a longest edge"),  # DETR's: test_resize_shortest.py
    ({"image_processor_type": "X", "size": {"height": 56, "width": 56}, "resample": 1}, "LANCZOS"),
    ({"image_processor_type": "X", "size": {"shortest_edge": 56}}, "different sizes"),
    ({"architecture": "a"}, "neither a Hugging Face"),
])
def test_what_cannot_be_followed_is_refused(pngs, tmp_path, config, words):
    folder, _ = pngs
    d = tmp_path / "m"
    d.mkdir()
    (d / "preprocessor_config.json").write_text(json.dumps(config))
    model = identity_model(str(tmp_path / "id56.onnx"), 56, 56)
    p = run(folder, str(tmp_path / "o"), model, "--preprocess-from", str(d), check=False)
    assert p.returncode == 2 and words in p.stderr, p.stderr
    p = run(folder, str(tmp_path / "o"), model, "--preprocess-from", str(tmp_path / "nowhere"), check=False)
    assert p.returncode == 2 and "no such file or folder" in p.stderr, p.stderr
