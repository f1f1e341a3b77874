#!/usr/bin/python3
"""tests/dist: the output relay (dist/drelay.c).  Several ranks print many
long lines at once (10 KB, 100 KB, 1 MB of fresh random text with multi-byte
UTF-8, on stdout and stderr): every relayed line must parse back to exactly
one rank's exact line, in that rank's order ('[rank R] ' lines, joined with
their '[rank R]+ ' continuation pieces, each piece within the bound and
whole UTF-8), and --log-dir files must hold each rank's bytes exactly.
Through `nabla run` (local and, where hosts can be simulated, ssh across 3
hosts), a session's dist.exec, and a REPL %%all cell; and a rank killed in
the middle of a line (its partial line still comes out, on a line of its own).

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_relay.py
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh (the relay,
the launchers' pipes and the session are this suite's C).
"""
import os, random, re, signal, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, needs, relayed, report, sanitizer_check, script, test  # noqa: E402

rng = random.Random(int.from_bytes(os.urandom(8), "little"))
LINE_MAX = 64 << 10   # DSESS_LINE_MAX
PREFIX = re.compile(rb"\[rank (\d+)\]\+? ")
# printable ASCII and characters of 2, 3 and 4 bytes in UTF-8 (no newline, no other control)
ALPHABET = [chr(c) for c in range(32, 127)] + ["é", "ß", "Ж", "中", "文", "€", "😀", "🚀", "𝛑"]


def text(nbytes):
    out, n = [], 0
    while n < nbytes:
        c = rng.choice(ALPHABET)
        out.append(c)
        n += len(c.encode())
    return "".join(out)


def make_inputs(d, ranks, sizes):
    """per rank: a file of 'O<text>' / 'E<text>' lines (stdout / stderr) in a
    fresh random order; returns {rank: [(stream, text)]}"""
    want = {}
    os.makedirs(d, exist_ok=True)
    for r in range(ranks):
        lines = [(rng.choice("OE"), text(s)) for s in sizes] + [(rng.choice("OE"), text(rng.randrange(0, 300))) for _ in range(30)]
        rng.shuffle(lines)
        with open(os.path.join(d, f"in{r}.txt"), "w", encoding="utf-8") as f:
            f.write("".join(s + t + "\n" for s, t in lines))
        want[r] = lines
    return want


# prints rank r's lines: DIR is the input directory
PRINTER = """for line in lines(DIR + "/in" + str(dist.rank()) + ".txt") {
  if startswith(line, "O") { print(line[1:]) } else { eprint(line[1:]) }
}"""


def check_stream(raw, want, stream, ranks, then_reports=False):
    """raw: the bytes of one stream; want: {rank: [(stream, text)]}; None or
    why not.  then_reports: a rank's lines may be followed by its error report"""
    for line in raw.split(b"\n"):
        m = PREFIX.match(line)
        if not m:
            continue
        if len(line) - m.end() > LINE_MAX:
            return f"a piece of {len(line) - m.end()} bytes (over the bound {LINE_MAX})"
        try:
            line[m.end():].decode("utf-8")
        except UnicodeDecodeError as e:
            return f"a piece that is not whole UTF-8 (rank {m.group(1).decode()}): {e}"
    got = relayed(raw.decode("utf-8"))
    for r in range(ranks):
        exp = [t for s, t in want[r] if s == stream]
        g = got.get(r, [])
        if then_reports:
            g = g[:len(exp)]
        if g != exp:
            bad = next((i for i in range(min(len(g), len(exp))) if g[i] != exp[i]), min(len(g), len(exp)))
            return (f"rank {r} {stream}: {len(g)} lines, want {len(exp)}; first difference at line {bad}"
                    + (f" (got {len(g[bad])} bytes {g[bad][:60]!r}..., want {len(exp[bad])} bytes {exp[bad][:60]!r}...)"
                       if bad < min(len(g), len(exp)) else ""))
    extra = set(got) - set(range(ranks))
    return f"lines of ranks {sorted(extra)} that do not exist" if extra else None


def check_all(name, p, want, ranks):
    why = None if p.returncode == 0 else f"rc {p.returncode}: {p.stderr[-600:]!r}"
    why = why or check_stream(p.stdout, want, "O", ranks) or check_stream(p.stderr, want, "E", ranks)
    report(name, why is None, why)


SIZES = [10_000, 10_000, 10_000, 100_000, 100_000, 1_000_000]


@test
def test_run_long_lines(name):
    d = os.path.join(TMP, "run")
    want = make_inputs(d, 5, SIZES)
    logs = os.path.join(TMP, "run-logs")
    path = script("import dist\nDIR = argv[1]\n" + PRINTER + "\n", "relay_run.nbl")
    p = subprocess.run([NABLA, "run", "-n", "5", "--log-dir", logs, path, d], capture_output=True, timeout=300)
    sanitizer_check(p.stderr.decode("utf-8", "replace"))
    check_all(name, p, want, 5)
    # the logs: every byte each rank printed, in its order, unprefixed
    bad = []
    for r in range(5):
        with open(os.path.join(logs, f"rank-{r}.log"), "rb") as f:
            if f.read() != "".join(t + "\n" for s, t in want[r]).encode():
                bad.append(r)
    report("log_dir_byte_exact", not bad, f"ranks {bad} logs differ from what they printed")


@test
def test_only_rank0(name):
    # --only-rank0: rank 0's stdout as the program's own (byte-exact, no prefix), the others' stdout
    # dropped; every rank's stderr on whole lines (rank 0's unprefixed, so its pieces are not marked)
    d = os.path.join(TMP, "only0")
    want = make_inputs(d, 4, [10_000, 100_000, 100_000])
    path = script("import dist\nDIR = argv[1]\n" + PRINTER + "\n", "relay_only0.nbl")
    p = subprocess.run([NABLA, "run", "-n", "4", "--only-rank0", path, d], capture_output=True, timeout=300)
    sanitizer_check(p.stderr.decode("utf-8", "replace"))
    why = None if p.returncode == 0 else f"rc {p.returncode}: {p.stderr[-600:]!r}"
    if not why and p.stdout != "".join(t + "\n" for s, t in want[0] if s == "O").encode():
        why = f"stdout ({len(p.stdout)} bytes) is not rank 0's output"
    if not why:
        others = {r: w for r, w in want.items() if r}
        others[0] = []
        why = check_stream(p.stderr, others, "E", 4)
    if not why:
        own = [l for l in p.stderr.decode("utf-8").split("\n") if l and not PREFIX.match(l.encode())]
        if "".join(own) != "".join(t for s, t in want[0] if s == "E"):
            why = "rank 0's stderr (unprefixed) is not what it printed"
    report(name, why is None, why)


def run_nonblocking(argv):
    """runs argv with stdout a pipe made non-blocking whose reader starts late
    and reads slowly; (rc, stdout bytes, stderr bytes)"""
    import fcntl, threading
    rfd, wfd = os.pipe()
    fcntl.fcntl(wfd, fcntl.F_SETFL, fcntl.fcntl(wfd, fcntl.F_GETFL) | os.O_NONBLOCK)
    p = subprocess.Popen(argv, stdout=wfd, stderr=subprocess.PIPE)
    os.close(wfd)
    chunks = []
    def reader():
        time.sleep(1.0)   # let the pipe fill up first
        while True:
            b = os.read(rfd, 1 << 16)
            if not b:
                break
            chunks.append(b)
            time.sleep(0.001)
    t = threading.Thread(target=reader)
    t.start()
    err = p.communicate(timeout=300)[1]
    t.join(60)
    os.close(rfd)
    sanitizer_check(err.decode("utf-8", "replace"))
    return p.returncode, b"".join(chunks), err


@test
def test_nonblocking_stdout(name):
    # stdout a pipe someone made non-blocking, its reader slow: nothing may be lost (EAGAIN is waited out)
    d = os.path.join(TMP, "nonblock")
    want = make_inputs(d, 3, [100_000, 100_000, 1_000_000])
    path = script("import dist\nDIR = argv[1]\n" + PRINTER + "\n", "relay_nonblock.nbl")
    rc, out, err = run_nonblocking([NABLA, "run", "-n", "3", path, d])
    why = None if rc == 0 else f"rc {rc}: {err[-600:]!r}"
    why = why or check_stream(out, want, "O", 3) or check_stream(err, want, "E", 3)
    report(name, why is None, why)


@test
def test_nonblocking_stdout_plain_script(name):
    # the same for a plain script (lang's stdio sink, no session): every byte, in order
    d = os.path.join(TMP, "nonblock_plain")
    want = make_inputs(d, 1, [100_000, 1_000_000, 1_000_000])[0]
    path = script('DIR = argv[1]\nfor line in lines(DIR + "/in0.txt") {\n'
                  '  if startswith(line, "O") { print(line[1:]) } else { eprint(line[1:]) }\n}\n',
                  "plain_nonblock.nbl")
    rc, out, err = run_nonblocking([NABLA, path, d])
    why = None if rc == 0 else f"rc {rc}: {err[-600:]!r}"
    for stream, raw in (("O", out), ("E", err)):
        expect = "".join(t + "\n" for st, t in want if st == stream).encode()
        if not why and raw != expect:
            why = f"stream {stream}: {len(raw)} bytes, expected {len(expect)} (first difference at byte " \
                  f"{next((i for i, (a, b) in enumerate(zip(raw, expect)) if a != b), min(len(raw), len(expect)))})"
    report(name, why is None, why)


@test
def test_session_long_lines(name):
    d = os.path.join(TMP, "sess")
    want = make_inputs(d, 4, SIZES)
    one_line = PRINTER.replace("\n", " ")
    path = script(f"""import dist
dist.start(4)
dist.push(DIR="{d}")
dist.exec('{one_line}')
dist.stop()
""", "relay_sess.nbl")
    p = subprocess.run([NABLA, path], capture_output=True, timeout=300)
    sanitizer_check(p.stderr.decode("utf-8", "replace"))
    check_all(name, p, want, 4)


@test
def test_repl_all_cell(name):
    # the REPL's %%all runs the cell on every rank through the same relay
    d = os.path.join(TMP, "repl")
    want = make_inputs(d, 3, [10_000, 100_000, 100_000])
    src = f'import dist\ndist.start(3)\ndist.push(DIR="{d}")\n%%all\n{PRINTER}\n\ndist.stop()\n'
    p = subprocess.run([NABLA], input=src.encode(), capture_output=True, timeout=300, env=dict(os.environ, NO_COLOR="1"))
    sanitizer_check(p.stderr.decode("utf-8", "replace"))
    check_all(name, p, want, 3)


@test
def test_partial_line_and_death(name):
    # rank 2 leaves a line open (over the bound: a piece goes out before it dies) and is killed;
    # the others print long lines meanwhile
    d = os.path.join(TMP, "death")
    want = make_inputs(d, 4, [10_000, 100_000])
    partial = text(100_000)
    with open(os.path.join(d, "partial.txt"), "w", encoding="utf-8") as f:
        f.write(partial)
    ready = os.path.join(d, "ready")
    path = script(f"""import dist
DIR = argv[1]
if dist.rank() == 2 {{
  write(read_text(DIR + "/partial.txt"))
  write_text(DIR + "/ready", "1")
  while true {{ }}
}}
{PRINTER}
write_text(DIR + "/done" + str(dist.rank()), "1")
""", "relay_death.nbl")
    p = subprocess.Popen([NABLA, "run", "-n", "4", path, d], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # both streams are read as they come, so the kill can wait until the
    # others' lines have been relayed (a fixed pause was too short under load)
    got = {"O": bytearray(), "E": bytearray()}
    def pump(stream, key):
        for chunk in iter(lambda: stream.read1(1 << 16), b""):
            got[key] += chunk
    pumps = [threading.Thread(target=pump, args=(p.stdout, "O"), daemon=True),
             threading.Thread(target=pump, args=(p.stderr, "E"), daemon=True)]
    for th in pumps:
        th.start()
    def relayed_all():
        for key in ("O", "E"):
            raw = bytes(got[key])
            have = relayed(raw[:raw.rfind(b"\n") + 1].decode("utf-8", "replace"))   # whole lines only
            if any(have.get(r, []) != [t for s, t in want[r] if s == key] for r in (0, 1, 3)):
                return False
        return True
    t = time.time()
    flags = [ready] + [os.path.join(d, f"done{r}") for r in (0, 1, 3)]
    while not (all(os.path.exists(f) for f in flags) and relayed_all()) and time.time() - t < 120:
        time.sleep(0.05)
    time.sleep(0.2)   # rank 2's piece is on its way
    victim = None
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if ppid == p.pid and b"worker" in args and args[args.index(b"--rank") + 1] == b"2":
            victim = int(pid)
    if victim:
        os.kill(victim, signal.SIGKILL)
    p.wait(timeout=120)
    for th in pumps:
        th.join(timeout=60)
    out, err = bytes(got["O"]), bytes(got["E"])
    sanitizer_check(err.decode("utf-8", "replace"))
    want[2] = [("O", partial)]
    why = None if victim else "rank 2's worker was not found"
    why = why or (None if p.returncode == 128 + signal.SIGKILL else f"rc {p.returncode}, want {128 + signal.SIGKILL}: {err[-400:]!r}")
    # the others were done printing, then their end-of-script barrier failed: their reports follow their lines
    why = why or check_stream(out, want, "O", 4) or check_stream(err, want, "E", 4, then_reports=True)
    report(name, why is None, why)


WHY = None
try:
    from hosts import started  # noqa: E402
    C, WHY = started(3)
except Exception as e:  # noqa
    C, WHY = None, f"no simulated hosts: {e}"


@test
@needs(WHY)
def test_ssh_long_lines(name):
    # ssh launchers used to share the session's stdout and made it non-blocking: output was lost and spliced
    d = os.path.join(TMP, "ssh")
    want = make_inputs(d, 6, SIZES)
    path = script("import dist\nDIR = argv[1]\n" + PRINTER + "\n", "relay_ssh.nbl")
    p = C.popen(0, [NABLA, "run", "-n", "6", "--launcher", "ssh", "--hosts", ",".join(C.names), *C.ssh_args(),
                    "--connect-timeout", "3", path, d], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout, p.stderr = p.communicate(timeout=300)
    sanitizer_check(p.stderr.decode("utf-8", "replace"))
    check_all(name, p, want, 6)


dutil.finish()
