#!/usr/bin/python3
"""File round trips between nabla and Python: safetensors (a spec-following reader/writer in
harness.py, since torch 1.13 has no safetensors package), .npy and .npz, exact values,
f32/f64/f16/bf16/i32/i64/u8/bool, nested keys ↔ nested records, NaN/inf/-0.0 bit patterns.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_io.py
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TMP, check, finish, rng, run_nabla, st_read, st_write, torch, np, nb_str, dtype_name  # noqa: E402


def special(a):
    a = a.copy()
    if a.size >= 3 and np.issubdtype(a.dtype, np.floating):
        a.flat[0], a.flat[1], a.flat[2] = np.nan, -np.inf, -0.0
    return a


def bits_equal(x, y):
    """exact equality including NaN payload-insensitive NaN and the sign of zero."""
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        x = x.view(torch.int16).numpy() if isinstance(x, torch.Tensor) else x
        y = y.view(torch.int16).numpy() if isinstance(y, torch.Tensor) else y
        return x.shape == y.shape and np.array_equal(x, y)
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if np.issubdtype(x.dtype, np.floating):
        return bool(np.all((np.isnan(x) & np.isnan(y)) | ((x == y) & (np.signbit(x) == np.signbit(y)))))
    return np.array_equal(x, y)


def inputs():
    return {
        "f32": special(rng.standard_normal((3, 4)).astype(np.float32)),
        "f64": special(rng.standard_normal((2, 3, 2))),
        "f16": special(rng.standard_normal((5,)).astype(np.float16)),
        "i64": rng.integers(-2**62, 2**62, size=(4,), dtype=np.int64),
        "i32": rng.integers(-2**31, 2**31 - 1, size=(2, 2), dtype=np.int32),
        "u8": rng.integers(0, 256, size=(6,), dtype=np.uint8),
        "bool": rng.random((3, 3)) > 0.5,
        "scalar": np.array(rng.standard_normal(), dtype=np.float64),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


def python_to_nabla():
    """Python writes safetensors (nested keys, bf16 via torch); nabla loads (nested record),
    checks the structure, and re-saves; Python compares bit for bit."""
    src = inputs()
    bf = torch.from_numpy(rng.standard_normal((2, 5)).astype(np.float32)).to(torch.bfloat16)
    flat = {f"model.layers.0.{k}": v for k, v in src.items()}
    flat["model.layers.1.w"] = src["f32"] * 2
    flat["model.bf16"] = bf
    flat["top"] = src["i64"]
    p_in, p_out = os.path.join(TMP, "py.safetensors"), os.path.join(TMP, "nb.safetensors")
    st_write(p_in, flat, {"nabla:num:lr": "0.25", "nabla:str:model.name": "tiny", "format": "pt"})
    prog = (f"r = load({nb_str(p_in)})\n"
            "print(type(r.model.layers), len(r.model.layers), r.model.layers[0].f32.shape, r.model.layers[0].bool.dtype, r.model.bf16.dtype, r.lr, r.model.name)\n"
            f"save({nb_str(p_out)}, r)\n")
    rc, so, se = run_nabla(prog)
    check("io.st_python_to_nabla.runs", rc == 0, f"rc={rc} {se.strip()[:300]}")
    if rc != 0:
        return
    want = "list 2 [3, 4] bool bf16 0.25 tiny"
    check("io.st_python_to_nabla.nested_record", so.strip() == want, f"printed {so.strip()!r}, want {want!r}")
    got, meta = st_read(p_out)
    check("io.st_python_to_nabla.same_keys", sorted(got) == sorted(flat), f"keys {sorted(got)} vs {sorted(flat)}")
    for k, v in flat.items():
        if k not in got:
            continue
        g = got[k]
        ok = bits_equal(g, v) and (dtype_name(g) == dtype_name(v))
        check(f"io.st_python_to_nabla.{k}", ok, f"dtype {dtype_name(g)} vs {dtype_name(v)}; got {g!r} want {v!r}")
    check("io.st_python_to_nabla.metadata", meta.get("nabla:num:lr") in ("0.25",) and meta.get("nabla:str:model.name") == "tiny", f"metadata {meta}")


def nabla_to_python():
    """nabla loads exact inputs from .npz, converts (bool masks, bf16, views), saves
    safetensors and .npy; Python checks the bytes against the spec and the values."""
    src = inputs()
    npz = os.path.join(TMP, "src.npz")
    np.savez(npz, **src)
    p_st, p_npy, p_npyT, p_npy0 = (os.path.join(TMP, n) for n in ("out.safetensors", "out.npy", "outT.npy", "out0.npy"))
    prog = (f"I = load_npz({nb_str(npz)})\n"
            "t = {}\n"
            "for k in keys(I) { t[k] = I[k] }\n"
            't.bf16 = to(I.f32, "bf16")\n'
            "t.mask = I.f32 > 0\n"
            "t.viewT = I.f32.T\n"
            "t.strided = I.f64[:, ::2]\n"
            "t.nested = {a: I.i64, b: list(I.u8, I.bool)}\n"
            "t.note = \"hello\"\n"
            f"save({nb_str(p_st)}, t)\n"
            f"save_npy({nb_str(p_npy)}, I.f64)\n"
            f"save_npy({nb_str(p_npyT)}, I.f32.T)\n"
            f"save_npy({nb_str(p_npy0)}, I.scalar)\n")
    rc, so, se = run_nabla(prog)
    check("io.nabla_to_python.runs", rc == 0, f"rc={rc} {se.strip()[:300]}")
    if rc != 0:
        return
    # the file follows the spec: u64 LE header size, JSON, offsets tile the data exactly
    with open(p_st, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8:8 + n])
    hdr.pop("__metadata__", None)
    spans = sorted(tuple(v["data_offsets"]) for v in hdr.values())
    tiled = spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] == len(buf) - 8 - n
    sizes_ok = all(v["data_offsets"][1] - v["data_offsets"][0] == int(np.prod(v["shape"])) * {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1, "BOOL": 1}[v["dtype"]] for v in hdr.values())
    check("io.nabla_to_python.spec_layout", tiled and sizes_ok, f"offsets {spans}, file {len(buf)} bytes, header {n}")
    got, meta = st_read(p_st)
    expect = dict(src)
    expect["bf16"] = torch.from_numpy(src["f32"]).to(torch.bfloat16)
    expect["mask"] = src["f32"] > 0
    expect["viewT"] = np.ascontiguousarray(src["f32"].T)
    expect["strided"] = np.ascontiguousarray(src["f64"][:, ::2])
    expect["nested.a"] = src["i64"]
    expect["nested.b.0"] = src["u8"]
    expect["nested.b.1"] = src["bool"]
    # nested.a is the same tensor as i64 (and b.0, b.1 as u8, bool): a tensor at
    # several places is written once, the others recorded as aliases of it
    for k in ("nested.a", "nested.b.0", "nested.b.1"):
        check(f"io.nabla_to_python.st.{k}_is_alias", k not in got and meta.get(f"nabla:alias:{k}") in ("i64", "u8", "bool"), f"{sorted(got)} {meta}")
        if meta.get(f"nabla:alias:{k}") in got:
            got[k] = got[meta[f"nabla:alias:{k}"]]
    for k, v in expect.items():
        g = got.get(k)
        ok = g is not None and bits_equal(g, v) and dtype_name(g) == dtype_name(v)
        check(f"io.nabla_to_python.st.{k}", ok, f"got {None if g is None else (dtype_name(g), g)} want {(dtype_name(v), v)}")
    check("io.nabla_to_python.st.string_metadata", meta.get("nabla:str:note") == "hello", f"metadata {meta}")
    for name, path, want in (("npy_f64", p_npy, src["f64"]), ("npy_transposed_view", p_npyT, np.ascontiguousarray(src["f32"].T)), ("npy_0d", p_npy0, src["scalar"])):
        try:
            g = np.load(path)
            check(f"io.nabla_to_python.{name}", bits_equal(g, want), f"got {g!r} want {want!r}")
        except Exception as ex:
            check(f"io.nabla_to_python.{name}", False, f"np.load failed: {ex}")


def npy_variants():
    """.npy files NumPy writes in its other layouts: Fortran order, and .npz compressed."""
    a = rng.standard_normal((3, 5))
    pf = os.path.join(TMP, "fortran.npy")
    np.save(pf, np.asfortranarray(a))
    pc = os.path.join(TMP, "comp.npz")
    b = rng.integers(-9, 9, size=(4, 2))
    np.savez_compressed(pc, b=b, m=b > 0)
    out = os.path.join(TMP, "variants.safetensors")
    rc, so, se = run_nabla(f"f = load_npy({nb_str(pf)})\nc = load_npz({nb_str(pc)})\nsave({nb_str(out)}, {{f: f, b: c.b, m: c.m}})\n")
    if rc != 0:
        check("io.npy_fortran_and_npz_compressed", False, f"rc={rc} {se.strip()[:300]}")
        return
    got, _ = st_read(out)
    check("io.npy_fortran_order", bits_equal(got["f"], a), f"got {got['f']} want {a}")
    check("io.npz_compressed", bits_equal(got["b"], b) and bits_equal(got["m"], b > 0), f"got {got['b']}, {got['m']}")


def roundtrip_in_nabla():
    """save → load inside nabla keeps values, dtypes, nesting and lists."""
    prog = ("seed(7)\n"
            "m = {w: randn(3, 4), b: zeros(4, dtype=\"f64\"), layers: list({k: randint(0, 9, [2])}, {k: rand(2) > 0.5}), lr: 0.5}\n"
            f"p = {nb_str(os.path.join(TMP, 'rt.safetensors'))}\n"
            "save(p, m)\n"
            "r = load(p)\n"
            "print(all(r.w == m.w).item, all(r.b == m.b).item, r.b.dtype, all(r.layers[0].k == m.layers[0].k).item, r.layers[1].k.dtype, r.lr)\n")
    rc, so, se = run_nabla(prog)
    check("io.roundtrip_in_nabla", rc == 0 and so.strip() == "true true f64 true bool 0.5", f"rc={rc} out={so.strip()!r} err={se.strip()[:200]!r}")


def main():
    python_to_nabla()
    nabla_to_python()
    npy_variants()
    roundtrip_in_nabla()
    finish()


if __name__ == "__main__":
    main()
