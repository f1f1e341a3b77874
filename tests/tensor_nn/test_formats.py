#!/usr/bin/python3
"""Cross-checks tensor/io against NumPy (and torch for bf16).

Run with /usr/bin/python3 (Debian's numpy/torch).  NABLA_BUILD = build dir;
uses $NABLA_BUILD/tests/tensor_nn/fmt_dump.  Prints PASS/FAIL/SKIP lines and
exits 1 on any failure.
"""
import json, os, struct, subprocess, sys, tempfile, traceback

results = []

def report(name, status, why=""):
    results.append(status)
    print(f"{status}: {name}" + (f": {why}" if why else ""), flush=True)

try:
    import numpy as np
except ImportError as e:
    print(f"SKIP: formats: numpy not importable ({e}); run with /usr/bin/python3")
    sys.exit(0)

build = os.environ.get("NABLA_BUILD", "build")
DUMP = os.path.join(build, "tests", "tensor_nn", "fmt_dump")
if not os.access(DUMP, os.X_OK):
    print(f"FAIL: formats: {DUMP} not built")
    sys.exit(1)

tmp = tempfile.mkdtemp(prefix="nabla_fmt_")

def run(*args):
    return subprocess.run([DUMP, *args], capture_output=True, text=True)

def dump(fmt, path):
    """-> (dict name -> (dtype, shape, float64 values)), meta dict, order list"""
    r = run("dump", fmt, path)
    if r.returncode != 0:
        raise AssertionError(f"fmt_dump failed ({r.returncode}): {r.stderr.strip()}")
    lines = r.stdout.split("\n")
    arrays, meta, order, i = {}, {}, [], 0
    while i < len(lines) and lines[i]:
        parts = lines[i].split(" ")
        if parts[0] == "meta":
            meta[parts[1]] = " ".join(parts[2:]); i += 1; continue
        assert parts[0] == "array", lines[i]
        name, dt, nd = parts[1], parts[2], int(parts[3])
        shape = tuple(int(x) for x in parts[4:4 + nd])
        vals = np.array([float(x) for x in lines[i + 1].split()], dtype=np.float64)
        arrays[name] = (dt, shape, vals)
        order.append(name)
        i += 2
    return arrays, meta, order

def same(a, got, want_dt=None):
    dt, shape, vals = got
    if want_dt and dt != want_dt:
        raise AssertionError(f"dtype {dt}, want {want_dt}")
    if shape != a.shape:
        raise AssertionError(f"shape {shape}, want {a.shape}")
    ref = np.ascontiguousarray(a).astype(np.float64).ravel()
    if not np.array_equal(vals, ref, equal_nan=True):
        raise AssertionError(f"values differ: {vals[:8]} vs {ref[:8]}")

NPY_DT = {"f4": "F32", "f8": "F64", "f2": "F16", "i4": "I32", "i8": "I64", "u1": "U8", "b1": "BOOL"}
rng = np.random.default_rng(0)

def sample(code, shape):
    if code == "b1":
        return rng.random(shape) > 0.5
    if code == "u1":
        return rng.integers(0, 256, shape).astype(np.uint8)
    if code[0] == "i":
        return rng.integers(-2**31, 2**31, shape).astype(code)
    a = rng.standard_normal(shape).astype(code)
    if a.size > 2:
        a.ravel()[0], a.ravel()[1] = np.inf, np.nan
    return a

def test(fn):
    try:
        fn()
        report(fn.__name__, "PASS")
    except Exception as e:
        report(fn.__name__, "FAIL", f"{type(e).__name__}: {e}".replace("\n", " ") or traceback.format_exc())
    return fn

@test
def npy_numpy_dtypes_shapes():
    for code in NPY_DT:
        for shape in [(), (5,), (2, 3), (2, 0, 3), (2, 3, 4)]:
            a = sample(code, shape)
            p = os.path.join(tmp, "a.npy")
            np.save(p, a)
            arrays, _, _ = dump("npy", p)
            same(a, arrays["-"], NPY_DT[code])

@test
def npy_numpy_fortran_and_bigendian():
    a = rng.standard_normal((3, 4, 5)).astype("f4")
    p = os.path.join(tmp, "f.npy")
    np.save(p, np.asfortranarray(a))
    same(a, dump("npy", p)[0]["-"], "F32")
    b = rng.integers(-1000, 1000, (4, 3)).astype(">i8")
    np.save(p, b)
    same(b, dump("npy", p)[0]["-"], "I64")
    np.save(p, a.astype(">f8").T)       # big-endian and Fortran at once (T of C is F-contiguous)
    same(a.T, dump("npy", p)[0]["-"], "F64")

@test
def npz_numpy_savez_and_compressed():
    arrs = {"weights": sample("f4", (7, 3)), "ids": sample("i8", (11,)), "mask": sample("b1", (2, 2)),
            "scalar": np.float64(3.5), "empty": np.zeros((0, 2), "f4"), "big": sample("f8", (300, 40))}
    for save in (np.savez, np.savez_compressed):
        p = os.path.join(tmp, "z.npz")
        save(p, **arrs)
        arrays, _, order = dump("npz", p)
        if sorted(order) != sorted(arrs):
            raise AssertionError(f"{save.__name__}: names {order}")
        for k, v in arrs.items():
            same(np.asarray(v), arrays[k])

@test
def npy_writer_read_by_numpy():
    arrs = {c: sample(c, (3, 5)) for c in NPY_DT}
    arrs["scalar"] = np.int32(-7)
    arrs["vec"] = sample("f8", (4,))
    src = os.path.join(tmp, "src.npz")
    np.savez(src, **arrs)
    for k, v in arrs.items():
        out = os.path.join(tmp, f"out_{k}.npy")
        r = run("convert", "npz", src, "npy", out, k)
        if r.returncode:
            raise AssertionError(r.stderr)
        got = np.load(out)
        if got.dtype != np.asarray(v).dtype.newbyteorder("<") or not np.array_equal(got, v, equal_nan=True):
            raise AssertionError(f"{k}: {got!r} vs {v!r}")

def st_write(path, tensors, meta=None, pad=True):
    """Reference safetensors writer straight from the spec."""
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

def st_read(path):
    """Reference reader: returns ({name: (dtype, shape, bytes)}, meta, header_len)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    data = b[8 + n:]
    spans = sorted(v["data_offsets"] for v in hdr.values())
    pos = 0
    for s, e in spans:
        if s != pos:
            raise AssertionError("data section not contiguous")
        pos = e
    if pos != len(data):
        raise AssertionError("data section length mismatch")
    return {k: (v["dtype"], tuple(v["shape"]), data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in hdr.items()}, meta, n

ST_NP = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I32": "<i4", "I64": "<i8", "U8": "u1", "BOOL": "?"}

@test
def safetensors_reference_file_read():
    ts, want = {}, {}
    for dt, code in [("F32", "f4"), ("F64", "f8"), ("F16", "f2"), ("I32", "i4"), ("I64", "i8"),
                     ("U8", "u1"), ("BOOL", "b1")]:
        a = sample(code, (3, 2))
        ts["t_" + dt] = (dt, a.shape, np.ascontiguousarray(a).astype(ST_NP[dt]).tobytes())
        want["t_" + dt] = (dt, a)
    ts["scalar"] = ("F32", (), np.float32(2.5).tobytes()); want["scalar"] = ("F32", np.float32(2.5).reshape(()))
    try:
        import torch
        bf = torch.tensor([[1.5, -2.0, 3.140625]], dtype=torch.bfloat16)
        ts["bf"] = ("BF16", (1, 3), bf.view(torch.int16).numpy().tobytes())
        want["bf"] = ("BF16", bf.float().numpy())
    except ImportError:
        pass
    p = os.path.join(tmp, "ref.safetensors")
    st_write(p, ts, {"format": "pt", "k": "v w"})
    arrays, meta, _ = dump("st", p)
    if meta != {"format": "pt", "k": "v w"}:
        raise AssertionError(f"meta {meta}")
    for k, (dt, a) in want.items():
        same(a, arrays[k], dt)
    st_write(p, ts, pad=False)               # unpadded headers are legal too (data may be misaligned)
    arrays, _, _ = dump("st", p)
    for k, (dt, a) in want.items():
        same(a, arrays[k], dt)

@test
def safetensors_writer_read_by_python():
    arrs = {"w": sample("f4", (4, 3)), "b": sample("f8", (3,)), "i": sample("i8", (2, 2)),
            "m": sample("b1", (5,)), "u": sample("u1", (1,)), "h": sample("f2", (2, 2)), "z": np.zeros((0,), "f4")}
    src = os.path.join(tmp, "src2.npz")
    np.savez(src, **arrs)
    out = os.path.join(tmp, "out.safetensors")
    r = run("convert", "npz", src, "st", out)
    if r.returncode:
        raise AssertionError(r.stderr)
    got, meta, n = st_read(out)
    if n % 8:
        raise AssertionError("header length not a multiple of 8")
    if meta != {"writer": "nabla fmt_dump"}:
        raise AssertionError(f"meta {meta}")
    for k, v in arrs.items():
        dt, shape, raw = got[k]
        a = np.frombuffer(raw, dtype=ST_NP[dt]).reshape(shape)
        if shape != v.shape or not np.array_equal(a, v, equal_nan=True):
            raise AssertionError(f"{k} differs")
    leftovers = [f for f in os.listdir(tmp) if ".tmp." in f or ".nabla-tmp." in f]
    if leftovers:
        raise AssertionError(f"temp files left: {leftovers}")

@test
def corrupt_files_fail_cleanly():
    src = os.path.join(tmp, "c.npz")
    np.savez_compressed(src, a=sample("f8", (50, 50)), b=sample("i4", (9,)))
    raw = open(src, "rb").read()
    p = os.path.join(tmp, "bad")
    for fmt, data in [("npz", raw[: len(raw) // 2]), ("npz", raw[:-30]), ("npz", raw[:100] + b"\0" * 50 + raw[150:]),
                      ("npy", b"\x93NUMPY\x01\x00"), ("npy", open(os.path.join(tmp, "a.npy"), "rb").read()[:-1]),
                      ("st", b"\x10\0\0\0\0\0\0\0{}"), ("st", b"\x02\0\0\0\0\0\0\0{}junk")]:
        open(p, "wb").write(data)
        r = run("dump", fmt, p)
        if r.returncode != 1 or "error:" not in r.stderr or p not in r.stderr:
            raise AssertionError(f"{fmt}: rc={r.returncode} stderr={r.stderr.strip()!r}")

@test
def csv_numpy_savetxt():
    a = rng.standard_normal((6, 3))
    p = os.path.join(tmp, "t.csv")
    np.savetxt(p, a, delimiter=",", header="alpha,beta,gamma", comments="", fmt="%.17g")
    r = run("dump", "csv", p)
    if r.returncode:
        raise AssertionError(r.stderr)
    lines = r.stdout.split("\n")
    if lines[0] != "csv 6 3" or lines[1] != "names alpha beta gamma":
        raise AssertionError(lines[:2])
    vals = np.array([float(x) for x in lines[2].split()])
    if not np.array_equal(vals, a.ravel()):
        raise AssertionError("values differ")

for f in os.listdir(tmp):
    os.unlink(os.path.join(tmp, f))
os.rmdir(tmp)
sys.exit(1 if "FAIL" in results else 0)
