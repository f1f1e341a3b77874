#!/usr/bin/python3
"""bench/dist/relay_lines.py — the cost of the session's output relay
(dist/drelay.c: whole lines per rank, pieces over 64 KiB): `nabla run -n 4`
where every rank prints 20,000 lines of 100 bytes, then 100 lines of 100 KB
(cut into two pieces each), read through a pipe; wall time of the whole run,
median of REPS, against a reference build (NABLA_REF, e.g. main's) in the
same run, alternating.  The output is checked to come back whole (every
line one rank's).

Run: NABLA=build/nabla NABLA_REF=/path/to/other/nabla /usr/bin/python3 bench/dist/relay_lines.py [REPS]
"""
import os, re, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(ROOT, "build/nabla"))
REF = os.environ.get("NABLA_REF")
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
SCRIPT = """import dist
s = join(map(list(range(100)), fn(i) "x"), "")
big = join(map(list(range(100000)), fn(i) str(dist.rank())), "")
for i in range(20000) { print(s) }
for i in range(100) { print(big) }
"""


def run(exe, path):
    t = time.perf_counter()
    p = subprocess.run([exe, "run", "-n", "4", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    dt = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"{exe} failed: {p.stderr[-500:]!r}")
    # whole lines: every big line (joined from its '+' pieces) is 100,000 of its rank's digit
    lines = {}
    for l in p.stdout.decode().split("\n"):
        m = re.match(r"\[rank (\d)\](\+?) (.*)$", l)
        if m and m.group(2):
            lines[m.group(1)][-1] += m.group(3)
        elif m:
            lines.setdefault(m.group(1), []).append(m.group(3))
    for r in "0123":
        got = lines.get(r, [])
        if len(got) != 20100 or any(x != "x" * 100 for x in got[:20000]) or any(x != r * 100000 for x in got[20000:]):
            return dt, False
    return dt, True


with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "relay.nbl")
    with open(path, "w") as f:
        f.write(SCRIPT)
    t = {"this": [], "ref": []}
    whole = {"this": [], "ref": []}
    for _ in range(REPS):
        for name, exe in (("this", NABLA), ("ref", REF)):
            if exe:
                dt, ok = run(exe, path)
                t[name].append(dt); whole[name].append(ok)
    for name in t:
        if t[name]:
            print(f"{name:5s} median {statistics.median(t[name]):.2f} s; runs {' '.join(f'{x:.2f}' for x in t[name])}; "
                  f"output whole in {sum(whole[name])} of {len(whole[name])} runs")
    if t["ref"]:
        print(f"this/ref {statistics.median(t['this']) / statistics.median(t['ref']):.2f}x  (time: < 1 is faster)")
