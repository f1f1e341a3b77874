#!/usr/bin/python3
"""In-place writes under autograd (x[idx] = v, CopySlicesBackward, version
counters) vs torch.autograd, in f64, on fresh random inputs.

Each gradient case is a function body over p0, p1, ... that writes into a
tensor of the graph (or into a plain tensor, from a value that requires
grad) and returns a tensor y; the loss is sum(y * W) with random W, and
nabla's grad(f, argnums=...) must match torch's .grad for every floating
input.  The torch reference does the same writes (x[mask] = v has torch's
meaning: v fills the selected elements in order).  Then: a finite-difference
gradcheck through writes, the error cases (a tensor needed by backward
modified in place, leaves, writes through views, stale views, shared plain
memory), and no_grad (writes allowed, nothing recorded).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_inplace.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import GRADCHECK_NBL, Batch, T, finish, rng, torch, np  # noqa: E402

TOL = dict(rtol=1e-9, atol=1e-10)


def r(*shape):
    return rng.standard_normal(shape)


def icase(b, name, nb_body, torch_fn, inputs, diff=None, tol=TOL):
    """nb_body: nabla statements over p0, p1, ...; its last line is the output.
    torch_fn(*tensors): the same computation in torch (writes included)."""
    vals = [np.array(a, copy=True) for a in inputs]
    exprs = [b.inp(a) for a in vals]
    if diff is None:
        diff = [np.issubdtype(a.dtype, np.floating) for a in vals]
    tin = [T(a, requires_grad=d) for a, d in zip(vals, diff)]
    out = torch_fn(*tin)
    W = rng.standard_normal(tuple(out.shape))
    (out * T(W)).sum().backward()
    exp = [t.grad if t.grad is not None else torch.zeros_like(t) for t, d in zip(tin, diff) if d]
    params = ", ".join(f"p{i}" for i in range(len(inputs)))
    argn = ", ".join(str(i) for i, d in enumerate(diff) if d)
    xw = b.inp(W)
    body = "\n".join("  " + line.strip() for line in nb_body.strip().split("\n"))
    code = (f"f = fn({params}) {{\n{body}\n}}\n"
            f"grad(fn({params}) sum(f({params}) * {xw}), argnums=list({argn}))({', '.join(exprs)})")
    b.case(name, code, exp, **tol)


# ------------------------------------------------------------------ index forms
def index_forms(b):
    def tf(write):
        def f(x, v):
            y = x * 2
            write(y, v)
            return y * y
        return f

    def t_slice(y, v): y[1:3] = v
    icase(b, "slice_rows", "y = p0 * 2\ny[1:3] = p1\ny * y", tf(t_slice), [r(5, 4), r(2, 4)])

    def t_int(y, v): y[2] = v
    icase(b, "int_row", "y = p0 * 2\ny[2] = p1\ny * y", tf(t_int), [r(5, 4), r(4)])

    def t_neg(y, v): y[-1, 1:3] = v
    icase(b, "negative_int_and_slice", "y = p0 * 2\ny[-1, 1:3] = p1\ny * y", tf(t_neg), [r(5, 4), r(2)])

    def t_step(y, v): y[::2, 1] = v
    icase(b, "step_slice_column", "y = p0 * 2\ny[::2, 1] = p1\ny * y", tf(t_step), [r(5, 4), r(3)])

    def t_negstep(y, v): y[torch.tensor([4, 2, 0]), 1] = v   # y[::-2, 1] = v
    icase(b, "negative_step_slice", "y = p0 * 2\ny[::-2, 1] = p1\ny * y", tf(t_negstep), [r(5, 4), r(3)])

    def t_ell(y, v): y[..., 0] = v
    icase(b, "ellipsis_last_axis", 'y = p0 * 2\ny["...", 0] = p1\ny * y', tf(t_ell), [r(3, 4, 2), r(3, 4)])

    def t_newaxis(y, v): y[None, 1] = v
    icase(b, "newaxis", "y = p0 * 2\ny[nil, 1] = p1\ny * y", tf(t_newaxis), [r(5, 4), r(1, 4)])

    def t_whole(y, v): y[:] = v
    icase(b, "whole_tensor_broadcast_row", "y = p0 * 2\ny[:] = p1\ny * y", tf(t_whole), [r(5, 4), r(4)])


def broadcasting(b):
    def f_row(x, v):
        y = torch.tanh(x) * 1        # tanh's backward reads its output: write into a copy
        y[1:4] = v
        return y * 3
    icase(b, "bcast_row_into_block", "y = tanh(p0) * 1\ny[1:4] = p1\ny * 3", f_row, [r(5, 4), r(4)])
    icase(b, "bcast_keepdim_row", "y = tanh(p0) * 1\ny[1:4] = p1\ny * 3", f_row, [r(5, 4), r(1, 4)])

    def f_col(x, v):
        y = torch.tanh(x) * 1
        y[:, 1:3] = v
        return y * 3
    icase(b, "bcast_column_vector", "y = tanh(p0) * 1\ny[:, 1:3] = p1\ny * 3", f_col, [r(5, 4), r(5, 1)])

    def f_scalar(x, v):
        y = torch.sin(x)
        y[0, :] = v
        return y * y
    icase(b, "bcast_0d_tensor", "y = sin(p0)\ny[0, :] = p1\ny * y", f_scalar, [r(3, 4), np.array(0.7)])

    def f_number(x):
        y = torch.sin(x)
        y[1] = 3.5
        y[0, 2] = -1
        return y * y
    icase(b, "number_fill", "y = sin(p0)\ny[1] = 3.5\ny[0, 2] = -1\ny * y", f_number, [r(3, 4)])


def masks(b):
    m = rng.random((5, 4)) > 0.5
    rows = rng.random(5) > 0.5
    rows[0] = True

    def f_mask(x, v, mm):
        y = x * 2
        y[mm] = v
        return y * y
    icase(b, "mask_bcast_row", "y = p0 * 2\ny[p2] = p1\ny * y", f_mask, [r(5, 4), r(4), rows])
    icase(b, "mask_full_value", "y = p0 * 2\ny[p2] = p1\ny * y", f_mask, [r(5, 4), r(int(m.sum())), m])
    m4 = np.zeros(20, dtype=bool)
    m4[rng.choice(20, 4, replace=False)] = True      # count == the last dimension (4)
    icase(b, "mask_count_last_dim", "y = p0 * 2\ny[p2] = p1\ny * y", f_mask, [r(5, 4), r(4), m4.reshape(5, 4)])

    def f_mask_num(x, mm):
        y = torch.exp(x)
        y = torch.where(mm, torch.zeros((), dtype=y.dtype), y * 1)
        return y * 3
    icase(b, "mask_number", "y = exp(p0) * 1\ny[p1] = 0\ny * 3", f_mask_num, [r(5, 4), m])

    def f_mask_self(x):
        y = x * 1.5
        y[y > 0] = (y * 3)[y > 0]
        return y * y
    icase(b, "mask_from_itself", "y = p0 * 1.5\ny[y > 0] = (y * 3)[y > 0]\ny * y", f_mask_self, [r(4, 3)])


def semantics(b):
    def f_repeat(x, v):
        y = x * 2
        y[0] = v
        y[1:3] = v * 3
        y[0, 0] = v[2]
        y[2:4, 1] = y[0, 2:4]          # reads the new values
        return torch.tanh(y)
    icase(b, "repeated_writes",
          "y = p0 * 2\ny[0] = p1\ny[1:3] = p1 * 3\ny[0, 0] = p1[2]\ny[2:4, 1] = y[0, 2:4]\ntanh(y)",
          f_repeat, [r(5, 4), r(4)])

    def f_after_use(x, v):
        y = x * 2
        a = y * 3                        # used before the write: its gradient is unaffected
        c = y + x
        s = y.sum(0)
        y[1:3] = v
        return a + c + y * y + s
    icase(b, "write_after_use", "y = p0 * 2\na = y * 3\nc = y + p0\ns = sum(y, axis=0)\ny[1:3] = p1\na + c + y * y + s",
          f_after_use, [r(5, 4), r(2, 4)])

    def f_plain(x, v):
        w = torch.zeros(5, 4, dtype=torch.float64)
        w[0:2] = x[0:2]
        w[3] = v
        return w * w
    icase(b, "plain_target_value_requires_grad", "w = zeros(5, 4, dtype=\"f64\")\nw[0:2] = p0[0:2]\nw[3] = p1\nw * w",
          f_plain, [r(5, 4), r(4)])

    def f_overlap(x):
        y = x * 1
        y[1:4] = y[0:3].clone()
        return y * y
    icase(b, "self_overlapping_write", "y = p0 * 1\ny[1:4] = y[0:3]\ny * y", f_overlap, [r(5, 3)])

    def f_view_after(x, v):
        y = x * 2
        y[0] = v
        z = y[0:2].T                     # a view taken after the write
        return torch.exp(z)
    icase(b, "view_taken_after_write", "y = p0 * 2\ny[0] = p1\nz = y[0:2].T\nexp(z)", f_view_after, [r(4, 3), r(3)])

    def f_cast(x, v):
        y = x * 2
        y[1] = v.float().double()        # an f32 value written into f64: rounded, gradient flows
        return y * y
    icase(b, "value_of_other_dtype", 'y = p0 * 2\ny[1] = p1.to("f32")\ny * y', f_cast, [r(3, 4), r(4)], tol=dict(rtol=1e-6, atol=1e-6))

    def f_int_value(x, k):
        y = x * 2
        y[0] = k
        return y * y
    icase(b, "int_value_no_grad", "y = p0 * 2\ny[0] = p1\ny * y", f_int_value, [r(3, 4), rng.integers(-3, 3, size=(4,))])


def chains(b):
    def f_mm(x, v, m1, m2):
        h = x @ m1
        h[:, 0] = v
        p = torch.softmax(h, -1)
        q = p @ m2
        q[1:3] = torch.relu(q[0:2])
        return q
    icase(b, "matmul_softmax_chain",
          "h = p0 @ p2\nh[:, 0] = p1\np = softmax(h, axis=-1)\nq = p @ p3\nq[1:3] = relu(q[0:2])\nq",
          f_mm, [r(5, 4), r(5), r(4, 6), r(6, 3)], diff=[True, True, True, True])

    def f_ln(x, v):
        y = torch.nn.functional.layer_norm(x, (4,))
        y[:, 2] = v * 2
        return torch.log_softmax(y, 0)
    icase(b, "layer_norm_log_softmax", "y = layer_norm(p0)\ny[:, 2] = p1 * 2\nlog_softmax(y, axis=0)", f_ln, [r(3, 4), r(3)])


# ------------------------------------------------------------------ gradcheck
GRADCHECK = GRADCHECK_NBL + r'''
fn fd_writes(x) {
  y = tanh(x) * 1
  y[1] = x[0] * 2
  y[0:2, 1] = sin(x[2, 0:2])
  y[y < 0] = (y * 3)[y < 0]
  w = zeros(3, 4, dtype="f64")
  w[1:3, 1:3] = y[0:2, 0:2]
  sum(y ** 2) + sum(w * y)
}
'''


def gradcheck(b):
    b.raw(GRADCHECK)
    x = b.inp(r(3, 4))
    b.case("gradcheck_writes", f"gc = gradcheck(fd_writes, {x})\nlist(gc[0] - gc[1], gc[0])",
           lambda g: (None if isinstance(g, list) and float(np.max(np.abs(g[0]))) <= 1e-6 * max(1.0, float(np.max(np.abs(g[1]))))
                      else f"autograd - finite differences: max abs {np.max(np.abs(g[0])) if isinstance(g, list) else g}"))


# ------------------------------------------------------------------ graph facts, checkpoint, no_grad
def graph_facts(b):
    xs = b.inp(r(3, 4))
    b.case("grad_fn_after_write", f"x = clone({xs})\nx.requires_grad = true\ny = x * 2\ny[0] = 1\nlist(y.grad_fn, y.is_leaf, y.requires_grad)",
           ["CopySlicesBackward", False, True])
    b.case("plain_write_records_nothing", f"w = zeros(3, 4)\nw[0] = {xs}[0]\nlist(w.requires_grad, w.grad_fn == nil)", [False, True])
    b.case("plain_target_becomes_non_leaf", f"x = clone({xs})\nx.requires_grad = true\nw = zeros(3, 4, dtype=\"f64\")\nw[1] = x[0]\nlist(w.grad_fn, w.is_leaf)",
           ["CopySlicesBackward", False])
    # backward() into .grad, twice with retain_graph (gradients add up)
    xv = r(3, 4)
    t = T(xv, requires_grad=True)
    y = t * 2
    y[1] = t[0] * t[2]
    (y * y).sum().backward(retain_graph=True)
    (y * y).sum().backward()
    b.case("backward_retain_graph_twice",
           f"x = clone({b.inp(xv)})\nx.requires_grad = true\ny = x * 2\ny[1] = x[0] * x[2]\ns = sum(y * y)\n"
           "backward(s, retain_graph=true)\nbackward(s)\nx.grad", t.grad, **TOL)
    # checkpoint: the recomputed segment contains the write
    xv = r(4, 3)
    t = T(xv, requires_grad=True)
    y = torch.tanh(t) * 1
    y[0] = t[1] * 2
    (torch.exp(y) * 1.5).sum().backward()
    b.case("checkpoint_segment_with_write",
           f"x = clone({b.inp(xv)})\nx.requires_grad = true\n"
           "seg = fn(a) {\n  y = tanh(a) * 1\n  y[0] = a[1] * 2\n  exp(y)\n}\n"
           "backward(sum(checkpoint(seg, x) * 1.5))\nx.grad", t.grad, **TOL)


def no_grad_cases(b):
    xv = r(3, 4)
    xs = b.inp(xv)
    # a leaf requiring grad may be written under no_grad (optimizer updates); nothing is recorded
    b.case("no_grad_leaf_write", f"x = clone({xs})\nx.requires_grad = true\nno_grad {{ x[0] = 5 }}\nlist(x.is_leaf, x.grad_fn == nil, x[0, 0].item())",
           [True, True, 5.0])
    # a non-leaf written under no_grad keeps its history (torch does the same): d sum(3 y)/dx = 6
    t = T(xv, requires_grad=True)
    y = t * 2
    with torch.no_grad():
        y[0] = 1
    (y * 3).sum().backward()
    b.case("no_grad_nonleaf_write_keeps_history",
           f"x = clone({xs})\nx.requires_grad = true\ny = x * 2\nno_grad {{ y[0] = 1 }}\nbackward(sum(y * 3))\nlist(y.grad_fn, x.grad)",
           ["MulBackward", t.grad], **TOL)


# ------------------------------------------------------------------ errors
def errors(b):
    xs = b.inp(r(3, 4))
    pre = f"x = clone({xs})\nx.requires_grad = true\n"
    b.error("modified_saved_input", pre + "h = x * 2\nz = h * h\nh[0] = 1\nbackward(sum(z))",
            ["backward", "MulBackward", "modified in place", "version 0, now 1", "clone()"])
    b.error("modified_saved_output", pre + "y = exp(x)\ny[0] = 0\nbackward(sum(y))",
            ["backward", "ExpBackward", "modified in place", "version"])
    b.error("modified_matmul_operand", pre + "h = x * 1\nz = h @ h.T\nh[1, 1] = 0\nbackward(sum(z))",
            ["MatmulBackward", "modified in place"])
    b.error("leaf_requires_grad", pre + "x[0] = 1", ["leaf", "requires grad", "no_grad"])
    b.error("leaf_mask", pre + "x[x > 0] = 1", ["leaf", "requires grad"])
    b.error("view_of_leaf", pre + "v = x[0]\nv[1] = 2", ["view of a leaf", "requires grad"])
    b.error("write_through_view", pre + "y = x * 2\nz = y[0:2]\nz[0] = 1", ["in-place", "view", "autograd graph", "base"])
    b.error("write_through_transpose", pre + "y = x * 2\nz = y.T\nz[0] = 1", ["view", "base"])
    b.error("stale_view_used", pre + "y = x * 2\nz = y[0:2]\ny[0] = 1\nz * 2", ["view", "modified in place", "again"])
    b.error("stale_view_backward", pre + "y = x * 2\nz = y[0:2]\ny[0] = 1\nbackward(z, grad=ones(2, 4))",
            ["view", "modified in place"])
    b.error("plain_target_with_views", pre + "w = zeros(3, 4)\nu = w[0:2]\nw[2] = x[0]", ["share", "views", "clone()"])
    b.error("optimizer_step_before_backward",
            pre + "z = sum(x * x)\nadamw_update({w: x}, {w: ones(3, 4, dtype=\"f64\")}, {w: zeros(3, 4, dtype=\"f64\")}, "
            "{w: zeros(3, 4, dtype=\"f64\")}, 0.1, 0.9, 0.999, 1e-8, 0.0, 1)\nbackward(z)",
            ["MulBackward", "modified in place"])
    b.error("shape_mismatch", pre + "y = x * 2\ny[0] = ones(5)", ["[5]", "[4]"])
    # after an error the graph is still usable: the refused write changed nothing
    b.case("refused_write_changes_nothing",
           pre + "y = x * 2\nz = y[0:2]\ntry { z[0] = 100 } catch e { }\ny[0, 0].item() == (x[0, 0] * 2).item()", True)


# ------------------------------------------------------- x += v, -=, *=, /=, //=
def update_operators(b):
    """On a tensor, x op= v updates the tensor in place (torch's __iadd__):
    aliases see it, autograd records it, leaves that require grad are refused
    outside no_grad, and the result must fit x's shape and dtype."""
    def tf(op):
        def f(x, v):
            y = x * 2
            if op == "+": y += v
            elif op == "-": y -= v
            elif op == "*": y *= v
            else: y /= v
            return y * y
        return f
    for op, name in (("+", "add"), ("-", "sub"), ("*", "mul"), ("/", "div")):
        icase(b, f"update_{name}_grads", f"y = p0 * 2\ny {op}= p1\ny * y", tf(op), [r(3, 4), r(4) + (3 if op == "/" else 0)])
        icase(b, f"update_{name}_scalar_grads", f"y = p0 * 2\ny {op}= 1.5\ny * y",
              lambda x, op=op: tf(op)(x, 1.5), [r(2, 5)])
    # an alias (another name, a record field, a list item) sees the update
    x, v = r(3, 4), r(3, 4)
    xs, vs = T(x), T(v)
    b.case("update_alias_name", f"x = clone({b.inp(x)})\ny = x\nx += {b.inp(v)}\ny", x + v)
    b.case("update_field_in_place", f"a = clone({b.inp(x)})\nm = {{w: a}}\nm.w *= {b.inp(v)}\nlist(a, m.w)", [x * v, x * v])
    b.case("update_list_item_in_place", f"a = clone({b.inp(x)})\nps = [a]\nps[0] -= {b.inp(v)}\na", x - v)
    b.case("update_floordiv", f"x = clone({b.inp(x)})\ny = x\nx //= 0.5\ny", np.floor(x / 0.5))
    b.case("update_broadcast_value", f"x = clone({b.inp(x)})\ny = x\nx += {b.inp(v[0])}\ny", x + v[0])
    # the manual SGD step a PyTorch user writes trains the model
    lr = 0.1
    tx = T(x, requires_grad=True)
    (tx * tx * T(v)).sum().backward()
    exp = x - lr * tx.grad.numpy()
    b.case("update_manual_sgd_step",
           f"m = {{w: clone({b.inp(x)})}}\nm.w.requires_grad = true\nbackward(sum(m.w * m.w * {b.inp(v)}))\n"
           f"no_grad {{ for p in [m.w] {{ p -= {lr} * p.grad }} }}\ndetach(m.w)", exp)
    # numbers, strings and lists keep their meaning
    b.case("update_number_rebinds", "n = 2\nm = n\nn += 3\nlist(n, m)", [5, 2], dtype=False)
    b.case("update_string_rebinds", 's = "ab"\nt = s\ns += "c"\nlist(s == "abc", t == "ab")', [True, True], dtype=False)
    pre = f"x = clone({b.inp(x)})\nx.requires_grad = true\n"
    b.error("update_leaf_requires_grad", pre + "x -= 1", ["leaf", "requires grad", "no_grad"])
    b.error("update_shape_must_fit", f"x = clone({b.inp(x[0])})\nx += {b.inp(v)}", ["+=", "in place", "[3, 4]", "[4]"])
    b.error("update_dtype_must_fit", "i = tensor([1, 2])\ni += 0.5", ["+=", "in place", "f32", "i64"])
    b.error("update_saved_then_modified", pre + "h = x * 1\nz = h * h\nh += 1\nbackward(sum(z))", ["modified in place"])


def main():
    b = Batch("inplace")
    index_forms(b)
    broadcasting(b)
    masks(b)
    semantics(b)
    chains(b)
    gradcheck(b)
    graph_facts(b)
    no_grad_cases(b)
    errors(b)
    update_operators(b)
    b.run()
    finish()


if __name__ == "__main__":
    main()
