#!/usr/bin/python3
"""test_emu_mixed_binary.py — mixed-dtype binaries on CUDA (issue 26 item 6):
an arithmetic op of an f32 tensor and an f16/bf16 one (either order) is one
kernel reading each operand in its stored dtype (cuda/elementwise.cu
binary_mixed; telem.c sends them uncast), with torch's promotion (f32 out), on
the emulated CUDA device against torch on fresh random inputs:

  values      add/sub/mul/div/maximum/minimum/pow/floordiv/mod, f32 with bf16
              and f16 on either side, sizes off the 4-wide vector path (odd
              tails), broadcasting, a non-contiguous operand, an operand at an
              unaligned offset: the exact f32 result of the cast then the op;
  gradients   of both operands (the 16-bit one gets a 16-bit gradient);
  counts      f32 + bf16 is one launch, no copy (no cast kernel).

The CPU keeps casting first: its results are compared against the same
references.  Run by tools/run-tests.sh with the release and the ASan build.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import emuutil  # noqa: E402

if emuutil.no_module("emu.mixed_binary"):
    sys.exit(0)
os.environ.update(emuutil.ENV)
os.environ["NABLA"] = emuutil.NABLA
sys.path.insert(0, os.path.join(emuutil.ROOT, "tests", "numerics"))
import harness  # noqa: E402
from harness import Batch, finish, rng, torch, np  # noqa: E402

TDT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
OPS = {"add": ("+", torch.add), "sub": ("-", torch.sub), "mul": ("*", torch.mul), "div": ("/", torch.div),
       "maximum": (None, torch.maximum), "minimum": (None, torch.minimum), "pow": (None, torch.pow),
       "floordiv": ("//", lambda a, b: torch.div(a, b, rounding_mode="floor")),
       "mod": ("%", torch.remainder)}


def rnd(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def held(a, dt):
    """the values an operand of dtype dt holds, as an f32 torch tensor"""
    return torch.tensor(a).to(TDT[dt]).float()


def expr(op, a, b):
    sym, _ = OPS[op]
    return f"({a} {sym} {b})" if sym else f"{op}({a}, {b})"


def cases(dev):
    harness.DEVICE = dev
    b = Batch("mixed_binary")
    # (tag, op, a shape, b shape, dtypes, layout of b)
    cfgs = [("add_f32_bf16", "add", (2, 13), (2, 13), ("f32", "bf16"), "plain"),
            ("add_bf16_f32", "add", (37,), (37,), ("bf16", "f32"), "plain"),
            ("sub_f32_f16", "sub", (3, 5, 7), (3, 5, 7), ("f32", "f16"), "plain"),
            ("sub_bf16_f32", "sub", (64,), (64,), ("bf16", "f32"), "plain"),
            ("mul_f16_f32_bcast", "mul", (4, 1), (1, 6), ("f16", "f32"), "plain"),
            ("div_f32_bf16_bcast", "div", (3, 8), (8,), ("f32", "bf16"), "plain"),
            ("max_f32_bf16", "maximum", (9, 3), (9, 3), ("f32", "bf16"), "plain"),
            ("min_bf16_f32", "minimum", (5,), (5,), ("bf16", "f32"), "plain"),
            ("pow_f32_bf16", "pow", (6,), (6,), ("f32", "bf16"), "positive"),
            ("floordiv_f32_bf16", "floordiv", (11,), (11,), ("f32", "bf16"), "plain"),
            ("mod_bf16_f32", "mod", (11,), (11,), ("bf16", "f32"), "plain"),
            ("add_f32_bf16_transposed", "add", (6, 5), (6, 5), ("f32", "bf16"), "transposed"),
            ("add_f32_bf16_offset", "add", (21,), (21,), ("f32", "bf16"), "offset")]
    for tag, op, sa, sb, (da, db), layout in cfgs:
        x, y = rnd(*sa), rnd(*sb)
        if layout == "positive":
            x = np.abs(x) + 0.5
        xe = f"{b.inp(x)}.to(\"{da}\")"
        if layout == "transposed":
            ye = f"{b.inp(np.ascontiguousarray(y.T))}.to(\"{db}\").T"
        elif layout == "offset":
            ye = f"{b.inp(np.concatenate([rnd(1), y]))}.to(\"{db}\")[1:]"
        else:
            ye = f"{b.inp(y)}.to(\"{db}\")"
        X, Y = held(x, da), held(y, db)
        want = OPS[op][1](X, Y)
        b.case(f"value_{tag}", expr(op, xe, ye), want, rtol=1e-6, atol=1e-6)
    # gradients of both operands: f32 for the f32 one, the 16-bit one's own dtype for it
    for tag, op, (da, db) in [("add", "add", ("f32", "bf16")), ("mul", "mul", ("bf16", "f32")), ("div", "div", ("f32", "f16"))]:
        x, y, r = rnd(4, 7), rnd(4, 7), rnd(4, 7)
        xe, ye, re_ = f"{b.inp(x)}.to(\"{da}\")", f"{b.inp(y)}.to(\"{db}\")", b.inp(r)
        X, Y = held(x, da).double().requires_grad_(), held(y, db).double().requires_grad_()
        (OPS[op][1](X, Y) * torch.tensor(r).double()).sum().backward()
        b.case(f"grad_{tag}", f"fn f(x, y) = sum({expr(op, 'x', 'y')} * {re_})\ngrad(f, argnums=list(0, 1))({xe}, {ye})",
               [X.grad.to(TDT[da]), Y.grad.to(TDT[db])], rtol=1e-2, atol=1e-2)
    b.run()


def counts():
    code = """
a = randn(3, 1000, device="cuda")
b = randn(3, 1000, device="cuda").to("bf16")
c = a + b
cuda.synchronize()
cuda.reset_stats()
c = a + b
d = b * a
st = cuda.stats()
print("mixed", st.launches, st.memcpy_d2d, c.dtype, d.dtype)
"""
    rc, so, se = emuutil.nabla(code, timeout=120)
    line = [ln for ln in so.splitlines() if ln.startswith("mixed ")]
    ok = rc == 0 and line and line[0].split()[1:] == ["2", "0", "f32", "f32"]
    emuutil.out("PASS" if ok else "FAIL", "mixed_binary.counts",
                "" if ok else f"want 2 launches, 0 copies, f32 results: rc={rc} {so[-300:]} {se[-600:]}")


if __name__ == "__main__":
    cases("cuda")
    cases("cpu")
    counts()
    finish()
    if emuutil.n_fail:
        sys.exit(1)
