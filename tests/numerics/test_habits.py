#!/usr/bin/python3
"""What a PyTorch user writes, vs torch on fresh random inputs (f64):
optimizer parameter groups (AdamW, Adam, SGD: per-group lr / weight decay /
momentum, several steps through .grad and through per-group grad() trees),
a CNN written as nn.sequential with the pooling and flatten layers
(forward and gradients), and nn.summary's counts.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_habits.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import GRADCHECK_NBL, Batch, T, finish, rng, torch, np  # noqa: E402

F = torch.nn.functional


def r(*shape):
    return rng.standard_normal(shape)


def group_cases(b):
    A, Bm, C, X = r(4, 3), r(3, 2), r(2), r(5, 4)
    nb_model = (f"m = {{a: clone({b.inp(A)}), b: clone({b.inp(Bm)}), c: clone({b.inp(C)})}}\n"
                f"fn loss_fn(m) = sum(tanh({b.inp(X)} @ m.a) @ m.b + m.c) ** 2 / 10\n")

    def torch_loss(a, bb, c):
        return (torch.tanh(T(X) @ a) @ bb + c).sum() ** 2 / 10

    for name, nb_opt, torch_opt in (
        ("adamw", "optim.adamw([{params: [m.a], lr: 0.05}, {params: {b: m.b, c: m.c}, weight_decay: 0}], lr=0.01, weight_decay=0.1)",
         lambda a, bb, c: torch.optim.AdamW([{"params": [a], "lr": 0.05}, {"params": [bb, c], "weight_decay": 0}], lr=0.01, weight_decay=0.1)),
        ("adam", "optim.adam([{params: [m.a]}, {params: [m.b, m.c], lr: 0.03, weight_decay: 0.2}], lr=0.01)",
         lambda a, bb, c: torch.optim.Adam([{"params": [a]}, {"params": [bb, c], "lr": 0.03, "weight_decay": 0.2}], lr=0.01)),
        ("sgd", "optim.sgd([{params: [m.a], momentum: 0.9}, {params: [m.b, m.c], lr: 0.02, nesterov: true, momentum: 0.5}], 0.05)",
         lambda a, bb, c: torch.optim.SGD([{"params": [a], "momentum": 0.9}, {"params": [bb, c], "lr": 0.02, "nesterov": True, "momentum": 0.5}], lr=0.05)),
    ):
        ts = [T(A.copy(), requires_grad=True), T(Bm.copy(), requires_grad=True), T(C.copy(), requires_grad=True)]
        opt = torch_opt(*ts)
        for _ in range(3):
            opt.zero_grad()
            torch_loss(*ts).backward()
            opt.step()
        exp = [t.detach() for t in ts]
        b.case(f"groups_{name}_dot_grad",
               "import optim\n" + nb_model + "m.a.requires_grad = true\nm.b.requires_grad = true\nm.c.requires_grad = true\n"
               f"opt = {nb_opt}\nfor s in 0..3 {{ opt.zero_grad(); backward(loss_fn(m)); opt.step() }}\n"
               "list(detach(m.a), detach(m.b), detach(m.c))", exp, rtol=1e-9, atol=1e-11)
    # per-group gradient trees from grad()
    ts = [T(A.copy(), requires_grad=True), T(Bm.copy(), requires_grad=True), T(C.copy(), requires_grad=True)]
    opt = torch.optim.AdamW([{"params": [ts[0]], "lr": 0.05}, {"params": [ts[1], ts[2]], "weight_decay": 0}], lr=0.01, weight_decay=0.1)
    for _ in range(2):
        opt.zero_grad()
        torch_loss(*ts).backward()
        opt.step()
    b.case("groups_adamw_grad_trees",
           "import optim\n" + nb_model +
           "opt = optim.adamw([{params: [m.a], lr: 0.05}, {params: [m.b, m.c], weight_decay: 0}], lr=0.01, weight_decay=0.1)\n"
           "for s in 0..2 { g = grad(loss_fn)(m); opt.step([[g.a], [g.b, g.c]]) }\nlist(m.a, m.b, m.c)",
           [t.detach() for t in ts], rtol=1e-9, atol=1e-11)
    b.case("groups_get_lr", "import optim\n" + nb_model +
           "opt = optim.adamw([{params: [m.a], lr: fn(t) 0.1 / (t + 1)}, {params: [m.b]}], lr=0.01)\nopt.step([[ones(4, 3, dtype=\"f64\")], [ones(3, 2, dtype=\"f64\")]])\nopt.get_lr()",
           [0.05, 0.01], dtype=False)
    b.error("groups_param_twice", "import optim\n" + nb_model + "optim.adamw([{params: [m.a]}, {params: {x: m.b, y: m.a}}])",
            ["parameter", "more than one", "group"])
    b.error("groups_unknown_option", "import optim\n" + nb_model + "optim.sgd([{params: [m.a], betas: 1}], 0.1)",
            ["unknown option", "betas"])
    b.error("groups_step_grads_shape", "import optim\n" + nb_model + "opt = optim.adamw([{params: [m.a]}, {params: [m.b]}])\nopt.step(grad(loss_fn)(m))",
            ["parameter groups", "one gradient tree per group"])


def cnn_cases(b):
    X = r(3, 2, 8, 8)
    W1, B1, W2, B2 = r(4, 2, 3, 3) * 0.3, r(4) * 0.1, r(5, 16) * 0.3, r(5) * 0.1
    Y = rng.integers(0, 5, size=3)
    ts = [T(a.copy(), requires_grad=True) for a in (W1, B1, W2, B2)]
    x = T(X)
    h = F.relu(F.conv2d(x, ts[0], ts[1], padding=1))
    h = F.avg_pool2d(F.max_pool2d(h, 2), 2)
    logits = F.linear(torch.flatten(h, 1), ts[2], ts[3])
    loss = F.cross_entropy(logits, T(Y))
    loss.backward()
    b.case("cnn_sequential_forward_and_grads",
           "import nn\n"
           "m = nn.sequential([nn.conv2d(2, 4, 3, padding=1), relu, nn.max_pool2d(2), nn.avg_pool2d(2), nn.flatten(), nn.linear(16, 5)])\n"
           f"m.layers[0].weight = {b.inp(W1)}; m.layers[0].bias = {b.inp(B1)}; m.layers[5].weight = {b.inp(W2)}; m.layers[5].bias = {b.inp(B2)}\n"
           f"r = value_and_grad(fn(m) cross_entropy(m({b.inp(X)}), {b.inp(Y)}))(m)\n"
           "list(r[0], r[1].layers[0].weight, r[1].layers[0].bias, r[1].layers[5].weight, r[1].layers[5].bias)",
           [loss.detach()] + [t.grad for t in ts], rtol=1e-9, atol=1e-11)
    b.case("flatten_layer_axes", "import nn\nlist(nn.flatten()(zeros(2, 3, 4, 5)).shape, nn.flatten(0, 1)(zeros(2, 3, 4)).shape)",
           [[2, 60], [6, 4]], dtype=False)
    b.case("summary_counts_ties_once",
           "import nn\nW = zeros(6, 4)\nr = nn.summary({wte: W, mlp: nn.mlp([4, 8, 2]), lm_head: W})\nlist(r.total, len(r.rows), r.rows[0][0])",
           [24 + 4 * 8 + 8 + 8 * 2 + 2, 5, "wte (tied: lm_head)"], dtype=False)


def dim_cases(b):
    """dim= and keepdim= (PyTorch's names) wherever axis= and keepdims= are."""
    x = r(3, 4, 5)
    X = T(x)
    xs = b.inp(x)
    for nb, th in (("sum", lambda d, k: X.sum(dim=d, keepdim=k)), ("mean", lambda d, k: X.mean(dim=d, keepdim=k)),
                   ("max", lambda d, k: X.amax(dim=d, keepdim=k)), ("argmax", lambda d, k: X.argmax(dim=d, keepdim=k)),
                   ("argmin", lambda d, k: X.argmin(dim=d, keepdim=k)), ("var", lambda d, k: X.var(dim=d, keepdim=k)),
                   ("logsumexp", lambda d, k: X.logsumexp(dim=d, keepdim=k))):
        for d, k in ((1, True), (-1, False), (0, True)):
            b.case(f"dim_{nb}_{d}_{'keep' if k else 'drop'}", f"{nb}({xs}, dim={d}, keepdim={'true' if k else 'false'})", th(d, k))
    b.case("dim_softmax", f"softmax({xs}, dim=1)", torch.softmax(X, dim=1))
    b.case("dim_method_call", f"{xs}.sum(dim=2, keepdim=true)", X.sum(dim=2, keepdim=True))
    b.error("dim_and_axis_both", f"sum({xs}, axis=1, dim=1)", ["multiple values"])


def custom_vjp_cases(b):
    """custom_vjp(fwd, bwd) vs torch.autograd.Function: a straight-through
    estimator, a function with its own analytic gradient (and gradcheck),
    two arguments with no gradient for one, under grad and backward."""
    x, w = r(7) * 2, r(7)

    class STE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return torch.floor(t + 0.5)

        @staticmethod
        def backward(ctx, g):
            return g
    tx = T(x.copy(), requires_grad=True)
    (STE.apply(tx) * T(w)).sum().backward()
    ste = "ste = custom_vjp(fn(x) [floor(x + 0.5), nil], fn(s, g) [g])\n"
    b.case("custom_vjp_straight_through", ste + f"list(ste({b.inp(x)}), grad(fn(x) sum(ste(x) * {b.inp(w)}))({b.inp(x)}))",
           [torch.floor(T(x) + 0.5), tx.grad], rtol=1e-12, atol=0)
    sp = "sp = custom_vjp(fn(x) { e = exp(x); [log1p(e), e] }, fn(e, g) g * e / (1 + e))\n"
    tx = T(x.copy(), requires_grad=True)
    (torch.nn.functional.softplus(tx) * T(w)).sum().backward()
    b.case("custom_vjp_own_gradient", sp + f"grad(fn(x) sum(sp(x) * {b.inp(w)}))({b.inp(x)})", tx.grad, rtol=1e-9, atol=1e-12)
    b.case("custom_vjp_gradcheck", GRADCHECK_NBL + sp + f"gc = gradcheck(fn(x) sum(sp(x) * sp(x)), {b.inp(x)})\nmax(abs(gc[0] - gc[1])).item() < 1e-6", True)
    a, c = r(3, 4), r(3, 4)
    ta, tc = T(a.copy(), requires_grad=True), T(c.copy(), requires_grad=True)
    (ta * tc * T(w[:4])).sum().backward()
    b.case("custom_vjp_two_args_nil_grad",
           "mul = custom_vjp(fn(a, b) [a * b, [a, b]], fn(s, g) [g * s[1], nil])\n"
           f"a = clone({b.inp(a)}); a.requires_grad = true\nc = clone({b.inp(c)}); c.requires_grad = true\n"
           f"backward(sum(mul(a, c) * {b.inp(w[:4])}))\nlist(a.grad, c.grad == nil)", [ta.grad, True], rtol=1e-12, atol=0)
    b.error("custom_vjp_wrong_shape", f"bad = custom_vjp(fn(x) [x * 2, nil], fn(s, g) [ones(5, dtype=\"f64\")])\ngrad(fn(x) sum(bad(x)))({b.inp(x)})",
            ["custom_vjp", "shape [5]", "[7]"])
    b.error("custom_vjp_wrong_count", f"bad = custom_vjp(fn(x, y) [x * y, nil], fn(s, g) [g])\nbackward(sum(bad(requires_grad(clone({b.inp(x)})), 2.0)))",
            ["custom_vjp", "1 gradients", "2 arguments"])
    b.error("custom_vjp_fwd_shape", f"bad = custom_vjp(fn(x) x, fn(s, g) [g])\nbad({b.inp(x)})", ["fwd must return [out, saved]"])


def main():
    b = Batch("habits")
    custom_vjp_cases(b)
    dim_cases(b)
    group_cases(b)
    cnn_cases(b)
    b.run()
    finish()


if __name__ == "__main__":
    main()
