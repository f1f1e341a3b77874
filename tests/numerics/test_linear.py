#!/usr/bin/python3
"""linear(x, weight, bias) (one fused op, tensor/nn/linear.c) vs torch.nn.functional.linear.

Fresh random inputs per run (the seed is in every failure).  Covered: 1-D,
2-D, 3-D and 4-D inputs, no bias, f32 and f64 (the fused CPU path), a
transposed (non-contiguous) weight and input, K = 1, zero rows, mixed dtypes
(the composed path: promotion like matmul, the bias cast to the product's
dtype), bf16 inputs, autocast("bf16") (the whole op in bf16, bias included,
like torch's addmm), gradients w.r.t. x, weight and bias vs torch.autograd
(loss sum(y * W), W random), nn.linear, and error messages.

Device-agnostic: NUMERICS_DEVICE=cuda runs the same cases on the GPU, where
linear is matmul + add composed from the existing kernels.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_linear.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TOL = {"f32": dict(rtol=1e-5, atol=1e-5), "f64": dict(rtol=1e-12, atol=1e-12)}
NPDT = {"f32": np.float32, "f64": np.float64}


def rnd(shape, dt):
    return rng.standard_normal(shape).astype(NPDT[dt])


def values_and_grads():
    b = Batch("linear")
    for dt in ("f32", "f64"):
        for xs, (n, k), bias in [((5,), (3, 5), True), ((4, 6), (7, 6), True), ((2, 3, 8), (5, 8), True),
                                 ((2, 3, 8), (5, 8), False), ((2, 2, 3, 4), (6, 4), True), ((6, 1), (3, 1), True),
                                 ((0, 4), (3, 4), True), ((3, 4), (0, 4), True)]:
            x, w = rnd(xs, dt), rnd((n, k), dt)
            bb = rnd((n,), dt) if bias else None
            W = rnd(xs[:-1] + (n,), dt)
            xe, we, We = b.inp(x), b.inp(w), b.inp(W)
            be = b.inp(bb) if bias else "nil"
            tag = f"{dt}_{'x'.join(map(str, xs))}_{n}{'' if bias else '_nobias'}"
            b.case(f"value_{tag}", f"linear({xe}, {we}, {be})",
                   F.linear(T(x), T(w), T(bb) if bias else None), **TOL[dt])
            xt, wt = T(x, requires_grad=True), T(w, requires_grad=True)
            bt = T(bb, requires_grad=True) if bias else None
            (F.linear(xt, wt, bt) * T(W)).sum().backward()
            exp = [xt.grad, wt.grad] + ([bt.grad] if bias else [])
            args = "x, w, bb" if bias else "x, w"
            code = (f"fn f({args}) = sum(linear(x, w{', bb' if bias else ''}) * {We})\n"
                    f"grad(f, argnums=list({', '.join(str(i) for i in range(3 if bias else 2))}))"
                    f"({xe}, {we}{', ' + be if bias else ''})")
            b.case(f"grad_{tag}", code, exp, **TOL[dt])
    # strided operands: w given as a transposed view, x as a permuted view
    x, w, bb = rnd((4, 5), "f32"), rnd((5, 3), "f32"), rnd((3,), "f32")
    xe, we, be = b.inp(x), b.inp(w), b.inp(bb)
    b.case("value_strided_weight", f"linear({xe}, {we}.T, {be})", F.linear(T(x), T(w).T, T(bb)), **TOL["f32"])
    x3 = rnd((3, 2, 4), "f32")
    x3e = b.inp(x3)
    w4 = rnd((6, 3), "f32")
    w4e = b.inp(w4)
    b.case("value_strided_input", f"linear(permute({x3e}, [2, 1, 0]), {w4e})",
           F.linear(T(x3).permute(2, 1, 0), T(w4)), **TOL["f32"])
    W = rnd((4, 2, 6), "f32")
    We = b.inp(W)
    xt, wt = T(x3, requires_grad=True), T(w4, requires_grad=True)
    (F.linear(xt.permute(2, 1, 0), wt) * T(W)).sum().backward()
    b.case("grad_strided_input", f"fn f(x, w) = sum(linear(permute(x, [2, 1, 0]), w) * {We})\n"
           f"grad(f, argnums=list(0, 1))({x3e}, {w4e})", [xt.grad, wt.grad], **TOL["f32"])
    # mixed dtypes: promotion like matmul, bias cast to the product's dtype
    x, w, bb = rnd((3, 4), "f32"), rnd((2, 4), "f64"), rnd((2,), "f32")
    xe, we, be = b.inp(x), b.inp(w), b.inp(bb)
    b.case("value_mixed_f32_f64", f"linear({xe}, {we}, {be})",
           F.linear(T(x).double(), T(w), T(bb).double()), **TOL["f32"])
    # bf16 inputs, and autocast("bf16") on f32 inputs: the op runs in bf16, bias included
    x, w, bb = rnd((4, 8), "f32"), rnd((6, 8), "f32"), rnd((6,), "f32")
    xe, we, be = b.inp(x), b.inp(w), b.inp(bb)
    bf = torch.bfloat16
    exp = F.linear(T(x).to(bf), T(w).to(bf), T(bb).to(bf))
    b.case("value_bf16", f'linear({xe}.to("bf16"), {we}.to("bf16"), {be}.to("bf16"))', exp, rtol=2e-2, atol=2e-2)
    b.case("autocast_bf16", f'autocast("bf16") {{ linear({xe}, {we}, {be}) }}', exp, rtol=2e-2, atol=2e-2)
    b.case("autocast_bf16_nobias", f'autocast("bf16") {{ linear({xe}, {we}) }}',
           F.linear(T(x).to(bf), T(w).to(bf)), rtol=2e-2, atol=2e-2)
    # nn.linear uses the op
    x = rnd((2, 3, 5), "f32")
    xe = b.inp(x)
    code = f"import nn\nseed(1)\nl = nn.linear(5, 4)\n[l({xe}), l.weight, l.bias]"

    def judge(got, x=x):
        y, w, bb = (np.asarray(g) for g in got)
        e = F.linear(T(x), T(w), T(bb)).numpy()
        return None if np.allclose(y, e, rtol=1e-5, atol=1e-5) else f"max diff {np.abs(y - e).max()}"
    b.case("nn_linear", code, judge)
    b.run()


def errors():
    b = Batch("linear_errors")
    x, w = b.inp(rnd((3, 4), "f32")), b.inp(rnd((5, 4), "f32"))
    b.error("weight_not_2d", f"linear({x}, reshape({w}, [20]))", "linear: weight must be 2-D")
    b.error("features_mismatch", f"linear({x}, {w}.T)", "linear: input [3, 4] and weight [4, 5] do not match")
    b.error("bias_shape", f"linear({x}, {w}, zeros(4))", "linear: bias must have shape [5], got [4]")
    b.error("scalar_input", f"linear(tensor(1.0), {w})", "linear: input must have at least 1 dimension")
    b.run()


values_and_grads()
errors()
finish()
