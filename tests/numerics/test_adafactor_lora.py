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
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np  # noqa: E402


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


def main():
    b = Batch("adafactor")
    adafactor_cases(b)
    b.run()
    finish()


if __name__ == "__main__":
    main()
