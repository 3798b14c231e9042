"""`sluice export`: PNG masks, the class table and .npy files from a run's outputs.h5, checked against
PIL and numpy; restart after a kill, refusal to replace foreign files, incomplete runs.

Most tests write outputs.h5 with h5py in the run format (/outputs/*, /sample_index, /sample_key,
/sample_status, /sample_size, /bad_samples: docs/file-formats.md), so every case (keys with folders,
bad samples, original sizes) is exercised without image inputs; two run the real `sluice run` first.
"""
import csv
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = os.environ.get("SLUICE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SLUICE_BIN = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))

if not os.access(SLUICE_BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {SLUICE_BIN} (set SLUICE_BIN)", allow_module_level=True)
Image = pytest.importorskip("PIL.Image")

KEYS = [b"a/b/cat.jpg", b"a/dog.png", b"x.jpeg", b"broken.jpg", b"c/d/e/f.JPG", b"noext", b"q, \"quoted\".jpg"]
BAD = 3  # the row of broken.jpg
SIZES = [[20, 30], [7, 5], [12, 10], [0, 0], [100, 3], [13, 17], [37, 101]]


def sluice(*args, check=True):
    r = subprocess.run([SLUICE_BIN, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, f"sluice {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}"
    return r


def write_run(folder, outputs, keys=KEYS, status=None, sizes=SIZES):
    """A run folder whose outputs.h5 holds `outputs` {name: array} and the per-row datasets."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(next(iter(outputs.values())))
    with h5py.File(folder / "outputs.h5", "w") as f:
        for name, a in outputs.items():
            f[f"outputs/{name}"] = a
        f["sample_index"] = np.arange(n, dtype=np.int64)
        if keys is not None:
            f["sample_key"] = np.array(keys[:n], dtype=f"S{max(len(k) for k in keys)}")
        st = np.zeros(n, np.uint8)
        if status is None and n > BAD:
            st[BAD] = 1
        f["sample_status"] = st if status is None else status
        if sizes is not None:
            f["sample_size"] = np.array(sizes[:n], np.int32)
        if status is None and n > BAD:
            f["bad_samples"] = np.array([(BAD, b"not a JPEG file")], dtype=[("index", "<i8"), ("reason", "S200")])
    return folder


def seg_outputs(n=len(KEYS), c=6, h=12, w=10, seed=0):
    logits = np.random.default_rng(seed).standard_normal((n, c, h, w)).astype(np.float32)
    return {"argmax": logits.argmax(1).astype(np.uint8), "logits": logits}


def png_path(out, key):
    stem = os.path.splitext(key.decode())[0] if "." in key.decode().split("/")[-1] else key.decode()
    return out / (stem + ".png")


def voc_palette():
    p = []
    for c in range(256):
        r = g = b = 0
        for j in range(8):
            r |= ((c >> (3 * j)) & 1) << (7 - j)
            g |= ((c >> (3 * j + 1)) & 1) << (7 - j)
            b |= ((c >> (3 * j + 2)) & 1) << (7 - j)
        p += [r, g, b]
    return p


def manifest(out):
    lines = (out / ".sluice-export.json").read_text().splitlines()
    return [json.loads(l) for l in lines if l.strip()]


def test_masks_are_palette_pngs_named_after_keys_with_the_argmax_indices(tmp_path):
    outs = seg_outputs()
    run = write_run(tmp_path / "run", outs)
    r = sluice("export", run)
    out = run / "export"
    for i, key in enumerate(KEYS):
        path = png_path(out, key)
        if i == BAD:
            assert not path.exists()
            continue
        with Image.open(path) as im:
            assert im.mode == "P", (key, im.mode)
            assert im.getpalette()[:768] == voc_palette()
            assert np.array_equal(np.array(im), outs["argmax"][i]), key
    assert "6 masks written" in r.stdout and "broken.jpg (not a JPEG file)" in r.stdout, r.stdout
    files = {e["file"]: e for e in manifest(out) if "file" in e}
    assert files["a/b/cat.png"]["key"] == "a/b/cat.jpg"
    assert files["a/b/cat.png"]["bytes"] == (out / "a/b/cat.png").stat().st_size


def test_masks_from_logits_take_the_argmax_over_classes(tmp_path):
    outs = seg_outputs(seed=1)
    run = write_run(tmp_path / "run", {"logits": outs["logits"]})
    sluice("export", run, "--what", "masks", "--out", tmp_path / "m")
    with Image.open(png_path(tmp_path / "m", KEYS[0])) as im:
        assert np.array_equal(np.array(im), outs["argmax"][0])


def test_original_size_is_pil_nearest(tmp_path):
    outs = seg_outputs(seed=2)
    run = write_run(tmp_path / "run", outs)
    sluice("export", run, "--original-size")
    for i, key in enumerate(KEYS):
        if i == BAD:
            continue
        h, w = SIZES[i]
        ref = np.array(Image.fromarray(outs["argmax"][i]).resize((w, h), Image.NEAREST))
        with Image.open(png_path(run / "export", key)) as im:
            got = np.array(im)
        assert got.shape == (h, w) and np.array_equal(got, ref), key


def test_classes_csv_has_top_k_ids_and_softmax_probabilities(tmp_path):
    n, c, k = len(KEYS), 12, 4
    logits = (np.random.default_rng(3).standard_normal((n, c)) * 3).astype(np.float32)
    run = write_run(tmp_path / "run", {"logits": logits})
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"class {j}, the {j}th\n" for j in range(c)))
    sluice("export", run, "--top-k", k, "--labels", labels)
    with open(run / "export" / "classes.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["key"] + [f"class_{j}" for j in range(1, k + 1)] + [f"label_{j}" for j in range(1, k + 1)] + \
        [f"prob_{j}" for j in range(1, k + 1)]
    e = np.exp(logits.astype(np.float64) - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    body = rows[1:]
    assert [r[0] for r in body] == [key.decode() for i, key in enumerate(KEYS) if i != BAD]
    for r in body:
        i = KEYS.index(r[0].encode())
        ids = [int(v) for v in r[1:k + 1]]
        assert ids == list(np.argsort(-p[i], kind="stable")[:k])
        assert r[k + 1:2 * k + 1] == [f"class {j}, the {j}th" for j in ids]
        assert np.allclose([float(v) for v in r[2 * k + 1:]], p[i, ids], rtol=1e-7, atol=0)


def test_logits_are_one_npy_per_sample(tmp_path):
    outs = seg_outputs(seed=4)
    run = write_run(tmp_path / "run", outs)
    sluice("export", run, "--what", "logits", "--out", tmp_path / "npy")
    got = np.load(tmp_path / "npy" / "a" / "b" / "cat.npy")
    assert got.dtype == np.float32 and np.array_equal(got, outs["logits"][0])
    assert not (tmp_path / "npy" / "broken.npy").exists()


def test_restart_after_a_kill_in_the_middle_finishes_without_rewriting(tmp_path):
    outs = seg_outputs(n=40, seed=5)
    keys = [f"img/{i:03d}.jpg".encode() for i in range(40)]
    run = write_run(tmp_path / "run", outs, keys=keys, status=np.zeros(40, np.uint8), sizes=None)
    out = run / "export"
    r = sluice("export", run, "--test-kill-after", 15, check=False)
    assert r.returncode == -9, (r.returncode, r.stderr)
    before = manifest(out)
    assert sum("file" in e for e in before) == 15
    partial = [p for p in (out / "img").iterdir() if p.name.endswith(".sluice-partial")]
    assert len(partial) == 1, partial  # killed while writing the 16th
    first_written = {p: p.stat().st_mtime_ns for p in (out / "img").glob("*.png")}
    with open(out / ".sluice-export.json", "a") as f:
        f.write('{"file": "img/999.png", "by')  # a torn last line, as a kill while appending leaves
    r = sluice("export", run)
    assert "25 masks written, 15 already there" in r.stdout, r.stdout
    for p, t in first_written.items():
        assert p.stat().st_mtime_ns == t, f"{p} was rewritten"
    for i, key in enumerate(keys):
        with Image.open(png_path(out, key)) as im:
            assert np.array_equal(np.array(im), outs["argmax"][i])
    assert not any(p.name.endswith(".sluice-partial") for p in (out / "img").iterdir())


def test_a_foreign_file_is_never_replaced_without_overwrite(tmp_path):
    outs = seg_outputs(seed=6)
    run = write_run(tmp_path / "run", outs)
    foreign = run / "export" / "a" / "dog.png"
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"mine")
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and str(foreign) in r.stderr and "--overwrite" in r.stderr, r.stderr
    assert foreign.read_bytes() == b"mine"
    sluice("export", run, "--overwrite")
    with Image.open(foreign) as im:
        assert np.array_equal(np.array(im), outs["argmax"][1])


def test_changed_options_rewrite_the_exports_own_files(tmp_path):
    outs = seg_outputs(seed=7)
    run = write_run(tmp_path / "run", outs)
    sluice("export", run)
    r = sluice("export", run, "--original-size")
    assert "6 masks written, 0 already there" in r.stdout, r.stdout
    with Image.open(png_path(run / "export", KEYS[0])) as im:
        assert im.size == (30, 20)


def test_an_incomplete_run_is_refused_naming_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and "--resume" in r.stderr, r.stderr
    write_run(run, seg_outputs())
    with h5py.File(run / "outputs.h5", "a") as f:
        f["sample_index"][2] = -1  # what a virtual dataset reads where its rank file is missing
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and "--resume" in r.stderr and "row 2" in r.stderr, r.stderr


def test_an_incomplete_runs_hint_is_the_command_that_finishes_it(tmp_path):
    """The folder alone finishes a run (its job.toml): export and inspect say so, without '...' or
    'the same job', and the command they name, run as written, lets the export through."""
    run = tmp_path / "run"
    sluice("run", "--config", os.path.join(ROOT, "jobs", "quickstart.toml"), "--samples", 10, "--batch-size", 4,
           "--outputs", "argmax", "--output", run, "--device", "cpu", "--quiet")
    os.remove(run / "outputs.h5")  # every sample committed, outputs.h5 not written yet (a kill at the end)
    command = f"sluice run --resume --output {run}"
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and f"`{command}`" in r.stderr, r.stderr
    assert "the same job" not in r.stderr and "..." not in r.stderr, r.stderr
    r = sluice("inspect", run, check=False)
    assert f"`{command}` writes it" in r.stdout + r.stderr and "the same job" not in r.stdout + r.stderr, r.stdout
    sluice(*command.split()[1:], "--quiet")
    sluice("export", run)
    assert len(os.listdir(run / "export")) == 11  # ten masks and the manifest
    with h5py.File(run / "outputs.h5", "a") as f:
        f["sample_index"][2] = -1  # what a virtual dataset reads where its rank file is missing
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and f"`{command}`" in r.stderr and "..." not in r.stderr, r.stderr


def test_what_the_exit_status_1_row_says_of_a_batch_size_the_machine_cannot_hold(tmp_path):
    """README's and usage.md's exit status 1: memory too small for the slots fails before any commit,
    and a run with smaller values (with --overwrite) completes; after commits a resume keeps the
    batch size, refusing another, and the same one continues."""
    run = tmp_path / "run"
    job = ["--config", os.path.join(ROOT, "jobs", "quickstart.toml"), "--samples", 12, "--outputs", "argmax",
           "--output", run, "--device", "cpu", "--quiet"]
    r = sluice("run", *job, "--batch-size", 64, "--prefetch", 1 << 20, check=False)  # terabytes of input slots
    assert r.returncode == 1 and "of host memory" in r.stderr, r.stderr
    assert not list(run.glob("rank-*.h5")) or all(
        int(sum(x["count"] for x in h5py.File(p)["ledger"][:] if x["count"] > 0)) == 0 for p in run.glob("rank-*.h5"))
    sluice("run", *job, "--batch-size", 4, "--overwrite")
    os.remove(run / "outputs.h5")  # committed samples, the run not finished
    r = sluice("run", "--resume", "--output", run, "--batch-size", 2, "--quiet", check=False)
    assert r.returncode == 3 and "batch-size = 4" in r.stderr and "--overwrite" in r.stderr, r.stderr
    sluice("run", "--resume", "--output", run, "--quiet")
    assert (run / "outputs.h5").exists()


def test_keys_that_collide_or_escape_are_refused(tmp_path):
    outs = seg_outputs(n=2)
    run = write_run(tmp_path / "run", outs, keys=[b"p/cat.jpg", b"p/cat.png"], sizes=None)
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and "--keep-extension" in r.stderr, r.stderr
    sluice("export", run, "--keep-extension")
    assert (run / "export" / "p" / "cat.jpg.png").exists() and (run / "export" / "p" / "cat.png.png").exists()
    assert not (tmp_path / "up.png").exists()


def test_a_file_listed_twice_is_named_as_such_and_keep_extension_offered_only_where_it_helps(tmp_path):
    outs = seg_outputs(n=3)
    run = write_run(tmp_path / "run", outs, keys=[b"p/cat.jpg", b"p/dog.jpg", b"p/cat.jpg"], sizes=None)
    for extra in [[], ["--keep-extension"]]:
        r = sluice("export", run, "--out", tmp_path / "twice", *extra, check=False)
        assert r.returncode == 3, (r.returncode, r.stderr)
        assert "rows 0 and 2 are the same file, 'p/cat.jpg', listed twice in the input" in r.stderr, r.stderr
        assert "remove the repeated line from the list file" in r.stderr and "--keep-extension" not in r.stderr, r.stderr
    depth = write_run(tmp_path / "depth", {"logits": outs["logits"][:, 0]}, keys=[b"p/cat.jpg", b"p/dog.jpg", b"p/cat.jpg"],
                      sizes=None)
    for what, folder in [("masks", run), ("logits", run), ("dense", depth)]:
        r = sluice("export", folder, "--what", what, "--out", tmp_path / what, check=False)
        assert r.returncode == 3 and "listed twice in the input" in r.stderr, (what, r.stderr)
    # One path spelt two ways is one file too; '../x.jpg' and '__/x.jpg' differ, but no extension separates them.
    run = write_run(tmp_path / "run2", outs, keys=[b"p/./cat.jpg", b"p/cat.jpg", b"q"], sizes=None,
                    status=np.zeros(3, np.uint8))
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and "'p/./cat.jpg' and 'p/cat.jpg', listed twice" in r.stderr, r.stderr
    run = write_run(tmp_path / "run3", outs, keys=[b"../x.jpg", b"__/x.jpg", b"q"], sizes=None,
                    status=np.zeros(3, np.uint8))
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and "would both be written to __/x.png" in r.stderr, r.stderr
    assert "--keep-extension" not in r.stderr and "rename one of the two files" in r.stderr, r.stderr


def test_a_list_naming_one_photo_twice_is_refused_with_the_list_to_fix(tmp_path):
    """A real run over a list file that names a photo twice: `sluice export` and `sluice run --export`
    both say the list repeats the file (not --keep-extension, which cannot separate one key)."""
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ["a.png", "b.png"]:
        Image.fromarray(np.full((20, 30, 3), 40 if name == "a.png" else 200, np.uint8)).save(photos / name)
    listing = photos / "list.txt"
    listing.write_text("a.png\nb.png\na.png\n")
    model = os.path.join(ROOT, "jobs", "models", "quickstart.onnx")
    common = ["--model", model, "--input", listing, "--resize", "64x64", "--outputs", "argmax", "--device", "cpu",
              "--batch-size", 2, "--quiet"]
    sluice("run", *common, "--output", tmp_path / "run")
    r = sluice("export", tmp_path / "run", check=False)
    assert r.returncode == 3 and "rows 0 and 2 are the same file, 'a.png'" in r.stderr, r.stderr
    assert "the input lists the same file twice" in r.stderr and "--keep-extension" not in r.stderr, r.stderr
    r = sluice("run", *common, "--output", tmp_path / "live", "--export", "masks", check=False)
    assert r.returncode == 3 and "--export masks: rows 0 and 2 are the same file, 'a.png'" in r.stderr, r.stderr
    assert "the input lists the same file twice" in r.stderr, r.stderr


def test_keys_above_the_input_folder_are_exported_inside_with_a_note(tmp_path):
    """A list file's '../data/b.jpg' entries: each '..' part becomes '__', inside the export folder."""
    outs = seg_outputs(n=3, seed=8)
    run = write_run(tmp_path / "run", outs, keys=[b"../up.jpg", b"../../data/b.jpg", b"ok.jpg"],
                    status=np.zeros(3, np.uint8), sizes=None)
    r = sluice("export", run)
    assert "3 masks written" in r.stdout, r.stdout
    assert "2 key(s) start above the input's folder, as '../up.jpg'" in r.stdout, r.stdout
    assert f"so it is {run / 'export'}/__/up.png" in r.stdout, r.stdout
    for i, rel in enumerate(["__/up.png", "__/__/data/b.png", "ok.png"]):
        with Image.open(run / "export" / rel) as im:
            assert np.array_equal(np.array(im), outs["argmax"][i]), rel
    assert not (tmp_path / "up.png").exists() and not (tmp_path / "data").exists()


# ---- after a real run ------------------------------------------------------------------------------

def classifier(path, classes=10):
    """Conv, GlobalAveragePool, Reshape to [1, 8] (the batch fixed at 1, as a usual export has it), Gemm."""
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 8], np.int64), "shape"),
             numpy_helper.from_array((rng.standard_normal((classes, 8)) * 2).astype(np.float32), "fc"),
             numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "fcb")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Reshape", ["g", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])], initializer=inits)
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    return path


def test_run_then_export_classes_from_topk_probs(tmp_path):
    model = classifier(tmp_path / "cls.onnx")
    run = tmp_path / "run"
    sluice("run", "--model", model, "--input", "synthetic", "--samples", 13, "--sample-shape", "3,16,16",
           "--batch-size", 4, "--outputs", "logits,topk_probs,topk", "--top-k", 3, "--output", run, "--device", "cpu",
           "--quiet")
    with h5py.File(run / "outputs.h5") as f:
        logits = f["outputs/logits"][:].astype(np.float64)
        pv, pi = f["outputs/topk_probs_values"][:], f["outputs/topk_probs_indices"][:]
        lv, li = f["outputs/topk_values"][:], f["outputs/topk_indices"][:]
    e = np.exp(logits - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    order = np.argsort(-p, axis=1, kind="stable")[:, :3]
    assert np.array_equal(pi, order) and np.array_equal(li, order)
    assert np.allclose(pv, np.take_along_axis(p, order, 1), rtol=1e-5, atol=1e-7)
    assert np.allclose(lv, np.take_along_axis(logits, order, 1), rtol=1e-6, atol=1e-6)  # topk: logits
    sluice("export", run)
    with open(run / "export" / "classes.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][-1] == "prob_3" and len(rows) == 14
    for r in rows[1:]:
        i = int(r[0])  # synthetic input: the key is the index
        assert [int(v) for v in r[1:4]] == list(order[i])
        assert np.allclose([float(v) for v in r[4:]], p[i, order[i]], rtol=1e-5)


def test_run_then_export_masks_match_the_stored_argmax(tmp_path):
    run = tmp_path / "run"
    sluice("run", "--config", os.path.join(ROOT, "jobs", "quickstart.toml"), "--samples", 10, "--batch-size", 4,
           "--outputs", "argmax", "--output", run, "--device", "cpu", "--quiet")
    sluice("export", run, "--out", tmp_path / "masks")
    with h5py.File(run / "outputs.h5") as f:
        argmax = f["outputs/argmax"][:]
    for i in range(10):
        with Image.open(tmp_path / "masks" / f"{i}.png") as im:
            assert np.array_equal(np.array(im), argmax[i])


def test_parquet_table_has_keys_top_k_and_mask_paths(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    n, c = len(KEYS), 7
    logits = np.random.default_rng(11).standard_normal((n, c)).astype(np.float32)
    run = write_run(tmp_path / "run", {"logits": logits, "argmax": seg_outputs(seed=12)["argmax"]})
    sluice("export", run, "--what", "masks", "--out", tmp_path / "masks")
    script = os.path.join(ROOT, "data_tools", "export_parquet.py")
    r = subprocess.run([sys.executable, script, str(run), "--out", str(tmp_path / "t.parquet"), "--top-k", "3",
                        "--masks", str(tmp_path / "masks")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    t = pq.read_table(tmp_path / "t.parquet").to_pydict()
    assert t["key"] == [k.decode() for k in KEYS]
    e = np.exp(logits.astype(np.float64) - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    for i in range(n):
        if i == BAD:
            assert t["class_ids"][i] is None and t["mask_path"][i] is None and t["status"][i] == 1
            continue
        order = list(np.argsort(-p[i], kind="stable")[:3])
        assert t["class_ids"][i] == order
        assert np.allclose(t["probs"][i], p[i, order], rtol=1e-6)
        assert (tmp_path / "masks" / t["mask_path"][i]) == png_path(tmp_path / "masks", KEYS[i])


def test_more_than_256_classes_are_16_bit_grayscale_pngs(tmp_path):
    argmax = np.random.default_rng(13).integers(0, 1000, size=(2, 9, 11)).astype(np.int32)
    run = write_run(tmp_path / "run", {"argmax": argmax}, keys=[b"a.jpg", b"b.jpg"], status=np.zeros(2, np.uint8),
                    sizes=None)
    sluice("export", run)
    with Image.open(run / "export" / "b.png") as im:
        assert im.mode.startswith("I")  # PIL: "I;16" (or "I" in older versions) for 16-bit grayscale
        assert np.array_equal(np.array(im).astype(np.int64), argmax[1])


def test_a_second_export_into_the_same_folder_is_refused_while_one_runs(tmp_path):
    import fcntl
    run = write_run(tmp_path / "run", seg_outputs(seed=14))
    out = run / "export"
    out.mkdir()
    with open(out / ".sluice-export.json", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running export holds
        r = sluice("export", run, check=False)
    assert r.returncode == 3 and "another sluice export" in r.stderr, r.stderr
    assert not (out / "a").exists()
