"""Image folders through `sluice run`: the preprocessed model input against torchvision (resize 256 +
center crop 224, exact resize) and a PIL letterbox, applied to the same decoded pixels; how far the
decoders themselves differ; bad files recorded or fatal under mpirun.

The model is an identity: uint8 [B, 3, H, W] -> Cast to float, so the stored logits are the
preprocessed tensor that reached the engine.  The references run in Debian's /usr/bin/python3
(torch, torchvision, PIL 9.4) through tests/python/image_reference.py.
"""
import io
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper, save
from PIL import Image

from support.sluice_test import ROOT, fresh_dir, report, sluice
from make_image_dataset import picture

TORCH_PY = "/usr/bin/python3"  # Debian's python with torch and torchvision
REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "image_reference.py")


def identity_model(path, h, w):
    """uint8 [N, 3, h, w] -> float32 (None: a dynamic dimension)."""
    x = helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["N", 3, h or "H", w or "W"])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3, h or "H", w or "W"])
    g = helper.make_graph([helper.make_node("Cast", ["pixels"], ["logits"], to=TensorProto.FLOAT)], "identity", [x], [y])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def run_images(folder, out, model, *options, np_=None, check=True):
    return sluice("run", "--input", folder, "--model", model, "--output", fresh_dir(out), "--outputs", "logits",
                  "--batch-size", 4, "--chunk-batches", 1, "--device", "cpu", "--quiet", *options, np_=np_, check=check,
                  timeout=120)


def stored(out):
    """{key: (uint8 [3, H, W], status, (h, w))} from outputs.h5."""
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() if isinstance(k, bytes) else k for k in f["sample_key"][:]]
        logits = f["outputs/logits"][:]
        status = f["sample_status"][:]
        sizes = f["sample_size"][:]
    assert np.all(logits == np.round(logits)) and logits.min() >= 0 and logits.max() <= 255
    return {k: (logits[i].astype(np.uint8), int(status[i]), tuple(sizes[i])) for i, k in enumerate(keys)}


def reference(mode, images, *args, tmp):
    """image_reference.py over {key: h x w x 3 array}; returns ({key: uint8 [3, H, W]}, what ran)."""
    src, dst = os.path.join(tmp, f"{mode}-in.npz"), os.path.join(tmp, f"{mode}-out.npz")
    keys = sorted(images)
    np.savez(src, **{str(i): images[k] for i, k in enumerate(keys)})
    p = subprocess.run([TORCH_PY, REFERENCE, mode, src, dst, *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    res = np.load(dst)
    return {k: res[str(i)] for i, k in enumerate(keys)}, p.stdout.strip()


def compare(got, want, what):
    """Every value within one uint8 level; prints the agreement."""
    diffs = np.concatenate([np.abs(got[k][0].astype(int) - want[k].astype(int)).ravel() for k in want])
    print(f"{what}: {len(want)} images, max |diff| {diffs.max()}, {np.mean(diffs == 0) * 100:.2f}% equal")
    assert diffs.max() <= 1, what
    return diffs


@pytest.fixture(scope="module")
def torch_python():
    if subprocess.run([TORCH_PY, "-c", "import torch, torchvision, PIL"], capture_output=True).returncode != 0:
        pytest.skip("Debian's python3-torch and python3-torchvision are needed (data_tools/install-deps.sh)")


@pytest.fixture(scope="module")
def png_folder(tmp_path_factory):
    """PNG files of many shapes (lossless: PIL and libspng decode the same pixels), grey and RGBA too."""
    d = tmp_path_factory.mktemp("png")
    shapes = [(375, 500), (500, 375), (333, 500), (40, 52), (64, 64), (257, 300), (90, 1000), (231, 229)]
    for i, (h, w) in enumerate(shapes):
        im = picture(7, i, w, h, 0.0, False).resize((w, h))
        if i == 4:
            im = im.convert("L")
        if i == 5:
            im = im.convert("RGBA")
        im.save(d / f"{i:02d}-{h}x{w}.png")
    pixels = {p: np.asarray(Image.open(d / p).convert("RGB")) for p in sorted(os.listdir(d))}
    return str(d), pixels


def test_resize_and_center_crop_match_torchvision(png_folder, torch_python, tmp_path):
    folder, pixels = png_folder
    for size, crop in ((256, 224), (64, 56)):
        model = identity_model(str(tmp_path / f"id{crop}.onnx"), crop, crop)
        out = str(tmp_path / f"run{crop}")
        run_images(folder, out, model, "--resize", size, "--center-crop", crop)
        got = stored(out)
        assert sorted(got) == sorted(pixels)
        for key, img in pixels.items():
            assert got[key][1] == 0 and got[key][2] == img.shape[:2]
        want, api = reference("resize_crop", pixels, size, crop, tmp=str(tmp_path))
        compare(got, want, f"Resize({size}) + CenterCrop({crop}) vs {api}")


def test_exact_resize_matches_torchvision_with_a_dynamic_model(png_folder, torch_python, tmp_path):
    folder, pixels = png_folder
    model = identity_model(str(tmp_path / "dyn.onnx"), None, None)
    out = str(tmp_path / "exact")
    run_images(folder, out, model, "--resize", "48x80")
    got = stored(out)
    assert all(v[0].shape == (3, 48, 80) for v in got.values())
    want, api = reference("exact", pixels, 48, 80, tmp=str(tmp_path))
    compare(got, want, f"Resize((48, 80)) vs {api}")


def test_letterbox_matches_a_pil_reference(png_folder, torch_python, tmp_path):
    folder, pixels = png_folder
    model = identity_model(str(tmp_path / "lb.onnx"), 64, 72)
    out = str(tmp_path / "letterbox")
    run_images(folder, out, model, "--letterbox", "--pad-value", 114)
    got = stored(out)
    want, api = reference("letterbox", pixels, 64, 72, 114, tmp=str(tmp_path))
    compare(got, want, f"letterbox 64x72 vs {api}")
    # The padding is exactly the pad value: a 90x1000 strip fills 6 of the 64 rows.
    strip = got["06-90x1000.png"][0]
    assert np.all(strip[:, :29] == 114) and np.all(strip[:, 35:] == 114) and not np.all(strip[:, 29:35] == 114)


@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory):
    """JPEGs of one size, 120x90: baseline 4:2:0 and 4:4:4, progressive, grey, CMYK (Adobe)."""
    d = tmp_path_factory.mktemp("jpeg")
    for i in range(6):
        im = picture(11, i, 120, 90, 0.0, False).resize((120, 90))
        kind = ["baseline", "baseline444", "progressive", "grey", "cmyk", "baseline2"][i]
        opts = dict(quality=90)
        if kind == "baseline444":
            opts["subsampling"] = 0
        if kind == "progressive":
            opts["progressive"] = True
        if kind == "grey":
            im = im.convert("L")
        if kind == "cmyk":
            im = im.convert("CMYK")
        im.save(d / f"{i}-{kind}.jpg", **opts)
    return str(d)


def test_jpeg_preprocessing_on_sluices_own_decode(jpeg_folder, torch_python, tmp_path, capsys):
    # Sluice's decoded pixels: an exact resize to the images' own size is an identity.
    ident = identity_model(str(tmp_path / "native.onnx"), 90, 120)
    run_images(jpeg_folder, str(tmp_path / "native"), ident, "--resize", "90x120")
    decoded = {k: v[0].transpose(1, 2, 0).copy() for k, v in stored(str(tmp_path / "native")).items()}
    assert len(decoded) == 6
    # The preprocessing of the same pixels against torchvision.
    model = identity_model(str(tmp_path / "c56.onnx"), 56, 56)
    run_images(jpeg_folder, str(tmp_path / "crop"), model, "--resize", 64, "--center-crop", 56)
    want, api = reference("resize_crop", decoded, 64, 56, tmp=str(tmp_path))
    compare(stored(str(tmp_path / "crop")), want, f"JPEG Resize(64) + CenterCrop(56) vs {api}")

    # How far the decoders differ: PIL (Debian's 9.4 and this python's) against TurboJPEG.
    names = sorted(decoded)
    with open(tmp_path / "files.txt", "w") as f:
        f.write("\n".join(os.path.join(jpeg_folder, n) for n in names))
    p = subprocess.run([TORCH_PY, REFERENCE, "decode", str(tmp_path / "files.txt"), str(tmp_path / "pil.npz")],
                       capture_output=True, text=True, check=True)
    debian = np.load(tmp_path / "pil.npz")
    for label, pil in ((p.stdout.strip() + " (Debian)", [debian[str(i)] for i in range(len(names))]),
                       (f"PIL {Image.__version__} (pip)",
                        [np.asarray(Image.open(os.path.join(jpeg_folder, n)).convert("RGB")) for n in names])):
        d = [np.abs(a.astype(int) - decoded[n].astype(int)) for a, n in zip(pil, names)]
        for n, x in zip(names, d):
            print(f"decoders: {label} vs TurboJPEG, {n}: max {x.max()}, mean {x.mean():.4f}")
        # Both are libjpeg-turbo with islow DCT and fancy upsampling: equal or nearly; a
        # wrong colour conversion (CMYK, grey) would be tens of levels off.
        assert max(x.mean() for x in d) < 1.0, label


def make_bad_folder(root):
    """Good JPEGs from make_image_dataset.py plus one file of each bad kind."""
    subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "make_image_dataset.py"), "--out", root,
                    "--count", "9", "--width", "80", "--height", "60", "--workers", "1", "--png", "0.2"],
                   check=True, capture_output=True)
    good = open(os.path.join(root, "000", "000000.jpg"), "rb").read()
    bad = {
        "bad/corrupt.jpg": good[:2] + bytes(range(7, 250)) * 2 + b"\xff\xd9",
        "bad/empty.jpg": b"",
        "bad/notes.png": b"shopping list: milk, eggs\n",
        "bad/truncated.jpg": good[:len(good) // 2],
    }
    for rel, data in bad.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    with open(os.path.join(root, "README.txt"), "w") as f:
        f.write("not an image extension: not a sample\n")
    return root, {
        "bad/corrupt.jpg": "corrupt JPEG: expected a marker at byte 2",
        "bad/empty.jpg": "empty file",
        "bad/notes.png": "not a JPEG or PNG file",
        "bad/truncated.jpg": "truncated JPEG: no end-of-image marker",
    }


def test_bad_files_are_recorded_and_the_run_completes(tmp_path):
    folder, reasons = make_bad_folder(str(tmp_path / "imgs"))
    model = identity_model(str(tmp_path / "id.onnx"), 32, 32)
    out = str(tmp_path / "run")
    p = run_images(folder, out, model, "--resize", 40, "--center-crop", 32, np_=2)
    got = stored(out)
    assert len(got) == 13 and "README.txt" not in got
    for key, (pixels, status, size) in got.items():
        if key in reasons:
            assert status == 1 and size == (0, 0) and not pixels.any(), key
        else:
            assert status == 0 and pixels.any() and size == Image.open(os.path.join(folder, key)).size[::-1], key
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() for k in f["sample_key"][:]]
        bad = {keys[r["index"]]: r["reason"].decode().rstrip("\0") for r in f["bad_samples"][:]}
    assert bad == reasons
    r = report(out)
    assert r["job"]["complete"], p.stderr
    print("report stages:", {k: v for k, v in r.items() if k not in ("ranks",)})


@pytest.mark.parametrize("ranks", [2, 3])
def test_on_bad_sample_fail_exits_3_naming_the_file(tmp_path, ranks):
    folder, reasons = make_bad_folder(str(tmp_path / "imgs"))
    model = identity_model(str(tmp_path / "id.onnx"), 32, 32)
    p = run_images(folder, str(tmp_path / "run"), model, "--resize", 40, "--center-crop", 32, "--on-bad-sample", "fail",
                   np_=ranks, check=False)
    assert p.returncode == 3, p.stderr
    named = [k for k in reasons if f"bad sample '{k}'" in p.stderr and reasons[k] in p.stderr]
    assert named, p.stderr


def test_size_errors_say_what_fits(png_folder, tmp_path):
    folder, _ = png_folder
    model = identity_model(str(tmp_path / "m224.onnx"), 224, 224)
    p = run_images(folder, str(tmp_path / "e1"), model, "--resize", 256, "--center-crop", 200, check=False, np_=2)
    assert p.returncode == 3
    assert "--center-crop 200 makes 200x200 images but the model" in p.stderr and "use --center-crop 224x224" in p.stderr
    p = run_images(folder, str(tmp_path / "e2"), model, "--resize", 256, check=False)
    assert p.returncode == 2 and "add --center-crop" in p.stderr
    dyn = identity_model(str(tmp_path / "dyn.onnx"), None, None)
    p = run_images(folder, str(tmp_path / "e3"), dyn, check=False)
    assert p.returncode == 3 and "dynamic image size" in p.stderr
