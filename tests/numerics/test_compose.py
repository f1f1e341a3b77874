#!/usr/bin/python3
"""einsum, masked_fill, norm, view and multinomial vs torch on fresh random
inputs (f64): values and gradients (loss = sum(f(...) * W) with random W),
broadcasting "...", implicit outputs, diagonals, several operands, the error
cases; multinomial by its sample frequencies (a chi-square bound that a
correct sampler fails with probability < 1e-6) and its distinctness without
replacement.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_compose.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, T, finish, rng, torch, np  # noqa: E402

TOL = dict(rtol=1e-9, atol=1e-11)


def r(*shape):
    return rng.standard_normal(shape)


def gcase(b, name, nb_expr, torch_fn, inputs, tol=TOL):
    """nb_expr over p0, p1, ...; value and gradients of every input vs torch."""
    tin = [T(a.copy(), requires_grad=True) for a in inputs]
    out = torch_fn(*tin)
    W = rng.standard_normal(tuple(out.shape))
    (out * T(W)).sum().backward()
    params = ", ".join(f"p{i}" for i in range(len(inputs)))
    exprs = ", ".join(b.inp(a) for a in inputs)
    argn = ", ".join(str(i) for i in range(len(inputs)))
    code = (f"f = fn({params}) {nb_expr}\n"
            f"list(f({exprs}), grad(fn({params}) sum(f({params}) * {b.inp(W)}), argnums=list({argn}))({exprs}))")
    b.case(name, code, [out.detach(), [t.grad for t in tin]], **tol)


def einsum_cases(b):
    eqs = [
        ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij,jk", [(3, 4), (4, 2)]),
        ("i,i->", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]), ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]),
        ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("...ij,...jk", [(5, 1, 3, 4), (2, 4, 6)]),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("abc,cd,da->b", [(2, 3, 4), (4, 5), (5, 2)]),
        ("ijk,ik->j", [(3, 4, 5), (3, 5)]), ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
        ("i...->...", [(3, 2, 4)]), ("ij,ij->ij", [(3, 4), (3, 4)]), ("iij->j", [(3, 3, 2)]),
    ]
    for eq, shapes in eqs:
        inputs = [r(*s) for s in shapes]
        gcase(b, f"einsum_{eq}", f'einsum("{eq}", {", ".join(f"p{i}" for i in range(len(shapes)))})',
              lambda *t, eq=eq: torch.einsum(eq, *t), inputs)
    a, c = r(3, 4), r(5, 6)
    b.error("einsum_size_mismatch", f'einsum("ij,jk->ik", {b.inp(a)}, {b.inp(c)})', ["'j'", "4", "5"])
    b.error("einsum_operand_count", f'einsum("ij,jk->ik", {b.inp(a)})', ["2 subscripts", "1 operand"])
    b.error("einsum_rank_mismatch", f'einsum("ijk->i", {b.inp(a)})', ["3 letters", "2 dimensions"])
    b.error("einsum_output_unknown", f'einsum("ij->iz", {b.inp(a)})', ["'z'", "no operand"])
    b.error("einsum_bad_char", f'einsum("i1->i", {b.inp(a)})', ["letters"])


def masked_fill_norm_view(b):
    x, m = r(3, 4), rng.random((3, 4)) > 0.5
    gcase(b, "masked_fill", f"masked_fill(p0, {b.inp(m)}, -2.5)",
          lambda t: t.masked_fill(torch.from_numpy(m), -2.5), [x])
    mrow = rng.random((1, 4)) > 0.5
    gcase(b, "masked_fill_broadcast_mask", f"masked_fill(p0, {b.inp(mrow)}, 7)",
          lambda t: t.masked_fill(torch.from_numpy(mrow), 7), [x])
    b.error("masked_fill_mask_dtype", f"masked_fill({b.inp(x)}, {b.inp(x)}, 0)", ["bool"])
    for p, tp in ((2, 2), (1, 1), (3, 3), ("inf", float("inf")), ("-inf", float("-inf")), (0.5, 0.5)):
        for axis, keep in ((None, False), (1, False), (0, True), ((0, 1), False)):
            pv = {"inf": "1/0", "-inf": "-1/0"}.get(p, p) if isinstance(p, str) else p
            ax = "nil" if axis is None else (f"list{axis}" if isinstance(axis, tuple) else axis)
            gcase(b, f"norm_p{p}_axis{axis}_{keep}", f"norm(p0, {pv}, axis={ax}, keepdim={'true' if keep else 'false'})",
                  lambda t, tp=tp, axis=axis, keep=keep: torch.linalg.vector_norm(t, tp, dim=axis, keepdim=keep), [r(3, 4) + 0.1])
    b.case("norm_p0_counts", f"norm({b.inp(np.array([0.0, 1.5, 0.0, -2.0]))}, 0)", torch.tensor(2.0, dtype=torch.float64))
    z = np.zeros((2, 3))
    z[1] = r(3)
    tz = T(z.copy(), requires_grad=True)
    torch.linalg.vector_norm(tz, 2, dim=1).sum().backward()
    b.case("norm_grad_zero_row_is_zero", f"grad(fn(p) sum(norm(p, axis=1)))({b.inp(z)})", tz.grad)
    b.error("norm_int", "norm(tensor([1, 2]))", ["floating"])
    y = r(2, 3, 4)
    b.case("view_values", f"view({b.inp(y)}, 6, 4)", T(y).view(6, 4))
    b.case("view_list_and_infer", f"view({b.inp(y)}, [4, -1])", T(y).view(4, -1))
    b.case("view_shares_memory", f"v = clone({b.inp(y)})\nw = view(v, 24)\nw[0] = 100\nv[0, 0, 0].item()", 100.0, dtype=False)
    b.error("view_needs_copy", f"view(transpose({b.inp(y)}, 0, 2), 24)", ["view", "without a copy", "reshape"])
    gcase(b, "view_grad", "view(p0, 3, 8) * 2", lambda t: t.view(3, 8) * 2, [y])


def multinomial_cases(b):
    K, N = 6, 60000
    p = rng.random(K) + 0.05
    p[2] = 0.0
    q = p / p.sum()
    probs = b.inp(p)

    def chi2_ok(got):
        counts = np.bincount(np.asarray(got, dtype=np.int64).ravel(), minlength=K)
        if counts[2] != 0:
            return f"category with probability 0 drawn {counts[2]} times"
        e = q * N
        nzc = e > 0
        chi2 = float((((counts - e) ** 2)[nzc] / e[nzc]).sum())
        # 4 degrees of freedom (5 non-zero categories); P(chi2 > 40) < 1e-7
        return None if chi2 < 40 else f"chi-square {chi2:.1f} for counts {counts.tolist()} vs expected {np.round(e).tolist()}"
    b.case("multinomial_replacement_frequencies", f"multinomial({probs}, {N}, replacement=true)", chi2_ok)
    rows = np.stack([rng.random(K) + 0.05 for _ in range(3)])

    def distinct_ok(got):
        g = np.asarray(got)
        if g.shape != (3, 4) or g.dtype != np.int64:
            return f"shape {g.shape} dtype {g.dtype}"
        if any(len(set(row.tolist())) != 4 for row in g):
            return f"repeated categories without replacement: {g.tolist()}"
        return None
    b.case("multinomial_no_replacement_distinct", f"multinomial({b.inp(rows)}, 4)", distinct_ok, dtype=False)
    # without replacement, n = 1 draws are distributed as the weights too
    b.case("multinomial_no_replacement_first_draw",
           f"x = multinomial(unsqueeze({probs}, 0).expand([{N}, {K}]).contiguous(), 1)\nreshape(x, [-1])", chi2_ok, dtype=False)
    b.error("multinomial_negative", "multinomial(tensor([0.5, -0.1]), 1)", ["negative"])
    b.error("multinomial_zero_row", "multinomial(tensor([0.0, 0.0]), 1)", ["sums to 0"])
    b.error("multinomial_too_many", "multinomial(tensor([0.5, 0.5, 0.0]), 3)", ["without replacement", "3", "2"])


def main():
    b = Batch("compose")
    einsum_cases(b)
    masked_fill_norm_view(b)
    multinomial_cases(b)
    b.run()
    finish()


if __name__ == "__main__":
    main()
