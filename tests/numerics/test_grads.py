#!/usr/bin/python3
"""nabla autograd (grad / backward) vs torch.autograd, in f64, on fresh random inputs.

For an op y = OP(x0, x1, ...) the loss is sum(y * W) with random upstream
weights W of y's shape; nabla's grad(f, argnums=list(...)) must match
torch's x.grad for every differentiable input (reduced to the input's shape
under broadcasting).  A second part checks nabla's autograd against central
finite differences computed IN nabla (a gradcheck written in the language).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_grads.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import GRADCHECK_NBL, Batch, T, finish, rng, torch, np  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TOL = dict(rtol=1e-9, atol=1e-10)


def r(*shape):
    return rng.standard_normal(shape)


def pos(*shape):
    return np.abs(rng.standard_normal(shape)) + 0.5


def distinct(*shape):
    """values with well-separated entries (max/min/sort/pool grads are unambiguous)."""
    n = int(np.prod(shape)) if shape else 1
    return (rng.permutation(n).astype(np.float64) * 0.37 + rng.random(n) * 0.1).reshape(shape) - n * 0.18


def gcase(b, name, nb_body, torch_fn, inputs, diff=None, views=None, tol=TOL):
    """inputs: numpy arrays (float → differentiated unless diff says otherwise; ints are passed as-is).
    nb_body: nabla expression over p0, p1, ... ; torch_fn(*tensors) the same op.
    views: per input, an optional suffix applied on the nabla side AND a numpy function for the
    reference (the argument itself is then a view, its gradient shaped like the view)."""
    views = views or [None] * len(inputs)
    vals = []
    exprs = []
    for a, v in zip(inputs, views):
        e = b.inp(a)
        if v:
            suffix, npf = v
            e, a = f"{e}{suffix}", npf(a)
        exprs.append(e)
        vals.append(np.array(a, copy=True))   # keeps 0-d inputs 0-d
    if diff is None:
        diff = [np.issubdtype(np.asarray(a).dtype, np.floating) for a in vals]
    tin = [T(a, requires_grad=d) for a, d in zip(vals, diff)]
    out = torch_fn(*tin)
    W = rng.standard_normal(tuple(out.shape))
    (out * T(W)).sum().backward()
    exp = [t.grad if t.grad is not None else torch.zeros_like(t) for t, d in zip(tin, diff) if d]
    params = ", ".join(f"p{i}" for i in range(len(inputs)))
    argn = ", ".join(str(i) for i, d in enumerate(diff) if d)
    xw = b.inp(W)
    code = (f"f = fn({params}) sum(({nb_body}) * {xw})\n"
            f"grad(f, argnums=list({argn}))({', '.join(exprs)})")
    b.case(name, code, exp, **tol)


def binary(b):
    ops = [("add", "p0 + p1", torch.add), ("sub", "p0 - p1", torch.sub), ("mul", "p0 * p1", torch.mul),
           ("div", "p0 / p1", torch.div), ("maximum", "maximum(p0, p1)", torch.maximum), ("minimum", "minimum(p0, p1)", torch.minimum)]
    shapes = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((5,), ()), ((2, 3, 1), (1, 3, 4))]
    for name, body, tf in ops:
        for sa, sb in shapes:
            a, bb = r(*sa), r(*sb)
            if name == "div":
                bb = np.sign(bb) * (np.abs(bb) + 0.5)
            gcase(b, f"{name}_{list(sa)}_{list(sb)}", body, tf, [a, bb])
    for sa, sb in shapes[:4]:
        gcase(b, f"pow_{list(sa)}_{list(sb)}", "p0 ** p1", torch.pow, [pos(*sa), r(*sb)])
    gcase(b, "pow_scalar_exp", "p0 ** 3", lambda x: x ** 3, [r(3, 4)])
    gcase(b, "pow_scalar_base", "2 ** p0", lambda x: 2 ** x, [r(3, 4)])
    gcase(b, "rsub_scalar", "1.5 - p0", lambda x: 1.5 - x, [r(3)])
    gcase(b, "rdiv_scalar", "1.5 / p0", lambda x: 1.5 / x, [pos(3)])
    gcase(b, "mod_scalar", "p0 % 0.7", lambda x: torch.remainder(x, 0.7), [r(6)])
    c = rng.random((3, 4)) > 0.5
    gcase(b, "where_bcast", "where(p2, p0, p1)", lambda x, y, m: torch.where(m, x, y), [r(3, 4), r(4), c], diff=[True, True, False])
    gcase(b, "where_scalar_branch", "where(p1, p0, 0)", lambda x, m: torch.where(m, x, torch.zeros((), dtype=torch.float64)), [r(3, 4), c], diff=[True, False])
    # matmul family
    for sa, sb in [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4,))]:
        gcase(b, f"matmul_{list(sa)}@{list(sb)}", "p0 @ p1", torch.matmul, [r(*sa), r(*sb)])
    gcase(b, "matmul_transposed_views", "p0.T @ p1", lambda x, y: x.T @ y, [r(5, 3), r(5, 2)])
    gcase(b, "dot", "dot(p0, p1)", torch.dot, [r(5), r(5)])
    gcase(b, "outer", "outer(p0, p1)", torch.outer, [r(4), r(3)])


def unary(b):
    ops = [("exp", torch.exp, r), ("log", torch.log, pos), ("log1p", torch.log1p, pos), ("sqrt", torch.sqrt, pos),
           ("rsqrt", torch.rsqrt, pos), ("abs", torch.abs, r), ("sign", torch.sign, r), ("neg", torch.neg, r),
           ("tanh", torch.tanh, r), ("sigmoid", torch.sigmoid, r), ("relu", torch.relu, r), ("silu", F.silu, r),
           ("sin", torch.sin, r), ("cos", torch.cos, r), ("floor", torch.floor, r), ("ceil", torch.ceil, r),
           ("tan", torch.tan, r), ("erf", torch.erf, r), ("expm1", torch.expm1, r), ("log2", torch.log2, pos)]
    for name, tf, gen in ops:
        gcase(b, name, f"{name}(p0)", tf, [gen(3, 4)])
        gcase(b, f"{name}_of_T_view", f"{name}(p0.T)", lambda x, tf=tf: tf(x.T), [gen(4, 3)])
    for approx in ("none", "tanh"):
        gcase(b, f"gelu_{approx}", f'gelu(p0, approximate="{approx}")', lambda x, a=approx: F.gelu(x, approximate=a), [r(3, 5)])
    gcase(b, "clamp", "clamp(p0, min=-0.5, max=0.6)", lambda x: torch.clamp(x, -0.5, 0.6), [r(4, 5)])
    gcase(b, "clamp_min", "clamp(p0, min=0.1)", lambda x: torch.clamp(x, min=0.1), [r(4, 5)])
    gcase(b, "neg_operator", "-p0", torch.neg, [r(4)])
    gcase(b, "composite", "tanh(p0 @ p1) * sigmoid(p0 @ p1) + exp(-p0 @ p1 * 0.1)",
          lambda x, y: torch.tanh(x @ y) * torch.sigmoid(x @ y) + torch.exp(-(x @ y) * 0.1), [r(3, 4), r(4, 2)])
    gcase(b, "reuse_same_input", "p0 * p0 + sin(p0) * p0", lambda x: x * x + torch.sin(x) * x, [r(5)])


def reductions(b):
    x3 = r(3, 4, 5)
    for ax, kd in [(None, False), (1, False), (-1, True), ([0, 2], False), ([0, 2], True)]:
        axs = "nil" if ax is None else str(ax)
        kw = f"axis={axs}, keepdims={'true' if kd else 'false'}"
        dims = {} if ax is None else {"dim": ax, "keepdim": kd}
        tag = f"ax{axs}{'_kd' if kd else ''}"
        gcase(b, f"sum_{tag}", f"sum(p0, {kw})", lambda x: torch.sum(x, **dims), [x3])
        gcase(b, f"mean_{tag}", f"mean(p0, {kw})", lambda x: torch.mean(x, **dims), [x3])
        gcase(b, f"prod_{tag}", f"prod(p0, {kw})", lambda x: torch.prod(x, **dims) if ax is None or isinstance(ax, int) else torch.prod(torch.prod(x, dim=ax[1], keepdim=kd), dim=ax[0], keepdim=kd), [pos(3, 4, 5)])
        gcase(b, f"max_{tag}", f"max(p0, {kw})", lambda x: torch.amax(x, **dims) if dims else torch.max(x), [distinct(3, 4, 5)])
        gcase(b, f"min_{tag}", f"min(p0, {kw})", lambda x: torch.amin(x, **dims) if dims else torch.min(x), [distinct(3, 4, 5)])
        gcase(b, f"logsumexp_{tag}", f"logsumexp(p0, {kw})", lambda x: torch.logsumexp(x, dim=[0, 1, 2] if ax is None else ax, keepdim=kd), [x3])
        for c in (0, 1):
            gcase(b, f"var_c{c}_{tag}", f"var(p0, {kw}, correction={c})", lambda x, c=c: torch.var(x, dim=None if ax is None else ax, unbiased=bool(c), keepdim=kd), [x3])
            gcase(b, f"std_c{c}_{tag}", f"std(p0, {kw}, correction={c})", lambda x, c=c: torch.std(x, dim=None if ax is None else ax, unbiased=bool(c), keepdim=kd), [x3])
    # zeros in the reduced extent: the gradient is the product of the other elements
    gcase(b, "prod_with_zero", "prod(p0, axis=1)", lambda x: torch.prod(x, dim=1), [np.array([[1.5, 0.0, 2.0], [0.5, 3.0, -1.0]])])
    gcase(b, "prod_two_zeros", "prod(p0, axis=1)", lambda x: torch.prod(x, dim=1), [np.array([[1.5, 0.0, 0.0], [0.0, 3.0, -1.0]])])
    gcase(b, "prod_with_zero_all", "prod(p0)", lambda x: torch.prod(x), [np.array([[1.5, 0.0, 2.0], [0.5, 3.0, -1.0]])])
    z3 = r(3, 4, 5)
    z3[0, 1, :] = 0.0
    z3[1, :, 2] = 0.0
    z3[2, 0, 0] = 0.0
    gcase(b, "prod_with_zeros_axes02", "prod(p0, axis=[0, 2], keepdims=true)",
          lambda x: torch.prod(torch.prod(x, dim=2, keepdim=True), dim=0, keepdim=True), [z3])
    gcase(b, "prod_with_zeros_axis2", "prod(p0, axis=2)", lambda x: torch.prod(x, dim=2), [z3])


def shape_ops(b):
    x = r(2, 3, 4)
    gcase(b, "reshape", "reshape(p0, [4, -1])", lambda t: t.reshape(4, -1), [x])
    gcase(b, "reshape_of_T_copy", "reshape(p0.T, -1)", lambda t: t.permute(2, 1, 0).reshape(-1), [x])
    gcase(b, "permute", "permute(p0, [2, 0, 1])", lambda t: t.permute(2, 0, 1), [x])
    gcase(b, "transpose", "transpose(p0, 0, 2)", lambda t: t.transpose(0, 2), [x])
    gcase(b, "T", "p0.T", lambda t: t.permute(2, 1, 0), [x])
    gcase(b, "squeeze_unsqueeze", "squeeze(unsqueeze(p0, 1) * 2, axis=1)", lambda t: t * 2, [x])
    gcase(b, "flatten", "flatten(p0, 1, 2)", lambda t: t.flatten(1, 2), [x])
    gcase(b, "expand", "expand(p0, [3, 4, 5])", lambda t: t.expand(3, 4, 5), [r(1, 4, 1)])
    gcase(b, "broadcast_to", "broadcast_to(p0, [2, 3, 4])", lambda t: t.expand(2, 3, 4), [r(3, 1)])
    gcase(b, "concat", "concat(list(p0, p1, p0), axis=1)", lambda a, c: torch.cat([a, c, a], dim=1), [x, r(2, 5, 4)])
    gcase(b, "stack", "stack(list(p0, p1), axis=-1)", lambda a, c: torch.stack([a, c], dim=-1), [x, r(2, 3, 4)])
    gcase(b, "split", "split(p0, list(1, 3), axis=2)[1]", lambda t: torch.split(t, [1, 3], dim=2)[1], [x])
    gcase(b, "chunk", "chunk(p0, 2, axis=2)[0] * chunk(p0, 2, axis=2)[1]", lambda t: torch.chunk(t, 2, 2)[0] * torch.chunk(t, 2, 2)[1], [x])
    gcase(b, "flip", "flip(p0, axis=[0, 2])", lambda t: torch.flip(t, [0, 2]), [x])
    gcase(b, "repeat", "repeat(p0, [2, 1, 3, 1])", lambda t: t.repeat(2, 1, 3, 1), [x])
    gcase(b, "tril", "tril(p0, k=1)", lambda t: torch.tril(t, 1), [x])
    gcase(b, "triu", "triu(p0, k=-1)", lambda t: torch.triu(t, -1), [x])
    gcase(b, "clone", "clone(p0) * 2", lambda t: t.clone() * 2, [x])
    gcase(b, "detach_blocks", "detach(p0) * p0", lambda t: t.detach() * t, [x])
    gcase(b, "contiguous", "contiguous(p0.T)", lambda t: t.permute(2, 1, 0).contiguous(), [x])
    # the ARGUMENT is a view (gradient shaped like the view)
    gcase(b, "arg_is_T_view", "p0 * 3", lambda t: t * 3, [r(4, 3)], views=[(".T", lambda a: a.T)])
    gcase(b, "arg_is_strided_view", "p0 * p0", lambda t: t * t, [r(6, 5)], views=[("[::2, 1:]", lambda a: a[::2, 1:])])


def indexing(b):
    x = r(5, 4, 3)
    gcase(b, "index_int_slice", "p0[1, ::2]", lambda t: t[1, ::2], [x])
    gcase(b, "index_neg_step", "p0[::-2, 1:3]", lambda t: torch.flip(t, [0])[::2, 1:3], [x])
    gcase(b, "index_newaxis", "p0[nil, -1]", lambda t: t[None, -1], [x])
    idx = rng.integers(0, 5, size=(6,))
    idx[1] = idx[0]
    gcase(b, "index_int_tensor_repeated", "p0[p1]", lambda t, i: t[i], [x, idx])
    gcase(b, "index_int_tensor_axis1", "p0[:, p1]", lambda t, i: t[:, i], [x, rng.integers(0, 4, size=(5,))])
    m = rng.random((5, 4, 3)) > 0.5
    gcase(b, "index_bool_mask", "p0[p1]", lambda t, mm: t[mm], [x, m])
    gcase(b, "masked_select", "masked_select(p0, p1)", lambda t, mm: torch.masked_select(t, mm), [x, m[0]])
    ti = rng.integers(-4, 4, size=(2, 3))
    gcase(b, "take_axis1", "take(p0, p1, axis=1)", lambda t, i: torch.from_numpy(np.zeros(0)) if False else _take(t, i, 1), [x, ti])
    gcase(b, "index_select", "index_select(p0, 2, p1)", lambda t, i: torch.index_select(t, 2, i), [x, rng.integers(0, 3, size=(5,))])
    gi = rng.integers(0, 4, size=(5, 2, 3))
    gcase(b, "gather", "gather(p0, 1, p1)", lambda t, i: torch.gather(t, 1, i), [x, gi])
    si = rng.integers(0, 5, size=(3, 4, 3))
    gcase(b, "scatter_add", "scatter_add(p0, 0, p1, p2)", lambda t, i, s: torch.scatter_add(t, 0, i, s), [x, si, r(3, 4, 3)], diff=[True, False, True])


def _take(t, idx, axis):
    n = t.shape[axis]
    i = torch.remainder(idx, n)
    out = torch.index_select(t, axis, i.reshape(-1))
    return out.reshape(t.shape[:axis] + i.shape + t.shape[axis + 1:])


def nn_ops(b):
    x = r(3, 4, 5)
    for ax in (-1, 1):
        gcase(b, f"softmax_ax{ax}", f"softmax(p0, axis={ax})", lambda t, ax=ax: F.softmax(t, dim=ax), [x])
        gcase(b, f"log_softmax_ax{ax}", f"log_softmax(p0, axis={ax})", lambda t, ax=ax: F.log_softmax(t, dim=ax), [x])
    N, C = 6, 4
    tg = rng.integers(0, C, size=(N,))
    tg[2] = -100
    tgi = np.where(tg < 0, 1, tg)
    gcase(b, "cross_entropy", "cross_entropy(p0, p1)", lambda l, t: F.cross_entropy(l, t), [r(N, C), tgi])
    gcase(b, "cross_entropy_ignore", "cross_entropy(p0, p1)", lambda l, t: F.cross_entropy(l, t), [r(N, C), tg])
    gcase(b, "cross_entropy_ignore_idx1", "cross_entropy(p0, p1, ignore_index=1)", lambda l, t: F.cross_entropy(l, t, ignore_index=1), [r(N, C), tgi])
    gcase(b, "cross_entropy_smooth", "cross_entropy(p0, p1, label_smoothing=0.15)", lambda l, t: F.cross_entropy(l, t, label_smoothing=0.15), [r(N, C), tg])
    gcase(b, "cross_entropy_spatial", "cross_entropy(p0, p1)", lambda l, t: F.cross_entropy(l, t), [r(2, C, 3), rng.integers(0, C, size=(2, 3))])
    gcase(b, "mse_loss", "mse_loss(p0, p1)", F.mse_loss, [r(4, 3), r(4, 3)])
    gcase(b, "mse_loss_bcast", "mse_loss(p0, p1)", lambda a, c: torch.mean((a - c) ** 2), [r(4, 3), r(3)])
    D = 5
    gcase(b, "layer_norm", "layer_norm(p0, p1, p2)", lambda t, w, bb: F.layer_norm(t, (D,), w, bb), [r(2, 3, D), r(D), r(D)])
    gcase(b, "layer_norm_plain", "layer_norm(p0)", lambda t: F.layer_norm(t, (D,)), [r(4, D)])
    ei = rng.integers(0, 6, size=(3, 4))
    ei[0, 0] = ei[1, 1] = 2
    gcase(b, "embedding_repeated_rows", "embedding(p0, p1)", lambda w, i: F.embedding(i, w), [r(6, 3), ei])
    for (N_, Ci, H, W, O, k, st, pd) in ((2, 3, 6, 5, 4, 3, 1, 0), (1, 2, 7, 7, 3, 3, 2, 1), (2, 2, 5, 6, 2, 2, (1, 2), (1, 0))):
        sarg = f"list({st[0]}, {st[1]})" if isinstance(st, tuple) else str(st)
        parg = f"list({pd[0]}, {pd[1]})" if isinstance(pd, tuple) else str(pd)
        gcase(b, f"conv2d_{[N_, Ci, H, W]}_k{k}_s{st}_p{pd}", f"conv2d(p0, p1, p2, stride={sarg}, padding={parg})",
              lambda xx, w, bb, st=st, pd=pd: F.conv2d(xx, w, bb, stride=st, padding=pd), [r(N_, Ci, H, W), r(O, Ci, k, k), r(O)])
    px = distinct(2, 2, 6, 7)
    for k, st, pd in ((2, None, 0), (3, 2, 1), (3, 1, 0)):
        sarg = "nil" if st is None else str(st)
        gcase(b, f"max_pool2d_k{k}_s{st}_p{pd}", f"max_pool2d(p0, kernel={k}, stride={sarg}, padding={pd})",
              lambda t, k=k, st=st, pd=pd: F.max_pool2d(t, k, stride=st, padding=pd), [px])
        gcase(b, f"avg_pool2d_k{k}_s{st}_p{pd}", f"avg_pool2d(p0, kernel={k}, stride={sarg}, padding={pd})",
              lambda t, k=k, st=st, pd=pd: F.avg_pool2d(t, k, stride=st, padding=pd), [px])
    sx = distinct(4, 6)
    gcase(b, "sort_values", "sort(p0, axis=1)[0]", lambda t: torch.sort(t, dim=1)[0], [sx])
    gcase(b, "sort_values_desc_ax0", "sort(p0, axis=0, descending=true)[0]", lambda t: torch.sort(t, dim=0, descending=True)[0], [sx])
    gcase(b, "topk_values", "topk(p0, 3)[0]", lambda t: torch.topk(t, 3)[0], [sx])
    gcase(b, "topk_values_smallest_ax0", "topk(p0, 2, axis=0, largest=false)[0]", lambda t: torch.topk(t, 2, dim=0, largest=False)[0], [sx])
    gcase(b, "cumsum_ax0", "cumsum(p0, axis=0)", lambda t: torch.cumsum(t, 0), [sx])
    gcase(b, "cumsum_ax1", "cumsum(p0, axis=1)", lambda t: torch.cumsum(t, 1), [sx])
    gcase(b, "dropout_eval", "dropout(p0, p=0.5, training=false)", lambda t: t, [sx])
    gcase(b, "mlp", "sum(relu(p0 @ p1 + p2) @ p3, axis=1)",
          lambda a, w1, b1, w2: torch.sum(torch.relu(a @ w1 + b1) @ w2, dim=1), [r(5, 4), r(4, 6), r(6), r(6, 3)])


def api(b):
    """backward(), .grad accumulation, value_and_grad, grad of a record (tree)."""
    x, w = r(3, 4), r(3, 4)
    xs, ws = b.inp(x), b.inp(w)
    tx = T(x, requires_grad=True)
    (torch.tanh(tx) * T(w)).sum().backward()
    g1 = tx.grad.clone()
    b.case("backward_leaf_grad", f"x = clone({xs})\nx.requires_grad = true\nbackward(sum(tanh(x) * {ws}))\nx.grad", g1, **TOL)
    b.case("backward_accumulates", f"x = clone({xs})\nx.requires_grad = true\nbackward(sum(tanh(x) * {ws}))\nbackward(sum(tanh(x) * {ws}))\nx.grad", 2 * g1, **TOL)
    b.case("backward_with_grad_arg", f"x = clone({xs})\nx.requires_grad = true\nbackward(tanh(x), grad={ws})\nx.grad", g1, **TOL)
    b.case("zero_grad_clears", f"x = clone({xs})\nx.requires_grad = true\nbackward(sum(x * 2))\nzero_grad({{p: x}})\nx.grad == nil", True)
    b.case("value_and_grad", f"vg = value_and_grad(fn(a) sum(tanh(a) * {ws}))\nvg({xs})", [(torch.tanh(T(x)) * T(w)).sum(), g1], **TOL)
    b.case("grad_of_record_tree", f"f = fn(p) sum(tanh(p.a) * {ws}) + sum(p.b.c * p.b.c)\ng = grad(f)({{a: {xs}, b: {{c: {ws}}}}})\nlist(g.a, g.b.c)", [g1, 2 * T(w)], **TOL)
    b.case("no_grad_block", f"x = clone({xs})\nx.requires_grad = true\ny = nil\nno_grad {{ y = x * 2 }}\ny.requires_grad", False)
    b.case("requires_grad_propagates", f"x = clone({xs})\nx.requires_grad = true\nlist((x * 2).requires_grad, (x * 2).is_leaf, x.is_leaf)", [True, False, True])
    # argnums as a bracket literal (fixed on the language side in 9ba48e7)
    b.case("argnums_bracket_literal_returns_both", f"g = grad(fn(a, c) sum(a * c), argnums=[0, 1])({xs}, {ws})\nlen(g)", 2.0)
    b.case("argnums_list_call_returns_both", f"g = grad(fn(a, c) sum(a * c), argnums=list(0, 1))({xs}, {ws})\nlen(g)", 2.0)


def gradcheck(b):
    b.raw(GRADCHECK_NBL)
    fns = [
        ("tanh_matmul", "fn(x) sum(tanh(x @ {W}) ** 2)", (3, 4), lambda: r(4, 2)),
        ("softmax_ce", "fn(x) cross_entropy(x, {W})", (5, 4), lambda: rng.integers(0, 4, size=(5,))),
        ("layer_norm", "fn(x) sum(layer_norm(x) * {W})", (3, 6), lambda: r(3, 6)),
        ("conv2d", "fn(x) sum(conv2d(x, {W}, padding=1) ** 2)", (1, 2, 4, 4), lambda: r(3, 2, 3, 3)),
        ("logsumexp_var", "fn(x) logsumexp(x, axis=0).sum() + var(x) * 3", (4, 3), None),
        ("gelu_silu_pool", "fn(x) sum(avg_pool2d(gelu(x) * silu(x), kernel=2) * 1.5)", (1, 1, 4, 4), None),
        # (the denominator kept away from 0: x.T @ x + 2 can reach 0 off the diagonal,
        # where finite differences blow up — seed 948329171 did)
        ("div_sqrt_bcast", "fn(x) sum(sqrt(x * x + 1) / ((x.T @ x) * (x.T @ x) + 2))", (3, 3), None),
        ("softmax_log", "fn(x) sum(log_softmax(x, axis=0) * {W})", (4, 5), lambda: r(4, 5)),
    ]
    for name, f, shape, wgen in fns:
        W = b.inp(wgen()) if wgen else None
        x = b.inp(r(*shape))
        code = f"f = {f.format(W=W)}\ngc = gradcheck(f, {x})\nlist(gc[0] - gc[1], gc[0])"
        b.case(f"gradcheck_{name}", code,
               lambda g: (None if isinstance(g, list) and float(np.max(np.abs(g[0].astype(np.float64)))) <= 1e-6 * max(1.0, float(np.max(np.abs(g[1]))))
                          else f"autograd - finite differences: max abs {np.max(np.abs(g[0])) if isinstance(g, list) else g}"))


def ties(b):
    """Conventions at non-differentiable points, as torch: amax splits ties evenly, maximum
    gives 0.5 to each side, relu/abs/sign have 0 slope at 0, clamp passes at the bounds."""
    t4 = np.array([1.5, 2.5, 2.5, 0.5])
    z = np.zeros(4)
    gcase(b, "tie_max_all", "max(p0)", torch.max, [t4])
    gcase(b, "tie_max_axis", "max(reshape(p0, list(2, 2)), axis=1)", lambda x: torch.amax(x.reshape(2, 2), dim=1), [np.array([2.5, 2.5, 1.5, 0.5])])
    gcase(b, "tie_maximum", "maximum(p0, p1)", torch.maximum, [t4, t4.copy()])
    gcase(b, "tie_minimum", "minimum(p0, p1)", torch.minimum, [t4, t4.copy()])
    gcase(b, "tie_clamp_bounds", "clamp(p0, min=1.5, max=2.5)", lambda x: torch.clamp(x, 1.5, 2.5), [t4])
    for name, tf in (("relu", torch.relu), ("abs", torch.abs), ("sign", torch.sign), ("sqrt_of_sq_plus", lambda x: torch.sqrt(x * x + 1))):
        body = "sqrt(p0 * p0 + 1)" if name.startswith("sqrt") else f"{name}(p0)"
        gcase(b, f"at_zero_{name}", body, tf, [z])
    gcase(b, "pow_zero_base", "p0 ** p1", torch.pow, [z, t4])
    # NaN inputs: relu passes the gradient (torch: threshold_backward), clamp blocks it
    xn = np.array([np.nan, -1.5, 2.5, 0.0])
    gcase(b, "nan_relu", "relu(p0)", torch.relu, [xn])
    gcase(b, "nan_clamp", "clamp(p0, min=-1, max=2)", lambda x: torch.clamp(x, -1, 2), [xn])


def main():
    b = Batch("grads")
    ties(b)
    binary(b)
    unary(b)
    reductions(b)
    shape_ops(b)
    indexing(b)
    nn_ops(b)
    api(b)
    gradcheck(b)
    b.run()
    finish()


if __name__ == "__main__":
    main()
