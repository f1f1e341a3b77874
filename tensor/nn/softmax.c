/*
** softmax.c — softmax, log_softmax, fused cross_entropy, mse_loss.
**
** Layout: the input is made contiguous and viewed as [outer, n, inner] around
** the softmax axis; one "row" is the n elements (o, 0..n-1, j), stride inner.
** The last-axis case (inner == 1) is the contiguous fast path.
**
** Math (per row, numerically stable: subtract the row max m):
**   lse = m + log(sum_i exp(x_i - m))
**   softmax:     y_i = exp(x_i - lse)           dx_i = y_i (g_i - sum_k g_k y_k)
**   log_softmax: y_i = x_i - lse                dx_i = g_i - exp(y_i) sum_k g_k
**   cross_entropy with targets t and smoothing e over C classes:
**     loss_r = (1-e)(lse - x_t) + e(lse - mean_c x_c), mean over valid rows
**     dx_rc  = g/count * (softmax_rc - (1-e)[c == t] - e/C)
**   (the fused classifier: logits read in their own dtype, count and seed
**   kept where they live; see "cross entropy" below)
*/
#include "nninternal.h"
#include "tensor/tdtype.h"
#include <stdlib.h>

/* ---- softmax / log_softmax kernels ----------------------------------------- */
#define SOFTMAX_T(T)                                                                   \
  static inline void softmax_row_##T(const T *x, T *y, int64_t n, int64_t s, int lg) { \
    T m = -INFINITY;                                                                   \
    if (s == 1) { /* contiguous: vector loops (omp simd: GCC's -O2 keeps them scalar) */ \
      _Pragma("omp simd reduction(max:m)")                                             \
      for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;                         \
      if (m == -INFINITY) m = 0;                                                       \
      double sum = nn_expsum(x, lg ? NULL : y, n, m);  /* exps kept for softmax */     \
      T lse = m + (T)log(sum), inv = (T)(1 / sum);                                     \
      if (lg) { _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i] = x[i] - lse; } \
      else    { _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i] *= inv; }     \
      return;                                                                          \
    }                                                                                  \
    for (int64_t i = 0; i < n; i++) m = x[i * s] > m ? x[i * s] : m;                   \
    if (m == -INFINITY) m = 0;   /* all -inf: keep exp() finite; gives nan like torch */ \
    double sum = 0;                                                                    \
    for (int64_t i = 0; i < n; i++) sum += nn_exp(x[i * s] - m);                       \
    T lse = m + (T)log(sum);                                                           \
    if (lg) for (int64_t i = 0; i < n; i++) y[i * s] = x[i * s] - lse;                 \
    else    for (int64_t i = 0; i < n; i++) y[i * s] = nn_exp(x[i * s] - lse);         \
  }                                                                                    \
  /* g: upstream grad, y: saved output, dx: result */                                  \
  static inline void softmax_bwd_row_##T(const T *g, const T *y, T *dx, int64_t n,      \
                                         int64_t s, int lg) {                          \
    double acc = 0;                                                                    \
    if (s == 1) { /* contiguous: vector loops; for log_softmax exp(y) into dx first */ \
      if (lg) {                                                                        \
        _Pragma("omp simd reduction(+:acc)")                                           \
        for (int64_t i = 0; i < n; i++) acc += g[i];                                   \
        nn_expsum(y, dx, n, (T)0);                                                     \
        _Pragma("omp simd")                                                            \
        for (int64_t i = 0; i < n; i++) dx[i] = g[i] - dx[i] * (T)acc;                 \
      } else {                                                                         \
        _Pragma("omp simd reduction(+:acc)")                                           \
        for (int64_t i = 0; i < n; i++) acc += (double)g[i] * y[i];                    \
        _Pragma("omp simd")                                                            \
        for (int64_t i = 0; i < n; i++) dx[i] = y[i] * (g[i] - (T)acc);                \
      }                                                                                \
      return;                                                                          \
    }                                                                                  \
    if (lg) {                                                                          \
      for (int64_t i = 0; i < n; i++) acc += g[i * s];                                 \
      for (int64_t i = 0; i < n; i++) dx[i * s] = g[i * s] - nn_exp(y[i * s]) * (T)acc; \
    } else {                                                                           \
      for (int64_t i = 0; i < n; i++) acc += (double)g[i * s] * y[i * s];              \
      for (int64_t i = 0; i < n; i++) dx[i * s] = y[i * s] * (g[i * s] - (T)acc);      \
    }                                                                                  \
  }                                                                                    \
  static void softmax_all_##T(const T *a, const T *b, T *out, int64_t outer, int64_t n, \
                              int64_t inner, int lg, int bwd) {                        \
    int64_t rows = outer * inner;                                                      \
    _Pragma("omp parallel for if (rows * n > NT_OMP_THRESHOLD)")                       \
    for (int64_t r = 0; r < rows; r++) {                                               \
      int64_t o = r / inner, j = r % inner, base = o * n * inner + j;                  \
      if (inner == 1) { /* contiguous rows: constant stride lets the compiler vectorise */ \
        if (bwd) softmax_bwd_row_##T(a + base, b + base, out + base, n, 1, lg);        \
        else softmax_row_##T(a + base, out + base, n, 1, lg);                          \
      } else {                                                                         \
        if (bwd) softmax_bwd_row_##T(a + base, b + base, out + base, n, inner, lg);    \
        else softmax_row_##T(a + base, out + base, n, inner, lg);                      \
      }                                                                                \
    }                                                                                  \
  }
SOFTMAX_T(float)
SOFTMAX_T(double)

/* args: out; in[0] = x (fwd) or g (bwd); in[1] = y (bwd);
** iarg = {outer, n, inner, log} */
static int k_softmax(const nt_KernelArgs *a) {
  int bwd = a->op == nn_ops.softmax_bwd;
  const void *x = nt_base(a->in[0]), *y = bwd ? nt_base(a->in[1]) : NULL;
  if (a->out->dtype == NT_F32)
    softmax_all_float(x, y, (float *)nt_base(a->out), a->iarg[0], a->iarg[1], a->iarg[2], (int)a->iarg[3], bwd);
  else if (a->out->dtype == NT_F64)
    softmax_all_double(x, y, (double *)nt_base(a->out), a->iarg[0], a->iarg[1], a->iarg[2], (int)a->iarg[3], bwd);
  else NT_FAIL("softmax: unsupported dtype %s", nt_dtype_name(a->out->dtype));
  return 0;
}

static int softmax_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *g = nt_contiguous(gout);
  if (!g) return -1;
  if (g->dtype != nd->saved[0]->dtype) {
    nt_Tensor *c = nt_to_dtype(g, nd->saved[0]->dtype);
    nt_release(g);
    if (!(g = c)) return -1;
    c = nt_contiguous(g); nt_release(g);
    if (!(g = c)) return -1;
  }
  nt_Tensor *dx = nt_empty(g->shape, g->ndim, g->dtype, g->device);
  if (!dx) { nt_release(g); return -1; }
  nt_KernelArgs ka = {.op = nn_ops.softmax_bwd, .out = dx, .in = {g, nd->saved[0]}, .nin = 2, .niarg = 4};
  memcpy(ka.iarg, nd->iarg, 4 * sizeof(int64_t));
  int rc = nt_dispatch(ka.op, dx->device, &ka);
  nt_release(g);
  if (rc) { nt_release(dx); return -1; }
  gin[0] = dx;
  return 0;
}

static nt_Tensor *softmax_impl(const char *name, nt_Tensor *x0, int axis, int lg) {
  NT_AUTOCAST(NT_AUTOCAST_F32, softmax_impl(name, ac_[0], axis, lg), x0);
  nt_Tensor *xf = nn_compute_float(name, x0);
  if (!xf) return NULL;
  int ax = x0->ndim ? nt_norm_axis(name, axis, x0->ndim) : (axis == 0 || axis == -1 ? 0 : nt_norm_axis(name, axis, 0));
  nt_Tensor *x = ax < 0 ? NULL : nt_contiguous(xf);
  nt_release(xf);
  if (!x) return NULL;
  nn_dims d = nn_split_axis(x->shape, x->ndim, ax);
  nt_Tensor *y = nt_empty(x->shape, x->ndim, x->dtype, x->device);
  if (!y) { nt_release(x); return NULL; }
  nt_KernelArgs ka = {.op = nn_ops.softmax, .out = y, .in = {x}, .nin = 1,
                      .iarg = {d.outer, d.n, d.inner, lg}, .niarg = 4};
  if (x->numel && nt_dispatch(ka.op, x->device, &ka)) { nt_release(x); nt_release(y); return NULL; }
  nt_Node *nd;
  y = nn_finish(y, lg ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_backward, 1, &x, &nd);
  if (y && nd) {
    memcpy(nd->iarg, ka.iarg, 4 * sizeof(int64_t));
    nd->niarg = 4;
    if (nt_node_save(nd, y) < 0) { nt_release(y); y = NULL; }
  }
  nt_release(x);
  return nn_cast_back(y, x0->dtype);
}

nt_Tensor *nt_softmax(nt_Tensor *x, int axis) { return softmax_impl("softmax", x, axis, 0); }
nt_Tensor *nt_log_softmax(nt_Tensor *x, int axis) { return softmax_impl("log_softmax", x, axis, 1); }

/* ---- cross entropy ------------------------------------------------------------
** The fused classifier.  Logits [M, C] are read in their own dtype (f32, f64,
** f16, bf16: no f32 copy of bf16 logits); the row statistics are computed in
** the accumulation type A (f64 for f64 logits, else f32 on the GPU and f64
** on the CPU) and kept as st [M + 1] of dtype A: st[r] = lse_r, st[M] = the
** number of rows whose target != ignore_index.  The loss's mean divides by
** st[M] where it lives (on the device for cuda), and the backward scales by
** the seed g and st[M] where they live: nothing is read back to the host, so
** on a GPU a bad target is reported at the next synchronisation (error slot).
**
** fwd: out 0-d loss (A); in = {x [M,C] contiguous, t i64 [M], st [M+1] (A,
**      written)}; s[0] eps; iarg[0] ignore.
** bwd: out dx [M,C] (x's dtype); in = {x, t, st, g 0-d (A)}; s[0] eps;
**      iarg[0] ignore.  dx_rc = g/st[M] (exp(x_rc - lse_r) - e/C - (1-e)[c == t_r]),
**      0 on ignored rows. */
#define XENT_T(T)                                                                        \
  /* one row: lse, and the row's loss when t is a class (eps: label smoothing) */        \
  static double xent_row_##T(const T *xr, int64_t C, int64_t tr, double eps, double *lse) { \
    T m = -INFINITY;                                                                     \
    double xsum = 0;                                                                     \
    _Pragma("omp simd reduction(max:m)")                                                 \
    for (int64_t c = 0; c < C; c++) m = xr[c] > m ? xr[c] : m;                           \
    if (m == -INFINITY) m = 0;   /* all -inf: keep exp() finite; gives nan like torch */ \
    double l = m + log(nn_expsum(xr, NULL, C, m));                                       \
    *lse = l;                                                                            \
    if (eps != 0) {                                                                      \
      _Pragma("omp simd reduction(+:xsum)")                                              \
      for (int64_t c = 0; c < C; c++) xsum += xr[c];                                     \
    }                                                                                    \
    return tr < 0 || tr >= C ? 0 : (1 - eps) * (l - xr[tr]) + (eps != 0 ? eps * (l - xsum / (double)C) : 0); \
  }                                                                                      \
  /* d[c] = sc (exp(x_c - lse) - off) - on [c == t]; d may be x */                       \
  static void xent_row_bwd_##T(const T *xr, T *d, int64_t C, int64_t tr, T lse, T on, T off, T sc) { \
    nn_expsum(xr, d, C, lse);                                                            \
    _Pragma("omp simd")                                                                  \
    for (int64_t c = 0; c < C; c++) d[c] = sc * (d[c] - off);                            \
    d[tr] -= on;                                                                         \
  }
XENT_T(float)
XENT_T(double)

/* logits of storage dtype dt: row r as f64 or f32 values (f16/bf16 rows are
** converted into the thread's buffer buf; f32/f64 rows are used in place) */
static const void *xent_row_in(const nt_Tensor *x, int64_t r, int64_t C, float *buf) {
  const char *p = (const char *)nt_base(x) + (size_t)(r * C) * nt_dtype_size(x->dtype);
  if (x->dtype == NT_F16) { for (int64_t c = 0; c < C; c++) buf[c] = nt_f16_to_f32(((const uint16_t *)p)[c]); return buf; }
  if (x->dtype == NT_BF16) { for (int64_t c = 0; c < C; c++) buf[c] = nt_bf16_to_f32(((const uint16_t *)p)[c]); return buf; }
  return p;
}

static int k_cross_entropy(const nt_KernelArgs *a) {
  const nt_Tensor *x = a->in[0];
  int64_t N = x->shape[0], C = x->shape[1], ign = a->iarg[0];
  const int64_t *t = (const int64_t *)nt_base(a->in[1]);
  bool f64 = x->dtype == NT_F64, half = x->dtype == NT_F16 || x->dtype == NT_BF16;
  double eps = a->s[0];
  void *st = nt_base(a->in[2]);
  if (a->op == nn_ops.cross_entropy_bwd) {
    double g = f64 ? *(const double *)nt_base(a->in[3]) : *(const float *)nt_base(a->in[3]);
    double cnt = f64 ? ((const double *)st)[N] : ((const float *)st)[N];
    double scale = cnt > 0 ? g / cnt : NAN;
    int err = 0;
    _Pragma("omp parallel if (N * C > NT_OMP_THRESHOLD)")
    {
      float *buf = half ? malloc((size_t)C * sizeof(float)) : NULL;
      if (half && !buf) {
        _Pragma("omp atomic write")
        err = 1;
      }
      _Pragma("omp for")
      for (int64_t r = 0; r < N; r++) {
        if (half && !buf) continue;
        char *dr = (char *)nt_base(a->out) + (size_t)(r * C) * nt_dtype_size(x->dtype);
        if (t[r] == ign) { memset(dr, 0, (size_t)C * nt_dtype_size(x->dtype)); continue; }
        const void *xr = xent_row_in(x, r, C, buf);
        if (f64) xent_row_bwd_double(xr, (double *)dr, C, t[r], ((const double *)st)[r], (1 - eps) * scale, eps / (double)C, scale);
        else {
          float *d = half ? buf : (float *)dr;   /* half: computed in place in buf, then rounded once */
          xent_row_bwd_float(xr, d, C, t[r], ((const float *)st)[r], (float)((1 - eps) * scale), (float)(eps / (double)C), (float)scale);
          if (x->dtype == NT_F16) for (int64_t c = 0; c < C; c++) ((uint16_t *)dr)[c] = nt_f32_to_f16(buf[c]);
          else if (x->dtype == NT_BF16) for (int64_t c = 0; c < C; c++) ((uint16_t *)dr)[c] = nt_f32_to_bf16(buf[c]);
        }
      }
      free(buf);
    }
    if (err) NT_FAIL("cross_entropy backward: out of memory");
    return 0;
  }
  double total = 0;
  int64_t cnt = 0, bad = -1;
  int err = 0;
  _Pragma("omp parallel reduction(+:total,cnt) if (N * C > NT_OMP_THRESHOLD)")
  {
    float *buf = half ? malloc((size_t)C * sizeof(float)) : NULL;
    if (half && !buf) {
      _Pragma("omp atomic write")
      err = 1;
    }
    _Pragma("omp for")
    for (int64_t r = 0; r < N; r++) {
      if (half && !buf) continue;
      const void *xr = xent_row_in(x, r, C, buf);
      int64_t tr = t[r];
      double lse, l = f64 ? xent_row_double(xr, C, tr, eps, &lse) : xent_row_float(xr, C, tr, eps, &lse);
      if (f64) ((double *)st)[r] = lse; else ((float *)st)[r] = (float)lse;
      if (tr == ign) continue;
      if (tr < 0 || tr >= C) {
        _Pragma("omp critical(nn_xent_bad)")
        if (bad < 0 || r < bad) bad = r;
        continue;
      }
      total += l;
      cnt++;
    }
    free(buf);
  }
  if (err) NT_FAIL("cross_entropy: out of memory");
  if (bad >= 0) NT_FAIL("cross_entropy: target %lld (row %lld) is out of bounds for %lld classes",
                        (long long)t[bad], (long long)bad, (long long)C);
  if (f64) ((double *)st)[N] = (double)cnt; else ((float *)st)[N] = (float)cnt;
  nt_store_from_double(nt_base(a->out), a->out->dtype, cnt ? total / (double)cnt : NAN);
  return 0;
}

static int xent_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *st = nd->saved[1];
  nt_Tensor *gc = nt_to_dtype(gout, st->dtype), *g = gc ? nt_contiguous(gc) : NULL;   /* stays on its device */
  nt_release(gc);
  if (!g) return -1;
  nt_Tensor *dx = nt_empty(x->shape, x->ndim, x->dtype, x->device);
  if (!dx) { nt_release(g); return -1; }
  nt_KernelArgs ka = {.op = nn_ops.cross_entropy_bwd, .out = dx, .in = {x, nd->saved[0], st, g}, .nin = 4,
                      .s = {nd->s[0]}, .iarg = {nd->iarg[0]}, .niarg = 1};
  int rc = dx->numel ? nt_dispatch(ka.op, dx->device, &ka) : 0;
  nt_release(g);
  if (rc) { nt_release(dx); return -1; }
  gin[0] = dx;
  return 0;
}

nt_Tensor *nt_cross_entropy(nt_Tensor *logits, nt_Tensor *targets, int64_t ignore_index, double eps) {
  const char *op = "cross_entropy";
  char a[128], b[128];
  nt_nn_init();
  /* no autocast cast: f16/bf16 logits are read as they are (accumulating in
  ** f32); under autocast the loss is f32, as the F32 policy gives */
  if (!(eps >= 0 && eps <= 1)) NT_FAIL_NULL("%s: label_smoothing must be in [0, 1], got %g", op, eps);
  if (!nt_dtype_is_float(logits->dtype)) NT_FAIL_NULL("%s: expected a floating dtype, got %s", op, nt_dtype_name(logits->dtype));
  if (!nt_dtype_is_int(targets->dtype))
    NT_FAIL_NULL("%s: targets must be an integer tensor (class indices), got %s", op, nt_dtype_name(targets->dtype));
  if (nt_check_same_device(op, 2, (nt_Tensor *[]){logits, targets})) return NULL;
  int nd_ = logits->ndim;
  bool shape_ok = nd_ >= 1 && targets->ndim == (nd_ == 1 ? 0 : nd_ - 1);
  for (int i = 0; shape_ok && i < targets->ndim; i++)
    shape_ok = targets->shape[i] == logits->shape[i == 0 ? 0 : i + 1];
  if (!shape_ok)
    NT_FAIL_NULL("%s: logits %s need targets of shape [N] (or [N, d1, ...] for [N, C, d1, ...]), got %s", op,
                 nt_shape_str(logits->shape, nd_, a, sizeof a), nt_shape_str(targets->shape, targets->ndim, b, sizeof b));
  bool half = logits->dtype == NT_F16 || logits->dtype == NT_BF16;
  nt_DType acc = logits->dtype == NT_F64 ? NT_F64 : NT_F32;
  nt_DType loss_dt = half && nt_autocast_dtype() >= 0 ? NT_F32 : logits->dtype;
  /* bring logits to [M, C] (class axis last) and targets to [M] */
  nt_Tensor *x2, *t2;
  int64_t C = nd_ == 1 ? logits->shape[0] : logits->shape[1];
  if (nd_ <= 2) {
    int64_t s2[2] = {nd_ == 1 ? 1 : logits->shape[0], C}, s1[1] = {s2[0]};
    x2 = nt_reshape(logits, s2, 2);
    t2 = nt_reshape(targets, s1, 1);
  } else {
    int perm[NT_MAXDIM], k = 0;
    perm[k++] = 0;
    for (int i = 2; i < nd_; i++) perm[k++] = i;
    perm[k++] = 1;
    nt_Tensor *p = nt_permute(logits, perm, nd_);
    int64_t s2[2] = {-1, C}, s1[1] = {-1};
    x2 = p ? nt_reshape(p, s2, 2) : NULL;
    nt_release(p);
    t2 = nt_reshape(targets, s1, 1);
  }
  nt_Tensor *x = x2 ? nt_contiguous(x2) : NULL, *t = t2 ? nn_index_i64(op, t2) : NULL;
  nt_release(x2); nt_release(t2);
  nt_Tensor *out = NULL, *st = NULL;
  if (!x || !t) goto done;
  if (C == 0) { nt_error_set("%s: logits have 0 classes", op); goto done; }
  int64_t nst = x->shape[0] + 1;
  out = nt_empty(NULL, 0, acc, x->device);
  st = nt_empty(&nst, 1, acc, x->device);
  if (!out || !st) goto fail;
  nt_KernelArgs ka = {.op = nn_ops.cross_entropy, .out = out, .in = {x, t, st}, .nin = 3,
                      .s = {eps}, .iarg = {ignore_index}, .niarg = 1};
  if (nt_dispatch(ka.op, x->device, &ka)) goto fail;
  nt_Node *nd;
  out = nn_finish(out, "CrossEntropyBackward", xent_backward, 1, &x, &nd);
  if (out && nd) {
    nd->s[0] = eps; nd->iarg[0] = ignore_index; nd->niarg = 1;
    if (nt_node_save(nd, t) < 0 || nt_node_save(nd, st) < 0) goto fail;
  }
  goto done;
fail:
  nt_release(out); out = NULL;
done:
  nt_release(x); nt_release(t); nt_release(st);
  return nn_cast_back(out, loss_dt);
}

/* ---- mse ---------------------------------------------------------------------- */
nt_Tensor *nt_mse_loss(nt_Tensor *a, nt_Tensor *b) {
  nt_nn_init();
  NT_AUTOCAST(NT_AUTOCAST_F32, nt_mse_loss(ac_[0], ac_[1]), a, b);
  int64_t shp[NT_MAXDIM];
  int nd;
  if (nt_broadcast_shapes("mse_loss", a->shape, a->ndim, b->shape, b->ndim, shp, &nd)) return NULL;  /* name the op called */
  nt_Tensor *d = nt_sub(a, b);
  nt_Tensor *sq = d ? nt_mul(d, d) : NULL;
  nt_Tensor *m = sq ? nt_mean(sq, NULL, 0, false) : NULL;
  nt_release(d); nt_release(sq);
  return m;
}

void nn_register_softmax(void) {
  nn_ops.softmax = nt_op_register("softmax");
  nn_ops.softmax_bwd = nt_op_register("softmax_backward");
  nn_ops.cross_entropy = nt_op_register("cross_entropy");
  nn_ops.cross_entropy_bwd = nt_op_register("cross_entropy_backward");
  nt_register_kernel(nn_ops.softmax, NT_CPU, k_softmax);
  nt_register_kernel(nn_ops.softmax_bwd, NT_CPU, k_softmax);
  nt_register_kernel(nn_ops.cross_entropy, NT_CPU, k_cross_entropy);
  nt_register_kernel(nn_ops.cross_entropy_bwd, NT_CPU, k_cross_entropy);
}
