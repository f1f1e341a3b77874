// attention_gemm.cu — scaled dot-product attention through cuBLAS (tensor cores for
// f16/bf16, TF32 for f32 under set_matmul_precision("high")) plus fused row kernels.
// The other path of the op; attention.cu (k_sdpa) chooses between this one and its
// fused CUDA-core kernels, and documents the rule (docs/cuda.md, "attention").
//
// Same contract as the CPU kernel (tensor/nn/attention.h): q [B,T,D], k [B,S,D],
// v [B,S,DV], O [B,T,DV] contiguous in the storage dtype E (f32, f64, f16, bf16),
// or (NT_SDPA_VIEWS) strided head views, e.g. of a packed [B, T, 3C] qkv, read and
// written in place (attention_lay.cuh: matrix b at (b / Bi) so + (b % Bi) si, row
// stride sr): a chunk never crosses an outer batch index, so inside it the matrices
// are si apart and one strided-batched GEMM takes them (lda = sr, strideA = si);
// L [B,T] in the accumulation dtype A (f32; f64 for f64); iarg = {B, T, S, D, DV,
// causal}, s[0] = scale.  Causal is top-left aligned: query i sees keys j <= i, so
// row i sees n_i = min(S, i + 1) keys (all S when not causal).  No limit on D / DV.
//
// Forward, per chunk of batch*heads matrices (b = one of them):
//   Sc_b = scale Q_b K_b^T                  GEMM  [T,S] in A (f32 keeps the logits exact
//                                                 enough; the storage dtype would round
//                                                 them to 8 bits for bf16)
//   L_i  = log sum_{j<n_i} exp(Sc_ij)       row kernel, also writes
//   P_ij = exp(Sc_ij - L_i) (0 for j >= n_i) in E (the next GEMM's input type)
//   O_b  = P_b V_b                          GEMM  [T,DV] in E, f32 accumulation
// Backward (the contract saves only O and L: P is recomputed):
//   Sc   = scale Q K^T                      GEMM  (A)
//   P    = exp(Sc - L), masked 0            row kernel (E)
//   dV   = P^T dO                           GEMM  [S,DV]
//   dP   = dO V^T                           GEMM  [T,S] (A, into Sc's buffer)
//   dS   = p (dP - D_i), p = P / sum_j P_ij, D_i = sum_j p_ij dP_ij   row kernel (E, in
//                                                 place over P; masked 0; why not dO . O: there)
//   dQ   = scale dS K,  dK = scale dS^T Q   GEMMs
// Scratch per matrix: T*S*(sizeof(A) + sizeof(E)) bytes (6 for bf16/f16: 6 MiB at
// T = S = 1024), from the caching allocator; the batch*heads are processed in
// chunks so that the scratch stays under 1 GiB (NABLA_CUDA_ATTENTION_CHUNK_BYTES
// overrides it; a single matrix larger than the bound still runs, alone).
//
// Row kernels: one warp per row of T x S (8 rows per 256-thread block, warp-stride
// loop over the chunk's rows), lanes walk the row's keys j = lane + 32 t (coalesced).
//
// GEMMs, row-major (matmul.cu's header): a row-major R x C matrix with row stride ld is
// the column-major C x R matrix; so C[M,N] = op(A)[M,K] op(B)[K,N] is the column-major
// C^T = op(B)^T op(A)^T: cuBLAS gets (m = N, n = M, "A" = B, "B" = A) with the same
// transpose flags.  ta: A is stored as [K,M] (row stride lda); tb: B is stored as [N,K].
// This file owns its cuBLAS handle (on ncu::stream, made at module init by
// matmul.cu's cublas_handle_new: workspace from the caching allocator, an
// empty-cache retry): matmul.cu's is private to it and its gemm_rowmajor
// takes f32/f64 only, alpha 1.
#include "common.cuh"
#include "attention_lay.cuh"
#include "tensor/nn/attention.h"
#include <cublas_v2.h>
#include <initializer_list>
#include <stdlib.h>

namespace ncu {
const char *cublas_status_str(cublasStatus_t s);   // matmul.cu
int cublas_handle_new(cublasHandle_t *out, const char *what);   // matmul.cu
int gemm_issued(const char *op);   // matmul.cu: the check after a cuBLAS call (not a launch)

namespace {

cublasHandle_t handle;


// keys row i of a T x S matrix sees
__device__ inline int64_t keys_seen(int64_t i, int64_t S, int causal) { return causal && i + 1 < S ? i + 1 : S; }

#define WARP_ROWS(r, rows)                                                                   \
  for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; r < (rows);        \
       r += ((int64_t)gridDim.x * blockDim.x) >> 5)

// ---- row kernels -------------------------------------------------------------------------------
// Forward softmax.  sc [rows, S] (A) holds scale q.k; row r is query i = r % T of its matrix.
// One pass computes the row max and sum online per lane (l = l e^{m - m'} + e^{x - m'}),
// merged across the warp; L = m + log l (the CPU's convention: a row whose scores are all
// -inf gets m = 0, l = 0, L = -inf, and P = NaN like torch; S = 0 gives L = -inf, no P).
// Then P_ij = exp(Sc_ij - L) for j < n_i and 0 for the masked keys (the P V GEMM reads the
// whole row, so they must be written).
template <typename E, typename A>
__global__ void sdpa_softmax_rows(int64_t rows, int64_t T, int64_t S, int causal, const A *sc, E *P, A *L) {
  const int lane = threadIdx.x & 31;
  WARP_ROWS(r, rows) {
    const int64_t n = keys_seen(r % T, S, causal);
    const A *srow = sc + r * S;
    A m = -INFINITY, l = 0;
    for (int64_t j = lane; j < n; j += 32) {
      A x = srow[j];
      // first finite key: l * 0 (not 0) keeps a NaN this lane already counted, as the CPU's sum does
      if (x > m) { l = (m == (A)-INFINITY ? l * (A)0 : l * a_exp(m - x)) + 1; m = x; }
      else if (!(x == (A)-INFINITY)) l += a_exp(x - m);   // -inf adds 0 (and -inf - -inf would be NaN); NaN stays
    }
    const A mw = warp_max(m);
    l = m == (A)-INFINITY ? l * (A)0 : l * a_exp(m - mw);   // a lane with no finite key adds 0 (or its NaN)
    const A lw = warp_sum(l);
    const A Lr = (mw == (A)-INFINITY ? (A)0 : mw) + a_log(lw);
    if (lane == 0) L[r] = Lr;
    E *prow = P + r * S;
    for (int64_t j = lane; j < S; j += 32) prow[j] = St<E>::from(j < n ? a_exp(srow[j] - Lr) : (A)0);
  }
}

// Backward: P_ij = exp(Sc_ij - L_i) from the saved L (the forward's exact definition), 0 masked.
template <typename E, typename A>
__global__ void sdpa_probs_rows(int64_t rows, int64_t T, int64_t S, int causal, const A *sc, const A *L, E *P) {
  const int lane = threadIdx.x & 31;
  WARP_ROWS(r, rows) {
    const int64_t n = keys_seen(r % T, S, causal);
    const A *srow = sc + r * S;
    const A Lr = L[r];
    E *prow = P + r * S;
    for (int64_t j = lane; j < S; j += 32) prow[j] = St<E>::from(j < n ? a_exp(srow[j] - Lr) : (A)0);
  }
}

// Backward: dS_rj = p_rj (dP_rj - D_r) with p_r = P_r / sigma_r, sigma_r = sum_j P_rj and
// D_r = sum_j p_rj dP_rj (two warp sums over the row), written over P (same element, same
// lane: read then write) in E; masked keys get an exact 0.  Why not D_r = dO_r . O_r (the
// CPU's and flash attention's D): P = exp(Sc - L) carries L's rounding, L = m + log l being
// rounded at the size of the row's largest score, so with large scores (|Sc| ~ 40) every P
// of the row is off by the same factor 1 + eps (~2e-6); dO . O then no longer equals
// sum_j P_j dP_j, and dP_max - D, a difference of two numbers ~ |dO| |v| that should nearly
// cancel, keeps eps D: through dK = scale dS^T Q that was 2.5e-4 absolute at |q| ~ 40 where
// torch's f32 softmax backward (sum_j P_j dP_j over the P it uses) meets 1e-4.  Dividing by
// sigma removes the common factor exactly; sum P dP is the softmax backward's own D.
template <typename E, typename A>
__global__ void sdpa_dscores_rows(int64_t rows, int64_t T, int64_t S, int causal, const A *dp, E *P) {
  const int lane = threadIdx.x & 31;
  WARP_ROWS(r, rows) {
    const int64_t n = keys_seen(r % T, S, causal);
    const A *dprow = dp + r * S;
    E *prow = P + r * S;
    A sigma = 0, pdp = 0;
    for (int64_t j = lane; j < n; j += 32) {
      const A p = (A)ld(prow[j]);
      sigma += p;
      pdp += p * dprow[j];
    }
    sigma = warp_sum(sigma);
    pdp = warp_sum(pdp);
    const A inv = sigma > 0 ? (A)1 / sigma : (A)1;   // sigma is NaN for a row of -inf scores: dS NaN, like torch
    const A d = pdp * inv;
    for (int64_t j = lane; j < S; j += 32) prow[j] = St<E>::from(j < n ? (A)ld(prow[j]) * inv * (dprow[j] - d) : (A)0);
  }
}
#undef WARP_ROWS

// ---- cuBLAS ------------------------------------------------------------------------------------
#define CUBLAS(op, call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    host->error_set("%s: cuBLAS error in %s: %s (%d); last op launched: %s", op, #call, cublas_status_str(s_), (int)s_, last_op); \
    return -1; } } while (0)

int handle_ready(const char *op) {
  if (handle) return 0;
  host->error_set("%s: the attention cuBLAS handle was not created at init", op);
  return -1;
}

// cuBLAS types of storage dtype E: operands `io` (the GEMM inputs and the E outputs),
// scores `acc` (A), compute type and the alpha type (double only for f64).
template <typename E> struct Blas;
template <> struct Blas<float> { static constexpr cudaDataType_t io = CUDA_R_32F, acc = CUDA_R_32F; };
template <> struct Blas<double> { static constexpr cudaDataType_t io = CUDA_R_64F, acc = CUDA_R_64F; };
template <> struct Blas<__half> { static constexpr cudaDataType_t io = CUDA_R_16F, acc = CUDA_R_32F; };
template <> struct Blas<__nv_bfloat16> { static constexpr cudaDataType_t io = CUDA_R_16BF, acc = CUDA_R_32F; };

// Row-major strided-batched C[M,N] = alpha op(A)[M,K] op(B)[K,N] (beta 0), `batch`
// matrices sA/sB/sC elements apart; A and B of E's type, C of type ctype.  See the
// header for the column-major mapping.  K == 0: C = 0 (C dense: ldc = N, sC = M N, as
// every call here).  M, N, K, ld < 2^31: the front end bounds T, S, D, DV.
template <typename E>
int gemm(const char *op, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
         int64_t sA, const void *B, int64_t ldb, int64_t sB, cudaDataType_t ctype, void *C, int64_t ldc, int64_t sC,
         int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return 0;
  if (K == 0) {
    const size_t csize = ctype == CUDA_R_64F ? 8 : ctype == CUDA_R_32F ? 4 : 2;
    CU(cudaMemsetAsync(C, 0, (size_t)(batch * M * N) * csize, stream));
    return 0;
  }
  const bool f64 = Blas<E>::io == CUDA_R_64F;
  const cublasComputeType_t comp = f64 ? CUBLAS_COMPUTE_64F
                                 : Blas<E>::io == CUDA_R_32F && *host->matmul_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                     : CUBLAS_COMPUTE_32F;
  const float alpha_f = (float)alpha, zero_f = 0;
  const double alpha_d = alpha, zero_d = 0;
  const void *al = f64 ? (const void *)&alpha_d : (const void *)&alpha_f;
  const void *be = f64 ? (const void *)&zero_d : (const void *)&zero_f;
  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS(op, cublasGemmStridedBatchedEx(handle, ob, oa, (int)N, (int)M, (int)K, al, B, Blas<E>::io, (int)ldb, sB, A,
                                        Blas<E>::io, (int)lda, sA, be, C, ctype, (int)ldc, sC, (int)batch, comp,
                                        CUBLAS_GEMM_DEFAULT));
  if (gemm_issued(op)) return -1;   // counted as a GEMM; under NABLA_CUDA_SYNC=1 waits, so a fault names it
  return 0;
}

struct Geo { int64_t B, T, S, D, DV; int causal; double scale; };

// batch*heads matrices per chunk: scratch of `per` bytes each under the bound
// (the chunks are cut further at every operand's outer batch boundary: next_chunk)
int64_t chunk_of(const Geo &g, size_t per) {
  const char *e = getenv("NABLA_CUDA_ATTENTION_CHUNK_BYTES");
  long long v = e && *e ? atoll(e) : 0;
  const size_t bound = v > 0 ? (size_t)v : (size_t)1 << 30;
  int64_t nb = per ? (int64_t)(bound / per) : g.B;
  if (nb < 1) nb = 1;
  if (nb > g.B) nb = g.B;
  if (nb > INT32_MAX) nb = INT32_MAX;   // cuBLAS batch count
  return nb;
}

// matrices of the chunk starting at b0: at most nb, and none past an outer batch
// boundary of any operand (there the matrices stop being si apart)
int64_t next_chunk(int64_t b0, int64_t nb, int64_t B, std::initializer_list<Lay> lays) {
  int64_t n = B - b0 < nb ? B - b0 : nb;
  for (const Lay &l : lays) {
    const int64_t left = l.Bi - b0 % l.Bi;
    if (left < n) n = left;
  }
  return n;
}

template <typename E> int fwd(const nt_KernelArgs *a, const Geo &g) {
  using A = typename Comp<E>::type;
  const char *op = "scaled_dot_product_attention";
  const int64_t T = g.T, S = g.S, D = g.D, DV = g.DV;
  const int64_t nb = chunk_of(g, (size_t)(T * S) * (sizeof(A) + sizeof(E)));
  Scratch sc_buf((size_t)(nb * T * S) * sizeof(A)), p_buf((size_t)(nb * T * S) * sizeof(E));
  if (!sc_buf.p || !p_buf.p) return -1;
  A *sc = (A *)sc_buf.p;
  E *P = (E *)p_buf.p;
  const E *q = (const E *)base(a->in[0]), *k = (const E *)base(a->in[1]), *v = (const E *)base(a->in[2]);
  E *o = (E *)base(a->out);
  A *L = (A *)base(a->in[3]);
  const Lay lq = lay_of(a->in[0]), lk = lay_of(a->in[1]), lv = lay_of(a->in[2]), lo = lay_of(a->out);
  for (int64_t b0 = 0, n; b0 < g.B; b0 += n) {
    n = next_chunk(b0, nb, g.B, {lq, lk, lv, lo});
    const int64_t rows = n * T;
    // Sc [T,S] = scale Q [T,D] (K [S,D])^T: B = K stored [N,K] -> tb
    if (gemm<E>(op, false, true, T, S, D, g.scale, q + lq.at(b0, 0), lq.sr, lq.si, k + lk.at(b0, 0), lk.sr, lk.si,
                 Blas<E>::acc, sc, S, T * S, n))
      return -1;
    if (rows > 0) {
      sdpa_softmax_rows<E, A><<<grid_for(rows * 32), kThreads, 0, stream>>>(rows, T, S, g.causal, sc, P, L + b0 * T);
      LAUNCHED(op);
    }
    // O [T,DV] = P [T,S] V [S,DV]
    if (gemm<E>(op, false, false, T, DV, S, 1.0, P, S, T * S, v + lv.at(b0, 0), lv.sr, lv.si, Blas<E>::io,
                 o + lo.at(b0, 0), lo.sr, lo.si, n))
      return -1;
  }
  return 0;
}

template <typename E> int bwd(const nt_KernelArgs *a, const Geo &g) {
  using A = typename Comp<E>::type;
  const char *op = "scaled_dot_product_attention_backward";
  const nt_SdpaGrads *gr = (const nt_SdpaGrads *)a->extra;
  const int64_t T = g.T, S = g.S, D = g.D, DV = g.DV;
  const int64_t nb = chunk_of(g, (size_t)(T * S) * (sizeof(A) + sizeof(E)));
  Scratch sc_buf((size_t)(nb * T * S) * sizeof(A)), p_buf((size_t)(nb * T * S) * sizeof(E));
  if (!sc_buf.p || !p_buf.p) return -1;
  A *sc = (A *)sc_buf.p;            // scores, then dP
  E *P = (E *)p_buf.p;            // P, then dS
  const E *q = (const E *)base(gr->q), *k = (const E *)base(gr->k), *v = (const E *)base(gr->v);
  const E *dout = (const E *)base(gr->dout);   // (O is not read: sdpa_dscores_rows says why)
  const A *L = (const A *)base(gr->lse);
  E *dq = (E *)base(gr->dq), *dk = (E *)base(gr->dk), *dv = (E *)base(gr->dv);
  const Lay lq = lay_of(gr->q), lk = lay_of(gr->k), lv = lay_of(gr->v), lo = lay_of(gr->o), lg = lay_of(gr->dout);
  const Lay ldq = lay_of(gr->dq), ldk = lay_of(gr->dk), ldv = lay_of(gr->dv);
  for (int64_t b0 = 0, n; b0 < g.B; b0 += n) {
    n = next_chunk(b0, nb, g.B, {lq, lk, lv, lo, lg, ldq, ldk, ldv});
    const int64_t rows = n * T;
    const E *qc = q + lq.at(b0, 0), *kc = k + lk.at(b0, 0), *vc = v + lv.at(b0, 0), *gc = dout + lg.at(b0, 0);
    // Sc [T,S] = scale Q K^T  (as the forward)
    if (gemm<E>(op, false, true, T, S, D, g.scale, qc, lq.sr, lq.si, kc, lk.sr, lk.si, Blas<E>::acc, sc, S, T * S, n))
      return -1;
    if (rows > 0) {
      sdpa_probs_rows<E, A><<<grid_for(rows * 32), kThreads, 0, stream>>>(rows, T, S, g.causal, sc, L + b0 * T, P);
      LAUNCHED(op);
    }
    // dV [S,DV] = P^T (A = P stored [T,S] = [K,M] -> ta) dO [T,DV]
    if (gemm<E>(op, true, false, S, DV, T, 1.0, P, S, T * S, gc, lg.sr, lg.si, Blas<E>::io, dv + ldv.at(b0, 0), ldv.sr,
                 ldv.si, n))
      return -1;
    // dP [T,S] = dO [T,DV] V^T (B = V stored [S,DV] = [N,K] -> tb), over the scores
    if (gemm<E>(op, false, true, T, S, DV, 1.0, gc, lg.sr, lg.si, vc, lv.sr, lv.si, Blas<E>::acc, sc, S, T * S, n))
      return -1;
    if (rows > 0) {
      sdpa_dscores_rows<E, A><<<grid_for(rows * 32), kThreads, 0, stream>>>(rows, T, S, g.causal, sc, P);
      LAUNCHED(op);
    }
    // dQ [T,D] = scale dS [T,S] K [S,D]
    if (gemm<E>(op, false, false, T, D, S, g.scale, P, S, T * S, kc, lk.sr, lk.si, Blas<E>::io, dq + ldq.at(b0, 0), ldq.sr,
                 ldq.si, n))
      return -1;
    // dK [S,D] = scale dS^T (A = dS stored [T,S] = [K,M] -> ta) Q [T,D]
    if (gemm<E>(op, true, false, S, D, T, g.scale, P, S, T * S, qc, lq.sr, lq.si, Blas<E>::io, dk + ldk.at(b0, 0), ldk.sr,
                 ldk.si, n))
      return -1;
  }
  return 0;
}

}  // namespace

// The cuBLAS path of scaled_dot_product_attention (forward or backward), any
// supported storage dtype and head dims, contiguous operands or head views; called
// by attention.cu's kernel.  0 done, -1 error, 1 declined (empty views).
int sdpa_gemm(const nt_KernelArgs *a, bool backward) {
  const int64_t *ia = a->iarg;
  Geo g = {ia[NT_SDPA_B], ia[NT_SDPA_T], ia[NT_SDPA_S], ia[NT_SDPA_D], ia[NT_SDPA_DV], (int)ia[NT_SDPA_CAUSAL], a->s[0]};
  const char *op = backward ? "scaled_dot_product_attention_backward" : "scaled_dot_product_attention";
  if (handle_ready(op)) return -1;
  // empty views: declined (1, nothing written), the front end retries with contiguous
  // copies (a K = 0 GEMM zeroes its C with one memset, which wants C dense)
  if (a->niarg > NT_SDPA_VIEWS && ia[NT_SDPA_VIEWS] && (g.T == 0 || g.S == 0 || g.B == 0)) return 1;
  nt_DType dt = backward ? ((const nt_SdpaGrads *)a->extra)->q->dtype : a->out->dtype;
  switch (dt) {
    case NT_F32: return backward ? bwd<float>(a, g) : fwd<float>(a, g);
    case NT_F64: return backward ? bwd<double>(a, g) : fwd<double>(a, g);
    case NT_F16: return backward ? bwd<__half>(a, g) : fwd<__half>(a, g);
    case NT_BF16: return backward ? bwd<__nv_bfloat16>(a, g) : fwd<__nv_bfloat16>(a, g);
    default: break;
  }
  host->error_set("%s: unsupported dtype %s on cuda", op, nt_dtype_name(dt));
  return -1;
}

// Called once by nabla_cuda_init (module.cu): the handle exists before any op runs.
int sdpa_gemm_init(void) { return cublas_handle_new(&handle, "scaled_dot_product_attention"); }

}  // namespace ncu
