/*
** loss.c — torch.nn.functional's losses, composed from the core's ops:
** binary_cross_entropy (+ _with_logits, pos_weight), nll_loss, kl_div,
** smooth_l1_loss, huber_loss, margin_ranking_loss, cosine_embedding_loss.
**
** Each is an elementwise chain (recorded lazily and fused by tfuse.c into one
** pass on either device) and one reduction, so a fused kernel per loss would
** save little; autograd runs through the composition.  The formulas are
** torch 1.13's (aten/src/ATen/native/Loss.cpp), written above each function.
*/
#include "nninternal.h"
#include "actmath.h"
#include "layers.h"

/* ---- an arena of temporaries: every intermediate is released at the end,
** and a NULL (an error) propagates through the helpers. */
typedef struct { nt_Tensor *t[48]; int n; } Ar;
static nt_Tensor *K(Ar *a, nt_Tensor *x) {
  if (x && a->n == 48) { nt_release(x); nt_error_set("internal: loss arena overflow"); return NULL; }
  if (x) a->t[a->n++] = x;
  return x;
}
static void ar_free(Ar *a) { for (int i = 0; i < a->n; i++) nt_release(a->t[i]); a->n = 0; }
static nt_Tensor *B(Ar *a, int op, nt_Tensor *x, nt_Tensor *y) { return x && y ? K(a, nt_binary(op, x, y)) : NULL; }
static nt_Tensor *S(Ar *a, int op, nt_Tensor *x, double s) { return x ? K(a, nt_binary_scalar_ex(op, x, s, NT_SCALAR_FLOAT)) : NULL; }
static nt_Tensor *SF(Ar *a, int op, double s, nt_Tensor *x) { return x ? K(a, nt_binary_scalar_ex(op, x, s, NT_SCALAR_FLOAT | NT_SCALAR_FIRST)) : NULL; }
static nt_Tensor *U(Ar *a, int op, nt_Tensor *x) { return x ? K(a, nt_unary(op, x)) : NULL; }
static nt_Tensor *W(Ar *a, nt_Tensor *c, nt_Tensor *x, nt_Tensor *y) { return c && x && y ? K(a, nt_where(c, x, y)) : NULL; }

/* the reduced loss (a new reference), or NULL; releases the arena */
static nt_Tensor *reduce(Ar *a, nt_Tensor *loss, nt_Reduction red, int64_t batch) {
  nt_Tensor *r = NULL;
  if (loss) {
    switch (red) {
      case NT_RED_NONE: r = nt_retain(loss); break;
      case NT_RED_SUM: r = nt_sum(loss, NULL, 0, false); break;
      case NT_RED_MEAN: r = nt_mean(loss, NULL, 0, false); break;
      case NT_RED_BATCHMEAN: {
        nt_Tensor *s = nt_sum(loss, NULL, 0, false);
        r = s ? nt_binary_scalar_ex(NT_OP_DIV, s, (double)batch, NT_SCALAR_FLOAT) : NULL;
        nt_release(s);
        break;
      }
    }
  }
  ar_free(a);
  return r;
}

static int check_float(const char *op, const char *what, nt_Tensor *t) {
  if (!nt_dtype_is_float(t->dtype)) NT_FAIL("%s: %s must be a floating tensor, got %s", op, what, nt_dtype_name(t->dtype));
  return 0;
}
static int check_same_device(const char *op, const char *what, nt_Tensor *t, nt_Tensor *x) {
  if (t && t->device != x->device)
    NT_FAIL("%s: %s is on %s but input is on %s", op, what, nt_device_name(t->device), nt_device_name(x->device));
  return 0;
}
static int check_same_shape(const char *op, nt_Tensor *input, nt_Tensor *target) {
  if (input->ndim == target->ndim && !memcmp(input->shape, target->shape, sizeof(int64_t) * (size_t)input->ndim)) return 0;
  char s1[128], s2[128];
  NT_FAIL("%s: target size %s must be the same as input size %s", op, nt_shape_str(target->shape, target->ndim, s1, sizeof s1),
          nt_shape_str(input->shape, input->ndim, s2, sizeof s2));
}

/* -w (t max(log x, -100) + (1 - t) max(log(1 - x), -100)); x in [0, 1] */
nt_Tensor *nt_binary_cross_entropy(nt_Tensor *x, nt_Tensor *t, nt_Tensor *w, nt_Reduction red) {
  const char *op = "binary_cross_entropy";
  if (check_float(op, "input", x) || check_float(op, "target", t) || (w && check_float(op, "weight", w)) ||
      check_same_shape(op, x, t) || check_same_device(op, "target", t, x) || check_same_device(op, "weight", w, x))
    return NULL;
  Ar a = {0};
  nt_Tensor *lx = U(&a, NT_OP_LOG, x), *l1x = U(&a, NT_OP_LOG, SF(&a, NT_OP_SUB, 1, x));
  lx = lx ? K(&a, nt_clamp(lx, -100, NAN)) : NULL;   /* log(0) = -inf held at -100, as torch's */
  l1x = l1x ? K(&a, nt_clamp(l1x, -100, NAN)) : NULL;
  nt_Tensor *l = B(&a, NT_OP_ADD, B(&a, NT_OP_MUL, t, lx), B(&a, NT_OP_MUL, SF(&a, NT_OP_SUB, 1, t), l1x));
  l = U(&a, NT_OP_NEG, l);
  if (w) l = B(&a, NT_OP_MUL, l, w);
  return reduce(&a, l, red, 0);
}

/* (1 - t) x + lw softplus(-x), lw = (pos_weight - 1) t + 1 (1 without
** pos_weight); softplus(-x) = -logsigmoid(x), stable for either sign */
nt_Tensor *nt_bce_with_logits(nt_Tensor *x, nt_Tensor *t, nt_Tensor *w, nt_Tensor *pw, nt_Reduction red) {
  const char *op = "binary_cross_entropy_with_logits";
  if (check_float(op, "input", x) || check_float(op, "target", t) || (w && check_float(op, "weight", w)) ||
      (pw && check_float(op, "pos_weight", pw)) || check_same_shape(op, x, t) || check_same_device(op, "target", t, x) ||
      check_same_device(op, "weight", w, x) || check_same_device(op, "pos_weight", pw, x))
    return NULL;
  Ar a = {0};
  nt_Tensor *sp = U(&a, NT_OP_NEG, K(&a, nt_activation(op, NT_ACT_LOGSIGMOID, x, 0, 0, 0)));
  if (pw) sp = B(&a, NT_OP_MUL, sp, S(&a, NT_OP_ADD, B(&a, NT_OP_MUL, S(&a, NT_OP_SUB, pw, 1), t), 1));
  nt_Tensor *l = B(&a, NT_OP_ADD, B(&a, NT_OP_MUL, SF(&a, NT_OP_SUB, 1, t), x), sp);
  if (w) l = B(&a, NT_OP_MUL, l, w);
  return reduce(&a, l, red, 0);
}

/* l_i = -weight[t_i] x[i, t_i] (0 where t_i == ignore_index); mean: sum(l) / sum(weight[t_i]) */
nt_Tensor *nt_nll_loss(nt_Tensor *x0, nt_Tensor *t0, nt_Tensor *w, int64_t ignore_index, nt_Reduction red) {
  const char *op = "nll_loss";
  char s1[128], s2[128];
  if (check_float(op, "input", x0) || (w && check_float(op, "weight", w)) || check_same_device(op, "target", t0, x0) ||
      check_same_device(op, "weight", w, x0))
    return NULL;
  if (x0->ndim < 1) NT_FAIL_NULL("%s: input must have at least 1 dimension ([C] or [N, C, ...]), got a 0-D tensor", op);
  int64_t C = x0->ndim == 1 ? x0->shape[0] : x0->shape[1];
  /* target: input's shape without the class axis */
  bool shape_ok = t0->ndim == (x0->ndim == 1 ? 0 : x0->ndim - 1);
  for (int i = 0; shape_ok && i < t0->ndim; i++) shape_ok = t0->shape[i] == x0->shape[i == 0 ? 0 : i + 1];
  if (!shape_ok)
    NT_FAIL_NULL("%s: target %s does not fit input %s (expected input's shape without its class axis 1)", op,
                 nt_shape_str(t0->shape, t0->ndim, s1, sizeof s1), nt_shape_str(x0->shape, x0->ndim, s2, sizeof s2));
  if (w && (w->ndim != 1 || w->shape[0] != C))
    NT_FAIL_NULL("%s: weight must be 1-D with one entry per class (%lld), got %s", op, (long long)C, nt_shape_str(w->shape, w->ndim, s1, sizeof s1));
  Ar a = {0};
  /* x as [M, C] (classes last), t as [M] */
  nt_Tensor *x = x0;
  if (x0->ndim > 2) {
    int perm[NT_MAXDIM];
    perm[0] = 0;
    for (int i = 2; i < x0->ndim; i++) perm[i - 1] = i;
    perm[x0->ndim - 1] = 1;
    x = K(&a, nt_permute(x0, perm, x0->ndim));
  }
  int64_t M = t0->numel;
  x = x ? K(&a, nt_reshape(x, (int64_t[]){M, C}, 2)) : NULL;
  nt_Tensor *ti = K(&a, nn_index_i64(op, t0));
  nt_Tensor *t = ti ? K(&a, nt_reshape(ti, (int64_t[]){M}, 1)) : NULL;
  if (!x || !t) return reduce(&a, NULL, red, 0);
  nt_Tensor *keep = S(&a, NT_OP_NE, t, (double)ignore_index);
  nt_Tensor *zero = K(&a, nt_zeros_like(t));
  nt_Tensor *ts = W(&a, keep, t, zero);
  nt_Tensor *ts2 = ts ? K(&a, nt_unsqueeze(ts, 1)) : NULL;
  nt_Tensor *picked = ts2 ? K(&a, nt_gather(x, 1, ts2)) : NULL;   /* bounds checked there */
  picked = picked ? K(&a, nt_reshape(picked, (int64_t[]){M}, 1)) : NULL;
  nt_Tensor *wt = keep ? K(&a, nt_to_dtype(keep, x->dtype)) : NULL;
  if (w && ts) wt = B(&a, NT_OP_MUL, wt, K(&a, nt_take(w, ts, 0)));
  nt_Tensor *l = U(&a, NT_OP_NEG, B(&a, NT_OP_MUL, picked, wt));
  if (!l) return reduce(&a, NULL, red, 0);
  if (red == NT_RED_NONE) return reduce(&a, K(&a, nt_reshape(l, t0->shape, t0->ndim)), red, 0);
  if (red == NT_RED_SUM) return reduce(&a, l, red, 0);
  nt_Tensor *num = K(&a, nt_sum(l, NULL, 0, false)), *den = wt ? K(&a, nt_sum(wt, NULL, 0, false)) : NULL;
  nt_Tensor *r = num && den ? nt_div(num, den) : NULL;
  ar_free(&a);
  return r;
}

/* log_target: exp(t) (t - x); else xlogy(t, t) - t x (0 where t == 0) */
nt_Tensor *nt_kl_div(nt_Tensor *x, nt_Tensor *t, nt_Reduction red, bool log_target) {
  const char *op = "kl_div";
  if (check_float(op, "input", x) || check_float(op, "target", t) || check_same_device(op, "target", t, x)) return NULL;
  Ar a = {0};
  nt_Tensor *l;
  if (log_target) l = B(&a, NT_OP_MUL, U(&a, NT_OP_EXP, t), B(&a, NT_OP_SUB, t, x));
  else {
    nt_Tensor *one = K(&a, nt_ones_like(t));
    nt_Tensor *tpos = W(&a, S(&a, NT_OP_GT, t, 0), t, one);   /* log(1) = 0 where t == 0: no 0 * -inf */
    l = B(&a, NT_OP_SUB, B(&a, NT_OP_MUL, t, U(&a, NT_OP_LOG, tpos)), B(&a, NT_OP_MUL, t, x));
  }
  return reduce(&a, l, red, x->ndim ? x->shape[0] : 1);
}

/* d = |x - t|: d < beta ? d^2 / (2 beta) : d - beta/2 (beta = 0: d) */
nt_Tensor *nt_smooth_l1_loss(nt_Tensor *x, nt_Tensor *t, nt_Reduction red, double beta) {
  const char *op = "smooth_l1_loss";
  if (!(beta >= 0)) NT_FAIL_NULL("%s: beta must be >= 0, got %g", op, beta);
  if (check_float(op, "input", x) || check_float(op, "target", t) || check_same_device(op, "target", t, x)) return NULL;
  Ar a = {0};
  nt_Tensor *d = U(&a, NT_OP_ABS, B(&a, NT_OP_SUB, x, t)), *l = d;
  if (beta > 0) l = W(&a, S(&a, NT_OP_LT, d, beta), S(&a, NT_OP_MUL, B(&a, NT_OP_MUL, d, d), 0.5 / beta), S(&a, NT_OP_SUB, d, 0.5 * beta));
  return reduce(&a, l, red, 0);
}

/* d = |x - t|: d < delta ? d^2 / 2 : delta (d - delta/2) */
nt_Tensor *nt_huber_loss(nt_Tensor *x, nt_Tensor *t, nt_Reduction red, double delta) {
  const char *op = "huber_loss";
  if (!(delta > 0)) NT_FAIL_NULL("%s: delta must be > 0, got %g", op, delta);
  if (check_float(op, "input", x) || check_float(op, "target", t) || check_same_device(op, "target", t, x)) return NULL;
  Ar a = {0};
  nt_Tensor *d = U(&a, NT_OP_ABS, B(&a, NT_OP_SUB, x, t));
  nt_Tensor *l = W(&a, S(&a, NT_OP_LT, d, delta), S(&a, NT_OP_MUL, B(&a, NT_OP_MUL, d, d), 0.5),
                   S(&a, NT_OP_MUL, S(&a, NT_OP_SUB, d, 0.5 * delta), delta));
  return reduce(&a, l, red, 0);
}

/* max(0, -y (x1 - x2) + margin) */
nt_Tensor *nt_margin_ranking_loss(nt_Tensor *x1, nt_Tensor *x2, nt_Tensor *y, double margin, nt_Reduction red) {
  const char *op = "margin_ranking_loss";
  if (check_float(op, "input1", x1) || check_float(op, "input2", x2) || check_same_device(op, "input2", x2, x1) ||
      check_same_device(op, "target", y, x1))
    return NULL;
  Ar a = {0};
  nt_Tensor *l = U(&a, NT_OP_RELU, S(&a, NT_OP_ADD, U(&a, NT_OP_NEG, B(&a, NT_OP_MUL, y, B(&a, NT_OP_SUB, x1, x2))), margin));
  return reduce(&a, l, red, 0);
}

/* cos = sum(x1 x2) / sqrt((sum(x1^2) + 1e-12)(sum(x2^2) + 1e-12)) over the
** last axis; y == 1: 1 - cos; y == -1: max(0, cos - margin); else 0 */
nt_Tensor *nt_cosine_embedding_loss(nt_Tensor *x1, nt_Tensor *x2, nt_Tensor *y, double margin, nt_Reduction red) {
  const char *op = "cosine_embedding_loss";
  char s1[128], s2[128];
  if (check_float(op, "input1", x1) || check_float(op, "input2", x2) || check_same_device(op, "input2", x2, x1) ||
      check_same_device(op, "target", y, x1))
    return NULL;
  if ((x1->ndim != 1 && x1->ndim != 2) || x1->ndim != x2->ndim || memcmp(x1->shape, x2->shape, sizeof(int64_t) * (size_t)x1->ndim))
    NT_FAIL_NULL("%s: input1 and input2 must have the same shape, [N, D] or [D], got %s and %s", op,
                 nt_shape_str(x1->shape, x1->ndim, s1, sizeof s1), nt_shape_str(x2->shape, x2->ndim, s2, sizeof s2));
  if (y->ndim != x1->ndim - 1 || (y->ndim == 1 && y->shape[0] != x1->shape[0]))
    NT_FAIL_NULL("%s: target must have shape %s (one +-1 per row), got %s", op, x1->ndim == 2 ? "[N]" : "[]",
                 nt_shape_str(y->shape, y->ndim, s1, sizeof s1));
  Ar a = {0};
  int ax = x1->ndim - 1;
  nt_Tensor *dot = B(&a, NT_OP_MUL, x1, x2);
  dot = dot ? K(&a, nt_sum(dot, &ax, 1, false)) : NULL;
  nt_Tensor *m1 = B(&a, NT_OP_MUL, x1, x1), *m2 = B(&a, NT_OP_MUL, x2, x2);
  m1 = m1 ? S(&a, NT_OP_ADD, K(&a, nt_sum(m1, &ax, 1, false)), 1e-12) : NULL;
  m2 = m2 ? S(&a, NT_OP_ADD, K(&a, nt_sum(m2, &ax, 1, false)), 1e-12) : NULL;
  nt_Tensor *cos = B(&a, NT_OP_DIV, dot, U(&a, NT_OP_SQRT, B(&a, NT_OP_MUL, m1, m2)));
  nt_Tensor *zero = cos ? K(&a, nt_zeros_like(cos)) : NULL;
  nt_Tensor *pos = W(&a, S(&a, NT_OP_EQ, y, 1), SF(&a, NT_OP_SUB, 1, cos), zero);
  nt_Tensor *neg = W(&a, S(&a, NT_OP_EQ, y, -1), U(&a, NT_OP_RELU, S(&a, NT_OP_SUB, cos, margin)), zero);
  return reduce(&a, B(&a, NT_OP_ADD, pos, neg), red, 0);
}
