/*
** nn.h — neural-network ops over nt_Tensor (PyTorch names and semantics).
**
** Same conventions as tensor.h: tensor arguments are borrowed, results are new
** references, errors return NULL (-1) with nt_error_msg() set, negative axes
** count from the end, and every differentiable op records an autograd node.
** Float ops compute in f32/f64; f16/bf16 inputs are computed in f32 and the
** result cast back.  Integer index tensors may be i32 or i64 (u8 too).
*/
#ifndef NT_NN_H
#define NT_NN_H

#include "tensor/tensor.h"

/* ---- activations & losses ------------------------------------------------- */
nt_Tensor *nt_softmax(nt_Tensor *x, int axis);
nt_Tensor *nt_log_softmax(nt_Tensor *x, int axis);
/* logits [N,C] or [N,C,d1,...]; targets int [N] or [N,d1,...].  Mean over the
** targets != ignore_index (NaN if none).  label_smoothing in [0,1].  Pass
** ignore_index = -100 for PyTorch's default. */
nt_Tensor *nt_cross_entropy(nt_Tensor *logits, nt_Tensor *targets, int64_t ignore_index, double label_smoothing);
nt_Tensor *nt_mse_loss(nt_Tensor *a, nt_Tensor *b);            /* mean((a-b)^2), broadcasting */

/* ---- layers ------------------------------------------------------------------ */
/* torch.nn.functional.linear: x [..., K], weight [N, K], bias [N] or NULL ->
** [..., N] = x @ weight^T + bias.  One op (linear.c): on the CPU one GEMM
** into the bias-filled output, backward one GEMM per input and a column sum
** for the bias; elsewhere (and for other dtypes) matmul + add.  Autocast
** runs it in the low dtype, bias included (like torch's addmm). */
nt_Tensor *nt_linear(nt_Tensor *x, nt_Tensor *weight, nt_Tensor *bias);

/* nt_gelu (tensor.h) with a one-pass backward for CPU f32/f64 (gelu.c; the
** builtin gelu uses it); other devices and dtypes call nt_gelu. */
nt_Tensor *nt_gelu_fused(nt_Tensor *x, bool tanh_approx);

/* ---- normalisation & regularisation --------------------------------------- */
/* Normalises over the last axis (size D); weight/bias [D] or NULL. */
nt_Tensor *nt_layer_norm(nt_Tensor *x, nt_Tensor *weight, nt_Tensor *bias, double eps);
/* The fused residual add + layer norm: *sum = x + r (same shape) and
** *normed = layer_norm(*sum, weight, bias, eps), both in the sum's dtype
** (bf16 in, bf16 out; r may be f16/bf16 next to an f32 x); statistics in f32
** (f64 for f64).  One kernel each way; backward adds the residual gradient
** in the same kernel and fuses dweight/dbias.  0, or -1 with the error set. */
int nt_add_layer_norm(nt_Tensor *x, nt_Tensor *r, nt_Tensor *weight, nt_Tensor *bias, double eps, nt_Tensor **sum,
                      nt_Tensor **normed);
/* The same with the normalised output written in dtype ydt (-1: as above),
** statistics still f32: under autocast the block passes the low dtype, so
** the bf16 linear after it reads y with no cast (and its gradient comes
** back bf16, read as stored by the backward kernel). */
int nt_add_layer_norm_to(nt_Tensor *x, nt_Tensor *r, nt_Tensor *weight, nt_Tensor *bias, double eps, int ydt,
                         nt_Tensor **sum, nt_Tensor **normed);
nt_Tensor *nt_layer_norm_to(nt_Tensor *x, nt_Tensor *weight, nt_Tensor *bias, double eps, int ydt);
/* Zeroes each element with probability p and scales the rest by 1/(1-p)
** (Philox bernoulli from the core's global RNG).  !training or p == 0: x. */
nt_Tensor *nt_dropout(nt_Tensor *x, double p, bool training);

/* ---- embeddings & indexing -------------------------------------------------- */
nt_Tensor *nt_embedding(nt_Tensor *weight, nt_Tensor *idx);     /* [V,D], idx any shape -> idx.shape+[D] */
nt_Tensor *nt_one_hot(nt_Tensor *idx, int64_t num_classes);     /* -> i64 idx.shape+[C]; -1 = max+1 */
/* NumPy take along one axis: out = x.shape[:axis] + idx.shape + x.shape[axis+1:].
** Negative indices wrap; out of range is an error. */
nt_Tensor *nt_take(nt_Tensor *x, nt_Tensor *idx, int axis);
nt_Tensor *nt_index_select(nt_Tensor *x, int axis, nt_Tensor *idx);   /* idx 1-D */
nt_Tensor *nt_index_tensor(nt_Tensor *x, nt_Tensor *idx);       /* x[idx] (int idx along axis 0, or bool mask) */
/* torch.gather / scatter_add: idx has x's ndim, idx.shape[d] <= x.shape[d] for d != axis. */
nt_Tensor *nt_gather(nt_Tensor *x, int axis, nt_Tensor *idx);
nt_Tensor *nt_scatter_add(nt_Tensor *x, int axis, nt_Tensor *idx, nt_Tensor *src);
/* PyTorch advanced indexing (index.c): idx[0..n) are the basic entries (as
** for nt_index) and the nt tensors t[j] stand just before idx[tpos[j]]
** (tpos ascending; tpos[j] = n: after the last).  The basic entries apply
** first; then each integer tensor indexes one axis of that view, each bool
** mask as many axes as it has (which it must match; its true entries'
** coordinates); they broadcast together to B and their axes are replaced by
** B, in place when adjacent, else in front.  Negative indices wrap; out of
** range is an error naming the indexed tensor's axis, its size and the index.
** nt_index_put_adv writes base[... t ...] = v (accumulate: += v; repeats add
** up) in place, v broadcasting to the indexed region and cast to base's
** dtype; where a plain write repeats a position the last value wins.
** Recorded under autograd as IndexPutBackward (like nt_index_put); 0 / -1. */
nt_Tensor *nt_index_adv(nt_Tensor *x, const nt_Index *idx, int n, int nt, const int *tpos, nt_Tensor *const *t);
int        nt_index_put_adv(nt_Tensor *base, const nt_Index *idx, int n, int nt, const int *tpos, nt_Tensor *const *t,
                            nt_Tensor *v, bool accumulate);
/* x[mask] -> 1-D, mask bool broadcastable to x. */
nt_Tensor *nt_masked_select(nt_Tensor *x, nt_Tensor *mask);

/* ---- convolution & pooling (NCHW) ------------------------------------------- */
nt_Tensor *nt_conv2d(nt_Tensor *x, nt_Tensor *w, nt_Tensor *bias, int stride_h, int stride_w, int pad_h, int pad_w);
nt_Tensor *nt_max_pool2d(nt_Tensor *x, int kh, int kw, int sh, int sw, int ph, int pw);
nt_Tensor *nt_avg_pool2d(nt_Tensor *x, int kh, int kw, int sh, int sw, int ph, int pw);  /* count_include_pad */
/* torch.nn.functional.conv1d/conv2d and conv_transpose1d/2d (conv.c): x [N, C, L]
** or [N, C, H, W] picks the dimension; per spatial axis i ([0] only in 1-D):
** stride, padding, dilation, output_padding (transposed only, smaller than
** stride or dilation).  same: torch's padding='same' (stride 1; an odd total
** padding puts the extra one at the end).  Weights: conv [O, C/groups, k...],
** transposed [C, O/groups, k...]; bias [O] or NULL.  1-D runs as 2-D with
** H = 1; a transposed convolution runs the convolution's backward kernels
** (its forward is conv2d_backward's dx, its backward conv2d and dW). */
typedef struct nt_ConvArgs { int64_t stride[2], padding[2], dilation[2], output_padding[2], groups; bool same; } nt_ConvArgs;
nt_Tensor *nt_conv(nt_Tensor *x, nt_Tensor *w, nt_Tensor *bias, const nt_ConvArgs *a);
nt_Tensor *nt_conv_transpose(nt_Tensor *x, nt_Tensor *w, nt_Tensor *bias, const nt_ConvArgs *a);

/* ---- sorting & scans ---------------------------------------------------------- */
/* values and i64 indices (new references in *values / *indices; either may be
** NULL if not wanted).  Stable; NaN sorts as the largest value. 0 / -1. */
int        nt_sort(nt_Tensor *x, int axis, bool descending, nt_Tensor **values, nt_Tensor **indices);
nt_Tensor *nt_argsort(nt_Tensor *x, int axis, bool descending);
int        nt_topk(nt_Tensor *x, int64_t k, int axis, bool largest, nt_Tensor **values, nt_Tensor **indices);
nt_Tensor *nt_cumsum(nt_Tensor *x, int axis);

/* ---- attention ------------------------------------------------------------------ */
/* torch.nn.functional.scaled_dot_product_attention (no mask, no dropout):
** q [..., T, d], k [..., S, d], v [..., S, dv] (batch dims broadcast, same
** floating dtype) -> [..., T, dv] = softmax(scale q k^T (+ causal mask)) v.
** scale NAN = 1/sqrt(d); causal: query i sees keys j <= i (top-left aligned).
** One fused op: saves the row logsumexp, not the T x S matrix (attention.c). */
nt_Tensor *nt_scaled_dot_product_attention(nt_Tensor *q, nt_Tensor *k, nt_Tensor *v, bool causal, double scale);
/* the same with torch's attn_mask (bool: true = attend; float: added to the
** scores; broadcast to [..., T, S]; NULL for none; not with causal) and
** dropout_p on the probabilities */
nt_Tensor *nt_sdpa(nt_Tensor *q, nt_Tensor *k, nt_Tensor *v, nt_Tensor *mask, bool causal, double scale, double dropout);
/* Multi-head attention over a packed qkv [B, T, 3C] (q, k, v = its column blocks
** [0, C), [C, 2C), [2C, 3C), each H heads of hd = C / H columns) -> [B, T, C], the
** heads side by side: scaled_dot_product_attention of the heads, without copies:
** the kernels read the heads in place, write the output as [B, T, C] and the
** gradient as ONE packed [B, T, 3C] (attention.c).  scale NAN = 1/sqrt(hd). */
nt_Tensor *nt_attention_qkv(nt_Tensor *qkv, int64_t heads, bool causal, double scale);

/* Registers the nn kernels (called lazily by every op; idempotent, thread-safe). */
void nt_nn_init(void);

#endif
