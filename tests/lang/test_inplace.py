"""Locals read and updated in place by the VM: `x op= v` on a local is one
UPD on the variable itself (numbers inline), and `xs[i]` / `xs[i] = v` on a
local list read in place are GETIL/SETIL (lcode.c).  Values are checked
against Python on fresh random inputs; the errors of unassigned variables and
bad indices must name the same variable, in the same order, as before."""
import random

from lutil import run, report, finish

rng = random.Random()


def case(name, src, want):
    rc, out, err = run(src)
    got = out.splitlines()
    report(name, rc == 0 and got == want, f"rc {rc} err {err.strip()[-300:]!r} got {got[:6]!r} want {want[:6]!r}")


def case_err(name, src, want_out, want_err):
    rc, out, err = run(src)
    ok = rc != 0 and out.splitlines() == want_out and want_err in err
    report(name, ok, f"rc {rc} out {out!r} err {err.strip()[-300:]!r} want {want_err!r}")


# 1. a sieve-like loop and updates of every kind, against Python
n = rng.randint(50, 400)
a, b = rng.randint(-1000, 1000), rng.randint(1, 50)
f = round(rng.uniform(0.5, 2.0), 3)
src = f"""
fn L(*a) {{ a }}
fn fill(n) {{ xs = list(); for i in 0..n {{ push(xs, i % 7) }}; xs }}
fn work(flags, n, a, b, f) {{
  count = 0
  k = 0
  for i in 0..n {{
    if flags[i] > 2 {{ count += 1 }}
    flags[i] = flags[i] * 2 + i
    k += i
    k -= b
  }}
  s = 0
  j = n - 1
  while j >= 0 {{ s += flags[j]; j -= 3 }}
  x = a
  x *= 3
  x //= b
  x = x % (b + 1)
  y = f
  y *= f
  y /= 2
  t = "p"
  t += str(count)
  ys = L(1.5, 2.5)   # a list (a literal of numbers is a tensor)
  ys[0] += 1
  ys[1] = ys[0] * 2
  local = fill(5)
  m = 2
  local[m] = "z"
  print(count, k, s, x, y, t, ys[0], ys[1], local[m], local[m + 1], flags[n - 1])
}}
work(fill({n}), {n}, {a}, {b}, {f})
"""
flags = [i % 7 for i in range(n)]
count = k = 0
for i in range(n):
    if flags[i] > 2:
        count += 1
    flags[i] = flags[i] * 2 + i
    k += i
    k -= b
s, j = 0, n - 1
while j >= 0:
    s += flags[j]
    j -= 3
x = a * 3 // b % (b + 1)
y = f * f / 2
want = [f"{count} {k} {s} {x} {y!r} p{count} 2.5 5.0 z 3 {flags[n - 1]}"]
case("inplace/values-against-python", src, want)

# 2. tensors updated in place through a local: the alias sees it, and the value is computed
src = """
fn g() { x = ones(4); y = x; x += 2; x *= 3; print(sum(y).item(), sum(x).item()) }
g()
"""
case("inplace/tensor-update-through-alias", src, ["36.0 36.0"])

# 2b. record fields updated in place: numbers inline (through the field cache,
# also when records of another layout pass the same site), others as before
c0, d = rng.randint(-100, 100), rng.randint(1, 9)
src = f"""
fn bump(r, d) {{ r.count += d; r.count *= 2; r.name += "!" }}
fn h() {{
  a = {{count: {c0}, name: "a"}}
  b = {{name: "b", other: 1, count: 0.5}}
  for k in 0..3 {{ bump(a, {d}); bump(b, {d}) }}
  t = {{count: ones(2), name: ""}}
  u = t.count
  bump(t, {d})
  print(a.count, a.name, b.count, b.name, sum(u).item(), b.other)
}}
h()
"""
ca, cb = c0, 0.5
for _ in range(3):
    ca = (ca + d) * 2
    cb = (cb + d) * 2
want = [f"{ca} a!!! {cb!r} b!!! {(1 + d) * 2 * 2}.0 1"]
case("inplace/record-fields-against-python", src, want)
case_err("inplace/record-missing-field", "fn g(r) { r.nope += 1 }\ng({a: 1})\n", [], "nope")

# 3. errors: the unassigned variable named, in the language's order
case_err("inplace/update-unassigned-target", "fn g() { u += 1; u = 0 }\ng()\n", [],
         "variable 'u' is used before it is assigned")
case_err("inplace/update-unassigned-value-first", "fn g() { u += v; u = 0; v = 1 }\ng()\n", [],
         "variable 'v' is used before it is assigned")
case_err("inplace/index-unassigned-list", "fn g() { i = 1; print(xs[i]); xs = [1, 2] }\ng()\n", [],
         "variable 'xs' is used before it is assigned")
case_err("inplace/index-unassigned-index", "fn g(xs) { print(xs[i]); i = 0 }\ng(list())\n", [],
         "variable 'i' is used before it is assigned")
case_err("inplace/store-unassigned-list", "fn g() { xs[0] = 1; xs = list() }\ng()\n", [],
         "variable 'xs' is used before it is assigned")
# a list assigned only inside an if/try is not surely assigned after it: its
# read stays first (before the value's), so its error comes first
case_err("inplace/store-after-if-list-first", "fn L(*a) { a }\nfn g(c) { if c { xs = L(1) }; xs[0] = w; w = 1 }\ng(false)\n", [],
         "variable 'xs' is used before it is assigned")
case_err("inplace/store-after-try-list-first",
         "fn L(*a) { a }\nfn g() { try { error(\"e\"); xs = L(1) } catch e { }; xs[0] = w; w = 1 }\ng()\n", [],
         "variable 'xs' is used before it is assigned")
case("inplace/store-after-dominating-assign", "fn L(*a) { a }\nfn g(c) { xs = L(1, 2); if c { xs[1] = xs[0] + 5 }; print(xs[1]) }\ng(true)\ng(false)\n",
     ["6", "2"])
m = rng.randint(1, 9)
case_err("inplace/index-out-of-range", f"fn g(xs) {{ print(xs[0]); xs[{m}] = 5 }}\nfn L(*a) {{ a }}\ng(L(7))\n", ["7"],
         "IndexError")
finish()
