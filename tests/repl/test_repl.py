#!/usr/bin/python3
"""REPL tests through a pseudo-terminal, plus piped, script and option modes.

Run with Debian's /usr/bin/python3 (stdlib only).  $NABLA is the binary
(default: build/nabla).  Prints "PASS: name" / "FAIL: name: why" per test and
exits 1 when any failed.  Every read has a timeout, so nothing can hang.
"""
import os, pty, re, select, signal, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.path.abspath(os.environ.get("NABLA", os.path.join(ROOT, "build", "nabla")))
TIMEOUT = float(os.environ.get("REPL_TIMEOUT", "10"))
failed = 0
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[>=]|\r")


class Session:
    """nabla running on a pty: send keys, wait for text."""

    def __init__(self, home, args=(), cwd=None):
        env = dict(os.environ, HOME=home, TERM="xterm", NO_COLOR="1", INPUTRC="/dev/null")
        env.pop("NABLA_PATH", None)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            if cwd:
                os.chdir(cwd)
            os.execve(NABLA, [NABLA] + list(args), env)
        self.buf = b""        # everything read, ANSI-stripped
        self.mark = 0         # expect() searches from here
        self.status = None

    def send(self, s):
        os.write(self.fd, s.encode() if isinstance(s, str) else s)

    def _read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:       # EIO: the child exited
            return None
        if not data:
            return None
        self.buf += ANSI.sub(b"", data)
        return True

    def expect(self, pattern, timeout=TIMEOUT):
        """Waits until pattern (a regex str) appears after the mark; moves the mark past it."""
        rx = re.compile(pattern.encode(), re.S)
        end = time.time() + timeout
        while True:
            m = rx.search(self.buf, self.mark)
            if m:
                self.mark = m.end()
                return m
            left = end - time.time()
            if left <= 0 or self._read(min(left, 0.2)) is None and not rx.search(self.buf, self.mark):
                if left <= 0 or self._exited():
                    tail = self.buf[self.mark:][-300:].decode(errors="replace")
                    raise AssertionError("timed out waiting for %r; output after mark: %r" % (pattern, tail))

    def _exited(self):
        if self.status is None:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
        return self.status is not None

    def line(self, s, prompt=r">>> "):
        """Types a line, waits for its echo and then the next prompt; returns
        what came in between (starting with the newline after the echo)."""
        self.send(s + "\r")
        self.expect(re.escape(s) + r"\n")
        start = self.mark - 1
        self.expect(prompt)
        return self.buf[start:self.mark].decode(errors="replace")

    def wait(self, timeout=TIMEOUT):
        end = time.time() + timeout
        while not self._exited():
            if time.time() > end:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                raise AssertionError("did not exit; output: %r" % self.buf[-300:])
            self._read(0.1)
        while self._read(0.05):
            pass
        return self.status

    def close(self):
        if not self._exited():
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        try:
            os.close(self.fd)
        except OSError:
            pass


def test(name):
    def deco(fn):
        global failed
        home = tempfile.mkdtemp(prefix="nabla-repl-")
        try:
            fn(home)
            print("PASS: repl/%s" % name)
        except Exception as e:  # noqa: BLE001 - any failure is reported
            failed += 1
            why = str(e).replace("\n", " ")[:400] or type(e).__name__
            print("FAIL: repl/%s: %s" % (name, why))
        finally:
            subprocess.run(["rm", "-rf", home])
        sys.stdout.flush()
        return fn
    return deco


def start(home, *args, **kw):
    s = Session(home, args, **kw)
    s.expect(r"type %help for help")
    s.expect(r">>> ")
    return s


def check(cond, why):
    if not cond:
        raise AssertionError(why)


# ------------------------------------------------------------------ pty REPL
@test("echo")
def _(home):
    s = start(home)
    try:
        out = s.line("1 + 2 * 3")
        check("\n7\n" in out.replace("\r", ""), "1 + 2 * 3 echoed %r" % out)
        out = s.line('"str"')
        check('"str"' in out, "string echo is quoted: %r" % out)
        out = s.line("x = 5")
        check(re.fullmatch(r"\n>>> ", out) is not None, "assignment echoes nothing: %r" % out)
        out = s.line("print(x); nil")
        check("\n5\n" in out and "nil" not in out, "print output, nil not echoed: %r" % out)
        out = s.line("x / 5")   # a float echoes as one (Python's repr), an int as an int
        check("\n1.0\n" in out.replace("\r", ""), "x / 5 echoed %r" % out)
        out = s.line("x // 2")
        check("\n2\n" in out.replace("\r", ""), "x // 2 echoed %r" % out)
    finally:
        s.close()


@test("multiline-function")
def _(home):
    s = start(home)
    try:
        s.send("fn add3(a, b) {\r")
        s.expect(r"\.\.\. ")
        s.send("  c = a + b\r")
        s.expect(r"\.\.\. ")
        s.send("  c + 3\r")
        s.expect(r"\.\.\. ")
        s.send("}\r")
        s.expect(r">>> ")
        out = s.line("add3(1, 2)")
        check("\n6\n" in out, "add3(1, 2) = %r" % out)
        # an open bracket also continues; the value comes after the close
        s.send("list(1,\r")
        s.expect(r"\.\.\. ")
        s.send("2)\r")
        s.expect(r"\[1, 2\]")
        s.expect(r">>> ")
    finally:
        s.close()


@test("tab-complete-global")
def _(home):
    s = start(home)
    try:
        s.line("my_long_variable_name = 41")
        s.send("my_l\t")
        s.expect(r"my_long_variable_name")
        s.send(" + 1\r")
        s.expect(r"\n42\n")
        s.expect(r">>> ")
    finally:
        s.close()


@test("tab-complete-field")
def _(home):
    s = start(home)
    try:
        s.line("params = {weight_decay: 7, bias: 2}")
        s.send("params.wei\t")
        s.expect(r"params\.weight_decay")
        s.send("\r")
        s.expect(r"\n7\n")
        s.expect(r">>> ")
    finally:
        s.close()


@test("history-up-arrow")
def _(home):
    s = start(home)
    try:
        s.line("counter_value = 10")
        s.line("counter_value * 3")
        s.send("\x1b[A")          # Up: recalls "counter_value * 3"
        s.expect(r"counter_value \* 3")
        s.send("\r")
        s.expect(r"\n30\n")
        s.expect(r">>> ")
        s.send("\x1b[A\x1b[A\x1b[A")    # three times: "counter_value = 10", then edit it
        s.expect(r"= 10")       # (readline redraws the changed tail only)
        s.send("0\r")             # appends: counter_value = 100
        s.expect(r">>> ")
        out = s.line("counter_value")
        check("\n100\n" in out, "edited recall: %r" % out)
    finally:
        s.close()


@test("history-persisted")
def _(home):
    s = start(home)
    try:
        s.line("persisted_marker = 123")
        s.send("\x04")
        check(s.wait() == 0, "exit status")
    finally:
        s.close()
    hist = open(os.path.join(home, ".nabla_history")).read()
    check("persisted_marker = 123" in hist, "history file: %r" % hist)
    s = start(home)
    try:
        s.send("\x1b[A")
        s.expect(r"persisted_marker = 123")
        s.send("\r")
        s.expect(r">>> ")
        out = s.line("persisted_marker")
        check("\n123\n" in out, "recalled line ran: %r" % out)
    finally:
        s.close()


def history_entries(home):
    """the entries of ~/.nabla_history: each after a \\001<seconds> line"""
    text = open(os.path.join(home, ".nabla_history"), "rb").read().decode()
    check(text.startswith("\x01"), "history file does not start with a timestamp line: %r" % text[:80])
    return [e.split("\n", 1)[1].rstrip("\n") for e in re.split(r"(?m)^(?=\x01\d+$)", text) if e]


@test("history-multiline-persisted")
def _(home):
    entry = ["if true {", "#1 a comment line, not a timestamp", "  ml_value = 6 * 7", "}"]
    s = start(home)
    try:
        for i, part in enumerate(entry):
            s.send(part + "\r")
            s.expect(r"\.\.\. " if i < len(entry) - 1 else r">>> ")
        s.line("after_entry = 1")
        s.send("\x04")
        check(s.wait() == 0, "exit status")
    finally:
        s.close()
    got = history_entries(home)
    check(got == ["\n".join(entry), "after_entry = 1"], "history entries: %r" % got)
    # the next session recalls the entry whole: Up twice, then Enter runs all four lines
    s = start(home)
    try:
        s.send("\x1b[A\x1b[A")
        s.expect(r"ml_value = 6 \* 7")
        s.send("\r")
        s.expect(r">>> ")
        out = s.line("ml_value")
        check("\n42\n" in out, "the recalled entry ran: %r" % out)
        s.send("\x04")
        check(s.wait() == 0, "exit status")
    finally:
        s.close()
    got = history_entries(home)
    check(got[:2] == ["\n".join(entry), "after_entry = 1"] and got[-1] == "ml_value", "after a second session: %r" % got)


@test("history-old-file-converted")
def _(home):
    # a file from before (one line per entry, no timestamps): each line stays an entry
    with open(os.path.join(home, ".nabla_history"), "w") as f:
        f.write("old_a = 11\nold_b = 22\n")
    s = start(home)
    try:
        s.send("\x1b[A\x1b[A")
        s.expect(r"a = 11")     # (readline redraws the changed tail only)
        s.send("\r")
        s.expect(r">>> ")
        out = s.line("old_a")
        check("\n11\n" in out, "recalled old entry: %r" % out)
        s.send("\x04")
        check(s.wait() == 0, "exit status")
    finally:
        s.close()
    got = history_entries(home)
    check(got == ["old_a = 11", "old_b = 22", "old_a = 11", "old_a"], "converted history: %r" % got)


@test("triple-quoted-string-continues")
def _(home):
    s = start(home)
    try:
        s.send("t = '''first\r")
        s.expect(r"\.\.\. ")
        s.send("second {x}'''\r")
        s.expect(r">>> ")
        out = s.line("t")
        check('"first\\nsecond \\{x}"' in out, "a triple-quoted string over two lines (echoed as source): %r" % out)
        # a one-quote string that is not closed is an error on its line, not a continuation
        s.send('bad = "open\r')
        s.expect(r"SyntaxError: unterminated string: the \" at line 1, column 7 is not closed on its line")
        s.expect(r">>> ")
    finally:
        s.close()


@test("ctrl-c-interrupts")
def _(home):
    s = start(home)
    try:
        s.line("kept = 99")
        s.send("while true {}\r")
        time.sleep(0.5)
        s.send("\x03")
        s.expect(r"Interrupted: interrupted")
        s.expect(r">>> ")
        out = s.line("kept")
        check("\n99\n" in out, "variable kept after interrupt: %r" % out)
        # interrupting a running function, too
        s.line("fn spin() { n = 0; while true { n += 1 } }")
        s.send("spin()\r")
        time.sleep(0.3)
        s.send("\x03")
        s.expect(r"Interrupted")
        s.expect(r">>> ")
        out = s.line("kept + 1")
        check("\n100\n" in out, "still alive: %r" % out)
    finally:
        s.close()


@test("ctrl-c-while-typing")
def _(home):
    s = start(home)
    try:
        s.send("abandoned_line")
        s.expect("abandoned_line")
        s.send("\x03")
        s.expect(r">>> ")
        out = s.line("1 + 1")
        check("\n2\n" in out and "abandoned" not in out, "fresh line after ^C: %r" % out)
    finally:
        s.close()


@test("error-keeps-session")
def _(home):
    s = start(home)
    try:
        s.line("alive = 1")
        out = s.line("undefined_name + 1")
        check("NameError: undefined variable 'undefined_name'" in out, "error report: %r" % out)
        check("<input>:1:1" in out and "^" in out, "location and caret: %r" % out)
        s.send("x = (1 +\r")      # incomplete: continuation prompt
        s.expect(r"\.\.\. ")
        s.send("* 2)\r")         # completed with a syntax error
        s.expect(r"SyntaxError")
        s.expect(r">>> ")
        out = s.line("alive + 1")
        check("\n2\n" in out, "session alive: %r" % out)
    finally:
        s.close()


@test("percent-commands")
def _(home):
    s = start(home)
    try:
        s.line("alpha = 1")
        s.line('beta = "b"')
        out = s.line("%who")
        check("alpha\tnumber" in out and "beta\tstring" in out and "argv\tlist" in out, "%%who: %r" % out)
        out = s.line("%help len")
        check("len(x)" in out and "length" in out, "%%help len: %r" % out)
        out = s.line("%help")
        check("%time" in out and "%quit" in out, "%%help: %r" % out)
        out = s.line("%help nothing_here")
        check("no help for 'nothing_here'" in out, "%%help unknown: %r" % out)
        out = s.line("%time 1+1")
        check("\n2\n" in out and re.search(r"Wall time: [0-9.]+ (s|ms|µs|ns)", out), "%%time: %r" % out)
        s.line("%reset")
        out = s.line("%who")
        check("alpha" not in out and "argv" in out, "%%reset then %%who: %r" % out)
        out = s.line("alpha")
        check("NameError" in out, "alpha gone after reset: %r" % out)
        path = os.path.join(home, "loadme.nbl")
        with open(path, "w") as f:
            f.write('loaded_value = 7 * 6\nprint("loading")\n')
        out = s.line("%load " + path)
        check("loading" in out, "%%load output: %r" % out)
        out = s.line("loaded_value")
        check("\n42\n" in out, "%%load defined: %r" % out)
        out = s.line("%load /no/such/file.nbl")
        check("cannot read" in out and "No such file" in out, "%%load missing: %r" % out)
        out = s.line("%bogus")
        check("unknown magic %bogus" in out, "unknown command: %r" % out)
        s.send("%quit\r")
        check(s.wait() == 0, "%%quit exit status %r" % s.status)
    finally:
        s.close()


@test("ctrl-d-exits")
def _(home):
    s = start(home)
    try:
        s.line("1")
        s.send("\x04")
        check(s.wait() == 0, "exit status %r" % s.status)
    finally:
        s.close()


# ------------------------------------------------------------------ non-pty modes
def run(args, stdin=None, cwd=None):
    env = dict(os.environ, NO_COLOR="1")
    env.pop("NABLA_PATH", None)
    p = subprocess.run([NABLA] + args, input=stdin, capture_output=True, text=True,
                       timeout=TIMEOUT * 3, cwd=cwd, env=env)
    return p.returncode, p.stdout, p.stderr


@test("piped")
def _(home):
    rc, out, err = run([], stdin="x = 3\nx + 1\n")
    check((rc, out, err) == (0, "4\n", ""), "got %r" % ((rc, out, err),))
    rc, out, err = run([], stdin="fn f(a) {\n  a * 2\n}\nf(21)\n%who\n")
    check(rc == 0 and out.startswith("42\n") and "f\tfunction" in out, "multi-line piped: %r" % ((rc, out, err),))
    rc, out, err = run([], stdin="print(1)\nnope\nprint(2)\n")
    check(rc == 1 and out == "1\n2\n" and "<stdin>:1:1: NameError" in err, "piped error continues, exit 1: %r" % ((rc, out, err),))


@test("script-argv")
def _(home):
    path = os.path.join(home, "args.nbl")
    with open(path, "w") as f:
        f.write("print(argv)\nprint(len(argv))\n")
    rc, out, err = run([path, "a", "b c"])
    check(rc == 0 and out == '["%s", "a", "b c"]\n3\n' % path and err == "", "got %r" % ((rc, out, err),))


@test("script-error")
def _(home):
    path = os.path.join(home, "bad.nbl")
    with open(path, "w") as f:
        f.write('print("before")\nfn f() = 1 + nil\nf()\nprint("after")\n')
    rc, out, err = run(["bad.nbl"], cwd=home)
    want = ("bad.nbl:2:10: TypeError: unsupported operand types for +: number and nil\n"
            " 2 | fn f() = 1 + nil\n   |          ^^^^^^^\n"
            "stack trace (most recent call last):\n  <main> at bad.nbl:3:1\n  f at bad.nbl:2:10\n")
    check(rc == 1 and out == "before\n" and err == want, "got %r" % ((rc, out, err),))
    rc, out, err = run(["/no/such/script.nbl"])
    check(rc == 1 and "IOError: cannot read /no/such/script.nbl" in err, "missing script: %r" % ((rc, out, err),))


@test("dash-e")
def _(home):
    rc, out, err = run(["-e", "print(argv, 6 * 7)", "x", "y"])
    check((rc, out, err) == (0, '["x", "y"] 42\n', ""), "got %r" % ((rc, out, err),))
    rc, out, err = run(["-e", "1 +"])
    check(rc == 1 and "<-e>:1:4: SyntaxError: unexpected end of input" in err, "syntax error: %r" % ((rc, out, err),))
    rc, out, err = run(["-e"])
    check(rc == 2 and "usage:" in err, "-e without code: %r" % ((rc, out, err),))


@test("version-help")
def _(home):
    rc, out, err = run(["--version"])
    check(rc == 0 and re.fullmatch(r"nabla \d+\.\d+\.\d+\n", out), "--version: %r" % ((rc, out, err),))
    rc, out, err = run(["--help"])
    check(rc == 0 and out.startswith("usage: nabla") and "-e CODE" in out, "--help: %r" % ((rc, out, err),))
    rc, out, err = run(["--bogus"])
    check(rc == 2 and "unknown option --bogus" in err, "--bogus: %r" % ((rc, out, err),))


@test("unbuffered")
def _(home):
    # stdout to a file: block-buffered unless -u / NABLA_UNBUFFERED=1, or
    # flush().  The script prints, says so on stderr (unbuffered), then spins
    # until a flag file exists (input() would flush stdout): the log is read
    # while it waits, before it exits.
    path = os.path.join(home, "slow.nbl")
    flag = os.path.join(home, "go")
    with open(path, "w") as f:
        f.write('print("first line {1 + 1}")\nif getenv("DO_FLUSH") { flush() }\neprint("WAITING")\n'
                'while not exists("%s") { }\nprint("second")\n' % flag)

    def first_output(args, env_extra):
        log = os.path.join(home, "log.txt")
        env = dict(os.environ, **env_extra)
        if "NABLA_UNBUFFERED" not in env_extra:
            env.pop("NABLA_UNBUFFERED", None)
        with open(log, "w") as out:
            p = subprocess.Popen([NABLA] + args + [path], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE, env=env)
            try:
                r, _, _ = select.select([p.stderr], [], [], TIMEOUT)
                marker = p.stderr.readline() if r else b""
                seen = open(log).read()
                open(flag, "w").close()
                p.wait(timeout=TIMEOUT)
                os.unlink(flag)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        return marker, seen, open(log).read(), p.returncode
    marker, seen, final, rc = first_output([], {})
    check(marker == b"WAITING\n" and seen == "" and final == "first line 2\nsecond\n" and rc == 0,
          "buffered: marker %r, seen %r, final %r, rc %r" % (marker, seen, final, rc))
    for args, env in ((["-u"], {}), ([], {"NABLA_UNBUFFERED": "1"}), ([], {"DO_FLUSH": "1"})):
        marker, seen, final, rc = first_output(args, env)
        check(marker == b"WAITING\n" and seen == "first line 2\n" and final == "first line 2\nsecond\n" and rc == 0,
              "%s %s: marker %r, seen %r, final %r, rc %r" % (args, env, marker, seen, final, rc))
    rc, out, err = run(["-u", "-e", "print(argv)", "a"])
    check((rc, out, err) == (0, '["a"]\n', ""), "-u -e: %r" % ((rc, out, err),))


if not os.access(NABLA, os.X_OK):
    print("FAIL: repl/setup: interpreter %s not found" % NABLA)
    sys.exit(1)
sys.exit(1 if failed else 0)
