#!/usr/bin/python3
"""bench/dist/net_64m_netns.py — 64 MB collectives across three namespace
hosts (tests/dist/hosts.py: separate network stacks, hostnames and
/dev/shm; veth pairs into a bridge, no bandwidth limit), 2 workers per
host started by the ssh launcher: the hierarchy (shared memory within a
host, striped TCP across hosts) against the flat TCP ring (NABLA_HIER=0)
and, for all_gather, the leaders-only hierarchy (NABLA_HIER_GATHER=leader),
and gloo (torch.distributed) in the same run, alternating, median of REPS.
Ops: all_reduce, reduce_scatter (gloo in torch 1.13 has none: its
all_reduce is the stand-in a gloo user would call), all_gather; and a
64 MB send/recv between the two ranks of one host: the shared-memory
channel against loopback TCP (NABLA_SHM=0) and gloo.

Run: /usr/bin/python3 bench/dist/net_64m_netns.py [REPS] [RATE]   (NABLA=build/nabla; root, ip netns, sshd)
RATE (e.g. 2gbit): a token-bucket limit (tc tbf) on every host's egress,
a network slower than memory copies; default: none (veth at memory speed).
"""
import os, re, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/dist"))
from hosts import Cluster  # noqa: E402

NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(ROOT, "build/nabla"))
WORLD, ITERS = 6, 3
N = WORLD * 2796202                      # 16777212 f32 = 64 MB, divisible among 6 ranks
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
RATE = sys.argv[2] if len(sys.argv) > 2 else None
TMP = tempfile.mkdtemp(prefix="nabla-net-bench-")

WORKER = f"""
r = dist.rank()
x = ones({N}) * (r + 1)
xs = reshape(x, [{WORLD}, -1])
part = ones({N // WORLD}) * (r + 1)
fn timed(f) {{ v = f(); barrier(); t0 = clock(); for i in 0..{ITERS} {{ v = f() }}; barrier(); [(clock() - t0) / {ITERS}, v] }}
a = timed(fn() all_reduce(x))
ta = a[0]; y = a[1]
oka = y[0].item() == 21 and y[{N - 1}].item() == 21
a = timed(fn() reduce_scatter(xs))
trs = a[0]; z = a[1]
okrs = z[0, 0].item() == 21
a = timed(fn() all_gather(part))
tag = a[0]; g = a[1]
okag = g[0].item() == 1 and g[{N - 1}].item() == {WORLD}
# send/recv between the two ranks of host a (ranks 0 and 1)
a = timed(fn() if r == 0 {{ send(x, 1); nil }} else if r == 1 {{ recv(0) }} else {{ nil }})
tp = a[0]; p = a[1]
okp = r != 1 or p[{N - 1}].item() == 1
print("R", ta, trs, tag, tp, oka and okrs and okag and okp, dist_shm(), dist_shm_peer(1 - r % 2 + (r - r % 2)))
"""

GLOO = f"""
import os, sys, time, torch, torch.distributed as td
rank, addr, port = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ["MASTER_ADDR"] = addr; os.environ["MASTER_PORT"] = port
td.init_process_group("gloo", rank=rank, world_size={WORLD})
x = torch.ones({N}) * (rank + 1)
part = torch.ones({N // WORLD}) * (rank + 1)
def timed(f):
    f(); td.barrier(); t0 = time.perf_counter()
    for _ in range({ITERS}):
        f()
    td.barrier()
    return (time.perf_counter() - t0) / {ITERS}
out = {{}}
def ar():
    y = x.clone(); td.all_reduce(y); out["ar"] = y
def ag():
    gs = [torch.empty_like(part) for _ in range({WORLD})]; td.all_gather(gs, part); out["ag"] = gs
def p2p():
    if rank == 0:
        td.send(x, 1)
    elif rank == 1:
        y = torch.empty_like(x); td.recv(y, 0); out["p"] = y
ta = timed(ar); tag = timed(ag); tp = timed(p2p)
ok = float(out["ar"][0]) == 21.0 and float(out["ag"][{WORLD - 1}][0]) == {WORLD} and (rank != 1 or float(out["p"][0]) == 1.0)
print("G", ta, tag, tp, ok, flush=True)
td.destroy_process_group()
"""


def nabla(c, env):
    path = os.path.join(TMP, "w.nbl")
    with open(path, "w") as f:
        f.write(WORKER)
    p = c.run(0, [NABLA, "run", "-n", str(WORLD), "--launcher", "ssh", "--hosts", ",".join(c.names), *c.ssh_args(),
                  "--connect-timeout", "3", path], timeout=900, env=env)
    rows = re.findall(r"R ([0-9.e-]+) ([0-9.e-]+) ([0-9.e-]+) ([0-9.e-]+) (true|false) (true|false) (true|false)", p.stdout)
    if p.returncode or len(rows) != WORLD or any(r[4] != "true" for r in rows):
        raise SystemExit(f"nabla failed (rc {p.returncode}): {p.stdout[-800:]} {p.stderr[-1500:]}")
    t = [max(float(r[k]) for r in rows) for k in range(4)]
    return t, {r[5] for r in rows}, {r[6] for r in rows}


def gloo(c, port):
    path = os.path.join(TMP, "g.py")
    with open(path, "w") as f:
        f.write(GLOO)
    ps = [c.popen(r // 2, ["/usr/bin/python3", path, str(r), c.mgmt(0), str(port)], env={"GLOO_SOCKET_IFNAME": "eth0"},
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(WORLD)]
    outs = [p.communicate(timeout=900) for p in ps]
    rows = []
    for (o, e), p in zip(outs, ps):
        m = re.search(r"G ([0-9.e-]+) ([0-9.e-]+) ([0-9.e-]+) True", o)
        if p.returncode or not m:
            raise SystemExit(f"gloo failed: {o[-300:]} {e[-1500:]}")
        rows.append([float(m.group(k)) for k in (1, 2, 3)])
    ta, tag, tp = (max(r[k] for r in rows) for k in range(3))
    return [ta, ta, tag, tp]                 # reduce_scatter: gloo's all_reduce stands in


OPS = ["all_reduce", "reduce_scatter", "all_gather", "send/recv same host"]
with Cluster(3) as c:
    if c.why:
        raise SystemExit(f"cannot simulate hosts here: {c.why}")
    if RATE:   # every host's management link (the one the host names resolve to) limited on egress
        for i in range(c.n):
            c.run(i, ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", RATE, "burst", "256kb", "latency", "100ms"], check=True)
    print(f"links: veth pairs into a bridge, {'egress limited to ' + RATE + ' (tc tbf)' if RATE else 'no bandwidth limit'}")
    t = {"hier": [], "lead": [], "flat": [], "tcp": [], "gloo": []}
    for k in range(REPS):
        th, shm, peer = nabla(c, {})
        assert shm == {"true"} and peer == {"true"}, f"the hierarchy / channels are not on: {shm} {peer}"
        t["hier"].append(th)
        tl, shm, peer = nabla(c, {"NABLA_HIER_GATHER": "leader"})   # all_gather through the host leaders
        assert shm == {"true"}, f"the hierarchy is not on: {shm}"
        t["lead"].append(tl)
        tf, shm, peer = nabla(c, {"NABLA_HIER": "0"})
        assert shm == {"false"}, f"NABLA_HIER=0 did not reach the workers: dist_shm() {shm}"
        t["flat"].append(tf)
        tt, shm, peer = nabla(c, {"NABLA_SHM": "0"})
        assert peer == {"false"}, f"NABLA_SHM=0 did not turn the channels off: {peer}"
        t["tcp"].append(tt)
        t["gloo"].append(gloo(c, 29500 + k))
    med = {m: [statistics.median(run[i] for run in v) for i in range(4)] for m, v in t.items()}
    for i, op in enumerate(OPS):
        print(f"{op}:")
        for m in t:
            print(f"  {m:5s} median {med[m][i] * 1e3:7.1f} ms; runs {' '.join(f'{run[i] * 1e3:.0f}' for run in t[m])} ms")
        h, f_, tc, g = (med[m][i] for m in ("hier", "flat", "tcp", "gloo"))
        print(f"  hier/flat {h / f_:.2f}x  hier/gloo {h / g:.2f}x  flat/gloo {f_ / g:.2f}x  (no shm at all)/gloo {tc / g:.2f}x  (time: < 1 is faster)")
        if op == "all_gather":
            print(f"  striped/leader {h / med['lead'][i]:.2f}x  (hier: each local rank's stripe across hosts; lead: NABLA_HIER_GATHER=leader)")
