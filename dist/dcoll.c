/*
** dcoll.c — the builtins worker code calls: rank/world queries, the
** collectives (all_reduce, all_gather, reduce_scatter, broadcast, send,
** recv, barrier, all_to_all), the bucketed gradient all_reduce and the
** distributed sampler.  Registered both as dist_NAME (wrapped by
** stdlib/dist.nbl) and, for the collectives, under their bare names.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dtensorcoll.h"
#include "dist/dgroup.h"
#include "dist/dnccl.h"
#include "tensor/tdevice.h"
#include "dist/dshm.h"
#include "dist/ddataparallel.h"
#include "dist/ddesync.h"

nbD_Self nbD_self = { -1, 0, -1, NULL };

#define T(v) ((nt_Tensor *)(v).u.p)

static int derr(nb_VM *vm, const char *fname) {
  const char *m = nt_error_msg();
  if (nb_vm_interrupted(vm)) return nb_error_kind(vm, "Interrupted", "%s: interrupted", fname);
  return nb_error_kind(vm, "DistError", "%s: %s", fname, m && *m ? m : "failed");
}
static int need_worker(nb_VM *vm, const char *fname) {
  if (nbD_self.g) return 0;
  return nb_error_kind(vm, "DistError", "%s: not running on a dist worker (run it on the workers with dist.exec/dist.run or `nabla run -n N`)", fname);
}
static int parse_op(nb_VM *vm, const char *fname, nb_Value v, int *op) {
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: op must be a string (\"sum\", \"avg\", \"max\", \"min\")", fname);
  const char *s = nb_str(v)->data;
  if (!strcmp(s, "sum")) *op = NBD_SUM;
  else if (!strcmp(s, "avg") || !strcmp(s, "mean")) *op = NBD_AVG;
  else if (!strcmp(s, "max")) *op = NBD_MAX;
  else if (!strcmp(s, "min")) *op = NBD_MIN;
  else return nb_error_kind(vm, "ValueError", "%s: unknown op \"%s\" (expected \"sum\", \"avg\", \"max\" or \"min\")", fname, s);
  return NB_OK;
}
static int rank_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int *r) {
  if (v.t != NB_TNUM || v.u.n != (int)v.u.n) return nb_error_kind(vm, "TypeError", "%s: %s must be an integer rank", fname, what);
  *r = (int)v.u.n;
  if (*r < 0 || *r >= nbD_self.g->world) return nb_error_kind(vm, "ValueError", "%s: %s %d is not a rank of this group (size %d)", fname, what, *r, nbD_self.g->world);
  return NB_OK;
}
/* a number becomes a 0-d f64 tensor (and the result a number again); with
** keep_int an int travels as i64, so the result (a broadcast's too, on the
** ranks that did not send it) is an int again */
static int tensor_arg_k(nb_VM *vm, const char *fname, nb_Value v, nt_Tensor **t, bool *was_num, bool keep_int) {
  *was_num = false;
  if (v.t == NB_TTENSOR) { *t = nt_retain(T(v)); return NB_OK; }
  if (v.t == NB_TNUM) {
    bool isint = keep_int && !nb_isfloat(v) && fabs(v.u.n) < 9007199254740992.0;
    *t = nt_scalar(v.u.n, isint ? NT_I64 : NT_F64); *was_num = true; return *t ? NB_OK : derr(vm, fname);
  }
  return nb_error_kind(vm, "TypeError", "%s: expected a tensor or a number, got %s", fname, nb_typename(v));
}
static int tensor_arg(nb_VM *vm, const char *fname, nb_Value v, nt_Tensor **t, bool *was_num) { return tensor_arg_k(vm, fname, v, t, was_num, false); }
static int ret_tensor(nb_VM *vm, const char *fname, nt_Tensor *y, bool as_num, nb_Value *out) {
  if (!y) return derr(vm, fname);
  if (as_num && y->numel == 1) {
    double d; nt_item(y, &d);
    *out = nt_dtype_is_float(y->dtype) ? nb_flt(d) : nb_int(d);
    nt_release(y); return NB_OK;
  }
  *out = nb_obj(NB_TTENSOR, y);
  return NB_OK;
}

static int b_rank(nb_VM *vm, nb_Value *a, int n, nb_Value *out) { (void)vm; (void)a; (void)n; *out = nbD_self.rank >= 0 ? nb_int(nbD_self.rank) : nb_nil(); return NB_OK; }
static int b_world(nb_VM *vm, nb_Value *a, int n, nb_Value *out) { (void)vm; (void)a; (void)n; *out = nbD_self.rank >= 0 ? nb_int(nbD_self.world) : nb_nil(); return NB_OK; }
static int b_local_rank(nb_VM *vm, nb_Value *a, int n, nb_Value *out) { (void)vm; (void)a; (void)n; *out = nbD_self.rank >= 0 ? nb_int(nbD_self.local_rank) : nb_nil(); return NB_OK; }
static int b_is_worker(nb_VM *vm, nb_Value *a, int n, nb_Value *out) { (void)vm; (void)a; (void)n; *out = nb_bool(nbD_self.g != NULL); return NB_OK; }

static int b_all_reduce(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "all_reduce"; int op = 0; nt_Tensor *x = NULL; bool num = false;
  if (need_worker(vm, f) || parse_op(vm, f, a[1], &op)) return NB_ERR;
  if (tensor_arg_k(vm, f, a[0], &x, &num, op != NBD_AVG)) return NB_ERR;   /* ints sum to an int; an average is a float */
  nt_Tensor *y = nbD_all_reduce(x, op);
  nt_release(x);
  return ret_tensor(vm, f, y, num, out);
}
static int b_all_gather(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "all_gather"; nt_Tensor *x = NULL; bool num = false;
  if (need_worker(vm, f) || tensor_arg(vm, f, a[0], &x, &num)) return NB_ERR;
  nt_Tensor *y = nbD_all_gather(x);
  nt_release(x);
  return ret_tensor(vm, f, y, false, out);
}
static int b_reduce_scatter(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "reduce_scatter"; int op = 0; nt_Tensor *x = NULL; bool num = false;
  if (need_worker(vm, f) || parse_op(vm, f, a[1], &op) || tensor_arg(vm, f, a[0], &x, &num)) return NB_ERR;
  nt_Tensor *y = nbD_reduce_scatter(x, op);
  nt_release(x);
  return ret_tensor(vm, f, y, false, out);
}
static int b_broadcast(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "broadcast"; int src = 0; nt_Tensor *x = NULL; bool num = false;
  if (need_worker(vm, f) || rank_arg(vm, f, "src", a[1], &src)) return NB_ERR;
  if (nbD_self.rank == src || a[0].t != NB_TNIL) { if (tensor_arg_k(vm, f, a[0], &x, &num, true)) return NB_ERR; }
  nt_Tensor *y = nbD_broadcast(x, src);
  nt_release(x);
  return ret_tensor(vm, f, y, num, out);
}
static int b_broadcast_(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_broadcast_"; int src = 0;
  if (need_worker(vm, f) || rank_arg(vm, f, "src", a[1], &src)) return NB_ERR;
  if (a[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor", f);
  if (nbD_broadcast_(T(a[0]), src)) return derr(vm, f);
  nb_incref(a[0]); *out = a[0];
  return NB_OK;
}
static int b_send(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "send"; int dst = 0; nt_Tensor *x = NULL; bool num = false;
  if (need_worker(vm, f) || rank_arg(vm, f, "dst", a[1], &dst) || tensor_arg(vm, f, a[0], &x, &num)) return NB_ERR;
  int st = nbD_send(x, dst);
  nt_release(x);
  if (st) return derr(vm, f);
  *out = nb_nil();
  return NB_OK;
}
static int b_isend(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "isend"; int dst = 0; nt_Tensor *x = NULL; bool num = false;
  if (need_worker(vm, f) || rank_arg(vm, f, "dst", a[1], &dst) || tensor_arg(vm, f, a[0], &x, &num)) return NB_ERR;
  int id = nbD_isend(x, dst);
  nt_release(x);
  if (id < 0) return derr(vm, f);
  nb_List *l = nbL_new(2);
  nbL_push(l, nb_int(id)); nbL_push(l, nb_int(nbD_isend_seq(id)));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_isend_wait(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "wait";
  if (a[0].t != NB_TNUM || a[1].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: expected an isend handle", f);
  if (nbD_isend_wait((int)a[0].u.n, (unsigned)a[1].u.n)) return derr(vm, f);
  *out = nb_nil();
  return NB_OK;
}
static int b_isend_test(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "test";
  if (a[0].t != NB_TNUM || a[1].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: expected an isend handle", f);
  int st = nbD_isend_test((int)a[0].u.n, (unsigned)a[1].u.n);
  if (st < 0) return derr(vm, f);
  *out = nb_bool(st);
  return NB_OK;
}
static int b_recv_ready(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "test"; int src = 0;
  if (need_worker(vm, f) || rank_arg(vm, f, "src", a[0], &src)) return NB_ERR;
  int st = nbD_recv_ready(src);
  if (st < 0) return derr(vm, f);
  *out = nb_bool(st);
  return NB_OK;
}
static int b_recv(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "recv"; int src = 0;
  if (need_worker(vm, f) || rank_arg(vm, f, "src", a[0], &src)) return NB_ERR;
  return ret_tensor(vm, f, nbD_recv(src), false, out);
}
static int b_barrier(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)a; (void)n; const char *f = "barrier";
  if (need_worker(vm, f)) return NB_ERR;
  /* under NCCL the barrier also waits for this rank's queued GPU work, so
  ** "every rank passed the barrier" means its kernels are done too (timing) */
  if (dn_on(nbD_self.g) && nt_cuda_synchronize()) return nb_error_kind(vm, "DistError", "barrier: %s", nt_error_msg());
  int64_t one = 1;
  if (nbD_group_shm_prepare() || dd_check(nbD_self.g, "barrier()") || dr_all_reduce(nbD_self.g, &one, 1, DR_I64, DR_SUM)) return nb_vm_interrupted(vm) ? nb_error_kind(vm, "Interrupted", "barrier: interrupted") : nb_error_kind(vm, "DistError", "barrier: %s", nbD_self.g->err);
  *out = nb_nil();
  return NB_OK;
}
static int b_all_to_all(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "all_to_all";
  if (need_worker(vm, f)) return NB_ERR;
  int w = nbD_self.g->world;
  if (a[0].t != NB_TLIST || nb_list(a[0])->n != w) return nb_error_kind(vm, "TypeError", "%s: expected a list of %d tensors (one per rank)", f, w);
  nt_Tensor **xs = calloc((size_t)w * 2, sizeof *xs);
  if (!xs) return nb_error(vm, "out of memory");
  bool num = false;
  for (int i = 0; i < w; i++) if (tensor_arg(vm, f, nb_list(a[0])->items[i], &xs[i], &num)) { for (int k = 0; k < i; k++) nt_release(xs[k]); free(xs); return NB_ERR; }
  int st = nbD_all_to_all(xs, xs + w);
  for (int i = 0; i < w; i++) nt_release(xs[i]);
  if (st) { free(xs); return derr(vm, f); }
  nb_List *l = nbL_new(w);
  for (int i = 0; i < w; i++) nbL_push(l, nb_obj(NB_TTENSOR, xs[w + i]));
  free(xs);
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_coalesced(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_all_reduce_coalesced"; int op = 0;
  if (need_worker(vm, f) || parse_op(vm, f, a[1], &op)) return NB_ERR;
  if (a[0].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a list of tensors", f);
  if (a[2].t != NB_TNUM || a[2].u.n <= 0) return nb_error_kind(vm, "TypeError", "%s: bucket_mb must be a positive number", f);
  nb_List *l = nb_list(a[0]);
  int m = l->n;
  for (int i = 0; i < m; i++) if (l->items[i].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: item %d is a %s, not a tensor", f, i, nb_typename(l->items[i]));
  nt_Tensor **xs = calloc((size_t)m * 2 + 1, sizeof *xs);
  if (!xs) return nb_error(vm, "out of memory");
  for (int i = 0; i < m; i++) xs[i] = T(l->items[i]);
  if (nbD_all_reduce_coalesced(xs, m, op, (size_t)(a[2].u.n * 1048576.0), xs + m)) { free(xs); return derr(vm, f); }
  nb_List *r = nbL_new(m);
  for (int i = 0; i < m; i++) nbL_push(r, nb_obj(NB_TTENSOR, xs[m + i]));
  free(xs);
  *out = nb_obj(NB_TLIST, r);
  return NB_OK;
}

/* the distributed sampler: a permutation of 0..n-1 from (seed, epoch) that
** every rank computes identically (its own generator: the user's RNG stream
** is untouched), padded by wrapping to a multiple of world, then every
** world-th index from rank on — as torch's DistributedSampler */
static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int b_shard(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_shard";
  for (int i = 0; i < 3; i++) if (a[i].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: n, epoch and seed must be numbers", f);
  int rank = nbD_self.rank >= 0 ? nbD_self.rank : 0, world = nbD_self.rank >= 0 ? nbD_self.world : 1;
  if (a[3].t == NB_TNUM) rank = (int)a[3].u.n;
  if (a[4].t == NB_TNUM) world = (int)a[4].u.n;
  int64_t N = (int64_t)a[0].u.n;
  if (N < 0 || world < 1 || rank < 0 || rank >= world) return nb_error_kind(vm, "ValueError", "%s: bad n/rank/world", f);
  int shuffle = a[5].t == NB_TNIL || nb_truthy(a[5]);
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)(N ? N : 1));
  if (!perm) return nb_error(vm, "out of memory");
  for (int64_t i = 0; i < N; i++) perm[i] = i;
  if (shuffle) {
    uint64_t s = (uint64_t)(int64_t)a[2].u.n * 0x100000001b3ull + (uint64_t)(int64_t)a[1].u.n;
    for (int64_t i = N - 1; i > 0; i--) { int64_t j = (int64_t)(splitmix(&s) % (uint64_t)(i + 1)); int64_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
  }
  int64_t per = N ? (N + world - 1) / world : 0;
  int64_t *mine = malloc(sizeof(int64_t) * (size_t)(per ? per : 1));
  if (!mine) { free(perm); return nb_error(vm, "out of memory"); }
  for (int64_t k = 0; k < per; k++) mine[k] = perm[(rank + k * world) % N];
  int64_t shape[1] = { per };
  nt_Tensor *t = nt_from_buffer(mine, NT_I64, shape, 1, NT_I64);
  free(perm); free(mine);
  if (!t) return derr(vm, f);
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* group=: the call runs on that sub-group (dgroup.c); a[gi] is the group argument */
static int in_group(nb_VM *vm, nb_Value *a, int n, nb_Value *out, int gi, const char *f, nb_CFunc inner) {
  int id; nbD_Scope sc;
  if (nbD_group_arg(vm, f, a[gi], &id)) return NB_ERR;
  if (id && need_worker(vm, f)) return NB_ERR;
  if (nbD_group_enter(id, &sc)) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
  if (inner != b_recv && inner != b_isend && inner != b_recv_ready) nbD_async_drain();   /* sends on a link stay in order */
  int st = inner(vm, a, n, out);
  nbD_group_leave(&sc);
  return st;
}
#define GROUPED(name, gi) static int name##_g(nb_VM *vm, nb_Value *a, int n, nb_Value *out) { return in_group(vm, a, n, out, gi, #name + 2, name); }
GROUPED(b_all_reduce, 2) GROUPED(b_all_gather, 1) GROUPED(b_reduce_scatter, 2) GROUPED(b_broadcast, 2) GROUPED(b_broadcast_, 2)
GROUPED(b_send, 2) GROUPED(b_isend, 2) GROUPED(b_recv, 1) GROUPED(b_barrier, 0) GROUPED(b_all_to_all, 1) GROUPED(b_coalesced, 3)
GROUPED(b_recv_ready, 1)

static nb_Builtin coll_builtins[] = {
  { "dist_rank", b_rank, "", "dist.rank(): this worker's rank (nil outside workers)" },
  { "dist_world_size", b_world, "", "dist.world_size(): the number of workers (nil outside workers)" },
  { "dist_local_rank", b_local_rank, "", "dist.local_rank(): the rank among the workers on this host" },
  { "dist_is_worker", b_is_worker, "", "dist.is_worker(): whether this code runs on a dist worker" },
  { "all_reduce", b_all_reduce_g, "x, op=\"sum\", group=nil", "all_reduce(x, op=\"sum\"): x reduced over every rank (sum, avg, max, min); differentiable for sum/avg" },
  { "all_gather", b_all_gather_g, "x, group=nil", "all_gather(x): every rank's x concatenated along the first axis, in rank order; differentiable" },
  { "reduce_scatter", b_reduce_scatter_g, "x, op=\"sum\", group=nil", "reduce_scatter(x, op=\"sum\"): the reduction of x over ranks, split along the first axis; this rank's part; differentiable for sum/avg" },
  { "broadcast", b_broadcast_g, "x, src=0, group=nil", "broadcast(x, src=0): rank src's x on every rank (others may pass nil)" },
  { "send", b_send_g, "x, dst, group=nil", "send(x, dst): sends tensor x to rank dst (which calls recv)" },
  { "dist_isend", b_isend_g, "x, dst, group=nil", "dist_isend(x, dst, group=nil): starts a background send; [id, seq] for dist_isend_wait (use dist.isend)" },
  { "dist_isend_wait", b_isend_wait, "id, seq", "dist_isend_wait(id, seq): completes a dist_isend" },
  { "dist_isend_test", b_isend_test, "id, seq", "dist_isend_test(id, seq): whether a dist_isend finished (its wait will not block)" },
  { "dist_recv_ready", b_recv_ready_g, "src, group=nil", "dist_recv_ready(src, group=nil): whether a message from src has begun to arrive (irecv's test)" },
  { "recv", b_recv_g, "src, group=nil", "recv(src): receives the tensor rank src sends (shape and dtype travel with it)" },
  { "barrier", b_barrier_g, "group=nil", "barrier(): waits until every rank reaches it" },
  { "all_to_all", b_all_to_all_g, "xs, group=nil", "all_to_all(xs): xs[j] goes to rank j; returns the list of what each rank sent here" },
  { "dist_all_reduce", b_all_reduce_g, "x, op=\"sum\", group=nil", "dist.all_reduce(x, op=\"sum\")" },
  { "dist_all_gather", b_all_gather_g, "x, group=nil", "dist.all_gather(x)" },
  { "dist_reduce_scatter", b_reduce_scatter_g, "x, op=\"sum\", group=nil", "dist.reduce_scatter(x, op=\"sum\")" },
  { "dist_broadcast", b_broadcast_g, "x, src=0, group=nil", "dist.broadcast(x, src=0)" },
  { "dist_broadcast_", b_broadcast__g, "x, src=0, group=nil", "dist_broadcast_(x, src=0): overwrites tensor x in place with rank src's values" },
  { "dist_send", b_send_g, "x, dst, group=nil", "dist.send(x, dst)" },
  { "dist_recv", b_recv_g, "src, group=nil", "dist.recv(src)" },
  { "dist_barrier", b_barrier_g, "group=nil", "dist.barrier()" },
  { "dist_all_to_all", b_all_to_all_g, "xs, group=nil", "dist.all_to_all(xs)" },
  { "dist_all_reduce_coalesced", b_coalesced_g, "xs, op=\"avg\", bucket_mb=25, group=nil", "dist_all_reduce_coalesced(xs, op=\"avg\", bucket_mb=25): all_reduce of a list of tensors packed into buckets" },
  { "dist_shard", b_shard, "n, epoch=0, seed=0, rank=nil, world=nil, shuffle=true", "dist.shard(n, epoch=0, seed=0): this rank's indices of a shuffled epoch of n examples (an i64 tensor)" },
  { NULL, NULL, NULL, NULL },
};

void nbD_coll_init(void) { nbC_register(coll_builtins); nbD_group_init(); nbD_shm_init(); nbD_reducer_init(); }
