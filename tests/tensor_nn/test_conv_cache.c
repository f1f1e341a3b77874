/*
** test_conv_cache.c — the oneDNN convolution primitive cache's bound
** (tensor/tonednn.c, NABLA_ONEDNN_CONV_CACHE_MB): with a 2 MiB bound, f32
** convolutions and transposed convolutions of random geometries (entries of
** ~0.3-3 MiB of reorder buffers, some bigger than the whole bound) keep the
** cached bytes within the bound and the entries within 64, and every result
** equals the f64 im2col path's (relative 1e-4).  Revisiting the geometries
** in another order exercises the LRU eviction and the reuse of entries.
** Without oneDNN it has nothing to check (exit 77).  Random sizes each run
** (the seed is printed on failure).
*/
#include "tensor/tensor.h"
#include "tensor/nn/nn.h"
#include "tensor/tonednn.h"
#include "tensor/tinternal.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../seedcheck.h"

/* max |a - b| / max(1, max |b|) of two f32 tensors of one shape; -1 on an error */
static double rel_err(nt_Tensor *a, nt_Tensor *b) {
  nt_Tensor *ac = nt_contiguous(a), *bc = nt_contiguous(b);
  double e = -1, m = 1;
  if (ac && bc && ac->numel == bc->numel) {
    const float *pa = nt_data_ptr(ac), *pb = nt_data_ptr(bc);
    e = 0;
    for (int64_t i = 0; i < ac->numel; i++) {
      e = fmax(e, fabs((double)pa[i] - pb[i]));
      m = fmax(m, fabs((double)pb[i]));
    }
    e /= m;
  }
  nt_release(ac); nt_release(bc);
  return e;
}

typedef struct { int64_t N, C, O, H, W, k, stride, pad; bool transposed; } Geo;

/* runs one geometry in f32 (oneDNN) and f64 (im2col); answers the relative error */
static double run_geo(const Geo *g) {
  int64_t xs[4] = {g->N, g->C, g->H, g->W};
  int64_t ws[4] = {g->transposed ? g->C : g->O, g->transposed ? g->O : g->C, g->k, g->k};
  nt_Tensor *x = nt_randn(xs, 4, NT_F32, NT_CPU), *w = nt_randn(ws, 4, NT_F32, NT_CPU);
  nt_ConvArgs a = {.stride = {g->stride, g->stride}, .padding = {g->pad, g->pad}, .dilation = {1, 1}, .groups = 1};
  nt_Tensor *x64 = nt_to_dtype(x, NT_F64), *w64 = nt_to_dtype(w, NT_F64);
  nt_Tensor *y = g->transposed ? nt_conv_transpose(x, w, NULL, &a) : nt_conv(x, w, NULL, &a);
  nt_Tensor *y64 = g->transposed ? nt_conv_transpose(x64, w64, NULL, &a) : nt_conv(x64, w64, NULL, &a);
  nt_Tensor *y64f = y64 ? nt_to_dtype(y64, NT_F32) : NULL;
  double e = y && y64f ? rel_err(y, y64f) : -1;
  if (e < 0) printf("# error: %s\n", nt_error_msg());
  nt_release(x); nt_release(w); nt_release(x64); nt_release(w64); nt_release(y); nt_release(y64); nt_release(y64f);
  return e;
}

int main(void) {
  setenv("NABLA_ONEDNN_CONV_CACHE_MB", "2", 1);
  setvbuf(stdout, NULL, _IOLBF, 0);
  nt_init();
  if (!nt_onednn_available()) return 77;   /* no libdnnl (or NABLA_ONEDNN=0, or ASan's default): nothing to bound */
  seed = (unsigned)time(NULL);
  srand(seed);
  size_t entries, bytes, limit;
  nt_onednn_conv_cache_stats(&entries, &bytes, &limit);
  check(limit == ((size_t)2 << 20), "conv_cache_env", "NABLA_ONEDNN_CONV_CACHE_MB=2 gave a bound of %zu bytes", limit);
  enum { NG = 12 };
  Geo geo[NG];
  for (int i = 0; i < NG; i++)   /* 16+ channels: oneDNN's blocked layouts, so every entry has reorder buffers */
    geo[i] = (Geo){.N = 1 + rand() % 4, .C = 16 * (1 + rand() % 2), .O = 16 + 16 * (rand() % 2), .H = 12 + rand() % 40,
                   .W = 12 + rand() % 40, .k = 3, .stride = 1 + rand() % 2, .pad = 1, .transposed = i % 3 == 2};
  geo[0].N = 8; geo[0].H = geo[0].W = 64;   /* ~4 MiB of buffers: more than the whole bound */
  double worst = 0;
  size_t max_bytes = 0, max_entries = 0;
  int bad = 0;
  for (int pass = 0; pass < 3; pass++)
    for (int j = 0; j < NG; j++) {
      int i = pass == 1 ? NG - 1 - j : pass == 2 ? (j * 5) % NG : j;   /* forward, backward, strided order */
      double e = run_geo(&geo[i]);
      if (e < 0 || !(e <= 1e-4)) bad++;
      if (e > worst) worst = e;
      nt_onednn_conv_cache_stats(&entries, &bytes, &limit);
      if (bytes > max_bytes) max_bytes = bytes;
      if (entries > max_entries) max_entries = entries;
    }
  check(!bad, "conv_cache_values", "%d of %d convolutions off the f64 path (worst relative %.3g)", bad, 3 * NG, worst);
  check(max_bytes <= limit && max_entries >= 1, "conv_cache_bound", "cached %zu bytes at most (bound %zu), %zu entries", max_bytes,
        limit, max_entries);
  /* the oversized geometry runs without flushing what is cached */
  size_t before_entries;
  Geo small = {.N = 1, .C = 16, .O = 16, .H = 16, .W = 16, .k = 3, .stride = 1, .pad = 1};   /* ~32 KiB: cached */
  if (run_geo(&small) < 0) bad++;
  nt_onednn_conv_cache_stats(&before_entries, &bytes, &limit);
  double e0 = run_geo(&geo[0]);
  nt_onednn_conv_cache_stats(&entries, &bytes, &limit);
  check(e0 >= 0 && e0 <= 1e-4 && before_entries >= 1 && entries == before_entries, "conv_cache_oversize",
        "%zu entries before an entry bigger than the bound, %zu after (error %.3g)", before_entries, entries, e0);
  /* many small geometries: at most 64 entries */
  for (int i = 0; i < 70; i++) {
    Geo g = {.N = 1, .C = 16, .O = 16, .H = 4 + i % 35, .W = 4 + i / 35, .k = 3, .stride = 1, .pad = 1};
    if (run_geo(&g) < 0) bad++;
  }
  nt_onednn_conv_cache_stats(&entries, &bytes, &limit);
  check(!bad && entries <= 64 && bytes <= limit, "conv_cache_entries", "%zu entries, %zu bytes after 70 small geometries", entries, bytes);
  return fails ? 1 : 0;
}
