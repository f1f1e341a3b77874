/*
** linalg/lapack.c — resolves LAPACK's routines from OpenBLAS (lapack.h).
*/
#include "lapack.h"
#include "tensor/tblas.h"
#include "tensor/tensor.h"
#include <pthread.h>

static nt_Lapack lp;
static const char *missing;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *sym(const char *name) {
  void *p = nt_blas_sym(name);
  if (!p && !missing) missing = name;
  return p;
}

#define LOAD(P)                                                                          \
  *(void **)&lp.P##getrf = sym(#P "getrf_"); *(void **)&lp.P##getrs = sym(#P "getrs_"); \
  *(void **)&lp.P##potrf = sym(#P "potrf_"); *(void **)&lp.P##trtrs = sym(#P "trtrs_"); \
  *(void **)&lp.P##geqrf = sym(#P "geqrf_"); *(void **)&lp.P##orgqr = sym(#P "orgqr_"); \
  *(void **)&lp.P##syevd = sym(#P "syevd_"); *(void **)&lp.P##gesdd = sym(#P "gesdd_");

#define LOAD_EIG(P, Q)                                                                    \
  *(void **)&lp.P##geev = sym(#P "geev_"); *(void **)&lp.Q##gemm = sym(#Q "gemm_");      \
  *(void **)&lp.Q##getrf = sym(#Q "getrf_"); *(void **)&lp.Q##getrs = sym(#Q "getrs_");

static void load(void) {
  LOAD(s)
  LOAD(d)
  LOAD_EIG(s, c)
  LOAD_EIG(d, z)
}

const nt_Lapack *nt_lapack(void) {
  pthread_once(&once, load);
  if (missing) {
    nt_error_set("linalg: the BLAS library has no LAPACK routine %s (an OpenBLAS built without LAPACK?)", missing);
    return NULL;
  }
  return &lp;
}
