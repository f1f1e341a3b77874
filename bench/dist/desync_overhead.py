#!/usr/bin/python3
"""bench/dist/desync_overhead.py — what the desync check (dist/ddesync.c) costs:
the 4 KB all_reduce latency of bench/dist/allreduce_4k.nbl (2 local workers,
mean of 200 calls) with the check on (the default) and off (NABLA_DESYNC=0),
over shared memory and over the TCP ring (NABLA_SHM=0).  Runs alternate
on/off so the machine's noise hits both alike; the median of REPS runs.

Run: /usr/bin/python3 bench/dist/desync_overhead.py [REPS]   (NABLA=build/nabla)
"""
import os, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build/nabla")
BENCH = os.path.join(ROOT, "bench/dist/allreduce_4k.nbl")
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 7


def once(env):
    e = dict(os.environ, **env)
    p = subprocess.run([NABLA, BENCH], capture_output=True, text=True, timeout=300, env=e)
    for l in p.stdout.splitlines():
        if l.startswith("bench_time"):
            return float(l.split()[1]) * 1e6
    raise SystemExit(f"no bench_time: {p.stdout[-500:]} {p.stderr[-1000:]}")


for shm in ("1", "0"):
    t = {"on": [], "off": []}
    for _ in range(REPS):
        t["on"].append(once({"NABLA_SHM": shm, "NABLA_DESYNC": "1"}))
        t["off"].append(once({"NABLA_SHM": shm, "NABLA_DESYNC": "0"}))
    on, off = statistics.median(t["on"]), statistics.median(t["off"])
    print(f"{'shm' if shm == '1' else 'tcp'}: 4 KB all_reduce latency check on {on:.1f} us, off {off:.1f} us, on/off {on / off:.2f}x "
          f"(runs on: {' '.join(f'{v:.0f}' for v in t['on'])}; off: {' '.join(f'{v:.0f}' for v in t['off'])})", flush=True)
