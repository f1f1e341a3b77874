/*
** groupnorm.c — group normalisation and instance normalisation (instance
** norm is group norm with one channel per group): one fused forward kernel
** and one fused backward kernel (CPU here, CUDA in cuda/norm.cu).
**
** x is viewed as [N, C, S] (S = the product of the spatial axes), contiguous,
** with G groups of K = C/G channels.  Group (n, g) is the row r = n*G + g: its
** D = K*S values are contiguous, x[r*D + j], channel c = g*K + j/S.
**   mean_r = sum/D, var_r = sum((x - mean_r)^2)/D (f64 sums: f32 in one pass
**   shifted by x[r*D], f64 in two; see gn_stats_*),
**   rstd_r = 1/sqrt(var_r + eps),  y = (x - mean_r) * rstd_r * w[c] + b[c]
** backward (dxhat = g * w[c], sums over the row in f64; one pass for the sums of
** dx, dw and db together, one writing dx):
**   dx = rstd * (dxhat - sum(dxhat)/D - xhat * sum(dxhat * xhat)/D)
**   dw[c] = sum over n, s of g * xhat,  db[c] = sum of g
** stats: [N*G, 3] of the compute dtype, {mean, rstd, var} per row.
**
** Kernel arguments (both devices):
**   "group_norm"          out y; in = {x, w|NULL, b|NULL, stats}; iarg = {N, C, S, G};
**                         s[0] = eps; writes stats.
**   "group_norm_backward" out dx|NULL; in = {g, x, stats, w|NULL}; iarg as above;
**                         extra = nt_Tensor *[2] {dw|NULL, db|NULL}.
*/
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include "nninternal.h"
#include "batchnorm.h"

static int op_gn = -1, op_gn_bwd = -1;

/* Per-row pieces, compiled for AVX-512/AVX2/baseline and picked at load time
** (the default build targets baseline x86-64, where the f64 accumulators run
** two lanes wide); the OpenMP loops over rows stay outside them.  A row is
** always summed by one thread in one order, so results do not depend on the
** thread count (they may differ in the last bits between vector ISAs). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GN_CLONES
#endif

/* Statistics of one row of D values.  f32: one pass, shifted by the row's
** first value (x - x0 is exact in f64 for f32 x, and the cancellation in
** E[(x-x0)^2] - E[x-x0]^2 grows with (mean-x0)^2/var, O(1) for real data,
** instead of mean^2/var): f64 sums, well under f32's resolution.  f64: two
** passes (mean, then centred squares), as its precision needs. */
GN_CLONES static void gn_stats_float(const float *restrict x, int64_t D, double *mean, double *var) {
  double x0 = D ? x[0] : 0.0, s1 = 0, s2 = 0;
#pragma omp simd reduction(+:s1, s2)
  for (int64_t j = 0; j < D; j++) { double d = (double)x[j] - x0; s1 += d; s2 += d * d; }
  double m1 = D ? s1 / (double)D : 0.0, v = D ? s2 / (double)D - m1 * m1 : 0.0;
  *mean = x0 + m1;
  *var = v > 0 ? v : 0.0;
}
GN_CLONES static void gn_stats_double(const double *restrict x, int64_t D, double *mean, double *var) {
  double s1 = 0, s2 = 0;
#pragma omp simd reduction(+:s1)
  for (int64_t j = 0; j < D; j++) s1 += x[j];
  double m = D ? s1 / (double)D : 0.0;
#pragma omp simd reduction(+:s2)
  for (int64_t j = 0; j < D; j++) { double d = x[j] - m; s2 += d * d; }
  *mean = m;
  *var = D ? s2 / (double)D : 0.0;
}

/* y = ((x - mh) - ml) * sc[k] + b[k], sc = rstd w (f64, rounded once to T):
** mh + ml is the mean split in two T's, so x - mh is exact near the mean and
** y keeps T's relative precision even when |mean| >> std (x * sc + (b - mean
** sc), torch's form, loses the digits of mean/std there). */
#define GN_AFFINE_T(T)                                                                        \
  GN_CLONES static void gn_affine_##T(const T *restrict x, T *restrict y, int64_t K, int64_t S, \
                                      const T *w, const T *b, double m, double rs) {          \
    T mh = (T)m, ml = (T)(m - (double)mh);                                                    \
    for (int64_t k = 0; k < K; k++) {                                                         \
      T sc = (T)(rs * (w ? (double)w[k] : 1.0)), sh = b ? b[k] : (T)0;                        \
      _Pragma("omp simd")                                                                     \
      for (int64_t s = 0; s < S; s++) y[k * S + s] = ((x[k * S + s] - mh) - ml) * sc + sh;    \
    }                                                                                         \
  }
GN_AFFINE_T(float)
GN_AFFINE_T(double)

/* Backward sums of one row, per channel k: A[k] = sum_s g, B[k] = sum_s g xhat
** (f64); x - m is formed in f64. */
#define GN_BSUMS_T(T)                                                                         \
  GN_CLONES static void gn_bsums_##T(const T *restrict g, const T *restrict x, int64_t K, int64_t S, \
                                     double m, double rs, double *A, double *B) {             \
    for (int64_t k = 0; k < K; k++) {                                                         \
      double sa = 0, sb = 0;                                                                  \
      _Pragma("omp simd reduction(+:sa, sb)")                                                 \
      for (int64_t s = 0; s < S; s++) { double gv = g[k * S + s]; sa += gv; sb += gv * ((double)x[k * S + s] - m); } \
      A[k] = sa; B[k] = sb * rs;                                                              \
    }                                                                                         \
  }
GN_BSUMS_T(float)
GN_BSUMS_T(double)

/* dx = rs (g w - m1 - xhat m2) = g * c1[k] + (x - mean) * c2 + c3 with
** c1 = rs w, c2 = -rs^2 m2, c3 = -rs m1 (f64, rounded once to T); x - mean
** split as in gn_affine. */
#define GN_DX_T(T)                                                                            \
  GN_CLONES static void gn_dx_##T(const T *restrict g, const T *restrict x, T *restrict dx, int64_t K, \
                                  int64_t S, const T *w, double m, double rs, double m1, double m2) { \
    T mh = (T)m, ml = (T)(m - (double)mh), c2 = (T)(-rs * rs * m2), c3 = (T)(-rs * m1);      \
    for (int64_t k = 0; k < K; k++) {                                                         \
      T c1 = (T)(rs * (w ? (double)w[k] : 1.0));                                              \
      _Pragma("omp simd")                                                                     \
      for (int64_t s = 0; s < S; s++) dx[k * S + s] = g[k * S + s] * c1 + ((x[k * S + s] - mh) - ml) * c2 + c3; \
    }                                                                                         \
  }
GN_DX_T(float)
GN_DX_T(double)

#define GN_T(T)                                                                              \
  static void gn_fwd_##T(const T *x, const T *w, const T *b, T *y, T *st, int64_t N, int64_t C, \
                         int64_t S, int64_t G, double eps) {                                 \
    int64_t K = C / G, D = K * S;                                                            \
    _Pragma("omp parallel for if (N * C * S > NT_OMP_THRESHOLD)")                             \
    for (int64_t r = 0; r < N * G; r++) {                                                    \
      double m, v;                                                                           \
      gn_stats_##T(x + r * D, D, &m, &v);                                                    \
      double rs = 1.0 / sqrt(v + eps);                                                       \
      st[3 * r] = (T)m; st[3 * r + 1] = (T)rs; st[3 * r + 2] = (T)v;                         \
      int64_t c0 = (r % G) * K;                                                              \
      gn_affine_##T(x + r * D, y + r * D, K, S, w ? w + c0 : NULL, b ? b + c0 : NULL, m, rs); \
    }                                                                                        \
  }                                                                                          \
  /* one pass over (g, x) per row gives both the row sums dx needs and the      \
  ** partials of dw/db: A[n, c] = sum_s g, B[n, c] = sum_s g xhat (f64); then     \
  ** a1 = sum_k w A, a2 = sum_k w B per row, a second pass writes dx, and        \
  ** dw[c] = sum_n B, db[c] = sum_n A in n order (no dependence on threads).     \
  ** ab: caller's [2, N*C] f64 scratch. */                                       \
  static void gn_bwd_##T(const T *g, const T *x, const T *st, const T *w, T *dx, T *dw, T *db, \
                         int64_t N, int64_t C, int64_t S, int64_t G, double *ab) {           \
    int64_t K = C / G, D = K * S;                                                            \
    double *A = ab, *B = ab + N * C;                                                         \
    _Pragma("omp parallel for if (N * C * S > NT_OMP_THRESHOLD)")                             \
    for (int64_t r = 0; r < N * G; r++) {                                                    \
      double m = st[3 * r], rs = st[3 * r + 1], a1 = 0, a2 = 0;                              \
      int64_t c0 = (r % G) * K, n = r / G;                                                   \
      gn_bsums_##T(g + r * D, x + r * D, K, S, m, rs, A + n * C + c0, B + n * C + c0);       \
      for (int64_t k = 0; k < K; k++) {                                                      \
        double wc = w ? (double)w[c0 + k] : 1.0;                                             \
        a1 += wc * A[n * C + c0 + k]; a2 += wc * B[n * C + c0 + k];                          \
      }                                                                                      \
      if (dx) gn_dx_##T(g + r * D, x + r * D, dx + r * D, K, S, w ? w + c0 : NULL, m, rs, a1 / (double)D, a2 / (double)D); \
    }                                                                                        \
    for (int64_t c = 0; (dw || db) && c < C; c++) {                                          \
      double aw = 0, ab_ = 0;                                                                \
      for (int64_t n = 0; n < N; n++) { aw += B[n * C + c]; ab_ += A[n * C + c]; }           \
      if (dw) dw[c] = (T)aw;                                                                 \
      if (db) db[c] = (T)ab_;                                                                \
    }                                                                                        \
  }
GN_T(float)
GN_T(double)

#define PTR(t) ((t) ? (void *)nt_base(t) : NULL)

static int k_group_norm(const nt_KernelArgs *a) {
  int64_t N = a->iarg[0], C = a->iarg[1], S = a->iarg[2], G = a->iarg[3];
  if (a->op == op_gn) {
    if (a->in[0]->dtype == NT_F32) gn_fwd_float(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->out), PTR(a->in[3]), N, C, S, G, a->s[0]);
    else gn_fwd_double(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->out), PTR(a->in[3]), N, C, S, G, a->s[0]);
    return 0;
  }
  nt_Tensor **wb = a->extra;
  double *ab = malloc(sizeof(double) * (size_t)(2 * N * C > 0 ? 2 * N * C : 1));
  if (!ab) { nt_error_oom(sizeof(double) * (size_t)(2 * N * C)); return -1; }
  if (a->in[1]->dtype == NT_F32) gn_bwd_float(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->in[3]), PTR(a->out), PTR(wb[0]), PTR(wb[1]), N, C, S, G, ab);
  else gn_bwd_double(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->in[3]), PTR(a->out), PTR(wb[0]), PTR(wb[1]), N, C, S, G, ab);
  free(ab);
  return 0;
}

static void register_gn(void) {
  nt_nn_init();
  op_gn = nt_op_register("group_norm");
  op_gn_bwd = nt_op_register("group_norm_backward");
  nt_register_kernel(op_gn, NT_CPU, k_group_norm);
  nt_register_kernel(op_gn_bwd, NT_CPU, k_group_norm);
}
static void gn_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_gn);
}

/* iarg = {N, C, S, G} */
static int gn_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) { return nn_channel_norm_backward(nd, gout, gin, op_gn_bwd); }

/* the shared body; stats_out (or NULL) receives the [N*G, 3] statistics */
static nt_Tensor *group_norm_impl(const char *op, nt_Tensor *x0, int64_t G, nt_Tensor *weight, nt_Tensor *bias, double eps, nt_Tensor **stats_out) {
  gn_init();
  char s[128];
  if (x0->ndim < 2) NT_FAIL_NULL("%s: input must have at least 2 dimensions [N, C, ...], got %s", op, nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  if (!nt_dtype_is_float(x0->dtype)) NT_FAIL_NULL("%s: input must be a floating tensor, got %s", op, nt_dtype_name(x0->dtype));
  int64_t N = x0->shape[0], C = x0->shape[1], S = 1;
  for (int i = 2; i < x0->ndim; i++) S *= x0->shape[i];
  if (G < 1 || C % G)
    NT_FAIL_NULL("%s: the number of channels (%lld) must be divisible by num_groups (%lld), input shape %s", op, (long long)C, (long long)G,
                 nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  if (nn_channel_check(op, "weight", weight, C, x0->device) || nn_channel_check(op, "bias", bias, C, x0->device)) return NULL;
  if (!(eps >= 0)) NT_FAIL_NULL("%s: eps must be >= 0, got %g", op, eps);
  nt_Tensor *xf = nn_compute_float(op, x0);
  if (!xf) return NULL;
  nt_Tensor *xc = nt_contiguous(xf);
  nt_release(xf);
  if (!xc) return NULL;
  nt_Tensor *x = nt_reshape(xc, (int64_t[]){N, C, S}, 3);
  nt_release(xc);
  if (!x) return NULL;
  nt_DType dt = x->dtype;
  bool ok = true;
  nt_Tensor *w = nn_channel_param(weight, dt, &ok), *b = nn_channel_param(bias, dt, &ok);
  nt_Tensor *y = NULL, *st = NULL, *res = NULL;
  if (!ok) goto done;
  y = nt_empty(x->shape, 3, dt, x->device);
  st = nt_empty((int64_t[]){N * G, 3}, 2, dt, x->device);
  if (!y || !st) goto done;
  nt_KernelArgs ka = {.op = op_gn, .out = y, .in = {x, w, b, st}, .nin = 4, .s = {eps}, .iarg = {N, C, S, G}, .niarg = 4};
  if (nt_dispatch(ka.op, x->device, &ka)) goto done;
  nt_Node *nd;
  y = nn_finish(y, op[0] == 'i' ? "InstanceNormBackward" : "GroupNormBackward", gn_backward, 3, (nt_Tensor *[]){x, w, b}, &nd);
  if (y && nd) {
    if (nt_node_save(nd, st) < 0) { nt_release(y); y = NULL; }
    else { nd->iarg[0] = N; nd->iarg[1] = C; nd->iarg[2] = S; nd->iarg[3] = G; nd->niarg = 4; }
  }
  if (y) res = nt_reshape(y, x0->shape, x0->ndim);
  if (res && stats_out) *stats_out = nt_retain(st);
done:
  nt_release(x); nt_release(w); nt_release(b); nt_release(y); nt_release(st);
  return nn_cast_back(res, x0->dtype);
}

nt_Tensor *nt_group_norm(nt_Tensor *x, int64_t num_groups, nt_Tensor *weight, nt_Tensor *bias, double eps) {
  return group_norm_impl("group_norm", x, num_groups, weight, bias, eps, NULL);
}

nt_Tensor *nt_instance_norm(nt_Tensor *x, nt_Tensor *running_mean, nt_Tensor *running_var, nt_Tensor *weight, nt_Tensor *bias,
                            bool use_input_stats, double momentum, double eps) {
  const char *op = "instance_norm";
  if (x->ndim < 2) { char s[128]; NT_FAIL_NULL("%s: input must have at least 2 dimensions [N, C, ...], got %s", op, nt_shape_str(x->shape, x->ndim, s, sizeof s)); }
  int64_t N = x->shape[0], C = x->shape[1], S = 1;
  for (int i = 2; i < x->ndim; i++) S *= x->shape[i];
  if (nn_channel_check(op, "running_mean", running_mean, C, x->device) || nn_channel_check(op, "running_var", running_var, C, x->device)) return NULL;
  if ((running_mean == NULL) != (running_var == NULL))
    NT_FAIL_NULL("%s: running_mean and running_var go together (got only %s)", op, running_mean ? "running_mean" : "running_var");
  if (!use_input_stats) {   /* the running statistics, as batch norm in evaluation mode */
    if (!running_mean) NT_FAIL_NULL("%s: running_mean and running_var must be given when use_input_stats=false", op);
    return nt_batch_norm(x, running_mean, running_var, weight, bias, false, momentum, eps);
  }
  if (S <= 1) {
    char s[128];
    NT_FAIL_NULL("%s: expected more than 1 spatial element when training, got input size %s", op, nt_shape_str(x->shape, x->ndim, s, sizeof s));
  }
  if (running_mean && !(momentum >= 0 && momentum <= 1)) NT_FAIL_NULL("%s: momentum must be in [0, 1], got %g", op, momentum);
  nt_Tensor *st = NULL;
  nt_Tensor *y = group_norm_impl(op, x, C, weight, bias, eps, running_mean ? &st : NULL);
  if (!y || !running_mean) return y;
  /* torch's: every instance updates a copy of the running statistics, and
  ** the copies are averaged: run = (1-m) run + m * mean over n of the stat */
  bool prev = nt_set_grad_enabled(false);
  int rc = -1;
  nt_Tensor *m = nt_select(st, 1, 0), *v = nt_select(st, 1, 2);
  nt_Tensor *m2 = m ? nt_reshape(m, (int64_t[]){N, C}, 2) : NULL, *v2 = v ? nt_reshape(v, (int64_t[]){N, C}, 2) : NULL;
  nt_Tensor *mm = m2 ? nt_mean(m2, (int[]){0}, 1, false) : NULL, *vm = v2 ? nt_mean(v2, (int[]){0}, 1, false) : NULL;
  if (mm && vm) rc = nt_norm_update_running(running_mean, mm, momentum, 1.0) || nt_norm_update_running(running_var, vm, momentum, (double)S / (double)(S - 1));
  nt_release(m); nt_release(v); nt_release(m2); nt_release(v2); nt_release(mm); nt_release(vm); nt_release(st);
  nt_set_grad_enabled(prev);
  if (rc) { nt_release(y); return NULL; }
  return y;
}
