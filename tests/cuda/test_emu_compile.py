#!/usr/bin/python3
"""test_emu_compile.py — compile(f) (lang/lib/lcompile.c) and CUDA graphs
(cuda/graph.cu, the emulated device's capture and replay in cuda/emu/api.cpp)
on the emulated device.

Every check compares a compiled run with the SAME script run eagerly
(NABLA_COMPILE=0 makes compile the identity), so "equal" means bit for bit:
a replay runs the captured kernels again on the same inputs.
  * gpt_grads: a GPT-shaped step (embeddings, a pre-LN block, tied output,
    bf16 autocast) as compile(value_and_grad(loss)), with gradient clipping,
    AdamW and a warm-up/cosine LR schedule outside it: 5 steps on fresh
    random batches give the same losses and parameters as eager, with 1
    capture and 3 replays; one replay counted by cuda.stats(): one graph
    launch, no host wait, no host copy, no cudaMalloc.
  * gpt_full: the whole step (value_and_grad + opt.step) compiled: AdamW's
    step count and the schedule's learning rate are device scalars its
    compile_replay hook writes before each replay: 1 capture, 3 replays,
    same parameters as eager.
  * gpt_train: the whole step with everything: dropout (per-replay Philox
    offsets), two micro-batches of gradient accumulation, clip_grad_norm_async,
    bf16 autocast, AdamW with a warm-up/cosine schedule: captured, equal to
    eager bit for bit; one replay is one graph launch, no host wait, no host
    copy, no cudaMalloc.
  * dropout inside a compiled function: replays draw the masks eager draws.
  * fallbacks, each with its reason and the eager result: item() inside f (a
    host wait), a CPU tensor moved to the GPU inside f (host-to-device copy),
    a second seed inside f, a counter in an argument record (host state);
    SGD (no device scalars) inside f is refused for its step counter.
  * a new shape captures anew; results of replay k are fresh tensors that
    replay k+1 does not overwrite; a replaced parameter is a new signature;
    on the CPU compile is eager; NABLA_COMPILE=0 returns f; memory stays
    flat over replays; an error inside f propagates.
Run by tools/run-tests.sh with the release build and again (NABLA_ASAN=1)
with the ASan build, which leaves out gpt_grads and gpt_full (gpt_train runs
the same kernels and more, captured and eager).  To stay fast (a process and
the emulated module's load cost ~1 s under ASan) the checks after the GPT
ones share two processes (compiled and eager) and one more."""
import ast
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import ENV, NABLA, out, run  # noqa: E402
import emuutil  # noqa: E402

TIMEOUT = 1200 if emuutil.ASAN else 400

# a GPT of two blocks on the device, as the compiled steps here (and in
# test_emu_scaler) train it
GPT_MODEL = r"""
import nn
import optim
seed(int(getenv("SEED", "0")))
set_default_device("cuda")
C = 32
H = 2
T = 8
B = 2
V = 64
model = {
  wte: nn.embedding(V, C),
  wpe: nn.embedding(T, C),
  blocks: map(list(0..2), fn(i) nn.transformer_block(C, H)),
  lnf: nn.layer_norm(C),
}
"""

GPT = GPT_MODEL + r"""
# one block trains here (GPT_MODEL's second, which test_emu_scaler trains, runs the same kernels)
first = model.blocks[0]
model.blocks = map(list(0..1), fn(i) first)
mode = getenv("MODE", "grads")
pdrop = if mode == "train" { 0.2 } else { 0 }
fn forward(m, idx, targets) {
  x = m.wte(idx) + m.wpe(arange(T))
  if pdrop > 0 { x = dropout(x, pdrop) }
  for blk in m.blocks { x = blk(x) }
  logits = m.lnf(x) @ m.wte.weight.T
  cross_entropy(reshape(logits, [B * T, V]), reshape(targets, [B * T]))
}
fn loss_fn(m, idx, targets) = autocast("bf16") { forward(m, idx, targets) }
opt = optim.adamw(model, lr=optim.warmup_cosine(1e-2, 2, 5), weight_decay=0.1)
vg = value_and_grad(loss_fn)
fn full(m, idx, targets) {
  r = vg(m, idx, targets)
  opt.step(r[1])
  r[0]
}
fn train(m, i1, t1, i2, t2) {
  r1 = vg(m, i1, t1)
  r2 = vg(m, i2, t2)
  g = optim.tree_scale(optim.accumulate(optim.accumulate(nil, r1[1]), r2[1]), 0.5)
  optim.clip_grad_norm_async(g, 0.5)
  opt.step(g)
  (r1[0] + r2[0]) * 0.5
}
step = if mode == "grads" { compile(vg) } else if mode == "full" { compile(full) } else { compile(train) }
losses = list()
for s in 0..5 {
  idx = randint(0, V, [B, T])
  targets = randint(0, V, [B, T])
  if mode == "train" {
    push(losses, step(model, idx, targets, randint(0, V, [B, T]), randint(0, V, [B, T])).item())
  } else if mode == "grads" {
    r = step(model, idx, targets)
    optim.clip_grad_norm(r[1], 1.0)
    opt.step(r[1])
    push(losses, r[0].item())
  } else {
    push(losses, step(model, idx, targets).item())
  }
}
print("losses {losses}")
print("params {map(nn.parameters(model), fn(p) tolist(reshape(p, [-1])))}")
if type(step) == "record" and has(step, "stats") {
  st = step.stats()
  print("stats {st.captures} {st.replays} {st.eager_calls}")
  print("reasons {st.reasons}")
}
if mode == "grads" {
  idx = randint(0, V, [B, T])
  targets = randint(0, V, [B, T])
  cuda.synchronize()
  cuda.reset_stats()
  r = step(model, idx, targets)
  c = cuda.stats()
  graph_ops = if has(c.by_op, "(no op)") { c.by_op["(no op)"] } else { 0 }
  print("replay launches={c.launches} d2d={c.memcpy_d2d} gemms={c.gemms} syncs={c.syncs} h2d={c.memcpy_h2d} d2h={c.memcpy_d2h} mallocs={c.mallocs} graph={graph_ops} results={1 + len(nn.parameters(r[1]))}")
}
if mode == "train" {
  args = map(list(0..4), fn(i) randint(0, V, [B, T]))
  cuda.synchronize()
  cuda.reset_stats()
  r = step(model, args[0], args[1], args[2], args[3])
  c = cuda.stats()
  graph_ops = if has(c.by_op, "(no op)") { c.by_op["(no op)"] } else { 0 }
  print("replay launches={c.launches} d2d={c.memcpy_d2d} gemms={c.gemms} syncs={c.syncs} h2d={c.memcpy_h2d} d2h={c.memcpy_d2h} mallocs={c.mallocs} graph={graph_ops} results=1")
  print("after {r.item()} {tolist(reshape(nn.parameters(model)[0], [-1]))}")
}
"""


def nb(code, compiled=True, **env):
    e = dict(ENV, **env)
    if not compiled:
        e["NABLA_COMPILE"] = "0"
    return run([NABLA, "-e", code], TIMEOUT, env=e)


def lines_of(so, key):
    return [l[len(key) + 1:] for l in so.splitlines() if l.startswith(key + " ")]


def check(name, ok, why):
    out("PASS" if ok else "FAIL", name, "" if ok else why)


def gpt(mode):
    rc1, so1, se1 = nb(GPT, True, MODE=mode)
    rc0, so0, se0 = nb(GPT, False, MODE=mode)
    if rc1 or rc0:
        out("FAIL", f"compile.gpt_{mode}.runs", f"compiled rc={rc1}: {se1[-1500:]} | eager rc={rc0}: {se0[-800:]}")
        return None
    same = lines_of(so1, "losses") == lines_of(so0, "losses") and lines_of(so1, "params") == lines_of(so0, "params")
    check(f"compile.gpt_{mode}.equals_eager", same and lines_of(so1, "params"),
          f"compiled {lines_of(so1, 'losses')} vs eager {lines_of(so0, 'losses')}")
    losses = lines_of(so1, "losses")
    check(f"compile.gpt_{mode}.loss_moves", losses and len(set(losses[0].strip("[]").split(","))) > 1, f"losses {losses}")
    return so1


def main():
    so = None if emuutil.ASAN else gpt("grads")
    if so:
        st = lines_of(so, "stats")
        check("compile.gpt_grads.captured_once_replayed", st == ["1 3 1"], f"captures replays eager_calls: {st}; {lines_of(so, 'reasons')}")
        rp = lines_of(so, "replay")
        m = re.match(r"launches=(\d+) d2d=(\d+) gemms=(\d+) syncs=(\d+) h2d=(\d+) d2h=(\d+) mallocs=(\d+) graph=(\d+) results=(\d+)", rp[0]) if rp else None
        if not m:
            out("FAIL", "compile.replay_counts", f"no replay line: {so[-600:]}")
        else:
            launches, d2d, gemms, syncs, h2d, d2h, mallocs, graph, results = map(int, m.groups())
            print(f"INFO: compile one replay: {rp[0]}")
            # one graph launch (counted outside any op), the two input copies
            # and one copy per result tensor (the loss and every gradient);
            # no GEMM issued from the host, nothing waited for
            check("compile.replay_counts", graph == 1 and gemms == 0 and syncs == 0 and h2d == 0 and d2h == 0 and mallocs == 0
                  and launches + d2d == 1 + 2 + results, rp[0])
    so = None if emuutil.ASAN else gpt("full")
    if so:
        st = lines_of(so, "stats")
        check("compile.gpt_full.captured", st == ["1 3 1"], f"captures replays eager_calls: {st}; {lines_of(so, 'reasons')}")
    so = gpt("train")
    if so:
        st = lines_of(so, "stats")
        check("compile.gpt_train.captured", st == ["1 3 1"], f"captures replays eager_calls: {st}; {lines_of(so, 'reasons')}")
        rp = lines_of(so, "replay")
        m = re.match(r"launches=(\d+) d2d=(\d+) gemms=(\d+) syncs=(\d+) h2d=(\d+) d2h=(\d+) mallocs=(\d+) graph=(\d+) results=(\d+)", rp[0]) if rp else None
        if not m:
            out("FAIL", "compile.gpt_train.replay_counts", f"no replay line: {so[-600:]}")
        else:
            launches, d2d, gemms, syncs, h2d, d2h, mallocs, graph, results = map(int, m.groups())
            print(f"INFO: compile one whole-step replay: {rp[0]}")
            # the graph, AdamW's device scalars {lr, t} and the random slot
            # (one tiny kernel each, outside any op: values as launch
            # arguments), four input copies and the loss's copy; nothing
            # else issued from the host
            check("compile.gpt_train.replay_counts", graph == 3 and launches == 3 and gemms == 0 and syncs == 0 and h2d == 0 and d2h == 0
                  and mallocs == 0 and d2d == 4 + results, rp[0])

    compared_checks()
    one_process_checks()


# ---- fallbacks: each with its reason, the result the eager one (fdef defines f) ----
FALLBACKS = {
    "item": ("fn f(x) { s = sum(x).item(); x * s }", "device-to-host copy"),
    "sync": ("fn f(x) { y = x * 2; cuda.synchronize(); y + 1 }", "host wait"),
    "h2d": ("fn f(x) x + tensor([1.0, 2.0, 3.0]).cuda()", "host-to-device copy"),
    "adamw_host": ("w = zeros(3)\nm = zeros(3)\nv = zeros(3)\nfn f(x) { adamw_update(w, x, m, v, 0.1, 0.9, 0.999, 1e-8, 0, 1); w * 1 }", "host numbers"),
    "seed2": ("fn f(x) { y = dropout(x * 2, 0.5); seed(5); dropout(y, 0.5) }", "seed()"),
    "counter": ("fn f(x, st) { st.n = st.n + 1; x * 3 }", "changed host values"),
}


def fallback_code(name, fdef):
    """one fallback case: its own f (f_NAME), seeded on its own, so that the
    cases share one process and still see what a process of their own sees"""
    extra = ", st" if name == "counter" else ""
    return f"""
seed(1)
set_default_device("cuda")
{fdef.replace("fn f(", f"fn f_{name}(")}
st = {{n: 0}}
g = compile(f_{name})
res = list()
for i in 0..5 {{
  x = randn(3)
  push(res, tolist(g(x{extra})))
}}
print("res_{name} {{res}}")
if type(g) == "record" {{ s = g.stats(); print("stats_{name} {{s.captures}} {{s.replays}} {{s.eager_calls}} {{s.reasons}}") }}
"""


# ---- dropout captured: each replay draws the mask eager draws ----
DROPOUT = r"""
seed(3)
set_default_device("cuda")
fn fdrop(x) = dropout(x * 2, 0.5) + rand(3)
g = compile(fdrop)
x = randn(7, 3)
res = list()
for i in 0..6 { push(res, tolist(g(x))); y = rand(2) }
print("res {res}")
print("after {tolist(rand(4))}")
if type(g) == "record" { s = g.stats(); print("stats {s.captures} {s.replays} {s.eager_calls} {s.reasons}") }
"""

# ---- the host part of a replayed step follows the host state: a restored
# step count and a changed schedule position reach the device scalars;
# SGD (no device scalars) in a compiled step stays eager with its reason ----
STEP = r"""
seed(4)
set_default_device("cuda")
model = {l1: nn.linear(5, 7), l2: nn.linear(7, 3)}
opt = optim.adamw(model, lr=optim.step_lr(0.05, 2, 0.5), weight_decay=0.05)
sgd = optim.sgd(model, lr=0.01, momentum=0.9)
fn loss(m, x, y) = mean((m.l2(tanh(m.l1(x))) - y) ** 2)
vg = value_and_grad(loss)
fn step(m, x, y) { r = vg(m, x, y); opt.step(r[1]); r[0] }
fn sstep(m, x, y) { r = vg(m, x, y); sgd.step(r[1]); r[0] }
g = compile(step)
h = compile(sstep)
out = list()
for i in 0..9 {
  if i == 5 { opt.state.t = 1 }
  push(out, g(model, randn(4, 5), randn(4, 3)).item())
}
for i in 0..3 { push(out, h(model, randn(4, 5), randn(4, 3)).item()) }
# an optimizer reached through f's closure (in its signature until declared)
model2 = {l1: nn.linear(5, 3)}
fn make_step(o) = fn(m, x, y) { r = value_and_grad(fn(m, x, y) mean((m.l1(x) - y) ** 2))(m, x, y); o.step(r[1]); r[0] }
k = compile(make_step(optim.adam(model2, lr=optim.warmup_cosine(0.1, 2, 5), weight_decay=0.01)))
for i in 0..6 { push(out, k(model2, randn(4, 5), randn(4, 3)).item()) }
push(out, tolist(reshape(model2.l1.weight, [-1])))
if type(k) == "record" { s = k.stats(); print("stats3 {s.captures} {s.replays} {s.eager_calls}") }
print("out {out} {opt.state.t}")
print("params {map(nn.parameters(model), fn(p) tolist(reshape(p, [-1])))}")
if type(g) == "record" { s = g.stats(); t = h.stats(); print("stats {s.captures} {s.replays} {s.eager_calls} | {t.captures} {t.replays} {t.eager_calls} {t.reasons}") }
"""


def compared_checks():
    """the checks that compare a compiled run with an eager one: ONE process
    each way for all of them (a process and the emulated module's load cost
    ~1 s under ASan), each case seeded on its own and its lines tagged.
    The eager process (NABLA_COMPILE=0) also checks that compile is then f."""
    code = "import nn\nimport optim\n" + "".join(fallback_code(n, fdef) for n, (fdef, _) in FALLBACKS.items())
    code += DROPOUT + STEP + '\nfn fid(x) = x\nprint("off {type(compile(fid))} {compile(fid) == fid}")\n'
    rc1, so1, se1 = nb(code, True)
    rc0, so0, se0 = nb(code, False)
    if rc1 or rc0:
        out("FAIL", "compile.compared.runs", f"compiled rc={rc1}: {se1[-1500:]} | eager rc={rc0}: {se0[-800:]}")
        return
    for name, (_, want) in FALLBACKS.items():
        st = lines_of(so1, f"stats_{name}")
        ok = lines_of(so1, f"res_{name}") == lines_of(so0, f"res_{name}") and lines_of(so1, f"res_{name}") \
            and st and st[0].startswith("0 0 5") and want in st[0]
        check(f"compile.fallback_{name}", ok, f"stats {st}; compiled {lines_of(so1, f'res_{name}')} eager {lines_of(so0, f'res_{name}')}")

    res = lines_of(so1, "res")
    try:
        distinct = len({repr(r) for r in ast.literal_eval(res[0])}) if res else 0
    except (ValueError, SyntaxError):
        distinct = 0
    st = lines_of(so1, "stats")
    check("compile.dropout_replays", res and res == lines_of(so0, "res") and lines_of(so1, "after") == lines_of(so0, "after")
          and distinct == 6 and st and st[0].startswith("1 4 1"),
          f"stats {st}; distinct masks {distinct}; compiled {res} eager {lines_of(so0, 'res')}")

    same = lines_of(so1, "out") == lines_of(so0, "out") and lines_of(so1, "params") == lines_of(so0, "params") and lines_of(so1, "params")
    st = lines_of(so1, "stats")
    check("compile.step_restored_count", same and len(st) == 2 and st[1].startswith("1 7 1 | 0 0 3") and "changed host values" in st[1],
          f"stats {st}; compiled {lines_of(so1, 'out')} eager {lines_of(so0, 'out')}")
    check("compile.step_closure_optimizer", same and lines_of(so1, "stats3") == ["1 3 2"], f"stats {lines_of(so1, 'stats3')}")
    check("compile.off_is_identity", lines_of(so0, "off") == ["function true"] and lines_of(so1, "off") == ["record false"],
          f"NABLA_COMPILE=0: {lines_of(so0, 'off')} (want function true); on: {lines_of(so1, 'off')} (want record false)")


# ---- bad arguments: the error each raises (caught in the script: name, code, message part) ----
ERRORS = {
    "clip_max_norm": ('optim.clip_grad_norm_async([randn(3)], 0)', "max_norm must be > 0"),
    "scalar_dtype": ('set_device_scalar(zeros(2), list(1, 2))', "f64 tensor of 2 elements"),
    "scalar_count": ('set_device_scalar(zeros(3, dtype="f64", device="cuda"), list(1, 2))', "f64 tensor of 2 elements"),
    "scalar_value": ('set_device_scalar(zeros(1, dtype="f64"), "x")', "must be a number"),
    "replay_rec": ('compile_replay(3, "t", fn() nil)', "rec must be a record"),
    "replay_hook": ('compile_replay({t: 1}, "t", 3)', "hook must be a function"),
    "bad_argument": ('compile(3)', "compile: expected a function"),
}

# ---- signatures, fresh results, parameters replaced, memory ----
SIGNATURES = r"""
seed(2)
set_default_device("cuda")
w = {w: randn(4, 4)}
fn f(m, x) = tanh(x @ m.w) * 2
g = compile(f)
outs = list()
xs = map(list(0..4), fn(i) randn(3, 4))
for x in xs { push(outs, g(w, x)) }
print("fresh {map(outs, tolist)}")
print("eager {map(xs, fn(x) tolist(f(w, x)))}")
ys = map(list(0..3), fn(i) randn(5, 4))
print("shape2 {map(ys, fn(y) tolist(g(w, y)))} vs {map(ys, fn(y) tolist(f(w, y)))}")
s = g.stats()
print("stats2 {s.captures} {s.replays} {s.eager_calls} {s.signatures}")
w.w = randn(4, 4)
z = randn(3, 4)
print("newparam {tolist(g(w, z))} vs {tolist(f(w, z))}")
for i in 0..3 { q = g(w, z) }
q = nil
cuda.synchronize()
m0 = cuda.memory().allocated
for i in 0..20 { q = g(w, z) }
q = nil
cuda.synchronize()
print("memory {cuda.memory().allocated - m0}")
h = compile(fn(x) if sum(x).item() > 1e9 { x } else { error("boom") })
r = try { h(randn(3)) } catch e { "caught {e.message}" }
r2 = try { h(randn(3)) } catch e { "caught {e.message}" }
print("err {r} | {r2}")
"""

# ---- CPU: eager ----
CPU = r"""
set_default_device("cpu")
fn fc(x) = x * 2 + 1
gc = compile(fc)
for i in 0..4 { y = gc(randn(3)) }
s = gc.stats()
print("cpu {s.captures} {s.replays} {s.eager_calls}")
"""


def one_process_checks():
    """clip_grad_norm_async against NumPy (CPU and the emulated device), the
    bad-argument errors, compile_replay outside compile, signatures and fresh
    results, memory, the CPU: one process (each part sets its own device)"""
    import numpy as np
    rng = np.random.default_rng()
    shapes = [(3, 5), (7,), (2, 3, 4)]
    arrs = [rng.standard_normal(sh).astype(np.float32) * rng.uniform(0.1, 3) for sh in shapes]
    lits = ", ".join(f"tensor({a.tolist()})" for a in arrs)
    norm = float(np.sqrt(sum((a.astype(np.float64) ** 2).sum() for a in arrs)))
    code = "import optim\n"
    clips = []
    for dev in ("cpu", "cuda"):
        for maxn in (norm * 2, norm / 3):
            tag = f"clip_async_{dev}_{'clips' if maxn < norm else 'keeps'}"
            clips.append((tag, maxn))
            code += f"""
set_default_device("{dev}")
gs = [{lits}]
gs = map(gs, fn(g) g.to("{dev}"))
n = optim.clip_grad_norm_async(gs, {maxn!r})
print("norm_{tag} {{n.item()}} {{n.device}}")
print("gs_{tag} {{map(gs, fn(g) tolist(reshape(g, [-1])))}}")
"""
    # (a message is printed with its newlines as spaces, whole on one line)
    code += 'set_default_device("cpu")\nfn message_of(f) = try { f(); "no error" } catch e { join(split(e.message, "\\n"), " ") }\n'
    for name, (expr, _) in ERRORS.items():
        code += f'print("error_{name} {{message_of(fn() {expr})}}")\n'
    code += 'r = {t: 1}\nz = zeros(2, dtype="f64", device="cuda")\nset_device_scalar(z, list(0.5, 3))\nprint("outside {compile_replay(r, "t", fn() nil)} {tolist(z)}")\n'
    code += SIGNATURES + CPU
    rc, so, se = nb(code, True)
    if rc:
        out("FAIL", "compile.one_process.runs", f"rc={rc}: {se[-1500:]}")
        return
    for tag, maxn in clips:
        name = f"compile.{tag}"
        try:
            got_n = float(lines_of(so, f"norm_{tag}")[0].split()[0])
            got = [np.array(g, dtype=np.float64) for g in ast.literal_eval(lines_of(so, f"gs_{tag}")[0])]
        except (ValueError, SyntaxError, IndexError) as e:
            out("FAIL", name, f"unreadable output {e}: {so[-400:]}")
            continue
        k = min(1.0, maxn / (norm + 1e-6))
        want = [a.astype(np.float64).reshape(-1) * k for a in arrs]
        ok = abs(got_n - norm) <= 1e-5 * norm and all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want))
        check(name, ok, f"norm {got_n} vs {norm}; max err {max(float(np.abs(g - w).max()) for g, w in zip(got, want))}")
    for name, (_, want) in ERRORS.items():
        msg = lines_of(so, f"error_{name}")
        check(f"compile.error_{name}" if name != "bad_argument" else "compile.bad_argument",
              len(msg) == 1 and want in msg[0], f"the error raised: {msg} (want one with {want!r})")
    check("compile.replay_outside_compile", lines_of(so, "outside") == ["false [0.5, 3.0]"], f"{lines_of(so, 'outside')} {se[-300:]}")
    fr = lines_of(so, "fresh")
    check("compile.results_are_fresh", fr and fr == lines_of(so, "eager"), f"{fr} vs {lines_of(so, 'eager')}")
    s2 = lines_of(so, "shape2")
    check("compile.new_shape_captures", s2 and s2[0].split(" vs ")[0] == s2[0].split(" vs ")[1], f"{s2}")
    st = lines_of(so, "stats2")
    check("compile.new_shape_stats", st == ["2 3 2 2"], f"captures replays eager_calls signatures: {st}")
    npar = lines_of(so, "newparam")
    check("compile.replaced_parameter", npar and npar[0].split(" vs ")[0] == npar[0].split(" vs ")[1], f"{npar}")
    mem = lines_of(so, "memory")
    check("compile.memory_flat", mem == ["0"], f"bytes allocated after 20 replays: {mem}")
    er = lines_of(so, "err")
    check("compile.error_propagates", er and er[0].count("caught") == 2 and "boom" in er[0], f"{er}")
    check("compile.cpu_eager", lines_of(so, "cpu") == ["0 0 4"], f"{lines_of(so, 'cpu')}")
    # (a process ended by an uncaught error: the status and the message)
    rc, so, se = nb('print(compile(3))', True)
    check("compile.bad_argument.exits", rc != 0 and "compile: expected a function" in se, f"rc={rc} {se[-300:]}")


if __name__ == "__main__":
    main()
    sys.exit(1 if emuutil.n_fail else 0)
