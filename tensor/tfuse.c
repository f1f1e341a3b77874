/*
** tfuse.c — lazy, fused elementwise chains (issue 16).
**
** `y = x * 2 + 1` on a large tensor runs, op by op, as two passes over
** memory with a full-size temporary.  Here the front ends of telem.c hand
** eligible elementwise ops (floating results, CPU, no autograd recording,
** at least FUSE_MIN_NUMEL elements) to nt_fuse_binary / _scalar / _unary,
** which RECORD the op instead of running it: the result is a normal tensor
** whose storage shows no data (data NULL) until forced — its buffer is
** allocated at once but never written when the value is dropped unread, as
** with NumPy's absent temporaries (a large block is mmap'd: untouched pages
** take no memory) — with an nt_Fused record (tinternal.h: an op list with dtypes, the input
** tensors and their broadcast strides — the unit a GPU codegen would
** compile).  An op on a lazy operand of the same shape extends a copy of its
** record, so a chain is one record of up to FUSE_MAXOPS ops over up to
** FUSE_MAXIN inputs.  Errors (shapes, dtypes, devices) are raised while
** recording, in the statement that made the op, and so is the output
** buffer's allocation (commit): computing a chain cannot fail.
**
** Forcing evaluates the whole chain in tiles of TILE elements: each op runs
** the SAME CPU kernel as unfused evaluation (the op table's k_binary,
** k_unary, k_copy) on contiguous tile headers, so the values are bit for bit
** those of op-by-op evaluation (the kernels' contiguous paths: SLEEF where the
** unfused op would use SLEEF; telem.c keeps transcendental ops on strided
** inputs, which unfused would run through libm, out of chains).  + - * / on
** f32/f64 call nt_arith_f32/f64 directly (tcpu_elem.c: the loops the eager
** kernel runs too, contiguous or strided, so even NaN payloads agree), without
** a kernel call per tile.  Tiles are spread over the OpenMP pool above
** NT_OMP_THRESHOLD elements.
**
** Autograd (issue 28): ops whose inputs require grad are fused too; the
** chain gets one node (tfuse_grad.c: its backward composes the unfused ops'
** formulas, and the tiles also store, into buffers the node holds, the
** intermediates those formulas read: Record.save).  Inlining a lazy operand
** maps its inputs through its node (operand(), inlinable()); a lazy leaf that
** requires grad stays an input.  The backward formulas that the engine runs
** with grad mode off are not fused: with them fused, grad(sum(tanh(x * w + 1) * 3 - x / (|w|
** + 1))) on [1000, 1000] f32 took 25-27 ms against 13-15 ms unfused in three
** alternating runs (1 thread, loaded dev VM; later runs were too noisy to
** confirm), so nt_backward / nt_autograd_grad turn fusion off while they run
** until a quiet machine says otherwise.
**
** CUDA (issue 28): chains of CUDA tensors computing in f32/f64/f16/bf16, or
** in i32/i64/u8/bool with the ops that cannot fail (cuda_int_op), are
** recorded the same way (the output's device buffer allocated at once and
** hidden); forcing one generates its kernel (tfuse_codegen.c) and hands it
** to the module's "fused_chain" op (tfuse_rtc.h, cuda/fuse_rtc.cu), which
** compiles it at run time and launches it: one launch per chain.  No
** compiler there: op by op with the unfused kernels (eval_cuda_ops).
**
** When values are computed: the storage's hook (tensor.h) is set
** while it is lazy OR while a pending chain reads it; nt_base — the one way
** to the memory for kernels, item, printing, I/O, dist/ and lang/ — calls it
** first.  So any read of a lazy value computes it, and any access to a
** chain's input (a read, or a write: x += 1, index_put, copy_, fill_,
** optimizer steps, raw writes) computes the chains that read it BEFORE the
** address is handed out.  As a second line, each chain remembers its inputs'
** version counters and reports a write that reached an input without going
** through nt_base (a stale cached pointer) as an internal error instead of
** computing from the new values silently.
**
** Small ops (under FUSE_MIN_NUMEL) are recorded too when an operand is read
** by a pending chain (small_joins: else their read would compute that chain
** and cut it in two), and computed alone when a big chain takes them in.
**
** Which ops: + - * / // % maximum minimum, pow, the comparisons == != < <=
** > >= (computing in the promoted dtype, storing bools: a chain may end in a
** bool value, or convert one into a later op), the unary ops, and where
** (nt_fuse_where: three operands).  pow joins
** only where the unfused op would run its contiguous kernel (SLEEF there,
** libm on strided inputs: pow_operand_ok).
**
** Interrupts: nt_settle, the interpreter's end of a statement, computes with
** a look at the interrupt flag before every tile; a Ctrl-C stops the chain
** with the error "interrupted" and leaves it pending, its half-written buffer
** hidden (the storage shows no data until finish()), so nothing half done is
** ever visible: a later read computes the whole value.  Forcing from nt_base
** (a kernel's read) cannot fail, so it always runs to the end.
**
** Bounds: FUSE_MAXPENDING chains at most are pending (the oldest is computed
** beyond), so lazy values keep few inputs alive; nt_settle lets the
** interpreter compute a stored value at the end of its statement.  A lazy
** tensor freed before anyone read it is never computed.
**
** Threads: the registry is guarded by one recursive mutex, held while a
** chain is computed; the tile workers only see private tile headers (their
** storages have no hook), so they never re-enter it.  A kernel may call
** nt_base inside its own parallel loop: then the first thread computes the
** chain (serially: nested regions are off) while the others wait on the
** mutex; computing allocates nothing (the buffer came with the op), so no
** collector runs there.
*/
#include "tinternal.h"
#include "tfuse_grad.h"
#include "tfuse_codegen.h"
#include "tfuse_rtc.h"
#include "tprofile.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define FUSE_MIN_NUMEL 16384   /* smaller tensors run eagerly: they fit in cache anyway */
#define FUSE_MAXPENDING 32
#define TILE 1024              /* elements per tile: measured best on the dev VM (4 KiB f32: L1-resident scratch) */
#define TILE_SMALL 128         /* fallback tile on the stack when malloc fails */

static pthread_mutex_t mu;
static pthread_once_t mu_once = PTHREAD_ONCE_INIT;
static void mu_init(void) {
  pthread_mutexattr_t at;
  pthread_mutexattr_init(&at);
  pthread_mutexattr_settype(&at, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&mu, &at);
  pthread_mutexattr_destroy(&at);
}
static void lock(void) { pthread_once(&mu_once, mu_init); pthread_mutex_lock(&mu); }
static void unlock(void) { pthread_mutex_unlock(&mu); }

static nt_Fused *head, *tail;            /* pending chains, oldest first */
static int64_t npending, nforced, ndropped;
static int enabled = -1;                 /* -1: not read from NABLA_FUSE yet */

bool nt_fuse_enabled(void) {
  if (enabled < 0) {
    const char *e = getenv("NABLA_FUSE");
    enabled = !(e && e[0] == '0' && e[1] == 0);
  }
  return enabled;
}
bool nt_fuse_set_enabled(bool on) { bool prev = nt_fuse_enabled(); enabled = on; return prev; }

void nt_fuse_stats(int64_t *pending, int64_t *forced, int64_t *dropped) {
  lock();
  if (pending) *pending = npending;
  if (forced) *forced = nforced;
  if (dropped) *dropped = ndropped;
  unlock();
}

/* ---- the registry ----------------------------------------------------------- */
static void settle_hook(nt_Storage *s);
/* the hook of a storage that pending chains read (a lazy one points at its record) */
static const nt_LazyHook reader_hook = { settle_hook };
static nt_Fused *lazy_of(const nt_Storage *s) { return s->hook && s->hook != &reader_hook ? (nt_Fused *)s->hook : NULL; }
static void fix_reader_hook(nt_Storage *s) { if (!lazy_of(s)) s->hook = s->readers > 0 ? &reader_hook : NULL; }

bool nt_is_lazy(const nt_Tensor *t) { return lazy_of(t->storage) != NULL; }

static void unlink_rec(nt_Fused *r) {
  if (r->prev) r->prev->next = r->next; else head = r->next;
  if (r->next) r->next->prev = r->prev; else tail = r->prev;
  r->prev = r->next = NULL;
  npending--;
}

/* unlinks r, gives its storage its buffer (computed, or unwritten when dropped), releases its inputs */
static void finish(nt_Fused *r) {
  nt_Storage *s = r->out;
  s->data = r->data;
  s->hook = NULL;
  fix_reader_hook(s);
  unlink_rec(r);
  for (int i = 0; i < r->nin; i++) { nt_Storage *is = r->in[i]->storage; is->readers--; fix_reader_hook(is); }
  for (int i = 0; i < r->nin; i++) nt_release(r->in[i]);   /* the mutex is recursive: a release may re-enter */
  free(r);
}

static int eval(nt_Fused *r, bool stoppable);

/* computes r into its storage; the value is there even when -1 reports a
** version mismatch (an internal error: see the top comment).  stoppable: an
** interrupt may stop it between tiles -- then -1 with "interrupted", and r
** stays pending, its half-written buffer still hidden (the storage shows no
** data), so a later read computes the whole value. */
static int force(nt_Fused *r, bool stoppable) {
  int tok = nt_prof_on_ ? nt_prof_begin_fused_(r) : -1;   /* the profiler's event (tprofile.h) */
  int rc = eval(r, stoppable);
  if (tok >= 0) nt_prof_end_(tok);
  if (rc == -2) return -1;
  nforced++;
  finish(r);
  return rc;
}

static void report(const char *msg) { fprintf(stderr, "nabla: internal error: %s\n", msg); }

/* lock held: computes s if lazy and every pending chain that reads s */
static int settle_locked(nt_Storage *s) {
  int rc = 0;
  if (lazy_of(s) && force(lazy_of(s), false)) rc = -1;
  while (s->readers > 0) {
    nt_Fused *r = head;
    for (; r; r = r->next) {
      int i = 0;
      while (i < r->nin && r->in[i]->storage != s) i++;
      if (i < r->nin) break;
    }
    if (!r) { s->readers = 0; fix_reader_hook(s); report("lazy-evaluation reader count out of step"); break; }
    if (force(r, false)) rc = -1;
  }
  return rc;
}

static void settle_hook(nt_Storage *s) {
  lock();
  if (settle_locked(s)) report(nt_error_msg());
  unlock();
}

int nt_settle(nt_Tensor *t) {
  if (!t || !t->storage->hook || t->storage->readers) return 0;   /* a flag check for all but lazy values */
  lock();
  nt_Fused *r = lazy_of(t->storage);
  int rc = r ? force(r, true) : 0;   /* (the interpreter's statement end: Ctrl-C may stop it) */
  unlock();
  return rc;
}

/* tensor.c: the last reference to a lazy storage went away unread */
void nt_fuse_drop_(nt_Storage *s) {
  lock();
  nt_Fused *r = lazy_of(s);
  if (r) { ndropped++; finish(r); }
  unlock();
}

/* ---- recording ------------------------------------------------------------ */
static bool same_shape_as(const nt_Tensor *t, const int64_t *shape, int nd) {
  return t->ndim == nd && !memcmp(t->shape, shape, sizeof(int64_t) * (size_t)nd);
}

/* t is the whole value of a pending chain, laid out as the chain computes it
** -- in the chain's own shape: the record's inputs are broadcast to that
** shape, so a reshape of the value (same numel, another shape) is not
** (fusecheck: y.reshape([n]) + 1 read x's elements at the wrong places) */
static bool whole_lazy(const nt_Tensor *t, const int64_t *shape, int nd) {
  const nt_Fused *r = lazy_of(t->storage);
  return r && t->offset == 0 && (t->flags & NT_T_CONTIG) && t->numel == r->numel && same_shape_as(t, shape, nd) &&
         same_shape_as(t, r->shape, r->ndim) && t->dtype == (nt_DType)r->ops[r->nops - 1].dtype;
}

/* the same elements: a record's inputs are headers of its own (commit), so an
** input inlined from another chain is matched by what it views, not by address */
static bool same_view(const nt_Tensor *a, const nt_Tensor *b) {
  return a == b || (a->storage == b->storage && a->offset == b->offset && a->dtype == b->dtype && a->ndim == b->ndim &&
                    !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) &&
                    !memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim));
}

/* A chain being recorded: the record, and beside each input the tensor the
** op was given (with its autograd history: the node's input, tfuse_grad.c) */
typedef struct {
  nt_Fused f;
  nt_Tensor *orig[NT_FUSE_MAXIN];
} Rec;

static bool has_history(const nt_Tensor *t) { return t->requires_grad || t->grad_fn; }

/* Two views of the same elements are one input, unless autograd tells them
** apart (x and x.detach(): only x gets a gradient) */
static int add_input(Rec *rb, nt_Tensor *x, nt_Tensor *orig) {
  nt_Fused *b = &rb->f;
  for (int i = 0; i < b->nin; i++)
    if (same_view(b->in[i], x) && (rb->orig[i] == orig || (!has_history(rb->orig[i]) && !has_history(orig)))) return i;
  if (b->nin == NT_FUSE_MAXIN) return -1;
  b->in[b->nin] = x;
  rb->orig[b->nin] = orig;
  return b->nin++;
}

/* Operand x of a new op: 0 with *ref set, 1 when the chain would get too long
** (the op then runs eagerly).  A view of a lazy value is computed now. */
/* x's chain can be inlined: x carries no gradient history, or its history
** is the chain's own node (whose inputs, in order, are the chain's: the
** inlined ops then differentiate through to them).  A lazy leaf that
** requires grad stays an input of its own. */
static bool inlinable(const nt_Tensor *x) {
  /* (a node whose graph a backward pass freed has no inputs left to map:
  ** x then joins as an input, and the engine reports the freed graph) */
  return !has_history(x) || (nt_fuse_chain_node_(x->grad_fn) && !x->grad_fn->released);
}

static int operand(Rec *rb, nt_Tensor *x, const int64_t *shape, int nd, int *ref) {
  nt_Fused *b = &rb->f;
  if (whole_lazy(x, shape, nd) && inlinable(x)) {
    const nt_Fused *src = lazy_of(x->storage);
    int map[NT_FUSE_MAXIN], base = b->nops;
    if (b->nops + src->nops > NT_FUSE_MAXOPS) return 1;
    nt_Node *fn = nt_fuse_chain_node_(x->grad_fn) ? x->grad_fn : NULL;
    for (int i = 0; i < src->nin; i++)
      if ((map[i] = add_input(rb, src->in[i], fn ? fn->in[i] : src->in[i])) < 0) return 1;
    for (int k = 0; k < src->nops; k++) {
      nt_FuseOp o = src->ops[k];
      for (int j = 0; j < o.nsrc; j++) o.src[j] = (int8_t)(o.src[j] >= 0 ? map[o.src[j]] : -1 - (base + (-1 - o.src[j])));
      b->ops[b->nops++] = o;
    }
    *ref = -b->nops;   /* -1 - (index of its last op) */
    return 0;
  }
  if (lazy_of(x->storage) && nt_settle_storage_(x->storage)) return -1;
  /* memory wrapped from outside may change behind our back: read it now */
  if (x->storage->flags & NT_STORAGE_EXTERNAL) return 1;
  int i = add_input(rb, x, x);
  if (i < 0) return 1;
  *ref = i;
  return 0;
}

int nt_settle_storage_(nt_Storage *s) {
  if (!s->hook) return 0;
  lock();
  int rc = settle_locked(s);
  unlock();
  return rc;
}

static nt_DType ref_dtype(const nt_Fused *b, int ref) {
  return ref >= 0 ? b->in[ref]->dtype : (nt_DType)b->ops[-1 - ref].dtype;
}

static int add_op(nt_Fused *b, int op, nt_DType dt, int nsrc, const int *src, bool scalar, bool sfirst, double s0, double s1) {
  if (b->nops == NT_FUSE_MAXOPS) return 1;
  nt_FuseOp *o = &b->ops[b->nops++];
  memset(o, 0, sizeof *o);
  o->op = (int16_t)op; o->dtype = (int8_t)dt; o->nsrc = (int8_t)nsrc;
  for (int j = 0; j < nsrc; j++) o->src[j] = (int8_t)src[j];
  o->scalar = scalar; o->sfirst = sfirst; o->s[0] = s0; o->s[1] = s1;
  return 0;
}

/* operand ref converted to dt (a cast op, as nt_to_dtype would copy it) */
static int cast_to(nt_Fused *b, int *ref, nt_DType dt) {
  if (ref_dtype(b, *ref) == dt) return 0;
  if (add_op(b, NT_OP_COPY, dt, 1, ref, false, false, 0, 0)) return 1;
  *ref = -b->nops;
  return 0;
}

/* the recorded chain becomes a lazy tensor (or NULL + error) */
/* A pending record and where its tiles also store the intermediates the
** backward reads (tfuse_grad.c; NULL: scratch only).  Every record in the
** registry is one of these (commit makes them). */
typedef struct {
  nt_Fused f;   /* first: the registry's nt_Fused * is this */
  void *save[NT_FUSE_MAXOPS];
} Record;

static nt_Tensor *commit(const Rec *rb) {
  const nt_Fused *b = &rb->f;
  nt_DType dt = (nt_DType)b->ops[b->nops - 1].dtype;
  bool cuda = b->in[0]->device == NT_CUDA;
  /* (on CUDA the device buffer is allocated at once and hidden: data NULL until computed) */
  nt_Tensor *out = cuda ? nt_empty(b->shape, b->ndim, dt, NT_CUDA) : nt_empty_deferred_(b->shape, b->ndim, dt);
  if (!out) return NULL;
  nt_Storage *s = out->storage;
  Record *rx = calloc(1, sizeof *rx);
  if (!rx) { nt_release(out); nt_error_oom(sizeof *rx); return NULL; }
  nt_Fused *r = &rx->f;
  *r = *b;
  if (cuda) { r->data = s->data; s->data = NULL; }
  else
  /* The buffer is allocated here, by the statement that wrote the op: its
  ** out-of-memory error is a catchable TensorError at that line, as without
  ** fusion.  Computing later, nt_base could not report it (it aborted: the
  ** fuse review's 240 GB broadcast killed the session).  A large block is
  ** mmap'd, so a dropped intermediate's untouched pages cost no memory. */
  if (!(r->data = nt_storage_alloc_(s))) { free(r); nt_release(out); return NULL; }
  /* The record holds its inputs' MEMORY, through headers of its own without
  ** autograd state: retaining the input tensors themselves kept their .grad
  ** and their graphs (grad_fn and every activation it saved) alive while the
  ** value pended (fusecheck: no_grad { s = h * 2 } held h's whole graph). */
  for (int i = 0; i < r->nin; i++)
    if (!(r->in[i] = nt_view_of(b->in[i]))) {
      while (i-- > 0) nt_release(r->in[i]);
      s->data = r->data;   /* out's release frees it */
      free(r); nt_release(out);
      return NULL;
    }
  /* the chain's autograd node, when its inputs need one (tfuse_grad.c):
  ** recorded before the chain can be computed, as it says what to save */
  if (nt_fuse_record_grad_(out, r, rb->orig, rx->save)) {
    for (int i = 0; i < r->nin; i++) nt_release(r->in[i]);
    s->data = r->data;
    free(r); nt_release(out);
    return NULL;
  }
  lock();
  for (int i = 0; i < r->nin; i++) {
    nt_Storage *is = r->in[i]->storage;
    r->in_ver[i] = is->version;
    is->readers++;
    fix_reader_hook(is);   /* (inputs are never lazy: operand() computed them) */
  }
  r->out = s; r->hook.settle = settle_hook; s->hook = &r->hook;
  r->prev = tail; r->next = NULL;
  if (tail) tail->next = r; else head = r;
  tail = r;
  npending++;
  while (npending > FUSE_MAXPENDING && head != r) force(head, false);
  unlock();
  return out;
}

static bool is_cmp(int op) { return op >= NT_OP_EQ && op <= NT_OP_GE; }

/* ---- CUDA: one generated kernel per chain (tfuse_codegen.c, cuda/fuse_rtc.cu) --- */
static bool cuda_off;                 /* the module cannot compile chains here: they run unfused */
static int64_t ncuda_fused, ncuda_ops;   /* chains launched as one kernel; chains run op by op */
static int64_t ncuda_vec;                /* of those launched, on the vector path (tfuse_codegen.c) */
int64_t nt_fuse_cuda_vec_launches(void) {
  lock();
  int64_t v = ncuda_vec;
  unlock();
  return v;
}

/* CUDA chains: float or integer compute, the module able to compile */
static bool cuda_worth(nt_DType cd) {
  return !cuda_off && (cd == NT_F32 || cd == NT_F64 || cd == NT_F16 || cd == NT_BF16 || cd == NT_I32 || cd == NT_I64 ||
                       cd == NT_U8 || cd == NT_BOOL);
}
/* ops that join a CUDA chain computing in an integer dtype (or bool): the
** ones that cannot fail.  // and % by zero raise the unfused kernel's
** "division by zero", which a generated kernel has no way to report: they
** stay unfused there (tfuse_codegen.c decides per op and dtype) */
static bool cuda_int_op(int op) {
  return op == NT_OP_ADD || op == NT_OP_SUB || op == NT_OP_MUL || op == NT_OP_MAXIMUM || op == NT_OP_MINIMUM ||
         op == NT_OP_NEG || op == NT_OP_ABS || op == NT_OP_SIGN || op == NT_OP_RELU || op == NT_OP_SQUARE ||
         op == NT_OP_FLOOR || op == NT_OP_CEIL || op == NT_OP_ROUND || op == NT_OP_CLAMP || op == NT_OP_WHERE;
}
static bool cuda_rec_ok(const nt_Fused *b) {
  for (int k = 0; k < b->nops; k++)
    if (!nt_fuse_codegen_ok(b, &b->ops[k])) return false;
  return true;
}

/* the module's "fused_chain" op (tfuse_rtc.h) and its kernel, NULL before CUDA is loaded */
static int rtc_op(void) {
  static int id = -1;
  if (id < 0) id = nt_op_register("fused_chain");
  return id;
}
static nt_Kernel rtc_kernel(void) { return rtc_op() >= 0 ? nt_kernel_table[rtc_op()][NT_CUDA] : NULL; }
static int rtc_call(nt_FuseLaunch *fl) {
  nt_Kernel k = rtc_kernel();
  if (!k) { fl->cannot = 1; snprintf(fl->why, sizeof fl->why, "the CUDA module cannot compile fused chains (an older module)"); return 0; }
  nt_KernelArgs a;
  memset(&a, 0, sizeof a);
  a.op = rtc_op();
  a.extra = fl;
  return k(&a);
}

void nt_fuse_cuda_stats(int64_t *fused, int64_t *unfused, int64_t *compiles, int64_t *hits, double *seconds) {
  lock();
  *fused = ncuda_fused; *unfused = ncuda_ops;
  unlock();
  nt_FuseLaunch fl;
  memset(&fl, 0, sizeof fl);
  if (rtc_kernel() && rtc_call(&fl)) fl.compiles = fl.hits = 0;
  *compiles = fl.compiles; *hits = fl.hits; *seconds = fl.seconds;
}

static bool fusable_binary(int op) {
  return op == NT_OP_ADD || op == NT_OP_SUB || op == NT_OP_MUL || op == NT_OP_DIV || op == NT_OP_FLOORDIV ||
         op == NT_OP_MOD || op == NT_OP_MAXIMUM || op == NT_OP_MINIMUM || op == NT_OP_POW || is_cmp(op);
}
/* pow's contiguous f32/f64 kernel runs SLEEF, its strided one libm (and a
** one-element operand becomes a scalar exponent, where small integers take
** libm): a tile is always contiguous, so pow joins a chain only where the
** unfused op would be contiguous too -- each operand the chain's whole shape,
** and contiguous, lazy (computed contiguous) or converted (nt_to_dtype's
** copy is contiguous).  Comparisons have one path: always. */
static bool pow_operand_ok(const nt_Tensor *x, nt_DType cd, const int64_t *shape, int nd) {
  return same_shape_as(x, shape, nd) && x->numel > 1 &&
         ((x->flags & NT_T_CONTIG) || x->dtype != cd || whole_lazy(x, shape, nd));
}
/* unary ops whose contiguous kernel path differs from the strided one (SLEEF
** against libm): fused only on contiguous inputs, where unfused evaluation
** takes the same path */
static bool contig_only_unary(int op) {
  return op == NT_OP_EXP || op == NT_OP_LOG || op == NT_OP_LOG1P || op == NT_OP_EXPM1 || op == NT_OP_TANH ||
         op == NT_OP_ERF || op == NT_OP_SIN || op == NT_OP_COS || op == NT_OP_SIGMOID || op == NT_OP_SILU ||
         op == NT_OP_GELU || op == NT_OP_GELU_TANH;
}

/* A small op (under FUSE_MIN_NUMEL) is recorded too when an operand is read
** by a pending chain or is such a small lazy value itself (the hook says
** either): run eagerly, its kernel's read of the operand (nt_base) would
** compute the pending chain there, cutting it in two -- in
** `tanh(x * w + 1) * 3 - x / (abs(w) + 1)`, abs(w) computed `tanh(x * w + 1) * 3`
** alone.  Recorded, the small chain is computed by itself (from raw memory:
** the big chain stays pending) when the big one takes it as an operand, where
** it joins as a broadcast input.  CPU only (a CUDA chain is a compile). */
static bool small_joins(const nt_Tensor *t) { return t->device == NT_CPU && t->storage->hook != NULL; }

/* the size test first: small ops (the interpreter's scalars and tiny
** tensors) leave after one compare */
static bool worth(int64_t numel, nt_DType cd, nt_Device dev, int op, bool small_ok) {
  return (numel >= FUSE_MIN_NUMEL || small_ok) && (dev == NT_CPU || (dev == NT_CUDA && cuda_worth(cd))) &&
         (nt_dtype_is_float(cd) || is_cmp(op) || (dev == NT_CUDA && cuda_int_op(op))) && nt_fuse_enabled() &&
         !nt_fuse_backward_depth_;
}
_Thread_local int nt_fuse_backward_depth_;

static void init_rec(Rec *rb, const int64_t *shape, int nd) {
  nt_Fused *b = &rb->f;
  b->nops = b->nin = 0;
  b->ndim = nd;
  if (nd) memcpy(b->shape, shape, sizeof(int64_t) * (size_t)nd);
  b->numel = nt_shape_numel(shape, nd);
  b->out = NULL; b->data = NULL; b->prev = b->next = NULL;
}

int nt_fuse_binary(int op, nt_Tensor *a, nt_Tensor *b, nt_DType cd, nt_Tensor **out) {
  /* (an outer product of two small operands stays eager: no shapes computed for small ops) */
  bool small_ok = small_joins(a) || small_joins(b);
  if ((a->numel < FUSE_MIN_NUMEL && b->numel < FUSE_MIN_NUMEL && !small_ok) || !fusable_binary(op) || a->device != b->device ||
      (a->device != NT_CPU && a->device != NT_CUDA) || !nt_fuse_enabled())
    return 0;
  int64_t shape[NT_MAXDIM];
  int nd;
  if (nt_broadcast_shapes(nt_op_name(op), a->shape, a->ndim, b->shape, b->ndim, shape, &nd)) return -1;
  if (!worth(nt_shape_numel(shape, nd), cd, a->device, op, small_ok)) return 0;
  if (op == NT_OP_POW && !(pow_operand_ok(a, cd, shape, nd) && pow_operand_ok(b, cd, shape, nd))) return 0;
  /* Two settled CUDA operands of different dtypes (f32 + bf16): the eager
  ** mixed-dtype kernel reads both as they are in one launch, and its autograd
  ** node hands the 16-bit gradient over without a cast; a chain would be a
  ** cast plus the op, and its backward a cast kernel. */
  if (a->device == NT_CUDA && a->dtype != b->dtype && !lazy_of(a->storage) && !lazy_of(b->storage)) return 0;
  /* A view of a lazy value (y.T, y[0]) is computed BEFORE any operand is
  ** recorded: operand() copies a whole lazy value's inputs into rec without
  ** a reference (commit takes them), so computing y between the two operands
  ** (y + y.T) would release inputs rec already points to -- a use after free
  ** when y's chain held the last reference (fusecheck). */
  for (int j = 0; j < 2; j++) {
    nt_Tensor *x = j ? b : a;
    if (lazy_of(x->storage) && !(whole_lazy(x, shape, nd) && inlinable(x)) && nt_settle_storage_(x->storage)) return -1;
  }
  Rec rec;
  init_rec(&rec, shape, nd);
  int ra, rb, k;
  if ((k = operand(&rec, a, shape, nd, &ra))) return k < 0 ? -1 : 0;
  if (b == a) rb = ra;   /* x * x: one operand, its chain once */
  else if ((k = operand(&rec, b, shape, nd, &rb))) return k < 0 ? -1 : 0;
  /* (a comparison computes in cd and stores bools, as the kernel does) */
  nt_DType od = is_cmp(op) ? NT_BOOL : cd;
  if (cast_to(&rec.f, &ra, cd) || cast_to(&rec.f, &rb, cd) || add_op(&rec.f, op, od, 2, (int[]){ ra, rb }, false, false, 0, 0))
    return 0;
  if (a->device == NT_CUDA && !cuda_rec_ok(&rec.f)) return 0;
  return (*out = commit(&rec)) ? 1 : -1;
}

int nt_fuse_scalar(int op, nt_Tensor *t, double s, bool first, nt_DType cd, nt_Tensor **out) {
  if (!worth(t->numel, cd, t->device, op, small_joins(t)) || !fusable_binary(op)) return 0;
  if (op == NT_OP_POW && !pow_operand_ok(t, cd, t->shape, t->ndim)) return 0;
  Rec rec;
  init_rec(&rec, t->shape, t->ndim);
  int r, k;
  if ((k = operand(&rec, t, t->shape, t->ndim, &r))) return k < 0 ? -1 : 0;
  if (cast_to(&rec.f, &r, cd) || add_op(&rec.f, op, is_cmp(op) ? NT_BOOL : cd, 1, &r, true, first, s, 0)) return 0;
  if (t->device == NT_CUDA && !cuda_rec_ok(&rec.f)) return 0;
  return (*out = commit(&rec)) ? 1 : -1;
}

/* where(c, a, b) computing in od (the front end's promotion; c converted to
** bool, a and b to od, as nt_where converts them).  Its backward in the
** chain's node is where_backward's formula (tfuse_grad.c), reading c. */
int nt_fuse_where(nt_Tensor *c, nt_Tensor *a, nt_Tensor *b, nt_DType od, nt_Tensor **out) {
  nt_Tensor *ts[3] = { c, a, b };
  bool small_ok = small_joins(c) || small_joins(a) || small_joins(b);
  if ((c->numel < FUSE_MIN_NUMEL && a->numel < FUSE_MIN_NUMEL && b->numel < FUSE_MIN_NUMEL && !small_ok) || !nt_fuse_enabled() ||
      (a->device != NT_CPU && a->device != NT_CUDA))
    return 0;
  int64_t s1[NT_MAXDIM], shape[NT_MAXDIM];
  int n1, nd;
  if (nt_broadcast_shapes("where", a->shape, a->ndim, b->shape, b->ndim, s1, &n1) ||
      nt_broadcast_shapes("where", c->shape, c->ndim, s1, n1, shape, &nd)) return -1;
  if (!worth(nt_shape_numel(shape, nd), od, a->device, NT_OP_WHERE, small_ok)) return 0;
  /* (views of lazy values computed first: nt_fuse_binary says why) */
  for (int j = 0; j < 3; j++)
    if (lazy_of(ts[j]->storage) && !(whole_lazy(ts[j], shape, nd) && inlinable(ts[j])) && nt_settle_storage_(ts[j]->storage))
      return -1;
  Rec rec;
  init_rec(&rec, shape, nd);
  int ref[3], k;
  for (int j = 0; j < 3; j++) {
    int same = j == 2 && b == a ? 1 : j >= 1 && ts[j] == c ? 0 : -1;   /* one operand twice: its chain once */
    if (same >= 0) { ref[j] = ref[same]; continue; }
    if ((k = operand(&rec, ts[j], shape, nd, &ref[j]))) return k < 0 ? -1 : 0;
  }
  if (cast_to(&rec.f, &ref[0], NT_BOOL) || cast_to(&rec.f, &ref[1], od) || cast_to(&rec.f, &ref[2], od) ||
      add_op(&rec.f, NT_OP_WHERE, od, 3, ref, false, false, 0, 0))
    return 0;
  if (a->device == NT_CUDA && !cuda_rec_ok(&rec.f)) return 0;
  return (*out = commit(&rec)) ? 1 : -1;
}

int nt_fuse_unary(int op, nt_Tensor *t, double s0, double s1, nt_DType cd, nt_Tensor **out) {
  if (!worth(t->numel, cd, t->device, op, small_joins(t)) || op == NT_OP_LOGICAL_NOT) return 0;
  if (contig_only_unary(op) && t->dtype == cd && !(t->flags & NT_T_CONTIG)) return 0;
  Rec rec;
  init_rec(&rec, t->shape, t->ndim);
  int r, k;
  if ((k = operand(&rec, t, t->shape, t->ndim, &r))) return k < 0 ? -1 : 0;
  if (cast_to(&rec.f, &r, cd) || add_op(&rec.f, op, cd, 1, &r, false, false, s0, s1)) return 0;
  if (t->device == NT_CUDA && !cuda_rec_ok(&rec.f)) return 0;
  return (*out = commit(&rec)) ? 1 : -1;
}

/* ---- evaluation ------------------------------------------------------------- */
typedef struct {
  const nt_Fused *r;
  nt_Tensor view[NT_FUSE_MAXIN];      /* inputs broadcast to the chain's shape */
  const char *base[NT_FUSE_MAXIN];    /* their first elements (raw: never nt_base here) */
  int kind[NT_FUSE_MAXIN];            /* how tiles read them (nt_fuse_in_kind_) */
  nt_FuseTiles tl;                    /* the chain's tiles (nt_fuse_tiles_) */
  size_t off_in[NT_FUSE_MAXIN], off_op[NT_FUSE_MAXOPS], per;   /* scratch layout for one tile size */
  int failed;
} Ctx;

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static void layout(Ctx *c, int64_t tile) {
  size_t o = 0;
  for (int i = 0; i < c->r->nin; i++) {
    c->off_in[i] = o;
    if (nt_fuse_in_scratch_(c->kind[i])) o += round64((size_t)tile * nt_dtype_size(c->view[i].dtype));
  }
  for (int k = 0; k + 1 < c->r->nops; k++) {
    c->off_op[k] = o;
    o += round64((size_t)tile * nt_dtype_size((nt_DType)c->r->ops[k].dtype));
  }
  c->per = o ? o : 64;
}

/* elements [t0, t0+len) (row-major over the chain's shape) of a strided view */
static void gather(const nt_Tensor *v, const char *base, int64_t t0, int64_t len, char *dst) {
  int nd = v->ndim;
  size_t es = nt_dtype_size(v->dtype);
  if (nd == 0) { for (int64_t i = 0; i < len; i++) memcpy(dst + (size_t)i * es, base, es); return; }
  /* (nt_bcast_view gives every axis of the chain's shape; gather's runs are
  ** the innermost axis: memcpy for stride 1, a fill for stride 0) */
  int64_t idx[NT_MAXDIM], rem = t0, off = 0;
  for (int d = nd - 1; d >= 0; d--) { idx[d] = rem % v->shape[d]; rem /= v->shape[d]; off += idx[d] * v->strides[d]; }
  int64_t inner = v->shape[nd - 1], st = v->strides[nd - 1];
  while (len > 0) {
    int64_t run = inner - idx[nd - 1];
    if (run > len) run = len;
    const char *p = base + off * (int64_t)es;
    if (st == 1) memcpy(dst, p, (size_t)run * es);   /* a row broadcast down the columns */
    else if (st == 0 && es == 4) { uint32_t v; memcpy(&v, p, 4); for (int64_t i = 0; i < run; i++) ((uint32_t *)dst)[i] = v; }
    else if (st == 0 && es == 8) { uint64_t v; memcpy(&v, p, 8); for (int64_t i = 0; i < run; i++) ((uint64_t *)dst)[i] = v; }
    else switch (es) {
      case 1: for (int64_t i = 0; i < run; i++) dst[i] = p[i * st]; break;
      case 2: for (int64_t i = 0; i < run; i++) ((uint16_t *)dst)[i] = *(const uint16_t *)(p + i * st * 2); break;
      case 4: for (int64_t i = 0; i < run; i++) ((uint32_t *)dst)[i] = *(const uint32_t *)(p + i * st * 4); break;
      default: for (int64_t i = 0; i < run; i++) ((uint64_t *)dst)[i] = *(const uint64_t *)(p + i * st * 8); break;
    }
    dst += (size_t)run * es; len -= run;
    off += run * st; idx[nd - 1] += run;
    for (int d = nd - 1; d > 0 && idx[d] == v->shape[d]; d--) {   /* carry */
      off -= idx[d] * v->strides[d]; idx[d] = 0;
      idx[d - 1]++; off += v->strides[d - 1];
    }
  }
}

/* a private contiguous 1-D header over p: its storage has no hook */
static void tile_hdr(nt_Tensor *t, nt_Storage *s, void *p, nt_DType dt, int64_t len) {
  memset(s, 0, sizeof *s);
  s->data = p; s->nbytes = (size_t)len * nt_dtype_size(dt); s->device = NT_CPU; s->refcount = 1;
  s->flags = NT_STORAGE_EXTERNAL;
  memset(t, 0, sizeof *t);
  t->refcount = 1; t->dtype = dt; t->device = NT_CPU; t->ndim = 1; t->shape[0] = len; t->strides[0] = 1;
  t->numel = len; t->flags = NT_T_CONTIG; t->storage = s;
}
static void tile_set(nt_Tensor *t, void *p, int64_t len) {
  t->storage->data = p; t->storage->nbytes = (size_t)len * nt_dtype_size(t->dtype);
  t->shape[0] = len; t->numel = len;
}

/* ---- tiles aligned to rows ---------------------------------------------------
** An operand broadcast down the leading axes (a bias row [D] in an [N, D]
** chain) was gathered element by element into every tile, which made the
** chain slower than unfused (bench/results/2026-11-30-fuserow.md).  Tiles now
** follow the rows where they can: rows of D >= tile elements are cut into
** equal chunks, so a tile lies in one row and such an operand is a
** contiguous slice of its row (pointed into, no copy); shorter rows go whole,
** k of them per tile, so every tile starts a row and the operand's tile is
** the same in each (gathered once per worker).
** Bits: every tile but the last is a multiple of FUSE_ALIGN elements and
** starts at one, as the eager kernels' blocks do (ARITH_BLOCK, tcpu_elem.c):
** the compiled loops run their remainder code (which may take a commutative
** op's NaN operands the other way round) at the same elements fused and
** unfused.  Rows that cannot be tiled so (D >= tile not a multiple of it;
** FUSE_ALIGN rows longer than 2 tiles) keep the flat tiles of TILE. */
#define FUSE_ALIGN 16   /* elements: the widest vector loop's step (AVX-512, f32) */
static int64_t gcd64(int64_t a, int64_t b) { while (b) { int64_t t = a % b; a = b; b = t; } return a; }
void nt_fuse_tiles_(nt_FuseTiles *t, const int64_t *shape, int nd, int64_t n, int64_t tile) {
  t->n = n;
  t->D = nd ? shape[nd - 1] : 1;
  t->per_row = 0; t->rows = false; t->chunk = tile;
  if (t->D <= 0 || n <= 0) { t->D = 1; t->ntiles = 0; return; }
  int64_t D = t->D, m = FUSE_ALIGN / gcd64(D, FUSE_ALIGN);   /* whole rows per tile: a multiple of m */
  if (D >= tile && D % FUSE_ALIGN == 0) {
    int64_t per = (D + tile - 1) / tile, c = (D + per - 1) / per;
    t->chunk = (c + FUSE_ALIGN - 1) / FUSE_ALIGN * FUSE_ALIGN;   /* <= tile: tile is a multiple of it */
    t->per_row = (D + t->chunk - 1) / t->chunk;                   /* (the last chunk of a row is not empty) */
    t->ntiles = n / D * t->per_row;
    t->rows = true;
    return;
  }
  if (D < tile && D * m <= 2 * tile) {
    int64_t k = tile / D / m * m;
    t->chunk = (k ? k : m) * D;
    t->rows = true;
  }
  if (t->chunk > n) t->chunk = n;
  t->ntiles = (n + t->chunk - 1) / t->chunk;
}

void nt_fuse_tile_at_(const nt_FuseTiles *t, int64_t j, int64_t *t0, int64_t *len) {
  if (t->per_row) {
    int64_t row = j / t->per_row, c = (j % t->per_row) * t->chunk;
    *t0 = row * t->D + c;
    *len = t->D - c < t->chunk ? t->D - c : t->chunk;
  } else {
    *t0 = j * t->chunk;
    *len = t->n - *t0 < t->chunk ? t->n - *t0 : t->chunk;
  }
}

int64_t nt_fuse_view_off_(const nt_Tensor *v, int64_t t0) {
  int64_t off = 0;
  for (int d = v->ndim - 1; d >= 0; d--) { off += t0 % v->shape[d] * v->strides[d]; t0 /= v->shape[d]; }
  return off;
}

int nt_fuse_in_kind_(const nt_FuseTiles *t, const nt_Tensor *v) {
  if (v->flags & NT_T_CONTIG) return NT_FUSE_DIRECT;
  int nd = v->ndim;
  if (nd == 0 || !t->rows) return NT_FUSE_GATHER;
  /* each tile in one row: D >= tile, or whole-row tiles of one row each */
  bool in_row = t->per_row || t->chunk == t->D;
  if (in_row && (v->strides[nd - 1] == 1 || v->shape[nd - 1] == 1)) return NT_FUSE_ROW;
  if (!t->per_row) {
    bool flat = true;   /* the same values down every leading axis */
    for (int d = 0; d + 1 < nd; d++) flat &= v->strides[d] == 0 || v->shape[d] == 1;
    if (flat) return NT_FUSE_ONCE;
  }
  return NT_FUSE_GATHER;
}

char *nt_fuse_in_tile_(int kind, const nt_Tensor *v, const char *base, int64_t t0, int64_t len, char *scratch) {
  int64_t es = (int64_t)nt_dtype_size(v->dtype);
  switch (kind) {
    case NT_FUSE_DIRECT: return (char *)base + t0 * es;
    case NT_FUSE_ROW: return (char *)base + nt_fuse_view_off_(v, t0) * es;
    case NT_FUSE_ONCE: return scratch;   /* (gathered when the worker started) */
    default: gather(v, base, t0, len, scratch); return scratch;
  }
}

/* (tfuse_bwd.c's tiles use the same three) */
void nt_fuse_gather_(const nt_Tensor *v, const char *base, int64_t t0, int64_t len, char *dst) { gather(v, base, t0, len, dst); }
void nt_fuse_tile_hdr_(nt_Tensor *t, nt_Storage *s, void *p, nt_DType dt, int64_t len) { tile_hdr(t, s, p, dt, len); }
void nt_fuse_tile_set_(nt_Tensor *t, void *p, int64_t len) { tile_set(t, p, len); }

static bool fast_op(const nt_FuseOp *o) {
  return (o->op == NT_OP_ADD || o->op == NT_OP_SUB || o->op == NT_OP_MUL || o->op == NT_OP_DIV) &&
         (o->dtype == NT_F32 || o->dtype == NT_F64);
}

/* one worker's tile headers and kernel arguments, built once per chain */
typedef struct {
  nt_Tensor th[NT_FUSE_MAXIN + NT_FUSE_MAXOPS];
  nt_Storage sh[NT_FUSE_MAXIN + NT_FUSE_MAXOPS];
  nt_KernelArgs ka[NT_FUSE_MAXOPS];
} Tiles;

static void tiles_init(const Ctx *c, Tiles *w) {
  const nt_Fused *r = c->r;
  for (int i = 0; i < r->nin; i++) tile_hdr(&w->th[i], &w->sh[i], NULL, c->view[i].dtype, 0);
  for (int k = 0; k < r->nops; k++) {
    const nt_FuseOp *o = &r->ops[k];
    nt_Tensor *ot = &w->th[NT_FUSE_MAXIN + k];
    tile_hdr(ot, &w->sh[NT_FUSE_MAXIN + k], NULL, (nt_DType)o->dtype, 0);
    /* the nt_KernelArgs the unfused front end passes (telem.c) */
    nt_KernelArgs *a = &w->ka[k];
    memset(a, 0, sizeof *a);
    a->op = o->op; a->out = ot; a->nin = o->nsrc;
    for (int j = 0; j < o->nsrc; j++) a->in[j] = o->src[j] >= 0 ? &w->th[o->src[j]] : &w->th[NT_FUSE_MAXIN + (-1 - o->src[j])];
    a->s[0] = o->s[0]; a->s[1] = o->s[1];
    if (o->scalar) { a->iarg[0] = o->sfirst; a->niarg = 1; }
  }
}

static void run_tile(Ctx *c, Tiles *w, char *scratch, int64_t t0, int64_t len) {
  const nt_Fused *r = c->r;
  for (int i = 0; i < r->nin; i++)
    tile_set(&w->th[i], nt_fuse_in_tile_(c->kind[i], &c->view[i], c->base[i], t0, len, scratch + c->off_in[i]), len);
  for (int k = 0; k < r->nops; k++) {
    const nt_FuseOp *o = &r->ops[k];
    void *save = ((const Record *)r)->save[k];   /* (a value the backward reads: stored whole) */
    char *p = k + 1 == r->nops ? (char *)r->data + (size_t)t0 * nt_dtype_size((nt_DType)o->dtype)
            : save ? (char *)save + (size_t)t0 * nt_dtype_size((nt_DType)o->dtype) : scratch + c->off_op[k];
    nt_KernelArgs *a = &w->ka[k];
    tile_set(a->out, p, len);
    if (fast_op(o)) {
      const void *x = nt_base(a->in[0]), *y = o->nsrc == 2 ? nt_base(a->in[1]) : NULL;
      if (o->dtype == NT_F32) nt_arith_f32(o->op, x, y, o->s[0], o->sfirst, (float *)p, len);
      else nt_arith_f64(o->op, x, y, o->s[0], o->sfirst, (double *)p, len);
      continue;
    }
    nt_Kernel kf = nt_kernel_table[o->op][NT_CPU];
    if (!kf || kf(a)) c->failed = 1;
  }
}

/* 0, -1 (a version mismatch: computed anyway), -2 (stoppable and interrupted: not all computed) */
static int eval_cuda(nt_Fused *r);
static int eval(nt_Fused *r, bool stoppable) {
  if (r->out->device == NT_CUDA) return eval_cuda(r);
  Ctx c;
  memset(&c, 0, sizeof c);
  c.r = r;
  int rc = 0;
  for (int i = 0; i < r->nin; i++) {
    nt_Tensor *in = r->in[i];
    if (in->storage->version != r->in_ver[i] && !rc) {
      nt_error_set("a tensor was written in place while a lazy value computed from it was pending, without going "
                   "through nt_base (a cached data pointer?): the lazy value may be wrong (NABLA_FUSE=0 avoids it)");
      rc = -1;
    }
    nt_bcast_view(&c.view[i], in, r->shape, r->ndim);
    c.base[i] = (const char *)in->storage->data + in->offset * (int64_t)nt_dtype_size(in->dtype);
  }
  int64_t n = r->numel;
  nt_fuse_tiles_(&c.tl, r->shape, r->ndim, n, TILE);
  int64_t ntiles = c.tl.ntiles;
  for (int i = 0; i < r->nin; i++) c.kind[i] = nt_fuse_in_kind_(&c.tl, &c.view[i]);
  bool par = n > NT_OMP_THRESHOLD;
  Ctx small = c;   /* (its sub-tiles start anywhere in a row: what is not pointed into is gathered) */
  for (int i = 0; i < r->nin; i++) if (small.kind[i] == NT_FUSE_ONCE) small.kind[i] = NT_FUSE_GATHER;
  layout(&c, c.tl.chunk);
  layout(&small, TILE_SMALL);
  int failed = 0, stop = 0;
  _Pragma("omp parallel if (par) reduction(|: failed)")
  {
    Ctx mine = c;
    Tiles w;
    tiles_init(&c, &w);
    char *sc = aligned_alloc(64, mine.per);
    for (int i = 0; sc && i < r->nin; i++)   /* the operands every tile reads the same, once */
      if (mine.kind[i] == NT_FUSE_ONCE) gather(&mine.view[i], mine.base[i], 0, mine.tl.chunk, sc + mine.off_in[i]);
    _Pragma("omp for schedule(static)")
    for (int64_t j = 0; j < ntiles; j++) {
      /* Ctrl-C: a flag load per tile (1024 elements of a whole chain) */
      if (__atomic_load_n(&stop, __ATOMIC_RELAXED)) continue;
      if (stoppable && NT_INTERRUPTED()) { __atomic_store_n(&stop, 1, __ATOMIC_RELAXED); continue; }
      int64_t t0, len;
      nt_fuse_tile_at_(&mine.tl, j, &t0, &len);
      if (sc) run_tile(&mine, &w, sc, t0, len);
      else {   /* no memory for the scratch: small tiles on the stack */
        Ctx sm = small;
        _Alignas(64) char buf[(NT_FUSE_MAXIN + NT_FUSE_MAXOPS) * TILE_SMALL * 8];
        for (int64_t u = t0; u < t0 + len; u += TILE_SMALL)
          run_tile(&sm, &w, buf, u, t0 + len - u < TILE_SMALL ? t0 + len - u : TILE_SMALL);
        mine.failed |= sm.failed;
      }
    }
    free(sc);
    failed |= mine.failed;
  }
  (void)par;
  if (stop) { nt_error_set("interrupted"); return -2; }
  if (failed && !rc) { nt_error_set("internal: a fused kernel failed"); rc = -1; }
  return rc;
}

/* ---- evaluation on CUDA ------------------------------------------------------------ */
/* A private header over a device buffer: its storage has no hook (as tile_hdr) */
static void dev_hdr(nt_Tensor *t, nt_Storage *s, const nt_Tensor *view, void *data) {
  *t = *view;
  memset(s, 0, sizeof *s);
  s->data = data; s->device = NT_CUDA; s->refcount = 1; s->flags = NT_STORAGE_EXTERNAL;
  s->nbytes = view->storage ? view->storage->nbytes : 0;
  t->storage = s; t->refcount = 1; t->grad = NULL; t->grad_fn = NULL; t->requires_grad = false;
}

/* The chain op by op with the unfused CUDA kernels (the module cannot compile
** it): intermediates in device temporaries.  0, or -1 + error. */
static int eval_cuda_ops(nt_Fused *r, const nt_Tensor *views) {
  nt_Tensor in[NT_FUSE_MAXIN], val[NT_FUSE_MAXOPS];
  nt_Storage ins[NT_FUSE_MAXIN], vals[NT_FUSE_MAXOPS];
  nt_Tensor *tmp[NT_FUSE_MAXOPS] = { 0 };
  int rc = 0;
  for (int i = 0; i < r->nin; i++) dev_hdr(&in[i], &ins[i], &views[i], r->in[i]->storage->data);
  for (int k = 0; k < r->nops && !rc; k++) {
    const nt_FuseOp *o = &r->ops[k];
    void *p;
    void *sv = ((const Record *)r)->save[k];
    if (k + 1 == r->nops) p = r->data;
    else if (sv) p = sv;   /* (a value the backward reads: computed into its buffer) */
    else {
      if (!(tmp[k] = nt_empty(r->shape, r->ndim, (nt_DType)o->dtype, NT_CUDA))) { rc = -1; break; }
      p = tmp[k]->storage->data;
    }
    nt_Tensor shape_of;
    memset(&shape_of, 0, sizeof shape_of);
    shape_of.dtype = (nt_DType)o->dtype; shape_of.device = NT_CUDA; shape_of.ndim = r->ndim; shape_of.numel = r->numel;
    memcpy(shape_of.shape, r->shape, sizeof r->shape);
    nt_contig_strides(r->shape, r->ndim, shape_of.strides);
    shape_of.flags = NT_T_CONTIG;
    dev_hdr(&val[k], &vals[k], &shape_of, p);
    vals[k].nbytes = (size_t)r->numel * nt_dtype_size((nt_DType)o->dtype);
    nt_KernelArgs a;
    memset(&a, 0, sizeof a);
    a.op = o->op; a.out = &val[k]; a.nin = o->nsrc;
    for (int j = 0; j < o->nsrc; j++) a.in[j] = o->src[j] >= 0 ? &in[o->src[j]] : &val[-1 - o->src[j]];
    a.s[0] = o->s[0]; a.s[1] = o->s[1];
    if (o->scalar) { a.iarg[0] = o->sfirst; a.niarg = 1; }
    nt_Kernel kf = nt_kernel_table[o->op][NT_CUDA];
    if (!kf) { nt_error_set("internal: no CUDA kernel for %s in a fused chain", nt_op_name(o->op)); rc = -1; }
    else if (kf(&a)) rc = -1;
  }
  for (int k = 0; k < r->nops; k++) nt_release(tmp[k]);
  return rc;
}

/* NABLA_FUSE_DUMP=dir: each generated source once, as dir/fused_<hash>.cu */
static void dump(const char *src, uint64_t key) {
  const char *dir = getenv("NABLA_FUSE_DUMP");
  if (!dir || !*dir) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/fused_%016llx.cu", dir, (unsigned long long)key);
  struct stat st;
  if (!stat(path, &st)) return;
  FILE *f = fopen(path, "w");
  if (!f) { fprintf(stderr, "nabla: NABLA_FUSE_DUMP: cannot write %s\n", path); return; }
  fputs(src, f);
  fclose(f);
}

/* one generated source (a chain's, or FusedBackward's) through the module's
** compile cache, written to NABLA_FUSE_DUMP first: rtc_call's result, with
** fl->cannot and fl->why when it could not compile */
static int rtc_launch(const char *src, int64_t n, const void *args, size_t nbytes, nt_FuseLaunch *fl) {
  uint64_t key = nt_fuse_hash(src);
  dump(src, key);
  memset(fl, 0, sizeof *fl);
  fl->src = src; fl->key = key; fl->n = n; fl->args = args; fl->nbytes = nbytes;
  return rtc_call(fl);
}

/* 0, or -1 + error (a version mismatch: computed anyway, as eval) */
static int eval_cuda(nt_Fused *r) {
  nt_Tensor views[NT_FUSE_MAXIN];
  int rc = 0;
  for (int i = 0; i < r->nin; i++) {
    if (r->in[i]->storage->version != r->in_ver[i] && !rc) {
      nt_error_set("a tensor was written in place while a lazy value computed from it was pending, without going "
                   "through nt_base (a cached data pointer?): the lazy value may be wrong (NABLA_FUSE=0 avoids it)");
      rc = -1;
    }
    nt_bcast_view(&views[i], r->in[i], r->shape, r->ndim);
  }
  /* one op: its own kernel is the same one launch, with nothing to compile */
  if (r->nops == 1) return eval_cuda_ops(r, views) ? -1 : rc;
  nt_FuseArgs args;
  void *const *save = ((const Record *)r)->save;
  char *src = nt_fuse_codegen(r, views, save, &args);
  if (!src) return -1;
  args.out = r->data;
  for (int k = 0; k < r->nops; k++) args.save[k] = save[k];
  for (int i = 0; i < r->nin; i++)
    args.in[i] = (const char *)r->in[i]->storage->data + r->in[i]->offset * (int64_t)nt_dtype_size(r->in[i]->dtype);
  nt_fuse_codegen_align(r, &args);
  nt_FuseLaunch fl;
  int lr = rtc_launch(src, r->numel, &args, sizeof args, &fl);
  free(src);
  if (!lr && fl.cannot) {
    /* no compiler: said once, later CUDA chains are not recorded (cuda_worth);
    ** a source that failed (a generator bug): said once, this chain op by op */
    static bool failed_said;
    if (fl.cannot == 1 && !cuda_off) fprintf(stderr, "nabla: note: elementwise chains on CUDA run unfused: %s\n", fl.why);
    if (fl.cannot == 2 && !failed_said)
      fprintf(stderr, "nabla: note: a fused CUDA chain failed to compile and runs op by op: %s\n", fl.why);
    if (fl.cannot == 1) cuda_off = true;
    else failed_said = true;
    lr = eval_cuda_ops(r, views);
    if (!lr) ncuda_ops++;
  } else if (!lr) { ncuda_fused++; ncuda_vec += args.vec != 0; }
  return lr ? -1 : rc;
}

/* FusedBackward's one generated kernel (tfuse_bwd.c), through the same
** compile cache and NABLA_FUSE_DUMP as the chains */
int nt_fuse_rtc_launch_(const char *src, int64_t n, const void *args, size_t nbytes, int *cannot) {
  nt_FuseLaunch fl;
  int lr = rtc_launch(src, n, args, nbytes, &fl);
  *cannot = lr ? 0 : fl.cannot;
  static bool said;
  if (!lr && fl.cannot && !said) {
    said = true;
    fprintf(stderr, "nabla: note: a fused chain's backward runs op by op: %s\n", fl.why);
  }
  return lr ? -1 : 0;
}
