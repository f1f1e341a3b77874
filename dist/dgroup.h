/*
** dgroup.h — sub-groups of the worker ring (process meshes, tensor/pipeline
** parallelism; dgroup.c).
**
** A group is an ordered subset of the world's ranks.  It needs no new
** connections: the ring backend already keeps a full mesh of TCP links, so a
** group's collectives run the same ring algorithms (dring.c) over a *view*
** dr_Group whose rank/world are the position/size in the group and whose
** fd[i] is the world's link to the group's i-th member.  Creating a group is
** local (no communication), so ids need not agree across ranks.
**
** Entering a group swaps nbD_self.g to the view for one call (every function
** of dtensorcoll.c then works on the group unchanged); leaving copies failures
** (broken, err) and byte counts back to the world group.  Autograd nodes of
** group collectives record the group id and re-enter it in backward.
**
** Ordering: a link is shared by every group containing both of its ends; the
** messages on it stay in program order because SPMD ranks issue their
** collectives in the same order (on a mesh, two ranks differing in exactly
** one coordinate share exactly one axis group).
*/
#ifndef DIST_DGROUP_H
#define DIST_DGROUP_H
#include "dist/dinternal.h"

#define NBD_MAXGROUPS 4096

typedef struct nbD_Scope {
  int active, prev_id;
  dr_Group *prev_g;
  dr_Group view;
} nbD_Scope;

int  nbD_group_new(const int *ranks, int n);       /* id > 0, or -1 (nt error set) */
int  nbD_group_current(void);                      /* 0 = the world */
/* id 0 (the world) is a no-op; -1 with an nt error when this rank is not a member */
int  nbD_group_enter(int id, nbD_Scope *s);
void nbD_group_leave(nbD_Scope *s);
/* group argument of a builtin: nil (world), a number id, or a record with _id */
int  nbD_group_arg(nb_VM *vm, const char *fname, nb_Value v, int *id);
void nbD_group_init(void);   /* registers the group builtins */
/* before a collective on the current group: its shared-memory segment when
** every member shares a host (made at the first call; -1 with g->err set) */
int  nbD_group_shm_prepare(void);
/* the NCCL communicators of sub-groups (dnccl.c makes them on first use) */
void nbD_group_nccl_set(int id, struct nt_CudaComm *c);
void nbD_group_nccl_reset(void);   /* aborts and forgets all of them */

#endif
