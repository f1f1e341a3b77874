#!/usr/bin/python3
"""compile_steps.py — issue 28's GPU benchmark, from ONE run: a training step
(forward, backward, AdamW) of a d=256 4-layer transformer (T=128, B=8,
V=512, bf16 autocast), a 3-layer MLP (784-512-512-10, batch 128, f32) and
GPT-2 small (12 layers, d=768, T=1024, B=4, V=50304, bf16), each
  nabla eager | nabla compile(step) (one CUDA graph per step: compile.nbl)
  torch eager | torch.compile(model, mode="reduce-overhead") (CUDA graphs of
  the forward and backward; AdamW fused, outside the graph)
Median step times after warm-up; the lines "bench: ..." and a markdown table
(the ratios the issue asks for: compiled/eager <= 0.5 for the small models,
<= 0.9 for GPT-2 small).  Usage (on the GPU machine, from the repo root):
    /usr/bin/python3 bench/cuda/compile_steps.py [--nabla build/nabla] [--steps 30]
        [--models gpt_d256_l4,mlp3,gpt2_small] [--out FILE.md]
A timing, never a test; torch missing or without CUDA: its columns say so."""
import argparse
import math
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {  # V, T, C, L, H, B (transformers)
    "gpt_d256_l4": (512, 128, 256, 4, 4, 8),
    "gpt2_small": (50304, 1024, 768, 12, 12, 4),
}


def nabla_times(nabla, models, steps, timeout):
    env = dict(os.environ, COMPILE_MODELS=",".join(models), COMPILE_STEPS=str(steps), COMPILE_DEVICE="cuda",
               NABLA_STDLIB=os.path.join(ROOT, "stdlib"))
    try:
        p = subprocess.run([nabla, os.path.join(ROOT, "bench", "cuda", "compile.nbl")], capture_output=True, text=True,
                           env=env, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {}, "timeout"
    sys.stdout.write(p.stdout)
    res = {}
    for m in re.finditer(r"bench: compile_(\w+?)_(eager|compiled)_ms ([\d.]+) ms", p.stdout):
        res[(m.group(1), m.group(2))] = float(m.group(3))
    return res, "" if p.returncode == 0 else p.stderr[-600:]


def torch_times(models, steps):
    try:
        import torch
        import torch.nn as tnn
        import torch.nn.functional as F
    except ImportError as e:
        return {}, f"no torch: {e}"
    if not torch.cuda.is_available():
        return {}, "torch has no CUDA"

    class Block(tnn.Module):
        def __init__(self, C, H):
            super().__init__()
            self.C, self.H = C, H
            self.ln1, self.ln2 = tnn.LayerNorm(C), tnn.LayerNorm(C)
            self.qkv, self.aproj = tnn.Linear(C, 3 * C), tnn.Linear(C, C)
            self.fc, self.proj = tnn.Linear(C, 4 * C), tnn.Linear(4 * C, C)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
            q, k, v = (z.view(b, t, self.H, c // self.H).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.aproj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class GPT(tnn.Module):
        def __init__(self, V, T, C, L, H):
            super().__init__()
            self.wte, self.wpe = tnn.Embedding(V, C), tnn.Embedding(T, C)
            self.blocks = tnn.ModuleList(Block(C, H) for _ in range(L))
            self.lnf = tnn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.lnf(x) @ self.wte.weight.T
            return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    class MLP(tnn.Module):
        def __init__(self):
            super().__init__()
            self.net = tnn.Sequential(tnn.Linear(784, 512), tnn.ReLU(), tnn.Linear(512, 512), tnn.ReLU(), tnn.Linear(512, 10))

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    res, notes = {}, []
    for name in models:
        for mode in ("eager", "compiled"):
            torch.manual_seed(0)
            if name == "mlp3":
                model, amp = MLP().cuda(), False
                batch = (torch.randn(128, 784, device="cuda"), torch.randint(0, 10, (128,), device="cuda"))
            else:
                V, T, C, L, H, B = SHAPES[name]
                model, amp = GPT(V, T, C, L, H).cuda(), True
                batch = (torch.randint(0, V, (B, T), device="cuda"), torch.randint(0, V, (B, T), device="cuda"))
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
            fwd = model
            if mode == "compiled":
                try:
                    fwd = torch.compile(model, mode="reduce-overhead")
                except Exception as e:  # noqa: BLE001 (an old torch: say so)
                    notes.append(f"torch.compile unavailable: {e}")
                    continue

            def step():
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                    loss = fwd(*batch)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return loss
            try:
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                ts = []
                for _ in range(steps):
                    t0 = time.perf_counter()
                    step()
                    torch.cuda.synchronize()
                    ts.append(time.perf_counter() - t0)
                ts.sort()
                res[(name, mode)] = ts[len(ts) // 2] * 1000
                print(f"bench: torch_{name}_{mode}_ms {res[(name, mode)]:.3f} ms", flush=True)
            except Exception as e:  # noqa: BLE001
                notes.append(f"torch {name} {mode}: {type(e).__name__}: {str(e)[:200]}")
            del model, opt, fwd
            torch.cuda.empty_cache()
    return res, "; ".join(notes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nabla", default=os.environ.get("NABLA", os.path.join(ROOT, "build", "nabla")))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--models", default="gpt_d256_l4,mlp3,gpt2_small")
    ap.add_argument("--timeout", type=int, default=400)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    models = a.models.split(",")
    nb, nb_err = nabla_times(a.nabla, models, a.steps, a.timeout)
    th, th_err = torch_times(models, a.steps)

    def cell(d, k):
        return f"{d[k]:.3f}" if k in d else "—"

    def ratio(d, name):
        return f"{d[(name, 'compiled')] / d[(name, 'eager')]:.3f}" if (name, "compiled") in d and (name, "eager") in d else "—"
    lines = ["| model | nabla eager ms | nabla compiled ms | ratio | torch eager ms | torch.compile (reduce-overhead) ms | ratio |",
             "|---|---|---|---|---|---|---|"]
    for name in models:
        lines.append(f"| {name} | {cell(nb, (name, 'eager'))} | {cell(nb, (name, 'compiled'))} | {ratio(nb, name)} | "
                     f"{cell(th, (name, 'eager'))} | {cell(th, (name, 'compiled'))} | {ratio(th, name)} |")
    if nb_err:
        lines.append(f"\nnabla: {nb_err}")
    if th_err:
        lines.append(f"\ntorch: {th_err}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(f"# compile steps ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\n{text}\n")
    return 0 if nb and not math.isnan(sum(nb.values())) else 1


if __name__ == "__main__":
    sys.exit(main())
