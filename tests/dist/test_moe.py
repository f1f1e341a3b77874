#!/usr/bin/python3
"""tests/dist: mixture of experts (stdlib/moe.nbl, nn.moe) — single device,
dense reference, expert parallel over 2 workers with all_to_all routing, and
the load-balancing loss (docs/parallelism.md, "MoE").

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_moe.py
One line per test ("PASS: name" / "FAIL: name: why"); exit 1 on any failure.
"""
import os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, report, test  # noqa: E402


def run(src, timeout=90):
    path = os.path.join(TMP, "t.nbl")
    with open(path, "w") as f:
        f.write(src)
    p = subprocess.run([NABLA, path], capture_output=True, text=True, timeout=timeout)
    for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
        if marker in p.stderr:
            raise AssertionError("sanitizer: " + p.stderr[-2000:])
    return p.returncode, p.stdout, p.stderr


def results(out):
    r = {}
    for l in out.splitlines():
        if l.startswith("R "):
            parts = l.split()
            r[parts[1]] = parts[2:]
    return r


# hand computation of the aux loss: plain loops over scalars (lists), top-k by sorting
HAND_AUX = """
fn hand_aux(m, x) {
  E = m.n_experts; k = m.top_k
  p = softmax(x @ m.router.weight.T + m.router.bias, axis=-1).tolist()
  T = len(p)
  f = map(list(0..E), fn(i) 0); P = map(list(0..E), fn(i) 0)
  for t in 0..T {
    row = p[t]
    used = map(list(0..E), fn(i) false)
    for s in 0..k {
      best = -1
      for i in 0..E { if not used[i] and (best < 0 or row[i] > row[best]) { best = i } }
      used[best] = true; f[best] += 1
    }
    for i in 0..E { P[i] += row[i] }
  }
  a = 0
  for i in 0..E { a += (f[i] / (T * k)) * (P[i] / T) }
  E * a
}
"""


@test
def test_single_device_sparse_equals_dense(name):
    rc, out, err = run("""
import nn
import moe
""" + HAND_AUX + """
for k in list(1, 2) {
  seed(3)
  m = nn.moe(8, 4, k, hidden=16)
  x = randn(3, 5, 8)
  r = m(x)
  md = moe.expert_parallel(m, {size: 1, rank: 0, _id: nil}); md.group = nil; md.dense = true
  rd = md(x)
  gates = moe.route(m, reshape(x, list(-1, 8))).gates
  gs = sum(gates, axis=-1)
  print("R k{k}", max(abs(r[0] - rd[0])).item(), abs(r[1] - hand_aux(m, reshape(x, list(-1, 8)))).item(),
        max(abs(gs - 1)).item(), list(r[0].shape) == list(3, 5, 8))
}
""")
    r = results(out)
    ok = rc == 0 and all(k in r for k in ("k1", "k2"))
    for k in ("k1", "k2"):
        if ok:
            v = r[k]
            ok = float(v[0]) < 1e-5 and float(v[1]) < 1e-5 and float(v[2]) < 1e-6 and v[3] == "true"
    report(name, ok, f"rc={rc} out={out[-1500:]!r} err={err[-1500:]!r}")


EP = """
import dist
dist.start(2)
""" + HAND_AUX.replace("\n", "\n") + """
r = dist.run(fn(k, E, hand_aux) {
  import nn
  import moe
  fn g0(p) = if p.grad == nil { zeros_like(p) } else { p.grad }
  g = dist.new_group(list(0, 1))
  seed(7)
  d = 8; T = 12; per = E / 2
  m = nn.moe(d, E, k, hidden=16)
  for p in nn.parameters(m) { p.requires_grad = true }
  x = randn(2 * T, d); R = randn(2 * T, d)
  ep = moe.expert_parallel(m, g)
  rk = dist.rank()
  ys = m(x)
  backward(sum(ys[0] * R) + ys[1])
  xl = x[rk * T:(rk + 1) * T]
  b0 = dist.bytes(g)[0]
  yp = ep(xl)
  sent = dist.bytes(g)[0] - b0
  # every rank adds aux / group size: the summed objective is the single device's
  backward(sum(yp[0] * R[rk * T:(rk + 1) * T]) + yp[1] / 2)
  dy = max(abs(yp[0] - ys[0][rk * T:(rk + 1) * T])).item()
  da = abs(yp[1] - ys[1]).item()
  dh = abs(yp[1] - hand_aux(m, x)).item()
  dr = 0; nr = 0
  pr = nn.parameters(ep.router); sr = nn.parameters(m.router)
  for i in 0..len(pr) { dr = max(dr, max(abs(all_reduce(g0(pr[i]), group=g) - g0(sr[i]))).item()); nr = nr + sum(abs(g0(sr[i]))).item() }
  de = 0; ne = 0
  pe = nn.parameters(ep.experts); se = nn.parameters(m.experts[rk * per:(rk + 1) * per])
  if len(pe) != len(se) { error("expert trees differ") }
  for i in 0..len(pe) { de = max(de, max(abs(g0(pe[i]) - g0(se[i]))).item()); ne = ne + sum(abs(g0(se[i]))).item() }
  list(dy, da, dh, dr, de, nr, ne, sent, len(ep.experts))
}, KK, EE, hand_aux)
for i in 0..2 { print("R r{i}", join(map(r[i], fn(v) str(v)), " ")) }
"""


def ep_check(name, k, E):
    t = time.time()
    rc, out, err = run(EP.replace("KK", str(k)).replace("EE", str(E)))
    r = results(out)
    ok = rc == 0 and "r0" in r and "r1" in r
    why = ""
    if ok:
        for key in ("r0", "r1"):
            v = [float(s) for s in r[key]]
            dy, da, dh, dr, de, nr, ne, sent, nloc = v
            if not (dy < 1e-5 and da < 1e-6 and dh < 1e-5 and dr < 1e-5 and de < 1e-5):
                ok = False; why = f"{key}: diffs {v[:5]}"
            if not (nr > 0 and ne > 0 and sent > 0 and nloc == E / 2):
                ok = False; why = f"{key}: degenerate {v}"
    report(name, ok, why or f"rc={rc} out={out[-1500:]!r} err={err[-1500:]!r}")
    if os.environ.get("VERBOSE"):
        print(f"  ({time.time() - t:.1f} s)")


@test
def test_expert_parallel_top1_equals_single_device(name):
    ep_check(name, 1, 4)


@test
def test_expert_parallel_top2_equals_single_device(name):
    ep_check(name, 2, 4)


@test
def test_expert_parallel_top2_8experts(name):
    ep_check(name, 2, 8)


@test
def test_moe_errors(name):
    rc, out, err = run("""
import nn
print("R split", try { nn.moe(8, 3, 1, group={size: 2, rank: 0, _id: nil}); "no" } catch e { e.message })
print("R topk", try { nn.moe(8, 4, 5); "no" } catch e { e.message })
""")
    ok = rc == 0 and "3 experts do not split over an expert-parallel group of 2" in out and "top_k = 5 must be in 1..4" in out
    report(name, ok, f"rc={rc} out={out[-800:]!r} err={err[-800:]!r}")


dutil.finish()
