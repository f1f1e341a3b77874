#!/usr/bin/python3
"""tests/dist: what `nabla run` tells its workers and its user —
MASTER_ADDR in the family the address has (127.0.0.1, as torchrun sets it,
not the IPv4-mapped ::ffff:127.0.0.1 a dual-stack socket reports), and the
closing summary of a failed run (torchrun's ChildFailedError table): a row
per failed rank with its host, how it ended and its error's first line.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_run_summary.py
One line per test ("PASS: name" / "FAIL: name: why"); exit 1 on any failure.
Local workers only, a few seconds in all; every process has a timeout.
"""
import os, re, signal, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, per_rank, report, sanitizer_check, script, test  # noqa: E402

SUMMARY_HEAD = r"nabla run: {script} failed on {n} of {world} ranks \(first: rank {first}\)\n  rank  host +exit +error\n"


def nabla_run(args, path, timeout=60):
    p = subprocess.run([NABLA, "run", *args, path], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    return p


@test
def test_master_addr_ipv4(name):
    path = script('print("ADDR", "\\"" + getenv("MASTER_ADDR") + "\\"")\nprint("PORT", getenv("MASTER_PORT"))\n', "addr.nbl")
    p = nabla_run(["-n", "2"], path)
    addrs, ports = per_rank(p.stdout, "ADDR"), per_rank(p.stdout, "PORT")
    ok = p.returncode == 0 and addrs == {0: "127.0.0.1", 1: "127.0.0.1"} and len(set(ports.values())) == 1
    # a live session's workers see the same
    q = subprocess.run([NABLA, "-e", 'import dist\ndist.start(2)\nprint(dist.pull("getenv(\\"MASTER_ADDR\\")", rank="all"))\ndist.stop()\n'],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    sanitizer_check(q.stderr)
    ok = ok and q.returncode == 0 and q.stdout == '["127.0.0.1", "127.0.0.1"]\n'
    report(name, ok, f"rc={p.returncode} addrs={addrs} ports={ports} err={p.stderr[-300:]!r} session={q.stdout!r} {q.stderr[-300:]!r}")


@test
def test_summary_error_on_one_rank(name):
    path = script('if dist.rank() == 1 { error("boom on rank {dist.rank()}\\nsecond line of it") }\nbarrier()\nprint("after")\n',
                  "fails.nbl")
    p = nabla_run(["-n", "3"], path)
    err = p.stderr
    head = re.search(SUMMARY_HEAD.format(script="fails.nbl", n=1, world=3, first=1), err)
    row = re.search(r"\n  1 +(\S+) +exit code 1 \(error\) +Error: boom on rank 1\n", err)
    stopped = "  (stopped after the failure: rank 0 rank 2)\n" in err
    ok = (p.returncode == 1 and head is not None and row is not None and stopped
          and "second line of it" not in err[head.start():] and err.endswith(")\n"))
    report(name, ok, f"rc={p.returncode} err={err[-700:]!r}")


def worker_pids(parent):
    """{rank: pid} of the `nabla worker` children of a `nabla run` process"""
    got = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"worker" in argv and b"--rank" in argv:
            got[int(argv[argv.index(b"--rank") + 1])] = int(d)
    return got


@test
def test_summary_killed_rank(name):
    # every rank says it started, then waits; the test kills rank 2 with SIGKILL
    path = script('eprint("STARTED")\nwhile true { }\n', "spin.nbl")
    p = subprocess.Popen([NABLA, "run", "-n", "3", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    try:
        seen, t = "", time.time()
        while seen.count("STARTED") < 3 and time.time() - t < 30:
            seen += p.stderr.readline()
        pids = worker_pids(p.pid)
        os.kill(pids[2], signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = seen + err
    sanitizer_check(err)
    head = re.search(SUMMARY_HEAD.format(script="spin.nbl", n=1, world=3, first=2), err)
    row = re.search(r"\n  2 +(\S+) +signal 9 \(Killed\) +\(the process died without an error report\)\n", err)
    ok = p.returncode == 128 + 9 and head is not None and row is not None and "(stopped after the failure: rank 0 rank 1)" in err
    report(name, ok, f"rc={p.returncode} pids={pids} err={err[-700:]!r}")


@test
def test_no_summary_on_success(name):
    path = script('print("fine", dist.rank())\n', "fine.nbl")
    p = nabla_run(["-n", "2"], path)
    report(name, p.returncode == 0 and "failed on" not in p.stderr and "[rank 1] fine 1" in p.stdout,
           f"rc={p.returncode} out={p.stdout!r} err={p.stderr[-300:]!r}")


dutil.finish()
