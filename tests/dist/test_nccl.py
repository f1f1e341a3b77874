#!/usr/bin/python3
"""tests/dist: the collective backend choice (dist.start backend=), on any machine.

On a machine without a GPU: backend="nccl" fails with a clear error, leaves
no worker behind and the session usable; backend="auto" (the default)
chooses the ring and says why in dist.info(); unknown backends are errors.
The GPU side (NCCL collectives on CUDA tensors, GPU workers on the ring) is
tests/dist/run_gpu_dist.sh.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_nccl.py
"""
import os, re, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, lines_with, report, sanitizer_check, script, skip, test  # noqa: E402


def run(src, timeout=60, env=None, args=()):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([NABLA, *args, script(src)], capture_output=True, text=True, timeout=timeout, env=e)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def has_gpu():
    rc, out, _ = run('print("GPU", cuda.available())')
    return "GPU true" in out


def worker_children(ppid):
    """pids of `nabla worker` processes whose parent is ppid"""
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        fields = st.rsplit(")", 1)[1].split()
        if int(fields[1]) == ppid and fields[0] != "Z" and b"worker" in cmd:
            kids.append(int(d))
    return kids


GPU = has_gpu()


@test
def test_nccl_without_gpu_fails_cleanly(name):
    if GPU:
        return skip(name, "this machine has a GPU (run_gpu_dist.sh covers it)")
    # the session pauses after the failed start (reading a line) so the test
    # can look for leftover workers while it is still alive
    path = script("""
import dist
print("ERR", try { dist.start(3, backend="nccl") } catch e { "{e.name}: {e.message}" })
print("SIZE", dist.size())
input("")
dist.start(2, backend="ring")
print("INFO", dist.info().backend)
print("SUM", dist.run(fn() all_reduce(tensor([1.0, 2.0]) * (dist.rank() + 1)).tolist()))
dist.stop()
""", "nccl_fail.nbl")
    p = subprocess.Popen([NABLA, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = ""
    t = time.time()
    while "SIZE" not in first and time.time() - t < 60:
        first += p.stdout.readline()
    time.sleep(0.3)
    orphans = worker_children(p.pid)
    out, err = p.communicate("\n", timeout=60)
    out = first + out
    sanitizer_check(err)
    m = lines_with("ERR ", out)
    ok = (p.returncode == 0 and m and m[0].startswith("DistError: dist.start: backend \"nccl\" is not available on rank")
          and "SIZE nil" in out and not orphans and "INFO ring" in out and "SUM [[3.0, 6.0], [3.0, 6.0]]" in out)
    report(name, ok, f"rc={p.returncode} orphans={orphans} out={out!r} err={err[-600:]!r}")


@test
def test_nccl_full_probe_names_cuda(name):
    # past the cheap /dev/nvidia* check, the reason is the CUDA loader's (or NCCL's)
    if GPU:
        return skip(name, "this machine has a GPU")
    rc, out, err = run("""
import dist
print("ERR", try { dist.start(2, backend="nccl") } catch e { e.message })
dist.start(2)
print("WHY", dist.info().reason)
dist.stop()
""", env={"NABLA_NCCL_PROBE_ANYWAY": "1"})
    e = (lines_with("ERR ", out) or [""])[0]
    w = (lines_with("WHY ", out) or [""])[0]
    ok = (rc == 0 and 'backend "nccl" is not available on rank 0' in e
          and ("CUDA is not available" in e or "NCCL is not available" in e) and ("CUDA is not available" in w or "NCCL is not available" in w))
    report(name, ok, f"rc={rc} out={out!r} err={err[-400:]!r}")


@test
def test_auto_picks_ring_and_says_why(name):
    rc, out, err = run("""
import dist
dist.start(2)
i = dist.info()
print("INFO", i.backend, i.requested, i.size)
print("REASON", i.reason)
print("WORKERS", dist.run(fn() dist.info().backend))
print("X", dist.run(fn() all_gather(tensor([[dist.rank() * 1.0]])).tolist()))
dist.stop()
print("AFTER", dist.info())
""")
    if GPU:
        ok = rc == 0 and ("INFO nccl auto 2" in out or "INFO ring auto 2" in out)
    else:
        ok = (rc == 0 and "INFO ring auto 2" in out and 'REASON backend "nccl" is not available on rank 0: ' in out
              and 'WORKERS ["ring", "ring"]' in out)
    ok = ok and "X [[[0.0], [1.0]], [[0.0], [1.0]]]" in out and "AFTER nil" in out
    report(name, ok, f"rc={rc} out={out!r} err={err[-400:]!r}")


@test
def test_ring_backend_says_ring(name):
    rc, out, err = run("""
import dist
dist.start(2, backend="ring")
i = dist.info()
print("INFO", i.backend, i.requested, i.reason)
dist.stop()
""")
    ok = rc == 0 and 'INFO ring ring backend "ring" was asked for' in out
    report(name, ok, f"rc={rc} out={out!r} err={err[-400:]!r}")


@test
def test_bad_backend_names(name):
    rc, out, err = run("""
import dist
print("A", try { dist.start(2, backend="mpi") } catch e { "{e.name}: {e.message}" })
print("B", try { dist.start(2, backend=3) } catch e { "{e.name}: {e.message}" })
print("C", try { dist.start(2, backend="") } catch e { "{e.name}: {e.message}" })
print("SIZE", dist.size())
""")
    ok = (rc == 0 and 'A DistError: dist.start: unknown backend "mpi" (expected "auto", "ring" or "nccl")' in out
          and "B TypeError: dist.start: backend must be a string" in out
          and 'C DistError: dist.start: unknown backend ""' in out and "SIZE nil" in out)
    report(name, ok, f"rc={rc} out={out!r} err={err[-400:]!r}")


@test
def test_nabla_run_backend_option(name):
    path = script('print("R", dist.rank(), dist.info().backend)\n', "runb.nbl")
    p1 = subprocess.run([NABLA, "run", "-n", "2", "--backend", "ring", path], capture_output=True, text=True, timeout=60)
    p2 = subprocess.run([NABLA, "run", "-n", "2", "--backend", "mpi", path], capture_output=True, text=True, timeout=60)
    ok = p1.returncode == 0 and "R 0 ring" in p1.stdout and p2.returncode == 1 and 'unknown backend "mpi"' in p2.stderr
    if not GPU:
        p3 = subprocess.run([NABLA, "run", "-n", "2", "--backend", "nccl", path], capture_output=True, text=True, timeout=60)
        ok = ok and p3.returncode == 1 and 'backend "nccl" is not available' in p3.stderr
    for p in (p1, p2):
        sanitizer_check(p.stderr)
    report(name, ok, f"{p1.returncode} {p1.stdout!r} {p1.stderr[-300:]!r} | {p2.returncode} {p2.stderr[-300:]!r}")


@test
def test_restart_after_failed_nccl(name):
    # the failed start leaves nothing for restart to reuse; a good start then restart works
    if GPU:
        return skip(name, "this machine has a GPU")
    rc, out, err = run("""
import dist
print("E1", try { dist.restart() } catch e { e.message })
try { dist.start(2, backend="nccl") } catch e { nil }
print("E2", try { dist.restart() } catch e { e.message })
dist.start(2)
dist.restart()
print("R", dist.info().backend, dist.run(fn() dist.rank()))
dist.stop()
""")
    ok = (rc == 0 and "E1 dist.restart: dist.start was never called" in out
          and "E2 dist.restart: dist.start was never called" in out and "R ring [0, 1]" in out)
    report(name, ok, f"rc={rc} out={out!r} err={err[-400:]!r}")


dutil.finish()
