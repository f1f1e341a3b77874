#!/usr/bin/python3
"""The CPU's bf16 matmul through oneDNN (tensor/tonednn.c) against torch
1.13's bf16 CPU matmul (f32 accumulation, one rounding; for vector
operands, where torch's bf16 path does not accumulate in f32, torch's f32
product of the bf16 values rounded to bf16): odd shapes,
transposed (non-contiguous) operands, batches, a broadcast batch, vectors;
each result within one bf16 ULP of torch's, and of nabla's own f32 path
(NABLA_ONEDNN=0).  Then a linear layer under autocast("bf16") with f32
parameters against torch.autocast("cpu", bfloat16): the output and the f32
gradients of x, w and b, to bf16's precision.  Fresh random data each run.

Run with /usr/bin/python3; env NABLA = the interpreter (build/nabla).
"""
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torchcmp  # noqa: E402
from torchcmp import TMP, rng, report, read_safetensors, run_nabla  # noqa: E402

CASES = [  # (name, a shape, b shape, nabla expression on a, b)
    ("[37, 53] x [53, 29]", (37, 53), (53, 29), "matmul(a, b)"),
    ("[1, 64] x [64, 130]", (1, 64), (64, 130), "matmul(a, b)"),
    ("a^T: [53, 37]^T x [53, 29]", (53, 37), (53, 29), "matmul(a.T, b)"),
    ("b^T: [37, 53] x [29, 53]^T", (37, 53), (29, 53), "matmul(a, b.T)"),
    ("batched [3, 17, 40] x [3, 40, 23]", (3, 17, 40), (3, 40, 23), "matmul(a, b)"),
    ("broadcast [2, 3, 17, 40] x [40, 23]", (2, 3, 17, 40), (40, 23), "matmul(a, b)"),
    ("vector [40] x [40, 23]", (40,), (40, 23), "matmul(a, b)"),
    ("[17, 40] x vector [40]", (17, 40), (40,), "matmul(a, b)"),
]


def bf16(x):
    return torch.tensor(x).bfloat16()


def within_ulp(got, want):
    """|got - want| <= one bf16 ULP of want (spacing 2^(e-7))"""
    w = want.astype(np.float64)
    e = np.floor(np.log2(np.maximum(np.abs(w), 1e-30)))
    ulp = 2.0 ** (e - 7)
    d = np.abs(got.astype(np.float64) - w)
    return bool(np.all(d <= ulp)), float(np.max(d / ulp))


def main():
    arrays = {}
    for i, (_, sa, sb, _) in enumerate(CASES):
        arrays[f"a{i}"] = rng.standard_normal(sa).astype(np.float32)
        arrays[f"b{i}"] = rng.standard_normal(sb).astype(np.float32)
    N, D, O = 24, 48, 20
    arrays.update(x=rng.standard_normal((N, D)).astype(np.float32), w=(rng.standard_normal((O, D)) * 0.2).astype(np.float32),
                  bias=rng.standard_normal(O).astype(np.float32), gy=rng.standard_normal((N, O)).astype(np.float32))
    np.savez(os.path.join(TMP, "in.npz"), **arrays)
    code = [f'd = load_npz("{TMP}/in.npz")', "r = {}"]
    for i, (_, _, _, e) in enumerate(CASES):
        code.append(f'a = d.a{i}.to("bf16"); b = d.b{i}.to("bf16"); y = {e}; '
                    f'if y.dtype != "bf16" {{ error("dtype " + y.dtype) }}; r["y{i}"] = y.to("f32")')
    code.append('''fn loss(x, w, bias) { y = autocast("bf16") { linear(x, w, bias) }; r["lin"] = y.to("f32"); sum(y.to("f32") * d.gy) }
g = grad(loss, argnums=[0, 1, 2])(d.x, d.w, d.bias)
r["gx"] = g[0]; r["gw"] = g[1]; r["gb"] = g[2]''')
    code.append(f'save(out_path, r)')
    got = {}
    for tag, env in (("onednn", {}), ("f32path", {"NABLA_ONEDNN": "0"})):
        src = "\n".join(code).replace("out_path", f'"{TMP}/{tag}.safetensors"')
        res = run_nabla(src, env)
        if res.returncode != 0:
            report(f"bf16 matmul ({tag})", False, res.stderr.strip()[-800:])
            return
        got[tag] = read_safetensors(os.path.join(TMP, f"{tag}.safetensors"))
    for i, (name, _, _, e) in enumerate(CASES):
        a, b = bf16(arrays[f"a{i}"]), bf16(arrays[f"b{i}"])
        if ".T" in e:
            a = a.T if e.startswith("matmul(a.T") else a
            b = b.T if "b.T" in e else b
        # torch 1.13's bf16 matrix products accumulate in f32 (oneDNN too), its
        # bf16 vector products do not (8-10 ULP off): those take torch's f32
        # product of the same bf16 values, rounded once, as the reference
        vec = a.dim() == 1 or b.dim() == 1
        want = (torch.matmul(a.float(), b.float()).bfloat16() if vec else torch.matmul(a, b)).float().numpy()
        ok, worst = within_ulp(got["onednn"][f"y{i}"], want)
        report(f"bf16 matmul {name} within 1 bf16 ULP of torch's" + (" f32 product" if vec else ""), ok, f"worst {worst:.2f} ULP")
        ok2, worst2 = within_ulp(got["onednn"][f"y{i}"], got["f32path"][f"y{i}"])
        report(f"bf16 matmul {name}: oneDNN within 1 bf16 ULP of the f32 path", ok2, f"worst {worst2:.2f} ULP")
    # autocast linear: values and f32 gradients
    x = torch.tensor(arrays["x"], requires_grad=True)
    w = torch.tensor(arrays["w"], requires_grad=True)
    bb = torch.tensor(arrays["bias"], requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.nn.functional.linear(x, w, bb)
    (y.float() * torch.tensor(arrays["gy"])).sum().backward()
    for k, want in (("lin", y.float().detach().numpy()), ("gx", x.grad.numpy()), ("gw", w.grad.numpy()), ("gb", bb.grad.numpy())):
        g = got["onednn"][k]
        scale = float(np.max(np.abs(want)))
        err = float(np.max(np.abs(g - want)))
        report(f"autocast bf16 linear: {k} against torch's CPU autocast", g.shape == want.shape and err <= 2 ** -7 * 2 * scale,
               f"max |diff| {err:.3g} (scale {scale:.3g})")


try:
    main()
finally:
    shutil.rmtree(TMP, True)
sys.exit(1 if torchcmp.fails else 0)
