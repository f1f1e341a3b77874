/*
** tdevice.h — device backends loaded at run time (the CUDA module).
**
** The CUDA backend is a separate shared module, nabla_cuda.so, built from
** cuda/ when nvcc is found.  The core never links against CUDA: the first
** time a CUDA tensor is asked for (nt_empty / nt_to_device with NT_CUDA, or
** any nt_cuda_* call below) the loader in tdevice.c dlopens the module, which
** registers its allocator and kernels in the op table.  Without a module, a
** driver or a GPU, asking for cuda fails with
**     "CUDA is not available: <reason>"
** and the CPU keeps working.
**
** Where the loader looks for the module, first hit wins:
**   1. $NABLA_CUDA_MODULE (a path to the .so);
**   2. <d>/cuda/nabla_cuda.so for d = the running binary's directory and up
**      to three of its parents (a build tree, also one copied elsewhere);
**   3. <dir of the running binary>/../lib/nabla/nabla_cuda.so (installed);
**   4. the path where this build put it, which the build hands to tdevice.c
**      as -DNT_CUDA_MODULE_BUILD (cuda/meson.build), not through a header.
** Set NABLA_CUDA_DISABLE=1 to pretend there is no GPU.  NABLA_CUDA_SYNC=1 (a
** debug mode) waits for every kernel launch, so an asynchronous GPU fault is
** reported by the op whose kernel raised it (any other value than unset, "",
** 0 or 1 makes CUDA unavailable with a reason naming the variable).
**
** NABLA_CUDA_EMULATE=1 loads the EMULATED device instead (nabla_cuda_emu.so,
** cuda/emu/: the same sources run on the CPU, every access checked; see
** docs/cuda.md) — but only where no NVIDIA GPU is present: a real GPU is never
** shadowed.  NABLA_CUDA_EMULATE=force emulates even then.  The emulated
** module is looked for as above with nabla_cuda_emu.so (in the build tree:
** <builddir>/cuda/emu/); $NABLA_CUDA_MODULE still wins.
**
** Same conventions as tensor.h: 0 / -1 + nt_error_msg() unless said otherwise.
*/
#ifndef NT_TDEVICE_H
#define NT_TDEVICE_H

#include "tensor.h"

/* ---- public: what the language calls ---------------------------------------- */
/* 1 if CUDA tensors can be made (loads the module on first use), else 0 with
** the reason ("no CUDA device: cudaGetDeviceCount: ...", "dlopen ...: ...")
** copied into reason (may be NULL). */
int    nt_cuda_available(char *reason, size_t n);
int    nt_cuda_device_count(void);            /* 0 when unavailable */
/* The device's name ("NVIDIA H100 80GB HBM3"; "... (emulated on the CPU)"
** for the emulated device); -1 + error when CUDA is unavailable. */
int    nt_cuda_device_name(char *out, size_t n);
/* Waits for every queued GPU op; reports an asynchronous error (naming the op
** that launched it) as -1 + error.  A no-op (0) when CUDA was never loaded. */
int    nt_cuda_synchronize(void);
/* Which backend scaled_dot_product_attention takes on the GPU (cuda/attention.cu,
** cuda/cudnn.cu): backend "cudnn" | "fallback" (cuDNN cannot run: reason says why)
** | "fused" | "gemm" (forced by NABLA_CUDA_ATTENTION); last: why the latest call
** did not run on cuDNN ("" when it did); cudnn_version (0: not loaded); nondet:
** the last backward plan runs a non-deterministic engine; plans: cuDNN plans built.
** -1 + error when CUDA is unavailable or the module predates the query. */
typedef struct nt_AttentionBackend {
  char backend[32], reason[512], last[512];
  long long cudnn_version, plans;
  int nondeterministic;
} nt_AttentionBackend;
int    nt_cuda_attention_backend(nt_AttentionBackend *out);
/* Caching-allocator statistics in bytes (all 0 when not loaded):
** allocated = live tensors, cached = reserved from the driver (>= allocated),
** peak = highest `allocated` so far. */
int    nt_cuda_memory(size_t *allocated, size_t *cached, size_t *peak);
int    nt_cuda_empty_cache(void);             /* returns unused cached blocks to the driver */
/* Counters of the work the CUDA module did since it was loaded or since
** nt_cuda_reset_stats(), counted inside the module (the same numbers on a
** GPU and on the emulated device; all 0 when the module is not loaded):
**   launches      kernel launches            gemms      cuBLAS/cuBLASLt GEMM calls
**   memcpy_h2d/_d2h/_d2d  copies by direction   memsets    cudaMemset*Async
**   syncs         host waits: stream/event/device synchronize, blocking
**                 copies (a device->host copy is one), cudaFree
**   mallocs/frees cudaMalloc/cudaFree of the caching allocator's segments
**   alloc_requests  requests to the caching allocator (each tensor, scratch)
** by_op[id]: GPU operations (launches + gemms + copies + memsets) issued
** while a kernel of op `id` ran (nt_op_name(id)); by_op[NT_CUDA_STATS_OPS-1]:
** those issued outside any op (the core's copies between devices). */
#define NT_CUDA_STATS_OPS 513                 /* NT_OP_TABLE_SIZE + 1 (checked in the module) */
typedef struct nt_CudaStats {
  int64_t launches, gemms, memcpy_h2d, memcpy_d2h, memcpy_d2d, memsets, syncs, mallocs, frees, alloc_requests;
  int64_t by_op[NT_CUDA_STATS_OPS];
} nt_CudaStats;
int    nt_cuda_stats(nt_CudaStats *out);
void   nt_cuda_reset_stats(void);
/* "highest" (default: full f32 matmuls) or "high"/"tf32" (f32 matmuls on TF32
** tensor cores) — PyTorch's torch.set_float32_matmul_precision.  May be
** called before the module is loaded. */
int    nt_set_matmul_precision(const char *precision);
const char *nt_get_matmul_precision(void);    /* "highest" or "high" */

/* Loads the backend of `dev` if needed: 0 when ready, else -1 with
** "CUDA is not available: <reason>".  NT_CPU is always ready. */
int    nt_device_load(nt_Device dev);
/* The message for "dev cannot be used" (the loader's reason for cuda). */
const char *nt_device_unavailable_msg(nt_Device dev);

/* ---- fused optimizer ops ------------------------------------------------------
** Op names "adamw_update" and "sgd_update" (nt_op_register).  The CUDA module
** registers them for NT_CUDA: ONE kernel launch updates every parameter.
** nt_KernelArgs: out = NULL, nin = 0, extra = nt_OptimArgs *.  All tensors
** contiguous, on the device, same dtype (f32; f64 too on CUDA) and numel as
** their parameter; grads[k] == NULL skips parameter k.
**   adamw: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
**          p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps),
**          bc1 = 1 - b1^step, bc2 = 1 - b2^step          (exp_avg = m, exp_avg_sq = v)
**   sgd:   d = g + wd p; with momentum: buf = mom buf + d, d = nesterov ? d + mom buf : buf;
**          p = p - lr d                                     (exp_avg = momentum buffers) */
typedef struct nt_OptimArgs {
  int n;                       /* number of parameters */
  nt_Tensor **params, **grads, **exp_avg, **exp_avg_sq;   /* n each (exp_avg_sq NULL for sgd) */
  double lr, beta1, beta2, eps, weight_decay;              /* sgd: beta1 = momentum */
  double step;                 /* adamw: 1-based step number */
  int nesterov;                /* sgd */
  nt_Tensor *lr_dev;           /* adamw: NULL, or a two-element f64 tensor {lr, step} on the params' device,
                               ** read there (so a compiled step's replay sees what the host wrote last:
                               ** tcompile.h nt_device_scalar_set); lr and step are then ignored */
} nt_OptimArgs;
/* One update of every parameter (in place, not recorded by autograd), on the
** parameters' device.  grads[k] NULL leaves parameter k alone.  0 or -1 + error. */
int nt_optim_adamw(nt_OptimArgs *o);
int nt_optim_sgd(nt_OptimArgs *o);   /* exp_avg = momentum buffers (NULL when beta1 == 0) */

/* Gradient-norm clipping (PyTorch's clip_grad_norm_): *norm = the global L2
** norm of the floating tensors among grads[0..n) (NULL and integer entries
** skipped); when it is above max_norm every one of them is scaled in place
** by max_norm / (norm + 1e-6).  CPU: one threaded pass for the norm, one for
** the scaling, over all tensors at once.  A tensor listed twice is an error
** (tied weights: list it once).  0 or -1 + error. */
int nt_clip_grad_norm(nt_Tensor **grads, int n, double max_norm, double *norm);

/* ---- collectives between processes on CUDA buffers (NCCL; cuda/nccl.cu) ---------
** The CUDA module dlopens libnccl.so.2 the first time one of these is called
** (not when the module loads: CUDA tensors work without NCCL).  Each
** communicator runs its collectives on its own communication stream, ordered
** after the work queued before the call; the module's compute stream waits
** for the result on the device (no host wait), so later ops see it.  The host
** waits only at synchronisation points (device->host copies,
** nt_cuda_synchronize), polling ncclCommGetAsyncError, the interrupt flag and
** the timeout given at init; a communicator is non-blocking
** (ncclConfig_t.blocking = 0).  On a failure, an interrupt or a timeout the
** communicator is aborted (ncclCommAbort) and every later call on it fails:
** make a new one.  Between nt_cuda_comm_group_start() and
** nt_cuda_comm_group_end(c) the send/recv/broadcast calls are only enqueued
** (NCCL group semantics); group_end completes them as one collective.
** Buffers are device pointers; counts are elements of `dt` for reductions
** (op: NT_COMM_SUM/MAX/MIN) and BYTES for the data-movement calls. */
#define NT_COMM_ID_BYTES 128
enum { NT_COMM_SUM = 0, NT_COMM_MAX = 1, NT_COMM_MIN = 2 };
typedef struct nt_CudaComm nt_CudaComm;
/* 1 when CUDA and NCCL can be used (loads both), else 0 with the reason
** ("CUDA is not available: ...", "NCCL is not available: <dlerror>") */
int  nt_cuda_comm_available(char *reason, size_t n);
/* "2.28.9" (the loaded library's version), or "" when not loaded */
const char *nt_cuda_comm_version(void);
/* this GPU's identity "<PCI bus id>" (to find two workers on one GPU) */
int  nt_cuda_device_id(char *out, size_t n);
int  nt_cuda_comm_unique_id(unsigned char id[NT_COMM_ID_BYTES]);
/* Collective over the nranks processes that pass the same id.  timeout_ms
** (0: none) bounds every later operation; *interrupted (may be NULL), when
** it becomes non-zero, aborts the operation in progress.  NULL + error. */
nt_CudaComm *nt_cuda_comm_init(const unsigned char id[NT_COMM_ID_BYTES], int nranks, int rank,
                               int timeout_ms, volatile int *interrupted);
/* ncclCommSplit: collective over EVERY rank of parent; color < 0: not a member (returns NULL, no error) */
nt_CudaComm *nt_cuda_comm_split(nt_CudaComm *parent, int color, int key, int *failed);
void nt_cuda_comm_abort(nt_CudaComm *c);     /* ncclCommAbort, frees c (NULL ok) */
/* waits for pending work (bounded by the timeout), ncclCommFinalize (polled,
** bounded too), ncclCommDestroy; any failure on the way aborts instead; then
** the communicator's stream and events go; frees c (NULL ok) */
void nt_cuda_comm_destroy(nt_CudaComm *c);
int  nt_cuda_comm_all_reduce(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op);
/* The same collective, but the compute stream does NOT wait for it: work
** queued afterwards (the rest of backward) overlaps it.  buf must stay
** untouched until nt_cuda_comm_join(c), after which work queued on the
** compute stream sees every collective enqueued on c so far. */
int  nt_cuda_comm_all_reduce_async(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op);
int  nt_cuda_comm_join(nt_CudaComm *c);
int  nt_cuda_comm_reduce_scatter(nt_CudaComm *c, const void *send, void *recv, size_t recvcount, nt_DType dt, int op);
int  nt_cuda_comm_all_gather(nt_CudaComm *c, const void *send, void *recv, size_t sendbytes);
int  nt_cuda_comm_broadcast(nt_CudaComm *c, void *buf, size_t nbytes, int root);
int  nt_cuda_comm_send(nt_CudaComm *c, const void *buf, size_t nbytes, int peer);
int  nt_cuda_comm_recv(nt_CudaComm *c, void *buf, size_t nbytes, int peer);
int  nt_cuda_comm_group_start(void);
int  nt_cuda_comm_group_end(nt_CudaComm *c);

/* ---- pinned staging for host-side collectives (the ring backend) --------------
** One page-locked host buffer per process (cudaHostAlloc), grown to the
** largest request and reused.  to_host waits for the copy; to_device is
** asynchronous on the module's stream and the next staging() waits for it,
** so the buffer is never overwritten while a copy still reads it.
** Main thread only.  (Every nt_cuda_* function may be called from any
** thread: the module binds its device on each thread first.) */
void *nt_cuda_staging(size_t n);               /* NULL + error */
int   nt_cuda_to_host(void *dst, const void *dev_src, size_t n);
int   nt_cuda_to_device(void *dev_dst, const void *src, size_t n);

/* The loader's side of the module ABI (nt_HostApi, nt_DeviceApi) is in
** tbackend.h: a backend's business, not its users'. */

#endif
