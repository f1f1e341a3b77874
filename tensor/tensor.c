/*
** tensor.c — storage, tensor headers, reference counting and views.
**
** Memory layout of a fresh tensor (nt_empty): ONE malloc block
**     [nt_Tensor][nt_Storage][pad to 64][data if <= NT_INLINE_BYTES]
** Larger data is a separate 64-byte aligned allocation from the device
** allocator.  The block belongs to the storage: when the tensor header dies
** while views still use the storage, the header's bytes simply stay until the
** storage goes (a few hundred bytes, in exchange for one malloc per op).
** Views get their own header malloc (NT_T_VIEWHDR).  Blocks with inline data
** are recycled through per-size free lists (the small-block cache below), so
** a small op's output usually costs no malloc at all.
*/
#include "tinternal.h"
#include "tdevice.h"
#include "tcpualloc.h"
#include <stdlib.h>
#include <stdio.h>
#include <stdatomic.h>

/* ---- CPU allocator ------------------------------------------------------- */
/* nt_cpu_alloc / nt_cpu_free: tcpualloc.c (glibc's tuning for medium buffers,
** the cache of 2 MiB-aligned huge-page blocks for big ones). */
static int cpu_memcpy(void *dst, nt_Device dd, const void *src, nt_Device sd, size_t n) {
  if (dd != NT_CPU || sd != NT_CPU) NT_FAIL("cpu allocator cannot copy to/from %s", nt_device_name(dd != NT_CPU ? dd : sd));
  memcpy(dst, src, n);
  return 0;
}
static nt_Allocator allocators[NT_NDEVICES] = { { nt_cpu_alloc, nt_cpu_free, cpu_memcpy } };
static bool have_alloc[NT_NDEVICES] = { true, false };

void nt_register_allocator(nt_Device dev, const nt_Allocator *a) {
  if ((unsigned)dev >= NT_NDEVICES) return;
  allocators[dev] = *a;
  have_alloc[dev] = true;
}
const nt_Allocator *nt_allocator(nt_Device dev) {
  if (dev == NT_CUDA && !have_alloc[dev]) nt_device_load(dev);   /* tdevice.c: dlopens the CUDA module once */
  return (unsigned)dev < NT_NDEVICES && have_alloc[dev] ? &allocators[dev] : NULL;
}

/* ---- shape helpers ------------------------------------------------------- */
/* Every shape that reaches a tensor header goes through here first (tsize.h
** says what "too large" means); the unchecked products below are then safe. */
int nt_check_shape(const char *op, const int64_t *shape, int ndim, int64_t *numel) {
  int64_t n;
  if (ndim < 0 || ndim > NT_MAXDIM) NT_FAIL("%s: tensors have at most %d dimensions, got %d", op, NT_MAXDIM, ndim);
  if (nt_numel_checked(shape, ndim, &n)) { if (numel) *numel = n; return 0; }
  char b[24 * NT_MAXDIM + 8];
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0) NT_FAIL("%s: negative dimension %lld in shape %s", op, (long long)shape[i], nt_shape_str(shape, ndim, b, sizeof b));
  NT_FAIL("%s: shape %s has too many elements (more than %lld)", op, nt_shape_str(shape, ndim, b, sizeof b), (long long)NT_MAX_NUMEL);
}

/* Callers pass checked shapes only (nt_check_shape). */
int64_t nt_shape_numel(const int64_t *shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* nt_contig_strides, nt_update_meta: tpure.c (shared with the CUDA module). */

char *nt_shape_str(const int64_t *shape, int ndim, char *buf, size_t sz) {
  size_t k = 0;
  if (sz == 0) return buf;
  k += (size_t)snprintf(buf, sz, "[");
  for (int i = 0; i < ndim && k < sz; i++)
    k += (size_t)snprintf(buf + k, sz - k, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (k < sz) snprintf(buf + k, sz - k, "]");
  return buf;
}

int nt_norm_axis(const char *op, int axis, int ndim) {
  int a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim) {
    nt_error_set("%s: axis %d is out of range for a tensor of dimension %d", op, axis, ndim);
    return -1;
  }
  return a;
}

/* ---- allocation ---------------------------------------------------------- */
/* allocation pressure (nt_set_pressure_hook); tensors are made and freed on
** the interpreter's thread only, as their reference counts assume */
static size_t live_bytes, pressure_every, pressure_count;
static void (*pressure_hook)(void);
void nt_set_pressure_hook(void (*hook)(void), size_t every) { pressure_hook = hook; pressure_every = every; pressure_count = 0; }
size_t nt_storage_bytes(void) { return live_bytes; }
static void note_storage_alloc(size_t nbytes) {
  live_bytes += nbytes;
  if (pressure_hook && (pressure_count += nbytes) >= pressure_every) { pressure_count = 0; pressure_hook(); }
}

#define HDR_BYTES ((sizeof(nt_Tensor) + sizeof(nt_Storage) + 63) & ~(size_t)63)

/* ---- small-block cache ------------------------------------------------------
** A 16-element op spent ~770 of its ~2,000 instructions in glibc's allocator
** (aligned_alloc + free of the one-block header/storage/data, with
** malloc_consolidate and unlink_chunk on every few frees: callgrind on
** bench/tensor/small_op).  Freed inline blocks (CPU tensors of at most
** NT_INLINE_BYTES, which hold no other memory: GPU storages never come here)
** are kept on per-size free lists, 64-byte size classes, and handed out
** again by nt_empty; a block is pushed when its storage's last reference
** goes, as before.  Bounded: at most POOL_MAX blocks per class (~1.3 MiB
** in all), the rest go back to malloc.  A spin lock guards the lists (tensors
** are normally made and freed on one thread; this keeps it safe when not).
** Under AddressSanitizer the cache is off so that a use after free is still
** reported at the free. */
#if defined(__SANITIZE_ADDRESS__)
#define POOL_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_OFF 1
#endif
#endif
#ifndef POOL_OFF
#define POOL_OFF 0
#endif
#define POOL_CLASSES (NT_INLINE_BYTES / 64 + 1)
#define POOL_MAX 256
typedef struct PoolBlock { struct PoolBlock *next; } PoolBlock;
static PoolBlock *pool[POOL_CLASSES];
static int pool_n[POOL_CLASSES];
static atomic_flag pool_lock = ATOMIC_FLAG_INIT;
static void plock(void) { while (atomic_flag_test_and_set_explicit(&pool_lock, memory_order_acquire)) ; }
static void punlock(void) { atomic_flag_clear_explicit(&pool_lock, memory_order_release); }
/* the class of an inline block holding nbytes of data: its size is HDR_BYTES + 64 * class */
static int pool_class(size_t nbytes) { return (int)((nbytes + 63) >> 6); }

static void *pool_get(size_t nbytes) {
  int c = pool_class(nbytes);
  if (!POOL_OFF) {
    plock();
    PoolBlock *b = pool[c];
    if (b) { pool[c] = b->next; pool_n[c]--; }
    punlock();
    if (b) return b;
  }
  return aligned_alloc(64, HDR_BYTES + ((size_t)c << 6));
}
static void pool_put(void *blk, size_t nbytes) {
  int c = pool_class(nbytes);
  if (!POOL_OFF) {
    plock();
    if (pool_n[c] < POOL_MAX) {
      PoolBlock *b = blk;
      b->next = pool[c]; pool[c] = b; pool_n[c]++;
      blk = NULL;
    }
    punlock();
  }
  free(blk);
}

nt_Tensor *nt_empty(const int64_t *shape, int ndim, nt_DType dt, nt_Device dev) {
  if (ndim < 0 || ndim > NT_MAXDIM) NT_FAIL_NULL("tensors have at most %d dimensions, got %d", NT_MAXDIM, ndim);
  if ((unsigned)dt >= NT_NDTYPES) NT_FAIL_NULL("invalid dtype %d", (int)dt);
  if (nt_dtype_is_complex(dt)) nt_complex_seen_ = 1;   /* arms the dispatch guard (tbackend.h) */
  const nt_Allocator *al = nt_allocator(dev);
  if (!al) NT_FAIL_NULL("%s", nt_device_unavailable_msg(dev));
  size_t esz = nt_dtype_size(dt);
  int64_t numel;
  if (nt_check_shape("empty", shape, ndim, &numel)) return NULL;
  size_t nbytes = (size_t)numel * esz;
  bool inl = dev == NT_CPU && nbytes <= NT_INLINE_BYTES;
  size_t blk = inl ? HDR_BYTES + nbytes : sizeof(nt_Tensor) + sizeof(nt_Storage);
  char *b = inl ? pool_get(nbytes) : malloc(blk);
  if (!b) { nt_error_oom(blk); return NULL; }
  nt_Tensor *t = (nt_Tensor *)b;
  nt_Storage *s = (nt_Storage *)(b + sizeof(nt_Tensor));
  s->refcount = 1; s->device = dev; s->nbytes = nbytes; s->block = b; s->version = 0;
  s->dev_epoch = dev == NT_CPU ? 0 : atomic_load_explicit(&nt_dev_epoch_, memory_order_relaxed);   /* its kernel runs in this epoch */
  s->readers = 0; s->hook = NULL;
  if (inl) { s->data = b + HDR_BYTES; s->flags = NT_STORAGE_INLINE; }
  else {
    s->flags = 0;
    s->data = al->alloc(nbytes);
    if (!s->data) { free(b); if (dev == NT_CPU) nt_error_oom(nbytes); return NULL; }   /* device allocators set their own message */
    note_storage_alloc(nbytes);
  }
  t->refcount = 1; t->dtype = dt; t->device = dev; t->ndim = ndim;
  t->offset = 0; t->numel = numel; t->flags = NT_T_CONTIG; t->storage = s;
  t->requires_grad = false; t->grad = NULL; t->grad_fn = NULL;
  if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);   /* shape may be NULL for 0-d */
  nt_contig_strides(shape, ndim, t->strides);
  return t;
}

nt_Tensor *nt_empty_small_(const nt_Tensor *like, nt_DType dt) {
  size_t nbytes = (size_t)like->numel * nt_dtype_size(dt);
  char *b = pool_get(nbytes);
  if (!b) { nt_error_oom(HDR_BYTES + nbytes); return NULL; }
  nt_Tensor *t = (nt_Tensor *)b;
  nt_Storage *s = (nt_Storage *)(b + sizeof(nt_Tensor));
  s->refcount = 1; s->device = NT_CPU; s->nbytes = nbytes; s->block = b; s->version = 0; s->dev_epoch = 0;
  s->readers = 0; s->hook = NULL; s->data = b + HDR_BYTES; s->flags = NT_STORAGE_INLINE;
  t->refcount = 1; t->dtype = dt; t->device = NT_CPU; t->ndim = like->ndim;
  t->offset = 0; t->numel = like->numel; t->flags = NT_T_CONTIG; t->storage = s;
  t->requires_grad = false; t->grad = NULL; t->grad_fn = NULL;
  memcpy(t->shape, like->shape, sizeof(int64_t) * (size_t)like->ndim);
  nt_contig_strides(like->shape, like->ndim, t->strides);
  return t;
}

/* tfuse.c: a contiguous CPU tensor without its buffer: tfuse.c's commit
** allocates it (nt_storage_alloc_) and hands it over when the chain is
** computed or dropped, so data stays NULL while the value is pending. */
nt_Tensor *nt_empty_deferred_(const int64_t *shape, int ndim, nt_DType dt) {
  int64_t numel;
  if (nt_check_shape("empty", shape, ndim, &numel)) return NULL;
  char *b = malloc(sizeof(nt_Tensor) + sizeof(nt_Storage));
  if (!b) { nt_error_oom(sizeof(nt_Tensor) + sizeof(nt_Storage)); return NULL; }
  nt_Tensor *t = (nt_Tensor *)b;
  nt_Storage *s = (nt_Storage *)(b + sizeof(nt_Tensor));
  s->refcount = 1; s->device = NT_CPU; s->nbytes = (size_t)numel * nt_dtype_size(dt); s->block = b; s->version = 0; s->dev_epoch = 0;
  s->readers = 0; s->hook = NULL; s->flags = 0; s->data = NULL;
  t->refcount = 1; t->dtype = dt; t->device = NT_CPU; t->ndim = ndim;
  t->offset = 0; t->numel = numel; t->flags = NT_T_CONTIG; t->storage = s;
  t->requires_grad = false; t->grad = NULL; t->grad_fn = NULL;
  if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  nt_contig_strides(shape, ndim, t->strides);
  return t;
}
/* Counted like any allocation, but the pressure hook (the interpreter's
** collector) is left to the next nt_empty: tfuse.c's commit calls this while
** its record still points at inputs it holds no reference to yet, which a
** collection could free. */
void *nt_storage_alloc_(nt_Storage *s) {
  void *p = nt_cpu_alloc(s->nbytes);
  if (!p) { nt_error_oom(s->nbytes); return NULL; }
  live_bytes += s->nbytes;
  pressure_count += s->nbytes;
  return p;
}

nt_Tensor *nt_from_external(void *data, nt_DType dt, const int64_t *shape, int ndim) {
  if (nt_check_shape("from_external", shape, ndim, NULL)) return NULL;
  char *b = nt_malloc(sizeof(nt_Tensor) + sizeof(nt_Storage));
  if (!b) return NULL;
  nt_Tensor *t = (nt_Tensor *)b;
  nt_Storage *s = (nt_Storage *)(b + sizeof(nt_Tensor));
  memset(t, 0, sizeof *t);
  s->refcount = 1; s->device = NT_CPU; s->block = b; s->data = data; s->flags = NT_STORAGE_EXTERNAL; s->version = 0; s->dev_epoch = 0;
  s->readers = 0; s->hook = NULL;
  t->refcount = 1; t->dtype = dt; t->ndim = ndim; t->storage = s;
  memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  nt_contig_strides(shape, ndim, t->strides);
  nt_update_meta(t);
  s->nbytes = (size_t)t->numel * nt_dtype_size(dt);
  return t;
}

static void storage_release(nt_Storage *s) {
  if (--s->refcount > 0) return;
  if (s->hook) nt_fuse_drop_(s);   /* a lazy value never read: never computed */
  if (s->flags & NT_STORAGE_INLINE) { pool_put(s->block, s->nbytes); return; }
  if (!(s->flags & NT_STORAGE_EXTERNAL) && s->data) { allocators[s->device].free(s->data); live_bytes -= s->nbytes; }
  free(s->block);
}

nt_Tensor *nt_retain(nt_Tensor *t) { if (t) t->refcount++; return t; }

void nt_release(nt_Tensor *t) {
  if (!t || --t->refcount > 0) return;
  if (t->grad) nt_release(t->grad);
  if (t->grad_fn) nt_node_release(t->grad_fn);
  bool own_hdr = t->flags & NT_T_VIEWHDR;
  storage_release(t->storage);
  if (own_hdr) free(t);
}

nt_Tensor *nt_view_of(nt_Tensor *t) {
  nt_Tensor *v = malloc(sizeof *v);
  if (!v) { nt_error_oom(sizeof *v); return NULL; }
  *v = *t;
  v->refcount = 1; v->flags |= NT_T_VIEWHDR;
  v->requires_grad = false; v->grad = NULL; v->grad_fn = NULL;
  v->storage->refcount++;
  return v;
}

/* ---- queries ------------------------------------------------------------- */
int64_t nt_size(const nt_Tensor *t, int axis) {
  int a = nt_norm_axis("size", axis, t->ndim);
  return a < 0 ? -1 : t->shape[a];
}
bool nt_is_contiguous(const nt_Tensor *t) { return t->flags & NT_T_CONTIG; }
void *nt_data_ptr(const nt_Tensor *t) { return t->device == NT_CPU ? nt_base(t) : NULL; }

/* ---- broadcasting -------------------------------------------------------- */
int nt_broadcast_shapes(const char *op, const int64_t *a, int na, const int64_t *b, int nb,
                        int64_t *out, int *nout) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int64_t da = i < n - na ? 1 : a[i - (n - na)];
    int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
    if (da != db && da != 1 && db != 1) {
      char sa[128], sb[128];
      nt_error_set("%s: shapes %s and %s cannot broadcast", op, nt_shape_str(a, na, sa, sizeof sa),
                   nt_shape_str(b, nb, sb, sizeof sb));
      return -1;
    }
    out[i] = da == 1 ? db : da;
  }
  *nout = n;
  return nt_check_shape(op, out, n, NULL);
}

void nt_bcast_view(nt_Tensor *v, const nt_Tensor *src, const int64_t *shape, int ndim) {
  *v = *src;
  int k = ndim - src->ndim;
  for (int i = 0; i < ndim; i++) {
    v->shape[i] = shape[i];
    v->strides[i] = (i < k || src->shape[i - k] != shape[i]) ? 0 : src->strides[i - k];
  }
  v->ndim = ndim;
  nt_update_meta(v);
}
