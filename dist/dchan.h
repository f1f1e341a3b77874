/*
** dchan.h — the same-host fast path for point-to-point traffic (dchan.c):
** send/recv, isend/irecv, all_to_all and everything else that goes through
** dr_sendrecv between two ranks of one host use a shared-memory channel (a
** byte ring per direction) instead of their loopback TCP link.
**
** A channel carries exactly the byte stream the TCP link would (same order,
** same framing), so every protocol above dr_sendrecv is unchanged; the TCP
** link stays open beside it (collectives, the desync check, and the death of
** the peer: its socket closing fails a waiting transfer at once, as on TCP).
** Bounds, interrupt and timeout as dshm.c's barriers: every wait checks the
** VM's interrupt flag, the group timeout (no progress) and the peer's link in
** 100 ms ticks.  NABLA_SHM=0 or dist_shm(false) on every worker: TCP.
*/
#ifndef DIST_DCHAN_H
#define DIST_DCHAN_H
#include "dist/dring.h"

/* after the world's hosts are known (dh_setup): host[i] numbers rank i's
** host.  Maps this host's channels (every rank of the world calls it at the
** same point; an all_reduce agrees, so all ranks use channels or none).
** -1 (g->err) only when the mesh failed. */
int  dc_setup(dr_Group *g, const int *host);
void dc_close(dr_Group *g);
/* whether positions a/b of group view g (world_rank maps them) talk over a channel */
int  dc_has(const dr_Group *g, int peer);
/* dr_sendrecv when dst or src is on a channel (the other may be TCP or -1) */
int  dc_sendrecv(dr_Group *g, int dst, const void *sbuf, size_t sn, int src, void *rbuf, size_t rn);
/* whether bytes from src wait in its channel to this rank (1/0; -1: src is not on a channel) */
int  dc_ready(const dr_Group *g, int src);

#endif
