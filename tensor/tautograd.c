/*
** tautograd.c — define-by-run reverse mode.
**
** Each differentiable op's front end calls nt_record(), which hangs a node off
** the output (out->grad_fn).  A node retains its input tensors and the edges
** CAPTURED at record time: edge[k].fn = in[k]->grad_fn then (retained), or a
** leaf (fn NULL, in[k] required grad).  The engine walks and delivers through
** these, never through a tensor's current grad_fn, so an in-place write that
** re-records a tensor (CopySlicesBackward, tinplace.c) leaves the gradients of
** its earlier consumers alone.  Before a node runs, the storage versions of
** the inputs it reads and the tensors it saved must be those recorded
** ("modified in place" error otherwise).  Nodes never point at their outputs,
** so there are no cycles and refcounting frees graphs.
**
** The engine (nt_backward, nt_autograd_grad): DFS to collect the nodes and
** count, per node, the number of incoming gradient edges (deps); then Kahn's
** algorithm from the roots: a node runs once all consumers have sent their
** gradient into node->gacc.  nt_autograd_grad stops at its input tensors
** (sinks) and hands their gradients back instead of filling leaves' .grad;
** activation checkpointing (lang/ltgrad.c) uses it to differentiate a
** recomputed segment without entering the graph around it.
**
** Boundary collector: checkpoint runs its segment with grad mode off and a
** collector installed; every front end asks nt_needs_grad about its inputs,
** so each tensor that requires grad and is used inside the segment — which
** must come from outside, since nothing inside records — is collected: those
** become the checkpoint node's inputs (its edges in the outer graph).
*/
#include "tinternal.h"
#include "tprofile.h"
#include "tfuse_grad.h"
#include <stdlib.h>

static _Thread_local bool grad_off = false;   /* stored inverted: zero-init = enabled */
static _Thread_local nt_TensorSet *collector = NULL;

bool nt_grad_enabled(void) { return !grad_off; }
bool nt_set_grad_enabled(bool on) { bool prev = !grad_off; grad_off = !on; return prev; }

nt_TensorSet *nt_boundary_collect(nt_TensorSet *set) { nt_TensorSet *prev = collector; collector = set; return prev; }

static void collect(nt_TensorSet *set, nt_Tensor *t) {
  for (int i = set->n - 1; i >= 0; i--) if (set->t[i] == t) return;
  if (set->n == set->cap) {
    int cap = set->cap ? set->cap * 2 : 16;
    nt_Tensor **nt = realloc(set->t, sizeof(nt_Tensor *) * (size_t)cap);
    if (!nt) { set->oom = true; return; }
    set->t = nt; set->cap = cap;
  }
  set->t[set->n++] = t;
}

bool nt_needs_grad(int nin, nt_Tensor *const *in) {
  if (grad_off) {
    if (collector)
      for (int i = 0; i < nin; i++) if (in[i] && in[i]->requires_grad) collect(collector, in[i]);
    return false;
  }
  for (int i = 0; i < nin; i++)
    if (in[i] && in[i]->requires_grad) return true;
  return false;
}

/* ---- node bookkeeping: creation numbers and what live graphs hold ---------- */
static uint64_t node_seq = 1;           /* atomics: graphs may live on worker threads */
static int64_t live_nodes = 0, held_bytes = 0;

uint64_t nt_autograd_seq(void) { return __atomic_load_n(&node_seq, __ATOMIC_RELAXED); }

static int64_t tensor_bytes(const nt_Tensor *t) { return t ? t->numel * (int64_t)nt_dtype_size(t->dtype) : 0; }

void nt_autograd_hold_(int64_t bytes) { __atomic_fetch_add(&held_bytes, bytes, __ATOMIC_RELAXED); }

void nt_autograd_stats(int64_t *nodes, int64_t *bytes) {
  if (nodes) *nodes = __atomic_load_n(&live_nodes, __ATOMIC_RELAXED);
  if (bytes) *bytes = __atomic_load_n(&held_bytes, __ATOMIC_RELAXED);
}

/* ---- stale views ----------------------------------------------------------
** A view's node routes its gradient to the history its base had when the
** view was taken (the edge captured then).  Once the base is re-recorded by
** an in-place write (y[0] = 1 gives y a new grad_fn) that history no longer
** describes the view's values; PyTorch regenerates the view's grad_fn, we
** refuse to use it.  Cheap test first: a view whose storage has not been
** written since it was recorded is fresh.  A write that was not recorded
** (no_grad, a detached alias) leaves the base's grad_fn alone: not stale,
** as in PyTorch. */
int nt_check_fresh(const nt_Tensor *t) {
  const nt_Node *n = t->grad_fn;
  if (!n || n->out_ver == t->storage->version) return 0;
  for (; n && (n->flags & NT_NODE_VIEW) && !n->released; n = n->edge[0].fn) {
    const nt_Tensor *base = n->in[0];
    if (base && base->grad_fn != n->edge[0].fn)
      NT_FAIL("autograd: this tensor is a view (via %s) taken before its base was modified in place, so its "
              "recorded history no longer matches its values; take the view again after the write "
              "(y[0] = v; z = y[0:2], not z = y[0:2]; y[0] = v; use z)", t->grad_fn->name);
  }
  return 0;
}

nt_Node *nt_record(nt_Tensor *out, const char *name, nt_BackwardFn fn, int nin, nt_Tensor *const *in) {
  for (int i = 0; i < nin; i++)
    if (in[i] && in[i] != out && nt_check_fresh(in[i])) return NULL;
  nt_Node *n = nt_calloc(1, sizeof *n);
  if (!n) return NULL;
  n->in = nin <= NT_NODE_INLINE ? n->inl : nt_calloc((size_t)nin, sizeof(nt_Tensor *));
  n->edge = nin <= NT_NODE_INLINE ? n->edl : nt_calloc((size_t)nin, sizeof(nt_Edge));
  if (!n->in || !n->edge) {
    if (n->in != n->inl) free(n->in);
    if (n->edge != n->edl) free(n->edge);
    free(n); return NULL;
  }
  n->refcount = 1; n->name = name; n->backward = fn; n->nin = nin;
  int64_t bytes = 0;
  for (int i = 0; i < nin; i++) {
    nt_Tensor *t = in[i];
    if (!t) continue;
    /* an in-place op's own target: keep an alias (out→node→out would be a cycle) */
    nt_Tensor *keep = t == out ? nt_detach(t) : nt_retain(t);
    if (!keep) {
      for (int j = 0; j < i; j++) { nt_release(n->in[j]); nt_node_release(n->edge[j].fn); }
      if (n->in != n->inl) free(n->in);
      if (n->edge != n->edl) free(n->edge);
      free(n); return NULL;
    }
    n->in[i] = keep;
    n->edge[i] = (nt_Edge){ .fn = t->grad_fn, .version = t->storage->version, .grad = t->requires_grad, .check = true };
    if (t->grad_fn) t->grad_fn->refcount++;
    bytes += tensor_bytes(t);
  }
  n->seq = __atomic_fetch_add(&node_seq, 1, __ATOMIC_RELAXED);
  n->out_ver = out->storage->version;
  __atomic_fetch_add(&live_nodes, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&held_bytes, bytes, __ATOMIC_RELAXED);
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
  n->saved_ver[n->nsaved] = t->storage->version;
  if (!n->released) __atomic_fetch_add(&held_bytes, tensor_bytes(d), __ATOMIC_RELAXED);
  return n->nsaved++;
}

/* Drops what the node holds (inputs, edges, saved tensors, ctx); the node
** itself stays (its output still points at it) but can no longer run backward. */
static void node_free_graph(nt_Node *n) {
  if (n->released) return;
  n->released = true;
  int64_t bytes = 0;
  for (int i = 0; i < n->nin; i++) bytes += tensor_bytes(n->in[i]);
  for (int i = 0; i < n->nsaved; i++) bytes += tensor_bytes(n->saved[i]);
  __atomic_fetch_sub(&live_nodes, 1, __ATOMIC_RELAXED);
  __atomic_fetch_sub(&held_bytes, bytes, __ATOMIC_RELAXED);
  for (int i = 0; i < n->nin; i++) {
    nt_release(n->in[i]); n->in[i] = NULL;
    nt_Node *f = n->edge[i].fn;
    n->edge[i].fn = NULL;
    nt_node_release(f);
  }
  for (int i = 0; i < n->nsaved; i++) { nt_release(n->saved[i]); n->saved[i] = NULL; }
  if (n->ctx_free && n->ctx) n->ctx_free(n->ctx);
  n->ctx = NULL;
}

static void node_destroy(nt_Node *n) {
  node_free_graph(n);
  nt_release(n->gacc);
  if (n->in != n->inl) free(n->in);
  if (n->edge != n->edl) free(n->edge);
  free(n);
}

/* Freeing a node releases its inputs, whose release frees their grad_fn, and
** so on down the graph: done recursively, dropping the last tensor of a long
** chain (a million `y = y + 1` with gradients) overflowed the stack.  A dying
** node goes on this thread's list instead, and only the outermost release
** frees them, one after another (intrusive, so it cannot fail). */
static _Thread_local nt_Node *dying;
static _Thread_local bool draining;

void nt_node_release(nt_Node *n) {
  if (!n || --n->refcount > 0) return;
  n->next_dying = dying;
  dying = n;
  if (draining) return;
  draining = true;
  while (dying) {
    nt_Node *d = dying;
    dying = d->next_dying;
    node_destroy(d);
  }
  draining = false;
}

/* ---- public autograd helpers -------------------------------------------- */
int nt_set_requires_grad(nt_Tensor *t, bool on) {
  if (t->grad_fn) NT_FAIL("requires_grad can only be changed on leaf tensors (use detach())");
  if (on && !nt_dtype_is_float(t->dtype) && !nt_dtype_is_complex(t->dtype))
    NT_FAIL("only floating and complex tensors can require gradients, got %s", nt_dtype_name(t->dtype));
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

/* ---- half gradients offered to a sum node (textend.h) ---------------------- */
typedef struct HalfGrad { nt_Tensor *g, *h; } HalfGrad;
static void half_grad_free(void *p) {
  HalfGrad *o = p;
  if (o) { nt_release(o->g); nt_release(o->h); free(o); }
}
void nt_node_offer_half_grad(nt_Node *n, nt_Tensor *g, nt_Tensor *h) {
  HalfGrad *o = NULL;
  /* a retained graph's earlier pass may have left one; another ctx: no offer */
  if (!(n->flags & NT_NODE_SUM) || (n->ctx && n->ctx_free != half_grad_free) || !(o = malloc(sizeof *o))) { nt_release(h); return; }
  nt_node_drop_half_grad(n);
  o->g = nt_retain(g); o->h = h;
  n->ctx = o; n->ctx_free = half_grad_free;
}
nt_Tensor *nt_node_take_half_grad(nt_Node *n, nt_Tensor *gout, nt_DType dt) {
  HalfGrad *o = n->ctx_free == half_grad_free ? n->ctx : NULL;
  if (!o || o->g != gout || !o->h || o->h->dtype != dt) return NULL;
  nt_Tensor *h = o->h;
  o->h = NULL;
  return h;
}
void nt_node_drop_half_grad(nt_Node *n) {
  if (n->ctx_free != half_grad_free) return;
  half_grad_free(n->ctx);
  n->ctx = NULL; n->ctx_free = NULL;
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

/* g is a fresh result nothing else can reach: the only reference to it and to
** its storage (no view, no saved alias, no pending chain), covering the whole
** storage, outside any graph.  A kernel's output for this gradient, typically
** (dW of a linear): it can become .grad as it is, without a device copy. */
static bool private_grad(const nt_Tensor *g) {
  const nt_Storage *s = g->storage;
  return g->refcount == 1 && s->refcount == 1 && s->hook == NULL && s->readers == 0 && !g->grad_fn &&
         !g->requires_grad && g->offset == 0 && (g->flags & NT_T_CONTIG) &&
         (size_t)g->numel * nt_dtype_size(g->dtype) == s->nbytes;
}

static int leaf_accumulate(nt_Tensor *leaf, nt_Tensor *g) {
  if (!leaf->grad && private_grad(g)) { leaf->grad = g; return 0; }
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

/* ---- gradient-ready hooks -------------------------------------------------
** Pending edges per leaf live in a small open-addressing table (only when
** hooks are installed): counted during the graph walk, decremented as each
** edge into the leaf is processed (with or without a gradient). */
static _Thread_local const nt_GradHooks *grad_hooks;
const nt_GradHooks *nt_set_grad_hooks(const nt_GradHooks *h) { const nt_GradHooks *p = grad_hooks; grad_hooks = h; return p; }

typedef struct LeafCount { nt_Tensor **key; int *n; int cap, used; } LeafCount;
static int *leaf_slot(LeafCount *lc, nt_Tensor *t, bool add) {
  if (add && 2 * (lc->used + 1) > lc->cap) {           /* grow (load <= 1/2) */
    int cap = lc->cap ? 2 * lc->cap : 64;
    nt_Tensor **k = nt_calloc((size_t)cap, sizeof *k);
    int *n = nt_calloc((size_t)cap, sizeof *n);
    if (!k || !n) { free(k); free(n); return NULL; }
    for (int i = 0; i < lc->cap; i++)
      if (lc->key[i]) {
        size_t j = ((uintptr_t)lc->key[i] >> 4) & (size_t)(cap - 1);
        while (k[j]) j = (j + 1) & (size_t)(cap - 1);
        k[j] = lc->key[i]; n[j] = lc->n[i];
      }
    free(lc->key); free(lc->n);
    lc->key = k; lc->n = n; lc->cap = cap;
  }
  if (!lc->cap) return NULL;
  size_t j = ((uintptr_t)t >> 4) & (size_t)(lc->cap - 1);
  while (lc->key[j] && lc->key[j] != t) j = (j + 1) & (size_t)(lc->cap - 1);
  if (!lc->key[j]) { if (!add) return NULL; lc->key[j] = t; lc->used++; }
  return &lc->n[j];
}
/* one more edge into leaf t */
static int leaf_edge(LeafCount *lc, nt_Tensor *t) {
  int *c = leaf_slot(lc, t, true);
  if (!c) return -1;
  (*c)++;
  return 0;
}
/* an edge into leaf t was processed: fires ready when it was the last */
static int leaf_done(const nt_GradHooks *h, LeafCount *lc, nt_Tensor *t) {
  int *c = leaf_slot(lc, t, false);
  if (!c || --*c != 0 || !t->grad) return 0;
  return h->ready(h->ud, t, t->grad);
}

/* global (not per thread): a graph built on one thread may be differentiated on another */
static uint32_t visit_stamp = 0;

#define SECOND_PASS_MSG "backward: trying to backward through the graph a second time (or after its buffers were freed); " \
                        "use retain_graph=true on the first backward"

/* One engine for both entries.  sinks == NULL: nt_backward (leaves accumulate
** into .grad).  Otherwise gradients reaching sinks[i] go to sink_grads[i],
** other leaves are ignored, and nodes older than min_seq are never entered. */
typedef struct Engine {
  int nsinks; nt_Tensor *const *sinks; nt_Tensor **sink_grads; uint64_t min_seq;
} Engine;

/* an edge (tensor t, producer fn) is sink i when t is that input AND fn is
** its current history: a tensor re-recorded by an in-place write is a new
** value; edges into its previous history are not the sink. */
static int sink_index(const Engine *e, const nt_Tensor *t, const nt_Node *fn) {
  for (int i = 0; i < e->nsinks; i++) if (e->sinks[i] == t && t->grad_fn == fn) return i;
  return -1;
}

/* sends g (owned) along the edge (tensor `in`, producer fn): a sink slot,
** fn's gacc, or the leaf's .grad (fn NULL) */
static int deliver(const Engine *e, nt_Tensor *in, nt_Node *fn, nt_Tensor *g, NodeVec *ready) {
  int si = e->sinks ? sink_index(e, in, fn) : -1;
  if (si < 0 && !fn && e->sinks) { nt_release(g); return 0; }   /* a leaf that was not asked for */
  g = fit_grad(g, in);
  if (!g) return -1;
  if (si >= 0) return accumulate(&e->sink_grads[si], g);
  if (!fn) return leaf_accumulate(in, g);
  nt_Node *c = fn;
  if (accumulate(&c->gacc, g)) return -1;
  if (--c->deps == 0 && vec_push(ready, c)) return -1;
  return 0;
}

/* includes node c in the pass (first visit) and counts one more edge into it */
#define CKPT_ESCAPE_MSG "checkpoint: recomputing f used a tensor that requires grad which its first run did not use " \
                        "(%s); does f read a variable that has changed since? pass such values as arguments"

static int visit(const Engine *e, nt_Node *c, uint32_t stamp, NodeVec *all, NodeVec *stack) {
  if (c->released) NT_FAIL(SECOND_PASS_MSG);
  if (e->min_seq && c->seq < e->min_seq) NT_FAIL(CKPT_ESCAPE_MSG, c->name);
  if (c->visit != stamp) {
    c->visit = stamp; c->deps = 0; c->refcount++;
    if (vec_push(all, c) || vec_push(stack, c)) return -1;
  }
  c->deps++;
  return 0;
}

/* Before a node's backward: the inputs it reads and the tensors it saved must
** hold the values they had when it was recorded. */
static int check_versions(const nt_Node *n) {
  for (int k = 0; k < n->nin; k++) {
    const nt_Tensor *t = n->in[k];
    if (t && n->edge[k].check && t->storage->version != n->edge[k].version)
      NT_FAIL("backward: a tensor needed by %s (input %d) was modified in place after it was used (version %llu, now %llu); "
              "clone() it before writing", n->name, k, (unsigned long long)n->edge[k].version,
              (unsigned long long)t->storage->version);
  }
  for (int i = 0; i < n->nsaved; i++) {
    const nt_Tensor *t = n->saved[i];
    if (t && t->storage->version != n->saved_ver[i])
      NT_FAIL("backward: a tensor saved by %s (its output or a saved value) was modified in place after it was used "
              "(version %llu, now %llu); clone() it before writing", n->name, (unsigned long long)n->saved_ver[i],
              (unsigned long long)t->storage->version);
  }
  return 0;
}

static int run_engine(const Engine *e, int nroots, nt_Tensor *const *roots, nt_Tensor **g0, bool retain_graph) {
  const nt_GradHooks *hooks = e->sinks ? NULL : grad_hooks;   /* outermost nt_backward only */
  const nt_GradHooks *prev_hooks = nt_set_grad_hooks(NULL);
  LeafCount lc = {0};
  bool prev = nt_set_grad_enabled(false);
  nt_fuse_backward_depth_++;                         /* backward formulas run unfused: measured faster (tfuse.c) */
  int prev_ac = nt_autocast_set(-1);                 /* backward runs in the dtypes forward chose */
  nt_TensorSet *prev_col = nt_boundary_collect(NULL); /* its ops are nobody's boundary */
  NodeVec all = {0}, stack = {0}, ready = {0};
  uint32_t stamp = __atomic_add_fetch(&visit_stamp, 1, __ATOMIC_RELAXED);
  int rc = 0;
  /* collect nodes and dependency counts: each root is one edge into its node */
  for (int r = 0; r < nroots && !rc; r++) {
    nt_Tensor *t = roots[r];
    if (!g0[r] || (e->sinks && sink_index(e, t, t->grad_fn) >= 0)) continue;
    if (nt_check_fresh(t)) { rc = -1; break; }
    if (!t->grad_fn) { if (hooks && leaf_edge(&lc, t)) rc = -1; continue; }
    rc = visit(e, t->grad_fn, stamp, &all, &stack);
  }
  while (stack.n && !rc) {
    nt_Node *n = stack.v[--stack.n];
    for (int k = 0; k < n->nin && !rc; k++) {
      nt_Tensor *in = n->in[k];
      nt_Node *fn = n->edge[k].fn;
      if (!nt_node_needs(n, k) || (e->sinks && sink_index(e, in, fn) >= 0)) continue;
      if (!fn) {   /* a leaf that is not an input: torch.autograd.grad ignores it; a checkpoint must not */
        if (e->min_seq) { nt_error_set(CKPT_ESCAPE_MSG, "a leaf"); rc = -1; }
        else if (hooks && leaf_edge(&lc, in)) rc = -1;
        continue;
      }
      rc = visit(e, fn, stamp, &all, &stack);
    }
  }
  for (int r = 0; r < nroots && !rc; r++) {
    nt_Tensor *g = g0[r]; g0[r] = NULL;
    if (g && deliver(e, roots[r], roots[r]->grad_fn, g, &ready)) rc = -1;
    if (!rc && g && hooks && !roots[r]->grad_fn && leaf_done(hooks, &lc, roots[r])) rc = -1;
  }
  while (ready.n && !rc) {
    nt_Node *n = ready.v[--ready.n];
    if ((rc = check_versions(n))) break;
    nt_Tensor *gin_inl[NT_NODE_INLINE] = {0}, **gin = gin_inl;
    if (n->nin > NT_NODE_INLINE) { gin = nt_calloc((size_t)n->nin, sizeof *gin); if (!gin) { rc = -1; break; } }
    nt_Tensor *gout = n->gacc; n->gacc = NULL;
    int tok = nt_prof_on_ ? nt_prof_begin_(n->name, NT_PROF_NODE, NT_CPU) : -1;   /* the profiler's range (tprofile.h) */
    rc = n->backward(n, gout, gin);
    if (tok >= 0) nt_prof_end_(tok);
    nt_release(gout);
    for (int k = 0; k < n->nin; k++) {
      nt_Tensor *in = n->in[k], *g = gin[k];
      nt_Node *fn = n->edge[k].fn;
      gin[k] = NULL;
      if (rc || !nt_node_needs(n, k)) { nt_release(g); continue; }
      if (g && deliver(e, in, fn, g, &ready)) rc = -1;
      if (!rc && hooks && !fn && leaf_done(hooks, &lc, in)) rc = -1;
    }
    if (gin != gin_inl) free(gin);
  }
  for (int r = 0; r < nroots; r++) { nt_release(g0[r]); g0[r] = NULL; }
  for (int i = 0; i < all.n; i++) {
    nt_Node *n = all.v[i];
    nt_release(n->gacc); n->gacc = NULL;
    if (!retain_graph && rc == 0) node_free_graph(n);
  }
  for (int i = 0; i < all.n; i++) nt_node_release(all.v[i]);
  free(all.v); free(stack.v); free(ready.v);
  free(lc.key); free(lc.n);
  if (hooks && hooks->finish(hooks->ud, rc == 0) && rc == 0) rc = -1;
  nt_set_grad_hooks(prev_hooks);
  nt_boundary_collect(prev_col);
  nt_autocast_set(prev_ac);
  nt_fuse_backward_depth_--;
  nt_set_grad_enabled(prev);
  return rc;
}

static int check_grad_shape(const char *op, nt_Tensor *t, nt_Tensor *g) {
  char a[128], b[128];
  if (g->ndim != t->ndim || memcmp(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))
    NT_FAIL("%s: grad has shape %s but the tensor has shape %s", op, nt_shape_str(g->shape, g->ndim, a, sizeof a),
            nt_shape_str(t->shape, t->ndim, b, sizeof b));
  return 0;
}

/* the seed gradient of a root: g (retained) or ones for a 1-element root */
static nt_Tensor *seed_grad(const char *op, nt_Tensor *root, nt_Tensor *g) {
  if (g) return check_grad_shape(op, root, g) ? NULL : nt_retain(g);
  if (nt_dtype_is_complex(root->dtype))
    NT_FAIL_NULL("%s: grad can be implicitly created only for real scalar outputs, got %s (take real(x) or abs(x) first)", op, nt_dtype_name(root->dtype));
  if (root->numel != 1) {
    char a[128];
    NT_FAIL_NULL("%s: grad can be implicitly created only for scalar outputs, got shape %s", op,
                 nt_shape_str(root->shape, root->ndim, a, sizeof a));
  }
  nt_fuse_backward_depth_++;             /* the seed is the pass's first op (the profiler's phase, tprofile.h) */
  nt_Tensor *ones = nt_ones_like(root);
  nt_fuse_backward_depth_--;
  return ones;
}

int nt_backward(nt_Tensor *root, nt_Tensor *grad, bool retain_graph) {
  if (!root->requires_grad)
    NT_FAIL("backward: tensor does not require grad and has no grad_fn");
  nt_Tensor *g0 = seed_grad("backward", root, grad);
  if (!g0) return -1;
  if (root->grad_fn && root->grad_fn->released) { nt_release(g0); NT_FAIL(SECOND_PASS_MSG); }
  Engine e = {0};
  return run_engine(&e, 1, &root, &g0, retain_graph);
}

int nt_autograd_grad(int nout, nt_Tensor *const *outputs, nt_Tensor *const *gouts, int nin,
                     nt_Tensor *const *inputs, nt_Tensor **grads, bool retain_graph, uint64_t min_seq) {
  for (int i = 0; i < nin; i++) grads[i] = NULL;
  nt_Tensor *g0_inl[4] = {0}, **g0 = nout <= 4 ? g0_inl : nt_calloc((size_t)nout, sizeof *g0);
  if (!g0) return -1;
  int rc = 0;
  for (int r = 0; r < nout && !rc; r++) {
    if (!outputs[r]->requires_grad) continue;         /* contributes nothing */
    if (!(g0[r] = seed_grad("grad", outputs[r], gouts ? gouts[r] : NULL))) rc = -1;
  }
  Engine e = { nin, inputs, grads, min_seq };
  if (!rc) rc = run_engine(&e, nout, outputs, g0, retain_graph);
  for (int r = 0; r < nout; r++) nt_release(g0[r]);
  if (g0 != g0_inl) free(g0);
  if (rc) for (int i = 0; i < nin; i++) { nt_release(grads[i]); grads[i] = NULL; }
  return rc;
}
