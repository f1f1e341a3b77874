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
** at use instead (an NCCL all_gather the compute stream does not wait for
** needs an asynchronous all_gather in the module's ABI, which it lacks).
**
** And the copies of offload="optimizer" (a GPU model whose optimizer state
** and update live on the host): dist_offload_to_host(devs, hosts) copies
** each CUDA gradient shard into its (reused) host tensor and
** dist_offload_to_device(hosts, devs) each updated host shard into its CUDA
** tensor, all through the module's one pinned staging buffer (cudaHostAlloc,
** tensor/tdevice.h): page-locked, so the DMA runs at full speed, and the
** host->device copies are asynchronous on the module's stream (the host
** goes on issuing work; kernels queued after them see the data; the next
** use of the staging buffer waits for them).  device->host waits, as the
** host update needs the data.
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
#include "tensor/textend.h"
#include "tensor/tdevice.h"

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

/* joins every running gather (they keep their results until waited for) */
void nbD_zero_drain(void) {
  for (int i = 0; i < NG; i++) if (GS[i].state == 1) { pthread_join(GS[i].th, NULL); GS[i].state = 2; }
}

/* drops every gather (worker exit, session reset) */
void nbD_zero_shutdown(void) {
  nbD_zero_drain();
  for (int i = 0; i < NG; i++) { free(GS[i].buf); free(GS[i].fd); GS[i].buf = NULL; GS[i].fd = NULL; GS[i].state = 0; }
}

static int b_gather_start(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_gather_start";
  if (!nbD_self.g) return nb_error_kind(vm, "DistError", "%s: not running on a dist worker", f);
  if (a[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor", f);
  nt_Tensor *x = (nt_Tensor *)a[0].u.p;
  if (x->ndim != 1 || (x->dtype != NT_F32 && x->dtype != NT_F64)) return nb_error_kind(vm, "TypeError", "%s: expected a 1-D f32 or f64 tensor", f);
  int id;
  if (nbD_group_arg(vm, f, a[1], &id)) return NB_ERR;
  int slot = -1;
  for (int i = 0; i < NG && slot < 0; i++) if (GS[i].state == 0) slot = i;
  if (slot < 0) {
    /* every slot taken: a finished gather nobody waited for (its z was
    ** dropped after an error) gives its slot up, the oldest first; waiting
    ** on its handle later says it is gone */
    nbD_zero_drain();
    for (int i = 0; i < NG; i++) if (GS[i].state == 2 && (slot < 0 || GS[i].seq - GS[slot].seq >= (1u << 31))) slot = i;
    if (slot < 0) return nb_error_kind(vm, "DistError", "%s: more than %d gathers pending (wait for them)", f, NG);
    free(GS[slot].buf); free(GS[slot].fd); GS[slot].buf = NULL; GS[slot].fd = NULL; GS[slot].state = 0;
  }
  Gather *g = &GS[slot];
  nbD_Scope sc;
  if (nbD_group_enter(id, &sc)) return nb_error_kind(vm, "DistError", "%s", nt_error_msg());
  nbD_async_drain();                        /* earlier gathers and isends on these links finish first */
  dr_Group *w = nbD_self.g;
  if (w->broken) { nbD_group_leave(&sc); return nb_error_kind(vm, "DistError", "%s: the collective group is broken by an earlier failure (%s)", f, w->err); }
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
#define OFF_ALIGN 256             /* each tensor's place in the staging buffer */

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

static int b_offload_to_host(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_offload_to_host";
  int k; size_t total;
  if (offload_pairs(vm, f, a[0], a[1], &k, &total)) return NB_ERR;
  nb_List *d = nb_list(a[0]), *h = nb_list(a[1]);
  char *stage = total ? nt_cuda_staging(total) : NULL;
  if (total && !stage) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
  size_t off = 0;
  for (int i = 0; i < k; i++) {
    nt_Tensor *dv = (nt_Tensor *)d->items[i].u.p, *hv = (nt_Tensor *)h->items[i].u.p;
    size_t nb = (size_t)dv->numel * nt_dtype_size(dv->dtype);
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *c = nt_contiguous(dv);
    nt_set_grad_enabled(prev);
    int st = !c || nt_cuda_to_host(stage + off, nt_base(c), nb);
    nt_release(c);
    if (st) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
    memcpy(nt_base(hv), stage + off, nb);
    nt_bump_version(hv);
    off += (nb + OFF_ALIGN - 1) / OFF_ALIGN * OFF_ALIGN;
  }
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
  char *stage = total ? nt_cuda_staging(total) : NULL;   /* waits for the previous copies out of it */
  if (total && !stage) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
  size_t off = 0;
  for (int i = 0; i < k; i++) {
    nt_Tensor *hv = (nt_Tensor *)h->items[i].u.p, *dv = (nt_Tensor *)d->items[i].u.p;
    size_t nb = (size_t)dv->numel * nt_dtype_size(dv->dtype);
    memcpy(stage + off, nt_base(hv), nb);
    if (nt_cuda_to_device(nt_base(dv), stage + off, nb)) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
    nt_bump_version(dv);
    off += (nb + OFF_ALIGN - 1) / OFF_ALIGN * OFF_ALIGN;
  }
  *out = nb_nil();
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
  { "dist_gather_start", b_gather_start, "shard, group=nil", "dist_gather_start(shard, group=nil): starts an all_gather of every rank's 1-D f32/f64 shard (same size everywhere) on a thread; returns a handle for dist_gather_wait (stage 3's prefetch; not recorded; a CUDA shard is staged through host memory)" },
  { "dist_gather_wait", b_gather_wait, "h", "dist_gather_wait(h): the gathered vector (world x chunk elements, rank order, on the shard's device) of a dist_gather_start" },
  { "dist_offload_to_host", b_offload_to_host, "devs, hosts", "dist_offload_to_host(devs, hosts): copies each CUDA tensor of devs into the contiguous host tensor of hosts at the same place (same dtype and size) through pinned staging (offload=\"optimizer\")" },
  { "dist_offload_to_device", b_offload_to_device, "hosts, devs", "dist_offload_to_device(hosts, devs): copies each contiguous host tensor into the contiguous CUDA tensor of devs at the same place through pinned staging, asynchronously on the device's stream (offload=\"optimizer\")" },
  { "dist_grad_enabled", b_grad_enabled, "", "dist_grad_enabled(): whether operations are being recorded now (false inside no_grad and the first run of a checkpoint)" },
  { NULL, NULL, NULL, NULL },
};

void nbD_zero_init(void) { nbC_register(zero_builtins); }
