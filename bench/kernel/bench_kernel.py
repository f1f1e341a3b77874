"""Kernel speed, nabla vs Debian's ipykernel (python3-ipykernel), measured with
jupyter_client in one run (a benchmark, not a test: prints, asserts nothing):
  start    KernelManager.start_kernel() -> first kernel_info_reply (median of N)
  raw      the kernel process alone: exec -> first kernel_info_reply over raw ZeroMQ
           (client reconnecting every 1 ms; jupyter_client's sockets use ZeroMQ's
           default 100 ms reconnect interval, which then dominates "start")
  execute  round trip of a trivial cell: execute_request -> execute_reply + idle
Usage: NABLA=build/nabla /usr/bin/python3 bench/kernel/bench_kernel.py [N]  (bench/run.sh runs it)"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "kernel"))
import kutil  # noqa: E402

from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
kutil.install("nabla")


def have(name):
    try:
        KernelSpecManager().get_kernel_spec(name)
        return True
    except Exception:
        return False


def start_time(name):
    times = []
    for _ in range(N):
        km = KernelManager(kernel_name=name)
        t0 = time.perf_counter()
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        while True:
            kc.kernel_info()
            try:
                kc.get_shell_msg(timeout=0.005 if time.perf_counter() - t0 < 1 else 0.05)
                break
            except Exception:
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError(f"{name}: no kernel_info_reply in 60 s")
        times.append(time.perf_counter() - t0)
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return statistics.median(times)


def raw_start(name):
    """exec the kernel's argv with a fresh connection file; time to the first kernel_info_reply."""
    import zmq
    from jupyter_client.connect import write_connection_file
    from jupyter_client.session import Session
    spec = KernelSpecManager().get_kernel_spec(name)
    times = []
    for _ in range(N):
        cf, info = write_connection_file(os.path.join(kutil.TMP, f"bench-{name}.json"), key=b"bench-key")
        argv = [a.replace("{connection_file}", cf) for a in spec.argv]
        sess = Session(key=b"bench-key")
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        # retry the refused connection every 1 ms, not ZeroMQ's default 100 ms
        # (that default dominates the jupyter_client numbers for every kernel)
        s.setsockopt(zmq.RECONNECT_IVL, 1)
        s.connect(f"tcp://127.0.0.1:{info['shell_port']}")
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1", **spec.env))
        while True:   # resend until the kernel is there to answer
            sess.send(s, "kernel_info_request", {})
            if s.poll(5 if time.perf_counter() - t0 < 1 else 50):
                sess.recv(s)
                break
            if time.perf_counter() - t0 > 60:
                raise RuntimeError(f"{name}: no kernel_info_reply")
        times.append(time.perf_counter() - t0)
        p.kill(); p.wait()
        s.close()
    return statistics.median(times)


def execute_time(name, code):
    km = KernelManager(kernel_name=name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    times = []
    for _ in range(max(N * 5, 20)):
        t0 = time.perf_counter()
        msg_id = kc.execute(code)
        kc.get_shell_msg(timeout=30)
        while True:
            m = kc.get_iopub_msg(timeout=30)
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        times.append(time.perf_counter() - t0)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return statistics.median(times)


rows = {}
kernels = [("nabla", "1 + 1")]
if have("python3"):
    kernels.append(("python3", "1 + 1"))
else:
    print("note: ipykernel (python3-ipykernel) is not installed: no comparison", flush=True)
for name, code in kernels:
    rows[name] = (start_time(name), raw_start(name), execute_time(name, code))
    s, r, e = rows[name]
    print(f"{name:8s} start (jupyter_client) {s * 1e3:8.1f} ms   raw start {r * 1e3:8.1f} ms   execute round trip {e * 1e3:7.2f} ms", flush=True)
if "python3" in rows:
    n, p = rows["nabla"], rows["python3"]
    print(f"ratios ipykernel/nabla: start {p[0] / n[0]:.1f}x   raw start {p[1] / n[1]:.1f}x   execute {p[2] / n[2]:.1f}x")
