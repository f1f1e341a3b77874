#!/usr/bin/python3
"""tests/dist: workers started after the nabla binary was rebuilt under a
running session (dist/dlaunch.c: dl_spawn_local execs /proc/self/exe,
dl_self_exe).  A session runs from a COPY of the binary; between two
dist.start's the copy is deleted, or replaced by another program (which
would leave a marker file and fail if it were run): the second group's
workers must be the session's own build (their /proc/PID/exe is the
deleted file) and compute a checked value.  Remote (ssh) workers run the
binary by its path: with the path gone dist.start says so.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_exe_rebuild.py
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
"""
import os, random, shutil, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, lines_with, report, sanitizer_check, script, test, wait_gone  # noqa: E402

rng = random.Random(int.from_bytes(os.urandom(8), "little"))

# two groups of workers, each computing k * rank + c on every rank; between them
# the driver changes the binary and answers on stdin
SESSION = """import dist
fn group(tag, k, c) {
  dist.start(2)
  print(tag, join(map(dist.run(fn(k, c) k * dist.rank() + c + sum(ones(k)).item(), k, c), fn(v) str(v)), " "),
        join(map(dist.workers(), fn(w) str(w.pid)), " "))
  dist.stop()
}
group("G1", K1, C1)
print("CHANGE")
input()
group("G2", K2, C2)
"""


def binary_copy(name):
    """a directory for the case and a fresh copy of the binary in it"""
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    copy = os.path.join(d, "nabla")
    shutil.copy2(NABLA, copy)
    return d, copy


def start_then_delete(copy, path):
    """runs the script from the copy; once it prints CHANGE, deletes the copy and lets it go on"""
    p = subprocess.Popen([copy, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "CHANGE"
        os.remove(copy)
        p.stdin.write("go\n"); p.stdin.flush()
    except Exception:
        p.kill()
        raise
    return p


def session(change, name):
    """runs SESSION from a fresh copy of the binary; change(copy) between the groups"""
    d, copy = binary_copy(name)
    k1, c1, k2, c2 = (rng.randrange(2, 50) for _ in range(4))
    src = SESSION.replace("K1", str(k1)).replace("C1", str(c1)).replace("K2", str(k2)).replace("C2", str(c2))
    path = script(src, f"{name}.nbl")
    p = subprocess.Popen([copy, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = []
    t = time.time()
    try:
        while time.time() - t < 60:
            line = p.stdout.readline()
            if not line:
                break
            out.append(line)
            if line.strip() == "CHANGE":
                change(copy, d)
                p.stdin.write("go\n")
                p.stdin.flush()
        rest, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        rest, err = p.communicate()
    out = "".join(out) + rest
    sanitizer_check(err)
    want = lambda k, c: " ".join(str(float(k * r + c + k)) for r in range(2))
    return p.returncode, out, err, want(k1, c1), want(k2, c2), d


def values(out, tag):
    ls = lines_with(tag + " ", out)
    return " ".join(ls[0].split()[:2]) if ls else None


@test
def test_workers_after_binary_deleted(name):
    rc, out, err, w1, w2, d = session(lambda copy, d: os.remove(copy), name)
    ok = rc == 0 and values(out, "G1") == w1 and values(out, "G2") == w2
    report(name, ok, f"rc={rc} want G1 {w1} G2 {w2}; out={out[-600:]!r} err={err[-600:]!r}")


@test
def test_workers_after_binary_replaced(name):
    """an install that renames a new file over the old: the path now runs another program"""
    def replace(copy, d):
        new = copy + ".new"
        with open(new, "w") as f:
            f.write(f"#!/bin/sh\ntouch {d}/replacement-ran\nexit 3\n")
        os.chmod(new, 0o755)
        os.rename(new, copy)
    rc, out, err, w1, w2, d = session(replace, name)
    ran = os.path.exists(os.path.join(d, "replacement-ran"))
    ok = rc == 0 and values(out, "G1") == w1 and values(out, "G2") == w2 and not ran
    report(name, ok, f"rc={rc} replacement ran={ran} want G1 {w1} G2 {w2}; out={out[-600:]!r} err={err[-600:]!r}")


@test
def test_workers_run_the_session_binary(name):
    """the second group's workers are the deleted binary's processes (/proc/PID/exe), not a path's"""
    d, copy = binary_copy(name)
    path = script("""import dist
print("CHANGE")
input()
dist.start(2)
print("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
print("V", dist.run(fn() dist.rank() * 7 + 1))
input()
dist.stop()
""", f"{name}.nbl")
    p = start_then_delete(copy, path)
    exes, v = [], None
    try:
        pids = [int(x) for x in p.stdout.readline().split()[1:]]
        v = p.stdout.readline().strip()
        exes = [os.readlink(f"/proc/{q}/exe") for q in pids]
        p.stdin.write("go\n"); p.stdin.flush()
        rest, err = p.communicate(timeout=60)
    except Exception:
        p.kill()
        rest, err = p.communicate()
        raise
    sanitizer_check(err)
    ok = p.returncode == 0 and len(exes) == 2 and all(e == copy + " (deleted)" for e in exes) and v == "V [1, 8]" and wait_gone(pids, 5)
    report(name, ok, f"rc={p.returncode} exes={exes} v={v!r} err={err[-400:]!r}")


@test
def test_remote_path_gone_is_an_error(name):
    """ssh workers run the path: gone, dist.start says what and what to do (before any ssh)"""
    d, copy = binary_copy(name)
    path = script("""import dist
print("CHANGE")
input()
try { dist.start(2, launcher="ssh", bind="127.0.0.1", hosts=list("node-a.invalid", "node-b.invalid")) } catch e { print("ERR", e.message) }
""", f"{name}.nbl")
    p = start_then_delete(copy, path)
    try:
        out, err = p.communicate(timeout=60)
    except Exception:
        p.kill()
        raise
    sanitizer_check(err)
    msg = lines_with("ERR ", out)
    ok = p.returncode == 0 and msg and copy in msg[0] and "no longer there" in msg[0] and "remote_nabla" in msg[0]
    report(name, ok, f"rc={p.returncode} out={out[-500:]!r} err={err[-400:]!r}")


dutil.finish()
