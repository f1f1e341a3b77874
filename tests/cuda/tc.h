/*
** tc.h — the harness shared by the sources of the test_cuda program
** (tests/cuda/): test_cuda.c (harness, helpers, the no-GPU path, core ops,
** autograd, optimizers, the allocator and error reporting, main) and
** tc_nn.c (nn ops, convolution and pooling, sort, attention).  One program
** split by topic to keep each file short: its output and test order are
** those of the single file it was.
*/
#ifndef TC_H
#define TC_H

#include "tensor/tbackend.h"   /* the op table (fused_optimizers) and raw storage */
#include "tensor/tdevice.h"
#include "tensor/nn/nn.h"
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

/* the current test's failure message and skip flag (test_cuda.c) */
extern char why[2048];
extern bool skipped;

#define FAILF(...) do { snprintf(why, sizeof why, __VA_ARGS__); return false; } while (0)
#define EXPECT(c, ...) do { if (!(c)) FAILF(__VA_ARGS__); } while (0)
#define OK(x) do { if (!(x)) FAILF("%s:%d: %s failed: %s", __FILE__, __LINE__, #x, nt_error_msg()); } while (0)
#define TEST(name) bool test_##name(void)

/* ---- helpers (test_cuda.c) ------------------------------------------------------ */
double *host(nt_Tensor *t);                 /* malloc'd f64 copy, NULL on failure */
double tol_of(nt_DType dt);                 /* GPU-vs-CPU tolerance per float dtype */
bool close_to(double a, double b, double tol);
/* compares a GPU result with the CPU result (consumes both) */
bool same(const char *what, nt_Tensor *gpu, nt_Tensor *cpu, double tol);
nt_Tensor *gpu(nt_Tensor *t);               /* a CUDA copy (NULL-safe) */
/* random CPU tensor of dtype dt; ints in [lo, hi) */
nt_Tensor *rnd(nt_DType dt, int nd, const int64_t *shape, double lo, double hi);
#define SH(...) ((const int64_t[]){ __VA_ARGS__ })
#define ND(...) (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t))
#define RND(dt, lo, hi, ...) rnd(dt, ND(__VA_ARGS__), SH(__VA_ARGS__), lo, hi)
extern const nt_DType ALL_DT[8];

/* ---- tests of tc_nn.c ----------------------------------------------------------- */
TEST(nn_softmax_xent);
TEST(nn_layer_norm_gelu);
TEST(nn_embedding_gather_scatter);
TEST(nn_conv2d);
TEST(nn_pooling);
TEST(sort_topk);
TEST(cumsum);
TEST(one_hot_masked_select);
TEST(attention_paths);

#endif
