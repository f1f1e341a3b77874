#!/usr/bin/python3
"""Fusion through autograd on the CPU (issue 28): bench/tensor's char-GPT
step (gpt_step.nbl: 2 blocks, d 128, batch 32 x 64, AdamW, clipping) and MLP
step (mlp_step.nbl: 784-256-10, batch 128, AdamW), f32, with lazy fusion on
(NABLA_FUSE=1: elementwise chains fuse even when they require grad, one
FusedBackward node each, tensor/tfuse_grad.c) and off (NABLA_FUSE=0), same
machine, same threads, alternating, ROUNDS rounds; the table shows the median
seconds per step, the ratio fused/unfused, the chains fused per step
(fuse_stats().forced / steps) and the final loss both ways (it must agree:
the fused gradients are the unfused formulas).
    NABLA=build/nabla /usr/bin/python3 bench/cpu/bench_fuse_grad.py
"""
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
NABLA = os.environ.get("NABLA") or os.path.join(HERE, "..", "..", "build", "nabla")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
TAIL = '\nprint("fuse_forced", fuse_stats().forced)\nprint("loss", {loss})\n'
MODELS = {
    "char-GPT step": ("gpt_step.nbl", ("n = 30", "n = 10"), "step(model, x, y)[0].item()"),
    "MLP step": ("mlp_step.nbl", ("n = 200", "n = 60"), "step(p, x, y)[0].item()"),
}


def run(src, fuse):
    path = f"/tmp/bench_fuse_grad_{os.getpid()}.nbl"
    with open(path, "w") as f:
        f.write(src)
    env = dict(os.environ, NABLA_FUSE=fuse)
    out = subprocess.run([NABLA, path], capture_output=True, text=True, check=True, env=env).stdout
    os.unlink(path)
    kv = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            kv[parts[0]] = parts[1]
    return float(kv["bench_time"]) / float(kv["steps"]), int(kv["fuse_forced"]), kv["loss"], int(kv["steps"])


def main():
    print(f"| model | unfused s/step | fused s/step | fused/unfused | chains fused per step | loss unfused | loss fused |")
    print("|---|---|---|---|---|---|---|")
    for name, (file, (old, new), loss) in MODELS.items():
        src = open(os.path.join(HERE, "..", "tensor", file)).read()
        assert old in src
        src = src.replace(old, new) + TAIL.format(loss=loss)
        times = {"0": [], "1": []}
        info = {}
        for _ in range(ROUNDS):
            for fuse in ("0", "1"):
                t, forced, l, steps = run(src, fuse)
                times[fuse].append(t)
                info[fuse] = (forced, l, steps)
        t0, t1 = statistics.median(times["0"]), statistics.median(times["1"])
        warm = 5 if "gpt" in file else 10   # warm-up steps before the timed ones
        per = info["1"][0] / (info["1"][2] + warm + 1)
        print(f"| {name} | {t0:.4f} | {t1:.4f} | {t1 / t0:.2f} | {per:.1f} | {info['0'][1]} | {info['1'][1]} |", flush=True)


if __name__ == "__main__":
    main()
