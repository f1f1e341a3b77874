/*
** dsession.c — the session controller of dist/ (see dsession.h).
**
** Any VM (REPL, script, kernel) can be a session: dsess_start spawns n
** `nabla worker` processes (fork + exec of /proc/self/exe, or ssh/srun via
** dlaunch.c), which connect back to a ZeroMQ ROUTER socket; every control
** message is signed with a per-session random key (dproto.c) that local
** workers read from a 0600 file.  The session sends commands (exec, call,
** eval, set, runfile, reconnect, stop) to the workers and waits for their
** replies, printing the output they forward while it waits (whole lines,
** "[rank N] ...": drelay.c, which also relays what the ssh/srun launchers
** print on pipes of their own).  A monitor thread reaps dead workers at once (waitpid) and watches
** heartbeats, so a wait never hangs on a worker that is gone.
**
** The builtins that drive it are in dsessionlib.c, `nabla run` in drun.c,
** the worker's side in dworker.c.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include "dist/dsession.h"
#include "dist/dinternal.h"
#include "dist/dproto.h"
#include "dist/dlaunch.h"
#include "dist/drelay.h"
#include "tensor/tdevice.h"
#include "util/clock.h"

extern char **environ;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  char buf[1024];
  va_list ap; va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  if (write(2, buf, (size_t)n) < 0) {}
}

typedef struct Worker {
  pid_t pid;                  /* the worker's own pid (on its host) */
  int proc;                   /* index in S.proc: the local process that runs it (the worker, its ssh, srun) */
  int hello;                  /* said hello (and was accepted) */
  char ident[64]; size_t identlen;
  char addr[80];              /* host:port of its ring listener */
  char host[80];              /* where it runs (ssh: the name given; else its hostname) */
  char hostid[17];            /* its machine (dl_host_id), from its hello */
  volatile int dead;          /* set by the monitor: exited, or no heartbeat */
  int silent;                 /* it died of silence (no heartbeat): its host may be gone (atomic: the monitor sets it) */
  int status;                 /* waitpid status of its local process */
  char why[200];              /* how it died */
  int64_t last_ms;            /* when it was last heard from (atomic) */
  char op[96];                /* what its last heartbeat said it was doing: "TYPE COLLECTIVE" */
  uint64_t rctr;              /* the counter of its last message: a lower or equal one is a replay */
} Worker;

typedef struct Proc { pid_t pid; int reaped, status; int fd[2]; /* its stdout/stderr pipes (launchers; else -1) */ } Proc;

typedef struct Session {
  int active, broken;
  int n;
  Worker *w;
  void *ctx, *router;
  void *mon;                  /* the ROUTER's monitor: failed (keyless) handshakes; the reaper thread's */
  int refused; int64_t refused_log_ms;
  char endpoint[128];
  unsigned char key[DP_KEYLEN];
  char keyfile[PATH_MAX];
  int timeout_ms;
  char launcher[16], backend[16], bind[64];
  char backend_used[16];      /* "ring" or "nccl": what backend="auto" (or the request) came to */
  char backend_why[700];      /* why auto chose the ring ("" otherwise) */
  uint32_t seq, gen;
  pthread_t reaper; int reaper_on; volatile int reaper_stop; volatile int stopping;
  int need_reconnect;
  Proc *proc; int nproc;      /* local processes to reap */
  int remote;                 /* ssh/slurm: workers are not this process's children */
  int hb_ms;                  /* heartbeat timeout (0: none) */
  int64_t last_ping_ms;
  uint64_t ctr;               /* counter of the messages this session sent (atomic) */
} Session;
static Session S;

/* Locking rule.  S and the ROUTER socket belong to whoever holds S_mu.
** The VM's thread takes it in the entry points (dsess_start, dsess_command,
** dsess_run_all, dsess_stop) for the whole operation, sends and waits for
** the replies under it; every static function below that touches S is
** called with it held.  The monitor thread only try-locks it, so between
** operations it keeps the heartbeats going and reads what arrives.  Not
** recursive: an entry point never calls another one (exchange, reconnect
** and nccl_setup are the locked parts they share).  Error-checking, so that
** the exit handler can tell a thread that exits while it holds the lock
** (EDEADLK: it owns S already) from one that must wait for it. */
static pthread_mutex_t S_mu = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;

static uint64_t next_ctr(void) { return __atomic_add_fetch(&S.ctr, 1, __ATOMIC_SEQ_CST); }

/* how a worker is named in messages: "pid 123" (local), "pid 123 on host h" */
static const char *wname(int rank, char *buf, size_t n) {
  Worker *w = &S.w[rank];
  if (S.remote) snprintf(buf, n, "pid %d on host %s", (int)w->pid, w->host[0] ? w->host : "?");
  else snprintf(buf, n, "pid %d", (int)w->pid);
  return buf;
}
/* what a worker was doing, from its last heartbeat: " while in dist.exec (all_reduce)" */
static const char *wop(int rank, char *buf, size_t n) {
  char type[48] = "", coll[48] = "";
  if (sscanf(S.w[rank].op, "%47s %47s", type, coll) < 1 || !strcmp(type, "idle")) { snprintf(buf, n, "%s", !strcmp(type, "idle") ? " while idle" : ""); return buf; }
  static const char *const names[][2] = { { "exec", "dist.exec" }, { "call", "dist.run" }, { "eval", "dist.pull" }, { "set", "dist.push" },
                                          { "runfile", "the script" }, { "reconnect", "reconnecting the group" }, { "welcome", "dist.start" },
                                          { "nccl", "starting NCCL" }, { "ncclid", "starting NCCL" } };
  const char *nm = type;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) if (!strcmp(type, names[i][0])) nm = names[i][1];
  if (coll[0] && strcmp(coll, "-")) snprintf(buf, n, " while in %s (%s)", nm, coll);
  else snprintf(buf, n, " while in %s", nm);
  return buf;
}

/* marks a worker dead (once) and says why */
static void mark_dead(int rank, const char *why) {
  Worker *w = &S.w[rank];
  if (w->dead) return;
  char nm[160], op[160];
  wname(rank, nm, sizeof nm); wop(rank, op, sizeof op);
  snprintf(w->why, sizeof w->why, "%s%s", why, op);
  __atomic_store_n(&w->dead, 1, __ATOMIC_SEQ_CST);
  if (!S.stopping) logf_("nabla dist: worker rank %d (%s) %s", rank, nm, w->why);
}

static void pump_one(nb_VM *vm, uint32_t seq, dsess_Reply *rep);
static void drain_procs(nb_VM *vm, int final);
static int send_to(int rank, const char *type, uint32_t seq, const void *body, size_t len);

/* Elastic membership: set by any thread (nabla run's host watcher), taken
** by the thread that waits for replies, which tells every live worker to
** regroup at its next step boundary (dist.save_checkpoint) */
static int regroup_req;
void dsess_request_regroup(void) { __atomic_store_n(&regroup_req, 1, __ATOMIC_SEQ_CST); }
/* a command ended in the workers' DistRegroup (taken by dsess_take_regroup) */
static int regroup_seen;
int dsess_take_regroup(void) { return __atomic_exchange_n(&regroup_seen, 0, __ATOMIC_SEQ_CST); }
int dsess_lost_worker(void) {
  if (!S.active) return 0;
  if (S.broken) return 1;
  for (int i = 0; i < S.n; i++) if (S.w[i].dead) return 1;
  return 0;
}
static void send_regroup_if_asked(void) {   /* S_mu held */
  if (!__atomic_exchange_n(&regroup_req, 0, __ATOMIC_SEQ_CST) || !S.router) return;
  for (int i = 0; i < S.n; i++) if (S.w[i].hello && !S.w[i].dead) send_to(i, "regroup", 0, NULL, 0);
}

/* sends the session's heartbeat to every live worker when one is due (under S_mu) */
static void ping_due(void) {
  if (!S.hb_ms || !S.router) return;
  int64_t t = (int64_t)nu_mono_ms(), every = S.hb_ms / 4 < 1000 ? S.hb_ms / 4 : 1000;
  if (t - S.last_ping_ms < every) return;
  S.last_ping_ms = t;
  for (int i = 0; i < S.n; i++)
    if (S.w[i].hello && !S.w[i].dead)
      dp_send(S.router, S.key, S.w[i].ident, S.w[i].identlen, "ping", 0, -1, next_ctr(), NULL, 0);   /* a ROUTER never blocks: a full queue drops */
}

/* The monitor thread: reaps the local processes (a worker, its ssh client,
** or srun), declares a worker that sent nothing for the heartbeat timeout
** dead, and between commands keeps the heartbeats going and reads what
** arrives (the main thread does both while it waits for replies). */
/* logs connections that failed the CURVE handshake (no key), at most once a
** second so that a flood of them does not flood the log (reaper thread) */
static void log_refused_connections(void) {
  for (int k = 0; S.mon && k < 1000; k++) {
    zmq_msg_t f; zmq_msg_init(&f);
    if (zmq_msg_recv(&f, S.mon, ZMQ_DONTWAIT) < 0) { zmq_msg_close(&f); break; }
    int more = zmq_msg_more(&f);
    zmq_msg_close(&f);
    while (more) {   /* the event's second frame: the endpoint */
      zmq_msg_init(&f);
      if (zmq_msg_recv(&f, S.mon, 0) < 0) { zmq_msg_close(&f); break; }
      more = zmq_msg_more(&f);
      zmq_msg_close(&f);
    }
    S.refused++;
  }
  int64_t t = (int64_t)nu_mono_ms();
  if (S.refused && t - S.refused_log_ms >= 1000) {
    if (!S.stopping) logf_("nabla dist: refused %d connection%s without the session key (the ZeroMQ CURVE handshake failed; nothing it sent was read)", S.refused, S.refused > 1 ? "s" : "");
    S.refused = 0; S.refused_log_ms = t;
  }
}

static void *reaper_main(void *arg) {
  (void)arg;
  while (!S.reaper_stop) {
    log_refused_connections();
    for (int k = 0; k < S.nproc; k++) {
      Proc *pr = &S.proc[k];
      if (pr->pid <= 0 || pr->reaped) continue;
      int st = 0;
      pid_t p = waitpid(pr->pid, &st, WNOHANG);
      if (p != pr->pid && !(p < 0 && errno == ECHILD)) continue;
      pr->status = p == pr->pid ? st : 0;
      __atomic_store_n(&pr->reaped, 1, __ATOMIC_SEQ_CST);
      char why[200];
      const char *what = !S.remote ? NULL : !strcmp(S.launcher, "slurm") ? "srun" : "ssh";
      if (!what) {
        if (WIFSIGNALED(st)) snprintf(why, sizeof why, "died: killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
        else snprintf(why, sizeof why, "died: exited with status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      } else if (WIFSIGNALED(st)) snprintf(why, sizeof why, "died: its %s (pid %d) was killed by signal %d", what, (int)pr->pid, WTERMSIG(st));
      else if (!strcmp(what, "ssh") && WEXITSTATUS(st) == 255)
        snprintf(why, sizeof why, "died: its ssh connection ended (status 255: the worker was killed, or ssh failed)");
      else snprintf(why, sizeof why, "died: its %s exited with status %d", what, WEXITSTATUS(st));
      for (int i = 0; i < S.n; i++) if (S.w[i].proc == k) {
        S.w[i].status = pr->status;
        mark_dead(i, why);
      }
    }
    if (S.hb_ms > 0 && !S.stopping) {
      int64_t t = (int64_t)nu_mono_ms();
      for (int i = 0; i < S.n; i++) {
        Worker *w = &S.w[i];
        int64_t last = __atomic_load_n(&w->last_ms, __ATOMIC_SEQ_CST);
        if (!w->hello || w->dead || t - last <= S.hb_ms) continue;
        char why[120]; snprintf(why, sizeof why, "stopped responding: no heartbeat for %.1f s", (double)(t - last) / 1e3);
        __atomic_store_n(&w->silent, 1, __ATOMIC_SEQ_CST);   /* before dead: a reader that sees dead sees this */
        mark_dead(i, why);
      }
    }
    if (pthread_mutex_trylock(&S_mu) == 0) {
      if (S.router && !S.stopping) {
        ping_due();
        drain_procs(NULL, 0);
        zmq_pollitem_t it = { S.router, 0, ZMQ_POLLIN, 0 };
        for (int k = 0; k < 1000 && zmq_poll(&it, 1, 0) > 0; k++) pump_one(NULL, 0, NULL);
      }
      pthread_mutex_unlock(&S_mu);
    }
    usleep(20000);
  }
  return NULL;
}

/* ---- output ---- */
/* relays what the launchers (ssh, srun) wrote on their stdout/stderr: the
** remote workers' direct writes (drelay.c).  final (teardown, the launchers
** gone): what is left in the pipes, then they are closed (under S_mu) */
static void drain_procs(nb_VM *vm, int final) {
  char buf[16384];
  for (int k = 0; k < S.nproc; k++)
    for (int s = 0; s < 2; s++) {
      int fd = S.proc[k].fd[s];
      /* bounded: a chatty launcher cannot hold the session here */
      for (int i = 0; fd >= 0 && i < (final ? 4096 : 16); i++) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r > 0) { dsess_relay_launcher(vm, strcmp(S.launcher, "slurm") ? k : -1, s ? NB_STDERR : NB_STDOUT, buf, (size_t)r); continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN && !final) break;
        close(fd); S.proc[k].fd[s] = fd = -1;   /* the end, an error, or the last drain */
      }
      if (final && fd >= 0) { close(fd); S.proc[k].fd[s] = -1; }
    }
}

void dsess_replies_free(dsess_Reply *r, int n) { if (r) for (int i = 0; i < n; i++) free(r[i].body); free(r); }

static void refuse(const dp_Msg *m, const char *why) {
  dp_send(S.router, S.key, m->ident, m->identlen, "refuse", 0, -1, next_ctr(), why, strlen(why));
}

/*
** The handshake.  A new connection gets nothing until it has proved the key
** for itself: the worker sends a signed `hi`, the session answers with a
** challenge bound to that connection (its ZeroMQ routing identity: 16
** random bytes the worker chose, which no other connection can take while
** it is connected, ZMQ_ROUTER_HANDOVER being off) and to the time, and the
** worker's signed `hello` must echo it.  A hello replayed on another
** connection, or later than CHALLENGE_MS, is refused.  The challenge is
** computed, not stored, so unanswered `hi`s cost the session nothing.
*/
#define CHALLENGE_MS 120000
static void challenge_for(const char *ident, size_t identlen, unsigned long long t, char out[96]) {
  char ts[24]; int tn = snprintf(ts, sizeof ts, "%llu", t);
  const void *parts[3] = { "nabla-challenge", ident, ts };
  size_t lens[3] = { 15, identlen, (size_t)tn };
  unsigned char mac[32]; char hex[65];
  if (wire_hmac_sha256(S.key, DP_KEYLEN, parts, lens, 3, mac)) RAND_bytes(mac, sizeof mac);   /* no HMAC: a challenge nobody can answer */
  wire_hex(mac, 32, hex);
  snprintf(out, 96, "%s %s", ts, hex);
}

static void on_hi(const dp_Msg *m) {
  char ch[96];
  challenge_for(m->ident, m->identlen, (unsigned long long)(int64_t)nu_mono_ms(), ch);
  dp_send(S.router, S.key, m->ident, m->identlen, "challenge", 0, -1, next_ctr(), ch, strlen(ch));
}

/* a hello from a worker: check the challenge, rank, pid and version */
static void on_hello(dp_Msg *m) {
  dp_Hello h;
  if (dp_parse_hello(m->body, &h) || h.rank < 0 || h.rank >= S.n) {
    logf_("nabla dist: refused a worker hello that does not parse (rank %d)", h.rank);
    refuse(m, "bad hello");
    return;
  }
  const char *ver = h.ver, *addr = h.addr, *host = h.host;
  int pid = h.pid, rank = h.rank;
  unsigned long long t = strtoull(h.ts, NULL, 10);
  char want[96], got[160];
  challenge_for(m->ident, m->identlen, t, want);
  snprintf(got, sizeof got, "%s %s", h.ts, h.mac);
  if (strlen(got) != strlen(want) || !wire_equal(got, want, strlen(want)) || (unsigned long long)(int64_t)nu_mono_ms() - t > CHALLENGE_MS) {
    /* no answer: this connection has not proved the key */
    logf_("nabla dist: refused a hello for rank %d that does not answer this connection's challenge (a replay?)", rank);
    return;
  }
  Worker *w = &S.w[rank];
  if (strcmp(ver, nb_version()) != 0) {
    logf_("nabla dist: refused worker rank %d (pid %d): its nabla version %s differs from the session's %s", rank, pid, ver, nb_version());
    refuse(m, "version mismatch");
    return;
  }
  if (w->hello || (!S.remote && w->pid != pid)) {
    logf_("nabla dist: refused a second or unexpected worker for rank %d (pid %d)", rank, pid);
    refuse(m, "unexpected worker");
    return;
  }
  w->hello = 1;
  w->pid = pid;
  w->rctr = m->ctr;
  /* the hello's host field: "HOSTNAME/HOSTID" (older workers: no id) */
  char hn[80]; snprintf(hn, sizeof hn, "%s", host);
  char *slash = strrchr(hn, '/');
  if (slash) { *slash = 0; snprintf(w->hostid, sizeof w->hostid, "%s", slash + 1); }
  else snprintf(w->hostid, sizeof w->hostid, "%.16s", hn);
  if (!w->host[0]) snprintf(w->host, sizeof w->host, "%s", hn[0] ? hn : "?");
  __atomic_store_n(&w->last_ms, (int64_t)nu_mono_ms(), __ATOMIC_SEQ_CST);
  memcpy(w->ident, m->ident, m->identlen); w->identlen = m->identlen;
  snprintf(w->addr, sizeof w->addr, "%s", addr);
}

/* the rank whose connection sent m (it said hello on it), or -1 */
static int sender_rank(const dp_Msg *m) {
  int r = m->rank;
  if (r < 0 || r >= S.n || !S.w[r].hello || m->identlen != S.w[r].identlen || memcmp(m->ident, S.w[r].ident, m->identlen)) return -1;
  return r;
}

/* Handles one incoming message (output, hellos, replies to `seq`). */
static void pump_one(nb_VM *vm, uint32_t seq, dsess_Reply *rep) {
  dp_Msg m;
  int rc = dp_recv(S.router, S.key, 1, 1, &m);
  if (rc == 1 || rc == -1) return;
  if (rc < 0) {
    char hex[129]; wire_hex((unsigned char *)m.ident, m.identlen < 64 ? m.identlen : 64, hex);
    if (rc == -3) logf_("nabla dist: refused a message over %zu bytes or %d frames (connection %s); it was not looked at", (size_t)DP_MAX_MSG, DP_MAX_FRAMES, hex);
    else logf_("nabla dist: refused a message with a missing or bad signature (connection %s); it was not looked at", hex);
    dp_msg_free(&m);
    return;
  }
  int r = sender_rank(&m);
  if (r >= 0 && m.ctr <= S.w[r].rctr) {
    logf_("nabla dist: refused a replayed message from rank %d (counter %llu after %llu)", r, (unsigned long long)m.ctr, (unsigned long long)S.w[r].rctr);
    dp_msg_free(&m);
    return;
  }
  if (r >= 0) { S.w[r].rctr = m.ctr; __atomic_store_n(&S.w[r].last_ms, (int64_t)nu_mono_ms(), __ATOMIC_SEQ_CST); }   /* any message is a sign of life */
  if (!strcmp(m.type, "hi")) { if (r < 0) on_hi(&m); }
  else if (!strcmp(m.type, "hello")) { if (r < 0) on_hello(&m); }
  else if (r < 0) {
    /* signed, but not from the connection that said hello for that rank */
  } else if (!strcmp(m.type, "ping")) {
    snprintf(S.w[r].op, sizeof S.w[r].op, "%s", m.body);
  } else if (!strcmp(m.type, "stream") && m.len >= 1) {
    dsess_relay_output(vm, r, m.body[0] == '2' ? NB_STDERR : NB_STDOUT, m.body + 1, m.len - 1);
  } else if (!strcmp(m.type, "reply") && m.seq != seq && dsess_async_reply(r, m.seq, m.body, m.len)) {
    /* the reply to a dist.submit task (dasync.c keeps it for its future) */
  } else if (!strcmp(m.type, "reply") && m.seq == seq && rep && !rep[r].got) {
    dsess_relay_flush(vm, r);   /* its command is over: a line it left open goes out now */
    rep[r].got = 1; rep[r].ok = m.len >= 1 && m.body[0] == '0';
    rep[r].len = m.len ? m.len - 1 : 0;
    rep[r].body = malloc(rep[r].len + 1);
    if (rep[r].body) { memcpy(rep[r].body, m.body + (m.len ? 1 : 0), rep[r].len); rep[r].body[rep[r].len] = 0; }
  }
  dp_msg_free(&m);
}

/* interrupts a command on the target ranks that did not answer yet: a
** control message (the worker's I/O thread interrupts its VM if it still
** runs that command) — works for workers that are not children too */
static void interrupt_ranks(uint32_t seq, const int *targets, dsess_Reply *rep) {
  char body[24]; int bn = snprintf(body, sizeof body, "%u", seq);
  for (int i = 0; i < S.n; i++)
    if (targets[i] && !rep[i].got && S.w[i].hello && !S.w[i].dead)
      dp_send(S.router, S.key, S.w[i].ident, S.w[i].identlen, "interrupt", seq, -1, next_ctr(), body, (size_t)bn);
}

enum { WR_OK, WR_FAILED, WR_DEAD, WR_INTERRUPTED, WR_TIMEOUT };
/* Waits for a reply with `seq` from every target rank.  On the first error
** reply the other ranks are interrupted (their cells stop); a dead worker or
** an interrupt of the session also ends the wait.  *which: the rank. */
static int wait_replies(nb_VM *vm, uint32_t seq, const int *targets, dsess_Reply *rep, double timeout_s, int *which) {
  double start = nu_mono_s(), grace = 0;
  int result = WR_OK; *which = -1;
  for (;;) {
    int pending = 0;
    for (int i = 0; i < S.n; i++) if (targets[i] && !rep[i].got) pending++;
    if (!pending) break;
    zmq_pollitem_t it = { S.router, 0, ZMQ_POLLIN, 0 };
    int rc = zmq_poll(&it, 1, 50);
    ping_due();
    send_regroup_if_asked();
    drain_procs(vm, 0);
    /* a burst of at most 64 messages, so a chatty rank cannot starve the checks below */
    for (int k = 0; rc > 0 && k < 64; k++) {
      pump_one(vm, seq, rep);
      zmq_pollitem_t j = { S.router, 0, ZMQ_POLLIN, 0 };
      if (zmq_poll(&j, 1, 0) <= 0) break;
    }
    for (int i = 0; i < S.n; i++) if (targets[i] && rep[i].got && !rep[i].ok && result == WR_OK) {
      result = WR_FAILED; *which = i;
      interrupt_ranks(seq, targets, rep);
      grace = nu_mono_s();
    }
    if (vm && nb_vm_interrupted(vm) && result == WR_OK) {
      result = WR_INTERRUPTED;
      interrupt_ranks(seq, targets, rep);
      grace = nu_mono_s();
    }
    for (int i = 0; i < S.n; i++) if (targets[i] && !rep[i].got && S.w[i].dead) {
      /* drain what it may have sent before dying */
      while (zmq_poll(&it, 1, 0) > 0) pump_one(vm, seq, rep);
      dsess_relay_flush(vm, i);   /* the line it was printing when it died */
      if (rep[i].got) continue;
      if (result == WR_OK || result == WR_FAILED) { result = WR_DEAD; *which = i; interrupt_ranks(seq, targets, rep); grace = nu_mono_s(); }
      rep[i].got = 1; rep[i].ok = 0;
    }
    if (grace && nu_mono_s() - grace > 3.0) break;   /* the others did not stop: give up on them */
    if (timeout_s > 0 && nu_mono_s() - start > timeout_s && result == WR_OK) { result = WR_TIMEOUT; interrupt_ranks(seq, targets, rep); grace = nu_mono_s(); }
  }
  drain_procs(vm, 0);
  dsess_relay_flush(vm, -1);
  return result;
}

static int send_to(int rank, const char *type, uint32_t seq, const void *body, size_t len) {
  return dp_send(S.router, S.key, S.w[rank].ident, S.w[rank].identlen, type, seq, -1, next_ctr(), body, len);
}

static void signal_procs(int sig) { for (int k = 0; k < S.nproc; k++) if (S.proc[k].pid > 0 && !S.proc[k].reaped) kill(S.proc[k].pid, sig); }

static void note_dead_hosts(void);
/* Stops the workers and frees the session (S_mu held). */
static void teardown(void) {
  note_dead_hosts();
  S.stopping = 1;
  if (S.router) {
    uint32_t seq = ++S.seq;
    for (int i = 0; i < S.n; i++) if (S.w[i].hello && !S.w[i].dead) send_to(i, "stop", seq, NULL, 0);
  }
  /* wait for the local processes (workers, ssh clients, srun) to exit; then insist */
  double t0 = nu_mono_s(); int termed = 0, killed = 0;
  for (;;) {
    int alive = 0;
    for (int k = 0; k < S.nproc; k++) if (S.proc[k].pid > 0 && !S.proc[k].reaped) alive++;
    if (!alive) break;
    double t = nu_mono_s() - t0;
    /* srun forwards SIGTERM to its tasks; ssh and local workers just go */
    if (t > 3.0 && !termed) { termed = 1; signal_procs(S.remote ? SIGTERM : SIGKILL); }
    if (t > 4.5 && !killed) { killed = 1; signal_procs(SIGKILL); }
    if (t > 6.0) break;
    if (!S.reaper_on) {   /* no monitor thread (start failed early): reap here */
      for (int k = 0; k < S.nproc; k++)
        if (S.proc[k].pid > 0 && !S.proc[k].reaped && waitpid(S.proc[k].pid, &S.proc[k].status, WNOHANG) == S.proc[k].pid) S.proc[k].reaped = 1;
    }
    usleep(10000);
  }
  if (S.reaper_on) { S.reaper_stop = 1; pthread_join(S.reaper, NULL); S.reaper_on = 0; }
  drain_procs(NULL, 1);
  dsess_relay_close(NULL);
  if (S.router) { zmq_socket_monitor(S.router, NULL, 0); zmq_close(S.router); S.router = NULL; }
  if (S.mon) { zmq_close(S.mon); S.mon = NULL; }
  if (S.ctx) { zmq_ctx_term(S.ctx); S.ctx = NULL; }
  if (S.keyfile[0]) { unlink(S.keyfile); S.keyfile[0] = 0; }
  free(S.w); S.w = NULL;
  free(S.proc); S.proc = NULL; S.nproc = 0;
  S.n = 0; S.active = 0; S.broken = 0; S.need_reconnect = 0; S.stopping = 0; S.reaper_stop = 0;
  OPENSSL_cleanse(S.key, sizeof S.key);
}
void dsess_stop(void) {
  pthread_mutex_lock(&S_mu);
  if (S.active) teardown();
  pthread_mutex_unlock(&S_mu);
}

int dsess_error(nb_VM *vm, const char *fmt, ...) {
  char buf[2048];
  va_list ap; va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return nb_error_kind(vm, "DistError", "%s", buf);
}

/* stops the workers at exit, even when exit is called in the middle of an
** operation of this thread (which then holds S_mu) */
static void at_exit_stop(void) {
  int rc = pthread_mutex_lock(&S_mu);
  if (S.active && S.router) teardown();
  if (rc == 0) pthread_mutex_unlock(&S_mu);
}

/* After `welcome`: each worker's reply says what it offers ("nccl HOST
** BUSID VERSION" or "ring REASON"; empty under backend="ring").  1 when
** NCCL can be used by everyone: every worker has a GPU and NCCL, and no two
** workers on one host share a GPU (NCCL refuses two ranks on one device);
** else 0 with the reason in why. */
static int choose_backend(dsess_Reply *rep, char *why, size_t n) {
  snprintf(why, n, "backend \"ring\" was asked for");
  if (!strcmp(S.backend, "ring")) return 0;
  for (int i = 0; i < S.n; i++) {
    const char *b = rep[i].body ? rep[i].body : "";
    if (strncmp(b, "nccl ", 5) != 0) {
      snprintf(why, n, "backend \"nccl\" is not available on rank %d: %s", i, !strncmp(b, "ring ", 5) ? b + 5 : "the worker did not say");
      return 0;
    }
  }
  for (int i = 0; i < S.n; i++)
    for (int j = 0; j < i; j++) {
      char hi[128] = "", bi[64] = "", hj[128] = "", bj[64] = "";
      sscanf(rep[i].body + 5, "%127s %63s", hi, bi);
      sscanf(rep[j].body + 5, "%127s %63s", hj, bj);
      if (!strcmp(hi, hj) && !strcmp(bi, bj)) {
        snprintf(why, n, "backend \"nccl\" is not available: ranks %d and %d share the GPU %s on host %s "
                 "(NCCL needs one GPU per worker; several workers on one GPU need backend=\"ring\")", j, i, bi, hi);
        return 0;
      }
    }
  return 1;
}

int dsess_need(nb_VM *vm, const char *fname) {
  if (!S.active) return dsess_error(vm, "%s: no workers are running (call dist.start(n) first)", fname);
  if (S.broken) return dsess_error(vm, "%s: the worker group lost a worker; call dist.restart() (or dist.stop())", fname);
  for (int i = 0; i < S.n; i++) if (S.w[i].dead) {
    S.broken = 1;
    char nm[160]; wname(i, nm, sizeof nm);
    return dsess_error(vm, "%s: worker rank %d (%s) is dead (%s); call dist.restart()", fname, i, nm, S.w[i].why);
  }
  return NB_OK;
}

/* Sends a command to the targets (NULL = all) and waits (S_mu held).  On
** success *out holds every target's reply (the caller frees it); otherwise
** an error is raised. */
static int exchange(nb_VM *vm, const char *fname, const char *type, const void *body, size_t len, const int *targets_in, dsess_Reply **out) {
  *out = NULL;
  if (dsess_need(vm, fname)) return NB_ERR;
  int n = S.n;
  int *targets = malloc(sizeof(int) * (size_t)n);
  dsess_Reply *rep = calloc((size_t)n, sizeof *rep);
  if (!targets || !rep) { free(targets); free(rep); return nb_error(vm, "out of memory"); }
  for (int i = 0; i < n; i++) targets[i] = targets_in ? targets_in[i] : 1;
  uint32_t seq = ++S.seq;
  if (len > DP_MAX_MSG) { free(targets); free(rep); return dsess_error(vm, "%s: the command is %zu bytes, over the control channel's limit of %zu", fname, len, (size_t)DP_MAX_MSG); }
  for (int i = 0; i < n; i++)
    if (targets[i] && send_to(i, type, seq, body, len)) {   /* out of memory: the rank would never answer */
      rep[i].got = 1; rep[i].ok = 0;
      static const char nomem[] = "DistError\0the command could not be sent to this rank (out of memory)\0the command could not be sent to this rank (out of memory)";
      rep[i].len = sizeof nomem - 1;
      rep[i].body = malloc(sizeof nomem);
      if (rep[i].body) memcpy(rep[i].body, nomem, sizeof nomem);
    }
  int which, r = wait_replies(vm, seq, targets, rep, 0, &which);
  int failed = r != WR_OK;
  if (failed) S.need_reconnect = 1;
  if (r == WR_FAILED || r == WR_INTERRUPTED) {
    /* show every rank's error report except the "Interrupted" ones we caused */
    int nfail = 0;
    for (int i = 0; i < n; i++) if (targets[i] && rep[i].got && !rep[i].ok && rep[i].body) {
      const char *name = rep[i].body, *msg = name + strlen(name) + 1;
      if (msg > rep[i].body + rep[i].len) msg = "";
      const char *report = msg + strlen(msg) + 1;
      if (report > rep[i].body + rep[i].len) report = msg;
      if (i != which && !strcmp(name, "Interrupted") && r == WR_FAILED) continue;
      if (!strcmp(name, "DistRegroup")) continue;   /* every rank stopped at the checkpoint as asked: no failure to report */
      nfail++;
      dsess_relay_report(vm, i, report);
    }
    if (r == WR_INTERRUPTED) { dsess_replies_free(rep, n); free(targets); return nb_error_kind(vm, "Interrupted", "interrupted (the workers were interrupted too)"); }
    const char *name = rep[which].body ? rep[which].body : "Error";
    const char *msg = rep[which].body ? name + strlen(name) + 1 : "";
    if (msg > rep[which].body + rep[which].len) msg = "";
    char m[1024]; snprintf(m, sizeof m, "%s", msg);
    char nm[64]; snprintf(nm, sizeof nm, "%s", name);
    if (!strcmp(nm, "DistRegroup")) __atomic_store_n(&regroup_seen, 1, __ATOMIC_SEQ_CST);
    dsess_replies_free(rep, n); free(targets);
    if (nfail > 1) return dsess_error(vm, "%s failed on rank %d: %s: %s (and on %d other rank%s; reports above)", fname, which, nm, m, nfail - 1, nfail > 2 ? "s" : "");
    return dsess_error(vm, "%s failed on rank %d: %s: %s", fname, which, nm, m);
  }
  if (r == WR_DEAD) {
    S.broken = 1;
    char nm[160]; wname(which, nm, sizeof nm);
    dsess_replies_free(rep, n); free(targets);
    return dsess_error(vm, "%s: worker rank %d (%s) %s; the other ranks were stopped; call dist.restart()", fname, which, nm, S.w[which].why);
  }
  if (r == WR_TIMEOUT) { dsess_replies_free(rep, n); free(targets); return dsess_error(vm, "%s: timed out", fname); }
  free(targets);
  *out = rep;
  return NB_OK;
}


/* The world's NCCL communicator: rank 0 draws the ncclUniqueId (`ncclid`),
** the session relays it to every worker (`nccl`), and they all init. */
static int nccl_setup(nb_VM *vm, const char *fname) {   /* S_mu held */
  int *t = calloc((size_t)S.n, sizeof(int));
  if (!t) return nb_error(vm, "out of memory");
  t[0] = 1;
  dsess_Reply *rep;
  int st = exchange(vm, fname, "ncclid", NULL, 0, t, &rep);
  free(t);
  if (st) return NB_ERR;
  char hex[2 * NT_COMM_ID_BYTES + 1];
  int ok = rep[0].body && rep[0].len == 2 * NT_COMM_ID_BYTES;
  if (ok) memcpy(hex, rep[0].body, sizeof hex);
  dsess_replies_free(rep, S.n);
  if (!ok) return dsess_error(vm, "%s: rank 0 sent a malformed NCCL unique id", fname);
  st = exchange(vm, fname, "nccl", hex, 2 * NT_COMM_ID_BYTES, NULL, &rep);
  OPENSSL_cleanse(hex, sizeof hex);
  if (st) return NB_ERR;
  dsess_replies_free(rep, S.n);
  return NB_OK;
}

/* After a failed command the group may be half way through a collective:
** every worker drops its connections and forms the group again, with a new
** generation number (S_mu held). */
static int reconnect(nb_VM *vm) {
  S.need_reconnect = 0;
  S.gen++;
  char body[32]; int bn = snprintf(body, sizeof body, "%u", S.gen);
  dsess_Reply *rep;
  if (exchange(vm, "dist", "reconnect", body, (size_t)bn, NULL, &rep)) { S.broken = 1; return NB_ERR; }
  dsess_replies_free(rep, S.n);
  /* the workers aborted their NCCL communicators: a fresh one (new id) */
  if (!strcmp(S.backend_used, "nccl") && nccl_setup(vm, "dist (reconnecting NCCL)")) { S.broken = 1; return NB_ERR; }
  return NB_OK;
}

/* hosts whose workers did not start (see dsess_failed_hosts) */
static char *failed_hosts[65];
char *const *dsess_failed_hosts(void) { return failed_hosts; }
static void note_failed_hosts(int dead_only) {   /* S_mu held: ssh workers that never said hello (and died) */
  if (strcmp(S.launcher, "ssh")) return;
  int k = 0;
  while (failed_hosts[k]) k++;
  for (int i = 0; i < S.n && k < 64; i++) {
    if (S.w[i].hello || (dead_only && !S.w[i].dead)) continue;
    int seen = 0;
    for (int j = 0; j < k; j++) if (!strcmp(failed_hosts[j], S.w[i].host)) seen = 1;
    if (!seen && (failed_hosts[k] = strdup(S.w[i].host))) k++;
  }
}

void dsess_note_dead_hosts(void) {
  pthread_mutex_lock(&S_mu);
  if (S.active) note_dead_hosts();
  pthread_mutex_unlock(&S_mu);
}

/* ssh and Slurm: hosts every one of whose workers are gone (the host itself
** may be gone) join the suspects a restart probes (S_mu held, before
** teardown).
** ssh: a worker is gone when it died, or when it has been quiet for
** QUIET_MS (workers ping at least once a second, heartbeat or not).  A
** killed host's workers do not all die at once: one ssh sees its
** connection end, the other's end never arrives (the host's links went
** down) and, within the 3 s the wait gives the others to stop, it is
** neither dead nor past the heartbeat timeout.  Counting it by silence is
** safe because ssh suspects are probed, never dropped: a slow but live host
** answers the probe and is used again.
** Slurm: only workers that died of silence (the full heartbeat timeout)
** count — there is no probe (the node is --exclude'd), and srun ends every
** task of the step when one fails (--kill-on-bad-exit), so a death by exit
** says nothing about the node; a lost node's tasks stop heartbeating first. */
enum { QUIET_MS = 2000 };
static int worker_gone(int j, int slurm, int64_t now) {
  Worker *w = &S.w[j];
  if (slurm) return w->dead && __atomic_load_n(&w->silent, __ATOMIC_SEQ_CST);
  if (w->dead) return 1;
  return w->hello && now - __atomic_load_n(&w->last_ms, __ATOMIC_SEQ_CST) > QUIET_MS;
}
static void note_dead_hosts(void) {
  if (!S.remote || !S.w) return;
  int slurm = !strcmp(S.launcher, "slurm");
  int64_t now = (int64_t)nu_mono_ms();
  int k = 0;
  while (failed_hosts[k]) k++;
  for (int i = 0; i < S.n && k < 64; i++) {
    if (!S.w[i].host[0] || !worker_gone(i, slurm, now)) continue;
    int all = 1, seen = 0;
    for (int j = 0; j < S.n && all; j++) if (!strcmp(S.w[j].host, S.w[i].host) && !worker_gone(j, slurm, now)) all = 0;
    for (int j = 0; j < k; j++) if (!strcmp(failed_hosts[j], S.w[i].host)) seen = 1;
    if (all && !seen && (failed_hosts[k] = strdup(S.w[i].host))) k++;
  }
}

/* Tells every worker where it sits: local rank, workers on its machine,
** machine index and count, from the host ids of the hellos — so two names
** of one machine are one host, and one name is never two (S_mu held). */
static int launch_env(nb_VM *vm) {
  int n = S.n;
  char (*ids)[17] = calloc((size_t)n, sizeof *ids);
  int *lr = calloc((size_t)n, sizeof(int)), *lw = calloc((size_t)n, sizeof(int)), *nd = calloc((size_t)n, sizeof(int));
  int *all = calloc((size_t)n, sizeof(int));
  dsess_Reply *rep = calloc((size_t)n, sizeof *rep);
  int st = NB_ERR, nn = 0;
  if (!ids || !lr || !lw || !nd || !all || !rep) { nb_error(vm, "out of memory"); goto done; }
  for (int i = 0; i < n; i++) { memcpy(ids[i], S.w[i].hostid, 17); all[i] = 1; }
  dl_host_groups((const char (*)[17])ids, n, lr, lw, nd, &nn);
  uint32_t seq = ++S.seq;
  for (int i = 0; i < n; i++) {
    char b[64]; int bn = snprintf(b, sizeof b, "%d %d %d %d", lr[i], lw[i], nd[i], nn);
    send_to(i, "launchenv", seq, b, (size_t)bn);
  }
  int which, r = wait_replies(vm, seq, all, rep, 60, &which);
  if (r != WR_OK) { dsess_error(vm, "dist.start: worker rank %d did not take its launch environment%s%s", which, which >= 0 && S.w[which].dead ? ": " : "", which >= 0 && S.w[which].dead ? S.w[which].why : ""); goto done; }
  st = NB_OK;
done:
  free(ids); free(lr); free(lw); free(nd); free(all);
  dsess_replies_free(rep, rep ? n : 0);
  return st;
}

int dsess_start(nb_VM *vm, int n, const dsess_Launch *o) {
  pthread_mutex_lock(&S_mu);
  int st = NB_ERR;
  char **hosts = NULL; int nhosts = 0;
  if (S.active) { st = dsess_error(vm, "dist.start: workers are already running (%d); call dist.stop() first", S.n); goto out; }
  if (n < 1 || n > 1024) { st = dsess_error(vm, "dist.start: n must be between 1 and 1024, got %d", n); goto out; }
  int ssh = !strcmp(o->launcher, "ssh"), slurm = !strcmp(o->launcher, "slurm");
  if (!ssh && !slurm && strcmp(o->launcher, "local") != 0)
    { st = dsess_error(vm, "dist.start: launcher \"%s\" is not available (\"local\", \"ssh\" with hosts=[...], or \"slurm\" inside an allocation)", o->launcher); goto out; }
  if (ssh && o->nhosts < 1)
    { st = dsess_error(vm, "dist.start: launcher \"ssh\" is not available without hosts=[...] (the hosts to start the workers on; ranks are placed in blocks when there are fewer hosts than workers)"); goto out; }
  if (strcmp(o->backend, "ring") && strcmp(o->backend, "nccl") && strcmp(o->backend, "auto"))
    { st = dsess_error(vm, "dist.start: unknown backend \"%s\" (expected \"auto\", \"ring\" or \"nccl\")", o->backend); goto out; }
  /* the hosts: the list given, less the excluded ones; no loopback name among remote ones */
  if (ssh && !(hosts = dsess_usable_hosts(vm, o, &nhosts))) goto out;
  /* the interface and the port range (options, else the environment) */
  const char *ifn = o->ifname[0] ? o->ifname : getenv("NABLA_SOCKET_IFNAME");
  const char *pspec = o->ports[0] ? o->ports : getenv("NABLA_PORT_RANGE");
  char ifaddr[64] = "", perr[200];
  int plo = 0, phi = 0, ranged = dl_port_range(pspec, &plo, &phi, perr, sizeof perr);
  if (ranged < 0) { st = dsess_error(vm, "dist.start: %s (ports= or NABLA_PORT_RANGE)", perr); goto out; }
  if (ifn && *ifn && !o->bind[0] && dl_ifname_addr(ifn, ifaddr, sizeof ifaddr, perr, sizeof perr)) {
    st = dsess_error(vm, "dist.start: %s (ifname= or NABLA_SOCKET_IFNAME)", perr); goto out;
  }
  for (int i = 0; failed_hosts[i]; i++) free(failed_hosts[i]);
  memset(failed_hosts, 0, sizeof failed_hosts);
  __atomic_store_n(&regroup_req, 0, __ATOMIC_SEQ_CST);   /* a request for the last group is not this one's */
  memset(&S, 0, sizeof S);
  S.n = n;
  S.remote = ssh || slurm;
  S.timeout_ms = o->timeout > 0 ? (int)(o->timeout * 1000) : 0;
  S.hb_ms = o->heartbeat > 0 ? (int)(o->heartbeat * 1000) : 0;
  if (S.hb_ms > 0 && S.hb_ms < 1000) S.hb_ms = 1000;
  snprintf(S.launcher, sizeof S.launcher, "%s", o->launcher);
  snprintf(S.backend, sizeof S.backend, "%s", o->backend);
  /* the control socket's address: given, or loopback when every worker is
  ** on this host, else every interface (messages are signed either way) */
  int all_loop = !slurm;
  for (int i = 0; ssh && i < nhosts; i++) if (!dl_is_loopback(hosts[i], NULL, 0)) all_loop = 0;
  snprintf(S.bind, sizeof S.bind, "%s", o->bind[0] ? o->bind : ifaddr[0] ? ifaddr : all_loop ? "127.0.0.1" : "0.0.0.0");
  S.w = calloc((size_t)n, sizeof *S.w);
  S.nproc = slurm ? 1 : n;
  S.proc = calloc((size_t)S.nproc, sizeof *S.proc);
  if (!S.w || !S.proc) { free(S.w); free(S.proc); S.w = NULL; S.proc = NULL; S.n = 0; S.nproc = 0; st = nb_error(vm, "out of memory"); goto out; }
  for (int k = 0; k < S.nproc; k++) S.proc[k].fd[0] = S.proc[k].fd[1] = -1;
  if (dsess_relay_open(n)) { free(S.w); free(S.proc); S.w = NULL; S.proc = NULL; S.n = 0; S.nproc = 0; st = nb_error(vm, "out of memory"); goto out; }
  for (int i = 0; i < n; i++) {
    S.w[i].proc = slurm ? 0 : i;
    if (ssh) snprintf(S.w[i].host, sizeof S.w[i].host, "%s", hosts[(int)((long)i * nhosts / n)]);
    else if (!slurm) gethostname(S.w[i].host, sizeof S.w[i].host - 1);
  }
  if (RAND_bytes(S.key, sizeof S.key) != 1) { st = dsess_error(vm, "dist.start: no random bytes for the session key"); goto fail; }
  {
    /* stop the workers at exit; registered after OpenSSL's own exit handler
    ** (which RAND_bytes and a first HMAC install) so it runs before it */
    static int registered;
    unsigned char mac[32]; const void *p[1] = { "" }; size_t l[1] = { 0 };
    (void)wire_hmac_sha256(S.key, DP_KEYLEN, p, l, 1, mac);
    if (!registered) { registered = 1; atexit(at_exit_stop); }
  }
  char hex[2 * DP_KEYLEN + 2]; wire_hex(S.key, DP_KEYLEN, hex); strcat(hex, "\n");
  if (!S.remote) {
    /* the key file: 0600, in $XDG_RUNTIME_DIR or $TMPDIR or /tmp */
    const char *dir = getenv("XDG_RUNTIME_DIR");
    if (!dir || access(dir, W_OK)) dir = getenv("TMPDIR");
    if (!dir || access(dir, W_OK)) dir = "/tmp";
    snprintf(S.keyfile, sizeof S.keyfile, "%s/nabla-dist-key-XXXXXX", dir);
    mode_t old = umask(077);
    int fd = mkstemp(S.keyfile);
    umask(old);
    if (fd < 0) { OPENSSL_cleanse(hex, sizeof hex); S.keyfile[0] = 0; st = dsess_error(vm, "dist.start: cannot create the key file: %s", strerror(errno)); goto fail; }
    fchmod(fd, 0600);
    ssize_t wr = write(fd, hex, strlen(hex));
    close(fd);
    if (wr < 0) { OPENSSL_cleanse(hex, sizeof hex); st = dsess_error(vm, "dist.start: cannot write the key file"); goto fail; }
  }
  S.ctx = zmq_ctx_new();
  S.router = zmq_socket(S.ctx, ZMQ_ROUTER);
  int zero = 0;
  zmq_setsockopt(S.router, ZMQ_LINGER, &zero, sizeof zero);
  /* a connection never takes over another's identity (ZMQ_ROUTER_HANDOVER
  ** stays off), and no frame bigger than DP_MAX_FRAME is buffered */
  dp_limit_socket(S.router);
  if (dp_curve_server(S.router, S.key)) { OPENSSL_cleanse(hex, sizeof hex); st = dsess_error(vm, "dist.start: this ZeroMQ has no CURVE security (libzmq built without libsodium)"); goto fail; }
  if (zmq_socket_monitor(S.router, "inproc://nabla-session-monitor", ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0) {
    S.mon = zmq_socket(S.ctx, ZMQ_PAIR);
    if (S.mon) { zmq_setsockopt(S.mon, ZMQ_LINGER, &zero, sizeof zero); zmq_connect(S.mon, "inproc://nabla-session-monitor"); }
  }
  /* IPv6 on: workers may reach the session at an IPv6 address; with remote
  ** workers the wildcard is "*" ("::", IPv4 too; ZeroMQ falls back to IPv4
  ** where the host has no IPv6) */
  int v6 = 1;
  zmq_setsockopt(S.router, ZMQ_IPV6, &v6, sizeof v6);
  char bhost[96];
  if (S.remote && !strcmp(S.bind, "0.0.0.0")) snprintf(bhost, sizeof bhost, "*"); else dl_hostport(bhost, sizeof bhost, S.bind, -1);
  char ep[160]; snprintf(ep, sizeof ep, "tcp://%s:*", bhost);
  int bound = -1, e = 0;
  if (ranged) {   /* the first free port of the range */
    for (int p = plo; p <= phi && bound; p++) { snprintf(ep, sizeof ep, "tcp://%s:%d", bhost, p); bound = zmq_bind(S.router, ep); e = errno; }
    if (bound) snprintf(ep, sizeof ep, "tcp://%s:%d-%d", bhost, plo, phi);
  } else { bound = zmq_bind(S.router, ep); e = errno; }
  if (bound != 0) { OPENSSL_cleanse(hex, sizeof hex); st = dsess_error(vm, "dist.start: cannot listen on %s: %s", ep, zmq_strerror(e)); goto fail; }
  size_t el = sizeof S.endpoint;
  zmq_getsockopt(S.router, ZMQ_LAST_ENDPOINT, S.endpoint, &el);
  const char *pc = strrchr(S.endpoint, ':');
  int port = pc ? atoi(pc + 1) : 0;
  /* local workers exec this very binary (dl_spawn_local: /proc/self/exe, so
  ** a rebuild under a running session changes nothing); remote ones run a
  ** path, which must still be there */
  char exe[PATH_MAX], exe_why[PATH_MAX + 200];
  if (dl_self_exe(exe, sizeof exe, (ssh || slurm) && !o->remote_nabla, exe_why, sizeof exe_why)) {
    OPENSSL_cleanse(hex, sizeof hex); st = dsess_error(vm, "dist.start: %s", exe_why); goto fail;
  }
  dl_Common c = { .exe = o->remote_nabla ? o->remote_nabla : exe, .key_hex = hex, .world = n, .timeout_ms = S.timeout_ms,
                  .heartbeat_s = S.hb_ms / 1e3, .worker_bind = "auto", .connect_timeout = o->connect_timeout };
  /* what every worker gets besides the forwarded variables: env=[...], the interface, the ports */
  char ifenv[64] = "", penv[64] = "";
  if (ifn && *ifn) snprintf(ifenv, sizeof ifenv, "NABLA_SOCKET_IFNAME=%.40s", ifn);
  if (ranged) snprintf(penv, sizeof penv, "NABLA_PORT_RANGE=%d-%d", plo, phi);
  char **wenv = calloc((size_t)o->nenv + 3, sizeof(char *));
  int nwenv = 0;
  if (!wenv) { OPENSSL_cleanse(hex, sizeof hex); st = nb_error(vm, "out of memory"); goto fail; }
  for (int i = 0; i < o->nenv; i++) wenv[nwenv++] = o->env[i];
  if (ifenv[0]) wenv[nwenv++] = ifenv;
  if (penv[0]) wenv[nwenv++] = penv;
  c.env = wenv; c.nenv = nwenv;
  int spawn_failed = 0;
  if (slurm) {
    /* where the tasks reach this session: the bind address, or this host's address */
    char addr[80];
    if (strcmp(S.bind, "0.0.0.0") != 0) snprintf(addr, sizeof addr, "%s", S.bind); else dl_self_addr(addr, sizeof addr);
    char hp[112]; dl_hostport(hp, sizeof hp, addr, port);
    snprintf(S.endpoint, sizeof S.endpoint, "tcp://%s", hp);
    /* nodes lost by an earlier group: left out of this step */
    char xl[1024] = ""; size_t xn = 0;
    for (int i = 0; i < o->nlost && xn + strlen(o->lost[i]) + 2 < sizeof xl; i++) xn += (size_t)snprintf(xl + xn, sizeof xl - xn, "%s%s", xn ? "," : "", o->lost[i]);
    int nodes = o->nodes > 0 ? o->nodes - o->nlost : 0;
    S.proc[0].pid = dl_spawn_srun(&c, nodes > 0 ? nodes : 0, o->gpus_per_node, xl, S.endpoint);
    spawn_failed = S.proc[0].pid < 0;
    if (!spawn_failed) { S.proc[0].fd[0] = c.out_fd[0]; S.proc[0].fd[1] = c.out_fd[1]; }
  } else if (ssh) {
    char first[128] = "";
    for (int i = 0; i < n && !spawn_failed; i++) {
      int lrank = 0, here = 0;
      for (int j = 0; j < n; j++) if (!strcmp(S.w[j].host, S.w[i].host)) { here++; if (j < i) lrank++; }
      c.threads = o->threads_per_worker; c.share = here;   /* the worker divides its own host's cores */
      char addr[80], wep[128];
      if (strcmp(S.bind, "0.0.0.0") != 0) snprintf(addr, sizeof addr, "%s", S.bind);
      else if (dl_route_addr(S.w[i].host, addr, sizeof addr)) { spawn_failed = 1; snprintf(c.err, sizeof c.err, "cannot find a route to host %s", S.w[i].host); break; }
      char hp[112]; dl_hostport(hp, sizeof hp, addr, port);
      snprintf(wep, sizeof wep, "tcp://%s", hp);
      if (!first[0]) snprintf(first, sizeof first, "%s", wep);
      S.proc[i].pid = dl_spawn_ssh(&c, S.w[i].host, o->ssh_port, o->ssh_key, o->ssh_opts, o->nssh_opts, wep, i, lrank);
      spawn_failed = S.proc[i].pid < 0;
      if (!spawn_failed) { S.proc[i].fd[0] = c.out_fd[0]; S.proc[i].fd[1] = c.out_fd[1]; }
    }
    if (first[0]) snprintf(S.endpoint, sizeof S.endpoint, "%s", first);
  } else {
    c.threads = o->threads_per_worker;
    for (int i = 0; i < n && !spawn_failed; i++) {
      S.w[i].pid = S.proc[i].pid = dl_spawn_local(&c, exe, S.endpoint, S.keyfile, S.bind, i);
      spawn_failed = S.proc[i].pid < 0;
      if (spawn_failed) snprintf(c.err, sizeof c.err, "fork failed: %s", strerror(errno));
    }
  }
  OPENSSL_cleanse(hex, sizeof hex);
  free(wenv);
  if (spawn_failed) { char why[512]; snprintf(why, sizeof why, "%s", c.err); st = dsess_error(vm, "dist.start: %s", why); goto fail; }
  S.active = 1;
  if (pthread_create(&S.reaper, NULL, reaper_main, NULL) == 0) S.reaper_on = 1;
  /* hellos */
  double t0 = nu_mono_s(), limit = slurm ? 120 : ssh ? 60 : 30;
  for (;;) {
    int have = 0, dead = -1;
    for (int i = 0; i < n; i++) { have += S.w[i].hello; if (S.w[i].dead && dead < 0) dead = i; }
    if (have == n) break;
    if (dead >= 0) {
      note_failed_hosts(1);
      char why[256]; snprintf(why, sizeof why, "%s", S.w[dead].why);
      const char *d = strncmp(why, "died: ", 6) ? why : why + 6;
      st = dsess_error(vm, "dist.start: worker rank %d exited before connecting (%s)", dead, d); goto fail;
    }
    if (vm && nb_vm_interrupted(vm)) { st = nb_error_kind(vm, "Interrupted", "interrupted"); goto fail; }
    if (nu_mono_s() - t0 > limit) { note_failed_hosts(0); st = dsess_error(vm, "dist.start: only %d of %d workers connected within %.0f s", have, n, limit); goto fail; }
    zmq_pollitem_t it = { S.router, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, 50) > 0) pump_one(vm, 0, NULL);
    ping_due();
    drain_procs(vm, 0);
  }
  if (S.keyfile[0]) { unlink(S.keyfile); S.keyfile[0] = 0; }   /* every worker has read it */
  if (launch_env(vm)) goto fail;
  /* welcome: rank, world, peers; then wait until the mesh is connected */
  nb_Buf b = {0};
  nbB_printf(&b, "%d %d %u %s\n", n, S.timeout_ms, S.gen, S.backend);
  for (int i = 0; i < n; i++) nbB_printf(&b, "%s\n", S.w[i].addr);
  uint32_t seq = ++S.seq;
  for (int i = 0; i < n; i++) send_to(i, "welcome", seq, b.p, b.n);
  nbB_free(&b);
  dsess_Reply *rep = calloc((size_t)n, sizeof *rep);
  int *all = calloc((size_t)n, sizeof(int));
  if (!rep || !all) { free(rep); free(all); st = nb_error(vm, "out of memory"); goto fail; }
  for (int i = 0; i < n; i++) all[i] = 1;
  int which, r = wait_replies(vm, seq, all, rep, 90, &which);
  if (r != WR_OK) {
    char why[600] = "";
    if (which >= 0 && rep[which].body) {   /* "NAME\0MESSAGE\0REPORT": the message */
      const char *nm = rep[which].body, *msg = nm + strlen(nm) + 1;
      snprintf(why, sizeof why, ": %s", msg <= rep[which].body + rep[which].len ? msg : nm);
    } else if (which >= 0 && S.w[which].dead) snprintf(why, sizeof why, ": %s", S.w[which].why);
    dsess_replies_free(rep, n); free(all);
    st = dsess_error(vm, "dist.start: the workers could not form the collective group (rank %d%s)", which, why); goto fail;
  }
  char why[700];
  int use_nccl = choose_backend(rep, why, sizeof why);
  dsess_replies_free(rep, n); free(all);
  if (!use_nccl && !strcmp(S.backend, "nccl")) { st = dsess_error(vm, "dist.start: %s", why); goto fail; }
  snprintf(S.backend_used, sizeof S.backend_used, "%s", use_nccl ? "nccl" : "ring");
  snprintf(S.backend_why, sizeof S.backend_why, "%s", use_nccl ? "" : why);
  if (use_nccl && nccl_setup(vm, "dist.start")) { goto fail; }   /* the error is raised already */
  st = NB_OK;
  goto out;
fail:   /* the error is raised: take down what was started */
  teardown();
out:
  free(hosts);
  pthread_mutex_unlock(&S_mu);
  return st;
}

int dsess_command(nb_VM *vm, const char *fname, const char *type, const void *body, size_t len, const int *targets, dsess_Reply **out) {
  pthread_mutex_lock(&S_mu);
  *out = NULL;
  int st = dsess_need(vm, fname);
  if (!st && S.need_reconnect) st = reconnect(vm);
  if (!st) st = exchange(vm, fname, type, body, len, targets, out);
  pthread_mutex_unlock(&S_mu);
  return st;
}

int dsess_run_all(nb_VM *vm, const void *body, size_t len, dsess_Reply **out, int *which, int prefix_all, const int *log_fds) {
  pthread_mutex_lock(&S_mu);
  int n = S.n, st = NB_ERR;
  *out = NULL; *which = -1;
  int *all = calloc((size_t)n, sizeof(int));
  dsess_Reply *rep = calloc((size_t)n, sizeof *rep);
  if (all && rep) {
    dsess_relay_mode(prefix_all ? 2 : 1, log_fds);
    for (int k = 0; k < n; k++) all[k] = 1;
    uint32_t seq = ++S.seq;
    for (int k = 0; k < n; k++) send_to(k, "runfile", seq, body, len);
    wait_replies(vm, seq, all, rep, 0, which);   /* the caller reads each rank's reply or death */
    dsess_relay_mode(0, NULL);
    *out = rep; rep = NULL;
    st = NB_OK;
  }
  free(all); free(rep);
  pthread_mutex_unlock(&S_mu);
  return st;
}

/* ------------------------------------------------------------ what the builtins show */
int dsess_active(void) { return S.active; }
int dsess_size(void) { return S.n; }
const char *dsess_endpoint(void) { return S.endpoint; }
void dsess_worker_info(int rank, dsess_WorkerInfo *out) {
  const Worker *w = &S.w[rank];
  out->pid = (int)w->pid; out->host = w->host; out->dead = w->dead; out->status = w->status;
}
void dsess_backend(const char **used, const char **requested, const char **why) {
  *used = S.backend_used; *requested = S.backend; *why = S.backend_why;
}

/* ------------------------------------------------------------ asynchronous tasks (dasync.c) */
int dsess_post(nb_VM *vm, const char *fname, int rank, const char *type, const void *body, size_t len, uint32_t *seq, int *pid) {
  pthread_mutex_lock(&S_mu);
  int st = NB_OK;
  if (!S.active) st = dsess_error(vm, "%s: no workers are running (call dist.start(n) first)", fname);
  else if (rank < 0 || rank >= S.n) st = dsess_error(vm, "%s: rank %d is not a worker (the session has %d)", fname, rank, S.n);
  else if (S.w[rank].dead) {
    char nm[160]; wname(rank, nm, sizeof nm);
    st = dsess_error(vm, "%s: worker rank %d (%s) is dead (%s)", fname, rank, nm, S.w[rank].why);
  } else if (len > DP_MAX_MSG) st = dsess_error(vm, "%s: the task is %zu bytes, over the control channel's limit of %zu", fname, len, (size_t)DP_MAX_MSG);
  else {
    *seq = ++S.seq; *pid = (int)S.w[rank].pid;
    /* registered before it is sent: the monitor thread may pump the reply at once */
    if (dsess_async_posted(rank, *seq, *pid)) st = dsess_error(vm, "%s: too many unfinished tasks (%d): take the results of finished futures first", fname, DSESS_MAX_TASKS);
    else if (send_to(rank, type, *seq, body, len)) { dsess_async_reply(rank, *seq, NULL, 0); st = dsess_error(vm, "%s: the task could not be sent to rank %d (out of memory)", fname, rank); }
  }
  pthread_mutex_unlock(&S_mu);
  return st;
}

int dsess_pump(nb_VM *vm, int timeout_ms) {
  pthread_mutex_lock(&S_mu);
  if (S.router) {
    zmq_pollitem_t it = { S.router, 0, ZMQ_POLLIN, 0 };
    int rc = zmq_poll(&it, 1, timeout_ms);
    ping_due();
    drain_procs(vm, 0);
    for (int k = 0; rc > 0 && k < 256; k++) {
      pump_one(vm, 0, NULL);
      if (zmq_poll(&it, 1, 0) <= 0) break;
    }
    dsess_relay_flush(vm, -1);
  }
  pthread_mutex_unlock(&S_mu);
  return NB_OK;
}

int dsess_rank_state(int rank, int pid, char *why, size_t n) {
  if (!S.active || rank < 0 || rank >= S.n) { snprintf(why, n, "the session was stopped"); return 2; }
  if ((int)S.w[rank].pid != pid) { snprintf(why, n, "the workers were restarted"); return 2; }
  if (S.w[rank].dead) { char nm[160]; wname(rank, nm, sizeof nm); snprintf(why, n, "worker rank %d (%s) %s", rank, nm, S.w[rank].why); return 1; }
  return 0;
}
