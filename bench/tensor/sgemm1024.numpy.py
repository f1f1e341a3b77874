import sys, time
import numpy as np
a = np.ones((1024, 1024), dtype=np.float32)
b = np.ones((1024, 1024), dtype=np.float32)
c = a @ b
t0 = time.perf_counter()
for r in range(10):
    c = a @ b
dt = time.perf_counter() - t0
print("bench_time", dt)
print("GFLOP/s %.1f" % (2 * 1024 ** 3 * 10 / dt / 1e9), file=sys.stderr)
print(int(c[0, 0]))
