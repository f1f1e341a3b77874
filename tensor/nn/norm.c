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
** add_layer_norm (below): the residual add fused in, any float storage.
*/
#include "nninternal.h"
#include "tensor/tdtype.h"
#include <stdlib.h>

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

/* ---- add_layer_norm: the fused residual add + layer norm -------------------------
** s = x + r (the residual stream) and y = layer_norm(s; w, b, eps), both of
** x's shape in the sum's dtype S (bf16 in, bf16 out: no f32 copies); the
** statistics st [R, 2] = {mean, rstd} over the last axis (size D, R rows),
** the weight and the bias are of the accumulation type A (f64 for f64, else
** f32).  r may be f16/bf16 next to an f32 x (autocast's residual: S = f32);
** other mixes are cast to S first.  The normalisation reads s as stored
** (rounded to S), as the backward does.
** Autograd: s is recorded as an add (AddLayerNormSumBackward: g to x and r),
** y as the layer norm of s (AddLayerNormBackward, in {s, w, b}).  The
** latter's backward is one row kernel writing ds = LN'(g) plus the gradient s
** already received from its other consumers — the residual branch, taken from
** its producer's accumulator when the engine holds one there (the sum is
** order-independent, so taking it early changes nothing but the pass it
** saves) — and dw/db as per-chunk partial column sums in A and one second
** pass (deterministic, no atomics).
**
** Without r (layer_norm with an output dtype, aln_front) s is x: the same
** kernels, one node (LayerNormBackward, in {x, w, b}).  y may be stored in
** a half dtype next to an f32 s (autocast), g read as it comes in y's dtype.
**
** fwd: out y; in = {x, r|NULL, w|NULL, b|NULL}; s[0] eps; iarg = {R, D};
**      extra = nt_Tensor *[2] {s|NULL (no r), st} (written).
** bwd: out ds|NULL; in = {g, s, st, w|NULL}; iarg = {R, D};
**      extra = nt_Tensor *[4] {dw|NULL, db|NULL, res|NULL, dr|NULL}: dr, ds
**      again in r's half dtype (next to an f32 s), is r's gradient when ds
**      turns out to be s's whole gradient (nt_node_offer_half_grad, textend.h). */

/* row r ([R, D] view of t) as doubles / from doubles, any float dtype */
static void aln_load(const nt_Tensor *t, int64_t r, int64_t D, double *o) {
  const char *p = (const char *)nt_base(t) + (size_t)(r * D) * nt_dtype_size(t->dtype);
  switch (t->dtype) {
    case NT_F32: for (int64_t d = 0; d < D; d++) o[d] = ((const float *)p)[d]; break;
    case NT_F64: for (int64_t d = 0; d < D; d++) o[d] = ((const double *)p)[d]; break;
    case NT_F16: for (int64_t d = 0; d < D; d++) o[d] = nt_f16_to_f32(((const uint16_t *)p)[d]); break;
    default: for (int64_t d = 0; d < D; d++) o[d] = nt_bf16_to_f32(((const uint16_t *)p)[d]); break;
  }
}
static void aln_store(nt_Tensor *t, int64_t r, int64_t D, const double *v) {
  char *p = (char *)nt_base(t) + (size_t)(r * D) * nt_dtype_size(t->dtype);
  switch (t->dtype) {
    case NT_F32: for (int64_t d = 0; d < D; d++) ((float *)p)[d] = (float)v[d]; break;
    case NT_F64: for (int64_t d = 0; d < D; d++) ((double *)p)[d] = v[d]; break;
    case NT_F16: for (int64_t d = 0; d < D; d++) ((uint16_t *)p)[d] = nt_f32_to_f16((float)v[d]); break;
    default: for (int64_t d = 0; d < D; d++) ((uint16_t *)p)[d] = nt_f32_to_bf16((float)v[d]); break;
  }
}
static double aln_st(const nt_Tensor *st, int64_t i) {
  return st->dtype == NT_F64 ? ((const double *)nt_base(st))[i] : ((const float *)nt_base(st))[i];
}

static int k_add_layer_norm(const nt_KernelArgs *a) {
  int64_t R = a->iarg[0], D = a->iarg[1];
  int err = 0;
  if (a->op == nn_ops.add_layer_norm) {
    nt_Tensor **so = a->extra, *sum = so[0], *st = so[1];
    const nt_Tensor *w = a->in[2], *b = a->in[3];
    _Pragma("omp parallel if (R * D > NT_OMP_THRESHOLD)")
    {
      double *v = malloc((size_t)D * 4 * sizeof(double)), *u = v + D, *wv = v + 2 * D, *bv = v + 3 * D;
      if (!v) {
        _Pragma("omp atomic write")
        err = 1;
      } else {
        if (w) aln_load(w, 0, D, wv);
        if (b) aln_load(b, 0, D, bv);
      }
      _Pragma("omp for")
      for (int64_t r = 0; r < R; r++) {
        if (!v) continue;
        aln_load(a->in[0], r, D, v);
        if (a->in[1]) {   /* no r (layer_norm with an output dtype): s is x */
          aln_load(a->in[1], r, D, u);
          for (int64_t d = 0; d < D; d++) v[d] += u[d];
          aln_store(sum, r, D, v);
          aln_load(sum, r, D, v);   /* as stored: what the backward reads */
        }
        double m = 0, q = 0;
        for (int64_t d = 0; d < D; d++) m += v[d];
        m /= (double)D;
        for (int64_t d = 0; d < D; d++) q += (v[d] - m) * (v[d] - m);
        double rs = 1.0 / sqrt(q / (double)D + a->s[0]);
        if (st->dtype == NT_F64) { ((double *)nt_base(st))[2 * r] = m; ((double *)nt_base(st))[2 * r + 1] = rs; }
        else { ((float *)nt_base(st))[2 * r] = (float)m; ((float *)nt_base(st))[2 * r + 1] = (float)rs; }
        for (int64_t d = 0; d < D; d++) u[d] = (v[d] - m) * rs * (w ? wv[d] : 1) + (b ? bv[d] : 0);
        aln_store(a->out, r, D, u);
      }
      free(v);
    }
    if (err) NT_FAIL("add_layer_norm: out of memory");
    return 0;
  }
  nt_Tensor **ex = a->extra, *dw = ex[0], *db = ex[1], *res = ex[2], *dr = ex[3];
  const nt_Tensor *g = a->in[0], *sum = a->in[1], *st = a->in[2], *w = a->in[3];
  if (a->out) {
    _Pragma("omp parallel if (R * D > NT_OMP_THRESHOLD)")
    {
      double *gv = malloc((size_t)D * 4 * sizeof(double)), *sv = gv + D, *wv = gv + 2 * D, *rv = gv + 3 * D;
      if (!gv) {
        _Pragma("omp atomic write")
        err = 1;
      } else if (w) aln_load(w, 0, D, wv);
      _Pragma("omp for")
      for (int64_t r = 0; r < R; r++) {
        if (!gv) continue;
        aln_load(g, r, D, gv);
        aln_load(sum, r, D, sv);
        double m = aln_st(st, 2 * r), rs = aln_st(st, 2 * r + 1), a1 = 0, a2 = 0;
        for (int64_t d = 0; d < D; d++) {
          double dh = w ? gv[d] * wv[d] : gv[d];
          sv[d] = (sv[d] - m) * rs;   /* xhat */
          gv[d] = dh;
          a1 += dh; a2 += dh * sv[d];
        }
        a1 /= (double)D; a2 /= (double)D;
        if (res) aln_load(res, r, D, rv);
        for (int64_t d = 0; d < D; d++) gv[d] = rs * (gv[d] - a1 - sv[d] * a2) + (res ? rv[d] : 0);
        aln_store(a->out, r, D, gv);
        if (dr) aln_store(dr, r, D, gv);
      }
      free(gv);
    }
  }
  if ((dw || db) && !err) {
    /* chunks of rows in parallel, each summing its rows in order; then the
    ** chunks in order: deterministic for a given thread count's chunking */
    int64_t per = R / 64 > 256 ? R / 64 : 256, nch = (R + per - 1) / per;
    double *part = calloc((size_t)(nch ? nch : 1) * 2 * D, sizeof(double));
    if (!part) NT_FAIL("add_layer_norm backward: out of memory");
    _Pragma("omp parallel if (R * D > NT_OMP_THRESHOLD)")
    {
      double *gv = malloc((size_t)D * 2 * sizeof(double)), *sv = gv + D;
      if (!gv) {
        _Pragma("omp atomic write")
        err = 1;
      }
      _Pragma("omp for")
      for (int64_t c = 0; c < nch; c++) {
        if (!gv) continue;
        double *pw = part + c * 2 * D, *pb = pw + D;
        for (int64_t r = c * per; r < R && r < (c + 1) * per; r++) {
          aln_load(g, r, D, gv);
          aln_load(sum, r, D, sv);
          double m = aln_st(st, 2 * r), rs = aln_st(st, 2 * r + 1);
          for (int64_t d = 0; d < D; d++) { pw[d] += gv[d] * (sv[d] - m) * rs; pb[d] += gv[d]; }
        }
      }
      free(gv);
    }
    for (int64_t c = 1; c < nch; c++)
      for (int64_t d = 0; d < 2 * D; d++) part[d] += part[c * 2 * D + d];
    if (dw) aln_store(dw, 0, D, part);
    if (db) aln_store(db, 0, D, part + D);
    free(part);
  }
  if (err) NT_FAIL("add_layer_norm backward: out of memory");
  return 0;
}

/* s = x + r: the gradient goes to both, in each one's dtype */
static int aln_sum_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  int rc = 0;
  for (int k = 0; k < 2 && !rc; k++) {
    if (!nt_node_needs(nd, k)) continue;
    /* r's half gradient, when the norm's backward wrote it with ds (aln_backward) */
    if ((gin[k] = nt_node_take_half_grad(nd, gout, nd->in[k]->dtype))) continue;
    if (!(gin[k] = nt_to_dtype(gout, nd->in[k]->dtype))) { if (k) { nt_release(gin[0]); gin[0] = NULL; } rc = -1; }
  }
  nt_node_drop_half_grad(nd);
  return rc;
}

/* y = layer_norm(s): node in = {s, w, b}; saved[0] = st; iarg = {R, D} */
static int aln_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *s = nd->in[0], *w = nd->in[1], *st = nd->saved[0];
  int64_t D = nd->iarg[1];
  /* g as it comes when it is y's dtype (bf16 y of an f32 s: read as stored) */
  nt_Tensor *gc = nt_to_dtype(gout, gout->dtype == (nt_DType)nd->iarg[2] ? gout->dtype : s->dtype), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  if (!g) return -1;
  /* the residual gradient s already holds (the engine's accumulator of the
  ** node that made s: the fused add, or for a plain norm the previous
  ** block's residual add): added in the same kernel, and taken from there.
  ** A node has one output, so its accumulator is s's gradient so far; the
  ** engine adds ds to what is left there (nothing), the same sum. */
  nt_Tensor *res = NULL;
  nt_Node *fn = nd->edge[0].fn;
  if (nt_node_needs(nd, 0) && fn && fn->gacc && fn->gacc->dtype == s->dtype &&
      fn->gacc->device == s->device && (fn->gacc->flags & NT_T_CONTIG) && fn->gacc->ndim == s->ndim &&
      !memcmp(fn->gacc->shape, s->shape, (size_t)s->ndim * sizeof(int64_t))) {
    res = fn->gacc;
    if (nt_dev_check(res, "add_layer_norm_backward")) { nt_release(g); return -1; }
  }
  nt_Tensor *ds = nt_node_needs(nd, 0) ? nt_empty(s->shape, s->ndim, s->dtype, s->device) : NULL;
  /* s = x + r (the fused sum, or the previous block's residual add) with a half r
  ** next to an f32 s: r's gradient in r's dtype from the same kernel, offered to
  ** that node (nt_node_offer_half_grad: taken only when ds is s's whole gradient) */
  nt_Tensor *dr = NULL;
  int hk = -1;
  for (int k = 0; ds && fn && (fn->flags & NT_NODE_SUM) && s->dtype == NT_F32 && k < 2; k++)
    if (nt_node_needs(fn, k) && (fn->in[k]->dtype == NT_BF16 || fn->in[k]->dtype == NT_F16)) hk = k;
  if (hk >= 0 && !(dr = nt_empty(s->shape, s->ndim, fn->in[hk]->dtype, s->device))) { nt_release(g); nt_release(ds); return -1; }
  nt_Tensor *ex[4] = {nt_node_needs(nd, 1) ? nt_empty(&D, 1, st->dtype, s->device) : NULL,
                      nt_node_needs(nd, 2) ? nt_empty(&D, 1, st->dtype, s->device) : NULL, res, dr};
  nt_KernelArgs ka = {.op = nn_ops.add_layer_norm_bwd, .out = ds, .in = {g, s, st, w}, .nin = 4,
                      .iarg = {nd->iarg[0], D}, .niarg = 2, .extra = ex};
  int rc = (nt_node_needs(nd, 0) && !ds) || (nt_node_needs(nd, 1) && !ex[0]) || (nt_node_needs(nd, 2) && !ex[1]) ? -1 : 0;
  if (!rc && s->numel) rc = nt_dispatch(ka.op, s->device, &ka);
  else if (!rc) {
    if (ex[0]) rc = nt_fill_(ex[0], 0);
    if (!rc && ex[1]) rc = nt_fill_(ex[1], 0);
    if (!rc && ds && res) rc = nt_copy_(ds, res);
    if (!rc && dr && res) rc = nt_copy_(dr, res);
  }
  nt_release(g);
  if (rc) { nt_release(ds); nt_release(dr); nt_release(ex[0]); nt_release(ex[1]); return -1; }
  if (res) { fn->gacc = NULL; nt_release(res); }   /* now part of ds */
  if (dr) nt_node_offer_half_grad(fn, ds, dr);
  gin[0] = ds; gin[1] = ex[0]; gin[2] = ex[1];
  return 0;
}

/* The front end of add_layer_norm and of layer_norm with an output dtype:
** r0 NULL is a plain layer norm of x (s is x; no sum node).  ydt < 0: y in
** the sum's dtype S; else y is written in ydt by the kernel where it takes
** that pair (ydt == S, or a half y of an f32 sum: under autocast the next
** linear's input, so no cast sits between them; llm.c's bf16 layer norm),
** other pairs are computed in S and cast. */
static int aln_front(const char *op, nt_Tensor *x0, nt_Tensor *r0, nt_Tensor *weight, nt_Tensor *bias, double eps, int ydt,
                     nt_Tensor **sum_out, nt_Tensor **normed_out) {
  char sa[128], sb[128];
  nt_nn_init();
  *normed_out = NULL;
  if (sum_out) *sum_out = NULL;
  if (nt_check_same_device(op, 4, (nt_Tensor *[]){x0, r0 ? r0 : x0, weight ? weight : x0, bias ? bias : x0})) return -1;
  if (nt_check_float(op, x0) || (r0 && nt_check_float(op, r0)) || (weight && nt_check_float(op, weight)) ||
      (bias && nt_check_float(op, bias)))
    return -1;
  if (ydt >= 0 && !nt_dtype_is_float((nt_DType)ydt)) NT_FAIL("%s: output dtype must be a float dtype, got %s", op, nt_dtype_name((nt_DType)ydt));
  if (x0->ndim < 1) NT_FAIL("%s: input must have at least 1 dimension", op);
  if (r0 && (x0->ndim != r0->ndim || memcmp(x0->shape, r0->shape, (size_t)x0->ndim * sizeof(int64_t))))
    NT_FAIL("%s: x and r must have the same shape (at least 1 dimension), got %s and %s", op,
            nt_shape_str(x0->shape, x0->ndim, sa, sizeof sa), nt_shape_str(r0->shape, r0->ndim, sb, sizeof sb));
  int64_t D = x0->shape[x0->ndim - 1], R = D ? x0->numel / D : nt_shape_numel(x0->shape, x0->ndim - 1);
  nt_DType S = r0 ? nt_promote(x0->dtype, r0->dtype) : x0->dtype, A = S == NT_F64 ? NT_F64 : NT_F32;
  bool r_half = r0 && (r0->dtype == NT_F16 || r0->dtype == NT_BF16);
  bool y_half = ydt == NT_F16 || ydt == NT_BF16;
  /* the pairs the kernels write directly (CUDA's instantiations; the CPU takes any) */
  nt_DType Y = ydt < 0 || ((nt_DType)ydt != S && !(S == NT_F32 && y_half && (!r_half || r0->dtype == (nt_DType)ydt)))
                 ? S : (nt_DType)ydt;
  /* x in S; r in S, or half next to an f32 sum (read as it is) */
  nt_Tensor *xc = nt_to_dtype(x0, S), *rc_ = xc && r0 ? nt_to_dtype(r0, S == NT_F32 && r_half ? r0->dtype : S) : NULL;
  nt_Tensor *x = xc ? nt_contiguous(xc) : NULL, *r = rc_ ? nt_contiguous(rc_) : NULL;
  nt_release(xc); nt_release(rc_);
  bool ok = x && (r || !r0);
  nt_Tensor *w = ok ? ln_param("weight", weight, D, A, &ok) : NULL, *b = ok ? ln_param("bias", bias, D, A, &ok) : NULL;
  nt_Tensor *s = NULL, *y = NULL, *st = NULL;
  int rc = -1;
  if (!ok) goto done;
  int64_t sts[2] = {R, 2};
  s = r ? nt_empty(x->shape, x->ndim, S, x->device) : nt_retain(x);
  y = nt_empty(x->shape, x->ndim, Y, x->device);
  st = nt_empty(sts, 2, A, x->device);
  if (!s || !y || !st) goto done;
  nt_Tensor *outs[2] = {r ? s : NULL, st};
  nt_KernelArgs ka = {.op = nn_ops.add_layer_norm, .out = y, .in = {x, r, w, b}, .nin = 4, .s = {eps},
                      .iarg = {R, D}, .niarg = 2, .extra = outs};
  if (x->numel && nt_dispatch(ka.op, x->device, &ka)) goto done;
  nt_Node *nd;
  nt_Node *snd = NULL;
  if (r && !(s = nn_finish(s, "AddLayerNormSumBackward", aln_sum_backward, 2, (nt_Tensor *[]){x, r}, &snd))) goto done;
  if (snd) snd->flags |= NT_NODE_SUM;
  if (!(y = nn_finish(y, r ? "AddLayerNormBackward" : "LayerNormBackward", aln_backward, 3, (nt_Tensor *[]){s, w, b}, &nd)))
    goto done;
  if (nd) {
    nd->iarg[0] = R; nd->iarg[1] = D; nd->iarg[2] = Y; nd->niarg = 3;
    if (nt_node_save(nd, st) < 0) goto done;
  }
  if (ydt >= 0 && Y != (nt_DType)ydt) {   /* a pair no kernel writes: computed in S, cast */
    nt_Tensor *yc = nt_to_dtype(y, (nt_DType)ydt);
    nt_release(y);
    if (!(y = yc)) goto done;
  }
  if (sum_out) { *sum_out = s; s = NULL; }
  *normed_out = y;
  y = NULL;
  rc = 0;
done:
  nt_release(x); nt_release(r); nt_release(w); nt_release(b); nt_release(s); nt_release(y); nt_release(st);
  return rc;
}

int nt_add_layer_norm(nt_Tensor *x0, nt_Tensor *r0, nt_Tensor *weight, nt_Tensor *bias, double eps, nt_Tensor **sum_out,
                      nt_Tensor **normed_out) {
  return nt_add_layer_norm_to(x0, r0, weight, bias, eps, -1, sum_out, normed_out);
}
int nt_add_layer_norm_to(nt_Tensor *x0, nt_Tensor *r0, nt_Tensor *weight, nt_Tensor *bias, double eps, int ydt,
                         nt_Tensor **sum_out, nt_Tensor **normed_out) {
  if (!r0) { *sum_out = *normed_out = NULL; NT_FAIL("add_layer_norm: r is required"); }
  return aln_front("add_layer_norm", x0, r0, weight, bias, eps, ydt, sum_out, normed_out);
}
nt_Tensor *nt_layer_norm_to(nt_Tensor *x, nt_Tensor *weight, nt_Tensor *bias, double eps, int ydt) {
  if (ydt < 0) return nt_layer_norm(x, weight, bias, eps);
  nt_Tensor *y;
  return aln_front("layer_norm", x, NULL, weight, bias, eps, ydt, NULL, &y) ? NULL : y;
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
  nn_ops.add_layer_norm = nt_op_register("add_layer_norm");
  nn_ops.add_layer_norm_bwd = nt_op_register("add_layer_norm_backward");
  nt_register_kernel(nn_ops.add_layer_norm, NT_CPU, k_add_layer_norm);
  nt_register_kernel(nn_ops.add_layer_norm_bwd, NT_CPU, k_add_layer_norm);
}
