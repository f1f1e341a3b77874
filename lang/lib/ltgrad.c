/*
** ltgrad.c — the builtins around training: pytrees, backward/grad/
** value_and_grad/gradcheck, autocast blocks, activation checkpointing, fused
** optimizer updates and gradient unscaling, checkpoints and data files
** (safetensors, npy/npz, csv).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ltensor.h"
#include "tensor/tinternal.h"   /* the checkpoint node is a custom autograd op */
#include "tensor/io/iotypes.h"
#include "tensor/io/safetensors.h"
#include "tensor/io/npy.h"
#include "tensor/io/csv.h"
#include "tensor/tdevice.h"

/* ------------------------------------------------------------ pytrees
** Nested records and lists whose leaves are tensors (models, optimizer
** state, gradients).  Non-tensor leaves (functions, numbers) are kept. */
#define MAX_TREE_DEPTH 64
typedef int (*LeafFn)(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out);
/* path: the containers being walked; one met again contains itself: an
** error that says so (not "nested too deeply" MAX_TREE_DEPTH levels on) */
static int tree_map(nb_VM *vm, nb_Value v, LeafFn fn, void *ctx, nb_Value *out, int depth, const void **path) {
  if (depth > MAX_TREE_DEPTH) return nb_error_kind(vm, "ValueError", "tree is nested more than %d deep", MAX_TREE_DEPTH);
  if (v.t == NB_TLIST || v.t == NB_TREC) {
    for (int i = 0; i < depth; i++)
      if (path[i] == v.u.p) return nb_error_kind(vm, "ValueError", "tree: the %s contains itself", nb_typename(v));
    path[depth] = v.u.p;
  }
  if (v.t == NB_TLIST) {
    nb_List *l = v.u.p, *r = nbL_new(l->n);
    for (int i = 0; i < l->n; i++) {
      nb_Value x;
      if (tree_map(vm, l->items[i], fn, ctx, &x, depth + 1, path)) { nb_decref(nb_obj(NB_TLIST, r)); return NB_ERR; }
      nbL_push(r, x);
    }
    *out = nb_obj(NB_TLIST, r); return NB_OK;
  }
  if (v.t == NB_TREC) {
    nb_Rec *rec = v.u.p, *r = nbR_new(rec->n);
    for (int i = 0; i < rec->n; i++) {
      nb_Value x;
      if (tree_map(vm, rec->vals[i], fn, ctx, &x, depth + 1, path)) { nb_decref(nb_obj(NB_TREC, r)); return NB_ERR; }
      nbR_set(r, rec->keys[i], x);
    }
    *out = nb_obj(NB_TREC, r); return NB_OK;
  }
  return fn(vm, ctx, v, out);
}
static int tree_walk(nb_VM *vm, nb_Value v, LeafFn fn, void *ctx, nb_Value *out) {
  const void *path[MAX_TREE_DEPTH + 2];
  return tree_map(vm, v, fn, ctx, out, 0, path);
}
/* Tensor leaves in order (borrowed). */
typedef struct Leaves { nt_Tensor **t; int n, cap; } Leaves;
static int collect_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  Leaves *ls = ctx;
  if (leaf.t == NB_TTENSOR) {
    if (ls->n == ls->cap) { ls->cap = ls->cap ? ls->cap * 2 : 16; ls->t = realloc(ls->t, sizeof(nt_Tensor *) * (size_t)ls->cap); if (!ls->t) return nb_error(vm, "out of memory"); }
    ls->t[ls->n++] = T(leaf);
  }
  *out = nb_nil();
  return NB_OK;
}
static int leaves(nb_VM *vm, nb_Value tree, Leaves *ls) {
  nb_Value junk = nb_nil();
  if (tree_walk(vm, tree, collect_leaf, ls, &junk)) return NB_ERR;
  nb_decref(junk);
  return NB_OK;
}

/* ---- ties
** One tensor may sit at several places of a model (GPT-2's token embedding
** is also its output projection).  It is ONE parameter: grad() hands f the
** same fresh leaf at every place (so the gradient there is the total, the
** same tensor at each place), optimizers update it once with one state,
** clipping and unscaling count and scale it once, nn.parameters lists it
** once.  IdMap maps a tensor (by identity) to a value: open addressing on
** the pointer, grown at half load. */
typedef struct IdMap { const void **key; void **val; size_t cap, n; } IdMap;
static size_t id_hash(const void *p) { uintptr_t x = (uintptr_t)p; x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; return (size_t)x; }
/* the slot of key k (NULL when out of memory); *found says whether it was there */
static void **idmap_slot(IdMap *m, const void *k, bool *found) {
  if (2 * (m->n + 1) > m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 64;
    IdMap g = { calloc(nc, sizeof(void *)), calloc(nc, sizeof(void *)), nc, 0 };
    if (!g.key || !g.val) { free(g.key); free(g.val); return NULL; }
    for (size_t i = 0; i < m->cap; i++)
      if (m->key[i]) {
        size_t j = id_hash(m->key[i]) & (nc - 1);
        while (g.key[j]) j = (j + 1) & (nc - 1);
        g.key[j] = m->key[i]; g.val[j] = m->val[i]; g.n++;
      }
    free(m->key); free(m->val);
    *m = g;
  }
  size_t j = id_hash(k) & (m->cap - 1);
  while (m->key[j] && m->key[j] != k) j = (j + 1) & (m->cap - 1);
  *found = m->key[j] != NULL;
  if (!*found) { m->key[j] = k; m->val[j] = NULL; m->n++; }
  return &m->val[j];
}
static void idmap_free(IdMap *m) { free(m->key); free(m->val); m->key = NULL; m->val = NULL; m->cap = m->n = 0; }

/* Drops from ls[0] every tensor already seen at an earlier place, and the
** same places from the aligned lists ls[1..n) (state and gradient trees
** shaped like the parameters); lists with n == 0 entries are left alone. */
static int drop_ties(nb_VM *vm, Leaves *ls, int nlists) {
  IdMap seen = {0};
  int w = 0;
  for (int k = 0; k < ls[0].n; k++) {
    bool found;
    if (!idmap_slot(&seen, ls[0].t[k], &found)) { idmap_free(&seen); return nb_error(vm, "out of memory"); }
    if (found) continue;
    for (int i = 0; i < nlists; i++) if (ls[i].n) ls[i].t[w] = ls[i].t[k];
    w++;
  }
  for (int i = 0; i < nlists; i++) if (ls[i].n) ls[i].n = w;
  idmap_free(&seen);
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: autograd */
static int b_backward(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "backward"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "loss");
  nt_Tensor *g = NULL;
  if (args[1].t != NB_TNIL && !(g = nbT_arg(vm, &tp, fname, "grad", args[1]))) { nbT_tmp_free(&tp); return NB_ERR; }
  int rc = nt_backward(x, g, nb_truthy(args[2]));
  nbT_tmp_free(&tp);
  if (rc) return nbT_err(vm);
  *out = nb_nil();
  return NB_OK;
}
/* tree_tensors(tree): the distinct tensors of a tree in order of first
** appearance (a tied tensor once): nn.parameters. */
static int b_tree_tensors(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (leaves(vm, args[0], &ls) || drop_ties(vm, &ls, 1)) { free(ls.t); return NB_ERR; }
  nb_List *l = nbL_new(ls.n);
  for (int k = 0; k < ls.n; k++) nbL_push(l, nb_obj(NB_TTENSOR, nt_retain(ls.t[k])));
  free(ls.t);
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

/* same(a, b): identity, Python's `a is b`: the same tensor, list, record,
** function or string object; numbers, bools and nil by value. */
static int b_same(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)n;
  nb_Value a = args[0], b = args[1];
  bool r = a.t == b.t && (a.t == NB_TNIL || (a.t == NB_TNUM ? a.u.n == b.u.n : a.t == NB_TBOOL ? a.u.b == b.u.b : a.u.p == b.u.p));
  *out = nb_bool(r);
  return NB_OK;
}

/* map_tensors(tree, f): a tree of the same structure with f(t) at each
** tensor leaf and nil at other leaves; a tensor tied at several places is
** mapped once and its one result stands at all of them (optimizer state of
** a tied parameter is one state). */
typedef struct MapCtx { nb_Value f; IdMap done; } MapCtx;
static int map_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  MapCtx *c = ctx;
  *out = nb_nil();
  if (leaf.t != NB_TTENSOR) return NB_OK;
  bool found;
  void **slot = idmap_slot(&c->done, T(leaf), &found);
  if (!slot) return nb_error(vm, "out of memory");
  if (found) { *out = *(nb_Value *)*slot; nb_incref(*out); return NB_OK; }
  nb_Value *r = malloc(sizeof *r);
  if (!r) { c->done.n--; c->done.key[slot - c->done.val] = NULL; return nb_error(vm, "out of memory"); }
  if (nbV_call(vm, c->f, &leaf, 1, r)) { free(r); c->done.n--; c->done.key[slot - c->done.val] = NULL; return NB_ERR; }
  *slot = r;
  *out = *r; nb_incref(*out);
  return NB_OK;
}
static int b_map_tensors(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  MapCtx c = { args[1], {0} };
  int st = tree_walk(vm, args[0], map_leaf, &c, out);
  for (size_t i = 0; i < c.done.cap; i++)
    if (c.done.key[i]) { nb_decref(*(nb_Value *)c.done.val[i]); free(c.done.val[i]); }
  idmap_free(&c.done);
  return st;
}

static int b_zero_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (leaves(vm, args[0], &ls)) { free(ls.t); return NB_ERR; }
  for (int i = 0; i < ls.n; i++) nt_set_grad(ls.t[i], NULL);
  free(ls.t);
  *out = nb_nil();
  return NB_OK;
}
static int b_requires_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (leaves(vm, args[0], &ls)) { free(ls.t); return NB_ERR; }
  bool on = args[1].t == NB_TNIL ? true : nb_truthy(args[1]);
  for (int i = 0; i < ls.n; i++) if (nt_dtype_is_float(ls.t[i]->dtype) && nt_set_requires_grad(ls.t[i], on)) { free(ls.t); return nbT_err(vm); }
  free(ls.t);
  nb_incref(args[0]); *out = args[0];
  return NB_OK;
}
static int b_no_grad_enabled(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; *out = nb_bool(nt_grad_enabled()); return NB_OK; }

/* grad(f, argnums=0) and value_and_grad(f, argnums=0) return a callable
** record {__call, f, argnums, with_value}; calling it runs f on fresh leaf
** copies of the chosen arguments, backpropagates, and returns gradients
** shaped like those arguments (nil for non-tensor leaves). */
static int fresh_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  IdMap *fresh = ctx;   /* original -> its fresh leaf: a tied tensor gets one */
  if (leaf.t == NB_TTENSOR && nt_dtype_is_float(T(leaf)->dtype)) {
    bool found;
    void **slot = idmap_slot(fresh, T(leaf), &found);
    if (!slot) return nb_error(vm, "out of memory");
    if (found) { *out = nb_obj(NB_TTENSOR, nt_retain(*slot)); return NB_OK; }
    nt_Tensor *d = nt_detach(T(leaf));
    if (!d || nt_set_requires_grad(d, true)) { nt_release(d); fresh->n--; fresh->key[slot - fresh->val] = NULL; return nbT_err(vm); }
    *slot = d;
    *out = nb_obj(NB_TTENSOR, nt_retain(d));
    return NB_OK;
  }
  nb_incref(leaf); *out = leaf;
  return NB_OK;
}
static int grad_of_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  (void)ctx;
  if (leaf.t == NB_TTENSOR && T(leaf)->requires_grad) {
    nt_Tensor *g = nt_grad(T(leaf));
    nt_Tensor *r = g ? nt_retain(g) : nt_zeros_like(T(leaf));
    if (!r) return nbT_err(vm);
    *out = nb_obj(NB_TTENSOR, r);
    return NB_OK;
  }
  *out = nb_nil();
  return NB_OK;
}
static int grad_call(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  if (n < 1 || args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "grad: bad call");
  nb_Rec *self = args[0].u.p;
  nb_Value f = nbR_get_cstr(self, "f"), an = nbR_get_cstr(self, "argnums");
  bool with_value = nb_truthy(nbR_get_cstr(self, "with_value"));
  nb_Value *fargs = args + 1; int nf = n - 1;
  int64_t nums[16]; int nn;
  bool multi = an.t == NB_TLIST || (an.t == NB_TTENSOR && T(an)->ndim == 1);
  if (nbT_ints_arg(vm, "grad", "argnums", an, nums, 16, &nn)) return NB_ERR;
  nb_Value *call = malloc(sizeof(nb_Value) * (size_t)(nf + 1));
  if (!call) return nb_error(vm, "out of memory");
  for (int i = 0; i < nf; i++) { call[i] = fargs[i]; nb_incref(call[i]); }
  int st = NB_OK;
  IdMap fresh_of = {0};   /* one fresh leaf per distinct tensor, across all argnums */
  for (int k = 0; k < nn && !st; k++) {
    if (nums[k] < 0 || nums[k] >= nf) { st = nb_error_kind(vm, "IndexError", "grad: argnums %lld is out of range for %d arguments", (long long)nums[k], nf); break; }
    nb_Value fresh = nb_nil();
    if ((st = tree_walk(vm, fargs[nums[k]], fresh_leaf, &fresh_of, &fresh))) break;
    nb_store(&call[nums[k]], fresh);
  }
  for (size_t i = 0; i < fresh_of.cap; i++) if (fresh_of.key[i]) nt_release(fresh_of.val[i]);
  idmap_free(&fresh_of);
  nb_Value val = nb_nil();
  bool prev = nt_set_grad_enabled(true);
  if (!st) st = nbV_call(vm, f, call, nf, &val);
  if (!st) {
    if (val.t != NB_TTENSOR) st = nb_error_kind(vm, "TypeError", "grad: the function must return a tensor (the loss), got %s", nb_typename(val));
    else if (T(val)->numel != 1) st = nb_error_kind(vm, "ValueError", "grad: the function must return a single-element loss, got %lld elements", (long long)T(val)->numel);
    else if (!T(val)->requires_grad) st = nb_error_kind(vm, "ValueError", "grad: the loss does not depend on the differentiated arguments");
    else if (nt_backward(T(val), NULL, false)) st = nbT_err(vm);
  }
  nt_set_grad_enabled(prev);
  nb_Value grads = nb_nil();
  if (!st) {
    if (multi) {
      nb_List *l = nbL_new(nn);
      for (int k = 0; k < nn && !st; k++) { nb_Value g; if ((st = tree_walk(vm, call[nums[k]], grad_of_leaf, NULL, &g))) break; nbL_push(l, g); }
      grads = nb_obj(NB_TLIST, l);
    } else st = tree_walk(vm, call[nums[0]], grad_of_leaf, NULL, &grads);
  }
  for (int i = 0; i < nf; i++) nb_decref(call[i]);
  free(call);
  if (st) { nb_decref(val); nb_decref(grads); return NB_ERR; }
  if (with_value) {
    nb_List *l = nbL_new(2);
    nt_Tensor *dv = nt_detach(T(val));
    nb_decref(val);
    nbL_push(l, nb_obj(NB_TTENSOR, dv)); nbL_push(l, grads);
    *out = nb_obj(NB_TLIST, l);
  } else { nb_decref(val); *out = grads; }
  return NB_OK;
}
static nb_Builtin grad_call_builtin[] = { { "__grad_call", grad_call, "*args", "internal: applies grad(f)" }, { NULL, NULL, NULL, NULL } };
static int make_grad(nb_VM *vm, nb_Value *args, bool with_value, nb_Value *out) {
  if (args[0].t != NB_TFUNC && args[0].t != NB_TBUILTIN && args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "grad: expected a function, got %s", nb_typename(args[0]));
  nb_Rec *r = nbR_new(4);
  nb_Value call = nb_builtinv(&grad_call_builtin[0]);
  nbR_set_cstr(r, "__call", call);
  nb_incref(args[0]); nbR_set_cstr(r, "f", args[0]);
  nb_incref(args[1]); nbR_set_cstr(r, "argnums", args[1].t == NB_TNIL ? nb_int(0) : args[1]);
  nbR_set_cstr(r, "with_value", nb_bool(with_value));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return make_grad(vm, args, false, out); }
static int b_value_and_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return make_grad(vm, args, true, out); }

/* gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3): compares autograd's
** gradient of f at inputs (a list of tensors, promoted to f64) with central
** finite differences.  A non-scalar output is reduced with fixed pseudo-random
** weights so every output element matters.  Returns true, or raises an error
** naming the input, the element and both values. */
static int gc_eval(nb_VM *vm, nb_Value f, nb_Value *ins, int n, nt_Tensor *w, double *out, nt_Tensor **graph) {
  nb_Value r;
  if (nbV_call(vm, f, ins, n, &r)) return NB_ERR;
  if (r.t != NB_TTENSOR) { nb_decref(r); return nb_error_kind(vm, "TypeError", "gradcheck: f must return a tensor, got %s", nb_typename(r)); }
  nt_Tensor *y = nt_to_dtype(T(r), NT_F64);
  nb_decref(r);
  if (!y) return nbT_err(vm);
  nt_Tensor *s = NULL;
  if (w && w->numel == y->numel) { nt_Tensor *wy = nt_mul(y, w); s = wy ? nt_sum(wy, NULL, 0, false) : NULL; nt_release(wy); }
  else s = nt_sum(y, NULL, 0, false);
  nt_release(y);
  if (!s) return nbT_err(vm);
  if (nt_item(s, out)) { nt_release(s); return nbT_err(vm); }
  if (graph) *graph = s; else nt_release(s);
  return NB_OK;
}
static int b_gradcheck(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "gradcheck";
  double eps = 1e-6, atol = 1e-5, rtol = 1e-3;
  if ((args[2].t != NB_TNIL && nbT_num_arg(vm, fname, "eps", args[2], &eps)) || (args[3].t != NB_TNIL && nbT_num_arg(vm, fname, "atol", args[3], &atol)) ||
      (args[4].t != NB_TNIL && nbT_num_arg(vm, fname, "rtol", args[4], &rtol))) return NB_ERR;
  nb_Value f = args[0];
  if (args[1].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "gradcheck: inputs must be a list of tensors");
  nb_List *il = args[1].u.p;
  int k = il->n, st = NB_OK;
  nb_Value *ins = calloc((size_t)k + 1, sizeof(nb_Value));
  if (!ins) return nb_error(vm, "out of memory");
  bool prev = nt_set_grad_enabled(true);
  for (int i = 0; i < k && !st; i++) {
    nb_Value v = il->items[i];
    if (v.t == NB_TTENSOR && nt_dtype_is_float(T(v)->dtype)) {
      nt_Tensor *d = nt_to_dtype(T(v), NT_F64), *c = d ? nt_clone(d) : NULL;
      nt_release(d);
      nt_Tensor *leaf = c ? nt_detach(c) : NULL;
      nt_release(c);
      if (!leaf || nt_set_requires_grad(leaf, true)) { nt_release(leaf); st = nbT_err(vm); break; }
      ins[i] = nb_obj(NB_TTENSOR, leaf);
    } else { ins[i] = v; nb_incref(v); }
  }
  /* fixed weights for the output: a deterministic sequence, not the global RNG */
  nt_Tensor *w = NULL;
  double base = 0;
  nt_Tensor *graph = NULL;
  if (!st) {
    nb_Value r;
    if (nbV_call(vm, f, ins, k, &r)) st = NB_ERR;
    else if (r.t != NB_TTENSOR) { st = nb_error_kind(vm, "TypeError", "gradcheck: f must return a tensor, got %s", nb_typename(r)); nb_decref(r); }
    else {
      int64_t m = T(r)->numel;
      double *wv = malloc(sizeof(double) * (size_t)(m ? m : 1));
      uint64_t x = 0x9E3779B97F4A7C15ull;
      for (int64_t i = 0; i < m; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; wv[i] = 0.5 + (double)(x >> 11) / 9007199254740992.0; }
      w = nt_from_buffer(wv, NT_F64, T(r)->shape, T(r)->ndim, NT_F64);
      free(wv);
      nb_decref(r);
      if (!w) st = nbT_err(vm);
    }
  }
  if (!st) st = gc_eval(vm, f, ins, k, w, &base, &graph);
  if (!st && nt_backward(graph, NULL, false)) st = nbT_err(vm);
  nt_release(graph);
  nt_set_grad_enabled(false);
  for (int i = 0; i < k && !st; i++) {
    if (ins[i].t != NB_TTENSOR || !T(ins[i])->requires_grad) continue;
    nt_Tensor *x = T(ins[i]);
    nt_Tensor *g = nt_grad(x);
    double *xd = nt_data_ptr(x);
    double *gd = NULL;
    nt_Tensor *gc = g ? nt_contiguous(g) : NULL;
    if (gc) gd = nt_data_ptr(gc);
    for (int64_t e = 0; e < x->numel && !st; e++) {
      double keep = xd[e], fp, fm;
      xd[e] = keep + eps; st = gc_eval(vm, f, ins, k, w, &fp, NULL);
      if (!st) { xd[e] = keep - eps; st = gc_eval(vm, f, ins, k, w, &fm, NULL); }
      xd[e] = keep;
      if (st) break;
      double num = (fp - fm) / (2 * eps), ana = gd ? gd[e] : 0;
      if (fabs(ana - num) > atol + rtol * fabs(num))
        st = nb_error_kind(vm, "GradcheckError", "gradcheck: input %d, element %lld: autograd %.8g, finite differences %.8g (|diff| %.3g > atol %g + rtol %g * |numeric|)", i, (long long)e, ana, num, fabs(ana - num), atol, rtol);
    }
    nt_release(gc);
  }
  nt_set_grad_enabled(prev);
  nt_release(w);
  for (int i = 0; i < k; i++) nb_decref(ins[i]);
  free(ins);
  if (st) return NB_ERR;
  *out = nb_bool(true);
  return NB_OK;
}

/* ------------------------------------------------------------ no_grad / autocast blocks
** The evaluator (leval.c N_NOGRAD, N_AUTOCAST) sets the thread-local mode and
** puts the previous one back however the block ends. */
bool nbT_swap_grad_enabled(bool on) { return nt_set_grad_enabled(on); }
int nbT_swap_autocast(int dtype) { return nt_autocast_set(dtype); }

int nbT_autocast_arg(nb_VM *vm, nb_Value v, int *dtype) {
  *dtype = -1;
  if (v.t == NB_TNIL || (v.t == NB_TBOOL && !v.u.b)) return NB_OK;
  if (v.t == NB_TSTR) {
    const char *s = nb_str(v)->data;
    if (!strcmp(s, "off") || !strcmp(s, "none")) return NB_OK;
    int dt = nt_dtype_from_name(s);
    nt_error_clear();
    if (dt == NT_BF16 || dt == NT_F16) { *dtype = dt; return NB_OK; }
    if (dt == NT_F32) return NB_OK;    /* full precision: the same as off */
  }
  nb_Buf b = {0};
  nb_tostring(&b, v, true);
  int st = nb_error_kind(vm, "ValueError", "autocast: expected \"bf16\", \"f16\" or nil (off), got %s", nbB_cstr(&b));
  nbB_free(&b);
  return st;
}
static int b_autocast_dtype(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  int dt = nt_autocast_dtype();
  *out = dt < 0 ? nb_nil() : nb_strv(nbS_cstr(nt_dtype_name((nt_DType)dt)));
  return NB_OK;
}

/* autograd_stats(): {nodes, bytes} held by live autograd graphs */
static int b_autograd_stats(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  int64_t nodes, bytes;
  nt_autograd_stats(&nodes, &bytes);
  nb_Rec *r = nbR_new(2);
  nbR_set_cstr(r, "nodes", nb_int((double)nodes));
  nbR_set_cstr(r, "bytes", nb_int((double)bytes));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* ------------------------------------------------------------ activation checkpointing
** checkpoint(f, *args) runs f(*args) with grad mode off and the tensor core's
** boundary collector on (tautograd.c): every tensor that requires grad and is
** used inside f — its tensor arguments and whatever it reaches through its
** closure, e.g. model parameters — is collected.  f's output y (a tensor, or a
** list of tensors, which travel concatenated as one flat tensor) gets ONE node
** CheckpointBackward whose inputs are those tensors.  f's intermediate
** activations are freed as soon as f returns.
** In backward the node re-runs f with grad on, the same RNG state (dropout
** draws the same masks) and the same autocast setting, then differentiates
** sum(y * gout) with respect to exactly the collected tensors
** (nt_autograd_grad: they are sinks, so the graph outside is not entered), and
** hands those gradients to the engine as the node's input gradients. */
typedef struct Ckpt {
  nb_VM *vm;
  nb_Value f, *args; int nargs;
  uint64_t rng_seed, rng_offset;
  int autocast;
  int nouts;                  /* 0: f returned a tensor; k: a list of k tensors */
} Ckpt;

static void ckpt_free(void *p) {
  Ckpt *c = p;
  nb_decref(c->f);
  for (int i = 0; i < c->nargs; i++) nb_decref(c->args[i]);
  free(c->args); free(c);
}

/* f's result as one floating tensor (a list: its tensors flattened and
** concatenated, recorded when grad is on); *nouts = 0 for a tensor, k for a
** list of k.  NULL with a nabla error. */
static nt_Tensor *ckpt_flat(nb_VM *vm, nb_Value r, int *nouts) {
  const char *want = "checkpoint: f must return a tensor or a list of tensors (floating, one dtype and device)";
  if (r.t == NB_TTENSOR) {
    *nouts = 0;
    if (!nt_dtype_is_float(T(r)->dtype)) { nb_error_kind(vm, "TypeError", "%s, got a %s tensor", want, nt_dtype_name(T(r)->dtype)); return NULL; }
    return nt_retain(T(r));
  }
  if (r.t != NB_TLIST || nb_list(r)->n == 0) { nb_error_kind(vm, "TypeError", "%s, got %s", want, r.t == NB_TLIST ? "an empty list" : nb_typename(r)); return NULL; }
  nb_List *l = nb_list(r);
  nt_Tensor **parts = calloc((size_t)l->n, sizeof *parts), *y = NULL;
  if (!parts) { nb_error(vm, "out of memory"); return NULL; }
  int k = 0;
  for (; k < l->n; k++) {
    nb_Value v = l->items[k];
    nt_Tensor *t0 = v.t == NB_TTENSOR ? T(v) : NULL, *first = T(l->items[0]);
    if (!t0 || !nt_dtype_is_float(t0->dtype) || (l->items[0].t == NB_TTENSOR && (t0->dtype != first->dtype || t0->device != first->device))) {
      nb_error_kind(vm, "TypeError", "%s; item %d is %s", want, k, t0 ? nt_dtype_name(t0->dtype) : nb_typename(v));
      goto done;
    }
    if (!(parts[k] = nt_reshape(t0, (int64_t[]){ -1 }, 1))) { nbT_err(vm); goto done; }
  }
  if (!(y = nt_concat(parts, l->n, 0))) nbT_err(vm);
  *nouts = l->n;
done:
  for (int i = 0; i < l->n; i++) nt_release(parts[i]);
  free(parts);
  return y;
}

/* moves the nabla error raised while recomputing into the tensor error */
static void ckpt_error_to_tensor(nb_VM *vm) {
  nb_Value e = nb_error_value(vm);
  nb_Value m = e.t == NB_TREC ? nbR_get_cstr(e.u.p, "message") : nb_nil();
  nb_Value k = e.t == NB_TREC ? nbR_get_cstr(e.u.p, "name") : nb_nil();
  nt_error_set("checkpoint: recomputing f in backward failed: %s%s%s", k.t == NB_TSTR ? nb_str(k)->data : "",
               k.t == NB_TSTR ? ": " : "", m.t == NB_TSTR ? nb_str(m)->data : "error");
  nb_error_clear(vm);
}

static int ckpt_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  Ckpt *c = nd->ctx;
  nb_VM *vm = c->vm;
  /* nb_pcall: the interpreter state a failed call leaves behind is put back, as `try` does */
  uint64_t seed, offset;
  nt_rng_get_state(&seed, &offset);
  nt_rng_set_state(c->rng_seed, c->rng_offset);
  bool prev_grad = nt_set_grad_enabled(true);
  int prev_ac = nt_autocast_set(c->autocast);
  uint64_t start = nt_autograd_seq();
  nb_Value r = nb_nil();
  nt_Tensor *y = NULL;
  int nouts = -1, rc = -1;
  if (nb_pcall(vm, c->f, c->args, c->nargs, &r) == NB_OK) y = ckpt_flat(vm, r, &nouts);
  nt_autocast_set(prev_ac);
  nt_set_grad_enabled(prev_grad);
  nt_rng_set_state(seed, offset);
  if (!y) { ckpt_error_to_tensor(vm); goto done; }
  char a[128], b[128];
  if (nouts != c->nouts || y->ndim != gout->ndim || memcmp(y->shape, gout->shape, sizeof(int64_t) * (size_t)y->ndim)) {
    nt_error_set("checkpoint: f returned %s%s when recomputed but %s%s the first time (f must be deterministic)",
                 nt_shape_str(y->shape, y->ndim, a, sizeof a), nouts ? " (flattened list)" : "",
                 nt_shape_str(gout->shape, gout->ndim, b, sizeof b), c->nouts ? " (flattened list)" : "");
    goto done;
  }
  rc = nt_autograd_grad(1, &y, &gout, nd->nin, nd->in, gin, false, start);
done:
  nt_release(y);
  nb_decref(r);
  return rc;
}

static int b_checkpoint(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  if (n < 1) return nb_error_kind(vm, "TypeError", "checkpoint(f, *args): missing the function f");
  nb_Value f = args[0];
  if (f.t != NB_TFUNC && f.t != NB_TBUILTIN && f.t != NB_TREC)
    return nb_error_kind(vm, "TypeError", "checkpoint: expected a function as the first argument, got %s", nb_typename(f));
  /* grad off (no_grad, or the first run of an enclosing checkpoint): nothing
  ** would be recorded anyway, and an enclosing collector sees f's tensors */
  if (!nt_grad_enabled()) return nbV_call(vm, f, args + 1, n - 1, out);
  Ckpt *c = calloc(1, sizeof *c);
  if (!c) return nb_error(vm, "out of memory");
  c->vm = vm; c->autocast = nt_autocast_dtype();
  nt_rng_get_state(&c->rng_seed, &c->rng_offset);
  nt_TensorSet set = {0};
  nt_TensorSet *prev_col = nt_boundary_collect(&set);
  nt_set_grad_enabled(false);
  nb_Value r = nb_nil();
  int st = nbV_call(vm, f, args + 1, n - 1, &r);
  nt_set_grad_enabled(true);
  nt_boundary_collect(prev_col);
  nt_Tensor *y = NULL, *yo = NULL;
  if (!st && set.oom) st = nb_error(vm, "out of memory");
  if (!st && !(y = ckpt_flat(vm, r, &c->nouts))) st = NB_ERR;
  if (st || set.n == 0) {   /* an error, or nothing that needs a gradient: f's plain result */
    nt_release(y); free(set.t); free(c);
    if (st) { nb_decref(r); return NB_ERR; }
    *out = r;
    return NB_OK;
  }
  /* the node hangs off a fresh alias: y may be one of f's inputs */
  yo = nt_detach(y);
  nt_release(y);
  nt_Node *nd = yo ? nt_record(yo, "CheckpointBackward", ckpt_backward, set.n, set.t) : NULL;
  free(set.t);
  if (!nd) { nt_release(yo); free(c); nb_decref(r); return nbT_err(vm); }
  c->f = f; nb_incref(f);
  c->nargs = n - 1;
  c->args = malloc(sizeof(nb_Value) * (size_t)(n > 1 ? n - 1 : 1));
  if (!c->args) { c->nargs = 0; ckpt_free(c); nt_release(yo); nb_decref(r); return nb_error(vm, "out of memory"); }
  for (int i = 0; i < n - 1; i++) { c->args[i] = args[i + 1]; nb_incref(c->args[i]); }
  nd->ctx = c; nd->ctx_free = ckpt_free;
  if (!c->nouts) { nb_decref(r); *out = nb_obj(NB_TTENSOR, yo); return NB_OK; }
  /* a list: differentiable views of the flat output, shaped like f's tensors */
  nb_List *src = nb_list(r), *l = nbL_new(src->n);
  int64_t off = 0;
  st = NB_OK;
  for (int i = 0; i < src->n; i++) {
    nt_Tensor *t = T(src->items[i]);
    nt_Tensor *piece = nt_narrow(yo, 0, off, t->numel), *v = piece ? nt_reshape(piece, t->shape, t->ndim) : NULL;
    nt_release(piece);
    if (!v) { st = nbT_err(vm); break; }
    off += t->numel;
    nbL_push(l, nb_obj(NB_TTENSOR, v));
  }
  nt_release(yo);
  nb_decref(r);
  if (st) { nb_decref(nb_obj(NB_TLIST, l)); return NB_ERR; }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

/* ------------------------------------------------------------ custom_vjp
** custom_vjp(fwd, bwd) is a function whose gradient is the user's (torch's
** autograd.Function): f(*args) runs fwd(*args) -> [out, saved] with grad
** off, and records one node from the tensor arguments that require grad to
** out; its backward calls bwd(saved, grad_out), which returns one gradient
** per argument (a list; a bare tensor when f has one argument; nil for "no
** gradient"), each of its argument's shape. */
typedef struct Cvjp { nb_VM *vm; nb_Value bwd, saved; int nargs; int argpos[]; } Cvjp;
static void cvjp_free(void *p) { Cvjp *c = p; nb_decref(c->bwd); nb_decref(c->saved); free(c); }

static int cvjp_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  Cvjp *c = nd->ctx;
  nb_VM *vm = c->vm;
  bool prev = nt_set_grad_enabled(false);
  nb_Value call[2] = { c->saved, nb_obj(NB_TTENSOR, nt_retain(gout)) }, r = nb_nil();
  int st = nb_pcall(vm, c->bwd, call, 2, &r);
  nb_decref(call[1]);
  nt_set_grad_enabled(prev);
  if (st) {
    nb_Value e = nb_error_value(vm);
    nb_Value m = e.t == NB_TREC ? nbR_get_cstr(e.u.p, "message") : nb_nil();
    nt_error_set("custom_vjp: bwd failed: %s", m.t == NB_TSTR ? nb_str(m)->data : "error");
    nb_error_clear(vm);
    return -1;
  }
  int rc = 0;
  bool bare = r.t == NB_TTENSOR || r.t == NB_TNIL;
  if (!bare && r.t != NB_TLIST) { nt_error_set("custom_vjp: bwd must return a list of gradients (one per argument), got %s", nb_typename(r)); rc = -1; }
  else if (bare && c->nargs != 1) { nt_error_set("custom_vjp: bwd must return a list of %d gradients (one per argument), got one %s", c->nargs, nb_typename(r)); rc = -1; }
  else if (!bare && nb_list(r)->n != c->nargs) { nt_error_set("custom_vjp: bwd returned %d gradients for %d arguments", nb_list(r)->n, c->nargs); rc = -1; }
  for (int k = 0; k < nd->nin && !rc; k++) {
    nb_Value g = bare ? r : nb_list(r)->items[c->argpos[k]];
    if (g.t == NB_TNIL || !nt_node_needs(nd, k)) continue;
    nt_Tensor *in = nd->in[k], *gt = g.t == NB_TTENSOR ? T(g) : NULL;
    char a[128], b[128];
    if (!gt) { nt_error_set("custom_vjp: the gradient of argument %d is a %s, not a tensor", c->argpos[k], nb_typename(g)); rc = -1; }
    else if (gt->ndim != in->ndim || memcmp(gt->shape, in->shape, sizeof(int64_t) * (size_t)in->ndim)) {
      nt_error_set("custom_vjp: the gradient of argument %d has shape %s, the argument %s", c->argpos[k],
                   nt_shape_str(gt->shape, gt->ndim, a, sizeof a), nt_shape_str(in->shape, in->ndim, b, sizeof b));
      rc = -1;
    } else if (!(gin[k] = nt_to_dtype(gt, in->dtype))) rc = -1;
  }
  nb_decref(r);
  return rc;
}

static int cvjp_call(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  if (n < 1 || args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "custom_vjp: bad call");
  nb_Rec *self = args[0].u.p;
  nb_Value fwd = nbR_get_cstr(self, "fwd"), bwd = nbR_get_cstr(self, "bwd");
  nb_Value *fargs = args + 1; int nf = n - 1;
  bool prev = nt_set_grad_enabled(false);
  nb_Value r = nb_nil();
  int st = nbV_call(vm, fwd, fargs, nf, &r);
  nt_set_grad_enabled(prev);
  if (st) return NB_ERR;
  if (r.t != NB_TLIST || nb_list(r)->n != 2 || nb_list(r)->items[0].t != NB_TTENSOR) {
    nb_decref(r);
    return nb_error_kind(vm, "TypeError", "custom_vjp: fwd must return [out, saved] with out a tensor");
  }
  nt_Tensor *y = T(nb_list(r)->items[0]);
  nt_Tensor *ins[16]; int pos[16], nin = 0;
  for (int i = 0; i < nf; i++)
    if (fargs[i].t == NB_TTENSOR && T(fargs[i])->requires_grad) {
      if (nin == 16) { nb_decref(r); return nb_error_kind(vm, "ValueError", "custom_vjp: at most 16 arguments that require grad"); }
      ins[nin] = T(fargs[i]); pos[nin++] = i;
    }
  if (!nt_grad_enabled() || nin == 0) {   /* nothing to differentiate: fwd's plain result */
    *out = nb_list(r)->items[0]; nb_incref(*out);
    nb_decref(r);
    return NB_OK;
  }
  if (!nt_dtype_is_float(y->dtype)) { nb_decref(r); return nb_error_kind(vm, "TypeError", "custom_vjp: out must be a floating-point tensor to be differentiated, got %s", nt_dtype_name(y->dtype)); }
  Cvjp *c = calloc(1, sizeof *c + sizeof(int) * (size_t)nin);
  nt_Tensor *yo = c ? nt_detach(y) : NULL;
  nt_Node *nd = yo ? nt_record(yo, "CustomVjpBackward", cvjp_backward, nin, ins) : NULL;
  if (!nd) { free(c); nt_release(yo); nb_decref(r); return c ? nbT_err(vm) : nb_error(vm, "out of memory"); }
  c->vm = vm; c->bwd = bwd; nb_incref(bwd); c->saved = nb_list(r)->items[1]; nb_incref(c->saved); c->nargs = nf;
  memcpy(c->argpos, pos, sizeof(int) * (size_t)nin);
  nd->ctx = c; nd->ctx_free = cvjp_free;
  nb_decref(r);
  *out = nb_obj(NB_TTENSOR, yo);
  return NB_OK;
}
static nb_Builtin cvjp_call_builtin[] = { { "__custom_vjp_call", cvjp_call, "*args", "internal: applies a custom_vjp function" }, { NULL, NULL, NULL, NULL } };
static int b_custom_vjp(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  for (int i = 0; i < 2; i++)
    if (args[i].t != NB_TFUNC && args[i].t != NB_TBUILTIN && args[i].t != NB_TREC)
      return nb_error_kind(vm, "TypeError", "custom_vjp(fwd, bwd): %s must be a function, got %s", i ? "bwd" : "fwd", nb_typename(args[i]));
  nb_Rec *r = nbR_new(3);
  nbR_set_cstr(r, "__call", nb_builtinv(&cvjp_call_builtin[0]));
  nb_incref(args[0]); nbR_set_cstr(r, "fwd", args[0]);
  nb_incref(args[1]); nbR_set_cstr(r, "bwd", args[1]);
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: optimizers
** One builtin per optimizer updates every parameter of a pytree in place
** through one fused op (tensor/toptim.c on the CPU, one launch on the GPU).
** params, grads (nil: each parameter's .grad) and state trees share one
** structure. */
static int flat_params(nb_VM *vm, const char *fname, nb_Value *trees, int ntrees, Leaves *ls) {
  for (int i = 0; i < ntrees; i++) {
    if (trees[i].t == NB_TNIL) continue;
    if (leaves(vm, trees[i], &ls[i])) return NB_ERR;
    if (i && ls[i].n != ls[0].n) return nb_error_kind(vm, "ValueError", "%s: the trees have %d and %d tensors (they must match the parameters)", fname, ls[0].n, ls[i].n);
  }
  return drop_ties(vm, ls, ntrees);   /* a tied parameter is updated once */
}
/* grads from the grads tree, or each parameter's .grad */
static nt_Tensor **grads_of(Leaves *params, Leaves *grads) {
  nt_Tensor **g = malloc(sizeof(nt_Tensor *) * (size_t)(params->n + 1));
  if (g) for (int k = 0; k < params->n; k++) g[k] = grads->n ? grads->t[k] : nt_grad(params->t[k]);
  return g;
}

/* adamw_update(params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step) */
static int b_adamw_update(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "adamw_update";
  nt_OptimArgs o; memset(&o, 0, sizeof o);
  if (nbT_num_arg(vm, fname, "lr", args[4], &o.lr) || nbT_num_arg(vm, fname, "beta1", args[5], &o.beta1) || nbT_num_arg(vm, fname, "beta2", args[6], &o.beta2) ||
      nbT_num_arg(vm, fname, "eps", args[7], &o.eps) || nbT_num_arg(vm, fname, "weight_decay", args[8], &o.weight_decay) || nbT_num_arg(vm, fname, "step", args[9], &o.step)) return NB_ERR;
  if (args[2].t == NB_TNIL || args[3].t == NB_TNIL) return nb_error_kind(vm, "TypeError", "%s: needs the m and v state trees", fname);
  Leaves ls[4] = {{0}};
  int st = flat_params(vm, fname, args, 4, ls);
  nt_Tensor **g = st ? NULL : grads_of(&ls[0], &ls[1]);
  if (!st && !g) st = nb_error(vm, "out of memory");
  if (!st) {
    o.n = ls[0].n; o.params = ls[0].t; o.grads = g; o.exp_avg = ls[2].t; o.exp_avg_sq = ls[3].t;
    if (nt_optim_adamw(&o)) st = nbT_err(vm);
  }
  free(g);
  for (int i = 0; i < 4; i++) free(ls[i].t);
  *out = nb_nil();
  return st;
}
/* sgd_update(params, grads, bufs, lr, momentum=0, nesterov=false, weight_decay=0) */
static int b_sgd_update(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "sgd_update";
  nt_OptimArgs o; memset(&o, 0, sizeof o);
  if (nbT_num_arg(vm, fname, "lr", args[3], &o.lr) || (args[4].t != NB_TNIL && nbT_num_arg(vm, fname, "momentum", args[4], &o.beta1)) ||
      (args[6].t != NB_TNIL && nbT_num_arg(vm, fname, "weight_decay", args[6], &o.weight_decay))) return NB_ERR;
  o.nesterov = nb_truthy(args[5]);
  if (o.beta1 != 0 && args[2].t == NB_TNIL) return nb_error_kind(vm, "ValueError", "%s: momentum needs a buffer tree", fname);
  Leaves ls[3] = {{0}};
  int st = flat_params(vm, fname, args, 3, ls);
  nt_Tensor **g = st ? NULL : grads_of(&ls[0], &ls[1]);
  if (!st && !g) st = nb_error(vm, "out of memory");
  if (!st) {
    o.n = ls[0].n; o.params = ls[0].t; o.grads = g; o.exp_avg = o.beta1 != 0 ? ls[2].t : NULL;
    if (nt_optim_sgd(&o)) st = nbT_err(vm);
  }
  free(g);
  for (int i = 0; i < 3; i++) free(ls[i].t);
  *out = nb_nil();
  return st;
}
/* clip_grad_norm(grads_or_params, max_norm): scales gradients in place so
** their global L2 norm is at most max_norm; returns the norm before clipping. */
static int b_clip_grad_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "clip_grad_norm";
  double maxn;
  if (nbT_num_arg(vm, fname, "max_norm", args[1], &maxn)) return NB_ERR;
  Leaves ls = {0};
  if (leaves(vm, args[0], &ls) || drop_ties(vm, &ls, 1)) { free(ls.t); return NB_ERR; }
  for (int k = 0; k < ls.n; k++)   /* a parameter's gradient, or the tensor itself */
    if (nt_grad(ls.t[k])) ls.t[k] = nt_grad(ls.t[k]);
  double norm;
  int bad = nt_clip_grad_norm(ls.t, ls.n, maxn, &norm);
  free(ls.t);
  if (bad) return nbT_err(vm);
  *out = nb_flt(norm);
  return NB_OK;
}

/* unscale_grads(grads, inv_scale): multiplies every floating tensor of the
** tree by inv_scale IN PLACE and returns whether all of them are finite (the
** dynamic loss scaler in stdlib/optim.nbl).  The check is fused: each tensor
** adds sum(g * 0) — 0 when finite, NaN when it holds an inf or a nan — into
** one 0-d total, read back once (a single device synchronisation). */
static int b_unscale_grads(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "unscale_grads";
  double inv;
  if (nbT_num_arg(vm, fname, "inv_scale", args[1], &inv)) return NB_ERR;
  Leaves ls = {0};
  if (leaves(vm, args[0], &ls) || drop_ties(vm, &ls, 1)) { free(ls.t); return NB_ERR; }
  bool prev = nt_set_grad_enabled(false);
  int prev_ac = nt_autocast_set(-1);
  nt_Tensor *total = NULL;
  int bad = 0;
  for (int k = 0; k < ls.n && !bad; k++) {
    nt_Tensor *g = ls.t[k];
    if (!nt_dtype_is_float(g->dtype)) continue;
    if (inv != 1) {
      nt_Tensor *sc = nt_binary_scalar_ex(NT_OP_MUL, g, inv, NT_SCALAR_FLOAT);
      bad = !sc || nt_copy_(g, sc);
      nt_release(sc);
      if (bad) break;
    }
    nt_Tensor *z = nt_binary_scalar_ex(NT_OP_MUL, g, 0.0, NT_SCALAR_FLOAT), *s = z ? nt_sum(z, NULL, 0, false) : NULL;
    nt_release(z);
    if (!s) { bad = 1; break; }
    if (total) { nt_Tensor *t2 = nt_add(total, s); nt_release(s); nt_release(total); total = t2; bad = !t2; }
    else total = s;
  }
  double v = 0;
  if (!bad && total && nt_item(total, &v)) bad = 1;
  nt_release(total);
  nt_autocast_set(prev_ac);
  nt_set_grad_enabled(prev);
  free(ls.t);
  if (bad) return nbT_err(vm);
  *out = nb_bool(v == 0);
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: files
** save(path, tree): nested records/lists of tensors as safetensors, keys
** flattened with dots (like a PyTorch state_dict: "layers.0.w").  Numbers,
** strings and bools in the tree go to the metadata ("nabla:num:key", ...) so
** optimizer state round-trips; functions are code, not state, and are skipped.
** The write is atomic (temp file, fsync, rename). */
typedef struct SaveCtx {
  nt_io_array *arr; int n, cap; char **mk, **mv; int nm, capm; nt_Tensor **hold; int nhold;
  IdMap saved;   /* tensor -> the name it was saved under (a tie is saved once) */
} SaveCtx;
static void save_free(SaveCtx *s) {
  for (size_t i = 0; i < s->saved.cap; i++) if (s->saved.key[i]) free(s->saved.val[i]);
  idmap_free(&s->saved);
  for (int i = 0; i < s->n; i++) free(s->arr[i].name);
  for (int i = 0; i < s->nm; i++) { free(s->mk[i]); free(s->mv[i]); }
  for (int i = 0; i < s->nhold; i++) nt_release(s->hold[i]);
  free(s->arr); free(s->mk); free(s->mv); free(s->hold);
}
/* metadata entry "nabla:<kind>:<key>" = value (numbers, strings, bools, nil, empty boxes) */
static void add_meta(SaveCtx *s, const char *kind, const char *name, const char *value) {
  if (s->nm == s->capm) { s->capm = s->capm ? s->capm * 2 : 8; s->mk = realloc(s->mk, sizeof(char *) * (size_t)s->capm); s->mv = realloc(s->mv, sizeof(char *) * (size_t)s->capm); if (!s->mk || !s->mv) abort(); }
  nb_Buf k = {0};
  nbB_printf(&k, "nabla:%s:%s", kind, name);
  s->mk[s->nm] = strdup(nbB_cstr(&k)); s->mv[s->nm] = strdup(value); s->nm++;
  nbB_free(&k);
}
static int save_walk(nb_VM *vm, SaveCtx *s, nb_Value v, nb_Buf *key, int depth) {
  if (depth > MAX_TREE_DEPTH) return nb_error_kind(vm, "ValueError", "save: tree nested too deeply (or contains itself)");
  size_t mark = key->n;
  if ((v.t == NB_TREC || v.t == NB_TLIST) && (v.t == NB_TREC ? nb_rec(v)->n : nb_list(v)->n) == 0 && mark) {
    /* an empty container keeps its place */
    add_meta(s, "box", nbB_cstr(key), v.t == NB_TREC ? "rec" : "list");
    return NB_OK;
  }
  if (v.t == NB_TREC || v.t == NB_TLIST) {
    int cnt = v.t == NB_TREC ? nb_rec(v)->n : nb_list(v)->n;
    for (int i = 0; i < cnt; i++) {
      key->n = mark;
      if (mark) nbB_putc(key, '.');
      if (v.t == NB_TREC) {
        nb_Str *k = nb_rec(v)->keys[i];
        nb_Value fv = nb_rec(v)->vals[i];
        /* a record's functions (a model's __call) are code, not state: not saved */
        if (fv.t == NB_TFUNC || fv.t == NB_TBUILTIN || fv.t == NB_TMODULE) continue;
        if (memchr(k->data, '.', k->len)) return nb_error_kind(vm, "ValueError", "save: record key \"%s\" contains a '.', which is the path separator", k->data);
        nbB_add(key, k->data, k->len);
      } else nbB_printf(key, "%d", i);
      nbB_cstr(key);
      if (save_walk(vm, s, v.t == NB_TREC ? nb_rec(v)->vals[i] : nb_list(v)->items[i], key, depth + 1)) return NB_ERR;
    }
    key->n = mark; if (key->p) key->p[mark] = 0;
    return NB_OK;
  }
  const char *name = nbB_cstr(key);
  if (v.t == NB_TTENSOR) {
    if (!*name) return nb_error_kind(vm, "ValueError", "save: a bare tensor needs a name; save a record like {x: t}");
    /* a tensor at several places (tied weights) is written once; the other
    ** places are recorded as aliases of that name, and load() puts the one
    ** tensor back at each of them (as safetensors' torch helpers dedupe) */
    bool found;
    void **slot = idmap_slot(&s->saved, T(v), &found);
    if (!slot) return nb_error(vm, "out of memory");
    if (found) { add_meta(s, "alias", name, (const char *)*slot); return NB_OK; }
    *slot = strdup(name);
    nt_Tensor *c = nt_contiguous(T(v));
    if (c && c->device != NT_CPU) { nt_Tensor *h = nt_to_device(c, NT_CPU); nt_release(c); c = h; }
    if (!c) return nbT_err(vm);
    if (s->n == s->cap) { s->cap = s->cap ? s->cap * 2 : 16; s->arr = realloc(s->arr, sizeof(nt_io_array) * (size_t)s->cap); s->hold = realloc(s->hold, sizeof(nt_Tensor *) * (size_t)s->cap); if (!s->arr || !s->hold) abort(); }
    s->hold[s->nhold++] = c;
    nt_io_array *a = &s->arr[s->n++];
    memset(a, 0, sizeof *a);
    a->name = strdup(name); a->dtype = (nt_io_dtype)c->dtype; a->ndim = c->ndim;
    for (int i = 0; i < c->ndim; i++) a->shape[i] = c->shape[i];
    a->data = nt_data_ptr(c); a->nbytes = (size_t)c->numel * nt_dtype_size(c->dtype);
    return NB_OK;
  }
  /* in a list, a function keeps its place as nil (a record's are left out above) */
  const char *kind = v.t == NB_TNUM ? "num" : v.t == NB_TSTR ? "str" : v.t == NB_TBOOL ? "bool" : "nil";
  nb_Buf val = {0};
  if (v.t == NB_TNUM || v.t == NB_TSTR || v.t == NB_TBOOL) nb_tostring(&val, v, false);
  add_meta(s, kind, name, nbB_cstr(&val));
  nbB_free(&val);
  return NB_OK;
}
static int b_save(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "save";
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: path must be a string", fname);
  if (args[1].t != NB_TREC && args[1].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "save: expected a record (or list) of tensors, got %s", nb_typename(args[1]));
  SaveCtx s; memset(&s, 0, sizeof s);
  nb_Buf key = {0};
  int st = save_walk(vm, &s, args[1], &key, 0);
  nbB_free(&key);
  if (!st && nt_st_save(nb_str(args[0])->data, s.arr, (size_t)s.n, (const char *const *)s.mk, (const char *const *)s.mv, (size_t)s.nm))
    st = nb_error_kind(vm, "IOError", "%s", nt_io_error());
  save_free(&s);
  *out = nb_nil();
  return st;
}

/* ---- load: the nested record in linear time
** A file may hold hundreds of thousands of tensors in one record, whose own
** lookup is a linear scan (400k tensors took 27 s).  Keys are interned, so a
** (record, key) pair names a field: one hash table over all pairs finds a
** field in O(1), and new fields are appended without a scan. */
typedef struct Field { nb_Rec *rec; nb_Str *key; int index; } Field;
typedef struct Fields { Field *slots; size_t cap, n; } Fields;

static size_t field_hash(const nb_Rec *r, const nb_Str *k) {
  uint64_t h = (uint64_t)(uintptr_t)r * 0x9E3779B97F4A7C15u ^ (uint64_t)(uintptr_t)k * 0xC2B2AE3D27D4EB4Fu;
  return (size_t)(h ^ (h >> 31));
}
static Field *field_slot(Fields *f, const nb_Rec *r, const nb_Str *k) {   /* the pair's slot, or an empty one */
  size_t i = field_hash(r, k) & (f->cap - 1);
  while (f->slots[i].rec && (f->slots[i].rec != r || f->slots[i].key != k)) i = (i + 1) & (f->cap - 1);
  return &f->slots[i];
}
static void fields_reserve(Fields *f) {   /* keeps the table at most half full */
  if (2 * (f->n + 1) <= f->cap) return;
  Fields g = { calloc(f->cap ? 2 * f->cap : 64, sizeof(Field)), f->cap ? 2 * f->cap : 64, f->n };
  if (!g.slots) abort();
  for (size_t i = 0; i < f->cap; i++) if (f->slots[i].rec) *field_slot(&g, f->slots[i].rec, f->slots[i].key) = f->slots[i];
  free(f->slots);
  *f = g;
}
/* rec.key = v (takes v's reference and the new reference `key`); returns the field's index */
static int field_set(Fields *f, nb_Rec *rec, nb_Str *key, nb_Value v) {
  fields_reserve(f);
  Field *sl = field_slot(f, rec, key);
  if (sl->rec) { nb_store(&rec->vals[sl->index], v); nb_decref(nb_strv(key)); return sl->index; }
  if (rec->n == rec->cap) {
    int cap = rec->cap ? 2 * rec->cap : 4;
    nb_Str **k = realloc(rec->keys, sizeof(nb_Str *) * (size_t)cap);
    if (k) rec->keys = k;
    nb_Value *vs = k ? realloc(rec->vals, sizeof(nb_Value) * (size_t)cap) : NULL;
    if (!vs) abort();
    rec->vals = vs; rec->cap = cap;
  }
  rec->keys[rec->n] = key; rec->vals[rec->n] = v;
  *sl = (Field){ rec, key, rec->n };
  f->n++;
  return rec->n++;
}

/* Puts v at the dotted path in the nested record root (creating records).
** The depth is bounded like save's, so nothing built here or walked later
** (listify, printing, freeing) recurses deeper than MAX_TREE_DEPTH. */
static int tree_put(nb_VM *vm, Fields *f, nb_Rec *root, const char *path, nb_Value v) {
  int depth = 0;
  for (const char *d = strchr(path, '.'); d; d = strchr(d + 1, '.'))
    if (++depth > MAX_TREE_DEPTH) {
      nb_decref(v);
      return nb_error_kind(vm, "ValueError", "load: key \"%.60s...\" is nested more than %d levels deep", path, MAX_TREE_DEPTH);
    }
  nb_Rec *cur = root;
  const char *p = path;
  for (;;) {
    const char *dot = strchr(p, '.');
    nb_Str *k = nbS_intern(p, dot ? (size_t)(dot - p) : strlen(p));
    if (!dot) { field_set(f, cur, k, v); return NB_OK; }
    Field *sl = (fields_reserve(f), field_slot(f, cur, k));
    int i = sl->rec ? sl->index : -1;
    if (i < 0) i = field_set(f, cur, nbS_intern_str(k), nb_obj(NB_TREC, nbR_new(0)));
    nb_decref(nb_strv(k));
    if (cur->vals[i].t != NB_TREC) { nb_decref(v); return nb_error_kind(vm, "ValueError", "load: key \"%s\" is both a value and a prefix of another key", path); }
    cur = cur->vals[i].u.p;
    p = dot + 1;
  }
}
/* records whose keys are exactly 0..n-1 (in any order) were lists when saved */
static nb_Value listify(nb_Value v) {
  if (v.t != NB_TREC) return v;
  nb_Rec *r = v.u.p;
  for (int i = 0; i < r->n; i++) r->vals[i] = listify(r->vals[i]);
  if (r->n == 0) return v;
  int *pos = malloc(sizeof(int) * (size_t)r->n);
  if (!pos) return v;
  for (int i = 0; i < r->n; i++) pos[i] = -1;
  for (int i = 0; i < r->n; i++) {
    char *end; const char *k = r->keys[i]->data;
    long j = strtol(k, &end, 10);
    if (!*k || *end || (k[0] == '0' && k[1]) || j < 0 || j >= r->n || pos[j] >= 0) { free(pos); return v; }
    pos[j] = i;
  }
  nb_List *l = nbL_new(r->n);
  for (int j = 0; j < r->n; j++) { nbL_push(l, r->vals[pos[j]]); r->vals[pos[j]] = nb_nil(); }
  free(pos);
  nb_decref(v);
  return nb_obj(NB_TLIST, l);
}
/* An interrupt (Ctrl-C, the kernel's interrupt_request) stops a long load
** the way the evaluator's poll does: clear the flag, raise Interrupted. */
static int load_interrupted(nb_VM *vm) {
  return nb_vm_interrupted(vm) ? nbV_interrupt_error(vm) : 0;
}
/* The readers poll the VM's interrupt flag while they run (nt_io_set_interrupt). */
#define READ_INTERRUPTIBLY(vm, call) (nt_io_set_interrupt(nb_vm_interrupt_flag(vm)), read_done(call))
static void *read_done(void *result) { nt_io_set_interrupt(NULL); return result; }
static int read_failed(nb_VM *vm) {
  return nb_vm_interrupted(vm) ? load_interrupted(vm) : nb_error_kind(vm, "IOError", "%s", nt_io_error());
}
static int set_to_record(nb_VM *vm, nt_io_set *set, bool nested, nb_Value *out) {
  nb_Rec *root = nbR_new((int)set->n);
  Fields f = {0};
  int st = NB_OK;
  nt_Tensor **loaded = calloc(set->n + 1, sizeof *loaded);   /* borrowed: root holds them */
  if (!loaded) { nb_decref(nb_obj(NB_TREC, root)); return nb_error(vm, "out of memory"); }
  for (size_t i = 0; i < set->n && !st; i++) {
    nt_io_array *a = &set->arrays[i];
    if ((i & 1023) == 0 && (st = load_interrupted(vm))) break;
    nt_Tensor *t = nt_from_buffer(a->data, (nt_DType)a->dtype, a->shape, a->ndim, (nt_DType)a->dtype);
    if (!t) { st = nbT_err(vm); break; }
    loaded[i] = t;
    nb_Value tv = nb_obj(NB_TTENSOR, t);
    if (nested) st = tree_put(vm, &f, root, a->name, tv);
    else field_set(&f, root, nbS_intern(a->name, strlen(a->name)), tv);
  }
  for (size_t i = 0; nested && i < set->nmeta && !st; i++) {
    const char *k = set->meta_keys[i], *val = set->meta_values[i];
    if (strncmp(k, "nabla:", 6) != 0) continue;
    const char *kind = k + 6, *colon = strchr(kind, ':');
    if (!colon) continue;
    nb_Value v;
    if (!strncmp(kind, "num:", 4)) v = nb_parsenum(val, NULL);   /* "3" an int, "3.0" a float (as printed) */
    else if (!strncmp(kind, "str:", 4)) v = nb_strv(nbS_cstr(val));
    else if (!strncmp(kind, "bool:", 5)) v = nb_bool(!strcmp(val, "true"));
    else if (!strncmp(kind, "nil:", 4)) v = nb_nil();
    else if (!strncmp(kind, "box:", 4)) v = !strcmp(val, "rec") ? nb_obj(NB_TREC, nbR_new(0)) : nb_obj(NB_TLIST, nbL_new(0));
    else if (!strncmp(kind, "alias:", 6)) {   /* a tie: the tensor saved under val */
      v = nb_nil();
      for (size_t j = 0; j < set->n; j++)
        if (!strcmp(set->arrays[j].name, val)) { v = nb_obj(NB_TTENSOR, nt_retain(loaded[j])); break; }
      if (v.t == NB_TNIL) { st = nb_error_kind(vm, "ValueError", "load: %s is saved as a tie to \"%.100s\", which the file does not have", colon + 1, val); break; }
    }
    else continue;
    st = tree_put(vm, &f, root, colon + 1, v);
  }
  free(loaded);
  free(f.slots);
  if (st) { nb_decref(nb_obj(NB_TREC, root)); return NB_ERR; }
  *out = nested ? listify(nb_obj(NB_TREC, root)) : nb_obj(NB_TREC, root);
  return NB_OK;
}
static int b_load(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load: path must be a string");
  nt_io_set *set = READ_INTERRUPTIBLY(vm, nt_st_load(nb_str(args[0])->data));
  if (!set) return read_failed(vm);
  int st = set_to_record(vm, set, true, out);
  nt_io_set_free(set);
  return st;
}
static int b_load_npz(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_npz: path must be a string");
  nt_io_set *set = READ_INTERRUPTIBLY(vm, nt_npz_load(nb_str(args[0])->data));
  if (!set) return read_failed(vm);
  int st = set_to_record(vm, set, false, out);
  nt_io_set_free(set);
  return st;
}
static int b_load_npy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_npy: path must be a string");
  nt_io_set *set = READ_INTERRUPTIBLY(vm, nt_npy_load(nb_str(args[0])->data));
  if (!set) return read_failed(vm);
  nt_io_array *a = &set->arrays[0];
  nt_Tensor *t = nt_from_buffer(a->data, (nt_DType)a->dtype, a->shape, a->ndim, (nt_DType)a->dtype);
  nt_io_set_free(set);
  return nbT_ret(vm, t, out);
}
static int b_save_npy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "save_npy"; Tmp tp = {0};
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "save_npy: path must be a string");
  TENSOR_ARG(x, 1, "x");
  nt_Tensor *c = nt_contiguous(x);
  if (!c) { nbT_tmp_free(&tp); return nbT_err(vm); }
  nt_io_array a; memset(&a, 0, sizeof a);
  a.name = (char *)""; a.dtype = (nt_io_dtype)c->dtype; a.ndim = c->ndim;
  for (int i = 0; i < c->ndim; i++) a.shape[i] = c->shape[i];
  a.data = nt_data_ptr(c); a.nbytes = (size_t)c->numel * nt_dtype_size(c->dtype);
  int rc = nt_npy_save(nb_str(args[0])->data, &a);
  nt_release(c); nbT_tmp_free(&tp);
  if (rc) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  *out = nb_nil();
  return NB_OK;
}
/* load_csv(path, delim=",") → {columns: [names] or nil, data: f64 tensor [rows, cols]} */
static int b_load_csv(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_csv: path must be a string");
  char delim = 0;
  if (args[1].t == NB_TSTR) { if (nb_str(args[1])->len != 1) return nb_error_kind(vm, "ValueError", "load_csv: delim must be one character"); delim = nb_str(args[1])->data[0]; }
  nt_csv *c = READ_INTERRUPTIBLY(vm, nt_csv_load(nb_str(args[0])->data, delim));
  if (!c) return read_failed(vm);
  int64_t shape[2] = { (int64_t)c->nrows, (int64_t)c->ncols };
  nt_Tensor *t = nt_from_buffer(c->data ? (void *)c->data : (void *)(double[1]){0}, NT_F64, shape, 2, NT_F64);
  nb_Value cols = nb_nil();
  if (c->names) {
    nb_List *l = nbL_new((int)c->ncols);
    for (size_t i = 0; i < c->ncols; i++) nbL_push(l, nb_strv(nbS_cstr(c->names[i])));
    cols = nb_obj(NB_TLIST, l);
  }
  nt_csv_free(c);
  if (!t) { nb_decref(cols); return nbT_err(vm); }
  nb_Rec *r = nbR_new(2);
  nbR_set_cstr(r, "columns", cols);
  nbR_set_cstr(r, "data", nb_obj(NB_TTENSOR, t));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* ------------------------------------------------------------ the table */
static nb_Builtin grad_builtins[] = {
  { "backward", b_backward, "loss, grad=nil, retain_graph=false", "backward(loss): accumulates d loss / d leaf into each leaf's .grad" },
  { "zero_grad", b_zero_grad, "params", "zero_grad(params): clears .grad of every tensor in a tree" },
  { "custom_vjp", b_custom_vjp, "fwd, bwd", "custom_vjp(fwd, bwd): a function with your own gradient (torch.autograd.Function): fwd(*args) returns [out, saved]; bwd(saved, grad_out) returns one gradient per argument (a list, or a tensor for one argument; nil for none); works under grad, value_and_grad and backward" },
  { "same", b_same, "a, b", "same(a, b): true when a and b are the same object (Python's `a is b`): one tensor, list, record or function; numbers, bools and nil compare by value" },
  { "tree_tensors", b_tree_tensors, "tree", "tree_tensors(tree): the distinct tensors of a tree (records/lists), in order; a tensor at several places (tied weights) once" },
  { "map_tensors", b_map_tensors, "tree, f", "map_tensors(tree, f): a tree of the same structure with f(t) at each tensor leaf (nil elsewhere); a tensor at several places (tied weights) is mapped once and the one result stands at each place" },
  { "requires_grad", b_requires_grad, "params, on=true", "requires_grad(tree, on=true): marks every float tensor of a tree as a leaf to differentiate" },
  { "grad_enabled", b_no_grad_enabled, "", "grad_enabled(): false inside no_grad { }" },
  { "autocast_dtype", b_autocast_dtype, "", "autocast_dtype(): \"bf16\" or \"f16\" inside autocast(...) { }, else nil" },
  { "checkpoint", b_checkpoint, "*args", "checkpoint(f, *args): f(*args) without keeping f's activations; backward recomputes them (same RNG). f returns a tensor or a list of tensors" },
  { "autograd_stats", b_autograd_stats, "", "autograd_stats(): {nodes, bytes} held by live autograd graphs (the activations they keep)" },
  { "grad", b_grad, "f, argnums=0", "grad(f, argnums=0): a function returning d f / d args[argnums], shaped like that argument (a tree)" },
  { "value_and_grad", b_value_and_grad, "f, argnums=0", "value_and_grad(f, argnums=0): like grad, returning [value, grads]" },
  { "gradcheck", b_gradcheck, "f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3", "gradcheck(f, inputs): autograd vs central finite differences in f64; true or an error naming the element" },
  { "adamw_update", b_adamw_update, "params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step", "adamw_update(...): one AdamW step over every tensor of the trees, in place (used by optim)" },
  { "sgd_update", b_sgd_update, "params, grads, bufs, lr, momentum=0, nesterov=false, weight_decay=0", "sgd_update(...): one SGD step over every tensor of the trees, in place (used by optim)" },
  { "unscale_grads", b_unscale_grads, "grads, inv_scale", "unscale_grads(grads, inv_scale): multiplies every gradient of the tree by inv_scale in place; true when all are finite (used by optim.grad_scaler)" },
  { "clip_grad_norm", b_clip_grad_norm, "tree, max_norm", "clip_grad_norm(tree, max_norm): scales gradients to a global L2 norm <= max_norm; returns the norm" },
  { "save", b_save, "path, tree", "save(path, tree): writes a record of tensors as safetensors (atomic)" },
  { "load", b_load, "path", "load(path): reads a safetensors file into a nested record" },
  { "load_npz", b_load_npz, "path", "load_npz(path): a record of the arrays in a NumPy .npz" },
  { "load_npy", b_load_npy, "path", "load_npy(path): the array in a NumPy .npy" },
  { "save_npy", b_save_npy, "path, x", "save_npy(path, x): writes a NumPy .npy (atomic)" },
  { "load_csv", b_load_csv, "path, delim=nil", "load_csv(path, delim=\",\"): {columns, data} with data an f64 tensor" },
  { NULL, NULL, NULL, NULL }
};

void nbT_register_grad(void) {
  nbC_register(grad_builtins);
  nbC_prepare(grad_call_builtin);
  nbC_prepare(cvjp_call_builtin);
}
