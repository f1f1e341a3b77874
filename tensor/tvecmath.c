/*
** tvecmath.c — picks the vector width of tvecmath.h for this CPU and runs
** its kernels over big arrays in chunks on the OpenMP pool.
*/
#include "tinternal.h"
#include "tvecmath.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

extern const nt_VecMath nt_vm_scalar;

static const nt_VecMath *vm_chosen;
static pthread_once_t vm_once = PTHREAD_ONCE_INIT;

/* The widest width the CPU (and the OS, which __builtin_cpu_supports checks
** through XGETBV) supports, or NABLA_VECMATH's choice when the CPU has it. */
static void vm_pick(void) {
  const nt_VecMath *best = &nt_vm_scalar;
#if defined(__x86_64__)
  const nt_VecMath *have[4] = { &nt_vm_scalar, &nt_vm_sse2, NULL, NULL };
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) have[2] = &nt_vm_avx2;
  if (have[2] && __builtin_cpu_supports("avx512f")) have[3] = &nt_vm_avx512;
  for (int i = 0; i < 4; i++) if (have[i]) best = have[i];
  const char *want = getenv("NABLA_VECMATH");
  bool found = !want || !*want;
  for (int i = 0; !found && i < 4; i++)
    if (have[i] && strcmp(want, have[i]->name) == 0) { best = have[i]; found = true; }
#else
  const char *want = getenv("NABLA_VECMATH");
  bool found = !want || !*want || strcmp(want, best->name) == 0;
#endif
  /* a typo or a width the CPU lacks must not pass unnoticed (the tests rely on it) */
  if (!found) fprintf(stderr, "nabla: NABLA_VECMATH=%s is not a vector width this CPU has; using %s\n", want, best->name);
  vm_chosen = best;
}

const nt_VecMath *nt_vm(void) {
  pthread_once(&vm_once, vm_pick);
  return vm_chosen;
}

const char *nt_vm_name(void) { return nt_vm()->name; }

/* Elements per task: big enough to amortise the call, small enough that
** 2..64 threads all get work on a 1M-element tensor. */
#define VM_CHUNK 16384

/* Runs CALL(lo, len) over [0, n) in chunks: threaded above NT_OMP_THRESHOLD. */
#define VM_CHUNKED(CALL) do {                                                     \
    if (n <= NT_OMP_THRESHOLD) { int64_t lo = 0, len = n; CALL; break; }          \
    int64_t nchunks = (n + VM_CHUNK - 1) / VM_CHUNK;                              \
    _Pragma("omp parallel for")                                                   \
    for (int64_t c = 0; c < nchunks; c++) {                                       \
      int64_t lo = c * VM_CHUNK, len = n - lo < VM_CHUNK ? n - lo : VM_CHUNK;     \
      CALL;                                                                       \
    }                                                                             \
  } while (0)

void nt_vm_unary_f32(int fn, const float *x, float *y, int64_t n) {
  const nt_VecMath *m = nt_vm();
  VM_CHUNKED(m->unary_f32(fn, x + lo, y + lo, len));
}
void nt_vm_unary_f64(int fn, const double *x, double *y, int64_t n) {
  const nt_VecMath *m = nt_vm();
  VM_CHUNKED(m->unary_f64(fn, x + lo, y + lo, len));
}
void nt_vm_grad_f32(int fn, const float *g, const float *in, float *dx, int64_t n) {
  const nt_VecMath *m = nt_vm();
  VM_CHUNKED(m->grad_f32(fn, g + lo, in + lo, dx + lo, len));
}
void nt_vm_grad_f64(int fn, const double *g, const double *in, double *dx, int64_t n) {
  const nt_VecMath *m = nt_vm();
  VM_CHUNKED(m->grad_f64(fn, g + lo, in + lo, dx + lo, len));
}
/* mode 1 reads only a, mode 2 only b: the other pointer may be NULL */
void nt_vm_pow_f32(const float *a, const float *b, float s, int mode, float *o, int64_t n) {
  const nt_VecMath *m = nt_vm();
  VM_CHUNKED(m->pow_f32(a ? a + lo : NULL, b ? b + lo : NULL, s, mode, o + lo, len));
}
void nt_vm_pow_f64(const double *a, const double *b, double s, int mode, double *o, int64_t n) {
  const nt_VecMath *m = nt_vm();
  VM_CHUNKED(m->pow_f64(a ? a + lo : NULL, b ? b + lo : NULL, s, mode, o + lo, len));
}
