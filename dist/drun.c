/*
** drun.c — `nabla run [-n N] ... SCRIPT.nbl ARGS`: starts a session of N
** workers (dsession.c), runs the script on every one of them, shows rank 0's
** output as the program's own (the others' errors prefixed [rank N]) and
** exits with the worst status of the ranks.  A small program on top of the
** session controller, kept apart from the builtins that share it.
*/
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "dist/dist.h"
#include "dist/dsession.h"
#include "dist/dinternal.h"

static nb_VM *run_vm;
static void run_sigint(int sig) { (void)sig; if (run_vm) nb_vm_interrupt(run_vm); }

static const char RUN_USAGE[] =
  "usage: nabla run [-n N] [--timeout SECONDS] [--launcher local|ssh|slurm] [--hosts H1,H2,...]\n"
  "                 [--ssh-port P] [--ssh-key FILE] [--ssh-option OPT]... [--nodes M] [--gpus-per-node G]\n"
  "                 [--heartbeat SECONDS] [--bind ADDR] [--backend auto|ring|nccl] SCRIPT.nbl [ARGS...]\n";

int nbD_run_main(int argc, char **argv) {
  int n = 2; int i = 1;
  dsess_Launch o; memset(&o, 0, sizeof o);
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
  if (bad || i >= argc) { fputs(RUN_USAGE, stderr); dsess_launch_free(&o); return 2; }
  char path[PATH_MAX];
  if (!realpath(argv[i], path)) { fprintf(stderr, "nabla run: cannot open %s: %s\n", argv[i], strerror(errno)); dsess_launch_free(&o); return 2; }
  nbD_init();
  nb_VM *vm = nb_vm_new(nb_stdio_sink());
  int sst = dsess_start(vm, n, &o);
  dsess_launch_free(&o);
  if (sst) {
    nbE_finish(vm);
    const nb_ErrorInfo *e = nb_last_error(vm);
    fprintf(stderr, "nabla run: %s\n", e ? e->message : "cannot start the workers");
    nb_vm_free(vm);
    return 1;
  }
  nb_Buf b = {0};
  nbB_add(&b, path, strlen(path) + 1);
  for (int k = i + 1; k < argc; k++) nbB_add(&b, argv[k], strlen(argv[k]) + 1);
  /* Ctrl-C interrupts the VM, whose wait then interrupts the workers */
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  run_vm = vm; sa.sa_handler = run_sigint; sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  dsess_Reply *rep;
  int which;
  int rst = dsess_run_all(vm, b.p, b.n, &rep, &which);
  nbB_free(&b);
  if (rst) { fprintf(stderr, "nabla run: out of memory\n"); dsess_stop(); nb_vm_free(vm); return 1; }
  int worst = 0;
  for (int k = 0; k < n; k++) {
    int st = 0;
    dsess_WorkerInfo w; dsess_worker_info(k, &w);
    if (w.dead && !(rep[k].got && rep[k].body)) {
      int ws = w.status;
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
  dsess_replies_free(rep, n);
  dsess_stop();
  nb_vm_free(vm);
  return worst;
}
