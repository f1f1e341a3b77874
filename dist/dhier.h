/*
** dhier.h — hierarchical collectives for groups that span hosts (dhier.c).
**
** At connect time every rank learns which ranks share its host (dh_host_id).
** When the world spans several hosts, all_reduce / all_gather /
** reduce_scatter / broadcast run in three stages: shared memory among the
** ranks of each host, TCP across hosts (each local rank a stripe of the data
** with its peers of the same local index on the other hosts, when every host
** has the same number of ranks; else one leader per host), shared memory
** again within the host.  Sub-groups whose members all share a host get
** their own shared-memory segment on first use, sub-groups spanning hosts
** their own hierarchy (dgroup.c, nbD_group_shm_prepare).
**
** NABLA_HIER=0 (every worker) keeps the flat TCP ring across hosts;
** NABLA_HIER_GATHER=leader the leaders-only all_gather (for comparison).
** Test only: NABLA_TEST_HOSTS=h0,h1,... gives rank i the host id "test-hi"
** (simulated hosts on one machine, for unit tests without namespaces).
*/
#ifndef DIST_DHIER_H
#define DIST_DHIER_H
#include "dist/dring.h"

typedef struct dh_Hier dh_Hier;
extern int ds_enabled;

/* this process's host identity: 16 hex digits (the boot id and the network
** and mount namespaces: same id <=> same kernel, loopback and /dev/shm).
** The one place to switch to the launcher's host id (dist/dlaunch.h
** dl_host_id, issue 17) once both are merged. */
void dh_host_id(char out[33], int rank);

/* after the TCP mesh connects: learns the hosts, then sets up shared memory
** for the whole group (one host) or the hierarchy (several).  -1 with g->err
** only when the mesh failed. */
int  dh_setup(dr_Group *g);
void dh_close(dr_Group *g);
/* whether world rank a and b share a host (after dh_setup; 0 when unknown) */
int  dh_same_host(int a, int b);
/* the hierarchy of group g (the world, or a sub-group's view) from host[i],
** the host number of its position i (any numbers); every member calls it at
** the same point.  Sets g->hier, or leaves it NULL (one host, one rank per
** host, NABLA_HIER=0, no shared memory somewhere); -1 only when the mesh failed. */
int  dh_build(dr_Group *g, const int *host);
/* the host number of a world rank (after dh_setup), or -1 */
int  dh_host_of(int world_rank);
int dh_all_reduce(dr_Group *g, void *buf, size_t count, int dtype, int op);
/* rank r's chunk of buf (offset sum(counts[0..r))) reduced over every rank */
int dh_reduce_scatter(dr_Group *g, void *buf, const size_t *counts, int dtype, int op);
int dh_all_gather(dr_Group *g, void *buf, const size_t *counts, size_t esize);
int dh_broadcast(dr_Group *g, void *buf, size_t nbytes, int src);
extern int dh_enabled;   /* NABLA_HIER */
static inline int dh_on(const dr_Group *g) { return g->hier && dh_enabled && ds_enabled; }

#endif
