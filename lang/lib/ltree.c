/*
** lib/ltree.c — pytrees: nested records and lists whose leaves are tensors
** (models, optimizer state, gradients), and tied parameters (one tensor at
** several places).  Shared by autograd (ltgrad.c), the optimizers
** (loptim.c) and checkpoint files (ltio.c); declared in ltensor.h.
*/
#include <stdint.h>
#include <stdlib.h>
#include "ltensor.h"

/* ------------------------------------------------------------ pytrees
** Nested records and lists whose leaves are tensors (models, optimizer
** state, gradients).  Non-tensor leaves (functions, numbers) are kept. */
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
int nbT_tree_walk(nb_VM *vm, nb_Value v, LeafFn fn, void *ctx, nb_Value *out) {
  const void *path[MAX_TREE_DEPTH + 2];
  return tree_map(vm, v, fn, ctx, out, 0, path);
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
int nbT_leaves(nb_VM *vm, nb_Value tree, Leaves *ls) {
  nb_Value junk = nb_nil();
  if (nbT_tree_walk(vm, tree, collect_leaf, ls, &junk)) return NB_ERR;
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
