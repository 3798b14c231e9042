"""A real Slurm cluster across simulated nodes (simnodes.py): slurmctld on node1, one slurmd per node
with its own NodeName and address, the clients (sbatch, scontrol, sinfo) on node1.  Built on the
one-node cluster of tests/slurm/slurm_cluster.py (its munged, its plugin choices, its queries).

Each node's daemons see a /tmp of their own (a folder of the cluster's bound over /tmp in the
node's mount namespace), as a real node's local disk: Slurm's PMIx plugin makes per-step folders
under /tmp that two slurmd on one shared /tmp would collide on.  Everything the nodes share (the
configuration, the munge socket, job files, outputs) therefore lives outside /tmp, under `base`.

They see a /dev/shm of their own too, as a real node does.  Open MPI's shared-memory transport
(btl vader) backs each node's ranks with /dev/shm/vader_segment.<host>.<jobid>.<local rank>, and
under srun the jobid is a hash of Slurm's PMIx namespace, slurm.pmix.<job>.<step>: the same in
every fresh cluster (its first job is job 1, step 0).  With the machine's /dev/shm shared, two test
runs at once (two checkouts, a CI clone beside an engineer's run) mapped each other's segments, and
a rank read the other job's messages and died of SIGSEGV in mca_btl_vader_poll_handle_frag
(issue 39)."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "slurm"))
from slurm_cluster import SLURM_CONF, Cluster, missing_software, wait_for  # noqa: E402,F401

SLURMCTLD_PORT = 6817  # inside the simulated nodes' network only: nothing else listens there
SLURMD_PORT = 6818


class SlurmOnNodes(Cluster):
    def __init__(self, sim, base):
        super().__init__(base)
        self.sim = sim

    def node_tmp(self, node):
        return os.path.join(self.base, "tmp", node)

    def node_shm(self, node):
        return os.path.join(self.base, "shm", node)

    def on(self, node, argv):
        """argv on `node` with that node's own /tmp and /dev/shm."""
        tmp, shm = self.node_tmp(node), self.node_shm(node)
        return self.sim.on(node, ["sh", "-c", f'mount --bind {tmp} /tmp && mount --bind {shm} /dev/shm && exec "$@"',
                                  "on-node", *argv])

    def start(self):
        shutil.rmtree(self.base, ignore_errors=True)
        for d in ["state", "log", *(f"spool-{n}" for n in self.sim.nodes), *(f"tmp/{n}" for n in self.sim.nodes),
                  *(f"shm/{n}" for n in self.sim.nodes)]:
            os.makedirs(os.path.join(self.base, d))
        for n in self.sim.nodes:
            os.chmod(self.node_tmp(n), 0o1777)
            os.chmod(self.node_shm(n), 0o1777)
        os.chmod(self.base, 0o755)
        self._start_munge()
        conf = SLURM_CONF.format(base=self.base, ctld_port=SLURMCTLD_PORT, slurmd_port=SLURMD_PORT,
                                 munge_socket=self.munge_socket)
        head = self.sim.nodes[0]
        nodes = "".join(f"NodeName={n} NodeAddr={self.sim.address(n)} CPUs=2 State=UNKNOWN\n" for n in self.sim.nodes)
        for old, new in [("SlurmctldHost=localhost", f"SlurmctldHost={head}({self.sim.address(head)})"),
                         ("/spool\n", "/spool-%n\n"), ("/slurmd.pid\n", "/slurmd-%n.pid\n"),
                         ("/log/slurmd.log\n", "/log/slurmd-%n.log\n"),
                         ("NodeName=localhost CPUs=2 State=UNKNOWN\n", nodes),
                         ("Nodes=localhost", f"Nodes={','.join(self.sim.nodes)}")]:
            assert old in conf, old
            conf = conf.replace(old, new)
        with open(self.conf, "w") as f:
            f.write(conf)
        subprocess.run(self.on(head, ["/usr/sbin/slurmctld", "-f", self.conf]), env=self.env, check=True, timeout=30)
        for n in self.sim.nodes:
            subprocess.run(self.on(n, ["/usr/sbin/slurmd", "-f", self.conf, "-N", n]), env=self.env, check=True,
                           timeout=30)
        try:
            wait_for("every node to be idle (sinfo)", lambda: self.node_states() == {n: "idle" for n in self.sim.nodes},
                     60, 0.25)
        except TimeoutError:
            raise RuntimeError(f"slurm did not come up: {self.node_states()}\n" + self.logs())
        return self

    def run(self, *cmd, check=True, timeout=60, **kw):
        """A Slurm client command, run on the head node."""
        cmd = self.on(self.sim.nodes[0], list(map(str, cmd)))
        p = subprocess.run(cmd, env=kw.pop("env", self.env), capture_output=True, text=True, timeout=timeout, **kw)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def node_states(self):
        p = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=10)
        states = {}
        for line in p.stdout.splitlines():
            name, _, state = line.partition(" ")
            states[name] = state.strip()
        return states

    def node_state(self):
        return " ".join(sorted(set(self.node_states().values())))

    def logs(self):
        text = [super().logs()]
        for n in self.sim.nodes:
            path = os.path.join(self.base, "log", f"slurmd-{n}.log")
            try:
                with open(path) as f:
                    text.append(f"== {path} (tail)\n" + "".join(f.readlines()[-30:]))
            except OSError:
                pass
        return "\n".join(text)

    def stop(self):
        pidfiles = [os.path.join(self.base, "slurmctld.pid")] + \
                   [os.path.join(self.base, f"slurmd-{n}.pid") for n in self.sim.nodes]
        if any(os.path.exists(p) for p in pidfiles):
            self.run("scontrol", "shutdown", check=False, timeout=30)
            try:
                wait_for("slurmctld and slurmd to exit", lambda: not any(os.path.exists(p) for p in pidfiles), 30)
            except TimeoutError:
                pass  # SimNodes.down() kills whatever still runs on the nodes
        munge_pid_file = os.path.join(self.munge_dir, "munged.pid")
        try:
            pid = int(open(munge_pid_file).read().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        if pid:
            try:
                os.kill(pid, 15)
                wait_for("munged to exit", lambda: not os.path.exists(munge_pid_file), 15)
            except (ProcessLookupError, TimeoutError):
                pass
