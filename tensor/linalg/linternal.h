/*
** linalg/linternal.h — private to tensor/linalg/: the factorization kernels'
** op ids and argument layout, and the helpers the front ends share.
**
** The kernels are LAPACK's (CPU, lkernels.c) or cuSOLVER's (cuda/solver.cu),
** registered under the names below.  Both libraries are column-major, so
** every matrix a kernel reads or writes is a contiguous tensor [B, cols, rows]:
** row-major storage of the transpose, which is column-major storage of the
** matrix itself (lda = rows).  The front ends make these copies (lcore.c:
** lin_colmajor) and turn the results back (lin_rowmajor).  All buffers are
** fresh, contiguous, of one dtype (f32 or f64; pivots and info i32), with the
** same batch B.  A kernel writes `out` and the buffers marked (w) below:
**
**  linalg_getrf  out A [B,n,n] (in place: L and U), in[0] (w) pivots i32 [B,n],
**                in[1] (w) info i32 [B] (k > 0: U[k-1,k-1] is exactly zero)
**  linalg_getrs  out X [B,nrhs,n] (in place: right-hand sides -> solutions),
**                in[0] LU, in[1] pivots; iarg[0] = 1: solve A^T X = B
**  linalg_potrf  out A [B,n,n] (in place -> the factor; the other triangle
**                zeroed), in[0] (w) info [B] (k > 0: leading minor of order k
**                not positive); iarg[0] = 1: upper (A = U^T U), else lower
**  linalg_trtrs  out X [B,nrhs,n] (in place), in[0] T [B,n,n], in[1] (w) info
**                (k > 0: T[k-1,k-1] is zero); iarg[0] upper, iarg[1] transpose,
**                iarg[2] unit diagonal
**  linalg_qr     out R [B,n,rr] (rr = k or m rows), in[0] A [B,n,m] (destroyed),
**                in[1] (w) Q [B,qc,m] or NULL (mode "r"); k = min(m,n)
**  linalg_syevd  out V [B,n,n] (in place: A -> eigenvectors, when iarg[1]),
**                in[0] (w) eigenvalues [B,n] ascending, in[1] (w) info [B];
**                iarg[0] = 1: read the upper triangle
**  linalg_gesdd  out S [B,k] descending, in[0] A [B,n,m] (destroyed), in[1] (w)
**                U [B,uc,m] or NULL (values only), in[2] (w) V^T [B,n,vr],
**                in[3] (w) info [B]; uc = vr = k, or m and n (full_matrices)
**  linalg_geev  out W [B,n,2] (w) the eigenvalues (re, im) in LAPACK's order,
**                in[0] A [B,n,n] (destroyed), in[1] (w) V [B,n,n,2] or NULL
**                (values only): the eigenvectors as complex columns, column-
**                major (V[b][j][i] = entry i of vector j), unit 2-norm, in[2]
**                (w) info [B] (k > 0: the QR algorithm failed)
**  linalg_eig_backward  out gA [B,n,n] row-major, in[0] L [B,n,2], in[1] V
**                [B,n,n,2] row-major, in[2] the output gradient: gL [B,n,2]
**                (iarg[0] = 0) or gV [B,n,n,2] (iarg[0] = 1), in[3] (w) info
**                [B]: 1 the loss depends on an eigenvector's phase, 2 repeated
**                eigenvalues (gV), 3 V is singular
** (complex buffers: real tensors of the part dtype, (re, im) on a last axis
** of 2, the layout of c64/c128, so kernels never see a complex dtype)
** A kernel fails (-1) only for what the front end cannot rule out (memory,
** an interrupt); what the matrix is like (singular, not positive-definite,
** no convergence) goes to info for the front end to report.
*/
#ifndef NT_LINALG_INTERNAL_H
#define NT_LINALG_INTERNAL_H

#include "tensor/tinternal.h"
#include <stdio.h>
#include "linalg.h"

typedef struct {
  int getrf, getrs, potrf, trtrs, qr, syevd, gesdd;
  int geev, eig_backward;
} lin_op_ids;
extern lin_op_ids lin_ops;
void lin_init(void);                  /* registers the CPU kernels once */
void lin_register_cpu(void);          /* lkernels.c */
void lin_register_eig_cpu(void);      /* leigkern.c */
/* leigcomp.c: linalg_eig_backward's math from a device's own ops (one without
** the kernel): gA [B..., n, n] and the kernel's info codes, i32 on the CPU */
int lin_eig_backward_composed(nt_Tensor *l, nt_Tensor *v, nt_Tensor *g, int vecs, nt_Tensor **ga, nt_Tensor **info);

/* ---- llu.c: T^-1 B (T^-T B when trans) for triangular T, B with T's batch; no autograd */
nt_Tensor *lin_tri_raw(const char *op, nt_Tensor *t, nt_Tensor *b, bool upper, bool trans, bool unit);

/* ---- lcore.c */
/* f32/f64 check: other dtypes are refused naming op ("expected f32 or f64"). */
int lin_check_float(const char *op, const nt_Tensor *a);
/* a is [..., m, n] with ndim >= 2 (square when `square`) */
int lin_check_matrix(const char *op, const nt_Tensor *a, bool square);
/* a detached, contiguous copy [..., n, m] of a [..., m, n]: column-major a */
nt_Tensor *lin_colmajor(nt_Tensor *a);
/* the matrix a column-major buffer [..., c, r] holds, as a contiguous [..., r, c] */
nt_Tensor *lin_rowmajor(nt_Tensor *buf);
/* runs a kernel on dev; without a device kernel (a backend that has none
** yet) the buffers go through the host and LAPACK */
int lin_run(int op, nt_Device dev, nt_KernelArgs *a);
/* an error naming op and the batch element whose info is nonzero, with what
** (a printf format taking the info value) saying what it means; 0 when all
** info are 0.  batch/nb: the batch shape. */
int lin_check_info(const char *op, nt_Tensor *info, const int64_t *batch, int nb, const char *what);
/* i32 [batch...] on the CPU */
nt_Tensor *lin_info_tensor(const int64_t *batch, int nb, nt_Device dev);
int64_t lin_batch(const nt_Tensor *a);      /* product of all but the last two dims */
/* shape helpers for the autograd formulas (public ops, differentiable) */
nt_Tensor *lin_mT(nt_Tensor *a);                       /* transpose of the last two axes */
nt_Tensor *lin_mm(nt_Tensor *a, nt_Tensor *b);         /* matmul */
nt_Tensor *lin_diag(nt_Tensor *a);                     /* [..., n, n] -> [..., n] */
nt_Tensor *lin_diag_embed(nt_Tensor *v);               /* [..., n] -> [..., n, n] */
nt_Tensor *lin_eye_like(nt_Tensor *a, int64_t n);      /* [n, n] of a's dtype and device */
/* record a one-input node on out (when a requires grad); saves the given tensors */
nt_Tensor *lin_finish(nt_Tensor *out, const char *name, nt_BackwardFn fn, nt_Tensor *a, int nsave, nt_Tensor *const *save);
/* a + b, a - b, a * b releasing both arguments (NULL-safe chains) */
nt_Tensor *lin_add_(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *lin_sub_(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *lin_mul_(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *lin_mm_(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *lin_div_(nt_Tensor *a, nt_Tensor *b);

/* A batch loop (LIN_PARALLEL_FOR: a `for` statement) or a region with its own
** `omp for` inside (LIN_PARALLEL: a compound statement) that is an OpenMP
** region only when PAR holds.  Never `omp parallel if (PAR)`: with PAR false
** that still opens a (one-thread) region, the LAPACK call inside runs one level
** down, and libgomp starts fresh threads for every nested team instead of
** reusing its pool: OpenBLAS's own regions inside one svd of 512x512 at 2
** threads started 2,800 threads (3.5x slower than 1 thread; eig 256 4.6x). */
#define LIN_PARALLEL_FOR(par, ...) do { if (par) { _Pragma("omp parallel for") __VA_ARGS__ } else { __VA_ARGS__ } } while (0)
#define LIN_PARALLEL(par, ...) do { if (par) { _Pragma("omp parallel") __VA_ARGS__ } else { __VA_ARGS__ } } while (0)

#endif
