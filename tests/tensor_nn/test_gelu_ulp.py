#!/usr/bin/python3
"""The exact (erf) GELU on the CPU in f32 (tensor/gelu_erfc_f32.h, our own
erfc for it) in ULPs against a float64 reference, over the whole float range:
every 2^12-th f32 bit pattern (both signs, normal and subnormal), all floats
with |x| in a dense band near 0 and across the region where Phi(x) gets tiny
(x in [-15, -4], every 2^6-th), and 200k fresh uniform values in [-8, 8].
The reference is 0.5 x erfc(-x / sqrt 2) in float64 (torch's f64 erfc, which
is within a few f64 ULP, ~1e-16: far below an f32 ULP); the error of a result
is |got - ref| / spacing(f32(ref)), spacing of a subnormal included.  The
gradient (Phi(x) + x phi(x)) is held to the same measure, relative to the
larger of its two terms (the sum cancels near x = -0.75 in any f32 formula).
Every vector width runs (NABLA_VECMATH=sse2|avx2|avx512 where the CPU has it)
and the scalar tail path (an odd length).

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

MAX_ULP = 8.0        # the forward's bound (docs/numerics.md records the measured maximum)
MAX_ULP_GRAD = 12.0   # the worst cases are subnormal results, where Phi and x phi cancel


def inputs():
    full = (np.arange(0, 1 << 32, 1 << 12, dtype=np.uint64) + rng.integers(0, 1 << 12)).astype(np.uint32).view(np.float32)
    full = full[np.isfinite(full)]
    near0 = np.arange(np.float32(-1e-3).view(np.int32), np.float32(-1e-3).view(np.int32) + 4096, dtype=np.int32).view(np.float32)
    lo, hi = np.float32(-4).view(np.uint32), np.float32(-15).view(np.uint32)
    tail = np.arange(lo, hi, 64, dtype=np.uint32).view(np.float32)
    mid = rng.uniform(-8, 8, 200_001).astype(np.float32)
    return np.concatenate([full, near0, -near0, tail, mid, np.float32([0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38])])


def ulps(got, ref):
    want = ref.astype(np.float32)
    sp = np.spacing(np.abs(want)).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref) / sp


def main():
    x = inputs()
    np.savez(os.path.join(TMP, "g.npz"), x=x)
    xt = torch.tensor(x.astype(np.float64))
    ref = (0.5 * xt * torch.special.erfc(-xt / np.sqrt(2.0))).numpy()
    cdf = 0.5 * torch.special.erfc(-xt / np.sqrt(2.0))
    pdf = torch.exp(-0.5 * xt * xt) / np.sqrt(2 * np.pi)
    dref = (cdf + xt * pdf).numpy()
    dscale = np.maximum(np.abs(cdf.numpy()), np.abs((xt * pdf).numpy()))
    widths = ["sse2"]
    flags = open("/proc/cpuinfo").read()
    if " avx2 " in flags and " fma " in flags:
        widths.append("avx2")
    if " avx512f " in flags:
        widths.append("avx512")
    for w in widths:
        code = f'''d = load_npz("{TMP}/g.npz")
x = d.x
g = grad(fn(x) {{ sum(gelu(x)) }})(x)
save("{TMP}/g_{w}.safetensors", {{y: gelu(x), g: g, odd: gelu(x[0:1001])}})'''
        r = run_nabla(code, {"NABLA_VECMATH": w})
        if r.returncode != 0:
            report(f"gelu ulp {w}", False, r.stderr.strip()[-800:])
            continue
        got = read_safetensors(os.path.join(TMP, f"g_{w}.safetensors"))
        y, g = got["y"], got["g"]
        e = ulps(y, ref)
        worst = int(np.argmax(e))
        report(f"gelu f32 ({w}) within {MAX_ULP} ULP of the f64 reference over the float range",
               e.max() <= MAX_ULP, f"max {e.max():.2f} ULP at x={x[worst]!r}: got {y[worst]!r}, want {ref[worst]!r}")
        report(f"gelu f32 ({w}) tail path equals the vector path", np.array_equal(got["odd"], y[:1001]), "differs")
        de = np.abs(g.astype(np.float64) - dref) / np.spacing(dscale.astype(np.float32)).astype(np.float64)
        de[~np.isfinite(dscale) | (dscale == 0)] = 0
        wd = int(np.argmax(de))
        report(f"gelu f32 gradient ({w}) within {MAX_ULP_GRAD} ULP of its larger term",
               de.max() <= MAX_ULP_GRAD, f"max {de.max():.2f} at x={x[wd]!r}: got {g[wd]!r}, want {dref[wd]!r}")
        print(f"# {w}: forward max {e.max():.3f} ULP, mean {e.mean():.4f}; gradient max {de.max():.3f}")
    # torch's own f32 GELU on the same inputs, for the record (not a check)
    tg = torch.nn.functional.gelu(torch.tensor(x)).numpy()
    print(f"# torch 1.13 f32 gelu on the same inputs: max {ulps(tg, ref).max():.3g} ULP")
    # special values: +inf stays inf, NaN stays NaN, -0 and 0 give 0
    code = f'save("{TMP}/sp.safetensors", {{y: gelu(tensor([inf, nan, 0.0, -0.0, 1e30, -1e30]))}})'
    r = run_nabla(code, {})
    sp = read_safetensors(os.path.join(TMP, "sp.safetensors"))["y"] if r.returncode == 0 else None
    ok = sp is not None and sp[0] == np.inf and np.isnan(sp[1]) and sp[2] == 0 and sp[3] == 0 and sp[4] == np.float32(1e30) and sp[5] == 0
    report("gelu special values (inf, nan, +-0, +-1e30)", ok, f"got {sp}")
    shutil.rmtree(TMP, True)
    sys.exit(1 if torchcmp.fails else 0)


main()
