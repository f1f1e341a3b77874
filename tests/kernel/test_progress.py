"""NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
progress(): the live bar in its three places, and the iterator protocol.

  progress_kernel     a Jupyter execute: ONE display_data with a display_id,
                      then update_display_data on that id only, the last one
                      at 100% with the postfix bar.set gave; the loop's values
  progress_terminal   under a pty: the line is redrawn with '\\r' and ends with
                      one newline at 100%
  progress_pipe       stdout a pipe: no '\\r', one plain line for a short loop
  progress_unknown    an iterator of unknown length shows a count, no percent
  iterator_protocol   a record with __next drives `for` (nil ends it)
  progress_errors     bad arguments are clear errors
"""
import os
import pty
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import NABLA, SLOW, TMP, result  # noqa: E402

from jupyter_client.manager import start_new_kernel  # noqa: E402

LOOP = """
total = 0
bar = progress(range(40), desc="train")
for i in bar {
  total += i
  t = clock(); while clock() - t < 0.01 { }
  bar.set(loss=1 / (i + 1))
}
print("TOTAL", total, bar.n)
"""


def check(name, fn):
    try:
        why = fn()
        result(name, why is None, why or "")
    except Exception as e:  # noqa: BLE001
        result(name, False, f"{type(e).__name__}: {e}")


def script(src):
    p = os.path.join(TMP, f"p{time.time_ns()}.nbl")
    with open(p, "w") as f:
        f.write(src)
    return p


def progress_kernel():
    km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
    try:
        msg_id = kc.execute(LOOP)
        msgs = []
        deadline = time.time() + 60 * SLOW
        while time.time() < deadline:
            m = kc.get_iopub_msg(timeout=30 * SLOW)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            msgs.append(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        disp = [m for m in msgs if m["msg_type"] == "display_data" and "nabla-progress" in m["content"].get("transient", {}).get("display_id", "")]
        upd = [m for m in msgs if m["msg_type"] == "update_display_data"]
        if len(disp) != 1:
            return f"expected one progress display_data, got {len(disp)}: {[m['msg_type'] for m in msgs]}"
        did = disp[0]["content"]["transient"]["display_id"]
        if not upd or any(m["content"]["transient"]["display_id"] != did for m in upd):
            return f"updates {len(upd)} must all target {did}"
        last = upd[-1]["content"]["data"]
        txt = last["text/plain"]
        if "100%" not in txt or "40/40" not in txt or "loss=0.025" not in txt or "train:" not in txt:
            return f"last update: {txt!r}"
        if "<progress" not in last.get("text/html", ""):
            return "no HTML progress element"
        # throttled: 40 iterations over ~0.4 s at every=0.1 s is a handful of updates, not 40
        if len(upd) > 15:
            return f"{len(upd)} updates for 40 iterations (not throttled)"
        out = "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
        if "TOTAL 780 40" not in out:
            return f"loop output {out!r}"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return None


def progress_terminal():
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(NABLA, [NABLA, script(LOOP)])
    out = b""
    deadline = time.time() + 60 * SLOW
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 1)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    if text.count("\r") < 2:
        return f"expected the line redrawn with \\r: {text!r}"
    before_total = text.split("TOTAL")[0]
    if "100%" not in before_total or "40/40" not in before_total or before_total.rstrip("\r\n").count("\n") != 0:
        return f"the bar should be one redrawn line ending at 100%: {before_total!r}"
    if "TOTAL 780 40" not in text:
        return f"loop output {text!r}"
    return None


def progress_pipe():
    p = subprocess.run([NABLA, script(LOOP)], capture_output=True, text=True, timeout=60 * SLOW)
    lines = p.stdout.splitlines()
    if p.returncode != 0 or "\r" in p.stdout:
        return f"rc {p.returncode}, stdout {p.stdout!r} {p.stderr[-300:]!r}"
    bars = [l for l in lines if l.startswith("train:")]
    if len(bars) != 1 or "100%" not in bars[0] or "40/40" not in bars[0] or "loss=0.025" not in bars[0]:
        return f"expected one final plain line, got {bars}"
    return None if "TOTAL 780 40" in p.stdout else f"loop output {p.stdout!r}"


def progress_unknown():
    src = """
fn counter(n) {
  it = {i: 0, n: n}
  it.__next = fn(self) { if self.i >= self.n { return nil }; self.i += 1; self.i }
  it
}
s = 0
for x in progress(counter(5), desc="c") { s += x }
print("S", s)
"""
    p = subprocess.run([NABLA, script(src)], capture_output=True, text=True, timeout=60 * SLOW)
    bar = [l for l in p.stdout.splitlines() if l.startswith("c:")]
    if p.returncode != 0 or "S 15" not in p.stdout:
        return f"rc {p.returncode}: {p.stdout!r} {p.stderr[-300:]!r}"
    if len(bar) != 1 or "%" in bar[0] or not bar[0].startswith("c: 5 ["):
        return f"unknown total: {bar}"
    return None


def iterator_protocol():
    src = """
it = {k: 0}
it.__next = fn(self) { self.k += 1; if self.k > 3 { nil } else { self.k * 10 } }
out = list()
for v in it { push(out, v) }
print(out)
it2 = {k: 0, __next: fn(self) { self.k += 1; if self.k > 100 { nil } else { self.k } }}
n = 0
for v in it2 { if v == 4 { break }; n += 1 }
print(n)
fn f(*xs) = len(xs)
it3 = {k: 0, __next: fn(self) { self.k += 1; if self.k > 7 { nil } else { self.k } }}
print(f(*it3))
"""
    p = subprocess.run([NABLA, script(src)], capture_output=True, text=True, timeout=60 * SLOW)
    want = "[10, 20, 30]\n3\n7\n"
    return None if p.returncode == 0 and p.stdout == want else f"rc {p.returncode}: {p.stdout!r} {p.stderr[-300:]!r}"


def progress_errors():
    src = """
print(try { progress(3) } catch e { e.message })
print(try { progress([1, 2], every=-1) } catch e { e.message })
print(try { progress([1, 2], desc=5) } catch e { e.message })
"""
    p = subprocess.run([NABLA, script(src)], capture_output=True, text=True, timeout=60 * SLOW)
    lines = p.stdout.splitlines()
    ok = (p.returncode == 0 and len(lines) == 3 and "cannot iterate over a number" in lines[0]
          and "every must be >= 0" in lines[1] and "desc must be a string" in lines[2])
    return None if ok else f"rc {p.returncode}: {p.stdout!r} {p.stderr[-300:]!r}"


kutil.install("nabla")
check("progress_kernel", progress_kernel)
check("progress_terminal", progress_terminal)
check("progress_pipe", progress_pipe)
check("progress_unknown", progress_unknown)
check("iterator_protocol", iterator_protocol)
check("progress_errors", progress_errors)
kutil.finish()
