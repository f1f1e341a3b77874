# torch reference for unique.nbl: the same call on 10^7 integers in [0, 10^5).
import time
import torch
torch.manual_seed(0)
x = torch.randint(0, 100000, (10000000,))
u = torch.unique(x, sorted=True, return_inverse=True, return_counts=True)
t0 = time.perf_counter()
for r in range(3):
    u = torch.unique(x, sorted=True, return_inverse=True, return_counts=True)
print("bench_time", time.perf_counter() - t0)
print(list(u[0].shape), list(u[1].shape), list(u[2].shape))
