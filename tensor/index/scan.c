/*
** index/scan.c — cumprod, logcumsumexp, cummax, cummin as an inclusive scan
** (Hillis–Steele) of differentiable public ops along the axis:
**
**   for s = 1, 2, 4, ... < n:   y[i] = combine(y[i - s], y[i])  for i >= s
**
** log2(n) rounds of one slice-combine-concat each, on any device, and the
** gradient is the ops' own (cumprod's through zeros too: it is a product of
** products, never a division).  combine is associative, so the result is
** the sequential scan up to rounding order.
**   cumprod:       combine = a * b
**   logcumsumexp:  combine = logaddexp(a, b) = m + log(exp(a - m) + exp(b - m)),
**                  m = max(a, b) detached (its gradient cancels), 0 where infinite
**   cummax/cummin: values = scan of maximum/minimum (NaN propagates, as torch);
**                  index i = the last j <= i where x[j] is a new extreme
**                  (x[j] == values[j], or x[j] is NaN), a scan of maximum over
**                  where(record, j, -1); values are then gather(x, idx), so
**                  their gradient goes to the chosen element as torch's does.
*/
#include "ixinternal.h"
#include <math.h>

typedef nt_Tensor *(*Combine)(nt_Tensor *early, nt_Tensor *late);   /* borrowed; new reference */

static nt_Tensor *scan(nt_Tensor *x, int ax, Combine f) {
  int64_t n = x->shape[ax];
  nt_Tensor *y = nt_retain(x);
  for (int64_t s = 1; y && s < n; s *= 2) {
    if (nt_interrupt_requested()) { nt_release(y); NT_FAIL_NULL("interrupted"); }
    nt_Tensor *early = nt_slice(y, ax, 0, n - s, 1), *late = nt_slice(y, ax, s, n, 1);
    nt_Tensor *c = early && late ? f(early, late) : NULL;
    nt_release(early); nt_release(late);
    y = X_cat2(X_slice(y, ax, 0, s), c, ax);
  }
  return y;
}

/* the axis (0-d: 0), or -1 */
static int scan_axis(const char *op, nt_Tensor *x, int axis) {
  if (x->ndim == 0) return axis == 0 || axis == -1 ? 0 : nt_norm_axis(op, axis, 1);
  return nt_norm_axis(op, axis, x->ndim);
}

/* the scan of x (a 0-d x as 1-D, shaped back after) */
static nt_Tensor *as_1d(nt_Tensor *x, int ax, Combine f) {
  nt_Tensor *x1 = x->ndim ? nt_retain(x) : nt_reshape(x, (int64_t[]){ 1 }, 1);
  nt_Tensor *r = x1 ? scan(x1, ax, f) : NULL;
  nt_release(x1);
  if (r && x->ndim == 0) { nt_Tensor *t = nt_reshape(r, NULL, 0); nt_release(r); r = t; }
  return r;
}

static nt_Tensor *comb_mul(nt_Tensor *a, nt_Tensor *b) { return nt_mul(a, b); }

nt_Tensor *nt_cumprod(nt_Tensor *x, int axis) {
  int ax = scan_axis("cumprod", x, axis);
  if (ax < 0) return NULL;
  /* torch: integer and bool inputs accumulate in i64 */
  nt_Tensor *xc = nt_dtype_is_float(x->dtype) ? nt_retain(x) : nt_to_dtype(x, NT_I64);
  if (!xc) return NULL;
  nt_Tensor *r = as_1d(xc, ax, comb_mul);
  nt_release(xc);
  return r;
}

static nt_Tensor *comb_logaddexp(nt_Tensor *a, nt_Tensor *b) {
  nt_Tensor *m = X_detach(nt_maximum(a, b));
  nt_Tensor *inf = m ? X_bs(NT_OP_EQ, nt_abs(m), INFINITY) : NULL;
  nt_Tensor *ms = X_where(inf, m ? ix_const_like(m, 0) : NULL, nt_retain(m));   /* m, 0 where infinite */
  nt_release(m);
  if (!ms) return NULL;
  nt_Tensor *s = X_add(X_un(NT_OP_EXP, nt_sub(a, ms)), X_un(NT_OP_EXP, nt_sub(b, ms)));
  nt_Tensor *r = X_add(X_un(NT_OP_LOG, s), nt_retain(ms));
  nt_release(ms);
  return r;
}

nt_Tensor *nt_logcumsumexp(nt_Tensor *x, int axis) {
  int ax = scan_axis("logcumsumexp", x, axis);
  if (ax < 0) return NULL;
  if (!nt_dtype_is_float(x->dtype)) NT_FAIL_NULL("logcumsumexp: the input must be a floating tensor, got %s", nt_dtype_name(x->dtype));
  return as_1d(x, ax, comb_logaddexp);
}

static nt_Tensor *comb_max(nt_Tensor *a, nt_Tensor *b) { return nt_maximum(a, b); }
static nt_Tensor *comb_min(nt_Tensor *a, nt_Tensor *b) { return nt_minimum(a, b); }

static int cumext(const char *op, nt_Tensor *x0, int axis, bool is_max, nt_Tensor **values, nt_Tensor **indices) {
  *values = *indices = NULL;
  int ax = scan_axis(op, x0, axis);
  if (ax < 0) return -1;
  if (x0->dtype == NT_BOOL) NT_FAIL("%s: bool tensors are not supported", op);
  nt_Tensor *x = x0->ndim ? nt_retain(x0) : nt_reshape(x0, (int64_t[]){ 1 }, 1);
  if (!x) return -1;
  nt_Tensor *v = NULL, *idx = NULL;
  {   /* the running extreme, with grad off: the values come from gather below */
    bool g = nt_set_grad_enabled(false);
    v = scan(x, ax, is_max ? comb_max : comb_min);
    nt_Tensor *rec = v ? X_bin(NT_OP_LOGICAL_OR, nt_eq(x, v), nt_ne(x, x)) : NULL;   /* a new extreme, or NaN */
    int64_t n = x->shape[ax];
    nt_Tensor *pos = nt_arange_on(0, (double)n, 1, NT_I64, x->device);
    if (pos && x->ndim > 1) {   /* shape [n, 1, ..., 1] after the axis */
      int64_t sh[NT_MAXDIM];
      for (int d = 0; d < x->ndim - ax; d++) sh[d] = d ? 1 : n;
      nt_Tensor *p = nt_reshape(pos, sh, x->ndim - ax);
      nt_release(pos); pos = p;
    }
    nt_Tensor *neg = pos ? nt_full(NULL, 0, -1, NT_I64, x->device) : NULL;
    nt_Tensor *cand = X_where(rec, pos, neg);
    idx = cand ? scan(cand, ax, comb_max) : NULL;
    nt_release(cand);
    nt_set_grad_enabled(g);
  }
  nt_release(v);
  v = idx ? nt_gather(x, ax, idx) : NULL;
  nt_release(x);
  if (!v) { nt_release(idx); return -1; }
  if (x0->ndim == 0) {
    nt_Tensor *a = nt_reshape(v, NULL, 0), *b = nt_reshape(idx, NULL, 0);
    nt_release(v); nt_release(idx); v = a; idx = b;
    if (!v || !idx) { nt_release(v); nt_release(idx); return -1; }
  }
  *values = v; *indices = idx;
  return 0;
}

int nt_cummax(nt_Tensor *x, int axis, nt_Tensor **values, nt_Tensor **indices) { return cumext("cummax", x, axis, true, values, indices); }
int nt_cummin(nt_Tensor *x, int axis, nt_Tensor **values, nt_Tensor **indices) { return cumext("cummin", x, axis, false, values, indices); }
