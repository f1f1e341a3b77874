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

/* ---- dynamic loss scaling on the device (optim.grad_scaler) ------------------
** torch's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_.
** The scaler's state is one contiguous f64 tensor of NT_AMP_STATE elements
** on the gradients' device: {scale, growth_tracker, found_inf}.  Ops
** "amp_unscale" and "amp_update_scale", extra = nt_AmpArgs (CPU kernel in
** toptim.c, one multi-tensor GPU kernel in cuda/optim.cu); neither reads
** anything back to the host, so a step that uses them can be captured.
**   amp_unscale:      found_inf = 0; then every gradient (contiguous float
**                     tensors; others are skipped) g = g * (C)(1 / scale) in
**                     place, C its compute type (f32 for 16-bit), and
**                     found_inf = 1 when any stored result is inf or nan
**   amp_update_scale: found_inf != 0: scale *= backoff, tracker = 0;
**                     else tracker += 1, and when tracker >= interval:
**                     scale *= growth (kept when the product would pass the
**                     f32 maximum), tracker = 0
** The optimizer's skip: AdamW's device scalars (nt_OptimArgs.lr_dev) may
** have NT_OPTIM_DEV_SKIP elements {lr, step, found_inf, skipped}; the
** update then reads found_inf there: when it is set the update leaves
** parameters, moments and shadows untouched and adds 1 to `skipped`
** instead; the bias corrections use step - skipped (the steps applied);
** found_inf is cleared either way (the scaler copies its flag in before
** each step). */
#define NT_AMP_STATE 3
#define NT_OPTIM_DEV_SKIP 4

typedef struct nt_AmpArgs {
  int n;                      /* gradients (amp_unscale) */
  nt_Tensor **grads;
  nt_Tensor *state;           /* f64 {scale, growth_tracker, found_inf} */
  double growth, backoff, interval;   /* amp_update_scale */
} nt_AmpArgs;

/* 0, or -1 + error (a wrong state tensor, a gradient on another device) */
int nt_amp_unscale(nt_Tensor **grads, int n, nt_Tensor *state);
int nt_amp_update_scale(nt_Tensor *state, double growth, double backoff, double interval);

#endif
