/*
** tbackend.h — the API for device backends and kernel writers: the op table
** (nt_KernelArgs, what each builtin kernel receives), kernel and allocator
** registration, and the ABI between the device loader (tdevice.c) and a
** run-time module (nabla_cuda.so, built from cuda/).
**
** Who uses it: cuda/ (through cuda/common.cuh), tensor/'s own CPU kernels
** (through tinternal.h), and tests that call the op table directly.  Code
** that only adds autograd ops or reads raw memory needs textend.h (included
** here); code that only uses tensors needs tensor.h and tdevice.h.
**
** Rules
**  - A kernel computes into args->out, which the front end allocated
**    (nt_empty: contiguous unless the op says otherwise) on the kernel's
**    device.  Kernels never allocate outputs, never retain or release the
**    tensors in nt_KernelArgs (all borrowed for the call), and never record
**    autograd: the front end (tensor/) does that around the dispatch.
**  - A kernel returns 0, or -1 after nt_error_set (a CUDA module: through
**    nt_HostApi.error_set).  It never aborts or prints.
**  - Registration (nt_register_kernel / nt_register_allocator) happens once,
**    at start-up (nt_init and nt_nn_init for the CPU, the module's nabla_cuda_init for
**    CUDA), before any op runs on that device: the table is not locked.
**  - An allocator's memory belongs to the storage that asked for it; the
**    core calls free exactly once, when the storage's last view goes.
*/
#ifndef NT_TBACKEND_H
#define NT_TBACKEND_H

#include "tensor.h"
#include "textend.h"
#include "tdevice.h"

/* ---- strided geometry (tpure.c: compiled into the CUDA module too) ----------- */
/* Coalesces the dims of nop operands viewed over shape[0..ndim): size-1 dims
** dropped, adjacent dims merged where every operand's strides make one run.
** Writes the kept shape to shape_out and each operand's strides, times
** scale[k], to stride_out[k]; returns the number of kept dims (0 when every
** dim is 1: the caller picks its one-element layout). */
int nt_coalesce_dims(int nop, nt_Tensor *const *ops, const int64_t *shape, int ndim, const int64_t *scale,
                     int64_t *shape_out, int64_t (*stride_out)[NT_MAXDIM]);

/* ---- memory ------------------------------------------------------------------ */
/* Per-device memory backend.  CPU is built in; cuda/ registers its own. */
typedef struct nt_Allocator {
  void *(*alloc)(size_t nbytes);       /* NULL on failure (we set the OOM error) */
  void  (*free)(void *p);
  /* copy nbytes between devices (either side may be NT_CPU); 0 or -1 + error */
  int   (*memcpy)(void *dst, nt_Device ddev, const void *src, nt_Device sdev, size_t nbytes);
} nt_Allocator;
void nt_register_allocator(nt_Device dev, const nt_Allocator *a);
const nt_Allocator *nt_allocator(nt_Device dev);   /* NULL if none registered */

/* ---- op table ---------------------------------------------------------------
** Every op goes through nt_dispatch(op, device, args) → the kernel registered
** for (op, device).  Op ids: nt_OpId (tensor.h) for builtins, ids from
** nt_op_register for others.  Kernels return 0, or -1 after nt_error_set.
**
** What the front ends put in nt_KernelArgs for the builtin kernels:
**  binary   out: fresh contiguous, shape S, result dtype (bool for comparisons
**           and logical ops).  in[0], in[1]: shape S (nt_bcast_view), both
**           of the compute dtype (the promoted dtype).  in[1] == NULL means a
**           scalar operand s[0]; iarg[0] = 1 when the scalar is the LEFT operand.
**  unary    out: fresh contiguous; in[0] same shape & dtype as out (floating
**           for the math functions; logical_not: out bool, in any dtype).
**           clamp: s[0] = lo, s[1] = hi (NaN = none).
**  reduce   in[0]: permuted view whose LAST iarg[0] axes are the reduced ones;
**           out: fresh contiguous with numel = product of the kept axes.
**           in dtype == out dtype, except argmax/argmin (out i64, index is the
**           row-major position inside the reduced block) and any/all (out bool).
**           (mean/var/std/logsumexp are compositions of public ops: a backend
**           needs only sum prod max min argmax argmin any all.)
**  where    out fresh; in[0] cond (bool), in[1], in[2] (out dtype); all shape S.
**  copy     out: ANY strided view (the destination), in[0]: same shape (may be
**           broadcast), any dtype — converts.  Front end removes overlap.
**  fill     out: any strided view, s[0] value.
**  matmul   out [B..,M,N] fresh; in[0] [B..,M,K], in[1] [B..,K,N] with batch
**           dims already broadcast (stride 0 allowed); same floating or int dtype.
**  random   out fresh contiguous; iarg[0] = nt_RandKind, iarg[1] = seed,
**           iarg[2] = offset (blocks; see tensor.h), s[0], s[1] parameters
**           (mean,std | low,high | p).  RAND_KEYS writes raw u32 words as i64.
**  tril     out fresh, in[0] same shape/dtype; iarg[0] = k, iarg[1] = 1 for triu.
**  arange   out fresh 1-D: out[i] = s[0] + i * s[1].
*/
#define NT_OP_TABLE_SIZE 512   /* op ids are < this */
typedef struct nt_KernelArgs {
  int op;
  nt_Tensor *out;
  nt_Tensor *in[4];
  int nin;
  double s[4];
  int64_t iarg[2 * NT_MAXDIM + 4];
  int niarg;
  void *extra;                 /* op-specific pointer (nn ops) */
} nt_KernelArgs;
typedef int (*nt_Kernel)(const nt_KernelArgs *a);

typedef enum { NT_RAND_UNIFORM, NT_RAND_NORMAL, NT_RAND_INT, NT_RAND_BERNOULLI, NT_RAND_KEYS } nt_RandKind;

extern nt_Kernel nt_kernel_table[NT_OP_TABLE_SIZE][NT_NDEVICES];
void nt_register_kernel(int op, nt_Device dev, nt_Kernel fn);
/* Looks up or creates an op id for a name (nn ops, custom kernels); -1 if the
** table is full.  Builtin names ("add") return their nt_OpId. */
int  nt_op_register(const char *name);
/* Calls the kernel or fails with "<op>: not implemented for device cuda".
** On a device, nt_dispatch_device_ (tdevice.c) first refuses inputs (in[],
** and out unless the kernel overwrites all of its storage) whose values a
** GPU data error made unusable, and records out's write in the current
** synchronisation epoch (textend.h, nt_dev_check).  Inputs or outputs a
** kernel reaches through `extra` are the front end's to check and mark. */
int nt_dispatch_device_(int op, nt_Kernel k, const nt_KernelArgs *a);
/* The profiler's hook (tprofile.h): nt_prof_on_ is set while a profile runs;
** nt_prof_dispatch_ times the call and dispatches as below. */
extern int nt_prof_on_;
int nt_prof_dispatch_(int op, nt_Device dev, nt_Kernel k, const nt_KernelArgs *a);
/* Complex tensors (tensor/complex.h) reach only the kernels that handle them
** (copy, fill, the FFTs); any other kernel given one fails naming the op,
** instead of reading (re, im) pairs as something else.  The check costs
** nothing until the first complex tensor exists (nt_complex_seen_). */
extern int nt_complex_seen_;
int nt_complex_refuse_(int op, const nt_KernelArgs *a);
static inline int nt_dispatch(int op, nt_Device dev, const nt_KernelArgs *a) {
  nt_Kernel k = nt_kernel_table[op][dev];
  if (__builtin_expect(nt_complex_seen_, 0) && nt_complex_refuse_(op, a)) return -1;
  if (k && __builtin_expect(nt_prof_on_, 0)) return nt_prof_dispatch_(op, dev, k, a);
  if (k) return dev == NT_CPU ? k(a) : nt_dispatch_device_(op, k, a);
  nt_error_set("%s: not implemented for device %s", nt_op_name(op), nt_device_name(dev));
  return -1;
}

/* ---- streams, events and pinned host memory (CUDA; tdevice.c) -----------------
** For copies that overlap compute on a GPU (ZeRO's offload, dist/dzero.c).
** The CPU backend has none of this: each function fails with "CUDA is not
** available: ..." (or "the CUDA module has no ...") without a CUDA module, so
** callers check the return.  A stream or event is an opaque handle; a NULL
** stream means the compute stream every op runs on.  All of it belongs to the
** thread that made it (the interpreter's).
**
**  nt_cuda_stream_create()   a new non-blocking side stream; NULL + error
**  nt_cuda_event_create()    an event (no timing); NULL + error
**  nt_cuda_event_record(ev, s)   ev marks the work queued on s so far
**  nt_cuda_stream_wait(s, ev)    work queued on s from now on waits (on the
**                            device) for ev's work; the host does not wait
**  nt_cuda_event_wait(ev)    the host waits for ev's work; a fault raised by
**                            then is reported as at a synchronisation
**  nt_cuda_copy_async(dst, src, n, to_device, s)   n bytes host -> device
**                            (to_device) or device -> host, queued on s.  The
**                            host side should be pinned (below): then the
**                            copy reads or writes it when it runs, so it must
**                            not be touched until an event recorded after the
**                            copy is waited for; pageable host memory makes
**                            the call synchronous for the host.  The device
**                            side must stay alive -- and not be freed and
**                            reused by the compute stream -- until then.
**  nt_cuda_pinned_empty(shape, ndim, dt)   a CPU tensor whose storage is
**                            page-locked host memory (cudaHostAlloc), usable
**                            like any CPU tensor; freed (cudaFreeHost) when
**                            its storage's last reference goes.  Storages of
**                            NT_INLINE_BYTES or less live inside their header
**                            and are not pinned (too small to matter).
**  nt_cuda_pinned_bytes()    bytes of pinned storage alive now (0 without CUDA)
** The destroy functions take NULL.  Return 0, or -1 + error. */
void *nt_cuda_stream_create(void);
void  nt_cuda_stream_destroy(void *s);
void *nt_cuda_event_create(void);
void  nt_cuda_event_destroy(void *ev);
int   nt_cuda_event_record(void *ev, void *s);
int   nt_cuda_stream_wait(void *s, void *ev);
int   nt_cuda_event_wait(void *ev);
int   nt_cuda_copy_async(void *dst, const void *src, size_t n, int to_device, void *s);
nt_Tensor *nt_cuda_pinned_empty(const int64_t *shape, int ndim, nt_DType dt);
size_t nt_cuda_pinned_bytes(void);
/* Timing events for the profiler (tprofile.c; cuda/profile.cu):
**  nt_cuda_timer_create()    an event that records a time; NULL + error
**  nt_cuda_timer_record(t)   t marks the work queued on the compute stream so far
**  nt_cuda_timer_elapsed(a, b, &ms)   ms between a and b, both recorded and
**                            complete (after a synchronize); 0, or -1 + error
**  nt_cuda_timer_destroy(t)  takes NULL */
void *nt_cuda_timer_create(void);
int   nt_cuda_timer_record(void *t);
int   nt_cuda_timer_elapsed(void *a, void *b, double *ms);
void  nt_cuda_timer_destroy(void *t);
/* nt_cuda_comm_all_gather (tdevice.h) that the compute stream does NOT wait
** for: ev (an event of nt_cuda_event_create) is recorded after the gather on
** the communicator's stream; the consumer calls nt_cuda_stream_wait(NULL, ev)
** before reading recv, and send/recv must stay alive (not freed, not
** rewritten) until then.  Stage 3's prefetch under NCCL (dist/dzero.c). */
int nt_cuda_comm_all_gather_async(nt_CudaComm *c, const void *send, void *recv, size_t sendbytes, void *ev);

/* ---- ABI between the loader and the module (not for users) -------------------- */
#define NT_DEVICE_ABI_VERSION 11  /* 4: streams, events, pinned memory, async all_gather; 5: epoch_close, epoch_failed; 6: stats; 7: the profiler's timer_*; 8: CUDA graphs (graph_*); 9: graph_poke, graph_set_rng (device-side scalars of compiled steps); 10: complex dtypes (NT_NDTYPES 10); 11: add_layer_norm_backward writes the bf16 branch gradient (4 outputs), plain layer norm without a residual input */
struct nt_KernelArgs;
struct nt_Allocator;
typedef struct nt_HostApi {
  int abi_version;
  size_t sizeof_tensor, sizeof_kernel_args;     /* layout check */
  void (*error_set)(const char *fmt, ...);
  const char *(*error_msg)(void);
  void (*register_kernel)(int op, nt_Device dev, int (*fn)(const struct nt_KernelArgs *));
  void (*register_allocator)(nt_Device dev, const struct nt_Allocator *a);
  int (*op_register)(const char *name);
  const char *(*op_name)(int op);
  const int *matmul_tf32;                       /* live flag set by nt_set_matmul_precision */
  int sync_launches;                            /* NABLA_CUDA_SYNC=1: wait for every kernel launch */
  /* synchronisation epochs (textend.h nt_dev_check): epoch_close() is
  ** called right before a wait for the stream that is followed by reading the
  ** error slot; it returns the epoch the wait ends and starts the next.  When
  ** the slot then holds an error err, epoch_failed(e, err) makes the results
  ** of e unusable (and those of e + 1, which another thread may have launched
  ** into during the wait); later work starts a fresh epoch. */
  uint64_t (*epoch_close)(void);
  void (*epoch_failed)(uint64_t e, const char *err);
} nt_HostApi;
typedef struct nt_DeviceApi {                   /* filled by the module's init */
  int (*device_count)(void);
  int (*synchronize)(void);
  int (*memory)(size_t *allocated, size_t *cached, size_t *peak);
  int (*empty_cache)(void);
  /* collectives and staging (cuda/nccl.cu): the nt_cuda_comm_* / nt_cuda_staging
  ** functions above, same contracts; comm_available may be called repeatedly */
  int (*comm_available)(char *reason, size_t n);
  const char *(*comm_version)(void);
  int (*device_id)(char *out, size_t n);
  int (*comm_unique_id)(unsigned char *id);
  nt_CudaComm *(*comm_init)(const unsigned char *id, int nranks, int rank, int timeout_ms, volatile int *interrupted);
  nt_CudaComm *(*comm_split)(nt_CudaComm *parent, int color, int key, int *failed);
  void (*comm_abort)(nt_CudaComm *c);
  void (*comm_destroy)(nt_CudaComm *c);
  int (*comm_all_reduce)(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op);
  int (*comm_all_reduce_async)(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op);
  int (*comm_join)(nt_CudaComm *c);
  int (*comm_reduce_scatter)(nt_CudaComm *c, const void *send, void *recv, size_t recvcount, nt_DType dt, int op);
  int (*comm_all_gather)(nt_CudaComm *c, const void *send, void *recv, size_t sendbytes);
  int (*comm_broadcast)(nt_CudaComm *c, void *buf, size_t nbytes, int root);
  int (*comm_send)(nt_CudaComm *c, const void *buf, size_t nbytes, int peer);
  int (*comm_recv)(nt_CudaComm *c, void *buf, size_t nbytes, int peer);
  int (*comm_group_start)(void);
  int (*comm_group_end)(nt_CudaComm *c);
  void *(*staging)(size_t n);
  int (*to_host)(void *dst, const void *dev_src, size_t n);
  int (*to_device)(void *dev_dst, const void *src, size_t n);
  int (*device_name)(char *out, size_t n);    /* appended: NULL in an older module */
  /* appended: side streams, events, pinned host memory, async copies (the
  ** nt_cuda_stream_* / nt_cuda_event_* / nt_cuda_pinned_* / nt_cuda_copy_async
  ** functions below, same contracts); NULL in an older module */
  void *(*stream_create)(void);
  void (*stream_destroy)(void *s);
  void *(*event_create)(void);
  void (*event_destroy)(void *ev);
  int (*event_record)(void *ev, void *s);
  int (*stream_wait)(void *s, void *ev);
  int (*event_wait)(void *ev);
  void *(*host_alloc)(size_t n);
  void (*host_free)(void *p);
  int (*copy_async)(void *dst, const void *src, size_t n, int to_device, void *s);
  int (*comm_all_gather_async)(nt_CudaComm *c, const void *send, void *recv, size_t sendbytes, void *ev);
  int (*stats)(nt_CudaStats *out);              /* the counters (tdevice.h nt_cuda_stats) */
  void (*reset_stats)(void);
  /* appended: the profiler's timing events (nt_cuda_timer_* above, same
  ** contracts; cuda/profile.cu); NULL in an older module */
  void *(*timer_create)(void);
  int (*timer_record)(void *t);
  int (*timer_elapsed)(void *a, void *b, float *ms);
  void (*timer_destroy)(void *t);
  /* appended: CUDA graphs of the compute stream (cuda/graph.cu; the
  ** nt_cuda_graph_* functions of tcompile.h, same contracts); NULL in an
  ** older module */
  int (*graph_begin)(void);
  void *(*graph_end)(char *reason, size_t n);
  int (*graph_launch)(void *g);
  void (*graph_destroy)(void *g);
  int (*graph_refuse)(const char *what);
  int (*graph_owns)(const void *p);
  /* appended: device scalars of compiled steps (cuda/graph.cu, graph.h):
  ** the n (<= 64) 8-byte words at dst := bits in stream order (deferred to
  ** just before the graph's launch while capturing); a graph's random slot
  ** := {seed, offset delta}.  NULL in an older module */
  int (*graph_poke)(void *dst, const uint64_t *bits, int n);
  int (*graph_set_rng)(void *g, uint64_t seed, uint64_t delta);
} nt_DeviceApi;
/* The module exports:  int nabla_cuda_init(const nt_HostApi *, nt_DeviceApi *, char *reason, size_t n);
** returning 0, or -1 with the reason why CUDA cannot be used. */
typedef int (*nt_DeviceInitFn)(const nt_HostApi *host, nt_DeviceApi *api, char *reason, size_t n);

#endif
