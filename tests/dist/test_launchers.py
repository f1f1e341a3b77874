#!/usr/bin/python3
"""tests/dist: launchers (ssh, slurm), heartbeats and interrupts through the
control channel, and resuming data-parallel training on another worker count.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_launchers.py
One line per test ("PASS: name" / "FAIL: name: why" / "SKIP: name: why");
exit 1 on any failure.  Every process has a timeout.

ssh: the test starts a real sshd (Debian's openssh-server) on a spare
loopback port with a generated host key, user key and authorized_keys, and
stops it by pid at the end.  slurm: as root, it starts munged, slurmctld and
slurmd (tests/dist/slurmutil.py) from a generated slurm.conf (private ports,
state and sockets under a temporary directory) and stops them by pid.  Either is skipped, with the
reason, when the programs are missing or the daemons cannot start here
(tools/install-deps.sh installs openssh-server, slurm-wlm and munge).
"""
import json, os, re, shutil, signal, socket, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
import hosts  # noqa: E402
from slurmutil import Slurm, find, stop_proc  # noqa: E402
from dutil import NABLA, TMP, alive, lines_with, report, sanitizer_check, script, skip, test, wait_gone  # noqa: E402

started = []          # (name, Popen or Slurm) of the daemons this test started; stopped by pid at exit
stray = []            # worker pids a test stopped (SIGSTOP): killed at exit if still there


def run(src, timeout=60, env=None, cmd=None):
    path = script(src)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run((cmd or []) + [NABLA, path], capture_output=True, text=True, timeout=timeout, env=e,
                       stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def read_until(stream, marker, secs=30):
    t = time.time(); seen = ""
    while time.time() - t < secs:
        line = stream.readline()
        if not line:
            break
        seen += line
        if marker in line:
            return line, seen
    raise AssertionError(f"no {marker!r} within {secs} s; saw {seen[-800:]!r}")


def spare_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, secs=10):
    t = time.time()
    while time.time() - t < secs:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


# ---------------------------------------------------------------- sshd
SSH = {"why": None}


def setup_sshd():
    sshd, ssh, keygen = find("sshd"), find("ssh"), find("ssh-keygen")
    if not (sshd and ssh and keygen):
        return "sshd/ssh/ssh-keygen not installed (apt-get install openssh-server openssh-client; tools/install-deps.sh)"
    d = os.path.join(TMP, "ssh")
    os.makedirs(d, mode=0o700)
    for k in ("host_key", "user_key"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(d, k)], check=True, timeout=30)
    shutil.copy(os.path.join(d, "user_key.pub"), os.path.join(d, "authorized_keys"))
    os.chmod(os.path.join(d, "authorized_keys"), 0o600)
    port = spare_port()
    cfg = hosts.write_sshd_config(os.path.join(d, "sshd_config"), d, port, "127.0.0.1", f"{d}/sshd.pid")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # privilege separation directory
    log = open(os.path.join(d, "sshd.log"), "w")
    p = subprocess.Popen([sshd, "-D", "-e", "-f", cfg], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    started.append(("sshd", p))
    if not wait_port(port, 10) or p.poll() is not None:
        with open(os.path.join(d, "sshd.log")) as f:
            return f"sshd did not start: {f.read()[-400:]!r}"
    SSH.update(port=port, key=os.path.join(d, "user_key"), dir=d, pid=p.pid,
               opts=["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
    # the login itself must work before nabla is tried
    q = subprocess.run([ssh, "-o", "BatchMode=yes", *SSH["opts"], "-p", str(port), "-i", SSH["key"], "127.0.0.1", "echo ok"],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if q.stdout.strip() != "ok":
        return f"ssh to the test sshd failed (rc {q.returncode}): {q.stderr.strip()[-300:]}"
    return None


def ssh_start(n=2, extra=""):
    opts = ", ".join(f'"{o}"' for o in SSH["opts"])
    hosts = ", ".join(['"127.0.0.1"'] * n)
    return (f'dist.start({n}, launcher="ssh", hosts=[{hosts}], ssh_port={SSH["port"]}, ssh_key="{SSH["key"]}", '
            f'ssh_options=[{opts}]{extra})')


def needs_ssh(fn):
    def wrapped(name):
        if SSH["why"]:
            skip(name, SSH["why"])
            return
        fn(name)
    wrapped.__name__ = fn.__name__
    return wrapped


HEX64 = re.compile(r"\b[0-9a-f]{64}\b")


def cmdlines():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    out[int(d)] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                pass
    return out


def ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


# ---------------------------------------------------------------- ssh tests
SSH["why"] = None
try:
    SSH["why"] = setup_sshd()
except Exception as e:  # noqa
    SSH["why"] = f"sshd setup failed: {type(e).__name__}: {e}"


@test
@needs_ssh
def test_ssh_collective_and_stop(name):
    path = script(f"""
import dist
{ssh_start(2)}
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
t = clock(); while clock() - t < 1.0 {{ }}
print("HOSTS", map(dist.workers(), fn(w) w.host))
print("AR", dist.run(fn() all_reduce(ones(3) * (dist.rank() + 1)).tolist()))
print("LOCAL", dist.run(fn() list(dist.local_rank(), dist.world_size())))
dist.exec("print('hi from', dist.rank())")
dist.stop()
print("AFTER", dist.size())
""", "ssh1.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        line, _ = read_until(p.stderr, "PIDS", 30)
        pids = [int(x) for x in line.split()[1:]]
        # while it runs: the workers are not the session's children, were
        # started over ssh with the key on stdin, and no command line holds a key
        cl = cmdlines()
        not_children = all(ppid(q) != p.pid for q in pids)
        key_stdin = all("--key-stdin" in cl.get(q, "") and "--key-file" not in cl.get(q, "") for q in pids)
        leaked = [c for c in cl.values() if ("nabla" in c or "ssh" in c) and HEX64.search(c)]
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    sanitizer_check(err)
    ok = (p.returncode == 0 and "AR [[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]" in out and "LOCAL [[0, 2], [1, 2]]" in out
          and '"127.0.0.1", "127.0.0.1"' in out and "[rank 1] hi from 1" in out and "AFTER nil" in out
          and len(pids) == 2 and not_children and key_stdin and not leaked and wait_gone(pids, 5))
    report(name, ok, f"rc={p.returncode} not_children={not_children} stdin={key_stdin} leaked={leaked[:1]} "
                     f"out={out!r} err={err[-600:]!r}")


@test
@needs_ssh
def test_ssh_interrupt_control_message(name):
    # piped REPL; the workers are not children (nor in the session's process
    # group): the interrupt reaches them only as a control message
    p = subprocess.Popen([NABLA], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.stdin.write(f'import dist\n{ssh_start(2)}\neprint("STARTED")\ndist.exec(\'while true {{ }}\')\n')
        p.stdin.flush()
        read_until(p.stderr, "STARTED", 30)
        time.sleep(1.0)
        os.kill(p.pid, signal.SIGINT)
        time.sleep(0.5)
        out, err = p.communicate('print("OK", dist.run(fn() all_reduce(dist.rank() + 1)))\n'
                                 'print("ALIVE", map(dist.workers(), fn(w) w.alive))\ndist.stop()\n', timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    sanitizer_check(err)
    ok = "OK [3, 3]" in out and "ALIVE [true, true]" in out and "Interrupted" in err and p.returncode == 1
    report(name, ok, f"rc={p.returncode} out={out!r} err={err[-600:]!r}")


@test
@needs_ssh
def test_ssh_session_killed_workers_exit(name):
    path = script(f"""
import dist
{ssh_start(2)}
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
while true {{ }}
""", "ssh_killed.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    line, _ = read_until(p.stderr, "PIDS", 30)
    pids = [int(x) for x in line.split()[1:]]
    was_alive = all(alive(q) for q in pids)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(10)
    t0 = time.time()
    gone = wait_gone(pids, 10)
    report(name, len(pids) == 2 and was_alive and gone,
           f"pids={pids} still alive after {time.time() - t0:.1f} s: {[q for q in pids if alive(q)]}")


@test
@needs_ssh
def test_ssh_session_hung_heartbeat(name):
    # a stopped session keeps its TCP connections open: only the heartbeats tell the workers
    path = script(f"""
import dist
{ssh_start(2, ", heartbeat=2")}
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
while true {{ }}
""", "ssh_hung.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        line, _ = read_until(p.stderr, "PIDS", 30)
        pids = [int(x) for x in line.split()[1:]]
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGSTOP)
        t0 = time.time()
        gone = wait_gone(pids, 12)
        dt = time.time() - t0
    finally:
        os.kill(p.pid, signal.SIGKILL)
        os.kill(p.pid, signal.SIGCONT)
    out, err = p.communicate(timeout=20)
    ok = gone and dt >= 1.5 and "no heartbeat from the session" in err
    report(name, ok, f"gone={gone} after {dt:.1f} s err={err[-500:]!r}")


@test
@needs_ssh
def test_ssh_hung_worker_reported(name):
    path = script(f"""
import dist
{ssh_start(2, ", heartbeat=2, timeout=60")}
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
t0 = clock()
r = try {{ dist.exec('if dist.rank() == 1 {{ x = recv(0) }} else {{ t = clock(); while clock() - t < 60 {{ }} }}') }} catch e {{ print("CAUGHT", e.message); nil }}
print("FAST", clock() - t0 < 20)
print("ALIVE", map(dist.workers(), fn(w) w.alive))
r = try {{ dist.exec("1") }} catch e {{ print("BROKEN", e.message); nil }}
dist.restart()
print("AFTER", dist.run(fn() all_reduce(dist.rank() + 1)))
eprint("PIDS2", join(map(dist.workers(), fn(w) str(w.pid)), " "))
dist.stop()
""", "ssh_hungw.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        line, _ = read_until(p.stderr, "PIDS", 30)
        pids = [int(x) for x in line.split()[1:]]
        time.sleep(1.5)
        os.kill(pids[1], signal.SIGSTOP)
        stray.append(pids[1])
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
    sanitizer_check(err)
    want = f"worker rank 1 (pid {pids[1]} on host 127.0.0.1) stopped responding: no heartbeat for"
    pids2 = [int(x) for x in lines_with("PIDS2 ", err)[0].split()] if "PIDS2" in err else []
    ok = (p.returncode == 0 and want in out and "while in dist.exec (send/recv)" in out and "FAST true" in out
          and "ALIVE [true, false]" in out and "BROKEN" in out and "AFTER [3, 3]" in out and want in err
          and wait_gone(pids + pids2, 10))
    report(name, ok, f"rc={p.returncode} out={out!r} err={err[-800:]!r}")


@test
@needs_ssh
def test_ssh_worker_killed_reported(name):
    path = script(f"""
import dist
{ssh_start(2, ", timeout=60")}
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
r = try {{ dist.exec('if dist.rank() == 1 {{ while true {{ }} }} else {{ y = all_reduce(ones(4)) }}') }} catch e {{ print("CAUGHT", e.message); nil }}
dist.stop()
""", "ssh_killw.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        line, _ = read_until(p.stderr, "PIDS", 30)
        pids = [int(x) for x in line.split()[1:]]
        time.sleep(1.0)
        os.kill(pids[1], signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    sanitizer_check(err)
    ok = (p.returncode == 0 and f"worker rank 1 (pid {pids[1]} on host 127.0.0.1) died" in out
          and "while in dist.exec" in out and wait_gone(pids, 5))
    report(name, ok, f"rc={p.returncode} out={out!r} err={err[-600:]!r}")


@test
@needs_ssh
def test_ssh_login_failure_is_clear(name):
    bad = os.path.join(SSH["dir"], "not_authorized")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", bad], check=True, timeout=30)
    rc, out, err = run(f"""
import dist
t0 = clock()
print(try {{ {ssh_start(2).replace(SSH["key"], bad)} }} catch e {{ "CAUGHT " + e.message }})
print("FAST", clock() - t0 < 20)
""", timeout=60)
    ok = rc == 0 and "CAUGHT dist.start: worker rank" in out and "exited before connecting" in out and "ssh" in out and "FAST true" in out
    report(name, ok, f"rc={rc} out={out!r} err={err[-400:]!r}")


@test
@needs_ssh
def test_ssh_nabla_run(name):
    path = script("""
x = all_reduce(ones(2) * (dist.rank() + 1))
print("rank", dist.rank(), "of", dist.world_size(), x.tolist(), argv)
""", "spmd_ssh.nbl")
    cmd = [NABLA, "run", "-n", "2", "--launcher", "ssh", "--hosts", "127.0.0.1,127.0.0.1", "--ssh-port", str(SSH["port"]),
           "--ssh-key", SSH["key"]]
    for o in SSH["opts"][1::2]:
        cmd += ["--ssh-option", "-o" + o]
    p = subprocess.run(cmd + [path, "a1"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    ok = p.returncode == 0 and "rank 0 of 2 [3.0, 3.0]" in p.stdout and "a1" in p.stdout
    report(name, ok, f"rc={p.returncode} out={p.stdout!r} err={p.stderr[-500:]!r}")


@test
def test_run_env_and_option_errors(name):
    # --env NAME=VALUE and bare NAME reach local workers; bad values are clear errors before anything starts
    path = script('print("E", [getenv("NB_T_A"), getenv("NB_T_B"), getenv("RANK"), getenv("NABLA_RESTART_COUNT")])\n', "envrun.nbl")
    val = f"v{os.getpid()}-{time.time()}"
    env = dict(os.environ, NB_T_B=val)
    env.pop("NB_T_UNSET", None)
    p = subprocess.run([NABLA, "run", "-n", "2", "--env", "NB_T_A=a b'c", "--env", "NB_T_B", path], capture_output=True, text=True,
                       timeout=60, env=env, stdin=subprocess.DEVNULL)
    ok = p.returncode == 0 and all(f'[rank {r}] E ["a b\'c", "{val}", "{r}", "0"]' in p.stdout for r in (0, 1))
    bad = [(["--env", "NB_T_UNSET"], "NB_T_UNSET is not set here"),
           (["--ports", "9-5"], 'port range "9-5" is not LOW-HIGH'),
           (["--ifname", "nosuchif0"], "there is no interface nosuchif0"),
           (["--max-restarts", "x"], "--max-restarts must be an integer")]
    errs = []
    for args, want in bad:
        q = subprocess.run([NABLA, "run", "-n", "2", *args, path], capture_output=True, text=True, timeout=60, env=env,
                           stdin=subprocess.DEVNULL)
        sanitizer_check(q.stderr)
        if q.returncode == 0 or want not in q.stderr:
            errs.append(f"{args}: rc {q.returncode} {q.stderr[-300:]!r}")
    sanitizer_check(p.stderr)
    report(name, ok and not errs, f"rc={p.returncode} out={p.stdout!r} err={p.stderr[-300:]!r} {errs}")


@test
def test_local_batch(name):
    # dist.local_batch keeps the global batch on any world size: batch * accum * world == global, batch <= max_batch
    import random
    world = random.choice([2, 3])
    g = world * random.randint(3, 40)
    mb = random.randint(1, g // world)
    path = script(f'b = dist.local_batch({g}, {mb})\nprint("LB", dist.local_batch({g}).batch, b.batch, b.accum)\n', "lb.nbl")
    p = subprocess.run([NABLA, "run", "-n", str(world), path], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    per = g // world
    accum = next(a for a in range(1, per + 1) if per % a == 0 and per // a <= mb)
    want = f"{per} {per // accum} {accum}"
    ok = p.returncode == 0 and all(f"[rank {r}] LB {want}" in p.stdout for r in range(world))
    report(name, ok, f"g={g} world={world} max={mb} want {want}; rc={p.returncode} out={p.stdout!r} err={p.stderr[-300:]!r}")


# ---------------------------------------------------------------- checkpoint on another worker count
@test
def test_resume_checkpoint_2_to_3_workers(name):
    ck = os.path.join(TMP, "dp.safetensors")
    src = f"""
import nn
import optim
import dist
B = 12
fn make_data() {{
  seed(7)
  {{x: randn([72, 5]), y: randn([72, 3])}}
}}
fn make_model() {{
  seed(3)
  nn.mlp(list(5, 8, 3), act=tanh)
}}
fn loss_fn(model, x, y) = mean((model(x) - y) ** 2)
fn flat(model) = list(concat(map(nn.parameters(model), fn(p) p.reshape([-1])), 0).to("f64"))
fn lr(t) = 0.02 * (0.9 ** t)

# uninterrupted: one process, the whole batch, 6 steps
model = make_model()
d = make_data()
opt = optim.adamw(model, lr=lr)
for s in 0..6 {{ opt.step(grad(loss_fn)(model, d.x[s * B:(s + 1) * B], d.y[s * B:(s + 1) * B])) }}
print("REF", flat(model))

# this rank's slice of global batch s
fn part(d, s) {{
  k = B / dist.world_size()
  lo = s * B + dist.rank() * k
  [d.x[lo:lo + k], d.y[lo:lo + k]]
}}
fn train(first, last, path, resume) {{
  global model, opt
  seed(100 + dist.rank())
  model = nn.mlp(list(5, 8, 3), act=tanh)          # different on every rank ...
  if dist.rank() == 0 {{ model = make_model() }}
  dist.data_parallel(model)                          # ... until rank 0's is broadcast
  opt = optim.adamw(model, lr=lr)
  if resume {{
    c = load(path)
    nn.load_state(model, c.model)
    nn.load_state(opt.state, c.opt)
  }}
  d = make_data()
  for s in first..last {{
    b = part(d, s)
    opt.step(dist.average_grads(grad(loss_fn)(model, b[0], b[1])))
  }}
  if not resume and dist.rank() == 0 {{ save(path, {{model: model, opt: opt.state}}) }}
  barrier()
  opt.state.t
}}

dist.start(2)
dist.exec("import nn\\nimport optim")
dist.push(make_data=make_data, make_model=make_model, loss_fn=loss_fn, lr=lr, part=part, B=B, flat=flat)
print("T2", dist.run(train, 0, 3, "{ck}", false))
dist.stop()

dist.start(3)
dist.exec("import nn\\nimport optim")
dist.push(make_data=make_data, make_model=make_model, loss_fn=loss_fn, lr=lr, part=part, B=B, flat=flat)
print("T3", dist.run(train, 3, 6, "{ck}", true))
ps = dist.run(fn() flat(model))
print("SAME", ps[0] == ps[1] and ps[1] == ps[2])
print("DP", ps[0])
dist.stop()
"""
    rc, out, err = run(src, timeout=120)
    ok = rc == 0 and "T2 [3, 3]" in out and "T3 [6, 6, 6]" in out and "SAME true" in out
    why = f"rc={rc} out={out[-600:]!r} err={err[-800:]!r}"
    if ok:
        a = np.array(json.loads(lines_with("REF ", out)[0]))
        b = np.array(json.loads(lines_with("DP ", out)[0]))
        diff = np.max(np.abs(a - b)) if a.shape == b.shape else None
        ok = diff is not None and diff < 1e-5 and np.max(np.abs(a)) > 0
        why = f"max diff {diff}"
    report(name, ok, why)


# ---------------------------------------------------------------- slurm
SLURM = {"why": None, "env": None}


def setup_slurm():
    host = socket.gethostname().split(".")[0]
    s = Slurm(os.path.join(TMP, "slurm"), [host], ports=(spare_port(), spare_port()))
    started.append(("slurm", s))   # munged, slurmctld, slurmd: s.stop()
    why = s.start()
    if why:
        return why
    SLURM.update(env=s.env, dir=s.d, host=host)
    return None


def needs_slurm(fn):
    def wrapped(name):
        if SLURM["why"]:
            skip(name, SLURM["why"])
            return
        fn(name)
    wrapped.__name__ = fn.__name__
    return wrapped


try:
    SLURM["why"] = setup_slurm()
except Exception as e:  # noqa
    SLURM["why"] = f"slurm setup failed: {type(e).__name__}: {e}"


@test
@needs_slurm
def test_slurm_srun_hostname(name):
    p = subprocess.run(["srun", "-n", "2", "hostname"], capture_output=True, text=True, timeout=60, env=SLURM["env"],
                       stdin=subprocess.DEVNULL)
    lines = p.stdout.split()
    ok = p.returncode == 0 and len(lines) == 2 and all(l == socket.gethostname() for l in lines)
    report(name, ok, f"rc={p.returncode} out={p.stdout!r} err={p.stderr[-400:]!r}")


@test
@needs_slurm
def test_slurm_dist_start(name):
    src = """
import dist
dist.start(2, launcher="slurm")
print("WHO", dist.run(fn() list(dist.rank(), dist.local_rank(), dist.world_size())))
print("AR", dist.run(fn() all_reduce(ones(3) * (dist.rank() + 1)).tolist()))
print("HOSTS", len(dist.workers()), dist.workers()[0].host != "?")
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
dist.exec("print('slurm task', dist.rank(), getenv('SLURM_PROCID'))")
dist.stop()
print("DONE")
"""
    rc, out, err = run(src, timeout=120, env=SLURM["env"], cmd=["salloc", "-n", "2"])
    pids = [int(x) for x in lines_with("PIDS ", err)[0].split()] if "PIDS" in err else []
    ok = (rc == 0 and "WHO [[0, 0, 2], [1, 1, 2]]" in out and "AR [[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]" in out
          and "HOSTS 2 true" in out and "[rank 1] slurm task 1 1" in out and "DONE" in out and wait_gone(pids, 10))
    report(name, ok, f"rc={rc} out={out!r} err={err[-800:]!r}")


@test
@needs_slurm
def test_slurm_nabla_run(name):
    path = script("""
x = all_reduce(ones(2) * (dist.rank() + 1))
print("rank", dist.rank(), "of", dist.world_size(), x.tolist())
""", "spmd_slurm.nbl")
    p = subprocess.run(["salloc", "-n", "2", NABLA, "run", "-n", "2", "--launcher", "slurm", path], capture_output=True,
                       text=True, timeout=120, env=SLURM["env"], stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    ok = p.returncode == 0 and "rank 0 of 2 [3.0, 3.0]" in p.stdout
    report(name, ok, f"rc={p.returncode} out={p.stdout!r} err={p.stderr[-600:]!r}")


# ---------------------------------------------------------------- cleanup
for pid in stray:
    if alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
for nm, p in reversed(started):
    p.stop() if isinstance(p, Slurm) else stop_proc(p)
shutil.rmtree(TMP, ignore_errors=True)
dutil.finish()
