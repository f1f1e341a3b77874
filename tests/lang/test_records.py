#!/usr/bin/python3
"""Records used as dictionaries: a long random run of sets, gets, has,
removes and re-adds on one record equals the same run on a Python dict
(insertion order kept, a removed key re-added at the end), at sizes around
and far past the point where a record gets its hash index (lang/lobject.c:
rec_index_sync), with keys looked up by strings built at run time (not
interned) and by literals (interned), field syntax included; and a
safetensors file of many tensors (whose loader appends keys directly) reads
back by name."""
import os
import random
import subprocess
import tempfile

import numpy as np

from lutil import NABLA, report, finish, run

rng = random.Random()


def word():
    return "".join(rng.choice("abcxyzé_0") for _ in range(rng.randint(0, 7)))


def program(nkeys, nops):
    pool = list({word() for _ in range(nkeys * 3)})[:nkeys]
    want, lines, d = [], [], {}
    for step in range(nops):
        k = rng.choice(pool)
        q = k.replace("\\", "\\\\").replace('"', '\\"')
        op = rng.random()
        # a key built at run time (a fresh, not interned string) or a literal
        kexpr = f'join(list("{q[:len(q) // 2]}", "{q[len(q) // 2:]}"), "")' if rng.random() < 0.5 else f'"{q}"'
        if op < 0.45:
            v = rng.randint(-10**6, 10**6)
            lines.append(f"r[{kexpr}] = {v}")
            d[k] = v
        elif op < 0.65:
            lines.append(f'print(if has(r, {kexpr}) {{ r[{kexpr}] }} else {{ "none" }})')
            want.append(str(d.get(k, "none")))
        elif op < 0.8:
            lines.append(f"print(remove(r, {kexpr}))")
            want.append("true" if d.pop(k, None) is not None else "false")
        elif op < 0.9:
            lines.append(f"print(has(r, {kexpr}))")
            want.append("true" if k in d else "false")
        else:
            lines.append("print(len(keys(r)))")
            want.append(str(len(d)))
    lines.append('print(join(keys(r), "|"))')
    want.append("|".join(d))
    lines.append('print(join(map(values(r), fn(v) "{v}"), "|"))')
    want.append("|".join(str(v) for v in d.values()))
    return "r = {}\n" + "\n".join(lines) + "\n", want


for nkeys, nops in ((10, 400), (17, 800), (60, 3000), (2000, 12000)):
    src, want = program(nkeys, nops)
    rc, out, err = run(src)
    got = out.split("\n")[:len(want)]
    bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    report(f"records/dict-{nkeys}-keys", rc == 0 and got == want,
           f"rc {rc} first difference at output line {bad}: got {got[bad] if bad is not None else got[-1:]!r} "
           f"want {want[bad] if bad is not None else want[-1:]!r}; stderr {err[-300:]!r}")

# field syntax and methods on a record past the index's threshold
n = rng.randint(40, 200)
names = [f"f{i}_{rng.randint(0, 999)}" for i in range(n)]
src = "r = {" + ", ".join(f"{k}: {i * 3}" for i, k in enumerate(names)) + "}\n"
src += "r.twice = fn(x) x * 2\n"
picks = rng.sample(range(n), 10)
src += "".join(f"print(r.{names[i]})\n" for i in picks) + f"print(r.twice({n}))\n"
src += f'print(try {{ r.missing_{n} }} catch e {{ e.name }})\n'
rc, out, err = run(src)
report("records/fields-of-a-large-record", rc == 0 and out.split() == [str(i * 3) for i in picks] + [str(2 * n), "KeyError"],
       f"rc {rc} out {out[-300:]!r} err {err[-300:]!r}")

# safetensors: the loader appends keys without nbR_set
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "many.safetensors")
    m = rng.randint(30, 90)
    vals = {f"t{i}_{rng.randint(0, 99)}": rng.uniform(-5, 5) for i in range(m)}
    src = "x = {" + ", ".join(f"{k}: tensor(list({v!r}))" for k, v in vals.items()) + "}\n"
    src += f'save("{path}", x)\ny = load("{path}")\n'
    sample = rng.sample(sorted(vals), 8)
    src += "".join(f'print(y["{k}"][0].item(), has(y, "{k}"))\n' for k in sample) + 'print(has(y, "nope"), len(keys(y)))\n'
    rc, out, err = run(src)
    lines = out.split("\n")
    ok = rc == 0 and len(lines) >= 9
    for i, k in enumerate(sample):
        if not ok:
            break
        v, h = lines[i].split()
        ok = abs(float(v) - vals[k]) <= 1e-6 * max(1, abs(vals[k])) and h == "true"
    report("records/safetensors-keys-found", ok and lines[8] == f"false {m}", f"rc {rc} out {out[-300:]!r} err {err[-300:]!r}")
# interned keys nobody holds any more are let go (lang/lobject.c:
# intern_grow): 60 dictionaries of 100,000 new words each, one after the
# other, fit in a 400 MB address space (kept for ever, they took ~560 MB)
import resource
k = rng.randint(2, 9)
src = (f"t = 0\nfor r in 0..60 {{ d = {{}}\n for i in 0..100000 {{ d[\"w{{r}}_{{i}}\"] = i * {k} }}\n"
       f" for i in 0..100000 {{ t = t + d[\"w{{r}}_{{i}}\"] }} }}\nprint(t)\n")
with tempfile.NamedTemporaryFile("w", suffix=".nbl", delete=False) as f:
    f.write(src)
try:
    p = subprocess.run([NABLA, f.name], capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20)))
finally:
    os.unlink(f.name)
report("records/interned-keys-let-go", p.returncode == 0 and p.stdout.split() == [str(60 * k * 99999 * 100000 // 2)],
       f"rc {p.returncode} out {p.stdout[-200:]!r} err {p.stderr[-300:]!r}")
finish()
