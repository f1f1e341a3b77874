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
  int threads;              /* OMP/OpenBLAS threads per worker (0: the worker divides its own cores) */
  int share;                /* workers the launcher places on this host (the worker divides its cores by it) */
  int connect_timeout;      /* ssh ConnectTimeout in seconds (0: 10) */
  char *const *env; int nenv;   /* "NAME=VALUE" to set in the remote worker (besides NCCL_*, NABLA_*, *_VISIBLE_DEVICES) */
  char err[512];
  /* out: the read ends (non-blocking, close-on-exec) of the launcher's
  ** stdout pipe and, where its stderr is not a description of the session's
  ** stderr of its own (dlaunch.c's own_stderr), its stderr pipe; else -1.
  ** The launcher never shares the session's stdout: ssh makes the
  ** descriptors it gets non-blocking, which on a shared pipe made the
  ** session's own writes fail with EAGAIN (output lost and spliced); the
  ** session relays what comes out of these pipes (drelay.c). */
  int out_fd[2];
} dl_Common;

/* The running nabla's path into buf (cap bytes): "/path/nabla", with the
** kernel's " (deleted)" taken off when a rebuild or an upgrade unlinked it.
** must_exist (remote workers, which run it by that path): an error in why
** when nothing is at that path any more.  0, or -1 with why set. */
int dl_self_exe(char *buf, size_t cap, int must_exist, char *why, size_t whycap);

/* fork + exec of `exe worker --connect ENDPOINT --key-file KEYFILE --rank R
** ...` on this host, in its own process group, dying with the session; the
** binary run is the session's own (/proc/self/exe: the same build, hence the
** same wire protocol, even when its file was rebuilt, replaced or deleted
** since; exe, its path, is only argv[0], and the fallback without /proc); its
** thread counts are this host's cores / c->world unless c->threads or the
** environment set them; c->env replaces the variables of the same names.
** Returns its pid or -1. */
pid_t dl_spawn_local(dl_Common *c, const char *exe, const char *endpoint, const char *keyfile, const char *bind, int rank);

/* ssh host [opts] EXE worker --connect ENDPOINT --key-stdin --rank R ...;
** the key is written to ssh's stdin.  Returns the ssh client's pid or -1. */
pid_t dl_spawn_ssh(dl_Common *c, const char *host, int port, const char *identity,
                   char *const *extra_opts, int nextra, const char *endpoint, int rank, int local_rank);

/* Whether each of n hosts answers ssh now: `ssh -o BatchMode=yes -o
** ConnectTimeout=T ... HOST true` on all of them at once (the same port, key
** and options as the workers' ssh); ok[i] = 1 when it exited 0.  Waits at
** most T + 30 seconds (T: connect_timeout, 0: 10), then kills what is left
** (those count as unreachable).  For a restart: a host whose workers all
** died is probed, not retried blindly (and a returned host is re-admitted). */
void dl_probe_ssh(char *const *hosts, int n, int port, const char *identity, char *const *extra_opts, int nextra,
                  int connect_timeout, int *ok);

/* Whether each of n Slurm nodes is back in service: `scontrol show node -o
** NODE` says its State without DOWN, DRAIN, FAIL, NOT_RESPONDING, UNKNOWN,
** FUTURE or POWER* and without the '*' of a node that does not respond
** (IDLE, ALLOCATED, MIXED, COMPLETING) — and only after this process has
** seen it out of service since it was lost: slurmctld keeps a dead node
** ALLOCATED for minutes (SlurmdTimeout), so "in service" alone would take a
** dead node back (ok[i] = 1: back).  One node at a time, each bounded to
** 15 s and 8 KiB of output (more, or no answer: not back). */
void dl_probe_slurm(char *const *nodes, int n, int *ok);
/* a node re-admitted: the next loss starts its down-then-up watch afresh */
void dl_slurm_forget(const char *node);

/* srun --ntasks=N [--nodes=M] [--gpus-per-node=G] [--exclude=A,B] ... EXE
** worker ...; every task reads the key from srun's stdin (srun broadcasts
** it).  exclude: nodes to leave out ("" or NULL: none).  Returns srun's pid or -1. */
pid_t dl_spawn_srun(dl_Common *c, int nodes, int gpus_per_node, const char *exclude, const char *endpoint);

/* The identity of the machine this process runs on, as 16 hex digits +
** NUL: a hash of the kernel's boot id and this process's network and mount
** namespaces.  Two processes get the same id exactly when they run on one
** kernel and share its loopback network and /dev/shm — whatever their host
** was called in a host list (two names for one machine give one id; hosts
** simulated as namespaces of one kernel give different ids).  0, or -1 when
** nothing could be read (out is then "unknown").  Ranks that share a host are
** those whose ids are equal (the session sets LOCAL_RANK / NODE_RANK from it). */
int dl_host_id(char out[17]);

/* The kernel's identity (its boot id, hashed; 16 hex digits + NUL): ranks
** with equal ids share one machine's cores even when their host ids differ
** (containers, network namespaces). */
void dl_kernel_id(char out[17]);

/* Places n ranks on machines from their host ids (ids[i]: 17 bytes each):
** node[i] numbers the machines in the order of their first rank, lrank[i]
** counts the ranks before i on the same machine, lworld[i] those on it;
** *nnodes the machines.  O(n^2) compares, n <= 1024. */
void dl_host_groups(const char (*ids)[17], int n, int *lrank, int *lworld, int *node, int *nnodes);

/* NABLA_PORT_RANGE "LO-HI" (or ports= given as that text): 1 with *lo..*hi,
** 0 when unset, -1 (err filled) when it does not parse */
int dl_port_range(const char *spec, int *lo, int *hi, char *err, size_t n);
/* the address of interface ifname ("eth1") for the job, as text: its IPv4
** address, else its global IPv6 one (NABLA_SOCKET_FAMILY / NCCL_SOCKET_FAMILY
** AF_INET6 prefers IPv6, AF_INET allows only IPv4): 0, or -1 (err filled) */
int dl_ifname_addr(const char *ifname, char *out, size_t n, char *err, size_t en);

/* Whether the variable NAME=VALUE is forwarded to remote workers by default:
** NCCL_*, NABLA_*, and the *_VISIBLE_DEVICES family. */
int dl_forward_by_default(const char *name_eq_value);

/* The local address that packets to host leave from (a UDP connect, nothing
** is sent): the address a process on host reaches this one at.  0 or -1. */
int dl_route_addr(const char *host, char *out, size_t n);
/* whether host resolves to a loopback address; addr (if not NULL) gets the
** address it resolved to, as text ("" when it does not resolve) */
int dl_is_loopback(const char *host, char *addr, size_t n);
/* a reachable address of this host for workers elsewhere (Slurm): the
** hostname's address unless loopback, else the default route's source, else 127.0.0.1 */
void dl_self_addr(char *out, size_t n);

/* ---- addresses of either family (IPv4, IPv6) ----
** Every "host:port" the user or the wire sees puts an IPv6 host in brackets
** ("[fd00::1]:29500"), as URLs, ssh and ZeroMQ do. */
struct sockaddr;
struct sockaddr_storage;
/* resolves host (a name, or with numeric only a numeric address; "[v6]"
** accepted) to its first address in the system's order, port 0: 0, or -1
** with err (if not NULL) saying which host did not resolve and why */
int  dl_resolve(const char *host, int numeric, struct sockaddr_storage *out, char *err, size_t en);
void dl_addr_text(const struct sockaddr *a, char *out, size_t n);        /* "10.0.0.1", "fd00::1" */
/* host, a numeric address, in the family it has: an IPv4-mapped IPv6 one
** (::ffff:127.0.0.1, how a dual-stack socket sees an IPv4 peer) rewritten in
** place as the IPv4 address (127.0.0.1, what torchrun's MASTER_ADDR holds) */
void dl_unmap_v4(char *host);
void dl_addr_port_text(const struct sockaddr *a, char *out, size_t n);   /* "10.0.0.1:80", "[fd00::1]:80" */
/* "host:port" ("[host]:port" for IPv6); port < 0: the host alone, bracketed if IPv6 */
void dl_hostport(char *out, size_t n, const char *host, int port);
/* "host:port" or "[v6]:port" -> host (no brackets) and port: 0, or -1 */
int  dl_split_hostport(const char *s, char *host, size_t hn, int *port);
int  dl_is_loopback_sa(const struct sockaddr *a);   /* 127/8, ::1, ::ffff:127/104 */

#endif
