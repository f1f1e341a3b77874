/*
** tshape.c — copying shape ops: concat, stack, split, chunk, flip, repeat,
** tril/triu.  Most are written with views + copy_ so they run on any device;
** their gradients come from small backward functions or from composition.
*/
#include "tinternal.h"
#include <stdlib.h>

/* ---- concat / stack ---------------------------------------------------------- */
static int concat_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  int axis = (int)n->iarg[0];
  int64_t off = 0;
  for (int k = 0; k < n->nin; k++) {
    int64_t len = n->in[k]->shape[axis];
    if (nt_node_needs(n, k) && !(gin[k] = nt_narrow(g, axis, off, len))) return -1;
    off += len;
  }
  return 0;
}

nt_Tensor *nt_concat(nt_Tensor *const *ts, int n, int axis) {
  if (n <= 0) NT_FAIL_NULL("concat: expected a non-empty list of tensors");
  nt_Tensor *t0 = ts[0];
  int a = nt_norm_axis("concat", axis, t0->ndim);
  if (a < 0) return NULL;
  if (nt_check_same_device("concat", n, ts)) return NULL;
  nt_DType dt = t0->dtype;
  int64_t shape[NT_MAXDIM];
  memcpy(shape, t0->shape, sizeof shape);
  shape[a] = 0;
  for (int k = 0; k < n; k++) {
    nt_Tensor *t = ts[k];
    bool ok = t->ndim == t0->ndim;
    for (int i = 0; ok && i < t->ndim; i++) if (i != a && t->shape[i] != t0->shape[i]) ok = false;
    if (!ok) {
      char s1[128], s2[128];
      NT_FAIL_NULL("concat: shapes %s and %s do not match except on axis %d", nt_shape_str(t0->shape, t0->ndim, s1, sizeof s1),
                   nt_shape_str(t->shape, t->ndim, s2, sizeof s2), a);
    }
    if (__builtin_add_overflow(shape[a], t->shape[a], &shape[a]))
      NT_FAIL_NULL("concat: the sizes along axis %d add up to more than %lld", a, (long long)INT64_MAX);
    dt = nt_promote(dt, t->dtype);
  }
  nt_Tensor *out = nt_empty(shape, t0->ndim, dt, t0->device);
  if (!out) return NULL;
  bool prev = nt_set_grad_enabled(false);
  int64_t off = 0;
  for (int k = 0; k < n; k++) {
    nt_Tensor *v = nt_narrow(out, a, off, ts[k]->shape[a]);
    int rc = v ? nt_copy_(v, ts[k]) : -1;
    nt_release(v);
    if (rc) { nt_set_grad_enabled(prev); nt_release(out); return NULL; }
    off += ts[k]->shape[a];
  }
  nt_set_grad_enabled(prev);
  if (nt_needs_grad(n, ts)) {
    nt_Node *nd = nt_record(out, "ConcatBackward", concat_backward, n, ts);
    if (!nd) { nt_release(out); return NULL; }
    nd->iarg[0] = a;
    for (int k = 0; k < n; k++) nt_node_unchecked(nd, k);   /* its backward reads only shapes */
  }
  return out;
}

nt_Tensor *nt_stack(nt_Tensor *const *ts, int n, int axis) {
  if (n <= 0) NT_FAIL_NULL("stack: expected a non-empty list of tensors");
  for (int k = 1; k < n; k++)
    if (ts[k]->ndim != ts[0]->ndim || memcmp(ts[k]->shape, ts[0]->shape, sizeof(int64_t) * (size_t)ts[0]->ndim)) {
      char s1[128], s2[128];
      NT_FAIL_NULL("stack: all tensors must have the same shape, got %s and %s", nt_shape_str(ts[0]->shape, ts[0]->ndim, s1, sizeof s1),
                   nt_shape_str(ts[k]->shape, ts[k]->ndim, s2, sizeof s2));
    }
  int a = nt_norm_axis("stack", axis, ts[0]->ndim + 1);
  if (a < 0) return NULL;
  nt_Tensor **us = nt_calloc((size_t)n, sizeof *us), *out = NULL;
  if (!us) return NULL;
  int k;
  for (k = 0; k < n; k++) if (!(us[k] = nt_unsqueeze(ts[k], a))) break;
  if (k == n) out = nt_concat(us, n, a);
  for (int i = 0; i < k; i++) nt_release(us[i]);
  free(us);
  return out;
}

/* ---- split / chunk (views) ----------------------------------------------------- */
int nt_split(nt_Tensor *t, const int64_t *sizes, int n, int axis, nt_Tensor **out) {
  int a = nt_norm_axis("split", axis, t->ndim);
  if (a < 0) return -1;
  int64_t total = 0;
  for (int k = 0; k < n; k++) {
    if (sizes[k] < 0) NT_FAIL("split: negative size %lld", (long long)sizes[k]);
    if (__builtin_add_overflow(total, sizes[k], &total))
      NT_FAIL("split: sizes add up to more than %lld but axis %d has size %lld", (long long)INT64_MAX, a, (long long)t->shape[a]);
  }
  if (total != t->shape[a])
    NT_FAIL("split: sizes add up to %lld but axis %d has size %lld", (long long)total, a, (long long)t->shape[a]);
  int64_t off = 0;
  for (int k = 0; k < n; k++) {
    if (!(out[k] = nt_narrow(t, a, off, sizes[k]))) {
      for (int i = 0; i < k; i++) { nt_release(out[i]); out[i] = NULL; }
      return -1;
    }
    off += sizes[k];
  }
  return n;
}

int nt_chunk(nt_Tensor *t, int chunks, int axis, nt_Tensor **out) {
  if (chunks <= 0) NT_FAIL("chunk: number of chunks must be positive, got %d", chunks);
  int a = nt_norm_axis("chunk", axis, t->ndim);
  if (a < 0) return -1;
  int64_t size = t->shape[a], step = (size + chunks - 1) / chunks, sizes[64];
  int64_t *sz = chunks <= 64 ? sizes : nt_malloc(sizeof(int64_t) * (size_t)chunks);
  if (!sz) return -1;
  int n = 0;
  if (step == 0) sz[n++] = 0;
  for (int64_t off = 0; off < size; off += step) sz[n++] = off + step <= size ? step : size - off;
  int rc = nt_split(t, sz, n, a, out);
  if (sz != sizes) free(sz);
  return rc;
}

/* ---- flip ---------------------------------------------------------------------- */
static int flip_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  int axes[NT_MAXDIM], na = 0;
  for (int i = 0; i < n->niarg; i++) if (n->iarg[i]) axes[na++] = i;
  gin[0] = nt_flip(g, axes, na);
  return gin[0] ? 0 : -1;
}

nt_Tensor *nt_flip(nt_Tensor *t, const int *axes, int naxes) {
  bool mask[NT_MAXDIM] = {0};
  for (int i = 0; i < naxes; i++) {
    int a = nt_norm_axis("flip", axes[i], t->ndim);
    if (a < 0) return NULL;
    if (mask[a]) NT_FAIL_NULL("flip: axis %d appears more than once", a);
    mask[a] = true;
  }
  /* a negative-stride view, then a contiguous copy of it */
  nt_Tensor *v = nt_view_of(t);
  if (!v) return NULL;
  for (int i = 0; i < t->ndim; i++)
    if (mask[i] && t->shape[i] > 0) { v->offset += (t->shape[i] - 1) * t->strides[i]; v->strides[i] = -t->strides[i]; }
  nt_update_meta(v);
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *out = nt_clone(v);
  nt_set_grad_enabled(prev);
  nt_release(v);
  if (out && nt_needs_grad(1, &t)) {
    nt_Node *n = nt_record(out, "FlipBackward", flip_backward, 1, &t);
    if (!n) { nt_release(out); return NULL; }
    for (int i = 0; i < t->ndim; i++) n->iarg[i] = mask[i];
    n->niarg = t->ndim;
  }
  return out;
}

/* ---- repeat (tile) ------------------------------------------------------------------
** View t as [1, s0, 1, s1, ...], expand to [r0, s0, r1, s1, ...], copy, and
** merge pairs: out[i*s + j] = t[j].  Autograd comes from the composition. */
nt_Tensor *nt_repeat(nt_Tensor *t, const int64_t *reps, int n) {
  if (n < t->ndim) NT_FAIL_NULL("repeat: expected at least %d repetitions, got %d", t->ndim, n);
  if (2 * n > NT_MAXDIM) NT_FAIL_NULL("repeat: at most %d axes", NT_MAXDIM / 2);
  int64_t s2[NT_MAXDIM], e2[NT_MAXDIM] = {0}, fin[NT_MAXDIM];
  for (int i = 0; i < n; i++) {
    if (reps[i] < 0) NT_FAIL_NULL("repeat: negative repetition %lld", (long long)reps[i]);
    int64_t s = i < n - t->ndim ? 1 : t->shape[i - (n - t->ndim)];
    s2[2 * i] = 1; s2[2 * i + 1] = s;
    e2[2 * i] = reps[i]; e2[2 * i + 1] = s;
  }
  if (nt_check_shape("repeat", e2, 2 * n, NULL)) {   /* name the result's shape, not the internal one */
    char b[24 * NT_MAXDIM + 8], r[24 * NT_MAXDIM + 8];
    NT_FAIL_NULL("repeat: repeating shape %s by %s gives too many elements (more than %lld)",
                 nt_shape_str(t->shape, t->ndim, b, sizeof b), nt_shape_str(reps, n, r, sizeof r), (long long)NT_MAX_NUMEL);
  }
  for (int i = 0; i < n; i++) fin[i] = e2[2 * i] * e2[2 * i + 1];   /* bounded by the check */
  nt_Tensor *r = nt_reshape(t, s2, 2 * n), *e = r ? nt_expand(r, e2, 2 * n) : NULL;
  nt_Tensor *c = e ? nt_contiguous(e) : NULL, *out = c ? nt_reshape(c, fin, n) : NULL;
  nt_release(r); nt_release(e); nt_release(c);
  return out;
}

/* ---- tril / triu -------------------------------------------------------------------- */
static nt_Tensor *tri(nt_Tensor *t, int64_t k, bool upper);
static int tri_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  gin[0] = tri(g, n->iarg[0], n->iarg[1]);
  return gin[0] ? 0 : -1;
}

static nt_Tensor *tri(nt_Tensor *t, int64_t k, bool upper) {
  const char *name = upper ? "triu" : "tril";
  if (t->ndim < 2) NT_FAIL_NULL("%s: expected a tensor with at least 2 dimensions, got %d", name, t->ndim);
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *c = nt_contiguous(t);
  nt_set_grad_enabled(prev);
  if (!c) return NULL;
  nt_Tensor *out = nt_empty(t->shape, t->ndim, t->dtype, t->device);
  if (out) {
    nt_KernelArgs a = { .op = NT_OP_TRIL, .out = out, .in = { c }, .nin = 1, .iarg = { k, upper }, .niarg = 2 };
    if (nt_dispatch(NT_OP_TRIL, t->device, &a)) { nt_release(out); out = NULL; }
  }
  nt_release(c);
  if (out && nt_needs_grad(1, &t)) {
    nt_Node *n = nt_record(out, upper ? "TriuBackward" : "TrilBackward", tri_backward, 1, &t);
    if (!n) { nt_release(out); return NULL; }
    n->iarg[0] = k; n->iarg[1] = upper;
  }
  return out;
}

nt_Tensor *nt_tril(nt_Tensor *t, int64_t k) { return tri(t, k, false); }
nt_Tensor *nt_triu(nt_Tensor *t, int64_t k) { return tri(t, k, true); }
