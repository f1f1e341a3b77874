#!/usr/bin/python3
"""tests/dist: the shared-memory fast path (dist/dshm.c) for ranks on one host.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_shm.py
One line per test ("PASS: name" / "FAIL: name: why"); exit 1 on any failure.
2-3 CPU workers on loopback; every process has a timeout.
"""
import glob, os, signal, subprocess, sys, tempfile, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, alive, report, sanitizer_check, script, test, wait_gone  # noqa: E402

SHM_BEFORE = set(glob.glob("/dev/shm/nabla-shm-*"))


def run(src, timeout=120, env=None, name="t.nbl"):
    # 4 MiB rounds (the size for 8+ ranks; 2-3 ranks get 16/10 MiB by default), so SIZES span several
    e = dict(os.environ, NABLA_SHM_ROUND_MB="4")
    e.update(env or {})
    p = subprocess.run([NABLA, script(src, name)], capture_output=True, text=True, timeout=timeout, env=e)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def shm_leftovers(secs=3.0):
    t = time.time()
    while True:
        left = set(glob.glob("/dev/shm/nabla-shm-*")) - SHM_BEFORE
        if not left or time.time() - t > secs:
            return sorted(left)
        time.sleep(0.1)


DTYPES = ["f32", "f64", "i64"]
SIZES = [1, 7, 1_300_003]      # the last spans several 4 MiB rounds (f32: 2, f64/i64: 3)


def collectives_src(world, out, tag, shm):
    # every rank saves its input and every result; the session prints the shm state
    calls = "\n".join(f"    one(out, tag, dt, {n})" for n in SIZES)
    return f"""
import dist
dist.start({world})
fn body(out, tag, shm) {{
  fn one(out, tag, dt, n) {{
    r = dist.rank(); w = dist.world_size()
    seed(1000 + r * 7 + n % 97)
    x = nil
    if dt == "i64" {{ x = randint(-1000, 1000, [n], dtype="i64") }} else {{ x = randn([n], dtype=dt) * 100 }}
    p = out + "/" + tag + "_" + dt + "_" + str(n) + "_"
    save_npy(p + "x_" + str(r) + ".npy", x)
    save_npy(p + "sum_" + str(r) + ".npy", all_reduce(x))
    save_npy(p + "max_" + str(r) + ".npy", all_reduce(x, op="max"))
    save_npy(p + "min_" + str(r) + ".npy", all_reduce(x, op="min"))
    m = n - r * 3
    if m < 1 {{ m = 1 }}
    save_npy(p + "ag_" + str(r) + ".npy", all_gather(x[0:m]))
    save_npy(p + "bc_" + str(r) + ".npy", broadcast(x, src=w - 1))
  }}
  on = dist_shm(shm)
  r = dist.rank(); w = dist.world_size()
  for dt in ["f32", "f64", "i64"] {{
{calls}
  }}
  barrier()
  on
}}
print("SHM", dist.run(body, "{out}", "{tag}", {"true" if shm else "false"}))
print("AFTER", dist.run(fn() dist_shm()))
dist.stop()
"""


def check_world(world):
    out = os.path.join(TMP, f"w{world}")
    os.makedirs(out, exist_ok=True)
    errs = []
    rc, o, e = run(collectives_src(world, out, "shm", True), timeout=240)
    if rc != 0 or f"SHM {[True] * world}".replace("True", "true") not in o:
        return [f"shm run rc={rc} out={o!r} err={e[-600:]!r}"]
    rc, o, e = run(collectives_src(world, out, "tcp", False), timeout=240)
    if rc != 0 or f"SHM {[False] * world}".replace("False", "false") not in o:
        return [f"tcp run rc={rc} out={o!r} err={e[-600:]!r}"]
    ld = lambda tag, dt, n, what, r: np.load(f"{out}/{tag}_{dt}_{n}_{what}_{r}.npy")
    for dt in DTYPES:
        for n in SIZES:
            X = [ld("shm", dt, n, "x", r) for r in range(world)]
            for r in range(world):
                if not np.array_equal(X[r], ld("tcp", dt, n, "x", r)):
                    errs.append(f"{dt} n={n}: inputs differ between runs")
            exp = {"sum": np.sum(np.stack(X).astype(np.float64 if dt != "i64" else np.int64), axis=0),
                   "max": np.max(np.stack(X), axis=0), "min": np.min(np.stack(X), axis=0),
                   "ag": np.concatenate([X[r][0:max(1, n - r * 3)] for r in range(world)]),
                   "bc": X[world - 1]}
            for what, want in exp.items():
                for r in range(world):
                    got = ld("shm", dt, n, what, r)
                    ref = ld("tcp", dt, n, what, r)
                    if got.dtype != X[0].dtype or got.shape != want.shape:
                        errs.append(f"{dt} n={n} {what} rank {r}: dtype/shape {got.dtype}{got.shape} vs {want.shape}")
                        continue
                    if what == "sum" and dt != "i64":
                        tol = 1e-3 if dt == "f32" else 1e-9
                        ok = np.allclose(got, want, rtol=tol, atol=tol)
                    else:
                        ok = np.array_equal(got, want)
                    if not ok:
                        errs.append(f"{dt} n={n} {what} rank {r}: differs from NumPy (max err {np.max(np.abs(got.astype(np.float64) - want))})")
                    if got.tobytes() != ref.tobytes():
                        errs.append(f"{dt} n={n} {what} rank {r}: shm and TCP results are not bit-identical")
                    if got.tobytes() != ld("shm", dt, n, what, 0).tobytes():
                        errs.append(f"{dt} n={n} {what} rank {r}: differs from rank 0")
    return errs


@test
def test_collectives_world2(name):
    errs = check_world(2)
    report(name, not errs, "; ".join(errs[:6]))


@test
def test_collectives_world3(name):
    errs = check_world(3)
    report(name, not errs, "; ".join(errs[:6]))


@test
def test_env_forces_tcp(name):
    src = """
import dist
dist.start(2)
print("SHM", dist.run(fn() dist_shm()))
print("SUM", dist.run(fn() all_reduce(dist.rank() + 1)))
print("BYTES", dist.run(fn() { b0 = dist.bytes(); all_reduce(ones(1001)); all_gather(ones(3 + dist.rank())); broadcast(ones(5), src=1); b1 = dist.bytes(); [b1[0] - b0[0], b1[1] - b0[1]] }))
dist.stop()
"""
    rc, o, e = run(src, env={"NABLA_SHM": "0"})
    rc2, o2, e2 = run(src)
    ok = rc == 0 and "SHM [false, false]" in o and "SUM [3, 3]" in o and rc2 == 0 and "SHM [true, true]" in o2 and "SUM [3, 3]" in o2
    # the byte counters count the ring's volume on both paths (compression ratios stay meaningful)
    ok = ok and [l for l in o.splitlines() if l.startswith("BYTES")] == [l for l in o2.splitlines() if l.startswith("BYTES")] != []
    report(name, ok, f"rc={rc} out={o!r} err={e[-300:]!r} rc2={rc2} out2={o2!r}")


@test
def test_subgroup_and_p2p(name):
    # sub-groups, reduce_scatter and all_to_all (channels, dchan.c) next to shm collectives
    rc, o, e = run("""
import dist
dist.start(3)
fn body() {
  r = dist.rank()
  g = dist.new_group([0, 2])
  a = all_reduce(r + 1)
  b = if r != 1 { all_reduce(r + 1, group=g) } else { 0 }
  c = all_to_all([ones(1) * r, ones(1) * r, ones(1) * r])
  d = reduce_scatter(ones(6) * r)
  e = broadcast(ones(3) * (r + 5), src=2)
  [a, b, c[0].item() + c[1].item() + c[2].item(), d.sum().item(), e.sum().item()]
}
print("RES", dist.run(body))
dist.stop()
""")
    ok = rc == 0 and "RES [tensor([ 6.,  4.,  3.,  6., 21.]), tensor([ 6.,  0.,  3.,  6., 21.]), tensor([ 6.,  4.,  3.,  6., 21.])]" in o
    report(name, ok, f"rc={rc} out={o!r} err={e[-600:]!r}")


@test
def test_timeout_then_reconnect(name):
    rc, o, e = run("""
import dist
dist.start(2, timeout=2)
t0 = clock()
r = try { dist.exec('if dist.rank() == 1 { t = clock(); while clock() - t < 5 { } } else { y = all_reduce(ones(4)) }') } catch e { print("CAUGHT", e.message); nil }
print("FAST", clock() - t0 < 20)
print("AFTER", dist.run(fn() all_reduce(dist.rank() + 1)), dist.run(fn() dist_shm()))
dist.stop()
""", timeout=60)
    ok = rc == 0 and "timed out after 2 s without progress (waiting on rank 1)" in o and "AFTER [3, 3] [true, true]" in o
    report(name, ok, f"rc={rc} out={o!r} err={e[-600:]!r}")


@test
def test_killed_worker_during_shm_all_reduce(name):
    path = script("""
import dist
dist.start(3, timeout=60)
print("SHM", dist.run(fn() dist_shm()))
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
t0 = clock()
r = try { dist.exec('x = ones(3000001); while true { x = all_reduce(x) / 3 }') } catch e { print("CAUGHT", e.message); nil }
print("FAST", clock() - t0 < 30)
r = try { dist.exec("1") } catch e { print("BROKEN", e.message); nil }
dist.restart()
print("AFTER", dist.run(fn() all_reduce(dist.rank())), dist.run(fn() dist_shm()))
eprint("PIDS2", join(map(dist.workers(), fn(w) str(w.pid)), " "))
dist.stop()
""", "kill.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    t = time.time()
    while "PIDS" not in line and time.time() - t < 30:
        line = p.stderr.readline()
    pids = [int(x) for x in line.split()[1:]]
    time.sleep(1.5)
    os.kill(pids[2], signal.SIGKILL)
    out, err = p.communicate(timeout=90)
    sanitizer_check(err)
    ok = (p.returncode == 0 and "SHM [true, true, true]" in out and f"worker rank 2 (pid {pids[2]}) died" in out
          and "FAST true" in out and "BROKEN" in out and "AFTER [3, 3, 3] [true, true, true]" in out)
    pids2 = [int(x) for x in err.split("PIDS2", 1)[1].split("\n")[0].split()] if "PIDS2" in err else []
    ok = ok and wait_gone(pids + pids2, 5)
    left = shm_leftovers()
    report(name, ok and not left, f"rc={p.returncode} left={left} out={out!r} err={err[-800:]!r}")


@test
def test_no_dev_shm_leftovers(name):
    rc, o, e = run("""
import dist
dist.start(3)
print("S", dist.run(fn() all_reduce(dist.rank())))
dist.restart()
print("S", dist.run(fn() all_reduce(dist.rank())))
dist.stop()
""")
    left = shm_leftovers()
    report(name, rc == 0 and o.count("S [3, 3, 3]") == 2 and not left, f"rc={rc} left={left} out={o!r} err={e[-300:]!r}")


dutil.finish()
