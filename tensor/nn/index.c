/*
** index.c — integer/boolean indexing: take (index_select, embedding,
** x[idx]), gather, scatter_add, masked_select, one_hot.
**
** take: x contiguous viewed as [outer, n, inner]; idx flattened to [m];
**   out[o, j, :] = x[o, idx[j], :]  (rows of `inner` elements: one memcpy
**   each, so every dtype shares one kernel).
**   backward (index_add): dx[o, idx[j], :] += g[o, j, :]  (duplicates add up).
** gather (torch): out[i0..i_axis..ik] = x[i0..idx[i0..ik]..ik], out.shape = idx.shape.
** scatter_add: out = x; out[i0..idx[i0..ik]..ik] += src[i0..ik].
**   d gather/dx = scatter_add(0, idx, g); d scatter_add = (g, gather(g, idx)).
*/
#include "nninternal.h"
#include "layers.h"
#include <stdlib.h>

/* Wraps negative indices and checks bounds in place; -1 with a message. */
static int fix_indices(const char *op, int64_t *ix, int64_t m, int64_t n, int axis) {
  for (int64_t j = 0; j < m; j++) {
    int64_t v = ix[j];
    if (v < -n || v >= n)
      NT_FAIL("%s: index %lld is out of bounds for axis %d with size %lld", op, (long long)v, axis, (long long)n);
    if (v < 0) ix[j] = v + n;
  }
  return 0;
}

/* ---- take / index_add ------------------------------------------------------- */
/* dx[o, ix[j], :] += g[o, j, :] (ix fixed).  Threads never share an output
** row segment: they split the outer slices when there are enough, else the
** columns (wide rows), else the destination rows (each thread scans every j
** and takes the ones landing in its range); every output sums its terms in
** j order either way, so the result does not depend on the thread count. */
#define INDEX_ADD_T(T)                                                                    \
  static void index_add_##T(T *dx, const T *g, const int64_t *ix, int64_t outer, int64_t n, \
                            int64_t m, int64_t inner) {                                   \
    int64_t nt = nt_num_threads();                                                        \
    if (nt < 2 || outer >= 2 * nt || outer * m * inner <= NT_OMP_THRESHOLD) {             \
      _Pragma("omp parallel for if (outer > 1 && outer * m * inner > NT_OMP_THRESHOLD)")   \
      for (int64_t o = 0; o < outer; o++)                                                 \
        for (int64_t j = 0; j < m; j++) {                                                 \
          T *d = dx + (o * n + ix[j]) * inner;                                            \
          const T *s = g + (o * m + j) * inner;                                           \
          for (int64_t k = 0; k < inner; k++) d[k] += s[k];                               \
        }                                                                                 \
    } else if (inner >= 128) {                                                            \
      int64_t bb = (inner + nt - 1) / nt;                                                 \
      _Pragma("omp parallel for collapse(2) schedule(static)")                           \
      for (int64_t o = 0; o < outer; o++)                                                 \
        for (int64_t q = 0; q < nt; q++) {                                                \
          int64_t k0 = q * bb, k1 = k0 + bb < inner ? k0 + bb : inner;                    \
          for (int64_t j = 0; j < m; j++) {                                               \
            T *d = dx + (o * n + ix[j]) * inner;                                          \
            const T *s = g + (o * m + j) * inner;                                         \
            for (int64_t k = k0; k < k1; k++) d[k] += s[k];                               \
          }                                                                               \
        }                                                                                 \
    } else {                                                                              \
      _Pragma("omp parallel for collapse(2) schedule(static)")                           \
      for (int64_t o = 0; o < outer; o++)                                                 \
        for (int64_t q = 0; q < nt; q++) {                                                \
          int64_t r0 = n * q / nt, r1 = n * (q + 1) / nt;                                 \
          for (int64_t j = 0; j < m; j++) {                                               \
            int64_t r = ix[j];                                                            \
            if (r < r0 || r >= r1) continue;                                              \
            T *d = dx + (o * n + r) * inner;                                              \
            const T *s = g + (o * m + j) * inner;                                         \
            for (int64_t k = 0; k < inner; k++) d[k] += s[k];                             \
          }                                                                               \
        }                                                                                 \
    }                                                                                     \
  }
INDEX_ADD_T(float)
INDEX_ADD_T(double)

int nn_index_add_cpu(nt_Tensor *out, nt_Tensor *src, const int64_t *ix, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  if (out->dtype == NT_F32) index_add_float((float *)nt_base(out), (const float *)nt_base(src), ix, outer, n, m, inner);
  else if (out->dtype == NT_F64) index_add_double((double *)nt_base(out), (const double *)nt_base(src), ix, outer, n, m, inner);
  else NT_FAIL("index_add: unsupported dtype %s", nt_dtype_name(out->dtype));
  return 0;
}

/* take:      out [outer,m,inner]; in = {x [outer,n,inner], idx i64 [m] (already fixed)}
** take_bwd:  out dx [outer,n,inner] (zeroed here); in = {g, idx}.  iarg = {outer, n, m, inner}
** (take also carries iarg[4] = the op id of the public op called (-1 on the
** CPU, where fix_indices has already checked: no name lookup per call) and
** iarg[5] = the user's axis: a device kernel checks the indices itself and
** names them in its error, as fix_indices does on the CPU) */
static int k_take(const nt_KernelArgs *a) {
  int64_t outer = a->iarg[0], n = a->iarg[1], m = a->iarg[2], inner = a->iarg[3];
  const int64_t *ix = (const int64_t *)nt_base(a->in[1]);
  if (a->op == nn_ops.take) {
    size_t row = (size_t)inner * nt_dtype_size(a->out->dtype);
    const char *x = nt_base(a->in[0]);
    char *o = nt_base(a->out);
    _Pragma("omp parallel for collapse(2) if (outer * m * inner > NT_OMP_THRESHOLD)")
    for (int64_t q = 0; q < outer; q++)
      for (int64_t j = 0; j < m; j++)
        memcpy(o + (size_t)(q * m + j) * row, x + (size_t)(q * n + ix[j]) * row, row);
    return 0;
  }
  memset(nt_base(a->out), 0, (size_t)a->out->numel * nt_dtype_size(a->out->dtype));
  if (a->out->dtype == NT_F32) index_add_float((float *)nt_base(a->out), (const float *)nt_base(a->in[0]), ix, outer, n, m, inner);
  else if (a->out->dtype == NT_F64) index_add_double((double *)nt_base(a->out), (const double *)nt_base(a->in[0]), ix, outer, n, m, inner);
  else NT_FAIL("take backward: unsupported dtype %s", nt_dtype_name(a->out->dtype));
  return 0;
}

/* node: in = {x (contiguous)}; saved[0] = fixed idx [m]; iarg = {outer, n, m, inner} */
static int take_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0];
  nt_Tensor *gc = nt_to_dtype(gout, x->dtype), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  if (!g) return -1;
  nt_Tensor *dx = nt_empty(x->shape, x->ndim, x->dtype, x->device);
  nt_KernelArgs ka = {.op = nn_ops.take_bwd, .out = dx, .in = {g, nd->saved[0]}, .nin = 2, .niarg = 4};
  memcpy(ka.iarg, nd->iarg, 4 * sizeof(int64_t));
  int rc = dx ? nt_dispatch(ka.op, dx->device, &ka) : -1;
  nt_release(g);
  if (rc) { nt_release(dx); return -1; }
  gin[0] = dx;
  return 0;
}

/* take under the name of the public op that was called (errors name it, and
** err_axis: the axis of the tensor the user indexed, which x0 may be a view of) */
static nt_Tensor *take_as(const char *op, nt_Tensor *x0, nt_Tensor *idx0, int axis, int err_axis) {
  nt_nn_init();
  if (x0->ndim == 0) NT_FAIL_NULL("%s: cannot index a 0-d tensor", op);
  int ax = nt_norm_axis(op, axis, x0->ndim);
  if (ax < 0 || nt_check_same_device(op, 2, (nt_Tensor *[]){x0, idx0})) return NULL;
  if (x0->ndim - 1 + idx0->ndim > NT_MAXDIM) NT_FAIL_NULL("%s: result would have more than %d dimensions", op, NT_MAXDIM);
  nt_Tensor *ic = nn_index_i64(op, idx0), *x = ic ? nt_contiguous(x0) : NULL;
  nt_Tensor *ix = NULL, *out = NULL;
  if (!x) goto done;
  ix = nt_clone(ic);                       /* private copy: wrapped in place */
  if (!ix) goto done;
  nn_dims d = nn_split_axis(x->shape, x->ndim, ax);
  int64_t m = ix->numel;
  if (ix->device == NT_CPU && fix_indices(op, (int64_t *)nt_base(ix), m, d.n, err_axis)) goto done;   /* device kernels wrap/check themselves */
  int64_t shp[NT_MAXDIM];
  int k = 0;
  for (int i = 0; i < ax; i++) shp[k++] = x->shape[i];
  for (int i = 0; i < idx0->ndim; i++) shp[k++] = idx0->shape[i];
  for (int i = ax + 1; i < x->ndim; i++) shp[k++] = x->shape[i];
  out = nt_empty(shp, k, x->dtype, x->device);
  if (!out) goto done;
  nt_KernelArgs ka = {.op = nn_ops.take, .out = out, .in = {x, ix}, .nin = 2,
                      .iarg = {d.outer, d.n, m, d.inner, x->device == NT_CPU ? -1 : nt_op_register(op), err_axis}, .niarg = 6};
  if (out->numel && nt_dispatch(ka.op, x->device, &ka)) { nt_release(out); out = NULL; goto done; }
  nt_Node *nd;
  out = nn_finish(out, "TakeBackward", take_backward, 1, &x, &nd);
  if (out && nd) {
    memcpy(nd->iarg, ka.iarg, 4 * sizeof(int64_t));
    nd->niarg = 4;
    if (nt_node_save(nd, ix) < 0) { nt_release(out); out = NULL; }
  }
done:
  nt_release(ic); nt_release(x); nt_release(ix);
  return out;
}

nt_Tensor *nt_take(nt_Tensor *x, nt_Tensor *idx, int axis) { return take_as("take", x, idx, axis, axis); }

nt_Tensor *nt_index_select(nt_Tensor *x, int axis, nt_Tensor *idx) {
  if (idx->ndim != 1) NT_FAIL_NULL("index_select: index must be 1-D, got %d-D", idx->ndim);
  return take_as("index_select", x, idx, axis, axis);
}

nt_Tensor *nt_embedding(nt_Tensor *weight, nt_Tensor *idx) {
  if (weight->ndim != 2) NT_FAIL_NULL("embedding: weight must be 2-D [num_embeddings, dim], got %d-D", weight->ndim);
  if (!nt_dtype_is_int(idx->dtype)) NT_FAIL_NULL("embedding: indices must be an integer tensor, got %s", nt_dtype_name(idx->dtype));
  return take_as("embedding", weight, idx, 0, 0);
}

/* Positions of the true entries of a contiguous mask, as an i64 [count] tensor. */
static nt_Tensor *nonzero_flat(nt_Tensor *mask) {
  nt_Tensor *mc = nt_to_dtype(mask, NT_BOOL), *m = mc ? nt_contiguous(mc) : NULL;
  nt_release(mc);
  if (!m) return NULL;
  if (m->device != NT_CPU) { nt_Tensor *h = nt_to_device(m, NT_CPU); nt_release(m); if (!(m = h)) return NULL; }
  const uint8_t *p = (const uint8_t *)nt_base(m);
  int64_t cnt = 0;
  for (int64_t i = 0; i < m->numel; i++) cnt += p[i] != 0;
  nt_Tensor *ix = nt_empty(&cnt, 1, NT_I64, NT_CPU);
  if (ix) {
    int64_t *o = (int64_t *)nt_base(ix), k = 0;
    for (int64_t i = 0; i < m->numel; i++) if (p[i]) o[k++] = i;
  }
  nt_release(m);
  return ix;
}

nt_Tensor *nt_index_tensor(nt_Tensor *x, nt_Tensor *idx) {
  nt_nn_init();
  if (idx->dtype != NT_BOOL) return take_as("index", x, idx, 0, 0);
  /* boolean mask over the leading idx->ndim axes: flatten them, select rows */
  char a[128], b[128];
  bool ok = idx->ndim <= x->ndim;
  for (int i = 0; ok && i < idx->ndim; i++) ok = idx->shape[i] == x->shape[i];
  if (!ok) NT_FAIL_NULL("index: boolean mask of shape %s does not match tensor of shape %s",
                        nt_shape_str(idx->shape, idx->ndim, a, sizeof a), nt_shape_str(x->shape, x->ndim, b, sizeof b));
  int64_t shp[NT_MAXDIM + 1];
  int k = 0;
  shp[k++] = nt_shape_numel(x->shape, idx->ndim);
  for (int i = idx->ndim; i < x->ndim; i++) shp[k++] = x->shape[i];
  nt_Tensor *xf = nt_reshape(x, shp, k), *ix = xf ? nonzero_flat(idx) : NULL;
  if (ix && x->device != NT_CPU) { nt_Tensor *d = nt_to_device(ix, x->device); nt_release(ix); ix = d; }
  nt_Tensor *r = ix ? take_as("index", xf, ix, 0, 0) : NULL;
  nt_release(xf); nt_release(ix);
  return r;
}

nt_Tensor *nt_masked_select(nt_Tensor *x, nt_Tensor *mask) {
  nt_nn_init();
  if (mask->dtype != NT_BOOL) NT_FAIL_NULL("masked_select: mask must be bool, got %s", nt_dtype_name(mask->dtype));
  int64_t shp[NT_MAXDIM];
  int nd;
  if (nt_broadcast_shapes("masked_select", x->shape, x->ndim, mask->shape, mask->ndim, shp, &nd)) return NULL;
  nt_Tensor *xb = nt_broadcast_to(x, shp, nd), *mb = xb ? nt_broadcast_to(mask, shp, nd) : NULL;
  int64_t flat = -1;
  nt_Tensor *xr = mb ? nt_reshape(xb, &flat, 1) : NULL, *mr = xr ? nt_reshape(mb, &flat, 1) : NULL;
  nt_Tensor *r = mr ? nt_index_tensor(xr, mr) : NULL;
  nt_release(xb); nt_release(mb); nt_release(xr); nt_release(mr);
  return r;
}

/* ---- gather / scatter_add ------------------------------------------------------
** Both walk idx's (contiguous) elements with an odometer over idx.shape,
** tracking the offset into x (contiguous strides) of the non-axis coordinates. */
typedef struct gs_geom {
  int ndim, axis;
  int64_t ishape[NT_MAXDIM], xstr[NT_MAXDIM], sstr[NT_MAXDIM];  /* idx shape; x and src strides */
} gs_geom;

/* scatter_add on the CPU: idx (and src, contiguous) seen as [A, m, B] around
** the axis (A: the axes before it, B: after it); xoA[a] + xoB[b] is the
** offset in x of those coordinates.  Elements with different (a, b) write
** different outputs, so the work splits over a (when there are enough) or
** over blocks of b without two threads touching one output; each output
** still sums its terms in index order, as the serial loop did. */
typedef struct { int64_t A, m, B, xs; const int64_t *xoA, *xoB; } gs_split;
#define SCATTER_T(T)                                                                     \
  static void scatter_add_##T(T *out, const T *src, const int64_t *ix, const gs_split *p) { \
    int64_t A = p->A, m = p->m, B = p->B, xs = p->xs;                                    \
    int64_t bb = A >= 2 * nt_num_threads() || B < 128 ? B : (B + nt_num_threads() - 1) / nt_num_threads(); \
    int64_t nb = (B + bb - 1) / bb;                                                      \
    _Pragma("omp parallel for collapse(2) schedule(static) if (A * m * B > NT_OMP_THRESHOLD && A * nb > 1)") \
    for (int64_t a = 0; a < A; a++)                                                      \
      for (int64_t q = 0; q < nb; q++) {                                                 \
        int64_t b0 = q * bb, b1 = b0 + bb < B ? b0 + bb : B;                             \
        for (int64_t k = 0; k < m; k++) {                                                \
          const int64_t e = (a * m + k) * B, *ie = ix + e;                               \
          const T *se = src + e;                                                         \
          T *oa = out + p->xoA[a];                                                       \
          for (int64_t b = b0; b < b1; b++) oa[p->xoB[b] + ie[b] * xs] += se[b];         \
        }                                                                                \
      }                                                                                  \
  }
SCATTER_T(float)
SCATTER_T(double)
SCATTER_T(int32_t)
SCATTER_T(int64_t)

/* the [A, m, B] split of g's index shape: xoA/xoB malloc'd (one block), or -1 */
static int gs_split_of(const gs_geom *g, gs_split *p, int64_t **mem) {
  int64_t A = 1, B = 1;
  for (int d = 0; d < g->axis; d++) A *= g->ishape[d];
  for (int d = g->axis + 1; d < g->ndim; d++) B *= g->ishape[d];
  int64_t *v = malloc(sizeof(int64_t) * (size_t)(A + B));
  if (!v) NT_FAIL("scatter_add: out of memory");
  for (int64_t a = 0; a < A; a++) {   /* offsets of the leading coordinates, row-major */
    int64_t r = a, o = 0;
    for (int d = g->axis - 1; d >= 0; d--) { o += (r % g->ishape[d]) * g->xstr[d]; r /= g->ishape[d]; }
    v[a] = o;
  }
  for (int64_t b = 0; b < B; b++) {
    int64_t r = b, o = 0;
    for (int d = g->ndim - 1; d > g->axis; d--) { o += (r % g->ishape[d]) * g->xstr[d]; r /= g->ishape[d]; }
    v[A + b] = o;
  }
  *p = (gs_split){A, g->ishape[g->axis], B, g->xstr[g->axis], v, v + A};
  *mem = v;
  return 0;
}

/* gather:      out [idx.shape] fresh; in = {x contiguous, idx i64 contiguous (fixed)}
** scatter_add: out = a contiguous copy of x (added into); in = {src contiguous [idx.shape], idx}
** extra = gs_geom */
static int k_gather_scatter(const nt_KernelArgs *a) {
  const gs_geom *g = a->extra;
  if (a->op == nn_ops.gather) {
    const int64_t *ix = (const int64_t *)nt_base(a->in[1]);
    size_t es = nt_dtype_size(a->out->dtype);
    const char *x = nt_base(a->in[0]);
    char *o = nt_base(a->out);
    int64_t c[NT_MAXDIM] = {0}, xo = 0, m = a->out->numel;
    for (int64_t e = 0; e < m; e++) {
      const char *s = x + (size_t)(xo + ix[e] * g->xstr[g->axis]) * es;
      switch (es) {
      case 8: memcpy(o + e * 8, s, 8); break;
      case 4: memcpy(o + e * 4, s, 4); break;
      case 2: memcpy(o + e * 2, s, 2); break;
      default: o[e] = *s;
      }
      for (int k = g->ndim - 1; k >= 0; k--) {
        if (++c[k] < g->ishape[k]) { if (k != g->axis) xo += g->xstr[k]; break; }
        if (k != g->axis) xo -= g->xstr[k] * (g->ishape[k] - 1);
        c[k] = 0;
      }
    }
    return 0;
  }
  const int64_t *ix = (const int64_t *)nt_base(a->in[1]);
  void *o = nt_base(a->out);
  const void *s = nt_base(a->in[0]);
  gs_split p;
  int64_t *mem;
  nt_DType dt = a->out->dtype;
  if (dt != NT_F32 && dt != NT_F64 && dt != NT_I32 && dt != NT_I64) NT_FAIL("scatter_add: unsupported dtype %s", nt_dtype_name(dt));
  if (gs_split_of(g, &p, &mem)) return -1;
  switch (dt) {
  case NT_F32: scatter_add_float(o, s, ix, &p); break;
  case NT_F64: scatter_add_double(o, s, ix, &p); break;
  case NT_I32: scatter_add_int32_t(o, s, ix, &p); break;
  default: scatter_add_int64_t(o, s, ix, &p); break;
  }
  free(mem);
  return 0;
}

/* Validates idx against x for gather/scatter and builds the geometry + fixed
** i64 indices; returns the index tensor (new ref) or NULL. */
static nt_Tensor *gs_prepare(const char *op, nt_Tensor *x, int axis, nt_Tensor *idx, gs_geom *g, int *ax_out) {
  char a[128], b[128];
  nt_nn_init();
  int ax = x->ndim ? nt_norm_axis(op, axis, x->ndim) : -1;
  if (x->ndim == 0) NT_FAIL_NULL("%s: cannot index a 0-d tensor", op);
  if (ax < 0 || nt_check_same_device(op, 2, (nt_Tensor *[]){x, idx})) return NULL;
  bool ok = idx->ndim == x->ndim;
  for (int d = 0; ok && d < x->ndim; d++) ok = d == ax || idx->shape[d] <= x->shape[d];
  if (!ok) NT_FAIL_NULL("%s: index of shape %s does not fit input of shape %s along axis %d (same ndim, "
                        "index.size(d) <= input.size(d) for d != axis)", op,
                        nt_shape_str(idx->shape, idx->ndim, a, sizeof a), nt_shape_str(x->shape, x->ndim, b, sizeof b), ax);
  nt_Tensor *ic = nn_index_i64(op, idx), *ix = ic ? nt_clone(ic) : NULL;
  nt_release(ic);
  if (!ix) return NULL;
  if (ix->device == NT_CPU && fix_indices(op, (int64_t *)nt_base(ix), ix->numel, x->shape[ax], ax)) { nt_release(ix); return NULL; }   /* device kernels wrap/check themselves */
  g->ndim = x->ndim; g->axis = ax;
  memcpy(g->ishape, idx->shape, sizeof(int64_t) * (size_t)x->ndim);
  nt_contig_strides(x->shape, x->ndim, g->xstr);
  nt_contig_strides(idx->shape, idx->ndim, g->sstr);
  *ax_out = ax;
  return ix;
}

int nn_gather_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0];
  nt_Tensor *z = nt_zeros(x->shape, x->ndim, x->dtype, x->device);
  if (!z) return -1;
  gin[0] = nt_scatter_add(z, (int)nd->iarg[0], nd->saved[0], gout);
  nt_release(z);
  return gin[0] ? 0 : -1;
}

nt_Tensor *nt_gather(nt_Tensor *x0, int axis, nt_Tensor *idx) {
  gs_geom g;
  int ax;
  nt_Tensor *ix = gs_prepare("gather", x0, axis, idx, &g, &ax);
  if (!ix) return NULL;
  nt_Tensor *x = nt_contiguous(x0), *out = x ? nt_empty(idx->shape, idx->ndim, x->dtype, x->device) : NULL;
  if (out) {
    nt_KernelArgs ka = {.op = nn_ops.gather, .out = out, .in = {x, ix}, .nin = 2, .extra = &g};
    if (out->numel && nt_dispatch(ka.op, x->device, &ka)) { nt_release(out); out = NULL; }
  }
  nt_Node *nd = NULL;
  if (out) out = nn_finish(out, "GatherBackward", nn_gather_backward, 1, &x, &nd);
  if (out && nd) {
    nd->iarg[0] = ax; nd->niarg = 1;
    if (nt_node_save(nd, ix) < 0) { nt_release(out); out = NULL; }
  }
  nt_release(x); nt_release(ix);
  return out;
}

static int scatter_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  if (nt_node_needs(nd, 0)) gin[0] = nt_retain(gout);
  if (nt_node_needs(nd, 1)) {
    gin[1] = nt_gather(gout, (int)nd->iarg[0], nd->saved[0]);
    if (!gin[1]) return -1;
  }
  return 0;
}

/* An index expanded from one entry per position along the axis (a GCN's
** dst.reshape(E, 1).expand(E, F): stride 0 on every other axis, whose sizes
** are x's) says exactly what index_add's 1-D index says.  Returns that 1-D
** view (no copy), or NULL when idx is not such an index or x is not an f32/f64
** CPU tensor (index_add's one-pass kernel; elsewhere index_add is itself a
** scatter_add).  Then scatter_add is index_add: one threaded pass over src's
** rows, without gs_prepare's copy and check of the whole [E, F] index. */
static nt_Tensor *expanded_index_1d(nt_Tensor *x, int axis, nt_Tensor *idx) {
  if (x->device != NT_CPU || (x->dtype != NT_F32 && x->dtype != NT_F64) || idx->ndim != x->ndim || x->ndim < 2 ||
      axis < -x->ndim || axis >= x->ndim)
    return NULL;
  int ax = axis < 0 ? axis + x->ndim : axis;
  for (int d = 0; d < x->ndim; d++)
    if (d != ax && (idx->shape[d] != x->shape[d] || (idx->strides[d] != 0 && idx->shape[d] != 1) || idx->shape[d] == 0)) return NULL;
  nt_Tensor *v = nt_retain(idx);
  for (int d = x->ndim - 1; v && d >= 0; d--)   /* from the last axis: the lower ones keep their numbers */
    if (d != ax) { nt_Tensor *s = nt_select(v, d, 0); nt_release(v); v = s; }
  return v;
}

nt_Tensor *nt_scatter_add(nt_Tensor *x, int axis, nt_Tensor *idx, nt_Tensor *src0) {
  const char *op = "scatter_add";
  char a[128], b[128];
  gs_geom g;
  int ax;
  if (src0->ndim != idx->ndim || memcmp(src0->shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim))
    NT_FAIL_NULL("%s: src of shape %s must match index of shape %s", op,
                 nt_shape_str(src0->shape, src0->ndim, a, sizeof a), nt_shape_str(idx->shape, idx->ndim, b, sizeof b));
  nt_Tensor *i1 = expanded_index_1d(x, axis, idx);
  if (i1) {   /* its E entries checked here, so that a bad one is named as scatter_add's */
    int ax1 = axis < 0 ? axis + x->ndim : axis;
    nt_Tensor *i64 = nn_index_i64(op, i1), *ic = i64 ? nt_contiguous(i64) : NULL, *r = NULL;
    if (ic && !fix_indices(op, (int64_t *)nt_base(ic), ic->numel, x->shape[ax1], ax1)) r = nt_index_add(x, ax1, ic, src0, 1.0);
    nt_release(i1); nt_release(i64); nt_release(ic);
    return r;
  }
  nt_Tensor *ix = gs_prepare(op, x, axis, idx, &g, &ax);
  if (!ix) return NULL;
  nt_Tensor *sc = nt_to_dtype(src0, x->dtype), *src = sc ? nt_contiguous(sc) : NULL;
  nt_release(sc);
  nt_Tensor *out = src ? nt_clone(x) : NULL;
  if (out) {
    nt_KernelArgs ka = {.op = nn_ops.scatter_add, .out = out, .in = {src, ix}, .nin = 2, .extra = &g};
    if (src->numel && nt_dispatch(ka.op, x->device, &ka)) { nt_release(out); out = NULL; }
  }
  /* the clone's own history is replaced: the node's inputs are x and src */
  nt_Node *nd = NULL;
  if (out && out->grad_fn) { nt_node_release(out->grad_fn); out->grad_fn = NULL; out->requires_grad = false; }
  if (out) out = nn_finish(out, "ScatterAddBackward", scatter_backward, 2, (nt_Tensor *[]){x, src}, &nd);
  if (out && nd) {
    nd->iarg[0] = ax; nd->niarg = 1;
    if (nt_node_save(nd, ix) < 0) { nt_release(out); out = NULL; }
  }
  nt_release(src); nt_release(ix);
  return out;
}

/* ---- one_hot -------------------------------------------------------------------- */
static int k_one_hot(const nt_KernelArgs *a) {
  const int64_t *ix = (const int64_t *)nt_base(a->in[0]);
  int64_t *o = (int64_t *)nt_base(a->out), C = a->iarg[0], m = a->in[0]->numel;
  memset(o, 0, sizeof(int64_t) * (size_t)(m * C));
  for (int64_t i = 0; i < m; i++) o[i * C + ix[i]] = 1;
  return 0;
}

nt_Tensor *nt_one_hot(nt_Tensor *idx, int64_t C) {
  const char *op = "one_hot";
  nt_nn_init();
  if (idx->ndim + 1 > NT_MAXDIM) NT_FAIL_NULL("%s: too many dimensions", op);
  /* contiguous: the kernels read ix densely (a device index comes back from nn_index_i64 as the view it is) */
  nt_Tensor *ic = nn_index_i64(op, idx), *ix = ic ? nt_contiguous(ic) : NULL;
  nt_release(ic);
  /* validated on the host (C may come from the max); a device tensor is copied for that */
  nt_Tensor *hx = !ix ? NULL : ix->device == NT_CPU ? nt_retain(ix) : nt_to_device(ix, NT_CPU);
  if (!hx) { nt_release(ix); return NULL; }
  const int64_t *p = (const int64_t *)nt_base(hx);
  int64_t mx = -1;
  for (int64_t i = 0; i < hx->numel; i++) {
    if (p[i] < 0) { long long v = p[i]; nt_release(hx); nt_release(ix); NT_FAIL_NULL("%s: class values must be non-negative, got %lld", op, v); }
    if (p[i] > mx) mx = p[i];
  }
  nt_release(hx);
  if (C < 0) C = mx < INT64_MAX ? mx + 1 : mx;   /* INT64_MAX classes: refused just below */
  if (mx >= C) { nt_release(ix); NT_FAIL_NULL("%s: class value %lld is out of range for %lld classes", op, (long long)mx, (long long)C); }
  int64_t shp[NT_MAXDIM];
  memcpy(shp, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
  shp[idx->ndim] = C;
  nt_Tensor *out = nt_empty(shp, idx->ndim + 1, NT_I64, ix->device);
  nt_KernelArgs ka = {.op = nn_ops.one_hot, .out = out, .in = {ix}, .nin = 1, .iarg = {C}, .niarg = 1};
  if (out && out->numel && nt_dispatch(ka.op, out->device, &ka)) { nt_release(out); out = NULL; }
  nt_release(ix);
  return out;
}

/* ---- advanced indexing: x[..., t, ...] and x[..., t, ...] = v ------------------
** Tensor indices among basic entries (ints, slices, nil, "..."), with
** PyTorch's semantics.  The basic entries apply first (a view V of x: an int
** drops its axis, so x[2, :, t] indexes V = x[2] along V's axis 1).  Each
** integer tensor then indexes one axis of V, each bool mask as many axes as
** it has (their sizes must match; it stands for the coordinates of its true
** entries, one integer tensor per axis).  These index "components" broadcast
** together to a shape B and replace the axes they index by B: in place when
** those axes are adjacent in V, else at the front (torch's rule; V is
** permuted so that they lead).  So, with V's indexed axes [a, a + k):
**     result.shape = V.shape[:a] + B + V.shape[a+k:]
** and the k axes merge into one of size n = prod(sizes), each element of B
** naming the flat position sum_c comp_c * stride_c along it.
** A write sees V as [outer, n, inner] and v, broadcast to the result's shape
** S, as [outer, m, inner] (m = numel(B)):
**   plain:       V[:, pos[j], :] = v[:, j, :].  Where positions repeat one of
**                the values wins (undefined in torch); here always the LAST j,
**                on every device: win[r] = last j with pos[j] = r is resolved
**                on the host, and V = where(hit[r], take(v, win, axis 1), V)
**   accumulate:  V[:, pos[j], :] += v[:, j, :]   (scatter_add: repeats add up)
** The index values come to the host once (wrapping, bounds, winners: one small
** copy for a device tensor); the rest is device-generic ops (take, where,
** scatter_add), so every backend that has those runs it.  Cost: O(numel V)
** per write (where reads all of V), not O(m * inner).  Reading with one
** integer tensor stays on the device (take); other forms compute the
** positions on the host.
** Autograd (IndexPutBackward, recorded like CopySlicesBackward, tinplace.c):
**   d v     = g[..., t, ...]   (every repeated index gets its gradient: torch 1.13)
**   d x_old = g with the written elements zeroed (plain), or g (accumulate) */
typedef struct AdvIndex {
  int n, nbasic;             /* entries in ix: the basic ones + one full slice per component */
  int ncomp;                 /* index components: one per integer tensor, one per axis of a mask */
  int axis;                  /* in V (permuted when nperm > 0) the components index axes [axis, axis + ncomp) */
  int nperm, perm[NT_MAXDIM];
  int src_axis[NT_MAXDIM];   /* per component: the indexed tensor's axis (messages) */
  nt_Index ix[2 * NT_MAXDIM + 4];
} AdvIndex;

static int adv_layout(const char *op, nt_Tensor *x, const nt_Index *idx, int n, int nt, const int *tpos,
                      nt_Tensor *const *t, AdvIndex *A) {
  const int cap = (int)(sizeof A->ix / sizeof A->ix[0]);
  bool comp[sizeof A->ix / sizeof A->ix[0]];
  int zpos = -1, zaxis = 0;
  A->n = 0; A->nbasic = n; A->ncomp = 0; A->nperm = 0; A->src_axis[0] = 0;
  int j = 0;
  for (int i = 0; i <= n; i++) {
    for (; j < nt && tpos[j] == i; j++) {
      if (t[j]->dtype != NT_BOOL && !nt_dtype_is_int(t[j]->dtype))
        NT_FAIL("%s: tensors used as indices must be integer or bool tensors, got %s", op, nt_dtype_name(t[j]->dtype));
      int k = t[j]->dtype == NT_BOOL ? t[j]->ndim : 1;
      if (A->n + k > cap || A->ncomp + k > NT_MAXDIM) NT_FAIL("%s: too many indices", op);
      if (k == 0 && nt > 1) NT_FAIL("%s: a 0-d bool index must be the only tensor index", op);
      if (k == 0) zpos = A->n;                 /* a 0-d mask adds an axis of size 1 (true) or 0 there */
      for (int c = 0; c < k; c++) { comp[A->n] = true; A->ix[A->n++] = (nt_Index){ NT_IDX_SLICE, NT_NONE, NT_NONE, 1 }; }
      A->ncomp += k;
    }
    if (i < n) {
      if (A->n >= cap) NT_FAIL("%s: too many indices", op);
      comp[A->n] = false; A->ix[A->n++] = idx[i];
    }
  }
  if (j != nt) NT_FAIL("%s: tensor index positions must be ascending and at most %d", op, n);
  int consumed = 0;
  for (int i = 0; i < A->n; i++) consumed += A->ix[i].kind == NT_IDX_INT || A->ix[i].kind == NT_IDX_SLICE;
  if (consumed > x->ndim) NT_FAIL("%s: too many indices for tensor of dimension %d", op, x->ndim);
  int out = 0, src = 0, c = 0, vaxis[NT_MAXDIM];
  for (int i = 0; i <= A->n; i++) {
    if (i == zpos) zaxis = out;
    if (i == A->n) break;
    switch (A->ix[i].kind) {
    case NT_IDX_INT: src++; break;
    case NT_IDX_SLICE: if (comp[i]) { vaxis[c] = out; A->src_axis[c++] = src; } src++; out++; break;
    case NT_IDX_NEWAXIS: out++; break;
    case NT_IDX_ELLIPSIS: out += x->ndim - consumed; src += x->ndim - consumed; break;
    }
  }
  int vnd = out + (x->ndim - src);           /* V's rank: trailing axes are kept whole */
  bool adjacent = true;
  for (int i = 1; i < A->ncomp; i++) adjacent = adjacent && vaxis[i] == vaxis[0] + i;
  if (adjacent) { A->axis = A->ncomp ? vaxis[0] : zaxis; return 0; }
  /* not adjacent: the components' axes lead, the others follow in order */
  bool used[NT_MAXDIM] = {0};
  A->axis = 0; A->nperm = vnd;
  for (int i = 0; i < A->ncomp; i++) { A->perm[i] = vaxis[i]; used[vaxis[i]] = true; }
  for (int i = 0, k = A->ncomp; i < vnd; i++) if (!used[i]) A->perm[k++] = i;
  return 0;
}

/* V = x[basic entries] with the components' axes kept whole (x itself when
** there are no basic entries), permuted when they are not adjacent */
static nt_Tensor *adv_view(nt_Tensor *x, const AdvIndex *A) {
  nt_Tensor *V = A->nbasic ? nt_index(x, A->ix, A->n) : nt_retain(x);
  if (V && A->nperm) { nt_Tensor *p = nt_permute(V, A->perm, A->nperm); nt_release(V); V = p; }
  return V;
}

/* V's shape with the components' axes merged into one (msh, V->ndim - ncomp + 1 dims) and its [outer, n, inner] split */
static int adv_merged(const nt_Tensor *V, const AdvIndex *A, int64_t *msh, nn_dims *d) {
  int nd = 0;
  d->outer = d->n = d->inner = 1;
  for (int i = 0; i < A->axis; i++) { msh[nd++] = V->shape[i]; d->outer *= V->shape[i]; }
  for (int i = 0; i < A->ncomp; i++) d->n *= V->shape[A->axis + i];
  msh[nd++] = d->n;
  for (int i = A->axis + A->ncomp; i < V->ndim; i++) { msh[nd++] = V->shape[i]; d->inner *= V->shape[i]; }
  return nd;
}

/* the result's shape: V.shape[:axis] + B + V.shape[axis + ncomp:]; -1 past NT_MAXDIM */
static int adv_result_shape(const char *op, const nt_Tensor *V, const AdvIndex *A, const int64_t *B, int nB, int64_t *S) {
  int nd = 0;
  if (V->ndim - A->ncomp + nB > NT_MAXDIM) NT_FAIL("%s: the result would have more than %d dimensions", op, NT_MAXDIM);
  for (int i = 0; i < A->axis; i++) S[nd++] = V->shape[i];
  for (int i = 0; i < nB; i++) S[nd++] = B[i];
  for (int i = A->axis + A->ncomp; i < V->ndim; i++) S[nd++] = V->shape[i];
  return nd;
}

/* The flat positions the components select along the merged axis, as a CPU
** i64 tensor of their broadcast shape B (*B, *nB): integer indices wrapped and
** bounds-checked (messages name the indexed tensor's axis), masks as the
** coordinates of their true entries (row-major). */
static nt_Tensor *adv_positions(const char *op, const AdvIndex *A, int nt, nt_Tensor *const *t, nt_Tensor *x,
                                const nt_Tensor *V, int64_t *B, int *nB) {
  char s1[128], s2[128], s3[128];
  nt_Tensor *comp[NT_MAXDIM] = {0}, *pos = NULL;
  int nc = 0;
  for (int j = 0; j < nt; j++) {
    nt_Tensor *tj = t[j];
    if (tj->dtype == NT_BOOL) {
      bool ok = true;
      for (int i = 0; ok && i < tj->ndim; i++) ok = V->shape[A->axis + nc + i] == tj->shape[i];
      if (!ok) {
        int64_t ax[NT_MAXDIM];
        for (int i = 0; i < tj->ndim; i++) ax[i] = x->shape[A->src_axis[nc + i]];
        nt_error_set("%s: boolean mask of shape %s does not match the axes it indexes (%s, from axis %d) of the tensor of shape %s",
                     op, nt_shape_str(tj->shape, tj->ndim, s1, sizeof s1), nt_shape_str(ax, tj->ndim, s2, sizeof s2),
                     tj->ndim ? A->src_axis[nc] : 0, nt_shape_str(x->shape, x->ndim, s3, sizeof s3));
        goto done;
      }
      nt_Tensor *flat = nonzero_flat(tj);
      if (!flat) goto done;
      if (nt == 1) { pos = flat; B[0] = flat->numel; *nB = 1; goto done; }    /* the flat positions already */
      int64_t cnt = flat->numel;
      const int64_t *f = (const int64_t *)nt_base(flat);
      for (int i = 0; i < tj->ndim; i++)
        if (!(comp[nc + i] = nt_empty(&cnt, 1, NT_I64, NT_CPU))) { nt_release(flat); goto done; }
      for (int64_t e = 0; e < cnt; e++) {
        int64_t rest = f[e];
        for (int i = tj->ndim - 1; i >= 0; i--) {
          ((int64_t *)nt_base(comp[nc + i]))[e] = rest % tj->shape[i];
          rest /= tj->shape[i];
        }
      }
      nt_release(flat);
      nc += tj->ndim;
    } else {
      nt_Tensor *i = nt_to_dtype(tj, NT_I64);
      nt_Tensor *h = !i ? NULL : i->device == NT_CPU ? nt_clone(i) : nt_to_device(i, NT_CPU);
      comp[nc] = h ? nt_contiguous(h) : NULL;      /* h is a fresh copy: private */
      nt_release(i); nt_release(h);
      if (!comp[nc] || fix_indices(op, (int64_t *)nt_base(comp[nc]), comp[nc]->numel, V->shape[A->axis + nc], A->src_axis[nc])) goto done;
      nc++;
    }
  }
  /* broadcast the components together (torch: "indexing tensors could not be broadcast") */
  int nd = comp[0]->ndim;
  memcpy(B, comp[0]->shape, sizeof(int64_t) * (size_t)nd);
  for (int c = 1; c < nc; c++)
    if (nt_broadcast_shapes(op, B, nd, comp[c]->shape, comp[c]->ndim, B, &nd)) {
      nt_error_set("%s: shape mismatch: indexing tensors could not be broadcast together with shapes %s and %s", op,
                   nt_shape_str(B, nd, s1, sizeof s1), nt_shape_str(comp[c]->shape, comp[c]->ndim, s2, sizeof s2));
      goto done;
    }
  *nB = nd;
  if (nc == 1) { pos = comp[0]; comp[0] = NULL; goto done; }
  if (!(pos = nt_zeros(B, nd, NT_I64, NT_CPU))) goto done;
  int64_t *p = (int64_t *)nt_base(pos);
  for (int c = 0; c < nc; c++) {     /* pos = pos * n_c + comp_c, row-major over the components */
    int64_t nsz = V->shape[A->axis + c];
    nt_Tensor *b = nt_broadcast_to(comp[c], B, nd), *bc = b ? nt_contiguous(b) : NULL;
    nt_release(b);
    if (!bc) { nt_release(pos); pos = NULL; goto done; }
    const int64_t *q = (const int64_t *)nt_base(bc);
    for (int64_t e = 0; e < pos->numel; e++) p[e] = p[e] * nsz + q[e];
    nt_release(bc);
  }
done:
  for (int c = 0; c < NT_MAXDIM; c++) nt_release(comp[c]);
  return pos;
}

/* src broadcasts TO shape (not merely with it) */
static bool bcasts_to(const int64_t *s, int ns, const int64_t *d, int nd) {
  if (ns > nd) return false;
  for (int i = 0; i < ns; i++) {
    int64_t a = s[ns - 1 - i], b = d[nd - 1 - i];
    if (a != b && a != 1) return false;
  }
  return true;
}

nt_Tensor *nt_index_adv(nt_Tensor *x, const nt_Index *idx, int n, int nt, const int *tpos, nt_Tensor *const *t) {
  const char *op = "index";
  nt_nn_init();
  AdvIndex A;
  if (adv_layout(op, x, idx, n, nt, tpos, t, &A)) return NULL;
  nt_Tensor *V = adv_view(x, &A), *r = NULL;
  if (!V) return NULL;
  if (nt == 1 && t[0]->dtype != NT_BOOL) {      /* one integer tensor: take on its device */
    r = take_as(op, V, t[0], A.axis, A.src_axis[0]);
    nt_release(V);
    return r;
  }
  /* the positions (shape B) along the merged axis: take gives V.shape[:axis] + B + V.shape[axis+ncomp:] */
  int64_t msh[NT_MAXDIM + 1], B[NT_MAXDIM];
  int nB = 0;
  nn_dims d;
  int mnd = adv_merged(V, &A, msh, &d);
  nt_Tensor *pos = adv_positions(op, &A, nt, t, x, V, B, &nB), *Vm = NULL, *pd = NULL;
  if (pos && (Vm = nt_reshape(V, msh, mnd)) && (pd = V->device == NT_CPU ? nt_retain(pos) : nt_to_device(pos, V->device)))
    r = take_as(op, Vm, pd, A.axis, A.src_axis[0]);
  nt_release(V); nt_release(pos); nt_release(Vm); nt_release(pd);
  return r;
}

/* V[.., pos, ..] = v (or += v): V a view (any strides), pos the CPU i64
** positions along the merged axis, v broadcasting to S (snd dims).  Grad off. */
static int adv_put_rows(nt_Tensor *V, const AdvIndex *A, nt_Tensor *pos, nt_Tensor *v, const int64_t *S, int snd,
                        bool accumulate) {
  int64_t msh[NT_MAXDIM + 1];
  nn_dims d;
  int mnd = adv_merged(V, A, msh, &d);
  int64_t m = pos->numel;
  const int64_t *p = (const int64_t *)nt_base(pos);
  if (m == 0 || V->numel == 0) return 0;
  nt_Tensor *Vm = NULL, *vb = NULL, *w = NULL, *ix = NULL, *hit = NULL, *src = NULL, *tmp;
  int rc = -1;
  if (!(Vm = nt_reshape(V, msh, mnd))) goto done;                /* read-only: a copy is fine */
  if (!accumulate) {
    /* win[r] = the last j writing row r; rows nobody writes keep V */
    int64_t hsh[NT_MAXDIM + 1];
    int hnd = 0;
    hsh[hnd++] = d.n;
    for (int i = A->axis + 1; i < mnd; i++) hsh[hnd++] = 1;     /* broadcasts over the inner axes */
    if (!(hit = nt_zeros(hsh, hnd, NT_BOOL, NT_CPU))) goto done;
    uint8_t *h = (uint8_t *)nt_base(hit);
    for (int64_t j = 0; j < m; j++) h[p[j]] = 1;
    if (V->device != NT_CPU) { tmp = nt_to_device(hit, V->device); nt_release(hit); if (!(hit = tmp)) goto done; }
    if (v->numel == 1) {        /* one value for every written element (x[idx] = 0): no gather */
      if (!(tmp = nt_reshape(v, &m, 0)) || !(src = nt_to_dtype(tmp, V->dtype))) { nt_release(tmp); goto done; }   /* to 0-d */
      nt_release(tmp);
    } else {
      if (!(ix = nt_zeros(&d.n, 1, NT_I64, NT_CPU))) goto done;
      int64_t *win = (int64_t *)nt_base(ix);
      for (int64_t j = 0; j < m; j++) win[p[j]] = j;
      if (V->device != NT_CPU) { tmp = nt_to_device(ix, V->device); nt_release(ix); if (!(ix = tmp)) goto done; }
      int64_t s3[3] = { d.outer, m, d.inner };
      if (!(tmp = nt_broadcast_to(v, S, snd))) goto done;
      vb = nt_to_dtype(tmp, V->dtype); nt_release(tmp);
      if (!vb || !(tmp = nt_reshape(vb, s3, 3))) goto done;      /* reshape copies the broadcast */
      nt_release(vb); vb = tmp;
      if (!(tmp = nt_take(vb, ix, 1)) || !(src = nt_reshape(tmp, msh, mnd))) { nt_release(tmp); goto done; }
      nt_release(tmp);
    }
    if (!(w = nt_where(hit, src, Vm))) goto done;
  } else {
    /* scatter_add computes in f32/f64/i32/i64: halves in f32, u8/bool in i64 */
    nt_DType cd = V->dtype == NT_F16 || V->dtype == NT_BF16 ? NT_F32 : V->dtype == NT_U8 || V->dtype == NT_BOOL ? NT_I64 : V->dtype;
    int64_t s3[3] = { d.outer, m, d.inner }, v3[3] = { d.outer, d.n, d.inner }, one3[3] = { 1, m, 1 };
    nt_Tensor *x3 = NULL, *i3 = NULL;
    if (!(tmp = nt_broadcast_to(v, S, snd))) goto done;
    vb = nt_to_dtype(tmp, cd); nt_release(tmp);
    if (!vb || !(tmp = nt_reshape(vb, s3, 3))) goto done;
    nt_release(vb); vb = tmp;
    if (!(ix = nt_reshape(pos, one3, 3))) goto done;
    if (V->device != NT_CPU) { tmp = nt_to_device(ix, V->device); nt_release(ix); if (!(ix = tmp)) goto done; }
    if (!(tmp = nt_expand(ix, s3, 3))) goto done;
    i3 = nt_contiguous(tmp); nt_release(tmp);
    if ((tmp = nt_reshape(Vm, v3, 3))) { x3 = nt_to_dtype(tmp, cd); nt_release(tmp); }
    nt_Tensor *r = i3 && x3 ? nt_scatter_add(x3, 1, i3, vb) : NULL;
    nt_release(i3); nt_release(x3);
    if (!r) goto done;
    w = nt_to_dtype(r, V->dtype); nt_release(r);
    if (!w) goto done;
  }
  if (!(tmp = nt_reshape(w, V->shape, V->ndim))) goto done;
  rc = nt_write_copy(V, tmp);
  nt_release(tmp);
done:
  nt_release(Vm); nt_release(vb); nt_release(w); nt_release(ix); nt_release(hit); nt_release(src);
  return rc;
}

typedef struct PutCtx {
  AdvIndex A;
  bool accumulate;
  int snd;                   /* the written region's shape S (v broadcasts to it) */
  int64_t S[NT_MAXDIM];
} PutCtx;

/* saved[0] = the CPU positions */
static int index_put_backward(nt_Node *nd, nt_Tensor *g, nt_Tensor **gin) {
  PutCtx *c = nd->ctx;
  nt_Tensor *pos = nd->saved[0];
  if (nt_node_needs(nd, 1)) {        /* d v = g[..., t, ...]: the engine sums it to v's shape */
    int64_t msh[NT_MAXDIM + 1];
    nn_dims d;
    nt_Tensor *gV = adv_view(g, &c->A), *gm = NULL, *p = NULL, *r = NULL;
    int mnd = gV ? adv_merged(gV, &c->A, msh, &d) : 0;
    if (gV) gm = nt_reshape(gV, msh, mnd);
    if (gm) p = g->device == NT_CPU ? nt_retain(pos) : nt_to_device(pos, g->device);
    if (p) r = nt_take(gm, p, c->A.axis);
    gin[1] = r ? nt_reshape(r, c->S, c->snd) : NULL;
    nt_release(gV); nt_release(gm); nt_release(p); nt_release(r);
    if (!gin[1]) return -1;
  }
  if (nt_node_needs(nd, 0)) {        /* d x_old = g, the overwritten rows zeroed */
    if (c->accumulate) { gin[0] = nt_retain(g); return 0; }
    nt_Tensor *z = nt_clone(g), *zV = z ? adv_view(z, &c->A) : NULL;
    nt_Tensor *zero = zV ? nt_zeros(NULL, 0, g->dtype, g->device) : NULL;
    int rc = zero ? adv_put_rows(zV, &c->A, pos, zero, NULL, 0, false) : -1;
    nt_release(zV); nt_release(zero);
    if (rc) { nt_release(z); return -1; }
    gin[0] = z;
  }
  return 0;
}

int nt_index_put_adv(nt_Tensor *base, const nt_Index *idx, int n, int nt, const int *tpos, nt_Tensor *const *t,
                     nt_Tensor *v, bool accumulate) {
  const char *op = "index_put";
  char a[128], b[128];
  nt_nn_init();
  AdvIndex A;
  if (adv_layout(op, base, idx, n, nt, tpos, t, &A)) return -1;
  if (v->device != base->device)
    NT_FAIL("%s: expected the value on the tensor's device (%s), got %s", op, nt_device_name(base->device), nt_device_name(v->device));
  /* x[mask] = v has torch's meaning: v (shape [count, ...], or one value)
  ** fills the selected elements in mask order.  Only where that equals
  ** where(mask, v, x) (a mask of x's shape, a single value) does it take the
  ** one-pass where; a v of x's own shape (the elementwise choice) is an
  ** error that names the spelling of that meaning. */
  if (n == 0 && nt == 1 && t[0]->dtype == NT_BOOL && !accumulate) {
    bool full = t[0]->ndim == base->ndim && !memcmp(t[0]->shape, base->shape, sizeof(int64_t) * (size_t)base->ndim);
    if (full && v->numel == 1 && v->ndim <= 1) return nt_mask_put(base, t[0], v);
    if (full && v->ndim == base->ndim && v->ndim > 1 && !memcmp(v->shape, base->shape, sizeof(int64_t) * (size_t)base->ndim))
      NT_FAIL("x[mask] = v: v has x's shape %s, but v fills the selected elements in order (torch's meaning) and must have "
              "shape [count] (or be one value); for the elementwise choice write x = where(mask, v, x)",
              nt_shape_str(v->shape, v->ndim, a, sizeof a));
  }
  int mode = nt_write_mode(base, v);
  if (mode < 0) return -1;
  bool prev = nt_set_grad_enabled(false);          /* the view and the ops below are the write, not graph ops */
  int rc = -1;
  int64_t B[NT_MAXDIM];
  int nB = 0;
  nt_Tensor *pos = NULL, *V = adv_view(base, &A);
  PutCtx *c = NULL;
  if (!V || !(pos = adv_positions(op, &A, nt, t, base, V, B, &nB)) || !(c = nt_malloc(sizeof *c))) goto done;
  c->A = A; c->accumulate = accumulate;
  if ((c->snd = adv_result_shape(op, V, &A, B, nB, c->S)) < 0) goto done;
  if (!bcasts_to(v->shape, v->ndim, c->S, c->snd)) {
    nt_error_set("%s: shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape %s", op,
                 nt_shape_str(v->shape, v->ndim, a, sizeof a), nt_shape_str(c->S, c->snd, b, sizeof b));
    goto done;
  }
  uint64_t ver = base->storage->version;
  rc = adv_put_rows(V, &A, pos, v, c->S, c->snd, accumulate);
  if (!rc && base->storage->version == ver) nt_bump_version(base);   /* one bump per write, even of nothing (torch) */
done:
  nt_set_grad_enabled(prev);
  nt_release(V);
  if (!rc && mode) {
    nt_Node *nd = nt_record_write(base, v, "IndexPutBackward", index_put_backward);
    if (!nd || nt_node_save(nd, pos) < 0) rc = -1;
    if (nd) { nd->ctx = c; nd->ctx_free = free; c = NULL; }
  }
  free(c);
  nt_release(pos);
  return rc;
}

void nn_register_index(void) {
  nn_ops.take = nt_op_register("take");
  nn_ops.take_bwd = nt_op_register("take_backward");
  nn_ops.gather = nt_op_register("gather");
  nn_ops.scatter_add = nt_op_register("scatter_add");
  nn_ops.one_hot = nt_op_register("one_hot");
  nt_register_kernel(nn_ops.take, NT_CPU, k_take);
  nt_register_kernel(nn_ops.take_bwd, NT_CPU, k_take);
  nt_register_kernel(nn_ops.gather, NT_CPU, k_gather_scatter);
  nt_register_kernel(nn_ops.scatter_add, NT_CPU, k_gather_scatter);
  nt_register_kernel(nn_ops.one_hot, NT_CPU, k_one_hot);
}
