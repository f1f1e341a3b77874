import time
import numpy as np
x = np.ones(10000000, dtype=np.float32)
y = x * 2 + 1
t0 = time.perf_counter()
for r in range(10):
    y = x * 2 + 1
print("bench_time", time.perf_counter() - t0)
print(int(y.sum(dtype=np.float64)))
