// api.cpp — the CUDA runtime API of the emulated device (docs/cuda.md,
// "Emulated device"), served on host memory: device queries, cudaMalloc and
// copies (checked against the device memory map that runtime.cpp's access
// checker also reads), pinned and mapped host memory, the single in-order
// stream and its events, error strings, and the NCCL entry points that say
// NCCL is not emulated.  Kernel execution itself is runtime.cpp's; runtime.h
// is what the two share.
//
// This file is NOT instrumented, like runtime.cpp.
#define EMU_RUNTIME 1
#include "emu.h"
#include "runtime.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

// ---- the CUDA runtime API, served on host memory ---------------------------------------------------------------------
using namespace emu;

static bool is_device(const void *p) { return range_ok(p, 1); }

EXPORT cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
EXPORT cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
EXPORT cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
EXPORT cudaError_t cudaDeviceSynchronize(void) { return take_fault(); }

EXPORT cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int dev) {
  if (dev != 0) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = num_sms(); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)kSmemOptin; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)kSmemDefault; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = kMaxThreadsPerBlock; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrCanMapHostMemory: *v = 1; break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
  if (dev != 0) return fail(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", kDeviceName);
  p->totalGlobalMem = kTotalMem;
  p->sharedMemPerBlock = kSmemDefault;
  p->sharedMemPerBlockOptin = kSmemOptin;
  p->warpSize = 32;
  p->maxThreadsPerBlock = kMaxThreadsPerBlock;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9; p->minor = 0;
  p->multiProcessorCount = num_sms();
  p->canMapHostMemory = 1;
  return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int dev) {
  if (dev != 0 || len < 13) return fail(cudaErrorInvalidValue);
  snprintf(bus, (size_t)len, "0000:00:00.0");
  return cudaSuccess;
}

// ---- memory --------------------------------------------------------------------------------------------------
// Small allocations come from malloc (ASan's redzones guard them); large ones
// are mapped lazily (an emulated 80 GB device must not need 80 GB of RAM).
constexpr size_t kMapThreshold = 64u << 20;

EXPORT cudaError_t cudaMalloc(void **p, size_t n) {
  if (!p) return fail(cudaErrorInvalidValue);
  *p = nullptr;
  if (n == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> g(mu);
    if (n > kTotalMem - mem_used) return fail(cudaErrorMemoryAllocation);
  }
  size_t rounded = (n + 255) & ~(size_t)255;
  void *q;
  if (rounded < kMapThreshold) q = aligned_alloc(256, rounded);
  else {
    q = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (q == MAP_FAILED) q = nullptr;
  }
  if (!q) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> g(mu);
  raw[(uintptr_t)q] = Range{ (uintptr_t)q + n, false, false, false };
  mem_used += rounded;
  *p = q;
  return cudaSuccess;
}

EXPORT cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  size_t n;
  {
    std::lock_guard<std::mutex> g(mu);
    auto r = raw.find((uintptr_t)p);
    if (r == raw.end() || r->second.pinned) return fail(cudaErrorInvalidValue);
    n = r->second.end - r->first;
    for (auto b = blocks.lower_bound(r->first); b != blocks.end() && b->first < r->second.end;) b = blocks.erase(b);
    raw.erase(r);
    map_gen++;
    mem_used -= (n + 255) & ~(size_t)255;
  }
  size_t rounded = (n + 255) & ~(size_t)255;
  if (rounded < kMapThreshold) {
#ifdef EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(p, rounded);
#endif
    free(p);
  } else munmap(p, rounded);
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemGetInfo(size_t *fr, size_t *total) {
  std::lock_guard<std::mutex> g(mu);
  *fr = kTotalMem - mem_used;
  *total = kTotalMem;
  return cudaSuccess;
}

EXPORT cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
  (void)flags;
  if (!p) return fail(cudaErrorInvalidValue);
  void *q = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
  if (!q) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> g(mu);
  raw[(uintptr_t)q] = Range{ (uintptr_t)q + n, false, true, true };
  *p = q;
  return cudaSuccess;
}
EXPORT cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }
EXPORT cudaError_t cudaFreeHost(void *p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> g(mu);
    auto r = raw.find((uintptr_t)p);
    if (r == raw.end() || !r->second.pinned) return fail(cudaErrorInvalidValue);
    raw.erase(r);
    map_gen++;
  }
  free(p);
  return cudaSuccess;
}
EXPORT cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags) {
  (void)flags;
  std::lock_guard<std::mutex> g(mu);
  auto r = raw.find((uintptr_t)h);
  if (r == raw.end() || !r->second.mapped) return fail(cudaErrorInvalidValue);
  *d = h;                                                  // unified addressing: the same pointer
  return cudaSuccess;
}

// Device-side operands of copies and memsets must be device memory, whole: a
// wrong size or pointer in the module's bookkeeping fails here, not silently.
static cudaError_t check_side(const void *p, size_t n, bool device, const char *what) {
  if (!device || n == 0) return cudaSuccess;
  if (range_ok(p, n)) return cudaSuccess;
  report("%s: %zu bytes at %p are not device memory (%s)", what, n, p, describe_address((uintptr_t)p).c_str());
  return fail(cudaErrorInvalidValue);
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
  (void)s;
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  bool dd, sd;
  switch (kind) {
    case cudaMemcpyHostToHost: dd = sd = false; break;
    case cudaMemcpyHostToDevice: dd = true; sd = false; break;
    case cudaMemcpyDeviceToHost: dd = false; sd = true; break;
    case cudaMemcpyDeviceToDevice: dd = sd = true; break;
    case cudaMemcpyDefault: dd = is_device(dst); sd = is_device(src); break;
    default: return fail(cudaErrorInvalidMemcpyDirection);
  }
  cudaError_t e;
  if ((e = check_side(dst, n, dd, "cudaMemcpy destination")) || (e = check_side(src, n, sd, "cudaMemcpy source"))) return e;
  memmove(dst, src, n);
  if (kind == cudaMemcpyDeviceToHost) return take_fault();  // the copy waits for the stream: a fault shows here
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
  cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
  return e != cudaSuccess ? e : take_fault();
}

EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  (void)s;
  if (n == 0) return cudaSuccess;
  cudaError_t e = check_side(p, n, true, "cudaMemset");
  if (e) return e;
  memset(p, v, n);
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, nullptr); }
EXPORT cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s) {
  (void)s;
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > pitch) return fail(cudaErrorInvalidPitchValue);
  cudaError_t e = check_side(p, pitch * (height - 1) + width, true, "cudaMemset2D");
  if (e) return e;
  for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
  return cudaSuccess;
}

// ---- streams and events: in-order host queues, so work is done when it is enqueued ------------------------------------
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) { (void)flags; *s = the_stream(); return cudaSuccess; }
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = the_stream(); return cudaSuccess; }
// one in-order queue: priorities order nothing, and a wait on an event is already satisfied
EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority) { (void)flags; (void)priority; *s = the_stream(); return cudaSuccess; }
EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) { if (least) *least = 0; if (greatest) *greatest = -5; return cudaSuccess; }
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return take_fault(); }
struct EmuEvent { int recorded; };
EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) { (void)flags; *e = (cudaEvent_t) new EmuEvent{ 0 }; return cudaSuccess; }
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) { delete (EmuEvent *)e; return cudaSuccess; }
EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)s; if (!e) return fail(cudaErrorInvalidResourceHandle); ((EmuEvent *)e)->recorded = 1; return cudaSuccess; }
EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) { (void)e; return take_fault(); }
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return take_fault(); }
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) { (void)s; (void)flags; if (!e) return fail(cudaErrorInvalidResourceHandle); return cudaSuccess; }

EXPORT cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || (size_t)value > kSmemOptin) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> g(mu);
  smem_optin[func] = (size_t)value;
  return cudaSuccess;
}

// ---- errors ---------------------------------------------------------------------------------------------------------------
EXPORT cudaError_t cudaGetLastError(void) { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

EXPORT const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

static const char *plain_error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

// A kernel fault's string carries the emulator's report, so the module's
// error message says which kernel line failed.
EXPORT const char *cudaGetErrorString(cudaError_t e) {
  static thread_local std::string s;
  s = plain_error_string(e);
  std::lock_guard<std::mutex> g(mu);
  if ((e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorMisalignedAddress ||
       e == cudaErrorLaunchOutOfResources) && !shown_text.empty())
    s += " [emulated device: " + shown_text + "]";
  return s.c_str();
}

// ---- NCCL: not emulated ----------------------------------------------------------------------------------------------------
static thread_local const char *dl_error_ours;
EXPORT void *emu_dlopen(const char *file, int mode) {
  if (file && strstr(file, "nccl")) {
    dl_error_ours = "NCCL does not run on the emulated CUDA device (NABLA_CUDA_EMULATE): collectives use the ring backend";
    return nullptr;
  }
  dl_error_ours = nullptr;
  return dlopen(file, mode);
}
EXPORT char *emu_dlerror(void) {
  if (dl_error_ours) { const char *e = dl_error_ours; dl_error_ours = nullptr; return (char *)e; }
  return dlerror();
}
