#!/usr/bin/python3
"""test_emu_fused.py — the fused classifier (cross_entropy) and the fused
residual add + layer norm (add_layer_norm), on the CPU and on the emulated
CUDA device, against torch on fresh random data.

cross_entropy: f32/f64/f16/bf16 logits read as they are (under autocast and
without), a large odd class count (50,257) and the GPT-2 one (50,304) at small
N, ignore_index rows, every row ignored (nan loss, zero gradient, as torch),
label smoothing, non-contiguous logits ([N, C] transposed and [N, C, d]),
the loss and gradient dtypes, a bad target (CPU: an error at the call; CUDA:
reported at the next synchronisation, the loss and gradient unusable), and no
host wait inside cross_entropy and its backward (counted: a bad target is not
reported before the next synchronisation).  arange/linspace/eye made on the
device against NumPy.

Run by tools/run-tests.sh with the release build and (NABLA_ASAN=1) the ASan
build.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import TMPDIR, no_module, out  # noqa: E402
import emuutil  # noqa: E402

RNG = np.random.default_rng()
TORCH_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
N_CASE = [0]


def check(ok, name, why):
    out("PASS" if ok else "FAIL", name, "" if ok else why)


def npy(a, tag):
    p = os.path.join(TMPDIR, f"{tag}.npy")
    np.save(p, a)
    return p


def tagged(so):
    d = {}
    for line in so.splitlines():
        k, _, v = line.partition(" ")
        d.setdefault(k, v)
    return d


def rounded(a, dt):
    """a (f64) rounded to dtype dt and back: the values the op really sees"""
    return torch.tensor(a).to(TORCH_DT[dt]).to(torch.float64).numpy()


def torch_xent(x, t, ignore, eps):
    """torch's loss and gradient in f64 on the given (already rounded) logits"""
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tt = torch.tensor(t, dtype=torch.int64)
    if xt.ndim == 3:
        loss = torch.nn.functional.cross_entropy(xt, tt, ignore_index=ignore, label_smoothing=eps)
    else:
        loss = torch.nn.functional.cross_entropy(xt, tt, ignore_index=ignore, label_smoothing=eps)
    loss.backward()
    return loss.item(), xt.grad.numpy()


def run_xent(name, x, t, dt, dev, ignore=-100, eps=0.0, autocast=False, layout="plain"):
    """nabla's loss and gradient for logits x (f64, stored as dt) and targets t.
    layout: plain | transposed (x handed over as a transposed view) | 3d ([N, C, d])"""
    N_CASE[0] += 1
    tag = f"x{N_CASE[0]}"
    xin = x.T.copy() if layout == "transposed" else x
    px, pt = npy(xin, tag + "_x"), npy(t.astype(np.int64), tag + "_t")
    pl, pg = os.path.join(TMPDIR, tag + "_l.npy"), os.path.join(TMPDIR, tag + "_g.npy")
    mv = ".cuda()" if dev == "cuda" else ""
    view = "transpose(x0, 0, 1)" if layout == "transposed" else "x0"
    call = f'value_and_grad(fn(z) cross_entropy(z, t, ignore_index={ignore}, label_smoothing={eps}))(x)'
    if autocast:
        call = f'autocast("bf16") {{ {call} }}'
    code = (f'x0 = load_npy("{px}").to("{dt}"){mv}\nx = {view}\nt = load_npy("{pt}"){mv}\n'
            f'r = {call}\n'
            'print("DT", r[0].dtype, r[1].dtype, r[1].device)\n'
            f'save_npy("{pl}", r[0].to("f64").cpu())\nsave_npy("{pg}", r[1].to("f64").cpu())\n')
    rc, so, se = emuutil.nabla(code, timeout=600)
    if rc != 0 or not os.path.exists(pg):
        return None, f"rc {rc}: {so[-800:]} {se[-800:]}"
    return (tagged(so).get("DT", ""), float(np.load(pl)), np.load(pg)), ""


def xent_case(name, N, C, dt, dev, ignore_rows=0, eps=0.0, autocast=False, layout="plain", all_ignored=False, d=None):
    scale = 4.0
    shape = (N, C, d) if layout == "3d" else (N, C)
    x = RNG.standard_normal(shape) * scale
    tshape = (N, d) if layout == "3d" else (N,)
    t = RNG.integers(0, C, tshape)
    ignore = int(RNG.choice([-100, -1, int(C + RNG.integers(1, 9))]))
    flat = t.reshape(-1)
    if all_ignored:
        flat[:] = ignore
    elif ignore_rows:
        flat[RNG.choice(flat.size, ignore_rows, replace=False)] = ignore
    xr = rounded(x, dt)
    got, why = run_xent(name, x, t, dt, dev, ignore, eps, autocast, layout)
    want_l, want_g = torch_xent(xr, t, ignore, eps)
    full = f"emu.fused.xent.{name}.{dev}"
    if got is None:
        check(False, full, why)
        return
    dts, loss, grad = got
    want_loss_dt = "f32" if autocast and dt in ("f16", "bf16") else dt
    dt_ok = dts.split()[:2] == [want_loss_dt, dt] and dts.split()[2:3] == [dev]
    # tolerances: the loss accumulates in f32 on the GPU (f64 on the CPU), then
    # is stored in its dtype; the gradient is rounded once to the logits' dtype,
    # from the row's log-sum-exp saved in f32 for f32 logits: at lse ~ 11
    # (V = 50k) its ulp is ~1e-6, which exp(x - lse) carries as a relative
    # error, so f32 gradients are held to 1e-5 (1e-6 failed on fresh data)
    ltol = {"f64": 1e-12, "f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}[want_loss_dt]
    gtol = {"f64": 1e-12, "f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}[dt]
    if all_ignored:
        l_ok = np.isnan(loss) and np.isnan(want_l)
    else:
        l_ok = abs(loss - want_l) <= ltol * max(1.0, abs(want_l))
    gmax = np.abs(want_g).max() if want_g.size else 0
    g_ok = grad.shape == want_g.shape and np.allclose(grad, want_g, rtol=gtol, atol=gtol * max(gmax, 1e-30))
    check(dt_ok and l_ok and g_ok, full,
          f"dtypes {dts!r} (want {want_loss_dt} {dt} {dev}); loss {loss} vs torch {want_l}; "
          f"grad max err {np.abs(grad - want_g).max() if grad.shape == want_g.shape else grad.shape}")


def test_xent(dev):
    xent_case("f32_V50257_ignore", 3, 50257, "f32", dev, ignore_rows=1)
    xent_case("bf16_V50304_autocast", 2, 50304, "bf16", dev, ignore_rows=1, autocast=True)
    xent_case("bf16_odd_smoothing", 7, 1001, "bf16", dev, ignore_rows=2, eps=float(RNG.uniform(0.05, 0.3)))
    xent_case("f16_smoothing_autocast", 5, 336, "f16", dev, ignore_rows=1, eps=0.1, autocast=True)
    xent_case("f64_smoothing", 6, 98, "f64", dev, ignore_rows=1, eps=0.25)
    xent_case("f32_all_ignored", 4, 37, "f32", dev, all_ignored=True)
    xent_case("bf16_all_ignored", 3, 41, "bf16", dev, all_ignored=True)
    xent_case("f32_transposed", 9, 64, "f32", dev, ignore_rows=2, eps=0.05, layout="transposed")
    xent_case("bf16_3d", 3, 17, "bf16", dev, ignore_rows=2, layout="3d", d=5)


def test_bad_target():
    """CPU: the error at the call.  CUDA: the call and its backward return (no
    host wait), the error comes at the next synchronisation, and the loss and
    gradient are then unusable"""
    N, C = int(RNG.integers(2, 6)), int(RNG.integers(3, 40))
    x = RNG.standard_normal((N, C))
    t = RNG.integers(0, C, N)
    row, bad = int(RNG.integers(0, N)), int(C + RNG.integers(0, 9))
    t[row] = bad
    px, pt = npy(x, "bt_x"), npy(t.astype(np.int64), "bt_t")
    msg = f"cross_entropy: target {bad} (row {row}) is out of bounds for {C} classes"
    code = (f'x = load_npy("{px}").to("bf16")\nt = load_npy("{pt}")\n'
            'try { cross_entropy(x, t); print("CPU ok") } catch e { print("CPU err", e.message) }\n'
            'xc = x.cuda()\ntc = t.cuda()\ncuda.synchronize()\n'
            'try { r = value_and_grad(fn(z) cross_entropy(z, tc))(xc); print("CALL ok") } catch e { print("CALL err", e.message) }\n'
            'try { cuda.synchronize(); print("SYNC ok") } catch e { print("SYNC err", e.message) }\n'
            'try { print("LOSS ok", r[0].item()) } catch e { print("LOSS err", e.message) }\n'
            'try { print("GRAD ok", r[1].sum().item()) } catch e { print("GRAD err", e.message) }\n')
    rc, so, se = emuutil.nabla(code)
    d = tagged(so)
    unusable = "its values are unusable"
    ok = (d.get("CPU", "").startswith("err") and msg in d.get("CPU", "") and d.get("CALL") == "ok"
          and d.get("SYNC", "").startswith("err") and msg in d.get("SYNC", "")
          and all(d.get(k, "").startswith("err") and msg in d[k] and unusable in d[k] for k in ("LOSS", "GRAD")))
    check(rc == 0 and ok, "emu.fused.xent.bad_target", f"rc {rc}: {d} {se[-500:]}")


def test_creation():
    """arange / linspace / eye made on the device equal NumPy's"""
    n, m = int(RNG.integers(1, 9)), int(RNG.integers(1, 9))
    a0, st = float(RNG.integers(-5, 5)), float(RNG.choice([0.5, 1.0, 3.0, -2.0]))
    a1 = a0 + st * int(RNG.integers(1, 30))
    lo, hi, k = float(RNG.uniform(-3, 0)), float(RNG.uniform(1, 4)), int(RNG.integers(2, 40))
    code = (f'set_default_device("cuda")\n'
            f'a = arange({a0}, {a1}, {st})\nb = arange({int(a1)})\nl = linspace({lo}, {hi}, {k}, dtype="f64")\n'
            f'e = eye({n}, {m}, dtype="bf16")\nf = eye({n})\n'
            'print("DEV", a.device, b.device, l.device, e.device, f.device, b.dtype)\n'
            'print("A", a.tolist())\nprint("B", b.tolist())\nprint("L", l.tolist())\n'
            'print("E", e.float().tolist())\nprint("F", f.tolist())\n')
    rc, so, se = emuutil.nabla(code)
    d = tagged(so)
    try:
        got = {k: np.array(eval(d[k])) for k in "ABLEF"}
        ok = (d.get("DEV") == "cuda cuda cuda cuda cuda i64"
              and np.allclose(got["A"], np.arange(a0, a1, st).astype(np.float32), rtol=0, atol=0)
              and np.array_equal(got["B"], np.arange(int(a1)))
              and np.allclose(got["L"], np.linspace(lo, hi, k), rtol=1e-15, atol=1e-15) and got["L"][-1] == hi
              and np.array_equal(got["E"], np.eye(n, m)) and np.array_equal(got["F"], np.eye(n)))
    except (KeyError, SyntaxError, NameError, ValueError):
        ok = False
    check(rc == 0 and ok, "emu.fused.creation_on_device", f"rc {rc}: {so[-800:]} {se[-500:]}")


def run_aln(tag, x, r, w, b, G, H, dt, rdt, dev, eps, transposed=False, autocast=False, resid=True):
    """nabla: h = add_layer_norm(x, r, w, b, eps); loss = sum((h[0] + tanh(h[1]) G) H)
    (the residual gradient reaches the sum before the normalisation's backward
    runs, as in a transformer block: added in its kernel), or without the
    h[0] term (resid false: the sum gets only the normalisation's gradient);
    returns outputs and the four gradients"""
    xin = np.swapaxes(x, -1, -2).copy() if transposed else x
    paths = {k: npy(v, f"{tag}_{k}") for k, v in dict(x=xin, r=r, w=w, b=b, G=G, H=H).items()}
    res = {k: os.path.join(TMPDIR, f"{tag}_o{k}.npy") for k in ("s", "y", "gx", "gr", "gw", "gb")}
    mv = ".cuda()" if dev == "cuda" else ""
    view = "transpose(x0, -1, -2)" if transposed else "x0"
    body = f'h = add_layer_norm(x, r, w, b, {eps})\n  (({"h[0] + " if resid else ""}tanh(h[1]) * G) * H).sum()'
    if autocast:
        body = f'autocast("bf16") {{ {body} }}'
    code = (f'x0 = load_npy("{paths["x"]}").to("{dt}"){mv}\nx = {view}\nr = load_npy("{paths["r"]}").to("{rdt}"){mv}\n'
            f'w = load_npy("{paths["w"]}").float(){mv}\nb = load_npy("{paths["b"]}").float(){mv}\n'
            f'G = load_npy("{paths["G"]}"){mv}\nH = load_npy("{paths["H"]}"){mv}\n'
            f'fn f(x, r, w, b) {{\n  {body}\n}}\n'
            'v = value_and_grad(f, argnums=list(0, 1, 2, 3))(x, r, w, b)\n'
            f'h = no_grad {{ add_layer_norm(x, r, w, b, {eps}) }}\n'
            'print("DT", h[0].dtype, h[1].dtype, v[1][0].dtype, v[1][1].dtype, v[1][2].dtype, h[0].device)\n'
            f'save_npy("{res["s"]}", h[0].to("f64").cpu())\nsave_npy("{res["y"]}", h[1].to("f64").cpu())\n'
            + "".join(f'save_npy("{res[k]}", v[1][{i}].to("f64").cpu())\n' for i, k in enumerate(("gx", "gr", "gw", "gb"))))
    rc, so, se = emuutil.nabla(code, timeout=600)
    if rc != 0 or not os.path.exists(res["gb"]):
        return None, f"rc {rc}: {so[-800:]} {se[-800:]}"
    return (tagged(so).get("DT", ""), {k: np.load(v) for k, v in res.items()}), ""


def aln_case(name, shape, dt, rdt, dev, transposed=False, autocast=False, resid=True):
    eps = float(RNG.choice([1e-5, 1e-3]))
    D = shape[-1]
    x = RNG.standard_normal(shape) * 2 + 0.5
    r = RNG.standard_normal(shape)
    w, b = RNG.standard_normal(D), RNG.standard_normal(D)
    G, H = RNG.standard_normal(shape), RNG.standard_normal(shape)
    S = "f32" if {dt, rdt} == {"f32", "bf16"} or {dt, rdt} == {"f32", "f16"} else dt
    got, why = run_aln(f"aln{N_CASE[0]}", x, r, w, b, G, H, dt, rdt, dev, eps, transposed, autocast, resid)
    N_CASE[0] += 1
    full = f"emu.fused.add_layer_norm.{name}.{dev}"
    if got is None:
        check(False, full, why)
        return
    dts, o = got
    # torch in f64 on the values the op sees: x, r rounded to their dtypes, the sum rounded to S
    tx = torch.tensor(rounded(x, dt), requires_grad=True)
    tr = torch.tensor(rounded(r, rdt), requires_grad=True)
    tw = torch.tensor(rounded(w, "f32"), requires_grad=True)
    tb = torch.tensor(rounded(b, "f32"), requires_grad=True)
    sum_ = tx + tr
    s_r = sum_ + (sum_.detach().to(TORCH_DT[S]).double() - sum_.detach())   # rounded value, gradient of the sum
    y = torch.nn.functional.layer_norm(s_r, (D,), tw, tb, eps)
    loss = (((s_r if resid else 0) + torch.tanh(y) * torch.tensor(G)) * torch.tensor(H)).sum()
    loss.backward()
    want = dict(s=s_r.detach().numpy(), y=y.detach().numpy(), gx=tx.grad.numpy(), gr=tr.grad.numpy(),
                gw=tw.grad.numpy(), gb=tb.grad.numpy())
    tols = {"f64": 1e-10, "f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}
    out_dt = dict(s=S, y=S, gx=dt, gr=rdt, gw="f32", gb="f32")   # each result is rounded to its dtype
    errs = {}
    for k, v in want.items():
        g = o[k]
        tol = max(tols[S], tols[out_dt[k]])
        scale = max(np.abs(v).max(), 1.0)
        if g.shape != v.shape:
            errs[k] = f"shape {g.shape} vs {v.shape}"
        elif not np.allclose(g, v, rtol=tol, atol=tol * scale):
            errs[k] = float(np.abs(g - v).max() / scale)
    want_dts = [S, S, dt, rdt, "f32", dev]
    check(dts.split() == want_dts and not errs, full, f"dtypes {dts!r} (want {want_dts}); errors {errs}")


def test_add_layer_norm(dev):
    aln_case("f32_odd", (2, 3, 37), "f32", "f32", dev)
    aln_case("f64", (5, 19), "f64", "f64", dev)
    aln_case("bf16", (3, 4, 33), "bf16", "bf16", dev)
    aln_case("f16_rows_1", (1, 65), "f16", "f16", dev)
    aln_case("f32_no_residual_grad", (4, 40), "f32", "f32", dev, resid=False)
    aln_case("f32_plus_bf16_autocast", (2, 5, 24), "f32", "bf16", dev, autocast=True)
    aln_case("f32_transposed", (3, 7, 9), "f32", "f32", dev, transposed=True)
    aln_case("f32_wide", (3, 11, 300), "f32", "f32", dev)


def test_aln_errors():
    code = ('x = randn(2, 3)\n'
            'try { add_layer_norm(x, randn(3, 2)) } catch e { print("SHAPE", e.message) }\n'
            'try { add_layer_norm(x, randn(2, 3), randn(4)) } catch e { print("W", e.message) }\n'
            'try { add_layer_norm(x, tensor([[1, 2, 3], [4, 5, 6]])) } catch e { print("INT", e.message) }\n'
            'try { add_layer_norm(x, randn(2, 3).cuda()) } catch e { print("DEV", e.message) }\n')
    rc, so, se = emuutil.nabla(code)
    d = tagged(so)
    ok = ("x and r must have the same shape" in d.get("SHAPE", "") and "[2, 3]" in d.get("SHAPE", "")
          and "weight must have shape [3]" in d.get("W", "") and "floating" in d.get("INT", "")
          and "same device" in d.get("DEV", ""))
    check(rc == 0 and ok, "emu.fused.add_layer_norm.errors", f"rc {rc}: {d} {se[-300:]}")


def main():
    if no_module("emu_fused"):
        return 0
    torch.manual_seed(int(RNG.integers(0, 2**31)))
    only = os.environ.get("FUSED_ONLY", "")
    if only in ("", "xent"):
        for dev in ("cpu", "cuda"):
            test_xent(dev)
        test_bad_target()
    if only in ("", "create"):
        test_creation()
    if only in ("", "aln"):
        for dev in ("cpu", "cuda"):
            test_add_layer_norm(dev)
        test_aln_errors()
    return 1 if emuutil.n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
