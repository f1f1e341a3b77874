"""Shared by the lazy-fusion suites (test_fuse.py, test_fuse_ops.py): run a
batch with NABLA_FUSE=1 and =0 on the same inputs, and judge that both runs
give the same bits (values, NaN payloads, strings) and match the reference.
"""
import os

import numpy as np

import harness
from harness import compare, report_fail, report_pass


def run_both(b):
    """Runs batch b with fusion on and off: (results on, results off) or None."""
    allc = list(enumerate(b.cases))
    out = {}
    for mode in ("1", "0"):
        os.environ["NABLA_FUSE"] = mode
        rc, so, se, errs, res = b._exec(allc)
        if res is None:
            report_fail(f"{b.title}.run[NABLA_FUSE={mode}]", f"nabla exit {rc}: {se.strip()[-400:]}")
            return None
        for k, v in errs.items():
            report_fail(f"{b.title}.{b.cases[int(k[1:])].name}[NABLA_FUSE={mode}]", f"nabla error: {v}")
        out[mode] = res
    os.environ.pop("NABLA_FUSE", None)
    return out["1"], out["0"]


def same_bits(a, b):
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))
    if isinstance(a, (str, float, bool)) or a is None:
        return a == b or (isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b))
    a, b = harness.to_np(a), harness.to_np(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def judge(b, on, off, skip):
    for i, c in enumerate(b.cases):
        key, name = f"c{i}", f"{b.title}.{c.name}"
        if i in skip or key not in on or key not in off:
            continue   # a nabla error was reported by run_both
        if not same_bits(on[key], off[key]):
            report_fail(name + ".bits", f"NABLA_FUSE=1 and =0 differ; case: {' '.join(c.code.split())[:200]}")
            continue
        why = compare(on[key], c.exp, c.rtol, c.atol, c.dtype)
        if why:
            report_fail(name, f"{why}; case: {' '.join(c.code.split())[:200]}")
        else:
            report_pass(name)
