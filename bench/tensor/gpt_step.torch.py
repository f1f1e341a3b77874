# One training step of the character-level GPT of gpt_step.nbl in torch eager
# (the attention written out, as torch 1.13 has no fused one): forward,
# cross-entropy, backward, clip_grad_norm_(1.0), AdamW.  Threads: as many as
# nabla's OpenMP pool (OMP_NUM_THREADS, else all cores).
import math
import os
import time
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()))
torch.manual_seed(0)
V, T, D, H, B = 90, 64, 128, 4, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.attn_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def attn(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // H))
        att = F.softmax(att.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
        return self.attn_proj((att @ v).transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
x = torch.randint(0, V, (B, T))
y = torch.randint(0, V, (B, T))


def train_step():
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x).view(B * T, V), y.view(B * T))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


n = 30
for i in range(5):
    train_step()
t0 = time.perf_counter()
for i in range(n):
    train_step()
print("bench_time", time.perf_counter() - t0)
print("steps", n)
