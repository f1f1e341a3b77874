#!/usr/bin/python3
"""The op profiler (tensor/tprofile.c, lang/lib/lprofile.c, the %%profile
magic of dist/dmagic.c): consistency of its numbers, never their speed.

  profile_counts_*     a matmul+relu+sum program, forward and backward, run a
                       random number of times on fresh random odd-shaped
                       inputs: every op appears with its exact call count and
                       phase (forward matmul/relu/sum; backward: one dX and one
                       dW matmul only when both inputs need a gradient; one
                       autograd range per node), the result equals NumPy's
  profile_consistency  an op-heavy program: every row has 0 <= self <= total,
                       the self times add up to at most the wall time and to at
                       least a third of it; sort_by and top order and cut rows;
                       with the TSC's ticks and with clock_gettime
  profile_trace        trace="f.json" is valid JSON (Chrome trace events): one
                       host event per call with the right phase, children
                       inside their parents, written atomically (no temporary)
  profile_errors_*     an error inside f propagates with its message and leaves
                       the profiler off; nested profiles are a clear error;
                       bad options are ValueErrors; profile_stop with no
                       profile running is an error; an unwritable trace path
                       names the file and leaves the profiler off
  profile_repl_*       %%profile cells and %profile lines in the REPL (piped
                       input): the table is printed, the cell's assignments
                       persist, the record is kept in _profile
  profile_kernel_*     the same cell in the Jupyter kernel: a display_data with
                       text/html (a <table>) and text/plain; profile(f) too
  profile_emu_cuda     on the emulated CUDA device the GPU timing path runs:
                       rows on cuda with non-negative GPU times, gpu_total >=
                       gpu_self, a GPU row in the trace, counts as on the CPU

$NABLA is the interpreter (default build/nabla).  Prints PASS/FAIL/SKIP lines."""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ASAN = os.environ.get("NABLA_ASAN") == "1"
BUILD = os.path.abspath(os.environ.get("NABLA_BUILD") or os.path.join(ROOT, "build-asan" if ASAN else "build"))
NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(BUILD, "nabla"))
SLOW = 4 if ASAN else 1
TMP = tempfile.mkdtemp(prefix="nabla-profile-test-")
failed = 0
rng = np.random.default_rng()


def report(name, ok, why=""):
    global failed
    if ok:
        print(f"PASS: {name}", flush=True)
    else:
        failed += 1
        print(f"FAIL: {name}: {' '.join(str(why).split())[:1500]}", flush=True)


def env(**kw):
    e = dict(os.environ, NO_COLOR="1", NABLA_STDLIB=os.path.join(ROOT, "stdlib"))
    e.pop("NABLA_CUDA_EMULATE", None)
    e.update(kw)
    return e


def run_file(src, timeout=120, **kw):
    path = os.path.join(TMP, f"p{random.randrange(1 << 30)}.nbl")
    with open(path, "w") as f:
        f.write(src)
    p = subprocess.run([NABLA, path], capture_output=True, text=True, timeout=timeout * SLOW, env=env(**kw), cwd=TMP)
    return p.returncode, p.stdout, p.stderr


# nabla source that prints a profile record: one "@R" line per row, then "@P"
DUMP = r'''
fn dump(p, extra) {
  for r in p.ops { print("@R", r.name, r.phase, r.device, r.kind, r.calls, r.self_ms, r.total_ms, r.gpu_self_ms, r.gpu_total_ms) }
  print("@P", p.wall_ms, p.self_ms, p.gpu, p.events, p.dropped, extra)
}
'''
ROW = ("name", "phase", "device", "kind", "calls", "self_ms", "total_ms", "gpu_self_ms", "gpu_total_ms")


def rows_of(out):
    """the record dump() printed: {"rows": [...], "wall_ms", "self_ms", "gpu", "events", "dropped", "extra": [...]}"""
    rows, rec = [], None
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["@R"] and len(f) == 10:
            r = dict(zip(ROW, f[1:]))
            for k in ROW[4:]:
                r[k] = float(r[k])
            r["calls"] = int(r["calls"])
            rows.append(r)
        elif f[:1] == ["@P"] and len(f) >= 6:
            rec = {"rows": rows, "wall_ms": float(f[1]), "self_ms": float(f[2]), "gpu": f[3] == "true",
                   "events": int(f[4]), "dropped": int(f[5]), "extra": f[6:]}
    return rec


def counts(rows, kind="op"):
    c = {}
    for r in rows:
        if r["kind"] == kind:
            c[(r["name"], r["phase"])] = c.get((r["name"], r["phase"]), 0) + r["calls"]
    return c


def known_program(device, both_grad):
    m, k, n = (int(v) for v in rng.integers(3, 9, size=3))
    # values exact in f32: a [..] literal is an f32 tensor before tensor(..., dtype="f64") widens it
    x, w = (rng.standard_normal(sh).astype(np.float32).astype(np.float64) for sh in ((m, k), (k, n)))
    reps = int(rng.integers(2, 5))
    dev = f', device="{device}"' if device != "cpu" else ', dtype="f64"'
    xg = "true" if both_grad else "false"
    src = DUMP + f'''
x = tensor({json.dumps(x.tolist())}, requires_grad={xg}{dev})
w = tensor({json.dumps(w.tolist())}, requires_grad=true{dev})
fn step() {{
  s = sum(relu(x @ w))
  backward(s)
  s
}}
p = profile(fn() {{
  r = nil
  for i in 0..{reps} {{ r = step() }}
  r
}}, show=false, trace="{TMP}/k-{device}.json")
dump(p, str(p.result.item()) + " " + str(w.grad.sum().item()))
'''
    rc, out, err = run_file(src, **({"NABLA_CUDA_EMULATE": "force", "NABLA_EMU_SMS": "2"} if device == "cuda" else {}))
    d = rows_of(out)
    if rc != 0 or d is None:
        return None, f"exit {rc}: {err[-600:]} {out[-300:]}", reps, None
    d["result"], d["gw"] = float(d["extra"][0]), float(d["extra"][1])
    ref = np.maximum(x @ w, 0).sum()
    gw = reps * (x.T @ (((x @ w) > 0).astype(float))).sum()
    return d, (ref, gw), reps, os.path.join(TMP, f"k-{device}.json")


def check_known(prefix, device):
    for both in (False, True):
        name = f"{prefix}_{'dx_dw' if both else 'dw'}"
        d, ref, reps, trace = known_program(device, both)
        if d is None:
            report(name, False, ref)
            continue
        rows = d["rows"]
        c = counts(rows)
        nodes = counts(rows, "autograd")
        tol = 1e-4 if device == "cuda" else 1e-9
        ok_val = abs(d["result"] - ref[0]) <= tol * max(1, abs(ref[0])) and abs(d["gw"] - ref[1]) <= tol * max(1, abs(ref[1]))
        want_fwd = {("matmul", "forward"): reps, ("relu", "forward"): reps, ("sum", "forward"): reps}
        fwd = {k: v for k, v in c.items() if k[1] == "forward"}
        bwd_mm = c.get(("matmul", "backward"), 0)
        ok_counts = fwd == want_fwd and bwd_mm == reps * (2 if both else 1)
        # one range per autograd node and backward pass, all tagged backward
        ok_nodes = len(nodes) == 3 and all(k[1] == "backward" and v == reps for k, v in nodes.items())
        ok_dev = all(r["device"] == device for r in rows if r["kind"] == "op")
        report(name, ok_val and ok_counts and ok_nodes and ok_dev,
               f"value {d['result']} vs {ref[0]}, grad sum {d['gw']} vs {ref[1]}; forward ops {fwd} (want {want_fwd}); "
               f"backward matmuls {bwd_mm} (want {reps * (2 if both else 1)}); nodes {nodes}; rows {rows}")
        if device == "cuda":
            cu = [r for r in rows if r["device"] == "cuda"]
            ok = (d["gpu"] is True and cu and all(r["gpu_self_ms"] >= 0 and r["gpu_total_ms"] >= r["gpu_self_ms"] - 1e-9 for r in cu)
                  and all(r["gpu_total_ms"] > 0 for r in cu if r["kind"] == "op"))
            report(f"{name}_gpu_times", ok, f"gpu {d['gpu']}; cuda rows {cu}")
            try:
                t = json.load(open(trace))
                gpu_ev = [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 2]
                n_ops = sum(r["calls"] for r in rows if r["kind"] == "op" and r["device"] == "cuda")
                report(f"{name}_gpu_trace", len(gpu_ev) == n_ops and all(e["dur"] >= 0 and e["ts"] >= 0 for e in gpu_ev),
                       f"{len(gpu_ev)} GPU events for {n_ops} device ops")
            except (OSError, ValueError, KeyError) as e:
                report(f"{name}_gpu_trace", False, e)


def check_consistency(suffix="", **kw):
    n = int(rng.integers(96, 160))
    reps = int(rng.integers(20, 40))
    src = DUMP + f'''
a = randn({n}, {n})
b = randn({n}, {n})
fn work() {{
  c = a
  for i in 0..{reps} {{ c = tanh(c @ b) * 0.5 + a }}
  sum(c)
}}
p = profile(work, show=false)
dump(p, "")
print(profile_table(p, top=3, sort_by="calls"))
q = profile(work, show=false, sort_by="total")
tot = []
for r in q.ops {{ push(tot, r.total_ms) }}
print("@T" + str(tot == sorted(tot, reverse=true)))
'''
    rc, out, err = run_file(src, **kw)
    d = rows_of(out)
    if rc != 0 or d is None:
        report("profile_consistency" + suffix, False, f"exit {rc}: {err[-600:]}")
        return
    rows, wall, self_sum = d["rows"], d["wall_ms"], d["self_ms"]
    per_row = all(0 <= r["self_ms"] <= r["total_ms"] + 1e-9 and r["total_ms"] <= wall + 1e-6 for r in rows)
    add = abs(sum(r["self_ms"] for r in rows) - self_sum) <= 1e-6 * max(1, self_sum)
    report("profile_consistency" + suffix, per_row and add and self_sum <= wall + 1e-6 and self_sum >= wall / 3,
           f"wall {wall} ms, self sum {self_sum} ms; rows {rows}")
    c = counts(rows)
    report("profile_consistency_counts" + suffix, c.get(("matmul", "forward")) == reps and c.get(("sum", "forward")) == 1,
           f"counts {c} (want matmul x{reps}, sum x1)")
    lines = [l for l in out.splitlines() if l and not l.startswith("@")]
    body = lines[1:4]
    calls = [int(l.split()[3]) for l in body if len(l.split()) > 4]
    report("profile_table_top_sort" + suffix, len(body) == 3 and calls == sorted(calls, reverse=True) and lines[4].startswith("3 of ")
           and "by calls" in lines[4] and "@Ttrue" in out, f"table {lines[:6]}; {out[-200:]}")


def check_trace():
    m = int(rng.integers(5, 40))
    path = os.path.join(TMP, "sub", "t.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    src = DUMP + f'''
w = randn({m}, {m}, requires_grad=true)
p = profile(fn() {{ l = sum(sigmoid(w @ w) * 2.0); backward(l); l }}, show=false, trace="{path}")
dump(p, "")
'''
    rc, out, err = run_file(src)
    d = rows_of(out)
    try:
        t = json.load(open(path))
    except (OSError, ValueError) as e:
        report("profile_trace", False, f"exit {rc}: {e}; {err[-400:]}")
        return
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 1]
    by = {}
    for e in ev:
        by[(e["name"], e["cat"])] = by.get((e["name"], e["cat"]), 0) + 1
    want = {(r["name"], r["phase"]): r["calls"] for r in d["rows"]}
    # children lie within their parents: check every pair whose intervals overlap nests
    nested = True
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev)
    for i in range(len(spans) - 1):
        a, b = spans[i], spans[i + 1]
        if b[0] < a[1] - 1e-3 and b[1] > a[1] + 1e-3:
            nested = False
    leftovers = [f for f in os.listdir(os.path.dirname(path)) if f != "t.json"]
    report("profile_trace", rc == 0 and by == want and nested and not leftovers and len(ev) == d["events"]
           and all(e["dur"] >= 0 for e in ev) and ("matmul", "backward") in by,
           f"exit {rc}; trace counts {by} vs rows {want}; nested {nested}; leftovers {leftovers}")


def check_errors():
    cases = {
        "raises": ('profile(fn() { x = randn(3, 3); x @ x; error("boom 42") }, show=false)', r"boom 42"),
        "nested": ('profile(fn() profile(fn() 1, show=false), show=false)', r"already running"),
        "sort_by": ('profile(fn() 1, sort_by="fast")', r"sort_by must be one of"),
        "top": ('profile(fn() 1, top=-2)', r"top must be"),
        "stop_without_start": ("profile_stop()", r"no profile is running"),
        "trace_path": (f'profile(fn() randn(2) + 1, show=false, trace="{TMP}/no/such/dir/t.json")', r"t\.json"),
        "not_a_function": ("profile(3)", r"expected a function"),
    }
    for name, (expr, pat) in cases.items():
        src = f'''
r = try {{ {expr} }} catch e {{ print("@E " + e.message) ; nil }}
print("@A " + str(profile_active()))
z = randn(4) * 2.0
print("@N " + str(profile(fn() z + 1, show=false).ops[0].calls))
'''
        rc, out, err = run_file(src)
        msg = re.search(r"^@E (.*)$", out, re.M)
        act = re.search(r"^@A (.*)$", out, re.M)
        again = re.search(r"^@N (.*)$", out, re.M)
        report(f"profile_errors_{name}", rc == 0 and msg and re.search(pat, msg.group(1)) and act and act.group(1) == "false"
               and again and again.group(1) == "1", f"exit {rc}; out {out[-400:]}; err {err[-400:]}")


def check_repl():
    k = int(rng.integers(10, 99))
    src = (f"a = randn({k}, 7)\n%%profile top=4, sort_by=\"calls\"\nb = a @ transpose(a)\nc = relu(b) + 1\nsum(c)\n\n"
           f"print(\"@B \" + str(b.shape[0]) + \" \" + str(_profile.ops[0].calls) + \" \" + str(len(_profile.ops)))\n"
           f"%profile d = tanh(a)\nprint(\"@D \" + str(d.shape[1]) + \" \" + str(profile_active()))\n"
           f"%%profile sort_by=\"bogus\"\ne = a * 2\n\nprint(\"@E \" + str(profile_active()))\n")
    p = subprocess.run([NABLA], input=src, capture_output=True, text=True, timeout=60 * SLOW, env=env())
    out = p.stdout
    tables = [m.start() for m in re.finditer(r"^op\s+phase\s+dev\s+calls", out, re.M)]
    b = re.search(r"^@B (\d+) (\d+) (\d+)$", out, re.M)
    dline = re.search(r"^@D (\d+) (\w+)$", out, re.M)
    eline = re.search(r"^@E (\w+)$", out, re.M)
    foot = re.search(r"^(\d+) of (\d+) rows by calls", out, re.M)
    report("profile_repl_cell", len(tables) >= 1 and "matmul" in out and b and int(b.group(1)) == k and int(b.group(3)) >= 4
           and foot and int(foot.group(1)) == min(4, int(foot.group(2))) and int(b.group(3)) == int(foot.group(2)),
           f"stdout {out[-800:]}; stderr {p.stderr[-300:]}")
    report("profile_repl_line", len(tables) == 2 and dline and dline.group(1) == "7" and dline.group(2) == "false"
           and re.search(r"^tanh\s+forward", out, re.M), f"stdout {out[-600:]}")
    report("profile_repl_bad_options_off", eline and eline.group(1) == "false" and "sort_by must be one of" in p.stderr,
           f"stdout {out[-300:]}; stderr {p.stderr[-300:]}")


def check_kernel():
    sys.path.insert(0, os.path.join(ROOT, "tests", "kernel"))
    try:
        import kutil  # noqa: F401
        from jupyter_client.manager import start_new_kernel
    except ImportError as e:
        report("profile_kernel", False, f"jupyter_client: {e}")
        return
    os.environ["NABLA"] = NABLA
    import kutil
    kutil.install("nabla")
    km = kc = None
    k = int(rng.integers(5, 30))
    cells = [f"%%profile top=5\nx = randn({k}, {k})\ny = x @ x\nsum(relu(y))",
             "p = profile(fn() sum(x * 3.0), top=2)",
             "print(y.shape[0], p.ops[0].name, profile_active())"]
    res = []
    try:
        km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=60 * SLOW)
        for code in cells:
            mid = kc.execute(code)
            got = []
            while True:
                m = kc.get_iopub_msg(timeout=60 * SLOW)
                if m["parent_header"].get("msg_id") != mid:
                    continue
                got.append((m["msg_type"], m["content"]))
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    break
            res.append(got)
    except Exception as e:  # noqa: BLE001 (reported)
        report("profile_kernel", False, f"{type(e).__name__}: {e}")
        return
    finally:
        if kc:
            kc.stop_channels()
        if km:
            km.shutdown_kernel(now=True)

    def displays(msgs):
        return [c["data"] for t, c in msgs if t == "display_data"]

    d0, d1 = displays(res[0]), displays(res[1])
    ok0 = (len(d0) == 1 and "<table" in d0[0].get("text/html", "") and "matmul" in d0[0]["text/html"]
           and re.search(r"^op\s+phase", d0[0].get("text/plain", ""), re.M)
           and re.search(r"^(\d+) of (\d+) rows", d0[0]["text/plain"], re.M)
           and (lambda m: int(m.group(1)) == min(5, int(m.group(2))))(re.search(r"^(\d+) of (\d+) rows", d0[0]["text/plain"], re.M)))
    report("profile_kernel_cell_html", ok0, f"displays {d0}; msgs {[t for t, _ in res[0]]}")
    report("profile_kernel_call_html", len(d1) == 1 and "<table" in d1[0].get("text/html", "") and "2 of " in d1[0]["text/plain"],
           f"displays {d1}")
    out2 = "".join(c.get("text", "") for t, c in res[2] if t == "stream")
    report("profile_kernel_state", out2.split()[:1] == [str(k)] and out2.split()[-1:] == ["false"], f"stdout {out2!r}")


def main():
    if not os.path.exists(NABLA):
        print(f"SKIP: profile: {NABLA} is not built")
        return
    check_known("profile_counts_cpu", "cpu")
    check_consistency()
    check_consistency("_clock_gettime", NABLA_PROFILE_NO_TSC="1")   # the timer where the TSC is not invariant
    check_trace()
    check_errors()
    check_repl()
    check_kernel()
    if os.path.exists(os.path.join(BUILD, "cuda", "emu", "nabla_cuda_emu.so")):
        check_known("profile_emu_cuda", "cuda")
    else:
        print("SKIP: profile_emu_cuda: this build has no emulated CUDA device")


try:
    main()
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if failed else 0)
