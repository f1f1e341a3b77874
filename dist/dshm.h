/*
** dshm.h — the shared-memory fast path of the ring backend (dshm.c).
**
** When every rank of the world group runs on one host, dr_connect() maps one
** shared-memory segment into all of them (a memfd of rank 0's, opened by the
** others through /proc: it has no name, so no path leaves one behind), and
** all_reduce, all_gather, broadcast and reduce_scatter (as an all_reduce of
** the whole buffer) run through it instead of TCP.  Groups spanning hosts use
** one segment per host (dhier.h); a sub-group on one host gets its own
** (dgroup.c).  send/recv, isend and all_to_all between two ranks of one
** host use shared-memory channels (dchan.h).  NABLA_SHM=0 in the workers'
** environment, or dist_shm(false) on every worker, forces TCP for all of it.
*/
#ifndef DIST_DSHM_H
#define DIST_DSHM_H

#include "dist/dring.h"

/* the runtime switch (dist_shm(on)); every rank must set the same value */
extern int ds_enabled;
/* the world's ranks on this rank's kernel (set at connect, dhier.c): more
** than the cores, and waits sleep rather than spin */
extern int ds_kernel_ranks;

/* after the TCP mesh is connected: sets up g->shm when all ranks can map one
** segment, else leaves it NULL.  -1 (g->err set) only when the mesh failed. */
int  ds_setup(dr_Group *g);
void ds_close(dr_Group *g);                /* unmaps (idempotent) */
static inline int ds_on(const dr_Group *g) { return g->shm && ds_enabled; }

int ds_all_reduce(dr_Group *g, void *buf, size_t count, int dtype, int op);
/* the same, but only the elements in keep's nkeep ranges [keep[2k], keep[2k+1])
** are written back to buf (the rest of buf is left as it was): a
** hierarchy's first stage, which needs only this rank's stripe */
int ds_all_reduce_keep(dr_Group *g, void *buf, size_t count, int dtype, int op, const size_t *keep, int nkeep);
int ds_all_gather(dr_Group *g, void *buf, const size_t *counts, size_t esize);
int ds_broadcast(dr_Group *g, void *buf, size_t nbytes, int src);

void nbD_shm_init(void);   /* registers dist_shm() */

/* the desync check folded into the barriers (ddesync.c): ds_sig_defer hands
** over the signature of the collective about to run, published with the next
** barrier of g's segment and compared there (a mismatch fails that barrier
** with dd_report's message on every rank); ds_sig_check publishes it now,
** with a barrier of its own (for calls whose data does not go through the
** segment).  g must be ds_on. */
void ds_sig_defer(dr_Group *g, uint64_t h, uint64_t seq, const char *desc);
int  ds_sig_check(dr_Group *g, uint64_t h, uint64_t seq, const char *desc);

/* for segments of other files (dchan.c): whether NABLA_SHM turns shared
** memory off, and the read-write mapping of another process's memfd NAME
** (fd number fdno of pid, through /proc) when it is that and size bytes:
** the base, or NULL (the caller checks its own stamp in the header) */
int   ds_env_off(void);
/* waking and waiting on a shared 32-bit word (a futex; ms: the longest wait) */
void  ds_futex_wake(uint32_t *w);
void  ds_futex_wait(uint32_t *w, uint32_t v, int ms);
static inline void ds_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
void *ds_map_memfd(uint32_t pid, uint32_t fdno, const char *name, size_t size);

#endif
