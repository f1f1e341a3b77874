/*
** dring.h — the "ring" backend: collectives over direct TCP connections
** between workers (a full mesh: ring neighbours for all_reduce/all_gather/
** reduce_scatter/broadcast, direct links for send/recv/all_to_all).  Data
** never goes through the session.
**
** A backend is this table of operations on raw host buffers; the NCCL
** backend (dnccl.h) implements the same entry points on device buffers.
*/
#ifndef DIST_DRING_H
#define DIST_DRING_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

enum { DR_F32, DR_F64, DR_I32, DR_I64 };          /* element types the reductions know */
enum { DR_SUM, DR_MAX, DR_MIN };

typedef struct ds_Shm ds_Shm;   /* the shared-memory fast path (dshm.h) */
typedef struct dc_Chan dc_Chan; /* same-host point-to-point channels (dchan.h) */
struct nt_CudaComm;             /* an NCCL communicator of the CUDA module (tensor/tdevice.h) */

typedef struct dr_Group {
  int rank, world;
  int *fd;                  /* fd[peer]: socket to that rank, -1 for self */
  int listen_fd, port;
  uint32_t gen;             /* bumped at every (re)connection of the mesh */
  unsigned char key[32];    /* the session key: peers prove they have it */
  int timeout_ms;           /* no progress for this long: the collective fails */
  volatile sig_atomic_t *interrupted;   /* the VM's interrupt flag (may be NULL) */
  int broken;               /* a collective failed mid-way: reconnect before the next */
  char err[512];            /* why the last call failed */
  uint64_t bytes_sent, bytes_recv;
  ds_Shm *shm;              /* all ranks on one host: the shared segment (NULL: TCP only) */
  struct dh_Hier *hier;     /* ranks on several hosts: the hierarchy (dhier.h; NULL: flat) */
  dc_Chan *chan;            /* this host's point-to-point channels, by world rank (dchan.h; views share the world's) */
  /* the "nccl" backend (dnccl.h) for CUDA tensors; all NULL under "ring" */
  struct nt_CudaComm *nccl_world;   /* the world's communicator: set = NCCL is on */
  struct nt_CudaComm *nccl;         /* this group's (a sub-group's is made on first use) */
  const int *world_rank;            /* sub-group view: world rank of each position (NULL: the world) */
  int group_id;                     /* 0: the world; else the dgroup.c id of this view */
} dr_Group;

/* the collective this process is in ("all_reduce", ...) or NULL; heartbeats report it */
extern const char *volatile dr_op;

int  dr_listen(dr_Group *g, const char *host);            /* binds host:0 (IPv4 or IPv6), sets port */
/* binds host:port: 0, -1 (g->err), or 1 when port > 0 is in use (try another) */
int  dr_listen_port(dr_Group *g, const char *host, int port);
/* Connects the mesh: addrs[i] = "host:port" of rank i ("[v6]:port" for IPv6). */
int  dr_connect(dr_Group *g, char *const *addrs);
void dr_close(dr_Group *g);                               /* closes the mesh (not the listener) */

size_t dr_esize(int dtype);
/* in place over buf (count elements) */
int dr_all_reduce(dr_Group *g, void *buf, size_t count, int dtype, int op);
/* buf holds sum(counts) elements in rank order; afterwards rank r's chunk
** (at offset sum(counts[0..r))) is the reduction of every rank's chunk r. */
int dr_reduce_scatter(dr_Group *g, void *buf, const size_t *counts, int dtype, int op);
/* buf holds sum(counts) elements (bytes of size esize); rank r's own chunk is
** in place; afterwards every chunk is. */
int dr_all_gather(dr_Group *g, void *buf, const size_t *counts, size_t esize);
int dr_broadcast(dr_Group *g, void *buf, size_t nbytes, int src);
/* simultaneous send to dst and receive from src (either may be -1) */
int dr_sendrecv(dr_Group *g, int dst, const void *sbuf, size_t sn, int src, void *rbuf, size_t rn);

/* every rank's n bytes to every rank in one hop over the direct links (no
** shared memory): all[i*n..] = rank i's; for small control messages */
int dr_exchange(dr_Group *g, const void *mine, void *all, size_t n);

/* Records a failure of the group: the message in g->err, g->broken set
** (the ring and the shared-memory path fail the same way).  Returns -1. */
int dr_fail(dr_Group *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
