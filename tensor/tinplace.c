/*
** tinplace.c — in-place writes (x[idx] = v, copy_, fill_) and their autograd:
** version counters and CopySlicesBackward (PyTorch's model).
**
** Every write goes through nt_write_copy / nt_write_fill, which bump the
** storage's version counter; the engine compares the versions a node
** recorded for its inputs and saved tensors before running its backward.
**
** With grad mode on, y[idx] = v is RECORDED when y is part of a graph or v
** requires grad (and y is floating): the values are written, then y gets a
** new grad_fn, CopySlicesBackward(y_old, v), where y_old is y's previous
** history (the edge nt_record captures) and
**     d y_old = g with the written region zeroed
**     d v     = g[idx]          (summed to v's shape: v broadcast)
** For a mask, y = where(mask, v, y): d y_old = where(mask, 0, g),
** d v = where(mask, g, 0).  Neither reads y's or v's values, so neither input
** is version-checked (repeated writes into y are fine); the mask is saved.
**
** Refused while grad mode is on:
**   - a leaf that requires grad, or a view of one (PyTorch: "a leaf Variable
**     that requires grad is being used in an in-place operation"); updates
**     belong in no_grad;
**   - a write through a VIEW of a graph tensor (z = y[0:2]; z[0] = 1): the base
**     y would not learn about it.  Write through the base (y[0] = 1); a view
**     taken before such a write is stale and refused when used (nt_check_fresh);
**   - a tracked write into a plain tensor whose storage other tensors share
**     (views, detach() aliases): they would not see the new history.
*/
#include "tinternal.h"
#include <stdlib.h>

/* ---- raw writes ------------------------------------------------------------ */
int nt_write_copy(nt_Tensor *dst, nt_Tensor *src) {
  if (dst->device != src->device)
    NT_FAIL("copy: expected all tensors on the same device, got %s and %s", nt_device_name(dst->device), nt_device_name(src->device));
  /* src must broadcast TO dst's shape (not merely with it) */
  bool fits = src->ndim <= dst->ndim;
  for (int i = 0; fits && i < src->ndim; i++) {
    int64_t s = src->shape[src->ndim - 1 - i], d = dst->shape[dst->ndim - 1 - i];
    fits = s == d || s == 1;
  }
  if (!fits) {
    char a[128], b[128];
    NT_FAIL("cannot assign a tensor of shape %s to a view of shape %s", nt_shape_str(src->shape, src->ndim, a, sizeof a),
            nt_shape_str(dst->shape, dst->ndim, b, sizeof b));
  }
  /* a source sharing dst's storage may overlap it: read a private copy */
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *s = dst->storage == src->storage ? nt_clone(src) : nt_retain(src);
  nt_set_grad_enabled(prev);
  if (!s) return -1;
  nt_Tensor vs;
  nt_bcast_view(&vs, s, dst->shape, dst->ndim);
  nt_KernelArgs args;
  args.op = NT_OP_COPY; args.out = dst; args.in[0] = &vs; args.nin = 1;
  int rc = nt_dispatch(NT_OP_COPY, dst->device, &args);
  nt_release(s);
  if (!rc) nt_bump_version(dst);
  return rc;
}

int nt_write_fill(nt_Tensor *dst, double value) {
  nt_KernelArgs args;
  args.op = NT_OP_FILL; args.out = dst; args.nin = 0; args.s[0] = value;
  int rc = nt_dispatch(NT_OP_FILL, dst->device, &args);
  if (!rc) nt_bump_version(dst);
  return rc;
}

/* ---- may this write happen, and is it recorded? ------------------------------
** 1: record a CopySlicesBackward; 0: a plain write; -1: refused (error set). */
int nt_write_mode(nt_Tensor *base, nt_Tensor *v) {
  nt_Tensor *ins[2] = { base, v };
  if (!nt_needs_grad(v ? 2 : 1, ins)) return 0;      /* grad off (lets a checkpoint collect v), or nothing requires grad */
  if (base->requires_grad) {
    if (!base->grad_fn)
      NT_FAIL("a leaf tensor that requires grad cannot be modified in place (use no_grad for updates)");
    if (base->grad_fn->flags & NT_NODE_VIEW) {
      /* walk the views back to the base.  When nothing but the view chain
      ** holds the tensors it views (an op's output that is a reshape of an
      ** internal result), no one else can see the write: record it on this
      ** tensor like on any other. */
      const nt_Node *n = base->grad_fn;
      bool internal = true;
      for (; n && (n->flags & NT_NODE_VIEW); n = n->edge[0].fn)
        if (!n->in[0] || n->in[0]->refcount > 1) internal = false;
      if (!n) NT_FAIL("a view of a leaf tensor that requires grad cannot be modified in place (use no_grad for updates)");
      if (!internal)
        NT_FAIL("in-place write through a view of a tensor that is part of an autograd graph is not supported "
                "(the base would not see it): write through the base instead, e.g. y[0, 1] = v rather than z = y[0]; z[1] = v");
    }
  } else {
    if (!nt_dtype_is_float(base->dtype)) return 0;  /* no gradient flows into an integer tensor */
    if (base->storage->refcount > 1)
      NT_FAIL("in-place write of a value that requires grad into a tensor whose memory other tensors share (views or "
              "detach() aliases) is not supported: they would not see its gradient; write into the base tensor, or "
              "clone() it first");
  }
  if (v && nt_check_fresh(v)) return -1;
  return 1;
}

/* ---- CopySlicesBackward ------------------------------------------------------ */
typedef struct { int n; bool mask; nt_Index idx[]; } SliceCtx;   /* mask: saved[0] */

static int copy_slices_backward(nt_Node *nd, nt_Tensor *g, nt_Tensor **gin) {
  SliceCtx *c = nd->ctx;
  if (c->mask) {
    nt_Tensor *m = nd->saved[0], *z = nt_zeros(NULL, 0, g->dtype, g->device);
    if (!z) return -1;
    if (nt_node_needs(nd, 0) && !(gin[0] = nt_where(m, z, g))) { nt_release(z); return -1; }
    if (nt_node_needs(nd, 1) && !(gin[1] = nt_where(m, g, z))) { nt_release(z); return -1; }
    nt_release(z);
    return 0;
  }
  if (nt_node_needs(nd, 0)) {
    nt_Tensor *z = nt_clone(g), *r = z ? nt_index(z, c->idx, c->n) : NULL;
    int rc = r ? nt_write_fill(r, 0) : -1;
    nt_release(r);
    if (rc) { nt_release(z); return -1; }
    gin[0] = z;
  }
  if (nt_node_needs(nd, 1) && !(gin[1] = nt_index(g, c->idx, c->n))) return -1;   /* the engine sums it to v's shape */
  return 0;
}

/* records base = name(base_old, v): in[0] = base's previous history, in[1] =
** v; neither is version-checked (the backward reads only g and what it saves) */
nt_Node *nt_record_write(nt_Tensor *base, nt_Tensor *v, const char *name, nt_BackwardFn fn) {
  nt_Node *nd = nt_record(base, name, fn, 2, (nt_Tensor *[]){ base, v });
  if (!nd) return NULL;
  nd->flags |= NT_NODE_INPLACE;
  nt_node_unchecked(nd, 0); nt_node_unchecked(nd, 1);
  return nd;
}

/* records base = CopySlices(base_old, v); idx/n or mask describe the region */
static int record_slices(nt_Tensor *base, const nt_Index *idx, int n, nt_Tensor *mask, nt_Tensor *v) {
  SliceCtx *c = nt_malloc(sizeof *c + sizeof(nt_Index) * (size_t)n);
  if (!c) return -1;
  c->n = n; c->mask = mask != NULL;
  if (n) memcpy(c->idx, idx, sizeof(nt_Index) * (size_t)n);
  nt_Node *nd = nt_record_write(base, v, "CopySlicesBackward", copy_slices_backward);
  if (!nd) { free(c); return -1; }
  nd->ctx = c; nd->ctx_free = free;
  if (mask && nt_node_save(nd, mask) < 0) return -1;
  return 0;
}

/* ---- entry points ------------------------------------------------------------- */
int nt_index_put(nt_Tensor *base, const nt_Index *idx, int n, nt_Tensor *v) {
  int mode = nt_write_mode(base, v);
  if (mode < 0) return -1;
  bool prev = nt_set_grad_enabled(false);             /* the view is a write target, not a graph op */
  nt_Tensor *view = n ? nt_index(base, idx, n) : nt_retain(base);
  nt_set_grad_enabled(prev);
  int rc = view ? nt_write_copy(view, v) : -1;
  nt_release(view);
  return rc ? -1 : mode ? record_slices(base, idx, n, NULL, v) : 0;
}

int nt_index_fill(nt_Tensor *base, const nt_Index *idx, int n, double value) {
  if (nt_grad_enabled() && base->requires_grad) {     /* recorded: the value becomes a constant input */
    nt_Tensor *v = nt_full(NULL, 0, value, base->dtype, base->device);
    int rc = v ? nt_index_put(base, idx, n, v) : -1;
    nt_release(v);
    return rc;
  }
  nt_Tensor *view = n ? nt_index(base, idx, n) : nt_retain(base);   /* base does not require grad: no node */
  int rc = view ? nt_write_fill(view, value) : -1;
  nt_release(view);
  return rc;
}

int nt_mask_put(nt_Tensor *base, nt_Tensor *mask, nt_Tensor *v) {
  if (mask->dtype != NT_BOOL) NT_FAIL("mask assignment: the mask must be a bool tensor, got %s", nt_dtype_name(mask->dtype));
  int mode = nt_write_mode(base, v);
  if (mode < 0) return -1;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *w = nt_where(mask, v, base);
  nt_set_grad_enabled(prev);
  if (!w) return -1;
  int rc = 0;
  if (w->ndim != base->ndim || memcmp(w->shape, base->shape, sizeof(int64_t) * (size_t)base->ndim)) {
    char a[128], b[128], c[128];
    nt_error_set("mask assignment: mask %s and value %s must broadcast to the tensor's shape %s",
                 nt_shape_str(mask->shape, mask->ndim, a, sizeof a), nt_shape_str(v->shape, v->ndim, b, sizeof b),
                 nt_shape_str(base->shape, base->ndim, c, sizeof c));
    rc = -1;
  }
  if (!rc) rc = nt_write_copy(base, w);
  nt_release(w);
  return rc ? -1 : mode ? record_slices(base, NULL, 0, mask, v) : 0;
}

int nt_copy_(nt_Tensor *dst, nt_Tensor *src) {
  if (!nt_grad_enabled() || (!dst->requires_grad && !src->requires_grad)) return nt_write_copy(dst, src);
  return nt_index_put(dst, NULL, 0, src);
}

int nt_fill_(nt_Tensor *dst, double value) {
  if (!nt_grad_enabled() || !dst->requires_grad) return nt_write_fill(dst, value);
  return nt_index_fill(dst, NULL, 0, value);
}

/* A second tensor object over t's memory carrying t's history (grad_fn,
** requires_grad).  An update computed out of place and written back
** (x += v: r = x + v, then x = CopySlices(x_old, r)) reads x through an alias:
** r's node then holds the alias, not x, so x -> CopySlices -> r -> node -> x is
** no reference cycle (tensors are reference counted: it would never be freed). */
nt_Tensor *nt_alias(nt_Tensor *t) {
  nt_Tensor *a = nt_detach(t);
  if (!a) return NULL;
  if (t->grad_fn) { a->grad_fn = t->grad_fn; t->grad_fn->refcount++; }
  a->requires_grad = t->requires_grad;
  return a;
}
