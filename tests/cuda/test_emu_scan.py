#!/usr/bin/python3
"""test_emu_scan.py — the op "scan" (tensor/index/scan.c; cuda/scan.cu on the
GPU): cumsum, cumprod, logcumsumexp, cummax, cummin on the emulated CUDA device
against torch on fresh random inputs, and the CPU's loop kernel against the
same references.

Values: every axis of a 3-D tensor whose scanned axis spans several
256-element tiles (the block-per-row kernel and its carry), short rows and
many strided columns (the thread-per-row kernel), non-contiguous views
(transposed, stepped), f32/f64 and f16/bf16 (accumulating in f32), integer
inputs (cumprod in i64, cummax/cummin keeping the dtype), NaN and ±inf
(NaN sticks; logcumsumexp of equal infinities), ties (cummax/cummin return
the LAST index of the extreme, as torch), 0-d and empty inputs.
cumsum: every dtype (integers and bool exact in i64, as torch; f16/bf16
accumulating in f32), every axis and negative axes, views, a -0 row (+0, as
torch), long rows (the tree scan within a tile: torch's tolerance), empty.
Gradients (f64, loss = sum(f(x) * W)): cumprod through one and two zeros per
row and along a middle axis, cumsum (the reverse scan), logcumsumexp with gradients of both signs,
cummax/cummin scattered to their indices.
Launches: cuda.stats() shows one "scan" launch per forward call.

Runs on the emulated device (2 SMs) and on the CPU; again under ASan
(NABLA_ASAN=1).  Run: /usr/bin/python3 tests/cuda/test_emu_scan.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import emuutil  # noqa: E402

if emuutil.no_module("emu_scan"):
    sys.exit(0)

DEV = os.environ.get("SCAN_DEVICE", "cuda")
os.environ.setdefault("NABLA", emuutil.NABLA)
if DEV == "cuda":
    os.environ.update(NUMERICS_DEVICE="cuda", NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2")
    os.environ.pop("NABLA_CUDA_DISABLE", None)
else:
    os.environ["NUMERICS_DEVICE"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "numerics"))
from harness import Batch, T, finish, rng, torch, np, run_nabla, check, report_fail  # noqa: E402

F64 = dict(rtol=1e-9, atol=1e-10)
F32 = dict(rtol=3e-5, atol=3e-5)
LOWP = dict(rtol=2e-2, atol=2e-2)
SUF = emuutil.SUFFIX.replace(" ", "")


def r(*shape, dt=np.float64):
    return rng.standard_normal(shape).astype(dt)


def value_cases(b):
    for dt, tol, tn in ((np.float32, F32, "f32"), (np.float64, F64, "f64")):
        x = r(5, 300, 3, dt=dt) * 0.2 + 1.0          # products stay finite over 300 terms
        X = b.inp(x)
        for ax in (0, 1, 2, -1):
            b.case(f"cumprod_ax{ax}_{tn}", f"cumprod({X}, {ax})", torch.cumprod(T(x), ax), **tol)
            b.case(f"logcumsumexp_ax{ax}_{tn}", f"logcumsumexp({X} * 20, {ax})", torch.logcumsumexp(T(x) * 20, ax), **tol)
            for f in ("cummax", "cummin"):
                b.case(f"{f}_ax{ax}_{tn}", f"{f}({X}, {ax})", list(getattr(torch, f)(T(x), ax)), **tol)
        # one long row over many tiles, reversed-order data
        L = r(2, 1100, dt=dt)
        b.case(f"logcumsumexp_long_{tn}", f"logcumsumexp({b.inp(L)}, 1)", torch.logcumsumexp(T(L), 1), **tol)
        b.case(f"cummax_long_{tn}", f"cummax({b.inp(L)}, 1)", list(torch.cummax(T(L), 1)), **tol)
        # many strided columns with rows past 64 (the thread-per-row kernel)
        C = r(70, 4100, dt=dt) * 0.05 + 1
        b.case(f"cumprod_cols_{tn}", f"cumprod({b.inp(C)}, 0)", torch.cumprod(T(C), 0), **tol)
        b.case(f"cummin_cols_{tn}", f"cummin({b.inp(C)}, 0)", list(torch.cummin(T(C), 0)), **tol)
        # non-contiguous views
        v = r(40, 300, dt=dt)
        V = b.inp(v)
        b.case(f"cumprod_T_{tn}", f"cumprod(transpose({V}, 0, 1), 1)", torch.cumprod(T(v).t(), 1), **tol)
        b.case(f"cummax_step_{tn}", f'cummax({V}[::3, 1::2], 0)', list(torch.cummax(T(v)[::3, 1::2], 0)), **tol)
        b.case(f"logcumsumexp_T_{tn}", f"logcumsumexp(transpose({V}, 0, 1), 0)", torch.logcumsumexp(T(v).t(), 0), **tol)
        # NaN and infinities
        s = r(6, 280, dt=dt)
        s[0, 5] = np.nan; s[1, 270] = np.nan; s[2, 3] = np.inf; s[2, 9] = -np.inf; s[3, :] = -np.inf
        s[4, 100:] = np.inf; s[5, 0] = np.nan
        S = b.inp(s)
        for f in ("cummax", "cummin"):
            b.case(f"{f}_nan_inf_{tn}", f"{f}({S}, 1)", list(getattr(torch, f)(T(s), 1)), **tol)
        b.case(f"cumprod_nan_inf_{tn}", f"cumprod({S}, 1)", torch.cumprod(T(s), 1), **tol)
        b.case(f"logcumsumexp_nan_inf_{tn}", f"logcumsumexp({S}, 1)", torch.logcumsumexp(T(s), 1), **tol)
        # ties: the last index of the extreme
        t = np.round(r(4, 300, dt=dt), 0)
        b.case(f"cummax_ties_{tn}", f"cummax({b.inp(t)}, 1)", list(torch.cummax(T(t), 1)), **tol)
        b.case(f"cummin_ties_{tn}", f"cummin({b.inp(t)}, 1)", list(torch.cummin(T(t), 1)), **tol)
        # 0-d and empty
        b.case(f"cumprod_0d_{tn}", f"cumprod({b.inp(np.array(1.5, dt))}, 0)", torch.cumprod(T(np.array(1.5, dt)), 0))
        b.case(f"cummax_0d_{tn}", f"cummax({b.inp(np.array(-2.5, dt))}, -1)", list(torch.cummax(T(np.array(-2.5, dt)), -1)))
        b.case(f"logcumsumexp_empty_{tn}", f"logcumsumexp({b.inp(np.zeros((3, 0), dt))}, 1)", torch.logcumsumexp(T(np.zeros((3, 0), dt)), 1))
    # integers
    i = rng.integers(-3, 4, size=(5, 260)).astype(np.int32)
    b.case("cumprod_i32", f"cumprod({b.inp(i)}, 1)", torch.cumprod(T(i), 1))
    b.case("cummax_i32", f"cummax({b.inp(i)}, 1)", list(torch.cummax(T(i), 1)))
    b.case("cummin_i64_T", f"cummin(transpose({b.inp(i.astype(np.int64))}, 0, 1), 0)", list(torch.cummin(T(i.astype(np.int64)).t(), 0)))
    # f16 / bf16: f32 accumulation, one rounding at the store (torch's CPU does the same)
    h = (r(3, 300) * 0.1 + 1).astype(np.float32)
    for nd, td in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        xh = T(h).to(td)
        H = f'to({b.inp(h)}, "{nd}")'
        b.case(f"cumprod_{nd}", f"cumprod({H}, 1)", torch.cumprod(xh.float(), 1).to(td), **LOWP)
        b.case(f"logcumsumexp_{nd}", f"logcumsumexp({H}, 1)", torch.logcumsumexp(xh.float(), 1).to(td), **LOWP)
        b.case(f"cummax_{nd}", f"cummax({H}, 1)", list(torch.cummax(xh.float(), 1)), rtol=0, atol=0, dtype=False)
    cumsum_cases(b)
    # errors
    b.error("logcumsumexp_int", f"logcumsumexp({b.inp(i)}, 0)", ["logcumsumexp", "floating"])
    b.error("cummax_bool", f"cummax({b.inp(i > 0)}, 0)", ["cummax", "bool"])
    b.error("cumprod_axis", f"cumprod({b.inp(i)}, 2)", ["cumprod", "out of range"])


def cumsum_cases(b):
    """cumsum, the SUM kind of the scan op: values vs torch for every dtype, axis and layout"""
    for dt, tol, tn in ((np.float32, F32, "f32"), (np.float64, F64, "f64")):
        x = r(4, 300, 3, dt=dt)
        X = b.inp(x)
        for ax in (0, 1, 2, -1, -2, -3):
            b.case(f"cumsum_ax{ax}_{tn}", f"cumsum({X}, {ax})", torch.cumsum(T(x), ax), **tol)
        L = r(2, 1100, dt=dt)                      # many tiles per row, and their carry
        b.case(f"cumsum_long_{tn}", f"cumsum({b.inp(L)}, 1)", torch.cumsum(T(L), 1), **tol)
        C = r(70, 4100, dt=dt)                     # many strided columns, rows past 64
        b.case(f"cumsum_cols_{tn}", f"cumsum({b.inp(C)}, 0)", torch.cumsum(T(C), 0), **tol)
        v = r(40, 300, dt=dt)
        V = b.inp(v)
        b.case(f"cumsum_T_{tn}", f"cumsum(transpose({V}, 0, 1), 1)", torch.cumsum(T(v).t(), 1), **tol)
        b.case(f"cumsum_step_{tn}", f"cumsum({V}[::3, 1::2], 0)", torch.cumsum(T(v)[::3, 1::2], 0), **tol)
        s = r(3, 280, dt=dt)
        s[0, 5] = np.nan; s[1, 3] = np.inf; s[2, 9] = -np.inf; s[2, 200] = np.inf
        b.case(f"cumsum_nan_inf_{tn}", f"cumsum({b.inp(s)}, 1)", torch.cumsum(T(s), 1), **tol)
        # a row of -0: +0 (1 / y = +inf), as torch's sum from +0; both kernels (short and long rows)
        z = -np.zeros((2, 300), dt)
        b.case(f"cumsum_neg_zero_{tn}", f"list(1 / cumsum({b.inp(z)}, 1), 1 / cumsum({b.inp(z[:, :9])}, 1))",
               [1 / torch.cumsum(T(z), 1), 1 / torch.cumsum(T(z[:, :9]), 1)])
        b.case(f"cumsum_0d_{tn}", f"cumsum({b.inp(np.array(1.5, dt))}, 0)", torch.cumsum(T(np.array(1.5, dt)), 0))
        b.case(f"cumsum_0d_neg_axis_{tn}", f"cumsum({b.inp(np.array(1.5, dt))}, -1)", torch.cumsum(T(np.array(1.5, dt)), -1))
        b.case(f"cumsum_empty_{tn}", f"cumsum({b.inp(np.zeros((3, 0), dt))}, 1)", torch.cumsum(T(np.zeros((3, 0), dt)), 1))
        b.case(f"cumsum_empty_ax0_{tn}", f"cumsum({b.inp(np.zeros((0, 4), dt))}, -2)", torch.cumsum(T(np.zeros((0, 4), dt)), -2))
    # integers and bool: exact, in i64 (torch's result dtype); sums past 2^31 on long rows
    i = rng.integers(-5, 6, size=(5, 700)).astype(np.int32)
    b.case("cumsum_i32", f"cumsum({b.inp(i)}, 1)", torch.cumsum(T(i), 1), rtol=0, atol=0)
    big = rng.integers(2**40, 2**41, size=(3, 600)).astype(np.int64)
    b.case("cumsum_i64_big", f"cumsum({b.inp(big)}, 1)", torch.cumsum(T(big), 1), rtol=0, atol=0)
    b.case("cumsum_i64_T", f"cumsum(transpose({b.inp(big)}, 0, 1), 0)", torch.cumsum(T(big).t(), 0), rtol=0, atol=0)
    u = rng.integers(0, 256, size=(4, 300)).astype(np.uint8)
    b.case("cumsum_u8", f"cumsum({b.inp(u)}, -1)", torch.cumsum(T(u), -1), rtol=0, atol=0)
    bl = rng.random((6, 280)) < 0.5
    b.case("cumsum_bool", f"cumsum({b.inp(bl)}, 1)", torch.cumsum(T(bl), 1), rtol=0, atol=0)
    b.case("cumsum_bool_ax0", f"cumsum({b.inp(bl)}, 0)", torch.cumsum(T(bl), 0), rtol=0, atol=0)
    b.case("cumsum_i32_empty", f"cumsum({b.inp(np.zeros((0, 3), np.int32))}, 0)", torch.cumsum(T(np.zeros((0, 3), np.int32)), 0))
    # f16 / bf16 keep their dtype, accumulate in f32 and round once per output (torch 1.13's CPU has no f16
    # cumsum: the reference is the f32 sum rounded)
    h = (r(3, 300) * 0.1).astype(np.float32)
    for nd, td in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        xh = T(h).to(td)
        b.case(f"cumsum_{nd}", f'cumsum(to({b.inp(h)}, "{nd}"), 1)', torch.cumsum(xh.float(), 1).to(td), **LOWP)
    b.error("cumsum_axis", f"cumsum({b.inp(i)}, 2)", ["cumsum", "out of range"])
    b.error("cumsum_axis_neg", f"cumsum({b.inp(i)}, -3)", ["cumsum", "-3"])


def gcase(b, name, nb_expr, torch_fn, x):
    xt = T(x.copy(), requires_grad=True)
    o = torch_fn(xt)
    W = rng.standard_normal(tuple(o.shape))
    (o * T(W)).sum().backward()
    code = (f"f = fn(p0) {{\n{nb_expr}\n}}\n"
            f"list(f({b.inp(x)}), grad(fn(p0) sum(f(p0) * {b.inp(W)}))({b.inp(x)}))")
    b.case(name, code, [o.detach(), xt.grad], **F64)


def grad_cases(b):
    x = r(6, 300)
    x[0, 7] = 0.0                   # one zero
    x[1, 3] = 0.0; x[1, 290] = 0.0  # two zeros: nothing after the first gets a gradient
    x[2, 0] = 0.0                   # a zero first
    x[3, 299] = 0.0                 # a zero last
    x[4, 10] = 0.0; x[4, 11] = 0.0  # adjacent zeros
    gcase(b, "grad_cumprod_zeros", "cumprod(p0 * 0.3 + 0, 1)", lambda a: torch.cumprod(a * 0.3, 1), x)
    m = r(3, 7, 4)
    m[1, 2, 3] = 0.0; m[2, 0, 0] = 0.0; m[2, 5, 0] = 0.0
    gcase(b, "grad_cumprod_mid_axis", "cumprod(p0, 1)", lambda a: torch.cumprod(a, 1), m)
    gcase(b, "grad_cumprod_T", "cumprod(transpose(p0, 0, 1), 0)", lambda a: torch.cumprod(a.t(), 0), r(5, 9))
    gcase(b, "grad_cumsum", "cumsum(p0, 1)", lambda a: torch.cumsum(a, 1), r(4, 300))
    gcase(b, "grad_cumsum_ax0_T", "cumsum(transpose(p0, 0, 2), -3)", lambda a: torch.cumsum(a.transpose(0, 2), -3), r(3, 5, 70))
    gcase(b, "grad_cumsum_0d", "cumsum(p0 * 2, 0)", lambda a: torch.cumsum(a * 2, 0), np.array(0.7))
    gcase(b, "grad_logcumsumexp", "logcumsumexp(p0 * 5, 1)", lambda a: torch.logcumsumexp(a * 5, 1), r(4, 300))
    gcase(b, "grad_logcumsumexp_ax0", "logcumsumexp(p0, 0)", lambda a: torch.logcumsumexp(a, 0), r(9, 3, 2))
    t = np.round(r(5, 270), 0)
    gcase(b, "grad_cummax_ties", "cummax(p0, 1)[0]", lambda a: torch.cummax(a, 1).values, t)
    gcase(b, "grad_cummin_ax0", "cummin(p0, 0)[0]", lambda a: torch.cummin(a, 0).values, r(70, 3))


def launch_counts():
    """one "scan" launch per forward call on the device (and a few per backward)"""
    code = """set_default_device("cuda")
x = randn([4, 300, 3])
cuda.synchronize()
n = []
for f in [fn(t) cumsum(t, 1), fn(t) cumprod(t, 1), fn(t) logcumsumexp(t, 1), fn(t) cummax(t, 1), fn(t) cummin(t, 0), fn(t) cumprod(t[:, ::2, :], -1)] {
  cuda.reset_stats()
  y = f(x)
  s = cuda.stats()
  push(n, if has(s.by_op, "scan") { s.by_op["scan"] } else { 0 })
}
print("scanlaunches", n)
"""
    rc, so, se = run_nabla(code, timeout=300)
    line = next((ln for ln in so.splitlines() if ln.startswith("scanlaunches")), None)
    if rc != 0 or line is None:
        report_fail(f"emu_scan.launches{SUF}", f"rc {rc}: {se[-400:]} {so[-200:]}")
        return
    check(f"emu_scan.one_launch_per_scan{SUF}", line.split(None, 1)[1].replace(" ", "") == "[1,1,1,1,1,1]", line)


def main():
    b = Batch(f"emu_scan{SUF}" if DEV == "cuda" else f"scan{SUF}")
    value_cases(b)
    b.run()
    b = Batch(f"emu_scan_grad{SUF}" if DEV == "cuda" else f"scan_grad{SUF}")
    grad_cases(b)
    b.run()
    if DEV == "cuda":
        launch_counts()
        # the same cases on the CPU's loop kernel (a process of its own: the harness picks its device at import)
        import subprocess
        p = subprocess.run([sys.executable, os.path.abspath(__file__)], env=dict(os.environ, SCAN_DEVICE="cpu"),
                           capture_output=True, text=True, timeout=900)
        sys.stdout.write(p.stdout)
        check(f"scan.cpu_run{SUF}", p.returncode == 0 and "FAIL:" not in p.stdout, p.stderr[-400:])
    finish()


if __name__ == "__main__":
    main()
