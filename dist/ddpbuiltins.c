/*
** ddpbuiltins.c — the builtins of the data-parallel reducer (dist/ddataparallel.c)
** that only check their arguments and call its API (ddataparallel.h):
** dist_reducer_register/_shard/_take/_zero_shards/_sync/_clear/_stats,
** wrapped by dist.data_parallel, dist.no_sync and dist.zero (stdlib/dist.nbl,
** stdlib/zero.nbl).  Offload's builtins, which reach into the reducer's
** state, stay in ddataparallel.c.
*/
#include <stdlib.h>
#include <string.h>
#include "tensor/tensor.h"
#include "dist/dgroup.h"
#include "dist/ddataparallel.h"

#define TV(v) ((nt_Tensor *)(v).u.p)
static int b_register(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_reducer_register";
  if (!nbD_self.g) return nb_error_kind(vm, "DistError", "dist.data_parallel: not running on a dist worker (run it on the workers with dist.exec/dist.run or `nabla run -n N`)");
  if (a[0].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a list of tensors", f);
  if (a[1].t != NB_TNUM || !(a[1].u.n > 0)) return nb_error_kind(vm, "ValueError", "dist.data_parallel: bucket_mb must be a positive number");
  int id;
  if (nbD_group_arg(vm, f, a[2], &id)) return NB_ERR;
  nb_List *l = nb_list(a[0]);
  nt_Tensor **ps = calloc((size_t)l->n + 1, sizeof *ps);
  if (!ps) return nb_error(vm, "out of memory");
  for (int i = 0; i < l->n; i++) {
    if (l->items[i].t != NB_TTENSOR) { free(ps); return nb_error_kind(vm, "TypeError", "%s: item %d is a %s, not a tensor", f, i, nb_typename(l->items[i])); }
    ps[i] = TV(l->items[i]);
  }
  int rc = nbD_reducer_register(ps, l->n, (size_t)(a[1].u.n * 1048576.0), id);
  free(ps);
  if (rc < 0) return nb_error_kind(vm, "DistError", "%s", nt_error_msg());
  *out = nb_int((double)rc);
  return NB_OK;
}
static int b_sync(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)vm; (void)n;
  *out = nb_bool(nbD_reducer_set_sync(nb_truthy(a[0])));
  return NB_OK;
}
static int b_clear(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)vm; (void)a; (void)n;
  nbD_reducer_clear();
  *out = nb_nil();
  return NB_OK;
}
static int b_stats(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)a; (void)n;
  int64_t np, nb, passes, ov, tot;
  nbD_reducer_stats(&np, &nb, &passes, &ov, &tot);
  nb_Rec *r = nbR_new(6);
  if (!r) return nb_error(vm, "out of memory");
  nbR_set_cstr(r, "params", nb_int((double)np));
  nbR_set_cstr(r, "buckets", nb_int((double)nb));
  nbR_set_cstr(r, "passes", nb_int((double)passes));
  nbR_set_cstr(r, "buckets_overlapped", nb_int((double)ov));
  nbR_set_cstr(r, "buckets_reduced", nb_int((double)tot));
  nbR_set_cstr(r, "buckets_on", nb_strv(nbS_cstr(nbD_reducer_on_device() ? "cuda" : "cpu")));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
/* dist_reducer_shard(lays, chunks, dtypes, bucket_mb, group): lays a list of
** lists of tensors; returns the registration id */
static int b_shard(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_reducer_shard";
  if (!nbD_self.g) return nb_error_kind(vm, "DistError", "dist.zero: not running on a dist worker");
  if (a[0].t != NB_TLIST || a[1].t != NB_TLIST || a[2].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected lists of tensor lists, chunks and dtypes", f);
  if (a[3].t != NB_TNUM || !(a[3].u.n > 0)) return nb_error_kind(vm, "ValueError", "dist.zero: bucket_mb must be a positive number");
  int id;
  if (nbD_group_arg(vm, f, a[4], &id)) return NB_ERR;
  nb_List *ls = nb_list(a[0]), *cs = nb_list(a[1]), *ds = nb_list(a[2]);
  int nl = ls->n;
  if (cs->n != nl || ds->n != nl) return nb_error_kind(vm, "ValueError", "%s: %d layouts, %d chunks, %d dtypes", f, nl, cs->n, ds->n);
  int total = 0;
  for (int i = 0; i < nl; i++) {
    if (ls->items[i].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: layout %d is a %s, not a list", f, i, nb_typename(ls->items[i]));
    if (cs->items[i].t != NB_TNUM || !(cs->items[i].u.n >= 1)) return nb_error_kind(vm, "ValueError", "%s: chunk %d must be a positive number", f, i);
    total += nb_list(ls->items[i])->n;
  }
  nt_Tensor **ps = calloc((size_t)total + 1, sizeof *ps);
  int *counts = calloc((size_t)nl + 1, sizeof *counts), *rdts = calloc((size_t)nl + 1, sizeof *rdts);
  int64_t *chunks = calloc((size_t)nl + 1, sizeof *chunks);
  if (!ps || !counts || !rdts || !chunks) { free(ps); free(counts); free(rdts); free(chunks); return nb_error(vm, "out of memory"); }
  int k = 0, bad = 0;
  for (int i = 0; i < nl && !bad; i++) {
    nb_List *l = nb_list(ls->items[i]);
    counts[i] = l->n;
    chunks[i] = (int64_t)cs->items[i].u.n;
    rdts[i] = ds->items[i].t == NB_TSTR && !strcmp(nb_str(ds->items[i])->data, "f64") ? DR_F64 : DR_F32;
    for (int j = 0; j < l->n; j++) {
      if (l->items[j].t != NB_TTENSOR || !nt_dtype_is_float(TV(l->items[j])->dtype)) { bad = 1; break; }
      ps[k++] = TV(l->items[j]);
    }
  }
  int rc = bad ? 0 : nbD_reducer_register_shards(ps, counts, chunks, rdts, nl, (size_t)(a[3].u.n * 1048576.0), id);
  free(ps); free(counts); free(rdts); free(chunks);
  if (bad) return nb_error_kind(vm, "TypeError", "%s: every item of a layout must be a floating-point tensor", f);
  if (rc < 0) return nb_error_kind(vm, "DistError", "%s", nt_error_msg());
  *out = nb_int((double)rc);
  return NB_OK;
}
static int b_take(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n;
  if (a[0].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "dist_reducer_take: expected a registration id");
  int nl = nbD_reducer_shard_count();
  nt_Tensor **ts = calloc((size_t)nl + 1, sizeof *ts);
  if (!ts) return nb_error(vm, "out of memory");
  int rc = nbD_reducer_take_shards((unsigned)a[0].u.n, ts);
  if (rc < 0) { free(ts); return nb_error_kind(vm, "DistError", "%s", nt_error_msg()); }
  if (rc == 0) { free(ts); *out = nb_nil(); return NB_OK; }
  nb_List *l = nbL_new(nl);
  if (!l) { for (int i = 0; i < nl; i++) nt_release(ts[i]); free(ts); return nb_error(vm, "out of memory"); }
  for (int i = 0; i < nl; i++) nbL_push(l, nb_obj(NB_TTENSOR, ts[i]));
  free(ts);
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_zero_shards(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n;
  if (a[0].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "dist_reducer_zero_shards: expected a registration id");
  nbD_reducer_zero_shards((unsigned)a[0].u.n);
  nbD_reducer_drop_host((unsigned)a[0].u.n);   /* offload's host copies go with the shards (stage 1: with .grad) */
  *out = nb_nil();
  return NB_OK;
}
static nb_Builtin reducer_builtins[] = {
  { "dist_reducer_register", b_register, "params, bucket_mb=25, group=nil",
    "dist_reducer_register(params, bucket_mb=25, group=nil): average these parameters' gradients over the group during every backward (use dist.data_parallel); returns the registration's id" },
  { "dist_reducer_sync", b_sync, "on", "dist_reducer_sync(on): turns the overlapped averaging on/off; returns the previous setting (use dist.no_sync)" },
  { "dist_reducer_shard", b_shard, "lays, chunks, dtypes, bucket_mb=25, group=nil",
    "dist_reducer_shard(lays, chunks, dtypes, bucket_mb=25, group=nil): reduce-scatter these layouts' gradients during every backward, each rank keeping its chunk (use dist.zero stage 2); returns an id" },
  { "dist_reducer_take", b_take, "id", "dist_reducer_take(id): the averaged gradient shards of the backward passes since the last take, one per layout (nil: none, or another registration)" },
  { "dist_reducer_zero_shards", b_zero_shards, "id", "dist_reducer_zero_shards(id): drops the gradient shards not yet taken" },
  { "dist_reducer_clear", b_clear, "", "dist_reducer_clear(): stops averaging gradients during backward" },
  { "dist_reducer_stats", b_stats, "", "dist_reducer_stats(): {params, buckets, passes, buckets_overlapped (handed over during backward), buckets_reduced, buckets_on (\"cuda\": CUDA buckets, reduced by NCCL or, for one GPU, by nobody; \"cpu\": host buffers, the ring)}" },
  { NULL, NULL, NULL, NULL },
};
void nbD_reducer_builtins_init(void) { nbC_register(reducer_builtins); }
