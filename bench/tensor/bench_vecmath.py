#!/usr/bin/python3
"""The training step's elementwise math, nabla vs torch (same threads): on a
1M-element f32 tensor [32, 64, 512], forward and forward+backward of gelu
(erf and tanh forms), tanh, exp, log, sigmoid, silu, softmax, log_softmax,
layer_norm, and cross_entropy over [2048, 512]; clip_grad_norm over the
parameter gradients of the GPT of gpt_step.nbl (2 layers, d 128, vocab 90).

fwd+bwd is one call of grad(sum(f(x) * w)) in nabla and
(f(x) * w).sum().backward() in torch: the same ops on both sides.  Each
program reports the fastest of 15 timed repetitions per operation (on a
shared machine other processes only ever add time); the two programs
alternate `ROUNDS` times and the table shows the median over the rounds and
the ratio nabla/torch (< 1: nabla faster).  Both use
OMP_NUM_THREADS threads (default: all cores; torch.set_num_threads too).
Run by bench/run.sh (NABLA is set) or:
    NABLA=build/nabla /usr/bin/python3 bench/tensor/bench_vecmath.py
"""
import os
import statistics
import subprocess
import sys

NABLA = os.environ.get("NABLA") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "nabla")
THREADS = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count())
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
REPS = 15

# GPT parameter shapes (bench/tensor/gpt_step.*): embeddings, 2 blocks, final norm, head
GPT_SHAPES = [[90, 128], [64, 128]] + 2 * [[128], [128], [384, 128], [384], [128, 128], [128],
                                           [128], [128], [512, 128], [512], [128, 512], [128]] + [[128], [128], [90, 128], [90]]

NBL = """
seed(1)
x = randn(32, 64, 512); xp = rand(32, 64, 512) + 0.1; w = randn(32, 64, 512)
xr = randn(32, 64, 512); xpr = rand(32, 64, 512) + 0.1
lnw = ones(512); lnb = zeros(512)
logits = randn(2048, 512); tgt = randint(0, 512, [2048])
fn best_ms(f) {   # the fastest repetition, in ms
  f()
  best = 1e9
  for i in 0..REPS { t0 = clock(); f(); best = min(best, clock() - t0) }
  best * 1000
}
fn fb(f, inp) {
  g = grad(fn(t) sum(f(t) * w))
  fn() g(inp)
}
ops = list(
  list("gelu", fn(t) gelu(t), false), list("gelu_tanh", fn(t) gelu(t, approximate="tanh"), false),
  list("tanh", fn(t) tanh(t), false), list("exp", fn(t) exp(t), false), list("log", fn(t) log(t), true),
  list("sigmoid", fn(t) sigmoid(t), false), list("silu", fn(t) silu(t), false),
  list("softmax", fn(t) softmax(t, axis=-1), false), list("log_softmax", fn(t) log_softmax(t, axis=-1), false),
  list("layer_norm", fn(t) layer_norm(t, lnw, lnb, 1e-5), false),
)
for o in ops {
  a = if o[2] { xp } else { x }
  ar = if o[2] { xpr } else { xr }
  f = o[1]
  print(o[0] + "_fwd", best_ms(fn() f(a)))
  print(o[0] + "_fwdbwd", best_ms(fb(f, ar)))
}
print("cross_entropy_fwd", best_ms(fn() cross_entropy(detach(logits), tgt)))
print("cross_entropy_fwdbwd", best_ms(fn() grad(fn(t) cross_entropy(t, tgt))(logits)))
import optim
gs = list()
for s in SHAPES { push(gs, randn(s)) }
st = {last: optim.clip_grad_norm(gs, 1e30)}
# max_norm just under the current norm: every call scales, as torch's always does
fn clip() { st.last = optim.clip_grad_norm(gs, st.last / 1.001) }
print("clip_grad_norm", best_ms(clip))
"""

TORCH = """
import time, torch, torch.nn.functional as F
torch.set_num_threads(THREADS)
torch.manual_seed(1)
x = torch.randn(32, 64, 512); xp = torch.rand(32, 64, 512) + 0.1; w = torch.randn(32, 64, 512)
xr = torch.randn(32, 64, 512, requires_grad=True); xpr = (torch.rand(32, 64, 512) + 0.1).requires_grad_()
lnw = torch.ones(512); lnb = torch.zeros(512)
logits = torch.randn(2048, 512, requires_grad=True); tgt = torch.randint(0, 512, (2048,))
def best_ms(f):
    f()
    ts = []
    for i in range(REPS):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return min(ts) * 1000
def fb(f, inp):
    def run():
        inp.grad = None
        (f(inp) * w).sum().backward()
    return run
ops = [
  ("gelu", lambda t: F.gelu(t), False), ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh"), False),
  ("tanh", torch.tanh, False), ("exp", torch.exp, False), ("log", torch.log, True),
  ("sigmoid", torch.sigmoid, False), ("silu", F.silu, False),
  ("softmax", lambda t: torch.softmax(t, -1), False), ("log_softmax", lambda t: torch.log_softmax(t, -1), False),
  ("layer_norm", lambda t: F.layer_norm(t, (512,), lnw, lnb, 1e-5), False),
]
for name, f, pos in ops:
    a, ar = (xp, xpr) if pos else (x, xr)
    with torch.no_grad():
        print(name + "_fwd", best_ms(lambda: f(a)))
    print(name + "_fwdbwd", best_ms(fb(f, ar)))
with torch.no_grad():
    print("cross_entropy_fwd", best_ms(lambda: F.cross_entropy(logits, tgt)))
print("cross_entropy_fwdbwd", best_ms(fb(lambda t: F.cross_entropy(t, tgt).expand(1), logits)))
ps = [torch.zeros(s, requires_grad=True) for s in SHAPES]
for p in ps: p.grad = torch.randn(p.shape)
last = [float(torch.nn.utils.clip_grad_norm_(ps, 1e30))]
def clip():
    last[0] = float(torch.nn.utils.clip_grad_norm_(ps, last[0] / 1.001))
print("clip_grad_norm", best_ms(clip))
"""


def run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        sys.exit(f"bench_vecmath: {cmd[0]} failed: {(p.stdout + p.stderr).strip()[-400:]}")
    out = {}
    for line in p.stdout.splitlines():
        k, v = line.split()
        out[k] = float(v)
    return out


def main():
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    nbl = NBL.replace("REPS", str(REPS)).replace("SHAPES", "list(" + ", ".join(map(str, GPT_SHAPES)) + ")")
    py = TORCH.replace("REPS", str(REPS)).replace("THREADS", str(THREADS)).replace("SHAPES", str(GPT_SHAPES))
    res = {"nabla": [], "torch": []}
    for _ in range(ROUNDS):   # alternate so the machine's drift hits both alike
        res["nabla"].append(run([NABLA, "-e", nbl], env))
        res["torch"].append(run(["/usr/bin/python3", "-c", py], env))
    print(f"# ms, median over {ROUNDS} runs of the best of {REPS} reps, {THREADS} threads; f32 [32, 64, 512] unless named")
    print(f"{'op':<22}  {'nabla_ms':>9}  {'torch_ms':>9}  {'ratio':>6}")
    for k in res["nabla"][0]:
        a = statistics.median(r[k] for r in res["nabla"])
        b = statistics.median(r[k] for r in res["torch"])
        print(f"{k:<22}  {a:9.3f}  {b:9.3f}  {a / b:6.2f}")


if __name__ == "__main__":
    main()
