/*
** linalg/lkernels.c — the CPU factorization kernels: LAPACK's routines over a
** batch of column-major matrices (linternal.h gives each one's buffers).
**
** A batch of small matrices runs in parallel (OpenMP, one workspace per
** thread; OpenBLAS runs single-threaded inside a parallel region), a batch of
** one or of large matrices runs in order so OpenBLAS's own threads work inside
** each call.  Workspace sizes come from LAPACK's query (lwork = -1), asked once
** per call: every matrix of a batch has the same shape.
*/
#include "linternal.h"
#include "lapack.h"
#include <stdlib.h>

/* parallel over the batch when the matrices are small enough that one call
** cannot keep the cores busy */
#define LIN_PAR(B, n) ((B) > 1 && (n) <= 256)

static int lp_fail(const char *op, lp_int info) {
  nt_error_set("%s: LAPACK rejected argument %d (internal error)", op, (int)-info);
  return -1;
}

#define I32(t) ((lp_int *)nt_base(t))

/* Each kernel body is written once for T = float / double (P = s / d). */
#define LIN_KERNELS(T, P)                                                                                      \
static int P##k_getrf(const nt_KernelArgs *a, const nt_Lapack *L) {                                        \
  nt_Tensor *A = a->out; int64_t B = lin_batch(A); lp_int n = (lp_int)A->shape[A->ndim - 1];                \
  T *base = (T *)nt_base(A); lp_int *piv = I32(a->in[0]), *info = I32(a->in[1]);                            \
  volatile int stop = 0; int64_t nn = (int64_t)n * n;                                                         \
  LIN_PARALLEL_FOR(LIN_PAR(B, n),                                                              \
  for (int64_t b = 0; b < B; b++) {                                                                           \
    if (stop || NT_INTERRUPTED()) { stop = 1; continue; }                                                     \
    L->P##getrf(&n, &n, base + b * nn, &n, piv + b * n, info + b);                                            \
    if (info[b] < 0) stop = 2;                                                                                \
  });                                                                                                           \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                       \
  return stop ? lp_fail("getrf", -1) : 0;                                                                     \
}                                                                                                             \
static int P##k_getrs(const nt_KernelArgs *a, const nt_Lapack *L) {                                        \
  nt_Tensor *X = a->out, *LU = a->in[0]; int64_t B = lin_batch(X);                                          \
  lp_int n = (lp_int)X->shape[X->ndim - 1], nrhs = (lp_int)X->shape[X->ndim - 2], info = 0;                   \
  T *x = (T *)nt_base(X); const T *lu = (const T *)nt_base(LU); const lp_int *piv = I32(a->in[1]);           \
  const char tr = a->iarg[0] ? 'T' : 'N'; volatile int stop = 0; int64_t nn = (int64_t)n * n;                \
  LIN_PARALLEL_FOR(LIN_PAR(B, n),                                                              \
  for (int64_t b = 0; b < B; b++) {                                                                           \
    if (stop || NT_INTERRUPTED()) { stop = 1; continue; }                                                     \
    lp_int inf = 0;                                                                                           \
    L->P##getrs(&tr, &n, &nrhs, lu + b * nn, &n, piv + b * n, x + b * (int64_t)n * nrhs, &n, &inf, 1);        \
    if (inf < 0) { info = inf; stop = 2; }                                                                    \
  });                                                                                                           \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                       \
  return stop ? lp_fail("getrs", info) : 0;                                                                   \
}                                                                                                             \
static int P##k_potrf(const nt_KernelArgs *a, const nt_Lapack *L) {                                        \
  nt_Tensor *A = a->out; int64_t B = lin_batch(A); lp_int n = (lp_int)A->shape[A->ndim - 1];                \
  T *base = (T *)nt_base(A); lp_int *info = I32(a->in[0]); int upper = (int)a->iarg[0];                      \
  const char uplo = upper ? 'U' : 'L'; volatile int stop = 0; int64_t nn = (int64_t)n * n;                   \
  LIN_PARALLEL_FOR(LIN_PAR(B, n),                                                              \
  for (int64_t b = 0; b < B; b++) {                                                                           \
    if (stop || NT_INTERRUPTED()) { stop = 1; continue; }                                                     \
    T *m = base + b * nn;                                                                                     \
    L->P##potrf(&uplo, &n, m, &n, info + b, 1);                                                               \
    if (info[b] < 0) stop = 2;                                                                                \
    /* LAPACK leaves the other triangle as it was: zero it (column j, row i at m[j*n + i]) */                 \
    for (lp_int j = 0; j < n; j++)                                                                            \
      for (lp_int i = 0; i < n; i++)                                                                          \
        if (upper ? i > j : i < j) m[(int64_t)j * n + i] = 0;                                                 \
  });                                                                                                           \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                       \
  return stop ? lp_fail("potrf", -1) : 0;                                                                     \
}                                                                                                             \
static int P##k_trtrs(const nt_KernelArgs *a, const nt_Lapack *L) {                                        \
  nt_Tensor *X = a->out, *Tm = a->in[0]; int64_t B = lin_batch(X);                                          \
  lp_int n = (lp_int)X->shape[X->ndim - 1], nrhs = (lp_int)X->shape[X->ndim - 2];                             \
  T *x = (T *)nt_base(X); const T *t = (const T *)nt_base(Tm); lp_int *info = I32(a->in[1]);                  \
  const char uplo = a->iarg[0] ? 'U' : 'L', tr = a->iarg[1] ? 'T' : 'N', dg = a->iarg[2] ? 'U' : 'N';       \
  volatile int stop = 0; int64_t nn = (int64_t)n * n;                                                         \
  LIN_PARALLEL_FOR(LIN_PAR(B, n),                                                              \
  for (int64_t b = 0; b < B; b++) {                                                                           \
    if (stop || NT_INTERRUPTED()) { stop = 1; continue; }                                                     \
    L->P##trtrs(&uplo, &tr, &dg, &n, &nrhs, t + b * nn, &n, x + b * (int64_t)n * nrhs, &n, info + b, 1, 1, 1);\
    if (info[b] < 0) stop = 2;                                                                                \
  });                                                                                                           \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                       \
  return stop ? lp_fail("trtrs", -1) : 0;                                                                     \
}                                                                                                             \
static int P##k_qr(const nt_KernelArgs *a, const nt_Lapack *L) {                                           \
  nt_Tensor *A = a->in[0], *R = a->out, *Q = a->in[1]; int64_t B = lin_batch(A);                            \
  lp_int m = (lp_int)A->shape[A->ndim - 1], n = (lp_int)A->shape[A->ndim - 2], k = m < n ? m : n;             \
  lp_int rr = (lp_int)R->shape[R->ndim - 1], qc = Q ? (lp_int)Q->shape[Q->ndim - 2] : 0;                      \
  T *ab = (T *)nt_base(A), *rb = (T *)nt_base(R), *qb = Q ? (T *)nt_base(Q) : NULL;                           \
  lp_int lda = m > 1 ? m : 1, lw = -1, info = 0; T q1 = 0, q2 = 0;                                             \
  L->P##geqrf(&m, &n, ab, &lda, &q1, &q1, &lw, &info);                                                        \
  if (Q && qc > 0) L->P##orgqr(&m, &qc, &k, qb, &lda, &q2, &q2, &lw, &info);                                  \
  if (info < 0) return lp_fail("geqrf", info);                                                                \
  lp_int lwork = (lp_int)(q1 > q2 ? q1 : q2) + 1; volatile int stop = 0;                                      \
  LIN_PARALLEL(LIN_PAR(B, (m > n ? m : n)),                                                    \
  {                                                                                                           \
    T *work = malloc(sizeof(T) * ((size_t)lwork + (size_t)k + 1)), *tau = work ? work + lwork : NULL;          \
    if (!work) stop = 3;                                                                                      \
    _Pragma("omp for")                                                                                        \
    for (int64_t b = 0; b < B; b++) {                                                                         \
      if (stop || NT_INTERRUPTED()) { if (!stop) stop = 1; continue; }                                        \
      T *ma = ab + b * (int64_t)m * n; lp_int inf = 0;                                                        \
      L->P##geqrf(&m, &n, ma, &lda, tau, work, &lwork, &inf);                                                 \
      if (inf < 0) { stop = 2; continue; }                                                                    \
      /* R: the upper triangle of the first rr rows (column j, row i at r[j*rr + i]) */                       \
      T *r = rb + b * (int64_t)rr * n;                                                                        \
      for (lp_int j = 0; j < n; j++)                                                                          \
        for (lp_int i = 0; i < rr; i++) r[(int64_t)j * rr + i] = i <= j && i < m ? ma[(int64_t)j * m + i] : 0; \
      if (Q && qc > 0) {                                                                                      \
        /* Q: the reflectors (first min(qc, n) columns) expanded by orgqr */                                  \
        T *q = qb + b * (int64_t)m * qc;                                                                      \
        for (lp_int j = 0; j < qc; j++)                                                                       \
          for (lp_int i = 0; i < m; i++) q[(int64_t)j * m + i] = j < n ? ma[(int64_t)j * m + i] : 0;          \
        L->P##orgqr(&m, &qc, &k, q, &lda, tau, work, &lwork, &inf);                                           \
        if (inf < 0) stop = 2;                                                                                \
      }                                                                                                       \
    }                                                                                                         \
    free(work);                                                                                               \
  });                                                                                                           \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                       \
  if (stop == 3) { nt_error_oom(sizeof(T) * (size_t)lwork); return -1; }                                     \
  return stop ? lp_fail("geqrf/orgqr", -1) : 0;                                                               \
}                                                                                                             \
static int P##k_syevd(const nt_KernelArgs *a, const nt_Lapack *L) {                                        \
  nt_Tensor *V = a->out; int64_t B = lin_batch(V); lp_int n = (lp_int)V->shape[V->ndim - 1];                \
  T *vb = (T *)nt_base(V), *wb = (T *)nt_base(a->in[0]); lp_int *info = I32(a->in[1]);                       \
  const char jobz = a->iarg[1] ? 'V' : 'N', uplo = a->iarg[0] ? 'U' : 'L';                                   \
  lp_int lda = n > 1 ? n : 1, lw = -1, liw = -1, iw1 = 0, inf0 = 0; T w1 = 0;                                 \
  L->P##syevd(&jobz, &uplo, &n, vb, &lda, wb, &w1, &lw, &iw1, &liw, &inf0, 1, 1);                            \
  if (inf0 < 0) return lp_fail("syevd", inf0);                                                                \
  lp_int lwork = (lp_int)w1 + 1, liwork = iw1 + 1; volatile int stop = 0; int64_t nn = (int64_t)n * n;       \
  LIN_PARALLEL(LIN_PAR(B, n),                                                                  \
  {                                                                                                           \
    T *work = malloc(sizeof(T) * (size_t)lwork); lp_int *iwork = malloc(sizeof(lp_int) * (size_t)liwork);    \
    if (!work || !iwork) stop = 3;                                                                            \
    _Pragma("omp for")                                                                                        \
    for (int64_t b = 0; b < B; b++) {                                                                         \
      if (stop || NT_INTERRUPTED()) { if (!stop) stop = 1; continue; }                                        \
      L->P##syevd(&jobz, &uplo, &n, vb + b * nn, &lda, wb + b * n, work, &lwork, iwork, &liwork, info + b, 1, 1); \
      if (info[b] < 0) stop = 2;                                                                              \
    }                                                                                                         \
    free(work); free(iwork);                                                                                  \
  });                                                                                                           \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                       \
  if (stop == 3) { nt_error_oom(sizeof(T) * (size_t)lwork); return -1; }                                     \
  return stop ? lp_fail("syevd", -1) : 0;                                                                     \
}                                                                                                             \
static int P##k_gesdd(const nt_KernelArgs *a, const nt_Lapack *L) {                                        \
  nt_Tensor *A = a->in[0], *S = a->out, *U = a->in[1], *VT = a->in[2]; int64_t B = lin_batch(A);            \
  lp_int m = (lp_int)A->shape[A->ndim - 1], n = (lp_int)A->shape[A->ndim - 2], k = m < n ? m : n;             \
  lp_int *info = I32(a->in[3]);                                                                               \
  const char jobz = !U ? 'N' : U->shape[U->ndim - 2] == m && m != k ? 'A'                                     \
                    : VT->shape[VT->ndim - 1] == n && n != k ? 'A' : 'S';                                     \
  lp_int uc = U ? (lp_int)U->shape[U->ndim - 2] : 1, vr = U ? (lp_int)VT->shape[VT->ndim - 1] : 1;            \
  lp_int lda = m > 1 ? m : 1, ldu = m > 1 ? m : 1, ldvt = vr > 1 ? vr : 1, lw = -1, inf0 = 0; T w1 = 0, d1 = 0; \
  T *ab = (T *)nt_base(A), *sb = (T *)nt_base(S), *ub = U ? (T *)nt_base(U) : NULL, *vb = U ? (T *)nt_base(VT) : NULL; \
  lp_int *iw0 = malloc(sizeof(lp_int) * (8 * (size_t)k + 1));                                               \
  if (!iw0) { nt_error_oom(sizeof(lp_int) * 8 * (size_t)k); return -1; }                                      \
  L->P##gesdd(&jobz, &m, &n, ab, &lda, sb, &d1, &ldu, &d1, &ldvt, &w1, &lw, iw0, &inf0, 1);                   \
  free(iw0);                                                                                                  \
  if (inf0 < 0) return lp_fail("gesdd", inf0);                                                                \
  lp_int lwork = (lp_int)w1 + 1; volatile int stop = 0;                                                       \
  LIN_PARALLEL(LIN_PAR(B, (m > n ? m : n)),                                                    \
  {                                                                                                           \
    T *work = malloc(sizeof(T) * (size_t)lwork); lp_int *iwork = malloc(sizeof(lp_int) * (8 * (size_t)k + 1)); \
    if (!work || !iwork) stop = 3;                                                                            \
    _Pragma("omp for")                                                                                        \
    for (int64_t b = 0; b < B; b++) {                                                                         \
      if (stop || NT_INTERRUPTED()) { if (!stop) stop = 1; continue; }                                        \
      T dummy = 0;                                                                                            \
      L->P##gesdd(&jobz, &m, &n, ab + b * (int64_t)m * n, &lda, sb + b * k,                                   \
                  ub ? ub + b * (int64_t)m * uc : &dummy, &ldu, vb ? vb + b * (int64_t)n * vr : &dummy, &ldvt, \
                  work, &lwork, iwork, info + b, 1);                                                          \
      if (info[b] < 0) stop = 2;                                                                              \
    }                                                                                                         \
    free(work); free(iwork);                                                                                  \
  });                                                                                                           \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                       \
  if (stop == 3) { nt_error_oom(sizeof(T) * (size_t)lwork); return -1; }                                     \
  return stop ? lp_fail("gesdd", -1) : 0;                                                                     \
}

LIN_KERNELS(float, s)
LIN_KERNELS(double, d)

/* one entry per op: the dtype picks the routine; empty batches do nothing */
#define LIN_ENTRY(name, bufarg)                                                                \
  static int k_##name(const nt_KernelArgs *a) {                                                 \
    if ((bufarg)->numel == 0) return 0;                                                          \
    const nt_Lapack *L = nt_lapack();                                                            \
    if (!L) return -1;                                                                           \
    return (bufarg)->dtype == NT_F64 ? dk_##name(a, L) : sk_##name(a, L);                        \
  }
LIN_ENTRY(getrf, a->out)
LIN_ENTRY(getrs, a->out)
LIN_ENTRY(potrf, a->out)
LIN_ENTRY(trtrs, a->out)
LIN_ENTRY(qr, a->in[0])
LIN_ENTRY(syevd, a->out)
LIN_ENTRY(gesdd, a->in[0])

void lin_register_cpu(void) {
  nt_register_kernel(lin_ops.getrf, NT_CPU, k_getrf);
  nt_register_kernel(lin_ops.getrs, NT_CPU, k_getrs);
  nt_register_kernel(lin_ops.potrf, NT_CPU, k_potrf);
  nt_register_kernel(lin_ops.trtrs, NT_CPU, k_trtrs);
  nt_register_kernel(lin_ops.qr, NT_CPU, k_qr);
  nt_register_kernel(lin_ops.syevd, NT_CPU, k_syevd);
  nt_register_kernel(lin_ops.gesdd, NT_CPU, k_gesdd);
}
