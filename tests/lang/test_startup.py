"""Process startup: a plain script loads none of the libraries that only
some features need (util/dynload.h loads them on first use: ZeroMQ and
libcrypto for workers and the kernel, readline for the terminal REPL,
jansson for safetensors and the kernel, libpng for PNG plots, zlib for
compressed npz, SLEEF for tensor exp/log/sin/...; linking them cost every process most of its startup), and
each feature that needs one still loads it, and gives the clear "cannot load"
error, only then, when it is missing.  Checked through the dynamic loader's
own log (LD_DEBUG=libs), not through timing."""
import ast
import json
import os
import pty
import random
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time

from lutil import NABLA, report, finish

LAZY = ("libzmq.so", "libcrypto.so", "libstdc++.so", "libkrb5.so", "libsodium.so",
        "libreadline.so", "libtinfo.so", "libjansson.so", "libpng16.so", "libz.so", "libsleef.so",
        "libkissfft-float.so")


def loaded(stderr):
    """the shared libraries whose initialisers ran, by file name"""
    return {os.path.basename(m) for m in re.findall(r"calling init: (\S+)", stderr)}


def run(args, timeout=60, stdin=None, prefix=()):
    env = dict(os.environ, LD_DEBUG="libs", NO_COLOR="1")
    p = subprocess.run(list(prefix) + [NABLA] + args, capture_output=True, text=True, env=env,
                       input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def skip(name, why):
    print(f"SKIP: {name}: {why}")


def has(libs, lib):
    return any(l.startswith(lib) for l in libs)


rng = random.Random()
a, b = rng.randint(-10**6, 10**6), rng.randint(1, 10**6)

# a plain script: correct output, and none of the lazily loaded libraries
rc, out, err = run(["-e", f"print({a} * {b} + {a} // {b})"])
libs = loaded(err)
want = str(a * b + a // b)
report("startup/plain-script-runs", rc == 0 and out.split() == [want], f"rc {rc} out {out!r} want {want}")
report("startup/plain-script-loads-no-lazy-library", libs and not any(l.startswith(LAZY) for l in libs),
       "loaded at startup: %s" % sorted(l for l in libs if l.startswith(LAZY)) if libs else "LD_DEBUG=libs printed nothing")

# the REPL with piped stdin (no terminal): no line editor, so no readline
rc, out, err = run([], stdin=f"print({a} - {b})\n")
libs = loaded(err)
report("startup/piped-repl-runs", rc == 0 and out.split() == [str(a - b)], f"rc {rc} out {out!r} want {a - b}")
report("startup/piped-repl-loads-no-readline", libs and not has(libs, "libreadline.so"), f"loaded: {sorted(libs)}")

# `nabla run` (workers over ZeroMQ, HMAC-signed with libcrypto): loads both on first use
with tempfile.NamedTemporaryFile("w", suffix=".nbl", delete=False) as f:
    f.write(f"print({a} + {b})\n")
    path = f.name
try:
    rc, out, err = run(["run", "-n", "1", path], timeout=120)
finally:
    os.unlink(path)
libs = loaded(err)
report("startup/run-uses-workers", rc == 0 and str(a + b) in out, f"rc {rc} out {out!r} want {a + b}")
for lib in ("libzmq.so", "libcrypto.so"):
    report(f"startup/run-loads-{lib.split('.')[0]}-on-first-use", any(l.startswith(lib) for l in libs),
           f"{lib} never loaded; loaded: {sorted(libs)}")

tmp = tempfile.mkdtemp(prefix="nabla-startup-")


def repl_on_pty(line, want, timeout=30, prefix=()):
    """the interactive REPL on a pseudo-terminal (HOME: its history file in
    tmp): types line, waits for want, then Ctrl-D.  -> (output, libraries)"""
    log = os.path.join(tmp, "ld")
    env = dict(os.environ, LD_DEBUG="libs", LD_DEBUG_OUTPUT=log, NO_COLOR="1", HOME=tmp, TERM="dumb")
    master, slave = pty.openpty()
    p = subprocess.Popen(list(prefix) + [NABLA], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    buf, sent, done, end = b"", False, False, time.time() + timeout
    try:
        while time.time() < end and p.poll() is None:
            if not sent and b">>> " in buf:
                os.write(master, (line + "\n").encode()); sent = True
            after = buf.split(line.encode(), 1)[-1] if sent else b""
            if not done and want.encode() in after and b">>> " in after.split(want.encode(), 1)[-1]:
                os.write(master, b"\x04"); done = True
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                buf += data
        p.wait(timeout=5)
    finally:
        if p.poll() is None:
            p.kill(); p.wait()
        os.close(master)
    text = ""
    for name in os.listdir(tmp):
        if name.startswith("ld."):
            with open(os.path.join(tmp, name)) as f:
                text += f.read()
            os.unlink(os.path.join(tmp, name))
    return buf.decode(errors="replace"), loaded(text)


# the terminal REPL loads readline when it starts, and edits and keeps history with it
out, libs = repl_on_pty(f"print({a} * 3 + {b})", str(a * 3 + b))
report("startup/tty-repl-runs", str(a * 3 + b) in out.split(f"print({a} * 3 + {b})", 1)[-1], f"output {out[-300:]!r}")
report("startup/tty-repl-loads-readline", has(libs, "libreadline.so"), f"readline never loaded; loaded: {sorted(libs)}")
hist = os.path.join(tmp, ".nabla_history")
report("startup/tty-repl-history", os.path.exists(hist) and f"print({a} * 3 + {b})" in open(hist).read(),
       "the line is not in the history file")


def png_size(path):
    """(width, height) from a PNG's IHDR, or None when it is not a PNG"""
    with open(path, "rb") as f:
        data = f.read(24)
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


# a PNG plot loads libpng
png = os.path.join(tmp, "im.png")
rc, out, err = run(["-e", f'seed({a})\nimshow(rand({b % 7 + 2}, {b % 5 + 3}), file="{png}")'])
libs = loaded(err)
report("startup/png-plot-written", rc == 0 and os.path.exists(png) and png_size(png) is not None,
       f"rc {rc} stderr {err[-300:]!r}")
report("startup/png-plot-loads-libpng", has(libs, "libpng16.so"), f"libpng never loaded; loaded: {sorted(libs)}")

# compressed npz (zlib) and safetensors (jansson): the values come back
try:
    import numpy as np
except ImportError as e:
    np = None
    skip("startup/npz-safetensors", f"numpy not importable ({e}); run with /usr/bin/python3")


def printed_lists(out):
    """each line of out (nabla's tolist printed) as a float64 array; [] when
    a line is not a list literal"""
    try:
        return [np.array(ast.literal_eval(l), dtype=np.float64) for l in out.splitlines()]
    except (ValueError, SyntaxError):
        return []


if np is not None:
    rs = np.random.default_rng(rng.randrange(2**32))
    arr = rs.standard_normal((rng.randint(1, 5), rng.randint(1, 6))).astype(np.float32)
    npz = os.path.join(tmp, "a.npz")
    np.savez_compressed(npz, a=arr)
    st = os.path.join(tmp, "a.safetensors")
    rc, out, err = run(["-e", f'r = load_npz("{npz}")\nprint(tolist(r.a))\n'
                              f'save("{st}", {{w: r.a * 2}})\nprint(tolist(load("{st}").w))'])
    libs = loaded(err)
    got = printed_lists(out)
    report("startup/npz-values", rc == 0 and len(got) == 2 and np.allclose(got[0], arr, rtol=1e-6, atol=0),
           f"rc {rc} out {out[:300]!r} stderr {err[-300:]!r}")
    report("startup/npz-loads-zlib", has(libs, "libz.so"), f"zlib never loaded; loaded: {sorted(libs)}")
    report("startup/safetensors-values", len(got) == 2 and np.allclose(got[1], arr * 2, rtol=1e-6, atol=0),
           f"out {out[:300]!r}")
    report("startup/safetensors-loads-jansson", has(libs, "libjansson.so"), f"jansson never loaded; loaded: {sorted(libs)}")

# tensor exp, tanh, pow: SLEEF's vector math (this CPU's widest width, and the
# tail of a length that is not a multiple of it)
if np is not None:
    xs = (rs.standard_normal(rng.randint(1, 40)) * 2).astype(np.float64)
    rc, out, err = run(["-e", f"x = tensor({xs.tolist()}, dtype=\"float64\")\n"
                              "print(tolist(exp(x)))\nprint(tolist(tanh(x)))\nprint(tolist(pow(abs(x), 1.5)))\n"
                              f"print(tolist(exp(tensor({xs.tolist()}))))"])
    libs = loaded(err)
    got = printed_lists(out)
    want = [np.exp(xs), np.tanh(xs), np.abs(xs) ** 1.5, np.exp(xs.astype(np.float32)).astype(np.float64)]   # tensor()'s default dtype: float32
    report("startup/sleef-values", rc == 0 and len(got) == 4 and all(np.allclose(g, w, rtol=1e-6, atol=0) for g, w in zip(got, want)),
           f"rc {rc} out {out[:300]!r} stderr {err[-300:]!r}")
    report("startup/sleef-loaded-on-first-use", has(libs, "libsleef.so"), f"SLEEF never loaded; loaded: {sorted(libs)}")

# an f32 FFT loads KISS FFT (tensor/fft/fkiss_f32.c); an f64 one does not need it
rc, out, err = run(["-e", "print(tolist(real(fft.rfft(tensor([1.0, 2.0, 3.0, 4.0])))))"])
report("startup/kissfft-loaded-on-first-use", rc == 0 and out.split() == ["[10.0,", "-2.0,", "-2.0]"] and has(loaded(err), "libkissfft-float.so"),
       f"rc {rc} out {out[:200]!r} loaded: {sorted(loaded(err))}")

# the kernelspec installer writes kernel.json (jansson) and its logos (libpng)
prefix = os.path.join(tmp, "prefix")
name = f"nb{a & 0xffff:x}"
rc, out, err = run(["kernel", "install", "--prefix", prefix, "--name", name])
libs = loaded(err)
kdir = os.path.join(prefix, "share", "jupyter", "kernels", name)
try:
    with open(os.path.join(kdir, "kernel.json")) as f:
        spec = json.load(f)
except (OSError, ValueError) as e:
    spec = {"error": str(e)}
report("startup/kernel-install-spec", rc == 0 and isinstance(spec.get("argv"), list) and "kernel" in spec["argv"]
       and png_size(os.path.join(kdir, "logo-64x64.png")) == (64, 64), f"rc {rc} spec {spec} stderr {err[-300:]!r}")
report("startup/kernel-install-loads-jansson-libpng", has(libs, "libjansson.so") and has(libs, "libpng16.so"),
       f"loaded: {sorted(libs)}")

# a missing library: the feature that needs it stops with "cannot load", the
# library and its package, and a plain script does not notice (a private
# mount namespace hides the library behind /dev/null; needs root and unshare)
def lib_path(soname):
    """where the dynamic loader finds soname (ldconfig's cache), or None"""
    try:
        out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        return None
    m = re.search(r"^\s*%s \(libc6,x86-64[^)]*\) => (\S+)$" % re.escape(soname), out, re.M)
    return m.group(1) if m else None


def hiding(path):
    return [unshare, "-m", "sh", "-c", f'mount --bind /dev/null {path} && exec "$@"', "sh"]


unshare = shutil.which("unshare")
probe = lib_path("libpng16.so.16")
if not unshare or not probe or subprocess.run(hiding(probe) + ["true"], capture_output=True).returncode != 0:
    skip("startup/missing-library", "cannot hide a library here (needs unshare -m as root)")
else:
    png2 = os.path.join(tmp, "im2.png")
    npz2 = os.path.join(tmp, "b.npz")
    if np is not None:
        np.savez_compressed(npz2, a=np.arange(3.0))
    cases = [  # soname, what the message names, the code that needs it, the file it must not write
        ("libpng16.so.16", "libpng (Debian package libpng16-16)", f'imshow(rand(3, 3), file="{png2}")', png2),
        ("libsleef.so.3", "SLEEF (Debian package libsleef3)", "print(tolist(exp(tensor([1.0, 2.0]))))", None),
        ("libjansson.so.4", "Jansson (Debian package libjansson4)", f'save("{tmp}/c.safetensors", {{w: ones(2)}})',
         f"{tmp}/c.safetensors"),
    ] + ([("libz.so.1", "zlib (Debian package zlib1g)", f'print(load_npz("{npz2}"))', None)] if np is not None else [])
    for soname, what, code, path in cases:
        name = soname.split(".")[0]
        where = lib_path(soname)
        if not where:
            skip(f"startup/missing-{name}", f"{soname} is not in ldconfig's cache")
            continue
        rc, out, err = run(["-e", f'print({a} + 1)\n{code}\nprint("after")'], prefix=hiding(where))
        report(f"startup/missing-{name}-error",
               rc == 127 and out.split() == [str(a + 1)] and f"nabla: cannot load {soname} ({what}" in err
               and not (path and os.path.exists(path)), f"rc {rc} out {out!r} stderr {err[-400:]!r}")
        rc, out, err = run(["-e", f"print({a} * {b})"], prefix=hiding(where))
        report(f"startup/missing-{name}-plain-script-runs", rc == 0 and out.split() == [str(a * b)],
               f"rc {rc} out {out!r} stderr {err[-300:]!r}")
    # the REPL: piped stdin does not need readline; the terminal REPL says it does
    where = lib_path("libreadline.so.8")
    if where:
        rc, out, err = run([], stdin=f"print({a} - {b})\n", prefix=hiding(where))
        report("startup/missing-readline-piped-repl-runs", rc == 0 and out.split() == [str(a - b)],
               f"rc {rc} out {out!r} stderr {err[-300:]!r}")
        out, _ = repl_on_pty(f"print({a})", str(a), prefix=hiding(where))
        report("startup/missing-readline-tty-repl-error",
               "nabla: cannot load libreadline.so.8 (GNU readline (Debian package libreadline8)" in out,
               f"output {out[-400:]!r}")
    # long-lived sessions refuse to start without a library a program may need,
    # instead of dying at its first use with the user's work: the terminal
    # REPL (before its prompt) and the Jupyter kernel (before it reads its
    # connection file); a script and piped input still start (checked above)
    where = lib_path("libsleef.so.3")
    if where:
        out, _ = repl_on_pty(f"print({a})", str(a), prefix=hiding(where))
        report("startup/missing-sleef-tty-repl-refuses",
               "nabla: cannot load libsleef.so.3 (SLEEF (Debian package libsleef3)" in out and ">>> " not in out
               and out.count("cannot load") == 1, f"output {out[-400:]!r}")
        rc, out, err = run([], stdin=f"print({a} - {b})\n", prefix=hiding(where))
        report("startup/missing-sleef-piped-repl-runs", rc == 0 and out.split() == [str(a - b)],
               f"rc {rc} out {out!r} stderr {err[-300:]!r}")
    conn = os.path.join(tmp, f"absent-{b}.json")
    rc, out, err = run(["kernel", "-f", conn])
    report("startup/kernel-all-libraries-starts", rc not in (0, 127) and conn in err and "cannot load" not in err,
           f"rc {rc} stderr {err[-300:]!r}")
    for soname, what in (("libpng16.so.16", "libpng (Debian package libpng16-16)"),
                         ("libzmq.so.5", "ZeroMQ (Debian package libzmq5)")):
        where = lib_path(soname)
        if not where:
            skip(f"startup/kernel-missing-{soname.split('.')[0]}", f"{soname} is not in ldconfig's cache")
            continue
        rc, out, err = run(["kernel", "-f", conn], prefix=hiding(where))
        report(f"startup/kernel-missing-{soname.split('.')[0]}-refuses",
               rc == 127 and f"nabla: cannot load {soname} ({what}" in err and conn not in err,
               f"rc {rc} stderr {err[-400:]!r}")

# the C stack bound (lang/lsession.c's measure_cstack, no longer through
# glibc's /proc/self/maps parse for the main thread): recursion through a
# builtin ends in RecursionError before the C stack overflows, at a depth that
# follows RLIMIT_STACK (1 MB and 2 MB: below the VM's own 10,000-call limit)
import resource
REC = ("fn down(n) = if n == 0 { 0 } else { map(list(n), fn(k) = down(k - 1))[0] + 1 }\n"
       "e = try { down(100000000) } catch err { err }\nprint(e.name)\nprint(e.message)\n"
       f"print(down({b % 40 + 5}))\n")
depth = {}
for mb in (1, 2):
    def limit(mb=mb):
        resource.setrlimit(resource.RLIMIT_STACK, (mb << 20, resource.getrlimit(resource.RLIMIT_STACK)[1]))
    p = subprocess.run([NABLA, "-e", REC], capture_output=True, text=True, preexec_fn=limit, timeout=120)
    lines = p.stdout.split("\n")
    m = re.search(r"nested more than (\d+) deep", p.stdout)
    depth[mb] = int(m.group(1)) if m else None
    report(f"startup/cstack-{mb}mb-recursion-error", p.returncode == 0 and lines[:1] == ["RecursionError"] and m
           and depth[mb] < 10000 and lines[2:3] == [str(b % 40 + 5)], f"rc {p.returncode} out {p.stdout[:300]!r} err {p.stderr[-300:]!r}")
report("startup/cstack-bound-follows-rlimit", depth[1] and depth[2] and depth[2] > depth[1] * 3 // 2,
       f"depths {depth}")

shutil.rmtree(tmp, ignore_errors=True)
finish()
