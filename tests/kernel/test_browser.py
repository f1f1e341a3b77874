"""The notebook experience in a real browser: Debian's classic Jupyter
Notebook server and headless Chromium, driven through the DevTools protocol.

A notebook whose cell trains a small model for a few seconds under
progress() and plots the losses is opened in the browser and run there
(Jupyter.notebook.execute_all_cells()).  While it runs the page is sampled:
the progress bar must be ONE output element whose text changes in place and
ends at 100%; the plot's SVG must be drawn (a path with points).  A
screenshot is saved as build/test-logs/browser-notebook.png.
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import ROOT, SLOW, TMP, result  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    import websocket  # python3-websocket
except ImportError:
    websocket = None

CELL = r'''
seed(0)
x = randn(256, 8); y = randint(0, 3, [256])
w = zeros(8, 3); w.requires_grad = true
losses = list()
bar = progress(0..60, desc="browser")
for step in bar {
  t0 = clock(); while clock() - t0 < 0.05 { }
  loss = cross_entropy(x @ w, y)
  backward(loss)
  no_grad { w -= 0.5 * w.grad }
  w.grad = nil
  push(losses, loss.item())
  bar.set(loss=loss.item())
}
plot(losses, title="training loss")
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_http(url, deadline):
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except Exception:  # noqa: BLE001
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer")


class Page:
    """A minimal DevTools-protocol client for one page."""

    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=30 * SLOW)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return r.get("result", {}).get("value")


def main():
    if not CHROMIUM or websocket is None:
        # tools/install-deps.sh installs both; a machine without them cannot run this test
        result("browser_notebook", None, "chromium or python3-websocket is not installed (tools/install-deps.sh installs them)")
        return
    kutil.install("nabla")
    nbdir = os.path.join(TMP, "nb")
    os.makedirs(nbdir)
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": CELL}],
          "metadata": {"kernelspec": {"name": "nabla", "display_name": "Nabla", "language": "nabla"}},
          "nbformat": 4, "nbformat_minor": 5}
    with open(os.path.join(nbdir, "browser.ipynb"), "w") as f:
        json.dump(nb, f)
    port, dport, token = free_port(), free_port(), "nablatest"
    env = dict(os.environ, HOME=TMP, JUPYTER_CONFIG_DIR=os.path.join(TMP, "cfg"), JUPYTER_DATA_DIR=os.path.join(TMP, "data"))
    server = subprocess.Popen(["jupyter-notebook", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                               f"--NotebookApp.token={token}", f"--notebook-dir={nbdir}", "--allow-root"],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(TMP, "server.log"), "w"), env=env)
    chrome = None
    try:
        deadline = time.time() + 60 * SLOW
        wait_http(f"http://127.0.0.1:{port}/api?token={token}", deadline)
        url = f"http://127.0.0.1:{port}/notebooks/browser.ipynb?token={token}"
        chrome = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                   f"--remote-debugging-port={dport}", f"--user-data-dir={os.path.join(TMP, 'chrome')}",
                                   "--window-size=1200,900", url],
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(TMP, "chrome.log"), "w"), env=env)
        targets = json.loads(wait_http(f"http://127.0.0.1:{dport}/json", deadline))
        page_t = [t for t in targets if t.get("type") == "page"]
        page = Page(page_t[0]["webSocketDebuggerUrl"])
        while time.time() < deadline and not page.js(
                "typeof Jupyter !== 'undefined' && !!Jupyter.notebook && !!Jupyter.notebook.kernel && Jupyter.notebook.kernel.is_connected()"):
            time.sleep(0.3)
        page.js("Jupyter.notebook.execute_all_cells()")
        seen, count_max = [], 0
        run_deadline = time.time() + 90 * SLOW
        while time.time() < run_deadline:
            state = page.js("""(() => {
                const bars = document.querySelectorAll('.output_area .nabla-progress');
                const svg = document.querySelectorAll('.output_area svg polyline, .output_area svg path');
                const busy = document.body.classList.contains('notebook_app') && Jupyter.notebook.kernel_busy;
                return {n: bars.length, text: bars.length ? bars[0].textContent : '', svg: svg.length,
                        idle: !Jupyter.notebook.get_cell(0).running && Jupyter.notebook.get_cell(0).input_prompt_number !== '*'};
            })()""")
            if state and state["n"]:
                count_max = max(count_max, state["n"])
                if not seen or seen[-1] != state["text"]:
                    seen.append(state["text"])
            if state and state["idle"] and state["svg"] and "100%" in state["text"]:
                break
            time.sleep(0.2)
        shot = page.call("Page.captureScreenshot", format="png")
        logdir = os.path.join(ROOT, "build", "test-logs")
        os.makedirs(logdir, exist_ok=True)
        with open(os.path.join(logdir, "browser-notebook.png"), "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        final = page.js("""(() => {
            const bars = document.querySelectorAll('.output_area .nabla-progress');
            const svgs = [...document.querySelectorAll('.output_area svg')];
            const pts = svgs.map(s => [...s.querySelectorAll('polyline')].map(p => (p.getAttribute('points') || '').trim().split(/\\s+/).length));
            const box = svgs.length ? svgs[0].getBoundingClientRect() : null;
            return {n: bars.length, text: bars.length ? bars[0].textContent : '', svgs: svgs.length, pts: pts,
                    w: box ? box.width : 0, h: box ? box.height : 0, title: svgs.length ? svgs[0].textContent : ''};
        })()""")
        result("browser_progress_one_output", final["n"] == 1 and count_max == 1, f"{final['n']} progress outputs (max {count_max} while running)")
        result("browser_progress_updates_in_place", len(seen) >= 3 and "100%" in final["text"] and "60/60" in final["text"] and "loss=" in final["text"],
               f"{len(seen)} distinct texts; final {final['text']!r}; seen {seen[:4]}")
        drawn = final["svgs"] >= 1 and final["w"] > 100 and final["h"] > 50 and any(any(n >= 60 for n in p) for p in final["pts"]) and "training loss" in final["title"]
        result("browser_plot_drawn", drawn, f"svgs {final['svgs']} size {final['w']}x{final['h']} polyline points {final['pts']}")
    except Exception as e:  # noqa: BLE001
        log = ""
        for f in ("server.log", "chrome.log"):
            p = os.path.join(TMP, f)
            if os.path.exists(p):
                log += f" | {f}: " + open(p).read()[-400:]
        result("browser_notebook", False, f"{type(e).__name__}: {e}{log}")
    finally:
        for p in (chrome, server):
            if p:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


main()
kutil.finish()
