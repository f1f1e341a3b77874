/*
** dzero.c — process memory numbers for dist.memory() (stdlib/dist.nbl),
** which reports what sharded data parallelism (dist.zero) saves per rank.
**
** The resident set comes from /proc/self/statm (pages in RAM now) and the
** peak from getrusage's ru_maxrss (the kernel's high-water mark, KiB on
** Linux).  The peak can be reset by writing "5" to /proc/self/clear_refs
** (Linux 4.0+), so a test can measure the peak of one phase (a training step)
** rather than of the whole process; where that file cannot be written the
** reset says so instead of silently keeping the old mark.
**
** It also runs the prefetching all_gathers of stage 3 (stdlib/zero.nbl):
** dist_gather_start(shard, group) copies this rank's flat shard into a
** world x chunk host buffer and starts a thread that runs the ring all_gather
** on a private copy of the group view, while the caller computes the current
** unit; dist_gather_wait(h) returns the gathered vector.  Like the reducer's
** thread (ddataparallel.c), a running gather is drained before any other
** collective starts (nbD_zero_drain, called from nbD_reducer_drain, which
** nbD_async_drain calls), so messages on a link never interleave; ranks
** start and wait for the same gathers in the same order (SPMD).  The gather
** is not recorded: stage 3 wraps it in a custom_vjp whose backward is the
** reduce-scatter, as all_gather's own backward.
**
** A CUDA shard (a GPU model under the ring backend) is staged: copied to the
** host buffer at the start, gathered on the thread over the ring (what the
** ring's own all_gather of a CUDA tensor does, dtensorcoll.c's staged path,
** but while the GPU computes the current unit), and the gathered vector is
** copied back to the shard's device at the wait.  Under NCCL stage 3 gathers
** at use unless prefetch="nccl": then gather_nccl starts an NCCL all_gather
** on the communicator's stream that only the consumer's compute stream waits
** for (an event, tensor/tbackend.h) -- opt-in, as NCCL cannot run here
** (emulated device) and only the GPU kit's `zero` phase checks it.
**
** And the copies of offload="optimizer" (a GPU model whose optimizer state
** and update live on the host): dist_offload_to_host(devs, hosts) copies
** each CUDA gradient shard into its (reused) host tensor and
** dist_offload_to_device(hosts, devs) each updated host shard into its CUDA
** tensor, on a side stream ordered by events against the compute stream
** (tensor/tbackend.h; details at b_offload_to_host), into and out of host
** tensors in pinned memory (dist_pinned): DMA at full speed that runs while
** the compute stream works.  device->host waits on the host, as the host
** update needs the data; host->device makes only the device wait.  The
** same side stream carries the copies made during backward: the reducer's
** per-bucket pieces of stages 1 and 2 (nbD_offload_copy_d2h, called from
** ddataparallel.c) and stage 3's per-unit gradient shards, issued from a
** gradient-ready hook of the autograd engine here (dist_offload_units).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <pthread.h>
#include "dist/dinternal.h"
#include "dist/dgroup.h"
#include "dist/dtensorcoll.h"
#include "dist/ddataparallel.h"
#include "dist/dnccl.h"
#include "tensor/textend.h"
#include "tensor/tdevice.h"
#include "tensor/tbackend.h"

/* resident bytes now, from /proc/self/statm (its second field, in pages) */
static int rss_now(double *bytes) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  int ok = f && fscanf(f, "%ld %ld", &size, &resident) == 2;
  if (f) fclose(f);
  if (!ok) return -1;
  *bytes = (double)resident * (double)sysconf(_SC_PAGESIZE);
  return 0;
}

/* the high-water mark of the resident set: VmHWM of /proc/self/status (kB),
** which clear_refs resets; getrusage's ru_maxrss never goes down */
static int rss_peak(double *bytes) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) { kb = strtol(line + 6, NULL, 10); break; }
  if (f) fclose(f);
  if (kb < 0) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return -1;
    kb = ru.ru_maxrss;
  }
  *bytes = (double)kb * 1024.0;
  return 0;
}

static int b_rss(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)a; (void)n;
  double now = 0, peak = 0;
  if (rss_now(&now) || rss_peak(&peak)) return nb_error_kind(vm, "OSError", "dist_rss: cannot read this process's memory use from /proc");
  nb_Rec *r = nbR_new(2);
  nbR_set_cstr(r, "rss", nb_int(now));
  nbR_set_cstr(r, "peak_rss", nb_int(peak > now ? peak : now));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static int b_reset_peak(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)a; (void)n;
  FILE *f = fopen("/proc/self/clear_refs", "w");
  int ok = f && fputs("5", f) >= 0;
  if (f && fclose(f)) ok = 0;
  if (!ok) return nb_error_kind(vm, "OSError", "dist_reset_peak: cannot reset the peak resident set (/proc/self/clear_refs is not writable here)");
  *out = nb_nil();
  return NB_OK;
}


/* ---- prefetching all_gathers ------------------------------------------------ */
#define NG 4                      /* gathers in flight at once (stage 3 uses one) */
typedef struct Gather {
  int state;                      /* 0 free, 1 running (thread up), 2 finished (joined) */
  unsigned seq;
  pthread_t th;
  dr_Group view; int *fd;
  void *buf; size_t chunk, es; int64_t world;
  nt_DType dtype;
  nt_Device dev;                  /* the shard's device: the result goes back there */
  int st;
  /* state 3: an NCCL all_gather in flight on the communicator's stream
  ** (prefetch="nccl"): send/recv held until the compute stream waits for ev */
  nt_Tensor *send, *recv; void *ev;
} Gather;
static Gather GS[NG];
static unsigned gseq;

static void *gather_main(void *arg) {
  Gather *g = arg;
  size_t *counts = malloc(sizeof(size_t) * (size_t)g->world);
  if (!counts) { snprintf(g->view.err, sizeof g->view.err, "out of memory"); g->st = -1; return NULL; }
  for (int64_t i = 0; i < g->world; i++) counts[i] = g->chunk;
  g->st = dr_all_gather(&g->view, g->buf, counts, g->es);
  free(counts);
  return NULL;
}

/* joins every running gather (they keep their results until waited for).  An
** NCCL gather needs no draining: later collectives on its communicator queue
** behind it on the same stream, and every rank issues them in one order. */
void nbD_zero_drain(void) {
  for (int i = 0; i < NG; i++) if (GS[i].state == 1) { pthread_join(GS[i].th, NULL); GS[i].state = 2; }
}

/* lets a slot go; an NCCL gather's buffers only once the compute stream
** waits for it (work queued after -- a reuse of their blocks -- runs after it) */
static void gather_free(Gather *g) {
  if (g->ev) { nt_cuda_stream_wait(NULL, g->ev); nt_cuda_event_destroy(g->ev); }
  nt_release(g->send); nt_release(g->recv);
  free(g->buf); free(g->fd);
  g->send = g->recv = NULL; g->ev = NULL; g->buf = NULL; g->fd = NULL; g->state = 0;
}

/* drops every gather (worker exit, session reset) */
static void off_shutdown(void);
static void units_clear(void);
void nbD_zero_shutdown(void) {
  nbD_zero_drain();
  units_clear();
  off_shutdown();
  for (int i = 0; i < NG; i++) gather_free(&GS[i]);
}

/* prefetch="nccl": the shard (CUDA, contiguous copy held) gathered into a
** fresh device buffer by an NCCL all_gather on the group communicator's
** stream that the compute stream does not wait for until dist_gather_wait
** (tensor/tbackend.h, nt_cuda_comm_all_gather_async).  NCCL does not run on
** the emulated device: this path is exercised only by the GPU kit's `zero`
** phase (tests/dist/test_zero_cuda.py under ZERO_BACKEND=nccl), so it is
** opt-in.  0, or -1 + error. */
static int gather_nccl(Gather *g, nt_Tensor *x, dr_Group *w) {
  /* a sub-group's communicator is made on its first collective: an empty one */
  size_t *zero = calloc((size_t)w->world, sizeof *zero);
  if (!zero) { nt_error_set("out of memory"); return -1; }
  int st = dn_all_gather(w, NULL, zero, 1);
  free(zero);
  if (st || !w->nccl) { nt_error_set("%s", w->err[0] ? w->err : "no NCCL communicator for this group"); return -1; }
  bool prev = nt_set_grad_enabled(false);
  g->send = nt_contiguous(x);
  int64_t len = x->numel * w->world;
  g->recv = g->send ? nt_empty(&len, 1, x->dtype, NT_CUDA) : NULL;
  nt_set_grad_enabled(prev);
  g->ev = g->recv ? nt_cuda_event_create() : NULL;
  size_t nb = (size_t)x->numel * nt_dtype_size(x->dtype);
  if (!g->ev || nt_cuda_comm_all_gather_async(w->nccl, nt_base(g->send), nt_base(g->recv), nb, g->ev)) {
    if (g->ev) { nt_cuda_event_destroy(g->ev); g->ev = NULL; }   /* nothing was queued that reads them */
    nt_release(g->send); nt_release(g->recv); g->send = g->recv = NULL;
    return -1;
  }
  w->bytes_sent += nb * (size_t)(w->world - 1); w->bytes_recv += nb * (size_t)(w->world - 1);
  g->chunk = (size_t)x->numel; g->world = w->world; g->dtype = x->dtype; g->dev = x->device; g->es = nt_dtype_size(x->dtype);
  g->st = 0; g->seq = ++gseq; g->state = 3;
  return 0;
}

static int b_gather_start(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_gather_start";
  if (!nbD_self.g) return nb_error_kind(vm, "DistError", "%s: not running on a dist worker", f);
  if (a[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor", f);
  nt_Tensor *x = (nt_Tensor *)a[0].u.p;
  if (x->ndim != 1 || (x->dtype != NT_F32 && x->dtype != NT_F64)) return nb_error_kind(vm, "TypeError", "%s: expected a 1-D f32 or f64 tensor", f);
  int id;
  if (nbD_group_arg(vm, f, a[1], &id)) return NB_ERR;
  bool use_nccl = false;
  if (nbV_truthy(vm, a[2], &use_nccl)) return NB_ERR;
  int slot = -1;
  for (int i = 0; i < NG && slot < 0; i++) if (GS[i].state == 0) slot = i;
  if (slot < 0) {
    /* every slot taken: a finished gather nobody waited for (its z was
    ** dropped after an error) gives its slot up, the oldest first; waiting
    ** on its handle later says it is gone */
    nbD_zero_drain();
    for (int i = 0; i < NG; i++) if ((GS[i].state == 2 || GS[i].state == 3) && (slot < 0 || GS[i].seq - GS[slot].seq >= (1u << 31))) slot = i;
    if (slot < 0) return nb_error_kind(vm, "DistError", "%s: more than %d gathers pending (wait for them)", f, NG);
    gather_free(&GS[slot]);
  }
  Gather *g = &GS[slot];
  nbD_Scope sc;
  if (nbD_group_enter(id, &sc)) return nb_error_kind(vm, "DistError", "%s", nt_error_msg());
  nbD_async_drain();                        /* earlier gathers and isends on these links finish first */
  dr_Group *w = nbD_self.g;
  if (w->broken) { nbD_group_leave(&sc); return nb_error_kind(vm, "DistError", "%s: the collective group is broken by an earlier failure (%s)", f, w->err); }
  if (use_nccl && x->device == NT_CUDA && dn_on(w)) {
    int st = gather_nccl(g, x, w);
    nbD_group_leave(&sc);
    if (st) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
    *out = nb_int((double)slot * 4294967296.0 + (double)g->seq);
    return NB_OK;
  }
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *h = nt_to_device(x, NT_CPU), *c = h ? nt_contiguous(h) : NULL;
  nt_set_grad_enabled(prev);
  nt_release(h);
  g->es = x->dtype == NT_F64 ? 8 : 4;
  g->chunk = (size_t)x->numel; g->world = w->world; g->dtype = x->dtype; g->dev = x->device;
  g->buf = c ? malloc(g->chunk * (size_t)w->world * g->es + 1) : NULL;
  g->fd = c ? malloc(sizeof(int) * (size_t)w->world) : NULL;
  if (!c || !g->buf || !g->fd) {
    nbD_group_leave(&sc); nt_release(c); free(g->buf); free(g->fd); g->buf = NULL; g->fd = NULL;
    return nb_error_kind(vm, "DistError", "%s: %s", f, c ? "out of memory" : nt_error_msg());
  }
  memcpy((char *)g->buf + (size_t)w->rank * g->chunk * g->es, nt_data_ptr(c), g->chunk * g->es);
  nt_release(c);
  memcpy(g->fd, w->fd, sizeof(int) * (size_t)w->world);
  g->view = *w; g->view.fd = g->fd; g->view.bytes_sent = g->view.bytes_recv = 0;
  nbD_group_leave(&sc);
  g->st = 0; g->seq = ++gseq;
  if (pthread_create(&g->th, NULL, gather_main, g)) {
    free(g->buf); free(g->fd); g->buf = NULL; g->fd = NULL;
    return nb_error_kind(vm, "DistError", "%s: cannot start a thread", f);
  }
  g->state = 1;
  *out = nb_int((double)slot * 4294967296.0 + (double)g->seq);
  return NB_OK;
}

static int b_gather_wait(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_gather_wait";
  if (a[0].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: expected a handle from dist_gather_start", f);
  double hv = a[0].u.n;
  int slot = (int)(hv / 4294967296.0);
  unsigned seq = (unsigned)(hv - (double)slot * 4294967296.0);
  if (slot < 0 || slot >= NG || GS[slot].state == 0 || GS[slot].seq != seq) return nb_error_kind(vm, "DistError", "%s: no pending gather with this handle (already waited for, or given up: more than 4 were left unwaited)", f);
  Gather *g = &GS[slot];
  if (g->state == 3) {                      /* NCCL: the compute stream waits for the gather, the host does not */
    int st = nt_cuda_stream_wait(NULL, g->ev);
    nt_Tensor *t = st ? NULL : nt_retain(g->recv);
    gather_free(g);
    if (!t) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
    *out = nb_obj(NB_TTENSOR, t);
    return NB_OK;
  }
  if (g->state == 1) pthread_join(g->th, NULL);
  dr_Group *w = nbD_self.g;
  if (w) {
    w->bytes_sent += g->view.bytes_sent; w->bytes_recv += g->view.bytes_recv;
    if (g->st && !w->broken) { w->broken = 1; memcpy(w->err, g->view.err, sizeof w->err); }
  }
  int64_t len = (int64_t)g->chunk * g->world;
  nt_Tensor *t = g->st ? NULL : nt_from_buffer(g->buf, g->dtype, &len, 1, g->dtype);
  if (t && g->dev != NT_CPU) {              /* a CUDA shard's gather goes back to its device */
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *d = nt_to_device(t, g->dev);
    nt_set_grad_enabled(prev);
    nt_release(t); t = d;
  }
  free(g->buf); free(g->fd); g->buf = NULL; g->fd = NULL; g->state = 0;
  if (!t) return nb_error_kind(vm, "DistError", "%s: %s", f, g->st ? g->view.err : nt_error_msg());
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* ---- offload="optimizer" copies --------------------------------------------------- */
#define OFF_ALIGN 256             /* the size bound below counts each tensor rounded up to this */

/* the two lists as n pairs of (CUDA, host) tensors of one dtype and size each;
** 0, or -1 after raising the error */
static int offload_pairs(nb_VM *vm, const char *f, nb_Value dv, nb_Value hv, int *n, size_t *total) {
  if (dv.t != NB_TLIST || hv.t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected two lists of tensors", f), -1;
  nb_List *d = nb_list(dv), *h = nb_list(hv);
  if (d->n != h->n) return nb_error_kind(vm, "ValueError", "%s: %d device tensors but %d host tensors", f, d->n, h->n), -1;
  size_t t = 0;
  for (int i = 0; i < d->n; i++) {
    if (d->items[i].t != NB_TTENSOR || h->items[i].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: item %d is not a pair of tensors", f, i), -1;
    nt_Tensor *a = (nt_Tensor *)d->items[i].u.p, *b = (nt_Tensor *)h->items[i].u.p;
    if (a->device != NT_CUDA || b->device != NT_CPU) return nb_error_kind(vm, "ValueError", "%s: pair %d is on %s and %s, expected cuda and cpu", f, i, nt_device_name(a->device), nt_device_name(b->device)), -1;
    if (a->dtype != b->dtype || a->numel != b->numel) return nb_error_kind(vm, "ValueError", "%s: pair %d differs in dtype or size (%s[%lld] and %s[%lld])", f, i, nt_dtype_name(a->dtype), (long long)a->numel, nt_dtype_name(b->dtype), (long long)b->numel), -1;
    if (!nt_is_contiguous(b)) return nb_error_kind(vm, "ValueError", "%s: host tensor %d is not contiguous", f, i), -1;
    size_t nb = (size_t)a->numel * nt_dtype_size(a->dtype);
    if (nb > ((size_t)1 << 40) || t > ((size_t)1 << 42)) return nb_error_kind(vm, "ValueError", "%s: %zu bytes is more than this copy handles", f, nb), -1;
    t += (nb + OFF_ALIGN - 1) / OFF_ALIGN * OFF_ALIGN;
  }
  *n = d->n; *total = t;
  return 0;
}

/* The copies run on a side stream (tensor/tbackend.h), ordered by events:
**   to_host:   compute --ev_c--> side: D2H of each gradient shard into its
**              host tensor; the host waits for side's event (the update
**              needs the data) and only then lets the device tensors go.
**   to_device: compute --ev_c--> side (the destinations may still be read,
**              or their blocks be reused, by work queued on compute): H2D of
**              each updated host shard; compute waits for side's event on
**              the device, the host does not wait.  The host tensors are held
**              until a later host wait on the side stream covers the copies
**              (the next to_host, nbD_zero_shutdown): a pinned source is read
**              when the copy runs.
** Host tensors in pinned memory (dist_pinned) make the copies true DMA that
** overlaps whatever the compute stream runs meanwhile; pageable ones work too
** (the driver stages them synchronously).
** NABLA_TEST_OFFLOAD_SKIP=compute-wait|host-wait|device-wait leaves one
** ordering out: tests/dist/test_zero_cuda.py checks that the emulated device
** (cuda/emu/api.cpp: deferred side streams, ordering checker) catches each. */
static void *off_side, *off_ev_c, *off_ev_s;
static nt_Tensor **off_held;                  /* host sources of H2D copies (and stage 3's device sources) not yet waited for */
static int off_nheld, off_capheld;

/* t stays alive until a host wait covers the copies issued so far; 0 or -1 */
static int off_hold(nt_Tensor *t) {
  if (off_nheld == off_capheld) {
    int cap = off_capheld ? 2 * off_capheld : 16;
    nt_Tensor **h = realloc(off_held, sizeof *h * (size_t)cap);
    if (!h) { nt_error_set("out of memory"); return -1; }
    off_held = h; off_capheld = cap;
  }
  off_held[off_nheld++] = nt_retain(t);
  return 0;
}

static int off_skip(const char *what) {
  const char *e = getenv("NABLA_TEST_OFFLOAD_SKIP");
  return what && e && !strcmp(e, what);
}

static void off_release_held(void) {
  for (int i = 0; i < off_nheld; i++) nt_release(off_held[i]);
  free(off_held); off_held = NULL; off_nheld = off_capheld = 0;
}

static int off_ready(void) {
  if (!off_side && !(off_side = nt_cuda_stream_create())) return -1;
  if (!off_ev_c && !(off_ev_c = nt_cuda_event_create())) return -1;
  if (!off_ev_s && !(off_ev_s = nt_cuda_event_create())) return -1;
  return 0;
}

/* the side stream's work done (the host waited), the held sources let go */
static void off_shutdown(void) {
  if (off_side && off_ev_s && !nt_cuda_event_record(off_ev_s, off_side)) nt_cuda_event_wait(off_ev_s);
  off_release_held();
  nt_cuda_event_destroy(off_ev_c); nt_cuda_event_destroy(off_ev_s); nt_cuda_stream_destroy(off_side);
  off_ev_c = off_ev_s = off_side = NULL;
}

/* Per-bucket copies (stage 2 with the reducer's buckets on the device,
** ddataparallel.c): as soon as a bucket's piece of the gradient shard is
** summed on the compute stream, during backward, its bytes go device->host
** on the side stream, ordered after that work by ev_c, into the pinned host
** shard.  step() then only waits on the host (nbD_offload_host_wait) for
** copies already in flight; the compute stream waits on the device
** (nbD_offload_device_wait) before it zeroes or frees the device shard the
** copies read.  Counted by where they were issued: during backward (the
** bucket was final before the pass ended) or after it (the end of the pass,
** or dist_offload_to_host at step()).
** NABLA_TEST_OFFLOAD_SKIP=bucket-compute-wait|bucket-host-wait leaves one of
** these orderings out (tests/dist/test_zero_cuda.py sees each caught). */
static int64_t off_bytes_during, off_bytes_after, off_bytes_host;
void nbD_offload_count_host(size_t n) { off_bytes_host += (int64_t)n; }
static int off_inflight;                      /* per-bucket copies issued that no host or device wait covers yet */

/* The three orderings between the side stream and the rest (skip: the
** NABLA_TEST_OFFLOAD_SKIP name that leaves the wait out, NULL for none):
** the side stream's next work runs after the compute stream's work so far; */
static int off_after_compute(const char *skip) {
  int st = nt_cuda_event_record(off_ev_c, NULL);
  if (!st && !off_skip(skip)) st = nt_cuda_stream_wait(off_side, off_ev_c);
  return st;
}
/* the host waits for everything issued on the side stream so far (then the
** tensors held for its earlier host->device copies may go); */
static int off_host_wait(const char *skip) {
  int st = nt_cuda_event_record(off_ev_s, off_side);
  if (!st && !off_skip(skip)) st = nt_cuda_event_wait(off_ev_s);
  if (!st) { off_release_held(); off_inflight = 0; }
  return st;
}
/* the compute stream's next work runs after everything issued on the side
** stream so far (the device waits, not the host) */
static int off_device_wait(const char *skip) {
  int st = nt_cuda_event_record(off_ev_s, off_side);
  if (!st && !off_skip(skip)) st = nt_cuda_stream_wait(NULL, off_ev_s);
  return st;
}

int nbD_offload_copy_d2h(void *dst, const void *src, size_t n, int during) {
  if (!n) return 0;
  int st = off_ready();
  if (!st) st = off_after_compute("bucket-compute-wait");
  if (!st) st = nt_cuda_copy_async(dst, src, n, 0, off_side);
  if (!st) { if (during) off_bytes_during += (int64_t)n; else off_bytes_after += (int64_t)n; off_inflight = 1; }
  return st;
}

int nbD_offload_host_wait(void) {
  if (!off_side) return 0;                  /* no copy was ever issued */
  return off_host_wait("bucket-host-wait");
}

/* only while copies are in flight that the host has not waited for: after
** that wait the device has nothing to wait for (and the emulated device
** would run the copies at this wait, hiding a host wait left out) */
int nbD_offload_device_wait(void) {
  if (!off_side || !off_inflight) return 0;
  int st = off_device_wait(NULL);
  if (!st) off_inflight = 0;
  return st;
}

/* ---- stage 3's per-unit copies ----------------------------------------------
** offload="optimizer" at stage 3 (stdlib/zero.nbl's _zero3): a unit's
** gradient shard is final when the outermost backward has delivered every
** gradient into its shard leaf -- the gather's backward (a reduce-scatter)
** runs in the unit's checkpoint recompute, which hands the shard's gradient
** to the outer pass as the checkpoint node's input gradient.  The autograd
** engine's gradient-ready hook (tensor/tensor.h) fires right then, and the
** shard's .grad is copied device->host into its pinned host tensor on the
** side stream (nbD_offload_copy_d2h: the copies of stages 1 and 2, after the
** compute stream's work) while backward goes on with the earlier units (the
** root unit, used first in forward, comes last).  The gradient is held until
** a host wait covers its copy (a later pass may replace .grad and free it).
** dist.no_sync's passes copy nothing: the last pass copies the accumulated
** sum.  step() (dist_offload_take_units) waits on the host and uses the copies
** only when every shard's .grad is still the tensor, at the version, that was
** copied (or none, and the host tensor is zeroed); else nil: step() copies
** every shard after backward, as without the hooks.  The reducer's hooks
** and these are exclusive (one hook slot): stage 3 clears the reducer, and a
** later data_parallel or stage 1/2 registration replaces these hooks (the
** version check then finds no copies). */
typedef struct OffUnit { nt_Tensor *shard, *host, *src; uint64_t ver; } OffUnit;
static struct { OffUnit *u; int n, in_pass, bad; } U;

static const nt_GradHooks units_hooks;
static void units_clear(void) {
  const nt_GradHooks *cur = nt_set_grad_hooks(NULL);
  if (cur != &units_hooks) nt_set_grad_hooks(cur);   /* someone else's are on top: leave them */
  for (int i = 0; i < U.n; i++) { nt_release(U.u[i].shard); nt_release(U.u[i].host); nt_release(U.u[i].src); }
  free(U.u); U.u = NULL; U.n = 0; U.in_pass = U.bad = 0;
}

static int units_ready(void *ud, nt_Tensor *leaf, nt_Tensor *grad) {
  (void)ud;
  if (!nbD_reducer_syncing()) return 0;       /* inside dist.no_sync */
  int i = 0;
  while (i < U.n && U.u[i].shard != leaf) i++;
  if (i == U.n) return 0;
  OffUnit *u = &U.u[i];
  if (!U.in_pass) {                           /* the first shard of a pass: the last pass's copies are stale */
    U.in_pass = 1; U.bad = 0;
    for (int k = 0; k < U.n; k++) { nt_release(U.u[k].src); U.u[k].src = NULL; }
    if (off_nheld && off_side && off_host_wait(NULL)) return -1;   /* (and their held gradients let go) */
  }
  if (grad->device != NT_CUDA || !nt_is_contiguous(grad) || grad->dtype != u->host->dtype || grad->numel != u->host->numel) { U.bad = 1; return 0; }
  if (off_hold(grad) || nbD_offload_copy_d2h(nt_base(u->host), nt_base(grad), (size_t)grad->numel * nt_dtype_size(grad->dtype), 1)) return -1;
  nt_release(u->src);
  u->src = nt_retain(grad); u->ver = grad->storage->version;
  return 0;
}
static int units_finish(void *ud, bool ok) {
  (void)ud;
  if (U.in_pass && !ok) U.bad = 1;
  U.in_pass = 0;
  return 0;
}
static const nt_GradHooks units_hooks = { units_ready, units_finish, NULL };

/* dist_offload_units(shards, hosts): stage 3's shards (CUDA leaves) and their
** pinned host tensors; true when the per-unit copies are on */
static int b_offload_units(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_offload_units";
  int k; size_t total;
  if (offload_pairs(vm, f, a[0], a[1], &k, &total)) return NB_ERR;
  units_clear();
  *out = nb_bool(false);
  if (nbD_offload_after_backward() || !k) return NB_OK;
  if (!(U.u = calloc((size_t)k, sizeof *U.u))) return nb_error_kind(vm, "MemoryError", "%s: out of memory", f);
  nb_List *d = nb_list(a[0]), *h = nb_list(a[1]);
  for (int i = 0; i < k; i++) { U.u[i].shard = nt_retain((nt_Tensor *)d->items[i].u.p); U.u[i].host = nt_retain((nt_Tensor *)h->items[i].u.p); }
  U.n = k;
  nt_set_grad_hooks(&units_hooks);            /* (stage 3 cleared the reducer's) */
  *out = nb_bool(true);
  return NB_OK;
}

/* dist_offload_take_units(shards): after backward, the host wait, and the
** host copies of the shards' gradients divided by `n` (the gathers' backward
** summed them over the ranks), or nil when they are not all of the current
** .grad (step() copies then) */
static int b_offload_take_units(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_offload_take_units";
  if (a[0].t != NB_TLIST || a[1].t != NB_TNUM || !(a[1].u.n >= 1)) return nb_error_kind(vm, "TypeError", "%s: expected the shards and the group's size", f);
  nb_List *l = nb_list(a[0]);
  *out = nb_nil();
  if (l->n != U.n || !U.n || U.bad || U.in_pass) return NB_OK;
  int any = 0;
  for (int i = 0; i < U.n; i++) {
    nt_Tensor *s = l->items[i].t == NB_TTENSOR ? (nt_Tensor *)l->items[i].u.p : NULL;
    if (s != U.u[i].shard || s->grad != U.u[i].src || (s->grad && s->grad->storage->version != U.u[i].ver)) return NB_OK;
    any |= s->grad != NULL;
  }
  if (!any) return NB_OK;
  if (nbD_offload_host_wait()) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
  nb_List *res = nbL_new(U.n);
  if (!res) return nb_error(vm, "out of memory");
  double div = a[1].u.n;
  for (int i = 0; i < U.n; i++) {
    nt_Tensor *h = U.u[i].host;
    if (!U.u[i].src) memset(nt_base(h), 0, (size_t)h->numel * nt_dtype_size(h->dtype));   /* no gradient: zeros, as step() takes */
    else if (div != 1.0) {                    /* as s.grad / n on the device */
      if (h->dtype == NT_F64) { double *d = (double *)nt_base(h); for (int64_t j = 0; j < h->numel; j++) d[j] /= div; }
      else { float *d = (float *)nt_base(h); float q = (float)div; for (int64_t j = 0; j < h->numel; j++) d[j] /= q; }
    }
    nt_bump_version(h);
    nbL_push(res, nb_obj(NB_TTENSOR, nt_retain(h)));
  }
  for (int i = 0; i < U.n; i++) { nt_release(U.u[i].src); U.u[i].src = NULL; }   /* taken once */
  *out = nb_obj(NB_TLIST, res);
  return NB_OK;
}

/* whether the per-bucket copies are off (the old path: every gradient shard
** copied at step(), after backward), for comparisons: the environment's
** NABLA_OFFLOAD_AFTER_BACKWARD=1 (tests), or dist_offload_after_backward(on)
** in this process (bench/dist/zero_gpu.nbl's zero2_offload_after mode);
** read when dist.zero registers its reducer */
static int off_after_set = -1;
int nbD_offload_after_backward(void) {
  if (off_after_set >= 0) return off_after_set;
  const char *e = getenv("NABLA_OFFLOAD_AFTER_BACKWARD");
  return e && *e && strcmp(e, "0");
}

static int b_offload_after(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)vm; (void)n;
  *out = nb_bool(nbD_offload_after_backward());
  if (a[0].t != NB_TNIL) off_after_set = nb_truthy(a[0]) ? 1 : 0;
  return NB_OK;
}

static int b_offload_stats(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)a; (void)n;
  nb_Rec *r = nbR_new(3);
  if (!r) return nb_error(vm, "out of memory");
  nbR_set_cstr(r, "during_backward", nb_int((double)off_bytes_during));
  nbR_set_cstr(r, "after_backward", nb_int((double)off_bytes_after));
  nbR_set_cstr(r, "host_resident", nb_int((double)off_bytes_host));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static int b_offload_to_host(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_offload_to_host";
  int k; size_t total;
  if (offload_pairs(vm, f, a[0], a[1], &k, &total)) return NB_ERR;
  nb_List *d = nb_list(a[0]), *h = nb_list(a[1]);
  nt_Tensor **c = calloc((size_t)k + 1, sizeof *c);
  if (!c) return nb_error_kind(vm, "MemoryError", "%s: out of memory", f);
  int st = off_ready();
  /* contiguous sources first: a copy kernel for one runs on the compute stream, before ev_c */
  bool prev = nt_set_grad_enabled(false);
  for (int i = 0; i < k && !st; i++) st = !(c[i] = nt_contiguous((nt_Tensor *)d->items[i].u.p));
  nt_set_grad_enabled(prev);
  if (!st) st = off_after_compute("compute-wait");
  for (int i = 0; i < k && !st; i++) {
    nt_Tensor *hv = (nt_Tensor *)h->items[i].u.p;
    size_t nb = (size_t)c[i]->numel * nt_dtype_size(c[i]->dtype);
    st = nt_cuda_copy_async(nt_base(hv), nt_base(c[i]), nb, 0, off_side);
    if (!st) off_bytes_after += (int64_t)nb;
  }
  if (!st) st = off_host_wait("host-wait");   /* the device tensors may go now */
  for (int i = 0; i < k; i++) nt_release(c[i]);
  free(c);
  if (st) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
  for (int i = 0; i < k; i++) nt_bump_version((nt_Tensor *)h->items[i].u.p);
  *out = nb_nil();
  return NB_OK;
}

static int b_offload_to_device(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_offload_to_device";
  int k; size_t total;
  if (offload_pairs(vm, f, a[1], a[0], &k, &total)) return NB_ERR;
  nb_List *h = nb_list(a[0]), *d = nb_list(a[1]);
  for (int i = 0; i < k; i++)
    if (!nt_is_contiguous((nt_Tensor *)d->items[i].u.p)) return nb_error_kind(vm, "ValueError", "%s: device tensor %d is not contiguous", f, i);
  int st = off_ready();
  if (!st) st = off_after_compute(NULL);
  for (int i = 0; i < k && !st; i++) {
    nt_Tensor *hv = (nt_Tensor *)h->items[i].u.p, *dv = (nt_Tensor *)d->items[i].u.p;
    st = off_hold(hv);                      /* (held first: a pinned source is read when the copy runs) */
    if (!st) st = nt_cuda_copy_async(nt_base(dv), nt_base(hv), (size_t)dv->numel * nt_dtype_size(dv->dtype), 1, off_side);
    nt_bump_version(dv);
  }
  if (!st) st = off_device_wait("device-wait");
  if (st) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
  *out = nb_nil();
  return NB_OK;
}

/* dist_pinned(t): a contiguous copy of t in pinned host memory (a CPU tensor) */
static int b_pinned(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_pinned";
  if (a[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor", f);
  nt_Tensor *x = (nt_Tensor *)a[0].u.p;
  nt_Tensor *p = nt_cuda_pinned_empty(x->shape, x->ndim, x->dtype);
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *h = p ? nt_to_device(x, NT_CPU) : NULL, *c = h ? nt_contiguous(h) : NULL;
  nt_set_grad_enabled(prev);
  nt_release(h);
  if (c) memcpy(nt_base(p), nt_base(c), (size_t)c->numel * nt_dtype_size(c->dtype));
  int st = !c;
  nt_release(c);
  if (st) { nt_release(p); return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg()); }
  *out = nb_obj(NB_TTENSOR, p);
  return NB_OK;
}

static int b_pinned_bytes(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)vm; (void)a; (void)n;
  *out = nb_int((double)nt_cuda_pinned_bytes());
  return NB_OK;
}

static int b_grad_enabled(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)vm; (void)a; (void)n;
  *out = nb_bool(nt_grad_enabled());
  return NB_OK;
}

static nb_Builtin zero_builtins[] = {
  { "dist_rss", b_rss, "", "dist_rss(): {rss, peak_rss} bytes of this process's resident set, now and at its high-water mark (use dist.memory)" },
  { "dist_reset_peak", b_reset_peak, "", "dist_reset_peak(): starts a new high-water mark of the resident set (Linux clear_refs)" },
  { "dist_gather_start", b_gather_start, "shard, group=nil, nccl=false", "dist_gather_start(shard, group=nil, nccl=false): starts an all_gather of every rank's 1-D f32/f64 shard (same size everywhere) on a thread; returns a handle for dist_gather_wait (stage 3's prefetch; not recorded; a CUDA shard is staged through host memory; nccl=true with a CUDA shard under the nccl backend: an asynchronous NCCL all_gather on the device instead)" },
  { "dist_gather_wait", b_gather_wait, "h", "dist_gather_wait(h): the gathered vector (world x chunk elements, rank order, on the shard's device) of a dist_gather_start" },
  { "dist_offload_to_host", b_offload_to_host, "devs, hosts", "dist_offload_to_host(devs, hosts): copies each CUDA tensor of devs into the contiguous host tensor of hosts at the same place (same dtype and size) on a side stream after the compute stream's work, and waits for the copies (offload=\"optimizer\")" },
  { "dist_offload_to_device", b_offload_to_device, "hosts, devs", "dist_offload_to_device(hosts, devs): copies each contiguous host tensor into the contiguous CUDA tensor of devs at the same place, asynchronously on a side stream; work queued on the compute stream afterwards waits for the copies on the device (offload=\"optimizer\")" },
  { "dist_offload_units", b_offload_units, "shards, hosts", "dist_offload_units(shards, hosts): offload=\"optimizer\" at stage 3: each CUDA shard's gradient copied device->host into its host tensor (pinned) on the side stream as soon as backward has finished it (a gradient-ready hook); false with NABLA_OFFLOAD_AFTER_BACKWARD set" },
  { "dist_offload_take_units", b_offload_take_units, "shards, n", "dist_offload_take_units(shards, n): after backward, waits for the per-unit copies and returns the host gradients divided by n, or nil when they are not all copies of the shards' current .grad" },
  { "dist_offload_stats", b_offload_stats, "", "dist_offload_stats(): {during_backward, after_backward, host_resident}: bytes of gradient shards offload=\"optimizer\" copied device->host per bucket while backward ran, and after it (the end of the pass, or all at step()), and taken from host memory with no copy (the ring reduce-scattered them there during backward), since the process started" },
  { "dist_offload_after_backward", b_offload_after, "on=nil", "dist_offload_after_backward(on=nil): true: later dist.zero(offload=\"optimizer\") copy every gradient shard at step(), after backward (the path before per-bucket copies, for comparisons); false: per bucket, during backward (the default; NABLA_OFFLOAD_AFTER_BACKWARD=1 sets true); nil: unchanged; returns the previous setting" },
  { "dist_pinned", b_pinned, "t", "dist_pinned(t): a copy of t in pinned (page-locked) host memory, a CPU tensor whose copies to and from the GPU are DMA that can overlap compute (offload=\"optimizer\"); needs CUDA" },
  { "dist_pinned_bytes", b_pinned_bytes, "", "dist_pinned_bytes(): bytes of pinned host tensors alive in this process (dist.memory().pinned)" },
  { "dist_grad_enabled", b_grad_enabled, "", "dist_grad_enabled(): whether operations are being recorded now (false inside no_grad and the first run of a checkpoint)" },
  { NULL, NULL, NULL, NULL },
};

void nbD_zero_init(void) { nbC_register(zero_builtins); }
