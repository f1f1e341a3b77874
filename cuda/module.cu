// module.cu — entry point of nabla_cuda.so: nabla_cuda_init (called once by
// the loader in tensor/tdevice.c), the stream, error reporting, cross-device
// copies, and the strided-geometry helper every kernel file uses.
#include "common.cuh"
#include "cuda/graph.h"
#include "cuda/plan.h"
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <array>
#include <new>
#include <exception>
#include <utility>
#include <mutex>
#include <atomic>

namespace ncu {

const nt_HostApi *host;
static nt_HostApi host_copy;
cudaStream_t stream;
int num_sms = 1;
const char *last_op = "(none)";
DevError *dev_err;                     // device view of the mapped slot
static DevError *host_err;             // host view of the same memory
static int device_count_;
static int check_slot(uint64_t epoch);
// Held from closing an epoch through reading the error slot, so syncs on two
// threads (the interpreter's, dist's communication thread) close and check in
// the same order: the slot's error then always belongs to the epoch closed
// or the one after it (tensor/tdevice.c, epoch_failed).
static std::mutex sync_mu;

int device;

// ---- counters (common.cuh "counters") -------------------------------------------------------
static std::atomic<int64_t> counters[C_NCOUNTERS];
static std::atomic<int64_t> by_op[NT_OP_TABLE_SIZE + 1];   // [NT_OP_TABLE_SIZE]: outside any op
thread_local int current_op = NT_OP_TABLE_SIZE;
static_assert(NT_CUDA_STATS_OPS == NT_OP_TABLE_SIZE + 1, "nt_CudaStats.by_op has a slot per op id plus one");
static_assert(sizeof(nt_CudaStats) == (C_NCOUNTERS + NT_CUDA_STATS_OPS) * sizeof(int64_t), "one Counter per nt_CudaStats field");

void count(Counter c) {
  counters[c].fetch_add(1, std::memory_order_relaxed);
  if (c <= C_MEMSETS) by_op[current_op].fetch_add(1, std::memory_order_relaxed);   // a GPU operation
}
void count_copy(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToDevice: count(C_H2D); break;
    case cudaMemcpyDeviceToHost: count(C_D2H); break;
    case cudaMemcpyDeviceToDevice: count(C_D2D); break;
    default: count(C_D2D); break;      // the module never asks for another kind; counted, not lost
  }
}
int stats_read(nt_CudaStats *out) {
  int64_t *f = &out->launches;         // the fields, in Counter order (static_assert above)
  for (int i = 0; i < C_NCOUNTERS; i++) f[i] = counters[i].load(std::memory_order_relaxed);
  for (int i = 0; i < NT_CUDA_STATS_OPS; i++) out->by_op[i] = by_op[i].load(std::memory_order_relaxed);
  return 0;
}
void stats_reset(void) {
  for (auto &c : counters) c.store(0, std::memory_order_relaxed);
  for (auto &c : by_op) c.store(0, std::memory_order_relaxed);
}

// Errors after which the context is unusable: every later CUDA call returns them.
static bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorAssert: case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction: case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc: case cudaErrorLaunchTimeout: case cudaErrorECCUncorrectable:
      return true;
    default: return false;
  }
}

// Sets the report of error e (plan.h words it).  `op`: the op being launched
// (NCP_AT_LAUNCH); `before`: the op launched before this point.
static int report_cuda_error(cudaError_t e, int where, const char *op, const char *before) {
  char msg[900];
  ncp_cuda_error_text(msg, sizeof msg, cudaGetErrorName(e), cudaGetErrorString(e), is_sticky(e), host->sync_launches, where, op,
                      before);
  cudaGetLastError();                  // clear non-sticky errors so later calls work
  host->error_set("%s", msg);
  return -1;
}

int cuda_fail(cudaError_t e, const char *what, const char *file, int line) {
  (void)file; (void)line;
  if (is_sticky(e)) return report_cuda_error(e, NCP_AT_SYNC, what, last_op);   // an earlier kernel's fault
  cudaGetLastError();                  // clear non-sticky errors so later calls work
  host->error_set("CUDA error in %s: %s (%s); last op launched: %s", what, cudaGetErrorString(e), cudaGetErrorName(e), last_op);
  return -1;
}

// The check after a launch.  cudaGetLastError returns this launch's own
// configuration error, or the sticky fault of an earlier kernel: the two are
// told apart, so an earlier kernel's fault is never blamed on `op`.  Under
// NABLA_CUDA_SYNC=1 the stream is waited for here: a fault, or a data error
// in the error slot, then names the op that raised it.
int launched(const char *op) {
  count(C_LAUNCHES);
  const char *before = last_op;
  last_op = op;
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && host->sync_launches) {
    if (capture_gate("NABLA_CUDA_SYNC=1 (a wait after every launch)")) return -1;
    if (comms_wait_all()) return -1;   // the stream may wait on a collective: bounded there
    std::lock_guard<std::mutex> lk(sync_mu);
    uint64_t epoch = host->epoch_close();
    e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess) return check_slot(epoch);
  }
  if (e == cudaSuccess) return 0;
  return report_cuda_error(e, NCP_AT_LAUNCH, op, before);
}

int bind_device(void) {
  static thread_local int bound = -1;
  if (bound == device) return 0;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_fail(e, "cudaSetDevice", __FILE__, __LINE__);
  bound = device;
  return 0;
}

int exception_to_error(const char *what) {
  try {
    throw;
  } catch (const std::bad_alloc &) {
    host->error_set("%s: out of host memory (the CUDA module's bookkeeping could not allocate)", what);
  } catch (const std::exception &x) {
    host->error_set("%s: internal error in the CUDA module: %s", what, x.what());
  } catch (...) {
    host->error_set("%s: internal error in the CUDA module (unknown C++ exception)", what);
  }
  return -1;
}

// Reports (and clears) the device-side error slot.  Call only after a sync,
// the one that closed `epoch` (host->epoch_close() right before the wait): an
// error makes the epoch's results unusable (tensor/textend.h nt_dev_check).
static int check_slot(uint64_t epoch) {
  DevError e;
  memcpy(&e, (const void *)host_err, sizeof e);   // written by kernels; coherent after the stream sync
  if (e.code == DEVERR_NONE) return 0;
  memset((void *)host_err, 0, sizeof *host_err);
  const char *op = host->op_name(e.op);
  char msg[400];
  switch (e.code) {
    case DEVERR_INDEX:
      if (e.c >= 0)
        snprintf(msg, sizeof msg, "%s: index %lld is out of bounds for axis %lld with size %lld (detected on the GPU, reported at synchronization)",
                 op, e.a, e.c, e.b);
      else
        snprintf(msg, sizeof msg, "%s: index %lld is out of bounds for size %lld (detected on the GPU, reported at synchronization)", op, e.a, e.b);
      break;
    case DEVERR_ZERODIV:
      snprintf(msg, sizeof msg, "%s: integer division by zero (detected on the GPU, reported at synchronization)", op);
      break;
    case DEVERR_TARGET:
      snprintf(msg, sizeof msg, "%s: target %lld (row %lld) is out of bounds for %lld classes", op, e.a, e.c, e.b);
      break;
    default:
      snprintf(msg, sizeof msg, "%s: device-side error %d", op, e.code);
  }
  host->epoch_failed(epoch, msg);
  host->error_set("%s", msg);
  return -1;
}

int sync_stream(void) {
  if (bind_device()) return -1;
  if (capture_gate("a host wait for the GPU (item, tolist, printing, a copy to the host, cuda.synchronize)")) return -1;
  if (comms_wait_all()) return -1;     // collectives first: bounded by their timeout, a hung one is aborted
  std::lock_guard<std::mutex> lk(sync_mu);
  uint64_t epoch = host->epoch_close();
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return report_cuda_error(e, NCP_AT_SYNC, nullptr, last_op);
  return check_slot(epoch);
}

// ---- geometry -----------------------------------------------------------------------------
Geom make_geom(int nop, nt_Tensor *const *ops, bool *all_contig) {
  Geom g;
  g.nop = nop;
  const nt_Tensor *t0 = ops[0];
  bool contig = true;
  for (int k = 0; k < nop; k++)
    if (!(ops[k]->flags & NT_T_CONTIG) || ops[k]->numel != t0->numel) contig = false;
  // A broadcast view can carry NT_T_CONTIG only when it is not expanded; check strides too.
  // Coalescing is the CPU iterator's (tensor/tpure.c), in elements.
  const int64_t unit[kMaxOps] = { 1, 1, 1, 1 };
  int n = nt_coalesce_dims(nop, ops, t0->shape, t0->ndim, unit, g.shape, g.stride);
  if (n == 0) { g.shape[0] = 1; for (int k = 0; k < nop; k++) g.stride[k][0] = 1; n = 1; }
  g.ndim = n;
  // After coalescing, "contiguous" means one dim with unit stride for everyone.
  if (contig) {
    contig = n == 1;
    for (int k = 0; contig && k < nop; k++) contig = g.stride[k][0] == 1 || g.shape[0] == 1;
  }
  *all_contig = contig;
  return g;
}

// ---- allocator table for the core ----------------------------------------------------------
// Entry points from C: bind the device, let no exception out.
static void *core_alloc(size_t n) {
  void *p = nullptr;
  if (guarded("cuda allocator", [&] { return bind_device() ? -1 : (p = dev_alloc(n)) ? 0 : -1; })) return nullptr;
  return p;
}
static void core_free(void *p) { guarded("cuda allocator", [&] { dev_free(p); return 0; }); }

// Copies between host and device (or device and device) on the stream.  A copy
// to the host waits for it (and so reports any pending asynchronous error).
static int core_memcpy(void *dst, nt_Device dd, const void *src, nt_Device sd, size_t n) {
  if (n == 0) return 0;
  if (bind_device()) return -1;
  if (capture_gate_copy(dd == NT_CUDA && sd == NT_CPU ? cudaMemcpyHostToDevice : dd == NT_CPU && sd == NT_CUDA ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice)) return -1;
  if (dd == NT_CUDA && sd == NT_CUDA) {
    CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
    last_op = "copy (device to device)";
    return 0;
  }
  if (dd == NT_CUDA && sd == NT_CPU) {
    // Pageable source: the runtime stages it before returning, so the caller
    // may free or reuse `src` right away.
    CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
    last_op = "copy (host to device)";
    return 0;
  }
  if (dd == NT_CPU && sd == NT_CUDA) {
    // A copy into pageable memory blocks the host until it is done: wait for
    // the collectives it may depend on first, where a hang is bounded.
    if (comms_wait_all()) return -1;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream);
    if (e != cudaSuccess) {
      // A sticky error from an earlier kernel surfaces here: report it as such.
      if (sync_stream()) return -1;
      return cuda_fail(e, "cudaMemcpyAsync (device to host)", __FILE__, __LINE__);
    }
    return sync_stream();
  }
  host->error_set("cuda allocator cannot copy from %s to %s", sd == NT_CPU ? "cpu" : "cuda", dd == NT_CPU ? "cpu" : "cuda");
  return -1;
}

static const nt_Allocator cuda_allocator = { core_alloc, core_free, core_memcpy };

// ---- side streams, events, pinned host memory (tensor/tbackend.h) -----------------------------
// For copies that overlap compute (ZeRO's offload, dist/dzero.c): a side
// stream, events ordering it against the compute stream (stream == nullptr
// below means the compute stream), page-locked host memory and asynchronous
// copies.  The caller owns the ordering: the device memory a side-stream copy
// reads or writes must stay alive, and not be reused by the compute stream,
// until the copy's event has been waited for (the caching allocator reuses a
// block on the stream that freed it without knowing about other streams).
static cudaStream_t side_of(void *s) { return s ? (cudaStream_t)s : stream; }
static void *api_stream_create(void) {
  cudaStream_t s = nullptr;
  if (bind_device()) return nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) { cuda_fail(e, "cudaStreamCreateWithFlags (a side stream)", __FILE__, __LINE__); return nullptr; }
  return (void *)s;
}
static void api_stream_destroy(void *s) { if (s && !bind_device()) cudaStreamDestroy((cudaStream_t)s); }
static void *api_event_create(void) {
  cudaEvent_t ev = nullptr;
  if (bind_device()) return nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) { cuda_fail(e, "cudaEventCreateWithFlags", __FILE__, __LINE__); return nullptr; }
  return (void *)ev;
}
static void api_event_destroy(void *ev) { if (ev && !bind_device()) cudaEventDestroy((cudaEvent_t)ev); }
static int api_event_record(void *ev, void *s) {
  if (bind_device()) return -1;
  if (capture_gate("an event recorded inside the step")) return -1;
  CU(cudaEventRecord((cudaEvent_t)ev, side_of(s)));
  return 0;
}
static int api_stream_wait(void *s, void *ev) {
  if (bind_device()) return -1;
  if (capture_gate("a stream waiting for an event inside the step")) return -1;
  CU(cudaStreamWaitEvent(side_of(s), (cudaEvent_t)ev, 0));
  return 0;
}
// The host waits for the event; a fault raised meanwhile is reported as at a
// synchronisation (the error slot of kernels that ran before it too).
static int api_event_wait(void *ev) {
  if (bind_device()) return -1;
  cudaError_t e = cudaEventSynchronize((cudaEvent_t)ev);
  if (e != cudaSuccess) return sync_stream() ? -1 : cuda_fail(e, "cudaEventSynchronize", __FILE__, __LINE__);
  return 0;
}
static void *api_host_alloc(size_t n) {
  void *p = nullptr;
  if (bind_device()) return nullptr;
  if (capture_gate("pinned host memory allocated inside the step")) return nullptr;
  cudaError_t e = cudaHostAlloc(&p, n ? n : 1, cudaHostAllocDefault);
  if (e != cudaSuccess) { cudaGetLastError(); host->error_set("cannot allocate %zu bytes of pinned host memory: %s", n, cudaGetErrorString(e)); return nullptr; }
  return p;
}
static void api_host_free(void *p) { if (p && !bind_device()) cudaFreeHost(p); }
// to_device: host -> device, else device -> host; on stream s (nullptr: compute)
static int api_copy_async(void *dst, const void *src, size_t n, int to_device, void *s) {
  if (n == 0) return 0;
  if (bind_device()) return -1;
  if (capture_gate("an asynchronous copy between host and device")) return -1;
  CU(cudaMemcpyAsync(dst, src, n, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, side_of(s)));
  return 0;
}

// ---- device API for the loader ----------------------------------------------------------------
static int api_device_count(void) { return device_count_; }
static int api_synchronize(void) { return sync_stream(); }
static int api_stats(nt_CudaStats *s) { return stats_read(s); }
static int api_memory(size_t *a, size_t *c, size_t *p) { alloc_stats(a, c, p); return 0; }
static int api_device_name(char *out, size_t n) {
  int dev = 0;
  cudaDeviceProp prop;
  CU(cudaGetDevice(&dev));
  CU(cudaGetDeviceProperties(&prop, dev));
  snprintf(out, n, "%s", prop.name);
  return 0;
}
static int api_empty_cache(void) {
  if (sync_stream()) return -1;
  return guarded("cuda.empty_cache", [] { return alloc_empty_cache(); });
}

// ---- kernels: every one reached through a trampoline that binds the device
// and catches exceptions.  One trampoline per op id (a template instance),
// so nothing depends on the caller filling nt_KernelArgs.op.
static nt_Kernel module_kernels[NT_OP_TABLE_SIZE];
static void (*core_register_kernel)(int op, nt_Device dev, int (*fn)(const struct nt_KernelArgs *));

// current_op names OP for the counters while its kernel runs (restored after:
// a kernel may run another op's kernel, e.g. copy_into).
struct CurrentOp {
  int saved;
  explicit CurrentOp(int op) : saved(current_op) { current_op = op; }
  ~CurrentOp() { current_op = saved; }
};
template <size_t OP> static int kernel_entry(const nt_KernelArgs *a) {
  if (bind_device()) return -1;
  CurrentOp in_op((int)OP);
  try { return module_kernels[OP](a); } catch (...) { return exception_to_error(host->op_name((int)OP)); }
}
template <size_t... OP> static constexpr std::array<nt_Kernel, sizeof...(OP)> kernel_entries(std::index_sequence<OP...>) {
  return { { &kernel_entry<OP>... } };
}
static constexpr std::array<nt_Kernel, NT_OP_TABLE_SIZE> entries = kernel_entries(std::make_index_sequence<NT_OP_TABLE_SIZE>());

static void register_guarded(int op, nt_Device dev, int (*fn)(const struct nt_KernelArgs *)) {
  if (op < 0 || op >= NT_OP_TABLE_SIZE || dev != NT_CUDA || !fn) { core_register_kernel(op, dev, fn); return; }
  module_kernels[op] = fn;
  core_register_kernel(op, dev, entries[op]);
}

void register_norm(void);   // norm.cu: batch_norm, group_norm, instance_norm
void register_rnn(void);    // rnn.cu: the fused recurrent cells
void register_layers(void); // layers.cu: issue 29's activations
void register_solver(void); // solver.cu: linalg's factorizations (cuSOLVER)
void register_fft(void);    // fft.cu: torch.fft's transforms (cuFFT)
void register_index(void);  // index.cu: nonzero, histc, isin
void register_distributions(void); // distributions.cu: reparameterisation gradients
void register_scan(void);   // scan.cu: cumsum, cumprod, logcumsumexp, cummax/cummin (one launch each)
}  // namespace ncu

using namespace ncu;

static int init_module(nt_DeviceApi *api, char *reason, size_t n);
namespace ncu { void profile_fill_api(nt_DeviceApi *api); }   // profile.cu
namespace ncu { void graph_fill_api(nt_DeviceApi *api); }     // graph.cu: CUDA graph capture and replay
namespace ncu { void register_fuse_rtc(void); }   // fuse_rtc.cu: fused chains compiled at run time

extern "C" __attribute__((visibility("default")))
int nabla_cuda_init(const nt_HostApi *h, nt_DeviceApi *api, char *reason, size_t n) {
  if (!h || h->abi_version != NT_DEVICE_ABI_VERSION || h->sizeof_tensor != sizeof(nt_Tensor) ||
      h->sizeof_kernel_args != sizeof(nt_KernelArgs)) {
    snprintf(reason, n, "nabla_cuda.so was built for another version of nabla (ABI mismatch): rebuild it");
    return -1;
  }
  host_copy = *h;
  core_register_kernel = h->register_kernel;
  host_copy.register_kernel = register_guarded;   // every register_* below goes through it
  host = &host_copy;
  if (!guarded("nabla_cuda_init", [&] { return init_module(api, reason, n); })) return 0;
  if (!reason[0]) snprintf(reason, n, "%s", host->error_msg());
  return -1;
}

static int init_module(nt_DeviceApi *api, char *reason, size_t n) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (e != cudaSuccess)
      snprintf(reason, n, "no CUDA device (device count 0): cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    else
      snprintf(reason, n, "no CUDA device (device count 0)");
    cudaGetLastError();
    return -1;
  }
  device_count_ = count;
  int dev = 0;
  const char *want = getenv("NABLA_CUDA_DEVICE");
  if (want && *want) dev = atoi(want);
  if (dev < 0 || dev >= count) { snprintf(reason, n, "NABLA_CUDA_DEVICE=%d but there are %d devices", dev, count); return -1; }
  device = dev;
#define INIT_CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    snprintf(reason, n, "%s failed: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); cudaGetLastError(); return -1; } } while (0)
  INIT_CHECK(cudaSetDevice(dev));
  INIT_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
  INIT_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  INIT_CHECK(cudaHostAlloc((void **)&host_err, sizeof(DevError), cudaHostAllocMapped));
  memset((void *)host_err, 0, sizeof(DevError));
  INIT_CHECK(cudaHostGetDevicePointer((void **)&dev_err, host_err, 0));
#undef INIT_CHECK
  if (alloc_init()) { snprintf(reason, n, "allocator: %s", host->error_msg()); return -1; }
  if (register_matmul() || sdpa_gemm_init()) { snprintf(reason, n, "cuBLAS: %s", host->error_msg()); return -1; }
  host->register_allocator(NT_CUDA, &cuda_allocator);
  register_elementwise();
  register_reduce();
  register_random();
  register_nn();
  register_optim();
  register_conv();
  register_sort();
  register_attention();
  register_norm();
  register_rnn();
  register_layers();
  register_solver();
  register_fft();
  register_index();
  register_distributions();
  register_scan();
  register_fuse_rtc();
  api->device_count = api_device_count;
  api->synchronize = api_synchronize;
  api->memory = api_memory;
  api->empty_cache = api_empty_cache;
  api->device_name = api_device_name;
  api->stream_create = api_stream_create;
  api->stream_destroy = api_stream_destroy;
  api->event_create = api_event_create;
  api->event_destroy = api_event_destroy;
  api->event_record = api_event_record;
  api->stream_wait = api_stream_wait;
  api->event_wait = api_event_wait;
  api->host_alloc = api_host_alloc;
  api->host_free = api_host_free;
  api->copy_async = api_copy_async;
  api->stats = api_stats;
  api->reset_stats = stats_reset;
  nccl_fill_api(api);   // nccl.cu: NCCL collectives (libnccl loaded lazily) and pinned staging
  profile_fill_api(api);   // profile.cu: the profiler's timing events
  graph_fill_api(api);     // graph.cu: capture the compute stream into a graph, replay it
  return 0;
}
