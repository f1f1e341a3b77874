/*
** index/sample.c — Gamma, Poisson and Binomial samplers for the
** distributions module.  Each is a vectorised rejection (or counting) loop
** over public random ops (nt_rand, nt_randn): every round draws for the
** whole tensor and keeps the draws of the elements still pending, so the
** global Philox stream (nt_seed) decides the samples on every device.  The
** rounds are bounded; a loop that has not finished by then (probability far
** below 1e-100) is an error, never a silent partial result.  No gradient:
** torch's rsample for these families needs implicit reparameterisation,
** which the distributions module refuses with a clear error.
**   Gamma(a):   Marsaglia & Tsang (2000): d = a - 1/3, c = 1/sqrt(9d),
**               v = (1 + c z)^3, accept when log u < z^2/2 + d - d v + d log v;
**               a < 1 by Gamma(a + 1) * u^(1/a).  Results are clamped to the
**               dtype's smallest normal number, as torch's.
**   Poisson(r): r < 10 by Knuth's product of uniforms (at most 256 rounds);
**               r >= 10 by Hörmann's PTRS (1993), NumPy's method.
**   Binomial(n, p): the count of n Bernoulli(p) trials, in chunks of 64
**               trials per element; n * elements is bounded (see below).
*/
#include "ixinternal.h"
#include <float.h>
#include <math.h>

#define MAX_ROUNDS 256

static nt_Tensor *C(nt_Tensor *like, double v) { return ix_const_like(like, v); }
static nt_Tensor *uniform(nt_Tensor *like) { return nt_rand(like->shape, like->ndim, NT_F64, like->device); }
/* uniform in (0, 1]: log is finite */
static nt_Tensor *uniform_pos(nt_Tensor *like) { return X_sb(NT_OP_SUB, 1, uniform(like)); }

/* 1 when any element of the bool tensor is true, 0 when none, -1 on error */
static int any_true(nt_Tensor *b) {
  nt_Tensor *a = nt_any(b, NULL, 0, false);
  double v = 0;
  int rc = a ? nt_item(a, &v) : -1;
  nt_release(a);
  return rc < 0 ? -1 : v != 0;
}

/* checks a parameter: every element satisfies (x OP bound) and is not NaN */
static int check_all(const char *op, const char *what, nt_Tensor *x, int cmp, double bound) {
  nt_Tensor *ok = nt_binary_scalar_ex(cmp, x, bound, NT_SCALAR_FLOAT);
  nt_Tensor *bad = ok ? nt_logical_not(ok) : NULL;
  nt_release(ok);
  int r = bad ? any_true(bad) : -1;
  nt_release(bad);
  if (r < 0) return -1;
  if (r) NT_FAIL("%s: %s must be %s %g everywhere (found a value that is not)", op, what, cmp == NT_OP_GT ? ">" : cmp == NT_OP_GE ? ">=" : "<=", bound);
  return 0;
}

static nt_Tensor *gamma_ge1(nt_Tensor *a) {   /* a >= 1, f64 */
  nt_Tensor *d = nt_binary_scalar_ex(NT_OP_SUB, a, 1.0 / 3, NT_SCALAR_FLOAT);
  nt_Tensor *c = d ? X_un(NT_OP_RSQRT, nt_binary_scalar_ex(NT_OP_MUL, d, 9, NT_SCALAR_FLOAT)) : NULL;
  nt_Tensor *res = d ? nt_zeros(a->shape, a->ndim, NT_F64, a->device) : NULL;
  nt_Tensor *pending = d ? nt_ones(a->shape, a->ndim, NT_BOOL, a->device) : NULL;
  int round = 0;
  for (; res && c && pending && round < MAX_ROUNDS; round++) {
    nt_Tensor *z = nt_randn(a->shape, a->ndim, NT_F64, a->device), *u = uniform_pos(a);
    nt_Tensor *v = X_bs(NT_OP_ADD, X_mul(nt_retain(c), nt_retain(z)), 1);
    v = X_mul(X_mul(nt_retain(v), nt_retain(v)), v);
    /* z^2/2 + d - d v + d log v */
    nt_Tensor *rhs = X_add(X_bs(NT_OP_MUL, X_mul(nt_retain(z), nt_retain(z)), 0.5), nt_retain(d));
    rhs = X_sub(rhs, X_mul(nt_retain(d), nt_retain(v)));
    rhs = X_add(rhs, X_mul(nt_retain(d), X_un(NT_OP_LOG, nt_retain(v))));
    nt_Tensor *acc = X_bin(NT_OP_LOGICAL_AND, X_bs(NT_OP_GT, nt_retain(v), 0), X_bin(NT_OP_LT, X_un(NT_OP_LOG, u), rhs));
    nt_Tensor *take = acc ? nt_logical_and(pending, acc) : NULL;
    nt_Tensor *r2 = X_where(take, X_mul(nt_retain(d), nt_retain(v)), nt_retain(res));
    nt_release(res); res = r2;
    nt_Tensor *p2 = X_bin(NT_OP_LOGICAL_AND, nt_retain(pending), X_un(NT_OP_LOGICAL_NOT, acc));
    nt_release(pending); pending = p2;
    nt_release(z); nt_release(v);
    int left = pending ? any_true(pending) : -1;
    if (left < 0) { nt_release(res); res = NULL; break; }
    if (!left) break;
  }
  if (res && round >= MAX_ROUNDS) { nt_release(res); res = NULL; nt_error_set("gamma sampler: no acceptance after %d rounds", MAX_ROUNDS); }
  nt_release(d); nt_release(c); nt_release(pending);
  return res;
}

nt_Tensor *nt_sample_gamma(nt_Tensor *alpha) {
  if (!nt_dtype_is_float(alpha->dtype)) NT_FAIL_NULL("gamma sampler: concentration must be a floating tensor, got %s", nt_dtype_name(alpha->dtype));
  if (check_all("gamma sampler", "concentration", alpha, NT_OP_GT, 0)) return NULL;
  bool g = nt_set_grad_enabled(false);
  nt_Tensor *a = nt_to_dtype(alpha, NT_F64);
  nt_Tensor *lt1 = a ? nt_binary_scalar_ex(NT_OP_LT, a, 1, NT_SCALAR_FLOAT) : NULL;
  nt_Tensor *ab = X_where(nt_retain(lt1), a ? nt_binary_scalar_ex(NT_OP_ADD, a, 1, NT_SCALAR_FLOAT) : NULL, nt_retain(a));
  nt_Tensor *x = ab ? gamma_ge1(ab) : NULL;
  /* a < 1: x * u^(1/a) = x * exp(log(u) / a) */
  nt_Tensor *boost = x ? X_un(NT_OP_EXP, X_div(X_un(NT_OP_LOG, uniform_pos(a)), nt_retain(a))) : NULL;
  nt_Tensor *r = X_where(lt1, X_mul(nt_retain(x), boost), nt_retain(x));
  nt_release(x); nt_release(ab); nt_release(a);
  double tiny = alpha->dtype == NT_F64 ? DBL_MIN : FLT_MIN;
  r = r ? X_dtype(X_bs(NT_OP_MAXIMUM, r, tiny), alpha->dtype) : NULL;
  nt_set_grad_enabled(g);
  return r;
}

/* Knuth: k = the number of uniforms whose running product stays above exp(-r) */
static nt_Tensor *poisson_small(nt_Tensor *r) {
  nt_Tensor *L = X_un(NT_OP_EXP, nt_neg(r));
  nt_Tensor *k = nt_zeros(r->shape, r->ndim, NT_F64, r->device);
  nt_Tensor *p = uniform_pos(r);
  nt_Tensor *pending = L && p ? nt_gt(p, L) : NULL;
  int round = 0;
  for (; k && pending && round < MAX_ROUNDS; round++) {
    int left = any_true(pending);
    if (left < 0) { nt_release(k); k = NULL; break; }
    if (!left) break;
    k = X_add(k, nt_to_dtype(pending, NT_F64));
    p = X_where(nt_retain(pending), X_mul(nt_retain(p), uniform_pos(r)), p);
    pending = X_bin(NT_OP_LOGICAL_AND, pending, p ? nt_gt(p, L) : NULL);
  }
  if (k && round >= MAX_ROUNDS) { nt_release(k); k = NULL; nt_error_set("poisson sampler: no result after %d rounds", MAX_ROUNDS); }
  nt_release(L); nt_release(p); nt_release(pending);
  return k;
}

/* lgamma(k + 1) = log k! */
static nt_Tensor *X_lgamma1(nt_Tensor *k) {
  nt_Tensor *k1 = nt_binary_scalar_ex(NT_OP_ADD, k, 1, NT_SCALAR_FLOAT);
  nt_Tensor *r = k1 ? nt_lgamma(k1) : NULL;
  nt_release(k1);
  return r;
}

/* PTRS (Hörmann 1993), r >= 10 */
static nt_Tensor *poisson_large(nt_Tensor *r) {
  nt_Tensor *slam = nt_sqrt(r), *loglam = nt_log(r);
  nt_Tensor *b = slam ? X_bs(NT_OP_ADD, nt_binary_scalar_ex(NT_OP_MUL, slam, 2.53, NT_SCALAR_FLOAT), 0.931) : NULL;
  nt_Tensor *a = b ? X_bs(NT_OP_ADD, nt_binary_scalar_ex(NT_OP_MUL, b, 0.02483, NT_SCALAR_FLOAT), -0.059) : NULL;
  nt_Tensor *inva = b ? X_bs(NT_OP_ADD, X_sb(NT_OP_DIV, 1.1328, nt_binary_scalar_ex(NT_OP_SUB, b, 3.4, NT_SCALAR_FLOAT)), 1.1239) : NULL;
  nt_Tensor *vr = b ? X_sb(NT_OP_SUB, 0.9277, X_sb(NT_OP_DIV, 3.6224, nt_binary_scalar_ex(NT_OP_SUB, b, 2, NT_SCALAR_FLOAT))) : NULL;
  nt_Tensor *res = nt_zeros(r->shape, r->ndim, NT_F64, r->device);
  nt_Tensor *pending = nt_ones(r->shape, r->ndim, NT_BOOL, r->device);
  int round = 0;
  bool ok = loglam && a && inva && vr && res && pending;
  for (; ok && round < MAX_ROUNDS; round++) {
    nt_Tensor *U = X_bs(NT_OP_SUB, uniform(r), 0.5), *V = uniform_pos(r);
    nt_Tensor *us = U ? X_sb(NT_OP_SUB, 0.5, nt_abs(U)) : NULL;
    /* k = floor((2a/us + b) U + lam + 0.43) */
    nt_Tensor *k = X_un(NT_OP_FLOOR, X_bs(NT_OP_ADD, X_add(X_mul(X_add(X_div(X_bs(NT_OP_MUL, nt_retain(a), 2), nt_retain(us)), nt_retain(b)), nt_retain(U)), nt_retain(r)), 0.43));
    /* quick accept: us >= 0.07 and V <= vr */
    nt_Tensor *acc1 = X_bin(NT_OP_LOGICAL_AND, X_bs(NT_OP_GE, nt_retain(us), 0.07), nt_le(V, vr));
    /* reject: k < 0, or us < 0.013 and V > us */
    nt_Tensor *rej = X_bin(NT_OP_LOGICAL_OR, X_bs(NT_OP_LT, nt_retain(k), 0),
                           X_bin(NT_OP_LOGICAL_AND, X_bs(NT_OP_LT, nt_retain(us), 0.013), nt_gt(V, us)));
    /* accept: log V + log(inva) - log(a / us^2 + b) <= -lam + k loglam - lgamma(k + 1) */
    nt_Tensor *lhs = X_sub(X_add(X_un(NT_OP_LOG, nt_retain(V)), X_un(NT_OP_LOG, nt_retain(inva))),
                           X_un(NT_OP_LOG, X_add(X_div(nt_retain(a), X_mul(nt_retain(us), nt_retain(us))), nt_retain(b))));
    nt_Tensor *kc = k ? X_bs(NT_OP_MAXIMUM, nt_retain(k), 0) : NULL;   /* lgamma's input, safe where rejected */
    nt_Tensor *rhs = X_sub(X_add(nt_neg(r), X_mul(nt_retain(kc), nt_retain(loglam))), kc ? X_lgamma1(kc) : NULL);
    nt_release(kc);
    nt_Tensor *acc2 = X_bin(NT_OP_LOGICAL_AND, X_un(NT_OP_LOGICAL_NOT, nt_retain(rej)), X_bin(NT_OP_LE, lhs, rhs));
    nt_Tensor *acc = X_bin(NT_OP_LOGICAL_OR, acc1, acc2);
    nt_Tensor *take = acc ? nt_logical_and(pending, acc) : NULL;
    nt_Tensor *r2 = X_where(take, nt_retain(k), nt_retain(res));
    nt_release(res); res = r2;
    nt_Tensor *p2 = X_bin(NT_OP_LOGICAL_AND, nt_retain(pending), X_un(NT_OP_LOGICAL_NOT, acc));
    nt_release(pending); pending = p2;
    nt_release(U); nt_release(V); nt_release(us); nt_release(k); nt_release(rej);
    int left = res && pending ? any_true(pending) : -1;
    if (left < 0) { ok = false; break; }
    if (!left) break;
  }
  if (ok && round >= MAX_ROUNDS) { ok = false; nt_error_set("poisson sampler: no acceptance after %d rounds", MAX_ROUNDS); }
  nt_release(slam); nt_release(loglam); nt_release(b); nt_release(a); nt_release(inva); nt_release(vr); nt_release(pending);
  if (!ok) { nt_release(res); return NULL; }
  return res;
}

nt_Tensor *nt_sample_poisson(nt_Tensor *rate) {
  if (!nt_dtype_is_float(rate->dtype)) NT_FAIL_NULL("poisson sampler: rate must be a floating tensor, got %s", nt_dtype_name(rate->dtype));
  if (check_all("poisson sampler", "rate", rate, NT_OP_GE, 0)) return NULL;
  bool g = nt_set_grad_enabled(false);
  nt_Tensor *r = nt_to_dtype(rate, NT_F64);
  nt_Tensor *big = r ? nt_binary_scalar_ex(NT_OP_GE, r, 10, NT_SCALAR_FLOAT) : NULL;
  nt_Tensor *rs = X_where(nt_retain(big), C(r, 0), nt_retain(r));    /* the small method's rates (0 where large) */
  nt_Tensor *rl = X_where(nt_retain(big), nt_retain(r), C(r, 10));   /* the large method's (10 where small) */
  nt_Tensor *s = rs ? poisson_small(rs) : NULL, *l = s && rl ? poisson_large(rl) : NULL;
  nt_Tensor *out = l ? X_dtype(X_where(big, l, s), rate->dtype) : NULL;
  if (!l) { nt_release(big); nt_release(s); }
  nt_release(r); nt_release(rs); nt_release(rl);
  nt_set_grad_enabled(g);
  return out;
}

/* the work the counting method may do: total trials (max count x elements) */
#define BINOMIAL_MAX_TRIALS ((int64_t)1 << 31)

nt_Tensor *nt_sample_binomial(nt_Tensor *count, nt_Tensor *p) {
  if (!nt_dtype_is_float(p->dtype)) NT_FAIL_NULL("binomial sampler: probs must be a floating tensor, got %s", nt_dtype_name(p->dtype));
  if (check_all("binomial sampler", "total_count", count, NT_OP_GE, 0) || check_all("binomial sampler", "probs", p, NT_OP_GE, 0) ||
      check_all("binomial sampler", "probs", p, NT_OP_LE, 1)) return NULL;
  bool g = nt_set_grad_enabled(false);
  nt_Tensor *n = nt_to_dtype(count, NT_F64), *pp = nt_to_dtype(p, NT_F64);
  nt_Tensor *nb = n && pp ? nt_add(n, pp) : NULL;   /* the broadcast shape */
  nt_Tensor *ne = nb ? nt_expand(n, nb->shape, nb->ndim) : NULL, *pe = nb ? nt_expand(pp, nb->shape, nb->ndim) : NULL;
  nt_Tensor *out = NULL, *mx = ne && ne->numel ? nt_max(ne, NULL, 0, false) : NULL;
  double maxn = 0;
  if (ne && (!ne->numel || (mx && nt_item(mx, &maxn) == 0))) {
    if (maxn != floor(maxn)) nt_error_set("binomial sampler: total_count must hold whole numbers, found %g", maxn);
    else if (maxn * (double)(ne->numel ? ne->numel : 1) > (double)BINOMIAL_MAX_TRIALS)
      nt_error_set("binomial sampler: total_count %g over %lld elements is more trials than this sampler allows (%lld)",
                   maxn, (long long)ne->numel, (long long)BINOMIAL_MAX_TRIALS);
    else {
      const int64_t CH = 64;
      int64_t sh[NT_MAXDIM + 1];
      memcpy(sh, ne->shape, sizeof(int64_t) * (size_t)ne->ndim);
      nt_Tensor *k = nt_zeros(ne->shape, ne->ndim, NT_F64, ne->device);
      nt_Tensor *n1 = nt_unsqueeze(ne, -1), *p1 = nt_unsqueeze(pe, -1);
      for (int64_t done = 0; k && n1 && p1 && done < (int64_t)maxn; done += CH) {
        int64_t m = (int64_t)maxn - done < CH ? (int64_t)maxn - done : CH;
        sh[ne->ndim] = m;
        nt_Tensor *u = nt_rand(sh, ne->ndim + 1, NT_F64, ne->device);
        nt_Tensor *j = nt_arange_on((double)done, (double)(done + m), 1, NT_F64, ne->device);
        /* trial j counts when j < n and u < p */
        nt_Tensor *hit = X_bin(NT_OP_LOGICAL_AND, u ? nt_lt(u, p1) : NULL, j ? nt_gt(n1, j) : NULL);
        k = X_add(k, X_sum(X_dtype(hit, NT_F64), -1, false));
        nt_release(u); nt_release(j);
        if (k && nt_interrupt_requested()) { nt_release(k); k = NULL; nt_error_set("interrupted"); }
      }
      nt_release(n1); nt_release(p1);
      out = k ? X_dtype(k, p->dtype) : NULL;
    }
  }
  nt_release(n); nt_release(pp); nt_release(nb); nt_release(ne); nt_release(pe); nt_release(mx);
  nt_set_grad_enabled(g);
  return out;
}
