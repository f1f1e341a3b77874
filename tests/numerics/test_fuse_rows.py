#!/usr/bin/python3
"""Fused chains with broadcast row / column operands (tensor/tfuse.c's
row-aligned tiles, issue 28).

The CPU tiles follow the rows of the chain's last axis: rows of D >= 1024
elements are cut into equal chunks, shorter rows go whole (1024 // D per
tile), so a row operand is pointed into (a contiguous slice) or gathered once
per worker; small ops on a tensor a pending chain reads are recorded too, so
`x / (abs(w) + 1)` does not cut the chain around it in two.  Every batch runs
TWICE (NABLA_FUSE=1 and =0) on the same fresh random inputs: values and
gradients must be the same bits both ways and match PyTorch, for:

- row lengths around the tile and vector widths: several rows per tile
  (D 1, 7, 1000), one (528), chunks of a row (2048, 4096, 3008), rows that
  cannot be aligned (333, 1031, 2500: flat tiles), 3-D chains with [*, 1]
  and [D] operands;
- NaN payloads through + - * (the compiled loops' remainders at the same
  elements fused and unfused);
- operands: a contiguous row [D], a scalar-like [1, D] and [1, 1], a column
  [N, 1], a non-contiguous row (w[::2]), a transposed (strided) x;
- f32 and f64, forward alone and value_and_grad (the one-pass backward's
  tiles are the same);
- the issue's chain sum(tanh(x * w + 1) * 3 - x / (abs(w) + 1) + sigmoid(x *
  0.5) * x): one fused chain (the profiler's row holds tanh, div and sigmoid),
  bias + activation, LayerNorm-style (x - m) * r * g + b.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_fuse_rows.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Batch, T, check, finish, rng, torch, np  # noqa: E402
from fuseutil import run_both, judge  # noqa: E402

F = torch.nn.functional
NPT = {"f32": np.float32, "f64": np.float64}
TOL = {"f64": (1e-10, 1e-10), "f32": (2e-4, 2e-4)}
STATS = "s = fuse_stats()\nlist(s.pending, s.forced, s.dropped, s.backward_fused, s.backward_fallbacks)"

# (shape, D): numel >= 16384 each (the fusion threshold); the tiles they get
# (tfuse.c's nt_fuse_tiles_): D 1 and 7 several rows per tile, 1000 two rows
# (2000: FUSE_ALIGN), 528 one row, 2048 / 4096 / 3008 chunks of a row (3008:
# 1008, 1008, 992), 333 / 1031 / 2500 flat tiles (rows not alignable)
SHAPES = [((20000,), 1), ((20000, 1), 1), ((2400, 7), 7), ((60, 333), 333), ((30, 1000), 1000), ((32, 528), 528),
          ((17, 1031), 1031), ((9, 2048), 2048), ((6, 4096), 4096), ((9, 2500), 2500), ((3, 5, 1031), 1031),
          ((4, 6, 1000), 1000), ((2, 3, 3008), 3008)]

# chains over x (the chain's shape) and w (broadcast): nabla, torch
CHAINS = [
    ("tanh(x * {W} + 1) * 3 - x / (abs({W}) + 1) + sigmoid(x * 0.5) * x",
     lambda x, w: torch.tanh(x * w + 1) * 3 - x / (w.abs() + 1) + torch.sigmoid(x * 0.5) * x),
    ("gelu(x + {W}) * 1.5 - x", lambda x, w: F.gelu(x + w) * 1.5 - x),
    ("maximum(x * {W}, {W} - x) / (x * x + 1)", lambda x, w: torch.maximum(x * w, w - x) / (x * x + 1)),
]


def w_shapes(shape):
    """the operands broadcasting to shape: (name, array shape, strided): row, [1, D], [1, 1], column, w[::2]"""
    d = shape[-1]
    # ("one" stays within the chain's rank: [1, 1] would make a 1-D chain 2-D, x then a broadcast input
    # whose 4 gradient shares may round differently from unfused, as docs/tensors.md allows)
    out = [("row", (d,), False), ("row1", (1,) * (len(shape) - 1) + (d,), False), ("one", (1,) * len(shape), False),
           ("col", shape[:-1] + (1,), False), ("row_step2", (2 * d,), True)]
    if len(shape) == 3:
        out.append(("mid", (shape[1], 1), False))
    return out


def add_case(b, name, dt, nb, tf, shape, wshape, strided, grad, x_t=False):
    xa = rng.uniform(-2, 2, shape[::-1] if x_t else shape).astype(NPT[dt])
    wa = rng.uniform(-2, 2, wshape).astype(NPT[dt])
    ga = rng.standard_normal(shape).astype(NPT[dt])
    x, w, g = b.inp(xa), b.inp(wa), b.inp(ga)
    wexpr = "w[::2]" if strided else "w"
    xexpr = "x.T" if x_t else "x"
    expr = nb.replace("x", xexpr).replace("{W}", wexpr)   # (x_t: only chains whose names hold no "x")
    xt, wt = T(xa, grad), T(wa, grad)
    xv = xt.T if x_t else xt
    wv = wt[::2] if strided else wt
    y = tf(xv, wv)
    if not grad:
        b.case(name, f"x = {x}\nw = {w}\ny = {expr}\ny", y.detach(), *TOL[dt])
        return
    loss = (y * T(ga)).sum()
    loss.backward()
    b.case(name, f"vg = value_and_grad(fn(x, w) sum(({expr}) * {g}), [0, 1])({x}, {w})\nlist(vg[0], vg[1][0], vg[1][1])",
           [loss.detach(), xt.grad, wt.grad], *TOL[dt])


def shapes_batch():
    b = Batch("fuse_rows.shapes")
    for shape, d in SHAPES:
        for wn, ws, strided in w_shapes(shape):
            dt = "f32" if rng.random() < 0.7 else "f64"
            ci = rng.integers(0, len(CHAINS))
            nb, tf = CHAINS[ci]
            tag = "x".join(map(str, shape))
            add_case(b, f"fwd_{tag}_{wn}_c{ci}_{dt}", dt, nb, tf, shape, ws, strided, False)
            ci = rng.integers(0, len(CHAINS))
            nb, tf = CHAINS[ci]
            add_case(b, f"grad_{tag}_{wn}_c{ci}_{dt}", dt, nb, tf, shape, ws, strided, True)
    # a transposed (strided) x with a row operand: gathered x, pointed-into w
    for dt in ("f32", "f64"):
        add_case(b, f"grad_xT_row_{dt}", dt, CHAINS[0][0], CHAINS[0][1], (40, 1000), (1000,), False, True, x_t=True)
        add_case(b, f"fwd_xT_row_{dt}", dt, CHAINS[1][0], CHAINS[1][1], (30, 2100), (2100,), False, False, x_t=True)
    b.case("stats", STATS, lambda got: None)
    return b


def models_batch():
    """bias + activation and LayerNorm-style chains, as a layer writes them"""
    b = Batch("fuse_rows.models")
    for dt in ("f32", "f64"):
        for n, d in ((64, 1000), (40, 777), (12, 1500)):
            xa = rng.standard_normal((n, d)).astype(NPT[dt])
            ba = rng.standard_normal((d,)).astype(NPT[dt])
            ga = rng.standard_normal((d,)).astype(NPT[dt])
            gy = rng.standard_normal((n, d)).astype(NPT[dt])
            x, bb, g, gyy = b.inp(xa), b.inp(ba), b.inp(ga), b.inp(gy)
            # bias + activation
            xt, bt = T(xa, True), T(ba, True)
            (F.gelu(xt + bt) * T(gy)).sum().backward()
            b.case(f"bias_gelu_{n}x{d}_{dt}", f"vg = value_and_grad(fn(x, b) sum(gelu(x + b) * {gyy}), [0, 1])({x}, {bb})\n"
                                              f"list(vg[0], vg[1][0], vg[1][1])",
                   [(F.gelu(T(xa) + T(ba)) * T(gy)).sum(), xt.grad, bt.grad], *TOL[dt])
            # LayerNorm-style: mean / rstd columns [N, 1] (reductions: eager), then the fused affine
            xt, gt, bt = T(xa, True), T(ga, True), T(ba, True)
            m = xt.mean(1, keepdim=True)
            r = torch.rsqrt(((xt - m) ** 2).mean(1, keepdim=True) + 1e-5)
            y = (xt - m) * r * gt + bt
            (y * T(gy)).sum().backward()
            code = (f"fn ln(x, g, b) {{\n m = mean(x, 1, true)\n r = rsqrt(mean((x - m) * (x - m), 1, true) + 1e-5)\n"
                    f" sum(((x - m) * r * g + b) * {gyy})\n}}\n"
                    f"vg = value_and_grad(ln, [0, 1, 2])({x}, {g}, {bb})\nlist(vg[0], vg[1][0], vg[1][1], vg[1][2])")
            b.case(f"layernorm_{n}x{d}_{dt}", code, [(y * T(gy)).sum().detach(), xt.grad, gt.grad, bt.grad], *TOL[dt])
    b.case("stats", STATS, lambda got: None)
    return b


def nan_batch():
    """Both operands NaN with different payloads: which one + - * / carries is
    the compiled loop's choice (its remainder code may differ from its vector
    body), so fused tiles must put the remainders where unfused does"""
    b = Batch("fuse_rows.nan_payload")
    for shape in ((30, 1000), (32, 528), (9, 2048), (2, 3, 3008), (2400, 7), (60, 333), (17, 1031)):
        for dt, bits in (("f32", np.uint32), ("f64", np.uint64)):
            nan = np.array([np.nan], dtype=NPT[dt]).view(bits)[0]
            xa, ya = ((np.full(shape, nan, bits) | rng.integers(1, 1 << 20, shape).astype(bits)).view(NPT[dt]) for _ in range(2))
            x, y = b.inp(xa), b.inp(ya)
            tag = "x".join(map(str, shape))
            with np.errstate(all="ignore"):
                for sym, f in (("+", np.add), ("*", np.multiply), ("-", np.subtract)):
                    b.case(f"{tag}_{dt}.tt{sym}", f"({x} * 1) {sym} ({y} + 0)", f(xa, ya), 0, 0)
                    if shape[-1] % 16:   # (a row operand with D % 16 != 0: the eager op runs its strided path, a
                        continue         # remainder per row, which no tiling reproduces: open, as before this change)
                    b.case(f"{tag}_{dt}.row{sym}", f"({x} + 0) {sym} {y}[0]", f(xa, ya[(0,) * (len(shape) - 1)]), 0, 0)
    b.case("stats", STATS, lambda got: None)
    return b


def one_chain_check():
    """the issue's chain is ONE fused chain: the small abs(w) + 1 no longer cuts it"""
    b = Batch("fuse_rows.one_chain")
    xa = rng.standard_normal((200, 1000)).astype(np.float32)
    wa = rng.standard_normal((1000,)).astype(np.float32)
    x, w = b.inp(xa), b.inp(wa)
    code = (f"x = {x}\nw = {w}\n"
            "p = profile(fn() sum(tanh(x * w + 1) * 3 - x / (abs(w) + 1) + sigmoid(x * 0.5) * x), top=0)\n"
            "names = []\nfor o in p.ops { if o.kind == \"fused\" { push(names, o.name) } }\nnames")
    b.case("profile", code, lambda got: None)
    os.environ["NABLA_FUSE"] = "1"
    rc, so, se, errs, res = b._exec(list(enumerate(b.cases)))
    os.environ.pop("NABLA_FUSE", None)
    if res is None or errs:
        check("fuse_rows.one_chain", False, f"nabla exit {rc}: {errs or se.strip()[-400:]}")
        return
    names = [str(n) for n in res["c0"]]
    big = [n for n in names if "tanh" in n and "div" in n and "sigmoid" in n]
    check("fuse_rows.one_chain", len(big) == 1 and not any("tanh" in n for n in names if n not in big),
          f"want one fused chain holding tanh, div and sigmoid; fused rows: {names}")


for mk, min_forced, min_onepass in ((shapes_batch, 60, 40), (models_batch, 6, 6), (nan_batch, 40, 0)):
    bb = mk()
    r = run_both(bb)
    if not r:
        continue
    on, off = r
    stats = {i for i, c in enumerate(bb.cases) if c.name == "stats"}
    judge(bb, on, off, stats)
    for i in stats:
        f_on, f_off = on.get(f"c{i}"), off.get(f"c{i}")
        ok = f_on is not None and f_off is not None and float(f_on[1]) >= min_forced and float(f_off[1]) == 0
        check(f"{bb.title}.fused_really", ok, f"fuse_stats on={f_on} off={f_off} (want forced >= {min_forced} fused, 0 unfused)")
        ok = f_on is not None and float(f_on[3]) >= min_onepass
        check(f"{bb.title}.onepass_backward", ok, f"fuse_stats on={f_on} (want >= {min_onepass} one-pass backwards)")
one_chain_check()
finish()
