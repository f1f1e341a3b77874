/*
** index/setdev.c — nonzero, histc, isin, unique, searchsorted and histogram on a device that has their
** kernels (cuda/index.cu; the argument layouts are written there), so a
** CUDA input is never copied to the host.  setops.c calls ix_*_device when
** ix_device_has says the input's device registered the op; otherwise it
** takes its host path.
**
** What crosses to the host (counted in cuda.stats() as copies and syncs):
**   nonzero  ONE scalar, the count (the last element of the flags' scan),
**            because the result's shape depends on it (torch reads it too)
**   histc    nothing when min < max is given; with min == max the data's
**            finite range, min and max read together (one read)
**   isin     nothing
**   unique   ONE scalar, the number of groups (unique and unique_consecutive,
**            with or without dim; sorted stably on the device for unique:
**            rows lexicographically by one stable sort per column, last first)
**   searchsorted  nothing (a bad sorter index goes to the error slot)
**   histogram  nothing with bins as a count and a range; the data's range
**            when none is given (one read); a tensor of edges is read once
**            (its bins + 1 values, for the increasing check)
**   bincount (setops.c) ONE read: the input's min and max together
** Everything else is device ops: the flags' inclusive scan (cumsum), the
** test set's sort (sort), dtype unification (to_dtype).
*/
#include "ixinternal.h"
#include <math.h>

/* the kernels' names; an IX_DEV_* needs the ones its row lists (-1 ends it) */
enum { K_NONZERO, K_HISTC, K_ISIN, K_UFLAGS, K_UGROUPS, K_UROWFLAGS, K_SEARCH, K_HISTOGRAM, K_COUNT };
static const char *const kernel_names[K_COUNT] = { "ix_nonzero_write", "ix_histc", "ix_isin", "ix_unique_flags", "ix_unique_groups",
                                                   "ix_unique_row_flags", "ix_searchsorted", "ix_histogram" };
static const int needs[][3] = {
  [IX_DEV_NONZERO] = { K_NONZERO, -1 }, [IX_DEV_HISTC] = { K_HISTC, -1 }, [IX_DEV_ISIN] = { K_ISIN, -1 },
  [IX_DEV_UNIQUE] = { K_UFLAGS, K_UGROUPS, -1 }, [IX_DEV_UNIQUE_DIM] = { K_UROWFLAGS, K_UGROUPS, -1 },
  [IX_DEV_SEARCH] = { K_SEARCH, -1 }, [IX_DEV_HISTOGRAM] = { K_HISTOGRAM, -1 },
};
static int kernel_ops[K_COUNT] = { -1, -1, -1, -1, -1, -1, -1, -1 };
static int op_of(int k) {
  if (kernel_ops[k] < 0) kernel_ops[k] = nt_op_register(kernel_names[k]);
  return kernel_ops[k];
}
#define nonzero_op op_of(K_NONZERO)
#define histc_op op_of(K_HISTC)
#define isin_op op_of(K_ISIN)
#define uflags_op op_of(K_UFLAGS)
#define ugroups_op op_of(K_UGROUPS)
#define urowflags_op op_of(K_UROWFLAGS)
#define search_op op_of(K_SEARCH)
#define histogram_op op_of(K_HISTOGRAM)

bool ix_device_has(nt_Tensor *x, int which) {
  if (x->device == NT_CPU) return false;
  for (int i = 0; i < 3 && needs[which][i] >= 0; i++) {
    int op = op_of(needs[which][i]);
    if (op < 0 || !nt_kernel_table[op][x->device]) return false;
  }
  return true;
}

static int run4(int op, nt_Tensor *out, nt_Tensor *const in[4], const int64_t *iarg, int niarg, double s0, double s1) {
  nt_KernelArgs a;
  memset(&a, 0, sizeof a);
  a.op = op; a.out = out;
  for (int i = 0; i < 4; i++) a.in[i] = in[i];
  a.nin = 4;
  for (int i = 0; i < niarg; i++) a.iarg[i] = iarg[i];
  a.niarg = niarg; a.s[0] = s0; a.s[1] = s1;
  return nt_dispatch(op, out->device, &a);
}
static int run(int op, nt_Tensor *out, nt_Tensor *in0, nt_Tensor *in1, const int64_t *iarg, int niarg, double s0, double s1) {
  return run4(op, out, (nt_Tensor *[]){ in0, in1, NULL, NULL }, iarg, niarg, s0, s1);
}

nt_Tensor *ix_nonzero_device(nt_Tensor *x) {
  int64_t n = x->numel, nd = x->ndim;
  nt_Tensor *flat = nt_reshape(x, &n, 1);
  nt_Tensor *flags = flat ? nt_binary_scalar_ex(NT_OP_NE, flat, 0, NT_SCALAR_INT) : NULL;   /* NaN counts, as on the CPU */
  nt_Tensor *fi = flags ? nt_to_dtype(flags, NT_I64) : NULL;
  nt_Tensor *cs = fi && n ? nt_cumsum(fi, 0) : NULL;
  nt_release(flat); nt_release(flags); nt_release(fi);
  if (n && !cs) return NULL;
  double cnt = 0;
  if (n) {   /* the one read: the count */
    nt_Tensor *last = nt_slice(cs, 0, n - 1, n, 1);
    int rc = last ? nt_item(last, &cnt) : -1;
    nt_release(last);
    if (rc) { nt_release(cs); return NULL; }
  }
  int64_t shape[2] = { (int64_t)cnt, nd };
  nt_Tensor *out = nt_empty(shape, 2, NT_I64, x->device);
  if (out && cnt > 0) {
    int64_t iarg[1 + NT_MAXDIM];
    iarg[0] = nd;
    for (int d = 0; d < nd; d++) iarg[1 + d] = x->shape[d];
    if (run(nonzero_op, out, cs, NULL, iarg, 1 + (int)nd, 0, 0)) { nt_release(out); out = NULL; }
  }
  nt_release(cs);
  return out;
}

/* a and b (0-d) in ONE read: stacked on the device, copied back together */
int ix_read2(nt_Tensor *a, nt_Tensor *b, double *va, double *vb) {
  nt_Tensor *a64 = nt_to_dtype(a, NT_F64), *b64 = a64 ? nt_to_dtype(b, NT_F64) : NULL;
  nt_Tensor *st = b64 ? nt_stack((nt_Tensor *[]){ a64, b64 }, 2, 0) : NULL;
  double v[2];
  int rc = st && !nt_to_host(st, v, NT_F64) ? 0 : -1;
  nt_release(a64); nt_release(b64); nt_release(st);
  if (!rc) { *va = v[0]; *vb = v[1]; }
  return rc;
}

/* the finite range of x (lo == hi == 0 when none), as setops.c's data_range; one read */
int ix_finite_range(nt_Tensor *x, double *lo, double *hi) {
  nt_Tensor *fin = X_bs(NT_OP_LT, X_un(NT_OP_ABS, nt_retain(x)), INFINITY);   /* false for NaN and +-inf */
  nt_Tensor *pinf = fin ? nt_full(NULL, 0, INFINITY, x->dtype, x->device) : NULL;
  nt_Tensor *ninf = pinf ? nt_full(NULL, 0, -INFINITY, x->dtype, x->device) : NULL;
  nt_Tensor *a = ninf ? nt_where(fin, x, pinf) : NULL, *b = a ? nt_where(fin, x, ninf) : NULL;
  nt_Tensor *mn = b ? nt_min(a, NULL, 0, false) : NULL, *mx = mn ? nt_max(b, NULL, 0, false) : NULL;
  int rc = mx ? ix_read2(mn, mx, lo, hi) : -1;
  nt_release(fin); nt_release(pinf); nt_release(ninf); nt_release(a); nt_release(b); nt_release(mn); nt_release(mx);
  if (!rc && *lo > *hi) *lo = *hi = 0;
  return rc;
}

nt_Tensor *ix_histc_device(nt_Tensor *x, int64_t bins, double lo, double hi) {
  if (x->numel && lo == hi && ix_finite_range(x, &lo, &hi)) return NULL;
  if (lo == hi) { lo -= 1; hi += 1; }
  hi = ix_histc_top(lo, hi, bins, x->dtype);   /* torch's last edge (setops.c) */
  int64_t n = x->numel;
  nt_Tensor *flat = nt_reshape(x, &n, 1);
  nt_Tensor *xs = flat ? (x->dtype == NT_F64 ? nt_contiguous(flat) : nt_to_dtype(flat, NT_F32)) : NULL;   /* f16/bf16 exactly in f32 */
  nt_Tensor *xc = xs ? nt_contiguous(xs) : NULL;
  nt_Tensor *acc = xc ? nt_zeros(&bins, 1, NT_F64, x->device) : NULL, *r = NULL;
  if (acc && !run(histc_op, acc, xc, NULL, NULL, 0, lo, hi)) r = x->dtype == NT_F64 ? nt_retain(acc) : nt_to_dtype(acc, x->dtype);
  nt_release(flat); nt_release(xs); nt_release(xc); nt_release(acc);
  return r;
}

nt_Tensor *ix_isin_device(nt_Tensor *elements, nt_Tensor *test, bool invert) {
  /* one comparison dtype, as the CPU's: i64 when both are integers or bool, else f64 */
  nt_DType dt = nt_dtype_is_float(elements->dtype) || nt_dtype_is_float(test->dtype) ? NT_F64 : NT_I64;
  int64_t ne = elements->numel, nt = test->numel;
  nt_Tensor *e1 = nt_reshape(elements, &ne, 1), *t1 = e1 ? nt_reshape(test, &nt, 1) : NULL;
  nt_Tensor *ec = t1 ? nt_to_dtype(e1, dt) : NULL, *tc = ec ? nt_to_dtype(t1, dt) : NULL;
  nt_Tensor *ecc = tc ? nt_contiguous(ec) : NULL, *sorted = NULL, *idx = NULL;
  if (ecc && nt && nt_sort(tc, 0, false, &sorted, &idx)) { nt_release(ecc); ecc = NULL; }   /* NaN last */
  nt_Tensor *sc = sorted ? nt_contiguous(sorted) : NULL;
  nt_Tensor *out = ecc && (sc || !nt) ? nt_empty(elements->shape, elements->ndim, NT_BOOL, elements->device) : NULL;
  if (out && ne) {
    int64_t inv = invert;
    if (nt) {
      if (run(isin_op, out, ecc, sc, &inv, 1, 0, 0)) { nt_release(out); out = NULL; }
    } else {   /* an empty test set: nothing is in it */
      nt_release(out);
      out = nt_full(elements->shape, elements->ndim, invert ? 1 : 0, NT_BOOL, elements->device);
    }
  }
  nt_release(e1); nt_release(t1); nt_release(ec); nt_release(tc); nt_release(ecc); nt_release(sorted); nt_release(idx); nt_release(sc);
  return out;
}

/* the number of groups: the last element of the flags' cumsum (n >= 1), the one
   device->host read a data-sized result needs */
static int group_count(nt_Tensor *cs, int64_t n, int64_t *ng) {
  double v = 0;
  nt_Tensor *last = nt_slice(cs, 0, n - 1, n, 1);
  int rc = last ? nt_item(last, &v) : -1;
  nt_release(last);
  *ng = (int64_t)v;
  return rc;
}

/* unique (sorted) / unique_consecutive (not) of the flattened x, n >= 1: the
** values as index_select of x at each group's first element (x's dtype and
** bits, as the CPU's), inverse in x's shape, counts */
int ix_unique_device(nt_Tensor *x, bool sorted, nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts) {
  int64_t n = x->numel;
  nt_DType cd = nt_dtype_is_float(x->dtype) ? NT_F64 : NT_I64;   /* the CPU's comparison */
  nt_Tensor *flat = nt_reshape(x, &n, 1), *v = NULL, *perm = NULL, *vc = NULL, *vcc = NULL, *flags = NULL, *cs = NULL, *first = NULL;
  int rc = -1;
  if (!flat) return -1;
  if (sorted) { if (nt_sort(flat, 0, false, &v, &perm)) goto done; }   /* stable, NaN last, -0 with +0 */
  else v = nt_retain(flat);
  if (!(vc = nt_to_dtype(v, cd)) || !(vcc = nt_contiguous(vc)) || !(flags = nt_empty(&n, 1, NT_I64, x->device))) goto done;
  if (run(uflags_op, flags, vcc, NULL, NULL, 0, 0, 0) || !(cs = nt_cumsum(flags, 0))) goto done;
  int64_t ng;
  if (group_count(cs, n, &ng)) goto done;
  nt_Tensor *pc = perm ? nt_contiguous(perm) : NULL;
  if (perm && !pc) goto done;
  first = nt_empty(&ng, 1, NT_I64, x->device);
  if (inverse) *inverse = first ? nt_empty(x->shape, x->ndim, NT_I64, x->device) : NULL;
  if (counts) *counts = first ? nt_empty(&ng, 1, NT_I64, x->device) : NULL;
  if (!first || (inverse && !*inverse) || (counts && !*counts) ||
      run4(ugroups_op, first, (nt_Tensor *[]){ cs, pc, inverse ? *inverse : NULL, counts ? *counts : NULL }, NULL, 0, 0, 0)) {
    nt_release(pc);
    goto done;
  }
  nt_release(pc);
  if (!(*values = nt_index_select(flat, 0, first))) goto done;
  rc = 0;
done:
  if (rc) {
    if (inverse) { nt_release(*inverse); *inverse = NULL; }
    if (counts) { nt_release(*counts); *counts = NULL; }
  }
  nt_release(flat); nt_release(v); nt_release(perm); nt_release(vc); nt_release(vcc); nt_release(flags); nt_release(cs); nt_release(first);
  return rc;
}

/* unique / unique_consecutive along axis of x (shape[axis] >= 1, at least one
** element per row): rows = x moved so axis is first, [n, w], as f64 or i64;
** sorted: perm by one stable sort per column, last column first (an LSD
** lexicographic sort: w sorts of n keys); then the row flags, their scan,
** the one read (the group count) and ix_unique_groups as without dim. */
int ix_unique_dim_device(nt_Tensor *x, int axis, bool sorted, nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts) {
  int64_t n = x->shape[axis], w = x->numel / n, shape2[2] = { n, w };
  nt_DType cd = nt_dtype_is_float(x->dtype) ? NT_F64 : NT_I64;
  nt_Tensor *moved = nt_transpose(x, 0, axis), *mc = moved ? nt_to_dtype(moved, cd) : NULL, *mcc = mc ? nt_contiguous(mc) : NULL;
  nt_Tensor *rows = mcc ? nt_reshape(mcc, shape2, 2) : NULL, *perm = NULL, *flags = NULL, *cs = NULL, *first = NULL;
  int rc = -1;
  nt_release(moved); nt_release(mc); nt_release(mcc);
  if (!rows) return -1;
  for (int64_t k = w - 1; sorted && k >= 0; k--) {
    nt_Tensor *col = nt_slice(rows, 1, k, k + 1, 1), *c1 = col ? nt_reshape(col, &n, 1) : NULL;
    nt_Tensor *key = !c1 ? NULL : perm ? nt_index_select(c1, 0, perm) : nt_retain(c1), *sv = NULL, *idx = NULL;
    int bad = !key || nt_sort(key, 0, false, &sv, &idx);   /* stable: ties keep the order of the later columns */
    nt_Tensor *np = bad ? NULL : perm ? nt_index_select(perm, 0, idx) : nt_retain(idx);
    nt_release(col); nt_release(c1); nt_release(key); nt_release(sv); nt_release(idx);
    nt_release(perm);
    perm = np;
    if (!perm) goto done;
    if (nt_interrupt_requested()) { nt_error_set("interrupted"); goto done; }
  }
  nt_Tensor *pc = perm ? nt_contiguous(perm) : NULL;
  if (perm && !pc) goto done;
  nt_release(perm);
  perm = pc;
  int64_t wi = w;
  if (!(flags = nt_empty(&n, 1, NT_I64, x->device)) || run(urowflags_op, flags, rows, perm, &wi, 1, 0, 0) || !(cs = nt_cumsum(flags, 0))) goto done;
  int64_t ng;
  if (group_count(cs, n, &ng)) goto done;
  first = nt_empty(&ng, 1, NT_I64, x->device);
  if (inverse) *inverse = first ? nt_empty(&n, 1, NT_I64, x->device) : NULL;
  if (counts) *counts = first ? nt_empty(&ng, 1, NT_I64, x->device) : NULL;
  if (!first || (inverse && !*inverse) || (counts && !*counts) ||
      run4(ugroups_op, first, (nt_Tensor *[]){ cs, perm, inverse ? *inverse : NULL, counts ? *counts : NULL }, NULL, 0, 0, 0))
    goto done;
  if (!(*values = nt_index_select(x, axis, first))) goto done;
  rc = 0;
done:
  if (rc) {
    if (inverse) { nt_release(*inverse); *inverse = NULL; }
    if (counts) { nt_release(*counts); *counts = NULL; }
  }
  nt_release(rows); nt_release(perm); nt_release(flags); nt_release(cs); nt_release(first);
  return rc;
}

/* searchsorted by ix_searchsorted: one binary search per value, nothing read
** back; seq and values compared as f64 (either floating) or i64 */
nt_Tensor *ix_searchsorted_device(nt_Tensor *seq, nt_Tensor *values, bool right, nt_Tensor *sorter) {
  nt_DType dt = nt_dtype_is_float(seq->dtype) || nt_dtype_is_float(values->dtype) ? NT_F64 : NT_I64;
  int64_t m = seq->shape[seq->ndim - 1], nv = values->numel;
  int64_t per = seq->ndim == 1 ? nv : values->shape[values->ndim - 1];
  nt_Tensor *s1 = nt_to_dtype(seq, dt), *sc = s1 ? nt_contiguous(s1) : NULL;
  nt_Tensor *v1 = sc ? nt_to_dtype(values, dt) : NULL, *vc = v1 ? nt_contiguous(v1) : NULL;
  nt_Tensor *o1 = vc && sorter ? nt_to_dtype(sorter, NT_I64) : NULL, *oc = o1 ? nt_contiguous(o1) : NULL;
  nt_Tensor *out = vc && (!sorter || oc) ? nt_empty(values->shape, values->ndim, NT_I64, values->device) : NULL;
  int64_t iarg[3] = { right, m, per };
  if (out && nv && run4(search_op, out, (nt_Tensor *[]){ sc, vc, oc, NULL }, iarg, 3, 0, 0)) { nt_release(out); out = NULL; }
  nt_release(s1); nt_release(sc); nt_release(v1); nt_release(vc); nt_release(o1); nt_release(oc);
  return out;
}

/* histogram's counts (and density) by ix_histogram: edges f64 [bins + 1] on
** x's device, already checked non-decreasing; mode the bin rule (ixhistbin.h);
** *hist in x's dtype.  The density in torch's order, count / total / width, in
** f64 for f64 input and f32 otherwise (as setops.c's density_of) */
int ix_histogram_device(nt_Tensor *x, nt_Tensor *edges, nt_Tensor *weight, bool density, int mode, nt_Tensor **hist) {
  int64_t n = x->numel, bins = edges->numel - 1, m = mode;
  nt_Tensor *flat = nt_reshape(x, &n, 1);
  nt_Tensor *xs = flat ? (x->dtype == NT_F64 ? nt_retain(flat) : nt_to_dtype(flat, NT_F32)) : NULL;   /* f16/bf16 exactly in f32 */
  nt_Tensor *xc = xs ? nt_contiguous(xs) : NULL, *wf = NULL, *w64 = NULL, *wc = NULL;
  if (xc && weight && (!(wf = nt_reshape(weight, &n, 1)) || !(w64 = nt_to_dtype(wf, NT_F64)) || !(wc = nt_contiguous(w64)))) { nt_release(xc); xc = NULL; }
  nt_Tensor *acc = xc ? nt_zeros(&bins, 1, NT_F64, x->device) : NULL;
  if (acc && run4(histogram_op, acc, (nt_Tensor *[]){ xc, edges, wc, NULL }, &m, 1, 0, 0)) { nt_release(acc); acc = NULL; }
  if (acc && density) {
    nt_DType cdt = x->dtype == NT_F64 ? NT_F64 : NT_F32;
    nt_Tensor *h = nt_to_dtype(acc, cdt), *ec = nt_to_dtype(edges, cdt);
    nt_Tensor *width = ec ? X_bin(NT_OP_SUB, nt_slice(ec, 0, 1, bins + 1, 1), nt_slice(ec, 0, 0, bins, 1)) : NULL;
    nt_Tensor *d = h && width ? X_bin(NT_OP_DIV, X_bin(NT_OP_DIV, nt_retain(h), nt_sum(h, NULL, 0, false)), nt_retain(width)) : NULL;
    nt_release(h); nt_release(ec); nt_release(width); nt_release(acc);
    acc = d;
  }
  *hist = !acc ? NULL : acc->dtype == x->dtype ? nt_retain(acc) : nt_to_dtype(acc, x->dtype);
  nt_release(flat); nt_release(xs); nt_release(xc); nt_release(wf); nt_release(w64); nt_release(wc); nt_release(acc);
  return *hist ? 0 : -1;
}
