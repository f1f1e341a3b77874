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

/* after the TCP mesh is connected: sets up g->shm when all ranks can map one
** segment, else leaves it NULL.  -1 (g->err set) only when the mesh failed. */
int  ds_setup(dr_Group *g);
void ds_close(dr_Group *g);                /* unmaps (idempotent) */
static inline int ds_on(const dr_Group *g) { return g->shm && ds_enabled; }

int ds_all_reduce(dr_Group *g, void *buf, size_t count, int dtype, int op);
int ds_all_gather(dr_Group *g, void *buf, const size_t *counts, size_t esize);
int ds_broadcast(dr_Group *g, void *buf, size_t nbytes, int src);

void nbD_shm_init(void);   /* registers dist_shm() */

#endif
