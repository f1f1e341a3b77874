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
//
// ix_unique_flags / ix_unique_groups: unique and unique_consecutive without
// dim (below); one scalar read (the group count) in the front end.
// ix_unique_row_flags: the same flags for unique(dim=...) over rows (below).
//
// ix_searchsorted (out i64 [nv]; in[0] seq [R, m], in[1] values [nv], both
// f64 or both i64, contiguous; in[2] sorter i64 [R, m] or NULL; iarg[0] =
// right, iarg[1] = m, iarg[2] = per, the values per row of seq (nv for a 1-D
// seq, which every value searches)): one binary search per value for the
// first position whose element is > v (right) or >= v (left), through the
// sorter when given, with the CPU's order (NaN equal to NaN and above all).
// A sorter index outside [0, m) goes to the error slot (reported at the next
// synchronisation, as an index error) and is read as clamped meanwhile, so
// nothing reads outside seq and no count is read back.
//
// ix_histogram (out f64 [bins], zeroed; in[0] x f32/f64 contiguous [n];
// in[1] edges f64 [bins + 1] non-decreasing; in[2] weights f64 [n] or NULL):
// iarg[0] the bin rule, HIST_*): x in [e[0], e[bins]] goes to its bin by
// torch 1.13's rule (binary search over given edges; for a count of bins its
// linear guess in x's arithmetic, then a search of the edges next to it: the
// CPU's code, tensor/index/ixhistbin.h), adding its weight (or 1) by
// atomicAdd in double; NaN and values outside are dropped.
#include "common.cuh"
#include "tensor/index/ixhistbin.h"
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

// The bin in the input's own type, as torch 1.13's histc: (x - lo) / (hi - lo) * bins
// in f32 for f32 input (in f64 a value at a bin boundary can land in the other
// bin), the range converted to that type first.  hi_ is torch's last edge
// (setdev.c passes ix_histc_top: torch 1.13's linspace often puts it an ulp
// below max), so the top value is counted only where torch counts it.
template <typename T> __global__ void histc_count(const T *x, int64_t n, double *acc, int64_t bins, double lo_, double hi_) {
  const T lo = (T)lo_, hi = (T)hi_;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    T v = x[i];
    if (!(v >= lo && v <= hi)) continue;   // outside, or NaN
    int64_t b = (int64_t)((v - lo) / (hi - lo) * (T)bins);
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

// ---- unique / unique_consecutive (dim=None) ------------------------------------------------
// x flattened, sorted stably (unique) or as it is (unique_consecutive), its
// values as f64 or i64 (the CPU's comparison: NaN equals NaN, -0 equals +0).
// ix_unique_flags (out i64 [n]; in[0] v [n] f64/i64): 1 where a group starts.
template <typename T> __global__ void unique_flags(const T *v, int64_t n, int64_t *flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    bool starts = i == 0;
    if (!starts) {
      T a = v[i - 1], b = v[i];
      bool same = a == b || (a != a && b != b);   // NaN == NaN here, as the CPU's cmp_at
      starts = !same;
    }
    flag[i] = starts ? 1 : 0;
  }
}
int k_unique_flags(const nt_KernelArgs *a) {
  const char *op = "ix_unique_flags";
  int64_t n = a->in[0]->numel;
  if (n == 0) return 0;
  int64_t *flag = (int64_t *)base(a->out);
  if (a->in[0]->dtype == NT_F64) unique_flags<double><<<grid_for(n), kThreads, 0, stream>>>((const double *)base(a->in[0]), n, flag);
  else unique_flags<int64_t><<<grid_for(n), kThreads, 0, stream>>>((const int64_t *)base(a->in[0]), n, flag);
  LAUNCHED(op);
  return 0;
}

// ix_unique_groups (out first i64 [ng]; in[0] cs i64 [n], the flags'
// inclusive scan; in[1] perm i64 [n] (sorted position -> index in x) or
// NULL (identity); in[2] inverse i64 [n] or NULL, in[3] counts i64 [ng] or
// NULL, both written): sorted position i is in group g = cs[i] - 1 and
// starts it when cs[i] > cs[i - 1].  first[g] = x's index of the group's
// first element (the smallest: the sort is stable); inverse[perm[i]] = g;
// counts[g] = start[g + 1] - start[g], start[ng] = n, from the starts kept
// in scratch by the first kernel and read by the second.
__global__ void unique_groups(const int64_t *cs, const int64_t *perm, int64_t n, int64_t *first, int64_t *inverse, int64_t *start) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t g = cs[i] - 1, src = perm ? perm[i] : i;
    if (inverse) inverse[src] = g;
    if (i == 0 || cs[i - 1] != cs[i]) { first[g] = src; if (start) start[g] = i; }
  }
}
__global__ void unique_counts(const int64_t *start, int64_t ng, int64_t n, int64_t *counts) {
  for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < ng; g += (int64_t)gridDim.x * blockDim.x)
    counts[g] = (g + 1 < ng ? start[g + 1] : n) - start[g];
}
int k_unique_groups(const nt_KernelArgs *a) {
  const char *op = "ix_unique_groups";
  int64_t n = a->in[0]->numel, ng = a->out->numel;
  if (n == 0 || ng == 0) return 0;
  const int64_t *cs = (const int64_t *)base(a->in[0]), *perm = a->in[1] ? (const int64_t *)base(a->in[1]) : nullptr;
  int64_t *inverse = a->in[2] ? (int64_t *)base(a->in[2]) : nullptr, *counts = a->in[3] ? (int64_t *)base(a->in[3]) : nullptr;
  Scratch start(counts ? sizeof(int64_t) * (size_t)ng : 1);
  if (!start.p) return -1;
  unique_groups<<<grid_for(n), kThreads, 0, stream>>>(cs, perm, n, (int64_t *)base(a->out), inverse, counts ? (int64_t *)start.p : nullptr);
  LAUNCHED(op);
  if (counts) {
    unique_counts<<<grid_for(ng), kThreads, 0, stream>>>((const int64_t *)start.p, ng, n, counts);
    LAUNCHED(op);
  }
  return 0;
}

// ---- unique / unique_consecutive (dim=...) -------------------------------------------------
// ix_unique_row_flags (out i64 [n]; in[0] rows [n, w] f64/i64 contiguous:
// x moved so the unique axis is first, flattened behind it; in[1] perm i64
// [n], the rows' sorted order (sorted position -> row), or NULL (as they
// are, for unique_consecutive); iarg[0] = w): 1 where sorted position i
// starts a group, i.e. its row differs from the one before in some column
// (NaN equal to NaN, -0 to +0, as the CPU's cmp_rows).  The scan and the
// groups are ix_unique_groups' with perm.
template <typename T> __global__ void unique_row_flags(const T *rows, const int64_t *perm, int64_t n, int64_t w, int64_t *flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    bool starts = i == 0;
    if (!starts) {
      const T *a = rows + (perm ? perm[i - 1] : i - 1) * w, *b = rows + (perm ? perm[i] : i) * w;
      for (int64_t k = 0; k < w && !starts; k++) starts = !(a[k] == b[k] || (a[k] != a[k] && b[k] != b[k]));
    }
    flag[i] = starts ? 1 : 0;
  }
}
int k_unique_row_flags(const nt_KernelArgs *a) {
  const char *op = "ix_unique_row_flags";
  int64_t n = a->out->numel, w = a->iarg[0];
  if (n == 0) return 0;
  const int64_t *perm = a->in[1] ? (const int64_t *)base(a->in[1]) : nullptr;
  int64_t *flag = (int64_t *)base(a->out);
  if (a->in[0]->dtype == NT_F64) unique_row_flags<double><<<grid_for(n), kThreads, 0, stream>>>((const double *)base(a->in[0]), perm, n, w, flag);
  else unique_row_flags<int64_t><<<grid_for(n), kThreads, 0, stream>>>((const int64_t *)base(a->in[0]), perm, n, w, flag);
  LAUNCHED(op);
  return 0;
}

// ---- searchsorted ---------------------------------------------------------------------------
template <typename T>
__global__ void search_sorted(const T *seq, const T *val, const int64_t *sorter, int64_t nv, int64_t m, int64_t per, bool right,
                              int64_t *out, DevError *err, int op) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t row = i / per, lo = 0, hi = m;   // answer in [lo, hi]
    const T *s = seq + row * m;
    const int64_t *o = sorter ? sorter + row * m : nullptr;
    T v = val[i];
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2, at = mid;
      if (o) {
        at = o[mid];
        if (at < 0 || at >= m) { raise_error(err, DEVERR_INDEX, op, at, m, -1); at = at < 0 ? 0 : m - 1; }
      }
      T e = s[at];
      // e before v (left), or e before-or-equal v (right): the answer is past mid
      bool past = before(e, v) || (right && !before(v, e));
      if (past) lo = mid + 1; else hi = mid;
    }
    out[i] = lo;
  }
}
int k_searchsorted(const nt_KernelArgs *a) {
  const char *op = "ix_searchsorted";
  int64_t nv = a->out->numel, m = a->iarg[1], per = a->iarg[2] > 0 ? a->iarg[2] : 1;
  if (nv == 0) return 0;
  const int64_t *sorter = a->in[2] ? (const int64_t *)base(a->in[2]) : nullptr;
  int64_t *out = (int64_t *)base(a->out);
  bool right = a->iarg[0] != 0;
  if (a->in[0]->dtype == NT_F64)
    search_sorted<double><<<grid_for(nv), kThreads, 0, stream>>>((const double *)base(a->in[0]), (const double *)base(a->in[1]), sorter, nv, m,
                                                                 per, right, out, dev_err, a->op);
  else
    search_sorted<int64_t><<<grid_for(nv), kThreads, 0, stream>>>((const int64_t *)base(a->in[0]), (const int64_t *)base(a->in[1]), sorter, nv,
                                                                  m, per, right, out, dev_err, a->op);
  LAUNCHED(op);
  return 0;
}

// ---- histogram --------------------------------------------------------------------------------
// the bin by torch's rule (tensor/index/ixhistbin.h, the CPU's code): iarg[0] the mode
template <typename T> __global__ void histogram_count(const T *x, const double *w, int64_t n, const double *e, int64_t bins, int mode, double *acc) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = nt_hist_bin(e, bins, (double)x[i], mode);   // -1: outside, or NaN
    if (b >= 0) atomicAdd(&acc[b], w ? w[i] : 1.0);
  }
}
int k_histogram(const nt_KernelArgs *a) {
  const char *op = "ix_histogram";
  int64_t n = a->in[0]->numel, bins = a->out->numel;
  int mode = a->niarg > 0 ? (int)a->iarg[0] : HIST_BINARY;
  if (n == 0 || bins == 0) return 0;
  double *acc = (double *)base(a->out);
  const double *e = (const double *)base(a->in[1]), *w = a->in[2] ? (const double *)base(a->in[2]) : nullptr;
  if (a->in[0]->dtype == NT_F64)
    histogram_count<double><<<grid_for(n), kThreads, 0, stream>>>((const double *)base(a->in[0]), w, n, e, bins, mode, acc);
  else
    histogram_count<float><<<grid_for(n), kThreads, 0, stream>>>((const float *)base(a->in[0]), w, n, e, bins, mode, acc);
  LAUNCHED(op);
  return 0;
}

}  // namespace

void register_index(void) {
  host->register_kernel(host->op_register("ix_unique_row_flags"), NT_CUDA, k_unique_row_flags);
  host->register_kernel(host->op_register("ix_searchsorted"), NT_CUDA, k_searchsorted);
  host->register_kernel(host->op_register("ix_histogram"), NT_CUDA, k_histogram);
  host->register_kernel(host->op_register("ix_unique_flags"), NT_CUDA, k_unique_flags);
  host->register_kernel(host->op_register("ix_unique_groups"), NT_CUDA, k_unique_groups);
  host->register_kernel(host->op_register("ix_nonzero_write"), NT_CUDA, k_nonzero_write);
  host->register_kernel(host->op_register("ix_histc"), NT_CUDA, k_histc);
  host->register_kernel(host->op_register("ix_isin"), NT_CUDA, k_isin);
}

}  // namespace ncu
