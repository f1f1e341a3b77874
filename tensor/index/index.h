/*
** index/index.h — set and index ops, cumulative ops, distances, diagonals,
** and the special functions and samplers of the distributions module
** (docs/numerics.md "Set and index ops" and "Distributions").
**
** Conventions of tensor.h (arguments borrowed, new references returned,
** NULL / -1 with the error set).  Three kinds of functions:
**  - data-dependent results (unique, nonzero, histc, histogram,
**    searchsorted, isin: setops.c) run on the host: a CUDA input is copied
**    down and the result copied back (a synchronisation, as torch's unique
**    and nonzero are).  Not differentiable (torch has no gradient for them).
**    bincount is scatter_add on the device (its weights get scatter_add's
**    gradient, where torch has none); searchsorted on a device is log2(M)
**    rounds of gather and compare there.
**  - compositions of differentiable public ops (scan.c, arrange.c,
**    distance.c, special.c): their gradients and their CUDA path are those
**    of the ops they are made of.
**  - samplers (sample.c): vectorised rejection over public random ops, so
**    the global Philox stream (nt_seed) decides them on every device.
*/
#ifndef NT_INDEX_H
#define NT_INDEX_H

#include "tensor/tensor.h"

/* ---- set ops (setops.c) -------------------------------------------------------------- */
/* torch.unique: the sorted distinct values (dim < 0 with has_dim false: of
** the flattened x; else the distinct slices along dim), and when asked
** (inverse/counts not NULL) the i64 index of each element's (slice's) value
** and the count of each value. */
int nt_unique(nt_Tensor *x, bool has_dim, int dim, nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts);
/* torch.unique_consecutive: the same for runs of equal neighbours, in order */
int nt_unique_consecutive(nt_Tensor *x, bool has_dim, int dim, nt_Tensor **values, nt_Tensor **inverse, nt_Tensor **counts);
/* torch.bincount: x 1-D non-negative integers; weights NULL or x's length
** (result f32 for f32 weights, else f64: torch's), minlength >= 0 */
nt_Tensor *nt_bincount(nt_Tensor *x, nt_Tensor *weights, int64_t minlength);
/* torch.histc: bins equal bins over [lo, hi] (lo == hi: x's min and max) */
nt_Tensor *nt_histc(nt_Tensor *x, int64_t bins, double lo, double hi);
/* torch.histogram: edges given (1-D, increasing) or bins equal bins over
** [lo, hi] (NaN: x's range); weight may be NULL */
int nt_histogram(nt_Tensor *x, int64_t bins, nt_Tensor *edges, double lo, double hi, nt_Tensor *weight, bool density,
                 nt_Tensor **hist, nt_Tensor **bin_edges);
/* torch.searchsorted: seq [..., M] sorted along its last axis (or by
** sorter), values [..., N] with the same leading axes (or seq 1-D: any
** values); right: the last position; i64 (i32 when out_int32) */
nt_Tensor *nt_searchsorted(nt_Tensor *seq, nt_Tensor *values, bool right, nt_Tensor *sorter, bool out_int32);
/* torch.nonzero: [nnz, ndim] i64 row-major positions of non-zero elements */
nt_Tensor *nt_nonzero(nt_Tensor *x);
/* torch.isin: bool of elements' shape */
nt_Tensor *nt_isin(nt_Tensor *elements, nt_Tensor *test, bool invert);

/* ---- cumulative ops (scan.c) --------------------------------------------------------- */
nt_Tensor *nt_cumprod(nt_Tensor *x, int axis);
nt_Tensor *nt_logcumsumexp(nt_Tensor *x, int axis);
/* values and i64 indices of the running max / min (ties: the later index) */
int nt_cummax(nt_Tensor *x, int axis, nt_Tensor **values, nt_Tensor **indices);
int nt_cummin(nt_Tensor *x, int axis, nt_Tensor **values, nt_Tensor **indices);

/* ---- rearranging (arrange.c) --------------------------------------------------------- */
/* naxes == 0: x flattened is rolled by shifts[0], the shape kept */
nt_Tensor *nt_roll(nt_Tensor *x, const int64_t *shifts, const int *axes, int naxes);
/* prepend/append may be NULL */
nt_Tensor *nt_diff(nt_Tensor *x, int64_t n, int axis, nt_Tensor *prepend, nt_Tensor *append);
/* out[i]: n tensors, each of the grid's shape; xy: the first two axes swapped */
int nt_meshgrid(nt_Tensor *const *ts, int n, bool xy, nt_Tensor **out);
nt_Tensor *nt_rot90(nt_Tensor *x, int64_t k, int d0, int d1);
nt_Tensor *nt_diagonal(nt_Tensor *x, int64_t offset, int d1, int d2);
nt_Tensor *nt_diag_embed(nt_Tensor *x, int64_t offset, int d1, int d2);
nt_Tensor *nt_diag(nt_Tensor *x, int64_t k);
nt_Tensor *nt_trace(nt_Tensor *x);
/* contract a's axes adims[i] with b's bdims[i] */
nt_Tensor *nt_tensordot(nt_Tensor *a, nt_Tensor *b, const int *adims, const int *bdims, int n);

/* ---- distances (distance.c) ---------------------------------------------------------- */
nt_Tensor *nt_cdist(nt_Tensor *x1, nt_Tensor *x2, double p);
nt_Tensor *nt_pairwise_distance(nt_Tensor *x1, nt_Tensor *x2, double p, double eps, bool keepdim);
nt_Tensor *nt_cosine_similarity(nt_Tensor *x1, nt_Tensor *x2, int axis, double eps);

/* ---- special functions (special.c) --------------------------------------------------- */
nt_Tensor *nt_lgamma(nt_Tensor *x);
nt_Tensor *nt_digamma(nt_Tensor *x);
nt_Tensor *nt_erfinv(nt_Tensor *x);
/* x * log(y), 0 where x == 0 (torch.xlogy) */
nt_Tensor *nt_xlogy(nt_Tensor *x, nt_Tensor *y);

/* ---- samplers (sample.c) ------------------------------------------------------------- */
/* Gamma(alpha, 1) samples of alpha's shape (alpha > 0, floating) */
nt_Tensor *nt_sample_gamma(nt_Tensor *alpha);
/* Poisson(rate) samples of rate's shape (rate >= 0), rate's dtype */
nt_Tensor *nt_sample_poisson(nt_Tensor *rate);
/* Binomial(count, p) samples of the broadcast shape, p's dtype */
nt_Tensor *nt_sample_binomial(nt_Tensor *count, nt_Tensor *p);

/* ---- reparameterisation gradients (gammagrad.c; nt_sample_gamma is differentiable) ---- */
/* d x / d alpha for x ~ Gamma(alpha, 1) (torch._standard_gamma_grad(alpha, x)), broadcasting */
nt_Tensor *nt_standard_gamma_grad(nt_Tensor *alpha, nt_Tensor *x);
/* torch._dirichlet_grad(x, alpha, total): the Beta(alpha, total - alpha) gradient / (1 - x) */
nt_Tensor *nt_dirichlet_grad(nt_Tensor *x, nt_Tensor *alpha, nt_Tensor *total);
/* Dirichlet(alpha) samples over alpha's last axis, differentiable in alpha (torch's _Dirichlet) */
nt_Tensor *nt_sample_dirichlet(nt_Tensor *alpha);
/* the regularised incomplete gamma functions P(a, x), Q(a, x) (torch.special.gammainc, gammaincc),
** broadcasting; differentiable in x (in a: an error at backward, as torch) */
nt_Tensor *nt_igamma(nt_Tensor *a, nt_Tensor *x);
nt_Tensor *nt_igammac(nt_Tensor *a, nt_Tensor *x);

#endif
