#!/usr/bin/python3
"""torch reference for bench/cuda/bench_cuda.c: same names, same sizes.
Prints "bench: <name> <value> <unit>" lines; "SKIP: ..." without torch/GPU."""
import sys
import time

try:
    import torch
except ImportError:
    print("SKIP: bench_torch: torch is not installed")
    sys.exit(0)
if not torch.cuda.is_available():
    print("SKIP: bench_torch: torch sees no CUDA device")
    sys.exit(0)


def time_op(fn, iters, reps):
    fn()
    torch.cuda.synchronize()
    best = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


only = sys.argv[1] if len(sys.argv) > 1 else None
torch.manual_seed(0)
dev = "cuda"
if not only or only in "matmul":
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
    t = time_op(lambda: torch.matmul(a, b), 10, 3)
    print(f"bench: matmul_bf16_8192 {2 * n ** 3 / t / 1e12:.1f} TFLOP/s")
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    torch.backends.cuda.matmul.allow_tf32 = True
    t = time_op(lambda: torch.matmul(a, b), 5, 3)
    print(f"bench: matmul_tf32_8192 {2 * n ** 3 / t / 1e12:.1f} TFLOP/s")
    torch.backends.cuda.matmul.allow_tf32 = False
    t = time_op(lambda: torch.matmul(a, b), 3, 2)
    print(f"bench: matmul_f32_8192 {2 * n ** 3 / t / 1e12:.1f} TFLOP/s")
    del a, b
if not only or only in "bandwidth":
    n = 1 << 28
    gb = n * 4 / 1e9
    a = torch.rand(n, device=dev)
    b = torch.rand(n, device=dev)
    t = time_op(lambda: a + b, 20, 3)
    print(f"bench: add_f32_256M {3 * gb / t:.0f} GB/s")
    t = time_op(lambda: a.clone(), 20, 3)
    print(f"bench: copy_d2d_256M {2 * gb / t:.0f} GB/s")
    t = time_op(lambda: a.sum(), 20, 3)
    print(f"bench: sum_f32_256M {gb / t:.0f} GB/s")
    del a, b
if not only or only in "latency":
    a = torch.ones(16, device=dev)
    t = time_op(lambda: a + a, 20000, 3)
    print(f"bench: small_add_latency {t * 1e6:.2f} us")
    best = 1e30
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(2000):
            a + a
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 2000)
    print(f"bench: small_add_sync {best * 1e6:.2f} us")
if (not only or only in "attention") and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
    print(f"SKIP: bench_torch: attention: torch {torch.__version__} has no scaled_dot_product_attention")
elif not only or only in "attention":
    # causal scaled_dot_product_attention at GPT-2-small's shape, bf16: torch's default
    # backend (flash attention) and its math backend (GEMMs + softmax, like nabla's _gemm)
    import contextlib
    import torch.nn.functional as F
    q, k, v = (torch.randn(8, 12, 1024, 64, dtype=torch.bfloat16, device=dev, requires_grad=True) for _ in range(3))
    dout = torch.randn(8, 12, 1024, 64, dtype=torch.bfloat16, device=dev)

    def fwd():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(o, (q, k, v), dout)

    backends = [("", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends.append(("_math", SDPBackend.MATH))
    except ImportError:
        print("SKIP: bench_torch: attention _math: this torch has no torch.nn.attention.sdpa_kernel")
    for suffix, backend in backends:
        ctx = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
        with ctx:
            t = time_op(fwd, 20, 3)
            print(f"bench: attention_fwd_bf16_T1024{suffix} {t * 1e3:.3f} ms")
            t = time_op(fwd_bwd, 10, 3)
            print(f"bench: attention_fwd_bwd_bf16_T1024{suffix} {t * 1e3:.3f} ms")
    mask = torch.randn(1024, 1024, dtype=torch.bfloat16, device=dev)   # additive, not causal
    t = time_op(lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v), dout), 10, 3)
    print(f"bench: attention_fwd_bwd_bf16_T1024_mask {t * 1e3:.3f} ms")
