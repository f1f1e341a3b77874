#!/usr/bin/python3
"""test_emu_poison.py — no silent garbage after a GPU data error, on the
emulated CUDA device (docs/cuda.md "Execution model and errors").

A kernel that finds a bad index (take, gather), an integer division by zero
or a bad cross-entropy target (cross_entropy does not synchronise) writes the device's error slot and leaves
garbage in its output; the error is reported once, at the next
synchronisation.  Every result written by the GPU work of that epoch (the
work since the previous synchronisation) must be refused afterwards — as an
op's input, on tolist/item/print — with an error naming the original one,
while results of earlier epochs, values copied up from the host, and
results computed after the report stay correct (checked against NumPy on
fresh random data).  An in-place write in the failed epoch makes its target
unusable; a partial write into an unusable tensor is refused, a full
overwrite makes it usable again.  The interpreter (script, REPL, Jupyter
kernel) goes on.

Run by tools/run-tests.sh with the release build and (NABLA_ASAN=1) the ASan
build.
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import ENV, NABLA, ROOT, TMPDIR, no_module, out  # noqa: E402
import emuutil  # noqa: E402

RNG = np.random.default_rng()
UNUSABLE = "this tensor was computed by the GPU work in which"


def check(ok, name, why):
    out("PASS" if ok else "FAIL", name, "" if ok else why)


def npy(a, tag):
    p = os.path.join(TMPDIR, f"{tag}.npy")
    np.save(p, a)
    return p


def tagged(so):
    """{tag: rest of line} for the script's 'TAG rest' lines"""
    d = {}
    for line in so.splitlines():
        k, _, v = line.partition(" ")
        d.setdefault(k, v)
    return d


def attempt(tag, expr):
    """nabla: print 'TAG ok <json>' or 'TAG err <message>'"""
    return f'try {{ print("{tag}", "ok", {expr}) }} catch e {{ print("{tag}", "err", e.message) }}\n'


def attempt_stmt(tag, stmt):
    """nabla: run a statement; print 'TAG ok done' or 'TAG err <message>'"""
    return f'try {{\n{stmt}\nprint("{tag}", "ok", "done")\n}} catch e {{ print("{tag}", "err", e.message) }}\n'


def is_err(v, *needles):
    return v is not None and v.startswith("err ") and UNUSABLE in v and "unusable (recompute it)" in v and all(n in v for n in needles)


def is_vals(v, want, tol=1e-6):
    if v is None or not v.startswith("ok "):
        return False
    try:
        got = np.array(json.loads(v[3:]), dtype=np.float64)
    except ValueError:
        return False
    return got.shape == np.shape(want) and np.allclose(got, want, rtol=tol, atol=tol)


def test_take():
    """y = take(x, idx) with one bad index; z derived from y before the sync"""
    n = int(RNG.integers(5, 12))
    x = RNG.standard_normal(n)
    idx = RNG.integers(0, n, int(RNG.integers(3, 8)))
    k = int(RNG.integers(0, len(idx)))
    bad = int(n + RNG.integers(0, 50))
    idx_bad = idx.copy()
    idx_bad[k] = bad
    good = RNG.integers(0, n, 4)
    px, pi, pg = npy(x, "take_x"), npy(idx_bad.astype(np.int64), "take_i"), npy(good.astype(np.int64), "take_g")
    msg = f"take: index {bad} is out of bounds for axis 0 with size {n}"
    code = (f'x = load_npy("{px}").cuda()\nib = load_npy("{pi}").cuda()\nig = load_npy("{pg}").cuda()\n'
            'pre = sin(x) * 3\ncuda.synchronize()\n'          # an earlier epoch: stays usable
            'y = take(x, ib)\nz = y * 2 + 1\nzs = z.sum()\n'
            'print("PRINT_Y", y)\n'                            # the synchronisation that reports it
            + attempt("Y_TOLIST", "y.tolist()") + attempt("Z_TOLIST", "z.tolist()")
            + attempt("ZS_ITEM", "zs.item()") + attempt("Z_ADD", "(z + 1).tolist()")
            + attempt("Z_SUM_ITEM", "z.sum().item()") + 'print("PRINT_Z", z)\n'
            + attempt_stmt("Z_SAVE", f'save_npy("{os.path.join(TMPDIR, "z.npy")}", z)')
            + attempt("Z_SER", "len(serialize(z))") + attempt("Z_CPU", "z.cpu().tolist()")
            + attempt("PRE", "pre.tolist()") + attempt("X", "x.tolist()")
            + 'post = take(x, ig) * 2\n' + attempt("POST", "post.tolist()")
            + 'print("alive")\n')
    rc, so, se = emuutil.nabla(code)
    t = tagged(so)
    pz = t.get("PRINT_Z", "")
    checks = {
        "print_reports": msg in t.get("PRINT_Y", ""),
        "y_tolist": is_err(t.get("Y_TOLIST"), "reading the values", msg),
        "z_tolist": is_err(t.get("Z_TOLIST"), msg),
        "zs_item": is_err(t.get("ZS_ITEM"), msg),
        "z_as_op_input": is_err(t.get("Z_ADD"), "add: ", msg),
        "z_sum_item": is_err(t.get("Z_SUM_ITEM"), "sum: ", msg),
        "print_z": UNUSABLE in pz and msg in pz,
        "save_npy": is_err(t.get("Z_SAVE"), msg) and not os.path.exists(os.path.join(TMPDIR, "z.npy")),
        "serialize": is_err(t.get("Z_SER"), msg),
        "cpu": is_err(t.get("Z_CPU"), msg),
        "pre": is_vals(t.get("PRE"), np.sin(x) * 3),
        "x": is_vals(t.get("X"), x, 0),
        "post": is_vals(t.get("POST"), x[good] * 2),
        "alive": so.splitlines()[-1:] == ["alive"],
    }
    bad_checks = [k for k, v in checks.items() if not v]
    check(rc == 0 and not bad_checks, "emu.poison.take_index", f"rc {rc}: failed {bad_checks}: {so[-1500:]} {se[-400:]}")


def test_gather_inplace():
    """gather's axis error; an in-place write in the failed epoch; writes into
    an unusable tensor (partial: refused; full: usable again)"""
    r, c = int(RNG.integers(2, 6)), int(RNG.integers(3, 7))
    x = RNG.standard_normal((r, c))
    w = RNG.standard_normal(c)
    v = RNG.standard_normal((r, c))
    ix = RNG.integers(0, c, (r, 2))
    bad = int(c + RNG.integers(0, 20))
    ix[int(RNG.integers(0, r)), int(RNG.integers(0, 2))] = bad
    px, pw, pv, pi = npy(x, "g_x"), npy(w, "g_w"), npy(v, "g_v"), npy(ix.astype(np.int64), "g_i")
    msg = f"gather: index {bad} is out of bounds for axis 1 with size {c}"
    code = (f'x = load_npy("{px}").cuda()\nw = load_npy("{pw}").cuda()\nv = load_npy("{pv}").cuda()\n'
            f'ib = load_npy("{pi}").cuda()\n'
            'acc = exp(w)\ncuda.synchronize()\n'               # usable before the failed epoch
            'g = gather(x, 1, ib)\nacc[0] = 5.0\n'             # written in the failed epoch
            + attempt_stmt("SYNC", "cuda.synchronize()")
            + attempt("G", "g.tolist()") + attempt("ACC", "acc.tolist()")
            + attempt_stmt("G_PART", "g[0] = 1.0")                  # partial write into an unusable tensor
            + attempt("G_PART_READ", "g.tolist()")
            + 'g2 = x.clone()\ncuda.synchronize()\n'
            + 'g2[:, :] = v\n' + attempt("G2", "g2.tolist()")  # full overwrite of a usable one
            + 'acc[:] = w\n' + attempt("ACC_FULL", "acc.tolist()")   # full overwrite: usable again
            + 'print("alive")\n')
    rc, so, se = emuutil.nabla(code)
    t = tagged(so)
    checks = {
        "sync_reports": (t.get("SYNC") or "").startswith("err ") and msg in t.get("SYNC", ""),
        "gather_out": is_err(t.get("G"), msg),
        "inplace_target": is_err(t.get("ACC"), msg),
        "partial_write_refused": is_err(t.get("G_PART"), "writing into part of it", msg),
        "still_unusable": is_err(t.get("G_PART_READ"), msg),
        "full_overwrite_clean": is_vals(t.get("G2"), v, 0),
        "full_overwrite_of_unusable": is_vals(t.get("ACC_FULL"), w, 0),
        "alive": so.splitlines()[-1:] == ["alive"],
    }
    bad_checks = [k for k, v in checks.items() if not v]
    check(rc == 0 and not bad_checks, "emu.poison.gather_axis_and_inplace", f"rc {rc}: failed {bad_checks}: {so[-1500:]} {se[-400:]}")


def test_zerodiv():
    """integer division by zero (DEVERR_ZERODIV): c = a // b, d = c + 1"""
    n = int(RNG.integers(4, 10))
    a = RNG.integers(-100, 100, n).astype(np.int64)
    b = RNG.integers(1, 9, n).astype(np.int64) * RNG.choice([-1, 1], n)
    b[int(RNG.integers(0, n))] = 0
    bg = np.where(b == 0, 3, b)
    pa, pb, pg = npy(a, "z_a"), npy(b, "z_b"), npy(bg, "z_g")
    msg = "floordiv: integer division by zero"
    code = (f'a = load_npy("{pa}").cuda()\nb = load_npy("{pb}").cuda()\nbg = load_npy("{pg}").cuda()\n'
            'c = a // b\nd = c + 1\n' + attempt("FIRST", "d.tolist()")
            + attempt("C", "c.tolist()") + attempt("D", "d.tolist()") + attempt("D_MUL", "(d * 2).tolist()")
            + 'e = a // bg\n' + attempt("E", "e.tolist()") + 'print("alive")\n')
    rc, so, se = emuutil.nabla(code)
    t = tagged(so)
    checks = {
        "reported": (t.get("FIRST") or "").startswith("err ") and msg in t.get("FIRST", "") and UNUSABLE not in t.get("FIRST", ""),
        "c": is_err(t.get("C"), msg),
        "d": is_err(t.get("D"), msg),
        "d_as_input": is_err(t.get("D_MUL"), "mul: ", msg),
        "after": is_vals(t.get("E"), np.floor_divide(a, bg), 0),
        "alive": so.splitlines()[-1:] == ["alive"],
    }
    bad_checks = [k for k, v in checks.items() if not v]
    check(rc == 0 and not bad_checks, "emu.poison.zerodiv", f"rc {rc}: failed {bad_checks}: {so[-1500:]} {se[-400:]}")


def test_target():
    """a bad cross-entropy target (DEVERR_TARGET): cross_entropy does not wait
    for the device (its count stays there), so the call and its backward
    return, and the error is reported at the next synchronisation like any
    data error; then the loss, the gradient and every other result of that
    epoch are unusable; the logits (copied up from the host) and later
    results are right"""
    rows, C = int(RNG.integers(2, 6)), int(RNG.integers(3, 8))
    lg = RNG.standard_normal((rows, C))
    h = RNG.standard_normal(rows)
    tg = RNG.integers(0, C, rows)
    row = int(RNG.integers(0, rows))
    bad = int(C + RNG.integers(0, 30))
    tb = tg.copy()
    tb[row] = bad
    pl, ph, pt, pb = npy(lg, "t_l"), npy(h, "t_h"), npy(tg.astype(np.int64), "t_t"), npy(tb.astype(np.int64), "t_b")
    msg = f"cross_entropy: target {bad} (row {row}) is out of bounds for {C} classes"
    code = (f'hh = load_npy("{ph}").cuda()\nlg = load_npy("{pl}").cuda()\n'
            f'tb = load_npy("{pb}").cuda()\ntg = load_npy("{pt}").cuda()\n'
            'cuda.synchronize()\nh2 = tanh(hh) * 2\n'
            + attempt_stmt("CALL", "l = cross_entropy(lg, tb)\nr = value_and_grad(fn(z) cross_entropy(z, tb))(lg)")
            + attempt("CE", "l.item()")                       # the synchronisation that reports it
            + attempt("L", "l.item()") + attempt("V", "r[0].item()") + attempt("GRAD", "r[1].tolist()")
            + attempt("H2", "h2.tolist()") + attempt("LG", "(lg * 1).tolist()")
            + attempt("CE_OK", "cross_entropy(lg, tg).item()") + 'print("alive")\n')
    rc, so, se = emuutil.nabla(code)
    t = tagged(so)
    m = lg.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(lg - m).sum(axis=1, keepdims=True)))[:, 0]
    want = float(np.mean(lse - lg[np.arange(rows), tg]))
    checks = {
        "no_wait_at_the_call": t.get("CALL") == "ok done",
        "reported": (t.get("CE") or "").startswith("err ") and msg in t.get("CE", "") and UNUSABLE not in t.get("CE", ""),
        "loss": is_err(t.get("L"), msg),
        "value": is_err(t.get("V"), msg),
        "grad": is_err(t.get("GRAD"), msg),
        "same_epoch": is_err(t.get("H2"), msg),
        "logits": is_vals(t.get("LG"), lg, 0),
        "after": is_vals(t.get("CE_OK"), want, 1e-9),
        "alive": so.splitlines()[-1:] == ["alive"],
    }
    bad_checks = [k for k, v in checks.items() if not v]
    check(rc == 0 and not bad_checks, "emu.poison.cross_entropy_target", f"rc {rc}: failed {bad_checks}: {so[-1500:]} {se[-400:]}")


def test_repl():
    """the REPL goes on after the error and refuses the failed epoch's result"""
    n = int(RNG.integers(4, 9))
    x = RNG.standard_normal(n)
    px = npy(x, "r_x")
    bad = int(n + RNG.integers(0, 9))
    lines = [f'x = load_npy("{px}").cuda()', f'y = take(x, [0, {bad}].cuda()) * 2', 'y.tolist()', 'y.tolist()',
             'print("VALS", (x * 4).tolist())', 'print("END")']
    try:
        p = subprocess.run([NABLA], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT)
        rc, so, se = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, so, se = -999, "", "timeout"
    both = so + se
    vals = next((l.split("VALS ", 1)[1] for l in so.splitlines() if "VALS " in l), None)
    ok = (f"take: index {bad} is out of bounds for axis 0 with size {n}" in both and UNUSABLE in both
          and vals is not None and np.allclose(json.loads(vals), x * 4, rtol=0, atol=0) and "END" in so)
    check(ok, "emu.poison.repl_goes_on", f"rc {rc}: {so[-1200:]} {se[-600:]}")


def test_kernel():
    """the Jupyter kernel goes on: the cell that synchronises reports the
    error, a later cell refuses the failed epoch's result, another computes
    right values"""
    n = int(RNG.integers(4, 9))
    x = RNG.standard_normal(n)
    px = npy(x, "k_x")
    bad = int(n + RNG.integers(0, 9))
    cells = [f'x = load_npy("{px}").cuda()\ny = take(x, [{bad}, 0].cuda()) * 2\ny.tolist()', "y.tolist()",
             "print((x * 3).tolist())"]
    try:
        texts = ["".join(c.get("text", "") if t == "stream" else
                         "ERROR " + c.get("evalue", "") + " " + " ".join(c.get("traceback", [])) if t == "error" else ""
                         for t, c in m) for m in emuutil.kernel_cells(cells)]
    except Exception as e:  # noqa
        texts = [f"exception {e!r}"]
    msg = f"take: index {bad} is out of bounds for axis 0 with size {n}"
    try:
        vals = np.array(json.loads(texts[2].strip()))
        vals_ok = vals.shape == x.shape and np.allclose(vals, x * 3, rtol=0, atol=0)
    except Exception:  # noqa
        vals_ok = False
    ok = (len(texts) == 3 and "ERROR" in texts[0] and msg in texts[0] and "ERROR" in texts[1] and UNUSABLE in texts[1]
          and msg in texts[1] and vals_ok)
    check(ok, "emu.poison.kernel_goes_on", f"cells: {[t[:400] for t in texts]}")


def test_collectives():
    """all_reduce, broadcast (from its source) and send of a tensor whose GPU
    work failed are refused before any byte moves, a DistError in the
    session; a clean all_reduce then still sums right (2 workers, ring,
    emulated)"""
    n = int(RNG.integers(4, 9))
    bad = int(n + RNG.integers(0, 40))
    v = float(RNG.integers(1, 9))
    # each collective in its own command: a refusal on one rank breaks the
    # group for the other (which waits in it), and the session reconnects it
    # before the next command
    mk = (f'x = full([{n}], {v}).cuda()\n  y = take(x, tensor([0, {bad}]).cuda())\n'
          '  try { cuda.synchronize() } catch e { }\n')
    # uncaught on the worker, as a training script would: the session raises
    # DistError naming the rank and interrupts the other rank (waiting in the
    # collective); the group is reconnected before the next command
    code = ('import dist\ndist.start(2, backend="ring")\n'
            f'a = try {{ dist.run(fn() {{\n  {mk}  all_reduce(y)\n}}) }} catch e {{ e.message }}\n'
            f'b = try {{ dist.run(fn() {{\n  {mk}  broadcast(y, src=0)\n}}) }} catch e {{ e.message }}\n'
            f'c = try {{ dist.run(fn() {{\n  {mk}  if dist.rank() == 0 {{ send(y, 1) }} else {{ recv(0) }}\n}}) }} catch e {{ e.message }}\n'
            # rank 1 stops (interrupted in recv) before any wait reports its
            # bad index: the error must not surface in the next command
            f'd = try {{ dist.run(fn() {{\n  x = full([{n}], {v}).cuda()\n  y = take(x, tensor([0, {bad}]).cuda())\n'
            '  if dist.rank() == 0 { error("rank 0 stops") } else { recv(0) }\n}) } catch e { e.message }\n'
            f'ok = dist.run(fn() all_reduce(full([{n}], {v}).cuda()).tolist())\n'
            'print("A0", a)\nprint("B0", b)\nprint("C0", c)\nprint("D0", d)\nprint("S0", ok[0])\nprint("S1", ok[1])\ndist.stop()\n')
    rc, so, se = emuutil.nabla(code, timeout=300)
    msg = f"take: index {bad} is out of bounds for axis 0 with size {n}"
    t = {l[:2]: l[3:] for l in so.splitlines() if l[:2] in ("A0", "B0", "C0", "D0", "S0", "S1")}
    want = [2 * v] * n
    try:
        sums_ok = all(np.allclose(eval(t[k]), want) for k in ("S0", "S1"))
    except (KeyError, SyntaxError, TypeError):
        sums_ok = False
    ok = (rc == 0 and all(k in t and msg in t[k] and "unusable" in t[k] for k in ("A0", "B0", "C0"))
          and "DistError: all_reduce: " in t["A0"] and "DistError: broadcast: " in t["B0"] and "DistError: send: " in t["C0"] and "rank 0 stops" in t.get("D0", "") and sums_ok)
    check(ok, "emu.poison.collectives", f"rc {rc}: {t}: {so[-800:]} {se[-600:]}")


def main():
    if no_module("emu_poison"):
        return 0
    test_take()
    test_gather_inplace()
    test_zerodiv()
    test_target()
    test_repl()
    test_kernel()
    test_collectives()
    return 1 if emuutil.n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
