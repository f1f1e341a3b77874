/* test_sort.c — sort/argsort/topk (stability, NaN order, axes) and cumsum,
** values by hand plus gradchecks. */
#include "tn.h"
#include "gradcheck.h"
#include "tensor/nn/nn.h"

#include <math.h>

static void t_sort_values(void) {
  double v[6] = {3, NAN, 1, 3, -2, 0};
  nt_Tensor *x = tn_f64(v, (int64_t[]){6}, 1, false), *sv = NULL, *si = NULL, *dv = NULL, *di = NULL;
  CHECK(nt_sort(x, 0, false, &sv, &si) == 0 && nt_sort(x, -1, true, &dv, &di) == 0, "%s", nt_error_msg());
  /* ascending: -2 0 1 3 3 nan with the two 3s in input order (0, 3) */
  double wa[6] = {-2, 0, 1, 3, 3, NAN}, ia[6] = {4, 5, 2, 0, 3, 1};
  double wd[6] = {NAN, 3, 3, 1, 0, -2}, id[6] = {1, 0, 3, 2, 5, 4};
  int ok = 1;
  for (int i = 0; i < 6; i++) {
    double a = tn_at(sv, i), d = tn_at(dv, i);
    ok &= (isnan(wa[i]) ? isnan(a) : a == wa[i]) && tn_at(si, i) == ia[i];
    ok &= (isnan(wd[i]) ? isnan(d) : d == wd[i]) && tn_at(di, i) == id[i];
  }
  nt_Tensor *as = nt_argsort(x, 0, false);
  ok &= as && as->dtype == NT_I64 && tn_at(as, 0) == 4;
  nt_release(sv); nt_release(si); nt_release(dv); nt_release(di); nt_release(as); nt_release(x);
  CHECK(ok, "sort order/indices wrong");
  /* along axis 0 of [3,2] ints, and topk */
  int64_t iv[6] = {5, 1, 2, 9, 7, 3};
  nt_Tensor *xi = tn_i64(iv, (int64_t[]){3, 2}, 2), *tv = NULL, *ti = NULL;
  CHECK(nt_topk(xi, 2, 0, true, &tv, &ti) == 0, "%s", nt_error_msg());
  ok = tv->shape[0] == 2 && tv->dtype == NT_I64 && tn_at(tv, 0) == 7 && tn_at(tv, 1) == 9 && tn_at(tv, 2) == 5 &&
       tn_at(tv, 3) == 3 && tn_at(ti, 0) == 2 && tn_at(ti, 1) == 1;
  nt_release(tv); nt_release(ti);
  CHECK(ok, "topk wrong");
  CHECK(nt_topk(xi, 4, 0, true, &tv, &ti) < 0 && !tv && !ti, "k > n accepted");
  nt_Tensor *cs = nt_cumsum(xi, 0);
  ok = cs && cs->dtype == NT_I64 && tn_at(cs, 2) == 7 && tn_at(cs, 5) == 13 && tn_at(cs, 1) == 1;
  nt_release(cs);
  nt_release(xi);
  CHECK(ok, "cumsum wrong");
}

typedef struct { int axis; int64_t k; bool desc; } s_ctx;
static nt_Tensor *f_sort(nt_Tensor *const *in, void *c) {
  s_ctx *s = c;
  nt_Tensor *v = NULL;
  if (s->k) { if (nt_topk(in[0], s->k, s->axis, s->desc, &v, NULL)) return NULL; }
  else if (nt_sort(in[0], s->axis, s->desc, &v, NULL)) return NULL;
  return v;
}
static nt_Tensor *f_cumsum(nt_Tensor *const *in, void *c) { return nt_cumsum(in[0], ((s_ctx *)c)->axis); }

static void t_sort_grad(void) {
  for (int ax = 0; ax < 3; ax++) {
    s_ctx c = {ax, 0, ax == 1}, t = {ax, 2, ax != 1};
    nt_Tensor *in1[] = {tn_rand64((int64_t[]){3, 4, 2}, 3, true)}, *in2[] = {tn_rand64((int64_t[]){3, 4, 2}, 3, true)},
              *in3[] = {tn_rand64((int64_t[]){3, 4, 2}, 3, true)};
    char w1[512], w2[512], w3[512];
    int r1 = tn_gradcheck(f_sort, &c, in1, 1, w1, sizeof w1);
    int r2 = tn_gradcheck(f_sort, &t, in2, 1, w2, sizeof w2);
    int r3 = tn_gradcheck(f_cumsum, &c, in3, 1, w3, sizeof w3);
    nt_release(in1[0]); nt_release(in2[0]); nt_release(in3[0]);
    CHECK(r1 == 0, "sort axis %d: %s", ax, w1);
    CHECK(r2 == 0, "topk axis %d: %s", ax, w2);
    CHECK(r3 == 0, "cumsum axis %d: %s", ax, w3);
  }
}

const tn_test tn_tests_sort[] = {
  {"sort_argsort_topk_cumsum_values", t_sort_values},
  {"sort_topk_cumsum_gradcheck", t_sort_grad},
  {NULL, NULL},
};
