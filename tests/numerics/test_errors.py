#!/usr/bin/python3
"""Tensor error reports: each bad op, run as its own script, must end the process with
exit status 1 (no signal) and a report on stderr naming the op, the shapes / expected
dtype / index, axis and size; the same op inside try/catch must be catchable with the
same message, and the script must go on after the catch.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_errors.py
"""
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Batch, check, finish, report_fail, report_pass, run_nabla, rng  # noqa: E402

# (name, code, substrings the message must contain, error kind)
SHAPE = [
    ("add", "ones(2, 3) + ones(4, 5)", ["add", "[2, 3]", "[4, 5]"]),
    ("sub", "ones(2, 3) - ones(3, 2)", ["sub", "[2, 3]", "[3, 2]"]),
    ("mul_3d", "ones(2, 3, 4) * ones(2, 5, 4)", ["mul", "[2, 3, 4]", "[2, 5, 4]"]),
    ("div", "ones(3) / ones(4)", ["div", "[3]", "[4]"]),
    ("mod", "ones(2, 3) % ones(3, 2)", ["mod", "[2, 3]", "[3, 2]"]),
    ("pow", "pow(ones(2), ones(3))", ["pow", "[2]", "[3]"]),
    ("compare", "ones(2) < ones(3)", ["[2]", "[3]"]),
    ("maximum", "maximum(ones(2, 3), ones(2, 2))", ["maximum", "[2, 3]", "[2, 2]"]),
    ("where", "where(ones(2) > 0, ones(3), ones(2))", ["where", "[3]", "[2]"]),
    ("matmul_op", "ones(2, 3) @ ones(4, 5)", ["matmul", "[2, 3]", "[4, 5]"]),
    ("matmul_1d", "matmul(ones(3), ones(4))", ["matmul", "[3]", "[4]"]),
    ("matmul_batch", "ones(2, 3, 4) @ ones(3, 4, 5)", ["matmul", "[2, 3, 4]", "[3, 4, 5]", "batch"]),
    ("matmul_batch_4d", "matmul(ones(2, 3, 3, 4), ones(5, 4, 2))", ["matmul", "[2, 3, 3, 4]", "[5, 4, 2]", "batch"]),
    ("dot", "dot(ones(3), ones(4))", ["dot", "3", "4"]),
    ("concat", "concat(list(ones(2, 3), ones(2, 4)))", ["concat", "[2, 3]", "[2, 4]"]),
    ("stack", "stack(list(ones(2, 3), ones(3, 2)))", ["stack", "[2, 3]", "[3, 2]"]),
    ("reshape", "reshape(ones(2, 3), 4, 2)", ["reshape", "[2, 3]", "[4, 2]"]),
    ("expand", "expand(ones(2, 3), [4, 3])", ["expand", "[2, 3]", "[4, 3]"]),
    ("conv2d_channels", "conv2d(ones(1, 2, 5, 5), ones(3, 4, 3, 3))", ["conv2d", "[1, 2, 5, 5]", "[3, 4, 3, 3]"]),
    ("layer_norm_weight", "layer_norm(ones(2, 3), ones(4))", ["layer_norm", "[3]", "[4]"]),
    ("cross_entropy_targets", "cross_entropy(ones(4, 3), tensor([0, 1, 2, 0, 1]))", ["cross_entropy", "[4, 3]", "[5]"]),
    ("scatter_add_src", "scatter_add(zeros(3), 0, tensor([1, 2]), ones(3, 2))", ["scatter_add", "[3, 2]", "[2]"]),
    ("gather_index", "gather(ones(3, 3), 1, tensor([1, 2]))", ["gather", "[2]", "[3, 3]"]),
    ("mask", "ones(2, 3)[ones(3, 2) > 0]", ["[3, 2]", "[2, 3]"]),
    ("setindex", "x = ones(2, 3)\nx[0, :] = ones(4)", ["[4]", "[3]"]),
    ("mse_loss_shapes", "mse_loss(ones(2, 3), ones(3, 2))", ["mse_loss", "[2, 3]", "[3, 2]"]),
]
DTYPE = [
    ("cross_entropy_float_targets", "cross_entropy(ones(2, 3), ones(2))", ["cross_entropy", "integer", "f32"]),
    ("embedding_float_idx", "embedding(ones(3, 4), tensor([0.5]))", ["embedding", "integer", "f32"]),
    ("one_hot_float", "one_hot(tensor([1.5]), 3)", ["one_hot", "integer", "f32"]),
    ("gather_float_idx", "gather(ones(3, 3), 1, ones(3, 3))", ["gather", "integer", "f32"]),
    ("scatter_add_float_idx", "scatter_add(ones(3, 3), 1, ones(3, 3), ones(3, 3))", ["scatter_add", "integer", "f32"]),
    ("take_float_idx", "take(ones(3), tensor([0.5]))", ["take", "integer", "f32"]),
    ("index_float", "ones(3)[tensor([0.5])]", ["index", "integer", "f32"]),
    ("masked_select_mask", "masked_select(ones(3), tensor([1, 0, 1]))", ["masked_select", "bool", "i64"]),
    ("requires_grad_int", "x = tensor([1, 2])\nx.requires_grad = true", ["floating", "i64"]),
    ("unknown_dtype", 'zeros(2, dtype="f33")', ["zeros", "f33", "f32"], "ValueError"),
    ("to_unknown_dtype", 'to(ones(2), "float128")', ["float128"], "ValueError"),
]
INDEX = [
    ("int_axis0", "ones(2, 3)[5, 0]", ["5", "axis 0", "size 2"]),
    ("int_neg_axis1", "ones(2, 3)[0, -7]", ["-7", "axis 1", "size 3"]),
    ("assign", "x = ones(3)\nx[5] = 1", ["5", "axis 0", "size 3"]),
    ("tensor_index", "ones(2, 3)[tensor([0, 4])]", ["index:", "4", "axis 0", "size 2"]),
    ("take", "take(ones(3), tensor([7]))", ["take", "7", "axis 0", "size 3"]),
    ("take_neg", "take(ones(2, 3), tensor([-4]), axis=1)", ["take", "-4", "axis 1", "size 3"]),
    ("gather", "gather(ones(3, 3), 1, tensor([[5]]))", ["gather", "5", "axis 1", "size 3"]),
    ("scatter_add", "scatter_add(zeros(3), 0, tensor([5]), ones(1))", ["scatter_add", "5", "axis 0", "size 3"]),
    ("index_select", "index_select(ones(3, 4), 1, tensor([9]))", ["index_select", "9", "axis 1", "size 4"]),
    ("embedding", "embedding(ones(3, 4), tensor([5]))", ["embedding", "5", "size 3"]),
    ("cross_entropy_target", "cross_entropy(ones(2, 3), tensor([0, 7]))", ["cross_entropy", "7", "3"]),
    ("one_hot", "one_hot(tensor([5]), 3)", ["one_hot", "5", "3"]),
    ("too_many_indices", "ones(2, 3)[0, 0, 0]", ["too many indices", "2"]),
    ("sum_axis", "sum(ones(2, 3), axis=5)", ["sum", "axis 5", "dimension 2"]),
    ("softmax_axis", "softmax(ones(2, 3), axis=3)", ["softmax", "axis 3", "dimension 2"]),
    ("argmax_axis", "argmax(ones(2, 3), axis=2)", ["argmax", "axis 2", "dimension 2"]),
    ("transpose_axis", "transpose(ones(2, 3), 0, 4)", ["transpose", "axis 4", "dimension 2"]),
    ("cumsum_axis", "cumsum(ones(2, 3), axis=-3)", ["cumsum", "-3", "dimension 2"]),
    ("topk_k", "topk(ones(2), 3)", ["topk", "3", "size 2"]),
]
OTHER = [
    ("item_many", "item(ones(3))", ["item", "[3]"]),
    ("truthiness", "if ones(3) > 0 { 1 }", ["ambiguous", "3"], "ValueError"),
    ("backward_no_grad", "backward(ones(3))", ["backward", "grad"]),
    ("split_sizes", "split(ones(5), list(2, 2))", ["split", "4", "5"]),
    ("dropout_p", "dropout(ones(3), p=1.5)", ["dropout", "1.5"]),
    ("randint_range", "randint(5, 2, [3])", ["randint", "5", "2"]),
    ("tensor_plus_string", 'ones(2) + "a"', ["tensor", "string"], "TypeError"),
    ("mask_assign_leaf", "x = ones(2, 3)\nx.requires_grad = true\nx[x > 0] = 2", ["leaf", "requires grad"]),
    ("index_assign_leaf", "x = ones(2, 3)\nx.requires_grad = true\nx[0, 0] = 5", ["leaf", "requires grad"]),
    ("slice_assign_leaf", "x = ones(2, 3)\nx.requires_grad = true\nx[0, :] = ones(3)", ["leaf", "requires grad"]),
    ("view_assign_nonleaf", "x = ones(2, 3)\nx.requires_grad = true\ny = x * 1\nv = y[0]\nv[0] = 7",
     ["in-place", "autograd graph"]),
    ("mask_assign_view_nonleaf", "x = ones(2, 3)\nx.requires_grad = true\ny = x * 1\nv = y[0]\nv[v > 0] = 2",
     ["in-place", "autograd graph", "base"]),
    ("modified_in_place", "x = ones(2, 3)\nx.requires_grad = true\nh = x * 2\nz = h * h\nh[0] = 1\nbackward(sum(z))",
     ["backward", "MulBackward", "modified in place", "version 0, now 1"]),
]

ALL = [("shape", SHAPE), ("dtype", DTYPE), ("index", INDEX), ("other", OTHER)]


def entries():
    for group, lst in ALL:
        for e in lst:
            name, code, subs = e[0], e[1], e[2]
            kind = e[3] if len(e) > 3 else "TensorError"
            yield f"{group}.{name}", code, subs, kind


def uncaught(item):
    """Runs code as a whole script: status 1, no signal, report on stderr, nothing after it runs."""
    name, code, subs, kind = item
    rc, so, se = run_nabla(code + '\nprint("NOT REACHED")\n', timeout=20)
    if rc < 0 or rc == -999:
        return name, f"nabla killed by signal {-rc}" if rc != -999 else "timeout", code
    if rc != 1:
        return name, f"exit status {rc} (want 1); stderr {se.strip()[:200]!r}", code
    if "NOT REACHED" in so:
        return name, "the script went on after the error", code
    # (a warning the call gave before failing, as torch's mse_loss does, comes first)
    lines = [l for l in se.strip().split("\n") if l and "Warning:" not in l] if se.strip() else []
    first = lines[0] if lines else ""
    if f"{kind}:" not in first:
        return name, f"stderr's first line {first!r} is not a {kind} report", code
    missing = [s for s in subs if s not in first]
    if missing:
        return name, f"error report {first!r} lacks {missing}", code
    if "^" not in se:
        return name, f"the report does not point at the source: {se.strip()[:300]!r}", code
    return name, None, code


def main():
    items = list(entries())
    with ThreadPoolExecutor(max_workers=8) as ex:
        for name, why, code in ex.map(uncaught, items):
            if why:
                report_fail(f"errors.uncaught.{name}", f"{why}; case: {' '.join(code.split())}")
            else:
                report_pass(f"errors.uncaught.{name}")
    # the same errors, caught: one process, every case inside try/catch
    b = Batch("errors.caught")
    for name, code, subs, kind in items:
        b.error(name, code, subs, kind)
    b.run()
    # a script continues after try { bad op } catch e { print(e.message) }, and values are intact
    rc, so, se = run_nabla(
        "x = ones(2, 3)\n"
        "try { y = x @ ones(4, 5) } catch e { print(e.message) }\n"
        "try { x[9, 0] = 1 } catch e { print(e.name) }\n"
        "r = try { cross_entropy(x, ones(2)) } catch e { \"recovered\" }\n"
        "print(r)\n"
        "print(sum(x).item)\n"
        "for i in 0..50 { try { ones(i + 1) + ones(i + 2) } catch e { } }\n"
        "print(\"after\")\n")
    lines = so.strip().split("\n")
    ok = (rc == 0 and len(lines) == 5 and "matmul" in lines[0] and "[2, 3]" in lines[0] and "[4, 5]" in lines[0]
          and lines[1] == "TensorError" and lines[2] == "recovered" and lines[3] == "6.0" and lines[4] == "after")
    check("errors.continues_after_catch", ok, f"rc={rc} stdout={so!r} stderr={se[:300]!r}")
    # a tensor error inside a function reports the call site chain and status 1
    rc, so, se = run_nabla("fn f(a) = a @ ones(7, 2)\nfn g(a) = f(a) * 2\nprint(g(ones(3, 4)))\n")
    check("errors.inside_function", rc == 1 and "TensorError" in se and "matmul" in se and "[3, 4]" in se and "[7, 2]" in se,
          f"rc={rc} stderr={se[:300]!r}")
    # random garbage inputs to a few ops never crash (status 0 or 1, never a signal)
    fuzz = []
    for _ in range(40):
        s1 = [int(v) for v in rng.integers(0, 4, size=int(rng.integers(0, 4)))]
        s2 = [int(v) for v in rng.integers(0, 4, size=int(rng.integers(0, 4)))]
        op = ["+", "@", "concat", "where", "matmul", "gather", "take", "reshape", "conv2d", "max_pool2d", "index"][int(rng.integers(0, 11))]
        a, c = f"ones({s1})", f"ones({s2})"
        code = {"+": f"{a} + {c}", "@": f"{a} @ {c}", "concat": f"concat(list({a}, {c}), axis=-1)", "where": f"where({a} > 0, {a}, {c})",
                "matmul": f"matmul({c}, {a})", "gather": f"gather({a}, 0, zeros({s2}, dtype=\"i64\"))",
                "take": f"take({a}, zeros({s2}, dtype=\"i64\"), axis=-1)", "reshape": f"reshape({a}, {s2})",
                "conv2d": f"conv2d({a}, {c})", "max_pool2d": f"max_pool2d({a}, kernel=2)", "index": f"{a}[{c} > 0]"}[op]
        fuzz.append(code)
    prog = "\n".join(f"try {{ z = {c} }} catch e {{ }}" for c in fuzz) + '\nprint("survived")\n'
    rc, so, se = run_nabla(prog)
    check("errors.random_shapes_no_crash", rc == 0 and "survived" in so, f"rc={rc} stderr={se[:300]!r}; cases: {fuzz}")
    finish()


if __name__ == "__main__":
    main()
