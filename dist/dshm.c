/*
** dshm.c — collectives through a shared-memory segment (see dshm.h).
**
** Layout: a header page (magic, token, the abort word, the futex word `seq`
** and its waiter count), one cache line per rank holding its barrier epoch,
** then two buffer sets (alternating rounds) of world slots, each slot an
** input area of R bytes and a result area of R/world bytes.
**
** A round moves up to R bytes per rank.  all_reduce round: every rank copies
** its part into its input slot; barrier; rank q reduces piece q (1/world of
** the round) over all input slots into its result area; barrier; every rank
** copies all pieces out.  The summation order of every element is the one the
** TCP ring uses (the chain starting after the element's ring-chunk owner), so
** both paths give bit-identical results.  Rounds alternate between the two
** buffer sets, so a round's writes never race the previous round's reads: two
** barriers per all_reduce round, one per broadcast/all_gather round.
**
** Barriers spin for a bounded time, then sleep on a futex in 100 ms ticks,
** checking the VM's interrupt flag, the abort word (another rank failed), the
** group timeout and the peers' TCP links (POLLRDHUP: a dead worker's socket
** closes), so failures read like the ring's.  The spin is adaptive: its
** budget doubles (up to spin_max, 50 us) after a barrier the spin satisfied
** and halves (down to ~0.5 us) after one that had to sleep.  On a busy host a
** peer is often descheduled: a long spin then only burns this rank's slice,
** and a rank preempted while spinning answers nobody until the scheduler
** gives it a core back (the 0.1-0.5 ms a 4 KB all_reduce took under load),
** while a rank asleep on the futex is woken with the scheduler's wake-up
** preference.  NABLA_SHM_SPIN_US (0..1000, tests and benches) sets spin_max;
** 0 always sleeps.
**
** Desync check folded into the barrier (ddesync.h): a collective's signature
** hash, handed over by dd_check (ds_sig_defer), rides in this rank's arrive
** line with the epoch of the next barrier (two slots by epoch parity: a rank
** cannot be two barriers ahead of a reader), and every rank compares the
** published hashes once the barrier is complete, so the check costs no extra
** round trip.  0 means "no signature at this barrier".
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include "dist/dshm.h"
#include "util/clock.h"
#include "dist/dproto.h"
#include "dist/dinternal.h"
#include "dist/dhier.h"
#include "dist/dgroup.h"
#include "dist/dchan.h"
#include "dist/ddesync.h"

#define MAGIC 0x4e42534du               /* "NBSM" */
#define ROUND (4u << 20)                /* the least R: bytes per rank per round */
#define HDR 4096u
#define SPIN_MAX_NS 50000.0            /* the longest spin before sleeping */
#define SPIN_MIN_NS 500.0               /* the shortest (after barriers that slept) */

struct ds_Shm {
  char *base; size_t size;
  int world;
  size_t R, P, slot;                    /* round bytes, piece bytes, slot stride */
  uint64_t epoch, round;                /* barriers passed, rounds done (both agree on all ranks) */
  double spin_max;                      /* ns of busy-waiting at most (0: more ranks than cores) */
  double spin_ns;                       /* the adaptive budget, within [SPIN_MIN_NS, spin_max] */
  /* the desync check deferred into the next barrier (ds_sig_defer) */
  int sig_has;
  uint64_t sig, sig_seq;
  char sig_desc[160];
};

typedef struct {
  uint32_t magic, world;
  uint64_t R;
  unsigned char token[16];
  uint32_t seq;                         /* futex word: bumped at every arrival and at abort */
  uint32_t waiters;
  int32_t abort;                        /* rank + 1 of a rank whose collective failed */
} Hdr;

int ds_enabled = 1;
int ds_kernel_ranks;

static Hdr *hdr(ds_Shm *s) { return (Hdr *)s->base; }
/* rank r's cache line: [0] its barrier epoch, [1 + (e & 1)] the signature it published at epoch e */
static uint64_t *arrive(ds_Shm *s, int r) { return (uint64_t *)(s->base + HDR + 64u * (unsigned)r); }
static size_t data_off(int world) { return (HDR + 64u * (unsigned)world + 4095u) & ~(size_t)4095u; }
static char *in_slot(ds_Shm *s, int b, int r) { return s->base + data_off(s->world) + ((size_t)b * (size_t)s->world + (size_t)r) * s->slot; }
static char *res_slot(ds_Shm *s, int b, int r) { return in_slot(s, b, r) + s->R; }

void ds_futex_wake(uint32_t *w) { syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }
void ds_futex_wait(uint32_t *w, uint32_t v, int ms) {
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  syscall(SYS_futex, w, FUTEX_WAIT, v, &ts, NULL, 0);
}
#define futex_wake ds_futex_wake
#define futex_wait ds_futex_wait
#define cpu_relax ds_cpu_relax

/* tells the other ranks this rank's collective failed (they fail at once) */
static int shm_fail(dr_Group *g, ds_Shm *s) {
  Hdr *h = hdr(s);
  int32_t zero = 0;
  __atomic_compare_exchange_n(&h->abort, &zero, g->rank + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&h->seq, 1, __ATOMIC_SEQ_CST);
  futex_wake(&h->seq);
  return -1;
}

/* the first rank that has not reached epoch e, or -1 */
static int missing(ds_Shm *s, uint64_t e) {
  for (int q = 0; q < s->world; q++) if (__atomic_load_n(arrive(s, q), __ATOMIC_ACQUIRE) < e) return q;
  return -1;
}

/* a peer whose TCP link closed (its process died), or -1 */
static int dead_peer(dr_Group *g) {
  for (int q = 0; q < g->world; q++) {
    if (q == g->rank || !g->fd || g->fd[q] < 0) continue;
    struct pollfd p = { g->fd[q], POLLRDHUP, 0 };
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return q;
  }
  return -1;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* after barrier e completed: whether the signatures published with it agree
** (ranks without one are not compared); a mismatch fails the collective with
** ddesync's report, which every rank reaches from this same barrier */
static int sig_verify(dr_Group *g, ds_Shm *s, uint64_t e, int had) {
  uint64_t first = 0;
  int bad = 0;
  for (int q = 0; q < s->world; q++) {
    uint64_t v = __atomic_load_n(arrive(s, q) + 1 + (e & 1), __ATOMIC_ACQUIRE);
    if (!v) continue;
    if (!first) first = v; else if (v != first) bad = 1;
  }
  if (!bad) return 0;
  /* ranks may be in different collectives, whose round counters differ; the
  ** epoch they all just passed picks the buffer set of the report's gather */
  s->round = e;
  return dd_report(g, had ? s->sig_desc : "a collective without a signature check", s->sig_seq);
}

static int barrier(dr_Group *g, ds_Shm *s) {
  Hdr *h = hdr(s);
  uint64_t e = ++s->epoch;
  int had = s->sig_has;
  s->sig_has = 0;
  __atomic_store_n(arrive(s, g->rank) + 1 + (e & 1), had ? s->sig | 1 : 0, __ATOMIC_RELAXED);
  __atomic_store_n(arrive(s, g->rank), e, __ATOMIC_SEQ_CST);   /* publishes the signature with it */
  __atomic_add_fetch(&h->seq, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&h->waiters, __ATOMIC_SEQ_CST)) futex_wake(&h->seq);
  if (s->spin_max > 0) {
    double t0 = now_ns();
    for (unsigned i = 1;; i++) {
      if (missing(s, e) < 0) {   /* satisfied while spinning: allow a longer spin next time */
        s->spin_ns = s->spin_ns * 2 < s->spin_max ? s->spin_ns * 2 : s->spin_max;
        return sig_verify(g, s, e, had);
      }
      if (__atomic_load_n(&h->abort, __ATOMIC_RELAXED)) break;
      cpu_relax();
      if (!(i & 15) && now_ns() - t0 > s->spin_ns) break;
    }
    /* the peer was late (descheduled, or slower): sleep sooner next time */
    s->spin_ns = s->spin_ns / 2 > SPIN_MIN_NS ? s->spin_ns / 2 : SPIN_MIN_NS;
    if (s->spin_ns > s->spin_max) s->spin_ns = s->spin_max;
  }
  __atomic_add_fetch(&h->waiters, 1, __ATOMIC_SEQ_CST);
  double last = nu_mono_ms(), checked = last;
  int st = 0, prev_missing = -2;
  for (;;) {
    uint32_t v = __atomic_load_n(&h->seq, __ATOMIC_SEQ_CST);
    int m = missing(s, e);
    if (m < 0) break;
    int32_t ab = __atomic_load_n(&h->abort, __ATOMIC_SEQ_CST);
    if (ab) { st = dr_fail(g, "rank %d failed during the collective (shared memory)", ab - 1); break; }
    if (g->interrupted && *g->interrupted) { st = dr_fail(g, "interrupted"); shm_fail(g, s); break; }
    double t = nu_mono_ms();
    if (m != prev_missing) { prev_missing = m; last = t; }
    if (t - checked >= 100) {
      checked = t;
      int d = dead_peer(g);
      if (d >= 0) { st = dr_fail(g, "connection to rank %d closed (did the worker die?)", d); shm_fail(g, s); break; }
    }
    if (g->timeout_ms > 0 && t - last > g->timeout_ms) {
      st = dr_fail(g, "timed out after %.0f s without progress (waiting on rank %d)", g->timeout_ms / 1e3, m);
      shm_fail(g, s); break;
    }
    futex_wait(&h->seq, v, 100);
  }
  __atomic_sub_fetch(&h->waiters, 1, __ATOMIC_SEQ_CST);
  if (st) return -1;
  return sig_verify(g, s, e, had);
}

/* ------------------------------------------------------------ the folded desync check */
void ds_sig_defer(dr_Group *g, uint64_t h, uint64_t seq, const char *desc) {
  ds_Shm *s = g->shm;
  /* a signature not yet published (a collective that moved no data, or
  ** failed on every rank before its barrier) is chained, not lost; a
  ** mismatch then names the first unpublished call, where ranks diverged */
  if (s->sig_has) { s->sig = (s->sig ^ h) * 0x100000001b3ull; return; }
  s->sig = h;
  s->sig_has = 1;
  s->sig_seq = seq;
  size_t k = strnlen(desc, sizeof s->sig_desc - 1);
  memcpy(s->sig_desc, desc, k);
  s->sig_desc[k] = 0;
}

int ds_sig_check(dr_Group *g, uint64_t h, uint64_t seq, const char *desc) {
  ds_sig_defer(g, h, seq, desc);
  return barrier(g, g->shm);
}

/* ------------------------------------------------------------ reductions */
/* dst[i] = red(d = x[i], s = dst[i]), the ring's reduce() with the received
** value in dst; first: dst[i] = red(d = a[i], s = b[i]) */
#define RED(T, d, s) (op == DR_SUM ? (T)((d) + (s)) : op == DR_MAX ? (((s) > (d) || (s) != (s)) ? (s) : (d)) : (((s) < (d) || (s) != (s)) ? (s) : (d)))
#define RED_LOOPS(T) do { T *o = dst; const T *A = a, *B = b; \
    if (B) { if (op == DR_SUM) for (size_t i = 0; i < n; i++) o[i] = A[i] + B[i]; else for (size_t i = 0; i < n; i++) { T d = A[i], s = B[i]; o[i] = RED(T, d, s); } } \
    else { if (op == DR_SUM) for (size_t i = 0; i < n; i++) o[i] = A[i] + o[i]; else for (size_t i = 0; i < n; i++) { T d = A[i], s = o[i]; o[i] = RED(T, d, s); } } } while (0)
static void red(void *dst, const void *a, const void *b, size_t n, int dtype, int op) {
  switch (dtype) {
  case DR_F32: RED_LOOPS(float); break;
  case DR_F64: RED_LOOPS(double); break;
  case DR_I32: RED_LOOPS(int32_t); break;
  default: RED_LOOPS(int64_t); break;
  }
}

static size_t split_off(size_t n, int w, int q) { return n / (size_t)w * (size_t)q + ((size_t)q < n % (size_t)w ? (size_t)q : n % (size_t)w); }

/* copies [a, b) of the round's results (round elements from base) into buf, only where it meets keep's ranges */
static void copy_kept(char *b, const char *src, size_t a, size_t n, size_t es, const size_t *keep, int nkeep) {
  if (!keep) { memcpy(b + a * es, src, n * es); return; }
  for (int k = 0; k < nkeep; k++) {
    size_t lo = keep[2 * k] > a ? keep[2 * k] : a, hi = keep[2 * k + 1] < a + n ? keep[2 * k + 1] : a + n;
    if (lo < hi) memcpy(b + lo * es, src + (lo - a) * es, (hi - lo) * es);
  }
}

int ds_all_reduce(dr_Group *g, void *buf, size_t count, int dtype, int op) { return ds_all_reduce_keep(g, buf, count, dtype, op, NULL, 0); }

int ds_all_reduce_keep(dr_Group *g, void *buf, size_t count, int dtype, int op, const size_t *keep, int nkeep) {
  ds_Shm *s = g->shm;
  int w = g->world, r = g->rank;
  size_t es = dr_esize(dtype), per = s->R / es, pcap = s->P / es;
  if (per / (size_t)w > pcap) per = pcap * (size_t)w;
  char *b = buf;
  for (size_t base = 0; base < count; base += per) {
    size_t n = count - base < per ? count - base : per;
    int bs = (int)(s->round++ & 1);
    memcpy(in_slot(s, bs, r), b + base * es, n * es);
    if (barrier(g, s)) return -1;
    /* my piece [pa, pb) of the round, split by the ring's chunk boundaries */
    size_t pa = split_off(n, w, r), pb = split_off(n, w, r + 1);
    char *out = res_slot(s, bs, r);
    for (size_t i = pa; i < pb;) {
      size_t gi = base + i;
      int c = 0;   /* the ring chunk of global element gi: chunks are split_off(count, w, .) */
      { size_t q0 = count / (size_t)w, rem = count % (size_t)w;
        size_t big = rem * (q0 + 1);
        c = gi < big ? (int)(gi / (q0 + 1)) : (int)(rem + (q0 ? (gi - big) / q0 : 0)); }
      size_t cend = split_off(count, w, c + 1) - base;
      size_t e = cend < pb ? cend : pb, k = e - i;
      char *o = out + (i - pa) * es;
      red(o, in_slot(s, bs, (c + 2) % w) + i * es, in_slot(s, bs, (c + 1) % w) + i * es, k, dtype, op);
      for (int j = 3; j <= w; j++) red(o, in_slot(s, bs, (c + j) % w) + i * es, NULL, k, dtype, op);
      i = e;
    }
    if (barrier(g, s)) return -1;
    for (int q = 0; q < w; q++) {
      size_t qa = split_off(n, w, q), qb = split_off(n, w, q + 1);
      copy_kept(b, res_slot(s, bs, q), base + qa, qb - qa, es, keep, nkeep);
    }
  }
  /* the byte counters (dist.bytes, compression ratios) count what the TCP
  ** ring would move: reduce-scatter then all-gather of the ring's chunks */
  size_t cr = split_off(count, w, r + 1) - split_off(count, w, r);
  size_t cn = split_off(count, w, (r + 1) % w + 1) - split_off(count, w, (r + 1) % w);
  size_t cp = split_off(count, w, (r + w - 1) % w + 1) - split_off(count, w, (r + w - 1) % w);
  g->bytes_sent += (uint64_t)((2 * count - cr - cn) * es);
  g->bytes_recv += (uint64_t)((2 * count - cp - cr) * es);
  return 0;
}

int ds_all_gather(dr_Group *g, void *buf, const size_t *counts, size_t es) {
  ds_Shm *s = g->shm;
  int w = g->world, r = g->rank;
  size_t maxb = 0, acc = 0;
  size_t offs[256], *off = w <= 256 ? offs : malloc(sizeof(size_t) * (size_t)w);
  if (!off) return dr_fail(g, "out of memory");
  for (int i = 0; i < w; i++) { off[i] = acc; acc += counts[i]; if (counts[i] * es > maxb) maxb = counts[i] * es; }
  char *b = buf;
  int st = 0;
  for (size_t pos = 0; pos < maxb && !st; pos += s->R) {
    int bs = (int)(s->round++ & 1);
    size_t mine = counts[r] * es;
    if (pos < mine) memcpy(in_slot(s, bs, r), b + off[r] * es + pos, mine - pos < s->R ? mine - pos : s->R);
    if (barrier(g, s)) { st = -1; break; }
    for (int q = 0; q < w; q++) {
      size_t qb = counts[q] * es;
      if (q == r || pos >= qb) continue;
      size_t k = qb - pos < s->R ? qb - pos : s->R;
      memcpy(b + off[q] * es + pos, in_slot(s, bs, q), k);
    }
  }
  if (!st) {   /* counted as the ring would move them (see ds_all_reduce) */
    g->bytes_sent += (uint64_t)((acc - counts[(r + 1) % w]) * es);
    g->bytes_recv += (uint64_t)((acc - counts[r]) * es);
  }
  if (off != offs) free(off);
  return st;
}

int ds_broadcast(dr_Group *g, void *buf, size_t nbytes, int src) {
  ds_Shm *s = g->shm;
  char *b = buf;
  for (size_t pos = 0; pos < nbytes; pos += s->R) {
    int bs = (int)(s->round++ & 1);
    size_t k = nbytes - pos < s->R ? nbytes - pos : s->R;
    if (g->rank == src) memcpy(in_slot(s, bs, src), b + pos, k);
    if (barrier(g, s)) return -1;
    if (g->rank != src) memcpy(b + pos, in_slot(s, bs, src), k);
  }
  /* counted as the ring's chain src -> src+1 -> ... would move them */
  int pos = ((g->rank - src) % g->world + g->world) % g->world;
  if (pos + 1 < g->world) g->bytes_sent += nbytes;
  if (pos > 0) g->bytes_recv += nbytes;
  return 0;
}

/* ------------------------------------------------------------ setup */
void ds_close(dr_Group *g) {
  ds_Shm *s = g->shm;
  if (!s) return;
  if (s->base) munmap(s->base, s->size);
  free(s);
  g->shm = NULL;
}

int ds_env_off(void) {
  const char *e = getenv("NABLA_SHM");
  return e && (!strcmp(e, "0") || !strcmp(e, "false") || !strcmp(e, "off") || !strcmp(e, "no"));
}

/*
** The segment has no name, so nothing can be left behind on any path (a
** rank killed before it maps, a group that fails to form, every process
** killed at once): rank 0 makes it with memfd_create, and the other ranks
** open it through /proc/<rank 0's pid>/fd/<fd> — which the kernel allows
** only to processes that may inspect rank 0 (the same user), the rights a
** 0600 /dev/shm file gave.  The memory goes with the last mapping.
*/
#define MEMFD_NAME "nabla-shm"

/* rank 0: the segment, mapped and stamped; its fd (or -1) */
static int seg_create(ds_Shm *s, unsigned char token[16]) {
  int fd = memfd_create(MEMFD_NAME, MFD_CLOEXEC);
  if (fd < 0) return -1;
  int ok = ftruncate(fd, (off_t)s->size) == 0;
  if (ok) { s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); ok = s->base != MAP_FAILED; if (!ok) s->base = NULL; }
  if (ok && getrandom(token, 16, 0) != 16) ok = 0;
  if (ok) {
    Hdr *h = hdr(s);
    h->magic = MAGIC; h->world = (uint32_t)s->world; h->R = s->R;
    memcpy(h->token, token, 16);
  }
  if (!ok) { close(fd); return -1; }
  return fd;
}

void *ds_map_memfd(uint32_t pid, uint32_t fdno, const char *name, size_t size) {
  char path[64], target[128], want[64];
  snprintf(path, sizeof path, "/proc/%u/fd/%u", pid, fdno);
  snprintf(want, sizeof want, "/memfd:%s", name);
  /* another host's pid names some other process here: only a memfd of ours
  ** is opened (O_NONBLOCK: never wait on a FIFO), and the caller's token decides */
  ssize_t tl = readlink(path, target, sizeof target - 1);
  if (tl <= 0) return NULL;
  target[tl] = 0;
  if (strncmp(target, want, strlen(want)) != 0) return NULL;
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return NULL;
  struct stat sb;
  void *base = NULL;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size == size) {
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) base = NULL;
  }
  close(fd);
  return base;
}

/* the other ranks: maps rank 0's segment; 1 when it is there and stamped with token */
static int seg_attach(ds_Shm *s, uint32_t pid, uint32_t fdno, const unsigned char token[16]) {
  s->base = ds_map_memfd(pid, fdno, MEMFD_NAME, s->size);
  if (!s->base) return 0;
  Hdr *h = hdr(s);
  return h->magic == MAGIC && h->world == (uint32_t)s->world && h->R == s->R && !memcmp(h->token, token, 16);
}

/* tests: NABLA_DIST_TEST_SHM_STALL=RANK makes that rank wait 30 s before it
** maps the segment (a rank that is slow or killed at that point) */
static void test_stall(int rank) {
  const char *e = getenv("NABLA_DIST_TEST_SHM_STALL");
  if (e && atoi(e) == rank) { struct timespec ts = { 30, 0 }; nanosleep(&ts, NULL); }
}

int ds_setup(dr_Group *g) {
  ds_close(g);
  int w = g->world, r = g->rank;
  if (w < 2 || w > 1024) return 0;
  ds_Shm *s = calloc(1, sizeof *s);
  if (!s) return 0;
  /* R: 32 MiB / world, 4..16 MiB (a segment of at most ~100 MiB, touched
  ** only as far as the largest collective reaches).  Every round is a
  ** lockstep of all ranks; when ranks outnumber cores each one can cost a
  ** scheduler slice, so fewer, larger rounds (64 MB across hosts: 1.6-1.9x
  ** the flat ring's time with 4 MiB rounds, ~0.9x with 16 MiB,
  ** bench/results/2026-11-26-net.md).  NABLA_SHM_ROUND_MB (1..64, the same on
  ** every rank: the segment's stamp must match) overrides it (tests). */
  s->world = w;
  s->R = (32u << 20) / (unsigned)w;
  if (s->R < ROUND) s->R = ROUND;
  if (s->R > (16u << 20)) s->R = 16u << 20;
  s->R &= ~(size_t)4095;
  { const char *e = getenv("NABLA_SHM_ROUND_MB"); if (e && atoi(e) >= 1 && atoi(e) <= 64) s->R = (size_t)atoi(e) << 20; }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  /* spinning when ranks outnumber cores only delays the late rank; hosts
  ** simulated on one machine (NABLA_TEST_HOSTS, dhier.h) share its cores */
  int here = getenv("NABLA_TEST_HOSTS") && nbD_self.world > w ? nbD_self.world : w;
  if (ds_kernel_ranks > here) here = ds_kernel_ranks;   /* namespace hosts on one kernel share its cores */
  s->spin_max = ncpu >= here ? SPIN_MAX_NS : 0;
  { const char *e = getenv("NABLA_SHM_SPIN_US"); if (e && atoi(e) >= 0 && atoi(e) <= 1000) s->spin_max = s->spin_max > 0 ? atoi(e) * 1e3 : 0; }
  s->spin_ns = s->spin_max;
  s->P = ((s->R + (size_t)w - 1) / (size_t)w + 63) & ~(size_t)63;
  s->slot = (s->R + s->P + 4095) & ~(size_t)4095;
  s->size = data_off(w) + 2 * (size_t)w * s->slot;
  /* rank 0 creates the segment and sends ok, a random token, its pid and
  ** the fd; the others map it and check the token (a rank on another host
  ** finds no such segment); an all_reduce(min) agrees */
  unsigned char msg[25] = { 0 };
  int fd = -1, ok = !ds_env_off();
  if (r == 0 && ok) {
    fd = seg_create(s, msg + 1);
    ok = fd >= 0;
    uint32_t pid = (uint32_t)getpid(), fdno = (uint32_t)(fd >= 0 ? fd : 0);
    memcpy(msg + 17, &pid, 4); memcpy(msg + 21, &fdno, 4);
    msg[0] = (unsigned char)ok;
  }
  int st = dr_broadcast(g, msg, sizeof msg, 0);
  if (!st && r != 0) {
    test_stall(r);
    uint32_t pid, fdno;
    memcpy(&pid, msg + 17, 4); memcpy(&fdno, msg + 21, 4);
    ok = ok && msg[0] && seg_attach(s, pid, fdno, msg + 1);
  }
  int64_t all = ok;
  if (!st) st = dr_all_reduce(g, &all, 1, DR_I64, DR_MIN);
  if (fd >= 0) close(fd);   /* every rank has mapped it (or the setup failed) */
  OPENSSL_cleanse(msg, sizeof msg);
  if (st || !all) { if (s->base) munmap(s->base, s->size); free(s); return st; }
  g->shm = s;
  return 0;
}

/* ------------------------------------------------------------ builtin */
/* dist_shm(on=nil): whether the world group's collectives use shared memory;
** with a bool, switches the fast path on or off (call it on every worker) */
static int b_shm(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n;
  if (a[0].t != NB_TNIL) ds_enabled = nb_truthy(a[0]);
  int id = 0;
  if (nbD_group_arg(vm, "dist_shm", a[1], &id)) return NB_ERR;
  nbD_Scope sc;
  if (id && nbD_self.g && nbD_group_enter(id, &sc)) return nb_error_kind(vm, "DistError", "dist_shm: %s", nt_error_msg());
  *out = nb_bool(nbD_self.g && (ds_on(nbD_self.g) || dh_on(nbD_self.g)));
  if (id && nbD_self.g) nbD_group_leave(&sc);
  return NB_OK;
}
/* dist_shm_peer(peer, group=nil): whether send/recv with that rank (of the
** group) go through a shared-memory channel (dchan.c) rather than TCP */
static int b_shm_peer(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n;
  if (a[0].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "dist_shm_peer: the peer must be a rank number");
  int id = 0;
  if (nbD_group_arg(vm, "dist_shm_peer", a[1], &id)) return NB_ERR;
  nbD_Scope sc;
  if (id && nbD_self.g && nbD_group_enter(id, &sc)) return nb_error_kind(vm, "DistError", "dist_shm_peer: %s", nt_error_msg());
  *out = nb_bool(nbD_self.g && dc_has(nbD_self.g, (int)a[0].u.n));
  if (id && nbD_self.g) nbD_group_leave(&sc);
  return NB_OK;
}
static nb_Builtin shm_builtins[] = {
  { "dist_shm_peer", b_shm_peer, "peer, group=nil", "dist_shm_peer(peer, group=nil): whether send/recv/isend/all_to_all between this worker and rank peer (of group) use a shared-memory channel (both on one host) rather than TCP" },
  { "dist_shm", b_shm, "on=nil, group=nil", "dist_shm(on=nil, group=nil): whether this worker's collectives (on group, after its first collective) use shared memory (all ranks on one host, or within each host of a multi-host group); dist_shm(false) on every worker forces the flat TCP ring" },
  { NULL, NULL, NULL, NULL },
};
void nbD_shm_init(void) { nbC_register(shm_builtins); }
