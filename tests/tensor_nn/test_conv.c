/* test_conv.c — conv2d against a direct 7-loop convolution, pooling values,
** and gradchecks (x, w, bias) with stride and padding. */
#include "tn.h"
#include "gradcheck.h"
#include "tensor/nn/nn.h"

#include <math.h>
#include <stdlib.h>

typedef struct { int sh, sw, ph, pw, kh, kw; } cv_ctx;
static nt_Tensor *f_conv(nt_Tensor *const *in, void *c) {
  cv_ctx *k = c;
  return nt_conv2d(in[0], in[1], in[2], k->sh, k->sw, k->ph, k->pw);
}
static nt_Tensor *f_maxpool(nt_Tensor *const *in, void *c) {
  cv_ctx *k = c;
  return nt_max_pool2d(in[0], k->kh, k->kw, k->sh, k->sw, k->ph, k->pw);
}
static nt_Tensor *f_avgpool(nt_Tensor *const *in, void *c) {
  cv_ctx *k = c;
  return nt_avg_pool2d(in[0], k->kh, k->kw, k->sh, k->sw, k->ph, k->pw);
}

static void t_conv2d_direct(void) {
  enum { N = 2, C = 3, H = 5, W = 6, O = 4, KH = 3, KW = 2, SH = 2, SW = 1, PH = 1, PW = 1 };
  nt_Tensor *x = tn_rand64((int64_t[]){N, C, H, W}, 4, false), *w = tn_rand64((int64_t[]){O, C, KH, KW}, 4, false),
            *b = tn_rand64((int64_t[]){O}, 1, false);
  nt_Tensor *y = nt_conv2d(x, w, b, SH, SW, PH, PW);
  CHECK(y, "%s", nt_error_msg());
  int Ho = (H + 2 * PH - KH) / SH + 1, Wo = (W + 2 * PW - KW) / SW + 1;
  int shape_ok = y->shape[0] == N && y->shape[1] == O && y->shape[2] == Ho && y->shape[3] == Wo;
  double *xv = nt_data_ptr(x), *wv = nt_data_ptr(w), *bv = nt_data_ptr(b), *yv = malloc(sizeof(double) * (size_t)y->numel);
  nt_to_host(y, yv, NT_F64);
  double worst = 0;
  for (int n = 0; n < N; n++) for (int o = 0; o < O; o++) for (int oh = 0; oh < Ho; oh++) for (int ow = 0; ow < Wo; ow++) {
    double s = bv[o];
    for (int c = 0; c < C; c++) for (int i = 0; i < KH; i++) for (int j = 0; j < KW; j++) {
      int h = oh * SH - PH + i, ww = ow * SW - PW + j;
      if (h >= 0 && h < H && ww >= 0 && ww < W) s += xv[((n * C + c) * H + h) * W + ww] * wv[((o * C + c) * KH + i) * KW + j];
    }
    worst = fmax(worst, fabs(s - yv[((n * O + o) * Ho + oh) * Wo + ow]));
  }
  free(yv);
  /* f32 agrees */
  nt_Tensor *xf = nt_to_dtype(x, NT_F32), *wf = nt_to_dtype(w, NT_F32);
  nt_Tensor *yf = nt_conv2d(xf, wf, NULL, SH, SW, PH, PW), *y0 = nt_conv2d(x, w, NULL, SH, SW, PH, PW);
  double d32 = tn_maxdiff(yf, y0);
  nt_release(xf); nt_release(wf); nt_release(yf); nt_release(y0);
  nt_release(x); nt_release(w); nt_release(b); nt_release(y);
  CHECK(shape_ok, "output shape wrong");
  CHECK(worst < 1e-12, "conv2d differs from direct by %g", worst);
  CHECK(d32 < 1e-5, "f32 conv differs by %g", d32);
}

static void t_conv2d_grad(void) {
  cv_ctx c = {2, 1, 1, 0, 0, 0};
  nt_Tensor *x = tn_rand64((int64_t[]){2, 2, 5, 4}, 4, true), *w = tn_rand64((int64_t[]){3, 2, 3, 2}, 4, true),
            *b = tn_rand64((int64_t[]){3}, 1, true);
  { nt_Tensor *in_[] = {x, w, b}; char why[512];
    int rc = tn_gradcheck(f_conv, &c, in_, 3, why, sizeof why);
    nt_release(x); nt_release(w); nt_release(b);
    CHECK(rc == 0, "conv2d gradcheck: %s", why); }
  cv_ctx c2 = {1, 1, 0, 0, 0, 0};
  x = tn_rand64((int64_t[]){1, 3, 3, 3}, 4, true); w = tn_rand64((int64_t[]){2, 3, 1, 1}, 4, true);
  { nt_Tensor *in_[] = {x, w, NULL}; char why[512];
    int rc = tn_gradcheck(f_conv, &c2, in_, 3, why, sizeof why);
    nt_release(x); nt_release(w);
    CHECK(rc == 0, "1x1 conv gradcheck: %s", why); }
  nt_Tensor *bx = tn_rand64((int64_t[]){1, 2, 3, 3}, 4, false), *bw = tn_rand64((int64_t[]){2, 3, 1, 1}, 4, false);
  nt_Tensor *r = nt_conv2d(bx, bw, NULL, 1, 1, 0, 0);
  nt_release(bx); nt_release(bw);
  CHECK(!r, "channel mismatch accepted");
}

static void t_pool(void) {
  double v[16];
  for (int i = 0; i < 16; i++) v[i] = (i * 7) % 16;   /* distinct values, no ties */
  nt_Tensor *x = tn_f64(v, (int64_t[]){1, 1, 4, 4}, 4, false);
  nt_Tensor *m = nt_max_pool2d(x, 2, 2, 0, 0, 0, 0), *a = nt_avg_pool2d(x, 2, 2, 2, 2, 0, 0);
  CHECK(m && a, "%s", nt_error_msg());
  /* rows: [0 7 14 5] [12 3 10 1] [8 15 6 13] [4 11 2 9] */
  int ok = m->shape[2] == 2 && tn_at(m, 0) == 12 && tn_at(m, 1) == 14 && tn_at(m, 2) == 15 && tn_at(m, 3) == 13;
  int ok2 = fabs(tn_at(a, 0) - 5.5) < 1e-12 && fabs(tn_at(a, 3) - 7.5) < 1e-12;
  nt_release(m); nt_release(a); nt_release(x);
  CHECK(ok, "max_pool2d values wrong");
  CHECK(ok2, "avg_pool2d values wrong");
  cv_ctx c = {2, 1, 1, 1, 3, 2};

  nt_Tensor *in1[] = {tn_rand64((int64_t[]){2, 2, 5, 4}, 4, true)};
  char why[512];
  int rc = tn_gradcheck(f_maxpool, &c, in1, 1, why, sizeof why);
  nt_release(in1[0]);
  CHECK(rc == 0, "max_pool2d gradcheck: %s", why);
  nt_Tensor *in2[] = {tn_rand64((int64_t[]){2, 2, 5, 4}, 4, true)};
  rc = tn_gradcheck(f_avgpool, &c, in2, 1, why, sizeof why);
  nt_release(in2[0]);
  CHECK(rc == 0, "avg_pool2d gradcheck: %s", why);

}

const tn_test tn_tests_conv[] = {
  {"conv2d_vs_direct", t_conv2d_direct},
  {"conv2d_gradcheck", t_conv2d_grad},
  {"pool2d_values_gradcheck", t_pool},
  {NULL, NULL},
};
