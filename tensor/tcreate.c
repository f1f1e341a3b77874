/*
** tcreate.c — creation ops (zeros, ones, full, arange, linspace, eye, from a
** host buffer) and host-side element access (item, get, to_host).
*/
#include "tinternal.h"
#include <stdlib.h>

nt_Tensor *nt_full(const int64_t *shape, int ndim, double value, nt_DType dt, nt_Device dev) {
  nt_Tensor *t = nt_empty(shape, ndim, dt, dev);
  if (t && t->numel) {
    if (value == 0 && dev == NT_CPU) memset(t->storage->data, 0, t->storage->nbytes);   /* all dtypes: 0 bits == 0 */
    else if (nt_fill_(t, value)) { nt_release(t); return NULL; }
  }
  return t;
}
nt_Tensor *nt_zeros(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev) { return nt_full(shape, ndim, 0, dt, dev); }
nt_Tensor *nt_ones(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev) { return nt_full(shape, ndim, 1, dt, dev); }
nt_Tensor *nt_scalar(double value, nt_DType dt) { return nt_full(NULL, 0, value, dt, NT_CPU); }
nt_Tensor *nt_empty_like(nt_Tensor *t) { return nt_empty(t->shape, t->ndim, t->dtype, t->device); }
nt_Tensor *nt_zeros_like(nt_Tensor *t) { return nt_full(t->shape, t->ndim, 0, t->dtype, t->device); }
nt_Tensor *nt_ones_like(nt_Tensor *t) { return nt_full(t->shape, t->ndim, 1, t->dtype, t->device); }
nt_Tensor *nt_full_like(nt_Tensor *t, double v) { return nt_full(t->shape, t->ndim, v, t->dtype, t->device); }

/* out[i] = start + i * step on dev (floats with torch's bits, tensor/trange.h): the NT_OP_ARANGE kernel of that device
** (a GPU computes the values itself: nothing is copied up from the host) */
static nt_Tensor *affine_1d(int64_t n, double start, double step, nt_DType dt, nt_Device dev) {
  nt_Tensor *t = nt_empty(&n, 1, dt, dev);
  if (!t || !n) return t;
  nt_KernelArgs a = {.op = NT_OP_ARANGE, .out = t, .s = {start, step}};
  if (nt_dispatch(NT_OP_ARANGE, dev, &a)) { nt_release(t); return NULL; }
  return t;
}

nt_Tensor *nt_arange_on(double start, double stop, double step, nt_DType dt, nt_Device dev) {
  if (step == 0) NT_FAIL_NULL("arange: step must be nonzero");
  if (!isfinite(start) || !isfinite(stop) || !isfinite(step)) NT_FAIL_NULL("arange: bounds must be finite");
  double len = ceil((stop - start) / step);
  if (len < 0) len = 0;
  if (len > 1e12) NT_FAIL_NULL("arange: too many elements");
  return affine_1d((int64_t)len, start, step, dt, dev);
}

/* num values from start to stop, with torch's bits (tensor/trange.h): the
** "linspace" kernel of the device (a GPU computes the values itself) */
nt_Tensor *nt_linspace_on(double start, double stop, int64_t num, nt_DType dt, nt_Device dev) {
  if (num < 0) NT_FAIL_NULL("linspace: number of steps must be non-negative, got %lld", (long long)num);
  static int linspace_op = -1;
  if (linspace_op < 0 && (linspace_op = nt_op_register("linspace")) < 0) return NULL;
  nt_Tensor *t = nt_empty(&num, 1, dt, dev);
  if (!t || !num) return t;
  nt_KernelArgs a = {.op = linspace_op, .out = t, .s = {start, stop}};
  if (nt_dispatch(linspace_op, dev, &a)) { nt_release(t); return NULL; }
  return t;
}

nt_Tensor *nt_eye_on(int64_t n, int64_t m, nt_DType dt, nt_Device dev) {
  if (m < 0) m = n;
  int64_t shape[2] = { n, m }, k = n < m ? n : m;
  nt_Tensor *t = nt_zeros(shape, 2, dt, dev);
  if (!t || !k) return t;
  /* the diagonal is every (m+1)-th element of the flat [n*m] view: one strided fill */
  int64_t flat = n * m;
  nt_Tensor *f = nt_reshape(t, &flat, 1), *d = f ? nt_slice(f, 0, 0, k * (m + 1), m + 1) : NULL;
  int rc = d ? nt_write_fill(d, 1) : -1;
  nt_release(f); nt_release(d);
  if (rc) { nt_release(t); return NULL; }
  return t;
}

nt_Tensor *nt_arange(double start, double stop, double step, nt_DType dt) { return nt_arange_on(start, stop, step, dt, NT_CPU); }
nt_Tensor *nt_linspace(double start, double stop, int64_t num, nt_DType dt) { return nt_linspace_on(start, stop, num, dt, NT_CPU); }
nt_Tensor *nt_eye(int64_t n, int64_t m, nt_DType dt) { return nt_eye_on(n, m, dt, NT_CPU); }

nt_Tensor *nt_from_buffer(const void *data, nt_DType src_dt, const int64_t *shape, int ndim, nt_DType dt) {
  nt_Tensor *t = nt_empty(shape, ndim, dt, NT_CPU);
  if (!t || !t->numel) return t;
  if (src_dt == dt) { memcpy(nt_base(t), data, (size_t)t->numel * nt_dtype_size(dt)); return t; }
  nt_Tensor *src = nt_from_external((void *)data, src_dt, shape, ndim);
  if (!src || nt_copy_(t, src)) { nt_release(src); nt_release(t); return NULL; }
  nt_release(src);
  return t;
}

/* ---- element access ------------------------------------------------------------ */
int nt_item(nt_Tensor *t, double *out) {
  if (t->numel != 1) {
    char b[128];
    NT_FAIL("item: only one-element tensors can be converted to numbers, got shape %s", nt_shape_str(t->shape, t->ndim, b, sizeof b));
  }
  int64_t idx[NT_MAXDIM] = {0};
  return nt_get(t, idx, out);
}

int nt_get(nt_Tensor *t, const int64_t *index, double *out) {
  if (nt_dtype_is_complex(t->dtype))
    NT_FAIL("a %s element is not a real number: take real(x), imag(x) or abs(x) first", nt_dtype_name(t->dtype));
  int64_t off = t->offset;
  for (int i = 0; i < t->ndim; i++) {
    int64_t k = index[i] < 0 ? index[i] + t->shape[i] : index[i];
    if (k < 0 || k >= t->shape[i])
      NT_FAIL("index %lld is out of range for axis %d with size %lld", (long long)index[i], i, (long long)t->shape[i]);
    off += k * t->strides[i];
  }
  size_t es = nt_dtype_size(t->dtype);
  if (t->device == NT_CPU) { *out = nt_load_as_double(nt_base(t) + (off - t->offset) * (int64_t)es, t->dtype); return 0; }
  char buf[8];
  if (nt_dev_check(t, "reading the values of a cuda tensor")) return -1;
  const nt_Allocator *al = nt_allocator(t->device);
  if (!al || al->memcpy(buf, NT_CPU, nt_base(t) + (off - t->offset) * (int64_t)es, t->device, es)) return -1;
  *out = nt_load_as_double(buf, t->dtype);
  return 0;
}

int nt_to_host(nt_Tensor *t, void *buf, nt_DType as) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *c = t->device == NT_CPU ? nt_retain(t) : nt_to_device(t, NT_CPU);
  int rc = -1;
  if (c) {
    nt_Tensor *dst = nt_from_external(buf, as, t->shape, t->ndim);
    if (dst) { rc = nt_copy_(dst, c); nt_release(dst); }
    nt_release(c);
  }
  nt_set_grad_enabled(prev);
  return rc;
}
