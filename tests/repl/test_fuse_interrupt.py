#!/usr/bin/python3
"""Ctrl-C while a large fused chain is computed (tensor/tfuse.c).

`y = x % 1.7 % 1.3 ...` on 2e7 elements is one lazy chain of 16 ops (several
seconds on one core); the REPL's statement end computes it, tile by tile,
looking at the interrupt flag between tiles.  SIGINT (^C on the REPL's pty)
must end the statement with the Interrupted error while the chain is still
being computed -- fuse_stats() then counts no chain as computed and the one
interrupted as dropped (with the 15 intermediate values) -- and y must keep its old value (no half-written
result is visible).  Then the same chain on a small prefix computes normally
and matches NumPy (float32 fmod with Python's sign rule).

$NABLA is the binary (default build/nabla).  PASS/FAIL lines; exit 1 on a failure.
"""
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replpty import Reporter, repl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.path.abspath(os.environ.get("NABLA", os.path.join(ROOT, "build", "nabla")))
MODS = [1.7, 1.3, 1.1, 0.9, 0.7, 0.5, 0.3, 0.2, 1.7, 1.3, 1.1, 0.9, 0.7, 0.5, 0.3, 0.25]


report = Reporter("fuse_interrupt")


def chain(v):
    return v + "".join(" %% %s" % m for m in MODS)


def case(threads):
    seed = int.from_bytes(os.urandom(4), "little")
    with repl(NABLA, threads) as (t, home):
        t.expect(">>> ", 60)
        t.send("seed(%d); x = randn([20000000]) * 3; y = ones([3]); f0 = fuse_stats()\r" % seed)
        t.expect(">>> ", 60)
        t.send("y = %s\r" % chain("x"))
        t.wait_busy(0.15, 60)   # inside the chain (>= 1.5 s of CPU time in all), not before or after it
        t.send("\x03")
        t.expect("Interrupted: interrupted", 60)
        t.expect(">>> ", 10)
        t.send('f = fuse_stats(); print("RES", f.forced - f0.forced, f.dropped - f0.dropped, f.pending, y.shape, y.sum().item())\r')
        out = t.expect(">>> ", 30)
        m = re.search(r"RES (\S+) (\S+) (\S+) (\[.*?\]) (\S+)", out)
        if not m:
            return "no RES line: %r" % out
        forced, dropped, pending, shape, total = m.groups()
        if float(forced) != 0:
            return "the chain ran to its end (forced %s): the interrupt was not seen between tiles" % forced
        # each op's lazy value is dropped when the next extends its record;
        # the interrupted chain, which the cell no longer holds, is the last
        if float(dropped) != len(MODS) or float(pending) != 0:
            return "the interrupted chain was not dropped (dropped %s, want %d; pending %s)" % (dropped, len(MODS), pending)
        if shape != "[3]" or float(total) != 3:
            return "y changed: shape %s sum %s (want the old ones([3]))" % (shape, total)
        # the session goes on; the same chain on a prefix of x matches NumPy
        path = os.path.join(home, "x.npy")
        t.send('z = %s; save_npy("%s", x[0:100000]); save_npy("%s.z.npy", z)\r' % (chain("x[0:100000]"), path, path))
        out = t.expect(">>> ", 60)
        if "Error" in out:
            return "after the interrupt: %r" % out
        xs, z = np.load(path), np.load(path + ".z.npy")
        ref = xs.copy()
        for mo in MODS:
            ref = np.mod(ref, np.float32(mo))
        if z.dtype != np.float32 or not np.array_equal(z, ref):
            bad = np.flatnonzero(z != ref)
            return "chain after the interrupt differs from NumPy at %d places (first %s)" % (bad.size, bad[:3])
        return None


for th in (1, 2):
    try:
        report("repl-chain-%dthread" % th, case(th))
    except Exception as e:  # noqa: BLE001 - any failure is reported
        report("repl-chain-%dthread" % th, e)
sys.exit(1 if report.failed else 0)
