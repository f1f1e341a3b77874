// fft.cu — torch.fft's three transform kernels (fft_c2c, fft_r2c, fft_c2r)
// through cuFFT.  The buffers and what each kernel writes are
// tensor/fft/finternal.h's: out [B, L'] from in[0] [B, L], contiguous rows,
// unnormalized transforms times s[0]; the CPU kernels (kissfft,
// tensor/fft/fkiss_tmpl.h) keep the same contract, so the front end
// (tensor/fft/fcore.c: padding, axes, norms, autograd) serves both devices
// and the backward passes run through these same kernels.
//
// Loading: cuFFT is dlopened on first use (libcufft.so.12, .so.11, then
// /usr/local/cuda/lib64), never linked; when it cannot be loaded an FFT of a
// CUDA tensor fails with the loader's reason (no silent trip through the
// host: a GPU program that expects the GPU's speed learns why at once).  The
// emulated module binds the stand-in over kissfft that cuda/emu/cufft.cpp
// links into it instead.
//
// Plans: one cuFFT plan per (type, n, batch, input stride, input distance),
// made with cufftMakePlanMany64 (rank 1, the advanced layout: element j of
// row b at b * idist + j * istride; the output is always dense rows), cached
// (kPlanCache entries, least recently used replaced) because a plan holds
// twiddles and a kernel choice as costly as the transform.  Auto allocation
// is off: the work area comes from the caching allocator per call (the
// plan's size), so cuFFT holds no memory of its own between calls.
// Strided input (iarg[1] = istride, iarg[2] = idist, finternal.h): the front
// end hands a view whose rows cuFFT can address (an FFT over a leading or
// strided axis) instead of copying it; C2R always gets dense rows.
//
// Graphs (compile, graph.cu): making a plan allocates and runs setup work
// that a stream capture forbids, so a cache miss while capturing ends the
// capture at a gate (the step runs eagerly, compile says why); the next
// capture finds the plan warm.  A plan a captured graph used is kept for the
// module's life (its twiddles are baked into the graph's kernels): never
// evicted, so a replay never runs freed memory.
//
// cuFFT's C2R may overwrite its input (documented for multi-dimensional
// transforms, allowed in general): the input is copied into scratch first,
// since in[0] may be the caller's own tensor.  Scaling (norm) is a separate
// elementwise pass, skipped when s == 1.
#include "common.cuh"
#include "vendor_load.cuh"
#include "cuda/graph.h"
#include <cufft.h>
#include <dlfcn.h>
#include <memory>
#include <mutex>
#include <stdio.h>

namespace ncu {
namespace {

struct CufftApi {
  cufftResult (*create)(cufftHandle *);
  cufftResult (*destroy)(cufftHandle);
  cufftResult (*set_auto_allocation)(cufftHandle, int);
  cufftResult (*make_plan_many64)(cufftHandle, int, long long *, long long *, long long, long long, long long *, long long,
                                  long long, cufftType, long long, size_t *);
  cufftResult (*set_work_area)(cufftHandle, void *);
  cufftResult (*set_stream)(cufftHandle, cudaStream_t);
  cufftResult (*exec_c2c)(cufftHandle, cufftComplex *, cufftComplex *, int);
  cufftResult (*exec_r2c)(cufftHandle, cufftReal *, cufftComplex *);
  cufftResult (*exec_c2r)(cufftHandle, cufftComplex *, cufftReal *);
  cufftResult (*exec_z2z)(cufftHandle, cufftDoubleComplex *, cufftDoubleComplex *, int);
  cufftResult (*exec_d2z)(cufftHandle, cufftDoubleReal *, cufftDoubleComplex *);
  cufftResult (*exec_z2d)(cufftHandle, cufftDoubleComplex *, cufftDoubleReal *);
};
CufftApi fft_api;
std::once_flag load_once;
bool ready;
char reason[600] = "not loaded";

// X(field, name): every entry point used
#define CUFFT_ROUTINES(X)                                                                                        \
  X(create, cufftCreate) X(destroy, cufftDestroy) X(set_auto_allocation, cufftSetAutoAllocation)                \
  X(make_plan_many64, cufftMakePlanMany64) X(set_work_area, cufftSetWorkArea) X(set_stream, cufftSetStream)     \
  X(exec_c2c, cufftExecC2C) X(exec_r2c, cufftExecR2C) X(exec_c2r, cufftExecC2R) X(exec_z2z, cufftExecZ2Z)       \
  X(exec_d2z, cufftExecD2Z) X(exec_z2d, cufftExecZ2D)

void load_cufft(void) {
#ifdef NABLA_CUDA_EMU
  // the stand-in over kissfft (cuda/emu/cufft.cpp) is linked into this module
#define BIND(field, name) fft_api.field = &::name;
  CUFFT_ROUTINES(BIND)
#undef BIND
#else
  const char *cands[] = { "libcufft.so.12", "libcufft.so.11", "/usr/local/cuda/lib64/libcufft.so.12" };
  char first[400];
  void *h = dlopen_first(cands, sizeof cands / sizeof *cands, first, sizeof first);
  if (!h) { snprintf(reason, sizeof reason, "cuFFT is not available: %s", first); return; }
  const char *missing = nullptr;
#define BIND(field, name) if (!(*(void **)&fft_api.field = dlsym(h, #name))) missing = #name;
  CUFFT_ROUTINES(BIND)
#undef BIND
  if (missing) { snprintf(reason, sizeof reason, "cuFFT is not usable: the loaded library has no %s", missing); return; }
#endif
  ready = true;
}

int cufft_ready(const char *op) {
  std::call_once(load_once, load_cufft);
  if (ready) return 0;
  host->error_set("%s: %s", op, reason);
  return -1;
}
int cufft_fail(const char *op, const char *what, cufftResult st) {
  host->error_set("%s: cuFFT %s failed (status %d)", op, what, (int)st);
  return -1;
}
#define FFTCALL(call, what) do { cufftResult st_ = (call); if (st_ != CUFFT_SUCCESS) return cufft_fail(op, what, st_); } while (0)

// ---- the plan cache ---------------------------------------------------------------------
struct Plan {
  cufftType type;
  long long n, batch, istride, idist;
  cufftHandle h;
  size_t work;
  uint64_t used;                       // the cache's clock at the last use (LRU)
  bool live, pinned;                   // pinned: a captured graph runs it (see above)
};
constexpr int kPlanCache = 16;
Plan plans[kPlanCache];
uint64_t plan_clock;
std::mutex plan_mu;                    // the cache, and a plan from its work-area setting to its exec

// The plan of (type, n, batch, istride, idist), made on a miss; plan_mu held.
Plan *plan_for(const char *op, cufftType type, long long n, long long batch, long long istride, long long idist) {
  Plan *lru = nullptr;
  for (Plan &p : plans) {
    if (p.live && p.type == type && p.n == n && p.batch == batch && p.istride == istride && p.idist == idist) {
      p.used = ++plan_clock;
      return &p;
    }
    if (p.pinned) continue;
    if (!lru || (lru->live && (!p.live || p.used < lru->used))) lru = &p;   // a free slot first, else the oldest
  }
  if (!lru) {
    host->error_set("%s: all %d cuFFT plans are held by compiled steps' graphs; free some compiled steps first", op, kPlanCache);
    return nullptr;
  }
  if (capture_gate("a cuFFT plan made inside the step (a transform size the step had not run before capture): "
                   "plan creation cannot be captured")) return nullptr;
  if (lru->live) { fft_api.destroy(lru->h); lru->live = false; }
  cufftHandle h;
  cufftResult st = fft_api.create(&h);
  if (st != CUFFT_SUCCESS) { cufft_fail(op, "cufftCreate", st); return nullptr; }
  bool r2c = type == CUFFT_R2C || type == CUFFT_D2Z, c2r = type == CUFFT_C2R || type == CUFFT_Z2D;
  long long len = n, half = n / 2 + 1;
  long long ilen = c2r ? half : len, olen = r2c ? half : len, odist = olen;
  size_t work = 0;
  st = fft_api.set_auto_allocation(h, 0);
  if (st == CUFFT_SUCCESS) st = fft_api.make_plan_many64(h, 1, &len, &ilen, istride, idist, &olen, 1, odist, type, batch, &work);
  if (st == CUFFT_SUCCESS) st = fft_api.set_stream(h, stream);
  if (st != CUFFT_SUCCESS) { fft_api.destroy(h); cufft_fail(op, "plan creation (cufftMakePlanMany64)", st); return nullptr; }
  *lru = Plan{ type, n, batch, istride, idist, h, work, ++plan_clock, true, false };
  return lru;
}

// ---- scaling ---------------------------------------------------------------------------------
// x[i] *= s over n scalars (a complex buffer is 2 n of its parts)
template <typename T> __global__ void scale_kernel(T *x, int64_t n, T s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] *= s;
}
template <typename T> int scale(const char *op, T *x, int64_t n, double s) {
  if (s == 1.0 || n == 0) return 0;
  scale_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(x, n, (T)s);
  LAUNCHED(op);
  return 0;
}

// ---- the kernels -------------------------------------------------------------------------------
enum Kind { K_C2C, K_R2C, K_C2R };

// one transform of the contract's kind over the B rows of a (T the real part type)
template <typename T> int run(Kind kind, const nt_KernelArgs *a) {
  static const char *names[] = { "fft_c2c", "fft_r2c", "fft_c2r" };
  const char *op = names[kind];
  constexpr bool dbl = sizeof(T) == 8;
  nt_Tensor *in = a->in[0], *out = a->out;
  long long n = kind == K_R2C ? in->shape[in->ndim - 1] : out->shape[out->ndim - 1];
  long long B = out->ndim ? out->numel / out->shape[out->ndim - 1] : 1;
  cufftType type = kind == K_C2C ? (dbl ? CUFFT_Z2Z : CUFFT_C2C) : kind == K_R2C ? (dbl ? CUFFT_D2Z : CUFFT_R2C) : (dbl ? CUFFT_Z2D : CUFFT_C2R);
  // C2R may overwrite its input: transform a copy
  size_t inbytes = (size_t)in->numel * nt_dtype_size(in->dtype);
  std::unique_ptr<Scratch> copy;
  if (kind == K_C2R) {
    copy.reset(new Scratch(inbytes));
    if (!copy->p) return -1;
    CU(cudaMemcpyAsync(copy->p, base(in), inbytes, cudaMemcpyDeviceToDevice, stream));
  }
  void *src = copy ? copy->p : (void *)base(in), *dst = base(out);
  // the input's layout: dense rows, or the strided rows the front end described
  bool strided = a->niarg >= 3 && kind != K_C2R;
  long long ilen = kind == K_C2R ? n / 2 + 1 : n;
  long long istride = strided ? a->iarg[1] : 1, idist = strided ? a->iarg[2] : ilen;
  {
    std::lock_guard<std::mutex> lk(plan_mu);
    Plan *p = plan_for(op, type, n, B, istride, idist);
    if (!p) return -1;
    if (capture_active) p->pinned = true;
    Scratch work(p->work);
    if (!work.p) return -1;
    FFTCALL(fft_api.set_work_area(p->h, work.p), "cufftSetWorkArea");
    int dir = a->iarg[0] ? CUFFT_FORWARD : CUFFT_INVERSE;
    switch (type) {
      case CUFFT_C2C: FFTCALL(fft_api.exec_c2c(p->h, (cufftComplex *)src, (cufftComplex *)dst, dir), "cufftExecC2C"); break;
      case CUFFT_Z2Z: FFTCALL(fft_api.exec_z2z(p->h, (cufftDoubleComplex *)src, (cufftDoubleComplex *)dst, dir), "cufftExecZ2Z"); break;
      case CUFFT_R2C: FFTCALL(fft_api.exec_r2c(p->h, (cufftReal *)src, (cufftComplex *)dst), "cufftExecR2C"); break;
      case CUFFT_D2Z: FFTCALL(fft_api.exec_d2z(p->h, (cufftDoubleReal *)src, (cufftDoubleComplex *)dst), "cufftExecD2Z"); break;
      case CUFFT_C2R: FFTCALL(fft_api.exec_c2r(p->h, (cufftComplex *)src, (cufftReal *)dst), "cufftExecC2R"); break;
      case CUFFT_Z2D: FFTCALL(fft_api.exec_z2d(p->h, (cufftDoubleComplex *)src, (cufftDoubleReal *)dst), "cufftExecZ2D"); break;
    }
    LAUNCHED(op);   // counts the transform as a launch; a fault surfaces here or at the next sync
  }
  int64_t scalars = out->numel * (nt_dtype_is_complex(out->dtype) ? 2 : 1);
  return scale<T>(op, (T *)dst, scalars, a->s[0]);
}

template <Kind kind> int k_fft(const nt_KernelArgs *a) {
  if (a->out->numel == 0) return 0;
  static const char *names[] = { "fft_c2c", "fft_r2c", "fft_c2r" };
  if (cufft_ready(names[kind])) return -1;
  nt_DType part = kind == K_C2R ? a->out->dtype : a->in[0]->dtype == NT_F64 || a->in[0]->dtype == NT_C128 ? NT_F64 : NT_F32;
  return part == NT_F64 ? run<double>(kind, a) : run<float>(kind, a);
}

}  // namespace

void register_fft(void) {
  host->register_kernel(host->op_register("fft_c2c"), NT_CUDA, k_fft<K_C2C>);
  host->register_kernel(host->op_register("fft_r2c"), NT_CUDA, k_fft<K_R2C>);
  host->register_kernel(host->op_register("fft_c2r"), NT_CUDA, k_fft<K_C2R>);
}

}  // namespace ncu
