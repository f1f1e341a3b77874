#!/usr/bin/python3
"""test_emu_linear.py — the CUDA linear (cuda/linear.cu: cuBLASLt with the
bias epilogue forward, the dX/dW GEMMs with the BGRADB bias gradient
backward), autocast's shadow weights (tensor/tshadow.h) and the fused
optimizers (cuda/optim.cu: AdamW/SGD writing the shadows, device step count,
cached chunk table), on the emulated CUDA device (NABLA_CUDA_EMULATE=force;
cuda/emu/cublas.cpp stands in for cuBLASLt) against torch on fresh random
inputs:

  linear      values and gradients of x, W, b for [B,T,K] and [M,K] inputs, no
              bias, f32/bf16/f16, sizes Lt takes (multiples of 16 bytes) and
              odd ones (the classic cublasGemmEx path), a non-contiguous x, a
              contiguous x at an unaligned offset, autocast("bf16") with f32
              weights (bf16 out, f32 dW/db straight from the GEMM);
  shadows     autocast training steps with AdamW: no weight cast after the
              first step (autocast_shadow_stats), the shadow equal to
              bf16(weight) after every step, a weight edited in place between
              steps (the next step sees the edit: against torch and against
              an uncached cast), a new tensor assigned in its place;
  adamw/sgd   several steps against torch.optim.AdamW / SGD (weight decay,
              momentum, nesterov), f32 and bf16 parameters (torch's f32
              formula, rounded once per step like the kernel), a parameter
              set that changes between steps (a replaced tensor, a second
              optimizer stepping in between), a restored state (the device
              step count re-seeded from the host).

Run by tools/run-tests.sh with the release build and again (NABLA_ASAN=1)
with the ASan build.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import emuutil  # noqa: E402

if emuutil.no_module("emu.linear"):
    sys.exit(0)
# the numerics harness, pointed at the emulated device
os.environ.update(emuutil.ENV)
os.environ["NUMERICS_DEVICE"] = "cuda"
os.environ["NABLA"] = emuutil.NABLA
sys.path.insert(0, os.path.join(emuutil.ROOT, "tests", "numerics"))
from harness import Batch, finish, rng, torch, np  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BF = torch.bfloat16
TDT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
# one rounding of the result (bf16: 8 bits, f16: 11 bits) over sums of a few dozen products
TOL = {"f32": dict(rtol=1e-5, atol=1e-5), "bf16": dict(rtol=2e-2, atol=5e-2), "f16": dict(rtol=4e-3, atol=1e-2)}


def rnd(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def rounded(a, dt):
    """a rounded to dtype dt, as float64 (the exact value the device holds)"""
    return torch.tensor(a).to(TDT[dt]).double()


def linear_cases():
    b = Batch("emu.linear")
    # (tag, x shape, N, K, bias, dtype, x layout)
    cfgs = [("lt_3d_f32", (2, 3, 32), 16, 32, True, "f32", "plain"),
            ("lt_2d_bf16", (6, 32), 24, 32, True, "bf16", "plain"),
            ("lt_nobias_f16", (5, 16), 8, 16, False, "f16", "plain"),
            ("lt_3d_bf16", (2, 4, 16), 40, 16, True, "bf16", "plain"),
            ("odd_3d_f32", (2, 5, 13), 7, 13, True, "f32", "plain"),
            ("odd_2d_bf16", (3, 13), 7, 13, True, "bf16", "plain"),
            ("odd_f16_nobias", (4, 9), 5, 9, False, "f16", "plain"),
            ("noncontig_x_bf16", (6, 16), 16, 16, True, "bf16", "transposed"),
            ("noncontig_x_f32_odd", (3, 2, 5), 3, 5, True, "f32", "transposed"),
            ("unaligned_offset_f32", (4, 16), 8, 16, True, "f32", "offset")]
    for tag, xs, n, k, bias, dt, layout in cfgs:
        x, w, bb, r = rnd(*xs), rnd(n, k), rnd(n), rnd(*(xs[:-1] + (n,)))
        we, be, re_ = b.inp(w), b.inp(bb), b.inp(r)
        if layout == "transposed":      # x as a permuted view of its reversed-axes copy: non-contiguous
            axes = list(range(len(xs)))[::-1]
            xe = f"permute({b.inp(np.ascontiguousarray(x.transpose(axes)))}.to(\"{dt}\"), {axes})"
        elif layout == "offset":        # contiguous, starting one element in: a pointer Lt must not get
            flat = np.concatenate([rnd(1), x.reshape(-1)])
            xe = f"reshape({b.inp(flat)}.to(\"{dt}\")[1:], {list(xs)})"
        else:
            xe = f"{b.inp(x)}.to(\"{dt}\")"
        wc, bc, rc = f"{we}.to(\"{dt}\")", f"{be}.to(\"{dt}\")", f"{re_}.to(\"{dt}\")"
        X, W, B, R = rounded(x, dt), rounded(w, dt), rounded(bb, dt), rounded(r, dt)
        b.case(f"value_{tag}", f"linear({xe}, {wc}{', ' + bc if bias else ''})",
               F.linear(X, W, B if bias else None).to(TDT[dt]), **TOL[dt])
        Xg, Wg, Bg = X.clone().requires_grad_(), W.clone().requires_grad_(), B.clone().requires_grad_()
        (F.linear(Xg, Wg, Bg if bias else None) * R).sum().backward()
        exp = [Xg.grad.to(TDT[dt]), Wg.grad.to(TDT[dt])] + ([Bg.grad.to(TDT[dt])] if bias else [])
        args = "x, w, bb" if bias else "x, w"
        b.case(f"grad_{tag}", f"fn f({args}) = sum(linear(x, w{', bb' if bias else ''}) * {rc})\n"
               f"grad(f, argnums=list({', '.join(str(i) for i in range(3 if bias else 2))}))({xe}, {wc}{', ' + bc if bias else ''})",
               exp, **TOL[dt])
    # autocast("bf16") over f32 x, W, b: bf16 out; gradients of the f32 inputs in f32
    for tag, xs, n, k in [("lt", (2, 3, 32), 48, 32), ("odd", (5, 11), 6, 11)]:
        x, w, bb, r = rnd(*xs), rnd(n, k), rnd(n), rnd(*(xs[:-1] + (n,)))
        xe, we, be, re_ = b.inp(x), b.inp(w), b.inp(bb), b.inp(r)
        X, W, B = rounded(x, "bf16"), rounded(w, "bf16"), rounded(bb, "bf16")
        G = rounded(r, "bf16")    # d(sum(y * r))/dy, cast to y's dtype by the engine
        b.case(f"autocast_value_{tag}", f'autocast("bf16") {{ linear({xe}, {we}, {be}) }}', F.linear(X, W, B).to(BF), **TOL["bf16"])
        Xg, Wg, Bg = X.clone().requires_grad_(), W.clone().requires_grad_(), B.clone().requires_grad_()
        (F.linear(Xg, Wg, Bg) * G).sum().backward()
        # dW and db are f32 straight from the GEMM; dX is bf16 cast to f32 (x's ToDtypeBackward)
        exp = [Xg.grad.to(BF).float(), Wg.grad.float(), Bg.grad.float()]
        b.case(f"autocast_grad_{tag}", f'fn f(x, w, bb) = autocast("bf16") {{ sum(linear(x, w, bb) * {re_}) }}\n'
               f"grad(f, argnums=list(0, 1, 2))({xe}, {we}, {be})", exp, rtol=2e-2, atol=5e-2)
    # errors keep their messages on the device
    b.error("shape_mismatch", f"linear(zeros(2, 3), zeros(4, 5))", ["linear", "do not match"])
    b.error("bias_shape", f"linear(zeros(2, 3), zeros(4, 3), zeros(5))", ["bias must have shape [4]"])
    b.run()


def torch_autocast_steps(x, w0, b0, r, lr, wd, steps, edit_at, edit_row_value, replace_at, w_new):
    """torch's run of the shadow test: autocast bf16 linear, AdamW; returns the outputs per step"""
    W = torch.tensor(w0).requires_grad_()
    B = torch.tensor(b0).requires_grad_()
    opt = torch.optim.AdamW([W, B], lr=lr, weight_decay=wd, foreach=False)
    X, R = torch.tensor(x), torch.tensor(r)
    ys = []
    for s in range(steps):
        if s == edit_at:
            with torch.no_grad():
                W[0] = edit_row_value
        if s == replace_at:
            with torch.no_grad():
                W.copy_(torch.tensor(w_new))
        Xb, Wb, Bb = X.to(BF).double(), W.to(BF).double(), B.to(BF).double()
        y = F.linear(Xb, Wb, Bb).to(BF)
        ys.append(y.float())
        # gradients with bf16 G and f32 accumulation (the device's dW GEMM)
        G = R.to(BF).double()
        gw = (G.reshape(-1, G.shape[-1]).T @ Xb.reshape(-1, Xb.shape[-1])).float()
        gb = G.reshape(-1, G.shape[-1]).sum(0).float()
        W.grad, B.grad = gw, gb
        opt.step()
    return ys


def shadow_cases():
    b = Batch("emu.shadow")
    b.raw("import optim")
    m, k, n, lr, wd, steps = 8, 32, 16, 1e-2, 0.1, 5
    x, w0, b0, r, w_new = rnd(2, m, k), rnd(n, k), rnd(n), rnd(2, m, n), rnd(n, k)
    edit_at, replace_at, edit_val = 2, 4, 3.0
    ys = torch_autocast_steps(x, w0, b0, r, lr, wd, steps, edit_at, edit_val, replace_at, w_new)
    xe, we, be, re_, wne = b.inp(x), b.inp(w0), b.inp(b0), b.inp(r), b.inp(w_new)
    prog = f"""
p = {{w: clone({we}), b: clone({be})}}
requires_grad(p)
opt = optim.adamw(p, lr={lr}, weight_decay={wd})
fn lossf(p, x, r) = autocast("bf16") {{ sum(linear(x, p.w, p.b) * r) }}
ys = list(); casts = list(); fresh = list()
for s in 0..{steps} {{
  if s == {edit_at} {{ no_grad {{ p.w[0] = {edit_val} }} }}
  if s == {replace_at} {{ p.w = clone({wne}); p.w.requires_grad = true }}
  c0 = autocast_shadow_stats().casts
  y = no_grad {{ autocast("bf16") {{ linear({xe}, p.w, p.b) }} }}
  # the uncached cast: what the shadow must equal
  y2 = no_grad {{ linear({xe}.to("bf16"), p.w.to("bf16"), p.b.to("bf16")) }}
  push(fresh, all(y == y2).item())
  push(ys, y.to("f32"))
  r = value_and_grad(lossf)(p, {xe}, {re_})
  opt.step(r[1])
  push(casts, autocast_shadow_stats().casts - c0)
}}
"""
    b.raw(prog)
    b.case("outputs_vs_torch", "ys", ys, rtol=2e-2, atol=6e-2)
    b.case("outputs_equal_uncached_cast", "fresh", [True] * steps)
    # step 0 casts w and b (their first use), every later step none, except
    # after the in-place edit (w again, b still fresh) and after w was replaced (a new tensor)
    exp_casts = [2 if s == 0 else 1 if s in (edit_at, replace_at) else 0 for s in range(steps)]
    b.case("casts_per_step", "casts", exp_casts, dtype=False)
    # the generic autocast cast (x @ w, w a [K, N] parameter) takes the shadow
    # too, and SGD keeps it fresh; the gradient reaches the f32 master
    k2, n2, lr2 = 16, 24, 1e-2
    x2, w2, r2 = rnd(3, k2), rnd(k2, n2), rnd(3, n2)
    W = torch.tensor(w2).requires_grad_()
    opt = torch.optim.SGD([W], lr=lr2, momentum=0.9, foreach=False)
    X2, G2 = torch.tensor(x2).to(BF).double(), torch.tensor(r2).to(BF).double()
    ys2, gs2 = [], []
    for _ in range(3):
        ys2.append((X2 @ W.detach().to(BF).double()).to(BF))
        W.grad = (X2.T @ G2).to(BF).float()       # bf16 matmul gradient, cast to the f32 master
        gs2.append(W.grad.clone())
        opt.step()
    x2e, w2e, r2e = b.inp(x2), b.inp(w2), b.inp(r2)
    b.raw(f"""
q = {{w: clone({w2e})}}
requires_grad(q)
o2 = optim.sgd(q, lr={lr2}, momentum=0.9)
fn lq(q, x, r) = autocast("bf16") {{ sum((x @ q.w) * r) }}
mys = list(); mgs = list(); mcasts = list(); mfresh = list()
for s in 0..3 {{
  c0 = autocast_shadow_stats().casts
  y = no_grad {{ autocast("bf16") {{ {x2e} @ q.w }} }}
  push(mfresh, all(y == no_grad {{ {x2e}.to("bf16") @ q.w.to("bf16") }}).item())
  push(mys, y)
  r = value_and_grad(lq)(q, {x2e}, {r2e})
  push(mgs, r[1].w)
  o2.step(r[1])
  push(mcasts, autocast_shadow_stats().casts - c0)
}}
""")
    b.case("matmul_outputs_vs_torch", "mys", ys2, rtol=2e-2, atol=6e-2)
    b.case("matmul_grads_vs_torch", "mgs", gs2, rtol=2e-2, atol=6e-2)
    b.case("matmul_outputs_equal_uncached_cast", "mfresh", [True] * 3)
    b.case("matmul_sgd_casts_per_step", "mcasts", [1, 0, 0], dtype=False)
    b.run()


def adam_ref(params, grads_per_step, lr, wd, b1, b2, eps, dt):
    """torch.optim.AdamW on f32 copies; for bf16 parameters, p, m and v are rounded to
    bf16 after every step (the kernel computes in f32 and rounds once per store)"""
    P = [torch.tensor(p).to(TDT[dt]).float().requires_grad_() for p in params]
    opt = torch.optim.AdamW(P, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
    out = []
    for gs in grads_per_step:
        for p, g in zip(P, gs):
            p.grad = torch.tensor(g).to(TDT[dt]).float() if g is not None else None
        opt.step()
        if dt != "f32":
            with torch.no_grad():
                for p in P:
                    p.copy_(p.to(TDT[dt]).float())
                    st = opt.state[p]
                    for key in ("exp_avg", "exp_avg_sq"):
                        st[key].copy_(st[key].to(TDT[dt]).float())
        out.append([p.detach().clone().to(TDT[dt]) for p in P])
    return out


# bf16 parameters: torch's f32 formula orders its operations differently
# (m.lerp_ vs b1 m + (1-b1) g), which now and then flips a rounding of m or v
# by one bf16 ulp (2^-8 relative); the next updates then move by ~lr * 2^-8 more
# or less (SGD's momentum carries it: up to 2 ulps).  A wrong formula is off by ~lr.
BF16_STEP_TOL = dict(rtol=2e-2, atol=3e-4)


def optim_cases():
    b = Batch("emu.optim")
    b.raw("import optim")
    lr, wd, b1, b2, eps = 1e-2, 0.1, 0.9, 0.99, 1e-6
    for dt in ("f32", "bf16"):
        shapes = [(70000,), (3, 5), (7,)]     # the first spans two 65536-element chunks
        params = [rnd(*s) for s in shapes]
        nsteps = 4
        grads = [[rnd(*s) for s in shapes] for _ in range(nsteps)]
        ref = adam_ref(params, grads, lr, wd, b1, b2, eps, dt)
        pe = [b.inp(p) for p in params]
        ge = [[b.inp(g) for g in gs] for gs in grads]
        gl = "list(" + ", ".join("list(" + ", ".join(f'{g}.to("{dt}")' for g in gs) + ")" for gs in ge) + ")"
        b.raw(f"""
P_{dt} = list({", ".join(f'clone({p}.to("{dt}"))' for p in pe)})
opt_{dt} = optim.adamw(P_{dt}, lr={lr}, beta1={b1}, beta2={b2}, eps={eps}, weight_decay={wd})
G_{dt} = {gl}
hist_{dt} = list()
for s in 0..{nsteps} {{ opt_{dt}.step(G_{dt}[s]); push(hist_{dt}, map(P_{dt}, clone)) }}
""")
        tol = dict(rtol=1e-5, atol=1e-6) if dt == "f32" else BF16_STEP_TOL
        b.case(f"adamw_{dt}_steps", f"hist_{dt}", ref, **tol)
    # a parameter set that changes: q[1] replaced by a new tensor after step 2 (a
    # new table), a second optimizer stepping in between, then a state restored
    # to after step 2 and step 3 taken again (the device step count re-seeded)
    shapes = [(40,), (5, 6)]
    q0, c0 = [rnd(*s) for s in shapes], rnd(9)
    qnew = rnd(5, 6)
    gq = [[rnd(*s) for s in shapes] for _ in range(4)]
    gc = [rnd(9) for _ in range(4)]
    # torch: AdamW over q; "replacing" q[1] is copying into it (its state stays, as ours does)
    Q = [torch.tensor(a).requires_grad_() for a in q0]
    C = torch.tensor(c0).requires_grad_()
    oq = torch.optim.AdamW(Q, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
    oc = torch.optim.AdamW([C], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
    refq, refc = [], []
    for s in range(4):
        if s == 2:
            with torch.no_grad():
                Q[1].copy_(torch.tensor(qnew))
        for p, g in zip(Q, gq[s]):
            p.grad = torch.tensor(g)
        oq.step()
        C.grad = torch.tensor(gc[s])
        oc.step()
        refq.append([p.detach().clone() for p in Q])
        refc.append(C.detach().clone())
    qe, ce, qne = [b.inp(a) for a in q0], b.inp(c0), b.inp(qnew)
    gqe = "list(" + ", ".join("list(" + ", ".join(b.inp(g) for g in gs) + ")" for gs in gq) + ")"
    gce = "list(" + ", ".join(b.inp(g) for g in gc) + ")"
    b.raw(f"""
Q = {{a: clone({qe[0]}), b: clone({qe[1]})}}
Cp = clone({ce})
oq = optim.adamw(Q, lr={lr}, beta1={b1}, beta2={b2}, eps={eps}, weight_decay={wd})
oc = optim.adamw(Cp, lr={lr}, beta1={b1}, beta2={b2}, eps={eps}, weight_decay={wd})
GQ = {gqe}
GC = {gce}
hq = list(); hc = list(); saved = nil
for s in 0..4 {{
  if s == 2 {{
    Q.b = clone({qne})
    saved = {{a: clone(Q.a), b: clone(Q.b), m: map_tensors(oq.state.m, clone), v: map_tensors(oq.state.v, clone), t: oq.state.t}}
  }}
  oq.step({{a: GQ[s][0], b: GQ[s][1]}})
  oc.step(GC[s])
  push(hq, list(clone(Q.a), clone(Q.b))); push(hc, clone(Cp))
}}
# back to the state after step 2, step 3 again: must equal the first step 3 exactly
copy_(Q.a, saved.a); copy_(Q.b, saved.b)
copy_(oq.state.m.a, saved.m.a); copy_(oq.state.m.b, saved.m.b); copy_(oq.state.v.a, saved.v.a); copy_(oq.state.v.b, saved.v.b)
oq.state.t = saved.t
oq.step({{a: GQ[2][0], b: GQ[2][1]}})
again = list(clone(Q.a), clone(Q.b))
""")
    b.case("adamw_changing_set", "hq", refq, rtol=1e-5, atol=1e-6)
    b.case("adamw_second_optimizer", "hc", refc, rtol=1e-5, atol=1e-6)
    b.case("adamw_restored_state_reseeds_step", "list(all(again[0] == hq[2][0]).item(), all(again[1] == hq[2][1]).item())", [True, True])
    # SGD: momentum, nesterov, weight decay, f32 and bf16
    for dt, nest in (("f32", True), ("f32", False), ("bf16", True)):
        shapes = [(70000,), (4, 3)]
        params = [rnd(*s) for s in shapes]
        grads = [[rnd(*s) for s in shapes] for _ in range(3)]
        P = [torch.tensor(p).to(TDT[dt]).float().requires_grad_() for p in params]
        opt = torch.optim.SGD(P, lr=lr, momentum=0.9, nesterov=nest, weight_decay=wd, foreach=False)
        ref = []
        for gs in grads:
            for p, g in zip(P, gs):
                p.grad = torch.tensor(g).to(TDT[dt]).float()
            opt.step()
            if dt != "f32":
                with torch.no_grad():
                    for p in P:
                        p.copy_(p.to(TDT[dt]).float())
                        opt.state[p]["momentum_buffer"].copy_(opt.state[p]["momentum_buffer"].to(TDT[dt]).float())
            ref.append([p.detach().clone().to(TDT[dt]) for p in P])
        tag = f"sgd_{dt}{'_nesterov' if nest else ''}"
        pe = [b.inp(p) for p in params]
        gl = "list(" + ", ".join("list(" + ", ".join(f'{b.inp(g)}.to("{dt}")' for g in gs) + ")" for gs in grads) + ")"
        b.raw(f"""
S_{tag} = list({", ".join(f'clone({p}.to("{dt}"))' for p in pe)})
o_{tag} = optim.sgd(S_{tag}, lr={lr}, momentum=0.9, nesterov={'true' if nest else 'false'}, weight_decay={wd})
GS_{tag} = {gl}
h_{tag} = list()
for s in 0..3 {{ o_{tag}.step(GS_{tag}[s]); push(h_{tag}, map(S_{tag}, clone)) }}
""")
        # momentum sums the gradients (|buf| up to ~3, one bf16 ulp 2^-8 |buf|) and
        # carries a flipped rounding for ~1/(1-momentum) steps: lr * 2^-8 * 3 * 10
        tol = dict(rtol=1e-5, atol=1e-6) if dt == "f32" else dict(rtol=2e-2, atol=1.5e-3)
        b.case(tag, f"h_{tag}", ref, **tol)
    z, zb = 'zeros(3)', 'zeros(3, dtype="bf16")'
    b.error("adamw_mixed_dtypes", f"adamw_update([{z}, {zb}], [{z}, {zb}], [{z}, {zb}], [{z}, {zb}], 0.1, 0.9, 0.999, 1e-8, 0, 1)",
            ["adamw_update", "parameter 1 is bf16", "parameter 0 is f32"])
    b.error("adamw_state_dtype", f"adamw_update([{zb}], [{zb}], [{z}], [{z}], 0.1, 0.9, 0.999, 1e-8, 0, 1)",
            ["adamw_update", "optimizer state of parameter 0", "bf16"])
    b.error("adamw_int_param", 'x = zeros(3, dtype="i32")\nadamw_update([x], [x], [x], [x], 0.1, 0.9, 0.999, 1e-8, 0, 1)',
            ["adamw_update", "parameter 0", "f32, f64, bf16 or f16"])
    b.run()


linear_cases()
shadow_cases()
optim_cases()
finish()
