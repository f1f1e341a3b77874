#!/usr/bin/python3
"""bench/dist/elastic_recovery.py — time from a failure (or a join) to
training resumed, on three namespace hosts (tests/dist/hosts.py) of 2 slots,
one `nabla run --launcher ssh --nnodes 2:3 --max-restarts 3` per repetition:

1. worker kill: kill -9 of rank 4's worker (host c) -> the group of 6 resumes
   from its checkpoint ("[rank 0] START" of the next group);
2. host kill: host c's processes killed and its links down -> the group
   continues with 4 workers on hosts a and b (found by the heartbeat, 2 s,
   and the ssh probe, ConnectTimeout 2 s);
3. join: host c answers ssh again -> the group regroups at its next
   checkpoint (every 5 steps, ~0.1 s each) and resumes with 6 workers
   (the probe runs every NABLA_ELASTIC_PROBE_S = 1 s).

Times are wall-clock on this script's side, from the action to the START
line of the resumed group (relayed live).  Run:
    /usr/bin/python3 bench/dist/elastic_recovery.py [REPS]   (NABLA=build/nabla; root, ip netns, sshd)
"""
import os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/dist"))
from hosts import Cluster  # noqa: E402
from elastic_hosts import Hosts  # noqa: E402

NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(ROOT, "build/nabla"))
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
TMP = tempfile.mkdtemp(prefix="nabla-elastic-bench-")

SCRIPT = """
import dist
ck = argv[1]; stop = argv[2]
st = {w: zeros(64)}
step0 = dist.resume(ck, st)
w = st.w
r = dist.rank()
if r == 0 { print("START", step0, dist.world_size()) }
s = step0
while not exists(stop) {
  w = w + all_reduce(ones(64) * 0.001, op="avg")
  t = clock(); while clock() - t < 0.1 { }
  s = s + 1
  if r == 0 { print("STEP", s) }
  if s % 5 == 0 { dist.save_checkpoint(ck, {w: w}, s) }
}
"""


def one_run(c, h, rep):
    path = os.path.join(TMP, "train.nbl")
    with open(path, "w") as f:
        f.write(SCRIPT)
    ck, stop = os.path.join(TMP, f"ck{rep}.safetensors"), os.path.join(TMP, f"stop{rep}")
    cmd = [NABLA, "run", "--launcher", "ssh", "--hosts", ",".join(c.names), *c.ssh_args(), "--connect-timeout", "2",
           "--heartbeat", "2", "--nnodes", "2:3", "--slots-per-host", "2", "--max-restarts", "3", path, ck, stop]
    p = c.popen(0, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"NABLA_ELASTIC_PROBE_S": "1"})
    times, phase, t0, steps = {}, "warm", 0.0, 0
    try:
        for line in p.stdout:
            if "] STEP " in line:
                steps += 1
            if "] START " in line:
                now = time.time()
                world = int(line.split()[-1])
                if phase == "worker" and world == 6:
                    times["worker kill"] = now - t0
                    phase, steps = "wait-host", 0
                elif phase == "host" and world == 4:
                    times["host kill"] = now - t0
                    phase, steps = "wait-join", 0
                elif phase == "join" and world == 6:
                    times["join"] = now - t0
                    open(stop, "w").close()
                    phase = "done"
                steps = 0
            if phase == "warm" and steps >= 8:
                for pid in c.worker_pids(2, 4):
                    os.kill(pid, 9)
                t0, phase = time.time(), "worker"
            elif phase == "wait-host" and steps >= 8:
                h.kill(2)
                t0, phase = time.time(), "host"
            elif phase == "wait-join" and steps >= 3:
                h.revive(2)
                t0, phase = time.time(), "join"
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = p.stderr.read()
    if len(times) != 3:
        raise RuntimeError(f"run {rep}: only {times} (rc {p.returncode}): {err[-1500:]}")
    return times


def main():
    with Cluster(3) as c:
        if c.why:
            sys.exit(f"cannot simulate hosts: {c.why}")
        h = Hosts(c)
        runs = []
        for rep in range(REPS):
            h.ensure_up()
            runs.append(one_run(c, h, rep))
            print(f"run {rep}: " + ", ".join(f"{k} {v:.2f} s" for k, v in runs[-1].items()), flush=True)
        print("| event | nabla (median of %d), s |" % REPS)
        print("|---|---|")
        for k in ("worker kill", "host kill", "join"):
            print(f"| {k} | {statistics.median(r[k] for r in runs):.2f} |")


if __name__ == "__main__":
    main()
