#!/usr/bin/env python3
"""Mixed precision: autocast blocks and dynamic loss scaling (optim.grad_scaler).

autocast("bf16"|"f16") { ... } casts the inputs of matmul/conv2d to the low
dtype and computes softmax, log_softmax, cross_entropy, layer_norm, mse_loss,
sum/mean/prod/logsumexp, cumsum, exp/log/pow... in f32 (docs/cuda.md "Mixed
precision").  References: torch.autocast("cpu", bfloat16) where torch's CPU
lists agree with ours (matmul, conv2d), explicit torch casts elsewhere (torch's
CPU autocast lists differ from its CUDA ones, which we follow).

torch 1.13 (Debian) has no CPU GradScaler (its update kernel is CUDA-only), so
the scale-sequence reference is that kernel's logic, transcribed below from
aten/src/ATen/native/cuda/AmpKernels.cu (amp_update_scale_cuda_kernel).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, randn, rng, torch, check  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import numpy as np  # noqa: E402

bf16, f32 = torch.bfloat16, torch.float32


def tb(a):
    """f32 numpy -> bf16 torch tensor"""
    return T(a).to(bf16)


# ------------------------------------------------------------------ dtypes inside / outside / nested
b = Batch("amp.dtypes")
A, B = b.inp(randn(3, 4)), b.inp(randn(4, 5))
X4 = b.inp(randn(2, 3, 5, 5)); W4 = b.inp(randn(4, 3, 3, 3))
cases = [
    ("outside_matmul", f"({A} @ {B}).dtype", "f32"),
    ("bf16_matmul", f'autocast("bf16") {{ ({A} @ {B}).dtype }}', "bf16"),
    ("f16_matmul", f'autocast("f16") {{ ({A} @ {B}).dtype }}', "f16"),
    ("bf16_matmul_f64_input", f'autocast("bf16") {{ ({A}.to("f64") @ {B}).dtype }}', "bf16"),
    ("bf16_matmul_int_untouched", f'autocast("bf16") {{ (ones(2, 2, dtype="i64") @ ones(2, 2, dtype="i64")).dtype }}', "i64"),
    ("bf16_conv2d", f'autocast("bf16") {{ conv2d({X4}, {W4}).dtype }}', "bf16"),
    ("bf16_attention", f'q = randn(1, 2, 4, 8)\nautocast("bf16") {{ scaled_dot_product_attention(q, q, q, causal=true).dtype }}', "bf16"),
    ("bf16_softmax_of_bf16", f'autocast("bf16") {{ softmax({A}.to("bf16"), axis=-1).dtype }}', "f32"),
    ("bf16_softmax_of_matmul", f'autocast("bf16") {{ softmax({A} @ {B}, axis=-1).dtype }}', "f32"),
    ("bf16_sum", f'autocast("bf16") {{ sum({A}.to("bf16")).dtype }}', "f32"),
    ("bf16_mean", f'autocast("bf16") {{ mean({A}.to("bf16"), axis=0).dtype }}', "f32"),
    ("bf16_exp", f'autocast("bf16") {{ exp({A}.to("bf16")).dtype }}', "f32"),
    ("bf16_pow", f'autocast("bf16") {{ ({A}.to("bf16") ** 2).dtype }}', "f32"),
    ("bf16_relu_keeps", f'autocast("bf16") {{ relu({A}.to("bf16")).dtype }}', "bf16"),
    ("bf16_max_keeps", f'autocast("bf16") {{ max({A}.to("bf16")).dtype }}', "bf16"),
    ("bf16_promotion", f'autocast("bf16") {{ ({A}.to("bf16") + {A}).dtype }}', "f32"),
    ("f32_ops_keep_f64", f'autocast("bf16") {{ exp({A}.to("f64")).dtype }}', "f64"),
    ("nested_off", f'autocast("bf16") {{ autocast(nil) {{ ({A} @ {B}).dtype }} }}', "f32"),
    ("nested_off_string", f'autocast("bf16") {{ autocast("off") {{ ({A} @ {B}).dtype }} }}', "f32"),
    ("nested_f16", f'autocast("bf16") {{ autocast("f16") {{ ({A} @ {B}).dtype }} }}', "f16"),
    ("nested_restores", f'autocast("bf16") {{ autocast("f16") {{ 1 }}; ({A} @ {B}).dtype }}', "bf16"),
    ("state_inside", 'autocast("bfloat16") { autocast_dtype() }', "bf16"),
    ("state_after", 'autocast("f16") { 1 }\nstr(autocast_dtype())', "nil"),
    ("fn_expression_body", f'fn f(x) = autocast("bf16") {{ x @ {B} }}\nlist(f({A}).dtype, str(autocast_dtype()))', ["bf16", "nil"]),
    ("restored_after_error", 'try { autocast("bf16") { error("boom") } } catch e { }\nstr(autocast_dtype())', "nil"),
    ("restored_after_tensor_error", f'try {{ autocast("bf16") {{ {A} @ {A} }} }} catch e {{ }}\nstr(autocast_dtype())', "nil"),
    ("restored_after_return", 'fn g() { autocast("f16") { return 1 } }\ng()\nstr(autocast_dtype())', "nil"),
    ("restored_after_break", 'for i in 0..3 { autocast("f16") { break } }\nstr(autocast_dtype())', "nil"),
    ("restored_after_continue", 'for i in 0..3 { autocast("f16") { continue } }\nstr(autocast_dtype())', "nil"),
    ("block_value", f'autocast("bf16") {{ y = {A} @ {B}; y.shape }}', [3.0, 5.0]),
    ("grad_dtype_f32_master", f'W = clone({B})\nfn lf(W) = autocast("bf16") {{ sum({A} @ W) }}\ngrad(lf)(W).dtype', "f32"),
    ("backward_outside_block", f'W = clone({B})\nW.requires_grad = true\nl = autocast("bf16") {{ sum(relu({A} @ W)) }}\nbackward(l)\nlist(l.dtype, W.grad.dtype)', ["f32", "f32"]),
]
for name, code, exp in cases:
    b.case(name, code, exp)
b.error("bad_dtype", 'autocast("i32") { 1 }', ["autocast", "bf16", "i32"], kind="ValueError")
b.error("bad_dtype_number", 'autocast(3) { 1 }', ["autocast"], kind="ValueError")
b.run()

# ------------------------------------------------------------------ values vs torch
b = Batch("amp.values")
a_np, b_np = randn(8, 16), randn(16, 12)
A, B = b.inp(a_np), b.inp(b_np)
with torch.autocast("cpu", dtype=bf16):
    ref_mm = T(a_np) @ T(b_np)
assert ref_mm.dtype == bf16
# torch 1.13's CPU bf16 GEMM loses precision (bf16 partial sums); ours is an
# f32 GEMM of the bf16-rounded inputs, rounded once: checked tightly below
b.case("matmul_vs_torch_autocast", f'autocast("bf16") {{ {A} @ {B} }}', ref_mm, rtol=2e-2, atol=8e-2)
b.case("matmul_bf16_rounded_once", f'autocast("bf16") {{ {A} @ {B} }}',
       (T(a_np).to(bf16).float() @ T(b_np).to(bf16).float()).to(bf16), rtol=4e-3, atol=1e-3)
ba_np = randn(3, 5, 7)
BA = b.inp(ba_np)
bb_np = randn(3, 7, 4)
BB = b.inp(bb_np)
with torch.autocast("cpu", dtype=bf16):
    ref_bmm = torch.matmul(T(ba_np), T(bb_np))
b.case("batched_matmul_vs_torch_autocast", f'autocast("bf16") {{ {BA} @ {BB} }}', ref_bmm, rtol=2e-2, atol=8e-2)
x4, w4, c4 = randn(2, 3, 6, 6), randn(4, 3, 3, 3), randn(4)
X4, W4, C4 = b.inp(x4), b.inp(w4), b.inp(c4)
with torch.autocast("cpu", dtype=bf16):
    ref_conv = F.conv2d(T(x4), T(w4), T(c4), padding=1)
assert ref_conv.dtype == bf16
b.case("conv2d_vs_torch_autocast", f'autocast("bf16") {{ conv2d({X4}, {W4}, {C4}, padding=1) }}', ref_conv, rtol=2e-2, atol=2e-2)
# f16: torch 1.13's CPU autocast has no f16; explicit casts (f16 matmul computed in f32, rounded once)
ref_mm16 = (T(a_np).half().float() @ T(b_np).half().float()).half()
b.case("matmul_f16_vs_explicit", f'autocast("f16") {{ {A} @ {B} }}', ref_mm16, rtol=2e-3, atol=2e-3)
# f32 ops on bf16 inputs: explicit upcasts
xb = tb(a_np)
b.case("softmax_bf16_in", f'autocast("bf16") {{ softmax({A}.to("bf16"), axis=-1) }}', torch.softmax(xb.float(), -1))
b.case("log_softmax_bf16_in", f'autocast("bf16") {{ log_softmax({A}.to("bf16"), axis=0) }}', torch.log_softmax(xb.float(), 0), rtol=1e-5, atol=1e-5)
b.case("sum_bf16_in", f'autocast("bf16") {{ sum({A}.to("bf16"), axis=1) }}', xb.float().sum(1), rtol=1e-5, atol=1e-5)
b.case("mean_bf16_in", f'autocast("bf16") {{ mean({A}.to("bf16")) }}', xb.float().mean(), rtol=1e-5, atol=1e-6)
b.case("cumsum_bf16_in", f'autocast("bf16") {{ cumsum({A}.to("bf16"), axis=1) }}', xb.float().cumsum(1), rtol=1e-5, atol=1e-5)
b.case("exp_bf16_in", f'autocast("bf16") {{ exp({A}.to("bf16")) }}', xb.float().exp())
b.case("log_bf16_in", f'autocast("bf16") {{ log(abs({A}.to("bf16")) + 1) }}', (xb.abs() + 1).float().log(), rtol=1e-5, atol=1e-6)
b.case("pow_bf16_in", f'autocast("bf16") {{ {A}.to("bf16") ** 3 }}', xb.float() ** 3, rtol=1e-5, atol=1e-5)
w_ln, b_ln = randn(16), randn(16)
WL, BL = b.inp(w_ln), b.inp(b_ln)
b.case("layer_norm_bf16_in_f32_weight", f'autocast("bf16") {{ layer_norm({A}.to("bf16"), {WL}, {BL}) }}',
       F.layer_norm(xb.float(), (16,), T(w_ln), T(b_ln)), rtol=1e-4, atol=1e-4)
tgt = rng.integers(0, 12, size=(8,)).astype(np.int64)
TG = b.inp(tgt)
# the whole head under autocast: logits bf16 (matmul), loss f32 from the upcast logits
logits_ref = T(a_np).to(bf16) @ T(b_np).to(bf16)
b.case("cross_entropy_of_bf16_logits", f'autocast("bf16") {{ cross_entropy({A} @ {B}, {TG}) }}',
       F.cross_entropy(logits_ref.float(), T(tgt)), rtol=1e-2, atol=1e-2)
b.case("mse_bf16_in", f'autocast("bf16") {{ mse_loss({A}.to("bf16"), zeros(8, 16)) }}',
       F.mse_loss(xb.float(), torch.zeros(8, 16)), rtol=1e-5, atol=1e-5)
b.case("promotion_bf16_plus_f32", f'autocast("bf16") {{ {A}.to("bf16") + {A} }}', xb.float() + T(a_np))
b.run()

# ------------------------------------------------------------------ MLP gradients vs torch with explicit casts
b = Batch("amp.mlp_grads")
D, H, C, N = 12, 24, 5, 16
x_np = randn(N, D)
p_np = {"w1": randn(H, D) * 0.3, "b1": randn(H) * 0.1, "w2": randn(C, H) * 0.3, "b2": randn(C) * 0.1}
y_np = rng.integers(0, C, size=(N,)).astype(np.int64)
X, Y = b.inp(x_np), b.inp(y_np)
P = {k: b.inp(v) for k, v in p_np.items()}
b.raw(f"P = {{w1: {P['w1']}, b1: {P['b1']}, w2: {P['w2']}, b2: {P['b2']}}}\n"
      f"fn mlp_loss(p) = autocast(\"bf16\") {{ cross_entropy(relu({X} @ p.w1.T + p.b1) @ p.w2.T + p.b2, {Y}) }}\n"
      "R0 = value_and_grad(mlp_loss)(P)")
tp = {k: T(v, requires_grad=True) for k, v in p_np.items()}
h = (T(x_np).to(bf16) @ tp["w1"].T.to(bf16)) + tp["b1"]          # bf16 @ bf16 -> bf16; + f32 -> f32
logits = (torch.relu(h).to(bf16) @ tp["w2"].T.to(bf16)) + tp["b2"]
loss = F.cross_entropy(logits.float(), T(y_np))
loss.backward()
b.case("loss", "R0[0]", loss.detach(), rtol=1e-2, atol=1e-3)
for k in p_np:
    b.case(f"grad_{k}", f"R0[1].{k}", tp[k].grad, rtol=3e-2, atol=3e-3)   # f32 grads for f32 params
b.case("grad_dtypes", "map(keys(R0[1]), fn(k) R0[1][k].dtype)", ["f32"] * 4)
b.run()

# ------------------------------------------------------------------ training under autocast
TRAIN = """
import nn
import optim
seed(3)
Xt = randn(256, 10)
Wt = randn(10, 4)
Yt = argmax(Xt @ Wt, axis=1)
fn train(mode, use_scaler) {
  seed(7)
  m = nn.mlp([10, 32, 4])
  opt = optim.adamw(m, lr=0.02, weight_decay=0)
  sc = optim.grad_scaler(init_scale=1024, growth_interval=20, enabled=use_scaler)
  skipped = 0
  fn lf(m) = if mode == "f32" { cross_entropy(m(Xt), Yt) } else { autocast(mode) { sc.scale(cross_entropy(m(Xt), Yt)) } }
  first = nil
  for step in 0..150 {
    r = value_and_grad(lf)(m)
    l = r[0].item() / sc.get_scale()
    if first == nil { first = l }
    if sc.step(opt, r[1]) { skipped += 1 }
  }
  final = cross_entropy(m(Xt), Yt).item()
  list(first, final, skipped, opt.state.t)
}
"""
b = Batch("amp.train")
b.raw(TRAIN)
b.raw('RF = train("f32", false)\nRB = train("bf16", false)\nRH = train("f16", true)')


def converges(got, ref_name):
    first, final, skipped, steps = got
    if not final < 0.35 * first:
        return f"{ref_name}: loss {first:.4f} -> {final:.4f} did not drop below 35%"
    return None


b.case("f32_baseline", "RF", lambda g: converges(g, "f32"))
b.case("bf16_trains", "RB", lambda g: converges(g, "bf16"))
b.case("bf16_like_f32", "abs(RB[1] - RF[1])", lambda g: None if g < 0.1 else f"final loss bf16 vs f32 differ by {g:.4f}")
b.case("f16_scaled_trains", "RH", lambda g: converges(g, "f16+scaler"))
b.case("f16_like_f32", "abs(RH[1] - RF[1])", lambda g: None if g < 0.1 else f"final loss f16 vs f32 differ by {g:.4f}")
b.case("f16_steps_counted", "RH[2] + RH[3]", 150.0)
b.run()

# ------------------------------------------------------------------ grad_scaler
SCALER = """
import nn
import optim
seed(11)
M = nn.linear(6, 3)
Xs = randn(5, 6)
fn scaled_loss(sc) = fn(m) sc.scale(sum(m(Xs) ** 2))
"""
b = Batch("amp.scaler")
b.raw(SCALER)
# an injected inf skips the step: parameters and optimizer state bit-identical, scale halved
b.case("inf_skips_step", """
opt = optim.adamw(M, lr=0.1)
sc = optim.grad_scaler(init_scale=256)
sc.step(opt, grad(scaled_loss(sc))(M))
w = clone(M.weight); bb = clone(M.bias); m1 = clone(opt.state.m.weight); v1 = clone(opt.state.v.bias); t = opt.state.t
g = grad(scaled_loss(sc))(M)
g.bias[1] = inf
skipped = sc.step(opt, g)
list(skipped, all(M.weight == w).item(), all(M.bias == bb).item(), all(opt.state.m.weight == m1).item(), all(opt.state.v.bias == v1).item(), opt.state.t == t, sc.state.scale, sc.state.growth_tracker)
""", [True, True, True, True, True, True, 128.0, 0.0])
b.case("nan_skips_step", """
opt = optim.sgd(M, lr=0.1)
sc = optim.grad_scaler(init_scale=4)
g = grad(scaled_loss(sc))(M)
g.weight[0, 0] = nan
w = clone(M.weight)
list(sc.step(opt, g), all(M.weight == w).item(), sc.state.scale)
""", [True, True, 2.0])
b.case("finite_step_unscales", """
opt = optim.sgd(M, lr=0.5)
sc = optim.grad_scaler(init_scale=1024)
g = grad(scaled_loss(sc))(M)
g_true = grad(fn(m) sum(m(Xs) ** 2))(M)
w0 = clone(M.weight)
skipped = sc.step(opt, g)
list(skipped, max(abs(g.weight - g_true.weight)).item() < 1e-4, max(abs(M.weight - (w0 - 0.5 * g_true.weight))).item() < 1e-4)
""", [False, True, True])
b.case("growth_after_interval", """
opt = optim.sgd(M, lr=0.0)
sc = optim.grad_scaler(init_scale=2, growth_factor=3, growth_interval=3)
out = list()
for i in 0..7 { sc.step(opt, grad(scaled_loss(sc))(M)); push(out, sc.state.scale) }
out
""", [2.0, 2.0, 6.0, 6.0, 6.0, 18.0, 18.0])
b.case("unscale_then_step", """
opt = optim.sgd(M, lr=0.0)
sc = optim.grad_scaler(init_scale=64)
g = grad(scaled_loss(sc))(M)
ok = sc.unscale(g)
n = clip_grad_norm(g, 1e9)
g2 = grad(fn(m) sum(m(Xs) ** 2))(M)
list(ok, abs(n - sqrt(sum(g2.weight ** 2) + sum(g2.bias ** 2)).item()) < 1e-3 * n, sc.step(opt, g), sc.state.growth_tracker)
""", [True, True, False, 1.0])
b.case("disabled_is_identity", """
opt = optim.sgd(M, lr=0.0)
sc = optim.grad_scaler(enabled=false)
list(sc.scale(tensor(3.0)).item(), sc.get_scale(), sc.step(opt, grad(scaled_loss(sc))(M)))
""", [3.0, 1.0, False])
ST_PATH = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"nabla_amp_{os.getpid()}.st")
b.case("state_checkpoint_roundtrip", """
opt = optim.sgd(M, lr=0.0)
sc = optim.grad_scaler(init_scale=512, growth_interval=4)
for i in 0..6 { sc.step(opt, grad(scaled_loss(sc))(M)) }
save(PATH, {scaler: sc.state, w: M.weight})
sc2 = optim.grad_scaler(init_scale=1, growth_interval=4)
nn.load_state(sc2.state, load(PATH).scaler)
list(sc2.state.scale, sc2.state.growth_tracker)
""".replace("PATH", '"' + ST_PATH + '"'), [1024.0, 2.0])
b.error("bad_backoff", "optim.grad_scaler(backoff_factor=2)", ["grad_scaler", "backoff_factor"])
b.error("unscale_twice", "sc = optim.grad_scaler()\ng = grad(scaled_loss(sc))(M)\nsc.unscale(g)\nsc.unscale(g)", ["unscale", "already"])


def torch_scale_sequence(pattern, init, growth, backoff, interval):
    """amp_update_scale_cuda_kernel (torch), in float32."""
    scale, tracker, out = np.float32(init), 0, []
    for found_inf in pattern:
        if found_inf:
            scale = np.float32(scale * np.float32(backoff))
            tracker = 0
        else:
            successful = tracker + 1
            if successful == interval:
                with np.errstate(over="ignore"):
                    new_scale = np.float32(scale * np.float32(growth))
                if np.isfinite(new_scale):
                    scale = new_scale
                tracker = 0
            else:
                tracker = successful
        out.append(float(scale))
    return out


pattern = [bool(v) for v in rng.random(40) < 0.2] + [False] * 12 + [True, True, False]
init, growth, backoff, interval = 2.0 ** 126, 2.0, 0.5, 3   # reaches the f32 ceiling: growth to inf is refused
pat_src = "list(" + ", ".join("true" if p else "false" for p in pattern) + ")"
b.case("scale_sequence_vs_torch", f"""
opt = optim.sgd(M, lr=0.0)
sc = optim.grad_scaler(init_scale={init!r}, growth_factor={growth}, backoff_factor={backoff}, growth_interval={interval})
out = list()
for bad in {pat_src} {{
  g = grad(fn(m) sum(m(Xs)))(M)
  if bad {{ g.weight[0, 1] = -inf }}
  skipped = sc.step(opt, g)
  if skipped != bad {{ error("skip flag wrong") }}
  push(out, sc.state.scale)
}}
out
""", torch_scale_sequence(pattern, init, growth, backoff, interval), rtol=0, atol=0)
b.run()
if os.path.exists(ST_PATH):
    os.remove(ST_PATH)

finish()
