/*
** linalg/llu.c — what LU and triangular solves give: inv, solve, det,
** slogdet, solve_triangular, with their backward formulas (torch's).
**
** The forward passes run with grad mode off on column-major copies
** (linternal.h); one node per output is recorded on the caller's tensors.
*/
#include "linternal.h"

/* ---- raw pieces (no autograd) ------------------------------------------------ */

/* the LU factorization of a [..., n, n]: column-major factor, pivots, info */
static int lu_raw(nt_Tensor *a, nt_Tensor **lu, nt_Tensor **piv, nt_Tensor **info) {
  int nb = a->ndim - 2;
  int64_t ps[NT_MAXDIM];
  memcpy(ps, a->shape, sizeof(int64_t) * (size_t)(nb + 1));
  *lu = lin_colmajor(a);
  *piv = *lu ? nt_zeros(ps, nb + 1, NT_I32, a->device) : NULL;
  *info = *piv ? lin_info_tensor(a->shape, nb, a->device) : NULL;
  nt_KernelArgs k = { .out = *lu, .in = { *piv, *info }, .nin = 2 };
  if (*info && !lin_run(lin_ops.getrf, a->device, &k)) return 0;
  nt_release(*lu); nt_release(*piv); nt_release(*info);
  *lu = *piv = *info = NULL;
  return -1;
}

#define SINGULAR "the matrix is singular: entry %d of the diagonal of its LU factorization is exactly zero"

/* X = A^-1 B (or A^-T B) from A's LU; B [..., n, k] with A's batch; a row-major result */
static nt_Tensor *lu_solve_raw(nt_Tensor *lu, nt_Tensor *piv, nt_Tensor *b, bool trans) {
  nt_Tensor *x = lin_colmajor(b);
  nt_KernelArgs k = { .out = x, .in = { lu, piv }, .nin = 2, .iarg = { trans }, .niarg = 1 };
  if (!x || lin_run(lin_ops.getrs, b->device, &k)) { nt_release(x); return NULL; }
  nt_Tensor *r = lin_rowmajor(x);
  nt_release(x);
  return r;
}

/* A^-1 (check: fail on a singular batch element, naming op) and the info */
static nt_Tensor *inv_raw(const char *op, nt_Tensor *a, bool check, nt_Tensor **info_out) {
  nt_Tensor *lu, *piv, *info, *x = NULL;
  if (lu_raw(a, &lu, &piv, &info)) return NULL;
  if (!check || !lin_check_info(op, info, a->shape, a->ndim - 2, SINGULAR)) {
    int64_t n = a->shape[a->ndim - 1];
    nt_Tensor *e = lin_eye_like(a, n), *eb = e ? nt_expand(e, a->shape, a->ndim) : NULL;
    x = eb ? lu_solve_raw(lu, piv, eb, false) : NULL;   /* the identity is its own column-major copy */
    nt_release(e); nt_release(eb);
  }
  if (x && info_out) *info_out = nt_retain(info);
  nt_release(lu); nt_release(piv); nt_release(info);
  return x;
}

/* A^-1 B for A, B with the same batch (no autograd); fails on a singular A */
static nt_Tensor *solve_raw(const char *op, nt_Tensor *a, nt_Tensor *b, bool trans) {
  nt_Tensor *lu, *piv, *info, *x = NULL;
  if (lu_raw(a, &lu, &piv, &info)) return NULL;
  if (!lin_check_info(op, info, a->shape, a->ndim - 2, SINGULAR)) x = lu_solve_raw(lu, piv, b, trans);
  nt_release(lu); nt_release(piv); nt_release(info);
  return x;
}

/* T^-1 B (or T^-T B) for a triangular T; batch of B = batch of T */
nt_Tensor *lin_tri_raw(const char *op, nt_Tensor *t, nt_Tensor *b, bool upper, bool trans, bool unit) {
  nt_Tensor *tb = lin_colmajor(t), *x = tb ? lin_colmajor(b) : NULL;
  nt_Tensor *info = x ? lin_info_tensor(t->shape, t->ndim - 2, t->device) : NULL;
  nt_Tensor *r = NULL;
  nt_KernelArgs k = { .out = x, .in = { tb, info }, .nin = 2, .iarg = { upper, trans, unit }, .niarg = 3 };
  if (info && !lin_run(lin_ops.trtrs, t->device, &k) &&
      !lin_check_info(op, info, t->shape, t->ndim - 2, "the triangular matrix is singular: diagonal entry %d is zero"))
    r = lin_rowmajor(x);
  nt_release(tb); nt_release(x); nt_release(info);
  return r;
}

/* a [..., n, n] and b [..., n, k] expanded to their broadcast batch (differentiable views) */
static int bcast_pair(const char *op, nt_Tensor *a, nt_Tensor *b, nt_Tensor **ae, nt_Tensor **be) {
  int64_t bs[NT_MAXDIM + 2];
  int nbs;
  if (nt_broadcast_shapes(op, a->shape, a->ndim - 2, b->shape, b->ndim - 2, bs, &nbs)) return -1;
  if (nbs + 2 > NT_MAXDIM) NT_FAIL("%s: more than %d dimensions", op, NT_MAXDIM);
  int64_t sa[NT_MAXDIM], sb[NT_MAXDIM];
  memcpy(sa, bs, sizeof(int64_t) * (size_t)nbs); memcpy(sb, bs, sizeof(int64_t) * (size_t)nbs);
  sa[nbs] = a->shape[a->ndim - 2]; sa[nbs + 1] = a->shape[a->ndim - 1];
  sb[nbs] = b->shape[b->ndim - 2]; sb[nbs + 1] = b->shape[b->ndim - 1];
  *ae = nt_expand(a, sa, nbs + 2);
  *be = *ae ? nt_expand(b, sb, nbs + 2) : NULL;
  if (*be) return 0;
  nt_release(*ae);
  return -1;
}

static int same_kind(const char *op, nt_Tensor *a, nt_Tensor *b) {
  if (a->dtype != b->dtype) NT_FAIL("%s: expected both tensors of one dtype, got %s and %s", op, nt_dtype_name(a->dtype), nt_dtype_name(b->dtype));
  if (a->device != b->device) NT_FAIL("%s: expected both tensors on one device, got %s and %s", op, nt_device_name(a->device), nt_device_name(b->device));
  return 0;
}

/* records a two-input node on out, saving out */
static nt_Tensor *finish2(nt_Tensor *out, const char *name, nt_BackwardFn fn, nt_Tensor *a, nt_Tensor *b, int64_t *iargs, int ni) {
  nt_Tensor *in[2] = { a, b };
  if (!out || !nt_needs_grad(2, in)) return out;
  nt_Node *n = nt_record(out, name, fn, 2, in);
  if (!n || nt_node_save(n, out) < 0) { nt_release(out); return NULL; }
  for (int i = 0; i < ni; i++) n->iarg[i] = iargs[i];
  n->niarg = ni;
  return out;
}

/* ---- inv ------------------------------------------------------------------------ */
/* X = A^-1: gA = -X^T g X^T */
static int inv_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *xt = lin_mT(n->saved[0]);
  nt_Tensor *r = lin_mm_(lin_mm(xt, g), nt_retain(xt));
  nt_release(xt);
  gin[0] = r ? nt_neg(r) : NULL;
  nt_release(r);
  return gin[0] ? 0 : -1;
}

static nt_Tensor *inv_impl(nt_Tensor *a, bool check, nt_Tensor **info) {
  if (lin_check_matrix("linalg.inv", a, true)) return NULL;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *x = inv_raw("linalg.inv", a, check, info);
  nt_set_grad_enabled(prev);
  return lin_finish(x, "LinalgInvBackward", inv_backward, a, 1, &x);
}
nt_Tensor *nt_linalg_inv(nt_Tensor *a) { return inv_impl(a, true, NULL); }
int nt_linalg_inv_ex(nt_Tensor *a, nt_Tensor **inverse, nt_Tensor **info) {
  *info = NULL;
  *inverse = inv_impl(a, false, info);
  if (*inverse) return 0;
  nt_release(*info); *info = NULL;
  return -1;
}

/* ---- solve ---------------------------------------------------------------------- */
/* X = A^-1 B: gB = A^-T g, gA = -gB X^T */
static int solve_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *gb = solve_raw("linalg.solve (backward)", n->in[0], g, true);
  if (!gb) return -1;
  if (nt_node_needs(n, 0)) {
    nt_Tensor *r = lin_mm_(nt_retain(gb), lin_mT(n->saved[0]));
    gin[0] = r ? nt_neg(r) : NULL;
    nt_release(r);
    if (!gin[0]) { nt_release(gb); return -1; }
  }
  gin[1] = gb;
  return 0;
}

nt_Tensor *nt_linalg_solve(nt_Tensor *a, nt_Tensor *b, bool left) {
  const char *op = "linalg.solve";
  if (lin_check_matrix(op, a, true) || lin_check_float(op, b) || same_kind(op, a, b)) return NULL;
  int64_t n = a->shape[a->ndim - 1];
  /* torch's rule: B is a vector when it is 1-D or is A's shape without the last axis */
  bool vec = b->ndim == 1 || (b->ndim == a->ndim - 1 && !memcmp(b->shape, a->shape, sizeof(int64_t) * (size_t)b->ndim));
  if (vec) {
    if (b->shape[b->ndim - 1] != n) NT_FAIL_NULL("%s: A is %lld x %lld but the vector B has %lld entries", op, (long long)n, (long long)n, (long long)b->shape[b->ndim - 1]);
    nt_Tensor *bm = nt_unsqueeze(b, -1), *x = bm ? nt_linalg_solve(a, bm, left) : NULL;
    nt_Tensor *r = x ? nt_squeeze(x, -1) : NULL;
    nt_release(bm); nt_release(x);
    return r;
  }
  if (b->ndim < 2) NT_FAIL_NULL("%s: expected B a vector or matrix, got a %dD tensor", op, b->ndim);
  if (!left) {   /* X A = B  <=>  A^T X^T = B^T */
    nt_Tensor *at = lin_mT(a), *bt = lin_mT(b), *xt = at && bt ? nt_linalg_solve(at, bt, true) : NULL;
    nt_Tensor *x = lin_mT(xt);
    nt_release(at); nt_release(bt); nt_release(xt);
    return x;
  }
  if (b->shape[b->ndim - 2] != n)
    NT_FAIL_NULL("%s: A is %lld x %lld but B has %lld rows", op, (long long)n, (long long)n, (long long)b->shape[b->ndim - 2]);
  nt_Tensor *ae, *be;
  if (bcast_pair(op, a, b, &ae, &be)) return NULL;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *x = solve_raw(op, ae, be, false);
  nt_set_grad_enabled(prev);
  x = finish2(x, "LinalgSolveBackward", solve_backward, ae, be, NULL, 0);
  nt_release(ae); nt_release(be);
  return x;
}

/* ---- solve_triangular ---------------------------------------------------------- */
/* X = T^-1 B: gB = T^-T g, gT = -gB X^T on T's triangle (strict when unit) */
static int tri_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  bool upper = n->iarg[0], unit = n->iarg[1];
  nt_Tensor *gb = lin_tri_raw("linalg.solve_triangular (backward)", n->in[0], g, upper, true, unit);
  if (!gb) return -1;
  if (nt_node_needs(n, 0)) {
    nt_Tensor *r = lin_mm_(nt_retain(gb), lin_mT(n->saved[0])), *nr = r ? nt_neg(r) : NULL;
    gin[0] = nr ? (upper ? nt_triu(nr, unit ? 1 : 0) : nt_tril(nr, unit ? -1 : 0)) : NULL;
    nt_release(r); nt_release(nr);
    if (!gin[0]) { nt_release(gb); return -1; }
  }
  gin[1] = gb;
  return 0;
}

nt_Tensor *nt_linalg_solve_triangular(nt_Tensor *a, nt_Tensor *b, bool upper, bool left, bool unit) {
  const char *op = "linalg.solve_triangular";
  if (lin_check_matrix(op, a, true) || lin_check_float(op, b) || same_kind(op, a, b)) return NULL;
  if (b->ndim < 2) NT_FAIL_NULL("%s: expected B a matrix or a batch of matrices, got a %dD tensor", op, b->ndim);
  if (!left) {
    nt_Tensor *at = lin_mT(a), *bt = lin_mT(b), *xt = at && bt ? nt_linalg_solve_triangular(at, bt, !upper, true, unit) : NULL;
    nt_Tensor *x = lin_mT(xt);
    nt_release(at); nt_release(bt); nt_release(xt);
    return x;
  }
  int64_t n = a->shape[a->ndim - 1];
  if (b->shape[b->ndim - 2] != n)
    NT_FAIL_NULL("%s: A is %lld x %lld but B has %lld rows", op, (long long)n, (long long)n, (long long)b->shape[b->ndim - 2]);
  nt_Tensor *ae, *be;
  if (bcast_pair(op, a, b, &ae, &be)) return NULL;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *x = lin_tri_raw(op, ae, be, upper, false, unit);
  nt_set_grad_enabled(prev);
  x = finish2(x, "LinalgSolveTriangularBackward", tri_backward, ae, be, (int64_t[]){ upper, unit }, 2);
  nt_release(ae); nt_release(be);
  return x;
}

nt_Tensor *nt_linalg_cholesky_solve(nt_Tensor *b, nt_Tensor *l, bool upper) {
  /* A = L L^T: X = L^-T (L^-1 B); A = U^T U: X = U^-1 (U^-T B) */
  nt_Tensor *lt = lin_mT(l);
  if (!lt) return NULL;
  nt_Tensor *y = upper ? nt_linalg_solve_triangular(lt, b, false, true, false) : nt_linalg_solve_triangular(l, b, false, true, false);
  nt_Tensor *x = y ? (upper ? nt_linalg_solve_triangular(l, y, true, true, false) : nt_linalg_solve_triangular(lt, y, true, true, false)) : NULL;
  nt_release(lt); nt_release(y);
  if (!x && strstr(nt_error_msg(), "solve_triangular")) {
    char m[512];
    snprintf(m, sizeof m, "%s", nt_error_msg());
    nt_error_set("linalg.cholesky_solve: %s", strstr(m, ": ") ? strstr(m, ": ") + 2 : m);
  }
  return x;
}

/* ---- det / slogdet -------------------------------------------------------------- */
/* (-1)^(number of row swaps) from getrf's 1-based pivots, as a dtype tensor [...] */
static nt_Tensor *perm_sign(nt_Tensor *piv, nt_DType dt) {
  int64_t n = piv->shape[piv->ndim - 1];
  nt_Tensor *ar = nt_arange_on(1, (double)n + 1, 1, NT_I32, piv->device);
  nt_Tensor *ne = ar ? nt_ne(piv, ar) : NULL, *f = ne ? nt_to_dtype(ne, dt) : NULL;
  nt_Tensor *cnt = f ? nt_sum(f, (int[]){ -1 }, 1, false) : NULL;
  nt_Tensor *par = cnt ? nt_binary_scalar_ex(NT_OP_MOD, cnt, 2, NT_SCALAR_INT) : NULL;
  nt_Tensor *m2 = par ? nt_binary_scalar_ex(NT_OP_MUL, par, -2, NT_SCALAR_INT) : NULL;
  nt_Tensor *s = m2 ? nt_binary_scalar_ex(NT_OP_ADD, m2, 1, NT_SCALAR_INT) : NULL;
  nt_release(ar); nt_release(ne); nt_release(f); nt_release(cnt); nt_release(par); nt_release(m2);
  return s;
}

/* the cofactor matrix d det(A)/dA = det(A) A^-T, for any A (singular too) from
** the SVD A = U S V^T: det(U) det(V) U diag(prod_{j != i} s_j) V^T */
static nt_Tensor *det_cofactor_svd(nt_Tensor *a) {
  nt_Tensor *u = NULL, *s = NULL, *vh = NULL;
  if (nt_linalg_svd(a, false, &u, &s, &vh)) return NULL;
  int64_t n = a->shape[a->ndim - 1];
  nt_Tensor *e = lin_eye_like(a, n), *su = nt_unsqueeze(s, -2);
  nt_Tensor *one_m = e ? nt_binary_scalar_ex(NT_OP_SUB, e, 1, NT_SCALAR_INT | NT_SCALAR_FIRST) : NULL;   /* 1 - I */
  nt_Tensor *m = lin_add_(lin_mul_(nt_retain(su), nt_retain(one_m)), nt_retain(e));                        /* s_j off the diagonal, 1 on it */
  nt_Tensor *p = m ? nt_prod(m, (int[]){ -1 }, 1, false) : NULL;
  nt_Tensor *du = nt_linalg_det(u), *dv = nt_linalg_det(vh);
  nt_Tensor *c = lin_mul_(du, dv), *cu = c ? nt_unsqueeze(c, -1) : NULL;
  nt_Tensor *cu2 = cu ? nt_unsqueeze(cu, -1) : NULL;
  nt_Tensor *r = lin_mul_(lin_mm_(lin_mul_(nt_retain(u), p ? nt_unsqueeze(p, -2) : NULL), nt_retain(vh)), cu2);
  nt_release(u); nt_release(s); nt_release(vh); nt_release(e); nt_release(su); nt_release(one_m); nt_release(m);
  nt_release(p); nt_release(c); nt_release(cu);
  return r;
}

static nt_Tensor *bcast_mat(nt_Tensor *v) {   /* [...] -> [..., 1, 1] */
  nt_Tensor *u = v ? nt_unsqueeze(v, -1) : NULL, *r = u ? nt_unsqueeze(u, -1) : NULL;
  nt_release(u);
  return r;
}

/* gA = g det A^-T (nonsingular), else g times the SVD cofactor */
static int det_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *a = n->in[0], *det = n->saved[0];
  nt_Tensor *z = nt_binary_scalar_ex(NT_OP_EQ, det, 0, NT_SCALAR_INT), *anyz = z ? nt_any(z, NULL, 0, false) : NULL;
  double singular = 1;
  if (!anyz || nt_item(anyz, &singular)) { nt_release(z); nt_release(anyz); return -1; }
  nt_release(z); nt_release(anyz);
  nt_Tensor *cof;
  if (singular) cof = det_cofactor_svd(a);
  else {
    nt_Tensor *x = inv_raw("linalg.det (backward)", a, true, NULL), *xt = lin_mT(x);
    cof = lin_mul_(xt, bcast_mat(det));
    nt_release(x);
  }
  gin[0] = lin_mul_(cof, bcast_mat(g));
  return gin[0] ? 0 : -1;
}

static int lu_det_parts(const char *op, nt_Tensor *a, nt_Tensor **sign, nt_Tensor **diag) {
  nt_Tensor *lu, *piv, *info;
  if (lin_check_matrix(op, a, true) || lu_raw(a, &lu, &piv, &info)) return -1;
  *sign = perm_sign(piv, a->dtype);
  *diag = *sign ? lin_diag(lu) : NULL;
  nt_release(lu); nt_release(piv); nt_release(info);
  if (*diag) return 0;
  nt_release(*sign);
  return -1;
}

nt_Tensor *nt_linalg_det(nt_Tensor *a) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *sign, *diag, *det = NULL;
  if (!lu_det_parts("linalg.det", a, &sign, &diag)) {
    nt_Tensor *p = nt_prod(diag, (int[]){ -1 }, 1, false);
    det = lin_mul_(sign, p);
    nt_release(diag);
  }
  nt_set_grad_enabled(prev);
  return lin_finish(det, "LinalgDetBackward", det_backward, a, 1, &det);
}

/* logabsdet: gA = g A^-T; undefined (an error) for a singular A */
static int logdet_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *x = inv_raw("linalg.slogdet (backward: the gradient of logabsdet is infinite)", n->in[0], true, NULL);
  gin[0] = lin_mul_(lin_mT(x), bcast_mat(g));
  nt_release(x);
  return gin[0] ? 0 : -1;
}

int nt_linalg_slogdet(nt_Tensor *a, nt_Tensor **sign_out, nt_Tensor **logabs_out) {
  *sign_out = *logabs_out = NULL;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *sign, *diag;
  if (!lu_det_parts("linalg.slogdet", a, &sign, &diag)) {
    nt_Tensor *sd = nt_sign(diag), *ps = sd ? nt_prod(sd, (int[]){ -1 }, 1, false) : NULL;
    nt_Tensor *ab = nt_abs(diag), *lg = ab ? nt_log(ab) : NULL;
    *sign_out = lin_mul_(nt_retain(sign), ps);
    *logabs_out = lg ? nt_sum(lg, (int[]){ -1 }, 1, false) : NULL;
    nt_release(sd); nt_release(ab); nt_release(lg); nt_release(sign); nt_release(diag);
  }
  nt_set_grad_enabled(prev);
  if (*logabs_out) *logabs_out = lin_finish(*logabs_out, "LinalgSlogdetBackward", logdet_backward, a, 0, NULL);
  if (*sign_out && *logabs_out) return 0;
  nt_release(*sign_out); nt_release(*logabs_out);
  *sign_out = *logabs_out = NULL;
  return -1;
}
