/*
** trange.h — linspace(start, end, n) and arange(start, stop, step) element by
** element, bit for bit as torch 1.13's CPU kernels make them
** (RangeFactoriesKernel.cpp, the AVX2 build that torch picks on x86-64),
** written once and compiled both into the CPU kernels (tcpu_misc.c) and by
** nvcc into the GPU module (cuda/elementwise.cu), so a linspace (and
** histogram's bin edges, made by linspace) or an arange has the same bits on
** either device and the same as torch's.
**
** torch's arithmetic, in the output's type T (f16/bf16: each operation in
** float, rounded to T, as c10::Half/BFloat16's operators do):
**   step     = (end - start) / (n - 1)         start, end first rounded to T
**   value(j) = start + step * j      j <  n / 2 (one fused multiply-add)
**            = end - step * (n-1-j)  j >= n / 2 (one fused multiply-add)
** and the layout of its vectorised loop: the first n - n % (2w) elements go
** in vectors of w = 32 bytes / sizeof(T) lanes (8 f32, 4 f64, 16 f16/bf16),
** each vector's lane k being  value(j) + k * step  (the product rounded, then
** the sum; no fused multiply-add) from its first index j; the rest take
** value(i) one by one.  So the last element is `end` only when it falls in
** that scalar tail (or a vector's lane 0): torch.linspace(a, b, 8) in f64 may
** end one ulp away from b, and histogram's last edge with it.
** (torch splits n > 32768 elements over its threads, each chunk restarting
** the vectors; this is its one-thread layout.)
**
** arange, float types: the same vector layout; value(j) = start + step * j in
** double (one fused multiply-add) and lane k = value(j) + k * step, fused too,
** for f64; for f32 value(j) rounded to float first and lane k from it in
** double, then rounded; f16/bf16 in float (start and step rounded to float),
** value(j) fused, lane k = value(j) + k * step unfused, each rounded to T.
** Integer aranges are exact (i * step in double below 2^53), as torch's.
**
** The products and sums below must not be fused by the compiler: the CPU
** build targets baseline x86-64 (no FMA instruction to fuse into), and on the
** GPU they are __dmul_rn/__fmul_rn/__fadd_rn/__dadd_rn.
*/
#ifndef NT_TRANGE_H
#define NT_TRANGE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define NT_LS_FN static inline __device__
#define NT_LS_DMUL(a, b) __dmul_rn(a, b)
#define NT_LS_DADD(a, b) __dadd_rn(a, b)
#define NT_LS_FMUL(a, b) __fmul_rn(a, b)
#define NT_LS_FADD(a, b) __fadd_rn(a, b)
#else
#define NT_LS_FN static inline
#define NT_LS_DMUL(a, b) ((a) * (b))
#define NT_LS_DADD(a, b) ((a) + (b))
#define NT_LS_FMUL(a, b) ((a) * (b))
#define NT_LS_FADD(a, b) ((a) + (b))
#endif

/* element i's place in torch's loop: the index j whose value() starts its
** vector (i itself in the scalar tail); *k = i - j, its lane */
NT_LS_FN int64_t nt_linspace_lane(int64_t i, int64_t n, int64_t bytes, int64_t *k) {
  int64_t w = 32 / bytes, vec_end = n - n % (2 * w);
  int64_t j = i < vec_end ? i - i % w : i;
  *k = i - j;
  return j;
}

NT_LS_FN double nt_linspace_f64(int64_t i, int64_t n, double start, double end) {
  if (n == 1) return start;
  double step = (end - start) / (double)(n - 1);
  int64_t k, j = nt_linspace_lane(i, n, 8, &k);
  double base = j < n / 2 ? fma(step, (double)j, start) : fma(-step, (double)(n - 1 - j), end);
  return k ? NT_LS_DADD(base, NT_LS_DMUL((double)k, step)) : base;
}

NT_LS_FN float nt_linspace_f32(int64_t i, int64_t n, double start_, double end_) {
  float start = (float)start_, end = (float)end_;
  if (n == 1) return start;
  float step = (end - start) / (float)(n - 1);
  int64_t k, j = nt_linspace_lane(i, n, 4, &k);
  float base = j < n / 2 ? fmaf(step, (float)j, start) : fmaf(-step, (float)(n - 1 - j), end);
  return k ? NT_LS_FADD(base, NT_LS_FMUL((float)k, step)) : base;
}

/* f16/bf16: RT(x) rounds a float to the 16-bit type and back (c10's
** operators: the float result of each op rounded); integers reach T through
** float, as static_cast<Half>(int64) does */
#define NT_LINSPACE_LOWP(NAME, RT)                                                                  \
  NT_LS_FN float NAME(int64_t i, int64_t n, double start_, double end_) {                           \
    float start = RT((float)start_), end = RT((float)end_);                                          \
    if (n == 1) return start;                                                                        \
    float step = RT(RT(end - start) / RT((float)(n - 1)));                                           \
    int64_t k, j = nt_linspace_lane(i, n, 2, &k);                                                    \
    float base = j < n / 2 ? RT(start + RT(step * RT((float)j))) : RT(end - RT(step * RT((float)(n - 1 - j)))); \
    return k ? RT(base + RT(RT((float)k) * step)) : base;                                            \
  }

/* integers: start and end truncated to the type, the step in double, each
** double value truncated (the vector lanes from the truncated first value) */
NT_LS_FN double nt_linspace_int(int64_t i, int64_t n, double start_, double end_, int64_t bytes) {
  double start = trunc(start_), end = trunc(end_);
  if (n == 1) return start;
  double step = (end - start) / (double)(n - 1);
  int64_t k, j = nt_linspace_lane(i, n, bytes, &k);
  double base = trunc(j < n / 2 ? fma(step, (double)j, start) : fma(-step, (double)(n - 1 - j), end));
  return trunc(k ? NT_LS_DADD(base, NT_LS_DMUL((double)k, step)) : base);
}

/* arange's element i of n: start + i * step, laid out as torch's vectors */
NT_LS_FN double nt_arange_f64(int64_t i, int64_t n, double start, double step) {
  int64_t k, j = nt_linspace_lane(i, n, 8, &k);
  double base = fma(step, (double)j, start);
  return k ? fma((double)k, step, base) : base;
}
NT_LS_FN float nt_arange_f32(int64_t i, int64_t n, double start, double step) {
  int64_t k, j = nt_linspace_lane(i, n, 4, &k);
  float base = (float)fma(step, (double)j, start);
  return k ? (float)fma((double)k, step, (double)base) : base;
}
#define NT_ARANGE_LOWP(NAME, RT)                                                                    \
  NT_LS_FN float NAME(int64_t i, int64_t n, double start_, double step_) {                          \
    float start = (float)start_, step = (float)step_;                                                \
    int64_t k, j = nt_linspace_lane(i, n, 2, &k);                                                    \
    float base = RT(fmaf(step, (float)j, start));                                                    \
    return k ? RT(NT_LS_FADD(base, NT_LS_FMUL((float)k, step))) : base;                              \
  }

#endif
