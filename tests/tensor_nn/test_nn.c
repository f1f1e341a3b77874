/* test_nn.c — hand-computed values and gradchecks for softmax/losses,
** layer_norm, dropout, embedding and the index ops. */
#include "tn.h"
#include "gradcheck.h"
#include "tensor/nn/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GC(fn, ctx, ...) do { nt_Tensor *in_[] = {__VA_ARGS__}; char why_[512]; \
    int n_ = (int)(sizeof in_ / sizeof in_[0]); \
    int rc_ = tn_gradcheck(fn, ctx, in_, n_, why_, sizeof why_); \
    for (int i_ = 0; i_ < n_; i_++) nt_release(in_[i_]); \
    CHECK(rc_ == 0, "gradcheck %s: %s", #fn, why_); } while (0)

/* ---- softmax family -------------------------------------------------------------- */
static void t_softmax_values(void) {
  double v[6] = {1, 2, 3, 1000, 1001, 1002};
  nt_Tensor *x = tn_f64(v, (int64_t[]){2, 3}, 2, false);
  nt_Tensor *s = nt_softmax(x, -1), *l = nt_log_softmax(x, 1), *s0 = nt_softmax(x, 0);
  CHECK(s && l && s0, "%s", nt_error_msg());
  double e1 = 0.09003057317038046, e2 = 0.24472847105479767, e3 = 0.6652409557748219;
  double want[6] = {e1, e2, e3, e1, e2, e3};
  double worst = 0, worstl = 0;
  for (int i = 0; i < 6; i++) {
    worst = fmax(worst, fabs(tn_at(s, i) - want[i]));
    worstl = fmax(worstl, fabs(tn_at(l, i) - log(want[i])));
  }
  double c0 = tn_at(s0, 0);   /* column softmax: exp(1-1000) / (1 + exp(1-1000)) ~ 0 */
  double c3 = tn_at(s0, 3);
  nt_release(x); nt_release(s); nt_release(l); nt_release(s0);
  CHECK(worst < 1e-12, "softmax off by %g (large inputs must stay finite)", worst);
  CHECK(worstl < 1e-12, "log_softmax off by %g", worstl);
  CHECK(c0 < 1e-300 && fabs(c3 - 1) < 1e-15, "axis-0 softmax wrong: %g %g", c0, c3);
  /* f32 path agrees with f64 */
  float vf[6] = {1, 2, 3, -4, 0.5f, 9};
  nt_Tensor *xf = nt_from_buffer(vf, NT_F32, (int64_t[]){2, 3}, 2, NT_F32);
  nt_Tensor *xd = nt_to_dtype(xf, NT_F64);
  nt_Tensor *sf = nt_log_softmax(xf, -1), *sd = nt_log_softmax(xd, -1);
  double d = tn_maxdiff(sf, sd);
  int is32 = sf && sf->dtype == NT_F32;
  nt_release(xf); nt_release(xd); nt_release(sf); nt_release(sd);
  CHECK(is32, "f32 in must give f32 out");
  CHECK(d < 1e-5, "f32 vs f64 differ by %g", d);
}

static nt_Tensor *f_softmax(nt_Tensor *const *in, void *ctx) { return nt_softmax(in[0], *(int *)ctx); }
static nt_Tensor *f_log_softmax(nt_Tensor *const *in, void *ctx) { return nt_log_softmax(in[0], *(int *)ctx); }

static void t_softmax_grad(void) {
  for (int ax = -3; ax < 3; ax++) {
    GC(f_softmax, &ax, tn_rand64((int64_t[]){2, 3, 4}, 3, true));
    GC(f_log_softmax, &ax, tn_rand64((int64_t[]){3, 2, 5}, 3, true));
  }
  int ax = 0;
  GC(f_softmax, &ax, tn_rand64((int64_t[]){7}, 1, true));
}

typedef struct { nt_Tensor *t; int64_t ignore; double eps; } xent_ctx;
static nt_Tensor *f_xent(nt_Tensor *const *in, void *ctx) {
  xent_ctx *c = ctx;
  return nt_cross_entropy(in[0], c->t, c->ignore, c->eps);
}

static void t_cross_entropy(void) {
  double v[6] = {1, 2, 3, 1, 1, 1};
  int64_t tg[2] = {2, 0};
  nt_Tensor *x = tn_f64(v, (int64_t[]){2, 3}, 2, true), *t = tn_i64(tg, (int64_t[]){2}, 1);
  nt_Tensor *l = nt_cross_entropy(x, t, -100, 0);
  CHECK(l, "%s", nt_error_msg());
  double lv = tn_at(l, 0);
  CHECK(fabs(lv - 0.753109126556245) < 1e-12, "loss %.15g", lv);
  /* backward = (softmax - onehot) / N */
  CHECK(nt_backward(l, NULL, false) == 0, "%s", nt_error_msg());
  double g0 = tn_at(nt_grad(x), 0), g5 = tn_at(nt_grad(x), 3);
  nt_release(l);
  CHECK(fabs(g0 - 0.09003057317038046 / 2) < 1e-12 && fabs(g5 - (1.0 / 3 - 1) / 2) < 1e-12, "grad %g %g", g0, g5);
  /* ignore_index: only row 0 counts; label smoothing 0.1 by hand */
  int64_t tg2[2] = {2, -100};
  nt_Tensor *t2 = tn_i64(tg2, (int64_t[]){2}, 1);
  l = nt_cross_entropy(x, t2, -100, 0.1);
  CHECK(l, "%s", nt_error_msg());
  double lse = 3.40760596444438, want = 0.9 * (lse - 3) + 0.1 * (lse - 2);
  lv = tn_at(l, 0);
  nt_release(l);
  CHECK(fabs(lv - want) < 1e-12, "smoothed/ignored loss %.15g want %.15g", lv, want);
  /* bad target */
  int64_t tg3[2] = {3, 0};
  nt_Tensor *t3 = tn_i64(tg3, (int64_t[]){2}, 1);
  l = nt_cross_entropy(x, t3, -100, 0);
  CHECK(!l && strstr(nt_error_msg(), "out of bounds"), "bad target: %s", nt_error_msg());
  nt_release(t3);
  xent_ctx c = {t, -100, 0};
  GC(f_xent, &c, tn_rand64((int64_t[]){2, 3}, 2, true));
  c.t = t2; c.eps = 0.25;
  GC(f_xent, &c, tn_rand64((int64_t[]){2, 3}, 2, true));
  nt_release(x); nt_release(t); nt_release(t2);
  /* [N,C,d] form: targets [N,d] */
  int64_t tg4[6] = {0, 3, 1, 2, 2, -1};
  nt_Tensor *t4 = tn_i64(tg4, (int64_t[]){2, 3}, 2);
  xent_ctx c4 = {t4, -1, 0.1};
  GC(f_xent, &c4, tn_rand64((int64_t[]){2, 4, 3}, 3, true));
  nt_release(t4);
}

static nt_Tensor *f_mse(nt_Tensor *const *in, void *ctx) { (void)ctx; return nt_mse_loss(in[0], in[1]); }
static void t_mse(void) {
  double a[3] = {1, 2, 3}, b[3] = {1, 0, 0};
  nt_Tensor *x = tn_f64(a, (int64_t[]){3}, 1, false), *y = tn_f64(b, (int64_t[]){3}, 1, false);
  nt_Tensor *l = nt_mse_loss(x, y);
  double v = l ? tn_at(l, 0) : NAN;
  nt_release(x); nt_release(y); nt_release(l);
  CHECK(fabs(v - 13.0 / 3) < 1e-12, "mse %g", v);
  GC(f_mse, NULL, tn_rand64((int64_t[]){2, 3}, 2, true), tn_rand64((int64_t[]){3}, 1, true));
}

/* ---- layer norm ---------------------------------------------------------------------- */
static nt_Tensor *f_ln(nt_Tensor *const *in, void *ctx) { (void)ctx; return nt_layer_norm(in[0], in[1], in[2], 1e-5); }
static nt_Tensor *f_ln_plain(nt_Tensor *const *in, void *ctx) { (void)ctx; return nt_layer_norm(in[0], NULL, NULL, 0.1); }

static void t_layer_norm(void) {
  double v[4] = {1, 2, 3, 4}, w[4] = {1, 2, 1, 1}, b[4] = {0, 0, 0, 10};
  nt_Tensor *x = tn_f64(v, (int64_t[]){1, 4}, 2, false), *wt = tn_f64(w, (int64_t[]){4}, 1, false),
            *bt = tn_f64(b, (int64_t[]){4}, 1, false);
  nt_Tensor *y = nt_layer_norm(x, wt, bt, 0);
  CHECK(y, "%s", nt_error_msg());
  double r = 1 / sqrt(1.25);      /* var of 1..4 = 1.25 */
  double want[4] = {-1.5 * r, -0.5 * r * 2, 0.5 * r, 1.5 * r + 10}, worst = 0;
  for (int i = 0; i < 4; i++) worst = fmax(worst, fabs(tn_at(y, i) - want[i]));
  int shape_ok = y->ndim == 2 && y->shape[1] == 4;
  nt_release(x); nt_release(wt); nt_release(bt); nt_release(y);
  CHECK(worst < 1e-12 && shape_ok, "layer_norm off by %g", worst);
  GC(f_ln, NULL, tn_rand64((int64_t[]){2, 3, 5}, 3, true), tn_rand64((int64_t[]){5}, 1, true), tn_rand64((int64_t[]){5}, 1, true));
  GC(f_ln, NULL, tn_rand64((int64_t[]){4, 70}, 2, true), tn_rand64((int64_t[]){70}, 1, true), tn_rand64((int64_t[]){70}, 1, false));
  GC(f_ln_plain, NULL, tn_rand64((int64_t[]){3, 4}, 2, true));
  nt_Tensor *bad = tn_rand64((int64_t[]){3}, 1, false), *xx = tn_rand64((int64_t[]){2, 4}, 2, false);
  y = nt_layer_norm(xx, bad, NULL, 1e-5);
  nt_release(bad); nt_release(xx);
  CHECK(!y && strstr(nt_error_msg(), "weight must have shape [4]"), "%s", nt_error_msg());
}

/* ---- dropout -------------------------------------------------------------------------- */
static void t_dropout(void) {
  nt_seed(1234);
  int64_t n = 10000;
  nt_Tensor *x = nt_ones(&n, 1, NT_F64, NT_CPU);
  nt_set_requires_grad(x, true);
  nt_Tensor *y = nt_dropout(x, 0.3, true);
  CHECK(y, "%s", nt_error_msg());
  nt_Tensor *s = nt_sum(y, NULL, 0, false);
  CHECK(nt_backward(s, NULL, false) == 0, "%s", nt_error_msg());
  double *yv = malloc(sizeof(double) * 10000), *gv = malloc(sizeof(double) * 10000);
  nt_to_host(y, yv, NT_F64);
  nt_to_host(nt_grad(x), gv, NT_F64);
  int64_t kept = 0, bad = 0;
  for (int64_t i = 0; i < n; i++) {
    if (yv[i] != 0) { kept++; bad += fabs(yv[i] - 1 / 0.7) > 1e-12; }
    bad += gv[i] != yv[i];          /* x = 1, so dy/dx equals y */
  }
  free(yv); free(gv);
  nt_release(y); nt_release(s);
  CHECK(!bad, "%lld elements not 0 or 1/(1-p), or grad != mask/(1-p)", (long long)bad);
  CHECK(kept > 6800 && kept < 7200, "kept %lld of 10000 with p = 0.3", (long long)kept);
  nt_Tensor *e = nt_dropout(x, 0.3, false), *z = nt_dropout(x, 1, true);
  int ok = e == x && z && tn_at(z, 5) == 0;
  nt_release(e); nt_release(z);
  nt_Tensor *b = nt_dropout(x, 1.5, true);
  nt_release(x);
  CHECK(ok, "eval mode must return x; p=1 must zero");
  CHECK(!b && strstr(nt_error_msg(), "probability"), "p=1.5: %s", nt_error_msg());
}

/* ---- embedding & index ops ---------------------------------------------------------- */
typedef struct { nt_Tensor *idx, *idx2; int axis; } ix_ctx;
static nt_Tensor *f_emb(nt_Tensor *const *in, void *c) { return nt_embedding(in[0], ((ix_ctx *)c)->idx); }
static nt_Tensor *f_take(nt_Tensor *const *in, void *c) { return nt_take(in[0], ((ix_ctx *)c)->idx, ((ix_ctx *)c)->axis); }
static nt_Tensor *f_gather(nt_Tensor *const *in, void *c) { return nt_gather(in[0], ((ix_ctx *)c)->axis, ((ix_ctx *)c)->idx); }
static nt_Tensor *f_scatter(nt_Tensor *const *in, void *c) { return nt_scatter_add(in[0], ((ix_ctx *)c)->axis, ((ix_ctx *)c)->idx, in[1]); }
static nt_Tensor *f_mask(nt_Tensor *const *in, void *c) { return nt_masked_select(in[0], ((ix_ctx *)c)->idx); }
static nt_Tensor *f_index(nt_Tensor *const *in, void *c) { return nt_index_tensor(in[0], ((ix_ctx *)c)->idx); }

static void t_embedding(void) {
  double w[6] = {0, 1, 10, 11, 20, 21};
  int64_t iv[4] = {2, 0, 2, -1};
  nt_Tensor *W = tn_f64(w, (int64_t[]){3, 2}, 2, true), *I = tn_i64(iv, (int64_t[]){2, 2}, 2);
  nt_Tensor *e = nt_embedding(W, I);
  CHECK(e, "%s", nt_error_msg());
  int shape_ok = e->ndim == 3 && e->shape[0] == 2 && e->shape[1] == 2 && e->shape[2] == 2;
  double want[8] = {20, 21, 0, 1, 20, 21, 20, 21}, worst = 0;
  for (int i = 0; i < 8; i++) worst = fmax(worst, fabs(tn_at(e, i) - want[i]));
  nt_Tensor *s = nt_sum(e, NULL, 0, false);
  int brc = nt_backward(s, NULL, false);
  double g4 = brc ? NAN : tn_at(nt_grad(W), 4), g2 = brc ? NAN : tn_at(nt_grad(W), 2);
  nt_release(e); nt_release(s); nt_release(W);
  CHECK(shape_ok && worst == 0, "embedding values/shape wrong");
  CHECK(g4 == 3 && g2 == 0, "scatter-add backward: row 2 grad %g (want 3), row 1 %g", g4, g2);
  ix_ctx c = {I, NULL, 0};
  GC(f_emb, &c, tn_rand64((int64_t[]){3, 4}, 2, true));
  nt_release(I);
  int64_t bv[1] = {3};
  nt_Tensor *B = tn_i64(bv, (int64_t[]){1}, 1), *W2 = tn_rand64((int64_t[]){3, 2}, 2, false);
  e = nt_embedding(W2, B);
  nt_release(B); nt_release(W2);
  CHECK(!e && strstr(nt_error_msg(), "out of bounds"), "oob: %s", nt_error_msg());
}

static void t_take_gather_scatter(void) {
  int64_t iv[3] = {1, 1, 0};
  nt_Tensor *I = tn_i64(iv, (int64_t[]){3}, 1);
  for (int ax = 0; ax < 3; ax++) {
    ix_ctx c = {I, NULL, ax};
    GC(f_take, &c, tn_rand64((int64_t[]){2, 3, 2}, 3, true));
  }
  /* index_select values: x [2,3], columns {2, 0} */
  double xv[6] = {1, 2, 3, 4, 5, 6};
  int64_t cv[2] = {2, 0};
  nt_Tensor *X = tn_f64(xv, (int64_t[]){2, 3}, 2, false), *C = tn_i64(cv, (int64_t[]){2}, 1);
  nt_Tensor *r = nt_index_select(X, 1, C);
  int ok = r && r->shape[0] == 2 && r->shape[1] == 2 && tn_at(r, 0) == 3 && tn_at(r, 1) == 1 && tn_at(r, 3) == 4;
  nt_release(r);
  CHECK(ok, "index_select wrong");
  /* gather along 1: idx [[0,0],[1,0]] -> [[1,1],[5,4]] */
  int64_t gv[4] = {0, 0, 1, 0};
  nt_Tensor *G = tn_i64(gv, (int64_t[]){2, 2}, 2);
  r = nt_gather(X, 1, G);
  ok = r && tn_at(r, 0) == 1 && tn_at(r, 1) == 1 && tn_at(r, 2) == 5 && tn_at(r, 3) == 4;
  nt_release(r);
  CHECK(ok, "gather wrong");
  /* scatter_add along 0 into zeros [2,3]: idx [[1,0,1]] src [[1,2,3]] -> [[0,2,0],[1,0,3]] */
  int64_t sv[3] = {1, 0, 1};
  double srcv[3] = {1, 2, 3};
  nt_Tensor *S = tn_i64(sv, (int64_t[]){1, 3}, 2), *SRC = tn_f64(srcv, (int64_t[]){1, 3}, 2, false);
  nt_Tensor *Z = nt_zeros((int64_t[]){2, 3}, 2, NT_F64, NT_CPU);
  r = nt_scatter_add(Z, 0, S, SRC);
  ok = r && tn_at(r, 0) == 0 && tn_at(r, 1) == 2 && tn_at(r, 3) == 1 && tn_at(r, 5) == 3;
  nt_release(r); nt_release(Z); nt_release(SRC);
  CHECK(ok, "scatter_add wrong");
  ix_ctx c = {G, NULL, 1};
  GC(f_gather, &c, tn_rand64((int64_t[]){2, 3}, 2, true));
  int64_t g3[6] = {2, 0, 1, 1, 0, 2};
  nt_Tensor *G3 = tn_i64(g3, (int64_t[]){2, 3, 1}, 3);
  ix_ctx c3 = {G3, NULL, 1};
  GC(f_gather, &c3, tn_rand64((int64_t[]){2, 4, 2}, 3, true));
  ix_ctx c4 = {G3, NULL, 1};
  GC(f_scatter, &c4, tn_rand64((int64_t[]){2, 4, 2}, 3, true), tn_rand64((int64_t[]){2, 3, 1}, 3, true));
  nt_release(G3); nt_release(S); nt_release(G); nt_release(C); nt_release(X); nt_release(I);
}

static void t_masks_and_one_hot(void) {
  double xv[6] = {1, 2, 3, 4, 5, 6};
  uint8_t mv[3] = {1, 0, 1};
  nt_Tensor *X = tn_f64(xv, (int64_t[]){2, 3}, 2, false);
  nt_Tensor *M = nt_from_buffer(mv, NT_BOOL, (int64_t[]){3}, 1, NT_BOOL);
  nt_Tensor *r = nt_masked_select(X, M);   /* mask broadcasts over rows */
  int ok = r && r->ndim == 1 && r->shape[0] == 4 && tn_at(r, 0) == 1 && tn_at(r, 1) == 3 && tn_at(r, 2) == 4 && tn_at(r, 3) == 6;
  nt_release(r);
  CHECK(ok, "masked_select wrong");
  ix_ctx c = {M, NULL, 0};
  GC(f_mask, &c, tn_rand64((int64_t[]){2, 3}, 2, true));
  uint8_t rv[2] = {0, 1};
  nt_Tensor *RM = nt_from_buffer(rv, NT_BOOL, (int64_t[]){2}, 1, NT_BOOL);
  r = nt_index_tensor(X, RM);    /* x[row mask] -> [1, 3] */
  ok = r && r->ndim == 2 && r->shape[0] == 1 && r->shape[1] == 3 && tn_at(r, 0) == 4;
  nt_release(r);
  CHECK(ok, "bool row indexing wrong");
  int64_t iv[2] = {-1, 0};
  nt_Tensor *I = tn_i64(iv, (int64_t[]){2}, 1);
  r = nt_index_tensor(X, I);     /* x[[-1, 0]] */
  ok = r && r->shape[0] == 2 && tn_at(r, 0) == 4 && tn_at(r, 3) == 1;
  nt_release(r);
  CHECK(ok, "int tensor indexing wrong");
  ix_ctx ci = {I, NULL, 0}, cr = {RM, NULL, 0};
  GC(f_index, &ci, tn_rand64((int64_t[]){3, 2}, 2, true));
  GC(f_index, &cr, tn_rand64((int64_t[]){2, 2}, 2, true));
  int64_t hv[3] = {2, 0, 1};
  nt_Tensor *H = tn_i64(hv, (int64_t[]){3}, 1);
  r = nt_one_hot(H, -1);
  ok = r && r->dtype == NT_I64 && r->shape[1] == 3 && tn_at(r, 2) == 1 && tn_at(r, 3) == 1 && tn_at(r, 0) == 0 && tn_at(r, 7) == 1;
  nt_release(r);
  r = nt_one_hot(H, 2);
  nt_release(H); nt_release(I); nt_release(RM); nt_release(M); nt_release(X);
  CHECK(ok, "one_hot wrong");
  CHECK(!r && strstr(nt_error_msg(), "out of range"), "one_hot range: %s", nt_error_msg());
  int64_t big = INT64_MAX;   /* classes = max + 1 would overflow */
  H = tn_i64(&big, (int64_t[]){1}, 1);
  r = nt_one_hot(H, -1);
  nt_release(H);
  CHECK(!r && strstr(nt_error_msg(), "class value 9223372036854775807 is out of range"), "one_hot max: %s", nt_error_msg());
}

/* errors name the public op that was called, not the op it is built on */
static void t_error_op_names(void) {
  nt_Tensor *a = nt_ones((int64_t[]){2, 3}, 2, NT_F32, NT_CPU), *b = nt_ones((int64_t[]){3, 2}, 2, NT_F32, NT_CPU);
  nt_Tensor *r = nt_mse_loss(a, b);
  int ok = !r && strstr(nt_error_msg(), "mse_loss: shapes [2, 3] and [3, 2] cannot broadcast") != NULL;
  nt_release(r); nt_release(a); nt_release(b);
  CHECK(ok, "mse_loss: %s", nt_error_msg());
  int64_t iv[2] = {0, 7};
  double fd = 0.5;
  nt_Tensor *I = tn_i64(iv, (int64_t[]){2}, 1), *W = nt_ones((int64_t[]){3, 4}, 2, NT_F32, NT_CPU);
  nt_Tensor *F = nt_from_buffer(&fd, NT_F64, (int64_t[]){1}, 1, NT_F32);
  static const char *want[5] = {
    "embedding: index 7 is out of bounds for axis 0 with size 3",
    "index_select: index 7 is out of bounds for axis 1 with size 4",
    "index: index 7 is out of bounds for axis 0 with size 3",
    "index: indices must be an integer tensor, got f32",
    "take: index 7 is out of bounds for axis 0 with size 3",
  };
  char got[512] = "";
  ok = 1;
  for (int k = 0; k < 5 && ok; k++) {
    r = k == 0 ? nt_embedding(W, I) : k == 1 ? nt_index_select(W, 1, I) : k == 2 ? nt_index_tensor(W, I)
      : k == 3 ? nt_index_tensor(W, F) : nt_take(W, I, 0);
    snprintf(got, sizeof got, "%s", r ? "(no error)" : nt_error_msg());
    ok = !r && strstr(got, want[k]) != NULL;
    nt_release(r);
  }
  nt_release(I); nt_release(W); nt_release(F);
  CHECK(ok, "op name: %s", got);
}

const tn_test tn_tests_nn[] = {
  {"softmax_values_stable", t_softmax_values},
  {"softmax_log_softmax_gradcheck", t_softmax_grad},
  {"cross_entropy_values_ignore_smoothing_grad", t_cross_entropy},
  {"mse_loss", t_mse},
  {"layer_norm_values_grad", t_layer_norm},
  {"dropout_mask_scale_grad", t_dropout},
  {"embedding_values_grad", t_embedding},
  {"take_gather_scatter_add", t_take_gather_scatter},
  {"masked_select_index_one_hot", t_masks_and_one_hot},
  {"error_messages_name_the_called_op", t_error_op_names},
  {NULL, NULL},
};
