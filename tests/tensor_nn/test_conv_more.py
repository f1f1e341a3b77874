#!/usr/bin/python3
"""conv1d, conv2d (dilation, groups, 'same'), conv_transpose1d and conv_transpose2d against
torch.nn.functional's: values and the gradients of the input, weight and
bias, on fresh random data for every option (stride, padding including
'same' and 'valid', dilation, groups, output_padding, bias or not,
non-contiguous inputs), f32 and f64, on the CPU and on the emulated CUDA
device (cuda/conv.cu; NABLA_CUDA_EMULATE=force, with a tiny column-buffer
chunk so the chunked accumulation runs); then the nn layers and the
argument errors.

One nabla process per device evaluates every case and saves the results
(safetensors, read back here).  Seeded; the seed is printed with every
failure (NUMERICS_SEED=<seed> repeats a run).

Run with /usr/bin/python3; env NABLA = the interpreter (build/nabla).
"""
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# NABLA_ASAN=1: also run under the ASan build by tools/run-tests.sh (torchcmp reads it)
import torchcmp  # noqa: E402
from torchcmp import NABLA, SUFFIX, rng, TMP, report, read_safetensors, run_nabla  # noqa: E402

torch.set_num_threads(1)


def nb(v):
    """a python value as nabla source"""
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "list(" + ", ".join(nb(a) for a in v) + ")"
    return str(v)


def make_case(k, op, dt, nsp, stride=1, padding=0, dilation=1, groups=1, output_padding=0, bias=True, permuted=False, wide=False):
    """wide: 16-24 channels per group and 3x3 kernels, where oneDNN (f32's
    CPU path) picks its blocked layouts and JIT kernels"""
    npdt = np.float32 if dt == "f32" else np.float64
    N = int(rng.integers(1, 4))
    Cg = int(rng.integers(16, 25)) if wide else int(rng.integers(1, 4))
    Og = int(rng.integers(16, 25)) if wide else int(rng.integers(1, 4))
    C, O = Cg * groups, Og * groups
    ks = tuple((3 if wide else int(rng.integers(1, 4))) for _ in range(nsp))
    sp = tuple(int(rng.integers(9, 15) if wide else rng.integers(4, 9)) for _ in range(nsp))
    x = rng.standard_normal((N, C) + sp).astype(npdt)
    if op in ("conv1d", "conv2d"):
        w = rng.standard_normal((O, Cg) + ks).astype(npdt)
    else:
        w = rng.standard_normal((C, Og) + ks).astype(npdt)
    c = {"id": f"c{k}", "op": op, "dt": dt, "x": x, "w": w, "b": rng.standard_normal(O).astype(npdt) if bias else None,
         "stride": stride, "padding": padding, "dilation": dilation, "groups": groups, "output_padding": output_padding,
         "permuted": permuted, "wide": wide}
    return c


def make_cases():
    cases, k = [], 0
    for dt in ("f32", "f64"):
        for kw in (dict(), dict(stride=2), dict(padding=2), dict(padding="same"), dict(padding="same", dilation=2),
                   dict(padding="valid", stride=3), dict(dilation=2, padding=1), dict(groups=2), dict(groups=3, stride=2, bias=False),
                   dict(permuted=True, padding=1)):
            cases.append(make_case(k, "conv1d", dt, 1, **kw)); k += 1
        for kw in (dict(), dict(stride=2), dict(stride=2, output_padding=1), dict(padding=1, stride=3, output_padding=2),
                   dict(dilation=2, output_padding=1), dict(groups=2), dict(groups=2, stride=2, padding=1, bias=False),
                   dict(permuted=True, stride=2)):
            cases.append(make_case(k, "conv_transpose1d", dt, 1, **kw)); k += 1
        for kw in (dict(), dict(stride=2), dict(stride=(2, 3), output_padding=(1, 2)), dict(padding=(1, 0), stride=2),
                   dict(dilation=(2, 1), padding=1), dict(groups=2, stride=2, output_padding=1), dict(groups=3, bias=False),
                   dict(permuted=True, stride=(1, 2))):
            cases.append(make_case(k, "conv_transpose2d", dt, 2, **kw)); k += 1
        for kw in (dict(stride=(2, 1), padding=(1, 2)), dict(padding="same", dilation=(2, 1)), dict(padding="valid"),
                   dict(dilation=2, padding=1, stride=2), dict(groups=2), dict(groups=3, stride=2, bias=False),
                   dict(permuted=True, padding=1)):
            cases.append(make_case(k, "conv2d", dt, 2, **kw)); k += 1
    # oneDNN's blocked layouts (f32): odd sizes, strides, dilation, groups, 'same'
    # with an even kernel span (more padding at the end), non-contiguous input;
    # output_padding beyond padding and strided rows it skips go to im2col
    for op, nsp, kw in (("conv2d", 2, dict()), ("conv2d", 2, dict(stride=2, padding=1)), ("conv2d", 2, dict(groups=2, dilation=2, padding=2)),
                        ("conv2d", 2, dict(padding="same", dilation=(1, 2))), ("conv2d", 2, dict(stride=(2, 3), bias=False, permuted=True)),
                        ("conv1d", 1, dict(padding=1)), ("conv1d", 1, dict(stride=2, groups=2)),
                        ("conv_transpose2d", 2, dict(stride=2, padding=1)), ("conv_transpose2d", 2, dict(stride=2, output_padding=1)),
                        ("conv_transpose2d", 2, dict(groups=2, padding=1, permuted=True)), ("conv_transpose1d", 1, dict(stride=3, padding=2))):
        cases.append(make_case(k, op, "f32", nsp, wide=True, **kw)); k += 1
    return cases


def torch_call(c, x, w, b):
    if c["op"] in ("conv1d", "conv2d"):
        fn = F.conv1d if c["op"] == "conv1d" else F.conv2d
        return fn(x, w, b, stride=c["stride"], padding=c["padding"], dilation=c["dilation"], groups=c["groups"])
    fn = F.conv_transpose1d if c["op"] == "conv_transpose1d" else F.conv_transpose2d
    return fn(x, w, b, stride=c["stride"], padding=c["padding"], output_padding=c["output_padding"], groups=c["groups"],
              dilation=c["dilation"])


def torch_ref(c):
    t = lambda a: torch.tensor(a.astype(np.float64), requires_grad=True)
    x, w = t(c["x"]), t(c["w"])
    b = t(c["b"]) if c["b"] is not None else None
    y = torch_call(c, x, w, b)
    gy = rng.standard_normal(tuple(y.shape)).astype(c["x"].dtype)
    c["gy"] = gy
    (y * torch.tensor(gy.astype(np.float64))).sum().backward()
    ref = {"y": y, "gx": x.grad, "gw": w.grad}
    if b is not None:
        ref["gb"] = b.grad
    npdt = np.float32 if c["dt"] == "f32" else np.float64
    return {k: v.detach().numpy().astype(npdt) for k, v in ref.items()}


def nabla_code(cases, dev):
    lines = [f'd = load_npz("{TMP}/in.npz")', "res = {}", f'dev = "{dev}"',
             "fn opt(name) = if has(d, name) { d[name].to(dev) } else { nil }"]
    for c in cases:
        i = c["id"]
        xs = f"transpose(d.{i}_x.to(dev), 0, 1)" if c["permuted"] else f"d.{i}_x.to(dev)"
        if c["op"] in ("conv1d", "conv2d"):
            call = f'{c["op"]}(x, w, b, stride={nb(c["stride"])}, padding={nb(c["padding"])}, dilation={nb(c["dilation"])}, groups={c["groups"]})'
        else:
            call = (f'{c["op"]}(x, w, b, stride={nb(c["stride"])}, padding={nb(c["padding"])}, '
                    f'output_padding={nb(c["output_padding"])}, groups={c["groups"]}, dilation={nb(c["dilation"])})')
        lines.append(f'''
fn case_{i}() {{
  x = {xs}; w = d.{i}_w.to(dev); b = opt("{i}_b"); gy = d.{i}_gy.to(dev)
  out = {{}}
  f = fn(x, w, b) {{ y = {call}; out.y = y; sum(y * gy) }}
  g = grad(f, argnums=[0, 1, 2])(x, w, b)
  r = {{y: out.y, gx: g[0], gw: g[1]}}
  if b != nil {{ r.gb = g[2] }}
  res["{i}"] = r
}}
case_{i}()''')
    lines.append(f'save("{TMP}/out_{dev}.safetensors", res)')
    return "\n".join(lines)


def check_values(cases, refs, dev, env_extra, label=None):
    """label: the name of this run (the device by default); its results stay in out_<label>.safetensors"""
    label = label or dev
    r = run_nabla(nabla_code(cases, dev).replace(f"out_{dev}.safetensors", f"out_{label}.safetensors"), env_extra)
    if r.returncode != 0:
        report(f"conv values on {label}", False, f"nabla failed: {r.stderr.strip()[-1500:]}")
        return
    got = read_safetensors(f"{TMP}/out_{label}.safetensors")
    for c in cases:
        ref = refs[c["id"]]
        tol = 1e-12 if c["dt"] == "f64" else 2e-5
        bad = []
        for k, want in ref.items():
            g = got.get(f"{c['id']}.{k}")
            if g is None:
                bad.append(f"{k} missing")
                continue
            if g.shape != want.shape or g.dtype != want.dtype:
                bad.append(f"{k}: {g.dtype}{list(g.shape)} vs torch {want.dtype}{list(want.shape)}")
                continue
            scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
            err = float(np.max(np.abs(g.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
            if not err <= tol * scale:
                bad.append(f"{k}: max |diff| {err:.3g} (scale {scale:.3g})")
        opts = " ".join(f"{k}={c[k]}" for k in ("stride", "padding", "dilation", "groups", "output_padding") if c[k] not in (0, 1))
        name = (f"{c['op']} {label} {c['dt']} x{list(c['x'].shape)} w{list(c['w'].shape)} {opts}"
                f"{' no bias' if c['b'] is None else ''}{' permuted' if c['permuted'] else ''}")
        report(name, not bad, "; ".join(bad))


ERRORS = [
    ("conv1d(ones(2, 3, 5), ones(4, 2, 3))", "conv1d: expected input [N, C, L] and weight [out_channels, C/groups, k...]"),
    ("conv1d(ones(2, 4, 5), ones(3, 2, 3), groups=2)", "out_channels divisible by groups"),
    ("conv1d(ones(2, 3, 5), ones(4, 3, 3), padding=\"same\", stride=2)", "padding='same' is not supported for strided convolutions"),
    ("conv1d(ones(2, 3, 5), ones(4, 3, 3), padding=\"full\")", "padding must be a number, a list, 'same' or 'valid'"),
    ("conv1d(ones(2, 3, 2), ones(4, 3, 3))", "kernel size 3 is larger than the padded input 2"),
    ("conv1d(ones(2, 3, 5), ones(4, 3, 3), stride=0)", "stride must be in [1,"),
    ("conv1d(ones(2, 3, 5), ones(4, 3, 3), groups=0)", "groups must be a positive integer"),
    ("conv1d(ones(2, 3, 5, 5), ones(4, 3, 3))", "conv1d: expected input [N, C, L], got 4 dimensions"),
    ("conv1d(ones(2, 3, 5), ones(4, 3, 3), ones(3))", "bias must have shape [4]"),
    ("conv_transpose1d(ones(2, 3, 5), ones(3, 2, 3), stride=2, output_padding=2)", "output_padding (2) must be smaller than either stride (2) or dilation (1)"),
    ("conv_transpose2d(ones(2, 3, 5, 5), ones(2, 2, 3, 3))", "conv_transpose2d: expected input [N, C, H, W] and weight [C, out_channels/groups, k...]"),
    ("conv_transpose2d(ones(2, 3, 5, 5), ones(3, 2, 3, 3), padding=\"same\")", "padding must be a number, a list"),
    ("conv_transpose2d(ones(1, 1, 1, 1), ones(1, 1, 1, 1), padding=1)", "the output size -1 is too small"),
    ("import nn\nnn.conv1d(3, 4, 3, groups=2)", "nn.conv1d: in_channels (3) and out_channels (4) must be divisible by groups (2)"),
]


def check_thread_bits(cases):
    try:
        one, two = (read_safetensors(f"{TMP}/out_{lab}.safetensors") for lab in ("cpu", "cpu 2 threads"))
    except OSError as e:
        report("conv: the same bits at 1 and 2 threads", False, str(e))
        return
    bad = [f"{c['id']} {c['op']}" for c in cases if c["dt"] == "f32" and f"{c['id']}.gb" in one
           and not np.array_equal(one[f"{c['id']}.gb"], two.get(f"{c['id']}.gb"))]
    n = sum(1 for c in cases if c["dt"] == "f32" and c["b"] is not None)
    report(f"conv f32 on the CPU: db the same bits at 1 and 2 threads ({n} cases)", n > 0 and not bad, ", ".join(bad[:8]))


def check_layers():
    """nn.conv1d, nn.conv_transpose1d/2d: torch's parameter shapes; with the
    same weights the layer equals torch's module"""
    x1 = rng.standard_normal((2, 4, 9)).astype(np.float32)
    x2 = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    np.savez(os.path.join(TMP, "lay.npz"), x1=x1, x2=x2)
    code = f'''import nn
d = load_npz("{TMP}/lay.npz")
a = nn.conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2)
b = nn.conv_transpose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
c = nn.conv_transpose2d(4, 2, [3, 2], stride=[2, 1], padding=1, bias=false)
save("{TMP}/lay_out.safetensors", {{a_w: a.weight, a_b: a.bias, a_y: a(d.x1), b_w: b.weight, b_b: b.bias, b_y: b(d.x1), c_w: c.weight, c_y: c(d.x2)}})'''
    r = run_nabla(code, {})
    if r.returncode != 0:
        report("nn.conv1d/conv_transpose1d/conv_transpose2d layers", False, r.stderr.strip()[-1500:])
        return
    got = read_safetensors(os.path.join(TMP, "lay_out.safetensors"))
    mods = {"a": (torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), x1),
            "b": (torch.nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), x1),
            "c": (torch.nn.ConvTranspose2d(4, 2, (3, 2), stride=(2, 1), padding=1, bias=False), x2)}
    for k, (m, x) in mods.items():
        bad = []
        if got[f"{k}_w"].shape != tuple(m.weight.shape):
            bad.append(f"weight {got[f'{k}_w'].shape} vs torch {tuple(m.weight.shape)}")
        else:
            with torch.no_grad():
                m.weight.copy_(torch.tensor(got[f"{k}_w"]))
                if m.bias is not None:
                    m.bias.copy_(torch.tensor(got[f"{k}_b"]))
            want = m(torch.tensor(x)).detach().numpy()
            if got[f"{k}_y"].shape != want.shape or not np.allclose(got[f"{k}_y"], want, rtol=1e-5, atol=1e-5):
                bad.append("output differs from torch's module")
        report(f"nn layer {type(m).__name__}: torch's parameter shapes and output", not bad, "; ".join(bad))


BF16_CASES = [  # bf16 on the CPU: oneDNN's bf16 primitives (blocked layouts: wide), and geometries they do not take
    ("conv2d", 2, dict(padding=1), True), ("conv2d", 2, dict(stride=2, padding=1, groups=2), True),
    ("conv2d", 2, dict(stride=(2, 3), bias=False, permuted=True), True), ("conv1d", 1, dict(padding=2, dilation=2), True),
    ("conv1d", 1, dict(stride=2), False), ("conv_transpose2d", 2, dict(stride=2, padding=1), True),
    ("conv_transpose2d", 2, dict(stride=2, output_padding=1), True), ("conv_transpose1d", 1, dict(stride=3, padding=2), True),
]


def check_bf16():
    """bf16 x, w, b on the CPU (values rounded to bf16 first): y, dx, dW, db
    in bf16 within 2^-7 of the largest value of torch 1.13's bf16 CPU
    convolution (mkldnn, f32 accumulation; for conv_transpose, which torch
    1.13 refuses in bf16, its f32 result rounded to bf16) and of the f64
    truth; the same for the f32 route (NABLA_ONEDNN_CONV_BF16=0) and im2col
    (NABLA_ONEDNN_CONV=0).  Then conv2d under autocast("bf16") with f32
    leaves against torch.autocast("cpu", bfloat16): a bf16 output, f32
    gradients."""
    r16 = lambda a: torch.tensor(a).bfloat16().float().numpy()
    cases, arrays = [], {}
    for k, (op, nsp, kw, wide) in enumerate(BF16_CASES):
        c = make_case(f"h{k}", op, "f32", nsp, wide=wide, **kw)
        for f in ("x", "w", "b"):
            if c[f] is not None:
                c[f] = r16(c[f])
        cases.append(c)
    truth, tref = {}, {}
    for c in cases:
        i = c["id"]
        c["gy"] = r16(rng.standard_normal(tuple(torch_call(c, *(torch.tensor(c[f]) if c[f] is not None else None
                                                                for f in ("x", "w", "b"))).shape)).astype(np.float32))
        # torch 1.13's bf16 conv_transpose on the CPU raises (it checks the
        # weight as a convolution's): its f32 result of the same bf16 values,
        # rounded to bf16, is the reference there
        tdt = torch.float32 if c["op"].startswith("conv_transpose") else torch.bfloat16
        t16 = lambda a: torch.tensor(a).to(tdt).requires_grad_()
        x, w = t16(c["x"]), t16(c["w"])
        b = t16(c["b"]) if c["b"] is not None else None
        y = torch_call(c, x, w, b)
        (y * torch.tensor(c["gy"]).to(tdt)).sum().backward()
        tref[i] = {"y": y, "gx": x.grad, "gw": w.grad}
        if b is not None:
            tref[i]["gb"] = b.grad
        tref[i] = {k: v.detach().bfloat16().float().numpy() for k, v in tref[i].items()}
        xx, ww = (torch.tensor(c[f].astype(np.float64), requires_grad=True) for f in ("x", "w"))
        bb = torch.tensor(c["b"].astype(np.float64), requires_grad=True) if c["b"] is not None else None
        yy = torch_call(c, xx, ww, bb)
        (yy * torch.tensor(c["gy"].astype(np.float64))).sum().backward()
        truth[i] = {"y": yy, "gx": xx.grad, "gw": ww.grad}
        if bb is not None:
            truth[i]["gb"] = bb.grad
        truth[i] = {k: v.detach().numpy() for k, v in truth[i].items()}
        arrays[f"{i}_x"] = np.ascontiguousarray(np.swapaxes(c["x"], 0, 1)) if c["permuted"] else c["x"]
        arrays[f"{i}_w"], arrays[f"{i}_gy"] = c["w"], c["gy"]
        if c["b"] is not None:
            arrays[f"{i}_b"] = c["b"]
    ax = rng.standard_normal((2, 16, 11, 9)).astype(np.float32)
    aw = (rng.standard_normal((24, 16, 3, 3)) * 0.2).astype(np.float32)
    ab = rng.standard_normal(24).astype(np.float32)
    agy = rng.standard_normal((2, 24, 11, 9)).astype(np.float32)
    arrays.update(ac_x=ax, ac_w=aw, ac_b=ab, ac_gy=agy)
    np.savez(os.path.join(TMP, "bf.npz"), **arrays)
    code = [f'd = load_npz("{TMP}/bf.npz")', "res = {}", 'fn h(t) = if t == nil { nil } else { t.to("bf16") }',
            'fn opt(name) = if has(d, name) { d[name] } else { nil }']
    for c in cases:
        i = c["id"]
        xs = f'transpose(h(d.{i}_x), 0, 1)' if c["permuted"] else f'h(d.{i}_x)'
        if c["op"] in ("conv1d", "conv2d"):
            call = f'{c["op"]}(x, w, b, stride={nb(c["stride"])}, padding={nb(c["padding"])}, dilation={nb(c["dilation"])}, groups={c["groups"]})'
        else:
            call = (f'{c["op"]}(x, w, b, stride={nb(c["stride"])}, padding={nb(c["padding"])}, '
                    f'output_padding={nb(c["output_padding"])}, groups={c["groups"]}, dilation={nb(c["dilation"])})')
        code.append(f'''
x = {xs}; w = h(d.{i}_w); b = h(opt("{i}_b")); gy = h(d.{i}_gy); out = {{}}
g = grad(fn(x, w, b) {{ y = {call}; out.y = y; sum(y * gy) }}, argnums=[0, 1, 2])(x, w, b)
for t in [out.y, g[0], g[1]] {{ if t.dtype != "bf16" {{ error("{i}: a " + t.dtype + " result") }} }}
res["{i}"] = {{y: out.y.to("f32"), gx: g[0].to("f32"), gw: g[1].to("f32")}}
if b != nil {{ res["{i}"].gb = g[2].to("f32") }}''')
    code.append('''out = {}
g = grad(fn(x, w, b) { y = autocast("bf16") { conv2d(x, w, b, padding=1) }; out.y = y; sum(y.to("f32") * d.ac_gy) }, argnums=[0, 1, 2])(d.ac_x, d.ac_w, d.ac_b)
if out.y.dtype != "bf16" or g[1].dtype != "f32" { error("autocast conv2d: " + out.y.dtype + " output, " + g[1].dtype + " dW") }
res["ac"] = {y: out.y.to("f32"), gx: g[0], gw: g[1], gb: g[2]}''')
    code.append(f'save("{TMP}/bf_out.safetensors", res)')
    src = "\n".join(code)
    if os.environ.get("CONV_BF16_SCRIPT"):   # where to leave the nabla program, to rerun it by hand
        with open(os.environ["CONV_BF16_SCRIPT"], "w") as f:
            f.write(src)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (ax, aw, ab))
        ty = F.conv2d(tx, tw, tb, padding=1)
    (ty.float() * torch.tensor(agy)).sum().backward()
    ac_ref = {"y": ty.detach().float().numpy(), "gx": tx.grad.numpy(), "gw": tw.grad.numpy(), "gb": tb.grad.numpy()}
    for label, env in (("onednn bf16", {"NABLA_ONEDNN_CONV_BF16": "1"}), ("f32 route", {"NABLA_ONEDNN_CONV_BF16": "0"}),
                       ("im2col", {"NABLA_ONEDNN_CONV": "0"})):
        r = run_nabla(src, env)
        if r.returncode != 0:
            report(f"bf16 conv ({label})", False, f"nabla failed (exit {r.returncode}): {r.stderr.strip()[-1500:]}")
            continue
        got = read_safetensors(f"{TMP}/bf_out.safetensors")
        for c in cases:
            bad = []
            for k, want in tref[c["id"]].items():
                g = got.get(f"{c['id']}.{k}")
                if g is None or g.shape != want.shape:
                    bad.append(f"{k}: shape {None if g is None else g.shape} vs {want.shape}")
                    continue
                scale = max(1e-3, float(np.max(np.abs(truth[c["id"]][k]))))
                e_t = float(np.max(np.abs(g - want)))
                e_f = float(np.max(np.abs(g - truth[c["id"]][k])))
                if not (e_t <= 2 ** -7 * scale and e_f <= 2 ** -7 * scale):
                    bad.append(f"{k}: |diff| {e_t:.3g} from torch bf16, {e_f:.3g} from f64 (scale {scale:.3g})")
            opts = " ".join(f"{k}={c[k]}" for k in ("stride", "padding", "dilation", "groups", "output_padding") if c[k] not in (0, 1))
            report(f"{c['op']} cpu bf16 ({label}) x{list(c['x'].shape)} w{list(c['w'].shape)} {opts}"
                   f"{' no bias' if c['b'] is None else ''}{' permuted' if c['permuted'] else ''}", not bad, "; ".join(bad))
        bad = []
        for k, want in ac_ref.items():
            g = got.get(f"ac.{k}")
            scale = float(np.max(np.abs(want)))
            err = float(np.max(np.abs(g - want))) if g is not None and g.shape == want.shape else float("inf")
            if not err <= 2 ** -7 * 2 * scale:
                bad.append(f"{k}: |diff| {err:.3g} (scale {scale:.3g})")
        report(f"conv2d under autocast('bf16') ({label}): bf16 y, f32 grads against torch's CPU autocast", not bad, "; ".join(bad))


def main():
    try:
        cases = make_cases()
        refs = {c["id"]: torch_ref(c) for c in cases}
        arrays = {}
        for c in cases:
            i = c["id"]
            arrays[f"{i}_x"] = np.ascontiguousarray(np.swapaxes(c["x"], 0, 1)) if c["permuted"] else c["x"]
            arrays[f"{i}_w"] = c["w"]
            arrays[f"{i}_gy"] = c["gy"]
            if c["b"] is not None:
                arrays[f"{i}_b"] = c["b"]
        np.savez(os.path.join(TMP, "in.npz"), **arrays)
        check_values(cases, refs, "cpu", {"OMP_NUM_THREADS": "1"}, "cpu")
        # f32's other CPU path (im2col + OpenBLAS), and 2 threads: db must be
        # the same bits as at 1 thread (y, dx, dW: OpenBLAS's and oneDNN's tiles
        # and splits depend on the thread count, as they did before oneDNN)
        check_values(cases, refs, "cpu", {"NABLA_ONEDNN_CONV": "0"}, "cpu im2col")
        check_values(cases, refs, "cpu", {"OMP_NUM_THREADS": "2"}, "cpu 2 threads")
        check_thread_bits(cases)
        emu = os.path.join(os.path.dirname(NABLA), "cuda", "emu", "nabla_cuda_emu.so")
        if os.path.exists(emu):
            check_values(cases, refs, "cuda", {"NABLA_CUDA_EMULATE": "force", "NABLA_EMU_SMS": "2", "NABLA_CUDA_CONV_CHUNK_BYTES": "4096"})
        else:
            print(f"SKIP: conv on the emulated CUDA device{SUFFIX}: {emu} is not built")
        check_layers()
        check_bf16()
        torchcmp.check_errors(ERRORS, "conv")
    finally:
        shutil.rmtree(TMP, True)
    sys.exit(1 if torchcmp.fails else 0)


main()
