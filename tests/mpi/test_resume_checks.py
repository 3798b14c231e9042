"""What --resume refuses, so that a finished run never holds what its input does not give: a
--resume --sink null over a stopped run (it would store nothing of what the run lacks, yet call it
complete) and a resume over an input rewritten since the stop (a committed row rewritten in place,
the file's size unchanged; a file of an image folder rewritten), which --accept-changed-input lets
through knowingly.  Every refusal leaves the folder as it was, the earlier report included.  Stops
wait for a commit observed in the ledgers, never for a fixed time."""
import hashlib
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, rank_files, report, sluice  # noqa: E402
from mpi.test_resume import committed_samples  # noqa: E402
from python.test_images import identity_model  # noqa: E402

N = 384  # 24 batches: a stop after 2 of them lands long before the end at 3 ranks
JOB = ["--config", QUICKSTART, "--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1,
       "--device", "cpu", "--quiet"]
SLOW = ["--throttle-ms", 200, "--throttle-ranks", "0,1,2"]


def stopped_run(out, np_, args, at_least=32, total=N):
    """The job on `np_` ranks, stopped with SIGUSR1 to mpirun (forwarded to every rank) once
    `at_least` samples are committed and every rank file exists."""
    fresh_dir(out)
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", BIN, "run", *map(str, args), "--output",
           out, *map(str, SLOW)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if len(rank_files(out)) == np_ and committed_samples(out) >= at_least:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr
    done = committed_samples(out)
    assert 0 < done < total, done
    return done


def folder_state(out):
    """{name: sha256} of every file in the run folder (rank files included)."""
    state = {}
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if os.path.isfile(path) and name != ".sluice.lock":
            state[name] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return state


def errors(stderr):
    return [line for line in stderr.splitlines() if line.startswith("sluice: error:")]


@pytest.mark.parametrize("np_", [2, 3])
def test_resume_with_sink_null_is_refused_and_keeps_the_stopped_runs_report(tmp_path, np_):
    out = str(tmp_path / "stopped")
    stopped_run(out, np_, JOB)
    before = folder_state(out)
    assert report(out)["job"]["stopped"] and not report(out)["job"]["complete"]

    p = sluice("run", *JOB, "--output", out, "--resume", "--sink", "null", np_=np_, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = errors(p.stderr)
    assert len(lines) == 1 and "--resume --sink null cannot finish the run in" in lines[0], p.stderr
    assert "drop --sink null" in p.stderr
    assert "status: complete" not in p.stdout
    assert folder_state(out) == before, "the refusal left the folder, report.json included, as it was"
    assert not os.path.exists(os.path.join(out, "outputs.h5"))

    # A --sink null benchmark (no --resume) beside the run leaves it, and its report, alone.
    p = sluice("run", *JOB, "--output", out, "--sink", "null", np_=np_, timeout=120)
    assert p.returncode == 0, p.stderr
    assert folder_state(out) == before

    # The stopped run still finishes, and its record keeps the stopped attempt.
    p = sluice("run", *JOB, "--output", out, "--resume", np_=np_, timeout=180)
    assert p.returncode == 0, p.stderr
    r = report(out)
    assert r["job"]["complete"] and [a["ended"] for a in r["attempts"]] == ["stopped", "complete"], r["attempts"]
    idx, _ = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))


def npy_input(folder):
    x = np.random.RandomState(3).uniform(-1, 1, size=(N, 3, 64, 64)).astype(np.float32)
    path = os.path.join(folder, "in.npy")
    np.save(path, x)
    return path, x


def committed_indices(out):
    idx = []
    for path in rank_files(out):
        with h5py.File(path, "r") as f:
            index = f["sample_index"][:]
            for r in f["ledger"][:]:
                idx.extend(index[r["first_row"]:r["first_row"] + r["count"]].tolist())
    return sorted(idx)


@pytest.mark.parametrize("np_", [2, 3])
def test_a_committed_row_rewritten_in_place_is_refused_unless_accepted(tmp_path, np_):
    path, x = npy_input(str(tmp_path))
    job = [*JOB, "--input", path]
    out = str(tmp_path / "stopped")
    stopped_run(out, np_, job)
    # A committed row that is none of the three the fingerprint reads (first, middle, last),
    # rewritten in place: the file keeps its size, only its modification time tells.
    row = next(i for i in committed_indices(out) if i not in (0, N // 2, N - 1))
    size = os.path.getsize(path)
    changed = x.copy()
    changed[row] = -changed[row]
    np.save(path, changed)
    assert os.path.getsize(path) == size
    before = folder_state(out)

    p = sluice("run", *job, "--output", out, "--resume", np_=np_, timeout=120)
    assert p.returncode == 3, p.stdout + p.stderr
    lines = errors(p.stderr)
    assert len(lines) == 1, p.stderr
    assert "the input changed since rank-" in lines[0] and "it was modified" in lines[0], lines[0]
    assert "--accept-changed-input" in p.stderr
    assert folder_state(out) == before, "the refusal left the folder as it was"

    # Accepted knowingly: the rows committed before stay, the rest come from the input as it is.
    p = sluice("run", *job, "--output", out, "--resume", "--accept-changed-input", np_=np_, timeout=180)
    assert p.returncode == 0, p.stderr
    assert "--accept-changed-input: the input changed since" in p.stderr, p.stderr
    idx, _ = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    assert report(out)["job"]["complete"]


def test_a_file_of_an_image_folder_rewritten_with_the_same_size_is_refused(tmp_path):
    base = tmp_path
    subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "make_image_dataset.py"), "--out",
                    str(base / "imgs"), "--count", "64", "--width", "64", "--height", "48", "--workers", "1"],
                   check=True, capture_output=True)
    model = identity_model(str(base / "id.onnx"), 32, 32)
    job = ["--model", model, "--input", str(base / "imgs"), "--resize", 40, "--center-crop", 32, "--batch-size", 4,
           "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, "--outputs", "logits", "--quiet"]
    out = str(base / "stopped")
    stopped_run(out, 2, job, at_least=4, total=64)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(base / "imgs") for f in fs)
    victim = files[5]  # not the first, middle or last: only its modification time tells
    data = open(victim, "rb").read()
    with open(victim, "wb") as f:
        f.write(data)
    for np_ in (2, 3):
        p = sluice("run", *job, "--output", out, "--resume", np_=np_, timeout=120)
        assert p.returncode == 3, p.stdout + p.stderr
        lines = errors(p.stderr)
        assert len(lines) == 1 and "a file was modified" in lines[0], p.stderr
    p = sluice("run", *job, "--output", out, "--resume", "--accept-changed-input", np_=3, timeout=180)
    assert p.returncode == 0, p.stderr
    assert report(out)["job"]["complete"]
