/*
** treduce.c — reduction front ends and their backward functions.
** sum/prod/max/min/argmax/argmin/any/all are kernels; mean, var, std and
** logsumexp are compositions of public ops (so they work on every device that
** has the primitive kernels, and get their gradients for free).
*/
#include "tinternal.h"
#include "complex.h"
#include <stdlib.h>

/* reduced-axis mask from an axes list; -1 on error */
static int axes_mask(const char *op, const nt_Tensor *t, const int *axes, int naxes, bool *mask) {
  for (int i = 0; i < t->ndim; i++) mask[i] = !axes || naxes == 0;
  if (!axes || naxes == 0) return 0;
  for (int i = 0; i < naxes; i++) {
    int a = nt_norm_axis(op, axes[i], t->ndim);
    if (a < 0) return -1;
    if (mask[a]) NT_FAIL("%s: axis %d appears more than once", op, a);
    mask[a] = true;
  }
  return 0;
}

/* output shape: keepdims keeps size-1 axes */
static int out_shape(const nt_Tensor *t, const bool *mask, bool keep, int64_t *shape) {
  int nd = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (!mask[i]) shape[nd++] = t->shape[i];
    else if (keep) shape[nd++] = 1;
  }
  return nd;
}

/* g (shape of the output) back to a broadcastable keepdims shape; iarg holds
** the input ndim and mask */
static nt_Tensor *grad_keepdims(nt_Node *n, nt_Tensor *g) {
  nt_Tensor *x = n->in[0];
  int64_t shape[NT_MAXDIM];
  for (int i = 0; i < x->ndim; i++) shape[i] = n->iarg[i] ? 1 : x->shape[i];
  return nt_reshape(g, shape, x->ndim);
}

static int sum_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *gk = grad_keepdims(n, g);
  if (!gk) return -1;
  gin[0] = nt_expand(gk, n->in[0]->shape, n->in[0]->ndim);
  nt_release(gk);
  return gin[0] ? 0 : -1;
}

static int prod_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  /* d prod / d x_i = product of the other elements, safe with zeros: with
  ** p = product of the nonzero elements of the reduced block and z = its
  ** number of zeros,
  **   z == 0: p / x_i;   z == 1: p at the zero, 0 elsewhere;   z >= 2: 0. */
  nt_Tensor *x = n->in[0];
  int axes[NT_MAXDIM], na = 0;
  for (int i = 0; i < x->ndim; i++) if (n->iarg[i]) axes[na++] = i;
  nt_Tensor *zero = nt_scalar(0, x->dtype), *one = zero ? nt_scalar(1, x->dtype) : NULL;
  nt_Tensor *isz = one ? nt_eq(x, zero) : NULL, *xs = isz ? nt_where(isz, one, x) : NULL;
  nt_Tensor *zf = xs ? nt_to_dtype(isz, x->dtype) : NULL, *nz = zf ? nt_sum(zf, axes, na, true) : NULL;
  nt_Tensor *p = nz ? nt_prod(xs, axes, na, true) : NULL;
  nt_Tensor *nz0 = p ? nt_eq(nz, zero) : NULL, *nz1 = nz0 ? nt_eq(nz, one) : NULL;
  nt_Tensor *q = nz1 ? nt_div(p, xs) : NULL;
  nt_Tensor *dnz = q ? nt_where(nz0, q, zero) : NULL;      /* at the nonzero elements */
  nt_Tensor *dz = dnz ? nt_where(nz1, p, zero) : NULL;     /* at the zeros */
  nt_Tensor *d = dz ? nt_where(isz, dz, dnz) : NULL;
  nt_Tensor *gk = d ? grad_keepdims(n, g) : NULL;
  gin[0] = gk ? nt_mul(gk, d) : NULL;
  nt_release(zero); nt_release(one); nt_release(isz); nt_release(xs); nt_release(zf); nt_release(nz);
  nt_release(p); nt_release(nz0); nt_release(nz1); nt_release(q); nt_release(dnz); nt_release(dz);
  nt_release(d); nt_release(gk);
  return gin[0] ? 0 : -1;
}

static int maxmin_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  /* gradient split evenly among the elements equal to the extreme */
  nt_Tensor *x = n->in[0];
  int axes[NT_MAXDIM], na = 0;
  for (int i = 0; i < x->ndim; i++) if (n->iarg[i]) axes[na++] = i;
  nt_Tensor *gk = grad_keepdims(n, g), *ok = gk ? grad_keepdims(n, n->saved[0]) : NULL;
  nt_Tensor *eq = ok ? nt_eq(x, ok) : NULL, *m = eq ? nt_to_dtype(eq, g->dtype) : NULL;
  nt_Tensor *cnt = m ? nt_sum(m, axes, na, true) : NULL, *w = cnt ? nt_div(m, cnt) : NULL;
  gin[0] = w ? nt_mul(w, gk) : NULL;
  nt_release(gk); nt_release(ok); nt_release(eq); nt_release(m); nt_release(cnt); nt_release(w);
  return gin[0] ? 0 : -1;
}

/* primitive reductions (one kernel call) */
static nt_Tensor *reduce_prim(int op, nt_Tensor *t, const bool *mask, bool keepdims) {
  const char *name = nt_op_name(op);
  nt_DType in_dt = t->dtype, out_dt = t->dtype;
  switch (op) {
    case NT_OP_SUM: case NT_OP_PROD: if (!nt_dtype_is_float(in_dt)) in_dt = out_dt = NT_I64; break;
    case NT_OP_ARGMAX: case NT_OP_ARGMIN: out_dt = NT_I64; break;
    case NT_OP_ANY: case NT_OP_ALL: in_dt = out_dt = NT_BOOL; break;
    default: break;
  }
  int64_t oshape[NT_MAXDIM], R = 1;
  int ond = out_shape(t, mask, keepdims, oshape);
  /* view: kept axes first, reduced last */
  nt_Tensor *c = t;
  if (in_dt != t->dtype) {
    bool prev = nt_set_grad_enabled(false);
    c = nt_to_dtype(t, in_dt);
    nt_set_grad_enabled(prev);
    if (!c) return NULL;
  }
  bool all = true;
  for (int i = 0; i < t->ndim; i++) { if (mask[i]) R *= t->shape[i]; else all = false; }
  if ((op == NT_OP_ARGMAX || op == NT_OP_ARGMIN) && all && !(c->flags & NT_T_CONTIG)) {
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *cc = nt_contiguous(c);
    nt_set_grad_enabled(prev);
    if (c != t) nt_release(c);
    if (!(c = cc)) return NULL;
  }
  nt_Tensor v = *c;
  int k = 0, nr = 0;
  for (int i = 0; i < t->ndim; i++) if (!mask[i]) { v.shape[k] = c->shape[i]; v.strides[k++] = c->strides[i]; }
  for (int i = 0; i < t->ndim; i++) if (mask[i]) { v.shape[k] = c->shape[i]; v.strides[k++] = c->strides[i]; nr++; }
  nt_update_meta(&v);
  nt_Tensor *out = nt_empty(oshape, ond, out_dt, t->device);
  if (out && out->numel > 0 && R == 0 && (op == NT_OP_MAX || op == NT_OP_MIN || op == NT_OP_ARGMAX || op == NT_OP_ARGMIN)) {
    nt_release(out); out = NULL;
    nt_error_set("%s: cannot reduce over an empty axis", name);
  }
  if (out && out->numel > 0) {
    nt_KernelArgs a;
    a.op = op; a.out = out; a.in[0] = &v; a.nin = 1; a.iarg[0] = nr; a.niarg = 1;
    if (nt_dispatch(op, t->device, &a)) { nt_release(out); out = NULL; }
  }
  if (c != t) nt_release(c);
  if (!out) return NULL;
  if ((op == NT_OP_SUM || op == NT_OP_PROD || op == NT_OP_MAX || op == NT_OP_MIN) && nt_needs_grad(1, &t)) {
    nt_BackwardFn fn = op == NT_OP_SUM ? sum_backward : op == NT_OP_PROD ? prod_backward : maxmin_backward;
    const char *nm = op == NT_OP_SUM ? "SumBackward" : op == NT_OP_PROD ? "ProdBackward" : op == NT_OP_MAX ? "MaxBackward" : "MinBackward";
    nt_Node *n = nt_record(out, nm, fn, 1, &t);
    if (!n) { nt_release(out); return NULL; }
    for (int i = 0; i < t->ndim; i++) n->iarg[i] = mask[i];
    n->niarg = t->ndim;
    if (op == NT_OP_SUM) nt_node_unchecked(n, 0);   /* its backward reads only x's shape: no version check */
    if ((op == NT_OP_MAX || op == NT_OP_MIN) && nt_node_save(n, out) < 0) { nt_release(out); return NULL; }
  }
  return out;
}

nt_Tensor *nt_reduce_ex(int op, nt_Tensor *t, const int *axes, int naxes, bool keepdims, double s0) {
  if (!NT_OP_IS_REDUCE(op)) NT_FAIL_NULL("%s is not a reduction", nt_op_name(op));
  if (nt_dtype_is_complex(t->dtype)) return nt_complex_reduce(op, t, axes, naxes, keepdims);   /* sum, mean; others refused */
  if (op == NT_OP_SUM || op == NT_OP_MEAN || op == NT_OP_PROD || op == NT_OP_LOGSUMEXP || op == NT_OP_VAR || op == NT_OP_STD)
    NT_AUTOCAST(NT_AUTOCAST_F32, nt_reduce_ex(op, ac_[0], axes, naxes, keepdims, s0), t);
  const char *name = nt_op_name(op);
  bool mask[NT_MAXDIM];
  if ((op == NT_OP_ARGMAX || op == NT_OP_ARGMIN) && axes && naxes > 1)
    NT_FAIL_NULL("%s: expected one axis, got %d", name, naxes);
  if (axes_mask(name, t, axes, naxes, mask)) return NULL;
  int64_t N = 1;
  for (int i = 0; i < t->ndim; i++) if (mask[i]) N *= t->shape[i];
  switch (op) {
    case NT_OP_MEAN: case NT_OP_VAR: case NT_OP_STD: case NT_OP_LOGSUMEXP: break;
    default: return reduce_prim(op, t, mask, keepdims);
  }
  /* composites (floating) */
  nt_Tensor *x = t, *r = NULL;
  if (!nt_dtype_is_float(t->dtype) && !(x = nt_to_dtype(t, NT_DEFAULT_FLOAT))) return NULL;
  if (op == NT_OP_MEAN) {
    nt_Tensor *s = reduce_prim(NT_OP_SUM, x, mask, keepdims);
    r = s ? nt_binary_scalar_ex(NT_OP_DIV, s, (double)N, NT_SCALAR_FLOAT) : NULL;
    nt_release(s);
  } else if (op == NT_OP_VAR || op == NT_OP_STD) {
    /* two-pass: sum((x - mean)^2) / (N - correction) */
    nt_Tensor *s = reduce_prim(NT_OP_SUM, x, mask, true);
    nt_Tensor *m = s ? nt_binary_scalar_ex(NT_OP_DIV, s, (double)N, NT_SCALAR_FLOAT) : NULL;
    nt_Tensor *d = m ? nt_sub(x, m) : NULL, *d2 = d ? nt_mul(d, d) : NULL;
    nt_Tensor *ss = d2 ? reduce_prim(NT_OP_SUM, d2, mask, keepdims) : NULL;
    double den = (double)N - s0;
    r = ss ? nt_binary_scalar_ex(NT_OP_DIV, ss, den > 0 ? den : 0.0, NT_SCALAR_FLOAT) : NULL;
    if (r && op == NT_OP_STD) { nt_Tensor *q = nt_sqrt(r); nt_release(r); r = q; }
    nt_release(s); nt_release(m); nt_release(d); nt_release(d2); nt_release(ss);
  } else { /* logsumexp: m + log(sum(exp(x - m))), m = max (constant, inf → 0) */
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *mx = reduce_prim(NT_OP_MAX, x, mask, true);
    nt_Tensor *fin = mx ? nt_binary_scalar_ex(NT_OP_EQ, mx, INFINITY, 0) : NULL;
    nt_Tensor *fin2 = mx ? nt_binary_scalar_ex(NT_OP_EQ, mx, -INFINITY, 0) : NULL;
    nt_Tensor *inf = fin && fin2 ? nt_logical_or(fin, fin2) : NULL, *z = inf ? nt_zeros_like(mx) : NULL;
    nt_Tensor *m = z ? nt_where(inf, z, mx) : NULL;
    nt_set_grad_enabled(prev);
    nt_Tensor *d = m ? nt_sub(x, m) : NULL, *e = d ? nt_exp(d) : NULL;
    nt_Tensor *s = e ? reduce_prim(NT_OP_SUM, e, mask, true) : NULL, *l = s ? nt_log(s) : NULL;
    nt_Tensor *rk = l ? nt_add(l, m) : NULL;
    if (rk) {
      if (keepdims) r = nt_retain(rk);
      else { int64_t sh[NT_MAXDIM]; int nd = out_shape(t, mask, false, sh); r = nt_reshape(rk, sh, nd); }
    }
    nt_release(mx); nt_release(fin); nt_release(fin2); nt_release(inf); nt_release(z); nt_release(m);
    nt_release(d); nt_release(e); nt_release(s); nt_release(l); nt_release(rk);
  }
  if (x != t) nt_release(x);
  return r;
}

nt_Tensor *nt_reduce(int op, nt_Tensor *t, const int *axes, int naxes, bool keepdims) {
  return nt_reduce_ex(op, t, axes, naxes, keepdims, op == NT_OP_VAR || op == NT_OP_STD ? 1 : 0);
}

#define RED(name, OP) nt_Tensor *nt_##name(nt_Tensor *t, const int *axes, int naxes, bool keepdims) \
  { return nt_reduce_ex(OP, t, axes, naxes, keepdims, 0); }
RED(sum, NT_OP_SUM) RED(mean, NT_OP_MEAN) RED(prod, NT_OP_PROD) RED(max, NT_OP_MAX) RED(min, NT_OP_MIN)
RED(logsumexp, NT_OP_LOGSUMEXP) RED(any, NT_OP_ANY) RED(all, NT_OP_ALL)

nt_Tensor *nt_argmax(nt_Tensor *t, const int *axis, bool keepdims) { return nt_reduce_ex(NT_OP_ARGMAX, t, axis, axis ? 1 : 0, keepdims, 0); }
nt_Tensor *nt_argmin(nt_Tensor *t, const int *axis, bool keepdims) { return nt_reduce_ex(NT_OP_ARGMIN, t, axis, axis ? 1 : 0, keepdims, 0); }
nt_Tensor *nt_var(nt_Tensor *t, const int *axes, int naxes, int correction, bool keepdims) {
  return nt_reduce_ex(NT_OP_VAR, t, axes, naxes, keepdims, correction);
}
nt_Tensor *nt_std(nt_Tensor *t, const int *axes, int naxes, int correction, bool keepdims) {
  return nt_reduce_ex(NT_OP_STD, t, axes, naxes, keepdims, correction);
}
