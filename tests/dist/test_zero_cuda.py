#!/usr/bin/python3
"""tests/dist: ZeRO (dist.zero, stdlib/zero.nbl) with the model on the GPU,
run on the emulated CUDA device (cuda/emu/, docs/cuda.md "Emulated
device"): every worker's parameters, gradient shards, optimizer shards and
gathered units are CUDA tensors, the real cuda/*.cu kernels compute them.
NCCL is not emulated, so the collectives of CUDA tensors take the ring with
host staging (the NCCL paths run in the GPU session kit, tools/gpu-session.sh).

- stages 1, 2 and 3 at world 2 with gradient accumulation (dist.no_sync)
  and global-norm clipping, and with grad() trees, over 2 AdamW steps (STEPS): equal
  (2e-5 relative to the largest parameter: SAME_DEVICE_STAGE_RTOL says why) to plain dist.data_parallel of
  the same CUDA model, and to the same stage on CPU workers (1e-5, CROSS_DEVICE_RTOL); ranks identical;
  the parameters, stage 2's gradient shards, stage 3's shards and the
  optimizer state stay on the device;
- offload="optimizer": the optimizer state and master shards are host
  tensors (pinned; the copies run on a side stream ordered by events:
  dist_offload_to_host / _to_device), the result equals the non-offloaded
  run (CROSS_DEVICE_RTOL: the update runs on the host); dist.memory()'s
  device bytes drop by exactly the optimizer's bytes, `offloaded` counts the
  host copies, and the CUDA caching allocator's live bytes grow by at least
  the optimizer's bytes less than without offload;
- stage 3 prefetches CUDA shards (staged on the gather thread): every unit's
  gather but the unavoidable ones is prefetched and used, none dropped, and
  the result still equals data_parallel;
- the offload copies' ordering: the emulated device defers a side stream's
  copies until something waits for them and checks that a side-stream copy
  reading device memory is ordered after the compute stream's kernels
  (cuda/emu/api.cpp); with each of the three waits left out
  (NABLA_TEST_OFFLOAD_SKIP) the copies give wrong values or the emulator's
  fault (an unordered read; in training, a deferred copy whose device buffer
  was freed meanwhile), with all of them the values are right; dist_pinned tensors are CPU
  tensors in pinned memory, counted by dist_pinned_bytes / dist.memory().pinned
  and freed with their last reference (emulated only: a GPU cannot be made to
  show a race on demand).  The training loop's check uses layers wide enough
  that the host gradient shards are pinned at any world up to 8: a CPU tensor
  of 512 bytes or less lives in its header, unpinned, and a copy into
  unpinned memory is synchronous, so no wait can be missing (at world 4 the
  12-wide model's 280-byte shards made the missing host wait uncatchable);
- offload's copies during backward (per_bucket): stage 2, each bucket's piece
  of the reduce-scattered shard, and stage 1, this rank's slice of each
  all-reduced bucket (the buckets on the device: one GPU, or NCCL); stage 3,
  each unit's gradient shard as soon as backward finished it (any backend).
  With several buckets or units, accumulation under dist.no_sync and
  clipping: equal to the run without offload and to data parallelism; the
  bytes copied during backward are > 0 and, with those after, exactly the
  shard once per real step; NABLA_OFFLOAD_AFTER_BACKWARD=1 (the old path)
  equal, all copied after; the copy's wait on the compute stream left out is
  reported, the host wait before the update left out gives other parameters;
  under the ring (world > 1) stages 1 and 2 take the reducer's host buckets
  with no copy; bf16 parameters (f32 master shards) equal to no offload; a
  .grad replaced or written in place before z.step() is what the offloaded
  update uses (the copies made during backward are dropped);
- a sharded checkpoint of the GPU model (stages 1-3, with and without
  offload) saved mid-run and loaded into a fresh dist.zero trains on to the
  uninterrupted run's parameters.

Without the emulated module (a build configured with -Dcuda=disabled, or no
CUDA headers) every test prints SKIP.

On a GPU machine (tests/cuda/run_gpu.sh's `zero` phase) the same checks run
on the real device: ZERO_CUDA=real (the GPU, not the emulator; SKIP without
one), ZERO_BACKEND=ring|nccl (nccl: stage 2's buckets and gradient shards on
the device, reduce-scattered by NCCL; checked through the reducer's stats),
ZERO_WORLD=N workers (nccl: one GPU each).  Where no prefetch can happen
(world 1, or nccl) the prefetch test checks that none was counted; under
nccl, test_cuda_stage3_nccl_prefetch checks prefetch="nccl" (asynchronous
NCCL all_gathers) against data parallelism and the ring (SKIP elsewhere:
NCCL is not emulated).

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_zero_cuda.py
"""
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, report, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("NABLA_BUILD") or os.path.dirname(NABLA)
MODULE = os.path.join(BUILD, "cuda", "emu", "nabla_cuda_emu.so")
# The device's kernels against the CPU's (another summation order, CUDA's
# math against SLEEF) differ by a few f32 ULPs per op; four AdamW steps with
# clipping carry that to ~1.5e-6 relative on some seeds.  Offload against
# none is such a comparison too: the offloaded update runs on the host's
# kernels (on a real GPU, nvcc's fused multiply-adds against the CPU's code).
CROSS_DEVICE_RTOL = 1e-5
# A stage against data parallelism on one device: the same kernels, but the
# micro-batch gradients are summed in another order (reduce-scattered per
# micro-batch, or accumulated into shards, against all-reduced once), and the
# clip norm is a sum of shard norms.  Elements whose accumulated gradient
# nearly cancels differ by a few ULPs of the terms, which AdamW's m/sqrt(v)
# turns into differences of the update near eps: 1.46e-6 relative after four
# steps of the grad-tree, clip 0.05 case on seed 331488 (stage 3).  The CPU
# suite (test_zero.py) runs the same comparisons in f64 as well: there the
# stages equal data parallelism within 1.7e-14, about as many units of
# rounding (~130) as its worst f32 seed's 7.6e-6 (108261), so the f32
# differences are rounding, not another computation; it judges f32 by
# torch.testing's float32 tolerance (1e-5 + 1.3e-6 |b|), which for these
# parameters (largest ~0.5) is ~2e-5 of the largest.  A missed or doubled
# update (lr 0.05) moves parameters by orders of magnitude more.
SAME_DEVICE_STAGE_RTOL = 2e-5
# AdamW steps of every training run (cfg_of's default), each of 2 micro-batches: the second step is
# the first that reads the optimizer state and the gradients zeroed after the first (the tolerances
# above were measured over four, where the differences are larger; two keep make test's budget)
STEPS = 2
SEED = int(os.environ.get("ZERO_SEED") or random.SystemRandom().randrange(1, 10**6))
REAL = os.environ.get("ZERO_CUDA") == "real"
BACKEND = os.environ.get("ZERO_BACKEND") or "ring"
WORLD = int(os.environ.get("ZERO_WORLD") or 2)
# the workers inherit the environment: each emulates its own device
ENV = dict(os.environ, NO_COLOR="1") if REAL else dict(os.environ, NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2", NO_COLOR="1")
ENV.pop("NABLA_CUDA_DISABLE", None)
if not REAL:
    ENV.pop("NABLA_CUDA_MODULE", None)
ASAN = os.environ.get("NABLA_ASAN") == "1"
if ASAN:
    ENV.setdefault("ASAN_OPTIONS", "detect_leaks=1")


def release_only(name):
    """the ASan pass leaves out the variants whose C paths the other cases
    already run (make test's budget); the release pass runs them all"""
    if ASAN:
        skip(name, "a variant of the cases the ASan pass runs: run by the release pass")
    return ASAN


def run(src, timeout=300):
    p = subprocess.run([NABLA, dutil.script(src)], capture_output=True, text=True, timeout=timeout, env=ENV)
    dutil.sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def values(out, key):
    for line in out.splitlines():
        if line.startswith(f"R {key} "):
            return line.split()[2:]
    return None


_real_ok = []


def prelude(world):
    return PRELUDE.format(seed=SEED, world=world, backend=BACKEND, steps=STEPS)


def have_emulator(name):
    if REAL:
        if not _real_ok:
            p = subprocess.run([NABLA, "-e", 'print(if cuda.available() { "yes" } else { cuda.unavailable_reason() })'],
                               capture_output=True, text=True, timeout=120, env=ENV)
            _real_ok.append(p.stdout.strip())
        if _real_ok[0] != "yes":
            skip(name, f"ZERO_CUDA=real but no usable GPU: {_real_ok[0]}")
            return False
        return True
    if not os.path.exists(MODULE):
        skip(name, f"the emulated CUDA module is not built ({MODULE}: configure without -Dcuda=disabled, with CUDA headers)")
        return False
    return True


# ---- shared sessions ---------------------------------------------------------------------------
# A session is three processes (the session and its workers), each loading the emulated module: under
# ASan most of a small check's time.  So the checks that need no environment switch of their own add
# their nabla code (shared(world, src)) when this file is read, and the first of them that runs starts
# ONE session per world size with all of it (shared_output(world)); each check reads its own `R key`
# lines (keys unique across the fragments).  Every train() call seeds its model, data and optimizer
# itself, so a fragment computes what it computed in a session of its own.  The @test functions run
# after every fragment is known (LATER, run at the end).
SHARED = {}
_shared_result = {}
LATER = []


def later(fn):
    LATER.append(fn)
    return fn


def shared(world, src, first=False):
    frags = SHARED.setdefault(world, [])
    if first:
        frags.insert(0, src)
    else:
        frags.append(src)


def shared_output(world):
    """(rc, stdout, stderr) of the one session at `world` running every fragment registered for it"""
    if world not in _shared_result:
        src = prelude(world) + "".join(SHARED.get(world, []))
        try:
            _shared_result[world] = run(src, timeout=1800)
        except (AssertionError, subprocess.TimeoutExpired) as e:
            _shared_result[world] = (-1, "", f"{type(e).__name__}: {e}")
    return _shared_result[world]


PRELUDE = """
import nn
import optim
import dist
seed({seed})
X = randn(16, 6); Y = randint(0, 3, list(16))
fn lf(m, x, y) = cross_entropy(m(x).to("f32"), y)
# the model's tensors moved to device d (and cast to dtype dt: nil keeps f32)
fn todev(v, d, dt=nil) {{
  if is_tensor(v) {{ return if dt == nil {{ v.to(d) }} else {{ v.to(d).to(dt) }} }}
  if type(v) == "record" {{ for k in keys(v) {{ v[k] = todev(v[k], d, dt) }} }}
  else if type(v) == "list" {{ for i in 0..len(v) {{ v[i] = todev(v[i], d, dt) }} }}
  v
}}
dist.start({world}, backend="{backend}")
print("R backend", dist.info().backend)
dist.push(X=X, Y=Y, lf=lf, todev=todev)
# trains the same model on every worker's device dev, with data_parallel
# (stage 0) or dist.zero; returns [parameters (on the host), devices seen, prefetch stats]
fn train(cfg) = dist.run(fn(cfg) {{
  import nn
  import optim
  seed({seed} + 1)
  m = requires_grad(todev(nn.mlp(list(6, cfg.width, cfg.width, 3)), cfg.dev, cfg.dtype))
  opt = if cfg.eps == nil {{ optim.adamw(m, lr=0.05, weight_decay=0.1) }} else {{ optim.adamw(m, lr=0.05, weight_decay=0.1, eps=cfg.eps) }}
  z = nil
  if cfg.stage == 0 {{ dist.data_parallel(m) }}
  else {{ z = dist.zero(m, opt, stage=cfg.stage, offload=cfg.offload, prefetch=cfg.prefetch, bucket_mb=cfg.bucket_mb) }}
  w = dist.world_size(); k = dist.rank()
  off0 = dist_offload_stats()
  b = 16 / w; mb = b / cfg.accum
  seen = list()
  for s in 0..cfg.steps {{
    for a in 0..cfg.accum {{
      x = X[k * b + a * mb:k * b + (a + 1) * mb].to(cfg.dev); y = Y[k * b + a * mb:k * b + (a + 1) * mb].to(cfg.dev)
      if cfg.dtype != nil {{ x = x.to(cfg.dtype) }}
      if cfg.tree {{
        g = if cfg.stage == 3 {{ z.grad(fn(m) lf(m, x, y))(m) }} else {{ grad(fn(m) lf(m, x, y))(m) }}
        if cfg.stage == 0 {{ clip_grad_norm(g, cfg.clip); opt.step(g) }} else {{ z.step(g, max_norm=cfg.clip) }}
      }} else {{
        f = fn() backward(lf(m, x, y) / cfg.accum)
        if a < cfg.accum - 1 {{ dist.no_sync(f) }} else {{ f() }}
      }}
    }}
    # a gradient changed between backward and step: replaced, or written in place
    if cfg.edit != nil {{
      for t in if cfg.stage == 3 {{ z.shards }} else {{ nn.parameters(m) }} {{
        if t.grad != nil {{ if cfg.edit == "replace" {{ t.grad = t.grad + 0.01 }} else {{ no_grad {{ t.grad.add_(0.01) }} }} }}
      }}
    }}
    if not cfg.tree {{
      if cfg.stage == 0 {{ clip_grad_norm(m, cfg.clip); opt.step(); opt.zero_grad() }}
      else {{
        if cfg.stage == 2 {{ z.step(max_norm=cfg.clip); for t in z.grad_shards {{ push(seen, "gradshard:" + t.device) }}; z.zero_grad() }}
        else {{ z.step(max_norm=cfg.clip); z.zero_grad() }}
      }}
    }}
  }}
  if cfg.stage == 1 or cfg.stage == 2 {{ push(seen, "buckets:" + dist_reducer_stats().buckets_on) }}
  ps = if cfg.stage == 3 {{ z.full_params() }} else {{ nn.parameters(m) }}
  for p in ps {{ push(seen, "param:" + p.device) }}
  if z != nil {{
    for t in tree_tensors(z.opt.state) {{ push(seen, "state:" + t.device) }}
    if cfg.stage == 3 {{ for s in z.shards {{ push(seen, "shard:" + s.device) }} }}
  }}
  st = if cfg.stage == 3 {{ z.prefetch_stats() }} else {{ nil }}
  units = if cfg.stage == 3 {{ len(z.units) - 1 }} else {{ 0 }}
  # offload's gradient-shard bytes copied device->host during backward and after it, the
  # shard's bytes (f32; stage 3: every unit's),
  # the reducer's buckets (stage 3: those units), host-resident bytes, the bytes of the first
  # host gradient tensor (stages 1/2: the shard; 3: the first layer's, whose gradient backward
  # finishes last: on the emulated device, whose side stream runs a copy when the next one is
  # ordered, the copy a missing host wait leaves in flight).  A CPU tensor of 512 bytes or less
  # lives in its header, not pinned, and a copy into unpinned memory is synchronous: no wait can
  # be missing there.
  off1 = dist_offload_stats()
  noparam = 0
  if cfg.stage == 3 {{ for u in z.units {{ if u.total == 0 {{ noparam += numel(u.shard) * 4 }} }} }}
  ost = list(off1.during_backward - off0.during_backward, off1.after_backward - off0.after_backward,
             if z == nil {{ 0 }} else if cfg.stage != 3 {{ sum(map(z.lays, fn(l) l.chunk)).item() * 4 }}
             else {{ sum(map(z.shards, numel)).item() * 4 }},
             if cfg.stage == 1 or cfg.stage == 2 {{ dist_reducer_stats().buckets }} else if cfg.stage == 3 {{ len(filter(z.units, fn(u) u.total > 0)) }} else {{ 0 }},
             off1.host_resident - off0.host_resident,
             if z != nil and z.hgrads != nil {{ numel(z.hgrads[0]) * 4 }} else {{ 0 }},
             # stage 3: the bytes of units without parameters (the root here): no gradient, no copy
             # during backward (step() copies every shard after it)
             noparam)
  list(map(ps, fn(p) detach(p).cpu().to("f32")), seen, st, units, ost)
}}, cfg)
fn cfg_of(stage, dev="cuda", steps={steps}, accum=2, clip=0.05, tree=false, offload=nil, prefetch=false, bucket_mb=25, width=12, eps=nil, dtype=nil, edit=nil) =
  {{stage: stage, dev: dev, steps: steps, accum: accum, clip: clip, tree: tree, offload: offload, prefetch: prefetch, bucket_mb: bucket_mb, width: width, eps: eps, dtype: dtype, edit: edit}}
# [largest |a - b| / largest |b| over every rank's parameters, largest difference between a's ranks]
fn compare(ra, rb) {{
  d = 0; big = 0; ranks = 0
  for w in 0..len(ra) {{
    for i in 0..len(ra[w][0]) {{
      d = max(d, max(abs(ra[w][0][i] - rb[w][0][i])).item()); big = max(big, max(abs(rb[w][0][i])).item())
      ranks = max(ranks, max(abs(ra[w][0][i] - ra[0][0][i])).item())
    }}
  }}
  list(d / big, ranks)
}}
fn moved(ra, rb) {{
  d = 0
  for i in 0..len(ra[0][0]) {{ d = max(d, max(abs(ra[0][0][i] - rb[0][0][i])).item()) }}
  d
}}
# the distinct devices seen on rank 0, as one word
fn devs(r) {{
  out = list()
  for s in r[0][1] {{ if len(filter(out, fn(o) o == s)) == 0 {{ push(out, s) }} }}
  join(out, ",")
}}
"""


def equivalence_src(tree):
    kw, tag = (", tree=true", "tree_") if tree else ("", "")
    return f"""
ref = train(cfg_of(0{kw}))
cpu0 = train(cfg_of(0, dev="cpu"{kw}))
start = train(cfg_of(0, steps=0))
print("R {tag}dp_cuda_vs_cpu", compare(ref, cpu0)[0], compare(ref, cpu0)[1], moved(ref, start))
for st in 1..4 {{
  g = train(cfg_of(st{kw}))
  c = train(cfg_of(st, dev="cpu"{kw}))
  o = train(cfg_of(st, offload="optimizer"{kw}))
  print("R {tag}s{{st}}_vs_dp", compare(g, ref)[0], compare(g, ref)[1], devs(g))
  print("R {tag}s{{st}}_vs_cpu", compare(g, c)[0], compare(g, c)[1])
  print("R {tag}s{{st}}_offload", compare(o, g)[0], compare(o, g)[1], devs(o))
}}
"""


shared(WORLD, equivalence_src(False))
if not ASAN:
    shared(WORLD, equivalence_src(True))


def equivalence(name, tree):
    rc, out, err = shared_output(WORLD)
    tag = "tree_" if tree else ""
    why = f"rc={rc} seed={SEED} err={err[-1500:]!r}"
    if values(out, "backend") != [BACKEND]:
        report(f"{name}_backend", False, f"asked for {BACKEND}, got {values(out, 'backend')} {why}")
        return
    # where stages 1/2's reducer keeps its buckets: the device under NCCL, the host under the ring
    # (at world 1: the device too, no collective is needed)
    def bk(st):
        return {"buckets:cuda" if BACKEND == "nccl" or WORLD == 1 else "buckets:cpu"}
    v = values(out, tag + "dp_cuda_vs_cpu")
    report(f"{name}_dp_cuda_equals_cpu", rc == 0 and v is not None and float(v[0]) <= CROSS_DEVICE_RTOL and float(v[1]) == 0 and float(v[2]) > 1e-3,
           f"[rel diff, rank diff, moved]={v} {why}")
    for st in (1, 2, 3):
        v = values(out, f"{tag}s{st}_vs_dp")
        want = ({"param:cuda", "state:cuda"} | ({"shard:cuda"} if st == 3 else bk(st))
                | ({"gradshard:cuda"} if st == 2 and not tree else set()))
        ok = rc == 0 and v is not None and float(v[0]) <= SAME_DEVICE_STAGE_RTOL and float(v[1]) == 0 and set(v[2].split(",")) == want
        report(f"{name}_stage{st}_equals_data_parallel", ok, f"[rel diff, rank diff, devices]={v} want {sorted(want)} {why}")
        v = values(out, f"{tag}s{st}_vs_cpu")
        ok = rc == 0 and v is not None and float(v[0]) <= CROSS_DEVICE_RTOL and float(v[1]) == 0
        report(f"{name}_stage{st}_equals_cpu_workers", ok, f"[rel diff, rank diff]={v} {why}")
        v = values(out, f"{tag}s{st}_offload")
        want = ({"param:cuda", "state:cpu"} | ({"shard:cuda"} if st == 3 else bk(st))
                | ({"gradshard:cuda"} if st == 2 and not tree else set()))
        ok = rc == 0 and v is not None and float(v[0]) <= CROSS_DEVICE_RTOL and float(v[1]) == 0 and set(v[2].split(",")) == want
        report(f"{name}_stage{st}_offload_optimizer_equals", ok, f"[rel diff, rank diff, devices]={v} want {sorted(want)} {why}")


@later
def test_cuda_accum_clip(name):
    if have_emulator(name):
        equivalence(name, tree=False)


@later
def test_cuda_grad_tree_clip(name):
    if not release_only(name) and have_emulator(name):
        equivalence(name, tree=True)


shared(WORLD, """
ref = train(cfg_of(0))
p = train(cfg_of(3, prefetch=true))
print("R pf", compare(p, ref)[0], compare(p, ref)[1], p[0][2].used_forward, p[0][2].used_backward, p[0][2].dropped, p[0][3], devs(p))
""")


@later
def test_cuda_stage3_prefetch(name):
    """every unit's gather is prefetched (staged through the host on the gather thread, back on the device
    at the wait) from the second forward on, and all but the last unit's in backward; none dropped; equal
    to data_parallel"""
    if not have_emulator(name):
        return
    rc, out, err = shared_output(WORLD)
    v = values(out, "pf")
    calls, units = STEPS * 2, 3
    staged = WORLD > 1 and BACKEND == "ring"   # else every unit gathers at use
    ok = (rc == 0 and v is not None and float(v[0]) <= SAME_DEVICE_STAGE_RTOL and float(v[1]) == 0 and int(v[5]) == units
          and int(v[2]) == ((calls - 1) * units if staged else 0) and int(v[3]) == (calls * (units - 1) if staged else 0)
          and int(v[4]) == 0
          and set(v[6].split(",")) == {"param:cuda", "state:cuda", "shard:cuda"})
    report(name, ok, f"[rel diff, rank diff, used fwd, used bwd, dropped, units, devices]={v} rc={rc} seed={SEED} err={err[-1500:]!r}")


@later
def test_cuda_stage3_nccl_prefetch(name):
    """prefetch="nccl" under the nccl backend: each next unit gathered by an asynchronous NCCL all_gather
    that the compute stream waits for at use; as many prefetches used as the ring's staged ones, none
    dropped; equal to data_parallel under NCCL and to the ring backend's prefetching run of the same
    model in the same process (SAME_DEVICE_STAGE_RTOL: another summation order).  Runs in the GPU kit's zero phase (ZERO_BACKEND=nccl)"""
    if BACKEND != "nccl":
        skip(name, "NCCL does not run on the emulated device: the GPU kit's zero phase runs this (ZERO_BACKEND=nccl)")
        return
    if not have_emulator(name):
        return
    src = prelude(WORLD) + f"""
ref = train(cfg_of(0))
p = train(cfg_of(3, prefetch="nccl"))
print("R pf", compare(p, ref)[0], compare(p, ref)[1], p[0][2].used_forward, p[0][2].used_backward, p[0][2].dropped, p[0][3], devs(p))
dist.stop()
dist.start({WORLD}, backend="ring")
dist.push(X=X, Y=Y, lf=lf, todev=todev)
q = train(cfg_of(3, prefetch=true))
print("R vs_ring", compare(p, q)[0], compare(p, q)[1], q[0][2].used_forward)
"""
    rc, out, err = run(src)
    v, w = values(out, "pf"), values(out, "vs_ring")
    calls, units = STEPS * 2, 3
    pre = True   # prefetch="nccl" prefetches at world 1 too (a device copy), so one GPU checks the path
    ok = (rc == 0 and v is not None and float(v[0]) <= SAME_DEVICE_STAGE_RTOL and float(v[1]) == 0 and int(v[5]) == units
          and int(v[2]) == ((calls - 1) * units if pre else 0) and int(v[3]) == (calls * (units - 1) if pre else 0)
          and int(v[4]) == 0 and set(v[6].split(",")) == {"param:cuda", "state:cuda", "shard:cuda"}
          and w is not None and float(w[0]) <= SAME_DEVICE_STAGE_RTOL and (WORLD == 1 or int(w[2]) == int(v[2])))
    report(name, ok, f"[rel diff, rank diff, used fwd, used bwd, dropped, units, devices]={v} "
           f"[vs ring rel diff, rank diff, ring used fwd]={w} rc={rc} seed={SEED} err={err[-1500:]!r}")


# (first in the session: nothing ran on the workers before its measurements)
shared(WORLD, f"""
fn meas(stage, off) = dist.run(fn(stage, off) {{
  import nn
  import optim
  seed({SEED} + 1)
  m = requires_grad(todev(nn.mlp(list(64, 256, 256, 8)), "cuda"))
  x = randn(4, 64, device="cuda"); y = randint(0, 8, list(4)).to("cuda")
  # the previous run's reducer registration (its device buckets and gradient shard, where
  # they are on the device: NCCL, or stage 2 at world 1) goes now, not inside this measurement
  dist_reducer_clear()
  cuda.synchronize()
  a0 = cuda.memory().allocated
  z = dist.zero(m, optim.adamw(m, lr=0.01), stage=stage, offload=off)
  for s in 0..2 {{ backward(cross_entropy(m(x), y)); z.step(); z.zero_grad() }}
  cuda.synchronize()
  a1 = cuda.memory().allocated
  mem = dist.memory(z)
  hosted = 0
  for t in tree_tensors(z.opt.state) {{ if t.device == "cpu" {{ hosted += numel(t) * 4 }} }}
  if z.masters != nil {{ for t in z.masters {{ if t.device == "cpu" {{ hosted += numel(t) * 4 }} }} }}
  if z.hgrads != nil {{ for t in z.hgrads {{ if t.device == "cpu" {{ hosted += numel(t) * 4 }} }} }}
  pins = 0
  if z.masters != nil {{ for t in z.masters {{ if t.device == "cpu" {{ pins += numel(t) * 4 }} }} }}
  if z.hgrads != nil {{ for t in z.hgrads {{ pins += numel(t) * 4 }} }}
  r = list(a1 - a0, mem.device, mem.offloaded, mem.optimizer, hosted, mem.device_saved, mem.pinned, pins)
  z = nil; m = nil; mem = nil
  r
}}, stage, off)
for st in 1..4 {{
  a = meas(st, nil); b = meas(st, "optimizer")
  print("R m{{st}}", a[0][0], b[0][0], a[0][1], b[0][1], b[0][2], a[0][3], b[0][4], a[{WORLD} - 1][1], b[{WORLD} - 1][1], a[0][5], b[0][5], b[0][6], b[0][7])
}}
""", first=True)


@later
def test_cuda_offload_memory(name):
    """offload="optimizer" on a GPU model: dist.memory()'s device bytes are the non-offloaded run's less
    its optimizer bytes (exactly), which `device_saved` reports, `offloaded` is the host optimizer state, master and gradient shards, and the
    caching allocator's live bytes over dist.zero + 2 steps grow by at least the optimizer bytes less; `pinned`
    covers the pinned master shards and gradient copies"""
    if not have_emulator(name):
        return
    rc, out, err = shared_output(WORLD)
    for st in (1, 2, 3):
        v = values(out, f"m{st}")
        ok = rc == 0 and v is not None
        if ok:
            alloc_a, alloc_b, dev_a, dev_b, off_b, opt_a, hosted_b, dev_a1, dev_b1, saved_a, saved_b, pinned_b, pins_b = (int(float(x)) for x in v)
            # AdamW's two f32 moments of this rank's slice: one flat layout (stages 1/2), or one per
            # unit plus the root's one padding element (stage 3)
            sizes = [64 * 256 + 256, 256 * 256 + 256, 256 * 8 + 8]
            want_opt = 8 * (-(-sum(sizes) // WORLD) if st < 3 else sum(-(-n // WORLD) for n in sizes) + 1)
            ok = (opt_a == want_opt and dev_b == dev_a - opt_a and saved_a == 0 and saved_b == dev_a - dev_b and dev_b1 == dev_a1 - opt_a and off_b == hosted_b
                  and off_b >= opt_a and alloc_a - alloc_b >= opt_a
                  # the master shards and gradient copies are pinned (earlier runs' may not be collected yet)
                  and pins_b > 0 and pinned_b >= pins_b)
        report(f"{name}_stage{st}", ok, f"[alloc grew, alloc grew offloaded, device, device offloaded, offloaded, "
               f"optimizer, hosted, device last rank, offloaded last rank, device_saved, device_saved offloaded, pinned, pinned expected]={v} rc={rc} seed={SEED} err={err[-1500:]!r}")



ORDER_SRC = """
seed({seed})
v = randn(1000)
x = v.to("cuda")
y = x * 2 + 1                       # a kernel writes y on the compute stream
h = dist_pinned(zeros(1000))        # pinned host tensors
b0 = dist_pinned_bytes()
dist_offload_to_host([y], [h])
print("R d2h", max(abs(h - (v * 2 + 1))).item(), h.device)
hp = dist_pinned(randn(1000))
d = zeros(1000, device="cuda")
dist_offload_to_device([hp], [d])
r = (d * 3).cpu()                   # a kernel reads d after the copy
print("R h2d", max(abs(r - hp * 3)).item())
w = dist_pinned(v)
print("R pinned", max(abs(w - v)).item(), w.device, b0, dist_pinned_bytes())
h = nil; hp = nil; w = nil
held = dist_pinned_bytes()          # hp: held until a host wait covers its copy
dist_offload_to_host([], [])        # one (no copies: only the wait)
print("R freed", held, dist_pinned_bytes())
"""


# the training loop of test_cuda_offload_ordering (tag "ord_": the ordered run, in the shared session)
ORDER_TRAIN = """
g = train(cfg_of(1, offload="optimizer", width=48))
print("R {tag}got", map(g[0][0], fn(t) sum(abs(t)).item()))
print("R {tag}first", g[{world} - 1][4][5])
"""
if not REAL:
    shared(WORLD, "dist.run(fn() dist_offload_after_backward(true))\n" + ORDER_TRAIN.format(tag="ord_", world=WORLD)
           + "dist.run(fn() dist_offload_after_backward(false))\n")


@later
def test_cuda_offload_ordering(name):
    """the offload copies on the side stream: right values when ordered; with each wait left out the
    emulated device shows the race (stale values) or reports the unordered read; pinned bytes counted
    and freed"""
    if REAL or not have_emulator(name):
        if REAL:
            skip(name, "the emulated device's ordering model (a GPU cannot be made to show the race)")
        return
    def go(skip_what):
        env = dict(ENV)
        if skip_what:
            env["NABLA_TEST_OFFLOAD_SKIP"] = skip_what
        p = subprocess.run([NABLA, dutil.script(ORDER_SRC.format(seed=SEED))], capture_output=True, text=True, timeout=120, env=env)
        dutil.sanitizer_check(p.stderr)
        return p.returncode, p.stdout, p.stderr
    rc, out, err = go(None)
    d2h, h2d, pin, fr = values(out, "d2h"), values(out, "h2d"), values(out, "pinned"), values(out, "freed")
    ok = (rc == 0 and d2h is not None and float(d2h[0]) == 0 and d2h[1] == "cpu" and h2d is not None and float(h2d[0]) <= 1e-6
          and pin is not None and float(pin[0]) == 0 and pin[1] == "cpu" and int(pin[2]) == 4000 and int(pin[3]) == 12000
          and fr is not None and int(fr[0]) == 4000 and int(fr[1]) == 0)
    report(f"{name}_ordered", ok, f"d2h={d2h} h2d={h2d} pinned={pin} freed={fr} rc={rc} err={err[-1500:]!r}")
    # the side stream's device->host copies not ordered after the kernel that wrote y: the checker's fault
    rc, out, err = go("compute-wait")
    ok = rc != 0 and "missing cudaStreamWaitEvent" in err and "dist_offload_to_host" in err
    report(f"{name}_missing_compute_wait_reported", ok, f"rc={rc} out={out[-300:]!r} err={err[-1500:]!r}")
    # the host reads h before waiting for the copy: it still holds zeros
    rc, out, err = go("host-wait")
    d2h = values(out, "d2h")
    ok = rc == 0 and d2h is not None and float(d2h[0]) > 0.5
    report(f"{name}_missing_host_wait_stale", ok, f"d2h={d2h} (a large difference expected) rc={rc} err={err[-1500:]!r}")
    # the kernel reading d is not ordered after the host->device copy: it reads the zeros
    rc, out, err = go("device-wait")
    h2d = values(out, "h2d")
    ok = rc == 0 and h2d is not None and float(h2d[0]) > 0.5
    report(f"{name}_missing_device_wait_stale", ok, f"h2d={h2d} (a large difference expected) rc={rc} err={err[-1500:]!r}")
    # and the training loop, each wait left out, against the ordered run: stage 1 with the copies after
    # backward (NABLA_OFFLOAD_AFTER_BACKWARD=1: dist_offload_to_host at step(); the per-bucket and
    # per-unit copies are per_bucket's). The layers are wide enough that every rank's host gradient
    # tensor is over 512 bytes up to world 8: a smaller CPU tensor lives in its header, unpinned, and
    # a copy into unpinned memory is synchronous, so no host wait can be missing (why this check
    # passed at world 2 but not at 4 with 12-wide layers: 70-element, 280-byte shards)
    # (the ordered run is in the shared session, the after-backward path set there by
    # dist_offload_after_backward; the runs with a wait left out set it by the environment)
    src = prelude(WORLD) + ORDER_TRAIN.format(tag="", world=WORLD)
    rc, so, err = shared_output(WORLD)
    base, first = values(so, "ord_got"), values(so, "ord_first")
    report(f"{name}_train_ordered", rc == 0 and base is not None and first is not None and float(first[0]) > 512,
           f"last rank's host gradient shard={first} bytes (must be > 512: pinned) rc={rc} err={err[-1500:]!r}")
    for what in ("host-wait", "device-wait", "compute-wait"):
        env = dict(ENV, NABLA_OFFLOAD_AFTER_BACKWARD="1", NABLA_TEST_OFFLOAD_SKIP=what)
        p = subprocess.run([NABLA, dutil.script(src)], capture_output=True, text=True, timeout=300, env=env)
        dutil.sanitizer_check(p.stderr)
        got = values(p.stdout, "got")
        if what == "compute-wait":
            report(f"{name}_train_missing_compute_wait_reported", p.returncode != 0 and "missing cudaStreamWaitEvent" in p.stderr,
                   f"rc={p.returncode} err={p.stderr[-1500:]!r}")
        else:
            ok = p.returncode != 0 or (got is not None and base is not None and got != base)
            report(f"{name}_train_missing_{what.replace('-', '_')}_caught", ok,
                   f"ordered={base} without the wait={got} rc={p.returncode} err={p.stderr[-1500:]!r}")


def per_bucket_src(stage):
    """per_bucket's run without a switch (in the shared session of its world)"""
    return f"""
g = train(cfg_of({stage}, bucket_mb=0.0001, width=96, eps=1e-5))
dp = train(cfg_of(0, width=96, eps=1e-5))
o = train(cfg_of({stage}, offload="optimizer", bucket_mb=0.0001, width=96, eps=1e-5))
print("R pb{stage}_vs_none", compare(o, g)[0], compare(o, g)[1], devs(o))
print("R pb{stage}_vs_dp", compare(o, dp)[0])
print("R pb{stage}_bytes", o[0][4][0], o[0][4][1], o[0][4][2], o[0][4][3], o[0][4][4], o[0][4][5], o[0][4][6])
print("R pb{stage}_got", map(o[0][0], fn(t) sum(abs(t)).item()))
# the old after-backward path (dist_offload_after_backward in the workers: NABLA_OFFLOAD_AFTER_BACKWARD's switch)
dist.run(fn() dist_offload_after_backward(true))
o = train(cfg_of({stage}, offload="optimizer", bucket_mb=0.0001, width=96, eps=1e-5))
dist.run(fn() dist_offload_after_backward(false))
print("R pb{stage}_ab_bytes", o[0][4][0], o[0][4][1], o[0][4][2], o[0][4][3], o[0][4][4], o[0][4][5], o[0][4][6])
print("R pb{stage}_ab_got", map(o[0][0], fn(t) sum(abs(t)).item()))
"""


def per_bucket(name, stage, world):
    """offload="optimizer" with the gradient shard copied device->host piece by piece during backward:
    stage 2, each bucket's piece of the reduce-scattered shard; stage 1, this rank's slice of each
    all-reduced bucket (both with the reducer's buckets on the device: one GPU, or NCCL); stage 3, each
    unit's gradient shard as soon as backward has finished it (any backend: the shards are on the
    device). Several buckets (bucket_mb tiny) or units with accumulation (dist.no_sync) and clipping,
    layers wide enough (96) that the first host gradient tensor is pinned (over 512 bytes) up to world 4
    (AdamW's eps 1e-5: with ~10k parameters some accumulated gradients nearly cancel, and eps 1e-8 turns
    their rounding into update differences of 1e-4 relative between stage 3 and data parallelism, on CPU
    workers too; with 1e-5 it is ~5e-7 over seeds, see SAME_DEVICE_STAGE_RTOL): equal to the run
    without offload (CROSS_DEVICE_RTOL: the update runs on the host's kernels) and to data parallelism;
    the bytes copied during backward are > 0 and, with those copied after, exactly the shard's bytes
    once per real step (not per micro-batch); the old after-backward path (NABLA_OFFLOAD_AFTER_BACKWARD=1)
    copies all of it after and gives the same parameters. On the emulated device each ordering of the
    copies left out is caught: the copy not ordered after the compute stream's work (reported), the
    host not waiting before the optimizer reads the copies (other parameters)."""
    # the runs with a wait left out (a process each: the switch is read from the environment, and a
    # reported fault ends the process) train only the offloaded model: their checks compare it with the
    # shared session's
    src_o = prelude(world) + f"""
o = train(cfg_of({stage}, offload="optimizer", bucket_mb=0.0001, width=96, eps=1e-5))
print("R bytes", o[0][4][0], o[0][4][1], o[0][4][2], o[0][4][3], o[0][4][4], o[0][4][5], o[0][4][6])
print("R got", map(o[0][0], fn(t) sum(abs(t)).item()))
"""
    def go(env_extra):
        env = dict(ENV, **env_extra)
        p = subprocess.run([NABLA, dutil.script(src_o)], capture_output=True, text=True, timeout=300, env=env)
        dutil.sanitizer_check(p.stderr)
        return p.returncode, p.stdout, p.stderr
    steps = STEPS
    want = {"param:cuda", "state:cpu"} | ({"shard:cuda"} if stage == 3 else {"buckets:cuda"}) | ({"gradshard:cuda"} if stage == 2 else set())
    rc, out, err = shared_output(world)
    why = f"rc={rc} seed={SEED} err={err[-1500:]!r}"
    t = f"pb{stage}_"
    v, d, b, base = values(out, t + "vs_none"), values(out, t + "vs_dp"), values(out, t + "bytes"), values(out, t + "got")
    ok = (rc == 0 and v is not None and float(v[0]) <= CROSS_DEVICE_RTOL and float(v[1]) == 0 and set(v[2].split(",")) == want)
    report(f"{name}_equals_no_offload", ok, f"[rel diff, rank diff, devices]={v} want {sorted(want)} {why}")
    report(f"{name}_equals_data_parallel", rc == 0 and d is not None and float(d[0]) <= SAME_DEVICE_STAGE_RTOL, f"rel diff={d} {why}")
    ok = (rc == 0 and b is not None and int(b[3]) >= 3 and int(b[0]) > 0
          and int(b[0]) + int(b[1]) == steps * (int(b[2]) - int(b[6])) and int(b[4]) == 0 and int(b[5]) > 512)
    report(f"{name}_copied_during_backward", ok,
           f"[bytes during backward, after, shard bytes, buckets/units, host-resident, first host tensor, no-parameter units]={b} "
           f"(want during > 0, during + after = {steps} x (shard - no-parameter units), >= 3 buckets or units, first > 512: pinned) {why}")
    b, got = values(out, t + "ab_bytes"), values(out, t + "ab_got")
    ok = (rc == 0 and base is not None and got == base and b is not None and int(b[0]) == 0
          and int(b[1]) == steps * int(b[2]))
    report(f"{name}_after_backward_switch", ok, f"parameters {got} (the per-bucket run's {base}) [during, after, shard, buckets]={b} rc={rc} err={err[-1500:]!r}")
    if REAL:
        skip(f"{name}_orderings", "the emulated device's ordering model (a GPU cannot be made to show the race)")
        return
    rc, out, err = go({"NABLA_TEST_OFFLOAD_SKIP": "bucket-compute-wait"})
    ok = rc != 0 and "missing cudaStreamWaitEvent" in err
    report(f"{name}_missing_compute_wait_reported", ok, f"rc={rc} err={err[-1500:]!r}")
    rc, out, err = go({"NABLA_TEST_OFFLOAD_SKIP": "bucket-host-wait"})
    got = values(out, "got")
    ok = rc != 0 or (got is not None and base is not None and got != base)
    report(f"{name}_missing_host_wait_caught", ok, f"ordered={base} without the wait={got} rc={rc} err={err[-1500:]!r}")


def ring_host_shard(name, stage):
    """under the ring at world > 1 the reducer's buckets are host memory: offload takes the gradient
    shard from there with no device->host copy (stage 2: the averaged host shard at take(); stage 1:
    each bucket's slice on the reducer's thread as soon as it is all-reduced), still equal to the run
    without offload, every byte host-resident, none copied"""
    steps = STEPS
    rc, so, err = shared_output(WORLD)
    v, b = values(so, f"ring{stage}_vs_none"), values(so, f"ring{stage}_bytes")
    ok = (rc == 0 and v is not None and float(v[0]) <= CROSS_DEVICE_RTOL and float(v[1]) == 0 and "buckets:cpu" in v[2].split(",")
          and b is not None and int(b[0]) == 0 and int(b[1]) == 0 and int(b[4]) == steps * int(b[2]))
    report(name, ok, f"[rel diff, rank diff, devices]={v} [during, after, shard, buckets, host-resident]={b} "
           f"rc={rc} seed={SEED} err={err[-1500:]!r}")


def ring_src(stage):
    return f"""
g = train(cfg_of({stage}, bucket_mb=0.0001))
o = train(cfg_of({stage}, offload="optimizer", bucket_mb=0.0001))
print("R ring{stage}_vs_none", compare(o, g)[0], compare(o, g)[1], devs(o))
print("R ring{stage}_bytes", o[0][4][0], o[0][4][1], o[0][4][2], o[0][4][3], o[0][4][4])
"""


def bucket_world():
    """the world of stages 1/2's per-bucket checks: one GPU (device buckets), or NCCL at ZERO_WORLD"""
    return WORLD if BACKEND == "nccl" else 1


# per_bucket's base runs and ring_host_shard's, in the shared sessions (stage 2; stages 1 and 3 in the
# release pass only, as their tests)
shared(bucket_world(), per_bucket_src(2))
if BACKEND == "ring" and WORLD > 1:
    shared(WORLD, ring_src(2))
if not ASAN:
    shared(bucket_world(), per_bucket_src(1))
    if BACKEND == "ring" and WORLD > 1:
        shared(WORLD, ring_src(1))
    shared(WORLD, per_bucket_src(3))


def buckets_then_ring(name, stage, ring_suffix):
    """per_bucket's checks for a stage whose copies come from the reducer's device buckets (one GPU, or
    NCCL at any world), then under the ring at world > 1 ring_host_shard's"""
    if not have_emulator(name):
        return
    per_bucket(name, stage, bucket_world())
    if BACKEND == "ring" and WORLD > 1:
        ring_host_shard(f"{name}_{ring_suffix}", stage)


@later
def test_cuda_offload_per_bucket(name):
    """stage 2: each bucket's piece of the shard; under the ring the averaged host shard"""
    buckets_then_ring(name, 2, "ring_host_shard")


@later
def test_cuda_offload_per_bucket_stage1(name):
    """stage 1: this rank's slice of each all-reduced bucket; under the ring the slices taken from the
    host buckets on the reducer's thread"""
    if not release_only(name):
        buckets_then_ring(name, 1, "ring_host_slices")


@later
def test_cuda_offload_per_unit_stage3(name):
    """stage 3 (per_bucket's checks: each unit's gradient shard copied as soon as backward finished it;
    at ZERO_WORLD under either backend: the shards and their gradients are always on the device)"""
    if not release_only(name) and have_emulator(name):
        per_bucket(name, 3, WORLD)


shared(WORLD, """
# the parameters before any step: the same seeded bf16 model for every stage
start = train(cfg_of(1, steps=0, width=48, dtype="bf16"))
for st in 1..4 {
  g = train(cfg_of(st, bucket_mb=0.001, width=48, dtype="bf16"))
  o = train(cfg_of(st, offload="optimizer", bucket_mb=0.001, width=48, dtype="bf16"))
  print("R bf{st}", compare(o, g)[0], compare(o, g)[1], moved(o, start), o[0][4][0], o[0][4][4])
}
""")


@later
def test_cuda_offload_bf16(name):
    """mixed precision: bf16 parameters and compute, f32 master shards on the host; with the gradient
    shards copied during backward (stage 1: the slices of the all-reduced f32 buckets, rounded to bf16 on
    the host as data_parallel rounds .grad; stage 2: the f32 shard pieces; stage 3: the units' f32
    gradient shards), several buckets, accumulation and clipping, equal to the same stage without
    offload (CROSS_DEVICE_RTOL; a missing rounding moves bf16 parameters by ~5e-3 relative) at
    ZERO_WORLD (world 1: one GPU, device buckets; under the ring at world > 1 stages 1 and 2 take host
    buckets, stage 3 copies from the device), some bytes copied during backward or host-resident"""
    if not have_emulator(name):
        return
    rc, out, err = shared_output(WORLD)
    for st in (1, 2, 3):
        v = values(out, f"bf{st}")
        ok = (rc == 0 and v is not None and float(v[0]) <= CROSS_DEVICE_RTOL and float(v[1]) == 0 and float(v[2]) > 1e-3
              and int(v[3]) + int(v[4]) > 0)
        report(f"{name}_stage{st}", ok, f"[rel diff, rank diff, moved, bytes during backward, host-resident]={v} rc={rc} seed={SEED} err={err[-1500:]!r}")


EDITED = ((1, bucket_world()), (3, WORLD))
for st, world in EDITED:
    shared(world, f"""
plain = train(cfg_of({st}, bucket_mb=0.0001))
for e in list("replace", "inplace") {{
  g = train(cfg_of({st}, bucket_mb=0.0001, edit=e))
  o = train(cfg_of({st}, offload="optimizer", bucket_mb=0.0001, edit=e))
  print("R ed{st}_" + e, compare(o, g)[0], compare(o, g)[1], moved(g, plain), o[0][4][1])
}}
""")


@later
def test_cuda_offload_grad_edited(name):
    """offload's copies made during backward are of the gradients backward left: a gradient changed
    before z.step() (stage 1: .grad replaced, or written in place; stage 3: the shard's .grad likewise)
    is what step() must use -- equal to the same edit without offload (which moves the parameters away
    from the unedited run), with the shard copied again at step() (bytes after backward); on one GPU
    (stage 1's device buckets) and at ZERO_WORLD for stage 3"""
    if not have_emulator(name):
        return
    for st, world in EDITED:
        rc, out, err = shared_output(world)
        for e in ("replace", "inplace"):
            v = values(out, f"ed{st}_{e}")
            ok = rc == 0 and v is not None and float(v[0]) <= CROSS_DEVICE_RTOL and float(v[1]) == 0 and float(v[2]) > 1e-3 and int(v[3]) > 0
            report(f"{name}_stage{st}_{e}", ok, f"[rel diff, rank diff, edit moved, bytes copied after backward]={v} rc={rc} seed={SEED} err={err[-1500:]!r}")


CKPT_PREFIX = os.path.join(dutil.TMP, "zck")
shared(WORLD, f"""
fn tr(stage, off, steps, save, load, pfx) = dist.run(fn(stage, off, steps, save, load, pfx) {{
  import nn
  import optim
  seed({SEED} + 1)
  m = requires_grad(todev(nn.mlp(list(6, 12, 12, 3)), "cuda"))
  z = dist.zero(m, optim.adamw(m, lr=0.05), stage=stage, offload=off)
  if load {{ z.load(pfx) }}
  k = dist.rank(); b = 16 / dist.world_size()
  for s in 0..steps {{
    x = X[k * b:(k + 1) * b].to("cuda"); y = Y[k * b:(k + 1) * b].to("cuda")
    backward(cross_entropy(m(x), y)); z.step(); z.zero_grad()
    if save and s == 0 {{ z.save(pfx) }}
  }}
  ps = if stage == 3 {{ z.full_params() }} else {{ nn.parameters(m) }}
  map(ps, fn(p) detach(p).cpu())
}}, stage, off, steps, save, load, pfx)
# the parameters before any step: the same seeded model for every stage and offload
start = tr(1, nil, 0, false, false, "{CKPT_PREFIX}-none")
for st in 1..4 {{
  for off in list(nil, "optimizer") {{
    full = tr(st, off, 2, true, false, "{CKPT_PREFIX}-{{st}}-{{off}}")
    res = tr(st, off, 1, false, true, "{CKPT_PREFIX}-{{st}}-{{off}}")
    d = 0; big = 0; mv = 0
    for w in 0..len(full) {{ for i in 0..len(full[w]) {{
      d = max(d, max(abs(full[w][i] - res[w][i])).item()); big = max(big, max(abs(full[w][i])).item())
      mv = max(mv, max(abs(full[w][i] - start[w][i])).item())
    }} }}
    print("R ck{{st}}_{{off}}", d / big, mv)
  }}
}}
""")


@later
def test_cuda_checkpoint_resume(name):
    """a sharded checkpoint of a GPU model saved after 1 of 2 steps and loaded into a fresh dist.zero
    (stages 1-3, with and without offload: the host masters and state are restored too) trains on to
    the uninterrupted run's parameters (same kernels, same order: equal to 1e-6 relative), which moved"""
    if not have_emulator(name):
        return
    rc, out, err = shared_output(WORLD)
    for st in (1, 2, 3):
        for off in ("nil", "optimizer"):
            v = values(out, f"ck{st}_{off}")
            ok = rc == 0 and v is not None and float(v[0]) <= 1e-6 and float(v[1]) > 1e-3
            report(f"{name}_stage{st}_{'offload' if off == 'optimizer' else 'plain'}", ok,
                   f"[rel diff, moved]={v} rc={rc} seed={SEED} err={err[-1500:]!r}")


for fn in LATER:
    dutil.test(fn)
dutil.finish()
