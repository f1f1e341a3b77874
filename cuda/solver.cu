// solver.cu — the linalg factorization kernels through cuSOLVER's dense API:
// LU (getrf/getrs), Cholesky (potrf), QR (geqrf/orgqr), symmetric eigen
// (syevd) and SVD (gesvd).  The buffers and what each kernel writes are
// tensor/linalg/linternal.h's: column-major matrices [B, cols, rows],
// contiguous, f32/f64, pivots and info i32; the CPU kernels (LAPACK,
// tensor/linalg/lkernels.c) keep the same contract, so the front ends check
// info and report singular / non-positive-definite input the same way.
// linalg_trtrs has no kernel here: cuSOLVER has no trtrs, and the core moves
// its buffers through the host (tensor/linalg/lcore.c: lin_run).
//
// Loading: cuSOLVER is dlopened on first use (libcusolver.so.12, .so.11, then
// /usr/local/cuda/lib64), never linked; a missing library fails the call with
// the loader's reason.  The emulated module binds the stand-in over LAPACK
// that cuda/emu/cusolver.cpp links into it instead.
//
// Batches: one rule (use_batched) picks between one call per matrix, queued
// on ncu::stream, and the batched routines that factor many small matrices
// in one launch: a batch of at least kBatchMin matrices of order at most
// kBatchMaxN goes to cuBLAS's batched LU (cublas<t>getrfBatched /
// getrsBatched: LU lives in cuBLAS, not cuSOLVER) and cuSOLVER's
// potrfBatched, eigh of order at most 32 to cuSOLVER's syevjBatched, and
// SVDs of m, n <= 32 to gesvdjBatched (both Jacobi: 32 is their documented
// limit); everything else, and qr at any size, loops.
// The batched calls take an array of device pointers, one per matrix
// (fill_ptrs builds it on the device), and write one info per matrix, the
// same info the looped path writes, so the front ends' errors and *_ex info
// do not depend on the path.  Workspace from the caching allocator, sized
// once per call by the *_bufferSize query.
//
// linalg.eig (linalg_geev) runs cusolverDnXgeev (CUDA 12.6+), loaded apart
// from the rest: an older library without it leaves every other kernel
// working and fails eig with that reason.
#include "common.cuh"
#include "vendor_load.cuh"
#include <cublas_v2.h>
#include <cusolverDn.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

namespace ncu {

cublasHandle_t matmul_cublas_handle(void);         // matmul.cu: on ncu::stream
const char *cublas_status_str(cublasStatus_t s);   // matmul.cu

namespace {

// The batched rule: at least kBatchMin matrices of order at most kBatchMaxN.
// Small matrices leave a per-matrix call mostly launch overhead (the issue's
// 64 x 64 x 64 case: 64 launches of a few microseconds' work each); large
// ones fill the GPU on their own, where the blocked per-matrix routines win.
constexpr int64_t kBatchMin = 8;
constexpr int kBatchMaxN = 64;
bool use_batched(int64_t B, int n) { return B >= kBatchMin && n <= kBatchMaxN; }
// syevjBatched (Jacobi) takes matrices of order at most 32 only
constexpr int kSyevjMaxN = 32;
// gesvdjBatched (Jacobi) likewise: m, n <= 32
constexpr int kGesvdjMaxN = 32;
// matrices per batched call: batchSize is an int, and a bounded pointer array
constexpr int64_t kBatchChunk = 1 << 16;

// cuBLAS's batched LU, by precision
cublasStatus_t getrf_batched(cublasHandle_t h, int n, float *const A[], int lda, int *P, int *info, int nb) {
  return cublasSgetrfBatched(h, n, A, lda, P, info, nb);
}
cublasStatus_t getrf_batched(cublasHandle_t h, int n, double *const A[], int lda, int *P, int *info, int nb) {
  return cublasDgetrfBatched(h, n, A, lda, P, info, nb);
}
cublasStatus_t getrs_batched(cublasHandle_t h, cublasOperation_t t, int n, int nrhs, const float *const A[], int lda, const int *P,
                             float *const B[], int ldb, int *info, int nb) {
  return cublasSgetrsBatched(h, t, n, nrhs, A, lda, P, B, ldb, info, nb);
}
cublasStatus_t getrs_batched(cublasHandle_t h, cublasOperation_t t, int n, int nrhs, const double *const A[], int lda, const int *P,
                             double *const B[], int ldb, int *info, int nb) {
  return cublasDgetrsBatched(h, t, n, nrhs, A, lda, P, B, ldb, info, nb);
}
int blas_fail(const char *op, const char *what, cublasStatus_t st) {
  host->error_set("%s: cuBLAS %s failed: %s (%d)", op, what, cublas_status_str(st), (int)st);
  return -1;
}
#define BLAS(call, what) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) return blas_fail(op, what, st_); } while (0)
}  // namespace

namespace {

template <typename T> struct Ops {
  cusolverStatus_t (*getrf_bs)(cusolverDnHandle_t, int, int, T *, int, int *);
  cusolverStatus_t (*getrf)(cusolverDnHandle_t, int, int, T *, int, T *, int *, int *);
  cusolverStatus_t (*getrs)(cusolverDnHandle_t, cublasOperation_t, int, int, const T *, int, const int *, T *, int, int *);
  cusolverStatus_t (*potrf_bs)(cusolverDnHandle_t, cublasFillMode_t, int, T *, int, int *);
  cusolverStatus_t (*potrf)(cusolverDnHandle_t, cublasFillMode_t, int, T *, int, T *, int, int *);
  cusolverStatus_t (*geqrf_bs)(cusolverDnHandle_t, int, int, T *, int, int *);
  cusolverStatus_t (*geqrf)(cusolverDnHandle_t, int, int, T *, int, T *, T *, int, int *);
  cusolverStatus_t (*orgqr_bs)(cusolverDnHandle_t, int, int, int, const T *, int, const T *, int *);
  cusolverStatus_t (*orgqr)(cusolverDnHandle_t, int, int, int, T *, int, const T *, T *, int, int *);
  cusolverStatus_t (*syevd_bs)(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int, const T *, int, const T *, int *);
  cusolverStatus_t (*syevd)(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int, T *, int, T *, T *, int, int *);
  cusolverStatus_t (*gesvd_bs)(cusolverDnHandle_t, int, int, int *);
  cusolverStatus_t (*gesvd)(cusolverDnHandle_t, signed char, signed char, int, int, T *, int, T *, T *, int, T *, int, T *, int, T *, int *);
  cusolverStatus_t (*potrf_batched)(cusolverDnHandle_t, cublasFillMode_t, int, T *[], int, int *, int);
  cusolverStatus_t (*syevjb_bs)(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int, const T *, int, const T *, int *, syevjInfo_t, int);
  cusolverStatus_t (*syevjb)(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int, T *, int, T *, T *, int, int *, syevjInfo_t, int);
  cusolverStatus_t (*gesvdjb_bs)(cusolverDnHandle_t, cusolverEigMode_t, int, int, const T *, int, const T *, const T *, int, const T *, int,
                                 int *, gesvdjInfo_t, int);
  cusolverStatus_t (*gesvdjb)(cusolverDnHandle_t, cusolverEigMode_t, int, int, T *, int, T *, T *, int, T *, int, T *, int, int *,
                              gesvdjInfo_t, int);
};
Ops<float> ops_s;
Ops<double> ops_d;
template <typename T> Ops<T> &ops();
template <> Ops<float> &ops<float>() { return ops_s; }
template <> Ops<double> &ops<double>() { return ops_d; }

cusolverStatus_t (*sv_create)(cusolverDnHandle_t *);
cusolverStatus_t (*sv_set_stream)(cusolverDnHandle_t, cudaStream_t);
cusolverStatus_t (*sv_create_syevj)(syevjInfo_t *);
syevjInfo_t syevj_params;   // defaults: tolerance machine epsilon, 100 sweeps, eigenvalues ascending
cusolverStatus_t (*sv_create_gesvdj)(gesvdjInfo_t *);
gesvdjInfo_t gesvdj_params; // defaults: tolerance machine epsilon, 100 sweeps, singular values descending
cusolverDnHandle_t handle;
// Xgeev (64-bit API, CUDA 12.6+): optional; geev_reason says why it is absent
cusolverStatus_t (*sv_create_params)(cusolverDnParams_t *);
cusolverStatus_t (*xgeev_bs)(cusolverDnHandle_t, cusolverDnParams_t, cusolverEigMode_t, cusolverEigMode_t, int64_t, cudaDataType,
                             const void *, int64_t, cudaDataType, const void *, cudaDataType, const void *, int64_t, cudaDataType,
                             const void *, int64_t, cudaDataType, size_t *, size_t *);
cusolverStatus_t (*xgeev)(cusolverDnHandle_t, cusolverDnParams_t, cusolverEigMode_t, cusolverEigMode_t, int64_t, cudaDataType, void *,
                          int64_t, cudaDataType, void *, cudaDataType, void *, int64_t, cudaDataType, void *, int64_t, cudaDataType,
                          void *, size_t, void *, size_t, int *);
cusolverDnParams_t geev_params;
char geev_reason[300] = "";
pthread_once_t once = PTHREAD_ONCE_INIT;
bool ready;
char reason[600] = "not loaded";

// X(prefix, field, name): every routine of both precisions
#define SOLVER_ROUTINES(X)                                                                   \
  X(S, getrf_bs, getrf_bufferSize) X(S, getrf, getrf) X(S, getrs, getrs)                     \
  X(S, potrf_bs, potrf_bufferSize) X(S, potrf, potrf) X(S, geqrf_bs, geqrf_bufferSize)       \
  X(S, geqrf, geqrf) X(S, orgqr_bs, orgqr_bufferSize) X(S, orgqr, orgqr)                     \
  X(S, syevd_bs, syevd_bufferSize) X(S, syevd, syevd) X(S, gesvd_bs, gesvd_bufferSize)       \
  X(S, gesvd, gesvd) X(S, potrf_batched, potrfBatched)                                       \
  X(S, syevjb_bs, syevjBatched_bufferSize) X(S, syevjb, syevjBatched)                         \
  X(S, gesvdjb_bs, gesvdjBatched_bufferSize) X(S, gesvdjb, gesvdjBatched)                      \
  X(D, getrf_bs, getrf_bufferSize) X(D, getrf, getrf) X(D, getrs, getrs)                     \
  X(D, potrf_bs, potrf_bufferSize) X(D, potrf, potrf) X(D, geqrf_bs, geqrf_bufferSize)       \
  X(D, geqrf, geqrf) X(D, orgqr_bs, orgqr_bufferSize) X(D, orgqr, orgqr)                     \
  X(D, syevd_bs, syevd_bufferSize) X(D, syevd, syevd) X(D, gesvd_bs, gesvd_bufferSize)       \
  X(D, gesvd, gesvd) X(D, potrf_batched, potrfBatched)                                       \
  X(D, syevjb_bs, syevjBatched_bufferSize) X(D, syevjb, syevjBatched)                         \
  X(D, gesvdjb_bs, gesvdjBatched_bufferSize) X(D, gesvdjb, gesvdjBatched)
#define OPS_S ops_s
#define OPS_D ops_d

void load_solver(void) {
#ifdef NABLA_CUDA_EMU
  // the stand-in over LAPACK (cuda/emu/cusolver.cpp) is linked into this module
  sv_create = &::cusolverDnCreate;
  sv_set_stream = &::cusolverDnSetStream;
  sv_create_syevj = &::cusolverDnCreateSyevjInfo;
  sv_create_gesvdj = &::cusolverDnCreateGesvdjInfo;
#define BIND(P, field, name) OPS_##P.field = &::cusolverDn##P##name;
  SOLVER_ROUTINES(BIND)
#undef BIND
  sv_create_params = &::cusolverDnCreateParams;
  xgeev_bs = &::cusolverDnXgeev_bufferSize;
  xgeev = &::cusolverDnXgeev;
#else
  const char *cands[] = { "libcusolver.so.12", "libcusolver.so.11", "/usr/local/cuda/lib64/libcusolver.so.12" };
  char first[400];
  void *h = dlopen_first(cands, sizeof cands / sizeof *cands, first, sizeof first);
  if (!h) { snprintf(reason, sizeof reason, "cuSOLVER is not available: %s", first); return; }
  const char *missing = nullptr;
  if (!(*(void **)&sv_create = dlsym(h, "cusolverDnCreate"))) missing = "cusolverDnCreate";
  if (!(*(void **)&sv_set_stream = dlsym(h, "cusolverDnSetStream"))) missing = "cusolverDnSetStream";
  if (!(*(void **)&sv_create_syevj = dlsym(h, "cusolverDnCreateSyevjInfo"))) missing = "cusolverDnCreateSyevjInfo";
  if (!(*(void **)&sv_create_gesvdj = dlsym(h, "cusolverDnCreateGesvdjInfo"))) missing = "cusolverDnCreateGesvdjInfo";
#define BIND(P, field, name) if (!(*(void **)&OPS_##P.field = dlsym(h, "cusolverDn" #P #name))) missing = "cusolverDn" #P #name;
  SOLVER_ROUTINES(BIND)
#undef BIND
  if (missing) { snprintf(reason, sizeof reason, "cuSOLVER is not usable: the loaded library has no %s", missing); return; }
  *(void **)&sv_create_params = dlsym(h, "cusolverDnCreateParams");
  *(void **)&xgeev_bs = dlsym(h, "cusolverDnXgeev_bufferSize");
  *(void **)&xgeev = dlsym(h, "cusolverDnXgeev");
  if (!sv_create_params || !xgeev_bs || !xgeev)
    snprintf(geev_reason, sizeof geev_reason, "the loaded cuSOLVER has no cusolverDnXgeev (it needs CUDA 12.6 or newer)");
#endif
  cusolverStatus_t st = sv_create(&handle);
  if (st == CUSOLVER_STATUS_SUCCESS) st = sv_set_stream(handle, stream);
  if (st == CUSOLVER_STATUS_SUCCESS) st = sv_create_syevj(&syevj_params);
  if (st == CUSOLVER_STATUS_SUCCESS) st = sv_create_gesvdj(&gesvdj_params);
  if (st != CUSOLVER_STATUS_SUCCESS) { snprintf(reason, sizeof reason, "cuSOLVER is not usable: cusolverDnCreate failed (status %d)", (int)st); return; }
  if (!geev_reason[0] && (st = sv_create_params(&geev_params)) != CUSOLVER_STATUS_SUCCESS)
    snprintf(geev_reason, sizeof geev_reason, "cusolverDnCreateParams failed (status %d)", (int)st);
  ready = true;
}

int solver_ready(const char *op) {
  pthread_once(&once, load_solver);
  if (ready) return 0;
  host->error_set("%s: %s", op, reason);
  return -1;
}

int solver_fail(const char *op, const char *what, cusolverStatus_t st) {
  host->error_set("%s: cuSOLVER %s failed (status %d)", op, what, (int)st);
  return -1;
}
#define SOLVE(call, what) do { cusolverStatus_t st_ = (call); if (st_ != CUSOLVER_STATUS_SUCCESS) return solver_fail(op, what, st_); } while (0)

// a buffer's device pointer (NULL for an absent buffer)
#define SPTR(T, t) ((t) ? (T *)base(t) : (T *)nullptr)

int64_t batch_of(const nt_Tensor *t) {
  int64_t b = 1;
  for (int i = 0; i < t->ndim - 2; i++) b *= t->shape[i];
  return b;
}
int rows(const nt_Tensor *t) { return (int)t->shape[t->ndim - 1]; }   // column-major [B, cols, rows]
int cols(const nt_Tensor *t) { return (int)t->shape[t->ndim - 2]; }
cublasFillMode_t fill(int64_t upper) { return upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER; }

// ---- small kernels ------------------------------------------------------------------------
// zero the triangle LAPACK/cuSOLVER leave untouched: element (i, j) of matrix b at b n^2 + j n + i
template <typename T> __global__ void zero_triangle(T *a, int64_t total, int n, bool upper) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int i = (int)(e % n), j = (int)(e / n % n);
    if (upper ? i > j : i < j) a[e] = T(0);
  }
}
// out (cols x rows, column-major) = in^T (rows x cols, column-major), per batch
template <typename T> __global__ void transpose_batch(const T *in, T *out, int64_t total, int r, int c) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = e / ((int64_t)r * c), k = e % ((int64_t)r * c);
    int i = (int)(k % r), j = (int)(k / r);             // in[i, j] at j r + i
    out[b * r * c + (int64_t)i * c + j] = in[e];
  }
}
// R (rr x n): the upper triangle of geqrf's first rr rows; Q (m x qc): its first
// min(qc, n) columns (the reflectors), zero beyond
template <typename T> __global__ void qr_split(const T *a, T *r, T *q, int64_t B, int m, int n, int rr, int qc) {
  int64_t nr = B * rr * n, nq = q ? B * m * qc : 0;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < nr + nq; e += (int64_t)gridDim.x * blockDim.x) {
    if (e < nr) {
      int64_t b = e / ((int64_t)rr * n), k = e % ((int64_t)rr * n);
      int i = (int)(k % rr), j = (int)(k / rr);
      r[e] = i <= j && i < m ? a[b * m * n + (int64_t)j * m + i] : T(0);
    } else {
      int64_t f = e - nr, b = f / ((int64_t)m * qc), k = f % ((int64_t)m * qc);
      int i = (int)(k % m), j = (int)(k / m);
      q[f] = j < n ? a[b * m * n + (int64_t)j * m + i] : T(0);
    }
  }
}

// ptrs[b] = base + b * stride: the device pointer array the batched routines take
template <typename T> __global__ void fill_ptrs(T **ptrs, T *base, int64_t stride, int64_t nb) {
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x)
    ptrs[b] = base + b * stride;
}
// the pointers of matrices [b0, b0 + nb) of a batch at x, stride elements apart, into ptrs
template <typename T> int pointers(const char *op, T **ptrs, T *x, int64_t stride, int64_t b0, int64_t nb) {
  fill_ptrs<T><<<grid_for(nb), kThreads, 0, stream>>>(ptrs, x + b0 * stride, stride, nb);
  LAUNCHED(op);
  return 0;
}

// call(ptrs, b0, nb) for each chunk of at most kBatchChunk matrices of the
// batch of B at x (stride elements apart), ptrs their device pointers: the
// batched routines take one pointer per matrix and an int count
template <typename T, typename Call> int each_chunk(const char *op, T *x, int64_t stride, int64_t B, Call call) {
  Scratch ptrs(sizeof(T *) * (size_t)(B < kBatchChunk ? B : kBatchChunk));
  if (!ptrs.p) return -1;
  for (int64_t b0 = 0; b0 < B; b0 += kBatchChunk) {
    int64_t nb = B - b0 < kBatchChunk ? B - b0 : kBatchChunk;
    if (pointers<T>(op, (T **)ptrs.p, x, stride, b0, nb) || call((T **)ptrs.p, b0, (int)nb)) return -1;
  }
  return 0;
}

// ---- the kernels ---------------------------------------------------------------------------
template <typename T> int getrf_t(const nt_KernelArgs *a) {
  const char *op = "linalg_getrf";
  nt_Tensor *A = a->out;
  int64_t B = batch_of(A);
  int n = rows(A), lw = 0;
  T *x = SPTR(T, A);
  int *piv = SPTR(int, a->in[0]), *info = SPTR(int, a->in[1]);
  if (use_batched(B, n))
    return each_chunk<T>(op, x, (int64_t)n * n, B, [&](T **ptrs, int64_t b0, int nb) {
      BLAS(getrf_batched(matmul_cublas_handle(), n, ptrs, n, piv + b0 * n, info + b0, nb), "getrfBatched");
      return 0;
    });
  SOLVE(ops<T>().getrf_bs(handle, n, n, x, n, &lw), "getrf_bufferSize");
  Scratch w(sizeof(T) * (size_t)(lw > 0 ? lw : 1));
  if (!w.p) return -1;
  for (int64_t b = 0; b < B; b++)
    SOLVE(ops<T>().getrf(handle, n, n, x + b * n * n, n, (T *)w.p, piv + b * n, info + b), "getrf");
  return 0;
}

template <typename T> int getrs_t(const nt_KernelArgs *a) {
  const char *op = "linalg_getrs";
  nt_Tensor *X = a->out;
  int64_t B = batch_of(X);
  int n = rows(X), nrhs = cols(X);
  T *x = SPTR(T, X);
  const T *lu = SPTR(T, a->in[0]);
  const int *piv = SPTR(int, a->in[1]);
  cublasOperation_t tr = a->iarg[0] ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (use_batched(B, n)) {
    int64_t chunk = B < kBatchChunk ? B : kBatchChunk;
    Scratch pa(sizeof(T *) * (size_t)chunk), pb(sizeof(T *) * (size_t)chunk);
    if (!pa.p || !pb.p) return -1;
    for (int64_t b0 = 0; b0 < B; b0 += kBatchChunk) {
      int64_t nb = B - b0 < kBatchChunk ? B - b0 : kBatchChunk;
      int arg = 0;   // getrsBatched's info is a host int: < 0 names a bad argument
      if (pointers<T>(op, (T **)pa.p, (T *)lu, (int64_t)n * n, b0, nb) || pointers<T>(op, (T **)pb.p, x, (int64_t)n * nrhs, b0, nb)) return -1;
      BLAS(getrs_batched(matmul_cublas_handle(), tr, n, nrhs, (const T *const *)pa.p, n, piv + b0 * n, (T **)pb.p, n, &arg, (int)nb), "getrsBatched");
      if (arg != 0) { host->error_set("%s: cuBLAS getrsBatched refused argument %d", op, -arg); return -1; }
    }
    return 0;
  }
  Scratch inf(sizeof(int));
  if (!inf.p) return -1;
  for (int64_t b = 0; b < B; b++)
    SOLVE(ops<T>().getrs(handle, tr, n, nrhs, lu + b * n * n, n, piv + b * n,
                         x + b * (int64_t)n * nrhs, n, (int *)inf.p), "getrs");
  return 0;
}

template <typename T> int potrf_t(const nt_KernelArgs *a) {
  const char *op = "linalg_potrf";
  nt_Tensor *A = a->out;
  int64_t B = batch_of(A);
  int n = rows(A), lw = 0;
  T *x = SPTR(T, A);
  int *info = SPTR(int, a->in[0]);
  if (use_batched(B, n)) {
    if (each_chunk<T>(op, x, (int64_t)n * n, B, [&](T **ptrs, int64_t b0, int nb) {
          SOLVE(ops<T>().potrf_batched(handle, fill(a->iarg[0]), n, ptrs, n, info + b0, nb), "potrfBatched");
          return 0;
        }))
      return -1;
  } else {
    SOLVE(ops<T>().potrf_bs(handle, fill(a->iarg[0]), n, x, n, &lw), "potrf_bufferSize");
    Scratch w(sizeof(T) * (size_t)(lw > 0 ? lw : 1));
    if (!w.p) return -1;
    for (int64_t b = 0; b < B; b++)
      SOLVE(ops<T>().potrf(handle, fill(a->iarg[0]), n, x + b * n * n, n, (T *)w.p, lw, info + b), "potrf");
  }
  // both paths: the triangle the call leaves (the batched one uses it as workspace) is zeroed
  int64_t total = B * n * n;
  zero_triangle<T><<<grid_for(total), kThreads, 0, stream>>>(x, total, n, a->iarg[0] != 0);
  LAUNCHED(op);
  return 0;
}

template <typename T> int qr_t(const nt_KernelArgs *a) {
  const char *op = "linalg_qr";
  nt_Tensor *A = a->in[0], *R = a->out, *Q = a->in[1];
  int64_t B = batch_of(A);
  int m = rows(A), n = cols(A), k = m < n ? m : n, rr = rows(R), qc = Q ? cols(Q) : 0, lw1 = 0, lw2 = 0;
  T *x = SPTR(T, A), *r = SPTR(T, R), *q = SPTR(T, Q);
  SOLVE(ops<T>().geqrf_bs(handle, m, n, x, m, &lw1), "geqrf_bufferSize");
  Scratch tau(sizeof(T) * (size_t)(B * k + 1)), inf(sizeof(int));
  if (!tau.p || !inf.p) return -1;
  if (q && qc > 0) SOLVE(ops<T>().orgqr_bs(handle, m, qc, k, q, m, (T *)tau.p, &lw2), "orgqr_bufferSize");
  int lw = lw1 > lw2 ? lw1 : lw2;
  Scratch w(sizeof(T) * (size_t)(lw > 0 ? lw : 1));
  if (!w.p) return -1;
  for (int64_t b = 0; b < B; b++)
    SOLVE(ops<T>().geqrf(handle, m, n, x + b * m * n, m, (T *)tau.p + b * k, (T *)w.p, lw, (int *)inf.p), "geqrf");
  int64_t total = B * rr * n + (q ? B * m * qc : 0);
  qr_split<T><<<grid_for(total), kThreads, 0, stream>>>(x, r, q && qc > 0 ? q : nullptr, B, m, n, rr, qc);
  LAUNCHED(op);
  if (q && qc > 0)
    for (int64_t b = 0; b < B; b++)
      SOLVE(ops<T>().orgqr(handle, m, qc, k, q + b * m * qc, m, (T *)tau.p + b * k, (T *)w.p, lw, (int *)inf.p), "orgqr");
  return 0;
}

template <typename T> int syevd_t(const nt_KernelArgs *a) {
  const char *op = "linalg_syevd";
  nt_Tensor *V = a->out;
  int64_t B = batch_of(V);
  int n = rows(V), lw = 0;
  T *x = SPTR(T, V), *w = SPTR(T, a->in[0]);
  int *info = SPTR(int, a->in[1]);
  cusolverEigMode_t job = a->iarg[1] ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  if (use_batched(B, n) && n <= kSyevjMaxN) {   // one strided batched Jacobi call per chunk; info > 0: no convergence
    int64_t chunk = B < kBatchChunk ? B : kBatchChunk;
    SOLVE(ops<T>().syevjb_bs(handle, job, fill(a->iarg[0]), n, x, n, w, &lw, syevj_params, (int)chunk), "syevjBatched_bufferSize");
    Scratch ws(sizeof(T) * (size_t)(lw > 0 ? lw : 1));
    if (!ws.p) return -1;
    for (int64_t b0 = 0; b0 < B; b0 += kBatchChunk) {
      int64_t nb = B - b0 < kBatchChunk ? B - b0 : kBatchChunk;
      SOLVE(ops<T>().syevjb(handle, job, fill(a->iarg[0]), n, x + b0 * n * n, n, w + b0 * n, (T *)ws.p, lw, info + b0, syevj_params, (int)nb),
            "syevjBatched");
    }
    return 0;
  }
  SOLVE(ops<T>().syevd_bs(handle, job, fill(a->iarg[0]), n, x, n, w, &lw), "syevd_bufferSize");
  Scratch ws(sizeof(T) * (size_t)(lw > 0 ? lw : 1));
  if (!ws.p) return -1;
  for (int64_t b = 0; b < B; b++)
    SOLVE(ops<T>().syevd(handle, job, fill(a->iarg[0]), n, x + b * n * n, n, w + b * n, (T *)ws.p, lw, info + b), "syevd");
  return 0;
}

// gesvdjBatched's full factors to the kernel's buffers, per matrix b: U
// (m x uc, column-major) = the first uc columns of Uf (m x m), contiguous at
// the same offsets; V^T (vr x n) = the first vr rows of Vf^T, Vf (n x n) =
// V: VT[j vr + i] = Vf[i n + j].  One thread per output element.
template <typename T> __global__ void svdj_split(const T *uf, const T *vf, T *u, T *vt, int64_t B, int m, int n, int uc, int vr) {
  int64_t nu = B * m * uc, nv = B * vr * n;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < nu + nv; e += (int64_t)gridDim.x * blockDim.x) {
    if (e < nu) {
      int64_t b = e / ((int64_t)m * uc), k = e % ((int64_t)m * uc);
      u[e] = uf[b * m * m + k];
    } else {
      int64_t f = e - nu, b = f / ((int64_t)vr * n), k = f % ((int64_t)vr * n);
      int i = (int)(k % vr), j = (int)(k / vr);
      vt[f] = vf[b * n * n + (int64_t)i * n + j];
    }
  }
}

// many small SVDs (m, n <= 32): one strided gesvdjBatched (Jacobi) per chunk,
// any shape (no transposes), singular values descending (the default sort);
// it always forms the full U (m x m) and V (n x n), so they go to scratch and
// svdj_split cuts the reduced factors out.  info[b] > 0: matrix b did not
// converge (the front end's "did not converge" error, as gesvd's).
template <typename T> int gesvdj_batched(const char *op, int64_t B, int m, int n, T *x, T *s, T *u, T *vt, int uc, int vr, int *info) {
  int k = m < n ? m : n, lw = 0;
  cusolverEigMode_t job = u ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  int64_t chunk = B < kBatchChunk ? B : kBatchChunk;
  // U and V are written only for VECTOR; values-only calls still pass (one matrix's worth of) valid pointers
  int64_t fb = u ? B : 1;
  Scratch f(sizeof(T) * (size_t)(fb * ((int64_t)m * m + (int64_t)n * n)));
  if (!f.p) return -1;
  T *uf = (T *)f.p, *vf = uf + fb * m * m;
  SOLVE(ops<T>().gesvdjb_bs(handle, job, m, n, x, m, s, uf, m, vf, n, &lw, gesvdj_params, (int)chunk), "gesvdjBatched_bufferSize");
  Scratch ws(sizeof(T) * (size_t)(lw > 0 ? lw : 1));
  if (!ws.p) return -1;
  for (int64_t b0 = 0; b0 < B; b0 += kBatchChunk) {
    int64_t nb = B - b0 < kBatchChunk ? B - b0 : kBatchChunk, o = u ? b0 : 0;
    SOLVE(ops<T>().gesvdjb(handle, job, m, n, x + b0 * m * n, m, s + b0 * k, uf + o * m * m, m, vf + o * n * n, n, (T *)ws.p, lw,
                           info + b0, gesvdj_params, (int)nb), "gesvdjBatched");
  }
  if (u) {
    int64_t total = B * ((int64_t)m * uc + (int64_t)vr * n);
    svdj_split<T><<<grid_for(total), kThreads, 0, stream>>>(uf, vf, u, vt, B, m, n, uc, vr);
    LAUNCHED(op);
  }
  return 0;
}

// gesvd needs m >= n: a wide A goes through A^T = V S U^T, its factors transposed back
template <typename T> int gesdd_t(const nt_KernelArgs *a) {
  const char *op = "linalg_gesdd";
  nt_Tensor *A = a->in[0], *S = a->out, *U = a->in[1], *VT = a->in[2];
  int64_t B = batch_of(A);
  int m = rows(A), n = cols(A), k = m < n ? m : n, lw = 0;
  int *info = SPTR(int, a->in[3]);
  if (use_batched(B, m > n ? m : n) && (m > n ? m : n) <= kGesvdjMaxN)
    return gesvdj_batched<T>(op, B, m, n, SPTR(T, A), SPTR(T, S), SPTR(T, U), SPTR(T, VT), U ? cols(U) : 0, VT ? rows(VT) : 0, info);
  bool full = U && ((cols(U) == m && m != k) || (rows(VT) == n && n != k));
  signed char job = U ? (full ? 'A' : 'S') : 'N';
  T *x = SPTR(T, A), *s = SPTR(T, S), *u = SPTR(T, U), *vt = SPTR(T, VT);
  bool wide = m < n;
  int M = wide ? n : m, N = wide ? m : n;              // the tall matrix gesvd sees
  int ucols = job == 'A' ? M : N, vrows = N;           // its U [M, ucols], VT [vrows, N] (ldvt = N)
  SOLVE(ops<T>().gesvd_bs(handle, M, N, &lw), "gesvd_bufferSize");
  size_t tall = wide ? (size_t)B * M * N : 0, ub = wide && U ? (size_t)B * M * ucols : 0, vb = wide && U ? (size_t)B * N * N : 0;
  Scratch w(sizeof(T) * (size_t)(lw > 0 ? lw : 1)), t(sizeof(T) * (tall + ub + vb + 1));
  if (!w.p || !t.p) return -1;
  T *tx = (T *)t.p, *tu = tx + tall, *tv = tu + ub;
  if (wide) {
    int64_t total = B * (int64_t)m * n;
    transpose_batch<T><<<grid_for(total), kThreads, 0, stream>>>(x, tx, total, m, n);
    LAUNCHED(op);
  }
  T *src = wide ? tx : x, *du = wide ? tu : u, *dv = wide ? tv : vt;
  for (int64_t b = 0; b < B; b++)
    SOLVE(ops<T>().gesvd(handle, job, job, M, N, src + b * M * N, M, s + b * k, du ? du + b * (int64_t)M * ucols : nullptr, M,
                         dv ? dv + b * (int64_t)vrows * N : nullptr, N, (T *)w.p, lw, nullptr, info + b), "gesvd");
  if (wide && U) {
    // U (m x m) = V'^T with V'^T [N x N] = [m x m];  VT (vr x n) = U'^T with U' [n x ucols]
    int64_t t1 = B * (int64_t)N * N, t2 = B * (int64_t)M * ucols;
    transpose_batch<T><<<grid_for(t1), kThreads, 0, stream>>>(tv, u, t1, N, N);
    LAUNCHED(op);
    transpose_batch<T><<<grid_for(t2), kThreads, 0, stream>>>(tu, vt, t2, M, ucols);
    LAUNCHED(op);
  }
  return 0;
}

// geev's real eigenvectors VR (column-major n x n per matrix, LAPACK's packing)
// to complex columns V [B, n, n, 2] (vector j, entry i at (j n + i) 2): for a
// conjugate pair (Im W_j > 0, Im W_{j+1} < 0) the vectors are VR[:,j] ± i
// VR[:,j+1]; a real eigenvalue's is VR[:,j].  One thread per complex entry.
// (The CPU's unpacking, tensor/linalg/leigkern.c, follows the same rule.)
template <typename T> __global__ void eig_unpack(const T *vr, const T *w, T *v, int64_t total, int n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t nn = (int64_t)n * n, b = e / nn;
    int i = (int)(e % n), j = (int)(e / n % n);
    const T *m = vr + b * nn;
    T wi = w[2 * (b * n + j) + 1], re, im;
    if (wi > T(0) && j + 1 < n) { re = m[(int64_t)j * n + i]; im = m[(int64_t)(j + 1) * n + i]; }
    else if (wi < T(0) && j > 0) { re = m[(int64_t)(j - 1) * n + i]; im = -m[(int64_t)j * n + i]; }
    else { re = m[(int64_t)j * n + i]; im = T(0); }
    v[2 * e] = re;
    v[2 * e + 1] = im;
  }
}

// linalg_geev: one Xgeev per matrix (real A, complex W, real VR); the host
// workspace it asks for lives until the stream has finished with it
template <typename T> int geev_t(const nt_KernelArgs *a) {
  const char *op = "linalg_geev";
  if (geev_reason[0]) { host->error_set("%s: %s", op, geev_reason); return -1; }
  nt_Tensor *A = a->in[0], *V = a->in[1];
  int64_t B = batch_of(A), n = rows(A), nn = n * n;
  cudaDataType rt = sizeof(T) == 8 ? CUDA_R_64F : CUDA_R_32F, ct = sizeof(T) == 8 ? CUDA_C_64F : CUDA_C_32F;
  cusolverEigMode_t jv = V ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  T *x = SPTR(T, A), *w = SPTR(T, a->out);
  int *info = SPTR(int, a->in[2]);
  Scratch vr(sizeof(T) * (size_t)(V ? B * nn : 1));
  if (!vr.p) return -1;
  size_t dbytes = 0, hbytes = 0;
  SOLVE(xgeev_bs(handle, geev_params, CUSOLVER_EIG_MODE_NOVECTOR, jv, n, rt, x, n, ct, w, rt, nullptr, 1, rt, vr.p, n, rt,
                 &dbytes, &hbytes), "Xgeev_bufferSize");
  Scratch dw(dbytes ? dbytes : 1);
  void *hw = malloc(hbytes ? hbytes : 1);
  if (!dw.p || !hw) { free(hw); if (dw.p) host->error_set("%s: out of host memory (%zu bytes)", op, hbytes); return -1; }
  int rc = 0;
  for (int64_t b = 0; b < B && !rc; b++) {
    cusolverStatus_t st = xgeev(handle, geev_params, CUSOLVER_EIG_MODE_NOVECTOR, jv, n, rt, x + b * nn, n, ct, w + 2 * b * n, rt,
                                nullptr, 1, rt, V ? (T *)vr.p + b * nn : nullptr, n, rt, dw.p, dbytes, hw, hbytes, info + b);
    if (st != CUSOLVER_STATUS_SUCCESS) rc = solver_fail(op, "Xgeev", st);
  }
  cudaError_t e = cudaStreamSynchronize(stream);   // the host workspace is freed next
  free(hw);
  if (rc) return rc;
  CU(e);
  if (V) {
    int64_t total = B * nn;
    eig_unpack<T><<<grid_for(total), kThreads, 0, stream>>>((const T *)vr.p, w, SPTR(T, V), total, (int)n);
    LAUNCHED(op);
  }
  return 0;
}

#define ENTRY(name, buf)                                                              \
  int k_##name(const nt_KernelArgs *a) {                                              \
    if ((buf)->numel == 0) return 0;                                                  \
    if (solver_ready(nt_op_name_of(a))) return -1;                                    \
    return (buf)->dtype == NT_F64 ? name##_t<double>(a) : name##_t<float>(a);          \
  }
const char *nt_op_name_of(const nt_KernelArgs *a) { return host->op_name(a->op); }
ENTRY(getrf, a->out)
ENTRY(getrs, a->out)
ENTRY(potrf, a->out)
ENTRY(qr, a->in[0])
ENTRY(syevd, a->out)
ENTRY(gesdd, a->in[0])
ENTRY(geev, a->in[0])

}  // namespace

void register_solver(void) {
  host->register_kernel(host->op_register("linalg_getrf"), NT_CUDA, k_getrf);
  host->register_kernel(host->op_register("linalg_getrs"), NT_CUDA, k_getrs);
  host->register_kernel(host->op_register("linalg_potrf"), NT_CUDA, k_potrf);
  host->register_kernel(host->op_register("linalg_qr"), NT_CUDA, k_qr);
  host->register_kernel(host->op_register("linalg_syevd"), NT_CUDA, k_syevd);
  host->register_kernel(host->op_register("linalg_gesdd"), NT_CUDA, k_gesdd);
  host->register_kernel(host->op_register("linalg_geev"), NT_CUDA, k_geev);
}

}  // namespace ncu
