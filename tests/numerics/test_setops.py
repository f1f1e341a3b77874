#!/usr/bin/python3
"""Set and index ops, cumulative ops, diagonals, distances and special
functions (tensor/index/, lang/lib/ltset.c) vs torch on fresh random inputs:
values in f32/f64 and integer dtypes, batched, size-0/size-1 edges,
non-contiguous views (transposed inputs); gradients vs torch in f64 (loss =
sum(f(x) * W), random W) and central finite differences for the special
functions; the argument errors.

Without NUMERICS_DEVICE the suite runs again on the emulated CUDA device
(NABLA_CUDA_EMULATE=force) with a cross-section of the cases, plus the edge
cases of the device kernels (cuda/index.cu: nonzero, unique, histc, isin)
and device_counts: what those read back from the device (one count, or
nothing).

tools/run-tests.sh runs it a second time on the ASan build (NABLA_ASAN=1,
NABLA=build-asan/nabla).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_setops.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np, GRADCHECK_NBL, DEVICE, report_fail, emulated_rerun, run_nabla, check  # noqa: E402

F64 = dict(rtol=1e-9, atol=1e-10)
F32 = dict(rtol=2e-5, atol=2e-5)
TOLS = {np.float32: F32, np.float64: F64}
DTN = {np.float32: "f32", np.float64: "f64"}


def r(*shape, dt=np.float64):
    return rng.standard_normal(shape).astype(dt)


def ints(lo, hi, *shape):
    return rng.integers(lo, hi, size=shape).astype(np.int64)


def gcase(b, name, nb_expr, torch_fn, inputs, tol=F64):
    """nb_expr over p0, p1, ...: value and gradients of every input vs torch (f64)."""
    tin = [T(a.copy(), requires_grad=True) for a in inputs]
    out = torch_fn(*tin)
    W = rng.standard_normal(tuple(out.shape))
    (out * T(W)).sum().backward()
    params = ", ".join(f"p{i}" for i in range(len(inputs)))
    exprs = ", ".join(b.inp(a) for a in inputs)
    argn = ", ".join(str(i) for i in range(len(inputs)))
    code = (f"f = fn({params}) {{\n{nb_expr}\n}}\n"
            f"list(f({exprs}), grad(fn({params}) sum(f({params}) * {b.inp(W)}), argnums=list({argn}))({exprs}))")
    b.case(name, code, [out.detach(), [t.grad for t in tin]], **tol)


def unique_cases(b, small=False):
    for dt in ([np.int64] if small else [np.int64, np.float32, np.float64]):
        x = rng.integers(0, 6, size=(4, 7)).astype(dt)
        X = b.inp(x)
        v, inv, cnt = torch.unique(T(x), sorted=True, return_inverse=True, return_counts=True)
        tn = np.dtype(dt).name
        b.case(f"unique_{tn}", f"unique({X})", v)
        b.case(f"unique_inv_counts_{tn}", f"unique({X}, return_inverse=true, return_counts=true)", [v, inv, cnt])
        b.case(f"unique_T_{tn}", f"unique(transpose({X}), return_inverse=true)", list(torch.unique(T(x).t(), return_inverse=True)))
        rows = x[rng.integers(0, 3, size=6)]
        R = b.inp(rows)
        b.case(f"unique_dim0_{tn}", f"unique({R}, return_inverse=true, return_counts=true, dim=0)",
               list(torch.unique(T(rows), return_inverse=True, return_counts=True, dim=0)))
        b.case(f"unique_dim1_{tn}", f"unique(transpose({R}), return_counts=true, dim=1)",
               list(torch.unique(T(rows).t(), return_counts=True, dim=1)))
        c = np.repeat(rng.integers(0, 3, size=6), rng.integers(1, 3, size=6)).astype(dt)
        b.case(f"unique_consecutive_{tn}", f"unique_consecutive({b.inp(c)}, return_inverse=true, return_counts=true)",
               list(torch.unique_consecutive(T(c), return_inverse=True, return_counts=True)))
        cr = np.repeat(rows, 2, axis=0)
        b.case(f"unique_consecutive_dim_{tn}", f"unique_consecutive({b.inp(cr)}, return_counts=true, dim=0)",
               list(torch.unique_consecutive(T(cr), return_counts=True, dim=0)))
    wide = rng.integers(-10**12, 10**12, size=50)[rng.integers(0, 50, size=300)]   # the sorting path (range >> n)
    b.case("unique_wide_i64", f"unique({b.inp(wide)}, return_inverse=true, return_counts=true)",
           list(torch.unique(T(wide), return_inverse=True, return_counts=True)))
    fz = np.array([0.0, -0.0, np.inf, -np.inf, 1.5, -1.5, 0.0, np.inf])
    b.case("unique_zeros_infs", f"unique({b.inp(fz)}, return_counts=true)", list(torch.unique(T(fz), return_counts=True)))
    e = np.zeros((0,), np.int64)
    b.case("unique_empty", f"unique({b.inp(e)}, return_counts=true)", list(torch.unique(T(e), return_counts=True)))


def counting_cases(b, small=False):
    x = ints(0, 9, 40)
    X = b.inp(x)
    b.case("bincount", f"bincount({X})", torch.bincount(T(x)))
    b.case("bincount_minlength", f"bincount({X}, minlength=15)", torch.bincount(T(x), minlength=15))
    for dt in (np.float32, np.float64):
        w = r(40, dt=dt)
        b.case(f"bincount_weights_{DTN[dt]}", f"bincount({X}, weights={b.inp(w)})", torch.bincount(T(x), weights=T(w)), **TOLS[dt])
    b.case("bincount_empty", f"bincount({b.inp(np.zeros(0, np.int64))}, minlength=3)", torch.bincount(T(np.zeros(0, np.int64)), minlength=3))
    for dt in ([np.float32] if small else [np.float32, np.float64]):
        h = r(200, dt=dt)
        H = b.inp(h)
        b.case(f"histc_{DTN[dt]}", f"histc({H}, bins=7, min=-1.5, max=2)", torch.histc(T(h), bins=7, min=-1.5, max=2))
        b.case(f"histc_auto_{DTN[dt]}", f"histc({H}, bins=5)", torch.histc(T(h), bins=5))
        if small:
            continue
        w = np.abs(r(200, dt=dt))
        hs = torch.histogram(T(h), bins=6, range=(-2.0, 2.0), weight=T(w), density=True)
        b.case(f"histogram_{DTN[dt]}", f"d = histogram({H}, bins=6, range=list(-2.0, 2.0), weight={b.inp(w)}, density=true)\nlist(d.hist, d.bin_edges)",
               [hs.hist, hs.bin_edges], **TOLS[dt])
        b.case(f"histogram_range_tensor_{DTN[dt]}", f"histogram({H}, bins=3, range=[-1.5, 0.5]).hist", torch.histogram(T(h), bins=3, range=(-1.5, 0.5)).hist, **TOLS[dt])
        hs = torch.histogram(T(h), bins=4)
        b.case(f"histogram_auto_{DTN[dt]}", f"d = histogram({H}, bins=4)\nlist(d.hist, d.bin_edges)", [hs.hist, hs.bin_edges], **TOLS[dt])
        edges = np.sort(r(5, dt=dt))
        hs = torch.histogram(T(h), bins=T(edges))
        b.case(f"histogram_edges_{DTN[dt]}", f"histogram({H}, bins={b.inp(edges)}).hist", hs.hist, **TOLS[dt])


def search_cases(b, small=False):
    for dt in ([np.float64] if small else [np.int64, np.float32, np.float64]):
        s = np.sort(rng.integers(-5, 6, size=9)).astype(dt)
        v = rng.integers(-7, 8, size=(3, 4)).astype(dt)
        S, V = b.inp(s), b.inp(v)
        tn = np.dtype(dt).name
        b.case(f"searchsorted_{tn}", f"searchsorted({S}, {V})", torch.searchsorted(T(s), T(v)))
        b.case(f"searchsorted_right_{tn}", f"searchsorted({S}, {V}, right=true)", torch.searchsorted(T(s), T(v), right=True))
        b.case(f"searchsorted_side_{tn}", f"searchsorted({S}, {V}, side=\"right\", out_int32=true)", torch.searchsorted(T(s), T(v), side="right", out_int32=True))
        sb = np.sort(rng.integers(-5, 6, size=(3, 6)), axis=-1).astype(dt)
        b.case(f"searchsorted_batched_{tn}", f"searchsorted({b.inp(sb)}, {V})", torch.searchsorted(T(sb), T(v)))
        perm = rng.permutation(9)
        us = s[perm]
        sorter = np.argsort(us, kind="stable")
        b.case(f"searchsorted_sorter_{tn}", f"searchsorted({b.inp(us)}, {V}, sorter={b.inp(sorter)})",
               torch.searchsorted(T(us), T(v), sorter=T(sorter)))
        b.case(f"bucketize_{tn}", f"bucketize({V}, {S}, right=true)", torch.bucketize(T(v), T(s), right=True))
    x = rng.integers(-1, 2, size=(3, 4, 2)) * (rng.random((3, 4, 2)) < 0.6)
    X = b.inp(x)
    b.case("nonzero", f"nonzero({X})", torch.nonzero(T(x)))
    b.case("nonzero_T", f"nonzero(transpose({X}, 0, 2))", torch.nonzero(T(x).transpose(0, 2)))
    b.case("argwhere_bool", f"argwhere({X} > 0)", torch.argwhere(T(x) > 0))
    b.case("nonzero_tuple", f"nonzero({X}, as_tuple=true)", list(torch.nonzero(T(x), as_tuple=True)))
    b.case("nonzero_empty", f"nonzero({b.inp(np.zeros((2, 3)))})", torch.nonzero(T(np.zeros((2, 3)))))
    e, t = ints(0, 10, 4, 5), ints(0, 10, 6)
    b.case("isin", f"isin({b.inp(e)}, {b.inp(t)})", torch.isin(T(e), T(t)))
    b.case("isin_invert", f"isin({b.inp(e)}, {b.inp(t)}, invert=true)", torch.isin(T(e), T(t), invert=True))
    ef = np.round(r(7), 1)
    tf = np.concatenate([ef[:3], r(3)])
    b.case("isin_f64", f"isin({b.inp(ef)}, {b.inp(tf)})", torch.isin(T(ef), T(tf)))


def arrange_cases(b, small=False):
    for dt in ([np.float64] if small else [np.float32, np.float64]):
        tol, tn = TOLS[dt], DTN[dt]
        x = r(3, 4, 5, dt=dt)
        X = b.inp(x)
        b.case(f"roll_{tn}", f"roll({X}, list(1, -2), dims=list(0, 2))", torch.roll(T(x), (1, -2), (0, 2)), **tol)
        b.case(f"roll_flat_{tn}", f"roll({X}, 7)", torch.roll(T(x), 7), **tol)
        b.case(f"roll_T_{tn}", f"roll(transpose({X}, 0, 2), 3, dims=1)", torch.roll(T(x).transpose(0, 2), 3, 1), **tol)
        b.case(f"diff_{tn}", f"diff({X})", torch.diff(T(x)), **tol)
        b.case(f"diff_n2_dim0_{tn}", f"diff({X}, n=2, dim=0)", torch.diff(T(x), n=2, dim=0), **tol)
        p, a = r(3, 2, 5, dt=dt), r(3, 1, 5, dt=dt)
        b.case(f"diff_pre_app_{tn}", f"diff({X}, dim=1, prepend={b.inp(p)}, append={b.inp(a)})", torch.diff(T(x), dim=1, prepend=T(p), append=T(a)), **tol)
        b.case(f"diff_big_n_{tn}", f"diff({X}, n=9)", torch.diff(T(x), n=9), **tol)
        for k in (-1, 1, 2, 3):
            b.case(f"rot90_{k}_{tn}", f"rot90({X}, {k}, dims=list(1, 2))", torch.rot90(T(x), k, (1, 2)), **tol)
        for off in (-2, 0, 1, 4):
            b.case(f"diagonal_{off}_{tn}", f"diagonal({X}, {off}, 2, 0)", torch.diagonal(T(x), off, 2, 0), **tol)
        v = r(2, 3, dt=dt)
        for off in (-1, 0, 2):
            b.case(f"diag_embed_{off}_{tn}", f"diag_embed({b.inp(v)}, {off}, 0, 2)", torch.diag_embed(T(v), off, 0, 2), **tol)
        m = r(4, 6, dt=dt)
        b.case(f"diag_1d_{tn}", f"diag({b.inp(v[0])}, -1)", torch.diag(T(v[0]), -1), **tol)
        b.case(f"diag_2d_{tn}", f"diag({b.inp(m)}, 2)", torch.diag(T(m), 2), **tol)
        b.case(f"trace_{tn}", f"trace(transpose({b.inp(m)}))", torch.trace(T(m).t()), **tol)
        y = r(5, 4, 2, dt=dt)
        b.case(f"tensordot_dims_{tn}", f"tensordot({X}, {b.inp(y)}, list(list(1, 2), list(1, 0)))",
               torch.tensordot(T(x), T(y), dims=([1, 2], [1, 0])), **tol)
        z = r(4, 5, 2, dt=dt)
        b.case(f"tensordot_int_{tn}", f"tensordot({X}, {b.inp(z)}, 2)", torch.tensordot(T(x), T(z), dims=2), **tol)
    i = ints(0, 5, 4, 3)
    b.case("cumprod_i64", f"cumprod({b.inp(i)}, 0)", torch.cumprod(T(i), 0))
    b.case("diff_bool", f"diff({b.inp(i > 2)})", torch.diff(T(i > 2)))
    b.case("trace_i64", f"trace({b.inp(i)})", torch.trace(T(i)))
    g = [r(3), r(4), r(2)]
    G = [b.inp(a) for a in g]
    for ix in ("ij", "xy"):
        b.case(f"meshgrid_{ix}", f"meshgrid(list({', '.join(G)}), indexing=\"{ix}\")", list(torch.meshgrid(*[T(a) for a in g], indexing=ix)), **F64)


def scan_cases(b, small=False):
    for dt in ([np.float64] if small else [np.float32, np.float64]):
        tol, tn = TOLS[dt], DTN[dt]
        x = r(3, 17, 2, dt=dt)
        X = b.inp(x)
        b.case(f"cumprod_{tn}", f"cumprod({X}, 1)", torch.cumprod(T(x), 1), **tol)
        b.case(f"cumprod_T_{tn}", f"cumprod(transpose({X}, 0, 1), 0)", torch.cumprod(T(x).transpose(0, 1), 0), **tol)
        b.case(f"logcumsumexp_{tn}", f"logcumsumexp({X} * 30, -2)", torch.logcumsumexp(T(x) * 30, -2), **tol)
        ninf = x.copy()
        ninf[0, :3, 0] = -np.inf
        b.case(f"logcumsumexp_ninf_{tn}", f"logcumsumexp({b.inp(ninf)}, 1)", torch.logcumsumexp(T(ninf), 1), **tol)
        for fname in ("cummax", "cummin"):
            tf = getattr(torch, fname)
            b.case(f"{fname}_{tn}", f"{fname}({X}, 1)", list(tf(T(x), 1)), **tol)
            nn = x.copy()
            nn[1, 5, 0] = np.nan
            nn[1, 9, 0] = np.nan
            b.case(f"{fname}_nan_{tn}", f"{fname}({b.inp(nn)}, 1)", list(tf(T(nn), 1)), **tol)
        b.case(f"cumprod_empty_{tn}", f"cumprod({b.inp(np.zeros((2, 0), dt))}, 1)", torch.cumprod(T(np.zeros((2, 0), dt)), 1))
        b.case(f"cumprod_0d_{tn}", f"cumprod({b.inp(np.array(1.5, dt))}, 0)", torch.cumprod(T(np.array(1.5, dt)), 0))
    ti = ints(0, 4, 2, 11)
    b.case("cummax_ties_i64", f"cummax({b.inp(ti)}, 1)", list(torch.cummax(T(ti), 1)))
    b.case("cummin_ties_i64", f"cummin({b.inp(ti)}, -1)", list(torch.cummin(T(ti), -1)))


def distance_cases(b, small=False):
    for dt in ([np.float64] if small else [np.float32, np.float64]):
        tol, tn = TOLS[dt], DTN[dt]
        x1, x2 = r(2, 5, 3, dt=dt), r(2, 4, 3, dt=dt)
        A, B = b.inp(x1), b.inp(x2)
        for p in ([2.0] if small else [0.5, 1.0, 2.0, 3.0, float("inf")]):
            pv = "1 / 0.0" if p == float("inf") else repr(p)
            b.case(f"cdist_p{p}_{tn}", f"cdist({A}, {B}, p={pv})", torch.cdist(T(x1), T(x2), p=p, compute_mode="donot_use_mm_for_euclid_dist"),
                   rtol=max(tol["rtol"], 1e-12 if dt == np.float64 else 1e-5), atol=tol["atol"])
        y1, y2 = r(4, 6, dt=dt), r(6, dt=dt)
        b.case(f"pairwise_distance_{tn}", f"pairwise_distance({b.inp(y1)}, {b.inp(y2)})", torch.nn.functional.pairwise_distance(T(y1), T(y2)), **tol)
        b.case(f"pairwise_distance_p1_keep_{tn}", f"pairwise_distance({b.inp(y1)}, {b.inp(y2)}, p=1, keepdim=true)",
               torch.nn.functional.pairwise_distance(T(y1), T(y2), p=1, keepdim=True), **tol)
        z1, z2 = r(3, 5, 2, dt=dt), r(1, 5, 2, dt=dt)
        b.case(f"cosine_similarity_{tn}", f"cosine_similarity({b.inp(z1)}, {b.inp(z2)})", torch.nn.functional.cosine_similarity(T(z1), T(z2)), **tol)
        b.case(f"cosine_similarity_dim_{tn}", f"cosine_similarity({b.inp(z1)}, {b.inp(z2)}, dim=-1)", torch.nn.functional.cosine_similarity(T(z1), T(z2), dim=-1), **tol)


def special_cases(b, small=False):
    for dt in ([np.float64] if small else [np.float32, np.float64]):
        tn = DTN[dt]
        tol = dict(rtol=1e-12, atol=1e-12) if dt == np.float64 else dict(rtol=2e-6, atol=2e-6)
        pos = np.concatenate([rng.uniform(0.01, 3, 20), rng.uniform(3, 200, 10), [0.5, 1, 2, 7.5, 1e6]]).astype(dt)
        neg = (-rng.uniform(0.01, 6, 10)).astype(dt)
        neg = neg[np.abs(neg - np.round(neg)) > 0.05]
        P, N = b.inp(pos), b.inp(neg)
        b.case(f"lgamma_{tn}", f"lgamma({P})", torch.lgamma(T(pos)), **tol)
        b.case(f"lgamma_neg_{tn}", f"lgamma({N})", torch.lgamma(T(neg)), rtol=tol["rtol"] * 1e3, atol=tol["atol"] * 1e3)
        b.case(f"digamma_{tn}", f"digamma({P})", torch.digamma(T(pos)), **tol)
        b.case(f"digamma_neg_{tn}", f"digamma({N})", torch.digamma(T(neg)), rtol=tol["rtol"] * 1e3, atol=tol["atol"] * 1e3)
        poles = np.array([0.0, -1.0, -3.0], dt)
        b.case(f"lgamma_poles_{tn}", f"lgamma({b.inp(poles)})", torch.lgamma(T(poles)))
        b.case(f"digamma_poles_{tn}", f"digamma({b.inp(poles)})", torch.digamma(T(poles)))
        u = np.concatenate([rng.uniform(-0.999, 0.999, 30), [0, 1, -1, 0.999999, -1e-8]]).astype(dt)
        b.case(f"erfinv_{tn}", f"erfinv({b.inp(u)})", torch.erfinv(T(u)),
               **(dict(rtol=1e-10, atol=1e-12) if dt == np.float64 else dict(rtol=1e-5, atol=1e-5)))
        xs, ys = r(8, dt=dt), np.abs(r(8, dt=dt))
        xs[:2] = 0
        ys[1] = 0
        ys[3] = np.nan
        b.case(f"xlogy_{tn}", f"xlogy({b.inp(xs)}, {b.inp(ys)})", torch.xlogy(T(xs), T(ys)), **tol)
    iv = ints(1, 9, 5)
    b.case("lgamma_i64", f"lgamma({b.inp(iv)})", torch.lgamma(T(iv).float()), rtol=2e-6, atol=2e-6)


def grad_cases(b, small=False):
    x = r(3, 9)
    x[1, 4] = 0.0   # cumprod's gradient through a zero
    gcase(b, "grad_cumprod", "cumprod(p0, 1)", lambda a: torch.cumprod(a, 1), [x])
    gcase(b, "grad_logcumsumexp", "logcumsumexp(p0, 0)", lambda a: torch.logcumsumexp(a, 0), [r(7, 2)])
    gcase(b, "grad_cummax", "cummax(p0, 1)[0]", lambda a: torch.cummax(a, 1).values, [r(3, 8)])
    gcase(b, "grad_cummin", "cummin(p0, 0)[0]", lambda a: torch.cummin(a, 0).values, [r(6, 2)])
    gcase(b, "grad_roll", "roll(p0, list(2, 1), dims=list(1, 0))", lambda a: torch.roll(a, (2, 1), (1, 0)), [r(3, 5)])
    gcase(b, "grad_diff", "diff(p0, n=2, dim=0)", lambda a: torch.diff(a, n=2, dim=0), [r(5, 3)])
    gcase(b, "grad_rot90", "rot90(p0, 1)", lambda a: torch.rot90(a, 1), [r(3, 4)])
    gcase(b, "grad_diagonal", "diagonal(p0, 1, 1, 2)", lambda a: torch.diagonal(a, 1, 1, 2), [r(2, 4, 5)])
    gcase(b, "grad_diag_embed", "diag_embed(p0, -1)", lambda a: torch.diag_embed(a, -1), [r(2, 3)])
    gcase(b, "grad_trace", "trace(p0)", torch.trace, [r(4, 3)])
    gcase(b, "grad_tensordot", "tensordot(p0, p1, 1)", lambda a, c: torch.tensordot(a, c, 1), [r(2, 3), r(3, 4)])
    gcase(b, "grad_meshgrid", "m = meshgrid(list(p0, p1))\nm[0] * m[1]", lambda a, c: torch.meshgrid(a, c, indexing="ij")[0] * torch.meshgrid(a, c, indexing="ij")[1], [r(3), r(4)])
    for p in (1.0, 2.0, 3.0):
        gcase(b, f"grad_cdist_p{p}", f"cdist(p0, p1, p={p})", lambda a, c, p=p: torch.cdist(a, c, p=p, compute_mode="donot_use_mm_for_euclid_dist"), [r(2, 4, 3), r(2, 3, 3)])
    gcase(b, "grad_pairwise_distance", "pairwise_distance(p0, p1)", torch.nn.functional.pairwise_distance, [r(4, 5), r(4, 5)])
    gcase(b, "grad_cosine_similarity", "cosine_similarity(p0, p1, dim=-1)", lambda a, c: torch.nn.functional.cosine_similarity(a, c, dim=-1), [r(3, 4), r(3, 4)])
    pos = rng.uniform(0.1, 20, 9)
    neg = -rng.uniform(0.1, 0.9, 4) - rng.integers(0, 4, 4)
    gcase(b, "grad_lgamma", "lgamma(p0)", torch.lgamma, [np.concatenate([pos, neg])], tol=dict(rtol=1e-9, atol=1e-9))
    gcase(b, "grad_digamma", "digamma(p0)", torch.digamma, [pos], tol=dict(rtol=1e-9, atol=1e-9))
    gcase(b, "grad_erfinv", "erfinv(p0)", torch.erfinv, [rng.uniform(-0.99, 0.99, 9)], tol=dict(rtol=1e-9, atol=1e-9))
    xi, wv, gv = ints(0, 7, 20), r(20), r(9)

    def bincount_grad(got):
        want = gv[xi]
        return None if np.allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12) else f"got {got}, want {want}"
    b.case("grad_bincount_weights", f"grad(fn(w) sum(bincount({b.inp(xi)}, weights=w, minlength=9) * {b.inp(gv)}))({b.inp(wv)})", bincount_grad)
    gcase(b, "grad_xlogy", "xlogy(p0, p1)", torch.xlogy, [r(6), np.abs(r(6)) + 0.1])


def error_cases(b):
    b.error("bincount_negative", "bincount([1, -1, 2])", ["bincount", "non-negative"])
    b.error("bincount_float", "bincount([1.0, 2.0])", ["bincount", "integer"])
    b.error("bincount_2d", "bincount([[1, 2]])", ["bincount", "1-D"])
    b.error("bincount_weights_len", "bincount([1, 2], weights=[1.0])", ["bincount", "weights"])
    b.error("histc_bins", "histc(randn(5), bins=0)", ["histc", "bins"])
    b.error("histc_int", "histc([1, 2], bins=3)", ["histc", "floating"])
    b.error("histogram_edges", "histogram(randn(5), bins=tensor([1.0, 0.0, 2.0]))", ["histogram", "increasing"])
    b.error("searchsorted_shape", "searchsorted(zeros(2, 3), zeros(3, 2))", ["searchsorted", "leading"])
    b.error("searchsorted_side", "searchsorted(zeros(3), zeros(2), side=\"middle\")", ["searchsorted", "side"])
    b.error("searchsorted_side_right", "searchsorted(zeros(3), zeros(2), side=\"left\", right=true)", ["searchsorted", "disagree"])
    b.error("searchsorted_sorter_range", "searchsorted(zeros(3), zeros(2), sorter=[0, 5, 1])", ["searchsorted", "sorter"])
    b.error("unique_dim_0d", "unique(tensor(3), dim=0)", ["unique", "0-d"])
    b.error("unique_dim_range", "unique(zeros(2, 3), dim=2)", ["unique", "out of range"])
    b.error("diagonal_same_dims", "diagonal(zeros(3, 3), 0, 1, 1)", ["diagonal", "differ"])
    b.error("diag_3d", "diag(zeros(2, 2, 2))", ["diag", "1-D or 2-D"])
    b.error("trace_3d", "trace(zeros(2, 2, 2))", ["trace", "2-D"])
    b.error("tensordot_sizes", "tensordot(zeros(2, 3), zeros(4, 5), 1)", ["tensordot", "differ"])
    b.error("meshgrid_2d", "meshgrid(list(zeros(2, 2), zeros(3)))", ["meshgrid", "1-D"])
    b.error("meshgrid_indexing", "meshgrid(list(zeros(2)), indexing=\"ji\")", ["meshgrid", "indexing"])
    b.error("cdist_columns", "cdist(zeros(2, 3), zeros(2, 4))", ["cdist", "columns"])
    b.error("cdist_p", "cdist(zeros(2, 3), zeros(2, 3), p=-1)", ["cdist", "p must be non-negative"])
    b.error("roll_lengths", "roll(zeros(2, 3), list(1, 2), dims=0)", ["roll", "same length"])
    b.error("diff_n", "diff(zeros(3), n=-1)", ["diff", "non-negative"])
    b.error("rot90_dims", "rot90(zeros(2, 2), 1, dims=list(0, 0))", ["rot90", "differ"])
    b.error("logcumsumexp_int", "logcumsumexp([1, 2], 0)", ["logcumsumexp", "floating"])
    b.error("cumprod_axis", "cumprod(zeros(2, 3), 2)", ["cumprod", "out of range"])
    b.error("gamma_alpha", "standard_gamma(tensor([1.0, -1.0]))", ["gamma", "concentration", "> 0"])
    b.error("poisson_rate", "poisson(tensor([1.0, -1.0]))", ["poisson", "rate"])
    b.error("binomial_p", "binomial(tensor([3.0]), tensor([1.5]))", ["binomial", "probs"])


def fd_cases(b):
    """special functions' gradients vs central finite differences (f64)"""
    b.raw(GRADCHECK_NBL)
    for name, a in (("lgamma", rng.uniform(0.2, 9, 5)), ("digamma", rng.uniform(0.2, 9, 5)), ("erfinv", rng.uniform(-0.9, 0.9, 5))):
        b.case(f"fd_{name}", f"gc = gradcheck(fn(p) sum({name}(p)), {b.inp(a)})\ngc[0] - gc[1]", np.zeros(5), rtol=0, atol=1e-6)


def device_kernel_cases(b):
    """nonzero / histc / isin at the edges the device kernels (cuda/index.cu)
    must get right: empty, one element, all equal, NaN and inf, non-contiguous
    views, and sizes past one grid of blocks (the grid-stride loops)."""
    big = (rng.random(40000) < 0.3) * rng.integers(1, 5, 40000)
    b.case("nonzero_big", f"nonzero({b.inp(big)})", torch.nonzero(T(big)))
    b.case("nonzero_one", f"nonzero({b.inp(np.array([2.5]))})", torch.nonzero(T(np.array([2.5]))))
    b.case("nonzero_empty_input", f"nonzero({b.inp(np.zeros((0, 3)))})", torch.nonzero(T(np.zeros((0, 3)))))
    nan = r(4, 5)
    nan[nan < -0.3] = 0
    nan[1, 2] = np.nan
    b.case("nonzero_nan_strided", f"nonzero(transpose({b.inp(nan)}, 0, 1)[\"...\", 1:4])", torch.nonzero(T(nan).transpose(0, 1)[..., 1:4]))
    b.case("argwhere_all_equal", f"argwhere({b.inp(np.full((3, 3), 7.0))})", torch.argwhere(T(np.full((3, 3), 7.0))))
    for dt in (np.float32, np.float64):
        h = r(30000, dt=dt)
        h[::97] = np.nan
        h[5] = np.inf
        h[6] = -np.inf
        H = b.inp(h)
        b.case(f"histc_big_nan_{DTN[dt]}", f"histc({H}, bins=13, min=-2, max=2.5)", torch.histc(T(h[~np.isnan(h)]), bins=13, min=-2, max=2.5))   # NaN dropped (torch 1.13 puts it in bin 0)
        b.case(f"histc_big_auto_{DTN[dt]}", f"histc({H}, bins=9)", torch.histc(T(h[np.isfinite(h)]), bins=9))
        e = r(5, 6, dt=dt)
        b.case(f"histc_strided_{DTN[dt]}", f"histc(transpose({b.inp(e)}, 0, 1)[1:4, \"...\"], bins=4, min=-1, max=1)",
               torch.histc(T(e).transpose(0, 1)[1:4], bins=4, min=-1, max=1))
    b.case("histc_all_equal", f"histc({b.inp(np.full(6, 3.0))}, bins=4)", torch.histc(T(np.full(6, 3.0)), bins=4))
    b.case("histc_one", f"histc({b.inp(np.array([0.25]))}, bins=3)", torch.histc(T(np.array([0.25])), bins=3))
    b.case("histc_empty", f"histc({b.inp(np.zeros(0))}, bins=3, min=0, max=1)", torch.histc(T(np.zeros(0)), bins=3, min=0, max=1))
    ei, ti = rng.integers(-50, 50, 30000), rng.integers(-50, 50, 37)
    b.case("isin_big", f"isin({b.inp(ei)}, {b.inp(ti)})", torch.isin(T(ei), T(ti)))
    ef = np.round(r(6, 7), 1)
    ef[2, 3] = np.nan
    tf = np.concatenate([ef[0, :4], [np.nan, np.inf], r(3)])
    b.case("isin_nan_strided", f"isin(transpose({b.inp(ef)}, 0, 1), {b.inp(tf)}, invert=true)", torch.isin(T(ef).transpose(0, 1), T(tf), invert=True))
    b.case("isin_mixed_int_float", f"isin({b.inp(np.array([1, 2, 3]))}, {b.inp(np.array([2.0, 3.5]))})", torch.isin(T(np.array([1, 2, 3])), T(np.array([2.0, 3.5]))))
    b.case("isin_empty_test", f"isin({b.inp(ei[:5])}, {b.inp(np.zeros(0, np.int64))})", torch.isin(T(ei[:5]), T(np.zeros(0, np.int64))))
    b.case("isin_empty_elements", f"isin({b.inp(np.zeros(0, np.int64))}, {b.inp(ti)})", torch.isin(T(np.zeros(0, np.int64)), T(ti)))
    # unique / unique_consecutive without dim (the device's sort + flags + scan + groups)
    ui = rng.integers(0, 500, 40000)
    b.case("unique_big_i64", f"unique({b.inp(ui)}, return_inverse=true, return_counts=true)",
           list(torch.unique(T(ui), return_inverse=True, return_counts=True)))
    for dt in (np.float32, np.float64):
        uf = np.round(r(30000, dt=dt), 1)
        uf[::101] = np.nan
        uf[3] = -0.0
        v, inv, cnt = np.unique(uf, return_inverse=True, return_counts=True)   # NaNs as one value, as nabla's CPU
        b.case(f"unique_big_nan_{DTN[dt]}", f"unique({b.inp(uf)}, return_inverse=true, return_counts=true)",
               [v, inv.astype(np.int64), cnt.astype(np.int64)], **TOLS[dt])
    us = rng.integers(0, 4, size=(5, 6)).astype(np.float32)
    b.case("unique_strided", f"unique(transpose({b.inp(us)}, 0, 1)[1:5, \"...\"], return_inverse=true, return_counts=true)",
           list(torch.unique(T(us).t()[1:5], return_inverse=True, return_counts=True)))
    b.case("unique_one", f"unique({b.inp(np.array([3.5]))}, return_inverse=true, return_counts=true)",
           list(torch.unique(T(np.array([3.5])), return_inverse=True, return_counts=True)))
    b.case("unique_all_equal", f"unique({b.inp(np.full((3, 4), 2))}, return_inverse=true, return_counts=true)",
           list(torch.unique(T(np.full((3, 4), 2)), return_inverse=True, return_counts=True)))
    b.case("unique_bool", f"unique({b.inp(np.array([True, False, True]))}, return_counts=true)",
           list(torch.unique(T(np.array([True, False, True])), return_counts=True)))
    uc = np.repeat(rng.integers(0, 3, 9000), rng.integers(1, 4, 9000))
    b.case("unique_consecutive_big", f"unique_consecutive({b.inp(uc)}, return_inverse=true, return_counts=true)",
           list(torch.unique_consecutive(T(uc), return_inverse=True, return_counts=True)))
    b.case("isin_one_all_equal", f"isin({b.inp(np.array([4]))}, {b.inp(np.full(5, 4))})", torch.isin(T(np.array([4])), T(np.full(5, 4))))


def dev_error(b, name, code, must_contain):
    """An error case whose error the device may find while its kernel runs: it
    is reported at the next synchronisation and fails all GPU work since the
    last one, so on CUDA the cases before it are waited for first (else their
    results fail with it, the batch's save fails and every case runs again
    in a process of its own: minutes under ASan)."""
    b.error(name, ("cuda.synchronize()\n" if DEVICE == "cuda" else "") + code, must_contain)


def device_search_hist_cases(b):
    """unique(dim) / unique_consecutive(dim), searchsorted / bucketize, histogram
    and bincount at the edges of their device kernels (cuda/index.cu): empty,
    one element, all equal, NaN, non-contiguous views, sizes past one grid."""
    # unique along a dim: rows sorted lexicographically on the device
    for dt in (np.int64, np.float32, np.float64):
        ur = rng.integers(0, 3, size=(3000, 3)).astype(dt)   # 27 distinct rows, many repeats
        tn = np.dtype(dt).name
        b.case(f"unique_dim0_big_{tn}", f"unique({b.inp(ur)}, dim=0, return_inverse=true, return_counts=true)",
               list(torch.unique(T(ur), dim=0, return_inverse=True, return_counts=True)))
    uc = rng.integers(0, 2, size=(4, 3, 7)).astype(np.float64)
    uc[:, :, 3] = uc[:, :, 1]
    for d in (0, 1, 2, -1):
        b.case(f"unique_dim{d}_3d", f"unique({b.inp(uc)}, dim={d}, return_inverse=true, return_counts=true)",
               list(torch.unique(T(uc), dim=d, return_inverse=True, return_counts=True)))
    ut = rng.integers(0, 2, size=(6, 40))
    b.case("unique_dim_strided", f"unique(transpose({b.inp(ut)}, 0, 1)[\"...\", 1:5], dim=0, return_inverse=true, return_counts=true)",
           list(torch.unique(T(ut).t()[..., 1:5], dim=0, return_inverse=True, return_counts=True)))
    b.case("unique_dim_one_row", f"unique({b.inp(np.array([[2.0, -1.0, 2.0]]))}, dim=0, return_inverse=true, return_counts=true)",
           list(torch.unique(T(np.array([[2.0, -1.0, 2.0]])), dim=0, return_inverse=True, return_counts=True)))
    b.case("unique_dim_all_equal", f"unique({b.inp(np.full((5, 2), 4))}, dim=1, return_inverse=true, return_counts=true)",
           list(torch.unique(T(np.full((5, 2), 4)), dim=1, return_inverse=True, return_counts=True)))
    un = np.array([[1.0, np.nan], [0.5, 2.0], [1.0, np.nan], [0.5, 2.0], [-1.0, 3.0]])
    b.case("unique_dim_nan_rows", f"unique({b.inp(un)}, dim=0, return_inverse=true, return_counts=true)",   # NaN equal to NaN, as nabla's CPU
           [un[[4, 1, 0]], np.array([2, 1, 2, 1, 0]), np.array([1, 2, 2])])
    ucr = np.repeat(rng.integers(0, 2, size=(3000, 2)), rng.integers(1, 3, 3000), axis=0)
    b.case("unique_consecutive_dim_big", f"unique_consecutive({b.inp(ucr)}, dim=0, return_inverse=true, return_counts=true)",
           list(torch.unique_consecutive(T(ucr), dim=0, return_inverse=True, return_counts=True)))
    # searchsorted / bucketize: one binary search per value
    for dt in (np.int64, np.float32, np.float64):
        tn = np.dtype(dt).name
        s = np.sort(rng.integers(-300, 300, 500)).astype(dt)
        v = rng.integers(-310, 310, 40000).astype(dt)
        for right in (False, True):
            b.case(f"searchsorted_big_{tn}_{right}", f"searchsorted({b.inp(s)}, {b.inp(v)}, right={str(right).lower()})",
                   torch.searchsorted(T(s), T(v), right=right))
    sb = np.sort(r(5, 33), axis=-1)
    vb = np.concatenate([r(5, 20), sb[:, 3:7]], axis=1)                # exact hits too
    b.case("searchsorted_batched_ties", f"searchsorted({b.inp(sb)}, {b.inp(vb)}, side=\"right\")", torch.searchsorted(T(sb), T(vb), side="right"))
    us = r(5, 33)
    so = np.argsort(us, axis=-1, kind="stable")
    b.case("searchsorted_batched_sorter", f"searchsorted({b.inp(us)}, {b.inp(vb)}, sorter={b.inp(so)})",
           torch.searchsorted(T(us), T(vb), sorter=T(so)))
    st, vt = np.sort(r(9, 4), axis=0), r(3, 4)
    b.case("searchsorted_strided", f"searchsorted(transpose({b.inp(st)}, 0, 1), transpose({b.inp(vt)}, 0, 1))",
           torch.searchsorted(T(st).t().contiguous(), T(vt).t().contiguous()))
    sn = np.array([-1.0, 0.0, 2.0, np.nan, np.nan])
    vn = np.array([np.nan, 3.0, -5.0, 0.0])
    for right in (False, True):   # NaN sorts last and equals NaN, as the CPU's
        b.case(f"searchsorted_nan_{right}", f"searchsorted({b.inp(sn)}, {b.inp(vn)}, right={str(right).lower()})",
               np.array([5 if right else 3, 3, 0, 2 if right else 1]))
    b.case("searchsorted_empty_seq", f"searchsorted({b.inp(np.zeros(0))}, {b.inp(r(4))})", np.zeros(4, np.int64))
    b.case("searchsorted_empty_values", f"searchsorted({b.inp(s)}, {b.inp(np.zeros(0))})", np.zeros(0, np.int64))
    b.case("searchsorted_one", f"searchsorted({b.inp(np.array([2.0]))}, {b.inp(np.array([2.0, 1.0, 3.0]))})", np.array([0, 0, 1]))
    b.case("searchsorted_all_equal", f"searchsorted({b.inp(np.full(7, 3))}, {b.inp(np.array([3, 2, 4]))}, right=true)", np.array([7, 0, 7]))
    b.case("bucketize_big", f"bucketize({b.inp(v)}, {b.inp(s)})", torch.bucketize(T(v), T(s)))
    dev_error(b, "searchsorted_bad_sorter", f"searchsorted({b.inp(np.arange(4.0))}, {b.inp(np.array([1.5]))}, sorter={b.inp(np.array([0, 1, 7, 2]))})",
            ["out of bounds"])
    # histogram: bins as a count (range given or the data's) or edges; weights; density
    for dt in (np.float32, np.float64):
        h = r(40000, dt=dt)
        h[::89] = np.nan
        w = np.abs(r(40000, dt=dt))
        H, W = b.inp(h), b.inp(w)
        ok = ~np.isnan(h)
        hs = torch.histogram(T(h[ok]), bins=11, range=(-2.0, 2.5), weight=T(w[ok]), density=True)
        b.case(f"histogram_big_density_{DTN[dt]}", f"d = histogram({H}, bins=11, range=list(-2.0, 2.5), weight={W}, density=true)\nlist(d.hist, d.bin_edges)",
               [hs.hist, hs.bin_edges], **TOLS[dt])
        hs = torch.histogram(T(h[ok]), bins=7)
        b.case(f"histogram_big_auto_{DTN[dt]}", f"d = histogram({H}, bins=7)\nlist(d.hist, d.bin_edges)", [hs.hist, hs.bin_edges], **TOLS[dt])
        edges = np.sort(r(6, dt=dt))
        hs = torch.histogram(T(h[ok]), bins=T(edges), weight=T(w[ok]))
        b.case(f"histogram_big_edges_{DTN[dt]}", f"histogram({H}, bins={b.inp(edges)}, weight={W}).hist", hs.hist, **TOLS[dt])
    e2 = r(5, 8)
    hs = torch.histogram(T(e2).t()[2:6].contiguous(), bins=5, range=(-1.0, 1.0))
    b.case("histogram_strided", f"histogram(transpose({b.inp(e2)}, 0, 1)[2:6, \"...\"], bins=5, range=list(-1.0, 1.0)).hist", hs.hist)
    b.case("histogram_all_equal", f"d = histogram({b.inp(np.full(5, 2.0))}, bins=3)\nlist(d.hist, d.bin_edges)",
           list(torch.histogram(T(np.full(5, 2.0)), bins=3)))
    b.case("histogram_one", f"histogram({b.inp(np.array([0.3]))}, bins=4, range=list(0.0, 1.0)).hist", torch.histogram(T(np.array([0.3])), bins=4, range=(0.0, 1.0)).hist)
    b.case("histogram_empty", f"histogram({b.inp(np.zeros(0))}, bins=3, range=list(0.0, 1.0)).hist", torch.histogram(T(np.zeros(0)), bins=3, range=(0.0, 1.0)).hist)
    dev_error(b, "histogram_edges_decreasing", f"histogram({b.inp(r(5))}, bins={b.inp(np.array([0.0, 2.0, 1.0]))})", ["increasing"])
    # bincount: one read (min and max together), atomics
    bi = rng.integers(0, 700, 40000)
    bw = r(40000)
    b.case("bincount_big_weights", f"bincount({b.inp(bi)}, weights={b.inp(bw)}, minlength=900)", torch.bincount(T(bi), weights=T(bw), minlength=900))
    b.case("bincount_one", f"bincount({b.inp(np.array([3]))})", torch.bincount(T(np.array([3]))))
    dev_error(b, "bincount_negative", f"bincount({b.inp(np.array([1, -2, 3]))})", ["non-negative", "-2"])


def device_counts():
    """On CUDA: nonzero and unique (with or without dim) read back one scalar each (the
    count), bincount one pair (min and max), isin, searchsorted/bucketize and histc/histogram
    with a given range none, histogram without a range one pair; nothing else crosses to the host."""
    code = """set_default_device("cuda")
x = randn([50, 7])
t = randn([9])
mask = x > 0.5
cuda.synchronize()
cuda.reset_stats()
a = nonzero(mask)
c1 = cuda.stats()
cuda.reset_stats()
u = unique(mask, return_inverse=true, return_counts=true)
c1u = cuda.stats()
cuda.reset_stats()
b = isin(x, t)
h = histc(x, bins=6, min=-1, max=1)
cuda.synchronize()
c2 = cuda.stats()
ts = sort(t)[0]
cuda.synchronize()
cuda.reset_stats()
ss = searchsorted(ts, x, right=true)
bk = bucketize(x, ts)
cuda.synchronize()
c3 = cuda.stats()
cuda.reset_stats()
ud = unique(mask, dim=0, return_inverse=true, return_counts=true)
c4 = cuda.stats()
cuda.reset_stats()
bc = bincount(ud[1], minlength=3)
c5 = cuda.stats()
cuda.reset_stats()
hg = histogram(x, bins=5, range=list(-1.0, 1.0))
cuda.synchronize()
c6 = cuda.stats()
cuda.reset_stats()
ha = histogram(x, bins=5)
cuda.synchronize()
c7 = cuda.stats()
print("ixstats nz_d2h={c1.memcpy_d2h} nz_h2d={c1.memcpy_h2d} u_d2h={c1u.memcpy_d2h} u_h2d={c1u.memcpy_h2d} d2h={c2.memcpy_d2h} h2d={c2.memcpy_h2d} on={a.device},{b.device},{h.device}")
print("ixstats2 ss_d2h={c3.memcpy_d2h} ss_h2d={c3.memcpy_h2d} ss_sync={c3.syncs} ud_d2h={c4.memcpy_d2h} ud_h2d={c4.memcpy_h2d} ud_sync={c4.syncs} bc_d2h={c5.memcpy_d2h} bc_sync={c5.syncs} hg_d2h={c6.memcpy_d2h} ha_d2h={c7.memcpy_d2h} ha_sync={c7.syncs} on={ss.device},{bk.device},{ud[0].device},{bc.device},{hg.hist.device}")
"""
    rc, so, se = run_nabla(code, timeout=600)
    line = next((ln for ln in so.splitlines() if ln.startswith("ixstats ")), None)
    if rc != 0 or line is None:
        report_fail("setops.device_counts", f"rc {rc}: {se[-400:]} {so[-200:]}")
        return
    f = dict(kv.split("=") for kv in line.split()[1:])
    check("setops.nonzero_one_read", f["nz_d2h"] == "1" and f["nz_h2d"] == "0", f"nonzero should read back its count only: {line}")
    check("setops.unique_one_read", f["u_d2h"] == "1" and f["u_h2d"] == "0", f"unique should read back its group count only: {line}")
    check("setops.isin_histc_no_copies", f["d2h"] == "0" and f["h2d"] == "0" and f["on"] == "cuda,cuda,cuda", f"isin/histc crossed to the host: {line}")
    line2 = next((ln for ln in so.splitlines() if ln.startswith("ixstats2 ")), "ixstats2")
    g = dict(kv.split("=") for kv in line2.split()[1:])
    check("setops.searchsorted_no_copies", g.get("ss_d2h") == "0" and g.get("ss_h2d") == "0" and g.get("ss_sync") == "1", f"searchsorted/bucketize crossed to the host (the one sync is cuda.synchronize): {line2}")
    check("setops.unique_dim_one_read", g.get("ud_d2h") == "1" and g.get("ud_h2d") == "0" and g.get("ud_sync") == "1", f"unique(dim) should read back its group count only: {line2}")
    check("setops.bincount_one_read", g.get("bc_d2h") == "1" and g.get("bc_sync") == "1", f"bincount should read min and max once: {line2}")
    check("setops.histogram_reads", g.get("hg_d2h") == "0" and g.get("ha_d2h") == "1" and g.get("ha_sync") == "2" and g.get("on") == "cuda,cuda,cuda,cuda,cuda",
          f"histogram: nothing read with a range, one read (the range) without (+ cuda.synchronize): {line2}")


def main():
    small = os.environ.get("SETOPS_SUBSET") == "1"
    b = Batch("setops")
    unique_cases(b, small); counting_cases(b, small); search_cases(b, small); device_kernel_cases(b)
    if small:
        device_search_hist_cases(b)
    b.run()
    b = Batch("arrange")
    arrange_cases(b, small); scan_cases(b, small); distance_cases(b, small)
    b.run()
    b = Batch("special")
    special_cases(b, small)
    b.run()
    b = Batch("setops_grad")
    grad_cases(b, small)
    b.run()
    if not small:
        b = Batch("setops_err"); error_cases(b); fd_cases(b); b.run()
    if DEVICE == "cuda":
        device_counts()
    if DEVICE == "cpu" and not emulated_rerun(__file__, "setops", "SETOPS_SUBSET"):
        report_fail("setops.emulated", "the emulated-device run failed (its lines above)")
    finish()


if __name__ == "__main__":
    main()
