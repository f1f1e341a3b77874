// cusolver.cpp — the cuSOLVER dense routines cuda/solver.cu calls, served by
// LAPACK (OpenBLAS) for the emulated device (docs/cuda.md, "Emulated device").
//
// As cublas.cpp does for cuBLAS, this implements cuSOLVER's contract, not a
// convenient one: column-major matrices with leading dimensions checked as
// cuSOLVER checks them (lda >= max(1, m), ...), every operand whole in device
// memory (a wrong size shows up as an illegal address at the next
// synchronisation), the workspace the *_bufferSize query asked for really
// passed (Lwork checked), info written to device memory as cuSOLVER writes it
// (> 0: singular / not positive-definite / no convergence; < 0: a bad
// argument).  The emulated device runs work in order at the call, so LAPACK
// runs here, in place.
//
// The batched routines solver.cu uses for many small matrices are here too,
// being LAPACK-served: cuBLAS's batched LU (cublas<t>getrfBatched /
// getrsBatched) and cuSOLVER's potrfBatched.  They take an array of device
// pointers (the array and every matrix it points at checked as device
// memory), write one info per matrix to device memory, except getrsBatched,
// whose info is a host int that only reports a bad argument, as the real
// calls do; syevjBatched (strided, order <= 32) runs LAPACK's syevd per
// matrix; gesvdjBatched (strided, m, n <= 32) runs LAPACK's gesvd per
// matrix (full U, and V itself, not V^T, as the Jacobi call returns them;
// singular values descending, its default sort).  potrfBatched uses the triangle it does not factor as
// workspace: the stand-in fills it with NaN, so a caller that forgets to
// clear it shows NaNs instead of passing by luck.
//
// cusolverDnXgeev (the 64-bit API, CUDA 12.6+) runs LAPACK's geev for the
// one form solver.cu uses: real A, complex W (n entries, conjugate pairs
// both stored), real VR in LAPACK's packing.  Stricter than the real call:
// its other form for real A (a real W of 2n: real parts, then imaginary) and
// left eigenvectors are refused as invalid; both workspaces are checked
// against the query (the device one as device memory, the host one passed).
#include <cublas_v2.h>
#include <cusolverDn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

namespace emu {
bool device_range_ok(const void *p, size_t n, const char *what);
}

struct cusolverDnContext { cudaStream_t stream; };
struct syevjInfo { double tol = 0; int max_sweeps = 100; int sort = 1; };
struct gesvdjInfo { double tol = 0; int max_sweeps = 100; int sort = 1; };
struct cusolverDnParams { int unused; };

extern "C" {
// LAPACK (Fortran: arguments by address, hidden string lengths last)
#define LP(T, P)                                                                                                  \
  void P##getrf_(const int *, const int *, T *, const int *, int *, int *);                                      \
  void P##getrs_(const char *, const int *, const int *, const T *, const int *, const int *, T *, const int *,  \
                 int *, size_t);                                                                                 \
  void P##potrf_(const char *, const int *, T *, const int *, int *, size_t);                                    \
  void P##geqrf_(const int *, const int *, T *, const int *, T *, T *, const int *, int *);                       \
  void P##orgqr_(const int *, const int *, const int *, T *, const int *, const T *, T *, const int *, int *);    \
  void P##syevd_(const char *, const char *, const int *, T *, const int *, T *, T *, const int *, int *,         \
                 const int *, int *, size_t, size_t);                                                            \
  void P##gesvd_(const char *, const char *, const int *, const int *, T *, const int *, T *, T *, const int *,  \
                 T *, const int *, T *, const int *, int *, size_t, size_t);                                   \
  void P##geev_(const char *, const char *, const int *, T *, const int *, T *, T *, T *, const int *, T *,         \
                const int *, T *, const int *, int *, size_t, size_t);
LP(float, s)
LP(double, d)
#undef LP
}

namespace {

// bytes of a column-major rows x cols matrix with leading dimension ld
size_t extent(int rows, int cols, int ld, size_t es) {
  if (rows <= 0 || cols <= 0) return 0;
  return ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * es;
}
bool device_ok(const void *p, size_t n, const char *what) { return emu::device_range_ok(p, n, what); }
bool mat_ok(const void *p, int rows, int cols, int ld, size_t es, const char *what) {
  size_t n = extent(rows, cols, ld, es);
  return n == 0 || device_ok(p, n, what);
}
bool info_ok(const int *info, const char *what) { return emu::device_range_ok(info, sizeof(int), what); }

#define CHECK_HANDLE(h) if (!(h)) return CUSOLVER_STATUS_NOT_INITIALIZED
// a fault in device memory: as on a GPU, reported at the next synchronisation
#define FAULT_OK CUSOLVER_STATUS_SUCCESS
char uplo_char(cublasFillMode_t u) { return u == CUBLAS_FILL_MODE_UPPER ? 'U' : 'L'; }

template <typename T> struct Lapack;
#define LAPACK_OF(T, P)                                                                                          \
  template <> struct Lapack<T> {                                                                               \
    static constexpr auto getrf = P##getrf_; static constexpr auto getrs = P##getrs_;                           \
    static constexpr auto potrf = P##potrf_; static constexpr auto geqrf = P##geqrf_;                           \
    static constexpr auto orgqr = P##orgqr_; static constexpr auto syevd = P##syevd_;                           \
    static constexpr auto gesvd = P##gesvd_; static constexpr auto geev = P##geev_;                             \
  };
LAPACK_OF(float, s)
LAPACK_OF(double, d)

template <typename T> cusolverStatus_t getrf(cusolverDnHandle_t h, int m, int n, T *A, int lda, T *work, int *ipiv, int *info) {
  CHECK_HANDLE(h);
  if (m < 0 || n < 0 || lda < std::max(1, m) || !info) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!mat_ok(A, m, n, lda, sizeof(T), "cusolverDn?getrf: A") || !info_ok(info, "cusolverDn?getrf: info") ||
      !device_ok(ipiv, sizeof(int) * (size_t)std::min(m, n), "cusolverDn?getrf: ipiv") || !device_ok(work, sizeof(T), "cusolverDn?getrf: workspace"))
    return FAULT_OK;
  Lapack<T>::getrf(&m, &n, A, &lda, ipiv, info);
  return CUSOLVER_STATUS_SUCCESS;
}
template <typename T> cusolverStatus_t getrs(cusolverDnHandle_t h, cublasOperation_t t, int n, int nrhs, const T *A, int lda, const int *ipiv, T *B, int ldb, int *info) {
  CHECK_HANDLE(h);
  if (n < 0 || nrhs < 0 || lda < std::max(1, n) || ldb < std::max(1, n) || (t != CUBLAS_OP_N && t != CUBLAS_OP_T)) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!mat_ok(A, n, n, lda, sizeof(T), "cusolverDn?getrs: A") || !mat_ok(B, n, nrhs, ldb, sizeof(T), "cusolverDn?getrs: B") ||
      !device_ok(ipiv, sizeof(int) * (size_t)n, "cusolverDn?getrs: ipiv") || !info_ok(info, "cusolverDn?getrs: info"))
    return FAULT_OK;
  char tc = t == CUBLAS_OP_T ? 'T' : 'N';
  Lapack<T>::getrs(&tc, &n, &nrhs, A, &lda, ipiv, B, &ldb, info, 1);
  return CUSOLVER_STATUS_SUCCESS;
}
template <typename T> cusolverStatus_t potrf(cusolverDnHandle_t h, cublasFillMode_t u, int n, T *A, int lda, T *work, int lwork, int *info) {
  CHECK_HANDLE(h);
  if (n < 0 || lda < std::max(1, n) || lwork < 1) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!mat_ok(A, n, n, lda, sizeof(T), "cusolverDn?potrf: A") || !device_ok(work, sizeof(T) * (size_t)lwork, "cusolverDn?potrf: workspace") ||
      !info_ok(info, "cusolverDn?potrf: info"))
    return FAULT_OK;
  char uc = uplo_char(u);
  Lapack<T>::potrf(&uc, &n, A, &lda, info, 1);
  return CUSOLVER_STATUS_SUCCESS;
}
template <typename T> int geqrf_query(int m, int n) {
  int lw = -1, info = 0, lda = std::max(1, m);
  T w = 0, tau = 0;
  Lapack<T>::geqrf(&m, &n, nullptr, &lda, &tau, &w, &lw, &info);
  return std::max(1, (int)w);
}
template <typename T> cusolverStatus_t geqrf(cusolverDnHandle_t h, int m, int n, T *A, int lda, T *tau, T *work, int lwork, int *info) {
  CHECK_HANDLE(h);
  if (m < 0 || n < 0 || lda < std::max(1, m) || lwork < geqrf_query<T>(m, n)) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!mat_ok(A, m, n, lda, sizeof(T), "cusolverDn?geqrf: A") || !device_ok(tau, sizeof(T) * (size_t)std::min(m, n), "cusolverDn?geqrf: tau") ||
      !device_ok(work, sizeof(T) * (size_t)lwork, "cusolverDn?geqrf: workspace") || !info_ok(info, "cusolverDn?geqrf: info"))
    return FAULT_OK;
  Lapack<T>::geqrf(&m, &n, A, &lda, tau, work, &lwork, info);
  return CUSOLVER_STATUS_SUCCESS;
}
template <typename T> int orgqr_query(int m, int n, int k) {
  int lw = -1, info = 0, lda = std::max(1, m);
  T w = 0, tau = 0;
  Lapack<T>::orgqr(&m, &n, &k, nullptr, &lda, &tau, &w, &lw, &info);
  return std::max(1, (int)w);
}
template <typename T> cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, T *A, int lda, const T *tau, T *work, int lwork, int *info) {
  CHECK_HANDLE(h);
  if (m < 0 || n < 0 || n > m || k < 0 || k > n || lda < std::max(1, m) || lwork < orgqr_query<T>(m, n, k)) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!mat_ok(A, m, n, lda, sizeof(T), "cusolverDn?orgqr: A") || !device_ok(tau, sizeof(T) * (size_t)k, "cusolverDn?orgqr: tau") ||
      !device_ok(work, sizeof(T) * (size_t)lwork, "cusolverDn?orgqr: workspace") || !info_ok(info, "cusolverDn?orgqr: info"))
    return FAULT_OK;
  Lapack<T>::orgqr(&m, &n, &k, A, &lda, tau, work, &lwork, info);
  return CUSOLVER_STATUS_SUCCESS;
}
template <typename T> void syevd_query(char job, char uc, int n, int *lw, int *liw) {
  int q = -1, qi = -1, info = 0, lda = std::max(1, n), iw = 0;
  T w = 0, ev = 0;
  Lapack<T>::syevd(&job, &uc, &n, nullptr, &lda, &ev, &w, &q, &iw, &qi, &info, 1, 1);
  *lw = std::max(1, (int)w);
  *liw = std::max(1, iw);
}
template <typename T> cusolverStatus_t syevd(cusolverDnHandle_t h, cusolverEigMode_t jobz, cublasFillMode_t u, int n, T *A, int lda, T *W, T *work, int lwork, int *info) {
  CHECK_HANDLE(h);
  char job = jobz == CUSOLVER_EIG_MODE_VECTOR ? 'V' : 'N', uc = uplo_char(u);
  int lw, liw;
  syevd_query<T>(job, uc, n, &lw, &liw);
  if (n < 0 || lda < std::max(1, n) || lwork < lw) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!mat_ok(A, n, n, lda, sizeof(T), "cusolverDn?syevd: A") || !device_ok(W, sizeof(T) * (size_t)n, "cusolverDn?syevd: W") ||
      !device_ok(work, sizeof(T) * (size_t)lwork, "cusolverDn?syevd: workspace") || !info_ok(info, "cusolverDn?syevd: info"))
    return FAULT_OK;
  std::vector<int> iwork((size_t)liw);   // cuSOLVER's interface has no integer workspace: the stand-in keeps it
  Lapack<T>::syevd(&job, &uc, &n, A, &lda, W, work, &lwork, iwork.data(), &liw, info, 1, 1);
  return CUSOLVER_STATUS_SUCCESS;
}
template <typename T> int gesvd_query(int m, int n) {
  int lw = -1, info = 0, lda = std::max(1, m), ldu = std::max(1, m), ldvt = std::max(1, n);
  T w = 0, d = 0;
  char a = 'A';
  Lapack<T>::gesvd(&a, &a, &m, &n, nullptr, &lda, &d, &d, &ldu, &d, &ldvt, &w, &lw, &info, 1, 1);
  return std::max(1, (int)w);
}
template <typename T> cusolverStatus_t gesvd(cusolverDnHandle_t h, signed char jobu, signed char jobvt, int m, int n, T *A, int lda, T *S, T *U, int ldu,
                                             T *VT, int ldvt, T *work, int lwork, T *rwork, int *info) {
  (void)rwork;
  CHECK_HANDLE(h);
  int k = std::min(m, n);
  // cuSOLVER's gesvd: m >= n only; ldu >= m, ldvt >= n
  if (m < n || n < 0 || lda < std::max(1, m) || ldu < std::max(1, m) || ldvt < std::max(1, n) || lwork < gesvd_query<T>(m, n) ||
      !strchr("ASN", jobu) || !strchr("ASN", jobvt))
    return CUSOLVER_STATUS_INVALID_VALUE;
  int ucols = jobu == 'A' ? m : k, vrows = jobvt == 'A' ? n : k;
  if (!mat_ok(A, m, n, lda, sizeof(T), "cusolverDn?gesvd: A") || !device_ok(S, sizeof(T) * (size_t)k, "cusolverDn?gesvd: S") ||
      (jobu != 'N' && !mat_ok(U, m, ucols, ldu, sizeof(T), "cusolverDn?gesvd: U")) ||
      (jobvt != 'N' && !mat_ok(VT, vrows, n, ldvt, sizeof(T), "cusolverDn?gesvd: VT")) ||
      !device_ok(work, sizeof(T) * (size_t)lwork, "cusolverDn?gesvd: workspace") || !info_ok(info, "cusolverDn?gesvd: info"))
    return FAULT_OK;
  char ju = (char)jobu, jv = (char)jobvt;
  T du = 0, dv = 0;
  Lapack<T>::gesvd(&ju, &jv, &m, &n, A, &lda, S, U ? U : &du, &ldu, VT ? VT : &dv, &ldvt, work, &lwork, info, 1, 1);
  return CUSOLVER_STATUS_SUCCESS;
}

template <typename T> bool ptr_array_ok(T *const *A, int nb, int rows, int cols, int ld, const char *what) {
  if (!device_ok(A, sizeof(T *) * (size_t)nb, what)) return false;
  for (int b = 0; b < nb; b++)
    if (!mat_ok(A[b], rows, cols, ld, sizeof(T), what)) return false;
  return true;
}
template <typename T> cublasStatus_t getrf_batched(cublasHandle_t h, int n, T *const A[], int lda, int *P, int *info, int nb) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n < 0 || lda < std::max(1, n) || nb < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (!ptr_array_ok(A, nb, n, n, lda, "cublas?getrfBatched: Aarray") || !device_ok(info, sizeof(int) * (size_t)nb, "cublas?getrfBatched: info") ||
      (P && !device_ok(P, sizeof(int) * (size_t)n * (size_t)nb, "cublas?getrfBatched: P")))
    return CUBLAS_STATUS_SUCCESS;   // the fault shows at the next synchronisation
  if (!P) return CUBLAS_STATUS_NOT_SUPPORTED;   // no-pivoting LU: not what LAPACK offers, and never asked for
  for (int b = 0; b < nb; b++) Lapack<T>::getrf(&n, &n, A[b], &lda, P + (size_t)b * n, info + b);
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T> cublasStatus_t getrs_batched(cublasHandle_t h, cublasOperation_t t, int n, int nrhs, const T *const A[], int lda,
                                                   const int *P, T *const B[], int ldb, int *info, int nb) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!info) return CUBLAS_STATUS_INVALID_VALUE;
  int bad = t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C ? 2 : n < 0 ? 3 : nrhs < 0 ? 4 : lda < std::max(1, n) ? 6
          : ldb < std::max(1, n) ? 9 : nb < 0 ? 11 : 0;
  *info = -bad;   // a host int, as cuBLAS's
  if (bad) return CUBLAS_STATUS_INVALID_VALUE;
  if (!ptr_array_ok(A, nb, n, n, lda, "cublas?getrsBatched: Aarray") || !ptr_array_ok(B, nb, n, nrhs, ldb, "cublas?getrsBatched: Barray") ||
      !device_ok(P, sizeof(int) * (size_t)n * (size_t)nb, "cublas?getrsBatched: devIpiv"))
    return CUBLAS_STATUS_SUCCESS;
  char tc = t == CUBLAS_OP_N ? 'N' : 'T';
  for (int b = 0; b < nb; b++) {
    int inf = 0;
    Lapack<T>::getrs(&tc, &n, &nrhs, A[b], &lda, P + (size_t)b * n, B[b], &ldb, &inf, 1);
  }
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T> cusolverStatus_t potrf_batched(cusolverDnHandle_t h, cublasFillMode_t u, int n, T *A[], int lda, int *info, int nb) {
  CHECK_HANDLE(h);
  if (n < 0 || lda < std::max(1, n) || nb < 0 || (u != CUBLAS_FILL_MODE_LOWER && u != CUBLAS_FILL_MODE_UPPER)) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!ptr_array_ok(A, nb, n, n, lda, "cusolverDn?potrfBatched: Aarray") || !device_ok(info, sizeof(int) * (size_t)nb, "cusolverDn?potrfBatched: infoArray"))
    return FAULT_OK;
  char uc = uplo_char(u);
  for (int b = 0; b < nb; b++) {
    Lapack<T>::potrf(&uc, &n, A[b], &lda, info + b, 1);
    for (int j = 0; j < n; j++)          // the other triangle: workspace, left as garbage
      for (int i = 0; i < n; i++)
        if (uc == 'U' ? i > j : i < j) A[b][(size_t)j * lda + i] = (T)NAN;
  }
  return CUSOLVER_STATUS_SUCCESS;
}

// syevjBatched: strided matrices [batch][lda][n] of order n <= 32, served by
// LAPACK's syevd (exact where Jacobi converges, so the same contract: W
// ascending, vectors in A, info[b] > 0 when matrix b does not converge)
template <typename T> int syevjb_query(char job, char uc, int n) {
  int lw, liw;
  syevd_query<T>(job, uc, n, &lw, &liw);
  return lw;
}
template <typename T> cusolverStatus_t syevj_batched(cusolverDnHandle_t h, cusolverEigMode_t jobz, cublasFillMode_t u, int n, T *A, int lda, T *W,
                                                     T *work, int lwork, int *info, syevjInfo_t params, int nb) {
  CHECK_HANDLE(h);
  char job = jobz == CUSOLVER_EIG_MODE_VECTOR ? 'V' : 'N', uc = uplo_char(u);
  if (!params || n < 0 || n > 32 || lda < std::max(1, n) || nb < 1 || lwork < syevjb_query<T>(job, uc, n)) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!mat_ok(A, n, (int)((int64_t)n * nb), lda, sizeof(T), "cusolverDn?syevjBatched: A") ||
      !device_ok(W, sizeof(T) * (size_t)n * (size_t)nb, "cusolverDn?syevjBatched: W") ||
      !device_ok(work, sizeof(T) * (size_t)lwork, "cusolverDn?syevjBatched: workspace") ||
      !device_ok(info, sizeof(int) * (size_t)nb, "cusolverDn?syevjBatched: info"))
    return FAULT_OK;
  int liw = 0, lw = 0;
  syevd_query<T>(job, uc, n, &lw, &liw);
  std::vector<int> iwork((size_t)liw);
  for (int b = 0; b < nb; b++)
    Lapack<T>::syevd(&job, &uc, &n, A + (size_t)b * lda * n, &lda, W + (size_t)b * n, work, &lwork, iwork.data(), &liw, info + b, 1, 1);
  return CUSOLVER_STATUS_SUCCESS;
}

// gesvdjBatched: strided A [batch][lda][n], S [batch][min(m, n)], U
// [batch][ldu][m], V [batch][ldv][n], m, n <= 32; LAPACK's gesvd per matrix
// (job 'A': any shape), then V = (V^T)^T.  The workspace is the stand-in's:
// gesvd's work, then an n x n V^T.  info[b] > 0: no convergence, as gesvdj's.
template <typename T> int gesvdjb_query(int m, int n) {
  int lw = -1, info = 0, lda = std::max(1, m), ldu = std::max(1, m), ldvt = std::max(1, n);
  T w = 0, d = 0;
  char a = 'A';
  Lapack<T>::gesvd(&a, &a, &m, &n, nullptr, &lda, &d, &d, &ldu, &d, &ldvt, &w, &lw, &info, 1, 1);
  return std::max(1, (int)w) + n * n;
}
bool gesvdjb_args(cusolverDnHandle_t h, cusolverEigMode_t j, int m, int n, int lda, int ldu, int ldv, gesvdjInfo_t p, int nb) {
  return h && p && (j == CUSOLVER_EIG_MODE_VECTOR || j == CUSOLVER_EIG_MODE_NOVECTOR) && m >= 0 && n >= 0 && m <= 32 && n <= 32 &&
         lda >= std::max(1, m) && ldu >= std::max(1, m) && ldv >= std::max(1, n) && nb >= 1;
}
template <typename T> cusolverStatus_t gesvdj_batched(cusolverDnHandle_t h, cusolverEigMode_t jobz, int m, int n, T *A, int lda, T *S, T *U,
                                                      int ldu, T *V, int ldv, T *work, int lwork, int *info, gesvdjInfo_t params, int nb) {
  CHECK_HANDLE(h);
  if (!gesvdjb_args(h, jobz, m, n, lda, ldu, ldv, params, nb) || lwork < gesvdjb_query<T>(m, n)) return CUSOLVER_STATUS_INVALID_VALUE;
  bool vec = jobz == CUSOLVER_EIG_MODE_VECTOR;
  int k = std::min(m, n);
  if (!mat_ok(A, m, (int)((int64_t)n * nb), lda, sizeof(T), "cusolverDn?gesvdjBatched: A") ||
      !device_ok(S, sizeof(T) * (size_t)k * (size_t)nb, "cusolverDn?gesvdjBatched: S") ||
      (vec && !mat_ok(U, m, (int)((int64_t)m * nb), ldu, sizeof(T), "cusolverDn?gesvdjBatched: U")) ||
      (vec && !mat_ok(V, n, (int)((int64_t)n * nb), ldv, sizeof(T), "cusolverDn?gesvdjBatched: V")) ||
      !device_ok(work, sizeof(T) * (size_t)lwork, "cusolverDn?gesvdjBatched: workspace") ||
      !device_ok(info, sizeof(int) * (size_t)nb, "cusolverDn?gesvdjBatched: info"))
    return FAULT_OK;
  char job = vec ? 'A' : 'N';
  int lw = lwork - n * n, ldvt = std::max(1, n);
  T *vt = work + lw, du = 0;
  for (int b = 0; b < nb; b++) {
    T *u = vec ? U + (size_t)b * ldu * m : &du;
    Lapack<T>::gesvd(&job, &job, &m, &n, A + (size_t)b * lda * n, &lda, S + (size_t)b * k, u, &ldu, vec ? vt : &du, &ldvt, work, &lw,
                     info + b, 1, 1);
    if (info[b] > 0) info[b] = k + 1;   // gesvdj's "did not converge"
    if (vec)
      for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) V[(size_t)b * ldv * n + (size_t)j * ldv + i] = vt[(size_t)i * ldvt + j];
  }
  return CUSOLVER_STATUS_SUCCESS;
}

// ---- Xgeev (real A): the workspace layout is the stand-in's own: device
// bytes = LAPACK's work, host bytes = wr, wi (the real call splits its work
// between the two as well)
template <typename T> int geev_lwork(char jv, int n) {
  int lw = -1, info = 0, ld = std::max(1, n), one = 1;
  T w = 0, d = 0;
  char jl = 'N';
  Lapack<T>::geev(&jl, &jv, &n, nullptr, &ld, &d, &d, &d, &one, &d, &ld, &w, &lw, &info, 1, 1);
  return std::max(1, (int)w);
}
bool geev_types(cudaDataType a, cudaDataType w, cudaDataType vl, cudaDataType vr, cudaDataType c) {
  if (a == CUDA_R_32F) return w == CUDA_C_32F && vl == CUDA_R_32F && vr == CUDA_R_32F && c == CUDA_R_32F;
  if (a == CUDA_R_64F) return w == CUDA_C_64F && vl == CUDA_R_64F && vr == CUDA_R_64F && c == CUDA_R_64F;
  return false;
}
bool geev_args(cusolverDnHandle_t h, cusolverDnParams_t p, cusolverEigMode_t jl, cusolverEigMode_t jr, int64_t n, int64_t lda,
               int64_t ldvl, int64_t ldvr) {
  return h && p && jl == CUSOLVER_EIG_MODE_NOVECTOR && (jr == CUSOLVER_EIG_MODE_NOVECTOR || jr == CUSOLVER_EIG_MODE_VECTOR) &&
         n >= 0 && n <= INT32_MAX / 2 && lda >= std::max<int64_t>(1, n) && ldvl >= 1 &&
         ldvr >= (jr == CUSOLVER_EIG_MODE_VECTOR ? std::max<int64_t>(1, n) : 1);
}
template <typename T> cusolverStatus_t xgeev(cusolverEigMode_t jr, int n, T *A, int lda, T *W, T *VR, int ldvr, void *dwork,
                                             size_t dbytes, void *hwork, size_t hbytes, int *info) {
  char jv = jr == CUSOLVER_EIG_MODE_VECTOR ? 'V' : 'N', jl = 'N';
  int lw = geev_lwork<T>(jv, n), one = 1;
  if (dbytes < sizeof(T) * (size_t)lw || hbytes < sizeof(T) * 2 * (size_t)std::max(1, n) || !hwork) return CUSOLVER_STATUS_INVALID_VALUE;
  if (!mat_ok(A, n, n, lda, sizeof(T), "cusolverDnXgeev: A") || !device_ok(W, 2 * sizeof(T) * (size_t)n, "cusolverDnXgeev: W") ||
      (jv == 'V' && !mat_ok(VR, n, n, ldvr, sizeof(T), "cusolverDnXgeev: VR")) ||
      !device_ok(dwork, sizeof(T) * (size_t)lw, "cusolverDnXgeev: device workspace") || !info_ok(info, "cusolverDnXgeev: info"))
    return FAULT_OK;
  T *wr = (T *)hwork, *wi = wr + n, dummy = 0;
  int ldv = jv == 'V' ? ldvr : 1;
  Lapack<T>::geev(&jl, &jv, &n, A, &lda, wr, wi, &dummy, &one, jv == 'V' ? VR : &dummy, &ldv, (T *)dwork, &lw, info, 1, 1);
  if (*info == 0)
    for (int j = 0; j < n; j++) { W[2 * j] = wr[j]; W[2 * j + 1] = wi[j]; }
  return CUSOLVER_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cusolverStatus_t cusolverDnCreateSyevjInfo(syevjInfo_t *info) {
  if (!info) return CUSOLVER_STATUS_INVALID_VALUE;
  *info = new syevjInfo;
  return CUSOLVER_STATUS_SUCCESS;
}
cusolverStatus_t cusolverDnDestroySyevjInfo(syevjInfo_t info) {
  delete info;
  return CUSOLVER_STATUS_SUCCESS;
}
#define SYEVJ(T, P)                                                                                                         \
  cusolverStatus_t cusolverDn##P##syevjBatched_bufferSize(cusolverDnHandle_t h, cusolverEigMode_t j, cublasFillMode_t u, int n, \
                                                          const T *A, int lda, const T *W, int *lw, syevjInfo_t p, int nb) {  \
    (void)A; (void)W; CHECK_HANDLE(h);                                                                                      \
    if (!lw || !p || n < 0 || n > 32 || lda < std::max(1, n) || nb < 1) return CUSOLVER_STATUS_INVALID_VALUE;               \
    *lw = syevjb_query<T>(j == CUSOLVER_EIG_MODE_VECTOR ? 'V' : 'N', uplo_char(u), n); return CUSOLVER_STATUS_SUCCESS; }     \
  cusolverStatus_t cusolverDn##P##syevjBatched(cusolverDnHandle_t h, cusolverEigMode_t j, cublasFillMode_t u, int n, T *A,   \
                                               int lda, T *W, T *w, int lw, int *info, syevjInfo_t p, int nb) {             \
    return syevj_batched<T>(h, j, u, n, A, lda, W, w, lw, info, p, nb); }
SYEVJ(float, S)
SYEVJ(double, D)
#undef SYEVJ

cusolverStatus_t cusolverDnCreateGesvdjInfo(gesvdjInfo_t *info) {
  if (!info) return CUSOLVER_STATUS_INVALID_VALUE;
  *info = new gesvdjInfo;
  return CUSOLVER_STATUS_SUCCESS;
}
cusolverStatus_t cusolverDnDestroyGesvdjInfo(gesvdjInfo_t info) {
  delete info;
  return CUSOLVER_STATUS_SUCCESS;
}
#define GESVDJ(T, P)                                                                                                        \
  cusolverStatus_t cusolverDn##P##gesvdjBatched_bufferSize(cusolverDnHandle_t h, cusolverEigMode_t j, int m, int n, const T *A, \
                                                           int lda, const T *S, const T *U, int ldu, const T *V, int ldv,  \
                                                           int *lw, gesvdjInfo_t p, int nb) {                              \
    (void)A; (void)S; (void)U; (void)V; CHECK_HANDLE(h);                                                                    \
    if (!lw || !gesvdjb_args(h, j, m, n, lda, ldu, ldv, p, nb)) return CUSOLVER_STATUS_INVALID_VALUE;                       \
    *lw = gesvdjb_query<T>(m, n); return CUSOLVER_STATUS_SUCCESS; }                                                        \
  cusolverStatus_t cusolverDn##P##gesvdjBatched(cusolverDnHandle_t h, cusolverEigMode_t j, int m, int n, T *A, int lda, T *S,  \
                                                T *U, int ldu, T *V, int ldv, T *w, int lw, int *info, gesvdjInfo_t p, int nb) { \
    return gesvdj_batched<T>(h, j, m, n, A, lda, S, U, ldu, V, ldv, w, lw, info, p, nb); }
GESVDJ(float, S)
GESVDJ(double, D)
#undef GESVDJ

cublasStatus_t cublasSgetrfBatched(cublasHandle_t h, int n, float *const A[], int lda, int *P, int *info, int nb) {
  return getrf_batched<float>(h, n, A, lda, P, info, nb);
}
cublasStatus_t cublasDgetrfBatched(cublasHandle_t h, int n, double *const A[], int lda, int *P, int *info, int nb) {
  return getrf_batched<double>(h, n, A, lda, P, info, nb);
}
cublasStatus_t cublasSgetrsBatched(cublasHandle_t h, cublasOperation_t t, int n, int nrhs, const float *const A[], int lda, const int *P,
                                   float *const B[], int ldb, int *info, int nb) {
  return getrs_batched<float>(h, t, n, nrhs, A, lda, P, B, ldb, info, nb);
}
cublasStatus_t cublasDgetrsBatched(cublasHandle_t h, cublasOperation_t t, int n, int nrhs, const double *const A[], int lda, const int *P,
                                   double *const B[], int ldb, int *info, int nb) {
  return getrs_batched<double>(h, t, n, nrhs, A, lda, P, B, ldb, info, nb);
}
cusolverStatus_t cusolverDnSpotrfBatched(cusolverDnHandle_t h, cublasFillMode_t u, int n, float *A[], int lda, int *info, int nb) {
  return potrf_batched<float>(h, u, n, A, lda, info, nb);
}
cusolverStatus_t cusolverDnDpotrfBatched(cusolverDnHandle_t h, cublasFillMode_t u, int n, double *A[], int lda, int *info, int nb) {
  return potrf_batched<double>(h, u, n, A, lda, info, nb);
}

cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *h) {
  if (!h) return CUSOLVER_STATUS_INVALID_VALUE;
  *h = new cusolverDnContext{ nullptr };
  return CUSOLVER_STATUS_SUCCESS;
}
cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h) {
  CHECK_HANDLE(h);
  delete h;
  return CUSOLVER_STATUS_SUCCESS;
}
cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t h, cudaStream_t s) {
  CHECK_HANDLE(h);
  h->stream = s;
  return CUSOLVER_STATUS_SUCCESS;
}

#define WRAP(T, P)                                                                                                         \
  cusolverStatus_t cusolverDn##P##getrf_bufferSize(cusolverDnHandle_t h, int m, int n, T *A, int lda, int *lw) {           \
    (void)A; CHECK_HANDLE(h); if (!lw || lda < std::max(1, m) || n < 0) return CUSOLVER_STATUS_INVALID_VALUE; *lw = 1;     \
    return CUSOLVER_STATUS_SUCCESS; }                                                                                      \
  cusolverStatus_t cusolverDn##P##getrf(cusolverDnHandle_t h, int m, int n, T *A, int lda, T *w, int *ipiv, int *info) {  \
    return getrf<T>(h, m, n, A, lda, w, ipiv, info); }                                                                     \
  cusolverStatus_t cusolverDn##P##getrs(cusolverDnHandle_t h, cublasOperation_t t, int n, int nrhs, const T *A, int lda,   \
                                        const int *ipiv, T *B, int ldb, int *info) {                                       \
    return getrs<T>(h, t, n, nrhs, A, lda, ipiv, B, ldb, info); }                                                          \
  cusolverStatus_t cusolverDn##P##potrf_bufferSize(cusolverDnHandle_t h, cublasFillMode_t u, int n, T *A, int lda, int *lw) { \
    (void)u; (void)A; CHECK_HANDLE(h); if (!lw || n < 0 || lda < std::max(1, n)) return CUSOLVER_STATUS_INVALID_VALUE;    \
    *lw = 1; return CUSOLVER_STATUS_SUCCESS; }                                                                             \
  cusolverStatus_t cusolverDn##P##potrf(cusolverDnHandle_t h, cublasFillMode_t u, int n, T *A, int lda, T *w, int lw, int *info) { \
    return potrf<T>(h, u, n, A, lda, w, lw, info); }                                                                       \
  cusolverStatus_t cusolverDn##P##geqrf_bufferSize(cusolverDnHandle_t h, int m, int n, T *A, int lda, int *lw) {           \
    (void)A; CHECK_HANDLE(h); if (!lw || m < 0 || n < 0 || lda < std::max(1, m)) return CUSOLVER_STATUS_INVALID_VALUE;     \
    *lw = geqrf_query<T>(m, n); return CUSOLVER_STATUS_SUCCESS; }                                                          \
  cusolverStatus_t cusolverDn##P##geqrf(cusolverDnHandle_t h, int m, int n, T *A, int lda, T *tau, T *w, int lw, int *info) { \
    return geqrf<T>(h, m, n, A, lda, tau, w, lw, info); }                                                                  \
  cusolverStatus_t cusolverDn##P##orgqr_bufferSize(cusolverDnHandle_t h, int m, int n, int k, const T *A, int lda,         \
                                                   const T *tau, int *lw) {                                                \
    (void)A; (void)tau; CHECK_HANDLE(h); if (!lw || n > m || k > n || lda < std::max(1, m)) return CUSOLVER_STATUS_INVALID_VALUE; \
    *lw = orgqr_query<T>(m, n, k); return CUSOLVER_STATUS_SUCCESS; }                                                       \
  cusolverStatus_t cusolverDn##P##orgqr(cusolverDnHandle_t h, int m, int n, int k, T *A, int lda, const T *tau, T *w,      \
                                        int lw, int *info) {                                                               \
    return orgqr<T>(h, m, n, k, A, lda, tau, w, lw, info); }                                                               \
  cusolverStatus_t cusolverDn##P##syevd_bufferSize(cusolverDnHandle_t h, cusolverEigMode_t j, cublasFillMode_t u, int n,   \
                                                   const T *A, int lda, const T *W, int *lw) {                             \
    (void)A; (void)W; CHECK_HANDLE(h); if (!lw || n < 0 || lda < std::max(1, n)) return CUSOLVER_STATUS_INVALID_VALUE;    \
    int liw; syevd_query<T>(j == CUSOLVER_EIG_MODE_VECTOR ? 'V' : 'N', uplo_char(u), n, lw, &liw);                         \
    return CUSOLVER_STATUS_SUCCESS; }                                                                                      \
  cusolverStatus_t cusolverDn##P##syevd(cusolverDnHandle_t h, cusolverEigMode_t j, cublasFillMode_t u, int n, T *A,        \
                                        int lda, T *W, T *w, int lw, int *info) {                                          \
    return syevd<T>(h, j, u, n, A, lda, W, w, lw, info); }                                                                 \
  cusolverStatus_t cusolverDn##P##gesvd_bufferSize(cusolverDnHandle_t h, int m, int n, int *lw) {                          \
    CHECK_HANDLE(h); if (!lw || m < n || n < 0) return CUSOLVER_STATUS_INVALID_VALUE;                                      \
    *lw = gesvd_query<T>(m, n); return CUSOLVER_STATUS_SUCCESS; }                                                          \
  cusolverStatus_t cusolverDn##P##gesvd(cusolverDnHandle_t h, signed char ju, signed char jv, int m, int n, T *A, int lda,  \
                                        T *S, T *U, int ldu, T *VT, int ldvt, T *w, int lw, T *rw, int *info) {            \
    return gesvd<T>(h, ju, jv, m, n, A, lda, S, U, ldu, VT, ldvt, w, lw, rw, info); }
WRAP(float, S)
WRAP(double, D)
#undef WRAP

cusolverStatus_t cusolverDnCreateParams(cusolverDnParams_t *p) {
  if (!p) return CUSOLVER_STATUS_INVALID_VALUE;
  *p = new cusolverDnParams();
  return CUSOLVER_STATUS_SUCCESS;
}
cusolverStatus_t cusolverDnDestroyParams(cusolverDnParams_t p) { delete p; return CUSOLVER_STATUS_SUCCESS; }
cusolverStatus_t cusolverDnXgeev_bufferSize(cusolverDnHandle_t h, cusolverDnParams_t p, cusolverEigMode_t jl, cusolverEigMode_t jr,
                                            int64_t n, cudaDataType ta, const void *A, int64_t lda, cudaDataType tw, const void *W,
                                            cudaDataType tvl, const void *VL, int64_t ldvl, cudaDataType tvr, const void *VR,
                                            int64_t ldvr, cudaDataType tc, size_t *dbytes, size_t *hbytes) {
  (void)A; (void)W; (void)VL; (void)VR;
  CHECK_HANDLE(h);
  if (!dbytes || !hbytes || !geev_args(h, p, jl, jr, n, lda, ldvl, ldvr) || !geev_types(ta, tw, tvl, tvr, tc)) return CUSOLVER_STATUS_INVALID_VALUE;
  char jv = jr == CUSOLVER_EIG_MODE_VECTOR ? 'V' : 'N';
  size_t es = ta == CUDA_R_64F ? 8 : 4;
  *dbytes = es * (size_t)(ta == CUDA_R_64F ? geev_lwork<double>(jv, (int)n) : geev_lwork<float>(jv, (int)n));
  *hbytes = es * 2 * (size_t)std::max<int64_t>(1, n);
  return CUSOLVER_STATUS_SUCCESS;
}
cusolverStatus_t cusolverDnXgeev(cusolverDnHandle_t h, cusolverDnParams_t p, cusolverEigMode_t jl, cusolverEigMode_t jr, int64_t n,
                                 cudaDataType ta, void *A, int64_t lda, cudaDataType tw, void *W, cudaDataType tvl, void *VL,
                                 int64_t ldvl, cudaDataType tvr, void *VR, int64_t ldvr, cudaDataType tc, void *dwork, size_t dbytes,
                                 void *hwork, size_t hbytes, int *info) {
  (void)VL;
  CHECK_HANDLE(h);
  if (!geev_args(h, p, jl, jr, n, lda, ldvl, ldvr) || !geev_types(ta, tw, tvl, tvr, tc)) return CUSOLVER_STATUS_INVALID_VALUE;
  if (ta == CUDA_R_64F)
    return xgeev<double>(jr, (int)n, (double *)A, (int)lda, (double *)W, (double *)VR, (int)ldvr, dwork, dbytes, hwork, hbytes, info);
  return xgeev<float>(jr, (int)n, (float *)A, (int)lda, (float *)W, (float *)VR, (int)ldvr, dwork, dbytes, hwork, hbytes, info);
}

}  // extern "C"
