/*
** tvecmath.h — vector transcendental math for the CPU kernels (tensor/ and
** tensor/nn/ only): exp, log, log1p, expm1, tanh, erf, sin, cos, pow and the
** activations built on them, over contiguous f32/f64 arrays, from SLEEF.
**
** The project compiles for baseline x86-64 (no -march), so the vector code
** lives in tvecmath_isa.c, built three times (SSE2 = 4 f32 lanes, AVX2+FMA =
** 8, AVX-512 = 16) with SLEEF's dispatching entry points (Sleef_expf8_u10 ...,
** all 1.0-ULP functions); tvecmath.c picks the widest the CPU supports once,
** at start-up (NABLA_VECMATH=sse2|avx2|avx512 forces a narrower one: the tests
** run every width).  Other architectures get a scalar loop over SLEEF's
** scalar forms.
**
** The nt_vm_* entry points split the array into chunks and run them on the
** OpenMP pool above NT_OMP_THRESHOLD elements (one thread below it).
*/
#ifndef NT_TVECMATH_H
#define NT_TVECMATH_H

#include <stdint.h>

/* y = f(x).  SIGMOID 1/(1+exp(-x)), SILU x/(1+exp(-x)), GELU x Phi(x) (erf),
** GELU_TANH the tanh approximation: the formulas of the scalar kernels. */
enum { NT_VM_EXP, NT_VM_LOG, NT_VM_LOG1P, NT_VM_EXPM1, NT_VM_TANH, NT_VM_ERF, NT_VM_SIN, NT_VM_COS,
       NT_VM_SIGMOID, NT_VM_SILU, NT_VM_GELU, NT_VM_GELU_TANH, NT_VM_NFN };

/* one implementation (one vector width); every function works on [0, n) */
typedef struct {
  const char *name;
  void (*unary_f32)(int fn, const float *x, float *y, int64_t n);
  void (*unary_f64)(int fn, const double *x, double *y, int64_t n);
  /* dx = g f'(.): `in` is the saved output y for TANH and SIGMOID, the input x
  ** for SILU, GELU and GELU_TANH */
  void (*grad_f32)(int fn, const float *g, const float *in, float *dx, int64_t n);
  void (*grad_f64)(int fn, const double *g, const double *in, double *dx, int64_t n);
  /* o = pow(a, b); mode 0: a and b arrays, 1: b is the scalar s, 2: a is s */
  void (*pow_f32)(const float *a, const float *b, float s, int mode, float *o, int64_t n);
  void (*pow_f64)(const double *a, const double *b, double s, int mode, double *o, int64_t n);
  /* y = exp(x - shift) when y is not NULL; returns sum exp(x - shift) */
  double (*expsum_f32)(const float *x, float *y, int64_t n, float shift);
  double (*expsum_f64)(const double *x, double *y, int64_t n, double shift);
} nt_VecMath;

/* the implementation chosen for this CPU (never NULL) */
const nt_VecMath *nt_vm(void);
/* "avx512", "avx2", "sse2" or "scalar" */
const char *nt_vm_name(void);

/* chunked and threaded forms of the above */
void nt_vm_unary_f32(int fn, const float *x, float *y, int64_t n);
void nt_vm_unary_f64(int fn, const double *x, double *y, int64_t n);
void nt_vm_grad_f32(int fn, const float *g, const float *in, float *dx, int64_t n);
void nt_vm_grad_f64(int fn, const double *g, const double *in, double *dx, int64_t n);
void nt_vm_pow_f32(const float *a, const float *b, float s, int mode, float *o, int64_t n);
void nt_vm_pow_f64(const double *a, const double *b, double s, int mode, double *o, int64_t n);

/* per-width tables, defined by tvecmath_isa.c builds (x86-64 only) */
extern const nt_VecMath nt_vm_sse2, nt_vm_avx2, nt_vm_avx512;

#endif
