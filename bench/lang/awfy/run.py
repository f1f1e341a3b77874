#!/usr/bin/python3
"""bench/lang/awfy/run.py — the Are We Fast Yet benchmarks (README.md here) on
Nabla against Lua 5.4 (Debian's lua5.4) and CPython (/usr/bin/python3).

Every benchmark in this folder (X.nbl with a `# bench-args: ITERATIONS INNER`
line, and X.lua and X.py beside it; other .nbl files are shared modules) runs
in all three languages with those arguments; the three programs alternate,
--repeat rounds, and the minimum whole-process wall time of each is kept
(startup included: it is small next to these runs).  The three must print the same report line, with verified=true,
or the benchmark is an error.  Prints a markdown table with the ratios
nabla/lua and nabla/python and their geometric means (paste it into
bench/results/ with the date and machine).

  --before PATH   also times an older nabla binary in the same rounds and
            adds its time and the ratio now/before (its ratio to Lua too,
            for the geometric means of both builds under the same load).

  --check   instead of timing: checks that every tests/lang/awfy_X.out (the
            golden test of X.nbl) is exactly what `lua5.4 X.lua` and
            `python3 X.py` print with no arguments, and that
            tests/lang/awfy_X.nbl is X.nbl.

Usage: bench/lang/awfy/run.py [-n REPEAT] [--nabla PATH] [--before PATH] [--check] [NAME...]
The interpreter is --nabla, else $NABLA, else build/nabla.
Exit status 1 if a program failed, disagreed or was not verified.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# This folder holds benchmark files named like modules (json.py): keep it off
# the import path so the standard library is what gets imported below.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse  # noqa: E402
import glob  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PYTHON = "/usr/bin/python3"
LUA = "lua5.4"
HARNESS = "awfy"
ARGS_RE = re.compile(r"^#\s*bench-args:\s*(\d+)\s+(\d+)\s*$", re.M)


def discover(names):
    """[(name, iterations, inner)] for each X.nbl with a bench-args line (the
    others are shared modules: the harness, the suite's collections), sorted."""
    found = []
    for nbl in sorted(glob.glob(os.path.join(HERE, "*.nbl"))):
        name = os.path.basename(nbl)[:-4]
        if name == HARNESS or (names and name not in names):
            continue
        with open(nbl) as f:
            m = ARGS_RE.search(f.read())
        if not m:
            if names:
                sys.exit(f"awfy: {name}.nbl has no '# bench-args: ITERATIONS INNER' line")
            continue
        missing = [ext for ext in ("lua", "py") if not os.path.exists(os.path.join(HERE, f"{name}.{ext}"))]
        if missing:
            sys.exit(f"awfy: {name}.nbl has no {' or '.join(name + '.' + m for m in missing)} beside it")
        found.append((name, int(m.group(1)), int(m.group(2))))
    unknown = set(names or ()) - {f[0] for f in found}
    if unknown:
        sys.exit(f"awfy: no such benchmark: {', '.join(sorted(unknown))}")
    return found


def commands(nabla, name, args, before=None):
    cmds = {
        "nabla": [nabla, f"{name}.nbl", *args],
        "lua": [LUA, f"{name}.lua", *args],
        "python": [PYTHON, f"{name}.py", *args],
    }
    if before:
        cmds["before"] = [before, f"{name}.nbl", *args]
    return cmds


def run_once(cmd, timeout):
    """(seconds, stdout) or (None, why)."""
    env = dict(os.environ, NO_COLOR="1")
    env.pop("NABLA_ENGINE", None)
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=HERE, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout}s"
    dt = time.perf_counter() - t
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return None, f"exit {p.returncode}" + (f": {err[0]}" if err else "")
    return dt, p.stdout.strip()


def check_golden(benches, nabla_unused):
    """The golden tests' expected output is what Lua and Python print."""
    bad = 0
    for name, _, _ in benches:
        out_path = os.path.join(ROOT, "tests", "lang", f"awfy_{name}.out")
        test_path = os.path.join(ROOT, "tests", "lang", f"awfy_{name}.nbl")
        why = None
        if not os.path.exists(out_path) or not os.path.exists(test_path):
            why = f"tests/lang/awfy_{name}.nbl/.out missing"
        elif os.path.realpath(test_path) != os.path.realpath(os.path.join(HERE, f"{name}.nbl")):
            why = f"tests/lang/awfy_{name}.nbl is not a link to bench/lang/awfy/{name}.nbl"
        else:
            with open(out_path) as f:
                want = f.read().strip()
            for lang in ("lua", "python"):
                _, out = run_once(commands("-", name, [])[lang], 300)
                if out != want:
                    why = f"{lang} prints {out!r}, tests/lang/awfy_{name}.out has {want!r}"
                    break
        if why:
            bad += 1
            print(f"FAIL: awfy/{name}: {why}")
        else:
            print(f"PASS: awfy/{name}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--repeat", type=int, default=3, help="rounds; the minimum is kept (default 3)")
    ap.add_argument("--nabla", default=os.environ.get("NABLA") or os.path.join(ROOT, "build", "nabla"))
    ap.add_argument("--before", default=None, help="an older nabla binary to time in the same rounds")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run (default 300)")
    ap.add_argument("--check", action="store_true", help="check the golden tests' .out files instead of timing")
    ap.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    a = ap.parse_args()
    if a.repeat < 1:
        sys.exit("awfy: --repeat must be at least 1")
    if not shutil.which(LUA):
        sys.exit(f"awfy: {LUA} not found (tools/install-deps.sh installs it)")
    benches = discover(a.names)
    if not benches:
        sys.exit("awfy: no benchmarks found")
    if a.check:
        return check_golden(benches, a.nabla)
    nabla = os.path.abspath(a.nabla)
    if not os.access(nabla, os.X_OK):
        sys.exit(f"awfy: {nabla} is not an executable (build it: ninja -C build)")

    before = os.path.abspath(a.before) if a.before else None
    if before and not os.access(before, os.X_OK):
        sys.exit(f"awfy: {before} is not an executable")
    extra = " before (s) | before/lua | now/before |" if before else ""
    extra_rule = "---:|---:|---:|" if before else ""
    print(f"# seconds, min of {a.repeat} whole-process runs; nabla {nabla}, {LUA}, {PYTHON}"
          + (f"; before {before}" if before else ""))
    print("| benchmark | args | nabla (s) | lua5.4 (s) | python (s) | nabla/lua | nabla/python |" + extra)
    print("|---|---|---:|---:|---:|---:|---:|" + extra_rule)
    failed, notes, r_lua, r_py, r_blua, r_nb = False, [], [], [], [], []
    for name, iterations, inner in benches:
        cmds = commands(nabla, name, [str(iterations), str(inner)], before)
        best = {k: math.inf for k in cmds}
        outs, errs = {}, {}
        for _ in range(a.repeat):
            for k, cmd in cmds.items():  # alternate so drift hits all three alike
                if k in errs:
                    continue
                dt, out = run_once(cmd, a.timeout)
                if dt is None:
                    errs[k] = out
                    continue
                best[k] = min(best[k], dt)
                outs[k] = out
        for k, e in errs.items():
            notes.append(f"{name}: {k} failed: {e}")
        if not errs:
            if len(set(outs.values())) != 1:
                errs["outputs"] = True
                notes.append(f"{name}: outputs differ: {outs}")
            elif "verified=true" not in outs["nabla"]:
                errs["verify"] = True
                notes.append(f"{name}: not verified: {outs['nabla']}")
        if errs:
            failed = True
            print(f"| {name} | {iterations} {inner} | error | | | | |", flush=True)
            continue
        rl, rp = best["nabla"] / best["lua"], best["nabla"] / best["python"]
        r_lua.append(rl)
        r_py.append(rp)
        row = (f"| {name} | {iterations} {inner} | {best['nabla']:.3f} | {best['lua']:.3f} | "
               f"{best['python']:.3f} | {rl:.2f} | {rp:.2f} |")
        if before:
            r_blua.append(best["before"] / best["lua"])
            r_nb.append(best["nabla"] / best["before"])
            row += f" {best['before']:.3f} | {r_blua[-1]:.2f} | {r_nb[-1]:.2f} |"
        print(row, flush=True)

    def gmean(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs))
    if r_lua:
        row = f"| geometric mean ({len(r_lua)}) | | | | | {gmean(r_lua):.2f} | {gmean(r_py):.2f} |"
        if before:
            row += f" | {gmean(r_blua):.2f} | {gmean(r_nb):.2f} |"
        print(row)
    for n in notes:
        print("note: " + n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
