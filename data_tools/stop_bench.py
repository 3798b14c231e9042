#!/usr/bin/env python3
"""How long a stop takes (the README promises about two batch times, whatever the chunk size).

Runs the quickstart job on 2 ranks with every batch slowed to --batch-ms (a slow GPU) and
--chunk-batches larger than the job, so that a stop that waited for a whole commit unit would run
the job to its end.  Once rows of --after batches reach the rank files (the files grow; observed,
not timed), every rank gets SIGUSR1; the script prints the exit status, the time from the signal to
the exit, and that time in batch times.

    python3 data_tools/stop_bench.py [--bin build/sluice] [--batch-ms 500]
"""
import argparse
import glob
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from support.sluice_test import pids_of  # noqa: E402  (the tests' process finder)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
BATCH = 16
ROW_BYTES = 8 * 64 * 64 * 4 + 64 * 64  # quickstart logits float32 [8,64,64] + argmax uint8 [64,64]


def sluice_pids(out):
    return pids_of("sluice", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "sluice"))
    ap.add_argument("--batch-ms", type=int, default=500)
    ap.add_argument("--after", type=int, default=4, help="batches written before the signal")
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--out", default="/tmp/sluice-stop-bench")
    args = ap.parse_args()
    subprocess.run(["rm", "-rf", args.out], check=True)
    cmd = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", args.bin, "run", "--config",
           os.path.join(ROOT, "jobs", "quickstart.toml"), "--samples", str(args.samples), "--batch-size", str(BATCH),
           "--chunk-batches", "1000", "--cpu-threads", "1", "--quiet", "--throttle-ms", str(args.batch_ms),
           "--throttle-ranks", "0,1", "--output", args.out]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    files = lambda: glob.glob(os.path.join(args.out, "rank-*.h5"))  # noqa: E731
    while len(files()) < 2 and proc.poll() is None:
        time.sleep(0.02)
    empty = sum(os.path.getsize(f) for f in files())
    while sum(os.path.getsize(f) for f in files()) < empty + args.after * BATCH * ROW_BYTES and proc.poll() is None:
        time.sleep(0.02)
    t0 = time.time()
    for pid in sluice_pids(args.out):
        os.kill(pid, signal.SIGUSR1)
    proc.communicate()
    took = time.time() - t0
    print(f"exit status {proc.returncode}; signal -> exit {took:.2f} s = {took * 1000 / args.batch_ms:.1f} batch times "
          f"({args.samples // BATCH // 2} batches a rank, --chunk-batches 1000, a batch >= {args.batch_ms} ms)")


if __name__ == "__main__":
    main()
