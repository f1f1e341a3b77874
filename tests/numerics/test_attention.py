#!/usr/bin/python3
"""scaled_dot_product_attention (one fused op) vs a PyTorch reference, on fresh random inputs.

The reference is the math of torch.nn.functional.scaled_dot_product_attention
(torch >= 2.0; this machine has torch 1.13, which lacks it):
    softmax(q k^T * scale, masked to -inf where j > i when causal) @ v
with the causal mask torch.ones(T, S).tril() (top-left aligned, also for
T != S).  Where torch has the function (F.scaled_dot_product_attention, or
1.13's F._scaled_dot_product_attention without `scale`), the reference itself
is checked against it first.

Covered: 2-D/3-D/4-D and broadcast batch dims, T != S both ways, causal on/off,
custom scale, d != dv, odd sizes, sizes across the CPU row blocks (64) and the
GPU tiles (32), head dim 128 (the fused CUDA kernel's limit) and 130, large scores, S = 0 and
T = 0; f32/f64 tightly, f16/bf16 loosely; gradients w.r.t. q, k, v (loss
sum(O * W), W random) vs torch.autograd; nn.causal_self_attention (value and
input gradient) vs a torch reimplementation; error messages.

Device-agnostic: NUMERICS_DEVICE=cuda runs the same cases with the inputs on
the GPU (harness.py); the CPU-only and GPU-only cases print SKIP otherwise.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_attention.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DEVICE, Batch, T, check, finish, rng, run_nabla, torch, np  # noqa: E402
import torch.nn.functional as F  # noqa: E402

OP = "scaled_dot_product_attention"
TORCH_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
FWD_TOL = {"f64": dict(rtol=1e-10, atol=1e-11), "f32": dict(rtol=1e-4, atol=1e-5),
           "f16": dict(rtol=1e-2, atol=1e-2), "bf16": dict(rtol=5e-2, atol=5e-2)}
GRAD_TOL = {"f64": dict(rtol=1e-9, atol=1e-10), "f32": dict(rtol=1e-4, atol=1e-4),
            "f16": dict(rtol=2e-2, atol=2e-2), "bf16": dict(rtol=8e-2, atol=8e-2)}


def ref(q, k, v, causal=False, scale=None):
    """torch 2.x's documented math for scaled_dot_product_attention (no mask, no dropout)."""
    L, S = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def reference_is_torch():
    """The reference equals torch's own implementation where this torch has one."""
    fn = getattr(F, "scaled_dot_product_attention", None)
    old = getattr(F, "_scaled_dot_product_attention", None)
    if fn is None and old is None:
        print("SKIP: attention.reference_vs_torch: this torch has no scaled_dot_product_attention")
        return
    worst = 0.0
    for (t, s, dv) in [(5, 5, 4), (5, 8, 4), (8, 5, 4), (6, 7, 3)]:
        q, k, v = (torch.from_numpy(rng.standard_normal(sh)) for sh in [(2, 3, t, 4), (2, 3, s, 4), (2, 3, s, dv)])
        for causal in (False, True):
            got = fn(q, k, v, is_causal=causal) if fn is not None else old(q, k, v, None, 0.0, False, causal)[0]
            worst = max(worst, float((got - ref(q, k, v, causal)).abs().max()))
    check("attention.reference_vs_torch", worst < 1e-12, f"max abs diff {worst:.3g}")


def rnd(shape, mul=1.0):
    return rng.standard_normal(shape) * mul


def nb_input(b, a, dt):
    """registers a (f64 numpy) and returns (nabla expression of dtype dt, the same values as f64 torch)."""
    if dt == "f64":
        return b.inp(a), T(a)
    e = b.inp(a.astype(np.float32))
    t = T(a.astype(np.float32)).to(TORCH_DT[dt]).double()    # rounded like nabla's input
    return (e if dt == "f32" else f'{e}.to("{dt}")'), t


def kwargs_src(causal, scale):
    s = f", causal={'true' if causal else 'false'}"
    return s + (f", scale={scale!r}" if scale is not None else "")


def value_case(b, name, shapes, dt, causal=False, scale=None, mul=1.0):
    (qe, qt), (ke, kt), (ve, vt) = (nb_input(b, rnd(sh, mul if i == 0 else 1.0), dt) for i, sh in enumerate(shapes))
    exp = ref(qt, kt, vt, causal, scale).to(TORCH_DT[dt])
    b.case(name, f"{OP}({qe}, {ke}, {ve}{kwargs_src(causal, scale)})", exp, **FWD_TOL[dt])


def grad_case(b, name, shapes, dt, causal=False, scale=None, mul=1.0):
    (qe, qt), (ke, kt), (ve, vt) = (nb_input(b, rnd(sh, mul if i == 0 else 1.0), dt) for i, sh in enumerate(shapes))
    for t in (qt, kt, vt):
        t.requires_grad_(True)
    out = ref(qt, kt, vt, causal, scale)
    W = rng.standard_normal(tuple(out.shape))
    (out * T(W)).sum().backward()
    exp = [t.grad.to(TORCH_DT[dt]) for t in (qt, kt, vt)]
    we = b.inp(W if dt == "f64" else W.astype(np.float32))
    code = (f"f = fn(q, k, v) sum({OP}(q, k, v{kwargs_src(causal, scale)}) * {we})\n"
            f"grad(f, argnums=list(0, 1, 2))({qe}, {ke}, {ve})")
    b.case(name, code, exp, **GRAD_TOL[dt])


# name -> q, k, v shapes
SHAPES = {
    "2d": [(5, 4), (6, 4), (6, 7)],
    "3d": [(3, 7, 8), (3, 7, 8), (3, 7, 8)],
    "4d_blocks": [(2, 3, 70, 16), (2, 3, 90, 16), (2, 3, 90, 12)],   # > 64 query rows, > 2 key tiles
    "T_gt_S": [(2, 9, 4), (2, 4, 4), (2, 4, 5)],
    "T_lt_S": [(2, 4, 4), (2, 9, 4), (2, 9, 5)],
    "bcast": [(2, 3, 5, 4), (3, 6, 4), (1, 3, 6, 4)],
    "odd": [(2, 33, 33), (2, 65, 33), (2, 65, 17)],
    "d128": [(1, 2, 40, 128), (1, 2, 40, 128), (1, 2, 40, 128)],
    "long_causal": [(1, 2, 130, 64), (1, 2, 130, 64), (1, 2, 130, 64)],
}


def values_and_grads(dt, names, scales=(None,)):
    b = Batch(f"attention_{dt}")
    for name in names:
        for causal in (False, True):
            for scale in scales:
                tag = f"{name}{'_causal' if causal else ''}{'' if scale is None else '_scale'}"
                value_case(b, f"value_{tag}", SHAPES[name], dt, causal, scale)
                grad_case(b, f"grad_{tag}", SHAPES[name], dt, causal, scale)
    return b


def full_precision():
    for dt in ("f64", "f32"):
        b = values_and_grads(dt, list(SHAPES), scales=(None,))
        for name in ("2d", "T_gt_S", "4d_blocks"):
            for causal in (False, True):
                value_case(b, f"value_{name}_scale0.3{'_causal' if causal else ''}", SHAPES[name], dt, causal, 0.3)
                grad_case(b, f"grad_{name}_scale0.3{'_causal' if causal else ''}", SHAPES[name], dt, causal, 0.3)
        # large scores: stable softmax (a naive exp overflows)
        value_case(b, "value_large_scores_causal", SHAPES["3d"], dt, True, None, mul=40.0)
        grad_case(b, "grad_large_scores", SHAPES["3d"], dt, False, None, mul=40.0)
        # no keys: the output is 0 (torch's math: an empty softmax times an empty v); no queries: empty
        value_case(b, "value_no_keys", [(3, 4), (0, 4), (0, 2)], dt)
        grad_case(b, "grad_no_keys", [(2, 3, 4), (2, 0, 4), (2, 0, 2)], dt, True)
        value_case(b, "value_no_queries", [(2, 0, 4), (2, 3, 4), (2, 3, 2)], dt, True)
        grad_case(b, "grad_no_queries", [(0, 4), (3, 4), (3, 2)], dt)
        b.run()


def half_precision():
    for dt in ("f16", "bf16"):
        b = values_and_grads(dt, ["2d", "T_gt_S", "4d_blocks", "d128", "long_causal"])
        # autocast: f32 inputs, computed and returned in the low dtype (like matmul)
        (qe, qt), (ke, kt), (ve, vt) = (nb_input(b, rnd(sh), "f32") for sh in SHAPES["4d_blocks"])
        rounded = [t.to(TORCH_DT[dt]).double() for t in (qt, kt, vt)]
        b.case("autocast_causal", f'autocast("{dt}") {{ {OP}({qe}, {ke}, {ve}, causal=true) }}',
               ref(*rounded, True).to(TORCH_DT[dt]), **FWD_TOL[dt])
        b.run()


def self_attention():
    """nn.causal_self_attention (now built on the op) vs a torch reimplementation."""
    b = Batch("attention_nn")
    for shape, heads in [((2, 7, 16), 4), ((5, 12), 3), ((1, 70, 32), 2)]:
        x = rng.standard_normal(shape).astype(np.float32)
        W = rng.standard_normal(shape).astype(np.float32)
        xe, we = b.inp(x), b.inp(W)
        d = shape[-1]
        code = (f"import nn\na = nn.causal_self_attention({d}, {heads})\n"
                f"f = fn(x) sum(a(x) * {we})\n"
                f"[a({xe}), grad(f)({xe}), a.qkv.weight, a.qkv.bias, a.proj.weight, a.proj.bias]")

        def judge(got, x=x, W=W, heads=heads):
            if not isinstance(got, list) or len(got) != 6:
                return f"expected a list of 6, got {type(got).__name__}"
            y, gx, wq, bq, wp, bp = (T(np.asarray(g, dtype=np.float64)) for g in got)
            xt = T(x.astype(np.float64), requires_grad=True)
            xb = xt if xt.dim() == 3 else xt.unsqueeze(0)
            B_, T_, C = xb.shape
            hd = C // heads
            qkv = xb @ wq.T + bq
            q, k, v = (z.reshape(B_, T_, heads, hd).permute(0, 2, 1, 3) for z in qkv.chunk(3, -1))
            yt = ref(q, k, v, True).permute(0, 2, 1, 3).reshape(B_, T_, C) @ wp.T + bp
            yt = yt if xt.dim() == 3 else yt.squeeze(0)
            (yt * T(W.astype(np.float64))).sum().backward()
            for what, g, e in (("y", y, yt.detach()), ("dx", gx, xt.grad)):
                err = float((g - e).abs().max())
                if not err < 1e-4 * (1 + float(e.abs().max())):
                    return f"{what}: max abs err {err:.3g}"
            return None
        b.case(f"causal_self_attention_{'x'.join(map(str, shape))}_h{heads}", code, judge)
    b.run()


# Strided operands: views the CPU kernel reads in place (heads of a [B, T, H, d]
# tensor permuted to [B, H, T, d]; a slice of a wider last dim, rows further
# apart than d; a 2-D column slice; an expanded batch dim, stride 0, whose
# gradient is then summed by expand's backward) and one it copies (a
# transpose: last dim not unit-stride).  Base tensor -> (nabla view, torch view).
STRIDED = {
    "heads": ((2, 7, 3, 8), "permute({}, [0, 2, 1, 3])", lambda t: t.permute(0, 2, 1, 3)),
    "heads_s": ((2, 9, 3, 8), "permute({}, [0, 2, 1, 3])", lambda t: t.permute(0, 2, 1, 3)),
    "wide": ((2, 3, 9, 16), "{}[:, :, :, 4:12]", lambda t: t[:, :, :, 4:12]),
    "wide_v": ((2, 3, 9, 11), "{}[:, :, :, 1:6]", lambda t: t[:, :, :, 1:6]),
    "trans_v": ((2, 3, 5, 9), "transpose({}, 2, 3)", lambda t: t.transpose(2, 3)),
    "heads_v": ((2, 9, 3, 5), "permute({}, [0, 2, 1, 3])", lambda t: t.permute(0, 2, 1, 3)),
    "bcast_k": ((1, 3, 9, 8), "expand({}, [2, 3, 9, 8])", lambda t: t.expand(2, 3, 9, 8)),
    "q2d": ((5, 12), "{}[:, 2:10]", lambda t: t[:, 2:10]),
    "k2d": ((6, 8), "{}", lambda t: t),
    "v2d": ((6, 9), "{}[:, 3:9]", lambda t: t[:, 3:9]),
}
STRIDED_CASES = {   # name -> q, k, v (T = 7 queries, S = 9 keys, d = 8)
    "all_in_place": ("heads", "wide", "heads_v"),
    "in_place_wide_v": ("heads", "heads_s", "wide_v"),
    "transposed_v_copied": ("heads", "wide", "trans_v"),
    "expanded_k": ("heads", "bcast_k", "heads_v"),
    "2d_slices": ("q2d", "k2d", "v2d"),
}


def strided():
    for dt in ("f64", "f32"):
        b = Batch(f"attention_strided_{dt}")
        for name, parts in STRIDED_CASES.items():
            for causal in (False, True):
                bases = [rnd(STRIDED[p][0]) for p in parts]
                if dt == "f32":
                    bases = [a.astype(np.float32) for a in bases]
                names = [b.inp(a) for a in bases]
                ts = [T(a.astype(np.float64), requires_grad=True) for a in bases]
                views = [STRIDED[p][2](t) for p, t in zip(parts, ts)]
                out = ref(*views, causal)
                W = rng.standard_normal(tuple(out.shape))
                (out * T(W)).sum().backward()
                we = b.inp(W if dt == "f64" else W.astype(np.float32))
                nv = [STRIDED[p][1].format(x) for p, x in zip(parts, ("a", "b", "c"))]
                call = f"{OP}({nv[0]}, {nv[1]}, {nv[2]}{kwargs_src(causal, None)})"
                tag = f"{name}{'_causal' if causal else ''}"
                # the output's heads permuted back and flattened, as a model does (a view when laid out so)
                flat = "reshape(permute(y, [0, 2, 1, 3]), [y.shape[0], y.shape[2], y.shape[1] * y.shape[3]])"
                exp_v = out.detach().permute(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1) if out.dim() == 4 else out.detach()
                code_v = (f"fn f(a, b, c) {{ y = {call}\n if y.ndim == 4 {{ {flat} }} else {{ y }} }}\n"
                          f"f({', '.join(names)})")
                b.case(f"value_{tag}", code_v, exp_v.to(TORCH_DT[dt]), **FWD_TOL[dt])
                code = (f"f = fn(a, b, c) sum({call} * {we})\n"
                        f"grad(f, argnums=list(0, 1, 2))({', '.join(names)})")
                b.case(f"grad_{tag}", code, [t.grad.to(TORCH_DT[dt]) for t in ts], **GRAD_TOL[dt])
        b.run()


def errors():
    b = Batch("attention_errors")
    q = b.inp(rnd((2, 5, 4)).astype(np.float32))
    k = b.inp(rnd((2, 6, 4)).astype(np.float32))
    v = b.inp(rnd((2, 6, 3)).astype(np.float32))
    k3 = b.inp(rnd((2, 6, 3)).astype(np.float32))
    v7 = b.inp(rnd((2, 7, 3)).astype(np.float32))
    kb = b.inp(rnd((3, 6, 4)).astype(np.float32))
    qi = b.inp(rng.integers(0, 5, (2, 5, 4)))
    b.error("head_dim_mismatch", f"{OP}({q}, {k3}, {v})", [OP, "same last dim d", "[2, 5, 4]", "[2, 6, 3]"])
    b.error("keys_mismatch", f"{OP}({q}, {k}, {v7})", [OP, "number of keys", "[2, 6, 4]", "[2, 7, 3]"])
    b.error("one_dim", f"{OP}({q}[0, 0], {k}, {v})", [OP, "at least 2-D", "[4]"])
    b.error("integer", f"{OP}({qi}, {k}, {v})", [OP, "floating", "i64"])
    b.error("mixed_dtypes", f"{OP}({q}, {k}.to(\"f64\"), {v})", [OP, "same dtype", "f32", "f64"])
    b.error("batch_mismatch", f"{OP}({q}, {kb}, {v})", [OP, "cannot broadcast", "[2, 5, 4]", "[3, 6, 4]"])
    b.error("scale_not_a_number", f"{OP}({q}, {k}, {v}, scale=\"x\")", [OP, "scale"])
    q0, k0 = b.inp(np.zeros((2, 5, 0), np.float32)), b.inp(np.zeros((2, 6, 0), np.float32))
    b.error("zero_head_dim", f"{OP}({q0}, {k0}, {v})", [OP, "head dim"])
    # head dims above 128: the fused CUDA kernel's limit; cuda takes its cuBLAS path (the CPU has none)
    value_case(b, "head_dim_130", [(1, 3, 130), (1, 4, 130), (1, 4, 2)], "f32")
    b.run()
    # device mismatch: needs a GPU
    rc, so, _ = run_nabla('print(cuda.available())\n')
    if "true" not in so:
        print("SKIP: attention_errors.device_mismatch: no CUDA device")
        return
    b = Batch("attention_device")
    q = b.inp(rnd((2, 5, 4)).astype(np.float32))
    k = b.inp(rnd((2, 6, 4)).astype(np.float32))
    other = "cpu" if DEVICE == "cuda" else "cuda"
    b.error("device_mismatch", f"{OP}({q}, {k}.to(\"{other}\"), {k})", [OP, "same device", "cpu", "cuda"])
    b.run()


def masks():
    """attn_mask as torch: bool (true = attend) or float (added to the scores),
    broadcast over batch and heads; values and gradients (q, k, v, and a float
    mask that requires grad) vs torch's math; dropout wired through the same
    RNG as dropout(); the errors."""
    b = Batch("attention_mask")
    q_s, k_s, v_s = (2, 3, 70, 8), (2, 3, 90, 8), (2, 3, 90, 6)   # > 64 query rows: several CPU row blocks
    for mname, mshape in (("TS", (70, 90)), ("B1TS", (2, 1, 70, 90)), ("BHTS", (2, 3, 70, 90)), ("S", (90,))):
        for kind in ("bool", "float"):
            q, k, v = rnd(q_s), rnd(k_s), rnd(v_s)
            if kind == "bool":
                m = rng.random(mshape) > 0.4
                m[..., 0] = True   # no row fully masked
                tm = torch.from_numpy(m)
                add = torch.zeros(mshape, dtype=torch.float64).masked_fill(~tm, float("-inf"))
            else:
                m = rng.standard_normal(mshape)
                add = torch.from_numpy(m)
            tq, tk, tv = (T(a, requires_grad=True) for a in (q, k, v))
            out = torch.softmax(tq @ tk.transpose(-2, -1) / math.sqrt(8) + add, -1) @ tv
            W = rng.standard_normal(tuple(out.shape))
            (out * T(W)).sum().backward()
            me = b.inp(m)
            b.case(f"mask_{kind}_{mname}_value", f"{OP}({b.inp(q)}, {b.inp(k)}, {b.inp(v)}, mask={me})", out.detach(), **FWD_TOL["f64"])
            b.case(f"mask_{kind}_{mname}_grads",
                   f"grad(fn(q, k, v) sum({OP}(q, k, v, mask={me}) * {b.inp(W)}), argnums=list(0, 1, 2))({b.inp(q)}, {b.inp(k)}, {b.inp(v)})",
                   [tq.grad, tk.grad, tv.grad], **GRAD_TOL["f64"])
    # f32 through the fused kernel
    q, k, v, m = rnd((2, 5, 4)), rnd((2, 7, 4)), rnd((2, 7, 4)), rng.standard_normal((5, 7))
    (qe, qt), (ke, kt), (ve, vt) = (nb_input(b, a, "f32") for a in (q, k, v))
    me, mt = nb_input(b, m, "f32")
    b.case("mask_float_f32", f"{OP}({qe}, {ke}, {ve}, mask={me})", torch.softmax(qt @ kt.transpose(-2, -1) / 2 + mt, -1).mul(1).matmul(vt).float(),
           **FWD_TOL["f32"])
    # a float mask that requires grad gets its gradient (the composed path)
    q, k, v, m = rnd((2, 5, 4)), rnd((2, 6, 4)), rnd((2, 6, 3)), rng.standard_normal((5, 6))
    tq, tk, tv, tm = (T(a, requires_grad=True) for a in (q, k, v, m))
    out = torch.softmax(tq @ tk.transpose(-2, -1) / 2 + tm, -1) @ tv
    W = rng.standard_normal(tuple(out.shape))
    (out * T(W)).sum().backward()
    b.case("mask_requires_grad",
           f"grad(fn(q, k, v, m) sum({OP}(q, k, v, mask=m) * {b.inp(W)}), argnums=list(0, 1, 2, 3))({b.inp(q)}, {b.inp(k)}, {b.inp(v)}, {b.inp(m)})",
           [tq.grad, tk.grad, tv.grad, tm.grad], **GRAD_TOL["f64"])
    # dropout: the probabilities through dropout() with the same random stream
    qe, ke, ve = b.inp(q), b.inp(k), b.inp(v)
    b.case("dropout_same_stream",
           f"seed(11)\na = {OP}({qe}, {ke}, {ve}, dropout=0.4)\nseed(11)\n"
           f"e = dropout(softmax({qe} @ transpose({ke}, -2, -1) * 0.5, -1), 0.4, true) @ {ve}\nmax(abs(a - e)).item()", 0.0, atol=1e-15, dtype=False)
    b.case("dropout_zero_is_fused", f"max(abs({OP}({qe}, {ke}, {ve}, dropout=0) - {OP}({qe}, {ke}, {ve}))).item()", 0.0, atol=0, dtype=False)
    b.error("mask_and_causal", f"{OP}({qe}, {ke}, {ve}, mask={b.inp(m)}, causal=true)", [OP, "mask", "causal", "not both"])
    b.error("mask_shape", f"{OP}({qe}, {ke}, {ve}, mask=ones(4, 6))", [OP, "mask", "[4, 6]", "does not broadcast", "[2, 5, 6]"])
    b.error("mask_int", f"{OP}({qe}, {ke}, {ve}, mask=ones(5, 6, dtype=\"i64\"))", [OP, "mask", "bool", "i64"])
    b.error("dropout_range", f"{OP}({qe}, {ke}, {ve}, dropout=1.5)", [OP, "dropout", "[0, 1)"])
    b.run()


if __name__ == "__main__":
    reference_is_torch()
    masks()
    full_precision()
    half_precision()
    self_attention()
    strided()
    errors()
    finish()
