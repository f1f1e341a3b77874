#!/usr/bin/python3
"""Issue 29's CPU speed targets, nabla vs torch 1.13 on the same machine in
the same run (f32; 1 thread and all cores):
  resnet     a small ResNet with BatchNorm on 28x28 images, batch 64:
             conv3x3(1->16)+bn+relu, 2 basic blocks at 16 channels, a block
             to 32 channels at stride 2 (1x1 conv + bn shortcut), a block at
             32, global average pool, linear 10; cross_entropy forward +
             backward + one SGD(momentum 0.9) step
  gcn        a 2-layer GCN (N=10000 nodes, E=100000 edges, 64 -> 64 -> 8):
             h = relu(index_add(0, 0, dst, (x @ W1)[src])), the same with W2,
             cross_entropy; forward + backward
  conv1d     x [32, 64, 256], w [64, 64, 5], padding 2: forward + backward
  convT2d    x [16, 32, 16, 16], w [32, 16, 4, 4], stride 2, padding 1: f+b
  groupnorm  x [32, 64, 32, 32], 8 groups, affine: forward + backward
  lstm       nn.lstm(256, 256, num_layers=2) on x [64, 32, 256] (T, batch,
             input): sum of the output, forward + backward (bench/tensor/rnn.nbl's)
Each program reports the fastest of REPS repetitions per case; the two
programs alternate ROUNDS times; the table shows the medians and
nabla/torch (< 1: nabla faster) and the load average seen.
    NABLA=build/nabla /usr/bin/python3 bench/cpu/bench_models29.py [case ...]
"""
import os
import statistics
import subprocess
import sys

NABLA = os.environ.get("NABLA") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "nabla")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
REPS = int(os.environ.get("BENCH_REPS") or 5)
CASES = ["resnet", "gcn", "conv1d", "convT2d", "groupnorm", "lstm"]

NB = r'''
import nn
import optim
seed(1)
fn best(f) { f(); b = 1e9; for i in range(REPS) { t = clock(); f(); b = min(b, clock() - t) }; b }
fn block(cin, cout, stride) {
  m = {c1: nn.conv2d(cin, cout, 3, stride=stride, padding=1, bias=false), b1: nn.batch_norm2d(cout),
       c2: nn.conv2d(cout, cout, 3, padding=1, bias=false), b2: nn.batch_norm2d(cout), sc: nil, sb: nil,
       __call: fn(self, x) {
         h = relu(self.b1(self.c1(x)))
         h = self.b2(self.c2(h))
         s = x
         if self.sc != nil { s = self.sb(self.sc(x)) }
         relu(h + s)
       }}
  if stride != 1 or cin != cout { m.sc = nn.conv2d(cin, cout, 1, stride=stride, bias=false); m.sb = nn.batch_norm2d(cout) }
  m
}
r = {}
if has(WANT, "resnet") {
  model = {stem: nn.conv2d(1, 16, 3, padding=1, bias=false), bn: nn.batch_norm2d(16),
           blocks: [block(16, 16, 1), block(16, 16, 1), block(16, 32, 2), block(32, 32, 1)],
           fc: nn.linear(32, 10),
           __call: fn(self, x) {
             h = relu(self.bn(self.stem(x)))
             for b in self.blocks { h = b(h) }
             self.fc(mean(h, [2, 3]))
           }}
  x = randn(64, 1, 28, 28); y = randint(0, 10, [64])
  opt = optim.sgd(model, 0.01, momentum=0.9)
  step = value_and_grad(fn(m, x, y) cross_entropy(m(x), y))
  r["resnet"] = best(fn() { opt.step(step(model, x, y)[1]) })
}
if has(WANT, "gcn") {
  N = 10000; E = 100000
  x = randn(N, 64); W1 = randn(64, 64) * 0.1; W2 = randn(64, 8) * 0.1
  src = randint(0, N, [E]); dst = randint(0, N, [E]); lab = randint(0, 8, [N])
  g = grad(fn(W1, W2) {
    h = relu(index_add(zeros(N, 64), 0, dst, take(x @ W1, src, 0)))
    cross_entropy(index_add(zeros(N, 8), 0, dst, take(h @ W2, src, 0)), lab)
  })
  r["gcn"] = best(fn() { g(W1, W2) })
}
if has(WANT, "conv1d") {
  x = randn(32, 64, 256); w = randn(64, 64, 5) * 0.05; b = randn(64); go = randn(32, 64, 256)
  g = grad(fn(x, w, b) sum(conv1d(x, w, b, 1, 2, 1, 1) * go))
  r["conv1d"] = best(fn() { g(x, w, b) })
}
if has(WANT, "convT2d") {
  x = randn(16, 32, 16, 16); w = randn(32, 16, 4, 4) * 0.05; b = randn(16); go = randn(16, 16, 32, 32)
  g = grad(fn(x, w, b) sum(conv_transpose2d(x, w, b, 2, 1, 0, 1, 1) * go))
  r["convT2d"] = best(fn() { g(x, w, b) })
}
if has(WANT, "groupnorm") {
  x = randn(32, 64, 32, 32); w = randn(64); b = randn(64); go = randn(32, 64, 32, 32)
  g = grad(fn(x, w, b) sum(group_norm(x, 8, w, b, 1e-5) * go))
  r["groupnorm"] = best(fn() { g(x, w, b) })
}
if has(WANT, "lstm") {
  m = nn.lstm(256, 256, num_layers=2); x = randn(64, 32, 256)
  step = value_and_grad(fn(m, x) sum(m(x)[0]))
  r["lstm"] = best(fn() { step(m, x)[0].item() })
}
for k in keys(r) { print(k + "=" + str(r[k])) }
'''

TORCH = r'''
import os, time, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
torch.manual_seed(1)
def best(f):
    f(); b = 1e9
    for i in range(REPS):
        t = time.perf_counter(); f(); b = min(b, time.perf_counter() - t)
    return b
class Block(nn.Module):
    def __init__(s, cin, cout, stride):
        super().__init__()
        s.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); s.b1 = nn.BatchNorm2d(cout)
        s.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); s.b2 = nn.BatchNorm2d(cout)
        s.sc = None
        if stride != 1 or cin != cout:
            s.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(s, x):
        h = s.b2(s.c2(F.relu(s.b1(s.c1(x)))))
        return F.relu(h + (x if s.sc is None else s.sc(x)))
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Conv2d(1, 16, 3, 1, 1, bias=False); s.bn = nn.BatchNorm2d(16)
        s.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 16, 1), Block(16, 32, 2), Block(32, 32, 1))
        s.fc = nn.Linear(32, 10)
    def forward(s, x):
        return s.fc(s.blocks(F.relu(s.bn(s.stem(x)))).mean((2, 3)))
r = {}
if "resnet" in CASES:
    m = Net(); opt = torch.optim.SGD(m.parameters(), 0.01, momentum=0.9)
    x = torch.randn(64, 1, 28, 28); y = torch.randint(0, 10, (64,))
    def step():
        opt.zero_grad(); F.cross_entropy(m(x), y).backward(); opt.step()
    r["resnet"] = best(step)
if "gcn" in CASES:
    N, E = 10000, 100000
    x = torch.randn(N, 64); W1 = (torch.randn(64, 64) * 0.1).requires_grad_(); W2 = (torch.randn(64, 8) * 0.1).requires_grad_()
    src = torch.randint(0, N, (E,)); dst = torch.randint(0, N, (E,)); lab = torch.randint(0, 8, (N,))
    def gcn():
        h = F.relu(torch.zeros(N, 64).index_add(0, dst, (x @ W1)[src]))
        F.cross_entropy(torch.zeros(N, 8).index_add(0, dst, (h @ W2)[src]), lab).backward()
        W1.grad = None; W2.grad = None
    r["gcn"] = best(gcn)
def fb(f, *shapes, go):
    ts = [torch.randn(*s).requires_grad_() for s in shapes]
    def run():
        (f(*ts) * go).sum().backward()
        for t in ts: t.grad = None
    return best(run)
if "conv1d" in CASES:
    r["conv1d"] = fb(lambda x, w, b: F.conv1d(x, w, b, 1, 2), (32, 64, 256), (64, 64, 5), (64,), go=torch.randn(32, 64, 256))
if "convT2d" in CASES:
    r["convT2d"] = fb(lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1), (16, 32, 16, 16), (32, 16, 4, 4), (16,), go=torch.randn(16, 16, 32, 32))
if "groupnorm" in CASES:
    r["groupnorm"] = fb(lambda x, w, b: F.group_norm(x, 8, w, b, 1e-5), (32, 64, 32, 32), (64,), (64,), go=torch.randn(32, 64, 32, 32))
if "lstm" in CASES:
    m = nn.LSTM(256, 256, num_layers=2); x = torch.randn(64, 32, 256)
    def lstm():
        m.zero_grad(); loss = m(x)[0].sum(); loss.backward(); return loss.item()
    r["lstm"] = best(lstm)
for k, v in r.items(): print(k + "=" + str(v))
'''


def run(cmd, threads, stdin=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), NABLA_STDLIB=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "stdlib"))
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, check=True).stdout
    return {k: float(v) for k, v in (line.split("=") for line in out.splitlines() if "=" in line)}


def main():
    import warnings
    warnings.filterwarnings("ignore")
    cases = sys.argv[1:] or CASES
    setup = f"REPS = {REPS}\nCASES = {cases!r}\n"
    path = f"/tmp/bench_models29_{os.getpid()}.nbl"
    with open(path, "w") as f:
        f.write(f"REPS = {REPS}\nWANT = {{}}\n" + "".join(f'WANT["{k}"] = true\n' for k in cases) + NB)
    print("| case | threads | nabla ms | torch ms | nabla/torch | load avg |")
    print("|---|---|---|---|---|---|")
    for threads in sorted({1, os.cpu_count()}):
        nb, th, load = {k: [] for k in cases}, {k: [] for k in cases}, []
        for _ in range(ROUNDS):
            load.append(os.getloadavg()[0])
            for k, v in run([NABLA, path], threads).items():
                nb[k].append(v)
            for k, v in run([sys.executable, "-W", "ignore", "-c", setup + TORCH], threads).items():
                th[k].append(v)
        for k in cases:
            a, b = statistics.median(nb[k]) * 1e3, statistics.median(th[k]) * 1e3
            print(f"| {k} | {threads} | {a:.2f} | {b:.2f} | {a / b:.2f} | {statistics.median(load):.1f} |", flush=True)
    os.unlink(path)


if __name__ == "__main__":
    main()
