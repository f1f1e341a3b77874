/*
** sort.c — sort / argsort / topk (stable merge sort of indices per row;
** cumsum is the SUM kind of index/scan.c's scan op).  Rows are the n
** elements along the axis of a contiguous tensor viewed as [outer, n, inner].
**
** Order: ascending uses "a < b" with NaN greater than everything (NumPy puts
** NaN last); descending is the mirror (NaN first, like torch).  Ties keep
** their original order (stable), so indices are deterministic.
** Backward of the values: dx = scatter_add(0, axis, indices, g) (each output
** element came from exactly one input element).
*/
#include "nninternal.h"
#include <stdlib.h>

#define ISNAN(v) ((v) != (v))

#define SORT_T(T)                                                                                 \
  /* true if a must come before b */                                                              \
  static inline bool before_##T(T a, T b, int desc) {                                             \
    if (desc) return ISNAN(a) ? !ISNAN(b) : (!ISNAN(b) && a > b);                                 \
    return !ISNAN(a) && (ISNAN(b) || a < b);                                                      \
  }                                                                                               \
  /* stable bottom-up merge sort of ix[0..n) by key[ix[.]], tmp is scratch of n;                  \
  ** -1 when interrupted (checked every NT_CHUNK merged elements, inside long merges too) */       \
  static int msort_##T(const T *key, int64_t *ix, int64_t *tmp, int64_t n, int desc) {            \
    for (int64_t w = 1; w < n; w *= 2) {                                                          \
      for (int64_t lo = 0, next = NT_CHUNK; lo < n; lo += 2 * w) {                                \
        int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;              \
        int64_t i = lo, j = mid, k = lo;                                                          \
        while (i < mid && j < hi) {                                                               \
          int64_t stop = k + NT_CHUNK;                                                            \
          while (i < mid && j < hi && k < stop) tmp[k++] = before_##T(key[ix[j]], key[ix[i]], desc) ? ix[j++] : ix[i++]; \
          if (k == stop && NT_INTERRUPTED()) return -1;                                           \
        }                                                                                         \
        while (i < mid) tmp[k++] = ix[i++];                                                       \
        while (j < hi) tmp[k++] = ix[j++];                                                        \
        if (hi >= next) { next = hi + NT_CHUNK; if (NT_INTERRUPTED()) return -1; }                \
      }                                                                                           \
      memcpy(ix, tmp, sizeof(int64_t) * (size_t)n);                                               \
    }                                                                                             \
    return 0;                                                                                     \
  }                                                                                               \
  static int sort_rows_##T(const T *x, T *vals, int64_t *inds, int64_t outer, int64_t n,         \
                           int64_t inner, int64_t k, int desc) {                                  \
    int64_t rows = outer * inner;                                                                 \
    int fail = 0;                                                                                 \
    _Pragma("omp parallel if (rows * n > NT_OMP_THRESHOLD)")                                      \
    {                                                                                             \
      T *key = malloc(sizeof(T) * (size_t)(n + 1));                                               \
      int64_t *ix = malloc(sizeof(int64_t) * (size_t)(n + 1)), *tmp = malloc(sizeof(int64_t) * (size_t)(n + 1)); \
      if (!key || !ix || !tmp) {                                                                  \
        _Pragma("omp atomic write")                                                               \
        fail = 1;                                                                                 \
      } else {                                                                                    \
        _Pragma("omp for")                                                                        \
        for (int64_t r = 0; r < rows; r++) {                                                      \
          int failed_;                                                                            \
          _Pragma("omp atomic read")                                                              \
          failed_ = fail;                                                                         \
          if (failed_) continue;   /* an omp for cannot break: skip the remaining rows */         \
          int64_t o = r / inner, j = r % inner;                                                   \
          const T *xr = x + o * n * inner + j;                                                    \
          for (int64_t i = 0; i < n; i++) { key[i] = xr[i * inner]; ix[i] = i; }                  \
          if (msort_##T(key, ix, tmp, n, desc) || ((r & 1023) == 1023 && NT_INTERRUPTED())) {     \
            _Pragma("omp atomic write")                                                           \
            fail = 2;                                                                             \
            continue;                                                                             \
          }                                                                                       \
          int64_t ob = o * k * inner + j;                                                         \
          for (int64_t i = 0; i < k; i++) {                                                       \
            if (vals) vals[ob + i * inner] = key[ix[i]];                                          \
            inds[ob + i * inner] = ix[i];                                                         \
          }                                                                                       \
        }                                                                                         \
      }                                                                                           \
      free(key); free(ix); free(tmp);                                                             \
    }                                                                                             \
    if (fail == 2) NT_FAIL_INTERRUPTED();                                                         \
    if (fail) NT_FAIL("sort: out of memory");                                                     \
    return 0;                                                                                     \
  }
SORT_T(float)
SORT_T(double)
SORT_T(int32_t)
SORT_T(int64_t)
SORT_T(uint8_t)

#define P(t) ((t) ? (void *)nt_base(t) : NULL)

/* sort: out = values|NULL; in = {x, indices i64 (written)}; iarg = {outer, n, inner, k, desc} */
static int k_sort(const nt_KernelArgs *a) {
  const int64_t *q = a->iarg;
  nt_DType dt = a->in[0]->dtype;
  switch (dt) {
  case NT_F32: return sort_rows_float(P(a->in[0]), P(a->out), P(a->in[1]), q[0], q[1], q[2], q[3], (int)q[4]);
  case NT_F64: return sort_rows_double(P(a->in[0]), P(a->out), P(a->in[1]), q[0], q[1], q[2], q[3], (int)q[4]);
  case NT_I32: return sort_rows_int32_t(P(a->in[0]), P(a->out), P(a->in[1]), q[0], q[1], q[2], q[3], (int)q[4]);
  case NT_I64: return sort_rows_int64_t(P(a->in[0]), P(a->out), P(a->in[1]), q[0], q[1], q[2], q[3], (int)q[4]);
  case NT_U8: case NT_BOOL: return sort_rows_uint8_t(P(a->in[0]), P(a->out), P(a->in[1]), q[0], q[1], q[2], q[3], (int)q[4]);
  default: NT_FAIL("sort: unsupported dtype %s", nt_dtype_name(dt));
  }
}

/* sort/topk values are x gathered along the axis by the indices: backward is
** gather's (nn_gather_backward, index.c) */

static int sort_impl(const char *op, nt_Tensor *x0, int64_t k, int axis, bool desc, nt_Tensor **values, nt_Tensor **indices) {
  nt_nn_init();
  if (values) *values = NULL;
  if (indices) *indices = NULL;
  int ax = x0->ndim ? nt_norm_axis(op, axis, x0->ndim) : 0;
  if (ax < 0) return -1;
  int64_t n = x0->ndim ? x0->shape[ax] : 1;
  if (k < 0 || k > n) NT_FAIL("%s: k = %lld is out of range for a dimension of size %lld", op, (long long)k, (long long)n);
  nt_Tensor *xf = x0->dtype == NT_F16 || x0->dtype == NT_BF16 ? nt_to_dtype(x0, NT_F32) : nt_retain(x0);
  nt_Tensor *x = xf ? nt_contiguous(xf) : NULL;
  nt_release(xf);
  if (!x) return -1;
  int64_t shp[NT_MAXDIM];
  memcpy(shp, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  if (x->ndim) shp[ax] = k;
  nn_dims d = nn_split_axis(x->shape, x->ndim, ax);
  nt_Tensor *v = values ? nt_empty(shp, x->ndim, x->dtype, x->device) : NULL;
  nt_Tensor *ix = nt_empty(shp, x->ndim, NT_I64, x->device);
  int rc = -1;
  if ((values && !v) || !ix) goto done;
  nt_KernelArgs ka = {.op = nn_ops.sort, .out = v, .in = {x, ix}, .nin = 2, .iarg = {d.outer, d.n, d.inner, k, desc}, .niarg = 5};
  if (ix->numel && nt_dispatch(ka.op, x->device, &ka)) goto done;
  if (v) {
    nt_Node *nd;
    v = nn_finish(v, k == n ? "SortBackward" : "TopkBackward", nn_gather_backward, 1, &x, &nd);
    if (!v) goto done;
    if (nd) {
      nd->iarg[0] = ax; nd->niarg = 1;
      if (nt_node_save(nd, ix) < 0) goto done;
    }
    *values = nn_cast_back(nt_retain(v), x0->dtype);
    if (!*values) goto done;
  }
  if (indices) *indices = nt_retain(ix);
  rc = 0;
done:
  nt_release(x); nt_release(v); nt_release(ix);
  return rc;
}

int nt_sort(nt_Tensor *x, int axis, bool descending, nt_Tensor **values, nt_Tensor **indices) {
  int ax = x->ndim ? nt_norm_axis("sort", axis, x->ndim) : 0;
  if (ax < 0) return -1;
  return sort_impl("sort", x, x->ndim ? x->shape[ax] : 1, axis, descending, values, indices);
}

nt_Tensor *nt_argsort(nt_Tensor *x, int axis, bool descending) {
  nt_Tensor *ix = NULL;
  return nt_sort(x, axis, descending, NULL, &ix) ? NULL : ix;
}

int nt_topk(nt_Tensor *x, int64_t k, int axis, bool largest, nt_Tensor **values, nt_Tensor **indices) {
  return sort_impl("topk", x, k, axis, largest, values, indices);
}

void nn_register_sort(void) {
  nn_ops.sort = nt_op_register("sort");
  nt_register_kernel(nn_ops.sort, NT_CPU, k_sort);
}
