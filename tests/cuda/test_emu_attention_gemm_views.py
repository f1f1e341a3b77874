#!/usr/bin/python3
"""test_emu_attention_gemm_views.py — the cuBLAS attention path on head views
(issue 27: no layout copies around attention on any path): with
NABLA_CUDA_ATTENTION=gemm, attention_qkv over a packed [B, T, 3C] qkv and
scaled_dot_product_attention on heads permuted out of [B, T, H, hd] go to
cuda/attention_gemm.cu as strided views (NT_SDPA_VIEWS): each chunk of
batch*heads stays inside one outer batch index, where the heads are one
stride apart, so one strided-batched GEMM per step reads them in place and O,
dQ, dK, dV are written in place (dQ/dK/dV into ONE packed gradient).

On the emulated CUDA device against torch (f64 on the values the device
holds), fresh random inputs:
  values and gradients   f32 / bf16 / f16 / f64, causal and not, odd T and
                         head dims, chunks cut inside a batch index (a scratch
                         bound NABLA_CUDA_ATTENTION_CHUNK_BYTES of one matrix,
                         and of two or three: chunks of 2+1 heads), sdpa on
                         permuted heads (two batch dims), empty T (declined:
                         the contiguous retry);
  counts                 cuda.stats() around attention_qkv forward +
                         backward: no device copy, no memset, no copy op;
                         2 GEMMs per chunk forward, 5 backward.
Run by tools/run-tests.sh with the release build and again (NABLA_ASAN=1) with
the ASan build.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import emuutil  # noqa: E402

if emuutil.no_module("emu.attention_gemm_views"):
    sys.exit(0)
os.environ.update(emuutil.ENV)
os.environ["NABLA"] = emuutil.NABLA
os.environ["NABLA_CUDA_ATTENTION"] = "gemm"
sys.path.insert(0, os.path.join(emuutil.ROOT, "tests", "numerics"))
import harness  # noqa: E402
from harness import Batch, finish, rng, torch, np  # noqa: E402
from test_emu_attention_qkv import TOL, ref_qkv, rnd, sdpa_view_cases  # noqa: E402


def cases(chunk_bytes):
    """chunk_bytes: NABLA_CUDA_ATTENTION_CHUNK_BYTES (None: the default 1 GiB);
    1 puts every matrix in its own chunk, 7000 two or three heads (T*T*(4 + 4)
    bytes per f32 matrix, T*T*(4 + 2) per bf16/f16 one)"""
    harness.DEVICE = "cuda"
    tag0 = f"chunk{chunk_bytes}" if chunk_bytes else "whole"
    if chunk_bytes:
        os.environ["NABLA_CUDA_ATTENTION_CHUNK_BYTES"] = str(chunk_bytes)
    b = Batch(f"attention_gemm_views.{tag0}")
    # (tag, B, T, C, heads, causal, dtype)
    cfgs = [("f32_causal", 2, 5, 12, 3, True, "f32"),
            ("f32_full_odd", 3, 17, 15, 3, False, "f32"),
            ("bf16_causal", 2, 24, 64, 4, True, "bf16"),
            ("f16_full", 1, 9, 32, 2, False, "f16"),
            ("f64_odd_hd", 2, 7, 10, 2, True, "f64")]
    for tag, B, T, C, H, causal, dt in cfgs:
        x, r = rnd(B, T, 3 * C), rnd(B, T, C)
        xe, re_ = f"{b.inp(x)}.to(\"{dt}\")", f"{b.inp(r)}.to(\"{dt}\")"
        y, g = ref_qkv(x, H, causal, dt, r)
        cz = "true" if causal else "false"
        b.case(f"value_{tag}", f"attention_qkv({xe}, {H}, causal={cz})", y, **TOL[dt])
        b.case(f"grad_{tag}", f"fn f(x) = sum(attention_qkv(x, {H}, causal={cz}) * {re_})\ngrad(f)({xe})", g, **TOL[dt])
    # sdpa on heads permuted out of [B, T, H, hd] (Bo = B, Bi = H)
    sdpa_view_cases(b, 2, 19, 3, 5)
    # empty T: declined, retried with contiguous copies: an empty result
    b.case("empty_T", "attention_qkv(zeros(2, 0, 12), 2)", torch.zeros(2, 0, 4))
    b.run()
    os.environ.pop("NABLA_CUDA_ATTENTION_CHUNK_BYTES", None)


def counts():
    """attention_qkv forward + backward (B=2, H=2) on the cuBLAS path: the backward
    measured as grad(f) minus grad(f0) (the same loss on a tensor of the output's
    shape).  No device copy, no memset, no copy op; GEMMs: one chunk per batch
    index (2), 2 per chunk forward and 5 backward (grad(f) = forward + backward)."""
    code = """
x = randn(2, 40, 48, device="cuda").to("bf16")
y0 = randn(2, 40, 16, device="cuda").to("bf16")
r = randn(2, 40, 16, device="cuda").to("bf16")
fn f(x) = sum(attention_qkv(x, 2) * r)
fn f0(y) = sum(y * r)
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
fn copies(s) = if has(s.by_op, "copy") { s.by_op.copy } else { 0 }
print("fwd", st.memcpy_d2d, st.memsets, copies(st), st.gemms)
print("bwd", s1.memcpy_d2d - s0.memcpy_d2d, s1.memsets - s0.memsets, copies(s1) - copies(s0), s1.gemms - s0.gemms)
"""
    rc, so, se = emuutil.run([emuutil.NABLA, "-e", code], 300, env=dict(emuutil.ENV, NABLA_CUDA_ATTENTION="gemm"))
    lines = {ln.split()[0]: [int(t) for t in ln.split()[1:]] for ln in so.splitlines() if ln[:3] in ("fwd", "bwd")}
    if rc != 0 or set(lines) != {"fwd", "bwd"}:
        emuutil.out("FAIL", "attention_gemm_views.counts", f"rc={rc} {so[-400:]} {se[-800:]}")
        return
    want = {"fwd": [0, 0, 0, 4], "bwd": [0, 0, 0, 4 + 10]}   # grad(f) runs the forward too
    ok = lines == want
    emuutil.out("PASS" if ok else "FAIL", "attention_gemm_views.counts",
                "" if ok else f"(d2d copies, memsets, copy ops, GEMMs): got {lines}, want {want}")


if __name__ == "__main__":
    cases(None)
    cases(1)
    cases(7000)
    counts()
    finish()
    if emuutil.n_fail:
        sys.exit(1)
