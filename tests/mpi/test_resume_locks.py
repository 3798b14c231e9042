"""Resume against the locks left on rank files.

A resume recovers the killed attempt's rank files in place, which needs HDF5's exclusive lock on
each.  Three holders can be in its way: a reader (h5py or `sluice inspect` watching the folder: it
holds a shared lock while it reads), a process of the killed attempt still on its way out, and a
live writer.  The first two are waited for, and the resume then ends bit-identical to a clean run;
the third is refused at once, naming it, with the file untouched.  On a file system that refuses
locks the run says to set HDF5_USE_FILE_LOCKING=FALSE, and with it set, kill and resume still work
and the folder lock still keeps a second job out."""
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, pids_of, sluice  # noqa: E402
from mpi.test_resume import committed_samples as committed  # noqa: E402

N = 384
JOB = ["--config", QUICKSTART, "--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1]
SLOW = ["--throttle-ms", "250", "--throttle-ranks", "0,1,2"]

# A process that holds a lock on a rank file until a line arrives on its standard input.
HOLDER = r"""
import fcntl, os, sys
kind, path = sys.argv[1], sys.argv[2]
if kind == "reader":
    import h5py
    f = h5py.File(path, "r", swmr=True)          # HDF5 takes a shared lock for as long as it is open
elif kind == "writer":
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)                # what a live writer of the file holds
elif kind == "orphan":
    # The lock outlives the process that took it (a child keeps the open file): what a resume sees
    # of a killed rank whose teardown has not reached its files yet.
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    if os.fork() != 0:
        os._exit(0)
print("holding", flush=True)
sys.stdin.readline()
"""


def killed_run(out, np_, env=None):
    """A run of np_ ranks killed with kill -9 (every rank) once 32 samples are committed."""
    fresh_dir(out)
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", BIN, "run", *map(str, JOB), *SLOW, "--output", out]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env or MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while committed(out) < 32 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    pids = pids_of("sluice", out)
    assert proc.poll() is None and len(pids) == np_, f"the run ended before it could be killed: {proc.communicate()}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    done = committed(out)
    assert 0 < done < N
    return done


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


class Holder:
    def __init__(self, kind, path):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, kind, path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "holding"

    def release(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=30)


class Lines:
    """Reads a process's stderr as it comes; wait_for() blocks until a line holds a phrase."""

    def __init__(self, stream):
        self.lines, self.cond = [], threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_for(self, phrase, timeout=120):
        end = time.time() + timeout
        with self.cond:
            while True:
                if any(l is not None and phrase in l for l in self.lines):
                    return True
                if None in self.lines or time.time() > end:
                    return False
                self.cond.wait(timeout=1)

    def text(self):
        with self.cond:
            return "".join(l for l in self.lines if l is not None)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ref") / "clean")
    sluice("run", *JOB, "--output", out, check=True)
    return assemble(out)


def assert_equal_to(reference, out):
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    for name, ref in reference[1].items():
        assert np.array_equal(rows[name], ref), name


def resume_past(holder, out, np_, phrase):
    """Resumes the killed run in `out` while `holder` holds its lock; the holder lets go only once the
    resume said (`phrase`) that it waits.  Returns the resume's stderr, after asserting it finished."""
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", BIN, "run", *map(str, JOB), "--output", out, "--resume"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = Lines(proc.stderr)
    try:
        assert err.wait_for(phrase), err.text()
        assert proc.poll() is None, err.text()
    finally:
        holder.release()
    proc.wait(timeout=300)
    assert proc.returncode == 0, err.text()
    return err.text()


@pytest.mark.parametrize("kind", ["reader", "orphan"])
@pytest.mark.parametrize("np_", [2, 3])
def test_a_resume_waits_for_a_reader_or_a_dying_holder_of_a_rank_file_and_then_finishes(tmp_path, reference,
                                                                                      kind, np_):
    out = str(tmp_path / "run")
    killed_run(out, 2)
    holder = Holder(kind, os.path.join(out, "rank-00001.h5"))
    stderr = resume_past(holder, out, np_, "waiting for it to let go of the file")
    assert "the lock was released" in stderr
    assert_equal_to(reference, out)


@pytest.mark.parametrize("np_", [2, 3])
def test_a_resume_refuses_at_once_a_rank_file_that_a_live_process_holds_and_leaves_it_untouched(tmp_path, np_):
    out = str(tmp_path / "run")
    killed_run(out, 2)
    path = os.path.join(out, "rank-00001.h5")
    before = sha256(path)
    holder = Holder("writer", path)
    try:
        start = time.time()
        p = sluice("run", *JOB, "--output", out, "--resume", np_=np_, timeout=120,
                   env=dict(MPI_ENV, SLUICE_LOCK_WAIT_S="600"))
        took = time.time() - start
    finally:
        holder.release()
    assert p.returncode == 3, p.stderr
    assert f"is locked by a live process, pid {holder.proc.pid}" in p.stderr, p.stderr
    assert "another job may still be writing it" in p.stderr
    assert took < 60, f"the refusal took {took:.0f} s: it waited for a live holder"
    assert sha256(path) == before
    # Once the holder is gone the same resume finishes.
    p = sluice("run", *JOB, "--output", out, "--resume", np_=np_, timeout=300)
    assert p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def no_flock(tmp_path_factory):
    """A library that makes flock() fail with ENOLCK, as NFS without its lock service does."""
    lib = str(tmp_path_factory.mktemp("shim") / "no_flock.so")
    src = os.path.join(ROOT, "tests", "support", "no_flock.c")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", lib, src], check=True)
    return lib


@pytest.mark.parametrize("np_", [2, 3])
def test_a_file_system_without_locks_gets_one_error_that_names_hdf5_use_file_locking(tmp_path, no_flock, np_):
    out = str(tmp_path / "run")
    env = dict(MPI_ENV, LD_PRELOAD=no_flock)
    p = sluice("run", *JOB, "--output", out, np_=np_, timeout=120, env=env)
    assert p.returncode == 3, p.stderr
    assert "HDF5_USE_FILE_LOCKING=FALSE" in p.stderr, p.stderr
    assert "refuses the file locks" in p.stderr
    # As the hint says: the same job with HDF5's locking off runs (with the folder-lock warning).
    env["HDF5_USE_FILE_LOCKING"] = "FALSE"
    p = sluice("run", *JOB, "--output", out, "--overwrite", np_=np_, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert "offers no file locks" in p.stderr


def test_with_hdf5_locking_off_kill_and_resume_stay_bit_identical_and_the_folder_lock_still_guards(tmp_path,
                                                                                                  reference):
    env = dict(MPI_ENV, HDF5_USE_FILE_LOCKING="FALSE")
    out = str(tmp_path / "run")
    killed_run(out, 2, env=env)
    cmd = ["mpirun", "-np", "2", "--oversubscribe", BIN, "run", *map(str, JOB), *SLOW, "--output", out, "--resume"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # While it runs (a commit of this attempt observed), a second job on the folder is refused.
        before = committed(out)
        deadline = time.time() + 120
        while committed(out) <= before and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        second = sluice("run", *JOB, "--output", out, "--resume", timeout=120, env=env)
        assert second.returncode == 3, second.stderr
        assert "is in use by another sluice job" in second.stderr, second.stderr
    finally:
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert_equal_to(reference, out)


def test_a_resume_waits_for_the_folder_lock_of_a_job_on_its_way_out(tmp_path, reference):
    out = str(tmp_path / "run")
    killed_run(out, 2)
    # The lock outlives the process that took it, as rank 0's does while a killed job is torn down.
    holder = Holder("orphan", os.path.join(out, ".sluice.lock"))
    resume_past(holder, out, 2, "the output folder's lock is still held by")
    assert_equal_to(reference, out)
