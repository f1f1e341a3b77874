#!/usr/bin/python3
"""NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
The readers against Python's csv/json and NumPy on freshly generated files:
CSV (RFC 4180 quoting, text columns as lists or category codes, NA/empty as
NaN, usecols, dtype, header detection and header=true/false), npz (every
supported member, unsupported ones skipped and named on request, i1 i2 u2 u4
u8 widened, big-endian and Fortran order), JSON (load_json/save_json,
json_parse/json_format round trips); and hostile files: ragged rows, an
unterminated quote, a NUL byte, deep nesting, huge numbers, bad UTF-8, a
truncated npz, a u8 beyond int64.
"""
import atexit
import csv
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASAN = os.environ.get("NABLA_ASAN") == "1"
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build", "nabla")
SUFFIX = " [asan]" if ASAN else ""
TMP = tempfile.mkdtemp(prefix="nabla-readers-")
atexit.register(shutil.rmtree, TMP, True)
ENV = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"), NO_COLOR="1")
FAILED = False
SEED = int.from_bytes(os.urandom(4), "little")
rng = random.Random(SEED)
nrng = np.random.default_rng(SEED)


def report(name, ok, why=""):
    global FAILED
    FAILED |= not ok
    why = " ".join(str(why).split())
    print(f"{'PASS' if ok else 'FAIL'}: {name}{SUFFIX}" + ("" if ok else f": {why[:1500]} (seed {SEED})"), flush=True)


def run(src, timeout=120):
    p = os.path.join(TMP, "prog.nbl")
    with open(p, "w") as f:
        f.write("import data\n" + src)
    r = subprocess.run([NABLA, p], capture_output=True, timeout=timeout, env=ENV)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def path(name):
    return os.path.join(TMP, name)


def nbstr(s):
    """a nabla raw string literal for a path"""
    assert "'" not in s
    return "'" + s + "'"


# ------------------------------------------------------------------ CSV
WORDS = ["setosa", "versicolor", "virginica", "a, b", 'say "hi"', "line\nbreak", "  padded  ", "é中🙂", "x"]
NA = ["", "NA", "N/A", "null", "NaN"]


def gen_csv(nrows):
    cols = ["id", "w,eird \"name\"", "species", "val", "note"]
    rows, want_num, want_txt = [], [], {"species": [], "note": []}
    for i in range(nrows):
        v = rng.choice([f"{nrng.normal():.17g}", rng.choice(NA), str(rng.randrange(-5, 5)), "1e400", "-inf"])
        w = f"{nrng.normal() * 1e3:.9g}"
        sp = rng.choice(WORDS[:3])
        note = rng.choice(WORDS + ["NA", ""])
        rows.append([str(i), w, sp, v, note])
        fv = math.nan if v.strip() in NA else float(v)
        want_num.append([float(i), float(w), fv])
        want_txt["species"].append(sp)
        want_txt["note"].append(None if note.strip() in NA else note)
    buf = io.StringIO()
    wr = csv.writer(buf, quoting=rng.choice([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]), lineterminator=rng.choice(["\n", "\r\n"]))
    wr.writerow(cols)
    wr.writerows(rows)
    return buf.getvalue(), cols, np.array(want_num), want_txt


def t_csv():
    text, cols, want_num, want_txt = gen_csv(rng.randrange(30, 80))
    p = path("gen.csv")
    with open(p, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    # Python's csv reads back what it wrote: the reference for the fields
    py = list(csv.reader(io.StringIO(text, newline="")))
    assert py[0] == cols
    out = path("num.npy")
    rc, so, se = run(f"""
d = load_csv({nbstr(p)})
save_npy({nbstr(out)}, d.data)
print(json_format({{columns: d.columns, numeric: d.numeric, text: d.text}}))
""")
    if rc != 0:
        report("csv_text_columns_quotes_na_vs_python", False, se[-600:])
        return
    r = json.loads(so.strip().splitlines()[-1])
    got = np.load(out)
    why = ""
    if r["columns"] != cols:
        why += f"columns {r['columns']}; "
    if r["numeric"] != ["id", cols[1], "val"]:
        why += f"numeric {r['numeric']}; "
    if got.shape != want_num.shape or not np.array_equal(got, want_num, equal_nan=True):
        why += f"numbers differ: {got[:3]} vs {want_num[:3]}; "
    if r["text"] != want_txt:
        bad = [k for k in want_txt if r["text"].get(k) != want_txt[k]]
        why += f"text columns differ: {bad}; "
    report("csv_text_columns_quotes_na_vs_python", not why, why)

    # usecols (names and indices, in the order given), dtype, codes
    out2 = path("sel.npy")
    rc, so, se = run(f"""
d = load_csv({nbstr(p)}, usecols=list("val", 0, "species"), dtype="f32", codes=true)
save_npy({nbstr(out2)}, d.data)
print(json_format({{columns: d.columns, numeric: d.numeric, codes: d.text.species, cats: d.categories.species}}))
""")
    if rc != 0:
        report("csv_usecols_dtype_codes", False, se[-600:])
    else:
        r = json.loads(so.strip().splitlines()[-1])
        got = np.load(out2)
        cats, codes = np.unique(np.array(want_txt["species"]), return_inverse=True)
        want = want_num[:, [2, 0]].astype(np.float32)
        ok = (r["columns"] == ["val", "id", "species"] and r["numeric"] == ["val", "id"] and got.dtype == np.float32
              and np.array_equal(got, want, equal_nan=True) and r["cats"] == list(cats) and r["codes"] == list(codes))
        report("csv_usecols_dtype_codes", ok, f"{r['columns']} {r['numeric']} {got.dtype} {r['cats']} {r['codes'][:5]} vs {list(codes[:5])}")

    # header detection, header=false / true, a custom na list, an integer dtype
    q = path("nohead.csv")
    vals = nrng.integers(-100, 100, size=(7, 3))
    np.savetxt(q, vals, fmt="%d", delimiter=";")
    out3 = path("nohead.npy")
    rc, so, se = run(f"""
a = load_csv({nbstr(q)}, ";", dtype="i64")
save_npy({nbstr(out3)}, a.data)
b = load_csv({nbstr(q)}, ";", header=true)
print(json_format(list(a.columns, b.columns, b.data.shape[0])))
""")
    ok = rc == 0
    if ok:
        r = json.loads(so.strip().splitlines()[-1])
        got = np.load(out3)
        ok = r[0] is None and r[1] == [str(v) for v in vals[0]] and r[2] == 6 and got.dtype == np.int64 and np.array_equal(got, vals)
    report("csv_header_detection_and_override_int_dtype", ok, f"rc {rc} {so[-300:]} {se[-300:]}")

    with open(path("na.csv"), "w") as f:
        f.write("a,b\n1,-\n?,2\nNA,3\n")
    rc, so, se = run(f"""
d = load_csv({nbstr(path('na.csv'))}, na=list("-", "?"))
print(json_format(list(d.numeric, d.text, (d.data != d.data).to("i64").tolist())))
""")
    want = [["b"], {"a": ["1", None, "NA"]}, [[1], [0], [0]]]
    ok = rc == 0 and json.loads(so.strip().splitlines()[-1]) == want
    report("csv_custom_na_list", ok, f"{so[-300:]} {se[-300:]}")

    # hostile files: clear errors with the place, never a crash
    hostile = [
        ("ragged", b"a,b\n1,2\n3,4,5\n", "3:1: ragged row: 3 fields, expected 2"),
        ("unterminated", b"a,b\n1,\"2\n3,4\n", "unterminated quoted field"),
        ("nul", b"a,b\n1,2\x003\n", "NUL byte"),
        ("after_quote", b"a,b\n\"1\"x,2\n", "unexpected character after a closing quote"),
        ("empty", b"", "no data"),
        ("int_dtype_with_na", b"a\n1\n\n2\nNA\n", "missing, which dtype i64 cannot hold"),
        ("bad_usecols", b"a,b\n1,2\n", "does not have"),
    ]
    bad = ""
    for name, content, want in hostile:
        with open(path(name + ".csv"), "wb") as f:
            f.write(content)
        extra = ', dtype="i64"' if name == "int_dtype_with_na" else ', usecols=list("zz")' if name == "bad_usecols" else ""
        rc, so, se = run(f"load_csv({nbstr(path(name + '.csv'))}{extra})")
        if rc == 0 or want not in se:
            bad += f"[{name}] rc {rc}: {se[-200:]}; "
    # bad UTF-8 and a huge field are data, kept as bytes (not an error, not a crash)
    with open(path("bytes.csv"), "wb") as f:
        f.write(b"k,v\n\xff\xfe,1\n" + b"z" * 200000 + b",2\n")
    rc, so, se = run(f"d = load_csv({nbstr(path('bytes.csv'))})\nprint(len(d.text.k[1]), d.data.tolist())")
    if rc != 0 or so.split()[0] != "200000":
        bad += f"[bytes] rc {rc} {so[-100:]} {se[-200:]}; "
    # a repeated header name: both text columns kept ("a", "a.1"), none silently replaced
    with open(path("dup.csv"), "w") as f:
        f.write("a,a,b\nx,y,1\nz,w,2\n")
    rc, so, se = run(f"print(json_format(load_csv({nbstr(path('dup.csv'))}).text))")
    if rc != 0 or json.loads(so.strip()) != {"a": ["x", "z"], "a.1": ["y", "w"]}:
        bad += f"[dup header] {so[-200:]} {se[-200:]}; "
    report("csv_hostile_files", not bad, bad)


def t_csv_int_range():
    """an integer dtype refuses a value beyond its range by column and row
    (found by fuzz_csv: u8 300 was read as 44, -1 as 255, i32 1e10 as
    2^31-1, bool 300 as true, i64 2^53+1 as 2^53); values at the bounds
    load exactly (i64: below 2^53, where a double is still exact)"""
    limits = {"u8": (0, 255), "i32": (-2**31, 2**31 - 1), "i64": (-2**53 + 1, 2**53 - 1), "bool": (0, 1)}
    bad = ""
    for dt, (lo, hi) in limits.items():
        n = rng.randrange(3, 9)
        vals = [lo, hi] + [rng.randrange(lo, hi + 1) for _ in range(n - 2)]
        rng.shuffle(vals)
        good = path(f"range_{dt}.csv")
        with open(good, "w") as f:
            f.write("v,w\n" + "".join(f"{v},{v}\n" for v in vals))
        out = path(f"range_{dt}.npy")
        row = rng.randrange(n)
        over = rng.choice([lo - 1, hi + 1, hi * 2 + 7, -1e30])
        badp = path(f"range_{dt}_bad.csv")
        with open(badp, "w") as f:
            f.write("v,w\n" + "".join(f"{v},{over if i == row else v}\n" for i, v in enumerate(vals)))
        rc, so, se = run(f"""
save_npy({nbstr(out)}, load_csv({nbstr(good)}, dtype="{dt}").data)
load_csv({nbstr(badp)}, dtype="{dt}")
""")
        want = np.array([[v, v] for v in vals]).astype(np.bool_ if dt == "bool" else {"u8": np.uint8, "i32": np.int32, "i64": np.int64}[dt])
        if not os.path.exists(out):
            bad += f"[{dt} in range] {se[-200:]}; "
            continue
        got = np.load(out)
        if got.dtype != want.dtype or not np.array_equal(got, want):
            bad += f"[{dt}] {got.tolist()} vs {want.tolist()}; "
        if rc == 0 or f"column w row {row + 1} is" not in se or f"beyond the range of dtype {dt}" not in se:
            bad += f"[{dt} {over} at row {row + 1}] rc {rc}: {se[-250:]}; "
    report("csv_int_dtype_range_refused_by_row", not bad, bad)


# ------------------------------------------------------------------ npz
def t_npz():
    arrays = {
        "i1": nrng.integers(-128, 128, size=(3, 4)).astype(np.int8),
        "i2": nrng.integers(-2**15, 2**15, size=(5,)).astype(np.int16),
        "u2": nrng.integers(0, 2**16, size=(2, 3)).astype(np.uint16),
        "u4": nrng.integers(0, 2**32, size=(7,), dtype=np.uint64).astype(np.uint32),
        "u8": nrng.integers(0, 2**63 - 1, size=(4,), dtype=np.int64).astype(np.uint64),
        "f4": nrng.normal(size=(2, 2)).astype(np.float32),
        "f2": nrng.normal(size=(3,)).astype(np.float16),
        "b1": nrng.integers(0, 2, size=(5,)).astype(bool),
        "be_i2": nrng.integers(-999, 999, size=(6,)).astype(">i2"),
        "fortran_u2": np.asfortranarray(nrng.integers(0, 60000, size=(3, 5)).astype(np.uint16)),
        "names": np.array(["setosa", "virginica"]),
        "pairs": np.zeros(3, dtype=[("a", "i4"), ("b", "f4")]),
        "cplx": np.ones(2, dtype=np.complex64),
    }
    p = path("mixed.npz")
    (np.savez_compressed if rng.random() < 0.5 else np.savez)(p, **arrays)
    outdir = path("npz_out")
    os.makedirs(outdir, exist_ok=True)
    rc, so, se = run(f"""
d = load_npz({nbstr(p)}, skipped=true)
for k in d.arrays {{ save_npy({nbstr(outdir)} + "/" + k + ".npy", d.arrays[k]) }}
plain = load_npz({nbstr(p)})
print(json_format(list(keys(d.arrays), d.skipped, keys(plain))))
""")
    if rc != 0:
        report("npz_supported_members_and_widening", False, se[-600:])
        return
    names, skipped, plain = json.loads(so.strip().splitlines()[-1])
    widened = {"i1": np.int32, "i2": np.int32, "u2": np.int32, "be_i2": np.int32, "fortran_u2": np.int32, "u4": np.int64, "u8": np.int64}
    why = ""
    want_names = [k for k in arrays if k not in ("names", "pairs", "cplx")]
    if names != want_names or plain != want_names:
        why += f"members {names} / {plain} != {want_names}; "
    for k in want_names:
        got = np.load(os.path.join(outdir, k + ".npy"))
        want = arrays[k]
        if k in widened and got.dtype != widened[k]:
            why += f"{k} loaded as {got.dtype}; "
        if got.shape != want.shape or not np.array_equal(got.astype(np.float64), want.astype(np.float64)):
            why += f"{k} values differ; "
    if [s["name"] for s in skipped] != ["names", "pairs", "cplx"] or not all("unsupported" in s["reason"] or "structured" in s["reason"] for s in skipped):
        why += f"skipped {skipped}; "
    report("npz_supported_members_and_widening", not why, why)

    # data.load_npz asked for an unsupported member: the reason, by name
    rc, so, se = run(f'data.load_npz({nbstr(p)}, list("i1", "names"))')
    report("npz_unsupported_member_named_when_asked", rc != 0 and "array 'names' cannot be loaded" in se and "<U9" in se, se[-400:])

    # hostile: a u8 beyond int64, a truncated archive, a corrupt member
    big = path("big.npz")
    np.savez(big, x=np.array([1, 2**63 + 5], dtype=np.uint64))
    rc, so, se = run(f"load_npz({nbstr(big)})")
    bad = "" if rc != 0 and "does not fit the i64" in se and "flat index 1" in se else f"[u8] {se[-300:]}; "
    raw = open(p, "rb").read()
    for cut in (len(raw) // 2, len(raw) - 30, 40):
        t = path(f"trunc{cut}.npz")
        open(t, "wb").write(raw[:cut])
        rc, so, se = run(f"load_npz({nbstr(t)})")
        if rc == 0 or "npz:" not in se or "Segmentation" in se or "AddressSanitizer" in se:
            bad += f"[truncated at {cut}] rc {rc} {se[-200:]}; "
    flip = bytearray(open(big, "rb").read())
    flip[len(flip) // 3] ^= 0xFF
    t = path("flip.npz")
    open(t, "wb").write(bytes(flip))
    rc, so, se = run(f"load_npz({nbstr(t)})")
    if rc == 0 or "npz:" not in se:
        bad += f"[corrupt] rc {rc} {se[-200:]}; "
    report("npz_hostile_files", not bad, bad)


# ------------------------------------------------------------------ JSON
def rand_json(depth=0):
    r = rng.random()
    if depth > 4 or r < 0.35:
        return rng.choice([
            lambda: rng.randrange(-2**53 + 1, 2**53),
            lambda: float(nrng.normal() * 10 ** rng.randrange(-300, 300)),
            lambda: rng.choice([True, False, None]),
            lambda: "".join(rng.choice("ab\"\\/\n\t\x01é中🙂 ") for _ in range(rng.randrange(0, 12))),
            lambda: 0.5,
        ])()
    if r < 0.65:
        return [rand_json(depth + 1) for _ in range(rng.randrange(0, 6))]
    return {"".join(rng.choice("kéy_ .中") for _ in range(rng.randrange(1, 6))) + str(i): rand_json(depth + 1) for i in range(rng.randrange(0, 6))}


def t_json():
    doc = {"root": rand_json(), "list": [rand_json() for _ in range(5)], "nul": "a\x00b"}
    src, dst = path("in.json"), path("out.json")
    with open(src, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=rng.random() < 0.5)
    dst2 = path("out2.json")
    rc, so, se = run(f"""
import json
v = load_json({nbstr(src)})
save_json({nbstr(dst)}, v)
json.write({nbstr(dst2)}, json.read({nbstr(src)}), indent=nil)
w = json_parse(json_format(v))
print(w == v and json.parse(json.format(v, indent=3)) == v)
""")
    ok = (rc == 0 and so.strip() == "true" and json.load(open(dst, encoding="utf-8")) == doc
          and json.load(open(dst2, encoding="utf-8")) == doc)
    report("json_round_trip_vs_python", ok, f"rc {rc} {so[-200:]} {se[-400:]}")
    # no temporary left behind by the atomic write
    left = [f for f in os.listdir(TMP) if "nabla-tmp" in f]
    report("json_write_atomic_no_temporaries", rc == 0 and not left, f"{left}")

    # Python's reading of duplicate keys (the last wins), a top-level scalar, indent=nil
    rc, so, se = run("""
print(json_format(json_parse('{"a": 1, "b": 2, "a": 3}')))
print(json_format(json_parse(' "x" ')))
print(json_format(list(1, 2.0, nil), indent=nil))
""")
    lines = so.strip().splitlines()
    ok = rc == 0 and json.loads(lines[0]) == json.loads('{"a": 1, "b": 2, "a": 3}') and json.loads(lines[1]) == "x" and json.loads(lines[2]) == [1, 2.0, None]
    report("json_duplicate_keys_scalars_like_python", ok, f"{so[-300:]} {se[-300:]}")

    # the integers at the bound read exactly (2^53 itself is exact; 2^53 + 1 is refused below)
    k = rng.randrange(1, 2**20)
    ints = [2**53, -2**53, 2**53 - k, -(2**53 - k)]
    p = path("bound.json")
    open(p, "w").write(json.dumps(ints))
    rc, so, se = run(f"x = load_json({nbstr(p)})\nfor v in x {{ print(int(v)) }}")
    got = [int(l) for l in so.split()] if rc == 0 else None
    report("json_integers_at_2_53_exact", got == ints, f"rc {rc} got {got} want {ints} {se[-300:]}")

    hostile = [
        ("deep_100k", b"[" * 100000 + b"]" * 100000, "maximum parsing depth"),
        ("deep_600", b"[" * 600 + b"]" * 600, "nested more than 512 levels"),
        ("bad_utf8", b'{"a": "\xff\xfe"}', "1:"),
        ("truncated", b'{"a": [1, 2', "1:11"),
        ("huge_int", b"[1, 123456789012345678901234567890]", "too big"),
        ("beyond_2_53", b'{"n": 9007199254740993}', "at $.n is beyond 2^53"),
        ("huge_real", b"[1e400]", "overflow"),
        ("garbage", b"\x00\x01\x02", "1:"),
        ("empty", b"", "1:"),
    ]
    bad = ""
    for name, content, want in hostile:
        p = path(name + ".json")
        open(p, "wb").write(content)
        # the reference: Python refuses each too (or reads it differently: 1e400 is inf, big ints exact)
        rc, so, se = run(f"load_json({nbstr(p)})", timeout=60)
        if rc == 0 or want not in se or p not in se or "Segmentation" in se:
            bad += f"[{name}] rc {rc}: {se[-250:]}; "
    # writing: NaN, a function, bad UTF-8 named by place
    for code, want in [("save_json(PATH, {a: list(1, nan)})", "NaN at $.a[1]"),
                       ("save_json(PATH, {f: print})", "at $.f cannot be written"),
                       ("save_json(PATH, {s: \"a\\xffb\"})", "the string at $.s is not valid UTF-8"),
                       ("r = {}\nr.self = r\nsave_json(PATH, r)", "nested more than 512")]:
        rc, so, se = run(code.replace("PATH", nbstr(path("w.json"))))
        if rc == 0 or want not in se:
            bad += f"[{code[:30]}] rc {rc}: {se[-250:]}; "
    report("json_hostile_input_clear_errors", not bad, bad)


def main():
    if not os.path.exists(NABLA):
        print(f"FAIL: readers{SUFFIX}: no interpreter at {NABLA}")
        sys.exit(1)
    t_csv()
    t_csv_int_range()
    t_npz()
    t_json()
    sys.exit(1 if FAILED else 0)


main()
