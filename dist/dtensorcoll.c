/*
** dtensorcoll.c — collectives on tensors, differentiable where it makes sense:
**   all_reduce(sum)  backward: all_reduce(g, sum)     (avg: all_reduce(g, avg))
**   all_gather       backward: this rank's rows of reduce_scatter(g, sum)
**   reduce_scatter   backward: all_gather(g)          (avg: / world)
** The backward collectives run on every rank because SPMD code builds the same
** graph everywhere (a rank that skips backward leaves the others waiting
** until the timeout).  broadcast/send/recv/all_to_all are not recorded.
**
** Each collective picks its transport by the tensor's device (path_of):
**   P_HOST    a CPU tensor: the ring (TCP, or shared memory) on its memory
**   P_NCCL    a CUDA tensor when the group runs NCCL (dnccl.c): on device memory
**   P_STAGED  a CUDA tensor under the ring: device -> the module's pinned
**             staging buffer -> ring -> device (nt_cuda_staging; no CPU tensors)
** Every rank must pass tensors on the same kind of device (SPMD).  Results
** are on the input's device.  Point to point and broadcast send a header
** over TCP first (dtype, shape, the sender's device, whether the data
** follows on NCCL), so a receiver allocates on the sender's kind of device
** (a CPU tensor when it has no CUDA) and reads the data from the right
** transport.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor/textend.h"
#include "tensor/tdevice.h"
#include "dist/dtensorcoll.h"
#include "dist/dgroup.h"
#include "dist/dnccl.h"
#include "dist/ddataparallel.h"
#include "dist/ddesync.h"
#include "dist/dchan.h"

#define G (nbD_self.g)

static int backend_err(const char *what) { (void)what; nt_error_set("%s", G->err); return -1; }

enum { P_HOST, P_STAGED, P_NCCL };
static int path_of(nt_Device dev) { return dev != NT_CUDA ? P_HOST : dn_on(G) ? P_NCCL : P_STAGED; }
static size_t nbytes_of(const nt_Tensor *t) { return (size_t)t->numel * nt_dtype_size(t->dtype); }

/* a fresh contiguous copy, on x's device, in a dtype the ring can reduce */
static nt_Tensor *work_copy(nt_Tensor *x, int *rdt) {
  nt_DType dt = x->dtype, wd;
  switch (dt) {
  case NT_F32: wd = NT_F32; *rdt = DR_F32; break;
  case NT_F64: wd = NT_F64; *rdt = DR_F64; break;
  case NT_I32: wd = NT_I32; *rdt = DR_I32; break;
  case NT_F16: case NT_BF16: wd = NT_F32; *rdt = DR_F32; break;
  default: wd = NT_I64; *rdt = DR_I64; break;
  }
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *d = nt_detach(x), *c = NULL;
  if (d) {
    nt_Tensor *t = nt_to_dtype(d, wd);
    if (t) { c = nt_clone(t); nt_release(t); }
    nt_release(d);
  }
  nt_set_grad_enabled(prev);
  return c;
}
/* back to x's dtype (and device) */
static nt_Tensor *finish(nt_Tensor *y, nt_Tensor *like) {
  if (!y) return NULL;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *r = y;
  if (r->dtype != like->dtype && !(nt_dtype_is_float(r->dtype) && !nt_dtype_is_float(like->dtype))) { r = nt_to_dtype(y, like->dtype); nt_release(y); }
  if (r && r->device != like->device) { nt_Tensor *d = nt_to_device(r, like->device); nt_release(r); r = d; }
  nt_set_grad_enabled(prev);
  return r;
}

static int need_group(void) {
  nbD_reducer_drain();   /* data_parallel's buckets in flight use the same links */
  if (!G) { nt_error_set("not running on a dist worker (run it with dist.exec/dist.run, or nabla run -n N)"); return -1; }
  return 0;
}
static const char *const op_names[] = { "op=sum", "op=avg", "op=max", "op=min" };
/* need_group, then the desync check (ddesync.h) with this call's signature */
static int need_group_sig(const char *call, const char *arg, const nt_Tensor *x, int shape_from) {
  if (need_group()) return -1;
  if (nbD_group_shm_prepare()) return backend_err(call);
  char d[160];
  dd_describe(d, sizeof d, call, arg, x, shape_from);
  return dd_check(G, d) ? backend_err(call) : 0;
}

/* ---- the transports on a contiguous tensor's bytes -------------------------- */
/* in place over every rank (y contiguous, dtype matching rdt) */
/* y is always a working copy (work_copy, a concat of them): the kernel that
** made it refused an input whose GPU work failed (textend.h nt_dev_check) */
static int ar_tensor(nt_Tensor *y, int rdt, int rop) {
  char *p = nt_base(y);
  size_t n = (size_t)y->numel, nb = nbytes_of(y);
  switch (path_of(y->device)) {
  case P_NCCL: return dn_all_reduce(G, p, n, rdt, rop) ? backend_err("all_reduce") : 0;
  case P_STAGED: {
    void *h = nt_cuda_staging(nb);
    if (!h || nt_cuda_to_host(h, p, nb)) return -1;
    if (dr_all_reduce(G, h, n, rdt, rop)) return backend_err("all_reduce");
    return nt_cuda_to_device(p, h, nb);
  }
  default: return dr_all_reduce(G, p, n, rdt, rop) ? backend_err("all_reduce") : 0;
  }
}
/* rank src's bytes of t into every rank's t; path: the transport the source chose */
static int bcast_tensor(nt_Tensor *t, int src, int path) {
  /* the source may send the caller's own tensor (broadcast_ in place): its
  ** raw bytes must not go out if its GPU work failed (textend.h) */
  if (G->rank == src && nt_dev_check(t, "broadcast")) return -1;
  char *p = nt_base(t);
  size_t nb = nbytes_of(t);
  if (path == P_NCCL) return dn_broadcast(G, p, nb, src) ? backend_err("broadcast") : 0;
  if (t->device == NT_CUDA) {
    void *h = nt_cuda_staging(nb);
    if (!h || (G->rank == src && nt_cuda_to_host(h, p, nb))) return -1;
    if (dr_broadcast(G, h, nb, src)) return backend_err("broadcast");
    return G->rank == src ? 0 : nt_cuda_to_device(p, h, nb);
  }
  return dr_broadcast(G, p, nb, src) ? backend_err("broadcast") : 0;
}
/* sends s to dst and/or receives r from src (either NULL) over `path` */
static int p2p_tensor(int dst, nt_Tensor *s, int src, nt_Tensor *r, int path) {
  /* s may be the caller's own tensor (dev_contig copies only a strided one) */
  if (s && nt_dev_check(s, "send")) return -1;
  char *sp = s ? nt_base(s) : NULL, *rp = r ? nt_base(r) : NULL;
  size_t sn = s ? nbytes_of(s) : 0, rn = r ? nbytes_of(r) : 0;
  if (!s) dst = -1;
  if (!r) src = -1;
  if (path == P_NCCL) return dn_sendrecv(G, dst, sp, sn, src, rp, rn) ? backend_err("send/recv") : 0;
  int sdev = s && s->device == NT_CUDA, rdev = r && r->device == NT_CUDA;
  char *h = (sdev || rdev) ? nt_cuda_staging(sn + rn) : NULL;
  if ((sdev || rdev) && !h) return -1;
  if (sdev) { if (nt_cuda_to_host(h, sp, sn)) return -1; sp = h; }
  char *rbuf = rdev ? h + sn : rp;
  if (dr_sendrecv(G, dst, sp, sn, src, rbuf, rn)) return backend_err("send/recv");
  return rdev ? nt_cuda_to_device(rp, rbuf, rn) : 0;
}

/* ------------------------------------------------------------ all_reduce */
static int ar_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nbD_Scope sc;   /* the group the forward ran on (dgroup.c) */
  if (nbD_group_enter((int)n->iarg[1], &sc)) return -1;
  gin[0] = nbD_all_reduce(g, (int)n->iarg[0]);
  nbD_group_leave(&sc);
  return gin[0] ? 0 : -1;
}

static int rop_of(int op) { return op == NBD_MAX ? DR_MAX : op == NBD_MIN ? DR_MIN : DR_SUM; }

/* y / world (the avg of a sum), grad off; releases y */
static nt_Tensor *div_world(nt_Tensor *y, int w) {
  if (!y) return NULL;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *a = nt_binary_scalar_ex(NT_OP_DIV, y, (double)w, NT_SCALAR_FLOAT);
  nt_set_grad_enabled(prev);
  nt_release(y);
  return a;
}

nt_Tensor *nbD_all_reduce(nt_Tensor *x, int op) {
  if (need_group_sig("all_reduce", op_names[op & 3], x, 0)) return NULL;
  int rdt;
  nt_Tensor *y = work_copy(x, &rdt);
  if (!y) return NULL;
  if (ar_tensor(y, rdt, rop_of(op))) { nt_release(y); return NULL; }
  if (op == NBD_AVG && !(y = div_world(y, G->world))) return NULL;
  y = finish(y, x);
  if (y && (op == NBD_SUM || op == NBD_AVG) && nt_needs_grad(1, &x)) {
    nt_Node *n = nt_record(y, "AllReduceBackward", ar_backward, 1, &x);
    if (!n) { nt_release(y); return NULL; }
    n->iarg[0] = op; n->iarg[1] = nbD_group_current(); n->niarg = 2;
  }
  return y;
}

/* ------------------------------------------------------------ row splits */
static int64_t rowsize(nt_Tensor *x) { return x->ndim ? (x->shape[0] ? x->numel / x->shape[0] : 0) : 1; }

/* reduce_scatter over given row counts (rows[w]); returns this rank's rows */
static nt_Tensor *rs_rows(nt_Tensor *x, const int64_t *rows, int op);
static nt_Tensor *ag_rows(nt_Tensor *x, int64_t *rows_out_or_null, int op_scale_avg);

typedef struct { int64_t *rows; int w; } RowsCtx;
static void rows_free(void *p) { RowsCtx *c = p; free(c->rows); free(c); }

static int ag_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  RowsCtx *c = n->ctx;
  nbD_Scope sc;
  if (nbD_group_enter((int)n->iarg[0], &sc)) return -1;
  /* like every collective: wait for communication in flight on the same
  ** links (reducer buckets, stage 3's prefetches, isends -- a backward runs
  ** from autograd, not through dcoll.c's builtins, which drain those), then
  ** the desync check; the backward runs on every rank, so signatures agree */
  nbD_async_drain();
  gin[0] = need_group_sig("all_gather backward", NULL, g, 0) ? NULL : rs_rows(g, c->rows, NBD_SUM);
  nbD_group_leave(&sc);
  if (gin[0] && n->in[0]->ndim == 0) {   /* a 0-d input was gathered as one row */
    nt_Tensor *s = nt_reshape(gin[0], NULL, 0); nt_release(gin[0]); gin[0] = s;
  }
  return gin[0] ? 0 : -1;
}
static int rs_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nbD_Scope sc;
  if (nbD_group_enter((int)n->iarg[1], &sc)) return -1;
  /* as in ag_backward; g holds this rank's rows, whose count may differ by
  ** rank (the signature's shape from dim 1) */
  nbD_async_drain();
  gin[0] = need_group_sig("reduce_scatter backward", NULL, g, 1) ? NULL : ag_rows(g, NULL, (int)n->iarg[0] == NBD_AVG);
  nbD_group_leave(&sc);
  return gin[0] ? 0 : -1;
}

/* dst[rows off .. off + src rows) = src (same device; any device), grad off */
static int copy_rows(nt_Tensor *dst, int64_t off, nt_Tensor *src) {
  bool prev = nt_set_grad_enabled(false);
  int64_t rows = src->ndim ? src->shape[0] : 1;
  nt_Tensor *v = nt_narrow(dst, 0, off, rows), *s = v ? nt_reshape(src, v->shape, v->ndim) : NULL;
  int st = s ? nt_copy_(v, s) : -1;
  nt_release(s); nt_release(v);
  nt_set_grad_enabled(prev);
  return st;
}

/* all_gather along axis 0 (rows may differ per rank; the rest of the shape must match) */
static nt_Tensor *ag_rows(nt_Tensor *x, int64_t *rows_out, int scale_avg) {
  int w = G->world, r = G->rank;
  int64_t myrows = x->ndim ? x->shape[0] : 1, rs = rowsize(x);
  /* exchange row counts and the trailing shape (to check it) */
  int64_t *hdr = calloc((size_t)w * 10, sizeof(int64_t));
  if (!hdr) { nt_error_set("out of memory"); return NULL; }
  hdr[r * 10] = myrows; hdr[r * 10 + 1] = x->ndim; hdr[r * 10 + 2] = x->dtype;
  for (int i = 1; i < x->ndim && i < 8; i++) hdr[r * 10 + 2 + i] = x->shape[i];
  size_t *cnt = calloc((size_t)w, sizeof(size_t));
  if (!cnt) { free(hdr); nt_error_set("out of memory"); return NULL; }
  for (int i = 0; i < w; i++) cnt[i] = 10;
  if (dr_all_gather(G, hdr, cnt, 8)) { free(hdr); free(cnt); backend_err("all_gather"); return NULL; }
  int64_t total = 0;
  for (int i = 0; i < w; i++) {
    if (memcmp(hdr + i * 10 + 1, hdr + r * 10 + 1, 9 * sizeof(int64_t)) != 0) {
      free(hdr); free(cnt);
      nt_error_set("all_gather: rank %d has a tensor of another dtype or trailing shape than rank %d", i, r);
      return NULL;
    }
    total += hdr[i * 10];
  }
  int rdt;
  nt_Tensor *xc = work_copy(x, &rdt);
  if (!xc) { free(hdr); free(cnt); return NULL; }
  int64_t shape[NT_MAXDIM]; int nd = x->ndim ? x->ndim : 1;
  shape[0] = total; for (int i = 1; i < nd; i++) shape[i] = x->shape[i];
  nt_Tensor *y = nt_empty(shape, nd, xc->dtype, xc->device);
  if (!y) { nt_release(xc); free(hdr); free(cnt); return NULL; }
  size_t es = nt_dtype_size(xc->dtype);
  int64_t off = 0;
  for (int i = 0; i < r; i++) off += hdr[i * 10];
  for (int i = 0; i < w; i++) { cnt[i] = (size_t)(hdr[i * 10] * rs); if (rows_out) rows_out[i] = hdr[i * 10]; }
  free(hdr);
  size_t offb = (size_t)(off * rs) * es, myb = (size_t)(myrows * rs) * es, totb = nbytes_of(y);
  int st = 0, path = path_of(y->device);
  if (path == P_HOST) {
    memcpy(nt_base(y) + offb, nt_base(xc), myb);
    st = dr_all_gather(G, nt_base(y), cnt, es) ? backend_err("all_gather") : 0;
  } else if (path == P_NCCL) {
    st = copy_rows(y, off, xc);
    if (!st) st = dn_all_gather(G, nt_base(y), cnt, es) ? backend_err("all_gather") : 0;
  } else {
    char *h = nt_cuda_staging(totb);
    st = !h || nt_cuda_to_host(h + offb, nt_base(xc), myb) ? -1 : 0;
    if (!st) st = dr_all_gather(G, h, cnt, es) ? backend_err("all_gather") : 0;
    if (!st) st = nt_cuda_to_device(nt_base(y), h, totb);
  }
  nt_release(xc);
  free(cnt);
  if (st) { nt_release(y); return NULL; }
  if (scale_avg && !(y = div_world(y, w))) return NULL;
  return finish(y, x);
}

nt_Tensor *nbD_all_gather(nt_Tensor *x) {
  if (need_group_sig("all_gather", NULL, x, 1)) return NULL;
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)G->world);
  if (!rows) { nt_error_set("out of memory"); return NULL; }
  nt_Tensor *y = ag_rows(x, rows, 0);
  if (y && nt_needs_grad(1, &x)) {
    nt_Node *n = nt_record(y, "AllGatherBackward", ag_backward, 1, &x);
    RowsCtx *c = malloc(sizeof *c);
    if (!n || !c) { free(c); free(rows); nt_release(y); nt_error_set("out of memory"); return NULL; }
    c->rows = rows; c->w = G->world; n->ctx = c; n->ctx_free = rows_free;
    n->iarg[0] = nbD_group_current(); n->niarg = 1;
    return y;
  }
  free(rows);
  return y;
}

static nt_Tensor *rs_rows(nt_Tensor *x, const int64_t *rows, int op) {
  int w = G->world, r = G->rank;
  if (x->ndim == 0) { nt_error_set("reduce_scatter: needs a tensor with at least one axis"); return NULL; }
  int64_t total = 0, off = 0, rs = rowsize(x);
  for (int i = 0; i < w; i++) { total += rows[i]; if (i < r) off += rows[i]; }
  if (total != x->shape[0]) { nt_error_set("reduce_scatter: %lld rows do not split as expected (%lld)", (long long)x->shape[0], (long long)total); return NULL; }
  int rdt;
  nt_Tensor *xc = work_copy(x, &rdt);
  if (!xc) return NULL;
  size_t *cnt = calloc((size_t)w, sizeof(size_t));
  if (!cnt) { nt_release(xc); nt_error_set("out of memory"); return NULL; }
  for (int i = 0; i < w; i++) cnt[i] = (size_t)(rows[i] * rs);
  int rop = rop_of(op), st = 0, path = path_of(xc->device);
  char *p = nt_base(xc);
  size_t es = nt_dtype_size(xc->dtype), nb = nbytes_of(xc), offb = (size_t)(off * rs) * es, myb = cnt[r] * es;
  if (path == P_HOST) st = dr_reduce_scatter(G, p, cnt, rdt, rop) ? backend_err("reduce_scatter") : 0;
  else if (path == P_NCCL) st = dn_reduce_scatter(G, p, cnt, rdt, rop) ? backend_err("reduce_scatter") : 0;
  else {
    char *h = nt_cuda_staging(nb);
    st = !h || nt_cuda_to_host(h, p, nb) ? -1 : 0;
    if (!st) st = dr_reduce_scatter(G, h, cnt, rdt, rop) ? backend_err("reduce_scatter") : 0;
    if (!st) st = nt_cuda_to_device(p + offb, h + offb, myb);   /* only this rank's chunk is needed */
  }
  free(cnt);
  if (st) { nt_release(xc); return NULL; }
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *v = nt_narrow(xc, 0, off, rows[r]), *y = v ? nt_clone(v) : NULL;
  nt_release(v); nt_release(xc);
  nt_set_grad_enabled(prev);
  if (y && op == NBD_AVG) y = div_world(y, w);
  return finish(y, x);
}

void nbD_split_rows(int64_t n, int w, int64_t *rows) {
  for (int i = 0; i < w; i++) rows[i] = n / w + (i < n % w);
}

nt_Tensor *nbD_reduce_scatter(nt_Tensor *x, int op) {
  if (need_group_sig("reduce_scatter", op_names[op & 3], x, 0)) return NULL;
  if (x->ndim == 0) { nt_error_set("reduce_scatter: needs a tensor with at least one axis"); return NULL; }
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)G->world);
  if (!rows) { nt_error_set("out of memory"); return NULL; }
  nbD_split_rows(x->shape[0], G->world, rows);
  nt_Tensor *y = rs_rows(x, rows, op);
  free(rows);
  if (y && (op == NBD_SUM || op == NBD_AVG) && nt_needs_grad(1, &x)) {
    nt_Node *n = nt_record(y, "ReduceScatterBackward", rs_backward, 1, &x);
    if (!n) { nt_release(y); return NULL; }
    n->iarg[0] = op; n->iarg[1] = nbD_group_current(); n->niarg = 2;
  }
  return y;
}

/* ------------------------------------------------------------ point to point */
/* header: h[0] = dtype | device << 8 | (data follows on NCCL) << 12, ndim, shape[8] */
static void header_of(nt_Tensor *x, int64_t h[10], int via_nccl) {
  memset(h, 0, 10 * sizeof(int64_t));
  h[0] = x->dtype | (int64_t)x->device << 8 | (int64_t)(via_nccl != 0) << 12;
  h[1] = x->ndim;
  for (int i = 0; i < x->ndim; i++) h[2 + i] = x->shape[i];
}
static int header_path(const int64_t h[10]) { return (h[0] >> 12) & 1 ? P_NCCL : P_HOST; }
/* a tensor for a header's data: on the sender's kind of device when this
** worker can make it (under the ring a worker without CUDA gets a CPU
** tensor), on CUDA when the data comes over NCCL */
static nt_Tensor *from_header(const int64_t h[10]) {
  int dt = (int)(h[0] & 0xff), dev = (int)((h[0] >> 8) & 0xf);
  if (dt < 0 || dt >= NT_NDTYPES || dev >= NT_NDEVICES || h[1] < 0 || h[1] > NT_MAXDIM) { nt_error_set("corrupt tensor header from a peer"); return NULL; }
  if (header_path(h) == P_NCCL) dev = NT_CUDA;
  else if (dev == NT_CUDA && nt_device_load(NT_CUDA) != 0) dev = NT_CPU;
  return nt_empty(h + 2, (int)h[1], (nt_DType)dt, (nt_Device)dev);
}
/* a contiguous copy (or x itself) on x's device, grad off */
static nt_Tensor *dev_contig(nt_Tensor *x) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *d = nt_detach(x), *c = d ? nt_contiguous(d) : NULL;
  nt_release(d);
  nt_set_grad_enabled(prev);
  return c;
}
static nt_Tensor *host_contig(nt_Tensor *x) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *d = nt_detach(x), *c = NULL;
  if (d && d->device != NT_CPU) { nt_Tensor *h = nt_to_device(d, NT_CPU); nt_release(d); d = h; }
  if (d) { c = nt_contiguous(d); nt_release(d); }
  nt_set_grad_enabled(prev);
  return c;
}

int nbD_send(nt_Tensor *x, int dst) {
  if (need_group()) return -1;
  if (dst < 0 || dst >= G->world || dst == G->rank) { nt_error_set("send: bad destination rank %d", dst); return -1; }
  nt_Tensor *c = dev_contig(x);
  if (!c) return -1;
  int path = path_of(c->device);
  int64_t h[10]; header_of(c, h, path == P_NCCL);
  int st = dr_sendrecv(G, dst, h, sizeof h, -1, NULL, 0) ? backend_err("send") : 0;
  if (!st) st = p2p_tensor(dst, c, -1, NULL, path);
  nt_release(c);
  return st;
}

nt_Tensor *nbD_recv(int src) {
  if (need_group()) return NULL;
  if (src < 0 || src >= G->world || src == G->rank) { nt_error_set("recv: bad source rank %d", src); return NULL; }
  int64_t h[10];
  if (dr_sendrecv(G, -1, NULL, 0, src, h, sizeof h)) { backend_err("recv"); return NULL; }
  nt_Tensor *y = from_header(h);
  if (!y) { G->broken = 1; return NULL; }
  if (p2p_tensor(-1, NULL, src, y, header_path(h))) { nt_release(y); return NULL; }
  return y;
}

nt_Tensor *nbD_broadcast(nt_Tensor *x, int src) {
  char sa[24]; snprintf(sa, sizeof sa, "src=%d", src);
  if (need_group_sig("broadcast", sa, NULL, 0)) return NULL;
  if (src < 0 || src >= G->world) { nt_error_set("broadcast: bad source rank %d", src); return NULL; }
  int64_t h[10] = {0};
  nt_Tensor *y = NULL;
  if (G->rank == src) {
    if (!x) { nt_error_set("broadcast: the source rank must pass a tensor"); return NULL; }
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *d = nt_detach(x);
    y = d ? nt_clone(d) : NULL;
    nt_release(d);
    nt_set_grad_enabled(prev);
    if (!y) return NULL;
    header_of(y, h, path_of(y->device) == P_NCCL);
  }
  if (dr_broadcast(G, h, sizeof h, src)) { nt_release(y); backend_err("broadcast"); return NULL; }
  if (G->rank != src && !(y = from_header(h))) { G->broken = 1; return NULL; }
  if (bcast_tensor(y, src, header_path(h))) { nt_release(y); return NULL; }
  return y;
}

/* in place (data_parallel): x's storage receives src's values */
int nbD_broadcast_(nt_Tensor *x, int src) {
  char sa[24]; snprintf(sa, sizeof sa, "src=%d", src);
  if (need_group_sig("broadcast", sa, NULL, 0)) return -1;
  int64_t h[10], mine[10];
  header_of(x, mine, path_of(x->device) == P_NCCL);
  memcpy(h, mine, sizeof h);
  if (dr_broadcast(G, h, sizeof h, src)) return backend_err("broadcast");
  if ((h[0] & 0xff) != (mine[0] & 0xff) || memcmp(h + 1, mine + 1, 9 * sizeof(int64_t)) != 0) {
    G->broken = 1;
    nt_error_set("broadcast: rank %d's tensor has another shape or dtype than the source rank %d's", G->rank, src);
    return -1;
  }
  /* straight into x when it is contiguous and on the source's kind of device */
  int direct = nt_is_contiguous(x) && h[0] == mine[0];
  nt_Tensor *t = direct ? nt_retain(x) : G->rank == src ? dev_contig(x) : from_header(h);
  if (!t) { G->broken = 1; return -1; }
  int st = bcast_tensor(t, src, header_path(h));
  if (!st && direct && G->rank != src) x->storage->version++;   /* a write autograd must see (tensor.h) */
  if (!st && !direct && G->rank != src) {
    bool prev = nt_set_grad_enabled(false);
    st = nt_copy_(x, t);
    nt_set_grad_enabled(prev);
  }
  nt_release(t);
  return st;
}

/* out[w] new references; xs[w] borrowed.  Under NCCL, CUDA tensors go over
** NCCL and CPU tensors over TCP; one call may not mix them. */
int nbD_all_to_all(nt_Tensor **xs, nt_Tensor **out) {
  if (need_group_sig("all_to_all", NULL, NULL, 0)) return -1;
  int w = G->world, r = G->rank;
  for (int i = 0; i < w; i++) out[i] = NULL;
  int path = path_of(xs[0]->device);
  for (int i = 1; i < w; i++)
    if ((path == P_NCCL) != (path_of(xs[i]->device) == P_NCCL)) { nt_error_set("all_to_all: the tensors must all be on one device (CPU and CUDA mixed)"); return -1; }
  bool prev = nt_set_grad_enabled(false);
  out[r] = nt_clone(xs[r]);
  nt_set_grad_enabled(prev);
  if (!out[r]) return -1;
  for (int s = 1; s < w; s++) {
    int dst = (r + s) % w, src = ((r - s) % w + w) % w;
    nt_Tensor *c = dev_contig(xs[dst]);
    if (!c) goto fail;
    int64_t hs[10], hr[10]; header_of(c, hs, path == P_NCCL);
    if (dr_sendrecv(G, dst, hs, sizeof hs, src, hr, sizeof hr)) { nt_release(c); backend_err("all_to_all"); goto fail; }
    if ((header_path(hr) == P_NCCL) != (path == P_NCCL)) {
      nt_release(c); G->broken = 1;
      nt_error_set("all_to_all: rank %d sends %s tensors, this rank %s ones: every rank must use the same device", src,
                   header_path(hr) == P_NCCL ? "CUDA" : "CPU", path == P_NCCL ? "CUDA" : "CPU");
      goto fail;
    }
    out[src] = from_header(hr);
    if (!out[src]) { nt_release(c); G->broken = 1; goto fail; }
    int st = p2p_tensor(dst, c, src, out[src], path == P_NCCL ? P_NCCL : P_HOST);
    nt_release(c);
    if (st) goto fail;
  }
  return 0;
fail:
  for (int i = 0; i < w; i++) { nt_release(out[i]); out[i] = NULL; }
  return -1;
}

/* bucketed all_reduce of many tensors (gradients): tensors are packed by
** dtype (and device) into buckets of at most bucket_bytes, each bucket is
** one all_reduce; out[i] are new tensors shaped like xs[i].  Not recorded.
** CPU buckets are a malloc'd buffer; CUDA buckets a device tensor (nt_concat
** of the flattened work copies), reduced by NCCL or through the staging
** buffer. */
static int cuda_bucket(nt_Tensor **wc, int i, int j, const int *rdt, int dt, int rop) {
  int m = 0;
  for (int k = i; k < j; k++) if (rdt[k] == dt && wc[k]->device == NT_CUDA) m++;
  nt_Tensor **flat = calloc((size_t)m + 1, sizeof *flat);
  if (!flat) { nt_error_set("out of memory"); return -1; }
  bool prev = nt_set_grad_enabled(false);
  int st = -1, q = 0;
  for (int k = i; k < j; k++)
    if (rdt[k] == dt && wc[k]->device == NT_CUDA) { int64_t len = wc[k]->numel; if (!(flat[q++] = nt_reshape(wc[k], &len, 1))) goto done; }
  nt_Tensor *b = nt_concat(flat, m, 0);
  if (!b) goto done;
  st = ar_tensor(b, dt, rop);
  int64_t off = 0;
  for (int k = i; k < j && !st; k++) {
    if (rdt[k] != dt || wc[k]->device != NT_CUDA) continue;
    nt_Tensor *v = nt_narrow(b, 0, off, wc[k]->numel), *vs = v ? nt_reshape(v, wc[k]->shape, wc[k]->ndim) : NULL;
    st = vs ? nt_copy_(wc[k], vs) : -1;
    nt_release(vs); nt_release(v);
    off += wc[k]->numel;
  }
  nt_release(b);
done:
  for (int k = 0; k < m; k++) nt_release(flat[k]);
  free(flat);
  nt_set_grad_enabled(prev);
  return st;
}

int nbD_all_reduce_coalesced(nt_Tensor **xs, int n, int op, size_t bucket_bytes, nt_Tensor **out) {
  char sa[48]; snprintf(sa, sizeof sa, "%s, %d tensors", op_names[op & 3], n);
  if (need_group_sig("all_reduce_coalesced", sa, NULL, 0)) return -1;
  for (int i = 0; i < n; i++) out[i] = NULL;
  int rop = rop_of(op);
  nt_Tensor **wc = calloc((size_t)n, sizeof *wc);
  int *rdt = calloc((size_t)n, sizeof *rdt);
  char *buf = NULL;
  int st = -1;
  if (!wc || !rdt) { nt_error_set("out of memory"); goto done; }
  for (int i = 0; i < n; i++) if (!(wc[i] = work_copy(xs[i], &rdt[i]))) goto done;
  buf = malloc(bucket_bytes + 16);
  if (!buf) { nt_error_set("out of memory"); goto done; }
  /* each device and dtype in turn; tensors bigger than a bucket are reduced on their own */
  for (int cuda = 0; cuda <= 1; cuda++)
  for (int dt = DR_F32; dt <= DR_I64; dt++) {
    size_t es = dr_esize(dt);
    int i = 0;
#define IN_PASS(k) (rdt[k] == dt && (wc[k]->device == NT_CUDA) == cuda)
    while (i < n) {
      if (!IN_PASS(i)) { i++; continue; }
      size_t nb = (size_t)wc[i]->numel * es;
      if (nb >= bucket_bytes) {
        if (ar_tensor(wc[i], dt, rop)) goto done;
        i++; continue;
      }
      /* pack [i, j) */
      int j = i; size_t used = 0;
      while (j < n && (!IN_PASS(j) || used + (size_t)wc[j]->numel * es <= bucket_bytes)) {
        if (IN_PASS(j)) used += (size_t)wc[j]->numel * es;
        j++;
      }
      if (cuda) {
        if (cuda_bucket(wc, i, j, rdt, dt, rop)) goto done;
      } else {
        used = 0;
        for (int k = i; k < j; k++) if (IN_PASS(k)) { memcpy(buf + used, nt_base(wc[k]), (size_t)wc[k]->numel * es); used += (size_t)wc[k]->numel * es; }
        if (dr_all_reduce(G, buf, used / es, dt, rop)) { backend_err("all_reduce"); goto done; }
        used = 0;
        for (int k = i; k < j; k++) if (IN_PASS(k)) { memcpy(nt_base(wc[k]), buf + used, (size_t)wc[k]->numel * es); used += (size_t)wc[k]->numel * es; }
      }
      i = j;
      /* the tensors of other passes inside [i, j) are handled in their own pass */
    }
#undef IN_PASS
  }
  for (int i = 0; i < n; i++) {
    nt_Tensor *y = wc[i]; wc[i] = NULL;
    if (op == NBD_AVG && !(y = div_world(y, G->world))) goto done;
    if (!(out[i] = finish(y, xs[i]))) goto done;
  }
  st = 0;
done:
  if (wc) for (int i = 0; i < n; i++) nt_release(wc[i]);
  if (st) for (int i = 0; i < n; i++) { nt_release(out[i]); out[i] = NULL; }
  free(wc); free(rdt); free(buf);
  return st;
}

/* ------------------------------------------------------------ non-blocking send
** isend copies the tensor and hands it to a thread that writes it to the link
** (dr_sendrecv on a private copy of the current group view), so the caller
** goes on while the peer has not yet read it.  Sends on one link must not
** interleave: an isend waits (in its thread) for the previous isend on the
** same socket; blocking sends and collectives first drain every pending
** isend (dcoll.c).  Receiving never waits for sends, so two ranks that isend
** to each other and then recv cannot stall, whatever the message size. */
#include <poll.h>
#include <pthread.h>

#define NBD_MAXASYNC 256
typedef struct ASend {
  int state;               /* 0 free, 1 running, 2 finished (not yet waited) */
  unsigned seq;
  pthread_t th;
  dr_Group g;              /* private copy of the group view */
  int *fd;
  int dst, link;           /* group position; the socket (serialisation key) */
  int prev; unsigned prev_seq;
  int64_t h[10];
  void *buf; size_t n;
  int st;
} ASend;
static ASend asends[NBD_MAXASYNC];
static pthread_mutex_t amu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t acv = PTHREAD_COND_INITIALIZER;
static unsigned aseq = 0;

static void *asend_main(void *p) {
  ASend *s = p;
  pthread_mutex_lock(&amu);
  if (s->prev >= 0)
    while (asends[s->prev].seq == s->prev_seq && asends[s->prev].state == 1) pthread_cond_wait(&acv, &amu);
  pthread_mutex_unlock(&amu);
  int st = dr_sendrecv(&s->g, s->dst, s->h, sizeof s->h, -1, NULL, 0);
  if (!st && s->n) st = dr_sendrecv(&s->g, s->dst, s->buf, s->n, -1, NULL, 0);
  pthread_mutex_lock(&amu);
  s->st = st; s->state = 2;
  pthread_cond_broadcast(&acv);
  pthread_mutex_unlock(&amu);
  return NULL;
}

int nbD_isend(nt_Tensor *x, int dst) {
  if (need_group()) return -1;
  if (dst < 0 || dst >= G->world || dst == G->rank) { nt_error_set("isend: bad destination rank %d", dst); return -1; }
  if (G->broken) { nt_error_set("the collective group is broken by an earlier failure (%s); the session reconnects it", G->err); return -1; }
  int id = -1, link = G->fd ? G->fd[dst] : -1, prev = -1;
  pthread_mutex_lock(&amu);
  for (int i = 0; i < NBD_MAXASYNC && id < 0; i++) if (asends[i].state == 0) id = i;
  unsigned best = 0;
  for (int i = 0; i < NBD_MAXASYNC; i++)   /* the latest unfinished isend on this link */
    if (asends[i].state == 1 && asends[i].link == link && (prev < 0 || asends[i].seq - best < (1u << 31))) { prev = i; best = asends[i].seq; }
  pthread_mutex_unlock(&amu);
  if (id < 0) { nt_error_set("isend: more than %d sends pending (call wait() on the handles)", NBD_MAXASYNC); return -1; }
  ASend *s = &asends[id];
  nt_Tensor *c = host_contig(x);
  if (!c) return -1;
  s->n = (size_t)c->numel * nt_dtype_size(c->dtype);
  s->buf = malloc(s->n ? s->n : 1);
  s->fd = malloc(sizeof(int) * (size_t)G->world);
  if (!s->buf || !s->fd) { free(s->buf); free(s->fd); s->buf = NULL; s->fd = NULL; nt_release(c); nt_error_set("out of memory"); return -1; }
  memcpy(s->buf, nt_data_ptr(c), s->n);
  nt_release(c);
  header_of(x, s->h, 0);   /* the thread sends a host copy over TCP */
  memcpy(s->fd, G->fd, sizeof(int) * (size_t)G->world);
  s->g = *G; s->g.fd = s->fd; s->g.bytes_sent = s->g.bytes_recv = 0;
  s->dst = dst; s->link = link; s->st = 0;
  pthread_mutex_lock(&amu);
  s->prev = prev; s->prev_seq = prev >= 0 ? asends[prev].seq : 0;
  s->seq = ++aseq; s->state = 1;
  pthread_mutex_unlock(&amu);
  if (pthread_create(&s->th, NULL, asend_main, s)) {
    pthread_mutex_lock(&amu); s->state = 0; pthread_mutex_unlock(&amu);
    free(s->buf); free(s->fd); s->buf = NULL; s->fd = NULL;
    nt_error_set("isend: cannot start a thread");
    return -1;
  }
  return id;
}

/* completes isend `id` (seq guards against a stale handle); 0 or -1 with the error set */
int nbD_isend_wait(int id, unsigned seq) {
  if (id < 0 || id >= NBD_MAXASYNC || asends[id].state == 0 || asends[id].seq != seq) { nt_error_set("wait: no pending isend with this handle (already waited?)"); return -1; }
  ASend *s = &asends[id];
  pthread_join(s->th, NULL);
  int st = s->st;
  dr_Group *w = nbD_self.g;
  if (w) {
    w->bytes_sent += s->g.bytes_sent; w->bytes_recv += s->g.bytes_recv;
    if (st && !w->broken) { w->broken = 1; memcpy(w->err, s->g.err, sizeof w->err); }
  }
  if (st) nt_error_set("%s", s->g.err);
  free(s->buf); free(s->fd); s->buf = NULL; s->fd = NULL;
  pthread_mutex_lock(&amu); s->state = 0; pthread_cond_broadcast(&acv); pthread_mutex_unlock(&amu);
  return st ? -1 : 0;
}
/* torch's Work.is_completed(): whether isend `id` finished (its wait will
** not block); it stays pending until waited, which reports its error */
int nbD_isend_test(int id, unsigned seq) {
  pthread_mutex_lock(&amu);
  int st = id < 0 || id >= NBD_MAXASYNC || asends[id].state == 0 || asends[id].seq != seq ? -1 : asends[id].state == 2;
  pthread_mutex_unlock(&amu);
  if (st < 0) nt_error_set("test: no pending isend with this handle (already waited?)");
  return st;
}

/* whether a message from src has begun to arrive (its first bytes wait in
** the shared-memory channel or the TCP socket), so a recv now only reads
** what the sender is already writing: what irecv's test() polls.  A closed
** link counts as ready (the recv then reports it). */
int nbD_recv_ready(int src) {
  if (need_group()) return -1;
  if (src < 0 || src >= G->world || src == G->rank) { nt_error_set("test: bad source rank %d", src); return -1; }
  if (G->broken) { nt_error_set("the collective group is broken by an earlier failure (%s); the session reconnects it", G->err); return -1; }
  int r = G->chan ? dc_ready(G, src) : -1;
  if (r >= 0) return r;
  if (!G->fd || G->fd[src] < 0) { nt_error_set("test: no connection to rank %d (the group is not connected)", src); return -1; }
  struct pollfd p = { G->fd[src], POLLIN, 0 };
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}
unsigned nbD_isend_seq(int id) { return (id >= 0 && id < NBD_MAXASYNC) ? asends[id].seq : 0; }

/* waits until no isend on a link of the current group view is still
** writing (their handles stay valid for wait) */
void nbD_async_drain(void) {
  nbD_reducer_drain();
  if (!G || !G->fd) return;
  pthread_mutex_lock(&amu);
  for (;;) {
    int busy = 0;
    for (int i = 0; i < NBD_MAXASYNC && !busy; i++)
      if (asends[i].state == 1) for (int j = 0; j < G->world; j++) if (G->fd[j] >= 0 && G->fd[j] == asends[i].link) busy = 1;
    if (!busy) break;
    pthread_cond_wait(&acv, &amu);
  }
  pthread_mutex_unlock(&amu);
}
