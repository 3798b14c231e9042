"""Graceful stop: SIGTERM or SIGUSR1 stops taking work, drains the pipeline, commits, closes the files
and exits 75 (resumable); a second signal exits at once with the ledger still consistent.  Either
way --resume finishes the job with the same outputs as an uninterrupted run."""
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
from mpi.test_resume import assert_no_partial_chunk, rank_pids  # noqa: E402

N = 384
JOB = ["--config", QUICKSTART, "--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = fresh_dir(str(tmp_path_factory.mktemp("sigref") / "clean"))
    sluice("run", *JOB, "--quiet", "--output", out, check=True)
    return assemble(out)[1]


def start_and_signal(out, sig, times, throttle_ms=400):
    # --bind-to none: OpenBLAS then starts threads of its own at load time, which must not die of the signal.
    cmd = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", BIN, "run", *map(str, JOB), "--output", out,
           "--throttle-ms", str(throttle_ms), "--throttle-ranks", "0,1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while len(rank_files(out)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    for k in range(times):
        if k:
            time.sleep(1.3)  # a second request, not a duplicate delivery of the first
        for pid in rank_pids(out):
            os.kill(pid, sig)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, stderr


def finish_and_compare(out, reference):
    p = sluice("run", *JOB, "--quiet", "--output", out, "--resume", np_=1)
    assert p.returncode == 0, p.stderr
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    for name, ref in reference.items():
        assert np.array_equal(rows[name], ref), name


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_one_signal_drains_commits_and_exits_75(tmp_path, reference, sig):
    out = fresh_dir(str(tmp_path / "graceful"))
    rc, stdout, stderr = start_and_signal(out, sig, 1)
    assert rc == 75, stderr
    assert "finishing the chunks in flight" in stderr
    assert "INCOMPLETE (stopped by a signal)" in stdout
    r = report(out)
    assert r["job"]["stopped"] is True and r["job"]["complete"] is False
    assert 0 < r["job"]["samples"] < N
    for path in rank_files(out):
        with h5py.File(path, "r") as f:  # closed cleanly: plain h5py opens it, the end time is set
            assert f.attrs["end_unix"] > 0
    assert_no_partial_chunk(out)
    assert not os.path.exists(os.path.join(out, "outputs.h5"))
    finish_and_compare(out, reference)


def test_a_second_signal_exits_at_once_and_the_ledger_stays_consistent(tmp_path, reference):
    out = fresh_dir(str(tmp_path / "twice"))
    t0 = time.time()
    # A stop drains only the batch in flight, so for the second signal to land during the drain,
    # that batch must outlast the 1.3 s between the signals: 5 s a batch.
    rc, stdout, stderr = start_and_signal(out, signal.SIGTERM, 2, throttle_ms=5000)
    assert rc == 75, stderr
    assert "second signal" in stderr
    assert not os.path.exists(os.path.join(out, "report.json"))  # it did not wait to write one
    assert time.time() - t0 < 30
    finish_and_compare(out, reference)
