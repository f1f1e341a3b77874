#!/usr/bin/python3
"""test_emu_nvrtc.py — elementwise chains on CUDA fused into ONE kernel
generated at run time (tensor/tfuse_codegen.c; compiled by cuda/fuse_rtc.cu:
NVRTC on a GPU, the host compiler on the emulated device), checked on the
emulated device.

Every batch runs twice on the same fresh random inputs: NABLA_FUSE=1 (the
chain is one generated kernel) and NABLA_FUSE=0 (the unfused CUDA kernels op
by op).  Each case must give the same bits both ways (f16/bf16 round where
the unfused ops store, NaN payloads included) and match torch (f64 on the
rounded inputs, where the inputs are finite; NaN where torch has NaN).
Inputs carry +-0, +-inf and NaN; operands broadcast as a row, a column and a
0-d tensor; a transposed (strided) input; scalars on either side; a chain
that converts its inputs (bf16 with f32) and one with a comparison inside.
Then (run_extra) where, float % and integer chains (i32/i64/u8/bool:
wrapping + - *, casts, clamp, comparisons; integer // % stay unfused and
raise the same division-by-zero error), the vector path (cuda_vec) on an
aligned input and the scalar path on an offset view, and (run_cache) the
emulator's on-disk cache: keyed by the emulator files' contents
(NABLA_FUSE_EMU_DEPS), trimmed to NABLA_FUSE_EMU_CACHE_FILES.
Counted: the fused run launches ONE kernel per chain (cuda.stats()), the
unfused one at least two; a chain with the same signature (other data,
other scalars) hits the compile cache; NABLA_FUSE_DUMP writes the source.
Sizes are above the fusion threshold (16384 elements).
The dtypes' programs and run_extra's share one process per mode (fused,
unfused; f32 alone without a compiler): a process and the emulated module's
load cost ~1 s under ASan.  Most of the suite's time is the emulator
compiling the ~80 generated kernels (CI's cache starts empty): ~0.65 s CPU
each with the precompiled emu.h (cuda/emu/meson.build).

Run by tools/run-tests.sh (release build; NABLA_ASAN=1: the ASan build).
"""
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import ENV, NABLA, TMPDIR, no_module, out, run  # noqa: E402
import emuutil  # noqa: E402

RNG = np.random.default_rng()
SHAPE = (160, 128)
TORCH_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
DUMP = os.path.join(TMPDIR, "dump")   # NABLA_FUSE_DUMP of the fused run (every dtype's sources)
batch_paths = {}   # dtype: {input name: .npy path} (main)
extra_arrs = {}    # run_extra's inputs (main)
# relative tolerance against torch: per-op rounding of the chain's few ops (and
# libm against torch's math), relative to the result plus TERMS, the size of
# the terms a chain sums (inputs ~ 2 N(0, 1))
TOL = {"f64": 1e-12, "f32": 4e-6, "f16": 4e-3, "bf16": 3e-2}
TERMS = 4.0


def check(ok, name, why):
    out("PASS" if ok else "FAIL", name, "" if ok else why)


def edgy(shape, dt, scale=2.0, clean=False):
    """values of dtype dt (as f32/f64 arrays holding them exactly), with
    +-0, +-inf and NaN sprinkled in (clean: none)"""
    a = RNG.standard_normal(shape) * scale
    flat = a.reshape(-1)
    n = flat.size
    if n >= 40 and not clean:
        for v in (0.0, -0.0, np.inf, -np.inf, np.nan):
            flat[RNG.choice(n, max(1, n // 64), replace=False)] = v
    t = torch.tensor(a).to(TORCH_DT[dt])
    return t.to(torch.float64 if dt == "f64" else torch.float32).numpy()


# (two gradient contributions to a: summed in the same order fused and unfused)
GRAD_EXPR = "sigmoid(a * 2) * y - exp(a * 0.25)"
GRAD_TORCH = "t.sigmoid(a * 2) * y - t.exp(a * 0.25)"

# one generated backward kernel: tanh (its one-pass derivative, g contiguous), a
# scalar on the left, a broadcast row, relu, maximum and clamp (where, comparisons)
# (finite inputs: r2's gradient sums every row)
# (15 ops: one chain; at most 3 gradient contributions to a value, so the sum order is the engine's)
BWD_EXPR = "tanh(a2 * w2 + 1) * 3 - 2 / (w2 * w2 + 1) + relu(a2 * r2) + clamp(maximum(by, a2 * 0.5), -1, 1)"
BWD_TORCH = "t.tanh(a2 * w2 + 1) * 3 - 2 / (w2 * w2 + 1) + t.relu(a2 * r2) + t.clamp(t.maximum(y, a2 * 0.5), -1, 1)"

# name, nabla expression, torch expression (both over x, y, r, c, z, xt; t = torch)
CASES = [
    ("arith", "(x + y) * 2 - y / 3", "(x + y) * 2 - y / 3"),
    ("scalar_first", "1.5 - x * 0.25 + 2 / (abs(y) + 1)", "1.5 - x * 0.25 + 2 / (t.abs(y) + 1)"),
    ("floordiv_maxmin", "maximum(x // 0.75, y) + minimum(x, y * 2)", "t.maximum(t.floor(x / 0.75), y) + t.minimum(x, y * 2)"),
    ("exp_log", "exp(x * 0.5) + log(abs(y) + 0.5) - log1p(abs(x)) + expm1(y * 0.1)",
     "t.exp(x * 0.5) + t.log(t.abs(y) + 0.5) - t.log1p(t.abs(x)) + t.expm1(y * 0.1)"),
    ("sqrt_rsqrt", "sqrt(abs(x)) + rsqrt(abs(y) + 1) + log2(abs(x) + 2)",
     "t.sqrt(t.abs(x)) + t.rsqrt(t.abs(y) + 1) + t.log2(t.abs(x) + 2)"),
    ("act", "tanh(x) + sigmoid(y) * silu(x) - relu(y)", "t.tanh(x) + t.sigmoid(y) * t.nn.functional.silu(x) - t.relu(y)"),
    ("gelu", "gelu(x * 1.5) + gelu(y, approximate=\"tanh\") + erf(x * 0.5)",
     "t.nn.functional.gelu(x * 1.5) + t.nn.functional.gelu(y, approximate='tanh') + t.erf(x * 0.5)"),
    ("trig", "sin(x) * cos(y) + tan(x * 0.1) - (-x)", "t.sin(x) * t.cos(y) + t.tan(x * 0.1) - (-x)"),
    # (on the inputs themselves: a rounded x * 3 would move values across integers)
    ("round", "floor(y) + ceil(x) + round(x) + sign(y)", "t.floor(y) + t.ceil(x) + t.round(x) + t.sign(y)"),
    ("clamp_pow", "clamp(x, min=-1, max=0.5) * 2 + abs(y) ** 1.5", "t.clamp(x, min=-1, max=0.5) * 2 + t.abs(y) ** 1.5"),
    ("cmp_in_chain", "(x > y) * x + (x <= 0.5) * 2.0 - (y == y) * 1.0",
     "(x > y).to(x.dtype) * x + (x <= 0.5).to(x.dtype) * 2.0 - (y == y).to(x.dtype) * 1.0"),
    ("cmp_out", "x * 2 >= y + 1", "x * 2 >= y + 1"),
    ("where", "where(x > y, x * 2, y) - c", "t.where(x > y, x * 2, y) - c"),
    ("broadcast", "x * r + c - z", "x * r + c - z"),
    ("strided", "xt.T * 2 + y", "x * 2 + y"),
    # yf: y as saved (f32; f64 for f64): a bf16/f16 chain converting into an f32 one (a cast op)
    ("mixed", "sigmoid(x * 2) + yf * 0.5", "t.sigmoid(x * 2) + yf * 0.5"),
]


# every case for f32 and bf16; f16 and f64 (the generator's paths of bf16 and
# f32 but for the type names) run these, to keep the suite near 45 compiles
SUBSET = ("arith", "exp_log", "act", "gelu", "cmp_out", "broadcast", "strided", "mixed")


def cases_for(dt):
    return [c for c in CASES if dt in ("f32", "bf16") or c[0] in SUBSET]


def canon(a):
    """a with every NaN the same NaN (positions kept): a GPU makes every NaN
    canonical, and on the emulated device the sign and payload of NaN + NaN
    are the host compiler's choice of operand order, fused or not (gelu(-inf)
    + gelu(nan) differed in sign between two unfused builds of one sum)"""
    if a.dtype.kind == "f":
        a = a.copy()
        a[np.isnan(a)] = np.nan
    return a


def torch_ref(expr, dt, arrs):
    """the chain in torch on the same values: in dt itself where torch's CPU
    has the ops (it rounds per op, as we do: comparisons of rounded sums
    agree), else in f64 then rounded to dt"""
    for cdt in (TORCH_DT[dt], torch.float64):
        env = {k: torch.tensor(v, dtype=torch.float64).to(cdt) for k, v in arrs.items()}
        env["t"] = torch
        env["xt"] = env["x"].T.contiguous()
        env["yf"] = torch.tensor(arrs["y"])
        try:
            with torch.no_grad():
                r = eval(expr, env)  # noqa: S307 (our own table above)
            break
        except RuntimeError:   # (torch 1.13 has no f16 sigmoid, erf, ... on the CPU)
            continue
    return r.to(torch.bool).numpy() if r.dtype == torch.bool else r.to(TORCH_DT[dt]).to(torch.float64).numpy()


def script(dt, paths, res):
    """the nabla program of dtype dt: inputs loaded and moved to CUDA; each
    case computed, settled between two cuda.stats() reads, saved (f32/f64/bool
    on the host); every line it prints starts with "dt." (the dtypes share a
    process)"""
    L = []
    for k, p in paths.items():
        L.append(f'{k} = load_npy("{p}").to("{dt}").cuda()')
    L.append(f'xt = load_npy("{paths["x"]}").T.contiguous().to("{dt}").cuda()')
    L.append(f'yf = load_npy("{paths["y"]}").cuda()')
    L.append("cuda.synchronize()")
    save_dt = "f64" if dt == "f64" else "f32"
    for i, (name, expr, _) in enumerate(cases_for(dt)):
        L.append("l0 = cuda.stats().launches")
        L.append(f"v = settle({expr})")
        L.append("l1 = cuda.stats().launches")
        L.append(f'print("{dt}.L{i}", l1 - l0)')
        L.append(f'save_npy("{res}_{i}.npy", v.cpu().to(if v.dtype == "bool" {{ "bool" }} else {{ "{save_dt}" }}))')
    # the same signature as case 0 (other data, other scalars): a cache hit
    L.append("f0 = fuse_stats()")
    L.append("w = settle((y + x) * 3 - x / 7)")
    L.append("f1 = fuse_stats()")
    L.append(f'print("{dt}.CACHE", f1.compiles - f0.compiles, f1.compile_hits - f0.compile_hits, f1.cuda_fused - f0.cuda_fused)')
    L.append(f'save_npy("{res}_cache.npy", w.cpu().to("{save_dt}"))')
    # through autograd: the chain is one FusedBackward node whose kernel also
    # stores the intermediates its backward reads (tanh's output, mul's operands)
    L.append("a = x.clone().requires_grad()")
    L.append("b0 = autograd_stats().bytes")
    L.append("h = settle(tanh(a * y + 1) * 3 - a / (abs(y) + 1))")
    L.append(f'print("{dt}.HELD", autograd_stats().bytes - b0, h.grad_fn)')
    L.append("h = nil")
    L.append(f"g = grad(fn(a) sum({GRAD_EXPR}))(a)")
    L.append(f'save_npy("{res}_grad.npy", g.cpu().to("{save_dt}"))')
    # the backward of a chain as ONE generated kernel (tensor/tfuse_codegen_bwd.c): a, a row r2
    # (broadcast: its share summed after the kernel) and w2 get gradients; g contiguous (y)
    L.append("a2 = bx.clone().requires_grad()")
    L.append("w2 = by.clone().requires_grad()")
    L.append("r2 = br.clone().requires_grad()")
    L.append(f"h2 = settle({BWD_EXPR})")
    L.append("cuda.synchronize()")
    L.append("l0 = cuda.stats().launches")
    L.append("f0 = fuse_stats()")
    L.append("backward(h2, bg)")
    L.append("l1 = cuda.stats().launches")
    L.append("f1 = fuse_stats()")
    L.append(f'print("{dt}.BWD", l1 - l0, f1.backward_fused - f0.backward_fused, f1.backward_fallbacks - f0.backward_fallbacks)')
    L.append(f'print("{dt}.WHY", f1.backward_fallback_reason)')
    for k in ("a2", "w2", "r2"):
        L.append(f'save_npy("{res}_bwd_{k}.npy", {k}.grad.cpu().to("{save_dt}"))')
    return "\n".join(L) + "\n"


def batch_inputs(dt):
    """dtype dt's fresh random inputs, saved for the nabla program"""
    arrs = {"x": edgy(SHAPE, dt), "y": edgy(SHAPE, dt), "r": edgy(SHAPE[1:], dt), "c": edgy((SHAPE[0], 1), dt),
            "z": edgy((), dt), "bx": edgy(SHAPE, dt, clean=True), "by": edgy(SHAPE, dt, clean=True),
            "br": edgy(SHAPE[1:], dt, clean=True), "bg": edgy(SHAPE, dt, clean=True)}
    paths = {}
    for k, v in arrs.items():
        paths[k] = os.path.join(TMPDIR, f"{dt}_{k}.npy")
        np.save(paths[k], v)
    return arrs, paths


def run_all(dts, extra):
    """every dtype's program (and run_extra's) in ONE nabla process per mode
    (a process and the emulated module's load cost ~1 s under ASan), twice:
    NABLA_FUSE=1 (NABLA_FUSE_DUMP on) and NABLA_FUSE=0; then f32's alone with
    fusion on and no run-time compiler ("rtc0", NABLA_FUSE_RTC=0: the chains
    run op by op, the first after a one-line note, with the unfused bits).
    Returns {mode: (tags, stderr)} (a mode missing: its process failed, with
    its FAIL line), the tags being each "key value" line printed"""
    got = {}
    for mode in ("1", "0") + (("rtc0",) if "f32" in dts else ()):
        code = "".join(script(dt, batch_paths[dt], os.path.join(TMPDIR, f"{dt}_res{mode}"))
                       for dt in (("f32",) if mode == "rtc0" else dts))
        if extra and mode != "rtc0":
            code += extra_script(os.path.join(TMPDIR, f"extra_res{mode}"))
        env = dict(ENV, NABLA_FUSE="1" if mode == "rtc0" else mode, NABLA_FUSE_DUMP=DUMP)
        if mode == "rtc0":
            env["NABLA_FUSE_RTC"] = "0"
        rc, so, se = run([NABLA, "-e", code], 1800, env=env)
        if rc != 0:
            check(False, f"emu.nvrtc.run[NABLA_FUSE={mode}]", f"rc {rc}: {so[-600:]} {se[-900:]}")
            continue
        got[mode] = (dict(line.partition(" ")[::2] for line in so.splitlines()), se)
    return got


def check_batch(dt, arrs, got):
    """dtype dt's checks on the runs' results and tags"""
    if "1" not in got or "0" not in got:
        return
    res1, res0 = os.path.join(TMPDIR, f"{dt}_res1"), os.path.join(TMPDIR, f"{dt}_res0")
    tags1 = {k[len(dt) + 1:]: v for k, v in got["1"][0].items() if k.startswith(dt + ".")}
    tags0 = {k[len(dt) + 1:]: v for k, v in got["0"][0].items() if k.startswith(dt + ".")}
    se1 = got["1"][1]
    if "unfused" in se1:
        check(False, f"emu.nvrtc.{dt}.compiler", se1[-600:])
        return
    for i, (name, _, texpr) in enumerate(cases_for(dt)):
        full = f"emu.nvrtc.{dt}.{name}"
        a1, a0 = canon(np.load(f"{res1}_{i}.npy")), canon(np.load(f"{res0}_{i}.npy"))
        bits = a1.dtype == a0.dtype and a1.shape == a0.shape and a1.tobytes() == a0.tobytes()
        if not bits:
            ne = np.flatnonzero(a1.view(np.uint8) != a0.view(np.uint8)) if a1.shape == a0.shape else []
            check(False, full + ".bits", f"fused and unfused differ ({len(ne)} bytes; shapes {a1.shape} {a0.shape})")
            continue
        ref = torch_ref(texpr, dt, arrs)
        finite = np.ones(SHAPE, bool)
        for k in ("x", "y", "r", "c", "z"):
            finite &= np.isfinite(np.broadcast_to(arrs[k], SHAPE))
        if ref.dtype == bool:
            ok = a1.dtype == bool and np.array_equal(a1[finite], ref[finite])
            why = f"{np.count_nonzero(a1[finite] != ref[finite])} of {finite.sum()} differ"
        else:
            g, w = a1[finite].astype(np.float64), ref[finite]
            scale = np.abs(w) + TERMS   # (a sum's rounding errors scale with its terms, ~TERMS)
            bad = ~((np.abs(g - w) <= TOL[dt] * scale) | (np.isnan(g) & np.isnan(w)) | (g == w))
            ok = not bad.any()
            why = f"{bad.sum()} of {g.size} off; worst got {g[bad][:3]} want {w[bad][:3]}"
        check(ok, full, why)
        l1, l0 = int(tags1.get(f"L{i}", -1)), int(tags0.get(f"L{i}", -1))
        check(l1 == 1 and l0 >= 2, full + ".launches", f"fused {l1} launches (want 1), unfused {l0} (want >= 2)")
    c = tags1.get("CACHE", "").split()
    check(c == ["0", "1", "1"], f"emu.nvrtc.{dt}.cache_hit", f"compiles, hits, fused chains: {c} (want 0 1 1)")
    a1 = canon(np.load(f"{res1}_cache.npy"))
    a0 = canon(np.load(f"{res0}_cache.npy"))
    check(a1.tobytes() == a0.tobytes(), f"emu.nvrtc.{dt}.cache_hit.bits", "the cached kernel's result differs from unfused")
    if "rtc0" in got and dt == "f32":
        se2, res2 = got["rtc0"][1], os.path.join(TMPDIR, f"{dt}_resrtc0")
        same = all(canon(np.load(f"{res2}_{i}.npy")).tobytes() == canon(np.load(f"{res0}_{i}.npy")).tobytes()
                   for i in range(len(cases_for(dt))))
        same = same and canon(np.load(f"{res2}_grad.npy")).tobytes() == canon(np.load(f"{res0}_grad.npy")).tobytes()
        note = se2.count("run unfused: NABLA_FUSE_RTC=0")
        check(same and note == 1, f"emu.nvrtc.{dt}.no_compiler",
              f"results equal unfused: {same}; the note printed {note} times (want once): {se2[-300:]}")
    g1, g0 = canon(np.load(f"{res1}_grad.npy")), canon(np.load(f"{res0}_grad.npy"))
    check(g1.tobytes() == g0.tobytes(), f"emu.nvrtc.{dt}.grad.bits", "gradients through the fused chain differ from unfused")
    at = torch.tensor(arrs["x"], dtype=torch.float64).requires_grad_()
    yt = torch.tensor(arrs["y"], dtype=torch.float64)
    eval(GRAD_TORCH, {"t": torch, "a": at, "y": yt}).sum().backward()  # noqa: S307
    gw = at.grad.to(torch.float64).numpy()
    fin = np.isfinite(arrs["x"]) & np.isfinite(arrs["y"])
    gg = g1.astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~((np.abs(gg - gw) <= 4 * TOL[dt] * (np.abs(gw) + TERMS)) | (np.isnan(gg) & np.isnan(gw)))[fin]
    check(not bad.any(), f"emu.nvrtc.{dt}.grad", f"{bad.sum()} of {fin.sum()} gradients off torch's")
    bwd_checks(dt, arrs, tags1, tags0, res1, res0)
    held1, held0 = tags1.get("HELD", "").split(), tags0.get("HELD", "").split()
    ok = (len(held1) >= 2 and len(held0) >= 2 and "FusedBackward" in tags1.get("HELD", "") and
          0 < int(held1[0]) <= int(held0[0]))
    check(ok, f"emu.nvrtc.{dt}.grad.held_bytes",
          f"fused: {held1} unfused: {held0} (want a FusedBackward node holding > 0 bytes, no more than unfused)")
    # (the sources of every dtype share DUMP: dt's name its ops, "mul:f32 exp:f32 ...", on line 2)
    texts = [open(os.path.join(DUMP, f)).read() for f in sorted(os.listdir(DUMP)) if f.endswith(".cu")]
    mine = [t for t in texts if re.search(rf":{dt}\b", "".join(t.splitlines()[1:2]))]
    check(len(mine) >= 5 and all("nabla_fused" in t for t in mine), f"emu.nvrtc.{dt}.dump",
          f"NABLA_FUSE_DUMP wrote {len(mine)} sources of {dt} ({len(texts)} in all)")


def bwd_checks(dt, arrs, tags1, tags0, res1, res0):
    """the chain's backward as one generated kernel: its launches, the unfused bits, torch's values"""
    b1, b0 = tags1.get("BWD", "").split(), tags0.get("BWD", "").split()
    # fused: the kernel, plus r2's share summed to its shape (a reduction; its reshape is a view)
    ok = len(b1) == 3 and len(b0) == 3 and b1[1:] == ["1", "0"] and 1 <= int(b1[0]) <= 3 and int(b0[0]) > int(b1[0]) + 5
    print(f"# {dt} backward launches: fused {b1}, unfused {b0}")
    check(ok, f"emu.nvrtc.{dt}.bwd.launches",
          f"fused [launches, fused, fallbacks] {b1} (reason {tags1.get('WHY')}), unfused {b0}: want one kernel (+ r2's sum)")
    env = {k: torch.tensor(arrs[k], dtype=torch.float64) for k in ("bx", "by", "br", "bg")}
    a2, w2, r2 = (env[k].clone().requires_grad_() for k in ("bx", "by", "br"))
    out = eval(BWD_TORCH, {"t": torch, "a2": a2, "w2": w2, "r2": r2, "y": env["by"]})  # noqa: S307
    out.backward(env["bg"])
    for k, want in (("a2", a2.grad), ("w2", w2.grad), ("r2", r2.grad)):
        g1, g0 = canon(np.load(f"{res1}_bwd_{k}.npy")), canon(np.load(f"{res0}_bwd_{k}.npy"))
        check(g1.tobytes() == g0.tobytes(), f"emu.nvrtc.{dt}.bwd.{k}.bits", "the fused backward's gradient differs from unfused")
        got, w = g1.astype(np.float64), want.numpy()
        # (r2's gradient sums a column of SHAPE[0] terms in dt)
        tol = 4 * TOL[dt] * (np.abs(w) + TERMS * (SHAPE[0] if k == "r2" else 4))
        with np.errstate(invalid="ignore"):
            bad = ~((np.abs(got - w) <= tol) | (np.isnan(got) & np.isnan(w)))
        check(not bad.any(), f"emu.nvrtc.{dt}.bwd.{k}", f"{bad.sum()} of {got.size} off torch's; got {got[bad][:3]} want {w[bad][:3]}")


# where, float %, and integer chains (issue 28's second slice): name, nabla
# expression, torch expression, the fused run's launches (None: some ops stay
# unfused).  x, y f32 (edgy); r a row, z 0-d, cm a bool column; xi, yi i32,
# li, mi i64 and ui, vi u8 (extremes included: + and * wrap); xb, yb bool.
EXTRA = [
    ("where", "where(x > y, x * 2, y - 1) + 1", "t.where(x > y, x * 2, y - 1) + 1", 1),
    # (sqrt of the negative branch is NaN and must not leak)
    ("where_nan", "where(x > 0, sqrt(x), x * 0.5) * 3", "t.where(x > 0, t.sqrt(x), x * 0.5) * 3", 1),
    ("where_bcast", "where(cm, x, r) * 2 - z", "t.where(cm, x, r) * 2 - z", 1),
    # (z > 0 is a 0-d op of its own: one launch before the chain's)
    ("where_0d", "where(z > 0, x + 1, z) * y", "t.where(z > 0, x + 1, z) * y", 2),
    ("mod", "x % 0.75 + (-x) % y - 1.5 % (abs(y) + 0.5)",
     "t.remainder(x, 0.75) + t.remainder(-x, y) - t.remainder(t.full_like(y, 1.5), t.abs(y) + 0.5)", 1),
    ("i32_arith", "(xi + yi) * 3 - yi + 7", "(xi + yi) * 3 - yi + 7", 1),
    ("i32_maxmin", "maximum(xi, yi) - abs(xi) + (-yi) + minimum(xi, 5)",
     "t.maximum(xi, yi) - t.abs(xi) + (-yi) + t.clamp(xi, max=5)", 1),
    ("i32_where_cmp", "where(xi > yi, xi, yi * 2) + (xi == yi)", "t.where(xi > yi, xi, yi * 2) + (xi == yi)", 1),
    ("i32_to_f32", "xi * 0.5 + x", "xi * 0.5 + x", 1),
    ("i32_strided", "xi.T * 3 + yi.T", "xi.T * 3 + yi.T", 1),
    ("i32_clamp", "clamp(xi * 2, min=-100, max=1000) + sign(yi) * relu(yi)",
     "t.clamp(xi * 2, min=-100, max=1000) + t.sign(yi) * t.relu(yi)", 1),
    ("i64", "(li * li + mi) - maximum(li, mi) * 3 + abs(-mi)", "(li * li + mi) - t.maximum(li, mi) * 3 + t.abs(-mi)", 1),
    ("u8", "(ui + vi) * 3 - maximum(ui, vi)", "(ui + vi) * 3 - t.maximum(ui, vi)", 1),
    ("bool", "(xb + yb) * yb == maximum(xb, yb)", "(xb + yb) * yb == t.maximum(xb, yb)", 1),
    # integer // and % raise "division by zero" from the unfused kernel: unfused
    ("i32_floordiv", "(xi + yi) // 7 + (xi - 1) % 5", "t.div(xi + yi, 7, rounding_mode='floor') + t.remainder(xi - 1, 5)",
     None),
]


def ints(shape, dtype):
    """random integers of dtype with its extremes; under UBSan (the ASan
    build) i32/i64 stay small: the UNFUSED kernels' (C)(x + y) is a signed
    overflow there (elementwise.cu bin_arith), which UBSan stops at, so the
    wrap is checked by the release run only"""
    info = np.iinfo(dtype)
    if emuutil.ASAN and info.min < 0:
        info = np.iinfo(np.int8)
    a = RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    flat = a.reshape(-1)
    for v in (info.min, info.max, 0, 1):
        flat[RNG.choice(flat.size, 8, replace=False)] = v
    return a


def extra_inputs():
    """run_extra's fresh random inputs, saved for extra_script"""
    arrs = {"x": edgy(SHAPE, "f32"), "y": edgy(SHAPE, "f32"), "r": edgy(SHAPE[1:], "f32"), "z": edgy((), "f32"),
            "cm": RNG.random((SHAPE[0], 1)) < 0.5, "xi": ints(SHAPE, np.int32), "yi": ints(SHAPE, np.int32),
            "li": ints(SHAPE, np.int64), "mi": ints(SHAPE, np.int64), "ui": ints(SHAPE, np.uint8),
            "vi": ints(SHAPE, np.uint8), "xb": RNG.random(SHAPE) < 0.5, "yb": RNG.random(SHAPE) < 0.5,
            "xv": edgy((16387,), "f32")}
    for k, v in arrs.items():
        np.save(os.path.join(TMPDIR, f"extra_{k}.npy"), v)
    return arrs


def extra_script(res):
    """EXTRA's program (after the dtypes' in their process: its lines start with "extra.")"""
    S = [f'{k} = load_npy("{os.path.join(TMPDIR, f"extra_{k}.npy")}").cuda()' for k in extra_arrs]
    S += ["xo = xv[1:]", "cuda.synchronize()"]
    for i, (name, expr, _, _) in enumerate(EXTRA):
        S += ["l0 = cuda.stats().launches", f"v = settle({expr})", f'print("extra.L{i}", cuda.stats().launches - l0)',
              f'save_npy("{res}_{i}.npy", v.cpu())']
    # integer // by zero: the unfused kernel's error, the same with fusion on
    S += ['e = try { settle(((xi + yi) // (yi * 0)).sum().item()) } catch e { e.message }', 'print("extra.ZERODIV", e)']
    for j, src in enumerate(("xv", "xo")):
        S += ["f0 = fuse_stats()", f"v = settle({src} * 2 + 1)", "f1 = fuse_stats()",
              f'print("extra.VEC{j}", f1.cuda_vec - f0.cuda_vec, f1.cuda_fused - f0.cuda_fused)', f'save_npy("{res}_v{j}.npy", v.cpu())']
    return "\n".join(S) + "\n"


def check_extra(arrs, got):
    """EXTRA fused against unfused (bits) and torch; the vector path on an
    aligned input and the scalar path on an offset view of it (one element
    in: not 16-byte aligned), an odd length for the tail"""
    if "1" not in got or "0" not in got:
        return
    res1, res0 = os.path.join(TMPDIR, "extra_res1"), os.path.join(TMPDIR, "extra_res0")
    tags1 = {k[6:]: v for k, v in got["1"][0].items() if k.startswith("extra.")}
    tags0 = {k[6:]: v for k, v in got["0"][0].items() if k.startswith("extra.")}
    se1 = got["1"][1]
    if "unfused" in se1 or "failed to compile" in se1:
        check(False, "emu.nvrtc.extra.compiler", se1[-900:])
    for i, (name, _, texpr, want) in enumerate(EXTRA):
        full = f"emu.nvrtc.extra.{name}"
        a1, a0 = canon(np.load(f"{res1}_{i}.npy")), canon(np.load(f"{res0}_{i}.npy"))
        if not (a1.dtype == a0.dtype and a1.shape == a0.shape and a1.tobytes() == a0.tobytes()):
            check(False, full + ".bits", f"fused and unfused differ ({a1.dtype}{a1.shape} against {a0.dtype}{a0.shape})")
            continue
        env = {k: torch.tensor(v) for k, v in arrs.items()}
        env["t"] = torch
        with torch.no_grad():
            ref = eval(texpr, env).numpy()  # noqa: S307 (our own table above)
        if a1.dtype.kind == "f":   # (float inputs: compared where the chain's inputs are finite)
            finite = np.ones(a1.shape, bool)
            for k in ("x", "y", "r", "z"):
                if re.search(rf"\b{k}\b", texpr):
                    finite &= np.isfinite(np.broadcast_to(arrs[k], a1.shape))
            g, w = a1[finite].astype(np.float64), ref[finite].astype(np.float64)
            bad = ~((np.abs(g - w) <= TOL["f32"] * (np.abs(w) + TERMS)) | (np.isnan(g) & np.isnan(w)) | (g == w))
            ok, why = not bad.any(), f"{bad.sum()} of {g.size} off; worst got {g[bad][:3]} want {w[bad][:3]}"
        else:   # integers and bools: exact, wrap included
            ok = a1.dtype == ref.dtype and np.array_equal(a1, ref)
            why = f"dtype {a1.dtype} (torch {ref.dtype}); {np.count_nonzero(a1 != ref) if a1.shape == ref.shape else 'shape'} differ"
        check(ok, full, why)
        l1, l0 = int(tags1.get(f"L{i}", -1)), int(tags0.get(f"L{i}", -1))
        if want is not None:
            check(l1 == want and l0 >= 2, full + ".launches", f"fused {l1} launches (want {want}), unfused {l0} (want >= 2)")
    z1, z0 = tags1.get("ZERODIV", ""), tags0.get("ZERODIV", "")
    check("division by zero" in z1 and z1 == z0, "emu.nvrtc.extra.int_zerodiv",
          f"fused: {z1!r}, unfused: {z0!r} (want the same division-by-zero error)")
    for j, (name, want) in enumerate((("aligned", "1 1"), ("offset_view", "0 1"))):
        v1, v0 = canon(np.load(f"{res1}_v{j}.npy")), canon(np.load(f"{res0}_v{j}.npy"))
        xs = arrs["xv"][j:]
        ref = xs * np.float32(2) + np.float32(1)
        fin = np.isfinite(xs)
        ok = v1.tobytes() == v0.tobytes() and np.array_equal(v1[fin], ref[fin]) and tags1.get(f"VEC{j}") == want
        check(ok, f"emu.nvrtc.extra.vector.{name}",
              f"vector launches, fused chains: {tags1.get(f'VEC{j}')} (want {want}); bits equal unfused: "
              f"{v1.tobytes() == v0.tobytes()}; equal numpy: {np.array_equal(v1[fin], ref[fin])}")


def so_files(d):
    d = os.path.join(d, "nabla", "fused-emu")
    return sorted(f for f in os.listdir(d) if f.endswith(".so")) if os.path.isdir(d) else []


def run_cache():
    """the emulator's on-disk kernel cache: an object is reused while the
    emulator's files are unchanged, built anew when their contents change
    (NABLA_FUSE_EMU_DEPS stands in for emu.h), and trimmed to its bound"""
    home = os.path.join(TMPDIR, "xdg")
    dep = os.path.join(TMPDIR, "emu_dep.h")
    x = RNG.standard_normal(20000).astype(np.float32)
    np.save(os.path.join(TMPDIR, "cache_x.npy"), x)
    base = f'x = load_npy("{os.path.join(TMPDIR, "cache_x.npy")}").cuda()\n'
    def go(tag, content, code, **extra):
        with open(dep, "w") as f:
            f.write(content)
        env = dict(ENV, XDG_CACHE_HOME=home, NABLA_FUSE_EMU_DEPS=dep, **extra)
        rc, so, se = run([NABLA, "-e", base + code], 300, env=env)
        if rc != 0:
            check(False, f"emu.nvrtc.cache.{tag}", f"rc {rc}: {so[-300:]} {se[-600:]}")
        return rc == 0, so
    one = 'print(settle(x * 3 - 1).cpu().sum().item())\n'
    ok1, s1 = go("first", "// v1\n", one)
    n1 = so_files(home)
    ok2, s2 = go("same", "// v1\n", one)
    n2 = so_files(home)
    ok3, s3 = go("changed", "// v2\n", one)
    n3 = so_files(home)
    if ok1 and ok2 and ok3:
        want = float(np.sum(x * np.float32(3) - np.float32(1), dtype=np.float64))
        vals_ok = all(abs(float(s.split()[-1]) - want) <= 1e-3 * (abs(want) + 100) for s in (s1, s2, s3))
        check(len(n1) == 1 and n2 == n1 and len(n3) == 2 and set(n1) < set(n3) and vals_ok, "emu.nvrtc.cache.deps_key",
              f"objects after a first run {n1}, the same run {n2}, a changed emulator file {n3} (want 1, the same, 2); values ok {vals_ok}")
    # the bound: 2 objects at most; three new chains compiled, each right
    more = "".join(f'print(settle(x * {k} + {k}).cpu()[7].item())\n' for k in (5, 6, 7))
    more += 'print(settle(tanh(x) * 2 - x).cpu()[7].item())\n'
    ok4, s4 = go("bound", "// v2\n", more, NABLA_FUSE_EMU_CACHE_FILES="2")
    n4 = so_files(home)
    if ok4:
        vals = [float(v) for v in s4.split()[-4:]]
        want = [float(x[7] * np.float32(k) + np.float32(k)) for k in (5, 6, 7)] + [float(np.tanh(x[7]) * 2 - x[7])]
        close = all(abs(a - b) <= 1e-5 * (abs(b) + 1) for a, b in zip(vals, want))
        check(len(n4) == 2 and close, "emu.nvrtc.cache.bound", f"{len(n4)} objects left (want 2); values {vals} want {want}")


def main():
    global batch_paths, extra_arrs
    if no_module("emu_nvrtc"):
        return 0
    only = os.environ.get("NVRTC_ONLY")   # (e.g. "bf16 extra": those parts alone)
    dts = [dt for dt in (only or "f32 bf16 f16 f64").split() if dt in TORCH_DT]
    extra = not only or "extra" in only
    os.makedirs(DUMP, exist_ok=True)
    batch = {dt: batch_inputs(dt) for dt in dts}
    batch_paths = {dt: batch[dt][1] for dt in dts}
    extra_arrs = extra_inputs() if extra else {}
    got = run_all(dts, extra)
    for dt in dts:
        check_batch(dt, batch[dt][0], got)
    if extra:
        check_extra(extra_arrs, got)
        run_cache()
    return 1 if emuutil.n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
