// scan.cu — the op "scan" of tensor/index/scan.c on the GPU: cumsum, cumprod,
// logcumsumexp, cummax/cummin (and the suffix sums of their gradients) as ONE
// launch per call.  Same nt_KernelArgs layout as the CPU kernel: in = {x
// [outer, n, inner] contiguous, indices i64 (MAX/MIN only, written)}, out = y,
// iarg = {outer, n, inner, kind, reverse}; a "row" is (o, 0..n-1, j),
// r = o*inner + j, element i at (o*n + i)*inner + j.
//
// The combine steps are tensor/index/scanmath.h's (shared with the CPU, so
// NaN, infinities and the last-extreme tie rule cannot drift apart).  The op
// is a template parameter: a State (the accumulator, or a (value, index) pair
// for max/min) with an identity and an associative op(earlier, later).
// f16/bf16 accumulate in f32 (rounded once, at the store), f64 in f64.
//
// Geometry:
//   scan_cols: one thread per row walking the axis — short rows, or many
//              strided columns (inner > 1: loads coalesced across j);
//   scan_rows: one block per row, tiles of kThreads elements, a block-wide
//              cub::BlockScan with the op, and a running carry across tiles.
// A single very long row therefore runs in one block (n / 256 tiles in
// sequence); a decoupled look-back scan across blocks would spread it.
// Sums: scan_cols adds in torch's sequential order (bit-equal to the CPU);
// scan_rows' tree within a tile rounds differently (scan.c's tolerance note).
#include "common.cuh"
#include "tensor/index/scanmath.h"
#include <cub/block/block_scan.cuh>
#include <type_traits>

namespace ncu {
namespace {

int op_scan = -1;

#define GRID_LOOP(e, total) for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (total); e += (int64_t)gridDim.x * blockDim.x)

// scanmath.h by accumulation type
__device__ inline float lse(float a, float b) { return nt_sc_lse_f(a, b); }
__device__ inline double lse(double a, double b) { return nt_sc_lse_d(a, b); }
__device__ inline bool take(float a, float b, bool mx) { return nt_sc_take_f(a, b, mx); }
__device__ inline bool take(double a, double b, bool mx) { return nt_sc_take_d(a, b, mx); }
__device__ inline bool take(int64_t a, int64_t b, bool mx) { return nt_sc_take_i(a, b, mx); }
template <typename A> __device__ inline A lowest() { return (A)-INFINITY; }
template <> __device__ inline int64_t lowest<int64_t>() { return INT64_MIN; }
template <typename A> __device__ inline A highest() { return (A)INFINITY; }
template <> __device__ inline int64_t highest<int64_t>() { return INT64_MAX; }

// sum / prod / logaddexp over the accumulation type A
template <typename A, int K>
struct FoldOp {
  typedef A State;
  static constexpr bool kIndex = false;
  __device__ static State identity() { return K == NT_SCAN_PROD ? (A)1 : K == NT_SCAN_SUM ? (A)0 : lowest<A>(); }
  __device__ static State make(A v, int64_t) { return v; }
  __device__ static A value(State s) { return s; }
  __device__ static int64_t index(State) { return -1; }
  __device__ State operator()(State a, State b) const {
    if constexpr (K == NT_SCAN_SUM) return a + b;
    else if constexpr (K == NT_SCAN_PROD) return a * b;
    else return lse(a, b);
  }
};

// cummax / cummin: (value, index) pairs; index -1 is the identity (padding
// past the row's end), which never wins on either side
template <typename A> struct Pick { A v; int64_t i; };
template <typename A, bool MAX>
struct PickOp {
  typedef Pick<A> State;
  static constexpr bool kIndex = true;
  __device__ static State identity() { return State{MAX ? lowest<A>() : highest<A>(), -1}; }
  __device__ static State make(A v, int64_t i) { return State{v, i}; }
  __device__ static A value(State s) { return s.v; }
  __device__ static int64_t index(State s) { return s.i; }
  __device__ State operator()(State a, State b) const {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    return take(a.v, b.v, MAX) ? b : a;
  }
};

template <typename S, typename Op>
__global__ void scan_cols(int64_t rows, int64_t n, int64_t inner, const S *x, S *y, int64_t *ix, int rev) {
  Op op;
  GRID_LOOP(r, rows) {
    int64_t o = r / inner, j = r - o * inner, b = o * n * inner + j;
    typename Op::State acc = Op::identity();
    for (int64_t s = 0; s < n; s++) {
      int64_t i = rev ? n - 1 - s : s, e = b + i * inner;
      acc = op(acc, Op::make(ld(x[e]), i));
      y[e] = St<S>::from(Op::value(acc));
      if constexpr (Op::kIndex) ix[e] = Op::index(acc);
    }
  }
}

template <typename S, typename Op>
__global__ void scan_rows(int64_t rows, int64_t n, int64_t inner, const S *x, S *y, int64_t *ix, int rev) {
  typedef typename Op::State State;
  typedef cub::BlockScan<State, kThreads> Scan;
  __shared__ typename Scan::TempStorage tmp;
  Op op;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t o = r / inner, j = r - o * inner, b = o * n * inner + j;
    State carry = Op::identity();
    for (int64_t t0 = 0; t0 < n; t0 += kThreads) {
      int64_t s = t0 + threadIdx.x, i = rev ? n - 1 - s : s, e = b + i * inner;
      State v = s < n ? Op::make(ld(x[e]), i) : Op::identity(), incl, total;
      Scan(tmp).InclusiveScan(v, incl, op, total);
      if (s < n) {
        State out = op(carry, incl);
        y[e] = St<S>::from(Op::value(out));
        if constexpr (Op::kIndex) ix[e] = Op::index(out);
      }
      carry = op(carry, total);
      __syncthreads();                          // tmp is reused by the next tile
    }
  }
}

template <typename S, typename Op>
int launch(const nt_KernelArgs *a) {
  const int64_t outer = a->iarg[0], n = a->iarg[1], inner = a->iarg[2];
  const int rev = (int)a->iarg[4];
  const int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return 0;
  const S *x = (const S *)base(a->in[0]);
  S *y = (S *)base(a->out);
  int64_t *ix = a->nin > 1 ? (int64_t *)base(a->in[1]) : nullptr;
  if (n <= 64 || (inner > 1 && rows >= (int64_t)num_sms * 2048)) {
    scan_cols<S, Op><<<grid_for(rows), kThreads, 0, stream>>>(rows, n, inner, x, y, ix, rev);
  } else {
    unsigned blocks = (unsigned)(rows < 65535 * 16 ? rows : 65535 * 16);
    scan_rows<S, Op><<<blocks, kThreads, 0, stream>>>(rows, n, inner, x, y, ix, rev);
  }
  LAUNCHED("scan");
  return 0;
}

template <typename S>
int by_kind(const nt_KernelArgs *a) {
  typedef typename Comp<S>::type A;
  switch ((int)a->iarg[3]) {
    case NT_SCAN_SUM: return launch<S, FoldOp<A, NT_SCAN_SUM>>(a);
    case NT_SCAN_PROD: return launch<S, FoldOp<A, NT_SCAN_PROD>>(a);
    case NT_SCAN_MAX: return launch<S, PickOp<A, true>>(a);
    case NT_SCAN_MIN: return launch<S, PickOp<A, false>>(a);
    case NT_SCAN_LSE:
      if constexpr (!std::is_integral<A>::value) return launch<S, FoldOp<A, NT_SCAN_LSE>>(a);
      break;
  }
  host->error_set("scan: kind %d is not supported for %s on cuda", (int)a->iarg[3], nt_dtype_name(a->in[0]->dtype));
  return -1;
}

int k_scan(const nt_KernelArgs *a) {
  switch (a->in[0]->dtype) {
    case NT_F32: return by_kind<float>(a);
    case NT_F64: return by_kind<double>(a);
    case NT_F16: return by_kind<__half>(a);
    case NT_BF16: return by_kind<__nv_bfloat16>(a);
    case NT_I64: return by_kind<int64_t>(a);
    default: host->error_set("scan: unsupported dtype %s on cuda", nt_dtype_name(a->in[0]->dtype)); return -1;
  }
}

}  // namespace

void register_scan(void) {
  op_scan = host->op_register("scan");
  host->register_kernel(op_scan, NT_CUDA, k_scan);
}

}  // namespace ncu
