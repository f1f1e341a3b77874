"""Shared helpers for the kernel tests: a kernelspec in a temporary JUPYTER_PATH,
history in a temporary file, and the PASS/FAIL line protocol of tools/run-tests.sh."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(ROOT, "build", "nabla"))
ASAN = bool(os.environ.get("NABLA_ASAN"))
# ASan/UBSan builds start and run slower
SLOW = 4 if ASAN else 1

TMP = tempfile.mkdtemp(prefix="nabla-kernel-test.")
atexit.register(shutil.rmtree, TMP, True)
SPEC_PREFIX = os.path.join(TMP, "prefix")
os.environ["JUPYTER_PATH"] = os.path.join(SPEC_PREFIX, "share", "jupyter")
os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(TMP, "runtime")
os.environ["NABLA_HISTORY_FILE"] = os.path.join(TMP, "history.jsonl")
os.environ.setdefault("NO_COLOR", "1")

failures = 0


def install(name="nabla", mode="message"):
    """Installs the kernelspec NAME (interrupt_mode MODE) under the test prefix."""
    r = subprocess.run([NABLA, "kernel", "install", "--prefix", SPEC_PREFIX, "--name", name,
                        "--interrupt-mode", mode], capture_output=True, text=True, timeout=30 * SLOW)
    if r.returncode != 0:
        raise RuntimeError("nabla kernel install failed: " + r.stdout + r.stderr)
    return os.path.join(SPEC_PREFIX, "share", "jupyter", "kernels", name)


def result(name, ok, why=""):
    global failures
    if ok is None:
        print(f"SKIP: {name}: {why}", flush=True)
    elif ok:
        print(f"PASS: {name}", flush=True)
    else:
        failures += 1
        why = " ".join(str(why).split())[:600]
        print(f"FAIL: {name}: {why}", flush=True)


def finish():
    sys.stdout.flush()
    sys.exit(1 if failures else 0)
