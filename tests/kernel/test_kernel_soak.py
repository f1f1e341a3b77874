#!/usr/bin/python3
"""A kernel that runs thousands of cells keeps its memory flat (issue 33, item 4).

Two things grew a kernel from cell to cell without holding more data:
between a cell's tensors the messages and interpreter objects of the next
cells took small pieces of the freed heap (a cell making one 200x200 tensor
grew the kernel by 160 KB, every cell; the kernel now hands the free pages
back after each cell, kernel/interp.c), and the history entry stored after
each cell (~100 bytes) pinned a page the cell had freed (4.6 KB per cell; the
history's text now lives in an arena of its own, kernel/history.c).

This drives 2,000 cells — a mix of the issue's repro, tensors, autograd,
records that refer to themselves, output, errors, plots, displays and
save/load — and bounds the RSS growth per cell over the second half by 2 KB.  tests/repl/test_repl_soak.py drives the REPL the same way.
NABLA_ASAN: not run under ASan (its allocator is not glibc's)."""
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import SLOW, result  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402

CELLS = 2000
REPRO_CELLS = 600
BOUND_KB = float(os.environ.get("SOAK_BOUND_KB", "2"))

if os.environ.get("NABLA_ASAN"):
    sys.exit(77)
kutil.install("nabla", "message")
rng = random.Random()
TMP = tempfile.mkdtemp(prefix="nabla-soak.")
km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
pid = km.provisioner.process.pid if hasattr(km, "provisioner") else km.kernel.pid


def rss_kb():
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1])
    return 0


def mixed_cell(i):
    k = rng.randint(150, 250)
    path = os.path.join(TMP, f"m{i % 3}.safetensors")
    return [
        "x = randn(200, 200); s = x.sum().item()",   # the repro (160 KB per cell before)
        f"w = randn({k}, 8, requires_grad=true); l = (w * w).sum(); g = grad(fn(w) (w * w).sum())(w)",
        f"r = {{n: {i}}}; r.self = r; q = list(r, r)",
        f"print(\"cell {i}\", {k} * 2)",
        "error(\"boom\")",
        f"t = zeros({k}); t[3] = 1; v = t.max().item()",
        f"plot(randn({k % 40 + 10}).tolist(), title=\"p{i}\")",
        f"{{a: {i}, b: \"text {i}\"}}",
        f"save(\"{path}\", {{w: randn({k % 30 + 2}, 3), step: {i}}}); m = load(\"{path}\"); ok = m.step == {i}",
        f"fn f{i % 5}(a) {{ a * {i} }}\nf{i % 5}(3)",
    ][i % 10]


def soak(cells, make, measured_from):
    """runs cells made by make(i); the RSS growth in KB per cell from cell measured_from on"""
    start = rss_kb()
    for i in range(cells):
        if i == measured_from:
            start = rss_kb()
        kc.execute_interactive(make(i), timeout=30 * SLOW, output_hook=lambda m: None)
    return (rss_kb() - start) / (cells - measured_from)


mixed = soak(CELLS, mixed_cell, CELLS // 2)
# then the repro alone, the heap warm: each cell's history entry pinned a page
repro = soak(REPRO_CELLS, lambda i: "x = randn(200, 200); s = x.sum().item()", 0)
# the kernel still computes right after all that
kc.execute("", user_expressions={"v": "2 + 3"})
r = kc.get_shell_msg(timeout=10 * SLOW)
alive = r["content"]["user_expressions"]["v"].get("data", {}).get("text/plain") == "5"
result("kernel/soak_rss_per_cell_mixed", mixed <= BOUND_KB and alive,
       f"RSS grew {mixed:.2f} KB per cell over the second half of {CELLS} mixed cells (bound {BOUND_KB}); alive={alive}")
result("kernel/soak_rss_per_cell_repro", repro <= BOUND_KB,
       f"RSS grew {repro:.2f} KB per cell over {REPRO_CELLS} cells of the repro (bound {BOUND_KB})")
print(f"# RSS growth per cell: {mixed:.2f} KB (mixed, second half), {repro:.2f} KB (repro)")
kc.stop_channels()
km.shutdown_kernel(now=True)
kutil.finish()
