#!/usr/bin/python3
"""Issue 30's completion of stdlib/distributions.nbl, against torch 1.13 on
fresh random parameters:
  - standard_gamma_grad / dirichlet_grad (torch._standard_gamma_grad,
    torch._dirichlet_grad) at points spread over every approximation region,
    f32 and f64;
  - rsample of Gamma, Dirichlet, Beta: d sum(x W) / d parameters for the very
    samples nabla drew, against torch's backward formulas evaluated at them;
  - a statistical check of the reparameterisation: the per-sample gradients
    f'(x) dx/da average to d E[f(x)] / da (analytic), by a z-test at |z| < 6
    (two-sided p < 2e-9 each; the approximations' bias is far below the
    standard errors at these sample sizes);
  - igamma / igammac (torch.special.gammainc / gammaincc) and Gamma.cdf;
  - Chi2 and StudentT (log_prob, entropy, moments, rsample gradients, KL as a Gamma);
  - Binomial.entropy (torch's enumeration), the cross-family kl_divergence
    pairs torch registers, with their gradients;
  - abs of complex tensors beyond the range where re^2 + im^2 overflows, with
    inf/NaN as torch.

Without NUMERICS_DEVICE the suite runs again on the emulated CUDA device
with a cross-section (REPARAM_SUBSET=1).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_dist_reparam.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np, DEVICE, report_fail, emulated_rerun  # noqa: E402
import scipy.special as sp  # noqa: E402
import mpmath  # noqa: E402

D = torch.distributions
PRE = "import distributions\nD = distributions\n"
F64 = dict(rtol=1e-8, atol=1e-10)
SMALL = os.environ.get("REPARAM_SUBSET") == "1" or os.environ.get("NABLA_ASAN") == "1"
Z = 6.0


def loguniform(lo, hi, shape):
    return np.exp(rng.uniform(math.log(lo), math.log(hi), shape))


# ------------------------------------------------------------------ the gradient functions
def grad_fn_cases(b):
    # alpha over (0.05, 40) and x drawn from Gamma(alpha): every region (x < 0.8; alpha > 8 near the
    # mode and away from it; the rational fit in between) gets points
    n = 64 if SMALL else 400
    a = loguniform(0.05, 40, n)
    x = rng.gamma(a)
    x = np.maximum(x, 1e-300)
    want = torch._standard_gamma_grad(T(a), T(x))
    b.case("standard_gamma_grad_f64", f"standard_gamma_grad({b.inp(a)}, {b.inp(x)})", want, **F64)
    a32, x32 = a.astype(np.float32), np.maximum(x.astype(np.float32), np.float32(1e-30))
    want32 = torch._standard_gamma_grad(T(a32.astype(np.float64)), T(x32.astype(np.float64))).float()
    b.case("standard_gamma_grad_f32", f"standard_gamma_grad({b.inp(a32)}, {b.inp(x32)})", want32, rtol=1e-5, atol=1e-6)
    # broadcasting: one alpha per row
    a2, x2 = loguniform(0.2, 20, (3, 1)), rng.gamma(2.0, size=(3, 5))
    b.case("standard_gamma_grad_bcast", f"standard_gamma_grad({b.inp(a2)}, {b.inp(x2)})",
           torch._standard_gamma_grad(T(np.broadcast_to(a2, (3, 5)).copy()), T(x2)), **F64)
    # Dirichlet: x ~ Beta(alpha, total - alpha) for alpha, beta over (0.05, 30): near 0, near 1, both large, the rational fit
    al, be = loguniform(0.05, 30, n), loguniform(0.05, 30, n)
    xb = np.clip(rng.beta(al, be), 1e-12, 1 - 1e-12)
    tot = al + be
    b.case("dirichlet_grad_f64", f"dirichlet_grad({b.inp(xb)}, {b.inp(al)}, {b.inp(tot)})",
           torch._dirichlet_grad(T(xb), T(al), T(tot)), rtol=1e-7, atol=1e-10)
    b.error("standard_gamma_grad_int", "standard_gamma_grad(tensor([1, 2]), tensor([1.0, 2.0]))", ["standard_gamma_grad", "floating"])
    b.error("standard_gamma_grad_shapes", "standard_gamma_grad(ones(3), ones(4))", ["standard_gamma_grad", "broadcast"])


# ------------------------------------------------------------------ rsample gradients at nabla's samples
def rsample_cases(b):
    # Gamma(a, r): x = z / r, z ~ Gamma(a): dx/da = standard_gamma_grad(a, z) / r, dx/dr = -x / r
    a, r, W = loguniform(0.1, 15, (2, 3)), loguniform(0.3, 3, (2, 3)), rng.standard_normal((7, 2, 3))
    A, R, WW = b.inp(a), b.inp(r), b.inp(W)

    def gamma_chk(got):
        x, (ga, gr) = np.asarray(got[0]), got[1]
        z = x * r
        ea = (W * torch._standard_gamma_grad(T(np.broadcast_to(a, x.shape).copy()), T(z)).numpy() / r).sum(0)
        er = (W * -x / r).sum(0)
        if not (np.allclose(ga, ea, rtol=1e-8, atol=1e-10) and np.allclose(gr, er, rtol=1e-8, atol=1e-10)):
            return f"Gamma rsample gradient differs: {np.asarray(ga)} vs {ea}, {np.asarray(gr)} vs {er}"
        return None
    b.case("rsample_gamma_grad", f"seed(11)\nx = D.Gamma({A}, {R}).rsample(7)\n"
           f"list(x, grad(fn(a, r) {{ seed(11); sum(D.Gamma(a, r).rsample(7) * {WW}) }}, argnums=list(0, 1))({A}, {R}))", gamma_chk)

    # Dirichlet(c): torch's _Dirichlet_backward at the sample
    c, Wd = loguniform(0.2, 12, (2, 4)), rng.standard_normal((5, 2, 4))
    C, WD = b.inp(c), b.inp(Wd)

    def dir_chk(got):
        x, g = np.asarray(got[0]), np.asarray(got[1])
        cb = T(np.broadcast_to(c, x.shape).copy())
        e = torch.distributions.dirichlet._Dirichlet_backward(T(x), cb, T(Wd)).numpy().sum(0)
        if not np.allclose(g, e, rtol=1e-8, atol=1e-10):
            return f"Dirichlet rsample gradient differs: {g} vs {e}"
        if not np.allclose(x.sum(-1), 1, atol=1e-12):
            return "Dirichlet samples do not sum to 1"
        return None
    b.case("rsample_dirichlet_grad", f"seed(12)\nx = D.Dirichlet({C}).rsample(5)\n"
           f"list(x, grad(fn(c) {{ seed(12); sum(D.Dirichlet(c).rsample(5) * {WD}) }})({C}))", dir_chk)

    # Beta(c1, c0): the first coordinate of Dirichlet([c1, c0]), as torch's Beta.rsample
    c1, c0, Wb = loguniform(0.2, 12, (3,)), loguniform(0.2, 12, (3,)), rng.standard_normal((6, 3))
    C1, C0, WB = b.inp(c1), b.inp(c0), b.inp(Wb)

    def beta_chk(got):
        x, (g1, g0) = np.asarray(got[0]), got[1]
        X = np.stack([x, 1 - x], -1)
        cc = T(np.broadcast_to(np.stack([c1, c0], -1), X.shape).copy())
        go = np.stack([Wb, np.zeros_like(Wb)], -1)
        e = torch.distributions.dirichlet._Dirichlet_backward(T(X), cc, T(go)).numpy().sum(0)
        if not (np.allclose(g1, e[:, 0], rtol=1e-8, atol=1e-10) and np.allclose(g0, e[:, 1], rtol=1e-8, atol=1e-10)):
            return f"Beta rsample gradient differs: {np.asarray(g1)}, {np.asarray(g0)} vs {e}"
        return None
    b.case("rsample_beta_grad", f"seed(13)\nx = D.Beta({C1}, {C0}).rsample(6)\n"
           f"list(x, grad(fn(p, q) {{ seed(13); sum(D.Beta(p, q).rsample(6) * {WB}) }}, argnums=list(0, 1))({C1}, {C0}))", beta_chk)
    # sample() stays without a gradient; rsample's values are sample()'s law (the same draw for one seed)
    b.case("gamma_sample_no_grad", f"a = {A}\na.requires_grad = true\nlist(D.Gamma(a, 1.0).sample(3).requires_grad, D.Gamma(a, 1.0).rsample(3).requires_grad)", [False, True])
    b.case("gamma_rsample_values", f"seed(5)\nx = D.Gamma({A}, {R}).rsample(4)\nseed(5)\ny = D.Gamma({A}, {R}).sample(4)\nx - y",
           torch.zeros(4, 2, 3, dtype=torch.float64), rtol=0, atol=0)


# ------------------------------------------------------------------ E[d f(x)/da] = d E[f(x)]/da
def zcheck(target, label):
    def chk(got):
        g = np.asarray(got, dtype=np.float64).ravel()
        n = len(g)
        m, se = g.mean(), g.std(ddof=1) / math.sqrt(n)
        z = (m - target) / se
        return None if abs(z) <= Z else f"{label}: mean gradient {m:.6g} vs d E/da {target:.6g} (z {z:.2f}, se {se:.3g})"
    return chk


def statistics_cases(b):
    if DEVICE != "cpu":   # the laws, not the device: the emulated device checks the kernel's values above
        return
    n = 20000 if SMALL else 100000
    alphas = [0.35, 2.5, 14.0] if not SMALL else [0.35, 14.0]
    for i, a in enumerate(alphas):
        # f(x) = x: E = a / rate, d/da = 1 / rate; f(x) = log x: E = psi(a) - log rate, d/da = psi'(a)
        rate = 1.7
        code = f"seed({200 + i})\na = full(list({n}), {a}, dtype=\"f64\")\n"
        b.case(f"stat_gamma_x_a{a}", code + f"grad(fn(a) sum(D.Gamma(a, {rate}).rsample()))(a)", zcheck(1 / rate, f"Gamma({a}) E[x]"))
        b.case(f"stat_gamma_logx_a{a}", code + f"grad(fn(a) sum(log(D.Gamma(a, {rate}).rsample())))(a)",
               zcheck(float(sp.polygamma(1, a)), f"Gamma({a}) E[log x]"))
    # Beta(p, q): E[x] = p / (p + q), d/dp = q / (p + q)^2; Dirichlet's first coordinate is the same law
    for i, (p, q) in enumerate([(0.6, 2.0), (9.0, 7.5)]):
        code = f"seed({300 + i})\np = full(list({n}), {p}, dtype=\"f64\")\n"
        b.case(f"stat_beta_x_{p}_{q}", code + f"grad(fn(p) sum(D.Beta(p, {q}).rsample()))(p)", zcheck(q / (p + q) ** 2, f"Beta({p}, {q}) E[x]"))
    # StudentT(df): E[y^2] = df / (df - 2), d/d df = -2 / (df - 2)^2 (through the Chi2's implicit gradient)
    dfv = 9.0
    b.case("stat_studentt_y2", f"seed(500)\nd = full(list({n}), {dfv}, dtype=\"f64\")\ngrad(fn(d) sum(D.StudentT(d).rsample() ** 2))(d)",
           zcheck(-2 / (dfv - 2) ** 2, f"StudentT({dfv}) E[y^2]"))
    c = [0.8, 2.0, 3.5]
    s = sum(c)
    # d E[x_0] / d c_0 = (s - c_0) / s^2, averaged over the batch of n copies
    b.case("stat_dirichlet_x0", f"seed(400)\nc = broadcast_to(tensor({c}, dtype=\"f64\"), list({n}, 3))\n"
           f"g = grad(fn(c) sum(D.Dirichlet(c).rsample()[:, 0]))(c)\ng[:, 0]", zcheck((s - c[0]) / s ** 2, "Dirichlet E[x0] / c0"))


# ------------------------------------------------------------------ igamma / igammac, Gamma.cdf
def igamma_cases(b):
    # random points against mpmath at 30 digits (torch 1.13's Cephes-based gammainc is off by up
    # to ~1.5e-9 relative for large a, our series / continued fraction by ~3e-13); edges against torch
    n = 60 if SMALL else 300
    a = loguniform(0.01, 300, n)
    x = a * loguniform(0.02, 8, n)
    edge_a = np.array([0.0, 0.0, 1.0, 2.0, -1.0, np.nan, 2.0, 3.0, 0.5, 1e-3])
    edge_x = np.array([0.0, 1.0, 0.0, np.inf, 1.0, 1.0, -1.0, np.nan, 1e-300, 50.0])
    mpmath.mp.dps = 30
    for fn, tf in (("igamma", torch.special.gammainc), ("igammac", torch.special.gammaincc)):
        up = fn == "igammac"
        ref = np.array([float(mpmath.gammainc(ai, xi, mpmath.inf, regularized=True) if up else mpmath.gammainc(ai, 0, xi, regularized=True))
                        for ai, xi in zip(a, x)])
        b.case(f"{fn}_f64", f"{fn}({b.inp(a)}, {b.inp(x)})", T(ref), rtol=1e-11, atol=1e-300)
        b.case(f"{fn}_edges", f"{fn}({b.inp(edge_a)}, {b.inp(edge_x)})", tf(T(edge_a), T(edge_x)), rtol=1e-12, atol=1e-300)
        a32, x32 = a.astype(np.float32), x.astype(np.float32)
        b.case(f"{fn}_f32", f"{fn}({b.inp(a32)}, {b.inp(x32)})", tf(T(a32.astype(np.float64)), T(x32.astype(np.float64))).float(), rtol=2e-5, atol=1e-30)
        ga, gx = loguniform(0.2, 20, (2, 3)), loguniform(0.05, 30, (2, 3))
        xt = T(gx.copy(), requires_grad=True)
        W = rng.standard_normal((2, 3))
        (tf(T(ga), xt) * T(W)).sum().backward()
        b.case(f"{fn}_grad_x", f"grad(fn(x) sum({fn}({b.inp(ga)}, x) * {b.inp(W)}))({b.inp(gx)})", xt.grad, rtol=1e-9, atol=1e-14)
        b.error(f"{fn}_grad_a", f"grad(fn(a) sum({fn}(a, {b.inp(gx)})))({b.inp(ga)})", [fn, "derivative in a", "not implemented"])
    c, rt, v = loguniform(0.2, 20, (2, 3)), loguniform(0.3, 3, (2, 3)), loguniform(0.01, 20, (4, 2, 3))
    b.case("gamma_cdf", f"D.Gamma({b.inp(c)}, {b.inp(rt)}).cdf({b.inp(v)})", torch.special.gammainc(T(c), T(rt) * T(v)), rtol=1e-10, atol=1e-300)
    b.error("gamma_cdf_support", "D.Gamma(2.0, 1.0).cdf(-1.0)", ["Gamma.cdf", "support"])


# ------------------------------------------------------------------ Chi2 and StudentT
def chi2_student_cases(b):
    for dt, tol in ((np.float32, dict(rtol=5e-5, atol=5e-5)), (np.float64, dict(rtol=1e-9, atol=1e-10))):
        tn = "f32" if dt == np.float32 else "f64"
        df = np.array([[0.6, 1.0, 1.5], [2.0, 3.5, 12.0]], dtype=dt)      # df <= 1: NaN moments; 1 < df <= 2: infinite variance
        loc, sc = rng.standard_normal((2, 3)).astype(dt), loguniform(0.3, 3, (2, 3)).astype(dt)
        v = (rng.standard_normal((4, 2, 3)) * 3).astype(dt)
        ctor = f"D.StudentT({b.inp(df)}, {b.inp(loc)}, {b.inp(sc)})"
        t = D.StudentT(T(df), T(loc), T(sc))
        for m, want in (("log_prob", t.log_prob(T(v))), ("entropy", t.entropy()), ("mean", t.mean), ("variance", t.variance)):
            code = f"{ctor}.log_prob({b.inp(v)})" if m == "log_prob" else f"{ctor}.{m}()" if m == "entropy" else f"{ctor}.{m}"
            b.case(f"studentt_{m}_{tn}", code, want, **tol)
        c = D.Chi2(T(df))
        cx = loguniform(0.01, 10, (4, 2, 3)).astype(dt)
        for m, want in (("log_prob", c.log_prob(T(cx))), ("entropy", c.entropy()), ("mean", c.mean), ("variance", c.variance)):
            code = f"D.Chi2({b.inp(df)}).log_prob({b.inp(cx)})" if m == "log_prob" else f"D.Chi2({b.inp(df)}).{m}()" if m == "entropy" else f"D.Chi2({b.inp(df)}).{m}"
            b.case(f"chi2_{m}_{tn}", code, want, **tol)
    # Chi2.rsample: x = 2 z, z ~ Gamma(df / 2): dx / d df = standard_gamma_grad(df / 2, x / 2)
    df, W = loguniform(0.5, 20, (3,)), rng.standard_normal((5, 3))
    DF, WW = b.inp(df), b.inp(W)

    def chi2_chk(got):
        x, g = np.asarray(got[0]), np.asarray(got[1])
        e = (W * torch._standard_gamma_grad(T(np.broadcast_to(df / 2, x.shape).copy()), T(x / 2)).numpy()).sum(0)
        return None if np.allclose(g, e, rtol=1e-8, atol=1e-10) else f"Chi2 rsample gradient differs: {g} vs {e}"
    b.case("rsample_chi2_grad", f"seed(21)\nx = D.Chi2({DF}).rsample(5)\nlist(x, grad(fn(d) {{ seed(21); sum(D.Chi2(d).rsample(5) * {WW}) }})({DF}))", chi2_chk)
    # StudentT.rsample's pathwise gradients in loc and scale
    loc, sc, W2 = rng.standard_normal(3), loguniform(0.3, 3, (3,)), rng.standard_normal((5, 3))
    L, S, W2W = b.inp(loc), b.inp(sc), b.inp(W2)

    def st_chk(got):
        y, (gl, gs) = np.asarray(got[0]), got[1]
        el, es = W2.sum(0), (W2 * (y - loc) / sc).sum(0)
        return None if np.allclose(gl, el, rtol=1e-10, atol=1e-10) and np.allclose(gs, es, rtol=1e-10, atol=1e-10) else "StudentT pathwise gradient differs"
    b.case("rsample_studentt_pathwise", f"seed(22)\ny = D.StudentT({DF}, {L}, {S}).rsample(5)\n"
           f"list(y, grad(fn(l, s) {{ seed(22); sum(D.StudentT({DF}, l, s).rsample(5) * {W2W}) }}, argnums=list(0, 1))({L}, {S}))", st_chk)
    for pn, qn, mk in (("Chi2", "Chi2", lambda: (D.Chi2(T(loguniform(0.5, 9, 3))), D.Chi2(T(loguniform(0.5, 9, 3))))),
                       ("Chi2", "Gamma", lambda: (D.Chi2(T(loguniform(0.5, 9, 3))), D.Gamma(T(loguniform(0.5, 9, 3)), T(loguniform(0.5, 3, 3))))),
                       ("Gamma", "Chi2", lambda: (D.Gamma(T(loguniform(0.5, 9, 3)), T(loguniform(0.5, 3, 3))), D.Chi2(T(loguniform(0.5, 9, 3))))),
                       ("Chi2", "Normal", lambda: (D.Chi2(T(loguniform(0.5, 9, 3))), D.Normal(T(rng.standard_normal(3)), T(loguniform(0.5, 3, 3))))),
                       ("Chi2", "Exponential", lambda: (D.Chi2(T(loguniform(0.5, 9, 3))), D.Exponential(T(loguniform(0.5, 3, 3)))))):
        p, q = mk()

        def nb(d):
            if isinstance(d, D.Chi2):
                return f"D.Chi2({b.inp(d.df.numpy())})"
            if isinstance(d, D.Gamma):
                return f"D.Gamma({b.inp(d.concentration.numpy())}, {b.inp(d.rate.numpy())})"
            if isinstance(d, D.Normal):
                return f"D.Normal({b.inp(d.loc.numpy())}, {b.inp(d.scale.numpy())})"
            return f"D.Exponential({b.inp(d.rate.numpy())})"
        b.case(f"kl_{pn}_{qn}", f"D.kl_divergence({nb(p)}, {nb(q)})", D.kl_divergence(p, q), rtol=1e-9, atol=1e-10)


# ------------------------------------------------------------------ Binomial entropy
def binomial_entropy_cases(b):
    for dt, tol in ((np.float32, dict(rtol=5e-5, atol=5e-5)), (np.float64, dict(rtol=1e-9, atol=1e-10))):
        tn = "f32" if dt == np.float32 else "f64"
        n = int(rng.integers(1, 30))
        p = rng.uniform(0.02, 0.98, (2, 3)).astype(dt)
        b.case(f"binomial_entropy_{tn}", f"D.Binomial({n}, probs={b.inp(p)}).entropy()",
               D.Binomial(n, probs=T(p)).entropy(), **tol)
        lg = rng.standard_normal((4,)).astype(dt) * 3
        b.case(f"binomial_entropy_logits_{tn}", f"D.Binomial({n}, logits={b.inp(lg)}).entropy()",
               D.Binomial(n, logits=T(lg)).entropy(), **tol)
    p = rng.uniform(0.05, 0.95, (3,))
    pt = T(p.copy(), requires_grad=True)
    D.Binomial(7, probs=pt).entropy().sum().backward()
    b.case("binomial_entropy_grad", f"grad(fn(p) sum(D.Binomial(7, probs=p).entropy()))({b.inp(p)})", pt.grad, **F64)
    b.case("binomial_entropy_n0", "D.Binomial(0, probs=tensor([0.3, 0.6], dtype=\"f64\")).entropy()", torch.zeros(2, dtype=torch.float64))
    b.error("binomial_entropy_inhomogeneous", "D.Binomial(tensor([3.0, 4.0]), probs=0.5).entropy()", ["Binomial.entropy", "total_count"])


# ------------------------------------------------------------------ cross-family KL
def families(dt):
    B = (2, 3)
    pos = lambda lo=0.3, hi=3.0: rng.uniform(lo, hi, B).astype(dt)  # noqa: E731
    rn = lambda: rng.standard_normal(B).astype(dt)  # noqa: E731
    return {
        "Normal": ("D.Normal({0}, {1})", D.Normal, lambda: [rn(), pos()]),
        "Laplace": ("D.Laplace({0}, {1})", D.Laplace, lambda: [rn(), pos()]),
        "Exponential": ("D.Exponential({0})", D.Exponential, lambda: [pos()]),
        "Gamma": ("D.Gamma({0}, {1})", D.Gamma, lambda: [pos(), pos()]),
        "Beta": ("D.Beta({0}, {1})", D.Beta, lambda: [pos(), pos()]),
        # Uniform's support inside (0, 1) for Beta, inside (0, inf) for Exponential/Gamma: finite KL
        "Uniform": ("D.Uniform({0}, {1})", D.Uniform, lambda: [pos(0.05, 0.4), pos(0.5, 0.95)]),
        "Bernoulli": ("D.Bernoulli(probs={0})", lambda p: D.Bernoulli(probs=p), lambda: [pos(0.05, 0.95)]),
        "Poisson": ("D.Poisson({0})", D.Poisson, lambda: [pos()]),
        "Binomial": ("D.Binomial(5, probs={0})", lambda p: D.Binomial(5, probs=p), lambda: [pos(0.05, 0.95)]),
    }


PAIRS = [("Bernoulli", "Poisson"), ("Beta", "Exponential"), ("Beta", "Gamma"), ("Beta", "Normal"), ("Beta", "Uniform"),
         ("Exponential", "Beta"), ("Exponential", "Uniform"), ("Exponential", "Gamma"), ("Exponential", "Normal"),
         ("Gamma", "Beta"), ("Gamma", "Uniform"), ("Gamma", "Exponential"), ("Gamma", "Normal"),
         ("Laplace", "Beta"), ("Laplace", "Exponential"), ("Laplace", "Gamma"), ("Laplace", "Uniform"), ("Laplace", "Normal"),
         ("Normal", "Beta"), ("Normal", "Exponential"), ("Normal", "Gamma"), ("Normal", "Uniform"), ("Normal", "Laplace"),
         ("Poisson", "Bernoulli"), ("Poisson", "Binomial"),
         ("Uniform", "Beta"), ("Uniform", "Exponential"), ("Uniform", "Gamma"), ("Uniform", "Normal")]


def kl_cases(b):
    dts = [np.float64] if SMALL else [np.float32, np.float64]
    for dt in dts:
        tol = dict(rtol=1e-9, atol=1e-10) if dt == np.float64 else dict(rtol=1e-4, atol=1e-4)
        tn = "f32" if dt == np.float32 else "f64"
        fam = families(dt)
        for pn, qn in PAIRS:
            pf, qf = fam[pn], fam[qn]
            pin, qin = pf[2](), qf[2]()
            if qn == "Uniform" and pn == "Beta":
                qin = [rng.uniform(-2, -0.01, (2, 3)).astype(dt), rng.uniform(1.01, 3, (2, 3)).astype(dt)]
            want = D.kl_divergence(pf[1](*[T(a) for a in pin]), qf[1](*[T(a) for a in qin]))
            code = f"D.kl_divergence({pf[0].format(*[b.inp(a) for a in pin])}, {qf[0].format(*[b.inp(a) for a in qin])})"
            b.case(f"kl_{pn}_{qn}_{tn}", code, want, **tol)
            # gradients of the finite pairs in every parameter (f64; on the CPU: compositions of ops each device has)
            if dt == np.float64 and DEVICE == "cpu" and torch.isfinite(want).all():
                n = len(pin)
                tin = [T(a.copy(), requires_grad=True) for a in pin + qin]
                out = D.kl_divergence(pf[1](*tin[:n]), qf[1](*tin[n:]))
                W = rng.standard_normal(tuple(out.shape))
                (out * T(W)).sum().backward()
                ps = [f"p{i}" for i in range(len(tin))]
                argn = ", ".join(str(i) for i in range(len(tin)))
                exprs = ", ".join(b.inp(a) for a in pin + qin)
                body = f"D.kl_divergence({pf[0].format(*ps[:n])}, {qf[0].format(*ps[n:])})"
                b.case(f"grad_kl_{pn}_{qn}", f"grad(fn({', '.join(ps)}) sum({body} * {b.inp(W)}), argnums=list({argn}))({exprs})",
                       [t.grad if t.grad is not None else torch.zeros_like(t) for t in tin], rtol=1e-7, atol=1e-9)
    # supports that leave q's: infinite, as torch
    for name, code, want in [
        ("kl_uniform_beta_inf", "D.kl_divergence(D.Uniform(-0.5, 0.5), D.Beta(2.0, 2.0))", D.kl_divergence(D.Uniform(-0.5, 0.5), D.Beta(2.0, 2.0))),
        ("kl_uniform_gamma_inf", "D.kl_divergence(D.Uniform(-0.5, 0.5), D.Gamma(2.0, 2.0))", D.kl_divergence(D.Uniform(-0.5, 0.5), D.Gamma(2.0, 2.0))),
        ("kl_uniform_exponential_inf", "D.kl_divergence(D.Uniform(-0.5, 0.5), D.Exponential(2.0))", D.kl_divergence(D.Uniform(-0.5, 0.5), D.Exponential(2.0))),
        ("kl_beta_uniform_inf", "D.kl_divergence(D.Beta(2.0, 3.0), D.Uniform(0.1, 2.0))", D.kl_divergence(D.Beta(2.0, 3.0), D.Uniform(0.1, 2.0))),
    ]:
        b.case(name, code, want)
    b.error("kl_unregistered_cross", "D.kl_divergence(D.Exponential(1.0), D.Laplace(0.0, 1.0))", ["kl_divergence", "Exponential", "Laplace"])


# ------------------------------------------------------------------ abs of complex numbers
# torch 1.13's vectorised CPU abs squares the parts (1e200 + 1e200j gives inf, inf + nan j gives nan)
# while its scalar path is C's hypot (inf); the reference is NumPy's abs, hypot throughout.
def cabs_cases(b):
    inf, nan = float("inf"), float("nan")
    for dt, big, tiny in ((np.float64, 1e200, 1e-200), (np.float32, 1e25, 1e-25)):
        tn = "c128" if dt == np.float64 else "c64"
        pairs = np.array([[big, big], [3 * big, -4 * big], [3 * tiny, 4 * tiny], [inf, nan], [nan, -inf], [nan, 1.0], [1.0, nan],
                          [0.0, 0.0], [-inf, 2.0], [2.0, 0.0], [0.0, -5.0]], dtype=dt)
        pairs = np.concatenate([pairs, (rng.standard_normal((6, 2)) * 10.0 ** rng.integers(-30, 30, (6, 1))).astype(dt)])
        zc = np.empty(len(pairs), np.complex128)
        zc.real, zc.imag = pairs[:, 0], pairs[:, 1]
        want = np.abs(zc).astype(dt)
        b.case(f"abs_{tn}", f"abs(view_as_complex({b.inp(pairs)}))", T(want), rtol=1e-6 if dt == np.float32 else 1e-14, atol=0)
    # the gradient z / |z| (0 at z = 0, as torch) where re^2 would overflow or underflow
    pr = np.array([[3e200, 4e200], [1e-200, -1e-200], [0.0, 0.0], [-2.0, 0.5]])
    h = np.hypot(pr[:, 0], pr[:, 1])
    gz = np.where(h[:, None] > 0, pr / np.where(h > 0, h, 1)[:, None], 0.0)
    b.case("abs_grad_c128", f"view_as_real(grad(fn(z) sum(abs(z)))(view_as_complex({b.inp(pr)})))", T(gz), rtol=1e-14, atol=0)


def main():
    b = Batch("dist_reparam_grads"); b.raw(PRE); grad_fn_cases(b); rsample_cases(b); b.run()
    b = Batch("dist_reparam_stats"); b.raw(PRE); statistics_cases(b); b.run()
    b = Batch("dist_entropy_kl"); b.raw(PRE); binomial_entropy_cases(b); kl_cases(b); igamma_cases(b); chi2_student_cases(b); b.run()
    b = Batch("dist_cabs"); cabs_cases(b); b.run()
    if DEVICE == "cpu" and os.environ.get("NABLA_ASAN") != "1" and not emulated_rerun(__file__, "dist_reparam", "REPARAM_SUBSET"):
        report_fail("dist_reparam.emulated", "the emulated-device run failed (its lines above)")
    finish()


if __name__ == "__main__":
    main()
