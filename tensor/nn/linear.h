/*
** linear.h — the argument block of the "linear_backward" op (the CUDA module
** registers it: cuda/linear.cu; the front end is tensor/nn/linear.c).
**
** Row-major, all contiguous: G [M, N] (dL/dY), X [M, K] (NULL when dw is
** not wanted), W [N, K] — the
** weight the forward multiplied by (under autocast the bf16/f16 copy of an
** f32 master).  Results (NULL: not wanted), fresh contiguous:
**   dx [M, K] = G W         in X's dtype
**   dw [N, K] = G^T X       in the master weight's dtype (f32 from 16-bit
**                           G and X: the GEMM writes the f32 gradient directly)
**   db [N]    = sum_rows G  in dw's dtype when dw is wanted (one epilogue of
**                           the dW GEMM), else any of f32/bf16/f16
** G, X and W share one dtype.
*/
#ifndef NT_NN_LINEAR_H
#define NT_NN_LINEAR_H

#include "tensor/tensor.h"

typedef struct nt_LinearGrads {
  nt_Tensor *g, *x, *w;
  nt_Tensor *dx, *dw, *db;
} nt_LinearGrads;

#endif
