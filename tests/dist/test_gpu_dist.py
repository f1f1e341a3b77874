#!/usr/bin/python3
"""tests/dist on a GPU machine: collectives of CUDA tensors.

  nccl_world1_*      dist.start(1, backend="nccl") on the GPU: every collective
                     on CUDA tensors (results on cuda) against NumPy
  nccl_two_on_one    2 workers on one GPU: backend="nccl" is refused clearly,
                     "auto" falls back to the ring and says why
  nccl_world2_*      (needs 2 GPUs) 2 workers, one GPU each, on NCCL
  ring_gpu_world*    2-4 workers sharing the GPU, backend="ring": CUDA tensors
                     staged through pinned host memory
  dp_cuda_*          data-parallel training with CUDA tensors equals one
                     process training on the whole batch (1e-5)
Without a usable GPU every test prints SKIP.  On the emulated device
(NABLA_CUDA_EMULATE; tests/dist/test_gpu_dist_emu.py runs this so on every
commit) the ring and data-parallel ones run and the NCCL ones print SKIP.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_gpu_dist.py
"""
import json, os, re, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, lines_with, report, sanitizer_check, script, skip, test  # noqa: E402


def run(src, timeout=180, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([NABLA, script(src)], capture_output=True, text=True, timeout=timeout, env=e)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


_, _o, _ = run('print("NGPU", if cuda.available() { cuda.device_count() } else { 0 })\nprint("WHY", if cuda.available() { "ok" } else { cuda.unavailable_reason() })')
NGPU = int((lines_with("NGPU ", _o) or ["0"])[0])
WHY = (lines_with("WHY ", _o) or ["?"])[0]


def parse_records(text):
    s = re.sub(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*):", r'\1"\2":', text)
    return json.loads(s.replace("nil", "null"))


# Every collective on CUDA inputs; values come back as lists, devices as strings.
BODY = """
fn body(n, c) {{
  r = dist.rank(); w = dist.world_size()
  seed(100 + r)
  x = randn([n, c], dtype="f64")
  xi = randint(-50, 50, [n, c], dtype="i64")
  g = x.cuda(); gi = xi.cuda()
  L = fn(t) list(t.cpu().reshape([-1]))
  res = {{x: L(x), xi: L(xi)}}
  s = all_reduce(g)
  res.dev = list(s.device, all_gather(g).device, broadcast(g, src=0).device)
  res.sum = L(s)
  res.avg = L(all_reduce(g, op="avg"))
  res.max = L(all_reduce(g, op="max"))
  res.min = L(all_reduce(g, op="min"))
  res.isum = L(all_reduce(gi))
  res.f32 = L(all_reduce(g.to("f32")).to("f64"))
  res.f16 = L(all_reduce(g.to("f16")).to("f64"))
  res.ag = L(all_gather(g[0:r + 1]))
  res.rs = L(reduce_scatter(g))
  res.bc = L(broadcast(g, src=w - 1))
  res.a2a = map(all_to_all(map(list(range(w)), fn(j) g[0] * 0 + (r * 10 + j))), fn(t) list(t.cpu()))
  if w > 1 {{
    if r == 0 {{ send(g, w - 1) }}
    if r == w - 1 {{ y = recv(0); res.recv = L(y); res.recv_dev = y.device }}
  }}
  # differentiable: d/dx sum(all_reduce(x * (r+1)) * (r+2)) = (r+1) * sum_k (k+2)
  xg = tensor([1.0, 2.0, 3.0], dtype="f64", device="cuda", requires_grad=true)
  backward(sum(all_reduce(xg * (r + 1)) * (r + 2)))
  res.grad = L(xg.grad)
  # bucketed data-parallel all_reduce (avg) of several dtypes
  res.co = map(dist.average_grads(list(g, g.to("f32") * 2, gi)), fn(t) list(t.device, L(t)))
  # a sub-group of every rank (its own NCCL communicator under nccl)
  grp = dist.new_group(list(range(w)))
  res.grp = L(all_reduce(g, group=grp))
  barrier()
  res
}}
"""


def coll_src(world, backend, n, c):
    return f"""
import dist
dist.start({world}, backend="{backend}")
print("BACKEND", dist.info().backend)
{BODY.format()}
print("JSON", dist.run(body, {n}, {c}))
dist.stop()
"""


def check(world, backend, n=7, c=3):
    rc, out, err = run(coll_src(world, backend, n, c))
    if rc != 0 or not lines_with("JSON ", out):
        return f"rc={rc} out={out[-600:]!r} err={err[-1500:]!r}"
    if lines_with("BACKEND ", out)[0] != backend:
        return f"backend {lines_with('BACKEND ', out)}"
    res = parse_records(lines_with("JSON ", out)[0])
    X = [np.array(r["x"]).reshape(n, c) for r in res]
    XI = [np.array(r["xi"], dtype=np.int64).reshape(n, c) for r in res]
    S = sum(X)
    tol = dict(rtol=1e-12, atol=1e-12)
    rows = [n // world + (i < n % world) for i in range(world)]
    offs = np.cumsum([0] + rows)
    for r, o in enumerate(res):
        if o["dev"] != ["cuda", "cuda", "cuda"]: return f"devices rank {r}: {o['dev']}"
        if not np.allclose(np.array(o["sum"]).reshape(n, c), S, **tol): return f"sum rank {r}"
        if not np.allclose(np.array(o["avg"]).reshape(n, c), S / world, **tol): return f"avg rank {r}"
        if not np.array_equal(np.array(o["max"]).reshape(n, c), np.maximum.reduce(X)): return f"max rank {r}"
        if not np.array_equal(np.array(o["min"]).reshape(n, c), np.minimum.reduce(X)): return f"min rank {r}"
        if not np.array_equal(np.array(o["isum"], dtype=np.int64).reshape(n, c), sum(XI)): return f"int sum rank {r}"
        if not np.allclose(np.array(o["f32"]).reshape(n, c), sum(x.astype(np.float32) for x in X), rtol=1e-5, atol=1e-5): return f"f32 rank {r}"
        if not np.allclose(np.array(o["f16"]).reshape(n, c), sum(x.astype(np.float16).astype(np.float32) for x in X), rtol=2e-3, atol=2e-3): return f"f16 rank {r}"
        ag = np.concatenate([X[k][0:k + 1] for k in range(world)])
        if not np.array_equal(np.array(o["ag"]).reshape(-1, c), ag): return f"all_gather rank {r}"
        if not np.allclose(np.array(o["rs"]).reshape(-1, c), S[offs[r]:offs[r + 1]], **tol): return f"reduce_scatter rank {r}"
        if not np.array_equal(np.array(o["bc"]).reshape(n, c), X[world - 1]): return f"broadcast rank {r}"
        a2a = [np.array(t) for t in o["a2a"]]
        if not all(np.all(a2a[j] == j * 10 + r) for j in range(world)): return f"all_to_all rank {r}: {o['a2a']}"
        if world > 1 and r == world - 1:
            if not np.array_equal(np.array(o["recv"]).reshape(n, c), X[0]) or o["recv_dev"] != "cuda": return "send/recv"
        want = (r + 1) * sum(k + 2 for k in range(world))
        if not np.allclose(o["grad"], [want] * 3): return f"grad rank {r}: {o['grad']}"
        co = o["co"]
        if [d[0] for d in co] != ["cuda"] * 3: return f"average_grads devices rank {r}"
        if not np.allclose(np.array(co[0][1]).reshape(n, c), S / world, **tol): return f"average_grads f64 rank {r}"
        if not np.allclose(np.array(co[1][1]).reshape(n, c), 2 * sum(x.astype(np.float32) for x in X) / world, rtol=1e-5, atol=1e-5): return f"average_grads f32 rank {r}"
        if not np.allclose(np.array(co[2][1]).reshape(n, c), sum(XI) / world, rtol=1e-6, atol=1e-5): return f"average_grads i64 rank {r}"
        if not np.allclose(np.array(o["grp"]).reshape(n, c), S, **tol): return f"group all_reduce rank {r}"
    return None


EMULATED = bool(os.environ.get("NABLA_CUDA_EMULATE"))


def need(name, gpus, nccl=False):
    if NGPU < 1:
        skip(name, f"no usable GPU ({WHY})")
        return False
    if NGPU < gpus:
        skip(name, f"needs {gpus} GPUs, this machine has {NGPU}")
        return False
    if nccl and EMULATED:
        skip(name, "the emulated device has no NCCL (NABLA_CUDA_EMULATE): this runs on a GPU machine")
        return False
    return True


@test
def test_nccl_world1_collectives(name):
    if not need(name, 1, nccl=True): return
    why = check(1, "nccl", 5, 4)
    report(name, why is None, why)


@test
def test_nccl_two_on_one_gpu(name):
    if not need(name, 1, nccl=True): return
    if NGPU > 1:
        return skip(name, "more than one GPU: the workers get a GPU each")
    rc, out, err = run("""
import dist
print("E", try { dist.start(2, backend="nccl") } catch e { e.message })
dist.start(2)
print("I", dist.info().backend, dist.info().reason)
dist.stop()
""")
    ok = rc == 0 and "share the GPU" in out and 'several workers on one GPU need backend="ring"' in out and "I ring " in out
    report(name, ok, f"rc={rc} out={out!r} err={err[-800:]!r}")


@test
def test_nccl_world2_collectives(name):
    if not need(name, 2, nccl=True): return
    why = check(2, "nccl", 7, 3)
    report(name, why is None, why)


@test
def test_nccl_timeout_aborts_and_restarts(name):
    # rank 1 skips the collective: rank 0's NCCL all_reduce times out, the
    # communicator is aborted, the error names the timeout, and the next
    # command runs on a fresh communicator
    if not need(name, 2, nccl=True): return
    rc, out, err = run("""
import dist
dist.start(2, backend="nccl", timeout=3)
r = try { dist.exec("if dist.rank() == 0 { all_reduce(ones(4, device='cuda')) }") } catch e { e.message }
print("E", r)
print("OK", dist.run(fn() all_reduce(ones(2, device="cuda")).tolist()))
dist.stop()
""", timeout=120)
    ok = rc == 0 and "timed out" in out and "OK [[2, 2], [2, 2]]" in out
    report(name, ok, f"rc={rc} out={out!r} err={err[-800:]!r}")


@test
def test_ring_gpu_world2(name):
    if not need(name, 1): return
    why = check(2, "ring", 7, 3)
    report(name, why is None, why)


@test
def test_ring_gpu_world3(name):
    if not need(name, 1): return
    why = check(3, "ring", 11, 5)
    report(name, why is None, why)


@test
def test_ring_gpu_world4(name):
    if not need(name, 1): return
    why = check(4, "ring", 9, 2)
    report(name, why is None, why)


DP_COMMON = """
import nn
import optim
fn make_data() {
  seed(7)
  {x: randn([16, 5]), y: randn([16, 3])}
}
fn make_model() {
  seed(3)
  nn.mlp(list(5, 8, 3), act=tanh)
}
fn loss_fn(model, x, y) = mean((model(x) - y) ** 2)
fn flat(m) = list(concat(map(nn.parameters(m), fn(p) p.reshape([-1])), 0).to("f64").cpu())
"""


def dp_check(world, backend):
    single = DP_COMMON + """
set_default_device("cuda")   # parameters and data are made on the GPU
model = make_model()
d = make_data()
opt = optim.adamw(model, lr=0.01)
for s in 0..3 { opt.step(grad(loss_fn)(model, d.x, d.y)) }
print("P", flat(model))
"""
    dp = DP_COMMON + f"""
import dist
dist.start({world}, backend="{backend}")
print("BACKEND", dist.info().backend)
dist.exec("import nn\\nimport optim\\nset_default_device('cuda')\\nseed(1000 + dist.rank())\\nmodel = nn.mlp(list(5, 8, 3), act=tanh)")
dist.push({{make_model: make_model, make_data: make_data, loss_fn: loss_fn, flat: flat}})
dist.run(fn() {{
  global model
  if dist.rank() == 0 {{ model = make_model() }}
  dist.data_parallel(model)
  d = make_data()
  b = 16 / dist.world_size()
  i = dist.rank() * b
  xb = d.x[i:i + b]; yb = d.y[i:i + b]
  opt = optim.adamw(model, lr=0.01)
  for s in 0..3 {{ opt.step(dist.average_grads(grad(loss_fn)(model, xb, yb))) }}
  nil
}})
print("DEV", dist.pull("nn.parameters(model)[0].device"))
print("BUCKETS_ON", dist.pull("dist.reducer_stats().buckets_on"))
print("P", dist.pull("flat(model)", rank={world} - 1))
print("SAME", dist.pull("flat(model)", rank=0) == dist.pull("flat(model)", rank={world} - 1))
dist.stop()
"""
    rc1, out1, err1 = run(single)
    rc2, out2, err2 = run(dp)
    if rc1 or rc2 or "SAME true" not in out2 or "DEV cuda" not in out2:
        return f"rc={rc1},{rc2} out2={out2[-300:]!r} err={err1[-400:]!r} {err2[-1200:]!r}"
    if lines_with("BACKEND ", out2)[0] != backend:
        return f"backend {lines_with('BACKEND ', out2)}"
    # under NCCL the overlapped reducer keeps CUDA gradients on the GPU; the ring stages them
    want_on = "cuda" if backend == "nccl" else "cpu"
    if want_on not in lines_with("BUCKETS_ON ", out2)[0]:
        return f"reducer buckets on {lines_with('BUCKETS_ON ', out2)}, expected {want_on}"
    a = np.array(json.loads(lines_with("P ", out1)[0]))
    b = np.array(json.loads(lines_with("P ", out2)[0]))
    if a.shape != b.shape or np.max(np.abs(a - b)) >= 1e-5:
        return f"max diff {np.max(np.abs(a - b)) if a.shape == b.shape else 'shape'}"
    return None


@test
def test_dp_cuda_ring_world2(name):
    if not need(name, 1): return
    why = dp_check(2, "ring")
    report(name, why is None, why)


@test
def test_dp_cuda_ring_world4(name):
    if not need(name, 1): return
    why = dp_check(4, "ring")
    report(name, why is None, why)


@test
def test_dp_cuda_nccl_world1(name):
    if not need(name, 1, nccl=True): return
    why = dp_check(1, "nccl")
    report(name, why is None, why)


@test
def test_dp_cuda_nccl_world2(name):
    if not need(name, 2, nccl=True): return
    why = dp_check(2, "nccl")
    report(name, why is None, why)


dutil.finish()
