"""Shared by the Python suites of tests/lang (test_vm, test_bitwise): the
interpreter under test, the PASS:/FAIL: line protocol of tools/run-tests.sh,
and running a program from source."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.environ.get("NABLA", os.path.join(ROOT, "build", "nabla"))
failed = 0


def report(name, ok, why=""):
    global failed
    if ok:
        print(f"PASS: {name}")
    else:
        failed += 1
        print(f"FAIL: {name}: {why}")


def finish():
    sys.exit(1 if failed else 0)


def run(src, engine=None, extra_env=None, args=None):
    """runs src as a file; returns (rc, stdout, stderr with the file's path as
    PROG).  engine: a NABLA_ENGINE value to set (only to see it refused)."""
    with tempfile.NamedTemporaryFile("w", suffix=".nbl", delete=False) as f:
        f.write(src)
        path = f.name
    env = dict(os.environ, NO_COLOR="1")
    env.pop("NABLA_ENGINE", None)
    if engine:
        env["NABLA_ENGINE"] = engine
    env.update(extra_env or {})
    try:
        p = subprocess.run([NABLA] + (args or []) + [path], capture_output=True, text=True, env=env,
                           stdin=subprocess.DEVNULL, timeout=60)
        return p.returncode, p.stdout, p.stderr.replace(path, "PROG")
    finally:
        os.unlink(path)
