"""The report tells what happened: every attempt of a killed, failed or stopped and resumed job is on
record with its samples and why it ended, each rank has a time series, the slowest rank's limit is
named in words, and plot_reports.py draws it all.  Also: --dry-run explains without writing, job-file
paths are relative to the job file, and --sink null without --output writes nothing."""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, fresh_dir, pids_of, report, sluice

N = 1024
JOB = ["--config", QUICKSTART, "--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1,
       "--series-interval", 0.1]


def start(out, np_, extra=()):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", BIN, "run", *map(str, JOB), "--output", out,
           "--progress-interval", "0.1", *map(str, extra)]
    return subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_progress(proc, at_least):
    """Reads rank 0's progress lines until `at_least` samples are committed."""
    for line in proc.stderr:
        m = re.search(r"progress: (\d+)/", line)
        if m and int(m.group(1)) >= at_least:
            return int(m.group(1))
    raise AssertionError(f"the job ended before {at_least} samples were committed (exit {proc.wait()})")


def sluice_pids(out):
    return pids_of("sluice", out)


def resume(out, np_=2):
    p = sluice("run", *JOB, "--output", out, "--resume", "--quiet", np_=np_, timeout=120)
    assert p.returncode == 0, p.stderr
    return report(out), p.stdout


def check_series(r):
    for k in r["ranks"]:
        s = k["series"]
        assert len(s["t"]) >= 2 and len(s["t"]) == len(s["samples"]) == len(s["busy"]["compute"])
        assert all(a < b for a, b in zip(s["t"], s["t"][1:])), "time goes forward"
        assert all(a <= b for a, b in zip(s["samples"], s["samples"][1:])), "cumulative counts"
        assert s["samples"][-1] == k["samples"], "the last point is the rank's total"
        assert k["limit"].split(":")[0] in ("compute-bound", "input-bound", "output-bound", "copy-bound", "latency-bound")


def test_killed_and_resumed_job_reports_both_attempts_and_plots_them(tmp_path):
    out = fresh_dir(str(tmp_path / "killed"))
    proc = start(out, 2, ["--throttle-ms", 20, "--throttle-ranks", "0,1"])
    wait_for_progress(proc, N // 4)
    for pid in sluice_pids(out):
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    r, table = resume(out)
    attempts = r["attempts"]
    assert [a["ended"] for a in attempts] == ["killed", "complete"], attempts
    assert attempts[0]["samples"] >= N // 4 and attempts[0]["samples"] + attempts[1]["samples"] == N
    assert attempts[1]["committed_before"] == attempts[0]["samples"]
    assert attempts[0]["world_size"] == attempts[1]["world_size"] == 2
    assert r["job"]["samples_all_attempts"] == N and r["job"]["attempts"] == 2
    assert "#0" in table and "killed" in table and "#1" in table, table
    assert re.search(r"slowest: rank \d on \S+: \w+-bound", table), table
    check_series(r)

    plots = tmp_path / "plots"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "plot_reports.py"), os.path.join(out, "report.json"),
                        "--out", str(plots)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    from PIL import Image
    for kind in ["throughput", "stages", "ranks"]:
        img = Image.open(plots / f"quickstart-{kind}.png")
        assert img.size[0] > 600 and img.size[1] > 200
    page = (plots / "quickstart.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "killed" in page and "batch-size = 16" in page


def test_failed_attempt_keeps_the_failing_ranks_message(tmp_path):
    out = fresh_dir(str(tmp_path / "failed"))
    p = sluice("run", *JOB, "--output", out, "--quiet", "--fail-at-batch", 20, "--fail-ranks", 1, np_=2, timeout=120)
    assert p.returncode not in (0, 75), p.stderr
    assert "injected" in p.stderr
    r, _ = resume(out)
    attempts = r["attempts"]
    assert [a["ended"] for a in attempts] == ["failed", "complete"], attempts
    assert "rank 1:" in attempts[0]["message"] and "injected at batch 20" in attempts[0]["message"]
    assert sum(a["samples"] for a in attempts) == N
    assert not [f for f in os.listdir(out) if f.endswith(".failed")], "failure notes are folded into the record"


def test_stopped_attempt_names_the_signal(tmp_path):
    out = fresh_dir(str(tmp_path / "stopped"))
    proc = start(out, 2, ["--throttle-ms", 20, "--throttle-ranks", "0,1"])
    wait_for_progress(proc, N // 8)
    for pid in sluice_pids(out):
        os.kill(pid, signal.SIGUSR1)
    assert proc.wait(timeout=120) == 75
    stopped = report(out)
    assert stopped["attempts"][-1]["ended"] == "stopped" and stopped["attempts"][-1]["message"].startswith("by SIGUSR1")
    r, _ = resume(out)
    assert [a["ended"] for a in r["attempts"]] == ["stopped", "complete"]
    assert r["attempts"][0]["ranks"] and r["attempts"][0]["ranks"][0]["series"]["t"], "the stopped attempt keeps its series"
    assert sum(a["samples"] for a in r["attempts"]) == N


def test_dry_run_explains_and_writes_nothing(tmp_path):
    out = str(tmp_path / "never")
    p = sluice("explain-job", QUICKSTART, "--batch-size", 8, "--output", out)
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(out)
    text = p.stdout
    assert "batch-size = 8   [command line]" in text and "name = \"quickstart\"   [job file]" in text
    assert "prefetch = 4   [job file]" in text or "prefetch = 4   [default]" in text
    assert re.search(r"/outputs/logits  float32\[512,\d+,64,64\]", text) and "a new folder" in text
    p = sluice("run", "--config", QUICKSTART, "--dry-run", "--output", out, np_=2)
    assert p.returncode == 0 and p.stdout.count("what this job would do") == 1 and not os.path.exists(out)


def test_job_file_paths_are_relative_to_the_job_file(tmp_path):
    jobs = tmp_path / "project" / "jobs"
    (jobs / "models").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "jobs", "models", "quickstart.onnx"), jobs / "models" / "tiny.onnx")
    (jobs / "tiny.toml").write_text('model = "models/tiny.onnx"\noutput = "../out/tiny"\nsamples = 64\n'
                                    'sample-shape = [3, 64, 64]\nbatch-size = 16\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = subprocess.run([BIN, "run", "--config", str(jobs / "tiny.toml"), "--quiet"], cwd=elsewhere, env=MPI_ENV,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert os.path.exists(tmp_path / "project" / "out" / "tiny" / "outputs.h5")
    assert not os.listdir(elsewhere)
    with open(tmp_path / "project" / "out" / "tiny" / "report.json") as f:
        toml = json.load(f)["job_toml"]
    assert f'model = "{jobs}/models/tiny.onnx"' in toml, "the echo names paths absolute"


def test_sink_null_without_output_writes_nothing(tmp_path):
    p = subprocess.run([BIN, "run", "--config", QUICKSTART, "--samples", "64", "--sink", "null", "--quiet"],
                       cwd=tmp_path, env=MPI_ENV, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "status: complete" in p.stdout
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("np_", [1, 2])
def test_set_up_is_split_into_parts_that_add_up_to_at_most_the_whole(tmp_path, np_):
    out = tmp_path / "o"
    p = sluice("run", *JOB, "--samples", 256, "--output", out, "--quiet", np_=np_, timeout=120)
    assert p.returncode == 0, p.stderr
    r = report(out)
    for k in r["ranks"]:
        parts = k["setup"]
        seconds = {name: v for name, v in parts.items() if name.endswith("_s")}
        assert set(seconds) == {"input_s", "model_load_s", "share_s", "engine_build_s", "autotune_s",
                                "graph_capture_s", "other_s"}
        assert all(v >= 0 for v in seconds.values()), parts
        assert sum(seconds.values()) <= k["setup_s"] + 1e-6, (parts, k["setup_s"])
        assert sum(seconds.values()) >= k["setup_s"] - 1e-6, "other_s is the rest of the set-up"
        # The CPU engine measures no algorithms and captures no graphs; rank 0 reads the model, the
        # others receive it.
        assert parts["autotune_s"] == parts["graph_capture_s"] == 0
        assert parts["algorithms_measured"] == parts["algorithms_cached"] == 0
        assert parts["engine_build_s"] > 0
        assert (parts["model_load_s"] > 0) == (k["rank"] == 0)
    # The model's digest (hashed while the model is prepared) is the file's.
    model = r["model"] if os.path.isabs(r["model"]) else os.path.join(ROOT, r["model"])
    assert r["model_sha256"] == hashlib.sha256(open(model, "rb").read()).hexdigest()
    # The printed line shows the parts that exist here, and the first batch after them.
    line = next(x for x in p.stdout.splitlines() if x.startswith("set-up: "))
    assert "model load" in line and "engine build" in line and "then the first batch" in line, line
    assert "autotune" not in line and "graph capture" not in line, line
    assert ("model to the ranks" in line) == (np_ > 1), line


@pytest.mark.parametrize("np_", [2, 3])
def test_every_attempt_that_fails_is_on_record_as_failed_none_as_running(tmp_path, np_):
    """--on-bad-sample fail over a folder holding a file whose name is not UTF-8 and is no image:
    the run and two resumes each fail on it (exit 3), and attempts.json then holds three failed
    attempts, the last one too (no later attempt settles it), each with the failing rank's message."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from python.test_images import identity_model
    folder = tmp_path / "imgs"
    subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "make_image_dataset.py"), "--out", str(folder),
                    "--count", "24", "--width", "64", "--height", "48", "--workers", "1"], check=True, capture_output=True)
    with open(os.fsencode(str(folder / "000")) + b"/\xff-bad.jpg", "wb") as f:
        f.write(b"not a JPEG at all, and named in no encoding\n")
    model = identity_model(str(tmp_path / "id.onnx"), 32, 32)
    out = fresh_dir(str(tmp_path / "run"))
    job = ["--model", model, "--input", str(folder), "--resize", 40, "--center-crop", 32, "--batch-size", 4,
           "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, "--outputs", "logits", "--on-bad-sample", "fail",
           "--output", out, "--quiet"]
    for resume in ([], ["--resume"], ["--resume"]):
        # Bytes: the error names the file as it is called.
        p = subprocess.run(["mpirun", "-np", str(np_), "--oversubscribe", BIN, "run", *map(str, job), *resume], cwd=ROOT,
                           env=MPI_ENV, capture_output=True, timeout=120)
        assert p.returncode == 3, p.stderr.decode(errors="replace")
        assert b"\xff-bad.jpg" in p.stderr
        with open(os.path.join(out, "attempts.json")) as f:
            attempts = json.load(f)["attempts"]
        assert attempts[-1]["ended"] == "failed", attempts[-1]
        assert attempts[-1]["finished"] and attempts[-1]["finished_unix"] >= attempts[-1]["started_unix"]
    assert [a["ended"] for a in attempts] == ["failed"] * 3, [(a["attempt"], a["ended"]) for a in attempts]
    assert [a["attempt"] for a in attempts] == [0, 1, 2]
    for a in attempts:
        assert re.match(r"rank \d: ", a["message"]) and "bad sample" in a["message"] and "-bad.jpg" in a["message"], a
