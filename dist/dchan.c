/*
** dchan.c — shared-memory channels between the ranks of one host (dchan.h).
**
** One segment per host, made by the host's first rank (a memfd, opened by
** the others through /proc/<pid>/fd as dshm.c does: no name, nothing left
** behind) and holding, for every ordered pair (a, b) of the host's L ranks,
** a single-producer single-consumer byte ring a -> b of CAP bytes: head
** (bytes written, by a) and tail (bytes read, by b) on their own cache lines.
** Every rank has a doorbell word: a producer rings the consumer's after
** writing, a consumer rings the producer's after reading, and a rank with
** nothing to do sleeps on its own doorbell (a futex), so one wait covers
** both directions of a sendrecv and an isend thread beside it.
**
** One ring per direction and the link's serialisation above (blocking sends
** drain isends, isends on one link wait for each other: dtensorcoll.c) keep
** every ring single-producer single-consumer.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include "dist/dchan.h"
#include "dist/dshm.h"
#include "util/clock.h"

#define MAGIC 0x4e424348u               /* "NBCH" */
#define HDR 4096u
#define CTL 4096u                       /* a ring's control page (head, tail) */
#define MAXL 64                         /* more ranks on one host: TCP (L*(L-1) rings) */
#define SPIN 2000
#define NAME "nabla-chan"

typedef struct { uint32_t magic, L; uint64_t cap; unsigned char token[16]; } Hdr;

struct dc_Chan {
  char *base; size_t size, cap;
  int L, me, world, spin;
  int *lidx_of;                         /* per world rank: its index on this host, -1 elsewhere */
};

static uint32_t *bell(dc_Chan *c, int l) { return (uint32_t *)(c->base + sizeof(Hdr) + 64 + 64u * (unsigned)l); }
static size_t rings_off(int L) { return (HDR + 64u * (unsigned)(L + 2) + 4095u) & ~(size_t)4095u; }
static char *ring(dc_Chan *c, int a, int b) { return c->base + rings_off(c->L) + ((size_t)a * (size_t)c->L + (size_t)b) * (CTL + c->cap); }
static uint64_t *head(char *rg) { return (uint64_t *)rg; }
static uint64_t *tail(char *rg) { return (uint64_t *)(rg + 64); }

static void ring_bell(uint32_t *w) { __atomic_add_fetch(w, 1, __ATOMIC_SEQ_CST); ds_futex_wake(w); }

/* copies up to n bytes into ring rg; how many went in */
static size_t put(dc_Chan *c, char *rg, const char *src, size_t n) {
  uint64_t h = *head(rg), t = __atomic_load_n(tail(rg), __ATOMIC_ACQUIRE);
  size_t space = c->cap - (size_t)(h - t), k = n < space ? n : space;
  if (!k) return 0;
  char *data = rg + CTL;
  size_t at = (size_t)(h % c->cap), first = c->cap - at < k ? c->cap - at : k;
  memcpy(data + at, src, first);
  if (k > first) memcpy(data, src + first, k - first);
  __atomic_store_n(head(rg), h + k, __ATOMIC_RELEASE);
  return k;
}
static size_t get(dc_Chan *c, char *rg, char *dst, size_t n) {
  uint64_t t = *tail(rg), h = __atomic_load_n(head(rg), __ATOMIC_ACQUIRE);
  size_t avail = (size_t)(h - t), k = n < avail ? n : avail;
  if (!k) return 0;
  const char *data = rg + CTL;
  size_t at = (size_t)(t % c->cap), first = c->cap - at < k ? c->cap - at : k;
  memcpy(dst, data + at, first);
  if (k > first) memcpy(dst + first, data, k - first);
  __atomic_store_n(tail(rg), t + k, __ATOMIC_RELEASE);
  return k;
}

static int wrank(const dr_Group *g, int pos) { return g->world_rank ? g->world_rank[pos] : pos; }

int dc_has(const dr_Group *g, int peer) {
  const dc_Chan *c = g->chan;
  if (!c || !ds_enabled || peer < 0 || peer >= g->world || peer == g->rank) return 0;
  int w = wrank(g, peer);
  return w >= 0 && w < c->world && c->lidx_of[w] >= 0;
}

/* the peer (dst or src) whose TCP link closed (its process died), or -1 */
static int dead(const dr_Group *g, int dst, int src) {
  int peers[2] = { dst, src };
  for (int i = 0; i < 2; i++) {
    int q = peers[i];
    if (q < 0 || !g->fd || g->fd[q] < 0) continue;
    struct pollfd p = { g->fd[q], POLLRDHUP, 0 };
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return q;
  }
  return -1;
}

int dc_sendrecv(dr_Group *g, int dst, const void *sbuf, size_t sn, int src, void *rbuf, size_t rn) {
  dc_Chan *c = g->chan;
  if (dst < 0) sn = 0;
  if (src < 0) rn = 0;
  char *out = sn && dc_has(g, dst) ? ring(c, c->me, c->lidx_of[wrank(g, dst)]) : NULL;
  char *in = rn && dc_has(g, src) ? ring(c, c->lidx_of[wrank(g, src)], c->me) : NULL;
  uint32_t *dbell = out ? bell(c, c->lidx_of[wrank(g, dst)]) : NULL, *sbell = in ? bell(c, c->lidx_of[wrank(g, src)]) : NULL;
  int sfd = sn && !out ? g->fd[dst] : -1, rfd = rn && !in ? g->fd[src] : -1;
  if ((sn && !out && sfd < 0) || (rn && !in && rfd < 0)) return dr_fail(g, "no connection to rank %d (the group is not connected)", sn && !out && sfd < 0 ? dst : src);
  uint32_t *mine = bell(c, c->me);
  const char *sb = sbuf; char *rb = rbuf;
  size_t sent = 0, got = 0;
  double last = nu_mono_ms(), checked = last;
  int spins = 0;
  while (sent < sn || got < rn) {
    uint32_t v = __atomic_load_n(mine, __ATOMIC_SEQ_CST);
    int prog = 0;
    if (out && sent < sn) { size_t k = put(c, out, sb + sent, sn - sent); if (k) { sent += k; g->bytes_sent += k; ring_bell(dbell); prog = 1; } }
    if (in && got < rn) { size_t k = get(c, in, rb + got, rn - got); if (k) { got += k; g->bytes_recv += k; ring_bell(sbell); prog = 1; } }
    int fd = sfd >= 0 && sent < sn ? sfd : rfd >= 0 && got < rn ? rfd : -1;
    if (fd >= 0) {   /* the other direction is a TCP link (another host): both progress side by side */
      int wr = fd == sfd;
      int chan_left = (out && sent < sn) || (in && got < rn);
      struct pollfd p = { fd, (short)(wr ? POLLOUT : POLLIN), 0 };
      int rc = poll(&p, 1, prog ? 0 : chan_left ? 1 : 100);
      if (rc < 0 && errno != EINTR) return dr_fail(g, "poll: %s", strerror(errno));
      if (rc > 0 && wr) {
        ssize_t k = send(fd, sb + sent, sn - sent, MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EINTR) return dr_fail(g, "send to rank %d: %s", dst, strerror(errno));
        if (k > 0) { sent += (size_t)k; g->bytes_sent += (uint64_t)k; prog = 1; }
      } else if (rc > 0) {
        ssize_t k = recv(fd, rb + got, rn - got, 0);
        if (k == 0) return dr_fail(g, "connection to rank %d closed (did the worker die?)", src);
        if (k < 0 && errno != EAGAIN && errno != EINTR) return dr_fail(g, "receive from rank %d: %s", src, strerror(errno));
        if (k > 0) { got += (size_t)k; g->bytes_recv += (uint64_t)k; prog = 1; }
      }
    } else if (!prog && (sent < sn || got < rn)) {
      if (spins < c->spin) { spins++; ds_cpu_relax(); }
      else ds_futex_wait(mine, v, 100);
    }
    double t = nu_mono_ms();
    if (prog) { last = t; spins = 0; }
    if (g->interrupted && *g->interrupted) return dr_fail(g, "interrupted");
    if (t - checked >= 100) {
      checked = t;
      int d = dead(g, out && sent < sn ? dst : -1, in && got < rn ? src : -1);
      if (d >= 0) return dr_fail(g, "connection to rank %d closed (did the worker die?)", d);
      if (g->timeout_ms > 0 && t - last > g->timeout_ms)
        return dr_fail(g, "timed out after %.0f s without progress (waiting on rank %d)", g->timeout_ms / 1e3, got < rn ? src : dst);
    }
  }
  return 0;
}

int dc_ready(const dr_Group *g, int src) {
  if (!dc_has(g, src)) return -1;
  dc_Chan *c = g->chan;
  char *in = ring(c, c->lidx_of[wrank(g, src)], c->me);
  return __atomic_load_n(head(in), __ATOMIC_ACQUIRE) != __atomic_load_n(tail(in), __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------ setup */
void dc_close(dr_Group *g) {
  dc_Chan *c = g->chan;
  if (!c) return;
  if (c->base) munmap(c->base, c->size);
  free(c->lidx_of);
  free(c);
  g->chan = NULL;
}

/* maps the first rank's segment; 1 when it is there and stamped with token */
static int attach(dc_Chan *c, uint32_t pid, uint32_t fdno, const unsigned char token[16]) {
  c->base = ds_map_memfd(pid, fdno, NAME, c->size);
  if (!c->base) return 0;
  Hdr *h = (Hdr *)c->base;
  return h->magic == MAGIC && h->L == (uint32_t)c->L && h->cap == c->cap && !memcmp(h->token, token, 16);
}

int dc_setup(dr_Group *g, const int *host) {
  dc_close(g);
  int w = g->world, r = g->rank;
  dc_Chan *c = calloc(1, sizeof *c);
  int *local = malloc(sizeof(int) * (size_t)w);
  if (!c || !local || !(c->lidx_of = malloc(sizeof(int) * (size_t)w))) { if (c) free(c->lidx_of); free(c); free(local); return dr_fail(g, "out of memory"); }
  c->world = w;
  int L = 0;
  for (int i = 0; i < w; i++) { c->lidx_of[i] = host[i] == host[r] ? L : -1; if (host[i] == host[r]) local[L++] = i; }
  c->L = L; c->me = c->lidx_of[r];
  /* a ring of 1 MiB per direction, smaller with many ranks on a host (pages
  ** are only touched by the pairs that talk); CTL + cap per ring */
  size_t cap = 1u << 20;
  while (cap > (64u << 10) && (size_t)L * (size_t)(L - 1) * cap > (256u << 20)) cap >>= 1;
  c->cap = cap;
  c->size = rings_off(L) + (size_t)L * (size_t)L * (CTL + cap);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  c->spin = ncpu >= L && ncpu >= ds_kernel_ranks && !getenv("NABLA_TEST_HOSTS") ? SPIN : 0;   /* ranks on this kernel share its cores */
  /* ok: no failure here (a host with one rank, or too many, has no channels
  ** but does not turn off the others'); NABLA_SHM=0 anywhere turns all off */
  int64_t ok = !ds_env_off();
  int want = ok && L >= 2 && L <= MAXL, st = 0;
  /* the host's first rank makes the segment and sends each local rank ok,
  ** a random token, its pid and the fd (over TCP: the channels are not on yet) */
  unsigned char msg[25] = { 0 };
  int fd = -1;
  if (want && c->me == 0) {
    fd = memfd_create(NAME, MFD_CLOEXEC);
    int made = fd >= 0 && ftruncate(fd, (off_t)c->size) == 0;
    if (made) { c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); made = c->base != MAP_FAILED; if (!made) c->base = NULL; }
    if (made && getrandom(msg + 1, 16, 0) != 16) made = 0;
    if (made) { Hdr *h = (Hdr *)c->base; h->magic = MAGIC; h->L = (uint32_t)L; h->cap = c->cap; memcpy(h->token, msg + 1, 16); }
    msg[0] = (unsigned char)made;
    uint32_t pid = (uint32_t)getpid(), fdno = (uint32_t)(fd >= 0 ? fd : 0);
    memcpy(msg + 17, &pid, 4); memcpy(msg + 21, &fdno, 4);
    for (int l = 1; l < L && !st; l++) st = dr_sendrecv(g, local[l], msg, sizeof msg, -1, NULL, 0);
    ok = made;
  } else if (want) {
    st = dr_sendrecv(g, -1, NULL, 0, local[0], msg, sizeof msg);
    uint32_t pid, fdno;
    memcpy(&pid, msg + 17, 4); memcpy(&fdno, msg + 21, 4);
    ok = !st && msg[0] && attach(c, pid, fdno, msg + 1);
  }
  /* all ranks agree: channels everywhere or nowhere (a pair must agree) */
  if (!st) st = dr_all_reduce(g, &ok, 1, DR_I64, DR_MIN);
  if (fd >= 0) close(fd);
  OPENSSL_cleanse(msg, sizeof msg);
  free(local);
  if (st || !ok || !want) { if (c->base) munmap(c->base, c->size); free(c->lidx_of); free(c); return st; }
  g->chan = c;
  return 0;
}
