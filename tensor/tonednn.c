/*
** tonednn.c — the CPU's bf16 matmul through oneDNN (libdnnl, Apache-2.0),
** the one file that reaches it.  OpenBLAS 0.3.21 has no bf16 GEMM (sbgemm);
** oneDNN's matmul primitive reads bf16 operands, accumulates in f32 on the
** CPU's bf16 dot-product instructions (avx512_bf16, AMX) and writes bf16, so
** an autocast matmul costs one pass instead of three casts and an f32 GEMM.
**
** Loaded on first use with dlopen and no exit on failure: oneDNN is an
** accelerator, not a requirement; without it (or without its header at
** build time) nt_onednn_matmul_bf16 answers 0 and tmatmul.c keeps its f32
** path.  NABLA_ONEDNN=0 turns it off (tests compare both paths); ASan
** builds have it off unless NABLA_ONEDNN=1 (see load).
**
** Primitives are cached by shape and strides (creating one JIT-compiles a
** kernel: ~ms); memory objects are bound to each call's buffers with
** dnnl_memory_set_data_handle.  One mutex: the cache and oneDNN's stream.
*/
#include "tinternal.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>

#define DNNL_FNS(X) X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_memory_desc_init_by_strides) \
  X(dnnl_matmul_desc_init) X(dnnl_primitive_desc_create) X(dnnl_primitive_create) X(dnnl_primitive_desc_destroy) \
  X(dnnl_memory_create) X(dnnl_memory_set_data_handle) X(dnnl_primitive_execute) X(dnnl_stream_wait)
#define DECL(f) static __typeof__(f) *p_##f;
DNNL_FNS(DECL)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static bool ok;
static dnnl_engine_t eng;
static dnnl_stream_t stream;

/* LeakSanitizer's tracer dies (signal 11) once libdnnl's threads exist, so a
** sanitizer build keeps the f32 path unless NABLA_ONEDNN=1 asks for oneDNN */
#if defined(__SANITIZE_ADDRESS__)
#define ONEDNN_DEFAULT "0"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ONEDNN_DEFAULT "0"
#endif
#endif
#ifndef ONEDNN_DEFAULT
#define ONEDNN_DEFAULT "1"
#endif

static void load(void) {
  const char *env = getenv("NABLA_ONEDNN");
  if (!env) env = ONEDNN_DEFAULT;
  if (!strcmp(env, "0")) return;
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
#define RES(f) if (!(p_##f = (__typeof__(f) *)dlsym(h, #f))) return;
  DNNL_FNS(RES)
  if (p_dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return;
  if (p_dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) != dnnl_success) return;
  ok = true;
}

/* a cached primitive: [M, K] x [K, N] -> [M, N] bf16, with the operands' strides */
typedef struct {
  int64_t key[7];   /* M, N, K, a row/col strides, b row/col strides (C is contiguous) */
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c;
} Entry;
#define CACHE 64
static Entry cache[CACHE];
static int ncache, next_evict;

static Entry *lookup(const int64_t key[7]) {
  for (int i = 0; i < ncache; i++)
    if (!memcmp(cache[i].key, key, sizeof cache[i].key)) return &cache[i];
  int64_t M = key[0], N = key[1], K = key[2];
  dnnl_memory_desc_t ad, bd, cd;
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  Entry e = {0};
  memcpy(e.key, key, sizeof e.key);
  if (p_dnnl_memory_desc_init_by_strides(&ad, 2, (dnnl_dims_t){M, K}, dnnl_bf16, (dnnl_dims_t){key[3], key[4]}) ||
      p_dnnl_memory_desc_init_by_strides(&bd, 2, (dnnl_dims_t){K, N}, dnnl_bf16, (dnnl_dims_t){key[5], key[6]}) ||
      p_dnnl_memory_desc_init_by_strides(&cd, 2, (dnnl_dims_t){M, N}, dnnl_bf16, (dnnl_dims_t){N, 1}) ||
      p_dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd) || p_dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) ||
      p_dnnl_primitive_create(&e.prim, pd) || p_dnnl_memory_create(&e.a, &ad, eng, DNNL_MEMORY_NONE) ||
      p_dnnl_memory_create(&e.b, &bd, eng, DNNL_MEMORY_NONE) || p_dnnl_memory_create(&e.c, &cd, eng, DNNL_MEMORY_NONE)) {
    if (pd) p_dnnl_primitive_desc_destroy(pd);
    return NULL;   /* (a few handles may leak on this never-seen path; the caller falls back) */
  }
  p_dnnl_primitive_desc_destroy(pd);
  /* a full cache replaces its entries round-robin; the evicted primitive is kept
  ** alive (never destroyed): a model has few matmul shapes, and destroying would
  ** need the handles of every memory object too */
  if (ncache < CACHE) { cache[ncache] = e; return &cache[ncache++]; }
  Entry *slot = &cache[next_evict];
  next_evict = (next_evict + 1) % CACHE;
  *slot = e;
  return slot;
}

int nt_onednn_matmul_bf16(const void *A, int64_t a_rs, int64_t a_cs, const void *B, int64_t b_rs, int64_t b_cs, void *C, int64_t M,
                          int64_t N, int64_t K) {
  pthread_once(&once, load);
  if (!ok) return 0;
  int64_t key[7] = {M, N, K, a_rs, a_cs, b_rs, b_cs};
  pthread_mutex_lock(&mu);
  Entry *e = lookup(key);
  int rc = 0;
  if (e && !p_dnnl_memory_set_data_handle(e->a, (void *)A) && !p_dnnl_memory_set_data_handle(e->b, (void *)B) &&
      !p_dnnl_memory_set_data_handle(e->c, C)) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
    rc = !p_dnnl_primitive_execute(e->prim, stream, 3, args) && !p_dnnl_stream_wait(stream) ? 1 : -1;
  }
  pthread_mutex_unlock(&mu);
  if (rc < 0) NT_FAIL("matmul: oneDNN's bf16 matmul failed for [%lld, %lld] x [%lld, %lld]", (long long)M, (long long)K, (long long)K, (long long)N);
  return rc;
}

bool nt_onednn_available(void) {
  pthread_once(&once, load);
  return ok;
}

#else   /* built without oneDNN's header: the f32 path always */
int nt_onednn_matmul_bf16(const void *A, int64_t a_rs, int64_t a_cs, const void *B, int64_t b_rs, int64_t b_cs, void *C, int64_t M,
                          int64_t N, int64_t K) {
  (void)A; (void)a_rs; (void)a_cs; (void)B; (void)b_rs; (void)b_cs; (void)C; (void)M; (void)N; (void)K;
  return 0;
}
bool nt_onednn_available(void) { return false; }
#endif
