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
#include "dist/dproto.h"

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
  pid_t pid;
  int hello;                  /* said hello (and was accepted) */
  char ident[64]; size_t identlen;
  char addr[80];              /* host:port of its ring listener */
  volatile int dead;          /* set by the reaper */
  int status;                 /* waitpid status */
  int line_start[3];          /* output: at the start of a line (per stream) */
} Worker;

typedef struct Session {
  int active, broken;
  int n;
  Worker *w;
  void *ctx, *router;
  char endpoint[128];
  unsigned char key[DP_KEYLEN];
  char keyfile[PATH_MAX];
  int timeout_ms;
  char launcher[16], backend[16], bind[64];
  uint32_t seq, gen;
  pthread_t reaper; int reaper_on; volatile int reaper_stop; volatile int stopping;
  int run_mode;               /* nabla run: rank 0's stdout unprefixed, other ranks' stdout dropped */
  int need_reconnect;
} Session;
static Session S;

static void *reaper_main(void *arg) {
  (void)arg;
  while (!S.reaper_stop) {
    for (int i = 0; i < S.n; i++) {
      Worker *w = &S.w[i];
      if (w->pid <= 0 || w->dead) continue;
      int st;
      pid_t p = waitpid(w->pid, &st, WNOHANG);
      if (p == w->pid || (p < 0 && errno == ECHILD)) {
        w->status = p == w->pid ? st : 0;
        __atomic_store_n(&w->dead, 1, __ATOMIC_SEQ_CST);
        if (!S.stopping) {
          if (WIFSIGNALED(st)) logf_("nabla dist: worker rank %d (pid %d) died: killed by signal %d (%s)", i, (int)w->pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
          else logf_("nabla dist: worker rank %d (pid %d) exited with status %d", i, (int)w->pid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
      }
    }
    usleep(20000);
  }
  return NULL;
}

/* ---- output forwarded by workers ---- */
static void forward_output(nb_VM *vm, int rank, int stream, const char *data, size_t len) {
  Worker *w = &S.w[rank];
  if (stream != NB_STDERR) stream = NB_STDOUT;
  if (S.run_mode && rank == 0) { nbV_write(vm, stream, data, len); return; }
  if (S.run_mode && stream == NB_STDOUT) return;
  char prefix[48]; int pn = snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
  size_t i = 0;
  while (i < len) {
    if (w->line_start[stream]) { nbV_write(vm, stream, prefix, (size_t)pn); w->line_start[stream] = 0; }
    const char *nl = memchr(data + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - data) + 1 : len;
    nbV_write(vm, stream, data + i, end - i);
    if (nl) w->line_start[stream] = 1;
    i = end;
  }
  if (stream == NB_STDOUT) fflush(stdout);
}

static void prefixed_report(nb_VM *vm, int rank, const char *text) {
  Worker *w = &S.w[rank];
  if (!w->line_start[NB_STDERR]) { nbV_write(vm, NB_STDERR, "\n", 1); w->line_start[NB_STDERR] = 1; }
  forward_output(vm, rank, NB_STDERR, text, strlen(text));
  if (!w->line_start[NB_STDERR]) forward_output(vm, rank, NB_STDERR, "\n", 1);
}

typedef struct Reply { int got; int ok; char *body; size_t len; } Reply;
static void replies_free(Reply *r, int n) { for (int i = 0; i < n; i++) free(r[i].body); free(r); }

static void refuse(const dp_Msg *m, const char *why) {
  dp_send(S.router, S.key, m->ident, m->identlen, "refuse", 0, -1, why, strlen(why));
}

/* a hello from a worker: check rank, pid and version */
static void on_hello(dp_Msg *m) {
  char ver[64] = "", addr[80] = ""; int pid = 0, rank = -1, lrank = 0;
  if (sscanf(m->body, "%63s %d %d %d %79s", ver, &pid, &rank, &lrank, addr) != 5 || rank < 0 || rank >= S.n) {
    logf_("nabla dist: refused a worker hello that does not parse (rank %d)", rank);
    refuse(m, "bad hello");
    return;
  }
  Worker *w = &S.w[rank];
  if (strcmp(ver, nb_version()) != 0) {
    logf_("nabla dist: refused worker rank %d (pid %d): its nabla version %s differs from the session's %s", rank, pid, ver, nb_version());
    refuse(m, "version mismatch");
    return;
  }
  if (w->hello || (w->pid > 0 && w->pid != pid)) {
    logf_("nabla dist: refused a second or unexpected worker for rank %d (pid %d)", rank, pid);
    refuse(m, "unexpected worker");
    return;
  }
  w->hello = 1;
  memcpy(w->ident, m->ident, m->identlen); w->identlen = m->identlen;
  snprintf(w->addr, sizeof w->addr, "%s", addr);
}

/* Handles one incoming message (output, hellos, replies to `seq`). */
static void pump_one(nb_VM *vm, uint32_t seq, Reply *rep) {
  dp_Msg m;
  int rc = dp_recv(S.router, S.key, 1, 1, &m);
  if (rc == 1 || rc == -1) return;
  if (rc == -2) {
    char hex[129]; dp_hex((unsigned char *)m.ident, m.identlen < 64 ? m.identlen : 64, hex);
    logf_("nabla dist: refused a message with a missing or bad signature (connection %s); it was not looked at", hex);
    dp_msg_free(&m);
    return;
  }
  int r = m.rank;
  if (!strcmp(m.type, "hello")) on_hello(&m);
  else if (r < 0 || r >= S.n || !S.w[r].hello || m.identlen != S.w[r].identlen || memcmp(m.ident, S.w[r].ident, m.identlen)) {
    /* signed, but not from the connection that said hello for that rank */
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

static void interrupt_ranks(const int *targets, Reply *rep) {
  for (int i = 0; i < S.n; i++) if (targets[i] && !rep[i].got && S.w[i].pid > 0 && !S.w[i].dead) kill(S.w[i].pid, SIGINT);
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
    if (rc > 0) { for (int k = 0; k < 64; k++) { int before = 0; (void)before; pump_one(vm, seq, rep); zmq_pollitem_t j = { S.router, 0, ZMQ_POLLIN, 0 }; if (zmq_poll(&j, 1, 0) <= 0) break; } }
    for (int i = 0; i < S.n; i++) if (targets[i] && rep[i].got && !rep[i].ok && result == WR_OK) {
      result = WR_FAILED; *which = i;
      interrupt_ranks(targets, rep);
      grace = now_s();
    }
    if (vm && vm->interrupted && result == WR_OK) {
      result = WR_INTERRUPTED;
      interrupt_ranks(targets, rep);
      grace = now_s();
    }
    for (int i = 0; i < S.n; i++) if (targets[i] && !rep[i].got && S.w[i].dead) {
      /* drain what it may have sent before dying */
      while (zmq_poll(&it, 1, 0) > 0) pump_one(vm, seq, rep);
      if (rep[i].got) continue;
      if (result == WR_OK || result == WR_FAILED) { result = WR_DEAD; *which = i; interrupt_ranks(targets, rep); grace = now_s(); }
      rep[i].got = 1; rep[i].ok = 0;
    }
    if (grace && now_s() - grace > 3.0) break;   /* the others did not stop: give up on them */
    if (timeout_s > 0 && now_s() - start > timeout_s && result == WR_OK) { result = WR_TIMEOUT; interrupt_ranks(targets, rep); grace = now_s(); }
  }
  return result;
}

static int send_to(int rank, const char *type, uint32_t seq, const void *body, size_t len) {
  return dp_send(S.router, S.key, S.w[rank].ident, S.w[rank].identlen, type, seq, -1, body, len);
}

static void kill_all(int sig) { for (int i = 0; i < S.n; i++) if (S.w[i].pid > 0 && !S.w[i].dead) kill(S.w[i].pid, sig); }

static void session_teardown(void) {
  S.stopping = 1;
  if (S.router) {
    uint32_t seq = ++S.seq;
    for (int i = 0; i < S.n; i++) if (S.w[i].hello && !S.w[i].dead) send_to(i, "stop", seq, NULL, 0);
  }
  /* wait for them to exit; then insist */
  double t0 = now_s();
  for (;;) {
    int alive = 0;
    for (int i = 0; i < S.n; i++) if (S.w[i].pid > 0 && !S.w[i].dead) alive++;
    if (!alive) break;
    if (now_s() - t0 > 3.0) { kill_all(SIGKILL); }
    if (now_s() - t0 > 6.0) break;
    if (!S.reaper_on) {   /* no reaper (start failed early): reap here */
      for (int i = 0; i < S.n; i++) if (S.w[i].pid > 0 && !S.w[i].dead && waitpid(S.w[i].pid, &S.w[i].status, WNOHANG) == S.w[i].pid) S.w[i].dead = 1;
    }
    usleep(10000);
  }
  if (S.reaper_on) { S.reaper_stop = 1; pthread_join(S.reaper, NULL); S.reaper_on = 0; }
  if (S.router) { zmq_close(S.router); S.router = NULL; }
  if (S.ctx) { zmq_ctx_term(S.ctx); S.ctx = NULL; }
  if (S.keyfile[0]) { unlink(S.keyfile); S.keyfile[0] = 0; }
  free(S.w); S.w = NULL;
  S.n = 0; S.active = 0; S.broken = 0; S.need_reconnect = 0; S.stopping = 0; S.reaper_stop = 0;
  OPENSSL_cleanse(S.key, sizeof S.key);
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
  char rank_s[16], world_s[16], to_s[32], nthreads[24], omp[64], blas[64];
  snprintf(rank_s, sizeof rank_s, "%d", rank);
  snprintf(world_s, sizeof world_s, "%d", S.n);
  snprintf(to_s, sizeof to_s, "%d", S.timeout_ms);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN); if (cpus < 1) cpus = 1;
  long per = cpus / S.n; if (per < 1) per = 1;
  snprintf(nthreads, sizeof nthreads, "%ld", per);
  snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%s", nthreads);
  snprintf(blas, sizeof blas, "OPENBLAS_NUM_THREADS=%s", nthreads);
  char *argv[] = { (char *)exe, "worker", "--connect", S.endpoint, "--key-file", S.keyfile, "--rank", rank_s,
                   "--local-rank", rank_s, "--world", world_s, "--timeout-ms", to_s, "--bind", S.bind, NULL };
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

static int session_start(nb_VM *vm, int n, const char *launcher, const char *backend, double timeout_s, const char *bind) {
  if (S.active) return dist_error(vm, "dist.start: workers are already running (%d); call dist.stop() first", S.n);
  if (n < 1 || n > 1024) return dist_error(vm, "dist.start: n must be between 1 and 1024, got %d", n);
  if (strcmp(launcher, "local") != 0)
    return dist_error(vm, "dist.start: launcher \"%s\" is not available yet (only \"local\"; ssh and slurm are planned)", launcher);
  if (strcmp(backend, "ring") != 0)
    return dist_error(vm, "dist.start: backend \"%s\" is not available in this build (only \"ring\": TCP between workers; \"nccl\" needs the CUDA build)", backend);
  memset(&S, 0, sizeof S);
  S.n = n;
  S.timeout_ms = timeout_s > 0 ? (int)(timeout_s * 1000) : 0;
  snprintf(S.launcher, sizeof S.launcher, "%s", launcher);
  snprintf(S.backend, sizeof S.backend, "%s", backend);
  snprintf(S.bind, sizeof S.bind, "%s", bind);
  S.w = calloc((size_t)n, sizeof *S.w);
  if (!S.w) return nb_error(vm, "out of memory");
  for (int i = 0; i < n; i++) for (int s = 0; s < 3; s++) S.w[i].line_start[s] = 1;
  if (RAND_bytes(S.key, sizeof S.key) != 1) { session_teardown(); return dist_error(vm, "dist.start: no random bytes for the session key"); }
  {
    /* stop the workers at exit; registered after OpenSSL's own exit handler
    ** (which RAND_bytes and a first HMAC install) so it runs before it */
    static int registered;
    unsigned char mac[32]; const void *p[1] = { "" }; size_t l[1] = { 0 };
    dp_hmac(S.key, p, l, 1, mac);
    if (!registered) { registered = 1; atexit(at_exit_stop); }
  }
  /* the key file: 0600, in $XDG_RUNTIME_DIR or $TMPDIR or /tmp */
  const char *dir = getenv("XDG_RUNTIME_DIR");
  if (!dir || access(dir, W_OK)) dir = getenv("TMPDIR");
  if (!dir || access(dir, W_OK)) dir = "/tmp";
  snprintf(S.keyfile, sizeof S.keyfile, "%s/nabla-dist-key-XXXXXX", dir);
  mode_t old = umask(077);
  int fd = mkstemp(S.keyfile);
  umask(old);
  if (fd < 0) { S.keyfile[0] = 0; session_teardown(); return dist_error(vm, "dist.start: cannot create the key file: %s", strerror(errno)); }
  fchmod(fd, 0600);
  char hex[2 * DP_KEYLEN + 2]; dp_hex(S.key, DP_KEYLEN, hex); strcat(hex, "\n");
  ssize_t wr = write(fd, hex, strlen(hex));
  OPENSSL_cleanse(hex, sizeof hex);
  close(fd);
  if (wr < 0) { session_teardown(); return dist_error(vm, "dist.start: cannot write the key file"); }
  S.ctx = zmq_ctx_new();
  S.router = zmq_socket(S.ctx, ZMQ_ROUTER);
  int zero = 0, one = 1;
  zmq_setsockopt(S.router, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(S.router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
  char ep[160]; snprintf(ep, sizeof ep, "tcp://%s:*", S.bind);
  if (zmq_bind(S.router, ep) != 0) { int e = errno; session_teardown(); return dist_error(vm, "dist.start: cannot listen on %s: %s", ep, zmq_strerror(e)); }
  size_t el = sizeof S.endpoint;
  zmq_getsockopt(S.router, ZMQ_LAST_ENDPOINT, S.endpoint, &el);
  char exe[PATH_MAX]; ssize_t xl = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (xl <= 0) { session_teardown(); return dist_error(vm, "dist.start: cannot find the nabla executable"); }
  exe[xl] = 0;
  for (int i = 0; i < n; i++) {
    S.w[i].pid = spawn_local(i, exe);
    if (S.w[i].pid < 0) { session_teardown(); return dist_error(vm, "dist.start: fork failed: %s", strerror(errno)); }
  }
  S.active = 1;
  if (pthread_create(&S.reaper, NULL, reaper_main, NULL) == 0) S.reaper_on = 1;
  /* hellos */
  double t0 = now_s();
  for (;;) {
    int have = 0, dead = -1;
    for (int i = 0; i < n; i++) { have += S.w[i].hello; if (S.w[i].dead && dead < 0) dead = i; }
    if (have == n) break;
    if (dead >= 0) { int st = S.w[dead].status; session_teardown(); return dist_error(vm, "dist.start: worker rank %d exited before connecting (%s %d)", dead, WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st)); }
    if (vm && vm->interrupted) { session_teardown(); return nb_error_kind(vm, "Interrupted", "interrupted"); }
    if (now_s() - t0 > 30) { session_teardown(); return dist_error(vm, "dist.start: only %d of %d workers connected within 30 s", have, n); }
    zmq_pollitem_t it = { S.router, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, 50) > 0) pump_one(vm, 0, NULL);
  }
  unlink(S.keyfile); S.keyfile[0] = 0;   /* every worker has read it */
  /* welcome: rank, world, peers; then wait until the mesh is connected */
  nb_Buf b = {0};
  nbB_printf(&b, "%d %d %u\n", n, S.timeout_ms, S.gen);
  for (int i = 0; i < n; i++) nbB_printf(&b, "%s\n", S.w[i].addr);
  uint32_t seq = ++S.seq;
  for (int i = 0; i < n; i++) send_to(i, "welcome", seq, b.p, b.n);
  nbB_free(&b);
  Reply *rep = calloc((size_t)n, sizeof *rep);
  int *all = calloc((size_t)n, sizeof(int));
  if (!rep || !all) { free(rep); free(all); session_teardown(); return nb_error(vm, "out of memory"); }
  for (int i = 0; i < n; i++) all[i] = 1;
  int which, r = wait_replies(vm, seq, all, rep, 90, &which);
  if (r != WR_OK) {
    char why[600] = "";
    if (which >= 0 && rep[which].body) snprintf(why, sizeof why, ": %s", rep[which].body);
    replies_free(rep, n); free(all);
    session_teardown();
    return dist_error(vm, "dist.start: the workers could not form the collective group (rank %d%s)", which, why);
  }
  replies_free(rep, n); free(all);
  return NB_OK;
}

static int need_session(nb_VM *vm, const char *fname) {
  if (!S.active) return dist_error(vm, "%s: no workers are running (call dist.start(n) first)", fname);
  if (S.broken) return dist_error(vm, "%s: the worker group lost a worker; call dist.restart() (or dist.stop())", fname);
  for (int i = 0; i < S.n; i++) if (S.w[i].dead) {
    S.broken = 1;
    int st = S.w[i].status;
    return dist_error(vm, "%s: worker rank %d (pid %d) is dead (%s %d); call dist.restart()", fname, i, (int)S.w[i].pid,
                      WIFSIGNALED(st) ? "killed by signal" : "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
  return NB_OK;
}

/* Sends a command to the targets (NULL = all) and waits.  On success rep
** holds every target's reply (the caller frees it); otherwise an error is raised. */
static int command(nb_VM *vm, const char *fname, const char *type, const void *body, size_t len, const int *targets_in, Reply **out);

static int reconnect(nb_VM *vm) {
  S.need_reconnect = 0;
  S.gen++;
  char body[32]; int bn = snprintf(body, sizeof body, "%u", S.gen);
  Reply *rep;
  if (command(vm, "dist", "reconnect", body, (size_t)bn, NULL, &rep)) { S.broken = 1; return NB_ERR; }
  replies_free(rep, S.n);
  return NB_OK;
}

static int command(nb_VM *vm, const char *fname, const char *type, const void *body, size_t len, const int *targets_in, Reply **out) {
  *out = NULL;
  if (need_session(vm, fname)) return NB_ERR;
  if (S.need_reconnect && strcmp(type, "reconnect") != 0 && reconnect(vm)) return NB_ERR;
  int n = S.n;
  int *targets = malloc(sizeof(int) * (size_t)n);
  Reply *rep = calloc((size_t)n, sizeof *rep);
  if (!targets || !rep) { free(targets); free(rep); return nb_error(vm, "out of memory"); }
  for (int i = 0; i < n; i++) targets[i] = targets_in ? targets_in[i] : 1;
  uint32_t seq = ++S.seq;
  for (int i = 0; i < n; i++) if (targets[i]) send_to(i, type, seq, body, len);
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
    int st = S.w[which].status;
    replies_free(rep, n); free(targets);
    return dist_error(vm, "%s: worker rank %d (pid %d) died (%s %d); the other ranks were stopped; call dist.restart()", fname, which, (int)S.w[which].pid,
                      WIFSIGNALED(st) ? "killed by signal" : "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
  if (r == WR_TIMEOUT) { replies_free(rep, n); free(targets); return dist_error(vm, "%s: timed out", fname); }
  free(targets);
  *out = rep;
  return NB_OK;
}

/* ---- builtins (session) ---- */
static int arg_str(nb_VM *vm, const char *f, const char *what, nb_Value v, const char **s) {
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: %s must be a string, got %s", f, what, nb_typename(v));
  *s = nb_str(v)->data;
  return NB_OK;
}

static struct { int n; char launcher[16], backend[16], bind[64]; double timeout; } last_start;

static int b_start(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *f = "dist.start", *launcher = NULL, *backend = NULL, *bind = NULL;
  if (a[0].t != NB_TNUM || a[0].u.n != (int)a[0].u.n) return nb_error_kind(vm, "TypeError", "%s: n must be an integer", f);
  if (arg_str(vm, f, "launcher", a[1], &launcher) || arg_str(vm, f, "backend", a[2], &backend)) return NB_ERR;
  if (a[3].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: timeout must be a number of seconds", f);
  if (arg_str(vm, f, "bind", a[4], &bind)) return NB_ERR;
  if (nbD_self.rank >= 0) return dist_error(vm, "%s: workers cannot start workers", f);
  if (session_start(vm, (int)a[0].u.n, launcher, backend, a[3].u.n, bind)) return NB_ERR;
  last_start.n = (int)a[0].u.n; last_start.timeout = a[3].u.n;
  snprintf(last_start.launcher, sizeof last_start.launcher, "%s", launcher);
  snprintf(last_start.backend, sizeof last_start.backend, "%s", backend);
  snprintf(last_start.bind, sizeof last_start.bind, "%s", bind);
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
  if (session_start(vm, last_start.n, last_start.launcher, last_start.backend, last_start.timeout, last_start.bind)) return NB_ERR;
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
    if (nbS_deserialize(vm, rep[i].body, rep[i].len, &v)) { nb_decref(nb_obj(NB_TLIST, l)); replies_free(rep, S.n); return NB_ERR; }
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
  int st = nbS_serialize(vm, lv, &b);
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
  if (nbS_serialize(vm, rec, &b)) { nbB_free(&b); return NB_ERR; }
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
    nb_Rec *r = nbR_new(3);
    nbR_set_cstr(r, "rank", nb_num(i));
    nbR_set_cstr(r, "pid", nb_num(S.w[i].pid));
    nbR_set_cstr(r, "alive", nb_bool(!S.w[i].dead));
    nbL_push(l, nb_obj(NB_TREC, r));
  }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_endpoint(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  *out = S.active ? nb_strv(nbS_cstr(S.endpoint)) : nb_nil();
  return NB_OK;
}
static int b_size(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  *out = S.active ? nb_num(S.n) : nb_nil();
  return NB_OK;
}

static nb_Builtin session_builtins[] = {
  { "dist_start", b_start, "n, launcher=\"local\", backend=\"ring\", timeout=300, bind=\"127.0.0.1\"", "dist.start(n, launcher=\"local\", backend=\"ring\", timeout=300): starts n worker processes connected to this session" },
  { "dist_stop", b_stop, "", "dist.stop(): shuts the workers down" },
  { "dist_restart", b_restart, "", "dist.restart(): stops whatever is left of the workers and starts fresh ones with the same settings (their globals are lost)" },
  { "dist_exec", b_exec, "code", "dist.exec(code): runs source on every worker; their output is shown prefixed [rank N]" },
  { "dist_run", b_run, "*args", "dist.run(fn, args...): calls fn(args...) on every worker; the list of results by rank" },
  { "dist_push", b_push, "vars=nil, **kw", "dist.push(name=value, ...) or dist.push({name: value}): sets globals on every worker" },
  { "dist_pull", b_pull, "expr, rank=0", "dist.pull(expr, rank=0): the value of expr (source text) on one worker (rank=\"all\": a list by rank)" },
  { "dist_scatter", b_scatter, "name, x", "dist.scatter(name, x): splits tensor x along its first axis; worker r gets part r as global name" },
  { "dist_gather", b_gather, "expr", "dist.gather(expr): the tensors expr gives on every worker, concatenated along the first axis" },
  { "dist_workers", b_workers, "", "dist.workers(): [{rank, pid, alive}] of the running workers" },
  { "dist_endpoint", b_endpoint, "", "dist.endpoint(): the session's control address (nil when no workers)" },
  { "dist_size", b_size, "", "dist.size(): the number of workers this session runs (nil when none)" },
  { NULL, NULL, NULL, NULL },
};


void nbD_init(void) {
  static int done;
  if (done) return;
  done = 1;
  nbB_register(session_builtins);
  nbD_coll_init();
}

/* ================================================================ worker */
typedef struct WState {
  void *ctx, *dealer, *mon;
  unsigned char key[DP_KEYLEN];
  int rank;
  uint32_t seq;          /* of the command being run (output is tagged with it) */
  nb_VM *vm;
  dr_Group g;
  char **addrs;
} WState;
static WState W;

static void wsink_write(nb_Sink *s, int stream, const char *data, size_t len) {
  (void)s;
  char *b = malloc(len + 1);
  if (!b) return;
  b[0] = stream == NB_STDERR ? '2' : '1';
  memcpy(b + 1, data, len);
  dp_send(W.dealer, W.key, NULL, 0, "stream", W.seq, W.rank, b, len + 1);
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

static void reply_ok(uint32_t seq, const char *data, size_t len) {
  char *b = malloc(len + 1);
  if (!b) return;
  b[0] = '0';
  if (len) memcpy(b + 1, data, len);
  dp_send(W.dealer, W.key, NULL, 0, "reply", seq, W.rank, b, len + 1);
  free(b);
}
static void reply_err(uint32_t seq, const char *name, const char *msg, const char *report) {
  nb_Buf b = {0};
  nbB_putc(&b, '1');
  nbB_add(&b, name, strlen(name)); nbB_putc(&b, 0);
  nbB_add(&b, msg, strlen(msg)); nbB_putc(&b, 0);
  nbB_add(&b, report, strlen(report));
  dp_send(W.dealer, W.key, NULL, 0, "reply", seq, W.rank, b.p, b.n);
  nbB_free(&b);
}
static void reply_last_error(uint32_t seq) {
  const nb_ErrorInfo *e = nb_last_error(W.vm);
  if (e) reply_err(seq, e->name ? e->name : "Error", e->message ? e->message : "", e->report ? e->report : "");
  else reply_err(seq, "Error", "failed", "failed");
}

/* runs src; 0 ok, else the error was replied */
static int wrun(uint32_t seq, const char *src, size_t len, const char *name) {
  W.vm->interrupted = 0; W.vm->poll = 0;
  int st = nb_run(W.vm, src, len, name, 0);
  if (st) { reply_last_error(seq); return -1; }
  return 0;
}

static nb_Value take_global(const char *name) {
  int i = nbV_global_find(W.vm->main, name, strlen(name));
  if (i < 0) return nb_nil();
  nb_Value v = W.vm->main->vals[i];
  W.vm->main->vals[i] = nb_undef();
  return v.t == NB_TUNDEF ? nb_nil() : v;
}
static void set_global(const char *name, size_t len, nb_Value v) {
  nb_Str *s = nbS_intern(name, len);
  int i = nbV_global_slot(W.vm->main, s);
  nb_decref(nb_strv(s));
  nb_store(&W.vm->main->vals[i], v);
}

static void reply_value(uint32_t seq, nb_Value v) {
  nb_Buf b = {0};
  if (nbS_serialize(W.vm, v, &b)) {
    nbE_finish(W.vm);
    reply_last_error(seq);
  } else reply_ok(seq, b.p ? b.p : "", b.n);
  nbB_free(&b);
}

static int connect_mesh(uint32_t seq) {
  if (dr_connect(&W.g, W.addrs)) { reply_err(seq, "DistError", W.g.err, W.g.err); return -1; }
  reply_ok(seq, NULL, 0);
  return 0;
}

static void handle(dp_Msg *m) {
  uint32_t seq = m->seq;
  W.seq = seq;
  if (!strcmp(m->type, "welcome")) {
    int world, tmo; unsigned gen;
    char *save, *line = strtok_r(m->body, "\n", &save);
    if (!line || sscanf(line, "%d %d %u", &world, &tmo, &gen) != 3 || world != W.g.world) { reply_err(seq, "DistError", "bad welcome", "bad welcome"); return; }
    W.g.timeout_ms = tmo; W.g.gen = gen;
    W.addrs = calloc((size_t)world, sizeof(char *));
    for (int i = 0; i < world; i++) { line = strtok_r(NULL, "\n", &save); W.addrs[i] = strdup(line ? line : ""); }
    connect_mesh(seq);
  } else if (!strcmp(m->type, "reconnect")) {
    W.g.gen = (uint32_t)strtoul(m->body, NULL, 10);
    W.vm->interrupted = 0;
    connect_mesh(seq);
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
    W.vm->interrupted = 0;
    if (nbS_deserialize(W.vm, m->body, m->len, &lv)) { nbE_finish(W.vm); reply_last_error(seq); return; }
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
    if (nbS_deserialize(W.vm, m->body, m->len, &rv)) { nbE_finish(W.vm); reply_last_error(seq); return; }
    if (rv.t == NB_TREC) {
      nb_Rec *r = nb_rec(rv);
      for (int i = 0; i < r->n; i++) { nb_incref(r->vals[i]); set_global(r->keys[i]->data, r->keys[i]->len, r->vals[i]); }
    }
    nb_decref(rv);
    reply_ok(seq, NULL, 0);
  } else if (!strcmp(m->type, "runfile")) {
    /* body: path \0 arg \0 arg ... */
    int argc = 0; char *argv[256];
    for (size_t i = 0; i < m->len && argc < 255; ) { argv[argc++] = m->body + i; i += strlen(m->body + i) + 1; }
    if (!argc) { reply_err(seq, "DistError", "no script", "no script"); return; }
    nb_vm_set_argv(W.vm, argc, argv);
    char *copy = strdup(argv[0]);
    nb_vm_add_path(W.vm, dirname(copy));
    free(copy);
    W.vm->interrupted = 0; W.vm->poll = 0;
    if (nb_run_file(W.vm, argv[0])) reply_last_error(seq);
    else reply_ok(seq, NULL, 0);
  }
}

static const char *argval(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], name)) return argv[i + 1];
  return def;
}

int nbD_worker_main(int argc, char **argv) {
  const char *ep = argval(argc, argv, "--connect", NULL), *kf = argval(argc, argv, "--key-file", NULL);
  if (!ep || !kf) { fprintf(stderr, "usage: nabla worker --connect tcp://HOST:PORT --key-file FILE --rank R --world N [--local-rank L] [--timeout-ms MS] [--bind HOST]\n"); return 2; }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int rank = atoi(argval(argc, argv, "--rank", "0")), world = atoi(argval(argc, argv, "--world", "1"));
  int lrank = atoi(argval(argc, argv, "--local-rank", argval(argc, argv, "--rank", "0")));
  /* the key: 64 hex characters in a file only this user can read */
  char hex[130] = "";
  FILE *f = fopen(kf, "r");
  if (!f || !fgets(hex, sizeof hex, f) || dp_unhex(hex, W.key, DP_KEYLEN) != 0) {
    fprintf(stderr, "nabla worker: cannot read the session key from %s\n", kf);
    if (f) fclose(f);
    return 2;
  }
  fclose(f);
  OPENSSL_cleanse(hex, sizeof hex);
  W.rank = rank;
  nbD_init();
  W.vm = nb_vm_new(&wsink);
  nbD_self.rank = rank; nbD_self.world = world; nbD_self.local_rank = lrank;
  W.g.rank = rank; W.g.world = world; W.g.listen_fd = -1;
  memcpy(W.g.key, W.key, DP_KEYLEN);
  W.g.timeout_ms = atoi(argval(argc, argv, "--timeout-ms", "300000"));
  W.g.interrupted = &W.vm->interrupted;
  if (dr_listen(&W.g, argval(argc, argv, "--bind", "127.0.0.1"))) { fprintf(stderr, "nabla worker: %s\n", W.g.err); return 2; }
  nbD_self.g = &W.g;
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint; sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  W.ctx = zmq_ctx_new();
  W.dealer = zmq_socket(W.ctx, ZMQ_DEALER);
  char ident[64]; int il = snprintf(ident, sizeof ident, "w%d-%d", rank, (int)getpid());
  zmq_setsockopt(W.dealer, ZMQ_ROUTING_ID, ident, (size_t)il);
  int zero = 0, linger = 2000;
  zmq_setsockopt(W.dealer, ZMQ_LINGER, &linger, sizeof linger);
  (void)zero;
  zmq_socket_monitor(W.dealer, "inproc://nabla-dist-monitor", ZMQ_EVENT_DISCONNECTED);
  W.mon = zmq_socket(W.ctx, ZMQ_PAIR);
  zmq_connect(W.mon, "inproc://nabla-dist-monitor");
  if (zmq_connect(W.dealer, ep) != 0) { fprintf(stderr, "nabla worker: cannot connect to %s: %s\n", ep, zmq_strerror(errno)); return 2; }
  char hello[256];
  const char *ver = getenv("NABLA_DIST_FAKE_VERSION");   /* tests: pretend to be another version */
  int hn = snprintf(hello, sizeof hello, "%s %d %d %d 127.0.0.1:%d", ver ? ver : nb_version(), (int)getpid(), rank, lrank, W.g.port);
  if (strcmp(argval(argc, argv, "--bind", "127.0.0.1"), "127.0.0.1") != 0)
    hn = snprintf(hello, sizeof hello, "%s %d %d %d %s:%d", ver ? ver : nb_version(), (int)getpid(), rank, lrank, argval(argc, argv, "--bind", "127.0.0.1"), W.g.port);
  dp_send(W.dealer, W.key, NULL, 0, "hello", 0, rank, hello, (size_t)hn);
  /* `dist` is there without an import */
  nb_run(W.vm, "import dist", 11, "<dist>", 0);
  int status = 0;
  for (;;) {
    zmq_pollitem_t it[2] = { { W.dealer, 0, ZMQ_POLLIN, 0 }, { W.mon, 0, ZMQ_POLLIN, 0 } };
    int rc = zmq_poll(it, 2, 1000);
    if (getppid() == 1) { status = 3; break; }   /* orphaned (PDEATHSIG covers most cases) */
    if (rc < 0) { if (errno == EINTR) continue; status = 3; break; }
    if (it[1].revents & ZMQ_POLLIN) { status = 3; break; }   /* the session's connection closed */
    if (!(it[0].revents & ZMQ_POLLIN)) continue;
    dp_Msg m;
    int r = dp_recv(W.dealer, W.key, 0, 1, &m);
    if (r == -2) { fprintf(stderr, "nabla worker %d: dropped a control message with a bad signature\n", rank); continue; }
    if (r != 0) continue;
    if (!strcmp(m.type, "stop")) { dp_msg_free(&m); break; }
    if (!strcmp(m.type, "refuse")) { fprintf(stderr, "nabla worker %d: the session refused this worker: %s\n", rank, m.body); dp_msg_free(&m); status = 2; break; }
    handle(&m);
    dp_msg_free(&m);
    fflush(stdout);
  }
  nbD_self.g = NULL;
  dr_close(&W.g);
  if (W.g.listen_fd >= 0) close(W.g.listen_fd);
  free(W.g.fd);
  if (W.addrs) { for (int i = 0; i < world; i++) free(W.addrs[i]); free(W.addrs); }
  nb_vm_free(W.vm);
  zmq_socket_monitor(W.dealer, NULL, 0);
  zmq_close(W.mon);
  int z = 0; zmq_setsockopt(W.dealer, ZMQ_LINGER, &z, sizeof z);
  zmq_close(W.dealer);
  zmq_ctx_term(W.ctx);
  return status;
}

/* ================================================================ nabla run */
static nb_VM *run_vm;
static void run_sigint(int sig) { (void)sig; if (run_vm) nb_vm_interrupt(run_vm); }

int nbD_run_main(int argc, char **argv) {
  int n = 2; double timeout = 300; int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout = atof(argv[++i]);
    else { fprintf(stderr, "usage: nabla run [-n N] [--timeout SECONDS] SCRIPT.nbl [ARGS...]\n"); return 2; }
  }
  if (i >= argc) { fprintf(stderr, "usage: nabla run [-n N] [--timeout SECONDS] SCRIPT.nbl [ARGS...]\n"); return 2; }
  char path[PATH_MAX];
  if (!realpath(argv[i], path)) { fprintf(stderr, "nabla run: cannot open %s: %s\n", argv[i], strerror(errno)); return 2; }
  nbD_init();
  nb_VM *vm = nb_vm_new(nb_stdio_sink());
  if (session_start(vm, n, "local", "ring", timeout, "127.0.0.1")) {
    nbE_finish(vm);
    const nb_ErrorInfo *e = nb_last_error(vm);
    fprintf(stderr, "nabla run: %s\n", e ? e->message : "cannot start the workers");
    nb_vm_free(vm);
    return 1;
  }
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
