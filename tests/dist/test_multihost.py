#!/usr/bin/python3
"""tests/dist: several hosts (tests/dist/hosts.py: network namespaces with their
own hostname, /etc/hosts, /dev/shm and sshd), 3 hosts x 2 workers started by
`nabla run --launcher ssh` from host a.  Cases: train (data-parallel training:
parameters equal on every rank and to a NumPy reference), env (the launch
variables, forwarding, machine identity, interface and ports), output (rank
prefixes, --log-dir), collectives (every collective against NumPy), desync,
loopback (a host list mixing loopback and remote hosts), restart
(--max-restarts with dist.resume) and host loss (--min-workers).

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_multihost.py
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh (session, ssh
workers and restarts are this suite's C).
Every input is fresh random data; SKIP (with why) when this machine cannot
simulate hosts (not root, no ip netns, no sshd).
"""
import json, os, re, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, needs, per_rank, report, sanitizer_check, script, skip, test  # noqa: E402
from hosts import started  # noqa: E402

rng = np.random.default_rng()
C, WHY = started(3)
HOSTS = ",".join(C.names)


def nrun(args, timeout=120, env=None, host=0):
    """nabla run ... on host a (or another); CompletedProcess."""
    p = C.run(host, [NABLA, "run", *args], timeout=timeout, env=env)
    sanitizer_check(p.stderr)
    return p


def ssh_run(n, extra, path, *args, timeout=120, env=None):
    return nrun(["-n", str(n), "--launcher", "ssh", "--hosts", HOSTS, *C.ssh_args(), "--connect-timeout", "3",
                 "--heartbeat", "5", *extra, path, *args], timeout=timeout, env=env)




needs_hosts = needs(WHY)


def npy(name, a):
    path = os.path.join(TMP, name)
    np.save(path, a)
    return path


# ---------------------------------------------------------------- data-parallel training
TRAIN = """
import dist
X = load_npy(argv[1]); Y = load_npy(argv[2]); W = load_npy(argv[3])
steps = int(argv[4]); lr = 0.1; ck = argv[5]; mode = argv[6]
st = {w: W}
step0 = dist.resume(ck, st)
W = st.w
n = dist.world_size(); r = dist.rank()
rows = int(X.shape[0] / n)
x = X[r * rows:(r + 1) * rows]; y = Y[r * rows:(r + 1) * rows]
fn loss(w) { d = x @ w - y; (d * d).mean() }
g = grad(loss)
if r == 0 { print("START", step0) }
for s in step0..steps {
  if s == 6 and getenv("NABLA_RESTART_COUNT") == "0" and mode != "plain" {
    # the failure: the test kills this rank (restart) or this host (host loss) while it spins
    if (mode == "restart" and r == 4) or (mode == "hostloss" and dist.node_rank() == 2) { print("SPIN", r); while true { } }
  }
  W = W - lr * all_reduce(g(W), op="avg")
  if (s + 1) % 3 == 0 { dist.save_checkpoint(ck, {w: W}, s + 1) }
}
print("W", W.reshape([-1]).tolist())
print("WORLD", n)
"""


def reference(X, Y, W, steps, lr=0.1):
    W = W.copy()
    for _ in range(steps):
        W = W - lr * (2.0 / (X.shape[0] * Y.shape[1])) * X.T @ (X @ W - Y)
    return W.reshape(-1)


def train_inputs(tag):
    X = rng.standard_normal((24, 5)).astype(np.float32)
    Y = rng.standard_normal((24, 3)).astype(np.float32)
    W = (rng.standard_normal((5, 3)) * 0.1).astype(np.float32)
    return X, Y, W, [npy(f"X{tag}.npy", X), npy(f"Y{tag}.npy", Y), npy(f"W{tag}.npy", W)]


def check_params(out, ref, world):
    got = per_rank(out, "W")
    if sorted(got) != list(range(world)):
        return f"W lines from ranks {sorted(got)}, expected 0..{world - 1}"
    first = np.array(got[0])
    for r, w in got.items():
        if not np.array_equal(np.array(w), first):
            return f"rank {r}'s parameters differ from rank 0's: {w} vs {got[0]}"
    if not np.allclose(first, ref, rtol=1e-4, atol=1e-5):
        return f"parameters {first} differ from the single-process reference {ref}"
    return None


@test
@needs_hosts
def test_train(name):
    X, Y, W, files = train_inputs("t")
    path = script(TRAIN, "mh_train.nbl")
    p = ssh_run(6, [], path, *files, "12", os.path.join(TMP, "none.safetensors"), "plain")
    why = check_params(p.stdout, reference(X, Y, W, 12), 6) if p.returncode == 0 else f"rc {p.returncode}"
    report(name, why is None, f"{why}; out={p.stdout[-600:]!r} err={p.stderr[-600:]!r}")


# ---------------------------------------------------------------- the launch environment
ENV_NAMES = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
             "NCCL_TEST_VAR", "NABLA_TEST_VAR", "HIP_VISIBLE_DEVICES", "MY_VAR", "NOT_FORWARDED", "OTHER", "OMP_NUM_THREADS"]
ENV = """
import dist
vals = list()
for k in NAMES { v = getenv(k); push(vals, if v == nil { "" } else { v }) }
push(vals, dist.node_rank()); push(vals, dist.local_rank()); push(vals, dist.local_world_size())
print("ENV", vals)
x = all_reduce(ones(3) * (dist.rank() + 1))
print("SUM", x.tolist())
""".replace("NAMES", json.dumps(ENV_NAMES))


@test
@needs_hosts
def test_env(name):
    # hostb and hostb-data are two names of one machine: one node, local ranks counted together
    path = script(ENV, "mh_env.nbl")
    hosts = "hosta,hostb,hostb-data,hostc"
    env = {"NCCL_TEST_VAR": "nccl1", "NABLA_TEST_VAR": "nabla2", "HIP_VISIBLE_DEVICES": "3", "NOT_FORWARDED": "x",
           "MY_VAR": "from-session"}
    port_lo = int(rng.integers(20000, 30000))
    p = nrun(["-n", "8", "--launcher", "ssh", "--hosts", hosts, *C.ssh_args(), "--connect-timeout", "3",
              "--env", "MY_VAR", "--env", "OTHER=1", "--ifname", "eth1", "--ports", f"{port_lo}-{port_lo + 40}",
              "--threads-per-worker", "1", path], env=env)
    got = {r: dict(zip(ENV_NAMES + ["node", "local", "lworld"], v)) for r, v in per_rank(p.stdout, "ENV").items()}
    why = None
    if p.returncode or sorted(got) != list(range(8)):
        why = f"rc {p.returncode}, ENV from ranks {sorted(got)}"
    else:
        # blocks of 2 per name: a: 0,1  b: 2,3  b-data: 4,5 (same machine as b)  c: 6,7
        want_node = [0, 0, 1, 1, 1, 1, 2, 2]
        want_local = [0, 1, 0, 1, 2, 3, 0, 1]
        want_lworld = [2, 2, 4, 4, 4, 4, 2, 2]
        for r in range(8):
            e = got[r]
            checks = [(e["RANK"], str(r)), (e["WORLD_SIZE"], "8"), (e["NODE_RANK"], str(want_node[r])),
                      (e["LOCAL_RANK"], str(want_local[r])), (e["LOCAL_WORLD_SIZE"], str(want_lworld[r])),
                      (e["node"], want_node[r]), (e["local"], want_local[r]), (e["lworld"], want_lworld[r]),
                      (e["MASTER_ADDR"], C.data(0)),   # --ifname eth1: the session listens on the data network
                      (e["NCCL_TEST_VAR"], "nccl1"), (e["NABLA_TEST_VAR"], "nabla2"), (e["MY_VAR"], "from-session"), (e["OTHER"], "1"), (e["HIP_VISIBLE_DEVICES"], "3"),
                      (e["NOT_FORWARDED"], ""), (e["OMP_NUM_THREADS"], "1")]
            for a, b in checks:
                if a != b and why is None:
                    why = f"rank {r}: got {a!r}, expected {b!r} in {e}"
            if why is None and not (port_lo <= int(e["MASTER_PORT"]) <= port_lo + 40):
                why = f"rank {r}: MASTER_PORT {e['MASTER_PORT']} outside --ports {port_lo}-{port_lo + 40}"
        sums = per_rank(p.stdout, "SUM")
        if why is None and any(sums.get(r) != [36.0] * 3 for r in range(8)):
            why = f"all_reduce over the data network gave {sums}"
    report(name, why is None, f"{why}; out={p.stdout[-800:]!r} err={p.stderr[-800:]!r}")


@test
@needs_hosts
def test_ports(name):
    # NABLA_PORT_RANGE: every port the session and the workers listen on (control, ring) is in the range
    flag = os.path.join(TMP, "ports.flag")
    path = script(f'barrier()\nif dist.rank() == 0 {{ print("SPIN", 0) }}\nwhile not exists("{flag}") {{ }}\nprint("DONE", all_reduce(ones(1)).item())\n',
                  "mh_ports.nbl")
    lo = int(rng.integers(30000, 40000))
    seen = {}

    def look():
        for i in range(3):
            q = C.run(i, ["ss", "-ltnH"], timeout=20)
            seen[C.names[i]] = sorted({int(line.split()[3].rsplit(":", 1)[1]) for line in q.stdout.splitlines() if line.strip()} - {22})
        open(flag, "w").close()
    env = {"NABLA_PORT_RANGE": f"{lo}-{lo + 20}"}
    p = C.popen(0, [NABLA, "run", "-n", "6", "--launcher", "ssh", "--hosts", HOSTS, *C.ssh_args(), "--connect-timeout", "3", path],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in p.stdout:
            if "] SPIN " in line:
                look()
                break
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if not os.path.exists(flag):
            open(flag, "w").close()
    sanitizer_check(err or "")
    counts = {h: len(v) for h, v in seen.items()}
    bad = {h: [x for x in v if not lo <= x <= lo + 20] for h, v in seen.items()}
    # host a: the session's control port and its 2 workers' ring ports and message inboxes (dmsg.c); b, c: 2 + 2 each
    ok = (p.returncode == 0 and out.count("DONE 6.0") == 6 and not any(bad.values())
          and counts == {"hosta": 5, "hostb": 4, "hostc": 4})
    report(name, ok, f"rc {p.returncode} listening={seen} (range {lo}-{lo + 20}); out={(out or '')[-300:]!r} err={(err or '')[-400:]!r}")


# ---------------------------------------------------------------- output
@test
@needs_hosts
def test_output(name):
    path = script('print("line one from", dist.rank())\nprint("line two from", dist.rank())\neprint("err from", dist.rank())\n',
                  "mh_out.nbl")
    logs = os.path.join(TMP, "logs")
    p = ssh_run(6, ["--log-dir", logs], path)
    why = None if p.returncode == 0 else f"rc {p.returncode}"
    for r in range(6):
        for line, stream in ((f"[rank {r}] line one from {r}", p.stdout), (f"[rank {r}] line two from {r}", p.stdout),
                             (f"[rank {r}] err from {r}", p.stderr)):
            if why is None and line not in stream.splitlines():
                why = f"no line {line!r}"
        try:
            with open(os.path.join(logs, f"rank-{r}.log")) as f:
                log = f.read().splitlines()
        except OSError as e:
            log = [str(e)]
        if why is None and log != [f"line one from {r}", f"line two from {r}", f"err from {r}"] and \
                sorted(log) != sorted([f"line one from {r}", f"line two from {r}", f"err from {r}"]):
            why = f"rank-{r}.log holds {log}"
    report(name, why is None, f"{why}; out={p.stdout[-600:]!r} err={p.stderr[-600:]!r}")


# ---------------------------------------------------------------- every collective against NumPy
COLL = """
import dist
r = dist.rank(); n = dist.world_size()
x = load_npy(argv[1] + "/in{r}.npy")
print("SUM", all_reduce(x, op="sum").reshape([-1]).tolist())
print("AVG", all_reduce(x, op="avg").reshape([-1]).tolist())
print("MAX", all_reduce(x, op="max").reshape([-1]).tolist())
print("MIN", all_reduce(x, op="min").reshape([-1]).tolist())
print("GATHER", all_gather(x).reshape([-1]).tolist())
print("RS", reduce_scatter(x, op="sum").reshape([-1]).tolist())
print("BCAST", broadcast(x, src=3).reshape([-1]).tolist())
if r % 2 == 0 { send(x, r + 1); print("RECV [0]") } else { print("RECV", recv(r - 1).reshape([-1]).tolist()) }
# all_to_all: a shared-memory channel to the rank on this host, TCP to the others (one sendrecv mixes both)
got = all_to_all(map(list(range(n)), fn(j) x[0:j + 1] * (j + 1)))
print("A2A", concat(map(got, fn(t) t.reshape([-1])), 0).tolist())
print("PEERS", [join(map(list(range(n)), fn(j) if j == r { "-" } else { str(dist_shm_peer(j)) }), " ")])
"""


@test
@needs_hosts
def test_collectives(name):
    d = os.path.join(TMP, "coll")
    os.makedirs(d, exist_ok=True)
    # 6 rows: small printed lines (long relayed lines: test_relay.py)
    xs = [rng.standard_normal((6, 5)).astype(np.float32) for _ in range(6)]
    for r, x in enumerate(xs):
        np.save(os.path.join(d, f"in{r}.npy"), x)
    path = script(COLL, "mh_coll.nbl")
    p = ssh_run(6, [], path, d)
    S = np.sum(xs, axis=0)
    want = {"SUM": lambda r: S, "AVG": lambda r: S / 6, "MAX": lambda r: np.max(xs, axis=0), "MIN": lambda r: np.min(xs, axis=0),
            "GATHER": lambda r: np.concatenate(xs), "RS": lambda r: S[r:r + 1], "BCAST": lambda r: xs[3],
            "RECV": lambda r: xs[r - 1] if r % 2 else np.zeros(1),
            "A2A": lambda r: np.concatenate([xs[j][0:r + 1].reshape(-1) * (r + 1) for j in range(6)])}
    why = None if p.returncode == 0 else f"rc {p.returncode}"
    for tag, f in want.items():
        got = per_rank(p.stdout, tag)
        for r in range(6):
            if why is None and (r not in got or not np.allclose(np.array(got[r]), f(r).reshape(-1), rtol=1e-5, atol=1e-5)):
                why = f"{tag} on rank {r}: {got.get(r)} vs NumPy {f(r).reshape(-1)[:6]}..."
    # ranks 2k and 2k+1 share host k: a channel between them, TCP to the rest
    peers = per_rank(p.stdout, "PEERS")
    for r in range(6):
        want = " ".join("-" if j == r else ("true" if j // 2 == r // 2 else "false") for j in range(6))
        if why is None and peers.get(r) != [want]:
            why = f"rank {r}'s channels {peers.get(r)!r}, expected {want!r}"
    report(name, why is None, f"{why}; err={p.stderr[-600:]!r}")


# ---------------------------------------------------------------- desync
@test
@needs_hosts
def test_desync(name):
    with open(NABLA, "rb") as f:
        has_check = b"collective desync" in f.read()
    if not has_check:
        skip(name, "this build has no desync detection (dist/ddesync.c, branch w2-coll, not merged here)")
        return
    path = script('x = ones(4)\nif dist.rank() == 3 { y = all_gather(x) } else { y = all_reduce(x) }\nprint("NOTREACHED")\n', "mh_desync.nbl")
    t = time.time()
    p = ssh_run(6, ["--timeout", "120"], path, timeout=150)
    took = time.time() - t
    err = p.stderr
    ok = (p.returncode != 0 and "collective desync" in err and "rank 3" in err and "all_gather" in err
          and "all_reduce" in err and "NOTREACHED" not in p.stdout and took < 100)
    report(name, ok, f"rc {p.returncode} in {took:.0f} s; err={err[-900:]!r}")


# ---------------------------------------------------------------- loopback mixed with remote hosts
@test
@needs_hosts
def test_loopback(name):
    path = script('print("RAN")\n', "mh_loop.nbl")
    t = time.time()
    p = nrun(["-n", "3", "--launcher", "ssh", "--hosts", "localhost,hostb,hostc", *C.ssh_args(), path], timeout=60)
    took = time.time() - t
    # /etc/hosts maps localhost to 127.0.0.1 and ::1: either is the loopback (the system's address order picks)
    ok = (p.returncode != 0 and re.search(r'host "localhost" resolves to the loopback address (127\.0\.0\.1|::1)\b', p.stderr)
          and "\x00" not in p.stderr and "RAN" not in p.stdout and took < 15)
    report(name, ok, f"rc {p.returncode} in {took:.1f} s; err={p.stderr[-600:]!r}")


# ---------------------------------------------------------------- elastic restarts
def run_until_spin(args, on_spin, timeout=150):
    """Starts nabla run on host a; when a rank prints SPIN, calls on_spin(); returns (rc, out, err, fired)."""
    rc, out, err, fired = C.follow(0, [NABLA, "run", *args], {"] SPIN ": lambda: (time.sleep(0.3), on_spin())}, timeout)
    sanitizer_check(err)
    return rc, out, err, bool(fired)


def elastic_run(tag, mode, extra, on_spin, timeout=150):
    """TRAIN with a failure at step 6 of the first attempt; (why or None, out, err, X, Y, W)."""
    X, Y, W, files = train_inputs(tag)
    ck = os.path.join(TMP, f"{mode}.safetensors")
    path = script(TRAIN, f"mh_{mode}.nbl")
    args = ["-n", "6", "--launcher", "ssh", "--hosts", HOSTS, *C.ssh_args(), "--connect-timeout", "3", "--heartbeat", "5",
            *extra, path, *files, "12", ck, mode]
    rc, out, err, fired = run_until_spin(args, on_spin, timeout=timeout)
    starts = re.findall(r"^\[rank 0\] START (\d+)$", out, re.M)
    why = None
    if not fired:
        why = "no rank reached the failure point"
    elif rc != 0:
        why = f"rc {rc}"
    elif not starts or starts[0] != "0" or starts[-1] != "6":
        why = f"the group started at steps {starts}, expected a fresh start, then a resume at the step-6 checkpoint"
    return why, out, err, reference(X, Y, W, 12), starts


@test
@needs_hosts
def test_restart(name):
    def kill_rank4():
        for pid in C.worker_pids(2, 4):
            os.kill(pid, 9)
    why, out, err, ref, starts = elastic_run("r", "restart", ["--max-restarts", "1"], kill_rank4)
    if why is None and starts != ["0", "6"]:
        why = f"started at {starts}: one restart expected"
    if why is None and "restarting the group (restart 1 of 1)" not in err:
        why = "no restart message"
    if why is None:
        why = check_params(out.split("START 6")[-1], ref, 6)
    report(name, why is None, f"{why}; out={out[-600:]!r} err={err[-800:]!r}")


@test
@needs_hosts
def test_live_restart(name):
    # a live session: exclude= at start, dist.restart(exclude=, min_workers=) on the hosts left
    src = f"""
import dist
dist.start(6, launcher="ssh", hosts=["hosta", "hostb", "hostc"], exclude=["hostc"], connect_timeout=3, heartbeat=5, {C.ssh_opts_nbl()})
fn hosts() {{ h = list(); for w in dist.workers() {{ push(h, w.host) }}; h }}
print("A", hosts(), dist.run(fn() dist.local_world_size()))
dist.restart(exclude=["hostb"], min_workers=2)
print("B", hosts(), dist.run(fn() all_reduce(ones(1) * (dist.rank() + 1)).item()))
try {{ dist.restart(exclude=["hosta"], min_workers=1) }} catch e {{ print("C", e.message) }}
"""
    path = script(src, "mh_live.nbl")
    p = C.run(0, [NABLA, path], timeout=120)
    sanitizer_check(p.stderr)
    ok = (p.returncode == 0
          and 'A ["hosta", "hosta", "hosta", "hostb", "hostb", "hostb"] [3, 3, 3, 3, 3, 3]' in p.stdout
          and 'B ["hosta", "hosta", "hosta"] [6.0, 6.0, 6.0]' in p.stdout
          and "C dist.restart: no host is left" in p.stdout)
    report(name, ok, f"rc {p.returncode} out={p.stdout[-600:]!r} err={p.stderr[-600:]!r}")


@test
@needs_hosts
def test_host_loss(name):
    why, out, err, ref, starts = elastic_run("h", "hostloss", ["--max-restarts", "2", "--min-workers", "4"],
                                             lambda: C.kill_host(2), timeout=200)
    worlds = per_rank(out, "WORLD")
    if why is None and (sorted(worlds) != [0, 1, 2, 3] or set(worlds.values()) != {4}):
        why = f"the last group was not 4 workers on the 2 hosts left: {worlds}"
    if why is None and "hostc" not in err:
        why = "the lost host is not named"
    if why is None:
        why = check_params(out.split("START 6")[-1], ref, 4)
    report(name, why is None, f"{why}; out={out[-600:]!r} err={err[-900:]!r}")


C.stop()
dutil.finish()
