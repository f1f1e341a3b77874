#!/usr/bin/python3
"""cpu.memory() and cpu.empty_cache() (lang/lib/ltops.c over
tensor/tcpualloc.c): the CPU allocator keeps freed big blocks (4 MiB and
more) for reuse; a program gets them back to the system on request, as
torch.cuda.empty_cache does for the GPU.

A program makes a fresh random number of big tensors of random sizes, drops
them, and reads cpu.memory(): the cache holds their bytes (in 2 MiB units),
and the resident set includes them; cpu.empty_cache() returns that many
bytes, the cache then holds 0, and the resident set drops by at least 90%
of them (not under ASan, whose allocator keeps freed memory in quarantine).
cpu(x), x.cpu() and cpu as a function value still move tensors.

Run: NABLA=build/nabla /usr/bin/python3 tests/lang/test_cpu_memory.py
NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
"""
import os
import random

from lutil import NABLA, report, finish, run

ASAN = os.environ.get("NABLA_ASAN") == "1" or "asan" in NABLA
rng = random.Random()
MIB = 1 << 20
UNIT = 2 * MIB


def round_unit(n):
    return (n + UNIT - 1) // UNIT * UNIT


sizes = [rng.randint(4 * MIB // 4, 24 * MIB // 4) for _ in range(rng.randint(3, 6))]   # f32 elements
src = f"""
fn rec(m) = join(map(list("cached", "cached_blocks", "live_big", "rss"), fn(k) str(m[k])), " ")
cpu.empty_cache()
base = cpu.memory()
ts = map(list({", ".join(map(str, sizes))}), fn(n) full(list(n), 2.0))
total = 0.0
for t in ts {{ total = total + sum(t).item() }}
t = nil
live = cpu.memory()
ts = nil
cached = cpu.memory()
released = cpu.empty_cache()
after = cpu.memory()
print("BASE", rec(base))
print("LIVE", rec(live))
print("CACHED", rec(cached))
print("RELEASED", released)
print("AFTER", rec(after))
print("TOTAL", total)
x = randn(3, 4)
print("MOVE", cpu(x).device, x.cpu().device, map(list(x), cpu)[0].device, sum(abs(cpu(x) - x)).item() == 0)
"""
rc, out, err = run(src)
got = {}
for line in out.splitlines():
    k, _, v = line.partition(" ")
    got[k] = v
try:
    keys = ("cached", "cached_blocks", "live_big", "rss")
    base, live, cached, after = (dict(zip(keys, map(int, got[k].split()))) for k in ("BASE", "LIVE", "CACHED", "AFTER"))
    released = int(got["RELEASED"])
except Exception as e:  # noqa: BLE001 - a missing line is the failure
    report("cpu_memory/runs", False, f"rc {rc} {type(e).__name__}: {e}; out {out[-600:]!r} err {err[-600:]!r}")
    finish()

want = sum(round_unit(n * 4) for n in sizes)
report("cpu_memory/runs", rc == 0 and float(got.get("TOTAL", "nan")) == 2.0 * sum(sizes), f"rc {rc} out {out[-300:]!r} err {err[-300:]!r}")
report("cpu_memory/empty_at_start", base["cached"] == 0 and base["cached_blocks"] == 0, f"base {base}")
report("cpu_memory/live_counts_big_blocks", live["live_big"] - base["live_big"] == want, f"live {live} base {base} want +{want}")
report("cpu_memory/freed_blocks_cached", cached["cached"] == want and cached["cached_blocks"] == len(sizes) and cached["live_big"] == base["live_big"],
       f"cached {cached} want {want} in {len(sizes)} blocks")
report("cpu_memory/release_returns_the_bytes", released == want, f"released {released} want {want}")
report("cpu_memory/stats_say_zero_after", after["cached"] == 0 and after["cached_blocks"] == 0, f"after {after}")
if ASAN:
    print("SKIP: cpu_memory/rss_drops: ASan's allocator keeps freed memory in quarantine")
else:
    drop = cached["rss"] - after["rss"]
    report("cpu_memory/rss_drops", drop >= 0.9 * want, f"rss {cached['rss']} -> {after['rss']}: dropped {drop}, want >= 0.9 * {want}")
report("cpu_memory/cpu_still_moves", got.get("MOVE") == "cpu cpu cpu true", f"MOVE {got.get('MOVE')!r}")
finish()
