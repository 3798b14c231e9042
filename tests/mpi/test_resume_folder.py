"""Resume as a newcomer types it: the run folder holds the job (OUTPUT/job.toml), so a stopped run
finishes with `sluice run --resume --output DIR` alone, whatever the spelling of the input path
(`imgs/` or `imgs`), with the job saved in report.json fed back with --config, and under mpirun.
Options given with the bare resume override the saved job, and those that would change the
computation are refused.  A --resume of a finished run says so and records nothing.
Every stop waits for a commit observed in the ledgers, never for a fixed time."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, MPI_ENV, ROOT, assemble, fresh_dir, rank_files, report  # noqa: E402
from mpi.test_resume import committed_samples  # noqa: E402
from python.test_images import identity_model  # noqa: E402

N = 48
NP = 2
IMAGE_JOB = ["--resize", 40, "--center-crop", 32, "--batch-size", 4, "--chunk-batches", 1, "--device", "cpu",
             "--cpu-threads", 1, "--outputs", "logits"]
SLOW = ["--throttle-ms", 250, "--throttle-ranks", "0,1"]


def run(cwd, *args, np_=NP, timeout=180):
    cmd = [BIN, *map(str, args)]
    if np_:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", *cmd]
    return subprocess.run(cmd, cwd=cwd, env=MPI_ENV, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder `imgs` of N images and an image model in a scratch working directory, and the
    outputs of an uninterrupted run over them."""
    base = tmp_path_factory.mktemp("resume-folder")
    subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "make_image_dataset.py"), "--out",
                    str(base / "imgs"), "--count", str(N), "--width", "64", "--height", "48", "--workers", "1"],
                   check=True, capture_output=True)
    identity_model(str(base / "id.onnx"), 32, 32)
    p = run(base, "run", "--model", "id.onnx", "--input", "imgs", "--output", "ref", "--quiet", *IMAGE_JOB, np_=None)
    assert p.returncode == 0, p.stderr
    return base, assemble(str(base / "ref"))[1]


def stopped_run(base, out, input_path="imgs/"):
    """Starts the job on NP ranks with `--input imgs/`, stops it with SIGUSR1 to mpirun (which
    forwards it to every rank) once a chunk is committed; returns the CompletedProcess-like triple."""
    fresh_dir(str(base / out))
    cmd = ["mpirun", "-np", str(NP), "--oversubscribe", "--bind-to", "none", BIN, "run", "--model", "id.onnx",
           "--input", input_path, "--output", out, *map(str, IMAGE_JOB), *map(str, SLOW)]
    proc = subprocess.Popen(cmd, cwd=base, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        if len(rank_files(str(base / out))) == NP and committed_samples(str(base / out)) >= 4:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr
    return stdout, stderr


def assert_same_outputs(out, reference):
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    np.testing.assert_array_equal(rows["logits"], reference["logits"])


def test_a_bare_resume_finishes_the_job_saved_in_the_folder_under_mpirun(work):
    base, reference = work
    stdout, stderr = stopped_run(base, "bare")
    # The stop says the exact command; it is the one run next.
    assert "to finish, run: sluice run --resume --output bare" in stdout, stdout
    # The last progress line of a stop is no "ETA 0:00": it says what is left.
    last = [line for line in stderr.splitlines() if "progress:" in line][-1]
    assert "ETA 0:00" not in last and "stopped" in last and "left to resume" in last, last
    saved = open(base / "bare" / "job.toml").read()
    assert f'input = "{base}/imgs"' in saved, saved  # one spelling of the path: no trailing slash
    p = run(base, "run", "--resume", "--output", "bare")
    assert p.returncode == 0, p.stderr
    assert "the job saved in bare/job.toml" in p.stderr, p.stderr
    assert "status: complete" in p.stdout, p.stdout
    # The headline is the job's, over both attempts; this attempt's figures follow it.
    assert f"job: {N} of {N} samples committed over 2 attempts; this attempt (#1): " in p.stdout, p.stdout
    assert_same_outputs(str(base / "bare"), reference)
    # The report's plots and page carry the same headline and are named after the run folder (the
    # job kept the default name).
    plots = base / "bare-plots"
    q = subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "plot_reports.py"),
                        str(base / "bare" / "report.json"), "--out", str(plots)], capture_output=True, text=True)
    assert q.returncode == 0, q.stderr
    assert f"bare: {N} of {N} samples over 2 attempts, complete; the last attempt: " in q.stdout, q.stdout
    assert (plots / "bare-throughput.png").exists() and (plots / "bare.html").exists()
    assert f"{N} of {N} samples over 2 attempts" in (plots / "bare.html").read_text()


def test_resume_accepts_the_input_without_its_trailing_slash(work):
    base, reference = work
    stopped_run(base, "slash", input_path="imgs/")
    p = run(base, "run", "--model", "id.onnx", "--input", "imgs", "--output", "slash", "--resume", *IMAGE_JOB)
    assert p.returncode == 0, p.stderr
    assert_same_outputs(str(base / "slash"), reference)


def test_the_job_saved_in_report_json_resumes_with_config(work):
    base, reference = work
    stopped_run(base, "fromreport", input_path="./imgs//")
    job = base / "fromreport-job.toml"
    job.write_text(report(str(base / "fromreport"))["job_toml"])
    p = run(base, "run", "--config", job, "--resume")
    assert p.returncode == 0, p.stderr
    assert_same_outputs(str(base / "fromreport"), reference)


def test_options_given_with_a_bare_resume_override_or_are_refused(work):
    base, reference = work
    stopped_run(base, "override")
    # A computation-changing option is checked against the folder (one error line, exit 3).
    p = run(base, "run", "--resume", "--output", "override", "--resize", 48)
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("sluice: error:") == 1 and "--resume: rank-00000.h5 was written with resize" in p.stderr, p.stderr
    # One that does not (threads, progress) overrides the saved job.
    p = run(base, "run", "--resume", "--output", "override", "--reader-threads", 1, "--quiet")
    assert p.returncode == 0, p.stderr
    assert "reader-threads = 1" in report(str(base / "override"))["job_toml"]
    assert_same_outputs(str(base / "override"), reference)


def test_a_resume_of_a_finished_run_says_so_and_records_no_attempt(work):
    base, _ = work
    out = base / "ref"
    before = report(str(out))
    mtime = os.stat(out / "outputs.h5").st_mtime_ns
    p = run(base, "run", "--resume", "--output", "ref", "--no-quiet")  # the saved job is quiet
    assert p.returncode == 0, p.stderr
    assert "nothing to do" in p.stderr, p.stderr
    after = report(str(out))
    assert after["attempts"] == before["attempts"]
    assert os.stat(out / "outputs.h5").st_mtime_ns == mtime
    assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True)


def test_export_survives_a_no_op_resume_and_keeps_full_size_masks(work):
    base, _ = work
    run_dir = base / "ref"
    p = run(base, "export", "ref", "--what", "masks", "--original-size", np_=None)
    assert p.returncode == 0, p.stderr
    masks = sorted((run_dir / "export").rglob("*.png"))
    assert len(masks) == N
    before = {m: m.read_bytes() for m in masks}
    # A --resume of the finished run records nothing, so the same export has nothing to redo.
    assert run(base, "run", "--resume", "--output", "ref").returncode == 0
    p = run(base, "export", "ref", "--what", "masks", "--original-size", np_=None)
    assert p.returncode == 0, p.stderr
    assert f"0 masks written, {N} already there" in p.stdout + p.stderr, p.stdout + p.stderr
    # Without --original-size it would replace the full-size masks with model-size ones: refused,
    # with the ways out in the hint, and nothing touched.
    p = run(base, "export", "ref", "--what", "masks", np_=None)
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("sluice: error: export:") == 1 and "original size" in p.stderr, p.stderr
    assert "sluice: hint: add --original-size" in p.stderr and "--overwrite" in p.stderr, p.stderr
    assert {m: m.read_bytes() for m in masks} == before
    p = run(base, "export", "ref", "--what", "masks", "--overwrite", np_=None)
    assert p.returncode == 0, p.stderr
