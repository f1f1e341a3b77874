/*
** tinternal.h — PRIVATE to tensor/: what the core's own sources and
** tensor/nn/ share beyond the public headers.  Nothing outside tensor/
** includes it; code elsewhere uses the public layers it builds on:
**   tensor.h    the tensor API (everyone);
**   tdevice.h   device queries, NCCL and staging (lang/, dist/);
**   tdtype.h    element types and f16/bf16 conversions (raw buffers);
**   textend.h   custom autograd nodes and raw storage access (dist/, lang/);
**   tbackend.h  the op table, kernel arguments, allocators and the device
**               module ABI (cuda/, tests of the op table).
** What stays here is how the CPU front ends are written: iteration,
** broadcasting, error/interrupt macros, in-place writes, autocast.
**
** Writing a new op has four steps (see telem.c for complete examples):
**   1. check arguments, compute the output shape/dtype; errors via nt_error_set
**      and return NULL (never abort);
**   2. allocate the output with nt_empty (one malloc; small tensors carry
**      their data inline);
**   3. fill nt_KernelArgs and call nt_dispatch(op, device, &args): the kernel
**      registered for (op, device) computes into the output;
**   4. if nt_needs_grad(inputs), nt_record() a node with a backward function
**      and save what backward needs (nt_node_save / node->s / node->iarg).
** Kernels for new op ids (nn ops) get an id from nt_op_register("softmax").
*/
#ifndef NT_TINTERNAL_H
#define NT_TINTERNAL_H

#include "tensor.h"
#include "tbackend.h"
#include <string.h>
#include <math.h>

/* ---- flags ---------------------------------------------------------------- */
/* NT_T_CONTIG (bit 0) is public: textend.h */
enum {
  NT_T_VIEWHDR = 1u << 1,  /* header malloc'd alone (a view), not inside its storage block */
};
enum {
  NT_STORAGE_INLINE = 1u << 0,  /* data lives in the same block as the storage struct */
  NT_STORAGE_EXTERNAL = 1u << 1,/* data not owned (never freed) */
};

/* Elements above which CPU loops go multi-threaded (OpenMP). */
#define NT_OMP_THRESHOLD 65536
/* Small outputs keep their data in the tensor's own malloc block. */
#define NT_INLINE_BYTES 512

/* ---- errors --------------------------------------------------------------- */
/* nt_error_set returns void; these return the usual failure values. */
#define NT_FAIL_NULL(...) do { nt_error_set(__VA_ARGS__); return NULL; } while (0)
#define NT_FAIL(...)      do { nt_error_set(__VA_ARGS__); return -1; } while (0)
void nt_error_oom(size_t nbytes);      /* "out of memory allocating N bytes" */
/* Long loops check for an interrupt (nt_set_interrupt_flag) every NT_CHUNK
** elements of work (a few milliseconds); they fail with NT_FAIL_INTERRUPTED. */
extern volatile int *nt_interrupt_flag_;
/* the current GPU synchronisation epoch (tdevice.c; textend.h nt_dev_check) */
extern _Atomic uint64_t nt_dev_epoch_;
#define NT_INTERRUPTED() __builtin_expect(nt_interrupt_flag_ != NULL && *nt_interrupt_flag_ != 0, 0)
#define NT_CHUNK ((int64_t)1 << 22)
#define NT_FAIL_INTERRUPTED() NT_FAIL("interrupted")
/* malloc/calloc that set the OOM error on failure */
void *nt_malloc(size_t n);
void *nt_calloc(size_t n, size_t size);

/* ---- allocation & views (nt_view_of, nt_update_meta, ...: textend.h) ------- */
/* nt_empty (tensor.h) is THE output allocator: contiguous, uninitialised,
** dtype/device as asked.  Header + storage (+ data when <= NT_INLINE_BYTES)
** come from one malloc. */
/* Normalises a possibly negative axis; -1 with "axis 5 is out of range for a
** tensor of dimension 2" (prefixed by `op`) if invalid. */
int nt_norm_axis(const char *op, int axis, int ndim);

/* ---- broadcasting --------------------------------------------------------- */
/* NumPy broadcast of two shapes into out (NT_MAXDIM).  On failure sets
** "<op>: shapes [2, 3] and [4] cannot broadcast" and returns -1. */
int nt_broadcast_shapes(const char *op, const int64_t *a, int na, const int64_t *b, int nb,
                        int64_t *out, int *nout);
/* Fills *view (a STACK struct, borrowed: no refcounts) with src broadcast to
** shape (stride 0 on broadcast axes).  Caller guarantees compatibility. */
void nt_bcast_view(nt_Tensor *view, const nt_Tensor *src, const int64_t *shape, int ndim);

/* ---- strided iteration ------------------------------------------------------
** Walks up to NT_ITER_MAXOP same-shape operands (use nt_bcast_view for
** broadcasting), coalescing dims that are contiguous for every operand, in
** row-major order; each step exposes one inner run:
**     nt_Iter it; nt_iter_init(&it, 2, (nt_Tensor *[]){out, in}, NULL);
**     do {
**       char *o = it.ptr[0], *a = it.ptr[1];
**       for (int64_t i = 0; i < it.inner; i++)
**         ((float *)(o + i * it.istride[0]))[0] = ... a + i * it.istride[1] ...;
**     } while (nt_iter_next(&it));
** Strides here are in BYTES.  A 0-element shape makes it.inner 0 once. */
#define NT_ITER_MAXOP 4
typedef struct nt_Iter {
  int nop, ndim;                          /* ndim after coalescing (>= 1) */
  int64_t shape[NT_MAXDIM];
  int64_t stride[NT_ITER_MAXOP][NT_MAXDIM];   /* bytes */
  int64_t idx[NT_MAXDIM];
  char *ptr[NT_ITER_MAXOP];               /* start of the current inner run */
  int64_t inner;                          /* length of the inner run */
  int64_t istride[NT_ITER_MAXOP];         /* inner stride, bytes */
} nt_Iter;
/* shape NULL = ops[0]'s shape (all operands must have it). */
void nt_iter_init(nt_Iter *it, int nop, nt_Tensor *const *ops, const int64_t *shape_or_null);
bool nt_iter_next(nt_Iter *it);           /* false when done */
/* true when every operand is contiguous with the same shape (fast path) */
bool nt_all_contig(int n, nt_Tensor *const *ts);
/* tcpu_elem.c: o = a OP b (b NULL: a OP s, or s OP a when first) for OP one of
** + - * / in f32/f64 -- every contiguous such op runs these (why: there);
** o must not overlap a or b */
void nt_arith_f32(int op, const float *restrict a, const float *restrict b, double s, bool first, float *restrict o, int64_t n);
void nt_arith_f64(int op, const double *restrict a, const double *restrict b, double s, bool first, double *restrict o, int64_t n);
/* tensor.c: a fresh contiguous CPU tensor of like's shape and dtype dt, for
** small outputs only (numel * size(dt) <= NT_INLINE_BYTES): the checks of
** nt_empty were done on like's shape when it was made */
nt_Tensor *nt_empty_small_(const nt_Tensor *like, nt_DType dt);

/* ---- front-end checks ------------------------------------------------------- */
/* Same-device check for an op's inputs: "add: expected all tensors on the same
** device, got cpu and cuda". */
int nt_check_same_device(const char *op, int n, nt_Tensor *const *ts);
/* Where an operand of ts[0..n) is on a device, the 0-dim CPU tensors among
** them are copied there (as torch lets a CPU scalar tensor join a CUDA op:
** numbers become CPU scalars in where(c, x, 0) and in backward formulas).
** ts[i] is replaced; moved[i] = the copy to release, or NULL.  0 / -1 + error. */
int nt_move_cpu_scalars(int n, nt_Tensor **ts, nt_Tensor **moved);
/* "expected a floating dtype, got i64" (prefixed by op) */
int nt_check_float(const char *op, const nt_Tensor *t);

/* ---- in-place writes (tinplace.c) -------------------------------------------
** Raw writes, no autograd: dst is any strided view; they bump the storage
** version.  nt_copy_/nt_fill_/nt_index_put build on them. */
int nt_write_copy(nt_Tensor *dst, nt_Tensor *src);
int nt_write_fill(nt_Tensor *dst, double value);
/* May base[...] = v happen under the current grad mode, and is it recorded?
** 1: record (nt_record_write), 0: a plain write, -1: refused (error set: a
** leaf that requires grad, a view of a graph tensor, shared plain memory). */
int nt_write_mode(nt_Tensor *base, nt_Tensor *v);
/* Records a write into base as node `name` (in[0] = base's previous history,
** in[1] = v, both unchecked, NT_NODE_INPLACE); NULL with the error set. */
nt_Node *nt_record_write(nt_Tensor *base, nt_Tensor *v, const char *name, nt_BackwardFn fn);

/* ---- autocast (tautocast.c) -------------------------------------------------
** First statement of a front end that autocast affects:
**     NT_AUTOCAST(NT_AUTOCAST_LOW, nt_matmul(ac_[0], ac_[1]), a, b);
** Under autocast, when the policy changes the dtype of some input, the inputs
** (NULL allowed) are cast into ac_[] and the front end returns CALL on them;
** otherwise it goes on.  nt_autocast_inputs returns how many inputs change
** (0: nothing to do; -1: error) and fills out[] (new references) when > 0. */
enum { NT_AUTOCAST_LOW, NT_AUTOCAST_F32 };
int  nt_autocast_inputs(int policy, int n, nt_Tensor *const *in, nt_Tensor **out);
void nt_autocast_release(int n, nt_Tensor **casts);
#define NT_AUTOCAST(policy, CALL, ...) do {                                        \
    nt_Tensor *const ac_in_[] = { __VA_ARGS__ };                                   \
    enum { ac_n_ = (int)(sizeof ac_in_ / sizeof ac_in_[0]) };                      \
    nt_Tensor *ac_[ac_n_];                                                         \
    int ac_k_ = nt_autocast_inputs((policy), ac_n_, ac_in_, ac_);                  \
    if (ac_k_) {                                                                   \
      nt_Tensor *ac_r_ = ac_k_ < 0 ? NULL : (CALL);                                \
      nt_autocast_release(ac_n_, ac_);                                             \
      return ac_r_;                                                                \
    }                                                                              \
  } while (0)

/* ---- lazy fused elementwise chains (tfuse.c) ----------------------------------
** The record of a pending chain: a small op list a future GPU codegen can
** compile.  Operand refs: k >= 0 is input k (broadcast to `shape`), k < 0 the
** result of op -1-k.  Every op's result has the chain's shape; op is an
** nt_OpId (binary, binary with scalar s[0], unary with s[0..1]) or
** NT_OP_COPY, a cast to `dtype`.  The last op's result is the value. */
#define NT_FUSE_MAXOPS 16
#define NT_FUSE_MAXIN 8
typedef struct nt_FuseOp {
  int16_t op;
  int8_t dtype, nsrc, src[3];  /* src[2]: where's third operand */
  bool scalar, sfirst;      /* binary with the scalar s[0] (on the left: sfirst) */
  double s[2];
} nt_FuseOp;
typedef struct nt_Fused {
  nt_LazyHook hook;                     /* first: out->hook points here while pending */
  int nops, nin, ndim;
  int64_t shape[NT_MAXDIM], numel;
  nt_Tensor *in[NT_FUSE_MAXIN];         /* retained; never lazy themselves */
  uint64_t in_ver[NT_FUSE_MAXIN];       /* their storage versions when recorded */
  nt_FuseOp ops[NT_FUSE_MAXOPS];
  nt_Storage *out;                      /* the storage it computes (owns the record) */
  void *data;                           /* out's buffer while it is computed */
  struct nt_Fused *prev, *next;         /* pending chains, oldest first */
} nt_Fused;
/* Front-end hooks (telem.c), called after the op's checks with the compute
** dtype: 1 = recorded (*out a new lazy tensor), 0 = not fused (run it
** eagerly), -1 = error set. */
int nt_fuse_binary(int op, nt_Tensor *a, nt_Tensor *b, nt_DType cd, nt_Tensor **out);
int nt_fuse_scalar(int op, nt_Tensor *t, double s, bool first, nt_DType cd, nt_Tensor **out);
int nt_fuse_unary(int op, nt_Tensor *t, double s0, double s1, nt_DType cd, nt_Tensor **out);
int nt_fuse_where(nt_Tensor *cond, nt_Tensor *a, nt_Tensor *b, nt_DType od, nt_Tensor **out);
/* computes s if lazy and the pending chains that read it; 0 / -1 + error */
int nt_settle_storage_(nt_Storage *s);
/* > 0 while this thread runs an autograd backward pass (tautograd.c): no
** fusion there (tfuse.c says why) */
extern _Thread_local int nt_fuse_backward_depth_;
/* tensor.c: a lazy storage is freed unread */
void nt_fuse_drop_(nt_Storage *s);
/* tensor.c: a CPU tensor without data yet, and its buffer when computed */
nt_Tensor *nt_empty_deferred_(const int64_t *shape, int ndim, nt_DType dt);
void *nt_storage_alloc_(nt_Storage *s);

/* Small internal helpers shared by the front ends. */
nt_Tensor *nt_unary_scalar_op(int op, nt_Tensor *t, double s0, double s1);  /* clamp-like */
nt_Tensor *nt_reduce_ex(int op, nt_Tensor *t, const int *axes, int naxes, bool keepdims, double s0);
void nt_cpu_register_elem(void);
void nt_cpu_register_reduce(void);
void nt_cpu_register_matmul(void);
void nt_cpu_register_misc(void);

/* tonednn.c: C [M, N] (contiguous) = A [M, K] B [K, N], bf16 in and out, f32
** accumulation, strides in elements; 1 done, 0 no oneDNN (NABLA_ONEDNN=0,
** not installed), -1 error set */
int nt_onednn_matmul_bf16(const void *A, int64_t a_rs, int64_t a_cs, const void *B, int64_t b_rs, int64_t b_cs, void *C, int64_t M,
                          int64_t N, int64_t K);
bool nt_onednn_available(void);

#endif
