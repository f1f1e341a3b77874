/*
** lib/loptim.c — the optimizers' fused updates (adamw_update, sgd_update)
** and the gradient utilities of a training step (unscale_grads,
** clip_grad_norm), over pytrees of parameters; stdlib/optim.nbl builds the
** optimizers on them.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ltensor.h"
#include "tensor/tdevice.h"   /* nt_OptimArgs, the fused optimizer ops */
#include "tensor/tshadow.h"   /* autocast's shadow weights: their counters */

/* ------------------------------------------------------------ builtins: optimizers
** One builtin per optimizer updates every parameter of a pytree in place
** through one fused op (tensor/toptim.c on the CPU, one launch on the GPU).
** params, grads (nil: each parameter's .grad) and state trees share one
** structure. */
static int flat_params(nb_VM *vm, const char *fname, nb_Value *trees, int ntrees, Leaves *ls) {
  for (int i = 0; i < ntrees; i++) {
    if (trees[i].t == NB_TNIL) continue;
    if (nbT_leaves(vm, trees[i], &ls[i])) return NB_ERR;
    if (i && ls[i].n != ls[0].n) return nb_error_kind(vm, "ValueError", "%s: the trees have %d and %d tensors (they must match the parameters)", fname, ls[0].n, ls[i].n);
  }
  return nbT_drop_ties(vm, ls, ntrees);   /* a tied parameter is updated once */
}
/* grads from the grads tree, or each parameter's .grad */
static nt_Tensor **grads_of(Leaves *params, Leaves *grads) {
  nt_Tensor **g = malloc(sizeof(nt_Tensor *) * (size_t)(params->n + 1));
  if (g) for (int k = 0; k < params->n; k++) g[k] = grads->n ? grads->t[k] : nt_grad(params->t[k]);
  return g;
}

/* One fused update over the trees args[0..ntrees): params, grads, then the
** state trees (exp_avg, exp_avg_sq), flattened in the same order with ties
** dropped; with_state: the first state tree is used (SGD without momentum
** has none). */
static int run_update(nb_VM *vm, const char *fname, nb_Value *args, int ntrees, nt_OptimArgs *o, bool with_state, int (*update)(nt_OptimArgs *), nb_Value *out) {
  Leaves ls[4] = {{0}};
  int st = flat_params(vm, fname, args, ntrees, ls);
  nt_Tensor **g = st ? NULL : grads_of(&ls[0], &ls[1]);
  if (!st && !g) st = nb_error(vm, "out of memory");
  if (!st) {
    o->n = ls[0].n; o->params = ls[0].t; o->grads = g;
    o->exp_avg = with_state ? ls[2].t : NULL; o->exp_avg_sq = ntrees > 3 ? ls[3].t : NULL;
    if (update(o)) st = nbT_err(vm);
  }
  free(g);
  for (int i = 0; i < ntrees; i++) free(ls[i].t);
  *out = nb_nil();
  return st;
}

/* adamw_update(params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step) */
static int b_adamw_update(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "adamw_update";
  nt_OptimArgs o; memset(&o, 0, sizeof o);
  if (args[4].t == NB_TTENSOR) o.lr_dev = T(args[4]);   /* a device scalar (compile: tcompile.h) */
  else if (nbT_num_arg(vm, fname, "lr", args[4], &o.lr)) return NB_ERR;
  if (nbT_num_arg(vm, fname, "beta1", args[5], &o.beta1) || nbT_num_arg(vm, fname, "beta2", args[6], &o.beta2) ||
      nbT_num_arg(vm, fname, "eps", args[7], &o.eps) || nbT_num_arg(vm, fname, "weight_decay", args[8], &o.weight_decay) || nbT_num_arg(vm, fname, "step", args[9], &o.step)) return NB_ERR;
  if (args[2].t == NB_TNIL || args[3].t == NB_TNIL) return nb_error_kind(vm, "TypeError", "%s: needs the m and v state trees", fname);
  return run_update(vm, fname, args, 4, &o, true, nt_optim_adamw, out);
}
/* sgd_update(params, grads, bufs, lr, momentum=0, nesterov=false, weight_decay=0) */
static int b_sgd_update(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "sgd_update";
  nt_OptimArgs o; memset(&o, 0, sizeof o);
  if (nbT_num_arg(vm, fname, "lr", args[3], &o.lr) || (args[4].t != NB_TNIL && nbT_num_arg(vm, fname, "momentum", args[4], &o.beta1)) ||
      (args[6].t != NB_TNIL && nbT_num_arg(vm, fname, "weight_decay", args[6], &o.weight_decay))) return NB_ERR;
  o.nesterov = nb_truthy(args[5]);
  if (o.beta1 != 0 && args[2].t == NB_TNIL) return nb_error_kind(vm, "ValueError", "%s: momentum needs a buffer tree", fname);
  return run_update(vm, fname, args, 3, &o, o.beta1 != 0, nt_optim_sgd, out);
}
/* clip_grad_norm(grads_or_params, max_norm): scales gradients in place so
** their global L2 norm is at most max_norm; returns the norm before clipping. */
static int b_clip_grad_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "clip_grad_norm";
  double maxn;
  if (nbT_num_arg(vm, fname, "max_norm", args[1], &maxn)) return NB_ERR;
  Leaves ls = {0};
  if (nbT_leaves(vm, args[0], &ls) || nbT_drop_ties(vm, &ls, 1)) { free(ls.t); return NB_ERR; }
  for (int k = 0; k < ls.n; k++)   /* a parameter's gradient, or the tensor itself */
    if (nt_grad(ls.t[k])) ls.t[k] = nt_grad(ls.t[k]);
  double norm;
  int bad = nt_clip_grad_norm(ls.t, ls.n, maxn, &norm);
  free(ls.t);
  if (bad) return nbT_err(vm);
  *out = nb_flt(norm);
  return NB_OK;
}

/* unscale_grads(grads, inv_scale): multiplies every floating tensor of the
** tree by inv_scale IN PLACE and returns whether all of them are finite (the
** dynamic loss scaler in stdlib/optim.nbl).  The check is fused: each tensor
** adds sum(g * 0) — 0 when finite, NaN when it holds an inf or a nan — into
** one 0-d total, read back once (a single device synchronisation). */
static int b_unscale_grads(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "unscale_grads";
  double inv;
  if (nbT_num_arg(vm, fname, "inv_scale", args[1], &inv)) return NB_ERR;
  Leaves ls = {0};
  if (nbT_leaves(vm, args[0], &ls) || nbT_drop_ties(vm, &ls, 1)) { free(ls.t); return NB_ERR; }
  bool prev = nt_set_grad_enabled(false);
  int prev_ac = nt_autocast_set(-1);
  nt_Tensor *total = NULL;
  int bad = 0;
  for (int k = 0; k < ls.n && !bad; k++) {
    nt_Tensor *g = ls.t[k];
    if (!nt_dtype_is_float(g->dtype)) continue;
    if (inv != 1) {
      nt_Tensor *sc = nt_binary_scalar_ex(NT_OP_MUL, g, inv, NT_SCALAR_FLOAT);
      bad = !sc || nt_copy_(g, sc);
      nt_release(sc);
      if (bad) break;
    }
    nt_Tensor *z = nt_binary_scalar_ex(NT_OP_MUL, g, 0.0, NT_SCALAR_FLOAT), *s = z ? nt_sum(z, NULL, 0, false) : NULL;
    nt_release(z);
    if (!s) { bad = 1; break; }
    if (total) { nt_Tensor *t2 = nt_add(total, s); nt_release(s); nt_release(total); total = t2; bad = !t2; }
    else total = s;
  }
  double v = 0;
  if (!bad && total && nt_item(total, &v)) bad = 1;
  nt_release(total);
  nt_autocast_set(prev_ac);
  nt_set_grad_enabled(prev);
  free(ls.t);
  if (bad) return nbT_err(vm);
  *out = nb_bool(v == 0);
  return NB_OK;
}

/* autocast_shadow_stats(): {entries, casts} of this thread's cache of
** low-precision weight copies (tensor/tshadow.h): how many weights have one,
** and how many casts filled or refreshed them since the process started (a
** training step with fresh shadows adds none). */
static int b_autocast_shadow_stats(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  int64_t e = 0, c = 0;
  nt_shadow_stats(&e, &c);
  nb_Rec *r = nbR_new(2);
  nbR_set_cstr(r, "entries", nb_int((double)e)); nbR_set_cstr(r, "casts", nb_int((double)c));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* ------------------------------------------------------------ the table */
static nb_Builtin optim_builtins[] = {
  { "adamw_update", b_adamw_update, "params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step", "adamw_update(...): one AdamW step over every tensor of the trees, in place (used by optim)" },
  { "sgd_update", b_sgd_update, "params, grads, bufs, lr, momentum=0, nesterov=false, weight_decay=0", "sgd_update(...): one SGD step over every tensor of the trees, in place (used by optim)" },
  { "unscale_grads", b_unscale_grads, "grads, inv_scale", "unscale_grads(grads, inv_scale): multiplies every gradient of the tree by inv_scale in place; true when all are finite (used by optim.grad_scaler)" },
  { "clip_grad_norm", b_clip_grad_norm, "tree, max_norm", "clip_grad_norm(tree, max_norm): scales gradients to a global L2 norm <= max_norm; returns the norm" },
  { "autocast_shadow_stats", b_autocast_shadow_stats, "", "autocast_shadow_stats(): {entries, casts} of the cached bf16/f16 copies of parameters autocast multiplies by (refreshed only when a weight is written other than by the optimizer)" },
  { NULL, NULL, NULL, NULL }
};

void nbT_register_optim(void) { nbC_register(optim_builtins); }
