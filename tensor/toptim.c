/*
** toptim.c — fused optimizer updates over many parameters at once:
** nt_optim_adamw / nt_optim_sgd dispatch one op ("adamw_update" /
** "sgd_update") for the whole parameter list on the parameters' device;
** this file has the CPU kernel, cuda/optim.cu the one-launch GPU kernel.
** Updates happen in place on the parameters' storage and are not recorded
** by autograd (an optimizer step is not part of any graph); they bump the
** storages' version counters like every in-place write.  Parameters are
** f32, f64, bf16 or f16 (one dtype per update); the fresh autocast shadows
** of the parameters (tshadow.h) are written in the same pass and stay fresh.
*/
#include "tinternal.h"
#include "tdevice.h"
#include "toptim.h"
#include "tshadow.h"
#include "tdtype.h"
#include <stdlib.h>

static int adamw_op = -1, sgd_op = -1;

static bool state_ok(const nt_Tensor *t, const nt_Tensor *p) {
  return t && t->device == p->device && (t->flags & NT_T_CONTIG) && t->dtype == p->dtype && t->numel == p->numel;
}

/* AdamW with decoupled weight decay and the bias corrections hoisted:
**   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
**   p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
** SGD: d = g + wd p; with momentum: buf = mu buf + d; d = nesterov ? d + mu buf : buf;
**   p -= lr d.
** f32 and f64 compute in their own type; f16/bf16 parameters (and their
** state, of the same dtype, as torch keeps it) compute in f32 and are rounded
** once per store.  A parameter with a shadow (toptim.h) gets it written from
** the new value in the same loop.  Contiguous loops; OpenMP above a size. */
#define SQRT(x) _Generic((x), float: sqrtf, default: sqrt)(x)   /* sqrtf keeps f32 loops in f32 */
typedef struct { char *p, *g, *m, *v, *s; nt_DType dt, sdt; int64_t n; } Row;

static inline float ld16(nt_DType dt, const char *b, int64_t i) {
  uint16_t u; memcpy(&u, b + 2 * i, 2);
  return dt == NT_BF16 ? nt_bf16_to_f32(u) : nt_f16_to_f32(u);
}
static inline void st16(nt_DType dt, char *b, int64_t i, float x) {
  uint16_t u = dt == NT_BF16 ? nt_f32_to_bf16(x) : nt_f32_to_f16(x);
  memcpy(b + 2 * i, &u, 2);
}
/* element i of a row's tensor as compute type C, and back: one pair per
** storage type, chosen outside the loop (each loop stays a plain typed loop) */
#define LD_F32(base, i) ((float *)(base))[i]
#define ST_F32(base, i, x) (((float *)(base))[i] = (float)(x))
#define LD_F64(base, i) ((double *)(base))[i]
#define ST_F64(base, i, x) (((double *)(base))[i] = (double)(x))
#define LD_16(base, i) ld16(r->dt, base, i)
#define ST_16(base, i, x) st16(r->dt, base, i, (float)(x))
#define SHADOW(i, x) do { if (r->s) st16(r->sdt, r->s, i, (float)(x)); } while (0)

#define ADAMW_ROW(C, LD, ST) do { \
    C b1 = (C)o->beta1, b2 = (C)o->beta2, dec = (C)decay, ss = (C)step_size, rb = (C)rbc2, e = (C)o->eps; \
    _Pragma("omp parallel for if(r->n > NT_OMP_THRESHOLD)") \
    for (int64_t i = 0; i < r->n; i++) { \
      C gi = LD(r->g, i), mi = b1 * LD(r->m, i) + (1 - b1) * gi, vi = b2 * LD(r->v, i) + (1 - b2) * gi * gi; \
      ST(r->m, i, mi); ST(r->v, i, vi); \
      C pi = LD(r->p, i) * dec - ss * mi / (SQRT(vi) * rb + e); \
      ST(r->p, i, pi); SHADOW(i, pi); \
    } } while (0)
#define SGD_ROW(C, LD, ST) do { \
    C lr = (C)o->lr, mu = (C)o->beta1, wd = (C)o->weight_decay; int nest = o->nesterov; \
    _Pragma("omp parallel for if(r->n > NT_OMP_THRESHOLD)") \
    for (int64_t i = 0; i < r->n; i++) { \
      C d = LD(r->g, i) + wd * LD(r->p, i); \
      if (r->m) { C mi = mu * LD(r->m, i) + d; ST(r->m, i, mi); mi = LD(r->m, i); d = nest ? d + mu * mi : mi; } \
      C pi = LD(r->p, i) - lr * d; \
      ST(r->p, i, pi); SHADOW(i, pi); \
    } } while (0)

static int k_optim_cpu(const nt_KernelArgs *a, bool adam) {
  nt_Tensor **sh;
  const nt_OptimArgs *o = nt_optim_kargs(a, &sh);
  double bc1 = 1 - pow(o->beta1, o->step), bc2 = 1 - pow(o->beta2, o->step);
  double decay = 1 - o->lr * o->weight_decay, step_size = o->lr / bc1, rbc2 = 1 / sqrt(bc2);
  for (int k = 0; k < o->n; k++) {
    nt_Tensor *P = o->params[k], *G = o->grads[k];
    if (!G) continue;
    nt_Tensor *M = o->exp_avg ? o->exp_avg[k] : NULL, *V = adam ? o->exp_avg_sq[k] : NULL, *S = sh ? sh[k] : NULL;
    Row row = { nt_base(P), nt_base(G), M ? nt_base(M) : NULL, V ? nt_base(V) : NULL, S ? nt_base(S) : NULL,
                P->dtype, S ? S->dtype : NT_BF16, P->numel }, *r = &row;
    if (adam) {
      if (P->dtype == NT_F32) ADAMW_ROW(float, LD_F32, ST_F32);
      else if (P->dtype == NT_F64) ADAMW_ROW(double, LD_F64, ST_F64);
      else ADAMW_ROW(float, LD_16, ST_16);
    } else {
      if (P->dtype == NT_F32) SGD_ROW(float, LD_F32, ST_F32);
      else if (P->dtype == NT_F64) SGD_ROW(double, LD_F64, ST_F64);
      else SGD_ROW(float, LD_16, ST_16);
    }
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

static bool param_dtype_ok(nt_DType dt) { return dt == NT_F32 || dt == NT_F64 || dt == NT_BF16 || dt == NT_F16; }

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
    if (!(p->flags & NT_T_CONTIG) || !param_dtype_ok(p->dtype))
      NT_FAIL("%s: parameter %d must be a contiguous f32, f64, bf16 or f16 tensor, got %s", name, k, nt_dtype_name(p->dtype));
    if (p->device != dev || p->dtype != o->params[first]->dtype)
      NT_FAIL("%s: parameter %d is %s on %s but parameter %d is %s on %s (one update needs one device and dtype)", name, k,
              nt_dtype_name(p->dtype), nt_device_name(p->device), first, nt_dtype_name(o->params[first]->dtype), nt_device_name(dev));
    if (!state_ok(g, p)) NT_FAIL("%s: the gradient of parameter %d must be a contiguous %s tensor of %lld elements on %s", name, k, nt_dtype_name(p->dtype), (long long)p->numel, nt_device_name(p->device));
    if ((need_m && !state_ok(o->exp_avg[k], p)) || (adam && !state_ok(o->exp_avg_sq[k], p)))
      NT_FAIL("%s: the optimizer state of parameter %d must be contiguous %s tensors of %lld elements on %s", name, k, nt_dtype_name(p->dtype), (long long)p->numel, nt_device_name(p->device));
    for (int j = 0; j < k; j++)   /* a parameter given twice would be updated twice */
      if (o->params[j] == p && o->grads[j]) NT_FAIL("%s: parameter %d is parameter %d again", name, k, j);
  }
  if (first < 0) return 0;
  nt_OptimArgs local;
  if (o->lr_dev) {              /* the learning rate as a device scalar (compile: tcompile.h) */
    nt_Tensor *L = o->lr_dev;
    if (!adam) NT_FAIL("%s: a device learning rate is for adamw_update only", name);
    if (L->device != dev || L->dtype != NT_F64 || (L->numel != 2 && L->numel != NT_OPTIM_DEV_SKIP) || !(L->flags & NT_T_CONTIG))
      NT_FAIL("%s: the device scalars {lr, step} (or {lr, step, found_inf, skipped}) must be a two- or four-element f64 tensor on %s, got %s of %lld on %s", name,
              nt_device_name(dev), nt_dtype_name(L->dtype), (long long)L->numel, nt_device_name(L->device));
    if (dev == NT_CPU) {
      double v[NT_OPTIM_DEV_SKIP] = { 0, 0, 0, 0 };
      memcpy(v, nt_base(L), sizeof *v * (size_t)L->numel);
      local = *o;
      local.lr = v[0];
      local.step = v[1] - v[3];            /* the steps applied (toptim.h) */
      local.lr_dev = NULL;
      o = &local;
      if (L->numel == NT_OPTIM_DEV_SKIP) {  /* the scaler's found_inf: skip, counted; cleared either way */
        bool skip = v[2] != 0;
        v[2] = 0;
        if (skip) v[3] += 1;
        memcpy(nt_base(L), v, sizeof v);
        nt_bump_version(L);
        if (skip) return 0;
        local.step = v[1] - v[3];
      }
    }
    else if (nt_dev_check(L, name)) return -1;
  }
  if (dev != NT_CPU && nt_device_load(dev)) return -1;
  /* the tensors travel in `extra`: check them here (textend.h nt_dev_check);
  ** the writes are recorded by nt_bump_version below */
  for (int k = 0; k < o->n && dev != NT_CPU; k++) {
    if (!o->grads[k]) continue;
    if (nt_dev_check(o->params[k], name) || nt_dev_check(o->grads[k], name) ||
        (o->exp_avg && o->exp_avg[k] && nt_dev_check(o->exp_avg[k], name)) || (adam && nt_dev_check(o->exp_avg_sq[k], name)))
      return -1;
  }
  /* the fresh autocast shadows of the parameters (tshadow.h), written in the same pass */
  nt_Tensor **sh = calloc((size_t)o->n + 1, sizeof *sh);
  if (!sh) NT_FAIL("%s: out of memory", name);
  for (int k = 0; k < o->n; k++) {
    nt_Tensor *s = o->grads[k] ? nt_shadow_fresh(o->params[k]) : NULL;
    if (s && (s->flags & NT_T_CONTIG) && s->numel == o->params[k]->numel && s->device == dev && (s->dtype == NT_BF16 || s->dtype == NT_F16))
      sh[k] = s;
  }
  nt_OptimKernelArgs kargs = { o, sh };
  nt_KernelArgs ka; memset(&ka, 0, sizeof ka);
  ka.op = adam ? adamw_op : sgd_op;
  ka.extra = &kargs;
  ka.niarg = 1; ka.iarg[0] = NT_OPTIM_KARGS;
  if (nt_dispatch(ka.op, dev, &ka)) { free(sh); return -1; }
  /* in-place writes: a graph that saved a parameter before the step fails in backward */
  for (int k = 0; k < o->n; k++) {
    if (!o->grads[k]) continue;
    nt_bump_version(o->params[k]);
    if (o->exp_avg && o->exp_avg[k]) nt_bump_version(o->exp_avg[k]);
    if (adam && o->exp_avg_sq[k]) nt_bump_version(o->exp_avg_sq[k]);
  }
  /* after every bump: the shadows written above equal their parameters' new values */
  for (int k = 0; k < o->n; k++) if (sh[k]) nt_shadow_written(o->params[k], sh[k]);
  free(sh);
  return 0;
}

int nt_optim_adamw(nt_OptimArgs *o) { return optim("adamw_update", o, true); }

/* ---- dynamic loss scaling (toptim.h) ------------------------------------------
** The CPU reference of cuda/optim.cu's kernels: the same formulas, element
** by element; the scale's reciprocal in double, rounded once to the compute
** type (the host scaler's g * (1 / scale) through a scalar multiply). */
static int amp_unscale_op = -1, amp_update_op = -1;

#define UNSCALE_LOOP(C, LD, ST) do { \
    C inv = (C)(1.0 / st[0]); \
    for (int64_t i = 0; i < G->numel; i++) { \
      ST(b, i, LD(b, i) * inv); \
      C y = LD(b, i); \
      if (y - y != 0) found = 1; \
    } } while (0)
#define LD_16G(base, i) ld16(G->dtype, base, i)
#define ST_16G(base, i, x) st16(G->dtype, base, i, (float)(x))

static int k_amp_unscale_cpu(const nt_KernelArgs *a) {
  const nt_AmpArgs *p = (const nt_AmpArgs *)a->extra;
  double *st = (double *)nt_base(p->state);
  int found = 0;
  for (int k = 0; k < p->n; k++) {
    nt_Tensor *G = p->grads[k];
    if (!G) continue;
    char *b = nt_base(G);
    if (G->dtype == NT_F32) UNSCALE_LOOP(float, LD_F32, ST_F32);
    else if (G->dtype == NT_F64) UNSCALE_LOOP(double, LD_F64, ST_F64);
    else UNSCALE_LOOP(float, LD_16G, ST_16G);
  }
  st[2] = found;
  return 0;
}

static int k_amp_update_cpu(const nt_KernelArgs *a) {
  const nt_AmpArgs *p = (const nt_AmpArgs *)a->extra;
  double *st = (double *)nt_base(p->state);
  if (st[2] != 0) { st[0] *= p->backoff; st[1] = 0; return 0; }
  st[1] += 1;
  if (st[1] >= p->interval) {
    double grown = st[0] * p->growth;             /* the scale is an f32 in torch: never grows to inf */
    if (grown <= 3.4028234663852886e38) st[0] = grown;
    st[1] = 0;
  }
  return 0;
}

static void amp_init(void) {
  if (amp_unscale_op >= 0) return;
  amp_unscale_op = nt_op_register("amp_unscale");
  amp_update_op = nt_op_register("amp_update_scale");
  nt_register_kernel(amp_unscale_op, NT_CPU, k_amp_unscale_cpu);
  nt_register_kernel(amp_update_op, NT_CPU, k_amp_update_cpu);
}

static int amp_state_ok(const char *name, nt_Tensor *s) {
  if (!s || s->dtype != NT_F64 || s->numel != NT_AMP_STATE || !(s->flags & NT_T_CONTIG))
    NT_FAIL("%s: the scaler state must be a contiguous f64 tensor of %d elements {scale, growth_tracker, found_inf}, got %s of %lld",
            name, NT_AMP_STATE, s ? nt_dtype_name(s->dtype) : "nothing", s ? (long long)s->numel : 0LL);
  if (s->device != NT_CPU && (nt_device_load(s->device) || nt_dev_check(s, name))) return -1;
  return 0;
}

static int amp_dispatch(int op, nt_AmpArgs *p) {
  nt_KernelArgs ka; memset(&ka, 0, sizeof ka);
  ka.op = op;
  ka.extra = p;
  if (nt_dispatch(op, p->state->device, &ka)) return -1;
  nt_bump_version(p->state);
  return 0;
}

int nt_amp_unscale(nt_Tensor **grads, int n, nt_Tensor *state) {
  const char *name = "amp_unscale";
  amp_init();
  if (amp_state_ok(name, state)) return -1;
  if (n < 0) NT_FAIL("%s: negative tensor count %d", name, n);
  nt_Tensor **g = calloc((size_t)n + 1, sizeof *g);
  if (!g) NT_FAIL("%s: out of memory", name);
  for (int k = 0; k < n; k++) {
    nt_Tensor *t = grads[k];
    if (!t || !nt_dtype_is_float(t->dtype)) continue;   /* integer leaves: nothing to unscale */
    bool twice = false;
    for (int j = 0; j < k; j++) twice |= g[j] == t;     /* a tied gradient once, or it would be divided twice */
    if (twice) continue;
    if (t->device != state->device) { free(g); NT_FAIL("%s: gradient %d is on %s but the scaler state is on %s", name, k, nt_device_name(t->device), nt_device_name(state->device)); }
    if (!(t->flags & NT_T_CONTIG) || !param_dtype_ok(t->dtype)) { free(g); NT_FAIL("%s: gradient %d must be a contiguous f32, f64, bf16 or f16 tensor, got %s%s", name, k, nt_dtype_name(t->dtype), (t->flags & NT_T_CONTIG) ? "" : " (strided)"); }
    if (t->device != NT_CPU && nt_dev_check(t, name)) { free(g); return -1; }
    g[k] = t;
  }
  nt_AmpArgs p = { n, g, state, 0, 0, 0 };
  int rc = amp_dispatch(amp_unscale_op, &p);
  for (int k = 0; k < n && !rc; k++) if (g[k]) nt_bump_version(g[k]);
  free(g);
  return rc;
}

int nt_amp_update_scale(nt_Tensor *state, double growth, double backoff, double interval) {
  const char *name = "amp_update_scale";
  amp_init();
  if (amp_state_ok(name, state)) return -1;
  if (!(growth > 1) || !(backoff > 0 && backoff < 1) || !(interval >= 0))
    NT_FAIL("%s: growth_factor > 1, backoff_factor in (0, 1) and growth_interval >= 0 expected, got %g, %g, %g", name, growth, backoff, interval);
  nt_AmpArgs p = { 0, NULL, state, growth, backoff, interval };
  return amp_dispatch(amp_update_op, &p);
}
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
