/*
** batchnorm.c — batch normalisation: one fused forward kernel and one fused
** backward kernel (CPU here, CUDA in cuda/norm.cu, the same arguments).
**
** x is viewed as [N, C, S] (S = the product of the spatial axes; S = 1 for
** [N, C]), contiguous.  Channel c's M = N*S values are x[(n*C + c)*S + s].
**   training: mean_c = sum(x)/M, var_c = sum((x - mean_c)^2)/M (two passes,
**             accumulated in f64), rstd_c = 1/sqrt(var_c + eps)
**   eval:     mean_c, var_c = the running statistics
**   y = (x - mean_c) * rstd_c * w[c] + b[c]
** backward (g = dL/dy, xhat = (x - mean) * rstd, sums over the channel in f64):
**   training: dx = w*rstd * (g - sum(g)/M - xhat * sum(g*xhat)/M)
**             (mean and var depend on x)
**   eval:     dx = g * w * rstd
**   dw = sum(g * xhat), db = sum(g)
** stats: a [3, C] tensor of the compute dtype, rows {mean, rstd, var}.
**
** Kernel arguments (both devices):
**   "batch_norm"          out y; in = {x, w|NULL, b|NULL, stats}; iarg = {N, C, S,
**                         training}; s[0] = eps.  training: writes all of stats;
**                         eval: reads rows mean and var, writes rstd.
**   "batch_norm_backward" out dx|NULL; in = {g, x, stats, w|NULL}; iarg as
**                         above; extra = nt_Tensor *[2] {dw|NULL, db|NULL}.
** The running statistics are updated by the front end with tensor ops (any
** dtype, device or layout the user's buffers have).
*/
#include <math.h>
#include <pthread.h>
#include "nninternal.h"
#include "batchnorm.h"

static int op_bn = -1, op_bn_bwd = -1;

#define BN_T(T)                                                                              \
  static void bn_fwd_##T(const T *x, const T *w, const T *b, T *y, T *st, int64_t N, int64_t C, \
                         int64_t S, bool training, double eps) {                             \
    T *mean = st, *rstd = st + C, *var = st + 2 * C;                                         \
    double M = (double)N * (double)S;                                                        \
    _Pragma("omp parallel for if (N * C * S > NT_OMP_THRESHOLD)")                             \
    for (int64_t c = 0; c < C; c++) {                                                        \
      double m, v;                                                                           \
      if (training) {                                                                        \
        double s1 = 0;                                                                       \
        for (int64_t n = 0; n < N; n++) {                                                    \
          const T *xr = x + (n * C + c) * S;                                                 \
          _Pragma("omp simd reduction(+:s1)")                                                \
          for (int64_t s = 0; s < S; s++) s1 += xr[s];                                       \
        }                                                                                    \
        m = s1 / M;                                                                          \
        double s2 = 0;                                                                       \
        for (int64_t n = 0; n < N; n++) {                                                    \
          const T *xr = x + (n * C + c) * S;                                                 \
          _Pragma("omp simd reduction(+:s2)")                                                \
          for (int64_t s = 0; s < S; s++) { double d = xr[s] - m; s2 += d * d; }             \
        }                                                                                    \
        v = s2 / M;                                                                          \
        mean[c] = (T)m; var[c] = (T)v;                                                       \
      } else { m = mean[c]; v = var[c]; }                                                    \
      double r = 1.0 / sqrt(v + eps);                                                        \
      rstd[c] = (T)r;                                                                        \
      /* y = x * scale + shift, folded in f64 */                                             \
      double sc = r * (w ? (double)w[c] : 1.0), sh = (b ? (double)b[c] : 0.0) - m * sc;      \
      for (int64_t n = 0; n < N; n++) {                                                      \
        const T *xr = x + (n * C + c) * S;                                                   \
        T *yr = y + (n * C + c) * S;                                                         \
        _Pragma("omp simd")                                                                  \
        for (int64_t s = 0; s < S; s++) yr[s] = (T)(xr[s] * sc + sh);                        \
      }                                                                                      \
    }                                                                                        \
  }                                                                                          \
  static void bn_bwd_##T(const T *g, const T *x, const T *st, const T *w, T *dx, T *dw, T *db, \
                         int64_t N, int64_t C, int64_t S, bool training) {                   \
    const T *mean = st, *rstd = st + C;                                                      \
    double M = (double)N * (double)S;                                                        \
    _Pragma("omp parallel for if (N * C * S > NT_OMP_THRESHOLD)")                             \
    for (int64_t c = 0; c < C; c++) {                                                        \
      double m = mean[c], r = rstd[c], sg = 0, sgx = 0;                                      \
      for (int64_t n = 0; n < N; n++) {                                                      \
        const T *xr = x + (n * C + c) * S, *gr = g + (n * C + c) * S;                        \
        _Pragma("omp simd reduction(+:sg, sgx)")                                             \
        for (int64_t s = 0; s < S; s++) { sg += gr[s]; sgx += gr[s] * (xr[s] - m); }        \
      }                                                                                      \
      if (dw) dw[c] = (T)(sgx * r);                                                          \
      if (db) db[c] = (T)sg;                                                                 \
      if (!dx) continue;                                                                     \
      double wr = r * (w ? (double)w[c] : 1.0);                                              \
      /* dx = wr*g + k1*x + k0: the training terms folded into one affine map of x */       \
      double k1 = training ? -wr * r * r * sgx / M : 0.0;                                    \
      double k0 = training ? -wr * sg / M - k1 * m : 0.0;                                    \
      for (int64_t n = 0; n < N; n++) {                                                      \
        const T *xr = x + (n * C + c) * S, *gr = g + (n * C + c) * S;                        \
        T *dr = dx + (n * C + c) * S;                                                        \
        _Pragma("omp simd")                                                                  \
        for (int64_t s = 0; s < S; s++) dr[s] = (T)(wr * gr[s] + k1 * xr[s] + k0);           \
      }                                                                                      \
    }                                                                                        \
  }
BN_T(float)
BN_T(double)

#define PTR(t) ((t) ? (void *)nt_base(t) : NULL)

static int k_batch_norm(const nt_KernelArgs *a) {
  int64_t N = a->iarg[0], C = a->iarg[1], S = a->iarg[2];
  bool training = a->iarg[3] != 0;
  if (a->op == op_bn) {
    if (a->in[0]->dtype == NT_F32) bn_fwd_float(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->out), PTR(a->in[3]), N, C, S, training, a->s[0]);
    else bn_fwd_double(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->out), PTR(a->in[3]), N, C, S, training, a->s[0]);
    return 0;
  }
  nt_Tensor **wb = a->extra;
  if (a->in[1]->dtype == NT_F32) bn_bwd_float(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->in[3]), PTR(a->out), PTR(wb[0]), PTR(wb[1]), N, C, S, training);
  else bn_bwd_double(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->in[3]), PTR(a->out), PTR(wb[0]), PTR(wb[1]), N, C, S, training);
  return 0;
}

static void register_bn(void) {
  nt_nn_init();
  op_bn = nt_op_register("batch_norm");
  op_bn_bwd = nt_op_register("batch_norm_backward");
  nt_register_kernel(op_bn, NT_CPU, k_batch_norm);
  nt_register_kernel(op_bn_bwd, NT_CPU, k_batch_norm);
}
static void bn_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_bn);
}

/* The backward of batch_norm, group_norm and instance_norm (groupnorm.c):
** node in = {x [N, C, S] contiguous, w, b}; saved[0] = the statistics;
** iarg = 4 integers the kernel reads (N, C, S, and training or G); bwd_op's
** kernel writes dx into out and dweight/dbias into extra. */
int nn_channel_norm_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin, int bwd_op) {
  nt_Tensor *x = nd->in[0], *w = nd->in[1];
  nt_Tensor *gc = nt_to_dtype(gout, x->dtype), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  if (!g) return -1;
  int64_t C = nd->iarg[1];
  nt_Tensor *dx = nt_node_needs(nd, 0) ? nt_empty(x->shape, x->ndim, x->dtype, x->device) : NULL;
  nt_Tensor *wb[2] = {nt_node_needs(nd, 1) ? nt_empty(&C, 1, x->dtype, x->device) : NULL,
                      nt_node_needs(nd, 2) ? nt_empty(&C, 1, x->dtype, x->device) : NULL};
  nt_KernelArgs ka = {.op = bwd_op, .out = dx, .in = {g, x, nd->saved[0], w}, .nin = 4, .extra = wb, .niarg = 4};
  for (int i = 0; i < 4; i++) ka.iarg[i] = nd->iarg[i];
  int rc = (nt_node_needs(nd, 0) && !dx) || (nt_node_needs(nd, 1) && !wb[0]) || (nt_node_needs(nd, 2) && !wb[1]) ? -1 : 0;
  if (!rc) rc = nt_dispatch(ka.op, x->device, &ka);
  nt_release(g);
  if (rc) { nt_release(dx); nt_release(wb[0]); nt_release(wb[1]); return -1; }
  gin[0] = dx; gin[1] = wb[0]; gin[2] = wb[1];
  return 0;
}
/* iarg = {N, C, S, training} */
static int bn_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) { return nn_channel_norm_backward(nd, gout, gin, op_bn_bwd); }

/* a per-channel argument of op: [C] floating on x's device, or NULL */
int nn_channel_check(const char *op, const char *what, nt_Tensor *p, int64_t C, nt_Device dev) {
  char s[128];
  if (!p) return 0;
  if (p->ndim != 1 || p->shape[0] != C) {
    nt_error_set("%s: %s must have shape [%lld] (one value per channel of the input's axis 1), got %s", op, what, (long long)C,
                 nt_shape_str(p->shape, p->ndim, s, sizeof s));
    return -1;
  }
  if (!nt_dtype_is_float(p->dtype)) { nt_error_set("%s: %s must be a floating tensor, got %s", op, what, nt_dtype_name(p->dtype)); return -1; }
  if (p->device != dev) { nt_error_set("%s: %s is on %s but the input is on %s", op, what, nt_device_name(p->device), nt_device_name(dev)); return -1; }
  return 0;
}
/* p as a contiguous [C] of dtype dt (NULL when p is; *ok false on failure) */
nt_Tensor *nn_channel_param(nt_Tensor *p, nt_DType dt, bool *ok) {
  if (!p || !*ok) return NULL;
  nt_Tensor *c = nt_to_dtype(p, dt), *r = c ? nt_contiguous(c) : NULL;
  nt_release(c);
  if (!r) *ok = false;
  return r;
}
int nt_norm_update_running(nt_Tensor *run, nt_Tensor *stat, double momentum, double scale) {
  nt_Tensor *sc = nt_to_dtype(stat, run->dtype);
  nt_Tensor *a = nt_binary_scalar_ex(NT_OP_MUL, run, 1.0 - momentum, NT_SCALAR_FLOAT);
  nt_Tensor *b = sc ? nt_binary_scalar_ex(NT_OP_MUL, sc, momentum * scale, NT_SCALAR_FLOAT) : NULL;
  nt_Tensor *s = a && b ? nt_add(a, b) : NULL;
  int rc = s ? nt_copy_(run, s) : -1;
  nt_release(sc); nt_release(a); nt_release(b); nt_release(s);
  return rc;
}
/* running statistic <- stats row `row` ([C]) */
static int update_running(nt_Tensor *run, nt_Tensor *stats, int row, double momentum, double scale) {
  nt_Tensor *st = nt_select(stats, 0, row);
  int rc = st ? nt_norm_update_running(run, st, momentum, scale) : -1;
  nt_release(st);
  return rc;
}

nt_Tensor *nt_batch_norm(nt_Tensor *x0, nt_Tensor *running_mean, nt_Tensor *running_var, nt_Tensor *weight,
                         nt_Tensor *bias, bool training, double momentum, double eps) {
  bn_init();
  char s[128];
  if (x0->ndim < 2)
    NT_FAIL_NULL("batch_norm: input must have at least 2 dimensions [N, C, ...], got %s", nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  if (!nt_dtype_is_float(x0->dtype)) NT_FAIL_NULL("batch_norm: input must be a floating tensor, got %s", nt_dtype_name(x0->dtype));
  int64_t N = x0->shape[0], C = x0->shape[1], S = 1;
  for (int i = 2; i < x0->ndim; i++) S *= x0->shape[i];
  if (nn_channel_check("batch_norm", "weight", weight, C, x0->device) || nn_channel_check("batch_norm", "bias", bias, C, x0->device) ||
      nn_channel_check("batch_norm", "running_mean", running_mean, C, x0->device) || nn_channel_check("batch_norm", "running_var", running_var, C, x0->device))
    return NULL;
  if ((running_mean == NULL) != (running_var == NULL))
    NT_FAIL_NULL("batch_norm: running_mean and running_var go together (got only %s)", running_mean ? "running_mean" : "running_var");
  if (!training && !running_mean) NT_FAIL_NULL("batch_norm: running_mean and running_var must be given in evaluation mode (training=false)");
  if (training && N * S <= 1)
    NT_FAIL_NULL("batch_norm: expected more than 1 value per channel when training, got input size %s", nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  if (!(eps >= 0)) NT_FAIL_NULL("batch_norm: eps must be >= 0, got %g", eps);
  if (training && running_mean && !(momentum >= 0 && momentum <= 1)) NT_FAIL_NULL("batch_norm: momentum must be in [0, 1], got %g", momentum);
  nt_Tensor *xf = nn_compute_float("batch_norm", x0);
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
  st = nt_empty((int64_t[]){3, C}, 2, dt, x->device);
  if (!y || !st) goto done;
  bool prev = nt_set_grad_enabled(false);
  if (!training) {   /* the running statistics are the stats */
    nt_Tensor *m = nt_select(st, 0, 0), *v = nt_select(st, 0, 2);
    int rc = !m || !v || nt_copy_(m, running_mean) || nt_copy_(v, running_var);
    nt_release(m); nt_release(v);
    if (rc) { nt_set_grad_enabled(prev); goto done; }
  }
  nt_KernelArgs ka = {.op = op_bn, .out = y, .in = {x, w, b, st}, .nin = 4, .s = {eps}, .iarg = {N, C, S, training}, .niarg = 4};
  int rc = nt_dispatch(ka.op, x->device, &ka);
  if (!rc && training && running_mean) {
    double M = (double)N * (double)S;
    rc = update_running(running_mean, st, 0, momentum, 1.0) || update_running(running_var, st, 2, momentum, M / (M - 1));
  }
  nt_set_grad_enabled(prev);
  if (rc) goto done;
  nt_Node *nd;
  y = nn_finish(y, "BatchNormBackward", bn_backward, 3, (nt_Tensor *[]){x, w, b}, &nd);
  if (y && nd) {
    if (nt_node_save(nd, st) < 0) { nt_release(y); y = NULL; }
    else { nd->iarg[0] = N; nd->iarg[1] = C; nd->iarg[2] = S; nd->iarg[3] = training; nd->niarg = 4; }
  }
  if (y) res = nt_reshape(y, x0->shape, x0->ndim);
done:
  nt_release(x); nt_release(w); nt_release(b); nt_release(y); nt_release(st);
  return nn_cast_back(res, x0->dtype);
}
