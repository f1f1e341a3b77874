import time
import torch
torch.set_num_threads(1)
a = torch.ones(16)
n = 1000000
t0 = time.perf_counter()
for i in range(n):
    b = a + a
print("bench_time", time.perf_counter() - t0)
print(int(b.sum()))
