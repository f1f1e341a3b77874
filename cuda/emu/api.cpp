// api.cpp — the CUDA runtime API of the emulated device (docs/cuda.md,
// "Emulated device"), served on host memory: device queries, cudaMalloc and
// copies (checked against the device memory map that runtime.cpp's access
// checker also reads), pinned and mapped host memory, the compute stream
// (eager) and side streams (deferred copies, ordering checked) with their events, error strings, and the NCCL entry points that say
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
#include <time.h>
#include <memory>
#include <vector>

// ---- the CUDA runtime API, served on host memory ---------------------------------------------------------------------
using namespace emu;

static bool is_device(const void *p) { return range_ok(p, 1); }

// stream capture (the "graphs" section below): a call CUDA forbids while this
// thread captures (a synchronisation, cudaFree, cudaMalloc outside relaxed
// mode) invalidates the capture and fails with this error, as on a GPU
static cudaError_t capture_forbids(const char *what);
EXPORT void emu_note_block(void *p, size_t request, size_t rounded);   // runtime.cpp: the allocator's hooks
EXPORT void emu_forget_block(void *p);
EXPORT void emu_note_block_replayed(void *p, size_t request, size_t rounded);

EXPORT cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
EXPORT cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
EXPORT cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }

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
  if (cudaError_t e = capture_forbids("cudaMalloc")) return e;
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
  if (cudaError_t e = capture_forbids("cudaFree")) return e;
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

// ---- streams and events ------------------------------------------------------------------------------------------
// The COMPUTE stream (the_stream(): the first stream created, which is the
// module's, and the legacy handles 0..2) runs everything when it is enqueued.
// Every stream created after it is a SIDE stream (the offload copies'; NCCL's
// would be too, but NCCL is not emulated): its copies and memsets are DEFERRED
// -- queued, and run only when something waits for them (an event recorded
// after them waited for by another stream or the host, a stream or device
// synchronisation).  So work the module forgets to wait for shows as stale
// data: a host read of a pinned buffer before its device->host copy was
// waited for, a kernel that reads parameters before their host->device copy,
// a copy whose device buffer was freed and reused meanwhile.  The opposite
// race -- a side-stream copy that reads device memory before the compute
// stream's kernel producing it -- cannot be reproduced with eager kernels, so
// it is DETECTED: each stream keeps the clock of every other stream it is
// ordered after (through events), and a side-stream copy that reads device
// memory while another stream has a kernel or copy it is not ordered after is
// a fault (a kernel may write any device memory: no finer tracking).  As on a
// GPU: a copy from pageable host memory reads it when enqueued, one into
// pageable memory waits for the stream; pinned memory is read and written
// when the copy runs.
struct Op { uint64_t seq; std::vector<char> snap; void *dst; const void *src; size_t n; bool dd, sd; int memset_v; };
struct EmuStream {
  int id;
  bool side;
  uint64_t clock = 0;                                      // ops enqueued on it
  uint64_t last_write = 0;                                 // clock of its last op that may write device memory
  std::vector<uint64_t> seen;                              // seen[j]: how far into stream j this one is ordered
  std::vector<Op> pending;                                 // a side stream's deferred ops, in order
};
// t: the host clock (ms) when recorded: the compute stream runs each launch
// before returning, so two events' difference is the work between them
// (cudaEventElapsedTime; the profiler, cuda/profile.cu)
struct EmuEvent { EmuStream *s = nullptr; uint64_t seq = 0; std::vector<uint64_t> seen; double t = -1; };

// ---- graphs: stream capture and replay ----------------------------------------------------------------
// cudaStreamBeginCapture on the compute stream starts recording: every
// launch (runtime.cpp's run_launch hands it to capture_launch), copy and
// memset enqueued on the compute stream until cudaStreamEndCapture is
// recorded instead of run, with the caching allocator's block notes (so a
// replay's kernels are checked against the blocks live at that point of the
// captured work).  cudaGraphLaunch runs the recorded work again, in order,
// on the stream it is given: each kernel with a copy of its argument block as
// it was captured.  What CUDA forbids while a thread captures (a
// synchronisation, a blocking copy, cudaFree, cudaMalloc unless the thread
// exchanged its mode to relaxed) invalidates the capture and fails with
// cudaErrorStreamCaptureUnsupported; cudaStreamEndCapture then fails with
// cudaErrorStreamCaptureInvalidated, as on a GPU.  Only the compute stream
// captures here (the module captures nothing else).
struct GraphOp {
  enum Kind { KERNEL, COPY, MEMSET, NOTE, FORGET, HOST } kind;
  std::function<void()> host;                              // HOST: emulated library work (cuBLAS)
  Site site{ nullptr, nullptr, 0 };
  dim3 grid, block;
  size_t smem = 0;
  const void *kernel_id = nullptr;
  void (*body)(void *) = nullptr;
  std::shared_ptr<char> ctx;                               // the launch's argument block, as captured
  size_t ctx_size = 0;
  void *dst = nullptr;
  const void *src = nullptr;
  size_t n = 0, rounded = 0;
  cudaMemcpyKind ckind = cudaMemcpyDeviceToDevice;
  int v = 0;
};
struct EmuGraph { std::vector<GraphOp> ops; };
static EmuGraph *capture_graph;                            // the capture in progress (guarded by smu)
static bool capture_invalid;                               // something forbidden happened during it
static thread_local cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;   // cudaThreadExchangeStreamCaptureMode

// a copy (memset_v < 0) or memset on s while the compute stream captures: recorded; caller holds smu
static bool host_pinned(const void *p, size_t n);
static bool capture_copy(EmuStream *s, void *dst, const void *src, size_t n, cudaMemcpyKind kind, int memset_v) {
  if (!capture_graph || s->side) return false;
  // a copy from or to pageable host memory is synchronous for the host: CUDA
  // refuses it while capturing (a graph would read host memory at replay)
  bool hs = memset_v < 0 && (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost || (kind == cudaMemcpyDefault && !is_device(src)));
  bool hd = memset_v < 0 && (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost || (kind == cudaMemcpyDefault && !is_device(dst)));
  if ((hs && !host_pinned(src, n)) || (hd && !host_pinned(dst, n))) {
    if (!capture_invalid) report("cudaMemcpyAsync with pageable host memory while the compute stream is capturing a graph: the capture is invalidated");
    capture_invalid = true;
    fail(cudaErrorStreamCaptureUnsupported);
    return true;
  }
  GraphOp o{};
  o.kind = memset_v >= 0 ? GraphOp::MEMSET : GraphOp::COPY;
  o.dst = dst; o.src = src; o.n = n; o.ckind = kind; o.v = memset_v;
  capture_graph->ops.push_back(std::move(o));
  return true;
}
static double host_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
static std::mutex smu;                                     // the streams' state (taken before mu, never inside it)
// by id; [0] the compute stream; nullptr once destroyed.  Never destroyed
// itself (as smem_optin): static destructors at exit must not orphan the streams
static std::vector<EmuStream *> &streams = *new std::vector<EmuStream *>;
static bool compute_created;

static EmuStream *compute_stream(void) {
  if (streams.empty()) streams.push_back(new EmuStream{ 0, false, 0, 0, {}, {} });
  return streams[0];
}
// caller holds smu
static EmuStream *stream_of(cudaStream_t s) {
  if (s == the_stream() || (uintptr_t)s <= 2) return compute_stream();
  for (EmuStream *x : streams) if (x && (cudaStream_t)x == s) return x;
  return nullptr;
}
bool emu::stream_known(cudaStream_t s) { std::lock_guard<std::mutex> g(smu); return stream_of(s) != nullptr; }
static uint64_t seen_of(EmuStream *s, int j) { return (size_t)j < s->seen.size() ? s->seen[j] : 0; }
static void set_seen(EmuStream *s, int j, uint64_t v) { if (s->seen.size() <= (size_t)j) s->seen.resize((size_t)j + 1, 0); if (s->seen[j] < v) s->seen[j] = v; }

// Device-side operands of copies and memsets must be device memory, whole: a
// wrong size or pointer in the module's bookkeeping fails here, not silently.
static cudaError_t check_side(const void *p, size_t n, bool device, const char *what) {
  if (!device || n == 0) return cudaSuccess;
  if (range_ok(p, n)) return cudaSuccess;
  std::string where = describe_address((uintptr_t)p);       // (it takes mu itself: holding it here deadlocked)
  report("%s: %zu bytes at %p are not device memory (%s)", what, n, p, where.c_str());
  return fail(cudaErrorInvalidValue);
}
static bool host_pinned(const void *p, size_t n) {
  std::lock_guard<std::mutex> g(mu);
  auto r = raw.upper_bound((uintptr_t)p);
  if (r == raw.begin()) return false;
  --r;
  return r->second.pinned && (uintptr_t)p >= r->first && (uintptr_t)p + n <= r->second.end;
}

// runs a deferred op; its device side is checked now (it may have been freed since it was enqueued)
static void run_op(Op &o) {
  if (o.memset_v >= 0) {
    if (!range_ok(o.dst, o.n)) { set_fault(cudaErrorIllegalAddress, "a memset deferred on a side stream ran after its device memory was freed"); report("a memset deferred on a side stream ran after its %zu bytes at %p were freed", o.n, o.dst); return; }
    memset(o.dst, o.memset_v, o.n);
    return;
  }
  if ((o.dd && !range_ok(o.dst, o.n)) || (o.sd && !range_ok(o.src, o.n))) {
    char buf[300];
    snprintf(buf, sizeof buf, "a copy deferred on a side stream ran after its device %s (%zu bytes at %p) was freed: it was not kept alive until the copy was waited for",
             o.sd && !range_ok(o.src, o.n) ? "source" : "destination", o.n, o.sd && !range_ok(o.src, o.n) ? o.src : o.dst);
    report("%s", buf);
    set_fault(cudaErrorIllegalAddress, buf);
    return;
  }
  memmove(o.dst, o.snap.empty() ? o.src : o.snap.data(), o.n);
}
// runs s's deferred ops up to and including clock `upto`; caller holds smu
static void flush(EmuStream *s, uint64_t upto) {
  size_t k = 0;
  while (k < s->pending.size() && s->pending[k].seq <= upto) run_op(s->pending[k++]);
  s->pending.erase(s->pending.begin(), s->pending.begin() + (long)k);
}
static void flush_all(void) { for (EmuStream *x : streams) if (x) flush(x, UINT64_MAX); }

void emu::stream_note_write(cudaStream_t st) {
  std::lock_guard<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s) return;
  flush(s, UINT64_MAX);                                    // a kernel runs now: what was queued before it runs first
  s->last_write = ++s->clock;
  set_seen(s, s->id, s->clock);
}

// A side-stream op that reads device memory must be ordered after every other
// stream's last op that may have written it; caller holds smu.
static void check_ordered(EmuStream *s, const char *what) {
  for (EmuStream *o : streams) {
    if (!o || o == s || !o->last_write || seen_of(s, o->id) >= o->last_write) continue;
    char buf[600];
    snprintf(buf, sizeof buf, "%s on side stream %d reads device memory that %s stream%s op %llu (a kernel or copy) may still be writing: "
             "no event orders it after that op (a missing cudaStreamWaitEvent; the stream has waited up to op %llu)",
             what, s->id, o->side ? "side" : "the compute", o->side ? "'s" : "'s", (unsigned long long)o->last_write,
             (unsigned long long)seen_of(s, o->id));
    report("%s", buf);
    set_fault(cudaErrorLaunchFailure, buf);
    return;
  }
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t st) {
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
  std::unique_lock<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (capture_copy(s, dst, src, n, kind, -1)) return capture_invalid ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
  uint64_t seq = ++s->clock;
  set_seen(s, s->id, seq);
  if (dd) s->last_write = seq;
  if (!s->side) {
    g.unlock();
    memmove(dst, src, n);
    if (kind == cudaMemcpyDeviceToHost || (!dd && sd)) return take_fault();   // the copy waits for the stream: a fault shows here
    return cudaSuccess;
  }
  if (sd) check_ordered(s, "cudaMemcpyAsync");
  Op o{ seq, {}, dst, src, n, dd, sd, -1 };
  if (!sd && !host_pinned(src, n)) o.snap.assign((const char *)src, (const char *)src + n);   // pageable: staged now
  s->pending.push_back(std::move(o));
  if (!dd && !host_pinned(dst, n)) {                       // into pageable memory: synchronous for the host
    flush(s, UINT64_MAX);
    g.unlock();
    return take_fault();
  }
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
  if (cudaError_t e = capture_forbids("cudaMemcpy (a blocking copy)")) return e;
  cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
  return e != cudaSuccess ? e : take_fault();
}

EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
  if (n == 0) return cudaSuccess;
  cudaError_t e = check_side(p, n, true, "cudaMemset");
  if (e) return e;
  std::unique_lock<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (capture_copy(s, p, nullptr, n, cudaMemcpyDeviceToDevice, v & 0xff)) return cudaSuccess;
  s->last_write = ++s->clock;
  set_seen(s, s->id, s->clock);
  if (s->side) { s->pending.push_back(Op{ s->clock, {}, p, nullptr, n, true, false, v & 0xff }); return cudaSuccess; }
  g.unlock();
  memset(p, v, n);
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, nullptr); }
EXPORT cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > pitch) return fail(cudaErrorInvalidPitchValue);
  cudaError_t e = check_side(p, pitch * (height - 1) + width, true, "cudaMemset2D");
  if (e) return e;
  for (size_t r = 0; r < height; r++) if ((e = cudaMemsetAsync((char *)p + r * pitch, v, width, s))) return e;
  return cudaSuccess;
}

static cudaError_t create_stream(cudaStream_t *s) {
  std::lock_guard<std::mutex> g(smu);
  compute_stream();
  if (!compute_created) { compute_created = true; *s = the_stream(); return cudaSuccess; }
  EmuStream *x = new EmuStream{ (int)streams.size(), true, 0, 0, {}, {} };
  streams.push_back(x);
  *s = (cudaStream_t)x;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) { (void)flags; return create_stream(s); }
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { return create_stream(s); }
// priorities order nothing here
EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority) { (void)flags; (void)priority; return create_stream(s); }
EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) { if (least) *least = 0; if (greatest) *greatest = -5; return cudaSuccess; }
// as on a GPU, work left on a destroyed stream still runs
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t st) {
  std::lock_guard<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (!s->side) return cudaSuccess;
  flush(s, UINT64_MAX);
  streams[(size_t)s->id] = nullptr;
  delete s;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t st) {
  if (cudaError_t e = capture_forbids("cudaStreamSynchronize")) return e;
  {
    std::lock_guard<std::mutex> g(smu);
    EmuStream *s = stream_of(st);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    flush(s, UINT64_MAX);
  }
  return take_fault();
}
EXPORT cudaError_t cudaDeviceSynchronize(void) {
  if (cudaError_t e = capture_forbids("cudaDeviceSynchronize")) return e;
  { std::lock_guard<std::mutex> g(smu); flush_all(); }
  return take_fault();
}
EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) { (void)flags; *e = (cudaEvent_t) new EmuEvent; return cudaSuccess; }
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) { delete (EmuEvent *)e; return cudaSuccess; }
EXPORT cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  EmuEvent *e = (EmuEvent *)ev;
  e->s = s; e->seq = s->clock; e->seen = s->seen; e->t = host_ms();
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!ms || !a || !b) return fail(cudaErrorInvalidValue);
  EmuEvent *x = (EmuEvent *)a, *y = (EmuEvent *)b;
  if (x->t < 0 || y->t < 0) return fail(cudaErrorInvalidResourceHandle);   // never recorded
  *ms = (float)(y->t - x->t);
  return cudaSuccess;
}
// the event's work runs now (it is waited for); a stream of a destroyed event's stream has nothing left
static void complete(EmuEvent *e) {
  if (!e->s) return;
  for (EmuStream *x : streams) if (x == e->s) { flush(x, e->seq); return; }
}
EXPORT cudaError_t cudaEventQuery(cudaEvent_t ev) { { std::lock_guard<std::mutex> g(smu); complete((EmuEvent *)ev); } return take_fault(); }
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  if (cudaError_t e = capture_forbids("cudaEventSynchronize")) return e;
  { std::lock_guard<std::mutex> g(smu); complete((EmuEvent *)ev); } return take_fault(); }
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags) {
  (void)flags;
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  EmuEvent *e = (EmuEvent *)ev;
  if (!e->s) return cudaSuccess;                           // never recorded: nothing to wait for
  complete(e);
  if (s->side) flush(s, UINT64_MAX);                       // (keeps a side stream's own order simple: what it queued runs first)
  for (size_t j = 0; j < e->seen.size(); j++) set_seen(s, (int)j, e->seen[j]);
  return cudaSuccess;
}

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
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
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
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
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

// ---- graphs (see "graphs: stream capture and replay" above) ------------------------------------------------
static cudaError_t capture_forbids(const char *what) {
  std::lock_guard<std::mutex> g(smu);
  if (!capture_graph) return cudaSuccess;
  bool relaxed_ok = capture_mode == cudaStreamCaptureModeRelaxed && (!strcmp(what, "cudaMalloc"));
  if (relaxed_ok) return cudaSuccess;
  if (!capture_invalid) report("%s while the compute stream is capturing a graph: the capture is invalidated", what);
  capture_invalid = true;
  return fail(cudaErrorStreamCaptureUnsupported);
}

bool emu::capture_launch(const Site &site, const Config &cfg, const void *kernel_id, void (*body)(void *), const void *ctx, size_t ctx_size) {
  std::lock_guard<std::mutex> g(smu);
  if (!capture_graph) return false;
  EmuStream *s = stream_of(cfg.stream);
  if (!s || s->side) return false;
  GraphOp o{};
  o.kind = GraphOp::KERNEL;
  o.site = site;
  o.grid = cfg.grid; o.block = cfg.block; o.smem = cfg.smem;
  o.kernel_id = kernel_id;
  o.body = body;
  size_t cap = (ctx_size + 63) & ~(size_t)63;
  char *copy = (char *)aligned_alloc(64, cap ? cap : 64);
  if (!copy) { capture_invalid = true; report("out of host memory recording a launch into a graph"); return true; }
  memcpy(copy, ctx, ctx_size);                             // kernel parameters are trivially copyable, as CUDA requires
  o.ctx = std::shared_ptr<char>(copy, free);
  o.ctx_size = ctx_size;
  capture_graph->ops.push_back(std::move(o));
  return true;
}

bool emu::capture_host_work(cudaStream_t st, std::function<void()> fn) {
  std::lock_guard<std::mutex> g(smu);
  if (!capture_graph) return false;
  EmuStream *s = stream_of(st);
  if (!s || s->side) return false;
  GraphOp o{};
  o.kind = GraphOp::HOST;
  o.host = std::move(fn);
  capture_graph->ops.push_back(std::move(o));
  return true;
}

void emu::capture_block_note(void *p, size_t request, size_t rounded, bool forget) {
  std::lock_guard<std::mutex> g(smu);
  if (!capture_graph) return;
  GraphOp o{};
  o.kind = forget ? GraphOp::FORGET : GraphOp::NOTE;
  o.dst = p; o.n = request; o.rounded = rounded;
  capture_graph->ops.push_back(std::move(o));
}

EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode mode) {
  std::lock_guard<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (s->side || (uintptr_t)st <= 2) { report("cudaStreamBeginCapture: only the module's compute stream captures on the emulated device"); return fail(cudaErrorNotSupported); }
  if (capture_graph) return fail(cudaErrorIllegalState);
  capture_graph = new EmuGraph;
  capture_invalid = false;
  capture_mode = mode;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t st, cudaStreamCaptureStatus *status) {
  std::lock_guard<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s || !status) return fail(cudaErrorInvalidValue);
  *status = !capture_graph || s->side ? cudaStreamCaptureStatusNone : capture_invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph) {
  std::lock_guard<std::mutex> g(smu);
  EmuStream *s = stream_of(st);
  if (!s || !graph) return fail(cudaErrorInvalidValue);
  *graph = nullptr;
  if (!capture_graph || s->side) return fail(cudaErrorIllegalState);
  EmuGraph *done = capture_graph;
  capture_graph = nullptr;
  capture_mode = cudaStreamCaptureModeGlobal;
  if (capture_invalid) { delete done; capture_invalid = false; return fail(cudaErrorStreamCaptureInvalidated); }
  *graph = (cudaGraph_t)done;
  return cudaSuccess;
}
EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode *mode) {
  if (!mode) return fail(cudaErrorInvalidValue);
  cudaStreamCaptureMode old = capture_mode;
  capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}
EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
  (void)flags;
  if (!exec || !graph) return fail(cudaErrorInvalidValue);
  *exec = (cudaGraphExec_t) new EmuGraph(*(EmuGraph *)graph);
  return cudaSuccess;
}
EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) { delete (EmuGraph *)graph; return cudaSuccess; }
EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete (EmuGraph *)exec; return cudaSuccess; }
// Runs the recorded work on st in order: kernels through run_launch (checked
// as any launch: a fault is reported at the next synchronisation), copies and
// memsets through the API above, the block notes into the checker's map.
EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st) {
  if (!exec) return fail(cudaErrorInvalidValue);
  if (!stream_known(st)) return fail(cudaErrorInvalidResourceHandle);
  EmuGraph *x = (EmuGraph *)exec;
  for (GraphOp &o : x->ops) {
    cudaError_t e = cudaSuccess;
    switch (o.kind) {
      case GraphOp::KERNEL:
        last_error = cudaSuccess;                          // (the module clears it after every launch)
        run_launch(o.site, Config(o.grid, o.block, o.smem, st), o.kernel_id, o.body, o.ctx.get(), o.ctx_size);
        e = last_error;
        break;
      case GraphOp::COPY: e = cudaMemcpyAsync(o.dst, o.src, o.n, o.ckind, st); break;
      case GraphOp::MEMSET: e = cudaMemsetAsync(o.dst, o.v, o.n, st); break;
      case GraphOp::NOTE: emu_note_block_replayed(o.dst, o.n, o.rounded); break;
      case GraphOp::FORGET: emu_forget_block(o.dst); break;
      case GraphOp::HOST: o.host(); break;
    }
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
