#!/usr/bin/python3
"""The kernel under Jupyter's own front ends: `jupyter nbconvert --to notebook
--execute` on an example notebook, and the classic `jupyter notebook` server
(a kernel started through its REST API, a cell run over its websocket channel).
PASS:/FAIL:/SKIP: lines; exit 1 on failure."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402

T = 60 * kutil.SLOW
kutil.install("nabla")
JUPYTER = shutil.which("jupyter") or "/usr/bin/jupyter"


def have(sub):
    return subprocess.run([JUPYTER, sub, "--version"], capture_output=True, timeout=60).returncode == 0


# ---- nbconvert --execute ---------------------------------------------------
if not have("nbconvert"):
    kutil.result("nbconvert executes a notebook", None, "jupyter nbconvert is not installed (Debian: jupyter-nbconvert)")
else:
    src = os.path.join(kutil.ROOT, "notebooks", "tour.ipynb")
    out = os.path.join(kutil.TMP, "tour.out.ipynb")
    r = subprocess.run([JUPYTER, "nbconvert", "--to", "notebook", "--execute", "--ExecutePreprocessor.kernel_name=nabla",
                        "--ExecutePreprocessor.timeout=120", "--output", out, src],
                       capture_output=True, text=True, timeout=T * 2)
    ok = r.returncode == 0 and os.path.exists(out)
    outputs = []
    if ok:
        nb = json.load(open(out))
        for c in nb["cells"]:
            outputs += c.get("outputs", [])
    kutil.result("nbconvert executes a notebook", ok and len(outputs) > 0,
                 f"rc={r.returncode} outputs={len(outputs)} {r.stderr[-400:]}")
    kutil.result("nbconvert notebook has no errors", ok and not any(o.get("output_type") == "error" for o in outputs),
                 [o for o in outputs if o.get("output_type") == "error"][:1])

# ---- the classic notebook server --------------------------------------------
if not have("notebook"):
    kutil.result("notebook server runs a cell", None, "jupyter notebook is not installed (Debian: jupyter-notebook)")
    kutil.finish()

from tornado import ioloop, websocket  # noqa: E402  (the server's own dependency)

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
token = uuid.uuid4().hex
server = subprocess.Popen([JUPYTER, "notebook", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                           f"--NotebookApp.token={token}", f"--notebook-dir={kutil.TMP}", "--allow-root"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
base = f"http://127.0.0.1:{port}"


def api(method, path, body=None):
    req = urllib.request.Request(f"{base}{path}?token={token}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=T) as r:
        data = r.read()
        return json.loads(data) if data else None


try:
    up = False
    for _ in range(int(T * 4)):
        try:
            api("GET", "/api")
            up = True
            break
        except Exception:
            time.sleep(0.25)
    kutil.result("notebook server starts", up, server.stderr.read()[-400:] if not up and server.poll() is not None else "not answering")
    if up:
        specs = api("GET", "/api/kernelspecs")
        kutil.result("server lists the nabla kernelspec", "nabla" in specs.get("kernelspecs", {}), list(specs.get("kernelspecs", {})))
        kernel = api("POST", "/api/kernels", {"name": "nabla"})

        async def run_cell(code):
            ws = await websocket.websocket_connect(f"ws://127.0.0.1:{port}/api/kernels/{kernel['id']}/channels?token={token}")
            msg_id = uuid.uuid4().hex
            await ws.write_message(json.dumps({
                "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex, "msg_type": "execute_request",
                           "version": "5.3", "date": ""},
                "parent_header": {}, "metadata": {}, "channel": "shell",
                "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}}))
            got = {"stream": "", "result": None, "reply": None, "idle": False}
            deadline = time.time() + T
            # iopub and shell are separate channels: done when both the reply and idle arrived
            while time.time() < deadline and (got["reply"] is None or not got["idle"]):
                raw = await ws.read_message()
                if raw is None:
                    break
                m = json.loads(raw)
                if m.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                t = m["msg_type"]
                if t == "stream":
                    got["stream"] += m["content"]["text"]
                elif t == "execute_result":
                    got["result"] = m["content"]["data"]["text/plain"]
                elif t == "execute_reply":
                    got["reply"] = m["content"]["status"]
                elif t == "status" and m["content"]["execution_state"] == "idle":
                    got["idle"] = True
            ws.close()
            return got

        got = ioloop.IOLoop.current().run_sync(lambda: run_cell('print("hi from nabla")\nfn sq(x) = x * x\nsq(7)'), timeout=T)
        kutil.result("notebook server runs a cell over the websocket", got["reply"] == "ok" and "hi from nabla" in got["stream"]
                     and got["result"] == "49", got)
        api("DELETE", f"/api/kernels/{kernel['id']}")
finally:
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
kutil.finish()
