/*
** tprofile.c — the op profiler (tprofile.h says what it records and why).
**
** One profile at a time in the process, owned by the thread that started it:
** nt_prof_on_ is the global switch every dispatch reads (one branch when
** off); the recording calls check the owner, so ops of other threads (dist's
** communication threads) are neither recorded nor slowed beyond that branch.
**
** Events are appended in start order to one growable array; `cur` is the
** innermost open event, and each event links to its parent, so closing one
** adds its duration to the parent's child time: self = total - children.
** Tokens carry a generation so that an end belonging to an earlier profile
** (a profile stopped inside a node's backward formula) is ignored.
**
** GPU: the timing events live in a pool kept between profiles (creating
** thousands per step would cost more than the ops).  Slot 0 is the reference
** recorded at the first GPU op; a timed event uses two slots.
*/
#include "tinternal.h"
#include "tprofile.h"
#include "tstrbuf.h"
#include "tbackend.h"
#include "io/atomicfile.h"
#include "io/iotypes.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

int nt_prof_on_;

#define GEN_SHIFT 21              /* token = gen << GEN_SHIFT | index (index < NT_PROF_MAX_EVENTS) */
#define GEN_MASK  0x1ff

static struct {
  pthread_t owner;
  int64_t t_start;                /* CLOCK_MONOTONIC ns */
  uint64_t tsc_start;             /* the TSC then, when it is used */
  bool tsc;                       /* event times in TSC ticks, converted at the stop */
  nt_ProfEvent *ev; int64_t n, cap, dropped, untimed;
  int32_t cur;                    /* innermost open event, -1 none */
  bool no_timers;                 /* the device gave no timing event: stop asking */
  unsigned gen;
  char **names; int nnames, capnames;
  struct { const char *p; int32_t id; } cache[1024];   /* name pointer -> id (verified by content) */
  int64_t ntimed;                 /* timed events this profile */
  int64_t gpu_ref_ns;             /* -1 until the reference event is recorded */
} S = { .cur = -1 };

/* the pool of GPU timing events, kept between profiles */
static void **pool; static int64_t npool, cappool;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Event times: a clock_gettime costs ~1-2 us on a VM whose clock source is
** not the TSC (kvm-clock), which would be most of a small op's event.  With
** an invariant TSC (CPUID 0x80000007 EDX bit 8) events read the TSC (~20 ns)
** and the stop maps ticks to ns linearly between the start's and the stop's
** (clock, TSC) pairs. */
static bool invariant_tsc(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  return __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));
#else
  return false;
#endif
}
static uint64_t tsc_now(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return 0;
#endif
}
/* the time since the start, in the profile's units (ticks or ns) */
static int64_t stamp(void) { return S.tsc ? (int64_t)(tsc_now() - S.tsc_start) : now_ns() - S.t_start; }

bool nt_profile_active(void) { return nt_prof_on_ && pthread_equal(S.owner, pthread_self()); }

static void free_names(char **names, int n) { for (int i = 0; i < n; i++) free(names[i]); free(names); }

int nt_profile_start(void) {
  if (nt_prof_on_)
    NT_FAIL("profile: a profile is already running%s (profiles do not nest: stop it first)",
            pthread_equal(S.owner, pthread_self()) ? "" : " in another thread");
  S.owner = pthread_self();
  S.n = S.dropped = S.untimed = S.ntimed = 0;
  S.cur = -1; S.no_timers = false;
  S.gen = (S.gen + 1) & GEN_MASK;
  S.gpu_ref_ns = -1;
  memset(S.cache, 0, sizeof S.cache);
  S.names = NULL; S.nnames = S.capnames = 0;
  static int tsc_state;   /* 0 not asked, 1 usable, 2 not */
  if (!tsc_state) tsc_state = invariant_tsc() && !getenv("NABLA_PROFILE_NO_TSC") ? 1 : 2;
  S.tsc = tsc_state == 1;
  S.t_start = now_ns();
  S.tsc_start = tsc_now();
  __atomic_store_n(&nt_prof_on_, 1, __ATOMIC_RELEASE);
  return 0;
}

/* the id of name in this profile's table; -1 when out of memory */
static int32_t name_id(const char *name) {
  uintptr_t h = ((uintptr_t)name >> 3) * 0x9E3779B97F4A7C15ull;
  unsigned slot = (unsigned)(h >> 54) & 1023;
  if (S.cache[slot].p == name && !strcmp(S.names[S.cache[slot].id], name)) return S.cache[slot].id;
  int32_t id = -1;
  for (int i = 0; i < S.nnames; i++) if (!strcmp(S.names[i], name)) { id = i; break; }
  if (id < 0) {
    if (S.nnames == S.capnames) {
      int cap = S.capnames ? S.capnames * 2 : 64;
      char **nn = realloc(S.names, sizeof *nn * (size_t)cap);
      if (!nn) return -1;
      S.names = nn; S.capnames = cap;
    }
    char *c = strdup(name);
    if (!c) return -1;
    S.names[S.nnames] = c;
    id = S.nnames++;
  }
  S.cache[slot].p = name; S.cache[slot].id = id;
  return id;
}

/* a timing event from the pool, recorded now on the compute stream; false
** when none can be had (the event is then not GPU-timed) */
static bool timer_at(int64_t slot) {
  while (npool <= slot) {
    if (npool == cappool) {
      int64_t cap = cappool ? cappool * 2 : 256;
      void **np = realloc(pool, sizeof *np * (size_t)cap);
      if (!np) return false;
      pool = np; cappool = cap;
    }
    void *t = nt_cuda_timer_create();
    if (!t) return false;
    pool[npool++] = t;
  }
  return nt_cuda_timer_record(pool[slot]) == 0;
}

int nt_prof_begin_(const char *name, int kind, int device) {
  if (!nt_profile_active()) return -1;
  if (S.n >= NT_PROF_MAX_EVENTS) { S.dropped++; return -1; }
  if (S.n == S.cap) {
    int64_t cap = S.cap ? S.cap * 2 : 4096;
    nt_ProfEvent *ne = realloc(S.ev, sizeof *ne * (size_t)cap);
    if (!ne) { S.dropped++; return -1; }
    S.ev = ne; S.cap = cap;
  }
  int32_t id = name_id(name);
  if (id < 0) { S.dropped++; return -1; }
  int64_t i = S.n++;
  nt_ProfEvent *e = &S.ev[i];
  memset(e, 0, sizeof *e);
  e->name = id; e->parent = S.cur; e->kind = (uint8_t)kind; e->device = (uint8_t)device;
  e->phase = nt_fuse_backward_depth_ > 0;    /* > 0 inside an autograd backward pass (tautograd.c) */
  e->depth = (uint8_t)(S.cur < 0 ? 0 : S.ev[S.cur].depth < 255 ? S.ev[S.cur].depth + 1 : 255);
  e->gpu_ms = -1; e->timer = -1;
  if (device != NT_CPU) {
    if (S.gpu_ref_ns < 0 && !S.no_timers) {
      if (timer_at(0)) S.gpu_ref_ns = stamp();
      else S.no_timers = true;
    }
    if (S.gpu_ref_ns >= 0 && S.ntimed < NT_PROF_MAX_TIMED && timer_at(1 + 2 * S.ntimed)) e->timer = (int32_t)(1 + 2 * S.ntimed++);
    else S.untimed++;
  }
  S.cur = (int32_t)i;
  e->t0 = stamp();                           /* after the bookkeeping: it is not the op's time */
  return (int)((S.gen << GEN_SHIFT) | (unsigned)i);
}

void nt_prof_end_(int token) {
  if (!nt_profile_active()) return;
  if (token < 0 || ((unsigned)token >> GEN_SHIFT) != S.gen) return;
  int32_t i = token & ((1 << GEN_SHIFT) - 1);
  if (i != S.cur) return;                    /* not the innermost open event: nothing sane to close */
  nt_ProfEvent *e = &S.ev[i];
  e->t1 = stamp();
  if (e->timer >= 0 && !timer_at(e->timer + 1)) { e->timer = -1; S.untimed++; }
  S.cur = e->parent;
  if (e->parent >= 0) S.ev[e->parent].child_ns += e->t1 - e->t0;
}

int nt_prof_dispatch_(int op, nt_Device dev, nt_Kernel k, const nt_KernelArgs *a) {
  int tok = nt_prof_begin_(nt_op_name(op), NT_PROF_OP, dev);
  int rc = dev == NT_CPU ? k(a) : nt_dispatch_device_(op, k, a);
  nt_prof_end_(tok);
  return rc;
}

int nt_prof_begin_fused_(const struct nt_Fused *r) {
  if (!nt_profile_active()) return -1;
  char name[256];
  size_t k = (size_t)snprintf(name, sizeof name, "fused(");
  for (int i = 0; i < r->nops && k < sizeof name - 32; i++)
    k += (size_t)snprintf(name + k, sizeof name - k, "%s%s", i ? "," : "", nt_op_name(r->ops[i].op));
  snprintf(name + k, sizeof name - k, ")");
  return nt_prof_begin_(name, NT_PROF_FUSED, NT_CPU);
}

static void reset_state(void) {
  free(S.ev); S.ev = NULL; S.n = S.cap = 0;
  free_names(S.names, S.nnames); S.names = NULL; S.nnames = S.capnames = 0;
  S.cur = -1;
}

void nt_profile_abort(void) {
  if (!nt_profile_active()) return;
  __atomic_store_n(&nt_prof_on_, 0, __ATOMIC_RELEASE);
  reset_state();                             /* (a pending timing event may be recorded again: no wait needed) */
}

/* GPU times: waits once, then reads each timed event's two timing events */
static int resolve_gpu(nt_Profile *p) {
  if (!S.ntimed) return 0;
  if (nt_cuda_synchronize()) return -1;
  for (int64_t i = 0; i < p->n; i++) {
    nt_ProfEvent *e = &p->ev[i];
    if (e->timer < 0) continue;
    double ms = 0, start = 0;
    if (nt_cuda_timer_elapsed(pool[e->timer], pool[e->timer + 1], &ms) ||
        nt_cuda_timer_elapsed(pool[0], pool[e->timer], &start)) return -1;
    e->gpu_ms = ms < 0 ? 0 : ms;
    e->gpu_start_ms = start < 0 ? 0 : start;
  }
  return 0;
}

/* event times from the profile's units to ns since the start; child times
** are summed again from the converted children, so self times stay >= 0 */
static void to_ns(nt_Profile *p, int64_t end_units, int64_t end_ns) {
  if (!S.tsc) return;
  double scale = end_units > 0 ? (double)end_ns / (double)end_units : 1.0;
  for (int64_t i = 0; i < p->n; i++) {
    nt_ProfEvent *e = &p->ev[i];
    e->t0 = (int64_t)((double)e->t0 * scale + 0.5);
    e->t1 = (int64_t)((double)e->t1 * scale + 0.5);
    e->child_ns = 0;
  }
  for (int64_t i = 0; i < p->n; i++)
    if (p->ev[i].parent >= 0) p->ev[p->ev[i].parent].child_ns += p->ev[i].t1 - p->ev[i].t0;
  if (p->gpu_ref_ns >= 0) p->gpu_ref_ns = (int64_t)((double)p->gpu_ref_ns * scale + 0.5);
}

nt_Profile *nt_profile_stop(void) {
  if (!nt_profile_active()) { nt_error_set("profile: no profile is running"); return NULL; }
  int64_t t_end = stamp(), ns_end = now_ns() - S.t_start;
  __atomic_store_n(&nt_prof_on_, 0, __ATOMIC_RELEASE);
  /* events still open (stopped from inside an op or a backward formula) end now */
  for (int32_t i = S.cur; i >= 0; i = S.ev[i].parent) {
    S.ev[i].t1 = t_end;
    if (S.ev[i].timer >= 0) { S.ev[i].timer = -1; S.untimed++; }
    if (S.ev[i].parent >= 0) S.ev[S.ev[i].parent].child_ns += S.ev[i].t1 - S.ev[i].t0;
  }
  nt_Profile *p = calloc(1, sizeof *p);
  if (!p) { nt_error_oom(sizeof *p); reset_state(); return NULL; }
  p->ev = S.ev; p->n = S.n; p->dropped = S.dropped; p->untimed = S.untimed;
  p->wall_ns = ns_end; p->gpu_ref_ns = S.gpu_ref_ns;
  to_ns(p, t_end, ns_end);
  p->names = S.names; p->nnames = S.nnames;
  S.ev = NULL; S.n = S.cap = 0; S.names = NULL; S.nnames = S.capnames = 0;
  if (resolve_gpu(p)) { S.cur = -1; nt_profile_free(p); return NULL; }
  S.cur = -1;
  /* bottom up (children follow their parents): GPU time inside each event,
  ** and a range (node, fused chain) whose ops ran on a device is on it */
  for (int64_t i = p->n - 1; i >= 0; i--) {
    nt_ProfEvent *e = &p->ev[i];
    double incl = e->timer >= 0 ? e->gpu_ms : e->gpu_child_ms;
    if (e->parent < 0) continue;
    nt_ProfEvent *up = &p->ev[e->parent];
    up->gpu_child_ms += incl;
    if (up->kind != NT_PROF_OP && e->device != NT_CPU) up->device = e->device;
  }
  return p;
}

void nt_profile_free(nt_Profile *p) {
  if (!p) return;
  free(p->ev);
  free_names(p->names, p->nnames);
  free(p);
}

int nt_profile_rows(const nt_Profile *p, nt_ProfRow **rows, int *nrows) {
  *rows = NULL; *nrows = 0;
  /* row of (name, phase, device): index name * 2 * NT_NDEVICES + phase * NT_NDEVICES + device */
  size_t nkeys = (size_t)(p->nnames ? p->nnames : 1) * 2 * NT_NDEVICES;
  int *row_of = malloc(sizeof *row_of * nkeys);
  nt_ProfRow *r = malloc(sizeof *r * nkeys);
  if (!row_of || !r) { free(row_of); free(r); nt_error_oom(sizeof *r * nkeys); return -1; }
  for (size_t k = 0; k < nkeys; k++) row_of[k] = -1;
  int n = 0;
  for (int64_t i = 0; i < p->n; i++) {
    const nt_ProfEvent *e = &p->ev[i];
    size_t key = ((size_t)e->name * 2 + e->phase) * NT_NDEVICES + e->device;
    if (row_of[key] < 0) {
      row_of[key] = n;
      r[n] = (nt_ProfRow){ .name = p->names[e->name], .phase = e->phase, .device = e->device, .kind = e->kind };
      n++;
    }
    nt_ProfRow *w = &r[row_of[key]];
    w->calls++;
    w->total_ms += (double)(e->t1 - e->t0) / 1e6;
    w->self_ms += (double)(e->t1 - e->t0 - e->child_ns) / 1e6;
    double incl = e->timer >= 0 ? e->gpu_ms : e->gpu_child_ms;
    w->gpu_total_ms += incl;
    if (e->timer >= 0) w->gpu_self_ms += e->gpu_ms > e->gpu_child_ms ? e->gpu_ms - e->gpu_child_ms : 0;
  }
  free(row_of);
  *rows = r; *nrows = n;
  return 0;
}

/* ---- Chrome trace-event file ------------------------------------------------ */
/* names are op and node names; escaped anyway, as JSON strings */
static void put_str(nt_StrBuf *b, const char *s) {
  nt_sb_put(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') nt_sb_put(b, "\\%c", c);
    else if (c < 0x20) nt_sb_put(b, "\\u%04x", c);
    else nt_sb_put(b, "%c", c);
  }
  nt_sb_put(b, "\"");
}

int nt_profile_write_trace(const nt_Profile *p, const char *path) {
  nt_StrBuf b = {0};
  nt_sb_put(&b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"wall_ms\":%.6f,\"events\":%lld,\"dropped\":%lld},\"traceEvents\":[\n",
      (double)p->wall_ns / 1e6, (long long)p->n, (long long)p->dropped);
  nt_sb_put(&b, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"nabla\"}},\n");
  nt_sb_put(&b, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"host (ops)\"}},\n");
  nt_sb_put(&b, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2,\"args\":{\"name\":\"GPU (compute stream)\"}}");
  for (int64_t i = 0; i < p->n; i++) {
    const nt_ProfEvent *e = &p->ev[i];
    const char *cat = e->phase ? "backward" : "forward";
    nt_sb_put(&b, ",\n{\"name\":"); put_str(&b, p->names[e->name]);
    nt_sb_put(&b, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"device\":\"%s\",\"self_us\":%.3f",
        cat, (double)e->t0 / 1e3, (double)(e->t1 - e->t0) / 1e3, nt_device_name((nt_Device)e->device),
        (double)(e->t1 - e->t0 - e->child_ns) / 1e3);
    if (e->timer >= 0) nt_sb_put(&b, ",\"gpu_us\":%.3f", e->gpu_ms * 1e3);
    nt_sb_put(&b, "}}");
    if (e->timer >= 0) {
      nt_sb_put(&b, ",\n{\"name\":"); put_str(&b, p->names[e->name]);
      nt_sb_put(&b, ",\"cat\":\"%s,gpu\",\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"self_us\":%.3f}}", cat,
          (double)p->gpu_ref_ns / 1e3 + e->gpu_start_ms * 1e3, e->gpu_ms * 1e3,
          (e->gpu_ms > e->gpu_child_ms ? e->gpu_ms - e->gpu_child_ms : 0) * 1e3);
    }
  }
  nt_sb_put(&b, "\n]}\n");
  if (b.oom) { free(b.p); nt_error_oom(b.cap); return -1; }
  struct iovec iov = { b.p, b.n };
  int rc = nt_atomic_write("profile trace", path, &iov, 1);
  free(b.p);
  if (rc) nt_error_set("%s", nt_io_error());
  return rc;
}
