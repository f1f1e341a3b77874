#!/usr/bin/python3
"""tests/dist: elastic membership and the shrink path on 3 simulated hosts
(tests/dist/hosts.py: network namespaces with their own hostname and sshd),
2 slots each.  Cases:

- live_shrink: a live session of 6 workers loses host c (killed: its
  processes die, its links go down); a plain dist.restart() continues at
  once on the 2 hosts left with 4 workers (never 3 per host: the slots of
  the first start), without retrying the dead host; dist.restart(min_workers=4)
  continues, min_workers=5 is refused naming why (the group stays); host c
  comes back and the next dist.restart(exclude=["hostb"]) re-admits it (c
  in, b out: 4 workers), exclude=[] brings b back (6).  Every group's
  all_reduce is checked.
- grow: `nabla run --nnodes 2:3 --max-restarts 1` (4..6 workers) trains
  data-parallel; host c is killed at step 4 (the only restart is spent on
  it: the group continues with 4 workers from the step-3 checkpoint), then
  returns while the group waits at step 7; the session asks for a regroup,
  the group stops at the step-9 checkpoint and resumes with 6 workers; the
  final parameters equal (bitwise) a plain 6-worker run resumed from that
  same checkpoint, and the NumPy reference.
- slurm_node_loss: inside an allocation of 3 nodes (SLURM_* set; srun and
  scontrol are tests/dist/fake_slurm's over the simulated hosts), `nabla
  run` takes the launcher, -n and --nodes from it; node c is lost at step 4
  and the restart runs srun --ntasks=4 --nodes=2 --exclude=hostc, resuming
  from the step-3 checkpoint (--min-workers 4); node c comes back while the
  group waits at step 7 (scontrol: DOWN*, then in service), the group
  regroups at the step-9 checkpoint and srun runs 6 tasks on 3 nodes again
  (re-admitted within the allocation); the parameters equal NumPy's.
- srun: `nabla run` as one of several srun tasks is refused with a clear
  error (no N silent world-1 jobs); a lone task is not.
- real_slurm_*: the same under a real Slurm 22.05 (tests/dist/slurmutil.py:
  munged, slurmctld on host a, one slurmd per host in its namespaces):
  `srun -n3 nabla run` refused by every task (task 0 says why, once), `srun
  -n1 nabla run` runs; `salloc -N3 -n6 --no-kill nabla run` takes slurm, -n
  and --nodes from the allocation, loses node c at step 4 (slurmd, stepd,
  workers killed, links down), continues with 4 on a and b, waits until
  slurmctld declares c DOWN (the allocation outlives it) and ends equal to
  NumPy.  SKIP with why when Slurm cannot run on the hosts.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_elastic.py
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
SKIP (with why) when this machine cannot simulate hosts.
"""
import os, re, shutil, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, needs, per_rank, report, sanitizer_check, script, test  # noqa: E402
from hosts import started  # noqa: E402
from elastic_hosts import Hosts  # noqa: E402

rng = np.random.default_rng()
C, WHY = started(3)
HOSTS = ",".join(C.names)
needs_hosts = needs(WHY)
H = Hosts(C)
kill_host, revive_host, ensure_up = H.kill, H.revive, H.ensure_up


def follow(cmd, actions, timeout, env=None, feed=False):
    """Runs cmd on host a; when a stdout line contains a key of actions, calls
    its function (once; feed: a string it returns goes to cmd's stdin, for
    a script waiting in input()).  Returns (rc, out, err, the keys that fired)."""
    rc, out, err, fired = C.follow(0, cmd, actions, timeout, env, feed)
    sanitizer_check(err)
    return rc, out, err, fired


def and_go(action, *args):
    """an action for follow(feed=True): action(*args), then the script's input() returns"""
    def run():
        action(*args)
        return "go\n"
    return run


def touch(path):
    with open(path, "w") as f:
        f.write("go")


# ---------------------------------------------------------------- a live session: shrink, refuse, re-admit
LIVE = """
import dist
fn hosts() { h = list(); for w in dist.workers() { push(h, w.host) }; h }
# every rank's (rank + 1) * v summed: checks the whole group formed and computes
fn total(v) { dist.run(fn(v) all_reduce(ones(2) * v * (dist.rank() + 1)).tolist(), v)[0] }
v = VAL
dist.start(6, launcher="ssh", hosts=["hosta", "hostb", "hostc"], connect_timeout=2, heartbeat=3, SSHOPTS)
print("A", hosts(), total(v))
print("KILL")
input()
while true { k = 0; for w in dist.workers() { if w.alive { k = k + 1 } }; if k <= 4 { break } }
dist.restart()
print("B", hosts(), total(v))
dist.restart(min_workers=4)
print("C", hosts(), total(v))
try { dist.restart(min_workers=5); print("D no error") } catch e { print("D", e.message) }
print("D2", hosts(), total(v))
print("REVIVE")
input()
dist.restart(exclude=["hostb"])
print("F", hosts(), total(v))
dist.restart(exclude=[])
print("G", hosts(), total(v))
dist.stop()
"""


def expect_total(v, ranks):
    return [float(np.float32(v) * sum(range(1, ranks + 1)))] * 2


@test
@needs_hosts
def test_live_shrink(name):
    ensure_up()
    v = float(np.float32(rng.uniform(0.5, 2.0)))
    src = LIVE.replace("SSHOPTS", C.ssh_opts_nbl()).replace("VAL", repr(v))
    path = script(src, "el_live.nbl")
    rc, out, err, fired = follow([NABLA, "-u", path], {"KILL": and_go(kill_host, 2), "REVIVE": and_go(revive_host, 2)},
                                 timeout=240, feed=True)
    got = {}
    for line in out.splitlines():
        m = re.match(r"^(A|B|C|D2|F|G) (\[.*?\]) (\[.*\])$", line)
        if m:
            got[m.group(1)] = (eval(m.group(2)), [float(x) for x in eval(m.group(3))])
    a, b, c = ["hosta"] * 2, ["hostb"] * 2, ["hostc"] * 2
    want = {"A": (a + b + c, 6), "B": (a + b, 4), "C": (a + b, 4), "D2": (a + b, 4), "F": (a + c, 4), "G": (a + b + c, 6)}
    why = None if rc == 0 else f"rc {rc}"
    for k, (hs, ranks) in want.items():
        if why:
            break
        if k not in got:
            why = f"no line {k}"
        elif got[k][0] != hs:
            why = f"{k}: the group ran on {got[k][0]}, expected {hs}"
        elif not np.allclose(got[k][1], expect_total(v, ranks), rtol=1e-6):
            why = f"{k}: all_reduce gave {got[k][1]}, expected {expect_total(v, ranks)}"
    dline = [l for l in out.splitlines() if l.startswith("D ")]
    if why is None and not (dline and "fewer than min_workers=5" in dline[0] and "2 hosts left" in dline[0]):
        why = f"dist.restart(min_workers=5) on 2 hosts of 2 slots: {dline}"
    # the first restart did not try the dead host (a start there fails: "exited before connecting")
    if why is None and ("exited before connecting" in err or "could not" in err):
        why = "a restart tried the dead host"
    report(name, why is None, f"{why}; out={out[-900:]!r} err={err[-900:]!r}")


# ---------------------------------------------------------------- a live elastic session (dist.start(..., elastic=true))
ELASTIC_LOCAL = """
import dist
fn total(v) { dist.run(fn(v) all_reduce(ones(2) * v * (dist.rank() + 1)).tolist(), v)[0] }
v = VAL
r = try { dist.start(2, elastic=true, min_workers=3); "no error" } catch e { e.message }
print("M", r)
r = try { dist.start(2, elastic=1); "no error" } catch e { e.message }
print("T", r)
dist.start(3, elastic=true, heartbeat=3)
print("A", dist.size(), total(v))
fu = dist.submit(1, fn() { t = clock(); while clock() - t < 60 { }; 1 }, list())
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
while not exists("F1") { }
while dist.workers()[1].alive { }
r = try { total(v); "no error" } catch e { "{e.name}: {e.message}" }
print("E", r)
print("B", dist.size(), total(v), join(map(dist.workers(), fn(w) str(w.pid)), " "))
fu2 = dist.submit(1, fn(x) x * 3, list(VAL))
print("S2", fu2.result())
print("S", fu.done(), try { fu.result(); "no error" } catch e { "{e.name}: {e.message}" })
dist.stop()
"""


@test
def test_live_elastic_local(name):
    # a worker of an elastic session dies while the session is idle (running a
    # task: dist.submit): the next command fails with DistRestarted naming the
    # loss, the group is whole again (3 fresh workers) and computes; the dead
    # worker's future fails naming rank 1; without elastic the old behaviour stays
    import signal
    v = float(np.float32(rng.uniform(0.5, 2.0)))
    f1 = os.path.join(TMP, "elastic-local-F1")
    if os.path.exists(f1):
        os.remove(f1)
    path = script(ELASTIC_LOCAL.replace("VAL", repr(v)).replace('"F1"', f'"{f1}"'), "el_local.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line, t = "", time.time()
    while not line.startswith("PIDS") and time.time() - t < 60:
        line = p.stderr.readline()
    pids = [int(x) for x in line.split()[1:]]
    if len(pids) == 3:
        os.kill(pids[1], signal.SIGKILL)
    touch(f1)
    out, err = p.communicate(timeout=120)
    err = line + err
    sanitizer_check(err)
    got = {m.group(1): m.group(2) for m in re.finditer(r"^(M|T|A|E|B|S2|S) (.*)$", out, re.M)}
    why = None if p.returncode == 0 and len(pids) == 3 else f"rc {p.returncode}, pids {pids}"
    if why is None and "min_workers=3 is more than the 2 workers asked for" not in got.get("M", ""):
        why = f"min_workers above n: {got.get('M')!r}"
    if why is None and "elastic must be true or false" not in got.get("T", ""):
        why = f"elastic=1: {got.get('T')!r}"
    if why is None and got.get("A") != f"3 {expect_total(v, 3)}".replace("'", ""):
        a = got.get("A", "")
        if not (a.startswith("3 ") and np.allclose(eval(a[2:]), expect_total(v, 3), rtol=1e-6)):
            why = f"A: {a!r}"
    e = out.split("\nE ", 1)[-1].split("\nB ", 1)[0] if "\nE " in out else ""
    if why is None and not (e.startswith("DistRestarted: dist.run: worker rank 1 ") and "is dead" in e and "call dist.restart()" not in e
                            and "elastic: the group lost a worker and restarted with 3 workers (was 3)" in e and "dist.resume" in e):
        why = f"the command after the loss: {e!r}"
    if why is None:
        m = re.match(r"^3 (\[.*?\]) (.*)$", got.get("B", ""))
        if not m or not np.allclose(eval(m.group(1)), expect_total(v, 3), rtol=1e-6):
            why = f"B: {got.get('B')!r}"
        elif set(int(x) for x in m.group(2).split()) & set(pids):
            why = f"the healed group reuses old workers: {m.group(2)} vs {pids}"
    # a future on the dead worker fails naming its rank, also after a task sent to
    # the healed group (never resubmitted, never "already taken"); the new one runs
    if why is None and not (got.get("S2") and np.isclose(float(got["S2"]), np.float32(v) * 3, rtol=1e-6)):
        why = f"a task on the healed group: {got.get('S2')!r}"
    if why is None and not (got.get("S", "").startswith("true DistError: dist.submit: the task on rank 1 did not finish: ")
                            and "the workers were restarted" in got["S"] and "submit it again" in got["S"]):
        why = f"the future on the dead worker: {got.get('S')!r}"
    if why is None and "nabla dist: elastic: dist.run: the group lost a worker and restarted with 3 workers (was 3)" not in err:
        why = "no elastic message on stderr"
    report(name, why is None, f"{why}; out={out[-900:]!r} err={err[-900:]!r}")


ELASTIC_GROW = """
import dist
fn hosts() { h = list(); for w in dist.workers() { push(h, w.host) }; h }
fn total(v) { dist.run(fn(v) all_reduce(ones(2) * v * (dist.rank() + 1)).tolist(), v)[0] }
# checkpoints every step until the group regroups (bounded: 120 s); a step
# sleeps 50 ms (a receive no message matches: nabla has no sleep), leaving the
# CPU to the host coming back and the session's probe of it
fn train(ck) { dist.run(fn(ck) { t = clock(); s = 0; while clock() - t < 120 { dist.save_checkpoint(ck, {w: ones(1) * s}, s); s = s + 1; dist.recv_msg(tag=7777, timeout=0.05) }; s }, ck) }
v = VAL
dist.start(6, launcher="ssh", hosts=["hosta", "hostb", "hostc"], connect_timeout=2, heartbeat=3, elastic=true, min_workers=4, SSHOPTS)
print("A", hosts(), total(v))
print("KILL")
input()
while true { k = 0; for w in dist.workers() { if w.alive { k = k + 1 } }; if k <= 4 { break } }
r = try { total(v); "no error" } catch e { "{e.name}: {e.message}" }
print("E1", r)
print("B", hosts(), total(v))
print("REVIVE")
r = try { train("CK"); "no error" } catch e { "{e.name}: {e.message}" }
print("E2", r)
print("G", hosts(), total(v))
dist.stop()
"""


@test
@needs_hosts
def test_live_elastic_grow(name):
    # an elastic live session of 6 on 3 hosts loses host c: the next command
    # restarts the group on a and b (4 workers, min_workers=4); c returns while
    # a training function checkpoints: the group regroups at a checkpoint
    # (DistRestarted) and runs on 6 workers again, c included
    ensure_up()
    v = float(np.float32(rng.uniform(0.5, 2.0)))
    ck = os.path.join(TMP, "elgrow.safetensors")
    if os.path.exists(ck):
        os.remove(ck)
    src = ELASTIC_GROW.replace("SSHOPTS", C.ssh_opts_nbl()).replace("VAL", repr(v)).replace('"CK"', f'"{ck}"')
    path = script(src, "el_livegrow.nbl")
    rc, out, err, fired = follow([NABLA, "-u", path], {"KILL": and_go(kill_host, 2), "REVIVE": lambda: revive_host(2)},
                                 timeout=240, env={"NABLA_ELASTIC_PROBE_S": "1"}, feed=True)
    got = {}
    for line in out.splitlines():
        m = re.match(r"^(A|B|G) (\[.*?\]) (\[.*\])$", line)
        if m:
            got[m.group(1)] = (eval(m.group(2)), [float(x) for x in eval(m.group(3))])
    a, b, c = ["hosta"] * 2, ["hostb"] * 2, ["hostc"] * 2
    want = {"A": (a + b + c, 6), "B": (a + b, 4), "G": (a + b + c, 6)}
    why = None if rc == 0 else f"rc {rc}"
    for k, (hs, ranks) in want.items():
        if why:
            break
        if k not in got:
            why = f"no line {k}"
        elif got[k][0] != hs:
            why = f"{k}: the group ran on {got[k][0]}, expected {hs}"
        elif not np.allclose(got[k][1], expect_total(v, ranks), rtol=1e-6):
            why = f"{k}: all_reduce gave {got[k][1]}, expected {expect_total(v, ranks)}"
    e1 = out.split("\nE1 ", 1)[-1].split("\nB ", 1)[0] if "\nE1 " in out else ""
    e2 = out.split("\nE2 ", 1)[-1].split("\nG ", 1)[0] if "\nE2 " in out else ""
    if why is None and not (e1.startswith("DistRestarted: ") and "the group lost a worker and restarted with 4 workers (was 6) on hosta, hostb;" in e1):
        why = f"the command after the host loss: {e1!r}"
    if why is None and not (e2.startswith("DistRestarted: ") and "DistRegroup" in e2
                            and "a lost host answers again: the group regrouped at its checkpoint with 6 workers (was 4)" in e2):
        why = f"the training run when host c returned: {e2!r}"
    if why is None and "host hostc answers again" not in err:
        why = "the watcher did not report host c back"
    if why is None and "exited before connecting" in err:
        why = "a restart tried the dead host"
    report(name, why is None, f"{why}; out={out[-900:]!r} err={err[-900:]!r}")


# ---------------------------------------------------------------- nabla run: shrink, then grow back
TRAIN = """
import dist
X = load_npy(argv[1]); Y = load_npy(argv[2]); W = load_npy(argv[3])
steps = int(argv[4]); lr = 0.1; ck = argv[5]; side = argv[6]; mode = argv[7]
st = {w: W}
step0 = dist.resume(ck, st)
W = st.w
n = dist.world_size(); r = dist.rank()
rows = dist.local_batch(X.shape[0]).batch      # the global batch stays X's rows at any world size
x = X[r * rows:(r + 1) * rows]; y = Y[r * rows:(r + 1) * rows]
fn loss(w) { d = x @ w - y; (d * d).mean() }
g = grad(loss)
# a rank that waits sleeps 50 ms a poll (a receive no message matches: nabla
# has no sleep) and leaves the CPU to what it waits for: a host dying or
# coming back, the session's probes, slurmctld
fn nap() { dist.recv_msg(tag=7777, timeout=0.05) }
if r == 0 {
  print("START", step0, n)
  if step0 > 0 and mode == "elastic" { save("{side}-{step0}-{n}.safetensors", load(ck)) }
}
for s in step0..steps {
  if mode != "plain" and n == 6 and s == 4 and getenv("NABLA_RESTART_COUNT") == "0" and dist.node_rank() == 2 { print("SPIN", r); while true { nap() } }
  if mode == "elastic" and n == 4 and s == 7 {
    if r == 0 { print("GROW") }
    while not dist.regroup_pending() { nap() }
  }
  if mode == "hold" and n == 4 and s == 7 {
    if r == 0 { print("HOLD") }
    while not exists("{side}-go") { nap() }
  }
  W = W - lr * all_reduce(g(W), op="avg")
  if (s + 1) % 3 == 0 { dist.save_checkpoint(ck, {w: W}, s + 1) }
}
print("W", W.reshape([-1]).tolist())
print("WORLD", n)
"""


def problem(prefix):
    """a fresh regression problem (X [24, 5], Y [24, 3], W [5, 3] f32) and the
    .npy files TRAIN reads it from, named after prefix"""
    X = rng.standard_normal((24, 5)).astype(np.float32)
    Y = rng.standard_normal((24, 3)).astype(np.float32)
    W = (rng.standard_normal((5, 3)) * 0.1).astype(np.float32)
    return X, Y, W, [npy(f"{prefix}X.npy", X), npy(f"{prefix}Y.npy", Y), npy(f"{prefix}W.npy", W)]


def reference(X, Y, W, steps, lr=0.1):
    W = W.astype(np.float64)
    for _ in range(steps):
        W = W - lr * (2.0 / (X.shape[0] * Y.shape[1])) * X.T @ (X @ W - Y)
    return W.reshape(-1)


def npy(name, a):
    path = os.path.join(TMP, name)
    np.save(path, a)
    return path


def final_params(out, world):
    got = per_rank(out, "W")
    if sorted(got) != list(range(world)):
        return None, f"W lines from ranks {sorted(got)}, expected 0..{world - 1}"
    for r, w in got.items():
        if w != got[0]:
            return None, f"rank {r}'s parameters differ from rank 0's"
    return np.array(got[0]), None


@test
@needs_hosts
def test_grow(name):
    ensure_up()
    X, Y, W, files = problem("g")
    ck, side = os.path.join(TMP, "grow.safetensors"), os.path.join(TMP, "side")
    path = script(TRAIN, "el_grow.nbl")
    common = ["--launcher", "ssh", "--hosts", HOSTS, *C.ssh_args(), "--connect-timeout", "2", "--heartbeat", "4"]
    cmd = [NABLA, "run", "--nnodes", "2:3", "--slots-per-host", "2", "--max-restarts", "1", *common,
           path, *files, "15", ck, side, "elastic"]
    env = {"NABLA_ELASTIC_PROBE_S": "1"}
    rc, out, err, fired = follow(cmd, {"SPIN": lambda: (time.sleep(0.3), kill_host(2)),
                                       "GROW": lambda: revive_host(2)}, timeout=300, env=env)
    starts = [tuple(x) for x in re.findall(r"^\[rank 0\] START (\d+) (\d+)$", out, re.M)]
    why = None if rc == 0 else f"rc {rc}"
    if why is None and fired != ["SPIN", "GROW"]:
        why = f"the failure and the return did not both happen: {fired}"
    if why is None and starts != [("0", "6"), ("3", "4"), ("9", "6")]:
        why = f"the groups started at (step, world) {starts}, expected (0, 6), (3, 4) after the host loss, (9, 6) after it returned"
    if why is None and "restarting the group (restart 1 of 1) with 4 workers" not in err:
        why = "no restart to 4 workers (was a restart spent on the dead host?)"
    if why is None and "regrouping the group with 6 workers (was 4)" not in err:
        why = "no regroup to 6 workers"
    got = None
    if why is None:
        got, why = final_params(out.split("START 9 6")[-1], 6)
    if why is None and not np.allclose(got, reference(X, Y, W, 15), rtol=1e-4, atol=1e-5):
        why = f"parameters {got} differ from the NumPy reference {reference(X, Y, W, 15)}"
    if why is None:
        # a plain run at the new size, resumed from the checkpoint the regroup resumed from
        ck2 = os.path.join(TMP, "grow-ref.safetensors")
        shutil.copy(f"{side}-9-6.safetensors", ck2)
        p = C.run(0, [NABLA, "run", "-n", "6", *common, path, *files, "15", ck2, side, "plain"], timeout=120)
        sanitizer_check(p.stderr)
        ref6, why = final_params(p.stdout, 6) if p.returncode == 0 else (None, f"the reference run: rc {p.returncode}: {p.stderr[-400:]}")
        if why is None and "START 9 6" not in p.stdout:
            why = "the reference run did not resume at step 9"
        if why is None and not np.array_equal(got, ref6):
            why = f"the regrouped run's parameters {got} differ from a 6-worker run resumed from the same checkpoint {ref6}"
    report(name, why is None, f"{why}; out={out[-900:]!r} err={err[-1200:]!r}")


# ---------------------------------------------------------------- a host not in --hosts joins (nabla join)
@test
@needs_hosts
def test_rdzv_join(name):
    # `nabla run --hosts hosta,hostb -n 4 --max-workers 6 --rdzv PORT`; while the
    # group waits at step 7, host c (not in --hosts) asks to join: with a wrong
    # key it gets no answer (nothing is read without the job's key), a bad name
    # is refused before anything is sent, with the key it is admitted; the
    # group regroups at the step-9 checkpoint with 6 workers, c's included
    ensure_up()
    X, Y, W, files = problem("j")
    ck, side, key, wrong = (os.path.join(TMP, f) for f in ("join.safetensors", "jside", "job.key", "wrong.key"))
    for f in (ck, key):
        if os.path.exists(f):
            os.remove(f)
    with open(wrong, "w") as f:
        f.write(rng.bytes(32).hex() + "\n")
    port = str(int(rng.integers(21000, 29999)))
    path = script(TRAIN, "el_join.nbl")
    joins = {}

    def join():
        base = [NABLA, "join", f"hosta:{port}"]
        joins["wrong"] = C.run(2, base + ["--key", wrong, "--timeout", "1"], timeout=60)
        joins["badname"] = C.run(2, base + ["--key", key, "--name", "host c!"], timeout=60)
        joins["ok"] = C.run(2, base + ["--key", key], timeout=60)
    cmd = [NABLA, "run", "--launcher", "ssh", "--hosts", "hosta,hostb", *C.ssh_args(), "--connect-timeout", "2", "--heartbeat", "4",
           "-n", "4", "--max-workers", "6", "--slots-per-host", "2", "--rdzv", port, "--rdzv-key", key,
           path, *files, "15", ck, side, "elastic"]
    rc, out, err, fired = follow(cmd, {"GROW": join}, timeout=240)
    starts = [tuple(x) for x in re.findall(r"^\[rank 0\] START (\d+) (\d+)$", out, re.M)]
    why = None if rc == 0 else f"rc {rc}"
    w, b, o = joins.get("wrong"), joins.get("badname"), joins.get("ok")
    if why is None and (fired != ["GROW"] or not (w and b and o)):
        why = f"the join did not happen: {fired}"
    if why is None and not (w.returncode == 1 and "no answer" in w.stderr and "wrong key" in w.stderr):
        why = f"a join with a wrong key: rc {w.returncode} {w.stdout!r} {w.stderr!r}"
    if why is None and not (b.returncode == 2 and "is not 1 to 63 characters" in b.stderr):
        why = f"a join with a bad name: rc {b.returncode} {b.stderr!r}"
    if why is None and not (o.returncode == 0 and "admitted: hostc joins" in o.stdout):
        why = f"the join with the key: rc {o.returncode} {o.stdout!r} {o.stderr!r}"
    if why is None and (os.stat(key).st_mode & 0o077):
        why = f"the key file is readable by others: {oct(os.stat(key).st_mode)}"
    if why is None and starts != [("0", "4"), ("9", "6")]:
        why = f"the groups started at (step, world) {starts}, expected (0, 4), then (9, 6) with the joined host"
    if why is None and not ("host hostc joins through the rendezvous" in err and "regrouping the group with 6 workers (was 4)" in err):
        why = "no admission and regroup on the job's side"
    got = None
    if why is None:
        got, why = final_params(out.split("START 9 6")[-1], 6)
    if why is None and not np.allclose(got, reference(X, Y, W, 15), rtol=1e-4, atol=1e-5):
        why = f"parameters {got} differ from the NumPy reference"
    report(name, why is None, f"{why}; out={out[-600:]!r} err={err[-1200:]!r}")


# ---------------------------------------------------------------- Slurm: a node lost inside the allocation
@test
@needs_hosts
def test_slurm_node_loss(name):
    # tests/dist/fake_slurm/srun places the tasks on the simulated hosts as srun
    # does inside an allocation of those 3 nodes (--ntasks, --nodes, --exclude);
    # its scontrol says a node's state from its host's first process
    ensure_up()
    X, Y, W, files = problem("s")
    ck, log, side = os.path.join(TMP, "slurm.safetensors"), os.path.join(TMP, "srun.log"), os.path.join(TMP, "sside")
    pidfile = os.path.join(TMP, "slurm-pids")
    for f in (ck, log):
        if os.path.exists(f):
            os.remove(f)

    def write_pids():
        with open(pidfile + ".new", "w") as f:
            f.write(",".join(str(p) for p in C.pids))
        os.replace(pidfile + ".new", pidfile)

    def probe_count():
        return sum(1 for c in open(log).read().splitlines() if c.startswith("scontrol ")) if os.path.exists(log) else 0

    def grow():
        # the session re-admits a node its probes saw out of service, then in
        # service: node c comes back only after the next probe (1 s apart)
        # found it down (a quick revive could otherwise come first)
        k, t = probe_count(), time.time()
        while probe_count() == k and time.time() - t < 30:
            time.sleep(0.1)
        revive_host(2)
        write_pids()
    write_pids()
    path = script(TRAIN, "el_slurm.nbl")
    fake = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_slurm")
    env = {"PATH": fake + ":" + os.environ.get("PATH", ""), "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "6", "SLURM_JOB_NUM_NODES": "3",
           "FAKE_SLURM_NODES": HOSTS, "FAKE_SLURM_PIDS_FILE": pidfile, "FAKE_SLURM_LOG": log, "NABLA_ELASTIC_PROBE_S": "1"}
    cmd = [NABLA, "run", "--heartbeat", "3", "--min-workers", "4", "--max-restarts", "1", path, *files, "15", ck, side, "elastic"]
    rc, out, err, fired = follow(cmd, {"SPIN": lambda: (time.sleep(0.3), kill_host(2)),
                                       "GROW": grow}, timeout=240, env=env)
    starts = [tuple(x) for x in re.findall(r"^\[rank 0\] START (\d+) (\d+)$", out, re.M)]
    calls = open(log).read().splitlines() if os.path.exists(log) else []
    sruns = [c for c in calls if not c.startswith("scontrol ")]
    probes = [c for c in calls if c.startswith("scontrol ")]
    why = None if rc == 0 else f"rc {rc}"
    if why is None and "inside Slurm job 4242: launcher slurm" not in err:
        why = "the launcher was not taken from the allocation"
    if why is None and starts != [("0", "6"), ("3", "4"), ("9", "6")]:
        why = f"the groups started at (step, world) {starts}, expected (0, 6), (3, 4) without the lost node, (9, 6) once it returned"
    if why is None and (len(sruns) != 3 or "--ntasks=6" not in sruns[0] or "--nodes=3" not in sruns[0] or "--exclude" in sruns[0]):
        why = f"the first srun was not -n and --nodes of the allocation: {sruns}"
    if why is None and not all(a in sruns[1].split() for a in ("--ntasks=4", "--nodes=2", "--exclude=hostc")):
        why = f"the restart's srun did not leave the lost node out: {sruns}"
    if why is None and not (all(a in sruns[2].split() for a in ("--ntasks=6", "--nodes=3")) and "--exclude" not in sruns[2]):
        why = f"the regroup's srun did not take the returned node back: {sruns}"
    if why is None and (not probes or any(p != "scontrol show node -o hostc" for p in probes)):
        why = f"scontrol asked about other nodes than the lost one: {probes}"
    if why is None and "regrouping the group with 6 workers (was 4)" not in err:
        why = "no regroup to 6 workers"
    got = None
    if why is None:
        got, why = final_params(out.split("START 9 6")[-1], 6)
    if why is None and not np.allclose(got, reference(X, Y, W, 15), rtol=1e-4, atol=1e-5):
        why = f"parameters {got} differ from the NumPy reference"
    report(name, why is None, f"{why}; out={out[-600:]!r} err={err[-1200:]!r}")


# ---------------------------------------------------------------- srun nabla run
@test
def test_srun_refused(name):
    path = script("print('RAN')\n", "el_srun.nbl")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    why = None
    for procid, says in (("0", True), ("2", False)):
        env = dict(base, SLURM_JOB_ID="77", SLURM_STEP_ID="0", SLURM_PROCID=procid, SLURM_NTASKS="3", SLURM_STEP_NUM_TASKS="3")
        p = subprocess.run([NABLA, "run", "-n", "2", path], capture_output=True, text=True, timeout=30, env=env)
        sanitizer_check(p.stderr)
        if p.returncode != 2 or "RAN" in p.stdout:
            why = f"task {procid}: rc {p.returncode}, out {p.stdout!r}: expected a refusal"
        elif says and not ("started by srun as one of 3 tasks" in p.stderr and "without srun" in p.stderr):
            why = f"task 0 does not say why: {p.stderr!r}"
        elif not says and p.stderr:
            why = f"task {procid} repeats the message: {p.stderr!r}"
        if why:
            break
    if why is None:   # a lone task (srun -n 1 nabla run) is a job of its own: it runs
        env = dict(base, SLURM_STEP_ID="0", SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_STEP_NUM_TASKS="1")
        p = subprocess.run([NABLA, "run", "-n", "2", "--launcher", "local", path], capture_output=True, text=True, timeout=60, env=env)
        sanitizer_check(p.stderr)
        if p.returncode != 0 or p.stdout.count("RAN") != 2:
            why = f"a lone task: rc {p.returncode} out {p.stdout!r} err {p.stderr[-300:]!r}"
    report(name, why is None, why or "")



# ---------------------------------------------------------------- a real Slurm: slurmctld + one slurmd per host
REAL = {}


def real_slurm():
    """Slurm 22.05 over the simulated hosts (tests/dist/slurmutil.py): munged
    here, slurmctld on host a, one slurmd per host in its namespaces (-N
    HOST); started once, by the first case that needs it.  (slurm, why)."""
    if "s" not in REAL:
        from slurmutil import Slurm
        s = Slurm(os.path.join(TMP, "slurm"), C.names, addrs=[C.mgmt(i) for i in range(3)], cpus=2, own_cgroups=True,
                  popen=lambda i, argv, out: C.popen(i, argv, stdout=out, stderr=out),
                  run=lambda argv, env: C.run(0, argv, env=env, timeout=15),
                  conf_extra="SlurmdTimeout=5\nMessageTimeout=4\n")
        REAL["s"], REAL["why"] = s, s.start()
    return REAL["s"], REAL["why"]


def needs_real_slurm(fn):
    def wrapped(name):
        if WHY:
            dutil.skip(name, WHY)
            return
        ensure_up()
        s, why = real_slurm()
        if why:
            dutil.skip(name, f"a real Slurm cannot run on the simulated hosts: {why}")
            return
        fn(name, s)
    wrapped.__name__ = fn.__name__
    return wrapped


@test
@needs_real_slurm
def test_real_slurm_srun(name, s):
    # srun -n 3 nabla run inside an allocation of the 3 nodes: each task is
    # one of a step of 3, so each refuses (rc 2, no job started, task 0 says
    # why, once); srun -n 1 nabla run is a job of its own and runs
    path = script("print('RAN', dist.world_size())\n", "el_rsrun.nbl")
    p = C.run(0, ["salloc", "-N3", "-n3", "srun", "-n3", NABLA, "run", "-n", "2", path], env=s.env, timeout=90)
    sanitizer_check(p.stderr)
    why = None
    if p.returncode == 0 or "RAN" in p.stdout:
        why = f"srun -n3 nabla run: rc {p.returncode}, out {p.stdout!r}: expected every task to refuse"
    elif p.stderr.count("started by srun as one of 3 tasks") != 1 or "without srun" not in p.stderr:
        why = f"srun -n3 nabla run: task 0 should say why, once: {p.stderr[-600:]!r}"
    if why is None:
        p = C.run(0, ["salloc", "-N1", "-n2", "srun", "-n1", NABLA, "run", "-n", "2", "--launcher", "local", path],
                  env=s.env, timeout=90)
        sanitizer_check(p.stderr)
        if p.returncode != 0 or p.stdout.count("RAN 2") != 2:
            why = f"srun -n1 nabla run: rc {p.returncode} out {p.stdout!r} err {p.stderr[-400:]!r}"
    report(name, why is None, why or "")


@test
@needs_real_slurm
def test_real_slurm_node_loss(name, s):
    # salloc -N3 -n6 --no-kill nabla run (no -n, no --launcher): 6 workers on
    # 3 nodes from the allocation; node c is lost at step 4 (its slurmd,
    # slurmstepd and workers killed, its links down); the group continues
    # with 4 workers on a and b from the step-3 checkpoint (--min-workers 4),
    # inside the same allocation; the group then waits at step 7 until
    # slurmctld declares c DOWN (SlurmdTimeout 10 s): the allocation outlives
    # that (--no-kill) and training ends equal to NumPy's
    X, Y, W, files = problem("r")
    ck, side = os.path.join(TMP, "rslurm.safetensors"), os.path.join(TMP, "rside")
    if os.path.exists(ck):
        os.remove(ck)
    path = script(TRAIN, "el_rslurm.nbl")
    cmd = ["salloc", "-N3", "-n6", "--no-kill", NABLA, "run", "--heartbeat", "3", "--min-workers", "4", "--max-restarts", "1",
           path, *files, "15", ck, side, "hold"]
    down = {}

    def hold():   # the group waits at step 7 until slurmctld has declared node c DOWN
        t = time.time()
        while time.time() - t < 60 and "down" not in down.get("state", ""):
            down["state"] = C.run(0, ["sinfo", "-h", "-n", "hostc", "-o", "%T"], env=s.env, timeout=15).stdout.strip()
            time.sleep(0.5)
        touch(side + "-go")
    rc, out, err, fired = follow(cmd, {"SPIN": lambda: (time.sleep(0.3), kill_host(2)), "HOLD": hold}, timeout=150, env=s.env)
    starts = [tuple(x) for x in re.findall(r"^\[rank 0\] START (\d+) (\d+)$", out, re.M)]
    why = None if rc == 0 else f"rc {rc}"
    if why is None and not re.search(r"inside Slurm job \d+: launcher slurm", err):
        why = "the launcher was not taken from the allocation"
    if why is None and starts != [("0", "6"), ("3", "4")]:
        why = f"the groups started at (step, world) {starts}, expected (0, 6) from the allocation, then (3, 4) without the lost node"
    if why is None and "restarting the group (restart 1 of 1) with 4 workers" not in err:
        why = "no restart to 4 workers"
    if why is None and not down.get("state", "").startswith("down"):
        why = f"slurmctld did not declare node c DOWN while the group waited (sinfo: {down.get('state')!r})"
    got = None
    if why is None:
        got, why = final_params(out.split("START 3 4")[-1], 4)
    if why is None and not np.allclose(got, reference(X, Y, W, 15), rtol=1e-4, atol=1e-5):
        why = f"parameters {got} differ from the NumPy reference {reference(X, Y, W, 15)}"
    report(name, why is None, f"{why}; out={out[-600:]!r} err={err[-1500:]!r}")


if "s" in REAL:
    REAL["s"].stop()
C.stop()
dutil.finish()
