// cub/device/device_radix_sort.cuh for the emulated device
// (cuda/emu/UNEMULATED.md): CUB's device-wide radix sort cannot run here, so
// this is a host reference implementation of the same contract — a stable
// ascending sort of (key, value) pairs by the key bits [begin_bit, end_bit),
// with CUB's two-phase temporary-storage protocol (a call with
// d_temp_storage == NULL only reports the size).  Used by the deterministic
// embedding backward (cuda/nn.cu), whose kernels around it are emulated.
#pragma once
#include <algorithm>
#include <functional>
#include <type_traits>
#include <vector>
namespace emu {
// false (and a pending fault naming `what`) unless [p, p + n) is device memory
bool device_range_ok(const void *p, size_t n, const char *what);
// api.cpp: while `stream` captures a graph, fn is recorded and run by each
// replay (true); otherwise the caller runs it now
bool capture_host_work(cudaStream_t stream, std::function<void()> fn);
}
namespace cub {
struct DeviceRadixSort {
  template <typename K, typename V, typename N>
  static cudaError_t SortPairs(void *d_temp, size_t &temp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                               V *vals_out, N num_items, int begin_bit = 0, int end_bit = (int)(sizeof(K) * 8),
                               cudaStream_t stream = 0) {
    static_assert(std::is_unsigned<K>::value, "the emulated DeviceRadixSort takes unsigned keys");
    if (!d_temp) { temp_bytes = 256; return cudaSuccess; }
    if (num_items < 0 || begin_bit < 0 || end_bit > (int)(sizeof(K) * 8) || begin_bit > end_bit) return cudaErrorInvalidValue;
    // the sort runs now, or (the stream capturing a graph) at each replay
    auto run = [=]() {
    const size_t n = (size_t)num_items;
    if (!emu::device_range_ok(keys_in, n * sizeof(K), "DeviceRadixSort keys_in") ||
        !emu::device_range_ok(keys_out, n * sizeof(K), "DeviceRadixSort keys_out") ||
        !emu::device_range_ok(vals_in, n * sizeof(V), "DeviceRadixSort values_in") ||
        !emu::device_range_ok(vals_out, n * sizeof(V), "DeviceRadixSort values_out") ||
        !emu::device_range_ok(d_temp, temp_bytes, "DeviceRadixSort temp storage"))
      return;                                   // the fault is reported at the next synchronisation
    const int w = end_bit - begin_bit;
    const K mask = w >= (int)(sizeof(K) * 8) ? (K)~(K)0 : (K)(((K)1 << w) - 1);
    auto digit = [&](K k) { return (K)((k >> begin_bit) & mask); };
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return digit(keys_in[x]) < digit(keys_in[y]); });
    std::vector<K> k(n); std::vector<V> v(n);   // keys_in may alias nothing, but be safe
    for (size_t i = 0; i < n; i++) { k[i] = keys_in[order[i]]; v[i] = vals_in[order[i]]; }
    for (size_t i = 0; i < n; i++) { keys_out[i] = k[i]; vals_out[i] = v[i]; }
    };
    if (!emu::capture_host_work(stream, run)) run();
    return cudaSuccess;
  }
};
}  // namespace cub
