"""Helpers shared by the pytest files: where the binary is, how to run it, how to read run folders."""
import glob
import json
import os
import shutil
import subprocess

import h5py
import numpy as np

ROOT = os.environ.get("SLUICE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))
QUICKSTART = os.path.join(ROOT, "jobs", "quickstart.toml")

# pml ob1: what Open MPI takes here anyway, after trying PSM/PSM2 for 0.2 s a process (tests/CMakeLists.txt).
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_pml=os.environ.get("OMPI_MCA_pml", "ob1"),
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def sluice(*args, np_=None, timeout=300, check=False, env=None):
    """Runs `sluice ARGS` (under mpirun -np NP when np_ is given); returns the CompletedProcess."""
    cmd = [BIN, *map(str, args)]
    if np_ is not None:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", *cmd]
    p = subprocess.run(cmd, cwd=ROOT, env=env or MPI_ENV, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "error" in line.lower()]


def rank_files(outdir):
    return sorted(glob.glob(os.path.join(outdir, "rank-*.h5")))


def committed_rows(path):
    """(sample indices, {name: rows}) of the committed rows of one rank file, from its ledger."""
    with h5py.File(path, "r") as f:
        ledger = f["ledger"][:]
        index = f["sample_index"][:]
        outs = {name: f["outputs"][name] for name in f["outputs"]}
        keep = np.concatenate([np.arange(r["first_row"], r["first_row"] + r["count"]) for r in ledger]) \
            if len(ledger) else np.zeros(0, dtype=np.int64)
        return index[keep], {name: d[:][keep] for name, d in outs.items()}


def assemble(outdir):
    """Every committed row of a run folder in global sample order; asserts each index appears once."""
    indices, parts = [], {}
    for path in rank_files(outdir):
        idx, outs = committed_rows(path)
        indices.append(idx)
        for name, rows in outs.items():
            parts.setdefault(name, []).append(rows)
    idx = np.concatenate(indices)
    order = np.argsort(idx, kind="stable")
    return idx[order], {name: np.concatenate(v)[order] for name, v in parts.items()}


def report(outdir):
    with open(os.path.join(outdir, "report.json")) as f:
        return json.load(f)


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    return path


def pids_of(program, word):
    """PIDs of the running processes of `program` (its file name) whose command line holds `word`
    (an output folder, say): how the kill and signal tests find a job's ranks or its launcher."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if cmd and os.path.basename(cmd[0]) == program.encode() and word.encode() in cmd:
            pids.append(int(pid))
    return pids


def torch_available(python):
    """Whether `python` (Debian's /usr/bin/python3 by default in the tests) imports torch and
    torchvision: the tests that export models with them skip without."""
    try:
        return subprocess.run([python, "-c", "import torch, torchvision"], capture_output=True).returncode == 0
    except OSError:
        return False
