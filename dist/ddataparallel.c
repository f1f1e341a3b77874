/*
** ddataparallel.c — data-parallel gradient averaging that overlaps backward (the
** "reducer" of PyTorch's DistributedDataParallel), behind
** dist.data_parallel(model) (stdlib/dist.nbl).
**
** Registration takes the model's parameters and lays them out, in REVERSE
** order (backward produces the last layers' gradients first), in buckets of
** at most bucket_mb, one reduction dtype per bucket (f32; f64; f16/bf16 are
** reduced in f32).  Each bucket owns a host buffer.  The autograd engine's
** gradient-ready hook (nt_set_grad_hooks, tensor/tautograd.c) fires when a
** leaf's gradient is final; a leaf is one of our parameters when it views the
** same storage, offset and size (grad() differentiates fresh leaf aliases of
** the parameters, backward() the parameters themselves).  Its gradient is
** copied into its bucket; a full bucket is handed — strictly in bucket order,
** so every rank issues the same sequence of all_reduces — to a communication
** thread that runs the ring all_reduce on the buffer while backward goes on.
** The finish hook (end of the pass) hands over the buckets still incomplete
** (parameters with no gradient this pass count as zeros), waits for all, and
** replaces each parameter leaf's .grad with the average.
**
** Shard mode (ZeRO stage 2, dist.zero) keeps the same buckets but
** reduce-scatters them, each rank adding its piece to its layout's shard.
** CUDA parameters under the ring: the buckets and shards are host memory (the
** gradients are copied device->host as they become ready, as the ring needs
** them there) and take() hands the averaged shard back on the device.  CUDA
** parameters under NCCL: the buckets and the shards are CUDA tensors, a full
** bucket is reduce-scattered by NCCL from the main thread (dn_reduce_scatter:
** the host does not wait; the compute stream waits on the device before it
** adds the piece to the shard), and nothing goes through the host.  A group
** of one keeps them on the device without NCCL too (no collective to run).
** With offload="optimizer" (dist_reducer_offload) each bucket's piece of
** the device shard is copied into a pinned host shard as soon as it is
** added, on dzero.c's side stream (nbD_offload_copy_d2h), while backward goes
** on; take() makes the host wait for them, and the device shard is zeroed
** only after them.  Under the ring take() writes the host average there.
** ZeRO stage 1 with offload uses the averaging mode's buckets: this rank's
** slice of each bucket (cut parameter by parameter: copy_slice) goes into
** the pinned host shards as soon as the bucket's all-reduce is final --
** device buckets by the same side-stream copies (under NCCL one bucket
** behind, after joining NCCL's stream into the compute stream), the ring's
** host buckets by a memcpy on the thread; step() takes them only while
** every .grad is still the one the pass set (dist_reducer_take_host).
**
** With backend="nccl" and every parameter on the GPU the buckets are CUDA
** tensors instead: a gradient is cast and copied into its bucket on the
** device (no host staging), and a full bucket's all_reduce is ENQUEUED on
** NCCL's communication stream right away (dn_all_reduce_async, still in
** bucket order), where it overlaps the rest of backward on the compute
** stream, as DDP does; the finish hook enqueues the rest, makes the compute
** stream wait for them (dn_join) and averages on the device.  No thread and
** no host wait are involved: the host waits only when it next synchronises
** (bounded by the group timeout there, tensor/tdevice.h).
**
** The thread uses a private copy of the group view (like isend in dtensorcoll.c);
** every other collective first drains it (nbD_reducer_drain, called from
** nbD_async_drain), so messages on a link never interleave.  Ranks must run
** the same backward (same parameters used, same order), as with DDP.  With
** dist.no_sync(f) the hooks ignore the passes inside f (gradient
** accumulation: average once, on the last micro-batch, with backward()).
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor/tensor.h"
#include "tensor/textend.h"
#include "dist/dtensorcoll.h"
#include "dist/dgroup.h"
#include "dist/ddataparallel.h"
#include "dist/dnccl.h"

typedef struct Param {
  void *storage; int64_t offset, numel;   /* identity of the parameter's data */
  int bucket; size_t pos;                 /* element offset in the bucket */
  nt_Tensor *leaf;                        /* this pass's leaf (retained), NULL until ready */
  nt_Tensor *param;                       /* the registered tensor (retained) */
  int64_t flat;                           /* shard mode, and stage 1's offload: element offset in its layout */
  int lay;                                /* stage 1's offload: its layout (-1: in none) */
  nt_Tensor *off_grad; uint64_t off_ver;  /* stage 1's offload: the .grad finish set (retained) and its version */
} Param;

typedef struct Bucket {
  int rdt; size_t esize, count;
  void *buf;                              /* host buffer (ring), or NULL */
  nt_Tensor *dev;                         /* CUDA buffer (nccl), or NULL */
  int pending;                            /* parameters still missing this pass */
  int nparams;
  int lay; int64_t lo, hi;                /* shard mode: its layout and flat range [lo, hi) */
  int p0;                                 /* its parameters are p[p0 .. p0 + nparams) */
} Bucket;

/* shard mode (ZeRO stage 2): one flat layout per parameter group; position
** r of the group owns elements [r*chunk, (r+1)*chunk) and keeps their summed
** gradient in `shard` (chunk elements of rdt) */
typedef struct Lay {
  int rdt; size_t esize; int64_t chunk, total;
  void *shard;                            /* host accumulator (ring), or NULL */
  nt_Tensor *dshard;                      /* CUDA accumulator (nccl), or NULL */
  nt_Device dev;                          /* where the parameters live: take() returns the shard there */
  char *hbase;                            /* offload: its pinned host shard's first byte */
} Lay;

static struct {
  int registered, sync, group;
  int on_device;                          /* buckets on the GPU, reduced by NCCL */
  int np, nb;
  Param *p;
  Bucket *b;
  int hint;
  /* shard mode */
  int shard_mode, nl, shard_passes, shard_bad, shard_world;
  unsigned reg_id, next_id;                /* the registration's id (either mode), the last one given */
  Lay *l;
  /* offload="optimizer" (stage 2, buckets on the device): a pinned host
  ** tensor per layout that receives each bucket's piece of the device shard
  ** as soon as it is summed (dzero.c's side stream); off_ready: the last
  ** pass copied every piece, so step() only waits for the copies */
  nt_Tensor **off_host; int off_ready, off_waited, off_averaged, finishing;
  /* stage 1 (data_parallel's buckets, over the whole model): off_slices, this
  ** rank's slice of each all-reduced bucket goes into off_host too; off_next:
  ** the first bucket whose slice is not copied yet this pass; off_alias: this
  ** pass differentiates grad() aliases (z.step(grads) gets the tree, no copies);
  ** off_hostb: bytes the ring's thread put there from its host buckets */
  int off_slices, off_next, off_alias; int64_t off_hostb;
  /* one pass */
  int in_pass, launched, done, failed;
  dr_Group view; int *fd;
  char err[512];
  /* the thread */
  pthread_t th; int th_up, stop;
  pthread_mutex_t mu; pthread_cond_t cv;
  /* stats */
  int64_t passes, buckets_overlapped, buckets_total;
} R = { .sync = 1, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

/* shard mode, on the thread: the bucket's flat range [lo, hi) is cut where
** the positions' chunks begin, reduce-scattered with those (uneven, often
** zero) counts, and this position's piece is added to its shard; the bucket's
** buffer is freed at once, so no full gradient outlives its reduction */
static int reduce_scatter_bucket(Bucket *b) {
  int w = R.view.world, r = R.view.rank, st = 0;
  const Lay *L = &R.l[b->lay];
  size_t *counts = malloc(sizeof(size_t) * (size_t)w), mine = 0;
  if (!counts) { snprintf(R.view.err, sizeof R.view.err, "out of memory"); free(b->buf); b->buf = NULL; return -1; }
  size_t before = 0;
  for (int q = 0; q < w; q++) {
    int64_t s = b->lo > q * L->chunk ? b->lo : q * L->chunk, e = b->hi < (q + 1) * L->chunk ? b->hi : (q + 1) * L->chunk;
    counts[q] = e > s ? (size_t)(e - s) : 0;
    if (q < r) before += counts[q];
  }
  mine = counts[r];
  if (w > 1) st = dr_reduce_scatter(&R.view, b->buf, counts, b->rdt, DR_SUM);
  if (!st && mine) {
    int64_t start = b->lo > r * L->chunk ? b->lo : r * L->chunk, at = start - r * L->chunk;
    if (b->rdt == DR_F64) { double *d = (double *)L->shard + at; const double *x = (const double *)b->buf + before; for (size_t k = 0; k < mine; k++) d[k] += x[k]; }
    else { float *d = (float *)L->shard + at; const float *x = (const float *)b->buf + before; for (size_t k = 0; k < mine; k++) d[k] += x[k]; }
  }
  free(counts);
  free(b->buf); b->buf = NULL;
  return st;
}

/* shard mode under NCCL, on the main thread: bucket b reduce-scattered on
** the device (uneven chunk cuts fall back to an all_reduce inside
** dn_reduce_scatter: this rank's piece is at the same offset either way), its
** piece added to the layout's device shard, the bucket freed */
static int reduce_scatter_bucket_device(Bucket *b) {
  int w = R.view.world, r = R.view.rank, st = 0;
  Lay *L = &R.l[b->lay];
  size_t *counts = malloc(sizeof(size_t) * (size_t)w), before = 0, mine;
  if (!counts) { snprintf(R.view.err, sizeof R.view.err, "out of memory"); nt_release(b->dev); b->dev = NULL; return -1; }
  for (int q = 0; q < w; q++) {
    int64_t s = b->lo > q * L->chunk ? b->lo : q * L->chunk, e = b->hi < (q + 1) * L->chunk ? b->hi : (q + 1) * L->chunk;
    counts[q] = e > s ? (size_t)(e - s) : 0;
    if (q < r) before += counts[q];
  }
  mine = counts[r];
  if (w > 1) st = dn_reduce_scatter(&R.view, nt_base(b->dev), counts, b->rdt, DR_SUM);
  free(counts);
  if (!st && mine) {
    int64_t start = b->lo > r * L->chunk ? b->lo : r * L->chunk, at = start - r * L->chunk;
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *dst = nt_narrow(L->dshard, 0, at, (int64_t)mine), *src = dst ? nt_narrow(b->dev, 0, (int64_t)before, (int64_t)mine) : NULL;
    nt_Tensor *sum = src ? nt_add(dst, src) : NULL;
    if (!sum || nt_copy_(dst, sum)) { snprintf(R.view.err, sizeof R.view.err, "%s", nt_error_msg()); st = -1; }
    nt_release(dst); nt_release(src); nt_release(sum);
    nt_set_grad_enabled(prev);
    /* offload: the piece is final for this pass -- its device->host copy
    ** starts now, on the side stream after the add (ordered by an event on
    ** the compute stream, which also ran NCCL's wait), while backward goes on */
    if (!st && R.off_host) {
      size_t es = L->esize;
      if (nbD_offload_copy_d2h(nt_base(R.off_host[b->lay]) + (size_t)at * es, nt_base(L->dshard) + (size_t)at * es,
                               mine * es, !R.finishing)) {
        snprintf(R.view.err, sizeof R.view.err, "%s", nt_error_msg()); st = -1;
      }
    }
  }
  nt_release(b->dev); b->dev = NULL;
  return st;
}

/* Stage 1 with offload: this rank's slice of bucket b's all-reduced sums
** into the layouts' host shards.  A bucket holds its parameters in reverse
** order, each contiguous, so the slice [r*chunk, (r+1)*chunk) of a layout
** is cut parameter by parameter.  Device buckets: each piece copied on the
** side stream after the compute stream's work (nbD_offload_copy_d2h, the
** copies of stage 2's buckets); host buckets (the ring, on the thread):
** memcpy, nothing to copy from the device.  0, or -1 with R.view.err set. */
static int slice_piece(const Param *p, int64_t *s, int64_t *e, int64_t *lo) {
  const Lay *L = &R.l[p->lay];
  *lo = (int64_t)R.view.rank * L->chunk;
  *s = p->flat > *lo ? p->flat : *lo;
  *e = p->flat + p->numel < *lo + L->chunk ? p->flat + p->numel : *lo + L->chunk;
  return *s < *e;
}
static int copy_slice(const Bucket *b) {
  for (int k = b->p0; k < b->p0 + b->nparams; k++) {
    const Param *p = &R.p[k];
    int64_t s, e, lo;
    if (p->lay < 0 || !slice_piece(p, &s, &e, &lo)) continue;
    size_t es = R.l[p->lay].esize, n = (size_t)(e - s) * es, at = (p->pos + (size_t)(s - p->flat)) * es;
    char *dst = R.l[p->lay].hbase + (size_t)(s - lo) * es;
    if (!b->dev) { memcpy(dst, (char *)b->buf + at, n); R.off_hostb += (int64_t)n; }
    else if (nbD_offload_copy_d2h(dst, nt_base(b->dev) + at, n, !R.finishing)) { snprintf(R.view.err, sizeof R.view.err, "%s", nt_error_msg()); return -1; }
  }
  return 0;
}
/* stage 1, device buckets: the slices of buckets [off_next, upto), whose
** reductions are final on the compute stream */
static int copy_slices_upto(int upto) {
  if (!R.off_slices || R.off_alias) return 0;
  for (; R.off_next < upto; R.off_next++) if (copy_slice(&R.b[R.off_next])) return -1;
  return 0;
}

static void *comm_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&R.mu);
  for (;;) {
    while (!R.stop && R.done >= R.launched) pthread_cond_wait(&R.cv, &R.mu);
    if (R.stop) break;
    int i = R.done;
    pthread_mutex_unlock(&R.mu);
    int st = R.failed ? -1 : R.shard_mode ? reduce_scatter_bucket(&R.b[i])
                                          : dr_all_reduce(&R.view, R.b[i].buf, R.b[i].count, R.b[i].rdt, DR_SUM);
    /* stage 1's offload: the bucket's sums are final here, in host memory */
    if (!st && !R.shard_mode && R.off_slices && !R.off_alias) st = copy_slice(&R.b[i]);
    pthread_mutex_lock(&R.mu);
    if (st && !R.failed) { R.failed = 1; snprintf(R.err, sizeof R.err, "%s", R.view.err); }
    R.done++;
    pthread_cond_broadcast(&R.cv);
  }
  pthread_mutex_unlock(&R.mu);
  return NULL;
}

/* waits until every bucket handed to the thread is reduced */
void nbD_reducer_drain(void) {
  nbD_zero_drain();                         /* stage 3's prefetching gathers (dzero.c) */
  if (!R.th_up) return;
  pthread_mutex_lock(&R.mu);
  while (R.done < R.launched) pthread_cond_wait(&R.cv, &R.mu);
  pthread_mutex_unlock(&R.mu);
}

/* hands buckets [launched, upto) to the thread */
static void launch_upto(int upto) {
  pthread_mutex_lock(&R.mu);
  if (upto > R.launched) { R.launched = upto; pthread_cond_broadcast(&R.cv); }
  pthread_mutex_unlock(&R.mu);
}
/* device buckets: bucket i's reduction.  A group of one has nothing to
** reduce: the bucket is final now.  Under NCCL its all_reduce is enqueued on
** NCCL's stream; with stage 1's offload the buckets enqueued before it are
** first joined into the compute stream (NCCL reduced them while backward
** computed this one: one bucket behind) and their slices copied. */
static int enqueue_one(int i) {
  if (R.shard_mode) return reduce_scatter_bucket_device(&R.b[i]);
  if (R.view.world == 1) return copy_slices_upto(i + 1);
  if (R.off_slices && !R.off_alias && R.off_next < i && (dn_join(&R.view) || copy_slices_upto(i))) return -1;
  return dn_all_reduce_async(&R.view, nt_base(R.b[i].dev), R.b[i].count, R.b[i].rdt);
}
/* enqueues the reductions of buckets [launched, upto) */
static void enqueue_upto(int upto) {
  for (int i = R.launched; i < upto; i++)
    if (!R.failed && enqueue_one(i)) {
      R.failed = 1;
      snprintf(R.err, sizeof R.err, "%s", R.view.err);
    }
  pthread_mutex_lock(&R.mu);                /* the (idle) thread reads these */
  if (upto > R.launched) R.launched = R.done = upto;
  pthread_mutex_unlock(&R.mu);
}
static void launch_ready(void) {
  int i = R.launched;
  while (i < R.nb && R.b[i].pending == 0) i++;
  if (R.on_device) enqueue_upto(i);
  else launch_upto(i);
}

/* first gradient of a pass: a private view of the group for the thread */
static int begin_pass(void) {
  nbD_Scope sc;
  if (nbD_group_enter(R.group, &sc)) return -1;
  nbD_async_drain();                        /* isends on these links finish first */
  dr_Group *g = nbD_self.g;
  int rc = 0;
  if (g->broken) { nt_error_set("dist.data_parallel: the collective group is broken by an earlier failure (%s)", g->err); rc = -1; }
  else {
    int *fd = realloc(R.fd, sizeof(int) * (size_t)g->world);
    if (!fd) { nt_error_set("out of memory"); rc = -1; }
    else {
      R.fd = fd;
      memcpy(fd, g->fd, sizeof(int) * (size_t)g->world);
      R.view = *g;
      R.view.fd = fd;
      R.view.bytes_sent = R.view.bytes_recv = 0;
    }
  }
  nbD_group_leave(&sc);
  if (rc) return -1;
  if (R.shard_mode && R.view.world != R.shard_world) {
    if (R.shard_passes) { nt_error_set("dist.zero: the group's size changed from %d to %d with gradient shards not yet stepped", R.shard_world, R.view.world); return -1; }
    for (int i = 0; i < R.nl; i++)
      if (R.l[i].chunk * R.view.world < R.l[i].total) { nt_error_set("dist.zero: layout %d of %lld elements does not fit %d shards of %lld", i, (long long)R.l[i].total, R.view.world, (long long)R.l[i].chunk); return -1; }
    R.shard_world = R.view.world;
  }
  if (R.off_slices) {                       /* stage 1's offload: this pass copies anew; the device buckets are zeroed after the copies of the last */
    if (R.on_device && nbD_offload_device_wait()) return -1;
    R.off_next = 0; R.off_alias = 0; R.off_ready = 0;
    for (int j = 0; j < R.np; j++) { nt_release(R.p[j].off_grad); R.p[j].off_grad = NULL; }
  }
  for (int i = 0; i < R.nb; i++) {
    if (R.shard_mode) { free(R.b[i].buf); R.b[i].buf = NULL; nt_release(R.b[i].dev); R.b[i].dev = NULL; }   /* allocated as its first gradient arrives */
    else if (R.on_device) { if (nt_fill_(R.b[i].dev, 0)) return -1; }
    else memset(R.b[i].buf, 0, R.b[i].count * R.b[i].esize);
    R.b[i].pending = R.b[i].nparams;
  }
  pthread_mutex_lock(&R.mu);
  R.launched = R.done = 0; R.failed = 0; R.err[0] = 0;
  pthread_mutex_unlock(&R.mu);
  R.in_pass = 1;
  R.off_waited = 0;
  return 0;
}

static int find_param(const nt_Tensor *t) {
  for (int k = 0; k < R.np; k++) {
    int j = (R.hint + k) % R.np;
    const Param *p = &R.p[j];
    if (p->storage == (void *)t->storage && p->offset == t->offset && p->numel == t->numel) { R.hint = j; return j; }
  }
  return -1;
}

/* the gradient as a contiguous host tensor of the bucket's dtype */
static nt_Tensor *host_work(nt_Tensor *g, int rdt) {
  nt_Tensor *a = nt_to_dtype(g, rdt == DR_F64 ? NT_F64 : NT_F32), *b = NULL, *c = NULL;
  if (a) b = nt_to_device(a, NT_CPU);
  if (b) c = nt_contiguous(b);
  nt_release(a); nt_release(b);
  return c;
}

static int to_host_bucket(Bucket *b, const Param *p, nt_Tensor *grad) {
  nt_Tensor *h = host_work(grad, b->rdt);
  if (!h) return -1;
  memcpy((char *)b->buf + p->pos * b->esize, nt_data_ptr(h), (size_t)p->numel * b->esize);
  nt_release(h);
  return 0;
}

/* the bucket's slice of p as a 1-D view of b->dev (a new reference) */
static nt_Tensor *device_slice(const Bucket *b, const Param *p) { return nt_narrow(b->dev, 0, (int64_t)p->pos, p->numel); }

/* nccl: grad cast to the bucket's dtype and copied into its slice, on the GPU */
static int to_device_bucket(Bucket *b, const Param *p, nt_Tensor *grad) {
  int64_t len = p->numel;
  nt_Tensor *typed = nt_to_dtype(grad, b->rdt == DR_F64 ? NT_F64 : NT_F32);
  nt_Tensor *flat = typed ? nt_reshape(typed, &len, 1) : NULL, *dst = flat ? device_slice(b, p) : NULL;
  int rc = dst && !nt_copy_(dst, flat) ? 0 : -1;
  nt_release(typed); nt_release(flat); nt_release(dst);
  return rc;
}

/* shard mode: a bucket's buffer, allocated (zeroed) as its first gradient
** arrives and freed once reduced; 0 or -1 with the error set */
static int shard_bucket_alloc(Bucket *b) {
  if (R.on_device) {
    if (b->dev) return 0;
    int64_t len = (int64_t)(b->count ? b->count : 1);
    b->dev = nt_zeros(&len, 1, b->rdt == DR_F64 ? NT_F64 : NT_F32, NT_CUDA);
    return b->dev ? 0 : -1;
  }
  if (b->buf) return 0;
  if (!(b->buf = calloc(b->count ? b->count : 1, b->esize))) { nt_error_set("out of memory"); return -1; }
  return 0;
}

static int on_ready(void *ud, nt_Tensor *leaf, nt_Tensor *grad) {
  (void)ud;
  if (!R.registered || !R.sync) return 0;
  int j = find_param(leaf);
  if (j < 0) return 0;
  Param *p = &R.p[j];
  /* shard mode: grad() trees (fresh aliases of the parameters) are left to
  ** z.step(grads), which reduce-scatters the tree it is given */
  if (R.shard_mode && leaf != p->param) return 0;
  if (!R.in_pass && begin_pass()) return -1;
  if (R.off_slices && leaf != p->param && !R.off_alias) R.off_alias = 1;   /* before any bucket of the pass is launched */
  if (p->leaf) return 0;                    /* the same parameter twice (two aliases): first wins */
  Bucket *b = &R.b[p->bucket];
  if (R.shard_mode && shard_bucket_alloc(b)) return -1;
  bool prev = nt_set_grad_enabled(false);
  int rc = R.on_device ? to_device_bucket(b, p, grad) : to_host_bucket(b, p, grad);
  if (!rc && R.shard_mode) rc = nt_set_grad(leaf, NULL);   /* the full gradient lives on only in the bucket */
  nt_set_grad_enabled(prev);
  if (rc) return -1;
  p->leaf = nt_retain(leaf);
  if (--b->pending == 0) {
    launch_ready();
    R.buckets_overlapped++;
  }
  return 0;
}

/* the end of a pass, every bucket reduced: the counters, and a failure
** marks the group broken (-1 with the error set, `what` first) */
static int close_pass(const char *what) {
  R.in_pass = 0;
  R.passes++; R.buckets_total += R.nb;
  nbD_self.g->bytes_sent += R.view.bytes_sent;
  nbD_self.g->bytes_recv += R.view.bytes_recv;
  if (!R.failed) return 0;
  nbD_self.g->broken = 1;
  snprintf(nbD_self.g->err, sizeof nbD_self.g->err, "%s", R.err);
  nt_error_set("%s: %s", what, R.err);
  return -1;
}

/* shard mode: the end of a pass.  A parameter this pass did not reach may
** still hold a gradient accumulated under dist.no_sync: it joins its bucket
** (else it counts as zeros); every bucket is reduce-scattered (every rank
** issues the same sequence) and the pass is counted towards the shards. */
static int finish_shards(bool ok) {
  int rc = 0;
  bool prev = nt_set_grad_enabled(false);
  for (int j = 0; j < R.np && !rc; j++) {
    Param *p = &R.p[j];
    if (p->bucket < R.launched) continue;   /* the thread owns (and frees) a launched bucket */
    Bucket *b = &R.b[p->bucket];
    if (shard_bucket_alloc(b)) { rc = -1; break; }
    if (!p->leaf && p->param->grad) {
      if ((R.on_device ? to_device_bucket(b, p, p->param->grad) : to_host_bucket(b, p, p->param->grad)) || nt_set_grad(p->param, NULL)) rc = -1;
    }
  }
  nt_set_grad_enabled(prev);
  if (rc) {                                 /* the buckets must still go round, empty ones included */
    for (int i = R.launched; i < R.nb; i++) (void)shard_bucket_alloc(&R.b[i]);
  }
  for (int i = 0; i < R.nb; i++) R.b[i].pending = 0;
  int missing = 0;
  for (int i = R.launched; i < R.nb; i++) if (R.on_device ? !R.b[i].dev : !R.b[i].buf) missing = 1;
  if (missing) {
    pthread_mutex_lock(&R.mu);
    if (!R.failed) { R.failed = 1; snprintf(R.err, sizeof R.err, "out of memory"); }
    pthread_mutex_unlock(&R.mu);
  }
  if (R.on_device) {
    R.finishing = 1;                        /* copies issued from here on count as after backward */
    enqueue_upto(R.nb);                     /* (after a failure: skipped, and the buckets just freed) */
    R.finishing = 0;
    for (int i = 0; i < R.nb; i++) { nt_release(R.b[i].dev); R.b[i].dev = NULL; }
  } else {
    launch_upto(R.nb);
    nbD_reducer_drain();
  }
  for (int j = 0; j < R.np; j++) { nt_release(R.p[j].leaf); R.p[j].leaf = NULL; }
  if (close_pass("dist.zero: reduce-scattering gradients failed")) { R.shard_bad = 1; return -1; }
  if (!ok) R.shard_bad = 1;                 /* a failed backward: part of its gradient went in */
  R.shard_passes++;
  R.off_ready = R.off_host && R.on_device && ok && !rc;   /* every piece of this pass copied (the last pass carries the sum) */
  return rc;
}

static int on_finish(void *ud, bool ok) {
  (void)ud;
  if (!R.in_pass) return 0;
  if (R.shard_mode) return finish_shards(ok);
  /* a parameter this pass did not reach may hold a gradient accumulated under
  ** dist.no_sync: it is averaged too (left alone it would stay this rank's own) */
  bool prev0 = nt_set_grad_enabled(false);
  for (int j = 0; j < R.np; j++) {
    Param *p = &R.p[j];
    if (p->leaf || !p->param || !p->param->grad) continue;
    Bucket *b = &R.b[p->bucket];
    if (R.on_device ? to_device_bucket(b, p, p->param->grad) : to_host_bucket(b, p, p->param->grad)) {
      pthread_mutex_lock(&R.mu);
      if (!R.failed) { R.failed = 1; snprintf(R.err, sizeof R.err, "%s", nt_error_msg()); }
      pthread_mutex_unlock(&R.mu);
    } else p->leaf = nt_retain(p->param);
  }
  nt_set_grad_enabled(prev0);
  for (int i = 0; i < R.nb; i++) R.b[i].pending = 0;   /* missing gradients reduce as zeros */
  if (R.on_device) {
    R.finishing = 1;                        /* offload's copies issued from here on count as after backward */
    enqueue_upto(R.nb);
    if (!R.failed && R.view.world > 1 && dn_join(&R.view)) { R.failed = 1; snprintf(R.err, sizeof R.err, "%s", R.view.err); }
    if (!R.failed && copy_slices_upto(R.nb)) { R.failed = 1; snprintf(R.err, sizeof R.err, "%s", R.view.err); }
    R.finishing = 0;
  } else {
    launch_upto(R.nb);
    nbD_reducer_drain();
    if (R.off_slices && !R.off_alias && !R.failed) R.off_next = R.nb;   /* the thread copied every slice */
    nbD_offload_count_host((size_t)R.off_hostb); R.off_hostb = 0;
  }
  int rc = close_pass("dist.data_parallel: averaging gradients failed");
  double scale = 1.0 / (double)R.view.world;
  bool prev = nt_set_grad_enabled(false);
  for (int j = 0; j < R.np; j++) {
    Param *p = &R.p[j];
    nt_Tensor *leaf = p->leaf;
    p->leaf = NULL;
    if (!leaf) continue;
    if (ok && !rc) {
      Bucket *b = &R.b[p->bucket];
      int64_t len = p->numel;
      nt_Tensor *flat = R.on_device ? device_slice(b, p)
                                    : nt_from_buffer((char *)b->buf + p->pos * b->esize, b->rdt == DR_F64 ? NT_F64 : NT_F32, &len, 1,
                                                     b->rdt == DR_F64 ? NT_F64 : NT_F32);
      nt_Tensor *avg = flat ? nt_binary_scalar(NT_OP_MUL, flat, scale, false) : NULL, *shaped = avg ? nt_reshape(avg, leaf->shape, leaf->ndim) : NULL;
      nt_Tensor *typed = shaped ? nt_to_dtype(shaped, leaf->dtype) : NULL, *dev = typed ? nt_to_device(typed, leaf->device) : NULL;
      if (!dev || nt_set_grad(leaf, dev)) rc = -1;
      nt_release(flat); nt_release(avg); nt_release(shaped); nt_release(typed); nt_release(dev);
      /* stage 1's offload: the host slices are of this .grad; step() checks it is still the one */
      if (!rc && R.off_slices && p->lay >= 0 && leaf == p->param) { p->off_grad = nt_retain(leaf->grad); p->off_ver = leaf->grad->storage->version; }
    }
    nt_release(leaf);
  }
  nt_set_grad_enabled(prev);
  R.off_ready = R.off_slices && !R.off_alias && ok && !rc && R.off_next == R.nb;   /* every slice copied (the last pass carries the sum) */
  return rc;
}

static const nt_GradHooks hooks = { on_ready, on_finish, NULL };

static void clear_layout(void) {
  if (R.off_host) {                          /* the side stream's copies read the device shards: the compute stream waits for them first */
    (void)nbD_offload_device_wait();
    for (int i = 0; i < R.nl; i++) nt_release(R.off_host[i]);
    free(R.off_host); R.off_host = NULL; R.off_ready = 0;
  }
  for (int j = 0; j < R.np; j++) { nt_release(R.p[j].leaf); nt_release(R.p[j].param); nt_release(R.p[j].off_grad); }
  for (int i = 0; i < R.nb; i++) { free(R.b[i].buf); nt_release(R.b[i].dev); }
  for (int i = 0; i < R.nl; i++) { free(R.l[i].shard); nt_release(R.l[i].dshard); }
  free(R.p); free(R.b); free(R.l);
  R.p = NULL; R.b = NULL; R.l = NULL; R.np = R.nb = R.nl = 0; R.hint = 0; R.in_pass = 0; R.on_device = 0;
  R.shard_mode = 0; R.shard_passes = 0; R.shard_bad = 0; R.shard_world = 0;
  R.off_slices = 0; R.off_next = 0; R.off_alias = 0; R.off_hostb = 0;
}

void nbD_reducer_clear(void) {
  if (!R.registered) return;
  nbD_reducer_drain();
  if (R.on_device && R.launched > 0 && R.in_pass && dn_on(&R.view)) dn_join(&R.view);   /* NCCL may still use the buckets: order their release after it */
  const nt_GradHooks *cur = nt_set_grad_hooks(NULL);
  if (cur != &hooks) nt_set_grad_hooks(cur);   /* someone else's hooks are on top: leave them */
  clear_layout();
  R.registered = 0;
  R.sync = 1;
}

/* Buckets live on the GPU and go to NCCL when the backend is nccl and every
** parameter that is averaged is a CUDA tensor; anything else keeps the host
** buckets and the ring (the ring path is unchanged). */
static int all_cuda(nt_Tensor **params, int n) {
  int any = 0;
  for (int k = 0; k < n; k++) {
    if (!nt_dtype_is_float(params[k]->dtype)) continue;
    if (params[k]->device != NT_CUDA) return 0;
    any = 1;
  }
  return any;
}
static int on_device_reducible(nt_Tensor **params, int n) { return dn_on(nbD_self.g) && all_cuda(params, n); }

/* the size of group id (-1: it cannot be entered) */
static int group_world(int id) {
  nbD_Scope sc;
  if (nbD_group_enter(id, &sc)) return -1;
  int w = nbD_self.g->world;
  nbD_group_leave(&sc);
  return w;
}

int nbD_reducer_register(nt_Tensor **params, int n, size_t bucket_bytes, int group) {
  nbD_reducer_clear();
  if (!nbD_self.g) { nt_error_set("dist.data_parallel: not running on a dist worker"); return -1; }
  R.p = calloc((size_t)(n ? n : 1), sizeof *R.p);
  R.b = calloc((size_t)(n ? n : 1), sizeof *R.b);
  if (!R.p || !R.b) { clear_layout(); nt_error_set("out of memory"); return -1; }
  for (int k = n - 1; k >= 0; k--) {          /* reverse order: backward's order */
    nt_Tensor *t = params[k];
    if (!nt_dtype_is_float(t->dtype)) continue;
    int rdt = t->dtype == NT_F64 ? DR_F64 : DR_F32;
    size_t es = rdt == DR_F64 ? 8 : 4;
    Bucket *b = R.nb ? &R.b[R.nb - 1] : NULL;
    if (!b || b->rdt != rdt || (b->count && (b->count + (size_t)t->numel) * es > bucket_bytes)) {
      b = &R.b[R.nb++];
      b->rdt = rdt; b->esize = es; b->p0 = R.np;
    }
    Param *p = &R.p[R.np++];
    p->storage = t->storage; p->offset = t->offset; p->numel = t->numel;
    p->param = nt_retain(t); p->lay = -1;
    p->bucket = (int)(b - R.b); p->pos = b->count;
    b->count += (size_t)t->numel;
    b->nparams++;
  }
  /* a group of one needs no collective: CUDA buckets stay on the device
  ** without NCCL (as in shard mode below; one GPU never stages its
  ** gradients through the host) */
  R.on_device = on_device_reducible(params, n) || (all_cuda(params, n) && group_world(group) == 1);
  for (int i = 0; i < R.nb; i++) {
    Bucket *b = &R.b[i];
    int64_t len = (int64_t)b->count;
    if (R.on_device) b->dev = nt_zeros(&len, 1, b->rdt == DR_F64 ? NT_F64 : NT_F32, NT_CUDA);
    else b->buf = malloc(b->count * b->esize + 1);
    if (!b->buf && !b->dev) {
      if (!R.on_device) nt_error_set("out of memory");   /* nt_zeros said why otherwise */
      clear_layout();
      return -1;
    }
  }
  if (!R.th_up) {
    R.stop = 0;
    if (pthread_create(&R.th, NULL, comm_main, NULL)) { clear_layout(); nt_error_set("dist.data_parallel: cannot start the communication thread"); return -1; }
    R.th_up = 1;
  }
  R.reg_id = ++R.next_id;
  R.group = group;
  R.registered = 1;
  R.sync = 1;
  nt_set_grad_hooks(&hooks);
  return (int)R.reg_id;
}

/* Shard mode (ZeRO stage 2).  Layout i holds params[i][0..counts[i]) laid
** end to end (chunk[i] elements per group position, rdt[i] DR_F32/DR_F64).
** Buckets are formed in reverse parameter order inside each layout, so each
** one is a contiguous flat range; when its last gradient arrives it is
** reduce-scattered along the positions' chunk boundaries on the thread, each
** rank adding its piece to its layout's shard.  The parameters' .grad are
** dropped as they are copied into a bucket. */
int nbD_reducer_register_shards(nt_Tensor **params, const int *counts, const int64_t *chunks, const int *rdts, int nl,
                                size_t bucket_bytes, int group) {
  nbD_reducer_clear();
  if (!nbD_self.g) { nt_error_set("dist.zero: not running on a dist worker"); return -1; }
  int n = 0;
  for (int i = 0; i < nl; i++) n += counts[i];
  R.p = calloc((size_t)(n ? n : 1), sizeof *R.p);
  R.b = calloc((size_t)(n ? n : 1), sizeof *R.b);
  R.l = calloc((size_t)(nl ? nl : 1), sizeof *R.l);
  if (!R.p || !R.b || !R.l) { clear_layout(); nt_error_set("out of memory"); return -1; }
  R.shard_mode = 1;
  R.nl = nl;
  /* a group of one needs no collective: its CUDA buckets and shard stay on
  ** the device without NCCL too (reduce_scatter_bucket_device calls none at
  ** world 1) -- one GPU, e.g. with offload="optimizer", never stages
  ** gradients through the host */
  R.on_device = on_device_reducible(params, n) || (all_cuda(params, n) && group_world(group) == 1);
  int base = 0;
  for (int i = 0; i < nl; i++) {
    Lay *L = &R.l[i];
    L->rdt = rdts[i]; L->esize = rdts[i] == DR_F64 ? 8 : 4; L->chunk = chunks[i];
    int64_t off = 0;
    for (int k = 0; k < counts[i]; k++) off += params[base + k]->numel;
    L->total = off;
    L->dev = counts[i] ? params[base]->device : NT_CPU;
    if (R.on_device) {
      int64_t len = L->chunk > 0 ? L->chunk : 1;
      if (!(L->dshard = nt_zeros(&len, 1, L->rdt == DR_F64 ? NT_F64 : NT_F32, NT_CUDA))) { clear_layout(); return -1; }
    } else if (!(L->shard = calloc((size_t)(L->chunk > 0 ? L->chunk : 1), L->esize))) { clear_layout(); nt_error_set("out of memory"); return -1; }
    Bucket *b = NULL;
    for (int k = counts[i] - 1; k >= 0; k--) {   /* reverse order: backward's order */
      nt_Tensor *t = params[base + k];
      off -= t->numel;
      if (!b || (b->count && (b->count + (size_t)t->numel) * L->esize > bucket_bytes)) {
        b = &R.b[R.nb++];
        b->rdt = L->rdt; b->esize = L->esize; b->lay = i; b->hi = off + t->numel; b->p0 = R.np;
      }
      Param *p = &R.p[R.np++];
      p->storage = t->storage; p->offset = t->offset; p->numel = t->numel;
      p->param = nt_retain(t); p->flat = off; p->lay = -1;
      p->bucket = (int)(b - R.b);
      b->count += (size_t)t->numel;
      b->lo = off;
      b->nparams++;
    }
    base += counts[i];
  }
  for (int j = 0; j < R.np; j++) R.p[j].pos = (size_t)(R.p[j].flat - R.b[R.p[j].bucket].lo);
  if (!R.th_up) {
    R.stop = 0;
    if (pthread_create(&R.th, NULL, comm_main, NULL)) { clear_layout(); nt_error_set("dist.zero: cannot start the communication thread"); return -1; }
    R.th_up = 1;
  }
  R.reg_id = ++R.next_id;
  R.group = group;
  R.registered = 1;
  R.sync = 1;
  nt_set_grad_hooks(&hooks);
  return (int)R.reg_id;
}

/* the averaged gradient shards of the passes since the last take (one new
** tensor per layout, or all NULL with 0 returned when registration `id` is
** not the current one or no pass ran); the accumulators restart at zero */
int nbD_reducer_take_shards(unsigned id, nt_Tensor **out) {
  if (!R.registered || !R.shard_mode || R.reg_id != id || !R.shard_passes) return 0;
  if (R.shard_bad) {
    nt_error_set("dist.zero: a failed backward left the gradient shards incomplete (call z.zero_grad() and run the step again)");
    return -1;
  }
  nbD_reducer_drain();
  double scale = 1.0 / (double)R.shard_world;
  bool prev = nt_set_grad_enabled(false);
  int rc = 1;
  for (int i = 0; i < R.nl; i++) out[i] = NULL;
  for (int i = 0; i < R.nl && rc > 0; i++) {
    Lay *L = &R.l[i];
    int64_t len = L->chunk;
    nt_DType dt = L->rdt == DR_F64 ? NT_F64 : NT_F32;
    nt_Tensor *sum = L->dshard ? nt_retain(L->dshard) : nt_from_buffer(L->shard, dt, &len, 1, dt);
    nt_Tensor *avg = sum ? nt_binary_scalar(NT_OP_MUL, sum, scale, false) : NULL;
    /* on the parameters' device (ring: the host accumulator goes back to the GPU) */
    out[i] = avg && avg->device != L->dev ? nt_to_device(avg, L->dev) : nt_retain(avg);
    /* offload under the ring: the average is host memory already -- it goes
    ** to the pinned host shard as it is, no device->host copy */
    if (out[i] && R.off_host && !L->dshard) {
      size_t nb = (size_t)L->chunk * L->esize;
      memcpy(nt_base(R.off_host[i]), nt_base(avg), nb);
      nbD_offload_count_host(nb);
    }
    nt_release(sum); nt_release(avg);
    if (!out[i]) rc = -1;
  }
  nt_set_grad_enabled(prev);
  /* offload: the host waits for the per-bucket copies (the update reads
  ** them) before the device shards are zeroed */
  if (rc > 0 && R.off_host && R.off_ready) {
    if (nbD_offload_host_wait()) rc = -1;
    else R.off_waited = 1;
  } else if (rc > 0 && R.off_host && !R.on_device) R.off_ready = R.off_waited = 1;   /* the ring's: copied just above */
  R.off_averaged = !R.on_device;            /* the ring's copies are the averages already; the device's sums */
  if (rc < 0) { for (int i = 0; i < R.nl; i++) { nt_release(out[i]); out[i] = NULL; } return -1; }
  nbD_reducer_zero_shards(id);
  return 1;
}

void nbD_reducer_zero_shards(unsigned id) {
  if (!R.registered || !R.shard_mode || R.reg_id != id) return;
  nbD_reducer_drain();
  if (R.off_host) (void)nbD_offload_device_wait();   /* copies of the device shards in flight finish before the zeroing */
  for (int i = 0; i < R.nl; i++) {
    if (R.l[i].dshard) (void)nt_fill_(R.l[i].dshard, 0);   /* fails only with the device gone: take() then says so */
    else memset(R.l[i].shard, 0, (size_t)R.l[i].chunk * R.l[i].esize);
  }
  R.shard_passes = 0; R.shard_bad = 0;
}

int nbD_reducer_shard_count(void) { return R.registered && R.shard_mode ? R.nl : 0; }

int nbD_reducer_on_device(void) { return R.registered && R.on_device; }

int nbD_reducer_set_sync(int on) { int prev = R.sync; R.sync = on; return prev; }
int nbD_reducer_syncing(void) { return R.sync; }

void nbD_reducer_stats(int64_t *nparams, int64_t *nbuckets, int64_t *passes, int64_t *overlapped, int64_t *total) {
  *nparams = R.np; *nbuckets = R.nb; *passes = R.passes; *overlapped = R.buckets_overlapped; *total = R.buckets_total;
}

void nbD_reducer_shutdown(void) {
  nbD_reducer_clear();
  nbD_zero_shutdown();
  if (!R.th_up) return;
  pthread_mutex_lock(&R.mu);
  R.stop = 1;
  pthread_cond_broadcast(&R.cv);
  pthread_mutex_unlock(&R.mu);
  pthread_join(R.th, NULL);
  R.th_up = 0;
  free(R.fd); R.fd = NULL;
}

/* offload's host copies of registration id dropped (z.zero_grad) */
void nbD_reducer_drop_host(unsigned id) {
  if (!R.registered || R.reg_id != id) return;
  R.off_ready = 0;
  for (int j = 0; j < R.np; j++) { nt_release(R.p[j].off_grad); R.p[j].off_grad = NULL; }
}

/* ---- builtins of offload (the others: ddpbuiltins.c) ---------------------------- */
#define TV(v) ((nt_Tensor *)(v).u.p)
/* stage 1's offload: layout i of lays (a list of tensor lists, laid end to
** end) has hosts[i]'s chunk per group position; every parameter of the
** registration that is a layout's tensor learns its place there.  0: set;
** 1: not possible (a tensor not registered, or reduced in another dtype than
** its layout's: step() then copies after backward); -1 + error */
static int place_layouts(nb_VM *vm, const char *f, nb_Value lv, nb_List *hosts) {
  if (lv.t != NB_TLIST || nb_list(lv)->n != hosts->n) return nb_error_kind(vm, "TypeError", "%s: stage 1 needs its layouts: a list of %d tensor lists", f, hosts->n), -1;
  nb_List *ls = nb_list(lv);
  for (int j = 0; j < R.np; j++) { R.p[j].lay = -1; if (R.p[j].param->device != NT_CUDA) return 1; }
  for (int i = 0; i < ls->n; i++) {
    if (ls->items[i].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: layout %d is not a list", f, i), -1;
    nb_List *l = nb_list(ls->items[i]);
    int rdt = TV(hosts->items[i])->dtype == NT_F64 ? DR_F64 : DR_F32;
    int64_t off = 0;
    for (int k = 0; k < l->n; k++) {
      if (l->items[k].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: layout %d item %d is not a tensor", f, i, k), -1;
      nt_Tensor *t = TV(l->items[k]);
      int found = 0;
      for (int j = 0; j < R.np; j++) {
        Param *p = &R.p[j];
        if (p->storage != (void *)t->storage || p->offset != t->offset || p->numel != t->numel) continue;
        if (R.b[p->bucket].rdt != rdt) return 1;
        p->lay = i; p->flat = off; found = 1;
      }
      if (!found) return 1;
      off += t->numel;
    }
  }
  return 0;
}

/* dist_reducer_offload(id, hosts, lays=nil): registration id's gradient
** shards for the host update go into hosts (pinned host tensors, one per
** layout: chunk elements of its dtype) as soon as they are final: stage 2
** (shard mode): per bucket during backward where the buckets are on the
** device; under the ring (host shards) take() writes its host average there.
** Stage 1 (data_parallel's buckets; lays: the layouts' tensors): this rank's
** slice of each bucket as soon as it is all-reduced (device buckets: copied
** on the side stream; host buckets: by the ring's thread).  True for a CUDA
** model, else false and nothing is kept. */
static int b_offload(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_reducer_offload";
  if (a[0].t != NB_TNUM || a[1].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a registration id and a list of host tensors", f);
  *out = nb_bool(false);
  if (!R.registered || R.reg_id != (unsigned)a[0].u.n || nbD_offload_after_backward() || R.in_pass) return NB_OK;
  if (R.shard_mode && (!R.nl || R.l[0].dev != NT_CUDA)) return NB_OK;
  nb_List *l = nb_list(a[1]);
  if (R.shard_mode && l->n != R.nl) return nb_error_kind(vm, "ValueError", "%s: %d host tensors for %d layouts", f, l->n, R.nl);
  for (int i = 0; i < l->n; i++) {
    if (l->items[i].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: item %d is not a tensor", f, i);
    nt_Tensor *h = TV(l->items[i]);
    int f64 = R.shard_mode ? R.l[i].rdt == DR_F64 : h->dtype == NT_F64;
    if (h->device != NT_CPU || !nt_is_contiguous(h) || (R.shard_mode && h->numel != R.l[i].chunk) || h->dtype != (f64 ? NT_F64 : NT_F32))
      return nb_error_kind(vm, "ValueError", "%s: host tensor %d must be a contiguous cpu %s tensor%s", f, i, f64 ? "f64" : "f32",
                           R.shard_mode ? " of its layout's chunk" : "");
  }
  if (!R.shard_mode) {                      /* stage 1: a layout per host tensor, no shards */
    int st = place_layouts(vm, f, a[2], l);
    if (st) return st < 0 ? NB_ERR : NB_OK;
    Lay *L = calloc((size_t)l->n + 1, sizeof *L);
    if (!L) return nb_error(vm, "out of memory");
    for (int i = 0; i < l->n; i++) {
      nt_Tensor *h = TV(l->items[i]);
      L[i].rdt = h->dtype == NT_F64 ? DR_F64 : DR_F32; L[i].esize = nt_dtype_size(h->dtype); L[i].chunk = h->numel; L[i].dev = NT_CUDA;
    }
    if (R.off_host) (void)nbD_offload_device_wait();
    for (int i = 0; i < R.nl && R.off_host; i++) nt_release(R.off_host[i]);
    free(R.off_host); R.off_host = NULL;
    free(R.l); R.l = L; R.nl = l->n; R.off_slices = 1;
  }
  if (R.off_host) { for (int i = 0; i < R.nl; i++) nt_release(R.off_host[i]); free(R.off_host); }
  R.off_host = calloc((size_t)R.nl, sizeof *R.off_host);
  if (!R.off_host) { R.off_slices = 0; return nb_error(vm, "out of memory"); }
  for (int i = 0; i < R.nl; i++) { R.off_host[i] = nt_retain(TV(l->items[i])); R.l[i].hbase = nt_base(R.off_host[i]); }
  R.off_ready = 0;
  *out = nb_bool(true);
  return NB_OK;
}

/* stage 1: whether every parameter's .grad is still the one the slices were
** copied from (step() must not use them if .grad was replaced or written) */
static int slices_current(void) {
  for (int j = 0; j < R.np; j++) {
    const Param *p = &R.p[j];
    if (p->lay < 0) continue;
    if (p->param->grad != p->off_grad || (p->off_grad && p->off_grad->storage->version != p->off_ver)) return 0;
  }
  return 1;
}
/* stage 1, f16/bf16 parameters: .grad holds the average rounded to the
** parameter's dtype, which is what step() would have cut; the host slices
** are rounded alike.  0, or -1 + error */
static int round_slices(void) {
  for (int j = 0; j < R.np; j++) {
    const Param *p = &R.p[j];
    int64_t s, e, lo;
    if (p->lay < 0 || (p->param->dtype != NT_F16 && p->param->dtype != NT_BF16) || R.l[p->lay].rdt != DR_F32 || !slice_piece(p, &s, &e, &lo)) continue;
    float *h = (float *)R.l[p->lay].hbase + (s - lo);
    int64_t len = e - s;
    nt_Tensor *lowp = nt_from_buffer(h, NT_F32, &len, 1, p->param->dtype), *back = lowp ? nt_to_dtype(lowp, NT_F32) : NULL, *c = back ? nt_contiguous(back) : NULL;
    if (c) memcpy(h, nt_base(c), (size_t)len * sizeof(float));
    nt_release(lowp); nt_release(back); nt_release(c);
    if (!c) return -1;
  }
  return 0;
}

/* dist_reducer_take_host(id): the host copies of the averaged gradient
** shards when the last pass copied every piece (the sums averaged in place),
** or nil: step() copies the shards itself.  Stage 2: after dist_reducer_take
** (whose host wait covered the copies); stage 1: the host waits here, and
** only while every .grad is still the one averaged by that pass. */
static int b_take_host(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_reducer_take_host";
  if (a[0].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: expected a registration id", f);
  *out = nb_nil();
  if (!R.registered || R.reg_id != (unsigned)a[0].u.n || !R.off_host || !R.off_ready) return NB_OK;
  if (R.shard_mode && !R.off_waited) return NB_OK;
  if (!R.shard_mode) {
    if (nbD_offload_host_wait()) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
    if (!slices_current()) { R.off_ready = 0; return NB_OK; }
    R.off_averaged = 0;
  }
  R.off_ready = R.off_waited = 0;
  nb_List *l = nbL_new(R.nl);
  if (!l) return nb_error(vm, "out of memory");
  int w = R.shard_mode ? R.shard_world : R.view.world;
  double scale = 1.0 / (double)(w > 0 ? w : 1);
  for (int i = 0; i < R.nl; i++) {
    nt_Tensor *h = R.off_host[i];
    if (scale != 1.0 && !R.off_averaged) {  /* the device shard's average, taken on the host */
      if (h->dtype == NT_F64) { double *d = nt_data_ptr(h); for (int64_t k = 0; k < h->numel; k++) d[k] *= scale; }
      else { float *d = nt_data_ptr(h); float s1 = (float)scale; for (int64_t k = 0; k < h->numel; k++) d[k] *= s1; }
    }
    nt_bump_version(h);
    nbL_push(l, nb_obj(NB_TTENSOR, nt_retain(h)));
  }
  if (!R.shard_mode && round_slices()) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static nb_Builtin offload_builtins[] = {
  { "dist_reducer_offload", b_offload, "id, hosts, lays=nil", "dist_reducer_offload(id, hosts, lays=nil): offload=\"optimizer\": the gradient shards go into hosts (pinned, one per layout): each bucket's piece of a device shard copied on a side stream as soon as it is summed during backward, or the ring's host shard taken as it is; stage 1 (lays: the layouts' tensor lists): this rank's slice of each bucket as soon as it is all-reduced; false (nothing kept) for a model not on CUDA or with NABLA_OFFLOAD_AFTER_BACKWARD set" },
  { "dist_reducer_take_host", b_take_host, "id", "dist_reducer_take_host(id): the averaged gradient shards in host memory, copied during the last backward, or nil when they were not (stage 2: after dist_reducer_take, which waits for the copies in flight; stage 1: waits for them, nil when a .grad changed since)" },
  { NULL, NULL, NULL, NULL },
};
void nbD_reducer_init(void) { nbC_register(offload_builtins); nbD_reducer_builtins_init(); }
