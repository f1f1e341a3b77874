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
** all_gather:  every host the same size: each local rank all-gathers its
**              stripe (the chunks of its local index, one per host) over
**              TCP on sv, then shm all_gather of the L stripes on lv.
**              Else: shm all_gather of the host's chunks; the leaders
**              (stripe 0) all_gather the host blocks over TCP; shm
**              broadcast on lv.
** broadcast:   one representative per host (src on its host, else the
**              leader) runs the TCP chain; shm broadcast on lv.
** reduce_scatter: shm all_reduce on lv; each local rank reduce-scatters its
**              stripe (its peers' chunks) over TCP on sv (dh_reduce_scatter).
** Sub-groups spanning hosts get their own hierarchy on first use (dh_build
** from the world's host map; dgroup.c).
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
#include "dist/dchan.h"

int dh_enabled = 1;

struct dh_Hier {
  int nhosts, L, lidx, S;
  int uniform;              /* every host has L ranks (the same on all ranks; S == L) */
  int *host_of, *lidx_of;   /* per world rank */
  int *local, *lfd, *lwr;   /* the ranks of this host; lv's links and world ranks */
  int *stripe, *sfd, *swr;  /* sv's members, links and world ranks (lidx < S) */
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

/* a view of w's members (positions in w); wrbuf gets their world ranks
** (w may itself be a sub-group's view) */
static void view(dr_Group *w, const int *members, int n, int *fdbuf, int *wrbuf, dr_Group *v) {
  memset(v, 0, sizeof *v);
  v->world = n; v->rank = -1; v->fd = fdbuf; v->listen_fd = -1;
  for (int i = 0; i < n; i++) {
    fdbuf[i] = members[i] == w->rank ? -1 : w->fd[members[i]];
    if (members[i] == w->rank) v->rank = i;
    wrbuf[i] = w->world_rank ? w->world_rank[members[i]] : members[i];
  }
  v->gen = w->gen; memcpy(v->key, w->key, sizeof v->key);
  v->timeout_ms = w->timeout_ms; v->interrupted = w->interrupted;
  v->world_rank = wrbuf; v->group_id = -1;
  v->chan = w->chan;
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
  free(h->host_of); free(h->lidx_of); free(h->local); free(h->lfd); free(h->lwr); free(h->stripe); free(h->sfd); free(h->swr);
  free(h);
}
void dh_close(dr_Group *g) { hier_free(g->hier); g->hier = NULL; }

static int env_is(const char *name, const char *off) { const char *e = getenv(name); return e && !strcmp(e, off); }

int dh_setup(dr_Group *g) {
  dh_close(g);
  int w = g->world, r = g->rank;
  if (w < 2) return 0;
  /* per rank: its host id (33 bytes) and its kernel's boot id hash (17):
  ** ranks on one kernel share its cores even on different (namespace) hosts */
  enum { HID = 33, REC = 50 };
  char *ids = calloc((size_t)w, REC);
  size_t *cnt = malloc(sizeof(size_t) * (size_t)w);
  int *host = malloc(sizeof(int) * (size_t)w);
  if (!ids || !cnt || !host) { free(ids); free(cnt); free(host); return dr_fail(g, "out of memory"); }
  dh_host_id(ids + (size_t)r * REC, r);
  dl_kernel_id(ids + (size_t)r * REC + HID);
  for (int i = 0; i < w; i++) cnt[i] = REC;
  int st = dr_all_gather(g, ids, cnt, 1);
  free(cnt);
  int nh = 0, kern = 0;
  for (int i = 0; i < w && !st; i++) {
    ids[(size_t)i * REC + HID - 1] = 0; ids[(size_t)i * REC + REC - 1] = 0;
    host[i] = -1;
    for (int j = 0; j < i; j++) if (!strcmp(ids + (size_t)i * REC, ids + (size_t)j * REC)) { host[i] = host[j]; break; }
    if (host[i] < 0) host[i] = nh++;
    kern += !strcmp(ids + (size_t)i * REC + HID, ids + (size_t)r * REC + HID);
  }
  ds_kernel_ranks = kern;
  free(ids);
  if (st) { free(host); return -1; }
  free(known_host); known_host = host; known_world = w;
  if (dc_setup(g, host)) return -1;   /* send/recv between ranks of one host: shared memory */
  if (nh == 1) return ds_setup(g);   /* one host: one segment for all */
  return dh_build(g, host);
}

int dh_host_of(int world_rank) { return known_host && world_rank >= 0 && world_rank < known_world ? known_host[world_rank] : -1; }

int dh_build(dr_Group *g, const int *host) {
  dh_close(g);
  int w = g->world, r = g->rank, nh = 0, st = 0;
  for (int i = 0; i < w; i++) if (host[i] + 1 > nh) nh = host[i] + 1;
  if (env_is("NABLA_HIER", "0") || nh < 2) return 0;
  {   /* hosts numbered 0..nh-1 may skip numbers (a sub-group): count the ones present */
    int present = 0;
    for (int k = 0; k < nh; k++) { int any = 0; for (int i = 0; i < w && !any; i++) any = host[i] == k; present += any; }
    if (present == w || present < 2) return 0;   /* one rank per host: the flat ring is the hierarchy */
  }
  int *hmap = malloc(sizeof(int) * (size_t)nh), *hh = malloc(sizeof(int) * (size_t)w);
  if (!hmap || !hh) { free(hmap); free(hh); return dr_fail(g, "out of memory"); }
  for (int k = 0; k < nh; k++) hmap[k] = -1;
  int n2 = 0;
  for (int i = 0; i < w; i++) { if (hmap[host[i]] < 0) hmap[host[i]] = n2++; hh[i] = hmap[host[i]]; }   /* hosts in order of first rank */
  free(hmap);
  host = hh; nh = n2;
  dh_Hier *h = calloc(1, sizeof *h);
  if (!h) { free(hh); return dr_fail(g, "out of memory"); }
  h->nhosts = nh;
  h->host_of = hh; h->lidx_of = malloc(sizeof(int) * (size_t)w);
  int *per = calloc((size_t)nh, sizeof(int));
  if (!h->lidx_of || !per) { free(per); hier_free(h); return dr_fail(g, "out of memory"); }
  for (int i = 0; i < w; i++) h->lidx_of[i] = per[host[i]]++;
  h->L = per[host[r]]; h->lidx = h->lidx_of[r];
  int uniform = 1;
  for (int k = 1; k < nh; k++) if (per[k] != per[0]) uniform = 0;
  h->S = uniform ? h->L : 1;
  h->uniform = uniform;
  free(per);
  h->local = malloc(sizeof(int) * (size_t)h->L); h->lfd = malloc(sizeof(int) * (size_t)h->L); h->lwr = malloc(sizeof(int) * (size_t)h->L);
  h->stripe = malloc(sizeof(int) * (size_t)nh); h->sfd = malloc(sizeof(int) * (size_t)nh); h->swr = malloc(sizeof(int) * (size_t)nh);
  if (!h->local || !h->lfd || !h->lwr || !h->stripe || !h->sfd || !h->swr) { hier_free(h); return dr_fail(g, "out of memory"); }
  for (int i = 0, k = 0; i < w; i++) if (host[i] == host[r]) h->local[k++] = i;
  view(g, h->local, h->L, h->lfd, h->lwr, &h->lv);
  if (h->lidx < h->S) {
    for (int k = 0; k < nh; k++) h->stripe[k] = -1;
    for (int i = 0; i < w; i++) if (h->lidx_of[i] == h->lidx) h->stripe[host[i]] = i;
    view(g, h->stripe, nh, h->sfd, h->swr, &h->sv);
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
  if (h->L > 1) {   /* only this rank's stripe of the host's sum is needed (ranks without one: none) */
    size_t keep[2] = { 0, 0 };
    if (h->lidx < S) { keep[0] = split_off(count, S, h->lidx); keep[1] = split_off(count, S, h->lidx + 1); }
    STAGE(g, &h->lv, ds_all_reduce_keep(&h->lv, buf, count, dtype, op, keep, 1));
  }
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

/* Striped reduce_scatter (every host has L ranks): shared-memory all_reduce
** of the buffer on each host, then each local rank l reduce-scatters its
** stripe -- the chunks of the ranks with local index l, one per host --
** over TCP with its peers of index l on the other hosts, and keeps its own
** chunk.  Each rank sends (hosts-1)/hosts of its stripe: half of what the
** all_reduce of the whole buffer moves, and all L links of a host carry it. */
int dh_reduce_scatter(dr_Group *g, void *buf, const size_t *counts, int dtype, int op) {
  dh_Hier *h = g->hier;
  int w = g->world, nh = h->nhosts, st = 0, me = g->rank;
  size_t es = dr_esize(dtype), tot = 0;
  for (int i = 0; i < w; i++) tot += counts[i];
  if (!h->uniform) return dh_all_reduce(g, buf, tot, dtype, op);   /* hosts of different sizes: no stripes (all ranks agree) */
  size_t *off = malloc(sizeof(size_t) * (size_t)(w + nh + 1)), *sc = off + w, stot = 0;
  if (!off) return dr_fail(g, "out of memory");
  for (size_t i = 0, a = 0; i < (size_t)w; a += counts[i], i++) off[i] = a;
  for (int k = 0; k < nh; k++) { sc[k] = counts[h->stripe[k]]; stot += sc[k]; }
  char *tmp = malloc(stot * es + 1), *b = buf;
  size_t *keep = malloc(sizeof(size_t) * 2 * (size_t)nh);
  if (!tmp || !keep) { free(tmp); free(keep); free(off); return dr_fail(g, "out of memory"); }
  for (int k = 0; k < nh; k++) { keep[2 * k] = off[h->stripe[k]]; keep[2 * k + 1] = off[h->stripe[k]] + sc[k]; }
  if (h->L > 1) STAGE(g, &h->lv, ds_all_reduce_keep(&h->lv, buf, tot, dtype, op, keep, nh));   /* only the stripe's chunks come back */
  {
    size_t p = 0;
    for (int k = 0; k < nh; k++) { memcpy(tmp + p * es, b + off[h->stripe[k]] * es, sc[k] * es); p += sc[k]; }
    STAGE(g, &h->sv, dr_reduce_scatter(&h->sv, tmp, sc, dtype, op));
    size_t mine = 0;
    for (int k = 0; k < h->host_of[me]; k++) mine += sc[k];
    memcpy(b + off[me] * es, tmp + mine * es, counts[me] * es);
  }
done:
  free(tmp); free(off); free(keep);
  return st;
}

/* Striped all_gather (every host has L ranks): each local rank l gathers the
** chunks of local index l from every host over TCP with its peers of index l
** (its stripe, packed in host order), then the L stripes are all-gathered in
** shared memory on each host.  All L links of a host carry (hosts-1)/hosts
** of the result between them, instead of the leader's one link carrying it
** all; copies only, so every rank ends with the same bytes as the flat ring. */
static int all_gather_striped(dr_Group *g, void *buf, const size_t *counts, size_t es) {
  dh_Hier *h = g->hier;
  int w = g->world, nh = h->nhosts, L = h->L, st = 0, me = g->rank;
  char *b = buf;
  /* off: each rank's offset in buf; sc: this stripe's chunks (host order);
  ** lc: each stripe's total; at: each rank's offset in the packed buffer */
  size_t *off = malloc(sizeof(size_t) * (size_t)(3 * w + nh + L)), *at = off + w, *sc = at + w, *lc = sc + nh, *pos = lc + L;
  if (!off) return dr_fail(g, "out of memory");
  size_t tot = 0;
  for (int i = 0; i < w; i++) { off[i] = tot; tot += counts[i]; }
  for (int l = 0; l < L; l++) lc[l] = 0;
  for (int i = 0; i < w; i++) lc[h->lidx_of[i]] += counts[i];
  /* the packed layout: stripe 0's chunks in host order, then stripe 1's, ... */
  {
    size_t *start = calloc((size_t)L + 1, sizeof(size_t));
    int *ord = malloc(sizeof(int) * (size_t)w);
    if (!start || !ord) { free(start); free(ord); free(off); return dr_fail(g, "out of memory"); }
    for (int l = 0; l < L; l++) start[l + 1] = start[l] + lc[l];
    /* within a stripe, hosts in order: rank i's host number orders it (host_of counts hosts in order of first rank) */
    for (int k = 0, n = 0; k < nh; k++) for (int i = 0; i < w; i++) if (h->host_of[i] == k) ord[n++] = i;
    for (int l = 0; l < L; l++) pos[l] = start[l];
    for (int n = 0; n < w; n++) { int i = ord[n]; at[i] = pos[h->lidx_of[i]]; pos[h->lidx_of[i]] += counts[i]; }
    free(start); free(ord);
  }
  for (int k = 0; k < nh; k++) sc[k] = counts[h->stripe[k]];
  char *tmp = malloc(tot * es + 1);
  if (!tmp) { free(off); return dr_fail(g, "out of memory"); }
  /* 1: this stripe over TCP, in place in the packed buffer (its chunks are contiguous there) */
  size_t s0 = at[h->stripe[0]];
  memcpy(tmp + at[me] * es, b + off[me] * es, counts[me] * es);
  STAGE(g, &h->sv, dr_all_gather(&h->sv, tmp + s0 * es, sc, es));
  /* 2: the host's L stripes in shared memory */
  STAGE(g, &h->lv, ds_all_gather(&h->lv, tmp, lc, es));
  for (int i = 0; i < w; i++) memcpy(b + off[i] * es, tmp + at[i] * es, counts[i] * es);
done:
  free(tmp); free(off);
  return st;
}

int dh_all_gather(dr_Group *g, void *buf, const size_t *counts, size_t es) {
  dh_Hier *h = g->hier;
  if (h->uniform && h->L > 1 && !env_is("NABLA_HIER_GATHER", "leader")) return all_gather_striped(g, buf, counts, es);
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
  int *rep = malloc(sizeof(int) * (size_t)nh * 3);
  if (!rep) return dr_fail(g, "out of memory");
  for (int k = 0; k < nh; k++) rep[k] = -1;
  for (int i = 0; i < g->world; i++) { int k = h->host_of[i]; if (rep[k] < 0 && k != srch) rep[k] = i; }
  rep[srch] = src;
  if (rep[mine] == g->rank) {
    dr_Group rv;
    view(g, rep, nh, rep + nh, rep + 2 * nh, &rv);
    STAGE(g, &rv, dr_broadcast(&rv, buf, nbytes, srch));
  }
  if (h->L > 1) STAGE(g, &h->lv, ds_broadcast(&h->lv, buf, nbytes, h->lidx_of[rep[mine]]));
done:
  free(rep);
  return st;
}
