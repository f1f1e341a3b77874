#!/usr/bin/python3
"""test_emu_layer_norm_lowp.py — layer norm writing a 16-bit output from an f32
(or 16-bit) input with f32 statistics (issue 26 item 8): layer_norm(...,
dtype=) and add_layer_norm(..., dtype=), one kernel each way (cuda/nn.cu
aln_fwd / aln_bwd_*, tensor/nn/norm.c's CPU loops), the backward reading the
16-bit gradient as stored.  nn.transformer_block passes autocast_dtype(), so
under autocast the bf16 linears after its norms read them with no cast.

On the emulated CUDA device and on the CPU, against torch on fresh random data:
  values      f32 x -> bf16/f16 y, bf16 x -> bf16 y, odd widths (1, 37, 129,
              300: off the block size), a transposed (non-contiguous) x, no
              weight/bias; add_layer_norm f32 + bf16 -> [f32 sum, bf16 y];
              reference: torch's layer norm in f64, rounded to the output dtype
              (one rounding step of tolerance);
  gradients   dx, dweight, dbias (and dr for add_layer_norm, and for a plain
              f32 + bf16 add before a plain norm) against f64 torch fed the
              same 16-bit upstream gradient, the sum's other consumers in
              every order;
  errors      an integer or unknown output dtype, a wrong weight shape;
  counts      (cuda) layer_norm f32 -> bf16 is one launch and no copy; its
              backward with dweight/dbias three launches, no cast kernel; with
              x + r (f32 + bf16) before it, r's bf16 gradient with no cast.
Run by tools/run-tests.sh with the release build and again (NABLA_ASAN=1) with
the ASan build.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import emuutil  # noqa: E402

if emuutil.no_module("emu.layer_norm_lowp"):
    sys.exit(0)
os.environ.update(emuutil.ENV)
os.environ["NABLA"] = emuutil.NABLA
sys.path.insert(0, os.path.join(emuutil.ROOT, "tests", "numerics"))
import harness  # noqa: E402
from harness import Batch, finish, rng, torch, np  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TDT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
EPS = 1e-5


def rnd(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def held(a, dt):
    """the values a tensor of dtype dt holds, as f64"""
    return torch.tensor(a).to(TDT[dt]).double()


def values(b):
    # (tag, x shape, x dtype, y dtype, layout, affine)
    cfgs = [("f32_bf16", (3, 37), "f32", "bf16", "plain", True),
            ("f32_f16", (2, 5, 129), "f32", "f16", "plain", True),
            ("bf16_bf16", (4, 300), "bf16", "bf16", "plain", True),
            ("f32_bf16_width1", (6, 1), "f32", "bf16", "plain", True),
            ("f32_bf16_transposed", (7, 33), "f32", "bf16", "transposed", True),
            ("f32_bf16_no_affine", (5, 64), "f32", "bf16", "plain", False),
            ("f32_f32", (3, 65), "f32", "f32", "plain", True)]
    for tag, shape, xd, yd, layout, affine in cfgs:
        x = rnd(*shape) * 3 + 1
        d = shape[-1]
        w, bb = rnd(d), rnd(d)
        if layout == "transposed":
            xe = f"{b.inp(np.ascontiguousarray(x.swapaxes(-1, -2)))}.to(\"{xd}\").T"
        else:
            xe = f"{b.inp(x)}.to(\"{xd}\")"
        X = held(x, xd)
        if affine:
            code = f"layer_norm({xe}, {b.inp(w)}, {b.inp(bb)}, {EPS}, \"{yd}\")"
            want = F.layer_norm(X, (d,), torch.tensor(w).double(), torch.tensor(bb).double(), EPS)
        else:
            code = f"layer_norm({xe}, nil, nil, {EPS}, \"{yd}\")"
            want = F.layer_norm(X, (d,), None, None, EPS)
        b.case(f"value_{tag}", code, want.to(TDT[yd]), rtol=1e-2, atol=2e-2 if yd != "f32" else 1e-5)
    # add_layer_norm: f32 residual + bf16 branch -> [f32 sum, bf16 normalised]
    for tag, shape, rd, yd in [("f32_bf16_bf16", (3, 130), "bf16", "bf16"), ("f32_f32_bf16", (2, 3, 40), "f32", "bf16"),
                               ("f32_f16_f16", (5, 17), "f16", "f16")]:
        x, r = rnd(*shape), rnd(*shape)
        d = shape[-1]
        w, bb = rnd(d), rnd(d)
        S = held(x, "f32") + held(r, rd)
        S32 = S.float().double()   # the sum as stored (f32)
        want = F.layer_norm(S32, (d,), torch.tensor(w).double(), torch.tensor(bb).double(), EPS)
        b.case(f"add_value_{tag}",
               f"add_layer_norm({b.inp(x)}, {b.inp(r)}.to(\"{rd}\"), {b.inp(w)}, {b.inp(bb)}, {EPS}, \"{yd}\")",
               [S.float(), want.to(TDT[yd])], rtol=1e-2, atol=2e-2)


def grads(b):
    for tag, shape, xd, yd in [("f32_bf16", (6, 45), "f32", "bf16"), ("bf16_bf16", (3, 2, 72), "bf16", "bf16"),
                               ("f32_f16", (9, 129), "f32", "f16")]:
        x = rnd(*shape)
        d = shape[-1]
        w, bb, gr = rnd(d), rnd(d), rnd(*shape)
        xe, we, be, ge = f"{b.inp(x)}.to(\"{xd}\")", b.inp(w), b.inp(bb), b.inp(gr)
        X = held(x, xd).requires_grad_()
        W, B = torch.tensor(w).double().requires_grad_(), torch.tensor(bb).double().requires_grad_()
        G = held(gr, yd)   # the upstream gradient reaches the norm in y's dtype
        (F.layer_norm(X, (d,), W, B, EPS) * G).sum().backward()
        b.case(f"grad_{tag}",
               f"fn f(x, w, b) = sum(layer_norm(x, w, b, {EPS}, \"{yd}\") * {ge}.to(\"{yd}\"))\n"
               f"grad(f, argnums=list(0, 1, 2))({xe}, {we}, {be})",
               [X.grad.to(TDT[xd]), W.grad.float(), B.grad.float()], rtol=2e-2, atol=2e-2)
    # add_layer_norm: gradients of x (f32), r (bf16), w, b through the bf16 y and the f32 sum;
    # the sum's other consumer before the norm, after it, absent, and on both sides (the
    # norm's kernel writes r's bf16 gradient only when its ds is s's whole gradient)
    x, r = rnd(4, 96), rnd(4, 96)
    w, bb, gy, gs, gs2 = rnd(96), rnd(96), rnd(4, 96), rnd(4, 96), rnd(4, 96)
    ye, se, s2e = f"sum(h[1] * {b.inp(gy)}.to(\"bf16\"))", f"sum(h[0] * {b.inp(gs)})", f"sum(h[0] * {b.inp(gs2)})"
    xe, re_, we, be = b.inp(x), f"{b.inp(r)}.to(\"bf16\")", b.inp(w), b.inp(bb)
    # and the same through a plain residual add s = x + r (f32 + bf16, the GPT block's MLP
    # residual) before a plain norm: the norm's backward writes r's bf16 gradient in its
    # kernel only when its ds is s's whole gradient (nt_node_offer_half_grad), else casts.
    # One torch reference per consumer order serves both forms.
    forms = [("add_grad_f32_bf16", f"h = add_layer_norm(x, r, w, b, {EPS}, \"bf16\")"),
             ("residual_add_grad_f32_bf16", f"s = x + r\n  h = list(s, layer_norm(s, w, b, {EPS}, \"bf16\"))")]
    for tag, body, uses in [("sum_after", f"{ye} + {se}", (1, 0)), ("sum_before", f"{se} + {ye}", (1, 0)),
                            ("no_sum", ye, (0, 0)), ("sum_both_sides", f"{se} + {ye} + {s2e}", (1, 1))]:
        X, Rr = held(x, "f32").requires_grad_(), held(r, "bf16").requires_grad_()
        W, B = torch.tensor(w).double().requires_grad_(), torch.tensor(bb).double().requires_grad_()
        S = X + Rr
        lt = (F.layer_norm(S, (96,), W, B, EPS) * held(gy, "bf16")).sum()
        lt = lt + uses[0] * (S * held(gs, "f32")).sum() + uses[1] * (S * held(gs2, "f32")).sum()
        lt.backward()
        want = [X.grad.float(), Rr.grad.to(torch.bfloat16), W.grad.float(), B.grad.float()]
        for prefix, h in forms:
            b.case(f"{prefix}_{tag}",
                   f"fn f(x, r, w, b) {{ {h}\n  {body} }}\n"
                   f"grad(f, argnums=list(0, 1, 2, 3))({xe}, {re_}, {we}, {be})",
                   want, rtol=2e-2, atol=3e-2)
    # the norm's backward takes the gradient its input already holds from
    # another consumer (the residual stream's): both orders of the two terms,
    # and two norms of one input, against torch
    a = rnd(5, 48)
    w, bb, g1, g2, hh = rnd(48), rnd(48), rnd(5, 48), rnd(5, 48), rnd(5, 48)
    ae, we, be = b.inp(a), b.inp(w), b.inp(bb)
    g1e, g2e, he = b.inp(g1), b.inp(g2), b.inp(hh)
    ln = f'layer_norm(x, w, b, {EPS}, "bf16")'
    for tag, body in [("residual_after", f"sum({ln} * {g1e}.to(\"bf16\")) + sum(x * {he})"),
                      ("residual_before", f"sum(x * {he}) + sum({ln} * {g1e}.to(\"bf16\"))"),
                      ("two_norms", f"sum({ln} * {g1e}.to(\"bf16\")) + sum(layer_norm(x, w, nil, {EPS}, \"bf16\") * {g2e}.to(\"bf16\")) + sum(x * {he})")]:
        A = torch.tensor(a).double().requires_grad_()
        W, B = torch.tensor(w).double().requires_grad_(), torch.tensor(bb).double().requires_grad_()
        X = A * 2
        lt = (F.layer_norm(X, (48,), W, B, EPS) * held(g1, "bf16")).sum() + (X * torch.tensor(hh).double()).sum()
        if tag == "two_norms":
            lt = lt + (F.layer_norm(X, (48,), W, None, EPS) * held(g2, "bf16")).sum()
        lt.backward()
        b.case(f"grad_{tag}", f"fn f(a, w, b) {{ x = a * 2\n  {body} }}\ngrad(f, argnums=list(0, 1, 2))({ae}, {we}, {be})",
               [A.grad.float(), W.grad.float(), B.grad.float()], rtol=2e-2, atol=3e-2)


def errors(b):
    x = b.inp(rnd(3, 8))
    b.error("err_int_dtype", f"layer_norm({x}, nil, nil, 1e-5, \"i32\")", ["layer_norm", "float", "i32"])
    b.error("err_unknown_dtype", f"layer_norm({x}, nil, nil, 1e-5, \"bf17\")", ["layer_norm", "bf17"])
    b.error("err_weight_shape", f"layer_norm({x}, ones(7), nil, 1e-5, \"bf16\")", ["layer_norm", "weight", "[8]"])
    b.error("err_add_int_dtype", f"add_layer_norm({x}, {x}, nil, nil, 1e-5, \"i64\")", ["add_layer_norm", "float"])
    b.error("err_int_input", "layer_norm(ones(3, 4, dtype=\"i32\"), nil, nil, 1e-5, \"bf16\")", ["layer_norm"])


def cases(dev):
    harness.DEVICE = dev
    b = Batch("layer_norm_lowp")
    values(b)
    grads(b)
    errors(b)
    b.run()


def counts():
    code = """
x = randn(6, 300, device="cuda")
w = randn(300, device="cuda")
bb = randn(300, device="cuda")
fn f(x, w, bb) = sum(layer_norm(x, w, bb, 1e-5, "bf16").to("f32"))
y = layer_norm(x, w, bb, 1e-5, "bf16")
cuda.synchronize()
cuda.reset_stats()
y = layer_norm(x, w, bb, 1e-5, "bf16")
st = cuda.stats()
print("fwd", st.launches + st.gemms, st.memcpy_d2d, y.dtype, join(keys(st.by_op), ","))
g = grad(f, argnums=list(0, 1, 2))(x, w, bb)
cuda.synchronize()
cuda.reset_stats()
g = grad(f, argnums=list(0, 1, 2))(x, w, bb)
st = cuda.stats()
print("bwd", st.by_op["add_layer_norm_backward"], st.memcpy_d2d, join(map(keys(st.by_op), fn(k) "{k}:{st.by_op[k]}"), ","))
r = randn(6, 300, device="cuda").to("bf16")
gy = randn(6, 300, device="cuda").to("bf16")
fn h(x, r, w, bb) = sum(layer_norm(x + r, w, bb, 1e-5, "bf16") * gy)
g = grad(h, argnums=list(0, 1))(x, r, w, bb)
cuda.synchronize()
cuda.reset_stats()
g = grad(h, argnums=list(0, 1))(x, r, w, bb)
st = cuda.stats()
print("res", g[1].dtype, st.memcpy_d2d, join(map(keys(st.by_op), fn(k) "{k}:{st.by_op[k]}"), ","))
"""
    rc, so, se = emuutil.nabla(code, timeout=300)
    fwd = [ln.split() for ln in so.splitlines() if ln.startswith("fwd ")]
    bwd = [ln.split() for ln in so.splitlines() if ln.startswith("bwd ")]
    ok = rc == 0 and fwd and fwd[0][1:4] == ["1", "0", "bf16"]
    emuutil.out("PASS" if ok else "FAIL", "layer_norm_lowp.counts_forward",
                "" if ok else f"want 1 launch, 0 copies, a bf16 y: rc={rc} {so[-300:]} {se[-600:]}")
    # the backward: one row kernel for dx, partial column sums + one pass for dw/db; no cast of g:
    # the only "copy" kernels (casts count as copy) are f's own .to("f32") and its backward
    ok = rc == 0 and bwd and bwd[0][1:3] == ["3", "0"] and "copy:2" in bwd[0][3].split(",")
    emuutil.out("PASS" if ok else "FAIL", "layer_norm_lowp.counts_backward",
                "" if ok else f"want 3 add_layer_norm_backward launches, no copy, no cast: rc={rc} {so[-400:]} {se[-600:]}")
    # x + r (f32 + bf16) before the norm: r's bf16 gradient comes from the norm's kernel, no cast
    res = [ln.split() for ln in so.splitlines() if ln.startswith("res ")]
    # (casts count as "copy" kernels; everything here stays bf16 or f32 as it is made)
    ok = rc == 0 and res and res[0][1:3] == ["bf16", "0"] and "copy:" not in res[0][3] and "add_layer_norm_backward:1" in res[0][3]
    emuutil.out("PASS" if ok else "FAIL", "layer_norm_lowp.counts_residual_add_backward",
                "" if ok else f"want r's bf16 gradient with no cast (copy kernel) and no copy: rc={rc} {so[-400:]} {se[-600:]}")


if __name__ == "__main__":
    cases("cuda")
    cases("cpu")
    counts()
    finish()
    if emuutil.n_fail:
        sys.exit(1)
