"""--input beyond synthetic data, seen from outside: a .npy array and an HDF5 dataset with
--input-keys run end to end and give the same outputs as the same samples given another way; keys
land in /sample_key of the rank files and outputs.h5 (h5py); --samples limits every input; an input
that cannot be read is one clear error with exit status 3 on every rank, never a hang."""
import os

import h5py
import numpy as np
import pytest

from support.sluice_test import QUICKSTART, error_lines, rank_files, sluice

N = 72
JOB = ["--config", QUICKSTART, "--batch-size", 16, "--chunk-batches", 1, "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The same 72 samples as .npy and as HDF5 /images with keys /names (variable-length strings)."""
    d = tmp_path_factory.mktemp("inputs")
    x = np.random.RandomState(5).uniform(-1, 1, size=(N, 3, 64, 64)).astype(np.float32)
    np.save(d / "x.npy", x)
    names = [f"cam{i % 3}/frame_{i:05d}.png" for i in range(N)]
    with h5py.File(d / "x.h5", "w") as f:
        f["images"] = x
        f["names"] = names  # h5py stores str as variable-length UTF-8
        f["short"] = names[:10]
    return d, x, names


def outputs(outdir):
    with h5py.File(os.path.join(outdir, "outputs.h5"), "r") as f:
        return {name: f["outputs"][name][:] for name in f["outputs"]}, [k.decode() for k in f["sample_key"][:]]


def test_npy_input_runs_end_to_end_like_the_same_samples_in_hdf5(data, tmp_path):
    d, x, _ = data
    sluice("run", *JOB, "--input", d / "x.npy", "--output", tmp_path / "npy", np_=2, check=True)
    sluice("run", *JOB, "--input", d / "x.h5", "--output", tmp_path / "h5", check=True)
    npy, npy_keys = outputs(tmp_path / "npy")
    h5, _ = outputs(tmp_path / "h5")
    for name in h5:
        assert np.array_equal(npy[name], h5[name]), name
    assert npy_keys == [str(i) for i in range(N)]  # no key dataset: the decimal index
    with h5py.File(tmp_path / "npy" / "outputs.h5", "r") as f:
        assert f["sample_key"].is_virtual and f["sample_key"].dtype == np.dtype("S2")
        assert np.array_equal(f["sample_status"][:], np.zeros(N, np.uint8))
        assert f["bad_samples"].shape == (0,) and "sample_size" not in f


def test_input_keys_reach_every_rank_file_and_outputs_h5(data, tmp_path):
    d, _, names = data
    out = tmp_path / "keys"
    sluice("run", *JOB, "--input", d / "x.h5", "--input-keys", "/names", "--output", out, np_=3, check=True)
    _, keys = outputs(out)
    assert keys == names
    width = max(len(n) for n in names)
    for path in rank_files(out):
        with h5py.File(path, "r") as f:
            assert f["sample_key"].dtype == np.dtype(f"S{width}")
            rows = f["sample_index"][:]
            stored = [k.decode() for k in f["sample_key"][:]]
            assert stored == [names[i] for i in rows], path
            assert f.attrs["input_fingerprint"].startswith("hdf5 ")
    p = sluice("inspect", out)
    assert p.returncode == 0, p.stdout
    assert f"/sample_key              S{width}" in p.stdout
    assert f"keys (outputs.h5): {names[0]}, {names[1]}, {names[2]} ... {names[-3]}, {names[-2]}, {names[-1]}" in p.stdout
    assert "bad samples: 0" in p.stdout


@pytest.mark.parametrize("kind", ["npy", "h5"])
def test_samples_takes_the_first_n_of_any_input(data, tmp_path, kind):
    d, _, names = data
    extra = ["--input-keys", "/names"] if kind == "h5" else []
    out = tmp_path / kind
    sluice("run", *JOB, "--input", d / f"x.{kind}", *extra, "--samples", 20, "--output", out, check=True)
    with h5py.File(out / "outputs.h5", "r") as f:
        assert f["outputs"]["logits"].shape[0] == 20
        assert np.array_equal(f["sample_index"][:], np.arange(20))
    _, keys = outputs(out)
    assert keys == (names[:20] if kind == "h5" else [str(i) for i in range(20)])


def test_input_kind_names_what_the_path_does_not_show(data, tmp_path):
    d, _, _ = data
    os.symlink(d / "x.npy", tmp_path / "array.bin")  # no extension: recognized by its magic bytes
    sluice("run", *JOB, "--input", tmp_path / "array.bin", "--samples", 16, "--output", tmp_path / "a", check=True)
    (tmp_path / "data.dat").write_bytes(b"plain text, no input")
    p = sluice("run", *JOB, "--input", tmp_path / "data.dat", "--output", tmp_path / "b")
    assert p.returncode == 3
    assert "--input-kind (synthetic, hdf5, npy, folder, glob, list, tar)" in p.stderr
    p = sluice("run", *JOB, "--input", tmp_path / "data.dat", "--input-kind", "npy", "--output", tmp_path / "c")
    assert p.returncode == 3 and "not a .npy file" in p.stderr


def make_bad_inputs(root):
    """Inputs that fail when opened, with the text their error must contain."""
    (root / "empty").mkdir()
    (root / "empty" / "readme.md").write_text("no images")
    (root / "imgs").mkdir()
    (root / "imgs" / "a.jpg").write_bytes(b"\xff\xd8\xff")
    (root / "list.txt").write_text("imgs/a.jpg\nimgs/missing.jpg\n")
    (root / "keys.h5").write_bytes(b"")
    with h5py.File(root / "keys.h5", "w") as f:
        f["images"] = np.zeros((4, 3, 64, 64), np.float32)
        f["names"] = ["a", "b", "c"]
    return {
        "empty folder": ([root / "empty"], "no image files (.jpg, .jpeg, .png)"),
        "missing file in a list": ([root / "list.txt"], "imgs/missing.jpg does not exist"),
        "missing shards": ([root / "s-{000..002}.tar"], "3 of its 3 shards do not exist"),
        "nothing there": ([root / "nowhere"], "no such file or folder"),
        "keys of the wrong length": ([root / "keys.h5", "--input-keys", "/names"], "it must be [4], one key per sample"),
        "keys for a folder": ([root / "imgs", "--input-keys", "/names"], "--input-keys names a key dataset of an HDF5"),
    }


MPI_CASES = ("empty folder", "missing file in a list", "keys of the wrong length")


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_an_unreadable_input_is_one_clear_error_on_every_rank(tmp_path, np_):
    for what, (args, text) in make_bad_inputs(tmp_path).items():
        if np_ > 1 and what not in MPI_CASES:
            continue  # the same failure in every rank's open: three kinds of it are enough under mpirun
        p = sluice("run", *JOB, "--input", *args, "--output", tmp_path / "out", np_=np_ if np_ > 1 else None,
                   timeout=120)
        assert p.returncode in (2, 3), (what, p.returncode, p.stderr)
        errors = error_lines(p.stderr)
        assert len(errors) == 1 and text in errors[0], (what, p.stderr)
        assert not os.path.exists(tmp_path / "out" / "rank-00000.h5"), what
