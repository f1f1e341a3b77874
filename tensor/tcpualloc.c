/*
** tcpualloc.c — the CPU allocator: where CPU tensors' data buffers come from.
**
** Small and medium buffers (< 4 MiB): glibc, 64-byte aligned, with its
** thresholds tuned at the first allocation (tune_malloc below).
**
** Big buffers (>= NT_CPU_BIG_MIN, 4 MiB): whole 2 MiB units, 2 MiB aligned
** and marked MADV_HUGEPAGE, as NumPy does — first-touch page faults
** otherwise dominate large elementwise ops (`exp(x) * 2 + x` on 4096x4096
** f32 ran 26x slower on 4 KiB pages).  They used to come from
** posix_memalign(2 MiB), which fragments glibc's heap: a freed 8 MiB block
** was not reused for the next aligned request, so a training step's
** activations walked the heap up to ~177 MB, every new huge page cleared
** (~10 ms a 2 MiB page on the build VM): group_norm's bench swung
** 0.6x-3.4x from run to run.  Now each big block is its own mmap, and a
** freed one is kept in a cache and handed out again:
**   - free lists by size class (the size in 2 MiB units), taken best-fit:
**     the smallest cached block of at least the size asked, and at most
**     1.25x it (no splitting, so the waste is bounded);
**   - a bound on the cached bytes, NABLA_CPU_CACHE_MB (default: an eighth
**     of physical memory; 0 turns the cache off); past it the least
**     recently freed blocks are unmapped (LRU);
**   - memory pressure: when a mapping (or glibc) fails, the whole cache is
**     unmapped and the allocation tried once more;
**   - one mutex: tensors are freed by worker and DataLoader threads too
**     (held across fork, so a child never inherits it locked).
** The blocks handed out are found again at free by address (an
** open-addressing table keyed by the block's address; only 2 MiB aligned
** pointers are looked up, the rest are glibc's).
**
** Under AddressSanitizer the cache stays on (the tests exercise the same
** code) but its blocks come from posix_memalign so that ASan and LSan know
** them, and a cached block is poisoned: a use after free reads as ASan's
** use-after-poison, never as another tensor's data.
** torch keeps no such cache on the CPU (glibc's heap is its cache, with the
** fragmentation above); its CUDA caching allocator is the model.
*/
#include "tcpualloc.h"
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPU_ASAN 1
#endif
#endif
#ifdef CPU_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* ---- glibc tuning ----------------------------------------------------------
** glibc hands buffers above its mmap threshold back to the kernel on free
** (and trims the heap top above 2x that), so a training step's activations,
** freed and allocated again every step, page-fault and are zeroed anew each
** time: 40% of a 1M-element op's backward went to clearing pages.  Buffers up
** to 64 MiB (here: the ones below the big-block path) come from the heap
** instead, and up to 256 MiB of freed heap stays with the process for
** reuse.  MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment
** still win.  Tuned at the first allocation of any size: a small ResNet's
** 3 MB activations would otherwise stay above glibc's default 128 KiB mmap
** threshold (fresh pages every step). */
static pthread_once_t malloc_tuned = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;   /* the big-block cache's, below */
/* a fork while another thread holds the cache's lock would leave the child's
** copy locked forever: the lock is taken across fork */
static void fork_prepare(void) { pthread_mutex_lock(&mu); }
static void fork_release(void) { pthread_mutex_unlock(&mu); }
static void tune_malloc(void) {
  if (!getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 64 << 20);
  if (!getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 256 << 20);
  pthread_atfork(fork_prepare, fork_release, fork_release);
}

/* ---- big blocks ------------------------------------------------------------ */
typedef struct Big {
  char *p;
  size_t size;                 /* a multiple of NT_CPU_BIG_UNIT */
  bool cached;
  struct Big *cprev, *cnext;   /* its class's free list (most recently freed first) */
  struct Big *lprev, *lnext;   /* the LRU list of every cached block (most recent first) */
} Big;

#define NCLASS 1024            /* classes of 1..1023 units (up to ~2 GiB); bigger blocks are never cached */
static pthread_once_t limit_once = PTHREAD_ONCE_INIT;
static Big *cls[NCLASS];
static Big *lru_head, *lru_tail;
static nt_CpuCacheStats st;
static Big **table;            /* every big block, handed out or cached, by address */
static size_t table_cap, table_n;

/* NABLA_CPU_CACHE_MB, read once; a value that is not a whole number of MiB
** up to physical memory is reported and the default used */
static void read_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  size_t ram = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)8 << 30;
  size_t lim = ram / 8;
  const char *env = getenv("NABLA_CPU_CACHE_MB");
  if (env && *env) {
    char *end;
    errno = 0;
    unsigned long long mb = strtoull(env, &end, 10);
    if (errno || *end || *env == '-' || mb > (ram >> 20))
      fprintf(stderr, "nabla: NABLA_CPU_CACHE_MB=%s is not a size in MiB from 0 to %zu (physical memory); using %zu\n", env, ram >> 20,
              lim >> 20);
    else
      lim = (size_t)mb << 20;
  }
  pthread_mutex_lock(&mu);
  st.limit_bytes = lim;
  pthread_mutex_unlock(&mu);
}

static size_t slot_of(const void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 21) * 0x9E3779B97F4A7C15ull >> 7) & (cap - 1); }

static Big *table_find(const void *p) {
  if (!table_cap) return NULL;
  for (size_t i = slot_of(p, table_cap);; i = (i + 1) & (table_cap - 1)) {
    if (!table[i]) return NULL;
    if (table[i]->p == p) return table[i];
  }
}
static void table_put_(Big **t, size_t cap, Big *b) {
  size_t i = slot_of(b->p, cap);
  while (t[i]) i = (i + 1) & (cap - 1);
  t[i] = b;
}
static bool table_add(Big *b) {
  if ((table_n + 1) * 2 > table_cap) {   /* at most half full */
    size_t cap = table_cap ? table_cap * 2 : 256;
    Big **t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < table_cap; i++)
      if (table[i]) table_put_(t, cap, table[i]);
    free(table);
    table = t; table_cap = cap;
  }
  table_put_(table, table_cap, b);
  table_n++;
  return true;
}
/* linear probing's deletion: the entries after the hole that would no longer
** be found move back into it */
static void table_del(Big *b) {
  size_t i = slot_of(b->p, table_cap);
  while (table[i] != b) i = (i + 1) & (table_cap - 1);
  table[i] = NULL;
  table_n--;
  for (size_t j = (i + 1) & (table_cap - 1); table[j]; j = (j + 1) & (table_cap - 1)) {
    size_t home = slot_of(table[j]->p, table_cap);
    /* table[j] stays if its home lies cyclically in (i, j] */
    if (i <= j ? (home > i && home <= j) : (home > i || home <= j)) continue;
    table[i] = table[j]; table[j] = NULL; i = j;
  }
}

static void *map_block(size_t size) {
#ifdef CPU_ASAN
  void *p = NULL;
  return posix_memalign(&p, NT_CPU_BIG_UNIT, size) ? NULL : p;
#else
  /* one unit more than asked, the unaligned head and the tail unmapped */
  size_t span = size + NT_CPU_BIG_UNIT;
  char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  char *p = (char *)(((uintptr_t)m + NT_CPU_BIG_UNIT - 1) & ~(uintptr_t)(NT_CPU_BIG_UNIT - 1));
  if (p > m) munmap(m, (size_t)(p - m));
  if (m + span > p + size) munmap(p + size, (size_t)(m + span - (p + size)));
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
#endif
}
static void unmap_block(void *p, size_t size) {
#ifdef CPU_ASAN
  (void)size;
  UNPOISON(p, size);
  free(p);
#else
  munmap(p, size);
#endif
}

static void cache_unlink(Big *b) {
  size_t c = b->size / NT_CPU_BIG_UNIT;
  if (b->cprev) b->cprev->cnext = b->cnext; else cls[c] = b->cnext;
  if (b->cnext) b->cnext->cprev = b->cprev;
  if (b->lprev) b->lprev->lnext = b->lnext; else lru_head = b->lnext;
  if (b->lnext) b->lnext->lprev = b->lprev; else lru_tail = b->lprev;
  b->cached = false;
  st.cached_bytes -= b->size; st.cached_blocks--;
}
static void cache_push(Big *b) {
  size_t c = b->size / NT_CPU_BIG_UNIT;
  b->cprev = NULL; b->cnext = cls[c];
  if (cls[c]) cls[c]->cprev = b;
  cls[c] = b;
  b->lprev = NULL; b->lnext = lru_head;
  if (lru_head) lru_head->lprev = b; else lru_tail = b;
  lru_head = b;
  b->cached = true;
  st.cached_bytes += b->size; st.cached_blocks++;
}
/* unmaps a cached block and forgets it; under mu */
static void drop(Big *b) {
  if (b->cached) cache_unlink(b);
  table_del(b);
  unmap_block(b->p, b->size);
  free(b);
}
/* the least recently freed blocks go until the cache holds at most `keep` bytes */
static size_t trim_to(size_t keep) {
  size_t freed = 0;
  while (lru_tail && st.cached_bytes > keep) {
    freed += lru_tail->size;
    drop(lru_tail);
    st.evictions++;
  }
  return freed;
}

/* best fit within 1.25x: the smallest class from `c` up that has a block */
static Big *cache_take(size_t c) {
  size_t hi = c + c / 4;
  if (hi >= NCLASS) hi = NCLASS - 1;
  for (size_t k = c; k <= hi; k++)
    if (cls[k]) { Big *b = cls[k]; cache_unlink(b); return b; }
  return NULL;
}

static void *big_alloc(size_t n) {
  size_t size = (n + NT_CPU_BIG_UNIT - 1) & ~(NT_CPU_BIG_UNIT - 1);
  if (size < n) return NULL;   /* wrapped */
  size_t c = size / NT_CPU_BIG_UNIT;
  pthread_once(&limit_once, read_limit);
  pthread_mutex_lock(&mu);
  Big *b = c < NCLASS ? cache_take(c) : NULL;
  if (b) {
    st.hits++;
    st.live_bytes += b->size; st.live_blocks++;
    pthread_mutex_unlock(&mu);
    UNPOISON(b->p, b->size);
    return b->p;
  }
  pthread_mutex_unlock(&mu);
  /* a fresh block, mapped outside the lock; on failure the cache goes and it is tried again */
  Big *nb = malloc(sizeof *nb);
  void *p = nb ? map_block(size) : NULL;
  if (!p) {
    nt_cpu_cache_release();
    if (!nb) nb = malloc(sizeof *nb);
    p = nb ? map_block(size) : NULL;
    if (!p) { free(nb); return NULL; }
  }
  *nb = (Big){.p = p, .size = size};
  pthread_mutex_lock(&mu);
  bool ok = table_add(nb);
  if (ok) { st.misses++; st.live_bytes += size; st.live_blocks++; }
  pthread_mutex_unlock(&mu);
  if (!ok) { unmap_block(p, size); free(nb); return NULL; }
  return p;
}

void *nt_cpu_alloc(size_t n) {
  pthread_once(&malloc_tuned, tune_malloc);
  if (n >= NT_CPU_BIG_MIN) return big_alloc(n);
  void *p = NULL;
  if (!posix_memalign(&p, 64, n ? n : 64)) return p;
  nt_cpu_cache_release();   /* memory pressure: the cached big blocks go first */
  return posix_memalign(&p, 64, n ? n : 64) ? NULL : p;
}

void nt_cpu_free(void *p) {
  if (!p) return;
  if (!((uintptr_t)p & (NT_CPU_BIG_UNIT - 1))) {   /* only big blocks' addresses are looked up */
    pthread_mutex_lock(&mu);
    Big *b = table_find(p);
    if (b) {
      if (b->cached) {   /* a double free must not put one block on the list twice */
        pthread_mutex_unlock(&mu);
        fprintf(stderr, "nabla: internal error: CPU buffer %p freed twice\n", p);
        abort();
      }
      st.live_bytes -= b->size; st.live_blocks--;
      if (b->size / NT_CPU_BIG_UNIT >= NCLASS || b->size > st.limit_bytes) drop(b);
      else {
        POISON(b->p, b->size);
        cache_push(b);
        trim_to(st.limit_bytes);
      }
      pthread_mutex_unlock(&mu);
      return;
    }
    pthread_mutex_unlock(&mu);
  }
  free(p);
}

void nt_cpu_cache_stats(nt_CpuCacheStats *out) {
  pthread_once(&limit_once, read_limit);
  pthread_mutex_lock(&mu);
  *out = st;
  pthread_mutex_unlock(&mu);
}

size_t nt_cpu_cache_release(void) {
  pthread_mutex_lock(&mu);
  size_t n = trim_to(0);
  pthread_mutex_unlock(&mu);
  return n;
}

size_t nt_cpu_empty_cache(void) {
  size_t n = nt_cpu_cache_release();
#ifndef CPU_ASAN
  malloc_trim(0);   /* glibc's heap too: the free memory at its top and in its arenas' free pages */
#endif
  return n;
}

void nt_cpu_cache_set_limit(size_t bytes) {
  pthread_once(&limit_once, read_limit);
  pthread_mutex_lock(&mu);
  st.limit_bytes = bytes;
  trim_to(bytes);
  pthread_mutex_unlock(&mu);
}
