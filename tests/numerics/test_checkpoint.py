#!/usr/bin/env python3
"""Activation checkpointing: checkpoint(f, *args) (lang/lib/ltgrad.c + tensor/tautograd.c).

Gradients through a checkpointed segment must EQUAL the plain ones bit for bit
(the recomputation runs the same ops on the same values), for tensor
arguments and for the parameters f reaches through its closure; f's forward
runs twice; the graph kept during the forward is smaller (autograd_stats());
dropout inside f draws the same masks when recomputed; nesting, lists of
outputs, grad()/value_and_grad(), autocast and errors behave.  The MLP case is
also checked against PyTorch.  Runs again under ASan (NABLA_ASAN) for leaks.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, randn, torch  # noqa: E402

ASAN = os.environ.get("NABLA_ASAN") == "1"


def zero(got):
    """the nabla side returns max |difference| over everything compared"""
    return None if isinstance(got, float) and got == 0.0 else f"expected exactly 0 difference, got {got!r}"


PRELUDE = """
import nn
# max |a - b| over two trees of tensors (0 when bit-identical)
fn tree_diff(a, b) {
  if is_tensor(a) { return max(abs(a - b)).item() }
  d = 0
  if type(a) == "list" { for i in 0..len(a) { d = max(d, tree_diff(a[i], b[i])) } }
  if type(a) == "record" { for k in keys(a) { if a[k] != nil { d = max(d, tree_diff(a[k], b[k])) } } }
  d
}
"""

# ------------------------------------------------------------------ MLP block: exact equality + torch
b = Batch("checkpoint.mlp")
N, D, H = 6, 10, 32
x_np = randn(N, D)
w1, b1, w2, b2 = randn(H, D) * 0.3, randn(H) * 0.1, randn(D, H) * 0.3, randn(D) * 0.1
X = b.inp(x_np)
W1, B1, W2, B2 = b.inp(w1), b.inp(b1), b.inp(w2), b.inp(b2)
b.raw(PRELUDE + f"""
P = {{w1: {W1}, b1: {B1}, w2: {W2}, b2: {B2}}}
calls = {{n: 0}}
fn block(p, h) {{ calls.n += 1; h + tanh(relu(h @ p.w1.T + p.b1) @ p.w2.T + p.b2) }}
fn loss_plain(p, x) = sum(block(p, block(p, x)) ** 2)
# f closes over the parameters p (not passed to checkpoint): they must still get gradients
fn loss_ckpt(p, x) = sum(checkpoint(fn(h) block(p, h), checkpoint(fn(h) block(p, h), x)) ** 2)
RP = value_and_grad(loss_plain, argnums=[0, 1])(P, {X})
calls.n = 0
RC = value_and_grad(loss_ckpt, argnums=[0, 1])(P, {X})
CALLS = calls.n
""")
b.case("loss_equal", "abs(RP[0] - RC[0]).item()", zero)
b.case("param_grads_equal", "tree_diff(RP[1][0], RC[1][0])", zero)
b.case("input_grad_equal", "tree_diff(RP[1][1], RC[1][1])", zero)
b.case("forward_runs_twice", "CALLS", 4.0)   # two blocks, each run forward + recomputed
tp = [T(a, requires_grad=True) for a in (w1, b1, w2, b2)]
tx = T(x_np, requires_grad=True)


def tblock(h):
    return h + torch.tanh(torch.relu(h @ tp[0].T + tp[1]) @ tp[2].T + tp[3])


tl = (tblock(tblock(tx)) ** 2).sum()
tl.backward()
b.case("loss_vs_torch", "RC[0]", tl.detach(), rtol=1e-4, atol=1e-4)
for name, t in zip(("w1", "b1", "w2", "b2"), tp):
    b.case(f"grad_{name}_vs_torch", f"RC[1][0].{name}", t.grad, rtol=1e-3, atol=1e-4)
b.case("grad_x_vs_torch", "RC[1][1]", tx.grad, rtol=1e-3, atol=1e-4)
# backward() on leaves (not grad()): .grad accumulates identically
b.case("backward_leaf_grads", f"""
Q = nn.map_tree(P, fn(t) clone(t))
requires_grad(Q)
backward(sum(checkpoint(fn(h) block(Q, h), {X}) ** 2))
g1 = Q.w1.grad
zero_grad(Q)
backward(sum(block(Q, {X}) ** 2))
tree_diff(g1, Q.w1.grad)
""", zero)
b.run()

# ------------------------------------------------------------------ transformer block from stdlib nn
b = Batch("checkpoint.transformer")
Bt, Tt, d = 2, 5, 16
xt = b.inp(randn(Bt, Tt, d))
b.raw(PRELUDE + f"""
seed(4)
blocks = [nn.transformer_block({d}, 4), nn.transformer_block({d}, 4)]
fn run(m, x, ck) {{
  # the block goes in as an argument: a closure would see the loop variable's
  # LAST value when backward recomputes (see late_binding_caught below)
  for blk in m {{ x = if ck {{ checkpoint(blk, x) }} else {{ blk(x) }} }}
  x
}}
fn lossf(ck) = fn(m, x) mean(run(m, x, ck) ** 2)
GP = value_and_grad(lossf(false), argnums=[0, 1])(blocks, {xt})
GC = value_and_grad(lossf(true), argnums=[0, 1])(blocks, {xt})
""")
b.case("loss_equal", "abs(GP[0] - GC[0]).item()", zero)
b.case("param_grads_equal", "tree_diff(GP[1][0], GC[1][0])", zero)
b.case("input_grad_equal", "tree_diff(GP[1][1], GC[1][1])", zero)
b.case("grads_nonzero", "sum(abs(GC[1][0][0].fc.weight)).item() > 0", True)
# the graph kept between forward and backward is smaller with checkpointing
b.case("forward_keeps_less", f"""
X1 = clone({xt}); X1.requires_grad = true
base = autograd_stats()
yp = run(blocks, X1, false)
sp = autograd_stats()
yp = nil
yc = run(blocks, X1, true)
sc = autograd_stats()
list(sc.nodes - base.nodes < (sp.nodes - base.nodes) / 5, sc.bytes - base.bytes < (sp.bytes - base.bytes) / 3, sc.nodes - base.nodes)
""", [True, True, 2.0])   # one CheckpointBackward node per block
b.error("late_binding_caught", f"""
fn bad_loss(m, x) {{
  h = x
  for blk in m {{ h = checkpoint(fn(z) blk(z), h) }}
  sum(h)
}}
grad(bad_loss)(blocks, {xt})
""", ["checkpoint", "variable", "argument"])
b.case("nn_sequential_flag", f"""
seq_p = nn.sequential(blocks)
seq_c = nn.sequential(blocks, checkpoint=true)
gs1 = value_and_grad(fn(m, x) mean(m(x) ** 2))(seq_p, {xt})
gs2 = value_and_grad(fn(m, x) mean(m(x) ** 2))(seq_c, {xt})
X12 = clone({xt}); X12.requires_grad = true
base = autograd_stats(); y = seq_c(X12); n = autograd_stats().nodes - base.nodes
list(tree_diff(gs1[1].layers, gs2[1].layers), abs(gs1[0] - gs2[0]).item(), n)
""", [0.0, 0.0, 2.0])
b.case("stats_released_after_backward", f"""
X2 = clone({xt}); X2.requires_grad = true
base = autograd_stats()
backward(sum(run(blocks, X2, true)))
s = autograd_stats()
list(s.nodes - base.nodes, s.bytes - base.bytes)
""", [0.0, 0.0])
b.run()

# ------------------------------------------------------------------ dropout, nesting, lists, autocast, errors
b = Batch("checkpoint.behaviour")
xd = b.inp(randn(8, 12))
wd = b.inp(randn(12, 12) * 0.3)
b.raw(PRELUDE + f"""
fn drop_block(w, h) = dropout(relu(h @ w), 0.4) @ w
fn dl(ck) = fn(w, x) sum((if ck {{ checkpoint(fn(h) drop_block(w, h), x) }} else {{ drop_block(w, x) }}) ** 2)
seed(21); DP = value_and_grad(dl(false), argnums=[0, 1])({wd}, {xd}); AFTER_P = rand(3)
seed(21); DC = value_and_grad(dl(true), argnums=[0, 1])({wd}, {xd}); AFTER_C = rand(3)
""")
b.case("dropout_same_masks", "max(tree_diff(DP[1], DC[1]), abs(DP[0] - DC[0]).item())", zero)
b.case("dropout_masks_differ_per_seed", f"seed(22)\nr = value_and_grad(dl(true))({wd}, {xd})\nabs(r[0] - DC[0]).item() > 0", True)
b.case("rng_stream_unchanged", "tree_diff(AFTER_P, AFTER_C)", zero)
b.case("nested", f"""
fn f(h) = tanh(h @ {wd})
fn inner2(h) = checkpoint(f, checkpoint(f, h))
gp = grad(fn(x) sum(f(f(f(x)))))({xd})
gc = grad(fn(x) sum(checkpoint(fn(h) f(inner2(h)), x)))({xd})
tree_diff(gp, gc)
""", zero)
b.case("list_outputs", f"""
fn two(h) = list(tanh(h @ {wd}), h * 3)
gp = grad(fn(w, x) {{ r = two(x); sum(r[0] * r[1]) + sum(r[0]) }}, argnums=[0, 1])({wd}, {xd})
gc = grad(fn(w, x) {{ r = checkpoint(two, x); sum(r[0] * r[1]) + sum(r[0]) }}, argnums=[0, 1])({wd}, {xd})
tree_diff(gp, gc)
""", zero)
b.case("list_output_shapes", f"X3 = clone({xd})\nX3.requires_grad = true\nr = checkpoint(fn(h) list(h * 1, sum(h, axis=0)), X3)\nlist(r[0].shape, r[1].shape)",
       [[8.0, 12.0], [12.0]])
b.case("identity_f", f"X4 = clone({xd})\nX4.requires_grad = true\ny = checkpoint(fn(h) h, X4)\nbackward(sum(y * 2))\nlist(X4.is_leaf, max(abs(X4.grad - 2)).item())",
       [True, 0.0])
b.case("under_autocast", f"""
fn lf(ck) = fn(w, x) autocast("bf16") {{ sum((if ck {{ checkpoint(fn(h) relu(h @ w) @ w, x) }} else {{ relu(x @ w) @ w }}) ** 2) }}
gp = grad(lf(false), argnums=[0, 1])({wd}, {xd}); gc = grad(lf(true), argnums=[0, 1])({wd}, {xd})
tree_diff(gp, gc)
""", zero)
b.case("no_grad_passthrough", f"y = no_grad {{ checkpoint(fn(h) h @ {wd}, {xd}) }}\nlist(y.requires_grad, y.shape)", [False, [8.0, 12.0]])
b.case("nothing_requires_grad", f"y = checkpoint(fn(h) h @ {wd}, {xd})\ny.requires_grad", False)
b.case("extra_args", f"X5 = clone({xd})\nX5.requires_grad = true\ny = checkpoint(fn(a, s, w) a * s @ w, X5, 2, {wd})\nbackward(sum(y))\nX5.grad.shape", [8.0, 12.0])
b.case("no_grad_inside_f", f"""
fn f(h) {{ c = no_grad {{ h * 0 + 1 }}; tanh(h @ {wd}) * c }}
gp = grad(fn(x) sum(f(x)))({xd}); gc = grad(fn(x) sum(checkpoint(f, x)))({xd})
tree_diff(gp, gc)
""", zero)
b.error("non_tensor_result", f"X6 = clone({xd})\nX6.requires_grad = true\ncheckpoint(fn(h) 3, X6)", ["checkpoint", "tensor", "number"], kind="TypeError")
b.error("int_tensor_result", f"checkpoint(fn(h) argmax(h, axis=0), {xd})", ["checkpoint", "i64"], kind="TypeError")
b.error("not_a_function", f"checkpoint(3, {xd})", ["checkpoint", "function"], kind="TypeError")
b.error("no_args", "checkpoint()", ["checkpoint"], kind="TypeError")
b.error("error_in_forward", f"X7 = clone({xd})\nX7.requires_grad = true\ncheckpoint(fn(h) error(\"bad block\"), X7)", ["bad block"])
b.error("error_in_recompute", f"""
cnt = {{n: 0}}
fn flaky(h) {{ cnt.n += 1; if cnt.n > 1 {{ error("flaky recompute") }}; h * 2 }}
X8 = clone({xd}); X8.requires_grad = true
backward(sum(checkpoint(flaky, X8)))
""", ["checkpoint", "recomputing", "flaky recompute"])
b.case("usable_after_recompute_error", f"""
cnt2 = {{n: 0}}
fn flaky2(h) {{ cnt2.n += 1; if cnt2.n == 2 {{ error("once") }}; tanh(h) }}
X9 = clone({xd}); X9.requires_grad = true
try {{ backward(sum(checkpoint(flaky2, X9))) }} catch e {{ }}
X10 = clone({xd}); X10.requires_grad = true
backward(sum(checkpoint(flaky2, X10)))
list(str(autocast_dtype()), grad_enabled(), max(abs(X10.grad - (1 - tanh({xd}) ** 2))).item() < 1e-6)
""", ["nil", True, True])
b.error("shape_changes", f"""
k = {{n: 0}}
fn grow(h) {{ k.n += 1; if k.n == 1 {{ h * 1 }} else {{ concat(list(h, h), axis=0) }} }}
X11 = clone({xd}); X11.requires_grad = true
backward(sum(checkpoint(grow, X11)))
""", ["checkpoint", "recomputed", "deterministic"])
b.run()

if not ASAN:
    # ------------------------------------------------------------------ memory: a deeper stack
    b = Batch("checkpoint.memory")
    b.raw(PRELUDE + """
seed(5)
L = list(); for i in 0..8 { push(L, nn.linear(64, 64)) }
Xm = randn(32, 64); Xm.requires_grad = true
fn stack(ck) { h = Xm; for l in L { h = if ck { checkpoint(fn(z) gelu(l(z)), h) } else { gelu(l(h)) } }; h }
b0 = autograd_stats(); y1 = stack(false); s1 = autograd_stats(); y1 = nil
y2 = stack(true); s2 = autograd_stats(); y2 = nil
""")
    b.case("bytes_ratio", "(s2.bytes - b0.bytes) / (s1.bytes - b0.bytes)",
           lambda g: None if g < 0.5 else f"checkpointed graph holds {g:.2f} of the plain one's bytes")
    b.run()

finish()
