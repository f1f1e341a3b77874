/*
** tautograd.c — define-by-run reverse mode.
**
** Each differentiable op's front end calls nt_record(), which hangs a node off
** the output (out->grad_fn).  A node retains its input tensors; the edges of
** the graph are in[k]->grad_fn (or a leaf when in[k] has no grad_fn but
** requires grad).  Nodes never point at their outputs, so there are no cycles
** and refcounting frees graphs.
**
** nt_backward: DFS to collect the nodes and count, per node, the number of
** incoming gradient edges (deps); then Kahn's algorithm from the root: a node
** runs once all consumers have sent their gradient into node->gacc.
*/
#include "tinternal.h"
#include <stdlib.h>

static _Thread_local bool grad_off = false;   /* stored inverted: zero-init = enabled */

bool nt_grad_enabled(void) { return !grad_off; }
bool nt_set_grad_enabled(bool on) { bool prev = !grad_off; grad_off = !on; return prev; }

bool nt_needs_grad(int nin, nt_Tensor *const *in) {
  if (grad_off) return false;
  for (int i = 0; i < nin; i++)
    if (in[i] && in[i]->requires_grad) return true;
  return false;
}

nt_Node *nt_record(nt_Tensor *out, const char *name, nt_BackwardFn fn, int nin, nt_Tensor *const *in) {
  nt_Node *n = nt_calloc(1, sizeof *n);
  if (!n) return NULL;
  n->in = nin <= NT_NODE_INLINE ? n->inl : nt_calloc((size_t)nin, sizeof(nt_Tensor *));
  if (!n->in) { free(n); return NULL; }
  n->refcount = 1; n->name = name; n->backward = fn; n->nin = nin;
  for (int i = 0; i < nin; i++) n->in[i] = nt_retain(in[i]);
  if (out->grad_fn) nt_node_release(out->grad_fn);
  out->grad_fn = n;
  out->requires_grad = true;
  return n;
}

int nt_node_save(nt_Node *n, nt_Tensor *t) {
  if (n->nsaved >= 4) NT_FAIL("autograd node %s: too many saved tensors", n->name);
  nt_Tensor *d = nt_detach(t);
  if (!d) return -1;
  n->saved[n->nsaved] = d;
  return n->nsaved++;
}

/* Drops what the node holds (inputs, saved tensors, ctx); the node itself
** stays (its output still points at it) but can no longer run backward. */
static void node_free_graph(nt_Node *n) {
  if (n->released) return;
  n->released = true;
  for (int i = 0; i < n->nin; i++) { nt_release(n->in[i]); n->in[i] = NULL; }
  for (int i = 0; i < n->nsaved; i++) { nt_release(n->saved[i]); n->saved[i] = NULL; }
  if (n->ctx_free && n->ctx) n->ctx_free(n->ctx);
  n->ctx = NULL;
}

void nt_node_release(nt_Node *n) {
  if (!n || --n->refcount > 0) return;
  node_free_graph(n);
  nt_release(n->gacc);
  if (n->in != n->inl) free(n->in);
  free(n);
}

/* ---- public autograd helpers -------------------------------------------- */
int nt_set_requires_grad(nt_Tensor *t, bool on) {
  if (t->grad_fn) NT_FAIL("requires_grad can only be changed on leaf tensors (use detach())");
  if (on && !nt_dtype_is_float(t->dtype))
    NT_FAIL("only floating tensors can require gradients, got %s", nt_dtype_name(t->dtype));
  t->requires_grad = on;
  return 0;
}

int nt_set_grad(nt_Tensor *t, nt_Tensor *g) {
  if (g) {
    char a[128], b[128];
    if (g->ndim != t->ndim || memcmp(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))
      NT_FAIL("grad: assigned grad has shape %s, expected %s", nt_shape_str(g->shape, g->ndim, a, sizeof a),
              nt_shape_str(t->shape, t->ndim, b, sizeof b));
    nt_retain(g);
  }
  nt_release(t->grad);
  t->grad = g;
  return 0;
}

const char *nt_grad_fn_name(const nt_Tensor *t) { return t->grad_fn ? t->grad_fn->name : NULL; }

nt_Tensor *nt_detach(nt_Tensor *t) { return nt_view_of(t); }

nt_Tensor *nt_sum_to_shape(nt_Tensor *g, const int64_t *shape, int ndim) {
  if (g->ndim == ndim && !memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim)) return nt_retain(g);
  int axes[NT_MAXDIM], na = 0, lead = g->ndim - ndim;
  if (lead < 0) {
    char a[128], b[128];
    NT_FAIL_NULL("gradient of shape %s cannot be reduced to %s", nt_shape_str(g->shape, g->ndim, a, sizeof a),
                 nt_shape_str(shape, ndim, b, sizeof b));
  }
  for (int i = 0; i < g->ndim; i++)
    if (i < lead || (shape[i - lead] == 1 && g->shape[i] != 1)) axes[na++] = i;
  nt_Tensor *s = na ? nt_sum(g, axes, na, true) : nt_retain(g);
  if (!s) return NULL;
  nt_Tensor *r = nt_reshape(s, shape, ndim);
  nt_release(s);
  return r;
}

/* ---- the engine ---------------------------------------------------------- */
typedef struct { nt_Node **v; int n, cap; } NodeVec;
static int vec_push(NodeVec *v, nt_Node *n) {
  if (v->n == v->cap) {
    int cap = v->cap ? v->cap * 2 : 64;
    nt_Node **nv = realloc(v->v, sizeof(nt_Node *) * (size_t)cap);
    if (!nv) { nt_error_oom(sizeof(nt_Node *) * (size_t)cap); return -1; }
    v->v = nv; v->cap = cap;
  }
  v->v[v->n++] = n;
  return 0;
}

/* dst += g for a gradient slot; takes ownership of g */
static int accumulate(nt_Tensor **slot, nt_Tensor *g) {
  if (!*slot) { *slot = g; return 0; }
  nt_Tensor *s = nt_add(*slot, g);
  nt_release(g);
  if (!s) return -1;
  nt_release(*slot);
  *slot = s;
  return 0;
}

/* brings a raw gradient to the input's shape and dtype; takes ownership */
static nt_Tensor *fit_grad(nt_Tensor *g, nt_Tensor *in) {
  nt_Tensor *r = nt_sum_to_shape(g, in->shape, in->ndim);
  nt_release(g);
  if (r && r->dtype != in->dtype) { nt_Tensor *c = nt_to_dtype(r, in->dtype); nt_release(r); r = c; }
  return r;
}

static int leaf_accumulate(nt_Tensor *leaf, nt_Tensor *g) {
  if (!leaf->grad) {
    /* own a private contiguous copy so later in-place edits of g's storage
    ** (it may alias gout) cannot change .grad */
    nt_Tensor *c = nt_clone(g);
    nt_release(g);
    if (!c) return -1;
    leaf->grad = c;
    return 0;
  }
  return accumulate(&leaf->grad, g);
}

static uint32_t visit_stamp = 0;

int nt_backward(nt_Tensor *root, nt_Tensor *grad, bool retain_graph) {
  if (!root->requires_grad)
    NT_FAIL("backward: tensor does not require grad and has no grad_fn");
  nt_Tensor *g0;
  if (grad) {
    char a[128], b[128];
    if (grad->ndim != root->ndim || memcmp(grad->shape, root->shape, sizeof(int64_t) * (size_t)root->ndim))
      NT_FAIL("backward: grad has shape %s but the tensor has shape %s", nt_shape_str(grad->shape, grad->ndim, a, sizeof a),
              nt_shape_str(root->shape, root->ndim, b, sizeof b));
    g0 = nt_retain(grad);
  } else {
    if (root->numel != 1) {
      char a[128];
      NT_FAIL("backward: grad can be implicitly created only for scalar outputs, got shape %s",
              nt_shape_str(root->shape, root->ndim, a, sizeof a));
    }
    g0 = nt_ones_like(root);
    if (!g0) return -1;
  }
  bool prev = nt_set_grad_enabled(false);
  int rc = 0;
  if (!root->grad_fn) {                       /* a leaf: d root / d root */
    rc = leaf_accumulate(root, g0);
    nt_set_grad_enabled(prev);
    return rc;
  }
  /* collect nodes and dependency counts */
  NodeVec all = {0}, stack = {0}, ready = {0};
  uint32_t stamp = ++visit_stamp;
  nt_Node *r = root->grad_fn;
  if (r->released) {
    nt_release(g0); nt_set_grad_enabled(prev);
    NT_FAIL("backward: trying to backward through the graph a second time (or after its buffers were freed); "
            "use retain_graph=true on the first backward");
  }
  r->visit = stamp; r->deps = 0; r->refcount++;
  if (vec_push(&all, r) || vec_push(&stack, r)) { rc = -1; goto done; }
  while (stack.n) {
    nt_Node *n = stack.v[--stack.n];
    for (int k = 0; k < n->nin; k++) {
      nt_Tensor *in = n->in[k];
      if (!in || !in->requires_grad || !in->grad_fn) continue;
      nt_Node *c = in->grad_fn;
      if (c->released) {
        nt_error_set("backward: trying to backward through the graph a second time (or after its buffers were freed); "
                     "use retain_graph=true on the first backward");
        rc = -1; goto done;
      }
      if (c->visit != stamp) {
        c->visit = stamp; c->deps = 0; c->refcount++;
        if (vec_push(&all, c) || vec_push(&stack, c)) { rc = -1; goto done; }
      }
      c->deps++;
    }
  }
  r->gacc = g0; g0 = NULL;
  if (vec_push(&ready, r)) { rc = -1; goto done; }
  while (ready.n) {
    nt_Node *n = ready.v[--ready.n];
    nt_Tensor *gin_inl[NT_NODE_INLINE] = {0}, **gin = gin_inl;
    if (n->nin > NT_NODE_INLINE) { gin = nt_calloc((size_t)n->nin, sizeof *gin); if (!gin) { rc = -1; goto done; } }
    nt_Tensor *gout = n->gacc; n->gacc = NULL;
    rc = n->backward(n, gout, gin);
    nt_release(gout);
    for (int k = 0; k < n->nin; k++) {
      nt_Tensor *in = n->in[k], *g = gin[k];
      gin[k] = NULL;
      if (!g) continue;
      if (rc || !in || !in->requires_grad) { nt_release(g); continue; }
      g = fit_grad(g, in);
      if (!g) { rc = -1; continue; }
      if (in->grad_fn) {
        nt_Node *c = in->grad_fn;
        if (accumulate(&c->gacc, g)) { rc = -1; continue; }
        if (--c->deps == 0 && vec_push(&ready, c)) rc = -1;
      } else if (leaf_accumulate(in, g)) rc = -1;
    }
    if (gin != gin_inl) free(gin);
    if (rc) goto done;
  }
done:
  nt_release(g0);
  for (int i = 0; i < all.n; i++) {
    nt_Node *n = all.v[i];
    nt_release(n->gacc); n->gacc = NULL;
    if (!retain_graph && rc == 0) node_free_graph(n);
  }
  for (int i = 0; i < all.n; i++) nt_node_release(all.v[i]);
  free(all.v); free(stack.v); free(ready.v);
  nt_set_grad_enabled(prev);
  return rc;
}
