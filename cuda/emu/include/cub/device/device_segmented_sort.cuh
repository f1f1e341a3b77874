// cub/device/device_segmented_sort.cuh for the emulated device
// (cuda/emu/UNEMULATED.md): CUB's device-wide sort cannot run here, so this is
// a host reference implementation of the same contract — a stable ascending
// sort of each segment [begin[i], end[i]) of (key, value) pairs, in stream
// order, with CUB's two-phase temporary-storage protocol (a call with
// d_temp_storage == NULL only reports the size).  The kernels around it (key
// preparation, top-k selection) are emulated as usual.
#pragma once
#include <algorithm>
#include <functional>
#include <vector>
namespace emu {
// false (and a pending fault naming `what`) unless [p, p + n) is device memory
bool device_range_ok(const void *p, size_t n, const char *what);
// api.cpp: while `stream` captures a graph, fn is recorded and run by each
// replay (true); otherwise the caller runs it now
bool capture_host_work(cudaStream_t stream, std::function<void()> fn);
}
namespace cub {
struct DeviceSegmentedSort {
  template <typename K, typename V, typename BeginIt, typename EndIt, typename N, typename S>
  static cudaError_t StableSortPairs(void *d_temp, size_t &temp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                                     V *vals_out, N num_items, S num_segments, BeginIt begin, EndIt end,
                                     cudaStream_t stream = 0) {
    if (!d_temp) { temp_bytes = 256; return cudaSuccess; }
    if (num_items < 0 || num_segments < 0) return cudaErrorInvalidValue;
    // the sort runs now, or (the stream capturing a graph) at each replay
    auto run = [=]() {
    const size_t n = (size_t)num_items;
    if (!emu::device_range_ok(keys_in, n * sizeof(K), "DeviceSegmentedSort keys_in") ||
        !emu::device_range_ok(keys_out, n * sizeof(K), "DeviceSegmentedSort keys_out") ||
        !emu::device_range_ok(vals_in, n * sizeof(V), "DeviceSegmentedSort values_in") ||
        !emu::device_range_ok(vals_out, n * sizeof(V), "DeviceSegmentedSort values_out") ||
        !emu::device_range_ok(d_temp, temp_bytes, "DeviceSegmentedSort temp storage"))
      return;                                   // the fault is reported at the next synchronisation
    std::vector<size_t> order;
    for (S s = 0; s < num_segments; s++) {
      long long b = (long long)begin[s], e = (long long)end[s];
      if (b < 0 || e > (long long)n || b > e) continue;   // CUB: undefined; nothing is written
      order.resize((size_t)(e - b));
      for (size_t i = 0; i < order.size(); i++) order[i] = (size_t)b + i;
      std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return keys_in[x] < keys_in[y]; });
      for (size_t i = 0; i < order.size(); i++) { keys_out[b + i] = keys_in[order[i]]; vals_out[b + i] = vals_in[order[i]]; }
    }
    };
    if (!emu::capture_host_work(stream, run)) run();
    return cudaSuccess;
  }
};
}  // namespace cub
