#!/usr/bin/python3
"""Buffers (module state that is not trained) against PyTorch.

A small CNN with BatchNorm (conv -> batch_norm2d -> relu -> max_pool ->
linear -> batch_norm1d with momentum=nil (a cumulative average) -> linear),
in f64, starts from the same weights in Nabla and torch (Nabla saves its
initial state; torch loads it by the same state-dict keys) and trains a few
steps on fresh random batches two ways:
  A. value_and_grad(loss_fn)(model, x, y) + optim.adamw  (the documented way:
     grad() runs the model on a copy, the running statistics must come back)
  B. backward(loss) + optim.sgd(momentum)
Both must reach torch's running statistics, num_batches_tracked, weights and
eval-mode logits (1e-12).  Then: buffers are absent from nn.parameters, the
grad() tree and the optimizer state, requires_grad leaves them alone; a
checkpoint round trip restores them; state-dict keys equal torch's;
assignments into the model inside grad() are written back (a buffer, a
number, a list append) or are an error (a parameter replaced).

On a binary without buffers (main before them) the first checks fail: the
running statistics stay at their initial values under value_and_grad.

Run with /usr/bin/python3; env NABLA = interpreter.
"""
import os, shutil, subprocess, sys, tempfile

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# NABLA_ASAN=1: also run under the ASan build by tools/run-tests.sh (torchcmp reads it)
import torchcmp  # noqa: E402
from torchcmp import ROOT, NABLA, SUFFIX, rng, report, read_safetensors  # noqa: E402
torch.set_num_threads(1)


def run_nabla(code, tmp):
    path = os.path.join(tmp, "script.nbl")
    with open(path, "w") as f:
        f.write(code)
    env = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"), NO_COLOR="1")
    return subprocess.run([NABLA, path, tmp], capture_output=True, text=True, env=env, timeout=300)


STEPS = 4
N, CIN, HW, NCLS = 6, 2, 8, 3

MODEL_NBL = r'''
import nn
import optim
dir = argv[1]
# no bias before a batch norm (as in a ResNet): its true gradient is 0, and
# Adam's normalisation would turn rounding noise into full-size steps
fn make() = nn.to({
  conv: nn.conv2d(2, 4, 3, padding=1, bias=false),
  bn: nn.batch_norm2d(4, momentum=0.2),
  fc: nn.linear(4 * 4 * 4, 8, bias=false),
  bn1: nn.batch_norm1d(8, momentum=nil),
  head: nn.linear(8, 3),
  __call: fn(self, x) {
    h = max_pool2d(relu(self.bn(self.conv(x))), 2)
    self.head(relu(self.bn1(self.fc(flatten(h, 1, -1)))))
  },
}, "f64")
d = load_npz(dir + "/data.npz")
'''

TRAIN_NBL = MODEL_NBL + r'''
model = make()
save(dir + "/init.safetensors", model)
# A: value_and_grad + AdamW (grad() runs on a copy of the model)
# eps 1e-3 (both sides): Adam's g / (sqrt(v) + eps) at eps 1e-8 turns a
# gradient of ~1e-8 into a full step, so the last bits of its rounding (the
# order of a sum) became ~1e-11 in the weights for ~1 seed in 6
opt = optim.adamw(model, lr=0.01, weight_decay=0.01, eps=1e-3)
step = value_and_grad(fn(m, x, y) cross_entropy(m(x), y))
g = nil
for i in 0..STEPS {
  r = step(model, d["x{i}"], d["y{i}"])
  g = r[1]
  opt.step(g)
}
print("grad_tree_buffers_nil", g.bn.running_mean == nil and g.bn.running_var == nil and g.bn.num_batches_tracked == nil and g.bn1.running_mean == nil)
print("grad_tree_params", is_tensor(g.bn.weight) and is_tensor(g.conv.weight))
print("opt_state_buffers_nil", opt.state.m.bn.running_mean == nil and opt.state.v.bn1.running_var == nil)
print("n_params", len(nn.parameters(model)), "n_buffers", len(nn.buffers(model)), "num_params", nn.num_params(model))
nn.eval(model)
no_grad { la = model(d.xt) }
save(dir + "/a.safetensors", {model: model, logits: la})
# checkpoint round trip into a freshly built model
m2 = make()
nn.load_state(m2, load(dir + "/a.safetensors").model)
nn.eval(m2)
no_grad { l2 = m2(d.xt) }
print("roundtrip_maxdiff", max(abs(l2 - la)).item(), "nbt", m2.bn.num_batches_tracked.item(), m2.bn.num_batches_tracked.dtype)

# B: backward + SGD with momentum, from the same initial weights
model = make()
nn.load_state(model, load(dir + "/init.safetensors"))
requires_grad(model)
print("buffers_not_requiring_grad", not model.bn.running_mean.requires_grad and not model.bn1.running_var.requires_grad and model.bn.weight.requires_grad)
opt = optim.sgd(model, lr=0.05, momentum=0.9, weight_decay=1e-3)
for i in 0..STEPS {
  loss = cross_entropy(model(d["x{i}"]), d["y{i}"])
  backward(loss)
  print("clip", optim.clip_grad_norm(model, 1e9) > 0)
  opt.step()
  opt.zero_grad()
}
nn.eval(model)
no_grad { lb = model(d.xt) }
save(dir + "/b.safetensors", {model: model, logits: lb})
'''.replace("STEPS", str(STEPS))

NORMS_NBL = MODEL_NBL + r'''
# group norm and instance norm (with running statistics) trained by value_and_grad + SGD
fn make2() = nn.to({
  conv: nn.conv2d(2, 4, 3, padding=1),
  gn: nn.group_norm(2, 4),
  inorm: nn.instance_norm2d(4, affine=true, track_running_stats=true, momentum=0.3),
  head: nn.linear(4 * 8 * 8, 3),
  __call: fn(self, x) self.head(flatten(relu(self.inorm(self.gn(self.conv(x)))), 1, -1)),
}, "f64")
model = make2()
save(dir + "/init2.safetensors", model)
opt = optim.sgd(model, lr=0.05, momentum=0.9)
step = value_and_grad(fn(m, x, y) cross_entropy(m(x), y))
for i in 0..STEPS { opt.step(step(model, d["x{i}"], d["y{i}"])[1]) }
nn.eval(model)
no_grad { lc = model(d.xt) }
save(dir + "/c.safetensors", {model: model, logits: lc})
'''.replace("STEPS", str(STEPS))

WRITEBACK_NBL = r'''
import nn
# a hand-written layer with a buffer it reassigns in the forward (not in place)
m = {w: ones(3, dtype="f64"), steps: 0, log: list(), __call: fn(self, x) {
  self.avg = self.avg * 0.5 + mean(x * self.w) * 0.5
  self.steps = self.steps + 1
  push(self.log, self.steps)
  sum(x * self.w)
}}
nn.register_buffer(m, "avg", zeros([], dtype="f64"))
# the same layer written with a __buffers literal
m_lit = {w: ones(3, dtype="f64"), avg: zeros([], dtype="f64"), __buffers: ["avg"],
         __call: fn(self, x) { self.avg = self.avg * 0.5 + mean(x * self.w) * 0.5; sum(x * self.w) }}
d = load_npz(argv[1] + "/wb.npz")
for i in 0..3 {
  g = value_and_grad(fn(m, x) m(x))(m, d["x{i}"])[1]
  grad(fn(m, x) m(x))(m_lit, d["x{i}"])
}
print("avg", m.avg.item(), "avg_lit", m_lit.avg.item(), "steps", m.steps, "log", len(m.log), "avg_rg", m.avg.requires_grad, "g_avg_nil", g.avg == nil)
bad = grad(fn(m, x) { m.w = m.w * 2; m(x) })
print("replaced:", try { bad(m, d.x0); "no error" } catch e { e.message })
print("w_kept", max(abs(m.w - 1)).item())
shrink = grad(fn(m, x) { pop(m.log); pop(m.log); m(x) })
print("shortened:", try { shrink(m, d.x0); "no error" } catch e { e.message })
'''


class Net(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = tnn.BatchNorm2d(4, momentum=0.2)
        self.fc = tnn.Linear(64, 8, bias=False)
        self.bn1 = tnn.BatchNorm1d(8, momentum=None)
        self.head = tnn.Linear(8, 3)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.head(F.relu(self.bn1(self.fc(torch.flatten(h, 1)))))


DEVICE_NBL = r'''
import nn
seed(4)
fn make() = nn.to(nn.sequential([nn.conv2d(2, 3, 3), nn.batch_norm2d(3), relu, nn.flatten(), nn.linear(3 * 6 * 6, 4), nn.batch_norm1d(4)]), "f64")
m = make()
mc = nn.to(nn.load_state(make(), m), "cuda")
devs = map(nn.parameters(mc) + nn.buffers(mc), fn(t) t.device)
x = randn(5, 2, 8, 8).to("f64")
lf = value_and_grad(fn(m, x) sum(m(x) ** 2))
d = 0
for i in 0..2 {
  g = lf(m, x)[1]; gc = lf(mc, x.to("cuda"))[1]
  d = max(d, max(abs(g.layers[1].weight - gc.layers[1].weight.to("cpu"))).item())
}
for i in 0..2 { for k in list("running_mean", "running_var") { d = max(d, max(abs(m.layers[5][k] - mc.layers[5][k].to("cpu"))).item()) } }
print("devices", join(map(devs, fn(v) str(v)), ","), "nbt", mc.layers[1].num_batches_tracked.item(), "diff", d)
'''


class Net2(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(2, 4, 3, padding=1)
        self.gn = tnn.GroupNorm(2, 4)
        self.inorm = tnn.InstanceNorm2d(4, affine=True, track_running_stats=True, momentum=0.3)
        self.head = tnn.Linear(256, 3)

    def forward(self, x):
        return self.head(torch.flatten(F.relu(self.inorm(self.gn(self.conv(x)))), 1))


def torch_train(init, data, how):
    net = (Net2() if how == "c" else Net()).double()
    sd = net.state_dict()
    report(f"state-dict keys equal torch's ({how})", sorted(sd.keys()) == sorted(init.keys()),
           f"nabla {sorted(init.keys())} torch {sorted(sd.keys())}")
    net.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    net.train()
    if how == "a":
        opt = torch.optim.AdamW(net.parameters(), lr=0.01, weight_decay=0.01, eps=1e-3)
    elif how == "c":
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    for i in range(STEPS):
        opt.zero_grad()
        F.cross_entropy(net(torch.tensor(data[f"x{i}"])), torch.tensor(data[f"y{i}"])).backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        logits = net(torch.tensor(data["xt"])).numpy()
    return {k: v.numpy() for k, v in net.state_dict().items()}, logits


def compare(name, got, want, tol=1e-12):
    if got.shape != want.shape or got.dtype != want.dtype:
        report(name, False, f"{got.dtype}{list(got.shape)} vs torch {want.dtype}{list(want.shape)}")
        return
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
    report(name, err <= tol * scale, f"max |diff| {err:.3g} (scale {scale:.3g})")


def outputs(stdout):
    return {l.split()[0]: l.split()[1:] for l in stdout.splitlines() if l.strip()}


def main():
    tmp = tempfile.mkdtemp(prefix="nabla_buffers_")
    try:
        data = {}
        for i in range(STEPS):
            data[f"x{i}"] = rng.standard_normal((N, CIN, HW, HW)) * 1.5 + 0.3
            data[f"y{i}"] = rng.integers(0, NCLS, N).astype(np.int64)
        data["xt"] = rng.standard_normal((5, CIN, HW, HW))
        np.savez(os.path.join(tmp, "data.npz"), **data)
        r = run_nabla(TRAIN_NBL, tmp)
        if r.returncode != 0:
            report("BatchNorm CNN trains in nabla", False, r.stderr.strip()[-1500:])
            return
        o = outputs(r.stdout)
        report("grad() tree: nil at every buffer", o.get("grad_tree_buffers_nil") == ["true"], str(o.get("grad_tree_buffers_nil")))
        report("grad() tree: tensors at the parameters", o.get("grad_tree_params") == ["true"], str(o.get("grad_tree_params")))
        report("optimizer state: nil at the buffers", o.get("opt_state_buffers_nil") == ["true"], str(o.get("opt_state_buffers_nil")))
        n_params = sum(p.numel() for p in Net().parameters())
        report("nn.parameters: 8 tensors, nn.buffers: 6, num_params as torch",
               o.get("n_params") == ["8", "n_buffers", "6", "num_params", str(n_params)], str(o.get("n_params")))
        rt = o.get("roundtrip_maxdiff", [])
        report("checkpoint round trip: same eval logits and num_batches_tracked", rt[:1] in (["0"], ["0.0"]) and rt[1:] == ["nbt", str(STEPS), "i64"], str(rt))
        report("requires_grad(model) leaves buffers alone", o.get("buffers_not_requiring_grad") == ["true"], str(o.get("buffers_not_requiring_grad")))
        init = read_safetensors(os.path.join(tmp, "init.safetensors"))
        r = run_nabla(NORMS_NBL, tmp)
        if r.returncode != 0:
            report("group/instance norm model trains in nabla", False, r.stderr.strip()[-1500:])
            return
        init2 = read_safetensors(os.path.join(tmp, "init2.safetensors"))
        for how in ("a", "b", "c"):
            label = {"a": "value_and_grad + AdamW", "b": "backward + SGD", "c": "group_norm + instance_norm2d, value_and_grad + SGD"}[how]
            if how == "c":
                init = init2
            got = read_safetensors(os.path.join(tmp, f"{how}.safetensors"))
            sd, logits = torch_train(init, data, how)
            for k in sorted(sd):
                if "running" in k or "num_batches" in k:
                    compare(f"{label}: {k} equals torch's", got[f"model.{k}"], sd[k])
            wdiff = max(float(np.max(np.abs(got[f"model.{k}"] - sd[k]))) for k in sd if "running" not in k and "num_batches" not in k)
            report(f"{label}: weights equal torch's", wdiff <= 1e-12, f"max |diff| {wdiff:.3g}")
            compare(f"{label}: eval logits equal torch's", got["logits"], logits)

        emu = os.path.join(os.path.dirname(NABLA), "cuda", "emu", "nabla_cuda_emu.so")
        if os.path.exists(emu):
            path = os.path.join(tmp, "dev.nbl")
            with open(path, "w") as f:
                f.write(DEVICE_NBL)
            env = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"), NO_COLOR="1", NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2")
            r = subprocess.run([NABLA, path], capture_output=True, text=True, env=env, timeout=300)
            o = outputs(r.stdout).get("devices", [])
            ok = r.returncode == 0 and len(o) == 5 and set(o[0].split(",")) == {"cuda"} and o[1:3] == ["nbt", "2"] and float(o[4]) < 1e-12
            report("nn.to(model, \"cuda\") moves parameters and buffers; training there equals the CPU (emulated device)", ok, f"{o} {r.stderr[-800:]}")
        else:
            print(f"SKIP: nn.to on the emulated CUDA device{SUFFIX}: {emu} is not built")

        wb = {f"x{i}": rng.standard_normal(3) for i in range(3)}
        np.savez(os.path.join(tmp, "wb.npz"), **wb)
        r = run_nabla(WRITEBACK_NBL, tmp)
        if r.returncode != 0:
            report("write-back script runs", False, r.stderr.strip()[-1500:])
            return
        o = outputs(r.stdout)
        avg = 0.0
        for i in range(3):
            avg = avg * 0.5 + wb[f"x{i}"].mean() * 0.5
        got = o.get("avg", [])
        ok = len(got) >= 11 and abs(float(got[0]) - avg) < 1e-12 and abs(float(got[2]) - avg) < 1e-12
        report("grad(): a buffer assigned in the forward is written back (register_buffer and a __buffers literal)", ok, f"{got} want {avg}")
        report("grad(): a number field assigned in the forward is written back", got[3:5] == ["steps", "3"], str(got))
        report("grad(): items appended to a list field are written back", got[5:7] == ["log", "3"], str(got))
        report("grad(): a written-back buffer is detached; the grad tree has nil there", got[7:] == ["avg_rg", "false", "g_avg_nil", "true"], str(got))
        msg = " ".join(o.get("replaced:", []))
        report("grad(): replacing a parameter in the forward is an error naming it", "replaced args[0].w" in msg and "nn.register_buffer" in msg, msg)
        report("grad(): after that error the parameter is unchanged", o.get("w_kept") in (["0"], ["0.0"]), str(o.get("w_kept")))
        msg = " ".join(o.get("shortened:", []))
        report("grad(): shortening a list of the model in the forward is an error", "shortened the list args[0].log" in msg, msg)
    finally:
        shutil.rmtree(tmp, True)


main()
sys.exit(1 if torchcmp.fails else 0)
