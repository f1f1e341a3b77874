/*
** lib/ltnorm.c — builtins of the normalisations over channels: batch_norm,
** group_norm, instance_norm (tensor/nn/batchnorm.c, groupnorm.c).
** stdlib/nn.nbl's layers wrap them, their running statistics as buffers.
*/
#include "ltensor.h"
#include "tensor/nn/batchnorm.h"

/* an optional tensor argument: nil -> NULL */
static int opt_tensor(nb_VM *vm, Tmp *tp, const char *fname, const char *what, nb_Value v, nt_Tensor **out) {
  *out = NULL;
  if (v.t == NB_TNIL) return NB_OK;
  return (*out = nbT_arg(vm, tp, fname, what, v)) ? NB_OK : NB_ERR;
}

/* the arguments batch_norm and instance_norm share, in the same places:
** (x, running_mean, running_var, weight, bias, FLAG, momentum, eps), checked
** in this order; FLAG must be a bool (or nil where nil_flag) */
typedef struct { double momentum, eps; nt_Tensor *x, *rm, *rv, *w, *b; } StatsArgs;

static int stats_args(nb_VM *vm, Tmp *tp, const char *fname, const char *flag, bool nil_flag, nb_Value *args, StatsArgs *a) {
  a->momentum = 0.1; a->eps = 1e-5;
  /* the running statistics are updated in place: a list or number would be
  ** a temporary copy, and the update would be lost */
  for (int i = 1; i <= 2; i++)
    if (args[i].t != NB_TNIL && args[i].t != NB_TTENSOR)
      return nb_error_kind(vm, "TypeError", "%s: %s must be a tensor or nil, got %s", fname, i == 1 ? "running_mean" : "running_var",
                           nb_typename(args[i]));
  if (args[5].t != NB_TBOOL && !(nil_flag && args[5].t == NB_TNIL))
    return nb_error_kind(vm, "TypeError", "%s: %s must be a bool, got %s", fname, flag, nb_typename(args[5]));
  if (args[6].t != NB_TNIL && nbT_num_arg(vm, fname, "momentum", args[6], &a->momentum)) return NB_ERR;
  if (nbT_num_arg(vm, fname, "eps", args[7], &a->eps)) return NB_ERR;
  if (!(a->x = nbT_arg(vm, tp, fname, "input", args[0]))) return NB_ERR;
  return opt_tensor(vm, tp, fname, "running_mean", args[1], &a->rm) || opt_tensor(vm, tp, fname, "running_var", args[2], &a->rv) ||
                 opt_tensor(vm, tp, fname, "weight", args[3], &a->w) || opt_tensor(vm, tp, fname, "bias", args[4], &a->b)
             ? NB_ERR : NB_OK;
}

/* batch_norm(x, running_mean=nil, running_var=nil, weight=nil, bias=nil,
** training=false, momentum=0.1, eps=1e-5): torch.nn.functional.batch_norm */
static int b_batch_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "batch_norm"; Tmp tp = {0};
  StatsArgs a;
  if (stats_args(vm, &tp, fname, "training", true, args, &a)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_batch_norm(a.x, a.rm, a.rv, a.w, a.b, nb_truthy(args[5]), a.momentum, a.eps));
}

/* group_norm(x, num_groups, weight=nil, bias=nil, eps=1e-5) */
static int b_group_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "group_norm"; Tmp tp = {0};
  double g, eps;
  if (nbT_num_arg(vm, fname, "num_groups", args[1], &g) || nbT_num_arg(vm, fname, "eps", args[4], &eps)) return NB_ERR;
  if (!(g >= 1 && g <= 1e15 && g == (double)(int64_t)g)) return nb_error_kind(vm, "ValueError", "group_norm: num_groups must be a positive integer, got %g", g);
  TENSOR_ARG(x, 0, "input");
  nt_Tensor *w, *b;
  if (opt_tensor(vm, &tp, fname, "weight", args[2], &w) || opt_tensor(vm, &tp, fname, "bias", args[3], &b)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_group_norm(x, (int64_t)g, w, b, eps));
}
/* instance_norm(x, running_mean=nil, running_var=nil, weight=nil, bias=nil,
** use_input_stats=true, momentum=0.1, eps=1e-5) */
static int b_instance_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "instance_norm"; Tmp tp = {0};
  StatsArgs a;
  if (stats_args(vm, &tp, fname, "use_input_stats", false, args, &a)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_instance_norm(a.x, a.rm, a.rv, a.w, a.b, args[5].u.b, a.momentum, a.eps));
}

static nb_Builtin norm_builtins[] = {
  { "batch_norm", b_batch_norm, "x, running_mean=nil, running_var=nil, weight=nil, bias=nil, training=false, momentum=0.1, eps=1e-5",
    "batch_norm(x, running_mean=nil, running_var=nil, weight=nil, bias=nil, training=false, momentum=0.1, eps=1e-5): torch.nn.functional.batch_norm over x [N, C, ...]: each channel normalised by the batch's mean and biased variance (training; running_mean/running_var, when given, updated in place with momentum and the unbiased variance) or by running_mean/running_var (training=false), then scaled by weight and shifted by bias" },
  { "group_norm", b_group_norm, "x, num_groups, weight=nil, bias=nil, eps=1e-5",
    "group_norm(x, num_groups, weight=nil, bias=nil, eps=1e-5): torch.nn.functional.group_norm over x [N, C, ...]: each sample's groups of C/num_groups channels normalised by their own mean and biased variance, then scaled by weight [C] and shifted by bias [C]" },
  { "instance_norm", b_instance_norm, "x, running_mean=nil, running_var=nil, weight=nil, bias=nil, use_input_stats=true, momentum=0.1, eps=1e-5",
    "instance_norm(x, running_mean=nil, running_var=nil, weight=nil, bias=nil, use_input_stats=true, momentum=0.1, eps=1e-5): torch.nn.functional.instance_norm over x [N, C, ...]: each sample's channels normalised over their spatial values (running_mean/running_var, when given, updated in place with the batch's average), or by the running statistics when use_input_stats=false" },
  { NULL, NULL, NULL, NULL }
};

void nbT_register_norm(void) { nbC_register(norm_builtins); }
