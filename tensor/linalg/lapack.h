/*
** linalg/lapack.h — LAPACK's Fortran entry points, resolved from the OpenBLAS
** library tensor/tblas.c loads (OpenBLAS ships LAPACK; no LAPACKE needed).
** Private to tensor/linalg/.
**
** Fortran calling convention: every argument by address, column-major
** matrices, 32-bit integers (Debian's OpenBLAS is LP64), and one hidden
** length (size_t) per CHARACTER argument, appended after the others: we pass
** them, since routines built by gfortran may read them.
**
** nt_lapack() loads every routine the first time; a library without one is
** a broken install and fails with the routine's name (NULL + error).
*/
#ifndef NT_LINALG_LAPACK_H
#define NT_LINALG_LAPACK_H
#include <stddef.h>

typedef int lp_int;
#define LP_ROUTINES(T, P) \
  void (*P##getrf)(const lp_int *m, const lp_int *n, T *a, const lp_int *lda, lp_int *ipiv, lp_int *info); \
  void (*P##getrs)(const char *trans, const lp_int *n, const lp_int *nrhs, const T *a, const lp_int *lda, \
                   const lp_int *ipiv, T *b, const lp_int *ldb, lp_int *info, size_t); \
  void (*P##potrf)(const char *uplo, const lp_int *n, T *a, const lp_int *lda, lp_int *info, size_t); \
  void (*P##trtrs)(const char *uplo, const char *trans, const char *diag, const lp_int *n, const lp_int *nrhs, \
                   const T *a, const lp_int *lda, T *b, const lp_int *ldb, lp_int *info, size_t, size_t, size_t); \
  void (*P##geqrf)(const lp_int *m, const lp_int *n, T *a, const lp_int *lda, T *tau, T *work, const lp_int *lwork, \
                   lp_int *info); \
  void (*P##orgqr)(const lp_int *m, const lp_int *n, const lp_int *k, T *a, const lp_int *lda, const T *tau, T *work, \
                   const lp_int *lwork, lp_int *info); \
  void (*P##syevd)(const char *jobz, const char *uplo, const lp_int *n, T *a, const lp_int *lda, T *w, T *work, \
                   const lp_int *lwork, lp_int *iwork, const lp_int *liwork, lp_int *info, size_t, size_t); \
  void (*P##gesdd)(const char *jobz, const lp_int *m, const lp_int *n, T *a, const lp_int *lda, T *s, T *u, \
                   const lp_int *ldu, T *vt, const lp_int *ldvt, T *work, const lp_int *lwork, lp_int *iwork, \
                   lp_int *info, size_t);

/* linalg.eig: geev on real matrices, and the complex BLAS/LAPACK its backward
** needs (C = the complex type of T: float _Complex, double _Complex) */
#define LP_EIG_ROUTINES(T, C, P, Q) \
  void (*P##geev)(const char *jobvl, const char *jobvr, const lp_int *n, T *a, const lp_int *lda, T *wr, T *wi, \
                  T *vl, const lp_int *ldvl, T *vr, const lp_int *ldvr, T *work, const lp_int *lwork, lp_int *info, \
                  size_t, size_t); \
  void (*Q##gemm)(const char *ta, const char *tb, const lp_int *m, const lp_int *n, const lp_int *k, const C *alpha, \
                  const C *a, const lp_int *lda, const C *b, const lp_int *ldb, const C *beta, C *c, \
                  const lp_int *ldc, size_t, size_t); \
  void (*Q##getrf)(const lp_int *m, const lp_int *n, C *a, const lp_int *lda, lp_int *ipiv, lp_int *info); \
  void (*Q##getrs)(const char *trans, const lp_int *n, const lp_int *nrhs, const C *a, const lp_int *lda, \
                   const lp_int *ipiv, C *b, const lp_int *ldb, lp_int *info, size_t);

typedef struct nt_Lapack {
  LP_ROUTINES(float, s)
  LP_ROUTINES(double, d)
  LP_EIG_ROUTINES(float, float _Complex, s, c)
  LP_EIG_ROUTINES(double, double _Complex, d, z)
} nt_Lapack;

const nt_Lapack *nt_lapack(void);

#endif
