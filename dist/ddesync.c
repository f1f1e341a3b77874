/*
** ddesync.c — desync detection: every collective's signature is checked
** against the group's before its data moves (see ddesync.h).
**
** Cost per collective: on one host (shared memory) nothing but the hash:
** all_reduce, all_gather, reduce_scatter, broadcast, barrier and
** all_reduce_coalesced, whose data goes through the segment next, hand it to
** dshm.c, which publishes it with the collective's first barrier and compares
** when that barrier completes (so the mismatch is still found before any
** rank uses the data); the other calls (all_to_all, "end", anything under
** NCCL) publish it with a barrier of their own.  Over TCP every rank sends its 8-byte hash to every other over the
** direct links (dr_exchange: one network hop, where the ring would take
** 2(w-1)).  Measured by bench/dist/desync_overhead.py.  Only on a mismatch does a second exchange
** (an all_gather of fixed 160-byte descriptions) run, so that every rank can
** name every other's call.  Both exchanges have the same shape whatever the
** collective, so ranks that disagree still meet in them.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/ddesync.h"
#include "dist/dgroup.h"
#include "dist/dshm.h"
#include "dist/dnccl.h"

int dd_enabled = -1;
static int enabled(void) {
  if (dd_enabled < 0) { const char *e = getenv("NABLA_DESYNC"); dd_enabled = !(e && (!strcmp(e, "0") || !strcmp(e, "off"))); }
  return dd_enabled;
}

#define DESC 160
/* the sequence number of each group (index: the dgroup.c id; ids are local,
** but a rank's ids are stable), restarted when the mesh is reconnected */
static struct { uint32_t gen; uint64_t seq; } seqs[NBD_MAXGROUPS + 1];

/* without snprintf: this runs before every collective, and the whole check
** must stay a small fraction of a 4 KB all_reduce (bench/dist/desync_cost.c) */
static char *put(char *p, const char *end, const char *s) { while (*s && p < end) *p++ = *s++; return p; }
static char *put_int(char *p, const char *end, long long v) {
  char t[24]; int k = 0;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do t[k++] = (char)('0' + u % 10); while (u /= 10);
  if (v < 0 && p < end) *p++ = '-';
  while (k && p < end) *p++ = t[--k];
  return p;
}
void dd_describe(char *out, size_t n, const char *call, const char *arg, const nt_Tensor *x, int shape_from) {
  if (!n) return;
  char *p = out;
  const char *end = out + n - 1;
  p = put(p, end, call); p = put(p, end, "(");
  if (arg) p = put(p, end, arg);
  if (arg && x) p = put(p, end, ", ");
  if (x) {
    p = put(p, end, nt_dtype_name(x->dtype)); p = put(p, end, "[");
    for (int i = 0; i < x->ndim; i++) {
      if (i) p = put(p, end, ",");
      p = i < shape_from ? put(p, end, "*") : put_int(p, end, (long long)x->shape[i]);
    }
    p = put(p, end, "]");
  }
  p = put(p, end, ")");
  *p = 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ull; }
  return h;
}

/* "ranks 0,2,3" / "rank 1" for the ranks whose description is d (world ranks) */
static void ranks_of(char *out, size_t n, const dr_Group *g, const char *all, const char *d, uint64_t *used) {
  size_t k = 0; int cnt = 0;
  for (int i = 0; i < g->world; i++) if (!strcmp(all + (size_t)i * DESC, d)) cnt++;
  k = (size_t)snprintf(out, n, "%s ", cnt > 1 ? "ranks" : "rank");
  int first = 1;
  for (int i = 0; i < g->world && k < n; i++) {
    if (strcmp(all + (size_t)i * DESC, d)) continue;
    if (i < 64) *used |= 1ull << i;
    k += (size_t)snprintf(out + k, n - k, "%s%d", first ? "" : ",", g->world_rank ? g->world_rank[i] : i);
    first = 0;
  }
}

int dd_report(dr_Group *g, const char *mine, uint64_t seq) {
  char *all = calloc((size_t)g->world, DESC);
  size_t *cnt = malloc(sizeof(size_t) * (size_t)g->world);
  if (!all || !cnt) { free(all); free(cnt); return dr_fail(g, "desync detected (out of memory describing it)"); }
  for (int i = 0; i < g->world; i++) cnt[i] = DESC;
  snprintf(all + (size_t)g->rank * DESC, DESC, "%s", mine);
  if (dr_all_gather(g, all, cnt, 1)) { free(all); free(cnt); return -1; }
  for (int i = 0; i < g->world; i++) all[(size_t)i * DESC + DESC - 1] = 0;   /* a peer's bytes: terminate */
  /* the group as the user knows it */
  char grp[96] = "the world group";
  if (g->world_rank) {
    size_t k = (size_t)snprintf(grp, sizeof grp, "group [");
    for (int i = 0; i < g->world && k < sizeof grp; i++) k += (size_t)snprintf(grp + k, sizeof grp - k, "%s%d", i ? "," : "", g->world_rank[i]);
    if (k < sizeof grp) snprintf(grp + k, sizeof grp - k, "]");
  }
  /* up to three distinct calls, the most common first; NUL-free %s strings only */
  char msg[480]; size_t k = (size_t)snprintf(msg, sizeof msg, "collective desync in %s at its collective #%llu:", grp, (unsigned long long)seq);
  uint64_t used = 0; int shown = 0;
  for (int pass = 0; pass < g->world && shown < 3 && k < sizeof msg; pass++) {
    int best = -1, bestn = 0;
    for (int i = 0; i < g->world && i < 64; i++) {
      if (used >> i & 1) continue;
      int c = 0;
      for (int j = 0; j < g->world; j++) if (!strcmp(all + (size_t)i * DESC, all + (size_t)j * DESC)) c++;
      if (c > bestn) { bestn = c; best = i; }
    }
    if (best < 0) break;
    char who[128]; ranks_of(who, sizeof who, g, all, all + (size_t)best * DESC, &used);
    const char *d = all + (size_t)best * DESC;
    if (!strcmp(d, "end")) k += (size_t)snprintf(msg + k, sizeof msg - k, "%s %s finished the command (called no more collectives)", shown ? ";" : "", who);
    else k += (size_t)snprintf(msg + k, sizeof msg - k, "%s %s called %s", shown ? ";" : "", who, d);
    shown++;
  }
  free(all); free(cnt);
  return dr_fail(g, "%s (every rank of a group must call the same collectives in the same order)", msg);
}

/* whether the data of the call described next goes through g's
** shared-memory segment at once (dtensorcoll.c: a CPU tensor, or a CUDA one
** staged through host memory, of these calls goes dr_* -> ds_*), so that its
** first barrier can carry the check; NCCL moves CUDA tensors elsewhere */
static int deferrable(const dr_Group *g, const char *desc) {
  static const char *const calls[] = { "all_reduce(", "all_gather(", "reduce_scatter(", "broadcast(", "barrier(",
                                        "all_reduce_coalesced(", "all_gather backward(", "reduce_scatter backward(" };
  if (dn_on(g)) return 0;
  for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) if (!strncmp(desc, calls[i], strlen(calls[i]))) return 1;
  return 0;
}

static int check(dr_Group *g, const char *desc);
/* dist.bytes() counts the data of collectives, not this control traffic */
int dd_check(dr_Group *g, const char *desc) {
  if (!enabled() || g->world <= 1 || !g->fd) return 0;   /* no mesh yet: the collective itself says so */
  uint64_t s0 = g->bytes_sent, r0 = g->bytes_recv;
  int st = check(g, desc);
  g->bytes_sent = s0; g->bytes_recv = r0;
  return st;
}
static int check(dr_Group *g, const char *desc) {
  if (g->broken) return 0;   /* the collective itself reports the broken group */
  int id = g->group_id >= 0 && g->group_id <= NBD_MAXGROUPS ? g->group_id : 0;
  if (seqs[id].gen != g->gen) { seqs[id].gen = g->gen; seqs[id].seq = 0; }
  uint64_t seq = ++seqs[id].seq;
  uint64_t h = fnv(0xcbf29ce484222325ull, &seq, sizeof seq);
  h = fnv(h, desc, strlen(desc));
  if (g->world_rank) h = fnv(h, g->world_rank, sizeof(int) * (size_t)g->world);
  if (ds_on(g)) {   /* one host: the hash rides in a barrier (dshm.c) */
    if (deferrable(g, desc)) { ds_sig_defer(g, h, seq, desc); return 0; }
    return ds_sig_check(g, h, seq, desc);
  } else {          /* TCP: every hash to every rank in one hop */
    uint64_t one[256], *all = g->world <= 256 ? one : malloc(sizeof(uint64_t) * (size_t)g->world);
    if (!all) return dr_fail(g, "out of memory");
    int st = dr_exchange(g, &h, all, sizeof h), same = 1;
    for (int i = 0; i < g->world && !st; i++) if (all[i] != h) same = 0;
    if (all != one) free(all);
    if (st) return -1;
    if (same) return 0;
  }
  return dd_report(g, desc, seq);
}

int nbD_desync_end(void) {
  dr_Group *g = nbD_self.g;
  if (!g || !g->fd || g->broken || nbD_group_current() != 0) return 0;
  if (dd_check(g, "end")) { nt_error_set("%s", g->err); return -1; }
  return 0;
}
