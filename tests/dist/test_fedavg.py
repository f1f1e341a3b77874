#!/usr/bin/python3
"""tests/dist: federated averaging (dist.fedavg) and the non-IID split
(dist.noniid_split), stdlib/dist.nbl.

FedAvg runs a linear-regression model (f64) over clients of different sizes,
with several local SGD steps, partial participation and server momentum, and
its weights are checked against a NumPy FedAvgM computed here from the same
sampled clients (the sampling itself is checked for count, order and
reproducibility by seed); in one process and on 3 workers (nabla run), where
clients are spread over the ranks and every rank must end with the same
weights.  With full participation and one full-batch local step, FedAvg must
equal synchronous SGD on the union of the clients' data (the sample-weighted
average of the gradients), computed in the same script.  noniid_split: a
partition of the indices, fixed by seed, leaving the global generator alone,
label-skewed for a small alpha and close to IID for a large one; shards
against a NumPy reconstruction; the errors.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_fedavg.py
"""
import os, re, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, report, sanitizer_check, script, test  # noqa: E402

RNG = np.random.default_rng()


def run(src, n=None, timeout=240, name="fa.nbl"):
    """the script in one process (n=None) or under `nabla run -n N`: (rc, out, err)"""
    path = script(src, name)
    cmd = [NABLA, path] if n is None else [NABLA, "run", "-n", str(n), path]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def problem(d):
    """clients of odd, different sizes on a linear-regression task, saved under d"""
    os.makedirs(d, exist_ok=True)
    C, F = 7, 5
    sizes = RNG.integers(3, 30, C)
    X = RNG.standard_normal((int(sizes.sum()), F))
    Y = X @ RNG.standard_normal((F, 1)) + 0.1 * RNG.standard_normal((len(X), 1))
    w0, b0 = 0.3 * RNG.standard_normal((1, F)), 0.3 * RNG.standard_normal(1)
    for k, v in dict(x=X, y=Y, w0=w0, b0=b0).items():
        np.save(os.path.join(d, k + ".npy"), v)
    off = np.concatenate([[0], np.cumsum(sizes)])
    return dict(X=X, Y=Y, w0=w0, b0=b0, off=off, C=C)


PRELUDE = """import dist
import optim
D = "{d}/"
X = load_npy(D + "x.npy"); Y = load_npy(D + "y.npy")
OFF = list({off})
fn make_model() {{
  w = load_npy(D + "w0.npy"); b = load_npy(D + "b0.npy")
  w.requires_grad = true; b.requires_grad = true
  {{weight: w, bias: b, __call: fn(self, x) x @ self.weight.T + self.bias}}
}}
fn loss_fn(m, x, y) = mean((m(x) - y) ** 2)
fn rank0() = dist.rank() == nil or dist.rank() == 0
"""

FEDAVG = PRELUDE + """
model = make_model()
fn train(m, c) {{
  lo = OFF[c]; hi = OFF[c + 1]
  opt = optim.sgd(m, lr={lr})
  for e in 0..{E} {{ opt.step(grad(loss_fn)(m, X[lo:hi], Y[lo:hi])) }}
  hi - lo
}}
grp = {group}
fa = dist.fedavg(model, {C}, train, per_round={K}, server_lr={slr}, server_momentum={beta}, seed={seed}, group=grp)
for r in 0..{R} {{
  rec = fa.round()
  if rank0() {{ print("ROUND", rec.round, rec.samples, join(map(rec.clients, fn(c) str(c)), ",")) }}
}}
tag = if dist.rank() == nil {{ "p" }} else {{ str(dist.rank()) }}
save_npy(D + "w_" + tag + ".npy", model.weight); save_npy(D + "b_" + tag + ".npy", model.bias)
"""


def fedavg_ref(P, rounds, lr, E, slr, beta):
    """NumPy FedAvgM: client models from E full-batch SGD steps, sample-weighted deltas"""
    w, b = P["w0"].copy(), P["b0"].copy()
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    X, Y, off = P["X"], P["Y"], P["off"]
    for picked in rounds:
        aw, ab, N = np.zeros_like(w), np.zeros_like(b), 0
        for c in picked:
            x, y = X[off[c]:off[c + 1]], Y[off[c]:off[c + 1]]
            n = len(x)
            cw, cb = w.copy(), b.copy()
            for _ in range(E):
                r = x @ cw.T + cb - y
                gw, gb = 2 / n * r.T @ x, 2 / n * r.sum(0)
                cw, cb = cw - lr * gw, cb - lr * gb
            aw += n * (cw - w); ab += n * (cb - b); N += n
        uw, ub = aw / N, ab / N
        if beta > 0:
            vw, vb = beta * vw + uw, beta * vb + ub
            uw, ub = vw, vb
        w, b = w + slr * uw, b + slr * ub
    return w, b


def rounds_of(out):
    got = []
    for m in re.finditer(r"ROUND (\d+) (\S+) (\S+)", out):
        got.append((int(m.group(1)), float(m.group(2)), [int(c) for c in m.group(3).split(",")]))
    return got


def fedavg_case(name, n, K, E, slr, beta, seed, R=4, lr=0.05, group="nil"):
    d = os.path.join(TMP, f"{name}")
    P = problem(d)
    src = FEDAVG.format(d=d, off=", ".join(map(str, P["off"])), lr=lr, E=E, C=P["C"], K=K, slr=slr, beta=beta, seed=seed, R=R, group=group)
    rc, out, err = run(src, n)
    rs = rounds_of(out)
    if rc or len(rs) != R:
        return False, f"rc={rc} rounds={rs} out={out[-600:]!r} err={err[-1500:]!r}", None
    why = []
    for i, (r, samples, picked) in enumerate(rs):
        if r != i or len(picked) != K or picked != sorted(set(picked)) or not all(0 <= c < P["C"] for c in picked):
            why.append(f"round {i}: bad sample {picked}")
        if samples != sum(P["off"][c + 1] - P["off"][c] for c in picked):
            why.append(f"round {i}: samples {samples}")
    w, b = fedavg_ref(P, [p for _, _, p in rs], lr, E, slr, beta)
    tags = ["p"] if n is None else [str(r) for r in range(n)]
    for t in tags:
        gw, gb = np.load(os.path.join(d, f"w_{t}.npy")), np.load(os.path.join(d, f"b_{t}.npy"))
        e = max(np.abs(gw - w).max(), np.abs(gb - b).max())
        if not e < 1e-10:
            why.append(f"rank {t}: weights off the NumPy FedAvg by {e:.3g}")
    if n is not None:
        w0 = np.load(os.path.join(d, "w_0.npy"))
        for t in tags[1:]:
            if not np.array_equal(np.load(os.path.join(d, f"w_{t}.npy")), w0):
                why.append(f"rank {t}'s weights differ from rank 0's")
    # the initial weights moved (a round that did nothing cannot pass as FedAvg)
    if np.abs(w - P["w0"]).max() < 1e-3:
        why.append("the reference did not move")
    return not why, "; ".join(why), [p for _, _, p in rs]


@test
def test_fedavg_numpy_one_process(name):
    ok, why, _ = fedavg_case(name, None, K=3, E=3, slr=1.0, beta=0.0, seed=5)
    report(name, ok, why)


@test
def test_fedavg_momentum_numpy(name):
    ok, why, _ = fedavg_case(name, None, K=4, E=2, slr=0.7, beta=0.9, seed=11, R=5)
    report(name, ok, why)


@test
def test_fedavg_workers(name):
    # 3 ranks, 5 of 7 clients a round: ranks hold 2, 2 and 1 clients
    ok, why, _ = fedavg_case(name, 3, K=5, E=2, slr=1.0, beta=0.5, seed=2)
    report(name, ok, why)


@test
def test_fedavg_workers_idle_rank(name):
    # 2 clients a round on 3 ranks: one rank trains nobody and still joins the average
    ok, why, _ = fedavg_case(name, 3, K=2, E=1, slr=1.0, beta=0.0, seed=9)
    report(name, ok, why)


@test
def test_fedavg_groups(name):
    # 4 ranks as two groups [0,1] and [2,3], each running the whole federation:
    # both end with the NumPy result, as every rank of each group must
    grp = "dist.new_group(if dist.rank() < 2 { list(0, 1) } else { list(2, 3) })"
    ok, why, _ = fedavg_case(name, 4, K=3, E=2, slr=1.0, beta=0.3, seed=4, R=3, group=grp)
    report(name, ok, why)


@test
def test_fedavg_sampling_by_seed(name):
    _, _, a = fedavg_case(name + "_a", None, K=3, E=1, slr=1.0, beta=0.0, seed=21, R=6)
    _, _, b = fedavg_case(name + "_b", None, K=3, E=1, slr=1.0, beta=0.0, seed=21, R=6)
    _, _, c = fedavg_case(name + "_c", None, K=3, E=1, slr=1.0, beta=0.0, seed=22, R=6)
    ok = a is not None and a == b and c is not None and c != a and len({tuple(p) for p in a}) > 1
    report(name, ok, f"seed 21: {a} / {b}; seed 22: {c}")


@test
def test_fedavg_one_step_is_sync_sgd(name):
    # full participation, one full-batch local step: the sample-weighted average
    # of the client models is one SGD step on all the clients' data together
    d = os.path.join(TMP, name)
    P = problem(d)
    for n in (None, 3):
        src = PRELUDE.format(d=d, off=", ".join(map(str, P["off"]))) + f"""
model = make_model()
fn train(m, c) {{
  lo = OFF[c]; hi = OFF[c + 1]
  opt = optim.sgd(m, lr=0.1)
  opt.step(grad(loss_fn)(m, X[lo:hi], Y[lo:hi]))
  hi - lo
}}
fa = dist.fedavg(model, {P["C"]}, train, fraction=1)
sync = make_model()
opt = optim.sgd(sync, lr=0.1)
for r in 0..3 {{
  fa.round()
  opt.step(grad(loss_fn)(sync, X, Y))
}}
e = max(max(abs(model.weight - sync.weight)).item(), max(abs(model.bias - sync.bias)).item())
moved = max(abs(sync.weight - load_npy(D + "w0.npy"))).item()
if rank0() {{ print("DIFF", e, moved, len(fa.history[0].clients)) }}
"""
        rc, out, err = run(src, n)
        m = re.search(r"DIFF (\S+) (\S+) (\d+)", out)
        ok = rc == 0 and m and float(m.group(1)) < 1e-12 and float(m.group(2)) > 1e-3 and int(m.group(3)) == P["C"]
        report(f"{name}_{'process' if n is None else 'workers'}", bool(ok), f"rc={rc} out={out[-400:]!r} err={err[-1200:]!r}")


@test
def test_fedavg_errors(name):
    d = os.path.join(TMP, name)
    P = problem(d)
    base = PRELUDE.format(d=d, off=", ".join(map(str, P["off"]))) + "model = make_model()\n"
    cases = [
        ("per_round", "dist.fedavg(model, 3, fn(m, c) 1, per_round=4)", "per_round = 4 is more than the 3 clients"),
        ("clients", "dist.fedavg(model, 0, fn(m, c) 1)", "clients must be an integer >= 1"),
        ("fraction", "dist.fedavg(model, 3, fn(m, c) 1, fraction=1.5)", "fraction must be in (0, 1]"),
        ("momentum", "dist.fedavg(model, 3, fn(m, c) 1, server_momentum=1)", "server_momentum must be in [0, 1)"),
        ("train", "dist.fedavg(model, 3, 5)", "train must be a function"),
        ("count", "dist.fedavg(model, 3, fn(m, c) \"x\").round()", "must return the number of samples"),
        ("none", "dist.fedavg(model, 3, fn(m, c) 0).round()", "trained on no samples"),
    ]
    for cname, code, want in cases:
        rc, out, err = run(base + code + "\n")
        report(f"{name}_{cname}", rc != 0 and want in err, f"rc={rc} err={err[-600:]!r}")


# ------------------------------------------------------------ noniid_split

SPLIT = """import dist
lab = load_npy("{d}/lab.npy")
seed(77); before = rand(4)
seed(77)
s = dist.noniid_split(lab, {C}, {how}, seed={seed})
after = rand(4)
print("RNG", max(abs(before - after)).item())
for k in 0..len(s) {{ save_npy("{d}/{tag}_" + str(k) + ".npy", s[k]) }}
print("N", len(s))
"""


def split(d, lab, C, how, seed, tag):
    np.save(os.path.join(d, "lab.npy"), lab)
    rc, out, err = run(SPLIT.format(d=d, C=C, how=how, seed=seed, tag=tag), name=f"split_{tag}.nbl")
    if rc:
        raise AssertionError(f"rc={rc} err={err[-800:]!r}")
    rng = float(re.search(r"RNG (\S+)", out).group(1))
    return [np.load(os.path.join(d, f"{tag}_{k}.npy")) for k in range(C)], rng


def is_partition(parts, n):
    allidx = np.concatenate(parts) if parts else np.zeros(0, int)
    return len(allidx) == n and np.array_equal(np.sort(allidx), np.arange(n)) and all(np.array_equal(p, np.sort(p)) for p in parts)


@test
def test_split_dirichlet(name):
    d = os.path.join(TMP, name); os.makedirs(d, exist_ok=True)
    n, C, K = int(RNG.integers(900, 1300)), 7, 10
    lab = RNG.integers(0, K, n)
    a1, rng1 = split(d, lab, C, "alpha=0.1", 5, "a1")
    a2, _ = split(d, lab, C, "alpha=0.1", 5, "a2")
    a3, _ = split(d, lab, C, "alpha=0.1", 6, "a3")
    iid, _ = split(d, lab, C, "alpha=1000", 5, "iid")
    why = []
    for nm, s in (("a1", a1), ("a3", a3), ("iid", iid)):
        if not is_partition(s, n):
            why.append(f"{nm} is not a partition of 0..{n - 1}")
    if not all(np.array_equal(x, y) for x, y in zip(a1, a2)):
        why.append("the same seed gave another split")
    if all(np.array_equal(x, y) for x, y in zip(a1, a3)):
        why.append("seeds 5 and 6 gave the same split")
    if rng1 != 0:
        why.append("the global random generator moved")

    # label skew: the share of a client's examples in its most common class
    def skew(s):
        return np.mean([np.bincount(lab[p], minlength=K).max() / len(p) for p in s if len(p)])
    if not skew(a1) > 0.5:
        why.append(f"alpha=0.1 is not skewed (top-class share {skew(a1):.2f})")
    # alpha=1000: every class split ~evenly (1/C of it per client)
    for c in range(K):
        m = (lab == c).sum()
        shares = np.array([(lab[p] == c).sum() for p in iid]) / m
        if np.abs(shares - 1 / C).max() > 0.08:
            why.append(f"alpha=1000, class {c}: shares {np.round(shares, 3)}")
            break
    report(name, not why, "; ".join(why))


@test
def test_split_shards(name):
    d = os.path.join(TMP, name); os.makedirs(d, exist_ok=True)
    n, C, S = int(RNG.integers(300, 500)), 6, 2
    lab = RNG.integers(0, 10, n)
    s, _ = split(d, lab, C, f"shards={S}", 3, "s")
    s2, _ = split(d, lab, C, f"shards={S}", 4, "s2")
    # the shards of the label-sorted order (ties by index), as the docstring says
    order = np.lexsort((np.arange(n), lab))
    ns = C * S
    shard_of = np.empty(n, int)
    for sid in range(ns):
        shard_of[order[sid * n // ns:(sid + 1) * n // ns]] = sid
    why = []
    if not is_partition(s, n):
        why.append("not a partition")
    used = []
    for k, p in enumerate(s):
        ids = sorted(set(shard_of[p]))
        want = np.sort(np.concatenate([order[i * n // ns:(i + 1) * n // ns] for i in ids]))
        if len(ids) != S or not np.array_equal(p, want):
            why.append(f"client {k} holds shards {ids}, not {S} whole ones")
        used += ids
    if sorted(used) != list(range(ns)):
        why.append(f"shards used {sorted(used)}")
    if all(np.array_equal(x, y) for x, y in zip(s, s2)):
        why.append("seeds 3 and 4 gave the same split")
    report(name, not why, "; ".join(why))


@test
def test_split_errors(name):
    cases = [
        ("both", "dist.noniid_split(tensor([0, 1, 1]), 2, alpha=1, shards=1)", "exactly one of alpha"),
        ("neither", "dist.noniid_split(tensor([0, 1, 1]), 2)", "exactly one of alpha"),
        ("negative", "dist.noniid_split(tensor([0, -1, 1]), 2, alpha=1)", "labels must be >= 0"),
        ("fractional", "dist.noniid_split(tensor([0.5, 1.0]), 2, alpha=1)", "labels must be integers"),
        ("shape", "dist.noniid_split(zeros(2, 2), 2, alpha=1)", "1-d tensor"),
        ("clients", "dist.noniid_split(tensor([0, 1]), 0, alpha=1)", "clients must be an integer >= 1"),
        ("shards", "dist.noniid_split(tensor([0, 1, 2]), 2, shards=2)", "more than the 3 examples"),
        ("alpha", "dist.noniid_split(tensor([0, 1, 2]), 2, alpha=-1)", "alpha must be a positive number"),
    ]
    for cname, code, want in cases:
        rc, out, err = run("import dist\n" + code + "\n", name="split_err.nbl")
        report(f"{name}_{cname}", rc != 0 and want in err, f"rc={rc} err={err[-600:]!r}")


dutil.finish()
