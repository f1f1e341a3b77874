#!/usr/bin/python3
"""fft (tensor/fft/, lang/lib/ltfft.c) and complex tensors (tensor/complex.c)
vs torch.fft on fresh random inputs: every transform in f32/f64 (c64/c128),
odd, even and prime lengths, n padding and truncation, every norm, dims,
batched, non-contiguous views, empty and size-1 edges; gradients vs torch in
f64 (loss = sum(view_as_real(f(x)) * W), complex inputs built as
complex(p0, p1) so d/dp0 + i d/dp1 is torch's complex gradient); the
complex ops (complex, real, imag, abs, angle, conj, polar, + - * / with real
and complex operands, broadcasting, sum, mean, printing) and the errors.

Without NUMERICS_DEVICE the suite runs again with every input on the
emulated CUDA device (NABLA_CUDA_EMULATE=force), when its module is built;
there the transforms are cuda/fft.cu's over the cuFFT stand-in, and
device_path checks that every transform kind ran on them with no byte
crossing to the host; device_layouts that strided rows reach cuFFT without
a copy (its advanced layout) where one batch stride describes them;
device_graphs that compiled steps replay transforms and that a plan made
during a capture ends it (the step runs eagerly, with the reason).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_fft.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np, DEVICE, report_fail, run_nabla, check, emulated_rerun  # noqa: E402

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=2e-4, atol=2e-4)
TOLS = {np.float32: F32, np.float64: F64}
NORMS = ["backward", "ortho", "forward"]


def r(*shape, dt=np.float64):
    return rng.standard_normal(shape).astype(dt)


def cz(*shape, dt=np.float64):
    """random complex array of part dtype dt, as [..., 2] real pairs"""
    return np.stack([r(*shape, dt=dt), r(*shape, dt=dt)], -1)


def zin(b, pairs):
    return f"view_as_complex({b.inp(pairs)})"


def tz(pairs):
    return torch.view_as_complex(T(pairs).contiguous())


def vr(t):
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


def tol_of(dt, n=1):
    t = TOLS[dt]
    k = max(1.0, np.log2(max(n, 2)))
    return dict(rtol=t["rtol"] * k, atol=t["atol"] * k)


def nbv(x):
    return "nil" if x is None else (f'"{x}"' if isinstance(x, str) else str(x).replace("(", "[").replace(")", "]").replace(",]", "]"))


# ------------------------------------------------------------------ values
def values(b, full=True):
    dts = (np.float32, np.float64)
    lengths = [1, 2, 5, 8, 7, 13, 16, 30, 97] if full else [1, 6, 7]
    for dt in dts:
        tn = "f32" if dt == np.float32 else "f64"
        for L in lengths:
            tol = tol_of(dt, L)
            Z = cz(3, L, dt=dt)
            X = r(3, L, dt=dt)
            for norm in (NORMS if full or L == 7 else ["backward"]):
                for n in ([None, L + 3, max(1, L - 1)] if full else [None, L + 2]):
                    kw = dict(norm=norm) if n is None else dict(n=n, norm=norm)
                    a = f"n={nbv(n)}, norm={nbv(norm)}"
                    nm = f"{tn}_L{L}_n{n}_{norm}"
                    b.case(f"fft_{nm}", f"view_as_real(fft.fft({zin(b, Z)}, {a}))", vr(torch.fft.fft(tz(Z), **kw)), **tol)
                    b.case(f"ifft_{nm}", f"view_as_real(fft.ifft({zin(b, Z)}, {a}))", vr(torch.fft.ifft(tz(Z), **kw)), **tol)
                    b.case(f"rfft_{nm}", f"view_as_real(fft.rfft({b.inp(X)}, {a}))", vr(torch.fft.rfft(T(X), **kw)), **tol)
                    b.case(f"ihfft_{nm}", f"view_as_real(fft.ihfft({b.inp(X)}, {a}))", vr(torch.fft.ihfft(T(X), **kw)), **tol)
                    if n is not None or L > 1:
                        b.case(f"irfft_{nm}", f"fft.irfft({zin(b, Z)}, {a})", torch.fft.irfft(tz(Z), **kw), **tol)
                        b.case(f"hfft_{nm}", f"fft.hfft({zin(b, Z)}, {a})", torch.fft.hfft(tz(Z), **kw), **tol)
                # a real input to fft/ifft is promoted (c64 / c128)
            b.case(f"fft_real_input_{tn}_L{L}", f"view_as_real(fft.fft({b.inp(X)}))", vr(torch.fft.fft(T(X))), **tol)
        # dims, batching, non-contiguous views
        tol = tol_of(dt, 16)
        Z = cz(4, 5, 6, dt=dt)
        X = r(4, 5, 6, dt=dt)
        for dim in (0, 1, -1, -3):
            b.case(f"fft_dim{dim}_{tn}", f"view_as_real(fft.fft({zin(b, Z)}, dim={dim}))", vr(torch.fft.fft(tz(Z), dim=dim)), **tol)
            b.case(f"rfft_dim{dim}_{tn}", f"view_as_real(fft.rfft({b.inp(X)}, dim={dim}))", vr(torch.fft.rfft(T(X), dim=dim)), **tol)
            b.case(f"irfft_dim{dim}_{tn}", f"fft.irfft({zin(b, Z)}, n=7, dim={dim})", torch.fft.irfft(tz(Z), n=7, dim=dim), **tol)
        b.case(f"rfft_transposed_{tn}", f"view_as_real(fft.rfft(transpose({b.inp(X)}, 0, 2), dim=1))",
               vr(torch.fft.rfft(T(X).transpose(0, 2), dim=1)), **tol)
        b.case(f"fft_strided_{tn}", f"view_as_real(fft.fft(transpose({zin(b, Z)}, 0, 1)[\"...\", 0:6:2]))",
               vr(torch.fft.fft(tz(Z).transpose(0, 1)[..., 0:6:2])), **tol)
        b.case(f"fft_of_sliced_complex_{tn}", f"z = {zin(b, Z)}\nview_as_real(fft.ifft(z[1:3, \"...\"], dim=0))",
               vr(torch.fft.ifft(tz(Z)[1:3], dim=0)), **tol)
        # several axes
        for s, dims in [(None, None), ((3, 8), None), (None, (0, 2)), ((7, 4), (2, 0)), ((5,), (1,)), (None, (-1,))]:
            kw = {}
            if s is not None:
                kw["s"] = s
            if dims is not None:
                kw["dim"] = dims
            a = f"s={nbv(s)}, dim={nbv(dims)}"
            nm = f"{tn}_s{'x'.join(map(str, s)) if s else 'nil'}_d{'_'.join(map(str, dims)) if dims else 'nil'}"
            for norm in NORMS:
                kn = dict(kw, norm=norm)
                b.case(f"fftn_{nm}_{norm}", f"view_as_real(fft.fftn({zin(b, Z)}, {a}, norm=\"{norm}\"))", vr(torch.fft.fftn(tz(Z), **kn)), **tol)
            b.case(f"ifftn_{nm}", f"view_as_real(fft.ifftn({zin(b, Z)}, {a}))", vr(torch.fft.ifftn(tz(Z), **kw)), **tol)
            b.case(f"rfftn_{nm}", f"view_as_real(fft.rfftn({b.inp(X)}, {a}))", vr(torch.fft.rfftn(T(X), **kw)), **tol)
            b.case(f"irfftn_{nm}", f"fft.irfftn({zin(b, Z)}, {a})", torch.fft.irfftn(tz(Z), **kw), **tol)
        b.case(f"fft2_{tn}", f"view_as_real(fft.fft2({zin(b, Z)}))", vr(torch.fft.fft2(tz(Z))), **tol)
        b.case(f"ifft2_{tn}", f"view_as_real(fft.ifft2({zin(b, Z)}, s=[4, 9]))", vr(torch.fft.ifft2(tz(Z), s=(4, 9))), **tol)
        b.case(f"rfft2_{tn}", f"view_as_real(fft.rfft2({b.inp(X)}, norm=\"ortho\"))", vr(torch.fft.rfft2(T(X), norm="ortho")), **tol)
        b.case(f"irfft2_{tn}", f"fft.irfft2({zin(b, Z)}, s=[5, 9])", torch.fft.irfft2(tz(Z), s=(5, 9)), **tol)
        b.case(f"roundtrip_{tn}", f"x = {b.inp(X)}\nfft.irfftn(fft.rfftn(x), s=[4, 5, 6]) - x", np.zeros_like(X), **tol)
    # the input of a c2r transform is the caller's: cuFFT may overwrite a C2R
    # input (the emulated stand-in does), so the kernel must transform a copy
    for dt in dts:
        Z = cz(3, 9, dt=dt)
        tn = "f32" if dt == np.float32 else "f64"
        b.case(f"irfft_keeps_input_{tn}", f"z = {zin(b, Z)}\ny = fft.irfft(z, n=16)\nh = fft.hfft(z)\nlist(view_as_real(z), y)",
               [vr(tz(Z)), torch.fft.irfft(tz(Z), n=16)], **tol_of(dt, 16))
    # edges: empty batches, size-1 axes
    E = r(0, 5)
    b.case("rfft_empty_batch", f"view_as_real(fft.rfft({b.inp(E)}))", vr(torch.fft.rfft(T(E))))
    b.case("fft_empty_batch", f"view_as_real(fft.fft({b.inp(E)}))", vr(torch.fft.fft(T(E))))
    E2 = r(3, 0)
    b.case("fft_empty_axis_padded", f"view_as_real(fft.fft({b.inp(E2)}, n=4))", vr(torch.fft.fft(T(E2), n=4)))
    O = r(1, 1)
    b.case("fftn_size1", f"view_as_real(fft.fftn({b.inp(O)}))", vr(torch.fft.fftn(T(O))))
    b.case("rfft_int_input", "view_as_real(fft.rfft(tensor([1, 2, 3, 4, 5])))", vr(torch.fft.rfft(torch.tensor([1, 2, 3, 4, 5.0]))), **F32)
    # helpers
    for n in (0, 1, 4, 7):
        for d in (1.0, 0.25):
            b.case(f"fftfreq_{n}_{d}", f"fft.fftfreq({n}, d={d})", torch.fft.fftfreq(n, d=d))
            b.case(f"rfftfreq_{n}_{d}", f"fft.rfftfreq({n}, d={d}, dtype=\"f64\")", torch.fft.rfftfreq(n, d=d, dtype=torch.float64), **F64)
    S = r(4, 5, 7)
    for dims in (None, 0, (1, 2), -1):
        a = nbv(dims)
        kw = {} if dims is None else dict(dim=dims)
        b.case(f"fftshift_{a}", f"fft.fftshift({b.inp(S)}, dim={a})", torch.fft.fftshift(T(S), **kw), **F64)
        b.case(f"ifftshift_{a}", f"fft.ifftshift({b.inp(S)}, dim={a})", torch.fft.ifftshift(T(S), **kw), **F64)
    ZS = cz(5, 4)
    b.case("fftshift_complex", f"view_as_real(fft.fftshift({zin(b, ZS)}))", vr(torch.fft.fftshift(tz(ZS))), **F64)


# ------------------------------------------------------------------ complex ops
def complex_ops(b):
    for dt in (np.float32, np.float64):
        tn = "f32" if dt == np.float32 else "f64"
        tol = TOLS[dt]
        A, B = cz(3, 4, dt=dt), cz(4, dt=dt)
        R = r(3, 1, dt=dt)
        Re, Im = r(2, 3, dt=dt), r(3, dt=dt)
        za, zb = zin(b, A), zin(b, B)
        ta, tb = tz(A), tz(B)
        b.case(f"complex_{tn}", f"view_as_real(complex({b.inp(Re)}, {b.inp(Im)}))", vr(torch.complex(T(Re), T(Im).expand(2, 3))), **tol)
        b.case(f"real_imag_{tn}", f"list(real({za}), imag({za}))", [ta.real, ta.imag], **tol)
        b.case(f"abs_{tn}", f"abs({za})", ta.abs(), **tol)
        b.case(f"angle_{tn}", f"angle({za})", ta.angle(), **tol)
        b.case(f"angle_real_{tn}", f"angle({b.inp(R)})", torch.angle(T(R)), **tol)
        b.case(f"conj_{tn}", f"view_as_real(conj({za}))", vr(ta.conj()), **tol)
        b.case(f"polar_{tn}", f"view_as_real(polar({b.inp(np.abs(Re))}, {b.inp(Re * 2)}))", vr(torch.polar(T(np.abs(Re)), T(Re * 2))), **tol)
        for op in ["+", "-", "*", "/"]:
            pyop = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": lambda x, y: x / y}[op]
            b.case(f"cc{op}_{tn}", f"view_as_real({za} {op} {zb})", vr(pyop(ta, tb)), **tol)
            b.case(f"cr{op}_{tn}", f"view_as_real({za} {op} {b.inp(R)})", vr(pyop(ta, T(R))), **tol)
            b.case(f"rc{op}_{tn}", f"view_as_real({b.inp(R)} {op} {zb})", vr(pyop(T(R), tb)), **tol)
            b.case(f"cs{op}_{tn}", f"view_as_real({za} {op} 2.5)", vr(pyop(ta, 2.5)), **tol)
            b.case(f"sc{op}_{tn}", f"view_as_real(1.5 {op} {za})", vr(pyop(1.5, ta)), **tol)
        b.case(f"neg_{tn}", f"view_as_real(-{za})", vr(-ta), **tol)
        b.case(f"sum_{tn}", f"list(view_as_real(sum({za})), view_as_real(sum({za}, 0)), view_as_real(sum({za}, -1, keepdim=true)))",
               [vr(ta.sum()), vr(ta.sum(0)), vr(ta.sum(-1, keepdim=True))], **tol)
        b.case(f"mean_{tn}", f"list(view_as_real(mean({za})), view_as_real(mean({za}, 1)))", [vr(ta.mean()), vr(ta.mean(1))], **tol)
        b.case(f"dtype_{tn}", f"{za}.dtype", "c64" if dt == np.float32 else "c128")
        b.case(f"view_roundtrip_{tn}", f"view_as_real({za})", T(A), **tol)
    # promotion: c64 with f64 -> c128, c64 with c128 -> c128
    A32, A64 = cz(3, dt=np.float32), cz(3)
    X64 = r(3)
    b.case("promote_c64_f64", f"view_as_real({zin(b, A32)} * {b.inp(X64)})", vr(tz(A32) * T(X64)), **F32)
    b.case("promote_c64_c128", f"view_as_real({zin(b, A32)} + {zin(b, A64)})", vr(tz(A32) + tz(A64)), **F32)
    b.case("to_c128", f"view_as_real(to({zin(b, A32)}, \"c128\"))", vr(tz(A32).to(torch.complex128)), **F32)
    b.case("real_to_c64", f"view_as_real(to({b.inp(X64)}, \"c64\"))", vr(T(X64).to(torch.complex64)), **F32)


def errors(b):
    Z = cz(4)
    X = r(4)
    z = zin(b, Z)
    b.error("rfft_complex", f"fft.rfft({z})", ["rfft", "real input", "c128"])
    b.error("fft_n0", f"fft.fft({b.inp(X)}, n=0)", ["invalid number of data points (0)"])
    b.error("irfft_n_from_size1", f"fft.irfft({zin(b, cz(1))})", ["irfft", "invalid number of data points (0)"])
    b.error("fft_norm", f"fft.fft({b.inp(X)}, norm=\"sideways\")", ["norm must be", "sideways"])
    b.error("fft_dim", f"fft.fft({b.inp(X)}, dim=2)", ["dim 2 is out of range"])
    b.error("fftn_repeated", f"fft.fftn({b.inp(r(3, 3))}, dim=[0, 0])", ["repeated"])
    b.error("fftn_s_dim", f"fft.fftn({b.inp(r(3, 3))}, s=[2], dim=[0, 1])", ["same length"])
    b.error("fft_scalar", "fft.fft(tensor(1.0))", ["at least one dimension"])
    b.error("fftfreq_d0", "fft.fftfreq(4, d=0)", ["nonzero"])
    b.error("exp_complex", f"exp({z})", ["exp", "not supported for complex"])
    b.error("matmul_complex", f"{z} @ {z}", ["c128"])
    b.error("pow_complex", f"{z} ** 2", ["not supported for complex"])
    b.error("to_real", f"to({z}, \"f64\")", ["imaginary part"])
    b.error("item_complex", f"item({z}[0])", ["not a real number"])
    b.error("backward_complex_root", f"x = {b.inp(X)}\ngrad(fn(p) sum(fft.fft(p)))(x)", ["real scalar outputs"])
    b.error("imag_real", f"imag({b.inp(X)})", ["imag", "real tensors"])
    b.error("complex_mixed", f"complex({b.inp(X)}, to({b.inp(X)}, \"f32\"))", ["both f32 or both f64"])
    b.error("view_as_complex_shape", f"view_as_complex({b.inp(r(3, 3))})", ["last axis of size 2"])
    b.error("max_complex", f"max({z})", ["not supported for complex"])
    b.error("compare_complex", f"{z} < {z}", ["not supported for complex"])


# ------------------------------------------------------------------ gradients (f64, torch's convention)
def gcase(b, name, nb_expr, torch_fn, real_inputs, complex_inputs, tol=dict(rtol=1e-8, atol=1e-9)):
    """nb_expr over x0.. (real) and z0.. (complex = complex(p, q)); loss = sum(view_as_real(out) * W)."""
    tin = [T(a.copy(), requires_grad=True) for a in real_inputs]
    zr = [T(a[..., 0].copy(), requires_grad=True) for a in complex_inputs]
    zi = [T(a[..., 1].copy(), requires_grad=True) for a in complex_inputs]
    zs = [torch.complex(p, q) for p, q in zip(zr, zi)]
    out = torch_fn(*tin, *zs)
    W = rng.standard_normal(tuple(vr(out).shape))
    (vr(out) * T(W)).sum().backward()
    nr, nz = len(real_inputs), len(complex_inputs)
    params = [f"x{i}" for i in range(nr)] + [f"p{i}" for i in range(nz)] + [f"q{i}" for i in range(nz)]
    pre = "".join(f"z{i} = complex(p{i}, q{i})\n" for i in range(nz))
    body = f"o = {nb_expr}\nif o.dtype == \"c64\" or o.dtype == \"c128\" {{ o = view_as_real(o) }}\no"
    args = [b.inp(a) for a in real_inputs] + [b.inp(a[..., 0].copy()) for a in complex_inputs] + [b.inp(a[..., 1].copy()) for a in complex_inputs]
    ps, ag = ", ".join(params), ", ".join(args)
    code = (f"f = fn({ps}) {{\n{pre}{body}\n}}\n"
            f"list(f({ag}), grad(fn({ps}) sum(f({ps}) * {b.inp(W)}), argnums=list({', '.join(str(i) for i in range(len(params)))}))({ag}))")
    b.case(name, code, [vr(out).detach(), [t.grad for t in tin] + [t.grad for t in zr] + [t.grad for t in zi]], **tol)


def gradients(b, full=True):
    for L in ([1, 5, 8, 7] if full else [6, 7]):
        for norm in (NORMS if full else ["ortho"]):
            for n in ([None, L + 2, max(1, L - 2)] if full else [None, L + 1]):
                kw = dict(norm=norm) if n is None else dict(n=n, norm=norm)
                a = f"n={nbv(n)}, norm={nbv(norm)}"
                nm = f"L{L}_n{n}_{norm}"
                Z, X = cz(2, L), r(2, L)
                gcase(b, f"grad_fft_{nm}", f"fft.fft(z0, {a})", lambda z: torch.fft.fft(z, **kw), [], [Z])
                gcase(b, f"grad_ifft_{nm}", f"fft.ifft(z0, {a})", lambda z: torch.fft.ifft(z, **kw), [], [Z])
                gcase(b, f"grad_rfft_{nm}", f"fft.rfft(x0, {a})", lambda x: torch.fft.rfft(x, **kw), [X], [])
                gcase(b, f"grad_ihfft_{nm}", f"fft.ihfft(x0, {a})", lambda x: torch.fft.ihfft(x, **kw), [X], [])
                if n is not None or L > 1:
                    gcase(b, f"grad_irfft_{nm}", f"fft.irfft(z0, {a})", lambda z: torch.fft.irfft(z, **kw), [], [Z])
                    gcase(b, f"grad_hfft_{nm}", f"fft.hfft(z0, {a})", lambda z: torch.fft.hfft(z, **kw), [], [Z])
    Z3, X3 = cz(3, 4, 5), r(3, 4, 5)
    gcase(b, "grad_fftn", "fft.fftn(z0, s=[3, 6], dim=[0, 2])", lambda z: torch.fft.fftn(z, s=(3, 6), dim=(0, 2)), [], [Z3])
    gcase(b, "grad_rfftn", "fft.rfftn(x0, norm=\"ortho\")", lambda x: torch.fft.rfftn(x, norm="ortho"), [X3], [])
    gcase(b, "grad_irfftn", "fft.irfftn(z0, s=[4, 7])", lambda z: torch.fft.irfftn(z, s=(4, 7)), [], [Z3])
    gcase(b, "grad_rfft2_dim0", "fft.rfft(x0, dim=0)", lambda x: torch.fft.rfft(x, dim=0), [X3], [])
    gcase(b, "grad_fftshift", "fft.fftshift(z0, dim=[0, 1])", lambda z: torch.fft.fftshift(z, dim=(0, 1)), [], [Z3])
    # complex ops
    A, B, R = cz(3, 4), cz(4), r(3, 1)
    gcase(b, "grad_mul", "z0 * z1", lambda a, c: a * c, [], [A, B])
    gcase(b, "grad_div", "z0 / z1", lambda a, c: a / c, [], [A, B])
    gcase(b, "grad_add_real", "z0 + x0 - z1", lambda x, a, c: a + x - c, [R], [A, B])
    gcase(b, "grad_mul_real", "x0 * z0 / 2.0", lambda x, a: x * a / 2.0, [R], [A])
    gcase(b, "grad_div_by_complex", "x0 / z0", lambda x, a: x / a, [R], [A])
    gcase(b, "grad_abs", "abs(z0)", lambda a: a.abs(), [], [A])
    gcase(b, "grad_angle", "angle(z0)", lambda a: a.angle(), [], [A])
    gcase(b, "grad_conj", "conj(z0) * z1", lambda a, c: a.conj() * c, [], [A, B])
    gcase(b, "grad_real_imag", "real(z0) * imag(z0)", lambda a: a.real * a.imag, [], [A])
    gcase(b, "grad_sum_mean", "sum(z0, 0) + mean(z0, 0)", lambda a: a.sum(0) + a.mean(0), [], [A])
    gcase(b, "grad_polar", "polar(x0, x1)", lambda r_, t: torch.polar(r_, t), [np.abs(r(3)), r(3)], [])
    Zz = cz(3)
    Zz[1] = 0
    gcase(b, "grad_abs_at_zero", "abs(z0)", lambda a: a.abs(), [], [Zz])
    # a spectral layer: irfft(rfft(x) * w) with a complex weight
    Xs, Ws = r(2, 16), cz(9)
    gcase(b, "grad_spectral_filter", "fft.irfft(fft.rfft(x0) * z0, n=16)", lambda x, w: torch.fft.irfft(torch.fft.rfft(x) * w, n=16), [Xs], [Ws])
    # a complex leaf's gradient itself (requires_grad on c128): g = dL/dRe + i dL/dIm
    Zl = cz(5)
    tl = tz(Zl).clone().requires_grad_(True)
    Wl = r(5)
    (torch.fft.fft(tl).real * T(Wl)).sum().backward()
    b.case("grad_complex_leaf", f"view_as_real(grad(fn(z) sum(real(fft.fft(z)) * {b.inp(Wl)}))({zin(b, Zl)}))", vr(tl.grad), **F64)


def device_path():
    """On CUDA (the emulated rerun, or a GPU): every transform kind, forward
    and backward, in both precisions, runs on the device's cuFFT kernels
    (by_op counts each), and no byte crosses between host and device."""
    code = """set_default_device("cuda")
xs = map(list("f32", "f64"), fn(d) to(randn([3, 10]), d))
zs = map(xs, fn(x) complex(x, x * 0.5 + 1))
cuda.synchronize()
cuda.reset_stats()
outs = []
for i in 0..2 {
  x = xs[i]
  z = zs[i]
  outs = outs + [fft.fft(z), fft.ifft(z, n=13), fft.rfft(x, norm="ortho"), fft.irfft(z, n=9), fft.hfft(z),
                 fft.ihfft(x), fft.fftn(z), fft.rfftn(x, s=[4, 6]), fft.irfftn(z, s=[3, 7]), fft.fft2(z, norm="forward")]
  g = grad(fn(p) sum(fft.irfft(complex(p, p * 2), n=11) * fft.irfft(complex(p, p), n=11)) + sum(view_as_real(fft.rfft(p, n=12)) ** 2))(x)
  outs = outs + [g]
}
cuda.synchronize()
c = cuda.stats()
ops = map(list("fft_c2c", "fft_r2c", "fft_c2r"), fn(k) if has(c.by_op, k) { c.by_op[k] } else { 0 })
print("fftstats h2d={c.memcpy_h2d} d2h={c.memcpy_d2h} c2c={ops[0]} r2c={ops[1]} c2r={ops[2]} on={outs[0].device}")
"""
    rc, so, se = run_nabla(code, timeout=600)
    line = next((ln for ln in so.splitlines() if ln.startswith("fftstats ")), None)
    if rc != 0 or line is None:
        report_fail("fft.device_path", f"rc {rc}: {se[-400:]} {so[-200:]}")
        return
    f = dict(kv.split("=") for kv in line.split()[1:])
    check("fft.device_path_no_host_copies", f["h2d"] == "0" and f["d2h"] == "0", f"transforms crossed to the host: {line}")
    check("fft.device_path_cufft_kernels", all(int(f[k]) > 0 for k in ("c2c", "r2c", "c2r")) and f["on"] == "cuda",
          f"a transform kind did not run on the device's kernel: {line}")


def strided_values(b):
    """transforms over leading, middle and strided axes and transposed views:
    on a device the c2c/r2c input goes to cuFFT as strided rows (no copy when
    one batch stride and one element stride describe it; device_layouts
    counts the copies), values as torch's"""
    for dt in (np.float32, np.float64):
        tn = "f32" if dt == np.float32 else "f64"
        x = r(17, 6, dt=dt)
        X = b.inp(x)
        b.case(f"strided_rfft_dim0_{tn}", f"view_as_real(fft.rfft({X}, dim=0))", vr(torch.fft.rfft(T(x), dim=0)), **tol_of(dt, 17))
        b.case(f"strided_rfft_step_{tn}", f'view_as_real(fft.rfft({X}[:, ::2], dim=0, norm="ortho"))', vr(torch.fft.rfft(T(x)[:, ::2], dim=0, norm="ortho")), **tol_of(dt, 17))
        b.case(f"strided_rfft_lastdim_step_{tn}", f'view_as_real(fft.rfft({X}[1:, ::2]))', vr(torch.fft.rfft(T(x)[1:, ::2])), **tol_of(dt, 3))
        z = cz(9, 4, 7, dt=dt)
        Z = zin(b, z)
        for d in (0, 1, 2):
            b.case(f"strided_fft_dim{d}_{tn}", f"view_as_real(fft.fft({Z}, dim={d}))", vr(torch.fft.fft(tz(z), dim=d)), **tol_of(dt, 9))
        b.case(f"strided_ifft_T_{tn}", f"view_as_real(fft.ifft(transpose({Z}, 0, 2), dim=1))", vr(torch.fft.ifft(tz(z).transpose(0, 2), dim=1)), **tol_of(dt, 9))
        b.case(f"strided_fft2_dims01_{tn}", f"view_as_real(fft.fft2({Z}, dim=[0, 1]))", vr(torch.fft.fft2(tz(z), dim=(0, 1))), **tol_of(dt, 36))
        b.case(f"strided_rfftn_{tn}", f"view_as_real(fft.rfftn({X}, dim=[1, 0]))", vr(torch.fft.rfftn(T(x), dim=(1, 0))), **tol_of(dt, 100))
        b.case(f"strided_fft_pad_dim0_{tn}", f"view_as_real(fft.fft({Z}, n=12, dim=0))", vr(torch.fft.fft(tz(z), n=12, dim=0)), **tol_of(dt, 12))
    # gradients through a leading-axis transform (its backward's transforms run strided too)
    x = r(11, 5)
    xt = T(x.copy(), requires_grad=True)
    W = r(6, 5, 2)
    (torch.view_as_real(torch.fft.rfft(xt, dim=0)) * T(W)).sum().backward()
    b.case("strided_grad_rfft_dim0", f"grad(fn(p) sum(view_as_real(fft.rfft(p, dim=0)) * {b.inp(W)}))({b.inp(x)})", xt.grad, **F64)


def device_layouts():
    """On CUDA: the copies a transform makes of its input (by_op "copy" and
    d2d copies), per layout: none where cuFFT's advanced layout describes the
    rows, one where it cannot (a middle axis: two batch strides)"""
    code = """set_default_device("cuda")
x = randn([16, 6])
z = complex(randn([5, 8, 7]), randn([5, 8, 7]))
zt = transpose(complex(randn([6, 16]), randn([6, 16])), 0, 1)
cuda.synchronize()
fn copies(f) {
  cuda.reset_stats()
  y = f()
  c = cuda.stats()
  cp = if has(c.by_op, "copy") { c.by_op.copy } else { 0 }
  return "{cp + c.memcpy_d2d}/{c.launches}"
}
print("fftcopies", [copies(fn() fft.rfft(x, dim=0)), copies(fn() fft.rfft(x[:, ::2], dim=0)), copies(fn() fft.fft(zt, dim=1)),
                    copies(fn() fft.fft(z, dim=0)), copies(fn() fft.fft(z, dim=1)), copies(fn() fft.fft(z))])
"""
    rc, so, se = run_nabla(code, timeout=600)
    line = next((ln for ln in so.splitlines() if ln.startswith("fftcopies")), None)
    if rc != 0 or line is None:
        report_fail("fft.device_layouts", f"rc {rc}: {se[-400:]} {so[-200:]}")
        return
    got = line.split(None, 1)[1].replace(" ", "")
    # copies/launches: dim 0, stepped dim 0, transposed: no copy, one launch (the transform); a
    # leading dim of a 3-D: no copy; the middle dim: one copy + the transform; the last dim: dense
    check("fft.device_layouts_copies", got == '["0/1","0/1","0/1","0/1","1/2","0/1"]', f"copies/launches per layout: {line}")


def device_graphs():
    """On CUDA: a compiled step with transforms (plans warmed by its eager first
    call) is captured and each replay runs the transforms again (values as
    eager); a plan evicted before the capture would be made inside it, which
    a capture forbids: the capture ends there, the step runs eagerly with
    values as eager, and compile reports the reason (other sizes than the
    first step's: plans a graph runs are never evicted)"""
    code = """seed(2)
set_default_device("cuda")
fn f(x) = view_as_real(fft.rfft(x, dim=0)) * 2 + view_as_real(fft.fft(complex(x, x), dim=1))[0]
g = compile(f)
same = list()
for i in 0..5 {
  x = randn(12, 5)
  push(same, tolist(g(x)) == tolist(f(x)))
}
s = g.stats()
print("graph1 {same} {s.captures} {s.replays} {s.eager_calls} {s.reasons}")
h = compile(f)
x = randn(10, 3)
a = h(x)
for n in 20..40 { y = fft.fft(randn(n)) }
same = list()
for i in 0..3 {
  x = randn(10, 3)
  push(same, tolist(h(x)) == tolist(f(x)))
}
s = h.stats()
print("graph2 {same} {s.captures} {s.eager_calls} {s.reasons}")
"""
    rc, so, se = run_nabla(code, timeout=600)
    l1 = next((ln for ln in so.splitlines() if ln.startswith("graph1 ")), None)
    l2 = next((ln for ln in so.splitlines() if ln.startswith("graph2 ")), None)
    if rc != 0 or l1 is None or l2 is None:
        report_fail("fft.device_graphs", f"rc {rc}: {se[-600:]} {so[-300:]}")
        return
    check("fft.graph_replays_transform", l1.startswith("graph1 [true, true, true, true, true] 1 3 1"), l1)
    check("fft.graph_plan_miss_falls_back", l2.startswith("graph2 [true, true, true] 0 ") and "cuFFT plan" in l2, l2)


def printing():
    code = ('print(complex(tensor([1.0, 0.5]), tensor([2.0, -1.25])))\n'
            'print(complex(tensor([3.0], dtype="f64"), tensor([-4.0], dtype="f64")))\n')
    rc, so, se = run_nabla(code)
    want = ["tensor([1.0000+2.0000j, 0.5000-1.2500j])", "tensor([3.-4.j], dtype=c128)"]
    lines = so.strip().splitlines()
    check("fft.print_complex", rc == 0 and lines == want, f"rc {rc}, got {lines!r}, wanted {want!r}; {se[-200:]}")


def main():
    subset = os.environ.get("FFT_SUBSET") == "1"
    b = Batch("fft"); values(b, full=not subset); b.run()
    b = Batch("fft_complex"); complex_ops(b); b.run()
    b = Batch("fft_grad"); gradients(b, full=not subset); b.run()
    b = Batch("fft_err"); errors(b); b.run()
    b = Batch("fft_strided"); strided_values(b); b.run()
    if DEVICE == "cuda":
        device_path()
        device_layouts()
        device_graphs()
    if DEVICE == "cpu":
        printing()
        if not subset and not emulated_rerun(__file__, "fft", "FFT_SUBSET"):
            report_fail("fft.emulated", "the emulated-device run failed (its lines above)")
    finish()


if __name__ == "__main__":
    main()
