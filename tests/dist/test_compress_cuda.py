#!/usr/bin/python3
"""tests/dist: gradient compression (dist.compressor with dist.average_grads)
on CUDA gradients, on the emulated device (NABLA_CUDA_EMULATE=force).

For each kind ("bf16", "fp16", "topk", "powersgd"), two workers average the
same fresh random gradients over three steps (error feedback carried
between them) once with the gradients on the device and once on the host.
The device run gives the host run's results -- within 1e-6 of the largest
value for the 16-bit and top-k kinds (the same rounding, the same
selection), 1e-5 for PowerSGD (the device's matrix products against the
CPU's) -- and keeps its results and its error-feedback residuals on the
device.  Before, a CUDA gradient failed ("expected all tensors on the same
device"), and dist_all_reduce_half read a device tensor through a NULL host
pointer.  The host run is checked against NumPy by test_parallel.py.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_compress_cuda.py
"""
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, report, skip, test  # noqa: E402

BUILD = os.environ.get("NABLA_BUILD") or os.path.dirname(NABLA)
MODULE = os.path.join(BUILD, "cuda", "emu", "nabla_cuda_emu.so")
ENV = dict(os.environ, NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2", NO_COLOR="1")
SEED = int(os.environ.get("COMPRESS_SEED") or random.SystemRandom().randrange(1, 10**6))

SRC = """
import dist
dist.start(2)
fn go(kind, dev) = dist.run(fn(kind, dev, seed0) {{
  import dist
  st = dist.compressor(kind, ratio=0.3, rank=2)
  outs = list()
  for s in 0..3 {{
    seed(seed0 + 10 * s + dist.rank())
    gs = list(randn(6, 5).to(dev), randn(7).to(dev), randn(3, 4, 2).to(dev))
    out = dist.average_grads(gs, compression=st)
    outs = map(out, fn(t) t)
  }}
  list(map(outs, fn(t) t.to("cpu")), map(outs, fn(t) str(t.device)), map(st.residual, fn(t) str(t.device)))
}}, kind, dev, {seed})
for kind in list("bf16", "fp16", "topk", "powersgd") {{
  d = go(kind, "cuda"); h = go(kind, "cpu")
  diff = 0; big = 0
  for w in 0..2 {{ for i in 0..len(h[w][0]) {{
    diff = max(diff, max(abs(d[w][0][i] - h[w][0][i])).item()); big = max(big, max(abs(h[w][0][i])).item())
  }} }}
  devs = list()
  for w in 0..2 {{ for x in d[w][1] {{ push(devs, x) }}; for x in d[w][2] {{ push(devs, x) }} }}
  print("R", kind, diff / big, big, join(devs, ","))
}}
"""


@test
def test_compression_on_cuda_gradients(name):
    if not os.path.exists(MODULE):
        skip(name, f"the emulated CUDA module is not built ({MODULE}: configure without -Dcuda=disabled)")
        return
    p = subprocess.run([NABLA, dutil.script(SRC.format(seed=SEED))], capture_output=True, text=True, timeout=600, env=ENV)
    dutil.sanitizer_check(p.stderr)
    rows = {l.split()[1]: l.split()[2:] for l in p.stdout.splitlines() if l.startswith("R ")}
    for kind, tol in (("bf16", 1e-6), ("fp16", 1e-6), ("topk", 1e-6), ("powersgd", 1e-5)):
        v = rows.get(kind)
        ok = (p.returncode == 0 and v is not None and float(v[0]) <= tol and float(v[1]) > 0.1
              and set(v[2].split(",")) <= {"cuda", "cuda:0"})
        report(f"{name}_{kind}", ok, f"[rel diff to the host run, largest value, devices of results and residuals]={v} "
               f"rc={p.returncode} seed={SEED} err={p.stderr[-1500:]!r}")


dutil.finish()
