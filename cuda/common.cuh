// common.cuh — shared by every source of the CUDA backend module (nabla_cuda.so).
//
// The module never calls the core directly: everything goes through the
// nt_HostApi table the loader (tensor/tdevice.c) passes to nabla_cuda_init,
// kept in `ncu::host`.  All compute is queued on ONE stream per process
// (ncu::stream; NCCL collectives run on their communicators' own streams,
// ordered against it with events: nccl.cu); the host only waits when it
// needs values (device→host copies, nt_cuda_synchronize).
//
// Error handling rules for every source file:
//   * every CUDA / cuBLAS call is checked: CU(call) / CUBLAS(call) set the
//     core's error message ("<op>: CUDA error: ...") and return -1;
//   * after every kernel launch, LAUNCHED(op) checks the launch and records
//     the op's name.  A context-poisoning ("sticky") error found there came
//     from an EARLIER kernel: it is reported as such (naming the op launched
//     before), never blamed on this op; NABLA_CUDA_SYNC=1 (parsed by the
//     loader, host->sync_launches) makes LAUNCHED wait for every launch, so
//     a fault names the op whose kernel raised it;
//   * every entry point from the core (kernels, allocator, device API) first
//     binds this module's device on the calling thread (bind_device: worker
//     threads never ran cudaSetDevice) and never lets a C++ exception out
//     (guarded(): std::bad_alloc from the allocator's containers becomes an
//     error, not an abort in C code);
//   * every GPU operation and host wait is counted (cuda.stats(), the
//     "Counters" section below): kernel launches by LAUNCHED, GEMMs, copies,
//     memsets and synchronisations by the counted wrappers this header puts
//     in front of the CUDA/cuBLAS/cuBLASLt calls.  Nothing to do by hand:
//     write the call as usual (cudaMemcpyAsync(...), cublasLtMatmul(...))
//     after including this header and it is counted;
//   * data-dependent errors found ON the device (index out of range, integer
//     division by zero) are written to the error slot (DevError, in mapped
//     host memory) and reported at the next synchronisation, naming the op.
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <stdint.h>
#include <stddef.h>

extern "C" {
#include "tensor/tbackend.h"
#include "tensor/tdevice.h"
}
#include "cuda/plan.h"

namespace ncu {

extern const nt_HostApi *host;
extern cudaStream_t stream;
extern int num_sms;
extern const char *last_op;           // name of the op whose kernel was launched last
extern int device;                    // the device this module uses (NABLA_CUDA_DEVICE)

// ---- error slot ------------------------------------------------------------------
// First device-side error wins (atomicCAS on code).  Lives in pinned, mapped
// host memory: kernels write it through dev_err, the host reads it after a sync.
enum { DEVERR_NONE = 0, DEVERR_INDEX = 1, DEVERR_ZERODIV = 2, DEVERR_TARGET = 3 };
struct DevError {
  int code, op;                         // op id of the kernel that hit it
  long long a, b, c;                    // index, size, axis / row ...
};
extern DevError *dev_err;               // device-visible pointer to the slot

__device__ inline void raise_error(DevError *e, int code, int op, long long a, long long b, long long c) {
  if (atomicCAS(&e->code, 0, code) == 0) { e->op = op; e->a = a; e->b = b; e->c = c; }
}

// ---- counters (cuda.stats(), tensor/tdevice.h nt_CudaStats) ----------------------------
// Counted here, inside the module, so the numbers are the same on a GPU and
// on the emulated device.  One counter per field of nt_CudaStats, in its
// order.  "GPU operations" (launches, GEMMs, copies, memsets) also count
// towards by_op[current_op]: the op whose kernel is running on this thread
// (set by module.cu's kernel trampoline; NT_OP_TABLE_SIZE outside any op,
// e.g. the core's copies between host and device).
enum Counter { C_LAUNCHES, C_GEMMS, C_H2D, C_D2H, C_D2D, C_MEMSETS, C_SYNCS, C_MALLOCS, C_FREES, C_ALLOC_REQUESTS, C_NCOUNTERS };
void count(Counter c);                  // +1 (relaxed atomics: any thread)
void count_copy(cudaMemcpyKind k);      // the copy counter of kind k (+ a sync for a blocking cudaMemcpy: see below)
int  stats_read(nt_CudaStats *out);     // the nt_DeviceApi entries
void stats_reset(void);
extern thread_local int current_op;     // op id whose kernel runs on this thread, or NT_OP_TABLE_SIZE

// ---- checking macros (host) --------------------------------------------------------
int cuda_fail(cudaError_t e, const char *what, const char *file, int line);
#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return ncu::cuda_fail(e_, #call, __FILE__, __LINE__); } while (0)
// 0 after a good launch of op's kernel(s); -1 with the error set (see the rules above).
int launched(const char *op);
#define LAUNCHED(opname) do { if (ncu::launched(opname)) return -1; } while (0)
// Waits for the stream; reports a CUDA fault or the error slot as the core's error.
int sync_stream(void);
// cudaSetDevice(device) once per thread; 0 or -1 with the error set.
int bind_device(void);
// Runs f() (returning int) and turns a C++ exception into -1 + "<what>: ...".
int exception_to_error(const char *what);   // call only inside a catch block
template <typename F> int guarded(const char *what, F f) {
  try { return f(); } catch (...) { return exception_to_error(what); }
}

// ---- allocator ------------------------------------------------------------------------
void *dev_alloc(size_t n);              // NULL + error message on failure
void  dev_free(void *p);
void  alloc_stats(size_t *allocated, size_t *cached, size_t *peak);
int   alloc_empty_cache(void);
int   alloc_init(void);
// Scratch buffer freed when the object goes out of scope (stream-ordered reuse is safe).
struct Scratch {
  void *p = nullptr;
  explicit Scratch(size_t n) { p = dev_alloc(n ? n : 1); }
  ~Scratch() { if (p) dev_free(p); }
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
};

// ---- launch geometry --------------------------------------------------------------------
constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n, int per_thread = 1) {
  int64_t b = (n + (int64_t)kThreads * per_thread - 1) / ((int64_t)kThreads * per_thread);
  int64_t cap = (int64_t)num_sms * 32;        // grid-stride loops cover the rest
  if (b < 1) b = 1;
  return (unsigned)(b < cap ? b : cap);
}

// ---- strided geometry --------------------------------------------------------------------
// Up to 4 operands of one logical shape, dims coalesced on the host (as by
// nt_iter_init: nt_coalesce_dims, tensor/tpure.c) so most views end up 1-D or 2-D.  Strides in ELEMENTS.
// offset_of(k, i) maps a row-major linear index i to operand k's offset.
constexpr int kMaxOps = 4;
struct Geom {
  int ndim, nop;
  int64_t shape[NT_MAXDIM];
  int64_t stride[kMaxOps][NT_MAXDIM];
  __host__ __device__ inline int64_t offset_of(int k, int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
      int64_t s = shape[d], q = i / s;
      off += (i - q * s) * stride[k][d];
      i = q;
    }
    return off;
  }
  // The same in 32-bit math without a division (plan.h ncp_div32: a
  // multiply-high, an add and a shift per dim with the divisors' magic
  // numbers in div[], filled by prepare32): only for launches where index32()
  // held, so nothing overflows.  with_index_type() prepares them.
  ncp_Div32 div[NT_MAXDIM];
  __host__ __device__ inline int64_t offset_of(int k, uint32_t i) const {
    int32_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
      uint32_t q = ncp_div32(div[d], i);
      off += (int32_t)(i - q * div[d].d) * (int32_t)stride[k][d];
      i = q;
    }
    return off;
  }
  inline void prepare32() { for (int d = 0; d < ndim; d++) div[d] = ncp_div32_make((uint32_t)shape[d]); }
};
static_assert(NCP_MAXDIM == NT_MAXDIM, "plan.h and the tensor core agree on the dims");
// True when a strided launch over n elements of g may use 32-bit index math
// (plan.h's rule: n and every operand's largest offset below 2^31).
inline bool index32(const Geom &g, int64_t n) { return ncp_index32_ok(n, g.ndim, g.shape, g.stride, g.nop); }
// Calls launch(I()) with I = uint32_t when index32(g, n), else int64_t: the
// index type of the strided kernel it launches, chosen per launch.
// The 32-bit path's divisors are prepared here, in g itself (the launch
// lambda reads the same g), so no 32-bit launch can run without them.
template <typename F> inline void with_index_type(Geom &g, int64_t n, F launch) {
  if (index32(g, n)) { g.prepare32(); launch((uint32_t)0); }
  else launch((int64_t)0);
}
// Builds the coalesced geometry of ops[0..nop) over ops[0]'s shape (ops may be
// broadcast views).  contiguous = every operand is dense row-major.
Geom make_geom(int nop, nt_Tensor *const *ops, bool *all_contig);

// Device pointer of element [0,...,0] of t.
inline char *base(const nt_Tensor *t) { return nt_base(t); }   // tensor/textend.h

// ---- warp reductions and f32/f64 math (every lane of a full warp must call these) ----
template <typename A> __device__ inline A warp_sum(A v) {
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}
template <typename A> __device__ inline A warp_max(A v) {   // NaN-blind: callers handle NaN
  for (int d = 16; d > 0; d >>= 1) { A o = __shfl_xor_sync(0xffffffffu, v, d); v = o > v ? o : v; }
  return v;
}
template <typename A> __device__ inline A a_exp(A x) { if constexpr (sizeof(A) == 4) return expf(x); else return exp(x); }
template <typename A> __device__ inline A a_log(A x) { if constexpr (sizeof(A) == 4) return logf(x); else return log(x); }

// ---- dtypes ----------------------------------------------------------------------------------
// Storage type S, compute type C (float for f16/bf16, as on the CPU).
template <typename S> struct Comp { typedef S type; };
template <> struct Comp<__half> { typedef float type; };
template <> struct Comp<__nv_bfloat16> { typedef float type; };
struct b8 { uint8_t v; };                     // bool: one byte 0/1
template <> struct Comp<b8> { typedef uint8_t type; };

template <typename S> __device__ __host__ inline typename Comp<S>::type ld(S x) { return x; }
template <> __device__ inline float ld<__half>(__half x) { return __half2float(x); }
template <> __device__ inline float ld<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __host__ inline uint8_t ld<b8>(b8 x) { return x.v; }

template <typename S> struct St {
  template <typename V> __device__ static inline S from(V v) { return (S)v; }
};
template <> struct St<__half> {
  template <typename V> __device__ static inline __half from(V v) { return __float2half_rn((float)v); }
};
template <> struct St<__nv_bfloat16> {
  template <typename V> __device__ static inline __nv_bfloat16 from(V v) { return __float2bfloat16_rn((float)v); }
};
template <> struct St<b8> {
  template <typename V> __device__ static inline b8 from(V v) { b8 r; r.v = v != (V)0; return r; }
};

// Calls F.template operator()<S>() with S the storage type of dt; -1 for unknown dtypes.
#define NCU_DISPATCH_ALL(dt, F)                                  \
  switch (dt) {                                                  \
    case NT_F32: return F.template operator()<float>();          \
    case NT_F64: return F.template operator()<double>();         \
    case NT_F16: return F.template operator()<__half>();         \
    case NT_BF16: return F.template operator()<__nv_bfloat16>(); \
    case NT_I32: return F.template operator()<int32_t>();        \
    case NT_I64: return F.template operator()<int64_t>();        \
    case NT_U8: return F.template operator()<uint8_t>();         \
    case NT_BOOL: return F.template operator()<ncu::b8>();       \
    default: break;                                              \
  }

// dst = src (same shape, any strides/dtypes) on the stream: the NT_OP_COPY kernel.
int copy_into(nt_Tensor *dst, nt_Tensor *src);

// Row-major (strided-batched) GEMM through matmul.cu's cuBLAS handle, f32/f64:
// C = op(A) op(B) + beta C; see matmul.cu.  0, or -1 with "<opname>: ..." set.
int gemm_rowmajor(nt_DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int64_t sA,
                  const void *B, int64_t ldb, int64_t sB, double beta, void *C, int64_t ldc, int64_t sC, int64_t batch,
                  const char *opname);

// scaled_dot_product_attention through cuBLAS GEMMs + fused row kernels (attention_gemm.cu),
// forward or backward, any float storage dtype and head dims; attention.cu's kernel picks it.
// 0, or -1 with "<op>: ..." set.
int sdpa_gemm(const nt_KernelArgs *a, bool backward);
int sdpa_gemm_init(void);   // its cuBLAS handle, made at init (0, or -1 + error)

// ---- registration (one function per source file, called by nabla_cuda_init) ---------------
void register_elementwise(void);
void register_reduce(void);
int  register_matmul(void);
void register_random(void);
void register_nn(void);
void register_optim(void);
void register_conv(void);       // conv.cu: conv2d, max/avg pooling
void register_sort(void);       // sort.cu: sort/argsort/topk, one_hot
void register_attention(void);  // attention.cu: scaled dot-product attention
void matmul_shutdown(void);
void nccl_fill_api(nt_DeviceApi *api);   // nccl.cu: the nt_cuda_comm_* and staging entries
// nccl.cu: waits (on the host, bounded by each communicator's timeout) for the
// collectives still queued on the communication streams; sync_stream calls it
// first, so a collective hung on a dead peer ends in an abort, not a hang.
int comms_wait_all(void);

}  // namespace ncu

// ---- counted CUDA / cuBLAS calls ------------------------------------------------------------
// Every source after this point that calls one of these names calls the
// counted wrapper instead (a function-like macro: the real function is
// reached as (name)(...), which macros do not expand).  Counted only when the
// call succeeded.  A host wait ("syncs") is a stream/event/device
// synchronize or a blocking cudaMemcpy; a device-to-host cudaMemcpyAsync is
// not one by itself: the module always follows it with sync_stream (counted).
// cuBLAS / cuBLASLt GEMMs count as "gemms" (one per call, a batched call is one).
inline cudaError_t ncu_counted_memcpy_async(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st = 0) {
  cudaError_t e = (cudaMemcpyAsync)(d, s, n, k, st);
  if (e == cudaSuccess) ncu::count_copy(k);
  return e;
}
inline cudaError_t ncu_counted_memcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
  cudaError_t e = (cudaMemcpy)(d, s, n, k);
  if (e == cudaSuccess) { ncu::count_copy(k); ncu::count(ncu::C_SYNCS); }
  return e;
}
inline cudaError_t ncu_counted_memset_async(void *p, int v, size_t n, cudaStream_t st = 0) {
  cudaError_t e = (cudaMemsetAsync)(p, v, n, st);
  if (e == cudaSuccess) ncu::count(ncu::C_MEMSETS);
  return e;
}
inline cudaError_t ncu_counted_memset2d_async(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t st = 0) {
  cudaError_t e = (cudaMemset2DAsync)(p, pitch, v, w, h, st);
  if (e == cudaSuccess) ncu::count(ncu::C_MEMSETS);
  return e;
}
inline cudaError_t ncu_counted_stream_sync(cudaStream_t st) { ncu::count(ncu::C_SYNCS); return (cudaStreamSynchronize)(st); }
inline cudaError_t ncu_counted_event_sync(cudaEvent_t ev) { ncu::count(ncu::C_SYNCS); return (cudaEventSynchronize)(ev); }
inline cudaError_t ncu_counted_device_sync(void) { ncu::count(ncu::C_SYNCS); return (cudaDeviceSynchronize)(); }
inline cublasStatus_t ncu_counted_gemm(cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) ncu::count(ncu::C_GEMMS);
  return s;
}
#define cudaMemcpyAsync(...) ncu_counted_memcpy_async(__VA_ARGS__)
#define cudaMemcpy(...) ncu_counted_memcpy(__VA_ARGS__)
#define cudaMemsetAsync(...) ncu_counted_memset_async(__VA_ARGS__)
#define cudaMemset2DAsync(...) ncu_counted_memset2d_async(__VA_ARGS__)
#define cudaStreamSynchronize(...) ncu_counted_stream_sync(__VA_ARGS__)
#define cudaEventSynchronize(...) ncu_counted_event_sync(__VA_ARGS__)
#define cudaDeviceSynchronize(...) ncu_counted_device_sync(__VA_ARGS__)
#define cublasGemmEx(...) ncu_counted_gemm((cublasGemmEx)(__VA_ARGS__))
#define cublasGemmStridedBatchedEx(...) ncu_counted_gemm((cublasGemmStridedBatchedEx)(__VA_ARGS__))
#define cublasGemmBatchedEx(...) ncu_counted_gemm((cublasGemmBatchedEx)(__VA_ARGS__))
#define cublasLtMatmul(...) ncu_counted_gemm((cublasLtMatmul)(__VA_ARGS__))
