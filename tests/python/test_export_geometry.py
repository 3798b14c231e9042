"""`sluice export --original-size` undoes the geometry the run used: the letterbox padding is dropped,
what a center crop cut off is marked, and the rest is scaled back as PIL's NEAREST would.

The run's model is an identity (uint8 [N, 3, 32, 32] -> float), so a mask is the channel that
dominates each preprocessed pixel; the reference takes the run's stored mask and undoes the
geometry with numpy and PIL, computed here from the documented formulas (image/image.h), and the
result must also match the images' own dominant channel almost everywhere.
"""
import json
import os
import sys

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper, save

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import fresh_dir, sluice  # noqa: E402

Image = pytest.importorskip("PIL.Image")

H = W = 32
SIZES = {"wide.png": (40, 70), "tall.png": (64, 24), "odd.png": (33, 47), "square.png": (50, 50)}


def identity_model(path, stride=1):
    """uint8 [N, 3, 32, 32] -> float, max-pooled by `stride` (a network whose output is smaller)."""
    x = helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["N", 3, H, W])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3, H // stride, W // stride])
    nodes = [helper.make_node("Cast", ["pixels"], ["logits" if stride == 1 else "f"], to=TensorProto.FLOAT)]
    if stride > 1:
        nodes.append(helper.make_node("MaxPool", ["f"], ["logits"], kernel_shape=[stride, stride], strides=[stride, stride]))
    g = helper.make_graph(nodes, "identity", [x], [y])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def blocks(h, w, seed):
    """An image of 8x8-pixel blocks, each with one clearly dominant channel, and that channel map."""
    rng = np.random.default_rng(seed)
    cls = rng.integers(0, 3, ((h + 7) // 8, (w + 7) // 8)).repeat(8, 0).repeat(8, 1)[:h, :w]
    img = np.full((h, w, 3), 30, np.uint8)
    for c in range(3):
        img[..., c][cls == c] = 220
    return img, cls


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    truth = {}
    for i, (name, (h, w)) in enumerate(SIZES.items()):
        img, cls = blocks(h, w, i)
        Image.fromarray(img).save(folder / name)
        truth[name] = cls
    return str(folder), truth


def run_and_export(tmp_path, images, *options, export_options=(), stride=1):
    folder, _ = images
    model = identity_model(str(tmp_path / "identity.onnx"), stride)
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--input", folder, "--model", model, "--output", run, "--outputs", "logits", "--batch-size", 2,
           "--device", "cpu", "--quiet", *options, np_=2, check=True, timeout=120)
    sluice("export", run, "--original-size", *export_options, check=True, timeout=120)
    with h5py.File(os.path.join(run, "outputs.h5"), "r") as f:
        keys = [k.decode() for k in f["sample_key"][:]]
        stored = {k: f["outputs/logits"][i].argmax(0).astype(np.uint8) for i, k in enumerate(keys)}
    exported = {}
    for k in keys:
        with Image.open(os.path.join(run, "export", os.path.splitext(k)[0] + ".png")) as im:
            exported[k] = np.array(im)
    return stored, exported


def nearest(mask, h, w):
    return np.array(Image.fromarray(mask).resize((w, h), Image.NEAREST))


@pytest.mark.parametrize("stride", [1, 2])
def test_original_size_after_letterbox_drops_the_padding(tmp_path, images, stride):
    """With stride 2 the model's masks are 16x16: first brought to its 32x32 input (NEAREST)."""
    stored, exported = run_and_export(tmp_path, images, "--letterbox", stride=stride)
    stored = {k: nearest(m, H, W) for k, m in stored.items()}
    for key, (h, w) in SIZES.items():
        # Letterbox: the limiting side fills the input, the other is rounded half up, centred.
        if H * w <= W * h:
            rh, rw = H, int(np.floor(w * H / h + 0.5))
        else:
            rh, rw = int(np.floor(h * W / w + 0.5)), W
        top, left = (H - rh) // 2, (W - rw) // 2
        want = nearest(stored[key][top:top + rh, left:left + rw], h, w)
        assert exported[key].shape == (h, w), key
        np.testing.assert_array_equal(exported[key], want, err_msg=key)
        assert (exported[key] == images[1][key]).mean() > (0.9 if stride == 1 else 0.75), key


def test_original_size_after_resize_and_center_crop_marks_what_the_crop_cut_off(tmp_path, images):
    stored, exported = run_and_export(tmp_path, images, "--resize", 32, "--center-crop", 32)
    for key, (h, w) in SIZES.items():
        rh, rw = (32, 32 * w // h) if h <= w else (32 * h // w, 32)  # torchvision's int(S * long / short)
        top, left = round((rh - H) / 2), round((rw - W) / 2)
        canvas = np.full((rh, rw), 255, np.uint8)
        canvas[top:top + H, left:left + W] = stored[key]
        want = nearest(canvas, h, w)
        np.testing.assert_array_equal(exported[key], want, err_msg=key)
        seen = exported[key] != 255
        assert (exported[key][seen] == images[1][key][seen]).mean() > 0.9, key
        if h != w:
            assert not seen.all(), key  # the crop cut something off, and it is marked, not guessed


def test_outside_names_the_class_of_cropped_pixels(tmp_path, images):
    stored, exported = run_and_export(tmp_path, images, "--resize", 32, "--center-crop", 32,
                                      export_options=("--outside", 7))
    h, w = SIZES["wide.png"]
    rw = 32 * w // h
    left = round((rw - W) / 2)
    canvas = np.full((32, rw), 7, np.uint8)
    canvas[:, left:left + W] = stored["wide.png"]
    np.testing.assert_array_equal(exported["wide.png"], nearest(canvas, h, w))


@pytest.mark.parametrize("option", ["letterbox = true", 'center-crop = "32"'])
def test_a_run_without_recorded_geometry_is_refused_when_its_job_padded_or_cropped(tmp_path, images, option):
    """A run folder from before the geometry was recorded (its outputs.h5 lacks the attribute)."""
    stored, _ = run_and_export(tmp_path, images, "--letterbox")
    run = tmp_path / "run"
    with h5py.File(run / "outputs.h5", "a") as f:
        del f.attrs["preprocess"]
    with open(run / "report.json") as f:
        report = json.load(f)
    lines = [line for line in report["job_toml"].splitlines() if not line.startswith(("letterbox", "center-crop"))]
    report["job_toml"] = "\n".join(lines + [option, ""])
    with open(run / "report.json", "w") as f:
        json.dump(report, f)
    r = sluice("export", run, "--original-size", "--out", tmp_path / "old")
    assert r.returncode == 3 and "does not record the image geometry" in r.stderr, r.stderr
    assert not (tmp_path / "old" / "wide.png").exists()
