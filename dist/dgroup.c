/*
** dgroup.c — sub-groups of the ring (see dgroup.h) and the differentiable
** tensor-parallel region functions built on them (Megatron's conjugate
** pairs):
**   copy_to_group(x, g)          forward identity,          backward all_reduce(sum) over g
**   reduce_from_group(x, g)      forward all_reduce(sum),   backward identity
**   gather_from_group(x, ax, g)  forward all_gather on ax,  backward this rank's slice
**   scatter_to_group(x, ax, g)   forward this rank's slice, backward all_gather on ax
*/
#include <stdlib.h>
#include <string.h>
#include "tensor/textend.h"
#include "dist/dtensorcoll.h"
#include "dist/dgroup.h"
#include "tensor/tdevice.h"
#include "dist/dshm.h"
#include "dist/dhier.h"

typedef struct Grp {
  int n, me;            /* size; this rank's position (-1: not a member) */
  int *ranks, *fd;      /* world ranks in group order; fd scratch for the view */
  uint64_t sent, recv;  /* bytes this rank moved in this group */
  nt_CudaComm *nccl;    /* the group's NCCL communicator (dnccl.c; NULL until its first NCCL collective) */
  ds_Shm *shm;          /* members on one host: their segment (nbD_group_shm_prepare) */
  struct dh_Hier *hier; /* members on several hosts: their hierarchy (dhier.h) */
  uint32_t shm_gen;     /* the mesh generation it was made for */
  int shm_tried;
} Grp;

static Grp groups[NBD_MAXGROUPS];   /* ids 1..ngroups-1; 0 is the world */
static int ngroups = 1;
static int cur_id = 0;
static dr_Group *world_g = NULL;

int nbD_group_current(void) { return cur_id; }

int nbD_group_new(const int *ranks, int n) {
  if (n < 1) { nt_error_set("a group needs at least one rank"); return -1; }
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || (nbD_self.rank >= 0 && ranks[i] >= nbD_self.world)) { nt_error_set("rank %d is not a rank of the world (size %d)", ranks[i], nbD_self.world); return -1; }
    for (int j = 0; j < i; j++) if (ranks[j] == ranks[i]) { nt_error_set("rank %d is listed twice", ranks[i]); return -1; }
  }
  for (int id = 1; id < ngroups; id++)   /* the same list again: the same group */
    if (groups[id].n == n && !memcmp(groups[id].ranks, ranks, sizeof(int) * (size_t)n)) return id;
  if (ngroups >= NBD_MAXGROUPS) { nt_error_set("too many groups (%d)", NBD_MAXGROUPS); return -1; }
  Grp *g = &groups[ngroups];
  g->ranks = malloc(sizeof(int) * (size_t)n);
  g->fd = malloc(sizeof(int) * (size_t)n);
  if (!g->ranks || !g->fd) { free(g->ranks); free(g->fd); g->ranks = g->fd = NULL; nt_error_set("out of memory"); return -1; }
  memcpy(g->ranks, ranks, sizeof(int) * (size_t)n);
  g->n = n; g->me = -1; g->sent = g->recv = 0;
  for (int i = 0; i < n; i++) if (ranks[i] == nbD_self.rank) g->me = i;
  return ngroups++;
}

int nbD_group_enter(int id, nbD_Scope *s) {
  s->active = 0;
  if (id == cur_id) return 0;
  if (!nbD_self.g) { nt_error_set("not running on a dist worker"); return -1; }
  if (id < 0 || id >= ngroups) { nt_error_set("no group with id %d", id); return -1; }
  dr_Group *w = cur_id ? world_g : nbD_self.g;
  if (id) {
    Grp *gr = &groups[id];
    if (gr->me < 0) { nt_error_set("rank %d is not a member of the group (ranks %d..%d, size %d)", nbD_self.rank, gr->ranks[0], gr->ranks[gr->n - 1], gr->n); return -1; }
    for (int i = 0; i < gr->n; i++) gr->fd[i] = w->fd ? w->fd[gr->ranks[i]] : -1;
    dr_Group *v = &s->view;
    memset(v, 0, sizeof *v);
    v->rank = gr->me; v->world = gr->n; v->fd = gr->fd; v->listen_fd = -1;
    v->gen = w->gen; memcpy(v->key, w->key, sizeof v->key);
    v->timeout_ms = w->timeout_ms; v->interrupted = w->interrupted;
    v->broken = w->broken;
    if (w->broken) memcpy(v->err, w->err, sizeof v->err);
    v->nccl_world = w->nccl_world; v->nccl = w->nccl_world ? gr->nccl : NULL;
    v->world_rank = gr->ranks; v->group_id = id;
    v->chan = w->chan;   /* by world rank: the sub-group's pairs on one host use them too */
    v->shm = gr->shm_tried && gr->shm_gen == w->gen ? gr->shm : NULL;
    v->hier = gr->shm_tried && gr->shm_gen == w->gen ? gr->hier : NULL;
  }
  world_g = w;
  s->prev_id = cur_id; s->prev_g = nbD_self.g;
  nbD_self.g = id ? &s->view : w;
  cur_id = id;
  s->active = 1;
  return 0;
}

void nbD_group_leave(nbD_Scope *s) {
  if (!s->active) return;
  if (cur_id) {
    dr_Group *v = &s->view;
    Grp *gr = &groups[cur_id];
    gr->sent += v->bytes_sent; gr->recv += v->bytes_recv;
    world_g->bytes_sent += v->bytes_sent; world_g->bytes_recv += v->bytes_recv;
    if (v->broken && !world_g->broken) { world_g->broken = 1; memcpy(world_g->err, v->err, sizeof v->err); }
  }
  nbD_self.g = s->prev_g;
  cur_id = s->prev_id;
  s->active = 0;
}

/* The same-host fast path of a sub-group: at its first collective (every
** member calls it at the same point: SPMD) after each (re)connection, a group
** whose members all share a host maps its own segment (dshm.c), which its
** collectives then use as the world's do. */
int nbD_group_shm_prepare(void) {
  if (!cur_id) return 0;
  Grp *gr = &groups[cur_id];
  dr_Group *v = nbD_self.g;
  if (gr->shm_tried && gr->shm_gen == v->gen) return 0;
  if (gr->shm) { dr_Group old; memset(&old, 0, sizeof old); old.shm = gr->shm; ds_close(&old); gr->shm = NULL; }
  gr->shm_tried = 1; gr->shm_gen = v->gen;
  v->shm = NULL;
  if (gr->hier) { dr_Group old; memset(&old, 0, sizeof old); old.hier = gr->hier; dh_close(&old); gr->hier = NULL; }
  v->hier = NULL;
  if (gr->n < 2 || v->broken) return 0;
  int one = 1;
  for (int i = 1; i < gr->n; i++) if (!dh_same_host(gr->ranks[0], gr->ranks[i])) one = 0;
  if (one) {
    if (ds_setup(v)) return -1;
    gr->shm = v->shm;
    return 0;
  }
  /* members on several hosts: their own hierarchy (shared memory within each host) */
  int *host = malloc(sizeof(int) * (size_t)gr->n);
  if (!host) { nt_error_set("out of memory"); return -1; }
  for (int i = 0; i < gr->n; i++) host[i] = dh_host_of(gr->ranks[i]);
  int st = 0;
  for (int i = 0; i < gr->n; i++) if (host[i] < 0) st = 1;   /* the hosts are not known: the flat ring */
  if (!st) st = dh_build(v, host) ? -1 : 0;
  free(host);
  if (st < 0) return -1;
  gr->hier = v->hier;
  return 0;
}

void nbD_group_nccl_set(int id, nt_CudaComm *c) {
  if (id <= 0 || id >= ngroups) { nt_cuda_comm_abort(c); return; }
  if (groups[id].nccl && groups[id].nccl != c) nt_cuda_comm_abort(groups[id].nccl);
  groups[id].nccl = c;
}
void nbD_group_nccl_reset(void) {
  for (int id = 1; id < ngroups; id++) { nt_cuda_comm_abort(groups[id].nccl); groups[id].nccl = NULL; }
}

int nbD_group_arg(nb_VM *vm, const char *fname, nb_Value v, int *id) {
  *id = 0;
  if (v.t == NB_TNIL) return NB_OK;
  if (v.t == NB_TREC) {
    nb_Value x = nbR_get_cstr(nb_rec(v), "_id");
    if (x.t == NB_TUNDEF) return nb_error_kind(vm, "TypeError", "%s: group must be a group record (from dist.new_group or dist.mesh), got a record without _id", fname);
    v = x;
    if (v.t == NB_TNIL) return NB_OK;   /* dist.world_group() */
  }
  if (v.t != NB_TNUM || v.u.n != (int)v.u.n || v.u.n < 0 || v.u.n >= ngroups)
    return nb_error_kind(vm, "TypeError", "%s: group must be nil (the world) or a group from dist.new_group / dist.mesh", fname);
  *id = (int)v.u.n;
  return NB_OK;
}

/* ------------------------------------------------------------ autograd functions */
#define T(v) ((nt_Tensor *)(v).u.p)

static nt_Tensor *nograd_clone(nt_Tensor *x) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *y = nt_clone(x);
  nt_set_grad_enabled(prev);
  return y;
}
static int norm_axis(nt_Tensor *x, int axis) {
  if (axis < 0) axis += x->ndim;
  if (axis < 0 || axis >= x->ndim) { nt_error_set("axis out of range for a %d-d tensor", x->ndim); return -1; }
  return axis;
}

static int copy_bwd(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nbD_Scope sc;
  if (nbD_group_enter((int)n->iarg[0], &sc)) return -1;
  nbD_async_drain();
  gin[0] = nbD_all_reduce(g, NBD_SUM);
  nbD_group_leave(&sc);
  return gin[0] ? 0 : -1;
}
static nt_Tensor *copy_to_group(nt_Tensor *x, int id) {
  nt_Tensor *y = nograd_clone(x);
  if (y && nt_needs_grad(1, &x)) {
    nt_Node *n = nt_record(y, "CopyToGroupBackward", copy_bwd, 1, &x);
    if (!n) { nt_release(y); return NULL; }
    n->iarg[0] = id; n->niarg = 1;
  }
  return y;
}

static int ident_bwd(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) { (void)n; gin[0] = nt_retain(g); return 0; }
static nt_Tensor *reduce_from_group(nt_Tensor *x, int id) {
  nbD_Scope sc;
  if (nbD_group_enter(id, &sc)) return NULL;
  nbD_async_drain();
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *y = nbD_all_reduce(x, NBD_SUM);
  nt_set_grad_enabled(prev);
  nbD_group_leave(&sc);
  if (y && nt_needs_grad(1, &x)) {
    nt_Node *n = nt_record(y, "ReduceFromGroupBackward", ident_bwd, 1, &x);
    if (!n) { nt_release(y); return NULL; }
  }
  return y;
}

/* all_gather along `axis` (grad off); every rank's part must have the same size */
static nt_Tensor *gather_axis(nt_Tensor *x, int axis) {
  nbD_async_drain();
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *t = axis ? nt_transpose(x, 0, axis) : nt_retain(x), *c = t ? nt_contiguous(t) : NULL, *y = NULL;
  nt_release(t);
  nt_Tensor *a = c ? nbD_all_gather(c) : NULL;
  nt_release(c);
  if (a && a->shape[0] != x->shape[axis] * nbD_self.g->world) {
    nt_error_set("gather_from_group: the ranks' parts along axis %d differ in size", axis);
    nt_release(a); a = NULL;
  }
  if (a) { nt_Tensor *b = axis ? nt_transpose(a, 0, axis) : nt_retain(a); y = b ? nt_contiguous(b) : NULL; nt_release(b); }
  nt_release(a);
  nt_set_grad_enabled(prev);
  return y;
}
static nt_Tensor *slice_axis(nt_Tensor *x, int axis, int64_t start, int64_t len) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *v = nt_narrow(x, axis, start, len), *y = v ? nt_clone(v) : NULL;
  nt_release(v);
  nt_set_grad_enabled(prev);
  return y;
}

static int gather_bwd(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  gin[0] = slice_axis(g, (int)n->iarg[1], n->iarg[2], n->iarg[3]);
  return gin[0] ? 0 : -1;
}
static nt_Tensor *gather_from_group(nt_Tensor *x, int axis, int id) {
  if ((axis = norm_axis(x, axis)) < 0) return NULL;
  nbD_Scope sc;
  if (nbD_group_enter(id, &sc)) return NULL;
  int r = nbD_self.g->rank;
  nt_Tensor *y = gather_axis(x, axis);
  nbD_group_leave(&sc);
  if (y && nt_needs_grad(1, &x)) {
    nt_Node *n = nt_record(y, "GatherFromGroupBackward", gather_bwd, 1, &x);
    if (!n) { nt_release(y); return NULL; }
    n->iarg[0] = id; n->iarg[1] = axis; n->iarg[2] = (int64_t)r * x->shape[axis]; n->iarg[3] = x->shape[axis]; n->niarg = 4;
  }
  return y;
}

static int scatter_bwd(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nbD_Scope sc;
  if (nbD_group_enter((int)n->iarg[0], &sc)) return -1;
  gin[0] = gather_axis(g, (int)n->iarg[1]);
  nbD_group_leave(&sc);
  return gin[0] ? 0 : -1;
}
static nt_Tensor *scatter_to_group(nt_Tensor *x, int axis, int id) {
  if ((axis = norm_axis(x, axis)) < 0) return NULL;
  nbD_Scope sc;
  if (nbD_group_enter(id, &sc)) return NULL;
  int r = nbD_self.g->rank, w = nbD_self.g->world;
  nbD_group_leave(&sc);
  if (x->shape[axis] % w) { nt_error_set("scatter_to_group: axis %d of size %lld does not split into %d equal parts", axis, (long long)x->shape[axis], w); return NULL; }
  int64_t len = x->shape[axis] / w;
  nt_Tensor *y = slice_axis(x, axis, r * len, len);
  if (y && nt_needs_grad(1, &x)) {
    nt_Node *n = nt_record(y, "ScatterToGroupBackward", scatter_bwd, 1, &x);
    if (!n) { nt_release(y); return NULL; }
    n->iarg[0] = id; n->iarg[1] = axis; n->niarg = 2;
  }
  return y;
}


/* all_to_all of rows: x [N, ...] is cut along axis 0 into counts[0..w-1]
** rows for group positions 0..w-1; the result is what every position sent
** here, concatenated in position order.  Backward: the same exchange of the
** gradient with the received counts (saved in ctx) as the send counts. */
typedef struct A2ACtx { int id, w; int64_t counts[]; } A2ACtx;

static nt_Tensor *a2a_rows(nt_Tensor *x, const int64_t *counts, int64_t *rcounts) {
  int w = nbD_self.g->world;
  nbD_async_drain();
  nt_Tensor **xs = calloc((size_t)w * 2, sizeof *xs), **out = xs ? xs + w : NULL, *y = NULL;
  if (!xs) { nt_error_set("out of memory"); return NULL; }
  bool prev = nt_set_grad_enabled(false);
  int64_t off = 0;
  for (int i = 0; i < w; i++) {
    nt_Tensor *v = nt_narrow(x, 0, off, counts[i]);
    xs[i] = v ? nt_contiguous(v) : NULL;
    nt_release(v);
    if (!xs[i]) goto done;
    off += counts[i];
  }
  if (nbD_all_to_all(xs, out) == 0) {
    for (int i = 0; i < w; i++) rcounts[i] = out[i]->shape[0];
    y = nt_concat(out, w, 0);
  }
done:
  nt_set_grad_enabled(prev);
  for (int i = 0; i < 2 * w; i++) nt_release(xs[i]);
  free(xs);
  return y;
}
static int a2a_bwd(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  A2ACtx *c = n->ctx;
  nbD_Scope sc;
  if (nbD_group_enter(c->id, &sc)) return -1;
  int64_t *rc = malloc(sizeof(int64_t) * (size_t)c->w);
  gin[0] = rc ? a2a_rows(g, c->counts, rc) : NULL;
  if (!rc) nt_error_set("out of memory");
  free(rc);
  nbD_group_leave(&sc);
  return gin[0] ? 0 : -1;
}
static nt_Tensor *all_to_all_rows(nt_Tensor *x, const int64_t *counts, int nc, int id) {
  nbD_Scope sc;
  if (nbD_group_enter(id, &sc)) return NULL;
  int w = nbD_self.g->world;
  int64_t tot = 0;
  for (int i = 0; i < nc; i++) { if (counts[i] < 0) tot = INT64_MIN / 2; tot += counts[i]; }
  if (nc != w || x->ndim < 1 || tot != x->shape[0]) {
    nbD_group_leave(&sc);
    nt_error_set("counts must be %d non-negative row counts summing to the first axis (%lld)", w, x->ndim ? (long long)x->shape[0] : 0LL);
    return NULL;
  }
  A2ACtx *c = malloc(sizeof *c + sizeof(int64_t) * (size_t)w);
  if (!c) { nbD_group_leave(&sc); nt_error_set("out of memory"); return NULL; }
  c->id = id; c->w = w;
  nt_Tensor *y = a2a_rows(x, counts, c->counts);
  nbD_group_leave(&sc);
  if (y && nt_needs_grad(1, &x)) {
    nt_Node *n = nt_record(y, "AllToAllBackward", a2a_bwd, 1, &x);
    if (!n) { nt_release(y); free(c); return NULL; }
    n->ctx = c; n->ctx_free = free;
    return y;
  }
  free(c);
  return y;
}

/* ------------------------------------------------------------ builtins */
static int gerr(nb_VM *vm, const char *fname) {
  const char *m = nt_error_msg();
  if (nb_vm_interrupted(vm)) return nb_error_kind(vm, "Interrupted", "%s: interrupted", fname);
  return nb_error_kind(vm, "DistError", "%s: %s", fname, m && *m ? m : "failed");
}
static int need_tensor(nb_VM *vm, const char *fname, nb_Value v) {
  if (v.t == NB_TTENSOR) return NB_OK;
  return nb_error_kind(vm, "TypeError", "%s: expected a tensor, got %s", fname, nb_typename(v));
}
static int need_worker(nb_VM *vm, const char *fname) {
  if (nbD_self.g) return NB_OK;
  return nb_error_kind(vm, "DistError", "%s: not running on a dist worker (run it on the workers with dist.exec/dist.run or `nabla run -n N`)", fname);
}
static int axis_arg(nb_VM *vm, const char *fname, nb_Value v, int *axis) {
  if (v.t != NB_TNUM || v.u.n != (int)v.u.n) return nb_error_kind(vm, "TypeError", "%s: axis must be an integer", fname);
  *axis = (int)v.u.n;
  return NB_OK;
}
static int ret(nb_VM *vm, const char *fname, nt_Tensor *y, nb_Value *out) {
  if (!y) return gerr(vm, fname);
  *out = nb_obj(NB_TTENSOR, y);
  return NB_OK;
}

static int b_new_group(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist.new_group";
  if (a[0].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a list of ranks", f);
  nb_List *l = nb_list(a[0]);
  int *r = malloc(sizeof(int) * (size_t)(l->n ? l->n : 1));
  if (!r) return nb_error(vm, "out of memory");
  for (int i = 0; i < l->n; i++) {
    nb_Value v = l->items[i];
    if (v.t != NB_TNUM || v.u.n != (int)v.u.n) { free(r); return nb_error_kind(vm, "TypeError", "%s: ranks must be integers", f); }
    r[i] = (int)v.u.n;
  }
  int id = nbD_group_new(r, l->n);
  free(r);
  if (id < 0) return nb_error_kind(vm, "ValueError", "%s: %s", f, nt_error_msg());
  *out = nb_int(id);
  return NB_OK;
}
static int b_copy_to(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist.copy_to_group"; int id = 0;
  if (need_tensor(vm, f, a[0]) || nbD_group_arg(vm, f, a[1], &id)) return NB_ERR;
  return ret(vm, f, copy_to_group(T(a[0]), id), out);
}
static int b_reduce_from(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist.reduce_from_group"; int id = 0;
  if (need_worker(vm, f) || need_tensor(vm, f, a[0]) || nbD_group_arg(vm, f, a[1], &id)) return NB_ERR;
  return ret(vm, f, reduce_from_group(T(a[0]), id), out);
}
static int b_gather_from(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist.gather_from_group"; int id = 0, axis = -1;
  if (need_worker(vm, f) || need_tensor(vm, f, a[0]) || axis_arg(vm, f, a[1], &axis) || nbD_group_arg(vm, f, a[2], &id)) return NB_ERR;
  return ret(vm, f, gather_from_group(T(a[0]), axis, id), out);
}
static int b_scatter_to(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist.scatter_to_group"; int id = 0, axis = -1;
  if (need_worker(vm, f) || need_tensor(vm, f, a[0]) || axis_arg(vm, f, a[1], &axis) || nbD_group_arg(vm, f, a[2], &id)) return NB_ERR;
  return ret(vm, f, scatter_to_group(T(a[0]), axis, id), out);
}
static int b_a2a_rows(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist.all_to_all_rows"; int id = 0;
  if (need_worker(vm, f) || need_tensor(vm, f, a[0]) || nbD_group_arg(vm, f, a[2], &id)) return NB_ERR;
  if (a[1].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: counts must be a list of row counts", f);
  nb_List *l = nb_list(a[1]);
  int64_t *cs = malloc(sizeof(int64_t) * (size_t)(l->n ? l->n : 1));
  if (!cs) return nb_error(vm, "out of memory");
  for (int i = 0; i < l->n; i++) {
    nb_Value v = l->items[i];
    if (v.t != NB_TNUM || v.u.n != (int64_t)v.u.n) { free(cs); return nb_error_kind(vm, "TypeError", "%s: counts must be integers", f); }
    cs[i] = (int64_t)v.u.n;
  }
  nt_Tensor *y = all_to_all_rows(T(a[0]), cs, l->n, id);
  free(cs);
  return ret(vm, f, y, out);
}
static int b_bytes(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist.bytes"; int id = 0;
  if (need_worker(vm, f) || nbD_group_arg(vm, f, a[0], &id)) return NB_ERR;
  dr_Group *w = cur_id ? world_g : nbD_self.g;
  uint64_t s = id ? groups[id].sent : w->bytes_sent, r = id ? groups[id].recv : w->bytes_recv;
  nb_List *l = nbL_new(2);
  nbL_push(l, nb_int((double)s)); nbL_push(l, nb_int((double)r));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

static nb_Builtin group_builtins[] = {
  { "dist_new_group", b_new_group, "ranks", "dist_new_group(ranks): the id of a group of these world ranks (no communication; use dist.new_group)" },
  { "dist_copy_to_group", b_copy_to, "x, group=nil", "dist.copy_to_group(x, group): identity forward, all_reduce(sum) of the gradient over group backward" },
  { "dist_reduce_from_group", b_reduce_from, "x, group=nil", "dist.reduce_from_group(x, group): all_reduce(sum) over group forward, identity backward" },
  { "dist_gather_from_group", b_gather_from, "x, axis=-1, group=nil", "dist.gather_from_group(x, axis=-1, group): the group's parts concatenated along axis; backward keeps this rank's slice" },
  { "dist_scatter_to_group", b_scatter_to, "x, axis=-1, group=nil", "dist.scatter_to_group(x, axis=-1, group): this rank's equal slice of x along axis; backward all-gathers" },
  { "dist_all_to_all_rows", b_a2a_rows, "x, counts, group=nil", "dist.all_to_all_rows(x, counts, group=nil): rows of x cut by counts (one per group position) are exchanged; the rows every position sent here, in position order. Differentiable (backward: the reverse exchange)" },
  { "dist_bytes", b_bytes, "group=nil", "dist.bytes(group=nil): [sent, received] bytes this rank moved (in the world, or in one group)" },
  { NULL, NULL, NULL, NULL },
};

void nbD_compress_init(void);   /* dcompress.c */
void nbD_zero_init(void);       /* dzero.c */
void nbD_magic_init(void);      /* dmagic.c */
void nbD_group_init(void) { nbC_register(group_builtins); nbD_compress_init(); nbD_zero_init(); nbD_magic_init(); }
