/*
** index/arrange.c — roll, diff, meshgrid, rot90, diagonal, diag_embed, diag,
** trace, tensordot: compositions of public views and differentiable ops
** (slice, concat, flip, transpose, expand, index_select, where, matmul), so
** each has its parts' gradients and runs on every device.  diagonal is a
** copy (index_select on the flattened pair of axes), not torch's view: a
** write into it does not reach x.
*/
#include "ixinternal.h"
#include <stdlib.h>
#include <string.h>

/* ---- roll --------------------------------------------------------------------------------- */
static nt_Tensor *roll1(nt_Tensor *x, int64_t shift, int ax) {
  int64_t n = x->shape[ax];
  if (n == 0) return nt_retain(x);
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return nt_retain(x);
  return X_cat2(nt_slice(x, ax, n - s, n, 1), nt_slice(x, ax, 0, n - s, 1), ax);
}

nt_Tensor *nt_roll(nt_Tensor *x, const int64_t *shifts, const int *axes, int naxes) {
  if (naxes == 0) {
    int64_t n = x->numel;
    nt_Tensor *f = nt_reshape(x, &n, 1), *r = f ? roll1(f, shifts[0], 0) : NULL;
    nt_release(f);
    nt_Tensor *y = r ? nt_reshape(r, x->shape, x->ndim) : NULL;
    nt_release(r);
    return y;
  }
  nt_Tensor *y = nt_retain(x);
  for (int i = 0; i < naxes && y; i++) {
    int ax = nt_norm_axis("roll", axes[i], x->ndim ? x->ndim : 1);
    if (ax < 0) { nt_release(y); return NULL; }
    if (x->ndim == 0) continue;
    nt_Tensor *t = roll1(y, shifts[i], ax);
    nt_release(y); y = t;
  }
  return y;
}

/* ---- diff --------------------------------------------------------------------------------- */
nt_Tensor *nt_diff(nt_Tensor *x, int64_t n, int axis, nt_Tensor *prepend, nt_Tensor *append) {
  if (x->ndim == 0) NT_FAIL_NULL("diff: the input must have at least 1 dimension");
  if (n < 0) NT_FAIL_NULL("diff: order n must be non-negative, got %lld", (long long)n);
  int ax = nt_norm_axis("diff", axis, x->ndim);
  if (ax < 0) return NULL;
  nt_Tensor *parts[3]; int np = 0;
  if (prepend) parts[np++] = prepend;
  parts[np++] = x;
  if (append) parts[np++] = append;
  for (int i = 0; i < np; i++)
    if (parts[i]->ndim != x->ndim) NT_FAIL_NULL("diff: prepend and append must have the input's number of dimensions (%d), got %d", x->ndim, parts[i]->ndim);
  nt_Tensor *y = np > 1 ? nt_concat(parts, np, ax) : nt_retain(x);
  /* each round shortens the axis by one: at most its size rounds do anything */
  for (int64_t k = 0; y && k < n && y->shape[ax] > 0; k++) {
    int64_t m = y->shape[ax];
    nt_Tensor *hi = nt_slice(y, ax, 1, m, 1), *lo = nt_slice(y, ax, 0, m - 1, 1);
    nt_release(y);
    y = X_bin(x->dtype == NT_BOOL ? NT_OP_NE : NT_OP_SUB, hi, lo);   /* bool: logical xor, as torch */
  }
  return y;
}

/* ---- meshgrid ----------------------------------------------------------------------------- */
int nt_meshgrid(nt_Tensor *const *ts, int n, bool xy, nt_Tensor **out) {
  if (n < 1 || n > NT_MAXDIM) NT_FAIL("meshgrid: expects 1 to %d tensors, got %d", NT_MAXDIM, n);
  int64_t shape[NT_MAXDIM];
  for (int i = 0; i < n; i++) {
    if (ts[i]->ndim > 1) NT_FAIL("meshgrid: tensor %d must be 0-D or 1-D, got %d dimensions", i, ts[i]->ndim);
    if (ts[i]->dtype != ts[0]->dtype || ts[i]->device != ts[0]->device) NT_FAIL("meshgrid: all tensors must have the same dtype and device");
    shape[i] = ts[i]->numel;
  }
  bool swap = xy && n >= 2;
  if (swap) { int64_t t = shape[0]; shape[0] = shape[1]; shape[1] = t; }
  for (int i = 0; i < n; i++) out[i] = NULL;
  for (int i = 0; i < n; i++) {
    int at = swap && i < 2 ? 1 - i : i;   /* the grid axis tensor i runs along */
    int64_t sh[NT_MAXDIM];
    for (int d = 0; d < n; d++) sh[d] = d == at ? shape[d] : 1;
    nt_Tensor *r = nt_reshape(ts[i], sh, n);
    out[i] = r ? nt_expand(r, shape, n) : NULL;
    nt_release(r);
    if (!out[i]) { for (int j = 0; j < i; j++) { nt_release(out[j]); out[j] = NULL; } return -1; }
  }
  return n;
}

/* ---- rot90 -------------------------------------------------------------------------------- */
nt_Tensor *nt_rot90(nt_Tensor *x, int64_t k, int d0, int d1) {
  if (x->ndim < 2) NT_FAIL_NULL("rot90: the input must have at least 2 dimensions, got %d", x->ndim);
  int a = nt_norm_axis("rot90", d0, x->ndim), b = a < 0 ? -1 : nt_norm_axis("rot90", d1, x->ndim);
  if (b < 0) return NULL;
  if (a == b) NT_FAIL_NULL("rot90: the two dims must differ, got %d and %d", d0, d1);
  switch (((k % 4) + 4) % 4) {
  case 1: { nt_Tensor *f = nt_flip(x, &b, 1), *r = f ? nt_transpose(f, a, b) : NULL; nt_release(f); return r; }
  case 2: return nt_flip(x, (int[]){ a, b }, 2);
  case 3: { nt_Tensor *f = nt_flip(x, &a, 1), *r = f ? nt_transpose(f, a, b) : NULL; nt_release(f); return r; }
  default: return nt_clone(x);
  }
}

/* ---- diagonal / diag_embed / diag / trace ------------------------------------------------- */
/* the length of the offset diagonal of an n1 x n2 matrix, and the flat index of its start */
static int64_t diag_len(int64_t n1, int64_t n2, int64_t off, int64_t *start) {
  int64_t len = off >= 0 ? (n2 - off < n1 ? n2 - off : n1) : (n1 + off < n2 ? n1 + off : n2);
  *start = off >= 0 ? off : -off * n2;
  return len > 0 ? len : 0;
}

nt_Tensor *nt_diagonal(nt_Tensor *x, int64_t offset, int d1, int d2) {
  if (x->ndim < 2) NT_FAIL_NULL("diagonal: the input must have at least 2 dimensions, got %d", x->ndim);
  int a = nt_norm_axis("diagonal", d1, x->ndim), b = a < 0 ? -1 : nt_norm_axis("diagonal", d2, x->ndim);
  if (b < 0) return NULL;
  if (a == b) NT_FAIL_NULL("diagonal: dim1 and dim2 must differ, got %d and %d", d1, d2);
  int perm[NT_MAXDIM], k = 0;
  for (int d = 0; d < x->ndim; d++) if (d != a && d != b) perm[k++] = d;
  perm[k++] = a; perm[k++] = b;
  int64_t n1 = x->shape[a], n2 = x->shape[b], start, len = diag_len(n1, n2, offset, &start);
  int64_t sh[NT_MAXDIM];
  for (int d = 0; d < x->ndim - 2; d++) sh[d] = x->shape[perm[d]];
  sh[x->ndim - 2] = n1 * n2;
  nt_Tensor *p = nt_permute(x, perm, x->ndim), *f = p ? nt_reshape(p, sh, x->ndim - 1) : NULL;
  nt_release(p);
  nt_Tensor *idx = f ? nt_arange_on((double)start, (double)start + (double)len * (double)(n2 + 1), (double)(n2 + 1), NT_I64, x->device) : NULL;
  if (idx && idx->numel != len) {   /* arange's float steps: never trust them for sizes */
    nt_release(idx); idx = NULL; nt_error_set("diagonal: internal error (index length)");
  }
  nt_Tensor *r = idx ? nt_index_select(f, x->ndim - 2, idx) : NULL;
  nt_release(f); nt_release(idx);
  return r;
}

nt_Tensor *nt_diag_embed(nt_Tensor *x, int64_t offset, int d1, int d2) {
  if (x->ndim < 1) NT_FAIL_NULL("diag_embed: the input must have at least 1 dimension");
  int nd = x->ndim + 1;
  int a = nt_norm_axis("diag_embed", d1, nd), b = a < 0 ? -1 : nt_norm_axis("diag_embed", d2, nd);
  if (b < 0) return NULL;
  if (a == b) NT_FAIL_NULL("diag_embed: dim1 and dim2 must differ, got %d and %d", d1, d2);
  int64_t n = x->shape[x->ndim - 1], k = offset < 0 ? -offset : offset, N = n + k;
  if (nt_check_shape("diag_embed", (int64_t[]){ N, N }, 2, NULL)) return NULL;
  /* D[..., i, j] = x[..., i] where i == j, else 0 (where, not a product: inf * 0 is NaN) */
  nt_Tensor *eye = nt_eye_on(n, n, NT_BOOL, x->device);
  nt_Tensor *D = X_where(eye, nt_unsqueeze(x, -1), ix_const_like(x, 0));
  if (D && k) {   /* pad to N x N: offset > 0 puts D in rows [0, n), columns [k, N) */
    int64_t sh[NT_MAXDIM];
    memcpy(sh, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    sh[nd - 2] = n; sh[nd - 1] = k;
    nt_Tensor *zc = nt_zeros(sh, nd, x->dtype, x->device);
    D = offset > 0 ? X_cat2(zc, D, nd - 1) : X_cat2(D, zc, nd - 1);
    sh[nd - 2] = k; sh[nd - 1] = N;
    nt_Tensor *zr = D ? nt_zeros(sh, nd, x->dtype, x->device) : NULL;
    D = offset > 0 ? X_cat2(D, zr, nd - 2) : X_cat2(zr, D, nd - 2);
  }
  if (!D) return NULL;
  /* D's axes: x's batch axes, then rows, columns; rows go to a, columns to b */
  int perm[NT_MAXDIM];
  for (int d = 0, src = 0; d < nd; d++) perm[d] = d == a ? nd - 2 : d == b ? nd - 1 : src++;
  nt_Tensor *r = nt_permute(D, perm, nd);
  nt_release(D);
  return r;
}

nt_Tensor *nt_diag(nt_Tensor *x, int64_t k) {
  if (x->ndim == 1) return nt_diag_embed(x, k, 0, 1);
  if (x->ndim == 2) return nt_diagonal(x, k, 0, 1);
  NT_FAIL_NULL("diag: the input must be 1-D or 2-D, got %d dimensions", x->ndim);
}

nt_Tensor *nt_trace(nt_Tensor *x) {
  if (x->ndim != 2) NT_FAIL_NULL("trace: the input must be 2-D, got %d dimensions", x->ndim);
  nt_Tensor *d = nt_diagonal(x, 0, 0, 1), *r = d ? nt_sum(d, NULL, 0, false) : NULL;
  nt_release(d);
  return r;
}

/* ---- tensordot ---------------------------------------------------------------------------- */
nt_Tensor *nt_tensordot(nt_Tensor *a, nt_Tensor *b, const int *adims, const int *bdims, int n) {
  if (n < 0 || n > a->ndim || n > b->ndim) NT_FAIL_NULL("tensordot: %d contracted dims for tensors of %d and %d dimensions", n, a->ndim, b->ndim);
  bool ua[NT_MAXDIM] = { 0 }, ub[NT_MAXDIM] = { 0 };
  int pa[NT_MAXDIM], pb[NT_MAXDIM], ka = 0, kb = 0;
  int64_t K = 1, Fa = 1, Fb = 1, osh[2 * NT_MAXDIM];
  int on = 0;
  int ax[NT_MAXDIM], bx[NT_MAXDIM];
  for (int i = 0; i < n; i++) {
    if ((ax[i] = nt_norm_axis("tensordot", adims[i], a->ndim)) < 0 || (bx[i] = nt_norm_axis("tensordot", bdims[i], b->ndim)) < 0) return NULL;
    if (ua[ax[i]] || ub[bx[i]]) NT_FAIL_NULL("tensordot: a dim is contracted twice");
    ua[ax[i]] = ub[bx[i]] = true;
    if (a->shape[ax[i]] != b->shape[bx[i]])
      NT_FAIL_NULL("tensordot: contracted dimensions differ in size: a's dim %d is %lld, b's dim %d is %lld", ax[i], (long long)a->shape[ax[i]], bx[i], (long long)b->shape[bx[i]]);
    K *= a->shape[ax[i]];
  }
  for (int d = 0; d < a->ndim; d++) if (!ua[d]) { pa[ka++] = d; Fa *= a->shape[d]; osh[on++] = a->shape[d]; }
  for (int i = 0; i < n; i++) pa[ka++] = ax[i];
  for (int i = 0; i < n; i++) pb[kb++] = bx[i];
  for (int d = 0; d < b->ndim; d++) if (!ub[d]) { pb[kb++] = d; Fb *= b->shape[d]; osh[on++] = b->shape[d]; }
  if (on > NT_MAXDIM) NT_FAIL_NULL("tensordot: the result would have %d dimensions (at most %d)", on, NT_MAXDIM);
  nt_Tensor *A = nt_permute(a, pa, a->ndim), *B = nt_permute(b, pb, b->ndim);
  nt_Tensor *A2 = A ? nt_reshape(A, (int64_t[]){ Fa, K }, 2) : NULL, *B2 = B ? nt_reshape(B, (int64_t[]){ K, Fb }, 2) : NULL;
  nt_release(A); nt_release(B);
  nt_Tensor *m = A2 && B2 ? nt_matmul(A2, B2) : NULL;
  nt_release(A2); nt_release(B2);
  nt_Tensor *r = m ? nt_reshape(m, osh, on) : NULL;
  nt_release(m);
  return r;
}
