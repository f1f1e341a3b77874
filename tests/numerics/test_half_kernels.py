#!/usr/bin/python3
"""The CPU's vectorised bf16/f16 kernels (tensor/tvecmath_half.c and their users
in tensor/tcpu_elem.c, tensor/nn/gelu.c), bit for bit, on fresh random data.

1. Casts f32 -> bf16/f16 and back at every vector width (NABLA_VECMATH=sse2
   runs tdtype.h's scalar reference; avx2 and avx512 the vector forms) give the
   same bits, on random f32 bit patterns (NaN payloads, infinities, -0,
   subnormals, rounding ties, the f16 overflow edge) and all 65536 half
   patterns; contiguous, strided (x[::2]) and transposed; odd lengths, and one
   above the OpenMP threshold.  The non-NaN results also equal NumPy's f16
   cast / torch's bf16 cast (round to nearest even), NaN stays NaN.
2. Every bf16/f16 elementwise op that has a vector path (+ - * / maximum
   minimum; exp log tanh erf sigmoid silu sin cos expm1 log1p neg abs relu
   sqrt rsqrt; the fused gelu and its gradient) equals
   round(the same op in f32 on the upcast inputs) bit for bit -- the meaning of
   the scalar kernels -- contiguous, broadcast, transposed and with a scalar,
   and is within one bf16 rounding of the function's f64 value (torch in f64).
4. An autocast("bf16") MLP (matmul, bias, gelu, matmul) and its gradients:
   error against f64 within 2x that of torch.autocast("cpu", bfloat16).
3. autocast("f16") on the CPU warns once that it is slower than f32 (no f16
   matrix path); bf16, and f16 ops that compute in f32, do not warn.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_half_kernels.py
"""
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build", "nabla")
SEED = int(os.environ.get("NUMERICS_SEED") or random.SystemRandom().randrange(1, 2**31))
rng = np.random.default_rng(SEED)
TMP = tempfile.mkdtemp(prefix="nabla_half_")
fails = 0


def check(name, ok, why=""):
    global fails
    if ok:
        print(f"PASS: {name}", flush=True)
    else:
        fails += 1
        print(f"FAIL: {name}: {' '.join(str(why).split())[:500]} [seed={SEED}]", flush=True)


def st_bits(path):
    """safetensors -> {name: (dtype, uint array of the raw bits)}"""
    buf = open(path, "rb").read()
    (n,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8:8 + n])
    hdr.pop("__metadata__", None)
    out = {}
    for k, info in hdr.items():
        a, b = info["data_offsets"]
        raw = buf[8 + n + a:8 + n + b]
        u = {"BF16": "<u2", "F16": "<u2", "F32": "<u4"}[info["dtype"]]
        out[k] = (info["dtype"], np.frombuffer(raw, dtype=u).reshape(info["shape"]))
    return out


def run(code, inputs, width=None):
    npz, out, src = (os.path.join(TMP, f) for f in ("in.npz", "out.safetensors", "prog.nbl"))
    np.savez(npz, **inputs)
    with open(src, "w") as f:
        f.write(f'I = load_npz("{npz}")\nR = {{}}\n{code}\nsave("{out}", R)\n')
    env = dict(os.environ)
    if width:
        env["NABLA_VECMATH"] = width
    p = subprocess.run([NABLA, src], capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"nabla failed ({width}): {p.stderr[-400:]}")
    return st_bits(out)


def widths():
    have = ["sse2"]
    flags = open("/proc/cpuinfo").read()
    if " avx2" in flags:
        have.append("avx2")
    if " avx512f" in flags:
        have.append("avx512")
    return have


def bf16_round_np(u32):
    """tdtype.h's f32 -> bf16 in NumPy (an independent transcription)"""
    u = u32.astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u32 & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u32 >> 16) | 0x40).astype(np.uint16), r)


# ------------------------------------------------------------------ 1. casts
def special_f32(n):
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    k = n // 8
    # ties and near-ties for bf16 (low half 0x8000 +- 1) and f16 (13 dropped bits at 0x1000)
    u[:k] = (u[:k] & 0xFFFF0000) | rng.choice([0x7FFF, 0x8000, 0x8001], k).astype(np.uint32)
    u[k:2 * k] = (u[k:2 * k] & 0xFFFFE000) | rng.choice([0xFFF, 0x1000, 0x1001], k).astype(np.uint32)
    # f16's range: exponents 100..145 (subnormal halves, normal halves, overflow)
    e = rng.integers(100, 146, k).astype(np.uint32)
    u[2 * k:3 * k] = (u[2 * k:3 * k] & 0x807FFFFF) | (e << 23)
    # f32 subnormals, zeros, infinities, NaNs (both signs, quiet and signalling)
    sp = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FA00000,
                   0x00000001, 0x807FFFFF, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000, 0x33000000,
                   0x33000001, 0x387FFFFF, 0x38800000, 0x7F7FFFFF], dtype=np.uint32)
    u[3 * k:3 * k + len(sp)] = sp
    u[3 * k + len(sp):4 * k] &= 0x807FFFFF
    return u


N = 100003   # odd, above NT_OMP_THRESHOLD (65536): the threaded path
u = special_f32(N)
x = u.view(np.float32)
halfs = np.arange(65536, dtype=np.uint16)
cast_code = """
x = I["x"]
R["bf"] = x.to("bf16"); R["h"] = x.to("f16")
R["bf_step"] = x[1::2].to("bf16"); R["h_step"] = x[1::2].to("f16")
xt = reshape(x[0:99990], [330, 303]).T
R["bf_t"] = xt.to("bf16"); R["h_t"] = xt.to("f16")
R["bf_small"] = x[0:37].to("bf16")
h = I["h"]
R["h_up"] = h.to("f32"); R["h_up_t"] = reshape(h, [256, 256]).T.to("f32")
b = I["bfsrc"].to("bf16")
R["bf_up"] = b.to("f32"); R["bf_up_t"] = reshape(b, [256, 256]).T.to("f32")
"""
# every bf16 pattern as an f32 whose low half is zero (its cast to bf16 is exact)
bfsrc = (halfs.astype(np.uint32) << 16).view(np.float32)
inputs = {"x": x, "h": halfs.view(np.float16), "bfsrc": bfsrc}
res = {w: run(cast_code, inputs, w) for w in widths()}
ref = res["sse2"]
for w in widths()[1:]:
    for k in ref:
        same = np.array_equal(res[w][k][1], ref[k][1])
        check(f"cast_{k}_{w}_eq_scalar", same,
              "" if same else f"{int((res[w][k][1] != ref[k][1]).sum())} elements differ")

# the scalar reference against NumPy / a transcription of the rule
got_bf = ref["bf"][1]
check("cast_bf_ref_rule", np.array_equal(got_bf, bf16_round_np(u)), "f32 -> bf16 differs from round-to-nearest-even")
with np.errstate(over="ignore", invalid="ignore"):
    np_h = x.astype(np.float16).view(np.uint16)
nan = np.isnan(x)
got_h = ref["h"][1]
ok = np.array_equal(got_h[~nan], np_h[~nan]) and np.all((got_h[nan] & 0x7FFF) == 0x7E00) and \
    np.array_equal(got_h[nan] >> 15, (u[nan] >> 31).astype(np.uint16))
check("cast_h_numpy", ok, "f32 -> f16 differs from NumPy (or a NaN lost)")
tb = torch.from_numpy(x[~nan].copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
check("cast_bf_torch", np.array_equal(got_bf[~nan], tb), "f32 -> bf16 differs from torch")
hu = ref["h_up"][1]
fin = ~np.isnan(halfs.view(np.float16))
check("cast_h_up_numpy", np.array_equal(hu[fin], halfs.view(np.float16)[fin].astype(np.float32).view(np.uint32)),
      "f16 -> f32 differs from NumPy")
check("cast_h_up_nan", np.all(np.isnan(hu[~fin].view(np.float32))), "a NaN f16 became a number")
check("cast_bf_up_exact", np.array_equal(ref["bf_up"][1][(halfs & 0x7FFF) <= 0x7F80],
                                         (halfs.astype(np.uint32) << 16)[(halfs & 0x7FFF) <= 0x7F80]),
      "bf16 -> f32 not exact")
check("cast_strided_eq_contig", np.array_equal(ref["bf_step"][1], got_bf[1::2]) and
      np.array_equal(ref["h_t"][1], got_h[:99990].reshape(330, 303).T), "a strided cast differs")

# ------------------------------------------------------------------ 2. ops
def values(shape):
    """normal-ish values plus NaN, +-inf, -0, bf16/f16 subnormals, big values"""
    v = (rng.standard_normal(shape) * 3).astype(np.float32)
    f = v.reshape(-1)
    sp = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -3e-39, 6e-8, 1e30, -1e30, 88.5, -104.0], np.float32)
    pos = rng.choice(f.size, min(f.size, len(sp)), replace=False)
    f[pos] = sp[:len(pos)]
    return v


UNARY = ["exp", "log", "tanh", "erf", "sigmoid", "silu", "sin", "cos", "expm1", "log1p",
         "neg", "abs", "relu", "sqrt", "rsqrt", "gelu"]
BINARY = ["+", "-", "*", "/", "maximum", "minimum"]


def binexpr(op, a, b):
    return f"(({a}) {op} ({b}))" if op in "+-*/" else f"{op}({a}, {b})"


ops_code = ["A = I['a']; B = I['b']; Row = I['row']; Col = I['col']; G = I['g']"]
for dt in ("bf16", "f16"):
    ops_code.append(f'a = A.to("{dt}"); b = B.to("{dt}"); row = Row.to("{dt}"); col = Col.to("{dt}"); g = G.to("{dt}")')
    ops_code.append("a32 = a.to(\"f32\"); b32 = b.to(\"f32\"); row32 = row.to(\"f32\"); col32 = col.to(\"f32\"); g32 = g.to(\"f32\")")
    for name in UNARY:
        for tag, e, e32 in (("c", "a", "a32"), ("big", "b", "b32"), ("t", "a.T", "a32.T")):
            ops_code.append(f'R["{dt}_{name}_{tag}"] = {name}({e}); R["{dt}_{name}_{tag}_ref"] = {name}({e32}).to("{dt}")')
    for i, op in enumerate(BINARY):
        for tag, l, r, l32, r32 in (("c", "a", "a[::-1]", "a32", "a32[::-1]"),
                                    ("row", "a", "row", "a32", "row32"), ("col", "col", "a", "col32", "a32"),
                                    ("t", "a.T", "a.T * 1", "a32.T", "(a.T * 1).to(\"f32\")"),
                                    ("s", "a", "1.5", "a32", "1.5"), ("sfirst", "-2.25", "a", "-2.25", "a32"),
                                    ("big", "b", "b * 0.5", "b32", "(b * 0.5).to(\"f32\")")):
            ops_code.append(f'R["{dt}_op{i}_{tag}"] = {binexpr(op, l, r)}; '
                            f'R["{dt}_op{i}_{tag}_ref"] = {binexpr(op, l32, r32)}.to("{dt}")')
    for approx in ("none", "tanh"):
        ops_code.append(f'R["{dt}_geluf_{approx}"] = gelu(b, approximate="{approx}"); '
                        f'R["{dt}_geluf_{approx}_ref"] = gelu(b32, approximate="{approx}").to("{dt}")')
        ops_code.append(f'R["{dt}_gelug_{approx}"] = grad(fn(x) sum(gelu(x, approximate="{approx}") * g))(b); '
                        f'R["{dt}_gelug_{approx}_ref"] = grad(fn(x) sum(gelu(x, approximate="{approx}") * g32))(b32).to("{dt}")')
A = values((37, 41))
B = values((300, 301))   # above NT_OMP_THRESHOLD
inputs = {"a": A, "b": B, "row": values((41,)), "col": values((37, 1)), "g": values((300, 301))}
for w in widths():
    r = run("\n".join(ops_code), inputs, w)
    bad = []
    for k in sorted(r):
        if k.endswith("_ref"):
            continue
        got, want = r[k][1], r[k + "_ref"][1]
        if r[k][0] != r[k + "_ref"][0] or not np.array_equal(got, want):
            bad.append(f"{k} ({int((got != want).sum()) if got.shape == want.shape else 'shape'})")
    check(f"ops_round_of_f32_{w}", not bad, f"differ from round(f32 op): {bad[:8]}")
    if w == widths()[-1]:
        last = r

# the bf16 ops against the f64 value of the function (torch's in f64) on the same bf16 inputs:
# within one bf16 rounding (torch's own bf16 gelu is not, in the negative tail)
tA = torch.from_numpy(A).to(torch.bfloat16)


def bf_np(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


TORCH_UNARY = {"exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid,
               "silu": F.silu, "sin": torch.sin, "cos": torch.cos, "expm1": torch.expm1, "log1p": torch.log1p,
               "neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "sqrt": torch.sqrt,
               "rsqrt": torch.rsqrt, "gelu": None}


def gelu_f64(x):
    """x Phi(x) through erfc: no cancellation in the negative tail (torch's f64
    gelu, 0.5 x (1 + erf), flushes below x ~ -8.3 to 0)"""
    xs = x.numpy().astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return xs * 0.5 * np.vectorize(math.erfc)(-xs / math.sqrt(2.0))
bad = []
for name, f in TORCH_UNARY.items():
    got = bf_np(last[f"bf16_{name}_c"][1])
    want = gelu_f64(tA.double()) if f is None else f(tA.double()).numpy()   # the function on the bf16 inputs, in f64
    both_nan = np.isnan(got) & np.isnan(want)
    # one bf16 rounding (<= 2^-8 relative) of an f32 result a few f32 ULPs off;
    # absolute below bf16's smallest normal, where its spacing is 2^-133
    close = np.isclose(got, want, rtol=2 ** -7, atol=2 ** -130) | both_nan | (got == want)
    if not close.all():
        i = np.flatnonzero(~close)[:3]
        bad.append(f"{name} ({int((~close).sum())}: x {tA.float().numpy().reshape(-1)[i]} got {got.reshape(-1)[i]} torch {want.reshape(-1)[i]})")
check("ops_bf16_vs_f64", not bad, f"beyond one bf16 rounding of the f64 value: {bad}")

# ------------------------------------------------------------------ 4. an autocast MLP against torch's CPU autocast
# y = gelu(x @ W1 + b1) @ W2 and dW1, dx of sum(y * G): the same ops in bf16
# (matmuls, gelu) in both; each error against the f64 computation must be
# within 2x torch's (the same roundings, in another order) -- and nonzero
# (the block really ran in bf16).
X, W1, B1, W2, G = (rng.standard_normal(s).astype(np.float32) for s in ((67, 48), (48, 97), (97,), (97, 41), (67, 41)))
mlp = """
x = I["x"]; w1 = I["w1"]; b1 = I["b1"]; w2 = I["w2"]; g = I["g"]
fn f(x, w1) = autocast("bf16") { gelu(x @ w1 + b1) @ w2 }
R["y"] = f(x, w1).to("f32")
gr = grad(fn(x, w1) sum(f(x, w1).to("f32") * g), argnums=[0, 1])(x, w1)
R["dx"] = gr[0]; R["dw1"] = gr[1]
"""
r = run(mlp, {"x": X, "w1": W1, "b1": B1, "w2": W2, "g": G})
got = {k: r[k][1].view(np.float32) for k in ("y", "dx", "dw1")}
tx, tw1 = (torch.from_numpy(a.copy()).requires_grad_(True) for a in (X, W1))
with torch.autocast("cpu", dtype=torch.bfloat16):
    ty = F.gelu(tx @ tw1 + torch.from_numpy(B1)) @ torch.from_numpy(W2)
(ty.float() * torch.from_numpy(G)).sum().backward()
ref = {"y": ty.float().detach().numpy(), "dx": tx.grad.numpy(), "dw1": tw1.grad.numpy()}
dx64, dw64 = (torch.from_numpy(a.astype(np.float64)).requires_grad_(True) for a in (X, W1))
y64 = F.gelu(dx64 @ dw64 + torch.from_numpy(B1.astype(np.float64))) @ torch.from_numpy(W2.astype(np.float64))
(y64 * torch.from_numpy(G.astype(np.float64))).sum().backward()
exact = {"y": y64.detach().numpy(), "dx": dx64.grad.numpy(), "dw1": dw64.grad.numpy()}
for k in ("y", "dx", "dw1"):
    scale = np.abs(exact[k]).max()
    e_nb, e_th = np.abs(got[k] - exact[k]).max() / scale, np.abs(ref[k] - exact[k]).max() / scale
    check(f"autocast_mlp_{k}_vs_torch", got[k].shape == exact[k].shape and 0 < e_nb <= 2 * e_th + 1e-7,
          f"relative error {e_nb:.3g} vs torch autocast's {e_th:.3g}")

# ------------------------------------------------------------------ 3. f16 autocast on the CPU says it will not pay, once
def stderr_of(code):
    src = os.path.join(TMP, "warn.nbl")
    with open(src, "w") as f:
        f.write(code)
    p = subprocess.run([NABLA, src], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


WARN = 'autocast("f16") on the CPU is slower than f32'
rc, out, err = stderr_of('import nn\na = randn(3, 4)\nl = nn.linear(4, 2)\n'
                         'autocast("f16") { c = a @ a.T; d = l(a) }\nautocast("f16") { e = a @ a.T }\nprint(c.dtype, d.dtype)\n')
check("f16_cpu_warns_once", rc == 0 and err.count(WARN) == 1 and out.split() == ["f16", "f16"], f"rc {rc} out {out!r} err {err!r}")
rc, out, err = stderr_of('a = randn(3, 4)\nautocast("bf16") { c = a @ a.T }\nautocast("f16") { s = softmax(a, axis=-1) }\nprint(c.dtype, s.dtype)\n')
check("bf16_cpu_no_warning", rc == 0 and WARN not in err and out.split() == ["bf16", "f32"], f"rc {rc} out {out!r} err {err!r}")

import shutil  # noqa: E402
shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if fails else 0)
