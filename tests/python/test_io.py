"""The HDF5 side seen from outside: outputs.h5 reads with h5py as one array in sample order, the
rank files read while their writer is dead, and `sluice inspect` reports what a folder holds."""
import json
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, rank_files, sluice

# 200 samples in batches of 16, one batch per commit: 13 commits, the last one 8 samples.
JOB = ["--config", QUICKSTART, "--samples", "200", "--batch-size", "16", "--chunk-batches", "1", "--quiet"]


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("io") / "run"
    sluice("run", *JOB, "--output", out, np_=2, check=True)
    return out


def runs(outdir):
    """Runs of consecutive ledger records (in samples and rows) over a folder's rank files."""
    n = 0
    for path in rank_files(outdir):
        with h5py.File(path, "r") as f:
            end = None
            for r in f["ledger"][:]:
                if end != (r["first_index"], r["first_row"]):
                    n += 1
                end = (r["first_index"] + r["count"], r["first_row"] + r["count"])
    return n


def inspect(outdir, *extra):
    return sluice("inspect", outdir, *extra)


def inspect_json(outdir):
    p = inspect(outdir, "--json")
    return p.returncode, json.loads(p.stdout)


def test_outputs_h5_is_the_concatenation_in_sample_order(two_rank_run):
    assert len(rank_files(two_rank_run)) == 2
    idx, parts = assemble(two_rank_run)
    assert np.array_equal(idx, np.arange(200))
    with h5py.File(two_rank_run / "outputs.h5", "r") as f:
        assert np.array_equal(f["sample_index"][:], np.arange(200))
        for name, rows in parts.items():
            d = f["outputs"][name]
            assert d.is_virtual
            assert d.shape == rows.shape and d.dtype == rows.dtype
            assert np.array_equal(d[:], rows), name
            # One mapping per run of consecutive commits (13 commits, but each rank works through a
            # range of its own: 2 runs, a few more if a rank stole from the other), each to a rank
            # file named relative to the folder.
            sources = d.virtual_sources()
            assert len(sources) == runs(two_rank_run) and len(sources) <= 4
            assert {s.file_name for s in sources} <= {"rank-00000.h5", "rank-00001.h5"}
        # A slice in the middle crosses chunks of both ranks.
        assert np.array_equal(f["outputs"]["logits"][30:70], parts["logits"][30:70])


def test_a_compressed_run_reads_the_same_as_an_uncompressed_one(two_rank_run, tmp_path):
    """--compression 4 with 3 writer threads: the rank files are deflated (shuffle first), smaller,
    and outputs.h5 reads exactly what the uncompressed run stored; the short last batch (8 of 16)
    and the padding that compression puts between commits change nothing a reader sees."""
    out = tmp_path / "deflated"
    sluice("run", *JOB, "--output", out, "--compression", 4, "--writer-threads", 3, np_=2, check=True)
    for path in rank_files(out):
        with h5py.File(path, "r") as f:
            for name in ("logits", "argmax"):
                d = f["outputs"][name]
                assert d.compression == "gzip" and d.compression_opts == 4 and d.shuffle, (path, name)
    assert sum(os.path.getsize(p) for p in rank_files(out)) < sum(os.path.getsize(p) for p in rank_files(two_rank_run))
    with h5py.File(two_rank_run / "outputs.h5", "r") as plain, h5py.File(out / "outputs.h5", "r") as packed:
        assert np.array_equal(packed["sample_index"][:], np.arange(200))
        for name in ("logits", "argmax"):
            assert packed["outputs"][name].dtype == plain["outputs"][name].dtype
            assert np.array_equal(packed["outputs"][name][:], plain["outputs"][name][:]), name
    rc, j = inspect_json(out)
    assert rc == 0 and j["coverage"]["complete"]


def test_compression_outside_0_to_9_is_a_usage_error(tmp_path):
    p = sluice("run", *JOB, "--output", tmp_path / "x", "--compression", 12)
    assert p.returncode == 2 and "--compression" in p.stderr
    assert not (tmp_path / "x").exists()


def test_outputs_h5_still_reads_after_the_folder_moves(two_rank_run, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(two_rank_run, moved)
    _, parts = assemble(two_rank_run)
    cwd = os.getcwd()
    os.chdir("/")
    try:
        with h5py.File(moved / "outputs.h5", "r") as f:
            assert np.array_equal(f["outputs"]["argmax"][:], parts["argmax"])
    finally:
        os.chdir(cwd)


def test_inspect_summarizes_a_complete_run(two_rank_run):
    rc, j = inspect_json(two_rank_run)
    assert rc == 0 and j["ok"]
    assert j["total_samples"] == 200
    assert [f["rank"] for f in j["rank_files"]] == [0, 1]
    assert sum(f["rows"] for f in j["rank_files"]) == 200
    assert sum(f["chunks"] for f in j["rank_files"]) == 13
    assert all(f["closed_cleanly"] and f["finished"] for f in j["rank_files"])
    assert j["coverage"] == {"total": 200, "present": 200, "complete": True, "gaps": [], "duplicates": [],
                             "duplicate_count": 0, "out_of_range": 0}
    assert j["outputs_h5"]["present"] and j["outputs_h5"]["ok"]
    names = {d["name"]: d for d in j["datasets"]}
    assert names["/outputs/argmax"]["dtype"] == "uint8"
    assert j["report"]["samples"] == 200 and j["report"]["throughput"] > 0
    table = inspect(two_rank_run)
    assert table.returncode == 0
    assert "complete: each of the 200 samples once" in table.stdout and table.stdout.rstrip().endswith("OK")


def test_inspect_reports_gaps_and_duplicates(two_rank_run, tmp_path):
    gaps = tmp_path / "gaps"
    gaps.mkdir()
    shutil.copy(two_rank_run / "rank-00000.h5", gaps)
    rc, j = inspect_json(gaps)
    assert rc == 1 and not j["ok"]
    rows0 = j["rank_files"][0]["rows"]
    assert j["coverage"]["present"] == rows0 < 200
    assert j["coverage"]["gaps"], j["coverage"]
    assert "INCOMPLETE" in inspect(gaps).stdout

    dups = tmp_path / "dups"
    shutil.copytree(two_rank_run, dups)
    shutil.copy(dups / "rank-00000.h5", dups / "rank-00002.h5")
    rc, j = inspect_json(dups)
    assert rc == 1
    assert j["coverage"]["present"] == 200 and j["coverage"]["gaps"] == []
    assert j["coverage"]["duplicate_count"] == rows0
    assert len(j["coverage"]["duplicates"]) > 0


def test_inspect_errors_are_one_line(tmp_path):
    p = inspect(tmp_path / "nope")
    assert p.returncode != 0 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "nope" in p.stderr
    p = inspect(tmp_path)
    assert p.returncode != 0 and "no rank files" in p.stderr


def test_a_killed_writer_leaves_a_readable_file_and_resume_completes_it(tmp_path):
    out = tmp_path / "killed"
    big = ["--config", QUICKSTART, "--samples", "1500", "--batch-size", "16", "--chunk-batches", "1", "--quiet"]
    proc = subprocess.Popen([BIN, "run", *big, "--output", str(out)], cwd=ROOT, env=MPI_ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Wait for a few commits, then kill -9 while it writes.
    deadline = time.time() + 120
    rows = 0
    while time.time() < deadline and proc.poll() is None:
        if rank_files(out):
            p = inspect(out, "--json")
            if p.stdout:
                rows = json.loads(p.stdout)["rank_files"][0].get("rows", 0)
                if rows >= 64:
                    break
        time.sleep(0.2)
    if proc.poll() is not None:
        pytest.skip("the run finished before it could be killed")
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    rc, j = inspect_json(out)
    assert rc == 1
    f0 = j["rank_files"][0]
    assert not f0["closed_cleanly"] and f0["rows"] >= rows
    assert j["coverage"]["present"] == f0["rows"]
    # h5py reads the committed rows as a SWMR reader, like any reader of a live file would.
    with h5py.File(rank_files(out)[0], "r", libver="latest", swmr=True) as f:
        ledger = f["ledger"][:]
        valid = ledger[ledger["count"] > 0]
        assert valid["count"].sum() >= f0["rows"]
        first = valid[0]
        assert np.array_equal(f["sample_index"][first["first_row"]:first["first_row"] + first["count"]],
                              np.arange(first["first_index"], first["first_index"] + first["count"]))

    sluice("run", *big, "--output", out, "--resume", check=True)
    rc, j = inspect_json(out)
    assert rc == 0 and j["coverage"]["complete"] and j["rank_files"][0]["attempt"] == 1
    with h5py.File(out / "outputs.h5", "r") as f:
        assert np.array_equal(f["sample_index"][:], np.arange(1500))
