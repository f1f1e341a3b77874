/*
** test_linear_plan.c — cuda/linear.cu's host decisions (cuda/linear_plan.h),
** on any machine: when y = x W^T + b and its backward go through cuBLASLt
** with epilogues and when they take the classic cublasGemmEx path (odd sizes,
** unaligned pointers, dtypes without an Lt path, empty or huge dimensions),
** at the GPT-2-small shapes and at random ones, against a direct statement
** of the rule.  One PASS/FAIL line per test; exit status 1 if anything failed.
*/
#include "cuda/linear_plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int n_fail;
static char why[512];

#define FAILF(...) do { snprintf(why, sizeof why, __VA_ARGS__); return 0; } while (0)
#define EXPECT(c, ...) do { if (!(c)) FAILF(__VA_ARGS__); } while (0)
#define RUN(name) do { why[0] = 0; if (test_##name()) printf("PASS: linear_plan.%s\n", #name); \
                       else { printf("FAIL: linear_plan.%s: %s\n", #name, why); n_fail++; } fflush(stdout); } while (0)

static int test_align(void) {
  EXPECT(ncl_align(0x1000) == 256, "0x1000 -> %u", ncl_align(0x1000));
  EXPECT(ncl_align(0x1010) == 16, "0x1010 -> %u", ncl_align(0x1010));
  EXPECT(ncl_align(0x1002) == 2, "0x1002 -> %u", ncl_align(0x1002));
  EXPECT(ncl_align(0x1001) == 1, "0x1001 -> %u", ncl_align(0x1001));
  EXPECT(ncl_align(0x1180) == 128, "0x1180 -> %u", ncl_align(0x1180));
  return 1;
}

/* GPT-2 small under autocast: every linear of the model takes the Lt path
** forward (bf16) and backward (bf16 dX, f32 dW/db into the masters) */
static int test_gpt2_shapes(void) {
  const int64_t M = 8 * 1024, shapes[][2] = { {2304, 768}, {768, 768}, {3072, 768}, {768, 3072}, {50304, 768} };
  uintptr_t ptrs[4] = { 0x7f0000000000, 0x7f0000200000, 0x7f0000400000, 0x7f0000600200 };
  const char *w;
  for (int i = 0; i < 5; i++) {
    int64_t N = shapes[i][0], K = shapes[i][1];
    EXPECT(ncl_lt_ok(NT_BF16, NT_BF16, M, N, K, ptrs, 4, &w), "forward %lldx%lld: %s", (long long)N, (long long)K, w);
    EXPECT(ncl_lt_ok(NT_BF16, NT_F32, M, N, K, ptrs, 4, &w), "dW %lldx%lld: %s", (long long)N, (long long)K, w);
    EXPECT(ncl_lt_ok(NT_F32, NT_F32, M, N, K, ptrs, 4, &w), "f32 %lldx%lld: %s", (long long)N, (long long)K, w);
  }
  return 1;
}

static int test_refusals(void) {
  uintptr_t al[3] = { 0x1000, 0x2000, 0x3000 }, mis[3] = { 0x1000, 0x2008, 0x3000 };
  const char *w;
  EXPECT(!ncl_lt_ok(NT_F64, NT_F64, 64, 64, 64, al, 3, &w) && strstr(w, "dtype"), "f64: %s", w ? w : "accepted");
  EXPECT(!ncl_lt_ok(NT_I32, NT_I32, 64, 64, 64, al, 3, &w), "i32 accepted");
  EXPECT(!ncl_lt_ok(NT_F32, NT_BF16, 64, 64, 64, al, 3, &w) && strstr(w, "output"), "f32 -> bf16: %s", w ? w : "accepted");
  EXPECT(!ncl_lt_ok(NT_BF16, NT_F16, 64, 64, 64, al, 3, &w), "bf16 -> f16 accepted");
  EXPECT(!ncl_lt_ok(NT_BF16, NT_BF16, 64, 13, 64, al, 3, &w) && strstr(w, "16 bytes"), "N = 13: %s", w ? w : "accepted");
  EXPECT(!ncl_lt_ok(NT_BF16, NT_BF16, 64, 64, 12, al, 3, &w), "bf16 K = 12 (24 bytes) accepted");
  EXPECT(ncl_lt_ok(NT_BF16, NT_BF16, 64, 64, 8, al, 3, &w), "bf16 K = 8 (16 bytes): %s", w);
  EXPECT(!ncl_lt_ok(NT_BF16, NT_F32, 64, 64, 4, al, 3, &w), "bf16 -> f32 with K = 4 (f32 result rows of 16 bytes, inputs of 8) accepted");
  EXPECT(ncl_lt_ok(NT_F32, NT_F32, 7, 4, 4, al, 3, &w), "f32 M = 7, N = K = 4: %s", w);
  EXPECT(!ncl_lt_ok(NT_F32, NT_F32, 0, 4, 4, al, 3, &w) && strstr(w, "empty"), "M = 0: %s", w ? w : "accepted");
  EXPECT(!ncl_lt_ok(NT_F32, NT_F32, (int64_t)1 << 31, 4, 4, al, 3, &w) && strstr(w, "2^31"), "M = 2^31: %s", w ? w : "accepted");
  EXPECT(!ncl_lt_ok(NT_F32, NT_F32, 64, 64, 64, mis, 3, &w) && strstr(w, "aligned"), "misaligned B: %s", w ? w : "accepted");
  uintptr_t nob[4] = { 0x1000, 0x2000, 0x3000, 0 };   /* 0: no bias */
  EXPECT(ncl_lt_ok(NT_F32, NT_F32, 64, 64, 64, nob, 4, &w), "a 0 entry (no bias) refused: %s", w);
  return 1;
}

/* random cases against the rule written out directly */
static int test_random(void) {
  srand((unsigned)time(NULL));
  const nt_DType dts[] = { NT_F32, NT_BF16, NT_F16, NT_F64 };
  for (int it = 0; it < 20000; it++) {
    nt_DType in = dts[rand() % 4], out = rand() % 3 ? in : NT_F32;
    int64_t M = rand() % 5 == 0 ? 0 : 1 + rand() % 300, N = 1 + rand() % 300, K = 1 + rand() % 300;
    uintptr_t p[3];
    for (int i = 0; i < 3; i++) p[i] = 0x10000 + (uintptr_t)(rand() % 8 ? 256 * (rand() % 64) : rand() % 4096);
    int ei = in == NT_F32 ? 4 : in == NT_F64 ? 0 : 2, eo = out == NT_F32 ? 4 : out == NT_F64 ? 0 : 2;
    bool expect = ei && eo && (out == in || (ei == 2 && out == NT_F32)) && M >= 1 && (K * ei) % 16 == 0 && (N * ei) % 16 == 0 &&
                  (K * eo) % 16 == 0 && (N * eo) % 16 == 0 && p[0] % 16 == 0 && p[1] % 16 == 0 && p[2] % 16 == 0;
    const char *w;
    bool got = ncl_lt_ok(in, out, M, N, K, p, 3, &w);
    EXPECT(got == expect, "dtype %d -> %d, M %lld N %lld K %lld, ptrs %lx %lx %lx: plan says %d (%s), rule says %d", (int)in, (int)out,
           (long long)M, (long long)N, (long long)K, (unsigned long)p[0], (unsigned long)p[1], (unsigned long)p[2], got, w ? w : "-", expect);
    EXPECT(got == (w == NULL), "why set on acceptance / missing on refusal");
  }
  return 1;
}

int main(void) {
  RUN(align);
  RUN(gpt2_shapes);
  RUN(refusals);
  RUN(random);
  return n_fail ? 1 : 0;
}
