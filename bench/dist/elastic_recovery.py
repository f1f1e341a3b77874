#!/usr/bin/python3
"""bench/dist/elastic_recovery.py — time from a failure (or a join) to
training resumed, Nabla against torch elastic (torchrun, torch 1.13, c10d
rendezvous, gloo) in the same run, on three namespace hosts
(tests/dist/hosts.py) of 2 workers each.  The job is the same for both: a step
is an all_reduce of 64 floats and 0.1 s of work, a checkpoint every 5 steps,
and the group resumes from it.

Nabla: one `nabla run --launcher ssh --nnodes 2:3 --slots-per-host 2
--max-restarts 5 --heartbeat 2 --connect-timeout 2` on host a
(NABLA_ELASTIC_PROBE_S=1: a lost host is asked for every second).
torch: `torchrun --nnodes 2:3 --nproc_per_node 2 --rdzv_backend c10d
--monitor_interval 1 --rdzv_conf last_call_timeout=2 --max_restarts 5`
started on each host directly (as its docs say; TORCHRUN below: with one
fix for Python 3.11), the store on host a; the
process group's timeout is 5 s (gloo's default, 30 min, would hang on a lost
host: not a number).  The events, in order, each once the group ran 8 steps:

1. worker kill: kill -9 of one of host c's workers -> the group of 6 resumes;
2. host kill: host c's processes killed, links down -> resumes with 4;
3. join: host c is back (answers ssh; for torch its torchrun is started
   again) -> the group resumes with 6;
4. link cut: host c's links down for CUT_S = 6 s, its processes alive, then
   up -> "resumed": the first step or start seen 0.5 s or more after the cut
   (whatever the group did: went on with 4, or waited); "whole": the group
   is 6 again (after the links came back).

Times are wall-clock on this script's side, from the action to the line
(START of the resumed group, relayed live).  A phase that does not happen
within 300 s (a warm-up: without progress for as long; the first start:
within 420 s) is reported as such and ends the run.  Run:
    /usr/bin/python3 bench/dist/elastic_recovery.py [REPS]   (NABLA=build/nabla; root, ip netns, sshd, torch)
"""
import os, queue, secrets, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/dist"))
from hosts import Cluster  # noqa: E402
from elastic_hosts import Hosts  # noqa: E402

NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(ROOT, "build/nabla"))
PY = "/usr/bin/python3"
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
TMP = tempfile.mkdtemp(prefix="nabla-elastic-bench-")
CUT_S = 6.0
PHASE_S = 300.0     # a torch restart on the loaded VM takes over a minute (imports, rendezvous)
FIRST_S = 420.0     # the first start: six workers importing torch on a loaded 2-core VM take minutes
EVENTS = ("worker kill", "host kill", "join", "link cut: resumed", "link cut: whole")

NABLA_SCRIPT = """
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

TORCH_SCRIPT = """
import datetime, os, sys, time
import torch, torch.distributed as dist
ck, stop = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
r, n = dist.get_rank(), dist.get_world_size()
w, s = torch.zeros(64), 0
if os.path.exists(ck):
    st = torch.load(ck)
    w, s = st["w"], st["step"]
if r == 0:
    print("START", s, n, flush=True)
while not os.path.exists(stop):
    g = torch.ones(64) * 0.001
    dist.all_reduce(g)
    w += g / n
    t = time.time()
    while time.time() - t < 0.1:
        pass
    s += 1
    if r == 0:
        print("STEP", s, flush=True)
        if s % 5 == 0:
            torch.save({"w": w, "step": s}, ck + ".tmp")
            os.replace(ck + ".tmp", ck)
"""

# torchrun of this torch (Debian's 1.13 on Python 3.11) fails at start in
# Std.from_str (on 3.11 iterating Std skips NONE and ALL, its aliases: 'NoneType' object has
# no attribute 'get'); the same launcher with that one function corrected
TORCHRUN = """
import sys
from torch.distributed.elastic.multiprocessing import api
def from_str(vm):
    std = lambda v: api.Std(int(v))     # NONE (0) and ALL (3) are aliases 3.11 does not iterate
    return {int(i): std(v) for i, v in (m.split(":") for m in vm.split(","))} if ":" in vm else std(vm)
api.Std.from_str = staticmethod(from_str)
from torch.distributed.run import main
sys.argv[0] = "torchrun"
main()
"""


def reader(p, q, tag):
    for line in p.stdout:
        q.put((time.time(), tag, line.rstrip("\n")))
    q.put((time.time(), tag, None))


class Job:
    """the processes of one framework's run, their lines merged in one queue"""

    def __init__(self):
        self.q = queue.Queue()
        self.procs = []

    def add(self, p, tag):
        self.procs.append(p)
        threading.Thread(target=reader, args=(p, self.q, tag), daemon=True).start()

    def stop(self):
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def nabla_job(c, rep):
    path = os.path.join(TMP, "train.nbl")
    with open(path, "w") as f:
        f.write(NABLA_SCRIPT)
    ck, stop = os.path.join(TMP, f"nck{rep}.safetensors"), os.path.join(TMP, f"nstop{rep}")
    cmd = [NABLA, "run", "--launcher", "ssh", "--hosts", ",".join(c.names), *c.ssh_args(), "--connect-timeout", "2",
           "--heartbeat", "2", "--nnodes", "2:3", "--slots-per-host", "2", "--max-restarts", "5", path, ck, stop]
    j = Job()
    j.stopfile = stop
    j.add(c.popen(0, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={"NABLA_ELASTIC_PROBE_S": "1"}), "a")
    j.start_host = lambda i: None      # nabla run finds the host back itself
    j.victim = lambda: c.worker_pids(2, 4)[:1]
    return j


def torch_job(c, rep):
    path = os.path.join(TMP, "train_torch.py")
    with open(path, "w") as f:
        f.write(TORCH_SCRIPT)
    torchrun = os.path.join(TMP, "torchrun.py")
    with open(torchrun, "w") as f:
        f.write(TORCHRUN)
    ck, stop = os.path.join(TMP, f"tck{rep}.pt"), os.path.join(TMP, f"tstop{rep}")
    port = 29400 + rep
    rid = f"bench{rep}{secrets.token_hex(2)}"
    env = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    j = Job()
    j.stopfile = stop

    def start_host(i):
        cmd = [PY, torchrun, "--nnodes=2:3", "--nproc_per_node=2", "--rdzv_backend=c10d",
               f"--rdzv_endpoint={c.names[0]}:{port}", f"--rdzv_id={rid}", "--max_restarts=5", "--monitor_interval=1",
               "--rdzv_conf=last_call_timeout=2", path, ck, stop]
        j.add(c.popen(i, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env), c.names[i][-1])

    def victim():
        out = []
        for pid in c.host_pids(2):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if path.encode() in argv and torchrun.encode() not in argv:
                out.append(pid)
        return sorted(out)[:1]
    for i in range(3):
        start_host(i)
    j.start_host = start_host
    j.victim = victim
    return j


def drive(c, h, j):
    """runs the events on job j; {event: seconds} (an event that did not happen: absent) and a log tail"""
    times, log = {}, []
    world, steps = 0, 0
    plan = ["worker kill", "host kill", "join", "link cut"]
    phase, t0, mended = "warm", 0.0, None
    deadline = time.time() + FIRST_S
    while plan or phase != "warm":
        try:
            t, tag, line = j.q.get(timeout=1)
        except queue.Empty:
            t, tag, line = time.time(), "", ""
        if line is None:
            log.append(f"[{tag}] (ended)")
            line = ""
        elif line:
            log.append(f"[{tag}] {line}")
        if mended and time.time() >= mended:
            h.mend(2)
            mended = None
        if "START " in line and line.split()[-1].isdigit():
            world, steps = int(line.split()[-1]), 0
        elif "STEP " in line:
            steps += 1
        started = "START " in line
        if phase == "warm" and (started or "STEP " in line):
            deadline = time.time() + PHASE_S      # warming up (a first start can be slow): progress is enough
        if phase == "worker kill" and started and world == 6:
            times[phase], phase = t - t0, "warm"
        elif phase == "host kill" and started and world == 4:
            times[phase], phase = t - t0, "warm"
        elif phase == "join" and started and world == 6:
            times[phase], phase = t - t0, "warm"
        elif phase == "link cut" and (started or "STEP " in line) and t - t0 >= 0.5:
            times["link cut: resumed"], phase = t - t0, "link cut: whole"
        if phase == "link cut: whole" and world == 6 and not mended and steps >= 1:
            times[phase], phase = t - t0, "warm"
        if phase == "warm" and plan and steps >= 8:
            phase = plan.pop(0)
            deadline = time.time() + PHASE_S
            if phase == "worker kill":
                for pid in j.victim():
                    os.kill(pid, 9)
            elif phase == "host kill":
                h.kill(2)
            elif phase == "join":
                h.revive(2)
                j.start_host(2)
            elif phase == "link cut":
                h.cut(2)
                mended = time.time() + CUT_S
            t0 = time.time()
        elif phase == "warm" and not plan:
            break
        if time.time() > deadline:
            log.append(f"(phase {phase} did not complete within {PHASE_S:.0f} s)")
            break
    if mended:
        h.mend(2)
    open(j.stopfile, "w").close()
    return times, log


def one(c, h, make, rep):
    h.ensure_up()
    h.mend(2)
    j = make(c, rep)
    try:
        times, log = drive(c, h, j)
    finally:
        open(j.stopfile, "w").close()
        j.stop()
    return times, log


def main():
    with Cluster(3) as c:
        if c.why:
            sys.exit(f"cannot simulate hosts: {c.why}")
        h = Hosts(c)
        runs = {"nabla": [], "torch": []}
        for rep in range(REPS):
            for fw, make in (("nabla", nabla_job), ("torch", torch_job)):
                times, log = one(c, h, make, rep)
                runs[fw].append(times)
                print(f"{fw} run {rep}: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()), flush=True)
                if len(times) != len(EVENTS):
                    print("  missing:", [e for e in EVENTS if e not in times], "; log tail:\n    " + "\n    ".join(log[-25:]), flush=True)
        print(f"| event | nabla, s ({REPS} runs) | torch elastic, s | nabla / torch |")
        print("|---|---|---|---|")
        for e in EVENTS:
            cell = {}
            for fw in runs:
                xs = [r[e] for r in runs[fw] if e in r]
                cell[fw] = (" / ".join(f"{x:.2f}" for x in xs) + (f" (median {statistics.median(xs):.2f})" if len(xs) > 1 else "")
                            if xs else "—", statistics.median(xs) if xs else None)
            a, b = cell["nabla"][1], cell["torch"][1]
            ratio = f"{a / b:.2f}" if a is not None and b else "—"
            print(f"| {e} | {cell['nabla'][0]} | {cell['torch'][0]} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
