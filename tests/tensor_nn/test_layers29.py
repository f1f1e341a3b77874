#!/usr/bin/python3
"""Issue 29's activations and losses against torch.nn.functional's: values
and gradients of every input that takes one, on fresh random data, f32 and
f64 (bf16 for the activations), contiguous and permuted (non-contiguous)
inputs, every option and reduction; the nn. layers; then the argument
errors.  Runs on the CPU and on the emulated CUDA device (cuda/layers.cu;
NABLA_CUDA_EMULATE=force).

One nabla process per device evaluates every case and saves the results
(safetensors, read back here).  The torch reference is computed in f64 from
the same values and rounded to the case's dtype.  Seeded; the seed is
printed with every failure (NUMERICS_SEED=<seed> repeats a run).

Run with /usr/bin/python3; env NABLA = the interpreter (build/nabla).
"""
import os
import shutil
import sys

import warnings

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# NABLA_ASAN=1: also run under the ASan build by tools/run-tests.sh (torchcmp reads it)
import torchcmp  # noqa: E402
from torchcmp import NABLA, SUFFIX, rng, TMP, report, read_safetensors, run_nabla  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="reduction: 'mean' divides")   # kl_div's, tested on purpose
warnings.filterwarnings("ignore", message="scatter_reduce")             # "in beta"


# ---- cases -------------------------------------------------------------------
# A case: id, a name, inputs {arg: array} (floats get gradients when listed in
# grads), a nabla expression and a torch function of the same names, a dtype.
cases, arrays = [], {}


def add(name, dt, inputs, grads, nb_expr, torch_fn, perm=None, tol=None):
    """perm: (arg, axes) — that input is stored permuted and un-permuted in
    nabla, so nabla sees a non-contiguous view with the original values"""
    i = f"c{len(cases)}"
    for k, v in inputs.items():
        arr = v
        if perm and perm[0] == k:
            arr = np.ascontiguousarray(v.transpose(perm[1]))
        arrays[f"{i}_{k}"] = arr
    cases.append({"id": i, "name": name, "dt": dt, "inputs": inputs, "grads": grads, "expr": nb_expr, "torch": torch_fn,
                  "perm": perm, "tol": tol})


def fl(shape, dt, scale=1.0, lo=None, hi=None):
    npdt = np.float32 if dt == "f32" else np.float64
    if lo is not None:
        return rng.uniform(lo, hi, shape).astype(npdt)
    return (rng.standard_normal(shape) * scale).astype(npdt)


# torch's f64 gradients of hardsigmoid and celu carry f32 constants
# (1.0f/6.0f; derivatives.yaml's 1.0/alpha.toFloat()): those f64 cases are held
# to 1e-7, the f32 rounding of the constant, instead of 1e-12
TORCH_F32_CONST = 1e-7
ACTS = [
    # (nabla call on x, torch call, input scale[, f64 tolerance])
    ("leaky_relu(x)", lambda x: F.leaky_relu(x), 2),
    ("leaky_relu(x, negative_slope=0.2)", lambda x: F.leaky_relu(x, 0.2), 2),
    ("leaky_relu(x, -0.3)", lambda x: F.leaky_relu(x, -0.3), 2),
    ("elu(x)", lambda x: F.elu(x), 3),
    ("elu(x, alpha=0.7)", lambda x: F.elu(x, 0.7), 3),
    ("selu(x)", lambda x: F.selu(x), 3),
    ("celu(x, alpha=1.7)", lambda x: F.celu(x, 1.7), 3, TORCH_F32_CONST),
    ("celu(x)", lambda x: F.celu(x), 3),
    ("softplus(x)", lambda x: F.softplus(x), 10),
    ("softplus(x, beta=2, threshold=1.5)", lambda x: F.softplus(x, 2, 1.5), 3),
    ("softplus(x, beta=0.5)", lambda x: F.softplus(x, 0.5), 30),
    ("logsigmoid(x)", lambda x: F.logsigmoid(x), 20),
    ("mish(x)", lambda x: F.mish(x), 8),
    ("hardtanh(x)", lambda x: F.hardtanh(x), 2),
    ("hardtanh(x, min_val=-0.5, max_val=2)", lambda x: F.hardtanh(x, -0.5, 2.0), 2),
    ("hardswish(x)", lambda x: F.hardswish(x), 4),
    ("hardsigmoid(x)", lambda x: F.hardsigmoid(x), 4, TORCH_F32_CONST),
    # the nn. layers (torch.nn's modules)
    ("nn.leaky_relu(0.1)(x)", lambda x: torch.nn.LeakyReLU(0.1)(x), 2),
    ("nn.elu(0.5)(x)", lambda x: torch.nn.ELU(0.5)(x), 3),
    ("nn.selu()(x)", lambda x: torch.nn.SELU()(x), 3),
    ("nn.celu(2.0)(x)", lambda x: torch.nn.CELU(2.0)(x), 3),
    ("nn.softplus(beta=3, threshold=5)(x)", lambda x: torch.nn.Softplus(3, 5)(x), 3),
    ("nn.logsigmoid()(x)", lambda x: torch.nn.LogSigmoid()(x), 5),
    ("nn.mish()(x)", lambda x: torch.nn.Mish()(x), 5),
    ("nn.hardtanh(-2, 0.5)(x)", lambda x: torch.nn.Hardtanh(-2, 0.5)(x), 2),
    ("nn.hardswish()(x)", lambda x: torch.nn.Hardswish()(x), 4),
    ("nn.hardsigmoid()(x)", lambda x: torch.nn.Hardsigmoid()(x), 4, TORCH_F32_CONST),
]


def make_cases():
    shapes = [(7,), (3, 5, 4), (2, 3, 4, 5)]
    for k, (expr, tfn, scale, *f64tol) in enumerate(ACTS):
        for dt in ("f32", "f64"):
            shape = shapes[(k + (dt == "f64")) % len(shapes)]
            perm = ("x", list(range(len(shape)))[::-1]) if len(shape) >= 3 and (k + (dt == "f32")) % 2 == 0 else None
            add(f"{expr} {dt} {list(shape)}{' permuted' if perm else ''}", dt, {"x": fl(shape, dt, scale)}, ["x"], expr,
                lambda t, f=tfn: f(t["x"]), perm=perm, tol=f64tol[0] if f64tol and dt == "f64" else None)
    # prelu: one weight or one per channel; gradients for input and weight
    for dt in ("f32", "f64"):
        for shape, nw in (((4, 3, 5), 3), ((4, 3, 5), 1), ((6, 2), 2), ((2, 3, 2, 3), 3)):
            w = fl((nw,), dt, lo=-0.5, hi=0.8)
            add(f"prelu {dt} {list(shape)} weight [{nw}]", dt, {"x": fl(shape, dt, 2), "w": w}, ["x", "w"], "prelu(x, w)",
                lambda t: F.prelu(t["x"], t["w"]), perm=("x", [2, 1, 0]) if len(shape) == 3 else None)
        add(f"nn.prelu(3, init=0.1) {dt}", dt, {"x": fl((5, 3, 2), dt, 2)}, ["x"], "nn.to(nn.to(nn.prelu(3, init=0.1), x.dtype), dev)(x)",
            lambda t: F.prelu(t["x"], torch.full((3,), 0.1).to(t["x"].dtype)))   # an f32 weight, as torch's PReLU

    for dt in ("f32", "f64"):
        for red in ("none", "mean", "sum"):
            R = f'reduction="{red}"'
            # binary_cross_entropy, with and without weight
            for shape in ((5, 3), (2, 3, 4)):
                add(f"binary_cross_entropy {dt} {list(shape)} {red}", dt,
                    {"x": fl(shape, dt, lo=0.02, hi=0.98), "t": fl(shape, dt, lo=0, hi=1)}, ["x", "t"],
                    f"binary_cross_entropy(x, t, {R})", lambda t, red=red: F.binary_cross_entropy(t["x"], t["t"], reduction=red))
            add(f"binary_cross_entropy weight {dt} {red}", dt,
                {"x": fl((4, 3), dt, lo=0.02, hi=0.98), "t": fl((4, 3), dt, lo=0, hi=1), "w": fl((3,), dt, lo=0.2, hi=2)}, ["x"],
                f"binary_cross_entropy(x, t, weight=w, {R})",
                lambda t, red=red: F.binary_cross_entropy(t["x"], t["t"], weight=t["w"], reduction=red), perm=("x", [1, 0]))
            # with logits: weight, pos_weight
            for opts in ("", "w", "pw", "w pw"):
                kw = [f"weight=w" for _ in [0] if "w" in opts.split()] + [f"pos_weight=pw" for _ in [0] if "pw" in opts.split()]
                ins = {"x": fl((6, 4), dt, 4), "t": fl((6, 4), dt, lo=0, hi=1)}
                if "w" in opts.split():
                    ins["w"] = fl((6, 1), dt, lo=0.2, hi=2)
                if "pw" in opts.split():
                    ins["pw"] = fl((4,), dt, lo=0.3, hi=3)
                add(f"binary_cross_entropy_with_logits {dt} {red} {opts or 'plain'}", dt, ins, ["x", "t"],
                    f"binary_cross_entropy_with_logits(x, t, {', '.join(kw + [R])})",
                    lambda t, red=red: F.binary_cross_entropy_with_logits(t["x"], t["t"], weight=t.get("w"), pos_weight=t.get("pw"),
                                                                           reduction=red),
                    perm=("x", [1, 0]) if opts == "w" else None)
            # nll_loss: [N, C], [N, C, d1, d2], [C]; weight; ignore_index
            for shape, weighted, ig in (((7, 5), False, -100), ((7, 5), True, 2), ((3, 4, 2, 3), True, -100), ((3, 4, 2, 3), False, 1),
                                        ((6,), False, -100)):
                C = shape[1] if len(shape) > 1 else shape[0]
                logp = torch.log_softmax(torch.tensor(fl(shape, "f64", 2)), dim=1 if len(shape) > 1 else 0).numpy().astype(
                    np.float32 if dt == "f32" else np.float64)
                tshape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
                tgt = rng.integers(0, C, tshape).astype(np.int64)
                if ig != -100 and tgt.size > 1:
                    tgt.flat[0] = ig   # make sure an ignored class occurs
                ins = {"x": logp, "t": tgt}
                if weighted:
                    ins["w"] = fl((C,), dt, lo=0.2, hi=2)
                kw = (["weight=w"] if weighted else []) + ([f"ignore_index={ig}"] if ig != -100 else []) + [R]
                add(f"nll_loss {dt} {list(shape)} {red} weight={weighted} ignore_index={ig}", dt, ins, ["x"],
                    f"nll_loss(x, t, {', '.join(kw)})",
                    lambda t, red=red, ig=ig: F.nll_loss(t["x"], t["t"], weight=t.get("w"), ignore_index=ig, reduction=red),
                    perm=("x", [0, 3, 2, 1]) if len(shape) == 4 and weighted else None)
            # kl_div (targets with exact zeros), log_target
            for lt in (False, True):
                for r2 in ([red, "batchmean"] if red == "sum" else [red]):
                    x = torch.log_softmax(torch.tensor(fl((4, 5), "f64", 1)), 1).numpy().astype(np.float32 if dt == "f32" else np.float64)
                    tp = torch.softmax(torch.tensor(fl((4, 5), "f64", 1)), 1).numpy()
                    zero = not lt and r2 != "none"   # a zero target: 0 log 0 = 0 (its gradient is torch's 0/0: not compared)
                    if zero:
                        tp[0, 1] = 0.0
                    tv = (np.log(tp) if lt else tp).astype(x.dtype)
                    add(f"kl_div {dt} {r2} log_target={lt}{' zero target' if zero else ''}", dt, {"x": x, "t": tv}, ["x"] if zero else ["x", "t"],
                        f'kl_div(x, t, reduction="{r2}", log_target={"true" if lt else "false"})',
                        lambda t, r2=r2, lt=lt: F.kl_div(t["x"], t["t"], reduction=r2, log_target=lt))
            for beta in (1.0, 0.5, 0.0):
                add(f"smooth_l1_loss {dt} {red} beta={beta}", dt, {"x": fl((5, 6), dt, 1.5), "t": fl((5, 6), dt, 1.5)}, ["x", "t"],
                    f"smooth_l1_loss(x, t, {R}, beta={beta})", lambda t, red=red, b=beta: F.smooth_l1_loss(t["x"], t["t"], reduction=red, beta=b),
                    perm=("x", [1, 0]) if beta == 0.5 else None)
            for delta in (1.0, 0.3):
                add(f"huber_loss {dt} {red} delta={delta}", dt, {"x": fl((3, 7), dt, 1.5), "t": fl((3, 7), dt, 1.5)}, ["x", "t"],
                    f"huber_loss(x, t, {R}, delta={delta})", lambda t, red=red, d=delta: F.huber_loss(t["x"], t["t"], reduction=red, delta=d))
            for margin in (0.0, 0.5):
                y = np.where(rng.random(9) < 0.5, -1.0, 1.0).astype(np.float32 if dt == "f32" else np.float64)
                add(f"margin_ranking_loss {dt} {red} margin={margin}", dt, {"a": fl((9,), dt), "b": fl((9,), dt), "y": y}, ["a", "b"],
                    f"margin_ranking_loss(a, b, y, margin={margin}, {R})",
                    lambda t, red=red, m=margin: F.margin_ranking_loss(t["a"], t["b"], t["y"], margin=m, reduction=red))
                for shape in ((6, 5), (5,)):
                    n = shape[0] if len(shape) == 2 else None
                    y = (np.where(rng.random(n) < 0.5, -1, 1) if n else np.array(-1 if rng.random() < 0.5 else 1)).astype(np.int64)
                    add(f"cosine_embedding_loss {dt} {list(shape)} {red} margin={margin}", dt, {"a": fl(shape, dt), "b": fl(shape, dt), "y": y},
                        ["a", "b"], f"cosine_embedding_loss(a, b, y, margin={margin}, {R})",
                        lambda t, red=red, m=margin: F.cosine_embedding_loss(t["a"], t["b"], t["y"], margin=m, reduction=red),
                        perm=("a", [1, 0]) if len(shape) == 2 and margin else None)
    # the loss layers (torch.nn's modules), weights kept as buffers
    add("nn.bce_with_logits_loss(pos_weight=pw) f64", "f64", {"x": fl((4, 3), "f64", 3), "t": fl((4, 3), "f64", lo=0, hi=1),
        "pw": fl((3,), "f64", lo=0.5, hi=2)}, ["x"], "nn.bce_with_logits_loss(pos_weight=pw)(x, t)",
        lambda t: torch.nn.BCEWithLogitsLoss(pos_weight=t["pw"])(t["x"], t["t"]))
    add("nn.bce_loss(reduction=sum) f32", "f32", {"x": fl((4, 3), "f32", lo=0.05, hi=0.95), "t": fl((4, 3), "f32", lo=0, hi=1)}, ["x"],
        'nn.bce_loss(reduction="sum")(x, t)', lambda t: torch.nn.BCELoss(reduction="sum")(t["x"], t["t"]))
    logp = torch.log_softmax(torch.tensor(fl((5, 4), "f64")), 1).numpy()
    add("nn.nll_loss(weight=w, ignore_index=0) f64", "f64", {"x": logp, "t": rng.integers(0, 4, 5).astype(np.int64), "w": fl((4,), "f64", lo=0.5, hi=2)},
        ["x"], "nn.nll_loss(weight=w, ignore_index=0)(x, t)", lambda t: torch.nn.NLLLoss(weight=t["w"], ignore_index=0)(t["x"], t["t"]))
    add("nn.kl_div_loss(batchmean, log_target) f64", "f64", {"x": logp, "t": torch.log_softmax(torch.tensor(fl((5, 4), "f64")), 1).numpy()}, ["x"],
        'nn.kl_div_loss(reduction="batchmean", log_target=true)(x, t)',
        lambda t: torch.nn.KLDivLoss(reduction="batchmean", log_target=True)(t["x"], t["t"]))
    add("nn.smooth_l1_loss(beta=0.3) f32", "f32", {"x": fl((8,), "f32"), "t": fl((8,), "f32")}, ["x"], "nn.smooth_l1_loss(beta=0.3)(x, t)",
        lambda t: torch.nn.SmoothL1Loss(beta=0.3)(t["x"], t["t"]))
    add("nn.huber_loss(delta=0.4) f32", "f32", {"x": fl((8,), "f32"), "t": fl((8,), "f32")}, ["x"], "nn.huber_loss(delta=0.4)(x, t)",
        lambda t: torch.nn.HuberLoss(delta=0.4)(t["x"], t["t"]))
    add("nn.margin_ranking_loss(0.2) f64", "f64", {"a": fl((6,), "f64"), "b": fl((6,), "f64"), "y": np.where(rng.random(6) < 0.5, -1.0, 1.0)},
        ["a", "b"], "nn.margin_ranking_loss(0.2)(a, b, y)", lambda t: torch.nn.MarginRankingLoss(0.2)(t["a"], t["b"], t["y"]))
    add("nn.cosine_embedding_loss(0.1) f64", "f64", {"a": fl((6, 3), "f64"), "b": fl((6, 3), "f64"), "y": np.where(rng.random(6) < 0.5, -1, 1)},
        ["a", "b"], "nn.cosine_embedding_loss(0.1)(a, b, y)", lambda t: torch.nn.CosineEmbeddingLoss(0.1)(t["a"], t["b"], t["y"]))

    make_resample_cases()


def make_resample_cases():
    """pad, interpolate, adaptive_avg_pool1d/2d, unfold/fold, index_add and their nn. layers"""
    for dt in ("f32", "f64"):
        pads = [((2, 3, 5, 6), [1, 2], "constant", 0.0), ((2, 3, 5, 6), [1, 2, 0, 3], "constant", 0.5),
                ((2, 3, 4, 5, 3), [2, -1, 1, 1, 1, 0], "constant", -1.5), ((4, 6), [3, 0, 1, 2], "constant", 2.0),
                ((2, 3, 7), [2, 3], "reflect", 0.0), ((2, 3, 5, 6), [1, 2, 3, 1], "reflect", 0.0),
                ((2, 3, 7), [3, 1], "replicate", 0.0), ((2, 3, 5, 6), [2, 0, 1, 3], "replicate", 0.0),
                ((1, 2, 3, 4, 5), [1, 1, 2, 0, 1, 2], "replicate", 0.0),
                ((2, 3, 7), [2, 3], "circular", 0.0), ((2, 3, 5, 6), [1, 2, 3, 1], "circular", 0.0)]
        for k, (shape, pd, mode, val) in enumerate(pads):
            perm = ("x", list(range(len(shape)))[::-1]) if k % 2 == (dt == "f64") else None
            vs = f", value={val}" if mode == "constant" else ""
            add(f"pad {dt} {list(shape)} {pd} {mode}{vs}{' permuted' if perm else ''}", dt, {"x": fl(shape, dt)}, ["x"],
                f'pad(x, {pd}, mode="{mode}"{vs})',
                lambda t, pd=pd, mode=mode, val=val: F.pad(t["x"], pd, mode=mode, **({"value": val} if mode == "constant" else {})), perm=perm)
        interps = [((2, 3, 7), "size=11", {"size": 11}, "nearest"), ((2, 3, 5, 6), "scale_factor=2", {"scale_factor": 2}, "nearest"),
                   ((2, 3, 5, 6), "scale_factor=1.5", {"scale_factor": 1.5}, "nearest"), ((2, 3, 9, 8), "size=[4, 5]", {"size": [4, 5]}, "nearest"),
                   ((2, 3, 7), "size=12", {"size": 12}, "linear"), ((2, 3, 7), "size=4, align_corners=true", {"size": 4, "align_corners": True}, "linear"),
                   ((2, 3, 5, 6), "size=[7, 9]", {"size": [7, 9]}, "bilinear"),
                   ((2, 3, 5, 6), "size=[7, 9], align_corners=true", {"size": [7, 9], "align_corners": True}, "bilinear"),
                   ((2, 3, 5, 6), "scale_factor=2, align_corners=false", {"scale_factor": 2, "align_corners": False}, "bilinear"),
                   ((1, 2, 8, 6), "size=[3, 4]", {"size": [3, 4]}, "bilinear")]
        for k, (shape, args, kw, mode) in enumerate(interps):
            perm = ("x", list(range(len(shape)))[::-1]) if k % 2 == (dt == "f32") else None
            add(f"interpolate {dt} {list(shape)} {args} {mode}{' permuted' if perm else ''}", dt, {"x": fl(shape, dt)}, ["x"],
                f'interpolate(x, {args}, mode="{mode}")', lambda t, kw=kw, mode=mode: F.interpolate(t["x"], mode=mode, **kw), perm=perm)
        for shape, o in (((2, 3, 10), 4), ((2, 3, 10), 7), ((3, 9), 4), ((2, 3, 10), 13)):
            add(f"adaptive_avg_pool1d {dt} {list(shape)} -> {o}", dt, {"x": fl(shape, dt)}, ["x"], f"adaptive_avg_pool1d(x, {o})",
                lambda t, o=o: F.adaptive_avg_pool1d(t["x"], o))
        for shape, o in (((2, 3, 7, 9), [3, 4]), ((2, 3, 7, 9), 5), ((3, 7, 9), [2, 9]), ((1, 2, 4, 4), 1)):
            add(f"adaptive_avg_pool2d {dt} {list(shape)} -> {o}", dt, {"x": fl(shape, dt)}, ["x"], f"adaptive_avg_pool2d(x, {o})",
                lambda t, o=o: F.adaptive_avg_pool2d(t["x"], o), perm=("x", [0, 1, 3, 2]) if len(shape) == 4 and o == 5 else None)
        unf = [((2, 3, 6, 7), "2", {"kernel_size": 2}),
               ((2, 3, 6, 7), "[2, 3], dilation=[1, 2], padding=1, stride=[2, 1]",
                {"kernel_size": (2, 3), "dilation": (1, 2), "padding": 1, "stride": (2, 1)}),
               ((1, 2, 5, 5), "3, padding=[1, 0], stride=2", {"kernel_size": 3, "padding": (1, 0), "stride": 2})]
        for k, (shape, args, kw) in enumerate(unf):
            add(f"unfold {dt} {list(shape)} {args}", dt, {"x": fl(shape, dt)}, ["x"], f"unfold(x, {args})",
                lambda t, kw=kw: F.unfold(t["x"], **kw), perm=("x", [3, 2, 1, 0]) if k == 1 else None)
            cols = F.unfold(torch.zeros(shape), **kw).shape
            osz = list(shape[2:])
            add(f"fold {dt} {list(cols)} -> {osz} {args}", dt, {"x": fl(tuple(cols), dt)}, ["x"], f"fold(x, {osz}, {args})",
                lambda t, kw=kw, osz=osz: F.fold(t["x"], osz, **kw), perm=("x", [2, 1, 0]) if k == 2 else None)
        for shape, dim, idx, sshape, alpha in (((5, 4), 0, [0, 2, 0, 4, 1, 2], (6, 4), 1.0), ((3, 6), 1, [5, 0, 5, 2], (3, 4), -0.5),
                                               ((4, 3, 2), -2, [2, 2, 1], (4, 3, 2), 2.0)):
            ins = {"x": fl(shape, dt), "i": np.array(idx, dtype=np.int64), "s": fl(sshape, dt)}
            add(f"index_add {dt} {list(shape)} dim={dim} alpha={alpha}", dt, ins, ["x", "s"], f"index_add(x, {dim}, i, s, alpha={alpha})",
                lambda t, dim=dim, alpha=alpha: torch.index_add(t["x"], dim, t["i"], t["s"], alpha=alpha),
                perm=("s", [1, 0]) if len(sshape) == 2 and dim == 0 else None)
        # adaptive_max_pool2d: values, gradient, and the indices (as f64 values of a second case)
        for k, (shape, o) in enumerate((((2, 3, 7, 9), [3, 4]), ((2, 3, 7, 9), 5), ((3, 6, 5), [4, 2]), ((1, 2, 4, 4), 1))):
            x = fl(shape, dt)
            perm = ("x", [0, 1, 3, 2]) if k == 1 else None
            add(f"adaptive_max_pool2d {dt} {list(shape)} -> {o}", dt, {"x": x}, ["x"], f"adaptive_max_pool2d(x, {o})",
                lambda t, o=o: F.adaptive_max_pool2d(t["x"], o), perm=perm)
            add(f"adaptive_max_pool2d return_indices {dt} {list(shape)} -> {o}", dt, {"x": x}, [],
                f"adaptive_max_pool2d(x, {o}, return_indices=true)[1].to(x.dtype)",
                lambda t, o=o: F.adaptive_max_pool2d(t["x"], o, return_indices=True)[1].to(t["x"].dtype), perm=perm)
        # scatter_reduce (every reduction; include_self), index repeated
        for red in ("sum", "mean", "prod", "amax", "amin"):
            for inc in (True, False):
                for shape, dim, ishape in (((4, 5), 0, (6, 5)), ((3, 6), 1, (3, 4)), ((2, 3, 4), 2, (2, 3, 7))):
                    idx = rng.integers(0, shape[dim] - 1, ishape).astype(np.int64)   # the last slot stays untouched
                    ins = {"x": fl(shape, dt), "i": idx, "s": fl(ishape, dt)}
                    add(f"scatter_reduce {dt} {list(shape)} dim={dim} {red} include_self={inc}", dt, ins, ["x", "s"],
                        f'scatter_reduce(x, {dim}, i, s, "{red}", include_self={"true" if inc else "false"})',
                        lambda t, dim=dim, red=red, inc=inc: torch.scatter_reduce(t["x"], dim, t["i"], t["s"], red, include_self=inc),
                        perm=("x", [1, 0]) if len(shape) == 2 and inc else None)
        # prod with zeros: a group with one zero (its gradient: the product of the others), one with two, one without
        add(f"scatter_reduce {dt} prod with zeros", dt,
            {"x": np.array([2.0, -3.0, 0.0, 1.5], dtype=fl((1,), dt).dtype), "i": np.array([0, 0, 1, 1, 2, 3, 3], dtype=np.int64),
             "s": np.array([0.0, 1.25, 0.0, 0.0, 4.0, -0.5, 3.0], dtype=fl((1,), dt).dtype)}, ["x", "s"],
            'scatter_reduce(x, 0, i, s, "prod")', lambda t: torch.scatter_reduce(t["x"], 0, t["i"], t["s"], "prod"))
        # without gradients the CPU reads the index as stored: an expanded (stride-0) i64 index and an i32 one
        for red in ("amax", "amin", "prod"):
            ins = {"x": fl((5, 4), dt), "i": rng.integers(0, 4, 7).astype(np.int64), "s": fl((7, 4), dt)}
            add(f"scatter_reduce {dt} {red} expanded index, no gradient", dt, ins, [],
                f'scatter_reduce(x, 0, expand(reshape(i, [7, 1]), [7, 4]), s, "{red}", include_self=false)',
                lambda t, red=red: torch.scatter_reduce(t["x"], 0, t["i"].view(7, 1).expand(7, 4), t["s"], red, include_self=False))
            add(f"scatter_reduce {dt} {red} i32 index, no gradient", dt, ins, [],
                f'scatter_reduce(x, 0, expand(reshape(i, [7, 1]), [7, 4]).to("i32"), s, "{red}")',
                lambda t, red=red: torch.scatter_reduce(t["x"], 0, t["i"].view(7, 1).expand(7, 4), t["s"], red))
        if dt == "f32":   # the f32 fast paths (activation.c): threaded, chunked sizes; mish's x > 20 switch, its exp's overflow
            big = np.concatenate([rng.uniform(-100, 100, 60000), rng.uniform(19, 21, 5000), rng.standard_normal(5000),
                                  [0.0, -0.0, 20.0, 88.0, 89.0, -88.0, -104.0]]).astype(np.float32)
            for expr, fn in (("mish(x)", F.mish), ("leaky_relu(x, 0.03)", lambda t: F.leaky_relu(t, 0.03))):
                add(f"{expr} f32 [{big.size}] fast path", dt, {"x": big}, ["x"], expr, lambda t, fn=fn: fn(t["x"]))
        # scatter_add with an expanded index (a GCN's dst.reshape(E, 1).expand(E, F)): the CPU runs it as
        # index_add without copying the index; a partial expansion (3 of 4 columns) and an i32 index keep scatter's path
        for shape, dim, view, full in (((5, 4), 0, [7, 1], [7, 4]), ((3, 6), 1, [1, 8], [3, 8]), ((2, 5, 3), -2, [1, 6, 1], [2, 6, 3]),
                                       ((5, 4), 0, [7, 1], [7, 3])):
            E = max(view)
            ax = dim % len(shape)
            ins = {"x": fl(shape, dt), "i": rng.integers(0, shape[ax], E).astype(np.int64), "s": fl(tuple(full), dt)}
            add(f"scatter_add {dt} {list(shape)} dim={dim} expanded index {full}", dt, ins, ["x", "s"],
                f"scatter_add(x, {dim}, expand(reshape(i, {view}), {full}), s)",
                lambda t, dim=dim, view=view, full=full: torch.scatter_add(t["x"], dim, t["i"].view(*view).expand(*full), t["s"]),
                perm=("s", [1, 0]) if len(full) == 2 else None)
        add(f"scatter_add {dt} expanded i32 index", dt, {"x": fl((5, 4), dt), "i": rng.integers(0, 5, 7).astype(np.int64), "s": fl((7, 4), dt)},
            ["x", "s"], 'scatter_add(x, 0, expand(reshape(i, [7, 1]), [7, 4]).to("i32"), s)',
            lambda t: torch.scatter_add(t["x"], 0, t["i"].view(7, 1).expand(7, 4), t["s"]))
        # amax/amin ties: equal members split the gradient (x's share with include_self)
        add(f"scatter_reduce {dt} amax ties", dt,
            {"x": np.array([1.0, 5.0, -2.0], dtype=fl((1,), dt).dtype), "i": np.array([0, 0, 1, 2, 2], dtype=np.int64),
             "s": np.array([1.0, 1.0, 5.0, -3.0, -2.5], dtype=fl((1,), dt).dtype)}, ["x", "s"],
            'scatter_reduce(x, 0, i, s, "amax")', lambda t: torch.scatter_reduce(t["x"], 0, t["i"], t["s"], "amax"))
        # embedding_bag: 2-D bags, offsets (an empty bag), include_last_offset, per_sample_weights
        W = fl((9, 4), dt)
        for mode in ("sum", "mean", "max"):
            add(f"embedding_bag {dt} 2-D {mode}", dt, {"w": W, "i": rng.integers(0, 9, (5, 3)).astype(np.int64)}, ["w"],
                f'embedding_bag(i, w, mode="{mode}")', lambda t, mode=mode: F.embedding_bag(t["i"], t["w"], mode=mode))
            add(f"embedding_bag {dt} offsets (an empty bag) {mode}", dt,
                {"w": W, "i": rng.integers(0, 9, 8).astype(np.int64), "o": np.array([0, 3, 3, 6], dtype=np.int64)}, ["w"],
                f'embedding_bag(i, w, o, mode="{mode}")', lambda t, mode=mode: F.embedding_bag(t["i"], t["w"], t["o"], mode=mode))
            add(f"embedding_bag {dt} include_last_offset {mode}", dt,
                {"w": W, "i": rng.integers(0, 9, 7).astype(np.int64), "o": np.array([0, 2, 5, 7], dtype=np.int64)}, ["w"],
                f'embedding_bag(i, w, o, mode="{mode}", include_last_offset=true)',
                lambda t, mode=mode: F.embedding_bag(t["i"], t["w"], t["o"], mode=mode, include_last_offset=True))
        add(f"embedding_bag {dt} per_sample_weights", dt,
            {"w": W, "i": rng.integers(0, 9, 7).astype(np.int64), "o": np.array([0, 4], dtype=np.int64), "p": fl((7,), dt)}, ["w", "p"],
            'embedding_bag(i, w, o, mode="sum", per_sample_weights=p)',
            lambda t: F.embedding_bag(t["i"], t["w"], t["o"], mode="sum", per_sample_weights=t["p"]))
    make_ctc_cases()
    make_parallel_scatter_cases()
    layers = [("nn.upsample(scale_factor=2, mode=\"bilinear\", align_corners=false)(x)", (2, 3, 4, 5),
               lambda x: torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)(x)),
              ("nn.upsample(size=[3, 7])(x)", (2, 3, 4, 5), lambda x: torch.nn.Upsample(size=(3, 7))(x)),
              ("nn.adaptive_avg_pool2d([2, 3])(x)", (2, 3, 5, 7), lambda x: torch.nn.AdaptiveAvgPool2d((2, 3))(x)),
              ("nn.adaptive_avg_pool1d(3)(x)", (2, 3, 8), lambda x: torch.nn.AdaptiveAvgPool1d(3)(x)),
              ("nn.adaptive_max_pool2d([3, 2])(x)", (2, 3, 7, 5), lambda x: torch.nn.AdaptiveMaxPool2d((3, 2))(x)),
              ("nn.pad([1, 1, 2, 0], \"reflect\")(x)", (2, 3, 4, 5), lambda x: torch.nn.ReflectionPad2d((1, 1, 2, 0))(x)),
              ("nn.pad([1, 2], \"replicate\")(x)", (2, 3, 4), lambda x: torch.nn.ReplicationPad1d((1, 2))(x)),
              ("nn.pad([1, 2, 1, 0], \"constant\", 3.5)(x)", (2, 3, 4, 5), lambda x: torch.nn.ConstantPad2d((1, 2, 1, 0), 3.5)(x)),
              ("nn.unfold(2, stride=2)(x)", (2, 3, 4, 6), lambda x: torch.nn.Unfold(2, stride=2)(x)),
              ("nn.fold([4, 6], 2, stride=2)(x)", (2, 12, 6), lambda x: torch.nn.Fold((4, 6), 2, stride=2)(x))]
    # nn.embedding_bag: its weight replaced by the case's (torch.nn.EmbeddingBag's forward is this F.embedding_bag)
    add("nn.embedding_bag(7, 3, mode=sum) f64", "f64", {"w": fl((7, 3), "f64"), "i": rng.integers(0, 7, 6).astype(np.int64),
        "o": np.array([0, 1, 4], dtype=np.int64)}, ["w"],
        'with_weight(nn.embedding_bag(7, 3, mode="sum"), w)(i, o)',
        lambda t: F.embedding_bag(t["i"], t["w"], t["o"], mode="sum"))
    for expr, shape, tfn in layers:
        add(f"{expr} f64", "f64", {"x": fl(shape, "f64")}, ["x"], expr, lambda t, f=tfn: f(t["x"]))



def make_parallel_scatter_cases():
    """sizes past the CPU kernels' threading threshold, one per way index.c
    splits the work (outer slices, column blocks, destination rows;
    scatter_add's leading and trailing coordinates), f64 against torch"""
    for x, dim, idx, src in (((500, 3), 0, rng.integers(0, 500, 30000), (30000, 3)),
                             ((50, 200), 0, rng.integers(0, 50, 400), (400, 200)),
                             ((8, 40, 300), 1, rng.integers(0, 40, 30), (8, 30, 300))):
        add(f"index_add f64 {list(x)} dim={dim} source {list(src)} (threaded)", "f64",
            {"x": fl(x, "f64"), "i": idx.astype(np.int64), "s": fl(src, "f64")}, ["x", "s"], f"index_add(x, {dim}, i, s, alpha=0.5)",
            lambda t, dim=dim: torch.index_add(t["x"], dim, t["i"], t["s"], alpha=0.5))
    for x, dim, ishape in (((300, 200), 0, (400, 200)), ((400, 50), 1, (400, 200))):
        add(f"scatter_reduce sum f64 {list(x)} dim={dim} index {list(ishape)} (threaded)", "f64",
            {"x": fl(x, "f64"), "i": rng.integers(0, x[dim], ishape).astype(np.int64), "s": fl(ishape, "f64")}, ["x", "s"],
            f'scatter_reduce(x, {dim}, i, s, "sum")', lambda t, dim=dim: torch.scatter_reduce(t["x"], dim, t["i"], t["s"], "sum"))


def make_ctc_cases():
    """ctc_loss through log_softmax (torch's gradient w.r.t. log_probs is not
    the derivative, ctc.c says why; the logits' gradient is): padded and
    concatenated targets, repeated labels (the skip rule), a blank other than
    0, unequal input lengths, every reduction, zero_infinity with an impossible
    sample, unbatched, a non-contiguous input"""
    T, N, C = 11, 3, 6
    for dt in ("f32", "f64"):
        il = np.array([11, 8, 10], dtype=np.int64)
        tl = np.array([4, 2, 3], dtype=np.int64)
        tg = rng.integers(1, C, (N, 4)).astype(np.int64)
        tg[0, 1] = tg[0, 2]   # a repeat: the path must pass a blank between them
        for red in ("none", "mean", "sum"):
            add(f"ctc_loss {dt} padded targets reduction={red}", dt, {"x": fl((T, N, C), dt, 2), "t": tg, "il": il, "tl": tl}, ["x"],
                f'ctc_loss(log_softmax(x, 2), t, il, tl, reduction="{red}")',
                lambda t, red=red: F.ctc_loss(F.log_softmax(t["x"], 2), t["t"], t["il"], t["tl"], reduction=red),
                perm=("x", [1, 0, 2]) if red == "sum" else None)
        cat = rng.integers(0, C - 1, 9).astype(np.int64)
        add(f"ctc_loss {dt} concatenated targets blank={C - 1}", dt,
            {"x": fl((T, N, C), dt, 2), "t": cat, "il": np.array([9, 11, 10], dtype=np.int64), "tl": np.array([3, 5, 1], dtype=np.int64)}, ["x"],
            f'ctc_loss(log_softmax(x, 2), t, il, tl, blank={C - 1}, reduction="sum")',
            lambda t: F.ctc_loss(F.log_softmax(t["x"], 2), t["t"], t["il"], t["tl"], blank=C - 1, reduction="sum"))
        # sample 1 cannot align (3 steps for 3 labels with a repeat needs 4): inf, zeroed
        zi = {"x": fl((T, N, C), dt, 2), "t": np.array([[1, 2, 3], [2, 2, 4], [5, 0, 0]], dtype=np.int64),
              "il": np.array([11, 3, 7], dtype=np.int64), "tl": np.array([3, 3, 1], dtype=np.int64)}
        zi["t"][2, 1:] = 1
        add(f"ctc_loss {dt} zero_infinity", dt, zi, ["x"], 'ctc_loss(log_softmax(x, 2), t, il, tl, reduction="none", zero_infinity=true)',
            lambda t: F.ctc_loss(F.log_softmax(t["x"], 2), t["t"], t["il"], t["tl"], reduction="none", zero_infinity=True))
        add(f"ctc_loss {dt} zero_infinity mean", dt, zi, ["x"], 'ctc_loss(log_softmax(x, 2), t, il, tl, zero_infinity=true)',
            lambda t: F.ctc_loss(F.log_softmax(t["x"], 2), t["t"], t["il"], t["tl"], zero_infinity=True))
        add(f"ctc_loss {dt} unbatched, an empty target", dt,
            {"x": fl((7, C), dt, 2), "t": np.zeros(0, dtype=np.int64), "il": np.array(7, dtype=np.int64), "tl": np.array(0, dtype=np.int64)},
            ["x"], 'ctc_loss(log_softmax(x, 1), t, il, tl)', lambda t: F.ctc_loss(F.log_softmax(t["x"], 1), t["t"], t["il"], t["tl"]))


def nabla_code(dev):
    lines = ["import nn", f'd = load_npz("{TMP}/in.npz")', "res = {}", f'dev = "{dev}"',
             "fn with_weight(m, w) { m.weight = w; m }"]
    for c in cases:
        i = c["id"]
        names = list(c["inputs"])
        loads = []
        for k in names:
            src = f"d.{i}_{k}.to(dev)"
            if c["perm"] and c["perm"][0] == k:
                src = f"permute({src}, {list(np.argsort(c['perm'][1]))})"
            loads.append(f"{k} = {src}")
        gargs = c["grads"]
        others = [k for k in names if k not in gargs]
        lines.append(f'''
fn case_{i}() {{
  {"; ".join(loads)}
  out = {{}}
  f = fn({", ".join(gargs)}) {{ y = {c["expr"]}; out.y = y; sum(y * d.{i}_gy.to(dev)) }}
  g = {"grad(f, argnums=" + str(list(range(len(gargs)))) + ")(" + ", ".join(gargs) + ")" if gargs else "f()"}
  r = {{y: out.y}}
  {"; ".join(f"r.g_{k} = g[{j}]" for j, k in enumerate(gargs))}
  res["{i}"] = r
}}
case_{i}()''')
        del others
    lines.append(f'save("{TMP}/out_{dev}.safetensors", res)')
    return "\n".join(lines)


def torch_ref(c):
    ts = {}
    for k, v in c["inputs"].items():
        if v.dtype.kind == "f":
            ts[k] = torch.tensor(v.astype(np.float64), requires_grad=k in c["grads"])
        else:
            ts[k] = torch.tensor(v)
    y = c["torch"](ts)
    gy = torch.tensor(arrays[f"{c['id']}_gy"].astype(np.float64))
    if c["grads"]:
        (y * gy).sum().backward()
    npdt = np.float32 if c["dt"] == "f32" else np.float64
    ref = {"y": y.detach().numpy().astype(npdt)}
    for k in c["grads"]:
        ref[f"g_{k}"] = ts[k].grad.numpy().astype(npdt)
    return ref


def check_values(dev, env_extra):
    r = run_nabla(nabla_code(dev), env_extra)
    if r.returncode != 0:
        report(f"layers29 values on {dev}", False, f"nabla failed: {r.stderr.strip()[-1500:]}")
        return
    got = read_safetensors(f"{TMP}/out_{dev}.safetensors")
    for c in cases:
        ref = torch_ref(c)
        tol = c["tol"] or (1e-12 if c["dt"] == "f64" else 1e-5)
        bad = []
        for k, want in ref.items():
            g = got.get(f"{c['id']}.{k}")
            if g is None:
                bad.append(f"{k} missing")
                continue
            if g.shape != want.shape or g.dtype != want.dtype:
                bad.append(f"{k}: {g.dtype}{list(g.shape)} vs torch {want.dtype}{list(want.shape)}")
                continue
            scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
            err = float(np.max(np.abs(g.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
            if not err <= tol * scale:
                bad.append(f"{k}: max |diff| {err:.3g} (scale {scale:.3g})")
        report(f"{c['name']} on {dev}", not bad, "; ".join(bad))


def check_bf16(dev, env_extra):
    """bf16 inputs compute in f32 and come back in bf16 (values and gradients),
    against torch in f32 on the same bf16-rounded input (torch 1.13 has no
    CPU bf16 mish), to bf16's precision"""
    x = (rng.standard_normal((3, 17)) * 3).astype(np.float32)
    # bf16 rounds many values onto hardswish's kinks at +-3, where torch 1.13's
    # gradient depends on the element's position (its vector loop takes
    # x >= 3 as slope 1, its scalar tail x <= 3 as slope 1.5): moved off them
    xb = torch.tensor(x).to(torch.bfloat16).float().numpy()
    x[np.abs(np.abs(xb) - 3) < 1e-6] += 0.1
    gy = rng.standard_normal((3, 17)).astype(np.float32)
    np.savez(os.path.join(TMP, "bf.npz"), x=x, gy=gy)
    acts = [("leaky_relu(x, 0.2)", lambda t: F.leaky_relu(t, 0.2)), ("elu(x)", F.elu), ("softplus(x)", F.softplus),
            ("mish(x)", F.mish), ("hardswish(x)", F.hardswish), ("logsigmoid(x)", F.logsigmoid)]
    code = [f'd = load_npz("{TMP}/bf.npz")', "res = {}", f'dev = "{dev}"']
    for j, (e, _) in enumerate(acts):
        code.append(f'''x = d.x.to("bf16").to(dev)
g = grad(fn(x) {{ y = {e}; if y.dtype != "bf16" {{ error("dtype " + y.dtype) }}; sum(y.to("f32") * d.gy.to(dev)) }})(x)
res["a{j}"] = {{y: {e}.to("f32"), g: g.to("f32")}}''')
    code.append(f'save("{TMP}/bf_{dev}.safetensors", res)')
    r = run_nabla("\n".join(code), env_extra)
    if r.returncode != 0:
        report(f"bf16 activations on {dev}", False, r.stderr.strip()[-800:])
        return
    got = read_safetensors(os.path.join(TMP, f"bf_{dev}.safetensors"))
    for j, (e, f) in enumerate(acts):
        xt = torch.tensor(x).to(torch.bfloat16).float().requires_grad_(True)
        y = f(xt)
        (y.float() * torch.tensor(gy)).sum().backward()
        ok = np.allclose(got[f"a{j}.y"], y.detach().float().numpy(), rtol=2e-2, atol=2e-2) and \
            np.allclose(got[f"a{j}.g"], xt.grad.float().numpy(), rtol=2e-2, atol=2e-2)
        gd = np.abs(got[f"a{j}.g"] - xt.grad.float().numpy())
        w = np.unravel_index(np.argmax(gd), gd.shape)
        report(f"{e} bf16 on {dev} (computed in f32, returned in bf16)", ok,
               f"y diff {np.max(np.abs(got[f'a{j}.y'] - y.detach().float().numpy())):.3g}, "
               f"g diff {gd[w]:.3g} at x = {float(xt[w]):.8g} (got {got[f'a{j}.g'][w]:.6g}, torch {float(xt.grad[w]):.6g})")


ERRORS = [
    ("scatter_add(zeros(5, 4), 0, expand(reshape(tensor([1, 7]), [2, 1]), [2, 4]), ones(2, 4))",
     "scatter_add: index 7 is out of bounds for axis 0 with size 5"),
    ("scatter_add(zeros(5, 4), 1, expand(reshape(tensor([0, -5]), [1, 2]), [5, 2]), ones(5, 2))",
     "scatter_add: index -5 is out of bounds for axis 1 with size 4"),
    ("pad(ones(2, 3), [1])", "pad: pad must have an even number of entries"),
    ("pad(ones(2, 3), [1, 1, 1, 1, 1, 1])", "pad: pad of 6 entries pads 3 axes, but input [2, 3] has 2"),
    ("pad(ones(2, 3), [3, 0], mode=\"reflect\")", "pad: reflect padding (3, 0) must be less than the size 3 of axis 1"),
    ("pad(ones(2, 3), [4, 0], mode=\"circular\")", "circular padding (4, 0) must not be greater than the size 3"),
    ("pad(ones(2, 3), [1, 1], mode=\"wrap\")", "pad: mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"wrap\""),
    ("pad(ones(2, 3), [1, 1], mode=\"reflect\", value=2)", "value applies only to mode \"constant\""),
    ("pad(ones(2, 3), [-2, -2])", "leaves a negative size"),
    ("interpolate(ones(1, 2, 3, 4), size=3, scale_factor=2)", "interpolate: give exactly one of size and scale_factor"),
    ("interpolate(ones(1, 2, 3), size=3, mode=\"bilinear\")", "interpolate: mode \"bilinear\" expects a 4-D [N, C, H, W] input"),
    ("interpolate(ones(1, 2, 3), size=3, align_corners=true)", "align_corners applies only to the linear modes"),
    ("interpolate(ones(1, 2, 3), size=0)", "interpolate: output size must be in [1, 2^26], got 0"),
    ("interpolate(ones(1, 2, 3), scale_factor=-1)", "interpolate: scale_factor must be positive"),
    ("interpolate(ones(1, 2, 3), size=3, mode=\"cubic\")", "interpolate: mode must be \"nearest\", \"linear\" or \"bilinear\""),
    ("adaptive_avg_pool2d(ones(3, 4), 2)", "adaptive_avg_pool2d: expected a 3D or 4D input, got [3, 4]"),
    ("adaptive_avg_pool1d(ones(2, 3, 4), 0)", "adaptive_avg_pool1d: output_size must be positive"),
    ("unfold(ones(2, 3, 4), 2)", "unfold: expected a 4-D input [N, C, H, W], got [2, 3, 4]"),
    ("unfold(ones(1, 1, 3, 3), 5)", "unfold: the kernel (5 x 5, dilation 1 x 1) does not fit input [1, 1, 3, 3]"),
    ("unfold(ones(1, 1, 3, 3), 2, stride=0)", "unfold: stride must be positive, got 0"),
    ("unfold(ones(1, 1, 3, 3), [1, 2, 3])", "unfold: 'kernel_size' has 3 entries (at most 2)"),
    ("fold(ones(1, 8, 5), [4, 4], 2)", "fold: input.shape[2] (5) must be the number of blocks (3 x 3)"),
    ("fold(ones(1, 7, 9), [4, 4], 2)", "fold: input.shape[1] (7) must be divisible by the kernel's 4 positions"),
    ("index_add(zeros(4, 3), 0, [0, 1], ones(3, 3))", "index_add: source [3, 3] must have input's shape [4, 3] except along dim 0"),
    ("index_add(zeros(4, 3), 0, [0, 7, 1], ones(3, 3))", "out of bounds"),
    ("index_add(zeros(4, 3), 2, [0], ones(1, 3))", "index_add: dim 2 is out of range for a 2-D input"),
    ("index_add(zeros(4, 3), 0, [0.5, 1, 2], ones(3, 3))", "index_add: indices must be an integer tensor"),
    ("adaptive_max_pool2d(ones(3, 4), 2)", "adaptive_max_pool2d: expected a 3D or 4D input, got [3, 4]"),
    ("adaptive_max_pool2d(ones(1, 3, 4), [0, 2])", "adaptive_max_pool2d: output_size must be positive"),
    ("adaptive_max_pool2d(ones(1, 3, 4), 2, return_indices=1)", "return_indices must be a bool"),
    ("scatter_reduce(zeros(4), 0, [0, 1], ones(2), \"max\")", "scatter_reduce: reduce must be \"sum\", \"prod\", \"mean\", \"amax\" or \"amin\", got \"max\""),
    ("scatter_reduce(zeros(4), 0, [0, 9], ones(2), \"amax\")", "scatter_reduce: index 9 is out of bounds for dim 0 with size 4"),
    ("scatter_reduce(zeros(4, dtype=\"i64\"), 0, [0, 1], ones(2, dtype=\"i64\"), \"prod\")", "scatter_reduce: reduce=\"prod\" needs a floating input, got i64"),
    ("scatter_reduce(zeros(2, 3), 0, zeros(2, 4, dtype=\"i64\"), ones(2, 4), \"amin\")", "does not fit input of shape [2, 3]"),
    ("ctc_loss(zeros(5, 2, 4), [[1, 2], [1, 1]], [5, 6], [2, 2])", "ctc_loss: input_lengths[1] = 6 must be in [1, 5]"),
    ("ctc_loss(zeros(5, 2, 4), [[1, 2], [1, 0]], [5, 5], [2, 2])", "ctc_loss: target 1 of sample 1 is 0; a label must be in [0, 4) and not the blank (0)"),
    ("ctc_loss(zeros(5, 2, 4), [1, 2, 3], [5, 5], [2, 2])", "ctc_loss: the target_lengths sum to 4 but the concatenated targets have 3 entries"),
    ("ctc_loss(zeros(5, 2, 4), [[1, 2]], [5, 5], [2, 2])", "ctc_loss: targets must be [N, S] (padded) or 1-D (concatenated), got [1, 2]"),
    ("ctc_loss(zeros(5, 2, 4), [[1, 2], [1, 3]], [5, 5], [2, 2], blank=4)", "ctc_loss: blank 4 is out of range for 4 classes"),
    ("ctc_loss(zeros(5, 2, 4), [[1, 2], [1, 3]], [5, 5, 5], [2, 2])", "ctc_loss: input_lengths and target_lengths must have one entry per sample (2)"),
    ("ctc_loss(zeros(5, 4, dtype=\"i64\"), [1], 5, 1)", "ctc_loss: log_probs must be a floating tensor"),
    ("ctc_loss(zeros(5, 2, 4), [[1, 2], [1, 3]], [5, 5], [2, 2], zero_infinity=1)", "ctc_loss: zero_infinity must be a bool"),
    ("scatter_reduce(zeros(4), 0, [0, 1], ones(3), \"sum\")", "scatter_reduce: src [3] must have index's shape [2]"),
    ("scatter_reduce(zeros(4), 0, [0, 9], ones(2), \"mean\")", "out of bounds"),
    ("embedding_bag([1, 2], ones(5, 2), [1], mode=\"sum\")", "embedding_bag: offsets must start at 0"),
    ("embedding_bag([1, 2, 3], ones(5, 2), [0, 2, 1])", "non-decreasing"),
    ("embedding_bag([1, 2], ones(5, 2))", "embedding_bag: input must be 2-D [B, bag] without offsets or 1-D with offsets, got [2] without offsets"),
    ("embedding_bag([[1, 7]], ones(5, 2))", "out of bounds"),
    ("embedding_bag([[1, 2]], ones(5, 2), mode=\"mean\", per_sample_weights=ones(1, 2))", "per_sample_weights need mode \"sum\""),
    ("embedding_bag([[1, 2]], ones(5, 2), mode=\"min\")", "embedding_bag: mode must be \"sum\", \"mean\" or \"max\", got \"min\""),
    ("embedding_bag([[1, 2]], ones(5, 2), mode=\"max\", per_sample_weights=ones(1, 2))", "per_sample_weights need mode \"sum\" (as torch's), got \"max\""),
    ("leaky_relu(ones(3, dtype=\"i64\"))", "leaky_relu: input must be a floating tensor, got i64"),
    ("leaky_relu(ones(3), negative_slope=\"a\")", "negative_slope"),
    ("elu(ones(3), alpha=nan)", "elu: alpha must be a finite number"),
    ("celu(ones(3), alpha=0)", "celu: alpha must not be 0"),
    ("softplus(ones(3), beta=0)", "softplus: beta must not be 0"),
    ("hardtanh(ones(3), min_val=2, max_val=1)", "hardtanh: min_val (2) must not be greater than max_val (1)"),
    ("prelu(ones(2, 3), ones(2))", "prelu: weight must have 1 element or one per channel (input.shape[1] = 3), got 2"),
    ("prelu(ones(2, 3), ones(3, 1))", "prelu: weight must be 0-D or 1-D"),
    ("binary_cross_entropy(full([3], 0.5), ones(4))", "binary_cross_entropy: target size [4] must be the same as input size [3]"),
    ("binary_cross_entropy(full([3], 0.5), ones(3), reduction=\"avg\")", "reduction must be \"none\", \"mean\" or \"sum\", got \"avg\""),
    ("binary_cross_entropy_with_logits(ones(3), ones(2, 3))", "binary_cross_entropy_with_logits: target size [2, 3] must be the same as input size [3]"),
    ("binary_cross_entropy_with_logits(ones(3), ones(3, dtype=\"i64\"))", "target must be a floating tensor"),
    ("nll_loss(ones(4, 3), zeros(5, dtype=\"i64\"))", "nll_loss: target [5] does not fit input [4, 3]"),
    ("nll_loss(ones(4, 3), zeros(4))", "nll_loss: indices must be an integer tensor"),
    ("nll_loss(ones(4, 3), zeros(4, dtype=\"i64\"), weight=ones(4))", "nll_loss: weight must be 1-D with one entry per class (3)"),
    ("nll_loss(ones(4, 3), full([4], 3, dtype=\"i64\"))", "out of bounds"),
    ("nll_loss(ones(4, 3), zeros(4, dtype=\"i64\"), reduction=1)", "nll_loss: reduction must be"),
    ("kl_div(ones(3), ones(3), log_target=1)", "kl_div: log_target must be a bool"),
    ("kl_div(ones(3), ones(3), reduction=\"batch\")", "\"batchmean\""),
    ("smooth_l1_loss(ones(3), ones(3), beta=-1)", "smooth_l1_loss: beta must be >= 0, got -1"),
    ("huber_loss(ones(3), ones(3), delta=0)", "huber_loss: delta must be > 0, got 0"),
    ("cosine_embedding_loss(ones(3, 2), ones(3, 4), ones(3))", "cosine_embedding_loss: input1 and input2 must have the same shape"),
    ("cosine_embedding_loss(ones(3, 2), ones(3, 2), ones(4))", "cosine_embedding_loss: target must have shape [N]"),
    ("margin_ranking_loss(ones(3), ones(3, dtype=\"i64\"), ones(3))", "margin_ranking_loss: input2 must be a floating tensor"),
    ("import nn\nnn.prelu(0)", "prelu: num_parameters must be a positive integer"),
]


def main():
    try:
        make_cases()
        for c in cases:   # the incoming gradient: the shape of the output, from torch
            ts = {k: torch.tensor(v) for k, v in c["inputs"].items()}
            shape = tuple(c["torch"](ts).shape)
            arrays[f"{c['id']}_gy"] = rng.standard_normal(shape).astype(np.float32 if c["dt"] == "f32" else np.float64)
        np.savez(os.path.join(TMP, "in.npz"), **arrays)
        check_values("cpu", {})
        emu = os.path.join(os.path.dirname(NABLA), "cuda", "emu", "nabla_cuda_emu.so")
        emu_env = {"NABLA_CUDA_EMULATE": "force", "NABLA_EMU_SMS": "2"}
        if os.path.exists(emu):
            check_values("cuda", emu_env)
        else:
            print(f"SKIP: layers29 on the emulated CUDA device{SUFFIX}: {emu} is not built")
        check_bf16("cpu", {})
        if os.path.exists(emu):
            check_bf16("cuda", emu_env)
        torchcmp.check_errors(ERRORS, "layers29")
    finally:
        shutil.rmtree(TMP, True)
    sys.exit(1 if torchcmp.fails else 0)


main()
