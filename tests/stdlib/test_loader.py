#!/usr/bin/python3
"""NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
data.loader (stdlib/data.nbl, lang/lib/lloader.c) on fresh random data:
order, coverage and determinism across workers = 0..3, drop_last, samplers,
function / {size, get} / iterator data sets with collate, a worker's error
with its traceback, Ctrl-C (no hang, no orphan worker), the distributed
sampler against torch's DistributedSampler, pinned asynchronous copies on the
emulated device (counted by cuda.stats()), and prefetch overlapping a slow
step shown by counting the batches ready (never by timing).
"""
import atexit
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASAN = os.environ.get("NABLA_ASAN") == "1"
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build", "nabla")
BUILD = os.environ.get("NABLA_BUILD") or os.path.join(ROOT, "build")
SUFFIX = " [asan]" if ASAN else ""
TMP = tempfile.mkdtemp(prefix="nabla-loader-")
atexit.register(shutil.rmtree, TMP, True)
ENV = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"), NO_COLOR="1")
FAILED = False
SEED = int.from_bytes(os.urandom(4), "little")
rng = random.Random(SEED)


def report(name, ok, why=""):
    global FAILED
    FAILED |= not ok
    why = " ".join(str(why).split())
    print(f"{'PASS' if ok else 'FAIL'}: {name}{SUFFIX}" + ("" if ok else f": {why[:1500]} (seed {SEED})"), flush=True)


def run(src, env=ENV, timeout=240):
    p = os.path.join(TMP, "prog.nbl")
    with open(p, "w") as f:
        f.write("import data\n" + src)
    r = subprocess.run([NABLA, p], capture_output=True, timeout=timeout, env=env)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def run_json(name, src, env=ENV):
    """runs src, whose last output line is json_format(result); the result or None (reported)"""
    rc, so, se = run(src, env)
    if rc != 0:
        report(name, False, f"rc {rc}: {se[-800:]} {so[-300:]}")
        return None
    return json.loads(so.strip().splitlines()[-1])


# the per-epoch index order of every batch, for a record data set whose
# y is 0..n-1 (so a batch's y are its sample indices) and whose x rows are
# checked against x[y] in nabla (the gather is right)
ORDER_SRC = """
n = {n}
x = randn(n, 3)
ds = {{x: x, y: arange(n).to("i64")}}
out = {{}}
for w in {workers} {{
  ld = data.loader(ds, batch_size={bs}, shuffle=true, drop_last={drop}, workers=w, prefetch=2, seed={seed})
  eps = list()
  for e in 0..3 {{
    bs = list()
    for b in ld.epoch() {{
      if not all(b.x == x[b.y]) {{ error("batch rows do not match their indices") }}
      push(bs, b.y.tolist())
    }}
    push(eps, bs)
  }}
  ld.close()
  out["w{{w}}"] = eps
}}
out.perm0 = loader_permutation(n, {seed}, 0).tolist()
out.perm1 = loader_permutation(n, {seed}, 1).tolist()
out.len = ld.len
print(json_format(out))
"""


def t_order():
    n, bs, seed = rng.randrange(50, 120), rng.randrange(3, 11), rng.randrange(1000)
    for drop in (False, True):
        name = f"order_coverage_determinism_workers_0_1_2_3{'_drop_last' if drop else ''}"
        r = run_json(name, ORDER_SRC.format(n=n, bs=bs, seed=seed, drop="true" if drop else "false",
                                            workers="list(0, 1, 2, 3)"))
        if r is None:
            continue
        nb = n // bs if drop else -(-n // bs)
        why = ""
        base = r["w0"]
        for w in ("w1", "w2", "w3"):
            if r[w] != base:
                why += f"{w} differs from workers=0; "
        for e, batches in enumerate(base):
            flat = [i for b in batches for i in b]
            if len(batches) != nb:
                why += f"epoch {e}: {len(batches)} batches, expected {nb}; "
            if any(len(b) != bs for b in batches[:-1]) or (drop and batches and len(batches[-1]) != bs):
                why += f"epoch {e}: a batch of the wrong size; "
            want = sorted(range(n)) if not drop else None
            if not drop and sorted(flat) != want:
                why += f"epoch {e}: not every example exactly once; "
            if drop and (len(set(flat)) != len(flat) or len(flat) != nb * bs):
                why += f"epoch {e}: drop_last coverage wrong; "
        if base[0] == base[1]:
            why += "epoch 0 and 1 have the same order; "
        if [i for b in base[0] for i in b] != r["perm0"][:nb * bs if drop else n]:
            why += "epoch 0 is not loader_permutation(n, seed, 0); "
        if [i for b in base[1] for i in b] != r["perm1"][:nb * bs if drop else n]:
            why += "epoch 1 is not loader_permutation(n, seed, 1); "
        if sorted(r["perm0"]) != list(range(n)):
            why += "loader_permutation is not a permutation; "
        if r["len"] != nb:
            why += f"ld.len {r['len']} != {nb}; "
        report(name, not why, why)
    # the same seed in a second process gives the same order; another seed does not
    r1 = run_json("order_seed_reproducible", f"print(json_format(list(loader_permutation(1000, 7, 3).tolist(), loader_permutation(1000, 8, 3).tolist())))")
    r2 = run_json("order_seed_reproducible", f"print(json_format(loader_permutation(1000, 7, 3).tolist()))")
    if r1 is not None and r2 is not None:
        report("order_seed_reproducible", r1[0] == r2 and r1[1] != r2, "")


def t_sampler_and_kinds():
    n = rng.randrange(20, 40)
    samp = [rng.randrange(n) for _ in range(rng.randrange(10, 30))]
    src = f"""
n = {n}
x = randn(n, 2)
ds = list(x, arange(n).to("i64"))
res = {{}}
for w in list(0, 2) {{
  # a sampler list (with repeats): its order exactly
  got = list()
  for b in data.loader(ds, batch_size=4, sampler=list({', '.join(map(str, samp))}), workers=w).epoch(0) {{ push(got, b[1].tolist()) }}
  res["list{{w}}"] = got
  # a sampler function of the epoch
  got = list()
  for b in data.loader(ds, batch_size=3, sampler=fn(e) arange(e, n).to("i64"), workers=w).epoch(5) {{ push(got, b[1].tolist()) }}
  res["fn{{w}}"] = got
  # a function data set with size= and the default collate (records, numbers, tensors)
  got = list()
  f = fn(i) {{ {{id: i, sq: i * i, v: x[i]}} }}
  for b in data.loader(f, size=n, batch_size=5, workers=w).epoch(0) {{
    if not all(b.v == x[b.id.to("i64")]) {{ error("function data set: rows wrong") }}
    push(got, list(b.id.tolist(), b.sq.tolist()))
  }}
  res["func{{w}}"] = got
  # {{size, get}} with a collate of our own
  got = list()
  for b in data.loader({{size: n, get: fn(i) i}}, batch_size=6, collate=fn(s) join(map(s, str), "-"), workers=w).epoch(0) {{ push(got, b) }}
  res["getter{{w}}"] = got
  # an iterator data set (drop_last drops the short tail)
  k = {{i: 0}}
  it = {{__next: fn(self) {{ k.i += 1; if k.i > {n} {{ nil }} else {{ k.i * 10 }} }}}}
  got = list()
  for b in data.loader(it, batch_size=4, drop_last=true, workers=w).epoch(0) {{ push(got, b.tolist()) }}
  res["iter{{w}}"] = got
  # a tensor data set with a collate that transforms the gathered batch
  got = list()
  for b in data.loader(arange(n).to("i64"), batch_size=7, collate=fn(b) b * 2, workers=w).epoch(0) {{ push(got, b.tolist()) }}
  res["tcol{{w}}"] = got
}}
print(json_format(res))
"""
    r = run_json("sampler_and_dataset_kinds", src)
    if r is None:
        return
    chunks = lambda xs, k: [xs[i:i + k] for i in range(0, len(xs), k)]
    want = {
        "list": chunks(samp, 4),
        "fn": chunks(list(range(5, n)), 3),
        "func": [[c, [i * i for i in c]] for c in chunks(list(range(n)), 5)],
        "getter": ["-".join(map(str, c)) for c in chunks(list(range(n)), 6)],
        "iter": [c for c in chunks([10 * i for i in range(1, n + 1)], 4) if len(c) == 4],
        "tcol": [[2 * i for i in c] for c in chunks(list(range(n)), 7)],
    }
    why = ""
    for k, v in want.items():
        for w in (0, 2):
            if r[f"{k}{w}"] != v:
                why += f"{k} workers={w}: {r[f'{k}{w}']} != {v}; "
    report("sampler_and_dataset_kinds", not why, why)


def t_errors():
    src = """
fn load_one(i) {
  if i == 37 { error("bad sample {i}") }
  zeros(2)
}
ld = data.loader(load_one, size=60, batch_size=8, workers=WORKERS)
n = 0
for b in ld.epoch(0) { n += 1 }
"""
    for w in (0, 2):
        rc, so, se = run(src.replace("WORKERS", str(w)))
        need = ["bad sample 37", "load_one"] + (["worker 0 failed on batch 4"] if w else [])
        ok = rc != 0 and all(s in se for s in need)
        report(f"error_reaches_loop_with_traceback_workers_{w}", ok, f"rc {rc}: {se[-900:]}")
    # a worker that dies (killed by a signal) is reported, not waited on forever
    rc, so, se = run("""
ld = data.loader(fn(i) { if i == 9 { kill_me() }; i }, size=20, batch_size=5, workers=1)
for b in ld.epoch(0) { }
""".replace("kill_me()", 'error("x")'))
    report("worker_error_closes_pool", rc != 0 and "worker 0 failed on batch 1" in se, se[-500:])
    # a worker's print reaches the process's stdout (flushed before its batch is sent)
    rc, so, se = run("""
ld = data.loader(fn(i) { print("worker saw {i}"); i }, size=6, batch_size=3, workers=2)
for b in ld.epoch(0) { }
ld.close()
""")
    report("worker_print_reaches_stdout", rc == 0 and all(f"worker saw {i}" in so for i in range(6)), f"rc {rc} {so[-300:]} {se[-300:]}")
    # bad arguments: clear errors
    cases = [
        ("data.loader(zeros(4), batch_size=0)", "batch_size must be an int >= 1"),
        ("data.loader(zeros(4), workers=-1)", "workers must be an int in 0..64"),
        ("data.loader(zeros(4), shuffle=true, sampler=list(1))", "give sampler or shuffle"),
        ("data.loader(fn(i) i)", "needs size="),
        ("data.loader(list(zeros(3), zeros(4)))", "differ in length"),
        ("data.loader(zeros(4), pin_memory=true)", "give device="),
        ("for b in data.loader(zeros(4), sampler=list(9)).epoch(0) { }", "outside 0..3"),
    ]
    bad = ""
    for code, want in cases:
        rc, so, se = run(code)
        if rc == 0 or want not in se:
            bad += f"[{code}] rc {rc} {se[-200:]}; "
    report("bad_arguments", not bad, bad)
    # an old epoch's iterator after a new one started is an error, not a mixed stream
    rc, so, se = run("""
ld = data.loader(zeros(20), batch_size=2, workers=2)
a = ld.epoch(0)
(a.__next)(a)
b = ld.epoch(1)
(a.__next)(a)
""")
    report("stale_iterator_refused", rc != 0 and "replaced by a newer one" in se, se[-300:])
    # an epoch left early (break) restarts cleanly: the next epoch is whole and in order
    r = run_json("break_then_next_epoch", """
ld = data.loader(arange(30).to("i64"), batch_size=4, shuffle=true, workers=2, seed=3)
for b in ld.epoch(0) { break }
got = list()
for b in ld.epoch(1) { push(got, b.tolist()) }
print(json_format(list(got, loader_permutation(30, 3, 1).tolist())))
""")
    if r is not None:
        flat = [i for b in r[0] for i in b]
        report("break_then_next_epoch", flat == r[1], f"{flat} vs {r[1]}")


def t_worker_augmentation():
    # a random augmentation in the workers draws the same numbers whichever
    # worker makes a batch: workers = 1, 2, 3 give identical batches
    r = run_json("random_augmentation_same_for_any_workers", """
out = list()
for w in list(1, 2, 3) {
  ld = data.loader(zeros(40, 3), batch_size=6, shuffle=true, collate=fn(b) b + rand(b.shape[0], 3), workers=w, seed=5)
  got = list()
  for e in 0..2 { for b in ld.epoch(e) { push(got, b.tolist()) } }
  ld.close()
  push(out, got)
}
print(json_format(out))
""")
    if r is not None:
        ok = r[0] == r[1] == r[2] and r[0][0] != r[0][1] and len(r[0]) == 14
        report("random_augmentation_same_for_any_workers", ok, f"{len(r[0])} batches; equal {r[0] == r[1]}, {r[1] == r[2]}")


def t_files():
    import numpy as np
    arrs = [np.random.default_rng(SEED + i).normal(size=(3, 2)).astype(np.float32) for i in range(11)]
    paths = []
    for i, a in enumerate(arrs):
        paths.append(os.path.join(TMP, f"s{i}.npy"))
        np.save(paths[-1], a)
    out = os.path.join(TMP, "files_out.npy")
    plist = ", ".join("'" + p + "'" for p in paths)
    rc, so, se = run(f"""
ld = data.loader(data.files(list({plist})), batch_size=4, workers=2)
got = list()
for b in ld.epoch(0) {{ push(got, b) }}
save_npy('{out}', concat(got))
print(ld.len)
""")
    ok = rc == 0 and so.strip() == "3" and np.array_equal(np.load(out), np.stack(arrs))
    report("files_dataset_read_in_workers", ok, f"rc {rc} {so[-200:]} {se[-400:]}")


def children_of(pid):
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
                if int(st.rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def t_interrupt():
    p = os.path.join(TMP, "intr.nbl")
    with open(p, "w") as f:
        f.write("""import data
fn slow(i) { t0 = clock(); while clock() - t0 < 0.2 { }; i }
ld = data.loader(slow, size=1000, batch_size=4, workers=2)
print("started")
for b in ld.epoch(0) { }
print("finished")
""")
    proc = subprocess.Popen([NABLA, p], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, start_new_session=True)
    line = proc.stdout.readline().decode()
    deadline = time.time() + 60
    kids = []
    while time.time() < deadline and len(kids) < 2:
        kids = children_of(proc.pid)
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)   # as a terminal's Ctrl-C: the whole group
    try:
        so, se = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        report("ctrl_c_stops_cleanly", False, "hung after SIGINT")
        return
    alive = [k for k in kids if os.path.exists(f"/proc/{k}") and open(f"/proc/{k}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    se = se.decode("utf-8", "replace")
    ok = line.strip() == "started" and len(kids) == 2 and proc.returncode != 0 and "nterrupt" in se and not alive and b"finished" not in so
    report("ctrl_c_stops_cleanly", ok, f"rc {proc.returncode} kids {kids} alive {alive}: {se[-400:]}")


def t_distributed():
    try:
        import torch
        from torch.utils.data.distributed import DistributedSampler
    except Exception as e:  # noqa: BLE001
        report("distributed_sampler_vs_torch", False, f"torch unavailable: {e}")
        return
    n, world = rng.randrange(10, 40), rng.randrange(2, 5)
    if n % world == 0:
        n += 1
    src = f"""
res = {{}}
for dl in list(false, true) {{
  for sh in list(false, true) {{
    for r in 0..{world} {{
      s = data.distributed_sampler({n}, r, {world}, shuffle=sh, seed=11, drop_last=dl)
      res["{{dl}}-{{sh}}-{{r}}"] = list(s(0).tolist(), s(1).tolist())
    }}
  }}
}}
res.perm = list(loader_permutation({n}, 11, 0).tolist(), loader_permutation({n}, 11, 1).tolist())
# the loader with a rank's sampler: that rank's shard, in batches
got = list()
for b in data.loader(arange({n}).to("i64"), batch_size=3, sampler=data.distributed_sampler({n}, 1, {world}, seed=11)).epoch(1) {{ push(got, b.tolist()) }}
res.loader = got
print(json_format(res))
"""
    r = run_json("distributed_sampler_vs_torch", src)
    if r is None:
        return
    why = ""
    ds = list(range(n))
    for dl in (False, True):
        for e in (0, 1):
            # torch's sampler without shuffling gives the padding/cutting and the striding
            for rank in range(world):
                t = list(DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False, drop_last=dl))
                if r[f"{str(dl).lower()}-false-{rank}"][e] != t:
                    why += f"drop_last={dl} rank {rank}: {r[f'{str(dl).lower()}-false-{rank}'][e]} != torch {t}; "
            # with shuffling: torch's rule applied to our permutation of (seed, epoch)
            perm = r["perm"][e]
            per = -(-(n - world) // world) if dl and n % world else -(-n // world)
            total = per * world
            idx = perm + (perm * (total // n + 1))[: total - n] if total > n else perm[:total]
            shards = [r[f"{str(dl).lower()}-true-{rank}"][e] for rank in range(world)]
            if shards != [idx[rank:total:world] for rank in range(world)]:
                why += f"shuffled shards drop_last={dl} epoch {e} wrong; "
            if len({len(s) for s in shards}) != 1:
                why += "ranks got different lengths; "
    flat = [i for b in r["loader"] for i in b]
    if flat != r["false-true-1"][1]:   # rank 1's shuffled shard of epoch 1, drop_last false
        why += f"loader with a sampler: {flat} != {r['false-true-1'][1]}; "
    report("distributed_sampler_vs_torch", not why, why)


def t_prefetch_overlap():
    # workers=2, prefetch=2: while the loop holds batch 0 and "steps" (does
    # nothing but poll), the workers finish the next 4 batches: ready reaches
    # 4 = workers * prefetch and never passes it.  Taking one lets one more in.
    src = """
fn slow(i) { t0 = clock(); while clock() - t0 < 0.01 { }; i }
ld = data.loader(slow, size=200, batch_size=2, workers=2, prefetch=2)
it = ld.epoch(0)
b0 = (it.__next)(it)
seen = list()
t0 = clock()
while it.ready() < 4 and clock() - t0 < 60 { }
push(seen, it.ready())
t1 = clock()
while clock() - t1 < 0.3 { }
push(seen, it.ready())
b1 = (it.__next)(it)
push(seen, it.ready())
t0 = clock()
while it.ready() < 4 and clock() - t0 < 60 { }
push(seen, it.ready())
ld.close()
print(json_format(list(seen, b0.tolist(), b1.tolist())))
"""
    r = run_json("prefetch_overlaps_a_slow_step", src)
    if r is None:
        return
    seen, b0, b1 = r
    ok = seen[0] == 4 and seen[1] == 4 and seen[2] in (3, 4) and seen[3] == 4 and b0 == [0, 1] and b1 == [2, 3]
    report("prefetch_overlaps_a_slow_step", ok, f"ready counts {seen} (want 4, 4, 3 or 4, 4), batches {b0} {b1}")


def t_device():
    module = os.path.join(BUILD, "cuda", "emu", "nabla_cuda_emu.so")
    if not os.path.exists(module):
        report("pinned_async_copies_emulated", False, f"no emulated module at {module}")
        return
    env = dict(ENV, NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2")
    env.pop("NABLA_CUDA_DISABLE", None)
    env.pop("NABLA_CUDA_MODULE", None)
    src = """
n = 50
x = randn(n, 40)
y = arange(n).to("i64")
res = {}
for pin in list(false, true) {
  for w in list(0, 2) {
    cuda.reset_stats()
    ld = data.loader({x: x, y: y}, batch_size=8, shuffle=true, workers=w, device="cuda", pin_memory=pin, seed=1)
    nb = 0
    ok = true
    for b in ld.epoch(0) {
      nb += 1
      if b.x.device != "cuda" or b.y.device != "cuda" { ok = false }
      if not all((b.x.to("cpu") == x[b.y.to("cpu")])) { ok = false }
    }
    pinned = dist_pinned_bytes()
    ld.close()
    s = cuda.stats()
    res["{pin}-{w}"] = {batches: nb, ok: ok, h2d: s.memcpy_h2d, pinned: pinned, after_close: dist_pinned_bytes()}
  }
}
print(json_format(res))
"""
    r = run_json("pinned_async_copies_emulated", src, env)
    if r is None:
        return
    why = ""
    for k, v in r.items():
        if v["batches"] != 7 or not v["ok"]:
            why += f"{k}: {v}; "
        if v["h2d"] < 14:
            why += f"{k}: {v['h2d']} host-to-device copies, expected at least 14 (2 per batch); "
    # pinned staging is alive (the ring keeps the last copies' buffers) only with pin_memory
    if r["true-0"]["pinned"] <= 0 or r["true-2"]["pinned"] <= 0:
        why += f"pin_memory staged nothing in pinned memory: {r}; "
    if r["false-0"]["pinned"] != 0:
        why += f"pinned bytes without pin_memory: {r['false-0']}; "
    # 8 staging slots of the last batches' x (8 x 40 f32) and y (8 i64): (1280 + 64) * 4 at most
    if any(v["after_close"] != 0 for v in r.values()) or r["true-0"]["pinned"] > 4 * (1280 + 64) * 2:
        why += f"pinned staging not released by close, or more than the ring holds: {r}; "
    report("pinned_async_copies_emulated", not why, why)


def main():
    if not os.path.exists(NABLA):
        print(f"FAIL: loader{SUFFIX}: no interpreter at {NABLA}")
        sys.exit(1)
    t_order()
    t_sampler_and_kinds()
    t_files()
    t_worker_augmentation()
    t_errors()
    t_interrupt()
    t_distributed()
    t_prefetch_overlap()
    t_device()
    sys.exit(1 if FAILED else 0)


main()
