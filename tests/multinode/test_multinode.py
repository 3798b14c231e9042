"""Several nodes, simulated on one machine (tests/multinode/simnodes.py: a network and a UTS namespace
per node, a bridge between them, the file system shared), with Open MPI launching over TCP: ranks
know their node from its hostname (node-local rank, the GPU map), every sample is committed once,
the outputs equal a one-rank run's bit for bit, the report names each node, and a node whose clock
is off does not bend the report's times.  A node lost mid-run (every rank on it and its Open MPI
daemon killed) is resumed on the other nodes with fewer ranks: nothing lost or duplicated, the
outputs still the one-rank run's, and the record names the node that went silent."""
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, rank_files, report, sluice  # noqa: E402
from simnodes import SimNodes, why_not  # noqa: E402

N = 384
JOB = ["--config", QUICKSTART, "--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1,
       "--device", "cpu", "--quiet"]
SKEW = 3600.0  # seconds a skewed node's clock is ahead (or behind) of the head node's


@pytest.fixture(scope="module")
def nodes():
    why = why_not()
    if why:
        pytest.skip(why)
    sim = SimNodes(3)
    try:
        yield sim.up()
    finally:
        sim.down()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same job on one rank, no mpirun."""
    out = fresh_dir(str(tmp_path_factory.mktemp("ref") / "one-rank"))
    sluice("run", *JOB, "--output", out, check=True)
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    return rows


def run_on(nodes, placement, args, timeout=240):
    p = subprocess.run(nodes.mpirun(placement, [BIN, "run", *map(str, args)]), cwd=ROOT, env=MPI_ENV,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    return p


def assert_same_as_one_rank(out, reference):
    idx, rows = assemble(out)  # asserts nothing is committed twice
    np.testing.assert_array_equal(idx, np.arange(N))
    for name, ref in reference.items():
        assert np.array_equal(rows[name], ref), name
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        for name, ref in reference.items():
            assert np.array_equal(f["outputs"][name][:], ref), name


def commit_times(out):
    """Every ledger record's time, per rank file."""
    times = {}
    for path in rank_files(out):
        with h5py.File(path, "r") as f:
            times[path] = [float(t) for t in f["ledger"]["time"][:]]
    return times


def assert_times_on_one_clock(out, r):
    """Times that different nodes wrote are on rank 0's clock: the ranks started within seconds of
    each other, every commit falls inside the attempt, and the attempt's duration is the run's."""
    first, last = r["attempts"][0], r["attempts"][-1]
    starts = [k["start_unix"] for k in r["ranks"]]
    assert max(starts) - min(starts) < 60, starts
    assert 0 < last["duration_s"] < 120, last
    for path, times in commit_times(out).items():
        for t in times:
            assert first["started_unix"] - 5 < t < last["finished_unix"] + 5, (path, t, first, last)


@pytest.mark.parametrize("layout", ["2 nodes x 2 ranks", "3 nodes x 1 rank"])
def test_ranks_on_several_nodes_know_their_node_and_give_the_one_rank_outputs(nodes, reference, tmp_path, layout):
    placement = [("node1", 2), ("node2", 2)] if layout.startswith("2") else [("node1", 1), ("node2", 1), ("node3", 1)]
    world = sum(k for _, k in placement)
    # The last node's clock is an hour off the head node's (ahead or behind).
    skewed = placement[-1][0]
    nodes.set_node_env({skewed: {"SLUICE_CLOCK_SKEW_S": SKEW if layout.startswith("2") else -SKEW}})
    out = fresh_dir(str(tmp_path / "out"))
    gpu_map = "3,5"  # node-local rank 0 drives GPU 3, node-local rank 1 GPU 5
    p = run_on(nodes, placement, [*JOB, "--output", out, "--gpu-map", gpu_map])
    assert "status: complete" in p.stdout, p.stdout
    assert_same_as_one_rank(out, reference)
    assert len(rank_files(out)) == world

    r = report(out)
    expect_hosts = [n for n, k in placement for _ in range(k)]
    expect_local = [i for _, k in placement for i in range(k)]
    ranks = sorted(r["ranks"], key=lambda k: k["rank"])
    assert [k["host"] for k in ranks] == expect_hosts
    assert [k["local_rank"] for k in ranks] == expect_local
    assert [k["local_size"] for k in ranks] == [k for _, k in placement for _ in range(k)]
    assert [k["gpu"] for k in ranks] == [[3, 5][i] for i in expect_local]
    assert r["nodes"] == len(placement) and r["world_size"] == world
    assert r["attempts"][-1]["hosts"] == [n for n, _ in placement]
    for node, _ in placement:
        assert f" {node} " in p.stdout, f"the table names {node}:\n{p.stdout}"
    # Each rank file says where it was written.
    for path, host in zip(rank_files(out), expect_hosts):
        with h5py.File(path, "r") as f:
            assert f.attrs["host"].decode() == host, path

    # The skewed node's ranks measured their clock against rank 0's and took the difference out.
    for k in ranks:
        off = k["clock_offset_s"]
        if k["host"] == skewed:
            assert abs(abs(off) - SKEW) < 5, (k["rank"], off)
        else:
            assert abs(off) < 1, (k["rank"], off)
    assert_times_on_one_clock(out, r)


def ledger_records(path):
    """Committed records of a rank file that is being written (an SWMR reader), 0 while it is being
    created."""
    try:
        with h5py.File(path, "r", swmr=True) as f:
            return sum(1 for rec in f["ledger"][:] if rec["count"] > 0)
    except (OSError, KeyError):
        return 0


def test_a_node_lost_mid_run_is_resumed_on_the_other_nodes_and_named_in_the_record(nodes, reference, tmp_path):
    # node1 runs rank 0 (and mpirun), node2 ranks 1 and 2, node3 rank 3, an hour ahead.
    placement = [("node1", 1), ("node2", 2), ("node3", 1)]
    nodes.set_node_env({"node3": {"SLUICE_CLOCK_SKEW_S": SKEW}})
    out = fresh_dir(str(tmp_path / "lost"))
    # Batches slowed to 200 ms on every rank: 24 batches over 4 ranks last over a second after the
    # first commits, whatever the machine's speed.
    slow = ["--throttle-ms", 200, "--throttle-ranks", "0,1,2,3"]
    proc = subprocess.Popen(nodes.mpirun(placement, [BIN, "run", *map(str, JOB), "--output", out, *slow]), cwd=ROOT,
                            env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # node2 is lost once each of its ranks has committed a chunk (observed in their ledgers).
        node2_files = [os.path.join(out, f"rank-{r:05d}.h5") for r in (1, 2)]
        deadline = time.time() + 120
        while min(ledger_records(f) for f in node2_files) < 1 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, f"the job ended before node2 could be lost:\n{proc.communicate()[1][-3000:]}"
        killed = nodes.kill_node("node2")
        assert len(killed) >= 3, f"node2 ran its daemon and 2 ranks, {killed} killed"
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, "mpirun reports the lost node"
    before = sum(ledger_records(f) for f in rank_files(out))
    assert 0 < before < N // 16, f"{before} chunks committed: the node was lost mid-run"
    assert report_absent(out), "a lost attempt writes no report"

    # Resume on the two nodes left, with two ranks instead of four.
    p = run_on(nodes, [("node1", 1), ("node3", 1)], [*JOB, "--output", out, "--resume"])
    assert "status: complete" in p.stdout, p.stdout
    assert_same_as_one_rank(out, reference)
    r = report(out)
    lost, resumed = r["attempts"]
    assert lost["ended"] == "killed" and resumed["ended"] == "complete", r["attempts"]
    assert lost["silent_hosts"] == ["node2"] and lost["silent_ranks"] == [1, 2], lost
    assert "node node2 (ranks 1, 2) went silent" in lost["message"], lost["message"]
    assert lost["world_size"] == 4 and resumed["world_size"] == 2 and resumed["hosts"] == ["node1", "node3"]
    assert lost["samples"] + resumed["samples"] == N and resumed["committed_before"] == lost["samples"]
    # node3's clock is an hour ahead: the lost attempt's end (its last commit) is still on rank 0's.
    assert 0 < lost["duration_s"] < 120, lost
    assert_times_on_one_clock(out, r)
    assert not [f for f in os.listdir(out) if f.endswith((".stopping", ".failed"))], "notes are folded into the record"


def report_absent(out):
    return not os.path.exists(os.path.join(out, "report.json"))
