#!/usr/bin/python3
"""tests/dist: dist.data_parallel and buffers (stdlib/dist.nbl; torch DDP's
broadcast_buffers).  2 workers build a BatchNorm model from different seeds:
- after data_parallel every rank holds rank 0's parameters AND buffers;
- the gradient averaging covers the parameters only (reducer_stats().params);
- a training step on different batches makes the running statistics differ,
  and the next forward (grad on, the same batch on both ranks) starts from
  rank 0's buffers again: both ranks end with equal statistics, equal to a
  single process that replays rank 0's first step and then that batch.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_dp_buffers.py
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, report, test  # noqa: E402


def run(src, timeout=120):
    env = dict(os.environ, NABLA_STDLIB=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "stdlib"))
    p = subprocess.run([NABLA, dutil.script(src)], capture_output=True, text=True, timeout=timeout, env=env)
    dutil.sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def values(out, key):
    for l in out.splitlines():
        if l.startswith(f"R {key} "):
            return l.split()[2:]
    return None


@test
def test_buffers_broadcast_from_rank0(name):
    rc, out, err = run("""
import nn
import dist
fn make() = {bn: nn.batch_norm1d(4), fc: nn.linear(4, 3), __call: fn(self, x) self.fc(self.bn(x))}
seed(5)
X0 = randn(6, 4) * 2 + 1; X1 = randn(6, 4) - 1; Z = randn(6, 4) * 3; Y = randint(0, 3, list(6))
fn lf(m, x, y) = cross_entropy(m(x), y)
# the reference: rank 0's model, its first step, then the batch Z
seed(100)
ref = make()
nn.train(ref)
no_grad { ref(randn(6, 4)) }   # rank 0 moved its statistics before data_parallel
grad(lf)(ref, X0, Y)
grad(lf)(ref, Z, Y)
dist.start(2)
dist.push(X0=X0, X1=X1, Z=Z, Y=Y, lf=lf)
r = dist.run(fn() {
  import nn
  import dist
  fn make() = {bn: nn.batch_norm1d(4), fc: nn.linear(4, 3), __call: fn(self, x) self.fc(self.bn(x))}
  seed(100 + dist.rank())
  m = make()
  no_grad { m(randn(6, 4)) }   # each rank's own statistics
  m = dist.data_parallel(m)
  after = list(m.bn.running_mean.clone(), m.fc.weight.clone())
  n = dist.reducer_stats().params
  grad(lf)(m, if dist.rank() == 0 { X0 } else { X1 }, Y)
  mid = m.bn.running_mean.clone()
  grad(lf)(m, Z, Y)
  list(after, n, mid, m.bn.running_mean, m.bn.running_var, m.bn.num_batches_tracked)
})
d0 = max(max(abs(r[0][0][0] - r[1][0][0])).item(), max(abs(r[0][0][1] - r[1][0][1])).item())
print("R synced", d0)
print("R params", r[0][1], r[1][1])
print("R diverged", max(abs(r[0][2] - r[1][2])).item())
d = 0
for w in 0..2 { d = max(d, max(max(abs(r[w][3] - ref.bn.running_mean)).item(), max(abs(r[w][4] - ref.bn.running_var)).item())) }
print("R final", d, r[0][5].item(), r[1][5].item())
""")
    ok = rc == 0
    v = values(out, "synced"); ok = ok and v is not None and float(v[0]) == 0
    v2 = values(out, "params"); ok = ok and v2 == ["4", "4"]          # bn.weight, bn.bias, fc.weight, fc.bias
    v3 = values(out, "diverged"); ok = ok and v3 is not None and float(v3[0]) > 1e-3
    v4 = values(out, "final"); ok = ok and v4 is not None and float(v4[0]) < 1e-6 and v4[1:] == ["3", "3"]
    report(name, ok, f"rc={rc} synced={v} params={v2} diverged={v3} final={v4} err={err[-800:]!r}")


dutil.finish()
