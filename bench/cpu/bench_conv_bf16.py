#!/usr/bin/python3
"""bf16 convolutions on the CPU, forward + backward (x, w, b bf16; grads
bf16), nabla's routes against each other and torch 1.13's bf16 CPU conv:
  onednn     oneDNN's bf16 primitives (NABLA_ONEDNN_CONV_BF16=1)
  emulated   the same with ONEDNN_MAX_CPU_ISA=AVX512_CORE: oneDNN without
             the avx512_bf16 instructions (a CPU without them)
  f32 route  widened to f32, oneDNN's f32 primitives, rounded back (=0)
  f32        the same convolution in f32 (reference)
Cases: conv2d x [32, 64, 28, 28] w [64, 64, 3, 3] padding 1; bench_models29's
conv1d (x [32, 64, 256], w [64, 64, 5], padding 2) and convT2d (x [16, 32,
16, 16], w [32, 16, 4, 4], stride 2, padding 1; torch 1.13 refuses bf16
conv_transpose on the CPU).  Best of REPS per process, median of ROUNDS.
    NABLA=build/nabla /usr/bin/python3 bench/cpu/bench_conv_bf16.py
"""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NABLA = os.environ.get("NABLA") or os.path.join(HERE, "..", "..", "build", "nabla")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
REPS = int(os.environ.get("BENCH_REPS") or 5)
THREADS = os.environ.get("OMP_NUM_THREADS") or "1"
CASES = {
    "conv2d": ((32, 64, 28, 28), (64, 64, 3, 3), (64,), "conv2d(x, w, b, padding=1)", "F.conv2d(x, w, b, padding=1)"),
    "conv1d": ((32, 64, 256), (64, 64, 5), (64,), "conv1d(x, w, b, 1, 2, 1, 1)", "F.conv1d(x, w, b, 1, 2)"),
    "convT2d": ((16, 32, 16, 16), (32, 16, 4, 4), (16,), "conv_transpose2d(x, w, b, 2, 1, 0, 1, 1)", None),
}
NB = '''
fn best(f) { f(); b = 1e9; for i in range(REPS) { t = clock(); f(); b = min(b, clock() - t) }; b }
x = randn(XS).to(DT); w = (randn(WS) * 0.05).to(DT); b = randn(BS).to(DT)
y0 = CALL; go = randn_like(y0.to("f32")).to(DT)
g = grad(fn(x, w, b) sum(CALL * go), argnums=[0, 1, 2])
print("t=" + str(best(fn() { g(x, w, b) })))
'''
TORCH = '''
import time, torch, torch.nn.functional as F
torch.set_num_threads(THREADS)
x, w, b = (torch.randn(*s).bfloat16().requires_grad_() for s in ([XS], [WS], [BS]))
go = torch.randn_like(CALL.float()).bfloat16()
def run():
    (CALL * go).sum().backward()
    for t in (x, w, b): t.grad = None
run(); best = 1e9
for i in range(REPS):
    t = time.perf_counter(); run(); best = min(best, time.perf_counter() - t)
print("t=" + str(best))
'''


def sub(src, case, dt):
    xs, ws, bs, call, tcall = CASES[case]
    s = src.replace("XS", ", ".join(map(str, xs))).replace("WS", ", ".join(map(str, ws))).replace("BS", ", ".join(map(str, bs)))
    return s.replace("CALL", call if dt else tcall).replace("DT", f'"{dt}"').replace("REPS", str(REPS)).replace("THREADS", THREADS)


def run(cmd, src, env):
    path = f"/tmp/bench_conv_bf16_{os.getpid()}.src"
    with open(path, "w") as f:
        f.write(src)
    e = dict(os.environ, OMP_NUM_THREADS=THREADS, NABLA_STDLIB=os.path.join(HERE, "..", "..", "stdlib"), **env)
    r = subprocess.run(cmd + [path], capture_output=True, text=True, env=e)
    os.unlink(path)
    if r.returncode:
        sys.exit(f"failed: {r.stderr[-2000:]}")
    return float(r.stdout.split("t=")[-1])


def main():
    routes = [("onednn", "bf16", {"NABLA_ONEDNN_CONV_BF16": "1"}),
              ("emulated", "bf16", {"NABLA_ONEDNN_CONV_BF16": "1", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}),
              ("f32 route", "bf16", {"NABLA_ONEDNN_CONV_BF16": "0"}), ("f32", "f32", {})]
    print(f"threads {THREADS}, load average {os.getloadavg()[0]:.1f}")
    print("| case | " + " | ".join(r[0] + " ms" for r in routes) + " | torch bf16 ms | onednn/torch |")
    print("|---|" + "---|" * (len(routes) + 2))
    for case in CASES:
        t = {r[0]: [] for r in routes}
        th = []
        for _ in range(ROUNDS):
            for name, dt, env in routes:
                t[name].append(run([NABLA], sub(NB, case, dt), env))
            if CASES[case][4]:
                th.append(run([sys.executable], sub(TORCH, case, None), {}))
        med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
        tm = statistics.median(th) * 1e3 if th else None
        print(f"| {case} | " + " | ".join(f"{med[r[0]]:.1f}" for r in routes) +
              (f" | {tm:.1f} | {med['onednn'] / tm:.2f} |" if tm else " | (refused) | — |"), flush=True)


main()
