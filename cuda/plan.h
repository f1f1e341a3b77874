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

/* ---- reduction launch geometry (cuda/reduce.cu) -------------------------------------
** The input is an [M kept] x [R reduced] matrix.  Two shapes of launch:
**
** Columns (the reduced axis is strided, the kept one runs along memory: the
** bias gradient, x[8,1024,N] summed to [N], is M = N columns of R = 8192
** rows).  A block is a 2-D tile: block_x threads across columns, each
** reading `vec` neighbouring columns with one 16-byte load, times block_y
** threads down the rows; the rows are split over grid_y blocks, each
** writing a partial per column, and a second pass sums the grid_y partials.
** grid_y is the smallest that gives at least NCP_BLOCKS_PER_SM blocks per SM
** and at most NCP_MAX_LOADS serial loads per thread (but never fewer than one
** row per thread, at most 65535).
**
** Rows (the reduced axis is contiguous: last-axis and full reductions).  A
** block of `threads` per output row; each thread reads `vec` elements per
** 16-byte load into that many independent accumulators.  When the M rows are
** too few to fill the GPU (a full reduction is M = 1), each row is split over
** nsplit blocks writing partials, combined by a second tiny kernel; nsplit
** also bounds the serial loads per thread by NCP_MAX_LOADS where it can. */
#define NCP_BLOCKS_PER_SM 2
#define NCP_MAX_LOADS 64
#define NCP_RED_THREADS 256
typedef struct ncp_ColPlan {
  int vec, block_x, block_y;     /* vec: columns per thread (one 16-byte load, or 1) */
  int64_t grid_x, grid_y;        /* column tiles x row slices */
  int64_t rows_per_block;        /* rows of one slice (the last may be shorter) */
  int64_t loads_per_thread;      /* serial loads of one thread: ceil(rows_per_block / block_y) */
} ncp_ColPlan;
NCP_INLINE int64_t ncp_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
NCP_INLINE ncp_ColPlan ncp_col_plan(int64_t M, int64_t R, int vec, int num_sms) {
  ncp_ColPlan p;
  if (M < 1) M = 1;
  if (R < 1) R = 1;
  if (num_sms < 1) num_sms = 1;
  p.vec = vec < 1 ? 1 : vec;
  int64_t vcols = ncp_cdiv(M, p.vec);            /* threads needed across the columns */
  p.block_x = 32;
  while (p.block_x > 1 && p.block_x / 2 >= vcols) p.block_x /= 2;
  p.block_y = NCP_RED_THREADS / p.block_x;
  p.grid_x = ncp_cdiv(vcols, p.block_x);
  if (p.grid_x > 2147483647) p.grid_x = 2147483647;  /* grid-stride over tiles beyond */
  int64_t want = ncp_cdiv((int64_t)NCP_BLOCKS_PER_SM * num_sms, p.grid_x);
  int64_t by_loads = ncp_cdiv(R, (int64_t)p.block_y * NCP_MAX_LOADS);
  int64_t gy = want > by_loads ? want : by_loads;
  int64_t most = ncp_cdiv(R, p.block_y);          /* at least one row per thread */
  if (gy > most) gy = most;
  if (gy > 65535) gy = 65535;
  if (gy < 1) gy = 1;
  p.rows_per_block = ncp_cdiv(R, gy);
  p.grid_y = ncp_cdiv(R, p.rows_per_block);       /* no empty slice */
  p.loads_per_thread = ncp_cdiv(p.rows_per_block, p.block_y);
  return p;
}
typedef struct ncp_RowPlan {
  int vec, threads;
  int64_t grid_x, nsplit;        /* rows (grid-stride beyond grid_x) x slices of a row */
  int64_t chunk;                 /* elements of one slice, a multiple of vec (the last may be shorter) */
  int64_t loads_per_thread;      /* ceil(chunk / (threads * vec)) */
} ncp_RowPlan;
NCP_INLINE ncp_RowPlan ncp_row_plan(int64_t M, int64_t R, int vec, int num_sms) {
  ncp_RowPlan p;
  if (M < 1) M = 1;
  if (R < 1) R = 1;
  if (num_sms < 1) num_sms = 1;
  p.vec = vec < 1 ? 1 : vec;
  p.threads = NCP_RED_THREADS;
  p.grid_x = M < 65535 * 16 ? M : 65535 * 16;
  int64_t per_block = (int64_t)p.threads * p.vec;  /* elements one pass of a block reads */
  int64_t ns = 1;
  int64_t want = (int64_t)NCP_BLOCKS_PER_SM * num_sms;
  if (M < want && R >= 4 * per_block) {            /* too few rows: split them, 4 loads a thread at least */
    ns = ncp_cdiv(want, M);
    int64_t most = R / (4 * per_block);
    if (ns > most) ns = most;
  }
  if (M == 1 || M * ns < want) {                   /* a long row: bound the serial loads too */
    int64_t by_loads = ncp_cdiv(R, per_block * NCP_MAX_LOADS);
    if (ns < by_loads) ns = by_loads;
  }
  if (ns > 65535) ns = 65535;
  if (ns < 1) ns = 1;
  p.chunk = ncp_cdiv(ncp_cdiv(R, ns), p.vec) * p.vec;
  p.nsplit = ncp_cdiv(R, p.chunk);
  p.loads_per_thread = ncp_cdiv(p.chunk, per_block);
  return p;
}

/* ---- division by a run-time constant without a division --------------------------
** The strided kernels split a linear index into coordinates, one divide per
** dim per element; a 32-bit integer division is a ~20-instruction sequence
** on the GPU.  Dividing by d known at launch is a multiply-high, an add and a
** shift (Granlund & Montgomery; PyTorch's IntDivider does the same): with
** s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1 (fits 32 bits),
**     n / d = (mulhi(n, m) + n) >> s      for every n < 2^31,
** which the 32-bit launches guarantee (ncp_index32_ok).  d = 1: s = 0, m = 1.
** tests/cuda/test_cuda_plan checks it against '/' at the edges and at random. */
#if defined(__CUDACC__)
#define NCP_HD static inline __host__ __device__
#else
#define NCP_HD static inline
#endif
typedef struct ncp_Div32 { uint32_t d, m, s; } ncp_Div32;
NCP_HD ncp_Div32 ncp_div32_make(uint32_t d) {
  ncp_Div32 v;
  v.d = d ? d : 1;                       /* a zero-size dim has no index to divide */
  v.s = 0;
  while (v.s < 32 && ((uint64_t)1 << v.s) < v.d) v.s++;
  v.m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << v.s) - v.d)) / v.d + 1);
  return v;
}
NCP_HD uint32_t ncp_div32(ncp_Div32 v, uint32_t n) {   /* n / v.d for n < 2^31 */
  uint32_t t = (uint32_t)(((uint64_t)n * v.m) >> 32);
  return (t + n) >> v.s;
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
