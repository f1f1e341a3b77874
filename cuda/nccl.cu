// nccl.cu — collectives between processes on CUDA buffers (NCCL), and the
// pinned staging buffer the ring backend copies CUDA tensors through.  The
// contracts are in tensor/tdevice.h (nt_cuda_comm_*, nt_cuda_staging); the
// core reaches these functions through nt_DeviceApi (nccl_fill_api).
//
// libnccl.so.2 is dlopened LAZILY, the first time a comm function is called,
// so the module (and CUDA tensors) work on machines without NCCL.  Where:
// $NABLA_NCCL_LIBRARY, else the default search (LD_LIBRARY_PATH, this
// module's RUNPATH /usr/local/cuda/lib64:lib, the ld.so cache), else
// /usr/local/cuda/lib64 and /usr/local/cuda/lib explicitly.  Failure reads
//     "NCCL is not available: <dlerror of the first attempt>".
// Types come from <nccl.h>; the functions are dlsym'd into a table typed with
// decltype, so the module does not link against NCCL.
//
// Every communicator is NON-BLOCKING (ncclConfig_t.blocking = 0): calls may
// return ncclInProgress and we poll ncclCommGetAsyncError.
//
// Streams (the design of PyTorch's ProcessGroupNCCL): each communicator owns
// a high-priority COMMUNICATION stream.  A collective is ordered after the
// work already queued on the compute stream (ncu::stream) by an event
// recorded there and waited for by the communication stream; an event
// recorded after it ("after") is what consumers wait for:
//   * nt_cuda_comm_all_reduce & co: the compute stream waits for "after"
//     at once (on the device: the host does not block), so the next op sees
//     the result;
//   * nt_cuda_comm_all_reduce_async (the data-parallel reducer): nothing
//     waits yet, so backward compute overlaps the collective; the reducer
//     calls nt_cuda_comm_join before it reads the buckets.
// The HOST waits only where it needs a value or synchronises: sync_stream
// (device->host copies, nt_cuda_synchronize) first calls comms_wait_all,
// which polls "after" of every communicator with work outstanding together
// with its async error, the interrupt flag and the timeout.  An error, an
// interrupt or a timeout aborts the communicator (ncclCommAbort: kernels
// stuck waiting on a dead peer exit, so both streams drain) and every later
// call on it fails at once.  So a collective hung on a dead peer ends in an
// error after the timeout, wherever the host first waits for it.
//
// Every entry point binds the module's device on the calling thread first
// (bind_device: the reducer's or a worker's thread never ran cudaSetDevice).
//
// NCCL needs one GPU per rank of a communicator: two processes on one GPU get
// "Duplicate GPU detected" from ncclCommInitRank (dist/ uses the ring then).
#include "common.cuh"
#include <nccl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct nt_CudaComm {
  ncclComm_t comm;              // NULL once aborted
  int nranks, rank;
  int timeout_ms;               // per operation; 0 = none
  volatile int *interrupted;    // the VM's flag (may be NULL)
  int failed;                   // an enqueue inside a group failed: group_end aborts
  char why[256];                // why it was aborted
  cudaStream_t cs;              // the communication stream
  cudaEvent_t before, after;    // compute -> comm ordering; end of the last collective
  int pending;                  // collectives enqueued since the host last waited for "after"
  const char *op;               // the last one's name (for a failure found by a later host wait)
  nt_CudaComm *next;            // the list of live communicators (comms_wait_all)
};

namespace ncu {
namespace {

// ---- the library ------------------------------------------------------------------------
struct Nccl {
  decltype(&::ncclGetVersion) GetVersion;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig;
  decltype(&::ncclCommSplit) CommSplit;                 // 2.18+; NULL before
  decltype(&::ncclCommFinalize) CommFinalize;
  decltype(&::ncclCommAbort) CommAbort;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&::ncclCommCount) CommCount;
  decltype(&::ncclCommUserRank) CommUserRank;
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetLastError) GetLastError;           // may be NULL (old versions)
  decltype(&::ncclAllReduce) AllReduce;
  decltype(&::ncclReduceScatter) ReduceScatter;
  decltype(&::ncclAllGather) AllGather;
  decltype(&::ncclBroadcast) Broadcast;
  decltype(&::ncclSend) Send;
  decltype(&::ncclRecv) Recv;
  decltype(&::ncclGroupStart) GroupStart;
  decltype(&::ncclGroupEnd) GroupEnd;
};
Nccl lib;
pthread_once_t lib_once = PTHREAD_ONCE_INIT;
bool lib_ready;
char lib_reason[600] = "not loaded";
char lib_version[32] = "";

template <typename F> bool sym(void *h, const char *name, F *out) {
  *out = (F)dlsym(h, name);
  return *out != nullptr;
}

void load_nccl(void) {
  const char *env = getenv("NABLA_NCCL_LIBRARY");
  const char *cands[4];
  int nc = 0;
  if (env && *env) cands[nc++] = env;
  else {
    cands[nc++] = "libnccl.so.2";
    cands[nc++] = "/usr/local/cuda/lib64/libnccl.so.2";
    cands[nc++] = "/usr/local/cuda/lib/libnccl.so.2";
  }
  void *h = nullptr;
  char first_err[400] = "";
  for (int i = 0; i < nc && !h; i++) {
    dlerror();
    h = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
    if (!h && !first_err[0]) {
      const char *e = dlerror();
      snprintf(first_err, sizeof first_err, "%s", e ? e : cands[i]);
    }
  }
  if (!h) { snprintf(lib_reason, sizeof lib_reason, "NCCL is not available: %s", first_err); return; }
  // required: everything but CommSplit and GetLastError
  const char *missing = nullptr;
#define REQ(f) if (!missing && !sym(h, "nccl" #f, &lib.f)) missing = "nccl" #f
  REQ(GetVersion); REQ(GetUniqueId); REQ(CommInitRankConfig); REQ(CommFinalize); REQ(CommAbort); REQ(CommDestroy);
  REQ(CommGetAsyncError); REQ(CommCount); REQ(CommUserRank); REQ(GetErrorString); REQ(AllReduce); REQ(ReduceScatter); REQ(AllGather);
  REQ(Broadcast); REQ(Send); REQ(Recv); REQ(GroupStart); REQ(GroupEnd);
#undef REQ
  sym(h, "ncclCommSplit", &lib.CommSplit);
  sym(h, "ncclGetLastError", &lib.GetLastError);
  int v = 0;
  if (!missing && lib.GetVersion(&v) == ncclSuccess) {
    // NCCL_VERSION: 2.8.x and older are X*1000+Y*100+Z, later X*10000+Y*100+Z
    if (v >= 10000) snprintf(lib_version, sizeof lib_version, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    else snprintf(lib_version, sizeof lib_version, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
  }
  if (missing) {
    snprintf(lib_reason, sizeof lib_reason, "NCCL is not available: the loaded libnccl.so.2 has no %s (version %s; 2.14 or newer is needed)",
             missing, lib_version[0] ? lib_version : "unknown");
    return;   // not dlclosed: see tdevice.c on why failures keep their handles
  }
  if (v < 21400) {
    snprintf(lib_reason, sizeof lib_reason, "NCCL is not available: version %s is too old (non-blocking communicators need 2.14 or newer)", lib_version);
    return;
  }
  lib_ready = true;
  snprintf(lib_reason, sizeof lib_reason, "ready");
}

bool nccl_ready(void) {
  pthread_once(&lib_once, load_nccl);
  return lib_ready;
}
int need_nccl(const char *op) {
  if (nccl_ready()) return 0;
  host->error_set("%s: %s", op, lib_reason);
  return -1;
}

// ---- waiting ----------------------------------------------------------------------------------
double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

// Polls without burning a core for long: yield for the first ~2000 polls
// (small collectives finish in microseconds), then sleep 50 us .. 1 ms.
struct Backoff {
  int n = 0;
  void pause() {
    if (n < 2000) { n++; sched_yield(); return; }
    long us = 50L << (n - 2000 < 5 ? n - 2000 : 5);
    if (us > 1000) us = 1000;
    n++;
    struct timespec ts = { 0, us * 1000L };
    nanosleep(&ts, nullptr);
  }
};

const char *nccl_err(nt_CudaComm *c, ncclResult_t r) {
  const char *last = lib.GetLastError && c && c->comm ? lib.GetLastError(c->comm) : nullptr;
  static char buf[400];
  snprintf(buf, sizeof buf, "%s%s%s", lib.GetErrorString(r), last && *last ? ": " : "", last && *last ? last : "");
  return buf;
}

// Aborts c's communicator (idempotent) and sets the error "<op>: <why> (the
// NCCL communicator was aborted)".
int abort_with(nt_CudaComm *c, const char *op, const char *why) {
  if (why != c->why) snprintf(c->why, sizeof c->why, "%s", why);
  if (c->comm) {
    ncclComm_t comm = c->comm;
    c->comm = nullptr;
    lib.CommAbort(comm);
  }
  host->error_set("%s: %s (the NCCL communicator was aborted)", op, why);
  return -1;
}

int check_usable(nt_CudaComm *c, const char *op) {
  if (need_nccl(op)) return -1;
  if (!c) { host->error_set("%s: no NCCL communicator", op); return -1; }
  if (!c->comm) { host->error_set("%s: the NCCL communicator was aborted by an earlier failure (%s)", op, c->why); return -1; }
  return 0;
}

// Checks interrupt and timeout; -1 (communicator aborted) when one hit.
int poll_limits(nt_CudaComm *c, const char *op, double t0) {
  if (c->interrupted && *c->interrupted) return abort_with(c, op, "interrupted");
  if (c->timeout_ms > 0 && now_ms() - t0 > c->timeout_ms) {
    char why[160];
    snprintf(why, sizeof why, "timed out after %.0f s (a peer did not take part, or is stuck or dead)", c->timeout_ms / 1e3);
    return abort_with(c, op, why);
  }
  return 0;
}

// Phase 1: the communicator has finished the call in flight (init, an
// enqueue, a group end) — ncclInProgress until then.
int wait_ready(nt_CudaComm *c, const char *op, double t0) {
  Backoff b;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = lib.CommGetAsyncError(c->comm, &st);
    if (r != ncclSuccess) return abort_with(c, op, nccl_err(c, r));
    if (st == ncclSuccess) return 0;
    if (st != ncclInProgress) return abort_with(c, op, nccl_err(c, st));
    if (poll_limits(c, op, t0)) return -1;
    b.pause();
  }
}

// ---- live communicators -----------------------------------------------------------------------
pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
nt_CudaComm *live;

void live_add(nt_CudaComm *c) {
  pthread_mutex_lock(&live_mu);
  c->next = live; live = c;
  pthread_mutex_unlock(&live_mu);
}
void live_remove(nt_CudaComm *c) {
  pthread_mutex_lock(&live_mu);
  for (nt_CudaComm **p = &live; *p; p = &(*p)->next)
    if (*p == c) { *p = c->next; break; }
  pthread_mutex_unlock(&live_mu);
}

// Host wait for everything enqueued on c (its "after" event), polling the
// communicator's async error, the interrupt flag and the timeout (counted
// from the start of this wait).  A CUDA fault found here is reported like
// sync_stream does (the context is likely unusable).
int host_wait(nt_CudaComm *c, const char *op) {
  if (!c->pending) return 0;
  double t0 = now_ms();
  Backoff b;
  for (;;) {
    cudaError_t e = cudaEventQuery(c->after);
    if (e == cudaSuccess) { c->pending = 0; return 0; }
    if (e != cudaErrorNotReady) {            // a CUDA fault: the context is likely unusable
      snprintf(c->why, sizeof c->why, "CUDA error while it ran: %s", cudaGetErrorString(e));
      c->pending = 0;
      if (c->comm) { lib.CommAbort(c->comm); c->comm = nullptr; }
      return cuda_fail(e, op, __FILE__, __LINE__);
    }
    if (!c->comm) { c->pending = 0; return 0; }   // aborted earlier: its kernels exit, nothing to wait for
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = lib.CommGetAsyncError(c->comm, &st);
    if (r != ncclSuccess) { c->pending = 0; return abort_with(c, op, nccl_err(c, r)); }
    if (st != ncclSuccess && st != ncclInProgress) { c->pending = 0; return abort_with(c, op, nccl_err(c, st)); }
    if (poll_limits(c, op, t0)) { c->pending = 0; return -1; }
    b.pause();
  }
}

int group_depth;   // > 0 between group_start and group_end

// Orders c's next collective after the work queued on the compute stream.
int order_after_compute(nt_CudaComm *c) {
  CU(cudaEventRecord(c->before, stream));
  CU(cudaStreamWaitEvent(c->cs, c->before, 0));
  return 0;
}

// After an enqueue call returned r: outside a group, wait until NCCL has
// taken it (non-blocking init/enqueue phase), mark the end of the collective
// on the communication stream and, unless `overlap`, make the compute stream
// wait for it (on the device).  Inside a group, only remember a failure for
// group_end.
int finish_call(nt_CudaComm *c, const char *op, ncclResult_t r, bool overlap = false) {
  if (r != ncclSuccess && r != ncclInProgress) {
    if (group_depth > 0) {   // aborting inside an open group would leave NCCL with a freed comm
      c->failed = 1;
      snprintf(c->why, sizeof c->why, "%s", nccl_err(c, r));
      host->error_set("%s: %s", op, c->why);
      return -1;
    }
    return abort_with(c, op, nccl_err(c, r));
  }
  if (group_depth > 0) return 0;
  if (wait_ready(c, op, now_ms())) return -1;
  CU(cudaEventRecord(c->after, c->cs));
  c->pending = 1;
  c->op = op;
  last_op = op;
  if (!overlap) CU(cudaStreamWaitEvent(stream, c->after, 0));
  return 0;
}

bool nccl_type(nt_DType dt, ncclDataType_t *out) {
  switch (dt) {
    case NT_F32: *out = ncclFloat32; return true;
    case NT_F64: *out = ncclFloat64; return true;
    case NT_F16: *out = ncclFloat16; return true;
    case NT_BF16: *out = ncclBfloat16; return true;
    case NT_I32: *out = ncclInt32; return true;
    case NT_I64: *out = ncclInt64; return true;
    case NT_U8: case NT_BOOL: *out = ncclUint8; return true;
    default: return false;
  }
}
bool nccl_op(int op, ncclRedOp_t *out) {
  switch (op) {
    case NT_COMM_SUM: *out = ncclSum; return true;
    case NT_COMM_MAX: *out = ncclMax; return true;
    case NT_COMM_MIN: *out = ncclMin; return true;
    default: return false;
  }
}
int bad_args(const char *op, nt_DType dt, int rop) {
  ncclDataType_t t = ncclFloat32; ncclRedOp_t o = ncclSum;
  if (!nccl_type(dt, &t)) { host->error_set("%s: NCCL cannot reduce dtype %d", op, (int)dt); return -1; }
  if (!nccl_op(rop, &o)) { host->error_set("%s: unknown reduction %d", op, rop); return -1; }
  return 0;
}
int bad_peer(nt_CudaComm *c, const char *op, int peer) {
  if (peer >= 0 && peer < c->nranks) return 0;
  host->error_set("%s: rank %d is not in the communicator (size %d)", op, peer, c->nranks);
  return -1;
}

// ---- the API ----------------------------------------------------------------------------------
int api_comm_available(char *reason, size_t n) {
  bool ok = nccl_ready();
  if (reason && n) snprintf(reason, n, "%s", ok ? "ready" : lib_reason);
  return ok ? 1 : 0;
}
const char *api_comm_version(void) { return lib_ready ? lib_version : ""; }

int api_device_id(char *out, size_t n) {
  if (bind_device()) return -1;
  int dev = 0;
  CU(cudaGetDevice(&dev));
  char bus[64];
  CU(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev));
  snprintf(out, n, "%s", bus);
  return 0;
}

int api_comm_unique_id(unsigned char *id) {
  if (need_nccl("ncclGetUniqueId")) return -1;
  static_assert(sizeof(ncclUniqueId) == NT_COMM_ID_BYTES, "ncclUniqueId is 128 bytes");
  ncclUniqueId u;
  ncclResult_t r = lib.GetUniqueId(&u);
  if (r != ncclSuccess) { host->error_set("ncclGetUniqueId: %s", lib.GetErrorString(r)); return -1; }
  memcpy(id, &u, sizeof u);
  return 0;
}

// Frees c and its stream/events (after its communicator was destroyed or
// aborted: a destroyed stream with work left is released when that work ends).
void free_comm(nt_CudaComm *c) {
  live_remove(c);
  if (c->before) cudaEventDestroy(c->before);
  if (c->after) cudaEventDestroy(c->after);
  if (c->cs) cudaStreamDestroy(c->cs);
  cudaGetLastError();
  free(c);
}

nt_CudaComm *new_comm(int nranks, int rank, int timeout_ms, volatile int *interrupted) {
  nt_CudaComm *c = (nt_CudaComm *)calloc(1, sizeof *c);
  if (!c) { host->error_set("out of memory"); return nullptr; }
  c->nranks = nranks; c->rank = rank; c->timeout_ms = timeout_ms; c->interrupted = interrupted;
  int lo = 0, hi = 0;   // "greatest" priority is the numerically lowest
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
  if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&c->cs, cudaStreamNonBlocking, hi);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->before, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->after, cudaEventDisableTiming);
  if (e != cudaSuccess) { cuda_fail(e, "creating the NCCL communication stream", __FILE__, __LINE__); free_comm(c); return nullptr; }
  live_add(c);
  return c;
}

nt_CudaComm *api_comm_init(const unsigned char *id, int nranks, int rank, int timeout_ms, volatile int *interrupted) {
  const char *op = "ncclCommInitRank";
  if (need_nccl(op) || bind_device()) return nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) { host->error_set("%s: rank %d is not in 0..%d", op, rank, nranks - 1); return nullptr; }
  nt_CudaComm *c = new_comm(nranks, rank, timeout_ms, interrupted);
  if (!c) return nullptr;
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = lib.CommInitRankConfig(&c->comm, nranks, u, rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    // the handle may or may not exist after an immediate failure
    if (c->comm) abort_with(c, op, nccl_err(c, r));
    else host->error_set("%s: %s", op, lib.GetErrorString(r));
    free_comm(c);
    return nullptr;
  }
  if (!c->comm) { host->error_set("%s: NCCL returned no communicator", op); free_comm(c); return nullptr; }
  if (wait_ready(c, op, now_ms())) { free_comm(c); return nullptr; }
  return c;
}

nt_CudaComm *api_comm_split(nt_CudaComm *parent, int color, int key, int *failed) {
  const char *op = "ncclCommSplit";
  *failed = 1;
  if (check_usable(parent, op) || bind_device()) return nullptr;
  if (!lib.CommSplit) { host->error_set("%s: needs NCCL 2.18 or newer (loaded: %s)", op, lib_version); return nullptr; }
  ncclComm_t out = nullptr;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = lib.CommSplit(parent->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &out, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (out) lib.CommAbort(out);
    abort_with(parent, op, nccl_err(parent, r));
    return nullptr;
  }
  // non-blocking: the new communicator (or, for a rank outside every
  // color, the parent) says ncclInProgress until the split is done
  if (!out) {
    if (wait_ready(parent, op, now_ms())) return nullptr;
    *failed = 0;
    return nullptr;                               // NCCL_SPLIT_NOCOLOR: not a member
  }
  nt_CudaComm *c = new_comm(0, 0, parent->timeout_ms, parent->interrupted);
  if (!c) { lib.CommAbort(out); return nullptr; }
  c->comm = out;
  if (wait_ready(c, op, now_ms())) { free_comm(c); return nullptr; }
  ncclResult_t r1 = lib.CommCount(c->comm, &c->nranks), r2 = lib.CommUserRank(c->comm, &c->rank);
  if (r1 != ncclSuccess || r2 != ncclSuccess) { abort_with(c, op, nccl_err(c, r1 != ncclSuccess ? r1 : r2)); free_comm(c); return nullptr; }
  *failed = 0;
  return c;
}

// Abort: NCCL kernels still waiting on peers exit, then the stream and
// events go (after the communicator: its kernels run on that stream).
void api_comm_abort(nt_CudaComm *c) {
  if (!c) return;
  bind_device();
  if (c->comm && lib_ready) lib.CommAbort(c->comm);
  c->comm = nullptr;
  free_comm(c);
}

// Destroy, in the order NCCL asks for a non-blocking communicator: wait for
// the outstanding collectives (bounded by the timeout), ncclCommFinalize and
// poll it to completion (bounded too), then ncclCommDestroy, then the
// stream and events.  Any failure on the way (an error, the timeout, an
// interrupt) aborts instead, so destroying never hangs on a dead peer.
void api_comm_destroy(nt_CudaComm *c) {
  if (!c) return;
  bind_device();
  const char *op = "ncclCommDestroy";
  if (c->comm && lib_ready) {
    bool clean = host_wait(c, op) == 0 && c->comm;
    if (clean) {
      ncclResult_t r = lib.CommFinalize(c->comm);
      clean = (r == ncclSuccess || r == ncclInProgress) && wait_ready(c, op, now_ms()) == 0 && c->comm;
    }
    if (clean && lib.CommDestroy(c->comm) == ncclSuccess) c->comm = nullptr;
    if (c->comm) { lib.CommAbort(c->comm); c->comm = nullptr; }
  }
  free_comm(c);
}

// The common path of every collective: checks, binding, ordering after the
// compute stream, the enqueue on the communication stream, finish_call.
template <typename F> int collective(nt_CudaComm *c, const char *nm, bool overlap, F enqueue) {
  if (check_usable(c, nm) || bind_device() || order_after_compute(c)) return -1;
  return finish_call(c, nm, enqueue(c->cs), overlap);
}

int all_reduce(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op, bool overlap) {
  const char *nm = "all_reduce (NCCL)";
  if (bad_args(nm, dt, op)) return -1;
  ncclDataType_t t = ncclFloat32; ncclRedOp_t o = ncclSum;
  nccl_type(dt, &t); nccl_op(op, &o);
  return collective(c, nm, overlap, [&](cudaStream_t s) { return lib.AllReduce(buf, buf, count, t, o, c->comm, s); });
}
int api_all_reduce(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op) { return all_reduce(c, buf, count, dt, op, false); }
int api_all_reduce_async(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op) { return all_reduce(c, buf, count, dt, op, true); }

// The compute stream waits (on the device) for every collective enqueued on c.
int api_comm_join(nt_CudaComm *c) {
  if (check_usable(c, "NCCL join") || bind_device()) return -1;
  if (c->pending) CU(cudaStreamWaitEvent(stream, c->after, 0));
  return 0;
}

int api_reduce_scatter(nt_CudaComm *c, const void *send, void *recv, size_t recvcount, nt_DType dt, int op) {
  const char *nm = "reduce_scatter (NCCL)";
  if (bad_args(nm, dt, op)) return -1;
  ncclDataType_t t = ncclFloat32; ncclRedOp_t o = ncclSum;
  nccl_type(dt, &t); nccl_op(op, &o);
  return collective(c, nm, false, [&](cudaStream_t s) { return lib.ReduceScatter(send, recv, recvcount, t, o, c->comm, s); });
}

int api_all_gather(nt_CudaComm *c, const void *send, void *recv, size_t sendbytes) {
  return collective(c, "all_gather (NCCL)", false, [&](cudaStream_t s) { return lib.AllGather(send, recv, sendbytes, ncclInt8, c->comm, s); });
}

// The all_gather of stage 3's prefetch (dist/dzero.c): ordered after the
// compute stream's work like every collective, but the compute stream does
// not wait for it; `ev` (the caller's event, tensor/tbackend.h) is recorded
// after it on the communication stream, and the consumer makes the compute
// stream wait for ev before it reads recv.
int api_all_gather_async(nt_CudaComm *c, const void *send, void *recv, size_t sendbytes, void *ev) {
  if (!ev) { host->error_set("all_gather (NCCL, async): no event"); return -1; }
  if (collective(c, "all_gather (NCCL, async)", true, [&](cudaStream_t s) { return lib.AllGather(send, recv, sendbytes, ncclInt8, c->comm, s); })) return -1;
  CU(cudaEventRecord((cudaEvent_t)ev, c->cs));
  return 0;
}

int api_broadcast(nt_CudaComm *c, void *buf, size_t nbytes, int root) {
  const char *nm = "broadcast (NCCL)";
  if (c && bad_peer(c, nm, root)) return -1;
  return collective(c, nm, false, [&](cudaStream_t s) { return lib.Broadcast(buf, buf, nbytes, ncclInt8, root, c->comm, s); });
}

int api_send(nt_CudaComm *c, const void *buf, size_t nbytes, int peer) {
  const char *nm = "send (NCCL)";
  if (c && bad_peer(c, nm, peer)) return -1;
  return collective(c, nm, false, [&](cudaStream_t s) { return lib.Send(buf, nbytes, ncclInt8, peer, c->comm, s); });
}

int api_recv(nt_CudaComm *c, void *buf, size_t nbytes, int peer) {
  const char *nm = "recv (NCCL)";
  if (c && bad_peer(c, nm, peer)) return -1;
  return collective(c, nm, false, [&](cudaStream_t s) { return lib.Recv(buf, nbytes, ncclInt8, peer, c->comm, s); });
}

int api_group_start(void) {
  if (need_nccl("ncclGroupStart") || bind_device()) return -1;
  ncclResult_t r = lib.GroupStart();
  if (r != ncclSuccess) { host->error_set("ncclGroupStart: %s", lib.GetErrorString(r)); return -1; }
  group_depth++;
  return 0;
}

// Ends the group (even after a failed enqueue inside it); outside any other
// group, the compute stream then waits for it like for one collective.
// Only groups over ONE communicator are supported (dist/ uses no other).
int api_group_end(nt_CudaComm *c) {
  const char *nm = "grouped send/recv (NCCL)";
  if (need_nccl(nm) || bind_device()) return -1;
  if (group_depth <= 0) { host->error_set("%s: group_end without group_start", nm); return -1; }
  group_depth--;
  ncclResult_t r = lib.GroupEnd();
  if (!c) { host->error_set("%s: no NCCL communicator", nm); return -1; }
  if (!c->comm) { host->error_set("%s: the NCCL communicator was aborted by an earlier failure (%s)", nm, c->why); return -1; }
  if (c->failed) { c->failed = 0; return abort_with(c, nm, c->why); }
  if (group_depth > 0) return r == ncclSuccess || r == ncclInProgress ? 0 : abort_with(c, nm, nccl_err(c, r));
  return finish_call(c, nm, r);
}

// ---- pinned staging -------------------------------------------------------------------------------
void *stage_buf;
size_t stage_cap;
cudaEvent_t stage_ev;
bool stage_pending;     // an async host->device copy may still read stage_buf

int stage_wait(void) {
  if (!stage_pending) return 0;
  stage_pending = false;
  CU(cudaEventSynchronize(stage_ev));
  return 0;
}

int stage_reserve(size_t n) {
  if (stage_wait()) return -1;
  if (n <= stage_cap && stage_buf) return 0;
  size_t cap = (size_t)1 << 20;                 // at least 1 MiB, then powers of two
  while (cap < n) cap <<= 1;
  if (stage_buf) { CU(cudaFreeHost(stage_buf)); stage_buf = nullptr; stage_cap = 0; }
  CU(cudaHostAlloc(&stage_buf, cap, cudaHostAllocDefault));
  stage_cap = cap;
  return 0;
}

void *api_staging(size_t n) {
  if (bind_device() || stage_reserve(n)) return nullptr;
  return stage_buf;
}

int api_to_host(void *dst, const void *src, size_t n) {
  if (n == 0) return 0;
  if (bind_device()) return -1;
  CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream));
  last_op = "copy (device to pinned host)";
  return sync_stream();
}

int api_to_device(void *dst, const void *src, size_t n) {
  if (n == 0) return 0;
  if (bind_device()) return -1;
  if (!stage_ev) CU(cudaEventCreateWithFlags(&stage_ev, cudaEventDisableTiming));
  CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
  last_op = "copy (pinned host to device)";
  CU(cudaEventRecord(stage_ev, stream));
  stage_pending = true;
  return 0;
}

}  // namespace

// Host wait for every live communicator's outstanding collectives (see the
// top of the file).  Stops at the first failure (its report stands); the
// rest are waited for by the next synchronisation.
int comms_wait_all(void) {
  int rc = 0;
  pthread_mutex_lock(&live_mu);
  for (nt_CudaComm *c = live; c && rc == 0; c = c->next)   // the first failure is the report
    if (c->pending && host_wait(c, c->op)) rc = -1;
  pthread_mutex_unlock(&live_mu);
  return rc;
}

void nccl_fill_api(nt_DeviceApi *api) {
  api->comm_available = api_comm_available;
  api->comm_version = api_comm_version;
  api->device_id = api_device_id;
  api->comm_unique_id = api_comm_unique_id;
  api->comm_init = api_comm_init;
  api->comm_split = api_comm_split;
  api->comm_abort = api_comm_abort;
  api->comm_destroy = api_comm_destroy;
  api->comm_all_reduce = api_all_reduce;
  api->comm_all_reduce_async = api_all_reduce_async;
  api->comm_join = api_comm_join;
  api->comm_all_gather_async = api_all_gather_async;
  api->comm_reduce_scatter = api_reduce_scatter;
  api->comm_all_gather = api_all_gather;
  api->comm_broadcast = api_broadcast;
  api->comm_send = api_send;
  api->comm_recv = api_recv;
  api->comm_group_start = api_group_start;
  api->comm_group_end = api_group_end;
  api->staging = api_staging;
  api->to_host = api_to_host;
  api->to_device = api_to_device;
}

}  // namespace ncu
