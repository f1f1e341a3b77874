#!/usr/bin/python3
"""tests/dist: hierarchical collectives (dist/dhier.c) — groups spanning
several hosts run shared memory within each host and TCP across hosts.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_hier.py
One line per test ("PASS: name" / "FAIL: name: why"); exit 1 on any failure.
Hosts are simulated on this machine with the documented test-only override
NABLA_TEST_HOSTS=h0,h1,... (rank i's host id); the real multi-host runs use
the namespace harness.  Every collective's values are checked against NumPy
on fresh random inputs, for several placements: 3 hosts x 2 ranks (striped),
ranks interleaved across hosts, uneven hosts (one leader per host), one rank
per host, and the flat ring (NABLA_HIER=0) as the reference path;
all_gather both striped (hosts of one size) and through the leaders
(NABLA_HIER_GATHER=leader, and uneven hosts).
"""
import ast, json, os, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, report, sanitizer_check, script, test  # noqa: E402

RNG = np.random.default_rng()

# each rank: its inputs from data files, its results as JSON lines on stdout (via dist.run)
BODY = r"""
import dist
dist.start(%(n)d)
r = dist.run(fn(dir) {
  k = dist.rank()
  x = load_npy(dir + "/x" + str(k) + ".npy")
  xi = load_npy(dir + "/i" + str(k) + ".npy")
  rows = load_npy(dir + "/rows" + str(k) + ".npy")
  big = load_npy(dir + "/big" + str(k) + ".npy")
  out = [["shm", dist_shm()],
    ["sum", all_reduce(x).tolist()], ["max", all_reduce(x, "max").tolist()], ["isum", all_reduce(xi).tolist()],
    ["avg", all_reduce(x, "avg").tolist()],
    ["gather", all_gather(rows).tolist()], ["bcast", broadcast(x, src=%(src)d).tolist()],
    ["rs", reduce_scatter(reshape(x, [%(n)d, -1])).tolist()]]
  save_npy(dir + "/bigout" + str(k) + ".npy", all_reduce(big))
  save_npy(dir + "/bigag" + str(k) + ".npy", all_gather(big))
  save_npy(dir + "/bigbc" + str(k) + ".npy", broadcast(big, src=%(src)d))
  out
}, DIR)
for i in 0..len(r) { for p in r[i] { print("J", i, p[0], p[1]) } }
dist.stop()
"""


def case(name, hosts, env_extra=None, src=None):
    n = len(hosts)
    d = os.path.join(dutil.TMP, name)
    os.makedirs(d, exist_ok=True)
    x = RNG.standard_normal((n, n * 5)).astype(np.float32)
    xi = RNG.integers(-1000, 1000, (n, 7)).astype(np.int64)
    rows = [RNG.standard_normal((int(RNG.integers(1, 4)), 3)).astype(np.float64) for _ in range(n)]
    # > 4 MB per rank: several shared-memory rounds, odd length
    big = RNG.standard_normal((n, 1_300_001)).astype(np.float32)
    for k in range(n):
        np.save(f"{d}/x{k}.npy", x[k]); np.save(f"{d}/i{k}.npy", xi[k]); np.save(f"{d}/rows{k}.npy", rows[k]); np.save(f"{d}/big{k}.npy", big[k])
    src = n - 1 if src is None else src
    env = dict(os.environ, NABLA_TEST_HOSTS=",".join(hosts), **(env_extra or {}))
    src_code = BODY % {"n": n, "src": src}
    src_code = src_code.replace("}, DIR)", "}, %s)" % json.dumps(d))
    p = subprocess.run([NABLA, script(src_code, f"hier_{name}.nbl")], capture_output=True, text=True, timeout=300, env=env)
    sanitizer_check(p.stderr)
    got = {}
    for l in p.stdout.splitlines():
        if l.startswith("J "):
            _, k, key, val = l.split(" ", 3)
            got.setdefault(int(k), {})[key] = ast.literal_eval(val.replace("true", "True").replace("false", "False"))
    got = [got[k] for k in sorted(got)]
    if p.returncode != 0 or len(got) != n:
        return False, f"rc={p.returncode} got {len(got)} results; err={p.stderr[-2000:]!r}"
    xs = x.astype(np.float64)
    want = {
        "sum": xs.sum(0), "max": xs.max(0), "isum": xi.sum(0), "avg": xs.mean(0),
        "gather": np.concatenate(rows), "bcast": xs[src],
    }
    bigsum = big.astype(np.float64).sum(0)
    first = None
    for k, o in enumerate(got):
        for key, wv in want.items():
            if not np.allclose(np.array(o[key], dtype=np.float64), wv, rtol=1e-5, atol=1e-4):
                return False, f"rank {k} {key}: got {o[key]} want {wv.tolist()}"
        rs = xs.reshape(n, n, -1).sum(0)[k]
        if not np.allclose(np.array(o["rs"]).reshape(-1), rs.reshape(-1), rtol=1e-5, atol=1e-4):
            return False, f"rank {k} reduce_scatter: got {o['rs']} want {rs.tolist()}"
        bo = np.load(f"{d}/bigout{k}.npy")
        if not np.allclose(bo, bigsum, rtol=1e-4, atol=1e-3):
            return False, f"rank {k} big all_reduce: max err {np.abs(bo - bigsum).max()}"
        if first is None:
            first = bo
        elif not np.array_equal(first, bo):   # data-parallel replicas must stay bit-identical
            return False, f"rank {k}'s all_reduce differs in its bits from rank 0's"
        if not np.array_equal(np.load(f"{d}/bigag{k}.npy"), big.reshape(-1)):
            return False, f"rank {k} big all_gather differs"
        if not np.array_equal(np.load(f"{d}/bigbc{k}.npy"), big[src]):
            return False, f"rank {k} big broadcast differs"
        e = env_extra or {}
        want_shm = e.get("NABLA_HIER") != "0" and e.get("NABLA_SHM") != "0" and len(set(hosts)) < n
        if o["shm"] != want_shm:
            return False, f"rank {k}: dist_shm() is {o['shm']}, expected {want_shm}"
    return True, ""


for name, hosts, extra, src in [
    ("3x2", ["a", "a", "b", "b", "c", "c"], None, 3),
    ("interleaved", ["a", "b", "c", "a", "b", "c"], None, 4),
    ("2x3", ["a", "a", "b", "a", "b", "b"], None, 2),            # 3 stripes; packed order is not rank order
    ("3x2_leader_gather", ["a", "a", "b", "b", "c", "c"], {"NABLA_HIER_GATHER": "leader"}, 0),
    ("uneven", ["a", "a", "a", "b", "b", "c"], None, 1),
    ("one_per_host", ["a", "b", "c"], None, 0),
    ("flat_ring", ["a", "a", "b", "b", "c", "c"], {"NABLA_HIER": "0"}, 2),
    ("tcp_only", ["a", "a", "b", "b"], {"NABLA_SHM": "0"}, 1),
]:
    def run_case(tname, hosts=hosts, extra=extra, src=src):
        ok, why = case(tname, hosts, extra, src)
        report(tname, ok, why)
    run_case.__name__ = "test_" + name
    test(run_case)

GROUPS = r"""
import dist
dist.start(6)
fn body(dir, round) {
  k = dist.rank()
  x = load_npy(dir + "/g" + str(k) + ".npy")
  ga = dist.new_group([0, 1])          # host a: shared memory
  gb = dist.new_group([5, 4])          # host c, in another order: shared memory
  gx = dist.new_group([1, 2, 3])       # spans hosts a and b: its own hierarchy (shared memory on b)
  g = if k < 2 { ga } else if k >= 4 { gb } else { nil }
  out = []
  if g != nil {
    out = [["gsum", all_reduce(x, group=g).tolist()], ["gmax", all_reduce(x, "max", group=g).tolist()],
           ["gag", all_gather(x, group=g).tolist()], ["gbc", broadcast(x, src=1, group=g).tolist()],
           ["grs", reduce_scatter(x, group=g).tolist()], ["gshm", dist_shm(nil, g)]]
    barrier(group=g)
  }
  if k >= 1 and k <= 3 {
    out = out + [["xsum", all_reduce(x, group=gx).tolist()], ["xmax", all_reduce(x, "max", group=gx).tolist()],
                 ["xag", all_gather(x, group=gx).tolist()], ["xbc", broadcast(x, src=0, group=gx).tolist()],
                 ["xrs", reduce_scatter(x[0:3], group=gx).tolist()], ["xshm", dist_shm(nil, gx)]]
  }
  gu = dist.new_group([4, 2, 5, 3])    # hosts c, b, c, b: two ranks on each, striped across them
  if k >= 2 {
    out = out + [["usum", all_reduce(x, group=gu).tolist()], ["urs", reduce_scatter(x, group=gu).tolist()],
                 ["uag", all_gather(x, group=gu).tolist()], ["ushm", dist_shm(nil, gu)]]
  }
  out
}
for round in 1..3 {
  r = dist.run(body, DIR, round)
  for i in 0..len(r) { for p in r[i] { print("J", round, i, p[0], p[1]) } }
  if round == 1 {   # a failed collective breaks the group: the next command reconnects it, segments are made again
    e = try { dist.exec('if dist.rank() == 0 { all_gather(ones(1)) } else { all_reduce(ones(1)) }'); "none" } catch e { e.message }
    print("E", e)
  }
}
dist.stop()
"""


@test
def test_subgroups(name):
    # sub-groups whose members share a (simulated) host use their own segment; values against NumPy
    d = os.path.join(dutil.TMP, name)
    os.makedirs(d, exist_ok=True)
    x = RNG.standard_normal((6, 4, 3)).astype(np.float64)
    for k in range(6):
        np.save(f"{d}/g{k}.npy", x[k])
    env = dict(os.environ, NABLA_TEST_HOSTS="a,a,b,b,c,c")
    p = subprocess.run([NABLA, script(GROUPS.replace("DIR", json.dumps(d)), "hier_groups.nbl")], capture_output=True, text=True, timeout=300, env=env)
    sanitizer_check(p.stderr)
    got = {}
    for l in p.stdout.splitlines():
        if l.startswith("J "):
            _, rnd, k, key, val = l.split(" ", 4)
            got[(int(rnd), int(k), key)] = ast.literal_eval(val.replace("true", "True").replace("false", "False"))
    why = "" if p.returncode == 0 else f"rc={p.returncode} err={p.stderr[-1500:]!r}"
    if "collective desync" not in p.stdout:
        why = why or f"no desync reported: {p.stdout[-800:]!r}"
    for rnd in (1, 2):
        for members in ([0, 1], [5, 4]):
            xs = x[members]
            for pos, k in enumerate(members):
                want = {"gsum": xs.sum(0), "gmax": xs.max(0), "gag": np.concatenate(xs), "gbc": xs[1],
                        "grs": np.array_split(xs.sum(0), 2)[pos]}
                for key, wv in want.items():
                    v = got.get((rnd, k, key))
                    if v is None or not np.allclose(np.array(v, dtype=np.float64), wv, rtol=1e-9, atol=1e-9):
                        why = why or f"round {rnd} rank {k} {key}: got {v} want {wv.tolist()}"
                if got.get((rnd, k, "gshm")) is not True:
                    why = why or f"round {rnd} rank {k}: its one-host group is not on shared memory"
        # the group [1, 2, 3] spans hosts a (rank 1) and b (ranks 2, 3): its own hierarchy
        xs = x[[1, 2, 3]]
        for pos, k in enumerate((1, 2, 3)):
            want = {"xsum": xs.sum(0), "xmax": xs.max(0), "xag": np.concatenate(xs), "xbc": xs[0],
                    "xrs": xs[:, 0:3].sum(0)[pos]}
            for key, wv in want.items():
                v = got.get((rnd, k, key))
                if v is None or not np.allclose(np.array(v, dtype=np.float64), wv, rtol=1e-9, atol=1e-9):
                    why = why or f"round {rnd} rank {k} cross-host group {key}: got {v} want {wv.tolist()}"
            if got.get((rnd, k, "xshm")) is not True:
                why = why or f"round {rnd} rank {k}: the group spanning hosts is not on its hierarchy"
        us = x[[4, 2, 5, 3]]
        for pos, k in enumerate((4, 2, 5, 3)):
            want = {"usum": us.sum(0), "urs": us.sum(0)[pos:pos + 1], "uag": np.concatenate(us)}
            for key, wv in want.items():
                v = got.get((rnd, k, key))
                if v is None or np.array(v).shape != wv.shape or not np.allclose(np.array(v, dtype=np.float64), wv, rtol=1e-9, atol=1e-9):
                    why = why or f"round {rnd} rank {k} striped group {key}: got {v} want {wv.tolist()}"
            if got.get((rnd, k, "ushm")) is not True:
                why = why or f"round {rnd} rank {k}: the group [4, 2, 5, 3] is not on its hierarchy"
    report(name, not why, why)


dutil.finish()
