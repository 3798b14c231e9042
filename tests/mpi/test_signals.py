"""Stops that keep their promise: a signal to mpirun, to `sluice mpirun`, or to any one rank stops
every rank: each finishes the chunks in flight, commits, closes its rank file, rank 0 writes the
report, and the job exits 75; --resume then finishes it with the outputs of an uninterrupted run.
A second signal exits at once with the ledger still consistent.  Every signal is sent once the run
has committed something (read from the ledgers while it runs), never after a fixed sleep.

OpenMPI 4.1's mpirun cannot forward TERM or INT: it aborts the job (SIGCONT, then SIGTERM and
SIGKILL a second apart) and exits 1.  USR1 it forwards; `sluice mpirun` turns TERM, INT and HUP
into USR1.  The last test pins the plain-mpirun behaviour docs/usage.md describes."""
import json
import os
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, rank_files, report, sluice
from mpi.test_resume import assert_no_partial_chunk, committed_samples, rank_pids

N = 384
JOB = ["--config", QUICKSTART, "--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1]
NP = 2
# A slow batch on every rank, so the run is still going when the signal comes; the signal itself
# waits for observed progress.
SLOW = ["--throttle-ms", 250, "--throttle-ranks", "0,1,2"]
# --bind-to none: OpenBLAS then starts threads of its own at load time, which must not die of the signal.
MPIRUN = ["mpirun", "-np", str(NP), "--oversubscribe", "--bind-to", "none"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = fresh_dir(str(tmp_path_factory.mktemp("sigref") / "clean"))
    sluice("run", *JOB, "--quiet", "--output", out, check=True)
    return assemble(out)[1]


def launch(out, how, extra=(), slow=SLOW):
    args = [*map(str, JOB), "--output", out, *map(str, slow), *map(str, extra)]
    if how == "sluice-mpirun":
        cmd = [BIN, "mpirun", *MPIRUN[1:], "--", *args]
    else:
        cmd = [*MPIRUN, BIN, "run", *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_commits(proc, out, samples):
    """Returns once the ranks committed at least `samples` (and every rank file exists)."""
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if len(rank_files(out)) == NP and committed_samples(out) >= samples:
            return
        time.sleep(0.02)
    raise AssertionError(f"the run ended or stalled before committing {samples} samples (exit {proc.poll()})")


def signal_after_progress(out, how, sig, target, extra=()):
    """Starts the job, sends `sig` to `target` ("launcher" or a rank number) after two commits."""
    proc = launch(out, how, extra)
    wait_for_commits(proc, out, 32)
    if target == "launcher":
        proc.send_signal(sig)
    else:
        pids = sorted(rank_pids(out))
        assert len(pids) == NP, pids
        os.kill(pids[target], sig)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, stderr


def assert_stopped_cleanly(out, rc, stdout, stderr):
    assert rc == 75, stderr
    assert "INCOMPLETE (stopped by a signal)" in stdout, stdout
    r = report(out)
    assert r["job"]["stopped"] is True and r["job"]["complete"] is False
    assert 0 < r["job"]["samples"] < N, r["job"]
    assert len(r["ranks"]) == NP
    for path in rank_files(out):
        with h5py.File(path, "r") as f:  # closed cleanly: plain h5py opens it, the end time is set
            assert f.attrs["end_unix"] > 0, path
    assert_no_partial_chunk(out)
    assert not os.path.exists(os.path.join(out, "outputs.h5"))


def finish_and_compare(out, reference):
    p = sluice("run", *JOB, "--quiet", "--output", out, "--resume", np_=1)
    assert p.returncode == 0, p.stderr
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    for name, ref in reference.items():
        assert np.array_equal(rows[name], ref), name


@pytest.mark.parametrize("how,sig,target,sharding", [
    ("mpirun", signal.SIGUSR1, "launcher", "dynamic"),         # mpirun forwards USR1 to every rank
    ("sluice-mpirun", signal.SIGTERM, "launcher", "dynamic"),  # TERM and INT through `sluice mpirun`
    ("sluice-mpirun", signal.SIGINT, "launcher", "static"),
    ("mpirun", signal.SIGTERM, 1, "static"),                   # one rank told: the others stop too
    ("mpirun", signal.SIGINT, 0, "dynamic"),
    ("mpirun", signal.SIGUSR1, 1, "dynamic"),
], ids=["usr1-to-mpirun", "term-to-sluice-mpirun", "int-to-sluice-mpirun", "term-to-rank-1-static",
        "int-to-rank-0", "usr1-to-rank-1"])
def test_one_signal_stops_every_rank_commits_and_exits_75(tmp_path, reference, how, sig, target, sharding):
    out = fresh_dir(str(tmp_path / "stopped"))
    rc, stdout, stderr = signal_after_progress(out, how, sig, target, ["--sharding", sharding])
    assert_stopped_cleanly(out, rc, stdout, stderr)
    told = stderr.count(f"received {signal.strsignal(sig)}") if how == "mpirun" else stderr.count("received User defined")
    assert told == (NP if target == "launcher" else 1), stderr
    if target != "launcher":
        assert f"rank {target} is stopping" in stderr, stderr
    if how == "sluice-mpirun":
        # mpirun's framed notice of a non-zero exit reads like a crash: one line says what happened.
        assert "Per user-direction, the job has been aborted" not in stderr, stderr
        assert "every rank stopped cleanly and exited 75" in stderr, stderr
    finish_and_compare(out, reference)


def test_sluice_mpirun_still_shows_mpirun_s_notice_when_the_job_failed(tmp_path):
    out = fresh_dir(str(tmp_path / "failed"))
    p = subprocess.run([BIN, "mpirun", *MPIRUN[1:], "--", *map(str, JOB), "--output", out, "--model",
                        str(tmp_path / "missing.onnx")], cwd=ROOT, env=MPI_ENV, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 3, p.stderr
    assert "no such file" in p.stderr, p.stderr
    assert "returned\na non-zero exit code" in p.stderr, p.stderr
    assert "every rank stopped cleanly" not in p.stderr


def test_a_second_signal_exits_at_once_and_the_ledger_stays_consistent(tmp_path, reference):
    out = fresh_dir(str(tmp_path / "twice"))
    # A stop drains only the batch in flight, so for the second signal to land during the drain,
    # that batch must outlast the 1.2 s between the signals: 5 s a batch.
    proc = launch(out, "sluice-mpirun", slow=["--throttle-ms", 5000, "--throttle-ranks", "0,1"])
    wait_for_commits(proc, out, 16)
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.2)  # the second signal must come a second after the first: a repeat within it is one event
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 75, stderr
    assert "second signal" in stderr
    assert not os.path.exists(os.path.join(out, "report.json"))  # it did not wait to write one
    finish_and_compare(out, reference)


def test_term_to_plain_mpirun_aborts_but_keeps_what_was_committed(tmp_path, reference):
    """What docs/usage.md says of plain mpirun and TERM: OpenMPI ends the job within seconds with a
    failure status; the committed chunks survive and --resume finishes the run."""
    out = fresh_dir(str(tmp_path / "aborted"))
    proc = launch(out, "mpirun")
    wait_for_commits(proc, out, 32)
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode not in (0, 75), stderr
    assert time.time() - t0 < 30
    assert committed_samples(out) >= 32
    finish_and_compare(out, reference)


def test_ctrl_c_to_plain_mpirun_stops_cleanly_when_openmpi_gives_the_ranks_time(tmp_path, reference):
    """Ctrl-C to plain mpirun: OpenMPI sends the ranks SIGCONT, then SIGTERM odls_base_sigkill_timeout
    seconds later, then SIGKILL as long again (1 s by default).  The ranks take the SIGTERM as a stop:
    given the time (here 10 s), they commit what is in flight and rank 0 writes the report, so the
    attempt reads as stopped, not killed.  mpirun itself still exits 1."""
    out = fresh_dir(str(tmp_path / "ctrl-c"))
    args = [*map(str, JOB), "--output", out, "--throttle-ms", "2000", "--throttle-ranks", "0,1"]
    env = dict(MPI_ENV, OMPI_MCA_odls_base_sigkill_timeout="10")
    proc = subprocess.Popen([*MPIRUN, BIN, "run", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for_commits(proc, out, 32)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr  # mpirun's own status after an abort
    assert "received Terminated: finishing the chunks in flight" in stderr, stderr
    assert "INCOMPLETE (stopped by a signal)" in stdout, stdout
    r = report(out)
    assert r["job"]["stopped"] is True and r["job"]["complete"] is False
    with open(os.path.join(out, "attempts.json")) as f:
        last = json.load(f)["attempts"][-1]
    assert last["ended"] == "stopped" and "SIGTERM" in last["message"], last
    for path in rank_files(out):
        with h5py.File(path, "r") as f:
            assert f.attrs["end_unix"] > 0, path
    assert_no_partial_chunk(out)
    finish_and_compare(out, reference)
