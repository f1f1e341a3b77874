#!/usr/bin/python3
"""NABLA_ASAN: also run under the ASan build by tools/run-tests.sh (threads + autograd hooks).
tests/dist: dist.data_parallel's gradient averaging during backward
(dist/ddataparallel.c: buckets all-reduced on a communication thread as they fill).

- N workers with batch B and data_parallel give the same parameters, step by
  step, as one process with batch N*B (no explicit average_grads);
- the averaged gradients equal dist.average_grads of the local ones, for
  f32 and f64 models, with buckets handed over during backward;
- backward() + .grad with dist.no_sync accumulation averages once;
- a differentiable collective inside the model (its backward communicates
  while buckets are in flight), activation checkpointing, and an error
  inside no_sync all keep results right;
- outside a worker the call is a clear error.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_dp_overlap.py
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, report, test  # noqa: E402


def run(src, timeout=120):
    p = subprocess.run([NABLA, dutil.script(src)], capture_output=True, text=True, timeout=timeout)
    dutil.sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def values(out, key):
    for l in out.splitlines():
        if l.startswith(f"R {key} "):
            return l.split()[2:]
    return None


@test
def test_equals_single_process_training(name):
    """2 workers x batch 4 with overlapped averaging == 1 process x batch 8, over 3 AdamW steps."""
    rc, out, err = run("""
import nn
import optim
import dist
seed(3)
X = randn(8, 6); Y = randint(0, 3, list(8))
fn lf(m, x, y) = cross_entropy(m(x), y)
seed(1)
ref = nn.mlp(list(6, 12, 12, 3))
opt = optim.adamw(ref, lr=0.05)
for s in 0..3 { opt.step(grad(lf)(ref, X, Y)) }
dist.start(2)
dist.push(X=X, Y=Y, lf=lf)
r = dist.run(fn() {
  import nn
  import optim
  seed(1)
  m = dist.data_parallel(nn.mlp(list(6, 12, 12, 3)), bucket_mb=0.0002)
  opt = optim.adamw(m, lr=0.05)
  k = dist.rank()
  for s in 0..3 { opt.step(grad(lf)(m, X[k * 4:(k + 1) * 4], Y[k * 4:(k + 1) * 4])) }
  list(nn.parameters(m), dist.reducer_stats())
})
d = 0
pr = nn.parameters(ref)
for w in 0..2 { for i in 0..len(pr) { d = max(d, max(abs(r[w][0][i] - pr[i])).item()) } }
st = r[0][1]
print("R diff", d, st.buckets, st.buckets_overlapped, st.passes)
print("ON", st.buckets_on)
""")
    v = values(out, "diff")
    ok = rc == 0 and v is not None and float(v[0]) < 1e-5 and int(float(v[1])) >= 2 and int(float(v[2])) >= 2 and int(float(v[3])) == 3
    ok = ok and "ON cpu" in out   # CPU parameters: host buckets and the ring
    report(name, ok, f"rc={rc} values={v} err={err[-800:]!r}")


@test
def test_equals_average_grads_f32_f64(name):
    rc, out, err = run("""
import dist
dist.start(3)
r = dist.run(fn() {
  import nn
  res = list()
  for dt in list("f32", "f64") {
    seed(2)
    m = dist.data_parallel({w1: randn(5, 7).to(dt), b1: randn(7).to(dt), w2: randn(7, 4).to(dt)}, bucket_mb=0.0001)
    seed(20 + dist.rank())
    x = randn(3, 5).to(dt); y = randint(0, 4, list(3))
    fn lf(mm) = cross_entropy(tanh(x @ mm.w1 + mm.b1) @ mm.w2, y)
    g = grad(lf)(m)
    dist_reducer_clear()
    ga = dist.average_grads(grad(lf)(m))
    d = 0
    pa = nn.parameters(ga); pg = nn.parameters(g)
    for i in 0..len(pa) { d = max(d, max(abs(pa[i] - pg[i])).item()); if pg[i].dtype != dt { error("dtype " + pg[i].dtype) } }
    push(res, d)
  }
  res
})
print("R diff", max(max(r[0][0], r[1][0]), r[2][0]), max(max(r[0][1], r[1][1]), r[2][1]))
""")
    v = values(out, "diff")
    ok = rc == 0 and v is not None and float(v[0]) < 1e-6 and float(v[1]) < 1e-12
    report(name, ok, f"rc={rc} values={v} err={err[-800:]!r}")


@test
def test_backward_no_sync_accumulation(name):
    """3 micro-batches: two backward() inside no_sync, the last outside: .grad is the
    rank-average of the accumulated gradients; no_sync restores on error."""
    rc, out, err = run("""
import dist
dist.start(2)
r = dist.run(fn() {
  import nn
  seed(4)
  m = dist.data_parallel(nn.mlp(list(4, 6, 2)), bucket_mb=0.0001)
  for p in nn.parameters(m) { p.requires_grad = true }
  seed(40 + dist.rank())
  xs = map(list(0..3), fn(i) randn(5, 4))
  fn micro(i) { backward(sum(m(xs[i]) ** 2)) }
  dist.no_sync(fn() { micro(0); micro(1) })
  micro(2)
  got = map(nn.parameters(m), fn(p) p.grad)
  passes = dist.reducer_stats().passes
  # reference: the same accumulation with averaging off, then one explicit average
  for p in nn.parameters(m) { p.grad = nil }
  dist_reducer_clear()
  for i in 0..3 { micro(i) }
  want = dist.average_grads(map(nn.parameters(m), fn(p) p.grad))
  d = 0
  for i in 0..len(got) { d = max(d, max(abs(got[i] - want[i])).item()) }
  # an error inside no_sync: the setting comes back
  e = try { dist.no_sync(fn() error("boom")) } catch e { e.message }
  list(d, passes, e, dist_reducer_sync(true))
})
print("R acc", r[0][0], r[1][0], r[0][1], r[0][3])
print("R err", r[0][2])
""")
    v = values(out, "acc")
    ok = rc == 0 and v is not None and float(v[0]) < 1e-6 and float(v[1]) < 1e-6 and int(float(v[2])) == 1 and v[3] == "true" \
        and "boom" in out
    report(name, ok, f"rc={rc} out={out[-800:]!r} err={err[-800:]!r}")


@test
def test_collective_inside_backward_and_checkpoint(name):
    """The model all_reduces an activation (its backward communicates mid-backward while
    buckets are in flight) and checkpoints a block: averaged grads still equal
    average_grads of the local ones."""
    rc, out, err = run("""
import dist
dist.start(2)
r = dist.run(fn() {
  import nn
  seed(6)
  m = {a: nn.linear(4, 8), b: nn.linear(8, 8), c: nn.linear(8, 3)}
  m = dist.data_parallel(m, bucket_mb=0.00005)
  seed(60 + dist.rank())
  x = randn(5, 4)
  fn fwd(mm) {
    h = relu(mm.a(x))
    h = all_reduce(h, op="avg")
    h = checkpoint(fn(z) gelu(mm.b(z)), h)
    sum(mm.c(h) ** 2)
  }
  g = grad(fwd)(m)
  ov = dist.reducer_stats().buckets_overlapped
  dist_reducer_clear()
  ga = dist.average_grads(grad(fwd)(m))
  d = 0
  pa = nn.parameters(ga); pg = nn.parameters(g)
  for i in 0..len(pa) { d = max(d, max(abs(pa[i] - pg[i])).item()) }
  list(d, ov)
})
print("R d", r[0][0], r[1][0], r[0][1])
""")
    v = values(out, "d")
    ok = rc == 0 and v is not None and float(v[0]) < 1e-6 and float(v[1]) < 1e-6 and int(float(v[2])) >= 2
    report(name, ok, f"rc={rc} out={out[-800:]!r} err={err[-800:]!r}")


@test
def test_errors(name):
    rc, out, err = run("""
import nn
import dist
print("R a", try { dist.data_parallel(nn.linear(2, 2)); "no" } catch e { e.message })
dist.start(1)
print("R b", dist.run(fn() { import nn; try { dist.data_parallel(nn.linear(2, 2), bucket_mb=0); "no" } catch e { e.message } })[0])
""")
    ok = rc == 0 and "not running on a dist worker" in out and "bucket_mb must be a positive number" in out
    report(name, ok, f"rc={rc} out={out[-800:]!r} err={err[-800:]!r}")


dutil.finish()
