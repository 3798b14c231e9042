"""slurm/sluice.sbatch on a real one-node Slurm cluster (tests/slurm/slurm_cluster.py): a job runs
to the end with srun --mpi=pmix and with mpirun; a USR1 to the batch shell (what Slurm's
--signal=B:USR1@120 warning sends) stops the ranks cleanly, the script requeues the job and the rerun
resumes to outputs bit-identical to an uninterrupted run; a TERM stops them the same way without a
requeue; the output folder defaults to one per job name; bad usage (no allocation, no job file, tasks
per node unequal to GPUs per node) is refused before anything runs.  Each job is judged by its files, the node
state and scontrol, never by an exit status alone (a broken plugin can 'complete' a job that did
nothing)."""
import os
import re
import shutil
import signal
import subprocess
import tempfile

import h5py
import numpy as np
import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, rank_files, pids_of, report, sluice
from slurm_cluster import Cluster, missing_software, wait_for

SCRIPT = os.path.join(ROOT, "slurm", "sluice.sbatch")
LAUNCHERS = ["srun", "mpirun"]

# The preemption job: small batches and chunks, slowed on both ranks so that a stop lands mid-run.
N_SLOW = 384
SLOW_JOB = ["--samples", N_SLOW, "--batch-size", 8, "--chunk-batches", 1, "--cpu-threads", 1]
THROTTLE = ["--throttle-ms", 100, "--throttle-ranks", "0,1"]


@pytest.fixture(scope="module")
def cluster():
    why = missing_software()
    if why:
        pytest.skip(why)
    # Not under pytest's tmp folder: that one is private to root, and munged runs as user munge.
    base = tempfile.mkdtemp(prefix="sluice-slurm-")
    c = Cluster(base)
    c.env.update({k: v for k, v in MPI_ENV.items() if k.startswith("OMPI_")})  # mpirun as root
    c.env["SLUICE_BIN"] = BIN
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)


def sbatch(cluster, args, job_args, wait, env=None, cwd=ROOT, timeout=180):
    """Submits slurm/sluice.sbatch; with wait, returns (exit status, job id) once the job ended."""
    cmd = ["sbatch", "--parsable", *(["--wait"] if wait else []), *map(str, args), SCRIPT, *map(str, job_args)]
    p = subprocess.run(cmd, cwd=cwd, env=env or cluster.env, capture_output=True, text=True, timeout=timeout)
    m = re.match(r"(\d+)", p.stdout.strip())
    assert m, f"sbatch printed no job id (exit {p.returncode}):\n{p.stdout}\n{p.stderr}\n{cluster.logs()}"
    return p.returncode, m.group(1)


def assert_node_idle(cluster):
    """After a job the node goes back to idle; a failing plugin leaves it drained instead."""
    try:
        wait_for("the node to be idle", lambda: cluster.node_state() == "idle", 20, 0.2)
    except TimeoutError:
        raise AssertionError(f"node is '{cluster.node_state()}' after the job\n{cluster.logs()}")


def read_log(path):
    with open(path) as f:
        return f.read()


def committed_chunks(outdir):
    """Ledger records (commits) across the rank files of a running job (read through HDF5 SWMR)."""
    total = 0
    for path in rank_files(outdir):
        try:
            with h5py.File(path, "r", swmr=True) as f:
                total += f["ledger"].shape[0]
        except (OSError, KeyError):
            pass  # being created; the next poll sees it
    return total


def stitched(outdir):
    """outputs.h5 read back through its virtual datasets: {name: array [N, ...]}."""
    with h5py.File(os.path.join(outdir, "outputs.h5"), "r") as f:
        return {name: f["outputs"][name][:] for name in f["outputs"]}


def assert_complete(outdir, n, world_size, attempt=0):
    files = rank_files(outdir)
    assert len(files) == world_size, files
    idx, rows = assemble(outdir)
    np.testing.assert_array_equal(idx, np.arange(n))  # every sample index exactly once
    r = report(outdir)
    assert r["world_size"] == world_size and r["attempt"] == attempt
    assert r["job"]["complete"] is True and r["job"]["total_samples"] == n
    out = stitched(outdir)
    assert set(out) == {"logits", "argmax"}
    for name, a in out.items():
        assert a.shape[0] == n and np.array_equal(a, rows[name]), name
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The preemption job run once, uninterrupted, as a plain process."""
    out = str(tmp_path_factory.mktemp("ref") / "clean")
    sluice("run", "--config", QUICKSTART, *SLOW_JOB, "--quiet", "--output", out, check=True)
    return assert_complete(out, N_SLOW, 1)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_job_writes_every_sample_once_and_completes(cluster, tmp_path, launcher):
    out, log = str(tmp_path / "out"), str(tmp_path / "slurm-%j.out")
    env = dict(cluster.env, SLUICE_LAUNCHER=launcher)
    rc, job_id = sbatch(cluster, ["-n", 2, "--overcommit", "-o", log],
                        [QUICKSTART, "--output", out, "--samples", 128], wait=True, env=env)
    text = read_log(log.replace("%j", job_id))
    assert rc == 0, text
    assert_complete(out, 128, 2)
    assert f"2 rank(s) on 1 node(s), {'srun --mpi=pmix' if launcher == 'srun' else 'mpirun -np 2'}" in text
    assert "sluice.sbatch: complete" in text
    info = cluster.job(job_id)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0" and info["Restarts"] == "0", info
    assert_node_idle(cluster)


def start_slow_job(cluster, out, log, env=None):
    """Submits the throttled job; returns (job id, log path) once it runs and has committed a chunk."""
    _, job_id = sbatch(cluster, ["-n", 2, "--overcommit", "-o", log],
                       [QUICKSTART, "--output", out, *SLOW_JOB, *THROTTLE], wait=False, env=env)
    wait_for("the job to run", lambda: cluster.job(job_id)["JobState"] == "RUNNING", 60, 0.2)
    wait_for("a first committed chunk", lambda: committed_chunks(out) > 0, 60, 0.05)
    return job_id, log.replace("%j", job_id)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_usr1_stops_requeues_and_the_rerun_resumes_to_identical_outputs(cluster, tmp_path, reference, launcher):
    out, log = str(tmp_path / "out"), str(tmp_path / "slurm-%j.out")
    env = dict(cluster.env, SLUICE_LAUNCHER=launcher)
    job_id, log = start_slow_job(cluster, out, log, env)
    # What Slurm's warning does: USR1 to the batch shell only.
    cluster.run("scancel", "--signal=USR1", "--batch", job_id)
    wait_for("the requeue", lambda: cluster.job(job_id)["Restarts"] == "1", 60, 0.2)
    if cluster.job(job_id)["JobState"] == "PENDING":
        # Slurm holds a requeued job back for cred_expire (10 s here); start it sooner, but not in the
        # second of the requeue, whose credentials slurmd still counts as revoked.
        cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now+2", check=False)
    wait_for("the rerun to finish", lambda: cluster.job(job_id)["JobState"] in ("COMPLETED", "FAILED", "CANCELLED"),
             120, 0.3)

    text = read_log(log)  # --open-mode=append: both runs in one log
    info = cluster.job(job_id)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0" and info["Restarts"] == "1", \
        f"{info}\n{text}\n{cluster.logs()}"
    assert "SIGUSR1: the ranks finish their chunks in flight" in text
    assert "requeued: the rerun resumes" in text
    assert text.count("received User defined signal 1") == 2, text  # each rank stopped on the signal
    assert "restart 1, 2 rank(s)" in text
    # The rerun resumed: it found some samples committed and did only the rest.
    m = re.search(r"--resume: (\d+) of (\d+) samples already committed .*; (\d+) to do", text)
    assert m, text
    done, total, todo = map(int, m.groups())
    assert total == N_SLOW and 0 < done < total and done + todo == total
    out_rows = assert_complete(out, N_SLOW, 2, attempt=1)
    for name, ref in reference.items():
        assert out_rows[name].dtype == ref.dtype and np.array_equal(out_rows[name], ref), name  # bit for bit
    assert_node_idle(cluster)


def test_term_stops_without_requeue_and_a_resubmission_with_resume_finishes(cluster, tmp_path, reference):
    """A TERM to the batch shell stops the ranks cleanly too, but the script does not requeue: the job
    ends FAILED with exit status 75, and the same job submitted again with --resume completes it."""
    out, log = str(tmp_path / "out"), str(tmp_path / "slurm-%j.out")
    job_id, log1 = start_slow_job(cluster, out, log)
    cluster.run("scancel", "--signal=TERM", "--batch", job_id)
    wait_for("the job to end", lambda: cluster.job(job_id)["JobState"] not in ("RUNNING", "COMPLETING"), 60, 0.2)
    text = read_log(log1)
    info = cluster.job(job_id)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "75:0" and info["Restarts"] == "0", f"{info}\n{text}"
    assert "SIGTERM: the ranks finish their chunks in flight" in text
    assert "submit the job again with --resume to finish" in text and "requeued" not in text
    r = report(out)
    assert r["job"]["stopped"] is True and 0 < r["job"]["samples"] < N_SLOW
    assert not os.path.exists(os.path.join(out, "outputs.h5"))

    rc, job2 = sbatch(cluster, ["-n", 2, "--overcommit", "-o", log],
                      [QUICKSTART, "--output", out, *SLOW_JOB, "--resume"], wait=True)
    assert rc == 0, read_log(log.replace("%j", job2))
    out_rows = assert_complete(out, N_SLOW, 2, attempt=1)
    for name, ref in reference.items():
        assert np.array_equal(out_rows[name], ref), name
    assert_node_idle(cluster)


def test_the_output_folder_defaults_to_one_per_job_name(cluster, tmp_path):
    """A job file without `output`, submitted from another folder: the outputs go to
    $SLURM_SUBMIT_DIR/sluice-out/<job name>, the name being -J's or else the job file's."""
    with open(QUICKSTART) as f:
        text = f.read()
    text = re.sub(r'(?m)^output\s*=.*\n', "", text)
    text = re.sub(r'(?m)^model\s*=.*$', f'model = "{os.path.join(ROOT, "jobs", "models", "quickstart.onnx")}"', text)
    job = tmp_path / "tiny.toml"
    job.write_text(text)
    for args, name in (([], "tiny"), (["-J", "named"], "named")):
        rc, job_id = sbatch(cluster, ["-n", 1, "-o", tmp_path / "slurm-%j.out", *args], [job, "--samples", 64],
                            wait=True, cwd=tmp_path)
        assert rc == 0, read_log(str(tmp_path / f"slurm-{job_id}.out"))
        assert_complete(str(tmp_path / "sluice-out" / name), 64, 1)
    assert sorted(os.listdir(tmp_path / "sluice-out")) == ["named", "tiny"]
    assert_node_idle(cluster)


# Usage checks, made before anything runs; the Slurm variables are those an allocation would set.
ALLOC = {"SLURM_JOB_ID": "7", "SLURM_SUBMIT_DIR": ROOT, "SLURM_JOB_NAME": "sluice.sbatch", "SLURM_NTASKS": "2",
         "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_NUM_NODES": "1", "SLUICE_BIN": BIN}


@pytest.mark.parametrize("case, extra_env, job, message", [
    ("no allocation", {"SLURM_JOB_ID": None}, QUICKSTART, "not inside a Slurm allocation"),
    ("no job file", {}, "jobs/absent.toml", "must be a readable job file"),
    ("fewer tasks than GPUs", {"SLURM_GPUS_ON_NODE": "4", "SLURM_NTASKS_PER_NODE": "2"}, QUICKSTART,
     "2 task(s) per node for 4 GPU(s): submit with --ntasks-per-node=4 --gpus-per-node=4"),
    ("unknown launcher", {"SLUICE_LAUNCHER": "aprun"}, QUICKSTART, "SLUICE_LAUNCHER must be srun or mpirun"),
    ("no binary", {"SLUICE_BIN": "/nonexistent/sluice"}, QUICKSTART, "no sluice binary at '/nonexistent/sluice'"),
])
def test_the_script_refuses_bad_usage_before_running_anything(tmp_path, case, extra_env, job, message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(ALLOC)
    for k, v in extra_env.items():
        if v is None:
            env.pop(k)
        else:
            env[k] = v
    p = subprocess.run(["bash", SCRIPT, job, "--output", str(tmp_path / "out")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, (case, p.stderr)
    assert message in p.stderr, (case, p.stderr)
    assert not os.path.exists(tmp_path / "out")


def launcher_pids(out):
    """The `sluice srun` processes of a job writing to `out`."""
    def is_srun(pid):
        try:
            return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[1:2] == [b"srun"]
        except OSError:
            return False
    return [pid for pid in pids_of("sluice", out) if is_srun(pid)]


def srun_pids(out):
    return pids_of("srun", out)


@pytest.mark.parametrize("launch,sig", [("srun", "USR1"), ("sluice srun", "TERM"), ("sluice srun", "INT")])
def test_a_signal_to_the_launcher_itself_stops_every_rank_with_75(cluster, tmp_path, reference, launch, sig):
    """srun forwards USR1 to its tasks: the ranks stop, commit, write the report and srun exits 75.
    srun answers TERM by killing the step (and a single INT by printing the tasks' state), so TERM and
    INT go through `sluice srun`, which passes them on as USR1."""
    out, log = str(tmp_path / "out"), str(tmp_path / "srun-%j.out")
    script = tmp_path / "srun.sh"
    script.write_text("#!/bin/bash\n"
                      + (f"srun --mpi=pmix {BIN} run" if launch == "srun" else f"{BIN} srun --mpi=pmix --")
                      + f" --config {QUICKSTART} --output {out} {' '.join(map(str, SLOW_JOB + THROTTLE))}\n"
                      "echo \"exit status $?\"\n")
    p = cluster.run("sbatch", "--parsable", "-n", 2, "--overcommit", "-o", log, str(script))
    job_id = p.stdout.strip().split(";")[0]
    wait_for("a first committed chunk", lambda: committed_chunks(out) > 0, 60, 0.05)
    if launch == "srun":
        pids = srun_pids(out)  # srun and the helper process it forks
    else:
        wait_for("one launcher process", lambda: len(launcher_pids(out)) == 1, 30, 0.05)  # not mid-fork
        pids = launcher_pids(out)
    assert pids
    for pid in pids:
        os.kill(pid, getattr(signal, f"SIG{sig}"))
    wait_for("the job to end", lambda: cluster.job(job_id)["JobState"] not in ("RUNNING", "COMPLETING", "PENDING"), 60, 0.2)
    text = read_log(log.replace("%j", job_id))
    assert "exit status 75" in text, f"{text}\n{cluster.job(job_id)}"
    r = report(out)
    assert r["job"]["stopped"] is True and 0 < r["job"]["samples"] < N_SLOW, r["job"]
    rc = sluice("run", "--config", QUICKSTART, *SLOW_JOB, "--quiet", "--output", out, "--resume").returncode
    assert rc == 0
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N_SLOW))
    for name, ref in reference.items():
        assert np.array_equal(rows[name], ref), name
    assert_node_idle(cluster)


@pytest.mark.parametrize("kind", ["folder", "list", "tar"])
def test_an_image_folder_through_slurm_then_sluice_export(cluster, tmp_path, kind):
    """The new-user task under Slurm: photos (JPEG and PNG in subfolders, one broken file) as a folder,
    a list file or two WebDataset tar shards, through a segmentation model on two ranks; then
    `sluice export` writes one palette PNG mask per photo, named after its key; the broken file is
    recorded, not fatal, and has no mask."""
    import tarfile
    from PIL import Image
    photos = tmp_path / "photos"
    rng = np.random.default_rng(3)
    names = ["a/cat.jpg", "a/dog.png", "b/c/owl.jpg", "fish.png", "sun.jpg"]
    for name in names:
        (photos / name).parent.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (int(rng.integers(40, 90)), int(rng.integers(40, 90)), 3), dtype=np.uint8)
        Image.fromarray(pixels).save(photos / name)
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a real jpeg")
    everything = sorted(names + ["broken.jpg"], key=lambda k: k.encode())
    if kind == "folder":
        source, keys_want = "photos", everything
    elif kind == "list":
        order = everything[::-1]  # a list keeps its own order
        (tmp_path / "files.txt").write_text("# the photos, newest first\n" + "".join(f"photos/{n}\n" for n in order))
        source, keys_want = "files.txt", [f"photos/{n}" for n in order]
    else:
        (tmp_path / "shards").mkdir()
        for i, part in enumerate([everything[:3], everything[3:]]):
            with tarfile.open(tmp_path / "shards" / f"train-{i:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as t:
                for n in part:
                    t.add(photos / n, arcname=n)
        source = "shards/train-{000000..000001}.tar"
        keys_want = [os.path.splitext(n)[0] for n in everything]
    job = tmp_path / "photos.toml"
    job.write_text(f'model = "{os.path.join(ROOT, "jobs", "models", "quickstart.onnx")}"\ninput = "{source}"\n'
                   'output = "runs/photos"\noutputs = ["argmax"]\nbatch-size = 2\nchunk-batches = 1\n'
                   'scale = 0.00392156862745098\n')
    rc, job_id = sbatch(cluster, ["-n", 2, "-o", tmp_path / "slurm-%j.out"], [job], wait=True, cwd=tmp_path)
    log = read_log(str(tmp_path / f"slurm-{job_id}.out"))
    assert rc == 0, log
    out = tmp_path / "runs" / "photos"
    with h5py.File(out / "outputs.h5") as f:
        keys = [k.decode() for k in f["sample_key"][:]]
        status = f["sample_status"][:]
        masks = f["outputs/argmax"][:]
    assert keys == keys_want, log
    assert [os.path.basename(keys[i]) for i in np.flatnonzero(status)] == [os.path.splitext("broken.jpg")[0] if kind == "tar"
                                                                          else "broken.jpg"]
    p = sluice("export", out)
    assert p.returncode == 0, p.stdout + p.stderr
    for i, key in enumerate(keys):
        png = out / "export" / (os.path.splitext(key)[0] + ".png")
        if status[i]:
            assert not png.exists()
            continue
        img = Image.open(png)
        assert img.mode == "P"
        assert np.array_equal(np.asarray(img), masks[i]), key
    assert_node_idle(cluster)
