#!/usr/bin/python3
"""Fusion through autograd on the CPU (issue 28): bench/tensor's char-GPT
step (gpt_step.nbl: 2 blocks, d 128, batch 32 x 64, AdamW, clipping) and MLP
step (mlp_step.nbl: 784-256-10, batch 128, AdamW), f32, with lazy fusion on
(NABLA_FUSE=1: elementwise chains fuse even when they require grad, one
FusedBackward node each, tensor/tfuse_grad.c) and off (NABLA_FUSE=0), same
machine, same threads, alternating, ROUNDS rounds; the table shows the median
seconds per step, the ratio fused/unfused, the chains fused per step
(fuse_stats().forced / steps) and the final loss both ways (it must agree:
the fused gradients are the unfused formulas).  Each runs three ways:
unfused (NABLA_FUSE=0), fused with the backward op by op (NABLA_FUSE_BWD=0,
the per-op path of tensor/tfuse_grad.c) and fused with the backward in one
pass (tensor/tfuse_bwd.c).  Then a micro-benchmark: value_and_grad of one
12-op chain on [1000, 1000] f32 (CHAIN), the same three ways and torch's
eager autograd (same threads), median of ITERS steps per process.
    NABLA=build/nabla /usr/bin/python3 bench/cpu/bench_fuse_grad.py
With the argument `rows`: chains with broadcast row / column operands, fused
against unfused in CPU time (see rows() below; issue 28's fuserow results).
"""
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NABLA = os.environ.get("NABLA") or os.path.join(HERE, "..", "..", "build", "nabla")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
TAIL = ('\nprint("fuse_forced", fuse_stats().forced)\nprint("bwd_fused", fuse_stats().backward_fused)\n'
        'print("loss", {loss})\n')
MODELS = {
    "char-GPT step": ("gpt_step.nbl", ("n = 30", "n = 10"), "step(model, x, y)[0].item()"),
    "MLP step": ("mlp_step.nbl", ("n = 200", "n = 60"), "step(p, x, y)[0].item()"),
}


# the three ways: NABLA_FUSE, NABLA_FUSE_BWD
MODES = {"unfused": ("0", "1"), "per-op bwd": ("1", "0"), "one-pass bwd": ("1", "1")}
ITERS = 7
CHAIN = "sum(tanh(x * w + 1) * 3 - x / (abs(w) + 1) + sigmoid(x * 0.5) * x)"
CHAIN_NB = f"""x = randn([1000, 1000], requires_grad=true)
w = randn([1000], requires_grad=true)
step = value_and_grad(fn(x, w) {CHAIN}, [0, 1])
ts = []
for i in range({ITERS} + 2) {{
  t0 = clock()
  vg = step(x, w)
  vg[0].item()
  vg[1][0][0, 0].item()   # (the gradients may be lazy: read them, or they are never computed)
  vg[1][1][0].item()
  if i >= 2 {{ push(ts, clock() - t0) }}
}}
print("bench_time", sorted(ts)[{ITERS} // 2])
print("steps", 1)
"""


def torch_chain():
    import torch
    x = torch.randn(1000, 1000, requires_grad=True)
    w = torch.randn(1000, requires_grad=True)
    ts = []
    for i in range(ITERS + 2):
        t0 = time.perf_counter()
        loss = (torch.tanh(x * w + 1) * 3 - x / (w.abs() + 1) + torch.sigmoid(x * 0.5) * x).sum()
        gx, gw = torch.autograd.grad(loss, [x, w])
        if i >= 2:
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def run(src, fuse, bwd="1"):
    path = f"/tmp/bench_fuse_grad_{os.getpid()}.nbl"
    with open(path, "w") as f:
        f.write(src)
    env = dict(os.environ, NABLA_FUSE=fuse, NABLA_FUSE_BWD=bwd)
    out = subprocess.run([NABLA, path], capture_output=True, text=True, check=True, env=env).stdout
    os.unlink(path)
    kv = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            kv[parts[0]] = parts[1]
    return (float(kv["bench_time"]) / float(kv["steps"]), int(kv.get("fuse_forced", 0)), kv.get("loss", ""), int(kv["steps"]),
            kv.get("bwd_fused", "-"))


def main():
    print("| model | unfused s/step | fused, per-op bwd | fused, one-pass bwd | per-op/unfused | one-pass/unfused | "
          "chains fused per step | one-pass backwards | loss unfused | loss one-pass |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, (file, (old, new), loss) in MODELS.items():
        src = open(os.path.join(HERE, "..", "tensor", file)).read()
        assert old in src
        src = src.replace(old, new) + TAIL.format(loss=loss)
        times = {m: [] for m in MODES}
        info = {}
        for _ in range(ROUNDS):
            for m, (fuse, bwd) in MODES.items():
                t, forced, l, steps, bf = run(src, fuse, bwd)
                times[m].append(t)
                info[m] = (forced, l, steps, bf)
        t0, t1, t2 = (statistics.median(times[m]) for m in MODES)
        warm = 5 if "gpt" in file else 10   # warm-up steps before the timed ones
        per = info["one-pass bwd"][0] / (info["one-pass bwd"][2] + warm + 1)
        print(f"| {name} | {t0:.4f} | {t1:.4f} | {t2:.4f} | {t1 / t0:.2f} | {t2 / t0:.2f} | {per:.1f} | "
              f"{info['one-pass bwd'][3]} | {info['unfused'][1]} | {info['one-pass bwd'][1]} |", flush=True)
    times = {m: [] for m in MODES}
    tt = []
    for _ in range(ROUNDS):
        for m, (fuse, bwd) in MODES.items():
            times[m].append(run(CHAIN_NB, fuse, bwd)[0])
        tt.append(torch_chain())
    med = {m: statistics.median(v) for m, v in times.items()}
    tm = statistics.median(tt)
    print(f"\nvalue_and_grad of `{CHAIN}`, [1000, 1000] f32 (s/step, median of {ITERS} steps, of {ROUNDS} rounds):\n")
    print("| way | s/step | / unfused | / torch |")
    print("|---|---|---|---|")
    for m, v in med.items():
        print(f"| nabla {m} | {v:.4f} | {v / med['unfused']:.2f} | {v / tm:.2f} |")
    print(f"| torch 1.13 eager | {tm:.4f} | {tm / med['unfused']:.2f} | 1.00 |", flush=True)


# Chains with broadcast row / column operands (issue 28, tensor/tfuse.c's
# row-aligned tiles): forward alone and value_and_grad, fused against
# unfused, at 1 and 2 threads, in CPU time: perf stat's task-clock of a
# process running ROW_WARM + ROW_ITERS steps less that of one running
# ROW_WARM steps (the first steps fill the allocator's block cache and fault
# their pages in: steady state is what is compared), which a loaded machine
# disturbs far less than wall time.
#     NABLA=build/nabla /usr/bin/python3 bench/cpu/bench_fuse_grad.py rows
ROW_ITERS = 100
ROW_WARM = 10
ROW_CHAINS = {
    "issue chain, w [1000]": ("x = randn([1000, 1000])\nw = randn([1000])",
                              "sum(tanh(x * w + 1) * 3 - x / (abs(w) + 1) + sigmoid(x * 0.5) * x)", "x, w"),
    "bias + gelu, b [1000]": ("x = randn([1000, 1000])\nb = randn([1000])", "sum(gelu(x + b) * 1.5 - x)", "x, b"),
    "bias + tanh, b [4096]": ("x = randn([256, 4096])\nb = randn([4096])", "sum(tanh(x + b) * x)", "x, b"),
    "layernorm affine, m r [1000, 1], g b [1000]": (
        "x = randn([1000, 1000])\nm = randn([1000, 1])\nr = randn([1000, 1])\ng = randn([1000])\nb = randn([1000])",
        "sum((x - m) * r * g + b)", "x, m, r, g, b"),
}


def row_src(setup, expr, args, grad, iters):
    names = args.replace(" ", "").split(",")
    body = (f"vg = step({args})\nvg[0].item()\n" + "".join(f"vg[1][{i}].sum().item()\n" for i in range(len(names)))
            if grad else f"({expr}).item()\n")
    pre = f"step = value_and_grad(fn({args}) {expr}, {list(range(len(names)))})\n" if grad else ""
    return f"{setup}\n{pre}for i in range({iters}) {{\n{body}}}\n"


def task_clock_ms(src, fuse, threads):
    path = f"/tmp/bench_fuse_rows_{os.getpid()}.nbl"
    with open(path, "w") as f:
        f.write(src)
    env = dict(os.environ, NABLA_FUSE=fuse, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    r = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock", NABLA, path], capture_output=True, text=True, env=env)
    os.unlink(path)
    if r.returncode:
        raise SystemExit(f"nabla failed: {r.stderr[-600:]}")
    for line in r.stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2] == "task-clock":
            return float(parts[0])
    raise SystemExit(f"no task-clock in perf's output: {r.stderr[-300:]}")


def rows():
    print(f"CPU ms per step (task-clock, median of {ROUNDS} alternating rounds: a process of {ROW_WARM} + {ROW_ITERS} "
          f"steps less one of {ROW_WARM}, divided by {ROW_ITERS}):\n")
    print("| chain | pass | threads | unfused ms | fused ms | fused / unfused |")
    print("|---|---|---|---|---|---|")
    for name, (setup, expr, args) in ROW_CHAINS.items():
        for grad in (False, True):
            for threads in (1, 2):
                per = {}
                for fuse in ("0", "1"):
                    per[fuse] = []
                for _ in range(ROUNDS):
                    for fuse in ("0", "1"):
                        base = task_clock_ms(row_src(setup, expr, args, grad, ROW_WARM), fuse, threads)
                        full = task_clock_ms(row_src(setup, expr, args, grad, ROW_WARM + ROW_ITERS), fuse, threads)
                        per[fuse].append((full - base) / ROW_ITERS)
                u, f = statistics.median(per["0"]), statistics.median(per["1"])
                print(f"| {name} | {'fwd+bwd' if grad else 'fwd'} | {threads} | {u:.2f} | {f:.2f} | {f / u:.2f} |", flush=True)


if __name__ == "__main__":
    import sys
    rows() if sys.argv[1:] == ["rows"] else main()
