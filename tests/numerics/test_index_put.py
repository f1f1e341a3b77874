#!/usr/bin/python3
"""Assignment through integer-tensor indices (x[idx] = v, x[idx, 2] = v,
x[:, idx] = 0, x[1, mask] = v), index_put(x, idx, v, accumulate=...), and the
reading forms they share (x[2, :, idx]) vs PyTorch, on fresh random inputs.

- forward: 1-D..4-D tensors, every index form (a tensor index among ints,
  slices, steps, nil and "..."; 1-D and 2-D integer indices of i64/i32/u8,
  negative indices, bool masks), v of the region's shape, broadcast, a 0-d
  tensor or a number; dtypes f32/f64/f16/i32/i64/bool.  Without repeated
  indices the reference is torch's own x[...] = v; with repeats (undefined
  in torch) it is a loop writing index by index, so the LAST value wins,
  which nabla guarantees on every device;
- accumulate (index_put(..., accumulate=true)): repeats add up, vs a loop of
  += and torch.index_put(accumulate=True);
- gradients (f64) of x and v vs torch.autograd, repeats included (torch 1.13
  on the CPU gives every repeated index its gradient g[idx]; so does nabla);
- version counters, no_grad, and the errors (out of range naming axis, size
  and index; shape mismatch; float index; leaf requiring grad; mask shape).

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_index_put.py
(also under the ASan build: NABLA_ASAN=1 trims the random forms).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import GRADCHECK_NBL, Batch, T, finish, rng, torch, np  # noqa: E402

ASAN = os.environ.get("NABLA_ASAN") == "1"
TOL = dict(rtol=1e-9, atol=1e-10)

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64, "bool": np.bool_}


# ------------------------------------------------------------------ index forms
# A form is a list of entries: an int, a slice string ("1:3", "::2", ":"),
# "..." (ellipsis), None (nil / newaxis) or "I" (the tensor index).
def nb_form(form, iexpr, as_list=False):
    """nabla index entries; as_list: for index_put's list argument, where a
    slice "a:b" is the range a..b (both bounds needed)"""
    out = []
    for e in form:
        if e == "I":
            out.append(iexpr)
        elif e == "...":
            out.append('"..."')
        elif e is None:
            out.append("nil")
        elif as_list and isinstance(e, str):
            lo, hi = e.split(":")
            out.append(f"{lo}..{hi}")
        else:
            out.append(str(e))
    return ", ".join(out)


def py_entry(e):
    if e == "...":
        return Ellipsis
    if isinstance(e, str):
        parts = [int(p) if p else None for p in e.split(":")]
        return slice(*parts)
    return e


def py_form(form, idx):
    return tuple(idx if e == "I" else py_entry(e) for e in form)


def tensor_axis(form, ndim, k):
    """(axis of x where the tensor index starts, result dims before it)."""
    consumed = sum(1 for e in form if e not in ("I", "...", None)) + k
    src = out = 0
    for e in form:
        if e == "I":
            return src, out
        if e == "...":
            src += ndim - consumed
            out += ndim - consumed
        elif e is None:
            out += 1
        elif isinstance(e, str):
            src += 1
            out += 1
        else:
            src += 1
    raise ValueError("no tensor entry")


def rand_index(size, shape, dups, itype="i64"):
    m = int(np.prod(shape)) if shape else 1
    if dups:
        p = rng.integers(0, size, size=m)
        p[rng.integers(0, m)] = p[0]                       # at least one repeat when m > 1
    else:
        assert m <= size
        p = rng.permutation(size)[:m]
    if itype != "u8":
        neg = rng.random(m) < 0.4
        p = np.where(neg, p - size, p)                     # negative indices wrap
    return p.reshape(shape).astype({"i64": np.int64, "i32": np.int32, "u8": np.uint8}[itype])


def rand_vals(shape, dt):
    if dt == "bool":
        return rng.random(shape) > 0.5
    if dt in ("i32", "i64"):
        return rng.integers(-50, 50, size=shape).astype(NP[dt])
    return rng.standard_normal(shape).astype(NP[dt])


def loop_put(x, form, idx, v, accumulate):
    """Reference for repeated indices: writes index by index (the last wins), or adds."""
    y = x.clone()
    k = 1
    _, npre = tensor_axis(form, x.dim(), k)
    region = y[py_form(form, torch.as_tensor(idx).long())]
    vb = torch.broadcast_to(v, region.shape).to(y.dtype)
    flat = torch.as_tensor(idx).long().reshape(-1)
    ishape = tuple(np.asarray(idx).shape)
    for j in range(flat.numel()):
        J = np.unravel_index(j, ishape) if ishape else ()
        target = py_form(form, int(flat[j]))
        src = vb[(slice(None),) * npre + tuple(int(a) for a in J)]
        if accumulate:
            y[target] = y[target] + src
        else:
            y[target] = src
    return y


# (x shape, form, index shape) — the forms of the brief and more, 1-D..4-D
FORMS = [
    ((7,), ["I"], (3,)),
    ((7,), ["I"], (2, 3)),
    ((6, 4), ["I"], (3,)),
    ((6, 4), ["I", 2], (4,)),
    ((6, 4), ["I", -1], (2, 2)),
    ((6, 4), [":", "I"], (3,)),
    ((6, 4), ["I", "1:3"], (2,)),
    ((6, 4), ["1:5", "I"], (2,)),
    ((6, 4), ["::2", "I"], (1, 3)),
    ((6, 4), [None, "I"], (3,)),
    ((5, 4, 3), [2, ":", "I"], (2,)),            # torch: the int applies first -> [4, 2]
    ((5, 4, 3), ["I", ":", 1], (3,)),
    ((5, 4, 3), [":", "I", 0], (2,)),
    ((5, 4, 3), ["...", "I"], (2,)),
    ((5, 4, 3), ["I", "..."], (2, 2)),
    ((5, 4, 3), ["...", "I", ":"], (3,)),
    ((5, 4, 3), [-1, "I"], (2, 2)),
    ((3, 4, 5, 6), [":", 1, "I"], (3,)),
    ((3, 4, 5, 6), ["...", "I", "1::2"], (2,)),
    ((3, 4, 5, 6), [1, "1:3", "I", 2], (2, 2)),
    ((3, 4, 5, 6), ["I"], (2,)),
    ((3, 4, 5, 6), [":", ":", ":", "I"], (4,)),
]


def v_shapes(region):
    """the region's shape, broadcastable variants, a 0-d tensor"""
    r = tuple(region)
    out = [r]
    if len(r) >= 1:
        out.append(r[1:])                                  # leading axes broadcast
        out.append(tuple(1 if i % 2 == 0 else d for i, d in enumerate(r)))
    out.append(())
    return out


def forward_forms(b):
    forms = FORMS[::3] if ASAN else FORMS
    for fi, (shape, form, ishape) in enumerate(forms):
        ax, _ = tensor_axis(form, len(shape), 1)
        size = shape[ax]
        for dups in (False, True):
            if not dups and int(np.prod(ishape)) > size:
                continue
            itype = ["i64", "i32", "u8"][fi % 3] if not dups else "i64"
            idx = rand_index(size, ishape, dups, itype)
            xv = rand_vals(shape, "f32")
            tx = T(xv)
            tidx = torch.as_tensor(idx.astype(np.int64))
            region = tx[py_form(form, tidx)].shape
            xs, ii = b.inp(xv), b.inp(idx)
            sel = nb_form(form, ii)
            name = f"{list(shape)}[{sel.replace(ii, 'idx' + str(list(ishape)))}]" + (" dups" if dups else "")
            if not dups:
                b.case(f"read {name} {itype}", f"{xs}[{sel}]", tx[py_form(form, tidx)])
            for vs in v_shapes(region)[: 2 if ASAN else 4]:
                vv = rand_vals(vs, "f32")
                if dups:
                    exp = loop_put(tx, form, idx, T(vv), False)
                else:
                    exp = tx.clone()
                    exp[py_form(form, tidx)] = T(vv)
                b.case(f"put {name} v{list(vs)} {itype}", f"y = clone({xs})\ny[{sel}] = {b.inp(vv)}\ny", exp)
            # a number fills the region
            exp = tx.clone()
            exp[py_form(form, tidx)] = 2.5
            b.case(f"fill {name}", f"y = clone({xs})\ny[{sel}] = 2.5\ny", exp)


def dtypes(b):
    for dt in ("f64", "f16", "i32", "i64", "bool"):
        xv = rand_vals((6, 5), dt)
        idx = rand_index(6, (3,), False)
        vv = rand_vals((3, 5), dt)
        tx = T(xv)
        exp = tx.clone()
        exp[torch.as_tensor(idx)] = T(vv)
        b.case(f"dtype {dt}", f"y = clone({b.inp(xv)})\ny[{b.inp(idx)}] = {b.inp(vv)}\ny", exp)
        cols, cv = rand_index(5, (2,), False), rand_vals((6, 2), dt)
        exp = tx.clone()
        exp[:, torch.as_tensor(cols)] = T(cv)
        b.case(f"dtype {dt} columns", f"y = clone({b.inp(xv)})\ny[:, {b.inp(cols)}] = {b.inp(cv)}\ny", exp)
    # a value of another dtype is cast to the tensor's (like basic assignment)
    xv = rand_vals((5, 3), "f32")
    idx = rand_index(5, (2,), False)
    vv = rng.integers(-9, 9, size=(2, 3))
    exp = T(xv).clone()
    exp[torch.as_tensor(idx)] = T(vv).float()
    b.case("int value into f32", f"y = clone({b.inp(xv)})\ny[{b.inp(idx)}] = {b.inp(vv)}\ny", exp)
    xv = rand_vals((5, 3), "f64")
    exp = T(xv).clone()
    exp[torch.as_tensor(idx)] = 0.1
    b.case("f64 keeps a number's precision", f"y = clone({b.inp(xv)})\ny[{b.inp(idx)}] = 0.1\ny", exp, **TOL)


def masks(b):
    xv = rand_vals((4, 5, 3), "f32")
    tx = T(xv)
    m = rng.random((5,)) > 0.4
    m[0] = True
    cnt = int(m.sum())
    for form, vshape in (([":", "I"], (4, cnt, 3)), ([1, "I"], (cnt, 3)), ([1, "I"], (3,)), (["...", "I", ":"], ())):
        vv = rand_vals(vshape, "f32")
        exp = tx.clone()
        exp[py_form(form, torch.as_tensor(m))] = T(vv)
        sel = nb_form(form, b.inp(m))
        b.case(f"mask put [{sel}] v{list(vshape)}", f"y = clone({b.inp(xv)})\ny[{sel}] = {b.inp(vv)}\ny", exp)
        b.case(f"mask read [{sel}]", f"{b.inp(xv)}[{sel}]", tx[py_form(form, torch.as_tensor(m))])
    # a 2-D mask over the last two axes
    m2 = rng.random((5, 3)) > 0.5
    vv = rand_vals((int(m2.sum()),), "f32")
    exp = tx.clone()
    exp[2, torch.as_tensor(m2)] = T(vv)
    b.case("mask 2-D after an int", f"y = clone({b.inp(xv)})\ny[2, {b.inp(m2)}] = {b.inp(vv)}\ny", exp)
    # a 0-d mask adds an axis of size 1 (true) or 0 (false) where it stands
    for val in (True, False):
        b.case(f"0-d mask {val} read", f"{b.inp(xv)}[1, {b.inp(np.array(val))}]", tx[1, torch.tensor(val)])
        vv = rand_vals((5, 3), "f32")
        exp = tx.clone()
        exp[1, torch.tensor(val)] = T(vv)
        b.case(f"0-d mask {val} put", f"y = clone({b.inp(xv)})\ny[1, {b.inp(np.array(val))}] = {b.inp(vv)}\ny", exp)
    # x[mask] = v alone has torch's meaning (the selected elements in order);
    # the elementwise choice is spelled where(mask, v, x)
    mm = rng.random((4, 5, 3)) > 0.5
    vv = rand_vals((5, 3), "f32")
    b.case("mask alone, the elementwise choice: where", f"where({b.inp(mm)}, {b.inp(vv)}, {b.inp(xv)})",
           torch.where(T(mm), T(vv), tx))
    m3 = np.zeros(60, dtype=bool)
    m3[rng.choice(60, 3, replace=False)] = True       # count == the last dimension (3)
    vv = rand_vals((3,), "f32")
    exp = tx.clone()
    exp[T(m3.reshape(4, 5, 3))] = T(vv)
    b.case("mask alone, count == last dim: torch", f"y = clone({b.inp(xv)})\ny[{b.inp(m3.reshape(4, 5, 3))}] = {b.inp(vv)}\ny", exp)
    vv = rand_vals((int(mm.sum()),), "f32")
    exp = tx.clone()
    exp[T(mm)] = T(vv)
    b.case("mask alone, v of the selection: torch", f"y = clone({b.inp(xv)})\ny[{b.inp(mm)}] = {b.inp(vv)}\ny", exp)
    rows = rng.random((4,)) > 0.5
    rows[1] = True
    vv = rand_vals((int(rows.sum()), 5, 3), "f32")
    exp = tx.clone()
    exp[T(rows)] = T(vv)
    b.case("mask over rows", f"y = clone({b.inp(xv)})\ny[{b.inp(rows)}] = {b.inp(vv)}\ny", exp)


def accumulate(b):
    for dt in ("f32", "f64", "i32", "i64"):
        xv = rand_vals((6, 4), dt)
        idx = rand_index(6, (9,), True)
        vv = rand_vals((9, 4), dt)
        tx, ti = T(xv), torch.as_tensor(idx)
        exp = torch.index_put(tx, (ti,), T(vv), accumulate=True)
        b.case(f"accumulate {dt} (torch.index_put)", f"index_put({b.inp(xv)}, {b.inp(idx)}, {b.inp(vv)}, accumulate=true)", exp)
    forms = [((6, 4), ["0:6", "I"], (5,)), ((5, 4, 3), [2, "0:4", "I"], (2, 2)), ((5, 4, 3), ["...", "I", "1:3"], (6,)),
             ((3, 4, 5, 6), [1, "I"], (7,))]
    for shape, form, ishape in forms:
        ax, _ = tensor_axis(form, len(shape), 1)
        idx = rand_index(shape[ax], ishape, True)
        xv = rand_vals(shape, "f64")
        tx = T(xv)
        region = tx[py_form(form, torch.as_tensor(idx))].shape
        for vs in (tuple(region), ()):
            vv = rand_vals(vs, "f64")
            exp = loop_put(tx, form, idx, T(vv), True)
            sel = nb_form(form, b.inp(idx), as_list=True)
            b.case(f"accumulate {list(shape)}[{form}] v{list(vs)}", f"index_put({b.inp(xv)}, [{sel}], {b.inp(vv)}, accumulate=true)",
                   exp, **TOL)
    # f16 sums in f32 and rounds once
    xv = rand_vals((5, 3), "f16")
    idx = rand_index(5, (8,), True)
    vv = rand_vals((8, 3), "f16")
    exp = torch.index_put(T(xv).float(), (torch.as_tensor(idx),), T(vv).float(), accumulate=True).half()
    b.case("accumulate f16", f"index_put({b.inp(xv)}, {b.inp(idx)}, {b.inp(vv)}, accumulate=true)", exp, rtol=1e-3, atol=1e-3)
    # the functional form leaves x alone; without accumulate the last repeat wins
    xv = rand_vals((6,), "f32")
    idx = np.array([1, 4, 1, -2, 4])
    vv = rand_vals((5,), "f32")
    exp = T(xv).clone()
    exp[1], exp[4] = float(vv[2]), float(vv[4])
    b.case("index_put copy, last repeat wins", f"x = {b.inp(xv)}\ny = index_put(x, {b.inp(idx)}, {b.inp(vv)})\nlist(y, x)",
           [exp, T(xv)])
    # accumulate with basic entries only (a slice region += v)
    xv = rand_vals((4, 5), "f64")
    vv = rand_vals((5,), "f64")
    exp = T(xv).clone()
    exp[1:3] += T(vv)
    b.case("accumulate basic slice", f"index_put({b.inp(xv)}, [1..3], {b.inp(vv)}, accumulate=true)", exp, **TOL)


def duplicates_deterministic(b):
    # the same write twice gives the same result, and it is the last value
    xv = rand_vals((8, 3), "f32")
    idx = np.array([5, 5, 5, -3, 2, 1, 2])
    vv = rand_vals((7, 3), "f32")
    exp = T(xv).clone()
    exp[5] = T(vv[3])                                     # -3 == 5: the 4th write is the last to row 5
    exp[2] = T(vv[6])
    exp[1] = T(vv[5])
    b.case("repeats: the last one wins", f"y = clone({b.inp(xv)})\ny[{b.inp(idx)}] = {b.inp(vv)}\ny", exp)


# ------------------------------------------------------------------ several tensor indices
# (x shape, form with tensor entries "I", "J", "K", their shapes); torch's rule:
# ints apply first, the indices broadcast to B, B replaces their axes in place
# when they are adjacent (ints between do not count), else goes first
MULTI = [
    ((5, 4), ["I", "J"], {"I": (3,), "J": (3,)}),
    ((5, 4), ["I", "J"], {"I": (3, 1), "J": (2,)}),
    ((5, 4, 3), ["I", "J"], {"I": (2, 2), "J": (2, 2)}),
    ((5, 4, 3), [":", "I", "J"], {"I": (3,), "J": (1,)}),
    ((5, 4, 3), ["I", ":", "J"], {"I": (2,), "J": (2,)}),          # not adjacent: B first
    ((5, 4, 3), ["I", 1, "J"], {"I": (3,), "J": (3,)}),            # the int drops first: adjacent
    ((3, 4, 5, 6), [1, "I", None, "J"], {"I": (2,), "J": (2,)}),
    ((3, 4, 5, 6), ["I", "J", "K"], {"I": (3,), "J": (3,), "K": (1,)}),
    ((3, 4, 5, 6), ["...", "I", "J"], {"I": (2, 1), "J": (1, 3)}),
]


def multi_axes(form, ndim):
    """name -> axis of x; and the result dims before B"""
    consumed = sum(1 for e in form if e not in ("...", None))
    src = out = 0
    axes, first_out, names, adjacent, seen_gap = {}, None, [], True, False
    for e in form:
        if isinstance(e, str) and e in "IJK" and len(e) == 1:
            if names and seen_gap:
                adjacent = False
            axes[e] = src
            first_out = out if first_out is None else first_out
            names.append(e)
            src += 1
            seen_gap = False
            continue
        if names and not isinstance(e, int):
            seen_gap = True
        if e == "...":
            src += ndim - consumed
            out += ndim - consumed
        elif e is None:
            out += 1
        elif isinstance(e, str):
            src += 1
            out += 1
        else:
            src += 1
    return axes, (first_out if adjacent else 0)


def multi_py(form, vals):
    return tuple(vals[e] if isinstance(e, str) and e in vals else py_entry(e) for e in form)


def multi_nb(form, exprs):
    return nb_form([e if not (isinstance(e, str) and e in exprs) else "@" + e for e in form], "").replace("@I", exprs.get("I", "")).replace("@J", exprs.get("J", "")).replace("@K", exprs.get("K", ""))


def multi_loop(x, form, idx, v, accumulate):
    """index by index over the broadcast shape: the last write wins, or adds"""
    y = x.clone()
    _, npre = multi_axes(form, x.dim())
    ts = {k: torch.as_tensor(a).long() for k, a in idx.items()}
    region = y[multi_py(form, ts)]
    vb = torch.broadcast_to(v, region.shape).to(y.dtype)
    bs = torch.broadcast_tensors(*ts.values())
    bt = dict(zip(ts.keys(), bs))
    for e in np.ndindex(*bs[0].shape):
        target = multi_py(form, {k: int(t[e]) for k, t in bt.items()})
        src = vb[(slice(None),) * npre + tuple(int(a) for a in e)]
        y[target] = y[target] + src if accumulate else src
    return y


def multi_forms(b):
    for shape, form, shapes in (MULTI[::2] if ASAN else MULTI):
        axes, _ = multi_axes(form, len(shape))
        for dups in (False, True):
            idx = {}
            same = len(set(shapes.values())) == 1
            if not dups and same:              # unique position tuples: decompose distinct flat numbers
                sizes = [shape[axes[k]] for k in shapes]
                m = int(np.prod(next(iter(shapes.values()))))
                flat = rng.permutation(int(np.prod(sizes)))[:m]
                for k, sz in zip(reversed(list(shapes)), reversed(sizes)):
                    idx[k] = (flat % sz).reshape(shapes[k]).astype(np.int64)
                    flat = flat // sz
            else:                              # broadcast shapes: distinct values per tensor keep tuples distinct
                for k, sh in shapes.items():
                    idx[k] = rand_index(shape[axes[k]], sh, dups)
            for k in idx:                      # some negative indices
                sz = shape[axes[k]]
                idx[k] = np.where(rng.random(idx[k].shape) < 0.3, idx[k] % sz - sz, idx[k] % sz)
            xv = rand_vals(shape, "f64")
            tx = T(xv)
            ts = {k: torch.as_tensor(a) for k, a in idx.items()}
            exprs = {k: b.inp(a) for k, a in idx.items()}
            sel = multi_nb(form, exprs)
            name = f"{list(shape)}[{form}] {[list(s) for s in shapes.values()]}" + (" dups" if dups else "")
            if not dups:
                b.case(f"read {name}", f"{b.inp(xv)}[{sel}]", tx[multi_py(form, ts)], **TOL)
            region = tuple(tx[multi_py(form, ts)].shape)
            for vs in (region, region[1:]):
                vv = rand_vals(vs, "f64")
                if dups:
                    exp = multi_loop(tx, form, idx, T(vv), False)
                else:
                    exp = tx.clone()
                    exp[multi_py(form, ts)] = T(vv)
                b.case(f"put {name} v{list(vs)}", f"y = clone({b.inp(xv)})\ny[{sel}] = {b.inp(vv)}\ny", exp, **TOL)
            vv = rand_vals(region, "f64")
            exp = multi_loop(tx, form, idx, T(vv), True)
            # index_put's list form: a full slice is the range 0..size (MULTI's ":" stand where the index says)
            lsel = sel.replace(":", f"0..{shape[form.index(':')]}") if ":" in form else sel
            b.case(f"accumulate {name}", f"index_put({b.inp(xv)}, [{lsel}], {b.inp(vv)}, accumulate=true)", exp, **TOL)
    # a mask among integer tensors stands for its coordinates
    xv = rand_vals((4, 5, 3), "f64")
    m = rng.random((5,)) > 0.4
    m[:2] = True
    j = rng.integers(-3, 3, size=(int(m.sum()),))
    vv = rand_vals((4, int(m.sum())), "f64")
    exp = T(xv).clone()
    exp[:, T(m), T(j)] = T(vv)
    b.case("put mask + int tensor", f"y = clone({b.inp(xv)})\ny[:, {b.inp(m)}, {b.inp(j)}] = {b.inp(vv)}\ny", exp, **TOL)
    b.case("read mask + int tensor", f"{b.inp(xv)}[:, {b.inp(m)}, {b.inp(j)}]", T(xv)[:, T(m), T(j)], **TOL)
    # the classic: one entry per row
    xv = rand_vals((6, 4), "f32")
    lab = rng.integers(0, 4, size=(6,))
    exp = T(xv).clone()
    exp[torch.arange(6), T(lab)] = 0
    b.case("x[arange(n), labels] = 0", f"y = clone({b.inp(xv)})\ny[arange(6), {b.inp(lab)}] = 0\ny", exp)
    # gradients through two tensor indices, repeats included
    i, jj = np.array([0, 2, 2, -1]), np.array([1, 3, 3, 0])

    def f2(x, v, _i, _j):
        y = x * 2
        y[T(i), T(jj)] = v * 3
        return y
    icase(b, "grad two tensor indices, repeats", "y = p0 * 2\ny[p2, p3] = p1 * 3\ny", f2, [r(4, 5), r(4), i, jj],
          [True, True, False, False])

    def f3(x, v, _i, _j):
        y = torch.tanh(x) * 1
        y[T(i[:2]), :, T(jj[:2])] = v
        return y * y
    icase(b, "grad non-adjacent tensor indices", "y = tanh(p0) * 1\ny[p2, :, p3] = p1\ny * y", f3,
          [r(3, 2, 4), r(2, 2), i[:2], jj[:2]], [True, True, False, False])


# ------------------------------------------------------------------ gradients
def icase(b, name, nb_body, torch_fn, inputs, diff, tol=TOL):
    """nb_body: nabla statements over p0, p1, ...; its last line is the output.
    torch_fn(*tensors): the same computation in torch."""
    vals = [np.array(a, copy=True) for a in inputs]
    exprs = [b.inp(a) for a in vals]
    tin = [T(a, requires_grad=d) for a, d in zip(vals, diff)]
    out = torch_fn(*tin)
    W = rng.standard_normal(tuple(out.shape))
    (out * T(W)).sum().backward()
    exp = [t.grad if t.grad is not None else torch.zeros_like(t) for t, d in zip(tin, diff) if d]
    params = ", ".join(f"p{i}" for i in range(len(inputs)))
    argn = ", ".join(str(i) for i, d in enumerate(diff) if d)
    body = "\n".join("  " + line.strip() for line in nb_body.strip().split("\n"))
    code = (f"f = fn({params}) {{\n{body}\n}}\n"
            f"grad(fn({params}) sum(f({params}) * {b.inp(W)}), argnums=list({argn}))({', '.join(exprs)})")
    b.case(name, code, exp, **tol)


def r(*shape):
    return rng.standard_normal(shape)


def gradients(b):
    grad_forms = [((6, 4), ["I"], (3,)), ((6, 4), ["I", 2], (2, 2)), ((6, 4), [":", "I"], (3,)),
                  ((5, 4, 3), [2, ":", "I"], (2,)), ((5, 4, 3), ["...", "I"], (3,)), ((3, 4, 5, 6), [1, "I", "1:4"], (2,))]
    for shape, form, ishape in grad_forms:
        ax, _ = tensor_axis(form, len(shape), 1)
        for dups in (False, True):
            idx = rand_index(shape[ax], ishape, dups)
            ti = torch.as_tensor(idx)
            region = tuple(T(np.zeros(shape))[py_form(form, ti)].shape)
            sel = nb_form(form, "p2")
            for vs in (region, region[1:] if len(region) > 1 else ()):
                def f(x, v, _i, form=form, ti=ti, dups=dups):
                    y = x * 2
                    y[py_form(form, ti)] = v * 3
                    return y if dups else y * y            # with repeats the written values are undefined in torch: stay linear
                icase(b, f"grad {list(shape)}[{form}] idx{list(ishape)} v{list(vs)}" + (" dups" if dups else ""),
                      f"y = p0 * 2\ny[{sel}] = p1 * 3\n" + ("y" if dups else "y * y"), f, [r(*shape), r(*vs), idx],
                      [True, True, False])
    # a bool mask among other entries
    m = rng.random((4,)) > 0.4
    m[0] = True

    def f_mask(x, v, mm):
        y = torch.tanh(x) * 1
        y[1, :, mm] = v
        return y * y
    icase(b, "grad mask [1, :, m]", "y = tanh(p0) * 1\ny[1, :, p2] = p1\ny * y", f_mask, [r(3, 5, 4), r(int(m.sum())), m],
          [True, True, False])

    # accumulate: dx = g, dv = g[idx] for every repeat
    idx = rand_index(5, (7,), True)

    def f_acc(x, v, i):
        return torch.index_put(x * 1.5, (i,), v * v, accumulate=True) ** 2
    icase(b, "grad accumulate", "index_put(p0 * 1.5, p2, p1 * p1, accumulate=true) ** 2", f_acc, [r(5, 3), r(7, 3), idx],
          [True, True, False])
    idx = rand_index(4, (3,), True)

    def f_acc_cols(x, v, i):
        y = x.clone()
        y.index_put_((torch.arange(5)[:, None], i[None, :]), v, accumulate=True)   # y[:, i] += v, repeats add up
        return torch.sin(y)
    icase(b, "grad accumulate columns, v broadcast", "sin(index_put(p0, [\"...\", p2], p1, accumulate=true))", f_acc_cols,
          [r(5, 4), r(3), idx], [True, True, False])

    # the functional form on a leaf: the copy is written, the gradient reaches x
    idx = rand_index(6, (4,), False)

    def f_fun(x, v, i):
        return torch.index_put(x, (i,), v) * x
    icase(b, "grad index_put copy of a leaf", "index_put(p0, p2, p1) * p0", f_fun, [r(6, 2), r(4, 2), idx], [True, True, False])

    # a plain tensor receiving a value that requires grad becomes a graph tensor
    idx = rand_index(5, (3,), False)

    def f_plain(x, i):
        w = torch.zeros(5, 3, dtype=torch.float64)
        w[i] = x[0:3] * 2
        return w * w
    icase(b, "grad plain target", 'w = zeros(5, 3, dtype="f64")\nw[p1] = p0[0:3] * 2\nw * w', f_plain, [r(4, 3), idx], [True, False])

    # a write after the tensor was used, then another: earlier uses keep their gradient
    idx = rand_index(4, (2,), False)

    def f_chain(x, v, i):
        y = x * 2
        a = y.sum(0)
        y[i] = v
        y[:, i] = y[:, 0:2] * 3
        return torch.exp(y) + a
    icase(b, "grad chained writes", "y = p0 * 2\na = sum(y, axis=0)\ny[p2] = p1\ny[:, p2] = y[:, 0:2] * 3\nexp(y) + a",
          f_chain, [r(4, 4), r(4), idx], [True, True, False])


def gradcheck(b):
    b.raw(GRADCHECK_NBL)
    # (repeated indices only where they accumulate: a plain write's repeats get
    # torch's gradient, g for every repeat, which is not the derivative of "one wins")
    xs, i1, i2, i3 = b.inp(r(4, 5)), b.inp(np.array([2, -1, 0])), b.inp(np.array([4, 4, 1])), b.inp(np.array([4, 0, -4]))
    b.raw(f"fn fd_writes(x) {{\n  y = tanh(x) * 1\n  y[{i1}] = sin(x[0:3]) * 2\n  y[1, {i3}] = x[3, 0:3] ** 2\n"
          f"  z = index_put(y, [\"...\", {i2}], x[:, 0:3], accumulate=true)\n  sum(z ** 2)\n}}")
    b.case("gradcheck writes through tensor indices",
           f"g = grad(fd_writes)({xs})\nn = numgrad(fd_writes, {xs}, 1e-6)\nlist(g - n, g)",
           lambda g: (None if isinstance(g, list) and float(np.max(np.abs(g[0]))) <= 1e-6 * max(1.0, float(np.max(np.abs(g[1]))))
                      else f"autograd - finite differences: max abs {np.max(np.abs(g[0])) if isinstance(g, list) else g}"))


# ------------------------------------------------------------------ graph facts, versions, no_grad, errors
def graph_and_errors(b):
    xs = b.inp(r(5, 4))
    ii = b.inp(np.array([0, 3]))
    pre = f"x = clone({xs})\nx.requires_grad = true\n"
    b.case("grad_fn after a tensor-index write", pre + f"y = x * 2\ny[{ii}] = 1\nlist(y.grad_fn, y.is_leaf)",
           ["IndexPutBackward", False])
    b.case("no_grad: a leaf may be written, nothing recorded",
           pre + f"no_grad {{ x[{ii}, 1] = 7 }}\nlist(x.is_leaf, x.grad_fn == nil, x[3, 1].item(), x[0, 1].item())",
           [True, True, 7.0, 7.0])
    b.case("plain write records nothing", f"w = zeros(5, 4)\nw[{ii}] = {xs}[0]\nlist(w.requires_grad, w.grad_fn == nil)", [False, True])
    # the write bumps the version: a node that saved the tensor refuses to run
    b.error("write bumps the version", pre + f"h = x * 2\nz = h * h\nh[{ii}] = 0\nbackward(sum(z))",
            ["MulBackward", "modified in place", "version 0, now 1"])
    b.error("leaf requiring grad", pre + f"x[{ii}] = 1", ["leaf", "requires grad", "no_grad"])
    b.error("view of a graph tensor", pre + f"y = x * 2\nz = y[1:4]\nz[{ii}] = 1", ["view", "base"])
    b.error("out of range", f"y = zeros(5, 4)\ny[{b.inp(np.array([1, 7]))}] = 1", ["index_put", "7", "axis 0", "size 5"])
    b.error("negative out of range", f"y = zeros(5, 4)\ny[:, {b.inp(np.array([-5]))}] = 1", ["index_put", "-5", "axis 1", "size 4"])
    b.error("out of range after an int", f"y = zeros(3, 4, 5)\ny[1, :, {b.inp(np.array([0, 5]))}] = ones(4, 2)",
            ["index_put", "5", "axis 2", "size 5"])
    # (on the CPU: a device's take reports out-of-range reads through its own error slot)
    b.error("read out of range after an int", 'zeros(3, 4, 5, device="cpu")[1, :, tensor([9], device="cpu")]',
            ["index", "9", "axis 2", "size 5"])
    b.error("shape mismatch", f"y = zeros(5, 4)\ny[{ii}] = ones(3, 4)", ["index_put", "shape mismatch", "[3, 4]", "[2, 4]"])
    b.error("shape mismatch after an int", f"y = zeros(5, 4, 3)\ny[1, {ii}] = ones(2, 4)", ["[2, 4]", "[2, 3]"])
    b.error("float index tensor", f"y = zeros(5)\ny[{b.inp(np.array([0.0, 1.0], dtype=np.float32))}] = 1",
            ["index_put", "integer", "f32"])
    b.error("float index read", f"zeros(5)[{b.inp(np.array([1.5]))}]", ["index", "integer", "f64"])
    b.error("mask of the wrong shape", f"y = zeros(5, 4)\ny[:, {b.inp(np.array([True, False]))}] = 1",
            ["boolean mask", "[2]", "[4]", "[5, 4]"])
    b.error("index tensors that do not broadcast", f"y = zeros(5, 4)\ny[{ii}, {b.inp(np.array([0, 1, 2]))}] = 1",
            ["index_put", "indexing tensors could not be broadcast", "[2]", "[3]"])
    b.error("second index out of range", f"y = zeros(5, 4)\ny[{ii}, {b.inp(np.array([0, 4]))}] = 1", ["index_put", "4", "axis 1", "size 4"])
    b.error("too many indices", f"y = zeros(5)\ny[{ii}, 0] = 1", ["too many indices"])
    b.error("index_put out of range", f"index_put(zeros(3), {ii}, 1.0, accumulate=true)", ["index_put", "3", "axis 0", "size 3"])
    b.case("empty index writes nothing", f"y = clone({xs})\ny[{b.inp(np.zeros((0,), dtype=np.int64))}] = 5\nsum(y == {xs}).item()",
           20.0)


def main():
    b = Batch("index_put")
    forward_forms(b)
    dtypes(b)
    masks(b)
    accumulate(b)
    duplicates_deterministic(b)
    gradients(b)
    multi_forms(b)
    gradcheck(b)
    graph_and_errors(b)
    b.run()
    finish()


if __name__ == "__main__":
    main()
