/* dinternal.h — shared between the files of dist/ */
#ifndef DIST_DINTERNAL_H
#define DIST_DINTERNAL_H

#include "lang/nbapi.h"
#include "tensor/tensor.h"
#include "dist/dring.h"

/* this process's place in the group: set in a worker, rank -1 in a session */
typedef struct nbD_Self {
  int rank, world, local_rank;
  dr_Group *g;          /* the collective backend (ring); NULL outside workers */
  int node_rank, local_world;   /* the host's index among the job's hosts, workers on it (dworker.c, from host ids) */
} nbD_Self;
extern nbD_Self nbD_self;

void nbD_coll_init(void);   /* registers the collective builtins (dcoll.c) */
void nbD_async_init(void);  /* registers the futures' and messages' builtins (dasync.c, dmsg.c) */

/* elastic membership: the session asked this worker's group to regroup at
** its next checkpoint (set by dworker.c's I/O thread; atomic; dsessionlib.c) */
extern int nbD_regroup_flag;

#endif
