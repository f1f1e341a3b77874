#!/usr/bin/python3
"""tests/dist: the session's futures (dist.submit, future.done/result,
dist.as_completed; dist/dasync.c) on 2-3 local CPU workers.

Values are checked against NumPy on fresh random inputs; errors by their
kind, message and the worker's traceback; a killed worker's future fails
loudly; the table of unfinished tasks is bounded.
Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_async.py
(run-tests.sh runs it again under ASan: NABLA_ASAN)
"""
import json, os, signal, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, lines_with, report, sanitizer_check, script, test, wait_gone  # noqa: E402

rng = np.random.default_rng()


def run(src, timeout=120):
    path = script(src)
    p = subprocess.run([NABLA, path], capture_output=True, text=True, timeout=timeout)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


_nnpy = [0]


def nbl(a):
    """a NumPy array as nabla source: loaded from an .npy file (exact f64)"""
    _nnpy[0] += 1
    path = os.path.join(TMP, f"a{_nnpy[0]}.npy")
    np.save(path, a)
    return f"load_npy(\"{path}\")"


@test
def test_submit_values(name):
    # a different matmul + reduction on each worker, several tasks per worker
    a = [rng.standard_normal((rng.integers(1, 6), 7)) for _ in range(6)]
    b = rng.standard_normal((7, 3))
    src = "import dist\nimport json\ndist.start(3)\n"
    src += f"B = {nbl(b)}\nA = [{', '.join(nbl(x) for x in a)}]\n"
    src += """
fs = list()
for i in 0..len(A) { push(fs, dist.submit(i % 3, fn(x, y, k) list((x @ y).sum(axis=0).tolist(), k * 2, dist.rank()), list(A[i], B, i))) }
out = map(fs, fn(f) f.result())
print("OUT", json.format(out))
print("AGAIN", json.format(fs[0].result()[1]), fs[0].done())
dist.stop()
"""
    rc, out, err = run(src)
    got = json.loads(lines_with("OUT ", out)[0])
    ok = rc == 0 and len(got) == 6
    for i, (v, k, r) in enumerate(got):
        ok = ok and np.allclose(v, (a[i] @ b).sum(axis=0), rtol=1e-12, atol=1e-12) and k == 2 * i and r == i % 3
    ok = ok and "AGAIN 0 true" in out
    report(name, ok, f"rc={rc} out={out[-600:]!r} err={err[-800:]!r}")


@test
def test_as_completed_order(name):
    # three tasks whose lengths differ by a second or more: they finish in that
    # order, whatever order they were submitted in
    waits = [2.0, 0.0, 1.0]
    rc, out, err = run(f"""
import dist
dist.start(3)
fn spin(s) {{ t = clock(); while clock() - t < s {{ }}; dist.rank() }}
waits = list({", ".join(map(str, waits))})
fs = map(list(range(3)), fn(i) dist.submit(i, spin, list(waits[i])))
print("FIRSTDONE", fs[1].result())
order = list()
for f in dist.as_completed(fs) {{ push(order, f.result()) }}
print("ORDER", order)
print("DONE", map(fs, fn(f) f.done()))
dist.stop()
""")
    ok = rc == 0 and "FIRSTDONE 1" in out and "ORDER [1, 2, 0]" in out and "DONE [true, true, true]" in out
    report(name, ok, f"rc={rc} out={out!r} err={err[-800:]!r}")


@test
def test_error_reraised_with_traceback(name):
    rc, out, err = run("""
import dist
dist.start(2)
fn inner_step(x) { x + "text" }
fn outer_step(x) { inner_step(x) }
dist.push({inner_step: inner_step, outer_step: outer_step})
f = dist.submit(1, fn(x) outer_step(x), list(3))
ok = dist.submit(0, fn(x) x * 3, list(5))
r = try { f.result() } catch e { print("NAME", e.name); print("MSG", e.message); "caught" }
print("R", r)
r2 = try { f.result() } catch e { print("AGAIN", e.name) ; 1 }
print("OTHER", ok.result())
# the group is still usable for collectives and commands afterwards
print("RUN", dist.run(fn() dist.all_reduce(tensor([dist.rank() + 1.0])).item()))
dist.stop()
""")
    msg = "\n".join(l for l in out.splitlines() if not l.startswith(("NAME", "R ", "AGAIN", "OTHER", "RUN")))
    ok = (rc == 0 and "NAME TypeError" in out and "unsupported operand types for +" in out
          and "raised by the task on worker rank 1" in out and "inner_step at" in msg and "outer_step at" in msg
          and "R caught" in out and "AGAIN TypeError" in out and "OTHER 15" in out and "RUN [3.0, 3.0]" in out)
    report(name, ok, f"rc={rc} out={out!r} err={err[-800:]!r}")


@test
def test_timeout_and_done(name):
    rc, out, err = run("""
import dist
dist.start(2)
fn spin(s) { t = clock(); while clock() - t < s { }; 42 }
f = dist.submit(0, spin, list(1.5))
print("DONE0", f.done())
r = try { f.result(timeout=0.05) } catch e { print("TIMEOUT", e.name, e.message); nil }
print("VALUE", f.result())
print("DONE1", f.done())
g = dist.submit(1, fn() 7)
it = dist.as_completed([g], timeout=30)
print("IT", (it.__next)(it).result(), (it.__next)(it))
dist.stop()
""")
    ok = (rc == 0 and "DONE0 false" in out and "TIMEOUT DistError" in out and "did not finish within 0.05 s" in out
          and "VALUE 42" in out and "DONE1 true" in out and "IT 7 nil" in out)
    report(name, ok, f"rc={rc} out={out!r} err={err[-800:]!r}")


@test
def test_bad_arguments(name):
    rc, out, err = run("""
import dist
r0 = try { dist.submit(0, fn() 1) } catch e { print("E0", e.name, e.message); nil }
dist.start(2)
r1 = try { dist.submit(5, fn() 1) } catch e { print("E1", e.name, e.message); nil }
r2 = try { dist.submit(0.5, fn() 1) } catch e { print("E2", e.name, e.message); nil }
r3 = try { dist.submit(0, fn(x) x, 3) } catch e { print("E3", e.name, e.message); nil }
r4 = try { dist_future_result(99999, 1) } catch e { print("E4", e.name, e.message); nil }
f = dist.submit(0, fn() 1)
print("V", f.result())
r5 = try { dist_future_result(f._id[0], f._id[1]) } catch e { print("E5", e.name, e.message); nil }
r6 = try { dist.sweep({x: [1]}, fn(c, b, s) 1, scheduler="bogus") } catch e { print("E6", e.name, e.message); nil }
dist.stop()
""")
    ok = (rc == 0 and "E0 DistError dist.submit: no workers are running" in out
          and "E1 DistError dist.submit: rank 5 is not a worker (the session has 2)" in out
          and "E2 TypeError dist.submit: rank must be an integer" in out
          and "E3 TypeError dist.submit: args must be a list" in out
          and "E4 DistError" in out and "E5 DistError" in out and "already taken" in out and "V 1" in out
          and "E6 ValueError dist.sweep: scheduler must be" in out)
    report(name, ok, f"rc={rc} out={out!r} err={err[-800:]!r}")


@test
def test_killed_worker_fails_future(name):
    path = script("""
import dist
dist.start(2)
fn spin(s) { t = clock(); while clock() - t < s { }; 1 }
f = dist.submit(1, spin, list(120))
g = dist.submit(0, fn(x) x + 1, list(41))
eprint("PID", dist.workers()[1].pid)
r = try { f.result() } catch e { print("FAILED", e.name, e.message); nil }
print("DONE", f.done(), "OTHER", g.result())
# the live worker still takes tasks; a new one to the dead rank is refused
print("MORE", dist.submit(0, fn() 5).result())
r2 = try { dist.submit(1, fn() 5) } catch e { print("REFUSED", e.message); nil }
dist.stop()
""", "killed.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line, t = "", time.time()
    while not line.startswith("PID") and time.time() - t < 60:
        line = p.stderr.readline()
    pid = int(line.split()[1])
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    sanitizer_check(err)
    ok = (p.returncode == 0 and "FAILED DistError" in out and "did not finish" in out and "killed by signal 9" in out
          and "DONE true OTHER 42" in out and "MORE 5" in out and "REFUSED dist.submit: worker rank 1" in out and "is dead" in out)
    report(name, ok, f"rc={p.returncode} out={out!r} err={err[-800:]!r}")


@test
def test_bounded_table(name):
    # untaken futures hold their slot: the 4097th is refused with a clear error,
    # and taking results frees slots again
    rc, out, err = run("""
import dist
dist.start(1)
fs = list()
e = nil
for i in 0..4097 {
  f = try { dist.submit(0, fn(x) x, list(i)) } catch err { e = err; nil }
  if f == nil { break }
  push(fs, f)
}
print("COUNT", len(fs))
print("ERR", e.name, e.message)
s = 0
for f in fs { s += f.result() }
print("SUM", s)
print("AFTER", dist.submit(0, fn() 9).result())
dist.stop()
""", timeout=300)
    ok = (rc == 0 and "COUNT 4096" in out and "too many unfinished tasks (4096)" in out
          and f"SUM {sum(range(4096))}" in out and "AFTER 9" in out)
    report(name, ok, f"rc={rc} out={out[-600:]!r} err={err[-800:]!r}")


@test
def test_docs_examples_run(name):
    # the examples of docs/distributed.md's three sections run as written (and there are as many as expected)
    import re
    doc = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../docs/distributed.md")).read()
    part = doc[doc.index("## Asynchronous messages and futures"):]
    last = part.index("## Hyperparameter search")       # the three sections end at the next heading
    nxt = part.find("\n## ", last + 1)
    part = part if nxt < 0 else part[:nxt]
    blocks = re.findall(r"^```\n(.*?)^```", part, re.S | re.M)
    why = []
    want = ["no data", "12.0", "max_staleness", "ranks of step 0", "completed"]
    for k, b in enumerate(blocks):
        rc, out, err = run(b, timeout=240)
        if rc != 0 or want[k] not in out:
            why.append(f"example {k}: rc={rc} out={out[-300:]!r} err={err[-300:]!r}")
    report(name, len(blocks) == len(want) and not why, f"{len(blocks)} examples, {len(want)} expected; {why}")


dutil.finish()
