/*
** tintmath.h — integer and modulo arithmetic with Python's semantics, written
** once and compiled both into the CPU kernels (tcpu_elem.c) and by nvcc into
** the GPU module (cuda/elementwise.cu), so `a // b`, `a % b` and `a ** b`
** give the same results on either device (as tphilox.h does for random
** numbers).
**
** Floor division rounds toward -inf; the modulo takes the sign of the
** divisor; an integer division by zero sets *zd (the caller reports it:
** "division by zero") and yields 0; x // -1 wraps like the hardware would
** for INT64_MIN instead of trapping.  Needs <math.h> (fmod).
*/
#ifndef NT_TINTMATH_H
#define NT_TINTMATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define NT_IM_FN static inline __host__ __device__
#else
#define NT_IM_FN static inline
#endif

/* b ** e for integers; a negative e gives 0 except for b = 1 and b = -1 */
NT_IM_FN int64_t nt_ipow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
  int64_t r = 1;
  while (e) { if (e & 1) r *= b; b *= b; e >>= 1; }
  return r;
}
NT_IM_FN int64_t nt_ifloordiv(int64_t x, int64_t y, int *zd) {
  if (y == 0) { *zd = 1; return 0; }
  if (y == -1) return (int64_t)(0 - (uint64_t)x);
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
  return q;
}
NT_IM_FN int64_t nt_imod(int64_t x, int64_t y, int *zd) {
  if (y == 0) { *zd = 1; return 0; }
  if (y == -1) return 0;
  int64_t r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}
/* the floating modulo with the divisor's sign (Python's float %) */
NT_IM_FN double nt_fmod_py(double x, double y) {
  double r = fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}

#endif
