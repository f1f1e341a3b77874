#!/usr/bin/python3
"""tests/dist: dist.sweep (hyperparameter search through dist.submit;
stdlib/dist.nbl) on 3 local CPU workers.

A synthetic objective with a known ranking (score = q + c / budget, q drawn
per trial): the configurations are the seeded draws recomputed here, ASHA's
decisions in deterministic mode are those of a reference implementation
here (which trials stop at which rung), the table is the same for the same
seed, completion-order ASHA keeps its invariants, checkpoints come back to
promoted trials, grid/random run every trial fully, and a worker killed
mid-trial neither loses the trial nor stops the sweep.
Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_sweep.py
"""
import json, os, signal, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, lines_with, report, sanitizer_check, script, test  # noqa: E402

import random
SEED = int(os.environ.get("SWEEP_SEED") or random.randrange(1, 1 << 30))   # fresh each run; printed on failure

# trial(config, budget, state): the score falls with the budget, the ranking
# is the one of q; the state counts the rungs the trial went through
TRIAL = """
fn trial(c, budget, state) {
  n = if state == nil { 1 } else { state.calls + 1 }
  {score: c.q + 0.5 / budget, state: {calls: n, last: budget}}
}
"""


def minstd_configs(seed, n, space_keys):
    """the sweep's draws (stdlib/dist.nbl _minstd, _sample_one), for {q: uniform [0, 1], lr: loguniform}"""
    s = (seed % 2147483646 + 2147483646) % 2147483646 + 1
    out = []
    for _ in range(n):
        c = {}
        for k, spec in space_keys:
            s = (s * 48271) % 2147483647
            u = s / 2147483647
            if spec[0] == "uniform":
                c[k] = spec[1] + u * (spec[2] - spec[1])
            else:
                import math
                lo, hi = math.log(spec[1]), math.log(spec[2])
                c[k] = math.exp(lo + u * (hi - lo))
        out.append(c)
    return out


def asha_ref(qs, conc, rungs, eta):
    """ASHA deciding in submission order (deterministic=true): the rung each trial reaches"""
    nr = len(rungs)
    done = [[] for _ in rungs]
    promoted = [set() for _ in rungs]
    reached = {}
    state = {"next": 0}

    def next_job():
        for k in range(nr - 2, -1, -1):
            ranked = sorted(done[k], key=lambda p: p[1])
            for t, _ in ranked[:len(ranked) // eta]:
                if t not in promoted[k]:
                    promoted[k].add(t)
                    return (t, k + 1)
        if state["next"] < len(qs):
            state["next"] += 1
            return (state["next"] - 1, 0)
        return None

    inflight = []
    while True:
        while len(inflight) < conc:
            j = next_job()
            if j is None:
                break
            inflight.append(j)
        if not inflight:
            break
        t, k = inflight.pop(0)
        done[k].append((t, qs[t] + 0.5 / rungs[k]))
        reached[t] = k
    return reached


def run(src, timeout=240):
    p = subprocess.run([NABLA, script(src)], capture_output=True, text=True, timeout=timeout)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def sweep_src(extra, seed=SEED, n=3):
    return f"""
import dist
import json
dist.start({n})
{TRIAL}
space = {{q: {{uniform: [0, 1]}}, lr: {{loguniform: [0.0001, 0.1]}}, width: 32}}
r = dist.sweep(space, trial, {extra}, seed={seed})
print("ROWS", json.format(r.rows))
print("RUNGS", json.format(r.rungs))
print("STATS", json.format(r.stats))
print(r.table())
"""


def parse(out):
    return (json.loads(lines_with("ROWS ", out)[0]), json.loads(lines_with("RUNGS ", out)[0]),
            json.loads(lines_with("STATS ", out)[0]))


@test
def test_asha_deterministic_matches_reference(name):
    n, eta = 27, 3
    rc, out, err = run(sweep_src(f'scheduler="asha", num_samples={n}, budget=9, min_budget=1, eta={eta}, deterministic=true, max_concurrent=3'))
    rows, rungs, stats = parse(out)
    # [0.0001, 0.1] is an f32 tensor literal: its bounds are the f32 roundings
    cfg = minstd_configs(SEED, n, [("q", ("uniform", 0, 1)), ("lr", ("loguniform", float(np.float32(0.0001)), float(np.float32(0.1))))])
    byid = {r["trial"]: r for r in rows}
    reached = asha_ref([c["q"] for c in cfg], 3, [1, 3, 9], eta)
    ok = rc == 0 and rungs == [1, 3, 9] and len(rows) == n
    why = []
    for t in range(n):
        r = byid[t]
        if abs(r["config"]["q"] - cfg[t]["q"]) > 1e-15 or abs(r["config"]["lr"] - cfg[t]["lr"]) > 1e-13 * cfg[t]["lr"] or r["config"]["width"] != 32:
            why.append(f"config {t}: {r['config']} vs {cfg[t]}")
        k = reached[t]
        if r["budget"] != rungs[k] or len(r["scores"]) != k + 1:
            why.append(f"trial {t} reached budget {r['budget']}, reference {rungs[k]}")
        if abs(r["score"] - (cfg[t]["q"] + 0.5 / rungs[k])) > 1e-12:
            why.append(f"trial {t} score {r['score']}")
        if r["status"] != ("completed" if k == 2 else "stopped"):
            why.append(f"trial {t} status {r['status']}")
    # the known ranking: the best q is among the completed ones, the worst stops at
    # the first rung (how many go on past their rung's best 1/eta depends on the
    # order results came in: the reference decides that, above)
    best = min(range(n), key=lambda t: cfg[t]["q"])
    worst = max(range(n), key=lambda t: cfg[t]["q"])
    completed = [r for r in rows if r["status"] == "completed"]
    ok = ok and not why and byid[best]["status"] == "completed" and byid[worst]["budget"] == 1
    ok = ok and rows[0]["trial"] == min((r["trial"] for r in completed), key=lambda t: cfg[t]["q"])
    ok = ok and stats["failed"] == 0 and stats["finished"] == sum(len(r["scores"]) for r in rows)
    report(name, ok, f"rc={rc} seed={SEED} why={why[:4]} completed={[(r['trial'], r['score']) for r in completed]} first={rows[:1]} stats={stats} err={err[-600:]!r}")


@test
def test_table_deterministic_by_seed(name):
    extra = 'scheduler="asha", num_samples=12, budget=9, eta=3, deterministic=true'
    tables = []
    for _ in range(2):
        rc, out, err = run(sweep_src(extra))
        tables.append((rc, [l for l in out.splitlines() if not l.startswith("STATS")]))
    rc3, out3, err3 = run(sweep_src(extra, seed=SEED + 1))
    ok = tables[0][0] == 0 and tables[1][0] == 0 and tables[0][1] == tables[1][1] and rc3 == 0
    ok = ok and lines_with("ROWS ", out3)[0] != [l for l in tables[0][1] if l.startswith("ROWS ")][0][5:]
    report(name, ok, f"seed={SEED} {tables[0][1][-3:]} vs {tables[1][1][-3:]} err={err3[-400:]!r}")


@test
def test_asha_async_invariants(name):
    # completion order (the default): which trial goes on depends on timing, but
    # ASHA's bounds hold and the worst trial never goes on
    n, eta = 18, 3
    rc, out, err = run(sweep_src(f'scheduler="asha", num_samples={n}, budget=9, eta={eta}'))
    rows, rungs, stats = parse(out)
    qs = {r["trial"]: r["config"]["q"] for r in rows}
    byid = {r["trial"]: r for r in rows}
    at = [[t for t in qs if len(byid[t]["scores"]) > k] for k in range(3)]
    # ASHA's guarantee at the end: the best 1/eta of each rung's results went on
    # (others may have gone on too, promoted while they were among the best so far)
    tops_promoted = all(t in at[k + 1] for k in range(2) for t in sorted(at[k], key=qs.get)[:len(at[k]) // eta])
    best, worst = min(qs, key=qs.get), max(qs, key=qs.get)
    ok = (rc == 0 and len(at[0]) == n and len(at[1]) < n and 1 <= len(at[2]) < len(at[1]) and tops_promoted
          and byid[best]["status"] == "completed" and byid[worst]["budget"] == 1
          and stats["promotions"] == len(at[1]) + len(at[2])
          and all(r["status"] == ("completed" if len(r["scores"]) == 3 else "stopped") for r in rows))
    at = [len(a) for a in at]
    report(name, ok, f"rc={rc} per rung {at} err={err[-600:]!r}")


@test
def test_checkpoints_and_grid_random(name):
    ck = os.path.join(TMP, "ckpt")
    rc, out, err = run(f"""
import dist
import json
dist.start(2)
{TRIAL}
r = dist.sweep({{q: {{uniform: [0, 1]}}}}, trial, num_samples=9, budget=9, eta=3, deterministic=true, checkpoint_dir="{ck}")
# the state a promoted trial got back: its calls count the rungs it ran
st = map(r.rows, fn(row) list(row.trial, len(row.scores), row.state.calls, len(read_bytes("{ck}/trial_{{row.trial}}.ckpt")), len(serialize(row.state))))
print("CK", json.format(st))
g = dist.sweep({{a: [1, 2, 3], b: [0.5, 0.25], c: "x"}}, fn(c, budget, s) c.a * c.b * budget, scheduler="grid", budget=4, mode="max")
print("GRID", json.format(map(g.rows, fn(row) list(row.config.a, row.config.b, row.config.c, row.score, row.budget, row.status))))
q = dist.sweep({{x: [10, 20, 30, 40]}}, fn(c, budget, s) c.x + budget, scheduler="random", num_samples=5, budget=2)
print("RANDOM", json.format(map(q.rows, fn(row) list(row.config.x, row.score, row.status))))
r.plot()
dist.stop()
""")
    ck_rows = json.loads(lines_with("CK ", out)[0])
    grid = json.loads(lines_with("GRID ", out)[0])
    rnd = json.loads(lines_with("RANDOM ", out)[0])
    want_grid = sorted([[a, b, "x", a * b * 4, 4, "completed"] for a in (1, 2, 3) for b in (0.5, 0.25)], key=lambda r: -r[3])
    ok = (rc == 0 and len(ck_rows) == 9 and all(n == calls and fsize == ssize for _, n, calls, fsize, ssize in ck_rows)
          and any(r[1] == 3 for r in ck_rows) and grid == want_grid
          and len(rnd) == 5 and all(x in (10, 20, 30, 40) and s == x + 2 and st == "completed" for x, s, st in rnd)
          and [s for _, s, _ in rnd] == sorted(s for _, s, _ in rnd)
          and "dist.sweep (asha): score by budget" in out)
    report(name, ok, f"rc={rc} ck={ck_rows} grid={grid} rnd={rnd} err={err[-600:]!r}")


@test
def test_worker_killed_mid_trial(name):
    mark = os.path.join(TMP, "kill-mark")
    path = script(f"""
import dist
import json
dist.start(3)
eprint("PIDS", join(map(dist.workers(), fn(w) str(w.pid)), " "))
fn trial(c, budget, state) {{
  if c.q == 2 and not exists("{mark}") {{
    write_text("{mark}", str(dist.rank()))
    t = clock(); while clock() - t < 120 {{ }}
  }}
  c.q * 10 + budget
}}
r = dist.sweep({{q: [1, 2, 3, 4]}}, trial, scheduler="grid", budget=1)
print("ROWS", json.format(map(r.rows, fn(row) list(row.config.q, row.status, row.score))))
print("STATS", json.format(r.stats))
print("ALIVE", len(filter(dist.workers(), fn(w) w.alive)))
dist.stop()
""", "sweepkill.nbl")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line, t = "", time.time()
    while not line.startswith("PIDS") and time.time() - t < 60:
        line = p.stderr.readline()
    pids = [int(x) for x in line.split()[1:]]
    while not os.path.exists(mark) and time.time() - t < 60:
        time.sleep(0.05)
    time.sleep(0.2)
    pid = pids[int(open(mark).read())]
    os.kill(pid, signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    sanitizer_check(err)
    rows = json.loads(lines_with("ROWS ", out)[0])
    stats = json.loads(lines_with("STATS ", out)[0])
    ok = (p.returncode == 0 and sorted(rows) == sorted([[q, "completed", q * 10 + 1] for q in (1, 2, 3, 4)])
          and stats["reruns"] == 1 and stats["failed"] == 0 and "ALIVE 2" in out)
    report(name, ok, f"rc={p.returncode} rows={rows} stats={stats} err={err[-800:]!r}")


dutil.finish()
