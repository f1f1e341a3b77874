/*
** toptim.h — the argument block toptim.c hands the fused optimizer kernels
** ("adamw_update", "sgd_update": the CPU kernel in toptim.c, the GPU one in
** cuda/optim.cu).
**
** nt_KernelArgs.extra is an nt_OptimArgs * (tensor/tdevice.h) as before, or,
** when niarg == 1 and iarg[0] == NT_OPTIM_KARGS, an nt_OptimKernelArgs *:
** the same arguments plus, per parameter, the low-precision shadow to write
** with it (tensor/tshadow.h: the bf16/f16 copy autocast multiplies by), so
** the update and the copy are one pass over the weights.
*/
#ifndef NT_TOPTIM_H
#define NT_TOPTIM_H

#include "tdevice.h"
#include "tbackend.h"

#define NT_OPTIM_KARGS 0x4f50544bLL   /* "OPTK" */

typedef struct nt_OptimKernelArgs {
  const nt_OptimArgs *o;
  nt_Tensor **shadow;   /* o->n entries: contiguous bf16/f16 copy of params[k] (same numel) to write, or NULL */
} nt_OptimKernelArgs;

/* the kernel's view of extra (either contract); *shadow NULL when none */
static inline const nt_OptimArgs *nt_optim_kargs(const struct nt_KernelArgs *a, nt_Tensor ***shadow) {
  if (a->niarg == 1 && a->iarg[0] == NT_OPTIM_KARGS) {
    const nt_OptimKernelArgs *k = (const nt_OptimKernelArgs *)a->extra;
    *shadow = k->shadow;
    return k->o;
  }
  *shadow = NULL;
  return (const nt_OptimArgs *)a->extra;
}

#endif
