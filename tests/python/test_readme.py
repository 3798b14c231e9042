"""The README's worked examples run as written: each ```sh block marked `<!-- readme-example: NAME -->`
is extracted and run with bash in a scratch folder that holds `build/sluice` (this build) and a
`photos/` folder of 3 photo-like JPEGs (data_tools/make_image_dataset.py, as the README suggests).
The one change is the README's own offline variant: `weights='DEFAULT'` becomes `weights=None`
(and `weights_backbone=None` for the segmenter), as its "Offline" note says, since CI has no network.
Then the files the README promises are checked: a mask per photo at the photo's size, a class table
with the names of imagenet_classes.txt, `sluice inspect` saying OK of both run folders, and a resume
of a finished run that changes nothing.
Every relative link of the README and of docs/ must name a file of the repository."""
import csv
import os
import re
import subprocess
import sys

import pytest
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, MPI_ENV, ROOT, torch_available  # noqa: E402

README = open(os.path.join(ROOT, "README.md")).read()
EXAMPLES = dict(re.findall(r"<!-- readme-example: (\w+) -->\n```sh\n(.*?)```", README, re.S))
OFFLINE = {"masks": ("weights='DEFAULT'", "weights=None, weights_backbone=None"),
           "classes": ("weights='DEFAULT'", "weights=None")}


def test_the_readme_marks_its_worked_examples():
    assert set(EXAMPLES) == {"masks", "classes", "resume", "text"}, EXAMPLES.keys()
    # The torch commands name the Python that has torch (Debian's), not the tools' python3.
    for name in ("masks", "classes"):
        assert EXAMPLES[name].startswith("/usr/bin/python3 -c"), EXAMPLES[name]
        assert OFFLINE[name][0] in EXAMPLES[name]
    assert "Offline" in README and "weights=None" in README and "weights_backbone=None" in README


@pytest.mark.parametrize("doc", ["README.md", "slurm/README.md"] + [f"docs/{n}" for n in
                                                                    sorted(os.listdir(os.path.join(ROOT, "docs")))
                                                                    if n.endswith(".md")])
def test_every_relative_link_of_the_docs_exists(doc):
    text = open(os.path.join(ROOT, doc)).read()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert os.path.exists(os.path.join(ROOT, os.path.dirname(doc), target)), (doc, target)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    if not torch_available("/usr/bin/python3"):
        pytest.skip("Debian's python3-torch and python3-torchvision are needed (data_tools/install-deps.sh)")
    d = tmp_path_factory.mktemp("readme")
    (d / "build").mkdir()
    os.symlink(BIN, d / "build" / "sluice")
    subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "make_image_dataset.py"), "--out", str(d / "photos"),
                    "--count", "3", "--workers", "1"], check=True, capture_output=True)
    return d


def run_example(workdir, name):
    body = EXAMPLES[name]
    if name in OFFLINE:
        body = body.replace(*OFFLINE[name])
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=workdir, env=MPI_ENV, capture_output=True,
                       text=True, timeout=800)
    assert p.returncode == 0, f"{name}:\n{body}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    return p


def photos(workdir):
    root = workdir / "photos"
    return sorted(os.path.relpath(os.path.join(a, f), root) for a, _, fs in os.walk(root) for f in fs)


def assert_inspect_ok(workdir, run):
    # The README's `build/sluice inspect runs/photos`; docs/usage.md: OK and exit 0 for a complete run.
    p = subprocess.run([str(workdir / "build" / "sluice"), "inspect", run], cwd=workdir, env=MPI_ENV,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "OK", p.stdout + p.stderr


def test_the_masks_example_writes_a_mask_per_photo_at_its_size(workdir):
    run_example(workdir, "masks")
    assert_inspect_ok(workdir, "runs/photos")
    for key in photos(workdir):
        mask = workdir / "runs" / "photos" / "export" / (os.path.splitext(key)[0] + ".png")
        assert Image.open(mask).size == Image.open(workdir / "photos" / key).size, key


def test_the_classes_example_writes_a_named_class_table(workdir):
    run_example(workdir, "classes")
    assert_inspect_ok(workdir, "runs/classes")
    names = (workdir / "imagenet_classes.txt").read_text().splitlines()
    assert len(names) == 1000 and names[0] == "tench"
    with open(workdir / "runs" / "classes" / "export" / "classes.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["key"] for r in rows) == photos(workdir)
    for r in rows:
        assert names[int(r["class_1"])] == r["label_1"], r


def test_the_resume_example_of_a_finished_run_changes_nothing(workdir):
    report = workdir / "runs" / "classes" / "report.json"
    before = report.read_bytes()
    p = run_example(workdir, "resume")
    assert "nothing to do" in p.stderr, p.stderr
    assert report.read_bytes() == before


def test_the_text_example_writes_one_vector_per_passage(tmp_path):
    """No torch needed: the encoder is the repository's tiny sentence-transformers folder."""
    import numpy as np
    (tmp_path / "build").mkdir()
    os.symlink(BIN, tmp_path / "build" / "sluice")
    os.symlink(os.path.join(ROOT, "tests"), tmp_path / "tests")
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", EXAMPLES["text"]], cwd=tmp_path, env=MPI_ENV,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "pooling mean, L2-normalized, at most 64 tokens" in p.stderr, p.stderr
    e = np.load(tmp_path / "runs" / "text" / "export" / "embeddings.npy")
    assert e.shape == (2, 32) and e.dtype == np.float32
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)
    keys = (tmp_path / "runs" / "text" / "export" / "embeddings.keys.txt").read_text().split()
    assert keys == ["q1", "d1"]
