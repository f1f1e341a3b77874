/*
** dsessionlib.c — the session's builtins: dist.start, stop, restart, exec,
** run, push, pull, scatter, gather, workers, info, endpoint and size (the
** dist_* functions stdlib/dist.nbl wraps), and nbD_init, which registers
** them with the worker-side builtins of the other dist files.
**
** They check their arguments, serialize values (lang's nbZ_serialize) and
** hand the command to the session controller (dsession.c); nothing here
** touches a socket.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "dist/dsession.h"
#include "dist/dtensorcoll.h"
#include "dist/dnccl.h"
#include "dist/dinternal.h"
#include "dist/dwatch.h"

static int arg_str(nb_VM *vm, const char *f, const char *what, nb_Value v, const char **s) {
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: %s must be a string, got %s", f, what, nb_typename(v));
  *s = nb_str(v)->data;
  return NB_OK;
}

/* the last dist.start's settings: n is the size asked for (a restart after a
** lost host may run fewer, and grows back to n when the host returns) */
static struct {
  int n; dsess_Launch o;
  int elastic, min_workers;   /* elastic=true: a lost worker or a returned host restarts the group by itself */
  dw_Watch watch;             /* elastic, smaller than n: probes the lost hosts (dwatch.c) */
} last_start;

/* a list of strings (or one string: split at spaces, for ssh_options) */
static int arg_strlist(nb_VM *vm, const char *f, const char *what, nb_Value v, int split, char ***out, int *nout) {
  *out = NULL; *nout = 0;
  if (v.t == NB_TNIL) return NB_OK;
  if (v.t == NB_TSTR && split) {
    char *copy = strdup(nb_str(v)->data), *save = NULL;
    int cap = 8; char **l = malloc(sizeof(char *) * (size_t)cap);
    for (char *t = strtok_r(copy, " \t", &save); t && l; t = strtok_r(NULL, " \t", &save)) {
      if (*nout == cap) { cap *= 2; char **l2 = realloc(l, sizeof(char *) * (size_t)cap); if (!l2) break; l = l2; }
      l[(*nout)++] = strdup(t);
    }
    free(copy);
    *out = l;
    return NB_OK;
  }
  if (v.t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: %s must be a list of strings, got %s", f, what, nb_typename(v));
  nb_List *l = nb_list(v);
  for (int i = 0; i < l->n; i++)
    if (l->items[i].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: %s must be a list of strings (item %d is a %s)", f, what, i, nb_typename(l->items[i]));
  *out = calloc(l->n > 0 ? (size_t)l->n : 1, sizeof(char *));
  if (!*out) return nb_error(vm, "out of memory");
  for (int i = 0; i < l->n; i++) (*out)[i] = strdup(nb_str(l->items[i])->data);
  *nout = l->n;
  return NB_OK;
}
static int arg_int(nb_VM *vm, const char *f, const char *what, nb_Value v, int *out) {
  if (v.t == NB_TNIL) { *out = 0; return NB_OK; }
  if (v.t != NB_TNUM || v.u.n != (int)v.u.n || v.u.n < 0) return nb_error_kind(vm, "TypeError", "%s: %s must be a non-negative integer", f, what);
  *out = (int)v.u.n;
  return NB_OK;
}

/* env=["NAME", "NAME=VALUE"]: a bare NAME takes this process's value (an
** unset one is an error: a job would silently run without it) */
static int env_values(nb_VM *vm, const char *f, dsess_Launch *o) {
  return dsess_env_values(vm, f, o->env, o->nenv);
}

/* dist.start(n, launcher, backend, timeout, bind, hosts, heartbeat, **opts):
** opts are the launchers' settings: ssh_port, ssh_key, ssh_options,
** remote_nabla (ssh); nodes, gpus_per_node (slurm) */
static int b_start(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *f = "dist.start", *launcher = NULL, *backend = NULL, *bind = NULL;
  dsess_Launch o; memset(&o, 0, sizeof o);
  int elastic = 0, min_workers = 0;
  if (a[0].t != NB_TNUM || a[0].u.n != (int)a[0].u.n) return nb_error_kind(vm, "TypeError", "%s: n must be an integer", f);
  if (arg_str(vm, f, "launcher", a[1], &launcher) || arg_str(vm, f, "backend", a[2], &backend)) return NB_ERR;
  if (a[3].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: timeout must be a number of seconds", f);
  if (a[4].t != NB_TNIL && arg_str(vm, f, "bind", a[4], &bind)) return NB_ERR;
  if (a[6].t != NB_TNUM || a[6].u.n < 0) return nb_error_kind(vm, "TypeError", "%s: heartbeat must be a number of seconds (0: none)", f);
  if (nbD_self.rank >= 0) return dsess_error(vm, "%s: workers cannot start workers", f);
  if (a[5].t == NB_TSTR) {   /* hosts="a,b" */
    char *copy = strdup(nb_str(a[5])->data), *save = NULL;
    o.hosts = calloc(strlen(copy) + 1, sizeof(char *));
    for (char *t = strtok_r(copy, ", ", &save); t && o.hosts; t = strtok_r(NULL, ", ", &save)) o.hosts[o.nhosts++] = strdup(t);
    free(copy);
  } else if (arg_strlist(vm, f, "hosts", a[5], 0, &o.hosts, &o.nhosts)) return NB_ERR;
  if (a[7].t == NB_TREC) {
    nb_Rec *r = nb_rec(a[7]);
    for (int i = 0; i < r->n; i++) {
      const char *k = r->keys[i]->data; nb_Value v = r->vals[i]; const char *sv = NULL; int st = NB_OK;
      if (!strcmp(k, "ssh_port")) st = arg_int(vm, f, k, v, &o.ssh_port);
      else if (!strcmp(k, "nodes")) st = arg_int(vm, f, k, v, &o.nodes);
      else if (!strcmp(k, "gpus_per_node")) st = arg_int(vm, f, k, v, &o.gpus_per_node);
      else if (!strcmp(k, "ssh_key")) { if (v.t != NB_TNIL && !(st = arg_str(vm, f, k, v, &sv))) { free(o.ssh_key); o.ssh_key = strdup(sv); } }
      else if (!strcmp(k, "remote_nabla")) { if (v.t != NB_TNIL && !(st = arg_str(vm, f, k, v, &sv))) { free(o.remote_nabla); o.remote_nabla = strdup(sv); } }
      else if (!strcmp(k, "threads_per_worker")) st = arg_int(vm, f, k, v, &o.threads_per_worker);
      else if (!strcmp(k, "connect_timeout")) st = arg_int(vm, f, k, v, &o.connect_timeout);
      else if (!strcmp(k, "slots")) st = arg_int(vm, f, k, v, &o.slots);
      else if (!strcmp(k, "elastic")) { if (v.t != NB_TBOOL) st = nb_error_kind(vm, "TypeError", "%s: elastic must be true or false, got %s", f, nb_typename(v)); else elastic = v.u.b; }
      else if (!strcmp(k, "min_workers")) st = arg_int(vm, f, k, v, &min_workers);
      else if (!strcmp(k, "env")) {
        for (int j = 0; j < o.nenv; j++) free(o.env[j]);
        free(o.env); o.env = NULL; o.nenv = 0;
        if (!(st = arg_strlist(vm, f, k, v, 0, &o.env, &o.nenv))) st = env_values(vm, f, &o);
      } else if (!strcmp(k, "exclude")) {
        for (int j = 0; j < o.nexclude; j++) free(o.exclude[j]);
        free(o.exclude); o.exclude = NULL; o.nexclude = 0;
        st = arg_strlist(vm, f, k, v, 0, &o.exclude, &o.nexclude);
      } else if (!strcmp(k, "ifname") || !strcmp(k, "ports")) {
        if (v.t != NB_TNIL && !(st = arg_str(vm, f, k, v, &sv))) {
          char *dst = k[0] == 'i' ? o.ifname : o.ports;
          if (strlen(sv) >= sizeof o.ifname) st = dsess_error(vm, "%s: %s is too long (%zu characters)", f, k, strlen(sv));
          else snprintf(dst, sizeof o.ifname, "%s", sv);
        }
      }
      else if (!strcmp(k, "ssh_options")) {
        for (int j = 0; j < o.nssh_opts; j++) free(o.ssh_opts[j]);
        free(o.ssh_opts); o.ssh_opts = NULL; o.nssh_opts = 0;
        st = arg_strlist(vm, f, k, v, 1, &o.ssh_opts, &o.nssh_opts);
      } else st = nb_error_kind(vm, "TypeError", "%s: unknown option %s (ssh: ssh_port, ssh_key, ssh_options, remote_nabla, env, exclude, connect_timeout, slots; all: threads_per_worker, ifname, ports, elastic, min_workers; slurm: nodes, gpus_per_node)", f, k);
      if (st) { dsess_launch_free(&o); return NB_ERR; }
    }
  }
  snprintf(o.launcher, sizeof o.launcher, "%s", launcher);
  snprintf(o.backend, sizeof o.backend, "%s", backend);
  snprintf(o.bind, sizeof o.bind, "%s", bind ? bind : "");
  o.timeout = a[3].u.n; o.heartbeat = a[6].u.n;
  if (o.slots > 0 && !strcmp(o.launcher, "ssh")) {   /* slots= is a promise the first start keeps too */
    int nh = 0; char **h = dsess_usable_hosts(vm, &o, &nh);
    if (!h) { dsess_launch_free(&o); return NB_ERR; }
    free(h);
    if ((long)o.slots * nh < (long)a[0].u.n) { dsess_launch_free(&o); return dsess_error(vm, "%s: %d workers do not fit on %d host%s of %d slot%s each (slots=)", f, (int)a[0].u.n, nh, nh > 1 ? "s" : "", o.slots, o.slots > 1 ? "s" : ""); }
  }
  if (min_workers > (int)a[0].u.n) { dsess_launch_free(&o); return dsess_error(vm, "%s: min_workers=%d is more than the %d workers asked for", f, min_workers, (int)a[0].u.n); }
  dw_stop(&last_start.watch);
  int st = dsess_start(vm, (int)a[0].u.n, &o);
  if (!st) {
    o.slots = dsess_default_slots(&o, (int)a[0].u.n); last_start.n = (int)a[0].u.n; dsess_launch_copy(&last_start.o, &o);
    last_start.elastic = elastic; last_start.min_workers = min_workers ? min_workers : 1;
  }
  dsess_launch_free(&o);
  if (st) return NB_ERR;
  *out = nb_nil();
  return NB_OK;
}
static int b_stop(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  dw_stop(&last_start.watch);
  dsess_stop();
  *out = nb_nil();
  return NB_OK;
}
/* a fresh group with last_start's settings (dsess_plan_restart); *n: its
** size.  An elastic session smaller than it may be watches the lost hosts. */
static int restart_group(nb_VM *vm, const char *f, char **ex, int nex, int reset, int minw, int *n) {
  dsess_Launch o; memset(&o, 0, sizeof o);
  dsess_launch_copy(&o, &last_start.o);
  *n = last_start.n;
  dw_stop(&last_start.watch);
  dsess_note_dead_hosts();   /* the hosts the running group lost: probed by the plan */
  int st = dsess_plan_restart(vm, f, &o, last_start.n, n, ex, nex, reset, minw);
  if (!st) {
    dsess_stop();
    st = dsess_start(vm, *n, &o);
  }
  if (!st) dsess_launch_copy(&last_start.o, &o);   /* last_start.n stays the size asked for */
  dsess_launch_free(&o);
  if (!st && last_start.elastic) dw_start(&last_start.watch, &last_start.o, *n, last_start.n, "nabla dist");
  return st;
}
/* dist.restart(exclude=nil, min_workers=0): a fresh group with the same
** settings (dsess_plan_restart): hosts that failed to start or whose
** workers all died are probed and left out while they do not answer, the
** world is what the hosts left hold at their slots (up to dist.start's n;
** an error below min_workers), exclude=[...] adds to the excluded hosts and
** exclude=[] clears them */
static int b_restart(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  const char *f = "dist.restart";
  if (!last_start.n) return dsess_error(vm, "dist.restart: dist.start was never called");
  char **ex = NULL; int nex = 0, minw = 0, n = 0;
  if (arg_strlist(vm, f, "exclude", a[0], 0, &ex, &nex) || arg_int(vm, f, "min_workers", a[1], &minw)) return NB_ERR;
  int reset = a[0].t == NB_TLIST && nex == 0;
  int st = restart_group(vm, f, ex, nex, reset, minw, &n);
  for (int i = 0; i < nex; i++) free(ex[i]);
  free(ex);
  if (st) return NB_ERR;
  *out = nb_nil();
  return NB_OK;
}

/* the pending error's message (copied; "" when none) */
static void pending_message(nb_VM *vm, char *buf, size_t n) {
  nb_Value e = nb_error_value(vm), m = e.t == NB_TREC ? nbR_get_cstr(nb_rec(e), "message") : nb_undef();
  snprintf(buf, n, "%s", m.t == NB_TSTR ? nb_str(m)->data : "");
}

/* Elastic (dist.start(..., elastic=true)): a session command failed.  When
** the group lost a worker, or the workers stopped at a checkpoint to
** regroup (a lost host answers again), the group starts again by itself,
** as nabla run's does: the hosts that are left (or back), at their slots,
** at least min_workers.  The command still fails — the fresh workers have
** none of the old ones' globals, so nothing is silently half done — with a
** DistRestarted error saying what happened and what to do: push the state
** again and resume from the last checkpoint, then run it again. */
static int elastic_after(nb_VM *vm, const char *f) {
  if (!last_start.elastic || !last_start.n || !dsess_active()) return NB_ERR;
  int regroup = dsess_take_regroup();
  if (!regroup && !dsess_lost_worker()) return NB_ERR;   /* the command's own error */
  char why[1024], rwhy[1024];
  pending_message(vm, why, sizeof why);
  nb_error_clear(vm);
  char *advice = strstr(why, "; call dist.restart()");   /* done here: not the user's to do */
  if (advice && !advice[strlen("; call dist.restart()")]) *advice = 0;
  int was = dsess_size(), n = 0;
  if (restart_group(vm, f, NULL, 0, 0, last_start.min_workers, &n)) {
    pending_message(vm, rwhy, sizeof rwhy);
    nb_error_clear(vm);
    return dsess_error(vm, "%s\nelastic: the group could not continue: %s", why, rwhy);
  }
  char hosts[400] = ""; size_t hl = 0;
  for (int i = 0; i < n && hl < sizeof hosts - 100; i++) {
    dsess_WorkerInfo w; dsess_worker_info(i, &w);
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) { dsess_WorkerInfo u; dsess_worker_info(j, &u); seen = u.host && w.host && !strcmp(u.host, w.host); }
    if (!seen && w.host) hl += (size_t)snprintf(hosts + hl, sizeof hosts - hl, "%s%s", hl ? ", " : "", w.host);
  }
  const char *what = regroup ? "a lost host answers again: the group regrouped at its checkpoint" : "the group lost a worker and restarted";
  fprintf(stderr, "nabla dist: elastic: %s: %s with %d worker%s (was %d) on %s\n", f, what, n, n > 1 ? "s" : "", was, hosts);
  return nb_error_kind(vm, "DistRestarted", "%s\nelastic: %s with %d worker%s (was %d) on %s; the workers start fresh: "
                       "push what they need again, resume from the last dist.save_checkpoint (dist.resume), and run this again",
                       why, what, n, n > 1 ? "s" : "", was, hosts);
}
/* a session command; an elastic group heals on its failure (elastic_after) */
static int session_command(nb_VM *vm, const char *f, const char *type, const void *body, size_t len, const int *targets, dsess_Reply **out) {
  if (dsess_command(vm, f, type, body, len, targets, out)) return elastic_after(vm, f);
  return NB_OK;
}
static int b_exec(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *code = NULL;
  if (arg_str(vm, "dist.exec", "code", a[0], &code)) return NB_ERR;
  dsess_Reply *rep;
  if (session_command(vm, "dist.exec", "exec", code, nb_str(a[0])->len, NULL, &rep)) return NB_ERR;
  dsess_replies_free(rep, dsess_size());
  *out = nb_nil();
  return NB_OK;
}
/* replies carrying serialized values -> a list per rank (or rank's value) */
static int values_of(nb_VM *vm, dsess_Reply *rep, const int *targets, int single, nb_Value *out) {
  nb_List *l = nbL_new(dsess_size());
  for (int i = 0; i < dsess_size(); i++) {
    if (targets && !targets[i]) continue;
    nb_Value v;
    if (nbZ_deserialize(vm, rep[i].body, rep[i].len, &v)) { nb_decref(nb_obj(NB_TLIST, l)); dsess_replies_free(rep, dsess_size()); return NB_ERR; }
    if (single) { nb_decref(nb_obj(NB_TLIST, l)); dsess_replies_free(rep, dsess_size()); *out = v; return NB_OK; }
    nbL_push(l, v);
  }
  dsess_replies_free(rep, dsess_size());
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_run(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  if (nargs < 1) return nb_error_kind(vm, "TypeError", "dist.run(fn, args...): missing the function");
  nb_List *l = nbL_new(nargs);
  for (int i = 0; i < nargs; i++) { nb_incref(a[i]); nbL_push(l, a[i]); }
  nb_Value lv = nb_obj(NB_TLIST, l);
  nb_Buf b = {0};
  int st = nbZ_serialize(vm, lv, &b);
  nb_decref(lv);
  if (st) { nbB_free(&b); return NB_ERR; }
  dsess_Reply *rep;
  st = session_command(vm, "dist.run", "call", b.p, b.n, NULL, &rep);
  nbB_free(&b);
  if (st) return NB_ERR;
  return values_of(vm, rep, NULL, 0, out);
}
static int set_globals(nb_VM *vm, const char *f, nb_Value rec, const int *targets) {
  nb_Buf b = {0};
  if (nbZ_serialize(vm, rec, &b)) { nbB_free(&b); return NB_ERR; }
  dsess_Reply *rep;
  int st = session_command(vm, f, "set", b.p, b.n, targets, &rep);
  nbB_free(&b);
  if (!st) dsess_replies_free(rep, dsess_size());
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
  if (!dsess_active()) return dsess_need(vm, "dist.pull");
  int all = a[1].t == NB_TSTR && !strcmp(nb_str(a[1])->data, "all");
  if (!all && (a[1].t != NB_TNUM || a[1].u.n < 0 || a[1].u.n >= dsess_size() || a[1].u.n != (int)a[1].u.n))
    return nb_error_kind(vm, "ValueError", "dist.pull: rank must be an integer in 0..%d or \"all\"", dsess_size() - 1);
  int *targets = calloc((size_t)dsess_size(), sizeof(int));
  if (!targets) return nb_error(vm, "out of memory");
  for (int i = 0; i < dsess_size(); i++) targets[i] = all || i == (int)a[1].u.n;
  dsess_Reply *rep;
  if (session_command(vm, "dist.pull", "eval", expr, nb_str(a[0])->len, targets, &rep)) { free(targets); return NB_ERR; }
  int st = values_of(vm, rep, targets, !all, out);
  free(targets);
  return st;
}
static int b_scatter(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs; const char *name = NULL, *f = "dist.scatter";
  if (arg_str(vm, f, "name", a[0], &name)) return NB_ERR;
  if (a[1].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor, got %s", f, nb_typename(a[1]));
  if (dsess_need(vm, f)) return elastic_after(vm, f);
  nt_Tensor *t = (nt_Tensor *)a[1].u.p;
  if (t->ndim == 0) return nb_error_kind(vm, "ValueError", "%s: the tensor needs a first axis to split", f);
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)dsess_size());
  int *targets = calloc((size_t)dsess_size(), sizeof(int));
  if (!rows || !targets) { free(rows); free(targets); return nb_error(vm, "out of memory"); }
  nbD_split_rows(t->shape[0], dsess_size(), rows);
  int64_t off = 0; int st = NB_OK;
  for (int i = 0; i < dsess_size() && !st; i++) {
    nt_Tensor *part = nt_narrow(t, 0, off, rows[i]);
    off += rows[i];
    if (!part) { st = nb_error_kind(vm, "TensorError", "%s: %s", f, nt_error_msg()); break; }
    nb_Rec *r = nbR_new(1);
    nbR_set_cstr(r, name, nb_obj(NB_TTENSOR, part));
    memset(targets, 0, sizeof(int) * (size_t)dsess_size()); targets[i] = 1;
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
  dsess_Reply *rep;
  if (session_command(vm, f, "eval", expr, nb_str(a[0])->len, NULL, &rep)) return NB_ERR;
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
  nb_List *l = nbL_new(dsess_size());
  for (int i = 0; i < dsess_size(); i++) {
    dsess_WorkerInfo w; dsess_worker_info(i, &w);
    nb_Rec *r = nbR_new(4);
    nbR_set_cstr(r, "rank", nb_int(i));
    nbR_set_cstr(r, "pid", nb_int(w.pid));
    nbR_set_cstr(r, "host", nb_strv(nbS_cstr(w.host)));
    nbR_set_cstr(r, "alive", nb_bool(!w.dead));
    nbL_push(l, nb_obj(NB_TREC, r));
  }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_info(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  nb_Rec *r = nbR_new(4);
  if (nbD_self.rank >= 0 && nbD_self.g) {
    nbR_set_cstr(r, "rank", nb_int(nbD_self.rank));
    nbR_set_cstr(r, "world", nb_int(nbD_self.world));
    nbR_set_cstr(r, "backend", nb_strv(nbS_cstr(dn_on(nbD_self.g) ? "nccl" : "ring")));
  } else if (dsess_active()) {
    const char *used, *requested, *why;
    dsess_backend(&used, &requested, &why);
    nbR_set_cstr(r, "size", nb_int(dsess_size()));
    nbR_set_cstr(r, "backend", nb_strv(nbS_cstr(used)));
    nbR_set_cstr(r, "requested", nb_strv(nbS_cstr(requested)));
    nbR_set_cstr(r, "reason", why[0] ? nb_strv(nbS_cstr(why)) : nb_nil());
  } else { nb_decref(nb_obj(NB_TREC, r)); *out = nb_nil(); return NB_OK; }
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_endpoint(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  *out = dsess_active() ? nb_strv(nbS_cstr(dsess_endpoint())) : nb_nil();
  return NB_OK;
}
static int b_size(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)vm; (void)a; (void)nargs;
  *out = dsess_active() ? nb_int(dsess_size()) : nb_nil();
  return NB_OK;
}

static int b_node_rank(nb_VM *vm, nb_Value *a, int n, nb_Value *out) { (void)vm; (void)a; (void)n; *out = nbD_self.rank >= 0 ? nb_int(nbD_self.node_rank) : nb_nil(); return NB_OK; }
static int b_local_world(nb_VM *vm, nb_Value *a, int n, nb_Value *out) { (void)vm; (void)a; (void)n; *out = nbD_self.rank >= 0 ? nb_int(nbD_self.local_world) : nb_nil(); return NB_OK; }

/* Elastic membership, the worker's side: the session's `regroup` message
** (dworker.c's I/O thread sets nbD_regroup_flag) asks the group to stop at
** its next step boundary; dist.save_checkpoint agrees on it over the ring
** (an all_reduce max of the flag, which is also its barrier) and every rank
** raises DistRegroup, which `nabla run` takes as "start again at the new
** size from this checkpoint" (not a failure). */
int nbD_regroup_flag;
static int b_regroup_pending(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)vm; (void)a; (void)n;
  *out = nb_bool(nbD_self.rank >= 0 && __atomic_load_n(&nbD_regroup_flag, __ATOMIC_SEQ_CST));
  return NB_OK;
}
static int b_regroup(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; (void)out;
  if (nbD_self.rank < 0) return dsess_error(vm, "dist.regroup: only workers regroup");
  if (a[0].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "dist.regroup: step must be a number");
  return nb_error_kind(vm, "DistRegroup", "regrouping after the checkpoint of step %.0f: the group's membership changes (hosts joined); it resumes at the new size from that checkpoint", a[0].u.n);
}

static nb_Builtin session_builtins[] = {
  { "dist_regroup_pending", b_regroup_pending, "", "dist.regroup_pending(): on a worker, whether the session asked the group to regroup at its next checkpoint (elastic membership: a host joined); false in the session" },
  { "dist_regroup", b_regroup, "step", "dist.regroup(step): ends this rank's script with a DistRegroup error (every rank must, at the same step: dist.save_checkpoint does it when the group agrees), which nabla run takes as a regroup, not a failure" },
  { "dist_node_rank", b_node_rank, "", "dist.node_rank(): the index of this worker's host among the job's hosts (NODE_RANK; nil in the session)" },
  { "dist_local_world_size", b_local_world, "", "dist.local_world_size(): the number of workers on this worker's host (LOCAL_WORLD_SIZE; nil in the session)" },
  { "dist_start", b_start, "n, launcher=\"local\", backend=\"auto\", timeout=300, bind=nil, hosts=nil, heartbeat=10, **opts",
    "dist.start(n, launcher=\"local\", backend=\"auto\", timeout=300, ...): starts n worker processes connected to this session (launcher \"ssh\" with hosts=[...], or \"slurm\"); "
    "backend \"nccl\" runs collectives of CUDA tensors on NCCL (one GPU per worker), \"ring\" over TCP/shared memory, \"auto\" picks nccl when every worker has its own GPU and NCCL loads; "
    "elastic=true (min_workers=k): a command that loses a worker, or that a returning host stops at a checkpoint, restarts the group by itself and raises DistRestarted saying so" },
  { "dist_info", b_info, "", "dist.info(): {size, backend, reason, nccl} in the session (backend: \"ring\" or \"nccl\"; reason: why auto chose the ring); {rank, world, backend} on a worker; nil elsewhere" },
  { "dist_stop", b_stop, "", "dist.stop(): shuts the workers down" },
  { "dist_restart", b_restart, "exclude=nil, min_workers=0", "dist.restart(exclude=nil, min_workers=0): stops whatever is left of the workers and starts fresh ones with the same settings (their globals are lost); ssh hosts that failed to start or lost all their workers are probed and left out while they do not answer (re-admitted when they do), the group is as large as the hosts left hold at their slots (never more workers on a host than the first start put there; up to dist.start's n), an error below min_workers; exclude=[...] adds excluded hosts, exclude=[] clears them" },
  { "dist_exec", b_exec, "code", "dist.exec(code): runs source on every worker; their output is shown prefixed [rank N]" },
  { "dist_run", b_run, "*args", "dist.run(fn, args...): calls fn(args...) on every worker; the list of results by rank" },
  { "dist_push", b_push, "vars=nil, **kw", "dist.push(name=value, ...) or dist.push({name: value}): sets globals on every worker" },
  { "dist_pull", b_pull, "expr, rank=0", "dist.pull(expr, rank=0): the value of expr (source text) on one worker (rank=\"all\": a list by rank)" },
  { "dist_scatter", b_scatter, "name, x", "dist.scatter(name, x): splits tensor x along its first axis; worker r gets part r as global name" },
  { "dist_gather", b_gather, "expr", "dist.gather(expr): the tensors expr gives on every worker, concatenated along the first axis" },
  { "dist_workers", b_workers, "", "dist.workers(): [{rank, pid, host, alive}] of the running workers" },
  { "dist_endpoint", b_endpoint, "", "dist.endpoint(): the session's control address (nil when no workers)" },
  { "dist_size", b_size, "", "dist.size(): the number of workers this session runs (nil when none)" },
  { NULL, NULL, NULL, NULL },
};


/* the elastic watcher's probe must not outlive the program (dist.stop also stops it) */
static void watch_at_exit(void) { dw_stop(&last_start.watch); }

void nbD_init(void) {
  static int done;
  if (done) return;
  done = 1;
  atexit(watch_at_exit);
  nbC_register(session_builtins);
  nbD_coll_init();
  nbD_async_init();
}

/* ------------------------------------------------------------ front-end magics */
char *nbD_magic_code(const char *src, size_t len, int pull) {
  /* the text travels as a single-quoted string: no interpolation, escapes only */
  char *code = malloc(2 * len + 64);
  if (!code) return NULL;
  char *o = code + sprintf(code, "%s('", pull ? "dist_pull" : "dist_exec");
  for (size_t i = 0; i < len; i++) {
    char ch = src[i];
    if (ch == '\\' || ch == '\'') { *o++ = '\\'; *o++ = ch; }
    else if (ch == '\n') { *o++ = '\\'; *o++ = 'n'; }
    else if (ch == '\r') { *o++ = '\\'; *o++ = 'r'; }
    else *o++ = ch;
  }
  strcpy(o, pull ? "', rank=\"all\")" : "')");
  return code;
}
