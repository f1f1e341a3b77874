/*
** resample.c — torch.nn.functional's pad, interpolate (nearest, linear,
** bilinear), adaptive_avg_pool1d/2d, unfold/fold, and torch's index_add,
** composed from the core's ops (both devices, autograd through them).
**
** Every one is a gather along an axis or a linear map along an axis, planned
** on the host from the sizes alone:
**   pad:         out[i] = x[src(i)] along each padded axis (index_select with
**                the mode's source index: reflect, replicate, circular; for
**                constant, positions outside x take `value` through where)
**   nearest:     index_select with src(i) = min(floor(i * scale), in - 1)
**   (bi)linear, adaptive_avg_pool: y = x A^T along an axis, A [out, in] the
**                interpolation (two taps) or averaging (one window) matrix,
**                one matmul per spatial axis
**   unfold:      one strided slice of the zero-padded input per kernel
**                offset, stacked: [N, C*kh*kw, L], torch's channel-major order
**   fold:        the adjoint of unfold: scatter_add of every column into the
**                flattened padded output, then the padding cut away
**   index_add:   scatter_add with the 1-D index expanded over source's shape
*/
#include <math.h>
#include <stdlib.h>
#include "nninternal.h"
#include "layers.h"

#define MAX_PLAN ((int64_t)1 << 26)   /* bound on a host-built index or matrix (elements) */

/* a 1-D i64 index on dev from host values (takes v) */
static nt_Tensor *index_on(int64_t *v, int64_t n, nt_Device dev) {
  nt_Tensor *c = nt_from_buffer(v, NT_I64, (int64_t[]){n}, 1, NT_I64);
  free(v);
  if (!c || dev == NT_CPU) return c;
  nt_Tensor *d = nt_to_device(c, dev);
  nt_release(c);
  return d;
}
/* an [r, c] matrix of dtype dt on dev from host f64 values (takes v) */
static nt_Tensor *matrix_on(double *v, int64_t r, int64_t c, nt_DType dt, nt_Device dev) {
  nt_Tensor *h = nt_from_buffer(v, NT_F64, (int64_t[]){r, c}, 2, dt);
  free(v);
  if (!h || dev == NT_CPU) return h;
  nt_Tensor *d = nt_to_device(h, dev);
  nt_release(h);
  return d;
}
static int64_t *alloc_i64(int64_t n) {
  int64_t *v = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (!v) nt_error_set("out of memory");
  return v;
}

/* y = A applied along axis ax of x: y[..., o, ...] = sum_i A[o, i] x[..., i, ...]
** (A [out, in] on x's device, x's dtype) */
static nt_Tensor *apply_along(nt_Tensor *x, int ax, nt_Tensor *A) {
  nt_Tensor *xt = nt_transpose(x, ax, x->ndim - 1);   /* the axis last: xt @ A^T */
  nt_Tensor *At = xt ? nt_transpose(A, 0, 1) : NULL;
  nt_Tensor *y = At ? nt_matmul(xt, At) : NULL;
  nt_Tensor *r = y ? nt_transpose(y, ax, x->ndim - 1) : NULL;
  nt_release(xt); nt_release(At); nt_release(y);
  return r;
}

/* ---- pad ------------------------------------------------------------------------- */

static const char *pad_modes[] = {"constant", "reflect", "replicate", "circular"};

nt_Tensor *nt_pad(nt_Tensor *x, const int64_t *pad, int npad, int mode, double value) {
  const char *op = "pad";
  char s[128];
  if (npad % 2) NT_FAIL_NULL("%s: pad must have an even number of entries (before, after per axis, last axis first), got %d", op, npad);
  if (npad / 2 > x->ndim)
    NT_FAIL_NULL("%s: pad of %d entries pads %d axes, but input %s has %d", op, npad, npad / 2, nt_shape_str(x->shape, x->ndim, s, sizeof s), x->ndim);
  if (mode < 0 || mode > 3) NT_FAIL_NULL("%s: unknown mode %d", op, mode);
  nt_Tensor *cur = nt_retain(x);
  for (int k = 0; k < npad / 2 && cur; k++) {
    int ax = x->ndim - 1 - k;
    int64_t L = x->shape[ax], lo = pad[2 * k], hi = pad[2 * k + 1];
    if (llabs(lo) > MAX_PLAN || llabs(hi) > MAX_PLAN) { nt_release(cur); NT_FAIL_NULL("%s: padding %lld, %lld of axis %d is too large", op, (long long)lo, (long long)hi, ax); }
    int64_t n = L + lo + hi;
    if (lo == 0 && hi == 0) continue;
    if (n < 0) { nt_release(cur); NT_FAIL_NULL("%s: padding %lld, %lld of axis %d (size %lld) leaves a negative size", op, (long long)lo, (long long)hi, ax, (long long)L); }
    if (mode == 1 && (lo >= L || hi >= L)) {
      nt_release(cur);
      NT_FAIL_NULL("%s: reflect padding (%lld, %lld) must be less than the size %lld of axis %d", op, (long long)lo, (long long)hi, (long long)L, ax);
    }
    if (mode == 3 && (lo > L || hi > L)) {
      nt_release(cur);
      NT_FAIL_NULL("%s: circular padding (%lld, %lld) must not be greater than the size %lld of axis %d", op, (long long)lo, (long long)hi, (long long)L, ax);
    }
    if (mode != 0 && L == 0) { nt_release(cur); NT_FAIL_NULL("%s: %s padding of an empty axis %d", op, pad_modes[mode], ax); }
    int64_t *src = alloc_i64(n);
    bool *inside = mode == 0 ? malloc((size_t)(n > 0 ? n : 1)) : NULL;
    if (!src || (mode == 0 && !inside)) { free(src); free(inside); nt_release(cur); if (mode == 0 && !inside) nt_error_set("out of memory"); return NULL; }
    bool any_outside = false;
    for (int64_t i = 0; i < n; i++) {
      int64_t j = i - lo;
      switch (mode) {
        case 0: inside[i] = j >= 0 && j < L; any_outside |= !inside[i]; src[i] = inside[i] ? j : 0; break;
        case 1: src[i] = j < 0 ? -j : j >= L ? 2 * (L - 1) - j : j; break;
        case 2: src[i] = j < 0 ? 0 : j >= L ? L - 1 : j; break;
        default: src[i] = ((j % L) + L) % L; break;
      }
    }
    nt_Tensor *g = NULL;
    if (L == 0) {   /* (constant mode) nothing to gather from: all value */
      free(src);
      int64_t shape[NT_MAXDIM];
      memcpy(shape, cur->shape, sizeof(int64_t) * (size_t)cur->ndim);
      shape[ax] = n;
      g = nt_full(shape, cur->ndim, value, cur->dtype, cur->device);
    } else {
      nt_Tensor *idx = index_on(src, n, x->device);
      g = idx ? nt_index_select(cur, ax, idx) : NULL;
      nt_release(idx);
    }
    if (g && mode == 0 && any_outside && L > 0) {   /* positions outside x: value */
      int64_t shape[NT_MAXDIM];
      for (int i = 0; i < x->ndim; i++) shape[i] = 1;
      shape[ax] = n;
      nt_Tensor *mh = nt_from_buffer(inside, NT_BOOL, shape, x->ndim, NT_BOOL);
      nt_Tensor *m = mh && x->device != NT_CPU ? nt_to_device(mh, x->device) : (mh ? nt_retain(mh) : NULL);
      nt_Tensor *v = m ? nt_full((int64_t[]){1}, 0, value, g->dtype, x->device) : NULL;
      nt_Tensor *w = v ? nt_where(m, g, v) : NULL;
      nt_release(mh); nt_release(m); nt_release(v); nt_release(g);
      g = w;
    }
    free(inside);
    nt_release(cur);
    cur = g;
  }
  return cur;
}

int nt_pad_mode(const char *name) {
  for (int i = 0; i < 4; i++) if (!strcmp(name, pad_modes[i])) return i;
  return -1;
}

/* ---- interpolate -------------------------------------------------------------------- */

/* torch's source coordinate scale for an axis: in/out, or 1/scale_factor
** when the caller gave one (recompute_scale_factor off) */
static double area_scale(int64_t in, int64_t out, double sf, bool align_corners) {
  if (align_corners) return out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0;
  return sf > 0 ? 1.0 / sf : (double)in / (double)out;
}

/* nearest: out[i] = x[min(floor(i * scale), in - 1)] */
static nt_Tensor *nearest_axis(nt_Tensor *x, int ax, int64_t out, double sf) {
  int64_t in = x->shape[ax];
  double sc = area_scale(in, out, sf, false);
  int64_t *src = alloc_i64(out);
  if (!src) return NULL;
  for (int64_t i = 0; i < out; i++) {
    int64_t j = (int64_t)floor((double)i * sc);
    src[i] = j < in - 1 ? j : in - 1;
  }
  nt_Tensor *idx = index_on(src, out, x->device);
  nt_Tensor *y = idx ? nt_index_select(x, ax, idx) : NULL;
  nt_release(idx);
  return y;
}

/* linear along one axis: two taps at floor(src) and the next, src =
** align_corners ? i * (in-1)/(out-1) : max((i + 0.5) * scale - 0.5, 0) */
static nt_Tensor *linear_axis(nt_Tensor *x, int ax, int64_t out, double sf, bool align_corners) {
  int64_t in = x->shape[ax];
  double sc = area_scale(in, out, sf, align_corners);
  double *A = calloc((size_t)(out * in > 0 ? out * in : 1), sizeof(double));
  if (!A) { nt_error_set("out of memory"); return NULL; }
  for (int64_t i = 0; i < out; i++) {
    double s = align_corners ? (double)i * sc : ((double)i + 0.5) * sc - 0.5;
    if (s < 0) s = 0;
    int64_t i0 = (int64_t)s;
    if (i0 > in - 1) i0 = in - 1;
    int64_t i1 = i0 + 1 < in ? i0 + 1 : in - 1;
    double l1 = s - (double)i0, l0 = 1 - l1;
    A[i * in + i0] += l0;
    A[i * in + i1] += l1;
  }
  nt_Tensor *M = matrix_on(A, out, in, x->dtype, x->device);
  nt_Tensor *y = M ? apply_along(x, ax, M) : NULL;
  nt_release(M);
  return y;
}

nt_Tensor *nt_interpolate(nt_Tensor *x0, const int64_t *size, const double *scale_factor, int nsp, const char *mode, int align_corners) {
  const char *op = "interpolate";
  char s[128];
  bool nearest = !strcmp(mode, "nearest"), linear = !strcmp(mode, "linear"), bilinear = !strcmp(mode, "bilinear");
  if (!nearest && !linear && !bilinear) NT_FAIL_NULL("%s: mode must be \"nearest\", \"linear\" or \"bilinear\", got \"%s\"", op, mode);
  if (nearest && align_corners >= 0) NT_FAIL_NULL("%s: align_corners applies only to the linear modes, not \"nearest\"", op);
  int want = linear ? 3 : bilinear ? 4 : -1;
  if (x0->ndim < 3 || x0->ndim > 4 || (want > 0 && x0->ndim != want))
    NT_FAIL_NULL("%s: mode \"%s\" expects a %s input, got %s", op, mode, want == 3 ? "3-D [N, C, L]" : want == 4 ? "4-D [N, C, H, W]" : "3-D or 4-D",
                 nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  if (nsp != x0->ndim - 2) NT_FAIL_NULL("%s: expected %d output sizes or scale factors (one per spatial axis), got %d", op, x0->ndim - 2, nsp);
  nt_Tensor *x = nn_compute_float(op, x0);
  if (!x) return NULL;
  for (int k = 0; k < nsp && x; k++) {
    int ax = 2 + k;
    int64_t in = x0->shape[ax], out;
    double sf = scale_factor ? scale_factor[k] : 0;
    if (scale_factor) {
      if (!(sf > 0) || !isfinite(sf)) { nt_release(x); NT_FAIL_NULL("%s: scale_factor must be positive, got %g", op, sf); }
      double o = floor((double)in * sf);
      if (o > (double)MAX_PLAN) { nt_release(x); NT_FAIL_NULL("%s: output size %g is too large", op, o); }
      out = (int64_t)o;
    } else out = size[k];
    if (out < 1 || out > MAX_PLAN) { nt_release(x); NT_FAIL_NULL("%s: output size must be in [1, 2^26], got %lld for axis %d", op, (long long)out, ax); }
    if (in < 1) { nt_release(x); NT_FAIL_NULL("%s: input axis %d is empty", op, ax); }
    if (out * in > MAX_PLAN && !nearest) { nt_release(x); NT_FAIL_NULL("%s: axis %d: %lld x %lld is too large to plan", op, ax, (long long)out, (long long)in); }
    nt_Tensor *y = nearest ? nearest_axis(x, ax, out, sf) : linear_axis(x, ax, out, sf, align_corners > 0);
    nt_release(x);
    x = y;
  }
  return nn_cast_back(x, x0->dtype);
}

/* ---- adaptive average pooling ---------------------------------------------------------- */

/* window o of an axis of `in` split into `out`: [floor(o in / out), ceil((o+1) in / out)) */
static nt_Tensor *adaptive_axis(nt_Tensor *x, int ax, int64_t out) {
  int64_t in = x->shape[ax];
  double *A = calloc((size_t)(out * in > 0 ? out * in : 1), sizeof(double));
  if (!A) { nt_error_set("out of memory"); return NULL; }
  for (int64_t o = 0; o < out; o++) {
    int64_t a = (o * in) / out, b = ((o + 1) * in + out - 1) / out;
    for (int64_t i = a; i < b; i++) A[o * in + i] = 1.0 / (double)(b - a);
  }
  nt_Tensor *M = matrix_on(A, out, in, x->dtype, x->device);
  nt_Tensor *y = M ? apply_along(x, ax, M) : NULL;
  nt_release(M);
  return y;
}

nt_Tensor *nt_adaptive_avg_pool(nt_Tensor *x0, const int64_t *out, int nsp) {
  const char *op = nsp == 1 ? "adaptive_avg_pool1d" : "adaptive_avg_pool2d";
  char s[128];
  if (x0->ndim != nsp + 1 && x0->ndim != nsp + 2)
    NT_FAIL_NULL("%s: expected a %dD or %dD input, got %s", op, nsp + 1, nsp + 2, nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  nt_Tensor *x = nn_compute_float(op, x0);
  for (int k = 0; k < nsp && x; k++) {
    int ax = x0->ndim - nsp + k;
    if (x0->shape[ax] < 1) { nt_release(x); NT_FAIL_NULL("%s: input axis %d is empty", op, ax); }
    if (out[k] < 1 || out[k] * x0->shape[ax] > MAX_PLAN) { nt_release(x); NT_FAIL_NULL("%s: output_size must be positive (and not huge), got %lld", op, (long long)out[k]); }
    nt_Tensor *y = adaptive_axis(x, ax, out[k]);
    nt_release(x);
    x = y;
  }
  return nn_cast_back(x, x0->dtype);
}

/* ---- unfold / fold ------------------------------------------------------------------------ */

typedef struct { int64_t k[2], d[2], p[2], s[2]; } Win;

static int win_check(const char *op, const Win *w) {
  for (int i = 0; i < 2; i++) {
    if (w->k[i] < 1 || w->k[i] > MAX_PLAN) NT_FAIL("%s: kernel_size must be positive, got %lld", op, (long long)w->k[i]);
    if (w->d[i] < 1 || w->d[i] > MAX_PLAN) NT_FAIL("%s: dilation must be positive, got %lld", op, (long long)w->d[i]);
    if (w->s[i] < 1 || w->s[i] > MAX_PLAN) NT_FAIL("%s: stride must be positive, got %lld", op, (long long)w->s[i]);
    if (w->p[i] < 0 || w->p[i] > MAX_PLAN) NT_FAIL("%s: padding must be >= 0, got %lld", op, (long long)w->p[i]);
  }
  return 0;
}
/* blocks along one axis of size n: (n + 2p - d (k - 1) - 1) / s + 1, or <= 0 */
static int64_t win_blocks(const Win *w, int i, int64_t n) {
  int64_t span = n + 2 * w->p[i] - w->d[i] * (w->k[i] - 1) - 1;
  return span < 0 ? 0 : span / w->s[i] + 1;
}

nt_Tensor *nt_unfold(nt_Tensor *x, const int64_t *k, const int64_t *d, const int64_t *p, const int64_t *st) {
  const char *op = "unfold";
  char s[128];
  Win w = {{k[0], k[1]}, {d[0], d[1]}, {p[0], p[1]}, {st[0], st[1]}};
  if (win_check(op, &w)) return NULL;
  if (x->ndim != 4) NT_FAIL_NULL("%s: expected a 4-D input [N, C, H, W], got %s", op, nt_shape_str(x->shape, x->ndim, s, sizeof s));
  int64_t N = x->shape[0], C = x->shape[1], Ho = win_blocks(&w, 0, x->shape[2]), Wo = win_blocks(&w, 1, x->shape[3]);
  if (Ho < 1 || Wo < 1)
    NT_FAIL_NULL("%s: the kernel (%lld x %lld, dilation %lld x %lld) does not fit input %s padded by (%lld, %lld)", op, (long long)k[0], (long long)k[1],
                 (long long)d[0], (long long)d[1], nt_shape_str(x->shape, x->ndim, s, sizeof s), (long long)p[0], (long long)p[1]);
  int64_t K = k[0] * k[1];
  if (K > 65536) NT_FAIL_NULL("%s: kernel of %lld positions is too large", op, (long long)K);
  nt_Tensor *xp = nt_pad(x, (int64_t[]){p[1], p[1], p[0], p[0]}, 4, 0, 0.0);
  if (!xp) return NULL;
  nt_Tensor **cols = calloc((size_t)K, sizeof *cols);
  nt_Tensor *res = NULL;
  if (!cols) { nt_release(xp); nt_error_set("out of memory"); return NULL; }
  bool ok = true;
  for (int64_t i = 0; i < k[0] && ok; i++)
    for (int64_t j = 0; j < k[1] && ok; j++) {
      nt_Tensor *a = nt_slice(xp, 2, i * d[0], i * d[0] + (Ho - 1) * st[0] + 1, st[0]);
      nt_Tensor *b = a ? nt_slice(a, 3, j * d[1], j * d[1] + (Wo - 1) * st[1] + 1, st[1]) : NULL;
      nt_release(a);
      cols[i * k[1] + j] = b;
      ok = b != NULL;
    }
  nt_Tensor *stk = ok ? nt_stack(cols, (int)K, 2) : NULL;   /* [N, C, K, Ho, Wo] */
  if (stk) res = nt_reshape(stk, (int64_t[]){N, C * K, Ho * Wo}, 3);
  for (int64_t i = 0; i < K; i++) nt_release(cols[i]);
  free(cols);
  nt_release(stk); nt_release(xp);
  return res;
}

nt_Tensor *nt_fold(nt_Tensor *x, const int64_t *osz, const int64_t *k, const int64_t *d, const int64_t *p, const int64_t *st) {
  const char *op = "fold";
  char s[128];
  Win w = {{k[0], k[1]}, {d[0], d[1]}, {p[0], p[1]}, {st[0], st[1]}};
  if (win_check(op, &w)) return NULL;
  if (osz[0] < 1 || osz[1] < 1 || osz[0] > MAX_PLAN || osz[1] > MAX_PLAN) NT_FAIL_NULL("%s: output_size must be positive, got (%lld, %lld)", op, (long long)osz[0], (long long)osz[1]);
  int64_t K = k[0] * k[1];
  if (x->ndim != 3) NT_FAIL_NULL("%s: expected a 3-D input [N, C*kh*kw, L], got %s", op, nt_shape_str(x->shape, x->ndim, s, sizeof s));
  int64_t N = x->shape[0], Ho = win_blocks(&w, 0, osz[0]), Wo = win_blocks(&w, 1, osz[1]);
  if (x->shape[1] % K) NT_FAIL_NULL("%s: input.shape[1] (%lld) must be divisible by the kernel's %lld positions", op, (long long)x->shape[1], (long long)K);
  if (Ho < 1 || Wo < 1 || x->shape[2] != Ho * Wo)
    NT_FAIL_NULL("%s: input.shape[2] (%lld) must be the number of blocks (%lld x %lld) of output_size (%lld, %lld)", op, (long long)x->shape[2],
                 (long long)Ho, (long long)Wo, (long long)osz[0], (long long)osz[1]);
  int64_t C = x->shape[1] / K, Hp = osz[0] + 2 * p[0], Wp = osz[1] + 2 * p[1], L = Ho * Wo;
  if (K * L > MAX_PLAN) NT_FAIL_NULL("%s: %lld columns of %lld positions are too many to plan", op, (long long)L, (long long)K);
  /* column (c, ki, kj, ho, wo) lands at (ki d0 + ho s0) Wp + kj d1 + wo s1 of channel c */
  int64_t *pos = alloc_i64(K * L);
  if (!pos) return NULL;
  for (int64_t i = 0; i < k[0]; i++)
    for (int64_t j = 0; j < k[1]; j++)
      for (int64_t ho = 0; ho < Ho; ho++)
        for (int64_t wo = 0; wo < Wo; wo++)
          pos[((i * k[1] + j) * Ho + ho) * Wo + wo] = (i * d[0] + ho * st[0]) * Wp + j * d[1] + wo * st[1];
  nt_Tensor *idx1 = index_on(pos, K * L, x->device);
  nt_Tensor *idx3 = idx1 ? nt_reshape(idx1, (int64_t[]){1, 1, K * L}, 3) : NULL;
  nt_Tensor *idx = idx3 ? nt_expand(idx3, (int64_t[]){N, C, K * L}, 3) : NULL;
  nt_Tensor *src = nt_reshape(x, (int64_t[]){N, C, K * L}, 3);
  nt_Tensor *z = nt_zeros((int64_t[]){N, C, Hp * Wp}, 3, x->dtype, x->device);
  nt_Tensor *sum = idx && src && z ? nt_scatter_add(z, 2, idx, src) : NULL;
  nt_Tensor *img = sum ? nt_reshape(sum, (int64_t[]){N, C, Hp, Wp}, 4) : NULL;
  nt_Tensor *a = img ? nt_narrow(img, 2, p[0], osz[0]) : NULL;
  nt_Tensor *r = a ? nt_narrow(a, 3, p[1], osz[1]) : NULL;
  nt_release(idx1); nt_release(idx3); nt_release(idx); nt_release(src); nt_release(z); nt_release(sum); nt_release(img); nt_release(a);
  return r;
}

/* ---- index_add ------------------------------------------------------------------------------ */

/* node: in = {x, source}; saved[0] = the wrapped index; s[0] = alpha; iarg[0] = dim */
static int index_add_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  if (nt_node_needs(nd, 0)) gin[0] = nt_retain(gout);
  if (nt_node_needs(nd, 1)) {
    nt_Tensor *t = nt_take(gout, nd->saved[0], (int)nd->iarg[0]);
    nt_Tensor *ts = t && nd->s[0] != 1 ? nt_binary_scalar_ex(NT_OP_MUL, t, nd->s[0], NT_SCALAR_FLOAT) : (t ? nt_retain(t) : NULL);
    gin[1] = ts ? nt_to_dtype(ts, nd->in[1]->dtype) : NULL;
    nt_release(t); nt_release(ts);
    if (!gin[1]) return -1;
  }
  return 0;
}

/* the CPU's f32/f64 index_add: one pass over source's rows (no expanded index),
** split over threads by index.c's kernel; ii the contiguous i64 index */
static nt_Tensor *index_add_rows(const char *op, nt_Tensor *x, int dim, nt_Tensor *ii, nt_Tensor *source, double alpha) {
  nt_Tensor *ix = nt_clone(ii);   /* private: wrapped in place */
  if (!ix) return NULL;
  int64_t *iv = (int64_t *)nt_base(ix), m = ix->numel, n = x->shape[dim];
  for (int64_t j = 0; j < m; j++) {
    if (iv[j] < -n || iv[j] >= n) {
      long long v = iv[j];
      nt_release(ix);
      NT_FAIL_NULL("%s: index %lld is out of bounds for dim %d with size %lld", op, v, dim, (long long)n);
    }
    if (iv[j] < 0) iv[j] += n;
  }
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *sc = nt_to_dtype(source, x->dtype);
  nt_Tensor *ss = sc && alpha != 1 ? nt_binary_scalar_ex(NT_OP_MUL, sc, alpha, NT_SCALAR_FLOAT) : (sc ? nt_retain(sc) : NULL);
  nt_Tensor *src = ss ? nt_contiguous(ss) : NULL;
  nt_Tensor *out = src ? nt_clone(x) : NULL;
  nt_set_grad_enabled(prev);
  nn_dims d = nn_split_axis(x->shape, x->ndim, dim);
  if (out && m && d.outer > 0 && d.inner > 0 && nn_index_add_cpu(out, src, iv, d.outer, d.n, m, d.inner)) { nt_release(out); out = NULL; }
  nt_Node *nd = NULL;
  if (out) out = nn_finish(out, "IndexAddBackward", index_add_backward, 2, (nt_Tensor *[]){x, source}, &nd);
  if (out && nd) {
    nd->iarg[0] = dim; nd->niarg = 1; nd->s[0] = alpha;
    if (nt_node_save(nd, ix) < 0) { nt_release(out); out = NULL; }
  }
  nt_release(sc); nt_release(ss); nt_release(src); nt_release(ix);
  return out;
}

nt_Tensor *nt_index_add(nt_Tensor *x, int dim, nt_Tensor *index, nt_Tensor *source, double alpha) {
  const char *op = "index_add";
  char s1[128], s2[128];
  int nd = x->ndim ? x->ndim : 1;
  if (dim < -nd || dim >= nd) NT_FAIL_NULL("%s: dim %d is out of range for a %d-D input", op, dim, x->ndim);
  if (dim < 0) dim += nd;
  if (index->ndim > 1) NT_FAIL_NULL("%s: index must be 0-D or 1-D, got %d dimensions", op, index->ndim);
  if (source->device != x->device || index->device != x->device)
    NT_FAIL_NULL("%s: input, index and source must be on one device, got %s, %s and %s", op, nt_device_name(x->device),
                 nt_device_name(index->device), nt_device_name(source->device));
  bool shape_ok = source->ndim == x->ndim || (x->ndim == 0 && source->ndim <= 1);
  for (int i = 0; shape_ok && i < x->ndim; i++) shape_ok = i == dim ? source->shape[i] == index->numel : source->shape[i] == x->shape[i];
  if (!shape_ok)
    NT_FAIL_NULL("%s: source %s must have input's shape %s except along dim %d, where it must have index's %lld entries", op,
                 nt_shape_str(source->shape, source->ndim, s1, sizeof s1), nt_shape_str(x->shape, x->ndim, s2, sizeof s2), dim,
                 (long long)index->numel);
  if (x->ndim == 0) NT_FAIL_NULL("%s: a 0-D input is not supported; unsqueeze it", op);
  nt_Tensor *ii = nn_index_i64(op, index);
  if (!ii) return NULL;
  if (x->device == NT_CPU && (x->dtype == NT_F32 || x->dtype == NT_F64)) {
    nt_Tensor *r = index_add_rows(op, x, dim, ii, source, alpha);
    nt_release(ii);
    return r;
  }
  int64_t shape[NT_MAXDIM];
  for (int i = 0; i < x->ndim; i++) shape[i] = 1;
  shape[dim] = index->numel;
  nt_Tensor *ir = nt_reshape(ii, shape, x->ndim);
  nt_Tensor *ie = ir ? nt_expand(ir, source->shape, source->ndim) : NULL;
  nt_Tensor *src = alpha == 1 ? nt_retain(source) : nt_binary_scalar_ex(NT_OP_MUL, source, alpha, NT_SCALAR_FLOAT);
  nt_Tensor *r = ie && src ? nt_scatter_add(x, dim, ie, src) : NULL;
  nt_release(ii); nt_release(ir); nt_release(ie); nt_release(src);
  return r;
}

/* ---- scatter_reduce (sum, mean) -------------------------------------------------------------- */

/* x.scatter_reduce(dim, index, src, reduce, include_self): "sum" and "mean"
** through scatter_add (counts from a scatter of ones; positions no index
** names keep x; include_self=false leaves x out of the named positions) */
nt_Tensor *nt_scatter_reduce(nt_Tensor *x, int dim, nt_Tensor *index, nt_Tensor *src, const char *reduce, bool include_self) {
  const char *op = "scatter_reduce";
  char s1[128], s2[128];
  bool mean = !strcmp(reduce, "mean");
  bool ext = !strcmp(reduce, "prod") || !strcmp(reduce, "amax") || !strcmp(reduce, "amin");
  if (!mean && !ext && strcmp(reduce, "sum"))
    NT_FAIL_NULL("%s: reduce must be \"sum\", \"prod\", \"mean\", \"amax\" or \"amin\", got \"%s\"", op, reduce);
  if (src->ndim != index->ndim || memcmp(src->shape, index->shape, sizeof(int64_t) * (size_t)src->ndim))
    NT_FAIL_NULL("%s: src %s must have index's shape %s", op, nt_shape_str(src->shape, src->ndim, s1, sizeof s1), nt_shape_str(index->shape, index->ndim, s2, sizeof s2));
  if (ext) return nn_scatter_reduce_ext(op, x, dim, index, src, reduce, include_self);
  if (mean && !nt_dtype_is_float(x->dtype)) NT_FAIL_NULL("%s: reduce=\"mean\" needs a floating input, got %s", op, nt_dtype_name(x->dtype));
  if (include_self && !mean) return nt_scatter_add(x, dim, index, src);
  nt_Tensor *zx = nt_zeros_like(x), *ones = nt_ones(src->shape, src->ndim, x->dtype, x->device);
  nt_Tensor *cnt = zx && ones ? nt_scatter_add(zx, dim, index, ones) : NULL;   /* how many src entries land where */
  nt_Tensor *zero = cnt ? nt_scalar(0.0, x->dtype) : NULL;
  nt_Tensor *touched = zero ? nt_gt(cnt, zero) : NULL;
  nt_Tensor *base = NULL, *sum = NULL, *r = NULL;
  if (touched) base = include_self ? nt_retain(x) : nt_where(touched, zx, x);
  if (base) sum = nt_scatter_add(base, dim, index, src);
  if (sum && !mean) r = nt_retain(sum);
  else if (sum) {
    nt_Tensor *n = include_self ? nt_binary_scalar_ex(NT_OP_ADD, cnt, 1, NT_SCALAR_FLOAT) : nt_binary_scalar_ex(NT_OP_MAXIMUM, cnt, 1, NT_SCALAR_FLOAT);
    r = n ? nt_div(sum, n) : NULL;   /* untouched: x / 1 (include_self) or x + 0 over 1 */
    nt_release(n);
  }
  nt_release(zx); nt_release(ones); nt_release(cnt); nt_release(zero); nt_release(touched); nt_release(base); nt_release(sum);
  return r;
}

/* ---- embedding_bag ----------------------------------------------------------------------------- */

/* F.embedding_bag with mode "sum", "mean" or "max": input [B, bag] (offsets
** NULL) or 1-D with offsets (bag b = input[offsets[b] : offsets[b+1]]);
** per_sample_weights (input's shape, mode "sum") scale the rows.  weight's
** gradient comes from take; "max" with offsets is scatter_reduce's amax of the
** rows into their bags (an empty bag is 0, as torch's). */
nt_Tensor *nt_embedding_bag(nt_Tensor *input, nt_Tensor *weight, nt_Tensor *offsets, const char *mode, nt_Tensor *psw, bool include_last_offset) {
  const char *op = "embedding_bag";
  char s1[128], s2[128];
  bool mean = !strcmp(mode, "mean"), max = !strcmp(mode, "max");
  if (!mean && !max && strcmp(mode, "sum")) NT_FAIL_NULL("%s: mode must be \"sum\", \"mean\" or \"max\", got \"%s\"", op, mode);
  if (weight->ndim != 2) NT_FAIL_NULL("%s: weight must be 2-D [num_embeddings, dim], got %s", op, nt_shape_str(weight->shape, weight->ndim, s1, sizeof s1));
  if (!nt_dtype_is_float(weight->dtype)) NT_FAIL_NULL("%s: weight must be a floating tensor, got %s", op, nt_dtype_name(weight->dtype));
  if (input->device != weight->device) NT_FAIL_NULL("%s: input is on %s but weight is on %s", op, nt_device_name(input->device), nt_device_name(weight->device));
  if (psw && (mean || max)) NT_FAIL_NULL("%s: per_sample_weights need mode \"sum\" (as torch's), got \"%s\"", op, mode);
  if (psw && (psw->ndim != input->ndim || memcmp(psw->shape, input->shape, sizeof(int64_t) * (size_t)input->ndim)))
    NT_FAIL_NULL("%s: per_sample_weights %s must have input's shape %s", op, nt_shape_str(psw->shape, psw->ndim, s1, sizeof s1),
                 nt_shape_str(input->shape, input->ndim, s2, sizeof s2));
  if (psw && psw->device != weight->device) NT_FAIL_NULL("%s: per_sample_weights must be on weight's device", op);
  if (offsets ? input->ndim != 1 : input->ndim != 2)
    NT_FAIL_NULL("%s: input must be 2-D [B, bag] without offsets or 1-D with offsets, got %s%s", op, nt_shape_str(input->shape, input->ndim, s1, sizeof s1),
                 offsets ? " with offsets" : " without offsets");
  int64_t D = weight->shape[1];
  nt_Tensor *e = nt_take(weight, input, 0);   /* [.., D]: indices checked there */
  if (e && psw) {
    nt_Tensor *w = nt_unsqueeze(psw, psw->ndim);
    nt_Tensor *m = w ? nt_mul(e, w) : NULL;
    nt_release(w); nt_release(e);
    e = m;
  }
  if (!e) return NULL;
  if (!offsets) {
    int ax = 1;
    nt_Tensor *r = max && input->shape[1] == 0 ? nt_zeros((int64_t[]){input->shape[0], D}, 2, e->dtype, weight->device)
                   : max ? nt_max(e, &ax, 1, false) : mean ? nt_mean(e, &ax, 1, false) : nt_sum(e, &ax, 1, false);
    nt_release(e);
    return r;
  }
  /* offsets: read on the host, checked, turned into each row's bag number */
  if (offsets->ndim != 1 || !nt_dtype_is_int(offsets->dtype)) {
    nt_release(e);
    NT_FAIL_NULL("%s: offsets must be a 1-D integer tensor, got %s %s", op, nt_dtype_name(offsets->dtype), nt_shape_str(offsets->shape, offsets->ndim, s1, sizeof s1));
  }
  int64_t n = input->numel, no = offsets->numel, B = include_last_offset ? no - 1 : no;
  if (B < 0 || no > MAX_PLAN) { nt_release(e); NT_FAIL_NULL("%s: include_last_offset needs at least one offset", op); }
  int64_t *off = alloc_i64(no + 1), *seg = off ? alloc_i64(n) : NULL;
  double *cnt = seg ? malloc(sizeof(double) * (size_t)(B > 0 ? B : 1)) : NULL;
  nt_Tensor *r = NULL;
  if (!cnt) { if (off && seg) nt_error_set("out of memory"); goto done; }
  if (no && nt_to_host(offsets, off, NT_I64)) goto done;
  if (!include_last_offset) off[no] = n;
  for (int64_t b = 0; b < B; b++) {
    if ((b == 0 && off[0] != 0) || off[b] > off[b + 1] || off[b + 1] > n) {
      nt_error_set("%s: offsets must start at 0 and be non-decreasing up to the input's length %lld; offsets[%lld] = %lld, next %lld", op,
                   (long long)n, (long long)b, (long long)off[b], (long long)off[b + 1]);
      goto done;
    }
    for (int64_t i = off[b]; i < off[b + 1]; i++) seg[i] = b;
    cnt[b] = (double)(off[b + 1] - off[b]);
  }
  if (B == 0 ? n != 0 : off[B] != n) {   /* with include_last_offset, the last offset ends the last bag */
    nt_error_set("%s: the offsets cover %lld of the input's %lld indices", op, (long long)(B ? off[B] : 0), (long long)n);
    goto done;
  }
  {
    nt_Tensor *sg = index_on(seg, n, weight->device);
    seg = NULL;
    nt_Tensor *z = sg ? nt_zeros((int64_t[]){B, D}, 2, e->dtype, weight->device) : NULL;
    if (max) {   /* the bag number of each row, along every column */
      nt_Tensor *s2 = sg ? nt_reshape(sg, (int64_t[]){n, 1}, 2) : NULL;
      nt_Tensor *se = s2 ? nt_expand(s2, (int64_t[]){n, D}, 2) : NULL;
      r = z && se ? nt_scatter_reduce(z, 0, se, e, "amax", false) : NULL;
      nt_release(s2); nt_release(se);
    } else r = z ? nt_index_add(z, 0, sg, e, 1.0) : NULL;
    nt_release(sg); nt_release(z);
    if (r && mean) {   /* an empty bag stays 0, as torch's */
      for (int64_t b = 0; b < B; b++) cnt[b] = cnt[b] > 0 ? 1.0 / cnt[b] : 0.0;
      nt_Tensor *c = matrix_on(cnt, B, 1, e->dtype, weight->device);
      cnt = NULL;
      nt_Tensor *m = c ? nt_mul(r, c) : NULL;
      nt_release(c); nt_release(r);
      r = m;
    }
  }
done:
  free(off); free(seg); free(cnt);
  nt_release(e);
  return r;
}
