"""One outcome on every rank: every usage error (exit 2) and bad input (exit 3) the docs list ends
the job under 1, 2 and 3 ranks with that exit status, exactly one error line, and no hang (each run
has a timeout); so do sizes no machine can hold (the message names the options).  Under several ranks these used to deadlock when one rank found the problem alone
(the output folder plan, made by rank 0)."""
import fcntl
import os
import shutil
import subprocess

import h5py
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, sluice

N = 64
JOB = ["--config", QUICKSTART, "--samples", N, "--cpu-threads", 1, "--quiet"]
TIMEOUT = 60
# After a rank exits with a non-zero status, mpirun spends odls_base_sigkill_timeout (1 s) twice on
# killing the job, even when every rank has already exited: 2.1 s of a 2.2 s run at -np 1, 1.4 s at
# -np 2 (dev VM, 2026-12-02).  Every case here ends with every rank's own exit, and no case sends a
# signal, so the wait says nothing about Sluice: it is set to 0 (a hang still fails on TIMEOUT).
QUICK_ABORT_ENV = dict(MPI_ENV, OMPI_MCA_odls_base_sigkill_timeout="0")


def quickstart_model():
    return onnx.load(os.path.join(ROOT, "jobs", "models", "quickstart.onnx"))


def batch_breaking_model(path, op):
    """input [B,3,64,64] -> one node that does not keep the batch on axis 0 -> logits."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 64, 64])
    if op == "ReduceMean":  # the mean over the batch: one row for the whole batch
        axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
        node = helper.make_node("ReduceMean", ["input", "axes"], ["logits"], keepdims=1)
        inits = [axes]
    elif op == "Transpose":  # the batch moved to axis 1
        node = helper.make_node("Transpose", ["input"], ["logits"], perm=[1, 0, 2, 3])
        inits = []
    elif op == "Reshape":  # the batch merged with the channels: [B x 3, 64, 64], rows are not samples
        shape = helper.make_tensor("shape", TensorProto.INT64, [3], [-1, 64, 64])
        node = helper.make_node("Reshape", ["input", "shape"], ["logits"])
        inits = [shape]
    else:  # Softmax across the samples of a batch: the shape is kept, the rows are mixed
        node = helper.make_node("Softmax", ["input"], ["logits"], axis=0)
        inits = []
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], op, [x], [y], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Inputs for the cases: one finished run folder, crafted models, input files, job files."""
    d = tmp_path_factory.mktemp("errors")
    f = {"dir": str(d)}
    f["done"] = str(d / "done")
    sluice("run", *JOB, "--output", f["done"], check=True)
    rng = np.random.RandomState(0)
    f["good_h5"] = str(d / "good.h5")
    with h5py.File(f["good_h5"], "w") as h:
        h["images"] = rng.rand(N, 3, 64, 64).astype(np.float32)
        h["ints"] = np.zeros((N, 3, 64, 64), np.int32)
        h["flat"] = np.zeros(N, np.float32)
    f["text"] = str(d / "notes.txt")
    with open(f["text"], "w") as t:
        t.write("not a model, not an HDF5 file\n")
    with open(QUICKSTART) as q:
        quickstart = q.read()
    nan_job = "".join(line + "\n" for line in quickstart.splitlines() if not line.startswith("scale"))
    for name, body in [("malformed.toml", "batch-size = [1,\n"), ("unknown.toml", "batchsize = 4\n"),
                       ("nan.toml", nan_job.replace("model = \"", "model = \"" + ROOT + "/jobs/")
                        + "scale = nan\non-nan = \"fail\"\n")]:
        f[name.replace(".", "_")] = str(d / name)
        with open(f[name.replace(".", "_")], "w") as t:
            t.write(body)
    for op in ["ReduceMean", "Transpose", "Softmax", "Reshape"]:
        f[op] = batch_breaking_model(str(d / f"{op}.onnx"), op)
    other = quickstart_model()
    other.producer_name = "another export of the same graph"  # other bytes: another sha256
    f["other_model"] = str(d / "other.onnx")
    onnx.save(other, f["other_model"])
    return f


def fresh(files, name):
    path = os.path.join(files["dir"], "out", name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


# (id, exit status, words the one error line holds, extra arguments; "{key}" is a path from `files`,
# "{out}" a fresh output folder)
CASES = [
    # usage: exit 2
    ("unknown-option", 2, "--frobnicate", ["--frobnicate", "--output", "{out}"]),
    ("bad-number", 2, "batch-size", ["--batch-size", "0", "--output", "{out}"]),
    ("bad-choice", 2, "probs", ["--outputs", "probs", "--output", "{out}"]),
    ("bad-on-nan", 2, "on-nan", ["--on-nan", "maybe", "--output", "{out}"]),
    ("bad-autotune", 2, "'fast' is not one of auto, quick, full, off", ["--autotune", "fast", "--output", "{out}"]),
    ("malformed-job-file", 2, "is not closed with", ["--config", "{malformed_toml}", "--output", "{out}"]),
    ("unknown-job-key", 2, "unknown key", ["--config", "{unknown_toml}", "--output", "{out}"]),
    ("config-is-a-folder", 2, "is a folder", ["--config", "{dir}", "--output", "{out}"]),
    ("config-missing", 2, "cannot read the job file", ["--config", "{dir}/nope.toml", "--output", "{out}"]),
    ("resume-and-overwrite", 2, "exclude each other", ["--resume", "--overwrite", "--output", "{out}"]),
    ("mean-std-counts", 2, "same number", ["--mean", "1,2", "--std", "1,2,3", "--output", "{out}"]),
    ("std-zero", 2, "non-zero", ["--std", "0", "--output", "{out}"]),
    # preprocessing that makes every sample NaN or Inf in float32 (the input itself is finite, so
    # --on-nan fail would not see it)
    ("scale-nan", 2, "--scale nan is not a finite", ["--scale", "nan", "--on-nan", "fail", "--output", "{out}"]),
    ("scale-inf", 2, "--scale inf is not a finite", ["--scale", "inf", "--on-nan", "fail", "--output", "{out}"]),
    ("scale-beyond-float32", 2, "not a finite float32", ["--scale", "1e39", "--on-nan", "fail", "--output", "{out}"]),
    ("scale-overflowing", 2, "more than float32 holds", ["--scale", "1e37", "--output", "{out}"]),
    ("mean-nan", 2, "--mean nan is not a finite", ["--mean", "nan", "--on-nan", "fail", "--output", "{out}"]),
    ("std-nan", 2, "--std nan is not a finite", ["--std", "nan", "--on-nan", "fail", "--output", "{out}"]),
    ("std-subnormal", 2, "below the smallest normal float32", ["--std", "1e-45", "--on-nan", "fail", "--output", "{out}"]),
    ("scale-nan-in-job-file", 2, "--scale nan is not a finite", ["--config", "{nan_toml}", "--output", "{out}"]),
    # thread counts beyond what the machine has: refused with the bound
    ("cpu-threads-unbounded", 2, "--cpu-threads 40000 is more threads than this machine can use",
     ["--cpu-threads", "40000", "--output", "{out}"]),
    ("reader-threads-unbounded", 2, "--reader-threads 100000 is more threads than this machine can use",
     ["--reader-threads", "100000", "--output", "{out}"]),
    ("writer-threads-unbounded", 2, "--writer-threads 100000 is more threads than this machine can use",
     ["--writer-threads", "100000", "--compression", "1", "--output", "{out}"]),
    # bad input: exit 3
    ("model-missing", 3, "cannot read the model file", ["--model", "{dir}/nope.onnx", "--output", "{out}"]),
    ("model-not-onnx", 3, "not a valid ONNX model", ["--model", "{text}", "--output", "{out}"]),
    ("model-input-shape", 3, "the job feeds", ["--sample-shape", "1,64,64", "--output", "{out}"]),
    ("model-reduces-the-batch", 3, "reduces over the batch axis", ["--model", "{ReduceMean}", "--outputs", "logits",
                                                                    "--output", "{out}"]),
    ("model-moves-the-batch", 3, "holds the batch on axis 1", ["--model", "{Transpose}", "--outputs", "logits",
                                                                "--output", "{out}"]),
    ("model-mixes-the-batch", 3, "across samples", ["--model", "{Softmax}", "--outputs", "logits", "--output", "{out}"]),
    ("model-merges-the-batch", 3, "holds the batch merged with other axes", ["--model", "{Reshape}", "--outputs",
                                                                             "logits", "--output", "{out}"]),
    ("input-missing", 3, "no such file", ["--input", "{dir}/nope.h5", "--output", "{out}"]),
    ("input-not-hdf5", 3, "not an HDF5 file", ["--input", "{text}", "--output", "{out}"]),
    ("input-dataset-missing", 3, "no dataset", ["--input", "{good_h5}", "--input-dataset", "/nope", "--output", "{out}"]),
    ("input-dataset-type", 3, "int32", ["--input", "{good_h5}", "--input-dataset", "/ints", "--output", "{out}"]),
    ("input-dataset-1d", 3, "dimension", ["--input", "{good_h5}", "--input-dataset", "/flat", "--output", "{out}"]),
    ("output-is-a-file", 3, "names a file", ["--output", "{text}"]),
    ("output-cannot-be-created", 3, "cannot create the output folder", ["--output", "/proc/sluice-out"]),
    ("finished-folder-again", 3, "--resume to finish it or --overwrite", ["--output", "{done}"]),
    ("resume-other-outputs", 3, "keep --outputs", ["--resume", "--outputs", "argmax", "--output", "{done}"]),
    ("resume-other-batch-size", 3, "batch-size = 32 but this job has batch-size = 16",
     ["--resume", "--batch-size", "16", "--chunk-batches", "4", "--output", "{done}"]),
    ("resume-other-seed", 3, "seed = 7 but this job has seed = 8", ["--resume", "--seed", "8", "--output", "{done}"]),
    ("resume-other-scale", 3, "scale = 1 but this job has scale = 0.5", ["--resume", "--scale", "0.5", "--output", "{done}"]),
    ("resume-other-mean", 3, "mean = [] but this job has mean = [0.5]", ["--resume", "--mean", "0.5", "--output", "{done}"]),
    ("resume-other-model", 3, "written by another model", ["--resume", "--model", "{other_model}", "--output", "{done}"]),
    ("resume-other-input", 3, "input = \"synthetic\" but this job has input",
     ["--resume", "--input", "{good_h5}", "--output", "{done}"]),
    ("foreign-files", 3, "holds files Sluice did not write (notes.txt)", ["--output", "{out}", "#foreign"]),
    ("users-own-outputs", 3, "holds files Sluice did not write (outputs.h5, report.json)", ["--output", "{out}", "#own"]),
    ("folder-in-use", 3, "in use by another sluice job (host test", ["--output", "{out}", "#locked"]),
    # sizes no machine holds: refused up front, naming the options (exit 2), or at allocation (exit 1)
    ("sample-shape-overflow", 2, "asks for 3.84e+14 TB per batch", ["--sample-shape", "3000000000000,1000000,1000000",
                                                                   "--output", "{out}"]),
    # 557 GB of engine tensors: more than any machine these tests run on, refused before the zero fill
    # that would page until the OOM killer came.
    ("engine-beyond-memory", 1, "more than this machine's", ["--batch-size", "1000000", "--output", "{out}"]),
    ("prefetch-beyond-memory", 1, "--prefetch 100000000 input slots of", ["--prefetch", "100000000", "--output", "{out}"]),
    ("batch-beyond-memory", 1, "for --batch-size 2000000000", ["--batch-size", "2000000000", "--output", "{out}"]),
]


# Cases whose error line itself says what to do ("see sluice run --help", "choose a folder", "pass
# --resume to finish it or --overwrite to replace it", "lower them", ...); every other case must
# print a hint line.
ADVICE_IN_THE_LINE = {
    "bad-number", "bad-choice", "bad-on-nan", "bad-autotune", "config-is-a-folder", "model-moves-the-batch", "output-is-a-file",
    "finished-folder-again", "foreign-files", "users-own-outputs", "folder-in-use", "sample-shape-overflow",
    "prefetch-beyond-memory",
}


def prepare(files, case_id, args):
    """Fills in the paths; builds the special output folders the markers (#...) ask for."""
    out = fresh(files, case_id)
    marker = [a for a in args if a.startswith("#")]
    args = [a.format(out=out, **files) for a in args if not a.startswith("#")]
    holder = None
    if marker:
        os.makedirs(out)
        if marker[0] == "#foreign":
            open(os.path.join(out, "notes.txt"), "w").close()
        elif marker[0] == "#own":
            with h5py.File(os.path.join(out, "outputs.h5"), "w") as h:
                h["x"] = np.zeros(3)
            with open(os.path.join(out, "report.json"), "w") as r:
                r.write('{"mine": true}\n')
        elif marker[0] == "#locked":
            holder = open(os.path.join(out, ".sluice.lock"), "w")
            fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holder.write("host test, pid 1, started today\n")
            holder.flush()
    return args, holder


@pytest.mark.parametrize("np_", [1, 2, 3])
@pytest.mark.parametrize("case_id,status,words,args", CASES, ids=[c[0] for c in CASES])
def test_one_error_line_and_one_status_on_every_rank(files, np_, case_id, status, words, args):
    args, holder = prepare(files, case_id, args)
    base = [str(a) for a in JOB]
    if "--config" in args:  # the case's own job file instead of the quickstart's
        base = base[2:]
    if "--cpu-threads" in args:  # the case's own count instead of the base's 1
        i = base.index("--cpu-threads")
        base = base[:i] + base[i + 2:]
    cmd = [BIN, "run", *base, *args]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", *cmd]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=QUICK_ABORT_ENV, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no outcome within {TIMEOUT} s (a hang): {' '.join(cmd)}")
    finally:
        if holder:
            holder.close()
    errors = [line for line in p.stderr.splitlines() if "error" in line.lower()]
    assert p.returncode == status, p.stderr
    assert len(errors) == 1 and errors[0].startswith("sluice: error: "), p.stderr
    hints = [line for line in p.stderr.splitlines() if line.startswith("sluice: hint: ")]
    assert len(hints) <= 1, p.stderr  # one line, plus at most one hint line
    assert words in errors[0] + " " + " ".join(hints), p.stderr
    # Every error says what to do: on a `sluice: hint:` line, or in its own words (these cases).
    if case_id not in ADVICE_IN_THE_LINE:
        assert hints, f"{case_id}: no hint line: {errors[0]}"
    elif not hints:
        assert any(w in errors[0] for w in ("see sluice run --help", "choose", "pass --", "wait for", "lower them",
                                            "e.g.", "end the model")), errors[0]


def test_the_finished_folder_is_unchanged_by_the_refusals(files):
    """The refusals above ran against `done` without touching its outputs: it still inspects OK."""
    p = sluice("inspect", files["done"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK" in p.stdout.splitlines()[-1]


# One rank's own options fail before MPI starts while the others' are good (an MPMD launch, or a
# job file missing or malformed on one node only): every rank used to wait forever, the failing one
# in its error path's barrier and the others in MpiContext's first collective.  Now every rank meets
# the others in one start-up verdict (cluster/launch.h): the failing rank prints its line, and every
# rank exits with its status.
ONE_RANK_CASES = [
    ("batch-size-0", "batch-size", ["--batch-size", "0"]),
    ("job-file-missing", "cannot read the job file", ["--config", "{dir}/nope.toml"]),
    ("job-file-malformed", "is not closed with", ["--config", "{malformed_toml}"]),
    ("unknown-option", "--batch-sise", ["--batch-sise", "4"]),
]


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("bad_rank", ["first", "last"])
@pytest.mark.parametrize("case_id,words,bad_args", ONE_RANK_CASES, ids=[c[0] for c in ONE_RANK_CASES])
def test_one_ranks_bad_options_end_every_rank(files, np_, bad_rank, case_id, words, bad_args):
    out = fresh(files, f"one-rank-{case_id}-{np_}-{bad_rank}")
    good = [BIN, "run", *[str(a) for a in JOB], "--output", out]
    # The last of a repeated option wins: the bad rank's --config replaces the quickstart's.
    bad = good + [a.format(**files) for a in bad_args]
    bad_index = 0 if bad_rank == "first" else np_ - 1
    apps = [bad if r == bad_index else good for r in range(np_)]
    cmd = ["mpirun", "--oversubscribe"]
    for r, app in enumerate(apps):
        cmd += ([":"] if r else []) + ["-np", "1", *app]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=QUICK_ABORT_ENV, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no outcome within {TIMEOUT} s (a hang): {' '.join(cmd)}")
    errors = [line for line in p.stderr.splitlines() if "error" in line.lower()]
    assert p.returncode == 2, p.stderr
    assert len(errors) == 1 and errors[0].startswith("sluice: error: "), p.stderr
    assert words in p.stderr, p.stderr
    if bad_index:
        assert errors[0].startswith(f"sluice: error: [rank {bad_index}] "), p.stderr
    assert not os.path.exists(os.path.join(out, "report.json")), "a rank ran the job"
