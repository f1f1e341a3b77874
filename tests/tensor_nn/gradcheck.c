/* gradcheck.c — see gradcheck.h. */
#include "gradcheck.h"
#include "tn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

nt_Tensor *tn_f64(const double *v, const int64_t *shape, int ndim, bool rg) {
  nt_Tensor *t = nt_from_buffer(v, NT_F64, shape, ndim, NT_F64);
  if (t && rg) nt_set_requires_grad(t, true);
  return t;
}

nt_Tensor *tn_rand64(const int64_t *shape, int ndim, bool rg) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = 2 * tn_urand() - 1;
  nt_Tensor *t = tn_f64(v, shape, ndim, rg);
  free(v);
  return t;
}

nt_Tensor *tn_i64(const int64_t *v, const int64_t *shape, int ndim) {
  return nt_from_buffer(v, NT_I64, shape, ndim, NT_I64);
}

double tn_at(nt_Tensor *t, int64_t i) {
  double *buf = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  nt_to_host(t, buf, NT_F64);
  double v = buf[i];
  free(buf);
  return v;
}

double tn_maxdiff(nt_Tensor *a, nt_Tensor *b) {
  if (!a || !b || a->numel != b->numel) return INFINITY;
  double *x = malloc(sizeof(double) * (size_t)(a->numel + 1)), *y = malloc(sizeof(double) * (size_t)(b->numel + 1));
  nt_to_host(a, x, NT_F64);
  nt_to_host(b, y, NT_F64);
  double m = 0;
  for (int64_t i = 0; i < a->numel; i++) {
    double d = fabs(x[i] - y[i]);
    if (isnan(x[i]) != isnan(y[i])) d = INFINITY;
    if (d > m) m = d;
  }
  free(x); free(y);
  return m;
}

/* L = sum(f(in) * R) as a double (R's shape must match) */
static int eval(tn_fn f, void *ctx, nt_Tensor *const *in, nt_Tensor *R, double *L, char *why, size_t wl) {
  nt_Tensor *y = f(in, ctx);
  if (!y) { snprintf(why, wl, "forward failed: %s", nt_error_msg()); return -1; }
  nt_Tensor *yd = nt_to_dtype(y, NT_F64), *p = nt_mul(yd, R), *s = p ? nt_sum(p, NULL, 0, false) : NULL;
  int rc = s ? nt_item(s, L) : -1;
  if (rc) snprintf(why, wl, "eval failed: %s", nt_error_msg());
  nt_release(y); nt_release(yd); nt_release(p); nt_release(s);
  return rc;
}

int tn_gradcheck(tn_fn f, void *ctx, nt_Tensor *const *in, int n, char *why, size_t wl) {
  const double eps = 1e-6, tol = 1e-5;
  for (int k = 0; k < n; k++) if (in[k]) nt_set_grad(in[k], NULL);
  nt_Tensor *y = f(in, ctx);
  if (!y) { snprintf(why, wl, "forward failed: %s", nt_error_msg()); return -1; }
  nt_Tensor *R = tn_rand64(y->shape, y->ndim, false);
  nt_Tensor *yd = nt_to_dtype(y, NT_F64), *p = nt_mul(yd, R), *s = p ? nt_sum(p, NULL, 0, false) : NULL;
  int rc = s ? nt_backward(s, NULL, false) : -1;
  nt_release(y); nt_release(yd); nt_release(p); nt_release(s);
  if (rc) { snprintf(why, wl, "backward failed: %s", nt_error_msg()); nt_release(R); return -1; }
  bool prev = nt_set_grad_enabled(false);
  rc = 0;
  for (int k = 0; k < n && !rc; k++) {
    nt_Tensor *x = in[k];
    if (!x || !x->requires_grad) continue;
    nt_Tensor *g = nt_grad(x);
    if (!g) { snprintf(why, wl, "input %d got no gradient", k); rc = -1; break; }
    double *ga = malloc(sizeof(double) * (size_t)(x->numel + 1));
    nt_to_host(g, ga, NT_F64);
    double *xv = nt_data_ptr(x);
    for (int64_t j = 0; j < x->numel && !rc; j++) {
      double orig = xv[j], lp, lm;
      xv[j] = orig + eps;
      rc = eval(f, ctx, in, R, &lp, why, wl);
      xv[j] = orig - eps;
      if (!rc) rc = eval(f, ctx, in, R, &lm, why, wl);
      xv[j] = orig;
      if (rc) break;
      double num = (lp - lm) / (2 * eps);
      if (!(fabs(num - ga[j]) <= tol * (1 + fabs(num)))) {
        snprintf(why, wl, "input %d element %lld: autograd %.10g vs numeric %.10g", k, (long long)j, ga[j], num);
        rc = -1;
      }
    }
    free(ga);
  }
  nt_set_grad_enabled(prev);
  nt_release(R);
  return rc;
}
