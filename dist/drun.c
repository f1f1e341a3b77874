/*
** drun.c — `nabla run [-n N] ... SCRIPT.nbl ARGS`: starts a session of N
** workers (dsession.c), runs the script on every one of them, shows every
** rank's output with each line prefixed "[rank N] " (as torchrun --tee;
** --only-rank0: rank 0's output as the program's own, the others' errors
** only), --log-dir DIR writes each rank's output to DIR/rank-N.log, and
** exits with the worst status of the ranks.  --max-restarts N (torchrun's
** name) starts the whole group again when a rank fails, with
** NABLA_RESTART_COUNT set; --min-workers M lets a restart go on with the ssh
** hosts that are left.  A small program on top of the session controller,
** kept apart from the builtins that share it.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "dist/dist.h"
#include "dist/dsession.h"
#include "dist/dinternal.h"
#include "dist/drelay.h"

static nb_VM *run_vm;
static volatile sig_atomic_t run_interrupted;
static void run_sigint(int sig) { (void)sig; run_interrupted = 1; if (run_vm) nb_vm_interrupt(run_vm); }

/* the session's output: lang's stdio sink writes it (through stdio, or
** straight to fd 1/2 when they came non-blocking, so no byte is dropped) */
static void run_write(nb_Sink *s, int stream, const char *data, size_t len) {
  nb_Sink *io = nb_stdio_sink();
  (void)s;
  io->write(io, stream, data, len);
}
static nb_Sink run_sink = { run_write, NULL, NULL, NULL, NULL };

static const char RUN_USAGE[] =
  "usage: nabla run [-n N] [--timeout SECONDS] [--launcher local|ssh|slurm] [--hosts H1,H2,...]\n"
  "                 [--ssh-port P] [--ssh-key FILE] [--ssh-option OPT]... [--connect-timeout SECONDS]\n"
  "                 [--env NAME[=VALUE]]... [--exclude HOST]... [--nodes M] [--gpus-per-node G]\n"
  "                 [--threads-per-worker T] [--ifname IFACE] [--ports LOW-HIGH]\n"
  "                 [--heartbeat SECONDS] [--bind ADDR] [--backend auto|ring|nccl]\n"
  "                 [--log-dir DIR] [--only-rank0] [--max-restarts N] [--min-workers M]\n"
  "                 SCRIPT.nbl [ARGS...]\n";

static int push(char ***l, int *n, const char *v) {
  if (*n >= 4096) return -1;   /* bounded: each is a word on a command line */
  char **x = realloc(*l, sizeof(char *) * (size_t)(*n + 1));
  if (!x) return -1;
  *l = x;
  if (!(x[*n] = strdup(v))) return -1;
  (*n)++;
  return 0;
}

/* an integer option: the whole text, within [lo, hi] */
static int int_opt(const char *name, const char *v, int lo, int hi, int *out) {
  char *end; errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi) {
    fprintf(stderr, "nabla run: %s must be an integer from %d to %d, got \"%s\"\n", name, lo, hi, v);
    return -1;
  }
  *out = (int)x;
  return 0;
}

/* The closing summary of a failed run, as torchrun's ChildFailedError table:
** one row per rank that failed -- its host, how it ended (an exit code, a
** signal, an error raised), and its error's first line -- the first failure
** marked; the ranks stopped because of it are only counted. */
typedef struct RankEnd { int status; int stopped; char how[48]; char first[160]; } RankEnd;

static void first_line(char *out, size_t n, const char *name, const char *msg) {
  size_t ml = strcspn(msg, "\n");
  snprintf(out, n, "%s: %.*s", name, (int)(ml > 140 ? 140 : ml), msg);
}

static void print_summary(const char *script, int n, const RankEnd *e, int which) {
  int nfailed = 0, nstopped = 0;
  for (int k = 0; k < n; k++) { if (e[k].status && !e[k].stopped) nfailed++; if (e[k].stopped) nstopped++; }
  if (!nfailed) return;   /* only stopped (Ctrl-C): nothing failed by itself */
  const char *base = strrchr(script, '/');
  fflush(stdout);
  fprintf(stderr, "nabla run: %s failed on %d of %d rank%s", base ? base + 1 : script, nfailed, n, n > 1 ? "s" : "");
  if (which >= 0) fprintf(stderr, " (first: rank %d)", which);
  fprintf(stderr, "\n  %-5s %-20s %-22s %s\n", "rank", "host", "exit", "error");
  for (int k = 0; k < n; k++) {
    if (!e[k].status || e[k].stopped) continue;
    dsess_WorkerInfo w; dsess_worker_info(k, &w);
    fprintf(stderr, "  %-5d %-20.20s %-22s %s\n", k, w.host ? w.host : "?", e[k].how, e[k].first);
  }
  if (nstopped) {
    fprintf(stderr, "  (stopped after the failure:");
    for (int k = 0; k < n; k++) if (e[k].stopped) fprintf(stderr, " rank %d", k);
    fprintf(stderr, ")\n");
  }
}

/* One attempt: start, run, report.  Returns the worst status; *failed: a
** rank failed (died or raised), so a restart may help; *started: the
** group came up. */
static int attempt(int n, const dsess_Launch *o, const char *path, int argc, char **argv, int first_arg,
                   int only_rank0, const char *log_dir, int *failed, int *started) {
  *failed = 0; *started = 0;
  nb_VM *vm = nb_vm_new(&run_sink);
  int sst = dsess_start(vm, n, o);
  if (sst) {
    nbE_finish(vm);
    const nb_ErrorInfo *e = nb_last_error(vm);
    fprintf(stderr, "nabla run: %s\n", e ? e->message : "cannot start the workers");
    nb_vm_free(vm);
    *failed = 1;
    return 1;
  }
  *started = 1;
  int *fds = NULL;
  if (log_dir) {
    fds = malloc(sizeof(int) * (size_t)n);
    for (int k = 0; fds && k < n; k++) {
      char lp[PATH_MAX];
      snprintf(lp, sizeof lp, "%s/rank-%d.log", log_dir, k);
      fds[k] = open(lp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fds[k] < 0) fprintf(stderr, "nabla run: cannot write %s: %s\n", lp, strerror(errno));
    }
  }
  nb_Buf b = {0};
  nbB_add(&b, path, strlen(path) + 1);
  for (int k = first_arg; k < argc; k++) nbB_add(&b, argv[k], strlen(argv[k]) + 1);
  run_vm = vm;
  dsess_Reply *rep;
  int which;
  int rst = dsess_run_all(vm, b.p, b.n, &rep, &which, !only_rank0, fds);
  nbB_free(&b);
  if (rst) {
    fprintf(stderr, "nabla run: out of memory\n");
    run_vm = NULL; dsess_stop(); nb_vm_free(vm);
    if (fds) { for (int k = 0; k < n; k++) if (fds[k] >= 0) close(fds[k]); free(fds); }
    return 1;
  }
  int worst = 0;
  RankEnd *ends = calloc((size_t)n, sizeof *ends);   /* for the closing summary (NULL: none) */
  for (int k = 0; k < n; k++) {
    int st = 0;
    RankEnd dummy, *e = ends ? &ends[k] : &dummy;
    memset(e, 0, sizeof *e);
    dsess_WorkerInfo w; dsess_worker_info(k, &w);
    if (w.dead && !(rep[k].got && rep[k].body)) {
      int ws = w.status;
      st = WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : (WIFEXITED(ws) && WEXITSTATUS(ws) ? WEXITSTATUS(ws) : 1);
      if (WIFSIGNALED(ws)) snprintf(e->how, sizeof e->how, "signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
      else snprintf(e->how, sizeof e->how, "exit code %d", st);
      snprintf(e->first, sizeof e->first, "(the process died without an error report)");
    } else if (!rep[k].got) {
      st = 1;
      snprintf(e->how, sizeof e->how, "no reply");
      snprintf(e->first, sizeof e->first, "(the worker did not answer)");
    } else if (!rep[k].ok) {
      st = 1;
      snprintf(e->how, sizeof e->how, "exit code 1 (error)");
      if (!rep[k].body) { e->status = st; if (st > worst) worst = st; continue; }
      const char *name = rep[k].body, *end = rep[k].body + rep[k].len;
      const char *msg = name + strlen(name) + 1;
      if (msg > end) msg = end;
      const char *report = msg < end ? msg + strlen(msg) + 1 : end;
      if (report > end) report = msg;
      first_line(e->first, sizeof e->first, name, msg);
      e->stopped = k != which && !strcmp(name, "Interrupted");
      if (k == which || strcmp(name, "Interrupted")) {
        fflush(stdout);
        char pre[32]; snprintf(pre, sizeof pre, "[rank %d] ", k);
        for (const char *p = report; *p; ) {
          const char *nl = strchr(p, '\n'); size_t len = nl ? (size_t)(nl - p) : strlen(p);
          fprintf(stderr, "%s%.*s\n", pre, (int)len, p);
          if (fds && fds[k] >= 0 && (write(fds[k], p, len) < 0 || write(fds[k], "\n", 1) < 0)) {}
          p += len + (nl ? 1 : 0);
        }
      }
    }
    e->status = st;
    if (st > worst) worst = st;
  }
  *failed = worst != 0;
  if (ends && worst) print_summary(path, n, ends, which);
  free(ends);
  fflush(stdout);
  dsess_replies_free(rep, n);
  run_vm = NULL;
  dsess_stop();
  nb_vm_free(vm);
  if (fds) { for (int k = 0; k < n; k++) if (fds[k] >= 0) close(fds[k]); free(fds); }
  return worst;
}

int nbD_run_main(int argc, char **argv) {
  int n = 2; int i = 1;
  dsess_Launch o; memset(&o, 0, sizeof o);
  snprintf(o.launcher, sizeof o.launcher, "local"); snprintf(o.backend, sizeof o.backend, "auto");
  o.timeout = 300; o.heartbeat = 10;
  int bad = 0, only_rank0 = 0, max_restarts = 0, min_workers = 0;
  const char *log_dir = NULL;
  for (; i < argc && argv[i][0] == '-' && !bad; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--only-rank0")) { only_rank0 = 1; continue; }
    if (!v) { bad = 1; break; }
    if (!strcmp(a, "-n")) bad = int_opt("-n", v, 1, 1024, &n);
    else if (!strcmp(a, "--timeout")) o.timeout = atof(v);
    else if (!strcmp(a, "--heartbeat")) o.heartbeat = atof(v);
    else if (!strcmp(a, "--launcher")) snprintf(o.launcher, sizeof o.launcher, "%s", v);
    else if (!strcmp(a, "--backend")) snprintf(o.backend, sizeof o.backend, "%s", v);
    else if (!strcmp(a, "--bind")) snprintf(o.bind, sizeof o.bind, "%s", v);
    else if (!strcmp(a, "--ssh-port")) bad = int_opt("--ssh-port", v, 1, 65535, &o.ssh_port);
    else if (!strcmp(a, "--ssh-key")) { free(o.ssh_key); o.ssh_key = strdup(v); }
    else if (!strcmp(a, "--nodes")) o.nodes = atoi(v);
    else if (!strcmp(a, "--gpus-per-node")) o.gpus_per_node = atoi(v);
    else if (!strcmp(a, "--connect-timeout")) bad = int_opt("--connect-timeout", v, 1, 3600, &o.connect_timeout);
    else if (!strcmp(a, "--threads-per-worker")) bad = int_opt("--threads-per-worker", v, 1, 4096, &o.threads_per_worker);
    else if (!strcmp(a, "--max-restarts")) bad = int_opt("--max-restarts", v, 0, 1000, &max_restarts);
    else if (!strcmp(a, "--min-workers")) bad = int_opt("--min-workers", v, 1, 1024, &min_workers);
    else if (!strcmp(a, "--log-dir")) log_dir = v;
    else if (!strcmp(a, "--ifname") || !strcmp(a, "--ports")) {
      if (strlen(v) >= sizeof o.ifname) { fprintf(stderr, "nabla run: %s \"%s\" is too long\n", a, v); bad = 1; }
      else snprintf(a[2] == 'i' ? o.ifname : o.ports, sizeof o.ifname, "%s", v);
    }
    else if (!strcmp(a, "--env")) bad = push(&o.env, &o.nenv, v);
    else if (!strcmp(a, "--exclude")) bad = push(&o.exclude, &o.nexclude, v);
    else if (!strcmp(a, "--ssh-option")) bad = push(&o.ssh_opts, &o.nssh_opts, v);
    else if (!strcmp(a, "--hosts")) {
      char *copy = strdup(v), *save = NULL;
      for (char *t = strtok_r(copy, ", ", &save); t && !bad; t = strtok_r(NULL, ", ", &save)) bad = push(&o.hosts, &o.nhosts, t);
      free(copy);
    } else bad = 1;
    i++;
  }
  if (bad || i >= argc) { fputs(RUN_USAGE, stderr); dsess_launch_free(&o); return 2; }
  char path[PATH_MAX];
  if (!realpath(argv[i], path)) { fprintf(stderr, "nabla run: cannot open %s: %s\n", argv[i], strerror(errno)); dsess_launch_free(&o); return 2; }
  if (log_dir) {
    if (mkdir(log_dir, 0755) && errno != EEXIST) { fprintf(stderr, "nabla run: cannot create --log-dir %s: %s\n", log_dir, strerror(errno)); dsess_launch_free(&o); return 2; }
    for (int k = 0; k < n; k++) {   /* fresh logs for this run; restarts append */
      char lp[PATH_MAX]; snprintf(lp, sizeof lp, "%s/rank-%d.log", log_dir, k);
      int fd = open(lp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) { fprintf(stderr, "nabla run: cannot write %s: %s\n", lp, strerror(errno)); dsess_launch_free(&o); return 2; }
      close(fd);
    }
  }
  nbD_init();
  {
    nb_VM *vm = nb_vm_new(nb_stdio_sink());
    int st = dsess_env_values(vm, "nabla run", o.env, o.nenv);
    if (st) { nbE_finish(vm); const nb_ErrorInfo *e = nb_last_error(vm); fprintf(stderr, "%s\n", e ? e->message : "bad --env"); }
    nb_vm_free(vm);
    if (st) { dsess_launch_free(&o); return 2; }
  }
  /* Ctrl-C interrupts the VM, whose wait then interrupts the workers */
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = run_sigint; sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  int worst = 0;
  for (int r = 0; ; r++) {
    char rc[16]; snprintf(rc, sizeof rc, "%d", r);
    setenv("NABLA_RESTART_COUNT", rc, 1);   /* forwarded to ssh workers (NABLA_*), inherited by local ones */
    int failed, started;
    worst = attempt(n, &o, path, argc, argv, i + 1, only_rank0, log_dir, &failed, &started);
    if (!failed || run_interrupted || r >= max_restarts) break;
    /* the whole group again, leaving out the hosts that failed to start */
    nb_VM *vm = nb_vm_new(nb_stdio_sink());
    int m = n;
    int st = dsess_plan_restart(vm, "nabla run", &o, &m, NULL, 0, min_workers);
    if (st) { nbE_finish(vm); const nb_ErrorInfo *e = nb_last_error(vm); fprintf(stderr, "nabla run: cannot restart: %s\n", e ? e->message : "?"); }
    nb_vm_free(vm);
    if (st) break;
    fprintf(stderr, "nabla run: restarting the group (restart %d of %d) with %d worker%s%s\n", r + 1, max_restarts, m, m > 1 ? "s" : "",
            o.nexclude ? ", leaving out the hosts that failed" : "");
    n = m;
  }
  dsess_launch_free(&o);
  return worst;
}
