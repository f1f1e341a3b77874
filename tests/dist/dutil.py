"""Shared by the tests/dist suites: the binary, a scratch directory, the
PASS:/FAIL:/SKIP: line protocol of tools/run-tests.sh, and process helpers."""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(os.path.dirname(__file__), "../../build/nabla"))
TMP = tempfile.mkdtemp(prefix="nabla-dist-test-")
# a suite's scratch holds gigabytes (the collectives' .npy round trips): gone at
# exit unless NABLA_KEEP_TMP=1 keeps it for a post-mortem
if not os.environ.get("NABLA_KEEP_TMP"):
    atexit.register(shutil.rmtree, TMP, True)
passes = failures = skips = 0


def report(name, ok, why=""):
    global failures, passes
    if ok:
        passes += 1
        print(f"PASS: {name}", flush=True)
    else:
        failures += 1
        print(f"FAIL: {name}: {why}", flush=True)


def skip(name, why):
    global skips
    skips += 1
    print(f"SKIP: {name}: {why}", flush=True)


def test(fn):
    """Decorator: runs test_NAME(name) now; an exception or timeout is a FAIL."""
    name = fn.__name__[5:]
    only = os.environ.get("DIST_TEST_ONLY")   # while iterating: run only these cases (comma separated)
    if only and name not in only.split(","):
        return fn
    t = time.time()
    try:
        fn(name)
    except subprocess.TimeoutExpired as e:
        report(name, False, f"timed out after {e.timeout} s")
    except Exception as e:  # noqa
        report(name, False, f"{type(e).__name__}: {e}")
    if os.environ.get("VERBOSE"):
        print(f"  ({time.time() - t:.1f} s)")
    return fn


def needs(why):
    """decorator for @test functions: a SKIP with why when why is set"""
    def deco(fn):
        def wrapped(name):
            if why:
                skip(name, why)
                return
            fn(name)
        wrapped.__name__ = fn.__name__
        return wrapped
    return deco


def relayed(out):
    """{rank: [its lines]} of rank-prefixed relayed output (one stream):
    '[rank R] TEXT' lines, a line over the relay's bound (and a partial line
    flushed early) continued by '[rank R]+ TEXT' pieces, joined back here.
    Lines without a rank prefix are left out."""
    got = {}
    for line in out.split("\n"):
        m = re.match(r"\[rank (\d+)\](\+?) ", line)
        if not m:
            continue
        r, text = int(m.group(1)), line[m.end():]
        lines = got.setdefault(r, [])
        if m.group(2) and lines:
            lines[-1] += text
        else:
            lines.append(text)
    return got


def per_rank(out, tag):
    """{rank: the JSON after 'TAG ' on that rank's '[rank R] TAG ...' line}
    of `nabla run`'s rank-prefixed output"""
    got = {}
    for r, lines in relayed(out).items():
        for line in lines:
            if line.startswith(tag + " "):
                got[r] = json.loads(line[len(tag) + 1:])
    return got


def finish():
    print(f"{passes} passed, {failures} failed" + (f", {skips} skipped" if skips else ""), flush=True)
    sys.exit(1 if failures else 0)


def script(src, name="t.nbl"):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(src)
    return path


def sanitizer_check(err):
    # an ASan/UBSan build (session or worker) reports on stderr: that fails the test
    for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
        if marker in err:
            i = err.index(marker)
            raise AssertionError("sanitizer: " + err[max(0, i - 200):i + 1500])


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pids, secs=5.0):
    t = time.time()
    while time.time() - t < secs:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def lines_with(prefix, text):
    return [l[len(prefix):] for l in text.splitlines() if l.startswith(prefix)]
