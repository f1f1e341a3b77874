/*
** gradcheck.h — finite-difference check of autograd for tests/tensor_nn.
** f maps the inputs to one tensor; the checked scalar is L = sum(f(x) * R)
** with R a fixed random tensor, so every output element's gradient matters.
** Inputs must be contiguous f64 CPU leaves; those with requires_grad are
** checked element by element with central differences.
*/
#ifndef TN_GRADCHECK_H
#define TN_GRADCHECK_H

#include "tensor/tensor.h"
#include <stddef.h>

typedef nt_Tensor *(*tn_fn)(nt_Tensor *const *in, void *ctx);

/* 0 when every gradient matches; else -1 with a reason in why. */
int tn_gradcheck(tn_fn f, void *ctx, nt_Tensor *const *in, int n, char *why, size_t whylen);

/* Random f64 leaf in [-1, 1) (requires_grad as given). */
nt_Tensor *tn_rand64(const int64_t *shape, int ndim, bool requires_grad);
/* i64 tensor from values. */
nt_Tensor *tn_i64(const int64_t *v, const int64_t *shape, int ndim);
/* f64 tensor from values (leaf, requires_grad as given). */
nt_Tensor *tn_f64(const double *v, const int64_t *shape, int ndim, bool requires_grad);
/* Max |a - b| over all elements (as doubles), or INFINITY on shape mismatch. */
double tn_maxdiff(nt_Tensor *a, nt_Tensor *b);
/* Element i (row-major) as double. */
double tn_at(nt_Tensor *t, int64_t i);

#endif
