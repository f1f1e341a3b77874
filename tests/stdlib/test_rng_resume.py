#!/usr/bin/python3
"""Exact resume (issue 31): rng_state()/set_rng_state() and checkpoints that
carry the generator's state (dist.save_checkpoint(..., rng=true), restored by
dist.resume/dist.load_checkpoint(..., rng=true)).

A small model with dropout is trained for four epochs on freshly shuffled
batches (randperm each epoch), once uninterrupted and once stopped and
resumed from a checkpoint — at an epoch boundary, and in the middle of an
epoch (the epoch's permutation saved with the state).  The resumed run's
final weights must be BIT-identical to the uninterrupted run's; a resume that
does not restore the generator must differ (so the check can fail).  Also:
the round trip rng_state -> draws -> set_rng_state -> the same draws, on the
CPU and the emulated CUDA device, and the errors.

Run with /usr/bin/python3; NABLA = the interpreter (NABLA_ASAN=1: the ASan
build).  Prints PASS/FAIL/SKIP lines; exits 1 on a failure.
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ASAN = os.environ.get("NABLA_ASAN") == "1"
BUILD = os.environ.get("NABLA_BUILD") or os.path.join(ROOT, "build-asan" if ASAN else "build")
NABLA = os.environ.get("NABLA") or os.path.join(BUILD, "nabla")
EMU_MODULE = os.path.join(BUILD, "cuda", "emu", "nabla_cuda_emu.so")
SUFFIX = " [asan]" if ASAN else ""
failures = 0


def report(kind, name, why=""):
    global failures
    if kind == "FAIL":
        failures += 1
    why = " ".join(str(why).split())
    print(f"{kind}: {name}{SUFFIX}" + (f": {why[:1200]}" if why and kind != "PASS" else ""), flush=True)


TMP = tempfile.mkdtemp(prefix="nabla-rng-resume-")
ENV = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"), NO_COLOR="1")


def nabla(code, *args, env=ENV):
    script = os.path.join(TMP, "s.nbl")
    with open(script, "w") as f:
        f.write(code)
    r = subprocess.run([NABLA, script, *args], capture_output=True, text=True, env=env, timeout=300)
    return r.returncode, r.stdout, r.stderr


SEED = random.randrange(1, 1 << 40)
TRAIN = r'''
import nn
import optim
import dist
mode = argv[1]; dir = argv[2]; seed_ = int(argv[3])
ck = dir + "/ck.safetensors"
seed(seed_)
X = randn(48, 7); Y = randn(48)
model = nn.sequential([nn.linear(7, 16), relu, nn.dropout(0.3), nn.linear(16, 1)])
opt = optim.sgd(model, lr=0.05, momentum=0.9)
loss_fn = fn(m, xb, yb) mse_loss(reshape(m(xb), -1), yb)
E = 4; B = 12; nb = 4
state = {model: model, opt: opt.state, perm: zeros(48, dtype="i64")}
start_epoch = 0; start_batch = 0
if mode == "resume_epoch" or mode == "resume_mid" or mode == "resume_norng" {
  step = dist.resume(ck, state, rng=mode != "resume_norng")
  start_epoch = floor(step / nb); start_batch = step % nb
}
stop = if mode == "part_epoch" { 2 * nb } else if mode == "part_mid" { nb + 2 } else { -1 }
steps = start_epoch * nb + start_batch
halted = false
for epoch in start_epoch..E {
  # a new permutation at each epoch's start (a checkpoint there is taken
  # before it is drawn); a mid-epoch resume continues the saved one
  first = if epoch == start_epoch { start_batch } else { 0 }
  if first == 0 and steps == stop { dist.save_checkpoint(ck, state, steps, rng=true); halted = true; break }
  if first == 0 { copy_(state.perm, randperm(48)) }
  for b in first..nb {
    if steps == stop { dist.save_checkpoint(ck, state, steps, rng=true); halted = true; break }
    idx = state.perm[b * B:(b + 1) * B]
    opt.step(grad(loss_fn)(model, X[idx], Y[idx]))
    steps += 1
  }
  if halted { break }
}
if not halted { save(dir + "/" + mode + ".safetensors", model) }
'''


def weights(mode):
    with open(os.path.join(TMP, mode + ".safetensors"), "rb") as f:
        return f.read()


ok_runs = True
for mode in ("full", "part_epoch", "resume_epoch", "resume_norng", "part_mid", "resume_mid"):
    rc, so, se = nabla(TRAIN, mode, TMP, str(SEED))
    if rc != 0:
        report("FAIL", f"rng resume: run {mode}", f"exit {rc}: {se.strip()[-800:]}")
        ok_runs = False
        break
if ok_runs:
    full = weights("full")
    report("PASS" if weights("resume_epoch") == full else "FAIL", "resume at an epoch boundary is bit-identical (dropout + shuffle)",
           "the resumed run's weights differ from the uninterrupted run's")
    report("PASS" if weights("resume_mid") == full else "FAIL", "resume in the middle of an epoch is bit-identical",
           "the resumed run's weights differ from the uninterrupted run's")
    report("PASS" if weights("resume_norng") != full else "FAIL", "a resume without the generator's state differs (the check can fail)",
           "identical weights without restoring the generator: dropout/shuffle did not depend on it")

# ---- the round trip on each device, and the errors
ROUNDTRIP = r'''
dev = argv[1]
seed(int(argv[2]))
x = rand(3)
s = rng_state(); s2 = rng_state(dev)
a = rand(5, 3, device=dev); b = randn(7, device=dev); p = randperm(9); m = dropout(ones(20, device=dev), 0.5)
set_rng_state(s, dev)
a2 = rand(5, 3, device=dev); b2 = randn(7, device=dev); p2 = randperm(9); m2 = dropout(ones(20, device=dev), 0.5)
print(all(a == a2).item() and all(b == b2).item() and all(p == p2).item() and all(m == m2).item(), all(s == s2).item(), s.dtype, s.shape)
set_rng_state(s); c = rand(5, 3, device=dev)
print(all(c == a).item(), any(rand(5, 3, device=dev) != a).item())
for bad in [fn() set_rng_state(tensor([1, 2, 3])), fn() set_rng_state(5), fn() set_rng_state(tensor([1.0, 2.0])), fn() rng_state("tpu")] {
  print(try { bad(); "no error" } catch e { e.name + ": " + e.message })
}
'''
devices = ["cpu"] + (["cuda"] if os.path.exists(EMU_MODULE) else [])
if len(devices) == 1:
    report("SKIP", "rng round trip on the emulated CUDA device", f"{EMU_MODULE} not built")
for dev in devices:
    env = dict(ENV)
    if dev == "cuda":
        env.update(NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2")
        env.pop("NABLA_CUDA_DISABLE", None)
    rc, so, se = nabla(ROUNDTRIP, dev, str(SEED), env=env)
    lines = so.strip().splitlines()
    if rc != 0 or len(lines) != 6:
        report("FAIL", f"rng_state round trip ({dev})", f"exit {rc}: {so.strip()[-400:]} {se.strip()[-600:]}")
        continue
    report("PASS" if lines[0] == "true true i64 [2]" else "FAIL", f"rng_state/set_rng_state repeat rand, randn, randperm, dropout ({dev})", lines[0])
    report("PASS" if lines[1] == "true true" else "FAIL", f"set_rng_state rewinds again; later draws move on ({dev})", lines[1])
    report("PASS" if lines[2].startswith("ValueError") and "[2]" in lines[2] else "FAIL", f"set_rng_state: wrong shape ({dev})", lines[2])
    report("PASS" if lines[3].startswith("TypeError") else "FAIL", f"set_rng_state: not a tensor ({dev})", lines[3])
    report("PASS" if lines[4].startswith("ValueError") and "f32" in lines[4] else "FAIL", f"set_rng_state: wrong dtype ({dev})", lines[4])
    report("PASS" if "no error" not in lines[5] else "FAIL", f"rng_state: unknown device ({dev})", lines[5])

# ---- a checkpoint saved without rng cannot restore it (loud, not silent)
rc, so, se = nabla(r'''
import dist
p = argv[1] + "/plain.safetensors"
dist.save_checkpoint(p, {w: ones(2)}, 3)
print(dist.load_checkpoint(p).w.shape, dist.resume(p))
print(try { dist.load_checkpoint(p, rng=true); "no error" } catch e { e.message })
''', TMP)
lines = so.strip().splitlines()
report("PASS" if rc == 0 and len(lines) == 2 and lines[0] == "[2] 3" and "rng=true" in lines[1] else "FAIL",
       "load_checkpoint(rng=true) of a checkpoint without the generator's state is an error", f"{so} {se.strip()[-400:]}")

# ---- two workers: each rank's own generator state is saved (gathered to
# rank 0) and each rank gets its own back
rc, so, se = nabla(r'''
import dist
dist.start(2)
dist.push({p: argv[1] + "/dist.safetensors", st: {w: ones(2)}, s0: int(argv[2])})
dist.exec("import dist\nseed(s0 + dist.rank())\nx = rand(3)\ndist.save_checkpoint(p, st, 5, rng=true)\na = rand(4)")
dist.exec("import dist\nseed(7)\nst2 = dist.load_checkpoint(p, rng=true)\nb = rand(4)\nok = all(a == b).item()")
print(dist.pull("ok", rank="all"), all(dist.pull("a", rank=0) == dist.pull("a", rank=1)).item(), load(argv[1] + "/dist.safetensors").rng.shape)
dist.stop()
''', TMP, str(SEED))
report("PASS" if rc == 0 and so.strip() == "[true, true] false [2, 2]" else "FAIL",
       "dist workers: every rank's generator state saved and restored to that rank", f"exit {rc}: {so.strip()} {se.strip()[-500:]}")

shutil.rmtree(TMP, True)
sys.exit(1 if failures else 0)
