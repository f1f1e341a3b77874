"""Calls reuse the VM stack without clearing it: a callee's temporaries are
not emptied on entry and a caller's registers are not emptied after a return
(lexec.c), because every consumer of a stack slot leaves nil there (lcall.c).
These programs make the slots above a call hold strings, lists and closures
(references) through every path that consumes them -- VM calls, builtins
calling nabla functions back (map, filter, sorted's key), records with
__call, errors caught mid-call, keyword/default/*rest calls -- and then reuse
them with other calls; a stale reference would show as a wrong value, a
crash or (under NABLA_ASAN) a use-after-free.  Values are checked against the
same computation in Python on fresh random inputs."""
import os
import random

from lutil import run, report, finish

rng = random.Random()
ASAN = os.environ.get("NABLA_ASAN") == "1"
N = 30 if ASAN else 200


def case(name, src, want):
    rc, out, err = run(src)
    got = out.split("\n")[:-1] if out.endswith("\n") else out.split("\n")
    report(name, rc == 0 and got == want, f"rc {rc} err {err.strip()[-300:]!r} got {got[:5]!r} want {want[:5]!r}")


# 1. callbacks from builtins, then deep VM calls over the same slots
xs = [rng.randint(-50, 50) for _ in range(N)]
k = rng.randint(1, 9)
src = f"""
fn tag(s, k) {{ t = s + str(k); u = [t, k, t]; u[0] + u[2] }}
fn h(x) {{ map(x, fn(y) = tag("a", y)) }}
fn deep(n, acc) {{ if n == 0 {{ acc }} else {{ r = h(L(n, n + {k})); deep(n - 1, acc + len(r[0]) + len(r[1])) }} }}
fn L(*a) {{ a }}   # a list of numbers (a literal would be a tensor)
xs = L({", ".join(map(str, xs))})
for x in xs {{
  ys = sorted(map(xs, fn(v) = str(v * x)), key=fn(s) = len(s) * 1000 + (s == "0" ? 0 : 1))
  print(deep(abs(x) % 7 + 1, 0), len(ys), ys[0])
}}
"""
src = src.replace('(s == "0" ? 0 : 1)', '(if s == "0" { 0 } else { 1 })')


def py_tag(s, kk):
    t = s + str(kk)
    return t + t


def py_deep(n, acc):
    while n:
        r = [py_tag("a", n), py_tag("a", n + k)]
        acc += len(r[0]) + len(r[1])
        n -= 1
    return acc


want = []
for x in xs:
    ys = sorted((str(v * x) for v in xs), key=lambda s: len(s) * 1000 + (0 if s == "0" else 1))
    want.append(f"{py_deep(abs(x) % 7 + 1, 0)} {len(ys)} {ys[0]}")
case("calls/builtin-callbacks-then-deep-calls", src, want)

# 2. errors raised deep inside calls with live string temporaries, caught, then reuse
depth = [rng.randint(1, 12) for _ in range(N // 4)]
src = f"""
fn boom(n, s) {{ if n == 0 {{ error("at " + s) }} else {{ s + boom(n - 1, s + "x") }} }}
fn safe(n) {{ try {{ boom(n, "s") }} catch e {{ e.message }} }}
fn mix(n) {{ a = safe(n); b = [a, str(n)]; b[1] + ":" + b[0] }}
fn L(*a) {{ a }}
for d in L({", ".join(map(str, depth))}) {{ print(mix(d)) }}
"""
want = [f"{d}:at s{'x' * d}" for d in depth]
case("calls/caught-errors-then-reuse", src, want)

# 3. keyword, default, *rest calls and records with __call between plain calls
vals = [rng.randint(0, 99) for _ in range(N // 4)]
src = f"""
fn kw(a, b=10, *rest) {{ s = str(a) + "-" + str(b); s + str(len(rest)) }}
fn plain(x) {{ [str(x), x][0] }}
obj = {{__call: fn(self, v) = plain(v) + kw(v, b=v + 1)}}
fn L(*a) {{ a }}
for v in L({", ".join(map(str, vals))}) {{ print(plain(v) + "|" + kw(v) + "|" + kw(v, v, v, v) + "|" + obj(v) + "|" + kw(b=v, a=1)) }}
"""
want = [f"{v}|{v}-100|{v}-{v}2|{v}{v}-{v + 1}0|1-{v}0" for v in vals]
case("calls/keywords-defaults-rest-__call", src, want)
finish()
