#!/usr/bin/python3
"""The CPU allocator's big-block cache (tensor/tcpualloc.c), before and after:
  gn_runs    bench_models29's group_norm case (x [32, 64, 32, 32], forward +
             backward, one warm-up then best of 5) in RUNS fresh processes,
             and torch's in as many: the spread of nabla/torch across runs
             (the heap fragmentation made it swing 0.6x-3.4x)
  elem       `exp(x) * 2 + x` on 4096x4096 f32 (NABLA_FUSE=0: three 64 MiB
             buffers per evaluation), best of 10, and NumPy's
  steps      the group_norm step 40 times in one process: the first 8 steps'
             time, the median of the rest, the process's user and system
             CPU seconds (page clearing is system time; CPU time is steadier
             than wall time on a loaded machine), and peak RSS after 10 and
             after 40 steps (flat when the freed blocks are reused)
             and the same for bench_models29's resnet, gcn, conv1d and lstm
Each binary runs alternately; threads from OMP_NUM_THREADS (default 1).
    NABLA=build/nabla NABLA_BEFORE=/path/to/old/nabla /usr/bin/python3 bench/cpu/bench_alloc29.py [gn_runs elem steps]
"""
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NABLA = os.environ.get("NABLA") or os.path.join(HERE, "..", "..", "build", "nabla")
BEFORE = os.environ.get("NABLA_BEFORE")
RUNS = int(os.environ.get("BENCH_RUNS") or 5)
THREADS = os.environ.get("OMP_NUM_THREADS") or "1"
ENV = dict(os.environ, OMP_NUM_THREADS=THREADS, NABLA_STDLIB=os.path.join(HERE, "..", "..", "stdlib"))

GN = '''x = randn(32, 64, 32, 32); w = randn(64); b = randn(64); go = randn(32, 64, 32, 32)
g = grad(fn(x, w, b) sum(group_norm(x, 8, w, b, 1e-5) * go))
'''
GN_BEST = GN + '''g(x, w, b); best = 1e9
for i in range(5) { t = clock(); g(x, w, b); best = min(best, clock() - t) }
print("best=" + str(best))
'''
STEPS = '''ts = []
for i in range(NSTEPS) { t = clock(); STEP; push(ts, clock() - t) }
for t in ts { print("step=" + str(t)) }
'''
sys.path.insert(0, HERE)
from bench_models29 import NB  # noqa: E402


def model_steps(case):
    """bench_models29's program for one case with its timed call turned into STEPS_HERE (answers the source and the call)"""
    m = re.search(r'r\["' + case + r'"\] = best\(fn\(\) \{ (.*) \}\)\n', NB)
    return f'REPS = 1\nWANT = {{}}\nWANT["{case}"] = true\n' + NB.replace(m.group(0), "STEPS_HERE\n"), m.group(1)


ELEM = '''x = randn(4096, 4096)
fn f() { y = exp(x) * 2 + x; y }
f(); best = 1e9
for i in range(10) { t = clock(); y = f(); best = min(best, clock() - t) }
print("best=" + str(best))
'''
TORCH_GN = '''import time, torch, torch.nn.functional as F
torch.set_num_threads(int(THREADS))
ts = [torch.randn(32, 64, 32, 32).requires_grad_(), torch.randn(64).requires_grad_(), torch.randn(64).requires_grad_()]
go = torch.randn(32, 64, 32, 32)
def run():
    (F.group_norm(*ts[:1], 8, ts[1], ts[2], 1e-5) * go).sum().backward()
    for t in ts: t.grad = None
run(); best = 1e9
for i in range(5):
    t = time.perf_counter(); run(); best = min(best, time.perf_counter() - t)
print("best=" + str(best))
'''


def run(cmd, src, env=None):
    return run_rss(cmd, src, env)[0]


PARTS = sys.argv[1:] or ["gn_runs", "elem", "steps"]


def run_rss(cmd, src, env=None):
    """run() and the child's peak RSS (MB), from wait4"""
    path = f"/tmp/bench_alloc29_{os.getpid()}.src"
    with open(path, "w") as f:
        f.write(src)
    p = subprocess.Popen(cmd + [path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(ENV, **(env or {})))
    out, err = p.stdout.read(), p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    os.unlink(path)
    if status:
        sys.exit(f"{cmd[0]} failed: {err[-2000:]}")
    kv = {}
    for line in out.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            kv.setdefault(k, []).append(float(v))
    return kv, ru.ru_maxrss / 1024, ru.ru_utime, ru.ru_stime


def main():
    bins = [("before", BEFORE)] if BEFORE else []
    bins.append(("after", NABLA))
    print(f"threads {THREADS}, load average {os.getloadavg()[0]:.1f} at the start")
    if "gn_runs" in PARTS:
        gn_runs(bins)
    if "elem" in PARTS:
        elem(bins)
    if "steps" in PARTS:
        steps(bins)


def gn_runs(bins):
    gn = {k: [] for k, _ in bins}
    th = []
    for _ in range(RUNS):
        for k, b in bins:
            gn[k].append(run([b], GN_BEST)["best"][0])
        th.append(run([sys.executable], f"THREADS = {THREADS}\n" + TORCH_GN)["best"][0])
    print("\n| build | group_norm f+b ms per run (best of 5 each) | torch ms per run | nabla/torch per run | spread (max/min ratio) |")
    print("|---|---|---|---|---|")
    for k, _ in bins:
        ratios = [a / b for a, b in zip(gn[k], th)]
        print(f"| {k} | {' '.join(f'{v * 1e3:.1f}' for v in gn[k])} | {' '.join(f'{v * 1e3:.1f}' for v in th)} | "
              f"{' '.join(f'{r:.2f}' for r in ratios)} | {max(ratios) / min(ratios):.1f} |", flush=True)


def elem(bins):
    print("\n| build | exp(x) * 2 + x, 4096x4096 f32, ms (best of 10) | NumPy ms |")
    print("|---|---|---|")
    np_src = ("import time, numpy as np\nx = np.random.standard_normal((4096, 4096)).astype(np.float32)\n"
              "y = np.exp(x) * 2 + x; best = 1e9\nfor i in range(10):\n    t = time.perf_counter(); y = np.exp(x) * 2 + x; "
              "best = min(best, time.perf_counter() - t)\nprint('best=' + str(best))\n")
    npt = run([sys.executable], np_src)["best"][0]
    for k, b in bins:
        e = run([b], ELEM, {"NABLA_FUSE": "0"})["best"][0]
        print(f"| {k} | {e * 1e3:.1f} | {npt * 1e3:.1f} |", flush=True)


def steps(bins):
    print("\n| build | case | first 8 steps ms | median step ms after | user + sys CPU s, 40 steps | peak RSS MB after 10 steps | after 40 |")
    print("|---|---|---|---|---|---|---|")
    cases = [("group_norm f+b", GN + "STEPS_HERE", "g(x, w, b)")] + [(k,) + model_steps(k) for k in ("resnet", "gcn", "conv1d", "lstm")]
    for case, setup, step in cases:
        for k, b in bins:
            prog = lambda n: setup.replace("STEPS_HERE", STEPS.replace("NSTEPS", str(n)).replace("STEP;", step + ";"))
            _, rss10, _, _ = run_rss([b], prog(10))
            kv40, rss40, ut, st = run_rss([b], prog(40))
            s = kv40["step"]
            print(f"| {k} | {case} | {sum(s[:8]) * 1e3:.0f} | {statistics.median(s[8:]) * 1e3:.1f} | {ut:.1f} + {st:.1f} | {rss10:.0f} | {rss40:.0f} |",
                  flush=True)


main()
