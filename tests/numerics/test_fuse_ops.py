#!/usr/bin/python3
"""pow and the comparisons (== != < <= > >=) inside lazy fused chains
(tensor/tfuse.c), and NaN payloads fused vs unfused.

Every batch runs with NABLA_FUSE=1 and NABLA_FUSE=0 on the same fresh random
inputs (fuseutil.run_both); every case must give the same bits both ways and
match NumPy.  Inputs carry the edge values: +-0, +-inf, NaN, negative bases
with integer and non-integer exponents; f32, f64, i32 and i64; operands
broadcast as rows / columns / 0-d; transposed (strided) inputs.  Sizes are
above the fusion threshold (16384 elements), and the fused run must really
fuse (fuse_stats' forced count grows).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_fuse_ops.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, check, finish, rng, np  # noqa: E402
from fuseutil import run_both, judge  # noqa: E402

SHAPE = (160, 128)
NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}


def edgy(shape, dt, scale=3.0):
    """random values with +-0, +-inf, NaN and small integers sprinkled in"""
    if dt in ("i32", "i64"):
        return rng.integers(-50, 50, size=shape).astype(NP[dt])
    a = (rng.standard_normal(shape) * scale).astype(NP[dt])
    flat = a.reshape(-1)
    n = flat.size
    for v in (0.0, -0.0, np.inf, -np.inf, np.nan):
        flat[rng.choice(n, n // 40, replace=False)] = v
    k = rng.choice(n, n // 10, replace=False)
    flat[k] = rng.integers(-4, 5, size=k.size)     # integral values: exponents and negative bases
    return a


def cmp_batch():
    b = Batch("fuse_ops.cmp")
    ops = [("==", np.equal), ("!=", np.not_equal), ("<", np.less), ("<=", np.less_equal), (">", np.greater),
           (">=", np.greater_equal)]
    for dt in ("f32", "f64", "i32", "i64"):
        xa, ya = edgy(SHAPE, dt), edgy(SHAPE, dt)
        # ties: many equal elements, so == and <= see them
        ya.reshape(-1)[::7] = xa.reshape(-1)[::7]
        x, y = b.inp(xa), b.inp(ya)
        row, col, s0 = edgy(SHAPE[-1:], dt), edgy(SHAPE[:-1] + (1,), dt), edgy((), dt)
        r, c, z = b.inp(row), b.inp(col), b.inp(s0)
        xt = b.inp(np.ascontiguousarray(xa.T))
        for sym, f in ops:
            b.case(f"{dt}.tt{sym}", f"{x} {sym} {y}", f(xa, ya))
            b.case(f"{dt}.row{sym}", f"{x} {sym} {r}", f(xa, row))
            b.case(f"{dt}.col{sym}", f"{col_first(c, x, sym)}", f(col, xa))
            b.case(f"{dt}.zerod{sym}", f"{x} {sym} {z}", f(xa, s0))
            b.case(f"{dt}.strided{sym}", f"{xt}.T {sym} {y}", f(xa, ya))
            b.case(f"{dt}.scalar{sym}", f"{x} {sym} 1", f(xa, NP[dt](1)))
            b.case(f"{dt}.scalar_first{sym}", f"0.5 {sym} {x}", f(np.float64(0.5), xa.astype(np.float64)))
        if dt in ("f32", "f64"):
            T = NP[dt]
            # a comparison of chains, and its bool result inside a chain
            with np.errstate(all="ignore"):
                lhs, rhs = xa * T(2), ya + T(1)
                b.case(f"{dt}.chain_cmp", f"{x} * 2 > {y} + 1", lhs > rhs)
                m = (xa > ya).astype(NP[dt])
                b.case(f"{dt}.bool_in_chain", f"({x} > {y}) * {x} + ({x} <= 0.5) * 2.0",
                       m * xa + (xa <= T(0.5)).astype(NP[dt]) * T(2), rtol=0, atol=0)
                b.case(f"{dt}.cmp_of_neg", f"-{x} < abs({y})", -xa < np.abs(ya))
        else:
            xf = b.inp(edgy(SHAPE, "f32"))
            xfa = b.inputs[xf[2:]]
            with np.errstate(all="ignore"):
                b.case(f"{dt}.mixed_float", f"{x} < {xf}", xa.astype(np.float32) < xfa)
                b.case(f"{dt}.float_scalar", f"{x} >= 0.5", xa >= 0.5)
    b.case("stats", "fuse_stats().forced", lambda got: None)
    return b


def col_first(c, x, sym):
    """the broadcast operand on the left: col OP x"""
    return f"{c} {sym} {x}"


def pow_batch():
    b = Batch("fuse_ops.pow")
    for dt in ("f32", "f64"):
        T = NP[dt]
        tol = (4e-6, 1e-30) if dt == "f32" else (1e-14, 1e-300)
        xa = edgy(SHAPE, dt)
        ya = edgy(SHAPE, dt, scale=2.0)
        x, y = b.inp(xa), b.inp(ya)
        xt = b.inp(np.ascontiguousarray(xa.T))
        row = edgy(SHAPE[-1:], dt, scale=2.0)
        r = b.inp(row)
        with np.errstate(all="ignore"):
            b.case(f"{dt}.tt", f"{x} ** {y}", np.power(xa, ya), *tol)
            b.case(f"{dt}.abs_base", f"abs({x}) ** {y}", np.power(np.abs(xa), ya), *tol)
            b.case(f"{dt}.chain", f"({x} * 2) ** ({y} + 1) * 3", np.power(xa * T(2), ya + T(1)) * T(3), *tol)
            for e in (2, 3, -1, 0.5, 1.5, -2.5, 4, 7, 0):
                b.case(f"{dt}.scalar_{e}", f"({x} * 1) ** {e}", np.power(xa, T(e)), *tol)
            for base in (2, 0.5, -2, 0):
                b.case(f"{dt}.base_{base}", f"({base}) ** ({x} * 1)", np.power(T(base), xa), *tol)
            b.case(f"{dt}.pow_then_cmp", f"{x} ** 2 + 1 > {y}", np.power(xa, T(2)) + T(1) > ya)
            # not fused (the unfused op would not be contiguous), same bits anyway
            b.case(f"{dt}.strided", f"{xt}.T ** {y}", np.power(xa, ya), *tol)
            b.case(f"{dt}.strided_scalar", f"{xt}.T ** 1.5", np.power(xa, T(1.5)), *tol)
            b.case(f"{dt}.broadcast_row", f"{x} ** {r}", np.power(xa, row), *tol)
            ia = rng.integers(-5, 6, size=SHAPE).astype(np.int32)
            b.case(f"{dt}.i32_exponent", f"{x} ** {b.inp(ia)}", np.power(xa, ia.astype(NP[dt])), *tol)
    b.case("stats", "fuse_stats().forced", lambda got: None)
    return b


def nan_bits(shape, dt):
    """NaNs with random payloads and signs (quiet), and some ordinary values"""
    if dt == "f32":
        bits = rng.integers(0, 1 << 22, size=shape, dtype=np.uint32) | np.uint32(0x7FC00000)
        bits |= (rng.integers(0, 2, size=shape, dtype=np.uint32) << np.uint32(31))
        a = bits.view(np.float32).copy()
    else:
        bits = rng.integers(0, 1 << 51, size=shape, dtype=np.uint64) | np.uint64(0x7FF8000000000000)
        bits |= (rng.integers(0, 2, size=shape, dtype=np.uint64) << np.uint64(63))
        a = bits.view(np.float64).copy()
    flat = a.reshape(-1)
    k = rng.choice(flat.size, flat.size // 3, replace=False)
    flat[k] = rng.standard_normal(k.size)
    return a


def nan_batch():
    """Both operands NaN with different payloads: which one a result carries
    is left open by IEEE, but fused and unfused must agree (bit-compared)."""
    b = Batch("fuse_ops.nan_payload")
    for dt, shape in (("f32", SHAPE), ("f64", SHAPE), ("f32", (161, 129)), ("f64", (129, 161))):
        # (odd extents: the vector loops' remainders too)
        xa, ya = nan_bits(shape, dt), nan_bits(shape, dt)
        dt_name = f"{dt}{'' if shape == SHAPE else '_odd'}"
        x, y = b.inp(xa), b.inp(ya)
        xt, yt = b.inp(np.ascontiguousarray(xa.T)), b.inp(np.ascontiguousarray(ya.T))
        T = NP[dt]
        with np.errstate(all="ignore"):
            for sym, f in (("+", np.add), ("-", np.subtract), ("*", np.multiply), ("/", np.divide)):
                b.case(f"{dt_name}.tt{sym}", f"{x} {sym} {y}", f(xa, ya), 0, 0)
                b.case(f"{dt_name}.chain{sym}", f"({x} * 2) {sym} ({y} + 1)", f(xa * T(2), ya + T(1)), 0, 0)
                b.case(f"{dt_name}.scalar{sym}", f"{x} {sym} 3", f(xa, T(3)), 0, 0)
                b.case(f"{dt_name}.strided{sym}", f"{xt}.T {sym} {yt}.T", f(xa, ya), 0, 0)
                b.case(f"{dt_name}.row{sym}", f"{x} {sym} {y}[3]", f(xa, ya[3]), 0, 0)
            b.case(f"{dt_name}.unary_chain", f"-{x} * {y} + abs({y})", -xa * ya + np.abs(ya), 0, 0)
    b.case("stats", "fuse_stats().forced", lambda got: None)
    return b


for mk, min_forced in ((cmp_batch, 100), (pow_batch, 30), (nan_batch, 20)):
    bb = mk()
    res = run_both(bb)
    if not res:
        continue
    on, off = res
    stats = {i for i, c in enumerate(bb.cases) if c.name == "stats"}
    judge(bb, on, off, stats)
    for i in stats:
        f_on, f_off = on.get(f"c{i}"), off.get(f"c{i}")
        ok = f_on is not None and f_off is not None and float(f_on) >= min_forced and float(f_off) == 0
        check(f"{bb.title}.fused_really", ok,
              f"fuse_stats().forced on={f_on} off={f_off} (want >= {min_forced} with fusion, 0 without)")
finish()
