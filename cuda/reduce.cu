// reduce.cu — sum prod max min any all argmax argmin on the GPU.
//
// The front end (tensor/treduce.c) passes a permuted view whose LAST iarg[0]
// axes are reduced: the input is an [M kept] x [R reduced] matrix in index
// space, with arbitrary strides.  The host coalesces the kept dims and the
// reduced dims separately (two Geoms), then picks one of:
//   * rows:    one thread block per output (grid-stride over outputs); its
//              threads stride through the R elements, then combine with warp
//              shuffles (__shfl_down_sync) and one shared-memory step.  Used when
//              the reduced block is contiguous (sum over the last axis, or all);
//   * split:   few outputs with huge R (a full reduction): the rows kernel also
//              splits R over gridDim.y blocks writing partial results, and a
//              second tiny kernel combines the partials — every input element is
//              still read exactly once;
//   * columns: the reduced axis is strided and there are many outputs (sum over
//              axis 0 of a row-major matrix): one thread per output walks R;
//              neighbouring threads read neighbouring addresses (coalesced).
// Accumulators: float for f32/f16/bf16 (as PyTorch; the CPU uses double, so
// tests compare with a tolerance), double for f64, int64 for integers/bool.
// Every accumulator carries an index too, so argmax/argmin share the code:
// the first NaN wins, then the largest (smallest) value, ties → lowest index.
#include "common.cuh"
#include <type_traits>
#include <limits>

#pragma nv_diag_suppress 186

namespace ncu {
namespace {

template <typename A> struct Acc { A v; int64_t i; };

template <typename A> __device__ inline bool isnan_(A x) { return x != x; }

template <typename A> __device__ inline Acc<A> identity(int op) {
  Acc<A> r; r.i = INT64_MAX;
  switch (op) {
    case NT_OP_PROD: case NT_OP_ALL: r.v = (A)1; break;
    case NT_OP_MAX: case NT_OP_ARGMAX:
      r.v = std::is_floating_point<A>::value ? (A)-INFINITY : std::numeric_limits<A>::lowest(); break;
    case NT_OP_MIN: case NT_OP_ARGMIN:
      r.v = std::is_floating_point<A>::value ? (A)INFINITY : std::numeric_limits<A>::max(); break;
    default: r.v = (A)0;
  }
  return r;
}

template <typename A> __device__ inline Acc<A> combine(int op, Acc<A> a, Acc<A> b) {
  switch (op) {
    case NT_OP_SUM: a.v += b.v; return a;
    case NT_OP_PROD: a.v *= b.v; return a;
    case NT_OP_MAX: if (!isnan_(a.v) && (isnan_(b.v) || b.v > a.v)) a.v = b.v; return a;
    case NT_OP_MIN: if (!isnan_(a.v) && (isnan_(b.v) || b.v < a.v)) a.v = b.v; return a;
    case NT_OP_ANY: a.v = (a.v != 0 || b.v != 0); return a;
    case NT_OP_ALL: a.v = (a.v != 0 && b.v != 0); return a;
    case NT_OP_ARGMAX: case NT_OP_ARGMIN: {
      bool take;
      if (isnan_(a.v)) take = isnan_(b.v) && b.i < a.i;
      else if (isnan_(b.v)) take = true;
      else if (b.v == a.v) take = b.i < a.i;
      else take = op == NT_OP_ARGMAX ? b.v > a.v : b.v < a.v;
      return take ? b : a;
    }
    default: return a;
  }
}

template <typename A> __device__ inline Acc<A> shfl_down(Acc<A> x, int d) {
  Acc<A> r;
  r.v = __shfl_down_sync(0xffffffffu, x.v, d);
  r.i = __shfl_down_sync(0xffffffffu, x.i, d);
  return r;
}

// Block-wide combine; the result is valid in thread 0.
template <typename A> __device__ inline Acc<A> block_reduce(int op, Acc<A> x) {
  __shared__ Acc<A> warp_part[32];
  for (int d = 16; d > 0; d >>= 1) x = combine(op, x, shfl_down(x, d));
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();                       // warp_part may still be read by a previous round
  if (lane == 0) warp_part[w] = x;
  __syncthreads();
  if (w == 0) {
    x = lane < nw ? warp_part[lane] : identity<A>(op);
    for (int d = 16; d > 0; d >>= 1) x = combine(op, x, shfl_down(x, d));
  }
  return x;
}

// out: the output dtype's storage (S, b8 for any/all, int64 for arg*)
template <typename S, typename A> __device__ inline void write_out(int op, void *out, int64_t m, Acc<A> r) {
  if (op == NT_OP_ARGMAX || op == NT_OP_ARGMIN) ((int64_t *)out)[m] = r.i == INT64_MAX ? 0 : r.i;
  else if (op == NT_OP_ANY || op == NT_OP_ALL) ((uint8_t *)out)[m] = r.v != 0;
  else ((S *)out)[m] = St<S>::from(r.v);
}

__device__ inline int64_t goff(const Geom &g, int64_t i) {
  return g.ndim == 1 ? i * g.stride[0][0] : g.offset_of(0, i);
}

// rows / split.  partial == NULL: write outputs; else partial[m * gridDim.y + y].
template <typename S, typename A>
__global__ void reduce_rows(int op, int64_t M, int64_t R, int64_t chunk, Geom kg, Geom rg, const S *in,
                            void *out, Acc<A> *partial) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const S *row = in + goff(kg, m);
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < R ? r0 + chunk : R;
    Acc<A> acc = identity<A>(op);
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
      Acc<A> x; x.v = (A)ld(row[goff(rg, r)]); x.i = r;
      acc = combine(op, acc, x);
    }
    acc = block_reduce(op, acc);
    if (threadIdx.x == 0) {
      if (partial) partial[m * gridDim.y + blockIdx.y] = acc;
      else write_out<S, A>(op, out, m, acc);
    }
  }
}

template <typename S, typename A>
__global__ void reduce_partials(int op, int64_t M, int nsplit, const Acc<A> *partial, void *out) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    Acc<A> acc = identity<A>(op);
    for (int s = threadIdx.x; s < nsplit; s += blockDim.x) acc = combine(op, acc, partial[m * nsplit + s]);
    acc = block_reduce(op, acc);
    if (threadIdx.x == 0) write_out<S, A>(op, out, m, acc);
  }
}

template <typename S, typename A>
__global__ void reduce_cols(int op, int64_t M, int64_t R, Geom kg, Geom rg, const S *in, void *out) {
  for (int64_t m = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; m < M; m += (int64_t)gridDim.x * blockDim.x) {
    const S *col = in + goff(kg, m);
    Acc<A> acc = identity<A>(op);
    for (int64_t r = 0; r < R; r++) {
      Acc<A> x; x.v = (A)ld(col[goff(rg, r)]); x.i = r;
      acc = combine(op, acc, x);
    }
    write_out<S, A>(op, out, m, acc);
  }
}

// coalesced single-operand geometry of dims [d0, d1) of t (row-major order kept)
Geom sub_geom(const nt_Tensor *t, int d0, int d1) {
  Geom g;
  g.nop = 1;
  int n = 0;
  for (int d = d0; d < d1; d++) {
    int64_t s = t->shape[d];
    if (s == 1) continue;
    if (n > 0 && g.stride[0][n - 1] == t->strides[d] * s) { g.shape[n - 1] *= s; g.stride[0][n - 1] = t->strides[d]; continue; }
    g.shape[n] = s; g.stride[0][n] = t->strides[d]; n++;
  }
  if (n == 0) { g.shape[0] = 1; g.stride[0][0] = 1; n = 1; }
  g.ndim = n;
  return g;
}

template <typename A> struct AccOf { typedef A type; };

int k_reduce(const nt_KernelArgs *a) {
  nt_Tensor *in = a->in[0], *out = a->out;
  int nr = (int)a->iarg[0], nk = in->ndim - nr, op = a->op;
  int64_t M = out->numel, R = 1;
  for (int d = nk; d < in->ndim; d++) R *= in->shape[d];
  if (M == 0) return 0;
  const char *name = host->op_name(op);
  Geom kg = sub_geom(in, 0, nk), rg = sub_geom(in, nk, in->ndim);
  bool red_inner = rg.ndim == 1 && (rg.stride[0][0] == 1 || rg.shape[0] == 1);
  auto run = [&]<typename S>() -> int {
    typedef typename std::conditional<std::is_floating_point<typename Comp<S>::type>::value,
                                      typename Comp<S>::type, int64_t>::type A;
    const S *pin = (const S *)base(in);
    void *pout = base(out);
    if (!red_inner && M >= 1024) {
      reduce_cols<S, A><<<grid_for(M), kThreads, 0, stream>>>(op, M, R, kg, rg, pin, pout);
      LAUNCHED(name);
      return 0;
    }
    // split R over several blocks when there are too few outputs to fill the GPU
    int64_t want_blocks = (int64_t)num_sms * 4;
    int nsplit = 1;
    if (M < want_blocks && R >= 16384) {
      int64_t s = (want_blocks + M - 1) / M, by_size = R / 4096;
      nsplit = (int)(s < by_size ? s : by_size);
      if (nsplit > 65535) nsplit = 65535;
      if (nsplit < 1) nsplit = 1;
    }
    int64_t chunk = (R + nsplit - 1) / nsplit;
    int64_t gx = M < 65535 * 16 ? M : 65535 * 16;
    if (gx > 2147483647) gx = 2147483647;
    dim3 grid((unsigned)gx, (unsigned)nsplit);
    if (nsplit == 1) {
      reduce_rows<S, A><<<grid, kThreads, 0, stream>>>(op, M, R > 0 ? R : 0, R > 0 ? R : 1, kg, rg, pin, pout, nullptr);
      LAUNCHED(name);
      return 0;
    }
    Scratch part((size_t)M * nsplit * sizeof(Acc<A>));
    if (!part.p) return -1;
    reduce_rows<S, A><<<grid, kThreads, 0, stream>>>(op, M, R, chunk, kg, rg, pin, pout, (Acc<A> *)part.p);
    LAUNCHED(name);
    reduce_partials<S, A><<<(unsigned)gx, kThreads, 0, stream>>>(op, M, nsplit, (const Acc<A> *)part.p, pout);
    LAUNCHED(name);
    return 0;
  };
  NCU_DISPATCH_ALL(in->dtype, run);
  host->error_set("%s: unsupported dtype on cuda", name);
  return -1;
}

}  // namespace

void register_reduce(void) {
  static const int ops[] = { NT_OP_SUM, NT_OP_PROD, NT_OP_MAX, NT_OP_MIN, NT_OP_ARGMAX, NT_OP_ARGMIN, NT_OP_ANY, NT_OP_ALL };
  for (int op : ops) host->register_kernel(op, NT_CUDA, k_reduce);
}

}  // namespace ncu
