"""NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
Executes every notebook in notebooks/ headlessly with nbclient (the way
`jupyter nbconvert --execute` does) and checks their outputs."""
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import ROOT, SLOW, result  # noqa: E402

try:
    import nbformat
    from nbclient import NotebookClient
except ImportError as e:
    print(f"SKIP: notebooks: nbclient/nbformat not installed ({e}); apt install python3-nbclient")
    sys.exit(0)

kutil.install("nabla")
NBDIR = os.path.join(ROOT, "notebooks")


def run(name):
    path = os.path.join(NBDIR, name)
    nb = nbformat.read(path, as_version=4)
    stored = copy.deepcopy(nb)
    for c in stored.cells:
        if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count")):
            raise AssertionError(f"{name} is stored with outputs; clear them before committing")
    t0 = time.time()
    NotebookClient(nb, timeout=120 * SLOW, kernel_name="nabla", resources={"metadata": {"path": NBDIR}}).execute()
    print(f"note: {name} ran in {time.time() - t0:.1f} s", flush=True)
    return nb


def text(cell):
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            out.append(o.data.get("text/plain", ""))
        elif o.output_type == "error":
            out.append(f"{o.ename}: {o.evalue}")
    return "".join(out)


def results(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "execute_result"]


def check(name, fn):
    try:
        nb = run(name)
        errs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        if errs:
            result(f"notebook {name}", False, f"cell error {errs[0].ename}: {errs[0].evalue}")
            return
        why = fn(nb)
        result(f"notebook {name}", why is None, why or "")
    except Exception as e:
        result(f"notebook {name}", False, f"{type(e).__name__}: {e}")


def tour(nb):
    r = results(nb)
    if not r or r[0].data["text/plain"] != "7":
        return f"first result {r[0].data if r else None}"
    if not any("text/html" in o.data for o in r):
        return "no tensor shown as HTML"
    if "sum of 1..10 is 55" not in "".join(text(c) for c in nb.cells if c.cell_type == "code"):
        return "loop output missing"
    return None


def autograd(nb):
    r = results(nb)
    if not r or "2, 4, 6" not in r[0].data["text/plain"].replace(".", "").replace("  ", " "):
        return f"w.grad shown as {r[0].data['text/plain'] if r else None!r}"
    if r[-1].data["text/plain"] not in ('"ok"', "ok"):
        return f"last result {r[-1].data}"
    return None


def digits(nb):
    import re
    train = [c for c in nb.cells if c.cell_type == "code" and "step_fn(model" in c.source][0]
    streams = [o for o in train.outputs if o.output_type == "stream"]
    # progress(): ONE display output, updated in place (nbclient applies the
    # update_display_data messages to it) to its final state
    bars = [o for o in train.outputs if o.output_type == "display_data" and "training:" in o.data.get("text/plain", "")]
    if len(bars) != 1:
        return f"expected one progress display in the training cell, got {len(bars)}"
    final = bars[0].data["text/plain"]
    if "100%" not in final or "15/15" not in final or "test_acc=" not in final or "<progress" not in bars[0].data.get("text/html", ""):
        return f"the progress display did not end at 100% with the postfix: {final!r}"
    last = results(nb)[-1].data["text/plain"]
    acc = float(last)
    if acc < 0.95:
        return f"final accuracy {acc} < 0.95"
    print(f"note: digits test accuracy {acc:.4f}; training output in {len(streams)} stream messages", flush=True)
    if not re.search(r"trained in [0-9.]+ s", text(train)):
        return "the training cell's summary line is missing"
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "display_data"]
    if not any("image/svg+xml" in o.data and "training loss" in o.data["image/svg+xml"] for o in shown):
        return "no SVG loss plot displayed"
    if not any("image/png" in o.data for o in shown):
        return "no PNG image (imshow) displayed"
    return None


def distributed(nb):
    import re
    out = "".join(text(c) for c in nb.cells if c.cell_type == "code")
    if "identical on all ranks: true" not in out:
        return "parameters differ across ranks after data-parallel training"
    one = re.search(r"one process: test accuracy ([0-9.]+)", out)
    dp = re.search(r"4 workers: test accuracy ([0-9.]+)", out)
    if not one or not dp:
        return "accuracy lines missing"
    # a few quick epochs: data parallel must learn as well as one process did
    if float(dp.group(1)) < 0.8 or abs(float(dp.group(1)) - float(one.group(1))) > 0.06:
        return f"data-parallel accuracy {dp.group(1)} vs one process {one.group(1)}"
    if not all(f"[rank {r}] worker {r} of 4" in out for r in range(4)):
        return "worker output (prefixed by rank) missing"
    # the ZeRO stage 3 section: the model's data-parallel state exceeds the per-worker limit,
    # stage 3 trains it (the loss falls) holding at most the limit on every worker
    need = re.search(r"data parallelism needs ([0-9.]+) MiB per worker, the limit is ([0-9.]+) MiB", out)
    if not need or not float(need.group(1)) > float(need.group(2)):
        return f"stage-3 section: the model is not larger than the limit: {need.group(0) if need else None}"
    loss = re.search(r"stage 3: loss ([0-9.]+) -> ([0-9.]+)", out)
    if not loss or not float(loss.group(2)) < float(loss.group(1)):
        return f"stage-3 section: the loss did not fall: {loss.group(0) if loss else None}"
    if out.count("(within the limit: true)") != 4:
        return "stage-3 section: a worker's training state is over the limit"
    return None


def gpu(nb):
    import re
    out = "".join(text(c) for c in nb.cells if c.cell_type == "code")
    dev = re.search(r"device: (cpu|cuda)", out)
    if not dev:
        return "no device line"
    if f"images on {dev.group(1)}" not in out or f"parameters on {dev.group(1)}" not in out:
        return f"data or model not on {dev.group(1)}"
    loss = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", out)
    if not loss or not float(loss.group(2)) < 0.5 * float(loss.group(1)):
        return f"loss did not fall: {loss.group(0) if loss else None}"
    acc = float(results(nb)[-1].data["text/plain"])
    if acc < 0.9:
        return f"test accuracy {acc} < 0.9"
    if dev.group(1) == "cuda" and "GPU memory:" not in out:
        return "no GPU memory report"
    print(f"note: gpu notebook on {dev.group(1)}: test accuracy {acc:.3f}", flush=True)
    return None


check("tour.ipynb", tour)
check("autograd.ipynb", autograd)
check("digits.ipynb", digits)
check("distributed.ipynb", distributed)
check("gpu.ipynb", gpu)
kutil.finish()
