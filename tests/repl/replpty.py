"""The REPL on a pseudo-terminal, for the tests that type into it and send
^C (test_interrupt.py, test_fuse_interrupt.py)."""
import contextlib
import os
import sys
import pty
import re
import select
import shutil
import signal
import tempfile
import time

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[>=]|\r")


class Pty:
    """the REPL on a pseudo-terminal: everything read is kept; expect() searches
    past the previous match, so text that arrived early is not lost"""

    def __init__(self, fd, pid=None):
        self.fd, self.buf, self.mark, self.pid = fd, b"", 0, pid

    def cpu_seconds(self):
        """the REPL process's user + system CPU time so far (its threads included)"""
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_busy(self, seconds, timeout):
        """waits until the REPL has spent `seconds` more CPU time than now: it
        is inside a long computation (a sleep would race a fast machine)"""
        start, end = self.cpu_seconds(), time.time() + timeout
        while self.cpu_seconds() - start < seconds:
            if time.time() > end:
                raise AssertionError("the REPL did not start computing within %ss" % timeout)
            time.sleep(0.005)

    def expect(self, needle, timeout):
        end = time.time() + timeout
        while True:
            i = self.buf.find(needle.encode(), self.mark)
            if i >= 0:
                out = self.buf[self.mark:i + len(needle)].decode(errors="replace")
                self.mark = i + len(needle)
                return out
            left = end - time.time()
            r, _, _ = select.select([self.fd], [], [], max(left, 0))
            if not r:
                raise AssertionError("timed out waiting for %r; got %r" % (needle, self.buf[self.mark:][-300:]))
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            if not data:
                raise AssertionError("REPL exited waiting for %r; got %r" % (needle, self.buf[self.mark:][-300:]))
            self.buf += ANSI.sub(b"", data)

    def send(self, text):
        os.write(self.fd, text.encode())


@contextlib.contextmanager
def repl(nabla, threads=1):
    """the REPL started on a pty with a fresh HOME (OMP_NUM_THREADS=threads),
    killed and cleaned up afterwards; yields (Pty, HOME)"""
    home = tempfile.mkdtemp(prefix="nabla-pty-")
    env = dict(os.environ, HOME=home, TERM="xterm", NO_COLOR="1", INPUTRC="/dev/null", OMP_NUM_THREADS=str(threads))
    env.pop("NABLA_FUSE", None)
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(nabla, [nabla], env)
    try:
        yield Pty(fd, pid), home
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
        shutil.rmtree(home, ignore_errors=True)


class Reporter:
    """PASS/FAIL lines under one suite prefix, and the count of failures"""

    def __init__(self, suite):
        self.suite, self.failed = suite, 0

    def __call__(self, name, err):
        if err:
            self.failed += 1
            print("FAIL: %s/%s: %s" % (self.suite, name, str(err).replace("\n", " ")[:400]))
        else:
            print("PASS: %s/%s" % (self.suite, name))
        sys.stdout.flush()
