#!/usr/bin/python3
"""Ctrl-C during ONE long builtin or tensor op (a huge sort, matmul, sum or
elementwise op) ends the statement with the Interrupted error: the op's
kernel stops between chunks of work and the statements after it do not run.

A script prints "start", then runs the long op, then prints "after"; SIGINT
arrives 0.5 s after "start".  The same through the REPL's pty.  $NABLA is the
binary (default build/nabla).  Prints PASS/FAIL lines; exits 1 on a failure.
"""
import os, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replpty import Reporter, repl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.path.abspath(os.environ.get("NABLA", os.path.join(ROOT, "build", "nabla")))

# each op runs for 5-10 s on one core uninterrupted; its kernel must stop
# within a few milliseconds of the flag (checked: under 3 s, allowing for load)
OPS = {
    "sort": ("x = randn(20000000)", "y = sort(x)"),
    "matmul": ("a = randn(4000, 4000)", "y = a @ a @ a @ a"),
    "matmul-int": ("a = randint(0, 5, [2000, 2000])", "y = a @ a"),
    "elementwise-loop": ("x = ones(50000000)", "for i in 0..100 { y = (x * 2).sum() + x.exp().sum() + (x + x).sum() + (x - 1).abs().sum() }"),
}


report = Reporter("interrupt")


def script_case(name, setup, op):
    src = "%s\neprint(\"start\")\n%s\nprint(\"after\")\n" % (setup, op)   # stderr: unbuffered
    with tempfile.NamedTemporaryFile("w", suffix=".nbl", delete=False) as f:
        f.write(src)
        path = f.name
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    p = subprocess.Popen([NABLA, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        line = p.stderr.readline()
        if line != b"start\n":
            return "no start line: %r %r" % (line, p.stderr.read())
        time.sleep(0.5)
        if p.poll() is not None:
            return "the op finished in under 0.5 s: make it longer"
        sent = time.time()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        took = time.time() - sent
        out, err = out.decode(), err.decode()
        if "after" in out:
            return "the statement after the op ran (interrupt lost); stdout %r stderr %r" % (out, err)
        if "Interrupted: interrupted" not in err:
            return "no interruption error: stdout %r stderr %r" % (out, err)
        if p.returncode == 0:
            return "exit status 0 after an interrupt"
        if took > 3:
            return "took %.1f s to stop after SIGINT" % took
        return None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.unlink(path)


for name, (setup, op) in OPS.items():
    try:
        report("script-" + name, script_case(name, setup, op))
    except Exception as e:  # noqa: BLE001 - any failure is reported
        report("script-" + name, e)


def pty_case():
    """the REPL: ^C during a long sort returns to the prompt, the cell stops"""
    with repl(NABLA) as (t, _):
        t.expect(">>> ", 60)
        t.send("x = randn(10000000)\r")
        t.expect(">>> ", 60)
        t.send("y = sort(x); ran_after = 1\r")
        time.sleep(1.0)
        t.send("\x03")
        t.expect("Interrupted: interrupted", 30)
        t.expect(">>> ", 10)
        t.send("ran_after\r")
        out = t.expect(">>> ", 10)
        if "NameError" not in out:
            return "the statement after the sort ran: %r" % out
        t.send("1 + 41\r")
        out = t.expect(">>> ", 10)
        if "42" not in out:
            return "REPL not alive after the interrupt: %r" % out
        return None


try:
    report("repl-sort", pty_case())
except Exception as e:  # noqa: BLE001
    report("repl-sort", e)

sys.exit(1 if report.failed else 0)
