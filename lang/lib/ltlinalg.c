/*
** lib/ltlinalg.c — the `linalg` record (torch.linalg's names: linalg.inv,
** linalg.solve, ...) and the top-level cross and kron, over tensor/linalg/.
** Functions with several results return a record with torch's field names
** (linalg.qr(A).Q, linalg.eigh(A).eigenvalues, linalg.inv_ex(A).info).
*/
#include "ltensor.h"
#include "tensor/linalg/linalg.h"
#include "lang/lib/nblib.h"
#include <math.h>
#include <string.h>

/* a record {names[i]: ts[i]} taking the tensors' references, or the error */
static int rec_of(nb_VM *vm, int rc, int n, const char *const *names, nt_Tensor **ts, nb_Value *out) {
  if (rc < 0) return nbT_err(vm);
  nb_Rec *r = nbR_new(n);
  for (int i = 0; i < n; i++) nbR_set_cstr(r, names[i], nb_obj(NB_TTENSOR, ts[i]));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static int opt_num(nb_VM *vm, const char *fname, const char *what, nb_Value v, double *out) {
  *out = NAN;
  return v.t == NB_TNIL ? NB_OK : nbT_num_arg(vm, fname, what, v, out);
}

static int b_inv(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.inv"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A"); DONE(nt_linalg_inv(a));
}
static int b_inv_ex(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.inv_ex"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *t[2];
  int rc = nt_linalg_inv_ex(a, &t[0], &t[1]);
  nbT_tmp_free(&tp);
  return rec_of(vm, rc, 2, (const char *[]){ "inverse", "info" }, t, out);
}
static int b_solve(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.solve"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A"); TENSOR_ARG(b, 1, "B"); DONE(nt_linalg_solve(a, b, nb_truthy(args[2])));
}
static int b_solve_triangular(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.solve_triangular"; Tmp tp = {0};
  if (args[2].t != NB_TBOOL) return nb_error_kind(vm, "TypeError", "%s: upper must be true or false, got %s", fname, nb_typename(args[2]));
  TENSOR_ARG(a, 0, "A"); TENSOR_ARG(b, 1, "B");
  DONE(nt_linalg_solve_triangular(a, b, nb_truthy(args[2]), nb_truthy(args[3]), nb_truthy(args[4])));
}
static int b_det(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.det"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A"); DONE(nt_linalg_det(a));
}
static int b_slogdet(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.slogdet"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *t[2];
  int rc = nt_linalg_slogdet(a, &t[0], &t[1]);
  nbT_tmp_free(&tp);
  return rec_of(vm, rc, 2, (const char *[]){ "sign", "logabsdet" }, t, out);
}
static int b_cholesky(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.cholesky"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A"); DONE(nt_linalg_cholesky(a, nb_truthy(args[1])));
}
static int b_cholesky_ex(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.cholesky_ex"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *t[2];
  int rc = nt_linalg_cholesky_ex(a, nb_truthy(args[1]), &t[0], &t[1]);
  nbT_tmp_free(&tp);
  return rec_of(vm, rc, 2, (const char *[]){ "L", "info" }, t, out);
}
static int b_cholesky_solve(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.cholesky_solve"; Tmp tp = {0};
  TENSOR_ARG(b, 0, "B"); TENSOR_ARG(l, 1, "L"); DONE(nt_linalg_cholesky_solve(b, l, nb_truthy(args[2])));
}
static int b_qr(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.qr"; Tmp tp = {0};
  if (args[1].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: mode must be a string, got %s", fname, nb_typename(args[1]));
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *t[2];
  int rc = nt_linalg_qr(a, nb_str(args[1])->data, &t[0], &t[1]);
  nbT_tmp_free(&tp);
  return rec_of(vm, rc, 2, (const char *[]){ "Q", "R" }, t, out);
}
static int uplo_arg(nb_VM *vm, const char *fname, nb_Value v, bool *upper) {
  const char *s = v.t == NB_TSTR ? nb_str(v)->data : NULL;
  if (!s || (strcmp(s, "L") && strcmp(s, "U")))
    return nb_error_kind(vm, "ValueError", "%s: UPLO must be \"L\" or \"U\"", fname);
  *upper = s[0] == 'U';
  return NB_OK;
}
static int b_eigh(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.eigh"; Tmp tp = {0}; bool up = false;
  if (uplo_arg(vm, fname, args[1], &up)) return NB_ERR;
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *t[2];
  int rc = nt_linalg_eigh(a, up, &t[0], &t[1]);
  nbT_tmp_free(&tp);
  return rec_of(vm, rc, 2, (const char *[]){ "eigenvalues", "eigenvectors" }, t, out);
}
static int b_eigvalsh(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.eigvalsh"; Tmp tp = {0}; bool up = false;
  if (uplo_arg(vm, fname, args[1], &up)) return NB_ERR;
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *w = NULL;
  int rc = nt_linalg_eigh(a, up, &w, NULL);
  nbT_tmp_free(&tp);
  return rc ? nbT_err(vm) : nbT_ret(vm, w, out);
}
static int b_eig(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.eig"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *t[2];
  int rc = nt_linalg_eig(a, &t[0], &t[1]);
  nbT_tmp_free(&tp);
  return rec_of(vm, rc, 2, (const char *[]){ "eigenvalues", "eigenvectors" }, t, out);
}
static int b_eigvals(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.eigvals"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *w = NULL;
  int rc = nt_linalg_eig(a, &w, NULL);
  nbT_tmp_free(&tp);
  return rc ? nbT_err(vm) : nbT_ret(vm, w, out);
}
static int b_svd(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.svd"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *t[3];
  int rc = nt_linalg_svd(a, nb_truthy(args[1]), &t[0], &t[1], &t[2]);
  nbT_tmp_free(&tp);
  return rec_of(vm, rc, 3, (const char *[]){ "U", "S", "Vh" }, t, out);
}
static int b_svdvals(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.svdvals"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A");
  nt_Tensor *s = NULL;
  int rc = nt_linalg_svd(a, false, NULL, &s, NULL);
  nbT_tmp_free(&tp);
  return rc ? nbT_err(vm) : nbT_ret(vm, s, out);
}
static int b_pinv(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.pinv"; Tmp tp = {0}; double atol, rtol;
  if (opt_num(vm, fname, "atol", args[1], &atol) || opt_num(vm, fname, "rtol", args[2], &rtol)) return NB_ERR;
  TENSOR_ARG(a, 0, "A"); DONE(nt_linalg_pinv(a, atol, rtol, nb_truthy(args[3])));
}
static int b_matrix_rank(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.matrix_rank"; Tmp tp = {0}; double atol, rtol;
  if (opt_num(vm, fname, "atol", args[1], &atol) || opt_num(vm, fname, "rtol", args[2], &rtol)) return NB_ERR;
  TENSOR_ARG(a, 0, "A"); DONE(nt_linalg_matrix_rank(a, atol, rtol, nb_truthy(args[3])));
}
static int b_lstsq(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.lstsq"; Tmp tp = {0}; double rcond;
  if (opt_num(vm, fname, "rcond", args[2], &rcond)) return NB_ERR;
  TENSOR_ARG(a, 0, "A"); TENSOR_ARG(b, 1, "B");
  nt_Tensor *t[4];
  int rc = nt_linalg_lstsq(a, b, rcond, &t[0], &t[1], &t[2], &t[3]);
  nbT_tmp_free(&tp);
  return rec_of(vm, rc, 4, (const char *[]){ "solution", "residuals", "rank", "singular_values" }, t, out);
}
static int b_matrix_power(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.matrix_power"; Tmp tp = {0}; int64_t k;
  if (nbT_int_arg(vm, fname, "n", args[1], &k)) return NB_ERR;
  TENSOR_ARG(a, 0, "A"); DONE(nt_linalg_matrix_power(a, k));
}
static int b_matrix_exp(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.matrix_exp"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "A"); DONE(nt_linalg_matrix_exp(a));
}
static int b_vector_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.vector_norm"; Tmp tp = {0}; double p = 2;
  int axes[NT_MAXDIM], na;
  if (nbT_num_arg(vm, fname, "ord", args[1], &p) || nbT_axes_arg(vm, fname, args[2], axes, &na)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_linalg_vector_norm(x, p, axes, na, nb_truthy(args[3])));
}
/* ord: "fro" / "nuc" or a number */
static int ord_arg(nb_VM *vm, const char *fname, nb_Value v, const char **s, double *d) {
  *s = NULL; *d = NAN;
  if (v.t == NB_TSTR) { *s = nb_str(v)->data; return NB_OK; }
  return nbT_num_arg(vm, fname, "ord", v, d);
}
static int matrix_dims(nb_VM *vm, const char *fname, nb_Value v, int *d0, int *d1) {
  int axes[NT_MAXDIM], na;
  *d0 = -2; *d1 = -1;
  if (v.t == NB_TNIL) return NB_OK;
  if (nbT_axes_arg(vm, fname, v, axes, &na)) return NB_ERR;
  if (na != 2) return nb_error_kind(vm, "ValueError", "%s: dim must be a list of two axes", fname);
  *d0 = axes[0]; *d1 = axes[1];
  return NB_OK;
}
static int b_matrix_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.matrix_norm"; Tmp tp = {0}; const char *os; double od; int d0, d1;
  if (ord_arg(vm, fname, args[1], &os, &od) || matrix_dims(vm, fname, args[2], &d0, &d1)) return NB_ERR;
  TENSOR_ARG(x, 0, "A"); DONE(nt_linalg_matrix_norm(x, os, od, d0, d1, nb_truthy(args[3])));
}
/* torch.linalg.norm: ord nil -> the 2-norm of the flattened input (dim nil) or
** of the given axes (Frobenius for two); a number or string ord with a 2-D
** input or two axes -> a matrix norm, else a vector norm */
static int b_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linalg.norm"; Tmp tp = {0}; const char *os = NULL; double od = 2;
  int axes[NT_MAXDIM], na;
  if ((args[1].t != NB_TNIL && ord_arg(vm, fname, args[1], &os, &od)) || nbT_axes_arg(vm, fname, args[2], axes, &na)) return NB_ERR;
  TENSOR_ARG(x, 0, "A");
  bool keep = nb_truthy(args[3]);
  bool matrix = args[1].t != NB_TNIL && (na == 2 || (na == 0 && x->ndim == 2));
  if (os && !matrix) { nbT_tmp_free(&tp); return nb_error_kind(vm, "ValueError", "%s: ord \"%s\" needs a matrix: a 2-D input or two axes in dim", fname, os); }
  if (matrix) DONE(nt_linalg_matrix_norm(x, os, od, na ? axes[0] : -2, na ? axes[1] : -1, keep));
  if (args[1].t != NB_TNIL && na == 0 && x->ndim != 1) { nbT_tmp_free(&tp); return nb_error_kind(vm, "ValueError", "%s: a numeric ord needs a 1-D or 2-D input, or dim", fname); }
  DONE(nt_linalg_vector_norm(x, od, axes, na, keep));
}
static int b_cross(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cross"; Tmp tp = {0}; int d = -1;
  if (nbT_intc_arg(vm, fname, "dim", args[2], &d)) return NB_ERR;
  TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b"); DONE(nt_linalg_cross(a, b, d));
}
static int b_kron(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "kron"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b"); DONE(nt_linalg_kron(a, b));
}

static nb_Builtin linalg_members[] = {
  { "linalg.inv", b_inv, "A", "linalg.inv(A): the inverse of square matrices [..., n, n]; a singular one is an error naming the batch element" },
  { "linalg.inv_ex", b_inv_ex, "A", "linalg.inv_ex(A): {inverse, info}: info i32 [...], k > 0 where the LU factor's diagonal entry k is zero (singular; inverse undefined there), no error" },
  { "linalg.solve", b_solve, "A, B, left=true", "linalg.solve(A, B, left=true): X with A X = B (X A = B when left=false); B [..., n, k] or a vector; batch axes broadcast" },
  { "linalg.solve_triangular", b_solve_triangular, "A, B, upper, left=true, unitriangular=false", "linalg.solve_triangular(A, B, upper, left=true, unitriangular=false): X with A X = B for triangular A (only its upper or lower triangle is read)" },
  { "linalg.det", b_det, "A", "linalg.det(A): determinants of [..., n, n] through LU; differentiable for singular A too" },
  { "linalg.slogdet", b_slogdet, "A", "linalg.slogdet(A): {sign, logabsdet} of the determinant (sign 0 and logabsdet -inf when singular)" },
  { "linalg.cholesky", b_cholesky, "A, upper=false", "linalg.cholesky(A, upper=false): L with A = L L^T (U with A = U^T U); not positive-definite is an error naming the batch element" },
  { "linalg.cholesky_ex", b_cholesky_ex, "A, upper=false", "linalg.cholesky_ex(A, upper=false): {L, info}: info k > 0 where the leading minor of order k is not positive, no error" },
  { "linalg.cholesky_solve", b_cholesky_solve, "B, L, upper=false", "linalg.cholesky_solve(B, L, upper=false): A^-1 B for A = L L^T (torch.cholesky_solve)" },
  { "linalg.qr", b_qr, "A, mode=\"reduced\"", "linalg.qr(A, mode=\"reduced\"|\"complete\"|\"r\"): {Q, R} with A = Q R" },
  { "linalg.eigh", b_eigh, "A, UPLO=\"L\"", "linalg.eigh(A, UPLO=\"L\"): {eigenvalues (ascending), eigenvectors (columns)} of symmetric matrices, reading the lower (\"L\") or upper (\"U\") triangle" },
  { "linalg.eigvalsh", b_eigvalsh, "A, UPLO=\"L\"", "linalg.eigvalsh(A, UPLO=\"L\"): the eigenvalues of symmetric matrices, ascending" },
  { "linalg.eig", b_eig, "A", "linalg.eig(A): {eigenvalues, eigenvectors (columns, unit norm)} of general real matrices, complex (c64 for f32, c128 for f64)" },
  { "linalg.eigvals", b_eigvals, "A", "linalg.eigvals(A): the complex eigenvalues of general real matrices (c64 for f32, c128 for f64)" },
  { "linalg.svd", b_svd, "A, full_matrices=true", "linalg.svd(A, full_matrices=true): {U, S (descending), Vh} with A = U diag(S) Vh" },
  { "linalg.svdvals", b_svdvals, "A", "linalg.svdvals(A): the singular values, descending" },
  { "linalg.pinv", b_pinv, "A, atol=nil, rtol=nil, hermitian=false", "linalg.pinv(A, atol=nil, rtol=nil, hermitian=false): the pseudo-inverse; singular values <= max(atol, rtol * largest) dropped (rtol = eps * max(m, n) by default)" },
  { "linalg.matrix_rank", b_matrix_rank, "A, atol=nil, rtol=nil, hermitian=false", "linalg.matrix_rank(A, atol=nil, rtol=nil, hermitian=false): the number of singular values above the tolerance (as pinv), i64" },
  { "linalg.lstsq", b_lstsq, "A, B, rcond=nil", "linalg.lstsq(A, B, rcond=nil): {solution, residuals, rank, singular_values}: the minimum-norm least-squares X of A X = B" },
  { "linalg.matrix_power", b_matrix_power, "A, n", "linalg.matrix_power(A, n): A^n for an integer n (negative: of the inverse; 0: the identity)" },
  { "linalg.matrix_exp", b_matrix_exp, "A", "linalg.matrix_exp(A): the matrix exponential (scaling and squaring, Pade 13)" },
  { "linalg.vector_norm", b_vector_norm, "x, ord=2, dim=nil, keepdim=false", "linalg.vector_norm(x, ord=2, dim=nil, keepdim=false): the vector ord-norm over dim (all when nil): inf/-inf max/min |x|, 0 the count of non-zeros" },
  { "linalg.matrix_norm", b_matrix_norm, "A, ord=\"fro\", dim=nil, keepdim=false", "linalg.matrix_norm(A, ord=\"fro\", dim=[-2, -1], keepdim=false): \"fro\", \"nuc\", 1, -1, 2, -2, inf, -inf" },
  { "linalg.norm", b_norm, "A, ord=nil, dim=nil, keepdim=false", "linalg.norm(A, ord=nil, dim=nil, keepdim=false): a vector or matrix norm as torch.linalg.norm decides" },
  { "linalg.cross", b_cross, "a, b, dim=-1", "linalg.cross(a, b, dim=-1): the cross product of 3-vectors along dim, broadcasting" },
  { "linalg.kron", b_kron, "a, b", "linalg.kron(a, b): the Kronecker product" },
  { NULL, NULL, NULL, NULL }
};

static int linalg_value(nb_VM *vm, nb_Value *out) {
  (void)vm;
  int nm = 0;
  while (linalg_members[nm].name) nm++;
  nb_Rec *r = nbR_new(nm);
  for (int i = 0; i < nm; i++) nbR_set_cstr(r, linalg_members[i].name + 7, nb_builtinv(&linalg_members[i]));   /* "linalg.X" -> X */
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static nb_Builtin linalg_builtins[] = {
  { .name = "linalg", .doc = "linalg: torch.linalg's functions (inv, solve, det, slogdet, cholesky, qr, eigh, svd, pinv, lstsq, matrix_exp, norms, ...); doc(linalg.inv) for each", .value = linalg_value },
  { "cross", b_cross, "a, b, dim=-1", "cross(a, b, dim=-1): the cross product of 3-vectors along dim (torch.linalg.cross)" },
  { "kron", b_kron, "a, b", "kron(a, b): the Kronecker product (torch.kron)" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_linalg(void) {
  nbC_register(linalg_builtins);
  nbC_prepare(linalg_members);
}
