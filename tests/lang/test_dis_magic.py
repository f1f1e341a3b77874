#!/usr/bin/python3
"""%dis NAME (dist/dmagic.c over nb_disassemble_value, lang/ldis.c) prints a
function's bytecode, the same text in the REPL (stdin piped) and in the
Jupyter kernel: a function with fresh random constants shows them (LOADK,
ADDK operands) and its opcodes; a record's field and a closure disassemble;
a builtin, a number and an unknown name are clear errors in both.  Also
nabla --dis FILE agrees with %dis for the same function.

$NABLA is the interpreter (default build/nabla).  Prints PASS/FAIL lines."""
import os, random, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel"))
import kutil  # noqa: E402
from kutil import NABLA, SLOW, result  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402

rng = random.Random()
K1, K2 = rng.randint(1000, 99999), rng.randint(100000, 999999)
SETUP = f"fn scaled(x, k = {K2}) {{ y = x + {K1}\n  y * k }}\nr = {{f: fn(v) v < {K1}}}\n"


def repl(lines):
    src = SETUP + "".join(f'print("@@{i}")\n{l}\n' for i, l in enumerate(lines)) + 'print("@@end")\n'
    p = subprocess.run([NABLA], input=src, capture_output=True, text=True, timeout=60 * SLOW, env=dict(os.environ, NO_COLOR="1"))
    parts = re.split(r"^@@(\w+)\n", p.stdout, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}, p


def kernel_run(kc, code):
    msg_id = kc.execute(code)
    out, err = "", ""
    while True:
        m = kc.get_iopub_msg(timeout=60 * SLOW)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream":
            if m["content"]["name"] == "stdout":
                out += m["content"]["text"]
            else:
                err += m["content"]["text"]
        elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
    return out, err, kc.get_shell_msg(timeout=60 * SLOW)["content"]


def main():
    kutil.install("nabla")
    lines = ["%dis scaled", "%dis r.f"]
    rout, p = repl(lines)
    s = rout.get("0", "")
    ops = re.findall(r"^\s+\d+\s+\[\s*\d+\]\s+(\w+)", s, flags=re.M)
    ok = ("-- fn scaled at" in s and f"; {K2}" in s and f"; K {K1}" in s and ops[:1] == ["JDEF"]
          and "ADDK" in ops and "MUL" in ops and ops[-1] == "RET")
    result("dis_magic_repl_function", ok, f"{s!r} {p.stderr[:300]!r}")
    f = rout.get("1", "")
    result("dis_magic_repl_field", f"; K {K1}" in f and "LTK" in f, repr(f))

    with tempfile.NamedTemporaryFile("w", suffix=".nbl", delete=False) as t:
        t.write(SETUP)
    try:
        d = subprocess.run([NABLA, "--dis", t.name], capture_output=True, text=True, timeout=60 * SLOW).stdout
    finally:
        os.unlink(t.name)
    body = s.split("\n", 1)[1] if "\n" in s else ""
    result("dis_magic_matches_dis_file", body.strip() != "" and body in d, f"%dis {body!r} not in --dis {d[:400]!r}")

    km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
    try:
        kernel_run(kc, SETUP)
        for i, l in enumerate(lines):
            out, err, reply = kernel_run(kc, l)
            want = rout.get(str(i), "<missing>")
            # the kernel runs SETUP as one cell, the REPL line by line: the
            # same code past the file name and source line numbers
            norm = lambda x: re.sub(r"\[\s*\d+\]", "[L]", re.sub(r" at .*:\d+\n", " at F\n", x))
            result(f"dis_magic_kernel_{i}", reply["status"] == "ok" and norm(out) == norm(want), f"kernel {out!r} {err!r}, repl {want!r}")
        for name, line, msg in (("builtin", "%dis len", "%dis: expected a nabla function, got a builtin"),
                                ("number", "%dis r", "%dis: expected a nabla function, got record"),
                                ("unknown", "%dis nope_x", "%dis: no variable named 'nope_x'"),
                                ("usage", "%dis", "%dis: needs a function's name")):
            out, err, reply = kernel_run(kc, line)
            q = subprocess.run([NABLA], input=SETUP + line + "\n", capture_output=True, text=True, timeout=60 * SLOW)
            ok = reply["status"] == "error" and msg in err and q.returncode != 0 and msg in q.stderr
            result(f"dis_magic_error_{name}", ok, f"kernel {reply['status']} {err!r}; repl rc {q.returncode} {q.stderr!r}")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    kutil.finish()


main()
