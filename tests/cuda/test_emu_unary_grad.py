#!/usr/bin/python3
"""test_emu_unary_grad.py — the one-pass backward of tanh, sigmoid, silu,
gelu and gelu_tanh on CUDA (op "unary_grad", cuda/elementwise.cu), on the
emulated device against torch, on fresh random inputs: values and gradients
in f32, f64, f16 and bf16, odd sizes (the vector body and the tail),
a non-contiguous input (the composed backward then), and a count: the
backward of gelu is ONE GPU operation (it was 11 elementwise ops).
Runs again under ASan (NABLA_ASAN=1, emuutil)."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import TMPDIR, nabla, out  # noqa: E402
import emuutil  # noqa: E402

rng = np.random.default_rng()
ACTS = {  # nabla code, torch function
    "tanh": ("tanh(t)", torch.tanh),
    "sigmoid": ("sigmoid(t)", torch.sigmoid),
    "silu": ("silu(t)", torch.nn.functional.silu),
    "gelu": ("gelu(t)", lambda t: torch.nn.functional.gelu(t)),
    "gelu_tanh": ('gelu(t, approximate="tanh")', lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
}
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f32": 2e-6, "f64": 1e-13, "f16": 2e-3, "bf16": 1.6e-2}   # relative to max(1, |value|)


def main():
    lines, cases = [], []
    for act, (code, _) in ACTS.items():
        for dt in DTYPES:
            for view in ("t", "t[:, ::2]"):
                k = len(cases)
                shape = (7, 1031) if view == "t" else (6, 130)
                x = rng.standard_normal(shape) * 3
                g = rng.standard_normal(shape if view == "t" else (6, 65))
                np.save(f"{TMPDIR}/x{k}.npy", x)
                np.save(f"{TMPDIR}/g{k}.npy", g)
                lines.append(
                    f'x = load_npy("{TMPDIR}/x{k}.npy").to("{dt}").cuda()\n'
                    f'g = load_npy("{TMPDIR}/g{k}.npy").to("{dt}").cuda()\n'
                    f'fn f(t) {{ t = {view}\n sum({code} * g) }}\n'
                    f'save_npy("{TMPDIR}/xs{k}.npy", x.cpu().to("f64"))\n'
                    f'save_npy("{TMPDIR}/gs{k}.npy", g.cpu().to("f64"))\n'
                    f'save_npy("{TMPDIR}/y{k}.npy", (fn(t) {code})({view.replace("t", "x", 1)}).cpu().to("f64"))\n'
                    f'save_npy("{TMPDIR}/dx{k}.npy", grad(f)(x).cpu().to("f64"))\n')
                cases.append((k, act, dt, view))
    rc, so, se = nabla("".join(lines), timeout=600)
    if rc != 0:
        out("FAIL", "unary_grad_cases_ran", f"rc={rc}: {se[-1500:]}")
        return
    for k, act, dt, view in cases:
        name = f"unary_grad.{act}.{dt}" + (".strided" if view != "t" else "")
        x = np.load(f"{TMPDIR}/xs{k}.npy")
        g = np.load(f"{TMPDIR}/gs{k}.npy")
        # torch in f64 on the values the device saw, rounded to dt where torch's dt kernel would
        tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        tv = tx[:, ::2] if view != "t" else tx
        ty = ACTS[act][1](tv)
        (ty * torch.tensor(g)).sum().backward()
        want_y = ty.detach().numpy()
        want_dx = tx.grad.numpy()
        got_y = np.load(f"{TMPDIR}/y{k}.npy")
        got_dx = np.load(f"{TMPDIR}/dx{k}.npy")
        tol = TOL[dt]
        ey = np.max(np.abs(got_y - want_y) / np.maximum(1, np.abs(want_y)))
        # the gradient: g and the saved y or x are rounded to dt (tanh's
        # 1 - y^2 from a bf16 y: ~1e-2 relative)
        edx = np.max(np.abs(got_dx - want_dx) / np.maximum(1, np.abs(want_dx)))
        # composed in the half type (strided: no fused kernel) rounds each step
        bound = tol * (1.5 if view == "t" else 3)
        if got_y.shape != want_y.shape or got_dx.shape != want_dx.shape:
            out("FAIL", name, f"shapes {got_y.shape} {got_dx.shape}")
        elif ey > tol * 2 or edx > bound:
            out("FAIL", name, f"value err {ey:.3g} (tol {tol * 2:.3g}), grad err {edx:.3g} (tol {bound:.3g})")
        else:
            out("PASS", name)
            if os.environ.get("UG_DEBUG"): print(f"# {name} ey={ey:.3g} edx={edx:.3g}")
    count_ops()


def count_ops():
    """gelu's backward on CUDA is one GPU operation: the ops between the
    forward and the gradient, counted by cuda.stats()."""
    code = ('x = randn(64, 96, device="cuda").to("bf16")\n'
            'g = randn(64, 96, device="cuda").to("bf16")\n'
            'fn f(t) sum(gelu(t, approximate="tanh") * g)\n'
            'grad(f)(x)\n'
            'cuda.synchronize()\n'
            'cuda.reset_stats()\n'
            'grad(f)(x)\n'
            'a = cuda.stats().by_op\n'
            'fn f2(t) sum(t * g)\n'
            'grad(f2)(x)\n'
            'cuda.synchronize()\n'
            'cuda.reset_stats()\n'
            'grad(f2)(x)\n'
            'b = cuda.stats().by_op\n'
            'print("with_gelu", a)\n'
            'print("without", b)\n'
            'print("unary_grad", if has(a, "unary_grad") { a.unary_grad } else { 0 })\n'
            'total = fn(r) { s = 0\n for k in keys(r) { s = s + r[k] }\n s }\n'
            'print("extra", total(a) - total(b))\n')
    rc, so, se = nabla(code, timeout=300)
    if rc != 0:
        out("FAIL", "unary_grad.gelu_backward_is_one_op", f"rc={rc}: {se[-800:]}")
        return
    vals = dict(l.split(" ", 1) for l in so.splitlines() if " " in l)
    extra = int(vals.get("extra", "-1"))
    fused = int(vals.get("unary_grad", "0"))
    # gelu adds its forward (1) and its backward (1) to the same program without it
    if fused == 1 and extra == 2:
        out("PASS", "unary_grad.gelu_backward_is_one_op")
    else:
        out("FAIL", "unary_grad.gelu_backward_is_one_op", f"unary_grad ops {fused}, extra GPU ops for gelu {extra} (want 1 and 2): {so[-600:]}")


if __name__ == "__main__":
    main()
    sys.exit(1 if emuutil.n_fail else 0)
