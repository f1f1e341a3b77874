/*
** index/distance.c — cdist, pairwise_distance, cosine_similarity over
** linalg.vector_norm (whose gradient at a zero vector is 0, torch's
** subgradient), so each differentiates and runs on every device.
**   cdist(x1 [..., P, M], x2 [..., R, M], p) = ||x1[..., i, :] - x2[..., j, :]||_p
**     through the difference tensor [..., P, R, M] (exact; torch's p = 2
**     matmul shortcut rounds differently and is not used)
**   pairwise_distance(x1, x2, p, eps) = ||x1 - x2 + eps||_p over the last axis
**   cosine_similarity = sum((x1 / max(|x1|, eps)) * (x2 / max(|x2|, eps))), torch 1.13's
*/
#include "ixinternal.h"
#include "tensor/linalg/linalg.h"
#include <math.h>

static int check_p(const char *op, double p) {
  if (!(p >= 0)) NT_FAIL("%s: p must be non-negative, got %g", op, p);
  return 0;
}

nt_Tensor *nt_cdist(nt_Tensor *x1, nt_Tensor *x2, double p) {
  if (check_p("cdist", p)) return NULL;
  if (x1->ndim < 2 || x2->ndim < 2) NT_FAIL_NULL("cdist: x1 and x2 must have at least 2 dimensions, got %d and %d", x1->ndim, x2->ndim);
  if (!nt_dtype_is_float(x1->dtype) || !nt_dtype_is_float(x2->dtype)) NT_FAIL_NULL("cdist: only floating tensors are supported");
  if (x1->shape[x1->ndim - 1] != x2->shape[x2->ndim - 1])
    NT_FAIL_NULL("cdist: x1 and x2 must have the same number of columns, got %lld and %lld",
                 (long long)x1->shape[x1->ndim - 1], (long long)x2->shape[x2->ndim - 1]);
  nt_Tensor *d = X_sub(nt_unsqueeze(x1, -2), nt_unsqueeze(x2, -3));   /* [..., P, R, M] */
  nt_Tensor *r = d ? nt_linalg_vector_norm(d, p, (int[]){ -1 }, 1, false) : NULL;
  nt_release(d);
  return r;
}

nt_Tensor *nt_pairwise_distance(nt_Tensor *x1, nt_Tensor *x2, double p, double eps, bool keepdim) {
  if (check_p("pairwise_distance", p)) return NULL;
  int nd = x1->ndim > x2->ndim ? x1->ndim : x2->ndim;
  nt_Tensor *d = X_bs(NT_OP_ADD, nt_sub(x1, x2), eps);
  if (!d) return NULL;
  nt_Tensor *r = nd == 0 ? nt_linalg_vector_norm(d, p, NULL, 0, keepdim) : nt_linalg_vector_norm(d, p, (int[]){ -1 }, 1, keepdim);
  nt_release(d);
  return r;
}

nt_Tensor *nt_cosine_similarity(nt_Tensor *x1, nt_Tensor *x2, int axis, double eps) {
  nt_DType dt = nt_result_type(x1, x2);
  if (!nt_dtype_is_float(dt)) dt = NT_DEFAULT_FLOAT;
  nt_Tensor *a = nt_to_dtype(x1, dt), *b = nt_to_dtype(x2, dt);
  int nd = x1->ndim > x2->ndim ? x1->ndim : x2->ndim;
  int ax = a && b ? nt_norm_axis("cosine_similarity", axis, nd ? nd : 1) : -1;
  nt_Tensor *r = NULL;
  if (ax >= 0) {
    /* broadcast first, so the norms are over the common shape (torch's expand_outplace) */
    nt_Tensor *s = nt_add(a, b);
    nt_Tensor *ea = s ? nt_expand(a, s->shape, s->ndim) : NULL, *eb = s ? nt_expand(b, s->shape, s->ndim) : NULL;
    nt_release(s);
    if (ea && eb) {
      nt_Tensor *na = X_bs(NT_OP_MAXIMUM, nt_linalg_vector_norm(ea, 2, &ax, 1, true), eps);
      nt_Tensor *nb = X_bs(NT_OP_MAXIMUM, nt_linalg_vector_norm(eb, 2, &ax, 1, true), eps);
      r = X_sum(X_mul(X_div(nt_retain(ea), na), X_div(nt_retain(eb), nb)), ax, false);
    }
    nt_release(ea); nt_release(eb);
  }
  nt_release(a); nt_release(b);
  return r;
}
