// reduce.cu — sum prod max min any all argmax argmin on the GPU.
//
// The front end (tensor/treduce.c) passes a permuted view whose LAST iarg[0]
// axes are reduced: the input is an [M kept] x [R reduced] matrix in index
// space, with arbitrary strides.  The host coalesces the kept dims and the
// reduced dims separately (two Geoms) and picks one of two launches, whose
// geometry is plain host code (cuda/plan.h ncp_row_plan / ncp_col_plan,
// checked at the GPT-2 shapes by tests/cuda/test_cuda_plan):
//   * rows (the reduced block is contiguous: a last-axis or full reduction):
//     a block per output row; each thread reads VEC = 16 / sizeof(S)
//     neighbouring elements with one 16-byte load into VEC independent
//     accumulators (an unaligned head and the tail element by element), then
//     warp shuffles and one shared-memory step.  Too few rows to fill the GPU
//     (a full reduction): each row is split over gridDim.y blocks writing
//     partials, and reduce_row_partials combines them.  A strided reduced
//     block with few outputs takes the same kernel, element by element;
//   * columns (the reduced axis is strided, the kept one is not: a bias
//     gradient, x[B,T,N] summed to [N]): 2-D tiles, threadIdx.x across
//     columns (VEC columns per thread, one 16-byte load when the columns are
//     contiguous and aligned), threadIdx.y down the rows, the rows split over
//     gridDim.y blocks; each block sums its tile down the rows in shared
//     memory and writes one partial per column, and reduce_col_partials sums
//     the gridDim.y partials of each column (input read once, deterministic).
// The op is a template parameter (struct Sum, Max, ArgMax, ...: init, lift,
// join), so the inner loops have no run-time switch.
// Accumulators: float for f32/f16/bf16 (as PyTorch; the CPU uses double, so
// tests compare with a tolerance), double for f64, int64 for integers/bool.
// max/min: the first NaN wins; argmax/argmin carry the index (row-major over
// the reduced dims): NaN first, then the largest (smallest), ties → lowest
// index — join is commutative, so the order of accumulation does not matter.
#include "common.cuh"
#include <type_traits>
#include <limits>

#pragma nv_diag_suppress 186

namespace ncu {
namespace {

template <typename A> __device__ inline bool isnan_(A x) { return x != x; }
template <typename A> struct Acc { A v; int64_t i; };

// ---- the ops: T the accumulator, init() its identity, lift(v, index) one
// element, join(a, b) two partial results; put() writes the result.
template <typename A> struct Sum {
  typedef A T;
  __device__ static T init() { return (A)0; }
  __device__ static T lift(A v, int64_t) { return v; }
  __device__ static T join(T a, T b) { return a + b; }
};
template <typename A> struct Prod {
  typedef A T;
  __device__ static T init() { return (A)1; }
  __device__ static T lift(A v, int64_t) { return v; }
  __device__ static T join(T a, T b) { return a * b; }
};
template <typename A> struct Max {
  typedef A T;
  __device__ static T init() { return std::is_floating_point<A>::value ? (A)-INFINITY : std::numeric_limits<A>::lowest(); }
  __device__ static T lift(A v, int64_t) { return v; }
  __device__ static T join(T a, T b) { return !isnan_(a) && (isnan_(b) || b > a) ? b : a; }
};
template <typename A> struct Min {
  typedef A T;
  __device__ static T init() { return std::is_floating_point<A>::value ? (A)INFINITY : std::numeric_limits<A>::max(); }
  __device__ static T lift(A v, int64_t) { return v; }
  __device__ static T join(T a, T b) { return !isnan_(a) && (isnan_(b) || b < a) ? b : a; }
};
template <typename A> struct Any {            // T: 0/1
  typedef int T;
  __device__ static T init() { return 0; }
  __device__ static T lift(A v, int64_t) { return v != (A)0; }
  __device__ static T join(T a, T b) { return a | b; }
};
template <typename A> struct All {
  typedef int T;
  __device__ static T init() { return 1; }
  __device__ static T lift(A v, int64_t) { return v != (A)0; }
  __device__ static T join(T a, T b) { return a & b; }
};
template <typename A, bool IsMax> struct ArgExt {
  typedef Acc<A> T;
  __device__ static T init() { T r; r.v = IsMax ? Max<A>::init() : Min<A>::init(); r.i = INT64_MAX; return r; }
  __device__ static T lift(A v, int64_t i) { T r; r.v = v; r.i = i; return r; }
  __device__ static T join(T a, T b) {
    bool take;
    if (isnan_(a.v)) take = isnan_(b.v) && b.i < a.i;
    else if (isnan_(b.v)) take = true;
    else if (b.v == a.v) take = b.i < a.i;
    else take = IsMax ? b.v > a.v : b.v < a.v;
    return take ? b : a;
  }
};

// Writes one result: the storage dtype S for sum/prod/max/min, one byte for
// any/all, the int64 index for argmax/argmin (0 for an empty row).
template <typename S, typename T> __device__ inline void put(void *out, int64_t m, T r) { ((S *)out)[m] = St<S>::from(r); }
template <typename S> __device__ inline void put(void *out, int64_t m, int r) { ((uint8_t *)out)[m] = (uint8_t)(r != 0); }
template <typename S, typename A> __device__ inline void put(void *out, int64_t m, Acc<A> r) {
  ((int64_t *)out)[m] = r.i == INT64_MAX ? 0 : r.i;
}

template <typename T> __device__ inline T shfl_down(T x, int d) { return __shfl_down_sync(0xffffffffu, x, d); }
template <typename A> __device__ inline Acc<A> shfl_down(Acc<A> x, int d) {
  Acc<A> r;
  r.v = __shfl_down_sync(0xffffffffu, x.v, d);
  r.i = __shfl_down_sync(0xffffffffu, x.i, d);
  return r;
}

// Block-wide join over a 1-D block; the result is valid in thread 0.
template <class Op> __device__ inline typename Op::T block_reduce(typename Op::T x) {
  typedef typename Op::T T;
  __shared__ T warp_part[32];
  for (int d = 16; d > 0; d >>= 1) x = Op::join(x, shfl_down(x, d));
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();                       // warp_part may still be read by a previous round
  if (lane == 0) warp_part[w] = x;
  __syncthreads();
  if (w == 0) {
    x = lane < nw ? warp_part[lane] : Op::init();
    for (int d = 16; d > 0; d >>= 1) x = Op::join(x, shfl_down(x, d));
  }
  return x;
}

__device__ inline int64_t goff(const Geom &g, int64_t i) {
  return g.ndim == 1 ? i * g.stride[0][0] : g.offset_of(0, i);
}

// VEC elements of S in one 16-byte load (the address must be 16-byte aligned).
template <typename S, int VEC> struct alignas(16) Pack { S v[VEC]; };

// ---- rows ---------------------------------------------------------------------------------------
// Block per output row m (grid-stride); blockIdx.y takes elements [y*chunk, (y+1)*chunk)
// of it.  contig: the reduced block is one unit-stride run (vector loads).
// partial == NULL: write out[m]; else partial[m * gridDim.y + y].
template <class Op, typename S, int VEC>
__global__ void reduce_rows(int64_t M, int64_t R, int64_t chunk, Geom kg, Geom rg, bool contig, const S *in, void *out,
                            typename Op::T *partial) {
  typedef typename Op::T T;
  typedef typename std::conditional<std::is_floating_point<typename Comp<S>::type>::value, typename Comp<S>::type,
                                    int64_t>::type A;
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const S *row = in + goff(kg, m);
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < R ? r0 + chunk : R;
    T acc[VEC];
    for (int j = 0; j < VEC; j++) acc[j] = Op::init();
    if (contig) {
      // head: elements before the first 16-byte boundary; body: whole packs; tail: the rest
      int64_t mis = (int64_t)(((uintptr_t)(row + r0) / sizeof(S)) % VEC);
      int64_t b0 = r0 + (mis ? VEC - mis : 0);
      if (b0 > r1) b0 = r1;
      int64_t nb = (r1 - b0) / VEC, b1 = b0 + nb * VEC;
      for (int64_t r = r0 + tid; r < b0; r += nt) acc[0] = Op::join(acc[0], Op::lift((A)ld(row[r]), r));
      for (int64_t k = tid; k < nb; k += nt) {
        int64_t r = b0 + k * VEC;
        Pack<S, VEC> p = *(const Pack<S, VEC> *)(row + r);
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] = Op::join(acc[j], Op::lift((A)ld(p.v[j]), r + j));
      }
      for (int64_t r = b1 + tid; r < r1; r += nt) acc[0] = Op::join(acc[0], Op::lift((A)ld(row[r]), r));
    } else {
      // strided: VEC independent accumulators over consecutive rounds of the block
      int64_t k = 0;
      for (int64_t r = r0 + tid; r < r1; r += nt, k++) acc[k % VEC] = Op::join(acc[k % VEC], Op::lift((A)ld(row[goff(rg, r)]), r));
    }
    for (int j = 1; j < VEC; j++) acc[0] = Op::join(acc[0], acc[j]);
    T r = block_reduce<Op>(acc[0]);
    if (tid == 0) {
      if (partial) partial[m * gridDim.y + blockIdx.y] = r;
      else put<S>(out, m, r);
    }
  }
}

template <class Op, typename S>
__global__ void reduce_row_partials(int64_t M, int nsplit, const typename Op::T *partial, void *out) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    typename Op::T acc = Op::init();
    for (int s = threadIdx.x; s < nsplit; s += blockDim.x) acc = Op::join(acc, partial[m * nsplit + s]);
    acc = block_reduce<Op>(acc);
    if (threadIdx.x == 0) put<S>(out, m, acc);
  }
}

// ---- columns ------------------------------------------------------------------------------------
// Tile: blockDim.x threads x VEC columns wide, blockDim.y threads down rows
// [y * rows, (y+1) * rows) of slice y = blockIdx.y.  vec_ok: the columns are
// one unit-stride run, every row start 16-byte aligned (one Pack per thread
// per row); else element by element through kg.  blockDim.x * blockDim.y <= 256.
// partial == NULL: write out[c]; else partial[y * M + c].
template <class Op, typename S, int VEC>
__global__ void reduce_cols(int64_t M, int64_t R, int64_t rows, Geom kg, Geom rg, bool vec_ok, const S *in, void *out,
                            typename Op::T *partial) {
  typedef typename Op::T T;
  typedef typename std::conditional<std::is_floating_point<typename Comp<S>::type>::value, typename Comp<S>::type,
                                    int64_t>::type A;
  __shared__ T tile[NCP_RED_THREADS];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < R ? r0 + rows : R;
  const int64_t width = (int64_t)bx * VEC;                  // columns of one tile
  for (int64_t t = blockIdx.x; t * width < M; t += gridDim.x) {
    const int64_t c0 = t * width + (int64_t)tx * VEC;      // this thread's first column
    T acc[VEC];
    for (int j = 0; j < VEC; j++) acc[j] = Op::init();
    if (vec_ok && c0 + VEC <= M) {
      for (int64_t r = r0 + ty; r < r1; r += by) {
        Pack<S, VEC> p = *(const Pack<S, VEC> *)(in + c0 + goff(rg, r));
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] = Op::join(acc[j], Op::lift((A)ld(p.v[j]), r));
      }
    } else {
      for (int j = 0; j < VEC; j++) {
        if (c0 + j >= M) break;
        const S *col = in + goff(kg, c0 + j);
        for (int64_t r = r0 + ty; r < r1; r += by) acc[j] = Op::join(acc[j], Op::lift((A)ld(col[goff(rg, r)]), r));
      }
    }
    // join down the rows of the tile, one column of each thread at a time
    for (int j = 0; j < VEC; j++) {
      __syncthreads();
      tile[ty * bx + tx] = acc[j];
      __syncthreads();
      for (int h = by / 2; h > 0; h /= 2) {
        if (ty < h) tile[ty * bx + tx] = Op::join(tile[ty * bx + tx], tile[(ty + h) * bx + tx]);
        __syncthreads();
      }
      if (ty == 0 && c0 + j < M) {
        if (partial) partial[(int64_t)blockIdx.y * M + c0 + j] = tile[tx];
        else put<S>(out, c0 + j, tile[tx]);
      }
    }
  }
}

// out[c] = join of partial[y * M + c] over y < ny: a thread per column (coalesced).
template <class Op, typename S>
__global__ void reduce_col_partials(int64_t M, int64_t ny, const typename Op::T *partial, void *out) {
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < M; c += (int64_t)gridDim.x * blockDim.x) {
    typename Op::T acc = Op::init();
    for (int64_t y = 0; y < ny; y++) acc = Op::join(acc, partial[y * M + c]);
    put<S>(out, c, acc);
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

// One reduction of storage dtype S with op Op (see the top of the file).
template <class Op, typename S> int launch(const char *name, int64_t M, int64_t R, const Geom &kg, const Geom &rg,
                                           const S *pin, void *pout) {
  typedef typename Op::T T;
  constexpr int VEC = 16 / (int)sizeof(S);
  const bool red_inner = rg.ndim == 1 && (rg.stride[0][0] == 1 || rg.shape[0] == 1);
  if (red_inner || M == 1) {
    ncp_RowPlan p = ncp_row_plan(M, R, red_inner ? VEC : 1, num_sms);
    dim3 grid((unsigned)p.grid_x, (unsigned)p.nsplit);
    if (p.nsplit == 1) {
      reduce_rows<Op, S, VEC><<<grid, p.threads, 0, stream>>>(M, R, R > 0 ? R : 1, kg, rg, red_inner, pin, pout, nullptr);
      LAUNCHED(name);
      return 0;
    }
    Scratch part((size_t)M * p.nsplit * sizeof(T));
    if (!part.p) return -1;
    reduce_rows<Op, S, VEC><<<grid, p.threads, 0, stream>>>(M, R, p.chunk, kg, rg, red_inner, pin, pout, (T *)part.p);
    LAUNCHED(name);
    reduce_row_partials<Op, S><<<(unsigned)p.grid_x, kThreads, 0, stream>>>(M, (int)p.nsplit, (const T *)part.p, pout);
    LAUNCHED(name);
    return 0;
  }
  // columns: vector loads when the kept dim is one unit-stride run and every
  // row start stays 16-byte aligned
  bool vec_ok = kg.ndim == 1 && kg.stride[0][0] == 1 && (uintptr_t)pin % 16 == 0;
  for (int d = 0; vec_ok && d < rg.ndim; d++) vec_ok = rg.stride[0][d] % VEC == 0;
  // VEC columns per thread either way (without vector loads they are read one by one)
  ncp_ColPlan p = ncp_col_plan(M, R, VEC, num_sms);
  dim3 block((unsigned)p.block_x, (unsigned)p.block_y), grid((unsigned)p.grid_x, (unsigned)p.grid_y);
  if (p.grid_y == 1) {
    reduce_cols<Op, S, VEC><<<grid, block, 0, stream>>>(M, R, p.rows_per_block, kg, rg, vec_ok, pin, pout, nullptr);
    LAUNCHED(name);
    return 0;
  }
  Scratch part((size_t)M * p.grid_y * sizeof(T));
  if (!part.p) return -1;
  reduce_cols<Op, S, VEC><<<grid, block, 0, stream>>>(M, R, p.rows_per_block, kg, rg, vec_ok, pin, pout, (T *)part.p);
  LAUNCHED(name);
  reduce_col_partials<Op, S><<<grid_for(M), kThreads, 0, stream>>>(M, p.grid_y, (const T *)part.p, pout);
  LAUNCHED(name);
  return 0;
}

int k_reduce(const nt_KernelArgs *a) {
  nt_Tensor *in = a->in[0], *out = a->out;
  int nr = (int)a->iarg[0], nk = in->ndim - nr, op = a->op;
  int64_t M = out->numel, R = 1;
  for (int d = nk; d < in->ndim; d++) R *= in->shape[d];
  if (M == 0) return 0;
  const char *name = host->op_name(op);
  Geom kg = sub_geom(in, 0, nk), rg = sub_geom(in, nk, in->ndim);
  auto run = [&]<typename S>() -> int {
    typedef typename std::conditional<std::is_floating_point<typename Comp<S>::type>::value,
                                      typename Comp<S>::type, int64_t>::type A;
    const S *pin = (const S *)base(in);
    void *pout = base(out);
    switch (op) {
      case NT_OP_SUM: return launch<Sum<A>, S>(name, M, R, kg, rg, pin, pout);
      case NT_OP_PROD: return launch<Prod<A>, S>(name, M, R, kg, rg, pin, pout);
      case NT_OP_MAX: return launch<Max<A>, S>(name, M, R, kg, rg, pin, pout);
      case NT_OP_MIN: return launch<Min<A>, S>(name, M, R, kg, rg, pin, pout);
      case NT_OP_ANY: return launch<Any<A>, S>(name, M, R, kg, rg, pin, pout);
      case NT_OP_ALL: return launch<All<A>, S>(name, M, R, kg, rg, pin, pout);
      case NT_OP_ARGMAX: return launch<ArgExt<A, true>, S>(name, M, R, kg, rg, pin, pout);
      case NT_OP_ARGMIN: return launch<ArgExt<A, false>, S>(name, M, R, kg, rg, pin, pout);
      default: host->error_set("%s: not a reduction", name); return -1;
    }
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
