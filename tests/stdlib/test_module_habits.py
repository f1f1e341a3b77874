#!/usr/bin/python3
"""Module habits of a PyTorch user (issue 31): model.to(dtype|device) and
model.double()/float()/half()/bfloat16() (nn.to), nn.map_tree keeping the
non-tensor leaves, forward hooks and pre-hooks (values and gradients through
grad()/value_and_grad() against torch's register_forward_hook /
register_forward_pre_hook), and optim.grad_scaler over every gradient form
its optimizer takes (nil = .grad, a tree, one tree per parameter group).

Run with /usr/bin/python3; NABLA = the interpreter (NABLA_ASAN=1: the ASan
build).  Prints PASS/FAIL/SKIP lines; exits 1 on a failure.
"""
import json
import os
import random
import shutil
import struct
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


try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: module habits: numpy/torch not importable ({e}); run with /usr/bin/python3")
    sys.exit(0)

TMP = tempfile.mkdtemp(prefix="nabla-habits-")
SEED = random.randrange(1, 1 << 40)


def nabla(code, *args, cuda=False):
    script = os.path.join(TMP, "s.nbl")
    with open(script, "w") as f:
        f.write(code)
    env = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"), NO_COLOR="1")
    if cuda:
        env.update(NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2")
        env.pop("NABLA_CUDA_DISABLE", None)
    r = subprocess.run([NABLA, script, *args], capture_output=True, text=True, env=env, timeout=300)
    return r.returncode, r.stdout, r.stderr


def read_st(path):
    dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for k, info in header.items():
        if k != "__metadata__":
            a, b = info["data_offsets"]
            out[k] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=dt[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def checks(name, rc, so, se):
    """every line 'ok NAME' or 'bad NAME: why' of the script is a check"""
    if rc != 0:
        report("FAIL", name, f"exit {rc}: {se.strip()[-900:]}")
        return
    n = 0
    for ln in so.splitlines():
        if ln.startswith("ok "):
            report("PASS", f"{name}: {ln[3:]}")
            n += 1
        elif ln.startswith("bad "):
            report("FAIL", f"{name}: {ln[4:]}")
            n += 1
    if n == 0:
        report("FAIL", name, f"no checks ran: {so.strip()[-400:]}")


# ------------------------------------------------------------------ to / double / map_tree
TO = r'''
import nn
seed(int(argv[1])); dev = argv[2]
fn chk(name, ok, why="") { print(if ok { "ok " + name } else { "bad " + name + ": " + str(why) }) }
lin = nn.linear(5, 4)
model = {enc: nn.sequential([lin, nn.batch_norm1d(4), relu]), head: nn.linear(4, 2), eps: 0.25, name: "net"}
model.tied = model.enc.layers[0].weight                      # a tie
model.__call = fn(self, x) self.head(self.enc(x))
requires_grad(model.head)
x = randn(6, 5)
y32 = model(x)
w0 = model.enc.layers[0].weight
r = model.to("f64")
chk("model.to returns the same model", same(r, model))
chk("floating parameters cast", model.head.weight.dtype == "f64" and model.enc.layers[0].bias.dtype == "f64", model.head.weight.dtype)
chk("floating buffers cast, integer buffers kept", model.enc.layers[1].running_mean.dtype == "f64" and model.enc.layers[1].num_batches_tracked.dtype == "i64")
chk("a tie stays one tensor", same(model.tied, model.enc.layers[0].weight))
chk("requires_grad kept", model.head.weight.requires_grad and model.head.weight.is_leaf and not model.enc.layers[0].weight.requires_grad)
chk("non-tensor fields kept", model.eps == 0.25 and model.name == "net")
y64 = model(x.to("f64"))
chk("the f64 model computes the f32 model's values", y64.dtype == "f64" and max(abs(y64 - y32.to("f64"))).item() < 1e-5, max(abs(y64 - y32.to("f64"))).item())
w64 = model.head.weight
model.double()
chk("a tensor already of the dtype is kept", same(w64, model.head.weight))
model.float(); chk("model.float()", model.head.weight.dtype == "f32" and model.tied.dtype == "f32" and same(model.tied, model.enc.layers[0].weight))
model.bfloat16(); chk("model.bfloat16()", model.head.bias.dtype == "bf16" and model.enc.layers[1].num_batches_tracked.dtype == "i64")
model.half(); chk("model.half()", model.head.bias.dtype == "f16")
nn.to(model, "f32"); chk("nn.to(model, dtype)", model.head.bias.dtype == "f32")
chk("a tensor's own .double()/.half()", randn(2).double().dtype == "f64" and randn(2).half().dtype == "f16" and double(tensor([1, 2])).dtype == "f64")
chk("to(model, bad dtype) is an error", try { model.to("f12"); false } catch e { true })
if dev == "cuda" {
  ycpu = model(x)
  model.to("cuda")
  chk("model.to(cuda) moves parameters and buffers, ints too", model.head.weight.device == "cuda" and model.enc.layers[1].running_var.device == "cuda" and model.enc.layers[1].num_batches_tracked.device == "cuda" and same(model.tied, model.enc.layers[0].weight))
  yc = model(x.to("cuda"))
  model.to("cpu")
  chk("the moved model computes the same values", max(abs(yc.to("cpu") - ycpu)).item() < 1e-5 and model.head.weight.device == "cpu", max(abs(yc.to("cpu") - ycpu)).item())
}
# map_tree keeps the model a model
m = nn.linear(5, 3); m.note = "keep"
nn.register_buffer(m, "stat", ones(3))
m2 = nn.map_tree(m, fn(t) t * 2)
chk("map_tree keeps __call, numbers and strings", has(m2, "__call") and m2.note == "keep")
chk("map_tree maps parameters", all(m2.weight == m.weight * 2).item() and all(m2.bias == m.bias * 2).item())
chk("map_tree keeps buffers as they are", same(m2.stat, m.stat))
chk("the mapped model runs", max(abs(m2(x) - (x @ transpose(m.weight * 2) + m.bias * 2))).item() < 1e-5)
t = {a: lin.weight, b: lin.weight, k: 3}
t2 = nn.map_tree(t, fn(u) u + 1)
chk("map_tree maps a tie once", same(t2.a, t2.b) and t2.k == 3)
'''
for dev in ["cpu"] + (["cuda"] if os.path.exists(EMU_MODULE) else []):
    checks(f"module to/map_tree ({dev})", *nabla(TO, str(SEED), dev, cuda=dev == "cuda"))

# ------------------------------------------------------------------ hooks against torch
HOOKS = r'''
import nn
seed(int(argv[1])); dir = argv[2]
fn chk(name, ok, why="") { print(if ok { "ok " + name } else { "bad " + name + ": " + str(why) }) }
model = nn.sequential([nn.linear(5, 4), relu, nn.linear(4, 3)])
x = randn(6, 5)
plain = model(x)
seen = list()
h1 = nn.register_forward_hook(model.layers[0], fn(layer, inputs, out) { push(seen, "post0"); out * 0.5 })
h2 = nn.register_forward_pre_hook(model.layers[2], fn(layer, inputs) { push(seen, "pre2"); inputs[0] + 1 })
h3 = nn.register_forward_hook(model.layers[2], fn(layer, inputs, out) { push(seen, "post2"); nil })   # nil: output kept
loss_fn = fn(m, x) sum(m(x) ** 2)
vg = value_and_grad(loss_fn)(model, x)
chk("hooks run in order, inside value_and_grad", join(seen, ",") == "post0,pre2,post2", join(seen, ","))
save(dir + "/hooked.safetensors", {w0: model.layers[0].weight, b0: model.layers[0].bias, w2: model.layers[2].weight, b2: model.layers[2].bias,
     x: x, loss: reshape(vg[0], 1), g_w0: vg[1].layers[0].weight, g_b0: vg[1].layers[0].bias, g_w2: vg[1].layers[2].weight, g_b2: vg[1].layers[2].bias,
     y: model(x)})
chk("remove() returns true once", h1.remove() and not h1.remove())
h2.remove(); h3.remove()
chk("after remove the layer computes as before", all(model(x) == plain).item())
g = grad(loss_fn)(model, x)
chk("grad() still works on the unhooked model", g.layers[0].weight.shape == list(4, 5), g.layers[0].weight.shape)
twice = fn(layer, inputs, out) out * 3
a = nn.register_forward_hook(model.layers[2], twice); b = nn.register_forward_hook(model.layers[2], twice)
chk("the same function registered twice runs twice", max(abs(model(x) - plain * 9)).item() < 1e-4)
a.remove()
chk("removing one registration keeps the other", max(abs(model(x) - plain * 3)).item() < 1e-4)
b.remove()
chk("a hook on a non-model is an error", try { nn.register_forward_hook(relu, twice); false } catch e { true })
'''
rc, so, se = nabla(HOOKS, str(SEED), TMP)
checks("forward hooks", rc, so, se)
if rc == 0 and os.path.exists(os.path.join(TMP, "hooked.safetensors")):
    d = {k: torch.tensor(v) for k, v in read_st(os.path.join(TMP, "hooked.safetensors")).items()}
    net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    with torch.no_grad():
        net[0].weight.copy_(d["w0"]); net[0].bias.copy_(d["b0"]); net[2].weight.copy_(d["w2"]); net[2].bias.copy_(d["b2"])
    net[0].register_forward_hook(lambda m, i, o: o * 0.5)
    net[2].register_forward_pre_hook(lambda m, i: (i[0] + 1,))
    net[2].register_forward_hook(lambda m, i, o: None)
    out = net(d["x"])
    loss = (out ** 2).sum()
    loss.backward()
    ok = True
    for k, t in (("loss", loss.reshape(1)), ("y", out), ("g_w0", net[0].weight.grad), ("g_b0", net[0].bias.grad),
                 ("g_w2", net[2].weight.grad), ("g_b2", net[2].bias.grad)):
        good = np.allclose(d[k].numpy(), t.detach().numpy(), rtol=1e-4, atol=1e-5)
        report("PASS" if good else "FAIL", f"forward hooks: {k} as torch", "" if good else f"max |diff| {np.max(np.abs(d[k].numpy() - t.detach().numpy())):.3g}")

# ------------------------------------------------------------------ grad_scaler over the optimizer's gradient forms
SCALER = r'''
import nn
import optim
s0 = int(argv[1])
fn chk(name, ok, why="") { print(if ok { "ok " + name } else { "bad " + name + ": " + str(why) }) }
fn make() { seed(s0); requires_grad(nn.sequential([nn.linear(6, 5), relu, nn.linear(5, 2)])) }
fn groups(m) = [{params: m.layers[0], lr: 0.1}, {params: m.layers[2], lr: 0.02, momentum: 0.5}]
seed(s0 + 1); x = randn(7, 6); y = randn(7, 2)
loss_fn = fn(m) sum((m(x) - y) ** 2)
fn same_weights(a, b) = all(a.layers[0].weight == b.layers[0].weight).item() and all(a.layers[2].weight == b.layers[2].weight).item() and all(a.layers[2].bias == b.layers[2].bias).item()
# the reference: two unscaled steps on .grad
ref = make(); oref = optim.sgd(groups(ref), lr=0.1, momentum=0.9)
for i in 0..2 { oref.zero_grad(); backward(loss_fn(ref)); oref.step() }
# nil: each parameter's .grad, every group
m = make(); o = optim.sgd(groups(m), lr=0.1, momentum=0.9); sc = optim.grad_scaler(init_scale=1024)
for i in 0..2 { o.zero_grad(); backward(sc.scale(loss_fn(m))); skipped = sc.step(o) }
chk("groups, grads nil (.grad): the step of the unscaled loss, bit for bit", same_weights(m, ref) and not skipped)
# one gradient tree per group
m = make(); o = optim.sgd(groups(m), lr=0.1, momentum=0.9); sc = optim.grad_scaler(init_scale=1024)
for i in 0..2 { g = grad(fn(mm) sc.scale(loss_fn(mm)))(m); sc.step(o, [g.layers[0], g.layers[2]]) }
chk("groups, one tree per group: bit for bit", same_weights(m, ref))
# unscale(opt) early, then step
m = make(); o = optim.sgd(groups(m), lr=0.1, momentum=0.9); sc = optim.grad_scaler(init_scale=1024)
for i in 0..2 { o.zero_grad(); backward(sc.scale(loss_fn(m))); sc.unscale(o); sc.step(o) }
chk("groups, unscale(opt) then step: bit for bit", same_weights(m, ref))
# a model-shaped tree with groups is refused before anything is unscaled
m = make(); o = optim.sgd(groups(m), lr=0.1, momentum=0.9); sc = optim.grad_scaler(init_scale=1024)
g = grad(fn(mm) sc.scale(loss_fn(mm)))(m); before = clone(g.layers[0].weight)
msg = try { sc.step(o, g); "no error" } catch e { e.message }
chk("groups, a model-shaped tree: a clear error", contains(msg, "parameter groups") and all(g.layers[0].weight == before).item(), msg)
# inf in a group's .grad: skipped, scale backs off, weights untouched
m = make(); o = optim.sgd(groups(m), lr=0.1, momentum=0.9); sc = optim.grad_scaler(init_scale=1024)
o.zero_grad(); backward(sc.scale(loss_fn(m)))
no_grad { m.layers[2].bias.grad[0] = exp(tensor(1000.0)).item() }
w = clone(m.layers[0].weight)
chk("groups, an inf gradient: the step is skipped", sc.step(o) and sc.get_scale() == 512 and all(m.layers[0].weight == w).item())
# a plain optimizer with grads nil (this used to step on the SCALED gradients)
ref = make(); oref = optim.adamw(ref, lr=0.01)
for i in 0..2 { oref.zero_grad(); backward(loss_fn(ref)); oref.step() }
m = make(); o = optim.adamw(m, lr=0.01); sc = optim.grad_scaler(init_scale=1024)
for i in 0..2 { o.zero_grad(); backward(sc.scale(loss_fn(m))); sc.step(o) }
chk("one group, grads nil (.grad): bit for bit", same_weights(m, ref))
m = make(); o = optim.adamw(m, lr=0.01); sc = optim.grad_scaler(init_scale=1024)
for i in 0..2 { g = grad(fn(mm) sc.scale(loss_fn(mm)))(m); sc.step(o, g) }
chk("one group, a model-shaped tree: bit for bit", same_weights(m, ref))
chk("unscale(nil) is an error", try { sc.unscale(nil); false } catch e { contains(e.message, "optimizer") })
'''
checks("grad_scaler", *nabla(SCALER, str(SEED)))

shutil.rmtree(TMP, True)
sys.exit(1 if failures else 0)
