# torch.nn.LSTM forward + backward, the reference of rnn.nbl (same sizes).
import os
import time
import torch
if os.environ.get("OMP_NUM_THREADS"):
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
torch.manual_seed(0)
m = torch.nn.LSTM(256, 256, num_layers=2)
x = torch.randn(64, 32, 256)
def step():
    m.zero_grad()
    loss = m(x)[0].sum()
    loss.backward()
    return loss.item()
for i in range(3):
    step()
n = 20
t0 = time.perf_counter()
for i in range(n):
    step()
print("bench_time", time.perf_counter() - t0)
print("steps", n)
