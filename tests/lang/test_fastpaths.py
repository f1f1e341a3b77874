#!/usr/bin/python3
"""The VM's inline fast paths (session 8, lang/lexec.c) and their fallbacks,
against Python on fresh random inputs:

- method calls: a record's field found by the inline key scan (called
  without the receiver) and the miss that calls a global function with the
  receiver; the same call site seeing a record that gains the field later,
  one that loses it, records of other shapes, a module member, a builtin
  called as a method, local and captured functions, and the NameError of a
  name that is neither;
- a builtin function read from an unassigned global (GETG) and called with
  every parameter positional (CALL calls it itself): results, a global that
  shadows the builtin later, named values (pi), keyword and default
  arguments (the general path), a builtin's error at its call site, builtins
  that call back into nabla (map, sorted with key=);
- xs[i] = a constant on a local list (SETILK): every kind of literal, the
  general path and its errors;
- one index of a temporary (r.xs[i], f()[i], r.xs[i] = v: GETIT/SETIT):
  values, negative indices, the list growing and shrinking between reads at
  one site, strings, records and tensors indexed the general way, the
  errors (out of range, non-integer index, not indexable) and the order of
  evaluation (the object before the value, an unassigned index before a
  value with side effects);
- x % y of two ints inline (floored), floats, big ints and % 0 the general
  way (a float's zero result with the divisor's sign, as Python's);
- conditions on a local tested in place (`if x`, `while e`, `if not x`);
- truth tests of nil, numbers and records inline, and of strings, lists and
  tensors through the general path (a many-element tensor's error);
- == and != inline for strings (equal, same length, built at run time),
  nil, bools, identity, values of different types; lists, records, ranges
  and tensors the general way.

Every program also drops its fresh temporaries through these paths (the
"refs/" case loops over them): tools/run-tests.sh runs this suite a second
time on the ASan build (NABLA_ASAN, leak detection on), where a reference
a fast path leaks or drops twice fails the case.

$NABLA is the interpreter (default build/nabla).  Prints PASS/FAIL lines;
exits 1 when a test failed.
"""
import os
import random
import string
import tempfile

from lutil import run, report, finish

rng = random.Random()


def case(name, src, want, env=None):
    rc, out, err = run(src, extra_env=env)
    got = out.splitlines()
    report(name, rc == 0 and got == want, f"rc {rc} err {err.strip()[-400:]!r} got {got[:8]!r} want {want[:8]!r}")


def case_err(name, src, want_out, want_err):
    rc, out, err = run(src)
    ok = rc != 0 and out.splitlines() == want_out and all(w in err for w in want_err)
    report(name, ok, f"rc {rc} out {out!r} err {err.strip()[-400:]!r} want {want_err!r}")


def pyrepr(v):
    """nabla's print of a Python value (ints, floats, bools, lists of them)"""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(pyrepr(x) for x in v) + "]"
    return repr(v)


# ------------------------------------------------------------ method calls
n = rng.randint(20, 60)
seeds = [rng.randint(-100, 100) for _ in range(n)]
k1, k2 = rng.randint(1, 9), rng.randint(1, 9)
src = f"""
fn bump(r, d) {{ r.count += d; r.count }}
fn twice(r, x) {{ 2 * x + r.count }}
fn run(seeds) {{
  out = list()
  r = {{count: 0, other: 1}}
  i = 0
  for s in seeds {{
    # one call site: a function called with the receiver until the record
    # gains a field of that name, then the field (no receiver), then again
    # the function once the record is replaced by one without it
    if i == {n // 3} {{ r.twice = fn(x) {{ 100 + x }} }}
    if i == {2 * n // 3} {{ r = {{count: r.count, other: 2}} }}
    push(out, r.twice(s))
    push(out, r.bump({k1}))
    i += 1
  }}
  # records of other shapes through one site
  shapes = list({{a: 1, count: 5}}, {{count: 7}}, {{z: 0, y: 0, x: 0, count: -3, twice: fn(x) {{ x - 1 }}}})
  for sh in shapes {{ push(out, sh.twice({k2})) }}
  out
}}
print(run(list({", ".join(map(str, seeds))})))
"""
want, count, twice_field = [], 0, False
for i, s in enumerate(seeds):
    if i == n // 3:
        twice_field = True
    if i == 2 * n // 3:
        twice_field = False
    want.append(100 + s if twice_field else 2 * s + count)
    count += k1
    want.append(count)
for c, f in ((5, None), (7, None), (-3, lambda x: x - 1)):
    want.append(f(k2) if f else 2 * k2 + c)
case("method/field-or-function-at-one-site", src, [pyrepr(want)])

a, b = rng.randint(1, 50), rng.randint(1, 50)
moddir = tempfile.mkdtemp()
with open(os.path.join(moddir, "fpmod.nbl"), "w") as f:
    f.write("fn sq(x) = x * x\n")
src = f"""
import fpmod
fn outer(xs) {{
  add = fn(l, v) {{ push(l, v); len(l) }}   # a local function as a method
  k = {a}
  addk = fn(l) {{ l[0] + k }}                # a captured variable inside
  print(xs.add({b}), xs.addk(), xs.len(), fpmod.sq({a}), xs.push(3), len(xs))
}}
outer(list({a}, {b}))
"""
case("method/local-captured-builtin-module", src, [f"3 {2 * a} 3 {a * a} [{a}, {b}, {b}, 3] 4"], {"NABLA_PATH": moddir})
os.unlink(os.path.join(moddir, "fpmod.nbl"))
os.rmdir(moddir)

# a record of many keys (a dictionary: past the inline scan) at one site:
# the function with the receiver, then the field once it is added
nk = rng.randint(17, 60)   # past the inline scan of 16 keys
src = f"""
fn size(r) {{ len(keys(r)) }}
fn go() {{
  d = {{}}
  for i in 0..{nk} {{ d["k" + str(i)] = i }}
  out = list()
  for j in 0..4 {{
    if j == 2 {{ d.size = fn() {{ -1 }} }}
    push(out, d.size())
    push(out, d.k3 + d["k{nk - 1}"])
  }}
  out
}}
print(go())
"""
case("method/many-keys", src, [pyrepr([nk, 3 + nk - 1, nk, 3 + nk - 1, -1, 3 + nk - 1, -1, 3 + nk - 1])])

case_err("method/no-such-method", """
fn f(r) { r.nosuch(1) }
f({a: 1, b: 2})
""", [], ["NameError", "a record has no method 'nosuch'", ":2:"])

# ------------------------------------------------------------ builtins
xs = [rng.randint(-50, 50) for _ in range(rng.randint(5, 30))]
src = f"""
fn go(xs) {{
  ys = list()
  for x in xs {{ push(ys, abs(x)) }}
  s = sorted(ys, key=fn(v) {{ -v }})
  m = map(ys, fn(v) {{ v * 3 }})
  print(len(ys), abs(ys[0] - ys[1]), str(ys[1]), s[0], s[len(s) - 1], m[0], m[len(m) - 1], round(pi, 3))
}}
go(list({", ".join(map(str, xs))}))
push = fn(l, v) {{ "shadowed" }}
fn again() {{ push(list(), 1) }}
print(again())
"""
ys = [abs(x) for x in xs]
s = sorted(ys, key=lambda v: -v)
want = [f"{len(ys)} {abs(ys[0] - ys[1])} {ys[1]} {s[0]} {s[-1]} {ys[0] * 3} {ys[-1] * 3} 3.142", "shadowed"]
case("builtin/positional-callbacks-shadowed", src, want)

case_err("builtin/error-at-call-site", """
fn f(v) {
  n = 0
  n = len(v)
  n
}
print(f(list(1, 2)))
f(5)
""", ["2"], ["TypeError", ":4:7", "f at"])

case_err("builtin/too-many-arguments", """
fn f() { abs(1, 2) }
f()
""", [], ["TypeError", "abs() takes 1 argument but 2 were given"])

# ------------------------------------------------------------ r.xs[i], f()[i]
m = rng.randint(8, 30)
vals = [rng.randint(-1000, 1000) for _ in range(m)]
idx = [rng.randint(-m, m - 1) for _ in range(40)]
src = f"""
fn mk(vals) {{ l = list(); for v in vals {{ push(l, v) }}; {{xs: l}} }}
fn same(l) {{ l }}
fn go(r, idx) {{
  out = list()
  for i in idx {{
    push(out, r.xs[i])            # GETIT: negative ones the general way
    push(out, same(r.xs)[i])
    r.xs[i] = r.xs[i] * 2 + 1     # SETIT
  }}
  # the list grows and shrinks between reads at one site
  j = 0
  while j < 3 {{
    push(out, r.xs[len(r.xs) - 1])
    push(r.xs, j * 10)
    j += 1
  }}
  pop(r.xs); pop(r.xs)
  push(out, r.xs[len(r.xs) - 1])
  out
}}
print(go(mk(list({", ".join(map(str, vals))})), list({", ".join(map(str, idx))})))
"""
xs, out = list(vals), []
for i in idx:
    out.append(xs[i])
    out.append(xs[i])
    xs[i] = xs[i] * 2 + 1
for j in range(3):
    out.append(xs[-1])
    xs.append(j * 10)
xs.pop()
xs.pop()
out.append(xs[-1])
case("index/temporary-values", src, [pyrepr(out)])

word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9)))
src = f"""
fn go(r) {{
  print(r.s[1], r.d["k"], num(r.t[1]), r.xs[0][1])
  r.d["k"] = 9
  r.xs[0][1] = "q"
  print(r.d["k"], r.xs[0])
}}
go({{s: "{word}", d: {{k: 4}}, t: tensor(list(1.5, 2.5)), xs: list(list(1, 2), 0)}})
"""
case("index/temporary-general-types", src, [f"{word[1]} 4 2.5 2", '9 [1, "q"]'])

case_err("index/temporary-out-of-range", """
fn f(r) { r.xs[3] }
f({xs: list(1, 2)})
""", [], ["IndexError", "index 3 is out of range for list of length 2", ":2:11"])
case_err("index/temporary-set-out-of-range", """
fn f(r) { r.xs[-3] = 1 }
f({xs: list(1, 2)})
""", [], ["IndexError", "out of range", ":2:11"])
case_err("index/temporary-float-index", """
fn f(r) { r.xs[0.5] }
f({xs: list(1, 2)})
""", [], ["TypeError", "index must be an integer"])
case_err("index/temporary-not-indexable", """
fn f(r) { r.n[0] }
f({n: 5})
""", [], ["TypeError", ":2:11"])
case_err("index/unassigned-index-before-value", """
fn g() { print("g ran"); 1 }
fn f(r) {
  if false { j = 0 }
  r.xs[j] = g()
}
f({xs: list(1)})
""", [], ["NameError", "'j'"])

# xs[i] = constant on a local list (SETILK): every kind of literal, negative
# indices the general way, the errors
m = rng.randint(6, 20)
ops = [(rng.randint(-m, m - 1), rng.choice(["0", "-2.5", "true", "false", "nil", '"s"'])) for _ in range(30)]
body = "\n  ".join(f"xs[{i}] = {v}" if i >= 0 else f"j = {i}\n  xs[j] = {v}" for i, v in ops)
src = f"""
fn go(n) {{
  xs = list()
  for i in 0..n {{ push(xs, i) }}
  j = 0
  {body}
  print(xs)
  xs
}}
go({m})
"""
pyv = {"0": "0", "-2.5": "-2.5", "true": "true", "false": "false", "nil": "nil", '"s"': '"s"'}
xs = [str(i) for i in range(m)]
for i, v in ops:
    xs[i] = pyv[v]
case("index/local-constant-values", src, ["[" + ", ".join(xs) + "]"])
case_err("index/local-constant-out-of-range", """
fn f(xs) { xs[2] = false }
f(list(1, 2))
""", [], ["IndexError", "index 2 is out of range for list of length 2", ":2:12"])
case_err("index/local-constant-not-a-list", """
fn f(xs) { xs[0] = 1 }
f(5)
""", [], ["TypeError", ":2:12"])

# the object is evaluated before the value (as SETI always did): the old
# list gets the element, the record holds the new one
v = rng.randint(1, 99)
src = f"""
r = {{xs: list(1, 2, 3)}}
old = r.xs
fn g() {{ r.xs = list(7, 8, 9); {v} }}
fn t() {{ r.xs[0] = g() }}
t()
print(old, r.xs)
"""
case("index/object-before-value", src, [f"[{v}, 2, 3] [7, 8, 9]"])

# ------------------------------------------------------------ truth
items = [rng.choice([0, 1, -2, 0.0, 3.5]) for _ in range(12)]
src = f"""
fn t(v) {{ if v {{ 1 }} else {{ 0 }} }}
fn n(v) {{ not v }}
fn go(items) {{
  out = list()
  for v in items {{ push(out, t(v)); push(out, n(v)) }}
  for v in list(nil, {{}}, {{a: 1}}, "", "x", list(), list(0), true, false, tensor(list(0.0)), tensor(list(2.0))) {{
    push(out, t(v)); push(out, n(v))
    a = v and 5
    push(out, if a == 5 {{ 1 }} else {{ 0 }})
  }}
  e = {{next: {{next: nil}}}}
  c = 0
  while e {{ c += 1; e = e.next }}
  push(out, c)
  out
}}
print(go(list({", ".join(map(repr, items))})))
"""
out = []
for x in items:
    out += [1 if x else 0, not x]
for x in [None, {}, {"a": 1}, "", "x", [], [0], True, False, 0.0, 2.0]:
    truth = x is not None and (bool(x) if not isinstance(x, dict) else True)
    out += [1 if truth else 0, not truth, 1 if truth else 0]
out.append(2)
case("truth/inline-and-general", src, [pyrepr(out)])

# conditions on a local tested in place (JFK), `not local` (JTK): every kind
# of value, a linked list walked with `while e`, the unassigned local's
# error, a tensor's errors at the same places as a computed condition's
vals = [rng.choice(["0", "3", "-0.5", "nil", "true", "false", '""', '"a"', "list()", "list(1)", "{}", "{a: 1}"])
        for _ in range(16)]
pyvals = {"0": 0, "3": 3, "-0.5": -0.5, "nil": None, "true": True, "false": False, '""': "", '"a"': "a",
          "list()": [], "list(1)": [1], "{}": {}, "{a: 1}": {"a": 1}}
src = f"""
fn c1(v) {{ if v {{ 1 }} else {{ 0 }} }}
fn c2(v) {{ if not v {{ 1 }} else {{ 0 }} }}
fn c3(v) {{ x = v; n = 0; while x {{ n += 1; x = nil }}; n }}
fn c4(v) {{ r = 0; if not v {{ r = 5 }}; r }}
fn walk(e) {{ n = 0; while e {{ n += 1; e = e.next }}; n }}
out = list()
for v in list({", ".join(vals)}) {{ push(out, c1(v)); push(out, c2(v)); push(out, c3(v)); push(out, c4(v)) }}
l = nil
for i in 0..{len(vals)} {{ l = {{next: l}} }}
push(out, walk(l))
print(out)
"""
want = []
for v in vals:
    x = pyvals[v]
    truth = True if isinstance(x, dict) else bool(x)
    want += [int(truth), int(not truth), int(truth), 0 if truth else 5]
want.append(len(vals))
case("truth/local-conditions", src, [pyrepr(want)])
case_err("truth/local-condition-unassigned", """
fn h() {
  if false { u = 1 }
  if u { 1 } else { 2 }
}
h()
""", [], ["NameError", "'u'", ":4:6"])
case_err("truth/not-local-tensor-error-at-not", """
fn f(t) {
  if not t { 1 } else { 0 }
}
f(tensor(list(1.0, 2.0)))
""", [], ["ambiguous", ":3:6"])
case_err("truth/while-local-tensor-error", """
fn g(t) {
  while t { return 1 }
  0
}
g(tensor(list(1.0, 2.0)))
""", [], ["ambiguous", ":3:9"])

case_err("truth/tensor-many-elements", """
fn f(t) { if t { 1 } else { 0 } }
f(tensor(list(1.0, 2.0)))
""", [], ["truth", ":2:"])

# ------------------------------------------------------------ == and !=
alpha = "abc"
words = ["".join(rng.choice(alpha) for _ in range(rng.randint(0, 3))) for _ in range(30)]
src = f"""
fn go(ws) {{
  out = list()
  p = ws[0]
  for w in ws {{
    built = "" + w                      # a string made at run time
    push(out, if w == p {{ 1 }} else {{ 0 }})
    push(out, w != p)
    push(out, built == w)
    push(out, w == "{words[1]}")
    p = w
  }}
  print(out)
  f = fn() {{ 1 }}
  g = fn() {{ 1 }}
  print(nil == nil, nil == 0, nil != false, true == 1, 1 == "1", f == f, f == g, len == len, len != abs)
  print(list(1, 2) == list(1, 2), {{a: 1}} == {{a: 1}}, {{a: 1}} != {{a: 2}}, 0..3 == 0..3, list(1) == list(1, 2))
  print(tensor(list(1.0, 2.0)) == tensor(list(1.0, 3.0)))
}}
go(list({", ".join('"' + w + '"' for w in words)}))
"""
out, p = [], words[0]
for w in words:
    out += [1 if w == p else 0, w != p, True, w == words[1]]
    p = w
want = [pyrepr(out),
        "true false true false false true false true true",
        "true true true true false",
        "tensor([ true, false])"]   # the tensor printer's bool format
case("eq/strings-identity-types-general", src, want)

case_err("eq/unassigned-operand", """
fn f() {
  if false { x = 1 }
  x == "a"
}
f()
""", [], ["NameError", "'x'"])

# ------------------------------------------------------------ x % y
# two ints inline (floored: the sign of y, as Python), floats and big ints
# the general way; % 0 is nan
pairs = [(rng.randint(-10**6, 10**6), rng.choice([-1, 1]) * rng.randint(1, 50)) for _ in range(40)]
pairs += [(0, 3), (-6, 3), (6, -3), (2**53, 7), (-(2**53), 5)]
fl = [(round(rng.uniform(-100, 100), 2), rng.choice([-3, 2, 0.5])) for _ in range(10)]
src = f"""
fn go(ps, fs) {{
  out = list()
  for p in ps {{ x = p[0]; y = p[1]; push(out, x % y) }}
  for p in fs {{ x = p[0]; y = p[1]; push(out, x % y) }}
  x = 7
  y = 0
  print(out, x % y, 2 ** 60 % 7)
}}
go(list({", ".join(f"list({a}, {b})" for a, b in pairs)}), list({", ".join(f"list({a}, {b})" for a, b in fl)}))
"""
want = [a % b for a, b in pairs] + [a % b for a, b in fl]
case("mod/ints-inline-floats-general", src, [f"{pyrepr(want)} nan {2**60 % 7}"])

# ------------------------------------------------------------ references
# fresh objects through every fast path, many times: a leak or a double
# drop shows under ASan (see the top); the values are checked here too
reps = rng.randint(200, 400)
src = f"""
fn mk(i) {{ {{xs: list(i, str(i)), s: str(i % 7), next: {{next: nil}}}} }}
fn get(r) {{ r.xs }}
fn go(n) {{
  total = 0
  hits = 0
  for i in 0..n {{
    total += mk(i).xs[0]               # GETIT of a fresh record's list
    get(mk(i))[1] = "x"                 # SETIT on a fresh list
    mk(i).xs[0] = list(i)               # the old element dropped
    if mk(i).s == str(i % 7) {{ hits += 1 }}   # == of fresh strings
    if mk(i).next {{ hits += 1 }}            # the truth of a fresh record
    if not mk(i).next.next {{ hits += 1 }}
    push(mk(i).xs, list(i))             # a builtin given fresh arguments
    total += mk(i).xs.len()             # a builtin as a method of a fresh list
  }}
  print(total, hits)
}}
go({reps})
"""
case("refs/fresh-temporaries", src, [f"{sum(range(reps)) + 2 * reps} {3 * reps}"])

finish()
