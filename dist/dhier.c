/*
** dhier.c — hierarchical collectives across hosts (see dhier.h).
**
** Views: like a sub-group (dgroup.c), a stage runs the existing algorithms on
** a dr_Group *view* whose fd[i] is the world's link to its i-th member:
**   lv  the ranks of this host (its shared-memory segment, dshm.c)
**   sv  this rank's stripe: the ranks with its local index on every host,
**       in host order (only local indices < S, the number of stripes)
** all_reduce:  shm all_reduce on lv; TCP ring all_reduce of stripe lidx on
**              sv; shm all_gather of the S stripes on lv.  Every rank ends
**              with the same bits (each stripe is reduced once, then copied).
** all_gather:  shm all_gather of the host's chunks; the leaders (stripe 0)
**              all_gather the host blocks over TCP; shm broadcast on lv.
** broadcast:   one representative per host (src on its host, else the
**              leader) runs the TCP chain; shm broadcast on lv.
** reduce_scatter runs as an all_reduce of the whole buffer (dring.c).
** Failures of a view are copied to the world group (broken, err), so they
** read and recover like the flat ring's.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dist/dhier.h"
#include "dist/dlaunch.h"
#include "dist/dshm.h"

int dh_enabled = 1;

struct dh_Hier {
  int nhosts, L, lidx, S;
  int *host_of, *lidx_of;   /* per world rank */
  int *local, *lfd;         /* the ranks of this host; lv's links */
  int *stripe, *sfd;        /* sv's members and links (lidx < S) */
  dr_Group lv, sv;
};

/* the last connected world's host of each rank, for dh_same_host */
static int *known_host, known_world;

void dh_host_id(char out[33], int rank) {
  const char *t = getenv("NABLA_TEST_HOSTS");
  if (t && *t) {   /* test only: "a,b,a,b" gives rank i the i-th name */
    int i = 0; const char *p = t;
    while (i < rank && p) { p = strchr(p, ','); if (p) p++; i++; }
    if (p) {
      size_t n = strcspn(p, ",");
      if (n > 20) n = 20;
      snprintf(out, 33, "test-%.*s", (int)n, p);
      return;
    }
  }
  /* the machine's identity, as the launcher groups local ranks (dlaunch.c) */
  char id[17];
  dl_host_id(id);
  snprintf(out, 33, "%s", id);
}

int dh_same_host(int a, int b) {
  return known_host && a >= 0 && b >= 0 && a < known_world && b < known_world && known_host[a] == known_host[b];
}

static void view(dr_Group *w, const int *members, int n, int *fdbuf, dr_Group *v) {
  memset(v, 0, sizeof *v);
  v->world = n; v->rank = -1; v->fd = fdbuf; v->listen_fd = -1;
  for (int i = 0; i < n; i++) { fdbuf[i] = members[i] == w->rank ? -1 : w->fd[members[i]]; if (members[i] == w->rank) v->rank = i; }
  v->gen = w->gen; memcpy(v->key, w->key, sizeof v->key);
  v->timeout_ms = w->timeout_ms; v->interrupted = w->interrupted;
  v->world_rank = members; v->group_id = -1;
}

/* a stage on view v ran: its bytes (and failure) count for the world g */
static int after(dr_Group *g, dr_Group *v, int st, uint64_t s0, uint64_t r0) {
  g->bytes_sent += v->bytes_sent - s0; g->bytes_recv += v->bytes_recv - r0;
  v->bytes_sent = s0; v->bytes_recv = r0;
  if (st) { snprintf(g->err, sizeof g->err, "%s", v->err); g->broken = 1; }
  return st;
}
#define STAGE(g, v, call) do { uint64_t s0_ = (v)->bytes_sent, r0_ = (v)->bytes_recv; \
    if (after((g), (v), (call), s0_, r0_)) { st = -1; goto done; } } while (0)

static void hier_free(dh_Hier *h) {
  if (!h) return;
  ds_close(&h->lv);
  free(h->host_of); free(h->lidx_of); free(h->local); free(h->lfd); free(h->stripe); free(h->sfd);
  free(h);
}
void dh_close(dr_Group *g) { hier_free(g->hier); g->hier = NULL; }

static int env_is(const char *name, const char *off) { const char *e = getenv(name); return e && !strcmp(e, off); }

int dh_setup(dr_Group *g) {
  dh_close(g);
  int w = g->world, r = g->rank;
  if (w < 2) return 0;
  char *ids = calloc((size_t)w, 33);
  size_t *cnt = malloc(sizeof(size_t) * (size_t)w);
  int *host = malloc(sizeof(int) * (size_t)w);
  if (!ids || !cnt || !host) { free(ids); free(cnt); free(host); return dr_fail(g, "out of memory"); }
  dh_host_id(ids + (size_t)r * 33, r);
  for (int i = 0; i < w; i++) cnt[i] = 33;
  int st = dr_all_gather(g, ids, cnt, 1);
  free(cnt);
  int nh = 0;
  for (int i = 0; i < w && !st; i++) {
    ids[(size_t)i * 33 + 32] = 0;
    host[i] = -1;
    for (int j = 0; j < i; j++) if (!strcmp(ids + (size_t)i * 33, ids + (size_t)j * 33)) { host[i] = host[j]; break; }
    if (host[i] < 0) host[i] = nh++;
  }
  free(ids);
  if (st) { free(host); return -1; }
  free(known_host); known_host = host; known_world = w;
  if (nh == 1) return ds_setup(g);   /* one host: one segment for all */
  if (env_is("NABLA_HIER", "0") || nh == w) return 0;   /* off, or one rank per host: the flat ring is the hierarchy */
  dh_Hier *h = calloc(1, sizeof *h);
  if (!h) return dr_fail(g, "out of memory");
  h->nhosts = nh;
  h->host_of = malloc(sizeof(int) * (size_t)w); h->lidx_of = malloc(sizeof(int) * (size_t)w);
  int *per = calloc((size_t)nh, sizeof(int));
  if (!h->host_of || !h->lidx_of || !per) { free(per); hier_free(h); return dr_fail(g, "out of memory"); }
  memcpy(h->host_of, host, sizeof(int) * (size_t)w);
  for (int i = 0; i < w; i++) h->lidx_of[i] = per[host[i]]++;
  h->L = per[host[r]]; h->lidx = h->lidx_of[r];
  int uniform = 1;
  for (int k = 1; k < nh; k++) if (per[k] != per[0]) uniform = 0;
  h->S = uniform ? h->L : 1;
  free(per);
  h->local = malloc(sizeof(int) * (size_t)h->L); h->lfd = malloc(sizeof(int) * (size_t)h->L);
  h->stripe = malloc(sizeof(int) * (size_t)nh); h->sfd = malloc(sizeof(int) * (size_t)nh);
  if (!h->local || !h->lfd || !h->stripe || !h->sfd) { hier_free(h); return dr_fail(g, "out of memory"); }
  for (int i = 0, k = 0; i < w; i++) if (host[i] == host[r]) h->local[k++] = i;
  view(g, h->local, h->L, h->lfd, &h->lv);
  if (h->lidx < h->S) {
    for (int k = 0; k < nh; k++) h->stripe[k] = -1;
    for (int i = 0; i < w; i++) if (h->lidx_of[i] == h->lidx) h->stripe[host[i]] = i;
    view(g, h->stripe, nh, h->sfd, &h->sv);
  }
  /* the segment of this host (its ranks only: each host sets up its own at once) */
  if (h->L > 1 && ds_setup(&h->lv)) { st = dr_fail(g, "%s", h->lv.err); hier_free(h); return st; }
  int64_t ok = h->L == 1 || h->lv.shm;
  if (dr_all_reduce(g, &ok, 1, DR_I64, DR_MIN)) { hier_free(h); return -1; }
  if (!ok) { hier_free(h); return 0; }   /* some host has no shared memory: the flat ring */
  g->hier = h;
  return 0;
}

static size_t split_off(size_t n, int w, int q) { return n / (size_t)w * (size_t)q + ((size_t)q < n % (size_t)w ? (size_t)q : n % (size_t)w); }

int dh_all_reduce(dr_Group *g, void *buf, size_t count, int dtype, int op) {
  dh_Hier *h = g->hier;
  size_t es = dr_esize(dtype);
  int st = 0, S = h->S;
  size_t cnts[256], *c = S <= 256 && h->L <= 256 ? cnts : malloc(sizeof(size_t) * (size_t)(S > h->L ? S : h->L));
  if (!c) return dr_fail(g, "out of memory");
  if (h->L > 1) STAGE(g, &h->lv, ds_all_reduce(&h->lv, buf, count, dtype, op));
  if (h->lidx < S) {
    size_t off = split_off(count, S, h->lidx), n = split_off(count, S, h->lidx + 1) - off;
    STAGE(g, &h->sv, dr_all_reduce(&h->sv, (char *)buf + off * es, n, dtype, op));
  }
  if (h->L > 1) {
    for (int l = 0; l < h->L; l++) c[l] = l < S ? split_off(count, S, l + 1) - split_off(count, S, l) : 0;
    STAGE(g, &h->lv, ds_all_gather(&h->lv, buf, c, es));
  }
done:
  if (c != cnts) free(c);
  return st;
}

int dh_all_gather(dr_Group *g, void *buf, const size_t *counts, size_t es) {
  dh_Hier *h = g->hier;
  int w = g->world, nh = h->nhosts, st = 0;
  size_t *off = malloc(sizeof(size_t) * (size_t)(w + h->L + nh)), *lc = off + w, *hc = lc + h->L, tot = 0, ltot = 0;
  char *tmp = NULL, *b = buf;
  if (!off) return dr_fail(g, "out of memory");
  for (int i = 0; i < w; i++) { off[i] = tot; tot += counts[i]; }
  for (int k = 0; k < nh; k++) hc[k] = 0;
  for (int i = 0; i < w; i++) hc[h->host_of[i]] += counts[i];
  for (int l = 0; l < h->L; l++) { lc[l] = counts[h->local[l]]; ltot += lc[l]; }
  tmp = malloc(tot * es + 1);
  if (!tmp) { free(off); return dr_fail(g, "out of memory"); }
  /* 1: this host's chunks, packed in local order, on every local rank */
  if (h->L > 1) {
    size_t lo = 0;
    for (int l = 0; l < h->lidx; l++) lo += lc[l];
    memcpy(tmp + lo * es, b + off[g->rank] * es, counts[g->rank] * es);
    STAGE(g, &h->lv, ds_all_gather(&h->lv, tmp, lc, es));
    for (int l = 0, p = 0; l < h->L; p += (int)lc[l], l++) memcpy(b + off[h->local[l]] * es, tmp + (size_t)p * es, lc[l] * es);
  }
  /* 2: the leaders exchange host blocks (packed in host order) */
  if (h->lidx == 0) {
    size_t *ho = malloc(sizeof(size_t) * (size_t)(nh + 1));
    if (!ho) { st = dr_fail(g, "out of memory"); goto done; }
    ho[0] = 0;
    for (int k = 0; k < nh; k++) ho[k + 1] = ho[k] + hc[k];
    size_t *fill = calloc((size_t)nh, sizeof(size_t));
    if (!fill) { free(ho); st = dr_fail(g, "out of memory"); goto done; }
    for (int i = 0; i < w; i++) {
      int k = h->host_of[i];
      if (k == h->host_of[g->rank]) memcpy(tmp + (ho[k] + fill[k]) * es, b + off[i] * es, counts[i] * es);
      fill[k] += counts[i];
    }
    int s2 = dr_all_gather(&h->sv, tmp, hc, es);
    if (!s2) {
      for (int k = 0; k < nh; k++) fill[k] = 0;
      for (int i = 0; i < w; i++) { int k = h->host_of[i]; memcpy(b + off[i] * es, tmp + (ho[k] + fill[k]) * es, counts[i] * es); fill[k] += counts[i]; }
    }
    free(ho); free(fill);
    STAGE(g, &h->sv, s2);
  }
  /* 3: the leader's full buffer to the host */
  if (h->L > 1) STAGE(g, &h->lv, ds_broadcast(&h->lv, b, tot * es, 0));
done:
  (void)ltot;
  free(tmp); free(off);
  return st;
}

int dh_broadcast(dr_Group *g, void *buf, size_t nbytes, int src) {
  dh_Hier *h = g->hier;
  int nh = h->nhosts, st = 0, mine = h->host_of[g->rank], srch = h->host_of[src];
  int *rep = malloc(sizeof(int) * (size_t)nh * 2);
  if (!rep) return dr_fail(g, "out of memory");
  for (int k = 0; k < nh; k++) rep[k] = -1;
  for (int i = 0; i < g->world; i++) { int k = h->host_of[i]; if (rep[k] < 0 && k != srch) rep[k] = i; }
  rep[srch] = src;
  if (rep[mine] == g->rank) {
    dr_Group rv;
    view(g, rep, nh, rep + nh, &rv);
    STAGE(g, &rv, dr_broadcast(&rv, buf, nbytes, srch));
  }
  if (h->L > 1) STAGE(g, &h->lv, ds_broadcast(&h->lv, buf, nbytes, h->lidx_of[rep[mine]]));
done:
  free(rep);
  return st;
}
