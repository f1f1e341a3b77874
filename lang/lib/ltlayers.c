/*
** lib/ltlayers.c — builtins of issue 29's layers, torch.nn.functional's names
** and argument names: the parametrised activations and prelu
** (tensor/nn/activation.c), the losses (tensor/nn/loss.c), pad, interpolate,
** adaptive_avg_pool1d/2d, unfold/fold and index_add (tensor/nn/resample.c).
** stdlib/nn.nbl's layers (nn.leaky_relu(), nn.bce_loss(), ...) wrap them.
*/
#include <string.h>
#include "ltensor.h"
#include "tensor/nn/layers.h"
#include "tensor/nn/actmath.h"

/* ---- activations ---------------------------------------------------------- */

/* a number argument that must be finite (nil: dflt) */
static int finite_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, double dflt, double *out) {
  *out = dflt;
  if (v.t == NB_TNIL) return NB_OK;
  if (nbT_num_arg(vm, fname, what, v, out)) return NB_ERR;
  if (!isfinite(*out)) return nb_error_kind(vm, "ValueError", "%s: %s must be a finite number, got %g", fname, what, *out);
  return NB_OK;
}

static int act(nb_VM *vm, const char *fname, int kind, nb_Value x, double p0, double p1, double p2, nb_Value *out) {
  Tmp tp = {0};
  nt_Tensor *t = nbT_arg(vm, &tp, fname, "input", x);
  if (!t) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_activation(fname, kind, t, p0, p1, p2));
}

static int b_leaky_relu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; double s;
  if (finite_arg(vm, "leaky_relu", "negative_slope", args[1], 0.01, &s)) return NB_ERR;
  return act(vm, "leaky_relu", NT_ACT_LEAKY_RELU, args[0], s, 0, 0, out);
}
static int b_elu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; double al;
  if (finite_arg(vm, "elu", "alpha", args[1], 1.0, &al)) return NB_ERR;
  return act(vm, "elu", NT_ACT_ELU, args[0], al, 1, 1, out);
}
static int b_selu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;   /* torch's constants (Klambauer et al. 2017) */
  return act(vm, "selu", NT_ACT_ELU, args[0], 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1, out);
}
static int b_celu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; double al;
  if (finite_arg(vm, "celu", "alpha", args[1], 1.0, &al)) return NB_ERR;
  if (al == 0) return nb_error_kind(vm, "ValueError", "celu: alpha must not be 0");
  return act(vm, "celu", NT_ACT_ELU, args[0], al, 1, 1 / al, out);
}
static int b_softplus(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; double beta, thr;
  if (finite_arg(vm, "softplus", "beta", args[1], 1.0, &beta) || finite_arg(vm, "softplus", "threshold", args[2], 20.0, &thr)) return NB_ERR;
  if (beta == 0) return nb_error_kind(vm, "ValueError", "softplus: beta must not be 0");
  return act(vm, "softplus", NT_ACT_SOFTPLUS, args[0], beta, thr, 0, out);
}
static int b_logsigmoid(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return act(vm, "logsigmoid", NT_ACT_LOGSIGMOID, args[0], 0, 0, 0, out); }
static int b_mish(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return act(vm, "mish", NT_ACT_MISH, args[0], 0, 0, 0, out); }
static int b_hardswish(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return act(vm, "hardswish", NT_ACT_HARDSWISH, args[0], 0, 0, 0, out); }
static int b_hardsigmoid(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return act(vm, "hardsigmoid", NT_ACT_HARDSIGMOID, args[0], 0, 0, 0, out); }
static int b_hardtanh(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; double lo, hi;
  if (finite_arg(vm, "hardtanh", "min_val", args[1], -1.0, &lo) || finite_arg(vm, "hardtanh", "max_val", args[2], 1.0, &hi)) return NB_ERR;
  if (lo > hi) return nb_error_kind(vm, "ValueError", "hardtanh: min_val (%g) must not be greater than max_val (%g)", lo, hi);
  return act(vm, "hardtanh", NT_ACT_HARDTANH, args[0], lo, hi, 0, out);
}
static int b_prelu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "prelu"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(w, 1, "weight");
  DONE(nt_prelu(x, w));
}

/* ---- losses --------------------------------------------------------------- */

static int reduction_arg(nb_VM *vm, const char *fname, nb_Value v, bool batchmean, nt_Reduction *out) {
  static const char *names[] = {"none", "mean", "sum", "batchmean"};
  *out = NT_RED_MEAN;
  if (v.t == NB_TNIL) return NB_OK;
  if (v.t == NB_TSTR)
    for (int i = 0; i < (batchmean ? 4 : 3); i++)
      if (!strcmp(nb_str(v)->data, names[i])) { *out = (nt_Reduction)i; return NB_OK; }
  return nb_error_kind(vm, "ValueError", "%s: reduction must be \"none\", \"mean\"%s or \"sum\", got %s%s%s", fname,
                       batchmean ? ", \"batchmean\"" : "", v.t == NB_TSTR ? "\"" : "",
                       v.t == NB_TSTR ? nb_str(v)->data : nb_typename(v), v.t == NB_TSTR ? "\"" : "");
}
/* an optional tensor argument: nil -> NULL */
static int opt_tensor(nb_VM *vm, Tmp *tp, const char *fname, const char *what, nb_Value v, nt_Tensor **out) {
  *out = NULL;
  if (v.t == NB_TNIL) return NB_OK;
  return (*out = nbT_arg(vm, tp, fname, what, v)) ? NB_OK : NB_ERR;
}

/* binary_cross_entropy(input, target, weight=nil, reduction="mean") */
static int b_bce(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "binary_cross_entropy"; Tmp tp = {0}; nt_Reduction red; nt_Tensor *w;
  if (reduction_arg(vm, fname, args[3], false, &red)) return NB_ERR;
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(t, 1, "target");
  if (opt_tensor(vm, &tp, fname, "weight", args[2], &w)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_binary_cross_entropy(x, t, w, red));
}
/* binary_cross_entropy_with_logits(input, target, weight=nil, reduction="mean", pos_weight=nil) */
static int b_bce_logits(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "binary_cross_entropy_with_logits"; Tmp tp = {0}; nt_Reduction red; nt_Tensor *w, *pw;
  if (reduction_arg(vm, fname, args[3], false, &red)) return NB_ERR;
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(t, 1, "target");
  if (opt_tensor(vm, &tp, fname, "weight", args[2], &w) || opt_tensor(vm, &tp, fname, "pos_weight", args[4], &pw)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_bce_with_logits(x, t, w, pw, red));
}
/* nll_loss(input, target, weight=nil, ignore_index=-100, reduction="mean") */
static int b_nll_loss(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "nll_loss"; Tmp tp = {0}; nt_Reduction red; nt_Tensor *w; int64_t ig = -100;
  if (reduction_arg(vm, fname, args[4], false, &red)) return NB_ERR;
  if (args[3].t != NB_TNIL && nbT_int_arg(vm, fname, "ignore_index", args[3], &ig)) return NB_ERR;
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(t, 1, "target");
  if (opt_tensor(vm, &tp, fname, "weight", args[2], &w)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_nll_loss(x, t, w, ig, red));
}
/* kl_div(input, target, reduction="mean", log_target=false) */
static int b_kl_div(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "kl_div"; Tmp tp = {0}; nt_Reduction red;
  if (reduction_arg(vm, fname, args[2], true, &red)) return NB_ERR;
  if (args[3].t != NB_TBOOL) return nb_error_kind(vm, "TypeError", "kl_div: log_target must be a bool, got %s", nb_typename(args[3]));
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(t, 1, "target");
  DONE(nt_kl_div(x, t, red, args[3].u.b));
}
/* smooth_l1_loss(input, target, reduction="mean", beta=1.0) */
static int b_smooth_l1(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "smooth_l1_loss"; Tmp tp = {0}; nt_Reduction red; double beta;
  if (reduction_arg(vm, fname, args[2], false, &red) || finite_arg(vm, fname, "beta", args[3], 1.0, &beta)) return NB_ERR;
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(t, 1, "target");
  DONE(nt_smooth_l1_loss(x, t, red, beta));
}
/* huber_loss(input, target, reduction="mean", delta=1.0) */
static int b_huber(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "huber_loss"; Tmp tp = {0}; nt_Reduction red; double delta;
  if (reduction_arg(vm, fname, args[2], false, &red) || finite_arg(vm, fname, "delta", args[3], 1.0, &delta)) return NB_ERR;
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(t, 1, "target");
  DONE(nt_huber_loss(x, t, red, delta));
}
/* margin_ranking_loss(input1, input2, target, margin=0, reduction="mean") */
static int b_margin_ranking(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "margin_ranking_loss"; Tmp tp = {0}; nt_Reduction red; double m;
  if (reduction_arg(vm, fname, args[4], false, &red) || finite_arg(vm, fname, "margin", args[3], 0.0, &m)) return NB_ERR;
  TENSOR_ARG(a, 0, "input1"); TENSOR_ARG(b, 1, "input2"); TENSOR_ARG(y, 2, "target");
  DONE(nt_margin_ranking_loss(a, b, y, m, red));
}
/* cosine_embedding_loss(input1, input2, target, margin=0, reduction="mean") */
static int b_cosine_embedding(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cosine_embedding_loss"; Tmp tp = {0}; nt_Reduction red; double m;
  if (reduction_arg(vm, fname, args[4], false, &red) || finite_arg(vm, fname, "margin", args[3], 0.0, &m)) return NB_ERR;
  TENSOR_ARG(a, 0, "input1"); TENSOR_ARG(b, 1, "input2"); TENSOR_ARG(y, 2, "target");
  DONE(nt_cosine_embedding_loss(a, b, y, m, red));
}

/* ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=false) */
static int b_ctc_loss(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "ctc_loss"; Tmp tp = {0}; nt_Reduction red; int64_t blank = 0;
  if (reduction_arg(vm, fname, args[5], false, &red)) return NB_ERR;
  if (args[4].t != NB_TNIL && nbT_int_arg(vm, fname, "blank", args[4], &blank)) return NB_ERR;
  if (args[6].t != NB_TBOOL) return nb_error_kind(vm, "TypeError", "ctc_loss: zero_infinity must be a bool, got %s", nb_typename(args[6]));
  TENSOR_ARG(lp, 0, "log_probs"); TENSOR_ARG(tg, 1, "targets"); TENSOR_ARG(il, 2, "input_lengths"); TENSOR_ARG(tl, 3, "target_lengths");
  DONE(nt_ctc_loss(lp, tg, il, tl, blank, red, args[6].u.b));
}

static nb_Builtin layer_builtins[] = {
  { "leaky_relu", b_leaky_relu, "x, negative_slope=0.01", "leaky_relu(x, negative_slope=0.01): F.leaky_relu: x > 0 ? x : negative_slope * x" },
  { "elu", b_elu, "x, alpha=1.0", "elu(x, alpha=1.0): F.elu: x > 0 ? x : alpha * (exp(x) - 1)" },
  { "selu", b_selu, "x", "selu(x): F.selu: scale * elu(x, alpha) with torch's scale 1.0507... and alpha 1.6733..." },
  { "celu", b_celu, "x, alpha=1.0", "celu(x, alpha=1.0): F.celu: x > 0 ? x : alpha * (exp(x / alpha) - 1)" },
  { "softplus", b_softplus, "x, beta=1, threshold=20", "softplus(x, beta=1, threshold=20): F.softplus: log(1 + exp(beta x)) / beta, x where beta x > threshold" },
  { "logsigmoid", b_logsigmoid, "x", "logsigmoid(x): F.logsigmoid: log(sigmoid(x)), stable for large |x|" },
  { "mish", b_mish, "x", "mish(x): F.mish: x * tanh(softplus(x))" },
  { "hardtanh", b_hardtanh, "x, min_val=-1.0, max_val=1.0", "hardtanh(x, min_val=-1.0, max_val=1.0): F.hardtanh: x clamped to [min_val, max_val]" },
  { "hardswish", b_hardswish, "x", "hardswish(x): F.hardswish: x * relu6(x + 3) / 6" },
  { "hardsigmoid", b_hardsigmoid, "x", "hardsigmoid(x): F.hardsigmoid: relu6(x + 3) / 6" },
  { "prelu", b_prelu, "x, weight", "prelu(x, weight): F.prelu: x > 0 ? x : weight[c] * x, weight with 1 or x.shape[1] (channel) entries, learnable" },
  { "binary_cross_entropy", b_bce, "input, target, weight=nil, reduction=\"mean\"",
    "binary_cross_entropy(input, target, weight=nil, reduction=\"mean\"): F.binary_cross_entropy of probabilities input in [0, 1] (logs held at >= -100 as torch's); reduction \"none\", \"mean\" or \"sum\"" },
  { "binary_cross_entropy_with_logits", b_bce_logits, "input, target, weight=nil, reduction=\"mean\", pos_weight=nil",
    "binary_cross_entropy_with_logits(input, target, weight=nil, reduction=\"mean\", pos_weight=nil): F.binary_cross_entropy_with_logits: sigmoid and BCE in one stable formula; pos_weight weighs the positive term (broadcast over the last axis)" },
  { "nll_loss", b_nll_loss, "input, target, weight=nil, ignore_index=-100, reduction=\"mean\"",
    "nll_loss(input, target, weight=nil, ignore_index=-100, reduction=\"mean\"): F.nll_loss of log-probabilities input [N, C, ...] (or [C]) at integer target [N, ...]: -weight[t] * input[n, t]; mean divides by the summed weights of the targets not ignored" },
  { "kl_div", b_kl_div, "input, target, reduction=\"mean\", log_target=false",
    "kl_div(input, target, reduction=\"mean\", log_target=false): F.kl_div of log-probabilities input: target * (log(target) - input) (log_target: exp(target) * (target - input)); reduction also \"batchmean\" (sum / input.shape[0])" },
  { "smooth_l1_loss", b_smooth_l1, "input, target, reduction=\"mean\", beta=1.0",
    "smooth_l1_loss(input, target, reduction=\"mean\", beta=1.0): F.smooth_l1_loss: |d| < beta ? d^2 / (2 beta) : |d| - beta / 2, d = input - target" },
  { "huber_loss", b_huber, "input, target, reduction=\"mean\", delta=1.0",
    "huber_loss(input, target, reduction=\"mean\", delta=1.0): F.huber_loss: |d| < delta ? d^2 / 2 : delta (|d| - delta / 2), d = input - target" },
  { "margin_ranking_loss", b_margin_ranking, "input1, input2, target, margin=0, reduction=\"mean\"",
    "margin_ranking_loss(input1, input2, target, margin=0, reduction=\"mean\"): F.margin_ranking_loss: max(0, -target * (input1 - input2) + margin)" },
  { "cosine_embedding_loss", b_cosine_embedding, "input1, input2, target, margin=0, reduction=\"mean\"",
    "cosine_embedding_loss(input1, input2, target, margin=0, reduction=\"mean\"): F.cosine_embedding_loss of rows [N, D] (or [D]): target 1: 1 - cos; target -1: max(0, cos - margin)" },
  { "ctc_loss", b_ctc_loss, "log_probs, targets, input_lengths, target_lengths, blank=0, reduction=\"mean\", zero_infinity=false",
    "ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=\"mean\", zero_infinity=false): F.ctc_loss of log_probs [T, N, C] (log_softmax output; or [T, C]) against targets [N, S] (padded) or 1-D (concatenated): -log of the summed probability of every alignment; \"mean\" divides each loss by its target length, then averages; zero_infinity zeroes impossible alignments' losses and gradients" },
  { NULL, NULL, NULL, NULL }
};

/* ---- resampling and index_add ------------------------------------------------ */

/* an int or a list of n ints, as an array of n (one int repeated) */
static int pair_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int64_t *out, int n) {
  int got = 0;
  if (nbT_ints_arg(vm, fname, what, v, out, n, &got)) return NB_ERR;
  if (got == 1) for (int i = 1; i < n; i++) out[i] = out[0];
  else if (got != n) return nb_error_kind(vm, "ValueError", "%s: %s must be an int or %d ints, got %d", fname, what, n, got);
  return NB_OK;
}
/* a number or a list of numbers (at most max) */
static int nums_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, double *out, int max, int *n) {
  if (v.t == NB_TNUM) { *n = 1; return nbT_num_arg(vm, fname, what, v, out); }
  if (v.t == NB_TLIST) {
    nb_List *l = v.u.p;
    if (l->n > max) return nb_error_kind(vm, "ValueError", "%s: %s has %d entries (at most %d)", fname, what, l->n, max);
    for (int i = 0; i < l->n; i++) if (nbT_num_arg(vm, fname, what, l->items[i], &out[i])) return NB_ERR;
    *n = l->n;
    return NB_OK;
  }
  if (v.t == NB_TTENSOR && T(v)->ndim <= 1 && T(v)->numel <= max) {
    *n = (int)T(v)->numel;
    return nt_to_host(T(v), out, NT_F64) ? nbT_err(vm) : NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "%s: %s must be a number or a list of numbers, got %s", fname, what, nb_typename(v));
}

/* pad(x, pad, mode="constant", value=0): F.pad */
static int b_pad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "pad"; Tmp tp = {0}; int64_t pad[2 * NT_MAXDIM]; int np = 0; double value = 0;
  if (args[1].t != NB_TLIST && args[1].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "pad: pad must be a list of ints, got %s", nb_typename(args[1]));
  if (nbT_ints_arg(vm, fname, "pad", args[1], pad, 2 * NT_MAXDIM, &np)) return NB_ERR;
  if (args[2].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "pad: mode must be a string, got %s", nb_typename(args[2]));
  int mode = nt_pad_mode(nb_str(args[2])->data);
  if (mode < 0) return nb_error_kind(vm, "ValueError", "pad: mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"%s\"", nb_str(args[2])->data);
  if (args[3].t != NB_TNIL && nbT_num_arg(vm, fname, "value", args[3], &value)) return NB_ERR;
  if (mode != 0 && value != 0) return nb_error_kind(vm, "ValueError", "pad: value applies only to mode \"constant\", not \"%s\"", nb_str(args[2])->data);
  TENSOR_ARG(x, 0, "input");
  DONE(nt_pad(x, pad, np, mode, value));
}

/* interpolate(x, size=nil, scale_factor=nil, mode="nearest", align_corners=nil): F.interpolate */
static int b_interpolate(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "interpolate"; Tmp tp = {0};
  int64_t size[2]; double sf[2]; int ns = 0;
  if ((args[1].t == NB_TNIL) == (args[2].t == NB_TNIL)) return nb_error_kind(vm, "ValueError", "interpolate: give exactly one of size and scale_factor");
  if (args[3].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "interpolate: mode must be a string, got %s", nb_typename(args[3]));
  if (args[4].t != NB_TNIL && args[4].t != NB_TBOOL) return nb_error_kind(vm, "TypeError", "interpolate: align_corners must be a bool or nil, got %s", nb_typename(args[4]));
  int ac = args[4].t == NB_TNIL ? -1 : args[4].u.b;
  TENSOR_ARG(x, 0, "input");
  int nsp = x->ndim - 2 >= 1 ? x->ndim - 2 : 1;
  if (nsp > 2) nsp = 2;
  if (args[1].t != NB_TNIL) {
    if (nbT_ints_arg(vm, fname, "size", args[1], size, 2, &ns)) { nbT_tmp_free(&tp); return NB_ERR; }
    if (ns == 1) for (int i = 1; i < nsp; i++) size[i] = size[0];
    else nsp = ns;
  } else {
    if (nums_arg(vm, fname, "scale_factor", args[2], sf, 2, &ns)) { nbT_tmp_free(&tp); return NB_ERR; }
    if (ns == 1) for (int i = 1; i < nsp; i++) sf[i] = sf[0];
    else nsp = ns;
  }
  DONE(nt_interpolate(x, args[1].t != NB_TNIL ? size : NULL, args[1].t != NB_TNIL ? NULL : sf, nsp, nb_str(args[3])->data, ac));
}

static int adaptive(nb_VM *vm, const char *fname, nb_Value *args, int nsp, nb_Value *out) {
  Tmp tp = {0}; int64_t o[2];
  if (pair_arg(vm, fname, "output_size", args[1], o, nsp)) return NB_ERR;
  TENSOR_ARG(x, 0, "input");
  DONE(nt_adaptive_avg_pool(x, o, nsp));
}
/* adaptive_avg_pool1d(x, output_size), adaptive_avg_pool2d(x, output_size) */
static int b_adaptive_avg_pool1d(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return adaptive(vm, "adaptive_avg_pool1d", args, 1, out); }
static int b_adaptive_avg_pool2d(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return adaptive(vm, "adaptive_avg_pool2d", args, 2, out); }

/* unfold(x, kernel_size, dilation=1, padding=0, stride=1): F.unfold */
static int b_unfold(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "unfold"; Tmp tp = {0}; int64_t k[2], d[2], p[2], s[2];
  if (pair_arg(vm, fname, "kernel_size", args[1], k, 2) || pair_arg(vm, fname, "dilation", args[2], d, 2) ||
      pair_arg(vm, fname, "padding", args[3], p, 2) || pair_arg(vm, fname, "stride", args[4], s, 2))
    return NB_ERR;
  TENSOR_ARG(x, 0, "input");
  DONE(nt_unfold(x, k, d, p, s));
}
/* fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1): F.fold */
static int b_fold(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "fold"; Tmp tp = {0}; int64_t o[2], k[2], d[2], p[2], s[2];
  if (pair_arg(vm, fname, "output_size", args[1], o, 2) || pair_arg(vm, fname, "kernel_size", args[2], k, 2) ||
      pair_arg(vm, fname, "dilation", args[3], d, 2) || pair_arg(vm, fname, "padding", args[4], p, 2) || pair_arg(vm, fname, "stride", args[5], s, 2))
    return NB_ERR;
  TENSOR_ARG(x, 0, "input");
  DONE(nt_fold(x, o, k, d, p, s));
}
/* index_add(x, dim, index, source, alpha=1): torch.index_add */
static int b_index_add(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "index_add"; Tmp tp = {0}; int dim; double alpha;
  if (nbT_intc_arg(vm, fname, "dim", args[1], &dim) || finite_arg(vm, fname, "alpha", args[4], 1.0, &alpha)) return NB_ERR;
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(idx, 2, "index"); TENSOR_ARG(src, 3, "source");
  DONE(nt_index_add(x, dim, idx, src, alpha));
}

/* scatter_reduce(x, dim, index, src, reduce, include_self=true): torch.scatter_reduce ("sum", "prod", "mean", "amax", "amin") */
static int b_scatter_reduce(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "scatter_reduce"; Tmp tp = {0}; int dim;
  if (nbT_intc_arg(vm, fname, "dim", args[1], &dim)) return NB_ERR;
  if (args[4].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "scatter_reduce: reduce must be a string, got %s", nb_typename(args[4]));
  if (args[5].t != NB_TBOOL) return nb_error_kind(vm, "TypeError", "scatter_reduce: include_self must be a bool, got %s", nb_typename(args[5]));
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(idx, 2, "index"); TENSOR_ARG(src, 3, "src");
  DONE(nt_scatter_reduce(x, dim, idx, src, nb_str(args[4])->data, args[5].u.b));
}
/* embedding_bag(input, weight, offsets=nil, mode="mean", per_sample_weights=nil, include_last_offset=false): F.embedding_bag */
static int b_embedding_bag(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "embedding_bag"; Tmp tp = {0}; nt_Tensor *off, *psw;
  if (args[3].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "embedding_bag: mode must be a string, got %s", nb_typename(args[3]));
  if (args[5].t != NB_TBOOL) return nb_error_kind(vm, "TypeError", "embedding_bag: include_last_offset must be a bool, got %s", nb_typename(args[5]));
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(w, 1, "weight");
  if (opt_tensor(vm, &tp, fname, "offsets", args[2], &off) || opt_tensor(vm, &tp, fname, "per_sample_weights", args[4], &psw)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_embedding_bag(x, w, off, nb_str(args[3])->data, psw, args[5].u.b));
}

/* adaptive_max_pool2d(x, output_size, return_indices=false): F.adaptive_max_pool2d */
static int b_adaptive_max_pool2d(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "adaptive_max_pool2d"; Tmp tp = {0}; int64_t o[2];
  if (pair_arg(vm, fname, "output_size", args[1], o, 2)) return NB_ERR;
  if (args[2].t != NB_TBOOL) return nb_error_kind(vm, "TypeError", "adaptive_max_pool2d: return_indices must be a bool, got %s", nb_typename(args[2]));
  TENSOR_ARG(x, 0, "input");
  bool ri = args[2].u.b;
  nt_Tensor *y = NULL, *ix = NULL;
  int rc = nt_adaptive_max_pool2d(x, o, &y, ri ? &ix : NULL);
  nbT_tmp_free(&tp);
  if (rc < 0) return nbT_err(vm);
  if (!ri) return nbT_ret(vm, y, out);
  nb_List *l = nbL_new(2);
  nbL_push(l, nb_obj(NB_TTENSOR, y)); nbL_push(l, nb_obj(NB_TTENSOR, ix));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

static nb_Builtin resample_builtins[] = {
  { "adaptive_max_pool2d", b_adaptive_max_pool2d, "x, output_size, return_indices=false",
    "adaptive_max_pool2d(x, output_size, return_indices=false): F.adaptive_max_pool2d of [N, C, H, W] (or [C, H, W]); with return_indices, [y, indices] (flat h*W + w of each maximum)" },
  { "scatter_reduce", b_scatter_reduce, "x, dim, index, src, reduce, include_self=true",
    "scatter_reduce(x, dim, index, src, reduce, include_self=true): torch.scatter_reduce for reduce \"sum\", \"prod\", \"mean\", \"amax\" or \"amin\": src (index's shape) reduced into a copy of x at index along dim; include_self=false leaves x's values out of the positions index names" },
  { "embedding_bag", b_embedding_bag, "input, weight, offsets=nil, mode=\"mean\", per_sample_weights=nil, include_last_offset=false",
    "embedding_bag(input, weight, offsets=nil, mode=\"mean\", per_sample_weights=nil, include_last_offset=false): F.embedding_bag (modes \"sum\", \"mean\", \"max\"): rows of weight summed, averaged or maxed per bag; bags are the rows of a 2-D input, or 1-D input split at offsets; per_sample_weights scale the rows (mode \"sum\")" },
  { "pad", b_pad, "x, pad, mode=\"constant\", value=0",
    "pad(x, pad, mode=\"constant\", value=0): F.pad: pad = [before, after] per axis, the last axis first (any number of trailing axes); mode \"constant\" (value; negative entries crop), \"reflect\", \"replicate\" or \"circular\"" },
  { "interpolate", b_interpolate, "x, size=nil, scale_factor=nil, mode=\"nearest\", align_corners=nil",
    "interpolate(x, size=nil, scale_factor=nil, mode=\"nearest\", align_corners=nil): F.interpolate of [N, C, L] (\"nearest\", \"linear\") or [N, C, H, W] (\"nearest\", \"bilinear\") to size or by scale_factor" },
  { "adaptive_avg_pool1d", b_adaptive_avg_pool1d, "x, output_size", "adaptive_avg_pool1d(x, output_size): F.adaptive_avg_pool1d of [N, C, L] (or [C, L])" },
  { "adaptive_avg_pool2d", b_adaptive_avg_pool2d, "x, output_size", "adaptive_avg_pool2d(x, output_size): F.adaptive_avg_pool2d of [N, C, H, W] (or [C, H, W]); output_size an int or [h, w]" },
  { "unfold", b_unfold, "x, kernel_size, dilation=1, padding=0, stride=1",
    "unfold(x, kernel_size, dilation=1, padding=0, stride=1): F.unfold (im2col) of [N, C, H, W] to [N, C*kh*kw, L]" },
  { "fold", b_fold, "x, output_size, kernel_size, dilation=1, padding=0, stride=1",
    "fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1): F.fold (col2im) of [N, C*kh*kw, L] to [N, C, H, W], overlapping blocks summed" },
  { "index_add", b_index_add, "x, dim, index, source, alpha=1",
    "index_add(x, dim, index, source, alpha=1): torch.index_add: a copy of x with alpha * source[..., i, ...] added at x[..., index[i], ...] along dim (repeated indices accumulate)" },
  { NULL, NULL, NULL, NULL }
};

void nbT_register_layers(void) { nbC_register(layer_builtins); nbC_register(resample_builtins); }
