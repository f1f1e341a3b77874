#!/usr/bin/python3
"""optim.adafactor and nn.lora vs torch, on fresh random inputs.

Adafactor: the reference is Hugging Face's transformers.optimization.Adafactor
step written out below in torch (factored row/column second moments for
tensors of 2+ axes, update clipping, relative step, parameter scaling, first
moment, weight decay), run over several steps on the same model and data.

LoRA: nn.lora's adapted layers equal y = x W^T + b + (alpha/r) x A^T B^T
written by hand in torch (forward and gradients of A, B), only the adapters
train, nn.lora_merge folds them into W, and the adapter save/load round trip
reproduces the adapted model on a fresh base.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_adafactor_lora.py
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, TMP, finish, rng, torch, np  # noqa: E402


# ------------------------------------------------------------ Adafactor (HF's algorithm)
class RefAdafactor:
    def __init__(self, params, lr=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8,
                 beta1=None, weight_decay=0.0, scale_parameter=True, relative_step=True, warmup_init=False):
        self.params = params
        self.g = dict(lr=lr, eps=eps, clip_threshold=clip_threshold, decay_rate=decay_rate, beta1=beta1,
                      weight_decay=weight_decay, scale_parameter=scale_parameter,
                      relative_step=relative_step, warmup_init=warmup_init)
        self.state = [dict() for _ in params]

    @staticmethod
    def _rms(t):
        return t.norm(2) / (t.numel() ** 0.5)

    def _get_lr(self, st):
        g = self.g
        rel = g["lr"]
        if g["relative_step"]:
            min_step = 1e-6 * st["step"] if g["warmup_init"] else 1e-2
            rel = min(min_step, 1.0 / math.sqrt(st["step"]))
        scale = 1.0
        if g["scale_parameter"]:
            scale = max(g["eps"][1], st["RMS"])
        return scale * rel

    @staticmethod
    def _approx_sq_grad(row, col):
        r = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
        c = col.unsqueeze(-2).rsqrt()
        return torch.mul(r, c)

    @torch.no_grad()
    def step(self):
        g = self.g
        for p, st in zip(self.params, self.state):
            grad = p.grad
            factored = grad.dim() >= 2
            if not st:
                st["step"] = 0
                if g["beta1"] is not None:
                    st["exp_avg"] = torch.zeros_like(grad)
                if factored:
                    st["row"] = torch.zeros(grad.shape[:-1], dtype=grad.dtype)
                    st["col"] = torch.zeros(grad.shape[:-2] + grad.shape[-1:], dtype=grad.dtype)
                else:
                    st["sq"] = torch.zeros_like(grad)
            st["step"] += 1
            st["RMS"] = self._rms(p).item()
            lr = self._get_lr(st)
            beta2t = 1.0 - math.pow(st["step"], g["decay_rate"])
            update = grad ** 2 + g["eps"][0]
            if factored:
                st["row"].mul_(beta2t).add_(update.mean(dim=-1), alpha=1.0 - beta2t)
                st["col"].mul_(beta2t).add_(update.mean(dim=-2), alpha=1.0 - beta2t)
                update = self._approx_sq_grad(st["row"], st["col"]).mul_(grad)
            else:
                st["sq"].mul_(beta2t).add_(update, alpha=1.0 - beta2t)
                update = st["sq"].rsqrt().mul_(grad)
            update.div_((self._rms(update) / g["clip_threshold"]).clamp_(min=1.0))
            update.mul_(lr)
            if g["beta1"] is not None:
                st["exp_avg"].mul_(g["beta1"]).add_(update, alpha=1 - g["beta1"])
                update = st["exp_avg"]
            if g["weight_decay"] != 0:
                p.add_(p, alpha=-g["weight_decay"] * lr)
            p.add_(-update)


def af_data(dtype):
    W = rng.standard_normal((5, 4)).astype(dtype)
    B = rng.standard_normal(4).astype(dtype)
    K = rng.standard_normal((2, 3, 4)).astype(dtype) * 0.3
    X = rng.standard_normal((6, 5)).astype(dtype)
    return W, B, K, X


def af_torch_loss(w, b, k, x):
    h = torch.tanh(x @ w + b)                       # [6, 4]
    return (h ** 2).mean() + (torch.einsum("ij,aj->ai", h, k.sum(1)) ** 2).mean()


AF_NB = """import optim
m = {{w: clone({W}), b: clone({B}), k: clone({K})}}
fn loss_fn(m) {{
  h = tanh({X} @ m.w + m.b)
  mean(h ** 2) + mean((h @ sum(m.k, axis=1).T) ** 2)
}}
"""

AF_CONFIGS = (
    # name, nabla args, torch kwargs
    ("relative_step", "", {}),
    ("warmup_init", "warmup_init=true", dict(warmup_init=True)),
    ("lr_beta1_wd", "lr=0.02, relative_step=false, beta1=0.9, weight_decay=0.1",
     dict(lr=0.02, relative_step=False, beta1=0.9, weight_decay=0.1)),
    ("no_scale_clip", "lr=0.05, relative_step=false, scale_parameter=false, clip_threshold=0.5, decay_rate=-0.6",
     dict(lr=0.05, relative_step=False, scale_parameter=False, clip_threshold=0.5, decay_rate=-0.6)),
)


def adafactor_cases(b):
    steps = 5
    for dtype, rtol, atol in ((np.float64, 1e-9, 1e-11), (np.float32, 2e-5, 2e-6)):
        dn = "f64" if dtype == np.float64 else "f32"
        for name, nb_args, kw in AF_CONFIGS:
            W, B, K, X = af_data(dtype)
            ps = [T(W, True), T(B, True), T(K, True)]
            opt = RefAdafactor(ps, **kw)
            for _ in range(steps):
                for p in ps:
                    p.grad = None
                af_torch_loss(*ps, T(X)).backward()
                opt.step()
            pre = AF_NB.format(W=b.inp(W), B=b.inp(B), K=b.inp(K), X=b.inp(X))
            b.case(f"adafactor_{dn}_{name}_grad_tree",
                   pre + f"opt = optim.adafactor(m{', ' if nb_args else ''}{nb_args})\n"
                   f"for s in 0..{steps} {{ opt.step(grad(loss_fn)(m)) }}\nlist(m.w, m.b, m.k)",
                   [p.detach() for p in ps], rtol=rtol, atol=atol)
            if dtype == np.float64:
                b.case(f"adafactor_{dn}_{name}_dot_grad",
                       pre + "for t in tree_tensors(m) { t.requires_grad = true }\n"
                       f"opt = optim.adafactor(m{', ' if nb_args else ''}{nb_args})\n"
                       f"for s in 0..{steps} {{ opt.zero_grad(); backward(loss_fn(m)); opt.step() }}\n"
                       "list(detach(m.w), detach(m.b), detach(m.k))",
                       [p.detach() for p in ps], rtol=rtol, atol=atol)
    # factored state: rows and columns only
    b.case("adafactor_factored_state_shapes",
           "import optim\nm = {w: randn(6, 5), k: randn(2, 3, 4), b: randn(7)}\nopt = optim.adafactor(m)\n"
           "s = opt.state\nlist(s.row.w.shape, s.col.w.shape, s.row.k.shape, s.col.k.shape, s.row.b.shape, s.col.b == nil, s.m == nil)",
           [[6], [5], [2, 3], [2, 4], [7], True, True], dtype=False)
    b.error("adafactor_lr_with_relative_step", "import optim\noptim.adafactor({w: randn(2, 2)}, lr=0.1)", ["relative_step"])
    b.error("adafactor_no_lr", "import optim\noptim.adafactor({w: randn(2, 2)}, relative_step=false)", ["needs an lr"])

# ------------------------------------------------------------ LoRA (by hand in torch)
D, HID, V, R, ALPHA, NTOK = 6, 10, 5, 2, 6.0, 7
LAYERS = ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
TARGETS = ("attn.qkv", "mlp.fc1")


def lora_data():
    shapes = {"attn.qkv": (3 * D, D), "attn.proj": (D, D), "mlp.fc1": (HID, D), "mlp.fc2": (D, HID)}
    blocks = []
    for _ in range(2):
        blk = {}
        for name, (o, i) in shapes.items():
            blk[name] = {"w": rng.standard_normal((o, i)) / math.sqrt(i), "b": rng.standard_normal(o) * 0.1}
            if name in TARGETS:
                blk[name]["A"] = rng.standard_normal((R, i)) * 0.3
                blk[name]["B"] = rng.standard_normal((o, R)) * 0.3
        blocks.append(blk)
    head = {"w": rng.standard_normal((V, D)) / math.sqrt(D), "b": rng.standard_normal(V) * 0.1}
    x = rng.standard_normal((NTOK, D))
    y = rng.integers(0, V, size=NTOK)
    return blocks, head, x, y


def torch_lora_params(blocks, head):
    tb = [{n: {k: T(v, requires_grad=(k in "AB")) for k, v in l.items()} for n, l in blk.items()} for blk in blocks]
    th = {k: T(v) for k, v in head.items()}
    return tb, th


def torch_lora_loss(tb, th, x, y, merged=False):
    s = ALPHA / R

    def lin(l, h):
        out = h @ l["w"].T + l["b"]
        if "A" in l and not merged:
            out = out + s * ((h @ l["A"].T) @ l["B"].T)
        return out
    h = T(x)
    for blk in tb:
        a = torch.tanh(lin(blk["attn.qkv"], h))
        h = h + lin(blk["attn.proj"], a[:, 0:D] * a[:, D:2 * D] + a[:, 2 * D:])
        h = h + lin(blk["mlp.fc2"], torch.relu(lin(blk["mlp.fc1"], h)))
    logits = h @ th["w"].T + th["b"]
    return torch.nn.functional.cross_entropy(logits, torch.from_numpy(y))


LORA_NB = """import nn
import optim
fn lin(w, b) {{ l = nn.linear(w.shape[1], w.shape[0]); l.weight = clone(w); l.bias = clone(b); l }}
fn build() {{
  blocks = list()
  for i in 0..2 {{
    W = {W}
    push(blocks, {{attn: {{qkv: lin(W[i][0][0], W[i][0][1]), proj: lin(W[i][1][0], W[i][1][1])}},
                  mlp: {{fc1: lin(W[i][2][0], W[i][2][1]), fc2: lin(W[i][3][0], W[i][3][1])}}}})
  }}
  {{blocks: blocks, head: lin({HW}, {HB}), __call: fn(self, h) {{
    for blk in self.blocks {{
      a = tanh(blk.attn.qkv(h))
      h = h + blk.attn.proj(a[:, 0:{D}] * a[:, {D}:{D2}] + a[:, {D2}:{D3}])
      h = h + blk.mlp.fc2(relu(blk.mlp.fc1(h)))
    }}
    self.head(h)
  }}}}
}}
fn loss_fn(m) = cross_entropy(m({X}), {Y})
fn set_adapters(m) {{
  AD = {AD}
  no_grad {{ for i in 0..2 {{
    copy_(m.blocks[i].attn.qkv.lora_A, AD[i][0][0]); copy_(m.blocks[i].attn.qkv.lora_B, AD[i][0][1])
    copy_(m.blocks[i].mlp.fc1.lora_A, AD[i][1][0]); copy_(m.blocks[i].mlp.fc1.lora_B, AD[i][1][1])
  }} }}
  m
}}
m = build()
nn.lora(m, rank={R}, alpha={ALPHA}, targets=["attn.qkv", "mlp.fc1"])
set_adapters(m)
"""


def lora_prelude(b, blocks, head, x, y):
    W = "list(" + ", ".join("list(" + ", ".join(f"list({b.inp(blk[n]['w'])}, {b.inp(blk[n]['b'])})" for n in LAYERS) + ")"
                            for blk in blocks) + ")"
    AD = "list(" + ", ".join("list(" + ", ".join(f"list({b.inp(blk[n]['A'])}, {b.inp(blk[n]['B'])})" for n in TARGETS) + ")"
                             for blk in blocks) + ")"
    return LORA_NB.format(W=W, AD=AD, HW=b.inp(head["w"]), HB=b.inp(head["b"]), X=b.inp(x), Y=b.inp(y),
                          D=D, D2=2 * D, D3=3 * D, R=R, ALPHA=ALPHA)


def adapters_of(tb):
    return [blk[n][k] for blk in tb for n in TARGETS for k in "AB"]


NB_ADAPTERS = "ps = nn.lora_parameters({t})\nls = list()\nfor p in ps {{ push(ls, p.A); push(ls, p.B) }}\n"


def lora_cases(b):
    tol = dict(rtol=1e-9, atol=1e-11)
    blocks, head, x, y = lora_data()
    tb, th = torch_lora_params(blocks, head)
    loss = torch_lora_loss(tb, th, x, y)
    loss.backward()
    pre = lora_prelude(b, blocks, head, x, y)
    b.case("lora_forward", pre + "loss_fn(m).item()", loss.item(), **tol)
    b.case("lora_backward_only_adapters",
           pre + "backward(loss_fn(m))\n" + NB_ADAPTERS.format(t="m") + "ls = map(ls, fn(a) a.grad)\n"
           "push(ls, m.head.weight.grad == nil and m.blocks[0].attn.qkv.weight.grad == nil and m.blocks[1].mlp.fc2.bias.grad == nil)\nls",
           [a.grad for a in adapters_of(tb)] + [True], dtype=False, **tol)
    b.case("lora_grad_tree", pre + "g = grad(loss_fn)(m)\n" + NB_ADAPTERS.format(t="g") + "ls",
           [a.grad for a in adapters_of(tb)], **tol)

    # AdamW over the adapters only, 3 steps; then merge and save/load
    blocks, head, x, y = lora_data()
    tb, th = torch_lora_params(blocks, head)
    opt = torch.optim.AdamW(adapters_of(tb), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        torch_lora_loss(tb, th, x, y).backward()
        opt.step()
    trained = torch_lora_loss(tb, th, x, y).item()
    pre = lora_prelude(b, blocks, head, x, y)
    train = "opt = optim.adamw(nn.lora_parameters(m), lr=0.05)\nfor s in 0..3 { opt.zero_grad(); backward(loss_fn(m)); opt.step() }\n"
    b.case("lora_adamw_3_steps_base_frozen",
           pre + train + NB_ADAPTERS.format(t="m") +
           "push(ls, m.blocks[0].attn.qkv.weight); push(ls, m.head.weight)\nls",
           [a.detach() for a in adapters_of(tb)] + [T(blocks[0]["attn.qkv"]["w"]), T(head["w"])], **tol)
    merged_w = []
    with torch.no_grad():
        for blk in tb:
            for n in TARGETS:
                blk[n]["w"] = blk[n]["w"] + (ALPHA / R) * blk[n]["B"] @ blk[n]["A"]
                merged_w.append(blk[n]["w"].clone())
    b.case("lora_merge",
           pre + train + "nn.lora_merge(m)\n"
           "list(loss_fn(m).item(), m.blocks[0].attn.qkv.weight, m.blocks[0].mlp.fc1.weight, m.blocks[1].attn.qkv.weight, m.blocks[1].mlp.fc1.weight, "
           "len(nn.lora_parameters(m)), has(m.blocks[0].attn.qkv, \"lora_A\"))",
           [torch_lora_loss(tb, th, x, y, merged=True).item()] + merged_w + [0.0, False], dtype=False, **tol)
    path = json.dumps(os.path.join(TMP, "adapters.safetensors"))
    b.case("lora_save_adapters_only_load_on_base",
           pre + train + f"nn.lora_save({path}, m)\nst = load({path})\nn_saved = len(tree_tensors(st))\n"
           f"fresh = build()\nnn.lora_load(fresh, {path})\n"
           "list(n_saved, loss_fn(fresh).item(), fresh.head.weight.requires_grad, fresh.blocks[1].mlp.fc1.lora_B.requires_grad)",
           [8.0, trained, False, True], dtype=False, **tol)

    # B starts at zero: the adapted model computes the base model
    blocks, head, x, y = lora_data()
    tb, th = torch_lora_params(blocks, head)
    base = torch_lora_loss(tb, th, x, y, merged=True).item()
    pre = lora_prelude(b, blocks, head, x, y).replace("set_adapters(m)\n", "")
    b.case("lora_init_is_base", pre + "list(loss_fn(m).item(), m.blocks[0].attn.qkv.lora_A.shape, m.blocks[0].attn.qkv.lora_B.shape)",
           [base, [float(R), float(D)], [float(3 * D), float(R)]], dtype=False, **tol)
    b.case("lora_target_string", "import nn\nm = {a: {qkv: nn.linear(2, 3)}, b: nn.linear(3, 2)}\nnn.lora(m, rank=1, targets=\"a.qkv\")\nlist(has(m.a.qkv, \"lora_A\"), has(m.b, \"lora_A\"))",
           [True, False], dtype=False)
    b.error("lora_unknown_target", "import nn\nnn.lora({a: nn.linear(2, 3)}, rank=1, targets=[\"attn.qkv\"])",
            ['no layer of the model matches target "attn.qkv"'])
    b.error("lora_target_not_linear", "import nn\nnn.lora({a: nn.layer_norm(4)}, rank=1, targets=[\"a\"])", ["not a linear layer"])
    b.error("lora_load_shape_mismatch",
            "import nn\nm = {a: nn.linear(2, 3)}\nnn.lora(m, rank=1)\ns = nn.lora_state(m)\nnn.lora_load({a: nn.linear(4, 3)}, s)",
            ["do not fit weight"])


def main():
    b = Batch("adafactor")
    adafactor_cases(b)
    b.run()
    b = Batch("lora")
    lora_cases(b)
    b.run()
    finish()


if __name__ == "__main__":
    main()
