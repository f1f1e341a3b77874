/*
** index/scanmath.h — the combine steps of the inclusive scans (index/scan.c),
** written once and compiled into both the CPU kernel (scan.c) and the GPU
** module (cuda/scan.cu), so the devices cannot drift apart (as gammamath.h
** does for the gamma gradients).  Each is associative, `a` the running value
** of the earlier elements and `b` the later element (or later partial scan):
**   sum:           a + b                     (identity +0: a -0 row sums to +0, as torch's cumsum)
**   prod:          a * b                     (identity 1)
**   logaddexp:     max + log1p(exp(min - max)), NaN propagating, and
**                  logaddexp(±inf, ±inf) of equal infinities = that infinity
**                  (torch's _log_add_exp_helper; identity -inf)
**   max/min pick:  (value, index) pairs: the later pair wins when its value is
**                  NaN, or when the earlier is not NaN and later >= earlier
**                  (<= for min): torch's cummax/cummin — NaN sticks, and the
**                  index is the LAST position of the extreme.  As an order
**                  (NaN above everything, then value, then index) it is a
**                  max, hence associative.  Identity: (-inf or the type's
**                  lowest, -1), which every element beats.
** One function per accumulation type: f (float: f32, f16, bf16), d (f64),
** i (i64: integer inputs of cumprod and cummax/cummin).
*/
#ifndef NT_SCANMATH_H
#define NT_SCANMATH_H

#include <math.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __CUDACC__
#define NT_SC_FN static inline __host__ __device__
#else
#define NT_SC_FN static inline
#endif

/* the scan kinds: iarg[3] of the "scan" op (index/scan.c, cuda/scan.cu) */
enum { NT_SCAN_SUM, NT_SCAN_PROD, NT_SCAN_LSE, NT_SCAN_MAX, NT_SCAN_MIN };

/* min/max as std::min/std::max (a NaN a is kept), a NaN b taken: NaN propagates */
NT_SC_FN float  nt_sc_lse_f(float a, float b) {
  float mn = b != b ? b : (b < a ? b : a), mx = b != b ? b : (a < b ? b : a);
  if (mn != mx || isfinite(mn)) return log1pf(expf(mn - mx)) + mx;
  return a;                            /* both the same infinity */
}
NT_SC_FN double nt_sc_lse_d(double a, double b) {
  double mn = b != b ? b : (b < a ? b : a), mx = b != b ? b : (a < b ? b : a);
  if (mn != mx || isfinite(mn)) return log1p(exp(mn - mx)) + mx;
  return a;
}

/* true when the later value b replaces the earlier extreme a (see above) */
NT_SC_FN bool nt_sc_take_f(float a, float b, bool is_max)    { return b != b || (a == a && (is_max ? b >= a : b <= a)); }
NT_SC_FN bool nt_sc_take_d(double a, double b, bool is_max)  { return b != b || (a == a && (is_max ? b >= a : b <= a)); }
NT_SC_FN bool nt_sc_take_i(int64_t a, int64_t b, bool is_max) { return is_max ? b >= a : b <= a; }

#endif
