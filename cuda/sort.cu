// sort.cu — sort / argsort / topk and one_hot on the GPU (cumsum: scan.cu).  Same op
// names and nt_KernelArgs layouts as the CPU kernels (tensor/nn/sort.c,
// tensor/nn/index.c); a contiguous x is viewed as [outer, n, inner] and a
// "row" is (o, 0..n-1, j), r = o*inner + j.
//
// sort (iarg = {outer, n, inner, k, desc}; out = values [outer, k, inner] or
// NULL; in = {x, indices i64 [outer, k, inner] (written)}):
//   1. make_keys: rows made contiguous, each element mapped to an unsigned
//      radix key whose unsigned order is the CPU's order: floats by the usual
//      sign-flip (-0 first canonicalised to +0, since the CPU sees them equal),
//      EVERY NaN to the largest key (NaN last, like NumPy); signed ints by
//      flipping the sign bit.  Descending sorts the complemented key ascending:
//      NaN first (like torch), and equal keys stay equal, so ties keep their
//      original order in both directions — exactly the CPU's stable merge sort.
//   2. cub::DeviceSegmentedSort::StableSortPairs of (key, index in row), one
//      segment per row, rows in chunks of <= 2^28 elements (temp from Scratch);
//   3. write_topk: the first k of each row, values gathered from x by index.
// one_hot (iarg = {C}; in = {idx i64 [m]}; out i64 [m, C]): one thread per
// output element; an index outside [0, C) (the front end checks first) goes
// to the error slot.
#include "common.cuh"
#include <cub/device/device_segmented_sort.cuh>

namespace ncu {
namespace {

struct SortOps { int sort, one_hot; };
SortOps ids;

#define GRID_LOOP(e, total) for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (total); e += (int64_t)gridDim.x * blockDim.x)

// ---- order-preserving radix keys -------------------------------------------------------------
template <typename S> struct Radix;
template <> struct Radix<float> {
  typedef uint32_t K;
  __device__ static K key(float v) {
    if (v != v) return 0xffffffffu;
    if (v == 0.0f) v = 0.0f;                    // -0 == +0
    K u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
};
template <> struct Radix<double> {
  typedef uint64_t K;
  __device__ static K key(double v) {
    if (v != v) return ~0ull;
    if (v == 0.0) v = 0.0;
    K u = (K)__double_as_longlong(v);
    return (u >> 63) ? ~u : (u | (1ull << 63));
  }
};
template <> struct Radix<int32_t> {
  typedef uint32_t K;
  __device__ static K key(int32_t v) { return (uint32_t)v ^ 0x80000000u; }
};
template <> struct Radix<int64_t> {
  typedef uint64_t K;
  __device__ static K key(int64_t v) { return (uint64_t)v ^ (1ull << 63); }
};
template <> struct Radix<uint8_t> {             // u8 and bool (0/1)
  typedef uint8_t K;
  __device__ static K key(uint8_t v) { return v; }
};

// rows [row0, row0 + nrows): keys/idx [nrows, n] (row-contiguous), offsets [nrows + 1]
template <typename S>
__global__ void make_keys(const S *x, typename Radix<S>::K *keys, int *idx, int *offsets, int64_t row0, int64_t nrows,
                          int64_t n, int64_t inner, int desc) {
  int64_t total = nrows * n;
  GRID_LOOP(e, total) {
    int64_t rr = e / n, i = e - rr * n, r = row0 + rr, o = r / inner, j = r - o * inner;
    typename Radix<S>::K k = Radix<S>::key(x[(o * n + i) * inner + j]);
    keys[e] = desc ? (typename Radix<S>::K)~k : k;
    idx[e] = (int)i;
  }
  GRID_LOOP(s, nrows + 1) offsets[s] = (int)(s * n);
}

// the first k sorted entries of each row → values (gathered from x) and i64 indices, [outer, k, inner]
template <typename E>
__global__ void write_topk(const E *x, const int *sidx, E *vals, int64_t *inds, int64_t row0, int64_t nrows, int64_t n,
                           int64_t inner, int64_t k) {
  int64_t total = nrows * k;
  GRID_LOOP(e, total) {
    int64_t rr = e / k, i = e - rr * k, r = row0 + rr, o = r / inner, j = r - o * inner;
    int64_t src = sidx[rr * n + i], dst = (o * k + i) * inner + j;
    inds[dst] = src;
    if (vals) vals[dst] = x[(o * n + src) * inner + j];
  }
}

template <typename S>
int sort_rows(const nt_KernelArgs *a) {
  typedef typename Radix<S>::K K;
  const int64_t outer = a->iarg[0], n = a->iarg[1], inner = a->iarg[2], k = a->iarg[3];
  const int desc = (int)a->iarg[4];
  const int64_t rows = outer * inner;
  if (rows == 0 || k == 0) return 0;
  if (n > INT32_MAX) {
    host->error_set("sort: rows of 2^31 and more elements are not supported on cuda (got %lld)", (long long)n);
    return -1;
  }
  const int64_t cap = (int64_t)1 << 28;
  int64_t chunk_rows = n >= cap ? 1 : cap / n;
  if (chunk_rows > rows) chunk_rows = rows;
  const int64_t items = chunk_rows * n;
  // keys in/out, indices in/out, offsets — one scratch buffer, each part 256-byte aligned
  auto up = [](size_t b) { return (b + 255) & ~(size_t)255; };
  size_t kb = up((size_t)items * sizeof(K)), ib = up((size_t)items * sizeof(int)), ob = up((size_t)(chunk_rows + 1) * sizeof(int));
  Scratch buf(2 * kb + 2 * ib + ob);
  if (!buf.p) return -1;
  char *p = (char *)buf.p;
  K *keys_in = (K *)p, *keys_out = (K *)(p + kb);
  int *idx_in = (int *)(p + 2 * kb), *idx_out = (int *)(p + 2 * kb + ib), *offsets = (int *)(p + 2 * kb + 2 * ib);
  const S *x = (const S *)base(a->in[0]);
  S *vals = a->out ? (S *)base(a->out) : nullptr;
  int64_t *inds = (int64_t *)base(a->in[1]);
  for (int64_t row0 = 0; row0 < rows; row0 += chunk_rows) {
    int64_t nr = rows - row0 < chunk_rows ? rows - row0 : chunk_rows, m = nr * n;
    make_keys<S><<<grid_for(m + nr + 1), kThreads, 0, stream>>>(x, keys_in, idx_in, offsets, row0, nr, n, inner, desc);
    LAUNCHED("sort");
    size_t temp_bytes = 0;
    CU(cub::DeviceSegmentedSort::StableSortPairs(nullptr, temp_bytes, keys_in, keys_out, idx_in, idx_out, m, nr, offsets,
                                                 offsets + 1, stream));
    Scratch temp(temp_bytes);
    if (!temp.p) return -1;
    CU(cub::DeviceSegmentedSort::StableSortPairs(temp.p, temp_bytes, keys_in, keys_out, idx_in, idx_out, m, nr, offsets,
                                                 offsets + 1, stream));
    LAUNCHED("sort");
    write_topk<S><<<grid_for(nr * k), kThreads, 0, stream>>>(x, idx_out, vals, inds, row0, nr, n, inner, k);
    LAUNCHED("sort");
  }
  return 0;
}

// ---- one_hot ------------------------------------------------------------------------------------
__global__ void one_hot_kernel(const int64_t *ix, int64_t *out, int64_t m, int64_t C, DevError *err, int op) {
  int64_t total = m * C;
  GRID_LOOP(e, total) {
    int64_t i = e / C, c = e - i * C, v = ix[i];
    if (v < 0 || v >= C) {
      if (c == 0) raise_error(err, DEVERR_INDEX, op, v, C, -1);
      out[e] = 0;
      continue;
    }
    out[e] = v == c;
  }
}

int k_sort(const nt_KernelArgs *a) {
  nt_DType dt = a->in[0]->dtype;
  switch (dt) {
    case NT_F32: return sort_rows<float>(a);
    case NT_F64: return sort_rows<double>(a);
    case NT_I32: return sort_rows<int32_t>(a);
    case NT_I64: return sort_rows<int64_t>(a);
    case NT_U8: case NT_BOOL: return sort_rows<uint8_t>(a);
    default: host->error_set("sort: unsupported dtype %s on cuda", nt_dtype_name(dt)); return -1;
  }
}

int k_one_hot(const nt_KernelArgs *a) {
  int64_t C = a->iarg[0], m = a->in[0]->numel, total = m * C;
  if (total == 0) return 0;
  one_hot_kernel<<<grid_for(total), kThreads, 0, stream>>>((const int64_t *)base(a->in[0]), (int64_t *)base(a->out), m, C,
                                                           dev_err, a->op);
  LAUNCHED("one_hot");
  return 0;
}

}  // namespace

void register_sort(void) {
  ids.sort = host->op_register("sort");
  ids.one_hot = host->op_register("one_hot");
  host->register_kernel(ids.sort, NT_CUDA, k_sort);
  host->register_kernel(ids.one_hot, NT_CUDA, k_one_hot);
}

}  // namespace ncu
