# numpy reference for mask_pow.nbl: the same expressions, op by op.
import time
import numpy as np
x = np.random.default_rng(0).standard_normal(10000000, dtype=np.float32)
y = (x > 0) * x + (x <= -1) * np.float32(0.5)
t0 = time.perf_counter()
for r in range(10):
    y = (x > 0) * x + (x <= -1) * np.float32(0.5)
for r in range(10):
    z = np.abs(x) ** np.float32(1.5) * np.float32(2) + np.float32(1)
print("bench_time", time.perf_counter() - t0)
print(float(y.sum()) + float(z.sum()))
