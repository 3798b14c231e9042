"""The quickstart job under mpirun: every sample written exactly once, whatever the number of ranks
or the sharding, with bit-identical outputs (the CPU backend is deterministic)."""
import os

import h5py
import numpy as np
import pytest

from support.sluice_test import QUICKSTART, assemble, fresh_dir, rank_files, report, sluice

N = 512


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("mpi")
    out = {}
    for np_, sharding in [(1, "dynamic"), (2, "dynamic"), (3, "dynamic"), (3, "static")]:
        d = fresh_dir(str(base / f"np{np_}-{sharding}"))
        p = sluice("run", "--config", QUICKSTART, "--output", d, "--sharding", sharding, "--cpu-threads", "1",
                   np_=np_, check=True)
        out[(np_, sharding)] = (d, p)
    return out


@pytest.mark.parametrize("key", [(1, "dynamic"), (2, "dynamic"), (3, "dynamic"), (3, "static")])
def test_every_sample_index_appears_exactly_once(runs, key):
    d, _ = runs[key]
    assert len(rank_files(d)) == key[0]
    idx, _ = assemble(d)
    np.testing.assert_array_equal(idx, np.arange(N))


@pytest.mark.parametrize("key", [(2, "dynamic"), (3, "dynamic"), (3, "static")])
def test_outputs_are_bit_identical_whatever_the_number_of_ranks(runs, key):
    _, ref = assemble(runs[(1, "dynamic")][0])
    _, got = assemble(runs[key][0])
    assert set(got) == {"logits", "argmax"}
    for name in ref:
        assert got[name].dtype == ref[name].dtype
        assert np.array_equal(got[name], ref[name]), name


def test_outputs_h5_reads_as_one_array_in_sample_order(runs):
    d, _ = runs[(3, "dynamic")]
    _, rows = assemble(d)
    with h5py.File(os.path.join(d, "outputs.h5"), "r") as f:
        assert f["outputs/logits"].shape == (N, 8, 64, 64)
        assert f["outputs/argmax"].dtype == np.uint8
        np.testing.assert_array_equal(f["sample_index"][:], np.arange(N))
        np.testing.assert_array_equal(f["outputs/logits"][:], rows["logits"])
        np.testing.assert_array_equal(f["outputs/argmax"][:], rows["argmax"])
        # The argmax head agrees with the stored logits.
        np.testing.assert_array_equal(f["outputs/argmax"][:], np.argmax(rows["logits"], axis=1))


@pytest.mark.parametrize("key", [(1, "dynamic"), (3, "dynamic"), (3, "static")])
def test_report_per_rank_samples_add_up_to_n(runs, key):
    d, p = runs[key]
    r = report(d)
    assert r["world_size"] == key[0]
    assert len(r["ranks"]) == key[0]
    assert sum(x["samples"] for x in r["ranks"]) == N
    assert r["job"]["samples"] == N and r["job"]["complete"] is True
    assert r["job"]["throughput"] > 0 and r["job"]["makespan_s"] > 0
    assert "complete: all 512 samples committed" in p.stdout
    # The table has one line per rank.
    assert sum(1 for line in p.stdout.splitlines() if line.strip().startswith(tuple(str(i) for i in range(key[0])))) >= key[0]


def test_static_sharding_gives_contiguous_ranges(runs):
    d, _ = runs[(3, "static")]
    firsts = []
    for path in rank_files(d):
        with h5py.File(path, "r") as f:
            idx = f["sample_index"][:]
            assert np.all(np.diff(idx) == 1)
            firsts.append(idx[0])
    assert firsts == sorted(firsts)
