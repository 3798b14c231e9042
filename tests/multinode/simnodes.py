"""Simulated cluster nodes on one machine, for the multi-node tests.

Each node is a network namespace with its own hostname (a UTS namespace entered on every command),
its own /etc/hosts (bound over the machine's in a mount namespace of the command's, so the machine's
file is never touched) and a veth pair into a bridge
that lives in a namespace of its own, the cluster's switch, on a private /24 that exists only inside
these namespaces.  The file system is shared, as a cluster's parallel file system would be.  Open
MPI's rsh launcher reaches the nodes through an agent script that enters a node's namespaces where
it would ssh; mpirun itself runs on the first node, the cluster's head node, so its daemon and the
ranks it forks there are node1's.  Nothing of the machine's own network is touched: the root
namespace gets no address and no route.

Building this needs root, iproute2 (`ip netns`) and util-linux (`unshare`); `why_not()` says what is
missing, and the tests skip with that reason.
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

SUBNET = "10.231.0"          # node k is SUBNET.k, on the switch namespace's bridge only
IFACE = "sim0"               # each node's interface to the switch
PREFIX = "sluice-sim-"       # namespace names: sluice-sim-<pid>-<node>, so stale ones can be found


def _run(*cmd, check=True):
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return p


def why_not():
    """None when simulated nodes can be built here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "simulated nodes need root (network namespaces)"
    for tool in ("ip", "unshare", "nsenter", "mount", "mpirun"):
        if not shutil.which(tool):
            return f"simulated nodes need `{tool}`, which is not on PATH"
    probe = f"{PREFIX}{os.getpid()}-probe"
    p = _run("ip", "netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"this machine forbids network namespaces (ip netns add: {p.stderr.strip()})"
    try:
        p = _run("nsenter", f"--net=/run/netns/{probe}", "unshare", "--uts", "--mount", "--propagation", "private",
                 "sh", "-c", "mount --bind /etc/hosts /etc/hosts && hostname probe-node && hostname", check=False)
        if p.returncode != 0 or p.stdout.strip() != "probe-node":
            return f"this machine forbids UTS or mount namespaces inside a network namespace ({p.stderr.strip()})"
        p = _run("ip", "link", "add", f"simprobe{os.getpid() % 100000}", "type", "veth", "peer", "name", IFACE, "netns", probe, check=False)
        if p.returncode != 0:
            return f"this machine forbids veth pairs ({p.stderr.strip()})"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def remove_stale():
    """Namespaces left by a test process that died (killed by a timeout): their pid is gone."""
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        m = re.match(rf"({re.escape(PREFIX)}(\d+)-\S+)", line)
        if m and not os.path.exists(f"/proc/{m.group(2)}"):
            _kill_netns(m.group(1))
            _run("ip", "netns", "del", m.group(1), check=False)


def _kill_netns(ns):
    """SIGKILL to every process in network namespace `ns`; returns their pids."""
    pids = [int(x) for x in _run("ip", "netns", "pids", ns, check=False).stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


class SimNodes:
    """`count` nodes named node1..nodeN.  `up()` builds them, `down()` removes every trace (also
    after a failure: call it from a finally)."""

    def __init__(self, count):
        self.nodes = [f"node{i}" for i in range(1, count + 1)]
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}-switch"
        self.dir = tempfile.mkdtemp(prefix="sluice-simnodes-")
        self.agent = os.path.join(self.dir, "agent")
        self.node_env = {}
        self.started = False

    def netns(self, node):
        return f"{self.tag}-{node}"

    def address(self, node):
        return f"{SUBNET}.{self.nodes.index(node) + 1}"

    def up(self):
        remove_stale()
        self.started = True
        _run("ip", "netns", "add", self.switch)
        _run("ip", "netns", "exec", self.switch, "ip", "link", "add", "br0", "type", "bridge")
        _run("ip", "netns", "exec", self.switch, "ip", "link", "set", "br0", "up")
        self.hosts = os.path.join(self.dir, "hosts")
        with open(self.hosts, "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{self.address(n)} {n}\n" for n in self.nodes))
        for i, node in enumerate(self.nodes, 1):
            ns = self.netns(node)
            _run("ip", "netns", "add", ns)
            # The switch's end is created in this namespace only for the moment it takes to move it.
            port = f"sim{os.getpid() % 100000}p{i}"
            _run("ip", "link", "add", port, "type", "veth", "peer", "name", IFACE, "netns", ns)
            _run("ip", "link", "set", port, "netns", self.switch)
            _run("ip", "netns", "exec", self.switch, "ip", "link", "set", port, "master", "br0")
            _run("ip", "netns", "exec", self.switch, "ip", "link", "set", port, "up")
            _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.address(node)}/24", "dev", IFACE)
            _run("ip", "netns", "exec", ns, "ip", "link", "set", IFACE, "up")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        self.set_node_env({})
        return self

    def set_node_env(self, node_env):
        """Environment variables per node ({node: {name: value}}), given to everything started there
        (the node's Open MPI daemon, hence its ranks): how a test gives one node a skewed clock."""
        self.node_env = {n: dict(v) for n, v in node_env.items()}
        lines = ["#!/bin/sh",
                 "# Open MPI's rsh agent for the simulated nodes: `agent NODE COMMAND...` runs COMMAND on NODE",
                 "# (its network namespace, its own hostname), as ssh would.",
                 'node=$1; shift',
                 'case "$node" in']
        for node in self.nodes:
            env = " ".join(f"{k}={v}" for k, v in self.node_env.get(node, {}).items())
            lines.append(f'  {node}) ns={self.netns(node)}; vars="{env}" ;;')
        lines += ['  *) echo "agent: no simulated node $node" >&2; exit 255 ;;', "esac",
                  f'exec nsenter --net=/run/netns/$ns unshare --uts --mount --propagation private env $vars '
                  f'sh -c \'mount --bind {self.hosts} /etc/hosts && hostname "$0" && exec sh -c "$1"\' "$node" "$*"']
        with open(self.agent, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(self.agent, 0o755)

    def on(self, node, argv):
        """argv run on `node`: in its namespaces, with its hostname and its environment variables."""
        # nsenter rather than `ip netns exec`, which mounts a sysfs of its own and so hides
        # /sys/fs/cgroup, which slurmd needs.
        env = [f"{k}={v}" for k, v in self.node_env.get(node, {}).items()]
        return ["nsenter", f"--net=/run/netns/{self.netns(node)}", "unshare", "--uts", "--mount", "--propagation",
                "private", "env", *env, "sh", "-c", f'mount --bind {self.hosts} /etc/hosts && hostname "$0" && exec "$@"',
                node, *argv]

    def mpirun(self, placement, argv):
        """mpirun on the head node (the first of `placement`, [(node, ranks)]) starting argv on those
        nodes over TCP, ranks placed in order (node1's first)."""
        hosts = ",".join(f"{n}:{k}" for n, k in placement)
        total = sum(k for _, k in placement)
        cmd = ["mpirun", "--host", hosts, "-np", str(total),
               "--mca", "plm_rsh_agent", self.agent, "--mca", "plm_rsh_no_tree_spawn", "1",
               "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", IFACE,
               "--mca", "oob_tcp_if_include", IFACE, "--mca", "btl_vader_single_copy_mechanism", "none",
               *map(str, argv)]
        return self.on(placement[0][0], cmd)

    def pids(self, node):
        return [int(x) for x in _run("ip", "netns", "pids", self.netns(node), check=False).stdout.split()]

    def kill_node(self, node):
        """The node is lost: SIGKILL to everything on it (its Open MPI daemon and its ranks)."""
        return _kill_netns(self.netns(node))

    def down(self):
        if self.started:
            for node in self.nodes:
                ns = self.netns(node)
                deadline = time.time() + 20
                while _kill_netns(ns) and time.time() < deadline:
                    time.sleep(0.05)
                _run("ip", "netns", "del", ns, check=False)
            _run("ip", "netns", "del", self.switch, check=False)
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)
