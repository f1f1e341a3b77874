// emu.h — the CUDA device, emulated on the CPU (docs/cuda.md, "Emulated device").
//
// Force-included (-include) into every cuda/*.cu source when the module is
// built as host C++ for nabla_cuda_emu.so, after cuda/emu/transform.py has
// rewritten its launches and __shared__ declarations.  It supplies what nvcc
// would: the built-in variables, barriers, warp shuffles and votes, atomics,
// device-only math intrinsics, the launch, and shared memory.  CUDA's own
// headers (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h, cublas_v2.h) are used
// in their host-only form for every type; the functions they declare are
// served by runtime.cpp and cublas.cpp.
//
// Everything that touches the emulator's state is an out-of-line call into
// runtime.cpp: that file is built without the load/store instrumentation the
// module sources get (-fsanitize-coverage=trace-loads,trace-stores), so the
// only memory accesses the checker sees are the kernels' own.
#pragma once
#ifdef __CUDACC__
#error "emu.h is for the host-C++ build of the CUDA sources, not for nvcc"
#endif
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

#define NABLA_CUDA_EMU 1
#undef __launch_bounds__
#define __launch_bounds__(...)
#define EMU_INLINE __attribute__((always_inline)) inline

namespace emu {

// ---- the launch --------------------------------------------------------------------------
struct Site { const char *kernel, *file; int line; };      // the <<<>>> it came from
struct Config {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  Config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), smem(s), stream(st) {}
};
// Runs body(ctx) once per thread of every block; params..params+psize is the
// launch's argument block (readable by the kernel).  Errors go where CUDA puts
// them: cudaGetLastError (configuration) or the next synchronisation (faults).
void run_launch(const Site &site, const Config &cfg, const void *kernel_id, void (*body)(void *), void *ctx, size_t ctx_size);

template <typename... P, typename... A>
void launch(const Site &site, const Config &cfg, void (*kernel)(P...), A &&...args) {
  struct Ctx {
    void (*k)(P...);
    std::tuple<std::decay_t<P>...> p;   // arguments converted to the parameter types, as CUDA does
  } ctx{ kernel, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...) };
  run_launch(site, cfg, (const void *)kernel, [](void *v) { Ctx *c = (Ctx *)v; std::apply(c->k, c->p); }, &ctx, sizeof ctx);
}

// ---- built-in variables -----------------------------------------------------------------
uint3 thread_idx(void);
uint3 block_idx(void);
dim3 block_dim(void);
dim3 grid_dim(void);

// ---- shared memory ----------------------------------------------------------------------
// One arena per running block: the dynamic part first, then each static
// __shared__ variable, placed the first time a thread of the block reaches
// its declaration (tag: one static char per declaration).
void *shared_alloc(const void *tag, size_t size, size_t align, const char *name);
void *shared_dynamic(size_t align, const char *name);
template <typename T> EMU_INLINE T *shared_static(const void *tag, const char *name) {
  return (T *)shared_alloc(tag, sizeof(T), alignof(T), name);
}

// ---- barriers, warp collectives ------------------------------------------------------------
void syncthreads(void);
enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, VOTE_BALLOT, VOTE_ANY, VOTE_ALL, SYNC_WARP };
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
unsigned active_mask(void);

template <typename T> EMU_INLINE T shuffle(WarpOp op, unsigned mask, T v, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffles move up to 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = warp_collective(op, mask, bits, arg, width);
  T r;
  memcpy(&r, &bits, sizeof r);
  return r;
}

// ---- atomics (checked like any other access; never torn) --------------------------------------
float atomic_add_f32(float *p, float v);
double atomic_add_f64(double *p, double v);
__half atomic_add_f16(__half *p, __half v);
__nv_bfloat16 atomic_add_bf16(__nv_bfloat16 *p, __nv_bfloat16 v);
int atomic_add_i32(int *p, int v);
unsigned atomic_add_u32(unsigned *p, unsigned v);
unsigned long long atomic_add_u64(unsigned long long *p, unsigned long long v);
int atomic_cas_i32(int *p, int cmp, int v);
unsigned atomic_cas_u32(unsigned *p, unsigned cmp, unsigned v);
unsigned long long atomic_cas_u64(unsigned long long *p, unsigned long long cmp, unsigned long long v);
int atomic_max_i32(int *p, int v);
int atomic_min_i32(int *p, int v);
int atomic_exch_i32(int *p, int v);
void thread_fence(void);

}  // namespace emu

#ifndef EMU_RUNTIME   // runtime.cpp needs the declarations above, not the CUDA names below
// ---- the CUDA names ----------------------------------------------------------------------------
#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
#define warpSize 32
#define __syncthreads() ::emu::syncthreads()
#define __threadfence() ::emu::thread_fence()
#define __threadfence_block() ::emu::thread_fence()

template <typename T> EMU_INLINE T __shfl_sync(unsigned m, T v, int src, int w = 32) { return ::emu::shuffle(::emu::SHFL_IDX, m, v, src, w); }
template <typename T> EMU_INLINE T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return ::emu::shuffle(::emu::SHFL_UP, m, v, (int)d, w); }
template <typename T> EMU_INLINE T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return ::emu::shuffle(::emu::SHFL_DOWN, m, v, (int)d, w); }
template <typename T> EMU_INLINE T __shfl_xor_sync(unsigned m, T v, int lm, int w = 32) { return ::emu::shuffle(::emu::SHFL_XOR, m, v, lm, w); }
EMU_INLINE unsigned __ballot_sync(unsigned m, int p) { return (unsigned)::emu::warp_collective(::emu::VOTE_BALLOT, m, p != 0, 0, 32); }
EMU_INLINE int __any_sync(unsigned m, int p) { return (int)::emu::warp_collective(::emu::VOTE_ANY, m, p != 0, 0, 32); }
EMU_INLINE int __all_sync(unsigned m, int p) { return (int)::emu::warp_collective(::emu::VOTE_ALL, m, p != 0, 0, 32); }
EMU_INLINE void __syncwarp(unsigned m = 0xffffffffu) { ::emu::warp_collective(::emu::SYNC_WARP, m, 0, 0, 32); }
EMU_INLINE unsigned __activemask(void) { return ::emu::active_mask(); }

EMU_INLINE float atomicAdd(float *p, float v) { return ::emu::atomic_add_f32(p, v); }
EMU_INLINE double atomicAdd(double *p, double v) { return ::emu::atomic_add_f64(p, v); }
EMU_INLINE __half atomicAdd(__half *p, __half v) { return ::emu::atomic_add_f16(p, v); }
EMU_INLINE __nv_bfloat16 atomicAdd(__nv_bfloat16 *p, __nv_bfloat16 v) { return ::emu::atomic_add_bf16(p, v); }
EMU_INLINE int atomicAdd(int *p, int v) { return ::emu::atomic_add_i32(p, v); }
EMU_INLINE unsigned atomicAdd(unsigned *p, unsigned v) { return ::emu::atomic_add_u32(p, v); }
EMU_INLINE unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return ::emu::atomic_add_u64(p, v); }
EMU_INLINE int atomicCAS(int *p, int c, int v) { return ::emu::atomic_cas_i32(p, c, v); }
EMU_INLINE unsigned atomicCAS(unsigned *p, unsigned c, unsigned v) { return ::emu::atomic_cas_u32(p, c, v); }
EMU_INLINE unsigned long long atomicCAS(unsigned long long *p, unsigned long long c, unsigned long long v) { return ::emu::atomic_cas_u64(p, c, v); }
EMU_INLINE int atomicMax(int *p, int v) { return ::emu::atomic_max_i32(p, v); }
EMU_INLINE int atomicMin(int *p, int v) { return ::emu::atomic_min_i32(p, v); }
EMU_INLINE int atomicExch(int *p, int v) { return ::emu::atomic_exch_i32(p, v); }

// cuda_runtime.h's C++ overload taking the kernel itself (nvcc-only there)
template <typename T> inline cudaError_t cudaFuncSetAttribute(T *kernel, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute((const void *)kernel, attr, value);
}

template <typename T> EMU_INLINE T __ldg(const T *p) { return *p; }

// ---- device-only math and bit casts (host C++ has the rest of CUDA's math library) ---------------
EMU_INLINE double __dadd_rn(double a, double b) { return a + b; }   // the host rounds to nearest
EMU_INLINE double __dmul_rn(double a, double b) { return a * b; }
EMU_INLINE float __fadd_rn(float a, float b) { return a + b; }
EMU_INLINE float __fmul_rn(float a, float b) { return a * b; }
EMU_INLINE float __fdividef(float a, float b) { return a / b; }
EMU_INLINE float __expf(float x) { return expf(x); }
EMU_INLINE float __logf(float x) { return logf(x); }
EMU_INLINE float rsqrtf(float x) { return 1.0f / sqrtf(x); }
EMU_INLINE double rsqrt(double x) { return 1.0 / sqrt(x); }
EMU_INLINE float __saturatef(float x) { return x < 0 ? 0.0f : x > 1 ? 1.0f : x; }
EMU_INLINE unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
EMU_INLINE int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
EMU_INLINE float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, 4); return x; }
EMU_INLINE float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
EMU_INLINE long long __double_as_longlong(double x) { long long u; memcpy(&u, &x, 8); return u; }
EMU_INLINE double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }
EMU_INLINE int __popc(unsigned x) { return __builtin_popcount(x); }
EMU_INLINE int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
EMU_INLINE int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
EMU_INLINE int __ffs(int x) { return __builtin_ffs(x); }
// CUDA's max/min overloads (fmaxf semantics for floating point: a NaN operand loses)
EMU_INLINE float max(float a, float b) { return fmaxf(a, b); }
EMU_INLINE float min(float a, float b) { return fminf(a, b); }
EMU_INLINE double max(double a, double b) { return fmax(a, b); }
EMU_INLINE double min(double a, double b) { return fmin(a, b); }
EMU_INLINE int max(int a, int b) { return a > b ? a : b; }
EMU_INLINE int min(int a, int b) { return a < b ? a : b; }
EMU_INLINE unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
EMU_INLINE unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
EMU_INLINE long long max(long long a, long long b) { return a > b ? a : b; }
EMU_INLINE long long min(long long a, long long b) { return a < b ? a : b; }
EMU_INLINE long max(long a, long b) { return a > b ? a : b; }
EMU_INLINE long min(long a, long b) { return a < b ? a : b; }

// NCCL is not emulated: the module's dlopen of libnccl fails with that reason
// (the ring backend carries collectives), every other dlopen is the real one.
#include <dlfcn.h>
extern "C" void *emu_dlopen(const char *file, int mode);
extern "C" char *emu_dlerror(void);
#define dlopen emu_dlopen
#define dlerror emu_dlerror
#endif  // EMU_RUNTIME
