#!/usr/bin/python3
"""tests/dist: messages between workers (dist.post, recv_msg, recv_any,
probe, irecv_msg; dist/dmsg.c) on 3 local CPU workers.

Values (random tensors, checked against NumPy) reach the right rank with
their sender and tag, in order per sender; receives match by source and
tag; probe never waits or consumes; the receive queue is bounded with a
clear error; argument errors say what was wrong.
Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_async_msg.py
(run-tests.sh runs it again under ASan: NABLA_ASAN)
"""
import json, os, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, lines_with, relayed, report, sanitizer_check, script, test  # noqa: E402

rng = np.random.default_rng()


def run(src, timeout=180):
    p = subprocess.run([NABLA, script(src)], capture_output=True, text=True, timeout=timeout)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


@test
def test_recv_any_values_and_order(name):
    # ranks 1 and 2 each post 5 random f64 matrices (odd shapes) to rank 0 with tags;
    # rank 0 takes them with recv_any in arrival order
    mats = {}
    for r in (1, 2):
        for k in range(5):
            a = rng.standard_normal((int(rng.integers(1, 7)), int(rng.integers(1, 5))))
            np.save(os.path.join(TMP, f"m{r}_{k}.npy"), a)
            mats[(r, k)] = a
    rc, out, err = run(f"""
import dist
dist.start(3)
dist.exec('''
import json
if dist.rank() == 0 {{
  got = list()
  for i in 0..10 {{ m = dist.recv_any(timeout=60); push(got, {{src: m.src, tag: m.tag, k: m.value.k, sum: m.value.x.sum(axis=0).tolist(), shape: m.value.x.shape}}) }}
  print("GOT", json.format(got))
  print("LEFT", dist.probe())
}} else {{
  hs = list()
  for k in 0..5 {{ push(hs, dist.post(0, {{k: k, x: load_npy("{TMP}/m\\{{dist.rank()\\}}_\\{{k\\}}.npy") * 2}}, tag=10 * dist.rank() + k)) }}
  for h in hs {{ h.wait() }}
  print("SENT", map(hs, fn(h) h.test()))
}}
''')
dist.stop()
""")
    got = json.loads(relayed(out)[0][0][4:]) if 0 in relayed(out) else []
    ok = rc == 0 and len(got) == 10 and "[rank 0] LEFT nil" in out
    for r in (1, 2):
        ks = [g["k"] for g in got if g["src"] == r]
        ok = ok and ks == list(range(5))   # in order per sender
    for g in got:
        a = mats[(g["src"], g["k"])]
        ok = ok and g["tag"] == 10 * g["src"] + g["k"] and list(g["shape"]) == list(a.shape)
        ok = ok and np.allclose(g["sum"], (2 * a).sum(axis=0), rtol=1e-12, atol=1e-12)
    ok = ok and all(f"[rank {r}] SENT [true, true, true, true, true]" in out for r in (1, 2))
    report(name, ok, f"rc={rc} out={out[-800:]!r} err={err[-800:]!r}")


@test
def test_matching_probe_irecv(name):
    rc, out, err = run("""
import dist
dist.start(3)
dist.exec('''
if dist.rank() == 0 {
  h = dist.irecv_msg(src=2, tag=5)
  print("EARLY", h.test())
  dist.barrier()                      # ranks 1 and 2 have posted (and waited)
  t = clock()
  p = nil
  while p == nil and clock() - t < 30 { p = dist.probe(src=2, tag=5) }
  print("PROBE", p.src, p.tag, p.size > 0, dist.probe(src=2, tag=5).size == p.size)
  print("NONE", dist.probe(src=1, tag=99), dist.recv_msg(src=1, tag=99, timeout=0.2))
  m = dist.recv_msg(src=2, tag=5)
  print("TAKEN", m.src, m.tag, m.value, h.test())
  m2 = h.wait(timeout=30)
  print("IRECV", m2.src, m2.tag, m2.value)
  a = dist.recv_msg(src=1)
  b = dist.recv_msg(tag=4)
  print("REST", a.src, a.tag, a.value, b.src, b.tag, b.value, dist.probe())
} else {
  if dist.rank() == 1 { dist.post(0, "one-three", tag=3).wait() }
  if dist.rank() == 2 {
    dist.post(0, "two-four", tag=4).wait()
    dist.post(0, "two-five-a", tag=5).wait()
    dist.post(0, "two-five-b", tag=5).wait()
  }
  dist.barrier()
}
''')
dist.stop()
""")
    ok = (rc == 0 and "[rank 0] EARLY false" in out and "[rank 0] PROBE 2 5 true true" in out
          and "[rank 0] NONE nil nil" in out and "[rank 0] TAKEN 2 5 two-five-a true" in out
          and "[rank 0] IRECV 2 5 two-five-b" in out and "[rank 0] REST 1 3 one-three 2 4 two-four nil" in out)
    report(name, ok, f"rc={rc} out={out[-900:]!r} err={err[-800:]!r}")


@test
def test_both_ways_no_stall(name):
    # two ranks post 20 tensors of 1 MB to each other before receiving any
    rc, out, err = run("""
import dist
dist.start(2)
r = dist.run(fn() {
  peer = 1 - dist.rank()
  hs = map(list(range(20)), fn(i) dist.post(peer, full(list(262144), i + 10 * dist.rank(), dtype="f32"), tag=i))
  s = 0
  for i in 0..20 { m = dist.recv_msg(src=peer, tag=i, timeout=60); s += m.value.sum().item() }
  for h in hs { h.wait() }
  s
})
print("SUMS", r)
dist.stop()
""")
    want0 = sum((i + 10) * 262144 for i in range(20))
    want1 = sum(i * 262144 for i in range(20))
    ok = rc == 0 and f"SUMS [{want0:.1f}, {want1:.1f}]" in out.replace(".0,", ".0,")
    if not ok:
        vals = lines_with("SUMS ", out)
        ok = rc == 0 and vals and [float(x) for x in vals[0].strip("[]").split(",")] == [want0, want1]
    report(name, ok, f"rc={rc} out={out[-500:]!r} err={err[-800:]!r}")


@test
def test_bounded_queue_and_errors(name):
    rc, out, err = run("""
import dist
e0 = try { dist.post(1, 5) } catch e { print("SESSION", e.name, e.message); nil }
dist.start(2)
dist.exec('''
if dist.rank() == 1 {
  for i in 0..4100 { dist.post(0, i, tag=1).wait() }
  print("POSTED")
} else {
  r = try { dist.recv_msg(tag=2) } catch e { print("FULL", e.name, e.message); nil }
  s = 0
  for i in 0..4100 { s += dist.recv_msg(src=1, tag=1, timeout=60).value }
  print("SUM", s)
}
r1 = try { dist.post(dist.rank(), 1) } catch e { print("SELF", e.name, e.message); nil }
r2 = try { dist.post(5, 1) } catch e { print("RANK", e.name, e.message); nil }
r3 = try { dist.post(1 - dist.rank(), 1, tag=-1) } catch e { print("TAG", e.name, e.message); nil }
r4 = try { dist.recv_msg(src=0.5) } catch e { print("SRC", e.name, e.message); nil }
''')
dist.stop()
""", timeout=300)
    ok = (rc == 0 and "SESSION DistError dist.post: messages are between workers" in out
          and "[rank 0] FULL DistError dist.recv_msg: 4096 messages" in out and "receive those first" in out
          and f"[rank 0] SUM {sum(range(4100))}" in out and "[rank 1] POSTED" in out
          and "[rank 0] SELF ValueError dist.post: dst 0 is this rank" in out
          and "[rank 1] RANK ValueError dist.post: dst 5 is not a rank of this world of 2" in out
          and "TAG TypeError dist.post: tag must be an integer in 0..2147483647" in out
          and "SRC TypeError dist.recv_msg: src must be a rank" in out)
    report(name, ok, f"rc={rc} out={out[-1200:]!r} err={err[-800:]!r}")


@test
def test_inbox_refuses_without_key(name):
    # connections to a worker's listening ports without the session key (no
    # CURVE, or CURVE with the wrong server key) deliver nothing: the worker
    # receives only the real message, and answers as before
    try:
        import zmq
    except ImportError:
        dutil.skip(name, "pyzmq is not installed")
        return
    import time
    flag = os.path.join(TMP, "inbox.flag")
    path = script(f"""
import dist
dist.start(2)
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
while not exists("{flag}") {{ }}
r = dist.run(fn() {{
  if dist.rank() == 1 {{ dist.post(0, "real", tag=3).wait(); nil }} else {{
    m = dist.recv_any(timeout=30)
    t = clock(); while clock() - t < 0.5 {{ }}
    list(m.src, m.tag, m.value, dist.probe())
  }}
}})
print("GOT", r[0])
dist.stop()
""", "inbox.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line, t = "", time.time()
    while not line.startswith("PIDS") and time.time() - t < 60:
        line = p.stderr.readline()
    pid0 = line.split()[1] if line.startswith("PIDS") else "?"
    ss = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    ports = [l.split()[3].rsplit(":", 1)[1] for l in ss.splitlines() if f"pid={pid0}," in l]
    ctx = zmq.Context()
    socks = []
    for port in ports:
        plain = ctx.socket(zmq.DEALER)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(f"tcp://127.0.0.1:{port}")
        plain.send_multipart([b"<NBDIST>", b"0" * 64, b"msg 3 1 99", b"forged"])
        pub, sec = zmq.curve_keypair()
        spub, _ = zmq.curve_keypair()
        cur = ctx.socket(zmq.DEALER)
        cur.setsockopt(zmq.LINGER, 0)
        cur.curve_publickey, cur.curve_secretkey, cur.curve_serverkey = pub, sec, spub
        cur.connect(f"tcp://127.0.0.1:{port}")
        cur.send_multipart([b"<NBDIST>", b"0" * 64, b"msg 3 1 100", b"forged"], flags=zmq.NOBLOCK)
        socks += [plain, cur]
    time.sleep(1.0)
    open(flag, "w").close()
    out, err = p.communicate(timeout=120)
    for s_ in socks:
        s_.close()
    ctx.term()
    sanitizer_check(err)
    ok = p.returncode == 0 and len(ports) >= 2 and 'GOT [1, 3, "real", nil]' in out and "forged" not in out
    report(name, ok, f"rc={p.returncode} ports={ports} out={out[-400:]!r} err={err[-600:]!r}")


# ---------------------------------------------------------------- test() on the tensor isend/irecv handles
HANDLES = """
import dist
dist.start(3)
dist.exec('''
import json
fn spin(h) {{ t = clock(); while not h.test() and clock() - t < 60 {{ }}; h.test() }}
X = load_npy("{x}"); Y = load_npy("{y}"); Z = load_npy("{z}"); B = load_npy("{b}")
r = dist.rank()
if r == 0 {{
  h = dist.irecv(1)
  early = h.test()                         # rank 1 waits for the go: nothing is coming yet
  send(tensor([1.0]), 1)
  came = spin(h)
  x = h.wait()
  h2 = dist.irecv(1); h3 = dist.irecv(1)
  send(tensor([2.0]), 1)
  came3 = spin(h3)                         # receives h2's message first (posting order)
  out = {{early: early, came: came, came3: came3, h2: h2.test(), again: h.test(),
         x: (x - X).abs().max().item(), y: (h2.wait() - Y).abs().max().item(), z: (h3.wait() - Z).abs().max().item()}}
  dist.recv_msg(src=1, tag=7)              # rank 1's big isend is pending: now take it
  out.b = (recv(1) - B).abs().max().item()
  print("R0", json.format(out))
}} else if r == 1 {{
  recv(0)
  hx = dist.isend(X, 0)
  sx = spin(hx); hx.wait()
  recv(0)
  hy = dist.isend(Y, 0); hz = dist.isend(Z, 0)
  hy.wait(); hz.wait()
  hb = dist.isend(B, 0)                    # 32 MB: cannot finish before rank 0 reads it
  pending = hb.test()
  dist.post(0, "read", tag=7).wait()       # beside the ring (a send on the ring would wait for the isend)
  hb.wait()
  bad = try {{ dist_isend_test(9999, 1); "no error" }} catch e {{ e.message }}
  print("R1", json.format({{sx: sx, after: hx.test(), pending: pending, done: hb.test(), bad: bad}}))
}}
''')
dist.stop()
"""


@test
def test_handle_test_nonblocking(name):
    # h.test() (torch's Work.is_completed) on both paths: shared-memory
    # channels (one host) and TCP (NABLA_SHM=0); values checked exactly
    arrs = {"x": rng.standard_normal((7, 3)), "y": rng.standard_normal((5,)).astype(np.float32),
            "z": rng.standard_normal((2, 3, 4)), "b": rng.standard_normal((4_000_000,))}
    paths = {}
    for k, a in arrs.items():
        paths[k] = os.path.join(TMP, f"h_{k}.npy")
        np.save(paths[k], a)
    src = HANDLES.format(**paths)
    why = None
    for shm in ("1", "0"):
        p = subprocess.run([NABLA, script(src, f"handles{shm}.nbl")], capture_output=True, text=True, timeout=180,
                           env=dict(os.environ, NABLA_SHM=shm))
        sanitizer_check(p.stderr)
        rel = relayed(p.stdout)
        r0 = [l for l in rel.get(0, []) if l.startswith("R0 ")]
        r1 = [l for l in rel.get(1, []) if l.startswith("R1 ")]
        if p.returncode != 0 or not r0 or not r1:
            why = f"NABLA_SHM={shm}: rc {p.returncode} out={p.stdout[-600:]!r} err={p.stderr[-600:]!r}"
            break
        a, b = json.loads(r0[0][3:]), json.loads(r1[0][3:])
        if a["early"] is not False or not (a["came"] and a["came3"] and a["h2"] and a["again"]):
            why = f"NABLA_SHM={shm}: irecv test() gave {a}"
        elif max(a["x"], a["y"], a["z"], a["b"]) != 0:
            why = f"NABLA_SHM={shm}: received values differ: {a}"
        elif not (b["sx"] and b["after"] and b["pending"] is False and b["done"]):
            why = f"NABLA_SHM={shm}: isend test() gave {b}"
        elif "no pending isend with this handle" not in b["bad"]:
            why = f"NABLA_SHM={shm}: a bad handle's test(): {b['bad']!r}"
        if why:
            break
    report(name, why is None, why or "")


dutil.finish()
