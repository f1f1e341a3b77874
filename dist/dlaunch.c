/*
** dlaunch.c — the ssh and Slurm launchers (see dlaunch.h).
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
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include "dist/dlaunch.h"

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

/* fork + exec argv with the key on stdin */
static pid_t spawn_with_key(dl_Common *c, char **argv) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp)) {
    snprintf(c->err, sizeof c->err, "socketpair: %s", strerror(errno));
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);
    dup2(sp[1], 0);            /* dup2 clears close-on-exec on fd 0 */
    execvp(argv[0], argv);
    _exit(127);
  }
  close(sp[1]);
  if (pid < 0) {
    snprintf(c->err, sizeof c->err, "fork: %s", strerror(errno));
    close(sp[0]);
    return -1;
  }
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

pid_t dl_spawn_ssh(dl_Common *c, const char *host, int port, const char *identity,
                   char *const *extra_opts, int nextra, const char *endpoint, int rank, int local_rank) {
  char cmd[4096] = "", num[32];
  if (c->threads > 0) {
    /* the remote environment: thread counts split between this host's workers */
    char env[160];
    snprintf(env, sizeof env, "env OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d OMP_WAIT_POLICY=PASSIVE", c->threads, c->threads);
    snprintf(cmd, sizeof cmd, "%s", env);
  }
  quote(cmd, sizeof cmd, c->exe);
  worker_args(c, cmd, sizeof cmd, endpoint);
  snprintf(num, sizeof num, "%d", rank); quote(cmd, sizeof cmd, "--rank"); quote(cmd, sizeof cmd, num);
  snprintf(num, sizeof num, "%d", local_rank); quote(cmd, sizeof cmd, "--local-rank"); quote(cmd, sizeof cmd, num);
  const char *cmdp = cmd[0] == ' ' ? cmd + 1 : cmd;

  char ports[16]; snprintf(ports, sizeof ports, "%d", port);
  int cap = 16 + nextra, k = 0;
  char **argv = calloc((size_t)cap, sizeof(char *));
  if (!argv) { snprintf(c->err, sizeof c->err, "out of memory"); return -1; }
  argv[k++] = "ssh";
  argv[k++] = "-T";                       /* no terminal: the worker's output goes through the control channel */
  argv[k++] = "-x";
  argv[k++] = "-o"; argv[k++] = "BatchMode=yes";
  if (port > 0) { argv[k++] = "-p"; argv[k++] = ports; }
  if (identity && *identity) { argv[k++] = "-i"; argv[k++] = (char *)identity; argv[k++] = "-o"; argv[k++] = "IdentitiesOnly=yes"; }
  for (int i = 0; i < nextra; i++) argv[k++] = extra_opts[i];
  argv[k++] = "--";
  argv[k++] = (char *)host;
  argv[k++] = (char *)cmdp;
  argv[k] = NULL;
  pid_t pid = spawn_with_key(c, argv);
  free(argv);
  return pid;
}

pid_t dl_spawn_srun(dl_Common *c, int nodes, int gpus_per_node, const char *endpoint) {
  char ntasks[32], nnodes[32], gpus[48];
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
  argv[k++] = "--kill-on-bad-exit=1";
  argv[k++] = "--job-name=nabla-worker";
  if (getenv("SLURM_STEP_ID")) argv[k++] = "--overlap";   /* the session is itself a job step */
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

static int resolve4(const char *host, struct sockaddr_in *out) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host, "9", &hints, &res) != 0 || !res) return -1;
  memcpy(out, res->ai_addr, sizeof *out);
  freeaddrinfo(res);
  return 0;
}

int dl_is_loopback(const char *host) {
  struct sockaddr_in a;
  if (resolve4(host, &a)) return 0;
  return (ntohl(a.sin_addr.s_addr) >> 24) == 127;
}

int dl_route_addr(const char *host, char *out, size_t n) {
  struct sockaddr_in a;
  if (resolve4(host, &a)) return -1;
  if ((ntohl(a.sin_addr.s_addr) >> 24) == 127) { snprintf(out, n, "127.0.0.1"); return 0; }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in me; socklen_t ml = sizeof me;
  int rc = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&me, &ml) == 0 ? 0 : -1;
  close(fd);
  if (rc == 0 && !inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)n)) rc = -1;
  return rc;
}

void dl_self_addr(char *out, size_t n) {
  char name[256];
  struct sockaddr_in a;
  if (gethostname(name, sizeof name) == 0 && resolve4(name, &a) == 0 && (ntohl(a.sin_addr.s_addr) >> 24) != 127
      && inet_ntop(AF_INET, &a.sin_addr, out, (socklen_t)n)) return;
  if (dl_route_addr("192.0.2.1", out, n) == 0) return;   /* TEST-NET-1: only the route is looked up */
  snprintf(out, n, "127.0.0.1");
}
