// cublas.cpp — the cuBLAS calls of the module, served by OpenBLAS for the
// emulated device (docs/cuda.md, "Emulated device").
//
// The point is to run the module's row-major -> column-major mapping
// (matmul.cu, attention_gemm.cu) against cuBLAS's own contract, so this
// implements that contract, not a convenient one:
//   * column-major, op(A) m x k, op(B) k x n, C m x n, leading dimensions
//     checked as cuBLAS does (lda >= max(1, rows of A as stored), ...);
//   * every operand must lie in device memory, whole — a wrong ld or stride
//     shows up as an illegal address at the next synchronisation, not as a
//     silently wrong product;
//   * strided batches (a stride of 0 broadcasts), alpha/beta in the compute
//     type (float for COMPUTE_32F*, double for COMPUTE_64F), beta == 0 never
//     reads C (NaN there does not propagate);
//   * compute types: f16/bf16 inputs are exact in f32 and the result is rounded
//     to the storage type once; CUBLAS_COMPUTE_32F_FAST_TF32 truncates the
//     inputs' mantissas to TF32's 10 bits first.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cblas.h>
#include <string.h>
#include <stdlib.h>
#include <vector>

namespace emu {
bool device_range_ok(const void *p, size_t n, const char *what);
}

struct cublasContext { cudaStream_t stream; };

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new cublasContext{ nullptr };
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
/* the OpenBLAS shim needs no workspace; the buffer is only checked to be there */
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *workspace, size_t bytes) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes && !workspace) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

namespace {

size_t elem_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

// one stored matrix: rows x cols column-major with leading dimension ld
struct Mat { const void *p; cudaDataType t; int rows, cols, ld; };

size_t extent_bytes(const Mat &m) {          // bytes from the first to one past the last element
  if (m.rows == 0 || m.cols == 0) return 0;
  return ((size_t)(m.cols - 1) * (size_t)m.ld + (size_t)m.rows) * elem_size(m.t);
}

float tf32(float x) {                         // keep 10 mantissa bits (truncation)
  unsigned u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u &= 0xffffe000u;
  memcpy(&x, &u, 4);
  return x;
}

// m's elements as floats, same layout (ld kept)
std::vector<float> to_f32(const Mat &m, bool tf) {
  std::vector<float> v(m.rows && m.cols ? (size_t)(m.cols - 1) * m.ld + m.rows : 0);
  for (int c = 0; c < m.cols; c++)
    for (int r = 0; r < m.rows; r++) {
      size_t i = (size_t)c * m.ld + r;
      float x;
      switch (m.t) {
        case CUDA_R_16F: x = __half2float(((const __half *)m.p)[i]); break;
        case CUDA_R_16BF: x = __bfloat162float(((const __nv_bfloat16 *)m.p)[i]); break;
        default: x = ((const float *)m.p)[i];
      }
      v[i] = tf ? tf32(x) : x;
    }
  return v;
}

void store_f32(void *C, cudaDataType t, int m, int n, int ldc, const std::vector<float> &v) {
  for (int c = 0; c < n; c++)
    for (int r = 0; r < m; r++) {
      size_t i = (size_t)c * ldc + r;
      if (t == CUDA_R_16F) ((__half *)C)[i] = __float2half_rn(v[i]);
      else if (t == CUDA_R_16BF) ((__nv_bfloat16 *)C)[i] = __float2bfloat16_rn(v[i]);
      else ((float *)C)[i] = v[i];
    }
}

CBLAS_TRANSPOSE cb(cublasOperation_t o) { return o == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

// One product C = alpha op(A) op(B) + beta C, operands already checked.
void gemm_one(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha, const Mat &A, const Mat &B,
              const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp) {
  if (comp == CUBLAS_COMPUTE_64F) {
    cblas_dgemm(CblasColMajor, cb(ta), cb(tb), m, n, k, *(const double *)alpha, (const double *)A.p, A.ld, (const double *)B.p, B.ld,
                *(const double *)beta, (double *)C, ldc);
    return;
  }
  const float al = *(const float *)alpha, be = *(const float *)beta;
  const bool tf = comp == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (A.t == CUDA_R_32F && ct == CUDA_R_32F && !tf) {
    cblas_sgemm(CblasColMajor, cb(ta), cb(tb), m, n, k, al, (const float *)A.p, A.ld, (const float *)B.p, B.ld, be, (float *)C, ldc);
    return;
  }
  std::vector<float> a = to_f32(A, tf), b = to_f32(B, tf), c((size_t)(n - 1) * ldc + m, 0.0f);
  if (be != 0) c = to_f32(Mat{ C, ct, m, n, ldc }, false);   // beta == 0: C is not read
  cblas_sgemm(CblasColMajor, cb(ta), cb(tb), m, n, k, al, a.data(), A.ld, b.data(), B.ld, be, c.data(), ldc);
  store_f32(C, ct, m, n, ldc, c);
}

// cuBLAS's argument checks, then every batch.
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                    const void *A, cudaDataType at, int lda, long long sA, const void *B, cudaDataType bt, int ldb, long long sB,
                    const void *beta, void *C, cudaDataType ct, int ldc, long long sC, int batch, cublasComputeType_t comp) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto op_ok = [](cublasOperation_t o) { return o == CUBLAS_OP_N || o == CUBLAS_OP_T || o == CUBLAS_OP_C; };
  if (!op_ok(ta) || !op_ok(tb) || m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  const int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
  const int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
  if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  // supported type / compute combinations (the subset of cuBLAS's table the module can ask for)
  const bool f32c = comp == CUBLAS_COMPUTE_32F || comp == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (comp == CUBLAS_COMPUTE_64F) { if (at != CUDA_R_64F || ct != CUDA_R_64F) return CUBLAS_STATUS_NOT_SUPPORTED; }
  else if (!f32c) return CUBLAS_STATUS_NOT_SUPPORTED;
  else if (at == CUDA_R_32F) { if (ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED; }
  else if (at == CUDA_R_16F || at == CUDA_R_16BF) { if (ct != at && ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED; }
  else return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t ea = elem_size(at), ec = elem_size(ct);
  for (int i = 0; i < batch; i++) {
    Mat Ma{ (const char *)A + (long long)i * sA * (long long)ea, at, arows, acols, lda };
    Mat Mb{ (const char *)B + (long long)i * sB * (long long)ea, bt, brows, bcols, ldb };
    void *Ci = (char *)C + (long long)i * sC * (long long)ec;
    Mat Mc{ Ci, ct, m, n, ldc };
    if (k > 0 && (!emu::device_range_ok(Ma.p, extent_bytes(Ma), "cublasGemmEx: matrix A") ||
                  !emu::device_range_ok(Mb.p, extent_bytes(Mb), "cublasGemmEx: matrix B")))
      return CUBLAS_STATUS_SUCCESS;         // as on a GPU: the fault surfaces at the next synchronisation
    if (!emu::device_range_ok(Ci, extent_bytes(Mc), "cublasGemmEx: matrix C")) return CUBLAS_STATUS_SUCCESS;
    gemm_one(ta, tb, m, n, k, alpha, Ma, Mb, beta, Ci, ct, ldc, comp);
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, comp);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at, int lda, long long sA, const void *B,
                                          cudaDataType bt, int ldb, long long sB, const void *beta, void *C, cudaDataType ct, int ldc,
                                          long long sC, int batch, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC, batch, comp);
}

}  // extern "C"
