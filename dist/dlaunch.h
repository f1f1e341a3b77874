/*
** dlaunch.h — starting `nabla worker` processes on other hosts (dlaunch.c):
** over ssh (one ssh client per worker) or with Slurm's srun (one task per
** worker, ranks from SLURM_PROCID).  The session key travels on the
** launcher's standard input (the worker reads it with --key-stdin), never
** on a command line or in a file.
*/
#ifndef DIST_DLAUNCH_H
#define DIST_DLAUNCH_H

#include <stddef.h>
#include <sys/types.h>

typedef struct dl_Common {
  const char *exe;          /* the nabla executable to run (on the remote side) */
  const char *key_hex;      /* 64 hex characters + "\n" */
  int world, timeout_ms;
  double heartbeat_s;       /* 0: no heartbeats */
  const char *worker_bind;  /* --bind for the workers ("auto": listen on all, advertise the route to the session) */
  int threads;              /* OMP/OpenBLAS threads per worker (0: leave alone) */
  char err[512];
} dl_Common;

/* ssh host [opts] EXE worker --connect ENDPOINT --key-stdin --rank R ...;
** the key is written to ssh's stdin.  Returns the ssh client's pid or -1. */
pid_t dl_spawn_ssh(dl_Common *c, const char *host, int port, const char *identity,
                   char *const *extra_opts, int nextra, const char *endpoint, int rank, int local_rank);

/* srun --ntasks=N [--nodes=M] [--gpus-per-node=G] ... EXE worker ...; every
** task reads the key from srun's stdin (srun broadcasts it).  Returns srun's pid or -1. */
pid_t dl_spawn_srun(dl_Common *c, int nodes, int gpus_per_node, const char *endpoint);

/* The local address that packets to host leave from (a UDP connect, nothing
** is sent): the address a process on host reaches this one at.  0 or -1. */
int dl_route_addr(const char *host, char *out, size_t n);
/* whether host resolves to a loopback address */
int dl_is_loopback(const char *host);
/* a reachable address of this host for workers elsewhere (Slurm): the
** hostname's address unless loopback, else the default route's source, else 127.0.0.1 */
void dl_self_addr(char *out, size_t n);

#endif
