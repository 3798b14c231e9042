#!/usr/bin/env python3
"""Scale harness: Sluice's own costs as N and the number of ranks grow.

A trivial model (made here with onnx.helper: input [B, 4] float32 -> MatMul -> logits [B, 3]) runs
over N synthetic samples on the CPU backend, so what is measured is Sluice (sharding, commits,
ledgers, outputs.h5, resume), not the model.  For each (N, np) it prints one row:

  rss0_mb, rss_max_other_mb   peak RSS of rank 0 and of the largest other rank (GNU time, per rank)
  setup_s                     the report's largest per-rank set-up time
  run_s                       the report's makespan (pipeline start to last commit, longest rank)
  end_s                       last rank file closed (its end_unix) -> report.json written (mtime)
  total_s                     mpirun start -> exit
  start_s                     mpirun start -> the pipeline's start (the rank files' start_unix, the
                              latest rank's): MPI start-up, model, planning, engine
  mappings                    virtual mappings of outputs.h5's stored output (h5py)
  open_s, open_mb             a fresh h5py process: open outputs.h5 and read one row; its peak RSS
  inspect_s, inspect_mb       `sluice inspect DIR --json`: wall time and peak RSS
  kill_at, resume_start_s     a second run killed with SIGKILL once its progress line passes --kill-at
                              (triggered on progress, not on time), then --resume: mpirun start ->
                              the resumed pipeline's start (the rank files' start_unix, written when
                              the resumed writers open their files, after planning and recovery)
  plan_s                      of which --resume's planning: every rank recovering and reading its
                              share of the rank files, rank 0 computing the pending ranges (the
                              resume's log line; blank for a sluice that does not print it)
  resume_total_s              the resumed run's mpirun start -> exit
  load                        the 1-minute load average when the row started (the VM is shared)

    python3 data_tools/scale_bench.py --samples 1e6,1e7 --np 4 --chunk-batches 1

Rows are also appended as JSON lines to --json FILE when given.  Nothing here is a test: it prints
figures; BENCHMARKS.md quotes them.
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from support.sluice_test import pids_of  # noqa: E402  (the tests' process finder)
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def make_model(path, features=4, classes=3):
    """[B, features] float32 -> MatMul by a fixed matrix -> logits [B, classes]."""
    import onnx
    from onnx import TensorProto, helper
    w = np.arange(features * classes, dtype=np.float32).reshape(features, classes) / 7.0 - 0.5
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"])], "trivial",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten().tolist())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def rank_files(outdir):
    return sorted(os.path.join(outdir, f) for f in os.listdir(outdir) if re.fullmatch(r"rank-\d{5}\.h5", f))


def sluice_pids(outdir):
    return pids_of("sluice", outdir)


class Run:
    """One mpirun of `sluice run`, each rank under GNU time (peak RSS), stderr watched for progress."""

    def __init__(self, args, np_, outdir, extra, kill_at=None, progress=0.1):
        self.rss_dir = outdir + ".rss"
        shutil.rmtree(self.rss_dir, ignore_errors=True)
        os.makedirs(self.rss_dir)
        job = [args.bin, "run", "--model", args.model, "--samples", str(args.n), "--sample-shape", "4",
               "--batch-size", str(args.batch_size), "--chunk-batches", str(args.chunk_batches),
               "--outputs", args.outputs, "--sink", args.sink, "--sharding", args.sharding, "--cpu-threads", "1",
               "--output", outdir, "--progress-interval", str(progress), *extra]
        inner = " ".join(["exec", "/usr/bin/time", "-f", "%M", "-o", f"{self.rss_dir}/rank.$OMPI_COMM_WORLD_RANK",
                          *(["nice", "-n", str(args.nice)] if args.nice else []), *map(shlex_quote, job)])
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", "sh", "-c", inner]
        self.outdir, self.n, self.kill_at = outdir, args.n, kill_at
        self.killed_at = None
        self.t0 = time.time()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.err = []
        self.reader = threading.Thread(target=self._watch, daemon=True)
        self.reader.start()

    def _watch(self):
        for line in self.proc.stderr:
            self.err.append(line)
            m = re.search(r"progress: (\d+)/(\d+) samples", line)
            if m and self.kill_at is not None and self.killed_at is None and int(m.group(1)) >= self.kill_at * self.n:
                self.killed_at = int(m.group(1)) / self.n
                for pid in sluice_pids(self.outdir):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def wait(self, timeout):
        out, _ = self.proc.communicate(timeout=timeout)
        self.reader.join(timeout=10)
        self.t1 = time.time()
        return self.proc.returncode, out

    def rss_mb(self):
        per = {}
        for f in os.listdir(self.rss_dir):
            r = int(f.split(".")[1])
            text = open(os.path.join(self.rss_dir, f)).read().split()
            nums = [t for t in text if t.isdigit()]
            if nums:
                per[r] = int(nums[-1]) / 1024
        return per


def shlex_quote(s):
    import shlex
    return shlex.quote(str(s))


def file_attrs(outdir, name):
    vals = []
    for p in rank_files(outdir):
        try:
            with h5py.File(p, "r") as f:
                vals.append(float(f.attrs[name]))
        except (OSError, KeyError):
            pass
    return vals


READER = r"""
import resource, sys, time, h5py
t0 = time.time()
with h5py.File(sys.argv[1], "r") as f:
    d = f["outputs"][sys.argv[2]]
    row = d[int(sys.argv[3])]
    t1 = time.time()
    count = d.id.get_create_plist().get_virtual_count() if d.is_virtual else 0
print(t1 - t0, count, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def timed(cmd, timeout):
    t0 = time.time()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], cwd=ROOT, env=MPI_ENV, capture_output=True, text=True,
                       timeout=timeout)
    rss = [int(t) for t in p.stderr.split() if t.isdigit()]
    return time.time() - t0, (rss[-1] / 1024 if rss else float("nan")), p


def one(args, np_):
    n = args.n
    base = os.path.join(args.work, f"n{n}-np{np_}")
    row = {"n": n, "np": np_, "chunk_batches": args.chunk_batches, "batch": args.batch_size,
           "load": round(os.getloadavg()[0], 2)}
    out = base + "-clean"
    shutil.rmtree(out, ignore_errors=True)
    run = Run(args, np_, out, ["--quiet"] if args.sink == "null" else [])
    rc, _ = run.wait(args.timeout)
    if rc != 0:
        raise SystemExit(f"run exited {rc}:\n{''.join(run.err[-30:])}")
    rss = run.rss_mb()
    rep = json.load(open(os.path.join(out, "report.json")))
    row.update(rss0_mb=round(rss.get(0, float("nan"))),
               rss_max_other_mb=round(max([v for r, v in rss.items() if r] or [0])),
               setup_s=round(max(r["setup_s"] for r in rep["ranks"]), 2), run_s=round(rep["job"]["makespan_s"], 2),
               total_s=round(run.t1 - run.t0, 2))
    if args.sink == "hdf5":
        row["start_s"] = round(max(file_attrs(out, "start_unix")) - run.t0, 2)
        ends = file_attrs(out, "end_unix")
        row["end_s"] = round(os.path.getmtime(os.path.join(out, "report.json")) - max(ends), 2)
        p = subprocess.run([sys.executable, "-c", READER, os.path.join(out, "outputs.h5"), args.outputs.split(",")[0],
                            str(n // 2)], capture_output=True, text=True, timeout=args.timeout)
        if p.returncode != 0:
            raise SystemExit(p.stderr)
        t, count, mb = p.stdout.split()
        row.update(mappings=int(count), open_s=round(float(t), 3), open_mb=round(float(mb)))
        t, mb, p = timed([args.bin, "inspect", out, "--json"], args.timeout)
        if p.returncode != 0:
            raise SystemExit(f"inspect exited {p.returncode}: {p.stderr[-2000:]}")
        row.update(inspect_s=round(t, 2), inspect_mb=round(mb))
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)

        if args.kill_at > 0:
            out = base + "-killed"
            shutil.rmtree(out, ignore_errors=True)
            run = Run(args, np_, out, [], kill_at=args.kill_at)
            run.wait(args.timeout)
            if run.killed_at is None:
                raise SystemExit("the run ended before it could be killed")
            again = Run(args, np_, out, ["--resume"], progress=1000)
            rc, _ = again.wait(args.timeout)
            if rc != 0:
                raise SystemExit(f"resume exited {rc}:\n{''.join(again.err[-30:])}")
            starts = file_attrs(out, "start_unix")
            planned = re.search(r"planned in ([0-9.e-]+) s", "".join(again.err))
            row.update(kill_at=round(run.killed_at, 3), resume_start_s=round(max(starts) - again.t0, 2),
                       plan_s=round(float(planned.group(1)), 3) if planned else "",
                       resume_total_s=round(again.t1 - again.t0, 2))
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    return row


COLUMNS = ["n", "np", "load", "rss0_mb", "rss_max_other_mb", "setup_s", "start_s", "run_s", "end_s", "total_s",
           "mappings", "open_s", "open_mb", "inspect_s", "inspect_mb", "kill_at", "resume_start_s", "plan_s",
           "resume_total_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "sluice"))
    ap.add_argument("--samples", default="1e6", help="comma list of N (1e6 style allowed)")
    ap.add_argument("--np", default="4", help="comma list of rank counts, e.g. 1,2,4,8")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--chunk-batches", type=int, default=1)
    ap.add_argument("--outputs", default="argmax")
    ap.add_argument("--sink", default="hdf5", choices=["hdf5", "null"])
    ap.add_argument("--sharding", default="dynamic", choices=["dynamic", "static"])
    ap.add_argument("--kill-at", type=float, default=0.7, help="progress fraction of the kill -9 (0: no resume row)")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the ranks (the VM is shared)")
    ap.add_argument("--work", default="/tmp/sluice-scale-bench")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--keep", action="store_true", help="keep the run folders")
    ap.add_argument("--json", help="append each row as one JSON line to this file")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    args.model = os.path.join(args.work, "trivial.onnx")
    make_model(args.model)
    print(" ".join(f"{c:>8}" for c in COLUMNS), flush=True)
    for n in [int(float(s)) for s in args.samples.split(",")]:
        for np_ in [int(s) for s in args.np.split(",")]:
            args.n = n
            row = one(args, np_)
            print(" ".join(f"{row.get(c, ''):>8}" for c in COLUMNS), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
