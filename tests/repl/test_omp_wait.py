#!/usr/bin/python3
"""The nabla executable makes libgomp's idle threads spin only briefly (3000
spins, then sleep) unless the user chose a policy; see the getenv note in
main/omp_wait.c.

libgomp reports its settings with OMP_DISPLAY_ENV=VERBOSE (on stderr):
GOMP_SPINCOUNT is the number of spins before a waiting thread sleeps (0 for
passive, 300000 for libgomp's own default).  Prints PASS/FAIL lines.
"""
import os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.path.abspath(os.environ.get("NABLA", os.path.join(ROOT, "build", "nabla")))
failed = 0


def check(name, ok, why=""):
    global failed
    print(f"PASS: {name}" if ok else f"FAIL: {name}: {why}")
    failed += not ok


def run(code, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    e.update(env)
    e["OMP_DISPLAY_ENV"] = "VERBOSE"
    p = subprocess.run([NABLA, "-e", code], env=e, capture_output=True, text=True, timeout=60)
    m = re.search(r"GOMP_SPINCOUNT = '(\d+)'", p.stderr)
    return p, (int(m.group(1)) if m else None)


p, spin = run("print(1)")
if spin is None:
    print("SKIP: omp_wait: libgomp printed no GOMP_SPINCOUNT (not linked with OpenMP?)")
    sys.exit(0)
check("omp_wait default short spin", p.returncode == 0 and spin == 3000, f"GOMP_SPINCOUNT {spin}, rc {p.returncode}")
p, spin = run("print(1)", GOMP_SPINCOUNT="12345")
check("omp_wait GOMP_SPINCOUNT kept", spin == 12345, f"GOMP_SPINCOUNT {spin}")
p, spin = run("print(1)", OMP_WAIT_POLICY="active")
check("omp_wait OMP_WAIT_POLICY=active kept", spin is not None and spin > 300000, f"GOMP_SPINCOUNT {spin}")
p, spin = run("print(1)", OMP_WAIT_POLICY="passive")
check("omp_wait OMP_WAIT_POLICY=passive kept", spin == 0, f"GOMP_SPINCOUNT {spin}")
# scripts see the real environment: the variable stays unset for them
p, _ = run('print(getenv("GOMP_SPINCOUNT", "unset"))')
check("omp_wait getenv unchanged", p.stdout.strip() == "unset", repr(p.stdout))
p, _ = run('print(getenv("OMP_WAIT_POLICY", "unset"))', OMP_WAIT_POLICY="passive")
check("omp_wait getenv user value", p.stdout.strip() == "passive", repr(p.stdout))
sys.exit(1 if failed else 0)
