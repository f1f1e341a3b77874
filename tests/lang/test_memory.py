#!/usr/bin/python3
"""Running out of memory is a MemoryError, and the session goes on.

A list, string or text buffer that a program makes large is grown through
checked allocations (lang/lobject.c: nbL_reserve, nbS_alloc, nbB_check), so
when the memory is not there the operation raises MemoryError naming itself
and the size, the values the program already had are intact, and the next
line runs.  Each case runs the piped REPL under an address-space limit
(RLIMIT_AS, 512 MiB: what `ulimit -v` on a cluster does; small, so that
filling it takes seconds), grows something past
it, then checks a value it set before and the grown value's own contents.
AddressSanitizer builds reserve terabytes of shadow memory, so no limit can
be set there: those cases are skipped, not passed."""
import random
import resource
import subprocess

from lutil import NABLA, report, finish

LIMIT = 1 << 29
rng = random.Random()


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def repl(src, timeout=120):
    p = subprocess.run([NABLA], input=src, capture_output=True, text=True, preexec_fn=limited,
                       timeout=timeout, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    return p.returncode, p.stdout, p.stderr


def case(name, grow, op, after, want):
    """a = random; grow (runs out in op); then after's lines print want"""
    a = rng.randint(10**5, 10**9)
    rc, out, err = repl(f"a = {a}\n{grow}\nprint(a * 3)\n{after}\n")
    lines = out.split("\n")
    ok = (f"MemoryError: {op}: out of memory allocating " in err and "Aborted" not in err
          and err.count("Error") == 1 and lines[:1 + len(want)] == [str(a * 3)] + want)
    report(f"memory/{name}", ok, f"rc {rc} stdout {out[-300:]!r} stderr {err[-500:]!r}")


if "asan" in NABLA:
    print("SKIP: memory: an AddressSanitizer build cannot run under an address-space limit")
    finish()

k = rng.randint(3, 9)
# push until the items' array cannot double (nor grow by a quarter): the list
# keeps every item it took, in order
case("push", f"x = list()\nfor i in 0..100000000000 {{ push(x, i * {k}) }}", "push",
     f"n = len(x)\nprint(n > 1000000, x[n - 1] == (n - 1) * {k}, x[n // 2] == (n // 2) * {k})", ["true true true"])
c = rng.choice("abcdefgh")
case("string-add", f's = "{c}{c}"\nt = s\nfor i in 0..64 {{ t = t + t }}', "string +",
     f'print(len(t) > 1000000, t[len(t) - 1] == "{c}", s)', [f"true true {c}{c}"])
case("interpolation", f's = "{c}"\nfor i in 0..64 {{ s = "{{s}}{{s}}" }}', "string interpolation",
     f'print(len(s) > 1000000, s[0] == "{c}")', ["true true"])
case("list-add", f"x = list({k}, 1)\nfor i in 0..64 {{ x = x + x }}", "list +",
     f"print(len(x) > 1000000, x[len(x) - 2] == {k}, x[len(x) - 1])", ["true true 1"])
case("list-of-range", "x = list(range(0, 90000000))", "list", "print(len(list(a, a)))", ["2"])
# a text of ~1 GB (twice the limit) from a list that holds one 1024-byte string a million times
# (16 MB): the buffer that builds it cannot grow
n = rng.randint(900, 1000) * 1000
for fn in ("str", "print", "serialize"):
    case(f"{fn}-of-a-long-list", f's = "{c}"\nfor i in 0..10 {{ s = s + s }}\nx = list()\nfor i in 0..{n} {{ push(x, s) }}\ny = {fn}(x)', fn,
         f'print(len(x) == {n}, x[{n} - 1] == s, len(s))', ["true true 1024"])


def small_case(name, grow, after, want, errors=1):
    """small objects (records, short strings, closures) piled up until a small
    allocation fails: one MemoryError, the session goes on, values intact"""
    a = rng.randint(10**5, 10**9)
    rc, out, err = repl(f"a = {a}\n{grow}\nprint(a * 3)\n{after}\n")
    lines = out.split("\n")
    ok = ("MemoryError: " in err and "Aborted" not in err and "nabla: out of memory" not in err
          and err.count("MemoryError") == errors == err.count("Error") and lines[:1 + len(want)] == [str(a * 3)] + want)
    report(f"memory/{name}", ok, f"rc {rc} stdout {out[-300:]!r} stderr {err[-500:]!r}")


# a chain of records (no list to grow: only small allocations), then strings,
# then closures; the chain's head is the last item made
small_case("records", "head = nil\ni = 0\nwhile true { head = {v: i, next: head}; i = i + 1 }",
           f"print(head.v == i - 1, head.next.v == i - 2)\nhead = nil\nprint({k} * 2)", ["true true", str(k * 2)])
small_case("strings", "head = nil\ni = 0\nwhile true { head = {s: \"item {i}\", next: head}; i = i + 1 }",
           'print(head.s == "item {i - 1}", head.next.s == "item {i - 2}")\nhead = nil', ["true true"])
small_case("closures", "head = nil\ni = 0\nwhile true { j = i; head = {f: fn() j * 2, next: head}; i = i + 1 }",
           "print(head.f() == 2 * (i - 1))\nhead = nil", ["true"])
# twice in one session: the reserve is taken again for the next line
small_case("twice", "head = nil\nwhile true { head = {next: head} }\nhead = nil\nh2 = nil\nwhile true { h2 = {next: h2} }",
           "h2 = nil\nprint(1)", ["1"], errors=2)
# a tensor checkpoint serialized whole (issue 33: it aborted the process)
case("serialize-tensors", "t = randn(6000, 6000)\ns = serialize(list(t, t, t))", "serialize",
     "print(t.shape, t[5, 7] == t[5, 7])", ["[6000, 6000] tensor(true)"])
case("upper", f's = "{c}"\nfor i in 0..27 {{ s = s + s }}\nkeep = list()\nfor i in 0..8 {{ push(keep, upper(s)) }}', "upper",
     f'print(len(s) == 2 ** 27, s[2 ** 27 - 1] == "{c}", len(keep) > 0 and len(keep) < 8, keep[0][0] == upper("{c}"))', ["true true true true"])
finish()
