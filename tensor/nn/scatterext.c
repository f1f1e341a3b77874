/*
** scatterext.c — torch's scatter_reduce with "amax", "amin" and "prod"
** (resample.c's nt_scatter_reduce hands them here), composed from the
** core's ops so that every device runs them.
**
** Each src element e lands at the flat position pos(e) of x (its own
** coordinates with index[e] along dim), built on the host from the
** validated, wrapped index.
**   amax:  the src values are sorted ascending (stable; NaN sorts last, so a
**          NaN wins as in torch) and written in that order into a copy of x
**          at their positions: the write's "last value wins" (every device)
**          leaves each position's largest src value; include_self then takes
**          the elementwise maximum with x.  amin is -amax(-x, -src).
**   prod:  through log-magnitudes in f64: |p| = exp(sum log|v|) over the
**          nonzero members, the sign from the count of negatives, 0 where a
**          member is 0 (0 * inf stays NaN).  Positions no index names keep x
**          exactly; a reduced position is within a few f64 ulp of the
**          sequential product (exact after rounding to f32 but for ties).
** On the CPU the values come from one direct pass in index order instead
** (cpu_reduce: torch's sequential product, exactly; the composition above
** stays the device path and the gradient's).
** Gradients (torch's formulas), as coefficients computed in the forward:
**   dx = g * cx,  dsrc = gather(g, dim, index) * cs, where
**   amax/amin: a member equal to the result gets 1/count of the members equal
**          to it (x counted with include_self), the others 0;
**   prod:  a nonzero member v gets r / v, a lone zero the product of the
**          other members, a zero among several 0;
**   and a position no index names passes g to x whole; with
**   include_self=false a named position's x gets 0.
*/
#include <math.h>
#include <stdlib.h>
#include "nninternal.h"
#include "layers.h"

#define MAX_INDEX ((int64_t)1 << 28)   /* bound on the host copy of the index (elements) */

enum { SR_AMAX, SR_AMIN, SR_PROD };

/* a 1-D i64 tensor on dev from host values (takes v) */
static nt_Tensor *index_on_device(int64_t *v, int64_t n, nt_Device dev) {
  nt_Tensor *c = nt_from_buffer(v, NT_I64, (int64_t[]){n}, 1, NT_I64);
  free(v);
  if (!c || dev == NT_CPU) return c;
  nt_Tensor *d = nt_to_device(c, dev);
  nt_release(c);
  return d;
}

/* the temporaries of one call, released together */
typedef struct { nt_Tensor *t[64]; int n; } Pool;
static nt_Tensor *keep(Pool *p, nt_Tensor *t) {
  if (!t) return NULL;
  if (p->n == 64) { nt_release(t); nt_error_set("scatter_reduce: internal temporaries exhausted"); return NULL; }
  return p->t[p->n++] = t;
}
static void drop(Pool *p) { while (p->n) nt_release(p->t[--p->n]); }
#define LET(var, expr) nt_Tensor *var = keep(&P, (expr)); if (!var) goto done

/* flat positions in x (contiguous) of index's elements: host i64 [m] (malloc'd), or NULL with the error set */
static int64_t *flat_positions(const char *op, nt_Tensor *x, int ax, nt_Tensor *index) {
  char s1[128], s2[128];
  bool ok = index->ndim == x->ndim;
  for (int d = 0; ok && d < x->ndim; d++) ok = d == ax || index->shape[d] <= x->shape[d];
  if (!ok) NT_FAIL_NULL("%s: index of shape %s does not fit input of shape %s along dim %d (same number of dimensions, "
                        "index.size(d) <= input.size(d) for d != dim)", op, nt_shape_str(index->shape, index->ndim, s1, sizeof s1),
                        nt_shape_str(x->shape, x->ndim, s2, sizeof s2), ax);
  int64_t m = index->numel, n = x->shape[ax];
  if (m > MAX_INDEX) NT_FAIL_NULL("%s: index has %lld elements, more than the %lld supported", op, (long long)m, (long long)MAX_INDEX);
  nt_Tensor *ic = nn_index_i64(op, index), *hc = ic && ic->device != NT_CPU ? nt_to_device(ic, NT_CPU) : (ic ? nt_retain(ic) : NULL);
  nt_Tensor *h = hc ? nt_contiguous(hc) : NULL;
  nt_release(ic); nt_release(hc);
  if (!h) return NULL;
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(m ? m : 1));
  if (!pos) { nt_release(h); NT_FAIL_NULL("%s: out of memory", op); }
  const int64_t *ix = (const int64_t *)nt_base(h);
  int64_t xstr[NT_MAXDIM], c[NT_MAXDIM] = {0}, off = 0;
  nt_contig_strides(x->shape, x->ndim, xstr);
  for (int64_t e = 0; e < m; e++) {
    int64_t v = ix[e];
    if (v < -n || v >= n) {
      free(pos); nt_release(h);
      NT_FAIL_NULL("%s: index %lld is out of bounds for dim %d with size %lld", op, (long long)v, ax, (long long)n);
    }
    pos[e] = off + (v < 0 ? v + n : v) * xstr[ax];
    for (int k = x->ndim - 1; k >= 0; k--) {   /* odometer over index's shape; off tracks the non-dim coordinates */
      if (++c[k] < index->shape[k]) { if (k != ax) off += xstr[k]; break; }
      if (k != ax) off -= xstr[k] * (index->shape[k] - 1);
      c[k] = 0;
    }
  }
  nt_release(h);
  return pos;
}

/* The CPU's values in one pass in index order, as torch's CPU kernel (the
** sort/write composition costs a sort of src: fine on a device, 100s of
** times a direct loop on the CPU).  NaN wins in amax/amin as in torch. */
#define SR_ISNAN(v) ((v) != (v))
#define SR_NONAN(v) 0
#define SR_KERNEL(T, ISNAN)                                                                       \
  static void sr_##T(int kind, T *r, const T *s, const int64_t *pos, int64_t m, uint8_t *seen) {  \
    for (int64_t e = 0; e < m; e++) {                                                             \
      T v = s[e], *d = r + pos[e];                                                                \
      if (seen && !seen[pos[e]]) { *d = v; seen[pos[e]] = 1; continue; }                          \
      if (kind == SR_PROD) *d *= v;                                                               \
      else if (kind == SR_AMAX) { if (v > *d || ISNAN(v)) *d = v; }                               \
      else if (v < *d || ISNAN(v)) *d = v;                                                        \
    }                                                                                             \
  }
SR_KERNEL(float, SR_ISNAN)
SR_KERNEL(double, SR_ISNAN)
SR_KERNEL(int32_t, SR_NONAN)
SR_KERNEL(int64_t, SR_NONAN)

/* x's values reduced with src's at pos (host), flat [numel] in x's dtype; x on the CPU */
static nt_Tensor *cpu_reduce(int kind, nt_Tensor *x, nt_Tensor *src, const int64_t *pos, int64_t m, bool include_self) {
  int64_t flat = -1;
  nt_Tensor *rc = nt_clone(x), *r = rc ? nt_reshape(rc, &flat, 1) : NULL;
  nt_Tensor *s0 = r ? nt_to_dtype(src, x->dtype) : NULL, *sc = s0 ? nt_contiguous(s0) : NULL;
  uint8_t *seen = include_self || !sc ? NULL : calloc((size_t)(x->numel ? x->numel : 1), 1);
  nt_release(rc); nt_release(s0);
  if (!sc || (!include_self && !seen)) { free(seen); nt_release(r); nt_release(sc); if (sc) nt_error_set("scatter_reduce: out of memory"); return NULL; }
  void *rv = nt_base(r);
  const void *sv = nt_base(sc);
  switch (x->dtype) {
    case NT_F32: sr_float(kind, rv, sv, pos, m, seen); break;
    case NT_F64: sr_double(kind, rv, sv, pos, m, seen); break;
    case NT_I32: sr_int32_t(kind, rv, sv, pos, m, seen); break;
    default: sr_int64_t(kind, rv, sv, pos, m, seen); break;
  }
  free(seen); nt_release(sc);
  return r;
}

/* The same pass without the gradient's bookkeeping: positions from an
** odometer over the index as stored (an expanded index is never copied),
** bounds checked on the way; 1 done, 0 an index dtype it does not read, -1 error */
#define SR_DIRECT(T, IT, ISNAN)                                                                    \
  static int64_t sr_direct_##T##_##IT(int kind, T *r, const T *s, const IT *ix, const int64_t *ishape, \
                                      const int64_t *istr, const int64_t *xstr, int nd, int ax, int64_t n, \
                                      int64_t m, uint8_t *seen) {                                   \
    int64_t c[NT_MAXDIM] = {0}, io = 0, xo = 0;                                                    \
    for (int64_t e = 0; e < m; e++) {                                                              \
      int64_t v = (int64_t)ix[io];                                                                 \
      if (v < -n || v >= n) return e;                                                              \
      int64_t p = xo + (v < 0 ? v + n : v) * xstr[ax];                                             \
      T w = s[e], *d = r + p;                                                                      \
      if (seen && !seen[p]) { *d = w; seen[p] = 1; }                                               \
      else if (kind == SR_PROD) *d *= w;                                                           \
      else if (kind == SR_AMAX) { if (w > *d || ISNAN(w)) *d = w; }                                \
      else if (w < *d || ISNAN(w)) *d = w;                                                         \
      for (int k = nd - 1; k >= 0; k--) {                                                          \
        if (++c[k] < ishape[k]) { io += istr[k]; if (k != ax) xo += xstr[k]; break; }              \
        io -= istr[k] * (ishape[k] - 1);                                                           \
        if (k != ax) xo -= xstr[k] * (ishape[k] - 1);                                              \
        c[k] = 0;                                                                                  \
      }                                                                                            \
    }                                                                                              \
    return -1;                                                                                     \
  }
#define SR_DIRECT_T(T, ISNAN) SR_DIRECT(T, int64_t, ISNAN) SR_DIRECT(T, int32_t, ISNAN)
SR_DIRECT_T(float, SR_ISNAN)
SR_DIRECT_T(double, SR_ISNAN)
SR_DIRECT_T(int32_t, SR_NONAN)
SR_DIRECT_T(int64_t, SR_NONAN)

static int cpu_direct(const char *op, int kind, nt_Tensor *x, int ax, nt_Tensor *index, nt_Tensor *src, bool include_self, nt_Tensor **out) {
  char s1[128], s2[128];
  if (index->dtype != NT_I64 && index->dtype != NT_I32) return 0;
  bool ok = index->ndim == x->ndim;
  for (int d = 0; ok && d < x->ndim; d++) ok = d == ax || index->shape[d] <= x->shape[d];
  if (!ok) NT_FAIL("%s: index of shape %s does not fit input of shape %s along dim %d (same number of dimensions, "
                   "index.size(d) <= input.size(d) for d != dim)", op, nt_shape_str(index->shape, index->ndim, s1, sizeof s1),
                   nt_shape_str(x->shape, x->ndim, s2, sizeof s2), ax);
  int64_t xstr[NT_MAXDIM], m = index->numel, n = x->shape[ax];
  nt_contig_strides(x->shape, x->ndim, xstr);
  nt_Tensor *r = nt_clone(x), *s0 = r ? nt_to_dtype(src, x->dtype) : NULL, *sc = s0 ? nt_contiguous(s0) : NULL;
  uint8_t *seen = include_self || !sc ? NULL : calloc((size_t)(x->numel ? x->numel : 1), 1);
  nt_release(s0);
  if (!sc || (!include_self && !seen)) { free(seen); nt_release(r); nt_release(sc); if (sc) nt_error_set("%s: out of memory", op); return -1; }
  int64_t bad = -1;
  const void *ix = nt_base(index);
  void *rv = nt_base(r);
  const void *sv = nt_base(sc);
  bool i64 = index->dtype == NT_I64;
#define SR_CALL(T) bad = i64 ? sr_direct_##T##_int64_t(kind, rv, sv, ix, index->shape, index->strides, xstr, x->ndim, ax, n, m, seen) \
                         : sr_direct_##T##_int32_t(kind, rv, sv, ix, index->shape, index->strides, xstr, x->ndim, ax, n, m, seen)
  switch (x->dtype) {
    case NT_F32: SR_CALL(float); break;
    case NT_F64: SR_CALL(double); break;
    case NT_I32: SR_CALL(int32_t); break;
    default: SR_CALL(int64_t); break;
  }
#undef SR_CALL
  free(seen); nt_release(sc);
  if (bad >= 0) {   /* the offending value, read again through the odometer's order */
    nt_Tensor *h = nn_index_i64(op, index);
    long long v = h ? (long long)((const int64_t *)nt_base(h))[bad] : 0;
    nt_release(h); nt_release(r);
    NT_FAIL("%s: index %lld is out of bounds for dim %d with size %lld", op, v, ax, (long long)n);
  }
  *out = r;
  return 1;
}

/* node: in = {x, src}; saved = {cx [x's shape], cs [index's shape], index i64}; iarg[0] = dim */
static int scatter_reduce_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  if (nt_node_needs(nd, 0) && !(gin[0] = nt_mul(gout, nd->saved[0]))) return -1;
  if (nt_node_needs(nd, 1)) {
    nt_Tensor *gg = nt_gather(gout, (int)nd->iarg[0], nd->saved[2]);
    nt_Tensor *gs = gg ? nt_mul(gg, nd->saved[1]) : NULL;
    nt_release(gg);
    gin[1] = gs ? nt_to_dtype(gs, nd->in[1]->dtype) : NULL;
    nt_release(gs);
    if (!gin[1]) return -1;
  }
  return 0;
}

nt_Tensor *nn_scatter_reduce_ext(const char *op, nt_Tensor *x, int dim, nt_Tensor *index, nt_Tensor *src, const char *reduce, bool include_self) {
  int kind = !strcmp(reduce, "amax") ? SR_AMAX : !strcmp(reduce, "amin") ? SR_AMIN : SR_PROD;
  if (x->ndim == 0) NT_FAIL_NULL("%s: a 0-D input is not supported; unsqueeze it", op);
  if (kind == SR_PROD ? !nt_dtype_is_float(x->dtype) : !(nt_dtype_is_float(x->dtype) || nt_dtype_is_int(x->dtype)))
    NT_FAIL_NULL("%s: reduce=\"%s\" needs a %s input, got %s", op, reduce, kind == SR_PROD ? "floating" : "numeric", nt_dtype_name(x->dtype));
  if (nt_check_same_device(op, 3, (nt_Tensor *[]){x, index, src})) return NULL;
  int ax = nt_norm_axis(op, dim, x->ndim);
  if (ax < 0) return NULL;
  int64_t m = index->numel, nx = x->numel;
  nt_DType xd0 = x->dtype;
  if (x->device == NT_CPU && (xd0 == NT_F32 || xd0 == NT_F64 || xd0 == NT_I32 || xd0 == NT_I64) && !nt_needs_grad(2, (nt_Tensor *[]){x, src})) {
    nt_Tensor *r = NULL;
    int rc = cpu_direct(op, kind, x, ax, index, src, include_self, &r);
    if (rc) return rc < 0 ? NULL : r;
  }
  int64_t *hpos = flat_positions(op, x, ax, index);
  if (!hpos) return NULL;
  bool need = nt_needs_grad(2, (nt_Tensor *[]){x, src});
  bool prev = nt_set_grad_enabled(false);
  Pool P = {0};
  nt_Tensor *out = NULL, *cx = NULL, *cs = NULL;
  nt_DType xd = x->dtype;
  nt_Tensor *direct = NULL;   /* the CPU's values (x's dtype, flat) */
  if (x->device == NT_CPU && (xd == NT_F32 || xd == NT_F64 || xd == NT_I32 || xd == NT_I64) &&
      !keep(&P, direct = cpu_reduce(kind, x, src, hpos, m, include_self))) { free(hpos); goto done; }
  if (direct && !need) {   /* the values are all there is to it */
    free(hpos);
    out = nt_reshape(direct, x->shape, x->ndim);
    goto done;
  }
  nt_Tensor *pos = index_on_device(hpos, m, x->device);   /* takes hpos */
  if (!keep(&P, pos)) goto done;
  int64_t flat = -1;
  nt_DType wt = kind == SR_PROD ? NT_F64 : x->dtype;   /* the working dtype */
  LET(xw, nt_to_dtype(x, wt));
  LET(xf, nt_reshape(xw, &flat, 1));
  LET(sw, nt_to_dtype(src, wt));
  LET(sc, nt_contiguous(sw));
  LET(sf, nt_reshape(sc, &flat, 1));
  LET(ones, nt_ones(&m, 1, wt, x->device));
  LET(zx, nt_zeros(&nx, 1, wt, x->device));
  LET(cnt_all, nt_scatter_add(zx, 0, pos, ones));   /* members from src per position */
  LET(touched, nt_binary_scalar_ex(NT_OP_GT, cnt_all, 0, NT_SCALAR_INT));
  nt_Tensor *r = NULL;   /* the result, flat, working dtype */
  if (kind != SR_PROD && direct) r = direct;
  else if (kind != SR_PROD) {
    bool neg = kind == SR_AMIN;
    LET(xv, neg ? nt_neg(xf) : nt_retain(xf));
    LET(sv0, neg ? nt_neg(sf) : nt_retain(sf));
    nt_Tensor *sv = NULL, *perm = NULL;
    if (nt_sort(sv0, 0, false, &sv, &perm)) goto done;
    keep(&P, sv); keep(&P, perm);
    LET(spos, nt_take(pos, perm, 0));
    LET(w, nt_clone(xv));
    if (m && nt_index_put_adv(w, NULL, 0, 1, (int[]){0}, (nt_Tensor *[]){spos}, sv, false)) goto done;
    LET(w2, include_self ? nt_maximum(w, xv) : nt_retain(w));
    r = keep(&P, neg ? nt_neg(w2) : nt_retain(w2));
    if (!r) goto done;
  }
  if (kind != SR_PROD) {
    if (need) {
      LET(rg, nt_take(r, pos, 0));
      LET(ms0, nt_eq(sf, rg));
      LET(ms, nt_to_dtype(ms0, wt));
      LET(mx0, nt_eq(xf, r));
      LET(mx, include_self ? nt_to_dtype(mx0, wt) : nt_zeros(&nx, 1, wt, x->device));
      LET(cnt, nt_scatter_add(mx, 0, pos, ms));
      LET(cnt1, nt_binary_scalar_ex(NT_OP_MAXIMUM, cnt, 1, NT_SCALAR_FLOAT));
      LET(cg, nt_take(cnt1, pos, 0));
      cs = keep(&P, nt_div(ms, cg));
      LET(untouched, nt_logical_not(touched));
      LET(keepx, nt_to_dtype(untouched, wt));
      cx = keep(&P, include_self ? nt_div(mx, cnt1) : nt_retain(keepx));
      if (!cs || !cx) goto done;
    }
  } else {
    LET(sz0, nt_binary_scalar_ex(NT_OP_EQ, sf, 0, NT_SCALAR_FLOAT));
    LET(sz, nt_to_dtype(sz0, wt));
    LET(sn0, nt_binary_scalar_ex(NT_OP_LT, sf, 0, NT_SCALAR_FLOAT));
    LET(sn, nt_to_dtype(sn0, wt));
    LET(s1, nt_add(sf, sz));   /* zeros read as 1: their log is 0 */
    LET(sa, nt_abs(s1));
    LET(sl, nt_log(sa));
    LET(xz0, nt_binary_scalar_ex(NT_OP_EQ, xf, 0, NT_SCALAR_FLOAT));
    LET(xz, nt_to_dtype(xz0, wt));
    LET(xn0, nt_binary_scalar_ex(NT_OP_LT, xf, 0, NT_SCALAR_FLOAT));
    LET(xn, nt_to_dtype(xn0, wt));
    LET(x1, nt_add(xf, xz));
    LET(xa, nt_abs(x1));
    LET(xl, nt_log(xa));
    LET(L, nt_scatter_add(include_self ? xl : zx, 0, pos, sl));
    LET(Z, nt_scatter_add(include_self ? xz : zx, 0, pos, sz));
    LET(N, nt_scatter_add(include_self ? xn : zx, 0, pos, sn));
    LET(Nm, nt_binary_scalar_ex(NT_OP_MOD, N, 2, NT_SCALAR_FLOAT));
    LET(sign, nt_binary_scalar_ex(NT_OP_MUL, Nm, -2, NT_SCALAR_FLOAT));
    LET(sign1, nt_binary_scalar_ex(NT_OP_ADD, sign, 1, NT_SCALAR_FLOAT));
    LET(eL, nt_exp(L));
    LET(Pnz, nt_mul(sign1, eL));   /* the product of the nonzero members */
    LET(zeroed, nt_binary_scalar_ex(NT_OP_MUL, Pnz, 0, NT_SCALAR_FLOAT));
    LET(hasz, nt_binary_scalar_ex(NT_OP_GT, Z, 0, NT_SCALAR_FLOAT));
    LET(rt, nt_where(hasz, zeroed, Pnz));
    r = keep(&P, direct ? nt_to_dtype(direct, wt) : nt_where(touched, rt, xf));   /* the CPU's: the sequential product */
    if (!r) goto done;
    if (need) {
      /* a member v: v != 0 -> r / v; a lone zero -> Pnz; else 0 */
      LET(lone0, nt_binary_scalar_ex(NT_OP_EQ, Z, 1, NT_SCALAR_FLOAT));
      LET(lone, nt_to_dtype(lone0, wt));
      LET(pz, nt_mul(Pnz, lone));
      LET(rg, nt_take(r, pos, 0));
      LET(pg, nt_take(pz, pos, 0));
      LET(sq, nt_div(rg, s1));
      cs = keep(&P, nt_where(sz0, pg, sq));
      LET(xq, nt_div(r, x1));
      LET(cxs, nt_where(xz0, pz, xq));
      LET(cxt, include_self ? nt_retain(cxs) : nt_zeros(&nx, 1, wt, x->device));
      LET(onex, nt_ones(&nx, 1, wt, x->device));
      cx = keep(&P, nt_where(touched, cxt, onex));
      if (!cs || !cx) goto done;
    }
  }
  {
    LET(rs, nt_reshape(r, x->shape, x->ndim));
    out = nt_to_dtype(rs, x->dtype);
    if (!out) goto done;
    if (out == rs) { nt_Tensor *c = nt_clone(rs); nt_release(out); if (!(out = c)) goto done; }   /* never a view of a temporary's history */
  }
  nt_set_grad_enabled(prev);
  if (need) {
    nt_DType gt = nt_dtype_is_float(x->dtype) ? x->dtype : NT_F32;
    LET(cxr, nt_reshape(cx, x->shape, x->ndim));
    LET(cxd, nt_to_dtype(cxr, gt));
    LET(csr, nt_reshape(cs, index->shape, index->ndim));
    LET(csd, nt_to_dtype(csr, gt));
    LET(ix, nn_index_i64(op, index));
    nt_Node *nd = NULL;
    out = nn_finish(out, "ScatterReduceBackward", scatter_reduce_backward, 2, (nt_Tensor *[]){x, src}, &nd);
    if (out && nd) {
      nd->iarg[0] = ax; nd->niarg = 1;
      if (nt_node_save(nd, cxd) < 0 || nt_node_save(nd, csd) < 0 || nt_node_save(nd, ix) < 0) { nt_release(out); out = NULL; }
    }
  }
done:
  nt_set_grad_enabled(prev);
  drop(&P);
  return out;
}
