"""Dynamic sharding: ranks start on ranges of their own and steal from the slowest, so a slow rank
does fewer batches (one commit each here: `chunks` in the report), and every sample is still
written exactly once."""
import os

import numpy as np

from support.sluice_test import QUICKSTART, assemble, fresh_dir, report, sluice


def test_a_slow_rank_takes_fewer_chunks(tmp_path):
    out = fresh_dir(str(tmp_path / "dyn"))
    n = 1536
    p = sluice("run", "--config", QUICKSTART, "--output", out, "--samples", n, "--batch-size", 16,
               "--chunk-batches", 1, "--cpu-threads", 1, "--prefetch", 2, "--throttle-ms", 800, "--throttle-ranks", 2,
               np_=4, check=True, timeout=600)
    r = report(out)
    chunks = {x["rank"]: x["chunks"] for x in r["ranks"]}
    samples = {x["rank"]: x["samples"] for x in r["ranks"]}
    assert sum(samples.values()) == n
    others = [chunks[k] for k in (0, 1, 3)]
    assert chunks[2] < min(others), (chunks, p.stdout)
    assert chunks[2] * 2 <= np.mean(others), chunks  # far fewer, not just one less
    idx, _ = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(n))


def test_dynamic_sharding_over_tcp_without_shared_memory(tmp_path):
    """Ranks on different nodes talk over the network: force OpenMPI's TCP transport (no shared
    memory between the ranks) and check that the sharding still hands every batch out once."""
    import subprocess
    from support.sluice_test import BIN, MPI_ENV, ROOT
    out = fresh_dir(str(tmp_path / "tcp"))
    cmd = ["mpirun", "-np", "3", "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
           "--mca", "btl_tcp_if_include", "lo",
           BIN, "run", "--config", QUICKSTART, "--output", out, "--samples", "320", "--batch-size", "16",
           "--chunk-batches", "1", "--cpu-threads", "1", "--quiet"]
    p = subprocess.run(cmd, cwd=ROOT, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    r = report(out)
    assert sum(x["chunks"] for x in r["ranks"]) == 20 and all(x["chunks"] > 0 for x in r["ranks"])
    idx, _ = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(320))
