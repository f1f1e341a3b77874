"""NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
One set of magics in both front ends (dist/dmagic.c): each magic runs in the
REPL (stdin piped: the same statement-at-a-time loop as the terminal) and in
the Jupyter kernel, and must print the same thing (timings matched by
pattern): %time, %timeit, %who, %help NAME, ?NAME, NAME?, %help, a usage
error, an unknown magic, %reset.  Help goes to Jupyter's pager in the kernel.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import NABLA, SLOW, result  # noqa: E402

from jupyter_client.manager import start_new_kernel  # noqa: E402

SETUP = "alpha = 1\nbeta = \"b\"\nfn gamma(x, k=2) = x * k\n"
TIME = r"[0-9.]+ (s|ms|µs|ns)"
CASES = [
    # name, magic line, pattern its output must match (whole text, stripped)
    # (the kernel shows the value as the cell's result, after the timing, as IPython does)
    ("time", "%time gamma(21)", rf"42\nWall time: {TIME}|Wall time: {TIME}\n42"),
    ("timeit", "%timeit gamma(3)", rf"{TIME} ± {TIME} per loop \(mean ± std\. dev\. of 7 runs, [0-9]+ loops? each\)"),
    ("who", "%who", r"(?s).*alpha\tnumber.*beta\tstring.*gamma\tfunction.*"),
    ("help_name", "%help gamma", r"gamma\(x, k=2\)"),
    ("help_prefix", "?len", r"(?s)len\(x\).*length.*"),
    ("help_suffix", "gamma?", r"gamma\(x, k=2\)"),
    ("help_unknown", "?nothing_here", r"no help for 'nothing_here'"),
    ("help_list", "%help", r"(?s)Magics: %time STMT  %timeit STMT  %who .*%%all runs on every worker\."),
]


def repl_outputs():
    """Runs SETUP and every magic through the REPL; output of each, split by markers."""
    src = SETUP
    for name, line, _ in CASES:
        src += f'print("@@{name}")\n{line}\n'
    src += 'print("@@end")\n'
    p = subprocess.run([NABLA], input=src, capture_output=True, text=True, timeout=120 * SLOW, env=dict(os.environ, NO_COLOR="1"))
    parts = re.split(r"^@@(\w+)\n", p.stdout, flags=re.M)
    out = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    return out, p


def kernel_run(kc, code):
    msg_id = kc.execute(code)
    text, pager = "", ""
    while True:
        m = kc.get_iopub_msg(timeout=60 * SLOW)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = m["msg_type"], m["content"]
        if t == "stream":
            text += c["text"]
        elif t == "execute_result":
            text += c["data"]["text/plain"] + "\n"
        elif t == "status" and c["execution_state"] == "idle":
            break
    reply = kc.get_shell_msg(timeout=60 * SLOW)["content"]
    for p in reply.get("payload", []):
        if p.get("source") == "page":
            pager += p["data"]["text/plain"]
    return text, pager, reply


def main():
    kutil.install("nabla")
    rout, proc = repl_outputs()
    km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
    try:
        kernel_run(kc, SETUP)
        for name, line, pattern in CASES:
            text, pager, reply = kernel_run(kc, line)
            kout = (pager if name.startswith("help_") and name != "help_list" else text).strip()
            r = rout.get(name, "<missing>")
            ok = reply["status"] == "ok" and re.fullmatch(pattern, kout) and re.fullmatch(pattern, r)
            # same text in both (timings aside)
            same = sorted(re.sub(TIME, "T", kout).splitlines()) == sorted(re.sub(TIME, "T", r).splitlines()) if name != "timeit" else True
            result(f"magic_{name}", bool(ok) and same, f"kernel {kout!r} ({reply['status']}), repl {r!r}")
        # errors: a usage error and an unknown magic fail in both, with the same message
        for name, line, msg in (("usage_error", "%time", "%time: needs a statement"), ("unknown", "%bogus", "unknown magic %bogus")):
            text, _, reply = kernel_run(kc, line)
            p = subprocess.run([NABLA], input=line + "\n", capture_output=True, text=True, timeout=60 * SLOW)
            ok = reply["status"] == "error" and p.returncode != 0 and msg in p.stderr
            result(f"magic_{name}", ok, f"kernel {reply.get('ename')} {text!r}; repl rc {p.returncode} {p.stderr!r}")
        # %reset forgets the globals in both
        text, _, reply = kernel_run(kc, "%reset")
        text, _, _ = kernel_run(kc, "%who")
        p = subprocess.run([NABLA], input=SETUP + "%reset\n%who\n", capture_output=True, text=True, timeout=60 * SLOW)
        result("magic_reset", "alpha" not in text and "alpha" not in p.stdout and "argv" in text and "argv" in p.stdout,
               f"kernel {text!r} repl {p.stdout!r}")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    kutil.finish()


main()
