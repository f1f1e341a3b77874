import time
import numpy as np
a = np.ones(16, dtype=np.float32)
n = 1000000
t0 = time.perf_counter()
for i in range(n):
    b = a + a
print("bench_time", time.perf_counter() - t0)
print(int(b.sum()))
