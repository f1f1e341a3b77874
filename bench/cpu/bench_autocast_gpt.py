#!/usr/bin/python3
"""CPU mixed precision that pays (issue 31): bench/tensor/gpt_step's GPT
training step (2 blocks, d 128, batch 32 x 64) in f32 and under bf16
autocast, nabla and torch 1.13 (torch.autocast("cpu", bfloat16)) on the same
machine, same threads.  The sources are gpt_step.nbl / gpt_step.torch.py
with the forward+loss wrapped in the autocast block.  Each variant runs
ROUNDS times alternating; the table shows median seconds per step and the
ratios (bf16/f32 < 1: autocast pays; nabla/torch).  nabla's bf16 matmuls go
through oneDNN (tensor/tonednn.c); NABLA_ONEDNN=0 shows the f32-path cost;
the bf16 elementwise ops, casts and gelu run at vector width
(tensor/tvecmath_half.c).  Results: bench/results/2026-11-29-bf16cpu.md.
    NABLA=build/nabla /usr/bin/python3 bench/cpu/bench_autocast_gpt.py
"""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NABLA = os.environ.get("NABLA") or os.path.join(HERE, "..", "..", "build", "nabla")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
STEPS = 10


def variants():
    nb = open(os.path.join(HERE, "..", "tensor", "gpt_step.nbl")).read().replace("n = 30", f"n = {STEPS}")
    th = open(os.path.join(HERE, "..", "tensor", "gpt_step.torch.py")).read().replace("n = 30", f"n = {STEPS}")
    old = "fn loss_fn(m, x, y) = cross_entropy(reshape(m(x), [B * T, V]), reshape(y, [B * T]))"
    assert old in nb
    nb16 = nb.replace(old, 'fn loss_fn(m, x, y) = autocast("bf16") { cross_entropy(reshape(m(x), [B * T, V]).to("f32"), reshape(y, [B * T])) }')
    old_t = "    loss = F.cross_entropy(model(x).view(B * T, V), y.view(B * T))"
    assert old_t in th
    th16 = th.replace(old_t, '    with torch.autocast("cpu", dtype=torch.bfloat16):\n        loss = F.cross_entropy(model(x).view(B * T, V).float(), y.view(B * T))')
    return {"nabla f32": ("nb", nb), "nabla bf16": ("nb", nb16), "torch f32": ("py", th), "torch bf16": ("py", th16)}


def run(kind, src):
    path = f"/tmp/bench_ac_{os.getpid()}." + ("nbl" if kind == "nb" else "py")
    with open(path, "w") as f:
        f.write(src)
    cmd = [NABLA, path] if kind == "nb" else [sys.executable, "-W", "ignore", path]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    t = float(next(line.split()[1] for line in out.splitlines() if line.startswith("bench_time")))
    os.unlink(path)
    return t / STEPS


def main():
    vs = variants()
    res = {k: [] for k in vs}
    for _ in range(ROUNDS):
        for k, (kind, src) in vs.items():
            res[k].append(run(kind, src))
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"threads: {os.environ.get('OMP_NUM_THREADS') or os.cpu_count()}")
    print("| variant | s/step |")
    print("|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.4f} |")
    print(f"nabla bf16/f32 {med['nabla bf16'] / med['nabla f32']:.2f}; torch bf16/f32 {med['torch bf16'] / med['torch f32']:.2f}; "
          f"nabla/torch bf16 {med['nabla bf16'] / med['torch bf16']:.2f}; nabla/torch f32 {med['nabla f32'] / med['torch f32']:.2f}")


main()
