# torch reference for fft_rfft.nbl: the same calls, f32.
import time
import torch
torch.manual_seed(0)
x = torch.randn(1048576)
y = torch.fft.rfft(x)
z = torch.fft.irfft(y, n=1048576)
t0 = time.perf_counter()
for r in range(10):
    y = torch.fft.rfft(x)
for r in range(10):
    z = torch.fft.irfft(y, n=1048576)
print("bench_time", time.perf_counter() - t0)
print(list(y.shape), list(z.shape))
