# torch.distributed all_reduce with the gloo backend, 2 processes on loopback.
import os, sys, time
import torch
import torch.distributed as td
import torch.multiprocessing as mp

def work(rank, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(29500 + os.getpid() % 1000 if rank < 0 else port)
    td.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.ones(16777216)
    td.all_reduce(x)
    td.barrier()
    t0 = time.perf_counter()
    for i in range(5):
        y = torch.ones(16777216)
        td.all_reduce(y)
    dt = (time.perf_counter() - t0) / 5
    if rank == 0:
        q.put((dt, float(y[0])))
    td.destroy_process_group()

if __name__ == "__main__":
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    ps = [ctx.Process(target=work, args=(r, q)) for r in range(2)]
    for p in ps: p.start()
    dt, v = q.get(timeout=120)
    for p in ps: p.join()
    print("bench_time", dt)
    print("bus bandwidth GB/s %.3f  latency us %.1f" % (16777216 * 4 / dt / 1e9, dt * 1e6), file=sys.stderr)
    print(int(v))
