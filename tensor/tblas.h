/*
** tblas.h — OpenBLAS, loaded on first use (private to tensor/).
**
** The executable does not link OpenBLAS: binding its ~14,000 data
** relocations was two thirds of the process's start (8-12 ms of a `print(1)`,
** against Lua's 1 ms: bench/results/2026-11-26-vm-speed.md), paid by every
** script that never multiplies a matrix.  nt_blas() dlopens the library the
** build found (NABLA_OPENBLAS_LIB, or the file NABLA_OPENBLAS names in the
** environment) the first time a GEMM runs; it reads
** OPENBLAS_NUM_THREADS then, so whoever sets the variable before (dist's
** worker launch) still sets the thread count.  A library that cannot be
** loaded is a broken install, as a missing shared library was before: the
** process stops with the loader's message.
*/
#ifndef NABLA_TBLAS_H
#define NABLA_TBLAS_H
#include <cblas.h>

typedef struct {
  __typeof__(cblas_sgemm) *sgemm;
  __typeof__(cblas_dgemm) *dgemm;
  void (*set_num_threads)(int);   /* openblas_set_num_threads, NULL when the library has none */
} nt_Blas;

const nt_Blas *nt_blas(void);
/* Any other entry point of the same library (LAPACK's Fortran symbols,
** tensor/linalg/lapack.c): loads it on first use; NULL when it has no `name`. */
void *nt_blas_sym(const char *name);

#endif
