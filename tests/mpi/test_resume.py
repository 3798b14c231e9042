"""Kill -9 and resume: at random moments one rank or every rank is killed; --resume (sometimes with
another number of ranks) redoes only uncommitted chunks.  The final outputs are bit-identical to an
uninterrupted single-rank run, every index appears once, and no partial chunk is visible.  The same
holds for compressed rank files written by several writer threads."""
import os
import random
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, rank_files, pids_of, report, sluice

N = 384
TRIALS = 10  # kill-and-resume trials of plain rank files
COMPRESSED_TRIALS = 4  # ... and of compressed ones
COMPRESSED = ["--compression", 4, "--writer-threads", 3]
JOB = ["--config", QUICKSTART, "--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1,
       "--quiet"]


def rank_pids(outdir):
    """PIDs of the sluice processes writing to `outdir`."""
    return pids_of("sluice", outdir)


def start(outdir, np_, extra=()):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", BIN, "run", *map(str, JOB), "--output", outdir, *map(str, extra)]
    return subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def assert_no_partial_chunk(outdir, padded=False):
    """No rows past the last committed chunk.  With compression (`padded`) each commit starts on a
    fresh HDF5 chunk, so rows between commits may be padding, which no sample index names."""
    for path in rank_files(outdir):
        with h5py.File(path, "r") as f:
            ledger = f["ledger"][:]
            committed = int(sum(r["count"] for r in ledger))
            end = int(max((r["first_row"] + r["count"] for r in ledger), default=0)) if padded else committed
            index = f["sample_index"][:]
            assert index.shape[0] == end, path
            assert int((index >= 0).sum()) == committed, path
            for name in f["outputs"]:
                assert f["outputs"][name].shape[0] == end, (path, name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = fresh_dir(str(tmp_path_factory.mktemp("ref") / "clean"))
    sluice("run", *JOB, "--output", out, check=True)
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    return rows


def kill_and_resume(out, reference, rng, trial, extra=()):
    """Starts the job on 2 to 4 ranks, kills one or all of them with SIGKILL at a random moment,
    resumes on 1 to 3 ranks and checks the outputs; returns the samples the resume had to do."""
    np_ = rng.choice([2, 3, 4])
    victims = "all" if trial % 3 == 0 else "one"
    throttle = 0.15  # seconds a batch on every rank, so the run lasts long enough to be hit
    proc = start(out, np_, extra=["--throttle-ms", int(throttle * 1000), "--throttle-ranks", ",".join(map(str, range(np_))),
                                  *extra])
    # The kill comes once a random number of chunks is committed (read from the ledgers as the run
    # goes), at least 8 chunks before the end: observed progress, not a guess at the machine's speed.
    target = 16 * rng.randint(1, N // 16 - 8)
    deadline = time.time() + 60
    while (committed_samples(out) < target or len(rank_files(out)) < np_) and time.time() < deadline \
            and proc.poll() is None:
        time.sleep(0.02)
    pids = rank_pids(out)
    if victims == "one" and pids:
        pids = [rng.choice(pids)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate(timeout=120)

    # Resume, possibly twice (a resume may itself be interrupted) and with another world size.
    resume_np = rng.choice([1, 2, 3])
    p = sluice("run", *JOB, "--output", out, "--resume", *extra, np_=resume_np, timeout=300)
    assert p.returncode == 0, p.stderr
    r = report(out)
    assert r["attempt"] >= 1
    assert_no_partial_chunk(out, padded=bool(extra))
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    for name, ref in reference.items():
        assert np.array_equal(rows[name], ref), name
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        np.testing.assert_array_equal(f["outputs/logits"][:], reference["logits"])
    return r["job"]["pending_samples"]


_TRIALS_DONE = {}  # (compressed, trial) -> samples its resume had to do: each trial runs once a session


def trial(tmp_path_factory, reference, number, compressed=False):
    """Kill-and-resume trial `number` (its outputs checked); returns the samples its resume had to
    do.  A trial runs once per session, for whichever test asks first: the trial's own test, or
    test_most_kills_landed_mid_run, which runs every trial itself when it runs alone."""
    key = (compressed, number)
    if key not in _TRIALS_DONE:
        out = fresh_dir(str(tmp_path_factory.mktemp("deflated" if compressed else "kill") / str(number)))
        seed = (2000 if compressed else 1000) + number
        _TRIALS_DONE[key] = kill_and_resume(out, reference, random.Random(seed), number,
                                            extra=COMPRESSED if compressed else ())
        if compressed:
            for path in rank_files(out):
                with h5py.File(path, "r") as f:
                    assert f["outputs/logits"].compression == "gzip" and f["outputs/logits"].compression_opts == 4, path
    return _TRIALS_DONE[key]


@pytest.mark.parametrize("number", range(TRIALS))
def test_kill_9_then_resume_gives_the_uninterrupted_outputs(tmp_path_factory, reference, number):
    trial(tmp_path_factory, reference, number)


@pytest.mark.parametrize("number", range(COMPRESSED_TRIALS))
def test_kill_9_then_resume_of_compressed_files_gives_the_uninterrupted_outputs(tmp_path_factory, reference, number):
    """Deflated rank files whose chunks 3 writer threads encode: a kill -9 may land while encoded
    chunks are being stored; the resume still gives the uncompressed reference bit for bit."""
    trial(tmp_path_factory, reference, number, compressed=True)


def test_most_kills_landed_mid_run(tmp_path_factory, reference):
    """The trials above test something only if the kill came after some commits and before the end.
    Self-contained: it takes every trial's outcome from trial(), which runs the trials not run yet."""
    plain = {n: trial(tmp_path_factory, reference, n) for n in range(TRIALS)}
    mid_run = [t for t, pending in plain.items() if 0 < pending < N]
    assert len(mid_run) >= 5, plain
    compressed = {n: trial(tmp_path_factory, reference, n, compressed=True) for n in range(COMPRESSED_TRIALS)}
    assert sum(0 < pending < N for pending in compressed.values()) >= 2, compressed


def committed_samples(out):
    """Samples committed so far in a run folder, read while the writers run (SWMR readers)."""
    total = 0
    for path in rank_files(out):
        try:
            with h5py.File(path, "r", swmr=True) as f:
                total += int(sum(r["count"] for r in f["ledger"][:] if r["count"] > 0))
        except OSError:
            pass  # being created or recovered right now
    return total


def test_four_ranks_with_a_slow_one_killed_and_resumed_twice(tmp_path, reference):
    """The resume acceptance run: 4 ranks, rank 2 slower than the others, killed mid-run (kill -9 of
    every rank), resumed, killed mid-run again (one rank), resumed to the end: outputs.h5 equals a
    clean single-rank run."""
    out = fresh_dir(str(tmp_path / "twice"))
    # Batches slow enough that the whole run outlasts the ledger polling below by seconds, even on a
    # loaded machine (with 60 ms batches a resume could finish between two polls).
    slow = ["--throttle-ms", "150,150,600,150", "--throttle-ranks", "0,1,2,3"]
    for attempt, victims in enumerate(["all", "one"]):
        before = committed_samples(out)
        proc = start(out, 4, extra=slow + (["--resume"] if attempt else []))
        deadline = time.time() + 60
        while committed_samples(out) < before + 48 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        pids = rank_pids(out)
        if len(pids) != 4 or committed_samples(out) >= N:
            proc.kill()
            stdout, stderr = proc.communicate(timeout=60)
            pytest.fail(f"attempt {attempt}: the run ended (exit {proc.returncode}, {committed_samples(out)} of {N} "
                        f"committed, {len(pids)} ranks) before it could be killed\n{stdout[-2000:]}\n{stderr[-3000:]}")
        for pid in (pids if victims == "all" else pids[2:3]):
            os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=120)
    done = committed_samples(out)
    assert 0 < done < N
    p = sluice("run", *JOB, "--output", out, "--resume", *slow, np_=4, timeout=300)
    assert p.returncode == 0, p.stderr
    r = report(out)
    assert r["attempt"] == 2 and r["job"]["pending_samples"] == N - done, r["job"]
    chunks = {k["rank"]: k["chunks"] for k in r["ranks"]}
    assert chunks[2] <= min(chunks[k] for k in (0, 1, 3)), chunks
    assert_no_partial_chunk(out)
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        for name, ref in reference.items():
            assert np.array_equal(f["outputs"][name][:], ref), name
