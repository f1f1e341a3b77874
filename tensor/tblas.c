/*
** tblas.c — OpenBLAS's entry points, resolved on first use (tblas.h says why).
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "tblas.h"

#ifndef NABLA_OPENBLAS_LIB
#define NABLA_OPENBLAS_LIB "libopenblas.so.0"
#endif

static nt_Blas blas;
static void *blas_lib;
static pthread_once_t once = PTHREAD_ONCE_INIT;

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
}

const nt_Blas *nt_blas(void) {
  pthread_once(&once, load);
  return &blas;
}

void *nt_blas_sym(const char *name) {
  pthread_once(&once, load);
  return dlsym(blas_lib, name);
}
