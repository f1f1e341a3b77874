"""Process startup: a plain script loads neither ZeroMQ nor OpenSSL's
libcrypto (wire/dynlib.c loads them on first use; linking them cost every
process ~3/4 of its startup), and what needs them still loads them.  Checked
through the dynamic loader's own log (LD_DEBUG=libs), not through timing."""
import os
import random
import re
import subprocess
import tempfile

from lutil import NABLA, report, finish

LAZY = ("libzmq.so", "libcrypto.so", "libstdc++.so", "libkrb5.so", "libsodium.so")


def loaded(stderr):
    """the shared libraries whose initialisers ran, by file name"""
    return {os.path.basename(m) for m in re.findall(r"calling init: (\S+)", stderr)}


def run(args, timeout=60):
    env = dict(os.environ, LD_DEBUG="libs", NO_COLOR="1")
    p = subprocess.run([NABLA] + args, capture_output=True, text=True, env=env,
                       stdin=subprocess.DEVNULL, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


rng = random.Random()
a, b = rng.randint(-10**6, 10**6), rng.randint(1, 10**6)

# a plain script: correct output, and none of the lazily loaded libraries
rc, out, err = run(["-e", f"print({a} * {b} + {a} // {b})"])
libs = loaded(err)
want = str(a * b + a // b)
report("startup/plain-script-runs", rc == 0 and out.split() == [want], f"rc {rc} out {out!r} want {want}")
report("startup/plain-script-loads-no-zmq-crypto", libs and not any(l.startswith(LAZY) for l in libs),
       "loaded at startup: %s" % sorted(l for l in libs if l.startswith(LAZY)) if libs else "LD_DEBUG=libs printed nothing")

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
finish()
