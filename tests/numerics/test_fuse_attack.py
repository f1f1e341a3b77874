#!/usr/bin/python3
"""Adversarial checks of lazy fused elementwise chains (tensor/tfuse.c, issue 16).

The companion of tests/numerics/test_fuse.py (which covers the writing APIs one
by one): here are the routes by which a user could OBSERVE that evaluation is
lazy.  Every batch runs twice, NABLA_FUSE=1 and NABLA_FUSE=0, on the same
fresh random inputs; each case must give the same bits both ways, match a
PyTorch / NumPy reference, and the fused run must print nothing on stderr
(the "internal error" reports of tfuse.c are a failure here):

- aliasing: a lazy value combined with a view of itself (`y + y.T`,
  `y * y[0]`, `y - flip(y, 0)`) while its chain holds the only reference to
  its input (this was a use after free: tfuse.c recorded the first operand's
  inputs, then computed y for the second operand and released them);
  `x += x * 2`, `x.copy_(x * 2 + 1)`, overlapping slice assignment from a
  lazy value of x, writes through transposed / expanded / flipped views;
- capture: lazy values returned from a function or closure, stored in a
  record or a list, used after their input was written;
- autograd: a lazy value of x.grad, then backward accumulating into x.grad
  and zero_grad; a lazy value of a leaf, then an optimizer with momentum; a
  pending value does not keep its input's graph alive (autograd_stats);
- I/O: save / load, save_npy, serialize of lazy values, then the input written;
- dtypes: i32 inputs promoting to f32, f16 / bf16 chains written after, 0-d
  tensor operands promoting to f64, NaN / inf propagation, u8 / bool inputs;
- errors: the same message at the same line and column, both ways;
- dist: an in-place broadcast (dist_broadcast_) into a tensor a pending
  chain reads, on two CPU workers;
- gradcheck: values f stores while gradcheck perturbs the input in place.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_fuse_attack.py
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Batch, T, check, finish, rng, torch, np, compare, report_fail  # noqa: E402


STATS = "s = fuse_stats()\nlist(s.forced, s.dropped)"
N = (200, 200)   # square (y + y.T), 40000 elements: above the 16384-element threshold


def fingerprint(v):
    """a value as comparable bits: tensors by dtype, shape and bytes (NaN
    payloads included); lists element by element; NaN numbers equal"""
    if isinstance(v, list):
        return ("list", tuple(fingerprint(x) for x in v))
    if isinstance(v, float) and v != v:
        return ("nan",)
    if isinstance(v, (str, float, bool, int)) or v is None:
        return ("scalar", v)
    arr = harness.to_np(v)
    return ("tensor", str(arr.dtype), arr.shape, arr.tobytes())


def run_and_judge(b, min_forced):
    """Runs batch b with NABLA_FUSE=1 and =0: each case must give the same
    bits both ways and match its reference; a fused run prints nothing on
    stderr; the "stats" case shows that chains really fused"""
    cases = list(enumerate(b.cases))
    res = {}
    for mode in ("1", "0"):
        os.environ["NABLA_FUSE"] = mode
        rc, so, se, errs, got = b._exec(cases)
        os.environ.pop("NABLA_FUSE", None)
        tag = f"[NABLA_FUSE={mode}]"
        if got is None:
            report_fail(f"{b.title}.run{tag}", f"nabla {'killed by signal %d' % -rc if rc < 0 else 'exit status %d' % rc}: {se.strip()[-400:]}")
            return
        check(f"{b.title}.quiet_stderr{tag}", not se.strip(), f"stderr: {se.strip()[-400:]!r}")
        for key, msg in errs.items():
            report_fail(f"{b.title}.{b.cases[int(key[1:])].name}{tag}", f"nabla error: {msg}")
        res[mode] = got
    on, off = res["1"], res["0"]
    for i, c in cases:
        key, name, shown = f"c{i}", f"{b.title}.{c.name}", " ".join(c.code.split())[:200]
        if c.name == "stats":
            f_on, f_off = on.get(key), off.get(key)
            ok = f_on is not None and f_off is not None and float(f_on[0]) >= min_forced and float(f_off[0]) == 0
            check(f"{b.title}.fused_really", ok, f"fuse_stats [forced, dropped] on={f_on} off={f_off} (want forced >= {min_forced} fused, 0 not)")
        elif key in on and key in off:   # otherwise the nabla error was reported above
            why = (None if fingerprint(on[key]) == fingerprint(off[key]) else "NABLA_FUSE=1 and =0 give other bits") \
                or compare(on[key], c.exp, c.rtol, c.atol, c.dtype)
            check(name, not why, f"{why}; case: {shown}")


def new_batch(title):
    """a batch with one fresh 200 x 200 f32 input: (batch, its nabla name, the torch tensor)"""
    b = Batch(title)
    a = rng.standard_normal(N).astype(np.float32)
    return b, b.inp(a), T(a)




def alias_batch():
    b, xa, t = new_batch("fuse_attack.alias")
    y = t * 2 - 1
    # y's chain holds the ONLY reference to its input (the clone): a view of y
    # as the second operand computes y while the first operand is recorded
    b.case("self_transpose", f"y = {xa}.clone() * 2 - 1\ny + y.T", y + y.T, rtol=0, atol=0)
    b.case("self_row", f"y = {xa}.clone() * 2 - 1\ny * y[0]", y * y[0], rtol=0, atol=0)
    b.case("self_col", f"y = {xa}.clone() * 2 - 1\ny - y[:, 3:4]", y - y[:, 3:4], rtol=0, atol=0)
    b.case("self_flip", f"y = {xa}.clone() * 2 - 1\nmaximum(y, flip(y, 0))", torch.maximum(y, torch.flip(y, [0])), rtol=0, atol=0)
    b.case("self_flip_first", f"y = {xa}.clone() * 2 - 1\nflip(y, 1) / (abs(y) + 1)", torch.flip(y, [1]) / (torch.abs(y) + 1), rtol=0, atol=0)
    b.case("self_chain_long", f"y = {xa}.clone() * 2 - 1\nz = y + y.T\nz = z * 0.5 + z[1]\nz",
           ((y + y.T) * 0.5 + (y + y.T)[1]), rtol=0, atol=0)
    b.case("self_in_fn", f"fn g(v) {{ w = v * 3\n return w - w.T }}\ng({xa}.clone())", t * 3 - (t * 3).T, rtol=0, atol=0)
    # a reshape of a lazy value (same numel, another shape) as an operand: the
    # chain's inputs are laid out in the chain's shape (this read x's elements
    # at the wrong places: a silent wrong value)
    b.case("reshape_flat_scalar", f"y = {xa} * 2 - 1\ny.reshape([40000]) + 1", (y.reshape(40000) + 1), rtol=0, atol=0)
    b.case("reshape_2d_unary", f"y = {xa} * 2 - 1\ntanh(y.reshape([400, 100]))", torch.tanh(y.reshape(400, 100)), rtol=2e-6, atol=2e-7)
    b.case("reshape_binary", f"y = {xa} * 2 - 1\ny.reshape([100, 400]) * {xa}.reshape([100, 400])", y.reshape(100, 400) * t.reshape(100, 400), rtol=0, atol=0)
    b.case("reshape_bcast", f"y = {xa} * 2 - 1\ny.reshape([4, 50, 200]) - {xa}[0]", y.reshape(4, 50, 200) - t[0], rtol=0, atol=0)
    b.case("unsqueeze_lazy", f"y = {xa} * 2 - 1\nunsqueeze(y, 0) * 3", y.unsqueeze(0) * 3, rtol=0, atol=0)
    b.case("flatten_lazy", f"y = {xa} * 2 - 1\ny.flatten() / 3", y.flatten() / 3, rtol=0, atol=0)
    b.case("reshape_back", f"y = {xa} * 2 - 1\n(y.reshape([40000]) * 2).reshape([200, 200]) + y", (y.reshape(40000) * 2).reshape(200, 200) + y, rtol=0, atol=0)
    # in-place writes whose right side is a lazy value of the target
    b.case("plus_eq_self", f"x = {xa}.clone()\nx += x * 2\nx", t + t * 2, rtol=0, atol=0)
    b.case("copy_self", f"x = {xa}.clone()\nx.copy_(x * 2 - 1)\nx", y, rtol=0, atol=0)
    r = t.clone()
    r[0:10] = (t * 2)[5:15]
    b.case("slice_overlap", f"x = {xa}.clone()\nx[0:10] = (x * 2)[5:15]\nx", r, rtol=0, atol=0)
    r = t.clone()
    r[t > 0] = (t * 3)[t > 0]
    b.case("mask_from_lazy", f"x = {xa}.clone()\nx[x > 0] = (x * 3)[x > 0]\nx", r, rtol=0, atol=0)
    # writes through views while a chain reads the base
    b.case("write_T_view", f"x = {xa}.clone()\ny = x * 2 - 1\nv = x.T\nv += 1\ny", y, rtol=0, atol=0)
    b.case("expand_input", f"x = {xa}.clone()\ny = x[0:1].expand([200, 200]) * 2 - 1\nx[0] = 5\ny", (t[0:1] * 2 - 1).expand(200, 200), rtol=0, atol=0)
    b.case("flip_input", f"x = {xa}.clone()\ny = flip(x, 0) * 3 - x\nx.fill_(0)\ny", torch.flip(t, [0]) * 3 - t, rtol=0, atol=0)
    b.case("reshape_view_write", f"x = {xa}.clone()\ny = x * 2 - 1\nv = x.reshape([400, 100])\nv[3] = 0\ny", y, rtol=0, atol=0)
    b.case("lazy_slice_then_lazy_written", f"x = {xa}.clone()\ny = x * 2\nz = y[0:150] + 1\ny.fill_(0)\nz", (t * 2)[0:150] + 1, rtol=0, atol=0)
    b.case("detach_of_lazy_written", f"y = {xa} * 2\nd = y.detach()\nd += 1\ny", t * 2 + 1, rtol=0, atol=0)
    b.case("where_after_write", f"x = {xa}.clone()\ny = x * 2\nx += 100\nwhere({xa} > 0, y, {xa})", torch.where(t > 0, t * 2, t), rtol=0, atol=0)
    b.case("masked_fill_lazy", f"y = {xa} * 2\nmasked_fill(y, {xa} > 0, 0.5)", (t * 2).masked_fill(t > 0, 0.5), rtol=0, atol=0)
    b.case("compare_lazy", f"x = {xa}.clone()\ny = x * 2 - 1\nx.zero_()\n(y > 0).to(\"f32\")", (y > 0).float(), rtol=0, atol=0)
    b.case("stats", STATS, None)
    return b


def capture_batch():
    b, xa, t = new_batch("fuse_attack.capture")
    y = t * 2 + 1
    b.raw("fn mk(t) {\n  yy = t * 2 + 1\n  return fn() = yy\n}")
    b.raw("fn ret(t) = t * 2 + 1")
    b.case("closure", f"x = {xa}.clone()\ng = mk(x)\nx.mul_(0)\ng()", y, rtol=0, atol=0)
    b.case("returned", f"x = {xa}.clone()\ny = ret(x)\nx -= 4\ny", y, rtol=0, atol=0)
    b.case("record", f"x = {xa}.clone()\nr = {{v: x * 2 + 1}}\nx.zero_()\nr.v", y, rtol=0, atol=0)
    b.case("list_many", f"x = {xa}.clone()\nys = []\nfor i in range(40) {{ push(ys, x * i + 1) }}\nx.fill_(3)\nys[0] + ys[1] + ys[39]",
           (t * 0 + 1) + (t * 1 + 1) + (t * 39 + 1), rtol=0, atol=0)
    b.case("captured_late", f"x = {xa}.clone()\nys = []\npush(ys, x * 2 + 1)\nfor i in range(50) {{ z = x * i }}\nx.clamp_(0, 0.1)\nys[0]", y, rtol=0, atol=0)
    # chains over chains, then a middle value is written
    b.case("chain_of_chains", f"x = {xa}.clone()\na1 = x * 2\na2 = a1 + 1\na3 = a2 * a1\na1 += 7\na3", (t * 2 + 1) * (t * 2), rtol=0, atol=0)
    rr = t
    for i in range(100):
        rr = rr * 0.99 + 0.01 if i % 2 else torch.tanh(rr) - rr * 0.5
    b.case("very_long", f"y = {xa}.clone()\nfor i in range(100) {{ y = if i % 2 == 1 {{ y * 0.99 + 0.01 }} else {{ tanh(y) - y * 0.5 }} }}\ny",
           rr, rtol=2e-5, atol=2e-6)
    b.case("stats", STATS, None)
    return b


def grad_io_batch():
    b, xa, t = new_batch("fuse_attack.grad_io")
    # x.grad read lazily, then backward accumulates into it, then zero_grad
    b.case("grad_accumulate", f"w = {xa}.clone().requires_grad()\nbackward((w * w).sum())\ng = w.grad * 2 + 1\nbackward((w * 3).sum())\ng",
           (2 * t) * 2 + 1, rtol=0, atol=0)
    b.case("grad_accumulated_value", f"w = {xa}.clone().requires_grad()\nbackward((w * w).sum())\ng = w.grad * 2 + 1\nbackward((w * 3).sum())\nw.grad",
           2 * t + 3, rtol=0, atol=0)
    b.case("zero_grad", f"w = {xa}.clone().requires_grad()\nbackward((w * w).sum())\ng = w.grad * 5\nzero_grad([w])\ng", (2 * t) * 5, rtol=0, atol=0)
    b.case("no_grad_chain_of_leaf", f"w = {xa}.clone().requires_grad()\nno_grad {{ y = w * 2 + 1 }}\nbackward((w * w).sum())\ny",
           t * 2 + 1, rtol=0, atol=0)
    # a pending value must not keep its input's autograd graph alive (it held
    # the input tensor itself: grad_fn and every saved activation)
    b.case("graph_not_held", f"w = {xa}.clone().requires_grad()\nn0 = autograd_stats().nodes\nh = tanh(w * 2) * 3\n"
           f"no_grad {{ s = h * 2 }}\nh = nil\nn1 = autograd_stats().nodes - n0\nlist(n1, s[5, 7].item())",
           [0, float(torch.tanh(t * 2)[5, 7] * 3 * 2)], rtol=1e-6, atol=1e-6, dtype=False)
    b.case("graph_not_held_fn", f"fn fwd(v) {{\n  h = v\n  for i in range(4) {{ h = tanh(h * 1.5) }}\n  no_grad {{ o = h - 1 }}\n  return o\n}}\n"
           f"w = {xa}.clone().requires_grad()\nn0 = autograd_stats().nodes\no = fwd(w)\nlist(autograd_stats().nodes - n0, o[1, 2].item())",
           [0, float(torch.tanh(torch.tanh(torch.tanh(torch.tanh(t * 1.5) * 1.5) * 1.5) * 1.5)[1, 2] - 1)], rtol=1e-6, atol=1e-6, dtype=False)
    b.case("sgd_momentum", f"import optim\nx = {xa}.clone()\ny = x * 2 + 1\nopt = optim.sgd({{w: x}}, 0.1, momentum=0.9)\n"
           f"opt.step({{w: ones([200, 200])}})\nopt.step({{w: ones([200, 200])}})\ny", t * 2 + 1, rtol=0, atol=0)
    b.case("index_put_accumulate", f"x = {xa}.clone()\ny = x * 2 + 1\nx2 = index_put(x, tensor([0, 0, 2]), ones([3, 200]), accumulate=true)\ny",
           t * 2 + 1, rtol=0, atol=0)
    p = os.path.join(harness.TMP, "fa_save.safetensors")
    b.case("save_load", f"x = {xa}.clone()\ny = x * 2 + 1\nsave({harness.nb_str(p)}, {{y: y}})\nx += 1\nload({harness.nb_str(p)}).y", t * 2 + 1, rtol=0, atol=0)
    p = os.path.join(harness.TMP, "fa_save.npy")
    b.case("save_npy", f"y = {xa} * 3 - 1\nsave_npy({harness.nb_str(p)}, y)\nload_npy({harness.nb_str(p)})", t * 3 - 1, rtol=0, atol=0)
    b.case("serialize", f"x = {xa}.clone()\ny = x * 2 + 1\ns = serialize(y)\nx.zero_()\ndeserialize(s)", t * 2 + 1, rtol=0, atol=0)
    b.case("tolist_item", f"y = {xa} * 2 + 1\nlist(y[7, 3].item(), y.tolist()[4][5])",
           [float((t * 2 + 1)[7, 3]), float((t * 2 + 1)[4, 5])], rtol=0, atol=0, dtype=False)
    b.case("stats", STATS, None)
    return b


def dtype_batch():
    b = Batch("fuse_attack.dtypes")
    a = rng.standard_normal(N).astype(np.float32)
    a[0, 0:4] = [np.nan, np.inf, -np.inf, 0.0]
    xa = b.inp(a)
    t = T(a)
    ai = (rng.standard_normal(N) * 50).astype(np.int32)
    xi = b.inp(ai)
    ti = T(ai)
    au = rng.integers(0, 255, N).astype(np.uint8)
    xu = b.inp(au)
    with np.errstate(all="ignore"):
        b.case("nan_inf", f"(({xa} * 0 + 1) / {xa} - maximum({xa}, 0.0)) * 2", ((t * 0 + 1) / t - torch.clamp(t, min=0.0)) * 2, rtol=0, atol=0)
    b.case("i32_promote_written", f"x = {xi}.clone()\ny = x * 0.5 + {xa}\nx += 3\ny", ti.float() * 0.5 + t, rtol=0, atol=0)
    b.case("i32_true_div", f"x = {xi}.clone()\ny = x / 7\nx.zero_()\ny", ti / 7, rtol=0, atol=0)
    b.case("u8_promote", f"{xu} * 0.25 - 1", torch.from_numpy(au).float() * 0.25 - 1, rtol=0, atol=0)
    b.case("bool_promote", f"({xa} > 0) * 1.5 + {xa}", (t > 0).float() * 1.5 + t, rtol=0, atol=0)
    # 0-d operands do not promote a tensor of the same kind (torch's rule): f32
    b.case("zero_d_f64", f"x = {xa}.clone()\ny = x * tensor(2.5) + tensor(1.0).to(\"f64\")\nx += 1\ny",
           t * torch.tensor(2.5) + torch.tensor(1.0, dtype=torch.float64), rtol=0, atol=0)
    b.case("f32_f64", f"x = {xa}.clone()\nd = x.to(\"f64\") * 3\ny = x + d\nx.zero_()\ny", t.double() + t.double() * 3, rtol=0, atol=0)
    h = t.half()
    b.case("f16_written", f"x = {xa}.to(\"f16\")\ny = x * 1.5 + 0.25\nx.mul_(2)\ny", ((h.float() * 1.5).half().float() + 0.25).half(), rtol=0, atol=0)
    b.case("bf16_written", f"x = {xa}.to(\"bf16\")\ny = x * 1.5 + 0.25\nx.add_(2)\ny.to(\"f32\")",
           (((t.bfloat16().float() * 1.5).bfloat16().float() + 0.25).bfloat16()).float(), rtol=0, atol=0)
    b.case("stats", STATS, None)
    return b


ERROR_PROGRAMS = [
    ("matmul_of_lazy_from_fn", "x = randn([300, 200])\nfn f(t) = t * 2 + 1\ny = f(x)\nz = y @ ones([3])\n"),
    ("bcast_lazy_T", "x = randn([300, 200])\ny = x * 2\nz = y + x.T\n"),
    ("copy_bad_shape", "x = randn([300, 200])\ny = x * 2\nx.copy_(ones([7]))\n"),
    ("setitem_bad_shape", "x = randn([300, 200])\ny = x * 2\ny[0] = ones([5])\n"),
    ("leaf_inplace", "x = randn([300, 200]).requires_grad()\ny = x.detach() * 2\nx += 1\n"),
    ("reshape_lazy", "x = randn([300, 200])\ny = x * 2\nz = y.reshape([7, -1])\n"),
    ("int_div_zero", "x = randn([300, 200])\ny = (x * 2).to(\"i32\") // 0\nprint(y.sum())\n"),
    ("index_lazy", "x = randn([300, 200])\ny = x * 2\nprint(y[400])\n"),
    ("in_fn_line", "fn h(t) {\n  u = t * 3\n  return u + ones([2, 2])\n}\nh(randn([300, 200]))\n"),
    # a broadcast too big to allocate: the TensorError at the op's line (fused, the
    # buffer was allocated when the value was computed, and that aborted the process)
    ("oom_broadcast", "a = randn([200000, 1])\nb = randn([1, 300000])\ny = try { a + b } catch e { print(e.message, e.line); nil }\nprint(y)\nz = a + b\n"),
]


def error_checks():
    """the same message at the same line and column, with and without fusion"""
    for name, prog in ERROR_PROGRAMS:
        got = {}
        for mode in ("1", "0"):
            os.environ["NABLA_FUSE"] = mode
            got[mode] = harness.run_nabla(prog)
        os.environ.pop("NABLA_FUSE", None)
        # the harness names each program file afresh: compare the messages without it
        (rc1, so1, se1), (rc0, so0, se0) = [(rc, so, re.sub(r"\S*prog_\d+\.nbl", "PROG", se)) for rc, so, se in (got["1"], got["0"])]
        ok = rc0 != 0 and "Error" in se0 and (rc1, so1, se1) == (rc0, so0, se0)
        check(f"fuse_attack.errors.{name}", ok, f"fused rc={rc1} {se1.strip()[-200:]!r} vs unfused rc={rc0} {se0.strip()[-200:]!r}")


DIST_PROG = """import dist
seed(11 + dist.rank())
x = randn([300, 200])
old = x.tolist()
y = x * 2 + 1
z = x.T * 3
dist_broadcast_(x, 0)
print("R", dist.rank(), (y - (tensor(old) * 2 + 1)).abs().max().item(), (z - tensor(old).T * 3).abs().max().item(), (x - tensor(old)).abs().max().item())
"""


def dist_check():
    """an in-place broadcast into x on rank 1 while chains read x: they keep the old x"""
    import subprocess
    p = os.path.join(harness.TMP, "fa_dist.nbl")
    with open(p, "w") as f:
        f.write(DIST_PROG)
    for mode in ("1", "0"):
        env = dict(os.environ, NABLA_FUSE=mode)
        try:
            r = subprocess.run([harness.NABLA, "run", "-n", "2", p], capture_output=True, text=True, timeout=120, env=env)
        except subprocess.TimeoutExpired:
            report_fail(f"fuse_attack.dist_broadcast_[NABLA_FUSE={mode}]", "timed out")
            continue
        rows = [l.split() for l in r.stdout.splitlines() if " R " in f" {l} " or l.startswith("R ")]
        vals = {row[row.index("R") + 1]: [float(v) for v in row[row.index("R") + 2:]] for row in rows}
        # rank 1's x changed (a different seed), rank 0's did not; y and z are the old values on both
        ok = (r.returncode == 0 and set(vals) == {"0", "1"} and all(v[0] == 0 and v[1] == 0 for v in vals.values())
              and vals["0"][2] == 0 and vals["1"][2] > 0)
        check(f"fuse_attack.dist_broadcast_[NABLA_FUSE={mode}]", ok, f"rc={r.returncode} out={r.stdout.strip()[-300:]!r} err={r.stderr.strip()[-300:]!r}")


GRADCHECK_PROG = """x = randn([128, 128]).to("f64").requires_grad()
cache = []
fn f(v) {
  push(cache, v * 1)
  return (v * v).sum()
}
ok = gradcheck(f, [x])
n = len(cache)
print("G", ok, n, cache[n - 1][127, 127].item() - x[127, 127].item(), cache[n - 2][127, 127].item() - x[127, 127].item())
"""


def gradcheck_check():
    """gradcheck perturbs its input in place between calls of f: a value f stores
    (lazy, reading the input) keeps the input as it was in THAT call (gradcheck
    wrote through a pointer taken once, under the pending values)"""
    for mode in ("1", "0"):
        os.environ["NABLA_FUSE"] = mode
        rc, so, se = harness.run_nabla(GRADCHECK_PROG, timeout=300)
        os.environ.pop("NABLA_FUSE", None)
        row = next((l.split() for l in so.splitlines() if l.startswith("G ")), None)
        # the last two calls saw x[127, 127] - eps and + eps (eps = 1e-6)
        ok = (rc == 0 and row is not None and row[1] == "true" and int(row[2]) == 2 * 128 * 128 + 2
              and abs(float(row[3]) + 1e-6) < 1e-9 and abs(float(row[4]) - 1e-6) < 1e-9)
        check(f"fuse_attack.gradcheck_stored_values[NABLA_FUSE={mode}]", ok, f"rc={rc} out={so.strip()[-200:]!r} err={se.strip()[-300:]!r}")


for mk, min_forced in ((alias_batch, 10), (capture_batch, 5), (grad_io_batch, 5), (dtype_batch, 5)):
    run_and_judge(mk(), min_forced)
error_checks()
dist_check()
gradcheck_check()
finish()
