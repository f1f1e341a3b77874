#!/usr/bin/python3
"""tests/dist: the shared-memory barrier's waiting (dist/dshm.c: adaptive
bounded spin, then a futex wait) and the desync check folded into the
collective's first barrier (dist/ddesync.c -> ds_sig_defer).

- many small collectives of odd sizes and dtypes on 3 workers, with waiting
  forced onto the futex (NABLA_SHM_SPIN_US=0), with the default adaptive
  spin, and across several rounds (1 MiB rounds), against NumPy: every rank's
  all_reduce/all_gather/broadcast results, and bit-identical across ranks;
- a worker killed while its peers loop over 4 KB all_reduces (sleeping on
  the futex) fails the others with the dead rank named, not the timeout;
- a desync after hundreds of folded checks (another collective, another
  shape, one collective more, a barrier against an all_to_all) is still
  caught before any data is used, with the ranks and the calls named.

NABLA_ASAN: also run under the ASan build by tools/run-tests.sh (dshm.c and
ddesync.c are C), with fewer iterations.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_shm_latency.py
"""
import os, re, signal, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, report, sanitizer_check, script, test, wait_gone  # noqa: E402

RNG = np.random.default_rng()
W = 3
ITERS = 60 if os.environ.get("NABLA_ASAN") else 150


def nrun(src, env=None, timeout=240, name="lat.nbl"):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([NABLA, "run", "-n", str(W), script(src, name)], capture_output=True, text=True, timeout=timeout, env=e, stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


MANY = """
r = dist.rank(); w = dist.world_size()
print("SHM", dist_shm())
sizes = list({sizes})
xs = list(); ys = list(); gs = list(); bs = list()
for it in 0..{iters} {{
  n = sizes[it % len(sizes)]
  seed({seed} + it * 16 + r)
  x = if it % 3 == 2 {{ randint(-1000, 1000, [n], dtype="i64").to("f64") }} else {{ randn(n, dtype="f64") }}
  push(xs, x); push(ys, all_reduce(x))
  push(gs, all_gather(x[0:max(1, n - r)]))
  push(bs, broadcast(x, src=it % w))
}}
p = "{d}/" + str(r) + "_"
save_npy(p + "x.npy", concat(xs)); save_npy(p + "y.npy", concat(ys))
save_npy(p + "g.npy", concat(gs)); save_npy(p + "b.npy", concat(bs))
"""


def many_case(name, env, sizes, iters):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    seed = int(RNG.integers(1, 1 << 20))
    rc, out, err = nrun(MANY.format(sizes=", ".join(map(str, sizes)), iters=iters, seed=seed, d=d), env=env)
    if rc:
        return [f"rc={rc} err={err[-1500:]!r}"]
    why = []
    if out.count("SHM true") != W:
        why.append(f"not every rank on shared memory: {out[-300:]!r}")
    ld = lambda r, k: np.load(os.path.join(d, f"{r}_{k}.npy"))  # noqa: E731
    X = [ld(r, "x") for r in range(W)]
    want_sum = sum(X)
    # the per-iteration pieces, to rebuild all_gather and broadcast in NumPy
    lens = [sizes[it % len(sizes)] for it in range(iters)]
    offs = np.concatenate([[0], np.cumsum(lens)])
    want_g, want_b = [], []
    for it in range(iters):
        n, a = lens[it], offs[it]
        want_g += [X[q][a:a + max(1, n - q)] for q in range(W)]
        want_b.append(X[it % W][a:a + n])
    want_g, want_b = np.concatenate(want_g), np.concatenate(want_b)
    y0 = ld(0, "y")
    for r in range(W):
        y = ld(r, "y")
        if not np.array_equal(y, y0):
            why.append(f"rank {r}'s all_reduce results differ from rank 0's (not bit-identical)")
        e = np.abs(y - want_sum).max() / max(1.0, np.abs(want_sum).max())
        if not e < 1e-13:
            why.append(f"rank {r}: all_reduce off NumPy by {e:.3g}")
        if not np.array_equal(ld(r, "g"), want_g):
            why.append(f"rank {r}: all_gather differs from NumPy")
        if not np.array_equal(ld(r, "b"), want_b):
            why.append(f"rank {r}: broadcast differs from NumPy")
    return why


@test
def test_many_futex(name):
    # every wait sleeps on the futex: odd sizes, 4 KB among them
    why = many_case(name, {"NABLA_SHM_SPIN_US": "0"}, [1, 3, 1024, 1031, 4099, 17], ITERS)
    report(name, not why, "; ".join(why))


@test
def test_many_adaptive(name):
    why = many_case(name, {}, [1024, 5, 777, 2, 65537], ITERS)
    report(name, not why, "; ".join(why))


@test
def test_many_rounds(name):
    # 1 MiB rounds: 300001 f64 spans 3 of them, with barriers sleeping
    why = many_case(name, {"NABLA_SHM_ROUND_MB": "1", "NABLA_SHM_SPIN_US": "0"}, [300001, 9, 131073], 12)
    report(name, not why, "; ".join(why))


@test
def test_killed_peer_while_sleeping(name):
    path = script("""
import dist
dist.start(3)
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
r = try { dist.exec('x = ones(1024); while true { x = all_reduce(x) / 3 }') } catch e { print("CAUGHT", e.message); nil }
dist.restart()
print("AFTER", dist.run(fn() all_reduce(dist.rank())), dist.run(fn() dist_shm()))
dist.stop()
""", "killlat.nbl")
    e = dict(os.environ, NABLA_SHM_SPIN_US="0")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    line = ""
    t = time.time()
    while "PIDS" not in line and time.time() - t < 60:
        line = p.stderr.readline()
    pids = [int(x) for x in line.split()[1:]]
    time.sleep(2)   # well into the loop of 4 KB all_reduces
    os.kill(pids[1], signal.SIGKILL)
    # the group timeout (300 s) is far beyond this bound: finishing shows the death was detected
    out, err = p.communicate(timeout=120)
    sanitizer_check(err)
    ok = (p.returncode == 0 and f"worker rank 1 (pid {pids[1]}) died" in out and "CAUGHT" in out
          and "AFTER [3, 3, 3] [true, true, true]" in out and wait_gone(pids, 5))
    report(name, ok, f"rc={p.returncode} out={out[-800:]!r} err={err[-800:]!r}")


def desync_case(code, env=None):
    rc, out, err = nrun(code, env=env, timeout=120, name="dsync.nbl")
    errs = {}
    for l in err.splitlines():
        m = re.match(r"\[rank (\d+)\] (.*)$", l)
        if m and "desync" in m.group(2) and int(m.group(1)) not in errs:
            errs[int(m.group(1))] = m.group(2)
    return rc, errs, err


@test
def test_desync_after_many(name):
    k = int(RNG.integers(100, 300))
    cases = [
        ("other_call", f"""
x = ones(1024)
for i in 0..{k} {{ x = all_reduce(x) / 3 }}
if dist.rank() == 1 {{ broadcast(x, src=0) }} else {{ all_reduce(x) }}
""", [f"at its collective #{k + 1}", "ranks 0,2 called all_reduce(op=sum, f32[1024])", "rank 1 called broadcast(src=0)"]),
        ("shape", f"""
x = ones(1024)
for i in 0..{k} {{ x = all_reduce(x) / 3 }}
all_reduce(ones(if dist.rank() == 2 {{ 1025 }} else {{ 1024 }}))
""", [f"at its collective #{k + 1}", "ranks 0,1 called all_reduce(op=sum, f32[1024])", "rank 2 called all_reduce(op=sum, f32[1025])"]),
        ("one_more", f"""
x = ones(1024)
for i in 0..{k} {{ x = all_reduce(x) / 3 }}
if dist.rank() == 0 {{ all_gather(x) }}
""", [f"at its collective #{k + 1}", "ranks 1,2 finished the command", "rank 0 called all_gather(f32[*])"]),
        ("barrier_vs_all_to_all", f"""
x = ones(1024)
for i in 0..{k} {{ x = all_reduce(x) / 3 }}
if dist.rank() == 0 {{ all_to_all(list(ones(2), ones(2), ones(2))) }} else {{ barrier() }}
""", [f"at its collective #{k + 1}", "ranks 1,2 called barrier()", "rank 0 called all_to_all()"]),
        # an empty all_reduce moves no data (no barrier): its signature waits
        # for the next one, and the report names that first, diverging call
        ("empty", f"""
x = ones(1024)
for i in 0..{k} {{ x = all_reduce(x) / 3 }}
all_reduce(zeros(if dist.rank() == 1 {{ 1 }} else {{ 0 }}))
""", [f"at its collective #{k + 1}", "ranks 0,2 called all_reduce(op=sum, f32[0])", "rank 1 called all_reduce(op=sum, f32[1])"]),
    ]
    # waits on the futex in every other case, with the adaptive spin in the rest
    for i, (cname, code, parts) in enumerate(cases):
        env = {"NABLA_SHM_SPIN_US": "0"} if i % 2 == 0 else {}
        rc, errs, err = desync_case(code, env)
        ok = rc != 0 and len(errs) >= 1 and all(all(p in e for p in parts) for e in errs.values())
        report(f"{name}_{cname}{'_futex' if env else ''}", ok, f"rc={rc} errs={errs} err={err[-1200:]!r}")


dutil.finish()
