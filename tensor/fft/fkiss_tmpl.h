/*
** fft/fkiss_tmpl.h — the CPU FFT kernels over kissfft, written once and
** instantiated per precision by fkiss_f32.c (Debian's libkissfft-float) and
** fkiss_f64.c (the same upstream sources built for double, kissfft/).
**
** The includer defines, before including this file:
**   SCALAR  float | double          CPX     the kiss_fft_cpx of that build
**   SFX(x)  x##_f32 | x##_f64       KF_ALLOC, KF_FFT, KFR_ALLOC, KFR_FWD, KFR_INV
**                                   the kissfft entry points of that build
**
** Contract (fft/finternal.h): every buffer is contiguous, rows of a batch:
**   c2c  in [B, n] complex -> out [B, n] complex: out = s * sum_j in_j w^(jk),
**        w = exp(-2 pi i / n) forward, exp(+2 pi i / n) inverse (iarg[0] = 1: forward)
**   r2c  in [B, n] real -> out [B, n/2 + 1]: the first half of the forward c2c
**   c2r  in [B, n/2 + 1] -> out [B, n] real: the inverse c2c of the Hermitian
**        extension X[n - k] = conj(X[k]), real part (the imaginary parts of
**        X[0] and, n even, X[n/2] do not matter)
** with s = s[0].  kissfft's real transforms need an even n; odd lengths go
** through the complex one on a zero-imaginary / Hermitian-extended row.
**
** Plans: a kissfft config holds the twiddles (O(n) sines and cosines, as
** costly as the transform itself), so configs are pooled per (n, kind):
** each call takes one per thread from the pool and gives it back.  A
** kiss_fftr config also has scratch (written during a transform), which is
** why a config is never shared by two threads at once.
*/

typedef struct SFX(Plan) {
  int n, kind;                 /* kind: 0 c2c forward, 1 c2c inverse, 2 r2c (even n), 3 c2r (even n) */
  void *cfg;                   /* kiss_fft_cfg or kiss_fftr_cfg (malloc'd: free) */
  CPX *tmp;                    /* [2 n] scratch for the odd real paths */
  struct SFX(Plan) *next;
} SFX(Plan);

static pthread_mutex_t SFX(pool_mu) = PTHREAD_MUTEX_INITIALIZER;
static SFX(Plan) *SFX(pool);   /* free plans (reachable: not leaks at exit) */
static int SFX(pool_n);
#define POOL_MAX 32

static SFX(Plan) *SFX(plan_get)(int n, int kind) {
  pthread_mutex_lock(&SFX(pool_mu));
  for (SFX(Plan) **pp = &SFX(pool); *pp; pp = &(*pp)->next)
    if ((*pp)->n == n && (*pp)->kind == kind) {
      SFX(Plan) *p = *pp;
      *pp = p->next; SFX(pool_n)--;
      pthread_mutex_unlock(&SFX(pool_mu));
      return p;
    }
  pthread_mutex_unlock(&SFX(pool_mu));
  SFX(Plan) *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n; p->kind = kind;
  p->cfg = kind <= 1 ? (void *)KF_ALLOC(n, kind == 1, NULL, NULL) : (void *)KFR_ALLOC(n, kind == 3, NULL, NULL);
  p->tmp = malloc(2 * (size_t)n * sizeof(CPX));
  if (!p->cfg || !p->tmp) { free(p->cfg); free(p->tmp); free(p); return NULL; }
  return p;
}
static void SFX(plan_put)(SFX(Plan) *p) {
  if (!p) return;
  pthread_mutex_lock(&SFX(pool_mu));
  if (SFX(pool_n) < POOL_MAX) { p->next = SFX(pool); SFX(pool) = p; SFX(pool_n)++; p = NULL; }
  pthread_mutex_unlock(&SFX(pool_mu));
  if (p) { free(p->cfg); free(p->tmp); free(p); }
}

/* one row: in -> out (kind as in the contract; n the transform length) */
static void SFX(row)(int op, SFX(Plan) *p, SFX(Plan) *pc, int n, const void *in, void *out, SCALAR s) {
  int m = n / 2 + 1;
  if (op == 0) {   /* c2c */
    CPX *o = out;
    KF_FFT(p->cfg, in, o);
    if (s != 1) for (int k = 0; k < n; k++) { o[k].r *= s; o[k].i *= s; }
  } else if (op == 1) {   /* r2c */
    const SCALAR *x = in; CPX *o = out;
    if (p) KFR_FWD(p->cfg, x, o);
    else {
      CPX *t = pc->tmp, *f = pc->tmp + n;
      for (int j = 0; j < n; j++) { t[j].r = x[j]; t[j].i = 0; }
      KF_FFT(pc->cfg, t, f);
      memcpy(o, f, (size_t)m * sizeof(CPX));
    }
    if (s != 1) for (int k = 0; k < m; k++) { o[k].r *= s; o[k].i *= s; }
  } else {   /* c2r */
    const CPX *X = in; SCALAR *y = out;
    if (p) KFR_INV(p->cfg, X, y);
    else {
      CPX *t = pc->tmp, *f = pc->tmp + n;
      for (int k = 0; k < m; k++) t[k] = X[k];
      for (int k = m; k < n; k++) { t[k].r = X[n - k].r; t[k].i = -X[n - k].i; }
      KF_FFT(pc->cfg, t, f);
      for (int j = 0; j < n; j++) y[j] = f[j].r;
    }
    if (s != 1) for (int j = 0; j < n; j++) y[j] *= s;
  }
}

/* op 0 c2c, 1 r2c, 2 c2r over the B rows of a; parallel over rows */
static int SFX(run)(int op, const nt_KernelArgs *a, int64_t B, int n) {
  const char *in = nt_base(a->in[0]);
  char *out = nt_base(a->out);
  int m = n / 2 + 1;
  size_t ci = sizeof(CPX), ri = sizeof(SCALAR);
  size_t istep = op == 0 ? (size_t)n * ci : op == 1 ? (size_t)n * ri : (size_t)m * ci;
  size_t ostep = op == 0 ? (size_t)n * ci : op == 1 ? (size_t)m * ci : (size_t)n * ri;
  bool real_fast = op != 0 && n % 2 == 0;
  int kind = op == 0 ? (a->iarg[0] ? 0 : 1) : real_fast ? (op == 1 ? 2 : 3) : (op == 1 ? 0 : 1);
  SCALAR s = (SCALAR)a->s[0];
  int failed = 0;
  int nthreads = B >= 4 && (int64_t)n * B >= 32768 ? 0 : 1;   /* 0: OpenMP's default */
#pragma omp parallel num_threads(nthreads ? nthreads : omp_get_max_threads()) reduction(|:failed)
  {
    SFX(Plan) *p = SFX(plan_get)(n, kind);
    if (!p) failed = 1;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; b++) {   /* every thread reaches the loop, even one without a plan */
      if (!p || NT_INTERRUPTED()) continue;
      SFX(row)(op, real_fast || op == 0 ? p : NULL, real_fast || op == 0 ? NULL : p, n,
               in + (size_t)b * istep, out + (size_t)b * ostep, s);
    }
    SFX(plan_put)(p);
  }
  if (failed) NT_FAIL("fft: out of memory for a kissfft plan of length %d", n);
  if (NT_INTERRUPTED()) NT_FAIL_INTERRUPTED();
  return 0;
}
#undef POOL_MAX
