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

#include <array>
#include <functional>

namespace emu {
bool device_range_ok(const void *p, size_t n, const char *what);
// api.cpp: while the stream captures a graph, fn is recorded for the replays (true)
bool capture_host_work(cudaStream_t st, std::function<void()> fn);
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
  // under stream capture the product is recorded, with alpha and beta as they
  // are now (host pointer mode: cuBLAS reads them when the call is made)
  std::array<char, 16> al{}, be{};
  memcpy(al.data(), alpha, comp == CUBLAS_COMPUTE_64F ? 8 : 4);
  memcpy(be.data(), beta, comp == CUBLAS_COMPUTE_64F ? 8 : 4);
  auto run = [=]() {
  const size_t ea = elem_size(at), ec = elem_size(ct);
  for (int i = 0; i < batch; i++) {
    Mat Ma{ (const char *)A + (long long)i * sA * (long long)ea, at, arows, acols, lda };
    Mat Mb{ (const char *)B + (long long)i * sB * (long long)ea, bt, brows, bcols, ldb };
    void *Ci = (char *)C + (long long)i * sC * (long long)ec;
    Mat Mc{ Ci, ct, m, n, ldc };
    if (k > 0 && (!emu::device_range_ok(Ma.p, extent_bytes(Ma), "cublasGemmEx: matrix A") ||
                  !emu::device_range_ok(Mb.p, extent_bytes(Mb), "cublasGemmEx: matrix B")))
      return;                               // as on a GPU: the fault surfaces at the next synchronisation
    if (!emu::device_range_ok(Ci, extent_bytes(Mc), "cublasGemmEx: matrix C")) return;
    gemm_one(ta, tb, m, n, k, al.data(), Ma, Mb, be.data(), Ci, ct, ldc, comp);
  }
  };
  if (!emu::capture_host_work(h->stream, run)) run();
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

// ---- cuBLASLt: the calls of cuda/linear.cu ----------------------------------------------
// cublasLtMatmul's contract for what the module asks of it, and a loud refusal
// (CUBLAS_STATUS_NOT_SUPPORTED plus a line on stderr) for anything else, so the
// emulated device never computes something other than what cuBLASLt would:
//   D = alpha op(A) op(B) + beta C    column-major, one matrix (BATCH_COUNT 1),
//                                     ORDER_COL layouts, C and D of one type
//   EPILOGUE_BIAS    D[i, j] += bias[i]   (bias length = rows of D), added to the
//                                     f32 accumulator before D is rounded
//   EPILOGUE_BGRADB  bias[j] = sum_k op(B)[k, j] (length = columns of D), the
//                                     reduction over the GEMM's k, stored in the
//                                     bias type
// Types: compute 32F (or 32F_FAST_TF32 with f32), scale f32; A = B in
// {f32, bf16, f16}; D = A's type, or f32 for bf16/f16 inputs; the bias vector
// in BIAS_DATA_TYPE (default: D's type).  The heuristic returns one algorithm
// for every supported configuration and none (NOT_SUPPORTED) otherwise.
#include <cublasLt.h>
#include <stdio.h>

struct cublasLtContext { int magic; };

namespace {

struct LtDesc {
  cublasComputeType_t comp;
  cudaDataType_t scale;
  int32_t transa, transb;
  uint32_t epilogue;
  const void *bias;
  int32_t bias_type;            // -1: D's type
};
struct LtLayout { cudaDataType_t type; uint64_t rows, cols; int64_t ld; };
struct LtPref { uint64_t workspace; uint32_t align[4]; };   // A, B, C, D: the minimum alignments the caller promises
static_assert(sizeof(LtDesc) <= sizeof(cublasLtMatmulDescOpaque_t), "LtDesc fits the opaque descriptor");
static_assert(sizeof(LtLayout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "LtLayout fits the opaque layout");
static_assert(sizeof(LtPref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "LtPref fits the opaque preference");

LtDesc *desc_of(cublasLtMatmulDesc_t d) { return reinterpret_cast<LtDesc *>(d); }
LtLayout *layout_of(cublasLtMatrixLayout_t l) { return reinterpret_cast<LtLayout *>(l); }
// the product and epilogue of cublasLtMatmul, its arguments checked (below)
void lt_run(const LtDesc *d, const LtLayout *A, const LtLayout *B, const LtLayout *C, const LtLayout *D, const void *Ap, const void *Bp,
            const void *Cp, void *Dp, int m, int n, int k, float al, float be, bool tf);

cublasStatus_t refuse(const char *what, long long v) {
  fprintf(stderr, "emulated cuBLASLt: %s %lld is not emulated (cuda/emu/cublas.cpp)\n", what, v);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cudaDataType_t bias_type_of(const LtDesc *d, const LtLayout *D) {
  return d->bias_type < 0 ? D->type : (cudaDataType_t)d->bias_type;
}

// the checks of the heuristic and of cublasLtMatmul; m, n, k out
cublasStatus_t lt_check(const LtDesc *d, const LtLayout *A, const LtLayout *B, const LtLayout *C, const LtLayout *D,
                        int *m, int *n, int *k) {
  if (!d || !A || !B || !C || !D) return CUBLAS_STATUS_INVALID_VALUE;
  const bool tf = d->comp == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (d->comp != CUBLAS_COMPUTE_32F && !tf) return refuse("compute type", d->comp);
  if (d->scale != CUDA_R_32F) return refuse("scale type", d->scale);
  if (A->type != B->type) return refuse("A and B of different types: B type", B->type);
  if (C->type != D->type || C->rows != D->rows || C->cols != D->cols || C->ld != D->ld) return refuse("C layout unlike D's: C type", C->type);
  if (A->type == CUDA_R_32F) { if (D->type != CUDA_R_32F) return refuse("D type with f32 inputs", D->type); }
  else if (A->type == CUDA_R_16BF || A->type == CUDA_R_16F) {
    if (tf) return refuse("TF32 compute with 16-bit inputs: A type", A->type);
    if (D->type != A->type && D->type != CUDA_R_32F) return refuse("D type", D->type);
  } else return refuse("A type", A->type);
  const uint64_t am = d->transa == CUBLAS_OP_N ? A->rows : A->cols, ak = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
  const uint64_t bk = d->transb == CUBLAS_OP_N ? B->rows : B->cols, bn = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
  if (am != D->rows || bn != D->cols || ak != bk) return CUBLAS_STATUS_INVALID_VALUE;
  if (D->rows > INT32_MAX || D->cols > INT32_MAX || ak > INT32_MAX) return CUBLAS_STATUS_INVALID_VALUE;
  for (const LtLayout *l : { A, B, D })
    if (l->ld < (int64_t)(l->rows > 1 ? l->rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS && d->epilogue != CUBLASLT_EPILOGUE_BGRADB)
    return refuse("epilogue", d->epilogue);
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    cudaDataType_t bt = bias_type_of(d, D);
    if (bt != D->type) return refuse("bias data type unlike D's: bias type", bt);
    if (!d->bias) return CUBLAS_STATUS_INVALID_VALUE;
  }
  *m = (int)D->rows; *n = (int)D->cols; *k = (int)ak;
  return CUBLAS_STATUS_SUCCESS;
}

float load_as_f32(const void *p, cudaDataType_t t, size_t i) {
  switch (t) {
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return ((const float *)p)[i];
  }
}
void store_from_f32(void *p, cudaDataType_t t, size_t i, float v) {
  if (t == CUDA_R_16F) ((__half *)p)[i] = __float2half_rn(v);
  else if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
  else ((float *)p)[i] = v;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new cublasLtContext{ 0x17 };
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t comp, cudaDataType_t scale) {
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  auto *o = new cublasLtMatmulDescOpaque_t();
  *desc_of(o) = LtDesc{ comp, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1 };
  *d = o;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t dd, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t n) {
  if (!dd || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  LtDesc *d = desc_of(dd);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: case CUBLASLT_MATMUL_DESC_TRANSB: {
      if (n != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      int32_t v; memcpy(&v, buf, 4);
      if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return refuse("transpose operation", v);
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      if (n != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      uint32_t v; memcpy(&v, buf, 4);
      if (v != CUBLASLT_EPILOGUE_DEFAULT && v != CUBLASLT_EPILOGUE_BIAS && v != CUBLASLT_EPILOGUE_BGRADB) return refuse("epilogue", v);
      d->epilogue = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&d->bias, buf, sizeof(void *));
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      if (n != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&d->bias_type, buf, 4);
      return CUBLAS_STATUS_SUCCESS;
    default: return refuse("matmul descriptor attribute", attr);
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  auto *o = new cublasLtMatrixLayoutOpaque_t();
  *layout_of(o) = LtLayout{ type, rows, cols, ld };
  *l = o;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const void *buf, size_t n) {
  (void)l; (void)buf; (void)n;
  return refuse("matrix layout attribute", attr);   // ORDER_COL, BATCH_COUNT 1: the defaults are all the module uses
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  *p = new cublasLtMatmulPreferenceOpaque_t();
  LtPref *pr = reinterpret_cast<LtPref *>(*p);
  for (uint32_t &a : pr->align) a = 256;               // cuBLASLt's default assumption
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t n) {
  if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  LtPref *pr = reinterpret_cast<LtPref *>(p);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (n != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&pr->workspace, buf, 8);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
      if (n != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      uint32_t v; memcpy(&v, buf, 4);
      if (!v || (v & (v - 1))) return CUBLAS_STATUS_INVALID_VALUE;
      pr->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    default: return refuse("preference attribute", attr);
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t res[], int *count) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!pref || requested < 1 || !res || !count) return CUBLAS_STATUS_INVALID_VALUE;
  *count = 0;
  int m, n, k;
  cublasStatus_t s = lt_check(desc_of(d), layout_of(A), layout_of(B), layout_of(C), layout_of(D), &m, &n, &k);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  memset(&res[0], 0, sizeof res[0]);
  res[0].algo.data[0] = 0x4c74;                     // marks an algorithm this heuristic returned
  for (int i = 0; i < 4; i++) res[0].algo.data[1 + i] = reinterpret_cast<LtPref *>(pref)->align[i];   // what it may assume
  res[0].workspaceSize = 0;
  res[0].state = CUBLAS_STATUS_SUCCESS;
  res[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, const void *alpha, const void *Ap, cublasLtMatrixLayout_t Al,
                              const void *Bp, cublasLtMatrixLayout_t Bl, const void *beta, const void *Cp, cublasLtMatrixLayout_t Cl,
                              void *Dp, cublasLtMatrixLayout_t Dl, const cublasLtMatmulAlgo_t *algo, void *workspace, size_t wsbytes,
                              cudaStream_t stream) {
  (void)workspace; (void)wsbytes;
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta || !Dp) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo && algo->data[0] != 0x4c74) return refuse("algorithm not returned by the heuristic:", (long long)algo->data[0]);
  const LtDesc *d = desc_of(dd);
  const LtLayout *A = layout_of(Al), *B = layout_of(Bl), *C = layout_of(Cl), *D = layout_of(Dl);
  int m, n, k;
  cublasStatus_t s = lt_check(d, A, B, C, D, &m, &n, &k);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // an algorithm chosen for aligned buffers faults on a GPU with a misaligned one
  const void *ptrs[4] = { Ap, Bp, Cp, Dp };
  for (int i = 0; algo && i < 4; i++)
    if ((uintptr_t)ptrs[i] % (algo->data[1 + i] ? algo->data[1 + i] : 1))
      return refuse("matrix pointer less aligned than the heuristic was promised: operand", i);
  const float al = *(const float *)alpha, be = *(const float *)beta;
  const bool tf = d->comp == CUBLAS_COMPUTE_32F_FAST_TF32;
  // the product runs now, or (the stream capturing a graph) at each replay,
  // with the descriptors and scalars as they are now
  const LtDesc dv = *d;
  const LtLayout Av = *A, Bv = *B, Cv = *C, Dv = *D;
  auto run = [=]() { lt_run(&dv, &Av, &Bv, &Cv, &Dv, Ap, Bp, Cp, Dp, m, n, k, al, be, tf); };
  if (!emu::capture_host_work(stream, run)) run();
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

namespace {
void lt_run(const LtDesc *d, const LtLayout *A, const LtLayout *B, const LtLayout *C, const LtLayout *D, const void *Ap, const void *Bp,
            const void *Cp, void *Dp, int m, int n, int k, float al, float be, bool tf) {
  Mat Ma{ Ap, A->type, (int)A->rows, (int)A->cols, (int)A->ld }, Mb{ Bp, B->type, (int)B->rows, (int)B->cols, (int)B->ld };
  Mat Md{ Dp, D->type, m, n, (int)D->ld }, Mc{ Cp, C->type, m, n, (int)C->ld };
  if (k > 0 && (!emu::device_range_ok(Ap, extent_bytes(Ma), "cublasLtMatmul: matrix A") ||
                !emu::device_range_ok(Bp, extent_bytes(Mb), "cublasLtMatmul: matrix B")))
    return;                                         // as on a GPU: the fault surfaces at the next synchronisation
  if (!emu::device_range_ok(Dp, extent_bytes(Md), "cublasLtMatmul: matrix D")) return;
  if (be != 0 && !emu::device_range_ok(Cp, extent_bytes(Mc), "cublasLtMatmul: matrix C")) return;
  const cudaDataType_t bt = bias_type_of(d, D);
  const size_t blen = d->epilogue == CUBLASLT_EPILOGUE_BIAS ? (size_t)m : (size_t)n;
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !emu::device_range_ok(d->bias, blen * elem_size(bt), "cublasLtMatmul: bias vector"))
    return;
  // the product in f32 (16-bit inputs are exact in f32), then the epilogue, then one rounding to D's type
  std::vector<float> a = to_f32(Ma, tf), b = to_f32(Mb, tf), c((size_t)(n - 1) * D->ld + m, 0.0f);
  if (be != 0) c = to_f32(Mc, false);
  if (k > 0)
    cblas_sgemm(CblasColMajor, cb((cublasOperation_t)d->transa), cb((cublasOperation_t)d->transb), m, n, k, al, a.data(), (int)A->ld,
                b.data(), (int)B->ld, be, c.data(), (int)D->ld);
  else for (float &x : c) x *= be;
  if (d->epilogue == CUBLASLT_EPILOGUE_BIAS)
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) c[(size_t)j * D->ld + i] += load_as_f32(d->bias, bt, (size_t)i);
  if (d->epilogue == CUBLASLT_EPILOGUE_BGRADB)      // sum over k of op(B)[kk, j]
    for (int j = 0; j < n; j++) {
      float acc = 0;
      for (int kk = 0; kk < k; kk++)
        acc += d->transb == CUBLAS_OP_N ? b[(size_t)j * B->ld + kk] : b[(size_t)kk * B->ld + j];
      store_from_f32(const_cast<void *>(d->bias), bt, (size_t)j, acc);
    }
  store_f32(Dp, D->type, m, n, (int)D->ld, c);
}

}  // namespace
