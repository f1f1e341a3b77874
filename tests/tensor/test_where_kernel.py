#!/usr/bin/python3
"""where(cond, a, b) on the CPU: the typed, threaded fast path (tcpu_elem.c
where_fast: contiguous cond and out, a and b contiguous or one value) and the
strided iterator it falls back to, against NumPy's np.where bit for bit (a
select copies bits: NaN payloads and -0 come through), on fresh random data:
every element size (bool/u8, bf16, f32/i32, f64/i64), small and threaded
sizes (above NT_OMP_THRESHOLD, 65,536), the scalar operand on either side or
both, a transposed (strided) operand, empty tensors, at 1 and 2 threads."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torchcmp import TMP, rng, report, run_nabla  # noqa: E402

SHAPES = [(7, 5), (301, 293), (0, 4)]   # small, threaded (88,193 elements), empty
DTYPES = ["f32", "f64", "i32", "i64", "u8", "bool", "bf16"]


def data(shape, dt):
    if dt in ("f32", "f64", "bf16"):
        x = rng.standard_normal(shape).astype(np.float32)
        flat = x.reshape(-1)
        if flat.size:   # special values, copied bit for bit
            flat[rng.integers(0, flat.size, 3)] = np.array([np.nan, -0.0, np.inf], np.float32)
        return x if dt != "f64" else x.astype(np.float64)
    if dt == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(-100 if dt != "u8" else 0, 100, shape).astype({"i32": np.int32, "i64": np.int64, "u8": np.uint8}[dt])


def main():
    arrays, code, want = {}, ["r = {}"], {}
    for si, shape in enumerate(SHAPES):
        c = rng.random(shape) < 0.5
        arrays[f"c{si}"] = c
        for dt in DTYPES:
            a, b = data(shape, dt), data(shape, dt)
            arrays[f"a{si}_{dt}"], arrays[f"b{si}_{dt}"] = a, b
            conv = f'.to("{dt}")' if dt == "bf16" else ""
            back = '.to("f32")' if dt == "bf16" else ""
            av = f'A = load_npy("{TMP}/a{si}_{dt}.npy"){conv}; B = load_npy("{TMP}/b{si}_{dt}.npy"){conv}; C = load_npy("{TMP}/c{si}.npy")'
            s0 = 1 if dt == "bool" else 3
            sv = "true" if dt == "bool" else "3"
            cases = {
                "both": ("where(C, A, B)", np.where(c, a, b)),
                "b_scalar": (f'where(C, A, full([], {sv}, dtype="{dt}"))', np.where(c, a, np.array(s0).astype(a.dtype))),
                "a_scalar": (f'where(C, full([], {sv}, dtype="{dt}"), B)', np.where(c, np.array(s0).astype(a.dtype), b)),
                "both_scalar": (f'where(C, full([], {sv}, dtype="{dt}"), full([], 0, dtype="{dt}"))',
                                np.where(c, np.array(s0).astype(a.dtype), np.array(0).astype(a.dtype))),
                "transposed": ("where(C.T, A.T, B.T)", np.where(c.T, a.T, b.T)),   # strided: the iterator
                "transposed_b_scalar": (f'where(C.T, A.T, full([], {sv}, dtype="{dt}"))', np.where(c.T, a.T, np.array(s0).astype(a.dtype))),
            }
            for name, (expr, w) in cases.items():
                key = f"{name}_{si}_{dt}"
                code.append(f'{av}; r["{key}"] = ({expr}){back}')
                want[key] = np.ascontiguousarray(w if dt != "bf16" else w.astype(np.float32))
    for k, v in arrays.items():
        np.save(os.path.join(TMP, f"{k}.npy"), v)
    code.append('for k in keys(r) { save_npy(OUT + "/" + k + ".npy", r[k].contiguous()) }')
    for threads in ("1", "2"):
        out = os.path.join(TMP, f"out{threads}")
        os.makedirs(out, exist_ok=True)
        res = run_nabla("\n".join(code).replace("OUT", f'"{out}"'), {"OMP_NUM_THREADS": threads})
        if res.returncode != 0:
            report(f"where kernel ({threads} threads)", False, res.stderr[-800:])
            continue
        for key, w in want.items():
            got = np.load(os.path.join(out, f"{key}.npy"))
            if "bf16" in key:   # where in bf16 of bf16-rounded values: the same as rounding NumPy's pick
                w = (w.view(np.uint32) + 0x7FFF + ((w.view(np.uint32) >> 16) & 1)) & 0xFFFF0000
                w = np.where(np.isnan(want[key]), np.float32(np.nan).view(np.uint32), w).view(np.float32)
            same = got.shape == w.shape and got.dtype == w.dtype and np.array_equal(got.view(np.uint8), w.view(np.uint8)) \
                if "bf16" not in key else got.shape == w.shape and np.array_equal(got, w, equal_nan=True)
            report(f"where {key} ({threads} threads) equals np.where bit for bit", same,
                   f"shape {got.shape} vs {w.shape}, dtype {got.dtype} vs {w.dtype}")


main()
