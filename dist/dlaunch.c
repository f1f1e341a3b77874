/*
** dlaunch.c — the launchers: local (fork + exec), ssh and Slurm (see dlaunch.h).
**
** The key goes to the launcher's standard input through a socketpair (so a
** launcher that exits early cannot SIGPIPE the session); the launcher is
** started in its own process group (the terminal's Ctrl-C goes to the
** session, which relays interrupts as control messages) and with
** PR_SET_PDEATHSIG, so it dies with the session: ssh's connection then
** closes, and the remote worker loses its parent, its control connection
** and its heartbeats.
*/
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include "dist/dlaunch.h"
#include "util/clock.h"

extern char **environ;

int dl_self_exe(char *buf, size_t cap, int must_exist, char *why, size_t whycap) {
  ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
  if (n <= 0) { snprintf(why, whycap, "cannot find the nabla executable (/proc/self/exe: %s)", strerror(errno)); return -1; }
  buf[n] = 0;
  static const char deleted[] = " (deleted)";
  size_t dl = sizeof deleted - 1;
  int gone = (size_t)n > dl && !strcmp(buf + n - dl, deleted);
  if (gone) buf[n - dl] = 0;
  if (must_exist && gone && access(buf, X_OK))
    { snprintf(why, whycap, "remote workers run the nabla executable by its path, %s, and it is no longer there (rebuilt or removed since this nabla started): give remote_nabla=PATH, or restart nabla", buf); return -1; }
  return 0;
}

pid_t dl_spawn_local(dl_Common *c, const char *exe, const char *endpoint, const char *keyfile, const char *bind, int rank) {
  int threads = c->threads, nextra = c->nenv;
  char *const *extra = c->env;
  char rank_s[16], world_s[16], to_s[32], hb_s[32], nthreads[24], omp[64], blas[64];
  snprintf(rank_s, sizeof rank_s, "%d", rank);
  snprintf(world_s, sizeof world_s, "%d", c->world);
  snprintf(to_s, sizeof to_s, "%d", c->timeout_ms);
  snprintf(hb_s, sizeof hb_s, "%g", c->heartbeat_s);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN); if (cpus < 1) cpus = 1;
  long per = threads > 0 ? threads : cpus / c->world; if (per < 1) per = 1;
  snprintf(nthreads, sizeof nthreads, "%ld", per);
  snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%s", nthreads);
  snprintf(blas, sizeof blas, "OPENBLAS_NUM_THREADS=%s", nthreads);
  char *argv[] = { (char *)exe, "worker", "--connect", (char *)endpoint, "--key-file", (char *)keyfile, "--rank", rank_s,
                   "--local-rank", rank_s, "--world", world_s, "--timeout-ms", to_s, "--heartbeat", hb_s, "--bind", (char *)bind, NULL };
  /* the environment, with thread counts split between the workers unless set */
  int ne = 0; while (environ[ne]) ne++;
  char **envp = malloc(sizeof(char *) * (size_t)(ne + 4 + nextra));
  if (!envp) return -1;
  int k = 0;
  for (int i = 0; i < ne; i++) {   /* extra ones replace the same name */
    const char *eq = strchr(environ[i], '=');
    size_t nl = eq ? (size_t)(eq - environ[i]) + 1 : strlen(environ[i]);
    int over = 0;
    for (int j = 0; j < nextra; j++) if (!strncmp(environ[i], extra[j], nl)) over = 1;
    if (threads > 0 && (!strncmp(environ[i], "OMP_NUM_THREADS=", 16) || !strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21))) over = 1;
    if (!over) envp[k++] = environ[i];
  }
  for (int j = 0; j < nextra; j++) envp[k++] = (char *)extra[j];
  if (threads > 0 || !getenv("OMP_NUM_THREADS")) envp[k++] = omp;
  if (threads > 0 || !getenv("OPENBLAS_NUM_THREADS")) envp[k++] = blas;
  if (!getenv("OMP_WAIT_POLICY")) envp[k++] = "OMP_WAIT_POLICY=PASSIVE";
  envp[k] = NULL;
  c->out_fd[0] = c->out_fd[1] = -1;   /* a local worker writes to the session's stdout/stderr itself */
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    /* only async-signal-safe calls from here to exec */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);               /* the terminal's Ctrl-C goes to the session, which relays it */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) { dup2(devnull, 0); close(devnull); }
    execve("/proc/self/exe", argv, envp);   /* this binary, whatever is at its path now */
    execve(exe, argv, envp);                /* no /proc */
    _exit(127);
  }
  free(envp);
  return pid;
}

/* appends arg to the remote command line, single-quoted for the remote shell */
static void quote(char *dst, size_t cap, const char *arg) {
  size_t n = strlen(dst);
  if (n + 1 < cap) { dst[n++] = ' '; }
  if (n + 1 < cap) dst[n++] = '\'';
  for (const char *p = arg; *p && n + 5 < cap; p++) {
    if (*p == '\'') { memcpy(dst + n, "'\\''", 4); n += 4; }
    else dst[n++] = *p;
  }
  if (n + 1 < cap) dst[n++] = '\'';
  dst[n < cap ? n : cap - 1] = 0;
}

/* The descriptor for the launcher's stderr that ssh may make non-blocking
** without touching the session's own: the session's stderr itself where
** O_NONBLOCK means nothing (a terminal, where ssh leaves it alone; a
** regular file), a fresh open file description of the same pipe (a FIFO:
** the flag is per description), else -1 (a socket...: a pipe the session
** relays).  Going straight to stderr keeps a remote worker's last words
** visible when the session is stopped or killed and cannot relay them. */
static int own_stderr(void) {
  struct stat st;
  if (fstat(2, &st)) return -1;
  if (isatty(2) || S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) return fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (S_ISFIFO(st.st_mode)) {
    /* O_NONBLOCK for the open only: a FIFO opened for writing waits for a
    ** reader without it (ENXIO instead, when the reader is gone) */
    int fd = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
  }
  return -1;
}

/* fork + exec argv with the key on stdin; its stdout to a pipe of its own,
** its stderr to own_stderr() or a pipe (c->out_fd: the read ends) */
static pid_t spawn_with_key(dl_Common *c, char **argv) {
  int sp[2], po[2] = { -1, -1 }, pe[2] = { -1, -1 }, err2 = own_stderr();
  c->out_fd[0] = c->out_fd[1] = -1;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp)) {
    snprintf(c->err, sizeof c->err, "socketpair: %s", strerror(errno));
    if (err2 >= 0) close(err2);
    return -1;
  }
  if (pipe2(po, O_CLOEXEC) || (err2 < 0 && pipe2(pe, O_CLOEXEC))) {
    snprintf(c->err, sizeof c->err, "pipe: %s", strerror(errno));
    close(sp[0]); close(sp[1]);
    for (int i = 0; i < 2; i++) { if (po[i] >= 0) close(po[i]); if (pe[i] >= 0) close(pe[i]); }
    if (err2 >= 0) close(err2);
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);
    dup2(sp[1], 0);            /* dup2 clears close-on-exec on fds 0, 1, 2 */
    dup2(po[1], 1);
    dup2(err2 >= 0 ? err2 : pe[1], 2);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(sp[1]); close(po[1]);
  if (pe[1] >= 0) close(pe[1]);
  if (err2 >= 0) close(err2);
  if (pid < 0) {
    snprintf(c->err, sizeof c->err, "fork: %s", strerror(errno));
    close(sp[0]); close(po[0]);
    if (pe[0] >= 0) close(pe[0]);
    return -1;
  }
  /* the session's end never blocks: it reads what is there between messages */
  fcntl(po[0], F_SETFL, O_NONBLOCK);
  if (pe[0] >= 0) fcntl(pe[0], F_SETFL, O_NONBLOCK);
  c->out_fd[0] = po[0]; c->out_fd[1] = pe[0];
  size_t len = strlen(c->key_hex), off = 0;
  while (off < len) {
    ssize_t k = send(sp[0], c->key_hex + off, len - off, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;          /* the launcher is gone already: it will be reaped and reported */
    off += (size_t)k;
  }
  shutdown(sp[0], SHUT_WR);
  close(sp[0]);
  return pid;
}

static void worker_args(dl_Common *c, char *cmd, size_t cap, const char *endpoint) {
  char num[32];
  quote(cmd, cap, "worker");
  quote(cmd, cap, "--connect"); quote(cmd, cap, endpoint);
  quote(cmd, cap, "--key-stdin");
  snprintf(num, sizeof num, "%d", c->world); quote(cmd, cap, "--world"); quote(cmd, cap, num);
  snprintf(num, sizeof num, "%d", c->timeout_ms); quote(cmd, cap, "--timeout-ms"); quote(cmd, cap, num);
  snprintf(num, sizeof num, "%g", c->heartbeat_s); quote(cmd, cap, "--heartbeat"); quote(cmd, cap, num);
  quote(cmd, cap, "--bind"); quote(cmd, cap, c->worker_bind);
}

int dl_forward_by_default(const char *v) {
  static const char *const suffixes[] = { "_VISIBLE_DEVICES=" };   /* CUDA_, HIP_, ROCR_, ZE_AFFINITY is not one */
  if (!strncmp(v, "NCCL_", 5) || !strncmp(v, "NABLA_", 6)) return 1;
  const char *eq = strchr(v, '=');
  if (!eq) return 0;
  for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
    size_t sl = strlen(suffixes[i]) - 1;
    if ((size_t)(eq - v) >= sl && !strncmp(eq - sl, suffixes[i], sl)) return 1;
  }
  return 0;
}

/* whether NAME=... is a variable name the remote shell accepts */
static int env_name_ok(const char *v) {
  const char *eq = strchr(v, '=');
  if (!eq || eq == v) return 0;
  for (const char *p = v; p < eq; p++)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '_' || (p > v && *p >= '0' && *p <= '9'))) return 0;
  return 1;
}

#define SSH_CMD_MAX 65536
pid_t dl_spawn_ssh(dl_Common *c, const char *host, int port, const char *identity,
                   char *const *extra_opts, int nextra, const char *endpoint, int rank, int local_rank) {
  char *cmd = calloc(1, SSH_CMD_MAX), num[32];
  if (!cmd) { snprintf(c->err, sizeof c->err, "out of memory"); return -1; }
  /* the remote environment: NCCL_*, NABLA_*, *_VISIBLE_DEVICES from here, then
  ** what was asked for (later ones win, as env(1) applies them in order) */
  snprintf(cmd, SSH_CMD_MAX, "env");
  for (char **e = environ; *e; e++) if (dl_forward_by_default(*e) && env_name_ok(*e)) quote(cmd, SSH_CMD_MAX, *e);
  for (int i = 0; i < c->nenv; i++) {
    if (!env_name_ok(c->env[i])) { snprintf(c->err, sizeof c->err, "env: \"%.200s\" is not NAME=VALUE with a valid variable name", c->env[i]); free(cmd); return -1; }
    quote(cmd, SSH_CMD_MAX, c->env[i]);
  }
  if (c->threads > 0) {
    snprintf(num, sizeof num, "%d", c->threads);
    char t[64];
    snprintf(t, sizeof t, "OMP_NUM_THREADS=%d", c->threads); quote(cmd, SSH_CMD_MAX, t);
    snprintf(t, sizeof t, "OPENBLAS_NUM_THREADS=%d", c->threads); quote(cmd, SSH_CMD_MAX, t);
  }
  quote(cmd, SSH_CMD_MAX, "OMP_WAIT_POLICY=PASSIVE");
  quote(cmd, SSH_CMD_MAX, c->exe);
  worker_args(c, cmd, SSH_CMD_MAX, endpoint);
  snprintf(num, sizeof num, "%d", rank); quote(cmd, SSH_CMD_MAX, "--rank"); quote(cmd, SSH_CMD_MAX, num);
  snprintf(num, sizeof num, "%d", local_rank); quote(cmd, SSH_CMD_MAX, "--local-rank"); quote(cmd, SSH_CMD_MAX, num);
  if (c->threads <= 0 && c->share > 0) {   /* the worker divides its own host's cores */
    snprintf(num, sizeof num, "%d", c->share); quote(cmd, SSH_CMD_MAX, "--threads-share"); quote(cmd, SSH_CMD_MAX, num);
  }
  if (strlen(cmd) > SSH_CMD_MAX - 64) {   /* quote() truncates: never run a cut command line */
    snprintf(c->err, sizeof c->err, "the worker's command line for host %s is over %d bytes (too many or too long forwarded variables)", host, SSH_CMD_MAX - 64);
    free(cmd); return -1;
  }

  char ports[16]; snprintf(ports, sizeof ports, "%d", port);
  char cto[48]; snprintf(cto, sizeof cto, "ConnectTimeout=%d", c->connect_timeout > 0 ? c->connect_timeout : 10);
  int cap = 24 + nextra, k = 0;
  char **argv = calloc((size_t)cap, sizeof(char *));
  if (!argv) { snprintf(c->err, sizeof c->err, "out of memory"); free(cmd); return -1; }
  argv[k++] = "ssh";
  argv[k++] = "-T";                       /* no terminal: the worker's output goes through the control channel */
  argv[k++] = "-x";
  argv[k++] = "-o"; argv[k++] = "BatchMode=yes";
  /* a host that is down fails in seconds, not after the TCP retries (~2 min) */
  argv[k++] = "-o"; argv[k++] = cto;
  argv[k++] = "-o"; argv[k++] = "ServerAliveInterval=5";
  if (port > 0) { argv[k++] = "-p"; argv[k++] = ports; }
  if (identity && *identity) { argv[k++] = "-i"; argv[k++] = (char *)identity; argv[k++] = "-o"; argv[k++] = "IdentitiesOnly=yes"; }
  for (int i = 0; i < nextra; i++) argv[k++] = extra_opts[i];
  argv[k++] = "--";
  argv[k++] = (char *)host;
  argv[k++] = cmd;
  argv[k] = NULL;
  pid_t pid = spawn_with_key(c, argv);
  free(argv);
  free(cmd);
  return pid;
}

void dl_probe_ssh(char *const *hosts, int n, int port, const char *identity, char *const *extra_opts, int nextra,
                  int connect_timeout, int *ok) {
  int ct = connect_timeout > 0 ? connect_timeout : 10;
  char ports[16], cto[48];
  snprintf(ports, sizeof ports, "%d", port);
  snprintf(cto, sizeof cto, "ConnectTimeout=%d", ct);
  pid_t *pids = calloc(n > 0 ? (size_t)n : 1, sizeof(pid_t));
  char **argv = calloc((size_t)(24 + nextra), sizeof(char *));
  for (int i = 0; i < n; i++) ok[i] = 0;
  if (!pids || !argv) { free(pids); free(argv); return; }
  for (int i = 0; i < n; i++) {
    int k = 0;
    argv[k++] = "ssh"; argv[k++] = "-T"; argv[k++] = "-x";
    argv[k++] = "-o"; argv[k++] = "BatchMode=yes";
    argv[k++] = "-o"; argv[k++] = cto;
    if (port > 0) { argv[k++] = "-p"; argv[k++] = ports; }
    if (identity && *identity) { argv[k++] = "-i"; argv[k++] = (char *)identity; argv[k++] = "-o"; argv[k++] = "IdentitiesOnly=yes"; }
    for (int j = 0; j < nextra; j++) argv[k++] = extra_opts[j];
    argv[k++] = "--"; argv[k++] = hosts[i]; argv[k++] = "true";
    argv[k] = NULL;
    pids[i] = fork();
    if (pids[i] == 0) {
      int fd = open("/dev/null", O_RDWR);
      if (fd >= 0) { dup2(fd, 0); dup2(fd, 1); dup2(fd, 2); if (fd > 2) close(fd); }
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execvp("ssh", argv);
      _exit(127);
    }
  }
  double t0 = nu_mono_s();
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++) {
      if (pids[i] <= 0) continue;
      int st;
      pid_t p = waitpid(pids[i], &st, WNOHANG);
      if (p == pids[i]) { ok[i] = WIFEXITED(st) && WEXITSTATUS(st) == 0; pids[i] = 0; }
      else if (p < 0 && errno != EINTR) pids[i] = 0;
      else left++;
    }
    if (!left) break;
    if (nu_mono_s() - t0 > ct + 30) {   /* hung after connecting (a login can be slow: shell startup files): unreachable */
      for (int i = 0; i < n; i++) if (pids[i] > 0) { kill(pids[i], SIGKILL); waitpid(pids[i], NULL, 0); pids[i] = 0; }
      break;
    }
    usleep(20000);
  }
  free(pids); free(argv);
}

/* whether scontrol's one-line record says the node is in service */
static int slurm_state_ok(const char *rec) {
  const char *s = strstr(rec, " State=");
  if (!s) s = strncmp(rec, "State=", 6) ? NULL : rec - 1;
  if (!s) return 0;
  char st[128]; size_t k = 0;
  for (s += 7; *s && *s != ' ' && *s != '\n' && k < sizeof st - 1; s++) st[k++] = *s;
  st[k] = 0;
  static const char *const bad[] = { "*", "DOWN", "DRAIN", "FAIL", "NOT_RESP", "NO_RESP", "UNKNOWN", "FUTURE", "POWER", "REBOOT" };
  if (!k) return 0;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) if (strstr(st, bad[i])) return 0;
  return 1;
}

/* the lost nodes seen out of service (bounded: a node past it is never re-admitted by a probe) */
static char seen_down[64][80];
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static int seen_down_at(const char *node, int add) {
  pthread_mutex_lock(&seen_mu);
  int hit = 0, fr = -1;
  for (int i = 0; i < 64 && !hit; i++) {
    if (!strcmp(seen_down[i], node) && node[0]) hit = 1;
    else if (!seen_down[i][0] && fr < 0) fr = i;
  }
  if (!hit && add && fr >= 0 && strlen(node) < sizeof seen_down[0]) { snprintf(seen_down[fr], sizeof seen_down[fr], "%s", node); hit = 1; }
  pthread_mutex_unlock(&seen_mu);
  return hit;
}
void dl_slurm_forget(const char *node) {
  pthread_mutex_lock(&seen_mu);
  for (int i = 0; i < 64; i++) if (!strcmp(seen_down[i], node)) seen_down[i][0] = 0;
  pthread_mutex_unlock(&seen_mu);
}

void dl_probe_slurm(char *const *nodes, int n, int *ok) {
  for (int i = 0; i < n; i++) {
    ok[i] = 0;
    int fd[2];
    if (pipe(fd)) continue;
    pid_t p = fork();
    if (p < 0) { close(fd[0]); close(fd[1]); continue; }
    if (p == 0) {
      int nul = open("/dev/null", O_RDWR);
      if (nul >= 0) { dup2(nul, 0); dup2(nul, 2); }
      dup2(fd[1], 1);
      close(fd[0]); close(fd[1]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execlp("scontrol", "scontrol", "show", "node", "-o", nodes[i], (char *)NULL);
      _exit(127);
    }
    close(fd[1]);
    fcntl(fd[0], F_SETFL, O_NONBLOCK);
    char out[8192]; size_t len = 0; int done = 0, st = 0;
    double t0 = nu_mono_s();
    while (!done && nu_mono_s() - t0 < 15) {
      ssize_t r = len < sizeof out - 1 ? read(fd[0], out + len, sizeof out - 1 - len) : 0;
      if (r > 0) { len += (size_t)r; continue; }
      if (waitpid(p, &st, WNOHANG) == p) { done = 1; break; }
      usleep(20000);
    }
    if (!done) { kill(p, SIGKILL); waitpid(p, &st, 0); }
    else for (ssize_t r; len < sizeof out - 1 && (r = read(fd[0], out + len, sizeof out - 1 - len)) > 0; ) len += (size_t)r;
    close(fd[0]);
    out[len] = 0;
    int up = done && WIFEXITED(st) && WEXITSTATUS(st) == 0 && len < sizeof out - 1 && slurm_state_ok(out);
    if (!up) seen_down_at(nodes[i], 1);
    else ok[i] = seen_down_at(nodes[i], 0);
  }
}

pid_t dl_spawn_srun(dl_Common *c, int nodes, int gpus_per_node, const char *exclude, const char *endpoint) {
  char ntasks[32], nnodes[32], gpus[48], excl[1100];
  snprintf(excl, sizeof excl, "--exclude=%s", exclude ? exclude : "");
  snprintf(ntasks, sizeof ntasks, "--ntasks=%d", c->world);
  snprintf(nnodes, sizeof nnodes, "--nodes=%d", nodes);
  snprintf(gpus, sizeof gpus, "--gpus-per-node=%d", gpus_per_node);
  char to[32], hb[32], world[32];
  snprintf(world, sizeof world, "%d", c->world);
  snprintf(to, sizeof to, "%d", c->timeout_ms);
  snprintf(hb, sizeof hb, "%g", c->heartbeat_s);
  char *argv[40]; int k = 0;
  argv[k++] = "srun";
  argv[k++] = ntasks;
  if (nodes > 0) argv[k++] = nnodes;
  if (gpus_per_node > 0) argv[k++] = gpus;
  if (exclude && *exclude) argv[k++] = excl;   /* nodes lost earlier in this allocation */
  argv[k++] = "--kill-on-bad-exit=1";
  argv[k++] = "--job-name=nabla-worker";
  /* --overlap: the session may itself be a job step, and a restart's step must not
     wait on the step it replaces — Slurm keeps that one "completing" (holding its
     CPUs on the surviving nodes) until the lost node's slurmd answers or the node
     is declared DOWN (SlurmdTimeout, 300 s by default) */
  argv[k++] = "--overlap";
  argv[k++] = (char *)c->exe;
  argv[k++] = "worker";
  argv[k++] = "--connect"; argv[k++] = (char *)endpoint;
  argv[k++] = "--key-stdin";
  argv[k++] = "--world"; argv[k++] = world;               /* rank and local rank: SLURM_PROCID, SLURM_LOCALID */
  argv[k++] = "--timeout-ms"; argv[k++] = to;
  argv[k++] = "--heartbeat"; argv[k++] = hb;
  argv[k++] = "--bind"; argv[k++] = (char *)c->worker_bind;
  argv[k] = NULL;
  return spawn_with_key(c, argv);
}

/* ---- addresses, any family (IPv4 or IPv6) ---- */
static socklen_t sa_len(const struct sockaddr *a) {
  return a->sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6) : (socklen_t)sizeof(struct sockaddr_in);
}

int dl_resolve(const char *host, int numeric, struct sockaddr_storage *out, char *err, size_t en) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;             /* the system's order (gai.conf): IPv6 first where it is configured */
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = numeric ? AI_NUMERICHOST : 0;
  char h[256];
  size_t hl = strlen(host);
  if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < sizeof h) { memcpy(h, host + 1, hl - 2); h[hl - 2] = 0; host = h; }   /* [v6] */
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || !res) {
    if (err && en) snprintf(err, en, "%s \"%.200s\" %s (%s)", numeric ? "address" : "host", host,
                            numeric ? "is not a numeric IPv4 or IPv6 address" : "does not resolve", rc ? gai_strerror(rc) : "no address");
    if (res) freeaddrinfo(res);
    return -1;
  }
  memset(out, 0, sizeof *out);
  memcpy(out, res->ai_addr, res->ai_addrlen <= sizeof *out ? res->ai_addrlen : sizeof *out);
  freeaddrinfo(res);
  return 0;
}

void dl_addr_text(const struct sockaddr *a, char *out, size_t n) {
  if (!n) return;
  if (getnameinfo(a, sa_len(a), out, (socklen_t)n, NULL, 0, NI_NUMERICHOST)) snprintf(out, n, "?");
}

void dl_unmap_v4(char *host) {
  struct in6_addr v6;
  if (inet_pton(AF_INET6, host, &v6) != 1 || !IN6_IS_ADDR_V4MAPPED(&v6)) return;
  char v4[INET_ADDRSTRLEN];
  if (inet_ntop(AF_INET, &v6.s6_addr[12], v4, sizeof v4)) memcpy(host, v4, strlen(v4) + 1);   /* shorter: fits */
}

void dl_addr_port_text(const struct sockaddr *a, char *out, size_t n) {
  char h[INET6_ADDRSTRLEN + 16];
  dl_addr_text(a, h, sizeof h);
  int port = a->sa_family == AF_INET6 ? ntohs(((const struct sockaddr_in6 *)a)->sin6_port) : ntohs(((const struct sockaddr_in *)a)->sin_port);
  dl_hostport(out, n, h, port);
}

void dl_hostport(char *out, size_t n, const char *host, int port) {
  int v6 = strchr(host, ':') && host[0] != '[';
  if (port < 0) snprintf(out, n, v6 ? "[%s]" : "%s", host);
  else snprintf(out, n, v6 ? "[%s]:%d" : "%s:%d", host, port);
}

int dl_split_hostport(const char *s, char *host, size_t hn, int *port) {
  const char *hs = s, *he, *ps;
  if (s[0] == '[') {
    hs = s + 1;
    he = strchr(hs, ']');
    if (!he || he[1] != ':') return -1;
    ps = he + 2;
  } else {
    he = strrchr(s, ':');
    if (!he || memchr(s, ':', (size_t)(he - s))) return -1;   /* an IPv6 address needs its brackets */
    ps = he + 1;
  }
  if ((size_t)(he - hs) >= hn || he == hs) return -1;
  char *end;
  long p = strtol(ps, &end, 10);
  if (end == ps || *end || p < 0 || p > 65535) return -1;
  memcpy(host, hs, (size_t)(he - hs)); host[he - hs] = 0;
  *port = (int)p;
  return 0;
}

int dl_is_loopback_sa(const struct sockaddr *a) {
  if (a->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family != AF_INET6) return 0;
  const struct in6_addr *v = &((const struct sockaddr_in6 *)a)->sin6_addr;
  if (IN6_IS_ADDR_LOOPBACK(v)) return 1;
  return IN6_IS_ADDR_V4MAPPED(v) && v->s6_addr[12] == 127;   /* ::ffff:127.x.y.z */
}

int dl_is_loopback(const char *host, char *addr, size_t n) {
  struct sockaddr_storage a;
  if (addr && n) addr[0] = 0;
  if (dl_resolve(host, 0, &a, NULL, 0)) return 0;
  if (addr && n) dl_addr_text((struct sockaddr *)&a, addr, n);
  return dl_is_loopback_sa((struct sockaddr *)&a);
}

/* FNV-1a, 64 bits: the id only has to tell machines apart, not resist anyone */
static uint64_t fnv(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ULL; }
  return h;
}

int dl_host_id(char out[17]) {
  uint64_t h = 1469598103934665603ULL;
  int got = 0;
  char buf[256];
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (fgets(buf, sizeof buf, f)) { h = fnv(h, buf, strlen(buf)); got = 1; }
    fclose(f);
  }
  if (!got && gethostname(buf, sizeof buf - 1) == 0) { buf[sizeof buf - 1] = 0; h = fnv(h, buf, strlen(buf)); got = 1; }
  static const char *const ns[] = { "/proc/self/ns/net", "/proc/self/ns/mnt" };
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
    ssize_t k = readlink(ns[i], buf, sizeof buf - 1);   /* "net:[4026531992]" */
    if (k > 0) h = fnv(h, buf, (size_t)k);
  }
  if (!got) { snprintf(out, 17, "unknown"); return -1; }
  snprintf(out, 17, "%016llx", (unsigned long long)h);
  return 0;
}

void dl_kernel_id(char out[17]) {
  uint64_t h = 1469598103934665603ULL;
  char buf[128];
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) { if (fgets(buf, sizeof buf, f)) h = fnv(h, buf, strlen(buf)); fclose(f); }
  snprintf(out, 17, "%016llx", (unsigned long long)h);
}

int dl_route_addr(const char *host, char *out, size_t n) {
  struct sockaddr_storage a;
  if (dl_resolve(host, 0, &a, NULL, 0)) return -1;
  struct sockaddr *sa = (struct sockaddr *)&a;
  if (dl_is_loopback_sa(sa)) { snprintf(out, n, sa->sa_family == AF_INET6 && !IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)sa)->sin6_addr) ? "::1" : "127.0.0.1"); return 0; }
  if (sa->sa_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = htons(9); else ((struct sockaddr_in *)sa)->sin_port = htons(9);
  int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_storage me; socklen_t ml = sizeof me;
  int rc = connect(fd, sa, sa_len(sa)) == 0 && getsockname(fd, (struct sockaddr *)&me, &ml) == 0 ? 0 : -1;
  close(fd);
  if (rc == 0) dl_addr_text((struct sockaddr *)&me, out, n);
  return rc;
}

void dl_self_addr(char *out, size_t n) {
  char name[256];
  struct sockaddr_storage a;
  if (gethostname(name, sizeof name) == 0 && dl_resolve(name, 0, &a, NULL, 0) == 0 && !dl_is_loopback_sa((struct sockaddr *)&a)) {
    dl_addr_text((struct sockaddr *)&a, out, n);
    return;
  }
  if (dl_route_addr("192.0.2.1", out, n) == 0) return;   /* TEST-NET-1: only the route is looked up */
  if (dl_route_addr("2001:db8::1", out, n) == 0) return;   /* the IPv6 documentation prefix: an IPv6-only host */
  snprintf(out, n, "127.0.0.1");
}

void dl_host_groups(const char (*ids)[17], int n, int *lrank, int *lworld, int *node, int *nnodes) {
  int nodes = 0;
  for (int i = 0; i < n; i++) {
    int first = i;
    lrank[i] = 0; lworld[i] = 0;
    for (int j = 0; j < n; j++) if (!strcmp(ids[i], ids[j])) { if (j < i) lrank[i]++; if (j < first) first = j; lworld[i]++; }
    node[i] = first == i ? nodes++ : node[first];
  }
  *nnodes = nodes;
}

int dl_port_range(const char *spec, int *lo, int *hi, char *err, size_t n) {
  if (!spec || !*spec) return 0;
  char tail = 0;
  int a = 0, b = 0;
  if (sscanf(spec, "%d-%d%c", &a, &b, &tail) != 2 || a < 1 || b > 65535 || a > b) {
    snprintf(err, n, "port range \"%.60s\" is not LOW-HIGH with 1 <= LOW <= HIGH <= 65535", spec);
    return -1;
  }
  *lo = a; *hi = b;
  return 1;
}

/* The interface's address for the job: IPv4 when it has one (as NCCL's
** default), else its global IPv6 address; NABLA_SOCKET_FAMILY=AF_INET6 (or
** NCCL_SOCKET_FAMILY, as NCCL spells it) prefers IPv6, AF_INET insists on v4.
** A link-local IPv6 address (fe80::/10) needs a scope to be reached and is
** not used. */
int dl_ifname_addr(const char *ifname, char *out, size_t n, char *err, size_t en) {
  struct ifaddrs *ifa = NULL;
  if (getifaddrs(&ifa)) { snprintf(err, en, "getifaddrs: %s", strerror(errno)); return -1; }
  const char *fam = getenv("NABLA_SOCKET_FAMILY");
  if (!fam || !*fam) fam = getenv("NCCL_SOCKET_FAMILY");
  int want = fam && !strcmp(fam, "AF_INET6") ? AF_INET6 : fam && !strcmp(fam, "AF_INET") ? AF_INET : AF_UNSPEC;
  int exists = 0, linklocal = 0;
  char v4[INET6_ADDRSTRLEN] = "", v6[INET6_ADDRSTRLEN] = "";
  for (struct ifaddrs *p = ifa; p; p = p->ifa_next) {
    if (!p->ifa_name || strcmp(p->ifa_name, ifname)) continue;
    exists = 1;
    if (!p->ifa_addr) continue;
    if (p->ifa_addr->sa_family == AF_INET && !v4[0]) dl_addr_text(p->ifa_addr, v4, sizeof v4);
    else if (p->ifa_addr->sa_family == AF_INET6 && !v6[0]) {
      if (IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr)) linklocal = 1;
      else dl_addr_text(p->ifa_addr, v6, sizeof v6);
    }
  }
  freeifaddrs(ifa);
  const char *pick = want == AF_INET ? v4 : want == AF_INET6 ? (v6[0] ? v6 : v4) : (v4[0] ? v4 : v6);
  if (pick[0]) { snprintf(out, n, "%s", pick); return 0; }
  if (!exists) snprintf(err, en, "there is no interface %s on this host", ifname);
  else if (want == AF_INET) snprintf(err, en, "interface %s has no IPv4 address (NABLA_SOCKET_FAMILY=AF_INET)", ifname);
  else snprintf(err, en, "interface %s has no IPv4 or global IPv6 address%s", ifname, linklocal ? " (only a link-local one, which needs a scope: give the interface a global or unique-local address)" : "");
  return -1;
}
