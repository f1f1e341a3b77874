/*
** linalg/leigcomp.c — linalg.eig's backward on a device with no
** linalg_eig_backward kernel (CUDA): the CPU kernel's math (leigkern.c,
** torch's linalg_eig_backward for real A) composed from the device's own
** real ops, so the gradient stays on the device and uses its matmul and LU:
**
**   gL part: M = diag(gL)
**   gV part: M = (V^H gV - V^H V diag(Re diag(V^H gV))) / conj(E),
**            E_ij = L_j - L_i, M_jj = 0
**   gA = Re(V^-H M V^H)
**
** A complex matrix is a pair (re, im) of real tensors; a product is four real
** matmuls, and V^H X = R is solved as the real system of twice the order
**   [[Re V^H, -Im V^H], [Im V^H, Re V^H]] [Re X; Im X] = [Re R; Im R],
** which is singular exactly when V is.  The three failures get the CPU
** kernel's info codes (linternal.h), per matrix and in the same priority:
** 1 the loss depends on an eigenvector's phase (|Im diag(V^H gV)| > 1e-2,
** torch's check), 2 repeated eigenvalues (an off-diagonal E_ij = 0, gV
** only), 3 V singular (the real system's LU).  Runs with grad mode off.
*/
#include "linternal.h"
#include "tensor/complex.h"

typedef struct { nt_Tensor *re, *im; } cx;

static void cx_free(cx *a) { nt_release(a->re); nt_release(a->im); a->re = a->im = NULL; }
static bool cx_ok(cx a) { return a.re && a.im; }

/* z (complex, or real: imag 0) as contiguous parts */
static cx cx_of(nt_Tensor *z, nt_DType complex_dt) {
  cx r = { NULL, NULL };
  nt_Tensor *c = z->dtype == complex_dt ? nt_retain(z) : nt_complex_to_dtype(z, complex_dt);
  nt_Tensor *re = c ? nt_real(c) : NULL, *im = c ? nt_imag(c) : NULL;
  r.re = re ? nt_contiguous(re) : NULL;
  r.im = im ? nt_contiguous(im) : NULL;
  nt_release(c); nt_release(re); nt_release(im);
  if (!cx_ok(r)) cx_free(&r);
  return r;
}
/* a b */
static cx cx_mm(cx a, cx b) {
  cx r = { lin_sub_(lin_mm(a.re, b.re), lin_mm(a.im, b.im)), lin_add_(lin_mm(a.re, b.im), lin_mm(a.im, b.re)) };
  if (!cx_ok(r)) cx_free(&r);
  return r;
}
/* a^H */
static cx cx_H(cx a) {
  nt_Tensor *rt = lin_mT(a.re), *it = lin_mT(a.im);
  cx r = { rt ? nt_contiguous(rt) : NULL, it ? nt_neg(it) : NULL };
  nt_release(rt); nt_release(it);
  if (!cx_ok(r)) cx_free(&r);
  return r;
}

/* per matrix: 1 where any element of flag [..., r, c] (or [..., c] when vec) is nonzero, as f64 on the host */
static nt_Tensor *any_per_matrix(nt_Tensor *flag, bool vec) {
  nt_Tensor *f = flag ? nt_to_dtype(flag, NT_F64) : NULL;
  nt_Tensor *m = f ? nt_max(f, vec ? (int[]){ -1 } : (int[]){ -2, -1 }, vec ? 1 : 2, false) : NULL;
  nt_Tensor *h = m ? nt_to_device(m, NT_CPU) : NULL, *c = h ? nt_contiguous(h) : NULL;
  nt_release(f); nt_release(m); nt_release(h);
  return c;
}

int lin_eig_backward_composed(nt_Tensor *l, nt_Tensor *v, nt_Tensor *g, int vecs, nt_Tensor **ga_out, nt_Tensor **info_out) {
  *ga_out = *info_out = NULL;
  int nb = l->ndim - 1;
  int64_t n = l->shape[nb];
  nt_Tensor *c1 = NULL, *c2 = NULL, *c3 = NULL, *ga = NULL, *info = NULL, *lu_info = NULL;
  cx L = cx_of(l, l->dtype), V = cx_of(v, l->dtype), G = cx_of(g, l->dtype), Vh = { 0 }, M = { 0 }, R = { 0 };
  int rc = -1;
  if (!cx_ok(L) || !cx_ok(V) || !cx_ok(G) || !cx_ok(Vh = cx_H(V))) goto out;
  if (!vecs) {
    M.re = lin_diag_embed(G.re); M.im = lin_diag_embed(G.im);
  } else {
    cx VhG = cx_mm(Vh, G), VhV = cx_mm(Vh, V);
    nt_Tensor *dre = lin_diag(VhG.re), *dim = lin_diag(VhG.im);
    /* the phase check */
    nt_Tensor *ad = dim ? nt_abs(dim) : NULL, *bad = ad ? nt_binary_scalar_ex(NT_OP_GT, ad, 1e-2, NT_SCALAR_FLOAT) : NULL;
    c1 = any_per_matrix(bad, true);
    nt_release(ad); nt_release(bad);
    /* M = V^H gV - V^H V diag(Re d) */
    nt_Tensor *dr = dre ? nt_unsqueeze(dre, -2) : NULL;
    M.re = dr && cx_ok(VhG) && cx_ok(VhV) ? lin_sub_(nt_retain(VhG.re), nt_mul(VhV.re, dr)) : NULL;
    M.im = M.re ? lin_sub_(nt_retain(VhG.im), nt_mul(VhV.im, dr)) : NULL;
    nt_release(dr); nt_release(dre); nt_release(dim);
    cx_free(&VhG); cx_free(&VhV);
    /* conj(E)_ij = (Re L_j - Re L_i) + i (Im L_i - Im L_j); M / conj(E) off the diagonal, 0 on it */
    nt_Tensor *er = lin_sub_(nt_unsqueeze(L.re, -2), nt_unsqueeze(L.re, -1));
    nt_Tensor *ei = lin_sub_(nt_unsqueeze(L.im, -1), nt_unsqueeze(L.im, -2));
    nt_Tensor *eye = lin_eye_like(L.re, n), *off = eye ? nt_binary_scalar_ex(NT_OP_EQ, eye, 0, NT_SCALAR_FLOAT) : NULL;   /* 1 off the diagonal */
    nt_Tensor *den = er && ei ? lin_add_(nt_mul(er, er), nt_mul(ei, ei)) : NULL;
    nt_Tensor *zero = den ? nt_binary_scalar_ex(NT_OP_EQ, den, 0, NT_SCALAR_FLOAT) : NULL;
    nt_Tensor *rep = zero && off ? nt_binary(NT_OP_LOGICAL_AND, zero, off) : NULL;
    c2 = any_per_matrix(rep, false);
    /* the denominator 1 where it is 0 (the diagonal; a repeated pair fails above): no inf/NaN computed */
    nt_Tensor *den1 = den && zero ? lin_add_(nt_retain(den), nt_to_dtype(zero, L.re->dtype)) : NULL;
    nt_Tensor *mr = M.re && er && ei && den1 ? lin_div_(lin_add_(nt_mul(M.re, er), nt_mul(M.im, ei)), nt_retain(den1)) : NULL;
    nt_Tensor *mi = mr ? lin_div_(lin_sub_(nt_mul(M.im, er), nt_mul(M.re, ei)), nt_retain(den1)) : NULL;
    cx_free(&M);
    nt_Tensor *offf = off ? nt_to_dtype(off, L.re->dtype) : NULL;
    M.re = mr && offf ? lin_mul_(mr, nt_retain(offf)) : (nt_release(mr), NULL);
    M.im = mi && offf ? lin_mul_(mi, nt_retain(offf)) : (nt_release(mi), NULL);
    nt_release(offf);
    nt_release(er); nt_release(ei); nt_release(eye); nt_release(off); nt_release(den); nt_release(zero);
    nt_release(rep); nt_release(den1);
    if (!c1 || !c2) goto out;
  }
  if (!cx_ok(M) || !cx_ok(R = cx_mm(M, Vh))) goto out;
  {
    /* V^H X = R as the real system of order 2n */
    nt_Tensor *nim = nt_neg(Vh.im);
    nt_Tensor *top[2] = { Vh.re, nim }, *bot[2] = { Vh.im, Vh.re };
    nt_Tensor *t = nim ? nt_concat(top, 2, -1) : NULL, *b = t ? nt_concat(bot, 2, -1) : NULL;
    nt_Tensor *rows[2] = { t, b }, *rhs2[2] = { R.re, R.im };
    nt_Tensor *A = b ? nt_concat(rows, 2, -2) : NULL, *rhs = A ? nt_concat(rhs2, 2, -2) : NULL;
    nt_Tensor *inv = NULL;
    if (rhs && !nt_linalg_inv_ex(A, &inv, &lu_info)) {
      nt_Tensor *bad = nt_binary_scalar_ex(NT_OP_NE, lu_info, 0, NT_SCALAR_FLOAT);
      nt_Tensor *bd = bad ? nt_to_dtype(bad, NT_F64) : NULL, *h = bd ? nt_to_device(bd, NT_CPU) : NULL;
      c3 = h ? nt_contiguous(h) : NULL;
      nt_release(bad); nt_release(bd); nt_release(h);
      /* X = A^-1 [Re R; Im R]; gA = Re X, its first n rows */
      nt_Tensor *x = c3 ? nt_matmul(inv, rhs) : NULL, *xr = x ? nt_narrow(x, -2, 0, n) : NULL;
      ga = xr ? nt_contiguous(xr) : NULL;
      nt_release(x); nt_release(xr);
    }
    nt_release(nim); nt_release(t); nt_release(b); nt_release(A); nt_release(rhs); nt_release(inv);
  }
  if (!ga || !(info = lin_info_tensor(l->shape, nb, NT_CPU))) goto out;
  {
    int32_t *p = (int32_t *)nt_base(info);
    const double *f1 = c1 ? (const double *)nt_base(c1) : NULL, *f2 = c2 ? (const double *)nt_base(c2) : NULL;
    const double *f3 = (const double *)nt_base(c3);
    for (int64_t i = 0; i < info->numel; i++)
      p[i] = f1 && f1[i] != 0 ? 1 : f2 && f2[i] != 0 ? 2 : f3[i] != 0 ? 3 : 0;
  }
  rc = 0;
out:
  cx_free(&L); cx_free(&V); cx_free(&G); cx_free(&Vh); cx_free(&M); cx_free(&R);
  nt_release(c1); nt_release(c2); nt_release(c3); nt_release(lu_info);
  if (rc) { nt_release(ga); nt_release(info); return -1; }
  *ga_out = ga;
  *info_out = info;
  return 0;
}
