#!/usr/bin/python3
"""The runtime against hostile and broken input (issue 12, part B):

- memory held in reference cycles is reclaimed during a long run (collection
  by allocation pressure, tensor bytes counted): peak RSS of a loop making
  self-referencing records that hold 4 MB tensors stays a small multiple of
  the same loop without the cycle;
- sizes that input controls are checked before allocating (strings, lists,
  ranges, format widths): a clear error naming the operation and the size,
  quickly and without gigabytes of memory;
- data nested a million deep is printed, compared, serialized and freed
  without recursion on the depth (no crash, no silent wrong answer).

$NABLA is the interpreter (default build/nabla); also run against the ASan
build (NABLA_ASAN=1), where RSS is not comparable and that check is skipped.
Prints PASS/FAIL/SKIP lines; exits 1 when a test failed.
"""
import os, resource, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.path.abspath(os.environ.get("NABLA", os.path.join(ROOT, "build", "nabla")))
ASAN = os.environ.get("NABLA_ASAN") == "1"
failed = 0


def report(name, err, skip=None):
    global failed
    if skip:
        print("SKIP: hardening/%s: %s" % (name, skip))
    elif err:
        failed += 1
        print("FAIL: hardening/%s: %s" % (name, str(err).replace("\n", " ")[:500]))
    else:
        print("PASS: hardening/%s" % name)
    sys.stdout.flush()


def run(src, timeout=120):
    """runs src as a script; returns (rc, stdout, stderr, seconds, peak RSS in KB)"""
    with tempfile.NamedTemporaryFile("w", suffix=".nbl", delete=False) as f:
        f.write(src)
        path = f.name
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.time()
        p = subprocess.Popen([NABLA, path], stdout=fo, stderr=fe, env=dict(os.environ, OMP_NUM_THREADS="1"))
        try:
            while True:   # os.wait4, not Popen.wait: it returns the child's own peak RSS
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.time() - t0 > timeout:
                    p.kill()
                    pid, status, ru = os.wait4(p.pid, 0)
                    raise AssertionError("timed out after %d s" % timeout)
                time.sleep(0.02)
        finally:
            p.returncode = 0   # reaped above
            os.unlink(path)
        took = time.time() - t0
        fo.seek(0)
        fe.seek(0)
        rc = os.waitstatus_to_exitcode(status)
        return rc, fo.read().decode(errors="replace"), fe.read().decode(errors="replace"), took, ru.ru_maxrss


def case(name):
    def deco(fn):
        try:
            r = fn()
            if isinstance(r, tuple):
                report(name, None, skip=r[1])
            else:
                report(name, r)
        except Exception as e:  # noqa: BLE001 - any failure is reported
            report(name, "%s: %s" % (type(e).__name__, e))
        return fn
    return deco


# ------------------------------------------------------------------ cycles
CYCLE_LOOP = """
for i in 0..400 {
  r = {w: zeros(1000000)}   # 4 MB of f32
  %s
}
print("done")
"""


@case("cycles-reclaimed-during-a-run")
def _():
    if ASAN:
        return ("skip", "peak RSS under ASan (quarantine, shadow memory) is not comparable")
    rc, out, err, _, acyclic = run(CYCLE_LOOP % "r.n = 1")
    assert rc == 0 and "done" in out, (rc, out, err)
    rc, out, err, _, cyclic = run(CYCLE_LOOP % "r.self = r   # a cycle: refcounting alone never frees it")
    assert rc == 0 and "done" in out, (rc, out, err)
    # 400 x 4 MB = 1.6 GB if nothing is reclaimed before the end
    if cyclic > 4 * acyclic or cyclic > acyclic + 200 * 1024:
        return "peak RSS %d MB with the cycle vs %d MB without" % (cyclic >> 10, acyclic >> 10)
    return None


@case("cycles-closures-in-a-function-loop")
def _():
    # local recursive functions (cell <-> closure cycles) capturing a tensor, made in a
    # called function: collection runs mid-call with live frames, locals and arguments
    src = """
fn make(t) {
  fn again(n) = if n <= 0 { t[0].item() } else { again(n - 1) }
  return again
}
fn work(k) {
  total = 0
  keep = ["a", "b", "c"]
  for i in 0..k {
    f = make(ones(250000) * i)   # 1 MB each; f's cell holds f
    total += f(3)
    keep.push(i)
  }
  print(total, len(keep))
}
work(600)
"""
    rc, out, err, _, rss = run(src)
    want = sum(range(600))
    if rc != 0 or out.split() != [str(want) + ".0", "603"]:
        return "wrong result: rc %d out %r err %r (want %d 603)" % (rc, out, err, want)
    if not ASAN and rss > 400 * 1024:
        return "peak RSS %d MB for 600 MB of cyclic garbage made 1 MB at a time" % (rss >> 10)
    return None



# ------------------------------------------------------------------ sizes
def expect_errors(src, wants, timeout=60):
    """src prints one line per case: the error (name: message) or the value"""
    rc, out, err, took, rss = run(src, timeout=timeout)
    lines = out.splitlines()
    if len(lines) != len(wants):
        return "got %d lines, want %d: rc %d out %r err %r" % (len(lines), len(wants), rc, out[-800:], err[-800:])
    for got, want in zip(lines, wants):
        if not all(w in got for w in want):
            return "got %r, want it to contain %r" % (got, want)
    return None


TRY = 'print(try { %s } catch e { e.name + ": " + e.message })\n'


@case("format-width-and-precision-bounded")
def _():
    import random
    x = random.uniform(-1e300, 1e300)
    prec = random.randint(60, 200)
    src = (TRY % 'fmt(1, ".2147483647f")' + TRY % 'fmt(1, "2147483647.2f")' + TRY % 'fmt(1, "1001d")'
           + "print(fmt(%r, \".%df\"))\n" % (x, prec) + TRY % 'fmt(2, "1000.1000f")')
    t0 = time.time()
    r = expect_errors(src, [("ValueError", "fmt", "precision 2147483647", "at most 1000"),
                            ("ValueError", "fmt", "width 2147483647"),
                            ("ValueError", "fmt", "width 1001")])
    if r and "got 5 lines" not in r:
        return r
    rc, out, err, took, rss = run(src)
    lines = out.splitlines()
    # a long exact result is not cut (it was, silently, at 127 bytes)
    if lines[3] != "%.*f" % (prec, x):
        return "fmt(%r, .%df) = %r, want %r" % (x, prec, lines[3], "%.*f" % (prec, x))
    if lines[4] != "%1000.1000f" % 2.0:
        return "fmt(2, 1000.1000f) gave %d bytes" % len(lines[4])
    if took > 10 or rss > 200 * 1024:
        return "took %.1f s and %d MB" % (took, rss >> 10)
    return None


@case("strings-past-the-limit-are-errors")
def _():
    if ASAN:
        return ("skip", "needs 1.5 GB of strings; not under ASan")
    # a 1 GiB string; each step below would make 2 GiB (or more), past the
    # 2^31 - 1 byte limit: an error naming the operation and the size, before
    # allocating (was: a 2 GiB string, or at 4 GiB a length that wrapped to 0)
    src = ('s = "ab"\nfor i in 0..29 { s = s + s }\nprint(len(s))\n'
           + TRY % "len(s + s)" + TRY % 'len("{s}{s}")' + TRY % 'len(join(list(s, s), ""))'
           + TRY % 'len(replace(s, "a", "aaa"))' + TRY % "len(list(s))" + TRY % 'len(split(s, "b"))'
           + 'print(len(s + "xyz"))\n')
    return expect_errors(src, [(str(2 ** 30),), ("ValueError", "string +", "2147483648 bytes"),
                               ("ValueError", "string interpolation"), ("ValueError", "join", "2147483648 bytes"),
                               ("ValueError", "replace"), ("ValueError", "list", "items"),
                               ("ValueError", "split", "items"), (str(2 ** 30 + 3),)], timeout=240)


# ------------------------------------------------------------------ depth
DEEP = """
fn deep(n, leaf) {
  v = list(leaf)
  for i in 0..n { v = list(v, i) }
  return v
}
a = deep(1000000, "x")
b = deep(1000000, "x")
"""


@case("deep-equality-is-exact")
def _():
    # equality used to give up (false) past 64 levels: silent wrong
    src = (DEEP + "print(a == b, a != b)\n" + "c = deep(1000000, \"y\")\nprint(a == c)\n"
           + "print(contains(list(1, b), a))\n"
           + "s = list(); s.push(s); s.push(s)\nt = list(); t.push(t); t.push(t)\nprint(s == s)\n"
           + TRY % "s == t" + "print(\"alive\")\n")
    return expect_errors(src, [("true false",), ("false",), ("true",), ("true",),
                               ("RecursionError", "=="), ("alive",)], timeout=120)


@case("deep-values-printed-serialized-freed")
def _():
    src = (DEEP + "t = str(a)\nprint(len(t) > 100, startswith(t, \"[[[[\"))\n"
           + TRY % "len(serialize(a))" + "a = nil\nb = nil\nprint(\"freed\")\n")
    return expect_errors(src, [("true true",), ("ValueError", "serialize", "nested more than"), ("freed",)], timeout=120)


@case("self-containing-values")
def _():
    # printing a list that holds itself twice unfolded 2^64 paths (a hang);
    # now [...] as Python; serializing says which value contains itself
    src = ("s = list(1); s.push(s); s.push(s)\nr = {a: 1}; r.me = r; r.l = list(r, s)\n"
           "print(s)\nprint(r)\nprint(repr(s) == str(s))\n"
           + TRY % "serialize(s)" + TRY % "serialize(r)" + "print(len(serialize(list(list(1), list(2)))) > 0)\n"
           # a model (pytree) holding itself: the error says so
           + "m = {w: randn(3)}; m.a = list(m, m)\nfn loss(m) = m.w.sum()\n" + TRY % "value_and_grad(loss)(m)")
    rc, out, err, took, rss = run(src, timeout=30)
    wants = [("[1, [...], [...]]",), ("{a: 1, me: {...}, l: [{...}, [1, [...], [...]]]}",), ("true",),
             ("ValueError", "serialize", "list contains itself"), ("ValueError", "serialize", "record contains itself"), ("true",),
             ("ValueError", "tree: the record contains itself")]
    lines = out.splitlines()
    if len(lines) != len(wants) or not all(all(w in g for w in want) for g, want in zip(lines, wants)):
        return "got %r %r, want %r" % (out[-600:], err[-300:], wants)
    return None


@case("deserialize-hostile-bytes")
def _():
    # tensor shapes whose strides overflow, lengths past the data, module
    # names that are paths, nesting deeper than the limit: errors, no crash
    def esc(b):
        return "".join("\\x%02x" % c for c in b)
    import struct
    with open(os.path.join(ROOT, "tests", "fuzz", "corpus_deserialize", "tensor_f32.bin"), "rb") as f:
        header = f.read()[:6]                   # "NBV1X" + the f32 dtype byte
    shape = header + bytes([3, 0]) + struct.pack("<qqq", 0, 2 ** 61, 2 ** 61)
    cases = [shape, b"NBV1M" + struct.pack("<I", 9) + b"../../etc",
             b"NBV1" + b"L\x01\x00\x00\x00" * 300 + b"N", b"NBV1S\xff\xff\xff\xff"]
    src = "".join(TRY % ('deserialize("%s")' % esc(c)) for c in cases) + 'print("alive")\n'
    return expect_errors(src, [("ValueError", "deserialize", "shape"), ("ValueError", "deserialize"),
                               ("ValueError", "deserialize", "nested more than"), ("ValueError", "deserialize", "truncated"),
                               ("alive",)])



@case("huge-slice-bounds-and-round-digits")
def _():
    # doubles past a long's range were converted to long (undefined: "abc"[1e300:]
    # gave "abc"); round(x, 400) gave nan.  Checked against Python on random values.
    import random
    text = "".join(random.choice("abcdefgh") for _ in range(random.randint(3, 12)))
    src, want = "s = \"%s\"\nl = list(s)\nt = zeros(%d)\n" % (text, len(text)), []
    for _ in range(12):
        lo, hi, st = (random.choice([1, -1]) * float(10 ** random.randint(19, 300)) if random.random() < 0.6
                      else random.randint(-15, 15) for _ in range(3))
        st = st or 1
        src += "print(s[%r:%r:%r] + \"|\" + str(len(l[%r:%r:%r])) + \"|\" + str(t[%r:%r:%r].shape[0]))\n" % ((lo, hi, st) * 3)
        n = len(list(text)[int(lo):int(hi):int(st)])
        want.append("%s|%d|%d" % (text[int(lo):int(hi):int(st)], n, n))
    for _ in range(6):
        x, d = random.uniform(-1e6, 1e6), random.choice([random.randint(309, 1000), -random.randint(309, 1000), random.randint(0, 6)])
        src += "print(round(%r, %d))\n" % (x, d)
        want.append(repr(round(x, d)).replace("-0.0", "-0.0"))
    src += TRY % "t[0.5:2]" + TRY % "t[0:4:1.5]" + TRY % "t[1e300]"
    want += ["TypeError: slice bounds and step of a tensor index must be integers"] * 2
    want.append("TensorError: index 4611686018427387904 is out of range for axis 0 with size %d" % len(text))
    rc, out, err, _, _ = run(src)
    got = out.splitlines()
    if rc != 0 or got != want:
        return "rc %d err %r\n got %r\nwant %r\nsrc %s" % (rc, err[-300:], got, want, src)
    return None


@case("error-messages-read-temporary-arguments-before-freeing")
def _():
    # a number or list argument is a temporary tensor the builtin frees on its
    # error path; masked_fill, norm, multinomial and split formatted their
    # message from it after the free (a use-after-free: ASan reports it, the
    # release build printed a stale dtype such as "got f32" or "got ?")
    import random
    k, depth, ax = random.randint(-9, 9), random.randint(3, 5), random.randint(2, 7)
    nested = "[" * depth + "1.0" + "]" * depth
    ints = "[" + ", ".join(str(random.randint(-9, 9)) for _ in range(3)) + "]"
    src = (TRY % ("norm(%d)" % k) + TRY % "norm(true)" + TRY % ("masked_fill(randn(3), %d, 0)" % k)
           + TRY % ("masked_fill(%s, [true, false, true], 0.5)" % ints) + TRY % ("multinomial(%d, 1)" % k)
           + TRY % ("multinomial(%s, 1)" % nested) + TRY % ("split(%s, 1, %d)" % (ints, ax))
           + TRY % ("split(%s, 1, %d)" % (ints, -ax)))
    return expect_errors(src, [("TypeError: norm: expected a floating-point tensor, got i64",),
                               ("TypeError: norm: expected a floating-point tensor, got bool",),
                               ("TypeError: masked_fill: the mask must be a bool tensor, got i64",),
                               ("TypeError: masked_fill: value 0.5 does not fit a i64 tensor",),
                               ("ValueError: multinomial: probs must be 1-D or 2-D, got 0 dimensions",),
                               ("ValueError: multinomial: probs must be 1-D or 2-D, got %d dimensions" % depth,),
                               ("IndexError: split: axis %d is out of range for a tensor of dimension 1" % ax,),
                               ("IndexError: split: axis %d is out of range for a tensor of dimension 1" % -ax,)])


sys.exit(1 if failed else 0)
