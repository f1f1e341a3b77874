#!/usr/bin/python3
"""linspace, arange, histogram and histc bit for bit as torch 1.13 (tensor/trange.h,
tensor/index/ixhistbin.h), on fresh random inputs.

linspace: the bits of every element against torch.linspace for f32, f64,
bf16, f16, i64, i32 and u8, over random (start, end, steps): steps 1, 2,
odd and past one of torch's vector blocks, up to 40,000 (torch with one
thread, as harness sets it); decreasing, equal and huge ranges.

histogram: bins as a count (the data's range or a given one) and as a tensor
of edges; with weights, with density; f32 and f64; data drawn normal, uniform,
constant, with NaN (given a range), and edge-heavy: values that ARE torch's
edges and one ulp either side (where a plain binary search over the edges,
and the linear guess without its local search, both put some values in
another bin than torch).  Counts must be equal exactly; weighted and density
results within rounding (torch sums weights in the input's type).  Each
case holds many histograms and says how many disagreed.

Without NUMERICS_DEVICE the suite runs again on the emulated CUDA device
(NABLA_CUDA_EMULATE=force) with fewer inputs (BINNING_SUBSET=1).
tools/run-tests.sh runs it a second time on the ASan build (NABLA_ASAN=1).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_binning.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np, DEVICE, report_fail, emulated_rerun, to_np  # noqa: E402

SMALL = os.environ.get("BINNING_SUBSET") == "1" or os.environ.get("NABLA_ASAN") == "1"
TDT = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16, "f16": torch.float16,
       "i64": torch.int64, "i32": torch.int32, "u8": torch.uint8}
NPDT = {"f32": np.float32, "f64": np.float64}


def num(v):
    """a nabla literal of the double v, exactly (repr round-trips)"""
    return repr(float(v))


def same_bits(exps):
    """a harness check: got (a list of tensors) equals exps element for element,
    bit for bit (NaN equal to NaN); says how many of the tensors differ"""
    def chk(got):
        if not isinstance(got, list) or len(got) != len(exps):
            return f"expected a list of {len(exps)} tensors, got {type(got).__name__}"
        bad = []
        for i, (g, e) in enumerate(zip(got, exps)):
            g, e = to_np(g), to_np(e)
            if g.shape != e.shape:
                bad.append(f"#{i}: shape {g.shape} != {e.shape}")
                continue
            if np.issubdtype(e.dtype, np.floating):
                g64, e64 = g.astype(np.float64), e.astype(np.float64)
                diff = ~((g64 == e64) & (np.signbit(g64) == np.signbit(e64)) | (np.isnan(g64) & np.isnan(e64)))
            else:
                diff = g.astype(np.int64) != e.astype(np.int64)
            if diff.any():
                k = int(np.argmax(diff))
                bad.append(f"#{i}: {int(diff.sum())}/{diff.size} elements differ, first [{k}] got {g.flat[k]!r} expected {e.flat[k]!r}")
        return None if not bad else f"{len(bad)}/{len(exps)} disagree: " + "; ".join(bad[:3])
    return chk


def close_lists(exps, rtol, atol):
    def chk(got):
        if not isinstance(got, list) or len(got) != len(exps):
            return f"expected a list of {len(exps)} tensors, got {type(got).__name__}"
        bad = []
        for i, (g, e) in enumerate(zip(got, exps)):
            g, e = to_np(g).astype(np.float64), to_np(e).astype(np.float64)
            if g.shape != e.shape or not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
                bad.append(f"#{i}: got {g[:6]} expected {e[:6]}")
        return None if not bad else f"{len(bad)}/{len(exps)} disagree: " + "; ".join(bad[:2])
    return chk


# ---------------------------------------------------------------- linspace
def linspace_args(dt, count):
    out = []
    for _ in range(count):
        kind = rng.integers(0, 6)
        mag = 10.0 ** rng.integers(-3, 5)
        a, b = rng.standard_normal(2) * mag
        if dt in ("i64", "i32"):
            a, b = rng.standard_normal(2) * 10.0 ** rng.integers(0, 6)
        if dt == "u8":
            a, b = rng.uniform(0, 255, 2)
        if kind == 0:
            a, b = max(a, b), min(a, b)                      # decreasing
        elif kind == 1 and dt in ("f32", "f64"):
            a, b = -rng.uniform(1, 3) * 1e30, rng.uniform(1, 3) * 1e30   # huge
        elif kind == 2:
            b = a                                            # equal
        n = int(rng.choice([1, 2, 3, int(rng.integers(4, 40)), int(rng.integers(40, 700))]))
        out.append((a, b, n))
    if not SMALL:   # past torch's one-thread grain: harness runs torch with one thread
        a, b = rng.uniform(0, 255, 2) if dt == "u8" else (rng.standard_normal(), rng.standard_normal() * 100)
        out.append((float(a), float(b), 40000 + int(rng.integers(0, 99))))
    out.append((0.0, 1.0, 0))
    return out


def linspace_cases(b):
    per = 40 if SMALL else 150
    for dt in TDT:
        args = linspace_args(dt, per)
        exps = [torch.linspace(a, c, n, dtype=TDT[dt]) for a, c, n in args]
        code = "list(" + ", ".join(f"linspace({num(a)}, {num(c)}, {n}, dtype=\"{dt}\")" for a, c, n in args) + ")"
        b.case(f"linspace_bits_{dt}", code, same_bits(exps))
    # the last element is torch's, not `end`, where torch's vectors put it (f64, 8 steps: 4-lane vectors)
    a, c = 0.1, 0.7
    e = torch.linspace(a, c, 8, dtype=torch.float64)
    b.case("linspace_last_as_torch", f"linspace({num(a)}, {num(c)}, 8, dtype=\"f64\")", lambda got: same_bits([e])([got]))


def arange_cases(b):
    """arange's bits: floats by torch's vector layout (trange.h), integers exact"""
    per = 30 if SMALL else 100
    for dt in ("f32", "f64", "bf16", "f16", "i64", "i32"):
        args = []
        for _ in range(per):
            if dt in ("i64", "i32"):
                a, st = int(rng.integers(-10**6, 10**6)), int(rng.integers(1, 50)) * int(rng.choice([-1, 1]))
                c = a + st * int(rng.integers(0, 700))
            else:
                mag = 10.0 ** rng.integers(-2, 3) if dt in ("f32", "f64") else 1.0
                a, st = float(rng.standard_normal() * 10 * mag), float(rng.uniform(0.001, 1) * mag * rng.choice([-1, 1]))
                c = a + st * float(rng.uniform(0, 700))
            args.append((a, c, st))
        exps = [torch.arange(a, c, st, dtype=TDT[dt]) for a, c, st in args]
        code = "list(" + ", ".join(f"arange({a!r}, {c!r}, {st!r}, dtype=\"{dt}\")" for a, c, st in args) + ")"
        b.case(f"arange_bits_{dt}", code, same_bits(exps))


# ---------------------------------------------------------------- histogram
def ulp_around(v, dt):
    v = np.asarray(v, dt)
    return np.concatenate([v, np.nextafter(v, dt(np.inf)), np.nextafter(v, dt(-np.inf))])


def hist_input(dt, kind, bins):
    """(data, range or None) for one histogram"""
    n = int(rng.integers(1, 300))
    if kind == "normal":
        return rng.standard_normal(n).astype(dt) * dt(10.0 ** rng.integers(-2, 3)), None
    if kind == "uniform":
        lo = rng.standard_normal() * 5
        return rng.uniform(lo, lo + rng.uniform(0.01, 20), n).astype(dt), None
    if kind == "constant":
        return np.full(n, rng.standard_normal() * 3, dt), None
    if kind == "nan_range":
        x = rng.standard_normal(n).astype(dt)
        x[rng.integers(0, n, max(1, n // 5))] = np.nan
        return x, (float(rng.uniform(-2, -0.5)), float(rng.uniform(0.5, 2)))
    if kind == "range":
        return rng.standard_normal(n).astype(dt) * 2, (float(rng.uniform(-3, 0)), float(rng.uniform(0.1, 3)))
    # edge-heavy: the data's min and max set the edges (torch's linspace of them); every edge and its neighbours
    m, M = sorted(rng.standard_normal(2) * 10.0 ** rng.integers(-2, 3))
    m, M = dt(m), dt(M)
    if m == M:
        M = np.nextafter(M, dt(np.inf))
    e = torch.linspace(float(m), float(M), bins + 1, dtype=torch.float64 if dt == np.float64 else torch.float32).numpy().astype(dt)
    x = ulp_around(e, dt)
    x = x[(x >= m) & (x <= M)]
    x = np.concatenate([x, [m, M], rng.uniform(m, M, 20).astype(dt)]).astype(dt)
    return rng.permutation(x), (None if kind == "edges_auto" else (float(m), float(M)))


def hist_cases(b):
    kinds = ["normal", "uniform", "constant", "nan_range", "range", "edges_auto", "edges_range"]
    groups = 2 if SMALL else 6
    per = 25 if SMALL else 50
    for dt, dn in ((np.float32, "f32"), (np.float64, "f64")):
        for g in range(groups):
            plain, plain_e, weighted, weighted_e, code_p, code_w = [], [], [], [], [], []
            for _ in range(per):
                kind = kinds[int(rng.integers(0, len(kinds)))]
                bins = int(rng.integers(1, 51))
                x, rg = hist_input(dt, kind, bins)
                X = b.inp(x)
                rarg = "" if rg is None else f", range=list({num(rg[0])}, {num(rg[1])})"
                # NaN is dropped, as NumPy and later torch do; torch 1.13 itself counts a NaN in bin 1 (a count
                # of bins) or the last bin (edges), so its reference is taken without them
                ok = ~np.isnan(x)
                tx = T(x[ok])
                hs = torch.histogram(tx, bins=bins, range=rg) if rg is not None else torch.histogram(tx, bins=bins)
                plain.append(hs.hist); plain_e.append(hs.bin_edges)
                code_p.append(f"histogram({X}, bins={bins}{rarg})")
                # weights and density on the same data; and the bins as torch's edges tensor (binary search)
                w = np.abs(rng.standard_normal(x.size)).astype(dt)
                W = b.inp(w)
                density = bool(rng.integers(0, 2))
                hw = torch.histogram(tx, bins=bins, range=rg, weight=T(w[ok]), density=density).hist if rg is not None else \
                    torch.histogram(tx, bins=bins, weight=T(w[ok]), density=density).hist
                weighted.append(hw)
                code_w.append(f"histogram({X}, bins={bins}{rarg}, weight={W}, density={str(density).lower()}).hist")
                ed = hs.bin_edges.clone()
                ED = b.inp(ed.numpy())
                weighted_e.append(torch.histogram(tx, bins=ed).hist)
                code_w.append(f"histogram({X}, bins={ED}).hist")
            b.case(f"histogram_counts_{dn}_{g}", "list(" + ", ".join(f"{c}.hist" for c in code_p) + ")", same_bits(plain))
            b.case(f"histogram_edges_{dn}_{g}", "list(" + ", ".join(f"{c}.bin_edges" for c in code_p) + ")", same_bits(plain_e))
            tol = dict(rtol=2e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-14)
            exps = [v for pair in zip(weighted, weighted_e) for v in pair]
            b.case(f"histogram_weighted_density_given_edges_{dn}_{g}", "list(" + ", ".join(code_w) + ")", close_lists(exps, **tol))
            b.case(f"histogram_given_edges_counts_{dn}_{g}", "list(" + ", ".join(code_w[1::2]) + ")", same_bits(weighted_e))


def histc_cases(b):
    """histc: torch 1.13 bins (x - lo) / (top - lo) * bins in the input's type, top its linspace's last edge"""
    kinds = ["normal", "uniform", "constant", "range", "edges_auto", "edges_range", "edges_auto"]
    per = 25 if SMALL else 60
    for dt, dn in ((np.float32, "f32"), (np.float64, "f64")):
        exps, code = [], []
        for _ in range(per):
            bins = int(rng.integers(1, 51))
            x, rg = hist_input(dt, kinds[int(rng.integers(0, len(kinds)))], bins)
            lo, hi = (0.0, 0.0) if rg is None else rg
            exps.append(torch.histc(T(x), bins=bins, min=lo, max=hi))
            code.append(f"histc({b.inp(x)}, bins={bins}, min={num(lo)}, max={num(hi)})")
        b.case(f"histc_counts_{dn}", "list(" + ", ".join(code) + ")", same_bits(exps))


def regression_cases(b):
    """the seed that showed it (test_setops' histogram_big_auto_f64, NUMERICS_SEED=776160148): 40,000
    normal values in 7 bins; torch's last edge is one ulp below the data's max, and torch drops the max"""
    r = np.random.default_rng(776160148)
    for dt, dn in ((np.float32, "f32"), (np.float64, "f64")):
        x = r.standard_normal(40000).astype(dt)
        for bins in (7, 5, 12, 33):
            hs = torch.histogram(T(x), bins=bins)
            b.case(f"histogram_big_auto_{dn}_{bins}", f"d = histogram({b.inp(x)}, bins={bins})\nlist(d.hist, d.bin_edges)",
                   same_bits([hs.hist, hs.bin_edges]))


def main():
    b = Batch("binning")
    linspace_cases(b)
    arange_cases(b)
    regression_cases(b)
    hist_cases(b)
    histc_cases(b)
    b.run()
    if DEVICE == "cpu" and not emulated_rerun(__file__, "binning", "BINNING_SUBSET"):
        report_fail("binning.emulated", "the emulated-device run failed (its lines above)")
    finish()


if __name__ == "__main__":
    main()
