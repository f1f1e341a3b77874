/*
** tvecmath_isa.c — the kernels of tvecmath.h at one vector width, built once
** per width by tensor/meson.build: -DNT_VM_AVX512 (-mavx512f), -DNT_VM_AVX2
** (-mavx2 -mfma), -DNT_VM_SSE2 (the x86-64 baseline) and -DNT_VM_SCALAR (one
** lane, SLEEF's scalar functions; the only one on other architectures).
**
** The loops are written once, in tvecmath_tmpl.h, with GCC vector types
** (arithmetic operators work on them; they are SLEEF's __m512/__m256/__m128
** types) and included twice, for f32 and f64.  This file includes nothing of
** the rest of the project: code compiled for AVX must not end up shared with
** code that runs on any CPU.
*/
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <sleef.h>
#include "tvecmath.h"

#define SL_(fn, s, w) Sleef_##fn##s##w##_u10
#define SL(fn, s, w) SL_(fn, s, w)

#if defined(NT_VM_AVX512)
typedef __m512 vm_vf;
typedef __m512d vm_vd;
#define WF 16
#define WD 8
#define SD d
#define VM_NAME "avx512"
#define VM_TABLE nt_vm_avx512
#elif defined(NT_VM_AVX2)
typedef __m256 vm_vf;
typedef __m256d vm_vd;
#define WF 8
#define WD 4
#define SD d
#define VM_NAME "avx2"
#define VM_TABLE nt_vm_avx2
#elif defined(NT_VM_SSE2)
typedef __m128 vm_vf;
typedef __m128d vm_vd;
#define WF 4
#define WD 2
#define SD d
#define VM_NAME "sse2"
#define VM_TABLE nt_vm_sse2
#elif defined(NT_VM_SCALAR)
typedef float vm_vf;
typedef double vm_vd;
#define WF
#define WD
#define SD   /* Sleef_exp_u10: no d */
#define VM_NAME "scalar"
#define VM_TABLE nt_vm_scalar
extern const nt_VecMath nt_vm_scalar;
#else
#error "tvecmath_isa.c: build with one of -DNT_VM_AVX512, -DNT_VM_AVX2, -DNT_VM_SSE2, -DNT_VM_SCALAR"
#endif

#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794
#define SQRT_2_PI 0.79788456080286535588
#define GELU_A 0.044715

/* ANY(m): does the comparison result m (all ones in a true lane; 1 in the
** scalar build) have a true lane? */
#if defined(NT_VM_SCALAR)
#define ANY(m) (m)
#else
static inline int any_lane(const void *m, size_t bytes) {
  uint64_t w[8], acc = 0;
  memcpy(w, m, bytes);
  for (size_t k = 0; k < bytes / 8; k++) acc |= w[k];
  return acc != 0;
}
#define ANY(m) ({ __auto_type m_ = (m); any_lane(&m_, sizeof m_); })
#endif

/* lanes of V (1 for the scalar build, whose W macros are empty) */
#define LANES (sizeof(V) / sizeof(T))
#define LOAD(p) ({ V v_; memcpy(&v_, (p), sizeof v_); v_; })
#define STORE(p, v) do { V s_ = (v); memcpy((p), &s_, sizeof s_); } while (0)

/* ys = E(x) over [0, n): whole vectors, then the tail through a zero-padded
** vector, so every element gets the same code (and the same rounding). */
#define MAP1(xs, ys, E) do {                                                         \
    int64_t i_ = 0;                                                                  \
    for (; i_ + (int64_t)LANES <= n; i_ += LANES) { V x = LOAD(xs + i_); STORE(ys + i_, E); } \
    if (i_ < n) {                                                                    \
      T bx_[LANES], by_[LANES]; size_t r_ = (size_t)(n - i_) * sizeof(T);            \
      memset(bx_, 0, sizeof bx_); memcpy(bx_, xs + i_, r_);                          \
      V x = LOAD(bx_); STORE(by_, E); memcpy(ys + i_, by_, r_);                      \
    }                                                                                \
  } while (0)
/* the same with two inputs, named a and b in E */
#define MAP2(as, bs, os, E) do {                                                     \
    int64_t i_ = 0;                                                                  \
    for (; i_ + (int64_t)LANES <= n; i_ += LANES) {                                  \
      V a = LOAD(as + i_), b = LOAD(bs + i_); STORE(os + i_, E);                     \
    }                                                                                \
    if (i_ < n) {                                                                    \
      T ba_[LANES], bb_[LANES], bo_[LANES]; size_t r_ = (size_t)(n - i_) * sizeof(T); \
      memset(ba_, 0, sizeof ba_); memset(bb_, 0, sizeof bb_);                        \
      memcpy(ba_, as + i_, r_); memcpy(bb_, bs + i_, r_);                            \
      V a = LOAD(ba_), b = LOAD(bb_); STORE(bo_, E); memcpy(os + i_, bo_, r_);       \
    }                                                                                \
  } while (0)

/* SLEEF's documented ranges: its 1-ULP sin/cos return "an arbitrary value in
** [-1, 1]" beyond |x| = 1e28 (f32) / 1e299 (f64), and its log1p overflows
** above 1e38 / 1e307.  Lanes out there (rare) are recomputed: sin/cos by the
** C library, log1p(x) as log(x), which it equals to the last bit there. */
/* the f32 lanes as int32 (bit tricks of gelu_tmpl.h) */
typedef int32_t vm_vi __attribute__((vector_size(sizeof(vm_vf))));
#include "gelu_erfc_f32.h"

#define T float
#define V vm_vf
#define VM_GELU_OWN 1   /* the exact GELU's Phi from gelu_erfc_f32.h, not SLEEF's erf */
#define TRIG_MAX 1e28f
#define LOG1P_MAX 1e38f
#define LIBM(fn) fn##f
#define F(fn) SL(fn, f, WF)
#define FN(name) name##_f32
#include "tvecmath_tmpl.h"
#undef T
#undef V
#undef F
#undef FN
#undef VM_GELU_OWN
#undef TRIG_MAX
#undef LOG1P_MAX
#undef LIBM

#define T double
#define V vm_vd
#define TRIG_MAX 1e299
#define LOG1P_MAX 1e307
#define LIBM(fn) fn
#define F(fn) SL(fn, SD, WD)
#define FN(name) name##_f64
#include "tvecmath_tmpl.h"

const nt_VecMath VM_TABLE = {
  VM_NAME, unary_f32, unary_f64, grad_f32, grad_f64, pow_f32, pow_f64, expsum_f32, expsum_f64,
};
