/*
** tvecmath_half.c — bf16/f16 <-> f32 conversions at vector width and the
** blocked driver of tvecmath_half.h.
**
** The conversions are written once as branch-free integer code (CONV_BODIES)
** and compiled for AVX-512 and AVX2 with target attributes (the project builds
** for baseline x86-64); GCC vectorizes the loops (16 / 8 lanes).  Each one is
** the scalar reference's rounding done with selects instead of branches:
**   bf16 <- f32: x + 0x7fff + ((x >> 16) & 1), high half (nearest even);
**                NaN: the high half with the quiet bit set.
**   f32 <- f16:  normal: rebias the exponent; inf/NaN: exponent 255, payload
**                kept; subnormal: man * 2^-24 (exact in f32).
**   f16 <- f32:  normal: rebias, then the same nearest-even add on the 13
**                dropped bits (a carry into the exponent is correct, up to
**                inf); |x| < 2^-14: x + 0.5 as f32 and the low bits (the FPU
**                rounds to nearest even at the f16 subnormal spacing, 2^-24);
**                >= 65520 (after rounding): inf; NaN: 0x7e00.
** tests/numerics/test_half_kernels.py checks them bit for bit against the
** scalar forms (NABLA_VECMATH=sse2 runs those) on all 65536 half patterns and
** random/special f32 ones.
*/
#include "tinternal.h"
#include "tvecmath.h"
#include "tvecmath_half.h"
#include <pthread.h>

/* ---- conversions ------------------------------------------------------- */
static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

#define CONV_BODIES(SUF, ATTR)                                                               \
  ATTR static void bf16_to_f32_##SUF(const uint16_t *restrict x, float *restrict y, int64_t n) { \
    for (int64_t i = 0; i < n; i++) y[i] = u2f((uint32_t)x[i] << 16);                        \
  }                                                                                          \
  ATTR static void f32_to_bf16_##SUF(const float *restrict x, uint16_t *restrict y, int64_t n) { \
    for (int64_t i = 0; i < n; i++) {                                                        \
      uint32_t u = f2u(x[i]);                                                                \
      uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;            \
      y[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);                            \
    }                                                                                        \
  }                                                                                          \
  ATTR static void f16_to_f32_##SUF(const uint16_t *restrict x, float *restrict y, int64_t n) { \
    for (int64_t i = 0; i < n; i++) {                                                        \
      uint32_t h = x[i], s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;      \
      uint32_t norm = s | ((e + 112u) << 23) | (m << 13);                                    \
      uint32_t infnan = s | 0x7f800000u | (m << 13);                                         \
      uint32_t sub = s | f2u((float)(int32_t)m * 0x1p-24f);                                  \
      uint32_t ms = 0u - (uint32_t)(e == 0), mi = 0u - (uint32_t)(e == 31);  /* masks: no branches */ \
      y[i] = u2f((sub & ms) | (infnan & mi) | (norm & ~(ms | mi)));                          \
    }                                                                                        \
  }                                                                                          \
  ATTR static void f32_to_f16_##SUF(const float *restrict x, uint16_t *restrict y, int64_t n) { \
    for (int64_t i = 0; i < n; i++) {                                                        \
      uint32_t u = f2u(x[i]), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;                  \
      uint32_t norm = (a - ((127u - 15u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;          \
      uint32_t sub = f2u(u2f(a) + 0.5f) - 0x3f000000u;                                       \
      uint32_t mn = 0u - (uint32_t)(a > 0x7f800000u), mo = (0u - (uint32_t)(a >= 0x47800000u)) & ~mn; \
      uint32_t ms = 0u - (uint32_t)(a < 0x38800000u), mr = ~(mn | mo | ms);                  \
      uint32_t h = (0x7e00u & mn) | (0x7c00u & mo) | (sub & ms) | (norm & mr);               \
      y[i] = (uint16_t)(s | h);                                                              \
    }                                                                                        \
  }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_WIDE 1
CONV_BODIES(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))))
CONV_BODIES(avx2, __attribute__((target("avx2"))))
#else
#define HAVE_WIDE 0
#endif

/* the scalar reference (tdtype.h): what "sse2" and "scalar" run */
static void bf16_to_f32_ref(const uint16_t *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = nt_bf16_to_f32(x[i]); }
static void f32_to_bf16_ref(const float *x, uint16_t *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = nt_f32_to_bf16(x[i]); }
static void f16_to_f32_ref(const uint16_t *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = nt_f16_to_f32(x[i]); }
static void f32_to_f16_ref(const float *x, uint16_t *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = nt_f32_to_f16(x[i]); }

/* 2: AVX-512, 1: AVX2, 0: the reference; follows tvecmath's width choice
** (looked up once: fused chains call the converters per small tile) */
static int width_v;
static pthread_once_t width_once = PTHREAD_ONCE_INIT;
static void width_pick(void) {
#if HAVE_WIDE
  const char *w = nt_vm_name();
  width_v = strcmp(w, "avx512") == 0 ? 2 : strcmp(w, "avx2") == 0 ? 1 : 0;
#endif
}
static int width(void) {
  pthread_once(&width_once, width_pick);
  return width_v;
}

void nt_half_to_f32(bool bf, const uint16_t *x, float *y, int64_t n) {
#if HAVE_WIDE
  switch (width()) {
    case 2: if (bf) bf16_to_f32_avx512(x, y, n); else f16_to_f32_avx512(x, y, n); return;
    case 1: if (bf) bf16_to_f32_avx2(x, y, n); else f16_to_f32_avx2(x, y, n); return;
    default: break;
  }
#endif
  if (bf) bf16_to_f32_ref(x, y, n); else f16_to_f32_ref(x, y, n);
}

void nt_f32_to_half(bool bf, const float *x, uint16_t *y, int64_t n) {
#if HAVE_WIDE
  switch (width()) {
    case 2: if (bf) f32_to_bf16_avx512(x, y, n); else f32_to_f16_avx512(x, y, n); return;
    case 1: if (bf) f32_to_bf16_avx2(x, y, n); else f32_to_f16_avx2(x, y, n); return;
    default: break;
  }
#endif
  if (bf) f32_to_bf16_ref(x, y, n); else f32_to_f16_ref(x, y, n);
}

#define PAR_CHUNK 16384
void nt_half_to_f32_par(bool bf, const uint16_t *x, float *y, int64_t n) {
  int64_t nc = (n + PAR_CHUNK - 1) / PAR_CHUNK;
  _Pragma("omp parallel for if (n > NT_OMP_THRESHOLD)")
  for (int64_t c = 0; c < nc; c++) {
    int64_t lo = c * PAR_CHUNK, len = n - lo < PAR_CHUNK ? n - lo : PAR_CHUNK;
    nt_half_to_f32(bf, x + lo, y + lo, len);
  }
}
void nt_f32_to_half_par(bool bf, const float *x, uint16_t *y, int64_t n) {
  int64_t nc = (n + PAR_CHUNK - 1) / PAR_CHUNK;
  _Pragma("omp parallel for if (n > NT_OMP_THRESHOLD)")
  for (int64_t c = 0; c < nc; c++) {
    int64_t lo = c * PAR_CHUNK, len = n - lo < PAR_CHUNK ? n - lo : PAR_CHUNK;
    nt_f32_to_half(bf, x + lo, y + lo, len);
  }
}

/* ---- the blocked driver ----------------------------------------------------- */
static void map_block(bool bf, const uint16_t *in0, const uint16_t *in1, uint16_t *out, int64_t len,
                      nt_HalfBlockFn f, void *ctx) {
  _Alignas(64) float b0[NT_HALF_BLOCK], b1[NT_HALF_BLOCK], bo[NT_HALF_BLOCK];
  nt_half_to_f32(bf, in0, b0, len);
  if (in1) nt_half_to_f32(bf, in1, b1, len);
  const float *in[2] = { b0, in1 ? b1 : NULL };
  f(ctx, in, bo, len);
  nt_f32_to_half(bf, bo, out, len);
}

/* Blocks per OpenMP task: 16 (16384 elements), so a task amortises its
** scheduling and 2..64 threads all get work on a 1M-element tensor. */
#define MAP_TASK 16
int nt_half_map(bool bf, const uint16_t *in0, const uint16_t *in1, uint16_t *out, int64_t n,
                nt_HalfBlockFn f, void *ctx) {
  for (int64_t c0 = 0; c0 < n; c0 += NT_CHUNK) {
    int64_t c1 = n - c0 > NT_CHUNK ? c0 + NT_CHUNK : n, span = MAP_TASK * NT_HALF_BLOCK;
    int64_t ntask = (c1 - c0 + span - 1) / span;
    if (c0 && NT_INTERRUPTED()) NT_FAIL_INTERRUPTED();
    if (c1 - c0 <= NT_OMP_THRESHOLD) {   /* small (a fused chain's tile): no OpenMP region at all */
      for (int64_t lo = c0; lo < c1; lo += NT_HALF_BLOCK)
        map_block(bf, in0 + lo, in1 ? in1 + lo : NULL, out + lo, c1 - lo < NT_HALF_BLOCK ? c1 - lo : NT_HALF_BLOCK, f, ctx);
      continue;
    }
    _Pragma("omp parallel for if (ntask > 1)")
    for (int64_t k = 0; k < ntask; k++) {
      int64_t t1 = c0 + (k + 1) * span < c1 ? c0 + (k + 1) * span : c1;
      for (int64_t lo = c0 + k * span; lo < t1; lo += NT_HALF_BLOCK) {
        int64_t len = t1 - lo < NT_HALF_BLOCK ? t1 - lo : NT_HALF_BLOCK;
        map_block(bf, in0 + lo, in1 ? in1 + lo : NULL, out + lo, len, f, ctx);
      }
    }
  }
  return 0;
}
