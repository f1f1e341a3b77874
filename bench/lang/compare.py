#!/usr/bin/python3
"""bench/lang/compare.py — the language benchmarks (fib, loop, dict) on Nabla's
bytecode VM against Lua 5.4 (Debian's lua5.4) and CPython, in one run: the
programs alternate, --repeat rounds, and the minimum whole-process wall time
of each is reported with the ratios nabla/lua and nabla/python.  --before
PATH adds another nabla binary (an older build) to the same rounds, for a
before/after ratio.  Outputs are compared (a mismatch is an error).

Usage: bench/lang/compare.py [-n REPEAT] [--nabla PATH] [--before PATH] [NAME...]
Prints a markdown table (paste it into bench/results/ with the date and machine).
"""
import argparse, os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def timed(cmd, env):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    dt = time.perf_counter() - t
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[:500]}")
    return dt, p.stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", "--repeat", type=int, default=5)
    ap.add_argument("--nabla", default=os.path.join(ROOT, "build", "nabla"))
    ap.add_argument("--before", default=None, help="an older nabla binary to time in the same rounds")
    ap.add_argument("names", nargs="*", default=["fib", "loop"])
    a = ap.parse_args()
    env = dict(os.environ)
    env.pop("NABLA_ENGINE", None)
    rows = []
    for name in a.names:
        progs = {
            "nabla vm": ([a.nabla, f"{HERE}/{name}.nbl"], env),
            "lua5.4": (["lua5.4", f"{HERE}/{name}.lua"], env),
            "python": (["/usr/bin/python3", f"{HERE}/{name}.py"], env),
        }
        if a.before:
            progs["nabla before"] = ([a.before, f"{HERE}/{name}.nbl"], env)
        best, outs = {k: float("inf") for k in progs}, {}
        for _ in range(a.repeat):
            for k, (cmd, e) in progs.items():
                dt, out = timed(cmd, e)
                best[k] = min(best[k], dt)
                outs[k] = out
        if len(set(outs.values())) != 1:
            sys.exit(f"{name}: outputs differ: {outs}")
        rows.append((name, best))
    extra = " nabla before (s) | vm/before |" if a.before else ""
    print("| benchmark | nabla vm (s) | lua5.4 (s) | python (s) | vm/lua | vm/python |" + extra)
    print("|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if a.before else ""))
    for name, b in rows:
        vm, lua, py = b["nabla vm"], b["lua5.4"], b["python"]
        tail = f" {b['nabla before']:.3f} | {vm / b['nabla before']:.2f} |" if a.before else ""
        print(f"| lang/{name} | {vm:.3f} | {lua:.3f} | {py:.3f} | {vm/lua:.2f} | {vm/py:.2f} |" + tail)


if __name__ == "__main__":
    main()
