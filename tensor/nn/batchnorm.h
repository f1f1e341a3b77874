/*
** batchnorm.h — the normalisations over channels: batch_norm (batchnorm.c),
** group_norm and instance_norm (groupnorm.c), torch.nn.functional's.
** Conventions as nn.h: borrowed arguments, a new reference or NULL with the
** error set.
*/
#ifndef NT_BATCHNORM_H
#define NT_BATCHNORM_H

#include "tensor/tensor.h"

/* x [N, C, *] (f32/f64; f16/bf16 computed in f32).  Normalises every channel
** c over the batch and spatial axes:
**   y = (x - mean_c) / sqrt(var_c + eps) * weight[c] + bias[c]
** training: mean_c and the biased var_c of this batch (N * spatial > 1), and,
** when running_mean/running_var are given, updates them IN PLACE as torch
** does: running = (1 - momentum) * running + momentum * stat, with the
** unbiased variance (var * n / (n - 1)) for running_var.
** !training: mean_c and var_c are running_mean and running_var (required).
** weight, bias, running_mean, running_var: [C] or NULL, on x's device.
** One autograd node (BatchNormBackward) from x, weight and bias; the running
** statistics are never differentiated. */
nt_Tensor *nt_batch_norm(nt_Tensor *x, nt_Tensor *running_mean, nt_Tensor *running_var, nt_Tensor *weight,
                         nt_Tensor *bias, bool training, double momentum, double eps);

/* x [N, C, *]: each (sample, group of C/num_groups channels) normalised by
** its own mean and biased variance, then weight[c]/bias[c] ([C] or NULL).
** C must be divisible by num_groups.  One node (GroupNormBackward). */
nt_Tensor *nt_group_norm(nt_Tensor *x, int64_t num_groups, nt_Tensor *weight, nt_Tensor *bias, double eps);
/* x [N, C, *]: use_input_stats: each (sample, channel) normalised over its
** spatial values (group norm with C groups), and running_mean/running_var,
** when given, updated in place with the instances' statistics averaged over
** the batch (unbiased variance), as torch; !use_input_stats: normalised by
** the running statistics (required). */
nt_Tensor *nt_instance_norm(nt_Tensor *x, nt_Tensor *running_mean, nt_Tensor *running_var, nt_Tensor *weight, nt_Tensor *bias,
                            bool use_input_stats, double momentum, double eps);

/* The running-statistics update every normalisation with them shares:
** run = run * (1 - momentum) + stat * (momentum * scale), IN PLACE, computed
** in run's dtype with tensor ops (any device or layout; grad off is the
** caller's).  stat: [C] like run.  0, or -1 with the error set. */
int nt_norm_update_running(nt_Tensor *run, nt_Tensor *stat, double momentum, double scale);

#endif
