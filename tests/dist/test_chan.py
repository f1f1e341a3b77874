#!/usr/bin/python3
"""tests/dist: same-host shared-memory channels for point-to-point traffic
(dist/dchan.c): send/recv, isend/irecv and all_to_all between workers of one
host, at world 2 and 4, odd sizes (one spanning many 1 MiB ring laps), every
dtype the ring reduces (f32, f64, i32, i64), against NumPy and bit-identical
to the TCP path (NABLA_SHM=0); sub-groups; a killed peer and a timeout while a
rank waits on a channel (fast failure, the session reconnects).  The mixed
case (a channel one way, TCP the other) is test_multihost.py's all_to_all.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_chan.py
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh (dchan.c is C).
"""
import os, shutil, signal, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, report, sanitizer_check, script, test, wait_gone  # noqa: E402

rng = np.random.default_rng()
DTYPES = ["f32", "f64", "i32", "i64"]
NPT = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}


def run(src, timeout=180, env=None, name="t.nbl"):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([NABLA, script(src, name)], capture_output=True, text=True, timeout=timeout, env=e)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def p2p_src(world, d, sizes):
    # every rank loads its inputs (written by the test), exchanges them and saves what it got
    return f"""
import dist
dist.start({world})
fn body(d) {{
  r = dist.rank(); w = dist.world_size()
  nx = (r + 1) % w; pv = (r + w - 1) % w
  for dt in {DTYPES!r} {{
    for ns in {[str(n) for n in sizes]!r} {{
      n = int(ns)
      p = d + "/" + dt + "_" + ns + "_"
      x = load_npy(p + "x" + str(r) + ".npy")
      # ring of blocking send/recv (even ranks send first: no cycle of waits)
      if r % 2 == 0 {{ send(x, nx); y = recv(pv) }} else {{ y = recv(pv); send(x, nx) }}
      save_npy(p + "sr" + str(r) + ".npy", y)
      # isend both ways, then a posted receive
      h = dist.isend(x, pv)
      q = dist.irecv(nx)
      z = q.wait()
      h.wait()
      save_npy(p + "ir" + str(r) + ".npy", z)
      # all_to_all: rank r sends rows [j*n .. ) of x*(j+1) to rank j (varying lengths)
      parts = map(list(range(w)), fn(j) x[0:(n + j) % n + 1] * (j + 1))
      got = all_to_all(parts)
      for j in 0..w {{ save_npy(p + "a2a" + str(r) + "_" + str(j) + ".npy", got[j]) }}
    }}
  }}
  str(dist_shm_peer(nx)) + " " + str(dist_shm_peer(pv))
}}
print("PEER", dist.run(body, "{d}"))
dist.stop()
"""


def check_p2p(world):
    sizes = [1, 7, int(rng.integers(300_000, 400_000)) | 1]   # the last: over 1 MiB (laps of a 1 MiB ring)
    d = {tag: os.path.join(TMP, f"p2p{world}_{tag}") for tag in ("chan", "tcp")}
    X = {}
    for dt in DTYPES:
        for n in sizes:
            for r in range(world):
                x = (rng.standard_normal(n) * 100).astype(NPT[dt]) if dt[0] == "f" else rng.integers(-2**24, 2**24, n).astype(NPT[dt])
                X[dt, n, r] = x
                for v in d.values():
                    os.makedirs(v, exist_ok=True)
                    np.save(f"{v}/{dt}_{n}_x{r}.npy", x)
    errs = []
    for tag, env, peer in (("chan", {}, "true"), ("tcp", {"NABLA_SHM": "0"}, "false")):
        rc, o, e = run(p2p_src(world, d[tag], sizes), env=env, name=f"p2p{world}{tag}.nbl")
        want = "PEER " + str([f"{peer} {peer}"] * world).replace("'", '"')
        if rc != 0 or want not in o:
            return [f"{tag} run: rc {rc}, expected {want!r}: out={o[-300:]!r} err={e[-600:]!r}"]
    for dt in DTYPES:
        for n in sizes:
            for r in range(world):
                nx, pv = (r + 1) % world, (r - 1) % world
                exp = {"sr": X[dt, n, pv], "ir": X[dt, n, nx]}
                for j in range(world):
                    exp[f"a2a{r}_{j}"] = None
                for what, want in exp.items():
                    if want is None:
                        j = int(what.split("_")[1])
                        src_x = X[dt, n, j]
                        want = (src_x[0:(n + r) % n + 1] * (r + 1)).astype(NPT[dt])
                        fname = f"{dt}_{n}_{what}.npy"
                    else:
                        fname = f"{dt}_{n}_{what}{r}.npy"
                    got = np.load(f"{d['chan']}/{fname}")
                    ref = np.load(f"{d['tcp']}/{fname}")
                    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                        errs.append(f"world {world} {dt} n={n} {what} rank {r}: {got.dtype}{got.shape} differs from NumPy {want.dtype}{want.shape}")
                    elif got.tobytes() != ref.tobytes():
                        errs.append(f"world {world} {dt} n={n} {what} rank {r}: channel and TCP results differ")
    for v in d.values():
        shutil.rmtree(v, ignore_errors=True)
    return errs


@test
def test_p2p_world2(name):
    errs = check_p2p(2)
    report(name, not errs, "; ".join(errs[:5]))


@test
def test_p2p_world4(name):
    errs = check_p2p(4)
    report(name, not errs, "; ".join(errs[:5]))


@test
def test_subgroup(name):
    # a sub-group's send/recv between ranks of one host use the channels (by world rank)
    a = rng.standard_normal(int(rng.integers(10, 5000))).astype(np.float32)
    pa = os.path.join(TMP, "sub_a.npy")
    np.save(pa, a)
    rc, o, e = run(f"""
import dist
dist.start(4)
fn body() {{
  r = dist.rank()
  g = dist.new_group([3, 1])
  if r == 3 {{ send(load_npy("{pa}") * 2, 1, group=g); str(dist_shm_peer(1, group=g)) + " 0" }}
  else if r == 1 {{ y = recv(0, group=g); save_npy("{TMP}/sub_got.npy", y); str(dist_shm_peer(0, group=g)) + " " + str(y.shape[0]) }}
  else {{ "false 0" }}
}}
print("RES", dist.run(body))
dist.stop()
""")
    got = np.load(f"{TMP}/sub_got.npy") if rc == 0 else None
    ok = rc == 0 and f'RES ["false 0", "true {a.shape[0]}", "false 0", "true 0"]' in o and np.array_equal(got, a * 2)
    report(name, ok, f"rc={rc} out={o!r} err={e[-500:]!r}")


@test
def test_timeout_on_channel(name):
    # rank 0 waits on a channel for data rank 1 never sends: the group timeout, then a working group
    rc, o, e = run("""
import dist
dist.start(2, timeout=2)
t0 = clock()
r = try { dist.exec('if dist.rank() == 0 { y = recv(1) } else { t = clock(); while clock() - t < 5 { } }') } catch e { print("CAUGHT", e.message); nil }
print("FAST", clock() - t0 < 20)
print("AFTER", dist.run(fn() { r = dist.rank(); if r == 0 { send(ones(3) * 7, 1); 0 } else { recv(0).sum().item() } }), dist.run(fn() dist_shm_peer(1 - dist.rank())))
dist.stop()
""", timeout=60)
    ok = rc == 0 and "timed out after 2 s without progress (waiting on rank 1)" in o and "AFTER [0, 21.0] [true, true]" in o and "FAST true" in o
    report(name, ok, f"rc={rc} out={o!r} err={e[-600:]!r}")


@test
def test_killed_peer_on_channel(name):
    # rank 0 streams a large tensor to rank 1 over the channel while rank 1 is killed: fast failure, restart
    path = script("""
import dist
dist.start(2, timeout=60)
print("PEER", dist.run(fn() dist_shm_peer(1 - dist.rank())))
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
t0 = clock()
r = try { dist.exec('x = ones(3000001); while true { if dist.rank() == 0 { send(x, 1) } else { y = recv(0) } }') } catch e { print("CAUGHT", e.message); nil }
print("FAST", clock() - t0 < 30)
dist.restart()
print("AFTER", dist.run(fn() { r = dist.rank(); if r == 0 { send(ones(5), 1); 0 } else { recv(0).sum().item() } }), dist.run(fn() dist_shm_peer(1 - dist.rank())))
eprint("PIDS2", join(map(dist.workers(), fn(w) str(w.pid)), " "))
dist.stop()
""", "chankill.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    t = time.time()
    while "PIDS" not in line and time.time() - t < 30:
        line = p.stderr.readline()
    pids = [int(x) for x in line.split()[1:]]
    time.sleep(1.5)
    os.kill(pids[1], signal.SIGKILL)
    out, err = p.communicate(timeout=90)
    sanitizer_check(err)
    ok = (p.returncode == 0 and "PEER [true, true]" in out and f"worker rank 1 (pid {pids[1]}) died" in out
          and "FAST true" in out and "AFTER [0, 5.0] [true, true]" in out)
    pids2 = [int(x) for x in err.split("PIDS2", 1)[1].split("\n")[0].split()] if "PIDS2" in err else []
    ok = ok and wait_gone(pids + pids2, 5)
    report(name, ok, f"rc={p.returncode} out={out!r} err={err[-800:]!r}")


dutil.finish()
