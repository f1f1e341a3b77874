#!/usr/bin/python3
"""tests/dist: dist.parameter_server (asynchronous SGD with bounded
staleness, stdlib/dist.nbl) on 3 local CPU workers, least squares (convex).

staleness=0 must give exactly the synchronous SGD of the same batches (run
in the session and in NumPy); staleness=k converges, no applied update is
older than k, and every pushed gradient is counted (applied + dropped +
unused).
Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_paramserver.py
"""
import json, os, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import lines_with, report, sanitizer_check, script, test, NABLA, TMP  # noqa: E402

rng = np.random.default_rng()
N, D, BS = 60, 5, 6          # 10 batches of 6 rows
NB = N // BS
X = rng.standard_normal((N, D))
W_TRUE = rng.standard_normal((D, 1))
Y = X @ W_TRUE + 0.3 + 0.01 * rng.standard_normal((N, 1))
W0 = 0.1 * rng.standard_normal((D, 1))
LR = 0.05


_nnpy = [0]


def t(a):
    """a NumPy array as nabla source: loaded from an .npy file (exact f64)"""
    _nnpy[0] += 1
    path = os.path.join(TMP, f"p{_nnpy[0]}.npy")
    np.save(path, np.asarray(a, dtype=np.float64))
    return f"load_npy(\"{path}\")"


PRELUDE = f"""
import dist
import optim
import json
X = {t(X)}
Y = {t(Y)}
fn fresh() = {{w: {t(W0)}, b: tensor([0.0], dtype="f64")}}
fn loss_fn(m, xb, yb) = ((xb @ m.w + m.b - yb) ** 2).mean()
# the batch is chosen by the parameter version the gradient is computed at
fn grad_fn(m, v) {{
  k = v % {NB}
  grad(loss_fn)(m, X[k * {BS}:(k + 1) * {BS}], Y[k * {BS}:(k + 1) * {BS}])
}}
fn full_loss(m) = loss_fn(m, X, Y).item()
dist.start(3)
dist.push({{X: X, Y: Y, loss_fn: loss_fn}})
"""


def run(src, timeout=240):
    p = subprocess.run([NABLA, script(PRELUDE + src)], capture_output=True, text=True, timeout=timeout)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def numpy_sgd(steps):
    w, b = W0.copy(), np.zeros(1)
    for v in range(steps):
        k = v % NB
        xb, yb = X[k * BS:(k + 1) * BS], Y[k * BS:(k + 1) * BS]
        r = xb @ w + b - yb
        gw, gb = 2 * xb.T @ r / len(r), 2 * r.mean(axis=0)
        w, b = w - LR * gw, b - LR * gb
    return w, b


@test
def test_staleness0_equals_sync(name):
    steps = 25
    rc, out, err = run(f"""
m = fresh()
ps = dist.parameter_server(m, optim.sgd(m, lr={LR}), staleness=0)
ps.run(grad_fn, {steps})
s = ps.stats()
print("PS", json.format({{w: m.w.tolist(), b: m.b.tolist(), stats: s}}))
# the synchronous run in the session: the same batches, one after another
m2 = fresh()
opt2 = optim.sgd(m2, lr={LR})
for v in 0..{steps} {{ opt2.step(grad_fn(m2, v)) }}
print("SYNC", json.format({{w: m2.w.tolist(), b: m2.b.tolist()}}))
dist.stop()
""")
    ps = json.loads(lines_with("PS ", out)[0])
    sync = json.loads(lines_with("SYNC ", out)[0])
    w, b = numpy_sgd(steps)
    st = ps["stats"]
    ok = (rc == 0 and ps["w"] == sync["w"] and ps["b"] == sync["b"]   # bit for bit
          and np.allclose(ps["w"], w, rtol=1e-10, atol=1e-12) and np.allclose(ps["b"], b, rtol=1e-10, atol=1e-12)
          and st["applied"] == steps and st["version"] == steps and st["max_staleness"] == 0
          and st["staleness"] == [steps] and st["pushed"] == st["applied"] + st["dropped"] + st["unused"])
    report(name, ok, f"rc={rc} stats={st} ps_w={ps['w'][:2]} numpy_w={w[:2].tolist()} err={err[-800:]!r}")


@test
def test_staleness_k_bounded_and_converges(name):
    k, steps = 2, 240
    rc, out, err = run(f"""
m = fresh()
l0 = full_loss(m)
ps = dist.parameter_server(m, optim.sgd(m, lr={LR}), staleness={k})
ps.run(grad_fn, {steps})
print("R", json.format({{l0: l0, l1: full_loss(m), stats: ps.stats(), w: m.w.tolist()}}))
dist.stop()
""")
    r = json.loads(lines_with("R ", out)[0])
    st = r["stats"]
    # the least-squares optimum, for the converged loss
    A = np.hstack([X, np.ones((N, 1))])
    sol = np.linalg.lstsq(A, Y, rcond=None)[0]
    lopt = float(np.mean((A @ sol - Y) ** 2))
    ok = (rc == 0 and st["applied"] == steps and st["max_staleness"] <= k and len(st["staleness"]) == k + 1
          and sum(st["staleness"]) == steps and st["pushed"] == st["applied"] + st["dropped"] + st["unused"]
          and r["l1"] < 0.05 * r["l0"] and r["l1"] < lopt + 0.05
          and np.abs(np.array(r["w"]) - sol[:D]).max() < 0.1)
    report(name, ok, f"rc={rc} stats={st} loss {r['l0']:.4g} -> {r['l1']:.4g} (optimum {lopt:.4g}) err={err[-600:]!r}")


@test
def test_worker_dies_mid_run(name):
    # rank 2's first gradient never comes: its worker is killed; the server
    # goes on with ranks 0 and 1 and counts the lost gradient
    import signal, time
    mark = os.path.join(TMP, "ps-kill")
    path = script(PRELUDE + f"""
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
fn grad_or_hang(m, v) {{
  if dist.rank() == 2 and not exists("{mark}") {{ write_text("{mark}", "x"); t = clock(); while clock() - t < 120 {{ }} }}
  grad_fn(m, v)
}}
dist.push({{grad_fn: grad_fn, grad_or_hang: grad_or_hang}})
m = fresh()
ps = dist.parameter_server(m, optim.sgd(m, lr={LR}), staleness=1)
ps.run(grad_or_hang, 40)
print("R", json.format({{stats: ps.stats(), loss: full_loss(m)}}))
dist.stop()
""", "pskill.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line, t = "", time.time()
    while not line.startswith("PIDS") and time.time() - t < 60:
        line = p.stderr.readline()
    pids = [int(x) for x in line.split()[1:]]
    while not os.path.exists(mark) and time.time() - t < 60:
        time.sleep(0.05)
    time.sleep(0.2)
    os.kill(pids[2], signal.SIGKILL)
    out, err = p.communicate(timeout=180)
    sanitizer_check(err)
    got = lines_with("R ", out)
    st = json.loads(got[0])["stats"] if got else {}
    ok = (p.returncode == 0 and got and st["applied"] == 40 and st["lost"] == 1 and st["max_staleness"] <= 1
          and st["pushed"] == st["applied"] + st["dropped"] + st["unused"])
    report(name, ok, f"rc={p.returncode} stats={st} err={err[-600:]!r}")


def numpy_grad(w, b, k):
    xb, yb = X[k * BS:(k + 1) * BS], Y[k * BS:(k + 1) * BS]
    r = xb @ w + b - yb
    return 2 * xb.T @ r / len(r), 2 * r.mean(axis=0)


def replay_rounds(rounds):
    """NumPy's SGD over backup-worker rounds: each round averages the gradients
    of its two applied ranks, rank q of round v reading batch (3v + q) % NB"""
    w, b = W0.copy(), np.zeros(1)
    for v, ranks in enumerate(rounds):
        gs = [numpy_grad(w, b, (v * 3 + q) % NB) for q in ranks]
        w = w - LR * (gs[0][0] + gs[1][0]) / 2
        b = b - LR * (gs[0][1] + gs[1][1]) / 2
    return w, b


@test
def test_backup_workers(name):
    # backup=1 of 3: every round applies the average of the first 2 gradients
    # at its version and drops the late one.  Files order the ranks, whatever
    # the timing: rank 2 starts its first gradient only once rank 0 computes
    # at version 2 (so round 0 never has it and it comes late), and ranks 0
    # and 1 give the last round's gradients only once rank 2 runs its second
    # task (which the server sends after it took the late one: the run cannot
    # end first).  The parameters must equal NumPy's SGD over the ranks each
    # round actually applied (ps.rounds()), each rank with its own batch
    steps = 9
    mark, seen, mark2 = (os.path.join(TMP, f"ps-backup-{k}") for k in ("mark", "seen", "mark2"))
    for f in (mark, seen, mark2):
        if os.path.exists(f):
            os.remove(f)
    rc, out, err = run(f"""
fn wait_for(p) {{ t = clock(); while not exists(p) and clock() - t < 120 {{ }} }}
fn grad_bk(m, v) {{
  r = dist.rank()
  if r == 0 and v >= 2 {{ write_text("{mark}", "x") }}
  if r == 2 {{
    wait_for("{mark}")
    if exists("{seen}") {{ write_text("{mark2}", "x") }} else {{ write_text("{seen}", "x") }}
  }}
  if r < 2 and v == {steps - 1} {{ wait_for("{mark2}") }}
  grad_fn(m, v * 3 + r)
}}
dist.push({{grad_fn: grad_fn, grad_bk: grad_bk, wait_for: wait_for}})
m = fresh()
ps = dist.parameter_server(m, optim.sgd(m, lr={LR}), backup=1)
ps.run(grad_bk, {steps})
print("R", json.format({{w: m.w.tolist(), b: m.b.tolist(), stats: ps.stats(), rounds: ps.rounds()}}))
dist.stop()
""")
    got = lines_with("R ", out)
    r = json.loads(got[0]) if got else {}
    st, rounds = r.get("stats", {}), r.get("rounds", [])
    why = None if rc == 0 and got else f"rc={rc}"
    if why is None and (len(rounds) != steps or any(len(x) != 2 or len(set(x)) != 2 for x in rounds)):
        why = f"rounds {rounds}: expected {steps} rounds of 2 distinct ranks"
    if why is None and 2 in rounds[0]:
        why = f"round 0 applied rank 2's gradient, which could not have been computed yet: {rounds}"
    if why is None and not (st["version"] == steps and st["applied"] == 2 * steps and st["late"] >= 1 and st["dropped"] == st["late"]
                            and st["pushed"] == st["applied"] + st["dropped"] + st["unused"] and st["lost"] == 0):
        why = f"stats {st}"
    if why is None:
        w, b = replay_rounds(rounds)
        if not (np.allclose(r["w"], w, rtol=1e-10, atol=1e-12) and np.allclose(r["b"], b, rtol=1e-10, atol=1e-12)):
            why = f"parameters {r['w']} differ from NumPy's {w.tolist()} over the applied rounds {rounds}"
    report(name, why is None, f"{why}; out={out[-600:]!r} err={err[-800:]!r}")


@test
def test_backup_worker_dies(name):
    # backup=1 of 3, rank 2 killed inside its first gradient: its gradient is
    # lost (counted); the rounds go on with the 2 living workers (each round
    # still averages 2 gradients: N-k while N-k workers live), equal to
    # NumPy's replay of ps.rounds()
    import signal, time
    mark = os.path.join(TMP, "ps-bk-kill")
    if os.path.exists(mark):
        os.remove(mark)
    steps = 6
    path = script(PRELUDE + f"""
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
fn grad_bk(m, v) {{
  r = dist.rank()
  if r == 2 {{ write_text("{mark}", "x"); t = clock(); while clock() - t < 120 {{ }} }}
  grad_fn(m, v * 3 + r)
}}
dist.push({{grad_fn: grad_fn, grad_bk: grad_bk}})
m = fresh()
ps = dist.parameter_server(m, optim.sgd(m, lr={LR}), backup=1)
ps.run(grad_bk, {steps})
print("R", json.format({{w: m.w.tolist(), b: m.b.tolist(), stats: ps.stats(), rounds: ps.rounds()}}))
dist.stop()
""", "psbkkill.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line, t = "", time.time()
    while not line.startswith("PIDS") and time.time() - t < 60:
        line = p.stderr.readline()
    pids = [int(x) for x in line.split()[1:]]
    while not os.path.exists(mark) and time.time() - t < 60:
        time.sleep(0.05)
    if len(pids) == 3:
        os.kill(pids[2], signal.SIGKILL)
    out, err = p.communicate(timeout=180)
    sanitizer_check(err)
    got = lines_with("R ", out)
    r = json.loads(got[0]) if got else {}
    st, rounds = r.get("stats", {}), r.get("rounds", [])
    why = None if p.returncode == 0 and got else f"rc={p.returncode} err={err[-600:]!r}"
    if why is None and not (st["lost"] == 1 and st["version"] == steps and st["applied"] == 2 * steps
                            and st["pushed"] == st["applied"] + st["dropped"] + st["unused"]):
        why = f"stats {st}"
    if why is None and any(sorted(x) != [0, 1] for x in rounds):
        why = f"rounds {rounds}: rank 2 never gave a gradient, every round needs ranks 0 and 1"
    if why is None:
        w, b = replay_rounds(rounds)
        if not (np.allclose(r["w"], w, rtol=1e-10, atol=1e-12) and np.allclose(r["b"], b, rtol=1e-10, atol=1e-12)):
            why = f"parameters {r['w']} differ from NumPy's {w.tolist()}"
    report(name, why is None, f"{why}; out={out[-400:]!r}")


@test
def test_bad_backup(name):
    rc, out, err = run("""
m = fresh()
r = try { dist.parameter_server(m, optim.sgd(m, lr=0.1), backup=-1) } catch e { print("E", e.name, e.message); nil }
r = try { dist.parameter_server(m, optim.sgd(m, lr=0.1), staleness=1, backup=1) } catch e { print("F", e.name, e.message); nil }
ps = dist.parameter_server(m, optim.sgd(m, lr=0.1), backup=3)
r = try { ps.run(grad_fn, 2) } catch e { print("G", e.name, e.message); nil }
r = try { ps.run(grad_fn, 2, ranks=[0, 1]) } catch e { print("H", e.name, e.message); nil }
print("V", ps.version)
dist.stop()
""")
    ok = (rc == 0 and "E TypeError dist.parameter_server: backup must be an integer >= 0, got -1" in out
          and "F ValueError dist.parameter_server: backup=1 runs synchronous rounds: staleness must be 0, got 1" in out
          and "G ValueError dist.parameter_server: backup=3 leaves no gradient to apply with 3 workers" in out
          and "H ValueError dist.parameter_server: backup=3 leaves no gradient to apply with 2 workers" in out and "V 0" in out)
    report(name, ok, f"rc={rc} out={out!r} err={err[-600:]!r}")


@test
def test_bad_staleness(name):
    rc, out, err = run("""
m = fresh()
r = try { dist.parameter_server(m, optim.sgd(m, lr=0.1), staleness=-1) } catch e { print("E", e.name, e.message); nil }
r = try { dist.parameter_server(m, optim.sgd(m, lr=0.1), staleness=1.5) } catch e { print("F", e.name, e.message); nil }
ps = dist.parameter_server(m, optim.sgd(m, lr=0.1))
r = try { ps.run(fn(m, v) error("bad batch {v}"), 3) } catch e { print("G", e.name, e.message); nil }
dist.stop()
""")
    ok = (rc == 0 and "E TypeError dist.parameter_server: staleness must be an integer >= 0, got -1" in out
          and "F TypeError" in out and "G Error bad batch 0" in out and "raised by the task on worker rank" in out)
    report(name, ok, f"rc={rc} out={out!r} err={err[-600:]!r}")


dutil.finish()
