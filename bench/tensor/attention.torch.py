# Twin of attention.nbl: torch's fused scaled_dot_product_attention (torch >= 2.0;
# torch 1.13 has it as F._scaled_dot_product_attention), forward + backward.
import time
import torch
import torch.nn.functional as F
torch.manual_seed(0)
q, k, v = (torch.randn(4, 8, 256, 64, requires_grad=True) for _ in range(3))
w = torch.randn(4, 8, 256, 64)
if hasattr(F, "scaled_dot_product_attention"):
    def sdpa(q, k, v): return F.scaled_dot_product_attention(q, k, v, is_causal=True)
else:
    def sdpa(q, k, v): return F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]
def step():
    torch.autograd.grad((sdpa(q, k, v) * w).sum(), [q, k, v])
n = 20
for i in range(3):
    step()
t0 = time.perf_counter()
for i in range(n):
    step()
print("bench_time", time.perf_counter() - t0)
print("steps", n)
