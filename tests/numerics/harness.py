"""Shared machinery for the numerics suites (test_ops / test_grads / test_errors / test_io).

Idea: inputs are drawn fresh in Python (seeded; the seed is printed in every
failure so the run can be repeated with NUMERICS_SEED=<seed>), written to one
.npz, and ONE nabla process per batch loads them (load_npz), evaluates every
case inside try/catch, and saves all results with save() as safetensors.  The
harness then compares each result with a NumPy / PyTorch reference.

    b = Batch("ops")
    x = b.inp(rng.standard_normal((3, 4), dtype=np.float32))   # -> "I.a0"
    b.case("exp", f"exp({x})", torch.exp(T(x_np)))
    b.run()          # prints PASS:/FAIL: lines
    finish()         # exit status

A case's code is nabla source; multi-line code is allowed and its LAST line
is the value.  The expected value can be a numpy array / torch tensor
(values, shape and dtype are checked), a number, a bool, a string, a list of
those (nabla lists of tensors), or a callable got -> None | "why".

Run with /usr/bin/python3 (Debian's numpy + torch); NABLA = the interpreter.

Devices: NUMERICS_DEVICE=cuda runs every batch with its inputs moved to the GPU
and set_default_device("cuda"), so the same cases (and the same CPU/NumPy/torch
references) check the CUDA backend; results come back through save(), which
copies to the host.  tests/cuda/run_gpu.sh runs the suites this way.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - the suites need torch for references
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _find_nabla():
    n = os.environ.get("NABLA")
    if n:
        return n
    for c in ("build/nabla", "/tmp/num-build/nabla"):
        p = c if os.path.isabs(c) else os.path.join(ROOT, c)
        if os.access(p, os.X_OK):
            return p
    return "nabla"


NABLA = _find_nabla()
SEED = int(os.environ.get("NUMERICS_SEED") or random.SystemRandom().randrange(1, 2**31))
rng = np.random.default_rng(SEED)
if torch is not None:
    torch.manual_seed(SEED)

TMP = tempfile.mkdtemp(prefix="nabla_numerics_")
DEVICE = os.environ.get("NUMERICS_DEVICE", "cpu")
if DEVICE != "cpu":
    # one check up front: without the device every batch would fail case by case
    _p = subprocess.run([NABLA, "-e", 'print(cuda.available())'], capture_output=True, text=True)
    if _p.stdout.strip() != "true":
        print(f"SKIP: numerics on {DEVICE}: the device is not available ({(_p.stdout + _p.stderr).strip()[:200]})")
        sys.exit(0)

# ------------------------------------------------------------------ reporting
_results = {"pass": 0, "fail": 0}


def report_pass(name):
    _results["pass"] += 1
    print(f"PASS: {name}", flush=True)


def emulated_rerun(script, label, subset_env):
    """Runs the suite `script` again with its inputs on the emulated CUDA
    device (NUMERICS_DEVICE=cuda) and subset_env=1 (the suite's cross-section
    there); its result lines are printed as ours.  True when it passed, or
    when the emulated module is not built (a SKIP line says so)."""
    build = os.path.dirname(os.path.abspath(NABLA))
    module = os.path.join(build, "cuda", "emu", "nabla_cuda_emu.so")
    if not os.path.exists(module):
        print(f"SKIP: {label} on the emulated device: {module} is not built")
        return True
    env = dict(os.environ, NUMERICS_DEVICE="cuda", NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2", **{subset_env: "1"})
    p = subprocess.run([sys.executable, os.path.abspath(script)], env=env, capture_output=True, text=True, timeout=1500)
    sys.stdout.write(p.stdout)
    sys.stdout.flush()
    return p.returncode == 0 and "FAIL:" not in p.stdout


def report_fail(name, why):
    _results["fail"] += 1
    why = " ".join(str(why).split("\n"))
    if len(why) > 600:
        why = why[:600] + "..."
    print(f"FAIL: {name}: {why} [seed={SEED}]", flush=True)


def check(name, ok, why=""):
    if ok:
        report_pass(name)
    else:
        report_fail(name, why)


def finish():
    shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(1 if _results["fail"] else 0)


# ------------------------------------------------------------------ dtypes
NB_DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32,
             "i64": np.int64, "u8": np.uint8, "bool": np.bool_}
ST_TO_NB = {"F32": "f32", "F64": "f64", "F16": "f16", "BF16": "bf16", "I32": "i32",
            "I64": "i64", "U8": "u8", "BOOL": "bool"}
NB_TO_ST = {v: k for k, v in ST_TO_NB.items()}
NP_TO_NB = {np.dtype(v): k for k, v in NB_DTYPES.items()}


def dtype_name(x):
    """nabla dtype name of a numpy array / torch tensor."""
    if torch is not None and isinstance(x, torch.Tensor):
        return {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
                torch.bfloat16: "bf16", torch.int32: "i32", torch.int64: "i64",
                torch.uint8: "u8", torch.bool: "bool"}[x.dtype]
    return NP_TO_NB[np.asarray(x).dtype]


def to_np(x):
    """numpy array (bf16 → f32) of a torch tensor / array / scalar."""
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def T(a, requires_grad=False):
    """torch tensor from a numpy array (copied)."""
    t = torch.from_numpy(np.array(a, copy=True))
    if requires_grad:
        t.requires_grad_(True)
    return t


# ------------------------------------------------------------------ safetensors
def st_read(path):
    """Reads a safetensors file → (dict name → numpy array | torch bf16 tensor, metadata)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data = buf[8 + n:]
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        raw = data[a:b]
        dt, shape = info["dtype"], info["shape"]
        if dt == "BF16":
            u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            t = torch.from_numpy(u16.view(np.float32).reshape(shape).copy()).to(torch.bfloat16)
            out[name] = t
        else:
            npdt = NB_DTYPES[ST_TO_NB[dt]]
            out[name] = np.frombuffer(raw, dtype=np.dtype(npdt).newbyteorder("<")).reshape(shape).copy()
    return out, meta


def st_write(path, tensors, metadata=None):
    """Writes a dict name → numpy array | torch tensor as safetensors (spec: 8-byte LE
    header length, JSON header with dtype/shape/data_offsets, raw little-endian data)."""
    header, chunks, off = {}, [], 0
    for name, x in tensors.items():
        if torch is not None and isinstance(x, torch.Tensor):
            if x.dtype == torch.bfloat16:
                raw = (x.float().numpy().view(np.uint32) >> 16).astype("<u2").tobytes()
                dt = "BF16"
            else:
                a = x.detach().numpy()
                raw, dt = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes(), NB_TO_ST[dtype_name(a)]
            shape = list(x.shape)
        else:
            a = np.asarray(x)
            raw, dt, shape = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes(), NB_TO_ST[dtype_name(a)], list(a.shape)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    hb = json.dumps(header).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for c in chunks:
            f.write(c)


# ------------------------------------------------------------------ running nabla
def run_nabla(code, timeout=60):
    """Runs a nabla program; returns (returncode, stdout, stderr)."""
    path = os.path.join(TMP, f"prog_{random.randrange(1 << 30)}.nbl")
    with open(path, "w") as f:
        f.write(code)
    try:
        p = subprocess.run([NABLA, path], capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return -999, "", "timeout"


def nb_str(s):
    return json.dumps(s)   # nabla string literal (same escapes for plain paths)


def _unflatten(tensors, meta):
    """flat safetensors keys 'c3.0.1' → nested: top name → value | list."""
    vals = {}
    for k, v in tensors.items():
        vals[k] = v
    for k, v in meta.items():
        if not k.startswith("nabla:"):
            continue
        _, kind, name = k.split(":", 2)
        if kind == "alias":   # one tensor at several places: saved once (save's ties)
            vals[name] = tensors[v]
            continue
        vals[name] = {"num": lambda s: float(s), "str": str, "bool": lambda s: s == "true",
                      "nil": lambda s: None}[kind](v)
    tree = {}
    for k, v in vals.items():
        parts = k.split(".")
        cur = tree
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = v

    def listify(x):
        if isinstance(x, dict):
            x = {k: listify(v) for k, v in x.items()}
            if x and all(k.isdigit() for k in x) and sorted(int(k) for k in x) == list(range(len(x))):
                return [x[str(i)] for i in range(len(x))]
        return x
    return {k: listify(v) for k, v in tree.items()}


def _fmt_case(code):
    c = " ".join(code.split())
    return c if len(c) < 160 else c[:160] + "..."


def compare(got, exp, rtol, atol, dtype=True, path=""):
    """None if equal within tolerance, else a reason string."""
    if callable(exp) and not (torch is not None and isinstance(exp, torch.Tensor)):
        return exp(got)
    if isinstance(exp, (list, tuple)):
        if not isinstance(got, list):
            return f"{path}expected a list of {len(exp)}, got {type(got).__name__}"
        if len(got) != len(exp):
            return f"{path}expected {len(exp)} items, got {len(got)}"
        for i, (g, e) in enumerate(zip(got, exp)):
            d = dtype[i] if isinstance(dtype, (list, tuple)) else dtype
            r = compare(g, e, rtol, atol, d, f"{path}[{i}] ")
            if r:
                return r
        return None
    if isinstance(exp, str):
        return None if got == exp else f"{path}expected {exp!r}, got {got!r}"
    if isinstance(exp, bool):
        return None if got is exp else f"{path}expected {exp}, got {got!r}"
    if isinstance(exp, (int, float)) and not isinstance(exp, bool):
        if not isinstance(got, float):
            return f"{path}expected number {exp}, got {type(got).__name__} {got!r}"
        if not np.isclose(got, exp, rtol=rtol, atol=atol, equal_nan=True):
            return f"{path}expected {exp!r}, got {got!r} (abs err {abs(got - exp):.3g})"
        return None
    # tensor
    if got is None or isinstance(got, (list, dict, str, float, bool)):
        return f"{path}expected a tensor, got {type(got).__name__} {str(got)[:80]}"
    want_dt = dtype if isinstance(dtype, str) else (dtype_name(exp) if dtype else None)
    got_dt = dtype_name(got)
    e, g = to_np(exp), to_np(got)
    if tuple(g.shape) != tuple(e.shape):
        return f"{path}shape {list(g.shape)} != expected {list(e.shape)}"
    if want_dt and got_dt != want_dt:
        return f"{path}dtype {got_dt} != expected {want_dt}"
    if e.dtype == np.bool_ or g.dtype == np.bool_ or (np.issubdtype(e.dtype, np.integer) and np.issubdtype(g.dtype, np.integer)):
        bad = g.astype(np.int64) != e.astype(np.int64)
        if bad.any():
            i = np.argwhere(bad)[0]
            return f"{path}{int(bad.sum())}/{bad.size} elements differ; first at {tuple(int(v) for v in i)}: got {g[tuple(i)]} expected {e[tuple(i)]}"
        return None
    g64, e64 = g.astype(np.float64), e.astype(np.float64)
    close = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if not close.all():
        with np.errstate(invalid="ignore"):
            err = np.abs(g64 - e64)
        err = np.where(np.isnan(err), np.inf, err)
        i = np.unravel_index(int(np.argmax(np.where(close, -1, err))), err.shape) if err.ndim else ()
        return (f"{path}max abs err {float(np.max(np.where(close, 0, err))):.3g} (rtol={rtol}, atol={atol}), "
                f"{int((~close).sum())}/{close.size} bad; at {tuple(int(v) for v in i)}: got {g64[i]!r} expected {e64[i]!r}")
    return None


class Case:
    def __init__(self, name, code, exp, rtol, atol, dtype, error):
        self.name, self.code, self.exp, self.rtol, self.atol, self.dtype, self.error = name, code, exp, rtol, atol, dtype, error


class Batch:
    """A set of cases run by one nabla process."""

    def __init__(self, title):
        self.title = title if DEVICE == "cpu" else f"{DEVICE}.{title}"
        self.inputs = {}
        self.prelude = []
        self.cases = []

    def inp(self, a):
        """Registers an input array; returns the nabla expression naming it."""
        k = f"a{len(self.inputs)}"
        self.inputs[k] = np.asarray(a)
        return f"I.{k}"

    def raw(self, code):
        """Statements run before the cases (helper functions, ...)."""
        self.prelude.append(code)

    def case(self, name, code, exp, rtol=1e-5, atol=1e-6, dtype=True):
        """code's value must match exp (dtype=True: the expected dtype; a string: that dtype; False: any)."""
        self.cases.append(Case(name, code, exp, rtol, atol, dtype, None))

    def error(self, name, code, must_contain, kind=None):
        """code must raise a catchable error whose message contains every string of must_contain."""
        self.cases.append(Case(name, code, None, 0, 0, False, (list(must_contain), kind)))

    # -- script generation
    def _case_src(self, i, c):
        lines = [l for l in c.code.strip().split("\n")]
        body, last = lines[:-1], lines[-1]
        key = f"c{i}"
        if c.error:
            # a GPU finds a bad index while the kernel runs and reports it at the next
            # synchronisation (as CUDA's device-side asserts): wait inside the try, so the
            # error is this case's and not the next one's
            sync = "\ncuda.synchronize()" if DEVICE == "cuda" else ""
            return ("try {\n" + "\n".join(body + [last]) + sync + f"\nR.{key} = \"NOERROR\"\n}} catch e {{ R.{key} = e.name + \": \" + e.message }}\n")
        return ("try {\n" + "\n".join(body) + f"\nR.{key} = ({last})\n}} catch e {{ print(\"NBERR {key} \" + e.name + \": \" + e.message) }}\n")

    def _script(self, cases, npz, out):
        src = [f"I = load_npz({nb_str(npz)})", "R = {}"]
        if DEVICE != "cpu":
            # every input on the device, and creation functions default to it
            src += [f"set_default_device({nb_str(DEVICE)})",
                    f"for k in keys(I) {{ I[k] = I[k].to({nb_str(DEVICE)}) }}",
                    f'for k in keys(I) {{ if I[k].device != {nb_str(DEVICE)} {{ error("input " + k + " is on " + I[k].device) }} }}']
        src += self.prelude
        for i, c in cases:
            src.append(self._case_src(i, c))
        src.append(f"save({nb_str(out)}, R)")
        src.append('print("NBDONE")')
        return "\n".join(src) + "\n"

    def _exec(self, cases):
        d = tempfile.mkdtemp(dir=TMP)
        npz, out = os.path.join(d, "in.npz"), os.path.join(d, "out.safetensors")
        np.savez(npz, **self.inputs)
        rc, so, se = run_nabla(self._script(cases, npz, out), timeout=120)
        errs = {}
        for line in so.splitlines():
            if line.startswith("NBERR "):
                _, key, msg = line.split(" ", 2)
                errs[key] = msg
        res = None
        if rc == 0 and "NBDONE" in so and os.path.exists(out):
            t, m = st_read(out)
            res = _unflatten(t, m)
        return rc, so, se, errs, res

    def run(self):
        allc = list(enumerate(self.cases))
        rc, so, se, errs, res = self._exec(allc)
        if res is None:
            # the batch died (crash or uncaught error): run each case alone to find the culprit(s);
            # said in the log, since it multiplies the suite's time (a case that poisons the
            # device's earlier results made setops' ASan run 5x slower, unseen)
            last = (se.strip().splitlines() or [""])[-1][:300]
            print(f"# note: batch {self.title} died (status {rc}: {last}); its {len(allc)} cases run one process each",
                  flush=True)
            for i, c in allc:
                rc1, so1, se1, errs1, res1 = self._exec([(i, c)])
                self._judge(i, c, rc1, se1, errs1, res1)
            return
        for i, c in allc:
            self._judge(i, c, rc, se, errs, res)

    def _judge(self, i, c, rc, se, errs, res):
        name = f"{self.title}.{c.name}"
        key = f"c{i}"
        case = f"case: {_fmt_case(c.code)}"
        if res is None:
            sig = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
            report_fail(name, f"nabla {sig}: {se.strip()[-300:]}; {case}")
            return
        if c.error:
            got = res.get(key)
            subs, kind = c.error
            if got == "NOERROR" or got is None:
                report_fail(name, f"expected an error, got none; {case}")
            elif kind and not got.startswith(kind + ":"):
                report_fail(name, f"expected a {kind}, got {got!r}; {case}")
            elif not all(s in got for s in subs):
                report_fail(name, f"error message {got!r} lacks {[s for s in subs if s not in got]}; {case}")
            else:
                report_pass(name)
            return
        if key in errs:
            report_fail(name, f"nabla error: {errs[key]}; {case}")
            return
        if key not in res:
            report_fail(name, f"no result saved; {case}")
            return
        try:
            why = compare(res[key], c.exp, c.rtol, c.atol, c.dtype)
        except Exception as ex:  # a broken comparison is a failure, not a crash
            why = f"comparison raised {type(ex).__name__}: {ex}"
        if why:
            report_fail(name, f"{why}; {case}")
        else:
            report_pass(name)


# ------------------------------------------------------------------ gradcheck
# Nabla source for b.raw(): central finite differences of a scalar function f
# at x (use f64 inputs) next to grad(f)(x); gradcheck(f, x) = [autograd, numeric].
GRADCHECK_NBL = r'''
fn numgrad(f, x, h) {
  g = zeros_like(x)
  gf = reshape(g, -1)
  n = numel(x)
  for i in 0..n {
    xp = clone(x)
    vp = reshape(xp, -1)
    vp[i] = vp[i] + h
    xm = clone(x)
    vm = reshape(xm, -1)
    vm[i] = vm[i] - h
    gf[i] = (f(xp) - f(xm)) / (2 * h)
  }
  g
}
fn gradcheck(f, x) = list(grad(f)(x), numgrad(f, x, 1e-6))
'''


# ------------------------------------------------------------------ random inputs
def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def rand_shape(ndim, lo=1, hi=5):
    return tuple(int(v) for v in rng.integers(lo, hi + 1, size=ndim))


def bcast_pair(ndim):
    """Two shapes that broadcast: random size-1 axes and a missing leading axis or two."""
    s = list(rand_shape(ndim, 2, 5))
    a, b = list(s), list(s)
    for i in range(ndim):
        r = rng.integers(0, 3)
        if r == 1:
            a[i] = 1
        elif r == 2:
            b[i] = 1
    drop = int(rng.integers(0, ndim + 1)) if ndim else 0
    return tuple(a), tuple(b[drop:])
