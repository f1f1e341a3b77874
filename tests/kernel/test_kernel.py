"""What jupyter_kernel_test leaves out: interrupts (message and signal), shutdown
and restart, stdin, display updates, heartbeat, stream batching, stop_on_error,
comms, user_expressions, Unicode cursor positions, history across restarts, and
malformed input on the wire (the kernel must keep serving after each).
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh."""
import json
import os
import signal
import sys
import time
import traceback
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import SLOW, result  # noqa: E402

import zmq  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402

T = 10 * SLOW   # default reply timeout

kutil.install("nabla", "message")
kutil.install("nabla-signal", "signal")


def start(name="nabla"):
    km, kc = start_new_kernel(kernel_name=name, startup_timeout=30 * SLOW)
    return km, kc


def stop(km, kc):
    try:
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=False)


def drain_iopub(kc, timeout=0.2):
    msgs = []
    while True:
        try:
            msgs.append(kc.get_iopub_msg(timeout=timeout))
        except Exception:
            return msgs


def execute(kc, code, timeout=T, **kw):
    """Runs code; returns (reply content, iopub messages of this request up to idle)."""
    msg_id = kc.execute(code, **kw)
    reply = kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=timeout)
    out = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = kc.get_iopub_msg(timeout=timeout)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
        out.append(m)
    return reply["content"], out


def value(kc, expr):
    """The text/plain execute_result of expr (or the error name)."""
    rep, out = execute(kc, expr)
    if rep["status"] != "ok":
        return "<" + rep.get("ename", "?") + ">"
    for m in out:
        if m["msg_type"] == "execute_result":
            return m["content"]["data"]["text/plain"]
    return None


def alive(kc):
    kc.kernel_info()
    rep = kc.get_shell_msg(timeout=T)
    return rep["msg_type"] == "kernel_info_reply" and rep["content"]["status"] == "ok"


def check(name, fn, *args):
    try:
        r = fn(*args)
        if r is None or r is True:
            result(name, True)
        elif isinstance(r, tuple) and r[0] == "skip":
            result(name, None, r[1])
        else:
            result(name, False, r)
    except Exception as e:
        traceback.print_exc()
        result(name, False, f"{type(e).__name__}: {e}")


# ---------------------------------------------------------------- tests
def t_start_time():
    t0 = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="nabla", startup_timeout=30 * SLOW)
    dt = time.perf_counter() - t0
    print(f"note: start_new_kernel (start + first kernel_info_reply) {dt * 1e3:.1f} ms", flush=True)
    stop(km, kc)


def interrupt_test(name):
    km, kc = start(name)
    try:
        execute(kc, "x = 41")
        msg_id = kc.execute("while true {}")
        # wait until it runs
        deadline = time.time() + T
        while time.time() < deadline:
            m = kc.get_iopub_msg(timeout=T)
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "execute_input":
                break
        time.sleep(0.2)
        t0 = time.time()
        km.interrupt_kernel()
        rep = kc.get_shell_msg(timeout=T)
        dt = time.time() - t0
        c = rep["content"]
        if c["status"] != "error" or c["ename"] != "Interrupted":
            return f"expected an Interrupted error, got {c}"
        if dt > 2 * SLOW:
            return f"interrupt took {dt:.2f}s"
        v = value(kc, "x + 1")
        if v != "42":
            return f"x + 1 after the interrupt gave {v!r}"
        return None
    finally:
        stop(km, kc)


def t_interrupt_idle_signal():
    """SIGINT while idle must not break the next cell."""
    km, kc = start("nabla-signal")
    try:
        km.interrupt_kernel()
        time.sleep(0.2)
        v = value(kc, "1 + 1")
        return None if v == "2" else f"got {v!r}"
    finally:
        stop(km, kc)


def t_shutdown():
    km, kc = start()
    try:
        pid = km.provisioner.process.pid if hasattr(km, "provisioner") else km.kernel.pid
        msg_id = kc.shutdown()
        rep = kc.get_control_msg(timeout=T) if hasattr(kc, "get_control_msg") else kc.get_shell_msg(timeout=T)
        if rep["msg_type"] != "shutdown_reply" or rep["content"]["status"] != "ok" or rep["parent_header"]["msg_id"] != msg_id:
            return f"bad shutdown reply {rep['msg_type']} {rep['content']}"
        proc = km.provisioner.process if hasattr(km, "provisioner") else km.kernel
        try:
            rc = proc.wait(timeout=5 * SLOW)
        except Exception:
            return f"kernel {pid} still running 5 s after shutdown_request"
        if rc != 0:
            return f"kernel exited with status {rc}"
        return None
    finally:
        kc.stop_channels()
        km.cleanup_resources() if hasattr(km, "cleanup_resources") else None


def t_restart():
    km, kc = start()
    try:
        execute(kc, "y = 7")
        n_before = execute(kc, "1")[0]["execution_count"]
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=30 * SLOW)
        drain_iopub(kc)
        v = value(kc, "y")
        if v != "<NameError>":
            return f"y after restart: {v!r} (expected a NameError)"
        rep, _ = execute(kc, "2")
        if rep["execution_count"] >= n_before + 1 and rep["execution_count"] != 2:
            return f"execution_count after restart is {rep['execution_count']}"
        # history of the previous session is still there, under another session number
        kc.history(hist_access_type="tail", n=100, output=False, raw=True)
        h = kc.get_shell_msg(timeout=T)["content"]["history"]
        sessions = {e[0] for e in h}
        if len(sessions) < 2 or not any(e[2] == "y = 7" for e in h):
            return f"history after restart: {h[-6:]}"
        return None
    finally:
        stop(km, kc)


def t_stdin(kc):
    for password in (False, True):
        code = 'name = input("who? ", password=true)' if password else 'name = input("who? ")'
        msg_id = kc.execute(code, allow_stdin=True)
        req = kc.get_stdin_msg(timeout=T)
        if req["msg_type"] != "input_request":
            return f"expected input_request, got {req['msg_type']}"
        if req["content"]["prompt"] != "who? " or bool(req["content"]["password"]) != password:
            return f"bad input_request {req['content']}"
        if req["parent_header"]["msg_id"] != msg_id:
            return "input_request has the wrong parent"
        kc.input("Ada Ł" if not password else "s3cret")
        rep = kc.get_shell_msg(timeout=T)
        if rep["content"]["status"] != "ok":
            return f"execute with input failed: {rep['content']}"
        v = value(kc, "name")
        want = '"Ada Ł"' if not password else '"s3cret"'
        if v not in (want, want.strip('"'), repr(want.strip('"'))):
            return f"name is {v!r}, want {want}"
    # without allow_stdin, input() raises
    rep, _ = execute(kc, 'input("x")', allow_stdin=False)
    if rep["status"] != "error":
        return f"input() without allow_stdin: {rep}"
    return None


def t_display_update(kc):
    rep, out = execute(kc, 'display(1, display_id="d1")\ndisplay(2, display_id="d1", update=true)')
    if rep["status"] != "ok":
        return ("skip", "the language's display() has no display_id/update arguments yet "
                f"({rep.get('ename')}: {rep.get('evalue')}); the sink supports them")
    types = [m["msg_type"] for m in out]
    if "update_display_data" not in types:
        return f"no update_display_data in {types}"
    upd = [m for m in out if m["msg_type"] == "update_display_data"][0]
    if upd["content"]["transient"].get("display_id") != "d1":
        return f"update without display_id: {upd['content']}"
    return None


def t_heartbeat(km):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    ci = km.get_connection_info()
    s.connect(f"{ci['transport']}://{ci['ip']}:{ci['hb_port']}")
    try:
        for i in range(3):
            payload = b"ping-%d" % i
            s.send(payload)
            if not s.poll(2000 * SLOW):
                return "no heartbeat echo within 2 s"
            if s.recv() != payload:
                return "heartbeat echoed something else"
        return None
    finally:
        s.close()


def t_stream_batching(kc):
    rep, out = execute(kc, "for i in 0..1000 { print(i) }", timeout=30 * SLOW)
    streams = [m for m in out if m["msg_type"] == "stream"]
    text = "".join(m["content"]["text"] for m in streams)
    want = "".join(f"{i}\n" for i in range(1000))
    if text != want:
        return f"stream text differs (got {len(text)} chars)"
    if len(streams) > 50:
        return f"{len(streams)} stream messages for 1000 lines"
    print(f"note: 1000 printed lines arrived in {len(streams)} stream message(s)", flush=True)
    return None


def t_stream_live(kc):
    """Output of a long cell arrives while it runs, not only at the end."""
    msg_id = kc.execute('print("start")\nt = clock()\nwhile clock() - t < 1.0 {}\nprint("end")')
    t_first = t_idle = None
    t0 = time.time()
    while time.time() - t0 < T:
        m = kc.get_iopub_msg(timeout=T)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream" and t_first is None:
            t_first = time.time()
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            t_idle = time.time()
            break
    kc.get_shell_msg(timeout=T)
    if t_first is None or t_idle is None:
        return "no stream / idle"
    if t_idle - t_first < 0.6:
        return f"first output arrived only {t_idle - t_first:.2f}s before the end of a 1 s cell"
    return None


def t_stop_on_error(kc):
    execute(kc, "z = 0")
    ids = [kc.execute('error("stop here")'), kc.execute("z = 1"), kc.execute("z = 2")]
    replies = {}
    while len(replies) < 3:
        r = kc.get_shell_msg(timeout=T)
        replies[r["parent_header"]["msg_id"]] = r["content"]["status"]
    got = [replies[i] for i in ids]
    if got != ["error", "aborted", "aborted"]:
        return f"statuses {got}"
    drain_iopub(kc)
    v = value(kc, "z")
    if v != "0":
        return f"z = {v} (an aborted cell ran)"
    # stop_on_error=False: the next cells run
    ids = [kc.execute('error("no stop")', stop_on_error=False), kc.execute("z = 3")]
    replies = {}
    while len(replies) < 2:
        r = kc.get_shell_msg(timeout=T)
        replies[r["parent_header"]["msg_id"]] = r["content"]["status"]
    if [replies[i] for i in ids] != ["error", "ok"]:
        return f"stop_on_error=False statuses {[replies[i] for i in ids]}"
    drain_iopub(kc)
    return None


def t_comms(kc):
    kc.comm_info()
    rep = kc.get_shell_msg(timeout=T)
    if rep["content"] != {"status": "ok", "comms": {}}:
        return f"comm_info_reply {rep['content']}"
    drain_iopub(kc)
    comm_id = uuid.uuid4().hex
    msg = kc.session.msg("comm_open", {"comm_id": comm_id, "target_name": "no.such.target", "data": {}})
    kc.shell_channel.send(msg)
    t0 = time.time()
    while time.time() - t0 < T:
        m = kc.get_iopub_msg(timeout=T)
        if m["msg_type"] == "comm_close":
            return None if m["content"]["comm_id"] == comm_id else f"comm_close for {m['content']}"
    return "no comm_close"


def t_user_expressions(kc):
    rep, _ = execute(kc, "q = 20", user_expressions={"a": "q + 1", "b": "no_such_name", "c": '"s"'})
    ue = rep["user_expressions"]
    if ue["a"]["status"] != "ok" or ue["a"]["data"]["text/plain"] != "21":
        return f"a: {ue['a']}"
    if ue["b"]["status"] != "error" or ue["b"]["ename"] != "NameError":
        return f"b: {ue['b']}"
    if ue["c"]["status"] != "ok":
        return f"c: {ue['c']}"
    # numbers keep their kind: an int shows as 3, a float as 3.0 (as Python)
    rep, _ = execute(kc, "f = 1.5", user_expressions={"i": "q // 7", "f": "f * 2", "d": "q / 10", "t": "tensor(0.0).sum().item()"})
    ue = rep["user_expressions"]
    got = {k: ue[k].get("data", {}).get("text/plain") for k in ("i", "f", "d", "t")}
    if got != {"i": "2", "f": "3.0", "d": "2.0", "t": "0.0"}:
        return f"number kinds: {got}"
    return None


def t_unicode_cursor(kc):
    execute(kc, "größe = 1\nprefix_ünï = 2")
    code = 'x = "€€€"; prefix_ü'
    kc.complete(code, len(code))
    c = kc.get_shell_msg(timeout=T)["content"]
    if c["matches"] != ["prefix_ünï"]:
        return f"matches {c['matches']}"
    if (c["cursor_start"], c["cursor_end"]) != (len(code) - len("prefix_ü"), len(code)):
        return f"cursor {c['cursor_start']}..{c['cursor_end']} for a {len(code)}-code-point string"
    code = "grö + 1"
    kc.complete(code, 3)
    c = kc.get_shell_msg(timeout=T)["content"]
    if c["matches"] != ["größe"] or (c["cursor_start"], c["cursor_end"]) != (0, 3):
        return f"mid-line completion {c}"
    kc.inspect('x = "€"; len', len('x = "€"; len'))
    c = kc.get_shell_msg(timeout=T)["content"]
    if not c["found"] or "len" not in c["data"]["text/plain"]:
        return f"inspect {c}"
    return None


def t_is_complete_indent(kc):
    kc.is_complete("fn f(x) {")
    c = kc.get_shell_msg(timeout=T)["content"]
    if c["status"] != "incomplete" or "indent" not in c:
        return f"{c}"
    return None


def t_unicode_output(kc):
    # invalid UTF-8 (a lone byte) becomes U+FFFD instead of breaking the message
    rep, out = execute(kc, 'print("naïve ∇")\nwrite(chr(200))\nprint("")')
    text = "".join(m["content"]["text"] for m in out if m["msg_type"] == "stream")
    if rep["status"] != "ok" or "naïve ∇\n" not in text:
        return f"{rep['status']} {text!r}"
    return None


# ---------------------------------------------------------------- bad input
def raw_socket(km, kind="shell"):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.IDENTITY, uuid.uuid4().hex.encode())
    ci = km.get_connection_info()
    s.connect(f"{ci['transport']}://{ci['ip']}:{ci[kind + '_port']}")
    return s


def signed(session, parts):
    return [b"<IDS|MSG>", session.sign(parts)] + parts if session.auth else [b"<IDS|MSG>", b""] + parts


def header(session, msg_type):
    return json.dumps({"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": session.session,
                       "username": "test", "date": "2024-01-01T00:00:00.000000Z", "version": "5.3"}).encode()


def bad_input_tests(km, kc):
    sess = kc.session
    s = raw_socket(km)
    marker = os.path.join(kutil.TMP, "must-not-exist.npy")
    cases = {
        "empty message": [b""],
        "no delimiter": [b"abc", b"def"],
        "truncated after delimiter": [b"<IDS|MSG>", b"sig", b"{}"],
        "bad signature": [b"<IDS|MSG>", b"0" * 64, header(sess, "execute_request"), b"{}", b"{}",
                          json.dumps({"code": f'save_npy("{marker}", ones([1]))', "silent": False}).encode()],
        "signature of other bytes": [b"<IDS|MSG>", sess.sign([b"x", b"y", b"z", b"w"]),
                                     header(sess, "execute_request"), b"{}", b"{}",
                                     json.dumps({"code": f'save_npy("{marker}", ones([1]))'}).encode()],
        "bad JSON header": signed(sess, [b"{not json", b"{}", b"{}", b"{}"]),
        "header is a list": signed(sess, [b"[1, 2]", b"{}", b"{}", b"{}"]),
        "content not an object": signed(sess, [header(sess, "execute_request"), b"{}", b"{}", b"42"]),
        "missing msg_type": signed(sess, [json.dumps({"msg_id": "1", "session": "s"}).encode(), b"{}", b"{}", b"{}"]),
        "msg_type not a string": signed(sess, [json.dumps({"msg_id": "1", "msg_type": 5}).encode(), b"{}", b"{}", b"{}"]),
        "invalid UTF-8 in JSON": signed(sess, [b'{"msg_id": "\xff", "msg_type": "x"}', b"{}", b"{}", b"{}"]),
        "deeply nested JSON": signed(sess, [header(sess, "kernel_info_request"), b"{}", b"{}", b'{"a":' * 100000 + b"1" + b"}" * 100000]),
    }
    for name, frames in cases.items():
        def case(frames=frames):
            s.send_multipart(frames)
            time.sleep(0.05)
            # signed requests whose header parses get an error reply (issue 12): drain it
            while s.poll(300):
                s.recv_multipart()
            if not alive(kc):
                return "kernel stopped answering"
            if km.is_alive() is False:
                return "kernel died"
            return None
        check(f"bad input: {name}", case)

    def mistyped():
        out = []
        for content in ({"code": 5}, {"silent": True}, {"code": "1", "silent": "yes"}, {"code": "1", "user_expressions": [1]}):
            s.send_multipart(signed(sess, [header(sess, "execute_request"), b"{}", b"{}", json.dumps(content).encode()]))
            if not s.poll(T * 1000):
                return f"no reply to execute_request {content}"
            frames = s.recv_multipart()
            c = json.loads(frames[-1])
            if c.get("status") != "error":
                out.append(f"{content} -> {c}")
        for mt, content in (("complete_request", {"code": 1, "cursor_pos": 0}), ("inspect_request", {"code": "x", "cursor_pos": "a"}),
                            ("is_complete_request", {}), ("history_request", {"hist_access_type": 5})):
            s.send_multipart(signed(sess, [header(sess, mt), b"{}", b"{}", json.dumps(content).encode()]))
            if not s.poll(T * 1000):
                return f"no reply to {mt} {content}"
            s.recv_multipart()
        return "; ".join(out) if out else (None if alive(kc) else "kernel stopped answering")
    check("bad input: missing/mistyped content fields get error replies", mistyped)

    def unknown():
        s.send_multipart(signed(sess, [header(sess, "frobnicate_request"), b"{}", b"{}", b"{}"]))
        if not s.poll(T * 1000):
            return "no reply to frobnicate_request"
        frames = s.recv_multipart()
        h = json.loads(frames[-4])
        if h["msg_type"] != "frobnicate_reply" or json.loads(frames[-1]).get("status") != "error":
            return f"reply {h['msg_type']} {frames[-1]!r}"
        s.send_multipart(signed(sess, [header(sess, "some_event"), b"{}", b"{}", b"{}"]))
        return None if alive(kc) else "kernel stopped answering"
    check("bad input: unknown msg_types", unknown)

    def unknown_control():
        c = raw_socket(km, "control")
        try:
            c.send_multipart(signed(sess, [header(sess, "debug_request"), b"{}", b"{}", b"{}"]))
            if not c.poll(T * 1000):
                return "no reply on control"
            c.send_multipart([b"<IDS|MSG>"])
            return None if alive(kc) else "kernel stopped answering"
        finally:
            c.close()
    check("bad input: control channel", unknown_control)

    def huge():
        big = b'{"code": "' + b"#" * (80 << 20) + b'"}'
        s.send_multipart(signed(sess, [header(sess, "execute_request"), b"{}", b"{}", big]))
        s.send_multipart([b"x"] * 5000)   # too many frames
        time.sleep(0.5 * SLOW)
        return None if alive(kc) else "kernel stopped answering"
    check("bad input: huge message (80 MiB) and 5000 frames", huge)

    def nothing_ran():
        time.sleep(0.2)
        if os.path.exists(marker):
            return "a message with a bad signature was executed"
        return None
    check("bad input: wrong signature never executes", nothing_ran)
    s.close()

    def still_works():
        v = value(kc, "40 + 2")
        return None if v == "42" else f"got {v!r}"
    check("bad input: kernel still executes afterwards", still_works)


def main():
    check("kernel start time", t_start_time)
    check("interrupt (message) of while true {}", interrupt_test, "nabla")
    check("interrupt (signal) of while true {}", interrupt_test, "nabla-signal")
    check("SIGINT while idle is harmless", t_interrupt_idle_signal)
    check("shutdown_request: reply and clean exit", t_shutdown)
    check("restart: fresh state, history kept", t_restart)
    km, kc = start()
    try:
        check("heartbeat echo", t_heartbeat, km)
        check("stdin input_request/input_reply (and password)", t_stdin, kc)
        check("update_display_data", t_display_update, kc)
        check("stream batching (1000 lines)", t_stream_batching, kc)
        check("stream output arrives while a cell runs", t_stream_live, kc)
        check("stop_on_error aborts queued cells", t_stop_on_error, kc)
        check("comm_info and comm_open to an unknown target", t_comms, kc)
        check("user_expressions", t_user_expressions, kc)
        check("complete/inspect with Unicode cursor positions", t_unicode_cursor, kc)
        check("is_complete incomplete with indent", t_is_complete_indent, kc)
        check("Unicode and invalid UTF-8 output", t_unicode_output, kc)
        bad_input_tests(km, kc)
    finally:
        stop(km, kc)
    kutil.finish()


if __name__ == "__main__":
    main()
