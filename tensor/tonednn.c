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
**
** Threads: Debian's libdnnl runs on OpenMP (the same libgomp as our kernels
** and OpenBLAS's OpenMP build: one pool, one count, one library at a time,
** all called from the VM's thread).  A primitive fixes its thread count when
** it is created (omp_get_max_threads() then: its work split), so every cache
** key holds the count it was made for: after set_num_threads(n) the next
** call makes (or finds) a primitive for n threads, never one for the old
** count (which kept using 2 threads after set_num_threads(1)).
*/
#include "tinternal.h"
#include "tonednn.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
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
static int last_threads;   /* the thread count of the primitive run last (nt_onednn_threads) */


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
  int64_t key[8];   /* M, N, K, a row/col strides, b row/col strides (C is contiguous), threads */
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c;
} Entry;
#define CACHE 64
static Entry cache[CACHE];
static int ncache, next_evict;

static Entry *lookup(const int64_t key[8]) {
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
  int64_t key[8] = {M, N, K, a_rs, a_cs, b_rs, b_cs, nt_num_threads()};
  pthread_mutex_lock(&mu);
  Entry *e = lookup(key);
  int rc = 0;
  if (e) last_threads = (int)key[7];
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

/* ---- convolutions (issue 29) -------------------------------------------------------
** oneDNN's convolution primitives, the ones PyTorch's CPU convolutions run on:
** fwd (y = conv(x, w) + b), bwd-data (dx) and bwd-weights (dW), in f32 or
** bf16 (bf16 operands, f32 accumulation inside oneDNN, bf16 results; the
** bias in its tensor's dtype).  Our tensors are plain NCHW / OIHW (GOIHW
** with groups); each primitive is created with format "any" so oneDNN
** picks its blocked layouts (nChw16c, ...), and every operand whose chosen
** layout differs gets a reorder into (inputs) or out of (outputs) a buffer
** of the primitive's own — as PyTorch's ideep does.
** Cache: entries keyed by (dtype, kind, bias, geometry, threads), bound to
** each call's buffers.  An entry's reorder buffers are activation-sized, so the
** cache is bounded by their bytes: NABLA_ONEDNN_CONV_CACHE_MB (default 256;
** the small ResNet of bench_models29 needs ~30 entries, ~100 MB) and at most
** CONV_CACHE entries; past either the least recently used entries are freed.
** An entry bigger than the whole bound runs once and is freed at once.
** (oneDNN's own scratchpads are its library-managed ones, not counted.)
** Resolved on first use after the matmul's loader (same handle, engine,
** stream and mutex); any failure answers 0 and conv.c runs its own path. */
#define DNNL_CONV_FNS(X) X(dnnl_memory_desc_init_by_tag) X(dnnl_dilated_convolution_forward_desc_init) \
  X(dnnl_dilated_convolution_backward_data_desc_init) X(dnnl_dilated_convolution_backward_weights_desc_init) \
  X(dnnl_primitive_desc_query_md) X(dnnl_memory_desc_equal) X(dnnl_reorder_primitive_desc_create) \
  X(dnnl_primitive_destroy) X(dnnl_memory_destroy) X(dnnl_memory_desc_get_size)
DNNL_CONV_FNS(DECL)
static pthread_once_t conv_once = PTHREAD_ONCE_INIT;
static bool conv_ok;
static size_t conv_limit = (size_t)256 << 20;

static void conv_load(void) {
  pthread_once(&once, load);
  if (!ok) return;
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) return;
  DNNL_CONV_FNS(RES)
  const char *env = getenv("NABLA_ONEDNN_CONV");   /* 0: conv.c's own kernels (tests compare both) */
  conv_ok = !env || strcmp(env, "0");
  const char *mb = getenv("NABLA_ONEDNN_CONV_CACHE_MB");
  if (mb && *mb) {
    char *end;
    unsigned long long v = strtoull(mb, &end, 10);
    if (*end || *mb == '-' || v > ((size_t)1 << 24))
      fprintf(stderr, "nabla: NABLA_ONEDNN_CONV_CACHE_MB=%s is not a size in MiB from 0 to %d; using %zu\n", mb, 1 << 24, conv_limit >> 20);
    else
      conv_limit = (size_t)v << 20;
  }
}

/* one operand of a cached primitive: the user's plain memory and, when the
** primitive wants another layout, its own memory and the reorder between */
typedef struct { int arg; bool out; dnnl_memory_t user, inner; dnnl_primitive_t reorder; } ConvPort;
typedef struct {
  int64_t key[19];   /* dtype, kind * 3 + bias, threads, then the geometry (nt_OnednnConvGeom) */
  dnnl_primitive_t prim;
  int nport;
  ConvPort port[4];
  size_t bytes;      /* its reorder buffers */
  uint64_t used;     /* the clock of its last use (LRU) */
} ConvEntry;
#define CONV_CACHE 64
static ConvEntry conv_cache[CONV_CACHE], conv_oversize;
static int conv_n;
static size_t conv_bytes;
static uint64_t conv_clock;

static void conv_entry_free(ConvEntry *e) {
  for (int i = 0; i < e->nport; i++) {
    ConvPort *p = &e->port[i];
    if (p->reorder) p_dnnl_primitive_destroy(p->reorder);
    if (p->inner) p_dnnl_memory_destroy(p->inner);
    if (p->user) p_dnnl_memory_destroy(p->user);
  }
  if (e->prim) p_dnnl_primitive_destroy(e->prim);
  memset(e, 0, sizeof *e);
}
/* frees the least recently used entry; the last entry moves into its slot */
static void conv_evict_lru(void) {
  int k = 0;
  for (int i = 1; i < conv_n; i++)
    if (conv_cache[i].used < conv_cache[k].used) k = i;
  conv_bytes -= conv_cache[k].bytes;
  conv_entry_free(&conv_cache[k]);
  conv_cache[k] = conv_cache[--conv_n];
  memset(&conv_cache[conv_n], 0, sizeof conv_cache[conv_n]);
}

/* adds operand `arg` with the user's layout `user` and the primitive's `want` */
static int conv_port(ConvEntry *e, int arg, bool out, const dnnl_memory_desc_t *user, const dnnl_memory_desc_t *want) {
  ConvPort *p = &e->port[e->nport++];
  p->arg = arg; p->out = out;
  if (p_dnnl_memory_create(&p->user, user, eng, DNNL_MEMORY_NONE)) return -1;
  if (p_dnnl_memory_desc_equal(user, want)) return 0;
  dnnl_primitive_desc_t rpd = NULL;
  int bad = p_dnnl_memory_create(&p->inner, want, eng, DNNL_MEMORY_ALLOCATE) ||
            p_dnnl_reorder_primitive_desc_create(&rpd, out ? want : user, eng, out ? user : want, eng, NULL) ||
            p_dnnl_primitive_create(&p->reorder, rpd);
  if (rpd) p_dnnl_primitive_desc_destroy(rpd);
  e->bytes += p_dnnl_memory_desc_get_size(want);
  return bad ? -1 : 0;
}

/* the cached entry for (dt, kind, geometry, bias dtype) — made when absent; NULL: oneDNN does not take it */
static ConvEntry *conv_lookup(dnnl_data_type_t dt, int kind, const nt_OnednnConvGeom *g, int bias) {
  int64_t key[19] = {dt, kind * 3 + bias, nt_num_threads()};
  memcpy(key + 3, g, sizeof *g);
  for (int i = 0; i < conv_n; i++)
    if (!memcmp(conv_cache[i].key, key, sizeof key)) { conv_cache[i].used = ++conv_clock; return &conv_cache[i]; }
  int64_t G = g->G > 1 ? g->G : 1, span_h = (g->kh - 1) * g->dh + 1, span_w = (g->kw - 1) * g->dw + 1;
  dnnl_dims_t strides = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1}, pl = {g->ph, g->pw},
              pr = {(g->Ho - 1) * g->sh + span_h - g->H - g->ph, (g->Wo - 1) * g->sw + span_w - g->W - g->pw};
  if (pr[0] < 0 || pr[1] < 0) return NULL;   /* rows/columns the stride skips at the end: conv.c's path */
  dnnl_memory_desc_t x, w, b, y, xa, wa, ya;
  dnnl_dims_t xd = {g->N, g->C, g->H, g->W}, yd = {g->N, g->O, g->Ho, g->Wo}, bd = {g->O},
              wd = {G, g->O / G, g->C / G, g->kh, g->kw}, wd1 = {g->O, g->C, g->kh, g->kw};
  int wn = G > 1 ? 5 : 4;
  if (p_dnnl_memory_desc_init_by_tag(&x, 4, xd, dt, dnnl_nchw) || p_dnnl_memory_desc_init_by_tag(&y, 4, yd, dt, dnnl_nchw) ||
      p_dnnl_memory_desc_init_by_tag(&b, 1, bd, bias == 2 ? dnnl_bf16 : dnnl_f32, dnnl_x) ||
      p_dnnl_memory_desc_init_by_tag(&w, wn, G > 1 ? wd : wd1, dt, G > 1 ? dnnl_goihw : dnnl_oihw) ||
      p_dnnl_memory_desc_init_by_tag(&xa, 4, xd, dt, dnnl_format_tag_any) ||
      p_dnnl_memory_desc_init_by_tag(&ya, 4, yd, dt, dnnl_format_tag_any) ||
      p_dnnl_memory_desc_init_by_tag(&wa, wn, G > 1 ? wd : wd1, dt, dnnl_format_tag_any))
    return NULL;
  /* the forward descriptor: the primitive (kind 0) or the hint the backward ones need */
  dnnl_convolution_desc_t fd, bdsc;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  if (p_dnnl_dilated_convolution_forward_desc_init(&fd, kind ? dnnl_forward_training : dnnl_forward_inference, dnnl_convolution_direct,
                                                   &xa, &wa, bias ? &b : NULL, &ya, strides, dil, pl, pr) ||
      p_dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL))
    return NULL;
  int bad = 0;
  if (kind == 0) { pd = fpd; fpd = NULL; }
  else if (kind == 1)
    bad = p_dnnl_dilated_convolution_backward_data_desc_init(&bdsc, dnnl_convolution_direct, &xa, &wa, &ya, strides, dil, pl, pr) ||
          p_dnnl_primitive_desc_create(&pd, &bdsc, NULL, eng, fpd);
  else
    bad = p_dnnl_dilated_convolution_backward_weights_desc_init(&bdsc, dnnl_convolution_direct, &xa, &wa, NULL, &ya, strides, dil, pl, pr) ||
          p_dnnl_primitive_desc_create(&pd, &bdsc, NULL, eng, fpd);
  if (fpd) p_dnnl_primitive_desc_destroy(fpd);
  if (bad || !pd) return NULL;
  ConvEntry e = {0};
  memcpy(e.key, key, sizeof key);
#define MD(q) p_dnnl_primitive_desc_query_md(pd, q, 0)   /* the layout the primitive chose */
  if (kind == 0)
    bad = conv_port(&e, DNNL_ARG_SRC, false, &x, MD(dnnl_query_src_md)) || conv_port(&e, DNNL_ARG_WEIGHTS, false, &w, MD(dnnl_query_weights_md)) ||
          conv_port(&e, DNNL_ARG_DST, true, &y, MD(dnnl_query_dst_md)) || (bias && conv_port(&e, DNNL_ARG_BIAS, false, &b, &b));
  else if (kind == 1)
    bad = conv_port(&e, DNNL_ARG_DIFF_DST, false, &y, MD(dnnl_query_diff_dst_md)) ||
          conv_port(&e, DNNL_ARG_WEIGHTS, false, &w, MD(dnnl_query_weights_md)) ||
          conv_port(&e, DNNL_ARG_DIFF_SRC, true, &x, MD(dnnl_query_diff_src_md));
  else
    bad = conv_port(&e, DNNL_ARG_SRC, false, &x, MD(dnnl_query_src_md)) || conv_port(&e, DNNL_ARG_DIFF_DST, false, &y, MD(dnnl_query_diff_dst_md)) ||
          conv_port(&e, DNNL_ARG_DIFF_WEIGHTS, true, &w, MD(dnnl_query_diff_weights_md));
#undef MD
  bad = bad || p_dnnl_primitive_create(&e.prim, pd);
  p_dnnl_primitive_desc_destroy(pd);
  if (bad) { conv_entry_free(&e); return NULL; }
  e.used = ++conv_clock;
  if (e.bytes > conv_limit) { conv_oversize = e; return &conv_oversize; }   /* never cached (the rest stays): the caller frees it after its call */
  while (conv_n && (conv_n == CONV_CACHE || conv_bytes + e.bytes > conv_limit)) conv_evict_lru();
  conv_bytes += e.bytes;
  conv_cache[conv_n] = e;
  return &conv_cache[conv_n++];
}

static int conv_run(dnnl_data_type_t dt, int kind, const nt_OnednnConvGeom *g, const void *a, const void *b, const void *bias, int bias_kind,
                    void *out) {
  if (kind < 0 || kind > 2) return 0;
  pthread_once(&conv_once, conv_load);
  if (!conv_ok) return 0;
  pthread_mutex_lock(&mu);
  ConvEntry *e = conv_lookup(dt, kind, g, kind == 0 && bias ? bias_kind : 0);
  int rc = e ? 1 : 0;
  if (e) last_threads = (int)e->key[2];
  /* the buffers in port order: fwd {x, w, y, bias}; bwd-data {gy, w, dx}; bwd-weights {x, gy, dw} */
  void *bufs[4] = {(void *)a, (void *)b, out, (void *)bias};
  dnnl_exec_arg_t args[4];
  for (int i = 0; e && rc > 0 && i < e->nport; i++) {
    ConvPort *p = &e->port[i];
    if (p_dnnl_memory_set_data_handle(p->user, bufs[i])) { rc = -1; break; }
    args[i] = (dnnl_exec_arg_t){p->arg, p->inner ? p->inner : p->user};
    if (p->reorder && !p->out) {
      dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, p->user}, {DNNL_ARG_TO, p->inner}};
      if (p_dnnl_primitive_execute(p->reorder, stream, 2, ra)) rc = -1;
    }
  }
  if (rc > 0 && p_dnnl_primitive_execute(e->prim, stream, e->nport, args)) rc = -1;
  for (int i = 0; e && rc > 0 && i < e->nport; i++) {
    ConvPort *p = &e->port[i];
    if (!p->reorder || !p->out) continue;
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, p->inner}, {DNNL_ARG_TO, p->user}};
    if (p_dnnl_primitive_execute(p->reorder, stream, 2, ra)) rc = -1;
  }
  if (rc > 0 && p_dnnl_stream_wait(stream)) rc = -1;
  if (e == &conv_oversize) conv_entry_free(e);
  pthread_mutex_unlock(&mu);
  if (rc < 0)
    NT_FAIL("conv: oneDNN's %s convolution (%s) failed", dt == dnnl_bf16 ? "bf16" : "f32",
            kind == 0 ? "forward" : kind == 1 ? "backward data" : "backward weights");
  return rc;
}

int nt_onednn_conv_f32(int kind, const nt_OnednnConvGeom *g, const float *a, const float *b, const float *bias, float *out) {
  return conv_run(dnnl_f32, kind, g, a, b, bias, 1, out);
}
int nt_onednn_conv_bf16(int kind, const nt_OnednnConvGeom *g, const void *a, const void *b, const void *bias, bool bias_bf16, void *out) {
  return conv_run(dnnl_bf16, kind, g, a, b, bias, bias_bf16 ? 2 : 1, out);
}

/* bf16 stays bf16 where the CPU has bf16 dot products (avx512_bf16, AMX):
** oneDNN's bf16 kernels then beat converting to f32 and back (measured in
** bench/results/2026-11-29-alloc29.md).  Without them oneDNN emulates bf16
** on avx512_core, slower than our f32 path there, so f32 is the default;
** NABLA_ONEDNN_CONV_BF16=1 / =0 forces either. */
static bool bf16_wanted;
static void bf16_decide(void) {
  pthread_once(&conv_once, conv_load);
  const char *env = getenv("NABLA_ONEDNN_CONV_BF16");
  bool hw = false;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
  hw = __builtin_cpu_supports("avx512bf16");
#endif
  bf16_wanted = conv_ok && (env && *env ? strcmp(env, "0") != 0 : hw);
}
bool nt_onednn_conv_bf16_wanted(void) {
  static pthread_once_t o = PTHREAD_ONCE_INIT;
  pthread_once(&o, bf16_decide);
  return bf16_wanted;
}

int nt_onednn_threads(void) {
  pthread_mutex_lock(&mu);
  int n = last_threads;
  pthread_mutex_unlock(&mu);
  return n;
}

void nt_onednn_conv_cache_stats(size_t *entries, size_t *bytes, size_t *limit) {
  pthread_once(&conv_once, conv_load);
  pthread_mutex_lock(&mu);
  *entries = (size_t)conv_n; *bytes = conv_bytes; *limit = conv_limit;
  pthread_mutex_unlock(&mu);
}

#else   /* built without oneDNN's header: the f32 path always */
int nt_onednn_matmul_bf16(const void *A, int64_t a_rs, int64_t a_cs, const void *B, int64_t b_rs, int64_t b_cs, void *C, int64_t M,
                          int64_t N, int64_t K) {
  (void)A; (void)a_rs; (void)a_cs; (void)B; (void)b_rs; (void)b_cs; (void)C; (void)M; (void)N; (void)K;
  return 0;
}
bool nt_onednn_available(void) { return false; }
int nt_onednn_conv_f32(int kind, const nt_OnednnConvGeom *g, const float *a, const float *b, const float *bias, float *out) {
  (void)kind; (void)g; (void)a; (void)b; (void)bias; (void)out;
  return 0;
}
int nt_onednn_conv_bf16(int kind, const nt_OnednnConvGeom *g, const void *a, const void *b, const void *bias, bool bias_bf16, void *out) {
  (void)kind; (void)g; (void)a; (void)b; (void)bias; (void)bias_bf16; (void)out;
  return 0;
}
bool nt_onednn_conv_bf16_wanted(void) { return false; }
int nt_onednn_threads(void) { return 0; }
void nt_onednn_conv_cache_stats(size_t *entries, size_t *bytes, size_t *limit) { *entries = *bytes = *limit = 0; }
#endif
