"""Never garbage, never loss, once the job runs: an input that changes under the job ends it before
the rows read from it are committed; --overwrite keeps the earlier run until the new one is real;
one job per folder; NaN inputs are counted or refused; `inspect` notices a missing dataset.
Every run has a timeout; events are triggered by observed commits, not sleeps."""
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, rank_files, report, sluice
from mpi.test_resume import committed_samples

N = 256
JOB = ["--config", QUICKSTART, "--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1, "--quiet"]
SLOW = ["--throttle-ms", 250, "--throttle-ranks", "0,1"]


def start(args, np_):
    cmd = [BIN, "run", *map(str, args)]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", *cmd]
    return subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_commits(proc, out, samples):
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if committed_samples(out) >= samples:
            return
        time.sleep(0.02)
    raise AssertionError(f"no {samples} samples committed (exit {proc.poll()})")


def committed_rows(out):
    """(indices, {name: rows}) of every committed row, read as a SWMR reader: a rank file whose
    writer MPI_Abort ended is still marked open."""
    idx, rows = [], {}
    for path in rank_files(out):
        with h5py.File(path, "r", swmr=True) as f:
            keep = [i for r in f["ledger"][:] if r["count"] > 0 for i in range(r["first_row"], r["first_row"] + r["count"])]
            idx.append(f["sample_index"][:][keep])
            for name in f["outputs"]:
                rows.setdefault(name, []).append(f["outputs"][name][:][keep])
    return np.concatenate(idx), {k: np.concatenate(v) for k, v in rows.items()}


def sluice_errors(stderr):
    return [line for line in stderr.splitlines() if line.startswith("sluice: error:")]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """An HDF5 input and the outputs of an uninterrupted run over it."""
    d = tmp_path_factory.mktemp("runtime")
    path = str(d / "images.h5")
    x = np.random.RandomState(1).uniform(-1, 1, (N, 3, 64, 64)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["images"] = x
    out = str(d / "reference")
    sluice("run", *JOB, "--input", path, "--output", out, check=True)
    return {"dir": str(d), "path": path, "data": x, "reference": assemble(out)[1]}


@pytest.mark.parametrize("np_", [1, 2])
def test_an_input_truncated_during_the_run_ends_it_and_no_row_read_from_it_is_committed(images, tmp_path, np_):
    path = str(tmp_path / "shrinking.h5")
    shutil.copy(images["path"], path)
    out = fresh_dir(str(tmp_path / "out"))
    proc = start([*JOB, "--input", path, "--output", out, *SLOW], np_)
    wait_for_commits(proc, out, 32)
    os.truncate(path, os.path.getsize(path) // 2)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, stderr
    errors = sluice_errors(stderr)  # each rank that read after the change says so, then the job ends
    assert 1 <= len(errors) <= np_ and all("changed during the run: its size went from" in e for e in errors), stderr
    # Whatever was committed is the uninterrupted run's rows, never rows of zeros.
    idx, rows = committed_rows(out)
    assert 32 <= len(idx) < N
    for name, ref in images["reference"].items():
        assert np.array_equal(rows[name], ref[idx]), name


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_overwrite_puts_the_earlier_run_back_when_the_new_job_cannot_start(images, tmp_path, np_):
    out = str(tmp_path / "run")
    sluice("run", *JOB, "--output", out, check=True)
    before = {f: os.path.getmtime(f) for f in rank_files(out)}
    huge = [a if a != 16 else 2_000_000_000 for a in JOB]  # a batch no machine can hold
    p = sluice("run", *huge, "--output", out, "--overwrite", np_=np_ if np_ > 1 else None, timeout=60)
    assert p.returncode == 1, p.stderr
    errors = sluice_errors(p.stderr)
    assert len(errors) == 1 and "cannot allocate" in errors[0] and "--batch-size 2000000000" in errors[0], p.stderr
    assert {f: os.path.getmtime(f) for f in rank_files(out)} == before
    assert not [n for n in os.listdir(out) if n.startswith(".sluice-old-")]
    assert sluice("inspect", out).returncode == 0


def test_overwrite_deletes_the_earlier_run_once_the_new_one_committed(tmp_path):
    out = str(tmp_path / "run")
    sluice("run", *JOB, "--output", out, check=True)
    with open(os.path.join(out, "mine.txt"), "w") as f:  # not Sluice's: --overwrite leaves it alone
        f.write("notes\n")
    sluice("run", *JOB, "--output", out, "--overwrite", "--seed", 3, check=True, np_=2)
    assert not [n for n in os.listdir(out) if n.startswith(".sluice-old-")]
    assert os.path.exists(os.path.join(out, "mine.txt"))
    assert report(out)["attempt"] == 0 and len(rank_files(out)) == 2
    assert sluice("inspect", out).returncode == 0


def test_a_second_job_on_a_live_folder_is_refused_naming_the_first(tmp_path):
    out = fresh_dir(str(tmp_path / "live"))
    first = start([*JOB, "--output", out, *SLOW], 1)
    try:
        wait_for_commits(first, out, 16)
        p = sluice("run", *JOB, "--output", out, "--resume", np_=2, timeout=60)
        assert p.returncode == 3, p.stderr
        errors = sluice_errors(p.stderr)
        assert len(errors) == 1 and f"in use by another sluice job (host {os.uname().nodename}, pid {first.pid}," in \
            errors[0], p.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 75
    assert sluice("run", *JOB, "--output", out, "--resume").returncode == 0  # the lock went with its holder


def test_nan_inputs_are_counted_or_refused(images, tmp_path):
    path = str(tmp_path / "nan.h5")
    x = images["data"].copy()
    x[5, 0, 1, 1] = np.nan
    x[200, 2, 0, 0] = -np.inf
    with h5py.File(path, "w") as f:
        f["images"] = x
    out = str(tmp_path / "warn")
    p = sluice("run", *JOB, "--input", path, "--output", out, np_=2, check=True)
    assert report(out)["job"]["nonfinite_rows"] == 2
    assert p.stderr.count("holds NaN or Inf values") >= 1
    p = sluice("run", *JOB, "--input", path, "--output", str(tmp_path / "fail"), "--on-nan", "fail", np_=2, timeout=60)
    assert p.returncode == 3, p.stderr
    # Each rank reads its own shard, so the rank that holds sample 5 and the one that holds
    # sample 200 may both find theirs before the abort reaches them: one error per finder,
    # each naming its own sample, never a second message about the same problem.
    errors = sluice_errors(p.stderr)
    assert 1 <= len(errors) <= 2, p.stderr
    assert all("holds NaN or Inf values (--on-nan fail" in e for e in errors), p.stderr
    assert len({e.split("] ", 1)[1] for e in errors}) == len(errors), p.stderr


def test_inspect_notices_a_missing_dataset_and_a_missing_outputs_h5(tmp_path):
    out = str(tmp_path / "run")
    sluice("run", *JOB, "--output", out, check=True)
    os.remove(os.path.join(out, "outputs.h5"))
    p = sluice("inspect", out)
    assert p.returncode == 1 and "outputs.h5 is missing" in p.stdout, p.stdout
    assert sluice("run", *JOB, "--output", out, "--resume").returncode == 0  # writes it
    assert sluice("inspect", out).returncode == 0
    with h5py.File(rank_files(out)[0], "r+") as f:
        del f["outputs/argmax"]
    p = sluice("inspect", out)
    assert p.returncode == 1 and "dataset /outputs/argmax is missing" in p.stdout, p.stdout
