// index.cu — device kernels of the set/index ops whose CPU versions read
// the data on the host (tensor/index/setops.c): nonzero's coordinate write,
// histc's counting and isin's membership search.  The front end does the
// parts that are plain tensor ops on the device (the flags' inclusive scan,
// the test set's sort, dtype unification) and calls these for the rest, so
// a CUDA input never travels to the host: nonzero reads ONE scalar back
// (the count, as torch does), histc reads two only when it must find the
// data's range itself, isin none.
//
// ix_nonzero_write (out i64 [nnz, nd]; in[0] i64 [n]: the inclusive scan of
// the nonzero flags in row-major order; iarg[0] = nd, iarg[1 .. nd] = the
// input's shape): element i is nonzero iff cs[i] > cs[i - 1] (cs[-1] = 0),
// and then it is row cs[i] - 1 of the output; its coordinates are i in the
// shape's mixed radix.
//
// ix_histc (out f64 [bins], zeroed; in[0] x f32/f64 contiguous [n]; s[0] lo,
// s[1] hi, lo < hi): x in [lo, hi] goes to bin floor((x - lo) bins / (hi -
// lo)), the last bin closed; NaN and values outside are dropped.  The same
// formula in double as the CPU's, so both devices bin every value alike;
// counts accumulate by atomicAdd in double (exact below 2^53).
//
// ix_isin (out bool [n]; in[0] elements [n], in[1] the test set sorted
// ascending with NaN last, both f64 or both i64, contiguous; iarg[0] =
// invert): lower-bound binary search per element; NaN is in nothing.
#include "common.cuh"
#include <type_traits>

namespace ncu {
namespace {

struct Shape { int64_t s[NT_MAXDIM]; };   // passed by value to the kernel

__global__ void nonzero_write(const int64_t *cs, int64_t n, int64_t *out, int nd, Shape shape) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t prev = i ? cs[i - 1] : 0;
    if (cs[i] == prev) continue;
    int64_t row = cs[i] - 1, rem = i;
    for (int d = nd - 1; d >= 0; d--) { out[row * nd + d] = rem % shape.s[d]; rem /= shape.s[d]; }
  }
}

int k_nonzero_write(const nt_KernelArgs *a) {
  const char *op = "ix_nonzero_write";
  int64_t n = a->in[0]->numel;
  int nd = (int)a->iarg[0];
  if (n == 0 || a->out->numel == 0) return 0;
  Shape shape;
  for (int d = 0; d < nd; d++) shape.s[d] = a->iarg[1 + d];
  nonzero_write<<<grid_for(n), kThreads, 0, stream>>>((const int64_t *)base(a->in[0]), n, (int64_t *)base(a->out), nd, shape);
  LAUNCHED(op);
  return 0;
}

template <typename T> __global__ void histc_count(const T *x, int64_t n, double *acc, int64_t bins, double lo, double hi) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    double v = (double)x[i];
    if (!(v >= lo && v <= hi)) continue;   // outside, or NaN
    int64_t b = (int64_t)((v - lo) * (double)bins / (hi - lo));
    atomicAdd(&acc[b >= bins ? bins - 1 : b], 1.0);
  }
}

int k_histc(const nt_KernelArgs *a) {
  const char *op = "ix_histc";
  int64_t n = a->in[0]->numel, bins = a->out->numel;
  if (n == 0 || bins == 0) return 0;
  double *acc = (double *)base(a->out);
  if (a->in[0]->dtype == NT_F64)
    histc_count<double><<<grid_for(n), kThreads, 0, stream>>>((const double *)base(a->in[0]), n, acc, bins, a->s[0], a->s[1]);
  else
    histc_count<float><<<grid_for(n), kThreads, 0, stream>>>((const float *)base(a->in[0]), n, acc, bins, a->s[0], a->s[1]);
  LAUNCHED(op);
  return 0;
}

// a < b with NaN above everything (the sort's order); integers compare exactly
template <typename T> __device__ inline bool before(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    if (b != b) return a == a;             // b NaN: every non-NaN a is before it
    return a < b;                          // a NaN: never before
  } else {
    return a < b;
  }
}
template <typename T> __global__ void isin_search(const T *e, int64_t n, const T *t, int64_t m, uint8_t *out, bool invert) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    T v = e[i];
    int64_t lo = 0, hi = m;                // first t[k] not before v
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (before(t[mid], v)) lo = mid + 1; else hi = mid;
    }
    bool in = lo < m && t[lo] == v;        // NaN == NaN is false: NaN is in nothing
    out[i] = in != invert ? 1 : 0;
  }
}

int k_isin(const nt_KernelArgs *a) {
  const char *op = "ix_isin";
  int64_t n = a->in[0]->numel, m = a->in[1]->numel;
  if (n == 0) return 0;
  uint8_t *out = (uint8_t *)base(a->out);
  bool inv = a->iarg[0] != 0;
  if (a->in[0]->dtype == NT_F64)
    isin_search<double><<<grid_for(n), kThreads, 0, stream>>>((const double *)base(a->in[0]), n, (const double *)base(a->in[1]), m, out, inv);
  else
    isin_search<int64_t><<<grid_for(n), kThreads, 0, stream>>>((const int64_t *)base(a->in[0]), n, (const int64_t *)base(a->in[1]), m, out, inv);
  LAUNCHED(op);
  return 0;
}

}  // namespace

void register_index(void) {
  host->register_kernel(host->op_register("ix_nonzero_write"), NT_CUDA, k_nonzero_write);
  host->register_kernel(host->op_register("ix_histc"), NT_CUDA, k_histc);
  host->register_kernel(host->op_register("ix_isin"), NT_CUDA, k_isin);
}

}  // namespace ncu
