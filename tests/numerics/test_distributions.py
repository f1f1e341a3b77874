#!/usr/bin/python3
"""stdlib/distributions.nbl vs torch.distributions on fresh random
parameters: log_prob, entropy, mean, variance, cdf, icdf (f32 and f64,
batched, values broadcast against the batch), gradients of log_prob, entropy
and kl_divergence in the parameters (f64, against torch's), rsample's
pathwise gradient, kl_divergence for every registered pair, the argument and
support errors; then sampling checked statistically with a fixed seed:
means and variances by z-tests at |z| < 6 (two-sided p < 2e-9 each) and the
whole distribution by the Dvoretzky-Kiefer-Wolfowitz bound
P(sup |F_n - F| > eps) <= 2 exp(-2 n eps^2) at 1e-8 per check (a rigorous,
non-asymptotic bound, valid for discrete laws too): with ~60 checks the
suite's chance of a false failure is below 1e-6.

Without NUMERICS_DEVICE the suite runs again on the emulated CUDA device
with a cross-section.

tools/run-tests.sh runs it a second time on the ASan build (NABLA_ASAN=1,
NABLA=build-asan/nabla): the cross-section and the error cases, with 20,000
samples per check instead of 100,000, on the CPU only (make test's budget:
the release pass runs everything).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_distributions.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np, DEVICE, report_fail, emulated_rerun  # noqa: E402
import scipy.stats as st  # noqa: E402

D = torch.distributions
F64 = dict(rtol=1e-9, atol=1e-10)
F32 = dict(rtol=5e-5, atol=5e-5)
TOLS = {np.float32: F32, np.float64: F64}
DTN = {np.float32: "f32", np.float64: "f64"}
PRE = "import distributions\nD = distributions\n"


def pos(*shape, lo=0.3, hi=3.0, dt=np.float64):
    return rng.uniform(lo, hi, shape).astype(dt)


def r(*shape, dt=np.float64):
    return rng.standard_normal(shape).astype(dt)


def spd(n, batch=(), dt=np.float64):
    a = rng.standard_normal(batch + (n, n + 2))
    return (a @ np.swapaxes(a, -1, -2) / (n + 2) + 0.5 * np.eye(n)).astype(dt)


def families(dt):
    """(name, nabla constructor over the inputs, torch constructor, inputs, values in the support)"""
    B = (2, 3)
    p01 = rng.uniform(0.05, 0.95, B).astype(dt)
    probs = rng.uniform(0.1, 1, (2, 4)).astype(dt)
    out = [
        ("Normal", "D.Normal({0}, {1})", D.Normal, [r(*B, dt=dt), pos(*B, dt=dt)], r(4, 2, 3, dt=dt)),
        ("Uniform", "D.Uniform({0}, {0} + {1})", lambda a, w: D.Uniform(a, a + w), [r(*B, dt=dt), pos(*B, dt=dt)], None),
        ("Exponential", "D.Exponential({0})", D.Exponential, [pos(*B, dt=dt)], pos(4, 2, 3, lo=0.01, hi=4, dt=dt)),
        ("Laplace", "D.Laplace({0}, {1})", D.Laplace, [r(*B, dt=dt), pos(*B, dt=dt)], r(4, 2, 3, dt=dt)),
        ("Gamma", "D.Gamma({0}, {1})", D.Gamma, [pos(*B, dt=dt), pos(*B, dt=dt)], pos(4, 2, 3, lo=0.05, hi=5, dt=dt)),
        ("Beta", "D.Beta({0}, {1})", D.Beta, [pos(*B, dt=dt), pos(*B, dt=dt)], rng.uniform(0.02, 0.98, (4, 2, 3)).astype(dt)),
        ("Dirichlet", "D.Dirichlet({0})", D.Dirichlet, [pos(2, 4, dt=dt)], rng.dirichlet(np.ones(4), (3, 2)).astype(dt)),
        ("Bernoulli", "D.Bernoulli(probs={0})", lambda p: D.Bernoulli(probs=p), [p01], (rng.random((4, 2, 3)) < 0.5).astype(dt)),
        ("Bernoulli_logits", "D.Bernoulli(logits={0})", lambda l: D.Bernoulli(logits=l), [r(*B, dt=dt)], (rng.random((4, 2, 3)) < 0.5).astype(dt)),
        ("Categorical", "D.Categorical(probs={0})", lambda p: D.Categorical(probs=p), [probs], rng.integers(0, 4, (3, 2)).astype(np.int64)),
        ("Categorical_logits", "D.Categorical(logits={0})", lambda l: D.Categorical(logits=l), [r(2, 4, dt=dt)], rng.integers(0, 4, (3, 2)).astype(np.int64)),
        ("OneHotCategorical", "D.OneHotCategorical(probs={0})", lambda p: D.OneHotCategorical(probs=p), [probs], np.eye(4, dtype=dt)[rng.integers(0, 4, (3, 2))]),
        ("Poisson", "D.Poisson({0})", D.Poisson, [pos(*B, lo=0.5, hi=30, dt=dt)], rng.integers(0, 30, (4, 2, 3)).astype(dt)),
        ("Binomial", "D.Binomial({0}, probs={1})", lambda n, p: D.Binomial(n, probs=p), [rng.integers(5, 20, B).astype(dt), p01], rng.integers(0, 6, (4, 2, 3)).astype(dt)),
        ("Binomial_logits", "D.Binomial({0}, logits={1})", lambda n, l: D.Binomial(n, logits=l), [rng.integers(5, 20, B).astype(dt), r(*B, dt=dt)], rng.integers(0, 6, (4, 2, 3)).astype(dt)),
        ("LogNormal", "D.LogNormal({0}, {1})", D.LogNormal, [r(*B, dt=dt), pos(*B, dt=dt)], pos(4, 2, 3, lo=0.05, hi=5, dt=dt)),
        ("MVN_cov", "D.MultivariateNormal({0}, covariance_matrix={1})", lambda m, c: D.MultivariateNormal(m, covariance_matrix=c), [r(2, 3, dt=dt), spd(3, (2,), dt=dt)], r(4, 2, 3, dt=dt)),
        ("MVN_tril", "D.MultivariateNormal({0}, scale_tril={1})", lambda m, L: D.MultivariateNormal(m, scale_tril=L),
         [r(3, dt=dt), np.linalg.cholesky(spd(3, (2,))).astype(dt)], r(4, 2, 3, dt=dt)),
        ("MVN_prec", "D.MultivariateNormal({0}, precision_matrix={1})", lambda m, c: D.MultivariateNormal(m, precision_matrix=c), [r(2, 3, dt=dt), spd(3, (2,), dt=dt)], r(4, 2, 3, dt=dt)),
        ("Independent", "D.Independent(D.Normal({0}, {1}), 1)", lambda a, s: D.Independent(D.Normal(a, s), 1), [r(*B, dt=dt), pos(*B, dt=dt)], r(4, 2, 3, dt=dt)),
        ("Transformed", "D.TransformedDistribution(D.Normal({0}, {1}), list(D.AffineTransform(0.5, -2.0), D.SigmoidTransform()))",
         lambda a, s: D.TransformedDistribution(D.Normal(a, s), [D.AffineTransform(0.5, -2.0), D.SigmoidTransform()]),
         [r(*B, dt=dt), pos(*B, dt=dt)], rng.uniform(0.05, 0.95, (4, 2, 3)).astype(dt)),
        ("Transformed_tanh", "D.TransformedDistribution(D.Normal({0}, {1}), D.TanhTransform())",
         lambda a, s: D.TransformedDistribution(D.Normal(a, s), [D.TanhTransform()]),
         [r(*B, dt=dt), pos(*B, dt=dt)], rng.uniform(-0.9, 0.9, (4, 2, 3)).astype(dt)),
        ("Transformed_exp", "D.TransformedDistribution(D.Uniform({0}, {0} + 1), D.ExpTransform())",
         lambda a: D.TransformedDistribution(D.Uniform(a, a + 1), [D.ExpTransform()]), [r(*B, dt=dt)], None),
    ]
    return out


def support_value(name, tin, dt):
    """values inside a Uniform's support"""
    lo = tin[0].numpy()
    if name == "Uniform":
        w = tin[1].numpy()
        return (lo + rng.uniform(0, 1, (4,) + lo.shape) * w).astype(dt)
    return np.exp(lo + rng.uniform(0.01, 0.99, (4,) + lo.shape)).astype(dt)


def value_cases(b, small=False):
    for dt in ([np.float64] if small else [np.float32, np.float64]):
        tol, tn = TOLS[dt], DTN[dt]
        for name, nb, tf, inputs, x in families(dt):
            tin = [T(a) for a in inputs]
            d = tf(*tin)
            if x is None:
                x = support_value(name, tin, dt)
            ctor = nb.format(*[b.inp(a) for a in inputs])
            X = b.inp(x)
            b.case(f"{name}_log_prob_{tn}", f"d = {ctor}\nd.log_prob({X})", d.log_prob(T(x)), **tol)
            for m in ("mean", "variance", "stddev"):
                try:
                    want = getattr(d, m)
                except NotImplementedError:
                    continue
                if name.startswith("Categorical") or name.startswith("Transformed"):
                    continue
                b.case(f"{name}_{m}_{tn}", f"d = {ctor}\nd.{m}", want, **tol)
            try:
                ent = d.entropy()
                b.case(f"{name}_entropy_{tn}", f"d = {ctor}\nd.entropy()", ent, **tol)
            except NotImplementedError:
                pass
            if name in ("Normal", "Uniform", "Exponential", "Laplace", "LogNormal", "Transformed", "Transformed_exp"):
                b.case(f"{name}_cdf_{tn}", f"d = {ctor}\nd.cdf({X})", d.cdf(T(x)), **tol)
                q = rng.uniform(0.02, 0.98, (4, 2, 3)).astype(dt)
                b.case(f"{name}_icdf_{tn}", f"d = {ctor}\nd.icdf({b.inp(q)})", d.icdf(T(q)),
                       **(tol if dt == np.float32 else dict(rtol=1e-8, atol=1e-9)))
            b.case(f"{name}_shapes_{tn}", f"d = {ctor}\nlist(tensor(d.batch_shape + d.event_shape + list(0)), tensor(d.sample(list(5, 1)).shape))",
                   [torch.tensor(list(d.batch_shape) + list(d.event_shape) + [0]), torch.tensor([5, 1] + list(d.batch_shape) + list(d.event_shape))])
        # number parameters take the tensor's dtype; f32 when there is no tensor
        b.case(f"normal_numbers_{tn}", f"D.Normal(0.5, {b.inp(pos(3, dt=dt))}).loc", T(np.full(3, 0.5, dt)))
    b.case("normal_f32_default", "D.Normal(0, 1).log_prob(0.5)", D.Normal(0., 1.).log_prob(torch.tensor(0.5)), **F32)


def kl_pairs(dt):
    B = (2, 3)
    mk = lambda: pos(*B, dt=dt)  # noqa: E731
    p01 = lambda: rng.uniform(0.05, 0.95, B).astype(dt)  # noqa: E731
    n = rng.integers(5, 20, B).astype(dt)
    return [
        ("Normal", "D.Normal({0}, {1})", D.Normal, [r(*B, dt=dt), mk()], [r(*B, dt=dt), mk()]),
        ("Uniform", "D.Uniform({0}, {1})", D.Uniform, [np.full(B, -1.0, dt), np.full(B, 1.0, dt)], [pos(*B, lo=-3, hi=-1, dt=dt), pos(*B, lo=1, hi=3, dt=dt)]),
        ("Exponential", "D.Exponential({0})", D.Exponential, [mk()], [mk()]),
        ("Laplace", "D.Laplace({0}, {1})", D.Laplace, [r(*B, dt=dt), mk()], [r(*B, dt=dt), mk()]),
        ("Gamma", "D.Gamma({0}, {1})", D.Gamma, [mk(), mk()], [mk(), mk()]),
        ("Beta", "D.Beta({0}, {1})", D.Beta, [mk(), mk()], [mk(), mk()]),
        ("Dirichlet", "D.Dirichlet({0})", D.Dirichlet, [pos(2, 4, dt=dt)], [pos(2, 4, dt=dt)]),
        ("Bernoulli", "D.Bernoulli(probs={0})", lambda p: D.Bernoulli(probs=p), [p01()], [p01()]),
        ("Categorical", "D.Categorical(probs={0})", lambda p: D.Categorical(probs=p), [pos(2, 4, dt=dt)], [pos(2, 4, dt=dt)]),
        ("OneHotCategorical", "D.OneHotCategorical(logits={0})", lambda p: D.OneHotCategorical(logits=p), [r(2, 4, dt=dt)], [r(2, 4, dt=dt)]),
        ("Poisson", "D.Poisson({0})", D.Poisson, [mk()], [mk()]),
        ("Binomial", "D.Binomial({0}, probs={1})", lambda c, p: D.Binomial(c, probs=p), [n, p01()], [n, p01()]),
        ("MVN", "D.MultivariateNormal({0}, covariance_matrix={1})", lambda m, c: D.MultivariateNormal(m, covariance_matrix=c),
         [r(2, 3, dt=dt), spd(3, (2,), dt=dt)], [r(3, dt=dt), spd(3, dt=dt)]),
        ("LogNormal", "D.LogNormal({0}, {1})", D.LogNormal, [r(*B, dt=dt), mk()], [r(*B, dt=dt), mk()]),
        ("Independent", "D.Independent(D.Normal({0}, {1}), 1)", lambda a, s: D.Independent(D.Normal(a, s), 1), [r(*B, dt=dt), mk()], [r(*B, dt=dt), mk()]),
    ]


def kl_cases(b, small=False):
    for dt in ([np.float64] if small else [np.float32, np.float64]):
        tol, tn = TOLS[dt], DTN[dt]
        for name, nb, tf, pin, qin in kl_pairs(dt):
            want = D.kl_divergence(tf(*[T(a) for a in pin]), tf(*[T(a) for a in qin]))
            p = nb.format(*[b.inp(a) for a in pin])
            q = nb.format(*[b.inp(a) for a in qin])
            b.case(f"kl_{name}_{tn}", f"D.kl_divergence({p}, {q})", want, **tol)
    # infinite cases: q's support misses p's
    b.case("kl_uniform_inf", "D.kl_divergence(D.Uniform(0.0, 2.0), D.Uniform(0.5, 3.0))", torch.tensor(float("inf")))
    b.case("kl_bernoulli_inf", "D.kl_divergence(D.Bernoulli(probs=0.5), D.Bernoulli(probs=0.0))", torch.tensor(float("inf")))


def gcase(b, name, nb_expr, torch_fn, inputs, tol=dict(rtol=1e-8, atol=1e-9)):
    tin = [T(a.copy(), requires_grad=True) for a in inputs]
    out = torch_fn(*tin)
    W = rng.standard_normal(tuple(out.shape))
    (out * T(W)).sum().backward()
    params = ", ".join(f"p{i}" for i in range(len(inputs)))
    exprs = ", ".join(b.inp(a) for a in inputs)
    argn = ", ".join(str(i) for i in range(len(inputs)))
    code = (f"f = fn({params}) {{\n{nb_expr}\n}}\n"
            f"list(f({exprs}), grad(fn({params}) sum(f({params}) * {b.inp(W)}), argnums=list({argn}))({exprs}))")
    b.case(name, code, [out.detach(), [t.grad if t.grad is not None else torch.zeros_like(t) for t in tin]], **tol)


def grad_cases(b, small=False):
    for name, nb, tf, inputs, x in families(np.float64):
        if x is None:
            x = support_value(name, [T(a) for a in inputs], np.float64)
        if name.startswith("Binomial"):   # total_count is not a differentiable parameter
            n = inputs[0]
            X = b.inp(x)
            gcase(b, f"grad_{name}_log_prob", nb.format(b.inp(n), "p0") + f".log_prob({X})", lambda p, n=n: tf(T(n), p).log_prob(T(x)), [inputs[1]])
            continue
        ps = [f"p{i}" for i in range(len(inputs))]
        X = b.inp(x)
        gcase(b, f"grad_{name}_log_prob", nb.format(*ps) + f".log_prob({X})", lambda *a, tf=tf, x=x: tf(*a).log_prob(T(x)), inputs)
        try:
            tf(*[T(a) for a in inputs]).entropy()
            gcase(b, f"grad_{name}_entropy", nb.format(*ps) + ".entropy()", lambda *a, tf=tf: tf(*a).entropy(), inputs)
        except NotImplementedError:
            pass
    for name, nb, tf, pin, qin in kl_pairs(np.float64):
        if name in ("Uniform", "Binomial"):
            continue
        n = len(pin)
        ps = [f"p{i}" for i in range(2 * n)]
        gcase(b, f"grad_kl_{name}", f"D.kl_divergence({nb.format(*ps[:n])}, {nb.format(*ps[n:])})",
              lambda *a, tf=tf, n=n: D.kl_divergence(tf(*a[:n]), tf(*a[n:])), pin + qin)
    # rsample's pathwise gradients: x = loc + scale * eps, so d sum(x W)/d loc = W, / d scale = W (x - loc) / scale
    loc, scale, W = r(2, 3), pos(2, 3), r(5, 2, 3)
    L, S, WW = b.inp(loc), b.inp(scale), b.inp(W)

    def pathwise(got):
        x, (gl, gs) = got[0], got[1]
        x = np.asarray(x)
        el, es = W.sum(0), (W * (x - loc) / scale).sum(0)
        if not (np.allclose(gl, el, rtol=1e-10, atol=1e-10) and np.allclose(gs, es, rtol=1e-10, atol=1e-10)):
            return f"pathwise gradient differs: {gl} vs {el}, {gs} vs {es}"
        return None
    b.case("rsample_normal_pathwise", f"seed(7)\nx = D.Normal({L}, {S}).rsample(5)\n"
           f"list(x, grad(fn(l, s) {{ seed(7); sum(D.Normal(l, s).rsample(5) * {WW}) }}, argnums=list(0, 1))({L}, {S}))", pathwise)


def error_cases(b):
    b.error("normal_scale", "D.Normal(0.0, tensor([1.0, -1.0]))", ["Normal", "scale", "positive"])
    b.error("normal_scale_nan", "D.Normal(0.0, tensor([0.0 / 0.0]))", ["Normal", "scale"])
    b.error("uniform_order", "D.Uniform(1.0, 0.5)", ["Uniform", "low", "less than high"])
    b.error("gamma_conc", "D.Gamma(tensor([-1.0]), 1.0)", ["Gamma", "concentration", "positive"])
    b.error("poisson_rsample", "D.Poisson(2.0).rsample()", ["Poisson.rsample", "not defined"])
    b.error("bernoulli_both", "D.Bernoulli(probs=0.5, logits=0.0)", ["Bernoulli", "exactly one"])
    b.error("bernoulli_probs", "D.Bernoulli(probs=tensor([1.5]))", ["Bernoulli", "probs", "[0, 1]"])
    b.error("bernoulli_support", "D.Bernoulli(probs=0.5).log_prob(0.5)", ["Bernoulli", "support"])
    b.error("categorical_support", "D.Categorical(probs=tensor([0.5, 0.5])).log_prob(tensor(2))", ["Categorical", "support"])
    b.error("categorical_negative", "D.Categorical(probs=tensor([0.5, -0.5]))", ["Categorical", "probs", "non-negative"])
    b.error("poisson_support", "D.Poisson(2.0).log_prob(1.5)", ["Poisson", "support"])
    b.error("binomial_count", "D.Binomial(2.5, probs=0.5)", ["Binomial", "total_count"])
    b.error("binomial_support", "D.Binomial(3, probs=0.5).log_prob(4.0)", ["Binomial", "support"])
    b.error("exponential_support", "D.Exponential(1.0).log_prob(-1.0)", ["Exponential", "support"])
    b.error("dirichlet_support", "D.Dirichlet(ones(3)).log_prob(tensor([0.5, 0.6, 0.1]))", ["Dirichlet", "support"])
    b.error("mvn_two", "D.MultivariateNormal(zeros(2), covariance_matrix=eye(2), scale_tril=eye(2))", ["MultivariateNormal", "exactly one"])
    b.error("mvn_size", "D.MultivariateNormal(zeros(3), covariance_matrix=eye(2))", ["MultivariateNormal", "3 x 3"])
    b.error("mvn_not_pd", "D.MultivariateNormal(zeros(2), covariance_matrix=tensor([[1.0, 2.0], [2.0, 1.0]]))", ["not positive-definite"])
    b.error("mvn_tril", "D.MultivariateNormal(zeros(2), scale_tril=tensor([[1.0, 1.0], [0.0, 1.0]]))", ["MultivariateNormal", "lower triangular"])
    b.error("independent_ndims", "D.Independent(D.Normal(zeros(2), ones(2)), 2)", ["Independent", "reinterpreted_batch_ndims"])
    b.error("kl_unregistered", "D.kl_divergence(D.Laplace(0.0, 1.0), D.Poisson(1.0))", ["kl_divergence", "Laplace", "Poisson"])
    b.error("poisson_entropy", "D.Poisson(1.0).entropy()", ["Poisson.entropy", "not defined"])
    b.error("normal_icdf_range", "D.Normal(0.0, 1.0).icdf(1.5)", ["Normal.icdf", "support"])
    b.error("lognormal_support", "D.LogNormal(0.0, 1.0).log_prob(-1.0)", ["support", "(0, inf)"])
    b.error("transformed_support", "D.TransformedDistribution(D.Normal(0.0, 1.0), D.SigmoidTransform()).log_prob(1.5)", ["support", "[0, 1]"])
    b.error("shapes", "D.Normal(zeros(2), ones(3))", ["shapes", "do not broadcast"])


# ------------------------------------------------------------------ sampling statistics
N = 20000 if os.environ.get("NABLA_ASAN") == "1" else 100000
DKW_ALPHA = 1e-8
Z = 6.0


def dkw_eps(n):
    return math.sqrt(math.log(2 / DKW_ALPHA) / (2 * n))


def dkw(cdf, discrete=False):
    """a check: sup |F_n - F| over the sample's values within the DKW bound"""
    def chk(got):
        x = np.sort(np.asarray(got, dtype=np.float64).ravel())
        n = len(x)
        if discrete:
            vals, counts = np.unique(x, return_counts=True)
            emp = np.cumsum(counts) / n
            dev = np.max(np.abs(emp - cdf(vals)))
        else:
            F = cdf(x)
            i = np.arange(1, n + 1)
            dev = max(np.max(i / n - F), np.max(F - (i - 1) / n))
        eps = dkw_eps(n)
        return None if dev <= eps else f"sup |F_n - F| = {dev:.4g} > {eps:.4g} (DKW, alpha {DKW_ALPHA})"
    return chk


def moments(mean, var, m4=None):
    """a check: sample mean and variance within Z standard errors"""
    def chk(got):
        x = np.asarray(got, dtype=np.float64).ravel()
        n = len(x)
        se_m = math.sqrt(var / n)
        c = x - mean
        fourth = m4 if m4 is not None else float(np.mean(c ** 4))
        se_v = math.sqrt(max(fourth - var ** 2, 1e-300) / n)
        zm = (x.mean() - mean) / se_m
        zv = (np.mean(c ** 2) - var) / se_v
        if abs(zm) > Z or abs(zv) > Z:
            return f"mean {x.mean():.5g} (want {mean:.5g}, z {zm:.2f}), variance {np.mean(c ** 2):.5g} (want {var:.5g}, z {zv:.2f})"
        return None
    return chk


def both(*checks):
    def chk(got):
        for c in checks:
            w = c(got)
            if w:
                return w
        return None
    return chk


def sampling_cases(b, small=False):
    n = N if not small else 10000
    cases = [
        ("Normal", "D.Normal(0.5, 2.0)", st.norm(0.5, 2.0), False),
        ("Uniform", "D.Uniform(-1.0, 3.0)", st.uniform(-1, 4), False),
        ("Exponential", "D.Exponential(1.5)", st.expon(scale=1 / 1.5), False),
        ("Laplace", "D.Laplace(1.0, 0.5)", st.laplace(1.0, 0.5), False),
        ("Gamma_small", "D.Gamma(0.4, 2.0)", st.gamma(0.4, scale=0.5), False),
        ("Gamma_large", "D.Gamma(3.5, 1.0)", st.gamma(3.5), False),
        ("Beta", "D.Beta(2.0, 0.7)", st.beta(2.0, 0.7), False),
        ("LogNormal", "D.LogNormal(0.2, 0.6)", st.lognorm(0.6, scale=math.exp(0.2)), False),
        ("Poisson_small", "D.Poisson(3.0)", st.poisson(3.0), True),
        ("Poisson_large", "D.Poisson(47.5)", st.poisson(47.5), True),
        ("Binomial", "D.Binomial(20, probs=0.3)", st.binom(20, 0.3), True),
        ("Bernoulli", "D.Bernoulli(probs=0.3)", st.bernoulli(0.3), True),
        ("Categorical", "D.Categorical(probs=tensor([0.1, 0.2, 0.3, 0.4], dtype=\"f64\"))", st.rv_discrete(values=([0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4])), True),
        ("Transformed", "D.TransformedDistribution(D.Normal(0.0, 1.0), list(D.AffineTransform(1.0, 2.0), D.ExpTransform()))", st.lognorm(2.0, scale=math.e), False),
    ]
    if small:
        cases = [c for c in cases if c[0] in ("Normal", "Gamma_small", "Gamma_large", "Poisson_small", "Poisson_large", "Binomial", "Categorical")]
    for i, (name, ctor, law, disc) in enumerate(cases):
        mean, var = float(law.mean()), float(law.var())
        b.case(f"sample_{name}", f"seed({1000 + i})\nd = {ctor}\nd.sample({n}).to(\"f64\")",
               both(moments(mean, var), dkw(law.cdf, disc)))
    # Dirichlet: each marginal is Beta(a_i, a0 - a_i)
    a = [0.5, 1.5, 3.0]
    b.case("sample_Dirichlet", f"seed(77)\nD.Dirichlet(tensor({a}, dtype=\"f64\")).sample({n})",
           lambda got: next((w for w in (both(moments(st.beta(ai, sum(a) - ai).mean(), st.beta(ai, sum(a) - ai).var()), dkw(st.beta(ai, sum(a) - ai).cdf))(np.asarray(got)[:, k])
                                         for k, ai in enumerate(a)) if w), None))
    # OneHotCategorical: column means are the probabilities
    b.case("sample_OneHotCategorical", f"seed(78)\nargmax(D.OneHotCategorical(probs=tensor([0.25, 0.5, 0.25], dtype=\"f64\")).sample({n}), axis=-1).to(\"f64\")",
           dkw(st.rv_discrete(values=([0, 1, 2], [0.25, 0.5, 0.25])).cdf, True))
    # MultivariateNormal: the whitened samples are standard normal in every coordinate, uncorrelated
    C = np.array([[2.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 0.5]])
    mu = np.array([1.0, -2.0, 0.5])
    Lc = np.linalg.cholesky(C)

    def mvn_chk(got):
        z = np.linalg.solve(Lc, (np.asarray(got) - mu).T).T
        for k in range(3):
            w = both(moments(0.0, 1.0, 3.0), dkw(st.norm().cdf))(z[:, k])
            if w:
                return f"coordinate {k}: {w}"
        nn = len(z)
        for j in range(3):
            for k in range(j):
                c = np.mean(z[:, j] * z[:, k])
                if abs(c) > Z / math.sqrt(nn):
                    return f"whitened coordinates {j}, {k} correlate: {c:.4g}"
        return None
    b.case("sample_MultivariateNormal", f"seed(79)\nD.MultivariateNormal({b.inp(mu)}, covariance_matrix={b.inp(C)}).sample({n})", mvn_chk)
    # batched: each batch element follows its own parameters
    locs = np.array([-3.0, 0.0, 5.0])
    b.case("sample_batched_Normal", f"seed(80)\nD.Normal({b.inp(locs)}, 1.0).rsample({n // 4})",
           lambda got: next((w for w in (moments(locs[k], 1.0, 3.0)(np.asarray(got)[:, k]) for k in range(3)) if w), None))


def main():
    asan = os.environ.get("NABLA_ASAN") == "1"
    small = os.environ.get("DIST_SUBSET") == "1" or asan
    b = Batch("distributions"); b.raw(PRE); value_cases(b, small); b.run()
    b = Batch("distributions_kl"); b.raw(PRE); kl_cases(b, small); b.run()
    b = Batch("distributions_grad"); b.raw(PRE); grad_cases(b, small); b.run()
    b = Batch("distributions_sampling"); b.raw(PRE); sampling_cases(b, small); b.run()
    if not small or asan:
        b = Batch("distributions_err"); b.raw(PRE); error_cases(b); b.run()
    if DEVICE == "cpu" and not asan and not emulated_rerun(__file__, "distributions", "DIST_SUBSET"):
        report_fail("distributions.emulated", "the emulated-device run failed (its lines above)")
    finish()


if __name__ == "__main__":
    main()
