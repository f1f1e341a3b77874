/*
** plan.h — the pure host-side decisions of the CUDA module: which cuBLAS call
** a matmul becomes, whether a strided launch may use 32-bit index math, and
** the wording of CUDA error reports.  No CUDA headers and no state: valid C11
** and C++, so tests/cuda/test_cuda_plan.c checks every rule on a machine
** without a GPU while the module (matmul.cu, elementwise.cu, module.cu) runs
** the same code.
*/
#ifndef NCU_PLAN_H
#define NCU_PLAN_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

#define NCP_INLINE static inline

/* ---- GEMM plans --------------------------------------------------------------
** out[B.., M, N] (fresh, contiguous) = a[B.., M, K] @ b[B.., K, N]; the batch
** shape is out's, a and b may broadcast batch dims (stride 0).  cuBLAS is
** column-major: a row-major R x C matrix with unit column stride and row
** stride ld is the column-major C x R matrix (op N, leading dim ld); one with
** unit ROW stride (a transposed view) is passed with op T (ld = column stride).
** Plans, cheapest first:
**   NCP_GEMM_ONE      one cublasGemmEx (no batch, or batch folded into rows:
**                     a's batch dims and rows form one progression of row
**                     stride — x[B,T,K] @ w[K,N] is [B*T,K] @ [K,N] — while
**                     b is the same matrix for every batch, stride 0);
**   NCP_GEMM_STRIDED  one cublasGemmStridedBatchedEx: every batch dim of a
**                     (and of b) is one arithmetic progression of stride
**                     sa (sb), 0 for a broadcast operand;
**   NCP_GEMM_LOOP     one cublasGemmEx per batch matrix (batch strides that
**                     collapse to no single progression, e.g. a permuted view
**                     of a permuted view).  Counted: the tests pin which
**                     shapes may take it.
** An operand cuBLAS cannot read in place (neither unit stride) is packed
** first (pack_a / pack_b), and the plan is made again on the packed copy. */
enum { NCP_GEMM_ONE = 0, NCP_GEMM_STRIDED = 1, NCP_GEMM_LOOP = 2 };
enum { NCP_OP_N = 0, NCP_OP_T = 1 };
#define NCP_MAXDIM 8

typedef struct ncp_Operand {
  int op;                /* NCP_OP_N / NCP_OP_T */
  int64_t ld;            /* leading dimension for cuBLAS */
  int64_t bstride;       /* batch stride in elements (STRIDED) */
} ncp_Operand;

typedef struct ncp_GemmPlan {
  int kind;              /* NCP_GEMM_* */
  int pack_a, pack_b;    /* the operand must be copied contiguous first */
  int64_t m, n, k;       /* row-major sizes of the GEMM(s) cuBLAS runs (m = rows of out) */
  int64_t batch;         /* matrices (1 for ONE) */
  ncp_Operand a, b;
} ncp_GemmPlan;

/* op/ld of a row-major R x C matrix with strides (rs, cs); 0 if it must be packed */
NCP_INLINE int ncp_layout(int64_t R, int64_t C, int64_t rs, int64_t cs, int *op, int64_t *ld) {
  if (C == 1) cs = 1;
  if (R == 1) rs = C > 1 ? C : 1;
  if (cs == 1 && rs >= (C > 1 ? C : 1)) { *op = NCP_OP_N; *ld = rs; return 1; }
  if (rs == 1 && cs >= (R > 1 ? R : 1)) { *op = NCP_OP_T; *ld = cs; return 1; }
  return 0;
}

/* 1 when batch dims [0, nb) (sizes bshape, strides st) are one arithmetic
** progression: *s its stride (0 when every dim is broadcast or of size 1) */
NCP_INLINE int ncp_batch_uniform(const int64_t *bshape, const int64_t *st, int nb, int64_t *s) {
  int64_t stride = 0, expect = -1;
  int first = 1;
  for (int d = nb - 1; d >= 0; d--) {
    if (bshape[d] == 1) continue;
    if (first) { stride = st[d]; expect = stride * bshape[d]; first = 0; continue; }
    if (st[d] != expect) return 0;
    expect = st[d] * bshape[d];
  }
  *s = stride;
  return 1;
}

/* The plan for out[bshape.., M, N] = a @ b.  nd = out's ndim (>= 2); as/bs
** are a's and b's strides over out's dims (batch dims broadcast to out's
** shape, so a broadcast dim has stride 0). */
NCP_INLINE ncp_GemmPlan ncp_gemm_plan(int nd, const int64_t *bshape, int64_t M, int64_t N, int64_t K,
                                      const int64_t *as, const int64_t *bs) {
  ncp_GemmPlan p;
  int nb = nd - 2;
  int64_t nbatch = 1;
  for (int d = 0; d < nb; d++) nbatch *= bshape[d];
  p.m = M; p.n = N; p.k = K; p.batch = nbatch;
  p.a.bstride = p.b.bstride = 0;
  p.pack_a = !ncp_layout(M, K, as[nd - 2], as[nd - 1], &p.a.op, &p.a.ld) || p.a.ld > INT32_MAX;
  p.pack_b = !ncp_layout(K, N, bs[nd - 2], bs[nd - 1], &p.b.op, &p.b.ld) || p.b.ld > INT32_MAX;
  p.kind = NCP_GEMM_ONE;
  if (p.pack_a || p.pack_b || nbatch == 1) return p;
  int64_t sa = 0, sb = 0;
  int ua = ncp_batch_uniform(bshape, as, nb, &sa), ub = ncp_batch_uniform(bshape, bs, nb, &sb);
  /* fold a's batch into its rows: b shared (stride 0), a untransposed with
  ** its batch progression continuing its rows (batch stride = M * row stride;
  ** out is contiguous, so its rows continue the same way) */
  if (ua && ub && sb == 0 && p.a.op == NCP_OP_N && (M == 1 ? sa >= K : sa == M * p.a.ld) && sa <= INT32_MAX &&
      M * nbatch <= INT32_MAX) {
    if (M == 1) p.a.ld = sa;   /* one row per batch: the batch stride is the row stride */
    p.m = M * nbatch;
    p.batch = 1;
    return p;
  }
  if (ua && ub) { p.kind = NCP_GEMM_STRIDED; p.a.bstride = sa; p.b.bstride = sb; return p; }
  p.kind = NCP_GEMM_LOOP;
  return p;
}

/* ---- 32-bit index math for strided launches ------------------------------------
** A strided kernel maps a row-major linear index i < n to each operand's
** element offset (one division per dim).  32-bit division is several times
** cheaper than 64-bit on the GPU; it is exact when n and every operand's
** largest offset, sum((shape[d] - 1) * |stride[d]|), stay below 2^31 (then
** every partial offset and i + grid stride fit an unsigned 32-bit index). */
NCP_INLINE int ncp_index32_ok(int64_t n, int ndim, const int64_t *shape, const int64_t (*strides)[NCP_MAXDIM], int nop) {
  const int64_t lim = INT32_MAX;
  if (n < 0 || n > lim) return 0;
  for (int k = 0; k < nop; k++) {
    int64_t off = 0;
    for (int d = 0; d < ndim; d++) {
      int64_t s = strides[k][d] < 0 ? -strides[k][d] : strides[k][d];
      if (shape[d] <= 1) continue;
      if (s > lim || (shape[d] - 1) > lim / (s ? s : 1)) return 0;
      off += (shape[d] - 1) * s;
      if (off > lim) return 0;
    }
  }
  return 1;
}

/* ---- CUDA error reports ------------------------------------------------------------
** A "sticky" error (illegal address, a failed device assert, ...) poisons the
** CUDA context: every later call fails with it, so it is reported once with
** what it means for the user.  Where it surfaced:
**   NCP_AT_LAUNCH  the check right after launching `op`: without
**                  NABLA_CUDA_SYNC the fault belongs to an EARLIER kernel
**                  (`before` = the op launched before `op`); with it every
**                  launch is waited for, so the fault is op's own;
**   NCP_AT_SYNC    a synchronisation (or a copy to the host, a CUDA call):
**                  `before` = the op launched last.
** A non-sticky error at a launch is op's own (a bad launch configuration). */
enum { NCP_AT_LAUNCH = 0, NCP_AT_SYNC = 1 };
#define NCP_RESTART_ADVICE \
  "the CUDA context is now unusable (every later GPU op fails with this error): the session must restart its GPU work " \
  "(restart the process, or the dist workers)"

NCP_INLINE void ncp_cuda_error_text(char *buf, size_t n, const char *name, const char *text, int sticky, int sync_mode,
                                    int where, const char *op, const char *before) {
  if (!sticky) {
    if (where == NCP_AT_LAUNCH) snprintf(buf, n, "%s: CUDA error launching its kernel: %s (%s)", op, text, name);
    else snprintf(buf, n, "CUDA error: %s (%s); last op launched: %s", text, name, before);
    return;
  }
  if (sync_mode && where == NCP_AT_LAUNCH)
    snprintf(buf, n, "CUDA error: %s (%s), raised by the kernel of %s (NABLA_CUDA_SYNC=1 waits for every launch); " NCP_RESTART_ADVICE,
             text, name, op);
  else if (sync_mode)
    snprintf(buf, n, "CUDA error: %s (%s), raised by GPU work queued after %s (NABLA_CUDA_SYNC=1); " NCP_RESTART_ADVICE, text, name, before);
  else if (where == NCP_AT_LAUNCH)
    snprintf(buf, n, "CUDA error: %s (%s), raised asynchronously by a kernel launched BEFORE %s (last op launched before it: %s; "
             "run with NABLA_CUDA_SYNC=1 to find the op that faulted); " NCP_RESTART_ADVICE, text, name, op, before);
  else
    snprintf(buf, n, "CUDA error: %s (%s), raised asynchronously by a kernel; last op launched: %s "
             "(run with NABLA_CUDA_SYNC=1 to find the op that faulted); " NCP_RESTART_ADVICE, text, name, before);
}

#endif
