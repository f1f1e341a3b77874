/*
** tautocast.c — automatic mixed precision (PyTorch's autocast, reduced to our ops).
**
** State: one thread-local dtype (-1 = off, else NT_F16 or NT_BF16), like grad
** mode.  Op front ends call NT_AUTOCAST(policy, CALL, inputs...) first thing:
** when autocast is on and the policy changes an input's dtype, the inputs are
** cast (nt_to_dtype: a normal differentiable op, so an f32 master weight gets
** an f32 gradient through ToDtypeBackward) and the front end calls itself on
** the cast inputs, where nothing needs casting any more.
**
**   NT_AUTOCAST_LOW   matmul, conv2d, attention: every floating input not in
**                     the autocast dtype is cast to it (f32 and f64; PyTorch
**                     leaves f64 alone, we cast it too); output low precision.
**   NT_AUTOCAST_F32   softmax, log_softmax, layer_norm, mse_loss,
**                     sum, mean, prod, logsumexp, var/std, cumsum, exp, expm1,
**                     log, log1p, log2, pow, reciprocal, rsqrt, tan: f16/bf16
**                     inputs are upcast to f32; output f32.  (cross_entropy
**                     is not cast: its fused kernel reads f16/bf16 logits as
**                     stored, accumulates in f32 and gives an f32 loss.)
**   everything else   ordinary type promotion (bf16 + f32 -> f32).
**
** f16 on the CPU warns once that it will not be faster (warn_cpu_f16).
**
** Backward passes run with autocast off (tautograd.c): each backward op sees
** the dtypes its forward chose, as in PyTorch.
**
** Casts of parameters go through the shadow cache below (tshadow.h): a fresh
** shadow costs no kernel; the cast op is then the shadow under a
** ToDtypeBackward node, the same gradient as nt_to_dtype's.
*/
#include "tinternal.h"
#include "tshadow.h"
#include "textend.h"
#include <stdio.h>
#include <stdlib.h>

static _Thread_local int autocast_plus1 = 0;   /* dtype + 1; zero-init = off */

int nt_autocast_dtype(void) { return autocast_plus1 - 1; }

int nt_autocast_set(int dt) {
  int prev = autocast_plus1 - 1;
  if (dt != NT_F16 && dt != NT_BF16) dt = -1;  /* anything else (f32, -1): off */
  autocast_plus1 = dt + 1;
  return prev;
}

/* the dtype the policy wants for x under autocast dtype ac, or x's own */
static nt_DType wanted(int policy, int ac, const nt_Tensor *x) {
  if (!nt_dtype_is_float(x->dtype)) return x->dtype;
  if (policy == NT_AUTOCAST_LOW) return (nt_DType)ac;
  return x->dtype == NT_F16 || x->dtype == NT_BF16 ? NT_F32 : x->dtype;
}

/* ---- the shadow cache (tshadow.h) ------------------------------------------------ */
typedef struct {
  nt_Tensor *key;       /* a view of the weight (holds its storage): storage, offset, shape, strides */
  nt_Tensor *shadow;    /* contiguous copy in dtype `dt` */
  uint64_t ver;         /* the storage version the shadow equals */
} Shadow;
static _Thread_local Shadow *shadows;
static _Thread_local int nshadows, cap_shadows;
static _Thread_local int64_t shadow_casts;

static bool cacheable(const nt_Tensor *t, nt_DType dt) {
  return nt_is_leaf(t) && nt_requires_grad(t) && nt_dtype_is_float(t->dtype) && t->dtype != dt &&
         (dt == NT_BF16 || dt == NT_F16) && t->storage->hook == NULL;
}

static bool same_geometry(const nt_Tensor *a, const nt_Tensor *b) {
  if (a->storage != b->storage || a->offset != b->offset || a->ndim != b->ndim || a->dtype != b->dtype) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d])) return false;
  return true;
}

static Shadow *find(const nt_Tensor *t, int dt) {
  for (int i = 0; i < nshadows; i++)
    if ((dt < 0 || shadows[i].shadow->dtype == (nt_DType)dt) && same_geometry(shadows[i].key, t)) return &shadows[i];
  return NULL;
}

static void drop(int i) {
  nt_release(shadows[i].key); nt_release(shadows[i].shadow);
  shadows[i] = shadows[--nshadows];
}

/* entries whose weight only the cache still holds */
static void sweep(void) {
  for (int i = nshadows - 1; i >= 0; i--)
    if (shadows[i].key->storage->refcount == 1) drop(i);
}

/* a plain cast without autograd */
static nt_Tensor *plain_cast(nt_Tensor *t, nt_DType dt) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *c = nt_to_dtype(t, dt);
  nt_set_grad_enabled(prev);
  return c;
}

nt_Tensor *nt_shadow_get(nt_Tensor *t, nt_DType dt) {
  if (t->dtype == dt) return nt_retain(t);
  if (!cacheable(t, dt)) return plain_cast(t, dt);
  sweep();                                   /* a dropped model's weights and shadows go now */
  Shadow *e = find(t, (int)dt);
  if (e && e->ver == t->storage->version) return nt_retain(e->shadow);
  uint64_t ver = t->storage->version;
  nt_Tensor *c = plain_cast(t, dt);
  if (!c) return NULL;
  shadow_casts++;
  if (e) {                                   /* stale: replace (a graph may still hold the old one) */
    nt_release(e->shadow);
    e->shadow = nt_retain(c); e->ver = ver;
    return c;
  }
  if (nshadows == NT_SHADOW_MAX) return c;   /* full: not cached */
  if (nshadows == cap_shadows) {
    int nc = cap_shadows ? 2 * cap_shadows : 64;
    Shadow *ns = realloc(shadows, sizeof(Shadow) * (size_t)nc);
    if (!ns) return c;                       /* not cached; the cast is still right */
    shadows = ns; cap_shadows = nc;
  }
  nt_Tensor *key = nt_view_of(t);
  if (!key) { nt_error_clear(); return c; }
  shadows[nshadows++] = (Shadow){ key, nt_retain(c), ver };
  return c;
}

nt_Tensor *nt_shadow_fresh(const nt_Tensor *p) {
  Shadow *e = find(p, -1);
  return e && e->ver == p->storage->version ? e->shadow : NULL;
}

void nt_shadow_written(const nt_Tensor *p, nt_Tensor *s) {
  for (int i = 0; i < nshadows; i++)
    if (shadows[i].shadow == s && same_geometry(shadows[i].key, p)) {
      shadows[i].ver = p->storage->version;
      nt_bump_version(s);
      return;
    }
}

void nt_shadow_clear(void) {
  while (nshadows) drop(nshadows - 1);
  free(shadows); shadows = NULL; cap_shadows = 0;
}

void nt_shadow_stats(int64_t *entries, int64_t *casts) {
  if (entries) *entries = nshadows;
  if (casts) *casts = shadow_casts;
}

static int cast_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  (void)n;
  gin[0] = nt_retain(g);   /* the engine casts to the input's dtype */
  return 0;
}

/* autocast's cast of one input: nt_to_dtype, except that a parameter's cast
** is its shadow (an alias of it, under a ToDtypeBackward node when x needs grad) */
static nt_Tensor *cast(nt_Tensor *x, nt_DType dt) {
  if (!cacheable(x, dt)) return nt_to_dtype(x, dt);
  nt_Tensor *s = nt_shadow_get(x, dt);
  if (!s || !nt_needs_grad(1, &x)) return s;
  nt_Tensor *out = nt_view_of(s);
  nt_release(s);
  if (!out) return NULL;
  nt_Node *n = nt_record(out, "ToDtypeBackward", cast_backward, 1, &x);
  if (!n) { nt_release(out); return NULL; }
  nt_node_unchecked(n, 0);
  return out;
}

/* f16 autocast on the CPU does not pay: the CPU kernels have no f16 matrix
** path (oneDNN's needs avx512_fp16/AMX-FP16; tonednn.c runs bf16 only), so
** an f16 matmul is an f32 GEMM between casts, slower than staying in f32.
** Said once per process, on stderr, at the first f16 cast of a CPU operand
** for a matmul-class op (torch's CPU autocast refuses f16 outright). */
static void warn_cpu_f16(int policy, int ac, int n, nt_Tensor *const *in) {
  static int warned;
  if (ac != NT_F16 || policy != NT_AUTOCAST_LOW || __atomic_load_n(&warned, __ATOMIC_RELAXED)) return;
  bool cpu = false;
  for (int i = 0; i < n; i++) if (in[i] && in[i]->device == NT_CPU) cpu = true;
  if (!cpu || __atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) return;
  fprintf(stderr, "nabla: warning: autocast(\"f16\") on the CPU is slower than f32: the CPU kernels have no f16 "
                  "matrix path, so f16 matmuls run as f32 GEMMs between casts; use autocast(\"bf16\") (oneDNN's "
                  "bf16 matmul) or no autocast on the CPU\n");
}

int nt_autocast_inputs(int policy, int n, nt_Tensor *const *in, nt_Tensor **out) {
  int ac = autocast_plus1 - 1, changed = 0;
  if (ac < 0) return 0;
  for (int i = 0; i < n; i++) if (in[i] && wanted(policy, ac, in[i]) != in[i]->dtype) changed++;
  if (!changed) return 0;
  warn_cpu_f16(policy, ac, n, in);
  for (int i = 0; i < n; i++) {
    out[i] = in[i] ? cast(in[i], wanted(policy, ac, in[i])) : NULL;
    if (in[i] && !out[i]) { nt_autocast_release(i, out); return -1; }
  }
  return changed;
}

void nt_autocast_release(int n, nt_Tensor **casts) {
  for (int i = 0; i < n; i++) { nt_release(casts[i]); casts[i] = NULL; }
}
