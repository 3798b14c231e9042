"""The Python package (python/sluice): a run folder's keys, statuses and outputs as numpy arrays
equal what h5py reads from outputs.h5 and the rank files; follow() yields every commit of a live
job exactly once; sluice.run() launches the real binary, reports progress, returns stopped runs
and raises on failure; the package installs with pip."""
import glob
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, fresh_dir

sys.path.insert(0, os.path.join(ROOT, "python"))
import sluice  # noqa: E402

JOB = dict(config=QUICKSTART, cpu_threads=1, quiet=True, binary=BIN)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A complete quickstart run of 256 samples, and its progress calls."""
    out = str(tmp_path_factory.mktemp("pkg") / "ref")
    calls = []
    r = sluice.run(lambda done, total: calls.append((done, total)), samples=256, output=out, env=MPI_ENV,
                   interval_s=0.05, **JOB)
    return r, calls


def test_a_complete_run_reads_as_outputs_h5_says(reference):
    r, calls = reference
    assert r.complete and r.exit_status == 0 and r.total == 256 and r.committed == 256
    assert calls and calls[-1] == (256, 256)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))  # committed counts only grow
    with h5py.File(os.path.join(r.path, "outputs.h5"), "r") as f:
        keys = [k.rstrip(b"\0").decode() for k in f["sample_key"][:]]
        logits = f["outputs/logits"][:]
        argmax = f["outputs/argmax"][:]
        status = f["sample_status"][:]
    assert list(r.keys()) == keys == [str(i) for i in range(256)]
    assert np.array_equal(r.status(), status)
    assert sorted(r.outputs) == ["argmax", "logits"]
    assert np.array_equal(r["logits"], logits) and np.array_equal(r.array("argmax"), argmax)
    assert r.array("logits", "float16").dtype == np.float16
    d = r.dataset("logits")  # lazy: the virtual dataset, rows read on demand
    assert d.shape == logits.shape and np.array_equal(d[17:21], logits[17:21])
    assert np.array_equal(r.indices(), np.arange(256))
    assert r.bad_samples() == {}
    with pytest.raises(KeyError, match="stores argmax, logits"):
        r.array("embedding")


def test_follow_a_live_job_stop_it_and_resume_it_bit_identically(reference, tmp_path):
    """follow() while the job runs; the stop is sent once follow() has seen the first commit (no
    sleep decides it); the stopped folder reads as its committed rows; sluice.run(resume=True)
    finishes it with the reference's outputs."""
    ref, _ = reference
    out = str(tmp_path / "live")
    cmd = [BIN, "run", "--config", QUICKSTART, "--samples", "256", "--batch-size", "8", "--chunk-batches", "1",
           "--cpu-threads", "1", "--quiet", "--output", out]
    p = subprocess.Popen(cmd, env=MPI_ENV, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        while not glob.glob(os.path.join(out, "rank-[0-9]*[0-9].h5")):  # the rank file, not its .creating
            if p.poll() is not None:
                pytest.fail("the job ended before it wrote a rank file: " + p.stderr.read())
            time.sleep(0.01)
        for batch in sluice.open_run(out).follow(poll_s=0.01, timeout_s=240):
            if not seen:
                p.send_signal(signal.SIGUSR1)  # a clean stop: the batches in flight commit, exit 75
            assert len(batch.keys) == len(batch.indices) == len(batch.status) == batch.outputs["logits"].shape[0]
            seen.append(batch)
        assert p.wait(timeout=120) == 75, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    stopped = sluice.open_run(out)
    assert not stopped.complete and not stopped.running()
    idx = np.concatenate([b.indices for b in seen])
    assert len(np.unique(idx)) == len(idx) == stopped.committed  # each commit once, every commit
    assert np.array_equal(np.sort(idx), stopped.indices())
    order = np.argsort(idx)
    followed = np.concatenate([b.outputs["logits"] for b in seen])[order]
    assert np.array_equal(followed, stopped["logits"])
    assert np.array_equal(stopped["logits"], ref["logits"][stopped.indices()])
    assert [k for b in seen for k in b.keys] == [str(i) for i in idx]
    with pytest.raises(sluice.RunError, match="not complete"):
        stopped.dataset("logits")

    calls = []
    done = sluice.run(lambda c, t: calls.append(c), resume=True, output=out, binary=BIN, quiet=True, env=MPI_ENV)
    assert done.complete and done.exit_status == 0 and calls[-1] == 256
    assert np.array_equal(done["logits"], ref["logits"]) and np.array_equal(done["argmax"], ref["argmax"])


def test_a_failing_run_raises_with_the_error_line_and_status(tmp_path):
    with pytest.raises(sluice.RunError) as e:
        sluice.run(samples=64, batch_size=0, output=str(tmp_path / "bad"), env=MPI_ENV, **JOB)
    assert e.value.status == 2 and "batch-size" in str(e.value) and str(e.value).startswith("sluice: error:")
    with pytest.raises(sluice.RunError, match="needs output="):
        sluice.run(samples=64, **JOB)


def test_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(sluice.RunError, match="no such run folder"):
        sluice.open_run(str(tmp_path / "nope"))
    with pytest.raises(sluice.RunError, match="holds no rank files"):
        sluice.open_run(str(tmp_path))


def test_options_become_the_command_line():
    assert sluice.command_line(dict(batch_size=8, outputs=["logits", "argmax"], resume=True, overwrite=False,
                                    model=None, mean=(0.5, 0.25))) == \
        ["--batch-size", "8", "--outputs", "logits,argmax", "--resume", "--mean", "0.5,0.25"]


def test_the_package_installs_with_pip(tmp_path):
    target = str(tmp_path / "site")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "--target", target, os.path.join(ROOT, "python")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    q = subprocess.run([sys.executable, "-c", "import sluice, os; print(sluice.__file__)"], cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=target), capture_output=True, text=True, timeout=60)
    assert q.returncode == 0 and q.stdout.strip().startswith(target), q.stdout + q.stderr
    fresh_dir(target)
