/*
** tview.c — view ops: they build a new header over the same storage, never
** copying (except reshape of incompatible strides).  Each records a backward:
** index-like views scatter the gradient into zeros through the SAME view of
** the zeros; permutations invert; reshapes reshape back; expand sums (done by
** the engine's nt_sum_to_shape).  View nodes are flagged (nt_node_view): an
** in-place write through them is refused and they go stale when their base
** is re-recorded by a write (tinplace.c); they read no values, so their input
** is not version-checked.
*/
#include "tinternal.h"
#include <stdlib.h>

/* ---- indexing ---------------------------------------------------------------- */
typedef struct { int n; nt_Index idx[]; } IndexCtx;

static int index_backward(nt_Node *nd, nt_Tensor *g, nt_Tensor **gin) {
  IndexCtx *c = nd->ctx;
  nt_Tensor *x = nd->in[0];
  nt_Tensor *z = nt_zeros(x->shape, x->ndim, g->dtype, g->device);
  if (!z) return -1;
  nt_Tensor *v = nt_index(z, c->idx, c->n);
  if (!v || nt_write_copy(v, g)) { nt_release(v); nt_release(z); return -1; }
  nt_release(v);
  gin[0] = z;
  return 0;
}

/* Python slice clamping: returns the number of elements, fills start/step. */
static int64_t slice_len(int64_t size, int64_t *pstart, int64_t stop, int64_t step) {
  int64_t start = *pstart;
  if (step > 0) {
    if (start == NT_NONE) start = 0; else if (start < 0) { start += size; if (start < 0) start = 0; } else if (start > size) start = size;
    if (stop == NT_NONE) stop = size; else if (stop < 0) { stop += size; if (stop < 0) stop = 0; } else if (stop > size) stop = size;
    *pstart = start;
    return stop > start ? 1 + (stop - start - 1) / step : 0;   /* not (d + step - 1) / step: overflows for a huge step */
  }
  if (start == NT_NONE) start = size - 1; else if (start < 0) { start += size; if (start < 0) start = -1; } else if (start >= size) start = size - 1;
  if (stop == NT_NONE) stop = -1; else if (stop < 0) { stop += size; if (stop < 0) stop = -1; } else if (stop >= size) stop = size - 1;
  *pstart = start;
  if (start <= stop) return 0;
  return step == INT64_MIN ? 1 : 1 + (start - stop - 1) / -step;
}

nt_Tensor *nt_index(nt_Tensor *t, const nt_Index *idx, int n) {
  int consumed = 0, ellipsis = -1;
  for (int i = 0; i < n; i++) {
    if (idx[i].kind == NT_IDX_INT || idx[i].kind == NT_IDX_SLICE) consumed++;
    else if (idx[i].kind == NT_IDX_ELLIPSIS) {
      if (ellipsis >= 0) NT_FAIL_NULL("an index can only have a single ellipsis");
      ellipsis = i;
    }
  }
  if (consumed > t->ndim) NT_FAIL_NULL("too many indices for tensor of dimension %d", t->ndim);
  int64_t shape[NT_MAXDIM], strides[NT_MAXDIM], offset = t->offset;
  int nd = 0, src = 0;
  for (int i = 0; i < n; i++) {
    const nt_Index *x = &idx[i];
    switch (x->kind) {
      case NT_IDX_ELLIPSIS:
        for (int k = 0; k < t->ndim - consumed; k++) {
          if (nd >= NT_MAXDIM) goto toomany;
          shape[nd] = t->shape[src]; strides[nd++] = t->strides[src++];
        }
        break;
      case NT_IDX_NEWAXIS:
        if (nd >= NT_MAXDIM) goto toomany;
        shape[nd] = 1; strides[nd++] = 0;
        break;
      case NT_IDX_INT: {
        int64_t size = t->shape[src], k = x->start < 0 ? x->start + size : x->start;
        if (k < 0 || k >= size)
          NT_FAIL_NULL("index %lld is out of range for axis %d with size %lld", (long long)x->start, src, (long long)size);
        offset += k * t->strides[src++];
        break;
      }
      case NT_IDX_SLICE: {
        if (x->step == 0) NT_FAIL_NULL("slice step cannot be zero");
        int64_t step = x->step == NT_NONE ? 1 : x->step, start = x->start;
        int64_t len = slice_len(t->shape[src], &start, x->stop, step);
        if (nd >= NT_MAXDIM) goto toomany;
        if (len > 0) offset += start * t->strides[src];
        /* a step past the end leaves one element: its stride is never used,
        ** and stride * step could overflow */
        shape[nd] = len; strides[nd++] = len > 1 ? t->strides[src] * step : t->strides[src];
        src++;
        break;
      }
    }
  }
  while (src < t->ndim) {      /* implicit trailing full slices */
    if (nd >= NT_MAXDIM) goto toomany;
    shape[nd] = t->shape[src]; strides[nd++] = t->strides[src++];
  }
  nt_Tensor *v = nt_view_of(t);
  if (!v) return NULL;
  v->ndim = nd; v->offset = offset;
  memcpy(v->shape, shape, sizeof(int64_t) * (size_t)nd);
  memcpy(v->strides, strides, sizeof(int64_t) * (size_t)nd);
  nt_update_meta(v);
  if (nt_needs_grad(1, &t)) {
    IndexCtx *c = nt_malloc(sizeof *c + sizeof(nt_Index) * (size_t)n);
    nt_Node *nn = c ? nt_record(v, "IndexBackward", index_backward, 1, &t) : NULL;
    if (!nn) { free(c); nt_release(v); return NULL; }
    c->n = n; memcpy(c->idx, idx, sizeof(nt_Index) * (size_t)n);
    nn->ctx = c; nn->ctx_free = free;
    nt_node_view(nn);
  }
  return v;
toomany:
  NT_FAIL_NULL("indexing result would have more than %d dimensions", NT_MAXDIM);
}

static nt_Tensor *index1(nt_Tensor *t, int axis, nt_Index x, const char *op) {
  int a = nt_norm_axis(op, axis, t->ndim);
  if (a < 0) return NULL;
  nt_Index idx[NT_MAXDIM];
  for (int i = 0; i < a; i++) idx[i] = (nt_Index){ NT_IDX_SLICE, NT_NONE, NT_NONE, 1 };
  idx[a] = x;
  return nt_index(t, idx, a + 1);
}

nt_Tensor *nt_slice(nt_Tensor *t, int axis, int64_t start, int64_t stop, int64_t step) {
  return index1(t, axis, (nt_Index){ NT_IDX_SLICE, start, stop, step }, "slice");
}

nt_Tensor *nt_select(nt_Tensor *t, int axis, int64_t index) {
  return index1(t, axis, (nt_Index){ NT_IDX_INT, index, 0, 0 }, "select");
}

nt_Tensor *nt_narrow(nt_Tensor *t, int axis, int64_t start, int64_t length) {
  int a = nt_norm_axis("narrow", axis, t->ndim);
  if (a < 0) return NULL;
  if (start < 0) start += t->shape[a];
  if (start < 0 || start > t->shape[a] || length < 0 || length > t->shape[a] - start)   /* not start + length: may overflow */
    NT_FAIL_NULL("narrow: %lld elements from %lld are out of range for axis %d with size %lld", (long long)length,
                 (long long)start, a, (long long)t->shape[a]);
  return index1(t, a, (nt_Index){ NT_IDX_SLICE, start, start + length, 1 }, "narrow");
}

/* ---- permutations ------------------------------------------------------------ */
static int permute_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  int inv[NT_MAXDIM];
  for (int i = 0; i < n->niarg; i++) inv[n->iarg[i]] = i;
  gin[0] = nt_permute(g, inv, n->niarg);
  return gin[0] ? 0 : -1;
}

nt_Tensor *nt_permute(nt_Tensor *t, const int *perm, int n) {
  if (n != t->ndim) NT_FAIL_NULL("permute: expected %d axes, got %d", t->ndim, n);
  bool seen[NT_MAXDIM] = {0};
  int p[NT_MAXDIM];
  for (int i = 0; i < n; i++) {
    int a = nt_norm_axis("permute", perm[i], n);
    if (a < 0) return NULL;
    if (seen[a]) NT_FAIL_NULL("permute: axis %d repeated", a);
    seen[a] = true; p[i] = a;
  }
  nt_Tensor *v = nt_view_of(t);
  if (!v) return NULL;
  for (int i = 0; i < n; i++) { v->shape[i] = t->shape[p[i]]; v->strides[i] = t->strides[p[i]]; }
  nt_update_meta(v);
  if (nt_needs_grad(1, &t)) {
    nt_Node *nn = nt_record(v, "PermuteBackward", permute_backward, 1, &t);
    if (!nn) { nt_release(v); return NULL; }
    for (int i = 0; i < n; i++) nn->iarg[i] = p[i];
    nn->niarg = n;
    nt_node_view(nn);
  }
  return v;
}

nt_Tensor *nt_transpose(nt_Tensor *t, int a0, int a1) {
  int p[NT_MAXDIM] = {0};
  if (t->ndim == 0) return nt_permute(t, p, 0);
  int x = nt_norm_axis("transpose", a0, t->ndim), y = nt_norm_axis("transpose", a1, t->ndim);
  if (x < 0 || y < 0) return NULL;
  for (int i = 0; i < t->ndim; i++) p[i] = i;
  p[x] = y; p[y] = x;
  return nt_permute(t, p, t->ndim);
}

nt_Tensor *nt_T(nt_Tensor *t) {
  int p[NT_MAXDIM];
  for (int i = 0; i < t->ndim; i++) p[i] = t->ndim - 1 - i;
  return nt_permute(t, p, t->ndim);
}

/* ---- reshape family -------------------------------------------------------------- */
static int reshape_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *x = n->in[0];
  gin[0] = nt_reshape(g, x->shape, x->ndim);
  return gin[0] ? 0 : -1;
}

/* New strides for viewing t with `shape` without copying, or false.  This is
** PyTorch's computeStride: walk old dims from the back in chunks of dims that
** are contiguous with each other; each chunk must be exactly covered by a run
** of new dims. */
static bool view_strides(const nt_Tensor *t, const int64_t *shape, int nd, int64_t *st) {
  if (t->numel == 0 || t->ndim == 0) { nt_contig_strides(shape, nd, st); return true; }
  int vd = nd - 1;
  int64_t chunk = t->strides[t->ndim - 1], tn = 1, vn = 1;
  for (int td = t->ndim - 1; td >= 0; td--) {
    tn *= t->shape[td];
    if (td == 0 || (t->shape[td - 1] != 1 && t->strides[td - 1] != tn * chunk)) {
      while (vd >= 0 && (vn < tn || shape[vd] == 1)) { st[vd] = vn * chunk; vn *= shape[vd]; vd--; }
      if (vn != tn) return false;
      if (td > 0) { chunk = t->strides[td - 1]; tn = 1; vn = 1; }
    }
  }
  return vd == -1;
}

nt_Tensor *nt_reshape(nt_Tensor *t, const int64_t *shape_in, int nd) {
  if (nd < 0 || nd > NT_MAXDIM) NT_FAIL_NULL("reshape: at most %d dimensions", NT_MAXDIM);
  int64_t shape[NT_MAXDIM] = {0}, known = 1, numel;
  int infer = -1;
  for (int i = 0; i < nd; i++) {
    shape[i] = shape_in[i];
    if (shape[i] == -1) { if (infer >= 0) NT_FAIL_NULL("reshape: only one dimension can be -1"); infer = i; shape[i] = 1; }
    else if (shape[i] < 0) NT_FAIL_NULL("reshape: invalid size %lld", (long long)shape[i]);
  }
  if (nt_check_shape("reshape", shape, nd, &known)) return NULL;   /* the -1 counted as 1 */
  if (infer >= 0) {
    if (known == 0 || t->numel % known) goto bad;
    shape[infer] = t->numel / known;
  }
  if (nt_check_shape("reshape", shape, nd, &numel)) return NULL;
  if (numel != t->numel) goto bad;
  int64_t st[NT_MAXDIM];
  bool copy = !view_strides(t, shape, nd, st);
  nt_Tensor *v;
  if (copy) {          /* a fresh tensor of its own (not a view: writable like any op's output) */
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *c = nt_clone(t);
    v = c ? nt_reshape(c, shape, nd) : NULL;
    nt_set_grad_enabled(prev);
    nt_release(c);
  } else if ((v = nt_view_of(t))) {
    v->ndim = nd;
    memcpy(v->shape, shape, sizeof(int64_t) * (size_t)nd);
    memcpy(v->strides, st, sizeof(int64_t) * (size_t)nd);
    nt_update_meta(v);
  }
  if (v && nt_needs_grad(1, &t)) {
    nt_Node *nn = nt_record(v, "ReshapeBackward", reshape_backward, 1, &t);
    if (!nn) { nt_release(v); return NULL; }
    if (copy) nt_node_unchecked(nn, 0); else nt_node_view(nn);
  }
  return v;
bad: {
    char a[128], b[128];
    NT_FAIL_NULL("reshape: cannot reshape tensor of shape %s into %s", nt_shape_str(t->shape, t->ndim, a, sizeof a),
                 nt_shape_str(shape_in, nd, b, sizeof b));
  }
}

nt_Tensor *nt_flatten(nt_Tensor *t, int s, int e) {
  if (t->ndim == 0) { int64_t one = 1; return nt_reshape(t, &one, 1); }
  int a = nt_norm_axis("flatten", s, t->ndim), b = nt_norm_axis("flatten", e, t->ndim);
  if (a < 0 || b < 0) return NULL;
  if (a > b) NT_FAIL_NULL("flatten: start axis %d comes after end axis %d", a, b);
  int64_t shape[NT_MAXDIM];
  int nd = 0;
  for (int i = 0; i < a; i++) shape[nd++] = t->shape[i];
  int64_t m = 1;
  for (int i = a; i <= b; i++) m *= t->shape[i];
  shape[nd++] = m;
  for (int i = b + 1; i < t->ndim; i++) shape[nd++] = t->shape[i];
  return nt_reshape(t, shape, nd);
}

nt_Tensor *nt_squeeze(nt_Tensor *t, int axis) {
  int64_t shape[NT_MAXDIM];
  int nd = 0;
  if (axis == NT_ALL_AXES) {
    for (int i = 0; i < t->ndim; i++) if (t->shape[i] != 1) shape[nd++] = t->shape[i];
  } else {
    int a = nt_norm_axis("squeeze", axis, t->ndim);
    if (a < 0) return NULL;
    for (int i = 0; i < t->ndim; i++) if (i != a || t->shape[i] != 1) shape[nd++] = t->shape[i];
  }
  return nt_reshape(t, shape, nd);
}

nt_Tensor *nt_unsqueeze(nt_Tensor *t, int axis) {
  int a = nt_norm_axis("unsqueeze", axis, t->ndim + 1);
  if (a < 0) return NULL;
  if (t->ndim >= NT_MAXDIM) NT_FAIL_NULL("unsqueeze: tensors have at most %d dimensions", NT_MAXDIM);
  int64_t shape[NT_MAXDIM];
  int nd = 0;
  for (int i = 0; i < t->ndim; i++) { if (i == a) shape[nd++] = 1; shape[nd++] = t->shape[i]; }
  if (a == t->ndim) shape[nd++] = 1;
  return nt_reshape(t, shape, nd);
}

/* ---- expand ---------------------------------------------------------------------- */
static int expand_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  (void)n;
  gin[0] = nt_retain(g);     /* the engine sums it back to the input shape */
  return 0;
}

nt_Tensor *nt_expand(nt_Tensor *t, const int64_t *shape_in, int nd) {
  if (nd < t->ndim || nd > NT_MAXDIM) goto bad;
  int64_t shape[NT_MAXDIM];
  int k = nd - t->ndim;
  for (int i = 0; i < nd; i++) {
    shape[i] = shape_in[i] == -1 && i >= k ? t->shape[i - k] : shape_in[i];
    if (shape[i] < 0) goto bad;
    if (i >= k && t->shape[i - k] != 1 && t->shape[i - k] != shape[i]) goto bad;
  }
  if (nt_check_shape("expand", shape, nd, NULL)) return NULL;
  nt_Tensor *v = nt_view_of(t);
  if (!v) return NULL;
  nt_bcast_view(v, t, shape, nd);
  v->refcount = 1; v->flags |= NT_T_VIEWHDR; v->requires_grad = false; v->grad = NULL; v->grad_fn = NULL;
  if (nt_needs_grad(1, &t)) {
    nt_Node *nn = nt_record(v, "ExpandBackward", expand_backward, 1, &t);
    if (!nn) { nt_release(v); return NULL; }
    nt_node_view(nn);
  }
  return v;
bad: {
    char a[128], b[128];
    NT_FAIL_NULL("expand: cannot expand shape %s to %s", nt_shape_str(t->shape, t->ndim, a, sizeof a),
                 nt_shape_str(shape_in, nd < 0 ? 0 : nd > NT_MAXDIM ? NT_MAXDIM : nd, b, sizeof b));
  }
}

nt_Tensor *nt_broadcast_to(nt_Tensor *t, const int64_t *shape, int nd) { return nt_expand(t, shape, nd); }
