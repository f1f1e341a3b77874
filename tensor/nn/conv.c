/*
** conv.c — conv1d/conv2d (im2col + BLAS gemm; dilation, groups, 'same'
** padding), conv_transpose1d/2d, max_pool2d, avg_pool2d; NCHW.
**
** conv2d, per image n, with K = C*kh*kw and L = Ho*Wo, dilation dh, dw:
**   col[K, L]:  col[(c*kh + i)*kw + j, oh*Wo + ow] = x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]  (0 outside)
**   y[n] [O, L] = W [O, K] @ col + bias[:, None]     (groups: one GEMM per group on its
**                                                      block of O/G rows of W and K/G rows of col)
** backward:
**   dW += g[n] @ col^T,   dcol = W^T @ g[n],   dx[n] = col2im(dcol) (sums overlaps),
**   db = sum over n and L of g.
** Ho = (H + pad_total - dh*(kh-1) - 1) / sh + 1 (floor), likewise Wo; ph/pw is
** the padding before (padding='same' with an odd total puts the extra at the end).
** conv1d is conv2d with H = 1 (views).  conv_transpose is the classic
** gradient of a convolution: its forward is conv2d_backward's dx of the
** convolution whose input has our output's shape, its backward conv2d (dx)
** and conv2d_backward's dW; the bias is a broadcast add.
** Pooling works per (n, c) plane; max_pool saves the argmax (index in the H*W
** plane) so backward is a scatter; avg_pool divides by kh*kw (padding counts).
*/
#include "nninternal.h"
#include "tensor/tblas.h"
#include "tensor/tonednn.h"
#include <stdlib.h>

/* G = groups (0 or 1: none): input channels c in [g*C/G, (g+1)*C/G) and output
** channels o in [g*O/G, ...) of group g; the weight is [O, C/G, kh, kw].
** dh, dw: dilation (0 means 1, so pooling's geometry leaves them out). */
typedef struct cgeom { int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, Ho, Wo, dh, dw, G; } cgeom;
static inline int64_t dil(int64_t d) { return d > 0 ? d : 1; }
static inline int64_t ngroups(const cgeom *g) { return g->G > 0 ? g->G : 1; }

#define CONV_T(T, GEMM)                                                                        \
  static void im2col_##T(const T *x, T *col, const cgeom *g) {                                  \
    int64_t L = g->Ho * g->Wo, dh = dil(g->dh), dw = dil(g->dw);                                \
    for (int64_t c = 0; c < g->C; c++)                                                          \
      for (int64_t i = 0; i < g->kh; i++)                                                       \
        for (int64_t j = 0; j < g->kw; j++) {                                                   \
          T *row = col + ((c * g->kh + i) * g->kw + j) * L;                                     \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                                              \
            int64_t h = oh * g->sh - g->ph + i * dh;                                            \
            for (int64_t ow = 0; ow < g->Wo; ow++) {                                            \
              int64_t w = ow * g->sw - g->pw + j * dw;                                          \
              row[oh * g->Wo + ow] = (h >= 0 && h < g->H && w >= 0 && w < g->W)                 \
                                       ? x[(c * g->H + h) * g->W + w] : 0;                      \
            }                                                                                   \
          }                                                                                     \
        }                                                                                       \
  }                                                                                             \
  static void col2im_##T(const T *col, T *dx, const cgeom *g) {                                 \
    int64_t L = g->Ho * g->Wo, dh = dil(g->dh), dw = dil(g->dw);                                \
    for (int64_t c = 0; c < g->C; c++)                                                          \
      for (int64_t i = 0; i < g->kh; i++)                                                       \
        for (int64_t j = 0; j < g->kw; j++) {                                                   \
          const T *row = col + ((c * g->kh + i) * g->kw + j) * L;                               \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                                              \
            int64_t h = oh * g->sh - g->ph + i * dh;                                            \
            if (h < 0 || h >= g->H) continue;                                                   \
            for (int64_t ow = 0; ow < g->Wo; ow++) {                                            \
              int64_t w = ow * g->sw - g->pw + j * dw;                                          \
              if (w >= 0 && w < g->W) dx[(c * g->H + h) * g->W + w] += row[oh * g->Wo + ow];    \
            }                                                                                   \
          }                                                                                     \
        }                                                                                       \
  }                                                                                             \
  /* per group gi: y[n][gi*Og.., L] = W[gi*Og.., Kg] @ col[gi*Kg.., L] */                       \
  static int conv_fwd_##T(const T *x, const T *w, const T *b, T *y, const cgeom *g) {           \
    int64_t K = g->C * g->kh * g->kw, L = g->Ho * g->Wo, G = ngroups(g), Kg = K / G, Og = g->O / G; \
    T *col = malloc(sizeof(T) * (size_t)(K * L > 0 ? K * L : 1));                               \
    if (!col) { nt_error_oom(sizeof(T) * (size_t)(K * L)); return -1; }                         \
    for (int64_t n = 0; n < g->N; n++) {                                                        \
      T *yn = y + n * g->O * L;                                                                 \
      im2col_##T(x + n * g->C * g->H * g->W, col, g);                                           \
      for (int64_t o = 0; o < g->O; o++)                                                        \
        for (int64_t l = 0; l < L; l++) yn[o * L + l] = b ? b[o] : 0;                            \
      for (int64_t gi = 0; gi < G; gi++)                                                        \
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Og, (int)L, (int)Kg, 1, w + gi * Og * Kg, \
             (int)Kg, col + gi * Kg * L, (int)L, 1, yn + gi * Og * L, (int)L);                  \
    }                                                                                           \
    free(col);                                                                                  \
    return 0;                                                                                   \
  }                                                                                             \
  static int conv_bwd_##T(const T *gy, const T *x, const T *w, T *dx, T *dw, T *db,             \
                          const cgeom *g) {                                                     \
    int64_t K = g->C * g->kh * g->kw, L = g->Ho * g->Wo, G = ngroups(g), Kg = K / G, Og = g->O / G; \
    T *col = malloc(sizeof(T) * (size_t)(K * L > 0 ? K * L : 1));                               \
    if (!col) { nt_error_oom(sizeof(T) * (size_t)(K * L)); return -1; }                         \
    if (dw) memset(dw, 0, sizeof(T) * (size_t)(g->O * Kg));                                    \
    if (db) memset(db, 0, sizeof(T) * (size_t)g->O);                                           \
    if (dx) memset(dx, 0, sizeof(T) * (size_t)(g->N * g->C * g->H * g->W));                    \
    for (int64_t n = 0; n < g->N; n++) {                                                        \
      const T *gn = gy + n * g->O * L;                                                          \
      if (dw) {                                                                                 \
        im2col_##T(x + n * g->C * g->H * g->W, col, g);                                         \
        for (int64_t gi = 0; gi < G; gi++)                                                      \
          GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Og, (int)Kg, (int)L, 1, gn + gi * Og * L, \
               (int)L, col + gi * Kg * L, (int)L, 1, dw + gi * Og * Kg, (int)Kg);               \
      }                                                                                         \
      if (db)                                                                                   \
        for (int64_t o = 0; o < g->O; o++)                                                      \
          for (int64_t l = 0; l < L; l++) db[o] += gn[o * L + l];                               \
      if (dx) {                                                                                 \
        for (int64_t gi = 0; gi < G; gi++)                                                      \
          GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)Kg, (int)L, (int)Og, 1, w + gi * Og * Kg, \
               (int)Kg, gn + gi * Og * L, (int)L, 0, col + gi * Kg * L, (int)L);                \
        col2im_##T(col, dx + n * g->C * g->H * g->W, g);                                        \
      }                                                                                         \
    }                                                                                           \
    free(col);                                                                                  \
    return 0;                                                                                   \
  }
CONV_T(float, nt_blas()->sgemm)
CONV_T(double, nt_blas()->dgemm)

/* f32 goes through oneDNN's convolution primitives when they are there
** (tensor/tonednn.c: blocked layouts and JIT kernels, what torch runs on the
** CPU): y, dx and dW; the im2col/GEMM kernels above are the fallback, f64's
** path, and the reference the tests compare against (NABLA_ONEDNN_CONV=0).
** db is always the serial loop: its bits do not depend on the thread count
** (y's, dx's and dW's do, with OpenBLAS's tiles as with oneDNN's). */
static bool onednn_geom(const cgeom *g, nt_OnednnConvGeom *o) {
  _Static_assert(sizeof(cgeom) == sizeof(nt_OnednnConvGeom), "the same sixteen fields");
  memcpy(o, g, sizeof *o);
  o->dh = dil(g->dh); o->dw = dil(g->dw); o->G = ngroups(g);
  return g->N > 0 && g->C > 0 && g->H > 0 && g->W > 0 && g->O > 0 && g->Ho > 0 && g->Wo > 0;
}
static int conv_fwd_f32(const float *x, const float *w, const float *b, float *y, const cgeom *g) {
  nt_OnednnConvGeom o;
  int rc = onednn_geom(g, &o) ? nt_onednn_conv_f32(0, &o, x, w, b, y) : 0;
  return rc ? (rc < 0 ? -1 : 0) : conv_fwd_float(x, w, b, y, g);
}
static int conv_bwd_f32(const float *gy, const float *x, const float *w, float *dx, float *dw, float *db, const cgeom *g) {
  nt_OnednnConvGeom o;
  if (!onednn_geom(g, &o)) return conv_bwd_float(gy, x, w, dx, dw, db, g);
  int rc;
  if (dx && (rc = nt_onednn_conv_f32(1, &o, gy, w, NULL, dx)) != 0) {
    if (rc < 0) return -1;
    dx = NULL;
  }
  /* db stays with the loop below (oneDNN's would split the batch over threads) */
  if (dw && (rc = nt_onednn_conv_f32(2, &o, x, gy, NULL, dw)) != 0) {
    if (rc < 0) return -1;
    dw = NULL;
  }
  return dx || dw || db ? conv_bwd_float(gy, x, w, dx, dw, db, g) : 0;
}

/* bf16 on the CPU (conv_any keeps bf16 operands bf16 when
** nt_onednn_conv_bf16_wanted): oneDNN's bf16 primitives, f32 accumulation
** inside, as torch's bf16 CPU convolutions; a geometry oneDNN does not take
** runs the f32 path above on widened copies.  db: f64 sums of the bf16 gy
** in n order, rounded once. */
static float *widen_bf16(const uint16_t *s, int64_t n, bool *ok) {
  if (!s) return NULL;
  float *d = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!d) { nt_error_oom(sizeof(float) * (size_t)n); *ok = false; return NULL; }
  for (int64_t i = 0; i < n; i++) d[i] = nt_bf16_to_f32(s[i]);
  return d;
}
static float *float_buf(const void *want, int64_t n, bool *ok) {   /* an f32 scratch for an output that is wanted */
  if (!want) return NULL;
  float *d = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!d) { nt_error_oom(sizeof(float) * (size_t)n); *ok = false; }
  return d;
}
static void narrow_bf16(uint16_t *d, const float *s, int64_t n) {
  if (d && s) for (int64_t i = 0; i < n; i++) d[i] = nt_f32_to_bf16(s[i]);
}
static int conv_fwd_bf16(const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y, const cgeom *g) {
  nt_OnednnConvGeom o;
  int rc = onednn_geom(g, &o) ? nt_onednn_conv_bf16(0, &o, x, w, b, true, y) : 0;
  if (rc) return rc < 0 ? -1 : 0;
  int64_t nx = g->N * g->C * g->H * g->W, nw = g->O * (g->C / ngroups(g)) * g->kh * g->kw, ny = g->N * g->O * g->Ho * g->Wo;
  bool ok = true;
  float *xf = widen_bf16(x, nx, &ok), *wf = widen_bf16(w, nw, &ok), *bf = widen_bf16(b, g->O, &ok), *yf = float_buf(y, ny, &ok);
  rc = ok ? conv_fwd_f32(xf, wf, bf, yf, g) : -1;
  if (!rc) narrow_bf16(y, yf, ny);
  free(xf); free(wf); free(bf); free(yf);
  return rc;
}
static int conv_bwd_bf16(const uint16_t *gy, const uint16_t *x, const uint16_t *w, uint16_t *dx, uint16_t *dw, uint16_t *db, const cgeom *g) {
  nt_OnednnConvGeom o;
  bool geo = onednn_geom(g, &o);
  int rc;
  if (dx && geo && (rc = nt_onednn_conv_bf16(1, &o, gy, w, NULL, false, dx)) != 0) {
    if (rc < 0) return -1;
    dx = NULL;
  }
  if (dw && geo && (rc = nt_onednn_conv_bf16(2, &o, x, gy, NULL, false, dw)) != 0) {
    if (rc < 0) return -1;
    dw = NULL;
  }
  int64_t L = g->Ho * g->Wo;
  for (int64_t c = 0; db && c < g->O; c++) {
    double s = 0;
    for (int64_t n = 0; n < g->N; n++)
      for (int64_t l = 0; l < L; l++) s += nt_bf16_to_f32(gy[(n * g->O + c) * L + l]);
    db[c] = nt_f32_to_bf16((float)s);
  }
  if (!dx && !dw) return 0;
  int64_t nx = g->N * g->C * g->H * g->W, nw = g->O * (g->C / ngroups(g)) * g->kh * g->kw, ny = g->N * g->O * L;
  bool ok = true;
  float *gyf = widen_bf16(gy, ny, &ok), *xf = widen_bf16(dw ? x : NULL, nx, &ok), *wf = widen_bf16(w, nw, &ok);
  float *dxf = float_buf(dx, nx, &ok), *dwf = float_buf(dw, nw, &ok);
  rc = ok ? conv_bwd_f32(gyf, xf, wf, dxf, dwf, NULL, g) : -1;
  if (!rc) { narrow_bf16(dx, dxf, nx); narrow_bf16(dw, dwf, nw); }
  free(gyf); free(xf); free(wf); free(dxf); free(dwf);
  return rc;
}

#define P(t) ((t) ? (void *)nt_base(t) : NULL)

/* fwd: out y; in = {x, w, bias|NULL}; extra = cgeom.
** bwd: out unused (NULL); in = {g, x|NULL (when dW is not wanted), w};
**      extra = struct {cgeom; nt_Tensor *d[3]} = {dx, dW, db}, each NULL when unwanted.
** conv_transpose is this pair turned around (see below): no kernels of its own. */
typedef struct conv_bwd_args { cgeom g; nt_Tensor *d[3]; } conv_bwd_args;

static int k_conv2d(const nt_KernelArgs *a) {
  bool f32 = a->in[0]->dtype == NT_F32;
  if (a->in[0]->dtype == NT_BF16) {
    if (a->op == nn_ops.conv2d) return conv_fwd_bf16(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(a->out), a->extra);
    const conv_bwd_args *b = a->extra;
    return conv_bwd_bf16(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(b->d[0]), P(b->d[1]), P(b->d[2]), &b->g);
  }
  if (a->op == nn_ops.conv2d) {
    const cgeom *g = a->extra;
    return f32 ? conv_fwd_f32(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(a->out), g)
               : conv_fwd_double(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(a->out), g);
  }
  const conv_bwd_args *b = a->extra;
  return f32 ? conv_bwd_f32(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(b->d[0]), P(b->d[1]), P(b->d[2]), &b->g)
             : conv_bwd_double(P(a->in[0]), P(a->in[1]), P(a->in[2]), P(b->d[0]), P(b->d[1]), P(b->d[2]), &b->g);
}

static void geom_to_iarg(const cgeom *g, int64_t *ia) { memcpy(ia, g, sizeof *g); }
static void iarg_to_geom(const int64_t *ia, cgeom *g) { memcpy(g, ia, sizeof *g); }
_Static_assert(sizeof(cgeom) <= sizeof(((nt_Node *)0)->iarg), "cgeom fits in node iarg");

/* the two kernels of a convolution with geometry g (x [N, C, H, W], w [O, C/G,
** kh, kw], y [N, O, Ho, Wo], all contiguous in one dtype):
**   conv_y:  y = conv(x, w) + b                      ("conv2d")
**   conv_bw: dx = conv^T(gy, w), dW = corr(gy, x), db ("conv2d_backward"; NULL = unwanted)
** A transposed convolution is conv_bw's dx (forward) and conv_y / conv_bw's
** dW (backward) of the convolution whose input it produces. */
static int conv_y(const cgeom *g, nt_Tensor *x, nt_Tensor *w, nt_Tensor *b, nt_Tensor *y) {
  if (!y->numel) return 0;
  nt_KernelArgs ka = {.op = nn_ops.conv2d, .out = y, .in = {x, w, b}, .nin = 3, .extra = (void *)g};
  return nt_dispatch(ka.op, y->device, &ka);
}
static int conv_bw(const cgeom *g, nt_Tensor *gy, nt_Tensor *x, nt_Tensor *w, nt_Tensor *dx, nt_Tensor *dw, nt_Tensor *db) {
  conv_bwd_args b = {.g = *g, .d = {dx, dw, db}};
  nt_KernelArgs ka = {.op = nn_ops.conv2d_bwd, .in = {gy, x, w}, .nin = 3, .extra = &b};
  int rc = nt_dispatch(ka.op, w->device, &ka);
  if (!rc) for (int i = 0; i < 3; i++) if (b.d[i]) nt_bump_version(b.d[i]);   /* written through extra */
  return rc;
}

static nt_Tensor *grad_in(nt_Tensor *gout, nt_DType dt) {
  nt_Tensor *gc = nt_to_dtype(gout, dt), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  return g;
}

static int conv_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *w = nd->in[1];
  cgeom g;
  iarg_to_geom(nd->iarg, &g);
  nt_Tensor *gy = grad_in(gout, x->dtype);
  if (!gy) return -1;
  nt_Tensor *d[3];
  d[0] = nt_node_needs(nd, 0) ? nt_empty(x->shape, 4, x->dtype, x->device) : NULL;
  d[1] = nt_node_needs(nd, 1) ? nt_empty(w->shape, 4, w->dtype, w->device) : NULL;
  d[2] = nd->in[2] && nt_node_needs(nd, 2) ? nt_empty(&g.O, 1, x->dtype, x->device) : NULL;
  int rc = (nt_node_needs(nd, 0) && !d[0]) || (nt_node_needs(nd, 1) && !d[1]) || (nd->in[2] && nt_node_needs(nd, 2) && !d[2]) ? -1 : 0;
  if (!rc) rc = conv_bw(&g, gy, x, w, d[0], d[1], d[2]);
  nt_release(gy);
  if (rc) { for (int i = 0; i < 3; i++) nt_release(d[i]); return -1; }
  for (int i = 0; i < 3; i++) gin[i] = d[i];
  return 0;
}

/* a transposed convolution: node in = {x [N, Cin, Hin, Win], w [Cin, Cout/G, kh, kw]};
** iarg = the geometry of the convolution it transposes (its x is our output) */
static int conv_transpose_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *w = nd->in[1];
  cgeom g;
  iarg_to_geom(nd->iarg, &g);
  nt_Tensor *gy = grad_in(gout, x->dtype);
  if (!gy) return -1;
  int rc = 0;
  if (nt_node_needs(nd, 0)) {   /* dx = conv(gy, w) */
    gin[0] = nt_empty(x->shape, 4, x->dtype, x->device);
    rc = gin[0] ? conv_y(&g, gy, w, NULL, gin[0]) : -1;
  }
  if (!rc && nt_node_needs(nd, 1)) {   /* dW = corr(x, gy): the convolution's weight gradient with x as its output gradient */
    gin[1] = nt_empty(w->shape, 4, w->dtype, w->device);
    rc = gin[1] ? conv_bw(&g, x, gy, w, NULL, gin[1], NULL) : -1;
  }
  nt_release(gy);
  if (rc) { nt_release(gin[0]); nt_release(gin[1]); gin[0] = gin[1] = NULL; return -1; }
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

#define CONV_MAX_PARAM (1 << 20)   /* strides, paddings, dilations: bounded so sizes cannot overflow */

/* Validates a convolution's arguments (x, w of `nsp` spatial dims, already
** viewed as 4-D) and fills g.  transposed: w is [Cin, Cout/G, k...] and g
** describes the convolution whose input our output is. */
static int conv_geom(const char *op, int nsp, bool transposed, const nt_Tensor *x, const nt_Tensor *w, const nt_Tensor *b,
                     const nt_ConvArgs *a, cgeom *g) {
  char s1[128], s2[128];
  int64_t G = a->groups;
  if (G < 1 || G > CONV_MAX_PARAM) NT_FAIL("%s: groups must be a positive integer, got %lld", op, (long long)G);
  for (int i = 0; i < nsp; i++) {
    if (a->stride[i] < 1 || a->stride[i] > CONV_MAX_PARAM) NT_FAIL("%s: stride must be positive, got %lld", op, (long long)a->stride[i]);
    if (a->dilation[i] < 1 || a->dilation[i] > CONV_MAX_PARAM) NT_FAIL("%s: dilation must be positive, got %lld", op, (long long)a->dilation[i]);
    if (!a->same && (a->padding[i] < 0 || a->padding[i] > CONV_MAX_PARAM)) NT_FAIL("%s: padding must be non-negative, got %lld", op, (long long)a->padding[i]);
    if (a->output_padding[i] < 0 || (a->output_padding[i] && !transposed)) NT_FAIL("%s: output_padding must be non-negative (and only for conv_transpose)", op);
    if (transposed && a->output_padding[i] >= a->stride[i] && a->output_padding[i] >= a->dilation[i])
      NT_FAIL("%s: output_padding (%lld) must be smaller than either stride (%lld) or dilation (%lld)", op, (long long)a->output_padding[i],
              (long long)a->stride[i], (long long)a->dilation[i]);
  }
  if (a->same && transposed) NT_FAIL("%s: padding='same' is not supported", op);
  if (a->same) for (int i = 0; i < nsp; i++) if (a->stride[i] != 1) NT_FAIL("%s: padding='same' is not supported for strided convolutions", op);
  int64_t N = x->shape[0], Cx = x->shape[1];
  int64_t Cin = transposed ? w->shape[0] : w->shape[1] * G, Cout = transposed ? w->shape[1] * G : w->shape[0];
  if (Cx != Cin || (!transposed && Cout % G) || (transposed && Cin % G))
    NT_FAIL("%s: expected input [N, C, %s] and weight %s with groups=%lld; got input %s and weight %s", op, nsp == 1 ? "L" : "H, W",
            transposed ? "[C, out_channels/groups, k...] (C divisible by groups)" : "[out_channels, C/groups, k...] (out_channels divisible by groups)",
            (long long)G, nt_shape_str(x->shape, x->ndim, s1, sizeof s1), nt_shape_str(w->shape, w->ndim, s2, sizeof s2));
  if (b && (b->ndim != 1 || b->shape[0] != Cout))
    NT_FAIL("%s: bias must have shape [%lld] (out_channels), got %s", op, (long long)Cout, nt_shape_str(b->shape, b->ndim, s1, sizeof s1));
  int64_t in[2] = {x->shape[2], x->shape[3]}, k[2] = {w->shape[2], w->shape[3]}, out[2], pad[2];
  for (int i = 0; i < 2; i++) {
    if (i == 0 && nsp == 1) { pad[0] = 0; out[0] = in[0]; continue; }   /* conv1d: the H axis is 1 */
    int ai = nsp == 1 ? 0 : i;   /* the argument's axis */
    int64_t s = a->stride[ai], d = a->dilation[ai], span = d * (k[i] - 1) + 1;
    if (k[i] < 1) NT_FAIL("%s: kernel size must be positive, got weight %s", op, nt_shape_str(w->shape, w->ndim, s1, sizeof s1));
    if (transposed) {
      pad[i] = a->padding[ai];
      out[i] = (in[i] - 1) * s - 2 * pad[i] + span + a->output_padding[ai];
      if (out[i] < 1) NT_FAIL("%s: the output size %lld is too small (input %lld, stride %lld, padding %lld, dilation %lld, kernel %lld)", op,
                              (long long)out[i], (long long)in[i], (long long)s, (long long)pad[i], (long long)d, (long long)k[i]);
    } else {
      int64_t total = a->same ? span - 1 : 2 * a->padding[ai];
      pad[i] = a->same ? total / 2 : a->padding[ai];   /* 'same' with an odd total: the extra one at the end, as torch */
      if (in[i] + total < span)
        NT_FAIL("%s: the (dilated) kernel size %lld is larger than the padded input %lld", op, (long long)span, (long long)(in[i] + total));
      out[i] = (in[i] + total - span) / s + 1;
    }
  }
  int64_t sh = nsp == 1 ? 1 : a->stride[0], sw = a->stride[nsp - 1], dh = nsp == 1 ? 1 : a->dilation[0], dw = a->dilation[nsp - 1];
  if (transposed)   /* the convolution of out [N, Cout, ...] into [N, Cin, in...] */
    *g = (cgeom){.N = N, .C = Cout, .H = out[0], .W = out[1], .O = Cin, .kh = k[0], .kw = k[1], .sh = sh, .sw = sw,
                 .ph = pad[0], .pw = pad[1], .Ho = in[0], .Wo = in[1], .dh = dh, .dw = dw, .G = G};
  else
    *g = (cgeom){.N = N, .C = Cin, .H = in[0], .W = in[1], .O = Cout, .kh = k[0], .kw = k[1], .sh = sh, .sw = sw,
                 .ph = pad[0], .pw = pad[1], .Ho = out[0], .Wo = out[1], .dh = dh, .dw = dw, .G = G};
  return 0;
}

/* x, w as 4-D: 1-D convolutions are 2-D ones with H = 1 (views, no copies) */
static nt_Tensor *as4d(nt_Tensor *t, int nsp) { return nsp == 1 ? nt_unsqueeze(t, 2) : nt_retain(t); }

static nt_Tensor *conv_any(const char *op, int nsp, bool transposed, nt_Tensor *x0, nt_Tensor *w0, nt_Tensor *b0, const nt_ConvArgs *a) {
  char s1[128], s2[128];
  if (x0->ndim != nsp + 2 || w0->ndim != nsp + 2)
    NT_FAIL_NULL("%s: expected input [N, C, %s] and a weight of %d dimensions; got %s and %s", op, nsp == 1 ? "L" : "H, W", nsp + 2,
                 nt_shape_str(x0->shape, x0->ndim, s1, sizeof s1), nt_shape_str(w0->shape, w0->ndim, s2, sizeof s2));
  if (nt_check_same_device(op, 3, (nt_Tensor *[]){x0, w0, b0 ? b0 : x0})) return NULL;
  NT_AUTOCAST(NT_AUTOCAST_LOW, conv_any(op, nsp, transposed, ac_[0], ac_[1], ac_[2], a), x0, w0, b0);
  /* bf16 on the CPU stays bf16 where oneDNN's bf16 convolutions win (see conv_fwd_bf16) */
  bool lowp = x0->device == NT_CPU && x0->dtype == NT_BF16 && w0->dtype == NT_BF16 && (!b0 || b0->dtype == NT_BF16) &&
              nt_onednn_conv_bf16_wanted();
  nt_Tensor *xf = lowp ? (nt_nn_init(), nt_retain(x0)) : nn_compute_float(op, x0);   /* (nn_compute_float inits the op ids) */
  if (!xf) return NULL;
  bool ok = true;
  nt_Tensor *x4 = as4d(xf, nsp), *w4 = as4d(w0, nsp);
  nt_release(xf);
  nt_Tensor *x = x4 ? prep(x4, x4->dtype, &ok) : NULL, *w = w4 ? prep(w4, x4->dtype, &ok) : NULL, *b = x4 ? prep(b0, x4->dtype, &ok) : NULL;
  nt_release(x4); nt_release(w4);
  nt_Tensor *y = NULL, *res = NULL;
  cgeom g;
  if (!ok || !x || !w || conv_geom(op, nsp, transposed, x, w, b, a, &g)) goto done;
  nt_Node *nd;
  if (!transposed) {
    y = nt_empty((int64_t[]){g.N, g.O, g.Ho, g.Wo}, 4, x->dtype, x->device);
    if (!y || conv_y(&g, x, w, b, y)) { nt_release(y); y = NULL; goto done; }
    y = nn_finish(y, nsp == 1 ? "Conv1dBackward" : "Conv2dBackward", conv_backward, 3, (nt_Tensor *[]){x, w, b}, &nd);
  } else {
    y = nt_empty((int64_t[]){g.N, g.C, g.H, g.W}, 4, x->dtype, x->device);
    if (!y || (y->numel && conv_bw(&g, x, NULL, w, y, NULL, NULL))) { nt_release(y); y = NULL; goto done; }
    y = nn_finish(y, nsp == 1 ? "ConvTranspose1dBackward" : "ConvTranspose2dBackward", conv_transpose_backward, 2, (nt_Tensor *[]){x, w}, &nd);
  }
  if (y && nd) { geom_to_iarg(&g, nd->iarg); nd->niarg = (int)(sizeof g / sizeof(int64_t)); }
  if (y && transposed && b) {   /* the bias: one broadcast add, differentiated by the add */
    nt_Tensor *bv = nt_reshape(b, (int64_t[]){1, b->shape[0], 1, 1}, 4), *yb = bv ? nt_add(y, bv) : NULL;
    nt_release(bv); nt_release(y);
    y = yb;
  }
  if (y) res = nsp == 1 ? nt_squeeze(y, 2) : nt_retain(y);
done:
  nt_release(y); nt_release(x); nt_release(w); nt_release(b);
  return nn_cast_back(res, x0->dtype);
}

nt_Tensor *nt_conv(nt_Tensor *x, nt_Tensor *w, nt_Tensor *b, const nt_ConvArgs *a) {
  int nsp = x->ndim == 3 ? 1 : 2;
  return conv_any(nsp == 1 ? "conv1d" : "conv2d", nsp, false, x, w, b, a);
}
nt_Tensor *nt_conv_transpose(nt_Tensor *x, nt_Tensor *w, nt_Tensor *b, const nt_ConvArgs *a) {
  int nsp = x->ndim == 3 ? 1 : 2;
  return conv_any(nsp == 1 ? "conv_transpose1d" : "conv_transpose2d", nsp, true, x, w, b, a);
}
nt_Tensor *nt_conv2d(nt_Tensor *x, nt_Tensor *w, nt_Tensor *b, int sh, int sw, int ph, int pw) {
  nt_ConvArgs a = {.stride = {sh, sw}, .padding = {ph, pw}, .dilation = {1, 1}, .groups = 1};
  if (x->ndim != 4) {
    char s[128];
    NT_FAIL_NULL("conv2d: expected input [N,C,H,W], weight [O,C,kh,kw] and bias [O]; got %s", nt_shape_str(x->shape, x->ndim, s, sizeof s));
  }
  return nt_conv(x, w, b, &a);
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
