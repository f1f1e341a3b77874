// attention.cu — fused scaled dot-product attention on the GPU (flash-attention-2
// style): the T x S score matrix never goes to global memory.  Same op names and
// nt_KernelArgs layout as the CPU kernel (tensor/nn/attention.h):
//   forward  "scaled_dot_product_attention":  O [B,T,DV], in = {q [B,T,D], k [B,S,D], v [B,S,DV], L [B,T]}
//   backward "scaled_dot_product_attention_backward": extra = nt_SdpaGrads *
//   iarg = {B, T, S, D, DV, causal, mask, views, dropout, seed, offset, mask_grad}, s[0] = scale, s[1] = the
//   dropout p (a mask or dropout only cuDNN's graph takes: cudnn.cu).  Causal: query i sees keys j <= i.
// Layout (Lay, attention_lay.cuh): every operand but L is B = Bo * Bi matrices [rows, cols] with unit
// column stride; matrix b starts at (b / Bi) so + (b % Bi) si and row r at + r sr.  The
// contiguous [B, rows, cols] of the op contract is Bi = B, si = rows cols, sr = cols; the
// views of NT_SDPA_VIEWS (attention.h: the heads of a packed [B, T, 3C] qkv permuted to
// [B, H, T, hd], O and dO as [B, T, C], dQ/dK/dV inside ONE packed [B, T, 3C]) are
// Bo = B, Bi = H, so = T*3C, si = hd, sr = 3C: read and written in place, no copies.
//
// Storage S = f32 / f16 / bf16 / f64; accumulation A = f32 (f64 for f64): tiles
// are converted to A when staged in shared memory, O/dQ/dK/dV are converted back
// when written.  L is A.  D and DV are at most kMaxD = 128 here.
// Large problems and head dims above kMaxD go to the cuBLAS path instead
// (attention_gemm.cu); choose_path below states the rule.
//
// Tiling (both kernels): 128 threads, tiles of kBr = 32 query rows and kBc = 32
// keys.  A 32 x 32 score tile lives in shared memory; thread tid computes the
// entries e = tid + 128 u (u < 8): row e / 32 = 4u + warp, column e % 32 = lane,
// so inside a warp the row is fixed (broadcast read of the q row) and the lane
// walks the keys (k rows padded to D+1: no bank conflicts).  For the products
// with V / dO / Q / K, thread tid owns ONE row (or key) = lane and the dims
// c = warp + 4 t (t < kMaxD / 4): the shared operand is a broadcast read.
//
// Forward, block = (batch b, query tile i0):
//   for each key tile j0 (causal: only j0 < i0 + kBr):
//     P = (scale q) k^T on the tile, -inf where j >= S or (causal) j > i
//     online softmax per row (one warp per 8 rows):  m' = max(m, max_j P),
//       p = exp(P - m'), l = l e^{m - m'} + sum_j p, o = o e^{m - m'} + p V
//   O = o / l,  L = m + log l.
// Backward, block = (batch b, key tile j0); loops over the query tiles that see
// any of its keys (causal: i0 + kBr > j0), recomputing P from L:
//   p = exp(scale q.k - L_i), dp = dO_i . v_j, ds = p (dp - D_i)   (D = rowsum(dO*O), precomputed)
//   dV_j += p dO_i, dK_j += scale ds q_i   (registers, one key per lane)
//   dQ_i += scale sum_j ds k_j              (atomicAdd into an A-typed scratch, cast at the end)
#include "common.cuh"
#include "attention_lay.cuh"
#include "tensor/nn/attention.h"
#include <stdlib.h>
#include <string.h>

namespace ncu {
namespace {

constexpr int kBr = 32, kBc = 32, kWarps = 4, kThr = kWarps * 32;
constexpr int kMaxD = 128, kPer = kMaxD / kWarps;   // dims per thread (c = warp + 4 t)
static_assert(kBr == 32 && kBc == 32, "the lane <-> row/key mapping assumes 32-wide tiles");
static_assert(kBr * kBc == kThr * 8, "each thread computes 8 score entries");

// cudnn.cu: the cuDNN path (its header comment says what it builds)
}  // namespace
bool cudnn_ready(char *why, size_t n);
bool sdpa_cudnn_supports(const nt_KernelArgs *a, bool bwd, char *why, size_t n);
int sdpa_cudnn(const nt_KernelArgs *a, bool bwd);
bool cudnn_nondeterministic(void);
size_t cudnn_version(void);
long long cudnn_plans_built(void);
namespace {

struct SdpaIds { int fwd, bwd; };
SdpaIds ids;

struct Geo { int64_t B, T, S, D, DV; int causal; double scale; };

// Lay, lay_of: attention_lay.cuh (shared with the cuBLAS path)

// Copies rows [r0, r0 + n) of a [rows_total, cols] matrix (row stride sr, unit column
// stride) into shared memory with row pitch `pitch` (A), times `mul`; rows past
// rows_total are 0.
template <typename S, typename A>
__device__ inline void stage(A *dst, int pitch, const S *src, int64_t sr, int64_t r0, int n, int64_t rows_total, int cols, A mul) {
  for (int idx = threadIdx.x; idx < n * cols; idx += blockDim.x) {
    int r = idx / cols, c = idx - r * cols;
    dst[r * pitch + c] = r0 + r < rows_total ? (A)ld(src[(r0 + r) * sr + c]) * mul : (A)0;
  }
}

// dot product of two shared-memory rows of length n
template <typename A> __device__ inline A sdot(const A *a, const A *b, int n) {
  A s = 0;
  for (int c = 0; c < n; c++) s += a[c] * b[c];
  return s;
}

// ---- forward --------------------------------------------------------------------------------
// shared memory (A): Qs [kBr][D+1] (scaled), Ks [kBc][D+1], Vs [kBc][DV], Ps [kBr][kBc+1],
// row state m, l, alpha [kBr] each.
template <typename A> size_t fwd_smem(int64_t D, int64_t DV) {
  return sizeof(A) * (size_t)(kBr * (D + 1) + kBc * (D + 1) + kBc * DV + kBr * (kBc + 1) + 3 * kBr);
}

template <typename S, typename A>
__global__ void __launch_bounds__(kThr) sdpa_fwd(Geo g, int64_t ntiles, const S *q, Lay lq, const S *k, Lay lk, const S *v, Lay lv,
                                                 S *out, Lay lo, A *L) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int D = (int)g.D, DV = (int)g.DV;
  A *Qs = (A *)smem_raw, *Ks = Qs + kBr * (D + 1), *Vs = Ks + kBc * (D + 1), *Ps = Vs + kBc * DV;
  A *m_s = Ps + kBr * (kBc + 1), *l_s = m_s + kBr, *al_s = l_s + kBr;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t b = blockIdx.x / ntiles, i0 = (blockIdx.x % ntiles) * kBr;
  const S *qb = q + lq.at(b, 0), *kb = k + lk.at(b, 0), *vb = v + lv.at(b, 0);

  stage(Qs, D + 1, qb, lq.sr, i0, kBr, g.T, D, (A)g.scale);
  if (tid < kBr) { m_s[tid] = -INFINITY; l_s[tid] = 0; }
  A o[kPer];
#pragma unroll
  for (int t = 0; t < kPer; t++) o[t] = 0;

  const int64_t kend = g.causal && i0 + kBr < g.S ? i0 + kBr : g.S;   // keys any row of this tile sees
  for (int64_t j0 = 0; j0 < kend; j0 += kBc) {
    __syncthreads();                    // the previous tile's Ks/Vs/Ps are no longer read
    stage(Ks, D + 1, kb, lk.sr, j0, kBc, g.S, D, (A)1);
    stage(Vs, DV, vb, lv.sr, j0, kBc, g.S, DV, (A)1);
    __syncthreads();
    // scores: row 4u + warp, key lane
#pragma unroll
    for (int u = 0; u < 8; u++) {
      int r = 4 * u + warp;
      int64_t i = i0 + r, j = j0 + lane;
      bool seen = j < g.S && (!g.causal || j <= i);
      Ps[r * (kBc + 1) + lane] = seen ? sdot(Qs + r * (D + 1), Ks + lane * (D + 1), D) : (A)-INFINITY;
    }
    __syncthreads();
    // online softmax: warp w updates rows 8w .. 8w+7 (lane = key)
    for (int rr = 0; rr < kBr / kWarps; rr++) {
      int r = warp * (kBr / kWarps) + rr;
      A x = Ps[r * (kBc + 1) + lane];
      A m_old = m_s[r], m_new = max(m_old, warp_max(x));
      A m_use = m_new == (A)-INFINITY ? (A)0 : m_new;   // no key seen yet: keep exp() finite
      A p = a_exp(x - m_use);
      Ps[r * (kBc + 1) + lane] = p;
      A psum = warp_sum(p);
      // every lane has read m_s[r] (above) before lane 0 writes it: the shuffles in
      // warp_max/warp_sum order them only implicitly, and compute-sanitizer's racecheck
      // reported the pair (read at m_old, write at m_s[r]) on an H200
      __syncwarp();
      if (lane == 0) {
        A alpha = a_exp(m_old - m_use);
        l_s[r] = l_s[r] * alpha + psum;
        m_s[r] = m_new;
        al_s[r] = alpha;
      }
    }
    __syncthreads();
    // o[row = lane][c = warp + 4t] = o * alpha + sum_j p_j V[j][c]
    const A alpha = al_s[lane];
#pragma unroll
    for (int t = 0; t < kPer; t++) o[t] *= alpha;
    for (int jj = 0; jj < kBc; jj++) {
      A p = Ps[lane * (kBc + 1) + jj];
#pragma unroll
      for (int t = 0; t < kPer; t++) {
        int c = warp + kWarps * t;
        if (c < DV) o[t] += p * Vs[jj * DV + c];
      }
    }
  }
  __syncthreads();                      // m_s / l_s final
  const int64_t i = i0 + lane;
  if (i < g.T) {
    // S == 0: no key at all, O = 0 and L = -inf (the CPU's convention); a row whose scores
    // are all -inf (infinite inputs) has l = 0 and gives NaN, as torch
    A l = l_s[lane], inv = g.S == 0 ? (A)0 : (A)1 / l;
#pragma unroll
    for (int t = 0; t < kPer; t++) {
      int c = warp + kWarps * t;
      if (c < DV) out[lo.at(b, i) + c] = St<S>::from(o[t] * inv);
    }
    if (warp == 0) L[b * g.T + i] = g.S == 0 ? (A)-INFINITY : m_s[lane] + a_log(l);
  }
}

// ---- backward ---------------------------------------------------------------------------------
// Drow[r] = sum_c dO[r][c] O[r][c], one warp per row r = b T + i (grid-stride over the B*T
// rows); the same warp zeroes row r of the dQ accumulator [B*T, D] (no separate memset).
template <typename S, typename A>
__global__ void sdpa_rowdot(int64_t rows, int64_t T, int DV, const S *dout, Lay lg, const S *o, Lay lo, A *Drow,
                            A *dq_acc, int D) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t r = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
    const S *gr = dout + lg.at(r / T, r % T), *orow = o + lo.at(r / T, r % T);
    for (int c = lane; c < D; c += 32) dq_acc[r * D + c] = 0;
    A s = 0;
    for (int c = lane; c < DV; c += 32) s += (A)ld(gr[c]) * (A)ld(orow[c]);
    s = warp_sum(s);
    if (lane == 0) Drow[r] = s;
  }
}

// shared memory (A): Ks [kBc][D+1], Vs [kBc][DV+1], Qs [kBr][D+1], dOs [kBr][DV+1],
// Ps, dSs [kBr][kBc+1], Ls, Ds [kBr].
template <typename A> size_t bwd_smem(int64_t D, int64_t DV) {
  return sizeof(A) * (size_t)(kBc * (D + 1) + kBc * (DV + 1) + kBr * (D + 1) + kBr * (DV + 1) + 2 * kBr * (kBc + 1) + 2 * kBr);
}

template <typename S, typename A>
__global__ void __launch_bounds__(kThr) sdpa_bwd(Geo g, int64_t ntiles, const S *q, Lay lq, const S *k, Lay lk, const S *v, Lay lv,
                                                 const S *dout, Lay lg, const A *L, const A *Drow, A *dq_acc,
                                                 S *dk, Lay ldk, S *dv, Lay ldv) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int D = (int)g.D, DV = (int)g.DV;
  A *Ks = (A *)smem_raw, *Vs = Ks + kBc * (D + 1), *Qs = Vs + kBc * (DV + 1), *dOs = Qs + kBr * (D + 1);
  A *Ps = dOs + kBr * (DV + 1), *dSs = Ps + kBr * (kBc + 1), *Ls = dSs + kBr * (kBc + 1), *Ds = Ls + kBr;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t b = blockIdx.x / ntiles, j0 = (blockIdx.x % ntiles) * kBc;
  const A scale = (A)g.scale;
  const S *qb = q + lq.at(b, 0), *kb = k + lk.at(b, 0), *vb = v + lv.at(b, 0), *gb = dout + lg.at(b, 0);

  stage(Ks, D + 1, kb, lk.sr, j0, kBc, g.S, D, (A)1);
  stage(Vs, DV + 1, vb, lv.sr, j0, kBc, g.S, DV, (A)1);
  A dk_acc[kPer], dv_acc[kPer];          // key j0 + lane, dims warp + 4t
#pragma unroll
  for (int t = 0; t < kPer; t++) dk_acc[t] = dv_acc[t] = 0;

  // causal: rows i < j0 see none of this tile's keys; start at the tile holding row j0
  const int64_t istart = g.causal ? (j0 / kBr) * kBr : 0;
  for (int64_t i0 = istart; i0 < g.T; i0 += kBr) {
    __syncthreads();                    // previous query tile fully consumed (and Ks/Vs staged)
    stage(Qs, D + 1, qb, lq.sr, i0, kBr, g.T, D, (A)1);
    stage(dOs, DV + 1, gb, lg.sr, i0, kBr, g.T, DV, (A)1);
    if (tid < kBr) {
      int64_t i = i0 + tid;
      Ls[tid] = i < g.T ? L[b * g.T + i] : (A)0;
      Ds[tid] = i < g.T ? Drow[b * g.T + i] : (A)0;
    }
    __syncthreads();
    // P and dS on the tile: row 4u + warp, key lane
#pragma unroll
    for (int u = 0; u < 8; u++) {
      int r = 4 * u + warp;
      int64_t i = i0 + r, j = j0 + lane;
      A p = 0, ds = 0;
      if (i < g.T && j < g.S && (!g.causal || j <= i)) {
        p = a_exp(scale * sdot(Qs + r * (D + 1), Ks + lane * (D + 1), D) - Ls[r]);
        A dp = sdot(dOs + r * (DV + 1), Vs + lane * (DV + 1), DV);
        ds = p * (dp - Ds[r]);
      }
      Ps[r * (kBc + 1) + lane] = p;
      dSs[r * (kBc + 1) + lane] = ds;
    }
    __syncthreads();
    // dV[key lane][c] += sum_r P[r][lane] dO[r][c];  dK[key lane][c] += sum_r dS[r][lane] Q[r][c]
    for (int r = 0; r < kBr; r++) {
      A p = Ps[r * (kBc + 1) + lane], ds = dSs[r * (kBc + 1) + lane];
#pragma unroll
      for (int t = 0; t < kPer; t++) {
        int c = warp + kWarps * t;
        if (c < DV) dv_acc[t] += p * dOs[r * (DV + 1) + c];
        if (c < D) dk_acc[t] += ds * Qs[r * (D + 1) + c];
      }
    }
    // dQ[row lane][c] += scale sum_j dS[lane][j] K[j][c]   (other key tiles add theirs too)
    const int64_t i = i0 + lane;
    if (i < g.T) {
      for (int t = 0; t < kPer; t++) {
        int c = warp + kWarps * t;
        if (c >= D) break;
        A acc = 0;
        for (int jj = 0; jj < kBc; jj++) acc += dSs[lane * (kBc + 1) + jj] * Ks[jj * (D + 1) + c];
        atomicAdd(dq_acc + (b * g.T + i) * D + c, scale * acc);
      }
    }
  }
  const int64_t j = j0 + lane;
  if (j < g.S) {
#pragma unroll
    for (int t = 0; t < kPer; t++) {
      int c = warp + kWarps * t;
      if (c < D) dk[ldk.at(b, j) + c] = St<S>::from(scale * dk_acc[t]);
      if (c < DV) dv[ldv.at(b, j) + c] = St<S>::from(dv_acc[t]);
    }
  }
}

// dQ from its contiguous [B, T, D] accumulator (A) into dq (storage dtype, layout ld)
template <typename S, typename A>
__global__ void sdpa_cast(int64_t n, int64_t T, int64_t D, const A *src, S *dst, Lay ld) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / D;
    dst[ld.at(r / T, r % T) + (e - r * D)] = St<S>::from(src[e]);
  }
}

// ---- host side ----------------------------------------------------------------------------------
// Checks `smem` bytes against the device's opt-in limit and raises the kernel's
// dynamic shared-memory cap when it is above the default 48 KB.
template <typename K> int smem_ok(K *kernel, size_t smem, const char *op) {
  int dev = 0, optin = 0;
  CU(cudaGetDevice(&dev));
  CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (smem > (size_t)optin) {
    host->error_set("%s: needs %zu bytes of shared memory per block, the device allows %d", op, smem, optin);
    return -1;
  }
  if (smem > 48 * 1024) CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  return 0;
}

int blocks_ok(int64_t blocks, const char *op) {
  if (blocks > INT32_MAX) { host->error_set("%s: too many blocks (%lld) for one launch", op, (long long)blocks); return -1; }
  return 0;
}

template <typename S> int run_fwd(const nt_KernelArgs *a, const Geo &g) {
  using A = typename Comp<S>::type;
  const char *op = "scaled_dot_product_attention";
  const int64_t ntiles = (g.T + kBr - 1) / kBr, blocks = g.B * ntiles;
  if (blocks == 0) return 0;
  const size_t smem = fwd_smem<A>(g.D, g.DV);
  if (blocks_ok(blocks, op) || smem_ok(sdpa_fwd<S, A>, smem, op)) return -1;
  sdpa_fwd<S, A><<<(unsigned)blocks, kThr, smem, stream>>>(
      g, ntiles, (const S *)base(a->in[0]), lay_of(a->in[0]), (const S *)base(a->in[1]), lay_of(a->in[1]),
      (const S *)base(a->in[2]), lay_of(a->in[2]), (S *)base(a->out), lay_of(a->out), (A *)base(a->in[3]));
  LAUNCHED(op);
  return 0;
}

template <typename S> int run_bwd(const nt_KernelArgs *a, const Geo &g) {
  using A = typename Comp<S>::type;
  const char *op = "scaled_dot_product_attention_backward";
  const nt_SdpaGrads *gr = (const nt_SdpaGrads *)a->extra;
  const bool views = a->niarg > NT_SDPA_VIEWS && a->iarg[NT_SDPA_VIEWS];
  const int64_t nq = g.B * g.T * g.D;
  // dQ is a sum over key tiles done with atomicAdd: into dq itself when it is A-typed
  // and contiguous, else into a contiguous A scratch cast (and laid out) afterwards
  const bool direct = sizeof(S) == sizeof(A) && !views;
  Scratch dq_tmp(direct ? 0 : (size_t)nq * sizeof(A));
  if (!dq_tmp.p) return -1;
  A *dq_acc = direct ? (A *)base(gr->dq) : (A *)dq_tmp.p;
  if (g.S == 0 && nq > 0) CU(cudaMemsetAsync(dq_acc, 0, (size_t)nq * sizeof(A), stream));   // no key: dQ = 0
  if (g.S > 0) {                        // (dK, dV are then empty); T == 0 gives dK = dV = 0 below
    const int64_t rows = g.B * g.T;
    Scratch drow((size_t)rows * sizeof(A));
    if (!drow.p) return -1;
    if (rows > 0) {                     // D_i, and dQ's accumulator zeroed
      sdpa_rowdot<S, A><<<grid_for(rows * 32), kThreads, 0, stream>>>(rows, g.T, (int)g.DV, (const S *)base(gr->dout),
                                                                      lay_of(gr->dout), (const S *)base(gr->o), lay_of(gr->o),
                                                                      (A *)drow.p, dq_acc, (int)g.D);
      LAUNCHED(op);
    }
    const int64_t ntiles = (g.S + kBc - 1) / kBc, blocks = g.B * ntiles;
    const size_t smem = bwd_smem<A>(g.D, g.DV);
    if (blocks_ok(blocks, op) || smem_ok(sdpa_bwd<S, A>, smem, op)) return -1;
    sdpa_bwd<S, A><<<(unsigned)blocks, kThr, smem, stream>>>(
        g, ntiles, (const S *)base(gr->q), lay_of(gr->q), (const S *)base(gr->k), lay_of(gr->k), (const S *)base(gr->v),
        lay_of(gr->v), (const S *)base(gr->dout), lay_of(gr->dout), (const A *)base(gr->lse), (const A *)drow.p, dq_acc,
        (S *)base(gr->dk), lay_of(gr->dk), (S *)base(gr->dv), lay_of(gr->dv));
    LAUNCHED(op);
  }
  if (!direct && nq > 0) {
    sdpa_cast<S, A><<<grid_for(nq), kThreads, 0, stream>>>(nq, g.T, g.D, dq_acc, (S *)base(gr->dq), lay_of(gr->dq));
    LAUNCHED(op);
  }
  return 0;
}

// Which path runs (docs/cuda.md, "attention"):
//   * cuDNN's fused flash-attention graph (cudnn.cu) for f16/bf16 with equal head
//     dims d = dv (a multiple of 8, at most 128) wherever libcudnn.so.9 loads and its
//     heuristics have an engine for the graph: the fastest path on Hopper;
//   * else the cuBLAS one (attention_gemm.cu: tensor cores, S x S scores in global
//     memory) for f32/f16/bf16 when the score matrix is large (T*S >= kGemmMinScores)
//     and for any head dim above kMaxD;
//   * else these fused kernels (small problems, where they save the launches and
//     the scratch, and f64).
// NABLA_CUDA_ATTENTION=cudnn|fused|gemm forces one (tests, benchmarks; forcing cudnn
// where it cannot run is an error saying why); "auto" or unset = the rule.  Why an
// auto call did not take cuDNN is never silent: cuda.attention_backend() reports it
// (nabla_cuda_attention_backend below).
constexpr int64_t kGemmMinScores = 256 * 256;
enum Path { kAuto, kCudnn, kFused, kGemm, kBadEnv };
Path env_path(const char *op) {
  const char *e = getenv("NABLA_CUDA_ATTENTION");
  if (!e || !*e || strcmp(e, "auto") == 0) return kAuto;
  if (strcmp(e, "cudnn") == 0) return kCudnn;
  if (strcmp(e, "fused") == 0) return kFused;
  if (strcmp(e, "gemm") == 0) return kGemm;
  host->error_set("%s: NABLA_CUDA_ATTENTION must be cudnn, fused, gemm or auto, got \"%s\"", op, e);
  return kBadEnv;
}
Path fallback_path(const Geo &g, nt_DType dt) {
  if (g.D > kMaxD || g.DV > kMaxD) return kGemm;
  return dt != NT_F64 && g.T * g.S >= kGemmMinScores ? kGemm : kFused;
}
char last_fallback[600];   // why the last auto call did not run on cuDNN ("" when it did)

int k_sdpa(const nt_KernelArgs *a) {
  const int64_t *ia = a->iarg;
  Geo g = {ia[NT_SDPA_B], ia[NT_SDPA_T], ia[NT_SDPA_S], ia[NT_SDPA_D], ia[NT_SDPA_DV], (int)ia[NT_SDPA_CAUSAL], a->s[0]};
  const bool bwd = a->op == ids.bwd;
  const char *op = bwd ? "scaled_dot_product_attention_backward" : "scaled_dot_product_attention";
  nt_DType dt = bwd ? ((const nt_SdpaGrads *)a->extra)->q->dtype : a->out->dtype;
  Path p = env_path(op);
  if (p == kBadEnv) return -1;
  // strided views (NT_SDPA_VIEWS): every path reads and writes them in place (the
  // cuBLAS one in chunks that stay inside one outer batch index, where the heads are
  // one stride apart); only empty views are declined (return 1, nothing written) and
  // retried by the front end with contiguous copies
  if (p == kAuto || p == kCudnn) {
    char why[500] = "";
    if (cudnn_ready(why, sizeof why) && sdpa_cudnn_supports(a, bwd, why, sizeof why)) {
      int rc = sdpa_cudnn(a, bwd);
      if (rc <= 0) { if (rc == 0) last_fallback[0] = 0; return rc; }   // ran, or failed: an error, never a fallback
      snprintf(why, sizeof why, "%s", host->error_msg());   // no engine for this graph
    }
    if (p == kCudnn) {
      host->error_set("%s: NABLA_CUDA_ATTENTION=cudnn, but cuDNN cannot run it: %s", op, why);
      return -1;
    }
    snprintf(last_fallback, sizeof last_fallback, "%s", why);
    p = fallback_path(g, dt);
  }
  // an additive mask: only cuDNN's graph adds one (the kernels below take none).  The
  // forward declines (1, nothing written): the front end composes public ops instead
  // (attention.c sdpa_composed).  A backward whose forward ran here on cuDNN cannot
  // decline: an error saying why, never a gradient without the mask.
  // Dropout likewise: only cuDNN's graph drops out (its RNG node); never a silent drop.
  const bool drop = a->niarg > NT_SDPA_DROPOUT && ia[NT_SDPA_DROPOUT];
  if (ia[NT_SDPA_MASK] || drop) {
    const char *what = ia[NT_SDPA_MASK] ? "masked" : "dropout";
    if (bwd) {
      host->error_set("%s: the %s forward ran on cuDNN but its backward cannot (%s)", op, what,
                      last_fallback[0] ? last_fallback : "NABLA_CUDA_ATTENTION forces a kernel that takes no mask or dropout");
      return -1;
    }
    host->error_set("%s: no fused CUDA kernel but cuDNN's graph takes an additive mask or dropout", op);
    return 1;
  }
  if (p == kGemm) return sdpa_gemm(a, bwd);
  if (g.D > kMaxD || g.DV > kMaxD) {
    host->error_set("%s: the fused kernel takes head dims up to %d, got d=%lld, dv=%lld (NABLA_CUDA_ATTENTION=fused)",
                    op, kMaxD, (long long)g.D, (long long)g.DV);
    return -1;
  }
  switch (dt) {
    case NT_F32: return bwd ? run_bwd<float>(a, g) : run_fwd<float>(a, g);
    case NT_F64: return bwd ? run_bwd<double>(a, g) : run_fwd<double>(a, g);
    case NT_F16: return bwd ? run_bwd<__half>(a, g) : run_fwd<__half>(a, g);
    case NT_BF16: return bwd ? run_bwd<__nv_bfloat16>(a, g) : run_fwd<__nv_bfloat16>(a, g);
    default: break;
  }
  host->error_set("%s: unsupported dtype %s on cuda", op, nt_dtype_name(dt));
  return -1;
}

}  // namespace

void register_attention(void) {
  ids.fwd = host->op_register("scaled_dot_product_attention");
  ids.bwd = host->op_register("scaled_dot_product_attention_backward");
  host->register_kernel(ids.fwd, NT_CUDA, k_sdpa);
  host->register_kernel(ids.bwd, NT_CUDA, k_sdpa);
}

}  // namespace ncu

// cuda.attention_backend() (tensor/tdevice.c finds this by name: no module-ABI
// entry): which backend attention takes by default here and why.  backend: "cudnn"
// (f16/bf16 problems it supports go to cuDNN), "fused"/"gemm" when forced, or
// "fallback" (cuDNN cannot run: reason says why; the rule above picks fused/gemm).
// last_fallback: why the most recent auto call skipped cuDNN ("" if it did not);
// nondet: the last backward plan runs a non-deterministic engine; plans: plans built.
extern "C" __attribute__((visibility("default"))) int nabla_cuda_attention_backend(
    char *backend, size_t nb, char *why, size_t nw, char *last, size_t nl, long long *version, int *nondet, long long *plans) {
  using namespace ncu;
  return guarded("cuda.attention_backend", [&]() {
    if (bind_device()) return -1;
    Path p = env_path("NABLA_CUDA_ATTENTION");
    if (p == kBadEnv) return -1;
    bool ok = cudnn_ready(why, nw);
    const char *b = p == kFused ? "fused" : p == kGemm ? "gemm" : ok ? "cudnn" : "fallback";
    snprintf(backend, nb, "%s", b);
    if (ok) snprintf(why, nw, "%s", p == kFused || p == kGemm ? "forced by NABLA_CUDA_ATTENTION" : "");
    snprintf(last, nl, "%s", last_fallback);
    *version = (long long)cudnn_version();
    *nondet = cudnn_nondeterministic();
    *plans = cudnn_plans_built();
    return 0;
  });
}
