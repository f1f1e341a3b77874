#!/usr/bin/python3
"""tests/dist: local SGD (dist.local_sgd, stdlib/dist.nbl) on 3 workers.

A linear-regression model in f64, each rank on its own rows of fresh random
data, SGD with momentum.  every=1 must equal synchronous data parallelism
(gradients averaged every step, computed in the same script) to rounding;
every=3 must equal a NumPy simulation of local SGD (each rank its own
momentum, the parameters averaged every 3 steps and by ls.sync() at the end)
and differ from synchronous training; every rank ends with the same
parameters, which start from rank 0's; float buffers are averaged and
integer buffers come from rank 0 (each rank changes both every step).

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_localsgd.py
"""
import os, re, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, report, sanitizer_check, script, test  # noqa: E402

RNG = np.random.default_rng()
W, F, B = 3, 5, 7   # ranks, features, rows per rank per step

SRC = """import optim
D = "{d}/"
X = load_npy(D + "x.npy"); Y = load_npy(D + "y.npy")
r = dist.rank()
fn make_model(shift) {{
  w = load_npy(D + "w0.npy") + shift; b = load_npy(D + "b0.npy")
  w.requires_grad = true; b.requires_grad = true
  {{weight: w, bias: b, stat: tensor([r * 1.0 + 0.5], dtype="f64"), count: tensor([r + 10]),
    __buffers: list("stat", "count"), __call: fn(self, x) x @ self.weight.T + self.bias}}
}}
fn loss_fn(m, x, y) = mean((m(x) - y) ** 2)
local = make_model(r)          # ranks start apart: local_sgd takes rank 0's
ls = dist.local_sgd(local, every={every})
syncm = make_model(0)
o1 = optim.sgd(local, lr={lr}, momentum=0.9)
o2 = optim.sgd(syncm, lr={lr}, momentum=0.9)
avg = 0
for s in 0..{S} {{
  lo = (s * {W} + r) * {B}
  x = X[lo:lo + {B}]; y = Y[lo:lo + {B}]
  o1.step(grad(loss_fn)(local, x, y))
  no_grad {{ local.stat.copy_(local.stat + r); local.count.copy_(local.count + r + 1) }}
  if ls.step() {{ avg += 1 }}
  o2.step(dist.average_grads(grad(loss_fn)(syncm, x, y)))
}}
if {final} {{ ls.sync() }}
save_npy(D + "w_" + str(r) + ".npy", local.weight); save_npy(D + "b_" + str(r) + ".npy", local.bias)
save_npy(D + "sw_" + str(r) + ".npy", syncm.weight)
print("STATS", r, avg, ls.steps, ls.syncs, local.stat.item(), local.count.item())
"""


def reference(X, Y, w0, b0, every, S, lr, final):
    """NumPy local SGD: per-rank SGD with momentum (torch's buffer b = 0.9 b + g),
    parameters averaged every `every` steps (momentum buffers stay local)"""
    ws = [w0.copy() for _ in range(W)]; bs = [b0.copy() for _ in range(W)]
    mw = [np.zeros_like(w0) for _ in range(W)]; mb = [np.zeros_like(b0) for _ in range(W)]
    for s in range(S):
        for r in range(W):
            lo = (s * W + r) * B
            x, y = X[lo:lo + B], Y[lo:lo + B]
            res = x @ ws[r].T + bs[r] - y
            gw, gb = 2 / B * res.T @ x, 2 / B * res.sum(0)
            mw[r] = gw if s == 0 else 0.9 * mw[r] + gw
            mb[r] = gb if s == 0 else 0.9 * mb[r] + gb
            ws[r] = ws[r] - lr * mw[r]; bs[r] = bs[r] - lr * mb[r]
        if (s + 1) % every == 0 or (final and s == S - 1):
            aw, ab = sum(ws) / W, sum(bs) / W
            ws = [aw.copy() for _ in range(W)]; bs = [ab.copy() for _ in range(W)]
    return ws[0], bs[0]


def case(name, every, S, final):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    lr = 0.05
    X = RNG.standard_normal((S * W * B, F))
    Y = X @ RNG.standard_normal((F, 1)) + 0.1 * RNG.standard_normal((len(X), 1))
    w0, b0 = 0.3 * RNG.standard_normal((1, F)), 0.3 * RNG.standard_normal(1)
    for k, v in dict(x=X, y=Y, w0=w0, b0=b0).items():
        np.save(os.path.join(d, k + ".npy"), v)
    src = SRC.format(d=d, every=every, lr=lr, S=S, W=W, B=B, final="true" if final else "false")
    p = subprocess.run([NABLA, "run", "-n", str(W), script(src, name + ".nbl")], capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    if p.returncode:
        return [f"rc={p.returncode} err={p.stderr[-1500:]!r}"], None
    stats = {int(m.group(1)): m.groups()[1:] for m in re.finditer(r"STATS (\d+) (\S+) (\S+) (\S+) (\S+) (\S+)", p.stdout)}
    why = []
    ld = lambda f: np.load(os.path.join(d, f))  # noqa: E731
    w, b = ld("w_0.npy"), ld("b_0.npy")
    for r in range(1, W):
        if not (np.array_equal(ld(f"w_{r}.npy"), w) and np.array_equal(ld(f"b_{r}.npy"), b)):
            why.append(f"rank {r}'s parameters differ from rank 0's")
    syncs = S // every + (1 if final else 0)
    for r in range(W):
        st = stats.get(r)
        if st is None:
            why.append(f"rank {r}: no STATS line"); continue
        avg, steps, nsync, stat, count = (float(v) for v in st)
        if (avg, steps, nsync) != (S // every, S, syncs):
            why.append(f"rank {r}: averaged {avg}, steps {steps}, syncs {nsync}")
        # each step adds r to rank r's float buffer and r + 1 to its integer one:
        # averaged, 0.5 + S * mean(r); taken from rank 0, 10 + S
        want = 0.5 + S * np.mean(range(W))
        if abs(stat - want) > 1e-12 or count != 10 + S:
            why.append(f"rank {r}: buffers stat={stat} count={count} (want the mean {want} and rank 0's {10 + S})")
    rw, rb = reference(X, Y, w0, b0, every, S, lr, final)
    e = max(np.abs(w - rw).max(), np.abs(b - rb).max())
    if not e < 1e-10:
        why.append(f"parameters off the NumPy local SGD by {e:.3g}")
    return why, (w, ld("sw_0.npy"))


@test
def test_every1_is_data_parallel(name):
    why, got = case(name, 1, 6, False)
    if got is not None:
        e = np.abs(got[0] - got[1]).max()
        if not e < 1e-12:
            why.append(f"every=1 differs from synchronous data parallelism by {e:.3g}")
    report(name, not why, "; ".join(why))


@test
def test_every3_numpy(name):
    why, got = case(name, 3, 8, True)   # 8 steps: averaged at 3 and 6, then ls.sync()
    if got is not None:
        e = np.abs(got[0] - got[1]).max()
        if not e > 1e-6:
            why.append(f"every=3 equals synchronous training ({e:.3g}): the averaging period is ignored")
    report(name, not why, "; ".join(why))


@test
def test_errors(name):
    for cname, code, want in (("zero", "dist.local_sgd(nn.linear(2, 1), every=0)", "every must be an integer >= 1"),
                              ("frac", "dist.local_sgd(nn.linear(2, 1), every=1.5)", "every must be an integer >= 1")):
        p = subprocess.run([NABLA, script("import dist\nimport nn\n" + code + "\n", "lerr.nbl")], capture_output=True, text=True, timeout=60)
        sanitizer_check(p.stderr)
        report(f"{name}_{cname}", p.returncode != 0 and want in p.stderr, f"rc={p.returncode} err={p.stderr[-500:]!r}")


dutil.finish()
