#!/usr/bin/python3
"""The bytecode VM (issue 19; the only engine) against Python.

- random arithmetic programs (functions, locals, globals, while/for loops,
  closures, records and lists; fresh random constants every run) print the
  value Python computes for the same program;
- a step limit (NABLA_STEP_LIMIT) stops tight loops and unbounded recursion
  in compiled code with the uncatchable StepLimit error, located at the loop
  or call;
- literals with many items (past one instruction's registers), calls with
  hundreds of arguments, and code past the bytecode's limits (a SyntaxError
  before anything runs); NABLA_ENGINE=walker is refused;
- compiled recursion runs 9000 deep (the VM's frame stack, not C's) and
  ends past the depth limit with a catchable RecursionError;
- `nabla --dis` prints the compiled bytecode of a file's functions;
- a comparison that a jump tests is one fused instruction: every comparison
  operator, fused and not, on random numbers, NaN, strings and an operand of
  the wrong type (its TypeError at the comparison);
- a nabla->nabla call allocates nothing on the heap (positional, with a
  default filled in, with keywords, recursive): the count of malloc/calloc/
  realloc calls (an LD_PRELOAD counter built here with cc) is the same for
  10 calls and for 1e5.

$NABLA is the interpreter (default build/nabla).  Prints PASS/FAIL lines;
exits 1 when a test failed.
"""
import os, random, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lutil import report, run, finish  # noqa: E402


def rand_expr(rng, names, depth):
    """an integer expression over names, as (nabla text, python text)"""
    if depth == 0 or rng.random() < 0.3:
        if rng.random() < 0.5:
            v = rng.randint(-50, 50)
            return (f"({v})", f"({v})")
        n = rng.choice(names)
        return (n, n)
    a, pa = rand_expr(rng, names, depth - 1)
    b, pb = rand_expr(rng, names, depth - 1)
    op = rng.choice(["+", "-", "*", "//", "%", "<", "=="])
    if op in ("//", "%"):
        d = rng.randint(1, 9) * rng.choice([-1, 1])
        return (f"({a} {op} {d})", f"({pa} {op} {d})")
    if op in ("<", "=="):   # a comparison picks one of two numbers
        return (f"(if {a} {op} {b} {{ {a} }} else {{ {b} }})", f"(({pa}) if ({pa}) {op} ({pb}) else ({pb}))")
    return (f"({a} {op} {b})", f"({pa} {op} {pb})")


def random_program(rng):
    """Nabla's ints are exact up to 2^53 (docs/language.md, Numbers), Python's
    without bound, so every intermediate must stay below 2^53: e1's eight
    leaves are at most 78 in size (78^8 ~ 1.4e15), e2's four at most ~3050
    (f's and g's results are taken mod 3001).  Larger moduli let e2 reach
    1e17 and the two languages part on seeds like 509140420."""
    e1, p1 = rand_expr(rng, ["a", "b", "i"], 3)
    e2, p2 = rand_expr(rng, ["x", "acc"], 2)
    scale = rng.choice([0.5, 0.25, 2.0, 1.5])
    n = rng.randint(5, 40)
    k = rng.randint(-20, 20)
    src = f"""
fn f(a, b, i) {{
  t = {e1}
  t % 3001
}}
fn make(k) {{
  acc = k
  fn(x) {{ acc = ({e2}) % 3001; acc }}
}}
g = make({k})
s = 0
fl = 0.0
r = {{count: 0, items: []}}
for i in 0..{n} {{
  v = f(i * 2, {k} - i, i)
  s = s + g(v)
  fl = fl + v * {scale}
  r.count += 1
  push(r.items, v)
}}
j = 0
while j < len(r.items) {{ if r.items[j] > 0 {{ s += 1 }}; j += 1 }}
print(s, fl, r.count)
"""
    def f(a, b, i):
        t = eval(p1)
        return t % 3001
    acc = [k]
    def g(x):
        a = acc[0]
        acc[0] = eval(p2, {}, {"x": x, "acc": a}) % 3001
        return acc[0]
    s, fl, items = 0, 0.0, []
    for i in range(n):
        v = f(i * 2, k - i, i)
        s = s + g(v)
        fl = fl + v * scale
        items.append(v)
    s += sum(1 for v in items if v > 0)
    return src, (s, fl, n)


def check_random(count=40):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    bad = []
    for t in range(count):
        src, (s, fl, n) = random_program(rng)
        rc, out, err = run(src)
        parts = out.split()
        ok = rc == 0 and len(parts) == 3
        if ok:
            ok = parts[0] == str(s) and "." not in parts[0] and abs(float(parts[1]) - fl) <= 1e-9 * max(1.0, abs(fl)) and parts[2] == str(n)
        if not ok:
            bad.append(f"program {t}: got {out.strip()!r} {err.strip()[:200]!r}, want {s} {fl} {n}")
    report(f"vm/random_programs (seed {seed}, {count} programs)", not bad, "; ".join(bad[:3]))


STEP_CASES = {
    "while": "fn spin() { i = 0\n  while true { i += 1 } }\nspin()\n",
    "for_range": "fn spin() { s = 0\n  for i in 0..1000000000 { s += i } }\nspin()\n",
    "for_list": "fn spin() { xs = [1, \"a\"]\n  while true { for x in xs { x } } }\nspin()\n",
    "recursion": "fn down(n) = if n < 0 { 0 } else { down(n) }\ndown(1)\n",
    "try_loop": "fn spin() { while true { try { error(\"x\") } catch e { e } } }\nspin()\n",
    "toplevel": "k = 0\nwhile true { k = k + 1 }\n",
}


def check_step_limit():
    for name, src in STEP_CASES.items():
        rc, out, err = run(src, None, {"NABLA_STEP_LIMIT": "1000"})
        ok = rc == 1 and "StepLimit: step limit exceeded" in err and "PROG:" in err
        report(f"vm/step_limit_{name}", ok, f"rc {rc}, stderr {err[:300]!r}")


def check_deep_recursion():
    """compiled calls use the VM's frame stack, not the C stack: 190000 nested
    calls work, past max depth (200000) a RecursionError that try catches"""
    n = random.randint(150000, 199000)
    src = f"""fn depth(n) = if n == 0 {{ 0 }} else {{ 1 + depth(n - 1) }}
print(depth({n}))
fn forever(n) = forever(n + 1)
e = try {{ forever(0) }} catch e {{ e }}
print(e.name, e.message)
print(depth(10))
"""
    rc, out, err = run(src)
    want = f"{n}\nRecursionError stack overflow (calls nested more than 200000 deep)\n10\n"
    report("vm/deep_recursion", rc == 0 and out == want, f"rc {rc}, out {out!r}, want {want!r}, err {err[:300]!r}")


def check_dis():
    rc, out, err = run("fn fib(n) { if n < 2 { n } else { fib(n - 1) + fib(n - 2) } }\nprint(fib(10))\n", args=["--dis"])
    ok = rc == 0 and "-- fn fib" in out and "CALL" in out and "RET" in out and "55" not in out
    report("vm/dis", ok, f"rc {rc}: {out[:300]!r} {err[:200]!r}")


def check_fused_compares():
    """a comparison tested by the next instruction's jump is one fused
    instruction (LTKJ, LTJ, ...; lcode.c's fuse_compares): against Python on
    fresh random numbers (ints, floats, NaN), a register and a constant
    operand, both branches, values that are not numbers (the plain slow
    path: == of strings, a TypeError located at the comparison), and the
    same comparison used as a value (not fused)"""
    rng = random.Random()
    ops = ["==", "!=", "<", "<=", ">", ">="]
    vals = [rng.randint(-5, 5) for _ in range(6)] + [round(rng.uniform(-5, 5), 3) for _ in range(4)] + ["nan"]
    k = rng.randint(-3, 3)
    fns, calls, want = [], [], []
    for j, op in enumerate(ops):
        fns.append(f"fn r{j}(a, b) {{ if a {op} b {{ 1 }} else {{ 0 }} }}")
        fns.append(f"fn k{j}(a) {{ if a {op} {k} {{ 1 }} else {{ 0 }} }}")
        fns.append(f"fn v{j}(a, b) {{ x = a {op} b\n  if x {{ 1 }} else {{ 0 }} }}")
        fns.append(f"fn w{j}(a) {{ i = 0\n  while i {op} a {{ i += 1\n if i > 20 {{ break }} }}\n  i }}")
    pv = lambda v: float("nan") if v == "nan" else v
    nv = lambda v: "nan" if v == "nan" else repr(v)
    for _ in range(40):
        a, b = rng.choice(vals), rng.choice(vals)
        j = rng.randrange(len(ops))
        op = ops[j]
        f = {"==": lambda x, y: x == y, "!=": lambda x, y: x != y, "<": lambda x, y: x < y,
             "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}[op]
        calls.append(f"print(r{j}({nv(a)}, {nv(b)}), k{j}({nv(a)}), v{j}({nv(a)}, {nv(b)}), w{j}({nv(b)}))")
        i = 0
        while f(i, pv(b)):
            i += 1
            if i > 20:
                break
        want.append(f"{int(f(pv(a), pv(b)))} {int(f(pv(a), k))} {int(f(pv(a), pv(b)))} {i}")
    s1, s2 = rng.choice(["ab", "x", ""]), rng.choice(["ab", "x", ""])
    calls.append(f'print(r0("{s1}", "{s2}"), r1("{s1}", "{s2}"), k0("{s1}"), r0("{s1}", 1))')
    want.append(f"{int(s1 == s2)} {int(s1 != s2)} 0 0")
    src = "nan = 0.0 / 0.0\n" + "\n".join(fns) + "\n" + "\n".join(calls) + "\n"
    rc, out, err = run(src)
    got = out.strip().split("\n")
    bad = [f"{c!r}: got {g!r}, want {w!r}" for c, g, w in zip(calls, got, want) if g != w]
    report("vm/fused_compares", rc == 0 and len(got) == len(want) and not bad, f"rc {rc}, {bad[:3]}, err {err[:300]!r}")
    rc, out, err = run(src, args=["--dis"])
    ops_seen = set(re.findall(r"^\s+\d+\s+\[\s*\d+\]\s+(\w+)", out, flags=re.M))
    report("vm/fused_compares_dis", rc == 0 and {"LTKJ", "LTJ", "LT", "JF"} <= ops_seen,
           f"rc {rc}: {out[:300]!r}")
    # an operand that is not a number: the TypeError points at the comparison
    op = rng.choice(["<", "<=", ">", ">="])
    line = f"fn bad(a, b) {{ if a {op} b {{ 1 }} else {{ 0 }} }}"
    kline = f"fn badk(a) {{ if a {op} {k} {{ 1 }} else {{ 0 }} }}"
    for name, src, col in [("register", line + '\nbad("s", 1)\n', line.index("a " + op) + 1),
                           ("constant", kline + '\nbadk("s")\n', kline.index("a " + op) + 1)]:
        rc, out, err = run(src)
        ok = rc == 1 and f"PROG:1:{col}: TypeError: unsupported operand types for {op}: string and number" in err
        report(f"vm/fused_compare_error_{name}", ok, f"rc {rc}, stderr {err[:300]!r}")


def check_large():
    """literals and calls with more items than an instruction's registers
    hold, against Python on fresh random values"""
    rng = random.Random()
    n = rng.randint(65, 400)
    xs = [rng.randint(-10**6, 10**6) for _ in range(n)]
    names = [f"k{i}" for i in range(n)]
    src = f"xs = [{', '.join(map(str, xs))}]\n"
    src += f"print(sum(xs).item(), len(xs), xs[{n - 1}].item())\n"
    src += f"r = {{{', '.join(f'{k}: {v}' for k, v in zip(names, xs))}}}\n"
    src += f"print(len(keys(r)), r.k{n - 1}, r.k0)\n"
    src += f"s = \"{''.join('{xs[%d].item()},' % i for i in range(n))}\"\n"
    src += "print(len(s))\n"
    src += f"fn count(*a) = len(a)\nfn add(*a) {{ t = 0; for v in a {{ t += v }}; t }}\n"
    src += f"print(count({', '.join(map(str, xs))}), add({', '.join(map(str, xs))}))\n"
    src += f"ss = [\"{xs[0]}\", {', '.join(map(str, xs[1:]))}]\nprint(ss[0], ss[{n - 1}], len(ss))\n"
    rc, out, err = run(src)
    s = "".join(f"{v}," for v in xs)
    want = f"{sum(xs)} {n} {xs[-1]}\n{n} {xs[-1]} {xs[0]}\n{len(s)}\n{n} {sum(xs)}\n{xs[0]} {xs[-1]} {n}\n"
    report(f"vm/large_literals ({n} items)", rc == 0 and out == want, f"rc {rc}, out {out[:300]!r}, want {want[:300]!r}, err {err[:300]!r}")


def check_call_sizes():
    """every call size around the register limit (250) and the operand
    limit (254), at the top level and inside a function whose locals already
    hold registers, against Python's count and sum"""
    rng = random.Random()
    src = "fn count(*a) = len(a)\nfn add(*a) { t = 0; for v in a { t += v }; t }\n"
    want = ""
    for n in range(236, 262):
        xs = [rng.randint(-10**6, 10**6) for _ in range(n)]
        args = ", ".join(map(str, xs))
        src += f"print(count({args}), add({args}))\n"
        src += f"fn f{n}() {{ a = 1; b = 2; c = add({args}); c - a - b }}\nprint(f{n}())\n"
        want += f"{n} {sum(xs)}\n{sum(xs) - 3}\n"
    rc, out, err = run(src)
    report("vm/call_sizes_236_to_261", rc == 0 and out == want, f"rc {rc}, err {err[:300]!r}")


def check_limits():
    """code past a limit of the bytecode is a SyntaxError reported before
    any of the chunk runs; x[i1..i9] is the run-time IndexError it was"""
    body = "\n".join(f"  v{i} = {i}" for i in range(300))
    rc, out, err = run(f"print(\"before\")\nfn big() {{\n{body}\n  v0\n}}\nprint(big())\n")
    ok = rc == 1 and out == "" and "SyntaxError: too large to compile: more than 250 local variables" in err and "PROG:2:" in err
    report("vm/limit_locals", ok, f"rc {rc}, out {out!r}, err {err[:300]!r}")
    rc, out, err = run("x = [1, 2]\nprint(try { x[0, 0, 0, 0, 0, 0, 0, 0, 0] } catch e { e.message })\n")
    report("vm/nine_indices", rc == 0 and out == "too many indices (9)\n", f"rc {rc}, out {out!r}, err {err[:300]!r}")
    rc, out, err = run("print(1)\n", engine="walker")
    report("vm/engine_walker_refused", rc == 2 and out == "" and "NABLA_ENGINE=walker" in err, f"rc {rc}, out {out!r}, err {err[:300]!r}")


SHIM = r"""
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
extern void *__libc_malloc(size_t), *__libc_calloc(size_t, size_t), *__libc_realloc(void *, size_t);
static unsigned long count;
void *malloc(size_t n) { __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED); return __libc_realloc(p, n); }
__attribute__((destructor)) static void report(void) {
  const char *f = getenv("ALLOC_COUNT_FILE");
  int fd = f ? open(f, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
  if (fd < 0) return;
  char b[32]; int k = snprintf(b, sizeof b, "%lu\n", count);
  if (write(fd, b, (size_t)k) < 0) {}
  close(fd);
}
"""
ALLOC_PROG = """fn add(a, b) = a + b
fn dflt(a, b = 3) = a - b
fn kw(x, y) = x * 2 + y
fn down(n) = if n == 0 {{ 0 }} else {{ 1 + down(n - 1) }}
fn g(n) {{
  s = 0
  for i in 0..n {{ s = add(s, i); s = dflt(s); s = kw(y = 1, x = s) % 1000003; s += down(3) }}
  s
}}
print(g({n}))
"""


def check_alloc():
    if os.environ.get("NABLA_ASAN") == "1":   # ASan's allocator must come first: no preloaded counter
        print("SKIP: vm/calls_allocate_nothing: under ASan")
        return
    tmp = tempfile.mkdtemp()
    so = os.path.join(tmp, "count.so")
    with open(os.path.join(tmp, "count.c"), "w") as f:
        f.write(SHIM)
    cc = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, os.path.join(tmp, "count.c")], capture_output=True, text=True)
    if cc.returncode:
        print(f"SKIP: vm/calls_allocate_nothing: cannot build the counting allocator: {cc.stderr[:200]}")
        return

    def count(src):
        cf = os.path.join(tmp, "n")
        rc, out, err = run(src, None, {"LD_PRELOAD": so, "ALLOC_COUNT_FILE": cf})
        n = int(open(cf).read()) if os.path.exists(cf) else -1
        return rc, out, err, n

    def want(n):
        s = 0
        for i in range(n):
            s = s + i
            s = s - 3
            s = (s * 2 + 1) % 1000003
            s += 3
        return s

    big = random.randint(50000, 150000)
    r1, o1, e1, few = count(ALLOC_PROG.format(n=10))
    r2, o2, e2, many = count(ALLOC_PROG.format(n=big))
    ok = r1 == 0 and r2 == 0 and o1 == f"{want(10)}\n" and o2 == f"{want(big)}\n" and few > 0 and few == many
    report(f"vm/calls_allocate_nothing ({big} iterations of 6 calls)", ok, f"allocations {few} for 10, {many} for {big}; out {o1!r} {o2!r}; err {e1[:200]!r} {e2[:200]!r}")
    # the counter counts: a closure per iteration does allocate
    r3, o3, e3, clos = count(f"fn mk(a) = fn() a\nfn g(n) {{ s = 0; for i in 0..n {{ s = mk(i)() }}; s }}\nprint(g({big}))\n")
    report("vm/alloc_counter_counts", r3 == 0 and clos >= few + big, f"{clos} allocations for {big} closures (baseline {few}); err {e3[:200]!r}")


check_random()
check_fused_compares()
check_large()
check_call_sizes()
check_alloc()
check_limits()
check_step_limit()
check_deep_recursion()
check_dis()
finish()
