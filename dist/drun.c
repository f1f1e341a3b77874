/*
** drun.c — `nabla run [-n N] ... SCRIPT.nbl ARGS`: starts a session of N
** workers (dsession.c), runs the script on every one of them, shows every
** rank's output with each line prefixed "[rank N] " (as torchrun --tee;
** --only-rank0: rank 0's output as the program's own, the others' errors
** only), --log-dir DIR writes each rank's output to DIR/rank-N.log, and
** exits with the worst status of the ranks.  --max-restarts N (torchrun's
** name) starts the whole group again when a rank fails, with
** NABLA_RESTART_COUNT set; --min-workers M lets a restart go on with the
** hosts that are left (dsessionplan.c: lost hosts are probed, never
** retried blindly, and no host gets more than its slots).
**
** Elastic membership (--max-workers X, or --nnodes MIN:MAX hosts): while the
** group is smaller than X, a watcher thread probes the lost hosts every
** couple of seconds; when one answers, the session asks the workers to
** regroup, they stop together at their next dist.save_checkpoint (a
** DistRegroup error on every rank, agreed over the ring), and the group
** starts again at the size the hosts now hold, resuming from that
** checkpoint.  A regroup is not a failure: it spends no --max-restarts.
** The watcher (dwatch.c) asks ssh hosts by ssh and Slurm nodes by scontrol.
** --rdzv [HOST:]PORT --rdzv-key FILE (drdzv.c): hosts not in --hosts ask to
** join (`nabla join`, with the job's key) and are added at the next regroup.
**
** Inside a Slurm allocation, -n, --nodes and the launcher default to the
** allocation's (SLURM_NTASKS, SLURM_JOB_NUM_NODES); `srun nabla run` (a task
** of a job step of several tasks) is refused with a clear error instead of
** starting one world-1 job per task.  A small program on top of the session
** controller, kept apart from the builtins that share it.
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
#include "dist/dlaunch.h"
#include "dist/dwatch.h"
#include "dist/drdzv.h"
#include <openssl/crypto.h>

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
  "                 [--max-workers X] [--nnodes MIN:MAX] [--slots-per-host S]\n"
  "                 [--rdzv [HOST:]PORT --rdzv-key FILE]\n"
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
/* whether the group ended in a regroup: the first rank to end raised
** DistRegroup (dist.save_checkpoint, agreed by every rank), and every rank
** answered with it or was interrupted by it — none died or failed otherwise */
static int is_regroup(const dsess_Reply *rep, int n, int which) {
  if (which < 0 || !rep[which].got || rep[which].ok || !rep[which].body || strcmp(rep[which].body, "DistRegroup")) return 0;
  for (int k = 0; k < n; k++) {
    dsess_WorkerInfo w; dsess_worker_info(k, &w);
    if (w.dead || !rep[k].got || rep[k].ok || !rep[k].body) return 0;
    if (strcmp(rep[k].body, "DistRegroup") && strcmp(rep[k].body, "Interrupted")) return 0;
  }
  return 1;
}

static int attempt(int n, const dsess_Launch *o, const char *path, int argc, char **argv, int first_arg,
                   int only_rank0, const char *log_dir, int want, int *failed, int *started, int *regroup) {
  *failed = 0; *started = 0; *regroup = 0;
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
  dw_Watch watch;
  dw_start(&watch, o, n, want, "nabla run");
  int rst = dsess_run_all(vm, b.p, b.n, &rep, &which, !only_rank0, fds);
  dw_stop(&watch);
  nbB_free(&b);
  if (rst) {
    fprintf(stderr, "nabla run: out of memory\n");
    run_vm = NULL; dsess_stop(); nb_vm_free(vm);
    if (fds) { for (int k = 0; k < n; k++) if (fds[k] >= 0) close(fds[k]); free(fds); }
    return 1;
  }
  if (is_regroup(rep, n, which)) {
    const char *msg = rep[which].body + strlen(rep[which].body) + 1;
    fflush(stdout);
    fprintf(stderr, "nabla run: %s\n", msg <= rep[which].body + rep[which].len ? msg : "regrouping");
    *regroup = 1;
    dsess_replies_free(rep, n);
    run_vm = NULL; dsess_stop(); nb_vm_free(vm);
    if (fds) { for (int k = 0; k < n; k++) if (fds[k] >= 0) close(fds[k]); free(fds); }
    return 0;
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

/* "MIN:MAX" or "N" (--nnodes): 0 or -1 */
static int range_opt(const char *v, int *lo, int *hi) {
  char *end; errno = 0;
  long a = strtol(v, &end, 10), b = a;
  if (*end == ':') b = strtol(end + 1, &end, 10);
  if (errno || *end || a < 1 || b < a || b > 1024) { fprintf(stderr, "nabla run: --nnodes must be N or MIN:MAX (1 <= MIN <= MAX <= 1024), got \"%s\"\n", v); return -1; }
  *lo = (int)a; *hi = (int)b;
  return 0;
}

/* an environment variable holding a positive integer (0: unset or not one) */
static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end; long x = strtol(v, &end, 10);
  if ((*end && *end != '(') || x < 1 || x > 1024) return 0;   /* SLURM_TASKS_PER_NODE style "2(x3)": not one */
  return (int)x;
}

/* `srun nabla run ...`: every task of the step would start its own world of
** workers and write one checkpoint.  A task of a job step of several tasks
** is refused (task 0 says why); 1 when refused. */
static int refuse_srun_task(void) {
  if (!getenv("SLURM_STEP_ID") || !getenv("SLURM_PROCID")) return 0;
  int tasks = env_int("SLURM_STEP_NUM_TASKS");
  if (!tasks) tasks = env_int("SLURM_NTASKS");
  if (tasks <= 1) return 0;
  if (env_int("SLURM_PROCID") == 0 && !strcmp(getenv("SLURM_PROCID"), "0"))
    fprintf(stderr, "nabla run: started by srun as one of %d tasks (SLURM_PROCID %s, step %s): each task would run its own job of workers.\n"
            "  Run nabla run once, inside the allocation (salloc/sbatch), without srun: it starts one srun step whose %d tasks are the workers\n"
            "  (nabla run --launcher slurm; -n and --nodes default to the allocation's). Nothing was started.\n",
            tasks, getenv("SLURM_PROCID"), getenv("SLURM_STEP_ID"), tasks);
  return 1;
}

int nbD_run_main(int argc, char **argv) {
  int n = 2; int i = 1;
  dsess_Launch o; memset(&o, 0, sizeof o);
  snprintf(o.launcher, sizeof o.launcher, "local"); snprintf(o.backend, sizeof o.backend, "auto");
  o.timeout = 300; o.heartbeat = 10;
  int bad = 0, only_rank0 = 0, max_restarts = 0, min_workers = 0, max_workers = 0, nn_lo = 0, nn_hi = 0;
  int gave_n = 0, gave_launcher = 0, gave_nodes = 0;
  const char *log_dir = NULL, *rdzv = NULL, *rdzv_key = NULL;
  if (refuse_srun_task()) return 2;
  for (; i < argc && argv[i][0] == '-' && !bad; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--only-rank0")) { only_rank0 = 1; continue; }
    if (!v) { bad = 1; break; }
    if (!strcmp(a, "-n")) { bad = int_opt("-n", v, 1, 1024, &n); gave_n = 1; }
    else if (!strcmp(a, "--timeout")) o.timeout = atof(v);
    else if (!strcmp(a, "--heartbeat")) o.heartbeat = atof(v);
    else if (!strcmp(a, "--launcher")) { snprintf(o.launcher, sizeof o.launcher, "%s", v); gave_launcher = 1; }
    else if (!strcmp(a, "--backend")) snprintf(o.backend, sizeof o.backend, "%s", v);
    else if (!strcmp(a, "--bind")) snprintf(o.bind, sizeof o.bind, "%s", v);
    else if (!strcmp(a, "--ssh-port")) bad = int_opt("--ssh-port", v, 1, 65535, &o.ssh_port);
    else if (!strcmp(a, "--ssh-key")) { free(o.ssh_key); o.ssh_key = strdup(v); }
    else if (!strcmp(a, "--nodes")) { bad = int_opt("--nodes", v, 1, 1024, &o.nodes); gave_nodes = 1; }
    else if (!strcmp(a, "--gpus-per-node")) bad = int_opt("--gpus-per-node", v, 1, 1024, &o.gpus_per_node);
    else if (!strcmp(a, "--connect-timeout")) bad = int_opt("--connect-timeout", v, 1, 3600, &o.connect_timeout);
    else if (!strcmp(a, "--threads-per-worker")) bad = int_opt("--threads-per-worker", v, 1, 4096, &o.threads_per_worker);
    else if (!strcmp(a, "--max-restarts")) bad = int_opt("--max-restarts", v, 0, 1000, &max_restarts);
    else if (!strcmp(a, "--min-workers")) bad = int_opt("--min-workers", v, 1, 1024, &min_workers);
    else if (!strcmp(a, "--max-workers")) bad = int_opt("--max-workers", v, 1, 1024, &max_workers);
    else if (!strcmp(a, "--slots-per-host")) bad = int_opt("--slots-per-host", v, 1, 1024, &o.slots);
    else if (!strcmp(a, "--nnodes")) bad = range_opt(v, &nn_lo, &nn_hi);
    else if (!strcmp(a, "--log-dir")) log_dir = v;
    else if (!strcmp(a, "--rdzv")) { if (strlen(v) > 120) bad = 1; else rdzv = v; }
    else if (!strcmp(a, "--rdzv-key")) rdzv_key = v;
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
  /* inside a Slurm allocation (salloc, sbatch): its tasks and nodes */
  if (getenv("SLURM_JOB_ID") && !gave_launcher && !o.nhosts) {
    snprintf(o.launcher, sizeof o.launcher, "slurm");
    fprintf(stderr, "nabla run: inside Slurm job %s: launcher slurm (--launcher local runs the workers here)\n", getenv("SLURM_JOB_ID"));
  }
  if (!strcmp(o.launcher, "slurm")) {
    int tasks = env_int("SLURM_NTASKS"), nodes = env_int("SLURM_JOB_NUM_NODES");
    if (!nodes) nodes = env_int("SLURM_NNODES");
    if (!gave_n && tasks) n = tasks;
    if (!gave_nodes && nodes) o.nodes = nodes < n ? nodes : n;
  }
  /* elastic sizes: --nnodes counts hosts (or nodes) of --slots-per-host workers */
  if (nn_hi) {
    int per = o.slots > 0 ? o.slots : gave_n ? (n + nn_hi - 1) / nn_hi : 1;
    o.slots = per;
    if (!min_workers) min_workers = nn_lo * per;
    if (!max_workers) max_workers = nn_hi * per;
  }
  if (max_workers && min_workers > max_workers) { fprintf(stderr, "nabla run: --min-workers %d is more than --max-workers %d\n", min_workers, max_workers); dsess_launch_free(&o); return 2; }
  int want = max_workers ? max_workers : n;
  if (max_workers && !gave_n) n = want;
  if (!min_workers) min_workers = max_workers ? 1 : n;   /* not elastic: a restart keeps the size (or fails saying why) */
  if (strcmp(o.launcher, "local")) o.slots = dsess_default_slots(&o, want);
  if (!strcmp(o.launcher, "ssh") && o.slots * (long)(o.nhosts - o.nexclude) < min_workers) {
    fprintf(stderr, "nabla run: %d hosts of %d slots hold fewer than --min-workers %d\n", o.nhosts - o.nexclude, o.slots, min_workers);
    dsess_launch_free(&o); return 2;
  }
  if (n > want) n = want;
  if ((rdzv || rdzv_key) && (!rdzv || !rdzv_key || strcmp(o.launcher, "ssh") || !max_workers)) {
    fprintf(stderr, "nabla run: --rdzv [HOST:]PORT needs --rdzv-key FILE, --launcher ssh and --max-workers (or --nnodes MIN:MAX): joiners are hosts the job reaches by ssh, up to that size\n");
    dsess_launch_free(&o); return 2;
  }
  char path[PATH_MAX];
  if (!realpath(argv[i], path)) { fprintf(stderr, "nabla run: cannot open %s: %s\n", argv[i], strerror(errno)); dsess_launch_free(&o); return 2; }
  if (log_dir) {
    if (mkdir(log_dir, 0755) && errno != EEXIST) { fprintf(stderr, "nabla run: cannot create --log-dir %s: %s\n", log_dir, strerror(errno)); dsess_launch_free(&o); return 2; }
    for (int k = 0; k < want; k++) {   /* fresh logs for this run; restarts append */
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
  /* the rendezvous: hosts not in --hosts ask to join (nabla join); admitted
  ** ones join the plan at the next regroup, up to --max-workers */
  dz_Rdzv rz; memset(&rz, 0, sizeof rz);
  if (rdzv) {
    unsigned char key[DP_KEYLEN]; char why[400];
    int room = (want + o.slots - 1) / o.slots - (o.nhosts - o.nexclude);
    int st = dz_key_file(rdzv_key, 1, key, why, sizeof why);
    if (!st) st = dz_open(&rz, rdzv, key, o.hosts, o.nhosts, room, why, sizeof why);
    OPENSSL_cleanse(key, sizeof key);
    if (st) { fprintf(stderr, "nabla run: %s\n", why); dsess_launch_free(&o); return 2; }
    fprintf(stderr, "nabla run: rendezvous on %s: hosts join with `nabla join THIS_HOST:PORT --key %s` (room for %d more host%s)\n",
            rdzv, rdzv_key, room > 0 ? room : 0, room == 1 ? "" : "s");
  }
  int worst = 0, free_tries = 0, regroups = 0;
  for (int r = 0; ; ) {
    char rc[16]; snprintf(rc, sizeof rc, "%d", r);
    setenv("NABLA_RESTART_COUNT", rc, 1);   /* forwarded to ssh workers (NABLA_*), inherited by local ones */
    int failed, started, regroup;
    worst = attempt(n, &o, path, argc, argv, i + 1, only_rank0, log_dir, want, &failed, &started, &regroup);
    if (run_interrupted) break;
    /* why the next start: a regroup (a host came back), a start that failed
    ** on hosts now known lost (not the script's failure: neither spends a
    ** restart, each bounded), or a failure (a restart) */
    const char *why;
    if (regroup && regroups < 1000) { why = "regroup"; regroups++; }
    else if (!started && dsess_failed_hosts()[0] && strcmp(o.launcher, "local") && free_tries < 64) { why = "hosts"; free_tries++; }
    else if (!failed || r >= max_restarts) break;
    else { why = "restart"; r++; }
    char *joined[DZ_MAX_JOINS];
    int nj = dz_take(&rz, joined, DZ_MAX_JOINS);
    for (int k = 0; k < nj; k++) { if (push(&o.hosts, &o.nhosts, joined[k])) fprintf(stderr, "nabla run: out of memory adding host %s\n", joined[k]); free(joined[k]); }
    nb_VM *vm = nb_vm_new(nb_stdio_sink());
    int m = n;
    int st = dsess_plan_restart(vm, "nabla run", &o, want, &m, NULL, 0, 0, min_workers);
    if (st) { nbE_finish(vm); const nb_ErrorInfo *e = nb_last_error(vm); fprintf(stderr, "nabla run: cannot restart: %s\n", e ? e->message : "?"); }
    nb_vm_free(vm);
    if (st) { if (!worst) worst = 1; break; }
    char lost[256] = "";
    for (int k = 0, l = 0; k < o.nlost && l < (int)sizeof lost - 40; k++) l += snprintf(lost + l, sizeof lost - (size_t)l, "%s%s", k ? ", " : "", o.nlost > 0 ? o.lost[k] : "");
    if (!strcmp(why, "restart"))
      fprintf(stderr, "nabla run: restarting the group (restart %d of %d) with %d worker%s%s%s\n", r, max_restarts, m, m > 1 ? "s" : "",
              o.nlost ? ", leaving out the lost hosts: " : "", lost);
    else
      fprintf(stderr, "nabla run: %s the group with %d worker%s (was %d)%s%s\n", !strcmp(why, "regroup") ? "regrouping" : "starting again without the unreachable hosts:",
              m, m > 1 ? "s" : "", n, o.nlost ? "; lost hosts: " : "", lost);
    n = m;
  }
  if (rdzv) dz_close(&rz);
  dsess_launch_free(&o);
  return worst;
}
