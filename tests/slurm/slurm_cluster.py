"""A real one-node Slurm cluster for the slurm tests: its own munged, slurmctld and slurmd, all
state under one temporary folder, ports picked free, so it clashes with nothing already running.

The choices follow /work/shared/notes/slurm-one-node.md: proctrack/linuxproc and task/none (the
cgroup plugins fail silently in containers: jobs 'complete' without output and the node drains),
MpiDefault=pmix (Debian's OpenMPI speaks PMIx only), 2 CPUs, short scheduler intervals so a requeued
job starts again within seconds, and a fresh StateSaveLocation so no old job comes back.

By hand (as root):  python3 tests/slurm/slurm_cluster.py start /tmp/my-slurm   (prints the SLURM_CONF
to export), and  python3 tests/slurm/slurm_cluster.py stop /tmp/my-slurm."""
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/mungekey", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")

SLURM_CONF = """\
ClusterName=sluicetest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket},cred_expire=10
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=pmix
ReturnToService=2
EnforcePartLimits=ALL
MailProg=/bin/true
MinJobAge=3600
KillWait=5
NodeName=localhost CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def missing_software():
    """A sentence naming what is not installed or not allowed, or None when a cluster can start."""
    absent = [d for d in DAEMONS if not os.access(d, os.X_OK)]
    absent += [c for c in ("sbatch", "srun", "scontrol", "sinfo", "scancel", "runuser") if shutil.which(c) is None]
    if absent:
        return ("Slurm/munge not installed (missing " + ", ".join(absent) +
                "); install with SLUICE_WITH_SLURM=1 data_tools/install-deps.sh")
    if os.geteuid() != 0:
        return "the slurm tests start slurmctld/slurmd/munged and must run as root"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (the munge package creates it)"
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


class Cluster:
    def __init__(self, base):
        self.base = os.path.abspath(base)
        self.conf = os.path.join(self.base, "slurm.conf")
        self.munge_dir = os.path.join(self.base, "munge")
        self.munge_socket = os.path.join(self.munge_dir, "munge.socket")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        # Slurm variables of a surrounding allocation would confuse the clients of this cluster.
        for key in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))]:
            if key != "SLURM_CONF":
                del self.env[key]
        self.env["SLURM_CONF"] = self.conf

    # -- start -------------------------------------------------------------------------------------
    def start(self):
        shutil.rmtree(self.base, ignore_errors=True)
        for d in ("state", "spool", "log"):
            os.makedirs(os.path.join(self.base, d))
        os.chmod(self.base, 0o755)  # munged (user munge) must reach its own folder below
        self._start_munge()
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(base=self.base, ctld_port=free_port(), slurmd_port=free_port(),
                                      munge_socket=self.munge_socket))
        subprocess.run(["/usr/sbin/slurmctld", "-f", self.conf], env=self.env, check=True, timeout=30)
        subprocess.run(["/usr/sbin/slurmd", "-f", self.conf, "-N", "localhost"], env=self.env, check=True, timeout=30)
        try:
            wait_for("the node to be idle (sinfo)", lambda: self.node_state() == "idle", 60, 0.25)
        except TimeoutError:
            raise RuntimeError("slurm did not come up:\n" + self.logs())
        return self

    def _start_munge(self):
        munge = pwd.getpwnam("munge")
        os.makedirs(self.munge_dir)
        os.chmod(self.munge_dir, 0o755)  # clients (any user) must reach the socket; the key file itself is 0600
        os.chown(self.munge_dir, munge.pw_uid, munge.pw_gid)
        as_munge = ["runuser", "-u", "munge", "--"]
        key = os.path.join(self.munge_dir, "munge.key")
        subprocess.run(as_munge + ["/usr/sbin/mungekey", "-c", "-k", key], check=True, timeout=30,
                       capture_output=True)
        subprocess.run(as_munge + ["/usr/sbin/munged", "--socket", self.munge_socket, "--key-file", key,
                                   "--pid-file", os.path.join(self.munge_dir, "munged.pid"),
                                   "--seed-file", os.path.join(self.munge_dir, "munged.seed"),
                                   "--log-file", os.path.join(self.munge_dir, "munged.log")],
                       check=True, timeout=30)
        wait_for("munged's socket", lambda: os.path.exists(self.munge_socket), 10)

    # -- queries -----------------------------------------------------------------------------------
    def run(self, *cmd, check=True, timeout=60, **kw):
        p = subprocess.run(list(map(str, cmd)), env=kw.pop("env", self.env), capture_output=True, text=True,
                           timeout=timeout, **kw)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def node_state(self):
        p = self.run("sinfo", "-h", "-o", "%T", check=False, timeout=10)
        return p.stdout.strip() if p.returncode == 0 else ""

    def job(self, job_id):
        """scontrol's fields of one job as a dict (JobState, ExitCode, Restarts, ...)."""
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout.strip()
        fields = {}
        for token in out.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        return fields

    def logs(self):
        text = []
        for path in (os.path.join(self.base, "log", "slurmctld.log"), os.path.join(self.base, "log", "slurmd.log"),
                     os.path.join(self.munge_dir, "munged.log")):
            try:
                with open(path) as f:
                    text.append(f"== {path} (tail)\n" + "".join(f.readlines()[-40:]))
            except OSError:
                pass
        return "\n".join(text)

    # -- stop --------------------------------------------------------------------------------------
    def stop(self):
        """scontrol shutdown stops slurmctld and slurmd; then munged.  Stopped daemons linger as
        zombies for a moment, so the pid files going away is the sign they are gone."""
        pidfiles = [os.path.join(self.base, n) for n in ("slurmctld.pid", "slurmd.pid")]
        if any(read_pid(p) for p in pidfiles):
            self.run("scontrol", "shutdown", check=False, timeout=30)
            try:
                wait_for("slurmctld and slurmd to exit", lambda: not any(os.path.exists(p) for p in pidfiles), 30)
            except TimeoutError:
                for p in pidfiles:  # only the daemons this cluster started, by their own pid files
                    if read_pid(p):
                        try:
                            os.kill(read_pid(p), 9)
                        except ProcessLookupError:
                            pass
        munge_pid_file = os.path.join(self.munge_dir, "munged.pid")
        pid = read_pid(munge_pid_file)
        if pid:
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                pass
            try:
                wait_for("munged to exit", lambda: not os.path.exists(munge_pid_file), 15)
            except TimeoutError:
                pass


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit("usage: slurm_cluster.py start|stop FOLDER")
    why = missing_software()
    if why:
        sys.exit(why)
    cluster = Cluster(sys.argv[2])
    if sys.argv[1] == "start":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.stop()
