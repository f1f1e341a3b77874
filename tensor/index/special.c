/*
** index/special.c — lgamma, digamma, erfinv, xlogy as compositions of
** differentiable public ops, computed in f64 and cast back to the input's
** floating dtype (integers: f32, as torch).  Their gradients are the
** compositions' (lgamma's is digamma to rounding, digamma's is trigamma),
** and they run on every device.
**
** lgamma: x < 0.5 by reflection, lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x);
**   t >= 0.5 by lgamma(t) = S(t + 8) - sum_{i<8} log(t + i), S Stirling's series
**   to 1/z^11 (truncation error < 1/(156 z^13) < 6e-15 at z >= 8.5).
**   Poles (0, -1, -2, ...): +inf, as torch.
** digamma: x < 0.5 by psi(x) = psi(1 - x) - pi / tan(pi x); t >= 0.5 by
**   psi(t) = A(t + 8) - sum_{i<8} 1/(t + i), A the asymptotic series to 1/z^14.
**   psi(0) = -inf and negative integers NaN, as torch.
** erfinv: Giles' single-precision approximation (M. Giles, "Approximating
**   the erfinv function", GPU Computing Gems, 2011) refined by two Newton
**   steps on erf(y) = x with grad off, then one Newton step with grad on from
**   the detached estimate y0: y = y0 - (erf(y0) - x) / erf'(y0), whose
**   derivative in x is exactly 1 / erf'(y0), erfinv's.  |x| = 1: +-inf.
** The branches that where() discards are fed safe inputs, so their
** gradients are 0, never 0 * inf = NaN.
*/
#include "ixinternal.h"
#include <math.h>

#define PI 3.14159265358979323846

static nt_DType float_of(nt_DType dt) { return nt_dtype_is_float(dt) ? dt : NT_DEFAULT_FLOAT; }
static nt_Tensor *C(nt_Tensor *like, double v) { return ix_const_like(like, v); }
/* x as f64 (a new reference) */
static nt_Tensor *f64(nt_Tensor *x) { return nt_to_dtype(x, NT_F64); }
/* sum_{i<8} f(t + i), f = log or reciprocal */
static nt_Tensor *shift_sum(nt_Tensor *t, int op) {
  nt_Tensor *s = NULL;
  for (int i = 0; i < 8; i++) {
    nt_Tensor *term = X_un(op, nt_binary_scalar_ex(NT_OP_ADD, t, i, NT_SCALAR_FLOAT));
    s = i ? X_add(s, term) : term;
  }
  return s;
}

/* c[0] - w2 (c[1] - w2 (c[2] - ...)); takes w2 */
static nt_Tensor *alt_series(nt_Tensor *w2, const double *c, int n) {
  nt_Tensor *p = w2 ? C(w2, c[n - 1]) : NULL;
  for (int i = n - 2; i >= 0; i--) p = X_sb(NT_OP_SUB, c[i], X_mul(nt_retain(w2), p));
  nt_release(w2);
  return p;
}

/* lgamma of t >= 0.5 (f64) */
static nt_Tensor *lgamma_pos(nt_Tensor *t) {
  nt_Tensor *z = nt_binary_scalar_ex(NT_OP_ADD, t, 8, NT_SCALAR_FLOAT);
  if (!z) return NULL;
  nt_Tensor *w = X_un(NT_OP_RECIPROCAL, nt_retain(z)), *w2 = w ? nt_mul(w, w) : NULL;
  /* w (1/12 - w2 (1/360 - w2 (1/1260 - w2 (1/1680 - w2 (1/1188 - w2 691/360360))))) */
  static const double lc[] = { 1.0 / 12, 1.0 / 360, 1.0 / 1260, 1.0 / 1680, 1.0 / 1188, 691.0 / 360360 };
  nt_Tensor *ser = X_mul(w, alt_series(w2, lc, 6));
  /* (z - 0.5) log z - z + log(2 pi) / 2 */
  nt_Tensor *st = X_sub(X_mul(X_bs(NT_OP_SUB, nt_retain(z), 0.5), X_un(NT_OP_LOG, nt_retain(z))), nt_retain(z));
  st = X_add(X_bs(NT_OP_ADD, st, 0.91893853320467274178), ser);
  nt_release(z);
  return X_sub(st, shift_sum(t, NT_OP_LOG));
}

/* digamma of t >= 0.5 (f64) */
static nt_Tensor *digamma_pos(nt_Tensor *t) {
  nt_Tensor *z = nt_binary_scalar_ex(NT_OP_ADD, t, 8, NT_SCALAR_FLOAT);
  if (!z) return NULL;
  nt_Tensor *w = X_un(NT_OP_RECIPROCAL, nt_retain(z)), *w2 = w ? nt_mul(w, w) : NULL;
  /* log z - w/2 - w2 (1/12 - w2 (1/120 - w2 (1/252 - w2 (1/240 - w2 (1/132 - w2 (691/32760 - w2/12)))))) */
  static const double dc[] = { 1.0 / 12, 1.0 / 120, 1.0 / 252, 1.0 / 240, 1.0 / 132, 691.0 / 32760, 1.0 / 12 };
  nt_Tensor *ser = X_mul(w2, alt_series(nt_retain(w2), dc, 7));
  nt_Tensor *a = X_sub(X_sub(X_un(NT_OP_LOG, z), X_bs(NT_OP_MUL, w, 0.5)), ser);
  return X_sub(a, shift_sum(t, NT_OP_RECIPROCAL));
}

/* pole: x <= 0 and integral (f64 x) */
static nt_Tensor *poles(nt_Tensor *x) {
  return X_bin(NT_OP_LOGICAL_AND, nt_binary_scalar_ex(NT_OP_LE, x, 0, NT_SCALAR_FLOAT), X_bin(NT_OP_EQ, nt_retain(x), nt_unary(NT_OP_FLOOR, x)));
}

nt_Tensor *nt_lgamma(nt_Tensor *x0) {
  nt_Tensor *x = f64(x0);
  if (!x) return NULL;
  nt_Tensor *refl = nt_binary_scalar_ex(NT_OP_LT, x, 0.5, NT_SCALAR_FLOAT);
  nt_Tensor *t = X_where(nt_retain(refl), X_sb(NT_OP_SUB, 1, nt_retain(x)), nt_retain(x));
  nt_Tensor *lg = t ? lgamma_pos(t) : NULL;
  nt_release(t);
  nt_Tensor *xs = X_where(nt_retain(refl), nt_retain(x), C(x, 0.25));   /* the reflection's input, safe where unused */
  nt_Tensor *sn = X_un(NT_OP_ABS, X_un(NT_OP_SIN, X_bs(NT_OP_MUL, xs, PI)));
  nt_Tensor *rf = X_sub(X_un(NT_OP_LOG, X_sb(NT_OP_DIV, PI, sn)), nt_retain(lg));
  nt_Tensor *r = X_where(refl, rf, lg);
  r = X_where(poles(x), C(x, INFINITY), r);
  nt_release(x);
  return X_dtype(r, float_of(x0->dtype));
}

nt_Tensor *nt_digamma(nt_Tensor *x0) {
  nt_Tensor *x = f64(x0);
  if (!x) return NULL;
  nt_Tensor *refl = nt_binary_scalar_ex(NT_OP_LT, x, 0.5, NT_SCALAR_FLOAT);
  nt_Tensor *t = X_where(nt_retain(refl), X_sb(NT_OP_SUB, 1, nt_retain(x)), nt_retain(x));
  nt_Tensor *dg = t ? digamma_pos(t) : NULL;
  nt_release(t);
  nt_Tensor *xs = X_where(nt_retain(refl), nt_retain(x), C(x, 0.25));
  nt_Tensor *ct = X_sb(NT_OP_DIV, PI, X_un(NT_OP_TAN, X_bs(NT_OP_MUL, xs, PI)));
  nt_Tensor *r = X_where(refl, X_sub(nt_retain(dg), ct), dg);
  /* psi(0) = -inf; negative integers NaN */
  nt_Tensor *zero = nt_binary_scalar_ex(NT_OP_EQ, x, 0, NT_SCALAR_FLOAT);
  r = X_where(poles(x), X_where(zero, C(x, -INFINITY), C(x, NAN)), r);
  nt_release(x);
  return X_dtype(r, float_of(x0->dtype));
}

/* Giles' polynomial p(w) = sum c[i] w^(n-1-i) by Horner */
static nt_Tensor *horner(nt_Tensor *w, const double *c, int n) {
  nt_Tensor *p = C(w, c[0]);
  for (int i = 1; i < n; i++) p = X_bs(NT_OP_ADD, X_mul(p, nt_retain(w)), c[i]);
  return p;
}

/* one Newton step for erf(y) = x: y - (erf(y) - x) / (2/sqrt(pi) exp(-y^2)) */
static nt_Tensor *newton(nt_Tensor *y, nt_Tensor *x) {
  nt_Tensor *num = X_sub(nt_unary(NT_OP_ERF, y), nt_retain(x));
  nt_Tensor *den = X_bs(NT_OP_MUL, X_un(NT_OP_EXP, X_un(NT_OP_NEG, nt_mul(y, y))), 1.12837916709551257390);
  return X_sub(nt_retain(y), X_div(num, den));
}

nt_Tensor *nt_erfinv(nt_Tensor *x0) {
  nt_Tensor *x = f64(x0);
  if (!x) return NULL;
  static const double lo[] = { 2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                               -0.00125372503, -0.00417768164, 0.246640727, 1.50140941 };
  static const double hi[] = { -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682 };
  bool g = nt_set_grad_enabled(false);
  nt_Tensor *xd = nt_detach(x);
  /* w = -log((1 - x)(1 + x)) */
  nt_Tensor *w = X_un(NT_OP_NEG, X_un(NT_OP_LOG, X_mul(X_sb(NT_OP_SUB, 1, nt_retain(xd)), X_sb(NT_OP_ADD, 1, nt_retain(xd)))));
  nt_Tensor *small = w ? nt_binary_scalar_ex(NT_OP_LT, w, 5, NT_SCALAR_FLOAT) : NULL;
  nt_Tensor *wl = w ? X_bs(NT_OP_SUB, nt_retain(w), 2.5) : NULL;
  nt_Tensor *wh = w ? X_bs(NT_OP_SUB, X_un(NT_OP_SQRT, nt_retain(w)), 3) : NULL;
  nt_Tensor *pl = wl ? horner(wl, lo, 9) : NULL, *ph = wh ? horner(wh, hi, 9) : NULL;
  nt_Tensor *y = X_mul(X_where(small, pl, ph), nt_retain(xd));
  nt_release(wl); nt_release(wh); nt_release(w);
  for (int i = 0; i < 2 && y; i++) { nt_Tensor *t = newton(y, xd); nt_release(y); y = t; }
  nt_release(xd);
  nt_set_grad_enabled(g);
  nt_Tensor *r = y ? newton(y, x) : NULL;   /* y is detached: d r / d x = 1 / erf'(y) */
  nt_release(y);
  nt_Tensor *one = r ? X_bs(NT_OP_EQ, nt_abs(x), 1) : NULL;
  r = X_where(one, X_bs(NT_OP_MUL, nt_detach(x), INFINITY), r);   /* detached: no inf * 0 in the gradient */
  nt_release(x);
  return X_dtype(r, float_of(x0->dtype));
}

nt_Tensor *nt_xlogy(nt_Tensor *x, nt_Tensor *y) {
  nt_DType dt = float_of(nt_result_type(x, y));
  nt_Tensor *xf = nt_to_dtype(x, dt), *yf = nt_to_dtype(y, dt);
  if (!xf || !yf) { nt_release(xf); nt_release(yf); return NULL; }
  nt_Tensor *z = nt_binary_scalar_ex(NT_OP_EQ, xf, 0, NT_SCALAR_FLOAT);
  nt_Tensor *ys = X_where(nt_retain(z), C(yf, 1), nt_retain(yf));   /* log's input, 1 where x == 0 */
  nt_Tensor *r = X_where(z, C(xf, 0), X_mul(nt_retain(xf), X_un(NT_OP_LOG, ys)));
  r = X_where(nt_ne(yf, yf), nt_retain(yf), r);   /* y NaN: NaN, as torch */
  nt_release(xf); nt_release(yf);
  return r;
}
