/*
** activation.c — torch's parametrised activations (leaky_relu, elu, selu,
** celu, softplus, logsigmoid, mish, hardtanh, hardswish, hardsigmoid) as one
** op family, and prelu composed from the core's ops.
**
** Each activation is one pass forward and one pass backward over contiguous
** f32/f64 data (f16/bf16 computed in f32 and cast back), the math shared with
** the CUDA kernel through actmath.h.  The node saves the input x only; its
** backward is dx = g * f'(x).  (The core's unary op table, telem.c, carries no
** per-op parameters except clamp's bounds, so these live here as one fused
** kernel each way instead of as chains of the core's ops.)
**
** Kernel arguments (both devices):
**   "activation"          out y; in = {x}; iarg = {kind}; s = {p0, p1, p2}
**   "activation_backward" out dx; in = {g, x}; iarg, s as above
** x, g, y, dx: contiguous, one dtype (f32 or f64), the same numel.
*/
#include <pthread.h>
#include "nninternal.h"
#include "actmath.h"
#include "layers.h"
#include "tensor/tvecmath.h"

static int op_act = -1, op_act_bwd = -1;

/* one loop per kind, the kind a constant in it (the switch hoisted out of the
** loop: the piecewise-linear kinds vectorise) */
#define ACT_KINDS(LOOP)                                                                        \
  switch (kind) {                                                                              \
    case NT_ACT_LEAKY_RELU: LOOP(NT_ACT_LEAKY_RELU); break;                                    \
    case NT_ACT_ELU: LOOP(NT_ACT_ELU); break;                                                  \
    case NT_ACT_SOFTPLUS: LOOP(NT_ACT_SOFTPLUS); break;                                        \
    case NT_ACT_LOGSIGMOID: LOOP(NT_ACT_LOGSIGMOID); break;                                    \
    case NT_ACT_MISH: LOOP(NT_ACT_MISH); break;                                                \
    case NT_ACT_HARDTANH: LOOP(NT_ACT_HARDTANH); break;                                        \
    case NT_ACT_HARDSWISH: LOOP(NT_ACT_HARDSWISH); break;                                      \
    default: LOOP(NT_ACT_HARDSIGMOID); break;                                                  \
  }
#define ACT_T(T)                                                                               \
  static void act_fwd_##T(int kind, const double *p, const T *x, T *y, int64_t n) {            \
    _Pragma("omp parallel if (n > NT_OMP_THRESHOLD)")                                          \
    {                                                                                          \
      ACT_KINDS(FWD_LOOP)                                                                      \
    }                                                                                          \
  }                                                                                            \
  static void act_bwd_##T(int kind, const double *p, const T *g, const T *x, T *dx, int64_t n) { \
    _Pragma("omp parallel if (n > NT_OMP_THRESHOLD)")                                          \
    { ACT_KINDS(BWD_LOOP) }                                                                    \
  }
#define FWD_LOOP(K) _Pragma("omp for") for (int64_t i = 0; i < n; i++) y[i] = (__typeof__(*y))nt_act_forward(K, (double)x[i], p)
#define BWD_LOOP(K) _Pragma("omp for") for (int64_t i = 0; i < n; i++) dx[i] = (__typeof__(*dx))((double)g[i] * nt_act_grad(K, (double)x[i], p))
ACT_T(float)
ACT_T(double)

/* f32 fast paths, computed in f32 as torch does (the loops above go through
** f64): leaky_relu as a select the compiler vectorises; mish from one SLEEF
** exp per element (tvecmath), with e = exp(x):
**   tanh(softplus(x)) = ((1+e)^2 - 1) / ((1+e)^2 + 1) = e(e+2) / (e(e+2) + 2),
**   sigmoid(x) = e / (1 + e);  x > 20 (torch's softplus threshold): t = 1
** y (forward) or dx (backward) holds e until the second loop overwrites it.
** Answer false for the kinds without one. */
static bool act_f32_fast(bool fwd, int kind, const double *p, const float *g, const float *x, float *out, int64_t n) {
  if (kind == NT_ACT_LEAKY_RELU) {
    float slope = (float)p[0];
    if (fwd) {
      _Pragma("omp parallel for simd if (n > NT_OMP_THRESHOLD)")
      for (int64_t i = 0; i < n; i++) out[i] = x[i] > 0 ? x[i] : x[i] * slope;
    } else {
      _Pragma("omp parallel for simd if (n > NT_OMP_THRESHOLD)")
      for (int64_t i = 0; i < n; i++) out[i] = x[i] > 0 ? g[i] : g[i] * slope;
    }
    return true;
  }
  if (kind != NT_ACT_MISH) return false;
  nt_vm_unary_f32(NT_VM_EXP, x, out, n);
  if (fwd) {
    _Pragma("omp parallel for simd if (n > NT_OMP_THRESHOLD)")
    for (int64_t i = 0; i < n; i++) {
      float e = out[i], q = e * (e + 2);
      out[i] = x[i] > 20 ? x[i] : x[i] * (q / (q + 2));
    }
  } else {
    _Pragma("omp parallel for simd if (n > NT_OMP_THRESHOLD)")
    for (int64_t i = 0; i < n; i++) {
      float e = out[i], q = e * (e + 2), t = q / (q + 2), sg = e / (1 + e);
      out[i] = x[i] > 20 ? g[i] : g[i] * (t + x[i] * sg * (1 - t * t));
    }
  }
  return true;
}

static int k_activation(const nt_KernelArgs *a) {
  int kind = (int)a->iarg[0];
  double p[3] = {a->s[0], a->s[1], a->s[2]};
  int64_t n = a->out->numel;
  for (int64_t at = 0; at < n; at += NT_CHUNK) {   /* chunks: an interrupt is seen between them */
    if (at && NT_INTERRUPTED()) NT_FAIL_INTERRUPTED();
    int64_t m = n - at < NT_CHUNK ? n - at : NT_CHUNK;
    bool fwd = a->op == op_act;
    if (a->out->dtype == NT_F32 &&
        act_f32_fast(fwd, kind, p, fwd ? NULL : (const float *)nt_base(a->in[0]) + at, (const float *)nt_base(a->in[fwd ? 0 : 1]) + at,
                     (float *)nt_base(a->out) + at, m))
      continue;
    if (a->op == op_act) {
      if (a->out->dtype == NT_F32) act_fwd_float(kind, p, (const float *)nt_base(a->in[0]) + at, (float *)nt_base(a->out) + at, m);
      else act_fwd_double(kind, p, (const double *)nt_base(a->in[0]) + at, (double *)nt_base(a->out) + at, m);
    } else {
      if (a->out->dtype == NT_F32)
        act_bwd_float(kind, p, (const float *)nt_base(a->in[0]) + at, (const float *)nt_base(a->in[1]) + at, (float *)nt_base(a->out) + at, m);
      else
        act_bwd_double(kind, p, (const double *)nt_base(a->in[0]) + at, (const double *)nt_base(a->in[1]) + at, (double *)nt_base(a->out) + at, m);
    }
  }
  return 0;
}

static void register_act(void) {
  nt_nn_init();
  op_act = nt_op_register("activation");
  op_act_bwd = nt_op_register("activation_backward");
  nt_register_kernel(op_act, NT_CPU, k_activation);
  nt_register_kernel(op_act_bwd, NT_CPU, k_activation);
}
static void act_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_act);
}

static const char *const act_nodes[NT_ACT_COUNT] = {
  "LeakyReluBackward", "EluBackward", "SoftplusBackward", "LogSigmoidBackward", "MishBackward",
  "HardtanhBackward", "HardswishBackward", "HardsigmoidBackward",
};

/* node: in = {x (contiguous f32/f64)}; iarg[0] = kind; s = params */
static int act_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0];
  nt_Tensor *gc = nt_to_dtype(gout, x->dtype), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  if (!g) return -1;
  nt_Tensor *dx = nt_empty(x->shape, x->ndim, x->dtype, x->device);
  nt_KernelArgs ka = {.op = op_act_bwd, .out = dx, .in = {g, x}, .nin = 2, .iarg = {nd->iarg[0]}, .niarg = 1,
                      .s = {nd->s[0], nd->s[1], nd->s[2]}};
  int rc = dx ? (x->numel ? nt_dispatch(ka.op, x->device, &ka) : 0) : -1;
  nt_release(g);
  if (rc) { nt_release(dx); return -1; }
  gin[0] = dx;
  return 0;
}

nt_Tensor *nt_activation(const char *op, int kind, nt_Tensor *x0, double p0, double p1, double p2) {
  act_init();
  if (kind < 0 || kind >= NT_ACT_COUNT) NT_FAIL_NULL("%s: unknown activation kind %d", op, kind);
  if (!nt_dtype_is_float(x0->dtype)) NT_FAIL_NULL("%s: input must be a floating tensor, got %s", op, nt_dtype_name(x0->dtype));
  nt_Tensor *xf = nn_compute_float(op, x0);
  nt_Tensor *x = xf ? nt_contiguous(xf) : NULL;
  nt_release(xf);
  if (!x) return NULL;
  nt_Tensor *y = nt_empty(x->shape, x->ndim, x->dtype, x->device);
  nt_KernelArgs ka = {.op = op_act, .out = y, .in = {x}, .nin = 1, .iarg = {kind}, .niarg = 1, .s = {p0, p1, p2}};
  if (!y || (x->numel && nt_dispatch(ka.op, x->device, &ka))) { nt_release(x); nt_release(y); return NULL; }
  nt_Node *nd;
  y = nn_finish(y, act_nodes[kind], act_backward, 1, &x, &nd);
  if (y && nd) { nd->iarg[0] = kind; nd->niarg = 1; nd->s[0] = p0; nd->s[1] = p1; nd->s[2] = p2; }
  nt_release(x);
  return nn_cast_back(y, x0->dtype);
}

/* torch.nn.functional.prelu: y = x > 0 ? x : weight[c] x, c the channel
** axis 1 (weight has 1 or x.shape[1] elements).  Composed from the core's ops
** (where, mul; both devices, autograd for x and weight, lazily fused). */
nt_Tensor *nt_prelu(nt_Tensor *x, nt_Tensor *weight) {
  const char *op = "prelu";
  if (!nt_dtype_is_float(x->dtype)) NT_FAIL_NULL("%s: input must be a floating tensor, got %s", op, nt_dtype_name(x->dtype));
  if (!nt_dtype_is_float(weight->dtype)) NT_FAIL_NULL("%s: weight must be a floating tensor, got %s", op, nt_dtype_name(weight->dtype));
  if (weight->device != x->device)
    NT_FAIL_NULL("%s: weight is on %s but input is on %s", op, nt_device_name(weight->device), nt_device_name(x->device));
  if (weight->ndim > 1) NT_FAIL_NULL("%s: weight must be 0-D or 1-D, got %d dimensions", op, weight->ndim);
  int64_t C = x->ndim >= 2 ? x->shape[1] : 1;
  if (weight->numel != 1 && weight->numel != C)
    NT_FAIL_NULL("%s: weight must have 1 element or one per channel (input.shape[1] = %lld), got %lld", op, (long long)C,
                 (long long)weight->numel);
  int64_t shape[NT_MAXDIM];
  int nd = x->ndim >= 2 ? x->ndim - 1 : x->ndim;   /* [C, 1, 1, ...] against [N, C, ...] */
  for (int i = 0; i < nd; i++) shape[i] = 1;
  if (nd) shape[0] = weight->numel;
  nt_Tensor *w = nt_reshape(weight, shape, nd);
  nt_Tensor *wx = w ? nt_mul(w, x) : NULL;
  nt_Tensor *zero = nt_scalar(0.0, x->dtype);
  nt_Tensor *pos = zero ? nt_gt(x, zero) : NULL;
  nt_Tensor *y = pos && wx ? nt_where(pos, x, wx) : NULL;
  nt_release(w); nt_release(wx); nt_release(zero); nt_release(pos);
  if (y && y->dtype != x->dtype) return nn_cast_back(y, x->dtype);
  return y;
}
