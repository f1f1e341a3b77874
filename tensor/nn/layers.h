/*
** layers.h — issue 29's layers: the parametrised activations and prelu
** (activation.c) and the losses (loss.c), torch.nn.functional's semantics.
** Conventions as nn.h: borrowed arguments, a new reference or NULL with the
** error set; `op` names the builtin in error messages.
*/
#ifndef NT_LAYERS_H
#define NT_LAYERS_H

#include "tensor/tensor.h"

/* y = f(x) elementwise for kind NT_ACT_* (actmath.h lists the kinds, their
** parameters p0..p2 and their math).  x floating (f16/bf16 computed in f32),
** any layout; one node (dx = g f'(x)), a fused kernel each way on both devices. */
nt_Tensor *nt_activation(const char *op, int kind, nt_Tensor *x, double p0, double p1, double p2);
/* x > 0 ? x : weight[c] x, c = axis 1 of x; weight: 1 or x.shape[1] elements */
nt_Tensor *nt_prelu(nt_Tensor *x, nt_Tensor *weight);

/* reduction of an elementwise loss, torch's strings */
typedef enum { NT_RED_NONE, NT_RED_MEAN, NT_RED_SUM, NT_RED_BATCHMEAN } nt_Reduction;

/* The losses, composed from the core's ops (lazily fused elementwise chains,
** one reduction; both devices; autograd through the composition).  input
** and target broadcast as torch's (same shapes expected); weight (optional)
** broadcasts against the loss. */
nt_Tensor *nt_binary_cross_entropy(nt_Tensor *input, nt_Tensor *target, nt_Tensor *weight, nt_Reduction red);
nt_Tensor *nt_bce_with_logits(nt_Tensor *input, nt_Tensor *target, nt_Tensor *weight, nt_Tensor *pos_weight, nt_Reduction red);
/* input [N, C, d...] (or [C]) log-probabilities, target [N, d...] (or []) class
** indices; weight [C] or NULL; mean divides by the summed weights of the
** targets not equal to ignore_index */
nt_Tensor *nt_nll_loss(nt_Tensor *input, nt_Tensor *target, nt_Tensor *weight, int64_t ignore_index, nt_Reduction red);
nt_Tensor *nt_kl_div(nt_Tensor *input, nt_Tensor *target, nt_Reduction red, bool log_target);
nt_Tensor *nt_smooth_l1_loss(nt_Tensor *input, nt_Tensor *target, nt_Reduction red, double beta);
nt_Tensor *nt_huber_loss(nt_Tensor *input, nt_Tensor *target, nt_Reduction red, double delta);
nt_Tensor *nt_margin_ranking_loss(nt_Tensor *x1, nt_Tensor *x2, nt_Tensor *y, double margin, nt_Reduction red);
/* x1, x2 [N, D] (or [D]), y [N] (or []) of +-1 */
nt_Tensor *nt_cosine_embedding_loss(nt_Tensor *x1, nt_Tensor *x2, nt_Tensor *y, double margin, nt_Reduction red);

/* ctc.c: F.ctc_loss of log_probs [T, N, C] (or [T, C]); targets [N, S] padded
** or 1-D concatenated; input_lengths, target_lengths [N] integer tensors (any
** device: read on the host).  The gradient is the true one (torch's differs
** by exp(log_probs) * grad, which a log_softmax before it cancels). */
nt_Tensor *nt_ctc_loss(nt_Tensor *log_probs, nt_Tensor *targets, nt_Tensor *input_lengths, nt_Tensor *target_lengths, int64_t blank,
                       nt_Reduction red, bool zero_infinity);

/* resample.c: compositions of the core's gathers and matmuls (both devices).
** pad: npad entries (before, after) per axis, the last axis first; mode
** nt_pad_mode("constant" | "reflect" | "replicate" | "circular") (-1: unknown);
** value fills constant padding; negative entries crop. */
nt_Tensor *nt_pad(nt_Tensor *x, const int64_t *pad, int npad, int mode, double value);
int nt_pad_mode(const char *name);
/* x [N, C, L] ("nearest", "linear") or [N, C, H, W] ("nearest", "bilinear");
** size (nsp entries) or scale_factor (nsp entries, the other NULL);
** align_corners -1 (not given), 0 or 1 */
nt_Tensor *nt_interpolate(nt_Tensor *x, const int64_t *size, const double *scale_factor, int nsp, const char *mode, int align_corners);
/* the last nsp (1 or 2) axes of x pooled to out[0..nsp) by averaging torch's adaptive windows */
nt_Tensor *nt_adaptive_avg_pool(nt_Tensor *x, const int64_t *out, int nsp);
/* torch's unfold (im2col) of x [N, C, H, W] -> [N, C*kh*kw, L] and fold, its
** adjoint (col2im, overlaps summed) to [N, C, output_size]; each argument 2 entries */
nt_Tensor *nt_unfold(nt_Tensor *x, const int64_t *kernel_size, const int64_t *dilation, const int64_t *padding, const int64_t *stride);
nt_Tensor *nt_fold(nt_Tensor *x, const int64_t *output_size, const int64_t *kernel_size, const int64_t *dilation, const int64_t *padding,
                   const int64_t *stride);
/* x.index_add(dim, index, source, alpha=alpha): x + alpha * source summed into the rows index names along dim */
nt_Tensor *nt_index_add(nt_Tensor *x, int dim, nt_Tensor *index, nt_Tensor *source, double alpha);
/* x.scatter_reduce(dim, index, src, reduce, include_self) for reduce "sum",
** "mean", "prod", "amax", "amin" (src of index's shape) */
nt_Tensor *nt_scatter_reduce(nt_Tensor *x, int dim, nt_Tensor *index, nt_Tensor *src, const char *reduce, bool include_self);
/* scatterext.c: the "amax", "amin" and "prod" reductions nt_scatter_reduce hands on */
nt_Tensor *nn_scatter_reduce_ext(const char *op, nt_Tensor *x, int dim, nt_Tensor *index, nt_Tensor *src, const char *reduce, bool include_self);
/* F.embedding_bag, mode "sum", "mean" or "max"; offsets NULL for a 2-D input */
nt_Tensor *nt_embedding_bag(nt_Tensor *input, nt_Tensor *weight, nt_Tensor *offsets, const char *mode, nt_Tensor *per_sample_weights,
                            bool include_last_offset);
/* adaptivemax.c: F.adaptive_max_pool2d of x [N, C, H, W] (or [C, H, W]) to
** out[0] x out[1]; *idx_out (when idx_out) the flat h*W + w of each maximum. 0 or -1 */
int nt_adaptive_max_pool2d(nt_Tensor *x, const int64_t *out, nt_Tensor **y_out, nt_Tensor **idx_out);

#endif
