/*
** ctc.c — torch.nn.functional.ctc_loss (Graves et al. 2006), the log-space
** forward recursion composed from the core's ops, so that both devices run
** it and autograd gives the backward (the beta recursion is what autograd
** computes when it walks the alpha steps in reverse).
**
** For sample n with target l (length L) the extended target is
** l' = [blank, l1, blank, l2, ..., lL, blank] (S' = 2L + 1; the batch pads
** to 2 Lmax + 1 with blanks, which never feed the positions read below).
** With E[t, s] = log_probs[t, n, l'_s]:
**   alpha_0[0] = E[0, 0], alpha_0[1] = E[0, 1] (L > 0), else -inf
**   alpha_t[s] = lse(alpha_{t-1}[s], alpha_{t-1}[s-1],
**                    alpha_{t-1}[s-2] if l'_s != blank and l'_s != l'_{s-2}) + E[t, s]
**   for t < input_length[n] (later steps keep alpha), and
**   loss_n = -lse(alpha_{T_n - 1}[2L], alpha_{T_n - 1}[2L - 1]).
** lse is a guarded log-sum-exp: its shift is the (detached) maximum, 0 where
** every term is -inf, and such an entry is -inf with a zero gradient, so an
** impossible alignment (loss inf) never turns gradients into NaN and
** zero_infinity can zero both.  reduction "mean" divides each loss by its
** target length (at least 1), then averages over the batch (torch's).
**
** The gradient is the true derivative of the loss with respect to
** log_probs.  torch's ctc_loss backward returns that derivative plus
** exp(log_probs) * grad (it assumes log_probs came from log_softmax, whose
** backward cancels the extra term), so the two agree on the gradient of the
** logits under a log_softmax, which is how ctc_loss is used.
*/
#include <math.h>
#include <stdlib.h>
#include "nninternal.h"
#include "layers.h"

#define CTC_MAX_LABELS ((int64_t)1 << 24)   /* bound on N * (2 Lmax + 1) and the targets' length */

/* temporaries released together */
typedef struct { nt_Tensor *t[40]; int n; } Ar;
static nt_Tensor *K(Ar *a, nt_Tensor *x) {
  if (x && a->n == 40) { nt_release(x); nt_error_set("internal: ctc_loss arena overflow"); return NULL; }
  if (x) a->t[a->n++] = x;
  return x;
}
static void ar_free(Ar *a) { while (a->n) nt_release(a->t[--a->n]); }

/* guarded log-sum-exp of k tensors of one shape; zero/ninf: constants of that shape */
static nt_Tensor *lse(Ar *a, nt_Tensor *const *x, int k, nt_Tensor *zero, nt_Tensor *ninf) {
  nt_Tensor *m = x[0];
  for (int i = 1; i < k && m; i++) m = K(a, nt_maximum(m, x[i]));
  nt_Tensor *dead = m ? K(a, nt_eq(m, ninf)) : NULL;
  nt_Tensor *md = dead ? K(a, nt_detach(m)) : NULL;
  nt_Tensor *sh = md ? K(a, nt_where(dead, zero, md)) : NULL;
  nt_Tensor *sum = NULL;
  for (int i = 0; i < k && sh; i++) {
    nt_Tensor *d = K(a, nt_sub(x[i], sh)), *e = d ? K(a, nt_exp(d)) : NULL;
    sum = !e ? NULL : sum ? K(a, nt_add(sum, e)) : e;
    if (!sum) return NULL;
  }
  nt_Tensor *one = sum ? K(a, nt_binary_scalar_ex(NT_OP_ADD, zero, 1, NT_SCALAR_FLOAT)) : NULL;
  nt_Tensor *ss = one ? K(a, nt_where(dead, one, sum)) : NULL;
  nt_Tensor *l = ss ? K(a, nt_log(ss)) : NULL;
  nt_Tensor *r = l ? K(a, nt_add(sh, l)) : NULL;
  return r ? K(a, nt_where(dead, ninf, r)) : NULL;
}

/* x shifted right by k along axis 1 ([N, S]), -inf entering; ninf_col [N, k] */
static nt_Tensor *shift(Ar *a, nt_Tensor *x, int64_t k, nt_Tensor *ninf_col) {
  int64_t S = x->shape[1];
  if (k >= S) return K(a, nt_full_like(x, -INFINITY));
  nt_Tensor *h = K(a, nt_narrow(x, 1, 0, S - k));
  nt_Tensor *c = ninf_col ? K(a, nt_narrow(ninf_col, 1, 0, k)) : NULL;
  return h && c ? K(a, nt_concat((nt_Tensor *[]){c, h}, 2, 1)) : NULL;
}

/* host i64 copy of an integer tensor (malloc'd), or NULL with the error set */
static int64_t *host_ints(const char *op, const char *what, nt_Tensor *t) {
  if (!nt_dtype_is_int(t->dtype)) NT_FAIL_NULL("%s: %s must be an integer tensor, got %s", op, what, nt_dtype_name(t->dtype));
  if (t->numel > CTC_MAX_LABELS) NT_FAIL_NULL("%s: %s has %lld elements, more than the %lld supported", op, what, (long long)t->numel, (long long)CTC_MAX_LABELS);
  int64_t *v = malloc(sizeof(int64_t) * (size_t)(t->numel ? t->numel : 1));
  if (!v) NT_FAIL_NULL("%s: out of memory", op);
  if (t->numel && nt_to_host(t, v, NT_I64)) { free(v); return NULL; }
  return v;
}

/* a host f64 [r, c] matrix (takes v) as dtype dt on dev */
static nt_Tensor *host_matrix(double *v, int64_t r, int64_t c, nt_DType dt, nt_Device dev) {
  nt_Tensor *h = nt_from_buffer(v, NT_F64, (int64_t[]){r, c}, 2, dt);
  free(v);
  if (!h || dev == NT_CPU) return h;
  nt_Tensor *d = nt_to_device(h, dev);
  nt_release(h);
  return d;
}
static nt_Tensor *host_index(int64_t *v, int64_t r, int64_t c, nt_Device dev) {
  nt_Tensor *h = nt_from_buffer(v, NT_I64, (int64_t[]){r, c}, 2, NT_I64);
  free(v);
  if (!h || dev == NT_CPU) return h;
  nt_Tensor *d = nt_to_device(h, dev);
  nt_release(h);
  return d;
}

/* the recursion over lp [T, N, C] (f32/f64) with host-checked labels; returns the per-sample losses [N] */
static nt_Tensor *ctc_nll(nt_Tensor *lp, const int64_t *ext, const double *skip0, const double *init0, const int64_t *ilen,
                          const int64_t *last, const double *last2, int64_t N, int64_t S) {
  int64_t T = lp->shape[0];
  nt_DType dt = lp->dtype;
  nt_Device dev = lp->device;
  Ar g = {0};   /* lives for the whole recursion */
  nt_Tensor *loss = NULL, *alpha = NULL;
  int64_t *e3 = malloc(sizeof(int64_t) * (size_t)(N * S));
  double *sk = malloc(sizeof(double) * (size_t)(N * S)), *in = malloc(sizeof(double) * (size_t)(N * S));
  double *l2 = malloc(sizeof(double) * (size_t)(N * 2));
  int64_t *la = malloc(sizeof(int64_t) * (size_t)(N * 2));
  if (!e3 || !sk || !in || !l2 || !la) { free(e3); free(sk); free(in); free(l2); free(la); NT_FAIL_NULL("ctc_loss: out of memory"); }
  memcpy(e3, ext, sizeof(int64_t) * (size_t)(N * S));
  memcpy(sk, skip0, sizeof(double) * (size_t)(N * S));
  memcpy(in, init0, sizeof(double) * (size_t)(N * S));
  memcpy(l2, last2, sizeof(double) * (size_t)(N * 2));
  memcpy(la, last, sizeof(int64_t) * (size_t)(N * 2));
  nt_Tensor *extt = K(&g, host_index(e3, N, S, dev));
  nt_Tensor *skip = K(&g, host_matrix(sk, N, S, dt, dev));
  nt_Tensor *init = K(&g, host_matrix(in, N, S, dt, dev));
  nt_Tensor *lastm = K(&g, host_matrix(l2, N, 2, dt, dev));
  nt_Tensor *lasti = K(&g, host_index(la, N, 2, dev));
  nt_Tensor *zero = K(&g, nt_zeros((int64_t[]){N, S}, 2, dt, dev));
  nt_Tensor *ninf = K(&g, nt_full((int64_t[]){N, S}, 2, -INFINITY, dt, dev));
  nt_Tensor *ninf_col = K(&g, nt_full((int64_t[]){N, 2}, 2, -INFINITY, dt, dev));
  /* E [T, N, S] = lp gathered at the extended labels */
  nt_Tensor *e1 = extt ? K(&g, nt_reshape(extt, (int64_t[]){1, N, S}, 3)) : NULL;
  nt_Tensor *ee = e1 ? K(&g, nt_expand(e1, (int64_t[]){T, N, S}, 3)) : NULL;
  nt_Tensor *E = ee ? K(&g, nt_gather(lp, 2, ee)) : NULL;
  if (!skip || !init || !lastm || !lasti || !zero || !ninf || !ninf_col || !E) goto done;
  {
    nt_Tensor *E0 = nt_select(E, 0, 0);
    alpha = E0 ? nt_add(E0, init) : NULL;
    nt_release(E0);
  }
  double *act = malloc(sizeof(double) * (size_t)N);
  if (!act) { nt_error_set("ctc_loss: out of memory"); goto done; }
  for (int64_t t = 1; t < T && alpha; t++) {
    Ar a = {0};
    int64_t nact = 0;
    for (int64_t n = 0; n < N; n++) nact += (act[n] = t < ilen[n] ? 1.0 : 0.0) > 0;
    if (!nact) break;   /* every sample has ended */
    nt_Tensor *a1 = shift(&a, alpha, 1, ninf_col);
    nt_Tensor *a2s = shift(&a, alpha, 2, ninf_col);
    nt_Tensor *a2 = a2s ? K(&a, nt_add(a2s, skip)) : NULL;
    nt_Tensor *Et = K(&a, nt_select(E, 0, t));
    nt_Tensor *l = a1 && a2 && Et ? lse(&a, (nt_Tensor *[]){alpha, a1, a2}, 3, zero, ninf) : NULL;
    nt_Tensor *nw = l ? K(&a, nt_add(l, Et)) : NULL;
    nt_Tensor *next = NULL;
    if (nw && nact < N) {   /* samples past their input length keep alpha */
      double *av = malloc(sizeof(double) * (size_t)N);
      if (!av) { nt_error_set("ctc_loss: out of memory"); ar_free(&a); nt_release(alpha); alpha = NULL; break; }
      memcpy(av, act, sizeof(double) * (size_t)N);
      nt_Tensor *am = K(&a, host_matrix(av, N, 1, dt, dev));
      nt_Tensor *ab = am ? K(&a, nt_binary_scalar_ex(NT_OP_GT, am, 0, NT_SCALAR_FLOAT)) : NULL;
      next = ab ? nt_where(ab, nw, alpha) : NULL;
    } else if (nw) next = nt_retain(nw);
    ar_free(&a);
    nt_release(alpha);
    alpha = next;
  }
  free(act);
  if (!alpha) goto done;
  {
    Ar a = {0};
    nt_Tensor *fin = K(&a, nt_gather(alpha, 1, lasti));
    nt_Tensor *fm = fin ? K(&a, nt_add(fin, lastm)) : NULL;
    nt_Tensor *f0 = fm ? K(&a, nt_narrow(fm, 1, 0, 1)) : NULL, *f1 = fm ? K(&a, nt_narrow(fm, 1, 1, 1)) : NULL;
    nt_Tensor *z1 = K(&a, nt_zeros((int64_t[]){N, 1}, 2, dt, dev)), *n1 = K(&a, nt_full((int64_t[]){N, 1}, 2, -INFINITY, dt, dev));
    nt_Tensor *ll = f0 && f1 && z1 && n1 ? lse(&a, (nt_Tensor *[]){f0, f1}, 2, z1, n1) : NULL;
    nt_Tensor *l1 = ll ? K(&a, nt_reshape(ll, (int64_t[]){N}, 1)) : NULL;
    loss = l1 ? nt_neg(l1) : NULL;
    ar_free(&a);
  }
done:
  nt_release(alpha);
  ar_free(&g);
  return loss;
}

nt_Tensor *nt_ctc_loss(nt_Tensor *log_probs, nt_Tensor *targets, nt_Tensor *input_lengths, nt_Tensor *target_lengths, int64_t blank,
                       nt_Reduction red, bool zero_infinity) {
  const char *op = "ctc_loss";
  char s1[128];
  if (!nt_dtype_is_float(log_probs->dtype)) NT_FAIL_NULL("%s: log_probs must be a floating tensor, got %s", op, nt_dtype_name(log_probs->dtype));
  if (log_probs->ndim != 3 && log_probs->ndim != 2)
    NT_FAIL_NULL("%s: log_probs must be [T, N, C] (or [T, C] unbatched), got %s", op, nt_shape_str(log_probs->shape, log_probs->ndim, s1, sizeof s1));
  if (targets->device != log_probs->device && targets->device != NT_CPU)
    NT_FAIL_NULL("%s: targets are on %s but log_probs on %s", op, nt_device_name(targets->device), nt_device_name(log_probs->device));
  bool batched = log_probs->ndim == 3;
  int64_t T = log_probs->shape[0], N = batched ? log_probs->shape[1] : 1, C = log_probs->shape[log_probs->ndim - 1];
  if (T < 1 || C < 1) NT_FAIL_NULL("%s: log_probs %s has no time steps or no classes", op, nt_shape_str(log_probs->shape, log_probs->ndim, s1, sizeof s1));
  if (blank < 0 || blank >= C) NT_FAIL_NULL("%s: blank %lld is out of range for %lld classes", op, (long long)blank, (long long)C);
  if ((batched ? input_lengths->ndim != 1 || input_lengths->shape[0] != N : input_lengths->ndim > 1 || input_lengths->numel != 1) ||
      (batched ? target_lengths->ndim != 1 || target_lengths->shape[0] != N : target_lengths->ndim > 1 || target_lengths->numel != 1))
    NT_FAIL_NULL("%s: input_lengths and target_lengths must have one entry per sample (%lld), got %lld and %lld", op, (long long)N,
                 (long long)input_lengths->numel, (long long)target_lengths->numel);
  bool padded = batched ? targets->ndim == 2 : false;
  if (batched ? (targets->ndim != 1 && targets->ndim != 2) || (padded && targets->shape[0] != N) : targets->ndim != 1)
    NT_FAIL_NULL("%s: targets must be [N, S] (padded) or 1-D (concatenated)%s, got %s", op, batched ? "" : " (unbatched: 1-D)",
                 nt_shape_str(targets->shape, targets->ndim, s1, sizeof s1));
  int64_t *tg = host_ints(op, "targets", targets), *il = tg ? host_ints(op, "input_lengths", input_lengths) : NULL;
  int64_t *tl = il ? host_ints(op, "target_lengths", target_lengths) : NULL;
  int64_t *ext = NULL, *last = NULL, *start = NULL;
  double *skip = NULL, *init = NULL, *last2 = NULL;
  nt_Tensor *r = NULL, *lp = NULL, *nll = NULL;
  if (!tl) goto done;
  int64_t Smax = padded ? targets->shape[1] : targets->numel, Lmax = 0, sumL = 0;
  for (int64_t n = 0; n < N; n++) {
    if (il[n] < 1 || il[n] > T) { nt_error_set("%s: input_lengths[%lld] = %lld must be in [1, %lld] (the time steps of log_probs)", op, (long long)n, (long long)il[n], (long long)T); goto done; }
    if (tl[n] < 0 || tl[n] > Smax) { nt_error_set("%s: target_lengths[%lld] = %lld must be in [0, %lld]", op, (long long)n, (long long)tl[n], (long long)Smax); goto done; }
    if (tl[n] > Lmax) Lmax = tl[n];
    sumL += tl[n];
  }
  if (!padded && sumL != targets->numel) {
    nt_error_set("%s: the target_lengths sum to %lld but the concatenated targets have %lld entries", op, (long long)sumL, (long long)targets->numel);
    goto done;
  }
  int64_t S = 2 * Lmax + 1;
  if (N * S > CTC_MAX_LABELS) { nt_error_set("%s: %lld samples of %lld extended labels are more than the %lld supported", op, (long long)N, (long long)S, (long long)CTC_MAX_LABELS); goto done; }
  ext = malloc(sizeof(int64_t) * (size_t)(N * S)); start = malloc(sizeof(int64_t) * (size_t)N);
  skip = malloc(sizeof(double) * (size_t)(N * S)); init = malloc(sizeof(double) * (size_t)(N * S));
  last = malloc(sizeof(int64_t) * (size_t)(N * 2)); last2 = malloc(sizeof(double) * (size_t)(N * 2));
  if (!ext || !start || !skip || !init || !last || !last2) { nt_error_set("%s: out of memory", op); goto done; }
  for (int64_t n = 0, off = 0; n < N; off += tl[n], n++) start[n] = padded ? n * Smax : off;
  for (int64_t n = 0; n < N; n++) {
    const int64_t *l = tg + start[n];
    for (int64_t s = 0; s < S; s++) {
      int64_t k = (s - 1) / 2;
      bool lab = s % 2 == 1 && k < tl[n];
      if (lab && (l[k] < 0 || l[k] >= C || l[k] == blank)) {
        nt_error_set("%s: target %lld of sample %lld is %lld; a label must be in [0, %lld) and not the blank (%lld)", op, (long long)k,
                     (long long)n, (long long)l[k], (long long)C, (long long)blank);
        goto done;
      }
      ext[n * S + s] = lab ? l[k] : blank;
      skip[n * S + s] = lab && k >= 1 && l[k] != l[k - 1] ? 0.0 : -INFINITY;
      init[n * S + s] = s == 0 || (s == 1 && tl[n] > 0) ? 0.0 : -INFINITY;
    }
    last[2 * n] = 2 * tl[n];
    last[2 * n + 1] = tl[n] > 0 ? 2 * tl[n] - 1 : 0;
    last2[2 * n] = 0.0;
    last2[2 * n + 1] = tl[n] > 0 ? 0.0 : -INFINITY;
  }
  {
    nt_Tensor *lpf = nn_compute_float(op, log_probs);   /* bf16/f16 in f32 */
    lp = lpf && !batched ? nt_unsqueeze(lpf, 1) : (lpf ? nt_retain(lpf) : NULL);
    nt_release(lpf);
  }
  nll = lp ? ctc_nll(lp, ext, skip, init, il, last, last2, N, S) : NULL;
  if (!nll) goto done;
  if (zero_infinity) {
    nt_Tensor *inf = nt_full_like(nll, INFINITY), *isinf = inf ? nt_eq(nll, inf) : NULL, *z = isinf ? nt_zeros_like(nll) : NULL;
    nt_Tensor *w = z ? nt_where(isinf, z, nll) : NULL;
    nt_release(inf); nt_release(isinf); nt_release(z); nt_release(nll);
    if (!(nll = w)) goto done;
  }
  if (red == NT_RED_MEAN) {
    double *d = malloc(sizeof(double) * (size_t)N);
    if (!d) { nt_error_set("%s: out of memory", op); goto done; }
    for (int64_t n = 0; n < N; n++) d[n] = (double)(tl[n] > 0 ? tl[n] : 1);
    nt_Tensor *dm = host_matrix(d, N, 1, nll->dtype, nll->device), *dv = dm ? nt_reshape(dm, (int64_t[]){N}, 1) : NULL;
    nt_Tensor *q = dv ? nt_div(nll, dv) : NULL;
    r = q ? nt_mean(q, NULL, 0, false) : NULL;
    nt_release(dm); nt_release(dv); nt_release(q);
  } else if (red == NT_RED_SUM) r = nt_sum(nll, NULL, 0, false);
  else r = batched ? nt_retain(nll) : nt_squeeze(nll, 0);
  if (r) r = nn_cast_back(r, log_probs->dtype);
done:
  free(tg); free(il); free(tl); free(ext); free(start); free(skip); free(init); free(last); free(last2);
  nt_release(lp); nt_release(nll);
  return r;
}
