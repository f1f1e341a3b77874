#!/usr/bin/python3
"""Bitwise operators (& | ^ ~ << >>, their compound forms) against Python,
and the two silent-wrong fixes found with them (issue 19, wave 3).

- fresh random ints every run (negatives, small and up to 2**53, shift
  counts 0..70 and past 1000) in expressions that mix the operators with
  + - * and comparisons: Nabla prints what Python computes (precedence as
  Python's), through literals, locals, globals and compound assignment
  (`x &= y` on a local, a record field and a list item);
- the errors: a float, string or bool-with-int operand is a TypeError naming
  the kinds; a negative shift count a ValueError; an int beyond 2**63 for
  & | ^ ~ and a << past the double's range an OverflowError;
- an int zero never prints as -0 (`-x`, `0 * -1`, `-4 % 2`, `0 // -3`,
  `int(-0.5)`), while a float -0.0 keeps its sign;
- max/min of three numbers is Python's (max(1, 2, 3) == 3, not 2 with the
  3 taken as keepdims); sum/mean/argmax/var of three numbers a TypeError.

$NABLA is the interpreter (default build/nabla); the runner's sanitizer pass
(NABLA_ASAN=1) runs the same checks on the ASan build.  Prints PASS/FAIL lines;
exits 1 when a test failed.
"""
import os, random, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lutil import report, run, finish  # noqa: E402


rng = random.Random()


def rint():
    k = rng.random()
    if k < 0.4:
        return rng.randint(-300, 300)
    if k < 0.8:
        return rng.randint(-2**31, 2**31)
    return rng.randint(-2**53, 2**53)


def fits(v):   # a value Nabla's ints hold exactly
    return -2**53 <= v <= 2**53


def expr_cases(n):
    """(nabla source, python value) pairs with exact results"""
    out = []
    while len(out) < n:
        a, b, c = rint(), rint(), rint()
        s = rng.randint(0, 70)
        forms = [f"{a} & {b}", f"{a} | {b}", f"{a} ^ {b}", f"~{a}", f"{a} >> {s}",
                 f"{a % 4096} << {rng.randint(0, 40)}",
                 f"{a} & {b} | {c}", f"{a} | {b} & {c}", f"{a} ^ {b} & {c}", f"{a} | {b} ^ {c}",
                 f"{a % 1000} + {b % 1000} << 3", f"{a} & {b} == {a & b}", f"~{a} ^ {b} >> 2",
                 f"{a} >> 1100", f"-{abs(a) + 1} >> 2000", f"({a} | {b}) - {c % 100}"]
        src = rng.choice(forms)
        v = eval(src)
        if isinstance(v, bool) or fits(v):
            out.append((src, v))
    return out


def fmt(v):
    return "true" if v is True else "false" if v is False else str(v)


# ---- random expressions: literal operands
cases = expr_cases(300)
rc, out, err = run("".join(f"print({s})\n" for s, _ in cases))
got = out.split("\n")
bad = [(s, fmt(v), got[i] if i < len(got) else None) for i, (s, v) in enumerate(cases) if i >= len(got) or got[i] != fmt(v)]
report("bitwise/literals", rc == 0 and not bad, f"rc={rc} {err.strip()[:200]} first mismatches {bad[:3]}")

# ---- through variables (the VM's register paths) and compound assignment
lines, want = [], []
for i in range(100):
    a, b = rint(), rint()
    s = rng.randint(0, 60)
    lines.append(f"fn f{i}(a, b, s) {{ x = a\n x &= b\n y = a\n y |= b\n z = a\n z ^= b\n"
                 f" r = {{v: a}}\n r.v >>= s\n l = [b, \"s\"]\n l[0] ^= a\n print(x, y, z, r.v, l[0], a & b ^ a | b) }}")
    lines.append(f"f{i}({a}, {b}, {s})")
    want.append(" ".join(str(v) for v in [a & b, a | b, a ^ b, a >> s, b ^ a, (a & b) ^ a | b]))
g1, g2 = rint(), rint()
lines.append(f"G = {g1}\nG ^= {g2}\nprint(G)")
want.append(str(g1 ^ g2))
lines.append(f"H = {abs(g1) % 1000}\nH <<= 12\nprint(H)")
want.append(str((abs(g1) % 1000) << 12))
rc, out, err = run("\n".join(lines) + "\n")
got = out.split("\n")
bad = [(w, got[i] if i < len(got) else None) for i, w in enumerate(want) if i >= len(got) or got[i] != w]
report("bitwise/variables-and-compound", rc == 0 and not bad, f"rc={rc} {err.strip()[:200]} first mismatches {bad[:3]}")

# ---- bools: & | ^ of two bools is a bool (as Python)
rc, out, err = run("".join(f"print({x} {op} {y})\n" for x in ("true", "false") for y in ("true", "false") for op in "&|^"))
want = [fmt(eval(f"{x} {op} {y}")) for x in (True, False) for y in (True, False) for op in "&|^"]
report("bitwise/bools", rc == 0 and out.split("\n")[:-1] == want, f"{out!r} vs {want!r} {err[:200]}")

# ---- errors: kind and message
errs = [("1.5 & 3", "TypeError", "float and int"), ("3 | 2.0", "TypeError", "int and float"),
        ('"a" ^ 1', "TypeError", "string and int"), ("true & 1", "TypeError", "bool and int"),
        ("~2.5", "TypeError", "unary ~: float"), ("~true", "TypeError", "use 'not'"),
        (f"1 << -{rng.randint(1, 99)}", "ValueError", "negative shift count"),
        (f"{rint()} >> -1", "ValueError", "negative shift count"),
        ("1 << 1.0", "TypeError", "int and float"),
        ("2 ** 70 & 1", "OverflowError", "2**63"), ("~(2 ** 64)", "OverflowError", "2**63"),
        ("1 << 1024", "OverflowError", "too large"), ("tensor([1, 2]) & 1", "TypeError", "tensors")]
for src, kind, msg in errs:
    rc, out, err = run(f"try {{ print({src}) }} catch e {{ print(e.name, e.message) }}\nx = 1\nx &= 2.5\n")
    first = out.split("\n")[0]
    # the program's last line (x &= 2.5, uncaught) fails with the compound form's TypeError
    report(f"bitwise/error {src}", first.startswith(kind + " ") and msg in first and rc == 1
           and "TypeError: unsupported operand types for &: int and float" in err,
           f"got {first!r}, rc={rc}, stderr {err.strip()[:160]!r}")

# a shift by a big count is exact where Python's value fits a double
big = [(f"{a} << {s}", a << s) for a in (1, 3, -5, rng.randint(1, 2**20)) for s in (53, 63, 64, 65, 100, 900)]
rc, out, err = run("".join(f"print(float({s}) == {float(v)!r})\n" for s, v in big))
report("bitwise/big shifts exact", rc == 0 and out.split("\n")[:-1] == ["true"] * len(big), f"{out!r} {err[:200]}")

# ---- int negative zero
zs = ["0 * -1", "-x", "-4 % 2", "0 // -3", "int(-0.5)", "x * -7", "-(x * 3)", "round(-0.4)", "ceil(-0.5)"]
rc, out, err = run("x = 0\n" + "".join(f"print({s})\n" for s in zs) + "print(-0.0, 0.0 * -1, float(x) * -1)\n"
                   "print(1 / (0 * -1) > 0)\n")
want = ["0"] * len(zs) + ["-0.0 -0.0 -0.0", "true"]
got = out.split("\n")[:-1]
report("int-negative-zero", rc == 0 and got == want, f"{got!r} vs {want!r} {err[:300]}")

# ---- max/min of three numbers: Python's; other reductions: an error, not keepdims=3
for fn, pyf in (("max", max), ("min", min)):
    xs = [rng.choice([rng.randint(-50, 50), round(rng.uniform(-50, 50), 3)]) for _ in range(3)]
    rc, out, err = run(f"print({fn}({xs[0]}, {xs[1]}, {xs[2]}))\n")
    report(f"{fn} of three numbers", rc == 0 and out.strip() == str(pyf(*xs)), f"{xs}: {out!r} vs {pyf(*xs)} {err[:200]}")
for fn in ("sum", "mean", "argmax", "var"):
    a, b, c = rng.randint(-50, 50), rng.randint(-50, 50), rng.randint(-50, 50)
    rc, out, err = run(f"try {{ print({fn}({a}, {b}, {c})) }} catch e {{ print(e.name, e.message) }}\n")
    report(f"{fn}(a, b, c) is a TypeError", out.startswith("TypeError ") and "keepdims must be a bool" in out, f"{out!r} {err[:200]}")
a, b = rng.randint(-50, 50), rng.randint(-50, 50)
rc, out, err = run(f"print(max({a}, {b}), min({a}, {b}), sum(tensor([{a}, {b}]), 0, true))\n")
report("max/min of two numbers and keepdims=true still work", rc == 0 and out.split(" ", 2) == [str(max(a, b)), str(min(a, b)), f"tensor([{a + b}])\n"],
       f"{out!r} {err[:200]}")

finish()
