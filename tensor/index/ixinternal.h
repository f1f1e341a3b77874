/*
** index/ixinternal.h — private to tensor/index/: consuming wrappers over the
** public ops, so the compositions read as formulas.  Each X_* takes
** OWNERSHIP of its tensor arguments (releases them) and returns a new
** reference; a NULL argument (an earlier op failed, its error set) makes it
** return NULL, so a chain checks for failure once at its end.
*/
#ifndef NT_IXINTERNAL_H
#define NT_IXINTERNAL_H

#include "tensor/tinternal.h"
#include "tensor/textend.h"
#include "tensor/nn/nn.h"
#include "index.h"

static inline nt_Tensor *X_bin(int op, nt_Tensor *a, nt_Tensor *b) {
  nt_Tensor *r = a && b ? nt_binary(op, a, b) : NULL;
  nt_release(a); nt_release(b);
  return r;
}
#define X_add(a, b) X_bin(NT_OP_ADD, a, b)
#define X_sub(a, b) X_bin(NT_OP_SUB, a, b)
#define X_mul(a, b) X_bin(NT_OP_MUL, a, b)
#define X_div(a, b) X_bin(NT_OP_DIV, a, b)
/* t OP s (s a float scalar) / s OP t */
static inline nt_Tensor *X_bs(int op, nt_Tensor *t, double s) {
  nt_Tensor *r = t ? nt_binary_scalar_ex(op, t, s, NT_SCALAR_FLOAT) : NULL;
  nt_release(t);
  return r;
}
static inline nt_Tensor *X_sb(int op, double s, nt_Tensor *t) {
  nt_Tensor *r = t ? nt_binary_scalar_ex(op, t, s, NT_SCALAR_FLOAT | NT_SCALAR_FIRST) : NULL;
  nt_release(t);
  return r;
}
static inline nt_Tensor *X_un(int op, nt_Tensor *t) {
  nt_Tensor *r = t ? nt_unary(op, t) : NULL;
  nt_release(t);
  return r;
}
static inline nt_Tensor *X_where(nt_Tensor *c, nt_Tensor *a, nt_Tensor *b) {
  nt_Tensor *r = c && a && b ? nt_where(c, a, b) : NULL;
  nt_release(c); nt_release(a); nt_release(b);
  return r;
}
static inline nt_Tensor *X_sum(nt_Tensor *t, int axis, bool keep) {
  nt_Tensor *r = t ? nt_sum(t, &axis, 1, keep) : NULL;
  nt_release(t);
  return r;
}
static inline nt_Tensor *X_slice(nt_Tensor *t, int axis, int64_t start, int64_t stop) {
  nt_Tensor *r = t ? nt_slice(t, axis, start, stop, 1) : NULL;
  nt_release(t);
  return r;
}
static inline nt_Tensor *X_cat2(nt_Tensor *a, nt_Tensor *b, int axis) {
  nt_Tensor *r = a && b ? nt_concat((nt_Tensor *[]){ a, b }, 2, axis) : NULL;
  nt_release(a); nt_release(b);
  return r;
}
static inline nt_Tensor *X_dtype(nt_Tensor *t, nt_DType dt) {
  nt_Tensor *r = t ? nt_to_dtype(t, dt) : NULL;
  nt_release(t);
  return r;
}
static inline nt_Tensor *X_unsqueeze(nt_Tensor *t, int axis) {
  nt_Tensor *r = t ? nt_unsqueeze(t, axis) : NULL;
  nt_release(t);
  return r;
}
static inline nt_Tensor *X_detach(nt_Tensor *t) {
  nt_Tensor *r = t ? nt_detach(t) : NULL;
  nt_release(t);
  return r;
}
/* a 0-d (scalar) tensor of t's dtype and device, broadcasting anywhere */
static inline nt_Tensor *ix_const_like(nt_Tensor *t, double v) {
  return nt_full(NULL, 0, v, t->dtype, t->device);
}

/* The host side of the data-dependent ops (setops.c): x's elements in
** row-major order as i64 (integer and bool dtypes) or f64 (floats). */
typedef struct ix_Host { nt_DType as; int64_t n; union { int64_t *i; double *f; void *p; } u; } ix_Host;
int  ix_host(nt_Tensor *x, ix_Host *h);
void ix_host_free(ix_Host *h);
/* an i64 tensor of `shape` from host memory, on device dev */
nt_Tensor *ix_i64_on(const int64_t *data, const int64_t *shape, int ndim, nt_Device dev);

/* setdev.c: nonzero / histc / isin on a device with their kernels (cuda/index.cu) */
enum { IX_DEV_NONZERO, IX_DEV_HISTC, IX_DEV_ISIN, IX_DEV_UNIQUE, IX_DEV_UNIQUE_DIM, IX_DEV_SEARCH, IX_DEV_HISTOGRAM };
bool ix_device_has(nt_Tensor *x, int which);
nt_Tensor *ix_nonzero_device(nt_Tensor *x);
nt_Tensor *ix_histc_device(nt_Tensor *x, int64_t bins, double lo, double hi);
nt_Tensor *ix_isin_device(nt_Tensor *elements, nt_Tensor *test, bool invert);
int ix_unique_device(nt_Tensor *x, bool sorted, nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts);
int ix_unique_dim_device(nt_Tensor *x, int axis, bool sorted, nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts);
nt_Tensor *ix_searchsorted_device(nt_Tensor *seq, nt_Tensor *values, bool right, nt_Tensor *sorter);
double ix_histc_top(double lo, double hi, int64_t bins, nt_DType dt);
int ix_histogram_device(nt_Tensor *x, nt_Tensor *edges_f64, nt_Tensor *weight, bool density, int mode, nt_Tensor **hist);
/* two 0-d tensors read back together (one synchronisation); x's finite range so (lo == hi == 0: none) */
int ix_read2(nt_Tensor *a, nt_Tensor *b, double *va, double *vb);
int ix_finite_range(nt_Tensor *x, double *lo, double *hi);
/* gammagrad.c: y (a standard_gamma sample of alpha) with its gradient node to alpha, when needed */
nt_Tensor *ix_gamma_attach_grad(nt_Tensor *y, nt_Tensor *alpha);

#endif
