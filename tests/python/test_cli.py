"""The command line: version, help, and bad input that must end before any work with one clear
message, a non-zero status and nothing written (or nothing changed)."""
import hashlib
import os
import sys

import pytest

from support.sluice_test import QUICKSTART, error_lines, fresh_dir, rank_files, sluice

SMALL = ["--config", QUICKSTART, "--samples", "64", "--quiet"]


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_version_prints_version_and_commit():
    p = sluice("--version")
    assert p.returncode == 0
    assert p.stdout.startswith("sluice 0.") and "git " in p.stdout


def test_help_shows_defaults():
    p = sluice("run", "--help")
    assert p.returncode == 0
    assert "--batch-size INT:>=1=32" in p.stdout
    assert "--sharding TEXT=dynamic" in p.stdout


def test_the_resolved_job_is_echoed_at_start(tmp_path):
    p = sluice("run", "--config", QUICKSTART, "--samples", "64", "--batch-size", "16", "--output", tmp_path / "o")
    assert p.returncode == 0, p.stderr
    assert 'name = "quickstart"' in p.stderr and "batch-size = 16" in p.stderr and "samples = 64" in p.stderr
    # Not a terminal: the progress goes as plain lines (for Slurm logs), the last one at 100 %.
    progress = [line for line in p.stderr.splitlines() if "progress:" in line]
    assert progress and "\r" not in p.stderr
    assert progress[-1].startswith("sluice: progress: 64/64 samples (100.0%)"), progress


@pytest.mark.parametrize("np_", [None, 3])
def test_missing_model(tmp_path, np_):
    out = tmp_path / "out"
    p = sluice("run", *SMALL, "--model", tmp_path / "nope.onnx", "--output", out, np_=np_)
    assert p.returncode == 3
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "nope.onnx" in errs[0], p.stderr
    assert not out.exists()


def test_malformed_job_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "jobs/models/quickstart.onnx"\nbatch-size = [\n')
    p = sluice("run", "--config", bad, "--output", tmp_path / "out")
    assert p.returncode == 2
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "bad.toml line 2" in errs[0], p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("np_", [None, 2])
def test_unknown_option(tmp_path, np_):
    p = sluice("run", *SMALL, "--batch-sise", "4", "--output", tmp_path / "out", np_=np_)
    assert p.returncode == 2
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "--batch-sise" in errs[0], p.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_job_file_key(tmp_path):
    bad = tmp_path / "typo.toml"
    bad.write_text('batchsize = 4\n')
    p = sluice("run", "--config", bad, "--output", tmp_path / "out")
    assert p.returncode == 2 and "unknown key 'batchsize'" in p.stderr


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a regular file where a folder should go: even root cannot create under it
    p = sluice("run", *SMALL, "--output", blocker / "out")
    assert p.returncode == 3
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "output folder" in errs[0], p.stderr
    assert blocker.read_text() == "x"


def test_existing_outputs_need_resume_or_overwrite(tmp_path):
    out = str(tmp_path / "out")
    sluice("run", *SMALL, "--output", out, check=True)
    before = {f: sha(f) for f in rank_files(out) + [os.path.join(out, "outputs.h5"), os.path.join(out, "report.json")]}
    p = sluice("run", *SMALL, "--output", out)
    assert p.returncode == 3
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "--resume" in errs[0] and "--overwrite" in errs[0], p.stderr
    assert {f: sha(f) for f in before} == before  # nothing changed
    # --overwrite replaces them; --resume of a complete run has nothing to do and keeps the rows.
    assert sluice("run", *SMALL, "--output", out, "--overwrite").returncode == 0
    p = sluice("run", *SMALL, "--output", out, "--resume")
    assert p.returncode == 0, p.stderr


def test_bad_input_file(tmp_path):
    p = sluice("run", *SMALL, "--input", tmp_path / "missing.h5", "--output", tmp_path / "out")
    assert p.returncode == 3
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "missing.h5" in errs[0], p.stderr


def test_resume_with_a_different_job_is_refused(tmp_path):
    out = str(tmp_path / "out")
    sluice("run", *SMALL, "--output", out, check=True)
    p = sluice("run", *SMALL, "--output", out, "--resume", "--batch-size", "16")
    assert p.returncode == 3 and "batch-size = 32 but this job has batch-size = 16" in p.stderr


def test_plot_reports_summarizes_and_draws(tmp_path):
    import subprocess
    out = str(tmp_path / "run")
    sluice("run", *SMALL, "--output", out, check=True)
    plots = tmp_path / "plots"
    p = subprocess.run([sys.executable, os.path.join(os.path.dirname(QUICKSTART), "..", "data_tools", "plot_reports.py"),
                        os.path.join(out, "report.json"), "--out", str(plots)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "64 samples on 1 rank(s)" in p.stdout and "complete" in p.stdout
    for kind in ("throughput", "stages", "ranks"):
        assert (plots / f"quickstart-{kind}.png").stat().st_size > 10000


def test_export_threads_beyond_the_machine_are_refused_with_the_bound(tmp_path):
    out = tmp_path / "run"
    sluice("run", *SMALL, "--output", out, check=True)
    p = sluice("export", out, "--threads", "100000", timeout=120)
    assert p.returncode == 2, p.stderr
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "--threads 100000 is more threads than this machine can use: at most" in errs[0], p.stderr
    assert "terminate called" not in p.stderr
    assert not (out / "export").exists()


def test_forward_without_a_gpu_gives_the_error_of_run(tmp_path):
    run = sluice("run", *SMALL, "--device", "cuda", "--output", tmp_path / "o")
    if run.returncode == 0:
        pytest.skip("a GPU is visible to this process")
    import numpy as np
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((2, 3, 64, 64), dtype=np.float32))
    p = sluice("forward", "--model", "jobs/models/quickstart.onnx", "--input", x, "--outdir", tmp_path / "f",
               "--device", "cuda")
    # One backend choice (app/job_plan.h) for both commands: the same status and the same words.
    assert p.returncode == run.returncode == 3, p.stderr
    assert error_lines(p.stderr) == error_lines(run.stderr), (p.stderr, run.stderr)
