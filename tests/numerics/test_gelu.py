#!/usr/bin/python3
"""gelu (the builtin: one-pass forward and backward on the CPU, tensor/nn/gelu.c)
vs torch.nn.functional.gelu, on fresh random inputs: exact and tanh forms,
f32/f64 (the fused kernels), a transposed input, a size above the OpenMP
threshold (the parallel loops), 0 elements, bf16 (the core op), and
gradients (loss sum(gelu(x) * W), W random) vs torch.autograd.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_gelu.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TOL = {"f32": dict(rtol=1e-5, atol=1e-6), "f64": dict(rtol=1e-12, atol=1e-13)}
NPDT = {"f32": np.float32, "f64": np.float64}

b = Batch("gelu")
for dt in ("f32", "f64"):
    for shape in [(7,), (3, 5), (300, 301), (0, 4)]:
        x = (rng.standard_normal(shape) * 3).astype(NPDT[dt])
        W = rng.standard_normal(shape).astype(NPDT[dt])
        xe, We = b.inp(x), b.inp(W)
        for approx in ("none", "tanh"):
            tag = f"{dt}_{'x'.join(map(str, shape))}_{approx}"
            b.case(f"value_{tag}", f'gelu({xe}, approximate="{approx}")', F.gelu(T(x), approximate=approx), **TOL[dt])
            xt = T(x, requires_grad=True)
            (F.gelu(xt, approximate=approx) * T(W)).sum().backward()
            # f32 tanh tail: glibc's tanhf and torch's vectorised tanh differ by an ulp
            # near +-1, which 1 - tanh^2 magnifies to ~1e-6 absolute (gradients are O(1))
            tol = dict(rtol=1e-5, atol=1e-5) if dt == "f32" and approx == "tanh" else TOL[dt]
            b.case(f"grad_{tag}", f'grad(fn(x) sum(gelu(x, approximate="{approx}") * {We}))({xe})', xt.grad, **tol)
    x = rng.standard_normal((4, 6)).astype(NPDT[dt])
    W = rng.standard_normal((6, 4)).astype(NPDT[dt])
    xe, We = b.inp(x), b.inp(W)
    xt = T(x, requires_grad=True)
    (F.gelu(xt.T) * T(W)).sum().backward()
    b.case(f"value_{dt}_transposed", f"gelu({xe}.T)", F.gelu(T(x).T), **TOL[dt])
    b.case(f"grad_{dt}_transposed", f"grad(fn(x) sum(gelu(x.T) * {We}))({xe})", xt.grad, **TOL[dt])
x = rng.standard_normal((5, 8)).astype(np.float32)
xe = b.inp(x)
b.case("value_bf16", f'gelu({xe}.to("bf16"))', F.gelu(T(x).to(torch.bfloat16)), rtol=2e-2, atol=2e-2)
b.error("bad_approximate", f'gelu({xe}, approximate="fast")', 'gelu: approximate must be "none" or "tanh"')
b.run()
finish()
