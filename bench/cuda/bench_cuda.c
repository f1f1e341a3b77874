/*
** bench_cuda.c — GPU benchmarks of the CUDA backend through the tensor API.
** Built as build/tests/cuda/bench_cuda (not a test: run by tests/cuda/run_gpu.sh).
** Prints one line per result:
**     bench: <name> <value> <unit>   [reference: ...]
** bench/cuda/bench_torch.py prints the same names for torch (when installed)
** so the two can be put side by side in bench/results/.
**
**   matmul_bf16_8192      TFLOP/s of one 8192^3 bf16 matmul (f32 accumulate)
**   matmul_tf32_8192      same, f32 inputs with matmul_precision "high"
**   add_f32_256M          GB/s of a + b (3 x 1 GiB moved) vs
**   copy_d2d_256M         GB/s of a device-to-device copy (2 x 1 GiB moved)
**   sum_f32_256M          GB/s of sum(a) (1 GiB read)
**   small_add_latency     microseconds per 16-element a + a (async, host overhead)
**   small_add_sync        microseconds per 16-element a + a followed by a synchronize
**   attention_fwd_bf16_T1024, attention_fwd_bwd_bf16_T1024
**                         ms per causal scaled_dot_product_attention forward (and
**                         forward + backward) at GPT-2-small's shape: q, k, v
**                         [8, 12, 1024, 64] bf16; the default path (cuBLAS at this
**                         size), then _gemm and _fused forced via NABLA_CUDA_ATTENTION
**   attention_fwd_bwd_bf16_T1024_mask
**                         the same, not causal, with an additive bf16 [1024, 1024]
**                         mask (cuDNN's graph adds it; elsewhere the composed ops)
*/
#include "tensor/tdevice.h"
#include "tensor/nn/nn.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "bench_cuda: %s failed: %s\n", #x, nt_error_msg()); exit(1); } } while (0)

static void sync_or_die(void) { CHECK(nt_cuda_synchronize() == 0); }

/* best-of-reps time of `iters` calls of fn, synchronized */
typedef nt_Tensor *(*Op)(nt_Tensor *a, nt_Tensor *b);
static double time_op(Op fn, nt_Tensor *a, nt_Tensor *b, int iters, int reps) {
  nt_Tensor *w = fn(a, b);   /* warm-up (cuBLAS heuristics, allocator) */
  CHECK(w);
  nt_release(w);
  sync_or_die();
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    for (int i = 0; i < iters; i++) { nt_Tensor *o = fn(a, b); CHECK(o); nt_release(o); }
    sync_or_die();
    double t = (now() - t0) / iters;
    if (t < best) best = t;
  }
  return best;
}

static nt_Tensor *op_matmul(nt_Tensor *a, nt_Tensor *b) { return nt_matmul(a, b); }
static nt_Tensor *op_add(nt_Tensor *a, nt_Tensor *b) { return nt_add(a, b); }
static nt_Tensor *op_clone(nt_Tensor *a, nt_Tensor *b) { (void)b; return nt_clone(a); }
static nt_Tensor *op_sum(nt_Tensor *a, nt_Tensor *b) { (void)b; return nt_sum(a, NULL, 0, false); }

/* attention: qkv[0..2] = q, k, v (leaves that require grad), a = dO for the backward */
static nt_Tensor *qkv[3];
static nt_Tensor *op_attn_fwd(nt_Tensor *a, nt_Tensor *b) {
  (void)a; (void)b;
  return nt_scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], true, NAN);
}
/* with an additive mask b (not causal) */
static nt_Tensor *op_attn_mask_fwd_bwd(nt_Tensor *dout, nt_Tensor *b) {
  nt_set_grad_enabled(true);
  nt_Tensor *o = nt_sdpa(qkv[0], qkv[1], qkv[2], b, false, NAN, 0);
  CHECK(o && nt_backward(o, dout, false) == 0);
  for (int i = 0; i < 3; i++) nt_set_grad(qkv[i], NULL);
  nt_set_grad_enabled(false);
  return o;
}
static nt_Tensor *op_attn_fwd_bwd(nt_Tensor *dout, nt_Tensor *b) {
  (void)b;
  nt_set_grad_enabled(true);
  nt_Tensor *o = nt_scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], true, NAN);
  CHECK(o && nt_backward(o, dout, false) == 0);
  for (int i = 0; i < 3; i++) nt_set_grad(qkv[i], NULL);   /* no accumulation across iterations */
  nt_set_grad_enabled(false);
  return o;
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  nt_init();
  nt_set_grad_enabled(false);
  char reason[768];
  if (!nt_cuda_available(reason, sizeof reason)) {
    printf("SKIP: bench_cuda: cuda: %s\n", reason);
    return 0;
  }
  nt_seed(0);
  if (!only || strstr("matmul", only)) {
    int64_t n = 8192, sh[2] = { n, n };
    nt_Tensor *a = nt_randn(sh, 2, NT_BF16, NT_CUDA), *b = nt_randn(sh, 2, NT_BF16, NT_CUDA);
    CHECK(a && b);
    double t = time_op(op_matmul, a, b, 10, 3);
    printf("bench: matmul_bf16_8192 %.1f TFLOP/s\n", 2.0 * n * n * n / t / 1e12);
    nt_release(a); nt_release(b);
    a = nt_randn(sh, 2, NT_F32, NT_CUDA); b = nt_randn(sh, 2, NT_F32, NT_CUDA);
    CHECK(a && b);
    nt_set_matmul_precision("high");
    t = time_op(op_matmul, a, b, 5, 3);
    printf("bench: matmul_tf32_8192 %.1f TFLOP/s\n", 2.0 * n * n * n / t / 1e12);
    nt_set_matmul_precision("highest");
    t = time_op(op_matmul, a, b, 3, 2);
    printf("bench: matmul_f32_8192 %.1f TFLOP/s\n", 2.0 * n * n * n / t / 1e12);
    nt_release(a); nt_release(b);
  }
  if (!only || strstr("bandwidth", only)) {
    int64_t n = (int64_t)1 << 28;
    double gb = (double)n * 4 / 1e9;
    nt_Tensor *a = nt_rand(&n, 1, NT_F32, NT_CUDA), *b = nt_rand(&n, 1, NT_F32, NT_CUDA);
    CHECK(a && b);
    double t = time_op(op_add, a, b, 20, 3);
    printf("bench: add_f32_256M %.0f GB/s\n", 3 * gb / t);
    t = time_op(op_clone, a, NULL, 20, 3);
    printf("bench: copy_d2d_256M %.0f GB/s\n", 2 * gb / t);
    t = time_op(op_sum, a, NULL, 20, 3);
    printf("bench: sum_f32_256M %.0f GB/s\n", gb / t);
    nt_release(a); nt_release(b);
  }
  if (!only || strstr("latency", only)) {
    int64_t n = 16;
    nt_Tensor *a = nt_ones(&n, 1, NT_F32, NT_CUDA);
    CHECK(a);
    double t = time_op(op_add, a, a, 20000, 3);
    printf("bench: small_add_latency %.2f us\n", t * 1e6);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
      double t0 = now();
      for (int i = 0; i < 2000; i++) { nt_Tensor *o = nt_add(a, a); CHECK(o); nt_release(o); sync_or_die(); }
      double tt = (now() - t0) / 2000;
      if (tt < best) best = tt;
    }
    printf("bench: small_add_sync %.2f us\n", best * 1e6);
    nt_release(a);
  }
  if (!only || strstr("attention", only)) {
    int64_t sh[4] = { 8, 12, 1024, 64 };
    for (int i = 0; i < 3; i++) { qkv[i] = nt_randn(sh, 4, NT_BF16, NT_CUDA); CHECK(qkv[i]); nt_set_requires_grad(qkv[i], true); }
    nt_Tensor *dout = nt_randn(sh, 4, NT_BF16, NT_CUDA);
    CHECK(dout);
    static const char *paths[3] = { NULL, "gemm", "fused" };
    for (int p = 0; p < 3; p++) {
      if (paths[p]) setenv("NABLA_CUDA_ATTENTION", paths[p], 1);
      double tf = time_op(op_attn_fwd, NULL, NULL, 20, 3), tb = time_op(op_attn_fwd_bwd, dout, NULL, 10, 3);
      printf("bench: attention_fwd_bf16_T1024%s%s %.3f ms\n", paths[p] ? "_" : "", paths[p] ? paths[p] : "", tf * 1e3);
      printf("bench: attention_fwd_bwd_bf16_T1024%s%s %.3f ms\n", paths[p] ? "_" : "", paths[p] ? paths[p] : "", tb * 1e3);
      unsetenv("NABLA_CUDA_ATTENTION");
    }
    int64_t msh[2] = { 1024, 1024 };
    nt_Tensor *mask = nt_randn(msh, 2, NT_BF16, NT_CUDA);
    CHECK(mask);
    printf("bench: attention_fwd_bwd_bf16_T1024_mask %.3f ms\n", time_op(op_attn_mask_fwd_bwd, dout, mask, 10, 3) * 1e3);
    nt_release(mask);
    for (int i = 0; i < 3; i++) nt_release(qkv[i]);
    nt_release(dout);
  }
  size_t al, ca, pk;
  nt_cuda_memory(&al, &ca, &pk);
  printf("# allocator: %.1f MiB allocated, %.1f MiB cached, %.1f MiB peak\n", al / 1048576.0, ca / 1048576.0, pk / 1048576.0);
  return 0;
}
