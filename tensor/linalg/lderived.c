/*
** linalg/lderived.c — functions built on the factorizations and on public
** ops: pinv, matrix_rank, lstsq, matrix_power, matrix_exp, the norms, cross,
** kron.  Those composed of differentiable ops get their gradients from them;
** pinv and matrix_exp record torch's formulas.
*/
#include "linternal.h"
#include <float.h>

static double dtype_eps(nt_DType dt) { return dt == NT_F64 ? DBL_EPSILON : FLT_EPSILON; }

/* ---- pinv ----------------------------------------------------------------------- */
/* torch's default tolerance: rtol = eps * max(m, n) unless atol is given */
static void default_tols(nt_Tensor *a, double *atol, double *rtol) {
  int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
  if (isnan(*rtol)) *rtol = isnan(*atol) || *atol == 0 ? dtype_eps(a->dtype) * (double)(m > n ? m : n) : 0;
  if (isnan(*atol)) *atol = 0;
}

/* max(atol, rtol * smax) per batch element, as [..., 1] */
static nt_Tensor *tolerance(nt_Tensor *s, double atol, double rtol) {
  nt_Tensor *mx = s->shape[s->ndim - 1] ? nt_max(s, (int[]){ -1 }, 1, true) : NULL;
  if (!mx) {   /* empty: any tolerance */
    int64_t sh[NT_MAXDIM];
    memcpy(sh, s->shape, sizeof(int64_t) * (size_t)s->ndim);
    sh[s->ndim - 1] = 1;
    return nt_full(sh, s->ndim, atol, s->dtype, s->device);
  }
  nt_Tensor *r = nt_binary_scalar_ex(NT_OP_MUL, mx, rtol, NT_SCALAR_FLOAT);
  nt_Tensor *t = r ? nt_binary_scalar_ex(NT_OP_MAXIMUM, r, atol, NT_SCALAR_FLOAT) : NULL;
  nt_release(mx); nt_release(r);
  return t;
}

/* singular (or |eigen|) values and the vectors: A = U diag(s) Vh (hermitian: U = V, Vh = V^T, s = eigenvalues) */
static int spectral(const char *op, nt_Tensor *a, bool hermitian, nt_Tensor **u, nt_Tensor **s, nt_Tensor **vh) {
  (void)op;
  if (!hermitian) return nt_linalg_svd(a, false, u, s, vh);
  nt_Tensor *w, *v;
  if (nt_linalg_eigh(a, false, &w, &v)) return -1;
  *u = v; *s = w; *vh = lin_mT(v);
  return *vh ? 0 : -1;
}

/* torch's pinv_backward */
static int pinv_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *a = n->in[0], *p = n->saved[0];
  int64_t m = a->shape[a->ndim - 2], nn = a->shape[a->ndim - 1];
  nt_Tensor *ph = lin_mT(p), *gh = lin_mT(g), *r = NULL;
  if (m <= nn) {
    nt_Tensor *k = lin_mm(gh, p), *kph = lin_mm(k, ph);
    nt_Tensor *pk = lin_mm(p, k), *pkh = lin_mT(pk);
    nt_Tensor *t3 = lin_mm_(lin_mm(a, p), nt_retain(kph));
    nt_Tensor *t4 = lin_mm_(lin_mm(ph, p), lin_sub_(nt_retain(gh), lin_mm(k, a)));
    r = lin_add_(lin_sub_(lin_sub_(nt_retain(kph), nt_retain(pkh)), t3), t4);
    nt_release(k); nt_release(kph); nt_release(pk); nt_release(pkh);
  } else {
    nt_Tensor *k = lin_mm(p, gh), *phk = lin_mm(ph, k);
    nt_Tensor *kp = lin_mm(k, p), *kph = lin_mT(kp);
    nt_Tensor *t2 = lin_mm_(lin_mm_(lin_sub_(nt_retain(gh), lin_mm(a, k)), nt_retain(p)), nt_retain(ph));
    nt_Tensor *t4 = lin_mm_(lin_mm(phk, p), nt_retain(a));
    r = lin_sub_(lin_add_(lin_sub_(t2, nt_retain(kph)), nt_retain(phk)), t4);
    nt_release(k); nt_release(phk); nt_release(kp); nt_release(kph);
  }
  nt_release(ph); nt_release(gh);
  return (gin[0] = r) ? 0 : -1;
}

nt_Tensor *nt_linalg_pinv(nt_Tensor *a, double atol, double rtol, bool hermitian) {
  const char *op = "linalg.pinv";
  if (lin_check_matrix(op, a, hermitian)) return NULL;
  default_tols(a, &atol, &rtol);
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *u = NULL, *s = NULL, *vh = NULL, *p = NULL;
  if (!spectral(op, a, hermitian, &u, &s, &vh)) {
    nt_Tensor *as = nt_abs(s), *tol = as ? tolerance(as, atol, rtol) : NULL;
    nt_Tensor *keep = tol ? nt_gt(as, tol) : NULL, *inv = nt_unary(NT_OP_RECIPROCAL, s), *z = nt_zeros_like(s);
    nt_Tensor *si = keep && inv && z ? nt_where(keep, inv, z) : NULL;
    p = lin_mm_(lin_mul_(lin_mT(vh), si ? nt_unsqueeze(si, -2) : NULL), lin_mT(u));
    nt_release(as); nt_release(tol); nt_release(keep); nt_release(inv); nt_release(z); nt_release(si);
  }
  nt_release(u); nt_release(s); nt_release(vh);
  nt_set_grad_enabled(prev);
  return lin_finish(p, "LinalgPinvBackward", pinv_backward, a, 1, &p);
}

nt_Tensor *nt_linalg_matrix_rank(nt_Tensor *a, double atol, double rtol, bool hermitian) {
  const char *op = "linalg.matrix_rank";
  if (lin_check_matrix(op, a, hermitian)) return NULL;
  default_tols(a, &atol, &rtol);
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *s = NULL, *w = NULL, *r = NULL;
  int rc = hermitian ? nt_linalg_eigh(a, false, &w, NULL) : nt_linalg_svd(a, false, NULL, &s, NULL);
  if (!rc) {
    nt_Tensor *as = nt_abs(hermitian ? w : s), *tol = as ? tolerance(as, atol, rtol) : NULL;
    nt_Tensor *keep = tol ? nt_gt(as, tol) : NULL;
    r = keep ? nt_sum(keep, (int[]){ -1 }, 1, false) : NULL;
    nt_release(as); nt_release(tol); nt_release(keep);
  }
  nt_release(s); nt_release(w);
  nt_set_grad_enabled(prev);
  return r;
}

/* ---- lstsq ---------------------------------------------------------------------- */
int nt_linalg_lstsq(nt_Tensor *a, nt_Tensor *b, double rcond, nt_Tensor **sol, nt_Tensor **res, nt_Tensor **rank, nt_Tensor **sv) {
  const char *op = "linalg.lstsq";
  *sol = *res = *rank = *sv = NULL;
  if (lin_check_matrix(op, a, false) || lin_check_float(op, b)) return -1;
  if (a->dtype != b->dtype || a->device != b->device)
    NT_FAIL("%s: expected A and B of one dtype and device, got %s/%s and %s/%s", op, nt_dtype_name(a->dtype),
            nt_device_name(a->device), nt_dtype_name(b->dtype), nt_device_name(b->device));
  int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
  bool vec = b->ndim == 1;
  if (vec ? b->shape[0] != m : (b->ndim < 2 || b->shape[b->ndim - 2] != m))
    NT_FAIL("%s: A has %lld rows but B has %lld", op, (long long)m, (long long)(b->ndim >= 2 ? b->shape[b->ndim - 2] : b->shape[0]));
  double atol = NAN;
  default_tols(a, &atol, &rcond);
  nt_Tensor *bm = vec ? nt_unsqueeze(b, -1) : nt_retain(b);
  nt_Tensor *p = bm ? nt_linalg_pinv(a, 0, rcond, false) : NULL, *x = p ? nt_matmul(p, bm) : NULL;
  if (x) {
    bool prev = nt_set_grad_enabled(false);
    *rank = nt_linalg_matrix_rank(a, 0, rcond, false);
    if (*rank) nt_linalg_svd(a, false, NULL, sv, NULL);
    nt_set_grad_enabled(prev);
    double minrank = 0;
    nt_Tensor *mr = *rank && (*rank)->numel ? nt_min(*rank, NULL, 0, false) : NULL;
    if (mr) nt_item(mr, &minrank);
    nt_release(mr);
    if (*sv && m > n && (lin_batch(a) == 0 || minrank == (double)n)) {
      /* squared residual norms per column: sum over rows of (A X - B)^2 */
      nt_Tensor *d = lin_sub_(lin_mm(a, x), nt_retain(bm)), *d2 = d ? nt_mul(d, d) : NULL;
      nt_Tensor *r = d2 ? nt_sum(d2, (int[]){ -2 }, 1, false) : NULL;
      *res = r && vec ? nt_squeeze(r, -1) : nt_retain(r);
      nt_release(d); nt_release(d2); nt_release(r);
    } else if (*sv) *res = nt_empty((int64_t[]){ 0 }, 1, a->dtype, a->device);
    *sol = *res ? (vec ? nt_squeeze(x, -1) : nt_retain(x)) : NULL;
  }
  nt_release(bm); nt_release(p); nt_release(x);
  if (*sol) return 0;
  nt_release(*res); nt_release(*rank); nt_release(*sv);
  *sol = *res = *rank = *sv = NULL;
  return -1;
}

/* ---- matrix_power --------------------------------------------------------------- */
nt_Tensor *nt_linalg_matrix_power(nt_Tensor *a, int64_t n) {
  const char *op = "linalg.matrix_power";
  lin_init();
  if (a->ndim < 2 || a->shape[a->ndim - 1] != a->shape[a->ndim - 2]) {
    char b[96];
    NT_FAIL_NULL("%s: expected square matrices [..., n, n], got shape %s", op, nt_shape_str(a->shape, a->ndim, b, sizeof b));
  }
  if (n == 0) {
    nt_Tensor *e = nt_eye_on(a->shape[a->ndim - 1], a->shape[a->ndim - 1], a->dtype, a->device);
    nt_Tensor *r = e ? nt_expand(e, a->shape, a->ndim) : NULL, *c = r ? nt_contiguous(r) : NULL;
    nt_release(e); nt_release(r);
    return c;
  }
  nt_Tensor *base = n < 0 ? nt_linalg_inv(a) : nt_retain(a), *res = NULL;
  uint64_t k = n < 0 ? (uint64_t)0 - (uint64_t)n : (uint64_t)n;
  /* binary powering: O(log n) products */
  while (base && k) {
    if (k & 1) {
      nt_Tensor *r = res ? nt_matmul(res, base) : nt_retain(base);
      nt_release(res);
      if (!(res = r)) break;
    }
    k >>= 1;
    if (k) { nt_Tensor *b2 = nt_matmul(base, base); nt_release(base); base = b2; }
  }
  if (!base) { nt_release(res); return NULL; }
  nt_release(base);
  return res;
}

/* ---- matrix_exp ----------------------------------------------------------------- */
/* Scaling and squaring with the [13/13] Pade approximant (Higham 2005): A is
** scaled by 2^-s so its 1-norm is at most theta_13 (one s for the batch: the
** largest), exp(A/2^s) = (V - U)^-1 (V + U), then squared s times.  LAPACK has
** no matrix exponential; every step is a GEMM or an LU solve. */
static nt_Tensor *axpy_(nt_Tensor *acc, double c, nt_Tensor *x) {   /* acc + c x, releasing acc */
  nt_Tensor *cx = x ? nt_binary_scalar_ex(NT_OP_MUL, x, c, NT_SCALAR_FLOAT) : NULL;
  if (!acc) return cx;
  return lin_add_(acc, cx);
}

static nt_Tensor *expm_raw(nt_Tensor *a) {
  static const double b[14] = { 64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
                                129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
                                40840800., 960960., 16380., 182., 1. };
  const double theta13 = 5.371920351148152;
  int64_t n = a->shape[a->ndim - 1];
  if (a->numel == 0) return nt_clone(a);
  nt_Tensor *ab = nt_abs(a), *cs = ab ? nt_sum(ab, (int[]){ -2 }, 1, false) : NULL, *mx = cs ? nt_max(cs, NULL, 0, false) : NULL;
  double norm = 0;
  int rc = mx ? nt_item(mx, &norm) : -1;
  nt_release(ab); nt_release(cs); nt_release(mx);
  if (rc) return NULL;
  if (!isfinite(norm)) NT_FAIL_NULL("linalg.matrix_exp: the matrix has non-finite entries");
  int s = norm > theta13 ? (int)ceil(log2(norm / theta13)) : 0;
  if (s > 1000) s = 1000;
  nt_Tensor *x = nt_binary_scalar_ex(NT_OP_MUL, a, ldexp(1.0, -s), NT_SCALAR_FLOAT);
  nt_Tensor *e = lin_eye_like(a, n);
  nt_Tensor *x2 = lin_mm(x, x), *x4 = lin_mm(x2, x2), *x6 = lin_mm(x4, x2);
  nt_Tensor *u1 = axpy_(axpy_(axpy_(NULL, b[13], x6), b[11], x4), b[9], x2);
  nt_Tensor *u2 = axpy_(axpy_(axpy_(axpy_(lin_mm(x6, u1), b[7], x6), b[5], x4), b[3], x2), b[1], e);
  nt_Tensor *u = lin_mm(x, u2);
  nt_Tensor *v1 = axpy_(axpy_(axpy_(NULL, b[12], x6), b[10], x4), b[8], x2);
  nt_Tensor *v = axpy_(axpy_(axpy_(axpy_(lin_mm(x6, v1), b[6], x6), b[4], x4), b[2], x2), b[0], e);
  nt_Tensor *p = u && v ? nt_add(v, u) : NULL, *q = u && v ? nt_sub(v, u) : NULL;
  nt_Tensor *r = p && q ? nt_linalg_solve(q, p, true) : NULL;
  for (int i = 0; i < s && r; i++) { nt_Tensor *r2 = nt_matmul(r, r); nt_release(r); r = r2; }
  nt_release(x); nt_release(e); nt_release(x2); nt_release(x4); nt_release(x6); nt_release(u1); nt_release(u2);
  nt_release(u); nt_release(v1); nt_release(v); nt_release(p); nt_release(q);
  return r;
}

/* gA = the upper-right block of exp([[A^T, g], [0, A^T]]) (Mathias 1996) */
static int expm_backward(nt_Node *nd, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *a = nd->in[0];
  int64_t n = a->shape[a->ndim - 1];
  nt_Tensor *at = lin_mT(a), *z = nt_zeros_like(g);
  nt_Tensor *atc = at ? nt_contiguous(at) : NULL;
  nt_Tensor *top = atc && z ? nt_concat((nt_Tensor *[]){ atc, g }, 2, -1) : NULL;
  nt_Tensor *bot = top ? nt_concat((nt_Tensor *[]){ z, atc }, 2, -1) : NULL;
  nt_Tensor *big = bot ? nt_concat((nt_Tensor *[]){ top, bot }, 2, -2) : NULL;
  nt_Tensor *eb = big ? expm_raw(big) : NULL;
  nt_Tensor *rows = eb ? nt_narrow(eb, -2, 0, n) : NULL, *blk = rows ? nt_narrow(rows, -1, n, n) : NULL;
  gin[0] = blk ? nt_contiguous(blk) : NULL;
  nt_release(at); nt_release(z); nt_release(atc); nt_release(top); nt_release(bot); nt_release(big);
  nt_release(eb); nt_release(rows); nt_release(blk);
  return gin[0] ? 0 : -1;
}

nt_Tensor *nt_linalg_matrix_exp(nt_Tensor *a) {
  if (lin_check_matrix("linalg.matrix_exp", a, true)) return NULL;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *r = expm_raw(a);
  nt_set_grad_enabled(prev);
  return lin_finish(r, "LinalgMatrixExpBackward", expm_backward, a, 0, NULL);
}

/* ---- norms ---------------------------------------------------------------------- */
nt_Tensor *nt_linalg_vector_norm(nt_Tensor *x, double p, const int *ax, int na, bool keep) {
  if (!nt_dtype_is_float(x->dtype)) NT_FAIL_NULL("linalg.vector_norm: expected a floating-point tensor, got %s", nt_dtype_name(x->dtype));
  if (!na) ax = NULL;
  if (p == 2) {
    /* sqrt(s) with s = sum x^2, its gradient masked to 0 where s == 0 (torch's
    ** subgradient): sqrt(s + (s == 0)) - (s == 0) has sqrt(s)'s value and a
    ** finite derivative at s == 0, times d s = 2x = 0 there */
    nt_Tensor *sq = nt_mul(x, x), *s = sq ? nt_sum(sq, ax, na, keep) : NULL;
    nt_Tensor *z = s ? nt_binary_scalar_ex(NT_OP_EQ, s, 0, NT_SCALAR_INT) : NULL, *zf = z ? nt_to_dtype(z, s->dtype) : NULL;
    nt_Tensor *sz = zf ? nt_add(s, zf) : NULL, *rt = sz ? nt_sqrt(sz) : NULL;
    nt_Tensor *r = rt ? nt_sub(rt, zf) : NULL;
    nt_release(sq); nt_release(s); nt_release(z); nt_release(zf); nt_release(sz); nt_release(rt);
    return r;
  }
  if (isinf(p)) {
    nt_Tensor *a = nt_abs(x), *r = a ? nt_reduce(p > 0 ? NT_OP_MAX : NT_OP_MIN, a, ax, na, keep) : NULL;
    nt_release(a);
    return r;
  }
  if (p == 0) {
    nt_Tensor *nz = nt_binary_scalar_ex(NT_OP_NE, x, 0, NT_SCALAR_INT), *f = nz ? nt_to_dtype(nz, x->dtype) : NULL;
    nt_Tensor *r = f ? nt_sum(f, ax, na, keep) : NULL;
    nt_release(nz); nt_release(f);
    return r;
  }
  nt_Tensor *a = nt_abs(x), *ap = a ? nt_binary_scalar_ex(NT_OP_POW, a, p, NT_SCALAR_FLOAT) : NULL;
  nt_Tensor *s = ap ? nt_sum(ap, ax, na, keep) : NULL;
  nt_Tensor *r = s ? nt_binary_scalar_ex(NT_OP_POW, s, 1.0 / p, NT_SCALAR_FLOAT) : NULL;
  nt_release(a); nt_release(ap); nt_release(s);
  return r;
}

/* x with axes d0, d1 moved to the end (a view) */
static nt_Tensor *dims_last(nt_Tensor *x, int d0, int d1) {
  int perm[NT_MAXDIM], k = 0;
  for (int i = 0; i < x->ndim; i++)
    if (i != d0 && i != d1) perm[k++] = i;
  perm[k++] = d0; perm[k++] = d1;
  return nt_permute(x, perm, k);
}

nt_Tensor *nt_linalg_matrix_norm(nt_Tensor *x, const char *ord_s, double ord, int d0, int d1, bool keep) {
  const char *op = "linalg.matrix_norm";
  lin_init();
  if (lin_check_float(op, x)) return NULL;
  if (x->ndim < 2) NT_FAIL_NULL("%s: expected a tensor of at least 2 dimensions, got %dD", op, x->ndim);
  int a0 = d0 < 0 ? d0 + x->ndim : d0, a1 = d1 < 0 ? d1 + x->ndim : d1;
  if (a0 < 0 || a0 >= x->ndim || a1 < 0 || a1 >= x->ndim || a0 == a1)
    NT_FAIL_NULL("%s: dim must be two different axes of a %dD tensor, got (%d, %d)", op, x->ndim, d0, d1);
  if (ord_s && strcmp(ord_s, "fro") && strcmp(ord_s, "nuc"))
    NT_FAIL_NULL("%s: ord must be \"fro\", \"nuc\", 1, -1, 2, -2, inf or -inf, got \"%s\"", op, ord_s);
  if (!ord_s && !(fabs(ord) == 1 || fabs(ord) == 2 || isinf(ord)))
    NT_FAIL_NULL("%s: ord must be \"fro\", \"nuc\", 1, -1, 2, -2, inf or -inf, got %g", op, ord);
  if (ord_s && !strcmp(ord_s, "fro")) return nt_linalg_vector_norm(x, 2, (int[]){ a0, a1 }, 2, keep);
  nt_Tensor *r = NULL;
  if (ord_s || fabs(ord) == 2) {   /* from the singular values */
    nt_Tensor *xm = dims_last(x, a0, a1), *s = NULL;
    if (xm && !nt_linalg_svd(xm, false, NULL, &s, NULL))
      r = ord_s ? nt_sum(s, (int[]){ -1 }, 1, false) : nt_reduce(ord > 0 ? NT_OP_MAX : NT_OP_MIN, s, (int[]){ -1 }, 1, false);
    nt_release(xm); nt_release(s);
    if (r && keep) {
      int lo = a0 < a1 ? a0 : a1, hi = a0 < a1 ? a1 : a0;
      nt_Tensor *u = nt_unsqueeze(r, lo), *u2 = u ? nt_unsqueeze(u, hi) : NULL;
      nt_release(r); nt_release(u);
      r = u2;
    }
    return r;
  }
  /* 1: max over columns of the column sums of |x|; inf: over rows (the row sums) */
  int sum_ax = isinf(ord) ? a1 : a0, red_ax = isinf(ord) ? a0 : a1;
  nt_Tensor *ab = nt_abs(x), *s = ab ? nt_sum(ab, &sum_ax, 1, true) : NULL;
  r = s ? nt_reduce(ord > 0 ? NT_OP_MAX : NT_OP_MIN, s, &red_ax, 1, true) : NULL;
  nt_release(ab); nt_release(s);
  if (r && !keep) {
    int hi = a0 < a1 ? a1 : a0, lo = a0 < a1 ? a0 : a1;
    nt_Tensor *q = nt_squeeze(r, hi), *q2 = q ? nt_squeeze(q, lo) : NULL;
    nt_release(r); nt_release(q);
    r = q2;
  }
  return r;
}

/* ---- cross, kron ---------------------------------------------------------------- */
nt_Tensor *nt_linalg_cross(nt_Tensor *a, nt_Tensor *b, int dim) {
  const char *op = "linalg.cross";
  int64_t sh[NT_MAXDIM];
  int nd;
  if (nt_broadcast_shapes(op, a->shape, a->ndim, b->shape, b->ndim, sh, &nd)) return NULL;
  int d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) NT_FAIL_NULL("%s: dim %d is out of range for %dD tensors", op, dim, nd);
  if (sh[d] != 3) NT_FAIL_NULL("%s: dimension %d must have size 3, got %lld", op, dim, (long long)sh[d]);
  nt_Tensor *ab = nt_broadcast_to(a, sh, nd), *bb = ab ? nt_broadcast_to(b, sh, nd) : NULL;
  nt_Tensor *ac[3] = {0}, *bc[3] = {0}, *c[3] = {0}, *r = NULL;
  for (int i = 0; i < 3 && bb; i++) { ac[i] = nt_select(ab, d, i); bc[i] = nt_select(bb, d, i); }
  for (int i = 0; i < 3; i++) {   /* c_i = a_{i+1} b_{i+2} - a_{i+2} b_{i+1} */
    int j = (i + 1) % 3, k = (i + 2) % 3;
    c[i] = ac[j] && bc[k] && ac[k] && bc[j] ? lin_sub_(nt_mul(ac[j], bc[k]), nt_mul(ac[k], bc[j])) : NULL;
  }
  if (c[0] && c[1] && c[2]) r = nt_stack(c, 3, d);
  for (int i = 0; i < 3; i++) { nt_release(ac[i]); nt_release(bc[i]); nt_release(c[i]); }
  nt_release(ab); nt_release(bb);
  return r;
}

nt_Tensor *nt_linalg_kron(nt_Tensor *a, nt_Tensor *b) {
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  if (2 * nd > NT_MAXDIM) NT_FAIL_NULL("kron: at most %d dimensions, got %d", NT_MAXDIM / 2, nd);
  /* a as [a0, 1, a1, 1, ...], b as [1, b0, 1, b1, ...]: their product is
  ** [a0, b0, a1, b1, ...], which reshapes to [a0 b0, a1 b1, ...] */
  int64_t sa[NT_MAXDIM], sb[NT_MAXDIM], so[NT_MAXDIM];
  for (int i = 0; i < nd; i++) {
    int64_t x = i < nd - a->ndim ? 1 : a->shape[i - (nd - a->ndim)], y = i < nd - b->ndim ? 1 : b->shape[i - (nd - b->ndim)];
    sa[2 * i] = x; sa[2 * i + 1] = 1; sb[2 * i] = 1; sb[2 * i + 1] = y; so[i] = x * y;
  }
  nt_Tensor *ar = nt_reshape(a, sa, 2 * nd), *br = ar ? nt_reshape(b, sb, 2 * nd) : NULL;
  nt_Tensor *p = br ? nt_mul(ar, br) : NULL, *r = p ? nt_reshape(p, so, nd) : NULL;
  nt_release(ar); nt_release(br); nt_release(p);
  return r;
}
