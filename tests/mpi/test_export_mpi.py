"""The new-user path under mpirun: `sluice run` on 2 ranks, then `mpirun -np 2 sluice export`: rank 0
exports, the other rank leaves it alone, and the masks are the stored argmax rows.  And export
against a job on the same folder: neither may see the other's half-written files."""
import os
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, fresh_dir, pids_of, rank_files, sluice  # noqa: E402

Image = pytest.importorskip("PIL.Image")


def test_run_and_export_under_mpirun(tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--config", QUICKSTART, "--samples", 24, "--batch-size", 4, "--outputs", "argmax", "--output", run,
           "--cpu-threads", 1, "--quiet", np_=2, check=True, timeout=120)
    p = sluice("export", run, np_=2, check=True, timeout=120)
    assert p.stdout.count("masks written") == 1, p.stdout
    with h5py.File(os.path.join(run, "outputs.h5")) as f:
        argmax = f["outputs/argmax"][:]
    for i in range(24):
        with Image.open(os.path.join(run, "export", f"{i}.png")) as im:
            assert np.array_equal(np.array(im), argmax[i])


JOB = ["--config", QUICKSTART, "--samples", 96, "--batch-size", 4, "--chunk-batches", 1, "--outputs", "argmax",
       "--cpu-threads", 1, "--quiet"]


def stored_argmax(run):
    with h5py.File(os.path.join(run, "outputs.h5")) as f:
        return f["outputs/argmax"][:]


def assert_masks_are(out, argmax):
    for i in range(len(argmax)):
        with Image.open(os.path.join(out, f"{i}.png")) as im:
            assert np.array_equal(np.array(im), argmax[i]), f"{i}.png"


def wait_until(what, condition, proc, timeout=120):
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, f"the process ended before {what}: {proc.communicate()}"
        assert time.time() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.02)


def stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def committed(run, old_inodes=()):
    """Ledger records in the run folder's rank files, leaving out the files (inodes) of an earlier run."""
    n = 0
    for path in rank_files(run):
        try:
            if os.stat(path).st_ino in old_inodes:
                continue
        except OSError:
            continue
        try:
            with h5py.File(path, "r", swmr=True, locking=False) as f:
                n += len(f["ledger"])
        except (OSError, KeyError):
            pass
    return n


def test_a_run_with_overwrite_is_refused_while_an_export_reads_the_folder(tmp_path):
    """The export opens outputs.h5 and stops before reading a row (a test hook); a `sluice run
    --overwrite` of the same folder on 2 ranks must then be refused, not move the files away and
    write new rank files under the reader, and the export, resumed, writes the stored masks."""
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", *JOB, "--output", run, np_=2, check=True, timeout=120)
    argmax = stored_argmax(run)
    out = str(tmp_path / "export")
    export = subprocess.Popen([BIN, "export", run, "--out", out, "--test-stop-before-reading"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until("stop of the export", lambda: stopped(export.pid), export)
        p = sluice("run", *JOB, "--output", run, "--overwrite", np_=2, timeout=120)
        assert p.returncode != 0, f"the run went ahead while export read the folder:\n{p.stderr}"
        assert "is in use by another sluice job (sluice export, " in p.stderr, p.stderr
    finally:
        export.send_signal(signal.SIGCONT)
    stdout, stderr = export.communicate(timeout=120)
    assert export.returncode == 0, stderr
    assert f"{len(argmax)} masks written" in stdout, stdout
    assert_masks_are(out, argmax)
    np.testing.assert_array_equal(stored_argmax(run), argmax)  # the earlier run is intact


def test_an_export_is_refused_while_a_run_with_overwrite_replaces_the_folder(tmp_path):
    """`sluice run --overwrite` on 2 ranks has committed its first chunk (seen in a ledger) and is
    stopped there: the export must be refused with one error that says a job is writing the folder
    (not advise --resume, which the job's lock would refuse), and must write nothing; once the run
    ends, the export writes the new run's masks."""
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", *JOB, "--output", run, np_=2, check=True, timeout=120)
    old = {os.stat(path).st_ino for path in rank_files(run)}
    job = subprocess.Popen(["mpirun", "-np", "2", "--oversubscribe", BIN, "run", *map(str, JOB), "--output", run,
                            "--overwrite", "--seed", "11", "--throttle-ms", "100", "--throttle-ranks", "0,1"], cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    ranks = []
    try:
        wait_until("first commit of the run", lambda: committed(run, old) > 0, job)
        ranks = pids_of("sluice", run)
        for pid in ranks:
            os.kill(pid, signal.SIGSTOP)
        # (Batches throttled to 0.1 s leave the run seconds to go after its first commit.)
        assert len(ranks) == 2 and not os.path.exists(os.path.join(run, "outputs.h5")), "the run ended before the stop"
        out = str(tmp_path / "export")
        p = sluice("export", run, "--out", out, np_=2, timeout=120)
        assert p.returncode != 0, f"export went ahead during the run:\n{p.stdout}"
        assert "masks written" not in p.stdout
        assert "--resume" not in p.stderr, p.stderr
        errors = [line for line in p.stderr.splitlines() if line.startswith("sluice: error")]
        assert len(errors) == 1 and "is in use" in errors[0] and "wait for it to end, then export" in errors[0], p.stderr
        assert not os.path.exists(out) or not any(n.endswith(".png") for n in os.listdir(out))
    finally:
        for pid in ranks:
            os.kill(pid, signal.SIGCONT)
    _, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr
    sluice("export", run, "--out", str(tmp_path / "after"), np_=2, check=True, timeout=120)
    assert_masks_are(str(tmp_path / "after"), stored_argmax(run))


@pytest.mark.parametrize("np_", [2, 3])
def test_an_export_error_under_mpirun_is_one_line_with_its_exit_status(tmp_path, np_):
    """Rank 0 fails (no such run folder) while the other ranks have nothing to do: they wait for its
    error line and every rank ends, so mpirun returns the error's status (3, bad input) at once."""
    p = sluice("export", tmp_path / "missing", np_=np_, timeout=120)
    assert p.returncode == 3, (p.returncode, p.stderr)
    errors = [line for line in p.stderr.splitlines() if line.startswith("sluice: error")]
    assert errors == [f"sluice: error: export: {tmp_path / 'missing'}: no such run folder"], p.stderr
