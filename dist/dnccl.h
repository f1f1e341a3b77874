/*
** dnccl.h — the "nccl" backend: the entry points of dring.h on DEVICE
** buffers (CUDA tensors), through the NCCL communicators of the CUDA module
** (tensor/tdevice.h: nt_cuda_comm_*).  dist/ includes no CUDA or NCCL
** header; NCCL itself is dlopened by the module on first use.
**
** A worker holds both backends: the TCP ring (dring.c) always — control-plane
** exchanges (shapes, row counts, the ncclUniqueId of a sub-group) and CPU
** tensors use it — and, when the session chose "nccl", one NCCL communicator
** over the world (g->nccl_world) whose unique id rank 0 made and the session
** relayed (dist.c: the `ncclid` / `nccl` commands after `welcome` and after
** every `reconnect`).  dtensorcoll.c sends a collective of CUDA tensors here when
** g->nccl_world is set, else through the ring via pinned staging.
**
** Sub-groups (dgroup.c): point to point goes over the WORLD communicator
** (positions mapped to world ranks by g->world_rank), so it needs nothing
** from the other members; a collective needs the group's own communicator,
** made on the group's first NCCL collective by its members only: position 0
** draws a unique id, broadcasts it over the group's TCP links, and every
** member calls ncclCommInitRank.  (ncclCommSplit would need EVERY world rank
** to call it, but groups are made locally and used only by their members.)
**
** Failures set g->err and g->broken like the ring's: the communicator is
** aborted (ncclCommAbort) on an error, an interrupt or the group timeout,
** and the session's reconnect replaces every communicator.  Collectives run
** on the communicator's own stream; the compute stream waits for them on the
** device, the host only at synchronisation points (tensor/tdevice.h), where
** the timeout bounds the wait (a dead peer aborts, never hangs).
*/
#ifndef DIST_DNCCL_H
#define DIST_DNCCL_H

#include "dist/dring.h"

static inline int dn_on(const dr_Group *g) { return g && g->nccl_world != NULL; }

/* what this worker could offer: 1 and "<host> <PCI bus id> <nccl version>"
** in out, or 0 and the reason (no GPU, no NCCL) */
int  dn_probe(char *out, size_t n);
/* the world communicator from rank 0's id (128 bytes); -1 with g->err */
int  dn_world_init(dr_Group *g, const unsigned char *id);
/* aborts the world communicator and every sub-group's (before a reconnect, at exit) */
void dn_close(dr_Group *g);

/* dring.h's collectives on device buffers (same meaning of every argument) */
int dn_all_reduce(dr_Group *g, void *dbuf, size_t count, int dtype, int op);
int dn_reduce_scatter(dr_Group *g, void *dbuf, const size_t *counts, int dtype, int op);
int dn_all_gather(dr_Group *g, void *dbuf, const size_t *counts, size_t esize);
int dn_broadcast(dr_Group *g, void *dbuf, size_t nbytes, int src);
int dn_sendrecv(dr_Group *g, int dst, const void *sbuf, size_t sn, int src, void *rbuf, size_t rn);

/* Overlap (the data-parallel reducer, ddataparallel.c): a SUM all_reduce of a
** device buffer that the compute stream does not wait for — backward goes on
** while NCCL runs on the communicator's stream.  dbuf stays untouched until
** dn_join(g), after which work queued on the compute stream sees every
** such reduction.  Issue them in the same order on every rank. */
int dn_all_reduce_async(dr_Group *g, void *dbuf, size_t count, int dtype);
int dn_join(dr_Group *g);

#endif
