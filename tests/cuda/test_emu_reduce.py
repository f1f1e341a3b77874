#!/usr/bin/python3
"""test_emu_reduce.py — cuda/reduce.cu on the emulated device against NumPy,
on fresh random inputs: every reduction op (sum prod max min argmax argmin
any all) and both launch shapes — rows (last-axis and full reductions: 16-byte
loads with an unaligned head and a tail, rows split over gridDim.y with a
second pass) and 2-D column tiles (sums over leading axes, the bias-gradient
shape, with and without vector loads, rows split over gridDim.y) — in f32,
f64, f16, bf16 and integers, on odd shapes, non-contiguous views (transposed,
stepped, offset so rows start unaligned), NaN and ties, and empty axes.

The emulated device has 2 SMs (emuutil), so the plans split rows and columns
at these small sizes as they do at GPT-2's on 132.  Each case: the input (as
the device saw it, cast back to f64 on the CPU) and the device's result are
saved by one nabla process; NumPy computes the reference in f64.  Runs again
under ASan (NABLA_ASAN=1, emuutil)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import TMPDIR, nabla, out  # noqa: E402
import emuutil  # noqa: E402

rng = np.random.default_rng()

# (name, shape, dtype, view, op, axes): view is nabla code over `x`; axes nil = all
CASES = []
for dt in ["f32", "f64", "f16", "bf16"]:
    CASES += [
        (f"cols_vec_{dt}", [6, 40, 96], dt, "x", "sum", "[0, 1]"),          # bias-grad shape, 16-byte loads
        (f"cols_odd_{dt}", [8, 33, 77], dt, "x", "sum", "[0, 1]"),          # 77 columns: element by element
        (f"cols_axis0_{dt}", [2000, 24], dt, "x", "sum", "0"),               # many rows: split over gridDim.y
        (f"rows_{dt}", [37, 1003], dt, "x", "sum", "1"),                     # odd row length: head/body/tail
        (f"rows_offset_{dt}", [37, 1003], dt, "x[1:, 3:]", "sum", "1"),     # unaligned row starts
        (f"full_{dt}", [301, 997], dt, "x", "sum", "nil"),                   # split full reduction
        (f"transposed_{dt}", [45, 130], dt, "x.T", "sum", "0"),              # kept dim strided
        (f"stepped_{dt}", [50, 130], dt, "x[:, ::3]", "sum", "1"),           # reduced dim strided, few outputs
        (f"mean_{dt}", [9, 17, 40], dt, "x", "mean", "[0, 2]"),
        (f"max_cols_{dt}", [300, 70], dt, "x", "max", "0"),
        (f"min_rows_{dt}", [33, 515], dt, "x", "min", "1"),
        (f"argmax_cols_{dt}", [300, 70], dt, "x", "argmax", "0"),
        (f"argmin_rows_{dt}", [33, 515], dt, "x", "argmin", "1"),
        (f"argmax_ties_{dt}", [257, 33], dt, "floor(x * 2)", "argmax", "0"),   # ties: lowest index
        (f"argmin_ties_{dt}", [33, 1030], dt, "floor(x * 2)", "argmin", "1"),
        (f"prod_{dt}", [40, 61], dt, "1 + x * 0.05", "prod", "0"),
        (f"prod_rows_{dt}", [5, 600], dt, "1 + x * 0.02", "prod", "1"),
        (f"any_{dt}", [300, 70], dt, "x > 2.5", "any", "0"),
        (f"all_{dt}", [33, 515], dt, "x > -2.5", "all", "1"),
        (f"any_full_{dt}", [300, 70], dt, "x > 3.6", "any", "nil"),
    ]
for dt in ["i32", "i64"]:
    CASES += [
        (f"int_sum_cols_{dt}", [130, 44], dt, "x", "sum", "0"),
        (f"int_sum_rows_{dt}", [13, 1001], dt, "x", "sum", "1"),
        (f"int_max_{dt}", [130, 44], dt, "x", "max", "0"),
        (f"int_argmin_{dt}", [13, 1001], dt, "x", "argmin", "1"),
        (f"int_full_{dt}", [300, 333], dt, "x", "sum", "nil"),
    ]
# NaN: max/min propagate it, argmax/argmin point at the first NaN
CASES += [
    ("nan_max_cols", [200, 40], "f32", "x", "max", "0"),
    ("nan_argmax_rows", [20, 700], "f32", "x", "argmax", "1"),
    ("nan_min_full", [100, 300], "f32", "x", "min", "nil"),
    ("nan_argmin_cols", [200, 40], "f64", "x", "argmin", "0"),
]
EMPTY = [  # (name, shape, op, axes): NumPy's identity
    ("empty_sum_rows", [0, 5], "sum", "0"),
    ("empty_sum_cols", [4, 0], "sum", "1"),
    ("empty_prod", [3, 0], "prod", "1"),
    ("empty_any", [0, 6], "any", "0"),
    ("empty_all", [0, 6], "all", "0"),
    ("empty_sum_full", [0, 7], "sum", "nil"),
]


def main():
    lines = []
    refs = []
    for i, (name, shape, dt, view, op, axes) in enumerate(CASES):
        if dt.startswith("i"):
            a = rng.integers(-50, 50, size=shape).astype(np.int64)
        else:
            a = rng.standard_normal(shape)
            if name.startswith("nan_"):
                flat = a.reshape(-1)
                flat[rng.choice(flat.size, size=flat.size // 50, replace=False)] = np.nan
        np.save(os.path.join(TMPDIR, f"in{i}.npy"), a)
        axes_arg = "" if axes == "nil" else f", {axes}"
        lines.append(f'x = load_npy("{TMPDIR}/in{i}.npy").to("{dt}")\n'
                     f'v = {view}\n'
                     f'save_npy("{TMPDIR}/v{i}.npy", v.to("f64"))\n'
                     f'r = {op}(v.cuda(){axes_arg})\n'
                     f'save_npy("{TMPDIR}/out{i}.npy", r.cpu().to("f64"))\n')
        refs.append((i, name, dt, op, axes))
    for j, (name, shape, op, axes) in enumerate(EMPTY):
        k = len(CASES) + j
        axes_arg = "" if axes == "nil" else f", {axes}"
        cmp = " > 0" if op in ("any", "all") else ""
        lines.append(f'v = zeros({shape}, device="cuda"){cmp}\n'
                     f'save_npy("{TMPDIR}/v{k}.npy", v.cpu().to("f64"))\n'
                     f'save_npy("{TMPDIR}/out{k}.npy", {op}(v{axes_arg}).cpu().to("f64"))\n')
        refs.append((k, name, "f32", op, axes))
    rc, so, se = nabla("".join(lines), timeout=600)
    if rc != 0:
        out("FAIL", "reduce_cases_ran", f"rc={rc}: {se[-1500:]}")
        return
    for k, name, dt, op, axes in refs:
        try:
            v = np.load(os.path.join(TMPDIR, f"v{k}.npy"))
            got = np.load(os.path.join(TMPDIR, f"out{k}.npy"))
        except OSError as e:
            out("FAIL", f"reduce.{name}", f"no result: {e}")
            continue
        ax = None if axes == "nil" else (tuple(int(t) for t in axes.strip("[]").split(",")) if "," in axes else int(axes))
        if op in ("argmax", "argmin"):
            # first NaN wins, then the extreme value, ties -> lowest index (NumPy's rule too)
            want = getattr(np, op)(v, axis=ax)
        elif op in ("max", "min"):
            want = getattr(np, op)(v, axis=ax)   # NaN propagates
        elif op in ("any", "all"):
            want = getattr(np, op)(v != 0, axis=ax).astype(np.float64)
        else:
            want = getattr(np, op)(v, axis=ax)
        want = np.asarray(want, dtype=np.float64)
        if got.shape != want.shape:
            out("FAIL", f"reduce.{name}", f"shape {got.shape}, want {want.shape}")
            continue
        if op in ("argmax", "argmin", "any", "all", "max", "min") or dt.startswith("i"):
            ok = np.array_equal(got, want, equal_nan=True)
            if op in ("max", "min") and dt in ("f16", "bf16"):   # stored in the half type: exact too (a selection)
                ok = np.array_equal(got, want, equal_nan=True)
            err = "" if ok else f"{np.sum(got != want)} of {want.size} differ; got {got.ravel()[:6]}, want {want.ravel()[:6]}"
        else:
            # f32 accumulation (f64 for f64), result stored in dt
            n = max(1, v.size // max(1, want.size))
            store = {"f32": 2 ** -23, "f64": 2 ** -52, "f16": 2 ** -10, "bf16": 2 ** -7}[dt]
            acc = 2 ** -52 if dt == "f64" else 2 ** -23
            scale = np.abs(v).sum(axis=ax) if op in ("sum", "mean") else np.abs(want)
            if op == "mean":
                scale = scale / n
            tol = store * np.abs(want) * 2 + acc * np.sqrt(n) * 8 * np.asarray(scale) + 1e-300
            if op == "prod":
                tol = np.abs(want) * (store * 2 + acc * n * 4)
            ok = bool(np.all(np.abs(got - want) <= tol))
            err = "" if ok else f"max |err| {np.max(np.abs(got - want)):.3g} over tolerance (max tol {np.max(tol):.3g})"
        out("PASS" if ok else "FAIL", f"reduce.{name}", err)


if __name__ == "__main__":
    main()
    sys.exit(1 if emuutil.n_fail else 0)
