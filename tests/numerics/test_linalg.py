#!/usr/bin/python3
"""linalg (tensor/linalg/, lang/lib/ltlinalg.c) vs torch.linalg on fresh random
inputs: values of every function, batched and unbatched, f32 and f64, odd
sizes, size-0 and size-1 edges, non-contiguous views; gradients (loss =
sum(f(A) * W) with random W) vs torch in f64, and finite differences
(FD_NBL: Richardson, relative to the gradient's size) for each backward; singular and non-positive-definite
inputs as errors naming the batch element, the _ex forms' info, and the
argument errors.

Without NUMERICS_DEVICE the suite runs again with every input on the
emulated CUDA device (NABLA_CUDA_EMULATE=force), when its module is built.

tools/run-tests.sh runs it a second time on the ASan build (NABLA_ASAN=1,
NABLA=build-asan/nabla, whose emulated module is instrumented too): the same
cases, so LAPACK's and the stand-in's buffers are checked by ASan and LSan.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_linalg.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, dtype_name, to_np, finish, rng, torch, np, DEVICE, report_fail, emulated_rerun, run_nabla, check  # noqa: E402

F64 = dict(rtol=1e-8, atol=1e-9)
F32 = dict(rtol=2e-4, atol=2e-4)
TOLS = {np.float32: F32, np.float64: F64}


def r(*shape, dt=np.float64):
    return rng.standard_normal(shape).astype(dt)


def wellcond(*shape, dt=np.float64):
    """square matrices [..., n, n] with condition numbers near 1-10"""
    n = shape[-1]
    return (r(*shape, dt=np.float64) + 2.0 * np.sqrt(max(n, 1)) * np.eye(n)).astype(dt)


def spd(*shape, dt=np.float64):
    n = shape[-1]
    a = r(*shape[:-1], n + 2)
    return (a @ np.swapaxes(a, -1, -2) / (n + 2) + 0.5 * np.eye(n)).astype(dt)


def sym(*shape, dt=np.float64):
    a = r(*shape)
    return ((a + np.swapaxes(a, -1, -2)) / 2).astype(dt)


def W_like(t):
    return rng.standard_normal(tuple(t.shape))


def gcase(b, name, nb_expr, torch_fn, inputs, tol=F64):
    """nb_expr over p0, p1, ...: value and gradients of every input vs torch (f64)."""
    tin = [T(a.copy(), requires_grad=True) for a in inputs]
    out = torch_fn(*tin)
    W = W_like(out)
    (out * T(W)).sum().backward()
    params = ", ".join(f"p{i}" for i in range(len(inputs)))
    exprs = ", ".join(b.inp(a) for a in inputs)
    argn = ", ".join(str(i) for i in range(len(inputs)))
    code = (f"f = fn({params}) {{\n{nb_expr}\n}}\n"
            f"list(f({exprs}), grad(fn({params}) sum(f({params}) * {b.inp(W)}), argnums=list({argn}))({exprs}))")
    b.case(name, code, [out.detach(), [t.grad for t in tin]], **tol)


# Finite differences that hold at any input scale.  A central difference
# D(h) = (f(x+h) - f(x-h)) / 2h is f' + h^2 f^(3) / 6 + O(h^4): at a fixed h and a
# fixed absolute tolerance it fails whenever f^(3) is large (matrix_exp(4 A):
# entries of e^(4|A|) and their derivatives).  Richardson's (4 D(h/2) - D(h)) / 3
# cancels the h^2 term, leaving O(h^4 f^(5)); the step follows the entry
# (h = 1e-4 max(1, |x_i|)), so rounding (~eps |f| / h) stays ~1e-12 |f|.  The
# error is judged relative to the gradient's size: max|auto - fd| /
# max(1, max|fd|) <= FD_TOL.  A gradient off by 1e-6 of its size fails
# (fd_mutation_caught checks that the check can fail).
FD_TOL = 1e-7
FD_NBL = r"""
fn fd_richardson(f, x) {
  g = zeros_like(x)
  gf = reshape(g, -1)
  xf = reshape(x, -1)
  for i in 0..numel(x) {
    h = 1e-4 * max(1, abs(xf[i].item()))
    d = list()
    for s in list(h, h / 2) {
      xp = clone(x)
      vp = reshape(xp, -1)
      vp[i] = vp[i] + s
      xm = clone(x)
      vm = reshape(xm, -1)
      vm[i] = vm[i] - s
      push(d, (f(xp) - f(xm)) / (2 * s))
    }
    gf[i] = (4 * d[1] - d[0]) / 3
  }
  g
}
fn fd_error(f, x) {
  a = grad(f)(x)
  n = fd_richardson(f, x)
  max(abs(a - n)).item() / max(1, max(abs(n)).item())
}
"""


def fdcase(b, name, nb_expr, a):
    """autograd vs finite differences of sum(f(p0) * W) at a (f64), relative to the gradient's size."""
    code = (f"f = fn(p0) {{\n{nb_expr}\n}}\n"
            f"w = randn_like(f({b.inp(a)}), dtype=\"f64\")\n"
            f"fd_error(fn(p0) sum(f(p0) * w), {b.inp(a)})")
    b.case(name, code, 0.0, rtol=0, atol=FD_TOL, dtype=False)


# ------------------------------------------------------------------ values
def values(b):
    for dt in (np.float32, np.float64):
        tol = TOLS[dt]
        tn = "f32" if dt == np.float32 else "f64"
        for shape in [(1, 1), (3, 3), (5, 5), (2, 4, 4), (2, 3, 2, 2)]:
            s = "x".join(map(str, shape))
            A = wellcond(*shape, dt=dt)
            x = b.inp(A)
            b.case(f"inv_{tn}_{s}", f"linalg.inv({x})", torch.linalg.inv(T(A)), **tol)
            b.case(f"det_{tn}_{s}", f"linalg.det({x})", torch.linalg.det(T(A)), **tol)
            sl = torch.linalg.slogdet(T(A))
            b.case(f"slogdet_{tn}_{s}", f"d = linalg.slogdet({x})\nlist(d.sign, d.logabsdet)", [sl.sign, sl.logabsdet], **tol)
            B = r(*shape[:-1], 3, dt=dt)
            b.case(f"solve_{tn}_{s}", f"linalg.solve({x}, {b.inp(B)})", torch.linalg.solve(T(A), T(B)), **tol)
            S = spd(*shape, dt=dt)
            b.case(f"cholesky_{tn}_{s}", f"linalg.cholesky({b.inp(S)})", torch.linalg.cholesky(T(S)), **tol)
            b.case(f"cholesky_upper_{tn}_{s}", f"linalg.cholesky({b.inp(S)}, upper=true)", torch.linalg.cholesky(T(S), upper=True), **tol)
            H = sym(*shape, dt=dt)
            b.case(f"eigvalsh_{tn}_{s}", f"linalg.eigvalsh({b.inp(H)})", torch.linalg.eigvalsh(T(H)), **tol)
            b.case(f"eigvalsh_U_{tn}_{s}", f"linalg.eigvalsh({b.inp(H)}, UPLO=\"U\")", torch.linalg.eigvalsh(T(H), UPLO="U"), **tol)
            b.case(f"matrix_exp_{tn}_{s}", f"linalg.matrix_exp({b.inp(A / 4)})", torch.linalg.matrix_exp(T(A / 4)), rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
        for shape in [(4, 3), (3, 5), (1, 4), (2, 5, 3), (2, 3, 6)]:
            s = "x".join(map(str, shape))
            A = r(*shape, dt=dt)
            x = b.inp(A)
            b.case(f"svdvals_{tn}_{s}", f"linalg.svdvals({x})", torch.linalg.svdvals(T(A)), **tol)
            # Q, R and U, Vh are unique up to signs: check the reconstruction and orthogonality,
            # and R's diagonal / S against torch
            b.case(f"qr_{tn}_{s}", f"q = linalg.qr({x})\nlist(q.Q @ q.R, abs(q.R), transpose(q.Q) @ q.Q)",
                   [T(A), torch.linalg.qr(T(A)).R.abs(), torch.eye(min(shape[-2:]), dtype=T(A).dtype).expand(*shape[:-2], -1, -1)], **tol)
            m, n = shape[-2:]
            b.case(f"qr_complete_{tn}_{s}", f"q = linalg.qr({x}, mode=\"complete\")\nlist(q.Q @ q.R, abs(q.R), transpose(q.Q) @ q.Q)",
                   [T(A), torch.linalg.qr(T(A), mode="complete").R.abs(), torch.eye(m, dtype=T(A).dtype).expand(*shape[:-2], -1, -1)], **tol)
            b.case(f"qr_r_{tn}_{s}", f"q = linalg.qr({x}, mode=\"r\")\nlist(abs(q.R), numel(q.Q))",
                   [torch.linalg.qr(T(A), mode="r").R.abs(), 0.0], **tol)
            k = min(m, n)
            b.case(f"svd_{tn}_{s}", f"d = linalg.svd({x}, full_matrices=false)\nlist((d.U * unsqueeze(d.S, -2)) @ d.Vh, d.S)",
                   [T(A), torch.linalg.svdvals(T(A))], **tol)
            U, Sv, Vh = torch.linalg.svd(T(A), full_matrices=True)
            b.case(f"svd_full_{tn}_{s}", f"d = linalg.svd({x})\nlist(transpose(d.U) @ d.U, d.Vh @ transpose(d.Vh), d.S)",
                   [torch.eye(m, dtype=U.dtype).expand_as(U), torch.eye(n, dtype=U.dtype).expand_as(Vh), Sv], **tol)
            b.case(f"pinv_{tn}_{s}", f"linalg.pinv({x})", torch.linalg.pinv(T(A)), rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
            b.case(f"matrix_rank_{tn}_{s}", f"linalg.matrix_rank({x})", torch.linalg.matrix_rank(T(A)))
            for ordn, ordv in [("fro", '"fro"'), ("nuc", '"nuc"'), ("1", "1"), ("-1", "-1"), ("2", "2"), ("-2", "-2"), ("inf", "inf"), ("-inf", "-inf")]:
                ot = ordn if ordn in ("fro", "nuc") else float(ordn)
                b.case(f"matrix_norm_{ordn}_{tn}_{s}", f"linalg.matrix_norm({x}, ord={ordv})", torch.linalg.matrix_norm(T(A), ord=ot), **tol)
            B = r(*shape[:-1], 2, dt=dt)
            ls = torch.linalg.lstsq(T(A), T(B), driver="gelsd")
            b.case(f"lstsq_{tn}_{s}", f"d = linalg.lstsq({x}, {b.inp(B)})\nlist(d.solution, d.rank, d.singular_values)",
                   [ls.solution, ls.rank, ls.singular_values], rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
            if m > n:
                b.case(f"lstsq_residuals_{tn}_{s}", f"linalg.lstsq({x}, {b.inp(B)}).residuals", ls.residuals, rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
        # eigenvectors: A V = V diag(L), V orthogonal
        H = sym(3, 5, 5, dt=dt)
        b.case(f"eigh_{tn}", f"e = linalg.eigh({b.inp(H)})\nlist({b.inp(H)} @ e.eigenvectors - e.eigenvectors * unsqueeze(e.eigenvalues, -2), transpose(e.eigenvectors) @ e.eigenvectors, e.eigenvalues)",
               [torch.zeros(3, 5, 5, dtype=T(H).dtype), torch.eye(5, dtype=T(H).dtype).expand(3, 5, 5), torch.linalg.eigvalsh(T(H))], **tol)
    # other functions, f64
    A = wellcond(2, 4, 4)
    for k in (-3, -1, 0, 1, 2, 5):
        b.case(f"matrix_power_{k}", f"linalg.matrix_power({b.inp(A / 3)}, {k})", torch.linalg.matrix_power(T(A / 3), k), **F64)
    big = r(6, 6) * 3
    b.case("matrix_exp_scaled", f"linalg.matrix_exp({b.inp(big)})", torch.linalg.matrix_exp(T(big)), rtol=1e-9, atol=1e-7)
    L = np.tril(wellcond(2, 4, 4))
    B = r(2, 4, 3)
    b.case("solve_triangular_lower", f"linalg.solve_triangular({b.inp(L)}, {b.inp(B)}, upper=false)",
           torch.linalg.solve_triangular(T(L), T(B), upper=False), **F64)
    Bl = r(2, 3, 4)
    b.case("solve_triangular_right_upper_unit", f"linalg.solve_triangular({b.inp(np.swapaxes(L, -1, -2))}, {b.inp(Bl)}, upper=true, left=false, unitriangular=true)",
           torch.linalg.solve_triangular(T(np.swapaxes(L, -1, -2)), T(Bl), upper=True, left=False, unitriangular=True), **F64)
    S = spd(3, 4, 4)
    Ls = np.linalg.cholesky(S)
    Bc = r(3, 4, 2)
    b.case("cholesky_solve", f"linalg.cholesky_solve({b.inp(Bc)}, {b.inp(Ls)})", torch.cholesky_solve(T(Bc), T(Ls)), **F64)
    b.case("cholesky_solve_upper", f"linalg.cholesky_solve({b.inp(Bc)}, {b.inp(np.swapaxes(Ls, -1, -2))}, upper=true)",
           torch.cholesky_solve(T(Bc), T(np.swapaxes(Ls, -1, -2)), upper=True), **F64)
    # solve: vector right-hand sides, broadcast batches, left=false
    A = wellcond(3, 4, 4)
    v = r(4)
    b.case("solve_vector", f"linalg.solve({b.inp(A)}, {b.inp(v)})", torch.linalg.solve(T(A), T(v)), **F64)
    vb = r(3, 4)
    b.case("solve_batched_vector", f"linalg.solve({b.inp(A)}, {b.inp(vb)})", torch.linalg.solve(T(A), T(vb)), **F64)
    Bb = r(2, 1, 4, 5)
    b.case("solve_broadcast", f"linalg.solve({b.inp(A)}, {b.inp(Bb)})", torch.linalg.solve(T(A), T(Bb)), **F64)
    Br = r(3, 2, 4)
    b.case("solve_left_false", f"linalg.solve({b.inp(A)}, {b.inp(Br)}, left=false)", torch.linalg.solve(T(A), T(Br), left=False), **F64)
    # non-contiguous inputs: a transposed view and a strided slice
    A = wellcond(5, 5)
    b.case("inv_transposed_view", f"linalg.inv(transpose({b.inp(A)}))", torch.linalg.inv(T(A).mT), **F64)
    A2 = wellcond(3, 8, 8)
    b.case("det_strided_view", f'linalg.det({b.inp(A2)}["...", ::2, ::2])', torch.linalg.det(T(A2)[..., ::2, ::2]), **F64)
    Sv = spd(6, 6)
    b.case("cholesky_transposed_view", f"linalg.cholesky(transpose({b.inp(Sv)}))", torch.linalg.cholesky(T(Sv).mT), **F64)
    # the input is not modified (LAPACK works on copies)
    b.case("inputs_untouched", f"a = {b.inp(A)}\nc = clone(a)\nlinalg.inv(a)\nlinalg.svd(a)\nlinalg.qr(a)\nlinalg.det(a)\na - c", np.zeros_like(A), rtol=0, atol=0)
    # empty and size-0 edges
    E = np.zeros((0, 0))
    b.case("det_0x0", f"linalg.det({b.inp(E)})", torch.linalg.det(T(E)), **F64)
    b.case("inv_0x0", f"linalg.inv({b.inp(E)})", torch.linalg.inv(T(E)), **F64)
    Eb = np.zeros((0, 3, 3))
    b.case("inv_empty_batch", f"linalg.inv({b.inp(Eb)})", torch.linalg.inv(T(Eb)), **F64)
    b.case("cholesky_empty_batch", f"linalg.cholesky({b.inp(Eb)})", torch.linalg.cholesky(T(Eb)), **F64)
    b.case("svdvals_empty_batch", f"linalg.svdvals({b.inp(np.zeros((0, 3, 2)))})", torch.linalg.svdvals(T(np.zeros((0, 3, 2)))), **F64)
    # vector norms, cross, kron
    x = r(3, 4, 5)
    for p, pn in [(2, "2"), (1, "1"), (3.5, "3.5"), (float("inf"), "inf"), (float("-inf"), "-inf"), (0, "0")]:
        b.case(f"vector_norm_{pn}", f"linalg.vector_norm({b.inp(x)}, ord={pn}, dim=list(0, 2))", torch.linalg.vector_norm(T(x), ord=p, dim=(0, 2)), **F64)
    b.case("vector_norm_all_keepdim", f"linalg.vector_norm({b.inp(x)}, keepdim=true)", torch.linalg.vector_norm(T(x), keepdim=True), **F64)
    b.case("matrix_norm_dims_keepdim", f"linalg.matrix_norm({b.inp(x)}, ord=\"nuc\", dim=list(0, 2), keepdim=true)",
           torch.linalg.matrix_norm(T(x), ord="nuc", dim=(0, 2), keepdim=True), **F64)
    b.case("matrix_norm_1_dims", f"linalg.matrix_norm({b.inp(x)}, ord=1, dim=list(2, 0))",
           torch.linalg.matrix_norm(T(x), ord=1, dim=(2, 0)), **F64)
    b.case("norm_default", f"linalg.norm({b.inp(x)})", torch.linalg.norm(T(x)), **F64)
    b.case("norm_matrix_ord", f"linalg.norm({b.inp(x[0])}, ord=2)", torch.linalg.norm(T(x[0]), ord=2), **F64)
    ca, cb = r(4, 3), r(2, 1, 3)
    b.case("cross", f"linalg.cross({b.inp(ca)}, {b.inp(cb)})", np.cross(ca, cb), **F64)
    cd = r(3, 5)
    b.case("cross_dim0", f"cross({b.inp(cd)}, {b.inp(cd[::-1].copy())}, dim=0)", torch.linalg.cross(T(cd), T(cd[::-1].copy()), dim=0), **F64)
    ka, kb = r(2, 3), r(4, 1, 2)
    b.case("kron", f"kron({b.inp(ka)}, {b.inp(kb)})", torch.kron(T(ka), T(kb)), **F64)


# ------------------------------------------------------------------ gradients vs torch
def gradients(b):
    A = wellcond(2, 4, 4)
    gcase(b, "grad_inv", "linalg.inv(p0)", torch.linalg.inv, [A])
    gcase(b, "grad_det", "linalg.det(p0)", torch.linalg.det, [A])
    gcase(b, "grad_slogdet", "linalg.slogdet(p0).logabsdet", lambda a: torch.linalg.slogdet(a).logabsdet, [A])
    B = r(3, 2, 4, 3)
    gcase(b, "grad_solve_broadcast", "linalg.solve(p0, p1)", torch.linalg.solve, [A, B])
    gcase(b, "grad_solve_left_false", "linalg.solve(p0, p1, left=false)", lambda a, c: torch.linalg.solve(a, c, left=False), [A, r(2, 3, 4)])
    L = np.tril(wellcond(2, 4, 4))
    gcase(b, "grad_solve_triangular", "linalg.solve_triangular(p0, p1, upper=false)",
          lambda a, c: torch.linalg.solve_triangular(a, c, upper=False), [L, r(2, 4, 3)])
    S = spd(2, 4, 4)
    gcase(b, "grad_cholesky", "linalg.cholesky(p0)", torch.linalg.cholesky, [S])
    gcase(b, "grad_cholesky_upper", "linalg.cholesky(p0, upper=true)", lambda a: torch.linalg.cholesky(a, upper=True), [S])
    for shape in [(5, 3), (4, 4), (3, 5)]:
        s = "x".join(map(str, shape))
        A = r(2, *shape)
        gcase(b, f"grad_qr_Q_{s}", "linalg.qr(p0).Q", lambda a: torch.linalg.qr(a).Q, [A])
        gcase(b, f"grad_qr_R_{s}", "linalg.qr(p0).R", lambda a: torch.linalg.qr(a).R, [A])
        gcase(b, f"grad_qr_both_{s}", 'q = linalg.qr(p0)\nq.Q @ q.R["...", 0:1]',
              lambda a: (lambda q: q.Q @ q.R[..., 0:1])(torch.linalg.qr(a)), [A])
        gcase(b, f"grad_svdvals_{s}", "linalg.svdvals(p0)", torch.linalg.svdvals, [A])
        # U and Vh carry a sign per singular vector: losses invariant to it
        gcase(b, f"grad_svd_U_{s}", "d = linalg.svd(p0, full_matrices=false)\nabs(d.U)",
              lambda a: torch.linalg.svd(a, full_matrices=False).U.abs(), [A])
        gcase(b, f"grad_svd_Vh_{s}", "d = linalg.svd(p0, full_matrices=false)\nabs(d.Vh)",
              lambda a: torch.linalg.svd(a, full_matrices=False).Vh.abs(), [A])
        gcase(b, f"grad_svd_all_{s}", "d = linalg.svd(p0, full_matrices=false)\n(d.U * unsqueeze(d.S * d.S, -2)) @ d.Vh",
              lambda a: (lambda d: (d.U * (d.S * d.S).unsqueeze(-2)) @ d.Vh)(torch.linalg.svd(a, full_matrices=False)), [A])
        gcase(b, f"grad_pinv_{s}", "linalg.pinv(p0)", torch.linalg.pinv, [A])
        gcase(b, f"grad_lstsq_{s}", "linalg.lstsq(p0, p1).solution",
              lambda a, c: torch.linalg.lstsq(a, c, driver="gelsd").solution if a.shape[-2] >= a.shape[-1] else torch.linalg.pinv(a) @ c,
              [A, r(2, shape[0], 2)])
        gcase(b, f"grad_matrix_norm_nuc_{s}", "linalg.matrix_norm(p0, ord=\"nuc\")", lambda a: torch.linalg.matrix_norm(a, ord="nuc"), [A])
        gcase(b, f"grad_matrix_norm_2_{s}", "linalg.matrix_norm(p0, ord=2)", lambda a: torch.linalg.matrix_norm(a, ord=2), [A])
        gcase(b, f"grad_matrix_norm_inf_{s}", "linalg.matrix_norm(p0, ord=inf)", lambda a: torch.linalg.matrix_norm(a, ord=float("inf")), [A])
    H = sym(2, 4, 4)
    gcase(b, "grad_eigvalsh", "linalg.eigvalsh(p0)", torch.linalg.eigvalsh, [H])
    gcase(b, "grad_eigh_values", "linalg.eigh(p0).eigenvalues", lambda a: torch.linalg.eigh(a).eigenvalues, [H])
    gcase(b, "grad_eigh_vectors", "abs(linalg.eigh(p0).eigenvectors)", lambda a: torch.linalg.eigh(a).eigenvectors.abs(), [H])
    gcase(b, "grad_eigh_upper", "e = linalg.eigh(p0, UPLO=\"U\")\n(e.eigenvectors * unsqueeze(e.eigenvalues, -2)) @ transpose(e.eigenvectors)",
          lambda a: (lambda e: (e.eigenvectors * e.eigenvalues.unsqueeze(-2)) @ e.eigenvectors.mT)(torch.linalg.eigh(a, UPLO="U")), [H])
    gcase(b, "grad_matrix_exp", "linalg.matrix_exp(p0)", torch.linalg.matrix_exp, [r(2, 4, 4)], tol=dict(rtol=1e-7, atol=1e-8))
    gcase(b, "grad_matrix_power", "linalg.matrix_power(p0, -3)", lambda a: torch.linalg.matrix_power(a, -3), [wellcond(3, 3) / 3])
    gcase(b, "grad_cross", "linalg.cross(p0, p1)", torch.linalg.cross, [r(4, 3), r(4, 3)])
    gcase(b, "grad_kron", "kron(p0, p1)", torch.kron, [r(2, 3), r(3, 2)])
    gcase(b, "grad_vector_norm", "linalg.vector_norm(p0, ord=3, dim=list(1))", lambda a: torch.linalg.vector_norm(a, ord=3, dim=1), [r(3, 4)])


# ------------------------------------------------------------------ finite differences
def finite_differences(b):
    b.raw(FD_NBL)
    fdcase(b, "fd_inv", "linalg.inv(p0)", wellcond(3, 3))
    fdcase(b, "fd_det", "linalg.det(p0)", wellcond(3, 3))
    Ar = r(4, 4)
    Ar[1] = Ar[0]   # singular: the cofactor (SVD) path
    fdcase(b, "fd_det_equal_rows", "linalg.det(p0)", Ar)
    Az = r(4, 4)
    Az[:, 2] = 0
    fdcase(b, "fd_det_zero_column", "linalg.det(p0)", Az)
    # a rank-deficient column: torch 1.13's gradient is wrong where its LU finds
    # det exactly 0 (checked against finite differences), so finite differences here
    As = r(4, 4)
    As[:, 3] = As[:, 0] + As[:, 1]
    fdcase(b, "fd_det_dependent_columns", "linalg.det(p0)", As)
    fdcase(b, "fd_slogdet", "linalg.slogdet(p0).logabsdet", wellcond(3, 3))
    fdcase(b, "fd_solve", "linalg.solve(p0, transpose(p0[0:2]))", wellcond(3, 3))
    fdcase(b, "fd_solve_triangular", "linalg.solve_triangular(tril(p0), p0, upper=false)", wellcond(3, 3))
    fdcase(b, "fd_cholesky", "linalg.cholesky(p0 @ transpose(p0) + eye(3, dtype=\"f64\"))", r(3, 3))
    fdcase(b, "fd_cholesky_solve", "linalg.cholesky_solve(p0, tril(p0) + 3 * eye(3, dtype=\"f64\"))", r(3, 3))
    fdcase(b, "fd_qr_tall", "q = linalg.qr(p0)\nq.Q * 2 + q.R[0]", r(4, 3))
    fdcase(b, "fd_qr_wide", "q = linalg.qr(p0)\nq.R", r(2, 4))
    fdcase(b, "fd_eigh", "e = linalg.eigh(p0 + transpose(p0))\nabs(e.eigenvectors) + unsqueeze(e.eigenvalues, -2)", r(3, 3))
    fdcase(b, "fd_svd_tall", "d = linalg.svd(p0, full_matrices=false)\nabs(d.U) + unsqueeze(d.S, -2)", r(4, 3))
    fdcase(b, "fd_svd_wide", "d = linalg.svd(p0, full_matrices=false)\nabs(d.Vh) + unsqueeze(d.S, -1)", r(3, 4))
    fdcase(b, "fd_pinv_wide", "linalg.pinv(p0)", r(2, 4))
    fdcase(b, "fd_pinv_tall", "linalg.pinv(p0)", r(4, 2))
    fdcase(b, "fd_matrix_exp", "linalg.matrix_exp(p0)", r(3, 3))
    fdcase(b, "fd_matrix_exp_scaled", "linalg.matrix_exp(p0 * 4)", r(3, 3))
    # the check can fail: a gradient 1e-4 too large, relative (e + 1e-4 (e - detach(e))
    # has e's value and 1.0001 times its gradient)
    x = b.inp(r(3, 3))
    b.case("fd_mutation_caught", "f = fn(p0) { e = linalg.matrix_exp(p0 * 4)\ne + 1e-4 * (e - detach(e)) }\n"
           f"w = randn_like(f({x}), dtype=\"f64\")\n"
           f"fd_error(fn(p0) sum(f(p0) * w), {x}) > {FD_TOL * 10}", True, dtype=False)


# ------------------------------------------------------------------ errors
def errors(b):
    Sg = r(3, 4, 4)
    Sg[1, 2] = 0   # batch element 1 has a zero row: exactly singular
    b.error("inv_singular_names_batch", f"linalg.inv({b.inp(Sg)})", ["linalg.inv", "singular", "batch element [1]"])
    b.error("solve_singular", f"linalg.solve({b.inp(Sg)}, {b.inp(r(3, 4, 1))})", ["linalg.solve", "singular", "[1]"])
    Z = np.zeros((2, 2, 3, 3))
    Z[0, 1] = np.eye(3)
    Z[0, 0] = np.eye(3)
    Z[1] = np.eye(3)
    Z[1, 0, 2, 2] = 0
    b.error("inv_singular_2d_batch", f"linalg.inv({b.inp(Z)})", ["singular", "batch element [1, 0]", "entry 3"])
    ie = torch.linalg.inv_ex(T(Z))
    b.case("inv_ex_info", f"linalg.inv_ex({b.inp(Z)}).info", ie.info)
    NP = spd(3, 4, 4)
    NP[2] = -NP[2]
    b.error("cholesky_not_pd", f"linalg.cholesky({b.inp(NP)})", ["linalg.cholesky", "not positive-definite", "order 1", "batch element [2]"])
    ce = torch.linalg.cholesky_ex(T(NP))
    b.case("cholesky_ex_info", f"linalg.cholesky_ex({b.inp(NP)}).info", ce.info)
    b.case("cholesky_ex_ok_values", f"linalg.cholesky_ex({b.inp(NP)}).L[0:2]", ce.L[0:2], **F64)
    b.error("solve_triangular_zero_diag", f"linalg.solve_triangular({b.inp(np.triu(np.ones((3, 3))) - np.diag([0, 1, 0]))}, {b.inp(r(3, 2))}, upper=true)",
            ["solve_triangular", "singular", "diagonal entry 2"])
    b.error("not_square", f"linalg.inv({b.inp(r(3, 4))})", ["linalg.inv", "square", "[3, 4]"])
    b.error("vector_input", f"linalg.det({b.inp(r(3))})", ["linalg.det", "1D"])
    b.error("int_dtype", f"linalg.inv({b.inp(np.eye(3, dtype=np.int64))})", ["linalg.inv", "f32 or f64", "i64"])
    b.error("solve_shape_mismatch", f"linalg.solve({b.inp(wellcond(3, 3))}, {b.inp(r(4, 2))})", ["linalg.solve", "4 rows"])
    b.error("solve_dtype_mismatch", f"linalg.solve({b.inp(wellcond(3, 3))}, {b.inp(r(3, 2, dt=np.float32))})", ["linalg.solve", "f64", "f32"])
    b.error("qr_bad_mode", f"linalg.qr({b.inp(r(3, 3))}, mode=\"full\")", ["linalg.qr", "mode", "full"])
    b.error("eigh_bad_uplo", f"linalg.eigh({b.inp(r(3, 3))}, UPLO=\"X\")", ["UPLO"])
    b.error("matrix_norm_bad_ord", f"linalg.matrix_norm({b.inp(r(3, 3))}, ord=3)", ["matrix_norm", "ord"])
    b.error("cross_size", f"linalg.cross({b.inp(r(3, 4))}, {b.inp(r(3, 4))})", ["cross", "size 3"])
    # backward errors: repeated eigenvalues with eigenvector gradients, qr complete tall, svd full
    b.error("eigh_degenerate_vectors_grad", f"grad(fn(a) sum(linalg.eigh(a).eigenvectors))({b.inp(np.eye(3))})", ["eigh", "repeated eigenvalues"])
    b.case("eigh_degenerate_values_grad_ok", f"grad(fn(a) sum(linalg.eigvalsh(a)))({b.inp(np.eye(3))})", torch.eye(3, dtype=torch.float64), **F64)
    b.error("svd_repeated_vectors_grad", f"grad(fn(a) sum(linalg.svd(a, full_matrices=false).U))({b.inp(np.eye(3))})", ["svd", "repeated singular values"])
    b.error("svd_full_grad", f"grad(fn(a) sum(linalg.svd(a).U))({b.inp(r(4, 2))})", ["full_matrices"])
    b.error("qr_complete_grad", f"grad(fn(a) sum(linalg.qr(a, mode=\"complete\").Q))({b.inp(r(4, 2))})", ["complete"])
    b.error("qr_r_grad", f"grad(fn(a) sum(linalg.qr(a, mode=\"r\").R))({b.inp(r(3, 3))})", ["mode=\"r\""])
    b.error("slogdet_singular_grad", f"grad(fn(a) linalg.slogdet(a).logabsdet)({b.inp(np.ones((3, 3)))})", ["slogdet", "singular"])
    b.case("slogdet_singular_value", f"d = linalg.slogdet({b.inp(np.ones((3, 3)))})\nlist(d.sign, d.logabsdet)", [torch.tensor(0.0, dtype=torch.float64), torch.tensor(-np.inf, dtype=torch.float64)])


# ------------------------------------------------------------------ eig (complex results)
EPS = {np.float32: 1.2e-7, np.float64: 2.3e-16}


def eig_check(A, vecs):
    """A callable for Batch.case: got is view_as_real(L) (and view_as_real(V)) in
    nabla's order.  Eigenvalues vs torch's (f64) as multisets, each within its
    condition number's bound (eps ||A|| / |y^H x|); eigenvectors by the residual
    A V - V diag(L) (backward stability), unit 2-norm, and vs torch's column of the
    same eigenvalue up to a phase where the eigenvalue is well separated."""
    dt = A.dtype.type
    pn = "f32" if dt == np.float32 else "f64"
    n = A.shape[-1]
    A64 = A.astype(np.float64)
    te = torch.linalg.eig(T(A64))
    nb = int(np.prod(A.shape[:-2]))
    tL, tV = te.eigenvalues.numpy().reshape(nb, n), te.eigenvectors.numpy().reshape(nb, n, n)
    Ab = A64.reshape(nb, n, n)

    def chk(got):
        gl = got[0] if vecs else got
        if dtype_name(gl) != pn:
            return f"eigenvalues' part dtype {dtype_name(gl)} != {pn}"
        gl = to_np(gl).astype(np.float64)
        if gl.shape != A.shape[:-1] + (2,):
            return f"eigenvalues' real view has shape {gl.shape}, expected {A.shape[:-1] + (2,)}"
        L = (gl[..., 0] + 1j * gl[..., 1]).reshape(nb, n)
        eps = EPS[dt]
        for b in range(L.shape[0]):
            norm = np.linalg.norm(Ab[b]) + 1e-300
            cond = np.linalg.norm(np.linalg.inv(tV[b]), axis=1) * np.linalg.norm(tV[b], axis=0)
            used = set()
            for i in range(n):
                d = np.abs(L[b] - tL[b, i])
                d[list(used)] = np.inf
                k = int(np.argmin(d))
                used.add(k)
                if d[k] > 200 * eps * norm * cond[i] + 1e-300:
                    return f"batch {b}: torch's eigenvalue {tL[b, i]} has no match (nearest {L[b, k]}, cond {cond[i]:.3g})"
        if not vecs:
            return None
        gv = to_np(got[1]).astype(np.float64)
        if gv.shape != A.shape + (2,):
            return f"eigenvectors' real view has shape {gv.shape}"
        V = (gv[..., 0] + 1j * gv[..., 1]).reshape(nb, n, n)
        for b in range(V.shape[0]):
            norm = np.linalg.norm(Ab[b]) + 1e-300
            res = np.linalg.norm(Ab[b] @ V[b] - V[b] * L[b][None, :])
            if res > 200 * n * eps * norm:
                return f"batch {b}: |A V - V diag(L)| = {res:.3g} (|A| = {norm:.3g})"
            cn = np.linalg.norm(V[b], axis=0)
            if n and np.abs(cn - 1).max() > 100 * eps * n:
                return f"batch {b}: eigenvector norms {cn}"
            for j in range(n):
                gap = np.sort(np.abs(tL[b] - L[b, j]))[1] if n > 1 else np.inf
                if gap < 1e-2 * norm:
                    continue
                i = int(np.argmin(np.abs(tL[b] - L[b, j])))
                ov = abs(np.vdot(tV[b][:, i], V[b][:, j]))
                if abs(ov - 1) > 1e3 * eps * norm / gap:
                    return f"batch {b}: vector {j} is not torch's up to a phase (|<v_torch, v>| = {ov})"
        return None
    return chk


def eig_values(b):
    for dt in (np.float32, np.float64):
        tn = "f32" if dt == np.float32 else "f64"
        for shape in [(1, 1), (2, 2), (5, 5), (3, 4, 4), (2, 3, 6, 6), (0, 3, 3), (2, 0, 0), (0, 0)]:
            s = "x".join(map(str, shape))
            A = r(*shape, dt=dt)
            b.case(f"eig_{tn}_{s}", f"e = linalg.eig({b.inp(A)})\nlist(view_as_real(e.eigenvalues), view_as_real(e.eigenvectors))",
                   eig_check(A, True), dtype=False)
            b.case(f"eigvals_{tn}_{s}", f"view_as_real(linalg.eigvals({b.inp(A)}))", eig_check(A, False), dtype=False)
        # non-contiguous: the transpose of a batch, and a strided slice
        A = r(3, 5, 5, dt=dt)
        b.case(f"eig_{tn}_transposed", f"e = linalg.eig(transpose({b.inp(A)}))\nlist(view_as_real(e.eigenvalues), view_as_real(e.eigenvectors))",
               eig_check(np.ascontiguousarray(np.swapaxes(A, -1, -2)), True), dtype=False)
        A2 = r(4, 8, 8, dt=dt)
        b.case(f"eig_{tn}_strided", f"e = linalg.eig({b.inp(A2)}[0:4:2, 0:8:2, 1:8:2])\nlist(view_as_real(e.eigenvalues), view_as_real(e.eigenvectors))",
               eig_check(np.ascontiguousarray(A2[0:4:2, 0:8:2, 1:8:2]), True), dtype=False)
        # complex pairs: a rotation-like block; a defective-ish (nearly Jordan) matrix
        R = np.array([[1.0, -2.0, 0.3], [3.0, 1.0, 0.1], [0.0, 0.2, -0.5]], dtype=dt)
        b.case(f"eig_{tn}_pairs", f"e = linalg.eig({b.inp(R)})\nlist(view_as_real(e.eigenvalues), view_as_real(e.eigenvectors))", eig_check(R, True), dtype=False)
        J = np.array([[2.0, 1.0, 0.0], [0.0, 2.0, 1.0], [1e-6, 0.0, 2.0]], dtype=dt)
        b.case(f"eig_{tn}_near_jordan", f"e = linalg.eig({b.inp(J)})\nlist(view_as_real(e.eigenvalues), view_as_real(e.eigenvectors))", eig_check(J, True), dtype=False)
        b.case(f"eig_{tn}_dtype", f"e = linalg.eig({b.inp(r(3, 3, dt=dt))})\nlist(e.eigenvalues.dtype, e.eigenvectors.dtype)",
               ["c64", "c64"] if dt == np.float32 else ["c128", "c128"], dtype=False)
    # the eigenvalues are exactly conjugate pairs (geev's), so a real matrix's spectrum is closed under conj
    P = r(6, 6)
    b.case("eig_conj_closed", f"l = linalg.eigvals({b.inp(P)})\nlist(sum(real(l)).item(), sum(imag(l)).item())",
           [float(np.trace(P)), 0.0], rtol=1e-9, atol=1e-9, dtype=False)


def eig_gradients(b):
    """Losses invariant to the eigenvalues' order and the eigenvectors' phases
    (what torch differentiates), f64 against torch's autograd."""
    def one(name, nb_loss, t_loss, A):
        ta = T(A, requires_grad=True)
        t_loss(ta).backward()
        b.case(name, f"f = fn(a) {{\n{nb_loss}\n}}\ngrad(f)({b.inp(A)})", ta.grad, rtol=1e-8, atol=1e-8)
    w = r(5)
    vals = ("l = linalg.eigvals(a)\nsum(real(l) * real(l) + imag(l) * imag(l) * 0.5 + real(l) * imag(l) * imag(l))",
            lambda a: (lambda l: (l.real ** 2 + 0.5 * l.imag ** 2 + l.real * l.imag ** 2).sum())(torch.linalg.eigvals(a)))
    def vecs_of(w):
        return (f"e = linalg.eig(a)\nv = e.eigenvectors\nm = real(v) * real(v) + imag(v) * imag(v)\n"
                f"sum(sum(m * unsqueeze({b.inp(w)}, -1), -2) * (1 + real(e.eigenvalues) * 0.1))",
                lambda a: (lambda e: ((e.eigenvectors.abs() ** 2 * T(w).to(a.dtype).unsqueeze(-1)).sum(-2) * (1 + 0.1 * e.eigenvalues.real)).sum())(torch.linalg.eig(a)))
    vecs = vecs_of(w)
    for s, A in [("5x5", r(5, 5)), ("2x3x5x5", r(2, 3, 5, 5)), ("pairs", np.array([[1.0, -2.0, 0.3, 0, 0], [3.0, 1.0, 0.1, 0, 0], [0.0, 0.2, -0.5, 1, 0], [0, 0, 0, 2, 1], [0.5, 0, 0, -1, 2]]))]:
        one(f"grad_eigvals_{s}", vals[0], vals[1], A)
        one(f"grad_eig_vectors_{s}", vecs[0], vecs[1], A)
    one("grad_eig_values_field", "sum(real(linalg.eig(a).eigenvalues) * 2 + imag(linalg.eig(a).eigenvalues) * imag(linalg.eig(a).eigenvalues))",
        lambda a: (lambda l: (2 * l.real + l.imag ** 2).sum())(torch.linalg.eig(a).eigenvalues), r(4, 4))
    one("grad_eig_1x1", vals[0], vals[1], r(1, 1))
    # f32: the c64 backward (cgemm, cgetrf/cgetrs) against torch's f64 autograd, on matrices with well
    # separated eigenvalues (a random orthogonal similarity of 1, 2.5, 4, 5.5, plus a non-normal part)
    Q = np.linalg.qr(r(3, 4, 4))[0]
    A32 = (Q @ np.diag([1.0, 2.5, 4.0, 5.5]) @ np.swapaxes(Q, -1, -2) + 0.3 * r(3, 4, 4)).astype(np.float32)
    for nm, (nb_l, t_l) in (("vals", vals), ("vectors", vecs_of(r(4, dt=np.float32)))):
        ta = T(A32.astype(np.float64), requires_grad=True)
        t_l(ta).backward()
        b.case(f"grad_eig_{nm}_f32", f"f = fn(a) {{\n{nb_l}\n}}\ngrad(f)({b.inp(A32)})", ta.grad.float(), rtol=1e-3, atol=1e-3)
    one("grad_eig_transposed", vals[0].replace("eigvals(a)", "eigvals(transpose(a))"), lambda a: vals[1](a.mT), r(4, 4))
    # errors: the loss depends on the eigenvectors' phases; repeated eigenvalues with vector gradients
    R = np.array([[1.0, -2.0], [3.0, 1.0]])
    b.error("eig_grad_phase_dependent", f"grad(fn(a) sum(real(linalg.eig(a).eigenvectors)))({b.inp(R)})", ["linalg.eig", "e^{i phi}"])
    b.error("eig_grad_repeated", f"grad(fn(a) {{ v = linalg.eig(a).eigenvectors\nsum(real(v) * real(v)) }})({b.inp(np.eye(3))})",
            ["linalg.eig", "repeated eigenvalues"])
    b.error("eig_grad_inplace_after", f"f = fn(a) {{ l = linalg.eigvals(a)\nl += 1\nsum(real(l) * real(l)) }}\ngrad(f)({b.inp(R)})",
            ["LinalgEigBackward(L)", "modified in place"])
    b.case("eig_grad_repeated_values_ok", f"grad(fn(a) sum(real(linalg.eigvals(a))))({b.inp(np.eye(3))})", torch.eye(3, dtype=torch.float64), **F64)
    # argument errors
    b.error("eig_not_square", f"linalg.eig({b.inp(r(3, 4))})", ["linalg.eig", "square"])
    b.error("eigvals_int", f"linalg.eigvals({b.inp(np.eye(3, dtype=np.int64))})", ["linalg.eigvals", "f32 or f64"])
    N = r(2, 3, 3)
    N[1, 0, 2] = np.nan
    b.error("eig_nan", f"linalg.eig({b.inp(N)})", ["linalg.eig", "infs or NaNs"])
    N[1, 0, 2] = np.inf
    b.error("eigvals_inf", f"linalg.eigvals({b.inp(N)})", ["linalg.eigvals", "infs or NaNs"])


def main():
    subset = os.environ.get("LINALG_SUBSET") == "1"
    if not subset:
        b = Batch("linalg"); values(b); b.run()
        b = Batch("linalg_grad"); gradients(b); b.run()
        b = Batch("linalg_fd"); finite_differences(b); b.run()
        b = Batch("linalg_err"); errors(b); b.run()
        b = Batch("linalg_eig"); eig_values(b); eig_gradients(b); b.run()
    else:
        # the emulated device: a cross-section (each kernel, each backward kind, the errors)
        b = Batch("linalg_dev"); device_subset(b); b.run()
        if DEVICE == "cuda":
            batched_path_counts()
    if DEVICE == "cpu" and not emulated_rerun(__file__, "linalg", "LINALG_SUBSET"):
        report_fail("linalg.emulated", "the emulated-device run failed (its lines above)")
    finish()


def device_subset(b):
    A = wellcond(2, 3, 3)
    b.case("inv", f"linalg.inv({b.inp(A)})", torch.linalg.inv(T(A)), **F64)
    b.case("det", f"linalg.det({b.inp(A)})", torch.linalg.det(T(A)), **F64)
    B = r(2, 3, 2)
    b.case("solve", f"linalg.solve({b.inp(A)}, {b.inp(B)})", torch.linalg.solve(T(A), T(B)), **F64)
    S = spd(2, 3, 3, dt=np.float32)
    b.case("cholesky_f32", f"linalg.cholesky({b.inp(S)})", torch.linalg.cholesky(T(S)), **F32)
    H = sym(2, 3, 3)
    b.case("eigvalsh", f"linalg.eigvalsh({b.inp(H)})", torch.linalg.eigvalsh(T(H)), **F64)
    X = r(4, 3)
    b.case("svdvals", f"linalg.svdvals({b.inp(X)})", torch.linalg.svdvals(T(X)), **F64)
    b.case("qr_reconstruct", f"q = linalg.qr({b.inp(X)})\nq.Q @ q.R", T(X), **F64)
    b.case("cholesky_upper", f"linalg.cholesky({b.inp(S)}, upper=true)", torch.linalg.cholesky(T(S), upper=True), **F32)
    H2 = sym(2, 4, 4)
    b.case("eigh_vectors", f"e = linalg.eigh({b.inp(H2)}, UPLO=\"U\")\nlist({b.inp(H2)} @ e.eigenvectors - e.eigenvectors * unsqueeze(e.eigenvalues, -2), e.eigenvalues)",
           [torch.zeros(2, 4, 4, dtype=torch.float64), torch.linalg.eigvalsh(T(H2), UPLO="U")], **F64)
    for shape in [(2, 4, 3), (2, 3, 5)]:
        s = "x".join(map(str, shape))
        X2 = r(*shape)
        m, n = shape[-2:]
        b.case(f"svd_reduced_{s}", f"d = linalg.svd({b.inp(X2)}, full_matrices=false)\nlist((d.U * unsqueeze(d.S, -2)) @ d.Vh, d.S)",
               [T(X2), torch.linalg.svdvals(T(X2))], **F64)
        b.case(f"svd_full_{s}", f"d = linalg.svd({b.inp(X2)})\nlist(transpose(d.U) @ d.U, d.Vh @ transpose(d.Vh), (d.U[\"...\", 0:{min(m, n)}] * unsqueeze(d.S, -2)) @ d.Vh[\"...\", 0:{min(m, n)}, 0:{n}])",
               [torch.eye(m, dtype=torch.float64).expand(2, m, m), torch.eye(n, dtype=torch.float64).expand(2, n, n), T(X2)], **F64)
        b.case(f"qr_complete_{s}", f"q = linalg.qr({b.inp(X2)}, mode=\"complete\")\nlist(q.Q @ q.R, abs(q.R))",
               [T(X2), torch.linalg.qr(T(X2), mode="complete").R.abs()], **F64)
    NP = spd(3, 3, 3)
    NP[1] = -NP[1]
    b.error("cholesky_not_pd", f"linalg.cholesky({b.inp(NP)})", ["not positive-definite", "batch element [1]"])
    b.case("cholesky_ex_info", f"linalg.cholesky_ex({b.inp(NP)}).info", torch.linalg.cholesky_ex(T(NP)).info)
    gcase(b, "grad_inv", "linalg.inv(p0)", torch.linalg.inv, [A])
    gcase(b, "grad_cholesky", "linalg.cholesky(p0)", torch.linalg.cholesky, [spd(3, 3)])
    gcase(b, "grad_eigh", "linalg.eigh(p0).eigenvalues", lambda a: torch.linalg.eigh(a).eigenvalues, [H])
    gcase(b, "grad_svdvals", "linalg.svdvals(p0)", torch.linalg.svdvals, [X])
    Sg = r(3, 3, 3)
    Sg[2, :, 1] = 0
    b.error("inv_singular", f"linalg.inv({b.inp(Sg)})", ["singular", "batch element [2]"])
    eig_device_subset(b)
    batched_subset(b)


def eig_device_subset(b):
    """linalg_geev on the device (cuSOLVER's Xgeev; the emulated stand-in runs
    LAPACK's geev with the real call's checks); its backward there is composed
    from the device's ops (tensor/linalg/leigcomp.c): every gradient and error
    case of the CPU's, against torch."""
    for dt in (np.float32, np.float64):
        tn = "f32" if dt == np.float32 else "f64"
        A = r(2, 3, 5, 5, dt=dt)
        b.case(f"eig_{tn}", f"e = linalg.eig({b.inp(A)})\nlist(view_as_real(e.eigenvalues), view_as_real(e.eigenvectors))",
               eig_check(A, True), dtype=False)
        b.case(f"eigvals_{tn}", f"view_as_real(linalg.eigvals({b.inp(A)}))", eig_check(A, False), dtype=False)
    R = np.array([[1.0, -2.0, 0.3], [3.0, 1.0, 0.1], [0.0, 0.2, -0.5]])
    b.case("eig_pairs", f"e = linalg.eig({b.inp(R)})\nlist(view_as_real(e.eigenvalues), view_as_real(e.eigenvectors))", eig_check(R, True), dtype=False)
    b.case("eig_on_device", f"e = linalg.eig({b.inp(R)})\nlist(e.eigenvalues.device, e.eigenvectors.device, e.eigenvectors.dtype)",
           [DEVICE, DEVICE, "c128"], dtype=False)
    b.case("eig_empty", f"view_as_real(linalg.eigvals({b.inp(r(2, 0, 0))}))", eig_check(r(2, 0, 0), False), dtype=False)
    N = r(3, 3)
    N[1, 1] = np.nan
    b.error("eig_nan", f"linalg.eig({b.inp(N)})", ["linalg.eig", "infs or NaNs"])
    eig_gradients(b)
    b.case("eig_grad_on_device", f"grad(fn(a) sum(real(linalg.eigvals(a))))({b.inp(R)}).device", DEVICE, dtype=False)


def batched_path_counts():
    """solver.cu's rule, seen in cuda.stats(): the batched calls launch the
    pointer-array kernel under the op (getrf: one launch, the looped cuSOLVER
    calls none; potrf: two, the looped one only its triangle-zeroing kernel),
    for 8 matrices of order 64, never for 7 matrices or order 65; gesvdjBatched
    (m, n <= 32) one launch (cutting the reduced factors out of its full ones),
    the looped square gesvd none: 8 matrices of order 32, never 7 or order 33."""
    code = """set_default_device("cuda")
f = fn(k, n, op) {
  a = randn([k, n, n]) + 2.0 * sqrt(n) * eye(n)
  s = a @ transpose(a) + eye(n)
  cuda.synchronize()
  cuda.reset_stats()
  if op == "linalg_getrf" { x = linalg.inv(a) } else if op == "linalg_gesdd" { x = linalg.svd(a, full_matrices=false) } else { x = linalg.cholesky(s) }
  cuda.synchronize()
  c = cuda.stats()
  if has(c.by_op, op) { c.by_op[op] } else { 0 }
}
print("lincounts", f(8, 64, "linalg_getrf"), f(7, 64, "linalg_getrf"), f(8, 65, "linalg_getrf"), f(8, 64, "linalg_potrf"), f(7, 64, "linalg_potrf"), f(9, 65, "linalg_potrf"),
      f(8, 32, "linalg_gesdd"), f(7, 32, "linalg_gesdd"), f(8, 33, "linalg_gesdd"))
"""
    rc, so, se = run_nabla(code, timeout=600)
    line = next((ln for ln in so.splitlines() if ln.startswith("lincounts ")), None)
    if rc != 0 or line is None:
        report_fail("linalg.batched_path_counts", f"rc {rc}: {se[-400:]} {so[-200:]}")
        return
    got = line.split()[1:]
    check("linalg.batched_rule", got == ["1", "0", "0", "2", "1", "1", "1", "0", "0"],
          f"expected getrf 1 0 0, potrf 2 1 1, gesdd 1 0 0 (batched, looped, looped): {line}")


def svd_batched_subset(b):
    """Many small SVDs (m, n <= 32, at least 8): cuSOLVER's gesvdjBatched, any
    shape, full and reduced factors; values vs torch, reconstructions and
    orthogonality (U, V are defined up to sign), and the batched result vs the
    looped one (7 matrices, or order 33) on the same matrices."""
    for dt in (np.float32, np.float64):
        tol, tn = (dict(rtol=1e-4, atol=1e-4) if dt == np.float32 else F64), ("f32" if dt == np.float32 else "f64")
        for shape in [(3, 4, 6, 4), (9, 5, 7), (8, 32, 32), (8, 1, 3)]:
            s = "x".join(map(str, shape))
            X = r(*shape, dt=dt)
            m, n = shape[-2:]
            k = min(m, n)
            bs = shape[:-2]
            eye = lambda j: torch.eye(j, dtype=T(X).dtype).expand(*bs, j, j)   # noqa: E731
            b.case(f"batched_svdvals_{tn}_{s}", f"linalg.svdvals({b.inp(X)})", torch.linalg.svdvals(T(X)), **tol)
            b.case(f"batched_svd_{tn}_{s}", f"d = linalg.svd({b.inp(X)}, full_matrices=false)\n"
                   f"list((d.U * unsqueeze(d.S, -2)) @ d.Vh, d.S, transpose(d.U) @ d.U, d.Vh @ transpose(d.Vh))",
                   [T(X), torch.linalg.svdvals(T(X)), eye(k), eye(k)], **tol)
            b.case(f"batched_svd_full_{tn}_{s}", f"d = linalg.svd({b.inp(X)})\n"
                   f"list(transpose(d.U) @ d.U, d.Vh @ transpose(d.Vh), (d.U[\"...\", 0:{k}] * unsqueeze(d.S, -2)) @ d.Vh[\"...\", 0:{k}, 0:{n}])",
                   [eye(m), eye(n), T(X)], **tol)
        # batched (8 matrices) vs looped (the first 7; order 33 next) on the same matrices: within rounding
        X = r(8, 6, 5, dt=dt)
        b.case(f"batched_vs_looped_svd_{tn}", f"a = {b.inp(X)}\nlist(linalg.svdvals(a)[0:7] - linalg.svdvals(a[0:7]), "
               f"abs(linalg.svd(a, full_matrices=false).U[0:7]) - abs(linalg.svd(a[0:7], full_matrices=false).U))",
               [torch.zeros(7, 5, dtype=T(X).dtype), torch.zeros(7, 6, 5, dtype=T(X).dtype)], **tol)
        Y = r(8, 33, 4, dt=dt)   # order 33: looped; its first 32 rows: batched
        b.case(f"looped_vs_batched_svd_33_{tn}", f"a = {b.inp(Y)}\nlist(linalg.svdvals(a), linalg.svdvals(a[\"...\", 0:32, :]))",
               [torch.linalg.svdvals(T(Y)), torch.linalg.svdvals(T(Y)[..., 0:32, :])], **tol)
    gcase(b, "batched_grad_svd", "d = linalg.svd(p0, full_matrices=false)\n(d.U * unsqueeze(d.S * d.S, -2)) @ d.Vh",
          lambda a: (lambda d: (d.U * (d.S * d.S).unsqueeze(-2)) @ d.Vh)(torch.linalg.svd(a, full_matrices=False)), [r(8, 4, 3)])
    gcase(b, "batched_grad_svdvals_wide", "linalg.svdvals(p0)", torch.linalg.svdvals, [r(2, 4, 3, 5)])
    b.case("batched_svd_empty_rows", f"linalg.svdvals({b.inp(r(8, 0, 3))})", torch.linalg.svdvals(T(r(8, 0, 3))), **F64)


def batched_subset(b):
    """Many small matrices: cuBLAS's batched LU and cuSOLVER's potrfBatched
    (cuda/solver.cu's rule: at least 8 matrices of order at most 64), f32/f64,
    with a singular / non-positive-definite matrix inside the batch."""
    for dt in (np.float32, np.float64):
        tol, tn = (F32 if dt == np.float32 else F64), ("f32" if dt == np.float32 else "f64")
        A = wellcond(3, 4, 6, 6, dt=dt)
        Bm = r(3, 4, 6, 2, dt=dt)
        b.case(f"batched_solve_{tn}", f"linalg.solve({b.inp(A)}, {b.inp(Bm)})", torch.linalg.solve(T(A), T(Bm)), **tol)
        b.case(f"batched_inv_{tn}", f"linalg.inv({b.inp(A)})", torch.linalg.inv(T(A)), **tol)
        b.case(f"batched_det_{tn}", f"linalg.det({b.inp(A)})", torch.linalg.det(T(A)), **tol)
        sl = torch.linalg.slogdet(T(A))
        b.case(f"batched_slogdet_{tn}", f"d = linalg.slogdet({b.inp(A)})\nlist(d.sign, d.logabsdet)", [sl.sign, sl.logabsdet], **tol)
        Ab = wellcond(12, 5, 5, dt=dt)
        Xt = r(12, 5, 3, dt=dt)
        b.case(f"batched_solve_left_T_{tn}", f"linalg.solve(transpose({b.inp(Ab)}), {b.inp(Xt)})", torch.linalg.solve(T(Ab).mT, T(Xt)), **tol)
        S = spd(10, 7, 7, dt=dt)
        b.case(f"batched_cholesky_{tn}", f"linalg.cholesky({b.inp(S)})", torch.linalg.cholesky(T(S)), **tol)
        b.case(f"batched_cholesky_upper_{tn}", f"linalg.cholesky({b.inp(S)}, upper=true)", torch.linalg.cholesky(T(S), upper=True), **tol)
        NP = spd(9, 4, 4, dt=dt)
        NP[6] = -NP[6]
        b.error(f"batched_cholesky_not_pd_{tn}", f"linalg.cholesky({b.inp(NP)})", ["not positive-definite", "batch element [6]"])
        b.case(f"batched_cholesky_ex_info_{tn}", f"linalg.cholesky_ex({b.inp(NP)}).info", torch.linalg.cholesky_ex(T(NP)).info)
        Sg = wellcond(2, 5, 4, 4, dt=dt)
        Sg[1, 3, :, 2] = 0
        b.error(f"batched_inv_singular_{tn}", f"linalg.inv({b.inp(Sg)})", ["singular", "batch element [1, 3]"])
        b.case(f"batched_det_singular_{tn}", f"linalg.det({b.inp(Sg)})", torch.linalg.det(T(Sg)), **tol)
        # which zero pivot info names depends on the factorization's order (torch's inv_ex says 4 where its
        # lu_factor_ex and LAPACK's getrf say 3 for this matrix): which matrices are singular does not
        b.case(f"batched_inv_ex_info_{tn}", f"linalg.inv_ex({b.inp(Sg)}).info > 0", torch.linalg.inv_ex(T(Sg)).info > 0)
    for dt in (np.float32, np.float64):   # eigh of order <= 32: syevjBatched
        tol, tn = (dict(rtol=1e-4, atol=1e-4) if dt == np.float32 else F64), ("f32" if dt == np.float32 else "f64")
        H = sym(3, 4, 6, 6, dt=dt)
        Hd = H.astype(np.float64)
        b.case(f"batched_eigvalsh_{tn}", f"linalg.eigvalsh({b.inp(H)}, UPLO=\"U\")", torch.linalg.eigvalsh(T(H), UPLO="U"), **tol)
        b.case(f"batched_eigh_{tn}", f"e = linalg.eigh({b.inp(H)})\nlist({b.inp(H)} @ e.eigenvectors - e.eigenvectors * unsqueeze(e.eigenvalues, -2), "
               f"transpose(e.eigenvectors) @ e.eigenvectors, e.eigenvalues)",
               [torch.zeros(3, 4, 6, 6, dtype=T(H).dtype), torch.eye(6, dtype=T(H).dtype).expand(3, 4, 6, 6), torch.linalg.eigvalsh(T(Hd)).to(T(H).dtype)], **tol)
    svd_batched_subset(b)
    gcase(b, "batched_grad_eigh", "linalg.eigh(p0).eigenvalues", lambda a: torch.linalg.eigh(a).eigenvalues, [sym(8, 4, 4)])
    gcase(b, "batched_grad_solve", "linalg.solve(p0, p1)", torch.linalg.solve, [wellcond(9, 3, 3), r(9, 3, 2)])
    gcase(b, "batched_grad_cholesky", "linalg.cholesky(p0)", torch.linalg.cholesky, [spd(8, 3, 3)])
    # more matrices than one batched call takes (65536): two calls
    A2 = wellcond(65536 + 5, 2, 2)
    b.case("batched_inv_two_calls", f"linalg.inv({b.inp(A2)})", torch.linalg.inv(T(A2)), **F64)


if __name__ == "__main__":
    main()
