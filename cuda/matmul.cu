// matmul.cu — (batched) matmul through cuBLAS; an integer fallback kernel.
//
// Front end (tensor/tmatmul.c): out [B.., M, N] fresh contiguous, a [B.., M, K],
// b [B.., K, N] with broadcast batch dims (stride 0 allowed), same dtype.
//
// cuBLAS is column-major.  A row-major R x C matrix with row stride ld (and
// unit column stride) IS the column-major C x R matrix (its transpose) with
// leading dimension ld.  So row-major C = A B is computed as the column-major
//     C^T (N x M) = B^T (N x K) * A^T (K x M)
// i.e. cublas(m = N, n = M, k = K, "A" = b, "B" = a).  An operand whose
// COLUMN stride is 1 is passed as is (op N, ld = row stride); one whose ROW
// stride is 1 (a transposed view, x.T) is passed with op T (ld = column
// stride): x.T @ y never copies.  Anything else is packed first.
// Batches (the plan is cuda/plan.h's ncp_gemm_plan, unit-tested on the CPU):
// a batched a times a shared b (x[B,T,K] @ w[K,N]) is ONE cublasGemmEx over
// [B*T, K] rows; when every batch dim of a (and of b) collapses to one stride
// (0 for a broadcast operand), one cublasGemmStridedBatchedEx call does all;
// otherwise one cublasGemmEx per batch matrix.
// Handles: this file makes the module's cuBLAS handles (its own and
// attention_gemm.cu's) at init, each with a workspace from the caching
// allocator (cublasSetWorkspace: cuBLAS would otherwise cudaMalloc its own,
// outside the cache and its out-of-memory retry); a create or workspace
// failure empties the cache and retries once.
// Precision: f32 uses CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 (tensor
// cores, 10-bit mantissa products) after nt_set_matmul_precision("high");
// f16/bf16 read and write 16-bit data and accumulate in f32; f64 uses 64F.
#include "common.cuh"
#include "cuda/plan.h"
#include <cublas_v2.h>
#include <type_traits>
#include <memory>

namespace ncu {

const char *cublas_status_str(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_MAPPING_ERROR: return "mapping error";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "unknown status";
  }
}

int gemm_issued(const char *op);   // below

namespace {

cublasHandle_t handle;

#define CUBLAS(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    host->error_set("matmul: cuBLAS error in %s: %s (%d); last op launched: %s", #call, cublas_status_str(s_), (int)s_, last_op); \
    return -1; } } while (0)

struct Operand {            // one matrix operand as cuBLAS sees it
  const char *p;            // element [0,0] of the first batch matrix
  cublasOperation_t op;
  int64_t ld;
  int64_t batch_stride;     // elements; valid when batched_ok
};

// element offset of batch bi in t (batch dims row-major over bshape)
int64_t batch_offset(const nt_Tensor *t, const int64_t *bshape, int nb, int64_t bi) {
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; d--) { int64_t i = bi % bshape[d]; bi /= bshape[d]; off += i * t->strides[d]; }
  return off;
}

// Integer matmul: one thread per output element (rare; not performance critical).
template <typename T>
__global__ void int_matmul(int64_t nbatch, int64_t M, int64_t N, int64_t K, T *c, const T *a, const T *b,
                           Geom ga, Geom gb, int64_t ars, int64_t acs, int64_t brs, int64_t bcs) {
  int64_t total = nbatch * M * N;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t j = e % N, i = (e / N) % M, bi = e / (M * N);
    const T *pa = a + ga.offset_of(0, bi) + i * ars, *pb = b + gb.offset_of(0, bi) + j * bcs;
    T acc = 0;
    for (int64_t k = 0; k < K; k++) acc = (T)(acc + pa[k * acs] * pb[k * brs]);
    c[e] = acc;
  }
}

int k_matmul(const nt_KernelArgs *ka) {
  nt_Tensor *out = ka->out, *a = ka->in[0], *b = ka->in[1];
  nt_DType dt = out->dtype;
  int nd = out->ndim, nb = nd - 2;
  int64_t M = out->shape[nd - 2], N = out->shape[nd - 1], K = a->shape[nd - 1];
  int64_t nbatch = 1;
  for (int i = 0; i < nb; i++) nbatch *= out->shape[i];
  size_t es = nt_dtype_size(dt);
  if (out->numel == 0) return 0;
  if (K == 0) {
    CU(cudaMemsetAsync(base(out), 0, (size_t)out->numel * es, stream));
    last_op = "matmul";
    return 0;
  }
  if (!nt_dtype_is_float(dt)) {
    // batch geometry as one-operand Geoms over the batch shape
    Geom ga, gb;
    ga.nop = gb.nop = 1; ga.ndim = gb.ndim = nb > 0 ? nb : 1;
    for (int d = 0; d < nb; d++) { ga.shape[d] = gb.shape[d] = out->shape[d]; ga.stride[0][d] = a->strides[d]; gb.stride[0][d] = b->strides[d]; }
    if (nb == 0) { ga.shape[0] = gb.shape[0] = 1; ga.stride[0][0] = gb.stride[0][0] = 0; }
    int64_t ars = a->strides[nd - 2], acs = a->strides[nd - 1], brs = b->strides[nd - 2], bcs = b->strides[nd - 1];
    int64_t total = nbatch * M * N;
    switch (dt) {
#define INT_MM(E, T) case E: int_matmul<T><<<grid_for(total), kThreads, 0, stream>>>(nbatch, M, N, K, (T *)base(out), \
        (const T *)base(a), (const T *)base(b), ga, gb, ars, acs, brs, bcs); break;
      INT_MM(NT_I32, int32_t) INT_MM(NT_I64, int64_t) INT_MM(NT_U8, uint8_t)
#undef INT_MM
      default: host->error_set("matmul: not supported for dtype %s on cuda", nt_dtype_name(dt)); return -1;
    }
    LAUNCHED("matmul");
    return 0;
  }
  cudaDataType_t ctype;
  cublasComputeType_t comp;
  float alpha_f = 1, beta_f = 0;
  double alpha_d = 1, beta_d = 0;
  const void *alpha = &alpha_f, *beta = &beta_f;
  switch (dt) {
    case NT_F32: ctype = CUDA_R_32F; comp = *host->matmul_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; break;
    case NT_F64: ctype = CUDA_R_64F; comp = CUBLAS_COMPUTE_64F; alpha = &alpha_d; beta = &beta_d; break;
    case NT_F16: ctype = CUDA_R_16F; comp = CUBLAS_COMPUTE_32F; break;
    case NT_BF16: ctype = CUDA_R_16BF; comp = CUBLAS_COMPUTE_32F; break;
    default: host->error_set("matmul: not supported for dtype %s on cuda", nt_dtype_name(dt)); return -1;
  }
  // the plan; operands cuBLAS cannot take as they are are packed first
  // (scratch freed on every return path), then the plan is made again
  nt_Tensor *ops[2] = { a, b };
  const int64_t rows[2] = { M, K }, cols[2] = { K, N };
  std::unique_ptr<Scratch> packed[2];
  nt_Tensor packv[2];
  nt_Storage packst[2];
  const int64_t *bshape = out->shape;
  ncp_GemmPlan pl = ncp_gemm_plan(nd, bshape, M, N, K, a->strides, b->strides);
  const int pack[2] = { pl.pack_a, pl.pack_b };
  for (int k = 0; k < 2; k++) {
    if (!pack[k]) continue;
    // contiguous copy [B.., R, C] through the copy kernel
    nt_Tensor *t = ops[k];
    packed[k].reset(new Scratch((size_t)nbatch * rows[k] * cols[k] * es));
    if (!packed[k]->p) return -1;
    nt_Tensor *v = &packv[k];
    *v = *t;
    packst[k] = *t->storage;
    packst[k].data = packed[k]->p;
    v->storage = &packst[k]; v->offset = 0;
    for (int d = 0; d < nb; d++) v->shape[d] = bshape[d];
    v->shape[nd - 2] = rows[k]; v->shape[nd - 1] = cols[k];
    nt_contig_strides(v->shape, nd, v->strides);
    nt_update_meta(v);
    if (copy_into(v, t)) return -1;
    ops[k] = v;
  }
  if (pack[0] || pack[1]) pl = ncp_gemm_plan(nd, bshape, M, N, K, ops[0]->strides, ops[1]->strides);
  if (pl.m > INT32_MAX || N > INT32_MAX || K > INT32_MAX || nbatch > INT32_MAX) {
    host->error_set("matmul: dimensions of 2^31 and more are not supported on cuda");
    return -1;
  }
  const char *pa0 = base(ops[0]), *pb0 = base(ops[1]);
  const cublasOperation_t oa = pl.a.op == NCP_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N, ob = pl.b.op == NCP_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  // column-major: C^T = B^T A^T  → cuBLAS "A" := b (op(b) is N x K), cuBLAS "B" := a
  if (pl.kind == NCP_GEMM_ONE)
    CUBLAS(cublasGemmEx(handle, ob, oa, (int)N, (int)pl.m, (int)K, alpha, pb0, ctype, (int)pl.b.ld,
                        pa0, ctype, (int)pl.a.ld, beta, base(out), ctype, (int)N, comp, CUBLAS_GEMM_DEFAULT));
  else if (pl.kind == NCP_GEMM_STRIDED)
    CUBLAS(cublasGemmStridedBatchedEx(handle, ob, oa, (int)N, (int)M, (int)K, alpha,
                                      pb0, ctype, (int)pl.b.ld, pl.b.bstride, pa0, ctype, (int)pl.a.ld, pl.a.bstride,
                                      beta, base(out), ctype, (int)N, M * N, (int)nbatch, comp, CUBLAS_GEMM_DEFAULT));
  else
    for (int64_t bi = 0; bi < nbatch; bi++) {
      const char *pa = pa0 + batch_offset(ops[0], bshape, nb, bi) * (int64_t)es;
      const char *pb = pb0 + batch_offset(ops[1], bshape, nb, bi) * (int64_t)es;
      char *pc = base(out) + bi * M * N * (int64_t)es;
      CUBLAS(cublasGemmEx(handle, ob, oa, (int)N, (int)M, (int)K, alpha, pb, ctype, (int)pl.b.ld,
                          pa, ctype, (int)pl.a.ld, beta, pc, ctype, (int)N, comp, CUBLAS_GEMM_DEFAULT));
    }
  if (gemm_issued("matmul")) return -1;   // under NABLA_CUDA_SYNC=1 waits, so a cuBLAS fault names it
  return 0;
}

}  // namespace

// The check after a cuBLAS / cuBLASLt GEMM call, in place of LAUNCHED: the call is
// counted once, as a GEMM, by common.cuh's wrapper (LAUNCHED would count it a second
// time, as a kernel launch: the "2 GPU operations per GEMM" of issue 26).  Like
// launched(): a pending CUDA error is reported (an earlier kernel's sticky fault as
// such, by cuda_fail), op becomes the last op launched, and under NABLA_CUDA_SYNC=1
// the stream is waited for, so a fault names it.  0, or -1 with the error set.
int gemm_issued(const char *op) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_fail(e, op, __FILE__, __LINE__);
  last_op = op;
  return host->sync_launches ? sync_stream() : 0;
}

// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] + beta C, `batch` times (element
// strides sA/sB/sC between batch matrices; 0 = the same matrix), f32 or f64,
// alpha 1, on ncu::stream.  ta/tb: the operand is stored transposed ([K,M] /
// [N,K] with row stride lda/ldb).  Column-major view as in k_matmul above:
// C^T = op(B)^T op(A)^T, so cuBLAS gets (b, a) with the same transpose flags.
// K == 0: C = beta C (explicit memset when beta == 0).  f32 honours the
// matmul-precision flag (TF32 after set_matmul_precision("high")).
int gemm_rowmajor(nt_DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int64_t sA,
                  const void *B, int64_t ldb, int64_t sB, double beta, void *C, int64_t ldc, int64_t sC, int64_t batch,
                  const char *opname) {
  if (M == 0 || N == 0 || batch == 0) return 0;
  size_t es = nt_dtype_size(dt);
  if (K == 0) {
    if (beta != 0) return 0;
    for (int64_t b = 0; b < batch; b++)
      CU(cudaMemset2DAsync((char *)C + b * sC * (int64_t)es, (size_t)ldc * es, 0, (size_t)N * es, (size_t)M, stream));
    last_op = opname;
    return 0;
  }
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX || batch > INT32_MAX) {
    host->error_set("%s: matrix dimensions of 2^31 and more are not supported on cuda", opname);
    return -1;
  }
  float alpha_f = 1, beta_f = (float)beta;
  double alpha_d = 1, beta_d = beta;
  const void *alpha = &alpha_f, *bet = &beta_f;
  cudaDataType_t ctype;
  cublasComputeType_t comp;
  if (dt == NT_F32) { ctype = CUDA_R_32F; comp = *host->matmul_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; }
  else if (dt == NT_F64) { ctype = CUDA_R_64F; comp = CUBLAS_COMPUTE_64F; alpha = &alpha_d; bet = &beta_d; }
  else { host->error_set("%s: gemm is not supported for dtype %s on cuda", opname, nt_dtype_name(dt)); return -1; }
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t s;
  if (batch == 1)
    s = cublasGemmEx(handle, ob, oa, (int)N, (int)M, (int)K, alpha, B, ctype, (int)ldb, A, ctype, (int)lda, bet, C, ctype,
                     (int)ldc, comp, CUBLAS_GEMM_DEFAULT);
  else
    s = cublasGemmStridedBatchedEx(handle, ob, oa, (int)N, (int)M, (int)K, alpha, B, ctype, (int)ldb, sB, A, ctype, (int)lda,
                                   sA, bet, C, ctype, (int)ldc, sC, (int)batch, comp, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    host->error_set("%s: cuBLAS error in gemm: %s (%d); last op launched: %s", opname, cublas_status_str(s), (int)s, last_op);
    return -1;
  }
  if (gemm_issued(opname)) return -1;
  return 0;
}

// ---- handles --------------------------------------------------------------------------------
namespace {

// cuBLAS workspace per handle: what cuBLAS itself would cudaMalloc (PyTorch's
// default CUBLAS_WORKSPACE_CONFIG: 32 MiB on Hopper, 4 MiB + 8 x 16 KiB before).
size_t workspace_bytes(void) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) { cudaGetLastError(); major = 0; }
  return major >= 9 ? (size_t)32 << 20 : ((size_t)4 << 20) + 8 * ((size_t)16 << 10);
}

int try_handle(cublasHandle_t *out, void **ws, cublasStatus_t *why) {
  cublasHandle_t h = nullptr;
  cublasStatus_t s = cublasCreate(&h);
  size_t n = workspace_bytes();
  void *w = nullptr;
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(h, stream);
  if (s == CUBLAS_STATUS_SUCCESS) {
    w = dev_alloc(n);
    s = w ? cublasSetWorkspace(h, w, n) : CUBLAS_STATUS_ALLOC_FAILED;
  }
  *why = s;
  if (s == CUBLAS_STATUS_SUCCESS) { *out = h; *ws = w; return 0; }
  if (h) cublasDestroy(h);
  if (w) dev_free(w);
  return -1;
}

}  // namespace

// A cuBLAS handle on ncu::stream with a workspace from the caching allocator;
// after a failure the cache is emptied and the creation tried once more.
// 0, or -1 with "<what>: ..." set.  The handle lives as long as the process.
int cublas_handle_new(cublasHandle_t *out, const char *what) {
  void *ws = nullptr;
  cublasStatus_t s;
  if (try_handle(out, &ws, &s) == 0) return 0;
  if (sync_stream() == 0) alloc_empty_cache();      // blocks in use must be idle before their segments go
  if (try_handle(out, &ws, &s) == 0) return 0;
  host->error_set("%s: creating a cuBLAS handle with a %zu-byte workspace failed even after emptying the cache: %s (%d)", what,
                  workspace_bytes(), cublas_status_str(s), (int)s);
  return -1;
}

// matmul's handle, for linear.cu's classic path (cuBLASLt declined)
cublasHandle_t matmul_cublas_handle(void) { return handle; }

int register_linear(void);   // linear.cu: its cuBLASLt handle, "linear" and "linear_backward"

int register_matmul(void) {
  if (cublas_handle_new(&handle, "matmul")) return -1;
  host->register_kernel(NT_OP_MATMUL, NT_CUDA, k_matmul);
  return register_linear();
}

}  // namespace ncu
