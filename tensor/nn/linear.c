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
** Backward (G = dL/dY as [M, N]):
**   dX = G W            [M, N] x [N, K]
**   dW = G^T X          [N, M] x [M, K]   (the sum over all M rows is inside the GEMM)
**   db = sum_rows G     [N]
** written with public ops (matmul, transpose, sum), so it runs on any device.
**
** Other devices (CUDA has no kernel for this op), other dtypes, or mixed input
** dtypes: matmul(x, w^T) + b composed from the existing ops (b cast to the
** product's dtype, as stdlib nn.linear did).  Autocast: all inputs go to the
** low dtype (bias included), so the op stays bf16 like torch's addmm.
*/
#include "nninternal.h"

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

/* node: in = {x, w, b|NULL} (the caller's tensors) */
static int linear_backward(nt_Node *nd, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *w = nd->in[1];
  int64_t K = w->shape[1], N = w->shape[0], M = nt_shape_numel(x->shape, x->ndim - 1);
  nt_Tensor *g2 = nt_reshape(g, (int64_t[]){M, N}, 2), *x2 = NULL, *t = NULL;
  if (!g2) return -1;
  int rc = -1;
  if (nt_node_needs(nd, 0)) {                       /* dX = G W */
    nt_Tensor *dx = nt_matmul(g2, w);
    gin[0] = dx ? nt_reshape(dx, x->shape, x->ndim) : NULL;
    nt_release(dx);
    if (!gin[0]) goto out;
  }
  if (nt_node_needs(nd, 1)) {                       /* dW = G^T X */
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

nt_Tensor *nt_linear(nt_Tensor *x, nt_Tensor *w, nt_Tensor *b) {
  const char *op = "linear";
  nt_nn_init();
  char s1[128], s2[128];
  if (x->ndim < 1) NT_FAIL_NULL("%s: input must have at least 1 dimension", op);
  if (w->ndim != 2) NT_FAIL_NULL("%s: weight must be 2-D [out, in], got %s", op, nt_shape_str(w->shape, w->ndim, s1, sizeof s1));
  int64_t K = x->shape[x->ndim - 1], N = w->shape[0], M = nt_shape_numel(x->shape, x->ndim - 1);
  if (w->shape[1] != K)
    NT_FAIL_NULL("%s: input %s and weight %s do not match (%lld != %lld input features)", op,
                 nt_shape_str(x->shape, x->ndim, s1, sizeof s1), nt_shape_str(w->shape, 2, s2, sizeof s2),
                 (long long)K, (long long)w->shape[1]);
  if (b && (b->ndim != 1 || b->shape[0] != N))
    NT_FAIL_NULL("%s: bias must have shape [%lld], got %s", op, (long long)N, nt_shape_str(b->shape, b->ndim, s1, sizeof s1));
  if (nt_check_same_device(op, 3, (nt_Tensor *[]){x, w, b ? b : x})) return NULL;
  NT_AUTOCAST(NT_AUTOCAST_LOW, nt_linear(ac_[0], ac_[1], ac_[2]), x, w, b);
  nt_DType dt = x->dtype;
  if (w->dtype != dt || (b && b->dtype != dt) || (dt != NT_F32 && dt != NT_F64) || !nt_kernel_table[nn_ops.linear][x->device])
    return linear_composed(x, w, b);

  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *xc = nt_contiguous(x), *x2 = xc ? nt_reshape(xc, (int64_t[]){M, K}, 2) : NULL;
  nt_Tensor *bc = b ? nt_contiguous(b) : NULL, *y = NULL;
  int64_t ys[NT_MAXDIM];
  memcpy(ys, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  ys[x->ndim - 1] = N;
  if (x2 && (!b || bc) && (y = nt_empty(ys, x->ndim, dt, x->device))) {
    nt_KernelArgs ka = {.op = nn_ops.linear, .out = y, .in = {x2, w, bc}, .nin = 3};
    if (nt_dispatch(ka.op, x->device, &ka)) { nt_release(y); y = NULL; }
  }
  nt_set_grad_enabled(prev);
  nt_release(xc); nt_release(x2); nt_release(bc);
  if (!y) return NULL;
  return nn_finish(y, "LinearBackward", linear_backward, b ? 3 : 2, (nt_Tensor *[]){x, w, b}, NULL);
}

void nn_register_linear(void) {
  nn_ops.linear = nt_op_register("linear");
  nt_register_kernel(nn_ops.linear, NT_CPU, k_linear);
}
