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
** z^2 is split as zh^2 + (z - zh)(z + zh), zh = z with its low 12 mantissa
** bits cleared, so zh^2 is exact in f32 and exp(-zh^2) carries no rounding of
** z^2 (whose error, ~100 * 2^-24 at z = 10, would be 100s of ULP of exp).
**   x <  0: y = (x A) B,          Phi = A B
**   x >= 0: y = x (1 - A B),      Phi = 1 - A B
** with A = t exp(P - (z - zh)(z + zh)) / 2 and B = exp(-zh^2); A's factors
** are normal numbers, so a subnormal result rounds once, at the end.
** Measured over the whole f32 range: see docs/numerics.md ("GELU").
** The branches are bit selects (no vector ?: in C), valid for the one-lane
** scalar build too.
*/
#ifndef NT_GELU_ERFC_F32_H
#define NT_GELU_ERFC_F32_H

static inline vm_vf gelu_bits_f(vm_vi i) { vm_vf f; memcpy(&f, &i, sizeof f); return f; }
static inline vm_vi gelu_bits_i(vm_vf f) { vm_vi i; memcpy(&i, &f, sizeof i); return i; }

#define GELU_ZMAX_BITS 0x41280000   /* 10.5f */

/* *A and *B of the comment above, and the sign mask of x (all ones: x < 0, -0 or -NaN) */
static inline void gelu_erfc_parts(vm_vf x, vm_vf *A, vm_vf *B, vm_vi *neg) {
  vm_vi xi = gelu_bits_i(x);
  vm_vf z = gelu_bits_f(xi & 0x7fffffff) * 0.70710678118654752440f;
  vm_vi zi = gelu_bits_i(z);
  vm_vi big = zi > GELU_ZMAX_BITS;   /* also NaN (its bits are larger): B is NaN then */
  vm_vf zc = gelu_bits_f((zi & ~big) | (GELU_ZMAX_BITS & big));
  vm_vf t = 1.0f / (1.0f + 0.5f * zc);
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
  vm_vf zh = gelu_bits_f(zi & (int32_t)0xfffff000);
  vm_vf lo = (z - zh) * (z + zh);
  *A = 0.5f * t * SL(exp, f, WF)(p - lo);
  *B = SL(exp, f, WF)(-(zh * zh));
  *neg = xi >> 31;
}

/* x Phi(x) */
static inline vm_vf gelu_erf_f32(vm_vf x) {
  vm_vf A, B;
  vm_vi neg;
  gelu_erfc_parts(x, &A, &B, &neg);
  vm_vf tail = (x * A) * B, head = x * (1.0f - A * B);   /* x * (..) keeps +inf: inf * 0 is not formed */
  return gelu_bits_f((gelu_bits_i(tail) & neg) | (gelu_bits_i(head) & ~neg));
}

/* Phi(x) */
static inline vm_vf gelu_phi_f32(vm_vf x) {
  vm_vf A, B;
  vm_vi neg;
  gelu_erfc_parts(x, &A, &B, &neg);
  vm_vf tail = A * B;
  return gelu_bits_f((gelu_bits_i(tail) & neg) | (gelu_bits_i(1.0f - tail) & ~neg));
}

#endif
