#!/usr/bin/python3
"""Parity of stdlib nn/optim with PyTorch.

Builds the same tiny models in Nabla and torch with identical weights (Nabla
writes its initial weights with save(); they are read here from the
safetensors file with struct + json + numpy), runs one forward + backward +
optimizer step on the same batch, and compares loss, gradients and updated
weights (rtol 1e-4).

Run with /usr/bin/python3 (Debian's numpy and torch); env NABLA = interpreter.
Prints PASS/FAIL/SKIP lines; exits 1 on any failure.
"""
import json, os, struct, subprocess, sys, tempfile, shutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NABLA = os.environ.get("NABLA", os.path.join(ROOT, "build", "nabla"))
failures = 0


def report(name, ok, why=""):
    global failures
    if not ok:
        failures += 1
    print(f"{'PASS' if ok else 'FAIL'}: {name}" + (f": {why}" if why and not ok else ""), flush=True)


try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: torch parity: numpy/torch not importable ({e}); run with /usr/bin/python3")
    sys.exit(0)

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    """-> {dotted name: numpy array}"""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = arr.copy()
    return out


def run_nabla(code, tmp):
    script = os.path.join(tmp, "script.nbl")
    with open(script, "w") as f:
        f.write(code)
    env = dict(os.environ, NABLA_STDLIB=os.path.join(ROOT, "stdlib"))
    r = subprocess.run([NABLA, script, tmp], capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"nabla failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    return r.stdout


def compare(name, got, want, rtol=1e-4, atol=1e-6):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        report(name, False, f"shape {got.shape} != torch {want.shape}")
        return
    ok = np.allclose(got, want, rtol=rtol, atol=atol)
    report(name, ok, "" if ok else f"max |diff| {np.max(np.abs(got - want)):.3g} (max |torch| {np.max(np.abs(want)):.3g})")


# ---------------------------------------------------------------- MLP + AdamW
MLP_NBL = r'''
import nn
import optim
dir = argv[1]
seed(123)
model = nn.mlp([6, 16, 5], act=relu)
x = randn(8, 6)
y = randint(0, 5, [8])
save(dir + "/init.safetensors", {model: model, x: x, y: y})
opt = optim.adamw(model, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.05)
r = value_and_grad(fn(m, x, y) cross_entropy(m(x), y))(model, x, y)
opt.step(r[1])
r2 = value_and_grad(fn(m, x, y) cross_entropy(m(x), y))(model, x, y)
opt.step(r2[1])
save(dir + "/after.safetensors", {loss: r[0], grads: r[1], model: model, loss2: r2[0], m: opt.state.m, v: opt.state.v})
'''


def test_mlp(tmp):
    run_nabla(MLP_NBL, tmp)
    init = read_safetensors(os.path.join(tmp, "init.safetensors"))
    after = read_safetensors(os.path.join(tmp, "after.safetensors"))
    torch.manual_seed(0)
    l1, l2 = torch.nn.Linear(6, 16), torch.nn.Linear(16, 5)
    with torch.no_grad():
        for i, l in enumerate((l1, l2)):
            l.weight.copy_(torch.from_numpy(init[f"model.layers.{i}.weight"]))
            l.bias.copy_(torch.from_numpy(init[f"model.layers.{i}.bias"]))
    model = torch.nn.Sequential(l1, torch.nn.ReLU(), l2)
    x = torch.from_numpy(init["x"])
    y = torch.from_numpy(init["y"]).long()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    compare("mlp: loss", after["loss"], loss.item())
    for i, l in enumerate((l1, l2)):
        compare(f"mlp: grad layers.{i}.weight", after[f"grads.layers.{i}.weight"], l.weight.grad.numpy())
        compare(f"mlp: grad layers.{i}.bias", after[f"grads.layers.{i}.bias"], l.bias.grad.numpy())
    opt.step()
    loss2 = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss2.backward()
    opt.step()
    compare("mlp: loss after one AdamW step", after["loss2"], loss2.item())
    for i, l in enumerate((l1, l2)):
        st = opt.state[l.weight]
        compare(f"mlp: adam exp_avg layers.{i}.weight", after[f"m.layers.{i}.weight"], st["exp_avg"].numpy())
        compare(f"mlp: adam exp_avg_sq layers.{i}.weight", after[f"v.layers.{i}.weight"], st["exp_avg_sq"].numpy())
        compare(f"mlp: weights after two AdamW steps layers.{i}.weight", after[f"model.layers.{i}.weight"], l.weight.detach().numpy())
        compare(f"mlp: weights after two AdamW steps layers.{i}.bias", after[f"model.layers.{i}.bias"], l.bias.detach().numpy())


# ---------------------------------------------------------------- transformer block + SGD momentum
BLOCK_NBL = r'''
import nn
import optim
dir = argv[1]
seed(7)
b = nn.transformer_block(8, 2)
x = randn(2, 5, 8)
save(dir + "/binit.safetensors", {block: b, x: x})
f = value_and_grad(fn(b, x) (b(x) ** 2).mean())
r = f(b, x)
no_grad { y = b(x) }
opt = optim.sgd(b, 0.1, momentum=0.9, nesterov=true, weight_decay=0.01)
opt.step(r[1])
opt.step(f(b, x)[1])
save(dir + "/bafter.safetensors", {y: y, loss: r[0], grads: r[1], block: b})
'''


def torch_block(p, x):
    """The same pre-LN block written with torch ops; p maps names to tensors."""
    F = torch.nn.functional
    B, T, C = x.shape
    H = 2
    hd = C // H

    def lin(z, name):
        return z @ p[name + ".weight"].T + p[name + ".bias"]

    h = F.layer_norm(x, (C,), p["ln1.weight"], p["ln1.bias"], 1e-5)
    q, k, v = lin(h, "attn.qkv").split(C, dim=-1)
    q, k, v = [t.reshape(B, T, H, hd).transpose(1, 2) for t in (q, k, v)]
    att = (q @ k.transpose(-2, -1)) / hd ** 0.5
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    a = (att @ v).transpose(1, 2).reshape(B, T, C)
    x = x + lin(a, "attn.proj")
    h2 = F.layer_norm(x, (C,), p["ln2.weight"], p["ln2.bias"], 1e-5)
    return x + lin(F.gelu(lin(h2, "fc")), "proj")


def test_block(tmp):
    run_nabla(BLOCK_NBL, tmp)
    init = read_safetensors(os.path.join(tmp, "binit.safetensors"))
    after = read_safetensors(os.path.join(tmp, "bafter.safetensors"))
    names = sorted(k[len("block."):] for k in init if k.startswith("block."))
    p = {n: torch.tensor(init["block." + n], requires_grad=True) for n in names}
    x = torch.from_numpy(init["x"])
    y = torch_block(p, x)
    compare("block: forward", after["y"], y.detach().numpy())
    loss = (y ** 2).mean()
    loss.backward()
    compare("block: loss", after["loss"], loss.item())
    bad = [n for n in names if not np.allclose(after["grads." + n], p[n].grad.numpy(), rtol=1e-4, atol=1e-6)]
    report(f"block: grads of all {len(names)} parameters", not bad, f"differ: {bad}")
    opt = torch.optim.SGD(list(p.values()), lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    opt.step()
    opt.zero_grad()
    (torch_block(p, x) ** 2).mean().backward()
    opt.step()
    bad = [n for n in names if not np.allclose(after["block." + n], p[n].detach().numpy(), rtol=1e-4, atol=1e-6)]
    report("block: weights after two SGD (nesterov, weight decay) steps", not bad, f"differ: {bad}")


def main():
    if not os.access(NABLA, os.X_OK):
        report("torch parity", False, f"interpreter {NABLA} not found (set NABLA)")
        return 1
    tmp = tempfile.mkdtemp(prefix="nabla_parity_")
    try:
        for name, t in (("mlp", test_mlp), ("block", test_block)):
            try:
                t(tmp)
            except Exception as e:  # a crash is a failure of that group, not of the runner
                report(f"{name}: ran", False, f"{type(e).__name__}: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
