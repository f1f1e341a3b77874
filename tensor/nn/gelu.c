/*
** gelu.c — gelu with a one-pass backward on the CPU (the builtin gelu).
**
**   exact: y = x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2,  phi(x) = exp(-x^2/2) / sqrt(2 pi)
**          dy/dx = Phi(x) + x phi(x)
**   tanh:  u = c (x + a x^3), c = sqrt(2/pi), a = 0.044715,  y = x (1 + tanh u) / 2
**          dy/dx = (1 + tanh u) / 2 + x/2 (1 - tanh^2 u) c (1 + 3 a x^2)
**
** The core's gelu (telem.c) composes its backward from ~11 elementwise ops,
** each a pass over memory and a fresh tensor; here forward and backward are
** one loop each over contiguous f32/f64 data (x saved, nothing else), on
** SLEEF's vector erf/tanh/exp (tensor/tvecmath.h, which has the loops).
** bf16/f16 (an autocast MLP) run the same f32 loops over blocks upcast to f32
** and rounded back once (tensor/tvecmath_half.h): x and dx stay 16-bit in
** memory, the math is f32 in registers, as torch's CPU bf16 GELU.  Other
** devices and dtypes use the core's op unchanged (CUDA has kernels for it).
*/
#include "nninternal.h"
#include "tensor/tvecmath.h"
#include "tensor/tvecmath_half.h"

/* one block of the half forms: ctx -> {fn, backward} */
typedef struct { int fn; bool bwd; } GeluHalf;
static void gelu_half_block(void *ctx, const float *const in[2], float *o, int64_t n) {
  const GeluHalf *h = ctx;
  if (h->bwd) nt_vm()->grad_f32(h->fn, in[0], in[1], o, n);
  else nt_vm()->unary_f32(h->fn, in[0], o, n);
}
static bool half_dtype(nt_DType dt) { return dt == NT_BF16 || dt == NT_F16; }

/* fwd: out y, in[0] x (contiguous, same dtype); bwd: out dx, in = {g, x}; iarg[0] = tanh */
static int k_gelu(const nt_KernelArgs *a) {
  bool bwd = a->op == nn_ops.gelu_bwd, f32 = a->out->dtype == NT_F32;
  int64_t n = a->out->numel;
  int approx = (int)a->iarg[0];
  void *o = nt_base(a->out), *i0 = nt_base(a->in[0]), *i1 = bwd ? nt_base(a->in[1]) : NULL;
  int fn = approx ? NT_VM_GELU_TANH : NT_VM_GELU;
  if (half_dtype(a->out->dtype)) {
    GeluHalf h = { fn, bwd };
    return nt_half_map(a->out->dtype == NT_BF16, i0, i1, o, n, gelu_half_block, &h);
  }
  if (bwd) {
    if (f32) nt_vm_grad_f32(fn, i0, i1, o, n);
    else nt_vm_grad_f64(fn, i0, i1, o, n);
  } else {
    if (f32) nt_vm_unary_f32(fn, i0, o, n);
    else nt_vm_unary_f64(fn, i0, o, n);
  }
  return 0;
}

/* node: in = {x (contiguous f32/f64/bf16/f16)}; iarg[0] = tanh */
static int gelu_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0];
  nt_Tensor *gc = nt_to_dtype(gout, x->dtype), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  if (!g) return -1;
  nt_Tensor *dx = nt_empty(x->shape, x->ndim, x->dtype, x->device);
  nt_KernelArgs ka = {.op = nn_ops.gelu_bwd, .out = dx, .in = {g, x}, .nin = 2, .iarg = {nd->iarg[0]}, .niarg = 1};
  int rc = dx ? nt_dispatch(ka.op, x->device, &ka) : -1;
  nt_release(g);
  if (rc) { nt_release(dx); return -1; }
  gin[0] = dx;
  return 0;
}

nt_Tensor *nt_gelu_fused(nt_Tensor *x0, bool tanh_approx) {
  nt_nn_init();
  if ((x0->dtype != NT_F32 && x0->dtype != NT_F64 && !half_dtype(x0->dtype)) || !nt_kernel_table[nn_ops.gelu][x0->device])
    return nt_gelu(x0, tanh_approx);
  nt_Tensor *x = nt_contiguous(x0);
  if (!x) return NULL;
  nt_Tensor *y = nt_empty(x->shape, x->ndim, x->dtype, x->device);
  nt_KernelArgs ka = {.op = nn_ops.gelu, .out = y, .in = {x}, .nin = 1, .iarg = {tanh_approx}, .niarg = 1};
  if (!y || (x->numel && nt_dispatch(ka.op, x->device, &ka))) { nt_release(x); nt_release(y); return NULL; }
  nt_Node *nd;
  y = nn_finish(y, "GeluBackward", gelu_backward, 1, &x, &nd);
  if (y && nd) { nd->iarg[0] = tanh_approx; nd->niarg = 1; }
  nt_release(x);
  return y;
}

void nn_register_gelu(void) {
  nn_ops.gelu = nt_op_register("gelu_fused");
  nn_ops.gelu_bwd = nt_op_register("gelu_fused_backward");
  nt_register_kernel(nn_ops.gelu, NT_CPU, k_gelu);
  nt_register_kernel(nn_ops.gelu_bwd, NT_CPU, k_gelu);
}
