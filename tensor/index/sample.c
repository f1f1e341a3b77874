/*
** index/sample.c — Gamma, Poisson and Binomial samplers for the
** distributions module.  Each is a vectorised rejection (or counting) loop
** over public random ops (nt_rand, nt_randn): every round draws for the
** elements still pending only (the loop compacts them), so the
** global Philox stream (nt_seed) decides the samples on every device.  The
** rounds are bounded; a loop that has not finished by then (probability far
** below 1e-100) is an error, never a silent partial result.  Gamma samples
** carry torch's implicit reparameterisation gradient to alpha (gammagrad.c);
** Poisson and Binomial samples have none (as torch).
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
#define MAX_STATE 8

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

/* ---- the compacting loop ------------------------------------------------------------------
** Only the pending elements are drawn for: idx holds their flat positions
** (i64, 1-D) and st[] their per-element state (f64, 1-D, aligned with idx).
** settle() writes the values of the elements that are done into out (a
** scatter_add into zeros: each position is written once) and drops them
** from idx and st[], so a round costs what is still pending. */
typedef struct Loop { nt_Tensor *out, *idx, *st[MAX_STATE]; int ns; } Loop;

static void loop_free(Loop *L) {
  nt_release(L->out); nt_release(L->idx);
  for (int i = 0; i < L->ns; i++) nt_release(L->st[i]);
}
/* out zeros of n; the loop over the positions where sel (bool, flat [n]; NULL: all) holds,
** with state st0[i][sel] (flat f64 [n]) */
static int loop_init(Loop *L, nt_Tensor *out, nt_Tensor *sel, nt_Tensor *const *st0, int ns) {
  L->out = nt_retain(out); L->ns = ns;
  nt_Tensor *all = nt_arange_on(0, (double)out->numel, 1, NT_I64, out->device);
  L->idx = all && sel ? nt_masked_select(all, sel) : nt_retain(all);
  nt_release(all);
  for (int i = 0; i < ns; i++) L->st[i] = sel ? nt_masked_select(st0[i], sel) : nt_retain(st0[i]);
  if (!L->idx) return -1;
  for (int i = 0; i < ns; i++) if (!L->st[i]) return -1;
  return 0;
}
/* out[idx[done]] = val[done]; the rest stays pending; returns how many, or -1 */
static int64_t settle(Loop *L, nt_Tensor *done, nt_Tensor *val) {
  nt_Tensor *si = nt_masked_select(L->idx, done), *sv = si ? nt_masked_select(val, done) : NULL;
  nt_Tensor *o = sv ? nt_scatter_add(L->out, 0, si, sv) : NULL;
  nt_release(si); nt_release(sv);
  if (!o) return -1;
  nt_release(L->out); L->out = o;
  nt_Tensor *keep = nt_logical_not(done);
  if (!keep) return -1;
  nt_Tensor *ni = nt_masked_select(L->idx, keep);
  nt_release(L->idx); L->idx = ni;
  for (int i = 0; i < L->ns; i++) {
    nt_Tensor *t = L->st[i] ? nt_masked_select(L->st[i], keep) : NULL;
    nt_release(L->st[i]); L->st[i] = t;
    if (!t) { nt_release(keep); return -1; }
  }
  nt_release(keep);
  return L->idx ? L->idx->numel : -1;
}

/* Marsaglia-Tsang for a >= 1 (flat f64 [n], all pending), into out */
static int gamma_loop(nt_Tensor *a, nt_Tensor *out, nt_Tensor **res) {
  nt_Tensor *d = nt_binary_scalar_ex(NT_OP_SUB, a, 1.0 / 3, NT_SCALAR_FLOAT);
  nt_Tensor *c = d ? X_un(NT_OP_RSQRT, nt_binary_scalar_ex(NT_OP_MUL, d, 9, NT_SCALAR_FLOAT)) : NULL;
  Loop L = {0};
  int rc = -1;
  if (!c || loop_init(&L, out, NULL, (nt_Tensor *[]){ d, c }, 2)) goto done;
  int64_t left = L.idx->numel;
  for (int round = 0; left > 0; round++) {
    if (round == MAX_ROUNDS) { nt_error_set("gamma sampler: no acceptance after %d rounds", MAX_ROUNDS); goto done; }
    nt_Tensor *dd = L.st[0], *cc = L.st[1];
    nt_Tensor *z = nt_randn(dd->shape, 1, NT_F64, dd->device), *u = uniform_pos(dd);
    nt_Tensor *v = X_bs(NT_OP_ADD, X_mul(nt_retain(cc), nt_retain(z)), 1);
    v = X_mul(X_mul(nt_retain(v), nt_retain(v)), v);
    /* accept when v > 0 and log u < z^2/2 + d - d v + d log v */
    nt_Tensor *rhs = X_add(X_bs(NT_OP_MUL, X_mul(nt_retain(z), nt_retain(z)), 0.5), nt_retain(dd));
    rhs = X_sub(rhs, X_mul(nt_retain(dd), nt_retain(v)));
    rhs = X_add(rhs, X_mul(nt_retain(dd), X_un(NT_OP_LOG, nt_retain(v))));
    nt_Tensor *acc = X_bin(NT_OP_LOGICAL_AND, X_bs(NT_OP_GT, nt_retain(v), 0), X_bin(NT_OP_LT, X_un(NT_OP_LOG, u), rhs));
    nt_Tensor *val = v ? nt_mul(dd, v) : NULL;
    left = acc && val ? settle(&L, acc, val) : -1;
    nt_release(z); nt_release(v); nt_release(acc); nt_release(val);
    if (left < 0) goto done;
  }
  *res = nt_retain(L.out);
  rc = 0;
done:
  loop_free(&L); nt_release(d); nt_release(c);
  return rc;
}

nt_Tensor *nt_sample_gamma(nt_Tensor *alpha) {
  if (!nt_dtype_is_float(alpha->dtype)) NT_FAIL_NULL("gamma sampler: concentration must be a floating tensor, got %s", nt_dtype_name(alpha->dtype));
  if (check_all("gamma sampler", "concentration", alpha, NT_OP_GT, 0)) return NULL;
  bool g = nt_set_grad_enabled(false);
  int64_t n = alpha->numel;
  nt_Tensor *a64 = nt_to_dtype(alpha, NT_F64), *a = a64 ? nt_reshape(a64, &n, 1) : NULL;
  nt_release(a64);
  nt_Tensor *lt1 = a ? nt_binary_scalar_ex(NT_OP_LT, a, 1, NT_SCALAR_FLOAT) : NULL;
  nt_Tensor *ab = X_where(nt_retain(lt1), a ? nt_binary_scalar_ex(NT_OP_ADD, a, 1, NT_SCALAR_FLOAT) : NULL, nt_retain(a));
  nt_Tensor *zero = ab ? nt_zeros(&n, 1, NT_F64, alpha->device) : NULL, *x = NULL;
  if (zero && gamma_loop(ab, zero, &x)) x = NULL;
  /* a < 1: Gamma(a + 1) * u^(1/a) = x * exp(log(u) / a) */
  nt_Tensor *boost = x ? X_un(NT_OP_EXP, X_div(X_un(NT_OP_LOG, uniform_pos(a)), nt_retain(a))) : NULL;
  nt_Tensor *r = X_where(lt1, X_mul(nt_retain(x), boost), nt_retain(x));
  nt_release(x); nt_release(ab); nt_release(a); nt_release(zero);
  double tiny = alpha->dtype == NT_F64 ? DBL_MIN : FLT_MIN;
  r = r ? X_dtype(X_bs(NT_OP_MAXIMUM, r, tiny), alpha->dtype) : NULL;
  nt_Tensor *y = r ? nt_reshape(r, alpha->shape, alpha->ndim) : NULL;
  nt_release(r);
  nt_set_grad_enabled(g);
  return ix_gamma_attach_grad(y, alpha);   /* torch's _standard_gamma: differentiable in alpha */
}

/* Knuth over the positions where sel holds: k = the number of uniforms whose
** running product stays above exp(-r) */
static int poisson_small(nt_Tensor *r, nt_Tensor *sel, nt_Tensor **out) {
  nt_Tensor *Lx = X_un(NT_OP_EXP, nt_neg(r)), *p = Lx ? uniform_pos(r) : NULL, *k = p ? nt_zeros(r->shape, 1, NT_F64, r->device) : NULL;
  Loop L = {0};
  int rc = -1;
  if (!k || loop_init(&L, *out, sel, (nt_Tensor *[]){ Lx, p, k }, 3)) goto done;
  int64_t left = L.idx->numel;
  for (int round = 0; left > 0; round++) {
    if (round == MAX_ROUNDS) { nt_error_set("poisson sampler: no result after %d rounds", MAX_ROUNDS); goto done; }
    nt_Tensor *fin = nt_le(L.st[1], L.st[0]);
    left = fin ? settle(&L, fin, L.st[2]) : -1;
    nt_release(fin);
    if (left <= 0) break;
    nt_Tensor *k1 = nt_binary_scalar_ex(NT_OP_ADD, L.st[2], 1, NT_SCALAR_FLOAT), *p1 = X_mul(nt_retain(L.st[1]), uniform_pos(L.st[1]));
    if (!k1 || !p1) { nt_release(k1); nt_release(p1); left = -1; break; }
    nt_release(L.st[2]); L.st[2] = k1;
    nt_release(L.st[1]); L.st[1] = p1;
  }
  if (left < 0) goto done;
  nt_release(*out); *out = nt_retain(L.out);
  rc = 0;
done:
  loop_free(&L); nt_release(Lx); nt_release(p); nt_release(k);
  return rc;
}

/* lgamma(k + 1) = log k! */
static nt_Tensor *X_lgamma1(nt_Tensor *k) {
  nt_Tensor *k1 = nt_binary_scalar_ex(NT_OP_ADD, k, 1, NT_SCALAR_FLOAT);
  nt_Tensor *r = k1 ? nt_lgamma(k1) : NULL;
  nt_release(k1);
  return r;
}

/* PTRS (Hörmann 1993) over the positions where sel holds (r >= 10 there) */
static int poisson_large(nt_Tensor *r, nt_Tensor *sel, nt_Tensor **out) {
  nt_Tensor *slam = nt_sqrt(r), *loglam = nt_log(r);
  nt_Tensor *b = slam ? X_bs(NT_OP_ADD, nt_binary_scalar_ex(NT_OP_MUL, slam, 2.53, NT_SCALAR_FLOAT), 0.931) : NULL;
  nt_Tensor *a = b ? X_bs(NT_OP_ADD, nt_binary_scalar_ex(NT_OP_MUL, b, 0.02483, NT_SCALAR_FLOAT), -0.059) : NULL;
  nt_Tensor *inva = b ? X_bs(NT_OP_ADD, X_sb(NT_OP_DIV, 1.1328, nt_binary_scalar_ex(NT_OP_SUB, b, 3.4, NT_SCALAR_FLOAT)), 1.1239) : NULL;
  nt_Tensor *vr = b ? X_sb(NT_OP_SUB, 0.9277, X_sb(NT_OP_DIV, 3.6224, nt_binary_scalar_ex(NT_OP_SUB, b, 2, NT_SCALAR_FLOAT))) : NULL;
  Loop L = {0};
  int rc = -1;
  if (!loglam || !a || !inva || !vr || loop_init(&L, *out, sel, (nt_Tensor *[]){ r, loglam, b, a, inva, vr }, 6)) goto done;
  int64_t left = L.idx->numel;
  for (int round = 0; left > 0; round++) {
    if (round == MAX_ROUNDS) { nt_error_set("poisson sampler: no acceptance after %d rounds", MAX_ROUNDS); goto done; }
    nt_Tensor *R = L.st[0], *LL = L.st[1], *B = L.st[2], *A = L.st[3], *IA = L.st[4], *VR = L.st[5];
    nt_Tensor *U = X_bs(NT_OP_SUB, uniform(R), 0.5), *V = uniform_pos(R);
    nt_Tensor *us = U ? X_sb(NT_OP_SUB, 0.5, nt_abs(U)) : NULL;
    /* k = floor((2a/us + b) U + lam + 0.43) */
    nt_Tensor *k = X_un(NT_OP_FLOOR, X_bs(NT_OP_ADD, X_add(X_mul(X_add(X_div(X_bs(NT_OP_MUL, nt_retain(A), 2), nt_retain(us)), nt_retain(B)), nt_retain(U)), nt_retain(R)), 0.43));
    /* quick accept: us >= 0.07 and V <= vr */
    nt_Tensor *acc1 = X_bin(NT_OP_LOGICAL_AND, X_bs(NT_OP_GE, nt_retain(us), 0.07), V ? nt_le(V, VR) : NULL);
    /* reject: k < 0, or us < 0.013 and V > us */
    nt_Tensor *rej = X_bin(NT_OP_LOGICAL_OR, X_bs(NT_OP_LT, nt_retain(k), 0),
                           X_bin(NT_OP_LOGICAL_AND, X_bs(NT_OP_LT, nt_retain(us), 0.013), V && us ? nt_gt(V, us) : NULL));
    /* accept: log V + log(inva) - log(a / us^2 + b) <= -lam + k loglam - log k! */
    nt_Tensor *lhs = X_sub(X_add(X_un(NT_OP_LOG, nt_retain(V)), X_un(NT_OP_LOG, nt_retain(IA))),
                           X_un(NT_OP_LOG, X_add(X_div(nt_retain(A), X_mul(nt_retain(us), nt_retain(us))), nt_retain(B))));
    nt_Tensor *kc = k ? X_bs(NT_OP_MAXIMUM, nt_retain(k), 0) : NULL;   /* log k!'s input, safe where rejected */
    nt_Tensor *rhs = X_sub(X_add(nt_neg(R), X_mul(nt_retain(kc), nt_retain(LL))), kc ? X_lgamma1(kc) : NULL);
    nt_release(kc);
    nt_Tensor *acc2 = X_bin(NT_OP_LOGICAL_AND, X_un(NT_OP_LOGICAL_NOT, nt_retain(rej)), X_bin(NT_OP_LE, lhs, rhs));
    nt_Tensor *acc = X_bin(NT_OP_LOGICAL_OR, acc1, acc2);
    left = acc && k ? settle(&L, acc, k) : -1;
    nt_release(U); nt_release(V); nt_release(us); nt_release(k); nt_release(rej); nt_release(acc);
    if (left < 0) goto done;
  }
  nt_release(*out); *out = nt_retain(L.out);
  rc = 0;
done:
  loop_free(&L);
  nt_release(slam); nt_release(loglam); nt_release(b); nt_release(a); nt_release(inva); nt_release(vr);
  return rc;
}

nt_Tensor *nt_sample_poisson(nt_Tensor *rate) {
  if (!nt_dtype_is_float(rate->dtype)) NT_FAIL_NULL("poisson sampler: rate must be a floating tensor, got %s", nt_dtype_name(rate->dtype));
  if (check_all("poisson sampler", "rate", rate, NT_OP_GE, 0)) return NULL;
  bool g = nt_set_grad_enabled(false);
  int64_t n = rate->numel;
  nt_Tensor *r64 = nt_to_dtype(rate, NT_F64), *r = r64 ? nt_reshape(r64, &n, 1) : NULL;
  nt_release(r64);
  nt_Tensor *big = r ? nt_binary_scalar_ex(NT_OP_GE, r, 10, NT_SCALAR_FLOAT) : NULL, *small = big ? nt_logical_not(big) : NULL;
  nt_Tensor *out = small ? nt_zeros(&n, 1, NT_F64, rate->device) : NULL, *y = NULL;
  if (out && !poisson_small(r, small, &out) && !poisson_large(r, big, &out)) {
    nt_Tensor *c = nt_to_dtype(out, rate->dtype);
    y = c ? nt_reshape(c, rate->shape, rate->ndim) : NULL;
    nt_release(c);
  }
  nt_release(r); nt_release(big); nt_release(small); nt_release(out);
  nt_set_grad_enabled(g);
  return y;
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
