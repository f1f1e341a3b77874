/*
** batchnorm.h — batch normalisation (torch.nn.functional.batch_norm).
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

#endif
