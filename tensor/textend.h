/*
** textend.h — the tensor core's extension API: for code OUTSIDE tensor/ that
** adds its own autograd ops or touches a tensor's memory directly.
**
** Who uses it: dist/ (collectives are differentiable ops with custom
** backward functions; reducers and codecs read and write gradient buffers),
** lang/'s builtin libraries (activation checkpointing and custom_vjp are
** custom autograd nodes), tests.  Device backends use tbackend.h, which
** includes this header.  Everything else should need only tensor.h.
** (tinternal.h is private to tensor/: nothing outside tensor/ includes it.)
**
** Rules
**  - References: the conventions of tensor.h hold (arguments borrowed,
**    returned tensors are new references).  A node RETAINS its inputs and
**    saved tensors and releases them when it dies; the node itself belongs to
**    the output tensor it was recorded for (out->grad_fn): never release a
**    node you got from nt_record.
**  - Raw memory: nt_base(t) is the address of t's first element inside its
**    storage.  It stays valid while you hold a reference to t (or to any view
**    of the same storage) — views share the storage, they never copy.  For a
**    CUDA tensor it is a DEVICE pointer: dereference it only in device code or
**    through the nt_cuda_* copies of tdevice.h.  Walk the elements with
**    t->strides (in elements, possibly 0 or negative) unless
**    nt_is_contiguous(t).
**  - Take the address (nt_base) right before the access, not before other
**    ops run: nt_base is what computes pending lazy values (tensor.h) that
**    read the memory, so a pointer kept across other ops may write under a
**    pending chain (reported as an internal error when the chain runs).
**  - Writing raw memory is an in-place write that autograd cannot see: call
**    nt_bump_version(t) after it, so a backward that saved t fails with
**    "modified in place" instead of using the new values silently; and never
**    write into a tensor another thread may be using.
**  - Backward functions run with grad mode off, on the thread that called
**    nt_backward, and may use every public op.
*/
#ifndef NT_TEXTEND_H
#define NT_TEXTEND_H

#include "tensor.h"
#include "tdtype.h"

/* ---- raw storage ------------------------------------------------------------ */
/* nt_Tensor.flags: NT_T_CONTIG = row-major dense, kept current by
** nt_update_meta (tinternal.h has the core's private flags). */
enum { NT_T_CONTIG = 1u << 0 };

/* Address of the element at storage offset t->offset (host memory on the
** CPU, a device pointer on CUDA); valid while a reference to t is held.
** A lazy tensor (tensor.h) or one a pending chain reads is settled first:
** every raw access, read or write, goes through here. */
static inline char *nt_base(const nt_Tensor *t) {
  nt_Storage *s = t->storage;
  if (__builtin_expect(s->hook != NULL, 0)) s->hook->settle(s);
  return (char *)s->data + t->offset * (int64_t)nt_dtype_size(t->dtype);
}
/* A new heap tensor header sharing t's storage (storage retained), copying
** dtype/shape/strides/offset; no autograd state.  Edit shape/strides/offset
** then call nt_update_meta. */
nt_Tensor *nt_view_of(nt_Tensor *t);
/* Recomputes numel and the contiguity flag after shape/strides changed. */
void nt_update_meta(nt_Tensor *t);
/* Row-major contiguous strides for shape; returns numel. */
int64_t nt_contig_strides(const int64_t *shape, int ndim, int64_t *strides);
int64_t nt_shape_numel(const int64_t *shape, int ndim);
/* Wraps existing memory (never freed by us) as a CPU tensor — for tests and
** bindings; the memory must outlive every view of the result. */
nt_Tensor *nt_from_external(void *data, nt_DType dt, const int64_t *shape, int ndim);
/* GPU data errors (tdevice.c; docs/cuda.md "Execution model and errors"): a
** kernel that finds a bad index leaves garbage and the error is reported at
** the next synchronisation, so every device storage remembers the epoch
** (the work between two synchronisations) that last wrote it, and a storage
** written in an epoch that ended in such an error is unusable.
** nt_dev_check(t, what) is 0, or -1 with "<what>: this tensor was computed by
** the GPU work in which <error> failed; ..." when t's values are unusable:
** call it before reading a device tensor's raw memory (copies, collectives).
** nt_dev_wrote_(s) records a write into s in the current epoch (a storage
** already unusable stays so: a raw write may be partial). */
int  nt_dev_check(const nt_Tensor *t, const char *what);
void nt_dev_wrote_(nt_Storage *s);
/* Marks t's storage as written in place (see the rules above). */
static inline void nt_bump_version(nt_Tensor *t) {
  t->storage->version++;
  if (t->storage->device != NT_CPU) nt_dev_wrote_(t->storage);
}

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
  NT_NODE_SUM = 1u << 2,       /* out = in[0] + in[1], the same shapes: each input's gradient is out's, in its dtype */
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
/* A half gradient written in the same pass as the f32 one: a backward that made g,
** the gradient of a NT_NODE_SUM node n's f32 output, may also write h = g in the half
** dtype of one of n's inputs (a norm's backward into autocast's f32 residual stream
** whose branch is bf16) and offer it (takes h).  n's backward takes h for that
** input when the gradient the engine hands it is that very g (nothing else reached
** n's output: g is retained with h, so its address names no other tensor), and
** casts otherwise; it drops the offer when done. */
void nt_node_offer_half_grad(nt_Node *n, nt_Tensor *g, nt_Tensor *h);
nt_Tensor *nt_node_take_half_grad(nt_Node *n, nt_Tensor *gout, nt_DType dt);   /* h (owned) or NULL */
void nt_node_drop_half_grad(nt_Node *n);
/* Sums g over broadcast axes so it has `shape`; new reference. */
nt_Tensor *nt_sum_to_shape(nt_Tensor *g, const int64_t *shape, int ndim);
/* true if input k of the node gets a gradient: an edge was captured, and a
** leaf input still requires grad */
static inline bool nt_node_needs(const nt_Node *n, int k) {
  return n->in[k] && n->edge[k].grad && (n->edge[k].fn || n->in[k]->requires_grad);
}

#endif
