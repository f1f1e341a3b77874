/*
** nninternal.h — shared helpers of tensor/nn (not public).
*/
#ifndef NT_NN_INTERNAL_H
#define NT_NN_INTERNAL_H

#include "nn.h"
#include "tensor/tinternal.h"
#include "tensor/tvecmath.h"

/* Op ids of the nn kernels, filled by nt_nn_init. */
typedef struct nn_op_ids {
  int softmax, softmax_bwd, cross_entropy, cross_entropy_bwd;
  int layer_norm, layer_norm_bwd, add_layer_norm, add_layer_norm_bwd;
  int take, take_bwd, gather, scatter_add, masked_select, masked_scatter, one_hot;
  int conv2d, conv2d_bwd, max_pool2d, max_pool2d_bwd, avg_pool2d, avg_pool2d_bwd;
  int sort;
  int sdpa, sdpa_bwd;
  int linear;
  int gelu, gelu_bwd;
} nn_op_ids;
extern nn_op_ids nn_ops;

/* per-file registration, called once by nt_nn_init */
void nn_register_softmax(void);
void nn_register_norm(void);
void nn_register_index(void);
void nn_register_conv(void);
void nn_register_sort(void);
void nn_register_attention(void);
void nn_register_linear(void);
void nn_register_gelu(void);

/* Type-generic math for the f32/f64 kernel templates. */
#define nn_exp(x)  _Generic((x), float: expf, default: exp)(x)
#define nn_log(x)  _Generic((x), float: logf, default: log)(x)
/* sum_i exp(x_i - shift) over a contiguous row, also stored in y unless NULL
** (y may be x): SLEEF's vector exp (tensor/tvecmath.h) */
#define nn_expsum(x, y, n, shift) \
  _Generic((x), const float *: nt_vm()->expsum_f32, float *: nt_vm()->expsum_f32, \
           default: nt_vm()->expsum_f64)((x), (y), (n), (shift))
#define nn_sqrt(x) _Generic((x), float: sqrtf, default: sqrt)(x)

/* CPU GEMM (tensor/tmatmul.c): c (contiguous M x N) = a b + beta c for f32/f64,
** a M x K and b K x N given by element strides (either may be transposed;
** other layouts are packed).  0, or -1 with the error set. */
int nt_cpu_gemm(nt_DType dt, const void *a, int64_t ars, int64_t acs, const void *b, int64_t brs, int64_t bcs,
                void *c, int64_t M, int64_t N, int64_t K, double beta);

/* A contiguous tensor seen as [outer, n, inner] around `axis`. */
typedef struct nn_dims { int64_t outer, n, inner; } nn_dims;
static inline nn_dims nn_split_axis(const int64_t *shape, int ndim, int axis) {
  nn_dims d = {1, ndim ? shape[axis] : 1, 1};
  for (int i = 0; i < axis; i++) d.outer *= shape[i];
  for (int i = axis + 1; i < ndim; i++) d.inner *= shape[i];
  return d;
}

/* Computes f16/bf16 in f32: returns a new reference to x (f32/f64 kept) or
** NULL with "<op>: expected a floating dtype, got i64". */
nt_Tensor *nn_compute_float(const char *op, nt_Tensor *x);
/* Takes ownership of y (may be NULL); casts it to dt when it differs. */
nt_Tensor *nn_cast_back(nt_Tensor *y, nt_DType dt);
/* Contiguous copy of an integer index tensor as i64 (new reference). */
nt_Tensor *nn_index_i64(const char *op, nt_Tensor *idx);
/* out [outer, n, inner] (contiguous, f32/f64, CPU) += src [outer, m, inner] at
** rows ix[0..m) (wrapped, in range): index_add's and take's backward kernel (index.c) */
int nn_index_add_cpu(nt_Tensor *out, nt_Tensor *src, const int64_t *ix, int64_t outer, int64_t n, int64_t m, int64_t inner);
/* Records a node when needed; on failure releases out and returns NULL. */
nt_Tensor *nn_finish(nt_Tensor *out, const char *name, nt_BackwardFn fn, int nin, nt_Tensor *const *in,
                     nt_Node **node_out);
/* Backward of an output that is in[0] gathered along axis iarg[0] by the
** index saved[0] (gather, sort, topk): scatter-adds the gradient back into
** zeros of in[0]'s shape. */
int nn_gather_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin);

/* Shared by the channel normalisations (batchnorm.c, groupnorm.c): the
** per-channel argument check, the [C] parameter in the compute dtype, and
** the backward node that dispatches bwd_op (see batchnorm.c). */
int nn_channel_check(const char *op, const char *what, nt_Tensor *p, int64_t C, nt_Device dev);
nt_Tensor *nn_channel_param(nt_Tensor *p, nt_DType dt, bool *ok);
int nn_channel_norm_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin, int bwd_op);

#endif
