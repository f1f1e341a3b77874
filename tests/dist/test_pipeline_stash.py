#!/usr/bin/python3
"""tests/dist: PipeDream-style per-micro-batch updates with weight stashing
(dist.pipeline(..., update=, weight_stashing=), stdlib/pipeline.nbl) on 2
workers, against a NumPy reference written out here step by step.

Two stages tanh(x @ w.T) (f64; the nonlinearity makes a stage's own
weights enter its gradient), an MSE loss, the 1F1B schedule
with 4 micro-batches, and an SGD update after every micro-batch's backward on
each stage.  With stashing, a micro-batch's backward must use the weights its
forward saw (rank 0 runs F0 F1 B0 F2 ...: F1 ran before B0's update, so B1
must use the older weights); without, the current ones.  The two results
must each match their NumPy reference and differ from each other.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_pipeline_stash.py
"""
import os, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, report, sanitizer_check, script, test  # noqa: E402

RNG = np.random.default_rng()
P, M, LR, STEPS = 2, 4, 0.1, 2

SRC = """
import nn
D = "{d}/"
fn lin(w) = {{w: w, __call: fn(self, x) tanh(x @ self.w.T)}}
w0 = load_npy(D + "w0.npy"); w1 = load_npy(D + "w1.npy")
w0.requires_grad = true; w1.requires_grad = true
stages = list(lin(w0), lin(w1))
fn sgd(stage) = no_grad {{ for t in nn.parameters(stage) {{ t.copy_(t - {lr} * t.grad) }} }}
pipe = dist.pipeline(stages, microbatches={m}, schedule="1f1b", loss=fn(out, y) mean((out - y) ** 2), update=sgd, weight_stashing={stash})
X = load_npy(D + "x.npy"); Y = load_npy(D + "y.npy")
for s in 0..{steps} {{ pipe.step(X[s], Y[s]) }}
r = dist.rank()
save_npy(D + "out_{tag}_" + str(r) + ".npy", stages[r].w)
"""


def schedule_1f1b(p, m):
    out = []
    for s in range(p):
        steps, warm, f, b = [], min(p - s - 1, m), 0, 0
        while f < warm:
            steps.append(("F", f)); f += 1
        while f < m:
            steps.append(("F", f)); f += 1
            steps.append(("B", b)); b += 1
        while b < m:
            steps.append(("B", b)); b += 1
        out.append(steps)
    return out


def reference(W, X, Y, stash):
    """every rank's steps in an order its messages allow; a stage's weights
    change only by its own updates, so any such order gives the same result"""
    W = [w.copy() for w in W]
    sched = schedule_1f1b(P, M)
    for s_ in range(STEPS):
        xs, ys = np.split(X[s_], M), np.split(Y[s_], M)
        fwd, bwd, inp, stashed = {}, {}, {}, {}
        pos = [0] * P
        while any(pos[r] < len(sched[r]) for r in range(P)):
            moved = False
            for r in range(P):
                while pos[r] < len(sched[r]):
                    op, mb = sched[r][pos[r]]
                    if op == "F":
                        if r > 0 and (r, mb) not in fwd:
                            break
                        x = xs[mb] if r == 0 else fwd[(r, mb)]
                        inp[(r, mb)] = x
                        stashed[(r, mb)] = W[r].copy()
                        if r < P - 1:
                            fwd[(r + 1, mb)] = np.tanh(x @ W[r].T)
                    else:
                        if r < P - 1 and (r, mb) not in bwd:
                            break
                        x = inp[(r, mb)]
                        w = stashed[(r, mb)] if stash else W[r]
                        out = np.tanh(x @ w.T)
                        g = 2 * (out - ys[mb]) / out.size / M if r == P - 1 else bwd[(r, mb)]
                        g = g * (1 - out ** 2)   # through tanh
                        if r > 0:
                            bwd[(r - 1, mb)] = g @ w
                        W[r] = W[r] - LR * (g.T @ x)
                    pos[r] += 1
                    moved = True
            assert moved, "reference schedule deadlocked"
    return W


@test
def test_weight_stashing(name):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    n = 4 * M   # rows per step
    W = [0.5 * RNG.standard_normal((5, 3)), 0.5 * RNG.standard_normal((2, 5))]
    X = RNG.standard_normal((STEPS, n, 3))
    Y = RNG.standard_normal((STEPS, n, 2))
    for k, v in dict(w0=W[0], w1=W[1], x=X, y=Y).items():
        np.save(os.path.join(d, k + ".npy"), v)
    got = {}
    for stash in (True, False):
        tag = "s" if stash else "n"
        src = SRC.format(d=d, lr=LR, m=M, steps=STEPS, stash="true" if stash else "false", tag=tag)
        p = subprocess.run([NABLA, "run", "-n", str(P), script(src, f"stash_{tag}.nbl")], capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        sanitizer_check(p.stderr)
        if p.returncode:
            report(f"{name}_{tag}", False, f"rc={p.returncode} err={p.stderr[-1500:]!r}")
            continue
        got[stash] = [np.load(os.path.join(d, f"out_{tag}_{r}.npy")) for r in range(P)]
        ref = reference(W, X, Y, stash)
        e = max(np.abs(got[stash][r] - ref[r]).max() for r in range(P))
        report(f"{name}_{'stashed' if stash else 'current'}_numpy", e < 1e-12, f"off the NumPy reference by {e:.3g}")
    if len(got) == 2:
        e = max(np.abs(got[True][r] - got[False][r]).max() for r in range(P))
        report(f"{name}_matters", e > 1e-6, f"stashed and current weights gave the same result ({e:.3g})")


dutil.finish()
