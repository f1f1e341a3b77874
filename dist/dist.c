/*
** dist.c — distributed sessions.
**
** Session side (any VM: REPL, script, kernel): dist_start spawns n
** `nabla worker` processes (fork + exec of /proc/self/exe), which connect
** back to a ZeroMQ ROUTER socket on 127.0.0.1; every control message is
** signed with a per-session random key (dproto.c) that the workers read from
** a 0600 file.  The session sends commands (exec, call, eval, set, runfile,
** reconnect, stop) to all workers and waits for their replies, printing the
** output they forward ("[rank N] ...") while it waits.  A reaper thread
** notices dead workers at once (waitpid) so a wait never hangs on them.
**
** Worker side: nbD_worker_main runs one VM, answers commands in order, and
** forms the collective group (dring.c) with the other workers.  It dies
** with the session: PR_SET_PDEATHSIG, and a ZeroMQ monitor that sees the
** control connection close.
*/
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include <openssl/rand.h>
#include "dist/dist.h"
#include "dist/dgrad.h"
#include "dist/dreduce.h"
#include "dist/dproto.h"
#include "dist/dlaunch.h"
#include "dist/dnccl.h"
#include "tensor/tdevice.h"

extern char **environ;

static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9; }

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

/* ================================================================ session */
typedef struct Worker {
  pid_t pid;                  /* the worker's own pid (on its host) */
  int proc;                   /* index in S.proc: the local process that runs it (the worker, its ssh, srun) */
  int hello;                  /* said hello (and was accepted) */
  char ident[64]; size_t identlen;
  char addr[80];              /* host:port of its ring listener */
  char host[80];              /* where it runs (ssh: the name given; else its hostname) */
  volatile int dead;          /* set by the monitor: exited, or no heartbeat */
  int status;                 /* waitpid status of its local process */
  char why[200];              /* how it died */
  int64_t last_ms;            /* when it was last heard from (atomic) */
  char op[96];                /* what its last heartbeat said it was doing: "TYPE COLLECTIVE" */
  int line_start[3];          /* output: at the start of a line (per stream) */
  uint64_t rctr;              /* the counter of its last message: a lower or equal one is a replay */
} Worker;

typedef struct Proc { pid_t pid; int reaped, status; } Proc;

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
  int run_mode;               /* nabla run: rank 0's stdout unprefixed, other ranks' stdout dropped */
  int need_reconnect;
  Proc *proc; int nproc;      /* local processes to reap */
  int remote;                 /* ssh/slurm: workers are not this process's children */
  int hb_ms;                  /* heartbeat timeout (0: none) */
  int64_t last_ping_ms;
  uint64_t ctr;               /* counter of the messages this session sent (atomic) */
} Session;
static Session S;

/* The ROUTER socket is used by the main thread (commands) and, while the
** main thread is not using it, by the monitor thread (heartbeats, draining
** what arrives between commands).  Recursive: an error path of one locked
** function calls another. */
static pthread_mutex_t S_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static int64_t now_ms(void) { return (int64_t)(now_s() * 1000.0); }
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

typedef struct Reply Reply;
static void pump_one(nb_VM *vm, uint32_t seq, Reply *rep);

/* sends the session's heartbeat to every live worker when one is due (under S_mu) */
static void ping_due(void) {
  if (!S.hb_ms || !S.router) return;
  int64_t t = now_ms(), every = S.hb_ms / 4 < 1000 ? S.hb_ms / 4 : 1000;
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
  int64_t t = now_ms();
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
      int64_t t = now_ms();
      for (int i = 0; i < S.n; i++) {
        Worker *w = &S.w[i];
        int64_t last = __atomic_load_n(&w->last_ms, __ATOMIC_SEQ_CST);
        if (!w->hello || w->dead || t - last <= S.hb_ms) continue;
        char why[120]; snprintf(why, sizeof why, "stopped responding: no heartbeat for %.1f s", (double)(t - last) / 1e3);
        mark_dead(i, why);
      }
    }
    if (pthread_mutex_trylock(&S_mu) == 0) {
      if (S.router && !S.stopping) {
        ping_due();
        zmq_pollitem_t it = { S.router, 0, ZMQ_POLLIN, 0 };
        for (int k = 0; k < 1000 && zmq_poll(&it, 1, 0) > 0; k++) pump_one(NULL, 0, NULL);
      }
      pthread_mutex_unlock(&S_mu);
    }
    usleep(20000);
  }
  return NULL;
}

/* ---- output forwarded by workers ---- */
static void out_write(nb_VM *vm, int stream, const char *data, size_t len) {
  if (vm) { nbW_write(vm, stream, data, len); return; }
  /* between commands (the monitor thread): straight to this process's stdout/stderr */
  if (stream == NB_STDOUT) fflush(stdout);
  if (write(stream == NB_STDERR ? 2 : 1, data, len) < 0) {}
}

static void forward_output(nb_VM *vm, int rank, int stream, const char *data, size_t len) {
  Worker *w = &S.w[rank];
  if (stream != NB_STDERR) stream = NB_STDOUT;
  if (S.run_mode && rank == 0) { out_write(vm, stream, data, len); return; }
  if (S.run_mode && stream == NB_STDOUT) return;
  char prefix[48]; int pn = snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
  size_t i = 0;
  while (i < len) {
    if (w->line_start[stream]) { out_write(vm, stream, prefix, (size_t)pn); w->line_start[stream] = 0; }
    const char *nl = memchr(data + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - data) + 1 : len;
    out_write(vm, stream, data + i, end - i);
    if (nl) w->line_start[stream] = 1;
    i = end;
  }
  if (stream == NB_STDOUT && vm) fflush(stdout);
}

static void prefixed_report(nb_VM *vm, int rank, const char *text) {
  Worker *w = &S.w[rank];
  if (!w->line_start[NB_STDERR]) { out_write(vm, NB_STDERR, "\n", 1); w->line_start[NB_STDERR] = 1; }
  forward_output(vm, rank, NB_STDERR, text, strlen(text));
  if (!w->line_start[NB_STDERR]) forward_output(vm, rank, NB_STDERR, "\n", 1);
}

struct Reply { int got; int ok; char *body; size_t len; };
static void replies_free(Reply *r, int n) { for (int i = 0; i < n; i++) free(r[i].body); free(r); }

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
  dp_hmac(S.key, parts, lens, 3, mac);
  dp_hex(mac, 32, hex);
  snprintf(out, 96, "%s %s", ts, hex);
}

static void on_hi(const dp_Msg *m) {
  char ch[96];
  challenge_for(m->ident, m->identlen, (unsigned long long)now_ms(), ch);
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
  if (strlen(got) != strlen(want) || !dp_equal(got, want, strlen(want)) || (unsigned long long)now_ms() - t > CHALLENGE_MS) {
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
  if (!w->host[0]) snprintf(w->host, sizeof w->host, "%s", host[0] ? host : "?");
  __atomic_store_n(&w->last_ms, now_ms(), __ATOMIC_SEQ_CST);
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
static void pump_one(nb_VM *vm, uint32_t seq, Reply *rep) {
  dp_Msg m;
  int rc = dp_recv(S.router, S.key, 1, 1, &m);
  if (rc == 1 || rc == -1) return;
  if (rc < 0) {
    char hex[129]; dp_hex((unsigned char *)m.ident, m.identlen < 64 ? m.identlen : 64, hex);
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
  if (r >= 0) { S.w[r].rctr = m.ctr; __atomic_store_n(&S.w[r].last_ms, now_ms(), __ATOMIC_SEQ_CST); }   /* any message is a sign of life */
  if (!strcmp(m.type, "hi")) { if (r < 0) on_hi(&m); }
  else if (!strcmp(m.type, "hello")) { if (r < 0) on_hello(&m); }
  else if (r < 0) {
    /* signed, but not from the connection that said hello for that rank */
  } else if (!strcmp(m.type, "ping")) {
    snprintf(S.w[r].op, sizeof S.w[r].op, "%s", m.body);
  } else if (!strcmp(m.type, "stream") && m.len >= 1) {
    forward_output(vm, r, m.body[0] == '2' ? NB_STDERR : NB_STDOUT, m.body + 1, m.len - 1);
  } else if (!strcmp(m.type, "reply") && m.seq == seq && rep && !rep[r].got) {
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
static void interrupt_ranks(uint32_t seq, const int *targets, Reply *rep) {
  char body[24]; int bn = snprintf(body, sizeof body, "%u", seq);
  for (int i = 0; i < S.n; i++)
    if (targets[i] && !rep[i].got && S.w[i].hello && !S.w[i].dead)
      dp_send(S.router, S.key, S.w[i].ident, S.w[i].identlen, "interrupt", seq, -1, next_ctr(), body, (size_t)bn);
}

enum { WR_OK, WR_FAILED, WR_DEAD, WR_INTERRUPTED, WR_TIMEOUT };
/* Waits for a reply with `seq` from every target rank.  On the first error
** reply the other ranks are interrupted (their cells stop); a dead worker or
** an interrupt of the session also ends the wait.  *which: the rank. */
static int wait_replies(nb_VM *vm, uint32_t seq, const int *targets, Reply *rep, double timeout_s, int *which) {
  double start = now_s(), grace = 0;
  int result = WR_OK; *which = -1;
  for (;;) {
    int pending = 0;
    for (int i = 0; i < S.n; i++) if (targets[i] && !rep[i].got) pending++;
    if (!pending) break;
    zmq_pollitem_t it = { S.router, 0, ZMQ_POLLIN, 0 };
    int rc = zmq_poll(&it, 1, 50);
    ping_due();
    if (rc > 0) { for (int k = 0; k < 64; k++) { int before = 0; (void)before; pump_one(vm, seq, rep); zmq_pollitem_t j = { S.router, 0, ZMQ_POLLIN, 0 }; if (zmq_poll(&j, 1, 0) <= 0) break; } }
    for (int i = 0; i < S.n; i++) if (targets[i] && rep[i].got && !rep[i].ok && result == WR_OK) {
      result = WR_FAILED; *which = i;
      interrupt_ranks(seq, targets, rep);
      grace = now_s();
    }
    if (vm && nb_vm_interrupted(vm) && result == WR_OK) {
      result = WR_INTERRUPTED;
      interrupt_ranks(seq, targets, rep);
      grace = now_s();
    }
    for (int i = 0; i < S.n; i++) if (targets[i] && !rep[i].got && S.w[i].dead) {
      /* drain what it may have sent before dying */
      while (zmq_poll(&it, 1, 0) > 0) pump_one(vm, seq, rep);
      if (rep[i].got) continue;
      if (result == WR_OK || result == WR_FAILED) { result = WR_DEAD; *which = i; interrupt_ranks(seq, targets, rep); grace = now_s(); }
      rep[i].got = 1; rep[i].ok = 0;
    }
    if (grace && now_s() - grace > 3.0) break;   /* the others did not stop: give up on them */
    if (timeout_s > 0 && now_s() - start > timeout_s && result == WR_OK) { result = WR_TIMEOUT; interrupt_ranks(seq, targets, rep); grace = now_s(); }
  }
  return result;
}

static int send_to(int rank, const char *type, uint32_t seq, const void *body, size_t len) {
  return dp_send(S.router, S.key, S.w[rank].ident, S.w[rank].identlen, type, seq, -1, next_ctr(), body, len);
}

static void signal_procs(int sig) { for (int k = 0; k < S.nproc; k++) if (S.proc[k].pid > 0 && !S.proc[k].reaped) kill(S.proc[k].pid, sig); }

static void session_teardown_(void) {
  S.stopping = 1;
  if (S.router) {
    uint32_t seq = ++S.seq;
    for (int i = 0; i < S.n; i++) if (S.w[i].hello && !S.w[i].dead) send_to(i, "stop", seq, NULL, 0);
  }
  /* wait for the local processes (workers, ssh clients, srun) to exit; then insist */
  double t0 = now_s(); int termed = 0, killed = 0;
  for (;;) {
    int alive = 0;
    for (int k = 0; k < S.nproc; k++) if (S.proc[k].pid > 0 && !S.proc[k].reaped) alive++;
    if (!alive) break;
    double t = now_s() - t0;
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
  if (S.router) { zmq_socket_monitor(S.router, NULL, 0); zmq_close(S.router); S.router = NULL; }
  if (S.mon) { zmq_close(S.mon); S.mon = NULL; }
  if (S.ctx) { zmq_ctx_term(S.ctx); S.ctx = NULL; }
  if (S.keyfile[0]) { unlink(S.keyfile); S.keyfile[0] = 0; }
  free(S.w); S.w = NULL;
  free(S.proc); S.proc = NULL; S.nproc = 0;
  S.n = 0; S.active = 0; S.broken = 0; S.need_reconnect = 0; S.stopping = 0; S.reaper_stop = 0;
  OPENSSL_cleanse(S.key, sizeof S.key);
}
static void session_teardown(void) {
  pthread_mutex_lock(&S_mu);
  session_teardown_();
  pthread_mutex_unlock(&S_mu);
}

static int dist_error(nb_VM *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int dist_error(nb_VM *vm, const char *fmt, ...) {
  char buf[2048];
  va_list ap; va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return nb_error_kind(vm, "DistError", "%s", buf);
}

/* spawns one worker with the local launcher */
static pid_t spawn_local(int rank, const char *exe) {
  char rank_s[16], world_s[16], to_s[32], hb_s[32], nthreads[24], omp[64], blas[64];
  snprintf(rank_s, sizeof rank_s, "%d", rank);
  snprintf(world_s, sizeof world_s, "%d", S.n);
  snprintf(to_s, sizeof to_s, "%d", S.timeout_ms);
  snprintf(hb_s, sizeof hb_s, "%g", S.hb_ms / 1e3);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN); if (cpus < 1) cpus = 1;
  long per = cpus / S.n; if (per < 1) per = 1;
  snprintf(nthreads, sizeof nthreads, "%ld", per);
  snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%s", nthreads);
  snprintf(blas, sizeof blas, "OPENBLAS_NUM_THREADS=%s", nthreads);
  char *argv[] = { (char *)exe, "worker", "--connect", S.endpoint, "--key-file", S.keyfile, "--rank", rank_s,
                   "--local-rank", rank_s, "--world", world_s, "--timeout-ms", to_s, "--heartbeat", hb_s, "--bind", S.bind, NULL };
  /* the environment, with thread counts split between the workers unless set */
  int ne = 0; while (environ[ne]) ne++;
  char **envp = malloc(sizeof(char *) * (size_t)(ne + 4));
  if (!envp) return -1;
  int k = 0;
  for (int i = 0; i < ne; i++) envp[k++] = environ[i];
  if (!getenv("OMP_NUM_THREADS")) envp[k++] = omp;
  if (!getenv("OPENBLAS_NUM_THREADS")) envp[k++] = blas;
  if (!getenv("OMP_WAIT_POLICY")) envp[k++] = "OMP_WAIT_POLICY=PASSIVE";
  envp[k] = NULL;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    /* only async-signal-safe calls from here to exec */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);               /* the terminal's Ctrl-C goes to the session, which relays it */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) { dup2(devnull, 0); close(devnull); }
    execve(exe, argv, envp);
    _exit(127);
  }
  free(envp);
  return pid;
}

static void at_exit_stop(void) { if (S.active && S.router) session_teardown(); }

/* how dist.start was called (dist.restart and nabla run reuse it) */
typedef struct LaunchOpts {
  char launcher[16], backend[16], bind[64];
  double timeout, heartbeat;
  char **hosts; int nhosts;
  int ssh_port; char *ssh_key;
  char **ssh_opts; int nssh_opts;
  char *remote_nabla;
  int nodes, gpus_per_node;
} LaunchOpts;

static void opts_free(LaunchOpts *o) {
  for (int i = 0; i < o->nhosts; i++) free(o->hosts[i]);
  for (int i = 0; i < o->nssh_opts; i++) free(o->ssh_opts[i]);
  free(o->hosts); free(o->ssh_opts); free(o->ssh_key); free(o->remote_nabla);
  memset(o, 0, sizeof *o);
}
static char *dupnull(const char *s) { return s ? strdup(s) : NULL; }
static void opts_copy(LaunchOpts *dst, const LaunchOpts *src) {
  opts_free(dst);
  *dst = *src;
  dst->hosts = src->nhosts ? calloc((size_t)src->nhosts, sizeof(char *)) : NULL;
  for (int i = 0; i < src->nhosts && dst->hosts; i++) dst->hosts[i] = strdup(src->hosts[i]);
  if (!dst->hosts) dst->nhosts = 0;
  dst->ssh_opts = src->nssh_opts ? calloc((size_t)src->nssh_opts, sizeof(char *)) : NULL;
  for (int i = 0; i < src->nssh_opts && dst->ssh_opts; i++) dst->ssh_opts[i] = strdup(src->ssh_opts[i]);
  if (!dst->ssh_opts) dst->nssh_opts = 0;
  dst->ssh_key = dupnull(src->ssh_key); dst->remote_nabla = dupnull(src->remote_nabla);
}

/* After `welcome`: each worker's reply says what it offers ("nccl HOST
** BUSID VERSION" or "ring REASON"; empty under backend="ring").  1 when
** NCCL can be used by everyone: every worker has a GPU and NCCL, and no two
** workers on one host share a GPU (NCCL refuses two ranks on one device);
** else 0 with the reason in why. */
static int choose_backend(Reply *rep, char *why, size_t n) {
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

static int command(nb_VM *vm, const char *fname, const char *type, const void *body, size_t len, const int *targets_in, Reply **out);

/* The world's NCCL communicator: rank 0 draws the ncclUniqueId (`ncclid`),
** the session relays it to every worker (`nccl`), and they all init. */
static int nccl_setup(nb_VM *vm, const char *fname) {
  int *t = calloc((size_t)S.n, sizeof(int));
  if (!t) return nb_error(vm, "out of memory");
  t[0] = 1;
  Reply *rep;
  int st = command(vm, fname, "ncclid", NULL, 0, t, &rep);
  free(t);
  if (st) return NB_ERR;
  char hex[2 * NT_COMM_ID_BYTES + 1];
  int ok = rep[0].body && rep[0].len == 2 * NT_COMM_ID_BYTES;
  if (ok) memcpy(hex, rep[0].body, sizeof hex);
  replies_free(rep, S.n);
  if (!ok) return dist_error(vm, "%s: rank 0 sent a malformed NCCL unique id", fname);
  st = command(vm, fname, "nccl", hex, 2 * NT_COMM_ID_BYTES, NULL, &rep);
  OPENSSL_cleanse(hex, sizeof hex);
  if (st) return NB_ERR;
  replies_free(rep, S.n);
  return NB_OK;
}

static int session_start_(nb_VM *vm, int n, const LaunchOpts *o) {
  if (S.active) return dist_error(vm, "dist.start: workers are already running (%d); call dist.stop() first", S.n);
  if (n < 1 || n > 1024) return dist_error(vm, "dist.start: n must be between 1 and 1024, got %d", n);
  int ssh = !strcmp(o->launcher, "ssh"), slurm = !strcmp(o->launcher, "slurm");
  if (!ssh && !slurm && strcmp(o->launcher, "local") != 0)
    return dist_error(vm, "dist.start: launcher \"%s\" is not available (\"local\", \"ssh\" with hosts=[...], or \"slurm\" inside an allocation)", o->launcher);
  if (ssh && o->nhosts < 1)
    return dist_error(vm, "dist.start: launcher \"ssh\" is not available without hosts=[...] (the hosts to start the workers on; ranks are placed in blocks when there are fewer hosts than workers)");
  if (strcmp(o->backend, "ring") && strcmp(o->backend, "nccl") && strcmp(o->backend, "auto"))
    return dist_error(vm, "dist.start: unknown backend \"%s\" (expected \"auto\", \"ring\" or \"nccl\")", o->backend);
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
  for (int i = 0; ssh && i < o->nhosts; i++) if (!dl_is_loopback(o->hosts[i])) all_loop = 0;
  snprintf(S.bind, sizeof S.bind, "%s", o->bind[0] ? o->bind : all_loop ? "127.0.0.1" : "0.0.0.0");
  S.w = calloc((size_t)n, sizeof *S.w);
  S.nproc = slurm ? 1 : n;
  S.proc = calloc((size_t)S.nproc, sizeof *S.proc);
  if (!S.w || !S.proc) { free(S.w); free(S.proc); S.w = NULL; S.proc = NULL; S.n = 0; S.nproc = 0; return nb_error(vm, "out of memory"); }
  for (int i = 0; i < n; i++) {
    for (int s = 0; s < 3; s++) S.w[i].line_start[s] = 1;
    S.w[i].proc = slurm ? 0 : i;
    if (ssh) snprintf(S.w[i].host, sizeof S.w[i].host, "%s", o->hosts[(int)((long)i * o->nhosts / n)]);
    else if (!slurm) gethostname(S.w[i].host, sizeof S.w[i].host - 1);
  }
  if (RAND_bytes(S.key, sizeof S.key) != 1) { session_teardown_(); return dist_error(vm, "dist.start: no random bytes for the session key"); }
  {
    /* stop the workers at exit; registered after OpenSSL's own exit handler
    ** (which RAND_bytes and a first HMAC install) so it runs before it */
    static int registered;
    unsigned char mac[32]; const void *p[1] = { "" }; size_t l[1] = { 0 };
    dp_hmac(S.key, p, l, 1, mac);
    if (!registered) { registered = 1; atexit(at_exit_stop); }
  }
  char hex[2 * DP_KEYLEN + 2]; dp_hex(S.key, DP_KEYLEN, hex); strcat(hex, "\n");
  if (!S.remote) {
    /* the key file: 0600, in $XDG_RUNTIME_DIR or $TMPDIR or /tmp */
    const char *dir = getenv("XDG_RUNTIME_DIR");
    if (!dir || access(dir, W_OK)) dir = getenv("TMPDIR");
    if (!dir || access(dir, W_OK)) dir = "/tmp";
    snprintf(S.keyfile, sizeof S.keyfile, "%s/nabla-dist-key-XXXXXX", dir);
    mode_t old = umask(077);
    int fd = mkstemp(S.keyfile);
    umask(old);
    if (fd < 0) { OPENSSL_cleanse(hex, sizeof hex); S.keyfile[0] = 0; session_teardown_(); return dist_error(vm, "dist.start: cannot create the key file: %s", strerror(errno)); }
    fchmod(fd, 0600);
    ssize_t wr = write(fd, hex, strlen(hex));
    close(fd);
    if (wr < 0) { OPENSSL_cleanse(hex, sizeof hex); session_teardown_(); return dist_error(vm, "dist.start: cannot write the key file"); }
  }
  S.ctx = zmq_ctx_new();
  S.router = zmq_socket(S.ctx, ZMQ_ROUTER);
  int zero = 0;
  zmq_setsockopt(S.router, ZMQ_LINGER, &zero, sizeof zero);
  /* a connection never takes over another's identity (ZMQ_ROUTER_HANDOVER
  ** stays off), and no frame bigger than DP_MAX_FRAME is buffered */
  dp_limit_socket(S.router);
  if (dp_curve_server(S.router, S.key)) { OPENSSL_cleanse(hex, sizeof hex); session_teardown_(); return dist_error(vm, "dist.start: this ZeroMQ has no CURVE security (libzmq built without libsodium)"); }
  if (zmq_socket_monitor(S.router, "inproc://nabla-session-monitor", ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0) {
    S.mon = zmq_socket(S.ctx, ZMQ_PAIR);
    if (S.mon) { zmq_setsockopt(S.mon, ZMQ_LINGER, &zero, sizeof zero); zmq_connect(S.mon, "inproc://nabla-session-monitor"); }
  }
  char ep[160]; snprintf(ep, sizeof ep, "tcp://%s:*", S.bind);
  if (zmq_bind(S.router, ep) != 0) { int e = errno; OPENSSL_cleanse(hex, sizeof hex); session_teardown_(); return dist_error(vm, "dist.start: cannot listen on %s: %s", ep, zmq_strerror(e)); }
  size_t el = sizeof S.endpoint;
  zmq_getsockopt(S.router, ZMQ_LAST_ENDPOINT, S.endpoint, &el);
  const char *pc = strrchr(S.endpoint, ':');
  int port = pc ? atoi(pc + 1) : 0;
  char exe[PATH_MAX]; ssize_t xl = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (xl <= 0) { OPENSSL_cleanse(hex, sizeof hex); session_teardown_(); return dist_error(vm, "dist.start: cannot find the nabla executable"); }
  exe[xl] = 0;
  dl_Common c = { .exe = o->remote_nabla ? o->remote_nabla : exe, .key_hex = hex, .world = n, .timeout_ms = S.timeout_ms,
                  .heartbeat_s = S.hb_ms / 1e3, .worker_bind = "auto" };
  int spawn_failed = 0;
  if (slurm) {
    /* where the tasks reach this session: the bind address, or this host's address */
    char addr[80];
    if (strcmp(S.bind, "0.0.0.0") != 0) snprintf(addr, sizeof addr, "%s", S.bind); else dl_self_addr(addr, sizeof addr);
    snprintf(S.endpoint, sizeof S.endpoint, "tcp://%s:%d", addr, port);
    S.proc[0].pid = dl_spawn_srun(&c, o->nodes, o->gpus_per_node, S.endpoint);
    spawn_failed = S.proc[0].pid < 0;
  } else if (ssh) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN); if (cpus < 1) cpus = 1;
    char first[128] = "";
    for (int i = 0; i < n && !spawn_failed; i++) {
      int lrank = 0, here = 0;
      for (int j = 0; j < n; j++) if (!strcmp(S.w[j].host, S.w[i].host)) { here++; if (j < i) lrank++; }
      c.threads = getenv("OMP_NUM_THREADS") ? 0 : (int)(cpus / here > 0 ? cpus / here : 1);
      char addr[80], wep[128];
      if (strcmp(S.bind, "0.0.0.0") != 0) snprintf(addr, sizeof addr, "%s", S.bind);
      else if (dl_route_addr(S.w[i].host, addr, sizeof addr)) { spawn_failed = 1; snprintf(c.err, sizeof c.err, "cannot find a route to host %s", S.w[i].host); break; }
      snprintf(wep, sizeof wep, "tcp://%s:%d", addr, port);
      if (!first[0]) snprintf(first, sizeof first, "%s", wep);
      S.proc[i].pid = dl_spawn_ssh(&c, S.w[i].host, o->ssh_port, o->ssh_key, o->ssh_opts, o->nssh_opts, wep, i, lrank);
      spawn_failed = S.proc[i].pid < 0;
    }
    if (first[0]) snprintf(S.endpoint, sizeof S.endpoint, "%s", first);
  } else {
    for (int i = 0; i < n && !spawn_failed; i++) {
      S.w[i].pid = S.proc[i].pid = spawn_local(i, exe);
      spawn_failed = S.proc[i].pid < 0;
      if (spawn_failed) snprintf(c.err, sizeof c.err, "fork failed: %s", strerror(errno));
    }
  }
  OPENSSL_cleanse(hex, sizeof hex);
  if (spawn_failed) { char why[512]; snprintf(why, sizeof why, "%s", c.err); session_teardown_(); return dist_error(vm, "dist.start: %s", why); }
  S.active = 1;
  if (pthread_create(&S.reaper, NULL, reaper_main, NULL) == 0) S.reaper_on = 1;
  /* hellos */
  double t0 = now_s(), limit = slurm ? 120 : ssh ? 60 : 30;
  for (;;) {
    int have = 0, dead = -1;
    for (int i = 0; i < n; i++) { have += S.w[i].hello; if (S.w[i].dead && dead < 0) dead = i; }
    if (have == n) break;
    if (dead >= 0) {
      char why[256]; snprintf(why, sizeof why, "%s", S.w[dead].why);
      const char *d = strncmp(why, "died: ", 6) ? why : why + 6;
      session_teardown_();
      return dist_error(vm, "dist.start: worker rank %d exited before connecting (%s)", dead, d);
    }
    if (vm && nb_vm_interrupted(vm)) { session_teardown_(); return nb_error_kind(vm, "Interrupted", "interrupted"); }
    if (now_s() - t0 > limit) { session_teardown_(); return dist_error(vm, "dist.start: only %d of %d workers connected within %.0f s", have, n, limit); }
    zmq_pollitem_t it = { S.router, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, 50) > 0) pump_one(vm, 0, NULL);
    ping_due();
  }
  if (S.keyfile[0]) { unlink(S.keyfile); S.keyfile[0] = 0; }   /* every worker has read it */
  /* welcome: rank, world, peers; then wait until the mesh is connected */
  nb_Buf b = {0};
  nbB_printf(&b, "%d %d %u %s\n", n, S.timeout_ms, S.gen, S.backend);
  for (int i = 0; i < n; i++) nbB_printf(&b, "%s\n", S.w[i].addr);
  uint32_t seq = ++S.seq;
  for (int i = 0; i < n; i++) send_to(i, "welcome", seq, b.p, b.n);
  nbB_free(&b);
  Reply *rep = calloc((size_t)n, sizeof *rep);
  int *all = calloc((size_t)n, sizeof(int));
  if (!rep || !all) { free(rep); free(all); session_teardown_(); return nb_error(vm, "out of memory"); }
  for (int i = 0; i < n; i++) all[i] = 1;
  int which, r = wait_replies(vm, seq, all, rep, 90, &which);
  if (r != WR_OK) {
    char why[600] = "";
    if (which >= 0 && rep[which].body) snprintf(why, sizeof why, ": %s", rep[which].body);
    replies_free(rep, n); free(all);
    session_teardown_();
    return dist_error(vm, "dist.start: the workers could not form the collective group (rank %d%s)", which, why);
  }
  char why[700];
  int use_nccl = choose_backend(rep, why, sizeof why);
  replies_free(rep, n); free(all);
  if (!use_nccl && !strcmp(S.backend, "nccl")) { session_teardown_(); return dist_error(vm, "dist.start: %s", why); }
  snprintf(S.backend_used, sizeof S.backend_used, "%s", use_nccl ? "nccl" : "ring");
  snprintf(S.backend_why, sizeof S.backend_why, "%s", use_nccl ? "" : why);
  if (use_nccl && nccl_setup(vm, "dist.start")) { session_teardown_(); return NB_ERR; }   /* the error is raised already */
  return NB_OK;
}
static int session_start(nb_VM *vm, int n, const LaunchOpts *o) {
  pthread_mutex_lock(&S_mu);
  int st = session_start_(vm, n, o);
  pthread_mutex_unlock(&S_mu);
  return st;
}

static int need_session(nb_VM *vm, const char *fname) {
  if (!S.active) return dist_error(vm, "%s: no workers are running (call dist.start(n) first)", fname);
  if (S.broken) return dist_error(vm, "%s: the worker group lost a worker; call dist.restart() (or dist.stop())", fname);
  for (int i = 0; i < S.n; i++) if (S.w[i].dead) {
    S.broken = 1;
    char nm[160]; wname(i, nm, sizeof nm);
    return dist_error(vm, "%s: worker rank %d (%s) is dead (%s); call dist.restart()", fname, i, nm, S.w[i].why);
  }
  return NB_OK;
}

/* Sends a command to the targets (NULL = all) and waits.  On success rep
** holds every target's reply (the caller frees it); otherwise an error is raised. */
static int reconnect(nb_VM *vm) {
  S.need_reconnect = 0;
  S.gen++;
  char body[32]; int bn = snprintf(body, sizeof body, "%u", S.gen);
  Reply *rep;
  if (command(vm, "dist", "reconnect", body, (size_t)bn, NULL, &rep)) { S.broken = 1; return NB_ERR; }
  replies_free(rep, S.n);
  /* the workers aborted their NCCL communicators: a fresh one (new id) */
  if (!strcmp(S.backend_used, "nccl") && nccl_setup(vm, "dist (reconnecting NCCL)")) { S.broken = 1; return NB_ERR; }
  return NB_OK;
}

static int command_(nb_VM *vm, const char *fname, const char *type, const void *body, size_t len, const int *targets_in, Reply **out) {
  *out = NULL;
  if (need_session(vm, fname)) return NB_ERR;
  if (S.need_reconnect && strcmp(type, "reconnect") != 0 && reconnect(vm)) return NB_ERR;
  int n = S.n;
  int *targets = malloc(sizeof(int) * (size_t)n);
  Reply *rep = calloc((size_t)n, sizeof *rep);
  if (!targets || !rep) { free(targets); free(rep); return nb_error(vm, "out of memory"); }
  for (int i = 0; i < n; i++) targets[i] = targets_in ? targets_in[i] : 1;
  uint32_t seq = ++S.seq;
  if (len > DP_MAX_MSG) { free(targets); free(rep); return dist_error(vm, "%s: the command is %zu bytes, over the control channel's limit of %zu", fname, len, (size_t)DP_MAX_MSG); }
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
      nfail++;
      prefixed_report(vm, i, report);
    }
    if (r == WR_INTERRUPTED) { replies_free(rep, n); free(targets); return nb_error_kind(vm, "Interrupted", "interrupted (the workers were interrupted too)"); }
    const char *name = rep[which].body ? rep[which].body : "Error";
    const char *msg = rep[which].body ? name + strlen(name) + 1 : "";
    if (msg > rep[which].body + rep[which].len) msg = "";
    char m[1024]; snprintf(m, sizeof m, "%s", msg);
    char nm[64]; snprintf(nm, sizeof nm, "%s", name);
    replies_free(rep, n); free(targets);
    if (nfail > 1) return dist_error(vm, "%s failed on rank %d: %s: %s (and on %d other rank%s; reports above)", fname, which, nm, m, nfail - 1, nfail > 2 ? "s" : "");
    return dist_error(vm, "%s failed on rank %d: %s: %s", fname, which, nm, m);
  }
  if (r == WR_DEAD) {
    S.broken = 1;
    char nm[160]; wname(which, nm, sizeof nm);
    replies_free(rep, n); free(targets);
    return dist_error(vm, "%s: worker rank %d (%s) %s; the other ranks were stopped; call dist.restart()", fname, which, nm, S.w[which].why);
  }
  if (r == WR_TIMEOUT) { replies_free(rep, n); free(targets); return dist_error(vm, "%s: timed out", fname); }
  free(targets);
  *out = rep;
  return NB_OK;
}

static int command(nb_VM *vm, const char *fname, const char *type, const void *body, size_t len, const int *targets_in, Reply **out) {
  pthread_mutex_lock(&S_mu);
  int st = command_(vm, fname, type, body, len, targets_in, out);
  pthread_mutex_unlock(&S_mu);
  return st;
}

/* ---- builtins (session) ---- */
static int arg_str(nb_VM *vm, const char *f, const char *what, nb_Value v, const char **s) {
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: %s must be a string, got %s", f, what, nb_typename(v));
  *s = nb_str(v)->data;
  return NB_OK;
}

static struct { int n; LaunchOpts o; } last_start;

/* a list of strings (or one string: split at spaces, for ssh_options) */
static int arg_strlist(nb_VM *vm, const char *f, const char *what, nb_Value v, int split, char ***out, int *nout) {
  *out = NULL; *nout = 0;
  if (v.t == NB_TNIL) return NB_OK;
  if (v.t == NB_TSTR && split) {
    char *copy = strdup(nb_str(v)->data), *save = NULL;
    int cap = 8; char **l = malloc(sizeof(char *) * (size_t)cap);
    for (char *t = strtok_r(copy, " \t", &save); t && l; t = strtok_r(NULL, " \t", &save)) {
      if (*nout == cap) { cap *= 2; char **l2 = realloc(l, sizeof(char *) * (size_t)cap); if (!l2) break; l = l2; }
      l[(*nout)++] = strdup(t);
    }
    free(copy);
    *out = l;
    return NB_OK;
  }
  if (v.t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: %s must be a list of strings, got %s", f, what, nb_typename(v));
  nb_List *l = nb_list(v);
  for (int i = 0; i < l->n; i++)
    if (l->items[i].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: %s must be a list of strings (item %d is a %s)", f, what, i, nb_typename(l->items[i]));
  *out = calloc(l->n > 0 ? (size_t)l->n : 1, sizeof(char *));
  if (!*out) return nb_error(vm, "out of memory");
  for (int i = 0; i < l->n; i++) (*out)[i] = strdup(nb_str(l->items[i])->data);
  *nout = l->n;
  return NB_OK;
}
static int arg_int(nb_VM *vm, const char *f, const char *what, nb_Value v, int *out) {
  if (v.t == NB_TNIL) { *out = 0; return NB_OK; }
  if (v.t != NB_TNUM || v.u.n != (int)v.u.n || v.u.n < 0) return nb_error_kind(vm, "TypeError", "%s: %s must be a non-negative integer", f, what);
  *out = (int)v.u.n;
  return NB_OK;
}

/* dist.start(n, launcher, backend, timeout, bind, hosts, heartbeat, **opts):
** opts are the launchers' settings: ssh_port, ssh_key, ssh_options,
** remote_nabla (ssh); nodes, gpus_per_node (slurm) */
static int b_start(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *f = "dist.start", *launcher = NULL, *backend = NULL, *bind = NULL;
  LaunchOpts o; memset(&o, 0, sizeof o);
  if (a[0].t != NB_TNUM || a[0].u.n != (int)a[0].u.n) return nb_error_kind(vm, "TypeError", "%s: n must be an integer", f);
  if (arg_str(vm, f, "launcher", a[1], &launcher) || arg_str(vm, f, "backend", a[2], &backend)) return NB_ERR;
  if (a[3].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: timeout must be a number of seconds", f);
  if (a[4].t != NB_TNIL && arg_str(vm, f, "bind", a[4], &bind)) return NB_ERR;
  if (a[6].t != NB_TNUM || a[6].u.n < 0) return nb_error_kind(vm, "TypeError", "%s: heartbeat must be a number of seconds (0: none)", f);
  if (nbD_self.rank >= 0) return dist_error(vm, "%s: workers cannot start workers", f);
  if (a[5].t == NB_TSTR) {   /* hosts="a,b" */
    char *copy = strdup(nb_str(a[5])->data), *save = NULL;
    o.hosts = calloc(strlen(copy) + 1, sizeof(char *));
    for (char *t = strtok_r(copy, ", ", &save); t && o.hosts; t = strtok_r(NULL, ", ", &save)) o.hosts[o.nhosts++] = strdup(t);
    free(copy);
  } else if (arg_strlist(vm, f, "hosts", a[5], 0, &o.hosts, &o.nhosts)) return NB_ERR;
  if (a[7].t == NB_TREC) {
    nb_Rec *r = nb_rec(a[7]);
    for (int i = 0; i < r->n; i++) {
      const char *k = r->keys[i]->data; nb_Value v = r->vals[i]; const char *sv = NULL; int st = NB_OK;
      if (!strcmp(k, "ssh_port")) st = arg_int(vm, f, k, v, &o.ssh_port);
      else if (!strcmp(k, "nodes")) st = arg_int(vm, f, k, v, &o.nodes);
      else if (!strcmp(k, "gpus_per_node")) st = arg_int(vm, f, k, v, &o.gpus_per_node);
      else if (!strcmp(k, "ssh_key")) { if (v.t != NB_TNIL && !(st = arg_str(vm, f, k, v, &sv))) { free(o.ssh_key); o.ssh_key = strdup(sv); } }
      else if (!strcmp(k, "remote_nabla")) { if (v.t != NB_TNIL && !(st = arg_str(vm, f, k, v, &sv))) { free(o.remote_nabla); o.remote_nabla = strdup(sv); } }
      else if (!strcmp(k, "ssh_options")) {
        for (int j = 0; j < o.nssh_opts; j++) free(o.ssh_opts[j]);
        free(o.ssh_opts); o.ssh_opts = NULL; o.nssh_opts = 0;
        st = arg_strlist(vm, f, k, v, 1, &o.ssh_opts, &o.nssh_opts);
      } else st = nb_error_kind(vm, "TypeError", "%s: unknown option %s (ssh: ssh_port, ssh_key, ssh_options, remote_nabla; slurm: nodes, gpus_per_node)", f, k);
      if (st) { opts_free(&o); return NB_ERR; }
    }
  }
  snprintf(o.launcher, sizeof o.launcher, "%s", launcher);
  snprintf(o.backend, sizeof o.backend, "%s", backend);
  snprintf(o.bind, sizeof o.bind, "%s", bind ? bind : "");
  o.timeout = a[3].u.n; o.heartbeat = a[6].u.n;
  int st = session_start(vm, (int)a[0].u.n, &o);
  if (!st) { last_start.n = (int)a[0].u.n; opts_copy(&last_start.o, &o); }
  opts_free(&o);
  if (st) return NB_ERR;
  *out = nb_nil();
  return NB_OK;
}
static int b_stop(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  if (S.active) session_teardown();
  *out = nb_nil();
  return NB_OK;
}
static int b_restart(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)a; (void)nargs;
  if (!last_start.n) return dist_error(vm, "dist.restart: dist.start was never called");
  if (S.active) session_teardown();
  if (session_start(vm, last_start.n, &last_start.o)) return NB_ERR;
  *out = nb_nil();
  return NB_OK;
}
static int b_exec(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *code = NULL;
  if (arg_str(vm, "dist.exec", "code", a[0], &code)) return NB_ERR;
  Reply *rep;
  if (command(vm, "dist.exec", "exec", code, nb_str(a[0])->len, NULL, &rep)) return NB_ERR;
  replies_free(rep, S.n);
  *out = nb_nil();
  return NB_OK;
}
/* replies carrying serialized values -> a list per rank (or rank's value) */
static int values_of(nb_VM *vm, Reply *rep, const int *targets, int single, nb_Value *out) {
  nb_List *l = nbL_new(S.n);
  for (int i = 0; i < S.n; i++) {
    if (targets && !targets[i]) continue;
    nb_Value v;
    if (nbZ_deserialize(vm, rep[i].body, rep[i].len, &v)) { nb_decref(nb_obj(NB_TLIST, l)); replies_free(rep, S.n); return NB_ERR; }
    if (single) { nb_decref(nb_obj(NB_TLIST, l)); replies_free(rep, S.n); *out = v; return NB_OK; }
    nbL_push(l, v);
  }
  replies_free(rep, S.n);
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_run(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  if (nargs < 1) return nb_error_kind(vm, "TypeError", "dist.run(fn, args...): missing the function");
  nb_List *l = nbL_new(nargs);
  for (int i = 0; i < nargs; i++) { nb_incref(a[i]); nbL_push(l, a[i]); }
  nb_Value lv = nb_obj(NB_TLIST, l);
  nb_Buf b = {0};
  int st = nbZ_serialize(vm, lv, &b);
  nb_decref(lv);
  if (st) { nbB_free(&b); return NB_ERR; }
  Reply *rep;
  st = command(vm, "dist.run", "call", b.p, b.n, NULL, &rep);
  nbB_free(&b);
  if (st) return NB_ERR;
  return values_of(vm, rep, NULL, 0, out);
}
static int set_globals(nb_VM *vm, const char *f, nb_Value rec, const int *targets) {
  nb_Buf b = {0};
  if (nbZ_serialize(vm, rec, &b)) { nbB_free(&b); return NB_ERR; }
  Reply *rep;
  int st = command(vm, f, "set", b.p, b.n, targets, &rep);
  nbB_free(&b);
  if (!st) replies_free(rep, S.n);
  return st;
}
/* dist.push(w=w, lr=0.1) or dist.push({w: w, lr: 0.1}) */
static int b_push(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  nb_Value vars = a[0].t == NB_TNIL ? a[1] : a[0];
  if (vars.t != NB_TREC) return nb_error_kind(vm, "TypeError", "dist.push: expected name=value keywords or a record, got %s", nb_typename(vars));
  if (a[0].t != NB_TNIL && nb_rec(a[1])->n) return nb_error_kind(vm, "TypeError", "dist.push: give either a record or keywords, not both");
  if (set_globals(vm, "dist.push", vars, NULL)) return NB_ERR;
  *out = nb_nil();
  return NB_OK;
}
static int b_pull(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *expr = NULL;
  if (arg_str(vm, "dist.pull", "expr", a[0], &expr)) return NB_ERR;
  if (!S.active) return need_session(vm, "dist.pull");
  int all = a[1].t == NB_TSTR && !strcmp(nb_str(a[1])->data, "all");
  if (!all && (a[1].t != NB_TNUM || a[1].u.n < 0 || a[1].u.n >= S.n || a[1].u.n != (int)a[1].u.n))
    return nb_error_kind(vm, "ValueError", "dist.pull: rank must be an integer in 0..%d or \"all\"", S.n - 1);
  int *targets = calloc((size_t)S.n, sizeof(int));
  if (!targets) return nb_error(vm, "out of memory");
  for (int i = 0; i < S.n; i++) targets[i] = all || i == (int)a[1].u.n;
  Reply *rep;
  if (command(vm, "dist.pull", "eval", expr, nb_str(a[0])->len, targets, &rep)) { free(targets); return NB_ERR; }
  int st = values_of(vm, rep, targets, !all, out);
  free(targets);
  return st;
}
static int b_scatter(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *name = NULL, *f = "dist.scatter";
  if (arg_str(vm, f, "name", a[0], &name)) return NB_ERR;
  if (a[1].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor, got %s", f, nb_typename(a[1]));
  if (need_session(vm, f)) return NB_ERR;
  nt_Tensor *t = (nt_Tensor *)a[1].u.p;
  if (t->ndim == 0) return nb_error_kind(vm, "ValueError", "%s: the tensor needs a first axis to split", f);
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)S.n);
  int *targets = calloc((size_t)S.n, sizeof(int));
  if (!rows || !targets) { free(rows); free(targets); return nb_error(vm, "out of memory"); }
  nbD_split_rows(t->shape[0], S.n, rows);
  int64_t off = 0; int st = NB_OK;
  for (int i = 0; i < S.n && !st; i++) {
    nt_Tensor *part = nt_narrow(t, 0, off, rows[i]);
    off += rows[i];
    if (!part) { st = nb_error_kind(vm, "TensorError", "%s: %s", f, nt_error_msg()); break; }
    nb_Rec *r = nbR_new(1);
    nbR_set_cstr(r, name, nb_obj(NB_TTENSOR, part));
    memset(targets, 0, sizeof(int) * (size_t)S.n); targets[i] = 1;
    nb_Value rv = nb_obj(NB_TREC, r);
    st = set_globals(vm, f, rv, targets);
    nb_decref(rv);
  }
  free(rows); free(targets);
  if (st) return NB_ERR;
  *out = nb_nil();
  return NB_OK;
}
static int b_gather(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *expr = NULL, *f = "dist.gather";
  if (arg_str(vm, f, "expr", a[0], &expr)) return NB_ERR;
  Reply *rep;
  if (command(vm, f, "eval", expr, nb_str(a[0])->len, NULL, &rep)) return NB_ERR;
  nb_Value lv;
  if (values_of(vm, rep, NULL, 0, &lv)) return NB_ERR;
  nb_List *l = nb_list(lv);
  nt_Tensor **ts = malloc(sizeof *ts * (size_t)(l->n ? l->n : 1));
  if (!ts) { nb_decref(lv); return nb_error(vm, "out of memory"); }
  for (int i = 0; i < l->n; i++) {
    if (l->items[i].t != NB_TTENSOR) { free(ts); int st = nb_error_kind(vm, "TypeError", "%s: rank %d's value is a %s, not a tensor", f, i, nb_typename(l->items[i])); nb_decref(lv); return st; }
    ts[i] = (nt_Tensor *)l->items[i].u.p;
  }
  nt_Tensor *y = nt_concat(ts, l->n, 0);
  free(ts); nb_decref(lv);
  if (!y) return nb_error_kind(vm, "TensorError", "%s: %s", f, nt_error_msg());
  *out = nb_obj(NB_TTENSOR, y);
  return NB_OK;
}
static int b_workers(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  nb_List *l = nbL_new(S.n);
  for (int i = 0; i < S.n; i++) {
    nb_Rec *r = nbR_new(4);
    nbR_set_cstr(r, "rank", nb_int(i));
    nbR_set_cstr(r, "pid", nb_int(S.w[i].pid));
    nbR_set_cstr(r, "host", nb_strv(nbS_cstr(S.w[i].host)));
    nbR_set_cstr(r, "alive", nb_bool(!S.w[i].dead));
    nbL_push(l, nb_obj(NB_TREC, r));
  }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_info(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  nb_Rec *r = nbR_new(4);
  if (nbD_self.rank >= 0 && nbD_self.g) {
    nbR_set_cstr(r, "rank", nb_int(nbD_self.rank));
    nbR_set_cstr(r, "world", nb_int(nbD_self.world));
    nbR_set_cstr(r, "backend", nb_strv(nbS_cstr(dn_on(nbD_self.g) ? "nccl" : "ring")));
  } else if (S.active) {
    nbR_set_cstr(r, "size", nb_int(S.n));
    nbR_set_cstr(r, "backend", nb_strv(nbS_cstr(S.backend_used)));
    nbR_set_cstr(r, "requested", nb_strv(nbS_cstr(S.backend)));
    nbR_set_cstr(r, "reason", S.backend_why[0] ? nb_strv(nbS_cstr(S.backend_why)) : nb_nil());
  } else { nb_decref(nb_obj(NB_TREC, r)); *out = nb_nil(); return NB_OK; }
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_endpoint(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  *out = S.active ? nb_strv(nbS_cstr(S.endpoint)) : nb_nil();
  return NB_OK;
}
static int b_size(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  *out = S.active ? nb_int(S.n) : nb_nil();
  return NB_OK;
}

static nb_Builtin session_builtins[] = {
  { "dist_start", b_start, "n, launcher=\"local\", backend=\"auto\", timeout=300, bind=nil, hosts=nil, heartbeat=10, **opts",
    "dist.start(n, launcher=\"local\", backend=\"auto\", timeout=300, ...): starts n worker processes connected to this session (launcher \"ssh\" with hosts=[...], or \"slurm\"); "
    "backend \"nccl\" runs collectives of CUDA tensors on NCCL (one GPU per worker), \"ring\" over TCP/shared memory, \"auto\" picks nccl when every worker has its own GPU and NCCL loads" },
  { "dist_info", b_info, "", "dist.info(): {size, backend, reason, nccl} in the session (backend: \"ring\" or \"nccl\"; reason: why auto chose the ring); {rank, world, backend} on a worker; nil elsewhere" },
  { "dist_stop", b_stop, "", "dist.stop(): shuts the workers down" },
  { "dist_restart", b_restart, "", "dist.restart(): stops whatever is left of the workers and starts fresh ones with the same settings (their globals are lost)" },
  { "dist_exec", b_exec, "code", "dist.exec(code): runs source on every worker; their output is shown prefixed [rank N]" },
  { "dist_run", b_run, "*args", "dist.run(fn, args...): calls fn(args...) on every worker; the list of results by rank" },
  { "dist_push", b_push, "vars=nil, **kw", "dist.push(name=value, ...) or dist.push({name: value}): sets globals on every worker" },
  { "dist_pull", b_pull, "expr, rank=0", "dist.pull(expr, rank=0): the value of expr (source text) on one worker (rank=\"all\": a list by rank)" },
  { "dist_scatter", b_scatter, "name, x", "dist.scatter(name, x): splits tensor x along its first axis; worker r gets part r as global name" },
  { "dist_gather", b_gather, "expr", "dist.gather(expr): the tensors expr gives on every worker, concatenated along the first axis" },
  { "dist_workers", b_workers, "", "dist.workers(): [{rank, pid, host, alive}] of the running workers" },
  { "dist_endpoint", b_endpoint, "", "dist.endpoint(): the session's control address (nil when no workers)" },
  { "dist_size", b_size, "", "dist.size(): the number of workers this session runs (nil when none)" },
  { NULL, NULL, NULL, NULL },
};


void nbD_init(void) {
  static int done;
  if (done) return;
  done = 1;
  nbC_register(session_builtins);
  nbD_coll_init();
}

/* ================================================================ worker */
/*
** Two threads.  The main thread runs the VM: it takes commands from an
** inproc PAIR socket and sends its output and replies back on it.  The I/O
** thread owns the DEALER connection to the session: it forwards commands to
** the main thread and outgoing messages to the session, and itself handles
** what must work while the VM is busy: `interrupt` (interrupts the VM if it
** is still running that command), heartbeats both ways (a `ping` every
** second or so naming the command and collective in progress; no message
** from the session for --heartbeat seconds, or its connection closing, ends
** the process), and a `stop` the busy VM does not get to.
*/
typedef struct WState {
  void *ctx, *dealer, *mon;
  void *pipe_main, *pipe_io;   /* inproc PAIR: main thread <-> I/O thread */
  unsigned char key[DP_KEYLEN];
  int rank;
  uint32_t seq;          /* of the command being run (output is tagged with it) */
  nb_VM *vm;
  dr_Group g;
  char **addrs;
  pthread_t io; int io_on;
  uint32_t busy_seq;       /* the command the VM runs now (0: idle); atomic */
  uint32_t intr_seq;       /* the last command the session asked to interrupt; atomic */
  const char *busy_type;   /* its type ("exec", ...); atomic */
  double hb_s;             /* the session's heartbeat timeout (0: none) */
  int main_done;           /* atomic: the main loop has ended */
  uint64_t ctr;            /* counter of the messages sent to the session (the I/O thread's, after `hi`) */
  uint64_t rctr;           /* the session's last counter: a lower or equal one is a replay */
  char hello[512];         /* the hello's body, sent with the session's challenge */
  int hello_sent;
} WState;
static WState W;


static void wsink_write(nb_Sink *s, int stream, const char *data, size_t len) {
  (void)s;
  char *b = malloc(len + 1);
  if (!b) return;
  b[0] = stream == NB_STDERR ? '2' : '1';
  memcpy(b + 1, data, len);
  dp_send(W.pipe_main, NULL, NULL, 0, "stream", W.seq, W.rank, 0, b, len + 1);
  free(b);
}
static void wsink_display(nb_Sink *s, const nb_MimeItem *items, int n, const char *id, int update) {
  (void)n; (void)id; (void)update;
  wsink_write(s, NB_STDOUT, items[0].data, items[0].len);
  wsink_write(s, NB_STDOUT, "\n", 1);
}
static char *wsink_input(nb_Sink *s, const char *prompt, int password) { (void)s; (void)prompt; (void)password; return NULL; }
static nb_Sink wsink = { wsink_write, wsink_display, NULL, wsink_input, NULL };

static void on_sigint(int sig) { (void)sig; if (W.vm) nb_vm_interrupt(W.vm); }

/* clears the VM's interrupt flag for a new command, unless the session
** already asked to interrupt it (the request can arrive before the command
** starts: the I/O thread records it, see wio_incoming) */
static void arm(void) {
  nb_vm_clear_interrupt(W.vm);
  uint32_t busy = __atomic_load_n(&W.busy_seq, __ATOMIC_SEQ_CST);
  if (busy && __atomic_load_n(&W.intr_seq, __ATOMIC_SEQ_CST) == busy) nb_vm_interrupt(W.vm);
}

static void reply_err(uint32_t seq, const char *name, const char *msg, const char *report);
/* every command gets a reply: a result that cannot be sent becomes an error */
static void reply_ok(uint32_t seq, const char *data, size_t len) {
  char *b = len < DP_MAX_MSG ? malloc(len + 1) : NULL;
  int sent = 0;
  if (b) {
    b[0] = '0';
    if (len) memcpy(b + 1, data, len);
    sent = dp_send(W.pipe_main, NULL, NULL, 0, "reply", seq, W.rank, 0, b, len + 1) == 0;
    free(b);
  }
  if (!sent) {
    char msg[160];
    snprintf(msg, sizeof msg, "the result (%zu bytes) cannot be sent: %s", len, len >= DP_MAX_MSG ? "over the control channel's limit" : "out of memory");
    reply_err(seq, "DistError", msg, msg);
  }
}
static void reply_err(uint32_t seq, const char *name, const char *msg, const char *report) {
  nb_Buf b = {0};
  nbB_putc(&b, '1');
  nbB_add(&b, name, strlen(name)); nbB_putc(&b, 0);
  nbB_add(&b, msg, strlen(msg)); nbB_putc(&b, 0);
  nbB_add(&b, report, strlen(report));
  dp_send(W.pipe_main, NULL, NULL, 0, "reply", seq, W.rank, 0, b.p, b.n);
  nbB_free(&b);
}
static void reply_last_error(uint32_t seq) {
  const nb_ErrorInfo *e = nb_last_error(W.vm);
  if (e) reply_err(seq, e->name ? e->name : "Error", e->message ? e->message : "", e->report ? e->report : "");
  else reply_err(seq, "Error", "failed", "failed");
}

/* runs src; 0 ok, else the error was replied */
static int wrun(uint32_t seq, const char *src, size_t len, const char *name) {
  arm();
  int st = nb_run(W.vm, src, len, name, 0);
  if (st) { reply_last_error(seq); return -1; }
  return 0;
}

static nb_Value take_global(const char *name) {
  int i = nb_global_find(W.vm, name, strlen(name));
  if (i < 0) return nb_nil();
  nb_Value v = *nb_global_at(W.vm, i);
  *nb_global_at(W.vm, i) = nb_undef();
  return v.t == NB_TUNDEF ? nb_nil() : v;
}
static void set_global(const char *name, size_t len, nb_Value v) {
  nb_Str *s = nbS_intern(name, len);
  int i = nb_global_slot(W.vm, s);
  nb_decref(nb_strv(s));
  nb_store(nb_global_at(W.vm, i), v);
}

static void reply_value(uint32_t seq, nb_Value v) {
  nb_Buf b = {0};
  if (nbZ_serialize(W.vm, v, &b)) {
    nbE_finish(W.vm);
    reply_last_error(seq);
  } else reply_ok(seq, b.p ? b.p : "", b.n);
  nbB_free(&b);
}

/* (re)connects the TCP mesh; after `welcome` the reply also says whether
** this worker can run NCCL (unless the session asked for the ring) */
static int connect_mesh(uint32_t seq, const char *backend) {
  dn_close(&W.g);   /* a reconnect replaces the NCCL communicators too */
  if (dr_connect(&W.g, W.addrs)) { reply_err(seq, "DistError", W.g.err, W.g.err); return -1; }
  char body[800] = "", info[700];
  if (backend && strcmp(backend, "ring") != 0) {
    int ok = dn_probe(info, sizeof info);
    snprintf(body, sizeof body, "%s %s", ok ? "nccl" : "ring", info);
  }
  reply_ok(seq, body, strlen(body));
  return 0;
}

static void handle(dp_Msg *m) {
  uint32_t seq = m->seq;
  W.seq = seq;
  if (!strcmp(m->type, "welcome")) {
    dp_Welcome wl;
    if (W.addrs || dp_parse_welcome(m->body, m->len, W.g.world, &wl)) { reply_err(seq, "DistError", "bad welcome", "bad welcome"); return; }
    W.g.timeout_ms = wl.timeout_ms; W.g.gen = wl.gen;
    W.addrs = wl.addrs;   /* taken over */
    arm();
    connect_mesh(seq, wl.backend);
  } else if (!strcmp(m->type, "reconnect")) {
    W.g.gen = (uint32_t)strtoul(m->body, NULL, 10);
    arm();
    connect_mesh(seq, NULL);
  } else if (!strcmp(m->type, "ncclid")) {
    unsigned char id[NT_COMM_ID_BYTES]; char hex[2 * NT_COMM_ID_BYTES + 2];
    if (nt_cuda_comm_unique_id(id)) { reply_err(seq, "DistError", nt_error_msg(), nt_error_msg()); return; }
    dp_hex(id, sizeof id, hex);
    reply_ok(seq, hex, 2 * NT_COMM_ID_BYTES);
    OPENSSL_cleanse(id, sizeof id); OPENSSL_cleanse(hex, sizeof hex);
  } else if (!strcmp(m->type, "nccl")) {
    unsigned char id[NT_COMM_ID_BYTES];
    arm();
    if (m->len != 2 * NT_COMM_ID_BYTES || dp_unhex(m->body, id, sizeof id) != 0) { reply_err(seq, "DistError", "bad NCCL id", "bad NCCL id"); return; }
    int st = dn_world_init(&W.g, id);
    OPENSSL_cleanse(id, sizeof id);
    if (st) {
      char msg[700]; snprintf(msg, sizeof msg, "%s", W.g.err);
      W.g.broken = 0;   /* the TCP mesh is fine; the session reports this and stops */
      reply_err(seq, nb_vm_interrupted(W.vm) ? "Interrupted" : "DistError", msg, msg);
    } else reply_ok(seq, NULL, 0);
  } else if (!strcmp(m->type, "exec")) {
    if (!wrun(seq, m->body, m->len, "<dist>")) reply_ok(seq, NULL, 0);
  } else if (!strcmp(m->type, "eval")) {
    nb_Buf src = {0};
    nbB_puts(&src, "__dist_ret__ = (");
    nbB_add(&src, m->body, m->len);
    nbB_puts(&src, "\n)");
    int st = wrun(seq, src.p, src.n, "<dist.pull>");
    nbB_free(&src);
    if (st) return;
    nb_Value v = take_global("__dist_ret__");
    reply_value(seq, v);
    nb_decref(v);
  } else if (!strcmp(m->type, "call")) {
    nb_Value lv;
    arm();
    if (nbZ_deserialize(W.vm, m->body, m->len, &lv)) { nbE_finish(W.vm); reply_last_error(seq); return; }
    if (lv.t != NB_TLIST || nb_list(lv)->n < 1) { nb_decref(lv); reply_err(seq, "DistError", "bad call", "bad call"); return; }
    nb_List *l = nb_list(lv);
    /* call through nb_run so the call has a proper top-level frame */
    set_global("__dist_fn__", 11, l->items[0]); nb_incref(l->items[0]);
    nb_List *args = nbL_new(l->n);
    for (int i = 1; i < l->n; i++) { nb_incref(l->items[i]); nbL_push(args, l->items[i]); }
    set_global("__dist_args__", 13, nb_obj(NB_TLIST, args));
    int nargs = l->n - 1;
    nb_decref(lv);
    nb_Buf src = {0};
    nbB_puts(&src, "__dist_ret__ = __dist_fn__(");
    for (int i = 0; i < nargs; i++) nbB_printf(&src, "%s__dist_args__[%d]", i ? ", " : "", i);
    nbB_puts(&src, ")");
    int st = wrun(seq, src.p, src.n, "<dist.run>");
    nbB_free(&src);
    nb_decref(take_global("__dist_fn__")); nb_decref(take_global("__dist_args__"));
    if (st) return;
    nb_Value v = take_global("__dist_ret__");
    reply_value(seq, v);
    nb_decref(v);
  } else if (!strcmp(m->type, "set")) {
    nb_Value rv;
    if (nbZ_deserialize(W.vm, m->body, m->len, &rv)) { nbE_finish(W.vm); reply_last_error(seq); return; }
    if (rv.t == NB_TREC) {
      nb_Rec *r = nb_rec(rv);
      for (int i = 0; i < r->n; i++) { nb_incref(r->vals[i]); set_global(r->keys[i]->data, r->keys[i]->len, r->vals[i]); }
    }
    nb_decref(rv);
    reply_ok(seq, NULL, 0);
  } else if (!strcmp(m->type, "runfile")) {
    /* body: path \0 arg \0 arg ... */
    char *argv[256];
    int argc = dp_split_args(m->body, m->len, argv, 255);
    if (!argc) { reply_err(seq, "DistError", "no script", "no script"); return; }
    nb_vm_set_argv(W.vm, argc, argv);
    char *copy = strdup(argv[0]);
    nb_vm_add_path(W.vm, dirname(copy));
    free(copy);
    arm();
    if (nb_run_file(W.vm, argv[0])) reply_last_error(seq);
    else reply_ok(seq, NULL, 0);
  }
}

static const char *argval(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], name)) return argv[i + 1];
  return def;
}
static int hasarg(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++) if (!strcmp(argv[i], name)) return 1;
  return 0;
}

/* ---- the I/O thread ---- */
/* builds a message for the session with the next counter */
static int to_session(dp_Out *o, const char *type, uint32_t seq, const void *body, size_t len) {
  return dp_build(o, W.key, NULL, 0, type, seq, W.rank, ++W.ctr, body, len);
}

/* what the VM is doing, for heartbeats: "TYPE COLLECTIVE" ("idle -") */
static void op_text(char *out, size_t n) {
  const char *t = __atomic_load_n(&W.busy_type, __ATOMIC_SEQ_CST);
  const char *c = dr_op;
  snprintf(out, n, "%s %s", t ? t : "idle", c ? c : "-");
}

/* a command or control message from the session */
static void wio_incoming(dp_Msg *m, double *stop_at) {
  if (m->ctr <= W.rctr) {
    fprintf(stderr, "nabla worker %d: dropped a replayed control message (counter %llu after %llu)\n", W.rank, (unsigned long long)m->ctr, (unsigned long long)W.rctr);
    return;
  }
  W.rctr = m->ctr;
  if (!strcmp(m->type, "ping")) return;
  if (!strcmp(m->type, "challenge")) {   /* the handshake (see on_hi): hello, echoing it */
    if (W.hello_sent) return;
    char body[700]; int n = snprintf(body, sizeof body, "%s %.150s", W.hello, m->body);
    dp_Out o;
    if (n > 0 && n < (int)sizeof body && !to_session(&o, "hello", 0, body, (size_t)n)) { dp_out_send(&o, W.dealer, 0); W.hello_sent = 1; }
    return;
  }
  if (!strcmp(m->type, "interrupt")) {
    uint32_t seq = (uint32_t)strtoul(m->body, NULL, 10);
    __atomic_store_n(&W.intr_seq, seq, __ATOMIC_SEQ_CST);
    if (seq && __atomic_load_n(&W.busy_seq, __ATOMIC_SEQ_CST) == seq) nb_vm_interrupt(W.vm);
    return;
  }
  if (!strcmp(m->type, "stop") && __atomic_load_n(&W.busy_seq, __ATOMIC_SEQ_CST)) {
    nb_vm_interrupt(W.vm);                  /* stop what it runs; if it does not, exit anyway */
    if (!*stop_at) *stop_at = now_s() + 3.0;
  }
  dp_send(W.pipe_io, NULL, NULL, 0, m->type, m->seq, m->rank, 0, m->body, m->len);
}

static void *wio_main(void *arg) {
  (void)arg;
  dp_Out pend = { NULL, 0 };
  double last_heard = now_s(), last_ping = 0, lost_at = 0, stop_at = 0;
  char last_op[96] = "";
  double ping_every = W.hb_s > 0 ? (W.hb_s / 4 < 1.0 ? W.hb_s / 4 : 1.0) : 1.0;
  int quitting = 0; double quit_at = 0;
  for (;;) {
    zmq_pollitem_t it[3] = { { W.dealer, 0, ZMQ_POLLIN | (pend.n ? ZMQ_POLLOUT : 0), 0 }, { W.mon, 0, ZMQ_POLLIN, 0 },
                             { W.pipe_io, 0, ZMQ_POLLIN, 0 } };
    /* while a message waits for the session, take no more from the main thread */
    int rc = zmq_poll(it, (pend.n || quitting) ? 2 : 3, 100);
    double t = now_s();
    if (rc < 0 && errno != EINTR) break;
    if (pend.n) dp_out_send(&pend, W.dealer, ZMQ_DONTWAIT);
    if (!pend.n && !quitting && (it[2].revents & ZMQ_POLLIN)) {
      for (int k = 0; k < 256 && !pend.n; k++) {
        dp_Msg m;
        if (dp_recv(W.pipe_io, NULL, 0, 1, &m) != 0) break;
        if (!strcmp(m.type, "quit")) { dp_msg_free(&m); quitting = 1; quit_at = t; break; }
        if (!to_session(&pend, m.type, m.seq, m.body, m.len)) dp_out_send(&pend, W.dealer, ZMQ_DONTWAIT);
        dp_msg_free(&m);
      }
    }
    if (quitting && (!pend.n || t - quit_at > 1.0)) break;   /* everything sent (or the session is gone) */
    if (it[0].revents & ZMQ_POLLIN) {
      for (int k = 0; k < 256; k++) {
        dp_Msg m;
        int r = dp_recv(W.dealer, W.key, 0, 1, &m);
        if (r == 1 || r == -1) break;
        if (r < 0) { fprintf(stderr, "nabla worker %d: dropped a control message %s\n", W.rank, r == -3 ? "over the size limit" : "with a bad signature"); continue; }
        last_heard = t;
        if (!lost_at) wio_incoming(&m, &stop_at);
        dp_msg_free(&m);
      }
    }
    /* the session is gone: its connection closed, or it stopped sending heartbeats */
    const char *why = NULL; char whyb[96];
    if (it[1].revents & ZMQ_POLLIN) why = "the session's connection closed";
    else if (W.hb_s > 0 && t - last_heard > W.hb_s) { snprintf(whyb, sizeof whyb, "no heartbeat from the session for %.1f s", t - last_heard); why = whyb; }
    else if (getppid() == 1) why = "orphaned";
    if (why && !lost_at && !quitting) {
      if (it[1].revents & ZMQ_POLLIN) { zmq_msg_t e; zmq_msg_init(&e); while (zmq_msg_recv(&e, W.mon, ZMQ_DONTWAIT) >= 0) {} zmq_msg_close(&e); }
      if (strcmp(why, "the session's connection closed") != 0)
        fprintf(stderr, "nabla worker %d (pid %d): %s; exiting\n", W.rank, (int)getpid(), why);
      lost_at = t;
      nb_vm_interrupt(W.vm);
      dp_send(W.pipe_io, NULL, NULL, 0, "lost", 0, -1, 0, why, strlen(why));
    }
    /* the main thread did not come back to its loop in time: leave without it */
    if ((lost_at && t - lost_at > 3.0) || (stop_at && t > stop_at)) {
      if (!__atomic_load_n(&W.main_done, __ATOMIC_SEQ_CST)) { fflush(stdout); fflush(stderr); _exit(lost_at ? 3 : 0); }
    }
    /* heartbeat: every ping_every seconds, and at once when the op changes */
    if (!lost_at && !quitting) {
      char op[96]; op_text(op, sizeof op);
      if (t - last_ping >= ping_every || strcmp(op, last_op)) {
        if (!pend.n) {
          /* non-blocking: with no session connected a DEALER would block */
          dp_Out p;
          if (!to_session(&p, "ping", 0, op, strlen(op)) && !dp_out_send(&p, W.dealer, ZMQ_DONTWAIT)) dp_out_free(&p);
          last_ping = t;
          snprintf(last_op, sizeof last_op, "%s", op);
        }
      }
    }
  }
  dp_out_free(&pend);
  return NULL;
}

/* how many GPUs this process may use, without loading CUDA: the entries of
** CUDA_VISIBLE_DEVICES when set, else the /dev/nvidiaN device files */
static int visible_gpus(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (v) {
    int n = 0;
    for (const char *p = v; *p; ) {
      size_t len = strcspn(p, ",");
      if (len && strncmp(p, "-1", len) != 0 && strncmp(p, "NoDevFiles", len) != 0) n++;
      else if (len) break;   /* "-1": nothing after it is visible */
      p += len + (p[len] == ',');
    }
    return n;
  }
  int n = 0;
  for (int i = 0; i < 64; i++) {
    char path[32]; snprintf(path, sizeof path, "/dev/nvidia%d", i);
    if (access(path, F_OK) == 0) n++;
  }
  return n;
}

int nbD_worker_main(int argc, char **argv) {
  const char *ep = argval(argc, argv, "--connect", NULL), *kf = argval(argc, argv, "--key-file", NULL);
  int key_stdin = hasarg(argc, argv, "--key-stdin");
  if (!ep || (!kf && !key_stdin)) {
    fprintf(stderr, "usage: nabla worker --connect tcp://HOST:PORT (--key-file FILE | --key-stdin) [--rank R] [--world N] [--local-rank L]\n"
                    "                    [--timeout-ms MS] [--heartbeat SECONDS] [--bind HOST|auto]\n"
                    "  (rank, local rank and world default to SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS)\n");
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char *env_rank = getenv("SLURM_PROCID"), *env_world = getenv("SLURM_NTASKS"), *env_local = getenv("SLURM_LOCALID");
  int rank = atoi(argval(argc, argv, "--rank", env_rank ? env_rank : "0"));
  int world = atoi(argval(argc, argv, "--world", env_world ? env_world : "1"));
  int lrank = atoi(argval(argc, argv, "--local-rank", argval(argc, argv, "--rank", env_local ? env_local : (env_rank ? env_rank : "0"))));
  /* the key: 64 hex characters on stdin (ssh, srun) or in a file only this user can read */
  char hex[130] = "";
  if (key_stdin) {
    size_t n = 0;
    while (n < sizeof hex - 1) {
      ssize_t k = read(0, hex + n, 1);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0 || hex[n] == '\n') break;
      n++;
    }
    hex[n] = 0;
    if (n < 2 * DP_KEYLEN || dp_unhex(hex, W.key, DP_KEYLEN) != 0) {
      fprintf(stderr, "nabla worker: cannot read the session key from standard input\n");
      return 2;
    }
  } else {
    FILE *f = fopen(kf, "r");
    if (!f || !fgets(hex, sizeof hex, f) || dp_unhex(hex, W.key, DP_KEYLEN) != 0) {
      fprintf(stderr, "nabla worker: cannot read the session key from %s\n", kf);
      if (f) fclose(f);
      return 2;
    }
    fclose(f);
  }
  OPENSSL_cleanse(hex, sizeof hex);
  if (rank < 0 || world < 1 || rank >= world) { fprintf(stderr, "nabla worker: rank %d is not in a world of %d\n", rank, world); return 2; }
  /* one GPU per worker: the local rank picks among the visible GPUs, before
  ** anything loads CUDA (NABLA_CUDA_DEVICE set by the user wins) */
  int ngpu = visible_gpus();
  if (ngpu > 0 && !getenv("NABLA_CUDA_DEVICE")) { char d[16]; snprintf(d, sizeof d, "%d", lrank % ngpu); setenv("NABLA_CUDA_DEVICE", d, 1); }
  W.rank = rank;
  W.hb_s = atof(argval(argc, argv, "--heartbeat", "0"));
  nbD_init();
  W.vm = nb_vm_new(&wsink);
  nbD_self.rank = rank; nbD_self.world = world; nbD_self.local_rank = lrank;
  W.g.rank = rank; W.g.world = world; W.g.listen_fd = -1;
  memcpy(W.g.key, W.key, DP_KEYLEN);
  W.g.timeout_ms = atoi(argval(argc, argv, "--timeout-ms", "300000"));
  W.g.interrupted = nb_vm_interrupt_flag(W.vm);
  /* the ring listener: --bind HOST, or auto: every interface, advertised
  ** as the address this host reaches the session from */
  const char *bind = argval(argc, argv, "--bind", "127.0.0.1");
  char adv[80];
  if (!strcmp(bind, "auto")) {
    char host[256] = ""; const char *h = strstr(ep, "://"); h = h ? h + 3 : ep;
    snprintf(host, sizeof host, "%s", h);
    char *colon = strrchr(host, ':'); if (colon) *colon = 0;
    if (dl_route_addr(host, adv, sizeof adv)) snprintf(adv, sizeof adv, "127.0.0.1");
    bind = !strcmp(adv, "127.0.0.1") ? "127.0.0.1" : "0.0.0.0";
  } else snprintf(adv, sizeof adv, "%s", bind);
  if (dr_listen(&W.g, bind)) { fprintf(stderr, "nabla worker: %s\n", W.g.err); return 2; }
  nbD_self.g = &W.g;
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint; sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  W.ctx = zmq_ctx_new();
  W.dealer = zmq_socket(W.ctx, ZMQ_DEALER);
  /* a routing identity nobody can guess (see on_hi) */
  unsigned char ident[16];
  if (RAND_bytes(ident, sizeof ident) != 1) { fprintf(stderr, "nabla worker: no random bytes for the connection identity\n"); return 2; }
  ident[0] |= 1;   /* identities starting with a zero byte are ZeroMQ's own */
  zmq_setsockopt(W.dealer, ZMQ_ROUTING_ID, ident, sizeof ident);
  dp_limit_socket(W.dealer);
  if (dp_curve_client(W.dealer, W.key)) { fprintf(stderr, "nabla worker: this ZeroMQ has no CURVE security (libzmq built without libsodium)\n"); return 2; }
  int linger = 2000;
  zmq_setsockopt(W.dealer, ZMQ_LINGER, &linger, sizeof linger);
  zmq_socket_monitor(W.dealer, "inproc://nabla-dist-monitor", ZMQ_EVENT_DISCONNECTED);
  W.mon = zmq_socket(W.ctx, ZMQ_PAIR);
  zmq_connect(W.mon, "inproc://nabla-dist-monitor");
  W.pipe_io = zmq_socket(W.ctx, ZMQ_PAIR);
  W.pipe_main = zmq_socket(W.ctx, ZMQ_PAIR);
  zmq_bind(W.pipe_io, "inproc://nabla-worker-pipe");
  zmq_connect(W.pipe_main, "inproc://nabla-worker-pipe");
  if (zmq_connect(W.dealer, ep) != 0) { fprintf(stderr, "nabla worker: cannot connect to %s: %s\n", ep, zmq_strerror(errno)); return 2; }
  char hostname[128] = "?";
  gethostname(hostname, sizeof hostname - 1);
  for (char *p = hostname; *p; p++) if (*p == ' ') *p = '_';
  const char *ver = getenv("NABLA_DIST_FAKE_VERSION");   /* tests: pretend to be another version */
  snprintf(W.hello, sizeof W.hello, "%s %d %d %d %s:%d %s", ver ? ver : nb_version(), (int)getpid(), rank, lrank, adv, W.g.port, hostname);
  dp_send(W.dealer, W.key, NULL, 0, "hi", 0, rank, ++W.ctr, NULL, 0);   /* the session answers with a challenge */
  if (pthread_create(&W.io, NULL, wio_main, NULL) == 0) W.io_on = 1;
  else { fprintf(stderr, "nabla worker: cannot start the I/O thread\n"); return 2; }
  /* `dist` is there without an import */
  nb_run(W.vm, "import dist", 11, "<dist>", 0);
  int status = 0;
  for (;;) {
    zmq_pollitem_t it = { W.pipe_main, 0, ZMQ_POLLIN, 0 };
    int rc = zmq_poll(&it, 1, 1000);
    if (rc < 0) { if (errno == EINTR) continue; status = 3; break; }
    if (!(it.revents & ZMQ_POLLIN)) continue;
    dp_Msg m;
    int r = dp_recv(W.pipe_main, NULL, 0, 1, &m);
    if (r != 0) continue;
    if (!strcmp(m.type, "lost")) { dp_msg_free(&m); status = 3; break; }
    if (!strcmp(m.type, "stop")) { dp_msg_free(&m); break; }
    if (!strcmp(m.type, "refuse")) { fprintf(stderr, "nabla worker %d: the session refused this worker: %s\n", rank, m.body); dp_msg_free(&m); status = 2; break; }
    static const char *const types[] = { "welcome", "reconnect", "exec", "eval", "call", "set", "runfile", "ncclid", "nccl" };
    const char *ty = NULL;
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) if (!strcmp(m.type, types[k])) ty = types[k];
    __atomic_store_n(&W.busy_type, ty, __ATOMIC_SEQ_CST);
    __atomic_store_n(&W.busy_seq, m.seq, __ATOMIC_SEQ_CST);
    handle(&m);
    __atomic_store_n(&W.busy_seq, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&W.busy_type, NULL, __ATOMIC_SEQ_CST);
    dp_msg_free(&m);
    fflush(stdout);
  }
  __atomic_store_n(&W.main_done, 1, __ATOMIC_SEQ_CST);
  dp_send(W.pipe_main, NULL, NULL, 0, "quit", 0, -1, 0, NULL, 0);   /* to the I/O thread: send what is queued and stop */
  if (W.io_on) pthread_join(W.io, NULL);
  nbD_reducer_shutdown();
  nbD_self.g = NULL;
  dn_close(&W.g);
  dr_close(&W.g);
  if (W.g.listen_fd >= 0) close(W.g.listen_fd);
  free(W.g.fd);
  if (W.addrs) { for (int i = 0; i < world; i++) free(W.addrs[i]); free(W.addrs); }
  nb_vm_free(W.vm);
  zmq_socket_monitor(W.dealer, NULL, 0);
  zmq_close(W.mon);
  int z = 0;
  zmq_setsockopt(W.pipe_main, ZMQ_LINGER, &z, sizeof z); zmq_setsockopt(W.pipe_io, ZMQ_LINGER, &z, sizeof z);
  zmq_close(W.pipe_main); zmq_close(W.pipe_io);
  if (status == 3) zmq_setsockopt(W.dealer, ZMQ_LINGER, &z, sizeof z);   /* nobody to deliver to */
  zmq_close(W.dealer);
  zmq_ctx_term(W.ctx);
  return status;
}

/* ================================================================ nabla run */
static nb_VM *run_vm;
static void run_sigint(int sig) { (void)sig; if (run_vm) nb_vm_interrupt(run_vm); }

static const char RUN_USAGE[] =
  "usage: nabla run [-n N] [--timeout SECONDS] [--launcher local|ssh|slurm] [--hosts H1,H2,...]\n"
  "                 [--ssh-port P] [--ssh-key FILE] [--ssh-option OPT]... [--nodes M] [--gpus-per-node G]\n"
  "                 [--heartbeat SECONDS] [--bind ADDR] [--backend auto|ring|nccl] SCRIPT.nbl [ARGS...]\n";

int nbD_run_main(int argc, char **argv) {
  int n = 2; int i = 1;
  LaunchOpts o; memset(&o, 0, sizeof o);
  snprintf(o.launcher, sizeof o.launcher, "local"); snprintf(o.backend, sizeof o.backend, "auto");
  o.timeout = 300; o.heartbeat = 10;
  int bad = 0;
  for (; i < argc && argv[i][0] == '-' && !bad; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) { bad = 1; break; }
    if (!strcmp(a, "-n")) n = atoi(v);
    else if (!strcmp(a, "--timeout")) o.timeout = atof(v);
    else if (!strcmp(a, "--heartbeat")) o.heartbeat = atof(v);
    else if (!strcmp(a, "--launcher")) snprintf(o.launcher, sizeof o.launcher, "%s", v);
    else if (!strcmp(a, "--backend")) snprintf(o.backend, sizeof o.backend, "%s", v);
    else if (!strcmp(a, "--bind")) snprintf(o.bind, sizeof o.bind, "%s", v);
    else if (!strcmp(a, "--ssh-port")) o.ssh_port = atoi(v);
    else if (!strcmp(a, "--ssh-key")) { free(o.ssh_key); o.ssh_key = strdup(v); }
    else if (!strcmp(a, "--nodes")) o.nodes = atoi(v);
    else if (!strcmp(a, "--gpus-per-node")) o.gpus_per_node = atoi(v);
    else if (!strcmp(a, "--ssh-option")) {
      char **l = realloc(o.ssh_opts, sizeof(char *) * (size_t)(o.nssh_opts + 1));
      if (l) { o.ssh_opts = l; o.ssh_opts[o.nssh_opts++] = strdup(v); }
    } else if (!strcmp(a, "--hosts")) {
      char *copy = strdup(v), *save = NULL;
      for (char *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        char **l = realloc(o.hosts, sizeof(char *) * (size_t)(o.nhosts + 1));
        if (l) { o.hosts = l; o.hosts[o.nhosts++] = strdup(t); }
      }
      free(copy);
    } else bad = 1;
    i++;
  }
  if (bad || i >= argc) { fputs(RUN_USAGE, stderr); opts_free(&o); return 2; }
  char path[PATH_MAX];
  if (!realpath(argv[i], path)) { fprintf(stderr, "nabla run: cannot open %s: %s\n", argv[i], strerror(errno)); opts_free(&o); return 2; }
  nbD_init();
  nb_VM *vm = nb_vm_new(nb_stdio_sink());
  int sst = session_start(vm, n, &o);
  opts_free(&o);
  if (sst) {
    nbE_finish(vm);
    const nb_ErrorInfo *e = nb_last_error(vm);
    fprintf(stderr, "nabla run: %s\n", e ? e->message : "cannot start the workers");
    nb_vm_free(vm);
    return 1;
  }
  pthread_mutex_lock(&S_mu);
  S.run_mode = 1;
  nb_Buf b = {0};
  nbB_add(&b, path, strlen(path) + 1);
  for (int k = i + 1; k < argc; k++) nbB_add(&b, argv[k], strlen(argv[k]) + 1);
  int *all = calloc((size_t)n, sizeof(int));
  Reply *rep = calloc((size_t)n, sizeof *rep);
  for (int k = 0; k < n; k++) all[k] = 1;
  uint32_t seq = ++S.seq;
  for (int k = 0; k < n; k++) send_to(k, "runfile", seq, b.p, b.n);
  nbB_free(&b);
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  run_vm = vm; sa.sa_handler = run_sigint; sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  int which, r = wait_replies(vm, seq, all, rep, 0, &which);
  (void)r;
  pthread_mutex_unlock(&S_mu);
  int worst = 0;
  for (int k = 0; k < n; k++) {
    int st = 0;
    if (S.w[k].dead && !(rep[k].got && rep[k].body)) {
      int ws = S.w[k].status;
      st = WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : (WIFEXITED(ws) && WEXITSTATUS(ws) ? WEXITSTATUS(ws) : 1);
    } else if (!rep[k].got) st = 1;
    else if (!rep[k].ok) {
      st = 1;
      if (!rep[k].body) continue;
      const char *name = rep[k].body, *end = rep[k].body + rep[k].len;
      const char *msg = name + strlen(name) + 1;
      if (msg > end) msg = end;
      const char *report = msg < end ? msg + strlen(msg) + 1 : end;
      if (report > end) report = msg;
      if (k == which || strcmp(name, "Interrupted")) {
        fflush(stdout);
        char pre[32]; snprintf(pre, sizeof pre, "[rank %d] ", k);
        for (const char *p = report; *p; ) {
          const char *nl = strchr(p, '\n'); size_t len = nl ? (size_t)(nl - p) : strlen(p);
          fprintf(stderr, "%s%.*s\n", pre, (int)len, p);
          p += len + (nl ? 1 : 0);
        }
      }
    }
    if (st > worst) worst = st;
  }
  fflush(stdout);
  replies_free(rep, n); free(all);
  session_teardown();
  nb_vm_free(vm);
  return worst;
}

/* ------------------------------------------------------------ front-end magics */
char *nbD_magic_code(const char *src, size_t len, int pull) {
  /* the text travels as a single-quoted string: no interpolation, escapes only */
  char *code = malloc(2 * len + 64);
  if (!code) return NULL;
  char *o = code + sprintf(code, "%s('", pull ? "dist_pull" : "dist_exec");
  for (size_t i = 0; i < len; i++) {
    char ch = src[i];
    if (ch == '\\' || ch == '\'') { *o++ = '\\'; *o++ = ch; }
    else if (ch == '\n') { *o++ = '\\'; *o++ = 'n'; }
    else if (ch == '\r') { *o++ = '\\'; *o++ = 'r'; }
    else *o++ = ch;
  }
  strcpy(o, pull ? "', rank=\"all\")" : "')");
  return code;
}
