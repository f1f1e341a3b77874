#!/usr/bin/python3
"""Nabla benchmark runner.

A benchmark is a Nabla program bench/<group>/<name>.nbl plus one or more
reference programs next to it, run with /usr/bin/python3:
    <name>.py          plain CPython   (reported as <group>/<name>)
    <name>.<ref>.py    e.g. numpy, torch (reported as <group>/<name>[<ref>])
Each pair runs in the same invocation, alternating, --repeat times; the
minimum whole-process wall time of each side is reported (so interpreter
startup is included; it is small next to these programs) — unless a program
prints a line "bench_time SECONDS" timing its own hot section, which is then
used instead (the tensor benchmarks do, to leave out NumPy/torch imports).  The outputs of
the two sides are compared and a mismatch is flagged.

Usage: bench/run.sh [-n REPEAT] [--nabla PATH] [--record] [FILTER...]
  --record   also append a dated markdown table to bench/results/<date>-<host>.md
Exit status 1 if any program failed (non-zero exit or timeout).
"""
import argparse
import datetime
import glob
import math
import os
import platform
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
PYTHON = "/usr/bin/python3"


# bench/cuda/ holds the GPU benchmarks: tests/cuda/run_gpu.sh runs them on a
# machine with a GPU, with GPU-sized settings (they would take hours on a CPU).
def _cpu_group(path):
    return os.path.basename(os.path.dirname(path)) != "cuda"


def discover(filters):
    pairs = []
    for nbl in sorted(filter(_cpu_group, glob.glob(os.path.join(BENCH, "*", "*.nbl")))):
        stem = nbl[:-4]
        name = os.path.relpath(stem, BENCH)
        for ref in sorted(glob.glob(glob.escape(stem) + ".py") + glob.glob(glob.escape(stem) + ".*.py")):
            middle = ref[len(stem) + 1:-3]  # "" for name.py, "numpy" for name.numpy.py
            label = name if middle in ("", "py") else f"{name}[{middle}]"
            if filters and not any(f in label for f in filters):
                continue
            pairs.append((label, nbl, ref, middle or "python"))
    return pairs


def discover_standalone(filters):
    """Benchmarks that measure and report themselves: bench/<group>/bench_*.py
    scripts (run with NABLA set), .nbl programs without a reference, and
    sub-groups with their own runner, bench/<group>/<sub>/run.py."""
    found = []
    for py in sorted(filter(_cpu_group, glob.glob(os.path.join(BENCH, "*", "bench_*.py")))):
        found.append((os.path.relpath(py, BENCH), [PYTHON, os.path.basename(py)], os.path.dirname(py)))
    for nbl in sorted(filter(_cpu_group, glob.glob(os.path.join(BENCH, "*", "*.nbl")))):
        stem = nbl[:-4]
        if not glob.glob(glob.escape(stem) + ".py") + glob.glob(glob.escape(stem) + ".*.py"):
            found.append((os.path.relpath(nbl, BENCH), None, os.path.dirname(nbl)))
    # A sub-group with its own runner (bench/lang/awfy/run.py: programs in three
    # languages, run with arguments) reports as one standalone benchmark.
    for py in sorted(glob.glob(os.path.join(BENCH, "*", "*", "run.py"))):
        found.append((os.path.relpath(os.path.dirname(py), BENCH), [PYTHON, "run.py"], os.path.dirname(py)))
    return [f for f in found if not filters or any(x in f[0] for x in filters)]


def run_once(cmd, cwd, timeout):
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, env=dict(os.environ, NO_COLOR="1"))
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout}s"
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace").strip().splitlines()
        return None, "", f"exit {p.returncode}" + (f": {err[-1]}" if err else "")
    # A program may time its own hot section (so NumPy/torch import time is
    # not counted): a stdout line "bench_time SECONDS" replaces the process time.
    out = []
    for line in p.stdout.decode(errors="replace").splitlines():
        if line.startswith("bench_time "):
            dt = float(line.split()[1])
        else:
            out.append(line)
    return dt, "\n".join(out), None


def same_output(a, b):
    a, b = a.split(), b.split()
    if a == b:
        return True
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not math.isclose(fx, fy, rel_tol=1e-9, abs_tol=0.0):
            return False
    return True


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def git_rev():
    try:
        return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def fmt(t):
    return "error" if t is None else f"{t:.3f}"


def main():
    ap = argparse.ArgumentParser(description="Run Nabla benchmarks against reference programs.")
    ap.add_argument("-n", "--repeat", type=int, default=5, help="runs of each program (min is kept; default 5)")
    ap.add_argument("--nabla", default=os.path.join(ROOT, "build", "nabla"), help="interpreter (default build/nabla)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run (default 300)")
    ap.add_argument("--record", action="store_true", help="append results to bench/results/<date>-<host>.md")
    ap.add_argument("filters", nargs="*", help="only benchmarks whose name contains one of these")
    args = ap.parse_args()

    nabla = os.path.abspath(args.nabla)
    if not os.access(nabla, os.X_OK):
        sys.exit(f"bench: {nabla} not built (run: make)")
    pairs = discover(args.filters)
    standalone = discover_standalone(args.filters)
    if not pairs and not standalone:
        sys.exit("bench: no benchmarks found")

    print(f"# seconds, min of {args.repeat} runs: whole process (startup included), or the hot section of programs that print bench_time; "
          f"reference: {PYTHON}")
    width = max([len("name")] + [len(p[0]) for p in pairs])
    print(f"{'name':<{width}}  {'nabla_s':>8}  {'ref_s':>8}  {'ratio':>7}")
    rows, notes, failed = [], [], False
    for label, nbl, ref, refkind in pairs:
        cwd = os.path.dirname(nbl)
        best = {"nabla": None, "ref": None}
        out = {"nabla": None, "ref": None}
        err = {"nabla": None, "ref": None}
        cmds = {"nabla": [nabla, os.path.basename(nbl)], "ref": [PYTHON, os.path.basename(ref)]}
        for _ in range(args.repeat):
            for side in ("nabla", "ref"):  # alternate so drift hits both sides alike
                if err[side]:
                    continue
                dt, stdout, e = run_once(cmds[side], cwd, args.timeout)
                if e:
                    err[side] = e
                    best[side] = None
                    continue
                out[side] = stdout
                best[side] = dt if best[side] is None else min(best[side], dt)
        ratio = best["nabla"] / best["ref"] if best["nabla"] and best["ref"] else None
        mark = ""
        for side in ("nabla", "ref"):
            if err[side]:
                failed = True
                notes.append(f"{label}: {side} failed: {err[side]}")
        if not err["nabla"] and not err["ref"] and not same_output(out["nabla"], out["ref"]):
            mark = " !"
            notes.append(f"{label}: outputs differ: nabla {out['nabla'].strip()[:60]!r} "
                         f"vs {refkind} {out['ref'].strip()[:60]!r}")
        rstr = "-" if ratio is None else f"{ratio:.2f}"
        print(f"{label:<{width}}  {fmt(best['nabla']):>8}  {fmt(best['ref']):>8}  {rstr:>7}{mark}", flush=True)
        rows.append((label, refkind, best["nabla"], best["ref"], rstr, mark.strip()))
    for n in notes:
        print("note: " + n)
    reports = []
    for label, cmd, cwd in standalone:
        cmd = cmd or [nabla, os.path.basename(label)]
        if cmd[-1] == "run.py":
            cmd = cmd + ["-n", str(args.repeat)]
        try:
            p = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=args.timeout, env=dict(os.environ, NABLA=nabla, NO_COLOR="1"))
            text = p.stdout.strip()   # stderr (e.g. ipykernel's debugger chatter) only on failure
            if p.returncode != 0:
                failed = True
                text += "\n" + p.stderr.strip() + f"\n(exit {p.returncode})"
        except subprocess.TimeoutExpired:
            failed, text = True, f"timed out after {args.timeout}s"
        print(f"\n## {label}\n{text}", flush=True)
        reports.append((label, text))

    if args.record:
        now = datetime.datetime.now()
        host = socket.gethostname().split(".")[0] or "host"
        os.makedirs(os.path.join(BENCH, "results"), exist_ok=True)
        path = os.path.join(BENCH, "results", f"{now:%Y-%m-%d}-{host}.md")
        with open(path, "a") as f:
            f.write(f"\n## {now:%Y-%m-%d %H:%M} — {platform.machine()} — {cpu_model()}\n\n")
            f.write(f"nabla `{git_rev()}`, Python {platform.python_version()} ({PYTHON}); "
                    f"min of {args.repeat} runs of whole-process wall time, or of the hot section for programs that print bench_time.\n\n")
            f.write("| benchmark | reference | nabla (s) | ref (s) | nabla/ref |\n")
            f.write("|---|---|---:|---:|---:|\n")
            for label, refkind, tn, tr, rstr, mark in rows:
                flag = " (output differs)" if mark else ""
                f.write(f"| {label} | {refkind} | {fmt(tn)} | {fmt(tr)} | {rstr}{flag} |\n")
            for label, text in reports:
                f.write(f"\n### {label}\n\n```\n{text}\n```\n")
        print(f"recorded in {os.path.relpath(path, ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
