/*
** tautocast.c — automatic mixed precision (PyTorch's autocast, reduced to our ops).
**
** State: one thread-local dtype (-1 = off, else NT_F16 or NT_BF16), like grad
** mode.  Op front ends call NT_AUTOCAST(policy, CALL, inputs...) first thing:
** when autocast is on and the policy changes an input's dtype, the inputs are
** cast (nt_to_dtype: a normal differentiable op, so an f32 master weight gets
** an f32 gradient through ToDtypeBackward) and the front end calls itself on
** the cast inputs, where nothing needs casting any more.
**
**   NT_AUTOCAST_LOW   matmul, conv2d, attention: every floating input not in
**                     the autocast dtype is cast to it (f32 and f64; PyTorch
**                     leaves f64 alone, we cast it too); output low precision.
**   NT_AUTOCAST_F32   softmax, log_softmax, cross_entropy, layer_norm, mse_loss,
**                     sum, mean, prod, logsumexp, var/std, cumsum, exp, expm1,
**                     log, log1p, log2, pow, reciprocal, rsqrt, tan: f16/bf16
**                     inputs are upcast to f32; output f32.
**   everything else   ordinary type promotion (bf16 + f32 -> f32).
**
** Backward passes run with autocast off (tautograd.c): each backward op sees
** the dtypes its forward chose, as in PyTorch.
*/
#include "tinternal.h"

static _Thread_local int autocast_plus1 = 0;   /* dtype + 1; zero-init = off */

int nt_autocast_dtype(void) { return autocast_plus1 - 1; }

int nt_autocast_set(int dt) {
  int prev = autocast_plus1 - 1;
  if (dt != NT_F16 && dt != NT_BF16) dt = -1;  /* anything else (f32, -1): off */
  autocast_plus1 = dt + 1;
  return prev;
}

/* the dtype the policy wants for x under autocast dtype ac, or x's own */
static nt_DType wanted(int policy, int ac, const nt_Tensor *x) {
  if (!nt_dtype_is_float(x->dtype)) return x->dtype;
  if (policy == NT_AUTOCAST_LOW) return (nt_DType)ac;
  return x->dtype == NT_F16 || x->dtype == NT_BF16 ? NT_F32 : x->dtype;
}

int nt_autocast_inputs(int policy, int n, nt_Tensor *const *in, nt_Tensor **out) {
  int ac = autocast_plus1 - 1, changed = 0;
  if (ac < 0) return 0;
  for (int i = 0; i < n; i++) if (in[i] && wanted(policy, ac, in[i]) != in[i]->dtype) changed++;
  if (!changed) return 0;
  for (int i = 0; i < n; i++) {
    out[i] = in[i] ? nt_to_dtype(in[i], wanted(policy, ac, in[i])) : NULL;
    if (in[i] && !out[i]) { nt_autocast_release(i, out); return -1; }
  }
  return changed;
}

void nt_autocast_release(int n, nt_Tensor **casts) {
  for (int i = 0; i < n; i++) { nt_release(casts[i]); casts[i] = NULL; }
}
