#!/usr/bin/env python3
"""Plots one or many Sluice reports (OUTDIR/report.json).

    python3 data_tools/plot_reports.py sluice-out/*/report.json --out reports.png

Left: images/s of every rank of every report (steady rate as a dot on the bar), so imbalance shows.
Right: each rank's stage busy fractions and stalls, stacked side by side, so the bottleneck shows
(compute near 1.0 is a busy GPU; a tall input stall means the readers cannot keep up).
Also prints one summary line per report.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STAGES = ["read", "h2d", "compute", "d2h", "write"]


def label(path, r):
    return f"{r.get('name', '?')} ({os.path.basename(os.path.dirname(os.path.abspath(path)))}, {r.get('precision', '')})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--out", default="reports.png")
    a = ap.parse_args()
    reports = [(p, json.load(open(p))) for p in a.reports]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 1.5 + 0.45 * sum(len(r["ranks"]) for _, r in reports)))
    names, rates, steady, busy = [], [], [], []
    for path, r in reports:
        job = r["job"]
        print(f"{label(path, r)}: {job['samples']} samples on {r['world_size']} rank(s), "
              f"{job['throughput']:.1f} images/s, makespan {job['makespan_s']:.2f} s, imbalance {job['imbalance']:.2f}, "
              f"{'complete' if job['complete'] else 'INCOMPLETE'}")
        for k in r["ranks"]:
            names.append(f"{label(path, r)} rank {k['rank']}")
            rates.append(k["images_per_s"])
            steady.append(k["steady_images_per_s"])
            busy.append([k["busy"][s] for s in STAGES] + [k["stall"]["input"], k["stall"]["output"]])
    y = range(len(names))
    ax1.barh(y, rates, color="#4070c0", label="images/s")
    ax1.plot(steady, y, "o", color="#e05050", label="steady images/s")
    ax1.set_yticks(list(y), names, fontsize=8)
    ax1.invert_yaxis()
    ax1.set_xlabel("images/s")
    ax1.legend(loc="lower right")
    width = 0.8 / (len(STAGES) + 2)
    for i, stage in enumerate(STAGES + ["stall input", "stall output"]):
        ax2.barh([v + i * width - 0.4 for v in y], [b[i] for b in busy], height=width, label=stage)
    ax2.set_yticks(list(y), [""] * len(names))
    ax2.invert_yaxis()
    ax2.set_xlabel("fraction of wall time")
    ax2.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
