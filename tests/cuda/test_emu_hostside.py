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
import os
import random
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import TMPDIR, no_module, out  # noqa: E402
import emuutil  # noqa: E402

RNG = np.random.default_rng()


def check(ok, name, why):
    out("PASS" if ok else "FAIL", name, "" if ok else why)


def nabla(code, timeout=300):
    return emuutil.nabla(code, timeout)


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


def gc_case(tag, pre, f, paths, device):
    """nabla source of one gradcheck case as a function gc_TAG() run in the suite's one process:
    prints 'GC_TAG OK true' or 'GC_TAG ERR name message' and its first input's device"""
    ins = ", ".join(f'load_npy("{p}")' + ('.cuda()' if device == "cuda" else "") for p in paths)
    return (f"fn gc_{tag}() {{\n" + pre + f"xs = [{ins}]\n"
            f'try {{ print("GC_{tag} OK", gradcheck({f}, xs)) }} catch e {{ print("GC_{tag} ERR", e.name, replace(e.message, "\\n", " ")) }}\n'
            f'print("GCDEV_{tag}", xs[0].device)\n}}\ngc_{tag}()\n')


def gc_result(so, tag, device):
    """the verdict line of gc_case's TAG, or None and why"""
    got, dev = [l[len(tag) + 4:] for l in so.splitlines() if l.startswith(f"GC_{tag} ")], \
        [l[len(tag) + 7:] for l in so.splitlines() if l.startswith(f"GCDEV_{tag} ")]
    if len(got) != 1 or dev != [device] or not GC_LINE.match(got[0]):
        return None, f"{tag}: verdict {got}, device {dev} (want {device})"
    return got[0], ""


def test_gradcheck():
    """every case on both devices, and the checks after them, in one process (a process start
    with the emulated module is most of a small check's time under ASan)"""
    import torch
    torch_classes(torch)
    src, cases = [], []
    for name, pre, f, tf, shapes, expected in GC_CASES:
        arrs = [RNG.standard_normal(s) for s in shapes]
        paths = [npy(a, f"gc_{name}_{i}") for i, a in enumerate(arrs)]
        src += [gc_case(f"{name}_cuda", pre, f, paths, "cuda"), gc_case(f"{name}_cpu", pre, f, paths, "cpu")]
        cases.append((name, tf, arrs, expected))
    # an integer input on the device (cross_entropy's targets) rides along unperturbed
    x, y = RNG.standard_normal((4, 3)), RNG.integers(0, 3, 4)
    px, py = npy(x, "ce_x"), npy(y.astype(np.int64), "ce_y")
    src.append(gc_case("ce_cuda", "", "fn(x, y) cross_entropy(x, y)", [px, py], "cuda"))
    # f and the backward run on the device: every call of f sees device inputs
    # (the perturbed ones too), the custom backward gets a device gradient
    n = int(RNG.integers(2, 6))
    src.append('fn on_device() {\n  seen = list(); bw = list()\n'
               '  sq = custom_vjp(fn(x) { push(seen, x.device); [x * x, x] }, fn(x, g) { push(bw, g.device); g * 2 * x })\n'
               f'  print("ONDEV", gradcheck(fn(x) sq(x), [randn({n}).cuda()]))\n'
               '  print("ONDEV", len(seen), join(map(seen, str), ","))\n  print("ONDEV", len(bw), join(map(bw, str), ","))\n}\non_device()\n')
    # f mixing the device input with a host tensor: a clear error, the interpreter goes on
    src.append('w = randn(3)\nxs = [randn(3).cuda()]\n'
               'try { gradcheck(fn(x) sum(x * w), xs) } catch e { print("MIXED", e.name, e.message) }\nprint("alive")')
    rc, so, se = nabla("".join(src))
    if rc != 0 or not so.strip().endswith("alive"):
        check(False, "emu.gradcheck_device.runs", f"rc {rc}: {so[-600:]} {se[-1200:]}")
    for name, tf, arrs, expected in cases:
        tname = f"emu.gradcheck_device.{name}"
        dev, why_d = gc_result(so, f"{name}_cuda", "cuda")
        host, why_h = gc_result(so, f"{name}_cpu", "cpu")
        tin = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrs]
        tv = torch.autograd.gradcheck(lambda *xs: tf(torch, *xs), tin, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False)
        if dev is None or host is None:
            check(False, tname, f"device: {why_d} host: {why_h} (rc {rc}: {se[-600:]})")
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
    dev, why = gc_result(so, "ce_cuda", "cuda")
    tx = torch.tensor(x, requires_grad=True)
    tv = torch.autograd.gradcheck(lambda a: torch.nn.functional.cross_entropy(a, torch.tensor(y)), [tx], raise_exception=False)
    check(dev == "OK true" and tv, "emu.gradcheck_device.cross_entropy_int_targets", f"torch {tv}, device {dev!r} {why}")
    want = ["true", f"{2 * n + 2} " + ",".join(["cuda"] * (2 * n + 2)), "1 cuda"]
    got = [l[6:] for l in so.splitlines() if l.startswith("ONDEV ")]
    check(got == want, "emu.gradcheck_device.runs_on_the_device", f"rc {rc}: got {got} want {want} {se[-300:]}")
    mixed = [l for l in so.splitlines() if l.startswith("MIXED ")]
    ok = so.strip().endswith("alive") and len(mixed) == 1 and "same device, got cuda and cpu" in mixed[0]
    check(ok, "emu.gradcheck_device.mixed_devices_is_an_error", f"rc {rc}: {mixed} {so[-300:]} {se[-400:]}")


# ---- builtins that copy a device tensor to the host ---------------------------------------
def run_together(*tests):
    """runs the nabla code each test (a generator) yields in ONE process, each in a function of its
    own (its names stay its own), and sends each its part of the output, with the process's exit
    status and stderr (a process start with the emulated module is most of a small check's time
    under ASan); a test that changes global state (the default device) goes last"""
    codes = [next(t) for t in tests]
    src = "".join(f"fn part{i}() {{\n{c}\n}}\npart{i}()\nprint(\"=== end of part\")\n" for i, c in enumerate(codes))
    rc, so, se = nabla(src)
    parts = so.split("=== end of part\n")
    for i, t in enumerate(tests):
        try:
            t.send((rc, parts[i] if i < len(parts) else "", se))
        except StopIteration:
            pass


def test_save_npy():
    """save_npy writes a device tensor's values (NumPy reads them back: it
    wrote from a NULL host pointer, 'Bad address')"""
    path, host = os.path.join(TMPDIR, "dev.npy"), os.path.join(TMPDIR, "host.npy")
    vals = RNG.standard_normal((3, 5))
    rc, so, se = yield f'x = load_npy("{npy(vals, "sn")}").to("cuda")\nsave_npy("{path}", x)\nsave_npy("{host}", x.cpu())\nprint(x.device)'
    try:
        got, want = np.load(path), np.load(host)
        ok = rc == 0 and got.dtype == np.float64 and np.array_equal(got, want) and np.array_equal(got, vals) and "cuda" in so
    except Exception as e:  # noqa
        ok, got = False, e
    check(ok, "emu.save_npy_device_tensor", f"rc {rc}: {so} {se[-400:]} got {got!r}")


def test_host_copies():
    """save (safetensors) / serialize / write_bytes / decode / tolist / item /
    plot of device tensors give the host's values (NumPy reads the files)"""
    import json
    import struct
    a = RNG.standard_normal((3, 5))
    b = RNG.integers(-1000, 1000, (4,))
    u = RNG.integers(32, 127, (9,)).astype(np.uint8)
    pa, pb, pu = npy(a, "hc_a"), npy(b.astype(np.int64), "hc_b"), npy(u, "hc_u")
    st, raw = os.path.join(TMPDIR, "d.safetensors"), os.path.join(TMPDIR, "u.bin")
    code = (f'a = load_npy("{pa}").cuda()\nb = load_npy("{pb}").cuda()\nu = load_npy("{pu}").cuda()\n'
            f'save("{st}", {{w: a, inner: {{ids: b, t: a.T}}}})\n'
            'l = load("' + st + '")\n'
            'print("LOAD", l.w.device, (l.w - a.cpu()).abs().max().item(), (l.inner.ids - b.cpu()).abs().max().item(), (l.inner.t - a.T.cpu()).abs().max().item())\n'
            's = deserialize(serialize({x: a, y: [b]}))\n'
            'print("SER", s.x.device, s.y[0].device, (s.x - a).abs().max().item(), (s.y[0] - b).abs().max().item())\n'
            f'write_bytes("{raw}", u)\nprint("DEC", decode(u))\n'
            'print("LIST", a.tolist())\nprint("ITEM", a[2, 4].item(), b[3].item())\n'
            'plot(a[1])\nprint("--")\nplot(a[1].cpu())\nprint("alive")')
    rc, so, se = yield code
    lines = so.splitlines()
    get = lambda tag: next((l[len(tag) + 1:] for l in lines if l.startswith(tag + " ")), None)  # noqa: E731
    try:
        with open(st, "rb") as f:
            hl = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(hl))
            data = f.read()
        def arr(name, dt):  # noqa: E306
            lo, hi = hdr[name]["data_offsets"]
            return np.frombuffer(data[lo:hi], dtype=dt).reshape(hdr[name]["shape"])
        file_ok = (np.array_equal(arr("w", np.float64), a) and np.array_equal(arr("inner.ids", np.int64), b)
                   and np.array_equal(arr("inner.t", np.float64), a.T))
    except Exception as e:  # noqa
        file_ok, hdr = False, e
    zeros = lambda t, dev, k: bool(t) and len(t.split()) == len(dev) + k and t.split()[:len(dev)] == dev and all(float(v) == 0 for v in t.split()[len(dev):])  # noqa: E731
    check(rc == 0 and file_ok and zeros(get("LOAD"), ["cpu"], 3), "emu.host_copy.save_load_safetensors",
          f"rc {rc}: file matches NumPy: {file_ok} ({hdr!r:.300}); LOAD {get('LOAD')!r} {se[-300:]}")
    check(zeros(get("SER"), ["cuda", "cuda"], 2), "emu.host_copy.serialize_roundtrip", f"rc {rc}: SER {get('SER')!r} {se[-300:]}")
    try:
        with open(raw, "rb") as f:
            got = f.read()
    except OSError as e:
        got = e
    check(got == u.tobytes() and get("DEC") == u.tobytes().decode(), "emu.host_copy.write_bytes_decode",
          f"file {got!r}, decode {get('DEC')!r}, want {u.tobytes()!r}")
    try:
        lst = np.array(json.loads(get("LIST")))
        items = [float(v) for v in get("ITEM").split()]
        ok = np.array_equal(lst, a) and items == [a[2, 4], float(b[3])]
    except Exception as e:  # noqa
        ok, lst = False, e
    check(ok, "emu.host_copy.tolist_item", f"rc {rc}: {lst!r:.300} ITEM {get('ITEM')!r}")
    try:
        i0, i1 = lines.index("--"), lines.index("alive")
        dev_plot, host_plot = lines[lines.index(next(l for l in lines if l.startswith("ITEM"))) + 1:i0], lines[i0 + 1:i1]
        ok = dev_plot == host_plot and len(dev_plot) > 5
    except (ValueError, StopIteration) as e:
        ok, dev_plot, host_plot = False, e, None
    check(ok, "emu.host_copy.plot_device_tensor", f"rc {rc}: device plot {dev_plot!r:.300} host plot {host_plot!r:.300}")


def test_dist_device_values():
    """dist.push / scatter / gather / pull / isend+recv of device tensors
    (serialized through a host copy, or staged through pinned memory) give
    the values NumPy has, on the device on both sides"""
    a = RNG.standard_normal((4, 3))
    pa = npy(a, "dist_a")
    code = ("import dist\ndist.start(2)\n"
            f'x = load_npy("{pa}").cuda()\n'
            "dist.push({X: x})\n"
            'print("PUSH", dist.run(fn() list(X.device, X.cpu().tolist())))\n'
            'dist.scatter("S", x)\n'
            'print("SCAT", dist.run(fn() list(S.device, S.cpu().tolist())))\n'
            'g = dist.gather("S * 2")\nprint("GATH", g.device, g.cpu().tolist())\n'
            'p = dist.pull("X * 3", rank=1)\nprint("PULL", p.device, p.cpu().tolist())\n'
            'print("ISEND", dist.run(fn() {\n  import dist\n'
            '  if dist.rank() == 0 { h = dist.isend(X * 5, 1); h.wait(); nil } else { y = dist.recv(0); list(y.device, y.cpu().tolist()) }\n'
            '})[1])\ndist.stop()\nprint("alive")')
    rc, so, se = nabla(code, timeout=300)
    lines = so.splitlines()
    get = lambda tag: next((l[len(tag) + 1:] for l in lines if l.startswith(tag + " ")), None)  # noqa: E731
    import json

    def js(t):
        return json.loads(t.replace("nil", "null")) if t else None
    try:
        push, scat, isend = js(get("PUSH")), js(get("SCAT")), js(get("ISEND"))
        gdev, gval = get("GATH").split(" ", 1)
        pdev, pval = get("PULL").split(" ", 1)
        why = []
        if not all(r[0] == "cuda" and np.array_equal(np.array(r[1]), a) for r in push): why.append("push")
        if [r[0] for r in scat] != ["cuda", "cuda"] or not np.array_equal(np.concatenate([np.array(r[1]) for r in scat]), a): why.append("scatter")
        if gdev != "cuda" or not np.array_equal(np.array(json.loads(gval)), a * 2): why.append("gather")
        if pdev != "cuda" or not np.array_equal(np.array(json.loads(pval)), a * 3): why.append("pull")
        if isend[0] != "cuda" or not np.array_equal(np.array(isend[1]), a * 5): why.append("isend/recv")
    except Exception as e:  # noqa
        why = [repr(e)]
    check(rc == 0 and not why and lines[-1:] == ["alive"], "emu.dist_device_tensors_push_scatter_gather_pull_isend",
          f"rc {rc}: wrong {why}: {so[-600:]} {se[-600:]}")


def test_kernel_display():
    """display(x) in the Jupyter kernel: a device tensor's HTML table has the
    values (it showed only 'tensor [3, 4] f32 on cuda'), the same cells as the
    host copy's table and as NumPy's %.4g, and says the device"""
    a = RNG.standard_normal((3, 4))
    pa = npy(a, "disp_a")
    msgs = emuutil.kernel_cells([f'a = load_npy("{pa}").cuda()\ndisplay(a)', "display(a.cpu())"])
    html = [next((c["data"].get("text/html") for t, c in m if t == "display_data"), None) or "" for m in msgs]
    cells = [re.findall(r"<td>([^<]*)</td>", h) for h in html]
    want = ["%.4g" % v for v in a.reshape(-1)]
    ok = cells[0] == want and cells[1] == want and "on cuda" in html[0] and "on cuda" not in html[1]
    check(ok, "emu.kernel_display_device_tensor", f"device {html[0][:400]!r} host {html[1][:200]!r} want cells {want}")


def test_device_indexing():
    """a device tensor indexed by integer tensors on the CPU (a bracket literal
    x[[0, 2]] is one) works as in torch: the indices move to its device (it
    was 'expected all tensors on the same device'); reads and writes against
    NumPy.  An index the device finds out of range is reported when the
    values are read: printing shows the error in place of the values (it
    printed '<tensor>' and the error was lost)"""
    import json
    a = RNG.standard_normal((5, 4))
    r1, r2 = RNG.integers(0, 5, 3), RNG.integers(0, 4, 3)
    lit = lambda v: "[" + ", ".join(str(int(k)) for k in v) + "]"  # noqa: E731
    pa = npy(a, "idx_a")
    code = (f'x = load_npy("{pa}").cuda()\n'
            f'print("G1", x[{lit(r1)}].device, x[{lit(r1)}].cpu().tolist())\n'
            f'print("G2", x[{lit(r1)}, {lit(r2)}].cpu().tolist())\n'
            f'print("G3", x[1:, {lit(r2)}].cpu().tolist())\n'
            f'y = x.clone()\ny[{lit(r1)}, {lit(r2)}] = 7.5\ny[{lit(r1[:1])}] += 1.0\nprint("P", y.device, y.cpu().tolist())\n'
            f'bad = x[[0, {5 + int(r1[0])}]]\nprint("E", bad)\nprint("alive")')
    rc, so, se = yield code
    lines = so.splitlines()
    get = lambda tag: next((l[len(tag) + 1:] for l in lines if l.startswith(tag + " ")), None)  # noqa: E731
    want_p = a.copy()
    want_p[r1, r2] = 7.5
    want_p[r1[:1]] += 1.0
    try:
        d1, v1 = get("G1").split(" ", 1)
        pd, pv = get("P").split(" ", 1)
        why = []
        if d1 != "cuda" or not np.array_equal(np.array(json.loads(v1)), a[r1]): why.append("x[list]")
        if not np.array_equal(np.array(json.loads(get("G2"))), a[r1, r2]): why.append("x[list, list]")
        if not np.array_equal(np.array(json.loads(get("G3"))), a[1:, r2]): why.append("x[1:, list]")
        if pd != "cuda" or not np.allclose(np.array(json.loads(pv)), want_p, rtol=0, atol=1e-15): why.append("x[list, list] = v; x[list] += v")
    except Exception as e:  # noqa
        why = [repr(e)]
    check(rc == 0 and not why, "emu.index_device_tensor_with_cpu_indices", f"rc {rc}: wrong {why}: {so[-600:]} {se[-400:]}")
    e = get("E") or ""
    ok = rc == 0 and e.startswith("<tensor: ") and f"index {5 + int(r1[0])} is out of bounds for axis 0 with size 5" in e and lines[-1:] == ["alive"]
    check(ok, "emu.print_shows_a_device_error", f"rc {rc}: {e!r} {se[-300:]}")


def test_default_device_factories():
    """set_default_device("cuda") puts every creation function's tensor on the
    device, as torch.set_default_device does (arange, linspace and eye made
    CPU tensors: bench/cuda/gpt2.nbl's position embedding then failed on a
    GPU); values against NumPy; device= overrides it"""
    k = random.randint(3, 9)
    code = (f'set_default_device("cuda")\n'
            f'for t in list(arange({k}), arange(1, {k}, 2), linspace(0, 1, {k}), eye({k}, {k + 1}), zeros({k}), ones({k}), '
            f'full([{k}], 2), tensor([1, 2]), rand({k}), randn({k}), randint(0, {k}, [{k}]), randperm({k}), empty({k})) {{ print("D", t.device) }}\n'
            f'print("A", tolist(arange(1, {k}, 2)))\nprint("L", tolist(linspace(0, 1, {k})))\nprint("E", tolist(eye({k}, {k + 1})))\n'
            f'print("C", arange({k}, device="cpu").device, eye(2, device="cpu").device)\n')
    rc, so, se = yield code
    lines = so.splitlines()
    devs = [l.split()[1] for l in lines if l.startswith("D ")]
    got = {l[0]: l[2:] for l in lines if l[:2] in ("A ", "L ", "E ", "C ")}
    try:
        ok = (rc == 0 and devs == ["cuda"] * 13
              and eval(got["A"]) == list(range(1, k, 2))
              and np.allclose(eval(got["L"]), np.linspace(0, 1, k), atol=1e-7)
              and np.array_equal(np.array(eval(got["E"])), np.eye(k, k + 1)) and got["C"] == "cpu cpu")
    except (KeyError, SyntaxError, ValueError) as e:
        ok = False
    check(ok, "emu.default_device_every_factory", f"rc {rc}: devices {devs} {got}: {se[-400:]}")


def main():
    if no_module("emu_hostside"):
        return 0
    test_gradcheck()
    # (the device's index error is not sticky: the default-device checks after it run on)
    run_together(test_save_npy(), test_host_copies(), test_device_indexing(), test_default_device_factories())
    test_dist_device_values()
    test_kernel_display()
    return 1 if emuutil.n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
