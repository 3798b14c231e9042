#!/usr/bin/env python3
"""Pictures of Sluice reports (OUTDIR/report.json).

    python3 data_tools/plot_reports.py sluice-out/q/report.json --out plots/        # one job
    python3 data_tools/plot_reports.py a/report.json b/report.json --out plots/     # compare jobs

For each report it writes, into --out:
  <name>-throughput.png  images/s over time, one line per rank, every attempt of the job on one time
                         axis (shaded spans; killed or failed attempts marked in red with their samples)
  <name>-stages.png      each rank's stage busy fractions and stalls over time (the slowest rank
                         first): which stage was the limit, and when
  <name>-ranks.png       per-rank images/s (steady rate as a dot) beside each rank's busy fractions
  <name>.html            one self-contained page with the three figures, the summary and the job's
                         settings
and prints one summary line per report.  Several reports also get ranks.png comparing all ranks.
"""
import argparse
import base64
import html
import json
import os
import re
from datetime import datetime, timezone

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STAGES = ["read", "decode", "h2d", "compute", "d2h", "encode", "write"]
COLORS = {"read": "#4c72b0", "decode": "#8172b3", "h2d": "#64b5cd", "compute": "#55a868", "d2h": "#ccb974",
          "encode": "#937860", "write": "#dd8452", "stall input": "#c44e52", "stall output": "#da8bc3"}
ENDED_COLOR = {"complete": "#55a868", "stopped": "#ccb974", "running": "#999999", "killed": "#c44e52",
               "failed": "#c44e52", "ended": "#999999"}


def slug(text):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "job"


def job_name(report, path=None):
    """The job's name; a job left at the default name ("job") is named after its output folder."""
    name = report.get("name") or "job"
    if name == "job":
        folder = report.get("output_dir") or (os.path.dirname(os.path.abspath(path)) if path else "")
        name = os.path.basename(os.path.normpath(folder)) or name
    return name


def smoothed_rate(series, batches=0):
    """(t_mid, images/s) of a cumulative samples series over windows wide enough for a smooth line:
    at least the series' own step, a few batches (a short run's points are one batch apart or less,
    so raw deltas jump between 0 and twice the rate) and a fortieth of the run."""
    t, v = series["t"], series["samples"]
    if len(t) < 2:
        return deltas(series, "samples")
    end = t[-1]
    step = end / max(1, len(t) - 1)
    window = max(step, end / 40.0, 4.0 * end / batches if batches else 0.0)
    if window >= end:
        return deltas(series, "samples")
    tt, vv = [0.0] + list(t), [0.0] + list(v)

    def at(x):  # cumulative samples at time x, linearly between points
        for i in range(1, len(tt)):
            if tt[i] >= x:
                span = tt[i] - tt[i - 1]
                return vv[i - 1] + (vv[i] - vv[i - 1]) * ((x - tt[i - 1]) / span if span > 0 else 1.0)
        return vv[-1]

    out_t, out_v = [], []
    x = window
    while x <= end + 1e-9:
        out_t.append(x - window / 2)
        out_v.append((at(x) - at(x - window)) / window)
        x += window / 4.0
    return out_t, out_v


def deltas(series, key=None, sub=None):
    """Per-interval values of a cumulative series: (t_mid, value per second or busy fraction)."""
    t = series["t"]
    v = series[key] if sub is None else series[key][sub]
    out_t, out_v = [], []
    prev_t, prev_v = 0.0, 0.0
    for ti, vi in zip(t, v):
        dt = ti - prev_t
        if dt > 1e-9:
            out_t.append((ti + prev_t) / 2)
            out_v.append((vi - prev_v) / dt)
        prev_t, prev_v = ti, vi
    return out_t, out_v


def attempt_series(report):
    """[(attempt record, [rank dicts with start_unix and series])] for every attempt on record."""
    attempts = report.get("attempts") or []
    out = []
    for a in attempts:
        ranks = a.get("ranks") or []
        out.append((a, ranks))
    if not attempts:  # a report from before attempts were recorded: the ranks of this run only
        out.append(({"attempt": report.get("attempt", 0), "ended": "complete" if report["job"]["complete"] else "stopped",
                     "started_unix": min((r.get("start_unix", 0) for r in report["ranks"]), default=0),
                     "samples": report["job"]["samples"]}, report["ranks"]))
    # The current attempt's full-resolution series are in report["ranks"].
    if out and report["ranks"] and any("series" in r for r in report["ranks"]):
        out[-1] = (out[-1][0], report["ranks"])
    return out


def plot_throughput(report, path):
    fig, ax = plt.subplots(figsize=(11, 4.2))
    per_attempt = attempt_series(report)
    t0 = min((a.get("started_unix") or 0 for a, _ in per_attempt if a.get("started_unix")), default=0)
    cmap = plt.get_cmap("tab10")
    ymax = 1.0
    for a, ranks in per_attempt:
        start = (a.get("started_unix") or t0) - t0
        end = (a.get("finished_unix") or 0) - t0 if a.get("finished_unix") else None
        color = ENDED_COLOR.get(a.get("ended", ""), "#999999")
        for r in ranks:
            s = r.get("series")
            if not s or not s.get("t"):
                continue
            base = (r.get("start_unix") or a.get("started_unix") or t0) - t0
            tm, rate = smoothed_rate(s, r.get("batches", 0))
            if not tm:
                continue
            ymax = max(ymax, max(rate))
            ax.plot([base + x for x in tm], rate, color=cmap(r["rank"] % 10), lw=1.4,
                    label=f"rank {r['rank']} ({r.get('host', '')})" if a is per_attempt[-1][0] else None)
            if end is None:
                end = base + s["t"][-1]
        if end is None:
            end = start + 1
        ax.axvspan(start, end, color=color, alpha=0.08)
        ax.axvline(start, color=color, lw=1, ls="--")
        what = a.get("ended", "?")
        ax.text(start, 1.0, f" #{a.get('attempt', 0)} {what}, {a.get('samples', 0)} samples",
                transform=ax.get_xaxis_transform(), va="top", ha="left", fontsize=8, color=color)
    ax.set_ylim(0, ymax * 1.25)
    ax.set_xlabel("seconds since the job's first attempt started")
    ax.set_ylabel("images/s (per rank)")
    ax.set_title(f"{job_name(report)}: throughput over time")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_stages(report, path, max_ranks=8):
    ranks = sorted(report["ranks"], key=lambda r: -r.get("wall_s", 0))[:max_ranks]
    ranks = [r for r in ranks if r.get("series") and r["series"].get("t")]
    if not ranks:
        ranks = sorted(report["ranks"], key=lambda r: -r.get("wall_s", 0))[:1]
    fig, axes = plt.subplots(len(ranks), 1, figsize=(11, 1.2 + 2.1 * len(ranks)), squeeze=False, sharex=True)
    for ax, r in zip(axes[:, 0], ranks):
        s = r.get("series")
        if not s or not s.get("t"):
            ax.text(0.5, 0.5, "no time series in this report", ha="center", transform=ax.transAxes)
            continue
        readers = max(1, r.get("reader_threads", 1))
        writers = max(1, r.get("writer_threads", 1))
        for stage in STAGES:
            if stage not in s["busy"] or not any(s["busy"][stage]):
                continue
            tm, frac = deltas(s, "busy", stage)
            div = readers if stage == "read" else writers if stage == "encode" else 1
            # A batch's busy time is counted when it completes, so an interval that ends just after a
            # long batch can show more than 100 %; one stream (or thread) is never busier than that.
            ax.plot(tm, [min(f / div, 1.0) for f in frac], color=COLORS[stage], lw=1.4,
                    label=stage + (" / thread" if div > 1 else ""))
        for which in ["input", "output"]:
            tm, frac = deltas(s, "stall", which)
            if any(f > 0.01 for f in frac):
                ax.plot(tm, frac, color=COLORS["stall " + which], lw=1, ls=":", label="stall " + which)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("busy")
        ax.set_title(f"rank {r['rank']} on {r.get('host', '')}: {r.get('limit', '')}", fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the rank's pipeline started")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ranks(reports, path):
    rows = []
    for rpath, r in reports:
        for k in r["ranks"]:
            name = f"{r.get('name', '?')} rank {k['rank']}" if len(reports) > 1 else f"rank {k['rank']} ({k.get('host', '')})"
            rows.append((name, k))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 1.6 + 0.42 * len(rows)))
    y = list(range(len(rows)))
    ax1.barh(y, [k["images_per_s"] for _, k in rows], color="#4c72b0", label="images/s")
    ax1.plot([k["steady_images_per_s"] for _, k in rows], y, "o", color="#c44e52", label="steady images/s")
    ax1.set_yticks(y, [n for n, _ in rows], fontsize=8)
    ax1.invert_yaxis()
    ax1.set_xlabel("images/s")
    # Above the bars: below them it would cover the axis label.
    ax1.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, borderaxespad=0.2)
    kinds = STAGES + ["stall input", "stall output"]
    width = 0.8 / len(kinds)
    for i, stage in enumerate(kinds):
        vals = []
        for _, k in rows:
            vals.append(k["stall"][stage.split()[1]] if stage.startswith("stall") else k["busy"].get(stage, 0.0))
        ax2.barh([v + i * width - 0.4 for v in y], vals, height=width, color=COLORS[stage], label=stage)
    ax2.set_yticks(y, [""] * len(rows))
    ax2.invert_yaxis()
    ax2.set_xlabel("fraction of the rank's wall time")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(r):
    job = r["job"]
    attempts = r.get("attempts") or []
    this = (f"{job['samples']} samples on {r['world_size']} rank(s), {job['throughput']:.1f} images/s, "
            f"makespan {job['makespan_s']:.2f} s, imbalance {job['imbalance']:.2f}")
    state = 'complete' if job['complete'] else 'INCOMPLETE'
    if len(attempts) > 1:
        # The headline is the job's (every attempt); the figures after it are the last attempt's.
        done = job["total_samples"] if job["complete"] else job.get("samples_all_attempts", job["samples"])
        line = (f"{job_name(r)}: {done} of {job['total_samples']} samples over {len(attempts)} attempts, {state}; "
                f"the last attempt: {this}")
    else:
        line = f"{job_name(r)}: {this}, {state}"
    if job.get("slowest"):
        s = job["slowest"]
        line += f"; slowest rank {s['rank']} on {s['host']}: {s['limit']}"
    return line


def when(unix):
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if unix else ""


def write_html(report, images, path):
    def img(p):
        with open(p, "rb") as f:
            return f'<img src="data:image/png;base64,{base64.b64encode(f.read()).decode()}" style="max-width:100%">'
    attempts = "".join(
        f"<tr><td>#{a.get('attempt', 0)}</td><td>{html.escape(a.get('started', ''))}</td>"
        f"<td>{a.get('duration_s', 0):.1f} s</td><td>{a.get('world_size', '')}</td>"
        f"<td>{html.escape(', '.join(a.get('hosts', [])))}</td><td>{a.get('samples', 0)}</td>"
        f"<td>{html.escape(a.get('ended', ''))}</td><td>{html.escape(a.get('message', ''))}</td></tr>"
        for a in report.get("attempts") or [])
    ranks = "".join(
        f"<tr><td>{k['rank']}</td><td>{html.escape(k.get('host', ''))}</td><td>{html.escape(k.get('device', ''))}</td>"
        f"<td>{k['samples']}</td><td>{k['wall_s']:.2f}</td><td>{k['images_per_s']:.1f}</td>"
        f"<td>{html.escape(k.get('limit', ''))}</td></tr>" for k in report["ranks"])
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(job_name(report))}: Sluice report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}} pre{{background:#f6f6f6;padding:1em;font-size:12px}}</style></head><body>
<h1>{html.escape(job_name(report))}</h1>
<p>{html.escape(summary(report))}</p>
<p>model {html.escape(report.get('model', ''))} (sha256 {html.escape(report.get('model_sha256', '')[:12])}), input {html.escape(report.get('input', ''))},
backend {html.escape(report.get('backend', ''))} {html.escape(report.get('precision', ''))}, batch {report.get('batch_size', '')},
sluice {html.escape(report.get('sluice_version', ''))} (git {html.escape(report.get('git_commit', ''))}), finished {html.escape(report.get('finished', ''))}</p>
<h2>Throughput over time</h2>{img(images['throughput'])}
<h2>Attempts</h2><table><tr><th>attempt</th><th>started</th><th>took</th><th>ranks</th><th>hosts</th><th>samples</th><th>ended</th><th>message</th></tr>{attempts}</table>
<h2>Stages over time</h2>{img(images['stages'])}
<h2>Ranks</h2><table><tr><th>rank</th><th>host</th><th>device</th><th>samples</th><th>wall s</th><th>images/s</th><th>limit</th></tr>{ranks}</table>
{img(images['ranks'])}
<h2>The job's settings</h2><pre>{html.escape(report.get('job_toml', '(not recorded in this report)'))}</pre>
</body></html>"""
    with open(path, "w") as f:
        f.write(page)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", help="report.json files")
    ap.add_argument("--out", default="sluice-plots", help="folder for the PNG and HTML files")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    reports = [(p, json.load(open(p))) for p in a.reports]
    used = set()
    for path, r in reports:
        name = slug(job_name(r, path))
        if name in used:
            name = slug(f"{name}-{os.path.basename(os.path.dirname(os.path.abspath(path)))}")
        used.add(name)
        print(summary(r))
        images = {k: os.path.join(a.out, f"{name}-{k}.png") for k in ["throughput", "stages", "ranks"]}
        plot_throughput(r, images["throughput"])
        plot_stages(r, images["stages"])
        plot_ranks([(path, r)], images["ranks"])
        write_html(r, images, os.path.join(a.out, f"{name}.html"))
        print(f"wrote {', '.join(images.values())} and {os.path.join(a.out, name + '.html')}")
    if len(reports) > 1:
        plot_ranks(reports, os.path.join(a.out, "ranks.png"))
        print(f"wrote {os.path.join(a.out, 'ranks.png')}")


if __name__ == "__main__":
    main()
