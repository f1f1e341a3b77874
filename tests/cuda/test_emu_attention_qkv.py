#!/usr/bin/python3
"""test_emu_attention_qkv.py — attention without layout copies (issues 26/27):
attention_qkv over a packed [B, T, 3C] qkv (tensor/nn/attention.c; the heads
read in place, the output written as [B, T, C], the gradient as ONE packed
[B, T, 3C]) and scaled_dot_product_attention on strided head views (the fused
kernels of cuda/attention.cu read and write them in place), on the emulated
CUDA device (NABLA_CUDA_EMULATE=force) and on the CPU, against torch on fresh
random inputs:

  values and gradients   f32 / bf16 / f16 / f64, causal and not, T across the
                         32-row tiles, head dims 3..64, a non-contiguous qkv
                         (copied first), autocast("bf16") over an f32 qkv, a
                         head dim above the fused kernel's 128 (the cuBLAS
                         path, which declines the views: the contiguous
                         fallback) and NABLA_CUDA_ATTENTION=gemm forced;
  sdpa on head views     q, k, v permuted out of [B, T, H, hd] (and a packed
                         qkv's thirds), values and gradients;
  counts                 cuda.stats() around attention_qkv forward + backward
                         on the fused path: no device copy, no memset, and the
                         op's launches only (1 forward, 3 backward);
  errors                 a qkv that is not 3-D, a last dim that is not
                         3 * heads * hd, heads < 1, an integer qkv.

Run by tools/run-tests.sh with the release build and again (NABLA_ASAN=1)
with the ASan build.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import emuutil  # noqa: E402

if emuutil.no_module("emu.attention_qkv"):
    sys.exit(0)
os.environ.update(emuutil.ENV)
os.environ["NABLA"] = emuutil.NABLA
sys.path.insert(0, os.path.join(emuutil.ROOT, "tests", "numerics"))
import harness  # noqa: E402
from harness import Batch, finish, rng, torch, np  # noqa: E402

TDT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}
TOL = {"f32": dict(rtol=1e-4, atol=1e-5), "f64": dict(rtol=1e-10, atol=1e-12),
       "bf16": dict(rtol=3e-2, atol=3e-2), "f16": dict(rtol=5e-3, atol=5e-3)}


def rnd(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def sdpa_ref(q, k, v, causal):
    """softmax(q k^T / sqrt(d) (+ causal: query i sees keys j <= i)) v (torch 1.13 has no SDPA)"""
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        T, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def ref_qkv(qkv, heads, causal, dt, r):
    """torch: chunk, heads to [B, H, T, hd], SDPA in f64 on the values the device holds;
    returns (out in dt, d(sum(out * r))/dqkv in dt)"""
    X = torch.tensor(qkv).to(TDT[dt]).double().requires_grad_()
    B, T, W = X.shape
    C = W // 3
    hd = C // heads
    q, k, v = X.split(C, dim=-1)
    h = lambda z: z.reshape(B, T, heads, hd).permute(0, 2, 1, 3)  # noqa: E731
    y = sdpa_ref(h(q), h(k), h(v), causal)
    y = y.permute(0, 2, 1, 3).reshape(B, T, C)
    R = torch.tensor(r).to(TDT[dt]).double()
    (y * R).sum().backward()
    return y.to(TDT[dt]), X.grad.to(TDT[dt])


def sdpa_view_cases(b, B, T, H, hd):
    """scaled_dot_product_attention on head views permuted out of [B, T, H, hd]
    (f32 causal, bf16 not): values and the three gradients against f64 torch"""
    for tag, dt, causal in [("f32", "f32", True), ("bf16", "bf16", False)]:
        q, k, v, r = rnd(B, T, H, hd), rnd(B, T, H, hd), rnd(B, T, H, hd), rnd(B, H, T, hd)
        qe, ke, ve = (f"permute({b.inp(a)}.to(\"{dt}\"), [0, 2, 1, 3])" for a in (q, k, v))
        re_ = f"{b.inp(r)}.to(\"{dt}\")"
        Q, K, V = (torch.tensor(a).to(TDT[dt]).double().permute(0, 2, 1, 3).requires_grad_() for a in (q, k, v))
        Y = sdpa_ref(Q, K, V, causal)
        (Y * torch.tensor(r).to(TDT[dt]).double()).sum().backward()
        cz = "true" if causal else "false"
        b.case(f"sdpa_views_value_{tag}", f"scaled_dot_product_attention({qe}, {ke}, {ve}, causal={cz})", Y.to(TDT[dt]), **TOL[dt])
        b.case(f"sdpa_views_grad_{tag}",
               f"fn f(q, k, v) = sum(scaled_dot_product_attention(q, k, v, causal={cz}) * {re_})\n"
               f"grad(f, argnums=list(0, 1, 2))({qe}, {ke}, {ve})",
               [Q.grad.to(TDT[dt]), K.grad.to(TDT[dt]), V.grad.to(TDT[dt])], **TOL[dt])


def qkv_cases(dev, label, env=None):
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    harness.DEVICE = dev
    b = Batch(f"attention_qkv.{label}")
    # (tag, B, T, C, heads, causal, dtype, layout)
    cfgs = [("f32_causal", 2, 5, 12, 3, True, "f32", "plain"),
            ("f32_tiles", 1, 37, 16, 2, True, "f32", "plain"),
            ("f32_full", 2, 33, 8, 1, False, "f32", "plain"),
            ("bf16_causal", 2, 40, 64, 4, True, "bf16", "plain"),
            ("f16_causal", 1, 19, 32, 2, True, "f16", "plain"),
            ("f64_odd_hd", 2, 7, 6, 2, True, "f64", "plain"),
            ("f32_transposed", 2, 6, 12, 2, True, "f32", "transposed"),
            ("f32_hd136", 1, 9, 272, 2, True, "f32", "plain")]
    for tag, B, T, C, H, causal, dt, layout in cfgs:
        x, r = rnd(B, T, 3 * C), rnd(B, T, C)
        if layout == "transposed":      # qkv as a permuted view of [B, 3C, T]: not packed in memory
            xe = f"permute({b.inp(np.ascontiguousarray(x.transpose(0, 2, 1)))}.to(\"{dt}\"), [0, 2, 1])"
        else:
            xe = f"{b.inp(x)}.to(\"{dt}\")"
        re_ = f"{b.inp(r)}.to(\"{dt}\")"
        y, g = ref_qkv(x, H, causal, dt, r)
        cz = "true" if causal else "false"
        b.case(f"value_{tag}", f"attention_qkv({xe}, {H}, causal={cz})", y, **TOL[dt])
        b.case(f"grad_{tag}", f"fn f(x) = sum(attention_qkv(x, {H}, causal={cz}) * {re_})\ngrad(f)({xe})", g, **TOL[dt])
    # autocast("bf16") over an f32 qkv: bf16 out, the f32 gradient of the bf16 one
    x, r = rnd(2, 9, 48), rnd(2, 9, 16)
    xe, re_ = b.inp(x), b.inp(r)
    y, g = ref_qkv(x, 2, True, "bf16", r)
    b.case("autocast_value", f'autocast("bf16") {{ attention_qkv({xe}, 2) }}', y, **TOL["bf16"])
    b.case("autocast_grad", f'fn f(x) = autocast("bf16") {{ sum(attention_qkv(x, 2) * {re_}.to("bf16")) }}\ngrad(f)({xe})',
           g.float(), **TOL["bf16"])
    # scaled_dot_product_attention on head views (permuted out of [B, T, H, hd]): in place
    sdpa_view_cases(b, 2, 35, 3, 8)
    # errors
    b.error("not_3d", "attention_qkv(zeros(4, 12), 2)", ["attention_qkv", "[B, T, 3C]", "[4, 12]"])
    b.error("bad_last_dim", "attention_qkv(zeros(2, 3, 14), 2)", ["attention_qkv", "3 * heads * head_dim", "[2, 3, 14]"])
    b.error("bad_heads", "attention_qkv(zeros(2, 3, 12), 0)", ["attention_qkv", "heads must be positive"])
    b.error("int_qkv", 'attention_qkv(zeros(2, 3, 12).to("i32"), 2)', ["attention_qkv", "floating", "i32"])
    b.run()
    for k_, v_ in saved.items():
        if v_ is None:
            os.environ.pop(k_, None)
        else:
            os.environ[k_] = v_


def counts():
    """attention_qkv forward + backward on the fused path: the op's own launches only.
    The backward is measured as grad(f) with the attention minus grad(f0) without it
    (the same loss on a tensor of the output's shape): the difference must be the two
    attention ops' 1 + 3 launches, no device copy and no memset."""
    code = """
x = randn(2, 40, 48, device="cuda").to("bf16")
y0 = randn(2, 40, 16, device="cuda").to("bf16")
r = randn(2, 40, 16, device="cuda").to("bf16")
fn f(x) = sum(attention_qkv(x, 2) * r)
fn f0(y) = sum(y * r)
fn ops(st) = st.launches + st.gemms + st.memcpy_d2d + st.memsets
g = grad(f)(x); g = grad(f0)(y0)
cuda.synchronize()
cuda.reset_stats()
y = attention_qkv(x, 2)
st = cuda.stats()
cuda.reset_stats()
g = grad(f)(x)
s1 = cuda.stats()
cuda.reset_stats()
g = grad(f0)(y0)
s0 = cuda.stats()
print("fwd", st.memcpy_d2d, st.memsets, ops(st), st.by_op["scaled_dot_product_attention"])
print("bwd", s1.memcpy_d2d - s0.memcpy_d2d, s1.memsets - s0.memsets, ops(s1) - ops(s0), s1.by_op["scaled_dot_product_attention_backward"])
"""
    rc, so, se = emuutil.nabla(code, timeout=300)
    lines = {ln.split()[0]: [int(t) for t in ln.split()[1:]] for ln in so.splitlines() if ln[:3] in ("fwd", "bwd")}
    if rc != 0 or set(lines) != {"fwd", "bwd"}:
        emuutil.out("FAIL", "attention_qkv.counts", f"rc={rc} {so[-400:]} {se[-800:]}")
        return
    want = {"fwd": [0, 0, 1, 1], "bwd": [0, 0, 4, 3]}
    ok = lines == want
    emuutil.out("PASS" if ok else "FAIL", "attention_qkv.counts",
                "" if ok else f"(d2d copies, memsets, GPU ops, attention op's ops): got {lines}, want {want}")


if __name__ == "__main__":
    qkv_cases("cuda", "cuda")
    qkv_cases("cuda", "cuda_gemm", {"NABLA_CUDA_ATTENTION": "gemm"})
    qkv_cases("cpu", "cpu")
    counts()
    finish()
    if emuutil.n_fail:
        sys.exit(1)
