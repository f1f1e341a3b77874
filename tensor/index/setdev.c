/*
** index/setdev.c — nonzero, histc and isin on a device that has their
** kernels (cuda/index.cu; the argument layouts are written there), so a
** CUDA input is never copied to the host.  setops.c calls ix_*_device when
** ix_device_has says the input's device registered the op; otherwise it
** takes its host path.
**
** What crosses to the host (counted in cuda.stats() as copies and syncs):
**   nonzero  ONE scalar, the count (the last element of the flags' scan),
**            because the result's shape depends on it (torch reads it too)
**   histc    nothing when min < max is given; with min == max the data's
**            finite range is two scalars (min and max), as torch's
**   isin     nothing
**   unique   ONE scalar, the number of groups (unique and unique_consecutive
**            without dim; sorted stably on the device for unique)
** Everything else is device ops: the flags' inclusive scan (cumsum), the
** test set's sort (sort), dtype unification (to_dtype).
*/
#include "ixinternal.h"
#include <math.h>

static int op_of(const char *name, int *cache) {
  if (*cache < 0) *cache = nt_op_register(name);
  return *cache;
}
static int nonzero_op = -1, histc_op = -1, isin_op = -1, uflags_op = -1, ugroups_op = -1;

bool ix_device_has(nt_Tensor *x, int which) {
  if (x->device == NT_CPU) return false;
  static const char *names[] = { "ix_nonzero_write", "ix_histc", "ix_isin", "ix_unique_flags", "ix_unique_groups" };
  int *cache[] = { &nonzero_op, &histc_op, &isin_op, &uflags_op, &ugroups_op };
  if (which == IX_DEV_UNIQUE) {   /* both of unique's kernels */
    int a = op_of(names[3], cache[3]), b = op_of(names[4], cache[4]);
    return a >= 0 && b >= 0 && nt_kernel_table[a][x->device] && nt_kernel_table[b][x->device];
  }
  int op = op_of(names[which], cache[which]);
  return op >= 0 && nt_kernel_table[op][x->device] != NULL;
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

/* the finite range of x (lo == hi == 0 when none), as setops.c's data_range */
static int finite_range(nt_Tensor *x, double *lo, double *hi) {
  nt_Tensor *fin = X_bs(NT_OP_LT, X_un(NT_OP_ABS, nt_retain(x)), INFINITY);   /* false for NaN and +-inf */
  nt_Tensor *pinf = fin ? nt_full(NULL, 0, INFINITY, x->dtype, x->device) : NULL;
  nt_Tensor *ninf = pinf ? nt_full(NULL, 0, -INFINITY, x->dtype, x->device) : NULL;
  nt_Tensor *a = ninf ? nt_where(fin, x, pinf) : NULL, *b = a ? nt_where(fin, x, ninf) : NULL;
  nt_Tensor *mn = b ? nt_min(a, NULL, 0, false) : NULL, *mx = mn ? nt_max(b, NULL, 0, false) : NULL;
  int rc = mx && !nt_item(mn, lo) && !nt_item(mx, hi) ? 0 : -1;
  nt_release(fin); nt_release(pinf); nt_release(ninf); nt_release(a); nt_release(b); nt_release(mn); nt_release(mx);
  if (!rc && *lo > *hi) *lo = *hi = 0;
  return rc;
}

nt_Tensor *ix_histc_device(nt_Tensor *x, int64_t bins, double lo, double hi) {
  if (x->numel && lo == hi && finite_range(x, &lo, &hi)) return NULL;
  if (lo == hi) { lo -= 1; hi += 1; }
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
  double ngd = 0;
  nt_Tensor *last = nt_slice(cs, 0, n - 1, n, 1);   /* the one read: the group count */
  int r2 = last ? nt_item(last, &ngd) : -1;
  nt_release(last);
  if (r2) goto done;
  int64_t ng = (int64_t)ngd;
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
