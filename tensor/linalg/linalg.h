/*
** linalg/linalg.h — torch.linalg over tensors [..., m, n] (public; prefix
** nt_linalg_).  Batched over the leading axes, f32 and f64, any strides, on
** every device (docs/numerics.md lists each function with its torch/NumPy
** counterpart).  The tensor.h conventions hold: borrowed arguments, new
** references, NULL (or -1) with the error set.
**
** Errors, not NaNs: a singular matrix (inv, solve, solve_triangular), one
** that is not positive-definite (cholesky), an eigen or singular value
** solver that does not converge fail with a message naming the batch element.
** The _ex forms return torch's info instead (i32 [...], 0 = success) and do
** not fail on such input.
**
** Autograd: torch's formulas.  Every multi-output function records one node
** per output (a backward is linear in the output gradients, so the parts add
** up to torch's); eigh's, eig's and svd's eigenvector/singular-vector
** gradients fail for repeated eigen/singular values, where they are undefined
** (eig's also for a loss that depends on the eigenvectors' phases, as torch).
*/
#ifndef NT_LINALG_H
#define NT_LINALG_H
#include "tensor/tensor.h"

nt_Tensor *nt_linalg_inv(nt_Tensor *a);
int        nt_linalg_inv_ex(nt_Tensor *a, nt_Tensor **inverse, nt_Tensor **info);
/* left: A X = B, else X A = B; B [..., n, k] or a vector [n] / [..., n] (torch's rule) */
nt_Tensor *nt_linalg_solve(nt_Tensor *a, nt_Tensor *b, bool left);
nt_Tensor *nt_linalg_solve_triangular(nt_Tensor *a, nt_Tensor *b, bool upper, bool left, bool unitriangular);
nt_Tensor *nt_linalg_det(nt_Tensor *a);
int        nt_linalg_slogdet(nt_Tensor *a, nt_Tensor **sign, nt_Tensor **logabsdet);
nt_Tensor *nt_linalg_cholesky(nt_Tensor *a, bool upper);
int        nt_linalg_cholesky_ex(nt_Tensor *a, bool upper, nt_Tensor **l, nt_Tensor **info);
/* torch.cholesky_solve(B, L, upper): A^-1 B with A = L L^T (U^T U) */
nt_Tensor *nt_linalg_cholesky_solve(nt_Tensor *b, nt_Tensor *l, bool upper);
/* mode "reduced" | "complete" | "r" (q: an empty tensor) */
int        nt_linalg_qr(nt_Tensor *a, const char *mode, nt_Tensor **q, nt_Tensor **r);
/* eigenvalues ascending; v NULL: values only (eigvalsh).  upper: UPLO="U" */
int        nt_linalg_eigh(nt_Tensor *a, bool upper, nt_Tensor **w, nt_Tensor **v);
/* general (non-symmetric) real matrices: complex eigenvalues [..., n] and
** eigenvectors [..., n, n] (columns, unit 2-norm), c64 for f32 and c128 for
** f64, in LAPACK's order (torch's); v NULL: values only (eigvals) */
int        nt_linalg_eig(nt_Tensor *a, nt_Tensor **w, nt_Tensor **v);
/* u NULL: singular values only (svdvals); descending */
int        nt_linalg_svd(nt_Tensor *a, bool full_matrices, nt_Tensor **u, nt_Tensor **s, nt_Tensor **vh);
/* atol/rtol NAN: torch's defaults (rtol = eps * max(m, n) when atol is not given, else 0) */
nt_Tensor *nt_linalg_pinv(nt_Tensor *a, double atol, double rtol, bool hermitian);
nt_Tensor *nt_linalg_matrix_rank(nt_Tensor *a, double atol, double rtol, bool hermitian);
/* min-norm least squares; residuals: squared norms per column when m > n and
** A has full rank, else empty; rank i64; singular values of A */
int        nt_linalg_lstsq(nt_Tensor *a, nt_Tensor *b, double rcond, nt_Tensor **solution, nt_Tensor **residuals,
                           nt_Tensor **rank, nt_Tensor **singular_values);
nt_Tensor *nt_linalg_matrix_power(nt_Tensor *a, int64_t n);
nt_Tensor *nt_linalg_matrix_exp(nt_Tensor *a);
/* ord: any p, inf, -inf, 0; axes NULL: all */
nt_Tensor *nt_linalg_vector_norm(nt_Tensor *x, double ord, const int *axes, int naxes, bool keepdim);
/* ord "fro" | "nuc" or a number (ord_s NULL): 1, -1, 2, -2, inf, -inf */
nt_Tensor *nt_linalg_matrix_norm(nt_Tensor *x, const char *ord_s, double ord, int d0, int d1, bool keepdim);
nt_Tensor *nt_linalg_cross(nt_Tensor *a, nt_Tensor *b, int dim);
nt_Tensor *nt_linalg_kron(nt_Tensor *a, nt_Tensor *b);

#endif
