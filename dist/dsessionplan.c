/*
** dsessionplan.c — what a new start of the group looks like: its launch
** options (dsess_Launch: copied for dist.restart, freed), the variables
** forwarded with env=[...] / --env, and which hosts and how many workers a
** restart (dist.restart, `nabla run --max-restarts`) uses after a failure.
** Kept apart from dsession.c (the controller) because it only reads the
** session's state through dsession.h.
*/
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dsession.h"
#include "lang/nbapi.h"
#include "dist/dlaunch.h"

int dsess_env_values(nb_VM *vm, const char *f, char **env, int nenv) {
  for (int i = 0; i < nenv; i++) {
    if (strchr(env[i], '=')) continue;
    const char *v = getenv(env[i]);
    if (!v) return dsess_error(vm, "%s: env: %s is not set here (give NAME=VALUE, or set it)", f, env[i]);
    size_t n = strlen(env[i]) + strlen(v) + 2;
    char *kv = malloc(n);
    if (!kv) return nb_error(vm, "out of memory");
    snprintf(kv, n, "%s=%s", env[i], v);
    free(env[i]);
    env[i] = kv;
  }
  return NB_OK;
}

static int listed(char **l, int n, const char *s) {
  for (int i = 0; i < n; i++) if (!strcmp(l[i], s)) return 1;
  return 0;
}
static int add(dsess_Launch *o, const char *h) {
  if (listed(o->exclude, o->nexclude, h)) return 0;
  char **l = realloc(o->exclude, sizeof(char *) * (size_t)(o->nexclude + 1));
  if (!l) return -1;
  o->exclude = l;
  if (!(l[o->nexclude] = strdup(h))) return -1;
  o->nexclude++;
  return 0;
}

int dsess_plan_restart(nb_VM *vm, const char *f, dsess_Launch *o, int *n, char **ex, int nex, int min_workers) {
  if (strcmp(o->launcher, "ssh") != 0) {
    if (min_workers > *n) return dsess_error(vm, "%s: min_workers=%d is more than the %d workers of the group", f, min_workers, *n);
    return NB_OK;   /* local and slurm: the same hosts (srun places the tasks again) */
  }
  int before = 0;
  for (int i = 0; i < o->nhosts; i++) if (!listed(o->exclude, o->nexclude, o->hosts[i])) before++;
  int bad = 0;
  for (int i = 0; i < nex && !bad; i++) bad = add(o, ex[i]);
  char *const *failed = dsess_failed_hosts();
  for (int i = 0; failed[i] && !bad; i++) bad = add(o, failed[i]);
  if (bad) return nb_error(vm, "out of memory");
  int after = 0;
  for (int i = 0; i < o->nhosts; i++) if (!listed(o->exclude, o->nexclude, o->hosts[i])) after++;
  if (!after) return dsess_error(vm, "%s: no host is left (excluded: %d of %d)", f, o->nexclude, o->nhosts);
  if (min_workers > 0 && after < before && before > 0) {
    int per = (*n + before - 1) / before, m = per * after;
    if (m > *n) m = *n;
    if (m < min_workers)
      return dsess_error(vm, "%s: %d host%s left with %d worker%s, fewer than min_workers=%d", f, after, after > 1 ? "s" : "", m, m > 1 ? "s" : "", min_workers);
    *n = m;
  }
  return NB_OK;
}

char **dsess_usable_hosts(nb_VM *vm, const dsess_Launch *o, int *nhosts) {
  *nhosts = 0;
  char **hosts = calloc(o->nhosts > 0 ? (size_t)o->nhosts : 1, sizeof(char *));
  if (!hosts) { nb_error(vm, "out of memory"); return NULL; }
  for (int i = 0; i < o->nhosts; i++)
    if (!listed(o->exclude, o->nexclude, o->hosts[i])) hosts[(*nhosts)++] = o->hosts[i];
  if (!*nhosts) { free(hosts); dsess_error(vm, "dist.start: every host of hosts=[...] is excluded (exclude=[...] or a failed start)"); return NULL; }
  /* a name that resolves to loopback (localhost, Debian's "127.0.1.1 NAME")
  ** among remote hosts: the workers there would be told to connect to this
  ** host's loopback, and the ones here would advertise it (it used to hang) */
  int loop = -1, remote = -1; char laddr[64] = "";
  for (int i = 0; i < *nhosts; i++) {
    char a[64], why[320];
    struct sockaddr_storage sa;
    /* a name that does not resolve fails here, naming it, not after the
    ** workers before it have started (ssh's own aliases need bind=) */
    if (!o->bind[0] && dl_resolve(hosts[i], 0, &sa, why, sizeof why)) {
      dsess_error(vm, "dist.start: %s; the session must resolve every host of hosts=[...] to tell its workers where to connect "
                  "(or give bind=ADDRESS: an address every host reaches this one at)", why);
      free(hosts);
      return NULL;
    }
    if (dl_is_loopback(hosts[i], a, sizeof a)) { if (loop < 0) { loop = i; snprintf(laddr, sizeof laddr, "%s", a); } }
    else if (remote < 0) remote = i;
  }
  if (loop >= 0 && remote >= 0) {
    dsess_error(vm, "dist.start: host \"%s\" resolves to the loopback address %s, but host \"%s\" is another machine: "
                "workers there cannot reach a worker or session at %s. Name this machine by an address the others reach "
                "(its address on the cluster network, or a name that /etc/hosts maps to it rather than to 127.0.1.1)",
                hosts[loop], laddr, hosts[remote], laddr);
    free(hosts);
    return NULL;
  }
  return hosts;
}

static char **dup_list(char **l, int n, int *nout) {
  char **d = n ? calloc((size_t)n, sizeof(char *)) : NULL;
  for (int i = 0; i < n && d; i++) d[i] = strdup(l[i]);
  *nout = d ? n : 0;
  return d;
}
void dsess_launch_free(dsess_Launch *o) {
  for (int i = 0; i < o->nenv; i++) free(o->env[i]);
  for (int i = 0; i < o->nexclude; i++) free(o->exclude[i]);
  free(o->env); free(o->exclude);
  for (int i = 0; i < o->nhosts; i++) free(o->hosts[i]);
  for (int i = 0; i < o->nssh_opts; i++) free(o->ssh_opts[i]);
  free(o->hosts); free(o->ssh_opts); free(o->ssh_key); free(o->remote_nabla);
  memset(o, 0, sizeof *o);
}
static char *dupnull(const char *s) { return s ? strdup(s) : NULL; }
void dsess_launch_copy(dsess_Launch *dst, const dsess_Launch *src) {
  dsess_launch_free(dst);
  *dst = *src;
  dst->hosts = src->nhosts ? calloc((size_t)src->nhosts, sizeof(char *)) : NULL;
  for (int i = 0; i < src->nhosts && dst->hosts; i++) dst->hosts[i] = strdup(src->hosts[i]);
  if (!dst->hosts) dst->nhosts = 0;
  dst->ssh_opts = src->nssh_opts ? calloc((size_t)src->nssh_opts, sizeof(char *)) : NULL;
  for (int i = 0; i < src->nssh_opts && dst->ssh_opts; i++) dst->ssh_opts[i] = strdup(src->ssh_opts[i]);
  if (!dst->ssh_opts) dst->nssh_opts = 0;
  dst->ssh_key = dupnull(src->ssh_key); dst->remote_nabla = dupnull(src->remote_nabla);
  dst->env = dup_list(src->env, src->nenv, &dst->nenv);
  dst->exclude = dup_list(src->exclude, src->nexclude, &dst->nexclude);
}
