"""tests/dist/slurmutil.py — a real Slurm (Debian's slurm-wlm 22.05 and munge)
started by a test: one munged, one slurmctld and one slurmd per node, from a
generated slurm.conf (private ports, state, spool, pid and log files under the
given directory), stopped by pid.  Used by test_launchers.py (one node: this
machine) and test_elastic.py (one node per network-namespace host of
tests/dist/hosts.py, each slurmd in its host's namespaces with `-N NODE`).

    s = Slurm(d, ["hosta", "hostb", "hostc"], addrs=[...], cpus=2,
              popen=lambda i, argv, out: cluster.popen(i, argv, stdout=out, stderr=out),
              run=lambda argv, env: cluster.run(0, argv, env=env, timeout=15))
    why = s.start()          # None, or why Slurm cannot run here (the caller SKIPs/FAILs with it)
    ... subprocess.run(["salloc", ...], env=s.env) ...
    s.stop()

popen(i, argv, out) starts a daemon on node i (slurmctld on node 0);
run(argv, env) runs a client command (sinfo) where slurmctld is reachable.
Defaults: this machine.  munged's socket is a path in d, so every mount
namespace that sees d (the simulated hosts do) reaches it; the one key signs
for all nodes as a cluster's shared munge.key does.  own_cgroups=True: each
slurmd first mounts this machine's cgroup filesystems in its mount namespace
(cgroup_mounts_sh(): slurmd 22.05 will not start without them, and `ip netns
exec` gives the simulated hosts a /sys without them).
"""
import os
import shutil
import subprocess
import time


def find(prog):
    return shutil.which(prog) or next((p for p in (f"/usr/sbin/{prog}", f"/usr/bin/{prog}") if os.path.exists(p)), None)


def stop_proc(p, secs=5):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(secs)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def cgroup_mounts_sh():
    """A shell command that mounts this machine's cgroup filesystems again under
    /sys/fs/cgroup (the same hierarchies, v1 or v2), for a mount namespace whose
    /sys is a fresh sysfs — as `ip netns exec` leaves the simulated hosts, where
    slurmd refuses to start ("No filesystem mounted on /sys/fs/cgroup")."""
    cmds = []
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, where, fstype, opts = line.split()[:4]
            if not where.startswith("/sys/fs/cgroup"):
                continue
            if fstype == "tmpfs" and where == "/sys/fs/cgroup":
                cmds.insert(0, "mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup")
            elif fstype in ("cgroup", "cgroup2"):
                keep = [o for o in opts.split(",") if o not in ("rw", "ro", "relatime", "nosuid", "nodev", "noexec")]
                if keep and all(o.startswith("name=") for o in keep):
                    keep.insert(0, "none")      # a named hierarchy without controllers (name=systemd)
                o = f" -o {','.join(keep)}" if keep else ""
                cmds.append(f"mkdir -p {where} && mount -t {fstype}{o} cgroup {where}")
    if not cmds:
        return "true"
    return "mountpoint -q /sys/fs/cgroup || { " + " && ".join(cmds) + "; }"


def _local_popen(i, argv, out):
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)


def _local_run(argv, env):
    return subprocess.run(argv, capture_output=True, text=True, timeout=15, env=env, stdin=subprocess.DEVNULL)


class Slurm:
    def __init__(self, d, nodes, addrs=None, cpus=None, ports=(6817, 6818), popen=None, run=None, conf_extra="",
                 own_cgroups=False):
        self.d = d
        self.nodes = list(nodes)
        self.addrs = list(addrs) if addrs else [None] * len(self.nodes)
        self.cpus = cpus or os.cpu_count() or 1
        self.ports = ports
        self.popen = popen or _local_popen
        self.run = run or _local_run
        self.conf_extra = conf_extra
        self.own_cgroups = own_cgroups   # slurmd mounts the cgroup filesystems in its namespace first
        self.procs = []        # (name, Popen), stopped in reverse order
        self.slurmd = {}       # node index -> Popen
        self.env = None

    def _conf(self, sock):
        d, ctl = self.d, self.nodes[0]
        ctl_host = ctl if not self.addrs[0] else f"{ctl}({self.addrs[0]})"
        node_lines = "\n".join(f"NodeName={n}" + (f" NodeAddr={a}" if a else "") + f" CPUs={self.cpus} State=UNKNOWN"
                               for n, a in zip(self.nodes, self.addrs))
        # %n: the node name, so that several slurmd on one machine keep their files apart
        return f"""ClusterName=nablatest
SlurmctldHost={ctl_host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={self.ports[0]}
SlurmdPort={self.ports[1]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
{self.conf_extra}
{node_lines}
PartitionName=nablatest Nodes={",".join(self.nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""

    def _tail(self, name):
        logs = ""
        for fn in (name + ".out", name + ".log"):
            try:
                with open(os.path.join(self.d, fn)) as f:
                    logs += f.read()[-300:]
            except OSError:
                pass
        return logs

    def start(self, secs=30):
        """None when every node is idle, else why not (the daemons started so far keep running: stop())."""
        progs = {p: find(p) for p in ("munged", "munge", "slurmctld", "slurmd", "srun", "salloc", "sinfo")}
        missing = [p for p, v in progs.items() if not v]
        if missing:
            return f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge; tools/install-deps.sh)"
        if os.geteuid() != 0:
            return "the test runs slurmctld/slurmd with SlurmUser=root and needs root"
        d = self.d
        for sub in ("", "state", "munge", *(f"spool-{n}" for n in self.nodes)):
            os.makedirs(os.path.join(d, sub), mode=0o700, exist_ok=True)
        with open(os.path.join(d, "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(os.path.join(d, "munge.key"), 0o600)
        sock = os.path.join(d, "munge", "munge.sock")
        mlog = open(os.path.join(d, "munged.out"), "w")
        m = subprocess.Popen([progs["munged"], "-F", "--force", f"--socket={sock}", f"--key-file={d}/munge.key",
                              f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed"],
                             stdin=subprocess.DEVNULL, stdout=mlog, stderr=mlog)
        self.procs.append(("munged", m))
        t = time.time()
        while not os.path.exists(sock) and time.time() - t < 10 and m.poll() is None:
            time.sleep(0.05)
        if not os.path.exists(sock):
            return f"munged did not start: {self._tail('munged')!r}"
        conf = os.path.join(d, "slurm.conf")
        with open(conf, "w") as f:
            f.write(self._conf(sock))
        env = dict(os.environ, SLURM_CONF=conf)
        for k in list(env):
            if k.startswith("SLURM_") and k != "SLURM_CONF":
                del env[k]
        self.env = env
        out = open(os.path.join(d, "slurmctld.out"), "w")
        self.procs.append(("slurmctld", self.popen(0, ["env", f"SLURM_CONF={conf}", progs["slurmctld"], "-D", "-i", "-f", conf], out)))
        time.sleep(0.5)
        for i, n in enumerate(self.nodes):
            out = open(os.path.join(d, f"slurmd-{n}.out"), "w")
            argv = ["env", f"SLURM_CONF={conf}", progs["slurmd"], "-D", "-N", n, "-f", conf]
            if self.own_cgroups:
                argv = ["sh", "-c", cgroup_mounts_sh() + '; exec "$@"', "sh", *argv]
            p = self.popen(i, argv, out)
            self.procs.append((f"slurmd-{n}", p))
            self.slurmd[i] = p
        t = time.time()
        state = ""
        while time.time() - t < secs:
            for name, p in self.procs:
                if p.poll() is not None:
                    return f"{name} exited with status {p.returncode}: {self._tail(name)!r}"
            q = self.run([progs["sinfo"], "-h", "-N", "-o", "%N %T"], env)
            state = (q.stdout + q.stderr).strip()
            idle = [ln.split()[0] for ln in q.stdout.splitlines() if ln.split()[1:2] == ["idle"]]
            if q.returncode == 0 and sorted(idle) == sorted(self.nodes):
                return None
            time.sleep(0.3)
        return f"the nodes did not become idle within {secs} s (sinfo: {state!r})"

    def stop(self):
        for _, p in reversed(self.procs):
            stop_proc(p)
        self.procs = []
