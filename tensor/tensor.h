/*
** tensor.h — public API of the Nabla tensor core (prefix nt_).
**
** A tensor is a strided VIEW (dtype, shape, strides, offset, device) over a
** reference-counted storage.  Many views may share one storage (slice,
** transpose, reshape, expand ... never copy); the storage is freed when its
** last view is released.
**
** Conventions (all functions):
**  - Tensor arguments are BORROWED: the callee never releases them.
**  - A returned nt_Tensor* is a NEW reference: the caller must nt_release it.
**  - On error a function returns NULL (or -1 for int results) and sets a
**    thread-local message (nt_error_msg()).  Nothing aborts, exits or prints.
**  - Axes may be negative (counted from the end) wherever an axis is taken.
**  - Reference counts are not atomic: a tensor may move between threads but
**    must not be retained/released by two threads at once.
**  - Every differentiable op records an autograd node when grad mode is on
**    (thread-local, default on) and an input requires grad.
*/
#ifndef NT_TENSOR_H
#define NT_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "tsize.h"

#define NT_MAXDIM 8

/* ---- dtypes & devices --------------------------------------------------- */
typedef enum nt_DType {
  NT_F32 = 0, NT_F64, NT_F16, NT_BF16, NT_I32, NT_I64, NT_U8, NT_BOOL,
  NT_C64, NT_C128,   /* complex: (re, im) pairs of f32 / f64; only the ops of
                     ** tensor/complex.h take them, every other op refuses them */
  NT_NDTYPES
} nt_DType;

typedef enum nt_Device { NT_CPU = 0, NT_CUDA = 1, NT_NDEVICES } nt_Device;

#define NT_DEFAULT_FLOAT NT_F32   /* dtype of float literals / int÷int */
#define NT_DEFAULT_INT   NT_I64   /* dtype of int literals */

size_t      nt_dtype_size(nt_DType dt);          /* bytes per element */
const char *nt_dtype_name(nt_DType dt);          /* "f32", "i64", "bool", ... */
int         nt_dtype_from_name(const char *name);/* -1 (with error) if unknown; accepts
                                                    "float32"/"float"/"int64"/"long"/... too */
bool        nt_dtype_is_float(nt_DType dt);      /* f16 bf16 f32 f64 */
bool        nt_dtype_is_int(nt_DType dt);        /* u8 i32 i64 (not bool) */
bool        nt_dtype_is_complex(nt_DType dt);    /* c64 c128 */
const char *nt_device_name(nt_Device d);         /* "cpu", "cuda" */

/* PyTorch-like promotion.  Category order bool < int < float; within a
** category the wider type wins; u8+i32 → i32; f16+bf16 → f32; int+f16 → f16. */
nt_DType nt_promote(nt_DType a, nt_DType b);
/* tensor OP python-scalar: keeps the tensor's dtype unless the scalar is of a
** higher category: bool tensor with int scalar → i64, bool/int tensor with
** float scalar → f32 (NT_DEFAULT_FLOAT). */
nt_DType nt_promote_scalar(nt_DType t, bool scalar_is_float);

/* ---- storage & tensor --------------------------------------------------- */
/* lazy evaluation (tfuse.c): a storage's hook is set while it is a pending
** fused chain's output (its data is NULL until computed; the hook is then
** the chain's record) or while pending chains read it (`readers` of them);
** hook->settle computes them.  nt_base calls it before handing out the
** address, so no read or write of the memory can miss a pending chain. */
struct nt_Storage;
typedef struct nt_LazyHook { void (*settle)(struct nt_Storage *s); } nt_LazyHook;
typedef struct nt_Storage {
  void     *data;       /* host pointer (CPU) or device pointer */
  size_t    nbytes;
  nt_Device device;
  int       refcount;
  uint32_t  flags;      /* internal: NT_STORAGE_* in tinternal.h */
  int32_t   readers;    /* internal: pending fused chains reading it */
  void     *block;      /* internal: the malloc block holding this struct */
  uint64_t  version;    /* bumped by every in-place write (autograd checks it) */
  const nt_LazyHook *hook;   /* internal: see above; NULL for almost every storage */
  uint64_t  dev_epoch;  /* internal (device storages): the synchronisation epoch in which a
                        ** kernel or copy last wrote it, 0 = none pending (tdevice.c) */
} nt_Storage;

typedef struct nt_Node nt_Node;   /* autograd graph node, see textend.h */

/* The fields are readable by anyone (fast shape queries in the interpreter);
** write them only through this API or textend.h helpers. */
typedef struct nt_Tensor {
  int       refcount;
  nt_DType  dtype;
  nt_Device device;
  int       ndim;                  /* 0 .. NT_MAXDIM; 0 = scalar */
  int64_t   shape[NT_MAXDIM];
  int64_t   strides[NT_MAXDIM];    /* in ELEMENTS; may be 0 (expand) or negative (::-1) */
  int64_t   offset;                /* in elements, into storage->data */
  int64_t   numel;                 /* product of shape (1 for 0-d) */
  uint32_t  flags;                 /* NT_T_CONTIG (textend.h); private NT_T_* in tinternal.h */
  nt_Storage *storage;
  /* autograd */
  bool      requires_grad;
  struct nt_Tensor *grad;          /* accumulated gradient of a leaf (or NULL) */
  nt_Node  *grad_fn;               /* node that produced it (NULL for leaves) */
} nt_Tensor;

/* Result dtype of a binary op on two tensors (PyTorch's result_type): like
** nt_promote, except that a 0-d tensor next to a tensor with ndim >= 1 only
** raises the category, not the width: f32[2,3] + f64 0-d → f32, i32[3] +
** i64 0-d → i32, i32[3] + f64 0-d → f64 (category raised: the 0-d dtype). */
nt_DType nt_result_type(const nt_Tensor *a, const nt_Tensor *b);

/* ---- lifetime ----------------------------------------------------------- */
void        nt_init(void);                 /* registers the CPU kernels; idempotent */
nt_Tensor  *nt_retain(nt_Tensor *t);       /* returns t; NULL-safe */
void        nt_release(nt_Tensor *t);      /* NULL-safe */

/* ---- errors ------------------------------------------------------------- */
const char *nt_error_msg(void);            /* last error of this thread ("" if none) */
void        nt_error_set(const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 1, 2)))
#endif
  ;
void        nt_error_clear(void);

/* ---- interrupts --------------------------------------------------------
** Long CPU kernels (matmul in row blocks, sort, reductions, elementwise ops
** over large tensors) look at *flag between chunks of work and fail with the
** error "interrupted" when it is nonzero, so a Ctrl-C stops one huge op within
** about 100 ms.  The embedding installs its own flag (lang: the running VM's);
** NULL turns the checks off.  Kernels read the flag, never clear it. */
void        nt_set_interrupt_flag(volatile int *flag);
bool        nt_interrupt_requested(void);

/* ---- allocation pressure -----------------------------------------------
** A tensor of gigabytes counts as one object to a collector that counts
** objects.  hook (may be NULL) is called after tensor storage allocations
** adding up to `every` bytes since the hook was set or last called, so an
** embedding can run its cycle collector by bytes.  nt_storage_bytes: the
** bytes of tensor storage alive now (all devices; small inline tensors not
** counted). */
void        nt_set_pressure_hook(void (*hook)(void), size_t every);
size_t      nt_storage_bytes(void);

/* ---- queries ------------------------------------------------------------ */
static inline int      nt_ndim(const nt_Tensor *t) { return t->ndim; }
static inline int64_t  nt_numel(const nt_Tensor *t) { return t->numel; }
static inline nt_DType nt_dtype(const nt_Tensor *t) { return t->dtype; }
static inline nt_Device nt_device(const nt_Tensor *t) { return t->device; }
int64_t nt_size(const nt_Tensor *t, int axis);        /* -1 + error if axis out of range */
bool    nt_is_contiguous(const nt_Tensor *t);         /* row-major dense */
/* Host pointer to element [0,...,0] (CPU only; NULL for CUDA). */
void   *nt_data_ptr(const nt_Tensor *t);
/* Writes "[2, 3]" into buf (always NUL-terminated). */
char   *nt_shape_str(const int64_t *shape, int ndim, char *buf, size_t bufsize);
/* 0 and *numel (may be NULL) when shape is acceptable for a tensor (tsize.h:
** no negative dimension, at most NT_MAX_NUMEL elements); else -1 and an
** error naming op and the shape.  Every constructor and view checks here. */
int     nt_check_shape(const char *op, const int64_t *shape, int ndim, int64_t *numel);

/* ---- creation ----------------------------------------------------------- */
nt_Tensor *nt_empty(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev);
nt_Tensor *nt_zeros(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev);
nt_Tensor *nt_ones(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev);
nt_Tensor *nt_full(const int64_t *shape, int ndim, double value, nt_DType dt, nt_Device dev);
nt_Tensor *nt_scalar(double value, nt_DType dt);   /* 0-d CPU tensor */
nt_Tensor *nt_empty_like(nt_Tensor *t);
nt_Tensor *nt_zeros_like(nt_Tensor *t);
nt_Tensor *nt_ones_like(nt_Tensor *t);
nt_Tensor *nt_full_like(nt_Tensor *t, double value);
/* [start, stop) by step; length ceil((stop-start)/step). */
nt_Tensor *nt_arange(double start, double stop, double step, nt_DType dt);
nt_Tensor *nt_linspace(double start, double stop, int64_t num, nt_DType dt);
nt_Tensor *nt_eye(int64_t n, int64_t m, nt_DType dt);
/* the same made on dev (a GPU computes the values: no host->device copy) */
nt_Tensor *nt_arange_on(double start, double stop, double step, nt_DType dt, nt_Device dev);
nt_Tensor *nt_linspace_on(double start, double stop, int64_t num, nt_DType dt, nt_Device dev);
nt_Tensor *nt_eye_on(int64_t n, int64_t m, nt_DType dt, nt_Device dev);
/* Copies `data` (row-major, elements of `src_dt`) into a new CPU tensor of dtype dt. */
nt_Tensor *nt_from_buffer(const void *data, nt_DType src_dt, const int64_t *shape, int ndim, nt_DType dt);

/* ---- element access & host copies -------------------------------------- */
/* Value of a 1-element tensor (any ndim) as double.  Error otherwise. */
int     nt_item(nt_Tensor *t, double *out);
/* Element at a full index (ndim ints, negatives allowed) as double. */
int     nt_get(nt_Tensor *t, const int64_t *index, double *out);
/* Copies all elements in row-major order into buf converted to dtype `as`
** (e.g. NT_F64 / NT_I64 / NT_BOOL for tolist).  buf holds numel elements. */
int     nt_to_host(nt_Tensor *t, void *buf, nt_DType as);

/* ---- in-place writes (x[...] = v) -------------------------------------- */
/* Every write bumps the storage's version counter.  Autograd (PyTorch's
** model): with grad mode on, a write into a tensor that is part of a graph,
** or of a value that requires grad into a plain float tensor, is RECORDED —
** the tensor gets a new grad_fn, CopySlicesBackward, whose inputs are its
** previous self and the value; earlier consumers keep the edges they
** captured.  Refused: a leaf that requires grad (and its views: use no_grad
** for updates), a write through a VIEW of a graph tensor (write through the
** base: y[0, 1] = v), and a tracked write into a plain tensor whose memory
** other tensors share.  A node whose backward needs a tensor that was
** written after it was used fails in backward ("modified in place").
** With grad mode off (no_grad: optimizer updates) writes are never recorded.
**
** nt_index_put: base[idx] = v (nt_Index list as for nt_index; n = 0: the
** whole tensor); v broadcasts to the indexed region and is cast to base's
** dtype.  nt_index_fill: the same with a number.  nt_mask_put: base =
** where(mask, v, base), mask bool, mask and v broadcasting to base's shape.
** nt_copy_/nt_fill_: dst may be any view; they are nt_index_put(dst, -, 0, src)
** when autograd is involved. */
int     nt_mask_put(nt_Tensor *base, nt_Tensor *mask, nt_Tensor *v);
int     nt_copy_(nt_Tensor *dst, nt_Tensor *src);
/* t's memory and history under a second tensor object (see tinplace.c) */
nt_Tensor *nt_alias(nt_Tensor *t);
int     nt_fill_(nt_Tensor *dst, double value);

/* ---- views (share storage; differentiable) ------------------------------ */
/* Python-style slice of one axis.  start/stop are clamped like Python; use
** NT_NONE for an omitted bound.  step != 0; negative steps give negative strides. */
#define NT_NONE INT64_MIN
nt_Tensor *nt_slice(nt_Tensor *t, int axis, int64_t start, int64_t stop, int64_t step);
nt_Tensor *nt_narrow(nt_Tensor *t, int axis, int64_t start, int64_t length);
nt_Tensor *nt_select(nt_Tensor *t, int axis, int64_t index);  /* drops the axis */
nt_Tensor *nt_transpose(nt_Tensor *t, int axis0, int axis1);
nt_Tensor *nt_T(nt_Tensor *t);                         /* reverses all axes (NumPy .T) */
nt_Tensor *nt_permute(nt_Tensor *t, const int *perm, int n);
/* A view when the strides allow it, else a copy.  One -1 entry is inferred. */
nt_Tensor *nt_reshape(nt_Tensor *t, const int64_t *shape, int ndim);
nt_Tensor *nt_flatten(nt_Tensor *t, int start_axis, int end_axis);
nt_Tensor *nt_expand(nt_Tensor *t, const int64_t *shape, int ndim);   /* -1 keeps a size */
nt_Tensor *nt_broadcast_to(nt_Tensor *t, const int64_t *shape, int ndim);
nt_Tensor *nt_squeeze(nt_Tensor *t, int axis);         /* axis = NT_ALL_AXES: all size-1 axes */
nt_Tensor *nt_unsqueeze(nt_Tensor *t, int axis);
#define NT_ALL_AXES 0x7fff

/* Multi-axis indexing x[i, a:b:c, None, ...] → view.  Integer entries drop
** the axis (bounds-checked, negatives wrap), NEWAXIS inserts a size-1 axis,
** ELLIPSIS expands to the missing full slices (at most one). */
typedef enum { NT_IDX_INT, NT_IDX_SLICE, NT_IDX_NEWAXIS, NT_IDX_ELLIPSIS } nt_IndexKind;
typedef struct nt_Index {
  nt_IndexKind kind;
  int64_t start, stop, step;       /* INT: index in start; SLICE: NT_NONE = omitted */
} nt_Index;
nt_Tensor *nt_index(nt_Tensor *t, const nt_Index *idx, int n);
/* base[idx] = v / = value: see "in-place writes" above. */
int        nt_index_put(nt_Tensor *base, const nt_Index *idx, int n, nt_Tensor *v);
int        nt_index_fill(nt_Tensor *base, const nt_Index *idx, int n, double value);

/* ---- copies & conversions ---------------------------------------------- */
nt_Tensor *nt_contiguous(nt_Tensor *t);   /* t itself (retained) if already contiguous */
nt_Tensor *nt_clone(nt_Tensor *t);        /* always a fresh contiguous copy */
nt_Tensor *nt_to_dtype(nt_Tensor *t, nt_DType dt);   /* retained t if same dtype */
nt_Tensor *nt_to_device(nt_Tensor *t, nt_Device dev);/* needs the device's backend */

/* ---- elementwise -------------------------------------------------------- */
typedef enum nt_OpId {
  /* binary (broadcasting) */
  NT_OP_ADD, NT_OP_SUB, NT_OP_MUL, NT_OP_DIV, NT_OP_POW, NT_OP_FLOORDIV, NT_OP_MOD,
  NT_OP_MAXIMUM, NT_OP_MINIMUM,
  NT_OP_EQ, NT_OP_NE, NT_OP_LT, NT_OP_LE, NT_OP_GT, NT_OP_GE,        /* → bool */
  NT_OP_LOGICAL_AND, NT_OP_LOGICAL_OR,                               /* → bool */
  /* unary */
  NT_OP_NEG, NT_OP_EXP, NT_OP_LOG, NT_OP_LOG1P, NT_OP_SQRT, NT_OP_RSQRT, NT_OP_ABS,
  NT_OP_SIGN, NT_OP_TANH, NT_OP_SIGMOID, NT_OP_RELU, NT_OP_GELU /* erf */,
  NT_OP_GELU_TANH, NT_OP_SILU, NT_OP_SIN, NT_OP_COS, NT_OP_LOGICAL_NOT /* → bool */,
  NT_OP_FLOOR, NT_OP_CEIL, NT_OP_ROUND, NT_OP_RECIPROCAL, NT_OP_SQUARE, NT_OP_EXPM1,
  NT_OP_LOG2, NT_OP_TAN, NT_OP_ERF,
  NT_OP_CLAMP,              /* unary with scalars lo, hi (NaN = unbounded) */
  /* reductions */
  NT_OP_SUM, NT_OP_MEAN, NT_OP_PROD, NT_OP_MAX, NT_OP_MIN, NT_OP_ARGMAX, NT_OP_ARGMIN,
  NT_OP_VAR, NT_OP_STD, NT_OP_LOGSUMEXP, NT_OP_ANY, NT_OP_ALL,
  /* other kernels in the op table (see tbackend.h for their argument layout) */
  NT_OP_WHERE, NT_OP_COPY, NT_OP_FILL, NT_OP_MATMUL, NT_OP_RANDOM, NT_OP_TRIL,
  NT_OP_ARANGE,
  NT_OP_BUILTIN_COUNT
} nt_OpId;

#define NT_OP_IS_BINARY(op) ((op) >= NT_OP_ADD && (op) <= NT_OP_LOGICAL_OR)
#define NT_OP_IS_UNARY(op)  ((op) >= NT_OP_NEG && (op) <= NT_OP_CLAMP)
#define NT_OP_IS_REDUCE(op) ((op) >= NT_OP_SUM && (op) <= NT_OP_ALL)
const char *nt_op_name(int op);              /* "add", "exp", ... */

/* Generic entry points (the named wrappers below call these). */
nt_Tensor *nt_binary(int op, nt_Tensor *a, nt_Tensor *b);
/* t OP s (or s OP t when scalar_first).  The scalar counts as a float for
** promotion iff it is not integral; use nt_binary_scalar_ex to say it. */
nt_Tensor *nt_binary_scalar(int op, nt_Tensor *t, double s, bool scalar_first);
enum { NT_SCALAR_FIRST = 1, NT_SCALAR_FLOAT = 2, NT_SCALAR_INT = 4 };
nt_Tensor *nt_binary_scalar_ex(int op, nt_Tensor *t, double s, int flags);
/* (integer tensor) ** (negative integer scalar) is an error, as in torch and
** NumPy; with a tensor exponent negative entries give 1, -1 or 0 (torch). */
nt_Tensor *nt_unary(int op, nt_Tensor *t);

nt_Tensor *nt_add(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_sub(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_mul(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_div(nt_Tensor *a, nt_Tensor *b);     /* true division: ints → f32 */
nt_Tensor *nt_pow(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_floordiv(nt_Tensor *a, nt_Tensor *b);/* floor(a/b); ints: error on /0 */
nt_Tensor *nt_mod(nt_Tensor *a, nt_Tensor *b);     /* Python sign convention (sign of b) */
nt_Tensor *nt_maximum(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_minimum(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_eq(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_ne(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_lt(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_le(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_gt(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_ge(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_logical_and(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_logical_or(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_logical_not(nt_Tensor *t);
nt_Tensor *nt_neg(nt_Tensor *t);
nt_Tensor *nt_exp(nt_Tensor *t);
nt_Tensor *nt_log(nt_Tensor *t);
nt_Tensor *nt_log1p(nt_Tensor *t);
nt_Tensor *nt_sqrt(nt_Tensor *t);
nt_Tensor *nt_rsqrt(nt_Tensor *t);
nt_Tensor *nt_abs(nt_Tensor *t);
nt_Tensor *nt_sign(nt_Tensor *t);
nt_Tensor *nt_tanh(nt_Tensor *t);
nt_Tensor *nt_sigmoid(nt_Tensor *t);
nt_Tensor *nt_relu(nt_Tensor *t);
nt_Tensor *nt_gelu(nt_Tensor *t, bool tanh_approx);
nt_Tensor *nt_silu(nt_Tensor *t);
nt_Tensor *nt_sin(nt_Tensor *t);
nt_Tensor *nt_cos(nt_Tensor *t);
/* lo/hi = NAN for "no bound".  Gradient passes where lo <= x <= hi.  An
** integer tensor with a non-integral (or infinite) bound gives f32, like
** tensor OP float scalar; otherwise the dtype is kept (bool → i64). */
nt_Tensor *nt_clamp(nt_Tensor *t, double lo, double hi);
/* cond (bool or any dtype: nonzero = true) ? a : b, broadcasting all three. */
nt_Tensor *nt_where(nt_Tensor *cond, nt_Tensor *a, nt_Tensor *b);

/* ---- lazy evaluation (fused elementwise chains; tfuse.c) -----------------
** Elementwise ops on large CPU tensors (floating results, no autograd
** recording) may return a LAZY tensor: shape, dtype and errors are final, the
** values are computed later, all ops of the chain in one cache-blocked pass,
** bit for bit what op-by-op evaluation gives.  Anything that touches the
** memory (nt_base: every kernel, item, printing, I/O, raw access) computes it
** first, and a write into a tensor a pending chain reads computes that chain
** first.  NABLA_FUSE=0 in the environment turns it off.
** nt_settle(t): computes t now if it is lazy (a flag check otherwise); the
** interpreter calls it at the end of a statement that stores a tensor, so a
** lazy value holds its inputs for one statement at most.  0 / -1 + error;
** with the interrupt flag set it may stop between tiles ("interrupted"): t
** then stays lazy and whole (a later read computes all of it). */
int        nt_settle(nt_Tensor *t);
bool       nt_is_lazy(const nt_Tensor *t);
bool       nt_fuse_enabled(void);
bool       nt_fuse_set_enabled(bool on);     /* returns the previous setting */
/* pending chains now, and chains computed / dropped unneeded since start */
void       nt_fuse_stats(int64_t *pending, int64_t *forced, int64_t *dropped);

/* ---- reductions --------------------------------------------------------- */
/* axes: list of naxes axes (duplicates are an error); naxes == 0 or
** axes == NULL reduces over all axes.  keepdims keeps reduced axes as size 1.
** sum/prod of ints/bool → i64; mean/var/std/logsumexp need floats (ints →
** f32); max/min keep dtype; argmax/argmin → i64 and take exactly one axis
** (or none = flattened); any/all → bool.  max/min/argmax/argmin of an empty
** extent are errors. */
nt_Tensor *nt_reduce(int op, nt_Tensor *t, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_sum(nt_Tensor *t, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_mean(nt_Tensor *t, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_prod(nt_Tensor *t, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_max(nt_Tensor *t, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_min(nt_Tensor *t, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_argmax(nt_Tensor *t, const int *axis_or_null, bool keepdims);
nt_Tensor *nt_argmin(nt_Tensor *t, const int *axis_or_null, bool keepdims);
/* correction: 1 = unbiased (Bessel, the default in PyTorch), 0 = population. */
nt_Tensor *nt_var(nt_Tensor *t, const int *axes, int naxes, int correction, bool keepdims);
nt_Tensor *nt_std(nt_Tensor *t, const int *axes, int naxes, int correction, bool keepdims);
nt_Tensor *nt_logsumexp(nt_Tensor *t, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_any(nt_Tensor *t, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_all(nt_Tensor *t, const int *axes, int naxes, bool keepdims);

/* ---- linear algebra ----------------------------------------------------- */
/* NumPy matmul: 1-D a is [1,n] (prepended axis removed after), 1-D b is
** [n,1] (appended axis removed); batch dims broadcast.  Floats use BLAS. */
nt_Tensor *nt_matmul(nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_dot(nt_Tensor *a, nt_Tensor *b);     /* 1-D · 1-D → 0-d */
nt_Tensor *nt_outer(nt_Tensor *a, nt_Tensor *b);   /* 1-D ⊗ 1-D → 2-D */

/* ---- shape ops (copying; differentiable) -------------------------------- */
nt_Tensor *nt_concat(nt_Tensor *const *ts, int n, int axis);
nt_Tensor *nt_stack(nt_Tensor *const *ts, int n, int axis);
/* split into pieces of `sizes` along axis (sum must equal the axis size).
** out[] receives n new references (views).  Returns n or -1. */
int        nt_split(nt_Tensor *t, const int64_t *sizes, int n, int axis, nt_Tensor **out);
/* chunks of ceil(size/chunks) (the last may be smaller); returns count or -1.
** out must have room for `chunks` tensors. */
int        nt_chunk(nt_Tensor *t, int chunks, int axis, nt_Tensor **out);
nt_Tensor *nt_flip(nt_Tensor *t, const int *axes, int naxes);
/* NumPy tile / torch repeat: reps per axis (n may exceed ndim: new leading axes). */
nt_Tensor *nt_repeat(nt_Tensor *t, const int64_t *reps, int n);
/* keep elements with col - row <= k (tril) / >= k (triu) on the last two axes */
nt_Tensor *nt_tril(nt_Tensor *t, int64_t k);
nt_Tensor *nt_triu(nt_Tensor *t, int64_t k);

/* ---- random (Philox4x32-10, counter based) ------------------------------
** Global state: (seed, offset), offset counts 128-bit Philox BLOCKS.
** A request for n numbers uses blocks offset .. offset+ceil(n/4)-1 and then
** advances offset by ceil(n/4).  For element i of a request:
**   block   = offset + i/4,  counter = {lo32(block), hi32(block), 0, 0}
**   key     = {lo32(seed), hi32(seed)}
**   w[0..3] = philox4x32_10(counter, key)          (the standard 10 rounds,
**             multipliers 0xD2511F53/0xCD9E8D57, key bumps 0x9E3779B9/0xBB67AE85)
**   uniform (rand, bernoulli): u = (w[i%4] >> 8) * 2^-24      in [0,1)
**   normal  (randn, normal): pair j = (i%4)/2 uses
**             u1 = ((w[2j] >> 8) + 1) * 2^-24   in (0,1]
**             u2 =  (w[2j+1] >> 8) * 2^-24
**             r = sqrt(-2 ln u1), th = 2 pi u2  (in double)
**             value = r cos th  if i is even,  r sin th if i is odd
**             then mean + std*value, rounded to the dtype.
**   randint(low, high): low + w[i%4] % (high - low)   (high-low <= 2^32)
**   bernoulli(p): 1 if u < p else 0
**   randperm(n): keys w[i%4] for i < n; the permutation sorts i by (key, i).
** nt_seed sets seed and resets offset to 0.  The default seed is 0. */
void       nt_seed(uint64_t seed);
void       nt_rng_get_state(uint64_t *seed, uint64_t *offset);
void       nt_rng_set_state(uint64_t seed, uint64_t offset);
nt_Tensor *nt_rand(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev);
nt_Tensor *nt_randn(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev);
nt_Tensor *nt_normal(const int64_t *shape, int ndim, double mean, double std, nt_DType dt, nt_Device dev);
nt_Tensor *nt_randint(int64_t low, int64_t high, const int64_t *shape, int ndim, nt_DType dt, nt_Device dev);
nt_Tensor *nt_randperm(int64_t n, nt_DType dt, nt_Device dev);
/* 0/1 mask of t's shape and dtype (floats; bool allowed), 1 with probability p. */
nt_Tensor *nt_bernoulli(nt_Tensor *like, double p);

/* ---- printing ------------------------------------------------------------
** PyTorch style, malloc'd, e.g.
**   tensor([[1.0000, 2.5000],
**           [3.0000, 4.0000]])
**   tensor([1, 2, 3], dtype=i32)      tensor([true, false])
**   tensor(3.5000, requires_grad=true)  tensor([1., 2.], device=cuda)
** Floats share one format per tensor: integral values print as "1.", else 4
** decimals, scientific (1.0000e+10) when the magnitudes need it.  More than
** 1000 elements: the first/last 3 entries of each axis with "...".
** Suffix dtype=… unless f32 (floats) / i64 (ints) / bool. */
char *nt_format(nt_Tensor *t);

/* ---- autograd ----------------------------------------------------------- */
bool       nt_grad_enabled(void);              /* thread-local, default true */
bool       nt_set_grad_enabled(bool on);       /* returns the previous value */
/* Only floating tensors can require grad; setting it on a non-leaf is an error
** (like PyTorch).  Returns 0 / -1. */
int        nt_set_requires_grad(nt_Tensor *t, bool on);
static inline bool nt_requires_grad(const nt_Tensor *t) { return t->requires_grad; }
static inline bool nt_is_leaf(const nt_Tensor *t) { return t->grad_fn == NULL; }
static inline nt_Tensor *nt_grad(const nt_Tensor *t) { return t->grad; }   /* borrowed, may be NULL */
int        nt_set_grad(nt_Tensor *t, nt_Tensor *g);   /* g NULL clears (zero_grad) */
const char *nt_grad_fn_name(const nt_Tensor *t);      /* "AddBackward", or NULL */
nt_Tensor *nt_detach(nt_Tensor *t);                   /* shares storage, no grad */
/* Reverse pass from `root`.  grad NULL requires a 1-element root (uses 1).
** Accumulates into leaves' .grad.  The graph's saved tensors are freed after
** the pass unless retain_graph; a second pass over a freed graph is an error. */
int        nt_backward(nt_Tensor *root, nt_Tensor *grad, bool retain_graph);
/* torch.autograd.grad: gradients of sum_k <outputs[k], gouts[k]> (gouts NULL
** or gouts[k] NULL: ones, for 1-element outputs) with respect to inputs[],
** which are SINKS: a gradient reaching one is written to grads[i] (a new
** reference; NULL when none reaches it) and not propagated further, and no
** leaf's .grad is touched.  Nodes recorded before node number `min_seq` (see
** nt_autograd_seq) are never entered: reaching one, or a leaf that requires
** grad, that is not an input is an error (checkpointing; 0 = no limit).  Frees the graph unless retain_graph.  0 / -1. */
int        nt_autograd_grad(int nout, nt_Tensor *const *outputs, nt_Tensor *const *gouts, int nin,
                            nt_Tensor *const *inputs, nt_Tensor **grads, bool retain_graph, uint64_t min_seq);
/* Gradient-ready hooks (data-parallel gradient reduction overlapping
** backward): thread-local, installed by nt_set_grad_hooks (NULL: none;
** returns the previous).  Only an outermost nt_backward uses them (nested
** engine runs — checkpoint recomputation, nt_autograd_grad — do not):
**   ready(ud, leaf, grad)  once per leaf that requires grad, as soon as every
**                          edge into it has delivered: grad is its final
**                          .grad (borrowed), which may include earlier passes;
**   finish(ud, ok)         after the pass (ok = false after an error); may
**                          replace leaves' .grad (nt_set_grad) with reduced
**                          values.  Either returns 0 or -1 with the error set. */
typedef struct nt_GradHooks {
  int (*ready)(void *ud, nt_Tensor *leaf, nt_Tensor *grad);
  int (*finish)(void *ud, bool ok);
  void *ud;
} nt_GradHooks;
const nt_GradHooks *nt_set_grad_hooks(const nt_GradHooks *hooks);
/* number the next recorded node will get (node numbers only grow) */
uint64_t   nt_autograd_seq(void);
/* live nodes that still hold their graph, and the bytes of the tensors they
** hold (inputs and saved tensors, each counted per node) — a measure of the
** activation memory a graph keeps; for tests and memory tuning. */
void       nt_autograd_stats(int64_t *nodes, int64_t *held_bytes);
/* Boundary collector (activation checkpointing): while one is installed,
** every tensor that requires grad and is passed to an op front end while
** grad mode is OFF is appended (borrowed, once) to the set.  Returns the
** previously installed set so they nest. */
typedef struct nt_TensorSet { nt_Tensor **t; int n, cap; bool oom; } nt_TensorSet;
nt_TensorSet *nt_boundary_collect(nt_TensorSet *set);

/* ---- autocast (mixed precision; tautocast.c) ------------------------------
** Thread-local, off by default.  nt_autocast_set(NT_BF16 | NT_F16) turns it
** on (any other value, e.g. -1: off) and returns the previous setting (-1 =
** off).  Under autocast matmul and conv2d (and attention) cast floating
** inputs to that dtype; softmax, log_softmax, cross_entropy, layer_norm,
** mse_loss, sum/mean/prod/logsumexp/var/std, cumsum, exp, expm1, log, log1p,
** log2, pow, reciprocal, rsqrt and tan compute f16/bf16 inputs in f32 (output
** f32); other ops promote as usual.  Backward passes run with it off. */
int        nt_autocast_set(int dtype_or_minus1);
int        nt_autocast_dtype(void);               /* -1 when off */

/* ---- CPU threads (tblas.c) -------------------------------------------------
** nt_set_num_threads(n >= 1): OpenMP's count for this thread's parallel
** kernels and OpenBLAS's (applied when the library loads, if later), as
** torch.set_num_threads; nt_num_threads(): OpenMP's current count. */
void       nt_set_num_threads(int n);
/* the counts each library runs with now, to check that nt_set_num_threads
** reached them: OpenMP's (our kernels; oneDNN's next primitive), OpenBLAS's
** (loads it; -1 when it cannot say), and the oneDNN primitive run last's (0
** before any) */
void       nt_thread_counts(int *openmp, int *openblas, int *onednn);
int        nt_num_threads(void);

#endif
