#!/usr/bin/python3
"""PyTorch eager reference for bench/cuda/gpt2.nbl: the same GPT-2-small-shaped
model (pre-LN blocks with fused qkv, exact gelu, tied embedding), the same
shapes, bf16 autocast and AdamW, the same environment settings and output
lines ("bench: gpt2_step_ms ...").  Attention is F.scaled_dot_product_attention
(is_causal=True), which is what an eager PyTorch user writes today."""
import math
import os
import sys
import time

try:
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F
except ImportError:
    print("SKIP: gpt2_torch: torch is not installed")
    sys.exit(0)


def env_num(name, dflt):
    return int(float(os.environ.get(name, dflt)))


L, C, H = env_num("GPT2_LAYERS", 12), env_num("GPT2_D", 768), env_num("GPT2_HEADS", 12)
T, B, V = env_num("GPT2_T", 1024), env_num("GPT2_B", 8), env_num("GPT2_V", 50304)
steps = env_num("GPT2_STEPS", 10)
dev = os.environ.get("GPT2_DEVICE", "cuda")
amp = os.environ.get("GPT2_AMP", "bf16")
peak = float(os.environ.get("GPT2_PEAK_TFLOPS", 989)) * 1e12
if dev == "cuda" and not torch.cuda.is_available():
    print("SKIP: gpt2_torch: torch sees no CUDA device")
    sys.exit(0)


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):    # torch >= 2.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]                                   # older torch (Debian's): the composite
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return att.softmax(-1) @ v


class Block(tnn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = tnn.LayerNorm(C), tnn.LayerNorm(C)
        self.qkv, self.aproj = tnn.Linear(C, 3 * C), tnn.Linear(C, C)
        self.fc, self.proj = tnn.Linear(C, 4 * C), tnn.Linear(4 * C, C)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        y = attention(q, k, v)
        x = x + self.aproj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(tnn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = tnn.Embedding(V, C), tnn.Embedding(T, C)
        tnn.init.normal_(self.wte.weight, std=0.02)
        tnn.init.normal_(self.wpe.weight, std=0.02)
        self.blocks = tnn.ModuleList(Block() for _ in range(L))
        self.lnf = tnn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(B * T, V).float(), targets.view(B * T))


torch.manual_seed(0)
model = GPT().to(dev)
nparams = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
idx = torch.randint(0, V, (B, T), device=dev)
targets = torch.randint(0, V, (B, T), device=dev)


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


times, first, lv = [], None, None
for s in range(steps + 2):
    sync()
    t0 = time.perf_counter()
    with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=amp != "off"):
        loss = model(idx, targets)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    lv = loss.item()
    dt = time.perf_counter() - t0
    first = lv if first is None else first
    if s >= 2:
        times.append(dt)
times.sort()
med = times[len(times) // 2]
tok = B * T
flops = (6 * nparams + 6 * L * T * C) * tok
print(f"gpt2_torch: layers={L} d={C} heads={H} T={T} B={B} V={V} params={nparams} device={dev} amp={amp} torch={torch.__version__}")
print(f"gpt2_torch: loss first {first}, last {lv}")
print(f"bench: gpt2_step_ms {med * 1000:.2f} ms")
print(f"bench: gpt2_tokens_per_s {tok / med:.0f} tok/s")
print(f"bench: gpt2_mfu {100 * flops / med / peak:.1f} %")
