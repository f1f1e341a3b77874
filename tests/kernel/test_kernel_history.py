#!/usr/bin/python3
"""The kernel's history stays small whatever the cells return (Nabla issue
33, item 6): an output is kept up to 4 KiB (with a note of its full size), a
history file left huge by an older kernel is read from its tail and
compacted, and history_request's numbers are clamped (n = 1e300 was a double
cast to long: undefined, and in practice "the last 10").

Drives the kernel through jupyter_client with the history in a temporary
file (kutil).  Prints PASS/FAIL lines; exits 1 on any failure.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import SLOW, result  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402

T = 30 * SLOW
HIST = os.environ["NABLA_HISTORY_FILE"]
kutil.install("nabla", "message")


def execute(kc, code):
    msg_id = kc.execute(code)
    while True:
        rep = kc.get_shell_msg(timeout=T)
        if rep["parent_header"].get("msg_id") == msg_id:
            return rep["content"]


def history(kc, **kw):
    kc.history(**kw)
    return kc.get_shell_msg(timeout=T)["content"]


def session(check):
    km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
    try:
        return check(kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def t_big_outputs(kc):
    """six cells returning 2 MiB strings: the file grows by kilobytes, the
    outputs (the strings' repr: 2 MiB + 2 quotes) come back cut with their
    size; n = 1e300 returns every entry"""
    before = os.path.getsize(HIST) if os.path.exists(HIST) else 0
    k = random.randint(1, 9)
    for i in range(6):
        rep = execute(kc, f's = "{k}"\nfor j in 0..21 {{ s = s + s }}\ns')
        if rep["status"] != "ok":
            return f"cell failed: {rep}"
    for i in range(6):
        execute(kc, f"{i} + {k}")
    grew = os.path.getsize(HIST) - before
    if grew > 100 << 10:
        return f"the history file grew by {grew} bytes for 12 cells"
    h = history(kc, hist_access_type="tail", n=1e300, output=True, raw=True)
    if h.get("status") != "ok":
        return f"history_request n=1e300: {h}"
    entries = h["history"]
    big = [e for e in entries if e[2][1] and f"{(2 << 20) + 2} bytes in all" in e[2][1]]
    if len(entries) < 12 or len(big) != 6 or any(len(e[2][1]) > 5000 for e in big):
        return f"n=1e300 gave {len(entries)} entries, {len(big)} cut outputs: {[e[2][1][:60] if e[2][1] else None for e in entries[-12:]]}"
    for key, val in (("n", -1e300), ("n", float("nan"))):
        h = history(kc, hist_access_type="tail", output=False, raw=True, **{key: val})
        if h.get("status") != "ok":
            return f"history_request {key}={val}: {h}"
    h = history(kc, hist_access_type="range", session=-1e300, start=1e300, stop=-1e300, output=False, raw=True)
    if h.get("status") != "ok" or h["history"]:
        return f"range with huge numbers: {h}"
    return None


def t_huge_file_compacted(kc_unused=None):
    """a 100 MB history file from an older kernel (huge outputs): the next
    kernel reads its tail, compacts it, and keeps its newest entries"""
    marker = random.randint(10**6, 10**7)
    with open(HIST, "w") as f:
        blob = "x" * (1 << 20)
        for i in range(100):
            f.write(json.dumps([1, i + 1, f"cell_{i}", blob]) + "\n")
        f.write(json.dumps([1, 101, f"last_{marker}", "7"]) + "\n")

    def check(kc):
        h = history(kc, hist_access_type="tail", n=5, output=True, raw=True)
        ins = [e[2][0] for e in h.get("history", [])]
        size = os.path.getsize(HIST)
        if not ins or ins[-1] != f"last_{marker}":
            return f"newest entries after the start: {ins}"
        if size > 40 << 20:
            return f"the history file is still {size} bytes"
        return None
    return session(check)


def t_multiline_across_sessions():
    """a multi-line cell (a line starting '#1', a triple-quoted string over
    lines, a block) comes back from the next kernel as one history item, the
    same text"""
    k = random.randint(10**6, 10**7)
    cell = f"if true {{\n#1 a comment, not a separator\n  doc_{k} = '''two\nlines'''\n}}\nlen(doc_{k})"

    def run_it(kc):
        rep = execute(kc, cell)
        return None if rep["status"] == "ok" else f"cell failed: {rep}"

    def check(kc):
        h = history(kc, hist_access_type="tail", n=20, output=False, raw=True)
        ins = [e[2] for e in h.get("history", [])]
        if cell not in ins or any(f"doc_{k}" in i and i != cell for i in ins):
            return f"the multi-line cell did not come back whole: {ins[-4:]}"
        return None
    return session(run_it) or session(check)


for name, fn in (("history_big_outputs_bounded", lambda: session(t_big_outputs)),
                 ("history_huge_file_compacted", t_huge_file_compacted),
                 ("history_multiline_across_sessions", t_multiline_across_sessions)):
    try:
        why = fn()
    except Exception as e:  # noqa: BLE001 - a broken case is a failure
        why = f"{type(e).__name__}: {e}"
    result(name, why is None, why)
kutil.finish()
