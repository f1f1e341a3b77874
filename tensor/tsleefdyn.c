/*
** tsleefdyn.c — SLEEF's entry points at one vector width, resolved on first
** use (util/dynload.h); built with tvecmath_isa.c, once per width, with the
** same flags (the vector types of the parameters need them).
**
** Why: libsleef has 892 symbol relocations (GLOB_DAT: lazy binding cannot
** defer them), about a third of the dynamic loader's work at every start,
** yet a script calls SLEEF only when a tensor op needs exp/log/sin/... .  The
** kernels call these definitions; each forwards, through a pointer resolved
** once, to the library's (itself a dispatcher through a pointer), so a call
** costs one more direct call and jump, on 4-16 lanes at a time.
**
** Like tvecmath_isa.c this includes nothing of the project's that could
** carry code (util/dynload.h is declarations and macros only): code compiled
** for AVX must not end up shared with code that runs on any CPU.
*/
#include <sleef.h>
#include "util/dynload.h"

#ifndef NABLA_SLEEF_LIB
#define NABLA_SLEEF_LIB "libsleef.so.3"
#endif

NB_DYNLIB(sleef_lib, NABLA_SLEEF_LIB, "SLEEF (Debian package libsleef3), the vector math of tensor exp, log, sin, ...")

#define SL_(fn, s, w) Sleef_##fn##s##w##_u10
#define SL(fn, s, w) SL_(fn, s, w)

#if defined(NT_VM_AVX512)
#define VF __m512
#define VD __m512d
#define WF 16
#define WD 8
#define SD d
#elif defined(NT_VM_AVX2)
#define VF __m256
#define VD __m256d
#define WF 8
#define WD 4
#define SD d
#elif defined(NT_VM_SSE2)
#define VF __m128
#define VD __m128d
#define WF 4
#define WD 2
#define SD d
#elif defined(NT_VM_SCALAR)
#define VF float
#define VD double
#define WF
#define WD
#define SD   /* Sleef_exp_u10: no d */
#else
#error "tsleefdyn.c: build with one of -DNT_VM_AVX512, -DNT_VM_AVX2, -DNT_VM_SSE2, -DNT_VM_SCALAR"
#endif

/* sleef.h declares the return types `const` (CONST): GCC ignores that and
** clang calls a definition without it a conflicting type, so the
** definitions repeat it, and the warning about it is off here */
#pragma GCC diagnostic ignored "-Wignored-qualifiers"
#define UNARY(fn) \
  NB_SHIM(sleef_lib, CONST VF, SL(fn, f, WF), (VF x), (x)) \
  NB_SHIM(sleef_lib, CONST VD, SL(fn, SD, WD), (VD x), (x))
UNARY(exp)
UNARY(expm1)
UNARY(log)
UNARY(log1p)
UNARY(sin)
UNARY(cos)
UNARY(tanh)
UNARY(erf)
NB_SHIM(sleef_lib, CONST VF, SL(pow, f, WF), (VF x, VF y), (x, y))
NB_SHIM(sleef_lib, CONST VD, SL(pow, SD, WD), (VD x, VD y), (x, y))
