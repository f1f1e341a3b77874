/*
** dgrad.c — collectives on tensors, differentiable where it makes sense:
**   all_reduce(sum)  backward: all_reduce(g, sum)     (avg: all_reduce(g, avg))
**   all_gather       backward: this rank's rows of reduce_scatter(g, sum)
**   reduce_scatter   backward: all_gather(g)          (avg: / world)
** The backward collectives run on every rank because SPMD code builds the same
** graph everywhere (a rank that skips backward leaves the others waiting
** until the timeout).  broadcast/send/recv/all_to_all are not recorded.
*/
#include <stdlib.h>
#include <string.h>
#include "tensor/tinternal.h"
#include "dist/dgrad.h"
#include "dist/dgroup.h"

#define G (nbD_self.g)

static int backend_err(const char *what) { (void)what; nt_error_set("%s", G->err); return -1; }

/* a fresh contiguous host copy in a dtype the ring can reduce */
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
    if (d->device != NT_CPU) { nt_Tensor *h = nt_to_device(d, NT_CPU); nt_release(d); d = h; }
  }
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
  if (r && like->device != NT_CPU) { nt_Tensor *d = nt_to_device(r, like->device); nt_release(r); r = d; }
  nt_set_grad_enabled(prev);
  return r;
}

static int need_group(void) {
  if (!G) { nt_error_set("not running on a dist worker (run it with dist.exec/dist.run, or nabla run -n N)"); return -1; }
  return 0;
}

/* ------------------------------------------------------------ all_reduce */
static int ar_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nbD_Scope sc;   /* the group the forward ran on (dgroup.c) */
  if (nbD_group_enter((int)n->iarg[1], &sc)) return -1;
  gin[0] = nbD_all_reduce(g, (int)n->iarg[0]);
  nbD_group_leave(&sc);
  return gin[0] ? 0 : -1;
}

nt_Tensor *nbD_all_reduce(nt_Tensor *x, int op) {
  if (need_group()) return NULL;
  int rdt;
  nt_Tensor *y = work_copy(x, &rdt);
  if (!y) return NULL;
  int rop = op == NBD_MAX ? DR_MAX : op == NBD_MIN ? DR_MIN : DR_SUM;
  if (dr_all_reduce(G, nt_data_ptr(y), (size_t)y->numel, rdt, rop)) { nt_release(y); backend_err("all_reduce"); return NULL; }
  if (op == NBD_AVG) {
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *a = nt_binary_scalar_ex(NT_OP_DIV, y, (double)G->world, NT_SCALAR_FLOAT);
    nt_set_grad_enabled(prev);
    nt_release(y); y = a;
    if (!y) return NULL;
  }
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
  gin[0] = rs_rows(g, c->rows, NBD_SUM);
  nbD_group_leave(&sc);
  if (gin[0] && n->in[0]->ndim == 0) {   /* a 0-d input was gathered as one row */
    nt_Tensor *s = nt_reshape(gin[0], NULL, 0); nt_release(gin[0]); gin[0] = s;
  }
  return gin[0] ? 0 : -1;
}
static int rs_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nbD_Scope sc;
  if (nbD_group_enter((int)n->iarg[1], &sc)) return -1;
  gin[0] = ag_rows(g, NULL, (int)n->iarg[0] == NBD_AVG);
  nbD_group_leave(&sc);
  return gin[0] ? 0 : -1;
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
  nt_Tensor *y = nt_empty(shape, nd, xc->dtype, NT_CPU);
  if (!y) { nt_release(xc); free(hdr); free(cnt); return NULL; }
  size_t es = nt_dtype_size(xc->dtype);
  int64_t off = 0;
  for (int i = 0; i < r; i++) off += hdr[i * 10];
  memcpy((char *)nt_data_ptr(y) + (size_t)(off * rs) * es, nt_data_ptr(xc), (size_t)(myrows * rs) * es);
  for (int i = 0; i < w; i++) { cnt[i] = (size_t)(hdr[i * 10] * rs); if (rows_out) rows_out[i] = hdr[i * 10]; }
  nt_release(xc); free(hdr);
  int st = dr_all_gather(G, nt_data_ptr(y), cnt, es);
  free(cnt);
  if (st) { nt_release(y); backend_err("all_gather"); return NULL; }
  if (scale_avg) {
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *a = nt_binary_scalar_ex(NT_OP_DIV, y, (double)w, NT_SCALAR_FLOAT);
    nt_set_grad_enabled(prev);
    nt_release(y); y = a;
  }
  return finish(y, x);
}

nt_Tensor *nbD_all_gather(nt_Tensor *x) {
  if (need_group()) return NULL;
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
  int rop = op == NBD_MAX ? DR_MAX : op == NBD_MIN ? DR_MIN : DR_SUM;
  int st = dr_reduce_scatter(G, nt_data_ptr(xc), cnt, rdt, rop);
  free(cnt);
  if (st) { nt_release(xc); backend_err("reduce_scatter"); return NULL; }
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *v = nt_narrow(xc, 0, off, rows[r]), *y = v ? nt_clone(v) : NULL;
  nt_release(v); nt_release(xc);
  if (y && op == NBD_AVG) { nt_Tensor *a = nt_binary_scalar_ex(NT_OP_DIV, y, (double)w, NT_SCALAR_FLOAT); nt_release(y); y = a; }
  nt_set_grad_enabled(prev);
  return finish(y, x);
}

void nbD_split_rows(int64_t n, int w, int64_t *rows) {
  for (int i = 0; i < w; i++) rows[i] = n / w + (i < n % w);
}

nt_Tensor *nbD_reduce_scatter(nt_Tensor *x, int op) {
  if (need_group()) return NULL;
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
/* header: dtype, ndim, shape[8] */
static void header_of(nt_Tensor *x, int64_t h[10]) {
  memset(h, 0, 10 * sizeof(int64_t));
  h[0] = x->dtype; h[1] = x->ndim;
  for (int i = 0; i < x->ndim; i++) h[2 + i] = x->shape[i];
}
static nt_Tensor *from_header(const int64_t h[10]) {
  if (h[0] < 0 || h[0] >= NT_NDTYPES || h[1] < 0 || h[1] > NT_MAXDIM) { nt_error_set("corrupt tensor header from a peer"); return NULL; }
  return nt_empty(h + 2, (int)h[1], (nt_DType)h[0], NT_CPU);
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
  int64_t h[10]; header_of(x, h);
  nt_Tensor *c = host_contig(x);
  if (!c) return -1;
  int st = dr_sendrecv(G, dst, h, sizeof h, -1, NULL, 0);
  if (!st) st = dr_sendrecv(G, dst, nt_data_ptr(c), (size_t)c->numel * nt_dtype_size(c->dtype), -1, NULL, 0);
  nt_release(c);
  return st ? backend_err("send") : 0;
}

nt_Tensor *nbD_recv(int src) {
  if (need_group()) return NULL;
  if (src < 0 || src >= G->world || src == G->rank) { nt_error_set("recv: bad source rank %d", src); return NULL; }
  int64_t h[10];
  if (dr_sendrecv(G, -1, NULL, 0, src, h, sizeof h)) { backend_err("recv"); return NULL; }
  nt_Tensor *y = from_header(h);
  if (!y) { G->broken = 1; return NULL; }
  if (dr_sendrecv(G, -1, NULL, 0, src, nt_data_ptr(y), (size_t)y->numel * nt_dtype_size(y->dtype))) { nt_release(y); backend_err("recv"); return NULL; }
  return y;
}

nt_Tensor *nbD_broadcast(nt_Tensor *x, int src) {
  if (need_group()) return NULL;
  if (src < 0 || src >= G->world) { nt_error_set("broadcast: bad source rank %d", src); return NULL; }
  int64_t h[10] = {0};
  nt_Tensor *c = NULL;
  if (G->rank == src) {
    if (!x) { nt_error_set("broadcast: the source rank must pass a tensor"); return NULL; }
    header_of(x, h);
    if (!(c = host_contig(x))) return NULL;
  }
  if (dr_broadcast(G, h, sizeof h, src)) { nt_release(c); backend_err("broadcast"); return NULL; }
  nt_Tensor *y;
  if (G->rank == src) {
    bool prev = nt_set_grad_enabled(false);
    y = nt_clone(c);
    nt_set_grad_enabled(prev);
    nt_release(c);
  } else y = from_header(h);
  if (!y) { G->broken = 1; return NULL; }
  if (dr_broadcast(G, nt_data_ptr(y), (size_t)y->numel * nt_dtype_size(y->dtype), src)) { nt_release(y); backend_err("broadcast"); return NULL; }
  return y;
}

/* in place (data_parallel): x's storage receives src's values */
int nbD_broadcast_(nt_Tensor *x, int src) {
  if (need_group()) return -1;
  if (x->device != NT_CPU || !nt_is_contiguous(x)) {
    nt_Tensor *y = nbD_broadcast(x, src);
    if (!y) return -1;
    bool prev = nt_set_grad_enabled(false);
    int st = nt_copy_(x, y);
    nt_set_grad_enabled(prev);
    nt_release(y);
    return st;
  }
  int64_t h[10], mine[10]; header_of(x, mine); memcpy(h, mine, sizeof h);
  if (dr_broadcast(G, h, sizeof h, src)) return backend_err("broadcast");
  if (memcmp(h, mine, sizeof h) != 0) { G->broken = 1; nt_error_set("broadcast: rank %d's tensor has another shape or dtype than the source rank %d's", G->rank, src); return -1; }
  if (dr_broadcast(G, nt_data_ptr(x), (size_t)x->numel * nt_dtype_size(x->dtype), src)) return backend_err("broadcast");
  return 0;
}

/* out[w] new references; xs[w] borrowed */
int nbD_all_to_all(nt_Tensor **xs, nt_Tensor **out) {
  if (need_group()) return -1;
  int w = G->world, r = G->rank;
  for (int i = 0; i < w; i++) out[i] = NULL;
  bool prev = nt_set_grad_enabled(false);
  out[r] = nt_clone(xs[r]);
  nt_set_grad_enabled(prev);
  if (!out[r]) return -1;
  for (int s = 1; s < w; s++) {
    int dst = (r + s) % w, src = ((r - s) % w + w) % w;
    int64_t hs[10], hr[10]; header_of(xs[dst], hs);
    nt_Tensor *c = host_contig(xs[dst]);
    if (!c) goto fail;
    if (dr_sendrecv(G, dst, hs, sizeof hs, src, hr, sizeof hr)) { nt_release(c); backend_err("all_to_all"); goto fail; }
    out[src] = from_header(hr);
    if (!out[src]) { nt_release(c); G->broken = 1; goto fail; }
    if (dr_sendrecv(G, dst, nt_data_ptr(c), (size_t)c->numel * nt_dtype_size(c->dtype), src, nt_data_ptr(out[src]), (size_t)out[src]->numel * nt_dtype_size(out[src]->dtype))) {
      nt_release(c); backend_err("all_to_all"); goto fail;
    }
    nt_release(c);
  }
  return 0;
fail:
  for (int i = 0; i < w; i++) { nt_release(out[i]); out[i] = NULL; }
  return -1;
}

/* bucketed all_reduce of many tensors (gradients): tensors are packed by
** dtype into buckets of at most bucket_bytes, each bucket is one ring
** all_reduce; out[i] are new tensors shaped like xs[i]. Not recorded. */
int nbD_all_reduce_coalesced(nt_Tensor **xs, int n, int op, size_t bucket_bytes, nt_Tensor **out) {
  if (need_group()) return -1;
  for (int i = 0; i < n; i++) out[i] = NULL;
  int rop = op == NBD_MAX ? DR_MAX : op == NBD_MIN ? DR_MIN : DR_SUM;
  nt_Tensor **wc = calloc((size_t)n, sizeof *wc);
  int *rdt = calloc((size_t)n, sizeof *rdt);
  char *buf = NULL;
  int st = -1;
  if (!wc || !rdt) { nt_error_set("out of memory"); goto done; }
  for (int i = 0; i < n; i++) if (!(wc[i] = work_copy(xs[i], &rdt[i]))) goto done;
  buf = malloc(bucket_bytes + 16);
  if (!buf) { nt_error_set("out of memory"); goto done; }
  /* each dtype in turn; tensors bigger than a bucket are reduced on their own */
  for (int dt = DR_F32; dt <= DR_I64; dt++) {
    size_t es = dr_esize(dt);
    int i = 0;
    while (i < n) {
      if (rdt[i] != dt) { i++; continue; }
      size_t nb = (size_t)wc[i]->numel * es;
      if (nb >= bucket_bytes) {
        if (dr_all_reduce(G, nt_data_ptr(wc[i]), (size_t)wc[i]->numel, dt, rop)) { backend_err("all_reduce"); goto done; }
        i++; continue;
      }
      /* pack [i, j) */
      int j = i; size_t used = 0;
      while (j < n && (rdt[j] != dt || used + (size_t)wc[j]->numel * es <= bucket_bytes)) {
        if (rdt[j] == dt) { memcpy(buf + used, nt_data_ptr(wc[j]), (size_t)wc[j]->numel * es); used += (size_t)wc[j]->numel * es; }
        j++;
      }
      if (dr_all_reduce(G, buf, used / es, dt, rop)) { backend_err("all_reduce"); goto done; }
      used = 0;
      for (int k = i; k < j; k++) if (rdt[k] == dt) { memcpy(nt_data_ptr(wc[k]), buf + used, (size_t)wc[k]->numel * es); used += (size_t)wc[k]->numel * es; }
      i = j;
      /* the tensors of other dtypes inside [i, j) are handled in their own pass */
    }
  }
  for (int i = 0; i < n; i++) {
    nt_Tensor *y = wc[i]; wc[i] = NULL;
    if (op == NBD_AVG) {
      bool prev = nt_set_grad_enabled(false);
      nt_Tensor *a = nt_binary_scalar_ex(NT_OP_DIV, y, (double)G->world, NT_SCALAR_FLOAT);
      nt_set_grad_enabled(prev);
      nt_release(y); y = a;
      if (!y) goto done;
    }
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
  header_of(x, s->h);
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
unsigned nbD_isend_seq(int id) { return (id >= 0 && id < NBD_MAXASYNC) ? asends[id].seq : 0; }

/* waits until no isend on a link of the current group view is still
** writing (their handles stay valid for wait) */
void nbD_async_drain(void) {
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
