/*
** linalg/leigkern.c — linalg.eig's CPU kernels (linternal.h gives the
** buffers): LAPACK's geev on real matrices, whose packed real eigenvectors
** are unpacked here into complex columns, and the backward's complex algebra
** (gemm, getrf/getrs on complex matrices).
**
** Complex buffers are real tensors of the part dtype with a trailing axis of
** 2 (re, im): the layout of c64/c128 and of C's T _Complex, so a pointer to
** the pairs is a pointer to complex numbers.  The complex arithmetic uses the
** compiler's T _Complex (GNU C: __real__, __imag__, __builtin_complex), not
** <complex.h>, whose name the tensor/ include path would shadow.
*/
#include "linternal.h"
#include "lapack.h"
#include <math.h>
#include <stdlib.h>

/* parallel over the batch when the matrices are small (lkernels.c's rule) */
#define EIG_PAR(B, n) ((B) > 1 && (n) <= 256)
#define I32(t) ((lp_int *)nt_base(t))

static int lp_fail(const char *op, lp_int info) {
  nt_error_set("%s: LAPACK rejected argument %d (internal error)", op, (int)-info);
  return -1;
}

/* geev's real eigenvector matrix vr (column-major, n x n) to complex columns:
** for a conjugate pair (wi[j] > 0, wi[j+1] = -wi[j]) the vectors are
** vr[:,j] ± i vr[:,j+1]; a real eigenvalue's vector is vr[:,j] itself.  geev
** normalizes each to unit 2-norm with its largest component real (the pair
** shares one normalization, so both halves have norm 1). */
#define EIG_UNPACK(T, P)                                                                         \
static void P##eig_unpack(const T *vr, const T *wi, lp_int n, T *out) {                          \
  for (lp_int j = 0; j < n; j++) {                                                               \
    T *c = out + 2 * (int64_t)j * n; const T *re = vr + (int64_t)j * n;                          \
    if (wi[j] > 0 && j + 1 < n) {                                                                \
      const T *im = re + n; T *c2 = c + 2 * (int64_t)n;                                          \
      for (lp_int i = 0; i < n; i++) {                                                           \
        c[2 * i] = c2[2 * i] = re[i]; c[2 * i + 1] = im[i]; c2[2 * i + 1] = -im[i];              \
      }                                                                                          \
      j++;                                                                                       \
    } else                                                                                       \
      for (lp_int i = 0; i < n; i++) { c[2 * i] = re[i]; c[2 * i + 1] = 0; }                     \
  }                                                                                              \
}
EIG_UNPACK(float, s)
EIG_UNPACK(double, d)

#define EIG_KERNELS(T, C, P, Q)                                                                             \
static int P##k_geev(const nt_KernelArgs *a, const nt_Lapack *L) {                                         \
  nt_Tensor *A = a->in[0], *V = a->in[1]; int64_t B = lin_batch(A); lp_int n = (lp_int)A->shape[A->ndim - 1]; \
  T *ab = (T *)nt_base(A), *wb = (T *)nt_base(a->out), *vb = V ? (T *)nt_base(V) : NULL;                    \
  lp_int *info = I32(a->in[2]);                                                                              \
  const char jobvl = 'N', jobvr = V ? 'V' : 'N';                                                             \
  lp_int lda = n > 1 ? n : 1, one = 1, lw = -1, inf0 = 0; T w1 = 0, d1 = 0, d2 = 0, d3 = 0;                 \
  L->P##geev(&jobvl, &jobvr, &n, ab, &lda, &d1, &d2, &d3, &one, &d3, &lda, &w1, &lw, &inf0, 1, 1);           \
  if (inf0 < 0) return lp_fail("geev", inf0);                                                                \
  lp_int lwork = (lp_int)w1 + 1; volatile int stop = 0; int64_t nn = (int64_t)n * n;                        \
  size_t scratch = (size_t)lwork + 2 * (size_t)n + (V ? (size_t)nn : 0);                                    \
  LIN_PARALLEL(EIG_PAR(B, n),                                                                 \
  {                                                                                                          \
    T *work = malloc(sizeof(T) * scratch), *wr = work ? work + lwork : NULL;                                 \
    T *wi = wr ? wr + n : NULL, *vr = wi ? wi + n : NULL;                                                    \
    if (!work) stop = 3;                                                                                     \
    _Pragma("omp for")                                                                                       \
    for (int64_t b = 0; b < B; b++) {                                                                        \
      if (stop || NT_INTERRUPTED()) { if (!stop) stop = 1; continue; }                                       \
      T dummy = 0;                                                                                           \
      L->P##geev(&jobvl, &jobvr, &n, ab + b * nn, &lda, wr, wi, &dummy, &one, V ? vr : &dummy, &lda,         \
                 work, &lwork, info + b, 1, 1);                                                              \
      if (info[b] < 0) { stop = 2; continue; }                                                               \
      if (info[b] > 0) continue;           /* not converged: the front end reports it */                    \
      T *w = wb + b * 2 * (int64_t)n;                                                                        \
      for (lp_int j = 0; j < n; j++) { w[2 * j] = wr[j]; w[2 * j + 1] = wi[j]; }                             \
      if (V) P##eig_unpack(vr, wi, n, vb + b * 2 * nn);                                                      \
    }                                                                                                        \
    free(work);                                                                                              \
  });                                                                                                          \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                      \
  if (stop == 3) { nt_error_oom(sizeof(T) * scratch); return -1; }                                          \
  return stop ? lp_fail("geev", -1) : 0;                                                                     \
}                                                                                                            \
/* one matrix of the backward (torch's linalg_eig_backward, real A), all                                      \
** column-major complex n x n in s[0..3], ipiv n:                                                             \
**   gL part: M = diag(gL)                                                                                    \
**   gV part: M = (V^H gV - V^H V diag(Re diag(V^H gV))) / conj(E),  E_ij = L_j - L_i, M_jj = 0              \
**   gA = Re(V^-H M V^H)                                                                                      \
** returns 0, or the info code (linternal.h) */                                                              \
static int P##eig_back_one(const nt_Lapack *L, lp_int n, const T *l, const T *vrow, const T *g, int vecs,   \
                           C *s, lp_int *ipiv, T *ga) {                                                      \
  int64_t nn = (int64_t)n * n; C *vc = s, *m = s + nn, *w = s + 2 * nn, *r = s + 3 * nn;                     \
  const C one = 1, zero = 0; lp_int inf = 0;                                                                 \
  for (lp_int i = 0; i < n; i++)                      /* row-major V -> column-major */                      \
    for (lp_int j = 0; j < n; j++)                                                                           \
      vc[(int64_t)j * n + i] = __builtin_complex(vrow[2 * ((int64_t)i * n + j)], vrow[2 * ((int64_t)i * n + j) + 1]); \
  if (!vecs) {                                                                                               \
    for (int64_t k = 0; k < nn; k++) m[k] = 0;                                                               \
    for (lp_int j = 0; j < n; j++) m[(int64_t)j * n + j] = __builtin_complex(g[2 * j], g[2 * j + 1]);        \
  } else {                                                                                                   \
    for (lp_int i = 0; i < n; i++)                    /* gV -> column-major, in r for now */                 \
      for (lp_int j = 0; j < n; j++)                                                                         \
        r[(int64_t)j * n + i] = __builtin_complex(g[2 * ((int64_t)i * n + j)], g[2 * ((int64_t)i * n + j) + 1]); \
    L->Q##gemm("C", "N", &n, &n, &n, &one, vc, &n, r, &n, &zero, m, &n, 1, 1);      /* M = V^H gV */        \
    L->Q##gemm("C", "N", &n, &n, &n, &one, vc, &n, vc, &n, &zero, w, &n, 1, 1);     /* W = V^H V */         \
    for (lp_int j = 0; j < n; j++) {                                                                         \
      C d = m[(int64_t)j * n + j];                                                                           \
      /* the loss must not depend on each eigenvector's phase (torch's check and tolerance) */               \
      if (fabs((double)__imag__ d) > 1e-2) return 1;                                                         \
      for (lp_int i = 0; i < n; i++) m[(int64_t)j * n + i] -= w[(int64_t)j * n + i] * __real__ d;            \
    }                                                                                                        \
    for (lp_int j = 0; j < n; j++)                                                                           \
      for (lp_int i = 0; i < n; i++) {                                                                       \
        C *x = &m[(int64_t)j * n + i];                                                                       \
        if (i == j) { *x = 0; continue; }                                                                    \
        C e = __builtin_complex((T)(l[2 * j] - l[2 * i]), (T)(l[2 * i + 1] - l[2 * j + 1]));   /* conj */    \
        if (__real__ e == 0 && __imag__ e == 0) return 2;                                                    \
        *x /= e;                                                                                             \
      }                                                                                                      \
  }                                                                                                          \
  L->Q##gemm("N", "C", &n, &n, &n, &one, m, &n, vc, &n, &zero, r, &n, 1, 1);        /* R = M V^H */         \
  L->Q##getrf(&n, &n, vc, &n, ipiv, &inf);                                          /* V = P L U */         \
  if (inf > 0) return 3;                                                                                     \
  if (inf == 0) L->Q##getrs("C", &n, &n, vc, &n, ipiv, r, &n, &inf, 1);             /* V^H X = R */         \
  if (inf < 0) return -1;                                                                                    \
  for (lp_int i = 0; i < n; i++)                                                                             \
    for (lp_int j = 0; j < n; j++) ga[(int64_t)i * n + j] = __real__ r[(int64_t)j * n + i];                  \
  return 0;                                                                                                  \
}                                                                                                            \
static int P##k_eig_backward(const nt_KernelArgs *a, const nt_Lapack *L) {                                 \
  nt_Tensor *GA = a->out; int64_t B = lin_batch(GA); lp_int n = (lp_int)GA->shape[GA->ndim - 1];            \
  const T *lb = (const T *)nt_base(a->in[0]), *vb = (const T *)nt_base(a->in[1]), *gb = (const T *)nt_base(a->in[2]); \
  T *gab = (T *)nt_base(GA); lp_int *info = I32(a->in[3]); int vecs = (int)a->iarg[0];                       \
  int64_t nn = (int64_t)n * n; volatile int stop = 0;                                                        \
  size_t bytes = sizeof(C) * 4 * (size_t)nn + sizeof(lp_int) * (size_t)n;                                    \
  LIN_PARALLEL(EIG_PAR(B, n),                                                                 \
  {                                                                                                          \
    C *s = malloc(bytes); lp_int *ipiv = s ? (lp_int *)(s + 4 * nn) : NULL;                                  \
    if (!s) stop = 3;                                                                                        \
    _Pragma("omp for")                                                                                       \
    for (int64_t b = 0; b < B; b++) {                                                                        \
      if (stop || NT_INTERRUPTED()) { if (!stop) stop = 1; continue; }                                       \
      int rc = P##eig_back_one(L, n, lb + b * 2 * (int64_t)n, vb + b * 2 * nn,                               \
                               gb + b * 2 * (vecs ? nn : (int64_t)n), vecs, s, ipiv, gab + b * nn);          \
      if (rc < 0) stop = 2; else info[b] = rc;                                                               \
    }                                                                                                        \
    free(s);                                                                                                 \
  });                                                                                                          \
  if (stop == 1) NT_FAIL_INTERRUPTED();                                                                      \
  if (stop == 3) { nt_error_oom(bytes); return -1; }                                                         \
  return stop ? lp_fail("getrs", -1) : 0;                                                                    \
}

EIG_KERNELS(float, float _Complex, s, c)
EIG_KERNELS(double, double _Complex, d, z)

static int k_geev(const nt_KernelArgs *a) {
  if (a->in[0]->numel == 0) return 0;
  const nt_Lapack *L = nt_lapack();
  if (!L) return -1;
  return a->in[0]->dtype == NT_F64 ? dk_geev(a, L) : sk_geev(a, L);
}
static int k_eig_backward(const nt_KernelArgs *a) {
  if (a->out->numel == 0) return 0;
  const nt_Lapack *L = nt_lapack();
  if (!L) return -1;
  return a->out->dtype == NT_F64 ? dk_eig_backward(a, L) : sk_eig_backward(a, L);
}

void lin_register_eig_cpu(void) {
  nt_register_kernel(lin_ops.geev, NT_CPU, k_geev);
  nt_register_kernel(lin_ops.eig_backward, NT_CPU, k_eig_backward);
}
