/*
** norm.c — layer_norm (fused kernel, saves mean/rstd) and dropout.
**
** layer_norm over the last axis: x viewed as [R, D] rows.
**   mean = sum(x)/D, var = sum((x-mean)^2)/D (population), rstd = 1/sqrt(var+eps)
**   xhat = (x - mean) * rstd,  y = xhat * w + b
** backward (per row, dxhat = g * w):
**   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
**   dw = sum_rows g * xhat,  db = sum_rows g
** Stats are a [R, 2] tensor {mean, rstd} of the compute dtype.
*/
#include "nninternal.h"

#define LN_T(T)                                                                           \
  static void ln_fwd_##T(const T *x, const T *w, const T *b, T *y, T *st, int64_t R,       \
                         int64_t D, double eps) {                                         \
    _Pragma("omp parallel for if (R * D > NT_OMP_THRESHOLD)")                              \
    for (int64_t r = 0; r < R; r++) {                                                     \
      const T *xr = x + r * D;                                                            \
      T *yr = y + r * D;                                                                  \
      double s = 0, v = 0;                                                                \
      _Pragma("omp simd reduction(+:s)")                                                  \
      for (int64_t d = 0; d < D; d++) s += xr[d];                                         \
      double mean = s / (double)D;                                                        \
      _Pragma("omp simd reduction(+:v)")                                                  \
      for (int64_t d = 0; d < D; d++) { double c = xr[d] - mean; v += c * c; }             \
      double rstd = 1.0 / sqrt(v / (double)D + eps);                                      \
      T m = (T)mean, rs = (T)rstd;                                                        \
      if (w && b) {                                                                       \
        _Pragma("omp simd")                                                               \
        for (int64_t d = 0; d < D; d++) yr[d] = (xr[d] - m) * rs * w[d] + b[d];           \
      } else {                                                                            \
        _Pragma("omp simd")                                                               \
        for (int64_t d = 0; d < D; d++) {                                                 \
          T h = (xr[d] - m) * rs;                                                         \
          yr[d] = (w ? h * w[d] : h) + (b ? b[d] : 0);                                    \
        }                                                                                 \
      }                                                                                   \
      st[2 * r] = m; st[2 * r + 1] = rs;                                                  \
    }                                                                                     \
  }                                                                                       \
  static void ln_bwd_##T(const T *g, const T *x, const T *st, const T *w, T *dx, T *dw,   \
                         T *db, int64_t R, int64_t D) {                                   \
    if (dx) {                                                                             \
      _Pragma("omp parallel for if (R * D > NT_OMP_THRESHOLD)")                            \
      for (int64_t r = 0; r < R; r++) {                                                   \
        const T *gr = g + r * D, *xr = x + r * D;                                         \
        T m = st[2 * r], rs = st[2 * r + 1];                                              \
        double a1 = 0, a2 = 0;                                                            \
        _Pragma("omp simd reduction(+:a1, a2)")                                           \
        for (int64_t d = 0; d < D; d++) {                                                 \
          T dh = w ? gr[d] * w[d] : gr[d];                                                \
          a1 += dh; a2 += dh * (xr[d] - m) * rs;                                          \
        }                                                                                 \
        T m1 = (T)(a1 / (double)D), m2 = (T)(a2 / (double)D);                             \
        _Pragma("omp simd")                                                               \
        for (int64_t d = 0; d < D; d++) {                                                 \
          T dh = w ? gr[d] * w[d] : gr[d];                                                \
          dx[r * D + d] = rs * (dh - m1 - (xr[d] - m) * rs * m2);                         \
        }                                                                                 \
      }                                                                                   \
    }                                                                                     \
    if (dw || db) {                                                                       \
      /* column blocks in parallel; rows walked in order inside a block (contiguous) */   \
      int64_t nblk = (D + 63) / 64;                                                       \
      _Pragma("omp parallel for if (R * D > NT_OMP_THRESHOLD)")                            \
      for (int64_t k = 0; k < nblk; k++) {                                                \
        int64_t d0 = k * 64, d1 = d0 + 64 < D ? d0 + 64 : D;                              \
        double aw[64] = {0}, ab[64] = {0};                                                \
        for (int64_t r = 0; r < R; r++) {                                                 \
          const T *gr = g + r * D, *xr = x + r * D;                                       \
          T m = st[2 * r], rs = st[2 * r + 1];                                            \
          _Pragma("omp simd")                                                             \
          for (int64_t d = d0; d < d1; d++) {                                             \
            aw[d - d0] += gr[d] * (xr[d] - m) * rs;                                       \
            ab[d - d0] += gr[d];                                                          \
          }                                                                               \
        }                                                                                 \
        for (int64_t d = d0; d < d1; d++) {                                               \
          if (dw) dw[d] = (T)aw[d - d0];                                                  \
          if (db) db[d] = (T)ab[d - d0];                                                  \
        }                                                                                 \
      }                                                                                   \
    }                                                                                     \
  }
LN_T(float)
LN_T(double)

#define PTR(t) ((t) ? (void *)nt_base(t) : NULL)

/* fwd: out y [R,D]; in = {x, w|NULL, b|NULL, stats [R,2] (written)}; s[0] = eps.
** bwd: out dx|NULL; in = {g, x, stats, w|NULL}; extra = nt_Tensor *[2] {dw|NULL, db|NULL}. */
static int k_layer_norm(const nt_KernelArgs *a) {
  if (a->op == nn_ops.layer_norm) {
    const nt_Tensor *x = a->in[0];
    int64_t R = x->shape[0], D = x->shape[1];
    if (x->dtype == NT_F32) ln_fwd_float(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->out), PTR(a->in[3]), R, D, a->s[0]);
    else ln_fwd_double(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->out), PTR(a->in[3]), R, D, a->s[0]);
    return 0;
  }
  nt_Tensor **wb = a->extra;
  const nt_Tensor *x = a->in[1];
  int64_t R = x->shape[0], D = x->shape[1];
  if (x->dtype == NT_F32) ln_bwd_float(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->in[3]), PTR(a->out), PTR(wb[0]), PTR(wb[1]), R, D);
  else ln_bwd_double(PTR(a->in[0]), PTR(a->in[1]), PTR(a->in[2]), PTR(a->in[3]), PTR(a->out), PTR(wb[0]), PTR(wb[1]), R, D);
  return 0;
}

/* node: in = {x [R,D], w, b}; saved[0] = stats */
static int ln_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *w = nd->in[1];
  nt_Tensor *gc = nt_to_dtype(gout, x->dtype), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  if (!g) return -1;
  int64_t D = x->shape[1];
  nt_Tensor *dx = nt_node_needs(nd, 0) ? nt_empty(x->shape, 2, x->dtype, x->device) : NULL;
  nt_Tensor *wb[2] = {nt_node_needs(nd, 1) ? nt_empty(&D, 1, x->dtype, x->device) : NULL,
                      nt_node_needs(nd, 2) ? nt_empty(&D, 1, x->dtype, x->device) : NULL};
  nt_KernelArgs ka = {.op = nn_ops.layer_norm_bwd, .out = dx, .in = {g, x, nd->saved[0], w}, .nin = 4, .extra = wb};
  int rc = (nt_node_needs(nd, 0) && !dx) || (nt_node_needs(nd, 1) && !wb[0]) || (nt_node_needs(nd, 2) && !wb[1]) ? -1 : 0;
  if (!rc && x->numel) rc = nt_dispatch(ka.op, x->device, &ka);
  else if (!rc) { if (wb[0]) nt_fill_(wb[0], 0); if (wb[1]) nt_fill_(wb[1], 0); }
  nt_release(g);
  if (rc) { nt_release(dx); nt_release(wb[0]); nt_release(wb[1]); return -1; }
  gin[0] = dx; gin[1] = wb[0]; gin[2] = wb[1];
  return 0;
}

/* weight/bias as contiguous [D] of dtype dt, or NULL (ok = false on error) */
static nt_Tensor *ln_param(const char *what, nt_Tensor *p, int64_t D, nt_DType dt, bool *ok) {
  if (!p) return NULL;
  if (p->ndim != 1 || p->shape[0] != D) {
    char s[128];
    nt_error_set("layer_norm: %s must have shape [%lld], got %s", what, (long long)D, nt_shape_str(p->shape, p->ndim, s, sizeof s));
    *ok = false; return NULL;
  }
  nt_Tensor *c = nt_to_dtype(p, dt), *r = c ? nt_contiguous(c) : NULL;
  nt_release(c);
  if (!r) *ok = false;
  return r;
}

nt_Tensor *nt_layer_norm(nt_Tensor *x0, nt_Tensor *weight, nt_Tensor *bias, double eps) {
  const char *op = "layer_norm";
  if (x0->ndim < 1) NT_FAIL_NULL("%s: input must have at least 1 dimension", op);
  if (nt_check_same_device(op, 3, (nt_Tensor *[]){x0, weight ? weight : x0, bias ? bias : x0})) return NULL;
  NT_AUTOCAST(NT_AUTOCAST_F32, nt_layer_norm(ac_[0], ac_[1], ac_[2], eps), x0, weight, bias);
  int64_t D = x0->shape[x0->ndim - 1], shp[2] = {-1, D};
  nt_Tensor *xf = nn_compute_float(op, x0);
  if (!xf) return NULL;
  nt_Tensor *xc = nt_contiguous(xf);
  nt_release(xf);
  if (!xc) return NULL;
  if (D == 0) shp[0] = xc->numel ? 0 : nt_shape_numel(x0->shape, x0->ndim - 1);
  nt_Tensor *x = nt_reshape(xc, shp, 2);
  nt_release(xc);
  if (!x) return NULL;
  bool ok = true;
  nt_Tensor *w = ln_param("weight", weight, D, x->dtype, &ok), *b = ok ? ln_param("bias", bias, D, x->dtype, &ok) : NULL;
  nt_Tensor *y = NULL, *st = NULL, *res = NULL;
  if (!ok) goto done;
  int64_t sts[2] = {x->shape[0], 2};
  y = nt_empty(x->shape, 2, x->dtype, x->device);
  st = nt_empty(sts, 2, x->dtype, x->device);
  if (!y || !st) goto done;
  nt_KernelArgs ka = {.op = nn_ops.layer_norm, .out = y, .in = {x, w, b, st}, .nin = 4, .s = {eps}};
  if (x->numel && nt_dispatch(ka.op, x->device, &ka)) goto done;
  nt_Node *nd;
  y = nn_finish(y, "LayerNormBackward", ln_backward, 3, (nt_Tensor *[]){x, w, b}, &nd);
  if (y && nd && nt_node_save(nd, st) < 0) { nt_release(y); y = NULL; }
  if (y) res = nt_reshape(y, x0->shape, x0->ndim);
done:
  nt_release(x); nt_release(w); nt_release(b); nt_release(y); nt_release(st);
  return nn_cast_back(res, x0->dtype);
}

/* ---- dropout ------------------------------------------------------------------- */
nt_Tensor *nt_dropout(nt_Tensor *x, double p, bool training) {
  nt_nn_init();
  if (!(p >= 0 && p <= 1)) NT_FAIL_NULL("dropout: probability must be in [0, 1], got %g", p);
  if (!nt_dtype_is_float(x->dtype)) NT_FAIL_NULL("dropout: expected a floating dtype, got %s", nt_dtype_name(x->dtype));
  if (!training || p == 0) return nt_retain(x);
  /* y = x * (mask / (1-p)); mask ~ Bernoulli(1-p).  The scaled mask carries no
  ** grad, so autograd of the product gives dx = g * mask / (1-p). */
  nt_Tensor *m = p == 1 ? nt_zeros_like(x) : nt_bernoulli(x, 1 - p);
  if (!m) return NULL;
  if (p < 1) {
    nt_Tensor *ms = nt_binary_scalar_ex(NT_OP_MUL, m, 1.0 / (1.0 - p), NT_SCALAR_FLOAT);
    nt_release(m);
    if (!(m = ms)) return NULL;
  }
  nt_Tensor *y = nt_mul(x, m);
  nt_release(m);
  return y;
}

void nn_register_norm(void) {
  nn_ops.layer_norm = nt_op_register("layer_norm");
  nn_ops.layer_norm_bwd = nt_op_register("layer_norm_backward");
  nt_register_kernel(nn_ops.layer_norm, NT_CPU, k_layer_norm);
  nt_register_kernel(nn_ops.layer_norm_bwd, NT_CPU, k_layer_norm);
}
