/*
** linalg/lfactor.c — the factorizations: cholesky, qr, eigh, svd, with
** torch's backward formulas (one node per output; linalg.h says why).
*/
#include "linternal.h"

/* ---- cholesky ----------------------------------------------------------------- */
/* torch's cholesky_backward: with L lower (L = U^T for upper), Phi(X) = the
** lower triangle of X with its diagonal halved,
**   gA = sym(L^-T Phi(L^T gL) L^-1),  sym(X) = (X + X^T) / 2 */
static int chol_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  bool upper = n->iarg[0];
  nt_Tensor *l = upper ? lin_mT(n->saved[0]) : nt_retain(n->saved[0]), *gl = upper ? lin_mT(g) : nt_retain(g);
  int64_t k = l ? l->shape[l->ndim - 1] : 0;
  nt_Tensor *e = l ? lin_eye_like(l, k) : NULL, *eb = e ? nt_expand(e, l->shape, l->ndim) : NULL;
  nt_Tensor *linv = eb ? lin_tri_raw("linalg.cholesky (backward)", l, eb, false, false, false) : NULL;
  nt_Tensor *phi = lin_mm_(lin_mT(l), nt_retain(gl)), *pl = phi ? nt_tril(phi, 0) : NULL;
  nt_Tensor *pd = lin_diag(pl), *hd = lin_diag_embed(pd), *ph = hd ? nt_binary_scalar_ex(NT_OP_MUL, hd, 0.5, NT_SCALAR_FLOAT) : NULL;
  nt_Tensor *p = ph ? nt_sub(pl, ph) : NULL;
  nt_Tensor *ga = lin_mm_(lin_mm_(lin_mT(linv), nt_retain(p)), nt_retain(linv));
  nt_Tensor *s = lin_add_(nt_retain(ga), lin_mT(ga));
  gin[0] = s ? nt_binary_scalar_ex(NT_OP_MUL, s, 0.5, NT_SCALAR_FLOAT) : NULL;
  nt_release(l); nt_release(gl); nt_release(e); nt_release(eb); nt_release(linv); nt_release(phi); nt_release(pl);
  nt_release(pd); nt_release(hd); nt_release(ph); nt_release(p); nt_release(ga); nt_release(s);
  return gin[0] ? 0 : -1;
}

static nt_Tensor *chol_impl(nt_Tensor *a, bool upper, bool check, nt_Tensor **info_out) {
  const char *op = "linalg.cholesky";
  if (lin_check_matrix(op, a, true)) return NULL;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *buf = lin_colmajor(a), *info = buf ? lin_info_tensor(a->shape, a->ndim - 2, a->device) : NULL, *l = NULL;
  nt_KernelArgs k = { .out = buf, .in = { info }, .nin = 1, .iarg = { upper }, .niarg = 1 };
  if (info && !lin_run(lin_ops.potrf, a->device, &k) &&
      (!check || !lin_check_info(op, info, a->shape, a->ndim - 2, "the matrix is not positive-definite: its leading minor of order %d is not positive")))
    l = lin_rowmajor(buf);
  nt_set_grad_enabled(prev);
  if (l && info_out) *info_out = nt_retain(info);
  nt_release(buf); nt_release(info);
  l = lin_finish(l, "LinalgCholeskyBackward", chol_backward, a, 1, &l);
  if (l && l->grad_fn) { l->grad_fn->iarg[0] = upper; l->grad_fn->niarg = 1; }
  return l;
}
nt_Tensor *nt_linalg_cholesky(nt_Tensor *a, bool upper) { return chol_impl(a, upper, true, NULL); }
int nt_linalg_cholesky_ex(nt_Tensor *a, bool upper, nt_Tensor **l, nt_Tensor **info) {
  *info = NULL;
  if ((*l = chol_impl(a, upper, false, info))) return 0;
  nt_release(*info); *info = NULL;
  return -1;
}

/* ---- qr ------------------------------------------------------------------------- */
/* copyltu(M) = tril(M) + tril(M, -1)^T */
static nt_Tensor *copyltu(nt_Tensor *m) {
  nt_Tensor *lo = nt_tril(m, 0), *sl = nt_tril(m, -1);
  nt_Tensor *r = lin_add_(lo, lin_mT(sl));
  nt_release(sl);
  return r;
}

/* For square R (m >= n, reduced; Q [m, n], R [n, n]):
**   M = R gR^T - gQ^T Q,  gA = (gQ + Q copyltu(M)) R^-T
** (Walter and Lehmann; Liao et al. 2019).  gQ or gR may be NULL (zero). */
static nt_Tensor *qr_back_square(nt_Tensor *q, nt_Tensor *r, nt_Tensor *gq, nt_Tensor *gr) {
  nt_Tensor *m = NULL;
  if (gr) m = lin_mm_(nt_retain(r), lin_mT(gr));
  if (gq) {
    nt_Tensor *t = lin_mm_(lin_mT(gq), nt_retain(q));
    m = m ? lin_sub_(m, t) : (t ? nt_neg(t) : NULL);
    if (!gr) nt_release(t);
  }
  nt_Tensor *c = m ? copyltu(m) : NULL, *b = lin_mm(q, c);
  if (b && gq) b = lin_add_(b, nt_retain(gq));
  /* X R^T = b  <=>  R X^T = b^T: an upper triangular solve */
  nt_Tensor *bt = lin_mT(b), *xt = bt ? lin_tri_raw("linalg.qr (backward: R is singular, A has not full rank)", r, bt, true, false, false) : NULL;
  nt_Tensor *ga = lin_mT(xt);
  nt_release(m); nt_release(c); nt_release(b); nt_release(bt); nt_release(xt);
  return ga;
}

/* m < n: A = [X | Y], R = [U | D] with U square: X = Q U is the square case
** with gQ + Y gD^T for gQ, and gY = Q gD */
static nt_Tensor *qr_backward_any(nt_Node *n, nt_Tensor *gq, nt_Tensor *gr) {
  nt_Tensor *a = n->in[0], *q = n->saved[0], *r = n->saved[1];
  int64_t m = a->shape[a->ndim - 2], nc = a->shape[a->ndim - 1];
  if (m >= nc) return qr_back_square(q, r, gq, gr);
  nt_Tensor *u = nt_narrow(r, -1, 0, m), *y = nt_narrow(a, -1, m, nc - m);
  nt_Tensor *gu = gr ? nt_narrow(gr, -1, 0, m) : NULL, *gd = gr ? nt_narrow(gr, -1, m, nc - m) : NULL;
  nt_Tensor *gq2 = NULL;
  if (gd) {
    nt_Tensor *yd = lin_mm_(nt_retain(y), lin_mT(gd));
    gq2 = gq ? lin_add_(yd, nt_retain(gq)) : yd;
  } else gq2 = nt_retain(gq);
  nt_Tensor *gx = qr_back_square(q, u, gq2, gu);
  nt_Tensor *gy = gd ? lin_mm(q, gd) : nt_zeros_like(y);
  nt_Tensor *ga = gx && gy ? nt_concat((nt_Tensor *[]){ gx, gy }, 2, -1) : NULL;
  nt_release(u); nt_release(y); nt_release(gu); nt_release(gd); nt_release(gq2); nt_release(gx); nt_release(gy);
  return ga;
}

static int qr_check_diff(nt_Node *n) {
  int64_t m = n->in[0]->shape[n->in[0]->ndim - 2], nc = n->in[0]->shape[n->in[0]->ndim - 1];
  if (n->iarg[0] == 2) NT_FAIL("linalg.qr: mode=\"r\" computes no Q, and R's derivative needs it: use mode=\"reduced\"");
  if (n->iarg[0] == 1 && m > nc) NT_FAIL("linalg.qr: the QR decomposition is not differentiable when mode=\"complete\" and the matrix has more rows than columns (%lld > %lld)", (long long)m, (long long)nc);
  return 0;
}
static int qrq_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  if (qr_check_diff(n)) return -1;
  return (gin[0] = qr_backward_any(n, g, NULL)) ? 0 : -1;
}
static int qrr_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  if (qr_check_diff(n)) return -1;
  return (gin[0] = qr_backward_any(n, NULL, g)) ? 0 : -1;
}

int nt_linalg_qr(nt_Tensor *a, const char *mode, nt_Tensor **q_out, nt_Tensor **r_out) {
  const char *op = "linalg.qr";
  *q_out = *r_out = NULL;
  int md = !strcmp(mode, "reduced") ? 0 : !strcmp(mode, "complete") ? 1 : !strcmp(mode, "r") ? 2 : -1;
  if (md < 0) NT_FAIL("%s: mode must be \"reduced\", \"complete\" or \"r\", got \"%s\"", op, mode);
  if (lin_check_matrix(op, a, false)) return -1;
  int nb = a->ndim - 2;
  int64_t m = a->shape[nb], n = a->shape[nb + 1], k = m < n ? m : n, qc = md == 1 ? m : k, rr = md == 1 ? m : k;
  int64_t sq[NT_MAXDIM], sr[NT_MAXDIM];
  memcpy(sq, a->shape, sizeof(int64_t) * (size_t)nb); memcpy(sr, a->shape, sizeof(int64_t) * (size_t)nb);
  sq[nb] = qc; sq[nb + 1] = m;    /* column-major buffers: [..., cols, rows] */
  sr[nb] = n; sr[nb + 1] = rr;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *w = lin_colmajor(a), *qb = w && md != 2 ? nt_empty(sq, nb + 2, a->dtype, a->device) : NULL;
  nt_Tensor *rb = w && (qb || md == 2) ? nt_empty(sr, nb + 2, a->dtype, a->device) : NULL;
  nt_KernelArgs kk = { .out = rb, .in = { w, qb }, .nin = 2 };
  int rc = -1;
  if (rb && !lin_run(lin_ops.qr, a->device, &kk)) {
    if (w->numel == 0 && md == 1 && m > 0) {   /* no columns: Q is the identity, R empty */
      nt_Tensor *e = lin_eye_like(a, m), *eb = e ? nt_expand(e, sq, nb + 2) : NULL;
      rc = eb ? nt_copy_(qb, eb) : -1;
      nt_release(e); nt_release(eb);
      if (rc) goto out;
    } else if (w->numel == 0 && qb && qb->numel && nt_fill_(qb, 0)) goto out;
    if (rb->numel && w->numel == 0 && nt_fill_(rb, 0)) goto out;
    *r_out = lin_rowmajor(rb);
    *q_out = md == 2 ? nt_empty((int64_t[]){ 0 }, 1, a->dtype, a->device) : lin_rowmajor(qb);
    rc = *r_out && *q_out ? 0 : -1;
  }
out:
  nt_set_grad_enabled(prev);
  nt_release(w); nt_release(qb); nt_release(rb);
  if (!rc && nt_needs_grad(1, &a)) {
    nt_Tensor *outs[2] = { *q_out, *r_out };
    nt_BackwardFn fns[2] = { qrq_backward, qrr_backward };
    for (int i = 0; i < 2 && !rc; i++) {
      if (i == 0 && md == 2) continue;
      nt_Node *nd = nt_record(outs[i], i ? "LinalgQrBackward(R)" : "LinalgQrBackward(Q)", fns[i], 1, &a);
      if (!nd || nt_node_save(nd, *q_out) < 0 || nt_node_save(nd, *r_out) < 0) rc = -1;
      else { nd->iarg[0] = md; nd->niarg = 1; }
    }
  }
  if (rc) { nt_release(*q_out); nt_release(*r_out); *q_out = *r_out = NULL; }
  return rc;
}

/* ---- eigh ----------------------------------------------------------------------- */
/* gA = V (diag(gL) + sym_skew(V^T gV) / E) V^T, E_ij = L_j - L_i (torch's
** linalg_eig_backward, hermitian): the eigenvector part is undefined for
** repeated eigenvalues, where it fails instead of dividing by zero */
static int eigh_backward_parts(nt_Node *n, nt_Tensor *gl, nt_Tensor *gv, nt_Tensor **gin) {
  nt_Tensor *l = n->saved[0], *v = n->saved[1], *mid = NULL;
  if (gv) {
    nt_Tensor *vg = lin_mm_(lin_mT(v), nt_retain(gv));
    nt_Tensor *sk = lin_sub_(nt_retain(vg), lin_mT(vg)), *skh = sk ? nt_binary_scalar_ex(NT_OP_MUL, sk, 0.5, NT_SCALAR_FLOAT) : NULL;
    nt_Tensor *lj = nt_unsqueeze(l, -2), *li = nt_unsqueeze(l, -1), *e = lj && li ? nt_sub(lj, li) : NULL;
    nt_Tensor *eye = lin_eye_like(l, l->shape[l->ndim - 1]);
    nt_Tensor *ez = e ? nt_binary_scalar_ex(NT_OP_EQ, e, 0, NT_SCALAR_INT) : NULL;
    nt_Tensor *eyb = eye ? nt_to_dtype(eye, NT_BOOL) : NULL, *noteye = eyb ? nt_logical_not(eyb) : NULL;
    nt_Tensor *bad = ez && noteye ? nt_logical_and(ez, noteye) : NULL, *anyb = bad ? nt_any(bad, NULL, 0, false) : NULL;
    double rep = 1;
    if (anyb && !nt_item(anyb, &rep) && rep)
      nt_error_set("linalg.eigh: the gradient through the eigenvectors is undefined: the matrix has repeated eigenvalues (only the eigenvalues' gradient is defined there)");
    else if (anyb && !rep) {
      nt_Tensor *e1 = lin_add_(nt_retain(e), nt_retain(eye));   /* 1 on the diagonal (skew has 0 there) */
      mid = e1 ? nt_div(skh, e1) : NULL;
      nt_release(e1);
    }
    nt_release(vg); nt_release(sk); nt_release(skh); nt_release(lj); nt_release(li); nt_release(e); nt_release(eye);
    nt_release(ez); nt_release(eyb); nt_release(noteye); nt_release(bad); nt_release(anyb);
    if (!mid) return -1;
  } else {
    mid = lin_diag_embed(gl);
    if (!mid) return -1;
  }
  gin[0] = lin_mm_(lin_mm(v, mid), lin_mT(v));
  nt_release(mid);
  return gin[0] ? 0 : -1;
}
static int eighl_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) { return eigh_backward_parts(n, g, NULL, gin); }
static int eighv_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) { return eigh_backward_parts(n, NULL, g, gin); }

int nt_linalg_eigh(nt_Tensor *a, bool upper, nt_Tensor **w_out, nt_Tensor **v_out) {
  const char *op = v_out ? "linalg.eigh" : "linalg.eigvalsh";
  *w_out = NULL;
  if (v_out) *v_out = NULL;
  if (lin_check_matrix(op, a, true)) return -1;
  int nb = a->ndim - 2;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *buf = lin_colmajor(a), *w = buf ? nt_empty(a->shape, nb + 1, a->dtype, a->device) : NULL;
  nt_Tensor *info = w ? lin_info_tensor(a->shape, nb, a->device) : NULL, *v = NULL;
  nt_KernelArgs k = { .out = buf, .in = { w, info }, .nin = 2, .iarg = { upper, v_out != NULL }, .niarg = 2 };
  int rc = -1;
  if (info && !lin_run(lin_ops.syevd, a->device, &k) &&
      !lin_check_info(op, info, a->shape, nb, "the eigenvalue algorithm did not converge (%d off-diagonal elements)") &&
      (!v_out || (v = lin_rowmajor(buf))))
    rc = 0;
  nt_set_grad_enabled(prev);
  nt_release(buf); nt_release(info);
  if (rc) { nt_release(w); return -1; }
  if (nt_needs_grad(1, &a)) {
    nt_Tensor *outs[2] = { w, v };
    nt_BackwardFn fns[2] = { eighl_backward, eighv_backward };
    for (int i = 0; i < 2 && !rc; i++) {
      if (!outs[i]) continue;
      nt_Node *nd = nt_record(outs[i], i ? "LinalgEighBackward(V)" : "LinalgEighBackward(L)", fns[i], 1, &a);
      if (!nd || nt_node_save(nd, w) < 0 || (v && nt_node_save(nd, v) < 0)) rc = -1;
    }
    /* eigvalsh: the eigenvalue gradient needs V: compute it (no values leave) */
    if (!rc && !v && w->grad_fn) {
      nt_Tensor *w2 = NULL, *v2 = NULL;
      prev = nt_set_grad_enabled(false);
      rc = nt_linalg_eigh(a, upper, &w2, &v2);
      nt_set_grad_enabled(prev);
      if (!rc) rc = nt_node_save(w->grad_fn, v2) < 0 ? -1 : 0;
      nt_release(w2); nt_release(v2);
    }
  }
  if (rc) { nt_release(w); nt_release(v); return -1; }
  *w_out = w;
  if (v_out) *v_out = v;
  return 0;
}

/* ---- svd ------------------------------------------------------------------------ */
/* torch's svd_backward (real, reduced U [m,k], S [k], Vh [k,n]):
**   gA = U [ (skew(U^T gU) S_j + S_i skew(Vh gVh^T)) / E + diag(gS) ] Vh
**   E_ij = S_j^2 - S_i^2, plus for m > n: (I - U U^T) gU S^-1 Vh, and for
**   m < n: U S^-1 gVh (I - V Vh).  One output's gradient per call. */
static int svd_backward_parts(nt_Node *n, nt_Tensor *gu, nt_Tensor *gs, nt_Tensor *gvh, nt_Tensor **gin) {
  nt_Tensor *u = n->saved[0], *s = n->saved[1], *vh = n->saved[2];   /* reduced: the first k columns/rows */
  int64_t k = s->shape[s->ndim - 1];
  if ((gu && gu->shape[gu->ndim - 1] != k) || (gvh && gvh->shape[gvh->ndim - 2] != k))
    NT_FAIL("linalg.svd: the derivative through U or Vh is not defined for full_matrices=true on a non-square matrix: use full_matrices=false");
  int64_t m = u->shape[u->ndim - 2], nn = vh->shape[vh->ndim - 1];
  nt_Tensor *mid = NULL;
  if (gs) mid = lin_diag_embed(gs);
  else {
    nt_Tensor *s2 = nt_mul(s, s), *sj = s2 ? nt_unsqueeze(s2, -2) : NULL, *si = s2 ? nt_unsqueeze(s2, -1) : NULL;
    nt_Tensor *e = sj && si ? nt_sub(sj, si) : NULL, *eye = lin_eye_like(s, s->shape[s->ndim - 1]);
    nt_Tensor *ez = e ? nt_binary_scalar_ex(NT_OP_EQ, e, 0, NT_SCALAR_INT) : NULL;
    nt_Tensor *eyb = eye ? nt_to_dtype(eye, NT_BOOL) : NULL, *ne = eyb ? nt_logical_not(eyb) : NULL;
    nt_Tensor *bad = ez && ne ? nt_logical_and(ez, ne) : NULL, *anyb = bad ? nt_any(bad, NULL, 0, false) : NULL;
    double rep = 1;
    if (anyb && !nt_item(anyb, &rep) && rep)
      nt_error_set("linalg.svd: the gradient through U or Vh is undefined: the matrix has repeated singular values (only the singular values' gradient is defined there)");
    else if (anyb) {
      nt_Tensor *num;
      if (gu) { nt_Tensor *x = lin_mm_(lin_mT(u), nt_retain(gu)); num = lin_mul_(lin_sub_(nt_retain(x), lin_mT(x)), nt_unsqueeze(s, -2)); nt_release(x); }
      else { nt_Tensor *x = lin_mm_(nt_retain(vh), lin_mT(gvh)); num = lin_mul_(nt_unsqueeze(s, -1), lin_sub_(nt_retain(x), lin_mT(x))); nt_release(x); }
      mid = lin_div_(num, lin_add_(nt_retain(e), nt_retain(eye)));   /* 1 on the diagonal (skew has 0 there) */
    }
    nt_release(s2); nt_release(sj); nt_release(si); nt_release(e); nt_release(eye); nt_release(ez); nt_release(eyb);
    nt_release(ne); nt_release(bad); nt_release(anyb);
  }
  if (!mid) return -1;
  nt_Tensor *ga = NULL;
  if (m > nn && gu) {
    nt_Tensor *um = lin_mm(u, mid), *gus = lin_div_(nt_retain(gu), nt_unsqueeze(s, -2));
    nt_Tensor *proj = lin_mm_(nt_retain(u), lin_mm_(lin_mT(u), nt_retain(gus)));
    ga = lin_mm_(lin_sub_(lin_add_(um, nt_retain(gus)), proj), nt_retain(vh));
    nt_release(gus);
  } else if (m < nn && gvh) {
    nt_Tensor *mv = lin_mm(mid, vh), *sg = lin_div_(nt_retain(gvh), nt_unsqueeze(s, -1));
    nt_Tensor *proj = lin_mm_(lin_mm_(nt_retain(sg), lin_mT(vh)), nt_retain(vh));
    ga = lin_mm_(nt_retain(u), lin_sub_(lin_add_(mv, nt_retain(sg)), proj));
    nt_release(sg);
  } else ga = lin_mm_(lin_mm(u, mid), nt_retain(vh));
  nt_release(mid);
  return (gin[0] = ga) ? 0 : -1;
}
static int svdu_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) { return svd_backward_parts(n, g, NULL, NULL, gin); }
static int svds_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) { return svd_backward_parts(n, NULL, g, NULL, gin); }
static int svdv_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) { return svd_backward_parts(n, NULL, NULL, g, gin); }

/* the raw SVD (no autograd); u NULL: values only */
static int svd_raw(const char *op, nt_Tensor *a, bool full, nt_Tensor **u, nt_Tensor **s, nt_Tensor **vh) {
  int nb = a->ndim - 2;
  int64_t m = a->shape[nb], n = a->shape[nb + 1], k = m < n ? m : n;
  int64_t ss[NT_MAXDIM], su[NT_MAXDIM], sv[NT_MAXDIM];
  memcpy(ss, a->shape, sizeof(int64_t) * (size_t)nb); memcpy(su, ss, sizeof ss); memcpy(sv, ss, sizeof ss);
  ss[nb] = k;
  su[nb] = full ? m : k; su[nb + 1] = m;   /* column-major U [m, uc] */
  sv[nb] = n; sv[nb + 1] = full ? n : k;   /* column-major Vh [vr, n] */
  nt_Tensor *w = lin_colmajor(a), *sb = w ? nt_empty(ss, nb + 1, a->dtype, a->device) : NULL;
  nt_Tensor *ub = sb && u ? nt_empty(su, nb + 2, a->dtype, a->device) : NULL, *vb = ub ? nt_empty(sv, nb + 2, a->dtype, a->device) : NULL;
  nt_Tensor *info = sb && (!u || vb) ? lin_info_tensor(a->shape, nb, a->device) : NULL;
  nt_KernelArgs kk = { .out = sb, .in = { w, ub, vb, info }, .nin = 4 };
  int rc = -1;
  if (info && !lin_run(lin_ops.gesdd, a->device, &kk) &&
      !lin_check_info(op, info, a->shape, nb, "the SVD algorithm did not converge (info %d)")) {
    rc = 0;
    if (w->numel == 0 && ub) {   /* an empty matrix: U and Vh are (parts of) identities */
      for (int i = 0; i < 2 && !rc; i++) {
        nt_Tensor *b = i ? vb : ub;
        int64_t r = b->shape[nb + 1], c = b->shape[nb];
        nt_Tensor *e = b->numel ? nt_eye_on(r, c, a->dtype, a->device) : NULL, *et = e ? lin_mT(e) : NULL;
        nt_Tensor *eb = et ? nt_expand(et, b->shape, nb + 2) : NULL;
        if (b->numel) rc = eb ? nt_copy_(b, eb) : -1;
        nt_release(e); nt_release(et); nt_release(eb);
      }
    }
    if (!rc) {
      *s = nt_retain(sb);
      if (u) {
        *u = lin_rowmajor(ub); *vh = *u ? lin_rowmajor(vb) : NULL;
        if (!*vh) { nt_release(*u); nt_release(*s); *u = *s = NULL; rc = -1; }
      }
    }
  }
  nt_release(w); nt_release(sb); nt_release(ub); nt_release(vb); nt_release(info);
  return rc;
}

int nt_linalg_svd(nt_Tensor *a, bool full, nt_Tensor **u_out, nt_Tensor **s_out, nt_Tensor **vh_out) {
  const char *op = u_out ? "linalg.svd" : "linalg.svdvals";
  *s_out = NULL;
  if (u_out) *u_out = *vh_out = NULL;
  if (lin_check_matrix(op, a, false)) return -1;
  bool grad = nt_needs_grad(1, &a);
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *u = NULL, *s = NULL, *vh = NULL;
  /* svdvals' gradient needs the vectors: compute them then (reduced) */
  int rc = svd_raw(op, a, u_out ? full : false, u_out || grad ? &u : NULL, &s, &vh);
  nt_set_grad_enabled(prev);
  if (rc) return -1;
  if (grad) {
    int nb = a->ndim - 2;
    int64_t k = s->shape[nb];
    nt_Tensor *ur = nt_narrow(u, -1, 0, k), *vr = ur ? nt_narrow(vh, -2, 0, k) : NULL;
    nt_Tensor *outs[3] = { u_out ? u : NULL, s, u_out ? vh : NULL };
    nt_BackwardFn fns[3] = { svdu_backward, svds_backward, svdv_backward };
    static const char *names[3] = { "LinalgSvdBackward(U)", "LinalgSvdBackward(S)", "LinalgSvdBackward(Vh)" };
    rc = vr ? 0 : -1;
    for (int i = 0; i < 3 && !rc; i++) {
      if (!outs[i]) continue;
      nt_Node *nd = nt_record(outs[i], names[i], fns[i], 1, &a);
      if (!nd || nt_node_save(nd, ur) < 0 || nt_node_save(nd, s) < 0 || nt_node_save(nd, vr) < 0) rc = -1;
    }
    nt_release(ur); nt_release(vr);
  }
  if (rc || !u_out) { nt_release(u); nt_release(vh); }
  if (rc) { nt_release(s); return -1; }
  *s_out = s;
  if (u_out) { *u_out = u; *vh_out = vh; }
  return 0;
}
