#!/usr/bin/python3
"""A GCN layer's message passing on the CPU, nabla vs torch 1.13 (same
threads): N = 20000 nodes, E = 200000 edges, F = 64 f32 features.
  index_add      out = index_add(zeros(N, F), 0, dst, h[src])      (torch.index_add)
  index_add f+b  grad of sum(index_add(..) * w) w.r.t. h
  scatter_add    scatter_add(zeros(N, F), 0, dst expanded [E, F], h[src])
  scatter amax   scatter_reduce(.., "amax", include_self=false)  (GraphSAGE's max aggregation)
Each program reports the fastest of REPS timed repetitions per operation;
the two programs alternate ROUNDS times and the table shows the medians and
nabla/torch (< 1: nabla faster).  Threads: 1 and all cores.
    NABLA=build/nabla /usr/bin/python3 bench/cpu/bench_scatter.py
"""
import os
import statistics
import subprocess
import sys

NABLA = os.environ.get("NABLA") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "nabla")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
REPS = 10
N, E, F = 20000, 200000, 64
OPS = ["index_add", "index_add f+b", "scatter_add", "scatter amax"]

NB = f'''
h = randn({N}, {F}); w = randn({N}, {F})
src = randint(0, {N}, [{E}]); dst = randint(0, {N}, [{E}])
dstx = expand(reshape(dst, [{E}, 1]), [{E}, {F}])
fn best(f) {{ b = 1e9; for i in range({REPS}) {{ t = clock(); f(); b = min(b, clock() - t) }}; b }}
m = take(h, src, 0)
r = {{}}
r["index_add"] = best(fn() {{ index_add(zeros({N}, {F}), 0, dst, m) }})
g = grad(fn(h) {{ sum(index_add(zeros({N}, {F}), 0, dst, take(h, src, 0)) * w) }})
r["index_add f+b"] = best(fn() {{ g(h) }})
r["scatter_add"] = best(fn() {{ scatter_add(zeros({N}, {F}), 0, dstx, m) }})
r["scatter amax"] = best(fn() {{ scatter_reduce(zeros({N}, {F}), 0, dstx, m, "amax", include_self=false) }})
for k in {OPS!r} {{ print(k + "=" + str(r[k])) }}
'''

TORCH = f'''
import time, torch
torch.set_num_threads(int(__import__("os").environ["OMP_NUM_THREADS"]))
N, E, F = {N}, {E}, {F}
h = torch.randn(N, F); w = torch.randn(N, F)
src = torch.randint(0, N, (E,)); dst = torch.randint(0, N, (E,))
dstx = dst.view(E, 1).expand(E, F)
def best(f):
    b = 1e9
    for i in range({REPS}):
        t = time.perf_counter(); f(); b = min(b, time.perf_counter() - t)
    return b
m = h[src]
def fb():
    hh = h.detach().requires_grad_(True)
    (torch.zeros(N, F).index_add(0, dst, hh[src]) * w).sum().backward()
r = {{"index_add": best(lambda: torch.zeros(N, F).index_add(0, dst, m)), "index_add f+b": best(fb),
     "scatter_add": best(lambda: torch.zeros(N, F).scatter_add(0, dstx, m)),
     "scatter amax": best(lambda: torch.zeros(N, F).scatter_reduce(0, dstx, m, "amax", include_self=False))}}
for k in {OPS!r}: print(k + "=" + str(r[k]))
'''


def run(cmd, threads, stdin=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, check=True).stdout
    return {k: float(v) for k, v in (line.split("=") for line in out.splitlines() if "=" in line)}


def main():
    import warnings
    warnings.filterwarnings("ignore")
    path = "/tmp/bench_scatter.nbl"
    with open(path, "w") as f:
        f.write(NB)
    print(f"| ops (N={N}, E={E}, F={F}, f32) | threads | nabla ms | torch ms | nabla/torch |")
    print("|---|---|---|---|---|")
    for threads in sorted({1, os.cpu_count()}):
        nb, th = {k: [] for k in OPS}, {k: [] for k in OPS}
        for _ in range(ROUNDS):
            for k, v in run([NABLA, path], threads).items():
                nb[k].append(v)
            for k, v in run([sys.executable, "-W", "ignore", "-c", TORCH], threads).items():
                th[k].append(v)
        for k in OPS:
            a, b = statistics.median(nb[k]) * 1e3, statistics.median(th[k]) * 1e3
            print(f"| {k} | {threads} | {a:.2f} | {b:.2f} | {a / b:.2f} |", flush=True)


main()
