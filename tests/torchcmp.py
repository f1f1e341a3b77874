"""The harness shared by the suites that compare nabla with torch through
files (tests/numerics/test_batchnorm.py, tests/tensor_nn/test_rnn.py,
test_layers29.py, test_conv_more.py): one nabla process per device runs a
generated script that saves its results (safetensors, read back here), and
each check prints one PASS/FAIL line (tools/run-tests.sh's contract) with
the seed on failures (NUMERICS_SEED=<seed> repeats a run).

    import torchcmp
    from torchcmp import ROOT, NABLA, ASAN, SUFFIX, SEED, rng, TMP, report, read_safetensors, run_nabla
    ...
    sys.exit(1 if torchcmp.fails else 0)
"""
import atexit
import json
import os
import random
import shutil
import struct
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASAN = os.environ.get("NABLA_ASAN") == "1"
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build-asan" if ASAN else "build", "nabla")
SUFFIX = " [asan]" if ASAN else ""
SEED = int(os.environ.get("NUMERICS_SEED") or random.SystemRandom().randrange(1, 2**31))
rng = np.random.default_rng(SEED)
TMP = tempfile.mkdtemp(prefix="nabla_torchcmp_")
atexit.register(shutil.rmtree, TMP, True)
fails = 0


def report(name, ok, why=""):
    global fails
    fails += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'}: {name}{SUFFIX}" + ("" if ok else f": {why} (NUMERICS_SEED={SEED})"), flush=True)


DT = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=DT[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def run_nabla(code, env_extra, timeout=600):
    path = os.path.join(TMP, "script.nbl")
    with open(path, "w") as f:
        f.write(code)
    env = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"), NO_COLOR="1", **env_extra)
    return subprocess.run([NABLA, path], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def check_errors(errors, label):
    """Each (code, message) of errors run alone must fail with the message in its output."""
    for code, want in errors:
        r = run_nabla(code, {})
        msg = (r.stdout + r.stderr).replace("\n", " ")
        report(f"{label} error: {code.splitlines()[-1]}", r.returncode != 0 and want in msg,
               f"exit {r.returncode}, wanted '{want}', got: {msg[-400:]}")
