#!/usr/bin/python3
"""Signed zeros and NaN/inf in elementwise backward formulas vs torch 1.13, on
the CPU and again on the emulated CUDA device (emulated_rerun):
  * neg(+0) = -0 (a sign flip, not 0 - x), f32/f64/f16/bf16, contiguous and
    strided, the language's unary minus too: the sign is read through 1/x;
  * maximum/minimum backward with NaN on either side (both inputs get the
    gradient), ties (half each), inf, an inf/NaN upstream gradient (the loser
    gets 0, selected, not g * 0), broadcasting, and the scalar form;
  * relu(x) * w and clamp(x, lo, hi) * w with NaN/inf in w: 0 where relu or
    clamp blocks (torch's threshold_backward / where), as torch.
tools/run-tests.sh runs it again on the ASan build (NABLA_ASAN=1).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_nan_grads.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np, DEVICE, report_fail, emulated_rerun  # noqa: E402

TOL = dict(rtol=1e-6, atol=1e-7)


def specials(shape, dt, frac=0.3):
    """random values with NaN, +-inf, +-0 sprinkled in"""
    a = rng.standard_normal(shape)
    pick = rng.random(shape) < frac
    a[pick] = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0], size=int(pick.sum()))
    return a.astype(dt)


def neg_cases(b):
    base = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 3e-39])
    for tn, dt, tdt in (("f32", np.float32, torch.float32), ("f64", np.float64, torch.float64)):
        x = np.concatenate([base, rng.standard_normal(29)]).astype(dt)
        want = 1 / torch.neg(T(x))
        b.case(f"neg_signed_zero_{tn}", f"1 / neg({b.inp(x)})", want, **TOL)
        b.case(f"unary_minus_signed_zero_{tn}", f"1 / (-{b.inp(x)})", want, **TOL)
        m = x[:36].reshape(6, 6)
        b.case(f"neg_strided_{tn}", f"1 / neg(transpose({b.inp(m)}))", 1 / torch.neg(T(m).t()), **TOL)
    for tn in ("f16", "bf16"):
        x = np.concatenate([base[:7], rng.standard_normal(30)]).astype(np.float32)
        tdt = torch.float16 if tn == "f16" else torch.bfloat16
        want = 1 / torch.neg(T(x).to(tdt)).float()
        b.case(f"neg_signed_zero_{tn}", f"1 / neg({b.inp(x)}.to(\"{tn}\")).to(\"f32\")", want, **TOL)
    # the backward of neg: an upstream +0 gradient comes back -0
    z = np.zeros(5)
    b.case("neg_grad_signed_zero", f"1 / grad(fn(x) sum(neg(x) * 0))({b.inp(z)})",
           1 / torch.zeros(5, dtype=torch.float64).neg(), **TOL)


def torch_grads(f, inputs, w):
    ts = [T(a, requires_grad=True) for a in inputs]
    (f(*ts) * T(w)).sum().backward()
    return [t.grad for t in ts]


def nb_grads(b, expr, inputs, w):
    params = ", ".join(f"p{i}" for i in range(len(inputs)))
    args = ", ".join(b.inp(a) for a in inputs)
    argn = ", ".join(str(i) for i in range(len(inputs)))
    return f"grad(fn({params}) sum(({expr}) * {b.inp(w)}), argnums=list({argn}))({args})"


def maxmin_cases(b):
    for tn, dt in (("f32", np.float32), ("f64", np.float64)):
        a = specials((5, 7), dt)
        bb = specials((5, 7), dt)
        tie = rng.random((5, 7)) < 0.25
        bb[tie] = a[tie]   # ties, including inf == inf (a NaN "tie" stays unequal)
        w = rng.standard_normal((5, 7)).astype(dt)
        wbad = specials((5, 7), dt)   # inf / NaN upstream gradients too
        for name, tf in (("maximum", torch.maximum), ("minimum", torch.minimum)):
            for wn, ww in (("", w), ("_nonfinite_g", wbad)):
                b.case(f"{name}_grad_{tn}{wn}", nb_grads(b, f"{name}(p0, p1)", [a, bb], ww), torch_grads(tf, [a, bb], ww), **TOL)
            # broadcasting: [3, 1, 4] against [5, 4], ties along the broadcast
            x = specials((3, 1, 4), dt)
            y = specials((5, 4), dt)
            y[1] = x[0, 0]
            wb = specials((3, 5, 4), dt, frac=0.15)
            b.case(f"{name}_grad_broadcast_{tn}", nb_grads(b, f"{name}(p0, p1)", [x, y], wb), torch_grads(tf, [x, y], wb), **TOL)
            # a scalar on one side: torch's rule with other = the scalar
            xs = specials((4, 6), dt)
            xs[0, :3] = 0.5
            ws = specials((4, 6), dt, frac=0.2)
            b.case(f"{name}_scalar_grad_{tn}", nb_grads(b, f"{name}(p0, 0.5)", [xs], ws),
                   torch_grads(lambda t: tf(t, torch.tensor(0.5, dtype=t.dtype)), [xs], ws), **TOL)


def blocked_cases(b):
    for tn, dt in (("f32", np.float32), ("f64", np.float64)):
        x = specials((6, 5), dt)
        w = specials((6, 5), dt, frac=0.4)
        b.case(f"relu_nan_weight_{tn}", nb_grads(b, "relu(p0)", [x], w), torch_grads(torch.relu, [x], w), **TOL)
        b.case(f"relu_strided_{tn}", nb_grads(b, "relu(transpose(p0))", [x], w.T.copy()),
               torch_grads(lambda t: torch.relu(t.t()), [x], w.T.copy()), **TOL)
        b.case(f"clamp_nan_weight_{tn}", nb_grads(b, "clamp(p0, -0.5, 0.5)", [x], w), torch_grads(lambda t: torch.clamp(t, -0.5, 0.5), [x], w), **TOL)
        b.case(f"clamp_min_nan_weight_{tn}", nb_grads(b, "clamp(p0, min=-0.5)", [x], w), torch_grads(lambda t: torch.clamp(t, min=-0.5), [x], w), **TOL)


def main():
    b = Batch("nan_grads")
    neg_cases(b)
    maxmin_cases(b)
    blocked_cases(b)
    b.run()
    if DEVICE == "cpu" and not emulated_rerun(__file__, "nan_grads", "NAN_GRADS_DEVICE"):
        report_fail("nan_grads.emulated", "the emulated-device run failed (its lines above)")
    finish()


if __name__ == "__main__":
    main()
