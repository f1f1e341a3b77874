/*
** conv.c — conv2d (im2col + BLAS gemm), max_pool2d, avg_pool2d; NCHW.
**
** conv2d, per image n, with K = C*kh*kw and L = Ho*Wo:
**   col[K, L]:  col[(c*kh + i)*kw + j, oh*Wo + ow] = x[n, c, oh*sh - ph + i, ow*sw - pw + j]  (0 outside)
**   y[n] [O, L] = W [O, K] @ col + bias[:, None]
** backward:
**   dW += g[n] @ col^T,   dcol = W^T @ g[n],   dx[n] = col2im(dcol) (sums overlaps),
**   db = sum over n and L of g.
** Ho = (H + 2ph - kh) / sh + 1 (floor), likewise Wo.
** Pooling works per (n, c) plane; max_pool saves the argmax (index in the H*W
** plane) so backward is a scatter; avg_pool divides by kh*kw (padding counts).
*/
#include "nninternal.h"
#include "tensor/tblas.h"
#include <stdlib.h>

typedef struct cgeom { int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, Ho, Wo; } cgeom;

#define CONV_T(T, GEMM)                                                                        \
  static void im2col_##T(const T *x, T *col, const cgeom *g) {                                  \
    int64_t L = g->Ho * g->Wo;                                                                  \
    for (int64_t c = 0; c < g->C; c++)                                                          \
      for (int64_t i = 0; i < g->kh; i++)                                                       \
        for (int64_t j = 0; j < g->kw; j++) {                                                   \
          T *row = col + ((c * g->kh + i) * g->kw + j) * L;                                     \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                                              \
            int64_t h = oh * g->sh - g->ph + i;                                                 \
            for (int64_t ow = 0; ow < g->Wo; ow++) {                                            \
              int64_t w = ow * g->sw - g->pw + j;                                               \
              row[oh * g->Wo + ow] = (h >= 0 && h < g->H && w >= 0 && w < g->W)                 \
                                       ? x[(c * g->H + h) * g->W + w] : 0;                      \
            }                                                                                   \
          }                                                                                     \
        }                                                                                       \
  }                                                                                             \
  static void col2im_##T(const T *col, T *dx, const cgeom *g) {                                 \
    int64_t L = g->Ho * g->Wo;                                                                  \
    for (int64_t c = 0; c < g->C; c++)                                                          \
      for (int64_t i = 0; i < g->kh; i++)                                                       \
        for (int64_t j = 0; j < g->kw; j++) {                                                   \
          const T *row = col + ((c * g->kh + i) * g->kw + j) * L;                               \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                                              \
            int64_t h = oh * g->sh - g->ph + i;                                                 \
            if (h < 0 || h >= g->H) continue;                                                   \
            for (int64_t ow = 0; ow < g->Wo; ow++) {                                            \
              int64_t w = ow * g->sw - g->pw + j;                                               \
              if (w >= 0 && w < g->W) dx[(c * g->H + h) * g->W + w] += row[oh * g->Wo + ow];    \
            }                                                                                   \
          }                                                                                     \
        }                                                                                       \
  }                                                                                             \
  static int conv_fwd_##T(const T *x, const T *w, const T *b, T *y, const cgeom *g) {           \
    int64_t K = g->C * g->kh * g->kw, L = g->Ho * g->Wo;                                        \
    T *col = malloc(sizeof(T) * (size_t)(K * L > 0 ? K * L : 1));                                   \
    if (!col) { nt_error_oom(sizeof(T) * (size_t)(K * L)); return -1; }                         \
    for (int64_t n = 0; n < g->N; n++) {                                                        \
      T *yn = y + n * g->O * L;                                                                 \
      im2col_##T(x + n * g->C * g->H * g->W, col, g);                                           \
      for (int64_t o = 0; o < g->O; o++)                                                        \
        for (int64_t l = 0; l < L; l++) yn[o * L + l] = b ? b[o] : 0;                            \
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->O, (int)L, (int)K, 1, w, (int)K,   \
           col, (int)L, 1, yn, (int)L);                                                         \
    }                                                                                           \
    free(col);                                                                                  \
    return 0;                                                                                   \
  }                                                                                             \
  static int conv_bwd_##T(const T *gy, const T *x, const T *w, T *dx, T *dw, T *db,             \
                          const cgeom *g) {                                                     \
    int64_t K = g->C * g->kh * g->kw, L = g->Ho * g->Wo;                                        \
    T *col = malloc(sizeof(T) * (size_t)(K * L > 0 ? K * L : 1));                                   \
    if (!col) { nt_error_oom(sizeof(T) * (size_t)(K * L)); return -1; }                         \
    if (dw) memset(dw, 0, sizeof(T) * (size_t)(g->O * K));                                     \
    if (db) memset(db, 0, sizeof(T) * (size_t)g->O);                                           \
    if (dx) memset(dx, 0, sizeof(T) * (size_t)(g->N * g->C * g->H * g->W));                    \
    for (int64_t n = 0; n < g->N; n++) {                                                        \
      const T *gn = gy + n * g->O * L;                                                          \
      if (dw) {                                                                                 \
        im2col_##T(x + n * g->C * g->H * g->W, col, g);                                         \
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->O, (int)K, (int)L, 1, gn, (int)L,  \
             col, (int)L, 1, dw, (int)K);                                                       \
      }                                                                                         \
      if (db)                                                                                   \
        for (int64_t o = 0; o < g->O; o++)                                                      \
          for (int64_t l = 0; l < L; l++) db[o] += gn[o * L + l];                               \
      if (dx) {                                                                                 \
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)L, (int)g->O, 1, w, (int)K,   \
             gn, (int)L, 0, col, (int)L);                                                       \
        col2im_##T(col, dx + n * g->C * g->H * g->W, g);                                        \
      }                                                                                         \
    }                                                                                           \
    free(col);                                                                                  \
    return 0;                                                                                   \
  }
CONV_T(float, nt_blas()->sgemm)
CONV_T(double, nt_blas()->dgemm)

#define P(t) ((t) ? (void *)nt_base(t) : NULL)

/* fwd: out y; in = {x, w, bias|NULL}; extra = cgeom.
** bwd: out unused (NULL); in = {g, x, w}; extra = struct {cgeom; nt_Tensor *d[3]}. */
typedef struct conv_bwd_args { cgeom g; nt_Tensor *d[3]; } conv_bwd_args;

static int k_conv2d(const nt_KernelArgs *a) {
  bool f32 = a->in[0]->dtype == NT_F32;
  if (a->op == nn_ops.conv2d) {
    const cgeom *g = a->extra;
    return f32 ? conv_fwd_float(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(a->out), g)
               : conv_fwd_double(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(a->out), g);
  }
  const conv_bwd_args *b = a->extra;
  return f32 ? conv_bwd_float(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(b->d[0]), P(b->d[1]), P(b->d[2]), &b->g)
             : conv_bwd_double(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(b->d[0]), P(b->d[1]), P(b->d[2]), &b->g);
}

static void geom_to_iarg(const cgeom *g, int64_t *ia) { memcpy(ia, g, sizeof *g); }
static void iarg_to_geom(const int64_t *ia, cgeom *g) { memcpy(g, ia, sizeof *g); }
_Static_assert(sizeof(cgeom) <= sizeof(((nt_Node *)0)->iarg), "cgeom fits in node iarg");

static int conv_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *w = nd->in[1];
  conv_bwd_args b;
  iarg_to_geom(nd->iarg, &b.g);
  nt_Tensor *gc = nt_to_dtype(gout, x->dtype), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  if (!g) return -1;
  b.d[0] = nt_node_needs(nd, 0) ? nt_empty(x->shape, 4, x->dtype, x->device) : NULL;
  b.d[1] = nt_node_needs(nd, 1) ? nt_empty(w->shape, 4, w->dtype, w->device) : NULL;
  b.d[2] = nd->in[2] && nt_node_needs(nd, 2) ? nt_empty(&b.g.O, 1, x->dtype, x->device) : NULL;
  nt_KernelArgs ka = {.op = nn_ops.conv2d_bwd, .in = {g, x, w}, .nin = 3, .extra = &b};
  int rc = nt_dispatch(ka.op, x->device, &ka);
  nt_release(g);
  if (rc) { for (int i = 0; i < 3; i++) nt_release(b.d[i]); return -1; }
  for (int i = 0; i < 3; i++) gin[i] = b.d[i];
  return 0;
}

/* converts to the compute dtype dt and makes contiguous (NULL in -> NULL out) */
static nt_Tensor *prep(nt_Tensor *t, nt_DType dt, bool *ok) {
  if (!t) return NULL;
  nt_Tensor *c = nt_to_dtype(t, dt), *r = c ? nt_contiguous(c) : NULL;
  nt_release(c);
  if (!r) *ok = false;
  return r;
}

static int out_size(const char *op, int64_t in, int64_t k, int64_t s, int64_t p, int64_t *out) {
  if (k <= 0 || s <= 0 || p < 0) NT_FAIL("%s: kernel and stride must be positive, padding non-negative", op);
  if (in + 2 * p < k) NT_FAIL("%s: kernel size %lld is larger than the padded input %lld", op, (long long)k, (long long)(in + 2 * p));
  *out = (in + 2 * p - k) / s + 1;
  return 0;
}

nt_Tensor *nt_conv2d(nt_Tensor *x0, nt_Tensor *w0, nt_Tensor *b0, int sh, int sw, int ph, int pw) {
  const char *op = "conv2d";
  char s1[128], s2[128];
  if (x0->ndim != 4 || w0->ndim != 4 || w0->shape[1] != x0->shape[1] || (b0 && (b0->ndim != 1 || b0->shape[0] != w0->shape[0])))
    NT_FAIL_NULL("%s: expected input [N,C,H,W], weight [O,C,kh,kw] and bias [O]; got %s and %s", op,
                 nt_shape_str(x0->shape, x0->ndim, s1, sizeof s1), nt_shape_str(w0->shape, w0->ndim, s2, sizeof s2));
  if (nt_check_same_device(op, 3, (nt_Tensor *[]){x0, w0, b0 ? b0 : x0})) return NULL;
  NT_AUTOCAST(NT_AUTOCAST_LOW, nt_conv2d(ac_[0], ac_[1], ac_[2], sh, sw, ph, pw), x0, w0, b0);
  cgeom g = {.N = x0->shape[0], .C = x0->shape[1], .H = x0->shape[2], .W = x0->shape[3], .O = w0->shape[0],
             .kh = w0->shape[2], .kw = w0->shape[3], .sh = sh, .sw = sw, .ph = ph, .pw = pw};
  if (out_size(op, g.H, g.kh, sh, ph, &g.Ho) || out_size(op, g.W, g.kw, sw, pw, &g.Wo)) return NULL;
  nt_Tensor *xf = nn_compute_float(op, x0);
  if (!xf) return NULL;
  bool ok = true;
  nt_Tensor *x = prep(xf, xf->dtype, &ok), *w = prep(w0, xf->dtype, &ok), *b = prep(b0, xf->dtype, &ok);
  nt_release(xf);
  nt_Tensor *y = NULL;
  if (!ok) goto done;
  y = nt_empty((int64_t[]){g.N, g.O, g.Ho, g.Wo}, 4, x->dtype, x->device);
  if (!y) goto done;
  nt_KernelArgs ka = {.op = nn_ops.conv2d, .out = y, .in = {x, w, b}, .nin = 3, .extra = &g};
  if (y->numel && nt_dispatch(ka.op, x->device, &ka)) { nt_release(y); y = NULL; goto done; }
  nt_Node *nd;
  y = nn_finish(y, "Conv2dBackward", conv_backward, 3, (nt_Tensor *[]){x, w, b}, &nd);
  if (y && nd) { geom_to_iarg(&g, nd->iarg); nd->niarg = (int)(sizeof g / sizeof(int64_t)); }
done:
  nt_release(x); nt_release(w); nt_release(b);
  return nn_cast_back(y, x0->dtype);
}

/* ---- pooling ------------------------------------------------------------------------ */
#define POOL_T(T)                                                                               \
  static void maxpool_##T(const T *x, T *y, int64_t *am, int64_t planes, const cgeom *g) {      \
    _Pragma("omp parallel for if (planes * g->Ho * g->Wo * g->kh * g->kw > NT_OMP_THRESHOLD)")  \
    for (int64_t p = 0; p < planes; p++) {                                                      \
      const T *xp = x + p * g->H * g->W;                                                        \
      for (int64_t oh = 0; oh < g->Ho; oh++)                                                    \
        for (int64_t ow = 0; ow < g->Wo; ow++) {                                                \
          T best = -INFINITY;                                                                   \
          int64_t bi = -1;                                                                      \
          for (int64_t i = 0; i < g->kh; i++) {                                                 \
            int64_t h = oh * g->sh - g->ph + i;                                                 \
            if (h < 0 || h >= g->H) continue;                                                   \
            for (int64_t j = 0; j < g->kw; j++) {                                               \
              int64_t w = ow * g->sw - g->pw + j;                                               \
              if (w < 0 || w >= g->W) continue;                                                 \
              T v = xp[h * g->W + w];                                                           \
              if (bi < 0 || v > best || v != v) { best = v; bi = h * g->W + w; if (v != v) goto done_##T; } \
            }                                                                                   \
          }                                                                                     \
        done_##T:                                                                               \
          y[(p * g->Ho + oh) * g->Wo + ow] = best;                                              \
          am[(p * g->Ho + oh) * g->Wo + ow] = bi;                                               \
        }                                                                                       \
    }                                                                                           \
  }                                                                                             \
  static void avgpool_##T(const T *x, T *y, int64_t planes, const cgeom *g, int bwd) {          \
    T inv = (T)1 / (T)(g->kh * g->kw);                                                          \
    _Pragma("omp parallel for if (planes * g->Ho * g->Wo * g->kh * g->kw > NT_OMP_THRESHOLD)")  \
    for (int64_t p = 0; p < planes; p++) {                                                      \
      /* fwd: x = input, y = output;  bwd: x = grad of output, y = grad of input (zeroed) */    \
      for (int64_t oh = 0; oh < g->Ho; oh++)                                                    \
        for (int64_t ow = 0; ow < g->Wo; ow++) {                                                \
          T acc = 0;                                                                            \
          T go = bwd ? x[(p * g->Ho + oh) * g->Wo + ow] * inv : 0;                              \
          for (int64_t i = 0; i < g->kh; i++) {                                                 \
            int64_t h = oh * g->sh - g->ph + i;                                                 \
            if (h < 0 || h >= g->H) continue;                                                   \
            for (int64_t j = 0; j < g->kw; j++) {                                               \
              int64_t w = ow * g->sw - g->pw + j;                                               \
              if (w < 0 || w >= g->W) continue;                                                 \
              if (bwd) y[p * g->H * g->W + h * g->W + w] += go;                                 \
              else acc += x[p * g->H * g->W + h * g->W + w];                                    \
            }                                                                                   \
          }                                                                                     \
          if (!bwd) y[(p * g->Ho + oh) * g->Wo + ow] = acc * inv;                               \
        }                                                                                       \
    }                                                                                           \
  }                                                                                             \
  static void maxpool_bwd_##T(const T *gy, const int64_t *am, T *dx, int64_t planes, const cgeom *g) { \
    int64_t L = g->Ho * g->Wo;                                                                  \
    _Pragma("omp parallel for if (planes * L > NT_OMP_THRESHOLD)")                              \
    for (int64_t p = 0; p < planes; p++)                                                        \
      for (int64_t l = 0; l < L; l++)                                                           \
        if (am[p * L + l] >= 0) dx[p * g->H * g->W + am[p * L + l]] += gy[p * L + l];           \
  }
POOL_T(float)
POOL_T(double)

/* max fwd: out y; in = {x, argmax i64 (written)}.  max bwd: out dx; in = {g, argmax}.
** avg fwd: out y; in = {x}.  avg bwd: out dx; in = {g}.  extra = cgeom (N = planes). */
static int k_pool(const nt_KernelArgs *a) {
  const cgeom *g = a->extra;
  bool f32 = a->out->dtype == NT_F32;
  int op = a->op;
  if (op == nn_ops.max_pool2d_bwd || op == nn_ops.avg_pool2d_bwd)
    memset(nt_base(a->out), 0, (size_t)a->out->numel * nt_dtype_size(a->out->dtype));
  if (op == nn_ops.max_pool2d) {
    if (f32) maxpool_float(P(a->in[0]), P(a->out), P(a->in[1]), g->N, g); else maxpool_double(P(a->in[0]), P(a->out), P(a->in[1]), g->N, g);
  } else if (op == nn_ops.max_pool2d_bwd) {
    if (f32) maxpool_bwd_float(P(a->in[0]), P(a->in[1]), P(a->out), g->N, g); else maxpool_bwd_double(P(a->in[0]), P(a->in[1]), P(a->out), g->N, g);
  } else {
    int bwd = op == nn_ops.avg_pool2d_bwd;
    if (f32) avgpool_float(P(a->in[0]), P(a->out), g->N, g, bwd); else avgpool_double(P(a->in[0]), P(a->out), g->N, g, bwd);
  }
  return 0;
}

static int pool_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0];
  cgeom g;
  iarg_to_geom(nd->iarg, &g);
  nt_Tensor *gc = nt_to_dtype(gout, x->dtype), *gy = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  if (!gy) return -1;
  nt_Tensor *dx = nt_empty(x->shape, 4, x->dtype, x->device);
  bool is_max = nd->nsaved > 0;
  nt_KernelArgs ka = {.op = is_max ? nn_ops.max_pool2d_bwd : nn_ops.avg_pool2d_bwd, .out = dx,
                      .in = {gy, is_max ? nd->saved[0] : NULL}, .nin = is_max ? 2 : 1, .extra = &g};
  int rc = dx ? nt_dispatch(ka.op, x->device, &ka) : -1;
  nt_release(gy);
  if (rc) { nt_release(dx); return -1; }
  gin[0] = dx;
  return 0;
}

static nt_Tensor *pool(const char *op, bool is_max, nt_Tensor *x0, int kh, int kw, int sh, int sw, int ph, int pw) {
  char s[128];
  if (x0->ndim != 4) NT_FAIL_NULL("%s: expected input [N,C,H,W], got %s", op, nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  if (sh <= 0) sh = kh;          /* PyTorch: stride defaults to the kernel size */
  if (sw <= 0) sw = kw;
  if (ph * 2 > kh || pw * 2 > kw) NT_FAIL_NULL("%s: padding should be at most half of the kernel size", op);
  cgeom g = {.N = x0->shape[0] * x0->shape[1], .C = 1, .H = x0->shape[2], .W = x0->shape[3],
             .kh = kh, .kw = kw, .sh = sh, .sw = sw, .ph = ph, .pw = pw};
  if (out_size(op, g.H, kh, sh, ph, &g.Ho) || out_size(op, g.W, kw, sw, pw, &g.Wo)) return NULL;
  nt_Tensor *xf = nn_compute_float(op, x0), *x = xf ? nt_contiguous(xf) : NULL;
  nt_release(xf);
  if (!x) return NULL;
  int64_t shp[4] = {x->shape[0], x->shape[1], g.Ho, g.Wo};
  nt_Tensor *y = nt_empty(shp, 4, x->dtype, x->device), *am = is_max ? nt_empty(shp, 4, NT_I64, x->device) : NULL;
  if (!y || (is_max && !am)) goto fail;
  nt_KernelArgs ka = {.op = is_max ? nn_ops.max_pool2d : nn_ops.avg_pool2d, .out = y, .in = {x, am}, .nin = is_max ? 2 : 1, .extra = &g};
  if (y->numel && nt_dispatch(ka.op, x->device, &ka)) goto fail;
  nt_Node *nd;
  y = nn_finish(y, is_max ? "MaxPool2dBackward" : "AvgPool2dBackward", pool_backward, 1, &x, &nd);
  if (y && nd) {
    geom_to_iarg(&g, nd->iarg);
    nd->niarg = (int)(sizeof g / sizeof(int64_t));
    if (is_max && nt_node_save(nd, am) < 0) goto fail;
  }
  nt_release(x); nt_release(am);
  return nn_cast_back(y, x0->dtype);
fail:
  nt_release(x); nt_release(y); nt_release(am);
  return NULL;
}

nt_Tensor *nt_max_pool2d(nt_Tensor *x, int kh, int kw, int sh, int sw, int ph, int pw) {
  return pool("max_pool2d", true, x, kh, kw, sh, sw, ph, pw);
}
nt_Tensor *nt_avg_pool2d(nt_Tensor *x, int kh, int kw, int sh, int sw, int ph, int pw) {
  return pool("avg_pool2d", false, x, kh, kw, sh, sw, ph, pw);
}

void nn_register_conv(void) {
  nn_ops.conv2d = nt_op_register("conv2d");
  nn_ops.conv2d_bwd = nt_op_register("conv2d_backward");
  nn_ops.max_pool2d = nt_op_register("max_pool2d");
  nn_ops.max_pool2d_bwd = nt_op_register("max_pool2d_backward");
  nn_ops.avg_pool2d = nt_op_register("avg_pool2d");
  nn_ops.avg_pool2d_bwd = nt_op_register("avg_pool2d_backward");
  nt_register_kernel(nn_ops.conv2d, NT_CPU, k_conv2d);
  nt_register_kernel(nn_ops.conv2d_bwd, NT_CPU, k_conv2d);
  nt_register_kernel(nn_ops.max_pool2d, NT_CPU, k_pool);
  nt_register_kernel(nn_ops.max_pool2d_bwd, NT_CPU, k_pool);
  nt_register_kernel(nn_ops.avg_pool2d, NT_CPU, k_pool);
  nt_register_kernel(nn_ops.avg_pool2d_bwd, NT_CPU, k_pool);
}
