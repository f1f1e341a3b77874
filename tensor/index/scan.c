/*
** index/scan.c — cumsum, cumprod, logcumsumexp, cummax, cummin: one inclusive
** scan along the axis per call, the op "scan" (a kernel per device: the loop
** below on the CPU, cuda/scan.cu on the GPU; one launch there).
**
** The op: in = {x [outer, n, inner] contiguous, indices i64 (max/min only,
** written)}, out = y (x's shape and dtype), iarg = {outer, n, inner, kind,
** reverse}; kind is NT_SCAN_* (scanmath.h: the combine steps both devices
** share), reverse scans from the last element to the first.  Dtypes f32,
** f64, f16, bf16 (accumulating in f32) and i64 (the front ends cast other
** integers, as torch: cumsum and cumprod accumulate them (and bool) in i64;
** cummax/cummin cast their values back).  cumsum of f16/bf16 keeps the dtype
** and accumulates in f32, rounding each output once: the values of today's
** f32 sum cast back, without the two casts.
**
** Order of summation: sequential along the axis, y_k = y_{k-1} + x_k from
** the identity +0 (so a -0 row gives +0, as torch's CPU cumsum): always on
** the CPU, and on the GPU for rows of up to 64 elements or many strided
** columns (scan_cols); other GPU rows are summed in tiles of 256 by a
** block-wide tree scan plus a running carry, which rounds differently from
** torch's sequential sum: f32 results agree to a few ulps of the running
** magnitude (the tests' tolerance), integers exactly.
**
** Gradients (torch's formulas; backward runs with grad mode off, so each is
** first order), for the forward direction r (the reverse direction mirrors):
**   cumsum       dx = the reverse cumsum of g.
**   cumprod      y_k = prod_{j<=k} x_j.  Let z1, z2 be the first and second
**                zero of the row.  dx_k = (sum_{m>=k, m<z1} g_m y_m) / x_k for
**                k < z1 (no division by zero: x_k != 0 there);
**                dx_z1 = sum_{m>=z1} g_m y'_m, y' = the cumprod of x with its
**                first zero replaced by 1 (so y'_m = 0 from z2 on);
**                dx_k = 0 for k > z1.  Exact through zeros, O(n).
**   logcumsumexp dx = exp(revscan_lse(log g+ - y) + x) - exp(revscan_lse(log g- - y) + x)
**                with log g± = log|g| where g is >0 / <0, else the dtype's lowest
**                (torch's logcumsumexp_backward).
**   cummax/min   values = x at the indices: dx = scatter_add of g at the indices.
*/
#include "ixinternal.h"
#include "scanmath.h"
#include <float.h>
#include <pthread.h>

static int op_scan = -1;

/* ---- the CPU kernel ---------------------------------------------------------------
** Each task walks the axis of one outer index over a block of up to 256
** inner columns, carrying their running values on the stack (the inner
** loop is contiguous); one column (inner == 1) keeps it in a register. */
enum { SC_COLS = 256 };

#define SC_LSE_f nt_sc_lse_f
#define SC_LSE_d nt_sc_lse_d
#define SC_LSE_i(a, b) (a)                 /* never reached: logcumsumexp is float only */
#define SC_TAKE_f nt_sc_take_f
#define SC_TAKE_d nt_sc_take_d
#define SC_TAKE_i nt_sc_take_i

/* NAME: storage type S, accumulation type A, LD/ST convert, ISF: A is floating, SFX: f/d/i */
#define SCAN_CPU(NAME, S, A, LD, ST, SFX, LOWEST, HIGHEST)                                         \
  static int scan_##NAME(const S *x, S *y, int64_t *ix, int64_t outer, int64_t n, int64_t inner,   \
                         int kind, int rev) {                                                      \
    int64_t nb = (inner + SC_COLS - 1) / SC_COLS, tasks = outer * nb;                              \
    int stop = 0;                                                                                  \
    _Pragma("omp parallel for if (outer * n * inner > NT_OMP_THRESHOLD)")                          \
    for (int64_t t = 0; t < tasks; t++) {                                                          \
      int stopped_;                                                                                \
      _Pragma("omp atomic read")                                                                   \
      stopped_ = stop;                                                                             \
      if (stopped_) continue;                                                                      \
      if (NT_INTERRUPTED()) {                                                                      \
        _Pragma("omp atomic write")                                                                \
        stop = 1;                                                                                  \
        continue;                                                                                  \
      }                                                                                            \
      int64_t o = t / nb, j0 = (t % nb) * SC_COLS, w = inner - j0 < SC_COLS ? inner - j0 : SC_COLS; \
      A acc[SC_COLS];                                                                              \
      int64_t at[SC_COLS];                                                                         \
      for (int64_t j = 0; j < w; j++) {                                                            \
        at[j] = -1;                                                                                \
        acc[j] = kind == NT_SCAN_PROD ? (A)1 : kind == NT_SCAN_SUM ? (A)0                          \
               : kind == NT_SCAN_MIN ? HIGHEST : LOWEST;                                           \
      }                                                                                            \
      const S *xo = x + o * n * inner + j0;                                                        \
      S *yo = y + o * n * inner + j0;                                                              \
      int64_t *io = ix ? ix + o * n * inner + j0 : NULL;                                           \
      if (inner == 1) {   /* one column: the running value in a register, one loop per kind */     \
        A a0 = acc[0];                                                                             \
        int64_t at0 = -1, d = rev ? -1 : 1, e0 = rev ? n - 1 : 0;                                  \
        switch (kind) {                                                                            \
        case NT_SCAN_SUM:  for (int64_t s = 0, e = e0; s < n; s++, e += d) yo[e] = ST(a0 = a0 + LD(xo[e])); break; \
        case NT_SCAN_PROD: for (int64_t s = 0, e = e0; s < n; s++, e += d) yo[e] = ST(a0 = a0 * LD(xo[e])); break; \
        case NT_SCAN_LSE:  for (int64_t s = 0, e = e0; s < n; s++, e += d) yo[e] = ST(a0 = SC_LSE_##SFX(a0, LD(xo[e]))); break; \
        default:                                                                                   \
          for (int64_t s = 0, e = e0; s < n; s++, e += d) {                                        \
            A v = LD(xo[e]);                                                                       \
            if (SC_TAKE_##SFX(a0, v, kind == NT_SCAN_MAX)) { a0 = v; at0 = e; }                    \
            yo[e] = ST(a0);                                                                        \
            io[e] = at0;                                                                           \
          }                                                                                        \
        }                                                                                          \
        continue;                                                                                  \
      }                                                                                            \
      for (int64_t s = 0; s < n; s++) {                                                            \
        int64_t i = rev ? n - 1 - s : s, r = i * inner;                                            \
        switch (kind) {                                                                            \
        case NT_SCAN_SUM:  for (int64_t j = 0; j < w; j++) yo[r + j] = ST(acc[j] = acc[j] + LD(xo[r + j])); break; \
        case NT_SCAN_PROD: for (int64_t j = 0; j < w; j++) yo[r + j] = ST(acc[j] = acc[j] * LD(xo[r + j])); break; \
        case NT_SCAN_LSE:  for (int64_t j = 0; j < w; j++) yo[r + j] = ST(acc[j] = SC_LSE_##SFX(acc[j], LD(xo[r + j]))); break; \
        default:                                                                                   \
          for (int64_t j = 0; j < w; j++) {                                                        \
            A v = LD(xo[r + j]);                                                                   \
            if (SC_TAKE_##SFX(acc[j], v, kind == NT_SCAN_MAX)) { acc[j] = v; at[j] = i; }          \
            yo[r + j] = ST(acc[j]);                                                                \
            io[r + j] = at[j];                                                                     \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    if (stop) NT_FAIL_INTERRUPTED();                                                               \
    return 0;                                                                                      \
  }
#define SC_ID(v) (v)
SCAN_CPU(f32, float, float, SC_ID, SC_ID, f, -INFINITY, INFINITY)
SCAN_CPU(f64, double, double, SC_ID, SC_ID, d, -INFINITY, INFINITY)
SCAN_CPU(f16, uint16_t, float, nt_ld_f16, nt_st_f16, f, -INFINITY, INFINITY)
SCAN_CPU(bf16, uint16_t, float, nt_ld_bf16, nt_st_bf16, f, -INFINITY, INFINITY)
SCAN_CPU(i64, int64_t, int64_t, SC_ID, SC_ID, i, INT64_MIN, INT64_MAX)

static int k_scan(const nt_KernelArgs *a) {
  const int64_t *q = a->iarg;
  int64_t *ix = a->nin > 1 ? (int64_t *)nt_base(a->in[1]) : NULL;
  void *x = nt_base(a->in[0]), *y = nt_base(a->out);
  int kind = (int)q[3], rev = (int)q[4];
  switch (a->in[0]->dtype) {
  case NT_F32: return scan_f32(x, y, ix, q[0], q[1], q[2], kind, rev);
  case NT_F64: return scan_f64(x, y, ix, q[0], q[1], q[2], kind, rev);
  case NT_F16: return scan_f16(x, y, ix, q[0], q[1], q[2], kind, rev);
  case NT_BF16: return scan_bf16(x, y, ix, q[0], q[1], q[2], kind, rev);
  case NT_I64: return scan_i64(x, y, ix, q[0], q[1], q[2], kind, rev);
  default: NT_FAIL("scan: unsupported dtype %s", nt_dtype_name(a->in[0]->dtype));
  }
}

static void register_once(void) {
  nt_init();
  op_scan = nt_op_register("scan");
  nt_register_kernel(op_scan, NT_CPU, k_scan);
}

/* ---- the raw scan (no autograd) ------------------------------------------------------ */
/* y (and *idx for max/min) = the scan of t along ax; t is borrowed; a new reference */
static nt_Tensor *scan_raw(nt_Tensor *t, int ax, int kind, int rev, nt_Tensor **idx) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_once);
  nt_Tensor *x = nt_contiguous(t);
  nt_Tensor *y = x ? nt_empty(x->shape, x->ndim, x->dtype, x->device) : NULL;
  nt_Tensor *ix = y && idx ? nt_empty(x->shape, x->ndim, NT_I64, x->device) : NULL;
  if (!y || (idx && !ix)) goto fail;
  int64_t outer = 1, inner = 1, n = x->shape[ax];
  for (int d = 0; d < ax; d++) outer *= x->shape[d];
  for (int d = ax + 1; d < x->ndim; d++) inner *= x->shape[d];
  nt_KernelArgs ka = {.op = op_scan, .out = y, .in = {x, ix}, .nin = ix ? 2 : 1,
                      .iarg = {outer, n, inner, kind, rev}, .niarg = 5};
  if (y->numel && nt_dispatch(op_scan, x->device, &ka)) goto fail;
  nt_release(x);
  if (idx) *idx = ix;
  return y;
fail:
  nt_release(x); nt_release(y); nt_release(ix);
  return NULL;
}
/* the same, consuming t (NULL in: NULL out) */
static nt_Tensor *S_scan(nt_Tensor *t, int ax, int kind, int rev) {
  nt_Tensor *r = t ? scan_raw(t, ax, kind, rev, NULL) : NULL;
  nt_release(t);
  return r;
}

/* the axis (0-d: 0), or -1 */
static int scan_axis(const char *op, nt_Tensor *x, int axis) {
  if (x->ndim == 0) return axis == 0 || axis == -1 ? 0 : nt_norm_axis(op, axis, 1);
  return nt_norm_axis(op, axis, x->ndim);
}

/* x as a contiguous tensor of at least one dimension in dtype dt (differentiable) */
static nt_Tensor *scan_input(nt_Tensor *x, nt_DType dt) {
  nt_Tensor *a = x->dtype == dt ? nt_retain(x) : nt_to_dtype(x, dt);
  nt_Tensor *b = a && a->ndim == 0 ? nt_reshape(a, (int64_t[]){ 1 }, 1) : (a ? nt_retain(a) : NULL);
  nt_release(a);
  nt_Tensor *c = b ? nt_contiguous(b) : NULL;
  nt_release(b);
  return c;
}
/* y shaped as the 0-d x when x was 0-d (consumes y) */
static nt_Tensor *scan_output(nt_Tensor *y, const nt_Tensor *x0) {
  if (!y || x0->ndim) return y;
  nt_Tensor *r = nt_reshape(y, NULL, 0);
  nt_release(y);
  return r;
}

/* ---- backward ------------------------------------------------------------------------- */
/* node: in[0] = x (contiguous, the scanned dtype), saved[0] = y or the indices,
** iarg = {axis, reverse} */
static nt_Tensor *grad_as(nt_Tensor *g, nt_Tensor *x) {
  nt_Tensor *a = nt_to_dtype(g, x->dtype), *b = a ? nt_contiguous(a) : NULL;
  nt_release(a);
  return b;
}

static int cumprod_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *y = nd->saved[0];
  int ax = (int)nd->iarg[0], rev = (int)nd->iarg[1];
  nt_Tensor *g = grad_as(gout, x);
  if (!g) return -1;
  nt_Tensor *zero = nt_binary_scalar_ex(NT_OP_EQ, x, 0, NT_SCALAR_FLOAT);
  nt_Tensor *nz = S_scan(zero ? nt_to_dtype(zero, NT_I64) : NULL, ax, NT_SCAN_SUM, rev);   /* zeros so far */
  nt_Tensor *before = nz ? nt_binary_scalar_ex(NT_OP_EQ, nz, 0, NT_SCALAR_FLOAT) : NULL;   /* k < z1 */
  nt_Tensor *first = X_bin(NT_OP_LOGICAL_AND, nt_retain(zero), X_bs(NT_OP_EQ, nt_retain(nz), 1));   /* k == z1 */
  /* k < z1: the suffix sums of g*y over [k, z1), over x_k (1 elsewhere: no division by zero) */
  nt_Tensor *A = X_div(S_scan(X_where(nt_retain(before), nt_mul(g, y), ix_const_like(x, 0)), ax, NT_SCAN_SUM, !rev),
                       X_where(nt_retain(before), nt_retain(x), ix_const_like(x, 1)));
  /* k == z1: the suffix sums of g*y', y' the cumprod with the first zero made 1 */
  nt_Tensor *y1 = S_scan(X_where(nt_retain(first), ix_const_like(x, 1), nt_retain(x)), ax, NT_SCAN_PROD, rev);
  nt_Tensor *B = S_scan(y1 ? X_mul(nt_retain(g), y1) : NULL, ax, NT_SCAN_SUM, !rev);
  gin[0] = X_where(before, A, X_where(first, B, ix_const_like(x, 0)));
  nt_release(zero); nt_release(nz); nt_release(g);
  return gin[0] ? 0 : -1;
}

static double lowest_of(nt_DType dt) {
  switch (dt) {
  case NT_F64: return -DBL_MAX;
  case NT_F16: return -65504.0;
  case NT_BF16: return -3.3895313892515355e38;
  default: return -FLT_MAX;
  }
}

static int logcumsumexp_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *y = nd->saved[0];
  int ax = (int)nd->iarg[0], rev = (int)nd->iarg[1];
  nt_Tensor *g = grad_as(gout, x);
  if (!g) return -1;
  nt_Tensor *lg = X_un(NT_OP_LOG, nt_abs(g)), *part[2] = { NULL, NULL };
  for (int s = 0; s < 2 && lg; s++) {   /* the positive, then the negative part of g */
    nt_Tensor *sel = nt_binary_scalar_ex(s ? NT_OP_LT : NT_OP_GT, g, 0, NT_SCALAR_FLOAT);
    nt_Tensor *lp = X_where(sel, nt_retain(lg), ix_const_like(x, lowest_of(x->dtype)));
    part[s] = X_un(NT_OP_EXP, X_add(S_scan(lp ? X_sub(lp, nt_retain(y)) : NULL, ax, NT_SCAN_LSE, !rev), nt_retain(x)));
  }
  gin[0] = X_sub(part[0], part[1]);
  nt_release(lg); nt_release(g);
  return gin[0] ? 0 : -1;
}

static int cumext_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *idx = nd->saved[0];
  nt_Tensor *g = grad_as(gout, x), *z = g ? nt_zeros(x->shape, x->ndim, x->dtype, x->device) : NULL;
  gin[0] = z ? nt_scatter_add(z, (int)nd->iarg[0], idx, g) : NULL;
  nt_release(g); nt_release(z);
  return gin[0] ? 0 : -1;
}

/* records the node of y = scan(x) when needed; consumes y, NULL on failure */
static nt_Tensor *scan_finish(nt_Tensor *y, nt_Tensor *x, const char *name, nt_BackwardFn fn, nt_Tensor *save, int ax, int rev) {
  if (!y || !nt_needs_grad(1, &x)) return y;
  nt_Node *nd = nt_record(y, name, fn, 1, &x);
  if (!nd || nt_node_save(nd, save) < 0) { nt_release(y); return NULL; }
  nd->iarg[0] = ax; nd->iarg[1] = rev; nd->niarg = 2;
  return y;
}

static int cumsum_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  gin[0] = S_scan(grad_as(gout, nd->in[0]), (int)nd->iarg[0], NT_SCAN_SUM, !(int)nd->iarg[1]);
  return gin[0] ? 0 : -1;
}

/* ---- the ops ----------------------------------------------------------------------------- */
nt_Tensor *nt_cumsum(nt_Tensor *x0, int axis) {
  NT_AUTOCAST(NT_AUTOCAST_F32, nt_cumsum(ac_[0], axis), x0);
  int ax = scan_axis("cumsum", x0, axis);
  if (ax < 0) return NULL;
  /* torch: integer and bool inputs accumulate in i64; floats keep their dtype */
  nt_Tensor *x = scan_input(x0, nt_dtype_is_float(x0->dtype) ? x0->dtype : NT_I64);
  nt_Tensor *y = x ? scan_raw(x, ax, NT_SCAN_SUM, 0, NULL) : NULL;
  if (y && nt_needs_grad(1, &x)) {
    nt_Node *nd = nt_record(y, "CumsumBackward", cumsum_backward, 1, &x);
    if (!nd) { nt_release(y); y = NULL; }
    else { nd->iarg[0] = ax; nd->iarg[1] = 0; nd->niarg = 2; }
  }
  nt_release(x);
  return scan_output(y, x0);
}

nt_Tensor *nt_cumprod(nt_Tensor *x0, int axis) {
  int ax = scan_axis("cumprod", x0, axis);
  if (ax < 0) return NULL;
  /* torch: integer and bool inputs accumulate in i64 */
  nt_Tensor *x = scan_input(x0, nt_dtype_is_float(x0->dtype) ? x0->dtype : NT_I64);
  nt_Tensor *y = x ? scan_raw(x, ax, NT_SCAN_PROD, 0, NULL) : NULL;
  y = scan_finish(y, x, "CumprodBackward", cumprod_backward, y, ax, 0);
  nt_release(x);
  return scan_output(y, x0);
}

nt_Tensor *nt_logcumsumexp(nt_Tensor *x0, int axis) {
  int ax = scan_axis("logcumsumexp", x0, axis);
  if (ax < 0) return NULL;
  if (!nt_dtype_is_float(x0->dtype)) NT_FAIL_NULL("logcumsumexp: the input must be a floating tensor, got %s", nt_dtype_name(x0->dtype));
  nt_Tensor *x = scan_input(x0, x0->dtype);
  nt_Tensor *y = x ? scan_raw(x, ax, NT_SCAN_LSE, 0, NULL) : NULL;
  y = scan_finish(y, x, "LogcumsumexpBackward", logcumsumexp_backward, y, ax, 0);
  nt_release(x);
  return scan_output(y, x0);
}

static int cumext(const char *op, nt_Tensor *x0, int axis, bool is_max, nt_Tensor **values, nt_Tensor **indices) {
  *values = *indices = NULL;
  int ax = scan_axis(op, x0, axis);
  if (ax < 0) return -1;
  if (x0->dtype == NT_BOOL) NT_FAIL("%s: bool tensors are not supported", op);
  nt_Tensor *x = scan_input(x0, nt_dtype_is_float(x0->dtype) ? x0->dtype : NT_I64), *idx = NULL;
  nt_Tensor *v = x ? scan_raw(x, ax, is_max ? NT_SCAN_MAX : NT_SCAN_MIN, 0, &idx) : NULL;
  v = v ? scan_finish(v, x, is_max ? "CummaxBackward" : "CumminBackward", cumext_backward, idx, ax, 0) : NULL;
  nt_release(x);
  if (v && v->dtype != x0->dtype) v = X_dtype(v, x0->dtype);   /* integers: exact */
  v = scan_output(v, x0);
  idx = scan_output(idx, x0);
  if (!v || !idx) { nt_release(v); nt_release(idx); return -1; }
  *values = v; *indices = idx;
  return 0;
}

int nt_cummax(nt_Tensor *x, int axis, nt_Tensor **values, nt_Tensor **indices) { return cumext("cummax", x, axis, true, values, indices); }
int nt_cummin(nt_Tensor *x, int axis, nt_Tensor **values, nt_Tensor **indices) { return cumext("cummin", x, axis, false, values, indices); }
