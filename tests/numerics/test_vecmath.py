#!/usr/bin/python3
"""The CPU's vector math (tensor/tvecmath*.c, SLEEF) at every vector width
this CPU has (NABLA_VECMATH=scalar, sse2, avx2, avx512: one nabla process per
width), f32 and f64, on edge cases and fresh random data:

- exp, log, log1p, expm1, tanh, erf, sin, cos, pow: every finite input with
  a finite result is checked against the exact value (mpmath, 60 digits) in
  ULPs of the result's type: at most 1.0, SLEEF's documented bound for its
  _u10 functions.  Results that overflow must be inf of the right sign; ±0,
  ±inf and NaN inputs (and pow's C99 special cases) must equal the C library's
  answer bit for bit, zero signs included.  Inputs: ±0, ±inf, NaN, subnormals,
  the overflow/underflow thresholds of exp, large |x| for tanh/exp/sin/cos,
  and random values of every magnitude;
- sigmoid, silu, gelu (erf and tanh forms) and the one-pass backward of tanh,
  sigmoid, silu and gelu against torch in f64, with a tolerance of a few ULPs
  plus the cancellation each formula has (1 + erf(x) for x << 0, 1 - tanh^2);
- softmax, log_softmax and cross_entropy (values and gradients) on rows
  holding -inf, +inf, NaN and huge values, vs torch;
- arrays above the OpenMP threshold (chunked, threaded) vs torch in f64.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_vecmath.py
(VECMATH_WIDTHS="avx2 scalar" picks widths; under NABLA_ASAN, the ASan pass
of tools/run-tests.sh, only the widest and scalar run.)
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, check, finish, rng, torch, np, run_nabla  # noqa: E402
import mpmath  # noqa: E402
import scipy.special  # noqa: E402
import torch.nn.functional as F  # noqa: E402

mpmath.mp.dps = 60
NPDT = {"f32": np.float32, "f64": np.float64}
FINFO = {k: np.finfo(v) for k, v in NPDT.items()}
# the smallest subnormal: the spacing of results that underflow
TINY = {"f32": 2.0 ** -149, "f64": 2.0 ** -1074}
MANT = {"f32": 23, "f64": 52}
# SLEEF's bound for its _u10 functions, 1.0 ULP as its tables print it (to 4
# digits: tanhf(7.3e-8) is 1.00000003 ULP off)
ULP_MAX = 1.0001


def widths():
    """The vector widths tvecmath.c can pick on this CPU."""
    flags = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = line.split()
                break
    w = ["scalar"]
    if os.uname().machine == "x86_64":
        w.append("sse2")
        if "avx2" in flags and "fma" in flags:
            w.append("avx2")
            if "avx512f" in flags:
                w.append("avx512")
    return w


# ---- inputs -------------------------------------------------------------------
def edge(dt):
    big = [20.0, 50.0, 88.5, 88.72, 88.73, 89.0, 103.9, 104.0, 1e4, 1e6, 1e20, 1e30, 1e35]
    sub = [1e-40, 1.4e-45, 1.1754942e-38, 1.1754945e-38]
    if dt == "f64":
        big += [700.0, 709.78, 709.79, 745.1, 745.2, 1e15, 1e100, 1e300, 1e305, 1e308]
        sub = [1e-310, 5e-324, 2.2250738585072009e-308, 2.2250738585072014e-308]
    mags = [0.0, 1e-30, 1e-8, 0.5, 1.0, 2.0, 3.0, 9.0] + big + sub + [float(FINFO[dt].max)]
    vals = [m * s for m in mags for s in (1.0, -1.0)] + [math.inf, -math.inf, math.nan]
    return np.array(vals, dtype=NPDT[dt])


def random_mix(dt, n):
    """normal, wide uniform and log-uniform magnitudes of both signs"""
    k = n // 3
    a = rng.standard_normal(k) * 3
    b = rng.uniform(-120, 120, k)
    c = np.exp(rng.uniform(-60, 60, n - 2 * k)) * rng.choice([-1.0, 1.0], n - 2 * k)
    return np.concatenate([a, b, c]).astype(NPDT[dt])


# ---- references -----------------------------------------------------------------
MP = {"exp": mpmath.exp, "log": mpmath.log, "log1p": mpmath.log1p, "expm1": mpmath.expm1,
      "tanh": mpmath.tanh, "erf": mpmath.erf, "sin": mpmath.sin, "cos": mpmath.cos}
LIBM = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "tanh": np.tanh,
        "erf": scipy.special.erf, "sin": np.sin, "cos": np.cos}


def ulp_error(got, exact, dt):
    """|got - exact| in units of the last place of `exact` in dt"""
    ax = abs(exact)
    if ax == 0:
        return abs(float(got)) / TINY[dt]
    e = int(mpmath.floor(mpmath.log(ax, 2)))
    e = max(e, FINFO[dt].minexp)
    return float(abs(mpmath.mpf(float(got)) - exact) / mpmath.mpf(2) ** (e - MANT[dt]))


def same_bits(g, e):
    """equal, NaN for NaN, and zeros of the same sign"""
    if math.isnan(e):
        return math.isnan(g)
    return g == e and math.copysign(1.0, g) == math.copysign(1.0, e)


def exact_checker(dt, x, exact_of, libm):
    """got -> None | why, for elementwise results of inputs x (tuples for pow):
    specials bit-exact vs libm (computed in f64, then rounded to dt), finite
    results within ULP_MAX of exact_of(x)"""
    ref = np.asarray(libm, dtype=np.float64).astype(NPDT[dt])
    memo = {}   # exact values, computed once for all widths

    def exact(i, xi):
        if i not in memo:
            memo[i] = exact_of(*xi)
        return memo[i]

    def chk(got):
        g = np.asarray(got, dtype=np.float64).reshape(-1)
        if g.shape != ref.shape:
            return f"shape {g.shape} != {ref.shape}"
        worst = (0.0, None)
        for i in range(len(ref)):
            xi = tuple(float(v[i]) for v in x)
            special = any(not math.isfinite(v) or v == 0 for v in xi) or not math.isfinite(ref[i])
            if special:
                if not same_bits(g[i], float(ref[i])):
                    return f"at x={xi}: got {g[i]!r}, want {float(ref[i])!r}"
                continue
            ex = exact(i, xi)
            if ex is None:                       # outside the checked domain
                continue
            if isinstance(ex, mpmath.mpc):      # log(-1), pow(-2, 0.5): NaN
                if not math.isnan(g[i]):
                    return f"at x={xi}: got {g[i]!r}, want nan"
                continue
            r = NPDT[dt](float(ex)) if abs(ex) < mpmath.mpf(10) ** 400 else NPDT[dt](math.copysign(math.inf, float(mpmath.sign(ex))))
            if not np.isfinite(r):               # overflows in dt
                if g[i] != r:
                    return f"at x={xi}: got {g[i]!r}, want {float(r)} (overflow)"
                continue
            u = ulp_error(g[i], ex, dt)
            if u > worst[0]:
                worst = (u, xi)
            if u > ULP_MAX:
                return f"at x={xi}: got {g[i]!r}, exact {mpmath.nstr(ex, 20)}: {u:.3f} ULP > {ULP_MAX:.1f}"
        return None
    return chk


def plain_exact(fn, dt):
    f = MP[fn]

    def ex(x):
        return f(mpmath.mpf(x))
    return ex


def pow_exact(a, b):
    if abs(b) > 1e6 or abs(a) > 1e30 and abs(b) > 100:
        return None   # |result| astronomically far outside the type: covered by the libm class check
    try:
        return mpmath.power(mpmath.mpf(a), mpmath.mpf(b))
    except (OverflowError, ValueError):
        return None


def torch_ref(fn, x, dt, g=None):
    """fn's value (g None) or gradient of sum(fn(x) * g), computed by torch in f64"""
    fns = {"sigmoid": torch.sigmoid, "silu": F.silu, "tanh": torch.tanh,
           "gelu": lambda t: F.gelu(t), "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}
    xt = torch.tensor(x.astype(np.float64), requires_grad=g is not None)
    y = fns[fn](xt)
    if g is None:
        return y.detach().numpy()
    (y * torch.tensor(g.astype(np.float64))).sum().backward()
    return xt.grad.numpy()


def composite_checker(dt, ref, x, g=None, ulps=4):
    """within `ulps` ULPs of the f64 reference, plus the formula's cancellation:
    eps |x| for the values (0.5 x (1 + erf) at x << 0), eps |g| (1 + |x|^3)
    for gradients (1 - tanh^2 u times gelu_tanh's du ~ x^2; |x| capped at 6
    beyond which tanh u rounds to ±1 in f32 and the term vanishes)"""
    eps = float(FINFO[dt].eps)
    r32 = ref.astype(NPDT[dt]).astype(np.float64)
    ax = np.abs(x.astype(np.float64))
    slack = eps * ax if g is None else eps * np.abs(g.astype(np.float64)) * (1 + np.minimum(ax, 6) ** 3)

    def chk(got):
        gg = np.asarray(got, dtype=np.float64).reshape(ref.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            sp = np.spacing(np.abs(r32).astype(NPDT[dt])).astype(np.float64)
            err = np.abs(gg - r32)
            ok = (err <= ulps * sp + 4 * slack) | (np.isnan(gg) & np.isnan(r32)) | (gg == r32)
        if not ok.all():
            i = int(np.argmin(ok))
            return f"at x={float(x[i])!r}: got {gg[i]!r}, want {r32[i]!r} (err {err[i]:.3g}, {err[i] / sp[i]:.1f} ULP)"
        return None
    return chk


def ulp_vs(ref, dt, ulps):
    """elementwise within `ulps` ULPs of ref (f64, rounded to dt), NaN for NaN"""
    r = ref.astype(NPDT[dt]).astype(np.float64)

    def chk(got):
        gg = np.asarray(got, dtype=np.float64).reshape(r.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            sp = np.spacing(np.abs(r).astype(NPDT[dt])).astype(np.float64)
            ok = (np.abs(gg - r) <= ulps * sp) | (np.isnan(gg) & np.isnan(r)) | (gg == r)
        if not ok.all():
            i = int(np.argmin(ok))
            return f"[{i}]: got {gg[i]!r}, want {r[i]!r} ({abs(gg[i] - r[i]) / sp[i]:.2f} ULP > {ulps})"
        return None
    return chk


def rowwise_checker(ref, x, dt):
    """softmax-family values: log_softmax's x - lse cancels, so each row is
    allowed 4 ULPs of its largest finite |x| (and 1e-5 relative) as absolute
    error; NaN for NaN and infinities exactly"""
    eps = float(FINFO[dt].eps)
    with np.errstate(invalid="ignore"):
        fin = np.where(np.isfinite(x), np.abs(x.astype(np.float64)), 0)
    slack = 4 * eps * np.maximum(1, fin.max(axis=-1, keepdims=True))

    def chk(got):
        g = np.asarray(got, dtype=np.float64).reshape(ref.shape)
        with np.errstate(invalid="ignore"):
            ok = (np.abs(g - ref) <= 1e-5 * np.abs(ref) + slack) | (np.isnan(g) & np.isnan(ref)) | (g == ref)
        if not ok.all():
            i = np.unravel_index(int(np.argmin(ok)), ok.shape)
            return f"at {i}: got {g[i]!r}, want {ref[i]!r} (row slack {float(slack[i[0], 0]):.3g})"
        return None
    return chk


def softmax_grad_checker(ref, p, g, dt):
    """softmax-family gradients: log_softmax's g - p S and softmax's
    p (g - <p, g>) subtract a row reduction S = sum g (or <p, g>), so each
    element is allowed 4 ULPs of max|g| + |S| as absolute error, plus p times
    the reduction's own rounding (eps sum|g|); 1e-5 relative besides"""
    eps = float(FINFO[dt].eps)
    g64 = g.astype(np.float64)
    row_s = np.abs(g64.sum(axis=-1, keepdims=True))
    slack = 4 * eps * (np.abs(g64).max(axis=-1, keepdims=True) + row_s) \
        + eps * np.nan_to_num(p) * np.abs(g64).sum(axis=-1, keepdims=True)

    def chk(got):
        gg = np.asarray(got, dtype=np.float64).reshape(ref.shape)
        with np.errstate(invalid="ignore"):
            ok = (np.abs(gg - ref) <= 1e-5 * np.abs(ref) + slack) | (np.isnan(gg) & np.isnan(ref)) | (gg == ref)
        if not ok.all():
            i = np.unravel_index(int(np.argmin(ok)), ok.shape)
            return f"at {i}: got {gg[i]!r}, want {ref[i]!r} (err {abs(gg[i] - ref[i]):.3g}, slack {float(slack[i]):.3g})"
        return None
    return chk


# ---- cases (built once, run at every width) ------------------------------------------
PLAIN = ["exp", "log", "log1p", "expm1", "tanh", "erf", "sin", "cos"]
COMPOSITE = {"sigmoid": "sigmoid({x})", "silu": "silu({x})", "gelu": "gelu({x})",
             "gelu_tanh": 'gelu({x}, approximate="tanh")'}
GRADS = {"tanh": "tanh(t)", "sigmoid": "sigmoid(t)", "silu": "silu(t)", "gelu": "gelu(t)",
         "gelu_tanh": 'gelu(t, approximate="tanh")'}
BIG = 100003          # above NT_OMP_THRESHOLD, not a multiple of any vector width

specs = []            # (name, [input arrays], code with {0}, {1}.. for the inputs, checker)
with np.errstate(all="ignore"):
    for dt in ("f32", "f64"):
        x = np.concatenate([edge(dt), random_mix(dt, 1501)])
        for fn in PLAIN:
            specs.append((f"{fn}_{dt}", [x], f"{fn}({{0}})", exact_checker(dt, [x], plain_exact(fn, dt), LIBM[fn](x.astype(np.float64)))))
        # pow: every pair of a small edge set, then random positive bases
        base = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -8.0, 10.0, 1e-3, math.inf, -math.inf, math.nan, 1e-40 if dt == "f32" else 1e-310], dtype=NPDT[dt])
        expo = np.array([0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, 1 / 3, 2.5, 1e3, math.inf, -math.inf, math.nan], dtype=NPDT[dt])
        a, b = np.meshgrid(base, expo)
        a, b = a.reshape(-1), b.reshape(-1)
        ra = np.exp(rng.uniform(-20, 20, 600)).astype(NPDT[dt])
        rb = rng.uniform(-8, 8, 600).astype(NPDT[dt])
        pa, pb = np.concatenate([a, ra]), np.concatenate([b, rb])
        specs.append((f"pow_{dt}", [pa, pb], "{0} ** {1}",
                      exact_checker(dt, [pa, pb], pow_exact, np.power(pa.astype(np.float64), pb.astype(np.float64)))))
        s = np.float64(2.5)
        specs.append((f"pow_scalar_exponent_{dt}", [ra], "{0} ** 2.5",
                      exact_checker(dt, [ra], lambda v: pow_exact(v, 2.5), np.power(ra.astype(np.float64), s))))
        rb2 = np.concatenate([rb, edge(dt)])
        specs.append((f"pow_scalar_base_{dt}", [rb2], "2.0 ** {0}",
                      exact_checker(dt, [rb2], lambda v: pow_exact(2.0, v), np.power(2.0, rb2.astype(np.float64)))))
        # activations: values and one-pass gradients
        fin = x[np.isfinite(x) & (np.abs(x) < 1e6)]
        for fn, code in COMPOSITE.items():
            specs.append((f"{fn}_{dt}", [x], code.format(x="{0}"), composite_checker(dt, torch_ref(fn, x, dt), x)))
        g = rng.standard_normal(len(fin)).astype(NPDT[dt])
        for fn, code in GRADS.items():
            specs.append((f"grad_{fn}_{dt}", [fin, g], f"grad(fn(t) sum({code} * {{1}}))({{0}})",
                          composite_checker(dt, torch_ref(fn, fin, dt, g), fin, g)))
        # big arrays: the chunked, threaded path
        xb = (rng.standard_normal(BIG) * 4).astype(NPDT[dt])
        xp = np.abs(xb) + NPDT[dt](0.01)
        tol = 1.0 if dt == "f32" else 2.0   # f64: torch's own result is within 1 ULP
        for fn in PLAIN:
            arg = xp if fn in ("log", "log1p") else xb
            ref = LIBM[fn](arg.astype(np.float64)) if dt == "f32" else getattr(torch, fn)(torch.tensor(arg)).numpy()
            specs.append((f"{fn}_{dt}_threaded", [arg], f"{fn}({{0}})", ulp_vs(ref, dt, tol)))
        gb = rng.standard_normal(BIG).astype(NPDT[dt])
        for fn in ("gelu", "gelu_tanh", "sigmoid"):
            specs.append((f"grad_{fn}_{dt}_threaded", [xb, gb], f"grad(fn(t) sum({GRADS[fn]} * {{1}}))({{0}})",
                          composite_checker(dt, torch_ref(fn, xb, dt, gb), xb, gb)))
        # softmax family on awkward rows; row lengths off the vector widths
        for n in (37, 90, 512):
            r = (rng.standard_normal((6, n)) * 5).astype(NPDT[dt])
            r[1, 3] = -np.inf
            r[2, :] = -np.inf               # all -inf: NaN, like torch
            r[3, 5] = np.inf
            r[4, 7] = np.nan
            r[5, :4] = np.array([3e38 if dt == "f32" else 1e300, -1e30, 1e30, 0.0], dtype=NPDT[dt])
            rt = torch.tensor(r.astype(np.float64))
            tl = dict(rtol=1e-5, atol=1e-6) if dt == "f32" else dict(rtol=1e-12, atol=1e-13)
            for f in ("softmax", "log_softmax"):
                ref = getattr(torch, f)(rt, -1).numpy()
                specs.append((f"{f}_{dt}_{n}", [r], f"{f}({{0}}, axis=-1)", rowwise_checker(ref, r, dt)))
            fr = r[[0, 1, 5]]
            gw = rng.standard_normal(fr.shape).astype(NPDT[dt])
            for f in ("softmax", "log_softmax"):
                ft = torch.tensor(fr.astype(np.float64), requires_grad=True)
                (getattr(torch, f)(ft, -1) * torch.tensor(gw.astype(np.float64))).sum().backward()
                pr = torch.softmax(torch.tensor(fr.astype(np.float64)), -1).numpy()
                specs.append((f"grad_{f}_{dt}_{n}", [fr, gw], f"grad(fn(t) sum({f}(t, axis=-1) * {{1}}))({{0}})",
                              softmax_grad_checker(ft.grad.numpy(), pr, gw, dt)))
            xe = (rng.standard_normal((33, n)) * 6).astype(NPDT[dt])
            tg = rng.integers(0, n, 33)
            ft = torch.tensor(xe.astype(np.float64), requires_grad=True)
            loss = F.cross_entropy(ft, torch.tensor(tg))
            loss.backward()
            specs.append((f"cross_entropy_{dt}_{n}", [xe, tg], "cross_entropy({0}, {1})",
                          (np.array(float(loss), dtype=NPDT[dt]), tl)))
            specs.append((f"grad_cross_entropy_{dt}_{n}", [xe, tg], "grad(fn(t) cross_entropy(t, {1}))({0})",
                          (ft.grad.numpy().astype(NPDT[dt]), tl)))


def run_width(w):
    os.environ["NABLA_VECMATH"] = w
    rc, out, err = run_nabla('print(exp(ones(3)).sum().item())')
    check(f"vecmath_{w}.selected", rc == 0 and "NABLA_VECMATH" not in err,
          f"NABLA_VECMATH={w} not taken: rc {rc}, {err.strip()[-200:]}")
    b = Batch(f"vecmath_{w}")
    for name, arrays, code, chk in specs:
        names = [b.inp(a) for a in arrays]
        src = code.format(*names)
        if isinstance(chk, tuple):
            b.case(name, src, chk[0], **chk[1])
        else:
            b.case(name, src, chk)
    b.run()


WIDTHS = (os.environ.get("VECMATH_WIDTHS") or "").split() or widths()
if os.environ.get("NABLA_ASAN"):   # the ASan pass of tools/run-tests.sh: the widest and scalar
    WIDTHS = sorted({WIDTHS[0], WIDTHS[-1]}, key=WIDTHS.index)
for w in WIDTHS:
    run_width(w)
os.environ.pop("NABLA_VECMATH", None)
finish()
