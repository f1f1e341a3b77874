#!/usr/bin/python3
"""test_emu_scaler.py — optim.grad_scaler on the device (tensor/toptim.h:
amp_unscale_ / amp_update_scale_, the CPU kernels in tensor/toptim.c, the GPU
ones in cuda/optim.cu; AdamW's skip on found_inf) on the CPU and the
emulated device.  Run by tools/run-tests.sh with the release build and again
(NABLA_ASAN=1) with the ASan build.
  * ops: amp_unscale_ over f32/f16/bf16/f64 gradients of odd sizes (one past
    the grid-stride wrap), 100 gradients (two launches), a tied gradient (once),
    against NumPy/torch (g * f32(1/scale) rounded to the dtype); found_inf from
    an inf, a nan, an f16 overflow by the unscale; amp_update_scale_ over a
    found-inf pattern against torch's _amp_update_scale_ rule in f64; the
    error cases (state dtype/size, a strided gradient, another device);
    adamw_update with device scalars {lr, step, found_inf, skipped}: a set
    flag leaves everything as it was and counts the skip, the next update
    equals the host-number one at step - skipped (CPU and emulated).
  * eager: training with the device scaler gives the parameters, skips and
    scales of the host scaler as it was before (a copy of its code runs as
    the reference on the same device), bit for bit: AdamW (skip on the
    device), AdamW with two parameter groups, SGD (skip read on the host);
    a checkpoint's state assigned to scaler.state reaches the device; infs injected at chosen steps
    (skips, backoff, growth after growth_interval).
  * compile: a GPT-shaped f16-autocast step with the scaler inside compile:
    1 capture, the rest replays, no fallback, equal to eager (the model
    built again from the seed in the same process) bit for bit
    over 7 steps, one of them skipped (an inf injected in a replay); a
    replay reads nothing back (no host wait).
  * resume: a checkpoint after a skipped step (opt.state.skipped) resumed in
    a fresh process gives the uninterrupted run's parameters bit for bit
    (CPU, emulated, emulated with two groups); an older checkpoint without
    the field loads with skipped = 0."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import ASAN, ENV, NABLA, out, run  # noqa: E402
from test_emu_compile import GPT_MODEL  # noqa: E402

TIMEOUT = 900 if ASAN else 300


def nb(code, **env):
    return run([NABLA, "-e", code], TIMEOUT, env=dict(ENV, **env))


def lines_of(so, key):
    return [l[len(key) + 1:] for l in so.splitlines() if l.startswith(key + " ")]


def check(name, ok, why):
    out("PASS" if ok else "FAIL", name, "" if ok else why)


# ---------------------------------------------------------------- ops
OPS = r"""
fn ops(dev) {
seed(int(getenv("SEED", "0")))
fn st(scale) = tensor(list(scale, 0, 0), dtype="f64", device=dev)
fn show(name, ts, s) { print("{dev}_{name} {tolist(s)} {map(ts, fn(t) tolist(reshape(t.to("f64"), [-1])))}") }
# f32's 16411: past one sweep of the capped grid (NABLA_EMU_SMS=2: 64 blocks of 256 threads)
sizes = list(16411, 257, 5, 1)
dts = ["f32", "f16", "bf16", "f64"]
fn grads() = map(list(0..4), fn(i) (randn([sizes[i]]) * 3).to(dts[i]).to(dev))
for case in ["finite", "inf", "nan", "overflow"] {
  gs = grads()
  s = st(3.0)
  if case == "inf" { gs[1][100] = inf }
  if case == "nan" { gs[3][0] = nan }
  if case == "overflow" { gs[1][7] = 60000; s = st(0.5) }
  show("in_{case}", gs, s)
  amp_unscale_(gs, s)
  show("out_{case}", gs, s)
}
many = map(list(0..100), fn(i) randn([3]).to(dev))
s = st(4.0)
show("in_many", many, s)
amp_unscale_(many, s)
show("out_many", many, s)
g = randn([6]).to(dev)
show("in_tied", [g], st(2.0))
s = st(2.0)
amp_unscale_({a: g, b: g, c: [g]}, s)
show("out_tied", [g], s)
s = tensor(list(1024, 0, 0), dtype="f64", device=dev)
seq = list()
for f in list(0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0) {
  copy_(s[2:3], tensor([f * 1.0], dtype="f64", device=dev))
  amp_update_scale_(s, 2.0, 0.25, 3)
  push(seq, tolist(s))
}
print("{dev}_update {seq}")
}
"""


def unscale_ref(vals, dt, scale):
    import torch
    g = torch.tensor(vals, dtype=torch.float64)
    if dt == "f64":
        r = g * (1.0 / scale)
    else:
        t = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]
        r = (g.to(t).float() * torch.tensor(1.0 / scale, dtype=torch.float32)).to(t).double()
    return r.numpy()


def same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def parse(line):
    # "[scale, tracker, found] [[...], ...]" with inf/nan as Nabla prints them
    py = line.replace("inf", "float('inf')").replace("nan", "float('nan')")
    i = py.index("] ") + 1
    return eval(py[:i]), eval(py[i + 1:])


def ops(dev, so):
    dts = ["f32", "f16", "bf16", "f64"]
    if not lines_of(so, f"{dev}_update"):
        out("FAIL", f"scaler.ops_{dev}.runs", "no results (see the process's error above)")
        return
    for case, want_found in [("finite", 0), ("inf", 1), ("nan", 1), ("overflow", 1)]:
        s_in, g_in = parse(lines_of(so, f"{dev}_in_{case}")[0])
        s_out, g_out = parse(lines_of(so, f"{dev}_out_{case}")[0])
        ok = all(same(g_out[i], unscale_ref(g_in[i], dts[i], s_in[0])) for i in range(4))
        check(f"scaler.unscale_{case}_{dev}", ok and s_out == [s_in[0], 0, want_found],
              f"state {s_out}, want found {want_found}; values equal {[same(g_out[i], unscale_ref(g_in[i], dts[i], s_in[0])) for i in range(4)]}")
    s_in, g_in = parse(lines_of(so, f"{dev}_in_many")[0])
    s_out, g_out = parse(lines_of(so, f"{dev}_out_many")[0])
    check(f"scaler.unscale_100_tensors_{dev}", len(g_out) == 100 and all(same(g_out[i], unscale_ref(g_in[i], "f32", 4.0)) for i in range(100))
          and s_out[2] == 0, f"state {s_out}")
    _, g_in = parse(lines_of(so, f"{dev}_in_tied")[0])
    _, g_out = parse(lines_of(so, f"{dev}_out_tied")[0])
    check(f"scaler.unscale_tied_once_{dev}", same(g_out[0], unscale_ref(g_in[0], "f32", 2.0)), f"{g_in[0][:3]} -> {g_out[0][:3]}")
    seq = eval(lines_of(so, f"{dev}_update")[0])
    want, scale, tracker = [], 1024.0, 0.0
    for f in [0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0]:
        if f:
            scale, tracker = scale * 0.25, 0.0
        else:
            tracker += 1
            if tracker >= 3:
                scale, tracker = scale * 2.0, 0.0
        want.append([scale, tracker, float(f)])
    check(f"scaler.update_sequence_{dev}", seq == want, f"{seq} vs {want}")


ERRORS = {
    "state_dtype": ("amp_unscale_([randn([3]).to(dev)], zeros(3, device=dev))", "f64 tensor of 3 elements"),
    "state_size": ("amp_update_scale_(zeros(2, dtype=\"f64\", device=dev), 2, 0.5, 10)", "f64 tensor of 3 elements"),
    "strided": ("amp_unscale_([randn([4, 5]).to(dev).T], zeros(3, dtype=\"f64\", device=dev))", "contiguous"),
    "device": ("amp_unscale_([randn([3])], zeros(3, dtype=\"f64\", device=\"cuda\"))", "is on cpu but the scaler state is on cuda"),
    "backoff": ("amp_update_scale_(zeros(3, dtype=\"f64\", device=dev), 2, 1.5, 10)", "backoff_factor in (0, 1)"),
}


# each case raised inside a try in the one process of all the ops checks (ONE_PROCESS): the message
# must name what was wrong, and the next case still runs
ERRS = "fn errs(dev) {\n" + "".join(
    f'  try {{ {code}; print("{{dev}}_err_{name} no error") }} catch e {{ print("{{dev}}_err_{name} raised " + replace(e.message, "\\n", " ")) }}\n'
    for name, (code, want) in ERRORS.items()) + "}\n"


def errors(dev, so):
    for name, (code, want) in ERRORS.items():
        if name == "device" and dev == "cpu":
            continue
        got = lines_of(so, f"{dev}_err_{name}")
        check(f"scaler.error_{name}_{dev}", len(got) == 1 and got[0].startswith("raised ") and want in got[0], f"got {got}, want an error saying {want!r}")


# ---------------------------------------------------------------- eager vs the host scaler
# REF is the host scaler as it was before the device path (stdlib/optim.nbl):
# every value on the host, the skip decided there.
EAGER = r"""
import nn
import optim
seed(int(getenv("SEED", "0")))
if getenv("DEV") == "cuda" { set_default_device("cuda") }
fn ref_scaler(init_scale, growth_factor=2, backoff_factor=0.5, growth_interval=2000) {
  s = {state: {scale: init_scale * 1.0, growth_tracker: 0}, growth_factor: growth_factor,
       backoff_factor: backoff_factor, growth_interval: growth_interval}
  s.get_scale = fn() s.state.scale
  s.scale = fn(loss) loss * s.state.scale
  s.step = fn(opt, grads) {
    finite = unscale_grads(grads, 1.0 / s.state.scale)
    if finite {
      opt.step(grads)
      s.state.growth_tracker += 1
      if s.state.growth_tracker >= s.growth_interval {
        grown = s.state.scale * s.growth_factor
        if grown <= 3.4028234663852886e38 { s.state.scale = grown }
        s.state.growth_tracker = 0
      }
    } else {
      s.state.scale *= s.backoff_factor
      s.state.growth_tracker = 0
    }
    not finite
  }
  s
}
fn loss_fn(m, x, y, k) = mean((m.l2(gelu(m.l1(x))) - y) ** 2) * k
# one run: optimizer optn (adamw | groups | sgd) with scaler scn (new | ref), from seed SEED
fn eager(optn, scn) {
seed(int(getenv("SEED", "0")))
model = {l1: nn.linear(7, 13), l2: nn.linear(13, 5)}
groups = optn == "groups"
opt = if optn == "adamw" { optim.adamw(model, lr=1e-2, weight_decay=0.1) }
      else if groups { optim.adamw([{params: {l1: model.l1}}, {params: {l2: model.l2}, lr: 5e-3}], lr=1e-2, weight_decay=0.1) }
      else { optim.sgd(model, lr=0.05, momentum=0.9) }
sc = if scn == "ref" { ref_scaler(1000, growth_interval=3, backoff_factor=0.3) } else { optim.grad_scaler(init_scale=1000, growth_interval=3, backoff_factor=0.3) }
bad = list(2, 6, 7)
res = list()
for s in 0..12 {
  x = randn([9, 7]); y = randn([9, 5])
  k = if contains(bad, s) { inf } else { 1.0 }
  g = grad(fn(m) sc.scale(loss_fn(m, x, y, k)))(model)
  sk = sc.step(opt, if groups { list({l1: g.l1}, {l2: g.l2}) } else { g })
  push(res, list(if sk { 1 } else { 0 }, sc.get_scale()))
}
t = "{optn}_{scn}"
print("{t}_steps {res}")
print("{t}_params {map(nn.parameters(model), fn(p) tolist(reshape(p, [-1])))}")
if has(opt.state, "m") { print("{t}_moments {map(nn.parameters(opt.state.m), fn(p) tolist(reshape(p, [-1])))}") }
print("{t}_done ok")
}
"""
EAGER_OPTS = ("adamw", "groups", "sgd")


def eager_all(dev):
    """every optimizer with the device scaler and with the host one, each run from the same seed,
    in one process (with RESTORE's check after them)"""
    runs = "".join(f'eager("{o}", "{sc}")\n' for o in EAGER_OPTS for sc in ("new", "ref"))
    rc, so, se = nb(EAGER + runs + RESTORE, DEV=dev, SEED="5")
    if rc:
        out("FAIL", f"scaler.eager_{dev}.runs", f"rc={rc} {se[-1500:]}")
    for optname in EAGER_OPTS:
        r = {sc: [(k, lines_of(so, f"{optname}_{sc}_{k}")) for k in ("steps", "params", "moments", "done")] for sc in ("new", "ref")}
        steps = lines_of(so, f"{optname}_new_steps")
        want_skips = "[1, " in steps[0] if steps else False
        ok = r["new"] == r["ref"] and bool(lines_of(so, f"{optname}_new_params")) and lines_of(so, f"{optname}_new_done") == ["ok"] and want_skips
        check(f"scaler.eager_{optname}_{dev}_equals_host_scaler", ok,
              f"new {steps} vs ref {lines_of(so, f'{optname}_ref_steps')}; params equal {r['new'][1] == r['ref'][1]}")
    check("scaler.state_restored_reaches_device", lines_of(so, "restore") == ["8.100000381469727 16.2 0.0 false cuda"], f"rc={rc} {so[-300:]} {se[-600:]}")


# adamw_update with four device scalars {lr, step, found_inf, skipped}: a set
# found_inf leaves parameters and moments as they were and counts the skip;
# the next update equals one with host numbers at step - skipped
SKIP = r"""
fn skip(dev) {
seed(9)
p = randn([37]).to(dev); m = zeros([37], device=dev); v = zeros([37], device=dev)
q = clone(p); m2 = clone(m); v2 = clone(v)
g1 = randn([37]).to(dev); g2 = randn([37]).to(dev)
adamw_update([p], [g1], [m], [v], 0.01, 0.9, 0.999, 1e-8, 0.1, 1)
adamw_update([q], [g1], [m2], [v2], 0.01, 0.9, 0.999, 1e-8, 0.1, 1)
d = tensor(list(0.01, 2, 1, 0), dtype="f64", device=dev)
before = tolist(p)
adamw_update([p], [g2], [m], [v], d, 0.9, 0.999, 1e-8, 0.1, 0)
print("{dev}_skipped {tolist(p) == before} {tolist(d)}")
copy_(d, tensor(list(0.01, 3, 0, 1), dtype="f64", device=dev))
adamw_update([p], [g2], [m], [v], d, 0.9, 0.999, 1e-8, 0.1, 0)
adamw_update([q], [g2], [m2], [v2], 0.01, 0.9, 0.999, 1e-8, 0.1, 2)
print("{dev}_applied {tolist(p) == tolist(q)} {tolist(m) == tolist(m2)} {tolist(v) == tolist(v2)} {tolist(d)}")
}
"""


def optim_skip(dev, so):
    ok = lines_of(so, f"{dev}_skipped") == ["true [0.01, 2.0, 0.0, 1.0]"] and lines_of(so, f"{dev}_applied") == ["true true true [0.01, 3.0, 0.0, 1.0]"]
    check(f"scaler.adamw_device_skip_{dev}", ok, f"{lines_of(so, f'{dev}_skipped')} {lines_of(so, f'{dev}_applied')}")


# the ops, error and skip checks of both devices in one process (a process start with the
# emulated module is most of such a check's time under ASan): ops(dev), errs(dev), skip(dev)
def ops_errors_skip():
    rc, so, se = nb(OPS + ERRS + SKIP + 'for dev in ["cpu", "cuda"] { ops(dev); errs(dev); skip(dev) }\n', SEED="3")
    if rc:
        out("FAIL", "scaler.ops_errors_skip.runs", f"rc={rc} {se[-1500:]}")
    for dev in ("cpu", "cuda"):
        ops(dev, so)
        errors(dev, so)
        optim_skip(dev, so)


# a checkpoint's state assigned to scaler.state reaches the device state
RESTORE = r"""
set_default_device("cuda")
w = {w: randn(3)}
opt = optim.adamw(w, lr=0.1)
sc = optim.grad_scaler(init_scale=1024, growth_interval=2)
g = grad(fn(m) sc.scale(sum(m.w * m.w)))(w)
sk = sc.step(opt, g)
sc.state = {scale: 8.1, growth_tracker: 1}
a = sc.scale(ones([])).item()
g = grad(fn(m) sc.scale(sum(m.w * m.w)))(w)
sk = sc.step(opt, g)
print("restore {a} {sc.get_scale()} {sc.state.growth_tracker.item()} {sk.item()} {str(sc.state.scale.device)}")
"""



# ---------------------------------------------------------------- compile
# GPT_TRAIN with STEP_FN compile(whole) (tag c_), then the model built again from the same seed
# (GPT_MODEL) and trained eagerly: STEP_FN whole, what compile returns with NABLA_COMPILE=0 (tag e_)
GPT_TRAIN = r"""
fn forward(m, idx, targets) {
  x = m.wte(idx) + m.wpe(arange(T))
  for blk in m.blocks { x = blk(x) }
  logits = m.lnf(x) @ m.wte.weight.T
  cross_entropy(reshape(logits, [B * T, V]), reshape(targets, [B * T]))
}
opt = optim.adamw(model, lr=optim.warmup_cosine(1e-2, 2, 7), weight_decay=0.1)
sc = optim.grad_scaler(init_scale=4096, growth_interval=2)
vg = value_and_grad(fn(m, idx, targets, k) sc.scale(autocast("f16") { forward(m, idx, targets) } * k))
fn whole(m, idx, targets, k) {
  r = vg(m, idx, targets, k)
  skipped = sc.step(opt, r[1])
  list(r[0], skipped)
}
step = STEP_FN
graph = type(step) == "record" and has(step, "stats")
res = list()
c = nil
for s in 0..7 {
  k = if s == 4 { full([], inf) } else { ones([]) }
  idx = randint(0, V, [B, T]); targets = randint(0, V, [B, T])
  # the last step (a replay): what it does between its arguments and its results
  if graph and s == 6 { cuda.synchronize(); cuda.reset_stats() }
  r = step(model, idx, targets, k)
  if graph and s == 6 { c = cuda.stats() }
  push(res, list(r[0].item(), r[1].item(), sc.get_scale()))
}
print("TAG_steps {res}")
print("TAG_params {map(nn.parameters(model), fn(p) tolist(reshape(p, [-1])))}")
print("TAG_t {opt.state.t}")
if graph {
  st = step.stats()
  print("TAG_stats {st.captures} {st.replays} {st.eager_calls}")
  print("TAG_reasons {st.reasons}")
  print("TAG_replay syncs={c.syncs} h2d={c.memcpy_h2d} d2h={c.memcpy_d2h} mallocs={c.mallocs}")
}
"""
GPT = (GPT_MODEL + GPT_TRAIN.replace("STEP_FN", "compile(whole)").replace("TAG_", "c_")
       + GPT_MODEL + GPT_TRAIN.replace("STEP_FN", "whole").replace("TAG_", "e_"))


def compiled():
    rc, so, se = nb(GPT, SEED="7")
    if rc:
        out("FAIL", "scaler.compile_gpt_f16.runs", f"rc={rc}: {se[-1500:]}")
        return
    so1 = "\n".join(l[2:] for l in so.splitlines() if l.startswith("c_"))
    so0 = "\n".join(l[2:] for l in so.splitlines() if l.startswith("e_"))
    steps = lines_of(so1, "steps")
    skipped = eval(steps[0].replace("true", "True").replace("false", "False").replace("inf", "float('inf')").replace("nan", "float('nan')")) if steps else []
    st = lines_of(so1, "stats")
    check("scaler.compile_gpt_f16.captured", st == ["1 5 1"], f"captures replays eager_calls: {st}; {lines_of(so1, 'reasons')}")
    check("scaler.compile_gpt_f16.equals_eager", steps == lines_of(so0, "steps") and lines_of(so1, "params") == lines_of(so0, "params")
          and bool(lines_of(so1, "params")), f"compiled {steps} vs eager {lines_of(so0, 'steps')}")
    # the skip at step 4 (a replay), scale halved there and doubled every 2 finite steps
    flags = [bool(x[1]) for x in skipped]
    scales = [x[2] for x in skipped]
    check("scaler.compile_gpt_f16.skip_and_scales", flags == [False] * 4 + [True] + [False] * 2
          and scales == [4096.0, 8192.0, 8192.0, 16384.0, 8192.0, 8192.0, 16384.0], f"skipped {flags} scales {scales}")
    rp = lines_of(so1, "replay")
    check("scaler.compile_gpt_f16.replay_no_host_wait", rp == ["syncs=0 h2d=0 d2h=0 mallocs=0"], f"{rp}")


# ---------------------------------------------------------------- resume after a skip
# f16-autocast AdamW steps with an inf injected at step 2 (a skip, counted
# in the device scalars' `skipped`); a checkpoint at step 4 (model,
# opt.state, scaler.state), resumed in a fresh process and optimizer, must
# give at step 8 the parameters of the uninterrupted run, bit for bit: the
# skip count travels in opt.state.skipped.  OLD=1 saves the layout before
# the field existed (t, m, v): it still loads, with skipped = 0.  Also with
# two parameter groups (each has its device scalars; all count the skips).
# f16-autocast AdamW steps with an inf injected at step 2 (a skip, counted
# in the device scalars' `skipped`); checkpoints at step 4 (model,
# opt.state, scaler.state) written by the uninterrupted run, resumed in a fresh
# process and optimizer, must give at step 8 the parameters of the
# uninterrupted run, bit for bit: the skip count travels in opt.state.skipped.
# The second checkpoint has the layout before the field existed (t, m, v): it
# still loads, with skipped = 0.  Also with two parameter groups (each has its
# device scalars; all count the skips).  One process runs every variant
# uninterrupted (run(..., "full")), a fresh one resumes each from both
# checkpoints.
RESUME = r"""
import nn
import optim
fn run(dev, optn, mode, path) {
set_default_device(dev)
seed(3)
model = {l1: nn.linear(7, 13), l2: nn.linear(13, 5)}
groups = optn == "groups"
opt = if groups { optim.adamw([{params: {l1: model.l1}}, {params: {l2: model.l2}, lr: 5e-3}], lr=1e-2, weight_decay=0.1) }
      else { optim.adamw(model, lr=1e-2, weight_decay=0.1) }
sc = optim.grad_scaler(init_scale=1000, growth_interval=3, backoff_factor=0.3)
fn loss_fn(m, x, y, k) = autocast("f16") { mean((m.l2(gelu(m.l1(x))) - y) ** 2) } * k
t = "{dev}_{optn}_{mode}"
first = 0
if mode != "full" {
  ck = load(path + (if mode == "resume_old" { "-old" } else { "" }) + ".safetensors")
  nn.load_state(model, ck.model)
  nn.load_state(opt.state, ck.opt)
  sc.state = ck.scaler
  print("{t}_loaded t={opt.state.t} skipped={int(if is_tensor(opt.state.skipped) { opt.state.skipped.item() } else { opt.state.skipped })}")
  first = 4
}
skips = list()
for s in first..8 {
  if mode == "full" and s == 4 {
    save(path + ".safetensors", {model: model, opt: opt.state, scaler: sc.state})
    old = if groups { {t: opt.state.t, groups: opt.state.groups} } else { {t: opt.state.t, m: opt.state.m, v: opt.state.v} }
    save(path + "-old.safetensors", {model: model, opt: old, scaler: sc.state})
  }
  seed(100 + s)
  x = randn([9, 7]); y = randn([9, 5])
  k = if s == 2 { inf } else { 1.0 }
  g = grad(fn(m) sc.scale(loss_fn(m, x, y, k)))(model)
  sk = sc.step(opt, if groups { list({l1: g.l1}, {l2: g.l2}) } else { g })
  push(skips, if is_tensor(sk) { sk.item() } else { sk })
}
print("{t}_skips {skips}")
print("{t}_params {map(nn.parameters(model), fn(p) tolist(reshape(p, [-1])))}")
}
"""
RESUME_VARIANTS = (("cpu", "adamw"), ("cuda", "adamw"), ("cuda", "groups"))


def resume_after_skip():
    ck = os.path.join(__import__("emuutil").TMPDIR, "resume")

    def go(modes):
        calls = "".join(f'run("{d}", "{o}", "{m}", "{ck}-{d}-{o}")\n' for m in modes for d, o in RESUME_VARIANTS)
        rc, so, se = nb(RESUME + calls)
        if rc:
            out("FAIL", f"scaler.resume_after_skip.{'_'.join(modes)}_runs", f"rc={rc} {se[-1500:]}")
        return so
    full = go(["full"])
    res = go(["resume", "resume_old"])
    for dev, opt in RESUME_VARIANTS:
        name = f"scaler.resume_after_skip_{dev}" + ("_groups" if opt == "groups" else "")
        t = f"{dev}_{opt}"
        if not lines_of(full, f"{t}_full_params"):
            out("FAIL", name, "the uninterrupted run gave no parameters")
            continue
        check(name + ".skipped_at_2", lines_of(full, f"{t}_full_skips") == ["[false, false, true, false, false, false, false, false]"],
              f"{lines_of(full, f'{t}_full_skips')}")
        check(name + ".restored_count", lines_of(res, f"{t}_resume_loaded") == ["t=4 skipped=1" if dev == "cuda" else "t=3 skipped=0"],
              f"{lines_of(res, f'{t}_resume_loaded')}")
        check(name + ".params_bit_identical", bool(lines_of(res, f"{t}_resume_params")) and lines_of(res, f"{t}_resume_params") == lines_of(full, f"{t}_full_params"),
              "the resumed run's parameters at step 8 differ from the uninterrupted run's")
        # a checkpoint written before opt.state had `skipped` loads (strict) with skipped = 0
        check(name + ".old_checkpoint_loads", lines_of(res, f"{t}_resume_old_loaded") == ["t=4 skipped=0" if dev == "cuda" else "t=3 skipped=0"]
              and bool(lines_of(res, f"{t}_resume_old_params")), f"{lines_of(res, f'{t}_resume_old_loaded')}")


def main():
    ops_errors_skip()
    eager_all("cuda")
    compiled()
    resume_after_skip()
    return 1 if __import__("emuutil").n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
