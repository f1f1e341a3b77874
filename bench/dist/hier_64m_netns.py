#!/usr/bin/python3
"""bench/dist/hier_64m_netns.py — the 64 MB all_reduce of hier_64m.py across
three namespace hosts (tests/dist/hosts.py: separate network stacks,
hostnames and /dev/shm, veth links through a bridge), 2 workers per host:
the hierarchical path against the flat TCP ring (NABLA_HIER=0) and gloo, in
the same run, alternating, median of REPS.  Needs root, `ip netns`, sshd
(what the multi-host tests need) and the ssh launcher.

Run: /usr/bin/python3 bench/dist/hier_64m_netns.py [REPS]   (NABLA=build/nabla)
"""
import os, re, socket, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/dist"))
from hosts import Cluster  # noqa: E402

NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(ROOT, "build/nabla"))
N, ITERS, WORLD = 16777216, 5, 6
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
TMP = tempfile.mkdtemp(prefix="nabla-hier-bench-")

WORKER = f"""
x = ones({N}) * (dist.rank() + 1)
y = all_reduce(x); barrier()
t0 = clock()
for i in 0..{ITERS} {{ y = all_reduce(x) }}
dt = (clock() - t0) / {ITERS}
print("R", dt, y[0].item() == 21 and y[{N - 1}].item() == 21, dist_shm())
"""
GLOO = f"""
import os, sys, time, torch, torch.distributed as td
rank, addr, port = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ["MASTER_ADDR"] = addr; os.environ["MASTER_PORT"] = port
td.init_process_group("gloo", rank=rank, world_size={WORLD})
x = torch.ones({N}) * (rank + 1)
y = x.clone(); td.all_reduce(y); td.barrier()
t0 = time.perf_counter()
for _ in range({ITERS}):
    y = x.clone(); td.all_reduce(y)
print("G", (time.perf_counter() - t0) / {ITERS}, float(y[0]) == 21.0, flush=True)
td.destroy_process_group()
"""


def nabla(c, env):
    path = os.path.join(TMP, "w.nbl")
    with open(path, "w") as f:
        f.write(WORKER)
    p = c.run(0, [NABLA, "run", "-n", str(WORLD), "--launcher", "ssh", "--hosts", ",".join(c.names), *c.ssh_args(),
                  "--connect-timeout", "3", path], timeout=600, env=env)
    rows = re.findall(r"R ([0-9.e-]+) (true|false) (true|false)", p.stdout)
    if p.returncode or len(rows) != WORLD or any(ok != "true" for _, ok, _ in rows):
        raise SystemExit(f"nabla failed (rc {p.returncode}): {p.stdout[-800:]} {p.stderr[-1500:]}")
    shm = {s for _, _, s in rows}
    return max(float(t) for t, _, _ in rows), shm


def gloo(c, port):
    path = os.path.join(TMP, "g.py")
    with open(path, "w") as f:
        f.write(GLOO)
    ps = [c.popen(r // 2, ["/usr/bin/python3", path, str(r), c.mgmt(0), str(port)], env={"GLOO_SOCKET_IFNAME": "eth0"},
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(WORLD)]
    outs = [p.communicate(timeout=600) for p in ps]
    ts = []
    for (o, e), p in zip(outs, ps):
        m = re.search(r"G ([0-9.e-]+) True", o)
        if p.returncode or not m:
            raise SystemExit(f"gloo failed: {o[-300:]} {e[-1500:]}")
        ts.append(float(m.group(1)))
    return max(ts)


with Cluster(3) as c:
    if c.why:
        raise SystemExit(f"cannot simulate hosts here: {c.why}")
    t = {"hier": [], "flat": [], "gloo": []}
    for k in range(REPS):
        th, shm = nabla(c, {})
        assert shm == {"true"}, f"the hierarchy is not on: dist_shm() {shm}"
        t["hier"].append(th)
        tf, shm = nabla(c, {"NABLA_HIER": "0"})
        assert shm == {"false"}, f"NABLA_HIER=0 did not reach the workers: dist_shm() {shm}"
        t["flat"].append(tf)
        t["gloo"].append(gloo(c, 29500 + k))
    m = {k: statistics.median(v) for k, v in t.items()}
    for k in t:
        print(f"{k}: median {m[k] * 1e3:.1f} ms per 64 MB all_reduce ({N * 4 / m[k] / 1e9:.2f} GB/s algbw); runs {' '.join(f'{v * 1e3:.0f}' for v in t[k])} ms")
    print(f"hier/flat {m['hier'] / m['flat']:.2f}x   hier/gloo {m['hier'] / m['gloo']:.2f}x   flat/gloo {m['flat'] / m['gloo']:.2f}x  (time ratios: < 1 is faster)")
