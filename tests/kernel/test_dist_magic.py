#!/usr/bin/python3
"""Worker magics in the Jupyter kernel: a %%all cell runs on every worker with
output streamed back prefixed by rank, %all EXPR gives the values by rank, an
error on a worker is an error reply and the kernel stays usable.
PASS:/FAIL: lines; exit 1 on failure."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402

T = 30 * kutil.SLOW
kutil.install("nabla")


def execute(kc, code):
    msg_id = kc.execute(code)
    out, result, error = [], None, None
    while True:
        m = kc.get_iopub_msg(timeout=T)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = m["msg_type"], m["content"]
        if t == "stream":
            out.append(c["text"])
        elif t == "execute_result":
            result = c["data"]["text/plain"]
        elif t == "error":
            error = c
        elif t == "status" and c["execution_state"] == "idle":
            break
    reply = kc.get_shell_msg(timeout=T)
    return reply["content"], "".join(out), result, error


km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=T)
try:
    r, out, res, err = execute(kc, "import dist\ndist.start(2)")
    kutil.result("start workers", r["status"] == "ok", err)
    r, out, res, err = execute(kc, "%%all\nx = dist.rank() + 1\nprint(\"rank says\", x)\n")
    kutil.result("%%all cell runs on every worker", r["status"] == "ok", err)
    kutil.result("%%all output prefixed by rank", "[rank 0] rank says 1" in out and "[rank 1] rank says 2" in out, out)
    r, out, res, err = execute(kc, "%all x * 10")
    kutil.result("%all EXPR is the execute_result, by rank", res == "[10, 20]", res)
    r, out, res, err = execute(kc, "%%all\ny = all_reduce(tensor([x * 1.0]))\n")
    r, out, res, err = execute(kc, "%all y.item()")
    kutil.result("collectives inside cells", res == "[3.0, 3.0]", res)
    r, out, res, err = execute(kc, "%%all\nif dist.rank() == 1 { error(\"bad rank\") }\n")
    kutil.result("a worker error is an error reply", r["status"] == "error" and err is not None and "bad rank" in " ".join(err["traceback"]) + err["evalue"], err)
    r, out, res, err = execute(kc, "1 + 1")
    kutil.result("the kernel stays usable after a worker error", res == "2", res)
    r, out, res, err = execute(kc, "dist.stop()")
    kutil.result("stop workers", r["status"] == "ok", err)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    del kc   # before interpreter teardown (jupyter_client logs in __del__)
kutil.finish()
