"""File names that are not UTF-8 (a Latin-1 "caf\\xe9.jpg") through a 2-rank run, `inspect --json`, a
failed attempt and its resume, and `sluice export`: every JSON file stays valid JSON with the name
escaped reversibly (\\xHH for each byte outside UTF-8), and the exported file has the real name."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, MPI_ENV, ROOT, fresh_dir  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from test_export_geometry import identity_model  # noqa: E402

Image = pytest.importorskip("PIL.Image")

LATIN1 = b"caf\xe9.jpg"
ESCAPED = "caf\\xe9.jpg"


def image_folder(path, bad=False):
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(1)
    for name in (LATIN1, b"ok.jpg", b"zz.jpg"):
        target = os.path.join(os.fsencode(path), name)
        if bad and name == LATIN1:
            open(target, "wb").write(b"not an image")
        else:
            Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(target, format="PNG")
    return path


def sluice(*args, np_=None, timeout=120, check=False):
    """As support.sluice_test.sluice, reading the output as UTF-8 with other bytes as \\xHH (an
    error line quotes the file name as it is on disk)."""
    cmd = [BIN, *map(str, args)]
    if np_:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", *cmd]
    p = subprocess.run(cmd, cwd=ROOT, env=MPI_ENV, capture_output=True, text=True, errors="backslashreplace",
                       timeout=timeout)
    assert not check or p.returncode == 0, f"{cmd} exited {p.returncode}: {p.stderr}"
    return p


def run(folder, out, model, *extra, check=True):
    return sluice("run", "--input", folder, "--model", model, "--output", out, "--outputs", "logits", "--resize",
                  "32x32", "--batch-size", 1, "--chunk-batches", 1, "--device", "cpu", "--quiet", *extra, np_=2,
                  check=check, timeout=120)


def test_a_name_that_is_not_utf8_is_inspected_and_exported_under_its_real_name(tmp_path):
    model = identity_model(str(tmp_path / "identity.onnx"))
    out = fresh_dir(str(tmp_path / "run"))
    run(image_folder(str(tmp_path / "images")), out, model)
    p = sluice("inspect", out, "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.dumps(ESCAPED) in json.dumps(json.loads(p.stdout)), p.stdout
    json.load(open(os.path.join(out, "report.json")))

    p = sluice("export", out, np_=2, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "3 masks written" in p.stdout, p.stdout
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = list(f["sample_key"][:])
        logits = f["outputs/logits"][:]
    row = keys.index(LATIN1)
    with Image.open(os.path.join(os.fsencode(out), b"export", b"caf\xe9.png")) as im:
        assert np.array_equal(np.array(im), logits[row].argmax(0))
    records = [json.loads(line) for line in open(os.path.join(out, "export", ".sluice-export.json"), "rb")]
    assert {"begin": "caf\\xe9.png", "escaped": True} in records
    # The manifest reads back the exact bytes: a rerun finds every file done.
    p = sluice("export", out, np_=2, timeout=120)
    assert "0 masks written, 3 already there" in p.stdout, (p.stdout, p.stderr)


def test_a_failed_attempt_naming_it_stays_on_record_through_the_resume(tmp_path):
    model = identity_model(str(tmp_path / "identity.onnx"))
    out = fresh_dir(str(tmp_path / "run"))
    images = image_folder(str(tmp_path / "images"), bad=True)
    p = run(images, out, model, "--on-bad-sample", "fail", check=False)
    assert p.returncode != 0
    p = run(images, out, model, "--resume", "--on-bad-sample", "skip")
    attempts = json.load(open(os.path.join(out, "attempts.json")))["attempts"]
    assert [a["ended"] for a in attempts] == ["failed", "complete"], attempts
    assert ESCAPED in attempts[0]["message"], attempts[0]
    assert json.load(open(os.path.join(out, "report.json")))["attempts"][0]["ended"] == "failed"


def test_list_entries_above_the_list_folder_are_exported_inside_the_export_folder(tmp_path):
    """A list file in lists/ naming ../data/b.jpg: the 2-rank run keys it so, and export writes
    export/__/data/b.png (with a note) instead of stopping."""
    model = identity_model(str(tmp_path / "identity.onnx"))
    image_folder(str(tmp_path / "data"))
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "l.txt").write_text("../data/ok.jpg\n../data/zz.jpg\n")
    out = fresh_dir(str(tmp_path / "run"))
    run(str(tmp_path / "lists" / "l.txt"), out, model)
    p = sluice("export", out, np_=2, check=True)
    assert "2 masks written" in p.stdout and "so it is " + os.path.join(out, "export", "__", "data", "ok.png") in p.stdout, \
        p.stdout
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        assert list(f["sample_key"][:]) == [b"../data/ok.jpg", b"../data/zz.jpg"]
        logits = f["outputs/logits"][:]
    for i, name in enumerate(["ok.png", "zz.png"]):
        with Image.open(os.path.join(out, "export", "__", "data", name)) as im:
            assert np.array_equal(np.array(im), logits[i].argmax(0))
