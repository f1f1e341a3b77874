/*
** lib/ltset.c — builtins over tensor/index/ (index.h): set and index ops
** (unique, bincount, searchsorted, nonzero, isin, histc, histogram), the
** cumulative ops, roll/diff/meshgrid/rot90, diagonals, tensordot,
** distances, the special functions (lgamma, digamma, erfinv, xlogy) and the
** samplers the distributions module uses (standard_gamma, poisson,
** binomial).  Names and parameters are torch's (docs/numerics.md).
*/
#include "ltensor.h"
#include "tensor/index/index.h"
#include "lang/lib/nblib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a list of the non-NULL tensors (references taken), or the error */
static int list_of(nb_VM *vm, int rc, nt_Tensor *const *ts, int n, nb_Value *out) {
  if (rc < 0) return nbT_err(vm);
  nb_List *l = nbL_new(n);
  for (int i = 0; i < n; i++) if (ts[i]) nbL_push(l, nb_obj(NB_TTENSOR, ts[i]));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int opt_dim(nb_VM *vm, const char *fname, nb_Value v, bool *has, int *dim) {
  *has = v.t != NB_TNIL; *dim = 0;
  return *has ? nbT_intc_arg(vm, fname, "dim", v, dim) : NB_OK;
}

/* unique(x, sorted=true, return_inverse=false, return_counts=false, dim=nil) */
static int uniq(nb_VM *vm, const char *fname, bool consecutive, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; bool has; int dim;
  int base = consecutive ? 0 : 1;   /* unique has sorted before the flags */
  if (opt_dim(vm, fname, args[base + 3], &has, &dim)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  bool inv = nb_truthy(args[base + 1]), cnt = nb_truthy(args[base + 2]);
  nt_Tensor *t[3] = { NULL, NULL, NULL };
  int rc = (consecutive ? nt_unique_consecutive : nt_unique)(x, has, dim, &t[0], inv ? &t[1] : NULL, cnt ? &t[2] : NULL);
  nbT_tmp_free(&tp);
  if (rc == 0 && !inv && !cnt) { *out = nb_obj(NB_TTENSOR, t[0]); return NB_OK; }
  return list_of(vm, rc, t, 3, out);
}
static int b_unique(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return uniq(vm, "unique", false, args, out); }
static int b_unique_consecutive(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return uniq(vm, "unique_consecutive", true, args, out); }

static int b_bincount(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "bincount"; Tmp tp = {0}; int64_t minlength = 0;
  if (nbT_int_arg(vm, fname, "minlength", args[2], &minlength)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *w = NULL;
  if (args[1].t != NB_TNIL && !(w = nbT_arg(vm, &tp, fname, "weights", args[1]))) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_bincount(x, w, minlength));
}
static int b_histc(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "histc"; Tmp tp = {0}; int64_t bins; double lo, hi;
  if (nbT_int_arg(vm, fname, "bins", args[1], &bins) || nbT_num_arg(vm, fname, "min", args[2], &lo) || nbT_num_arg(vm, fname, "max", args[3], &hi)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_histc(x, bins, lo, hi));
}
static int b_histogram(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "histogram"; Tmp tp = {0}; int64_t bins = 0; double lo = NAN, hi = NAN;
  nt_Tensor *edges = NULL, *w = NULL;
  if (args[2].t != NB_TNIL) {   /* range: a list of two numbers, or a 2-element tensor (a bracket literal) */
    double d[2];
    if (args[2].t == NB_TLIST && nb_list(args[2])->n == 2) {
      if (nbT_num_arg(vm, fname, "range", nb_list(args[2])->items[0], &d[0]) || nbT_num_arg(vm, fname, "range", nb_list(args[2])->items[1], &d[1])) return NB_ERR;
    } else if (args[2].t == NB_TTENSOR && T(args[2])->numel == 2) {
      if (nt_to_host(T(args[2]), d, NT_F64)) return nbT_err(vm);
    } else return nb_error_kind(vm, "TypeError", "%s: range must be [min, max], got %s", fname, nb_typename(args[2]));
    lo = d[0]; hi = d[1];
  }
  TENSOR_ARG(x, 0, "x");
  if (args[1].t == NB_TNUM) { if (nbT_int_arg(vm, fname, "bins", args[1], &bins)) { nbT_tmp_free(&tp); return NB_ERR; } }
  else if (!(edges = nbT_arg(vm, &tp, fname, "bins", args[1]))) { nbT_tmp_free(&tp); return NB_ERR; }
  if (args[3].t != NB_TNIL && !(w = nbT_arg(vm, &tp, fname, "weight", args[3]))) { nbT_tmp_free(&tp); return NB_ERR; }
  nt_Tensor *h, *e;
  int rc = nt_histogram(x, bins, edges, lo, hi, w, nb_truthy(args[4]), &h, &e);
  nbT_tmp_free(&tp);
  if (rc < 0) return nbT_err(vm);
  nb_Rec *r = nbR_new(2);
  nbR_set_cstr(r, "hist", nb_obj(NB_TTENSOR, h));
  nbR_set_cstr(r, "bin_edges", nb_obj(NB_TTENSOR, e));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
/* searchsorted(sorted_sequence, values, out_int32=false, right=false, side=nil, sorter=nil) */
static int b_searchsorted(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "searchsorted"; Tmp tp = {0};
  bool right = nb_truthy(args[3]);
  if (args[4].t != NB_TNIL) {
    if (args[4].t != NB_TSTR || (strcmp(nb_str(args[4])->data, "left") && strcmp(nb_str(args[4])->data, "right")))
      return nb_error_kind(vm, "ValueError", "%s: side must be \"left\" or \"right\"", fname);
    bool r2 = !strcmp(nb_str(args[4])->data, "right");
    if (!r2 && nb_truthy(args[3])) return nb_error_kind(vm, "ValueError", "%s: side=\"left\" and right=true disagree", fname);
    right = r2;
  }
  TENSOR_ARG(s, 0, "sorted_sequence"); TENSOR_ARG(v, 1, "values");
  nt_Tensor *sorter = NULL;
  if (args[5].t != NB_TNIL && !(sorter = nbT_arg(vm, &tp, fname, "sorter", args[5]))) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_searchsorted(s, v, right, sorter, nb_truthy(args[2])));
}
static int b_bucketize(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "bucketize"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(b, 1, "boundaries");
  if (b->ndim != 1) { nbT_tmp_free(&tp); return nb_error_kind(vm, "ValueError", "%s: boundaries must be 1-D, got %d dimensions", fname, b->ndim); }
  DONE(nt_searchsorted(b, x, nb_truthy(args[3]), NULL, nb_truthy(args[2])));
}
static int b_nonzero(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "nonzero"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *nz = nt_nonzero(x);
  if (!nz || !nb_truthy(args[1])) DONE(nz);
  /* as_tuple: one 1-D tensor per dimension (a 0-d x counts as 1-D) */
  int nd = x->ndim ? x->ndim : 1;
  nt_Tensor *cols[NT_MAXDIM] = { 0 };
  int rc = 0;
  for (int d = 0; d < nd && rc == 0; d++) {
    if (x->ndim == 0) cols[d] = nt_zeros((int64_t[]){ nz->shape[0] }, 1, NT_I64, x->device);
    else { nt_Tensor *c = nt_select(nz, 1, d); cols[d] = c ? nt_contiguous(c) : NULL; nt_release(c); }
    if (!cols[d]) rc = -1;
  }
  nt_release(nz);
  nbT_tmp_free(&tp);
  if (rc) for (int d = 0; d < nd; d++) nt_release(cols[d]);
  return list_of(vm, rc, cols, nd, out);
}
static int b_argwhere(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "argwhere"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_nonzero(x));
}
static int b_isin(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "isin"; Tmp tp = {0};
  TENSOR_ARG(e, 0, "elements"); TENSOR_ARG(t, 1, "test_elements"); DONE(nt_isin(e, t, nb_truthy(args[2])));
}

/* ---- cumulative ------------------------------------------------------------------------ */
static int b_cumprod(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cumprod"; Tmp tp = {0}; int d;
  if (nbT_intc_arg(vm, fname, "dim", args[1], &d)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_cumprod(x, d));
}
static int b_logcumsumexp(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "logcumsumexp"; Tmp tp = {0}; int d;
  if (nbT_intc_arg(vm, fname, "dim", args[1], &d)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_logcumsumexp(x, d));
}
static int cumext(nb_VM *vm, const char *fname, bool mx, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; int d;
  if (nbT_intc_arg(vm, fname, "dim", args[1], &d)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *t[2] = { NULL, NULL };
  int rc = (mx ? nt_cummax : nt_cummin)(x, d, &t[0], &t[1]);
  nbT_tmp_free(&tp);
  return list_of(vm, rc, t, 2, out);
}
static int b_cummax(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return cumext(vm, "cummax", true, args, out); }
static int b_cummin(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return cumext(vm, "cummin", false, args, out); }

/* ---- rearranging ----------------------------------------------------------------------- */
static int b_roll(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "roll"; Tmp tp = {0};
  int64_t shifts[NT_MAXDIM], dims64[NT_MAXDIM]; int ns, nd = 0, dims[NT_MAXDIM];
  if (nbT_ints_arg(vm, fname, "shifts", args[1], shifts, NT_MAXDIM, &ns)) return NB_ERR;
  if (args[2].t != NB_TNIL && nbT_ints_arg(vm, fname, "dims", args[2], dims64, NT_MAXDIM, &nd)) return NB_ERR;
  if (nd == 0 && ns != 1) return nb_error_kind(vm, "ValueError", "%s: without dims, shifts must be one number (got %d)", fname, ns);
  if (nd && nd != ns) return nb_error_kind(vm, "ValueError", "%s: shifts (%d) and dims (%d) must have the same length", fname, ns, nd);
  for (int i = 0; i < nd; i++) if (nbT_narrow_int(vm, fname, "dims", dims64[i], &dims[i])) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_roll(x, shifts, dims, nd));
}
static int b_diff(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "diff"; Tmp tp = {0}; int64_t k; int d;
  if (nbT_int_arg(vm, fname, "n", args[1], &k) || nbT_intc_arg(vm, fname, "dim", args[2], &d)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *pre = NULL, *app = NULL;
  if (args[3].t != NB_TNIL && !(pre = nbT_arg(vm, &tp, fname, "prepend", args[3]))) { nbT_tmp_free(&tp); return NB_ERR; }
  if (args[4].t != NB_TNIL && !(app = nbT_arg(vm, &tp, fname, "append", args[4]))) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_diff(x, k, d, pre, app));
}
static int b_meshgrid(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "meshgrid"; Tmp tp = {0};
  if (args[0].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a list of tensors, got %s", fname, nb_typename(args[0]));
  if (args[1].t != NB_TSTR || (strcmp(nb_str(args[1])->data, "ij") && strcmp(nb_str(args[1])->data, "xy")))
    return nb_error_kind(vm, "ValueError", "%s: indexing must be \"ij\" or \"xy\"", fname);
  nb_List *l = nb_list(args[0]);
  if (l->n < 1 || l->n > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "%s: expects 1 to %d tensors, got %d", fname, NT_MAXDIM, l->n);
  nt_Tensor *ts[NT_MAXDIM], *res[NT_MAXDIM];
  for (int i = 0; i < l->n; i++) if (!(ts[i] = nbT_arg(vm, &tp, fname, "tensors", l->items[i]))) { nbT_tmp_free(&tp); return NB_ERR; }
  int rc = nt_meshgrid(ts, l->n, !strcmp(nb_str(args[1])->data, "xy"), res);
  nbT_tmp_free(&tp);
  return list_of(vm, rc, res, l->n, out);
}
static int b_rot90(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "rot90"; Tmp tp = {0}; int64_t k, dims[2] = { 0, 1 }; int nd = 2;
  if (nbT_int_arg(vm, fname, "k", args[1], &k)) return NB_ERR;
  if (args[2].t != NB_TNIL && nbT_ints_arg(vm, fname, "dims", args[2], dims, 2, &nd)) return NB_ERR;
  if (nd != 2) return nb_error_kind(vm, "ValueError", "%s: dims must have 2 entries, got %d", fname, nd);
  int d0, d1;
  if (nbT_narrow_int(vm, fname, "dims", dims[0], &d0) || nbT_narrow_int(vm, fname, "dims", dims[1], &d1)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_rot90(x, k, d0, d1));
}
static int b_diag(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "diag"; Tmp tp = {0}; int64_t k;
  if (nbT_int_arg(vm, fname, "diagonal", args[1], &k)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_diag(x, k));
}
static int diag2(nb_VM *vm, const char *fname, bool embed, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; int64_t off; int d1, d2;
  if (nbT_int_arg(vm, fname, "offset", args[1], &off) || nbT_intc_arg(vm, fname, "dim1", args[2], &d1) || nbT_intc_arg(vm, fname, "dim2", args[3], &d2)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(embed ? nt_diag_embed(x, off, d1, d2) : nt_diagonal(x, off, d1, d2));
}
static int b_diagonal(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return diag2(vm, "diagonal", false, args, out); }
static int b_diag_embed(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return diag2(vm, "diag_embed", true, args, out); }
static int b_trace(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "trace"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_trace(x));
}
/* tensordot(a, b, dims=2): dims a number (a's last with b's first) or [a_dims, b_dims] */
static int b_tensordot(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "tensordot"; Tmp tp = {0};
  int64_t ad[NT_MAXDIM], bd[NT_MAXDIM]; int na = 0, nb = 0, ai[NT_MAXDIM], bi[NT_MAXDIM];
  bool pair = args[2].t == NB_TLIST && nb_list(args[2])->n == 2 && nb_list(args[2])->items[0].t != NB_TNUM;
  int64_t k = 0;
  if (pair) {
    if (nbT_ints_arg(vm, fname, "dims", nb_list(args[2])->items[0], ad, NT_MAXDIM, &na) || nbT_ints_arg(vm, fname, "dims", nb_list(args[2])->items[1], bd, NT_MAXDIM, &nb)) return NB_ERR;
    if (na != nb) return nb_error_kind(vm, "ValueError", "%s: both lists of dims must have the same length, got %d and %d", fname, na, nb);
  } else if (nbT_int_arg(vm, fname, "dims", args[2], &k)) return NB_ERR;
  TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b");
  if (!pair) {
    if (k < 0 || k > a->ndim || k > b->ndim) { nbT_tmp_free(&tp); return nb_error_kind(vm, "ValueError", "%s: dims = %lld is out of range for tensors of %d and %d dimensions", fname, (long long)k, a->ndim, b->ndim); }
    na = (int)k;
    for (int i = 0; i < na; i++) { ai[i] = a->ndim - na + i; bi[i] = i; }
  } else
    for (int i = 0; i < na; i++) if (nbT_narrow_int(vm, fname, "dims", ad[i], &ai[i]) || nbT_narrow_int(vm, fname, "dims", bd[i], &bi[i])) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_tensordot(a, b, ai, bi, na));
}

/* ---- distances --------------------------------------------------------------------------- */
static int b_cdist(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cdist"; Tmp tp = {0}; double p;
  if (nbT_num_arg(vm, fname, "p", args[2], &p)) return NB_ERR;
  TENSOR_ARG(a, 0, "x1"); TENSOR_ARG(b, 1, "x2"); DONE(nt_cdist(a, b, p));
}
static int b_pairwise_distance(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "pairwise_distance"; Tmp tp = {0}; double p, eps;
  if (nbT_num_arg(vm, fname, "p", args[2], &p) || nbT_num_arg(vm, fname, "eps", args[3], &eps)) return NB_ERR;
  TENSOR_ARG(a, 0, "x1"); TENSOR_ARG(b, 1, "x2"); DONE(nt_pairwise_distance(a, b, p, eps, nb_truthy(args[4])));
}
static int b_cosine_similarity(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cosine_similarity"; Tmp tp = {0}; int d; double eps;
  if (nbT_intc_arg(vm, fname, "dim", args[2], &d) || nbT_num_arg(vm, fname, "eps", args[3], &eps)) return NB_ERR;
  TENSOR_ARG(a, 0, "x1"); TENSOR_ARG(b, 1, "x2"); DONE(nt_cosine_similarity(a, b, d, eps));
}

/* ---- special functions and samplers ----------------------------------------------------- */
#define UNARY(name, f) \
  static int b_##name(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { \
    (void)n; const char *fname = #name; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(f(x)); }
UNARY(lgamma, nt_lgamma)
UNARY(digamma, nt_digamma)
UNARY(erfinv, nt_erfinv)
UNARY(standard_gamma, nt_sample_gamma)
UNARY(poisson, nt_sample_poisson)
static int b_xlogy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "xlogy"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); TENSOR_ARG(y, 1, "y"); DONE(nt_xlogy(x, y));
}
static int b_binomial(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "binomial"; Tmp tp = {0}; TENSOR_ARG(c, 0, "count"); TENSOR_ARG(p, 1, "prob"); DONE(nt_sample_binomial(c, p));
}
static int b_standard_gamma_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "standard_gamma_grad"; Tmp tp = {0}; TENSOR_ARG(a, 0, "alpha"); TENSOR_ARG(x, 1, "x"); DONE(nt_standard_gamma_grad(a, x));
}
static int b_dirichlet_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "dirichlet_grad"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); TENSOR_ARG(a, 1, "alpha"); TENSOR_ARG(t, 2, "total");
  DONE(nt_dirichlet_grad(x, a, t));
}
UNARY(sample_dirichlet, nt_sample_dirichlet)
static int b_igamma(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "igamma"; Tmp tp = {0}; TENSOR_ARG(a, 0, "a"); TENSOR_ARG(x, 1, "x"); DONE(nt_igamma(a, x));
}
static int b_igammac(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "igammac"; Tmp tp = {0}; TENSOR_ARG(a, 0, "a"); TENSOR_ARG(x, 1, "x"); DONE(nt_igammac(a, x));
}

static nb_Builtin set_builtins[] = {
  { "unique", b_unique, "x, sorted=true, return_inverse=false, return_counts=false, dim=nil", "unique(x, sorted=true, return_inverse=false, return_counts=false, dim=nil): the sorted distinct values (of x flattened, or the distinct slices along dim); with return_inverse/return_counts a list [values, inverse?, counts?] (i64); always sorted" },
  { "unique_consecutive", b_unique_consecutive, "x, return_inverse=false, return_counts=false, dim=nil", "unique_consecutive(x, return_inverse=false, return_counts=false, dim=nil): unique over runs of equal neighbours, in order" },
  { "bincount", b_bincount, "x, weights=nil, minlength=0", "bincount(x, weights=nil, minlength=0): counts (or summed weights) of each non-negative integer of the 1-D x" },
  { "histc", b_histc, "x, bins=100, min=0, max=0", "histc(x, bins=100, min=0, max=0): a histogram of equal bins over [min, max] (min == max: x's range); outside values ignored" },
  { "histogram", b_histogram, "x, bins=100, range=nil, weight=nil, density=false", "histogram(x, bins=100, range=nil, weight=nil, density=false): {hist, bin_edges}; bins a count or a 1-D tensor of edges" },
  { "searchsorted", b_searchsorted, "sorted_sequence, values, out_int32=false, right=false, side=nil, sorter=nil", "searchsorted(sorted_sequence, values, out_int32=false, right=false, side=nil, sorter=nil): insertion indices keeping each row sorted (i64)" },
  { "bucketize", b_bucketize, "x, boundaries, out_int32=false, right=false", "bucketize(x, boundaries, out_int32=false, right=false): the bucket of each element among the 1-D sorted boundaries" },
  { "nonzero", b_nonzero, "x, as_tuple=false", "nonzero(x, as_tuple=false): [nnz, ndim] i64 positions of non-zero elements (as_tuple: a list of one index tensor per dimension)" },
  { "argwhere", b_argwhere, "x", "argwhere(x): nonzero(x)" },
  { "isin", b_isin, "elements, test_elements, invert=false", "isin(elements, test_elements, invert=false): bool, whether each element is in test_elements" },
  { "cumprod", b_cumprod, "x, dim", "cumprod(x, dim): running product (integers in i64)" },
  { "logcumsumexp", b_logcumsumexp, "x, dim", "logcumsumexp(x, dim): log of the running sum of exp(x), stable" },
  { "cummax", b_cummax, "x, dim", "cummax(x, dim): [values, indices] of the running maximum (NaN propagates)" },
  { "cummin", b_cummin, "x, dim", "cummin(x, dim): [values, indices] of the running minimum (NaN propagates)" },
  { "roll", b_roll, "x, shifts, dims=nil", "roll(x, shifts, dims=nil): elements shifted cyclically along dims (nil: x flattened, shape kept)" },
  { "diff", b_diff, "x, n=1, dim=-1, prepend=nil, append=nil", "diff(x, n=1, dim=-1, prepend=nil, append=nil): the n-th forward difference along dim (bool: xor)" },
  { "meshgrid", b_meshgrid, "tensors, indexing=\"ij\"", "meshgrid(tensors, indexing=\"ij\"): a list of coordinate grids from a list of 1-D tensors (\"xy\": Cartesian, the first two axes swapped)" },
  { "rot90", b_rot90, "x, k=1, dims=nil", "rot90(x, k=1, dims=[0, 1]): rotation by 90 degrees k times, from the first dim towards the second" },
  { "diag", b_diag, "x, diagonal=0", "diag(x, diagonal=0): a 1-D x as the given diagonal of a square matrix; a 2-D x's diagonal" },
  { "diagonal", b_diagonal, "x, offset=0, dim1=0, dim2=1", "diagonal(x, offset=0, dim1=0, dim2=1): the diagonal over dim1, dim2 as a new last dim (a copy, not a view)" },
  { "diag_embed", b_diag_embed, "x, offset=0, dim1=-2, dim2=-1", "diag_embed(x, offset=0, dim1=-2, dim2=-1): matrices with x's last dim on the diagonal over dim1, dim2" },
  { "trace", b_trace, "x", "trace(x): the sum of a 2-D x's diagonal" },
  { "tensordot", b_tensordot, "a, b, dims=2", "tensordot(a, b, dims=2): contraction of a's last dims with b's first (a number) or of the listed dims [[a dims], [b dims]]" },
  { "cdist", b_cdist, "x1, x2, p=2", "cdist(x1, x2, p=2): p-norm distances between the rows of x1 [..., P, M] and x2 [..., R, M] -> [..., P, R]" },
  { "pairwise_distance", b_pairwise_distance, "x1, x2, p=2, eps=1e-6, keepdim=false", "pairwise_distance(x1, x2, p=2, eps=1e-6, keepdim=false): ||x1 - x2 + eps||_p over the last dim, broadcasting" },
  { "cosine_similarity", b_cosine_similarity, "x1, x2, dim=1, eps=1e-8", "cosine_similarity(x1, x2, dim=1, eps=1e-8): x1 . x2 / (max(|x1|, eps) max(|x2|, eps)) along dim, broadcasting" },
  { "lgamma", b_lgamma, "x", "lgamma(x): log |Gamma(x)| (poles: inf)" },
  { "digamma", b_digamma, "x", "digamma(x): the derivative of lgamma" },
  { "erfinv", b_erfinv, "x", "erfinv(x): the inverse error function on [-1, 1]" },
  { "xlogy", b_xlogy, "x, y", "xlogy(x, y): x * log(y), 0 where x == 0 (NaN where y is NaN)" },
  { "standard_gamma", b_standard_gamma, "alpha", "standard_gamma(alpha): Gamma(alpha, 1) samples of alpha's shape (torch._standard_gamma)" },
  { "poisson", b_poisson, "rates", "poisson(rates): Poisson samples of rates' shape" },
  { "binomial", b_binomial, "count, prob", "binomial(count, prob): Binomial(count, prob) samples, broadcasting" },
  { "standard_gamma_grad", b_standard_gamma_grad, "alpha, x", "standard_gamma_grad(alpha, x): d x / d alpha for Gamma(alpha, 1) samples x, the implicit reparameterisation gradient (torch._standard_gamma_grad)" },
  { "dirichlet_grad", b_dirichlet_grad, "x, alpha, total", "dirichlet_grad(x, alpha, total): the Beta(alpha, total - alpha) reparameterisation gradient over (1 - x) (torch._dirichlet_grad)" },
  { "igamma", b_igamma, "a, x", "igamma(a, x): the regularised lower incomplete gamma function P(a, x) (torch.special.gammainc); differentiable in x" },
  { "igammac", b_igammac, "a, x", "igammac(a, x): the regularised upper incomplete gamma function Q(a, x) = 1 - P(a, x) (torch.special.gammaincc); differentiable in x" },
  { "sample_dirichlet", b_sample_dirichlet, "alpha", "sample_dirichlet(alpha): Dirichlet samples over alpha's last axis, differentiable in alpha (torch._sample_dirichlet with its backward)" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_set(void) { nbC_register(set_builtins); }
