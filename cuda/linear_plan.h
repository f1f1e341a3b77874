/*
** linear_plan.h — the host decisions of cuda/linear.cu (y = x W^T + b and its
** backward through cuBLASLt), pure C so tests/cuda/test_linear_plan.c checks
** them on any machine.
**
** cuBLASLt path (epilogues: BIAS forward, BGRADB for the bias gradient on the
** dW GEMM) when
**   * the input dtype is f32, bf16 or f16 and the output is that dtype, or f32
**     from 16-bit inputs (dW and db straight into an f32 master's gradient);
**   * 1 <= M, N, K < 2^31 (Lt takes 64-bit sizes, but the heuristic and our
**     emulated stand-in do not promise more);
**   * every leading dimension in bytes (K and N elements of every operand and
**     result) is a multiple of 16, and every pointer is 16-byte aligned:
**     Lt's tensor-core kernels load 16 bytes at a time, and its bias
**     epilogues are documented for aligned vectors only.  The alignment
**     preference tells the heuristic the actual pointer alignment (its
**     default assumes 256 bytes), so a kernel needing more is never chosen.
** Otherwise, or when the heuristic returns no algorithm, the classic path:
** cublasGemmEx (any sizes and alignment) plus a bias-add kernel forward and a
** column-sum kernel for the bias gradient.  Both are exact formulas; only
** speed differs.
*/
#ifndef NABLA_CUDA_LINEAR_PLAN_H
#define NABLA_CUDA_LINEAR_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include "tensor/tensor.h"

/* largest power of two dividing the address, at most 256 (the heuristic's preference unit) */
static inline uint32_t ncl_align(uintptr_t p) {
  uint32_t a = 1;
  while (a < 256 && (p & (uintptr_t)(2 * a - 1)) == 0) a *= 2;
  return a;
}

static inline int ncl_size(nt_DType dt) {
  switch (dt) {
    case NT_F32: return 4;
    case NT_BF16: case NT_F16: return 2;
    default: return 0;   /* no Lt path for this dtype */
  }
}

/* Whether one linear GEMM family (forward or backward) may go through
** cuBLASLt: inputs of dtype `in`, results of dtype `out`, sizes M, N, K and the
** addresses of every operand and result (0 entries are ignored).  *why says
** what ruled it out (a static string), for the tests and NABLA_CUDA_SYNC logs. */
static inline bool ncl_lt_ok(nt_DType in, nt_DType out, int64_t M, int64_t N, int64_t K, const uintptr_t *ptrs, int nptr,
                             const char **why) {
  const char *w = NULL;
  int ei = ncl_size(in), eo = ncl_size(out);
  if (!ei || !eo) w = "dtype without a cuBLASLt path";
  else if (out != in && !(ei == 2 && out == NT_F32)) w = "output dtype neither the input's nor f32";
  else if (M < 1 || N < 1 || K < 1) w = "empty dimension";
  else if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) w = "dimension of 2^31 or more";
  else if ((K * ei) % 16 || (N * ei) % 16 || (K * eo) % 16 || (N * eo) % 16) w = "leading dimension not a multiple of 16 bytes";
  else
    for (int i = 0; i < nptr; i++)
      if (ptrs[i] && ncl_align(ptrs[i]) < 16) { w = "pointer not 16-byte aligned"; break; }
  if (why) *why = w;
  return w == NULL;
}

#endif
