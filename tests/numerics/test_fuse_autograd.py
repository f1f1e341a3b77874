#!/usr/bin/python3
"""Fusion through autograd (tensor/tfuse_grad.c, issue 28).

Elementwise chains whose inputs require grad are recorded as ONE lazy chain
with ONE autograd node ("FusedBackward"); its backward composes the unfused
ops' own formulas.  Every batch runs TWICE (NABLA_FUSE=1 and =0) on the same
fresh random inputs: values AND gradients must be the same bits both ways
(NaN payloads, inf, -0 included) and match PyTorch:

- every op that joins chains, one chain each: the unary math ops, clamp, the
  binary ops (+ - * / ** maximum minimum % //) with broadcast (row, column,
  0-d) and strided (transposed) operands, the scalar forms (both sides),
  comparisons inside a chain (a mask), casts between f32/f64 operands;
- ties (maximum/minimum split the gradient, clamp passes at its bounds);
- NaN (with payloads) / inf / -0 inputs;
- f32, f64, bf16;
- double backward (grad of a function of a gradient) against torch;
- x and x.detach() in one chain (only x gets a gradient), a chain extending
  a chain, a lazy leaf that requires grad, backward from a chain never read;
- an in-place write to an input the backward reads: the same error both ways;
- a 3-layer MLP training step (SGD, 3 steps, f64): same loss and parameters
  fused and unfused and as torch, with chains fused (fuse_stats().forced > 0)
  and recorded as FusedBackward nodes.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_fuse_autograd.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Batch, T, check, finish, rng, torch, np, compare  # noqa: E402
from fuseutil import run_both, judge  # noqa: E402

F = torch.nn.functional
NPT = {"f32": np.float32, "f64": np.float64}
TOL = {"f64": (1e-10, 1e-10), "f32": (2e-4, 2e-4)}
R, C = 150, 130   # 19500 elements: above the fusion threshold (16384)

# unary steps: (name, nabla template on {}, torch fn); inputs are in about [-3, 3]
POS = "(abs({}) + 0.5)"   # for ops defined on positives
UNARY = [
    ("neg", "(-{})", lambda a: -a), ("exp", "exp({} * 0.5)", lambda a: torch.exp(a * 0.5)),
    ("log", "log" + POS, lambda a: torch.log(a.abs() + 0.5)), ("log1p", "log1p" + POS, lambda a: torch.log1p(a.abs() + 0.5)),
    ("log2", "log2" + POS, lambda a: torch.log2(a.abs() + 0.5)), ("sqrt", "sqrt" + POS, lambda a: torch.sqrt(a.abs() + 0.5)),
    ("rsqrt", "rsqrt" + POS, lambda a: torch.rsqrt(a.abs() + 0.5)), ("abs", "abs({})", torch.abs),
    ("sign", "sign({})", torch.sign), ("tanh", "tanh({})", torch.tanh), ("sigmoid", "sigmoid({})", torch.sigmoid),
    ("relu", "relu({})", torch.relu), ("silu", "silu({})", F.silu), ("gelu", "gelu({})", F.gelu),
    ("gelu_tanh", "gelu({}, \"tanh\")", lambda a: F.gelu(a, approximate="tanh")),
    ("sin", "sin({})", torch.sin), ("cos", "cos({})", torch.cos), ("floor", "floor({})", torch.floor),
    ("ceil", "ceil({})", torch.ceil), ("tan", "tan({} * 0.3)", lambda a: torch.tan(a * 0.3)),
    ("erf", "erf({})", torch.erf), ("expm1", "expm1({} * 0.5)", lambda a: torch.expm1(a * 0.5)),
    ("clamp", "clamp({}, -0.5, 0.7)", lambda a: torch.clamp(a, -0.5, 0.7)),
    ("clamp_lo", "clamp({}, -0.5, nil)", lambda a: torch.clamp(a, min=-0.5)),
]
# binary steps: (name, nabla template on {} and {B}, torch fn)
BINARY = [
    ("add", "({} + {B})", lambda a, b: a + b), ("sub", "({B} - {})", lambda a, b: b - a),
    ("mul", "({} * {B})", lambda a, b: a * b), ("div", "({B} / (abs({}) + 1))", lambda a, b: b / (a.abs() + 1)),
    ("maximum", "maximum({}, {B})", torch.maximum), ("minimum", "minimum({B}, {})", lambda a, b: torch.minimum(b, a)),
    ("mod", "({} % (abs({B}) + 0.5))", lambda a, b: torch.remainder(a, b.abs() + 0.5)),
    ("floordiv", "(({} // (abs({B}) + 0.5)) + {})", lambda a, b: torch.div(a, b.abs() + 0.5, rounding_mode="floor") + a),
    ("mask", "({} * ({} > {B}))", lambda a, b: a * (a > b)),
    ("where", "where({} > {B}, {} * 2, {B} - {})", lambda a, b: torch.where(a > b, a * 2, b - a)),
]
# scalar steps
SCALAR = [
    ("rsub", "(2 - {})", lambda a: 2 - a), ("rdiv", "(3 / (abs({}) + 1))", lambda a: 3 / (a.abs() + 1)),
    ("pow_s", "((abs({}) + 0.5) ** 1.7)", lambda a: (a.abs() + 0.5) ** 1.7),
    ("s_pow", "(1.3 ** {})", lambda a: 1.3 ** a), ("max_s", "maximum({}, 0.1)", lambda a: torch.clamp(a, min=0.1)),
    ("min_s", "minimum({}, 0.1)", lambda a: torch.clamp(a, max=0.1)), ("mod_s", "({} % 0.7)", lambda a: torch.remainder(a, 0.7)),
    ("floordiv_s", "(({} // 0.7) * {})", lambda a: torch.div(a, 0.7, rounding_mode="floor") * a),
    ("cmp_s", "({} * ({} <= 0.2))", lambda a: a * (a <= 0.2)),
]


# [pending, forced, dropped, backward passes in one pass, backward passes op by op]
STATS = "s = fuse_stats()\nlist(s.pending, s.forced, s.dropped, s.backward_fused, s.backward_fallbacks)"


def b_operand(kind, dt):
    """a second operand broadcasting to [R, C]: a row, a column, 0-d, full, or transposed (strided)"""
    shape = [(C,), (R, 1), (), (R, C), (C, R)][kind]
    return rng.standard_normal(shape).astype(NPT[dt]), kind == 4


def grads_case(b, name, dt, expr_nb, expr_t, xa, wa, w_strided, ga, tol=None):
    """loss = sum(chain(x, w) * g): the chain's value and d/dx, d/dw vs torch"""
    x, w, g = b.inp(xa), b.inp(wa), b.inp(ga)
    wexpr = "w.T" if w_strided else "w"
    b.case(name, f"vg = value_and_grad(fn(x, w) sum(({expr_nb.replace('{W}', wexpr)}) * {g}), [0, 1])({x}, {w})\n"
                 f"list(vg[0], vg[1][0], vg[1][1])",
           *_torch_ref(expr_t, xa, wa, w_strided, ga, dt, tol))


def _torch_ref(expr_t, xa, wa, w_strided, ga, dt, tol):
    xt, wt = T(xa, True), T(wa, True)
    y = expr_t(xt, wt.T if w_strided else wt)
    loss = (y * T(ga)).sum()
    loss.backward()
    t = tol or TOL[dt]
    gw = wt.grad if wt.grad is not None else torch.zeros_like(wt)   # (torch: None where no gradient reaches)
    return [loss.detach(), xt.grad, gw], t[0], t[1]


def ops_batch():
    b = Batch("fuse_autograd.ops")
    for dt in ("f64", "f32"):
        for name, u, tf in UNARY:
            xa = rng.uniform(-3, 3, (R, C)).astype(NPT[dt])
            wa, ws = b_operand(rng.integers(0, 5), dt)
            # the unary op inside a chain: operands before it and after it
            nb = "(" + u.format("(x * 0.75 + {W})") + " - x * 0.5) * {W}"
            grads_case(b, f"{name}_{dt}", dt, nb, lambda x, w, tf=tf: (tf(x * 0.75 + w) - x * 0.5) * w, xa, wa, ws,
                       rng.standard_normal((R, C)).astype(NPT[dt]))
        for name, bt, tf in BINARY:
            for kind in (0, 1, 2, 4):
                xa = rng.uniform(-3, 3, (R, C)).astype(NPT[dt])
                wa, ws = b_operand(kind, dt)
                nb = "tanh(" + bt.replace("{B}", "{W}").replace("{}", "(x * 1.5)") + ") * (x + 1)"
                grads_case(b, f"{name}_k{kind}_{dt}", dt, nb, lambda x, w, tf=tf: torch.tanh(tf(x * 1.5, w)) * (x + 1),
                           xa, wa, ws, rng.standard_normal((R, C)).astype(NPT[dt]))
        for name, st, tf in SCALAR:
            xa = rng.uniform(-3, 3, (R, C)).astype(NPT[dt])
            wa, ws = b_operand(0, dt)
            nb = st.replace("{}", "(x * {W} + 0.25)") + " * (x - 0.5)"
            grads_case(b, f"{name}_{dt}", dt, nb, lambda x, w, tf=tf: tf(x * w + 0.25) * (x - 0.5), xa, wa, ws,
                       rng.standard_normal((R, C)).astype(NPT[dt]))
        # ties: maximum/minimum split the gradient, clamp passes at its bounds
        xa = (rng.integers(-4, 5, (R, C)) / 4).astype(NPT[dt])
        wa = (rng.integers(-4, 5, (C,)) / 4).astype(NPT[dt])
        grads_case(b, f"ties_{dt}", dt, "(maximum(x, {W}) + minimum(x * 1, {W}) * 2 + clamp(x + 0, -0.5, 0.5)) * 1.5",
                   lambda x, w: (torch.maximum(x, w) + torch.minimum(x * 1, w) * 2 + torch.clamp(x + 0, -0.5, 0.5)) * 1.5,
                   xa, wa, False, rng.standard_normal((R, C)).astype(NPT[dt]))
        # a strided x (the transposed input of the function) and a column operand
        xa = rng.uniform(-2, 2, (C, R)).astype(NPT[dt])
        wa = rng.standard_normal((R, 1)).astype(NPT[dt])
        ga = rng.standard_normal((R, C)).astype(NPT[dt])
        x, w, g = b.inp(xa), b.inp(wa), b.inp(ga)
        xt, wt = T(xa, True), T(wa, True)
        loss = ((torch.sigmoid(xt.T * wt - 0.5) * xt.T + wt) * T(ga)).sum()
        loss.backward()
        b.case(f"strided_x_{dt}", f"vg = value_and_grad(fn(x, w) sum((sigmoid(x.T * w - 0.5) * x.T + w) * {g}), [0, 1])({x}, {w})\n"
                                  f"list(vg[0], vg[1][0], vg[1][1])", [loss.detach(), xt.grad, wt.grad], *TOL[dt])
    # mixed dtypes: an f32 input promoted inside an f64 chain (a cast op in the chain)
    xa = rng.standard_normal((R, C)).astype(np.float32)
    wa = rng.standard_normal((C,))
    ga = rng.standard_normal((R, C))
    grads_case(b, "cast_f32_in_f64", "f64", "tanh(x * {W}) * 2 + x", lambda x, w: torch.tanh(x * w) * 2 + x, xa, wa, False, ga)
    b.case("stats", STATS, lambda got: None)
    return b


def payload_batch():
    """NaN payloads, inf, -0 in the inputs: the same bits fused and unfused, torch's values"""
    b = Batch("fuse_autograd.payloads")
    for dt, bits in (("f32", np.uint32), ("f64", np.uint64)):
        xa = rng.standard_normal((R, C)).astype(NPT[dt])
        flat = xa.reshape(-1)
        idx = rng.choice(flat.size, 400, replace=False)
        flat[idx[:100]] = np.inf
        flat[idx[100:200]] = -np.inf
        flat[idx[200:300]] = -0.0
        nan = np.array([np.nan], dtype=NPT[dt]).view(bits)[0]
        flat[idx[300:]] = (np.full(100, nan, dtype=bits) | rng.integers(1, 1000, 100).astype(bits)).view(NPT[dt])
        wa = rng.standard_normal((C,)).astype(NPT[dt])
        wa[:3] = [-0.0, 0.0, -0.0]
        ga = rng.standard_normal((R, C)).astype(NPT[dt])
        for name, nb, tf in [
            ("affine", "(x * {W} + 1) * 0.5", lambda x, w: (x * w + 1) * 0.5),
            ("relu_mul", "relu(x - 0.1) * {W}", lambda x, w: torch.relu(x - 0.1) * w),
            ("max", "maximum(x, {W}) - x * 2", lambda x, w: torch.maximum(x, w) - x * 2),
            ("abs_div", "abs(x) / (abs({W}) + 1)", lambda x, w: x.abs() / (w.abs() + 1)),
            ("tanh", "tanh(x * 0.5) * {W}", lambda x, w: torch.tanh(x * 0.5) * w),
        ]:
            grads_case(b, f"{name}_{dt}", dt, nb, tf, xa, wa, False, ga)
            if name == "max":   # NaN vs a number: nabla (fused and unfused alike) gives the number's side the
                # gradient, torch both sides; fused must equal unfused bit for bit (judge), torch not asked
                b.cases[-1].exp = lambda got: None
    b.case("stats", STATS, lambda got: None)
    return b


def bf16_batch():
    """bf16 chains: every op rounds to bf16 (as torch's bf16 CPU ops do)"""
    b = Batch("fuse_autograd.bf16")
    for name, nb, tf in [
        ("affine_tanh", "tanh(x * {W} + 1) * x", lambda x, w: torch.tanh(x * w + 1) * x),
        ("gelu", "gelu(x + {W}) * 2 - x", lambda x, w: F.gelu(x + w) * 2 - x),
        ("sigmoid_max", "sigmoid(maximum(x, {W})) * {W}", lambda x, w: torch.sigmoid(torch.maximum(x, w)) * w),
    ]:
        xa = rng.uniform(-2, 2, (R, C)).astype(np.float32)
        wa = rng.uniform(-2, 2, (C,)).astype(np.float32)
        ga = rng.standard_normal((R, C)).astype(np.float32)
        x, w, g = b.inp(xa), b.inp(wa), b.inp(ga)
        xt = T(xa).bfloat16().requires_grad_(True)
        wt = T(wa).bfloat16().requires_grad_(True)
        y = tf(xt, wt)
        gt = T(ga).bfloat16()
        (y * gt).float().sum().backward()
        b.case(f"{name}_bf16", f"xb = {x}.to(\"bf16\")\nwb = {w}.to(\"bf16\")\n"
                               f"gs = grad(fn(x, w) sum((({nb.replace('{W}', 'w')}) * {g}.to(\"bf16\")).to(\"f32\")), [0, 1])(xb, wb)\n"
                               f"gs[0]", xt.grad, rtol=3e-2, atol=3e-2)
        # d/dw sums 150 rows in bf16 (torch accumulates in f32): a looser bound
        b.case(f"{name}_bf16_dw", "gs[1]", wt.grad, rtol=3e-2, atol=0.2)
    return b


def misc_batch():
    b = Batch("fuse_autograd.misc")
    xa = rng.uniform(-2, 2, (R, C))
    wa = rng.uniform(-2, 2, (C,))
    ga = rng.standard_normal((R, C))
    x, w, g = b.inp(xa), b.inp(wa), b.inp(ga)
    # double backward: the engine runs backward formulas with grad mode off (no
    # create_graph), so a gradient of a gradient is a clear error, fused or not
    b.raw("fn f2(x) = sum(tanh(x * 1.5 + 0.5) * x + sigmoid(x) * x * x)")
    b.case("double_backward_error", f"msg = \"NOERROR\"\ntry {{ grad(fn(x) sum(grad(f2)(x) * {g}))({x}) }} catch e {{ msg = e.message }}\nmsg",
           lambda got: None if "does not depend" in str(got) else f"want a clear error, got {got!r}", dtype=False)
    # x and x.detach() in one chain: only x's path gives a gradient
    xt = T(xa, True)
    ((xt * 2 + xt.detach() * 3) * xt.detach() * T(ga)).sum().backward()
    b.case("detach_alias", f"grad(fn(x) sum((x * 2 + x.detach() * 3) * x.detach() * {g}))({x})", xt.grad, rtol=1e-12, atol=1e-12)
    # a chain extending a chain: two statements, one node; the first value used elsewhere too
    xt, wt = T(xa, True), T(wa, True)
    h = torch.tanh(xt * wt + 1)
    (((h * 2 - xt) * T(ga)).sum() + h.sum()).backward()
    b.case("extend_chain", f"gs = grad(fn(x, w) {{ h = tanh(x * w + 1)\nz = (h * 2 - x) * {g}\nsum(z) + sum(h) }}, [0, 1])({x}, {w})\n"
                           f"list(gs[0], gs[1])", [xt.grad, wt.grad], rtol=1e-12, atol=1e-12)
    # a lazy leaf that requires grad (made under no_grad, then marked)
    xt = T(xa * 2 + 1, True)
    (torch.exp(xt * 0.1) * T(ga)).sum().backward()
    b.case("lazy_leaf", f"y = {x} * 2 + 1\ny.requires_grad = true\nl = sum(exp(y * 0.1) * {g})\nbackward(l)\ny.grad", xt.grad,
           rtol=1e-12, atol=1e-12)
    # backward straight from a chain nobody read (its stored intermediates are
    # written when the backward computes it first)
    xt = T(xa, True)
    (torch.tanh(xt * 2 + 1) * 3).backward(T(ga))
    b.case("unread_chain", f"xx = {x}.detach()\nxx.requires_grad = true\ny = tanh(xx * 2 + 1) * 3\nbackward(y, {g})\nxx.grad",
           xt.grad, rtol=1e-12, atol=1e-12)
    # the node's name: one FusedBackward for a whole chain (fused run), the last op's otherwise
    b.case("grad_fn", f"w = {w}.detach()\nw.requires_grad = true\n(tanh(w * {x} + 1) * 2).grad_fn",
           lambda got: None if got in ("FusedBackward", "MulBackward") else f"grad_fn {got!r}", dtype=False)
    b.case("stats", STATS, lambda got: None)
    return b


def onepass_batch():
    """the backward in ONE tiled pass (tensor/tfuse_bwd.c): a 1-op and a 16-op
    chain, an input used twice in one op, an input without a gradient, g an
    expanded view (sum's), a scalar on the left, f16; same bits as unfused"""
    b = Batch("fuse_autograd.onepass")
    for dt in ("f64", "f32"):
        xa = rng.uniform(-2, 2, (R, C)).astype(NPT[dt])
        wa = rng.uniform(-2, 2, (C,)).astype(NPT[dt])
        fa = (rng.choice([-1, 1], (R, C)) * rng.uniform(0.5, 2, (R, C))).astype(NPT[dt])   # (a divisor)
        x, w, f = b.inp(xa), b.inp(wa), b.inp(fa)
        chains = [
            ("one_op", "x * f", lambda x, w, f: x * f),
            ("sixteen_ops", "h = tanh(x * 0.5 + w)\nh = h * x - 1\nh = h / f\nh = sigmoid(h) * 2 + exp(h * 0.1)\n"
                            "sqrt(h * h + 1) - relu(h)",
             lambda x, w, f: (lambda h: torch.sqrt(h * h + 1) - torch.relu(h))(
                 (lambda h: torch.sigmoid(h) * 2 + torch.exp(h * 0.1))((torch.tanh(x * 0.5 + w) * x - 1) / f))),
            ("twice", "x * x * w - x", lambda x, w, f: x * x * w - x),
            ("rdiv_sq", "3 / (x * x + 1) + x * w", lambda x, w, f: 3 / (x * x + 1) + x * w),
            ("neg_log", "log(abs(x) + 0.5) * w - (-x)", lambda x, w, f: torch.log(x.abs() + 0.5) * w + x),
        ]
        for name, nb, tf in chains:
            xt, wt, ft = T(xa, True), T(wa, True), T(fa, True)
            loss = tf(xt, wt, ft).sum()   # (sum's g: an expanded view)
            gs = torch.autograd.grad(loss, [xt, wt, ft], allow_unused=True)
            gs = [gg if gg is not None else torch.zeros_like(t) for gg, t in zip(gs, (xt, wt, ft))]
            body = nb.replace("\n", "\n ")
            b.raw(f"fn body_{name}_{dt}(x, w, f) {{\n {body}\n}}")
            b.case(f"{name}_{dt}", f"gs = grad(fn(x, w, f) sum(body_{name}_{dt}(x, w, f)), [0, 1, 2])({x}, {w}, {f})\nlist(gs[0], gs[1], gs[2])",
                   gs, *TOL[dt])
        # w without a gradient (a constant of the function)
        xt = T(xa, True)
        (torch.tanh(xt * T(wa) + 1) * T(fa)).sum().backward()
        b.case(f"const_input_{dt}", f"grad(fn(x) sum(tanh(x * {w} + 1) * {f}))({x})", xt.grad, *TOL[dt])
    # f16 chains: every op rounds to f16 as unfused does (torch: f32 on the f16 values, loose)
    xa = rng.uniform(-2, 2, (R, C)).astype(np.float32)
    wa = rng.uniform(-2, 2, (C,)).astype(np.float32)
    x, w = b.inp(xa), b.inp(wa)
    xt = T(xa).half().float().requires_grad_(True)
    wt = T(wa).half().float().requires_grad_(True)
    (torch.tanh(xt * wt + 1) * xt).sum().backward()
    b.case("tanh_f16", f"gs = grad(fn(x, w) sum((tanh(x * w + 1) * x).to(\"f32\")), [0, 1])({x}.to(\"f16\"), {w}.to(\"f16\"))\n"
                       "list(gs[0].to(\"f32\"), gs[1].to(\"f32\"))", [xt.grad, wt.grad], rtol=2e-2, atol=0.3)
    b.case("stats", STATS, lambda got: None)
    return b


def onepass_counts():
    """fuse_stats(): one fused backward per chain (CPU), the per-op path (and its reason) for pow"""
    code = ("x = randn([150, 130], requires_grad=true)\nw = randn([130], requires_grad=true)\n"
            "s0 = fuse_stats()\nbackward(sum(tanh(x * w + 1) * x - relu(x) / 3))\ns1 = fuse_stats()\n"
            "backward(sum((abs(x) + 0.5) ** 1.7 * w))\ns2 = fuse_stats()\n"
            "print(s1.backward_fused - s0.backward_fused, s1.backward_fallbacks - s0.backward_fallbacks)\n"
            "print(s2.backward_fused - s1.backward_fused, s2.backward_fallbacks - s1.backward_fallbacks)\n"
            "print(s2.backward_fallback_reason)\n")
    for mode in ("1", "0"):
        os.environ["NABLA_FUSE"] = mode
        rc, so, se = harness.run_nabla(code)
        lines = so.strip().splitlines()
        want = ["1 0", "0 1"] if mode == "1" else ["0 0", "0 0"]
        ok = rc == 0 and lines[:2] == want and (mode == "0" or "pow" in (lines[2] if len(lines) > 2 else ""))
        check(f"fuse_autograd.onepass.counts[NABLA_FUSE={mode}]", ok,
              f"rc={rc} want {want} (+ a reason naming pow), got {lines} {se.strip()[-300:]!r}")
    os.environ.pop("NABLA_FUSE", None)
    # the save rule: tanh(x * w + 1) * 3 saves tanh's output only (the mul and add
    # results ahead of it are not read by any formula once tanh's output is stored)
    code = ("x = randn([150, 130], requires_grad=true)\nw = randn([130], requires_grad=true)\nb0 = autograd_stats().bytes\n"
            "h = settle(tanh(x * w + 1) * 3)\nprint(autograd_stats().bytes - b0, h.grad_fn)\n")
    rc, so, se = harness.run_nabla(code)
    got = so.split()
    full = 150 * 130 * 4
    # held: the saved tanh output, and x and w (the mul's formula reads them); 4 full buffers when mul and add were saved too
    ok = rc == 0 and len(got) == 2 and got[1] == "FusedBackward" and int(got[0]) == 2 * full + 130 * 4
    check("fuse_autograd.onepass.saves_tanh_output_only", ok, f"rc={rc} held bytes, grad_fn: {got} (want {2 * full + 130 * 4})")


def error_checks():
    """an input the backward reads, written in place after the chain: the same error both ways"""
    code = ("x = randn([150, 130], requires_grad=true)\na = x * 1\nmust = fuse_stats()\n"
            "y = a * a * 3\na.add_(1)\nbackward(sum(y))\nprint(\"unreached\")\n")
    for mode in ("1", "0"):
        os.environ["NABLA_FUSE"] = mode
        rc, so, se = harness.run_nabla(code)
        check(f"fuse_autograd.errors.inplace_input[NABLA_FUSE={mode}]", rc != 0 and "in place" in se and "unreached" not in so,
              f"rc={rc} stderr={se.strip()[-300:]!r}")
    os.environ.pop("NABLA_FUSE", None)


def mlp_batch():
    """a 3-layer MLP, 3 SGD steps in f64: loss and parameters as torch, fused and unfused alike"""
    b = Batch("fuse_autograd.mlp")
    n, d, hdim, k = 256, 96, 128, 10
    xa = rng.standard_normal((n, d))
    ya = rng.integers(0, k, n)
    Ws = [rng.standard_normal(s) * 0.1 for s in ((d, hdim), (hdim, hdim), (hdim, k))]
    Bs = [rng.standard_normal(s) * 0.1 for s in ((hdim,), (hdim,), (k,))]
    names = [b.inp(a) for a in Ws + Bs]
    x, y = b.inp(xa), b.inp(ya)
    tp = [T(a, True) for a in Ws + Bs]
    losses = []
    for _ in range(3):
        h = F.gelu(T(xa) @ tp[0] + tp[3]) * 1.5
        h = torch.tanh(h @ tp[1] + tp[4]) * 0.5 + h * 0.25
        logits = h @ tp[2] + tp[5]
        loss = F.cross_entropy(logits, T(ya))
        losses.append(loss.item())
        gs = torch.autograd.grad(loss, tp)
        with torch.no_grad():
            for p, gp in zip(tp, gs):
                p -= 0.1 * gp
    b.raw("fn mlp_loss(p, x, y) {\n h = gelu(x @ p[0] + p[3]) * 1.5\n h = tanh(h @ p[1] + p[4]) * 0.5 + h * 0.25\n"
          " cross_entropy(h @ p[2] + p[5], y)\n}")
    code = (f"p = [{', '.join(names)}]\nls = []\nstep = value_and_grad(mlp_loss)\n"
            f"for i in range(3) {{\n vg = step(p, {x}, {y})\n push(ls, vg[0])\n"
            f" q = []\n for j in range(6) {{ push(q, p[j] - vg[1][j] * 0.1) }}\n p = q\n}}\nlist(stack(ls), p[0], p[1], p[2], p[3], p[4], p[5])")
    b.case("sgd_3_steps", code, [torch.tensor(losses, dtype=torch.float64)] + [t.detach() for t in tp], rtol=1e-9, atol=1e-11)
    b.case("stats", STATS, lambda got: None)
    return b


# (batch, chains fused at least, backward passes in one pass at least: the rest fell back, e.g. pow)
for mk, min_forced, min_onepass in ((ops_batch, 50, 120), (payload_batch, 10, 10), (bf16_batch, 0, 0), (misc_batch, 3, 5),
                                    (mlp_batch, 3, 6), (onepass_batch, 10, 20)):
    bb = mk()
    r = run_both(bb)
    if not r:
        continue
    on, off = r
    stats = {i for i, c in enumerate(bb.cases) if c.name == "stats"}
    named = {i for i, c in enumerate(bb.cases) if c.name == "grad_fn"}
    judge(bb, on, off, stats | named)
    for i in named:
        got_on, got_off = on.get(f"c{i}"), off.get(f"c{i}")
        check(f"{bb.title}.grad_fn", got_on == "FusedBackward" and got_off == "MulBackward",
              f"grad_fn fused={got_on!r} unfused={got_off!r} (want FusedBackward / MulBackward)")
    for i in stats:
        f_on, f_off = on.get(f"c{i}"), off.get(f"c{i}")
        ok = f_on is not None and f_off is not None and float(f_on[1]) >= max(min_forced, 1) and float(f_off[1]) == 0
        check(f"{bb.title}.fused_really", ok, f"fuse_stats [pending, forced, dropped] on={f_on} off={f_off} (want forced >= {max(min_forced, 1)} with fusion, 0 without)")
        ok = f_on is not None and f_off is not None and float(f_on[3]) >= min_onepass and float(f_off[3]) == float(f_off[4]) == 0
        check(f"{bb.title}.onepass_backward", ok, f"fuse_stats [.., backward_fused, backward_fallbacks] on={f_on} off={f_off} "
                                                  f"(want >= {min_onepass} one-pass backwards with fusion, none without)")
error_checks()
onepass_counts()
finish()
