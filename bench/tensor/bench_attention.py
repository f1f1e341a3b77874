#!/usr/bin/python3
"""Fused scaled_dot_product_attention vs the composite nn.causal_self_attention
used before it (matmul, where, softmax, matmul: the [B, H, T, T] scores, mask
and probabilities are materialised and kept for backward), f32 on the CPU.

Each variant runs in its own nabla process (forward + backward of a causal
attention with B=4, H=8, head dim 64); reported: seconds per step (min over
the steps) and the process's peak resident memory.  Run by bench/run.sh
(NABLA is set) or: NABLA=build/nabla /usr/bin/python3 bench/tensor/bench_attention.py
"""
import os
import subprocess
import sys

NABLA = os.environ.get("NABLA") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "nabla")

PROG = """
seed(0)
B = 4; H = 8; T = {T}; d = 64
q = randn(B, H, T, d, requires_grad=true); k = randn(B, H, T, d, requires_grad=true)
v = randn(B, H, T, d, requires_grad=true); w = randn(B, H, T, d)
fn fused(q, k, v) = scaled_dot_product_attention(q, k, v, causal=true)
fn composite(q, k, v) {{
  att = (q @ transpose(k, -2, -1)) * (1 / sqrt(d))
  att = softmax(where(tril(ones(T, T)) > 0, att, -1e30), axis=-1)
  att @ v
}}
fn loss(q, k, v) = sum({VARIANT}(q, k, v) * w)
step = grad(loss, argnums=[0, 1, 2])
step(q, k, v)
best = 1e9
for i in 0..{N} {{ t0 = clock(); step(q, k, v); best = min(best, clock() - t0) }}
print(best)
"""


def run(variant, T, n):
    src = PROG.format(T=T, VARIANT=variant, N=n)
    p = subprocess.Popen([NABLA, "-e", src], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    out, err = p.stdout.read(), p.stderr.read()
    if status != 0:
        sys.exit(f"bench_attention: {variant} T={T} failed: {err.strip()[-300:]}")
    return float(out.split()[-1]), ru.ru_maxrss / 1024.0   # ru_maxrss is in KiB on Linux


def main():
    print(f"{'T':>5}  {'variant':<10}  {'s/step':>8}  {'peak_MiB':>8}")
    for T, n in ((256, 10), (1024, 3)):
        res = {v: run(v, T, n) for v in ("fused", "composite")}
        for v, (t, mb) in res.items():
            print(f"{T:>5}  {v:<10}  {t:8.4f}  {mb:8.1f}")
        (tf, mf), (tc, mc) = res["fused"], res["composite"]
        print(f"{T:>5}  fused is {tc / tf:.2f}x faster, peak memory {mf:.0f} vs {mc:.0f} MiB")


if __name__ == "__main__":
    main()
