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

# every library runs with the count set: OpenMP (our kernels), OpenBLAS and
# oneDNN, whose cached primitives are made for one count each (a conv made at
# 2 threads kept 2 after set_num_threads(1)); the results at each count equal
# torch's.  thread_counts() reports each library's count.
import torch  # noqa: E402
x = rng.standard_normal((5, 7, 13, 11)).astype(np.float32)
w = rng.standard_normal((6, 7, 3, 3)).astype(np.float32)
for name, arr in (("x", x), ("w", w)):
    np.save(os.path.join(TMP, f"{name}.npy"), arr)
counts = [2, random.randint(3, 5), 1, 2]
src = [f'x = load_npy("{TMP}/x.npy"); w = load_npy("{TMP}/w.npy"); a = load_npy("{TMP}/a.npy"); b = load_npy("{TMP}/b.npy")']
for i, k in enumerate(counts):
    src.append(f'set_num_threads({k}); y = conv2d(x, w, nil, 1, 1); c = a @ b; m = (a.to("bf16") @ b.to("bf16")).to("f32")\n'
               f'tc = thread_counts(); print("COUNTS", {k}, tc.openmp, tc.openblas, tc.onednn)\n'
               f'save_npy("{TMP}/y{i}.npy", y); save_npy("{TMP}/c{i}.npy", c); save_npy("{TMP}/m{i}.npy", m)')
rc, out, err = run("\n".join(src) + "\n", extra_env=env)
rows = [list(map(int, line.split()[1:])) for line in out.splitlines() if line.startswith("COUNTS")]
report("threads/counts_reach_openmp_openblas", rc == 0 and len(rows) == len(counts) and all(r[1] == r[0] and r[2] == r[0] for r in rows),
       f"rc {rc} rows (set, openmp, openblas, onednn) {rows} err {err[-300:]!r}")
if rc == 0 and rows and all(r[3] == 0 for r in rows):
    print("SKIP: threads/counts_reach_onednn: oneDNN did not run (not installed, or NABLA_ONEDNN=0)")
else:
    report("threads/counts_reach_onednn", rc == 0 and len(rows) == len(counts) and all(r[3] == r[0] for r in rows),
           f"rc {rc} rows (set, openmp, openblas, onednn) {rows}")
if rc == 0:
    y_ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=1).numpy()
    ab16 = torch.tensor(a).bfloat16().double(); bb16 = torch.tensor(b).bfloat16().double()
    m_ref = (ab16 @ bb16).numpy()
    for i, k in enumerate(counts):
        y, c, m = (np.load(os.path.join(TMP, f"{t}{i}.npy")) for t in "ycm")
        report(f"threads/results_at_{k}_threads_{i}_equal_torch",
               np.allclose(y, y_ref, rtol=1e-4, atol=1e-4) and np.allclose(c, want, rtol=1e-4, atol=1e-4)
               and np.allclose(m, m_ref, rtol=2 ** -7, atol=2 ** -7 * np.abs(m_ref).max()),
               f"max |conv - torch| {np.abs(y - y_ref).max():.3g}, |gemm - numpy| {np.abs(c - want).max():.3g}, |bf16 - torch| {np.abs(m - m_ref).max():.3g}")

for arg, msg in (("0", "ValueError: set_num_threads: n must be an integer from 1 to 4096, got 0"),
                 ("1.5", "ValueError: set_num_threads: n must be an integer from 1 to 4096, got 1.5"),
                 ("5000", "ValueError: set_num_threads: n must be an integer from 1 to 4096, got 5000"),
                 ('"2"', "TypeError: set_num_threads")):
    rc, out, err = run(f"set_num_threads({arg})\n")
    report(f"threads/bad_argument_{arg}", rc == 1 and msg in err, f"rc {rc} err {err[-300:]!r}")

finish()
