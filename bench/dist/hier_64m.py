#!/usr/bin/python3
"""bench/dist/hier_64m.py — 64 MB all_reduce (16777216 f32, sum), 3 hosts x 2
workers: the hierarchical path (dist/dhier.c: shared memory within a host,
TCP stripes across hosts) against the flat TCP ring (NABLA_HIER=0) and
torch.distributed's gloo, in the same run, alternating, median of REPS.

Hosts: with --netns, three namespace hosts of tests/dist/hosts.py (real
separate network stacks and /dev/shm; needs root and the ssh launcher);
without it, simulated on this machine with NABLA_TEST_HOSTS=a,a,b,b,c,c
(the cross-host traffic is loopback TCP, the intra-host traffic shared
memory) — gloo then runs its 6 ranks on loopback, as the flat ring does.

Run: /usr/bin/python3 bench/dist/hier_64m.py [REPS]     (NABLA=build/nabla)
"""
import os, re, socket, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build/nabla")
N, ITERS, WORLD = 16777216, 5, 6
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3

SRC = f"""
import dist
dist.start({WORLD})
dist.exec('x = ones({N}) * (dist.rank() + 1); y = all_reduce(x); barrier(); t0 = clock(); for i in 0..{ITERS} {{ y = all_reduce(x) }}; dt = (clock() - t0) / {ITERS}; ok = y[0].item() == 21 and y[{N - 1}].item() == 21')
print("bench_time", max(dist.pull("dt")))
print("ok", dist.run(fn() ok), "shm", dist.run(fn() dist_shm()))
dist.stop()
"""


def nabla(env):
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "hier_64m_bench.nbl")
    with open(path, "w") as f:
        f.write(SRC)
    p = subprocess.run([NABLA, path], capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
    t = ok = None
    for l in p.stdout.splitlines():
        if l.startswith("bench_time"):
            t = float(re.search(r"[-0-9.e]+\)?$", l).group(0).rstrip(")"))
        if l.startswith("ok"):
            ok = l
    if t is None or not (ok or "").startswith("ok [true, true, true, true, true, true]") or ("shm [true" in ok) != ("NABLA_HIER" not in env):
        raise SystemExit(f"nabla run failed: {p.stdout[-500:]} {p.stderr[-1500:]}")
    return t, ok


def _gloo(rank, port, q):
    import torch, torch.distributed as td
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    td.init_process_group("gloo", rank=rank, world_size=WORLD)
    x = torch.ones(N) * (rank + 1)
    y = x.clone(); td.all_reduce(y); td.barrier()
    t0 = time.perf_counter()
    for _ in range(ITERS):
        y = x.clone(); td.all_reduce(y)
    dt = (time.perf_counter() - t0) / ITERS
    q.put((rank, dt, float(y[0])))
    td.destroy_process_group()


def gloo():
    import torch.multiprocessing as mp
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ctx = mp.get_context("fork"); q = ctx.Queue()
    ps = [ctx.Process(target=_gloo, args=(r, port, q)) for r in range(WORLD)]
    for p in ps:
        p.start()
    res = [q.get(timeout=600) for _ in range(WORLD)]
    for p in ps:
        p.join()
    assert all(v == 21.0 for _, _, v in res), res
    return max(dt for _, dt, _ in res)


hosts = {"NABLA_TEST_HOSTS": "a,a,b,b,c,c"}
t = {"hier": [], "flat": [], "gloo": []}
for _ in range(REPS):
    t["hier"].append(nabla(hosts)[0])
    t["flat"].append(nabla(dict(hosts, NABLA_HIER="0"))[0])
    t["gloo"].append(gloo())
m = {k: statistics.median(v) for k, v in t.items()}
for k in t:
    print(f"{k}: median {m[k] * 1e3:.1f} ms per 64 MB all_reduce ({N * 4 / m[k] / 1e9:.2f} GB/s algbw); runs {' '.join(f'{v * 1e3:.0f}' for v in t[k])} ms")
print(f"hier/flat {m['hier'] / m['flat']:.2f}x   hier/gloo {m['hier'] / m['gloo']:.2f}x   flat/gloo {m['flat'] / m['gloo']:.2f}x  (time ratios: < 1 is faster)")
