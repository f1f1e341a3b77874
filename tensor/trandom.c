/*
** trandom.c — counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
** The exact mapping (seed, offset, element index) → value is specified in
** tensor.h so that other backends reproduce the numbers element by element.
** Being counter based, every element is computed independently: the loop
** parallelises and a CUDA thread per element gives identical results.
*/
#include "tinternal.h"
#include "tphilox.h"
#include <stdlib.h>

static uint64_t g_seed = 0, g_offset = 0;

/* counts the times the state was set (not advanced): a compiled step's
** capture must see the offsets only advance (tcompile.c) */
static uint64_t g_resets;
uint64_t nt_rng_resets_(void) { return g_resets; }
void nt_seed(uint64_t seed) { g_seed = seed; g_offset = 0; g_resets++; }
void nt_rng_get_state(uint64_t *seed, uint64_t *offset) { *seed = g_seed; *offset = g_offset; }
void nt_rng_set_state(uint64_t seed, uint64_t offset) { g_seed = seed; g_offset = offset; g_resets++; }
/* a kernel that drew its own numbers at the current state (cuDNN's dropout) moves the
** generator on as gen() would have: not a reset, so a captured step may do it */
void nt_rng_advance(uint64_t offsets);   /* its one caller, nn/attention.c, declares it */
void nt_rng_advance(uint64_t offsets) { g_offset += offsets; }

static int k_random(const nt_KernelArgs *a) {
  nt_Tensor *o = a->out;
  int kind = (int)a->iarg[0];
  uint64_t seed = (uint64_t)a->iarg[1], off = (uint64_t)a->iarg[2];
  double s0 = a->s[0], s1 = a->s[1];
  int64_t n = o->numel;
  char *p = nt_base(o);
  size_t es = nt_dtype_size(o->dtype);
  nt_DType dt = o->dtype;
  if (dt == NT_F32) {
    float *f = (float *)p;
    #pragma omp parallel for if(n > NT_OMP_THRESHOLD / 4)
    for (int64_t i = 0; i < n; i++) f[i] = (float)nt_rand_value(kind, seed, off, i, s0, s1);
  } else if (dt == NT_I64 && kind != NT_RAND_NORMAL && kind != NT_RAND_UNIFORM) {
    int64_t *q = (int64_t *)p;
    #pragma omp parallel for if(n > NT_OMP_THRESHOLD / 4)
    for (int64_t i = 0; i < n; i++) q[i] = (int64_t)nt_rand_value(kind, seed, off, i, s0, s1);
  } else {
    #pragma omp parallel for if(n > NT_OMP_THRESHOLD / 4)
    for (int64_t i = 0; i < n; i++) nt_store_from_double(p + i * (int64_t)es, dt, nt_rand_value(kind, seed, off, i, s0, s1));
  }
  return 0;
}

void nt_cpu_register_random(void);
void nt_cpu_register_random(void) { nt_register_kernel(NT_OP_RANDOM, NT_CPU, k_random); }

/* allocates, fills from the generator, advances the offset */
static nt_Tensor *gen(int kind, const int64_t *shape, int ndim, nt_DType dt, nt_Device dev, double s0, double s1) {
  nt_Tensor *t = nt_empty(shape, ndim, dt, dev);
  if (!t) return NULL;
  nt_KernelArgs a = { .op = NT_OP_RANDOM, .out = t, .nin = 0, .s = { s0, s1 },
                      .iarg = { kind, (int64_t)g_seed, (int64_t)g_offset }, .niarg = 3 };
  if (t->numel && nt_dispatch(NT_OP_RANDOM, dev, &a)) { nt_release(t); return NULL; }
  g_offset += ((uint64_t)t->numel + 3) / 4;
  return t;
}

nt_Tensor *nt_rand(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev) {
  if (!nt_dtype_is_float(dt)) NT_FAIL_NULL("rand: expected a floating dtype, got %s", nt_dtype_name(dt));
  return gen(NT_RAND_UNIFORM, shape, ndim, dt, dev, 0, 0);
}

nt_Tensor *nt_normal(const int64_t *shape, int ndim, double mean, double std, nt_DType dt, nt_Device dev) {
  if (!nt_dtype_is_float(dt)) NT_FAIL_NULL("normal: expected a floating dtype, got %s", nt_dtype_name(dt));
  if (!(std >= 0)) NT_FAIL_NULL("normal: std must be non-negative, got %g", std);
  return gen(NT_RAND_NORMAL, shape, ndim, dt, dev, mean, std);
}

nt_Tensor *nt_randn(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev) {
  if (!nt_dtype_is_float(dt)) NT_FAIL_NULL("randn: expected a floating dtype, got %s", nt_dtype_name(dt));
  return gen(NT_RAND_NORMAL, shape, ndim, dt, dev, 0, 1);
}

nt_Tensor *nt_randint(int64_t low, int64_t high, const int64_t *shape, int ndim, nt_DType dt, nt_Device dev) {
  if (high <= low) NT_FAIL_NULL("randint: high (%lld) must be greater than low (%lld)", (long long)high, (long long)low);
  if ((uint64_t)high - (uint64_t)low > ((uint64_t)1 << 32))   /* unsigned: high - low can overflow int64 */
    NT_FAIL_NULL("randint: range high - low must be at most 2^32");
  if (dt == NT_BOOL) NT_FAIL_NULL("randint: bool dtype is not supported");
  return gen(NT_RAND_INT, shape, ndim, dt, dev, (double)low, (double)high);
}

nt_Tensor *nt_bernoulli(nt_Tensor *like, double p) {
  if (!(p >= 0 && p <= 1)) NT_FAIL_NULL("bernoulli: p must be in [0, 1], got %g", p);
  if (!nt_dtype_is_float(like->dtype) && like->dtype != NT_BOOL)
    NT_FAIL_NULL("bernoulli: expected a floating or bool dtype, got %s", nt_dtype_name(like->dtype));
  return gen(NT_RAND_BERNOULLI, like->shape, like->ndim, like->dtype, like->device, p, 0);
}

typedef struct { int64_t key, idx; } KeyIdx;
static int cmp_key(const void *x, const void *y) {
  const KeyIdx *a = x, *b = y;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

nt_Tensor *nt_randperm(int64_t n, nt_DType dt, nt_Device dev) {
  if (n < 0) NT_FAIL_NULL("randperm: n must be non-negative, got %lld", (long long)n);
  nt_Tensor *keys = gen(NT_RAND_KEYS, &n, 1, NT_I64, NT_CPU, 0, 0);
  if (!keys) return NULL;
  KeyIdx *ki = nt_malloc(sizeof(KeyIdx) * (size_t)(n ? n : 1));
  int64_t *perm = ki ? nt_malloc(sizeof(int64_t) * (size_t)(n ? n : 1)) : NULL;
  nt_Tensor *out = NULL;
  if (perm) {
    const int64_t *k = (const int64_t *)nt_base(keys);
    for (int64_t i = 0; i < n; i++) { ki[i].key = k[i]; ki[i].idx = i; }
    qsort(ki, (size_t)n, sizeof *ki, cmp_key);
    for (int64_t i = 0; i < n; i++) perm[i] = ki[i].idx;
    nt_Tensor *cpu = nt_from_buffer(perm, NT_I64, &n, 1, dt);
    out = cpu && dev != NT_CPU ? nt_to_device(cpu, dev) : nt_retain(cpu);
    nt_release(cpu);
  }
  free(ki); free(perm); nt_release(keys);
  return out;
}
