/*
** tc_nn.c — test_cuda's tests of the nn ops on the GPU against the CPU:
** softmax/cross-entropy, layer norm and GELU, embedding/gather/scatter,
** conv2d and pooling (cuda/conv.cu), sort/topk, cumsum, one_hot and
** masked_select (cuda/sort.cu), and scaled_dot_product_attention's fused and
** cuBLAS paths (cuda/attention*.cu).  Harness and helpers: tc.h.
*/
#include "tc.h"

typedef nt_Tensor *(*NnFn)(nt_Tensor **in, int side);
/* runs fn forward on CPU and GPU, then backward of sum(out * r), comparing outputs and the grads of the first nin_grad inputs */
static bool nn_case(const char *what, NnFn fn, nt_Tensor **cpu, int nin, int nin_grad, double tol) {
  nt_Tensor *dev[4];
  for (int i = 0; i < nin; i++) {
    /* an input an earlier case made require grad: reset it, or its device copy is a non-leaf
    ** (ToDeviceBackward, no .grad of its own) and the CPU grads accumulate over the cases */
    if (i < nin_grad) { nt_set_requires_grad(cpu[i], false); nt_set_grad(cpu[i], NULL); }
    dev[i] = gpu(cpu[i]);
    if (!dev[i]) FAILF("%s: to_device: %s", what, nt_error_msg());
    if (i < nin_grad) { nt_set_requires_grad(cpu[i], true); nt_set_requires_grad(dev[i], true); }
  }
  nt_Tensor *oc = fn(cpu, 0), *og = fn(dev, 1);
  if (!oc || !og) { nt_release(oc); nt_release(og); FAILF("%s: forward failed: %s", what, nt_error_msg()); }
  nt_Tensor *r = nt_rand(oc->shape, oc->ndim, oc->dtype, NT_CPU), *rg = gpu(r);
  nt_Tensor *pc = nt_mul(oc, r), *pg = rg ? nt_mul(og, rg) : NULL;
  nt_Tensor *sc = pc ? nt_sum(pc, NULL, 0, false) : NULL, *sg = pg ? nt_sum(pg, NULL, 0, false) : NULL;
  bool ok = sc && sg && (nin_grad == 0 || (!nt_backward(sc, NULL, false) && !nt_backward(sg, NULL, false)));
  if (!ok) snprintf(why, sizeof why, "%s: backward failed: %s", what, nt_error_msg());
  nt_release(r); nt_release(rg); nt_release(pc); nt_release(pg); nt_release(sc); nt_release(sg);
  char w[96];
  snprintf(w, sizeof w, "%s forward", what);
  ok = ok && same(w, og, oc, tol);
  if (!ok) { nt_release(og); nt_release(oc); }   /* same() consumed them otherwise */
  for (int i = 0; ok && i < nin_grad; i++) {
    snprintf(w, sizeof w, "%s grad %d", what, i);
    ok = same(w, nt_retain(nt_grad(dev[i])), nt_retain(nt_grad(cpu[i])), tol);
  }
  for (int i = 0; i < nin; i++) nt_release(dev[i]);
  return ok;
}

static nt_Tensor *f_softmax(nt_Tensor **in, int s) { (void)s; return nt_softmax(in[0], -1); }
static nt_Tensor *f_softmax0(nt_Tensor **in, int s) { (void)s; return nt_softmax(in[0], 0); }
static nt_Tensor *f_logsoftmax(nt_Tensor **in, int s) { (void)s; return nt_log_softmax(in[0], 1); }
static nt_Tensor *f_xent(nt_Tensor **in, int s) { (void)s; return nt_cross_entropy(in[0], in[1], -100, 0.1); }
static nt_Tensor *f_xent_ign(nt_Tensor **in, int s) { (void)s; return nt_cross_entropy(in[0], in[1], 2, 0); }
static nt_Tensor *f_ln(nt_Tensor **in, int s) { (void)s; return nt_layer_norm(in[0], in[1], in[2], 1e-5); }
static nt_Tensor *f_emb(nt_Tensor **in, int s) { (void)s; return nt_embedding(in[0], in[1]); }
static nt_Tensor *f_gather(nt_Tensor **in, int s) { (void)s; return nt_gather(in[0], 1, in[1]); }
static nt_Tensor *f_scatter(nt_Tensor **in, int s) { (void)s; return nt_scatter_add(in[0], 0, in[1], in[2]); }
static nt_Tensor *f_gelu(nt_Tensor **in, int s) { (void)s; return nt_gelu(in[0], false); }
static nt_Tensor *f_gelu_tanh(nt_Tensor **in, int s) { (void)s; return nt_gelu(in[0], true); }

TEST(nn_softmax_xent) {
  nt_Tensor *x[3];
  x[0] = RND(NT_F32, -4, 4, 37, 1000);
  bool ok = nn_case("softmax", f_softmax, x, 1, 1, 1e-5) && nn_case("log_softmax", f_logsoftmax, x, 1, 1, 1e-5);
  nt_release(x[0]);
  x[0] = RND(NT_F64, -4, 4, 5, 3, 7);
  ok = ok && nn_case("softmax strided axis", f_softmax0, x, 1, 1, 1e-12);
  nt_release(x[0]);
  x[0] = RND(NT_F32, -4, 4, 64, 50257 / 7);
  x[1] = nt_randint(0, 50257 / 7, SH(64), 1, NT_I64, NT_CPU);
  ok = ok && nn_case("cross_entropy", f_xent, x, 2, 1, 1e-5);
  nt_release(x[0]); nt_release(x[1]);
  x[0] = RND(NT_F32, -4, 4, 16, 5);
  x[1] = nt_randint(0, 5, SH(16), 1, NT_I32, NT_CPU);
  ok = ok && nn_case("cross_entropy ignore_index", f_xent_ign, x, 2, 1, 1e-5);
  nt_release(x[0]); nt_release(x[1]);
  return ok;
}

TEST(nn_layer_norm_gelu) {
  nt_Tensor *x[3] = { RND(NT_F32, -2, 2, 6, 7, 768), RND(NT_F32, 0.5, 1.5, 768), RND(NT_F32, -1, 1, 768) };
  bool ok = nn_case("layer_norm", f_ln, x, 3, 3, 1e-4);
  for (int i = 0; i < 3; i++) nt_release(x[i]);
  x[0] = RND(NT_BF16, -3, 3, 4, 300);
  ok = ok && nn_case("gelu bf16", f_gelu, x, 1, 1, 2e-2);
  nt_release(x[0]);
  x[0] = RND(NT_F32, -3, 3, 4, 300);
  ok = ok && nn_case("gelu tanh", f_gelu_tanh, x, 1, 1, 1e-5);
  nt_release(x[0]);
  return ok;
}

TEST(nn_embedding_gather_scatter) {
  nt_Tensor *x[3] = { RND(NT_F32, -1, 1, 50, 24), nt_randint(-50, 50, SH(4, 9), 2, NT_I64, NT_CPU), NULL };
  bool ok = nn_case("embedding (negative indices, duplicates)", f_emb, x, 2, 1, 1e-5);
  nt_release(x[0]); nt_release(x[1]);
  x[0] = RND(NT_F64, -1, 1, 6, 8);
  x[1] = nt_randint(0, 8, SH(6, 5), 2, NT_I64, NT_CPU);
  ok = ok && nn_case("gather", f_gather, x, 2, 1, 1e-12);
  nt_release(x[0]); nt_release(x[1]);
  x[0] = RND(NT_F32, -1, 1, 5, 4);
  x[1] = nt_randint(0, 5, SH(7, 4), 2, NT_I64, NT_CPU);
  x[2] = RND(NT_F32, -1, 1, 7, 4);
  ok = ok && nn_case("scatter_add", f_scatter, x, 3, 1, 1e-5);
  for (int i = 0; i < 3; i++) nt_release(x[i]);
  return ok;
}

/* ---- conv2d, pooling, sort/topk, cumsum, one_hot (cuda/conv.cu, cuda/sort.cu) ---------------- */
/* values with many ties, NaNs, -0 and +0: random ints in [0, 10) mapped 0 -> NaN, 1 -> -0, 2 -> +0, v -> v - 6
** (nan = false: 0 -> 5 instead) */
static nt_Tensor *ties(nt_DType dt, int nd, const int64_t *shape, bool nan) {
  nt_Tensor *r = nt_randint(0, 10, shape, nd, NT_I64, NT_CPU), *t = NULL;
  double *h = r ? host(r) : NULL;
  if (h) {
    for (int64_t i = 0; i < r->numel; i++) {
      double v = h[i];
      h[i] = v == 0 ? (nan ? NAN : 5) : v == 1 ? -0.0 : v == 2 ? 0.0 : v - 6;
    }
    t = nt_from_buffer(h, NT_F64, shape, nd, dt);
  }
  free(h); nt_release(r);
  return t;
}
#define TIES(dt, nan, ...) ties(dt, ND(__VA_ARGS__), SH(__VA_ARGS__), nan)

static nt_Tensor *f_conv(nt_Tensor **in, int s) { (void)s; return nt_conv2d(in[0], in[1], in[2], 2, 1, 1, 0); }
static nt_Tensor *f_conv_nobias(nt_Tensor **in, int s) { (void)s; return nt_conv2d(in[0], in[1], NULL, 1, 1, 1, 1); }
static nt_Tensor *f_conv_s2(nt_Tensor **in, int s) { (void)s; return nt_conv2d(in[0], in[1], in[2], 2, 2, 1, 1); }
static nt_Tensor *f_conv_gaps(nt_Tensor **in, int s) { (void)s; return nt_conv2d(in[0], in[1], in[2], 3, 4, 1, 0); }

TEST(nn_conv2d) {
  nt_Tensor *x[3] = { RND(NT_F32, -1, 1, 3, 4, 11, 9), RND(NT_F32, -1, 1, 5, 4, 3, 2), RND(NT_F32, -1, 1, 5) };
  bool ok = nn_case("conv2d f32 stride (2,1) pad (1,0) bias", f_conv, x, 3, 3, 1e-4);
  for (int i = 0; i < 3; i++) nt_release(x[i]);
  x[0] = RND(NT_F64, -1, 1, 2, 3, 7, 8); x[1] = RND(NT_F64, -1, 1, 4, 3, 3, 3);
  ok = ok && nn_case("conv2d f64 no bias pad 1", f_conv_nobias, x, 2, 2, 1e-10);
  nt_release(x[0]); nt_release(x[1]);
  /* a tiny column budget: one image per chunk, dW accumulated over 7 chunks */
  setenv("NABLA_CUDA_CONV_CHUNK_BYTES", "20000", 1);
  x[0] = RND(NT_F32, -1, 1, 7, 3, 9, 10); x[1] = RND(NT_F32, -1, 1, 6, 3, 3, 3); x[2] = RND(NT_F32, -1, 1, 6);
  ok = ok && nn_case("conv2d chunked", f_conv_s2, x, 3, 3, 1e-4);
  unsetenv("NABLA_CUDA_CONV_CHUNK_BYTES");
  for (int i = 0; i < 3; i++) nt_release(x[i]);
  /* bf16 input: computed in f32 by the front end, cast back */
  x[0] = RND(NT_BF16, -1, 1, 2, 3, 6, 6); x[1] = RND(NT_BF16, -1, 1, 2, 3, 3, 3); x[2] = RND(NT_BF16, -1, 1, 2);
  ok = ok && nn_case("conv2d bf16", f_conv_s2, x, 3, 3, 2e-2);
  for (int i = 0; i < 3; i++) nt_release(x[i]);
  /* strides larger than the kernel: input pixels no window reads get dx = 0 (col2im's gather) */
  x[0] = RND(NT_F64, -1, 1, 2, 3, 11, 13); x[1] = RND(NT_F64, -1, 1, 4, 3, 2, 3); x[2] = RND(NT_F64, -1, 1, 4);
  ok = ok && nn_case("conv2d strides 3,4 > kernel 2x3", f_conv_gaps, x, 3, 3, 1e-10);
  for (int i = 0; i < 3; i++) nt_release(x[i]);
  /* im2col / col2im / permute over a million elements: the grid-stride loops wrap */
  x[0] = RND(NT_F32, -1, 1, 4, 8, 64, 64); x[1] = RND(NT_F32, -1, 1, 16, 8, 3, 3); x[2] = RND(NT_F32, -1, 1, 16);
  /* dW sums 16,384 products (N*H*W) in f32 on both sides: the CPU's oneDNN conv
  ** (as torch's CPU conv) is ~5e-4 from the f64 value where |dW| reaches ~130,
  ** so the two f32 results are compared at 2e-3 (a wrong index is off by O(1)) */
  ok = ok && nn_case("conv2d large (grid-stride)", f_conv_nobias, x, 2, 2, 2e-3);
  for (int i = 0; i < 3; i++) nt_release(x[i]);
  /* an empty batch: no output, zero weight grad */
  x[0] = RND(NT_F32, -1, 1, 0, 3, 6, 6); x[1] = RND(NT_F32, -1, 1, 2, 3, 3, 3); x[2] = RND(NT_F32, -1, 1, 2);
  ok = ok && nn_case("conv2d empty batch", f_conv_s2, x, 3, 3, 1e-6);
  for (int i = 0; i < 3; i++) nt_release(x[i]);
  return ok;
}

static nt_Tensor *f_maxpool(nt_Tensor **in, int s) { (void)s; return nt_max_pool2d(in[0], 3, 3, 2, 2, 1, 1); }
static nt_Tensor *f_maxpool2(nt_Tensor **in, int s) { (void)s; return nt_max_pool2d(in[0], 2, 3, 1, 2, 1, 1); }
static nt_Tensor *f_avgpool(nt_Tensor **in, int s) { (void)s; return nt_avg_pool2d(in[0], 3, 2, 2, 1, 1, 1); }
static nt_Tensor *f_avgpool_default(nt_Tensor **in, int s) { (void)s; return nt_avg_pool2d(in[0], 2, 2, 0, 0, 0, 0); }

TEST(nn_pooling) {
  nt_Tensor *x[1];
  /* ties (the first maximum wins) and overlapping windows (gradients add up) */
  x[0] = TIES(NT_F32, false, 2, 3, 9, 11);
  bool ok = nn_case("max_pool2d ties overlap", f_maxpool, x, 1, 1, 0);
  nt_release(x[0]);
  /* NaN propagates and takes the gradient */
  x[0] = TIES(NT_F64, true, 2, 2, 8, 7);
  ok = ok && nn_case("max_pool2d nan", f_maxpool2, x, 1, 1, 0);
  nt_release(x[0]);
  x[0] = RND(NT_F32, -1, 1, 2, 3, 10, 9);
  ok = ok && nn_case("avg_pool2d pad", f_avgpool, x, 1, 1, 1e-6);
  nt_release(x[0]);
  x[0] = RND(NT_F64, -1, 1, 3, 2, 7, 8);
  ok = ok && nn_case("avg_pool2d default stride", f_avgpool_default, x, 1, 1, 1e-12);
  nt_release(x[0]);
  x[0] = RND(NT_BF16, -1, 1, 2, 2, 9, 9);
  ok = ok && nn_case("max_pool2d bf16", f_maxpool, x, 1, 1, 0);
  nt_release(x[0]);
  /* over a million input elements: the backward gathers' grid-stride loops wrap */
  x[0] = TIES(NT_F32, false, 4, 16, 132, 132);
  ok = ok && nn_case("max_pool2d large (grid-stride)", f_maxpool, x, 1, 1, 0) &&
       nn_case("avg_pool2d large (grid-stride)", f_avgpool, x, 1, 1, 1e-6);
  nt_release(x[0]);
  return ok;
}

/* sort (k < 0) or topk of x on both devices: values and indices must be identical */
static bool sort_case(const char *what, nt_Tensor *x, int axis, bool desc, int64_t k) {
  nt_Tensor *xg = gpu(x), *vc = NULL, *ic = NULL, *vg = NULL, *ig = NULL;
  if (!xg) FAILF("%s: to_device: %s", what, nt_error_msg());
  int rc = k < 0 ? nt_sort(x, axis, desc, &vc, &ic) : nt_topk(x, k, axis, desc, &vc, &ic);
  if (!rc) rc = k < 0 ? nt_sort(xg, axis, desc, &vg, &ig) : nt_topk(xg, k, axis, desc, &vg, &ig);
  nt_Tensor *ac = !rc && k < 0 ? nt_argsort(x, axis, desc) : NULL, *ag = ac ? nt_argsort(xg, axis, desc) : NULL;
  nt_release(xg);
  if (rc || (k < 0 && !ag)) {
    snprintf(why, sizeof why, "%s: %s", what, nt_error_msg());
    nt_release(vc); nt_release(ic); nt_release(vg); nt_release(ig); nt_release(ac); nt_release(ag);
    return false;
  }
  char w[256];
  snprintf(w, sizeof w, "%s values", what);
  if (!same(w, vg, vc, 0)) { nt_release(ig); nt_release(ic); nt_release(ac); nt_release(ag); return false; }
  snprintf(w, sizeof w, "%s indices", what);
  if (!same(w, ig, ic, 0)) { nt_release(ac); nt_release(ag); return false; }
  snprintf(w, sizeof w, "%s argsort", what);
  return k >= 0 || same(w, ag, ac, 0);
}

static nt_Tensor *f_sort_values(nt_Tensor **in, int s) {
  (void)s;
  nt_Tensor *v = NULL;
  return nt_sort(in[0], 1, true, &v, NULL) ? NULL : v;
}
static nt_Tensor *f_topk_values(nt_Tensor **in, int s) {
  (void)s;
  nt_Tensor *v = NULL, *i = NULL;
  if (nt_topk(in[0], 4, -1, false, &v, &i)) return NULL;
  nt_release(i);
  return v;
}

TEST(sort_topk) {
  struct { const char *what; nt_Tensor *x; int axis; } c[] = {
    { "f32 middle axis", TIES(NT_F32, true, 6, 37, 5), 1 },
    { "f32 last axis", TIES(NT_F32, true, 6, 37, 5), -1 },
    { "f32 first axis", TIES(NT_F32, true, 6, 37, 5), 0 },
    { "f64 rows of 1000", TIES(NT_F64, true, 4, 1000), 1 },
    { "f32 long rows (stable ties)", TIES(NT_F32, true, 3, 100003), 1 },
    { "f32 many short rows", TIES(NT_F32, true, 20000, 3), 1 },
    { "f64 random", RND(NT_F64, -1, 1, 9, 257), 1 },
    { "i32", RND(NT_I32, -3, 4, 7, 50), 0 },
    { "i64", RND(NT_I64, -2000000000.0, 2000000000.0, 5, 40), 1 },
    { "i64 ties", RND(NT_I64, -2, 2, 5, 40), 1 },
    { "u8", RND(NT_U8, 0, 250, 9, 33), 1 },
    { "bool", RND(NT_BOOL, 0, 2, 4, 64), 1 },
    { "bf16 (sorted in f32)", TIES(NT_BF16, true, 3, 45), 1 },
    { "empty rows", RND(NT_F32, -1, 1, 0, 5), 1 },
    { "single element rows", RND(NT_F32, -1, 1, 8, 1), 1 },
  };
  bool ok = true;
  size_t nc = sizeof c / sizeof c[0];
  for (size_t i = 0; i < nc; i++) {
    if (!c[i].x) { snprintf(why, sizeof why, "%s: input: %s", c[i].what, nt_error_msg()); ok = false; break; }
    for (int desc = 0; ok && desc < 2; desc++) {
      char w[160];
      snprintf(w, sizeof w, "sort %s %s", c[i].what, desc ? "descending" : "ascending");
      ok = sort_case(w, c[i].x, c[i].axis, desc, -1);
      int ax = c[i].axis < 0 ? c[i].x->ndim + c[i].axis : c[i].axis;
      int64_t n = c[i].x->shape[ax], k = n > 3 ? n / 3 : 1;
      snprintf(w, sizeof w, "topk %s k %lld %s", c[i].what, (long long)k, desc ? "largest" : "smallest");
      if (ok && n > 0) ok = sort_case(w, c[i].x, c[i].axis, desc, k);
    }
  }
  for (size_t i = 0; i < nc; i++) nt_release(c[i].x);
  /* gradients flow back through the indices (scatter_add) */
  nt_Tensor *x[1] = { RND(NT_F32, -1, 1, 5, 40) };
  ok = ok && nn_case("sort values backward", f_sort_values, x, 1, 1, 1e-6) &&
       nn_case("topk values backward", f_topk_values, x, 1, 1, 1e-6);
  nt_release(x[0]);
  return ok;
}

static nt_Tensor *f_cumsum1(nt_Tensor **in, int s) { (void)s; return nt_cumsum(in[0], 1); }
static nt_Tensor *f_cumsum0(nt_Tensor **in, int s) { (void)s; return nt_cumsum(in[0], 0); }

TEST(cumsum) {
  nt_Tensor *x[1];
  /* "many wide columns" must reach the thread-per-column path, taken from
  ** num_sms * 2048 columns: 280,000 on a 132-SM GPU; on the emulated device
  ** (NABLA_EMU_SMS SMs) just past its own threshold, which keeps the case
  ** minutes shorter under ASan */
  const char *emu_sms = getenv("NABLA_EMU_SMS");
  int64_t wide = emu_sms && atoi(emu_sms) > 0 ? (int64_t)atoi(emu_sms) * 2048 + 37 : 280000;
  struct { const char *what; nt_Tensor *x; NnFn fn; double tol; } c[] = {
    { "f32 middle axis, long (block per strided row)", RND(NT_F32, -1, 1, 4, 300, 5), f_cumsum1, 1e-4 },
    { "f32 middle axis, short (thread per column)", RND(NT_F32, -1, 1, 3, 10, 7), f_cumsum1, 1e-5 },
    { "f64 long rows (many tiles)", RND(NT_F64, -1, 1, 5, 20000), f_cumsum1, 1e-10 },
    { "f32 one long row", RND(NT_F32, -1, 1, 1000), f_cumsum0, 1e-4 },
    { "f32 many wide columns", RND(NT_F32, -1, 1, 65, wide), f_cumsum0, 1e-4 },
    { "f16 (accumulated in f32)", RND(NT_F16, -1, 1, 6, 33), f_cumsum1, 5e-3 },
  };
  bool ok = true;
  size_t nc = sizeof c / sizeof c[0];
  for (size_t i = 0; i < nc; i++) {
    x[0] = c[i].x;
    char w[160];
    snprintf(w, sizeof w, "cumsum %s", c[i].what);
    if (ok) ok = nn_case(w, c[i].fn, x, 1, 1, c[i].tol);
    nt_release(c[i].x);
  }
  /* integers and bool accumulate in i64, exactly */
  nt_Tensor *a = RND(NT_I32, -1000, 1000, 7, 333, 3), *b = RND(NT_BOOL, 0, 2, 300, 4), *e = RND(NT_F32, -1, 1, 0, 4);
  nt_Tensor *ag = gpu(a), *bg = gpu(b), *eg = gpu(e);
  OK(ag && bg && eg);
  ok = ok && same("cumsum i32", nt_cumsum(ag, 1), nt_cumsum(a, 1), 0) && same("cumsum bool", nt_cumsum(bg, 0), nt_cumsum(b, 0), 0) &&
       same("cumsum empty", nt_cumsum(eg, 1), nt_cumsum(e, 1), 0);
  nt_release(a); nt_release(b); nt_release(e); nt_release(ag); nt_release(bg); nt_release(eg);
  return ok;
}

TEST(one_hot_masked_select) {
  nt_Tensor *ix = nt_randint(0, 6, SH(4, 5), 2, NT_I64, NT_CPU), *ig = gpu(ix);
  nt_Tensor *i32 = ix ? nt_to_dtype(ix, NT_I32) : NULL, *i32g = gpu(i32);
  OK(ig && i32g);
  bool ok = same("one_hot", nt_one_hot(ig, 6), nt_one_hot(ix, 6), 0) && same("one_hot inferred C", nt_one_hot(ig, -1), nt_one_hot(ix, -1), 0) &&
            same("one_hot i32", nt_one_hot(i32g, 9), nt_one_hot(i32, 9), 0);
  /* i64 index VIEWS on the device (transposed, stepped): the kernel must not read them as dense */
  nt_Tensor *it = ix ? nt_transpose(ix, 0, 1) : NULL, *itg = nt_transpose(ig, 0, 1);
  nt_Tensor *is = ix ? nt_slice(ix, 1, 0, NT_NONE, 2) : NULL, *isg = nt_slice(ig, 1, 0, NT_NONE, 2);
  ok = ok && it && itg && is && isg && same("one_hot transposed i64 index", nt_one_hot(itg, 6), nt_one_hot(it, 6), 0) &&
       same("one_hot stepped i64 index", nt_one_hot(isg, -1), nt_one_hot(is, -1), 0);
  nt_release(it); nt_release(itg); nt_release(is); nt_release(isg);
  nt_release(ix); nt_release(ig); nt_release(i32); nt_release(i32g);
  if (!ok) return false;
  /* bad classes: the same synchronous errors as on the CPU */
  nt_Tensor *bad = nt_from_buffer((const double[]){ 1, 7, 3 }, NT_F64, SH(3), 1, NT_I64), *badg = gpu(bad);
  nt_Tensor *neg = nt_from_buffer((const double[]){ 1, -2 }, NT_F64, SH(2), 1, NT_I64), *negg = gpu(neg);
  OK(badg && negg);
  nt_Tensor *r = nt_one_hot(badg, 5);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", nt_error_msg());
  nt_release(r);
  EXPECT(!r && !strcmp(msg, "one_hot: class value 7 is out of range for 5 classes"), "one_hot out of range on cuda: got %s", r ? "a result" : msg);
  r = nt_one_hot(negg, 5);
  snprintf(msg, sizeof msg, "%s", nt_error_msg());
  nt_release(r);
  EXPECT(!r && !strcmp(msg, "one_hot: class values must be non-negative, got -2"), "one_hot negative on cuda: got %s", r ? "a result" : msg);
  nt_release(bad); nt_release(badg); nt_release(neg); nt_release(negg);
  /* masked_select: the mask is read on the host, the selection is a take on the GPU */
  nt_Tensor *x = RND(NT_F32, -1, 1, 5, 6), *m = RND(NT_BOOL, 0, 2, 5, 6), *m1 = RND(NT_BOOL, 0, 2, 6);
  nt_Tensor *xg = gpu(x), *mg = gpu(m), *m1g = gpu(m1);
  OK(xg && mg && m1g);
  ok = same("masked_select", nt_masked_select(xg, mg), nt_masked_select(x, m), 0) &&
       same("masked_select broadcast mask", nt_masked_select(xg, m1g), nt_masked_select(x, m1), 0);
  nt_release(x); nt_release(m); nt_release(m1); nt_release(xg); nt_release(mg); nt_release(m1g);
  return ok;
}

/* ---- scaled_dot_product_attention: the fused and the cuBLAS paths (cuda/attention*.cu) ---------- */
/* max |a - b| / max |b| over all elements (0 when both are all zeros); a NaN or shape mismatch gives
** INFINITY, a failed copy -1.  Borrows both. */
static double rel_err(nt_Tensor *a, nt_Tensor *b) {
  if (!a || !b || a->numel != b->numel) return INFINITY;
  double *x = host(a), *y = host(b), num = 0, den = 0;
  if (!x || !y) { free(x); free(y); return -1; }
  for (int64_t i = 0; i < a->numel; i++) {
    double d = fabs(x[i] - y[i]);
    if (isnan(d)) { num = INFINITY; break; }
    num = d > num ? d : num;
    den = fabs(y[i]) > den ? fabs(y[i]) : den;
  }
  free(x); free(y);
  return num == 0 ? 0 : num / den;
}

typedef struct { nt_Tensor *t[4]; } AttnRes;   /* O, dq, dk, dv */
static void attn_free(AttnRes *r) { for (int i = 0; i < 4; i++) { nt_release(r->t[i]); r->t[i] = NULL; } }

/* O = sdpa(q, k, v) on dev (fresh leaf copies of the CPU tensors in[0..2]), then backward of sum(O * w) */
static bool attn_run(nt_Tensor *const *in, nt_Tensor *w, bool causal, nt_Device dev, AttnRes *r) {
  nt_Tensor *x[4] = { NULL, NULL, NULL, NULL };
  memset(r, 0, sizeof *r);
  bool ok = true;
  for (int i = 0; i < 4 && ok; i++) {
    nt_Tensor *src = i < 3 ? in[i] : w;
    x[i] = dev == NT_CPU ? nt_clone(src) : gpu(src);
    ok = x[i] != NULL;
    if (ok && i < 3) nt_set_requires_grad(x[i], true);
  }
  nt_Tensor *o = ok ? nt_scaled_dot_product_attention(x[0], x[1], x[2], causal, NAN) : NULL;
  nt_Tensor *p = o ? nt_mul(o, x[3]) : NULL, *s = p ? nt_sum(p, NULL, 0, false) : NULL;
  ok = s && !nt_backward(s, NULL, false);
  if (ok) {
    r->t[0] = nt_retain(o);
    for (int i = 0; i < 3; i++) r->t[i + 1] = nt_retain(nt_grad(x[i]));
    ok = r->t[1] && r->t[2] && r->t[3];
  }
  if (!ok) attn_free(r);
  nt_release(o); nt_release(p); nt_release(s);
  for (int i = 0; i < 4; i++) nt_release(x[i]);
  return ok;
}

/* every result of a within tol of b's (relative to b's largest magnitude) */
static bool attn_same(const char *what, const char *pair, AttnRes *a, AttnRes *b, double tol) {
  static const char *names[4] = { "output", "dq", "dk", "dv" };
  for (int i = 0; i < 4; i++) {
    double e = rel_err(a->t[i], b->t[i]);
    if (!(e >= 0 && e <= tol)) FAILF("%s: %s %s: max error %.3g of the largest magnitude (tol %g)", what, pair, names[i], e, tol);
  }
  return true;
}

/* q [2,3,T,D], k [2,3,S,D], v [2,3,S,DV] on fresh random inputs: the cuBLAS path (and the fused one when
** `fused`) against the CPU op and each other, forward and q/k/v gradients */
static bool attn_case(const char *what, nt_DType dt, int64_t T, int64_t S, int64_t D, int64_t DV, bool causal, bool fused,
                      double tol) {
  nt_Tensor *in[3] = { RND(dt, -2, 2, 2, 3, T, D), RND(dt, -2, 2, 2, 3, S, D), RND(dt, -1, 1, 2, 3, S, DV) };
  nt_Tensor *w = RND(dt, -1, 1, 2, 3, T, DV);
  AttnRes cpu = {{0}}, gm = {{0}}, fu = {{0}};
  bool ok = in[0] && in[1] && in[2] && w;
  if (!ok) snprintf(why, sizeof why, "%s: inputs: %s", what, nt_error_msg());
  if (ok && !(ok = attn_run(in, w, causal, NT_CPU, &cpu))) snprintf(why, sizeof why, "%s: cpu: %s", what, nt_error_msg());
  setenv("NABLA_CUDA_ATTENTION", "gemm", 1);
  if (ok && !(ok = attn_run(in, w, causal, NT_CUDA, &gm))) snprintf(why, sizeof why, "%s: gemm path: %s", what, nt_error_msg());
  setenv("NABLA_CUDA_ATTENTION", "fused", 1);
  if (ok && fused && !(ok = attn_run(in, w, causal, NT_CUDA, &fu)))
    snprintf(why, sizeof why, "%s: fused path: %s", what, nt_error_msg());
  unsetenv("NABLA_CUDA_ATTENTION");
  ok = ok && attn_same(what, "gemm vs cpu", &gm, &cpu, tol);
  ok = ok && (!fused || (attn_same(what, "fused vs cpu", &fu, &cpu, tol) && attn_same(what, "gemm vs fused", &gm, &fu, tol)));
  attn_free(&cpu); attn_free(&gm); attn_free(&fu);
  for (int i = 0; i < 3; i++) nt_release(in[i]);
  nt_release(w);
  return ok;
}

/* every result entirely NaN */
static bool attn_all_nan(const char *what, const char *path, AttnRes *r) {
  static const char *names[4] = { "output", "dq", "dk", "dv" };
  for (int i = 0; i < 4; i++) {
    double *x = host(r->t[i]);
    if (!x) FAILF("%s: %s %s: copy to host failed: %s", what, path, names[i], nt_error_msg());
    int64_t bad = -1;
    for (int64_t e = 0; e < r->t[i]->numel && bad < 0; e++)
      if (!isnan(x[e])) bad = e;
    double v = bad >= 0 ? x[bad] : 0;
    free(x);
    if (bad >= 0) FAILF("%s: %s %s: element %lld is %g, expected NaN", what, path, names[i], (long long)bad, v);
  }
  return true;
}

/* A NaN in k (key 3 of each head): every score row holds a NaN, so (torch, the CPU op) every O, dq, dk and dv
** entry is NaN on each path.  S = 70: the lane that reads key 3 in the cuBLAS path's row kernel
** later reads finite keys 35 and 67 (the NaN must survive its online max/sum). */
static bool attn_nan_case(const char *what, nt_DType dt) {
  const int64_t D = 16;
  nt_Tensor *k32 = RND(NT_F32, -2, 2, 1, 2, 70, D);
  for (int h = 0; k32 && h < 2; h++) ((float *)nt_base(k32))[(h * 70 + 3) * D] = NAN;   /* key 3 of each head */
  nt_Tensor *in[3] = { RND(dt, -2, 2, 1, 2, 40, D), k32 ? nt_to_dtype(k32, dt) : NULL, RND(dt, -1, 1, 1, 2, 70, D) };
  nt_Tensor *w = RND(dt, -1, 1, 1, 2, 40, D);
  nt_release(k32);
  AttnRes r = {{0}};
  bool ok = in[0] && in[1] && in[2] && w;
  if (!ok) snprintf(why, sizeof why, "%s: inputs: %s", what, nt_error_msg());
  static const char *paths[3] = { "cpu", "gemm", "fused" };
  for (int p = 0; p < 3 && ok; p++) {
    if (p) setenv("NABLA_CUDA_ATTENTION", paths[p], 1);
    ok = attn_run(in, w, false, p ? NT_CUDA : NT_CPU, &r);
    unsetenv("NABLA_CUDA_ATTENTION");
    if (!ok) snprintf(why, sizeof why, "%s: %s: %s", what, paths[p], nt_error_msg());
    ok = ok && attn_all_nan(what, paths[p], &r);
    attn_free(&r);
  }
  for (int i = 0; i < 3; i++) nt_release(in[i]);
  nt_release(w);
  return ok;
}

TEST(attention_paths) {
  nt_set_matmul_precision("highest");   /* f32: full-precision GEMMs (TF32 only after "high") */
  bool ok =
      attn_case("f32 T300 S260 d64", NT_F32, 300, 260, 64, 64, false, true, 1e-4) &&
      attn_case("f32 causal T260 S300 d64 dv40", NT_F32, 260, 300, 64, 40, true, true, 1e-4) &&
      attn_case("bf16 causal T257 S300 d64 dv48", NT_BF16, 257, 300, 64, 48, true, true, 5e-2) &&
      attn_case("bf16 T300 S257 d64", NT_BF16, 300, 257, 64, 64, false, true, 5e-2) &&
      attn_case("f16 causal T300 S200 d64", NT_F16, 300, 200, 64, 64, true, true, 1e-2) &&
      attn_case("f16 T33 S65 d64 dv17", NT_F16, 33, 65, 64, 17, false, true, 1e-2) &&
      attn_case("f64 causal T70 S90 d16 dv12", NT_F64, 70, 90, 16, 12, true, true, 1e-10) &&
      /* d = dv = 128, the fused limit: more than the default 48 KB of shared memory per block
      ** (f32 forward 53 KB, backward 73 KB; f64 backward 146 KB), so the opt-in attribute path runs */
      attn_case("f32 T45 S77 d128 dv128", NT_F32, 45, 77, 128, 128, false, true, 1e-4) &&
      attn_case("f64 causal T40 S70 d128 dv128", NT_F64, 40, 70, 128, 128, true, true, 1e-10) &&
      attn_case("bf16 causal T130 S130 d160 dv96 (gemm only)", NT_BF16, 130, 130, 160, 96, true, false, 5e-2) &&
      attn_case("f32 T64 S80 d160 (gemm only)", NT_F32, 64, 80, 160, 160, false, false, 1e-4) &&
      attn_case("f32 no keys", NT_F32, 5, 0, 8, 4, false, true, 0) &&
      attn_case("f32 causal no queries", NT_F32, 0, 6, 8, 4, true, true, 0);
  if (!ok) return false;
  /* one batch*head matrix per chunk: 6 passes with the scratch reused */
  setenv("NABLA_CUDA_ATTENTION_CHUNK_BYTES", "1", 1);
  ok = attn_case("f32 causal T40 S50 chunked", NT_F32, 40, 50, 32, 24, true, false, 1e-4) &&
       attn_case("bf16 T50 S40 chunked", NT_BF16, 50, 40, 32, 32, false, false, 5e-2);
  unsetenv("NABLA_CUDA_ATTENTION_CHUNK_BYTES");
  if (!ok) return false;
  if (!attn_nan_case("f32 NaN key", NT_F32) || !attn_nan_case("bf16 NaN key", NT_BF16)) return false;
  /* d > 128 forced onto the fused kernel, and a bad switch value: clear errors */
  nt_Tensor *q = RND(NT_F32, -1, 1, 1, 4, 130), *qg = gpu(q);
  OK(qg);
  setenv("NABLA_CUDA_ATTENTION", "fused", 1);
  nt_Tensor *r = nt_scaled_dot_product_attention(qg, qg, qg, false, NAN);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", nt_error_msg());
  ok = !r && strstr(msg, "scaled_dot_product_attention") && strstr(msg, "up to 128") && strstr(msg, "d=130");
  if (!ok) snprintf(why, sizeof why, "d=130 on the fused kernel: expected an error naming the limit, got %s", r ? "a result" : msg);
  nt_release(r);
  setenv("NABLA_CUDA_ATTENTION", "flash", 1);
  r = ok ? nt_scaled_dot_product_attention(qg, qg, qg, false, NAN) : NULL;
  snprintf(msg, sizeof msg, "%s", nt_error_msg());
  if (ok && (r || !strstr(msg, "NABLA_CUDA_ATTENTION") || !strstr(msg, "flash"))) {
    snprintf(why, sizeof why, "NABLA_CUDA_ATTENTION=flash: expected an error naming the variable, got %s", r ? "a result" : msg);
    ok = false;
  }
  unsetenv("NABLA_CUDA_ATTENTION");
  nt_release(r); nt_release(q); nt_release(qg);
  nt_error_clear();
  return ok;
}
