/*
** tinternal.h — the API for op implementers (tensor/ sources, tensor/nn/, cuda/).
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
#include <string.h>
#include <math.h>

/* ---- flags ---------------------------------------------------------------- */
enum {
  NT_T_CONTIG = 1u << 0,   /* row-major dense (kept current by nt_update_meta) */
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
#define NT_INTERRUPTED() __builtin_expect(nt_interrupt_flag_ != NULL && *nt_interrupt_flag_ != 0, 0)
#define NT_CHUNK ((int64_t)1 << 22)
#define NT_FAIL_INTERRUPTED() NT_FAIL("interrupted")
/* malloc/calloc that set the OOM error on failure */
void *nt_malloc(size_t n);
void *nt_calloc(size_t n, size_t size);

/* ---- allocation & views --------------------------------------------------- */
/* nt_empty (tensor.h) is THE output allocator: contiguous, uninitialised,
** dtype/device as asked.  Header + storage (+ data when <= NT_INLINE_BYTES)
** come from one malloc. */
/* A new heap tensor header sharing t's storage (storage retained), copying
** dtype/shape/strides/offset; no autograd state.  Edit shape/strides/offset
** then call nt_update_meta. */
nt_Tensor *nt_view_of(nt_Tensor *t);
/* Recomputes numel and the contiguity flag after shape/strides changed. */
void nt_update_meta(nt_Tensor *t);
/* Wraps existing memory (not freed by us) as a tensor — for tests/bindings. */
nt_Tensor *nt_from_external(void *data, nt_DType dt, const int64_t *shape, int ndim);
/* Row-major contiguous strides for shape; returns numel. */
int64_t nt_contig_strides(const int64_t *shape, int ndim, int64_t *strides);
int64_t nt_shape_numel(const int64_t *shape, int ndim);
/* Normalises a possibly negative axis; -1 with "axis 5 is out of range for a
** tensor of dimension 2" (prefixed by `op`) if invalid. */
int nt_norm_axis(const char *op, int axis, int ndim);
/* Host address of the element at storage offset t->offset (CPU). */
static inline char *nt_base(const nt_Tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)nt_dtype_size(t->dtype);
}

/* Per-device memory backend.  CPU is built in; cuda/ registers its own. */
typedef struct nt_Allocator {
  void *(*alloc)(size_t nbytes);       /* NULL on failure (we set the OOM error) */
  void  (*free)(void *p);
  /* copy nbytes between devices (either side may be NT_CPU); 0 or -1 + error */
  int   (*memcpy)(void *dst, nt_Device ddev, const void *src, nt_Device sdev, size_t nbytes);
} nt_Allocator;
void nt_register_allocator(nt_Device dev, const nt_Allocator *a);
const nt_Allocator *nt_allocator(nt_Device dev);   /* NULL if none registered */

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

/* ---- dtype helpers ---------------------------------------------------------
** One generic source for all dtypes: NT_FOR_EACH_DTYPE(X) expands
** X(ENUM, name, storage C type, compute C type).  f16/bf16 are stored as
** uint16_t and computed in float; bool is stored as one byte 0/1.  Load and
** store between storage and compute types with nt_ld_<name>/nt_st_<name>. */
#define NT_FOR_EACH_DTYPE(X)          \
  X(NT_F32,  f32,  float,    float)   \
  X(NT_F64,  f64,  double,   double)  \
  X(NT_F16,  f16,  uint16_t, float)   \
  X(NT_BF16, bf16, uint16_t, float)   \
  X(NT_I32,  i32,  int32_t,  int32_t) \
  X(NT_I64,  i64,  int64_t,  int64_t) \
  X(NT_U8,   u8,   uint8_t,  uint8_t) \
  X(NT_BOOL, b8,   uint8_t,  uint8_t)
#define NT_FOR_EACH_FLOAT_DTYPE(X) \
  X(NT_F32, f32, float, float) X(NT_F64, f64, double, double) \
  X(NT_F16, f16, uint16_t, float) X(NT_BF16, bf16, uint16_t, float)

/* IEEE half <-> float (round to nearest even; inf/nan kept) */
static inline float nt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else { /* subnormal: normalise */
      int e = -1; do { e++; man <<= 1; } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((exp + 112) << 23) | (man << 13);
  float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t nt_f32_to_f16(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000; int32_t exp = (int32_t)((x >> 23) & 0xff); uint32_t man = x & 0x7fffff;
  if (exp == 255) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {                       /* subnormal or zero in half */
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000; uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;   /* may carry into exp: correct */
  return (uint16_t)h;
}
static inline float nt_bf16_to_f32(uint16_t b) { uint32_t x = (uint32_t)b << 16; float f; memcpy(&f, &x, 4); return f; }
static inline uint16_t nt_f32_to_bf16(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);   /* quiet nan */
  x += 0x7fff + ((x >> 16) & 1);                                          /* nearest even */
  return (uint16_t)(x >> 16);
}
static inline float    nt_ld_f32(float x)    { return x; }
static inline double   nt_ld_f64(double x)   { return x; }
static inline float    nt_ld_f16(uint16_t x) { return nt_f16_to_f32(x); }
static inline float    nt_ld_bf16(uint16_t x){ return nt_bf16_to_f32(x); }
static inline int32_t  nt_ld_i32(int32_t x)  { return x; }
static inline int64_t  nt_ld_i64(int64_t x)  { return x; }
static inline uint8_t  nt_ld_u8(uint8_t x)   { return x; }
static inline uint8_t  nt_ld_b8(uint8_t x)   { return x; }
static inline float    nt_st_f32(float v)    { return v; }
static inline double   nt_st_f64(double v)   { return v; }
static inline uint16_t nt_st_f16(float v)    { return nt_f32_to_f16(v); }
static inline uint16_t nt_st_bf16(float v)   { return nt_f32_to_bf16(v); }
/* float -> integer conversions saturate (NaN -> 0): C leaves out-of-range
** casts undefined (NumPy/PyTorch give unspecified values there). */
static inline int64_t nt_sat_i64(double v) {
  return v != v ? 0 : v >= 9223372036854775807.0 ? INT64_MAX : v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v;
}
static inline int32_t nt_sat_i32(double v) {
  return v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
}
/* a value of any compute type to an integer storage type, exact for integers */
#define NT_TO_I32(v) _Generic((v), float: nt_sat_i32(v), double: nt_sat_i32(v), default: (int32_t)(v))
#define NT_TO_I64(v) _Generic((v), float: nt_sat_i64(v), double: nt_sat_i64(v), default: (int64_t)(v))
#define NT_TO_U8(v)  _Generic((v), float: (uint8_t)nt_sat_i64(v), double: (uint8_t)nt_sat_i64(v), default: (uint8_t)(v))
static inline int32_t  nt_st_i32(int32_t v)  { return v; }
static inline int64_t  nt_st_i64(int64_t v)  { return v; }
static inline uint8_t  nt_st_u8(uint8_t v)   { return v; }
static inline uint8_t  nt_st_b8(uint8_t v)   { return v != 0; }

/* Slow generic element access (formatting, item, tests). */
double nt_load_as_double(const void *p, nt_DType dt);
void   nt_store_from_double(void *p, nt_DType dt, double v);   /* ints truncate toward 0 */

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
/* Calls the kernel or fails with "<op>: not implemented for device cuda". */
static inline int nt_dispatch(int op, nt_Device dev, const nt_KernelArgs *a) {
  nt_Kernel k = nt_kernel_table[op][dev];
  if (k) return k(a);
  nt_error_set("%s: not implemented for device %s", nt_op_name(op), nt_device_name(dev));
  return -1;
}
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

/* ---- autograd ---------------------------------------------------------------
** A node is created by an op's front end when nt_needs_grad() holds.  It
** retains its inputs and anything saved.  backward gets the gradient of the
** op's output and writes gin[k] (a NEW reference, or NULL = no gradient) for
** every input k.  gin[k] may have a shape that broadcasts to in[k]'s shape:
** the engine sums it back (nt_sum_to_shape).  Backward runs with grad mode
** OFF and may use all public ops.  Multi-output ops (split) are written as
** several single-output ops.
** Saving the op's OUTPUT would make a cycle (out→node→out): nt_node_save
** stores a detached alias instead, so saving outputs is fine.
**
** Edges are captured when the node is recorded (PyTorch's next_edges):
** edge[k].fn is in[k]'s grad_fn at that moment (retained), so an in-place
** write that later re-records in[k] (y[0] = v gives y a new grad_fn) cannot
** redirect the gradients of consumers recorded before it.  Versions: every
** in-place write bumps its storage's version; the engine compares the
** versions recorded for inputs (edge[k].version, unless edge[k].check is
** off: backward does not read that input's values) and saved tensors
** (saved_ver) with the current ones before running a node's backward. */
typedef int (*nt_BackwardFn)(nt_Node *n, nt_Tensor *gout, nt_Tensor **gin);
#define NT_NODE_INLINE 4
typedef struct nt_Edge {
  nt_Node *fn;                 /* in[k]'s grad_fn when recorded (retained); NULL: a leaf, or no edge */
  uint64_t version;            /* in[k]'s storage version when recorded */
  bool grad;                   /* in[k] required grad when recorded (else: no edge) */
  bool check;                  /* backward reads in[k]'s values: version-checked (default on) */
} nt_Edge;
enum {
  NT_NODE_VIEW = 1u << 0,      /* output is a view of in[0] (same storage): index, permute, reshape, expand */
  NT_NODE_INPLACE = 1u << 1,   /* records an in-place write (CopySlicesBackward) */
};
struct nt_Node {
  int refcount;
  const char *name;            /* "MulBackward" — static string */
  nt_BackwardFn backward;
  int nin;
  nt_Tensor **in;              /* retained inputs (points at inl when nin <= 4) */
  nt_Edge *edge;               /* per input (points at edl when nin <= 4) */
  nt_Tensor *saved[4];         /* retained detached aliases */
  uint64_t saved_ver[4];       /* their storage versions when saved */
  int nsaved;
  uint32_t flags;              /* NT_NODE_* */
  uint64_t out_ver;            /* the output's storage version when recorded */
  double s[4];                 /* saved scalars */
  int64_t iarg[2 * NT_MAXDIM + 4]; /* saved ints (axes, shapes, ...) */
  int niarg;
  void *ctx; void (*ctx_free)(void *ctx);  /* anything else */
  /* engine-private */
  uint64_t seq;                /* creation number (nt_autograd_seq) */
  bool released;
  int deps;
  uint32_t visit;
  nt_Tensor *gacc;
  struct nt_Node *next_dying;  /* nt_node_release's list of nodes to free */
  nt_Tensor *inl[NT_NODE_INLINE];
  nt_Edge edl[NT_NODE_INLINE];
};
/* grad mode on and some input requires grad */
bool nt_needs_grad(int nin, nt_Tensor *const *in);
/* Creates a node for `out` (sets out->grad_fn, out->requires_grad) and
** captures its input edges and versions.  An input may be `out` itself (an
** in-place op): the node then keeps a detached alias, with out's previous
** grad_fn as the edge.  Returns the node (borrowed: out owns it) or NULL with
** the error set (OOM, or an input that is a view taken before its base was
** modified in place — its history is out of date). */
nt_Node *nt_record(nt_Tensor *out, const char *name, nt_BackwardFn fn, int nin, nt_Tensor *const *in);
int  nt_node_save(nt_Node *n, nt_Tensor *t);   /* index into n->saved, or -1 */
void nt_node_release(nt_Node *n);
/* backward never reads input k's values (only shape/dtype/device): no version check */
static inline void nt_node_unchecked(nt_Node *n, int k) { n->edge[k].check = false; }
/* marks a view op's node (output shares in[0]'s storage); its input is unchecked */
static inline void nt_node_view(nt_Node *n) { n->flags |= NT_NODE_VIEW; n->edge[0].check = false; }
/* 0, or -1 with "... modified in place ..." when t is a view whose base was
** re-recorded by an in-place write after the view was taken (t's grad_fn no
** longer describes its values). */
int  nt_check_fresh(const nt_Tensor *t);
/* Sums g over broadcast axes so it has `shape`; new reference. */
nt_Tensor *nt_sum_to_shape(nt_Tensor *g, const int64_t *shape, int ndim);
/* true if input k of the node gets a gradient: an edge was captured, and a
** leaf input still requires grad */
static inline bool nt_node_needs(const nt_Node *n, int k) {
  return n->in[k] && n->edge[k].grad && (n->edge[k].fn || n->in[k]->requires_grad);
}

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
static inline void nt_bump_version(nt_Tensor *t) { t->storage->version++; }

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

/* Small internal helpers shared by the front ends. */
nt_Tensor *nt_unary_scalar_op(int op, nt_Tensor *t, double s0, double s1);  /* clamp-like */
nt_Tensor *nt_reduce_ex(int op, nt_Tensor *t, const int *axes, int naxes, bool keepdims, double s0);
void nt_cpu_register_elem(void);
void nt_cpu_register_reduce(void);
void nt_cpu_register_matmul(void);
void nt_cpu_register_misc(void);

#endif
