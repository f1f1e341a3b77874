/*
** ddesync.h — desync detection for collectives (ddesync.c).
**
** SPMD code must call the same collectives in the same order on every rank
** of a group.  A rank that calls another collective (or another shape, op,
** dtype) or one more than the others used to leave the group waiting out the
** 300 s timeout, blaming a rank that had simply finished.  Now every
** collective first agrees on its signature: the group's sequence number and a
** description (op, dtype, shape, group members) hashed to 64 bits; every rank
** learns every rank's hash (shared memory: the hash rides in the next
** barrier of the collective itself, dshm.c, so the check adds no round trip;
** TCP: one direct exchange, dr_exchange).  On a mismatch every rank gathers every rank's description
** and fails with the same message naming the ranks and the calls (as
** PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL).  A worker that finishes a command
** makes one more check with the signature "end of the command", so a rank
** still inside a collective learns that a peer has finished.
**
** NABLA_DESYNC=0 in the workers' environment turns the checks off (every rank
** must agree: a check is itself a collective).
*/
#ifndef DIST_DDESYNC_H
#define DIST_DDESYNC_H
#include "dist/dinternal.h"

/* description of a call for the signature, e.g. "all_reduce(op=sum, f32[4,3])";
** x may be NULL (then no tensor part); shape_from: 0 = full shape, 1 = the
** trailing shape only (rows may differ: all_gather) */
void dd_describe(char *out, size_t n, const char *call, const char *arg, const nt_Tensor *x, int shape_from);
/* the check on group g before a collective: 0, or -1 with g->err set (the
** group marked broken, so the session reconnects it) */
int dd_check(dr_Group *g, const char *desc);
/* the end of a successful command on a worker: the check with the signature
** "end"; 0, or -1 with the nt error set */
int nbD_desync_end(void);
/* a mismatch seen by every rank of g at once (dshm.c's folded check): gathers
** every rank's description and fails g naming the ranks and calls; -1 */
int dd_report(dr_Group *g, const char *mine, uint64_t seq);
extern int dd_enabled;   /* NABLA_DESYNC */

#endif
