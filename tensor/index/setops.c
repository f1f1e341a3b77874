/*
** index/setops.c — the ops whose result size depends on the data: unique,
** unique_consecutive, bincount, histc, histogram, searchsorted, nonzero,
** isin.  bincount is a scatter_add on x's device; the others read x's elements on the host (ix_host: i64 for integer and
** bool dtypes, f64 for floats, so every comparison is exact), runs the plain
** sequential algorithm, and returns tensors on x's device: a CUDA input
** costs a copy down and a copy back, a synchronisation as torch's unique
** and nonzero are.  Values that come out of x (unique's) are taken from x
** itself by index_select, so they keep x's dtype and bits.  nonzero, histc,
** histogram, isin, searchsorted, and unique / unique_consecutive (with or
** without dim), on a device with their kernels stay there (setdev.c).
*/
#include "ixinternal.h"
#include "ixhistbin.h"
#include "tensor/trange.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ix_host(nt_Tensor *x, ix_Host *h) {
  h->as = nt_dtype_is_float(x->dtype) ? NT_F64 : NT_I64;
  h->n = x->numel;
  h->u.p = malloc(8 * (size_t)(h->n ? h->n : 1));
  if (!h->u.p) NT_FAIL("out of memory (%lld elements)", (long long)h->n);
  if (h->n && nt_to_host(x, h->u.p, h->as)) { free(h->u.p); h->u.p = NULL; return -1; }
  return 0;
}
void ix_host_free(ix_Host *h) { free(h->u.p); h->u.p = NULL; }

nt_Tensor *ix_i64_on(const int64_t *data, const int64_t *shape, int ndim, nt_Device dev) {
  nt_Tensor *t = nt_from_buffer(data, NT_I64, shape, ndim, NT_I64);
  if (!t || dev == NT_CPU) return t;
  nt_Tensor *d = nt_to_device(t, dev);
  nt_release(t);
  return d;
}
static nt_Tensor *f64_on(const double *data, const int64_t *shape, int ndim, nt_DType dt, nt_Device dev) {
  nt_Tensor *t = nt_from_buffer(data, NT_F64, shape, ndim, dt);
  if (!t || dev == NT_CPU) return t;
  nt_Tensor *d = nt_to_device(t, dev);
  nt_release(t);
  return d;
}

/* element i of h compared with element j of g: <0, 0, >0 (NaN: equal to NaN, above all) */
static inline int cmp_at(const ix_Host *h, int64_t i, const ix_Host *g, int64_t j) {
  if (h->as == NT_I64 && g->as == NT_I64) return (h->u.i[i] > g->u.i[j]) - (h->u.i[i] < g->u.i[j]);
  double a = h->as == NT_I64 ? (double)h->u.i[i] : h->u.f[i], b = g->as == NT_I64 ? (double)g->u.i[j] : g->u.f[j];
  if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
  return (a > b) - (a < b);
}

/* ---- unique / unique_consecutive ------------------------------------------------------- */
/* rows of width w: row r is h[r*w .. r*w+w) */
typedef struct Rows { const ix_Host *h; int64_t w; } Rows;
static int cmp_rows(const Rows *R, int64_t a, int64_t b) {
  for (int64_t k = 0; k < R->w; k++) {
    int c = cmp_at(R->h, a * R->w + k, R->h, b * R->w + k);
    if (c) return c;
  }
  return 0;
}
static int qsort_rows(const void *pa, const void *pb, void *ud) {
  int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  int c = cmp_rows(ud, a, b);
  return c ? c : (a > b) - (a < b);   /* stable */
}

/* groups of the rows taken in `order`: firsts (the row that starts each
** group, as an index into x), inverse (per row, its group), counts */
/* the results from the groups: first[g] (a position in src along axis whose
** value group g has), cnt[g], inv[i] (the group of element i) */
static int emit(nt_Tensor *src, int axis, const int64_t *first, const int64_t *cnt, int64_t ng, const int64_t *inv,
                nt_Tensor **values, nt_Tensor **inverse, const int64_t *inv_shape, int inv_ndim, nt_Tensor **counts) {
  nt_Tensor *fi = ix_i64_on(first, &ng, 1, src->device);
  *values = fi ? nt_index_select(src, axis, fi) : NULL;
  nt_release(fi);
  if (!*values) return -1;
  if (inverse && !(*inverse = ix_i64_on(inv, inv_shape, inv_ndim, src->device))) return -1;
  if (counts && !(*counts = ix_i64_on(cnt, &ng, 1, src->device))) return -1;
  return 0;
}

static int group(nt_Tensor *src, int axis, const Rows *R, const int64_t *order, int64_t n,
                 nt_Tensor **values, nt_Tensor **inverse, const int64_t *inv_shape, int inv_ndim, nt_Tensor **counts) {
  int64_t *first = malloc(8 * (size_t)(n ? n : 1)), *cnt = malloc(8 * (size_t)(n ? n : 1)), *inv = malloc(8 * (size_t)(n ? n : 1));
  int rc = -1;
  if (!first || !cnt || !inv) { nt_error_set("out of memory (%lld elements)", (long long)n); goto done; }
  int64_t ng = 0;
  for (int64_t k = 0; k < n; k++) {
    if (k == 0 || cmp_rows(R, order[k - 1], order[k]) != 0) { first[ng] = order[k]; cnt[ng++] = 0; }
    cnt[ng - 1]++;
    inv[order[k]] = ng - 1;
  }
  rc = emit(src, axis, first, cnt, ng, inv, values, inverse, inv_shape, inv_ndim, counts);
done:
  free(first); free(cnt); free(inv);
  return rc;
}

/* Integers whose range is at most about twice their number (token ids, labels):
** a counting pass instead of a sort, O(n + range).  1 when it ran, 0 when
** the range is too wide (the caller sorts), -1 on error. */
static int unique_counting(nt_Tensor *src, const ix_Host *h, nt_Tensor **values, nt_Tensor **inverse,
                           const int64_t *inv_shape, int inv_ndim, nt_Tensor **counts) {
  int64_t n = h->n, lo = h->u.i[0], hi = h->u.i[0];
  for (int64_t i = 1; i < n; i++) { if (h->u.i[i] < lo) lo = h->u.i[i]; if (h->u.i[i] > hi) hi = h->u.i[i]; }
  uint64_t range = (uint64_t)hi - (uint64_t)lo + 1;
  if (range > (uint64_t)n * 2 + 65536) return 0;
  int64_t *slot = calloc((size_t)range, sizeof(int64_t));   /* count, then group + 1 */
  int64_t *first = malloc(8 * (size_t)n), *cnt = malloc(8 * (size_t)n), *inv = malloc(8 * (size_t)n);
  int rc = -1;
  if (!slot || !first || !cnt || !inv) { nt_error_set("unique: out of memory (%lld elements)", (long long)n); goto done; }
  for (int64_t i = 0; i < n; i++) slot[h->u.i[i] - lo]++;
  int64_t ng = 0;
  if (!inverse) {   /* the values are lo + v: no second pass (integers convert exactly to x's dtype) */
    for (uint64_t v = 0; v < range; v++) if (slot[v]) { cnt[ng] = slot[v]; first[ng++] = lo + (int64_t)v; }
    nt_Tensor *t = nt_from_buffer(first, NT_I64, &ng, 1, src->dtype);
    *values = t && src->device != NT_CPU ? nt_to_device(t, src->device) : nt_retain(t);
    nt_release(t);
    rc = !*values || (counts && !(*counts = ix_i64_on(cnt, &ng, 1, src->device))) ? -1 : 1;
    goto done;
  }
  for (uint64_t v = 0; v < range; v++) if (slot[v]) { cnt[ng] = slot[v]; first[ng] = -1; slot[v] = ++ng; }
  for (int64_t i = 0; i < n; i++) {
    int64_t g = slot[h->u.i[i] - lo] - 1;
    inv[i] = g;
    if (first[g] < 0) first[g] = i;
  }
  rc = emit(src, 0, first, cnt, ng, inv, values, inverse, inv_shape, inv_ndim, counts) ? -1 : 1;
done:
  free(slot); free(first); free(cnt); free(inv);
  return rc;
}

/* A stable LSD radix sort of the flat elements (16-bit digits, a pass
** skipped when every key has the same digit there): order[] gets the
** positions in ascending order.  Keys are the elements mapped to unsigned
** integers that sort as the values do: i64 with the sign bit flipped; f64
** with -0 as +0, every NaN as one NaN above +inf (the order and the
** equality of cmp_at), negatives' bits inverted. */
static uint64_t sort_key(const ix_Host *h, int64_t i) {
  if (h->as == NT_I64) return (uint64_t)h->u.i[i] ^ (UINT64_C(1) << 63);
  double v = h->u.f[i];
  if (v == 0) v = 0;
  if (isnan(v)) return UINT64_MAX;
  uint64_t b;
  memcpy(&b, &v, 8);
  return b >> 63 ? ~b : b | (UINT64_C(1) << 63);
}
static int radix_order(const ix_Host *h, int64_t *order) {
  int64_t n = h->n;
  uint64_t *key = malloc(8 * (size_t)(n ? n : 1)), *key2 = malloc(8 * (size_t)(n ? n : 1));
  int64_t *ord2 = malloc(8 * (size_t)(n ? n : 1)), *cnt = malloc(sizeof(int64_t) * 65536);
  int rc = -1;
  if (!key || !key2 || !ord2 || !cnt) { nt_error_set("unique: out of memory (%lld elements)", (long long)n); goto done; }
  for (int64_t i = 0; i < n; i++) key[i] = sort_key(h, i);
  for (int pass = 0; pass < 4; pass++) {
    int sh = 16 * pass;
    memset(cnt, 0, sizeof(int64_t) * 65536);
    for (int64_t i = 0; i < n; i++) cnt[(key[i] >> sh) & 0xffff]++;
    if (n && cnt[(key[0] >> sh) & 0xffff] == n) continue;   /* one digit everywhere: the order stands */
    for (int64_t d = 0, sum = 0; d < 65536; d++) { int64_t c = cnt[d]; cnt[d] = sum; sum += c; }
    for (int64_t i = 0; i < n; i++) {
      int64_t at = cnt[(key[i] >> sh) & 0xffff]++;
      key2[at] = key[i]; ord2[at] = order[i];
    }
    uint64_t *tk = key; key = key2; key2 = tk;
    memcpy(order, ord2, 8 * (size_t)n);
    if (nt_interrupt_requested()) { nt_error_set("interrupted"); goto done; }
  }
  rc = 0;
done:
  free(key); free(key2); free(ord2); free(cnt);
  return rc;
}

static int unique_impl(const char *op, nt_Tensor *x, bool has_dim, int dim, bool sorted,
                       nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts) {
  *values = NULL;
  if (inverse) *inverse = NULL;
  if (counts) *counts = NULL;
  nt_Tensor *src;       /* the tensor the values are taken from, along axis 0 or dim */
  int axis = 0;
  int64_t n, w, inv_shape[NT_MAXDIM];
  int inv_ndim;
  ix_Host h = {0};
  if (!has_dim && x->numel > 0 && ix_device_has(x, IX_DEV_UNIQUE)) return ix_unique_device(x, sorted, values, inverse, counts);
  if (has_dim) {
    if (x->ndim == 0) NT_FAIL("%s: dim given for a 0-d tensor", op);
    if ((axis = nt_norm_axis(op, dim, x->ndim)) < 0) return -1;
    n = x->shape[axis];
    w = n ? x->numel / n : 0;
    if (n > 0 && w > 0 && ix_device_has(x, IX_DEV_UNIQUE_DIM)) return ix_unique_dim_device(x, axis, sorted, values, inverse, counts);
    nt_Tensor *moved = nt_transpose(x, 0, axis), *c = moved ? nt_contiguous(moved) : NULL;
    nt_release(moved);
    if (!c) return -1;
    int rc = ix_host(c, &h);
    nt_release(c);
    if (rc) return -1;
    src = nt_retain(x);
    inv_shape[0] = n; inv_ndim = 1;
  } else {
    n = x->numel; w = 1;
    if (ix_host(x, &h)) return -1;
    src = nt_reshape(x, &n, 1);
    if (!src) { ix_host_free(&h); return -1; }
    memcpy(inv_shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    inv_ndim = x->ndim;
  }
  Rows R = { &h, w };
  int64_t *order = NULL;
  int rc = -1;
  if (!has_dim && sorted && h.as == NT_I64 && n > 0) {
    int c = unique_counting(src, &h, values, inverse, inv_shape, inv_ndim, counts);
    if (c != 0) { rc = c < 0 ? -1 : 0; goto done; }
  }
  order = malloc(8 * (size_t)(n ? n : 1));
  if (!order) { nt_error_set("%s: out of memory (%lld elements)", op, (long long)n); goto done; }
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (sorted && w == 1) { if (radix_order(&h, order)) goto done; }
  else if (sorted) qsort_r(order, (size_t)n, sizeof(int64_t), qsort_rows, &R);
  if (nt_interrupt_requested()) { nt_error_set("interrupted"); goto done; }
  rc = group(src, axis, &R, order, n, values, inverse, inv_shape, inv_ndim, counts);
done:
  free(order); ix_host_free(&h); nt_release(src);
  if (rc) {
    nt_release(*values); *values = NULL;
    if (inverse) { nt_release(*inverse); *inverse = NULL; }
    if (counts) { nt_release(*counts); *counts = NULL; }
  }
  return rc;
}

int nt_unique(nt_Tensor *x, bool has_dim, int dim, nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts) {
  return unique_impl("unique", x, has_dim, dim, true, values, inverse, counts);
}
int nt_unique_consecutive(nt_Tensor *x, bool has_dim, int dim, nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts) {
  return unique_impl("unique_consecutive", x, has_dim, dim, false, values, inverse, counts);
}

/* ---- bincount ---------------------------------------------------------------------------- */
static int check_int_1d(const char *op, const char *what, nt_Tensor *x) {
  if (nt_dtype_is_float(x->dtype) || x->dtype == NT_BOOL)
    NT_FAIL("%s: %s must be an integer tensor, got %s", op, what, nt_dtype_name(x->dtype));
  if (x->ndim != 1) NT_FAIL("%s: %s must be 1-D, got %d dimensions", op, what, x->ndim);
  return 0;
}

/* bincount is scatter_add(zeros(len), 0, x, weights or ones) (atomic adds on
** a GPU): it stays on x's device (ONE read: the minimum, for the error, and
** the maximum, for the length, together), and the weights get
** scatter_add's gradient */
nt_Tensor *nt_bincount(nt_Tensor *x, nt_Tensor *weights, int64_t minlength) {
  if (check_int_1d("bincount", "input", x)) return NULL;
  if (minlength < 0) NT_FAIL_NULL("bincount: minlength must be non-negative, got %lld", (long long)minlength);
  if (weights && (weights->ndim != 1 || weights->shape[0] != x->shape[0]))
    NT_FAIL_NULL("bincount: weights must be 1-D of the input's length %lld", (long long)x->shape[0]);
  int64_t len = minlength;
  if (x->numel) {
    double lo, hi;
    nt_Tensor *mn = nt_min(x, NULL, 0, false), *mx = mn ? nt_max(x, NULL, 0, false) : NULL;
    int rc = mx ? ix_read2(mn, mx, &lo, &hi) : -1;
    nt_release(mn); nt_release(mx);
    if (rc) return NULL;
    if (lo < 0) NT_FAIL_NULL("bincount: the input must be non-negative, found %.0f", lo);
    if (hi + 1 > (double)len) len = (int64_t)hi + 1;
  }
  if (nt_check_shape("bincount", &len, 1, NULL)) return NULL;
  nt_DType dt = !weights ? NT_I64 : weights->dtype == NT_F32 ? NT_F32 : NT_F64;
  nt_Tensor *idx = nt_to_dtype(x, NT_I64);
  nt_Tensor *src = !idx ? NULL : weights ? nt_to_dtype(weights, dt) : nt_ones(x->shape, 1, NT_I64, x->device);
  nt_Tensor *zero = src ? nt_zeros(&len, 1, dt, x->device) : NULL;
  nt_Tensor *r = zero ? nt_scatter_add(zero, 0, idx, src) : NULL;
  nt_release(idx); nt_release(src); nt_release(zero);
  return r;
}

/* ---- histc / histogram ------------------------------------------------------------------- */
static int float_input(const char *op, nt_Tensor *x) {
  if (!nt_dtype_is_float(x->dtype)) NT_FAIL("%s: the input must be a floating tensor, got %s", op, nt_dtype_name(x->dtype));
  return 0;
}

/* the data's finite range (lo == hi == 0 when empty) */
static void data_range(const ix_Host *h, double *lo, double *hi) {
  *lo = INFINITY; *hi = -INFINITY;
  for (int64_t i = 0; i < h->n; i++) if (isfinite(h->u.f[i])) { if (h->u.f[i] < *lo) *lo = h->u.f[i]; if (h->u.f[i] > *hi) *hi = h->u.f[i]; }
  if (*lo > *hi) *lo = *hi = 0;
}

/* histc's right edge: torch 1.13 bins by its linspace's last edge, which can be an ulp off max
** (tensor/trange.h), in the input's type (f32 for f16/bf16); values past it are dropped */
double ix_histc_top(double lo, double hi, int64_t bins, nt_DType dt) {
  return dt == NT_F64 ? nt_linspace_f64(bins, bins + 1, lo, hi) : (double)nt_linspace_f32(bins, bins + 1, lo, hi);
}

nt_Tensor *nt_histc(nt_Tensor *x, int64_t bins, double lo, double hi) {
  if (float_input("histc", x)) return NULL;
  if (bins <= 0 || nt_check_shape("histc", &bins, 1, NULL)) NT_FAIL_NULL("histc: bins must be a positive size, got %lld", (long long)bins);
  if (!isfinite(lo) || !isfinite(hi)) NT_FAIL_NULL("histc: range of [%g, %g] is not finite", lo, hi);
  if (lo > hi) NT_FAIL_NULL("histc: max must be larger than min (got min %g, max %g)", lo, hi);
  if (ix_device_has(x, IX_DEV_HISTC)) return ix_histc_device(x, bins, lo, hi);
  ix_Host h = {0};
  if (ix_host(x, &h)) return NULL;
  if (lo == hi) data_range(&h, &lo, &hi);
  if (lo == hi) { lo -= 1; hi += 1; }
  hi = ix_histc_top(lo, hi, bins, x->dtype);
  double *acc = calloc((size_t)bins, sizeof(double));
  nt_Tensor *r = NULL;
  if (acc) {
    /* the bin in the input's type and order, as torch 1.13: (x - lo) / (top - lo) * bins, in f32 for f32 (f16/bf16 too),
    ** where an f64 quotient can put a value at a bin boundary in the other bin; top its linspace's last edge */
    bool f32 = x->dtype != NT_F64;
    float lof = (float)lo, hif = (float)hi;
    for (int64_t i = 0; i < h.n; i++) {
      int64_t b;
      if (f32) {
        float v = (float)h.u.f[i];
        if (!(v >= lof && v <= hif)) continue;   /* outside, or NaN */
        b = (int64_t)((v - lof) / (hif - lof) * (float)bins);
      } else {
        double v = h.u.f[i];
        if (!(v >= lo && v <= hi)) continue;
        b = (int64_t)((v - lo) / (hi - lo) * (double)bins);
      }
      acc[b >= bins ? bins - 1 : b] += 1;
    }
    r = f64_on(acc, &bins, 1, x->dtype, x->device);
  } else nt_error_set("histc: out of memory (%lld bins)", (long long)bins);
  free(acc); ix_host_free(&h);
  return r;
}

/* histogram's density, in torch's order and arithmetic: count / total, then / the bin's
** width, each in f64 for f64 input and in f32 otherwise (f16/bf16 too) */
static void density_of(double *acc, const double *e, int64_t bins, bool f64) {
  double tot = 0;
  for (int64_t b = 0; b < bins; b++) tot += acc[b];
  for (int64_t b = 0; b < bins; b++) {
    if (f64) acc[b] = acc[b] / tot / (e[b + 1] - e[b]);
    else acc[b] = (double)((float)acc[b] / (float)tot / ((float)e[b + 1] - (float)e[b]));
  }
}

int nt_histogram(nt_Tensor *x, int64_t bins, nt_Tensor *edges, double lo, double hi, nt_Tensor *weight, bool density,
                 nt_Tensor **hist, nt_Tensor **bin_edges) {
  *hist = *bin_edges = NULL;
  if (float_input("histogram", x)) return -1;
  if (weight && (weight->ndim != x->ndim || memcmp(weight->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim)))
    NT_FAIL("histogram: weight must have the input's shape");
  ix_Host h = {0}, wh = {0}, eh = {0};
  double *e = NULL, *acc = NULL;
  int rc = -1;
  /* on a device with the kernel x and weight stay there (setdev.c); the edges are made or checked here */
  bool dev = ix_device_has(x, IX_DEV_HISTOGRAM) && (!weight || weight->device == x->device);
  if (!dev && (ix_host(x, &h) || (weight && ix_host(weight, &wh)))) goto done;
  if (edges) {
    if (edges->ndim != 1 || edges->shape[0] < 2) { nt_error_set("histogram: bins as a tensor must be 1-D with at least 2 edges"); goto done; }
    if (ix_host(edges, &eh)) goto done;
    bins = edges->shape[0] - 1;
    if (!(e = malloc(sizeof(double) * (size_t)(bins + 1)))) goto oom;
    for (int64_t i = 0; i <= bins; i++) {
      e[i] = eh.as == NT_F64 ? eh.u.f[i] : (double)eh.u.i[i];
      if (i && !(e[i] >= e[i - 1])) { nt_error_set("histogram: bin edges must be increasing (edge %lld is %g after %g)", (long long)i, e[i], e[i - 1]); goto done; }
    }
  } else {
    if (bins <= 0 || nt_check_shape("histogram", &bins, 1, NULL)) { nt_error_set("histogram: bins must be a positive size, got %lld", (long long)bins); goto done; }
    if (isnan(lo)) {
      if (!dev) data_range(&h, &lo, &hi);
      else if (x->numel == 0) lo = hi = 0;
      else if (ix_finite_range(x, &lo, &hi)) goto done;
    }
    if (!isfinite(lo) || !isfinite(hi) || lo > hi) { nt_error_set("histogram: range [%g, %g] must be finite with min <= max", lo, hi); goto done; }
    if (lo == hi) { lo -= 0.5; hi += 0.5; }   /* numpy's and torch's */
    if (!(e = malloc(sizeof(double) * (size_t)(bins + 1)))) goto oom;
    /* the edges in x's dtype, as torch.linspace makes them; the bins follow the rounded edges */
    nt_Tensor *ls = nt_linspace(lo, hi, bins + 1, x->dtype);
    if (!ls) goto done;
    int r2 = nt_to_host(ls, e, NT_F64);
    nt_release(ls);
    if (r2) goto done;
  }
  int64_t ne = bins + 1;
  /* which bin: torch's rule for each way of giving the bins (ixhistbin.h) */
  int mode = edges ? HIST_BINARY : x->dtype == NT_F64 ? HIST_LINEAR_F64 : HIST_LINEAR_F32;
  if (dev) {
    nt_Tensor *ed = f64_on(e, &ne, 1, NT_F64, x->device);
    int r3 = ed ? ix_histogram_device(x, ed, weight, density, mode, hist) : -1;
    nt_release(ed);
    if (r3 || !(*bin_edges = f64_on(e, &ne, 1, x->dtype, x->device))) goto done;
    rc = 0;
    goto done;
  }
  if (!(acc = calloc((size_t)bins, sizeof(double)))) goto oom;
  for (int64_t i = 0; i < h.n; i++) {
    int64_t b = nt_hist_bin(e, bins, h.u.f[i], mode);
    if (b >= 0) acc[b] += weight ? (wh.as == NT_F64 ? wh.u.f[i] : (double)wh.u.i[i]) : 1.0;
  }
  if (density) density_of(acc, e, bins, x->dtype == NT_F64);
  if (!(*hist = f64_on(acc, &bins, 1, x->dtype, x->device)) || !(*bin_edges = f64_on(e, &ne, 1, x->dtype, x->device))) goto done;
  rc = 0;
  goto done;
oom:
  nt_error_set("histogram: out of memory (%lld bins)", (long long)bins);
done:
  if (rc) { nt_release(*hist); nt_release(*bin_edges); *hist = *bin_edges = NULL; }
  free(e); free(acc); ix_host_free(&h); ix_host_free(&wh); ix_host_free(&eh);
  return rc;
}

/* ---- searchsorted ------------------------------------------------------------------------ */
/* On a device with ix_searchsorted (setdev.c) nothing leaves it; otherwise
** the binary search runs here on the host copies. */
nt_Tensor *nt_searchsorted(nt_Tensor *seq, nt_Tensor *values, bool right, nt_Tensor *sorter, bool out_int32) {
  if (seq->ndim == 0) NT_FAIL_NULL("searchsorted: sorted_sequence must have at least 1 dimension");
  if (seq->dtype == NT_BOOL || values->dtype == NT_BOOL) NT_FAIL_NULL("searchsorted: bool tensors are not supported");
  bool one = seq->ndim == 1;
  if (!one && (values->ndim != seq->ndim || memcmp(seq->shape, values->shape, sizeof(int64_t) * (size_t)(seq->ndim - 1)))) {
    char a[128], b[128];
    NT_FAIL_NULL("searchsorted: sorted_sequence %s and values %s must have the same leading dimensions (or a 1-D sequence)",
                 nt_shape_str(seq->shape, seq->ndim, a, sizeof a), nt_shape_str(values->shape, values->ndim, b, sizeof b));
  }
  if (sorter && (sorter->ndim != seq->ndim || memcmp(sorter->shape, seq->shape, sizeof(int64_t) * (size_t)seq->ndim) ||
                 nt_dtype_is_float(sorter->dtype) || sorter->dtype == NT_BOOL))
    NT_FAIL_NULL("searchsorted: sorter must be an integer tensor of sorted_sequence's shape");
  int64_t m = seq->shape[seq->ndim - 1];
  if (ix_device_has(seq, IX_DEV_SEARCH) && values->device == seq->device && (!sorter || sorter->device == seq->device)) {
    nt_Tensor *r = ix_searchsorted_device(seq, values, right, sorter);
    if (r && out_int32) { nt_Tensor *t = nt_to_dtype(r, NT_I32); nt_release(r); r = t; }
    return r;
  }
  int64_t per = one ? values->numel : values->ndim ? values->shape[values->ndim - 1] : 1;
  ix_Host s = {0}, v = {0}, o = {0};
  int64_t *res = NULL;
  nt_Tensor *r = NULL;
  if (ix_host(seq, &s) || ix_host(values, &v) || (sorter && ix_host(sorter, &o))) goto done;
  if (sorter)
    for (int64_t i = 0; i < o.n; i++)
      if (o.u.i[i] < 0 || o.u.i[i] >= m) { nt_error_set("searchsorted: sorter index %lld is out of range for a sequence of length %lld", (long long)o.u.i[i], (long long)m); goto done; }
  if (!(res = malloc(8 * (size_t)(v.n ? v.n : 1)))) { nt_error_set("searchsorted: out of memory"); goto done; }
  for (int64_t i = 0; i < v.n; i++) {
    int64_t row = one ? 0 : i / (per ? per : 1), base = row * m;
    int64_t lo = 0, hi = m;   /* first position whose element is > v (right) or >= v (left) */
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2, at = base + (sorter ? o.u.i[base + mid] : mid);
      int c = cmp_at(&s, at, &v, i);
      if (c < 0 || (right && c == 0)) lo = mid + 1; else hi = mid;
    }
    res[i] = lo;
  }
  r = ix_i64_on(res, values->shape, values->ndim, values->device);
  if (r && out_int32) { nt_Tensor *t = nt_to_dtype(r, NT_I32); nt_release(r); r = t; }
done:
  free(res); ix_host_free(&s); ix_host_free(&v); ix_host_free(&o);
  return r;
}

/* ---- nonzero / isin ---------------------------------------------------------------------- */
nt_Tensor *nt_nonzero(nt_Tensor *x) {
  if (ix_device_has(x, IX_DEV_NONZERO)) return ix_nonzero_device(x);
  ix_Host h = {0};
  if (ix_host(x, &h)) return NULL;
  int nd = x->ndim;
  int64_t nnz = 0;
  for (int64_t i = 0; i < h.n; i++) nnz += h.as == NT_I64 ? h.u.i[i] != 0 : h.u.f[i] != 0;   /* NaN counts */
  int64_t *pos = malloc(8 * (size_t)(nnz * nd > 0 ? nnz * nd : 1)), k = 0;
  nt_Tensor *r = NULL;
  if (pos) {
    for (int64_t i = 0; i < h.n; i++) {
      if (!(h.as == NT_I64 ? h.u.i[i] != 0 : h.u.f[i] != 0)) continue;
      int64_t rem = i;
      for (int d = nd - 1; d >= 0; d--) { pos[k * nd + d] = rem % x->shape[d]; rem /= x->shape[d]; }
      k++;
    }
    r = ix_i64_on(pos, (int64_t[]){ nnz, nd }, 2, x->device);
  } else nt_error_set("nonzero: out of memory");
  free(pos); ix_host_free(&h);
  return r;
}

static int cmp_f64(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
  return (x > y) - (x < y);
}
static int cmp_i64(const void *a, const void *b) { int64_t x = *(const int64_t *)a, y = *(const int64_t *)b; return (x > y) - (x < y); }

nt_Tensor *nt_isin(nt_Tensor *elements, nt_Tensor *test, bool invert) {
  if (ix_device_has(elements, IX_DEV_ISIN) && test->device == elements->device) return ix_isin_device(elements, test, invert);
  ix_Host e = {0}, t = {0};
  nt_Tensor *r = NULL;
  bool *hit = NULL;
  if (ix_host(elements, &e) || ix_host(test, &t)) goto done;
  if (e.as != t.as) {   /* mixed: compare as f64, as torch promotes */
    ix_Host *g = e.as == NT_I64 ? &e : &t;
    for (int64_t i = 0; i < g->n; i++) g->u.f[i] = (double)g->u.i[i];
    g->as = NT_F64;
  }
  qsort(t.u.p, (size_t)t.n, 8, t.as == NT_F64 ? cmp_f64 : cmp_i64);
  if (!(hit = malloc((size_t)(e.n ? e.n : 1)))) { nt_error_set("isin: out of memory"); goto done; }
  for (int64_t i = 0; i < e.n; i++) {
    int64_t lo = 0, hi = t.n;
    while (lo < hi) { int64_t mid = lo + (hi - lo) / 2; if (cmp_at(&t, mid, &e, i) < 0) lo = mid + 1; else hi = mid; }
    bool in = lo < t.n && cmp_at(&t, lo, &e, i) == 0 && !(e.as == NT_F64 && isnan(e.u.f[i]));   /* NaN is in nothing */
    hit[i] = in != invert;
  }
  r = nt_from_buffer(hit, NT_BOOL, elements->shape, elements->ndim, NT_BOOL);
  if (r && elements->device != NT_CPU) { nt_Tensor *d = nt_to_device(r, elements->device); nt_release(r); r = d; }
done:
  free(hit); ix_host_free(&e); ix_host_free(&t);
  return r;
}
