"""What a run says while it runs and after: bad image files named as they are met (a warning line
each, capped per rank with one line for the rest), counted and named in the report table,
report.json and `sluice inspect`, under mpirun -np 2; progress that counts the work in flight of a
run that commits only at its end; and the report's plots: the ranks legend clear of the axis label,
and rate lines of a short run smooth enough to read."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import QUICKSTART, ROOT, fresh_dir, report, sluice  # noqa: E402
from python.test_images import identity_model, make_bad_folder  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "data_tools"))
import plot_reports  # noqa: E402

IMAGES = ["--resize", 40, "--center-crop", 32, "--batch-size", 4, "--chunk-batches", 1, "--device", "cpu",
          "--outputs", "logits", "--cpu-threads", 1]


@pytest.mark.parametrize("np_", [1, 2])
def test_bad_files_are_said_out_loud_counted_and_named(tmp_path, np_):
    folder, reasons = make_bad_folder(str(tmp_path / "imgs"))
    model = identity_model(str(tmp_path / "id.onnx"), 32, 32)
    out = fresh_dir(str(tmp_path / "run"))
    p = sluice("run", "--input", folder, "--model", model, "--output", out, *IMAGES, np_=np_, timeout=180)
    assert p.returncode == 0, p.stderr
    # One warning line per bad file, from the rank that met it, as the run goes.
    for key, reason in reasons.items():
        lines = [line for line in p.stderr.splitlines() if f"bad file '{key}'" in line]
        assert len(lines) == 1 and reason in lines[0] and "warning" in lines[0].lower(), (key, p.stderr)
    # The table, report.json and inspect count and name them.
    assert f"inputs: {len(reasons)} bad file(s) fed as zeros" in p.stdout, p.stdout
    job = report(out)["job"]
    assert job["bad_samples"] == len(reasons)
    assert sorted(b.split(": ", 1)[0] for b in job["bad_files"]) == sorted(reasons)
    q = sluice("inspect", out)
    assert f"bad samples: {len(reasons)}" in q.stdout, q.stdout
    for key, reason in reasons.items():
        assert f"'{key}' (sample " in q.stdout and reason in q.stdout, (key, q.stdout)
    j = json.loads(sluice("inspect", out, "--json").stdout)
    assert len(j["bad_files"]) == len(reasons)


def test_the_warnings_are_capped_with_one_line_for_the_rest(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(14):
        (folder / f"broken-{i:02d}.jpg").write_bytes(b"not a jpeg at all")
    model = identity_model(str(tmp_path / "id.onnx"), 32, 32)
    out = fresh_dir(str(tmp_path / "run"))
    p = sluice("run", "--input", folder, "--model", model, "--output", out, *IMAGES, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len([line for line in p.stderr.splitlines() if "bad file '" in line]) == 10, p.stderr
    assert p.stderr.count("more bad files on this rank") == 1, p.stderr
    assert report(out)["job"]["bad_samples"] == 14
    assert "inputs: 14 bad file(s)" in p.stdout and "report.json names 14" in p.stdout, p.stdout


def test_progress_counts_the_work_in_flight_before_the_only_commit(tmp_path):
    # 96 samples in batches of 16 and one commit at the end (chunk of 8 batches > the run): the
    # committed count stays 0 until the end; a slow batch (0.3 s) leaves time for progress lines.
    out = fresh_dir(str(tmp_path / "run"))
    p = sluice("run", "--config", QUICKSTART, "--samples", 96, "--batch-size", 16, "--chunk-batches", 8,
               "--output", out, "--progress-interval", 0.1, "--throttle-ms", 300, "--throttle-ranks", "0,1",
               "--cpu-threads", 1, np_=2, timeout=180)
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stderr.splitlines() if "progress:" in line]
    early = [line for line in lines[:-1] if line.startswith("sluice: progress: 0/96")]
    in_flight = [line for line in early if re.search(r"~\d+ more in flight, [1-9][0-9.]* images/s", line)]
    assert in_flight, lines
    assert all("ETA ?" not in line for line in in_flight), lines
    assert lines[-1].startswith("sluice: progress: 96/96 samples (100.0%)") and lines[-1].endswith("ETA 0:00"), lines


def test_plots_keep_the_legend_off_the_axis_label_and_smooth_a_short_runs_rate(tmp_path, monkeypatch):
    out = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--config", QUICKSTART, "--samples", 160, "--batch-size", 16, "--chunk-batches", 1, "--output", out,
           "--throttle-ms", 150, "--throttle-ranks", "0,1", "--cpu-threads", 1, "--quiet", np_=2, check=True,
           timeout=180)
    r = report(out)
    figures = []
    monkeypatch.setattr(plot_reports.plt, "close", lambda fig: figures.append(fig))
    plot_reports.plot_ranks([(os.path.join(out, "report.json"), r)], str(tmp_path / "ranks.png"))
    fig = figures[-1]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for label in (ax.xaxis.label, ax.yaxis.label):
            if label.get_text():
                assert not box.overlaps(label.get_window_extent(renderer)), label.get_text()
    # Each rank ran 5 batches of 0.15 s or more: raw deltas of its 0.25 s series jump between 0 and
    # twice the rate; the plotted line stays within a third of its mean in the middle of the run.
    for k in r["ranks"]:
        series = k["series"]
        assert series["interval_s"] <= 0.25 and len(series["t"]) >= 4, series
        t, rate = plot_reports.smoothed_rate(series, k["batches"])
        end = series["t"][-1]
        middle = np.array([v for x, v in zip(t, rate) if 0.25 * end <= x <= 0.75 * end])
        assert len(middle) >= 2, (t, rate)
        assert middle.std() <= middle.mean() / 3, (t, rate)
