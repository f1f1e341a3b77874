#!/usr/bin/python3
"""Where Nabla used to differ from torch silently (issue 31), checked against
torch 1.13 on fresh random inputs, on the CPU and on the emulated CUDA device:

  - x[mask] = v fills the selected elements in mask order (the case where
    count equals the last dimension included), for masks over all or the
    leading axes, broadcast values, non-contiguous targets, with gradients;
    v of x's own shape is an error naming where(mask, v, x);
  - max(a, t)/min(a, t) with a tensor t are the elementwise maximum/minimum
    (values and gradients); max(x, 1) stays the reduction;
  - mse_loss of different shapes warns once per call site (torch's
    UserWarning) and computes torch's broadcast value;
  - view(x, 4, -1) / x.view(-1) infer one size, torch's errors otherwise;
  - round (with digits: half to even), trunc, frac, sign on tensors:
    values and gradients (zero; frac's is one).

Inputs travel to nabla as a safetensors file written here, results come back
the same way.  Run with /usr/bin/python3; NABLA = the interpreter (NABLA_ASAN=1
for the ASan build).  Prints PASS/FAIL/SKIP lines; exits 1 on a failure.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ASAN = os.environ.get("NABLA_ASAN") == "1"
BUILD = os.environ.get("NABLA_BUILD") or os.path.join(ROOT, "build-asan" if ASAN else "build")
NABLA = os.environ.get("NABLA") or os.path.join(BUILD, "nabla")
EMU_MODULE = os.path.join(BUILD, "cuda", "emu", "nabla_cuda_emu.so")
SUFFIX = " [asan]" if ASAN else ""
failures = 0


def report(kind, name, why=""):
    global failures
    if kind == "FAIL":
        failures += 1
    why = " ".join(str(why).split())
    print(f"{kind}: {name}{SUFFIX}" + (f": {why[:1200]}" if why else ""), flush=True)


try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: torch semantics: numpy/torch not importable ({e}); run with /usr/bin/python3")
    sys.exit(0)

ST_DT = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}
NP_DT = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_,
         "F16": np.float16}


def write_st(path, arrays):
    header, blobs, off = {}, [], 0
    for k, a in arrays.items():
        a = np.ascontiguousarray(a)
        b = a.tobytes()
        header[k] = {"dtype": ST_DT[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=NP_DT[info["dtype"]]).reshape(info["shape"]).copy()
    return out


TMP = tempfile.mkdtemp(prefix="nabla-torchsem-")


def run_nabla(code, inputs, device, name):
    """runs code with `inp` (the inputs record), `dev` and `outp` (the output
    path) defined; returns (outputs dict, stdout, stderr) or None on failure"""
    inp = os.path.join(TMP, f"{name}-in.safetensors")
    outp = os.path.join(TMP, f"{name}-{device}-out.safetensors")
    script = os.path.join(TMP, f"{name}-{device}.nbl")
    write_st(inp, inputs)
    with open(script, "w") as f:
        f.write(f'inp = load("{inp}")\ndev = "{device}"\noutp = "{outp}"\n' + code)
    env = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"), NO_COLOR="1")
    if device == "cuda":
        env.update(NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2")
        env.pop("NABLA_CUDA_DISABLE", None)
        env.pop("NABLA_CUDA_MODULE", None)
    try:
        r = subprocess.run([NABLA, script], capture_output=True, text=True, env=env, timeout=300)
    except subprocess.TimeoutExpired:
        report("FAIL", f"{name} ({device})", "timed out")
        return None
    if r.returncode != 0:
        report("FAIL", f"{name} ({device})", f"nabla exited {r.returncode}: {r.stderr.strip()[-900:]}")
        return None
    return (read_st(outp) if os.path.exists(outp) else {}), r.stdout, r.stderr


def close(name, got, want, rtol=1e-5, atol=1e-6, exact=False):
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        report("FAIL", name, f"shape {got.shape} != torch {want.shape}")
        return
    if exact:
        ok = np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True)
    else:
        ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    diff = "" if ok else f"max |diff| {np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))):.3g}"
    report("PASS" if ok else "FAIL", name, diff)


def check(name, ok, why=""):
    report("PASS" if ok else "FAIL", name, "" if ok else why)


rng = np.random.default_rng()
DEVICES = ["cpu"] + (["cuda"] if os.path.exists(EMU_MODULE) else [])
if len(DEVICES) == 1:
    report("SKIP", "torch semantics on the emulated CUDA device", f"{EMU_MODULE} not built")

# ------------------------------------------------------------------ x[mask] = v
def mask_with_count(shape, count):
    flat = np.zeros(int(np.prod(shape)), dtype=bool)
    flat[rng.choice(flat.size, size=count, replace=False)] = True
    return flat.reshape(shape)


R, C = int(rng.integers(2, 5)), int(rng.integers(3, 7))
m_full = rng.random((R, C)) < 0.5
m_last = mask_with_count((R, C), C)          # count == last dimension: the old bug
L = int(rng.integers(3, 6))
m_lead = rng.random(L) < 0.6
m_lead[0] = True
inputs = {
    "x": rng.standard_normal((R, C)).astype(np.float32),
    "m_full": m_full.astype(np.int64), "v_full": rng.standard_normal(int(m_full.sum())).astype(np.float32),
    "m_last": m_last.astype(np.int64), "v_last": rng.standard_normal(C).astype(np.float32),
    "y": rng.standard_normal((L, 3)).astype(np.float32),
    "m_lead": m_lead.astype(np.int64), "v_rows": rng.standard_normal((int(m_lead.sum()), 3)).astype(np.float32),
    "v_row": rng.standard_normal(3).astype(np.float32),
    "b": rng.standard_normal((C, R)).astype(np.float32),      # x = transpose(b): a non-contiguous target
    "w": rng.standard_normal((R, C)).astype(np.float32),
}
MASK_NBL = r'''
T = fn(k) inp[k].to(dev)
M = fn(k) T(k) != 0
out = {}
# the issue's example: zeros(2, 2), mask [[F, T], [T, F]], v [10, 20]
z = zeros(2, 2, device=dev); z[tensor([[false, true], [true, false]]).to(dev)] = tensor([10.0, 20.0]).to(dev); out.issue = z
a = clone(T("x")); a[M("m_full")] = T("v_full"); out.full = a
a = clone(T("x")); a[M("m_last")] = T("v_last"); out.last = a
a = clone(T("x")); a[M("m_full")] = 7.5; out.scalar = a
a = clone(T("x")); a[M("m_full")] = tensor([2.5]).to(dev); out.one = a
a = clone(T("y")); a[M("m_lead")] = T("v_rows"); out.rows = a
a = clone(T("y")); a[M("m_lead")] = T("v_row"); out.row = a
bt = clone(T("b")); xt = transpose(bt); xt[M("m_last")] = T("v_last"); out.noncontig = bt
# gradients: x = a * 1 (a graph tensor), v requires grad, loss = sum(x * w)
g = grad(fn(a, v) { x = a * 1; x[M("m_last")] = v; sum(x * T("w")) }, argnums=[0, 1])(T("x"), T("v_last"))
out.ga = g[0]; out.gv = g[1]
g = grad(fn(a, v) { x = a * 1; x[M("m_full")] = v; sum(x * T("w")) }, argnums=[0, 1])(T("x"), T("v_full"))
out.ga_full = g[0]; out.gv_full = g[1]
g = grad(fn(a, v) { x = a * 1; x[M("m_full")] = v; sum(x * T("w")) }, argnums=[0, 1])(T("x"), tensor(3.0).to(dev))
out.ga_sc = g[0]; out.gv_sc = reshape(g[1], 1)
# v of x's own shape (the old where meaning) is an error naming where()
print(try { a = clone(T("x")); a[M("m_full")] = T("w"); "no error" } catch e { e.message })
save(outp, map_tensors(out, fn(t) t.to("cpu")))
'''


def mask_expect():
    t = {k: torch.tensor(v) for k, v in inputs.items()}
    mk = lambda k: t[k] != 0
    e = {}
    z = torch.zeros(2, 2); z[torch.tensor([[False, True], [True, False]])] = torch.tensor([10.0, 20.0]); e["issue"] = z
    a = t["x"].clone(); a[mk("m_full")] = t["v_full"]; e["full"] = a
    a = t["x"].clone(); a[mk("m_last")] = t["v_last"]; e["last"] = a
    a = t["x"].clone(); a[mk("m_full")] = 7.5; e["scalar"] = a
    a = t["x"].clone(); a[mk("m_full")] = torch.tensor([2.5]); e["one"] = a
    a = t["y"].clone(); a[mk("m_lead")] = t["v_rows"]; e["rows"] = a
    a = t["y"].clone(); a[mk("m_lead")] = t["v_row"]; e["row"] = a
    bt = t["b"].clone(); xt = bt.T; xt[mk("m_last")] = t["v_last"]; e["noncontig"] = bt
    for tag, mkey, v0 in (("", "m_last", t["v_last"]), ("_full", "m_full", t["v_full"]), ("_sc", "m_full", torch.tensor(3.0))):
        a = t["x"].clone().requires_grad_(); v = v0.clone().requires_grad_()
        x = a * 1; x[mk(mkey)] = v; (x * t["w"]).sum().backward()
        e["ga" + tag] = a.grad; e["gv" + tag] = v.grad.reshape(-1) if tag == "_sc" else v.grad
    return {k: v.detach().numpy() for k, v in e.items()}


want = mask_expect()
for dev in DEVICES:
    res = run_nabla(MASK_NBL, inputs, dev, "mask")
    if res is None:
        continue
    got, so, _ = res
    for k in ("issue", "full", "last", "scalar", "one", "rows", "row", "noncontig"):
        close(f"x[mask] = v: {k} ({dev})", got.get(k, np.zeros(0)), want[k], exact=True)
    for k in ("ga", "gv", "ga_full", "gv_full", "ga_sc", "gv_sc"):
        close(f"x[mask] = v: gradient {k} ({dev})", got.get(k, np.zeros(0)), want[k])
    check(f"x[mask] = v: v of x's shape is an error naming where ({dev})", "where(mask, v, x)" in so, so.strip()[-300:])

# ------------------------------------------------------------------ max/min with a tensor
A_SH, B_SH = (int(rng.integers(2, 5)), 1), (int(rng.integers(2, 6)),)
inputs = {"a": rng.standard_normal(A_SH), "b": rng.standard_normal(B_SH), "s": rng.standard_normal(()),
          "x": rng.standard_normal((3, 5)).astype(np.float32)}
MAXMIN_NBL = r'''
T = fn(k) inp[k].to(dev)
out = {}
out.max = max(T("a"), T("b")); out.min = min(T("a"), T("b"))
out.max0 = max(T("a"), T("s")); out.min0 = min(T("s"), T("b"))
out.red = max(T("x"), 1); out.redk = min(T("x"), axis=0, keepdims=true)
out.meth = T("a").max(T("b"))
g = grad(fn(a, b) sum(max(a, b) * 2 + min(a, b) * 3), argnums=[0, 1])(T("a"), T("b"))
out.ga = g[0]; out.gb = g[1]
print(try { max(T("a"), T("b"), keepdims=true); "no error" } catch e { e.message })
save(outp, map_tensors(out, fn(t) t.to("cpu")))
'''
t = {k: torch.tensor(v) for k, v in inputs.items()}
a_, b_ = t["a"].clone().requires_grad_(), t["b"].clone().requires_grad_()
(torch.max(a_, b_) * 2 + torch.min(a_, b_) * 3).sum().backward()
want = {"max": torch.max(t["a"], t["b"]), "min": torch.min(t["a"], t["b"]), "max0": torch.max(t["a"], t["s"]),
        "min0": torch.min(t["s"], t["b"]), "red": torch.max(t["x"], 1).values,
        "redk": torch.min(t["x"], 0, keepdim=True).values, "meth": t["a"].max(t["b"]), "ga": a_.grad, "gb": b_.grad}
for dev in DEVICES:
    res = run_nabla(MAXMIN_NBL, inputs, dev, "maxmin")
    if res is None:
        continue
    got, so, _ = res
    for k, w in want.items():
        close(f"max/min with a tensor: {k} ({dev})", got.get(k, np.zeros(0)), w.detach().numpy(), exact=k not in ("ga", "gb"))
    check(f"max(a, t, keepdims=...) is an error ({dev})", "elementwise maximum" in so, so.strip()[-300:])

# ------------------------------------------------------------------ loss warning
N = int(rng.integers(3, 7))
inputs = {"p": rng.standard_normal((N, 1)).astype(np.float32), "y": rng.standard_normal(N).astype(np.float32)}
LOSS_NBL = r'''
T = fn(k) inp[k].to(dev)
out = {}
for i in 0..3 { out.l = mse_loss(T("p"), T("y")) }        # one call site, three calls: one warning
out.l2 = mse_loss(T("p"), T("y"))                          # a second call site: a second warning
out.same = mse_loss(reshape(T("p"), -1), T("y"))           # same shapes: no warning
q = reshape(T("p"), -1)
out.l1 = l1_loss(q, T("y")); out.l1s = l1_loss(q, T("y"), reduction="sum"); out.l1n = l1_loss(q, T("y"), reduction="none")
out.l1b = l1_loss(T("p"), T("y"))                          # a third warning
out.gl1 = grad(fn(a) l1_loss(a, T("y")) + mse_loss(a, T("y")))(q)
save(outp, map_tensors(out, fn(t) t.to("cpu")))
'''
t = {k: torch.tensor(v) for k, v in inputs.items()}
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    want_l = torch.nn.functional.mse_loss(t["p"], t["y"])
torch_warned = any("different to the input size" in str(x.message) for x in w)
want_same = torch.nn.functional.mse_loss(t["p"].reshape(-1), t["y"])
F = torch.nn.functional
q = t["p"].reshape(-1)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    want_l1b = F.l1_loss(t["p"], t["y"])
qg = q.clone().requires_grad_()
(F.l1_loss(qg, t["y"]) + F.mse_loss(qg, t["y"])).backward()
want_l1 = {"l1": F.l1_loss(q, t["y"]), "l1s": F.l1_loss(q, t["y"], reduction="sum"), "l1n": F.l1_loss(q, t["y"], reduction="none"),
           "l1b": want_l1b, "gl1": qg.grad}
for dev in DEVICES:
    res = run_nabla(LOSS_NBL, inputs, dev, "loss")
    if res is None:
        continue
    got, _, se = res
    close(f"mse_loss broadcast value as torch ({dev})", got.get("l", np.zeros(0)), want_l.numpy())
    close(f"mse_loss same shapes ({dev})", got.get("same", np.zeros(0)), want_same.numpy())
    for k, w in want_l1.items():
        close(f"l1_loss: {k} as torch ({dev})", got.get(k, np.zeros(0)), w.numpy())
    lines = [ln for ln in se.splitlines() if "UserWarning" in ln]
    check(f"mse_loss/l1_loss warn once per call site ({dev})",
          torch_warned and len(lines) == 3 and all("different to the input size" in ln for ln in lines)
          and len({ln.split(": UserWarning")[0] for ln in lines}) == 3, f"torch warned: {torch_warned}; nabla's stderr: {se.strip()[-600:]}")

# ------------------------------------------------------------------ view with -1
n1, n2 = int(rng.integers(2, 5)), int(rng.integers(2, 5))
inputs = {"x": rng.standard_normal((4 * n1, n2)).astype(np.float32)}
VIEW_NBL = r'''
x = inp.x.to(dev)
out = {}
out.a = view(x, 4, -1); out.b = x.view(-1); out.c = view(x, [-1, 4]); out.d = view(x, -1, 1, 1)
for bad in [fn() view(x, -1, -1), fn() view(x, 4, -2), fn() view(x, 3 * 4 * 4 * 4 + 1, -1), fn() view(transpose(x), -1)] {
  print(try { bad(); "no error" } catch e { e.message })
}
save(outp, map_tensors(out, fn(t) t.to("cpu")))
'''
tx = torch.tensor(inputs["x"])
want = {"a": tx.view(4, -1), "b": tx.view(-1), "c": tx.view(-1, 4), "d": tx.view(-1, 1, 1)}
for dev in DEVICES:
    res = run_nabla(VIEW_NBL, inputs, dev, "view")
    if res is None:
        continue
    got, so, _ = res
    for k, w in want.items():
        close(f"view with -1: {k} ({dev})", got.get(k, np.zeros(0)), w.numpy(), exact=True)
    msgs = so.strip().splitlines()
    check(f"view: two -1 are an error ({dev})", len(msgs) == 4 and "only one dimension can be inferred" in msgs[0], so)
    check(f"view: -2 is an error ({dev})", len(msgs) == 4 and "invalid shape dimension -2" in msgs[1], so)
    check(f"view: a size that does not divide is an error ({dev})", len(msgs) == 4 and "cannot" in msgs[2], so)
    check(f"view: a non-contiguous x is still refused ({dev})", len(msgs) == 4 and "without a copy" in msgs[3], so)

# ------------------------------------------------------------------ round/trunc/frac/sign
K = int(rng.integers(20, 40))
vals = rng.standard_normal(K) * 10
vals[:6] = [0.5, 1.5, 2.5, -0.5, -2.5, 3.5]     # halves: torch rounds them to even
vals[6:9] = [0.0, -0.0, 7.0]
inputs = {"f": vals.astype(np.float32), "d": (rng.standard_normal(K) * 100).astype(np.float64),
          "i": rng.integers(-50, 50, K).astype(np.int64)}
ROUND_NBL = r'''
T = fn(k) inp[k].to(dev)
out = {}
for k in ["f", "d"] {
  x = T(k)
  out["round_" + k] = round(x); out["round1_" + k] = round(x, 1); out["round2_" + k] = round(x, decimals=2)
  out["roundm1_" + k] = round(x, -1); out["trunc_" + k] = trunc(x); out["frac_" + k] = frac(x); out["sign_" + k] = sign(x)
  out["meth_" + k] = x.trunc() + x.frac()
  g = grad(fn(x) sum(round(x) * 2 + round(x, 1) + trunc(x) * 3 + frac(x) * 5 + sign(x) * 7))(x)
  out["grad_" + k] = g
}
out.trunc_i = trunc(T("i")); out.round_i = round(T("i")); out.sign_i = sign(T("i"))
print(try { frac(T("i")); "no error" } catch e { e.message })
print(trunc(-2.7), frac(-2.5), round(2.5), round(0.125, 2))
save(outp, map_tensors(out, fn(t) t.to("cpu")))
'''
want = {}
for k in ("f", "d"):
    x = torch.tensor(inputs[k])
    want["round_" + k] = torch.round(x); want["round1_" + k] = torch.round(x, decimals=1)
    want["round2_" + k] = torch.round(x, decimals=2); want["roundm1_" + k] = torch.round(x, decimals=-1)
    want["trunc_" + k] = torch.trunc(x); want["frac_" + k] = torch.frac(x); want["sign_" + k] = torch.sign(x)
    want["meth_" + k] = x.trunc() + x.frac()
    xg = x.clone().requires_grad_()
    (torch.round(xg) * 2 + torch.round(xg, decimals=1) + torch.trunc(xg) * 3 + torch.frac(xg) * 5 + torch.sign(xg) * 7).sum().backward()
    want["grad_" + k] = xg.grad
xi = torch.tensor(inputs["i"])
want["trunc_i"] = torch.trunc(xi); want["round_i"] = torch.round(xi); want["sign_i"] = torch.sign(xi)
for dev in DEVICES:
    res = run_nabla(ROUND_NBL, inputs, dev, "round")
    if res is None:
        continue
    got, so, _ = res
    for k, w in want.items():
        close(f"round/trunc/frac/sign: {k} ({dev})", got.get(k, np.zeros(0)), w.detach().numpy(), exact=True)
    lines = so.strip().splitlines()
    check(f"frac of an integer tensor is an error ({dev})", len(lines) == 2 and "floating" in lines[0], so)
    # numbers: trunc an int toward zero, frac keeps the sign, round half away from zero (Python's math for numbers)
    check(f"trunc/frac/round of numbers ({dev})", len(lines) == 2 and lines[1].split() == ["-2", "-0.5", "3", "0.13"], so)

shutil.rmtree(TMP, True)
sys.exit(1 if failures else 0)
