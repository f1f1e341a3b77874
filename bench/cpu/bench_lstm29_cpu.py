#!/usr/bin/python3
"""nn.lstm(256, 256, num_layers=2) on x [64, 32, 256], sum of the output,
forward + backward (bench_models29's `lstm` case), timed in CPU seconds per
step instead of wall time: on the shared build VM other processes take the
cores and wall times swing 2-5x, while the CPU time a step uses moves far
less.  Each program runs 3 warm-up steps and then N steps; a step's CPU time
is (CPU(N=NHI) - CPU(N=NLO)) / (NHI - NLO) of the whole process (user + sys
from wait4), so start-up and imports cancel.  At 1 thread only: with more
threads, CPU time counts spinning workers, not speed.
    NABLA=build/nabla [NABLA_BEFORE=<other build>] /usr/bin/python3 bench/cpu/bench_lstm29_cpu.py
"""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NABLA = os.environ.get("NABLA") or os.path.join(HERE, "..", "..", "build", "nabla")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
NLO, NHI = 3, 15

NB = r'''
import nn
seed(1)
m = nn.lstm(256, 256, num_layers=2); x = randn(64, 32, 256)
step = value_and_grad(fn(m, x) sum(m(x)[0]))
n = int(getenv("STEPS"))
for i in 0..(3 + n) { step(m, x)[0].item() }
'''
TORCH = r'''
import os, torch
torch.set_num_threads(1)
torch.manual_seed(1)
m = torch.nn.LSTM(256, 256, num_layers=2); x = torch.randn(64, 32, 256)
for i in range(3 + int(os.environ["STEPS"])):
    m.zero_grad(); loss = m(x)[0].sum(); loss.backward(); loss.item()
'''


def cpu_seconds(cmd, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1", STEPS=str(steps), NABLA_STDLIB=os.path.join(HERE, "..", "..", "stdlib"))
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"{cmd[0]} failed ({status})")
    return ru.ru_utime + ru.ru_stime


def per_step(cmd):
    return (cpu_seconds(cmd, NHI) - cpu_seconds(cmd, NLO)) / (NHI - NLO) * 1e3


def main():
    path = f"/tmp/bench_lstm29_{os.getpid()}.nbl"
    with open(path, "w") as f:
        f.write(NB)
    progs = [("nabla", [NABLA, path])]
    if os.environ.get("NABLA_BEFORE"):
        progs.append(("nabla before", [os.environ["NABLA_BEFORE"], path]))
    progs.append(("torch", [sys.executable, "-W", "ignore", "-c", TORCH]))
    got = {name: [] for name, _ in progs}
    loads = []
    for _ in range(ROUNDS):
        loads.append(os.getloadavg()[0])
        for name, cmd in progs:
            got[name].append(per_step(cmd))
    os.unlink(path)
    t = statistics.median(got["torch"])
    print(f"load average {min(loads):.1f}-{max(loads):.1f}; CPU ms per step, median of {ROUNDS} (each round's values)")
    print("| program | CPU ms per step | rounds | / torch |")
    print("|---|---|---|---|")
    for name, _ in progs:
        v = statistics.median(got[name])
        print(f"| {name} | {v:.1f} | {' '.join(f'{x:.1f}' for x in got[name])} | {v / t:.2f} |")


if __name__ == "__main__":
    main()
