"""Range sharding in miniature: 8 ranks and one batch per commit (128 commits), a kill -9 of every
rank once a quarter is committed, a resume on 3 ranks, a stop with --chunk-batches far larger than
the job, damaged rank files.  Every time the outputs are bit-identical to one clean rank, each rank
file holds a few long runs (so outputs.h5 has a few mappings per rank, not one per commit), killed
files are recovered in place and read plainly by h5py, and --resume always finishes."""
import os
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, rank_files, report, sluice
from mpi.test_resume import assert_no_partial_chunk, committed_samples, rank_pids

N = 512
BASE = ["--config", QUICKSTART, "--samples", N, "--batch-size", 4, "--cpu-threads", 1, "--quiet"]
JOB = BASE + ["--chunk-batches", 1]


def start(out, np_, extra=(), job=JOB):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", BIN, "run", *map(str, job),
           "--output", out, *map(str, extra)]
    return subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def runs_of(path):
    """The ledger's records merged into runs that continue each other in samples and rows."""
    with h5py.File(path, "r") as f:
        out = []
        for r in f["ledger"][:]:
            first, count, row = int(r["first_index"]), int(r["count"]), int(r["first_row"])
            if out and out[-1][0] + out[-1][1] == first and out[-1][2] + out[-1][1] == row:
                out[-1][1] += count
            else:
                out.append([first, count, row])
        return out


def assert_identical(out, reference):
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        np.testing.assert_array_equal(f["sample_index"][:], np.arange(N))
        for name, ref in reference.items():
            assert np.array_equal(rows[name], ref), name
            assert np.array_equal(f["outputs"][name][:], ref), name


def r_commits(r):
    return sum(x["chunks"] for x in r["ranks"])


def mappings(out):
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        return {name: len(f["outputs"][name].virtual_sources()) for name in f["outputs"]}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = fresh_dir(str(tmp_path_factory.mktemp("ranges") / "clean"))
    sluice("run", *JOB, "--output", out, check=True)
    return assemble(out)[1]


@pytest.mark.parametrize("sharding", ["dynamic", "static"])
def test_eight_ranks_one_batch_a_commit_are_identical_with_a_few_mappings_per_rank(tmp_path, reference, sharding):
    out = fresh_dir(str(tmp_path / sharding))
    sluice("run", *JOB, "--output", out, "--sharding", sharding, np_=8, check=True, timeout=600)
    assert_identical(out, reference)
    r = report(out)
    assert sum(x["chunks"] for x in r["ranks"]) >= N // 4  # one commit per batch (more at range ends)
    runs = {path: runs_of(path) for path in rank_files(out)}
    assert len(runs) == 8
    if sharding == "static":
        assert all(len(v) == 1 for v in runs.values()), runs  # one contiguous range each
    # Dynamic: each rank's own range plus one run per steal it made; steals happen only when the
    # victim has clearly more left than the thief has in flight, so there are few of them.
    assert sum(len(v) for v in runs.values()) <= 32 < r_commits(r), runs
    assert set(mappings(out).values()) == {sum(len(v) for v in runs.values())}


def test_kill_9_of_eight_ranks_then_resume_on_three(tmp_path, reference):
    out = fresh_dir(str(tmp_path / "killed"))
    proc = start(out, 8, ["--throttle-ms", 150, "--throttle-ranks", ",".join(map(str, range(8)))])
    deadline = time.time() + 120
    while committed_samples(out) < N // 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    pids = rank_pids(out)
    assert len(pids) == 8 and committed_samples(out) < N, "the run ended before it could be killed"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=120)

    p = sluice("run", *JOB, "--output", out, "--resume", np_=3, timeout=600)
    assert p.returncode == 0, p.stderr
    r = report(out)
    assert r["attempt"] == 1 and 0 < r["job"]["pending_samples"] < N
    assert_no_partial_chunk(out)
    assert_identical(out, reference)
    # Ranks 3..7 did not run again: their files were only recovered, in place, and read plainly
    # (no SWMR mode, no h5clear): the writer flag is gone, the rows end at the last commit.
    for path in rank_files(out)[3:]:
        with h5py.File(path, "r") as f:
            committed = sum(int(x["count"]) for x in f["ledger"][:])
            assert f["sample_index"].shape[0] == committed, path
    assert all(v <= 4 * 8 for v in mappings(out).values())


def test_a_stop_commits_the_partial_run_whatever_the_chunk_batches(tmp_path, reference):
    """With --chunk-batches far above the job's batches, nothing is committed until the stop: the
    stop must not wait for a whole commit unit (it once drained the whole job), yet keep what was
    written.  Triggered once rows reach the files, not after a sleep: without a commit there is no
    flush, so SWMR readers see no new extent, but the rows' chunks (512 KB of logits a batch) are
    written as each batch is stored, and the files grow."""
    out = fresh_dir(str(tmp_path / "stop"))
    proc = start(out, 2, ["--chunk-batches", 1000, "--throttle-ms", 300, "--throttle-ranks", "0,1"], job=BASE)
    batch_bytes = 4 * (8 * 64 * 64 * 4 + 64 * 64)
    deadline = time.time() + 120
    while len(rank_files(out)) < 2 and time.time() < deadline:
        time.sleep(0.02)
    empty = sum(os.path.getsize(p) for p in rank_files(out))
    while sum(os.path.getsize(p) for p in rank_files(out)) < empty + 8 * batch_bytes and time.time() < deadline \
            and proc.poll() is None:
        time.sleep(0.05)
    assert committed_samples(out) == 0  # one commit per 1000 batches: none yet
    for pid in rank_pids(out):
        os.kill(pid, signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr
    done = committed_samples(out)
    assert 8 * 4 <= done < N  # at least the 8 batches seen in the files, not the whole job
    for path in rank_files(out):
        assert len(runs_of(path)) <= 1, path  # the partial run: one record
    assert_no_partial_chunk(out)
    p = sluice("run", *BASE, "--output", out, "--resume", "--chunk-batches", 1000, np_=2, timeout=600)
    assert p.returncode == 0, p.stderr
    assert report(out)["job"]["pending_samples"] == N - done
    assert_identical(out, reference)


def test_damaged_rank_files_are_salvaged_and_resume_finishes(tmp_path, reference):
    """A rank file cut short, one with an impossible ledger record and one that is no HDF5 file at
    all: --resume keeps what can be read, redoes the rest and finishes (it once exited 1 forever, a
    Slurm requeue loop); the damaged files stay beside, as *.damaged."""
    out = fresh_dir(str(tmp_path / "damaged"))
    sluice("run", *JOB, "--output", out, np_=3, check=True, timeout=600)
    files = rank_files(out)
    with open(files[0], "r+b") as f:  # cut short: the last 40 % of the file is gone
        f.truncate(int(os.path.getsize(files[0]) * 0.6))
    with h5py.File(files[1], "r+") as f:  # an impossible record in the middle of the ledger
        ledger = f["ledger"]
        k = ledger.shape[0] // 2
        rec = ledger[k]
        rec["count"] = 10 ** 9
        ledger[k] = rec
    with open(files[2], "wb") as f:
        f.write(b"not an HDF5 file at all\n" * 100)

    p = sluice("run", *JOB, "--output", out, "--resume", np_=2, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "damaged" in p.stderr and "cannot be read as a rank file" in p.stderr, p.stderr
    assert sorted(os.path.basename(x) for x in os.listdir(out) if x.endswith(".damaged")) == \
        ["rank-00000.h5.damaged", "rank-00001.h5.damaged", "rank-00002.h5.damaged"]
    r = report(out)
    assert 0 < r["job"]["pending_samples"] < N  # something was saved, something redone
    assert_no_partial_chunk(out)
    assert_identical(out, reference)
