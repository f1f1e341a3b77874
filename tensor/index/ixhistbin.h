/*
** index/ixhistbin.h — which bin of histogram a value goes to, exactly as
** torch 1.13 decides (aten/src/ATen/native/cpu/HistogramKernel.cpp), written
** once and compiled both into the CPU path (setops.c) and by nvcc into the
** GPU kernel (cuda/index.cu: histogram_count), so both devices and torch
** agree on every value, those on or one ulp from an edge too.
**
** The edges e[0..nb] are the input dtype's values (held in double, exactly).
** A value v outside [e[0], e[nb]], or NaN, is dropped (-1).  Otherwise:
**   HIST_BINARY  (bins given as a tensor of edges): upper_bound over all the
**                edges, minus one;
**   HIST_LINEAR_F64 / HIST_LINEAR_F32  (bins as a count: the edges are a
**                linspace): torch's guess in the input's own arithmetic,
**                  pos = (int64)((v - e[0]) * nb / (e[nb] - e[0]))
**                (every operation in double, or in float for f32 input: that
**                guess can be off by one either way next to an edge), then
**                upper_bound over the edges pos-1 .. pos+1 only, minus one.
**                So the bin is the one the rounded edges say, provided the
**                guess is off by at most one (it always is, unless the range
**                is so narrow for the dtype that edges repeat); the guess is
**                reproduced exactly so that even then we bin as torch does.
** and the last bin includes its right edge (pos == nb becomes nb - 1).
** Where torch's guess is not a number (an infinite or zero-width range in the
** input's type; C leaves that cast undefined) we search all the edges.
*/
#ifndef NT_IXHISTBIN_H
#define NT_IXHISTBIN_H

#include <stdint.h>

#ifdef __CUDACC__
#define NT_HB_FN static inline __host__ __device__
#else
#define NT_HB_FN static inline
#endif

enum { HIST_BINARY = 0, HIST_LINEAR_F64 = 1, HIST_LINEAR_F32 = 2 };

/* std::upper_bound(e + lo, e + hi, v) - e: the first index in [lo, hi) whose edge is > v (hi if none) */
NT_HB_FN int64_t nt_hist_upper_bound(const double *e, int64_t lo, int64_t hi, double v) {
  while (lo < hi) {
    int64_t m = lo + (hi - lo) / 2;
    if (e[m] <= v) lo = m + 1; else hi = m;
  }
  return lo;
}

/* the bin of v among the nb bins e[0..nb], -1 when v is outside them or NaN */
NT_HB_FN int64_t nt_hist_bin(const double *e, int64_t nb, double v, int mode) {
  if (!(v >= e[0] && v <= e[nb])) return -1;
  int64_t lo = 0, hi = nb + 1;   /* the edges to search: all, unless the linear guess narrows them */
  if (mode != HIST_BINARY) {
    double guess;
    if (mode == HIST_LINEAR_F32) {
      float lf = (float)e[0], rf = (float)e[nb];
      guess = (double)(((float)v - lf) * (float)nb / (rf - lf));
    } else {
      guess = (v - e[0]) * (double)nb / (e[nb] - e[0]);
    }
    if (guess >= 0 && guess <= (double)nb) {   /* false for NaN and inf */
      int64_t pos = (int64_t)guess;
      lo = pos - 1 > 0 ? pos - 1 : 0;
      hi = pos + 2 < nb + 1 ? pos + 2 : nb + 1;
    }
  }
  int64_t pos = nt_hist_upper_bound(e, lo, hi, v) - 1;
  return pos == nb ? nb - 1 : pos;
}

#endif
