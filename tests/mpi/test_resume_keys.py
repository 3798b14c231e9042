"""Keys survive a kill and a resume at another world size: an HDF5 input with --input-keys runs on
2 ranks, every rank is killed with SIGKILL mid-run, and --resume finishes on 3 ranks.  outputs.h5
then holds the uninterrupted run's outputs and, in /sample_key, each sample's own key; in every
rank file each committed row's key is the key of the sample /sample_index names."""
import os
import signal
import subprocess
import time

import h5py
import numpy as np

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, fresh_dir, rank_files, report, sluice
from test_resume import committed_samples, rank_pids

N = 192


def make_input(folder):
    x = np.random.RandomState(9).uniform(-1, 1, size=(N, 3, 64, 64)).astype(np.float32)
    names = [f"shard{i % 4}/sample-{i:04d}.jpg" for i in range(N)]
    path = os.path.join(folder, "in.h5")
    with h5py.File(path, "w") as f:
        f["images"] = x
        f["names"] = np.array(names, dtype="S")  # fixed-length strings this time
    return path, names


def job(path):
    return ["--config", QUICKSTART, "--input", path, "--input-keys", "/names", "--batch-size", 16, "--chunk-batches", 1,
            "--cpu-threads", 1, "--device", "cpu", "--quiet"]


def test_keys_through_a_kill_and_a_resume_on_another_number_of_ranks(tmp_path):
    path, names = make_input(str(tmp_path))
    clean = fresh_dir(str(tmp_path / "clean"))
    sluice("run", *job(path), "--output", clean, check=True)
    _, reference = assemble(clean)

    out = fresh_dir(str(tmp_path / "killed"))
    cmd = ["mpirun", "-np", "2", "--oversubscribe", BIN, "run", *map(str, job(path)), "--output", out,
           "--throttle-ms", "150", "--throttle-ranks", "0,1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while committed_samples(out) < 48 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    pids = rank_pids(out)
    assert len(pids) == 2 and committed_samples(out) < N, "the run ended before it could be killed"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    done = committed_samples(out)
    assert 0 < done < N

    p = sluice("run", *job(path), "--output", out, "--resume", np_=3, timeout=300)
    assert p.returncode == 0, p.stderr
    r = report(out)
    assert r["attempt"] == 1 and r["world_size"] == 3 and r["job"]["pending_samples"] == N - done
    assert len(rank_files(out)) == 3

    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        assert [k.decode() for k in f["sample_key"][:]] == names
        assert np.array_equal(f["sample_index"][:], np.arange(N))
        for name, ref in reference.items():
            assert np.array_equal(f["outputs"][name][:], ref), name
    for rank_file in rank_files(out):
        with h5py.File(rank_file, "r") as f:
            for rec in f["ledger"][:]:
                rows = slice(rec["first_row"], rec["first_row"] + rec["count"])
                index = f["sample_index"][rows]
                assert [k.decode() for k in f["sample_key"][rows]] == [names[i] for i in index], rank_file
