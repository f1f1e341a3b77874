#!/usr/bin/python3
"""%%all cells in the Jupyter kernel: worker output streams live prefixed by
rank and, at the end of the cell, one display_data shows it grouped by rank.
PASS:/FAIL: lines; exit 1 on failure."""
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402

T = 30 * kutil.SLOW
kutil.install("nabla")


def execute(kc, code):
    msg_id = kc.execute(code)
    out, displays, error = [], [], None
    while True:
        m = kc.get_iopub_msg(timeout=T)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = m["msg_type"], m["content"]
        if t == "stream":
            out.append(c["text"])
        elif t == "display_data":
            displays.append(c["data"].get("text/plain", ""))
        elif t == "error":
            error = c
        elif t == "status" and c["execution_state"] == "idle":
            break
    reply = kc.get_shell_msg(timeout=T)
    return reply["content"], "".join(out), displays, error


km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=T)
try:
    r, out, disp, err = execute(kc, "import dist\ndist.start(3)")
    kutil.result("start workers", r["status"] == "ok" and not disp, (err, disp))
    r, out, disp, err = execute(kc, "%%all\nfor i in 0..3 { print(\"line\", i, \"of\", dist.rank()) }\neprint(\"err of\", dist.rank())\n")
    live = all(f"[rank {k}] line {i} of {k}" in out for k in range(3) for i in range(3))
    kutil.result("%%all output still streams live, prefixed", r["status"] == "ok" and live, out)
    want = "\n".join(f"[rank {k}]\n" + "".join(f"line {i} of {k}\n" for i in range(3)) + f"err of {k}\n" for k in range(3))
    kutil.result("one display_data groups the output by rank", len(disp) == 1 and disp[0] == want, (disp, want))
    # lines over the session relay's 64 KiB bound arrive in "[rank N]+ " pieces: grouped, they are whole again
    d = tempfile.mkdtemp(prefix="nabla-byrank-")
    rnd = random.Random(int.from_bytes(os.urandom(8), "little"))
    longs = ["".join(rnd.choice("abcxyz012 é中😀") for _ in range(rnd.randrange(70_000, 150_000))) for _ in range(3)]
    for k, t in enumerate(longs):
        with open(os.path.join(d, f"l{k}.txt"), "w", encoding="utf-8") as f:
            f.write(t)
    r, out, disp, err = execute(kc, f'dist.push(D="{d}")')
    r, out, disp, err = execute(kc, '%%all\nprint(read_text(D + "/l" + str(dist.rank()) + ".txt"))\n')
    want = "\n".join(f"[rank {k}]\n{longs[k]}\n" for k in range(3))
    kutil.result("lines over the relay's bound are grouped whole", r["status"] == "ok" and len(disp) == 1 and disp[0] == want,
                 (err, [len(x) for x in disp], len(want)))
    r, out, disp, err = execute(kc, "%%all\nx = 1\n")
    kutil.result("a silent %%all cell shows no group", r["status"] == "ok" and not disp, disp)
    r, out, disp, err = execute(kc, "print(\"plain\")")
    kutil.result("ordinary cells are unchanged", out == "plain\n" and not disp, (out, disp))
    r, out, disp, err = execute(kc, "dist.stop()")
    kutil.result("stop workers", r["status"] == "ok", err)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    del kc
kutil.finish()
