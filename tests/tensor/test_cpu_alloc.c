/*
** test_cpu_alloc.c — the CPU allocator's big-block cache (tensor/tcpualloc.c):
** reuse, alignment, best fit, the bound and its LRU trimming, release,
** NABLA_CPU_CACHE_MB, thread safety, fork, and (under ASan) cached blocks
** poisoned.  Each check prints PASS:/FAIL: (tools/run-tests.sh's contract).
** Sizes are random each run (the seed is printed on failure).
*/
#include "tensor/tcpualloc.h"
#include "tensor/tensor.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif
#ifdef T_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define MiB ((size_t)1 << 20)
#include "../seedcheck.h"
static nt_CpuCacheStats stats(void) { nt_CpuCacheStats s; nt_cpu_cache_stats(&s); return s; }
/* a random size in [lo, hi) MiB plus a few bytes, so rounding is exercised */
static size_t rsize(unsigned lo, unsigned hi) { return (size_t)(lo + (unsigned)rand() % (hi - lo)) * MiB + 1 + (size_t)(rand() % 4096); }
static size_t units(size_t n) { return (n + NT_CPU_BIG_UNIT - 1) / NT_CPU_BIG_UNIT * NT_CPU_BIG_UNIT; }

static void test_env_limit(void) {
  /* read once, at the first big allocation: main set it to 48 */
  nt_CpuCacheStats s = stats();
  check(s.limit_bytes == 48 * MiB, "env_limit", "NABLA_CPU_CACHE_MB=48 gave a bound of %zu bytes", s.limit_bytes);
}

static void test_alignment_and_reuse(void) {
  nt_cpu_cache_set_limit(512 * MiB);
  nt_cpu_cache_release();
  int aligned = 1;
  for (int i = 0; i < 20; i++) {
    size_t small = (size_t)(rand() % (4 << 20));
    void *p = nt_cpu_alloc(small);
    if (!p || ((uintptr_t)p & 63)) aligned = 0;
    if (p && small) memset(p, 1, small);
    nt_cpu_free(p);
    size_t big = rsize(4, 40);
    char *q = nt_cpu_alloc(big);
    if (!q || ((uintptr_t)q & (NT_CPU_BIG_UNIT - 1))) aligned = 0;
    if (q) { q[0] = 1; q[big - 1] = 2; }
    nt_cpu_free(q);
  }
  check(aligned, "alignment", "a small buffer off 64 bytes or a big one off 2 MiB");
  nt_cpu_cache_release();
  size_t n = rsize(4, 30);
  nt_CpuCacheStats s0 = stats();
  char *a = nt_cpu_alloc(n);
  memset(a, 7, n);
  nt_cpu_free(a);
  nt_CpuCacheStats s1 = stats();
  char *b = nt_cpu_alloc(n);
  nt_CpuCacheStats s2 = stats();
  check(a == b && s2.hits == s1.hits + 1 && s1.misses == s0.misses + 1, "reuse",
        "a freed %zu-byte block was not handed out again (%p then %p; hits %llu -> %llu)", n, (void *)a, (void *)b,
        (unsigned long long)s1.hits, (unsigned long long)s2.hits);
  check(s1.cached_bytes == units(n) && s1.cached_blocks == 1 && s2.cached_bytes == 0 && s2.live_bytes == s0.live_bytes + units(n),
        "accounting", "cached %zu/%zu bytes after free/alloc of %zu, live %zu -> %zu", s1.cached_bytes, s2.cached_bytes, n,
        s0.live_bytes, s2.live_bytes);
  nt_cpu_free(b);
}

static void test_best_fit(void) {
  nt_cpu_cache_release();
  /* cached: 6, 10 and 8 MiB blocks; 8 MiB - 5 bytes takes the 8; 12 MiB takes none (10 < 12); 9 MiB takes the 10 */
  void *p6 = nt_cpu_alloc(6 * MiB), *p10 = nt_cpu_alloc(10 * MiB), *p8 = nt_cpu_alloc(8 * MiB);
  nt_cpu_free(p6); nt_cpu_free(p10); nt_cpu_free(p8);
  void *q8 = nt_cpu_alloc(8 * MiB - 5);
  void *q12 = nt_cpu_alloc(12 * MiB);
  void *q9 = nt_cpu_alloc(9 * MiB);
  check(q8 == p8 && q12 != p10 && q12 != p6 && q9 == p10, "best_fit", "8 MiB-5 got %s, 9 MiB got %s",
        q8 == p8 ? "the 8" : q8 == p10 ? "the 10" : "another", q9 == p10 ? "the 10" : "another");
  /* 4 MiB never takes the 6 MiB block (more than 1.25x) */
  void *q4 = nt_cpu_alloc(4 * MiB);
  check(q4 != p6 && stats().cached_blocks == 1, "fit_bound", "a 4 MiB request took a 6 MiB block");
  nt_cpu_free(q8); nt_cpu_free(q12); nt_cpu_free(q9); nt_cpu_free(q4);
}

static void test_bound_lru(void) {
  nt_cpu_cache_release();
  nt_cpu_cache_set_limit(20 * MiB);
  void *p[4];
  for (int i = 0; i < 4; i++) p[i] = nt_cpu_alloc(8 * MiB);
  uint64_t ev0 = stats().evictions;
  for (int i = 0; i < 4; i++) nt_cpu_free(p[i]);   /* p[0] and p[1] freed first: unmapped */
  nt_CpuCacheStats s = stats();
  check(s.cached_bytes == 16 * MiB && s.cached_blocks == 2 && s.evictions == ev0 + 2, "bound",
        "20 MiB bound, four 8 MiB frees: cached %zu bytes in %zu blocks, %llu evictions", s.cached_bytes, s.cached_blocks,
        (unsigned long long)(s.evictions - ev0));
  void *a = nt_cpu_alloc(8 * MiB), *b = nt_cpu_alloc(8 * MiB);
  check(((a == p[3] && b == p[2]) || (a == p[2] && b == p[3])) && stats().cached_blocks == 0, "lru",
        "the cache kept other blocks than the two most recently freed");
  nt_cpu_free(a); nt_cpu_free(b);
  /* a block bigger than the bound is never cached; lowering the bound trims at once */
  void *huge = nt_cpu_alloc(24 * MiB);
  nt_cpu_free(huge);
  size_t c1 = stats().cached_bytes;
  nt_cpu_cache_set_limit(8 * MiB);
  nt_CpuCacheStats s2 = stats();
  check(c1 == 16 * MiB && s2.cached_bytes == 8 * MiB, "trim", "cached %zu after a 24 MiB free (want 16 MiB), %zu at an 8 MiB bound",
        c1, s2.cached_bytes);
  size_t rel = nt_cpu_cache_release();
  check(rel == 8 * MiB && stats().cached_bytes == 0, "release", "release freed %zu bytes, %zu left", rel, stats().cached_bytes);
  nt_cpu_cache_set_limit(0);
  void *z = nt_cpu_alloc(5 * MiB);
  nt_cpu_free(z);
  check(stats().cached_blocks == 0, "limit_zero", "a zero bound still cached a block");
}

/* threads allocate, tag, check and free random big blocks: a block handed to
** two owners at once, or lost to the table, shows as a wrong tag or count */
#define NTHREAD 4
#define ITERS 300
static int thread_bad[NTHREAD];
static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  unsigned r = seed + (unsigned)id * 7919u;
  char *held[3] = {0};
  size_t hn[3] = {0};
  for (int i = 0; i < ITERS; i++) {
    int k = (int)(rand_r(&r) % 3);
    if (held[k]) {
      size_t n = hn[k];
      unsigned tag = (unsigned)(id * 1000003 + k);
      if (memcmp(held[k], &tag, sizeof tag) || memcmp(held[k] + n - sizeof tag, &tag, sizeof tag)) thread_bad[id]++;
      nt_cpu_free(held[k]);
      held[k] = NULL;
    } else {
      size_t n = (size_t)(4 + rand_r(&r) % 9) * MiB + (size_t)(rand_r(&r) % 1000);
      held[k] = nt_cpu_alloc(n); hn[k] = n;
      if (!held[k]) { thread_bad[id]++; continue; }
      unsigned tag = (unsigned)(id * 1000003 + k);
      memcpy(held[k], &tag, sizeof tag);
      memcpy(held[k] + n - sizeof tag, &tag, sizeof tag);
    }
  }
  for (int k = 0; k < 3; k++) nt_cpu_free(held[k]);
  return NULL;
}
static void test_threads(void) {
  nt_cpu_cache_set_limit(64 * MiB);
  nt_CpuCacheStats s0 = stats();
  pthread_t th[NTHREAD];
  for (int i = 0; i < NTHREAD; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
  int bad = 0;
  for (int i = 0; i < NTHREAD; i++) { pthread_join(th[i], NULL); bad += thread_bad[i]; }
  nt_CpuCacheStats s = stats();
  check(!bad && s.live_blocks == s0.live_blocks && s.live_bytes == s0.live_bytes && s.cached_bytes <= 64 * MiB && s.hits > s0.hits,
        "threads", "%d bad tags, live %zu -> %zu blocks, cached %zu bytes, %llu hits", bad, s0.live_blocks, s.live_blocks,
        s.cached_bytes, (unsigned long long)(s.hits - s0.hits));
}

/* tensors over the cache: values written through one tensor never show in the next one's fresh buffer */
static void test_tensors(void) {
  nt_cpu_cache_set_limit(256 * MiB);
  int64_t shape[2] = {1024 + rand() % 512, 1100 + rand() % 300};
  nt_Tensor *a = nt_full(shape, 2, 3.0, NT_F32, NT_CPU);
  if (!a) { check(0, "tensor_reuse", "nt_full: %s", nt_error_msg()); return; }
  void *pa = nt_data_ptr(a);
  nt_release(a);
  nt_Tensor *b = nt_zeros(shape, 2, NT_F32, NT_CPU);
  if (!b) { check(0, "tensor_reuse", "nt_zeros: %s", nt_error_msg()); return; }
  float *pb = nt_data_ptr(b);
  int zero = 1;
  for (int64_t i = 0; i < shape[0] * shape[1]; i++) if (pb[i] != 0.0f) { zero = 0; break; }
  check((void *)pb == pa && zero, "tensor_reuse", "zeros reused %s, values %s", (void *)pb == pa ? "the block" : "another block",
        zero ? "zero" : "not zero");
  nt_release(b);
}

/* a child forked while threads use the cache gets a usable (unlocked) cache */
static void *churn(void *arg) {
  volatile int *stop = arg;
  while (!*stop) nt_cpu_free(nt_cpu_alloc(6 * MiB));
  return NULL;
}
static void test_fork(void) {
  nt_cpu_cache_set_limit(64 * MiB);
  volatile int stop = 0;
  pthread_t th;
  pthread_create(&th, NULL, churn, (void *)&stop);
  int ok = 1;
  for (int i = 0; i < 20 && ok; i++) {
    pid_t pid = fork();
    if (pid == 0) {   /* the child: a big block, written and freed, then out */
      alarm(20);
      char *p = nt_cpu_alloc(6 * MiB);
      if (p) { p[0] = 1; nt_cpu_free(p); }
      _exit(p ? 0 : 1);
    }
    int st = 0;
    ok = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  stop = 1;
  pthread_join(th, NULL);
  check(ok, "fork", "a child forked while another thread allocated did not finish its allocation");
}

#ifdef T_ASAN
static void test_poisoned(void) {
  nt_cpu_cache_set_limit(64 * MiB);
  char *p = nt_cpu_alloc(6 * MiB);
  int live_ok = !__asan_address_is_poisoned(p) && !__asan_address_is_poisoned(p + 6 * MiB - 1);
  nt_cpu_free(p);
  int cached_poisoned = __asan_address_is_poisoned(p) && __asan_address_is_poisoned(p + 3 * MiB);
  char *q = nt_cpu_alloc(6 * MiB);
  int back = q == p && !__asan_address_is_poisoned(q + 6 * MiB - 1);
  nt_cpu_free(q);
  check(live_ok && cached_poisoned && back, "asan_poison", "live %d, cached poisoned %d, handed back unpoisoned %d", live_ok,
        cached_poisoned, back);
}
#endif

int main(void) {
  nt_init();
  setvbuf(stdout, NULL, _IOLBF, 0);
  seed = (unsigned)time(NULL);
  srand(seed);
  setenv("NABLA_CPU_CACHE_MB", "48", 1);
  nt_cpu_free(nt_cpu_alloc(5 * MiB));
  test_env_limit();
  test_alignment_and_reuse();
  test_best_fit();
  test_bound_lru();
  test_threads();
  test_tensors();
  test_fork();
#ifdef T_ASAN
  test_poisoned();
#endif
  nt_cpu_cache_release();
  return fails ? 1 : 0;
}
