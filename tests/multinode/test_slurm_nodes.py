"""slurm/sluice.sbatch on a real Slurm cluster of three simulated nodes (slurm_nodes.py: slurmctld on
node1, one slurmd per node with its own NodeName): `sbatch --nodes=2` runs its ranks on two nodes
(srun --mpi=pmix and mpirun), each node's ranks knowing their node; a node drained mid-job and the
job requeued, the rerun goes to the two nodes left in service, resumes and gives outputs bit-identical
to a one-rank run.  Each job is judged by its files, the report and scontrol, never by an exit
status alone."""
import os
import re
import shutil
import sys
import tempfile

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, assemble, rank_files, report, sluice  # noqa: E402
from simnodes import IFACE, SimNodes, why_not  # noqa: E402
from slurm_nodes import SlurmOnNodes, missing_software, wait_for  # noqa: E402

N = 384
JOB = ["--samples", N, "--batch-size", 16, "--chunk-batches", 1, "--cpu-threads", 1, "--device", "cpu"]


@pytest.fixture(scope="module")
def cluster():
    why = why_not() or missing_software()
    if why:
        pytest.skip(why)
    sim = SimNodes(3)
    # Not under /tmp: each simulated node's daemons have a /tmp of their own.
    base = tempfile.mkdtemp(prefix="sluice-slurm-nodes-", dir="/var/tmp")
    os.chmod(base, 0o755)  # munged (user munge) reaches its folder below
    bin_, root = BIN, ROOT
    if any(os.path.realpath(p).startswith("/tmp/") for p in (BIN, ROOT)):
        # A checkout or build under /tmp (as a CI clone may be) is invisible on the nodes: they get a
        # copy of what the jobs read, the script, the job files and the binary, beside the cluster.
        root = os.path.join(base, "checkout")
        for folder in ("slurm", "jobs"):
            shutil.copytree(os.path.join(ROOT, folder), os.path.join(root, folder))
        os.makedirs(os.path.join(root, "build"))
        bin_ = shutil.copy2(BIN, os.path.join(root, "build", "sluice"))
    c = None
    try:
        sim.up()
        c = SlurmOnNodes(sim, os.path.join(base, "slurm"))
        c.env.update({k: v for k, v in MPI_ENV.items() if k.startswith("OMPI_")})  # mpirun as root
        # Open MPI between the nodes over their interface to the switch.
        c.env.update(OMPI_MCA_btl="self,vader,tcp", OMPI_MCA_btl_tcp_if_include=IFACE,
                     OMPI_MCA_oob_tcp_if_include=IFACE, SLUICE_BIN=bin_)
        c.start()
        c.shared = base
        c.root = root
        c.script = os.path.join(root, "slurm", "sluice.sbatch")
        c.job_file = os.path.join(root, "jobs", "quickstart.toml")
        yield c
    finally:
        if c is not None:
            c.stop()
        sim.down()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ref") / "one-rank")
    sluice("run", "--config", QUICKSTART, *JOB, "--quiet", "--output", out, check=True)
    idx, rows = assemble(out)
    np.testing.assert_array_equal(idx, np.arange(N))
    return rows


def sbatch(cluster, args, job_args, wait, env=None, timeout=180):
    cmd = ["sbatch", "--parsable", *(["--wait"] if wait else []), *map(str, args), cluster.script, *map(str, job_args)]
    p = cluster.run(*cmd, env=env or cluster.env, cwd=cluster.root, check=False, timeout=timeout)
    m = re.match(r"(\d+)", p.stdout.strip())
    assert m, f"sbatch printed no job id (exit {p.returncode}):\n{p.stdout}\n{p.stderr}\n{cluster.logs()}"
    return p.returncode, m.group(1)


def read_log(path):
    with open(path) as f:
        return f.read()


def assert_one_rank_outputs(out, reference):
    idx, rows = assemble(out)  # every sample index exactly once
    np.testing.assert_array_equal(idx, np.arange(N))
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        for name, ref in reference.items():
            assert np.array_equal(rows[name], ref) and np.array_equal(f["outputs"][name][:], ref), name


def assert_nodes_idle(cluster, nodes):
    try:
        wait_for("the nodes to be idle", lambda: all(cluster.node_states().get(n) == "idle" for n in nodes), 30, 0.2)
    except TimeoutError:
        raise AssertionError(f"nodes {cluster.node_states()} after the job\n{cluster.logs()}")


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_sbatch_on_two_nodes_runs_two_ranks_on_each(cluster, reference, launcher):
    out = os.path.join(cluster.shared, f"two-nodes-{launcher}")
    log = os.path.join(cluster.shared, "slurm-%j.out")
    env = dict(cluster.env, SLUICE_LAUNCHER=launcher)
    rc, job_id = sbatch(cluster, ["--nodes=2", "--ntasks-per-node=2", "--overcommit", "-o", log],
                        [cluster.job_file, "--output", out, *JOB], wait=True, env=env)
    text = read_log(log.replace("%j", job_id))
    assert rc == 0, f"{text}\n{cluster.logs()}"
    assert "4 rank(s) on 2 node(s)" in text and "sluice.sbatch: complete" in text, text
    assert_one_rank_outputs(out, reference)
    r = report(out)
    nodes = sorted({k["host"] for k in r["ranks"]})
    assert r["nodes"] == 2 and len(nodes) == 2 and set(nodes) <= {"node1", "node2", "node3"}, r["ranks"]
    for k in r["ranks"]:
        # Slurm places ranks in blocks: ranks 0 and 1 on the first node, 2 and 3 on the second.
        assert k["local_rank"] == k["rank"] % 2 and k["local_size"] == 2, k
    assert r["ranks"][0]["host"] != r["ranks"][2]["host"]
    info = cluster.job(job_id)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", info
    assert_nodes_idle(cluster, cluster.sim.nodes)


def committed_records(files):
    counts = []
    for path in files:
        try:
            with h5py.File(path, "r", swmr=True) as f:
                counts.append(sum(1 for rec in f["ledger"][:] if rec["count"] > 0))
        except (OSError, KeyError):
            counts.append(0)
    return counts


def test_a_node_drained_mid_job_and_the_job_requeued_resumes_on_the_nodes_left(cluster, reference):
    out = os.path.join(cluster.shared, "drained")
    log = os.path.join(cluster.shared, "slurm-%j.out")
    # Slowed on every rank (1 s a batch: after a rank's first commit it has 5 batches, 5 s, left), so the
    # job outlasts the drain and requeue below: with 200 ms a batch a loaded machine (two busy loops, a
    # build) ran the whole job out before the requeue and the rerun found nothing left to resume.
    slow = ["--throttle-ms", 1000, "--throttle-ranks", "0,1,2,3"]
    _, job_id = sbatch(cluster, ["--nodes=2", "--ntasks-per-node=2", "--overcommit", "-o", log],
                       [cluster.job_file, "--output", out, *JOB, *slow], wait=False)
    wait_for("the job to run", lambda: cluster.job(job_id)["JobState"] == "RUNNING", 60, 0.2)
    # Observed progress: every rank has committed a chunk.
    files = [os.path.join(out, f"rank-{r:05d}.h5") for r in range(4)]
    wait_for("a commit on every rank", lambda: min(committed_records(files)) > 0, 120, 0.05)
    # The job's second node (the first runs the batch script).
    drained = cluster.run("scontrol", "show", "hostnames", cluster.job(job_id)["NodeList"]).stdout.split()[-1]
    # The administrator takes a node out (a bad GPU, say) and puts the job back in the queue.
    cluster.run("scontrol", "update", f"NodeName={drained}", "State=DRAIN", "Reason=simulated-fault")
    cluster.run("scontrol", "requeue", job_id)
    wait_for("the requeue", lambda: cluster.job(job_id)["Restarts"] == "1", 60, 0.2)
    if cluster.job(job_id)["JobState"] == "PENDING":
        # Slurm holds a requeued job back for cred_expire (10 s here); start it sooner.
        cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now+2", check=False)
    wait_for("the rerun to finish", lambda: cluster.job(job_id)["JobState"] in ("COMPLETED", "FAILED", "CANCELLED"),
             180, 0.3)
    text = read_log(log.replace("%j", job_id))
    info = cluster.job(job_id)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", f"{info}\n{text}\n{cluster.logs()}"
    assert "restart 1, 4 rank(s) on 2 node(s)" in text, text
    m = re.search(r"--resume: (\d+) of (\d+) samples already committed", text)
    assert m and 0 < int(m.group(1)) < N, text

    assert_one_rank_outputs(out, reference)
    r = report(out)
    lost, rerun = r["attempts"]
    assert drained in lost["hosts"] and drained not in rerun["hosts"], r["attempts"]
    assert len(rerun["hosts"]) == 2 and rerun["world_size"] == 4, rerun
    assert lost["samples"] + rerun["samples"] == N
    assert drained not in {k["host"] for k in r["ranks"]}
    assert cluster.node_states()[drained] in ("drained", "draining"), cluster.node_states()
    cluster.run("scontrol", "update", f"NodeName={drained}", "State=RESUME")
    assert_nodes_idle(cluster, cluster.sim.nodes)


def test_each_node_has_a_dev_shm_of_its_own(cluster):
    """As on real nodes, each node's jobs see a /dev/shm of their own, not the machine's.  Open MPI names
    its shared-memory segments after the job (under srun a hash of Slurm's job and step, the same in every
    fresh cluster): with one /dev/shm, two test runs at once mapped each other's segments and a rank died
    of SIGSEGV in mca_btl_vader_poll_handle_frag (issue 39)."""
    name = f"sluice-shm-probe-{os.getpid()}"
    p = cluster.run("srun", "--nodes=2", "--ntasks-per-node=1", "--overcommit", "sh", "-c",
                    f"echo $SLURMD_NODENAME > /dev/shm/{name} && ls /dev/shm", timeout=120)
    assert p.stdout.split().count(name) == 2, p.stdout  # both tasks wrote it, each where its node keeps /dev/shm
    assert not os.path.exists(os.path.join("/dev/shm", name))
    written = {n: read_log(os.path.join(cluster.node_shm(n), name)).strip()
               for n in cluster.sim.nodes if os.path.exists(os.path.join(cluster.node_shm(n), name))}
    assert len(written) == 2 and all(n == text for n, text in written.items()), written
    assert_nodes_idle(cluster, cluster.sim.nodes)
