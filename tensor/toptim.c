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
