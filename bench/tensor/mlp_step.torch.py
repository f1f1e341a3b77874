import time
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
x = torch.randn(128, 784)
y = torch.randint(0, 10, (128,))
lossf = torch.nn.CrossEntropyLoss()
def step():
    opt.zero_grad()
    loss = lossf(model(x), y)
    loss.backward()
    opt.step()
n = 200
for i in range(10):
    step()
t0 = time.perf_counter()
for i in range(n):
    step()
print("bench_time", time.perf_counter() - t0)
print("steps", n)
