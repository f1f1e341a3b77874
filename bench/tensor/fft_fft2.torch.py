# torch reference for fft_fft2.nbl: the same calls, c64 / f32.
import time
import torch
torch.manual_seed(0)
z = torch.complex(torch.randn(64, 256, 256), torch.randn(64, 256, 256))
x = torch.randn(64, 256, 256)
y = torch.fft.fft2(z)
w = torch.fft.rfft2(x)
t0 = time.perf_counter()
for r in range(5):
    y = torch.fft.fft2(z)
for r in range(5):
    w = torch.fft.rfft2(x)
print("bench_time", time.perf_counter() - t0)
print(list(y.shape), list(w.shape))
