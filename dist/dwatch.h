/*
** dwatch.h — elastic growth: a thread that probes the lost ssh hosts (or
** Slurm nodes) while
** a group smaller than it may be runs, and asks the group to regroup at its
** next checkpoint when one answers (dsess_request_regroup).  `nabla run`
** (drun.c) and a live session started with elastic=true (dsessionlib.c)
** share it.
*/
#ifndef DIST_DWATCH_H
#define DIST_DWATCH_H

#include <pthread.h>
#include "dist/dsession.h"

typedef struct dw_Watch {
  pthread_t th; int on; volatile int stop;
  dsess_Launch o;        /* a copy: the hosts, the ssh settings, o.lost (the candidates) */
  double every_s;        /* probe period: NABLA_ELASTIC_PROBE_S, else 2 s */
  const char *who;       /* how its message starts: "nabla run", "nabla dist" */
} dw_Watch;

/* starts watching when the launcher is ssh, n < want and some host is lost
** (else nothing: dw_stop is still fine); who is kept (a string literal) */
void dw_start(dw_Watch *w, const dsess_Launch *o, int n, int want, const char *who);
/* stops the thread and frees the copy; safe on a watch that never started */
void dw_stop(dw_Watch *w);

#endif
