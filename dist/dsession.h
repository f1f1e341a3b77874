/*
** dsession.h — the session controller (dsession.c): the side of dist/ that
** starts workers, talks to them over the signed control connection
** (dproto.c) and waits for their replies.
**
** It exists apart from the builtins (dsessionlib.c) and `nabla run`
** (drun.c) so that the session's state (the workers, the ROUTER socket, the
** key) stays private to one file: the others see it only through these
** functions.
**
** Locking: the session's state is guarded by one (non-recursive) mutex that
** the functions below take themselves (dsess_need and the getters only
** read); callers never hold it.  The controller's monitor thread only
** try-locks it between operations.
*/
#ifndef DIST_DSESSION_H
#define DIST_DSESSION_H

#include <stddef.h>
#include "lang/nabla.h"

/* How dist.start was called (dist.restart and nabla run reuse it). */
typedef struct dsess_Launch {
  char launcher[16], backend[16], bind[64];
  double timeout, heartbeat;
  char **hosts; int nhosts;
  int ssh_port; char *ssh_key;
  char **ssh_opts; int nssh_opts;
  char *remote_nabla;
  int nodes, gpus_per_node;
  char **env; int nenv;             /* ssh: "NAME=VALUE" set in every remote worker (env=[...], --env) */
  char **exclude; int nexclude;     /* hosts not to use (exclude=[...]) */
  int threads_per_worker;           /* 0: each host's cores divided among its workers */
  int connect_timeout;              /* ssh ConnectTimeout, seconds (0: 10) */
  char ifname[32];                  /* the network interface for the session and the workers ("" : NABLA_SOCKET_IFNAME or the route) */
  char ports[32];                   /* "LO-HI": every listening port in that range ("" : NABLA_PORT_RANGE or any) */
  int slots;                        /* most workers on one host (0: set by the first start, ceil(n / hosts)); never exceeded by a restart */
  char **lost; int nlost;           /* ssh hosts found unreachable (a failed start, every worker dead and no ssh answer): left out,
                                    ** probed again at every restart and re-admitted when they answer */
} dsess_Launch;
void dsess_launch_free(dsess_Launch *o);
void dsess_launch_copy(dsess_Launch *dst, const dsess_Launch *src);

/* One worker's reply to a command: ok, and the body after the status byte
** (serialized values, or "NAME\0MESSAGE\0REPORT" for an error). */
typedef struct dsess_Reply { int got; int ok; char *body; size_t len; } dsess_Reply;
void dsess_replies_free(dsess_Reply *r, int n);

/* raises a DistError with a formatted message (returns NB_ERR) */
int dsess_error(nb_VM *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Starts n workers (errors raised on vm); NB_OK or NB_ERR. */
int  dsess_start(nb_VM *vm, int n, const dsess_Launch *o);
/* Stops the workers, if any (also registered with atexit). */
void dsess_stop(void);
/* NB_OK when a session runs and no worker is dead; else raises why.  Takes
** no lock: it reads what only the VM's thread writes, and the dead flags the
** monitor sets atomically. */
int  dsess_need(nb_VM *vm, const char *fname);
/* Sends a command (type, body) to the targets (NULL: all) and waits for
** every reply.  NB_OK with *out holding the replies (free them with
** dsess_replies_free(*out, dsess_size())), or NB_ERR with the error raised. */
int  dsess_command(nb_VM *vm, const char *fname, const char *type, const void *body, size_t len,
                   const int *targets, dsess_Reply **out);
/* `nabla run`: sends `runfile` (body) to every worker in run mode and
** waits until all have answered or died; failures are the caller's to
** report.  *rep: n replies; *which: the rank whose failure ended the wait
** (-1 if none).  prefix_all: every rank's output shown, each line prefixed "[rank N] "
** (else rank 0's stdout unprefixed, the others' stdout dropped); log_fds
** (NULL, or one fd per rank, -1 for none): each rank's raw output. */
int  dsess_run_all(nb_VM *vm, const void *body, size_t len, dsess_Reply **rep, int *which, int prefix_all, const int *log_fds);

/* The hosts whose workers could not be started by the last dsess_start (ssh
** failed to connect, or the worker exited before its hello) and, once the
** group is stopped, the hosts every one of whose workers died (ssh: or went
** quiet for 2 s; Slurm: died of silence): suspects that
** dist.restart() and `nabla run --max-restarts` probe before using them.
** NULL-terminated, owned here. */
char *const *dsess_failed_hosts(void);
/* adds the hosts every one of whose workers are gone to dsess_failed_hosts now,
** while the group still runs (dist.restart plans before it stops the group) */
void dsess_note_dead_hosts(void);

/* dsessionplan.c.  env: "NAME" entries become "NAME=VALUE" from this
** process (an unset one is an error).  NB_OK or NB_ERR raised. */
int dsess_env_values(nb_VM *vm, const char *f, char **env, int nenv);
/* A restart's plan: the hosts and the number of workers of the next start.
** ssh: reset clears o->exclude, ex is added to it; the suspects (o->lost and
** dsess_failed_hosts()) are probed with ssh at once, and those that do not
** answer become o->lost (left out), those that do are re-admitted.  *n
** becomes min(want, slots x usable hosts): a lost host shrinks the world
** instead of putting more workers on a host than its slots, a returned
** one grows it back; fewer than min_workers is an error.  Slurm: the
** allocation's nodes less the lost ones (dsess_failed_hosts), srun
** --exclude'd.  Local: want.  NB_OK or NB_ERR raised. */
int dsess_plan_restart(nb_VM *vm, const char *f, dsess_Launch *o, int want, int *n, char **ex, int nex, int reset, int min_workers);
/* the workers per host a first start of n workers gives (o->slots, or
** ceil(n / the hosts not excluded)); ssh and slurm, else n */
int dsess_default_slots(const dsess_Launch *o, int n);

/* Elastic membership (dsession.c): asks the running group to regroup at its
** next step boundary (a `regroup` control message to every worker, sent by
** the waiting thread; dist.save_checkpoint agrees on it over the ring and
** ends the script with a DistRegroup error on every rank).  Any thread. */
void dsess_request_regroup(void);
/* whether the last failed command ended in the workers' DistRegroup (then
** cleared) — a live elastic session regroups on it (dsessionlib.c) */
int  dsess_take_regroup(void);
/* whether the running group lost a worker (one is dead, or the group broke) */
int  dsess_lost_worker(void);

/* The ssh hosts to use: o->hosts less o->exclude (a malloc'd array of
** pointers into o->hosts; *nhosts of them), or NULL with the error raised:
** none left, or a name that resolves to loopback mixed with remote hosts. */
char **dsess_usable_hosts(nb_VM *vm, const dsess_Launch *o, int *nhosts);

/* What the builtins show. */
int  dsess_active(void);
int  dsess_size(void);                /* workers of the session (0: none) */
const char *dsess_endpoint(void);
typedef struct dsess_WorkerInfo { int pid; const char *host; int dead; int status; } dsess_WorkerInfo;
void dsess_worker_info(int rank, dsess_WorkerInfo *out);   /* status: waitpid's, of its local process */
/* backend used ("ring"/"nccl"), the one asked for, and why auto chose the ring ("" otherwise) */
void dsess_backend(const char **used, const char **requested, const char **why);

/* Asynchronous tasks (dist.submit, dasync.c).  dsess_post sends a command
** to one rank without waiting: its seq and the worker's pid come back, and
** its reply, whenever a wait pumps it, goes to dsess_async_reply.  NB_OK or
** NB_ERR raised.  dsess_pump reads what arrived (waiting up to timeout_ms).
** dsess_rank_state: 0 alive, 1 dead (why), 2 gone (stopped or restarted). */
#define DSESS_MAX_TASKS 4096
int  dsess_post(nb_VM *vm, const char *fname, int rank, const char *type, const void *body, size_t len, uint32_t *seq, int *pid);
int  dsess_pump(nb_VM *vm, int timeout_ms);
int  dsess_rank_state(int rank, int pid, char *why, size_t n);
/* dasync.c's side, called with the session's lock held: a task was posted
** (0, or -1 when DSESS_MAX_TASKS are unfinished); a reply arrived (1 when it
** was a task's and is kept; body NULL: the task failed to send) */
int  dsess_async_posted(int rank, uint32_t seq, int pid);
int  dsess_async_reply(int rank, uint32_t seq, const char *body, size_t len);

#endif
