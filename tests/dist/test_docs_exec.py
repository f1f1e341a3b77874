#!/usr/bin/python3
"""tests/dist: every multi-line `dist.exec('''...''')` example of
docs/distributed.md runs as written, on two local workers.

The examples use globals a reader defines first (the data, a loss function,
a model); this test defines them (PRELUDE, itself sent as a triple-quoted
string) and then runs each example block verbatim, so a documented spelling
that does not parse or run fails here.  After each block, both ranks must
hold the same, finite loss (the data-parallel and ZeRO updates keep the
replicas equal, bit for bit).

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_docs_exec.py
"""
import math, os, re, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, report, sanitizer_check, script, test  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "distributed.md")

# the names the examples leave to the reader, the same on every rank
PRELUDE = """dist.exec('''
import nn
seed(0)
data = {x: randn(256, 784), y: randint(0, 10, [256])}
fn loss_fn(m, x, y) = cross_entropy(m(x), y)
fn make_model() = nn.mlp(list(784, 64, 10))
xb = data.x[0..64]
yb = data.y[0..64]
n = 4
''')
"""


def examples():
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", open(DOC).read(), re.S | re.M)
    return [b for b in blocks if "dist.exec('''" in b and "\n" in b.split("dist.exec('''", 1)[1]]


def run_example(i, block):
    src = ("import dist\ndist.start(2)\n" + PRELUDE + block
           + "print(\"LOSS\", dist.pull(\"num(loss_fn(model, data.x, data.y))\", rank=\"all\"))\n"
           + "dist.stop()\n")
    path = script(src, f"doc{i}.nbl")
    p = subprocess.run([NABLA, path], capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    sanitizer_check(p.stderr)
    m = re.search(r"^LOSS \[(\S+), (\S+)\]$", p.stdout, re.M)
    if p.returncode or not m:
        return False, f"rc={p.returncode} out={p.stdout[-300:]!r} err={p.stderr[-600:]!r}"
    l0, l1 = (float(v) for v in m.groups())
    return math.isfinite(l0) and l0 == l1, f"loss {l0} (rank 0) and {l1} (rank 1)"


@test
def test_examples_found(name):
    found = examples()
    # the data-parallel and the ZeRO examples at least
    report(name, len(found) >= 2 and any("data_parallel" in b for b in found) and any("dist.zero" in b for b in found),
           f"{len(found)} multi-line dist.exec examples in {DOC}")


for i, block in enumerate(examples()):
    first = next((l for l in block.split("\n") if "model =" in l), block.split("\n")[1]).strip()
    label = f"docs_example_{i}"

    def one(name, i=i, block=block, first=first):
        ok, why = run_example(i, block)
        report(name, ok, f"{first!r}: {why}")
    one.__name__ = "test_" + label
    test(one)

dutil.finish()
