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
Counted: the fused run launches ONE kernel per chain (cuda.stats()), the
unfused one at least two; a chain with the same signature (other data,
other scalars) hits the compile cache; NABLA_FUSE_DUMP writes the source.
Sizes are above the fusion threshold (16384 elements).

Run by tools/run-tests.sh (release build; NABLA_ASAN=1: the ASan build).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import ENV, NABLA, TMPDIR, no_module, out, run  # noqa: E402
import emuutil  # noqa: E402

RNG = np.random.default_rng()
SHAPE = (160, 128)
TORCH_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
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


def script(dt, paths, res, dump):
    """the nabla program: inputs loaded and moved to CUDA; each case computed,
    settled between two cuda.stats() reads, saved (f32/f64/bool on the host)"""
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
        L.append(f'print("L{i}", l1 - l0)')
        L.append(f'save_npy("{res}_{i}.npy", v.cpu().to(if v.dtype == "bool" {{ "bool" }} else {{ "{save_dt}" }}))')
    # the same signature as case 0 (other data, other scalars): a cache hit
    L.append("f0 = fuse_stats()")
    L.append("w = settle((y + x) * 3 - x / 7)")
    L.append("f1 = fuse_stats()")
    L.append('print("CACHE", f1.compiles - f0.compiles, f1.compile_hits - f0.compile_hits, f1.cuda_fused - f0.cuda_fused)')
    L.append(f'save_npy("{res}_cache.npy", w.cpu().to("{save_dt}"))')
    # through autograd: the chain is one FusedBackward node whose kernel also
    # stores the intermediates its backward reads (tanh's output, mul's operands)
    L.append("a = x.clone().requires_grad()")
    L.append("b0 = autograd_stats().bytes")
    L.append("h = settle(tanh(a * y + 1) * 3 - a / (abs(y) + 1))")
    L.append('print("HELD", autograd_stats().bytes - b0, h.grad_fn)')
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
    L.append('print("BWD", l1 - l0, f1.backward_fused - f0.backward_fused, f1.backward_fallbacks - f0.backward_fallbacks)')
    L.append('print("WHY", f1.backward_fallback_reason)')
    for k in ("a2", "w2", "r2"):
        L.append(f'save_npy("{res}_bwd_{k}.npy", {k}.grad.cpu().to("{save_dt}"))')
    return "\n".join(L) + "\n"


def run_batch(dt):
    arrs = {"x": edgy(SHAPE, dt), "y": edgy(SHAPE, dt), "r": edgy(SHAPE[1:], dt), "c": edgy((SHAPE[0], 1), dt),
            "z": edgy((), dt), "bx": edgy(SHAPE, dt, clean=True), "by": edgy(SHAPE, dt, clean=True),
            "br": edgy(SHAPE[1:], dt, clean=True), "bg": edgy(SHAPE, dt, clean=True)}
    paths = {}
    for k, v in arrs.items():
        paths[k] = os.path.join(TMPDIR, f"{dt}_{k}.npy")
        np.save(paths[k], v)
    got = {}
    # rtc0: fusion on, no run-time compiler (NABLA_FUSE_RTC=0): the chains run
    # op by op (the first after a one-line note), with the unfused bits
    for mode in ("1", "0") + (("rtc0",) if dt == "f32" else ()):
        res = os.path.join(TMPDIR, f"{dt}_res{mode}")
        dump = os.path.join(TMPDIR, f"dump_{dt}")
        os.makedirs(dump, exist_ok=True)
        env = dict(ENV, NABLA_FUSE="1" if mode == "rtc0" else mode, NABLA_FUSE_DUMP=dump)
        if mode == "rtc0":
            env["NABLA_FUSE_RTC"] = "0"
        rc, so, se = run([NABLA, "-e", script(dt, paths, res, dump)], 900, env=env)
        if rc != 0:
            check(False, f"emu.nvrtc.{dt}.run[NABLA_FUSE={mode}]", f"rc {rc}: {so[-600:]} {se[-900:]}")
            return
        tags = {}
        for line in so.splitlines():
            k, _, v = line.partition(" ")
            tags[k] = v
        got[mode] = (tags, res, se)
    tags1, res1, se1 = got["1"]
    tags0, res0, _ = got["0"]
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
    if "rtc0" in got:
        tags2, res2, se2 = got["rtc0"]
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
    dumped = [f for f in os.listdir(os.path.join(TMPDIR, f"dump_{dt}")) if f.endswith(".cu")]
    text = open(os.path.join(TMPDIR, f"dump_{dt}", dumped[0])).read() if dumped else ""
    check(len(dumped) >= 5 and "nabla_fused" in text, f"emu.nvrtc.{dt}.dump", f"NABLA_FUSE_DUMP wrote {len(dumped)} sources")


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


def main():
    if no_module("emu_nvrtc"):
        return 0
    for dt in (os.environ.get("NVRTC_ONLY") or "f32 bf16 f16 f64").split():
        run_batch(dt)
    return 1 if emuutil.n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
