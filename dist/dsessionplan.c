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

/* whether s is among the n strings of l (n < 0: l is NULL-terminated) */
static int listed(char *const *l, int n, const char *s) {
  for (int i = 0; n < 0 ? l[i] != NULL : i < n; i++) if (!strcmp(l[i], s)) return 1;
  return 0;
}
/* appends a copy of h to the list (once); 0 or -1 (out of memory) */
static int add_to(char ***l, int *n, const char *h) {
  if (listed(*l, *n, h)) return 0;
  char **x = realloc(*l, sizeof(char *) * (size_t)(*n + 1));
  if (!x) return -1;
  *l = x;
  if (!(x[*n] = strdup(h))) return -1;
  (*n)++;
  return 0;
}
static void clear_list(char ***l, int *n) {
  for (int i = 0; i < *n; i++) free((*l)[i]);
  free(*l); *l = NULL; *n = 0;
}

/* hosts of hosts= not excluded by the user (lost ones counted) */
static int configured_hosts(const dsess_Launch *o) {
  int k = 0;
  for (int i = 0; i < o->nhosts; i++) if (!listed(o->exclude, o->nexclude, o->hosts[i])) k++;
  return k;
}

int dsess_default_slots(const dsess_Launch *o, int n) {
  if (o->slots > 0) return o->slots;
  int h = !strcmp(o->launcher, "ssh") ? configured_hosts(o) : !strcmp(o->launcher, "slurm") && o->nodes > 0 ? o->nodes : 1;
  return h > 0 ? (n + h - 1) / h : n;
}

/* ssh: the suspects (hosts lost before, hosts that failed to start or whose
** workers all died) are probed at once; o->lost becomes those that do not
** answer.  Returns 0 or -1 (out of memory). */
static int probe_suspects(dsess_Launch *o) {
  char **sus = NULL; int nsus = 0, bad = 0;
  char *const *failed = dsess_failed_hosts();
  for (int i = 0; i < o->nlost && !bad; i++) bad = add_to(&sus, &nsus, o->lost[i]);
  for (int i = 0; failed[i] && !bad; i++) bad = add_to(&sus, &nsus, failed[i]);
  /* only hosts of hosts= that the user did not exclude */
  int k = 0;
  for (int i = 0; i < nsus; i++) {
    if (listed(o->hosts, o->nhosts, sus[i]) && !listed(o->exclude, o->nexclude, sus[i])) sus[k++] = sus[i];
    else free(sus[i]);
  }
  nsus = k;
  clear_list(&o->lost, &o->nlost);
  int *ok = calloc(nsus > 0 ? (size_t)nsus : 1, sizeof(int));
  if (!ok) bad = -1;
  if (!bad && nsus) dl_probe_ssh(sus, nsus, o->ssh_port, o->ssh_key, o->ssh_opts, o->nssh_opts, o->connect_timeout, ok);
  for (int i = 0; i < nsus && !bad; i++) if (!ok[i]) bad = add_to(&o->lost, &o->nlost, sus[i]);
  free(ok);
  clear_list(&sus, &nsus);
  return bad;
}

/* Slurm: a node every one of whose tasks died (dsess_failed_hosts) is left
** out of the next srun (--exclude, one node fewer) inside the same
** allocation; the world is what the nodes left hold at the same tasks per
** node.  Nodes lost by an earlier group are asked about (scontrol: in
** service again?) and re-admitted when they are back.  A node lost just now
** is not asked: slurmctld takes minutes to mark a dead node DOWN. */
static int dsess_plan_slurm(nb_VM *vm, const char *f, dsess_Launch *o, int want, int *n, int min_workers) {
  char *const *failed = dsess_failed_hosts();
  int bad = 0;
  if (o->nlost) {
    int *ok = calloc((size_t)o->nlost, sizeof(int));
    if (!ok) return nb_error(vm, "out of memory");
    dl_probe_slurm(o->lost, o->nlost, ok);
    int k = 0;
    for (int i = 0; i < o->nlost; i++) {
      if (ok[i] && !listed(failed, -1, o->lost[i])) { dl_slurm_forget(o->lost[i]); free(o->lost[i]); continue; }   /* back: re-admitted */
      o->lost[k++] = o->lost[i];
    }
    o->nlost = k;
    free(ok);
  }
  for (int i = 0; failed[i] && !bad; i++) bad = add_to(&o->lost, &o->nlost, failed[i]);
  if (bad) return nb_error(vm, "out of memory");
  if (!o->nlost) { *n = want; return NB_OK; }
  int nodes = o->nodes > 0 ? o->nodes : 1;
  int slots = dsess_default_slots(o, want);
  o->slots = slots;
  int usable = nodes - o->nlost;
  if (usable < 1) return dsess_error(vm, "%s: no node of the allocation is left (%d lost)", f, o->nlost);
  long fit = (long)slots * usable;
  int m = fit < want ? (int)fit : want;
  if (m < min_workers)
    return dsess_error(vm, "%s: %d node%s left (%d task%s each) hold %d worker%s, fewer than min_workers=%d (lost: %s)", f, usable, usable > 1 ? "s" : "",
                       slots, slots > 1 ? "s" : "", m, m > 1 ? "s" : "", min_workers, o->lost[0]);
  *n = m;
  return NB_OK;
}

int dsess_plan_restart(nb_VM *vm, const char *f, dsess_Launch *o, int want, int *n, char **ex, int nex, int reset, int min_workers) {
  if (min_workers > want) return dsess_error(vm, "%s: min_workers=%d is more than the %d workers of the group", f, min_workers, want);
  if (!strcmp(o->launcher, "slurm")) return dsess_plan_slurm(vm, f, o, want, n, min_workers);
  if (strcmp(o->launcher, "ssh") != 0) { *n = want; return NB_OK; }   /* local: the same host */
  int slots = dsess_default_slots(o, want);
  if (reset) clear_list(&o->exclude, &o->nexclude);
  int bad = 0;
  for (int i = 0; i < nex && !bad; i++) bad = add_to(&o->exclude, &o->nexclude, ex[i]);
  if (bad || probe_suspects(o)) return nb_error(vm, "out of memory");
  int usable = 0;
  for (int i = 0; i < o->nhosts; i++)
    if (!listed(o->exclude, o->nexclude, o->hosts[i]) && !listed(o->lost, o->nlost, o->hosts[i])) usable++;
  if (!usable) return dsess_error(vm, "%s: no host is left (excluded: %d, unreachable: %d, of %d)", f, o->nexclude, o->nlost, o->nhosts);
  o->slots = slots;   /* fixed from now on: growth never puts more on a host than the first start did */
  long fit = (long)slots * usable;
  int m = fit < want ? (int)fit : want;
  if (m < min_workers)
    return dsess_error(vm, "%s: %d host%s left (%d slot%s each) hold %d worker%s, fewer than min_workers=%d%s%s", f, usable, usable > 1 ? "s" : "",
                       slots, slots > 1 ? "s" : "", m, m > 1 ? "s" : "", min_workers, o->nlost ? "; unreachable: " : "", o->nlost ? o->lost[0] : "");
  *n = m;
  return NB_OK;
}

char **dsess_usable_hosts(nb_VM *vm, const dsess_Launch *o, int *nhosts) {
  *nhosts = 0;
  char **hosts = calloc(o->nhosts > 0 ? (size_t)o->nhosts : 1, sizeof(char *));
  if (!hosts) { nb_error(vm, "out of memory"); return NULL; }
  for (int i = 0; i < o->nhosts; i++)
    if (!listed(o->exclude, o->nexclude, o->hosts[i]) && !listed(o->lost, o->nlost, o->hosts[i])) hosts[(*nhosts)++] = o->hosts[i];
  if (!*nhosts) { free(hosts); dsess_error(vm, "dist.start: every host of hosts=[...] is excluded (exclude=[...]) or unreachable"); return NULL; }
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
  for (int i = 0; i < o->nlost; i++) free(o->lost[i]);
  free(o->env); free(o->exclude); free(o->lost);
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
  dst->lost = dup_list(src->lost, src->nlost, &dst->nlost);
}
