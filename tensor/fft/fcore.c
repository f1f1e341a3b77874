/*
** fft/fcore.c — the three transform primitives (c2c, r2c, c2r along one
** axis, each with its torch backward) and the torch.fft functions built on
** them (fft.h).
**
** A primitive moves its axis last (the others keep their order), makes the
** rows contiguous, runs the kernel of finternal.h and moves the axis back.
** On a device, c2c and r2c skip the copy when one batch stride and one
** element stride address the rows (row_layout: cuFFT's advanced layout,
** cuda/fft.cu); the CPU's kernels and c2r take dense rows.  The n-dimensional
** transforms are the one-axis ones in sequence (rfftn: r2c on the last axis,
** then c2c on the others; irfftn: c2c, then c2r last), each with its own
** axis's normalization, which multiplies to the total.
**
** Backward (torch's FunctionsManual, fft_*_backward), with s the scale:
**   c2c(x, s, dir)   -> c2c(g, s, -dir)   (the DFT's adjoint is the other sign)
**   r2c(x, s), n     -> real(c2c(g zero-padded to n, s, inverse))
**   c2r(X, s), n     -> r2c(g, s) with bins 1 .. n - m doubled (m = n/2+1):
**                       each stands for itself and its mirror n - k
*/
#include "finternal.h"
#include "tensor/textend.h"
#include "tensor/complex.h"
#include <math.h>
#include <pthread.h>

fft_op_ids fft_ops;

/* ---- CPU kernels -------------------------------------------------------------- */
static int64_t rows(const nt_Tensor *t) { return t->ndim ? t->numel / t->shape[t->ndim - 1] : 1; }
static int k_c2c(const nt_KernelArgs *a) {
  int n = (int)a->out->shape[a->out->ndim - 1];
  return a->out->dtype == NT_C128 ? fft_kiss_run_f64(0, a, rows(a->out), n) : fft_kiss_run_f32(0, a, rows(a->out), n);
}
static int k_r2c(const nt_KernelArgs *a) {
  int n = (int)a->in[0]->shape[a->in[0]->ndim - 1];
  return a->out->dtype == NT_C128 ? fft_kiss_run_f64(1, a, rows(a->out), n) : fft_kiss_run_f32(1, a, rows(a->out), n);
}
static int k_c2r(const nt_KernelArgs *a) {
  int n = (int)a->out->shape[a->out->ndim - 1];
  return a->out->dtype == NT_F64 ? fft_kiss_run_f64(2, a, rows(a->out), n) : fft_kiss_run_f32(2, a, rows(a->out), n);
}
static void register_all(void) {
  fft_ops.c2c = nt_op_register("fft_c2c");
  fft_ops.r2c = nt_op_register("fft_r2c");
  fft_ops.c2r = nt_op_register("fft_c2r");
  nt_register_kernel(fft_ops.c2c, NT_CPU, k_c2c);
  nt_register_kernel(fft_ops.r2c, NT_CPU, k_r2c);
  nt_register_kernel(fft_ops.c2r, NT_CPU, k_c2r);
}
void fft_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_all);
}

/* A view t [..., L] (the axis last) whose rows a device kernel can address
** without a copy: element j of row b at b * idist + j * istride, b running
** over the leading dims in row-major order.  True when those dims collapse
** into one stride (size-1 dims ignored) and both strides are positive. */
static bool row_layout(const nt_Tensor *t, int64_t *istride, int64_t *idist) {
  int last = t->ndim - 1;
  *istride = t->shape[last] > 1 ? t->strides[last] : 1;
  *idist = 1;
  if (*istride < 1) return false;
  int64_t expect = 0;
  bool first = true;
  for (int d = last - 1; d >= 0; d--) {
    if (t->shape[d] == 1) continue;
    if (first) { *idist = t->strides[d]; first = false; if (*idist < 1) return false; }
    else if (t->strides[d] != expect) return false;
    expect = t->strides[d] * t->shape[d];
  }
  return true;
}

/* runs kernel op on a [B, L] input (contiguous rows, or strided ones a device
** kernel reads as described: layout, iarg[1..2]) into a fresh [B, L']
** output on in's device; a device without the kernel goes through the host */
static nt_Tensor *exec(int op, nt_Tensor *in, const int64_t *oshape, int ond, nt_DType odt, int64_t iarg0, double s,
                       const int64_t *layout) {
  nt_Device dev = in->device;
  bool host = dev != NT_CPU && !nt_kernel_table[op][dev];
  nt_Tensor *hin = host ? nt_to_device(in, NT_CPU) : nt_retain(in);
  if (!hin) return NULL;
  nt_Tensor *out = nt_empty(oshape, ond, odt, host ? NT_CPU : dev);
  if (out && out->numel) {
    nt_KernelArgs a;
    memset(&a, 0, sizeof a);
    a.op = op; a.out = out; a.in[0] = hin; a.nin = 1; a.iarg[0] = iarg0; a.niarg = 1; a.s[0] = s;
    if (layout && !host) { a.iarg[1] = layout[0]; a.iarg[2] = layout[1]; a.niarg = 3; }
    if (nt_dispatch(op, host ? NT_CPU : dev, &a)) { nt_release(out); out = NULL; }
  }
  nt_release(hin);
  if (out && host) { nt_Tensor *d = nt_to_device(out, dev); nt_release(out); out = d; }
  return out;
}

/* ---- the primitives --------------------------------------------------------- */
enum { P_C2C, P_R2C, P_C2R };
static nt_Tensor *prim(int kind, nt_Tensor *x, int dim, int64_t n, double s, bool forward);

/* node: iarg[0] kind, [1] dim, [2] n, [3] forward; s[0] scale */
static nt_Tensor *pad_axis(nt_Tensor *x, int dim, int64_t n);
static int prim_backward(nt_Node *nd, nt_Tensor *g, nt_Tensor **gin) {
  int kind = (int)nd->iarg[0], dim = (int)nd->iarg[1];
  int64_t n = nd->iarg[2];
  double s = nd->s[0];
  if (kind == P_C2C) { gin[0] = prim(P_C2C, g, dim, n, s, !nd->iarg[3]); return gin[0] ? 0 : -1; }
  if (kind == P_R2C) {
    nt_Tensor *full = pad_axis(g, dim, n), *c = full ? prim(P_C2C, full, dim, n, s, false) : NULL;
    gin[0] = c ? nt_real(c) : NULL;
    nt_release(full); nt_release(c);
    return gin[0] ? 0 : -1;
  }
  /* c2r */
  nt_Tensor *gi = prim(P_R2C, g, dim, n, s, true);
  if (!gi) return -1;
  int64_t m = n / 2 + 1, dbl = n - m;
  if (dbl > 0) {   /* [g0, 2 g1 .. 2 g_dbl, the rest]: built on gi's device, no host buffer */
    nt_Tensor *v = nt_view_as_real(gi);
    nt_Tensor *a = v ? nt_narrow(v, dim, 0, 1) : NULL, *mid = v ? nt_narrow(v, dim, 1, dbl) : NULL;
    nt_Tensor *two = mid ? nt_binary_scalar(NT_OP_MUL, mid, 2.0, false) : NULL;
    nt_Tensor *rest = m - 1 - dbl > 0 && v ? nt_narrow(v, dim, 1 + dbl, m - 1 - dbl) : NULL;
    nt_Tensor *parts[3] = { a, two, rest };
    nt_Tensor *cat = a && two ? nt_concat(parts, rest ? 3 : 2, dim) : NULL;
    nt_Tensor *r = cat ? nt_view_as_complex(cat) : NULL;
    nt_release(v); nt_release(a); nt_release(mid); nt_release(two); nt_release(rest); nt_release(cat); nt_release(gi);
    gi = r;
  }
  gin[0] = gi;
  return gin[0] ? 0 : -1;
}

/* kind P_C2C: x complex, length x.shape[dim] (= n); P_R2C: x real (f32/f64),
** n = x.shape[dim]; P_C2R: x complex with x.shape[dim] = n/2+1, output n */
static nt_Tensor *prim(int kind, nt_Tensor *x, int dim, int64_t n, double s, bool forward) {
  fft_init();
  if (n > INT32_MAX) NT_FAIL_NULL("fft: a transform of length %lld is longer than kissfft and cuFFT allow (%d)", (long long)n, INT32_MAX);
  int op = kind == P_C2C ? fft_ops.c2c : kind == P_R2C ? fft_ops.r2c : fft_ops.c2r;
  nt_DType odt = kind == P_C2C ? x->dtype : kind == P_R2C ? nt_complex_dtype_of(x->dtype) : nt_complex_part_dtype(x->dtype);
  bool prev = nt_set_grad_enabled(false);
  int last = x->ndim - 1;
  /* the axis moved last, the others kept in order (so that leading dims stay
  ** one batch stride where they were: fft over dim 0 of [A, B, L]) */
  int to_last[NT_MAXDIM], back[NT_MAXDIM];
  for (int d = 0, k = 0; d < x->ndim; d++) if (d != dim) to_last[k++] = d;
  to_last[last] = dim;
  for (int d = 0; d < x->ndim; d++) back[to_last[d]] = d;
  nt_Tensor *t = nt_permute(x, to_last, x->ndim), *c = NULL, *o = NULL, *r = NULL;
  /* a device kernel reads strided rows of c2c/r2c input in place (cuFFT's
  ** advanced layout); the CPU's, and c2r (its input is copied anyway), get
  ** dense rows */
  int64_t layout[2];
  bool strided = t && !nt_is_contiguous(t) && kind != P_C2R && t->device != NT_CPU && nt_kernel_table[op][t->device]
                 && row_layout(t, &layout[0], &layout[1]);
  c = t ? (strided ? nt_retain(t) : nt_contiguous(t)) : NULL;
  if (c) {
    int64_t shape[NT_MAXDIM];
    memcpy(shape, c->shape, sizeof(int64_t) * (size_t)c->ndim);
    shape[last] = kind == P_C2C ? n : kind == P_R2C ? n / 2 + 1 : n;
    o = exec(op, c, shape, c->ndim, odt, kind == P_C2C ? forward : n, s, strided ? layout : NULL);
    r = o ? nt_permute(o, back, o->ndim) : NULL;
  }
  nt_release(t); nt_release(c); nt_release(o);
  nt_set_grad_enabled(prev);
  if (r && nt_needs_grad(1, &x)) {
    static const char *names[] = { "FftC2CBackward", "FftR2CBackward", "FftC2RBackward" };
    nt_Node *nd = nt_record(r, names[kind], prim_backward, 1, &x);
    if (!nd) { nt_release(r); return NULL; }
    nd->iarg[0] = kind; nd->iarg[1] = dim; nd->iarg[2] = n; nd->iarg[3] = forward; nd->niarg = 4; nd->s[0] = s;
    nt_node_unchecked(nd, 0);   /* linear: the backward reads only g */
  }
  return r;
}

/* ---- sizes, norms, argument checks ------------------------------------------------ */
int nt_fft_norm_from_name(const char *op, const char *name) {
  if (!name || !strcmp(name, "backward")) return NT_FFT_BACKWARD;
  if (!strcmp(name, "ortho")) return NT_FFT_ORTHO;
  if (!strcmp(name, "forward")) return NT_FFT_FORWARD;
  nt_error_set("%s: norm must be \"backward\", \"ortho\" or \"forward\", got \"%s\"", op, name);
  return -1;
}
/* the scale of a transform of length n in the given direction */
static double scale_of(nt_FftNorm norm, int64_t n, bool forward) {
  if (norm == NT_FFT_ORTHO) return 1.0 / sqrt((double)n);
  if (norm == (forward ? NT_FFT_FORWARD : NT_FFT_BACKWARD)) return 1.0 / (double)n;
  return 1.0;
}
static int wrap_dim(const char *op, const nt_Tensor *x, int dim) {
  int d = dim < 0 ? dim + x->ndim : dim;
  if (x->ndim == 0) NT_FAIL("%s: expected a tensor with at least one dimension, got a scalar", op);
  if (d < 0 || d >= x->ndim) NT_FAIL("%s: dim %d is out of range for a %dD tensor", op, dim, x->ndim);
  return d;
}

/* x truncated or zero-padded to n along dim (differentiable) */
static nt_Tensor *pad_axis(nt_Tensor *x, int dim, int64_t n) {
  int64_t have = x->shape[dim];
  if (n == have) return nt_retain(x);
  bool cplx = nt_dtype_is_complex(x->dtype);   /* on the real view: its gradient is real too */
  nt_Tensor *v = cplx ? nt_view_as_real(x) : nt_retain(x);
  if (!v) return NULL;
  if (n < have) {
    nt_Tensor *t = nt_narrow(v, dim, 0, n), *r = t && cplx ? nt_view_as_complex(t) : (t ? nt_retain(t) : NULL);
    nt_release(v); nt_release(t);
    return r;
  }
  int64_t zs[NT_MAXDIM];
  memcpy(zs, v->shape, sizeof(int64_t) * (size_t)v->ndim);
  zs[dim] = n - have;
  nt_Tensor *z = nt_zeros(zs, v->ndim, v->dtype, v->device);
  nt_Tensor *cat = z ? nt_concat((nt_Tensor *[]){ v, z }, 2, dim) : NULL, *r = NULL;
  if (cat) r = cplx ? nt_view_as_complex(cat) : nt_retain(cat);
  nt_release(v); nt_release(z); nt_release(cat);
  return r;
}

/* complex input of a complex transform (reals promoted, like torch) */
static nt_Tensor *as_complex(nt_Tensor *x) {
  if (nt_dtype_is_complex(x->dtype)) return nt_retain(x);
  return nt_to_dtype(x, nt_complex_dtype_of(x->dtype));
}
/* real floating input of a real transform */
static nt_Tensor *as_real(const char *op, nt_Tensor *x) {
  if (nt_dtype_is_complex(x->dtype))
    NT_FAIL_NULL("%s: expected a real input tensor, got %s (use fft for complex input)", op, nt_dtype_name(x->dtype));
  if (x->dtype == NT_F32 || x->dtype == NT_F64) return nt_retain(x);
  return nt_to_dtype(x, NT_F32);
}
static int check_n(const char *op, int64_t n) {
  if (n < 1) NT_FAIL("%s: invalid number of data points (%lld) specified", op, (long long)n);
  return 0;
}

/* ---- one axis -------------------------------------------------------------------------- */
static nt_Tensor *c2c_axis(const char *op, nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm, bool forward) {
  int d = wrap_dim(op, x, dim);
  if (d < 0) return NULL;
  if (n == -1) n = x->shape[d];
  if (check_n(op, n)) return NULL;
  nt_Tensor *c = as_complex(x), *p = c ? pad_axis(c, d, n) : NULL, *r = p ? prim(P_C2C, p, d, n, scale_of(norm, n, forward), forward) : NULL;
  nt_release(c); nt_release(p);
  return r;
}
nt_Tensor *nt_fft_fft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm) { return c2c_axis("fft", x, n, dim, norm, true); }
nt_Tensor *nt_fft_ifft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm) { return c2c_axis("ifft", x, n, dim, norm, false); }

/* r2c on axis d of a real x: length n; forward scale unless `inverse_scale` (ihfft) */
static nt_Tensor *r2c_axis(const char *op, nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm, bool forward) {
  int d = wrap_dim(op, x, dim);
  if (d < 0) return NULL;
  if (n == -1) n = x->shape[d];
  if (check_n(op, n)) return NULL;
  nt_Tensor *c = as_real(op, x), *p = c ? pad_axis(c, d, n) : NULL, *r = p ? prim(P_R2C, p, d, n, scale_of(norm, n, forward), true) : NULL;
  nt_release(c); nt_release(p);
  return r;
}
nt_Tensor *nt_fft_rfft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm) { return r2c_axis("rfft", x, n, dim, norm, true); }
nt_Tensor *nt_fft_ihfft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm) {
  nt_Tensor *r = r2c_axis("ihfft", x, n, dim, norm, false), *c = r ? nt_conj(r) : NULL;   /* conj(rfft(x)) / n */
  nt_release(r);
  return c;
}

/* c2r on axis d: output length n (-1: 2 (m - 1)); the input resized to n/2+1 */
static nt_Tensor *c2r_axis(const char *op, nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm, bool forward, bool conj) {
  int d = wrap_dim(op, x, dim);
  if (d < 0) return NULL;
  if (n == -1) n = 2 * (x->shape[d] - 1);
  if (check_n(op, n)) return NULL;
  nt_Tensor *c = as_complex(x), *cj = c && conj ? nt_conj(c) : (c ? nt_retain(c) : NULL);
  nt_Tensor *p = cj ? pad_axis(cj, d, n / 2 + 1) : NULL;
  nt_Tensor *r = p ? prim(P_C2R, p, d, n, scale_of(norm, n, forward), false) : NULL;
  nt_release(c); nt_release(cj); nt_release(p);
  return r;
}
nt_Tensor *nt_fft_irfft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm) { return c2r_axis("irfft", x, n, dim, norm, false, false); }
nt_Tensor *nt_fft_hfft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm) { return c2r_axis("hfft", x, n, dim, norm, true, true); }

/* ---- several axes ---------------------------------------------------------------------- */
/* resolves dims and sizes: out d[k] (wrapped, distinct), sz[k] (-1 = keep); returns count or -1 */
static int plan_dims(const char *op, const nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, int *d, int64_t *sz) {
  if (x->ndim == 0) NT_FAIL("%s: expected a tensor with at least one dimension, got a scalar", op);
  int k;
  if (dims) {
    if (ndims > x->ndim) NT_FAIL("%s: %d dims given for a %dD tensor", op, ndims, x->ndim);
    if (s && ns != ndims) NT_FAIL("%s: s and dim must have the same length, got %d and %d", op, ns, ndims);
    k = ndims;
    for (int i = 0; i < k; i++) if ((d[i] = wrap_dim(op, x, dims[i])) < 0) return -1;
  } else if (s) {
    if (ns > x->ndim) NT_FAIL("%s: s has %d entries for a %dD tensor", op, ns, x->ndim);
    k = ns;
    for (int i = 0; i < k; i++) d[i] = x->ndim - k + i;
  } else {
    k = x->ndim;
    for (int i = 0; i < k; i++) d[i] = i;
  }
  if (k == 0) NT_FAIL("%s: no dims to transform", op);
  for (int i = 0; i < k; i++) {
    for (int j = 0; j < i; j++) if (d[i] == d[j]) NT_FAIL("%s: dim %d is repeated", op, d[i]);
    sz[i] = s ? s[i] : -1;
    if (sz[i] != -1 && sz[i] < 1) NT_FAIL("%s: invalid number of data points (%lld) specified", op, (long long)sz[i]);
  }
  return k;
}

static nt_Tensor *c2c_n(const char *op, nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm, bool forward) {
  int d[NT_MAXDIM]; int64_t sz[NT_MAXDIM];
  int k = plan_dims(op, x, s, ns, dims, ndims, d, sz);
  if (k < 0) return NULL;
  nt_Tensor *cur = nt_retain(x);
  for (int i = k - 1; i >= 0 && cur; i--) {
    nt_Tensor *nx = c2c_axis(op, cur, sz[i], d[i], norm, forward);
    nt_release(cur); cur = nx;
  }
  return cur;
}
nt_Tensor *nt_fft_fftn(nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm) {
  return c2c_n("fftn", x, s, ns, dims, ndims, norm, true);
}
nt_Tensor *nt_fft_ifftn(nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm) {
  return c2c_n("ifftn", x, s, ns, dims, ndims, norm, false);
}
nt_Tensor *nt_fft_rfftn(nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm) {
  int d[NT_MAXDIM]; int64_t sz[NT_MAXDIM];
  int k = plan_dims("rfftn", x, s, ns, dims, ndims, d, sz);
  if (k < 0) return NULL;
  nt_Tensor *cur = r2c_axis("rfftn", x, sz[k - 1], d[k - 1], norm, true);   /* the last axis is the real one */
  for (int i = k - 2; i >= 0 && cur; i--) {
    nt_Tensor *nx = c2c_axis("rfftn", cur, sz[i], d[i], norm, true);
    nt_release(cur); cur = nx;
  }
  return cur;
}
nt_Tensor *nt_fft_irfftn(nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm) {
  int d[NT_MAXDIM]; int64_t sz[NT_MAXDIM];
  int k = plan_dims("irfftn", x, s, ns, dims, ndims, d, sz);
  if (k < 0) return NULL;
  nt_Tensor *cur = nt_retain(x);
  for (int i = 0; i < k - 1 && cur; i++) {
    nt_Tensor *nx = c2c_axis("irfftn", cur, sz[i], d[i], norm, false);
    nt_release(cur); cur = nx;
  }
  if (!cur) return NULL;
  nt_Tensor *r = c2r_axis("irfftn", cur, sz[k - 1], d[k - 1], norm, false, false);
  nt_release(cur);
  return r;
}

/* ---- helpers ------------------------------------------------------------------------------ */
static nt_Tensor *freq(const char *op, int64_t n, double d, nt_DType dt, nt_Device dev, bool half) {
  if (n < 0) NT_FAIL_NULL("%s: n must be non-negative, got %lld", op, (long long)n);
  if (n > ((int64_t)1 << 40)) NT_FAIL_NULL("%s: n = %lld is too large", op, (long long)n);
  if (dt != NT_F32 && dt != NT_F64) NT_FAIL_NULL("%s: dtype must be f32 or f64, got %s", op, nt_dtype_name(dt));
  if (!(d != 0) || !isfinite(d)) NT_FAIL_NULL("%s: d must be a finite nonzero number, got %g", op, d);
  int64_t len = half ? n / 2 + 1 : n;   /* rfftfreq(0): [nan], as torch (0 / 0) */
  nt_Tensor *h = nt_empty(&len, 1, NT_F64, NT_CPU);
  if (!h) return NULL;
  double *p = (double *)nt_base(h);
  for (int64_t i = 0; i < len; i++) {
    int64_t k = half || i < (n + 1) / 2 ? i : i - n;   /* 0, 1, ..., ceil(n/2)-1, -floor(n/2), ..., -1 */
    p[i] = (double)k / ((double)n * d);
  }
  nt_Tensor *c = nt_to_dtype(h, dt), *r = c ? nt_to_device(c, dev) : NULL;
  nt_release(h); nt_release(c);
  return r;
}
nt_Tensor *nt_fft_fftfreq(int64_t n, double d, nt_DType dt, nt_Device dev) { return freq("fftfreq", n, d, dt, dev, false); }
nt_Tensor *nt_fft_rfftfreq(int64_t n, double d, nt_DType dt, nt_Device dev) { return freq("rfftfreq", n, d, dt, dev, true); }

/* roll along one axis by k (0 <= k < size): [x[size-k:], x[:size-k]] */
static nt_Tensor *roll_axis(nt_Tensor *x, int dim, int64_t k) {
  int64_t size = x->shape[dim];
  if (k == 0 || size == 0) return nt_retain(x);
  bool cplx = nt_dtype_is_complex(x->dtype);
  nt_Tensor *v = cplx ? nt_view_as_real(x) : nt_retain(x);   /* concat on the real view: any device */
  nt_Tensor *a = v ? nt_narrow(v, dim, size - k, k) : NULL, *b = a ? nt_narrow(v, dim, 0, size - k) : NULL;
  nt_Tensor *cat = b ? nt_concat((nt_Tensor *[]){ a, b }, 2, dim) : NULL, *r = NULL;
  if (cat) r = cplx ? nt_view_as_complex(cat) : nt_retain(cat);
  nt_release(v); nt_release(a); nt_release(b); nt_release(cat);
  return r;
}
nt_Tensor *nt_fft_fftshift(nt_Tensor *x, const int *dims, int ndims, bool inverse) {
  const char *op = inverse ? "ifftshift" : "fftshift";
  int d[NT_MAXDIM], k = 0;
  if (dims) {
    if (ndims > NT_MAXDIM) NT_FAIL_NULL("%s: too many dims", op);
    for (int i = 0; i < ndims; i++) if ((d[k++] = wrap_dim(op, x, dims[i])) < 0) return NULL;
  } else for (int i = 0; i < x->ndim; i++) d[k++] = i;
  nt_Tensor *cur = nt_retain(x);
  for (int i = 0; i < k && cur; i++) {
    int64_t size = x->shape[d[i]];
    int64_t shift = inverse ? size - size / 2 : size / 2;   /* roll by floor(n/2); its inverse by -floor(n/2) */
    nt_Tensor *nx = roll_axis(cur, d[i], size ? shift % size : 0);
    nt_release(cur); cur = nx;
  }
  return cur;
}
