#!/usr/bin/python3
"""NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
Text and bytes files vs Python on fresh random content: read_text,
write_text (atomic, through a symlink), read_bytes, write_bytes, lines (lazy,
64 KB refills: lines across refill boundaries, CRLF, a last line without a
newline, empty lines and files), encode/decode; the errors.
"""
import atexit
import os
import random
import shutil
import subprocess
import sys
import tempfile

NABLA = os.environ.get("NABLA") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "nabla")
TMP = tempfile.mkdtemp(prefix="nabla-files-")
atexit.register(shutil.rmtree, TMP, True)
FAILED = False
rng = random.Random(int.from_bytes(os.urandom(4), "little"))
ALPHABET = "abcdefghijklmnopqrstuvwxyz ,.;:!?0123456789éüñ€中文🙂\t"


def report(name, ok, why=""):
    global FAILED
    FAILED |= not ok
    print(f"{'PASS' if ok else 'FAIL'}: {name}" + ("" if ok else f": {why}"[:1500]), flush=True)


def run(src):
    p = os.path.join(TMP, "prog.nbl")
    with open(p, "w") as f:
        f.write(src)
    r = subprocess.run([NABLA, p], capture_output=True, timeout=120)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def rand_text(nlines, maxlen):
    return [("".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, maxlen)))) for _ in range(nlines)]


def lines_case(name, content, expected_lines):
    path = os.path.join(TMP, name + ".txt")
    with open(path, "wb") as f:
        f.write(content)
    out = os.path.join(TMP, name + ".out")
    rc, so, se = run(f'n = 0\nacc = list()\nfor l in lines("{path}") {{ push(acc, l) }}\nwrite_text("{out}", join(acc, "\\u{{1}}"))\nprint(len(acc))\n')
    if rc != 0:
        report(f"lines_{name}", False, f"rc {rc}: {se[-400:]}")
        return
    got = open(out, encoding="utf-8").read()
    got_lines = got.split("\x01") if int(so.strip()) else []
    report(f"lines_{name}", got_lines == expected_lines,
           f"{len(got_lines)} lines vs {len(expected_lines)}; first diff at {next((i for i, (a, b) in enumerate(zip(got_lines, expected_lines)) if a != b), None)}")


def main():
    # text round trip through write_text/read_text, compared with Python
    text = "\n".join(rand_text(200, 80))
    src = os.path.join(TMP, "src.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write(text)
    dst = os.path.join(TMP, "dst.txt")
    rc, so, se = run(f's = read_text("{src}")\nwrite_text("{dst}", s)\nprint(len(encode(s)))\n')
    ok = rc == 0 and open(dst, encoding="utf-8").read() == text and int(so) == len(text.encode())
    report("text_roundtrip", ok, f"rc {rc} {se[-300:]}")

    # lines: many short and long lines across the 64 KB refills
    body = rand_text(3000, 120) + ["x" * 70000] + rand_text(100, 10)
    lines_case("boundaries", "\n".join(body).encode() + b"\n", body)
    crlf = rand_text(49, 30) + ["end"]   # a last line without a newline (an empty one would be no line)
    lines_case("crlf_no_final_newline", "\r\n".join(crlf).encode(), crlf)
    lines_case("empty_file", b"", [])
    lines_case("empty_lines", b"\n\na\n\n", ["", "", "a", ""])

    # bytes: any content, through read_bytes / write_bytes / encode / decode
    blob = bytes(rng.randrange(256) for _ in range(100000))
    bsrc = os.path.join(TMP, "blob.bin")
    open(bsrc, "wb").write(blob)
    bdst = os.path.join(TMP, "blob2.bin")
    rc, so, se = run(f'b = read_bytes("{bsrc}")\nprint(b.dtype, b.shape, sum(b.to("i64")).item())\nwrite_bytes("{bdst}", b[10:20])\n')
    ok = rc == 0 and so.split() == ["u8", "[100000]", str(sum(blob))] and open(bdst, "rb").read() == blob[10:20]
    report("bytes_roundtrip", ok, f"rc {rc} {so!r} {se[-300:]}")
    s = "".join(rng.choice(ALPHABET) for _ in range(300))
    rc, so, se = run(f'e = encode("{s}")\nprint(e.tolist())\nprint(decode(e) == "{s}")\n')
    want = list(s.encode())
    ok = rc == 0 and so.splitlines() == [str(want).replace(" ", "").replace(",", ", ").replace(", ", ", "), "true"] if rc == 0 else False
    got_list = so.splitlines()[0] if rc == 0 else ""
    ok = rc == 0 and got_list.replace(" ", "") == str(want).replace(" ", "") and so.splitlines()[1] == "true"
    report("encode_decode", ok, f"rc {rc} {so[:200]!r} {se[-300:]}")

    # write_text through a symlink updates its target, atomically
    target = os.path.join(TMP, "target.txt")
    open(target, "w").write("old")
    link = os.path.join(TMP, "link.txt")
    os.symlink(target, link)
    rc, so, se = run(f'write_text("{link}", "new")\n')
    report("write_through_symlink", rc == 0 and os.path.islink(link) and open(target).read() == "new", f"rc {rc} {se[-300:]}")

    # errors
    bad = os.path.join(TMP, "bad.txt")
    open(bad, "wb").write(b"ok\n\xff\xfe\n")
    rc, so, se = run(f'''print(try {{ read_text("{bad}") }} catch e {{ e.message }})
for l in lines("{bad}") {{ }}
''')
    ok = "not UTF-8 text" in so and "offset 3" in so and rc != 0 and "not UTF-8" in se
    report("errors_utf8", ok, f"rc {rc} {so!r} {se[-300:]}")
    rc, so, se = run(f'''print(try {{ read_text("{TMP}/missing") }} catch e {{ e.message }})
print(try {{ lines("{TMP}/missing") }} catch e {{ e.message }})
print(try {{ write_text("{TMP}/x.txt", 5) }} catch e {{ e.message }})
print(try {{ write_bytes("{TMP}/x.bin", ones(3)) }} catch e {{ e.message }})
print(try {{ read_text("{TMP}") }} catch e {{ e.message }})
print(try {{ decode(ones(2, 2, dtype="u8")) }} catch e {{ e.message }})
''')
    ls = so.splitlines()
    ok = (rc == 0 and len(ls) == 6 and "No such file" in ls[0] and "No such file" in ls[1] and "expected a string" in ls[2]
          and "u8 tensor" in ls[3] and "f32" in ls[3] and "not a regular file" in ls[4] and "1-D" in ls[5])
    report("errors_clear", ok, f"rc {rc} {so!r} {se[-300:]}")


main()
sys.exit(1 if FAILED else 0)
