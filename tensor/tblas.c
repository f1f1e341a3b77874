/*
** tblas.c — OpenBLAS's entry points, resolved on first use (tblas.h says why).
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "tblas.h"
#include "tensor.h"
#include "tonednn.h"

#ifndef NABLA_OPENBLAS_LIB
#define NABLA_OPENBLAS_LIB "libopenblas.so.0"
#endif

static nt_Blas blas;
static void *blas_lib;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void blas_threads(int n);
static int requested_threads;   /* set_num_threads's; 0: the environment's (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS) */

static void *sym(void *lib, const char *path, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) { fprintf(stderr, "nabla: %s has no %s: %s\n", path, name, dlerror()); abort(); }
  return p;
}

static void load(void) {
  const char *path = getenv("NABLA_OPENBLAS");   /* a kit carrying its own (tools/gpu-session.sh) */
  if (!path || !*path) path = NABLA_OPENBLAS_LIB;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "nabla: cannot load OpenBLAS (%s): %s\n", path, dlerror()); abort(); }
  blas_lib = lib;
  blas.sgemm = (__typeof__(cblas_sgemm) *)sym(lib, path, "cblas_sgemm");
  blas.dgemm = (__typeof__(cblas_dgemm) *)sym(lib, path, "cblas_dgemm");
  blas.set_num_threads = (void (*)(int))dlsym(lib, "openblas_set_num_threads");   /* OpenBLAS's own: optional */
  blas_threads(requested_threads);
}

const nt_Blas *nt_blas(void) {
  pthread_once(&once, load);
  return &blas;
}

void *nt_blas_sym(const char *name) {
  pthread_once(&once, load);
  return dlsym(blas_lib, name);
}

/* ---- the CPU thread count (set_num_threads) ---------------------------------
** OpenMP's for this thread's parallel regions (the VM's thread runs every
** kernel), and OpenBLAS's: told now when it is loaded, else as it loads. */
static void blas_threads(int n) {
  if (n > 0 && blas.set_num_threads) blas.set_num_threads(n);
}

void nt_set_num_threads(int n) {
  if (n < 1) return;
  requested_threads = n;
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  if (blas.sgemm) blas_threads(n);   /* loaded (nt_blas's once ran); else load() applies it */
}

void nt_thread_counts(int *openmp, int *openblas, int *onednn) {
  int (*get)(void) = (int (*)(void))nt_blas_sym("openblas_get_num_threads");
  *openmp = nt_num_threads();
  *openblas = get ? get() : -1;
  *onednn = nt_onednn_threads();
}

int nt_num_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
