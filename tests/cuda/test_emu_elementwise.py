#!/usr/bin/python3
"""test_emu_elementwise.py — cuda/elementwise.cu's index math and casts on the
emulated device against NumPy, on fresh random inputs:
  * strided binary, unary, copy, where and fill on permuted, stepped,
    offset and broadcast views of odd shapes (up to 5 dims that do not
    coalesce): the 32-bit path's magic-number division (plan.h ncp_div32)
    maps every index to the right element;
  * casts between f32, f64, f16 and bf16: contiguous (the 16-byte vector
    path, odd lengths for the tail, offset views for unaligned pointers)
    and strided; bf16/f16 rounding checked against torch's casts.
Runs again under ASan (NABLA_ASAN=1, emuutil)."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import TMPDIR, nabla, out  # noqa: E402
import emuutil  # noqa: E402

rng = np.random.default_rng()

# (name, shapes of the inputs, nabla expression over a, b, numpy expression)
STRIDED = [
    ("add_permuted_5d", [(3, 5, 7, 2, 9), (3, 5, 7, 2, 9)], "permute(a, list(4, 2, 0, 3, 1)) + permute(b, list(4, 2, 0, 3, 1))",
     lambda a, b: np.transpose(a, (4, 2, 0, 3, 1)) + np.transpose(b, (4, 2, 0, 3, 1))),
    ("mul_stepped", [(11, 36, 13), (11, 36, 13)], "a[:, ::3, 1:] * b[:, 1::3, :12]", lambda a, b: a[:, ::3, 1:] * b[:, 1::3, :12]),
    ("sub_broadcast", [(7, 1, 13), (5, 1)], "a - b", lambda a, b: a - b),
    ("div_transposed_broadcast", [(6, 9, 17), (6,)], "a.T / (b + 3)", lambda a, b: np.transpose(a) / (b + 3)),
    ("maximum_permuted", [(4, 6, 5, 3), (3,)], "maximum(permute(a, list(2, 0, 3, 1)), b.reshape(list(1, 1, 3, 1)))",
     lambda a, b: np.maximum(np.transpose(a, (2, 0, 3, 1)), b.reshape(1, 1, 3, 1))),
    ("exp_permuted", [(5, 7, 11), None], "exp(permute(a, list(1, 2, 0)))", lambda a, b: np.exp(np.transpose(a, (1, 2, 0)))),
    ("copy_permuted", [(9, 8, 7, 3), None], "contiguous(permute(a, list(3, 1, 0, 2)))", lambda a, b: np.transpose(a, (3, 1, 0, 2))),
    ("where_stepped", [(13, 32), (13, 32)], "where(a[:, ::2] > 0, a[:, ::2], b[:, 1::2])",
     lambda a, b: np.where(a[:, ::2] > 0, a[:, ::2], b[:, 1::2])),
    ("compare_broadcast", [(6, 1, 9), (1, 7, 9)], "a < b", lambda a, b: a < b),
]
FLOATS = ["f32", "f64", "f16", "bf16"]
TORCH = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}


def main():
    lines, checks = [], []
    for k, (name, shapes, expr, ref) in enumerate(STRIDED):
        a = rng.standard_normal(shapes[0])
        b = rng.standard_normal(shapes[1]) if shapes[1] else np.zeros(1)
        np.save(f"{TMPDIR}/a{k}.npy", a)
        np.save(f"{TMPDIR}/b{k}.npy", b)
        lines.append(f'a = load_npy("{TMPDIR}/a{k}.npy").cuda()\nb = load_npy("{TMPDIR}/b{k}.npy").cuda()\n'
                     f'save_npy("{TMPDIR}/r{k}.npy", ({expr}).cpu().to("f64"))\n')
        checks.append(("strided", k, name, ref))
    # a fill through a strided view
    lines.append(f'z = zeros(7, 9, 5, device="cuda")\nv = permute(z, list(2, 0, 1))[:, ::2, 1:]\nv[:] = 3\n'
                 f'save_npy("{TMPDIR}/fill.npy", z.cpu().to("f64"))\n')
    # casts: every float pair; contiguous (odd length), offset by one element, strided
    n = 1037
    x = rng.standard_normal(n) * 50
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 1e-8, 3.3895e38]
    np.save(f"{TMPDIR}/cx.npy", x)
    cast_cases = []
    for s in FLOATS:
        for d in FLOATS:
            if s == d:
                continue
            for view in ("x", "x[1:]", "x[::3]"):
                j = len(cast_cases)
                lines.append(f'x = load_npy("{TMPDIR}/cx.npy").to("{s}").cuda()\n'
                             f'save_npy("{TMPDIR}/cs{j}.npy", ({view}).cpu().to("f64"))\n'
                             f'save_npy("{TMPDIR}/cd{j}.npy", ({view}).to("{d}").cpu().to("f64"))\n')
                cast_cases.append((j, s, d, view))
    rc, so, se = nabla("".join(lines), timeout=600)
    if rc != 0:
        out("FAIL", "elementwise_cases_ran", f"rc={rc}: {se[-1500:]}")
        return
    for _, k, name, ref in checks:
        a = np.load(f"{TMPDIR}/a{k}.npy")
        b = np.load(f"{TMPDIR}/b{k}.npy")
        got = np.load(f"{TMPDIR}/r{k}.npy")
        want = np.asarray(ref(a, b), dtype=np.float64)
        if got.shape != want.shape:
            out("FAIL", f"elementwise.{name}", f"shape {got.shape}, want {want.shape}")
        elif not np.allclose(got, want, rtol=2e-6, atol=1e-6):
            bad = np.argwhere(~np.isclose(got, want, rtol=2e-6, atol=1e-6))
            out("FAIL", f"elementwise.{name}", f"{len(bad)} of {want.size} wrong, first at {bad[0].tolist()}")
        else:
            out("PASS", f"elementwise.{name}")
    z = np.zeros((7, 9, 5))
    np.transpose(z, (2, 0, 1))[:, ::2, 1:] = 3
    got = np.load(f"{TMPDIR}/fill.npy")
    out("PASS" if np.array_equal(got, z) else "FAIL", "elementwise.fill_strided_view",
        "" if np.array_equal(got, z) else f"{np.sum(got != z)} elements differ")
    for j, s, d, view in cast_cases:
        src = np.load(f"{TMPDIR}/cs{j}.npy")
        got = np.load(f"{TMPDIR}/cd{j}.npy")
        want = torch.tensor(src, dtype=torch.float64).to(TORCH[s]).to(TORCH[d]).to(torch.float64).numpy()
        name = f"cast.{s}_to_{d}." + {"x": "contig", "x[1:]": "offset", "x[::3]": "strided"}[view]
        if got.shape == want.shape and np.array_equal(got, want, equal_nan=True):
            out("PASS", name)
        else:
            diff = np.argwhere(~((got == want) | (np.isnan(got) & np.isnan(want))))
            i = int(diff[0][0]) if len(diff) else -1
            out("FAIL", name, f"{len(diff)} of {want.size} differ; first [{i}]: src {src[i]!r} got {got[i]!r} want {want[i]!r}")


if __name__ == "__main__":
    main()
    sys.exit(1 if emuutil.n_fail else 0)
