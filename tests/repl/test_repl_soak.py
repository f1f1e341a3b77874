#!/usr/bin/python3
"""The REPL keeps its memory flat over thousands of lines (issue 33, item 4;
tests/kernel/test_kernel_soak.py is the kernel's side).  2,000 lines piped in
— tensors, autograd, records that refer to themselves, output, errors, plots,
displays and save/load — with a marker printed every 100 lines, where the RSS
is read; the growth per line over the second half is bounded by 2 KB.
NABLA_ASAN: not run under ASan (its allocator is not glibc's)."""
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(ROOT, "build", "nabla"))
LINES = 2000
BOUND_KB = float(os.environ.get("SOAK_BOUND_KB", "2"))

if os.environ.get("NABLA_ASAN"):
    sys.exit(77)
rng = random.Random()
TMP = tempfile.mkdtemp(prefix="nabla-repl-soak.")


def line(i):
    k = rng.randint(150, 250)
    path = os.path.join(TMP, f"m{i % 3}.safetensors")
    return [
        "x = randn(200, 200); s = x.sum().item()",
        f"w = randn({k}, 8, requires_grad=true); l = (w * w).sum(); g = grad(fn(w) (w * w).sum())(w)",
        f"r = {{n: {i}}}; r.self = r; q = list(r, r)",
        f"print(\"line {i}\", {k} * 2)",
        "error(\"boom\")",
        f"t = zeros({k}); t[3] = 1; v = t.max().item()",
        f"plot(randn({k % 40 + 10}).tolist(), title=\"p{i}\")",
        f"{{a: {i}, b: \"text {i}\"}}",
        f"save(\"{path}\", {{w: randn({k % 30 + 2}, 3), step: {i}}}); m = load(\"{path}\"); ok = m.step == {i}",
        f"fn f{i % 5}(a) {{ a * {i} }}; f{i % 5}(3)",
    ][i % 10]


p = subprocess.Popen([NABLA], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                     bufsize=1, env=dict(os.environ, NO_COLOR="1", TERM="dumb", COLUMNS="80"))


def rss_kb():
    with open(f"/proc/{p.pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1])
    return 0


def sync(mark):
    """prints a marker and reads up to it: the lines before it have run"""
    p.stdin.write(f'print("SOAK-MARK {mark}")\n')
    p.stdin.flush()
    for l in p.stdout:
        if l.startswith(f"SOAK-MARK {mark}"):
            return True
    return False


ok_sync = True
mid = None
for i in range(LINES):
    p.stdin.write(line(i) + "\n")
    if i % 100 == 99:
        ok_sync = ok_sync and sync(i)
        if i == LINES // 2 - 1:
            mid = rss_kb()
end = rss_kb()
p.stdin.write("print(2 + 3)\n")
p.stdin.close()
rest = p.stdout.read()
p.wait(timeout=60)
per_line = (end - mid) / (LINES - LINES // 2) if mid else float("inf")
alive = ok_sync and rest.strip().endswith("5")
shutil.rmtree(TMP, ignore_errors=True)
if per_line <= BOUND_KB and alive:
    print("PASS: repl/soak_rss_per_line")
else:
    print(f"FAIL: repl/soak_rss_per_line: RSS grew {per_line:.2f} KB per line over the second half of {LINES} lines "
          f"(bound {BOUND_KB}); alive={alive} (tail {rest[-200:]!r})")
print(f"# RSS growth per line over the second half: {per_line:.2f} KB")
sys.exit(0 if per_line <= BOUND_KB and alive else 1)
