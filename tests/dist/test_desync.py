#!/usr/bin/python3
"""tests/dist: desync detection (dist/ddesync.c) — a rank that calls another
collective, another shape/op/dtype, or one collective more than its group
fails every rank of the group at once with a message naming the ranks and
the calls, instead of waiting out the group timeout.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_desync.py
One line per test ("PASS: name" / "FAIL: name: why"); exit 1 on any failure.
3 CPU workers on loopback (shared memory, and the TCP ring with NABLA_SHM=0).
The group timeout is left at its default (300 s) and every run is bounded by
a subprocess timeout far below it: a run that completes shows the desync was
caught by the check, not by the timeout.
"""
import os, re, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, report, sanitizer_check, script, test  # noqa: E402

RNG = np.random.default_rng()


def nrun(src, n=3, env=None, timeout=90):
    """`nabla run -n N script`: (rc, stdout, stderr)"""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([NABLA, "run", "-n", str(n), script(src, "desync.nbl")], capture_output=True, text=True, timeout=timeout, env=e)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def srun(src, env=None, timeout=120):
    """a session script (dist.start inside): (rc, stdout, stderr)"""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([NABLA, script(src, "desync_s.nbl")], capture_output=True, text=True, timeout=timeout, env=e)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def rank_errors(err, n=3):
    """{rank: its DistError line} from `nabla run`'s rank-prefixed stderr"""
    r = {}
    for l in err.splitlines():
        m = re.match(r"\[rank (\d+)\] (.*)$", l)
        if m and "desync" in m.group(2) and int(m.group(1)) not in r:
            r[int(m.group(1))] = m.group(2)
    return r


def every_rank_says(err, parts, n=3):
    """every rank that reports (the session stops the rest once one has
    failed) names the ranks and the calls; per-rank coverage: test_in_session"""
    errs = rank_errors(err, n)
    return len(errs) >= 1 and all(all(p in e for p in parts) for e in errs.values()), errs


def vec(a):
    return "tensor([" + ", ".join(repr(float(v)) for v in a) + "])"


@test
def test_other_collective(name):
    for shm in ("1", "0"):
        rc, out, err = nrun("""
r = dist.rank()
x = tensor([1.0, 2.0])
y = all_reduce(x)
if r == 1 { all_gather(x) } else { all_reduce(x) }
""", env={"NABLA_SHM": shm})
        ok, errs = every_rank_says(err, ["collective desync in the world group at its collective #2",
                                         "ranks 0,2 called all_reduce(op=sum, f32[2])", "rank 1 called all_gather(f32[*])"])
        report(f"{name}_shm{shm}", rc != 0 and ok, f"rc={rc} errs={errs} err={err[-1500:]!r}")


@test
def test_one_more(name):
    # rank 0 calls one all_reduce more; ranks 1, 2 finish: all three fail, naming it
    rc, out, err = nrun("""
r = dist.rank()
all_reduce(ones(3))
if r == 0 { all_reduce(ones(4)) }
""")
    ok, errs = every_rank_says(err, ["at its collective #2", "ranks 1,2 finished the command (called no more collectives)",
                                     "rank 0 called all_reduce(op=sum, f32[4])"])
    report(name, rc != 0 and ok, f"rc={rc} errs={errs} err={err[-1500:]!r}")


@test
def test_one_fewer_barrier(name):
    rc, out, err = nrun("""
if dist.rank() != 2 { barrier() }
""")
    ok, errs = every_rank_says(err, ["at its collective #1", "ranks 0,1 called barrier()", "rank 2 finished the command"])
    report(name, rc != 0 and ok, f"rc={rc} errs={errs} err={err[-1500:]!r}")


@test
def test_shape_op_dtype(name):
    cases = [
        ("shape", "all_reduce(ones(if dist.rank() == 2 { 5 } else { 4 }))", ["ranks 0,1 called all_reduce(op=sum, f32[4])", "rank 2 called all_reduce(op=sum, f32[5])"]),
        ("op", "all_reduce(ones(4), if dist.rank() == 0 { \"max\" } else { \"sum\" })", ["ranks 1,2 called all_reduce(op=sum, f32[4])", "rank 0 called all_reduce(op=max, f32[4])"]),
        # an int on one rank and a float elsewhere would add i64 bits to f64 bits
        ("dtype", "all_reduce(if dist.rank() == 1 { 3 } else { 2.5 })", ["ranks 0,2 called all_reduce(op=sum, f64[])", "rank 1 called all_reduce(op=sum, i64[])"]),
        ("rs_shape", "reduce_scatter(ones(if dist.rank() == 0 { [3, 2] } else { [3, 3] }))", ["ranks 1,2 called reduce_scatter(op=sum, f32[3,3])", "rank 0 called reduce_scatter(op=sum, f32[3,2])"]),
        ("bcast_src", "broadcast(ones(2), if dist.rank() == 0 { 1 } else { 0 })", ["ranks 1,2 called broadcast(src=0)", "rank 0 called broadcast(src=1)"]),
    ]
    for cname, code, parts in cases:
        rc, out, err = nrun(code + "\n")
        ok, errs = every_rank_says(err, parts)
        report(f"{name}_{cname}", rc != 0 and ok, f"rc={rc} errs={errs} err={err[-1500:]!r}")


@test
def test_subgroup(name):
    # a desync inside group [2,0] names the group and world ranks; rank 1 is not involved
    rc, out, err = nrun("""
g = dist.new_group(list(2, 0))
if dist.rank() != 1 { all_reduce(ones(2), group=g) }
if dist.rank() == 2 { all_gather(ones(2), group=g) } else if dist.rank() == 0 { all_reduce(ones(2), group=g) }
""")
    errs = rank_errors(err)
    parts = ["collective desync in group [2,0] at its collective #2", "rank 2 called all_gather(f32[*])", "rank 0 called all_reduce(op=sum, f32[2])"]
    ok = set(errs) <= {0, 2} and len(errs) >= 1 and all(all(p in e for p in parts) for e in errs.values())
    report(name, rc != 0 and ok, f"rc={rc} errs={errs} err={err[-1500:]!r}")


@test
def test_in_session(name):
    # each worker catches its own error: every rank of the group fails, each with the message
    rc, out, err = srun("""
import dist
dist.start(3)
r = dist.run(fn() { try { all_reduce(ones(2)); if dist.rank() == 2 { all_reduce(ones(2), "min") } else { all_gather(ones(2)) }; "none" } catch e { e.message } })
for i in 0..3 { print("M", i, r[i]) }
dist.stop()
""")
    msgs = {int(l.split(" ", 2)[1]): l.split(" ", 2)[2] for l in out.splitlines() if l.startswith("M ")}
    parts = ["collective desync in the world group at its collective #2", "ranks 0,1 called all_gather(f32[*])", "rank 2 called all_reduce(op=min, f32[2])"]
    ok = rc == 0 and sorted(msgs) == [0, 1, 2] and all(all(p in m for p in parts) for m in msgs.values())
    report(name, ok, f"rc={rc} msgs={msgs} err={err[-1500:]!r}")


SESSION = """
import dist
dist.start(3)
data = %s
rows = %s
fn step(mode, data, rows) {
  x = tensor(data[dist.rank()])
  m = reshape(tensor(rows[dist.rank()]), [3, 2])
  [all_reduce(x).tolist(), all_reduce(x, "max").tolist(), all_gather(x).tolist(), reduce_scatter(m).tolist(),
   broadcast(x * 2, src=2).tolist(), barrier()]
}
for mode in ["ok1"] {
  r = dist.run(step, mode, data, rows)
  for i in 0..3 { print("R", mode, i, r[i]) }
}
# a desync: the command fails on every rank, and the group works again after
e = if %s { try { dist.exec('if dist.rank() == 0 { all_gather(ones(1)) } else { all_reduce(ones(1)) }'); "none" } catch e { e.message } } else { "skipped" }
print("E", e)
r = dist.run(step, "ok2", data, rows)
for i in 0..3 { print("R", "ok2", i, r[i]) }
dist.stop()
"""


@test
def test_values_and_recovery(name):
    # matching collectives keep their values (against NumPy) with the check on and
    # off, and a session's group works again after a desync was reported
    for env in ({}, {"NABLA_DESYNC": "0"}, {"NABLA_SHM": "0"}):
        data = RNG.standard_normal((3, 6)).round(4)
        rows = RNG.standard_normal((3, 6)).round(4)
        lit = lambda a: "[" + ", ".join("[" + ", ".join(map(repr, map(float, d))) + "]" for d in a) + "]"
        rc, out, err = srun(SESSION % (lit(data), lit(rows), "false" if env.get("NABLA_DESYNC") == "0" else "true"), env=env)
        got = {}
        for l in out.splitlines():
            if l.startswith("R "):
                _, mode, i, rest = l.split(" ", 3)
                got[(mode, int(i))] = rest
        ok = rc == 0 and len(got) == 6
        why = ""
        for (mode, i), rest in got.items():
            nums = [float(v) for v in re.findall(r"-?\d+\.?\d*(?:e-?\d+)?", rest)]
            m = rows.reshape(3, 3, 2).sum(0)
            want = np.concatenate([data.sum(0), data.max(0), data.reshape(-1), m[i].reshape(-1), data[2] * 2])
            if len(nums) != len(want) or not np.allclose(nums, want, atol=1e-4):
                ok = False; why = f"{mode} rank {i}: got {rest} want {want}"
        emsg = next((l for l in out.splitlines() if l.startswith("E ")), "")
        want_e = "none" if env.get("NABLA_DESYNC") == "0" else "rank 0 called all_gather(f32[*])"
        if env.get("NABLA_DESYNC") == "0":
            ok = ok and emsg == "E skipped"   # without the check a desync waits out the timeout (test_dist.py's collective_timeout)
        else:
            ok = ok and want_e in emsg and "ranks 1,2 called all_reduce(op=sum, f32[1])" in emsg
        report(f"{name}_{'_'.join(k + v for k, v in env.items()) or 'default'}", ok, f"rc={rc} {why} E={emsg!r} out={out[-1500:]!r} err={err[-1500:]!r}")


dutil.finish()
