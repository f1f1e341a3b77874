#!/usr/bin/python3
"""batch_norm, group_norm and instance_norm against torch.nn.functional's:
values, gradients (x, weight, bias) and the in-place running-statistics
update (batch and instance norm), on fresh random
data of every layout ([N, C], [N, C, L], [N, C, H, W], [N, C, D, H, W]),
f32 and f64, contiguous and permuted (non-contiguous) inputs, affine or not,
training with and without running statistics and evaluation, several
momenta and eps; then the argument errors.  Runs on the CPU and on the
emulated CUDA device (cuda/norm.cu; NABLA_CUDA_EMULATE=force).

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


SHAPES = [(6, 3), (4, 3, 7), (3, 4, 5, 6), (2, 3, 3, 4, 5), (1, 2, 5)]
MODES = ["train_stats", "train_nostats", "eval"]


def make_cases():
    cases, arrays = [], {}
    k = 0
    for shape in SHAPES:
        for dt in ("f32", "f64"):
            for mode in MODES:
                for affine in (True, False):
                    npdt = np.float32 if dt == "f32" else np.float64
                    C = shape[1]
                    # an offset and scale per channel: the statistics are not ~(0, 1)
                    x = (rng.standard_normal(shape) * rng.uniform(0.5, 3.0) + rng.uniform(-2, 2)).astype(npdt)
                    noncontig = len(shape) >= 3 and k % 2 == 0
                    perm = list(range(len(shape)))[::-1] if noncontig else None
                    c = {"id": f"c{k}", "shape": shape, "dt": dt, "mode": mode, "affine": affine, "perm": perm,
                         "momentum": float(rng.choice([0.1, 0.3, 0.0, 1.0])), "eps": float(rng.choice([1e-5, 1e-3]))}
                    arrays[f"{c['id']}_x"] = np.ascontiguousarray(x.transpose(perm)) if noncontig else x
                    c["x"] = x
                    c["gy"] = arrays[f"{c['id']}_gy"] = rng.standard_normal(shape).astype(npdt)
                    if affine:
                        c["w"] = arrays[f"{c['id']}_w"] = rng.uniform(0.5, 1.5, C).astype(npdt)
                        c["b"] = arrays[f"{c['id']}_b"] = rng.standard_normal(C).astype(npdt)
                    if mode != "train_nostats":
                        c["rm"] = arrays[f"{c['id']}_rm"] = rng.standard_normal(C).astype(npdt)
                        c["rv"] = arrays[f"{c['id']}_rv"] = rng.uniform(0.5, 2.0, C).astype(npdt)
                    cases.append(c)
                    k += 1
    # group_norm: every layout, a few group counts, groups of 3+ values (in a
    # group of 1 or 2 the input gradient is a cancellation: 1/sqrt(var + eps)
    # times rounding, no test of the kernel)
    for shape, groups in [((4, 6), (1, 2)), ((3, 6, 5), (2, 6)), ((2, 4, 3, 5), (1, 2, 4)), ((2, 6, 2, 3, 4), (3,))]:
        for G in groups:
            for dt in ("f32", "f64"):
                for affine in (True, False):
                    k = add_norm_case(cases, arrays, k, "group_norm", shape, dt, affine, {"G": G})
    # instance_norm: input statistics with and without running ones, and the running ones
    for shape in [(3, 4, 5), (2, 3, 4, 5), (2, 2, 3, 3, 2)]:
        for dt in ("f32", "f64"):
            for mode in ("train_stats", "train_nostats", "eval"):
                for affine in (True, False):
                    k = add_norm_case(cases, arrays, k, "instance_norm", shape, dt, affine, {"mode": mode})
    return cases, arrays


def add_norm_case(cases, arrays, k, op, shape, dt, affine, extra):
    npdt = np.float32 if dt == "f32" else np.float64
    C = shape[1]
    x = (rng.standard_normal(shape) * rng.uniform(0.5, 3.0) + rng.uniform(-2, 2)).astype(npdt)
    noncontig = len(shape) >= 3 and k % 2 == 0
    perm = list(range(len(shape)))[::-1] if noncontig else None
    c = {"id": f"c{k}", "op": op, "shape": shape, "dt": dt, "affine": affine, "perm": perm, "mode": extra.get("mode", "train_nostats"),
         "G": extra.get("G"), "momentum": float(rng.choice([0.1, 0.3, 1.0])), "eps": float(rng.choice([1e-5, 1e-3])), "x": x}
    arrays[f"c{k}_x"] = np.ascontiguousarray(x.transpose(perm)) if noncontig else x
    c["gy"] = arrays[f"c{k}_gy"] = rng.standard_normal(shape).astype(npdt)
    if affine:
        c["w"] = arrays[f"c{k}_w"] = rng.uniform(0.5, 1.5, C).astype(npdt)
        c["b"] = arrays[f"c{k}_b"] = rng.standard_normal(C).astype(npdt)
    if c["mode"] != "train_nostats":
        c["rm"] = arrays[f"c{k}_rm"] = rng.standard_normal(C).astype(npdt)
        c["rv"] = arrays[f"c{k}_rv"] = rng.uniform(0.5, 2.0, C).astype(npdt)
    cases.append(c)
    return k + 1


def nabla_code(cases, dev):
    lines = [f'd = load_npz("{TMP}/in.npz")', "res = {}", f'dev = "{dev}"',
             "fn opt(name) = if has(d, name) { d[name].to(dev) } else { nil }"]
    for c in cases:
        i = c["id"]
        inv = None
        if c["perm"]:
            inv = list(np.argsort(c["perm"]))
        xs = f'permute(d.{i}_x.to(dev), {inv})' if inv else f'd.{i}_x.to(dev)'
        training = "false" if c["mode"] == "eval" else "true"
        an = "[0, 1, 2]" if c["affine"] else "[0]"
        op = c.get("op", "batch_norm")
        if op == "batch_norm":
            call = f'batch_norm(x, rm, rv, w, b, training={training}, momentum={c["momentum"]}, eps={c["eps"]})'
        elif op == "group_norm":
            call = f'group_norm(x, {c["G"]}, w, b, eps={c["eps"]})'
        else:
            call = f'instance_norm(x, rm, rv, w, b, use_input_stats={training}, momentum={c["momentum"]}, eps={c["eps"]})'
        lines.append(f'''
fn case_{i}() {{
  x = {xs}; gy = d.{i}_gy.to(dev); w = opt("{i}_w"); b = opt("{i}_b"); rm = opt("{i}_rm"); rv = opt("{i}_rv")
  out = {{}}
  f = fn(x, w, b) {{ y = {call}; out.y = y; sum(y * gy) }}
  g = grad(f, argnums={an})(x, w, b)
  r = {{y: out.y, gx: g[0]}}
  if w != nil {{ r.gw = g[1]; r.gb = g[2] }}
  if rm != nil {{ r.rm = rm; r.rv = rv }}
  res["{i}"] = r
}}
case_{i}()''')
    lines.append(f'save("{TMP}/out_{dev}.safetensors", res)')
    return "\n".join(lines)


def torch_ref(c):
    # in f64 from the same (f32) values: torch's f32 kernels round where ours
    # sum in f64, and small groups amplify that rounding (1/sqrt(var + eps))
    t = lambda a, rg=False: torch.tensor(a.astype(np.float64), requires_grad=rg)
    x = t(c["x"], True)
    w = t(c["w"], True) if c["affine"] else None
    b = t(c["b"], True) if c["affine"] else None
    rm = t(c["rm"]) if "rm" in c else None
    rv = t(c["rv"]) if "rv" in c else None
    op = c.get("op", "batch_norm")
    if op == "batch_norm":
        y = F.batch_norm(x, rm, rv, w, b, training=c["mode"] != "eval", momentum=c["momentum"], eps=c["eps"])
    elif op == "group_norm":
        y = F.group_norm(x, c["G"], w, b, eps=c["eps"])
    else:
        y = F.instance_norm(x, rm, rv, w, b, use_input_stats=c["mode"] != "eval", momentum=c["momentum"], eps=c["eps"])
    (y * t(c["gy"])).sum().backward()
    ref = {"y": y.detach().numpy(), "gx": x.grad.numpy()}
    if c["affine"]:
        ref["gw"], ref["gb"] = w.grad.numpy(), b.grad.numpy()
    if rm is not None:
        ref["rm"], ref["rv"] = rm.numpy(), rv.numpy()
    dt = np.float32 if c["dt"] == "f32" else np.float64
    return {k: v.astype(dt) for k, v in ref.items()}


def check_values(cases, dev, env_extra):
    r = run_nabla(nabla_code(cases, dev), env_extra)
    if r.returncode != 0:
        report(f"batch_norm values on {dev}", False, f"nabla failed: {r.stderr.strip()[-1500:]}")
        return
    got = read_safetensors(f"{TMP}/out_{dev}.safetensors")
    for c in cases:
        ref = torch_ref(c)
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
        op = c.get("op", "batch_norm")
        what = f"groups={c['G']}" if op == "group_norm" else c["mode"]
        name = (f"{op} {dev} {c['dt']} {list(c['shape'])} {what} affine={c['affine']} "
                f"momentum={c['momentum']} eps={c['eps']}{' permuted' if c['perm'] else ''}")
        report(name, not bad, "; ".join(bad))


ERRORS = [
    # (code, what the message must say)
    ("batch_norm(ones(4), training=true)", "at least 2 dimensions"),
    ("batch_norm(ones(4, 3), weight=ones(4), training=true)", "weight must have shape [3]"),
    ("batch_norm(ones(4, 3), bias=ones(2, 3), training=true)", "bias must have shape [3]"),
    ("batch_norm(ones(4, 3), ones(5), ones(3), training=true)", "running_mean must have shape [3]"),
    ("batch_norm(ones(4, 3), ones(3), ones(3, 1), training=true)", "running_var must have shape [3]"),
    ("batch_norm(ones(4, 3), ones(3), nil, training=true)", "running_mean and running_var go together"),
    ("batch_norm(ones(4, 3))", "must be given in evaluation mode"),
    ("batch_norm(ones(1, 3), training=true)", "more than 1 value per channel when training, got input size [1, 3]"),
    ("batch_norm(ones(4, 3), list(0, 0, 0), list(1, 1, 1), training=true)", "running_mean must be a tensor or nil, got list"),
    ("batch_norm(ones(4, 3), training=1)", "training must be a bool"),
    ("batch_norm(ones(4, 3), ones(3), ones(3), training=true, momentum=2)", "momentum must be in [0, 1]"),
    ("batch_norm(ones(4, 3, dtype=\"i64\"), training=true)", "input must be a floating tensor"),
    ("batch_norm(ones(4, 3), ones(3, dtype=\"i64\"), ones(3), training=true)", "running_mean must be a floating tensor"),
    ("group_norm(ones(2, 6, 3), 4)", "the number of channels (6) must be divisible by num_groups (4)"),
    ("group_norm(ones(2, 6, 3), 0)", "num_groups must be a positive integer"),
    ("group_norm(ones(2, 6, 3), 2, ones(5))", "group_norm: weight must have shape [6]"),
    ("instance_norm(ones(2, 3, 1))", "more than 1 spatial element"),
    ("instance_norm(ones(2, 3, 4), use_input_stats=false)", "must be given when use_input_stats=false"),
    ("instance_norm(ones(2, 3, 4), ones(2), ones(3))", "instance_norm: running_mean must have shape [3]"),
    ("import nn\nnn.group_norm(4, 6)", "num_channels (6) must be a positive multiple of num_groups (4)"),
    ("import nn\nnn.instance_norm2d(3)(ones(2, 3))", "instance_norm2d: expected 3D or 4D input (got 2D input)"),
    ("import nn\nnn.batch_norm2d(3)(ones(2, 3, 4))", "batch_norm2d: expected 4D input (got 3D input)"),
    ("import nn\nnn.batch_norm1d(3)(ones(2, 3, 4, 5))", "batch_norm1d: expected 2D or 3D input (got 4D input)"),
    ("import nn\nnn.batch_norm3d(0)", "num_features must be a positive integer"),
    ("import nn\nnn.batch_norm1d(3, momentum=-1)", "momentum must be a number in [0, 1] or nil"),
]


def check_half():
    """bf16/f16 inputs compute in f32 and come back in their dtype (as torch's
    CPU kernels accumulate low precision in f32): compared with torch in f32
    on the same rounded input, to the output dtype's precision."""
    x = (rng.standard_normal((4, 3, 5)) * 2 + 1).astype(np.float32)
    w = rng.uniform(0.5, 1.5, 3).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    np.savez(os.path.join(TMP, "half.npz"), x=x, w=w, b=b)
    code = f'''d = load_npz("{TMP}/half.npz")
res = {{}}
for dt in list("bf16", "f16") {{
  x = d.x.to(dt); rm = zeros(3); rv = ones(3)
  ys = list(batch_norm(x, rm, rv, d.w, d.b, training=true), group_norm(x, 3, d.w, d.b), instance_norm(x, nil, nil, d.w, d.b))
  for i in 0..3 {{ if ys[i].dtype != dt {{ error("dtype " + ys[i].dtype) }} }}
  res[dt] = {{bn: ys[0].to("f32"), gn: ys[1].to("f32"), inorm: ys[2].to("f32"), rm: rm}}
}}
save("{TMP}/half.safetensors", res)'''
    r = run_nabla(code, {})
    if r.returncode != 0:
        report("batch/group/instance norm of bf16 and f16 inputs", False, r.stderr.strip()[-800:])
        return
    got = read_safetensors(os.path.join(TMP, "half.safetensors"))
    for dt, tdt, tol in (("bf16", torch.bfloat16, 2e-2), ("f16", torch.float16, 2e-3)):
        xt = torch.tensor(x).to(tdt).float()
        rm = torch.zeros(3)
        ref = {"bn": F.batch_norm(xt, rm, torch.ones(3), torch.tensor(w), torch.tensor(b), training=True),
               "gn": F.group_norm(xt, 3, torch.tensor(w), torch.tensor(b)),
               "inorm": F.instance_norm(xt, None, None, torch.tensor(w), torch.tensor(b))}
        bad = [f"{k}: max |diff| {float(np.max(np.abs(got[f'{dt}.{k}'] - v.numpy()))):.3g}" for k, v in ref.items()
               if not np.allclose(got[f"{dt}.{k}"], v.numpy(), rtol=tol, atol=tol)]
        if not np.allclose(got[f"{dt}.rm"], rm.numpy(), rtol=1e-5, atol=1e-6):
            bad.append("running_mean")
        report(f"batch/group/instance norm of {dt} inputs (computed in f32, returned in {dt})", not bad, "; ".join(bad))


def main():
    try:
        cases, arrays = make_cases()
        np.savez(os.path.join(TMP, "in.npz"), **arrays)
        check_values(cases, "cpu", {})
        emu = os.path.join(os.path.dirname(NABLA), "cuda", "emu", "nabla_cuda_emu.so")
        if os.path.exists(emu):
            check_values(cases, "cuda", {"NABLA_CUDA_EMULATE": "force", "NABLA_EMU_SMS": "2"})
        else:
            print(f"SKIP: batch_norm on the emulated CUDA device{SUFFIX}: {emu} is not built")
        check_half()
        torchcmp.check_errors(ERRORS, "batch_norm")
    finally:
        shutil.rmtree(TMP, True)
    sys.exit(1 if torchcmp.fails else 0)


main()
