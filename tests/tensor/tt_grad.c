/*
** tt_grad.c — test_tensor's autograd tests: graphs, shared subgraphs, views,
** in-place checks, and gradient checks of every op family against central
** finite differences (f64), and gradient-norm clipping.  Harness: tt.h.
*/
#include "tt.h"

/* ---- autograd ----------------------------------------------------------------- */
TEST(autograd_basic) {
  nt_Tensor *x = MK(NT_F32, SHAPE(3), 1, 2, 3), *y = MK(NT_F32, SHAPE(2, 1), 10, 20);
  nt_set_requires_grad(x, true); nt_set_requires_grad(y, true);
  nt_Tensor *p = nt_mul(x, y);                 /* [2,3] via broadcasting */
  nt_Tensor *s = nt_sum(p, NULL, 0, false);
  EXPECT(!nt_is_leaf(p) && !strcmp(nt_grad_fn_name(p), "MulBackward"), "grad_fn");
  OK(nt_backward(s, NULL, true) == 0);
  CHECKV(nt_retain(nt_grad(x)), SHAPE(3), 30, 30, 30);
  CHECKV(nt_retain(nt_grad(y)), SHAPE(2, 1), 6, 6);
  OK(nt_backward(s, NULL, false) == 0);      /* accumulates */
  CHECKV(nt_retain(nt_grad(x)), SHAPE(3), 60, 60, 60);
  EXPECT(nt_backward(s, NULL, false) == -1 && err_has("second time"), "second backward: %s", nt_error_msg());
  nt_set_grad(x, NULL);
  EXPECT(nt_grad(x) == NULL, "zero_grad");
  EXPECT(nt_backward(p, NULL, false) == -1 && err_has("only for scalar outputs"), "non-scalar: %s", nt_error_msg());
  nt_Tensor *g = nt_ones_like(p), *p2 = nt_mul(x, y);
  OK(nt_backward(p2, g, false) == 0);
  CHECKV(nt_retain(nt_grad(x)), SHAPE(3), 30, 30, 30);
  /* grad mode off: no graph */
  nt_set_grad_enabled(false);
  nt_Tensor *q = nt_mul(x, x);
  nt_set_grad_enabled(true);
  EXPECT(!q->requires_grad && !q->grad_fn, "no_grad");
  nt_Tensor *d = nt_detach(x);
  EXPECT(!d->requires_grad && d->storage == x->storage, "detach");
  nt_Tensor *in = MK(NT_I64, SHAPE(2), 1, 2);
  EXPECT(nt_set_requires_grad(in, true) == -1 && err_has("only floating"), "int requires_grad");
  EXPECT(nt_fill_(x, 0) == -1 && err_has("leaf"), "in-place on leaf");
  EXPECT(nt_backward(in, NULL, false) == -1 && err_has("does not require grad"), "backward of no-grad");
  nt_release(x); nt_release(y); nt_release(p); nt_release(s); nt_release(g); nt_release(p2); nt_release(q);
  nt_release(d); nt_release(in);
  return true;
}

TEST(autograd_shared_subgraph) {
  /* y = x*x; z = y + y*x  → dz/dx = 2x + 3x^2 */
  nt_Tensor *x = MK(NT_F64, SHAPE(2), 1, 2);
  nt_set_requires_grad(x, true);
  nt_Tensor *y = nt_mul(x, x), *yx = nt_mul(y, x), *z = nt_add(y, yx), *s = nt_sum(z, NULL, 0, false);
  nt_release(y); nt_release(yx); nt_release(z);   /* the graph keeps what it needs */
  OK(nt_backward(s, NULL, false) == 0);
  CHECKV(nt_retain(nt_grad(x)), SHAPE(2), 5, 16);
  nt_release(s); nt_release(x);
  return true;
}

TEST(autograd_views) {
  nt_Tensor *x = nt_arange(0, 6, 1, NT_F64);
  nt_set_requires_grad(x, true);
  nt_Tensor *m = nt_reshape(x, SHAPE(2, 3), 2), *t = nt_T(m), *r = nt_select(t, 0, 1);   /* = x[[1,4]] */
  nt_Tensor *sl = nt_slice(x, 0, NT_NONE, NT_NONE, -2);                                  /* x[5], x[3], x[1] */
  nt_Tensor *a = nt_sum(r, NULL, 0, false), *b = nt_sum(sl, NULL, 0, false), *s = nt_add(a, b);
  OK(nt_backward(s, NULL, false) == 0);
  CHECKV(nt_retain(nt_grad(x)), SHAPE(6), 0, 2, 0, 1, 1, 1);
  nt_release(x); nt_release(m); nt_release(t); nt_release(r); nt_release(sl); nt_release(a); nt_release(b); nt_release(s);
  return true;
}

TEST(inplace_autograd_checks) {
  /* in-place writes under autograd: leaves and views refused, writes into graph tensors recorded */
  nt_Tensor *w = nt_ones(SHAPE(2, 3), 2, NT_F64, NT_CPU), *seven = nt_scalar(7, NT_F64);
  nt_set_requires_grad(w, true);
  nt_Tensor *v = nt_index(w, (nt_Index[]){ { NT_IDX_INT, 0, 0, 0 }, { NT_IDX_INT, 0, 0, 0 } }, 2);   /* w[0, 0] */
  EXPECT(v && v->requires_grad, "view of a leaf requires grad");
  EXPECT(nt_fill_(v, 5) == -1 && err_has("view of a leaf tensor that requires grad"), "fill_ leaf view: %s", nt_error_msg());
  EXPECT(nt_copy_(v, seven) == -1 && err_has("leaf"), "copy_ leaf view: %s", nt_error_msg());
  nt_Tensor *tv = nt_T(w), *row = nt_select(tv, 1, 0);                  /* view of a view */
  EXPECT(nt_fill_(row, 5) == -1 && err_has("view of a leaf"), "fill_ view of view: %s", nt_error_msg());
  EXPECT(nt_copy_(w, seven) == -1 && err_has("a leaf tensor that requires grad"), "copy_ leaf: %s", nt_error_msg());
  double d;
  OK(nt_item(v, &d) == 0);
  EXPECT(d == 1, "w unchanged, w[0, 0] = %g", d);
  /* y = w * 1; v = y[0]; v[0] = 7: a write through a view of a graph tensor is refused (write through y) */
  nt_Tensor *y = nt_binary_scalar(NT_OP_MUL, w, 1, false);
  nt_Tensor *y0 = nt_select(y, 0, 0), *y00 = nt_select(y0, 0, 0);
  EXPECT(nt_copy_(y00, seven) == -1 && err_has("autograd graph") && err_has("base"), "copy_ into a view of a non-leaf: %s", nt_error_msg());
  EXPECT(nt_fill_(y0, 7) == -1 && err_has("autograd graph"), "fill_ a view of a non-leaf: %s", nt_error_msg());
  /* a write into y itself is recorded: y[0, 0] = 7 (CopySlicesBackward) */
  OK(nt_index_fill(y, (nt_Index[]){ { NT_IDX_INT, 0, 0, 0 }, { NT_IDX_INT, 0, 0, 0 } }, 2, 7) == 0);
  EXPECT(!strcmp(nt_grad_fn_name(y), "CopySlicesBackward"), "grad_fn %s", nt_grad_fn_name(y));
  /* the views taken before the write are stale now: using them is an error */
  nt_Tensor *stale = nt_mul(y0, y0);
  EXPECT(!stale && err_has("modified in place"), "stale view: %s", nt_error_msg());
  /* d sum(y*y) / dw = 2, except at [0, 0], which no longer depends on w */
  nt_Tensor *yy = nt_mul(y, y), *s = nt_sum(yy, NULL, 0, false);
  OK(nt_backward(s, NULL, false) == 0);
  CHECKV(nt_retain(nt_grad(w)), SHAPE(2, 3), 0, 2, 2, 2, 2, 2);
  /* no_grad: parameter updates through views are allowed */
  bool prev = nt_set_grad_enabled(false);
  OK(nt_fill_(v, 5) == 0);
  OK(nt_copy_(row, seven) == 0);
  nt_set_grad_enabled(prev);
  CHECKV(nt_clone(w), SHAPE(2, 3), 7, 7, 7, 1, 1, 1);   /* row = w.T[:, 0] = w[0, :] */
  /* a detached alias does not require grad: writable */
  nt_Tensor *dt = nt_detach(w);
  OK(nt_fill_(dt, 3) == 0);
  /* a tensor that does not require grad: writable with grad mode on */
  nt_Tensor *plain = nt_zeros(SHAPE(3), 1, NT_F64, NT_CPU), *p0 = nt_select(plain, 0, 0);
  OK(nt_copy_(p0, seven) == 0);
  CHECKV(nt_retain(plain), SHAPE(3), 7, 0, 0);
  nt_release(w); nt_release(seven); nt_release(v); nt_release(tv); nt_release(row); nt_release(y); nt_release(y0);
  nt_release(y00); nt_release(yy); nt_release(s); nt_release(dt); nt_release(plain); nt_release(p0);
  return true;
}

TEST(prod_grad_with_zeros) {
  /* d prod / d x_i = product of the others, also where the block has zeros */
  nt_Tensor *x = MK(NT_F64, SHAPE(3, 3), 1.5, 0, 2, 0.5, 3, -1, 0, 0, 4);
  nt_set_requires_grad(x, true);
  nt_Tensor *p = nt_prod(x, (int[]){ 1 }, 1, false), *s = p ? nt_sum(p, NULL, 0, false) : NULL;
  OK(s && nt_backward(s, NULL, false) == 0);
  CHECKV(nt_retain(nt_grad(x)), SHAPE(3, 3), 0, 3, 0, -3, -0.5, 1.5, 0, 0, 0);
  nt_release(p); nt_release(s);
  nt_set_grad(x, NULL);
  p = nt_prod(x, (int[]){ 0 }, 1, true);            /* columns: [0, 0, -8] zeros 1, 2, 0 */
  s = p ? nt_sum(p, NULL, 0, false) : NULL;
  OK(s && nt_backward(s, NULL, false) == 0);
  CHECKV(nt_retain(nt_grad(x)), SHAPE(3, 3), 0, 0, -4, 0, 0, 8, 0.75, 0, -2);
  nt_release(p); nt_release(s); nt_release(x);
  nt_Tensor *y = MK(NT_F32, SHAPE(3), 2, 0, 3);      /* all axes, f32 */
  nt_set_requires_grad(y, true);
  p = nt_prod(y, NULL, 0, false);
  OK(p && nt_backward(p, NULL, false) == 0);
  CHECKV(nt_retain(nt_grad(y)), SHAPE(3), 0, 6, 0);
  nt_release(p); nt_release(y);
  return true;
}

/* gradcheck cases: ud selects the op */
static int gc_op;
static nt_Tensor *gc_binary(nt_Tensor **x, void *ud) { (void)ud; return nt_binary(gc_op, x[0], x[1]); }
static nt_Tensor *gc_unary(nt_Tensor **x, void *ud) { (void)ud; return nt_unary(gc_op, x[0]); }
static nt_Tensor *gc_scalar_r(nt_Tensor **x, void *ud) { return nt_binary_scalar(gc_op, x[0], *(double *)ud, false); }
static nt_Tensor *gc_scalar_l(nt_Tensor **x, void *ud) { return nt_binary_scalar(gc_op, x[0], *(double *)ud, true); }

TEST(gradcheck_binary) {
  nt_seed(11);
  const int ops[] = { NT_OP_ADD, NT_OP_SUB, NT_OP_MUL, NT_OP_DIV, NT_OP_POW, NT_OP_MAXIMUM, NT_OP_MINIMUM, NT_OP_MOD };
  const int64_t shapes[][2][3] = { { { 2, 3, 0 }, { 3, 0, 0 } }, { { 3, 1, 0 }, { 1, 4, 0 } }, { { 2, 3, 0 }, { 2, 3, 0 } } };
  const int nds[][2] = { { 2, 1 }, { 2, 2 }, { 2, 2 } };
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
    for (int s = 0; s < 3; s++) {
      gc_op = ops[o];
      nt_Tensor *x[2] = { rnd(nds[s][0], shapes[s][0], 0.5, 2), rnd(nds[s][1], shapes[s][1], 0.5, 2) };
      bool ok = gradcheck(nt_op_name(gc_op), gc_binary, 2, x, NULL);
      nt_release(x[0]); nt_release(x[1]);
      if (!ok) return false;
    }
  const int sops[] = { NT_OP_ADD, NT_OP_SUB, NT_OP_MUL, NT_OP_DIV, NT_OP_POW, NT_OP_MAXIMUM, NT_OP_MINIMUM };
  for (size_t o = 0; o < sizeof sops / sizeof sops[0]; o++) {
    gc_op = sops[o];
    double sv = 1.3;
    nt_Tensor *x = rnd(2, SHAPE(2, 3), 0.5, 2);
    bool ok = gradcheck("scalar right", gc_scalar_r, 1, &x, &sv) && gradcheck("scalar left", gc_scalar_l, 1, &x, &sv);
    nt_release(x);
    if (!ok) { size_t l = strlen(why); snprintf(why + l, sizeof why - l, " (%s)", nt_op_name(gc_op)); return false; }
  }
  return true;
}

TEST(gradcheck_unary) {
  nt_seed(12);
  const int ops[] = { NT_OP_NEG, NT_OP_EXP, NT_OP_LOG, NT_OP_LOG1P, NT_OP_SQRT, NT_OP_RSQRT, NT_OP_ABS, NT_OP_TANH,
                      NT_OP_SIGMOID, NT_OP_RELU, NT_OP_GELU, NT_OP_GELU_TANH, NT_OP_SILU, NT_OP_SIN, NT_OP_COS,
                      NT_OP_RECIPROCAL, NT_OP_SQUARE, NT_OP_EXPM1, NT_OP_LOG2, NT_OP_TAN, NT_OP_ERF };
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    gc_op = ops[o];
    bool pos = gc_op == NT_OP_LOG || gc_op == NT_OP_SQRT || gc_op == NT_OP_RSQRT || gc_op == NT_OP_LOG2 || gc_op == NT_OP_LOG1P;
    nt_Tensor *x = pos ? rnd(2, SHAPE(3, 4), 0.3, 1.2) : rnd(2, SHAPE(3, 4), -1.2, 1.2);
    /* keep away from kinks at 0 */
    if (gc_op == NT_OP_ABS || gc_op == NT_OP_RELU) {
      double *d = (double *)nt_base(x);
      for (int i = 0; i < 12; i++) if (fabs(d[i]) < 0.05) d[i] = 0.3;
    }
    bool ok = gradcheck(nt_op_name(gc_op), gc_unary, 1, &x, NULL);
    nt_release(x);
    if (!ok) return false;
  }
  return true;
}

static nt_Tensor *gc_clamp(nt_Tensor **x, void *ud) { (void)ud; return nt_clamp(x[0], -0.5, 0.5); }
static nt_Tensor *gc_where(nt_Tensor **x, void *ud) { return nt_where((nt_Tensor *)ud, x[0], x[1]); }
static int gc_axes[2], gc_naxes; static bool gc_keep;
static nt_Tensor *gc_reduce(nt_Tensor **x, void *ud) {
  (void)ud;
  if (gc_op == NT_OP_VAR || gc_op == NT_OP_STD) return gc_op == NT_OP_VAR ? nt_var(x[0], gc_axes, gc_naxes, 1, gc_keep) : nt_std(x[0], gc_axes, gc_naxes, 1, gc_keep);
  return nt_reduce(gc_op, x[0], gc_axes, gc_naxes, gc_keep);
}
static nt_Tensor *gc_matmul(nt_Tensor **x, void *ud) { (void)ud; return nt_matmul(x[0], x[1]); }
static nt_Tensor *gc_matmul_t(nt_Tensor **x, void *ud) {
  (void)ud;
  nt_Tensor *t = nt_transpose(x[1], -1, -2), *r = t ? nt_matmul(x[0], t) : NULL;
  nt_release(t);
  return r;
}

TEST(gradcheck_misc) {
  nt_seed(13);
  nt_Tensor *x = rnd(2, SHAPE(3, 4), -1, 1);
  if (!gradcheck("clamp", gc_clamp, 1, &x, NULL)) return false;
  nt_release(x);
  nt_Tensor *c = MK(NT_BOOL, SHAPE(3, 1), 1, 0, 1);
  nt_Tensor *w[2] = { rnd(2, SHAPE(3, 4), -1, 1), rnd(1, SHAPE(4), -1, 1) };
  if (!gradcheck("where", gc_where, 2, w, c)) return false;
  nt_release(c); nt_release(w[0]); nt_release(w[1]);
  const int rops[] = { NT_OP_SUM, NT_OP_MEAN, NT_OP_PROD, NT_OP_MAX, NT_OP_MIN, NT_OP_VAR, NT_OP_STD, NT_OP_LOGSUMEXP };
  const int axsets[][2] = { { 0, 0 }, { 1, 0 }, { 0, 2 } };
  const int nax[] = { 1, 1, 2 };
  for (size_t o = 0; o < sizeof rops / sizeof rops[0]; o++)
    for (int a = 0; a < 4; a++) {
      gc_op = rops[o];
      gc_naxes = a < 3 ? nax[a] : 0;
      if (a < 3) { gc_axes[0] = axsets[a][0]; gc_axes[1] = axsets[a][1]; }
      gc_keep = a == 1;
      nt_Tensor *r = rnd(3, SHAPE(2, 3, 3), 0.5, 1.5);
      bool ok = gradcheck(nt_op_name(gc_op), gc_reduce, 1, &r, NULL);
      nt_release(r);
      if (!ok) return false;
    }
  const int64_t ms[][2][4] = { { { 3, 4 }, { 4, 2 } }, { { 4 }, { 4, 2 } }, { { 3, 4 }, { 4 } }, { { 4 }, { 4 } },
                               { { 2, 3, 4 }, { 4, 2 } }, { { 2, 1, 3, 4 }, { 3, 4, 2 } } };
  const int mnd[][2] = { { 2, 2 }, { 1, 2 }, { 2, 1 }, { 1, 1 }, { 3, 2 }, { 4, 3 } };
  for (int k = 0; k < 6; k++) {
    nt_Tensor *m[2] = { rnd(mnd[k][0], ms[k][0], -1, 1), rnd(mnd[k][1], ms[k][1], -1, 1) };
    bool ok = gradcheck("matmul", gc_matmul, 2, m, NULL);
    nt_release(m[0]); nt_release(m[1]);
    if (!ok) { size_t l = strlen(why); snprintf(why + l, sizeof why - l, " (case %d)", k); return false; }
  }
  nt_Tensor *mt[2] = { rnd(2, SHAPE(3, 4), -1, 1), rnd(2, SHAPE(5, 4), -1, 1) };
  if (!gradcheck("matmul_t", gc_matmul_t, 2, mt, NULL)) return false;
  nt_release(mt[0]); nt_release(mt[1]);
  return true;
}

static nt_Tensor *gc_shape(nt_Tensor **x, void *ud) {
  int which = *(int *)ud;
  nt_Tensor *r = NULL, *t1 = NULL, *t2 = NULL, *parts[3] = {0};
  switch (which) {
    case 0: r = nt_concat(x, 2, 1); break;
    case 1: t1 = nt_slice(x[1], 1, 0, 4, 1); r = nt_stack((nt_Tensor *[]){ x[0], t1 }, 2, 0); break;
    case 2: if (nt_split(x[1], SHAPE(2, 3), 2, 1, parts) == 2) { t1 = nt_slice(parts[1], 1, 1, 3, 1); r = nt_mul(parts[0], t1); } break;
    case 3: r = nt_flip(x[0], (int[]){ 1 }, 1); break;
    case 4: r = nt_repeat(x[0], SHAPE(2, 1, 2), 3); break;
    case 5: r = nt_tril(x[0], 0); break;
    case 6: t1 = nt_permute(x[0], (int[]){ 1, 0 }, 2); t2 = nt_reshape(t1, SHAPE(2, 6), 2); r = nt_expand(t2, SHAPE(3, 2, 6), 3); break;
    case 7: { nt_Index idx[2] = { { NT_IDX_SLICE, NT_NONE, NT_NONE, -1 }, { NT_IDX_INT, 2, 0, 0 } }; r = nt_index(x[0], idx, 2); break; }
    case 8: t1 = nt_to_dtype(x[0], NT_F32); t2 = nt_exp(t1); r = nt_to_dtype(t2, NT_F64); break;
    case 9: t1 = nt_unsqueeze(x[0], 0); t2 = nt_squeeze(t1, 0); r = nt_clone(t2); break;
  }
  nt_release(t1); nt_release(t2); nt_release(parts[0]); nt_release(parts[1]);
  return r;
}

TEST(gradcheck_shape_ops) {
  nt_seed(14);
  for (int which = 0; which < 10; which++) {
    nt_Tensor *x[2] = { rnd(2, SHAPE(3, 4), -1, 1), rnd(2, SHAPE(3, 5), -1, 1) };
    bool ok = which == 8 ? true : gradcheck("shape", gc_shape, 2, x, &which);
    nt_release(x[0]); nt_release(x[1]);
    if (!ok) { size_t l = strlen(why); snprintf(why + l, sizeof why - l, " (case %d)", which); return false; }
  }
  /* f32 round trip: gradient is correct up to f32 precision; check the value */
  nt_Tensor *x = MK(NT_F64, SHAPE(2), 0, 1);
  nt_set_requires_grad(x, true);
  int which = 8;
  nt_Tensor *y = gc_shape(&x, &which), *s = nt_sum(y, NULL, 0, false);
  OK(nt_backward(s, NULL, false) == 0);
  EXPECT(nt_grad(x)->dtype == NT_F64, "grad dtype follows the leaf");
  if (!check(nt_retain(nt_grad(x)), 1, SHAPE(2), VALS(1, exp(1)), 1e-6)) return false;
  nt_release(x); nt_release(y); nt_release(s);
  return true;
}

/* Speed is measured by bench/tensor (small_op, elementwise), never asserted in tests. */

/* nt_clip_grad_norm against a direct double computation: big and small f32
** tensors (the norm pass threaded over chunks of all of them), an f64 one, a
** strided view (the composed path), an integer tensor and NULL (skipped);
** below max_norm nothing changes; a tensor listed twice is refused. */
TEST(clip_grad_norm) {
  nt_seed((uint64_t)time(NULL));
  nt_Tensor *big = nt_randn(SHAPE(300, 700), 2, NT_F32, NT_CPU), *bias = nt_randn(SHAPE(37), 1, NT_F32, NT_CPU);
  nt_Tensor *d = nt_randn(SHAPE(5, 9), 2, NT_F64, NT_CPU), *base = nt_randn(SHAPE(6, 4), 2, NT_F32, NT_CPU);
  nt_Tensor *tr = base ? nt_transpose(base, 0, 1) : NULL, *it = MK(NT_I64, SHAPE(2), 1000, 2000);
  bool ok = false;
  double *before[4] = {0};
  nt_Tensor *g[6] = { big, bias, NULL, d, tr, it }, *fl[4] = { big, bias, d, tr };
  if (!big || !bias || !d || !tr || !it) FAILF("setup: %s", nt_error_msg());
  double ss = 0, norm = -1;
  for (int k = 0; k < 4; k++) {
    if (!(before[k] = host(fl[k]))) goto done;
    for (int64_t i = 0; i < fl[k]->numel; i++) ss += before[k][i] * before[k][i];
  }
  double want = sqrt(ss);
  /* above the norm: nothing scaled */
  if (nt_clip_grad_norm(g, 6, want * 2, &norm)) { snprintf(why, sizeof why, "clip: %s", nt_error_msg()); goto done; }
  if (fabs(norm - want) > 1e-9 * want) { snprintf(why, sizeof why, "norm %.17g, want %.17g", norm, want); goto done; }
  for (int k = 0; k < 4; k++) {
    double *now = host(fl[k]);
    bool same = now && !memcmp(now, before[k], sizeof(double) * (size_t)fl[k]->numel);
    free(now);
    if (!same) { snprintf(why, sizeof why, "tensor %d changed below max_norm", k); goto done; }
  }
  /* below: every floating tensor scaled by max / (norm + 1e-6) */
  double maxn = want / 3, scale = maxn / (want + 1e-6);
  if (nt_clip_grad_norm(g, 6, maxn, &norm)) { snprintf(why, sizeof why, "clip: %s", nt_error_msg()); goto done; }
  if (fabs(norm - want) > 1e-9 * want) { snprintf(why, sizeof why, "norm %.17g, want %.17g", norm, want); goto done; }
  for (int k = 0; k < 4; k++) {
    double *now = host(fl[k]);
    if (!now) goto done;
    for (int64_t i = 0; i < fl[k]->numel; i++)
      if (fabs(now[i] - before[k][i] * scale) > 1e-6 * fabs(before[k][i] * scale) + 1e-30) {
        snprintf(why, sizeof why, "tensor %d [%lld] = %.9g, want %.9g", k, (long long)i, now[i], before[k][i] * scale);
        free(now); goto done;
      }
    free(now);
  }
  double *iv = host(it);
  bool int_kept = iv && iv[0] == 1000 && iv[1] == 2000;
  free(iv);
  if (!int_kept) { snprintf(why, sizeof why, "integer tensor changed"); goto done; }
  nt_Tensor *twice[2] = { bias, bias };
  if (nt_clip_grad_norm(twice, 2, 1, &norm) == 0 || !strstr(nt_error_msg(), "tensor 1 is tensor 0")) {
    snprintf(why, sizeof why, "a tensor listed twice: got '%s'", nt_error_msg()); goto done;
  }
  ok = true;
done:
  for (int k = 0; k < 4; k++) free(before[k]);
  nt_release(big); nt_release(bias); nt_release(d); nt_release(base); nt_release(tr); nt_release(it);
  return ok;
}

const tt_test tt_tests_grad[] = {
  TT_ENTRY(autograd_basic),
  TT_ENTRY(autograd_shared_subgraph),
  TT_ENTRY(autograd_views),
  TT_ENTRY(inplace_autograd_checks),
  TT_ENTRY(prod_grad_with_zeros),
  TT_ENTRY(gradcheck_binary),
  TT_ENTRY(gradcheck_unary),
  TT_ENTRY(gradcheck_misc),
  TT_ENTRY(gradcheck_shape_ops),
  TT_ENTRY(clip_grad_norm),
  { NULL, NULL },
};
