#!/usr/bin/python3
"""set_num_threads(n) / num_threads(): the CPU threads of the tensor kernels
(OpenMP) and OpenBLAS, as torch.set_num_threads.

Checked where it shows: the process's thread count (/proc/PID/task) while a
script that ran a GEMM and large elementwise kernels waits, with 1 thread
set against the environment's 2 (OpenMP keeps its pool, so the count says
how many were ever started); results equal NumPy's whatever the count;
argument errors.  A script says READY on stderr and spins until a flag file
exists, so the count is read while it is alive.
"""
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lutil import NABLA, finish, report, run  # noqa: E402

TMP = tempfile.mkdtemp(prefix="nabla-threads-")


def threads_while_waiting(src, env_extra):
    """runs src (which ends by eprint("READY") and a spin on FLAG); returns
    (its thread count then, stdout, stderr, rc)"""
    flag = os.path.join(TMP, "go")
    path = os.path.join(TMP, "t.nbl")
    with open(path, "w") as f:
        f.write(src.replace("FLAG", flag))
    env = dict(os.environ, **env_extra)
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         stdin=subprocess.DEVNULL)
    try:
        line, t = "", time.time()
        while "READY" not in line and time.time() - t < 60:
            line = p.stderr.readline()
            if not line:
                break
        n = len(os.listdir(f"/proc/{p.pid}/task")) if "READY" in line else -1
        open(flag, "w").close()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if os.path.exists(flag):
            os.unlink(flag)
    return n, out, err, p.returncode


rng = np.random.default_rng()
a = rng.standard_normal((193, 257)).astype(np.float32)
b = rng.standard_normal((257, 131)).astype(np.float32)
np.save(os.path.join(TMP, "a.npy"), a)
np.save(os.path.join(TMP, "b.npy"), b)
want = a.astype(np.float64) @ b.astype(np.float64)
WORK = f"""
a = load_npy("{TMP}/a.npy")
b = load_npy("{TMP}/b.npy")
c = a @ b
big = randn(2000000)
s = sum(exp(big * 0.001) + big)
save_npy("{TMP}/c_OUT.npy", c)
print("THREADS", num_threads())
eprint("READY")
while not exists("FLAG") {{ }}
"""

env = {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
n_default, out_d, err_d, rc_d = threads_while_waiting(WORK.replace("OUT", "default"), env)
n_one, out_1, err_1, rc_1 = threads_while_waiting("set_num_threads(1)\n" + WORK.replace("OUT", "one"), env)
c_def = np.load(os.path.join(TMP, "c_default.npy")) if rc_d == 0 else None
c_one = np.load(os.path.join(TMP, "c_one.npy")) if rc_1 == 0 else None
ok = (rc_d == 0 and rc_1 == 0 and "THREADS 2" in out_d and "THREADS 1" in out_1
      and n_one == 1 and n_default >= 2)
report("threads/set_num_threads_one_thread", ok,
       f"threads with the default {n_default}, with set_num_threads(1) {n_one}; out {out_d!r} {out_1!r}; err {err_d[-200:]!r} {err_1[-200:]!r}")
ok = c_def is not None and c_one is not None and np.allclose(c_def, want, rtol=1e-4, atol=1e-4) and np.allclose(c_one, want, rtol=1e-4, atol=1e-4)
report("threads/results_equal_numpy", ok, "the GEMM differs from NumPy's")

# set after OpenBLAS was loaded (a GEMM ran first): still one thread for what follows
k = random.randint(3, 9)
rc, out, err = run(f"c = ones(64, 64) @ ones(64, 64)\nset_num_threads(1)\nprint(num_threads())\nset_num_threads({k})\nprint(num_threads())\n",
                   extra_env=env)
report("threads/set_and_read_back", rc == 0 and out == f"1\n{k}\n", f"rc {rc} out {out!r} err {err[-300:]!r}")

for arg, msg in (("0", "ValueError: set_num_threads: n must be an integer from 1 to 4096, got 0"),
                 ("1.5", "ValueError: set_num_threads: n must be an integer from 1 to 4096, got 1.5"),
                 ("5000", "ValueError: set_num_threads: n must be an integer from 1 to 4096, got 5000"),
                 ('"2"', "TypeError: set_num_threads")):
    rc, out, err = run(f"set_num_threads({arg})\n")
    report(f"threads/bad_argument_{arg}", rc == 1 and msg in err, f"rc {rc} err {err[-300:]!r}")

finish()
