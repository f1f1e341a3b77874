"""tests/dist/hosts.py — several simulated hosts on one machine, for the
multi-host tests (test_multihost.py) and benchmarks (bench/dist/).

Each host is a network namespace with its own UTS namespace (hostname), a
mount namespace with its own /etc/hosts and a private tmpfs /dev/shm, and an
sshd on port 22; its first process is that sshd (started with
`ip netns exec NS unshare --mount --uts ...`), so every ssh login on the host
and every command run there (`nsenter` into the sshd's namespaces) sees the
same host.  Two networks join the hosts through bridges in a "switch"
namespace: management (eth0, 10.77.0.0/24, the host names) and data (eth1,
10.77.1.0/24, names HOST-data).  Only addresses inside these namespaces are
used; nothing outside them is touched.  Every run uses fresh names (a random
tag in every namespace and veth name: a veth recreated right after its
namespace is deleted can leave a ghost device on some kernels).

Cluster(n, v6=True) is the IPv6 network: management eth0 also gets
fd77::N/64 and the host names resolve to it only (HOST-v4 to 10.77.0.N);
data eth1 has only fd77:1::N/64 (HOST-data), so an interface choice there
must take its IPv6 address.  Addresses are added without duplicate address
detection (nodad): usable at once.

Use:
    from hosts import Cluster, run_on_hosts
    with Cluster(3) as c:                  # hosts c.names == ["hosta", "hostb", "hostc"]
        p = c.run(0, ["build/nabla", "run", "-n", "6", "--launcher", "ssh",
                      "--hosts", ",".join(c.names), *c.ssh_args(), "script.nbl"], timeout=120)
        c.popen(1, [...]); c.kill_host(2)  # a host "loses power": its processes die, its links go down
    # or, in one call (starts the hosts, runs one command on host 0, tears down):
    p = run_on_hosts(3, ["build/nabla", "run", ...], timeout=300)   # CompletedProcess; c.ssh_args() via {SSH}

Cluster(n).why is a reason string when this machine cannot simulate hosts
(not root, no `ip netns`, no sshd): callers SKIP with it.  Teardown (the
context manager's exit, also on an exception, and an atexit hook) kills the
processes in the namespaces it created by pid, deletes the namespaces and the
temporary directory.
"""
import atexit
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

IP = shutil.which("ip") or "/usr/sbin/ip"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
_live = []


def _sh(args, check=True, timeout=20):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and p.returncode:
        raise RuntimeError(f"{' '.join(args)} failed (rc {p.returncode}): {p.stderr.strip()[-300:]}")
    return p


def _ip_batch(lines, ns=None):
    """Runs ip commands (one a line, ip -batch; in namespace ns) in one ip
    process: the setup is ~50 of them, each ~0.1 s to start on a busy machine."""
    args = [IP] + (["-n", ns] if ns else []) + ["-batch", "-"]
    p = subprocess.run(args, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=20)
    if p.returncode:
        raise RuntimeError(f"{' '.join(args)} failed (rc {p.returncode}): {p.stderr.strip()[-300:]}")


def write_sshd_config(path, d, port, listen, pidfile):
    """An sshd_config for tests: key login only (d/host_key, d/authorized_keys), root allowed, no PAM.
    listen: an address or a list of them.  Key exchange: curve25519 only, not
    OpenSSH 9's default sntrup761x25519 (post-quantum, ~2.5x the CPU of a
    login: ~0.7 s of every ssh login on a busy 2-core machine)."""
    listens = "\n".join(f"ListenAddress {a}" for a in ([listen] if isinstance(listen, str) else listen))
    with open(path, "w") as f:
        f.write(f"""Port {port}
{listens}
HostKey {d}/host_key
AuthorizedKeysFile {d}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org
PidFile {pidfile}
""")
    return path


def capability():
    """None when namespaces, veths, bridges and sshd work here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "unshare", "nsenter", "sshd", "ssh", "ssh-keygen"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} is not installed (tools/install-deps.sh: iproute2, util-linux, openssh-server)"
    probe = "nbprobe" + secrets.token_hex(4)
    p = _sh([IP, "netns", "add", probe], check=False)
    if p.returncode:
        return f"ip netns add failed: {p.stderr.strip()[-200:]}"
    q = _sh([IP, "-n", probe, "link", "add", "b0", "type", "bridge"], check=False)
    _sh([IP, "netns", "del", probe], check=False)
    if q.returncode:
        return f"cannot create a bridge in a namespace: {q.stderr.strip()[-200:]}"
    return None


class Cluster:
    def __init__(self, n=3, prefix="host", v6=False):
        self.n = n
        self.v6 = v6
        self.names = [f"{prefix}{chr(ord('a') + i)}" for i in range(n)]
        self.why = capability()
        self.tag = secrets.token_hex(3)
        self.sw = f"nbs{self.tag}"
        self.ns = [f"nbh{self.tag}{i}" for i in range(n)]
        self.pids = [None] * n      # each host's sshd: the process whose namespaces are the host
        self.procs = []
        self.procs_of = [None] * n  # each host's sshd as a Popen (the last boot's)
        self.dir = None
        self.up = False

    # -------------------------------------------------------------- setup
    def __enter__(self):
        if self.why:
            return self
        try:
            self.start()
        except Exception:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def mgmt(self, i):
        return f"10.77.0.{i + 1}"

    def data(self, i):
        return f"fd77:1::{i + 1}" if self.v6 else f"10.77.1.{i + 1}"

    def mgmt6(self, i):
        return f"fd77::{i + 1}"

    def start(self):
        _live.append(self)
        # a runner's timeout (SIGTERM) must still tear the hosts down: exit through atexit
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(128 + sig))
        self.dir = tempfile.mkdtemp(prefix="nabla-hosts-")
        d = self.dir
        for k in ("host_key", "user_key"):
            _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(d, k)])
        shutil.copy(os.path.join(d, "user_key.pub"), os.path.join(d, "authorized_keys"))
        os.chmod(os.path.join(d, "authorized_keys"), 0o600)
        self.key = os.path.join(d, "user_key")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # sshd's privilege separation directory
        with open(os.path.join(d, "bashrc"), "w") as f:
            f.write("# the simulated hosts' ~/.bashrc (tests/dist/hosts.py)\n")
        with open(os.path.join(d, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n::1 localhost ip6-localhost\n")
            for i, h in enumerate(self.names):
                if self.v6:
                    f.write(f"{self.mgmt6(i)} {h}\n{self.mgmt(i)} {h}-v4\n{self.data(i)} {h}-data\n")
                else:
                    f.write(f"{self.mgmt(i)} {h}\n{self.data(i)} {h}-data\n")
        self.up = True   # (stop() deletes these namespaces, as far as they were made)
        _ip_batch([f"netns add {ns}" for ns in [self.sw] + self.ns])
        veths, switch, host = [], [], {ns: ["link set lo up"] for ns in self.ns}
        for br in ("bmgmt", "bdata"):
            switch += [f"link add {br} type bridge", f"link set {br} up"]
        for i, ns in enumerate(self.ns):
            for eth, br, addr, c in (("eth0", "bmgmt", self.mgmt(i), "m"), ("eth1", "bdata", self.data(i), "d")):
                host_end, sw_end = f"v{self.tag}{c}{i}h", f"v{self.tag}{c}{i}s"
                veths.append(f"link add {host_end} netns {ns} type veth peer name {sw_end} netns {self.sw}")
                host[ns].append(f"link set {host_end} name {eth}")
                host[ns].append(f"addr add {addr}/64 dev {eth} nodad" if ":" in addr else f"addr add {addr}/24 dev {eth}")
                if self.v6 and eth == "eth0":
                    host[ns].append(f"addr add {self.mgmt6(i)}/64 dev {eth} nodad")
                host[ns].append(f"link set {eth} up")
                switch += [f"link set {sw_end} master {br}", f"link set {sw_end} up"]
        _ip_batch(veths)
        _ip_batch(switch, self.sw)
        for ns in self.ns:
            _ip_batch(host[ns], ns)
        for i in range(self.n):
            self.boot(i)
        self.wait_answers(range(self.n), 30)
        return self

    def wait_answers(self, hosts, secs):
        """Waits until every host of hosts (indices) answers ssh from host 0
        (its sshd just booted: tried all at once, again every 0.2 s); raises
        RuntimeError saying which did not within secs."""
        left, t = list(hosts), time.time()
        while left:
            tries = {i: self.popen(0, ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3", *SSH_OPTS, "-i", self.key,
                                       self.names[i], "hostname"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for i in left}
            for i, p in tries.items():
                try:
                    out, err = p.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, err = p.communicate()
                if p.returncode == 0 and out.strip() == self.names[i]:
                    left.remove(i)
                elif time.time() - t > secs or self.procs_of[i].poll() is not None:
                    with open(os.path.join(self.dir, f"sshd{i}.log")) as f:
                        raise RuntimeError(f"host {self.names[i]} does not answer ssh (rc {p.returncode}: "
                                           f"{err.strip()[-200:]}); sshd log: {f.read()[-300:]!r}")
            if left:
                time.sleep(0.2)

    def boot(self, i, log_mode="w"):
        """Starts host i's first process (its namespaces' owner): its own
        hostname, /etc/hosts, ~/.bashrc and /dev/shm, then sshd (exec: same
        pid).  start() and a revived host (elastic_hosts.py) both boot here,
        so a host that comes back is the same host."""
        d = self.dir
        # the login shell's ~/.bashrc (which bash reads for every command run
        # over ssh) is an empty one on the simulated hosts: a developer's
        # .bashrc (pyenv init, conda, ...) can take seconds per login on a
        # busy machine and leave locks behind when a test kills a host mid-login
        bashrc = os.path.join(os.path.expanduser("~"), ".bashrc")
        quiet_rc = f" && mount --bind {d}/bashrc {bashrc}" if os.path.isfile(bashrc) else ""
        cfg = write_sshd_config(os.path.join(d, f"sshd_config{i}"), d, 22, ["0.0.0.0", "::"], f"{d}/sshd{i}.pid")
        log = open(os.path.join(d, f"sshd{i}.log"), log_mode)
        boot = (f"hostname {self.names[i]} && mount --make-rprivate / && mount --bind {d}/hosts /etc/hosts{quiet_rc} && "
                f"mount -t tmpfs -o size=2g,mode=1777 tmpfs /dev/shm && exec {SSHD} -D -e -f {cfg}")
        p = subprocess.Popen([IP, "netns", "exec", self.ns[i], "unshare", "--mount", "--uts", "sh", "-c", boot],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.procs.append(p)
        self.procs_of[i] = p
        self.pids[i] = p.pid
        return p

    def ssh_args(self):
        """`nabla run` options that make its ssh reach these hosts."""
        out = ["--ssh-key", self.key]
        for i in range(0, len(SSH_OPTS), 2):
            out += ["--ssh-option", "-o" + SSH_OPTS[i + 1]]
        return out

    def ssh_opts_nbl(self):
        """dist.start(...) arguments for the same (Nabla source text)."""
        opts = ", ".join(f'"{o}"' for o in SSH_OPTS)
        return f'ssh_key="{self.key}", ssh_options=[{opts}]'

    # -------------------------------------------------------------- running
    def _enter(self, i):
        return ["nsenter", "-t", str(self.pids[i]), "-n", "-m", "-u", f"--wd={os.getcwd()}", "--"]

    def run(self, i, cmd, timeout=60, check=False, env=None, cwd=None):
        """Runs cmd on host i (its network, mounts and hostname); CompletedProcess, text."""
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.run(self._enter(i) + list(cmd), capture_output=True, text=True, timeout=timeout,
                           env=e, cwd=cwd, stdin=subprocess.DEVNULL)
        if check and p.returncode:
            raise RuntimeError(f"{cmd} on {self.names[i]} failed (rc {p.returncode}): {p.stderr[-400:]}")
        return p

    def popen(self, i, cmd, env=None, **kw):
        e = dict(os.environ)
        e.update(env or {})
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(self._enter(i) + list(cmd), env=e, **kw)
        return p

    def host_pids(self, i):
        q = _sh([IP, "netns", "pids", self.ns[i]], check=False)
        return [int(x) for x in q.stdout.split() if x.isdigit()]

    def worker_pids(self, i, rank):
        """the pids of host i's nabla worker processes for `rank`"""
        out = []
        for pid in self.host_pids(i):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"worker" in argv and b"--rank" in argv and argv[argv.index(b"--rank") + 1] == str(rank).encode():
                out.append(pid)
        return out

    def follow(self, i, cmd, actions, timeout, env=None, feed=False):
        """Runs cmd on host i; when a stdout line contains a key of actions,
        calls its function (once).  Returns (rc, out, err, the keys that fired).
        feed: cmd's standard input is a pipe (else /dev/null), and a string an
        action returns is written to it: a script that waits for the action
        blocks in input() instead of spinning on the CPU the action needs."""
        p = self.popen(i, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                       stdin=subprocess.PIPE if feed else subprocess.DEVNULL)
        out, fired = [], []
        t = time.time()
        stuck = threading.Timer(timeout, p.kill)   # a cmd that hangs silently ends at timeout too
        stuck.start()
        try:
            for line in p.stdout:
                out.append(line)
                for key, fn in actions.items():
                    if key in line and key not in fired:
                        fired.append(key)
                        said = fn()
                        if feed and isinstance(said, str):
                            p.stdin.write(said)
                            p.stdin.flush()
                if time.time() - t > timeout:
                    break
            p.wait(timeout=max(5, timeout - (time.time() - t)))
        finally:
            stuck.cancel()
            if p.poll() is None:
                p.kill()
                p.wait()
        return p.returncode, "".join(out), p.stderr.read(), fired

    def kill_host(self, i):
        """Host i fails: every process in it is killed and its links go down."""
        for pid in self.host_pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for c in ("m", "d"):
            _sh([IP, "-n", self.sw, "link", "set", f"v{self.tag}{c}{i}s", "down"], check=False)

    # -------------------------------------------------------------- teardown
    def stop(self):
        if self.up:
            for i in range(self.n):
                for pid in self.host_pids(i):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            for p in self.procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            for ns in self.ns + [self.sw]:
                _sh([IP, "netns", "del", ns], check=False)
            self.up = False
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        if self in _live:
            _live.remove(self)


def started(n, **kw):
    """A Cluster(n, **kw) started for a test suite (stopped at exit): (cluster,
    why), why saying why hosts cannot be simulated here ('' when they run)."""
    c = Cluster(n, **kw)
    why = c.why
    if not why:
        try:
            c.__enter__()
        except Exception as e:  # noqa
            why = f"cannot start the simulated hosts: {e}"
    return c, why


def run_on_hosts(n, cmd, host=0, timeout=300, env=None):
    """Starts n hosts, runs cmd on one of them, tears down: the CompletedProcess.
    "{SSH}" in cmd is replaced by the ssh options of `nabla run` (ssh_args()),
    "{HOSTS}" by the comma-separated host names.  Raises RuntimeError(why) when
    hosts cannot be simulated here."""
    with Cluster(n) as c:
        if c.why:
            raise RuntimeError(c.why)
        full = []
        for a in cmd:
            if a == "{SSH}":
                full += c.ssh_args()
            else:
                full.append(a.replace("{HOSTS}", ",".join(c.names)))
        return c.run(host, full, timeout=timeout, env=env)


@atexit.register
def _cleanup():
    for c in list(_live):
        c.stop()
