"""`sluice export` writes only inside its folder: --csv paths out of it, the run's own files and
symbolic links already in the export folder are refused with one clear error, and nothing outside
is touched; file names of any legal length are exported (the temporary name is short), and a name
the file system cannot hold is named with its reason while the other samples are still exported."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_export import KEYS, manifest, png_path, seg_outputs, sluice, write_run  # noqa: E402

Image = pytest.importorskip("PIL.Image")


def scores_run(tmp_path, name="run"):
    logits = np.random.default_rng(3).standard_normal((len(KEYS), 5)).astype(np.float32)
    return write_run(tmp_path / name, {"logits": logits})


@pytest.mark.parametrize("where", ["../x.csv", "ABS", "sub/../../x.csv", "../outputs.h5"])
def test_csv_paths_out_of_the_export_folder_are_refused(tmp_path, where):
    run = scores_run(tmp_path)
    before = (run / "outputs.h5").read_bytes()
    target = str(tmp_path / "abs.csv") if where == "ABS" else where
    r = sluice("export", run, "--csv", target, "--overwrite", check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("sluice: error")]
    assert len(errors) == 1 and "--csv" in errors[0] and "inside the export folder" in errors[0], r.stderr
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "abs.csv").exists() and not (run / "x.csv").exists()
    assert (run / "outputs.h5").read_bytes() == before


def test_the_run_folder_itself_is_never_the_export_folder(tmp_path):
    run = scores_run(tmp_path)
    before = (run / "outputs.h5").read_bytes()
    r = sluice("export", run, "--out", run, "--csv", "outputs.h5", "--overwrite", check=False)
    assert r.returncode == 3 and "is the run folder itself" in r.stderr, r.stderr
    assert (run / "outputs.h5").read_bytes() == before
    # Nor through a subfolder of the export that leads back (a link is refused as any link is).
    (run / "export").mkdir()
    os.symlink("..", run / "export" / "up")
    r = sluice("export", run, "--csv", "up/outputs.h5", "--overwrite", check=False)
    assert r.returncode == 3 and "symbolic link" in r.stderr, r.stderr
    assert (run / "outputs.h5").read_bytes() == before


def test_a_linked_subfolder_of_the_export_is_not_followed(tmp_path):
    run = write_run(tmp_path / "run", seg_outputs(seed=21))
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "export").mkdir()
    os.symlink(outside, run / "export" / "a")  # the key a/b/cat.jpg would land in outside/b/cat.png
    r = sluice("export", run, "--overwrite", check=False)
    assert r.returncode == 3, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("sluice: error")]
    assert len(errors) == 1 and "export/a is a symbolic link" in errors[0], r.stderr
    assert list(outside.iterdir()) == []


def test_a_linked_file_of_the_export_is_not_written_through(tmp_path):
    run = write_run(tmp_path / "run", seg_outputs(seed=22))
    victim = tmp_path / "victim.png"
    victim.write_bytes(b"keep")
    (run / "export").mkdir()
    os.symlink(victim, run / "export" / "x.png")
    r = sluice("export", run, "--overwrite", check=False)
    assert r.returncode == 3 and "export/x.png is a symbolic link" in r.stderr, r.stderr
    assert victim.read_bytes() == b"keep"


def test_a_linked_manifest_is_not_appended_to(tmp_path):
    run = write_run(tmp_path / "run", seg_outputs(seed=23))
    victim = tmp_path / "notes.txt"
    victim.write_bytes(b"mine\n")
    (run / "export").mkdir()
    os.symlink(victim, run / "export" / ".sluice-export.json")
    r = sluice("export", run, check=False)
    assert r.returncode == 3 and ".sluice-export.json is a symbolic link" in r.stderr, r.stderr
    assert victim.read_bytes() == b"mine\n"


def test_a_244_byte_file_name_is_exported_and_a_too_long_one_is_named_with_its_reason(tmp_path):
    long_ok = b"k" * 240 + b".jpg"     # exported as 240 + 4 = 244 bytes: legal (255 at most)
    too_long = b"t" * 253 + b".jpg"    # 253 + ".png" = 257 bytes: no file system here takes it
    keys = [long_ok, too_long, b"after.jpg"]
    outs = seg_outputs(n=3, seed=24)
    run = write_run(tmp_path / "run", outs, keys=keys, status=np.zeros(3, np.uint8), sizes=None)
    r = sluice("export", run, check=False)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "2 masks written" in r.stdout, r.stdout
    errors = [line for line in r.stderr.splitlines() if line.startswith("sluice: error")]
    assert len(errors) == 1 and "1 sample(s) not exported" in errors[0] and too_long.decode() in errors[0] \
        and "257 bytes" in errors[0] and "255" in errors[0], r.stderr
    for i in (0, 2):
        with Image.open(png_path(run / "export", keys[i])) as im:
            assert np.array_equal(np.array(im), outs["argmax"][i])
    assert not any(p.name.endswith(".sluice-partial") for p in (run / "export").iterdir())
    assert sum("file" in e for e in manifest(run / "export")) == 2
