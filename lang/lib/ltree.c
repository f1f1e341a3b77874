/*
** lib/ltree.c — pytrees: nested records and lists whose leaves are tensors
** (models, optimizer state, gradients), tied parameters (one tensor at
** several places) and buffers (module state that is not trained).  Shared
** by autograd (ltgrad.c), the optimizers (loptim.c) and checkpoint files
** (ltio.c); declared in ltensor.h.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ltensor.h"

/* ---- buffers
** A record's field named in its `__buffers` field (a list of strings, torch's
** module._buffers; nn.register_buffer writes it) holds module state that is
** not trained: BatchNorm's running statistics.  Everything under such a
** field is a buffer.  Parameter walks (nbT_tree_walk, nbT_leaves: grad()'s
** trees, requires_grad, nn.parameters, optimizers, clipping, data-parallel
** averaging) leave buffers out: nil at their place in the trees they build.
** save() and nn.load_state walk records themselves and keep them.  The
** `__buffers` list itself is metadata: every walk copies it as it is. */
static bool str_is(const nb_Str *s, const char *p, size_t n) { return s->len == n && !memcmp(s->data, p, n); }
static bool is_buffers_key(const nb_Str *k) { return str_is(k, "__buffers", 9); }
/* rec's __buffers list (borrowed), or NULL */
static nb_List *buffer_names(const nb_Rec *rec) {
  int i = nbR_find_cstr(rec, "__buffers");
  return i >= 0 && rec->vals[i].t == NB_TLIST ? rec->vals[i].u.p : NULL;
}
bool nbT_is_buffer_field(const nb_Rec *rec, const nb_Str *key) {
  nb_List *l = buffer_names(rec);
  if (!l) return false;
  for (int j = 0; j < l->n; j++)
    if (l->items[j].t == NB_TSTR && str_is(nb_str(l->items[j]), key->data, key->len)) return true;
  return false;
}

/* ------------------------------------------------------------ pytrees
** Nested records and lists whose leaves are tensors (models, optimizer
** state, gradients).  Non-tensor leaves (functions, numbers) are kept. */
typedef struct Walk { LeafFn fn; void *ctx; int mode; IdMap *twins; const void **path; } Walk;
/* path: the containers being walked; one met again contains itself: an
** error that says so (not "nested too deeply" MAX_TREE_DEPTH levels on) */
static int tree_map(nb_VM *vm, Walk *w, nb_Value v, int mode, nb_Value *out, int depth) {
  if (depth > MAX_TREE_DEPTH) return nb_error_kind(vm, "ValueError", "tree is nested more than %d deep", MAX_TREE_DEPTH);
  if (v.t == NB_TLIST || v.t == NB_TREC) {
    for (int i = 0; i < depth; i++)
      if (w->path[i] == v.u.p) return nb_error_kind(vm, "ValueError", "tree: the %s contains itself", nb_typename(v));
    w->path[depth] = v.u.p;
  }
  nb_Value made = nb_nil();
  if (v.t == NB_TLIST) {
    nb_List *l = v.u.p, *r = nbL_new(l->n);
    made = nb_obj(NB_TLIST, r);
    for (int i = 0; i < l->n; i++) {
      nb_Value x;
      if (tree_map(vm, w, l->items[i], mode, &x, depth + 1)) { nb_decref(made); return NB_ERR; }
      nbL_push(r, x);
    }
  } else if (v.t == NB_TREC) {
    nb_Rec *rec = v.u.p, *r = nbR_new(rec->n);
    made = nb_obj(NB_TREC, r);
    bool bufs = buffer_names(rec) != NULL;
    for (int i = 0; i < rec->n; i++) {
      nb_Value x, fv = rec->vals[i];
      int m = mode;
      if (bufs && (mode == NBT_SKIP_BUFFERS || mode == NBT_KEEP_BUFFERS || mode == NBT_ONLY_BUFFERS) && nbT_is_buffer_field(rec, rec->keys[i]))
        m = mode == NBT_ONLY_BUFFERS ? NBT_ALL : -mode;   /* -SKIP: nil here; -KEEP: the value as it is */
      if (is_buffers_key(rec->keys[i]) || m == -NBT_KEEP_BUFFERS) { x = fv; nb_incref(x); }
      else if (m == -NBT_SKIP_BUFFERS) x = nb_nil();
      else if (tree_map(vm, w, fv, m, &x, depth + 1)) { nb_decref(made); return NB_ERR; }
      nbR_set(r, rec->keys[i], x);
    }
  } else {
    if (mode == NBT_ONLY_BUFFERS && v.t == NB_TTENSOR) { *out = nb_nil(); return NB_OK; }
    return w->fn(vm, w->ctx, v, out);
  }
  if (w->twins) {   /* the copy -> its original, for ltgrad.c's write-back */
    bool found;
    void **slot = nbT_idmap_slot(w->twins, made.u.p, &found);
    if (!slot) { nb_decref(made); return nb_error(vm, "out of memory"); }
    *slot = v.u.p;
  }
  *out = made;
  return NB_OK;
}
int nbT_tree_walk_mode(nb_VM *vm, nb_Value v, int mode, LeafFn fn, void *ctx, IdMap *twins, nb_Value *out) {
  const void *path[MAX_TREE_DEPTH + 2];
  Walk w = { fn, ctx, mode, twins, path };
  return tree_map(vm, &w, v, mode, out, 0);
}
int nbT_tree_walk(nb_VM *vm, nb_Value v, LeafFn fn, void *ctx, nb_Value *out) {
  return nbT_tree_walk_mode(vm, v, NBT_SKIP_BUFFERS, fn, ctx, NULL, out);
}
/* Tensor leaves in order (borrowed). */
static int collect_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  Leaves *ls = ctx;
  if (leaf.t == NB_TTENSOR) {
    if (ls->n == ls->cap) { ls->cap = ls->cap ? ls->cap * 2 : 16; ls->t = realloc(ls->t, sizeof(nt_Tensor *) * (size_t)ls->cap); if (!ls->t) return nb_error(vm, "out of memory"); }
    ls->t[ls->n++] = T(leaf);
  }
  *out = nb_nil();
  return NB_OK;
}
int nbT_leaves_mode(nb_VM *vm, nb_Value tree, int mode, Leaves *ls) {
  nb_Value junk = nb_nil();
  if (nbT_tree_walk_mode(vm, tree, mode, collect_leaf, ls, NULL, &junk)) return NB_ERR;
  nb_decref(junk);
  return NB_OK;
}
int nbT_leaves(nb_VM *vm, nb_Value tree, Leaves *ls) { return nbT_leaves_mode(vm, tree, NBT_SKIP_BUFFERS, ls); }

/* ---- ties
** One tensor may sit at several places of a model (GPT-2's token embedding
** is also its output projection).  It is ONE parameter: grad() hands f the
** same fresh leaf at every place (so the gradient there is the total, the
** same tensor at each place), optimizers update it once with one state,
** clipping and unscaling count and scale it once, nn.parameters lists it
** once.  IdMap maps a tensor (by identity) to a value: open addressing on
** the pointer, grown at half load. */
static size_t id_hash(const void *p) { uintptr_t x = (uintptr_t)p; x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; return (size_t)x; }
/* the slot of key k (NULL when out of memory); *found says whether it was there */
void **nbT_idmap_slot(IdMap *m, const void *k, bool *found) {
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
/* the value of key k, or NULL when absent (never inserts) */
void *nbT_idmap_get(const IdMap *m, const void *k) {
  if (!m->cap) return NULL;
  size_t j = id_hash(k) & (m->cap - 1);
  while (m->key[j] && m->key[j] != k) j = (j + 1) & (m->cap - 1);
  return m->key[j] ? m->val[j] : NULL;
}
void nbT_idmap_free(IdMap *m) { free(m->key); free(m->val); m->key = NULL; m->val = NULL; m->cap = m->n = 0; }

/* Drops from ls[0] every tensor already seen at an earlier place, and the
** same places from the aligned lists ls[1..n) (state and gradient trees
** shaped like the parameters); lists with n == 0 entries are left alone. */
int nbT_drop_ties(nb_VM *vm, Leaves *ls, int nlists) {
  IdMap seen = {0};
  int w = 0;
  for (int k = 0; k < ls[0].n; k++) {
    bool found;
    if (!nbT_idmap_slot(&seen, ls[0].t[k], &found)) { nbT_idmap_free(&seen); return nb_error(vm, "out of memory"); }
    if (found) continue;
    for (int i = 0; i < nlists; i++) if (ls[i].n) ls[i].t[w] = ls[i].t[k];
    w++;
  }
  for (int i = 0; i < nlists; i++) if (ls[i].n) ls[i].n = w;
  nbT_idmap_free(&seen);
  return NB_OK;
}
