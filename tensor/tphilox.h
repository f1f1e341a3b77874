/*
** tphilox.h — the random-number mapping of tensor.h, written once and compiled
** both into the CPU backend (trandom.c) and by nvcc into the GPU module
** (cuda/random.cu), so `seed(s); randn(n)` gives the same numbers on both.
**
** Element i of a request with state (seed, offset):
**   block = offset + i/4, counter = {lo32(block), hi32(block), 0, 0},
**   key = {lo32(seed), hi32(seed)}, w = philox4x32_10(counter, key)
**   uniform: (w[i%4] >> 8) * 2^-24;  normal: Box-Muller on lanes (2j, 2j+1).
** Values are computed in double.  Bit-exactness needs the same double
** operations on both sides: on the GPU products and sums go through
** __dmul_rn/__dadd_rn so nvcc cannot contract them into FMAs (the CPU build
** does not contract: no -march with FMA).  sqrt is correctly rounded on both;
** log/sin/cos agree to 1 ulp in double, which vanishes when rounding to f32.
** Needs nt_RandKind (tbackend.h) and <math.h>.
*/
#ifndef NT_TPHILOX_H
#define NT_TPHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define NT_RNG_FN static inline __host__ __device__
#else
#define NT_RNG_FN static inline
#endif
#if defined(__CUDA_ARCH__)
#define NT_DMUL(a, b) __dmul_rn((a), (b))
#define NT_DADD(a, b) __dadd_rn((a), (b))
#else
#define NT_DMUL(a, b) ((a) * (b))
#define NT_DADD(a, b) ((a) + (b))
#endif

/* Philox4x32-10 (Salmon et al. 2011): 10 rounds of two 32x32->64 products
** with the standard multipliers and Weyl key bumps. */
NT_RNG_FN void nt_philox(uint64_t block, uint64_t seed, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

NT_RNG_FN double nt_u24(uint32_t w) { return NT_DMUL((double)(w >> 8), 1.0 / 16777216.0); }

/* the value of element i of a request (kind: nt_RandKind; s0, s1: low/high,
** mean/std or p, by kind) */
NT_RNG_FN double nt_rand_value(int kind, uint64_t seed, uint64_t offset, int64_t i, double s0, double s1) {
  uint32_t w[4];
  nt_philox(offset + (uint64_t)i / 4, seed, w);
  int lane = (int)(i % 4);
  switch (kind) {
  case NT_RAND_UNIFORM: return nt_u24(w[lane]);
  case NT_RAND_BERNOULLI: return nt_u24(w[lane]) < s0 ? 1.0 : 0.0;
  case NT_RAND_INT: return NT_DADD(s0, (double)((uint64_t)w[lane] % (uint64_t)(s1 - s0)));
  case NT_RAND_KEYS: return (double)w[lane];
  default: {  /* normal: Box-Muller on the lane pair */
    int j = lane / 2;
    double u1 = NT_DMUL(NT_DADD((double)(w[2 * j] >> 8), 1.0), 1.0 / 16777216.0), u2 = nt_u24(w[2 * j + 1]);
    double r = sqrt(NT_DMUL(-2.0, log(u1))), th = NT_DMUL(NT_DMUL(2.0, 3.14159265358979323846), u2);
    double z = (i & 1) ? NT_DMUL(r, sin(th)) : NT_DMUL(r, cos(th));
    return NT_DADD(s0, NT_DMUL(s1, z));
  }
  }
}

#endif
