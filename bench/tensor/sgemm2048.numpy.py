import sys, time
import numpy as np
a = np.ones((2048, 2048), dtype=np.float32)
b = np.ones((2048, 2048), dtype=np.float32)
c = a @ b
t0 = time.perf_counter()
for r in range(3):
    c = a @ b
dt = time.perf_counter() - t0
print("bench_time", dt)
print("GFLOP/s %.1f" % (2 * 2048 ** 3 * 3 / dt / 1e9), file=sys.stderr)
print(int(c[0, 0]))
