#!/usr/bin/python3
"""tests/dist: IPv6 — 2 simulated hosts on an IPv6 network (tests/dist/hosts.py
Cluster(v6=True): the host names resolve only to fd77::N, the data network
eth1 has only fd77:1::N), 2 workers each started by `nabla run --launcher ssh`.
Cases: collectives (every collective against NumPy over IPv6, MASTER_ADDR an
IPv6 address), ifname_ports (ifname=eth1 takes its IPv6 address: every
listening socket of the job is on it and inside ports=), unresolvable (a host
name that does not resolve: an immediate error naming it), loopback6 (a host
resolving to ::1 among remote hosts: the clear loopback error).

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_ipv6.py
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh (address parsing is C).
Every input is fresh random data; SKIP (with why) when this machine cannot
simulate hosts (not root, no ip netns, no sshd).
"""
import os, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, needs, per_rank, report, sanitizer_check, script, test  # noqa: E402
from hosts import started  # noqa: E402

rng = np.random.default_rng()
C, WHY = started(2, v6=True)
HOSTS = ",".join(C.names)


needs_hosts = needs(WHY)


def ssh_popen_args(extra, path, *args):
    return [NABLA, "run", "-n", "4", "--launcher", "ssh", "--hosts", HOSTS, *C.ssh_args(), "--connect-timeout", "3",
            "--heartbeat", "5", *extra, path, *args]




COLL = """
import dist
r = dist.rank(); n = dist.world_size()
x = load_npy(argv[1] + "/in{r}.npy")
d = load_npy(argv[1] + "/d{r}.npy")
print("MASTER", "\\"" + getenv("MASTER_ADDR") + "\\"")
print("SUM", all_reduce(x, op="sum").reshape([-1]).tolist())
print("MAX", all_reduce(x, op="max").reshape([-1]).tolist())
# up to 3000 f64 values: through a file, exact (printed, they would be rounded to text)
save_npy(argv[1] + "/dsum{r}.npy", all_reduce(d, op="sum"))
print("GATHER", all_gather(x).reshape([-1]).tolist())
print("RS", reduce_scatter(x, op="sum").reshape([-1]).tolist())
print("BCAST", broadcast(x, src=2).reshape([-1]).tolist())
# across the hosts: rank r sends to r+2 (the other host)
if r < 2 { send(x, r + 2); print("RECV [0]") } else { print("RECV", recv(r - 2).reshape([-1]).tolist()) }
"""


@test
@needs_hosts
def test_collectives(name):
    d = os.path.join(TMP, "coll6")
    os.makedirs(d, exist_ok=True)
    rows = int(rng.integers(2, 9)) * 4          # reduce_scatter splits the rows among 4 ranks
    xs = [rng.standard_normal((rows, 3)).astype(np.float32) for _ in range(4)]
    dn = int(rng.integers(1, 3000))             # an odd length, float64
    ds = [rng.standard_normal(dn) for _ in range(4)]
    for r in range(4):
        np.save(os.path.join(d, f"in{r}.npy"), xs[r])
        np.save(os.path.join(d, f"d{r}.npy"), ds[r])
    path = script(COLL, "v6_coll.nbl")
    p = C.run(0, ssh_popen_args([], path, d), timeout=120)
    sanitizer_check(p.stderr)
    S = np.sum(np.array(xs, dtype=np.float64), axis=0)
    k = rows // 4
    want = {"SUM": lambda r: S, "MAX": lambda r: np.max(xs, axis=0),
            "GATHER": lambda r: np.concatenate(xs), "RS": lambda r: S[k * r:k * (r + 1)], "BCAST": lambda r: xs[2],
            "RECV": lambda r: xs[r - 2] if r >= 2 else np.zeros(1)}
    why = None if p.returncode == 0 else f"rc {p.returncode}"
    for tag, f in want.items():
        got = per_rank(p.stdout, tag)
        for r in range(4):
            if why is None and (r not in got or not np.allclose(np.array(got[r]), f(r).reshape(-1), rtol=1e-5, atol=1e-5)):
                why = f"{tag} on rank {r}: {str(got.get(r))[:200]} vs NumPy {f(r).reshape(-1)[:6]}..."
    for r in range(4):
        try:
            got = np.load(os.path.join(d, f"dsum{r}.npy"))
        except (OSError, ValueError) as e:
            got = e
        if why is None and not (isinstance(got, np.ndarray) and got.dtype == np.float64
                                and np.allclose(got, np.sum(ds, axis=0), rtol=1e-12, atol=1e-12)):
            why = f"DSUM on rank {r}: {str(got)[:200]} vs NumPy {np.sum(ds, axis=0)[:6]}..."
    masters = per_rank(p.stdout, "MASTER")
    if why is None and set(masters.values()) != {C.mgmt6(0)}:
        why = f"MASTER_ADDR {masters}, expected {C.mgmt6(0)} (the session's IPv6 address) on every rank"
    report(name, why is None, f"{why}; out={p.stdout[-400:]!r} err={p.stderr[-600:]!r}")


@test
@needs_hosts
def test_ifname_ports(name):
    # ifname=eth1 (IPv6 only) and a port range: the session's control socket and every
    # worker's ring listener are on that interface's IPv6 address, inside the range
    flag = os.path.join(TMP, "v6ports.flag")
    path = script(f'barrier()\nif dist.rank() == 0 {{ print("SPIN", 0) }}\nwhile not exists("{flag}") {{ }}\n'
                  f'x = ones(3) * (dist.rank() + 1)\nprint("DONE", all_reduce(x).tolist())\n', "v6_ports.nbl")
    lo = int(rng.integers(30000, 40000))
    seen = {}

    def look():
        for i in range(2):
            q = C.run(i, ["ss", "-ltnH"], timeout=20)
            seen[C.names[i]] = sorted(line.split()[3] for line in q.stdout.splitlines()
                                      if line.strip() and not line.split()[3].endswith(":22"))
        open(flag, "w").close()
    p = C.popen(0, ssh_popen_args(["--ifname", "eth1", "--ports", f"{lo}-{lo + 10}"], path),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stdout:
            if "] SPIN " in line:
                look()
                break
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if not os.path.exists(flag):
            open(flag, "w").close()
    sanitizer_check(err or "")
    why = None if p.returncode == 0 else f"rc {p.returncode}"
    done = per_rank(out or "", "DONE")
    if why is None and (sorted(done) != [0, 1, 2, 3] or any(v != [10.0] * 3 for v in done.values())):
        why = f"all_reduce results {done}, expected [10, 10, 10] on 4 ranks"
    # host a: the control socket + 2 ring listeners + 2 message inboxes (dmsg.c); host b: 2 + 2
    for i, h in enumerate(C.names):
        want_n = 5 if i == 0 else 4
        socks = seen.get(h, [])
        ok = len(socks) == want_n and all(s.startswith(f"[{C.data(i)}]:") and lo <= int(s.rsplit(":", 1)[1]) <= lo + 10 for s in socks)
        if why is None and not ok:
            why = f"{h} listens on {socks}; expected {want_n} sockets on [{C.data(i)}] in {lo}-{lo + 10}"
    report(name, why is None, f"{why}; seen={seen} out={(out or '')[-300:]!r} err={(err or '')[-500:]!r}")


@test
@needs_hosts
def test_unresolvable(name):
    bad = "nohost" + os.urandom(3).hex()
    path = script('print("RAN")\n', "v6_unres.nbl")
    t = time.time()
    p = C.run(0, [NABLA, "run", "-n", "2", "--launcher", "ssh", "--hosts", f"hosta,{bad}", *C.ssh_args(), path], timeout=60)
    took = time.time() - t
    sanitizer_check(p.stderr)
    ok = (p.returncode != 0 and f'host "{bad}" does not resolve' in p.stderr and "RAN" not in p.stdout and took < 15)
    report(name, ok, f"rc {p.returncode} in {took:.1f} s; err={p.stderr[-500:]!r}")


@test
@needs_hosts
def test_loopback6(name):
    path = script('print("RAN")\n', "v6_loop.nbl")
    t = time.time()
    p = C.run(0, [NABLA, "run", "-n", "2", "--launcher", "ssh", "--hosts", "ip6-localhost,hostb", *C.ssh_args(), path], timeout=60)
    took = time.time() - t
    sanitizer_check(p.stderr)
    ok = (p.returncode != 0 and 'host "ip6-localhost" resolves to the loopback address ::1' in p.stderr
          and "RAN" not in p.stdout and took < 15)
    report(name, ok, f"rc {p.returncode} in {took:.1f} s; err={p.stderr[-500:]!r}")


C.stop()
dutil.finish()
