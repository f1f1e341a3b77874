/*
** linear.c — linear(x, w, b) = x @ w^T + b as one op (torch.nn.functional.linear).
**
** Shapes: x [..., K] seen as X [M, K] (M = product of the leading axes),
** w [N, K] (PyTorch's [out, in] layout, any strides), b [N] or none,
** y [..., N] seen as Y [M, N] row-major.
**
** CPU forward (f32/f64): every row of Y is set to b (or 0), then ONE GEMM
** Y = X W^T + 1·Y (beta = 1, W^T as the BLAS transpose flag, no copy).  A
** [B, T, K] input is one [B·T, K] GEMM, not B small ones, and the bias costs
** no extra pass over Y.
** CUDA forward and backward: cuda/linear.cu (cuBLASLt with the bias epilogue
** forward, the dX and dW GEMMs with the bias gradient as the dW GEMM's BGRADB
** epilogue backward; f32, f64, bf16, f16).
** Backward (G = dL/dY as [M, N]):
**   dX = G W            [M, N] x [N, K]
**   dW = G^T X          [N, M] x [M, K]   (the sum over all M rows is inside the GEMM)
**   db = sum_rows G     [N]
** through the device's "linear_backward" kernel (tensor/nn/linear.h), else
** written with public ops (matmul, transpose, sum), so it runs on any device.
**
** Other dtypes or mixed input dtypes: matmul(x, w^T) + b composed from the
** existing ops (b cast to the product's dtype, as stdlib nn.linear did).
** Autocast: x is cast like any autocast input, w and b become their low
** shadows (tensor/tshadow.h: a parameter's copy is cached while its version
** is unchanged, so a step casts no weight), the op runs in the low dtype like
** torch's addmm, and the gradients of w and b come out in their own dtype.
*/
#include "nninternal.h"
#include "linear.h"
#include "tensor/textend.h"
#include "tensor/tshadow.h"

/* out [M, N] (contiguous, = the output); in = {X [M, K], w [N, K], b [N] | NULL} */
static int k_linear(const nt_KernelArgs *a) {
  nt_Tensor *y = a->out, *x = a->in[0], *w = a->in[1], *b = a->in[2];
  int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
  size_t es = nt_dtype_size(y->dtype);
  char *py = nt_base(y);
  if (b) {   /* b is contiguous [N] (front end) */
    const char *pb = nt_base(b);
    for (int64_t m = 0; m < M; m++) memcpy(py + m * N * (int64_t)es, pb, (size_t)N * es);
  }
  /* B = W^T: B[k][n] = w[n][k] */
  return nt_cpu_gemm(y->dtype, nt_base(x), x->strides[0], x->strides[1], nt_base(w), w->strides[1], w->strides[0],
                     py, M, N, K, b ? 1.0 : 0.0);
}

static int linear_bwd_op = -1;   /* "linear_backward": tensor/nn/linear.h */

/* whether the device's "linear" kernel takes dtype dt (one dtype for x, w, b) */
static bool kernel_ok(nt_Device dev, nt_DType dt) {
  if (!nt_kernel_table[nn_ops.linear][dev]) return false;
  if (dev == NT_CPU) return dt == NT_F32 || dt == NT_F64;
  return dt == NT_F32 || dt == NT_F64 || dt == NT_BF16 || dt == NT_F16;   /* cuda/linear.cu */
}

/* db, dw and dx through the device's "linear_backward" kernel (tensor/nn/linear.h);
** 1 when there is none for these dtypes (the caller composes), 0 done, -1 error */
static int backward_kernel(nt_Node *nd, nt_Tensor *g2, nt_Tensor *x, nt_Tensor *w, nt_Tensor **gin) {
  nt_Tensor *wm = nd->in[1], *b = nd->nin > 2 ? nd->in[2] : NULL;
  nt_DType dt = g2->dtype;
  nt_Device dev = g2->device;
  if (dev == NT_CPU || !nt_kernel_table[linear_bwd_op][dev] || x->dtype != dt || w->dtype != dt || !kernel_ok(dev, dt)) return 1;
  int64_t K = w->shape[1], N = w->shape[0], M = g2->shape[0];
  bool ndx = nt_node_needs(nd, 0), ndw = nt_node_needs(nd, 1), ndb = b && nt_node_needs(nd, 2);
  /* dW (and db with it) straight into the master's f32 when the inputs are 16-bit */
  nt_DType wt = wm->dtype == NT_F32 && (dt == NT_BF16 || dt == NT_F16) ? NT_F32 : dt;
  nt_DType bt = ndw ? wt : (b && b->dtype == NT_F32 && (dt == NT_BF16 || dt == NT_F16) ? NT_F32 : dt);
  nt_LinearGrads gr = { .g = nt_contiguous(g2), .x = NULL, .w = nt_contiguous(w) };
  nt_Tensor *xc = ndw ? nt_contiguous(x) : NULL;   /* X is read only for dW */
  if (xc) gr.x = nt_reshape(xc, (int64_t[]){M, K}, 2);
  if (ndx) gr.dx = nt_empty((int64_t[]){M, K}, 2, dt, dev);
  if (ndw) gr.dw = nt_empty((int64_t[]){N, K}, 2, wt, dev);
  if (ndb) gr.db = nt_empty((int64_t[]){N}, 1, bt, dev);
  int rc = gr.g && gr.w && (!ndw || gr.x) && (!ndx || gr.dx) && (!ndw || gr.dw) && (!ndb || gr.db) ? 0 : -1;
  /* its tensors travel in `extra`: the dispatch cannot check them or record the writes (textend.h) */
  nt_Tensor *ins[3] = {gr.g, gr.x, gr.w}, *outs[3] = {gr.dx, gr.dw, gr.db};
  for (int i = 0; i < 3 && !rc; i++) rc = ins[i] ? nt_dev_check(ins[i], "linear backward") : 0;
  nt_KernelArgs ka = {.op = linear_bwd_op, .extra = &gr};
  if (!rc) rc = nt_dispatch(ka.op, dev, &ka);
  for (int i = 0; i < 3 && !rc; i++) if (outs[i]) nt_bump_version(outs[i]);
  if (!rc && gr.dx) {                               /* dX in x's shape */
    nt_Tensor *d = nt_reshape(gr.dx, x->shape, x->ndim);
    nt_release(gr.dx);
    if (!(gr.dx = d)) rc = -1;
  }
  nt_release(gr.g); nt_release(gr.w); nt_release(gr.x); nt_release(xc);
  if (rc) { nt_release(gr.dx); nt_release(gr.dw); nt_release(gr.db); return -1; }
  gin[0] = gr.dx; gin[1] = gr.dw;
  if (b) gin[2] = gr.db;
  return 0;
}

/* node: in = {x, w, b|NULL} (x as the op saw it: under autocast its low cast;
** w and b the caller's, e.g. f32 masters), saved[0] = the low copy of w the
** forward multiplied by, when it differs from w (autocast's shadow) */
static int linear_backward(nt_Node *nd, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *w = nd->nsaved ? nd->saved[0] : nd->in[1];
  int64_t K = w->shape[1], N = w->shape[0], M = nt_shape_numel(x->shape, x->ndim - 1);
  nt_Tensor *g2 = nt_reshape(g, (int64_t[]){M, N}, 2), *x2 = NULL, *t = NULL;
  if (!g2) return -1;
  int rc = backward_kernel(nd, g2, x, w, gin);
  if (rc <= 0) { nt_release(g2); return rc; }
  rc = -1;
  if (nt_node_needs(nd, 0)) {                       /* dX = G W */
    nt_Tensor *dx = nt_matmul(g2, w);
    gin[0] = dx ? nt_reshape(dx, x->shape, x->ndim) : NULL;
    nt_release(dx);
    if (!gin[0]) goto out;
  }
  if (nt_node_needs(nd, 1)) {                       /* dW = G^T X (the engine casts to w's dtype) */
    if (!(x2 = nt_reshape(x, (int64_t[]){M, K}, 2)) || !(t = nt_transpose(g2, 0, 1))) goto out;
    if (!(gin[1] = nt_matmul(t, x2))) goto out;
  }
  if (nd->nin > 2 && nt_node_needs(nd, 2)) {        /* db = column sums of G */
    if (!(gin[2] = nt_sum(g2, (int[]){0}, 1, false))) goto out;
  }
  rc = 0;
out:
  nt_release(g2); nt_release(x2); nt_release(t);
  return rc;
}

/* matmul(x, w^T) + b from public ops (autograd through them) */
static nt_Tensor *linear_composed(nt_Tensor *x, nt_Tensor *w, nt_Tensor *b) {
  nt_Tensor *wt = nt_transpose(w, 0, 1), *y = wt ? nt_matmul(x, wt) : NULL;
  nt_release(wt);
  if (!y || !b) return y;
  nt_Tensor *bc = nt_to_dtype(b, y->dtype), *r = bc ? nt_add(y, bc) : NULL;
  nt_release(bc); nt_release(y);
  return r;
}

/* Y without autograd: the device kernel when it takes dtype dt, else the composed ops */
static nt_Tensor *forward(nt_Tensor *x, nt_Tensor *w, nt_Tensor *b) {
  int64_t K = x->shape[x->ndim - 1], N = w->shape[0], M = nt_shape_numel(x->shape, x->ndim - 1);
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *y = NULL;
  if (!kernel_ok(x->device, x->dtype)) {
    y = linear_composed(x, w, b);
    nt_set_grad_enabled(prev);
    return y;
  }
  nt_Tensor *xc = nt_contiguous(x), *x2 = xc ? nt_reshape(xc, (int64_t[]){M, K}, 2) : NULL;
  nt_Tensor *bc = b ? nt_contiguous(b) : NULL;
  /* the CUDA kernel reads w as contiguous [N, K] (a parameter already is) */
  nt_Tensor *wc = x->device == NT_CPU ? nt_retain(w) : nt_contiguous(w);
  int64_t ys[NT_MAXDIM];
  memcpy(ys, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  ys[x->ndim - 1] = N;
  if (x2 && wc && (!b || bc) && (y = nt_empty(ys, x->ndim, x->dtype, x->device))) {
    nt_KernelArgs ka = {.op = nn_ops.linear, .out = y, .in = {x2, wc, bc}, .nin = 3};
    if (nt_dispatch(ka.op, x->device, &ka)) { nt_release(y); y = NULL; }
  }
  nt_set_grad_enabled(prev);
  nt_release(xc); nt_release(x2); nt_release(bc); nt_release(wc);
  return y;
}

/* Under autocast: x cast as autocast casts (a differentiable op), w and b as
** their shadows (tshadow.h: no cast kernel while fresh, no autograd node); the
** node's inputs are the caller's w and b, so their gradients come out in
** their own dtype (f32 masters: written in f32 by the backward GEMM). */
static nt_Tensor *linear_autocast(nt_Tensor *x, nt_Tensor *w, nt_Tensor *b, nt_DType ac) {
  nt_Tensor *xl = NULL, *wl = NULL, *bl = NULL, *y = NULL;
  if (nt_dtype_is_float(x->dtype) && x->dtype != ac) {
    nt_Tensor *c[1];
    if (nt_autocast_inputs(NT_AUTOCAST_LOW, 1, (nt_Tensor *[]){x}, c) < 0) return NULL;
    xl = c[0];
  } else xl = nt_retain(x);
  wl = nt_dtype_is_float(w->dtype) ? nt_shadow_get(w, ac) : nt_retain(w);
  bl = !b ? NULL : nt_dtype_is_float(b->dtype) ? nt_shadow_get(b, ac) : nt_retain(b);
  if (!xl || !wl || (b && !bl) || xl->dtype != wl->dtype || (bl && bl->dtype != xl->dtype)) {
    if (xl && wl && (!b || bl)) {   /* non-float inputs: the composed ops say what is wrong */
      nt_Tensor *ys = linear_composed(xl, wl, bl);
      nt_release(xl); nt_release(wl); nt_release(bl);
      return ys;
    }
    goto out;
  }
  if ((y = forward(xl, wl, bl))) {
    nt_Node *nd = NULL;
    y = nn_finish(y, "LinearBackward", linear_backward, b ? 3 : 2, (nt_Tensor *[]){xl, w, b}, &nd);
    if (y && nd && wl != w && nt_node_save(nd, wl) < 0) { nt_release(y); y = NULL; }
  }
out:
  nt_release(xl); nt_release(wl); nt_release(bl);
  return y;
}

nt_Tensor *nt_linear(nt_Tensor *x, nt_Tensor *w, nt_Tensor *b) {
  const char *op = "linear";
  nt_nn_init();
  char s1[128], s2[128];
  if (x->ndim < 1) NT_FAIL_NULL("%s: input must have at least 1 dimension", op);
  if (w->ndim != 2) NT_FAIL_NULL("%s: weight must be 2-D [out, in], got %s", op, nt_shape_str(w->shape, w->ndim, s1, sizeof s1));
  int64_t K = x->shape[x->ndim - 1], N = w->shape[0];
  if (w->shape[1] != K)
    NT_FAIL_NULL("%s: input %s and weight %s do not match (%lld != %lld input features)", op,
                 nt_shape_str(x->shape, x->ndim, s1, sizeof s1), nt_shape_str(w->shape, 2, s2, sizeof s2),
                 (long long)K, (long long)w->shape[1]);
  if (b && (b->ndim != 1 || b->shape[0] != N))
    NT_FAIL_NULL("%s: bias must have shape [%lld], got %s", op, (long long)N, nt_shape_str(b->shape, b->ndim, s1, sizeof s1));
  if (nt_check_same_device(op, 3, (nt_Tensor *[]){x, w, b ? b : x})) return NULL;
  int ac = nt_autocast_dtype();
  if (ac >= 0) {
    nt_Tensor *in[3] = {x, w, b};
    for (int i = 0; i < 3; i++)
      if (in[i] && nt_dtype_is_float(in[i]->dtype) && in[i]->dtype != (nt_DType)ac) return linear_autocast(x, w, b, (nt_DType)ac);
  }
  nt_DType dt = x->dtype;
  if (w->dtype != dt || (b && b->dtype != dt) || !kernel_ok(x->device, dt))
    return linear_composed(x, w, b);
  nt_Tensor *y = forward(x, w, b);
  if (!y) return NULL;
  return nn_finish(y, "LinearBackward", linear_backward, b ? 3 : 2, (nt_Tensor *[]){x, w, b}, NULL);
}

void nn_register_linear(void) {
  nn_ops.linear = nt_op_register("linear");
  linear_bwd_op = nt_op_register("linear_backward");   /* CUDA only (cuda/linear.cu); the CPU composes */
  nt_register_kernel(nn_ops.linear, NT_CPU, k_linear);
}
