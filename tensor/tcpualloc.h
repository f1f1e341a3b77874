/*
** tcpualloc.h — the CPU allocator (tcpualloc.c): the data buffers of CPU
** tensors.  tensor.c registers nt_cpu_alloc/nt_cpu_free as NT_CPU's
** allocator; the rest is for tests (tests/tensor/test_cpu_alloc.c), for
** code that wants the big-block cache emptied (memory pressure), and for
** lang's cpu.memory() and cpu.empty_cache() (its one public use).
*/
#ifndef NABLA_TCPUALLOC_H
#define NABLA_TCPUALLOC_H
#include <stddef.h>
#include <stdint.h>

/* the big-block path: sizes from NT_CPU_BIG_MIN, rounded up to NT_CPU_BIG_UNIT
** (also their alignment) */
#define NT_CPU_BIG_MIN ((size_t)4 << 20)
#define NT_CPU_BIG_UNIT ((size_t)2 << 20)

void *nt_cpu_alloc(size_t nbytes);   /* NULL when out of memory (the caller sets the error) */
void nt_cpu_free(void *p);           /* any pointer nt_cpu_alloc returned, or NULL */

typedef struct nt_CpuCacheStats {
  size_t limit_bytes;                /* the bound on cached bytes (NABLA_CPU_CACHE_MB) */
  size_t cached_bytes, cached_blocks;
  size_t live_bytes, live_blocks;    /* big blocks handed out and not yet freed */
  uint64_t hits, misses, evictions;  /* reuses, fresh mappings, blocks unmapped to keep the bound */
} nt_CpuCacheStats;
void nt_cpu_cache_stats(nt_CpuCacheStats *st);
size_t nt_cpu_cache_release(void);            /* unmaps every cached block; answers the bytes */
/* what a user asks for (cpu.empty_cache()): the cache released, and glibc's
** free heap pages given back too (malloc_trim); answers the cache's bytes */
size_t nt_cpu_empty_cache(void);
void nt_cpu_cache_set_limit(size_t bytes);    /* 0: no caching; trims at once */

#endif
