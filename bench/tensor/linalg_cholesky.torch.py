# torch reference for linalg_cholesky.nbl: the same calls, f32.
import time
import torch
torch.manual_seed(0)
a = torch.randn(512, 512) + 512 ** 0.5 * torch.eye(512)
b = torch.randn(512, 64)
s = a @ a.mT / 512 + torch.eye(512)
ab = torch.randn(64, 64, 64) + 8 * torch.eye(64)
bb = torch.randn(64, 64, 8)
sb = ab @ ab.mT / 64 + torch.eye(64)
x = torch.linalg.cholesky(s)
y = torch.linalg.cholesky(sb)
t0 = time.perf_counter()
for r in range(5):
    x = torch.linalg.cholesky(s)
for r in range(5):
    y = torch.linalg.cholesky(sb)
print("bench_time", time.perf_counter() - t0)
print(list(x.shape), list(y.shape))
