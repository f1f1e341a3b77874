/*
** toptim.c — fused optimizer updates over many parameters at once:
** nt_optim_adamw / nt_optim_sgd dispatch one op ("adamw_update" /
** "sgd_update") for the whole parameter list on the parameters' device;
** this file has the CPU kernel, cuda/optim.cu the one-launch GPU kernel.
** Updates happen in place on the parameters' storage and are not recorded
** by autograd (an optimizer step is not part of any graph); they bump the
** storages' version counters like every in-place write.
*/
#include "tinternal.h"
#include "tdevice.h"
#include <stdlib.h>

static int adamw_op = -1, sgd_op = -1;

static bool state_ok(const nt_Tensor *t, const nt_Tensor *p) {
  return t && t->device == p->device && (t->flags & NT_T_CONTIG) && t->dtype == p->dtype && t->numel == p->numel;
}

/* AdamW with decoupled weight decay and the bias corrections hoisted:
**   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
**   p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
** SGD: d = g + wd p; with momentum: buf = mu buf + d; d = nesterov ? d + mu buf : buf;
**   p -= lr d.  Contiguous loops the compiler vectorizes; OpenMP above a size. */
#define SQRT(x) _Generic((x), float: sqrtf, default: sqrt)(x)   /* sqrtf keeps f32 loops in f32 */
#define ADAMW_LOOP(T) do { \
    T *p = (T *)nt_base(P), *g = (T *)nt_base(G), *m = (T *)nt_base(M), *v = (T *)nt_base(V); \
    T b1 = (T)o->beta1, b2 = (T)o->beta2, dec = (T)decay, ss = (T)step_size, rb = (T)rbc2, e = (T)o->eps; \
    _Pragma("omp parallel for if(cnt > NT_OMP_THRESHOLD)") \
    for (int64_t i = 0; i < cnt; i++) { \
      T gi = g[i], mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi; \
      m[i] = mi; v[i] = vi; \
      p[i] = p[i] * dec - ss * mi / (SQRT(vi) * rb + e); \
    } } while (0)
#define SGD_LOOP(T) do { \
    T *p = (T *)nt_base(P), *g = (T *)nt_base(G), *m = M ? (T *)nt_base(M) : NULL; \
    T lr = (T)o->lr, mu = (T)o->beta1, wd = (T)o->weight_decay; int nest = o->nesterov; \
    _Pragma("omp parallel for if(cnt > NT_OMP_THRESHOLD)") \
    for (int64_t i = 0; i < cnt; i++) { \
      T d = g[i] + wd * p[i]; \
      if (m) { m[i] = mu * m[i] + d; d = nest ? d + mu * m[i] : m[i]; } \
      p[i] = p[i] - lr * d; \
    } } while (0)

static int k_optim_cpu(const nt_KernelArgs *a, bool adam) {
  const nt_OptimArgs *o = a->extra;
  double bc1 = 1 - pow(o->beta1, o->step), bc2 = 1 - pow(o->beta2, o->step);
  double decay = 1 - o->lr * o->weight_decay, step_size = o->lr / bc1, rbc2 = 1 / sqrt(bc2);
  for (int k = 0; k < o->n; k++) {
    nt_Tensor *P = o->params[k], *G = o->grads[k];
    if (!G) continue;
    nt_Tensor *M = o->exp_avg ? o->exp_avg[k] : NULL, *V = adam ? o->exp_avg_sq[k] : NULL;
    int64_t cnt = P->numel;
    if (adam) { if (P->dtype == NT_F32) ADAMW_LOOP(float); else ADAMW_LOOP(double); }
    else { if (P->dtype == NT_F32) SGD_LOOP(float); else SGD_LOOP(double); }
  }
  return 0;
}
static int k_adamw_cpu(const nt_KernelArgs *a) { return k_optim_cpu(a, true); }
static int k_sgd_cpu(const nt_KernelArgs *a) { return k_optim_cpu(a, false); }

static void optim_init(void) {
  if (adamw_op >= 0) return;
  adamw_op = nt_op_register("adamw_update");
  sgd_op = nt_op_register("sgd_update");
  nt_register_kernel(adamw_op, NT_CPU, k_adamw_cpu);
  nt_register_kernel(sgd_op, NT_CPU, k_sgd_cpu);
}

/* Checks shapes/devices (the same rules on every device), then one dispatch. */
static int optim(const char *name, nt_OptimArgs *o, bool adam) {
  optim_init();
  nt_Device dev = NT_CPU;
  int first = -1;
  bool need_m = adam || o->beta1 != 0;
  for (int k = 0; k < o->n; k++) {
    nt_Tensor *p = o->params[k], *g = o->grads[k];
    if (!g) continue;                       /* a parameter that got no gradient is left alone */
    if (first < 0) { first = k; dev = p->device; }
    if (!(p->flags & NT_T_CONTIG) || (p->dtype != NT_F32 && p->dtype != NT_F64))
      NT_FAIL("%s: parameter %d must be a contiguous f32 or f64 tensor", name, k);
    if (p->device != dev || p->dtype != o->params[first]->dtype)
      NT_FAIL("%s: parameter %d is %s on %s but parameter %d is %s on %s (one update needs one device and dtype)", name, k,
              nt_dtype_name(p->dtype), nt_device_name(p->device), first, nt_dtype_name(o->params[first]->dtype), nt_device_name(dev));
    if (!state_ok(g, p)) NT_FAIL("%s: the gradient of parameter %d must be a contiguous %s tensor of %lld elements on %s", name, k, nt_dtype_name(p->dtype), (long long)p->numel, nt_device_name(p->device));
    if ((need_m && !state_ok(o->exp_avg[k], p)) || (adam && !state_ok(o->exp_avg_sq[k], p)))
      NT_FAIL("%s: the optimizer state of parameter %d must be contiguous %s tensors of %lld elements on %s", name, k, nt_dtype_name(p->dtype), (long long)p->numel, nt_device_name(p->device));
  }
  if (first < 0) return 0;
  if (dev != NT_CPU && nt_device_load(dev)) return -1;
  /* the tensors travel in `extra`: check them here (textend.h nt_dev_check);
  ** the writes are recorded by nt_bump_version below */
  for (int k = 0; k < o->n && dev != NT_CPU; k++) {
    if (!o->grads[k]) continue;
    if (nt_dev_check(o->params[k], name) || nt_dev_check(o->grads[k], name) ||
        (o->exp_avg && nt_dev_check(o->exp_avg[k], name)) || (adam && nt_dev_check(o->exp_avg_sq[k], name)))
      return -1;
  }
  nt_KernelArgs ka; memset(&ka, 0, sizeof ka);
  ka.op = adam ? adamw_op : sgd_op;
  ka.extra = o;
  if (nt_dispatch(ka.op, dev, &ka)) return -1;
  /* in-place writes: a graph that saved a parameter before the step fails in backward */
  for (int k = 0; k < o->n; k++) {
    if (!o->grads[k]) continue;
    nt_bump_version(o->params[k]);
    if (o->exp_avg && o->exp_avg[k]) nt_bump_version(o->exp_avg[k]);
    if (adam && o->exp_avg_sq[k]) nt_bump_version(o->exp_avg_sq[k]);
  }
  return 0;
}

int nt_optim_adamw(nt_OptimArgs *o) { return optim("adamw_update", o, true); }
int nt_optim_sgd(nt_OptimArgs *o) { return optim("sgd_update", o, false); }

/* ---- gradient-norm clipping ------------------------------------------------
** The contiguous f32/f64 CPU gradients are cut into one list of chunks: the
** sum of squares is one threaded pass over all of them (in double, the
** reduction vectorised by `omp simd`), the scaling one more; a model's many
** small biases share threads with its big matrices instead of each paying
** for a parallel region.  Any other gradient (another device, strided,
** f16/bf16) goes through the composed ops, as before. */
typedef struct { char *p; int64_t n; nt_DType dt; } ClipChunk;
#define CLIP_CHUNK 32768

static bool clip_fast(const nt_Tensor *g) {
  return g->device == NT_CPU && (g->flags & NT_T_CONTIG) && (g->dtype == NT_F32 || g->dtype == NT_F64);
}

static double chunk_sumsq(const ClipChunk *c) {
  double s = 0;
  if (c->dt == NT_F32) {
    const float *x = (const float *)c->p;
    _Pragma("omp simd reduction(+:s)")
    for (int64_t i = 0; i < c->n; i++) s += (double)x[i] * x[i];
  } else {
    const double *x = (const double *)c->p;
    _Pragma("omp simd reduction(+:s)")
    for (int64_t i = 0; i < c->n; i++) s += x[i] * x[i];
  }
  return s;
}

static void chunk_scale(const ClipChunk *c, double k) {
  if (c->dt == NT_F32) {
    float *x = (float *)c->p, kf = (float)k;
    for (int64_t i = 0; i < c->n; i++) x[i] *= kf;
  } else {
    double *x = (double *)c->p;
    for (int64_t i = 0; i < c->n; i++) x[i] *= k;
  }
}

/* chunks of the fast gradients; *nc chunks, *total elements; NULL + error on OOM */
static ClipChunk *clip_chunks(nt_Tensor **g, int n, int64_t *nc, int64_t *total) {
  int64_t cnt = 0;
  *total = 0;
  for (int k = 0; k < n; k++)
    if (g[k] && clip_fast(g[k])) cnt += (g[k]->numel + CLIP_CHUNK - 1) / CLIP_CHUNK;
  ClipChunk *c = nt_malloc(sizeof(ClipChunk) * (size_t)(cnt ? cnt : 1));
  if (!c) return NULL;
  int64_t j = 0;
  for (int k = 0; k < n; k++) {
    if (!g[k] || !clip_fast(g[k])) continue;
    size_t es = nt_dtype_size(g[k]->dtype);
    for (int64_t lo = 0; lo < g[k]->numel; lo += CLIP_CHUNK) {
      int64_t len = g[k]->numel - lo < CLIP_CHUNK ? g[k]->numel - lo : CLIP_CHUNK;
      c[j++] = (ClipChunk){ nt_base(g[k]) + (size_t)lo * es, len, g[k]->dtype };
      *total += len;
    }
  }
  *nc = j;
  return c;
}

/* sum(g^2) of one gradient through the composed ops (any device, dtype, layout) */
static int composed_sumsq(nt_Tensor *g, double *out) {
  nt_Tensor *sq = nt_binary_scalar_ex(NT_OP_POW, g, 2, NT_SCALAR_INT);
  nt_Tensor *s = sq ? nt_sum(sq, NULL, 0, false) : NULL;
  int bad = !s || nt_item(s, out);
  nt_release(sq); nt_release(s);
  return bad ? -1 : 0;
}
static int composed_scale(nt_Tensor *g, double k) {
  nt_Tensor *sc = nt_binary_scalar_ex(NT_OP_MUL, g, k, NT_SCALAR_FLOAT);
  int bad = !sc || nt_copy_(g, sc);
  nt_release(sc);
  return bad ? -1 : 0;
}

static int clip(nt_Tensor **g, int n, double max_norm, double *norm_out) {
  int64_t nc, total;
  ClipChunk *c = clip_chunks(g, n, &nc, &total);
  if (!c) return -1;
  double ss = 0;
  _Pragma("omp parallel for reduction(+:ss) if (total > NT_OMP_THRESHOLD)")
  for (int64_t j = 0; j < nc; j++) ss += chunk_sumsq(&c[j]);
  for (int k = 0; k < n; k++) {
    double v;
    if (!g[k] || clip_fast(g[k]) || !nt_dtype_is_float(g[k]->dtype)) continue;
    if (composed_sumsq(g[k], &v)) { free(c); return -1; }
    ss += v;
  }
  double norm = sqrt(ss);
  *norm_out = norm;
  if (norm > max_norm && norm > 0) {   /* a NaN norm scales nothing (it is returned) */
    double k = max_norm / (norm + 1e-6);
    _Pragma("omp parallel for if (total > NT_OMP_THRESHOLD)")
    for (int64_t j = 0; j < nc; j++) chunk_scale(&c[j], k);
    for (int i = 0; i < n; i++) {
      if (!g[i] || !nt_dtype_is_float(g[i]->dtype)) continue;
      if (clip_fast(g[i])) nt_bump_version(g[i]);
      else if (composed_scale(g[i], k)) { free(c); return -1; }
    }
  }
  free(c);
  return 0;
}

int nt_clip_grad_norm(nt_Tensor **grads, int n, double max_norm, double *norm) {
  *norm = 0;
  if (n < 0) NT_FAIL("clip_grad_norm: negative tensor count %d", n);
  for (int k = 0; k < n; k++)   /* a tensor given twice would be counted and scaled twice */
    for (int j = 0; grads[k] && j < k; j++)
      if (grads[j] == grads[k]) NT_FAIL("clip_grad_norm: tensor %d is tensor %d again", k, j);
  bool prev = nt_set_grad_enabled(false);
  int rc = clip(grads, n, max_norm, norm);
  nt_set_grad_enabled(prev);
  return rc;
}
