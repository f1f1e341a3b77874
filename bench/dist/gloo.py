"""torch.distributed all_reduce with the gloo backend, 2 processes on loopback:
the reference the allreduce_*.torch.py benchmarks share."""
import os
import socket
import sys
import time

import torch
import torch.distributed as td
import torch.multiprocessing as mp


def _work(rank, port, n, iters, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    td.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.ones(n)
    td.all_reduce(x)
    td.barrier()
    t0 = time.perf_counter()
    for i in range(iters):
        y = torch.ones(n)
        td.all_reduce(y)
    dt = (time.perf_counter() - t0) / iters
    if rank == 0:
        q.put((dt, float(y[0])))
    td.destroy_process_group()


def main(n, iters):
    """All-reduces n f32 ones between 2 ranks, iters times; prints the mean time
    per call as bench_time and the reduced value (2)."""
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    ps = [ctx.Process(target=_work, args=(r, port, n, iters, q)) for r in range(2)]
    for p in ps:
        p.start()
    dt, v = q.get(timeout=120)
    for p in ps:
        p.join()
    print("bench_time", dt)
    print("bus bandwidth GB/s %.3f  latency us %.1f" % (n * 4 / dt / 1e9, dt * 1e6), file=sys.stderr)
    print(int(v))
