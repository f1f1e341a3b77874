#!/usr/bin/python3
"""bench/dist/latency.py — small-message all_reduce latency (4 KB, 2 local
workers, bench/dist/latency_4k.nbl) idle and under load, shared memory vs the
TCP ring (NABLA_SHM=0), with and without the desync check (NABLA_DESYNC=0).

"Under load" starts one busy-loop process per core (os.cpu_count()) for the
run, at the workers' priority, as a busy host would.  Runs of the variants
alternate so the machine's noise hits them alike; each line gives the median
over REPS runs of each run's median block (50 calls), and the best and the
90th-percentile blocks seen.

Run: /usr/bin/python3 bench/dist/latency.py [REPS]   (NABLA=build/nabla;
NABLA_BASE=other/nabla also runs every variant with that binary, alternating,
e.g. a build from before a change)
"""
import os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build/nabla")
BENCH = os.path.join(ROOT, "bench/dist/latency_4k.nbl")
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


BINS = [("", NABLA)] + ([("base ", os.environ["NABLA_BASE"])] if os.environ.get("NABLA_BASE") else [])


def once(binary, env):
    e = dict(os.environ, **env)
    p = subprocess.run([binary, "run", "-n", "2", BENCH], capture_output=True, text=True, timeout=600, env=e)
    for l in p.stdout.splitlines():
        if "LAT" in l:
            med, best, p90 = (float(v) for v in l.split("LAT", 1)[1].split())
            return med, best, p90
    raise SystemExit(f"no LAT line: {p.stdout[-500:]} {p.stderr[-1000:]}")


def busy(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


VARIANTS = [("shm", {"NABLA_SHM": "1", "NABLA_DESYNC": "1"}), ("shm, no check", {"NABLA_SHM": "1", "NABLA_DESYNC": "0"}),
            ("tcp", {"NABLA_SHM": "0", "NABLA_DESYNC": "1"}), ("tcp, no check", {"NABLA_SHM": "0", "NABLA_DESYNC": "0"})]

print(f"# {time.strftime('%Y-%m-%d %H:%M')} {os.uname().nodename}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {NABLA}")
for load in (False, True):
    hogs = busy(os.cpu_count()) if load else []
    try:
        res = {b + k: [] for b, _ in BINS for k, _ in VARIANTS}
        for _ in range(REPS):
            for k, env in VARIANTS:
                for b, binary in BINS:
                    res[b + k].append(once(binary, env))
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
    for k in res:
        med = statistics.median(r[0] for r in res[k])
        print(f"{'loaded' if load else 'idle  '} {k:19s} median {med:8.1f} us  best {min(r[1] for r in res[k]):7.1f}  p90 {max(r[2] for r in res[k]):8.1f}", flush=True)
