"""emuutil.py — what the emulated-device suites share (test_emulated.py,
test_emu_hostside.py): the build and interpreter they test (the ASan build
when NABLA_ASAN=1), the environment that turns the emulated CUDA device on
(NABLA_CUDA_EMULATE=force, 2 SMs so grid-stride loops wrap at small sizes),
a scratch directory, and the PASS/FAIL/SKIP lines of tools/run-tests.sh
(with the failure count for the exit status)."""
import atexit
import os
import shutil
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASAN = os.environ.get("NABLA_ASAN") == "1"
BUILD = os.environ.get("NABLA_BUILD") or os.path.join(ROOT, "build-asan" if ASAN else "build")
NABLA = os.environ.get("NABLA") or os.path.join(BUILD, "nabla")
SUFFIX = " [asan]" if ASAN else ""
MODULE = os.path.join(BUILD, "cuda", "emu", "nabla_cuda_emu.so")

TMPDIR = tempfile.mkdtemp(prefix="nabla-emu-test-")
atexit.register(shutil.rmtree, TMPDIR, True)
ENV = dict(os.environ, NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2", NO_COLOR="1", NABLA_STDLIB=os.path.join(ROOT, "stdlib"))
ENV.pop("NABLA_CUDA_DISABLE", None)
ENV.pop("NABLA_CUDA_MODULE", None)
if ASAN:
    ENV.setdefault("ASAN_OPTIONS", "detect_leaks=1")

n_fail = 0


def out(kind, name, why=""):
    global n_fail
    if kind == "FAIL":
        n_fail += 1
    why = " ".join(str(why).split())
    print(f"{kind}: {name}{SUFFIX}" + (f": {why[:1500]}" if why else ""), flush=True)


def run(cmd, timeout, env=ENV):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return -999, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"


def nabla(code, timeout=120):
    return run([NABLA, "-e", code], timeout)


def kernel_cells(cells):
    """runs each code cell in a fresh Jupyter kernel (the kernelspec of
    tests/kernel/kutil.py, under ENV); returns, per cell, its iopub messages
    (msg_type, content) up to the kernel's idle status"""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests", "kernel"))
    os.environ["NABLA"] = NABLA
    import kutil  # noqa: E402  (a kernelspec under a temporary JUPYTER_PATH)
    from jupyter_client.manager import start_new_kernel
    kutil.install("nabla")
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)
    tmo = 60 * (4 if ASAN else 1)
    km = kc = None
    res = []
    try:
        km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=tmo)
        for code in cells:
            msg_id = kc.execute(code)
            got = []
            while True:
                m = kc.get_iopub_msg(timeout=tmo)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                got.append((m["msg_type"], m["content"]))
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    break
            res.append(got)
    finally:
        if kc:
            kc.stop_channels()
        if km:
            km.shutdown_kernel(now=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return res


def no_module(suite):
    """True (after printing the suite's SKIP line) when this build has no emulated device"""
    if os.path.exists(MODULE):
        return False
    print(f"SKIP: {suite}{SUFFIX}: this build has no emulated CUDA device ({MODULE} not built: it needs clang++, "
          f"CUDA's headers and -Dcuda not disabled)")
    return True
