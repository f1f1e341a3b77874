// linear.cu — y = x W^T + b and its backward (op ids "linear" and
// "linear_backward"; front end tensor/nn/linear.c, argument blocks there and
// in tensor/nn/linear.h), through cuBLASLt with epilogues, as llm.c's
// matmul_forward_cublaslt / matmul_backward.
//
// Row-major shapes: X [M, K], W [N, K] (PyTorch's [out, in]), b [N], Y [M, N],
// G = dL/dY [M, N].  cuBLAS(Lt) is column-major: a row-major R x C matrix with
// row stride ld IS the column-major C x R matrix with leading dimension ld.  So
//   forward  Y^T (N x M) = op_T(W: K x N, ld K) * X^T (K x M, ld K)
//            m = N, n = M, k = K, transa = T;  EPILOGUE_BIAS adds b[i] to row i
//            of Y^T (= column i of Y) before the result is rounded
//   dX       dX^T (K x M) = W (K x N, ld K) * G^T (N x M, ld N)       m = K, n = M, k = N
//   dW       dW^T (K x N) = X^T (K x M, ld K) * op_T(G^T: N x M, ld N)  m = K, n = N, k = M
//            EPILOGUE_BGRADB writes db[j] = sum_k op(B)[k, j] = sum over the M
//            rows of G: the bias gradient rides on the dW GEMM (no extra pass)
// Under autocast the inputs are bf16/f16 and dW/db are written in f32 directly
// (A/B 16-bit, D f32, compute 32F: the master weight's gradient, no cast).
// When cuBLASLt does not apply (cuda/linear_plan.h: dtype, sizes, alignment)
// or its heuristic offers no algorithm, the classic path: cublasGemmEx plus a
// bias-add kernel (forward) and a column-sum kernel (bias gradient).
// f32 honours the matmul precision flag (TF32 after set_matmul_precision("high")).
#include "common.cuh"
#include "cuda/linear_plan.h"
#include "tensor/nn/linear.h"
#include <cublas_v2.h>
#include <cublasLt.h>

namespace ncu {

const char *cublas_status_str(cublasStatus_t s);   // matmul.cu
cublasHandle_t matmul_cublas_handle(void);         // matmul.cu
int gemm_issued(const char *op);                   // matmul.cu: the check after a cuBLAS(Lt) call (not a launch)

namespace {

cublasLtHandle_t lt;
void *lt_ws;            // workspace from the caching allocator, kept for the process
size_t lt_ws_bytes;

#define LT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    host->error_set("%s: cuBLASLt error in %s: %s (%d)", opname, #call, cublas_status_str(s_), (int)s_); return -1; } } while (0)

cudaDataType_t cuda_type(nt_DType dt) {
  switch (dt) {
    case NT_F32: return CUDA_R_32F;
    case NT_F64: return CUDA_R_64F;
    case NT_F16: return CUDA_R_16F;
    default: return CUDA_R_16BF;
  }
}

// Descriptors freed on every return path.
struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Column-major D (m x n, ld ldd) = op(A) op(B) [+ epilogue] through cuBLASLt.
// A is stored (ta == N ? m x k : k x m), B (tb == N ? k x n : n x k).
// 0 done; 1 the heuristic offered no algorithm (the caller takes the classic
// path); -1 error set.
int lt_matmul(const char *opname, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
              const void *A, int64_t lda, const void *B, int64_t ldb, nt_DType in, void *D, int64_t ldd, nt_DType out,
              cublasLtEpilogue_t epi, void *bias) {
  LtCall c;
  cublasComputeType_t comp = in == NT_F32 && *host->matmul_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cudaDataType_t it = cuda_type(in), ot = cuda_type(out);
  LT(cublasLtMatmulDescCreate(&c.desc, comp, CUDA_R_32F));
  int32_t opa = ta, opb = tb;
  uint32_t ep = epi;
  LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  LT(cublasLtMatrixLayoutCreate(&c.a, it, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
  LT(cublasLtMatrixLayoutCreate(&c.b, it, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
  LT(cublasLtMatrixLayoutCreate(&c.d, ot, m, n, ldd));
  LT(cublasLtMatmulPreferenceCreate(&c.pref));
  uint64_t ws = lt_ws_bytes;
  LT(cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  // the actual alignments (the heuristic assumes 256 bytes otherwise)
  uint32_t al[4] = { ncl_align((uintptr_t)A), ncl_align((uintptr_t)B), ncl_align((uintptr_t)D), ncl_align((uintptr_t)D) };
  const cublasLtMatmulPreferenceAttributes_t pa[4] = { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                       CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES };
  for (int i = 0; i < 4; i++) LT(cublasLtMatmulPreferenceSetAttribute(c.pref, pa[i], &al[i], sizeof al[i]));
  cublasLtMatmulHeuristicResult_t res;
  int count = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, c.desc, c.a, c.b, c.d, c.d, c.pref, 1, &res, &count);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && count == 0)) return 1;
  LT(s);
  const float alpha = 1, beta = 0;
  LT(cublasLtMatmul(lt, c.desc, &alpha, A, c.a, B, c.b, &beta, D, c.d, D, c.d, &res.algo, lt_ws, lt_ws_bytes, stream));
  if (gemm_issued(opname)) return -1;   // one GPU operation: the GEMM (common.cuh counts it)
  return 0;
}

// Column-major D = op(A) op(B) through cublasGemmEx (any sizes and alignment).
int classic_gemm(const char *opname, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                 const void *A, int64_t lda, const void *B, int64_t ldb, nt_DType in, void *D, int64_t ldd, nt_DType out) {
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldd > INT32_MAX) {
    host->error_set("%s: dimensions of 2^31 and more are not supported on cuda", opname);
    return -1;
  }
  float af = 1, bf = 0;
  double ad = 1, bd = 0;
  const bool f64 = in == NT_F64;
  cublasComputeType_t comp = f64 ? CUBLAS_COMPUTE_64F : in == NT_F32 && *host->matmul_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasStatus_t s = cublasGemmEx(matmul_cublas_handle(), ta, tb, (int)m, (int)n, (int)k, f64 ? (const void *)&ad : &af, A, cuda_type(in), (int)lda,
                                  B, cuda_type(in), (int)ldb, f64 ? (const void *)&bd : &bf, D, cuda_type(out), (int)ldd, comp, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    host->error_set("%s: cuBLAS error in cublasGemmEx: %s (%d); last op launched: %s", opname, cublas_status_str(s), (int)s, last_op);
    return -1;
  }
  if (gemm_issued(opname)) return -1;
  return 0;
}

// y[r, j] += b[j] over a contiguous [rows, N] y, in the compute type, rounded once.
template <typename T>
__global__ void bias_add_kernel(T *y, const T *b, int64_t rows, int64_t N) {
  int64_t total = rows * N;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x)
    y[e] = St<T>::from(ld(y[e]) + ld(b[e % N]));
}

// db[j] = sum_r g[r, j] over a contiguous [rows, N] g: one thread per column
// (consecutive threads read consecutive columns: coalesced), accumulated in
// the compute type (f32 for 16-bit), rounded once into db's dtype.
template <typename T, typename O>
__global__ void col_sum_kernel(O *db, const T *g, int64_t rows, int64_t N) {
  typedef typename Comp<T>::type A;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < N; j += (int64_t)gridDim.x * blockDim.x) {
    A acc = 0;
    for (int64_t r = 0; r < rows; r++) acc += ld(g[r * N + j]);
    db[j] = St<O>::from(acc);
  }
}

template <typename F> int by_float_type(nt_DType dt, F f) {
  switch (dt) {
    case NT_F32: return f.template operator()<float>();
    case NT_F64: return f.template operator()<double>();
    case NT_F16: return f.template operator()<__half>();
    case NT_BF16: return f.template operator()<__nv_bfloat16>();
    default: host->error_set("linear: not supported for dtype %s on cuda", nt_dtype_name(dt)); return -1;
  }
}

int bias_add(const char *opname, nt_Tensor *y, const nt_Tensor *b, int64_t rows, int64_t N) {
  if (rows * N == 0) return 0;
  return by_float_type(y->dtype, [&]<typename T>() {
    bias_add_kernel<T><<<grid_for(rows * N), kThreads, 0, stream>>>((T *)base(y), (const T *)base(b), rows, N);
    LAUNCHED(opname);
    return 0;
  });
}

int col_sum(const char *opname, nt_Tensor *db, const nt_Tensor *g, int64_t rows, int64_t N) {
  if (N == 0) return 0;
  return by_float_type(g->dtype, [&]<typename T>() {
    return by_float_type(db->dtype, [&]<typename O>() {
      col_sum_kernel<T, O><<<grid_for(N), kThreads, 0, stream>>>((O *)base(db), (const T *)base(g), rows, N);
      LAUNCHED(opname);
      return 0;
    });
  });
}

int zero(nt_Tensor *t, const char *opname) {
  if (!t || t->numel == 0) return 0;
  CU(cudaMemsetAsync(base(t), 0, (size_t)t->numel * nt_dtype_size(t->dtype), stream));
  last_op = opname;
  return 0;
}

bool contiguous(const nt_Tensor *t) { return !t || ((t->flags & NT_T_CONTIG) && t->device == NT_CUDA); }

// forward: out Y [.., N] contiguous; in = {X [M, K], W [N, K], b [N] | NULL}, all contiguous, one dtype
int k_linear(const nt_KernelArgs *a) {
  const char *opname = "linear";
  nt_Tensor *y = a->out, *x = a->in[0], *w = a->in[1], *b = a->in[2];
  int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
  nt_DType dt = y->dtype;
  if (x->dtype != dt || w->dtype != dt || (b && b->dtype != dt) || !contiguous(x) || !contiguous(w) || !contiguous(b) || !contiguous(y)) {
    host->error_set("linear: cuda kernel needs contiguous inputs of the output's dtype");
    return -1;
  }
  if (M == 0 || N == 0) return 0;
  if (K == 0) {                                   // y = b broadcast (or 0)
    if (zero(y, opname)) return -1;
    return b ? bias_add(opname, y, b, M, N) : 0;
  }
  const uintptr_t ptrs[4] = { (uintptr_t)base(x), (uintptr_t)base(w), (uintptr_t)base(y), b ? (uintptr_t)base(b) : 0 };
  if (ncl_lt_ok(dt, dt, M, N, K, ptrs, 4, nullptr)) {
    int r = lt_matmul(opname, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, base(w), K, base(x), K, dt, base(y), N, dt,
                      b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, b ? base(b) : nullptr);
    if (r <= 0) return r;
  }
  if (classic_gemm(opname, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, base(w), K, base(x), K, dt, base(y), N, dt)) return -1;
  return b ? bias_add(opname, y, b, M, N) : 0;
}

// backward: extra = nt_LinearGrads (tensor/nn/linear.h)
int k_linear_backward(const nt_KernelArgs *a) {
  const char *opname = "linear_backward";
  const nt_LinearGrads *gr = (const nt_LinearGrads *)a->extra;
  nt_Tensor *g = gr->g, *x = gr->x, *w = gr->w;   // x: NULL unless dW is wanted
  int64_t M = g->shape[0], N = g->shape[1], K = w->shape[1];
  nt_DType dt = g->dtype;
  for (nt_Tensor *t : { g, x, w, gr->dx, gr->dw, gr->db })
    if (!contiguous(t)) { host->error_set("linear backward: cuda kernel needs contiguous cuda tensors"); return -1; }
  if ((gr->dw && !x) || (x && x->dtype != dt) || w->dtype != dt || (gr->dx && gr->dx->dtype != dt) || (gr->dw && gr->db && gr->db->dtype != gr->dw->dtype)) {
    host->error_set("linear backward: dtypes do not match (tensor/nn/linear.h)");
    return -1;
  }
  if (gr->dx && M > 0 && K > 0) {                        // dX^T (K x M) = W (K x N) G^T (N x M)
    if (N == 0) { if (zero(gr->dx, opname)) return -1; }
    else {
      const uintptr_t p[3] = { (uintptr_t)base(w), (uintptr_t)base(g), (uintptr_t)base(gr->dx) };
      int r = 1;
      if (ncl_lt_ok(dt, dt, M, N, K, p, 3, nullptr))
        r = lt_matmul(opname, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, base(w), K, base(g), N, dt, base(gr->dx), K, dt, CUBLASLT_EPILOGUE_DEFAULT, nullptr);
      if (r < 0 || (r == 1 && classic_gemm(opname, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, base(w), K, base(g), N, dt, base(gr->dx), K, dt))) return -1;
    }
  }
  bool db_done = false;
  if (gr->dw && N > 0 && K > 0) {                        // dW^T (K x N) = X^T (K x M) op_T(G^T) (M x N), db by BGRADB
    nt_DType ot = gr->dw->dtype;
    if (M == 0) { if (zero(gr->dw, opname) || zero(gr->db, opname)) return -1; db_done = true; }
    else {
      const uintptr_t p[4] = { (uintptr_t)base(x), (uintptr_t)base(g), (uintptr_t)base(gr->dw), gr->db ? (uintptr_t)base(gr->db) : 0 };
      int r = 1;
      if (ncl_lt_ok(dt, ot, M, N, K, p, 4, nullptr)) {
        r = lt_matmul(opname, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, base(x), K, base(g), N, dt, base(gr->dw), K, ot,
                      gr->db ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT, gr->db ? base(gr->db) : nullptr);
        db_done = r == 0;
      }
      if (r < 0 || (r == 1 && classic_gemm(opname, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, base(x), K, base(g), N, dt, base(gr->dw), K, ot))) return -1;
    }
  }
  if (gr->db && !db_done) {
    if (M == 0) return zero(gr->db, opname);
    return col_sum(opname, gr->db, g, M, N);
  }
  return 0;
}

}  // namespace

// The cuBLASLt handle and its workspace (the size cuBLAS's own handles get,
// matmul.cu); called from register_matmul.  0, or -1 with the error set.
int register_linear(void) {
  cublasStatus_t s = cublasLtCreate(&lt);
  if (s != CUBLAS_STATUS_SUCCESS) { host->error_set("linear: cublasLtCreate failed: %s (%d)", cublas_status_str(s), (int)s); return -1; }
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) { cudaGetLastError(); major = 0; }
  lt_ws_bytes = major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
  lt_ws = dev_alloc(lt_ws_bytes);
  if (!lt_ws) { host->error_set("linear: cannot allocate the %zu-byte cuBLASLt workspace", lt_ws_bytes); return -1; }
  host->register_kernel(host->op_register("linear"), NT_CUDA, k_linear);
  host->register_kernel(host->op_register("linear_backward"), NT_CUDA, k_linear_backward);
  return 0;
}

}  // namespace ncu
