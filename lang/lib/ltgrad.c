/*
** lib/ltgrad.c — autograd in the language: backward, grad/value_and_grad,
** gradcheck, requires_grad and the tree helpers over gradients, no_grad and
** autocast blocks, activation checkpointing and custom_vjp (the last two
** are custom autograd nodes whose backward calls back into nabla code).
** Optimizers are in loptim.c, checkpoint and data files in ltio.c.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ltensor.h"
#include "tensor/textend.h"   /* the checkpoint node is a custom autograd op */

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
** appearance (a tied tensor once), buffers left out: nn.parameters. */
static int b_tree_tensors(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (nbT_leaves(vm, args[0], &ls) || nbT_drop_ties(vm, &ls, 1)) { free(ls.t); return NB_ERR; }
  nb_List *l = nbL_new(ls.n);
  for (int k = 0; k < ls.n; k++) nbL_push(l, nb_obj(NB_TTENSOR, nt_retain(ls.t[k])));
  free(ls.t);
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

/* tree_buffers(tree): the distinct buffers of a tree (the tensors under the
** fields records name in __buffers), in order: nn.buffers. */
static int b_tree_buffers(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (nbT_leaves_mode(vm, args[0], NBT_ONLY_BUFFERS, &ls) || nbT_drop_ties(vm, &ls, 1)) { free(ls.t); return NB_ERR; }
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
  void **slot = nbT_idmap_slot(&c->done, T(leaf), &found);
  if (!slot) return nb_error(vm, "out of memory");
  if (found) { *out = *(nb_Value *)*slot; nb_incref(*out); return NB_OK; }
  nb_Value *r = malloc(sizeof *r);
  if (!r) { c->done.n--; c->done.key[slot - c->done.val] = NULL; return nb_error(vm, "out of memory"); }
  if (nbV_call(vm, c->f, &leaf, 1, r)) { free(r); c->done.n--; c->done.key[slot - c->done.val] = NULL; return NB_ERR; }
  *slot = r;
  *out = *r; nb_incref(*out);
  return NB_OK;
}
static int map_leaf_keep(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out);
static int b_map_tensors(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  MapCtx c = { args[1], {0} };
  bool keep = nb_truthy(args[2]);
  int st = nbT_tree_walk_mode(vm, args[0], keep ? NBT_KEEP_BUFFERS : NBT_SKIP_BUFFERS, keep ? map_leaf_keep : map_leaf, &c, NULL, out);
  for (size_t i = 0; i < c.done.cap; i++)
    if (c.done.key[i]) { nb_decref(*(nb_Value *)c.done.val[i]); free(c.done.val[i]); }
  nbT_idmap_free(&c.done);
  return st;
}

/* map_tensors(tree, f, keep=false): keep=true keeps the non-tensor leaves
** (functions, numbers, strings) and the buffers as they are, so a model
** maps to a model (nn.map_tree) */
static int map_leaf_keep(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  if (leaf.t == NB_TTENSOR) return map_leaf(vm, ctx, leaf, out);
  nb_incref(leaf); *out = leaf;
  return NB_OK;
}

/* to(model, target): every tensor of a tree (parameters and buffers) moved
** to a device, or its floating tensors cast to a dtype (integer ones such as
** num_batches_tracked kept: torch's module.to), IN PLACE: the records and
** lists keep their identity, their fields are replaced.  A tensor tied at
** several places becomes one tensor again; one already there is kept (no
** copy); a parameter stays a leaf with its requires_grad.  Optimizers hold
** the tensors they were given: build them after moving (docs/stdlib.md). */
typedef struct ToCtx { bool is_dev; nt_Device dev; nt_DType dt; IdMap done; const void *path[MAX_TREE_DEPTH + 2]; } ToCtx;
static int to_tensor(nb_VM *vm, ToCtx *c, nt_Tensor *t, nb_Value *out) {
  bool keep = c->is_dev ? t->device == c->dev : (!nt_dtype_is_float(t->dtype) || t->dtype == c->dt);
  if (keep) { *out = nb_obj(NB_TTENSOR, nt_retain(t)); return NB_OK; }
  bool found;
  void **slot = nbT_idmap_slot(&c->done, t, &found);
  if (!slot) return nb_error(vm, "out of memory");
  if (found) { *out = nb_obj(NB_TTENSOR, nt_retain(*slot)); return NB_OK; }
  nt_Tensor *d = nt_detach(t);
  nt_Tensor *r = d ? (c->is_dev ? nt_to_device(d, c->dev) : nt_to_dtype(d, c->dt)) : NULL;
  nt_release(d);
  if (r && t->requires_grad && nt_set_requires_grad(r, true)) { nt_release(r); r = NULL; }
  if (!r) { c->done.n--; c->done.key[slot - c->done.val] = NULL; return nbT_err(vm); }
  *slot = r;   /* the map's reference */
  *out = nb_obj(NB_TTENSOR, nt_retain(r));
  return NB_OK;
}
static int to_walk(nb_VM *vm, ToCtx *c, nb_Value v, int depth) {
  if (v.t != NB_TLIST && v.t != NB_TREC) return NB_OK;
  if (depth > MAX_TREE_DEPTH) return nb_error_kind(vm, "ValueError", "to: the model is nested more than %d deep", MAX_TREE_DEPTH);
  for (int i = 0; i < depth; i++)
    if (c->path[i] == v.u.p) return nb_error_kind(vm, "ValueError", "to: the %s contains itself", nb_typename(v));
  c->path[depth] = v.u.p;
  int n = v.t == NB_TLIST ? ((nb_List *)v.u.p)->n : ((nb_Rec *)v.u.p)->n;
  for (int i = 0; i < n; i++) {
    nb_Value *slot = v.t == NB_TLIST ? &((nb_List *)v.u.p)->items[i] : &((nb_Rec *)v.u.p)->vals[i];
    if (slot->t == NB_TTENSOR) {
      nb_Value r;
      if (to_tensor(vm, c, T(*slot), &r)) return NB_ERR;
      nb_store(slot, r);
    } else if (to_walk(vm, c, *slot, depth + 1)) return NB_ERR;
  }
  return NB_OK;
}
int nbT_tree_to(nb_VM *vm, nb_Value tree, bool is_dev, nt_Device dev, nt_DType dt) {
  ToCtx *c = calloc(1, sizeof *c);
  if (!c) return nb_error(vm, "out of memory");
  c->is_dev = is_dev; c->dev = dev; c->dt = dt;
  int st = to_walk(vm, c, tree, 0);
  for (size_t i = 0; i < c->done.cap; i++) if (c->done.key[i]) nt_release(c->done.val[i]);
  nbT_idmap_free(&c->done);
  free(c);
  return st;
}

static int b_zero_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (nbT_leaves(vm, args[0], &ls)) { free(ls.t); return NB_ERR; }
  for (int i = 0; i < ls.n; i++) nt_set_grad(ls.t[i], NULL);
  free(ls.t);
  *out = nb_nil();
  return NB_OK;
}
static int b_requires_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (nbT_leaves(vm, args[0], &ls)) { free(ls.t); return NB_ERR; }
  bool on = args[1].t == NB_TNIL ? true : nb_truthy(args[1]);
  for (int i = 0; i < ls.n; i++) if ((nt_dtype_is_float(ls.t[i]->dtype) || nt_dtype_is_complex(ls.t[i]->dtype)) && nt_set_requires_grad(ls.t[i], on)) { free(ls.t); return nbT_err(vm); }
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
  if (leaf.t == NB_TTENSOR && (nt_dtype_is_float(T(leaf)->dtype) || nt_dtype_is_complex(T(leaf)->dtype))) {
    bool found;
    void **slot = nbT_idmap_slot(fresh, T(leaf), &found);
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
/* ---- grad()'s write-back (torch.func.functional_call's semantics)
** f runs on a copy of each differentiated argument: fresh leaves at the
** parameters, the original values at buffers (nn.register_buffer), new
** records and lists around them.  What f assigns into that copy would be
** lost with it, so after f returns every change is carried to the original:
**   - a buffer field (BatchNorm's `self.running_mean = ...`), a number,
**     string, bool or any other non-parameter field, a new field, items
**     appended to a list: written back (tensors detached: the running
**     statistics must not hold the step's graph; a fresh leaf written
**     elsewhere goes back as its parameter);
**   - a parameter replaced (or a record or list holding parameters replaced,
**     a field holding one removed, a list shortened): an error — the
**     gradient is of the old value, and silently keeping either one is wrong.
** A buffer updated in place (batch_norm's running statistics) is the
** original tensor already. */
typedef struct WriteBack {
  IdMap twins;        /* copy container -> original container */
  IdMap fresh_of;     /* original tensor -> its fresh leaf */
  IdMap orig_of;      /* fresh leaf -> original tensor */
} WriteBack;

static bool same_value(nb_Value a, nb_Value b) {
  return a.t == b.t && (a.t == NB_TNIL || (a.t == NB_TNUM ? a.u.n == b.u.n : a.t == NB_TBOOL ? a.u.b == b.u.b : a.u.p == b.u.p));
}
/* a value f put into the copy, as it goes into the original: fresh leaves
** back to their parameters, copies back to their originals, other tensors
** detached (they are state, not part of the step's graph) */
static int wb_resolve_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  WriteBack *wb = ctx;
  if (leaf.t == NB_TTENSOR) {
    nt_Tensor *o = nbT_idmap_get(&wb->orig_of, T(leaf));
    if (o) { *out = nb_obj(NB_TTENSOR, nt_retain(o)); return NB_OK; }
    if (T(leaf)->requires_grad || T(leaf)->grad_fn) {
      nt_Tensor *d = nt_detach(T(leaf));
      if (!d) return nbT_err(vm);
      *out = nb_obj(NB_TTENSOR, d);
      return NB_OK;
    }
  }
  nb_incref(leaf); *out = leaf;
  return NB_OK;
}
static int wb_resolve(nb_VM *vm, WriteBack *wb, nb_Value v, nb_Value *out) {
  if (v.t == NB_TLIST || v.t == NB_TREC) {
    void *o = nbT_idmap_get(&wb->twins, v.u.p);
    if (o) { *out = (nb_Value){ .t = v.t, .u.p = o }; nb_incref(*out); return NB_OK; }
  }
  return nbT_tree_walk_mode(vm, v, NBT_ALL, wb_resolve_leaf, wb, NULL, out);
}
/* whether v is or holds a parameter that f got a fresh leaf for */
static int wb_holds_param(nb_VM *vm, WriteBack *wb, nb_Value v, bool *holds) {
  Leaves ls = {0};
  *holds = false;
  if (nbT_leaves(vm, v, &ls)) { free(ls.t); return NB_ERR; }
  for (int i = 0; i < ls.n && !*holds; i++) *holds = nbT_idmap_get(&wb->fresh_of, ls.t[i]) != NULL;
  free(ls.t);
  return NB_OK;
}
static int wb_lost(nb_VM *vm, const char *path, const char *what) {
  return nb_error_kind(vm, "ValueError",
                       "grad: the differentiated function %s %s, which holds parameters (fresh copies inside grad/value_and_grad): "
                       "the change would be lost. Change parameters outside the differentiated function; state that is not "
                       "trained belongs in a buffer (nn.register_buffer), whose assignments are written back", what, path);
}
static int wb_walk(nb_VM *vm, WriteBack *wb, nb_Value orig, nb_Value copy, nb_Buf *path, int depth);
/* one place: orig's value ov, the copy's cv; set(v) writes the original */
static int wb_place(nb_VM *vm, WriteBack *wb, nb_Value ov, nb_Value cv, bool buffer, nb_Buf *path, int depth, nb_Value *set) {
  *set = (nb_Value){ .t = NB_TUNDEF };
  if ((ov.t == NB_TLIST || ov.t == NB_TREC) && cv.t == ov.t && nbT_idmap_get(&wb->twins, cv.u.p) == ov.u.p)
    return wb_walk(vm, wb, ov, cv, path, depth + 1);
  if (ov.t == NB_TTENSOR && cv.t == NB_TTENSOR && nbT_idmap_get(&wb->fresh_of, T(ov)) == T(cv)) return NB_OK;   /* the parameter */
  if (same_value(ov, cv)) return NB_OK;
  if (!buffer) {
    bool holds;
    if (wb_holds_param(vm, wb, ov, &holds)) return NB_ERR;
    if (holds) return wb_lost(vm, nbB_cstr(path), "replaced");
  }
  return wb_resolve(vm, wb, cv, set);
}
static void path_push(nb_Buf *path, size_t mark, const char *k, size_t n, int idx) {
  path->n = mark;
  if (k) { nbB_putc(path, '.'); nbB_add(path, k, n); }
  else nbB_printf(path, "[%d]", idx);
}
static int wb_walk(nb_VM *vm, WriteBack *wb, nb_Value orig, nb_Value copy, nb_Buf *path, int depth) {
  if (depth > MAX_TREE_DEPTH) return NB_OK;   /* the copy was made by a walk bounded the same way */
  size_t mark = path->n;
  int st = NB_OK;
  if (orig.t == NB_TREC) {
    nb_Rec *o = orig.u.p, *c = copy.u.p;
    for (int i = 0; i < c->n && !st; i++) {
      nb_Str *k = c->keys[i];
      path_push(path, mark, k->data, k->len, 0);
      int oi = nbR_find(o, k);
      nb_Value set;
      if (oi < 0) st = wb_resolve(vm, wb, c->vals[i], &set);   /* a new field */
      else st = wb_place(vm, wb, o->vals[oi], c->vals[i], nbT_is_buffer_field(o, k), path, depth, &set);
      if (!st && set.t != NB_TUNDEF) nbR_set(o, k, set);
    }
    for (int i = 0; i < o->n && !st; i++) {   /* fields f removed */
      nb_Str *k = o->keys[i];
      if (nbR_find(c, k) >= 0) continue;
      path_push(path, mark, k->data, k->len, 0);
      bool holds;
      if ((st = wb_holds_param(vm, wb, o->vals[i], &holds))) break;
      if (holds) { st = wb_lost(vm, nbB_cstr(path), "removed"); break; }
      nbR_remove(o, k);
      i--;
    }
  } else {
    nb_List *o = orig.u.p, *c = copy.u.p;
    int common = o->n < c->n ? o->n : c->n;
    for (int i = 0; i < common && !st; i++) {
      path_push(path, mark, NULL, 0, i);
      nb_Value set;
      st = wb_place(vm, wb, o->items[i], c->items[i], false, path, depth, &set);
      if (!st && set.t != NB_TUNDEF) nb_store(&o->items[i], set);
    }
    if (!st && c->n < o->n) {
      path->n = mark;
      st = nb_error_kind(vm, "ValueError", "grad: the differentiated function shortened the list %s from %d to %d items: "
                         "the change would be lost (change the model outside grad/value_and_grad)", mark ? nbB_cstr(path) : "(the argument)", o->n, c->n);
    }
    for (int i = common; i < c->n && !st; i++) {   /* appended items */
      nb_Value set;
      if (!(st = wb_resolve(vm, wb, c->items[i], &set))) nbL_push(o, set);
    }
  }
  path->n = mark;
  if (path->p) path->p[mark] = 0;
  return st;
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
  /* one fresh leaf per distinct tensor across all argnums; buffers are
  ** handed over as they are; the copies' containers are remembered for the
  ** write-back */
  WriteBack wb = {{0}};
  for (int k = 0; k < nn && !st; k++) {
    if (nums[k] < 0 || nums[k] >= nf) { st = nb_error_kind(vm, "IndexError", "grad: argnums %lld is out of range for %d arguments", (long long)nums[k], nf); break; }
    nb_Value fresh = nb_nil();
    if ((st = nbT_tree_walk_mode(vm, fargs[nums[k]], NBT_KEEP_BUFFERS, fresh_leaf, &wb.fresh_of, &wb.twins, &fresh))) break;
    nb_store(&call[nums[k]], fresh);
  }
  for (size_t i = 0; i < wb.fresh_of.cap && !st; i++) {
    bool found;
    void **slot = wb.fresh_of.key[i] ? nbT_idmap_slot(&wb.orig_of, wb.fresh_of.val[i], &found) : NULL;
    if (wb.fresh_of.key[i] && !slot) st = nb_error(vm, "out of memory");
    else if (slot) *slot = (void *)wb.fresh_of.key[i];
  }
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
  /* what f assigned into the copies goes back to the arguments (each
  ** distinct argument once) */
  for (int k = 0; k < nn && !st; k++) {
    bool dup = false;
    for (int j = 0; j < k; j++) dup |= nums[j] == nums[k];
    nb_Value o = fargs[nums[k]], c = call[nums[k]];
    if (dup || (o.t != NB_TLIST && o.t != NB_TREC) || c.t != o.t) continue;
    nb_Buf path = {0};
    nbB_printf(&path, "args[%d]", (int)nums[k]);
    st = wb_walk(vm, &wb, o, c, &path, 0);
    nbB_free(&path);
  }
  for (size_t i = 0; i < wb.fresh_of.cap; i++) if (wb.fresh_of.key[i]) nt_release(wb.fresh_of.val[i]);
  nbT_idmap_free(&wb.fresh_of); nbT_idmap_free(&wb.orig_of); nbT_idmap_free(&wb.twins);
  nb_Value grads = nb_nil();
  if (!st) {
    if (multi) {
      nb_List *l = nbL_new(nn);
      for (int k = 0; k < nn && !st; k++) { nb_Value g; if ((st = nbT_tree_walk(vm, call[nums[k]], grad_of_leaf, NULL, &g))) break; nbL_push(l, g); }
      grads = nb_obj(NB_TLIST, l);
    } else st = nbT_tree_walk(vm, call[nums[0]], grad_of_leaf, NULL, &grads);
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
** naming the input, the element and both values.
** Inputs stay on their device (as torch's gradcheck on CUDA tensors): the f64
** leaf is a clone on that device, f and backward run there, and each element
** of a device leaf is perturbed by a one-element fill (gc_set), so the work
** per evaluation is f's plus O(1), as on the host. */
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
/* x[e] = v for gradcheck's contiguous f64 leaf x, on any device.  On the host
** x's address is taken right before the write (textend.h): f may leave lazy
** values reading x pending (a value it stores), and nt_data_ptr computes them
** first -- a pointer kept across the calls wrote under them.  On a device the
** write is a fill of a 0-d view of element e (a kernel on x's memory, ordered
** with f's work on the device's stream); grad mode is off, so it is not
** recorded. */
static int gc_set(nt_Tensor *x, int64_t e, double v) {
  if (x->device == NT_CPU) { ((double *)nt_data_ptr(x))[e] = v; return 0; }
  nt_Tensor *el = nt_view_of(x);
  if (!el) return -1;
  el->ndim = 0; el->offset = x->offset + e;
  nt_update_meta(el);
  int rc = nt_fill_(el, v);
  nt_release(el);
  return rc;
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
      /* an f64 copy on the input's own device (nt_clone keeps the device) */
      nt_Tensor *d = nt_to_dtype(T(v), NT_F64), *c = d ? nt_clone(d) : NULL;
      nt_release(d);
      nt_Tensor *leaf = c ? nt_detach(c) : NULL;
      nt_release(c);
      if (!leaf || nt_set_requires_grad(leaf, true)) { nt_release(leaf); st = nbT_err(vm); break; }
      ins[i] = nb_obj(NB_TTENSOR, leaf);
    } else { ins[i] = v; nb_incref(v); }
  }
  /* fixed weights for the output: a deterministic sequence, not the global RNG;
  ** made on the host and moved to the output's device */
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
      if (wv) {
        for (int64_t i = 0; i < m; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; wv[i] = 0.5 + (double)(x >> 11) / 9007199254740992.0; }
        w = nt_from_buffer(wv, NT_F64, T(r)->shape, T(r)->ndim, NT_F64);
        free(wv);
        if (w && T(r)->device != NT_CPU) { nt_Tensor *wd = nt_to_device(w, T(r)->device); nt_release(w); w = wd; }
      }
      nb_decref(r);
      if (!wv) st = nb_error(vm, "out of memory");
      else if (!w) st = nbT_err(vm);
    }
  }
  if (!st) st = gc_eval(vm, f, ins, k, w, &base, &graph);
  if (!st && nt_backward(graph, NULL, false)) st = nbT_err(vm);
  nt_release(graph);
  nt_set_grad_enabled(false);
  for (int i = 0; i < k && !st; i++) {
    if (ins[i].t != NB_TTENSOR || !T(ins[i])->requires_grad) continue;
    nt_Tensor *x = T(ins[i]);
    /* the analytical gradient (computed on x's device) and x's values, on the host */
    nt_Tensor *g = nt_grad(x);
    size_t nb = sizeof(double) * (size_t)(x->numel ? x->numel : 1);
    double *gd = g ? malloc(nb) : NULL, *xv = malloc(nb);
    if (!xv || (g && !gd)) { free(gd); free(xv); st = nb_error(vm, "out of memory"); break; }
    if ((g && nt_to_host(g, gd, NT_F64)) || nt_to_host(x, xv, NT_F64)) { free(gd); free(xv); st = nbT_err(vm); break; }
    for (int64_t e = 0; e < x->numel && !st; e++) {
      double keep = xv[e], fp, fm;
      if (gc_set(x, e, keep + eps)) { st = nbT_err(vm); break; }
      st = gc_eval(vm, f, ins, k, w, &fp, NULL);
      if (!st) st = gc_set(x, e, keep - eps) ? nbT_err(vm) : gc_eval(vm, f, ins, k, w, &fm, NULL);
      if (gc_set(x, e, keep) && !st) st = nbT_err(vm);
      if (st) break;
      double num = (fp - fm) / (2 * eps), ana = gd ? gd[e] : 0;
      if (fabs(ana - num) > atol + rtol * fabs(num))
        st = nb_error_kind(vm, "GradcheckError", "gradcheck: input %d, element %lld: autograd %.8g, finite differences %.8g (|diff| %.3g > atol %g + rtol %g * |numeric|)", i, (long long)e, ana, num, fabs(ana - num), atol, rtol);
    }
    free(gd); free(xv);
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
** The VM (lexec.c, the NOGRAD/AUTOCAST instructions and its block stack) sets
** the thread-local mode and puts the previous one back however the block ends. */
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

/* ------------------------------------------------------------ the table */
static nb_Builtin grad_builtins[] = {
  { "backward", b_backward, "loss, grad=nil, retain_graph=false", "backward(loss): accumulates d loss / d leaf into each leaf's .grad" },
  { "zero_grad", b_zero_grad, "params", "zero_grad(params): clears .grad of every tensor in a tree" },
  { "custom_vjp", b_custom_vjp, "fwd, bwd", "custom_vjp(fwd, bwd): a function with your own gradient (torch.autograd.Function): fwd(*args) returns [out, saved]; bwd(saved, grad_out) returns one gradient per argument (a list, or a tensor for one argument; nil for none); works under grad, value_and_grad and backward" },
  { "same", b_same, "a, b", "same(a, b): true when a and b are the same object (Python's `a is b`): one tensor, list, record or function; numbers, bools and nil compare by value" },
  { "tree_tensors", b_tree_tensors, "tree", "tree_tensors(tree): the distinct tensors of a tree (records/lists), in order, buffers (fields a record names in __buffers) left out; a tensor at several places (tied weights) once" },
  { "tree_buffers", b_tree_buffers, "tree", "tree_buffers(tree): the distinct buffers of a tree (the tensors under the fields a record names in its __buffers list), in order" },
  { "map_tensors", b_map_tensors, "tree, f, keep=false", "map_tensors(tree, f, keep=false): a tree of the same structure with f(t) at each tensor leaf (nil elsewhere, and at buffers; keep=true keeps the other leaves and the buffers as they are); a tensor at several places (tied weights) is mapped once and the one result stands at each place" },
  { "requires_grad", b_requires_grad, "params, on=true", "requires_grad(tree, on=true): marks every float tensor of a tree (buffers left out) as a leaf to differentiate" },
  { "grad_enabled", b_no_grad_enabled, "", "grad_enabled(): false inside no_grad { }" },
  { "autocast_dtype", b_autocast_dtype, "", "autocast_dtype(): \"bf16\" or \"f16\" inside autocast(...) { }, else nil" },
  { "checkpoint", b_checkpoint, "*args", "checkpoint(f, *args): f(*args) without keeping f's activations; backward recomputes them (same RNG). f returns a tensor or a list of tensors" },
  { "autograd_stats", b_autograd_stats, "", "autograd_stats(): {nodes, bytes} held by live autograd graphs (the activations they keep)" },
  { "grad", b_grad, "f, argnums=0", "grad(f, argnums=0): a function returning d f / d args[argnums], shaped like that argument (a tree; nil at buffers). f runs on a copy of the argument; what it assigns into it (buffers, numbers, new fields) is written back, a replaced parameter is an error" },
  { "value_and_grad", b_value_and_grad, "f, argnums=0", "value_and_grad(f, argnums=0): like grad, returning [value, grads]" },
  { "gradcheck", b_gradcheck, "f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3", "gradcheck(f, inputs): autograd vs central finite differences in f64; true or an error naming the element" },
  { NULL, NULL, NULL, NULL }
};

void nbT_register_grad(void) {
  nbC_register(grad_builtins);
  nbC_prepare(grad_call_builtin);
  nbC_prepare(cvjp_call_builtin);
}
