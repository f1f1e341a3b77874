#!/usr/bin/python3
"""The kernel against hostile or odd input (Nabla issue 12, part C): replayed
signed messages, oversized unsigned frames, requests that cannot be served
(NUL in the code, over 64 MB, JSON nested too deep) still get a reply, a
kernel without a key says so, and the history file stays 0600.
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh."""
import json
import os
import stat
import subprocess
import sys
import time
import traceback
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import SLOW, result  # noqa: E402

import zmq  # noqa: E402
from jupyter_client import BlockingKernelClient  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402
from jupyter_client.session import Session  # noqa: E402

T = 10 * SLOW
kutil.install("nabla", "message")


def raw_dealer(km, port_name="shell_port"):
    info = km.get_connection_info()
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"{info['transport']}://{info['ip']}:{info[port_name]}")
    return s


def frames_for(session, msg_type, content_json, parent="{}"):
    """Signed frames of a message whose content is given as JSON text."""
    header = json.dumps(session.msg_header(msg_type), default=str).encode()
    parts = [header, parent.encode(), b"{}", content_json.encode() if isinstance(content_json, str) else content_json]
    return [b"<IDS|MSG>", session.sign(parts)] + parts, json.loads(header)["msg_id"]


def wait_reply(sock, msg_id, timeout):
    t = time.time()
    while time.time() - t < timeout:
        if sock.poll(100):
            fr = sock.recv_multipart()
            i = fr.index(b"<IDS|MSG>")
            parent = json.loads(fr[i + 3])
            if parent.get("msg_id") == msg_id:
                return json.loads(fr[i + 2]), json.loads(fr[i + 5])
    return None, None


def value_of(kc, expr):
    msg_id = kc.execute("", user_expressions={"v": expr})
    r = kc.get_shell_msg(timeout=T)
    while r["parent_header"].get("msg_id") != msg_id:
        r = kc.get_shell_msg(timeout=T)
    return r["content"]["user_expressions"]["v"].get("data", {}).get("text/plain")


def hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmHWM:"):
                return int(l.split()[1])
    return 0


def case(fn):
    name = fn.__name__[5:]
    try:
        fn(name)
    except Exception:  # noqa
        result(name, False, traceback.format_exc()[-600:])
    return fn


km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
session = Session(key=km.session.key, signature_scheme=km.session.signature_scheme)


@case
def test_replayed_execute_runs_once(name):
    kc.execute_interactive("replays = 0", timeout=T)
    s = raw_dealer(km)
    fr, msg_id = frames_for(session, "execute_request",
                            json.dumps({"code": "replays = replays + 1", "silent": False, "store_history": False}))
    s.send_multipart(fr)
    h1, c1 = wait_reply(s, msg_id, T)
    s.send_multipart(fr)   # byte for byte the same
    h2, c2 = wait_reply(s, msg_id, 1.5)
    n = value_of(kc, "replays")
    s.close()
    result(name, c1 and c1["status"] == "ok" and c2 is None and n == "1", f"first={c1} replay={c2} replays={n}")


@case
def test_nul_in_code_gets_error_reply(name):
    msg_id = kc.execute("x = 1\u0000 + 2")
    r = kc.get_shell_msg(timeout=T)
    while r["parent_header"].get("msg_id") != msg_id:
        r = kc.get_shell_msg(timeout=T)
    c = r["content"]
    msg_id = kc.complete("pri\u0000nt", 3)
    r = kc.get_shell_msg(timeout=T)
    while r["parent_header"].get("msg_id") != msg_id:
        r = kc.get_shell_msg(timeout=T)
    cc = r["content"]
    msg_id = kc.execute("", user_expressions={"a": "2\u0000 + 3"})
    r = kc.get_shell_msg(timeout=T)
    while r["parent_header"].get("msg_id") != msg_id:
        r = kc.get_shell_msg(timeout=T)
    ue = r["content"]["user_expressions"].get("a", {})
    ok = (c["status"] == "error" and "NUL" in c.get("evalue", "") and cc["status"] == "error" and "NUL" in cc.get("evalue", "")
          and ue.get("status") == "error" and "NUL" in ue.get("evalue", "") and value_of(kc, "1 + 1") == "2")
    result(name, ok, f"execute reply={c} complete reply={cc} user expression={ue}")


@case
def test_over_64mb_gets_error_reply(name):
    s = raw_dealer(km)
    code = "# " + "x" * (70 << 20)
    fr, msg_id = frames_for(session, "execute_request", json.dumps({"code": code, "silent": False}))
    s.send_multipart(fr)
    h, c = wait_reply(s, msg_id, 30 * SLOW)
    s.close()
    ok = c is not None and c["status"] == "error" and c.get("ename") == "MessageTooBig" and value_of(kc, "2 + 2") == "4"
    result(name, ok, f"reply={str(c)[:300]}")


@case
def test_deep_json_gets_error_reply(name):
    s = raw_dealer(km)
    deep = '{"code": "1", "silent": false, "user_expressions": {"a": ' + "[" * 3000 + "]" * 3000 + "}}"
    fr, msg_id = frames_for(session, "execute_request", deep)
    s.send_multipart(fr)
    h, c = wait_reply(s, msg_id, T)
    s.close()
    ok = c is not None and c["status"] == "error" and h["msg_type"] == "execute_reply" and value_of(kc, "3 + 3") == "6"
    result(name, ok, f"reply={c}")


@case
def test_huge_unsigned_frames_not_buffered(name):
    pid = km.provisioner.process.pid if hasattr(km, "provisioner") else km.kernel.pid
    before = hwm_kb(pid)
    s = raw_dealer(km)
    s.setsockopt(zmq.SNDTIMEO, 5000)
    big = b"x" * (200 << 20)
    try:
        s.send_multipart([b"<IDS|MSG>", b"00", b"{}", b"{}", b"{}"] + [big] * 6)
    except zmq.Again:
        pass
    del big
    time.sleep(2)
    grew = (hwm_kb(pid) - before) / 1024
    s.close()
    ok = grew < 300 and value_of(kc, "4 + 4") == "8"
    result(name, ok, f"kernel peak memory grew {grew:.0f} MB for six unsigned 200 MB frames")


@case
def test_replaced_identity_gets_no_replies(name):
    # a second connection with the identity of a connected client does not take its replies over
    info = km.get_connection_info()
    ctx = zmq.Context.instance()

    def dealer():
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.setsockopt(zmq.ROUTING_ID, b"client-one")
        d.connect(f"{info['transport']}://{info['ip']}:{info['shell_port']}")
        return d
    s1 = dealer()
    fr, msg_id = frames_for(session, "kernel_info_request", "{}")
    s1.send_multipart(fr)
    h, c = wait_reply(s1, msg_id, T)
    s2 = dealer()
    time.sleep(0.3)
    fr, msg_id = frames_for(session, "kernel_info_request", "{}")
    s1.send_multipart(fr)
    h1, c1 = wait_reply(s1, msg_id, T)
    got2 = s2.poll(500)
    s1.close(); s2.close()
    result(name, c is not None and c1 is not None and not got2, f"first={c is not None} second={c1 is not None} thief got={got2}")


@case
def test_history_stays_0600_when_compacted(name):
    path = os.path.join(kutil.TMP, "big-history.jsonl")
    with open(path, "w") as f:
        for i in range(20050):
            f.write(json.dumps([1, i + 1, f"x = {i}", None]) + "\n")
    os.chmod(path, 0o600)
    old_umask = os.umask(0o022)
    os.environ["NABLA_HISTORY_FILE"] = path
    try:
        km2, kc2 = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
    finally:
        os.umask(old_umask)
        os.environ["NABLA_HISTORY_FILE"] = os.path.join(kutil.TMP, "history.jsonl")
    try:
        kc2.execute_interactive("y = 1", timeout=T)
        with open(path) as f:
            lines = sum(1 for _ in f)
        mode = stat.S_IMODE(os.stat(path).st_mode)
        leftovers = [p for p in os.listdir(kutil.TMP) if p.startswith("big-history.jsonl.")]
    finally:
        kc2.stop_channels()
        km2.shutdown_kernel(now=True)
    result(name, mode == 0o600 and lines <= 10001 and not leftovers, f"mode={oct(mode)} lines={lines} leftovers={leftovers}")


@case
def test_readable_history_made_private(name):
    path = os.path.join(kutil.TMP, "open-history.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps([1, 1, "secret = 1", None]) + "\n")
    os.chmod(path, 0o644)
    os.environ["NABLA_HISTORY_FILE"] = path
    try:
        km2, kc2 = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
    finally:
        os.environ["NABLA_HISTORY_FILE"] = os.path.join(kutil.TMP, "history.jsonl")
    try:
        kc2.execute_interactive("y = 2", timeout=T)
        mode = stat.S_IMODE(os.stat(path).st_mode)
    finally:
        kc2.stop_channels()
        km2.shutdown_kernel(now=True)
    result(name, mode == 0o600, f"mode={oct(mode)}")


@case
def test_no_key_warns(name):
    conn = os.path.join(kutil.TMP, "nokey.json")
    ports = []
    for _ in range(5):
        so = __import__("socket").socket()
        so.bind(("127.0.0.1", 0))
        ports.append(so.getsockname()[1])
        so.close()
    info = {"transport": "tcp", "ip": "127.0.0.1", "shell_port": ports[0], "iopub_port": ports[1], "stdin_port": ports[2],
            "control_port": ports[3], "hb_port": ports[4], "key": "", "signature_scheme": "hmac-sha256"}
    with open(conn, "w") as f:
        json.dump(info, f)
    p = subprocess.Popen([kutil.NABLA, "kernel", "-f", conn], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kc3 = BlockingKernelClient(connection_file=conn)
    kc3.load_connection_file()
    kc3.start_channels()
    try:
        kc3.wait_for_ready(timeout=30 * SLOW)
        banner = kc3.kernel_info(reply=True, timeout=T)["content"]["banner"]
    finally:
        kc3.stop_channels()
        p.terminate()
        out, err = p.communicate(timeout=10)
    ok = "WARNING" in banner and "not authenticated" in banner and "WARNING" in err and "NOT authenticated" in err
    result(name, ok, f"banner={banner!r} stderr={err[-300:]!r}")


# ---- a client without the key cannot make the kernel hold memory (issue 33, item 2)
FLOOD_MB = 64   # what one keyless connection may make the kernel hold (docs/distributed.md, Security)


def rss_kb(pid, field="VmRSS:"):
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith(field):
                return int(l.split()[1])
    return 0


def peak_growth_mb(pid, action):
    """The kernel's peak RSS during action() above its RSS before it, in MB
    (the peak is reset first through clear_refs, so earlier cases do not hide it)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    before = rss_kb(pid)
    action()
    return (max(rss_kb(pid, "VmHWM:"), rss_kb(pid)) - before) / 1024


def flood(port_name, n=300, size=4 << 20, settle=6.0):
    """n unsigned messages of size bytes at one socket, sent as fast as the kernel
    takes them (the sender's own queue holds the rest), then up to settle seconds
    for ZeroMQ to move them (until the kernel's RSS stops growing)."""
    s = raw_dealer(km, port_name)
    s.setsockopt(zmq.SNDHWM, n + 10)
    payload = zmq.Frame(b"x" * size)
    for _ in range(n):
        try:
            s.send_multipart([b"<IDS|MSG>", b"00", b"{}", b"{}", b"{}", payload], flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            break
    t, last = time.time(), -1
    while time.time() - t < settle:
        time.sleep(0.5)
        now = rss_kb(kernel_pid())
        if now == last and time.time() - t > 2:
            break
        last = now
    return s


def kernel_pid():
    return km.provisioner.process.pid if hasattr(km, "provisioner") else km.kernel.pid


@case
def test_keyless_flood_stdin_idle(name):
    # stdin is read only inside input(): an idle kernel must not queue a stranger's messages
    socks = []
    grew = peak_growth_mb(kernel_pid(), lambda: socks.append(flood("stdin_port")))
    socks[0].close()
    ok = grew < FLOOD_MB and value_of(kc, "5 + 5") == "10"
    result(name, ok, f"kernel RSS grew {grew:.0f} MB for 300 unsigned 4 MB messages to stdin (bound {FLOOD_MB} MB)")


@case
def test_keyless_flood_shell_while_busy(name):
    # while a cell runs nobody reads shell: the queue is bounded, and the kernel serves on afterwards
    busy = kc.execute("while true {}")
    time.sleep(0.5)
    socks = []
    grew = peak_growth_mb(kernel_pid(), lambda: socks.append(flood("shell_port", n=250)))
    socks[0].close()
    km.interrupt_kernel()
    r = kc.get_shell_msg(timeout=T)
    while r["parent_header"].get("msg_id") != busy:
        r = kc.get_shell_msg(timeout=T)
    ok = grew < FLOOD_MB and value_of(kc, "6 + 6") == "12"
    result(name, ok, f"kernel RSS grew {grew:.0f} MB for 250 unsigned 4 MB messages to a busy shell (bound {FLOOD_MB} MB)")


@case
def test_keyless_iopub_subscriber_that_never_reads(name):
    # a subscriber that reads nothing while a cell prints 128 MB: its queue is bounded
    info = km.get_connection_info()
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 1)
    sub.setsockopt(zmq.RCVBUF, 4096)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"{info['transport']}://{info['ip']}:{info['iopub_port']}")
    time.sleep(0.5)

    def run():
        msg_id = kc.execute('s = "x"; for i in 0..16 { s = "{s}{s}" }; for i in 0..2048 { print(s) }')
        r = kc.get_shell_msg(timeout=120 * SLOW)
        while r["parent_header"].get("msg_id") != msg_id:
            r = kc.get_shell_msg(timeout=120 * SLOW)
    grew = peak_growth_mb(kernel_pid(), run)
    sub.close()
    alive = value_of(kc, "7 + 7") == "14"
    if kutil.ASAN:
        # ASan's quarantine keeps the freed stream messages (hundreds of MB), so
        # the RSS says nothing about ZeroMQ's queue there; the kernel must still serve
        result(name + "_alive", alive, "the kernel stopped answering")
        result(name, None, "not measured under ASan: its quarantine holds freed memory")
        return
    ok = grew < FLOOD_MB and alive
    result(name, ok, f"kernel RSS grew {grew:.0f} MB printing 128 MB to a subscriber that never reads (bound {FLOOD_MB} MB)")


kc.stop_channels()
km.shutdown_kernel(now=True)
kutil.finish()
