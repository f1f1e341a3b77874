/*
** gelu_erfc_f32.h — the exact (erf) GELU's normal CDF for f32 lanes, for
** tvecmath_isa.c only (it needs that file's vm_vf, vm_vi and SLEEF's exp).
**
** SLEEF's 1-ULP erf is general and slow (double-float arithmetic); GELU only
** needs Phi(x) = erfc(-x / sqrt 2) / 2 to f32 accuracy, and it needs it
** RELATIVELY accurate where Phi is tiny (x << 0: y = x Phi(x) is then a small
** number, and 1 + erf(x / sqrt 2) from an absolutely accurate erf would lose
** every bit there).  So, with z = |x| / sqrt 2:
**   erfc(z) = t exp(-z^2) exp(P(t - 0.58)),  t = 1 / (1 + z/2)
** P a degree-10 polynomial fitted (Lawson's iteration toward minimax,
** mpmath reference; tests/tensor_nn/test_gelu_ulp.py says how) to
** ln(erfc(z)) + z^2 - ln(t) on z in [0, 10.5]: |error| < 6.7e-9, a relative
** error of erfc.  (Beyond 10.5, t and P are held at 10.5's: erfc(z)/2 * |x|
** is below f32's smallest subnormal there, and exp(-z^2) is 0.)
** z^2 = x^2 / 2 is split as (xh^2 + (x - xh)(x + xh)) / 2, xh = x with its
** low 12 mantissa bits cleared, so xh^2 / 2 is exact in f32 and exp(-xh^2/2)
** carries no rounding of z^2 (whose error, ~100 * 2^-24 at z = 10, would be
** 100s of ULP of exp; z = |x| / sqrt 2 itself is rounded, so x is split).
**   x <  0: y = (x A) B,          Phi = A B
**   x >= 0: y = x (1 - A B),      Phi = 1 - A B
** with A = t exp(P - (x - xh)(x + xh) / 2) / 2 and B = exp(-xh^2 / 2); A's factors
** are normal numbers, so a subnormal result rounds once, at the end.
** Measured over the whole f32 range: see docs/numerics.md ("GELU").
** The branches are bit selects (no vector ?: in C), valid for the one-lane
** scalar build too.
*/
#ifndef NT_GELU_ERFC_F32_H
#define NT_GELU_ERFC_F32_H

static inline vm_vf gelu_bits_f(vm_vi i) { vm_vf f; memcpy(&f, &i, sizeof f); return f; }
static inline vm_vi gelu_bits_i(vm_vf f) { vm_vi i; memcpy(&i, &f, sizeof i); return i; }

#define GELU_XMAX_BITS 0x416d967f   /* 14.849242f = 10.5 sqrt 2 */

/* *A and *B of the comment above, *L = (x - xh)(x + xh) / 2 (x held as for A), and the sign mask of x (all ones: x < 0, -0 or -NaN) */
static inline void gelu_erfc_parts(vm_vf x, vm_vf *A, vm_vf *B, vm_vf *L, vm_vi *neg) {
  vm_vi xi = gelu_bits_i(x), ai = xi & 0x7fffffff;
  vm_vi big = ai > GELU_XMAX_BITS;   /* also NaN (its bits are larger): B is NaN then */
  vm_vi ci = (ai & ~big) | (GELU_XMAX_BITS & big);
  vm_vf xc = gelu_bits_f(ci);        /* |x| held at 10.5 sqrt 2 */
  vm_vf t = 1.0f / (1.0f + (0.5f * 0.70710678118654752440f) * xc);
  vm_vf u = t - 0.58f;
  vm_vf p = u * -1.337043792e-01f + 1.494081914e-01f;
  p = p * u + 1.338440925e-01f;
  p = p * u - 2.487239093e-01f;
  p = p * u - 4.629097506e-02f;
  p = p * u + 2.962030172e-01f;
  p = p * u - 3.965807334e-02f;
  p = p * u - 4.069025218e-01f;
  p = p * u + 9.476401657e-02f;
  p = p * u + 1.368118882e+00f;
  p = p * u - 5.631567836e-01f;
  /* z^2 = x^2 / 2 from x itself (z = |x| / sqrt 2 rounded would cost its error times 2 z^2) */
  vm_vf xh = gelu_bits_f(ai & (int32_t)0xfffff000), xch = gelu_bits_f(ci & (int32_t)0xfffff000);
  vm_vf lo = 0.5f * ((xc - xch) * (xc + xch));
  *L = lo;
  *A = 0.5f * t * SL(exp, f, WF)(p - lo);
  *B = SL(exp, f, WF)(-0.5f * (xh * xh));
  *neg = xi >> 31;
}

/* x Phi(x) */
static inline vm_vf gelu_erf_f32(vm_vf x) {
  vm_vf A, B, L;
  vm_vi neg;
  gelu_erfc_parts(x, &A, &B, &L, &neg);
  vm_vf tail = (x * A) * B, head = x * (1.0f - A * B);   /* x * (..) keeps +inf: inf * 0 is not formed */
  return gelu_bits_f((gelu_bits_i(tail) & neg) | (gelu_bits_i(head) & ~neg));
}

/* d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) = B exp(-L) / sqrt(2 pi) */
static inline vm_vf gelu_grad_f32(vm_vf x) {
  vm_vf A, B, L;
  vm_vi neg;
  gelu_erfc_parts(x, &A, &B, &L, &neg);
  vm_vf tail = A * B;
  vm_vf cdf = gelu_bits_f((gelu_bits_i(tail) & neg) | (gelu_bits_i(1.0f - tail) & ~neg));
  vm_vf pdf = (SL(exp, f, WF)(-L) * 0.39894228040143267794f) * B;
  return cdf + x * pdf;
}

#endif
