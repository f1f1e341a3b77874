/*
** dwatch.c — the elastic watcher (dwatch.h): while the group runs smaller
** than it may, a thread probes the hosts it lost every couple of seconds
** (ssh: dl_probe_ssh, an ssh that must answer within connect_timeout;
** Slurm: dl_probe_slurm, scontrol says the node is in service again); the
** first that answers makes the session ask the workers to regroup at their
** next dist.save_checkpoint, and the thread ends (one request per group:
** the regrouped group is planned afresh, the returned host probed again).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dist/dwatch.h"
#include "dist/dlaunch.h"
#include "util/clock.h"

static void *watch_main(void *arg) {
  dw_Watch *w = arg;
  int *ok = calloc(w->o.nlost > 0 ? (size_t)w->o.nlost : 1, sizeof(int));
  double next = nu_mono_s() + w->every_s;
  while (ok && !__atomic_load_n(&w->stop, __ATOMIC_SEQ_CST)) {
    if (nu_mono_s() < next) { usleep(50000); continue; }
    if (!strcmp(w->o.launcher, "slurm")) dl_probe_slurm(w->o.lost, w->o.nlost, ok);
    else dl_probe_ssh(w->o.lost, w->o.nlost, w->o.ssh_port, w->o.ssh_key, w->o.ssh_opts, w->o.nssh_opts, w->o.connect_timeout, ok);
    int back = -1;
    for (int i = 0; i < w->o.nlost; i++) if (ok[i]) back = i;
    if (back >= 0 && !__atomic_load_n(&w->stop, __ATOMIC_SEQ_CST)) {
      fprintf(stderr, "%s: host %s answers again: the group regroups at its next checkpoint\n", w->who, w->o.lost[back]);
      dsess_request_regroup();
      break;
    }
    next = nu_mono_s() + w->every_s;
  }
  free(ok);
  return NULL;
}

void dw_start(dw_Watch *w, const dsess_Launch *o, int n, int want, const char *who) {
  memset(w, 0, sizeof *w);
  if ((strcmp(o->launcher, "ssh") && strcmp(o->launcher, "slurm")) || n >= want || !o->nlost) return;   /* nothing could join */
  dsess_launch_copy(&w->o, o);
  w->who = who;
  const char *e = getenv("NABLA_ELASTIC_PROBE_S");
  w->every_s = e && atof(e) > 0 ? atof(e) : 2.0;
  if (pthread_create(&w->th, NULL, watch_main, w) == 0) w->on = 1;
}

void dw_stop(dw_Watch *w) {
  __atomic_store_n(&w->stop, 1, __ATOMIC_SEQ_CST);
  if (w->on) pthread_join(w->th, NULL);
  w->on = 0;
  dsess_launch_free(&w->o);
}
