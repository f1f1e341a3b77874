// optim.cu — fused multi-tensor optimizer updates: one launch updates every
// parameter of a model (op ids "adamw_update" and "sgd_update"; the argument
// blocks are nt_OptimArgs, tensor/tdevice.h, and nt_OptimKernelArgs,
// tensor/toptim.h, which adds the autocast shadow of each parameter).
//
// multi_tensor_apply, as in apex/PyTorch: every parameter is cut into chunks
// of kChunk elements, one table row {tensor k, p, m, v, shadow, start, len}
// per chunk, and block b updates chunk b.  The table lives on the device and
// is CACHED (keyed by its own contents: the parameters', states' and shadows'
// addresses and sizes), so a step with the same parameter set copies nothing
// to the device; a changed set uploads a new table once.  The gradients are
// new tensors at every step, so their addresses travel as a launch argument
// (up to kGradsPerLaunch per launch, as PyTorch's TensorListMetadata), not in
// the table.
//
// The step count lives on the device (PyTorch's capturable AdamW): a one-
// thread kernel before the update adds 1 to it and computes the bias
// corrections bc1 = 1 - b1^t, rbc2 = 1 / sqrt(1 - b2^t) into device memory,
// which the update reads.  The host keeps a mirror of the count and passes
// the step it expects; if they differ (the first step, a restored state) the
// prologue takes the host's value instead of adding 1 (no copy either way).
// The learning rate reaches the update through the same device record: the
// prologue stores it there, from a launch argument or, when the optimizer
// keeps its DEVICE SCALARS (nt_OptimArgs.lr_dev: a two-element f64 tensor
// {lr, step}, what a compiled step needs: the host writes a schedule's value
// and its count there before each replay), from that tensor, the step count
// too.  Either way the update computes the same doubles.
//
// Inside a captured step (compile; cuda/graph.cu) nothing host-side may be
// frozen into the graph: an update without device scalars ends the capture
// (a gate), and every replay makes the host mirrors unknown
// (optim_forget_steps), so the next eager step reseeds from the host's count.
//
// Per element (f32/f64 compute in their own type; bf16/f16 parameters and
// state in f32, rounded once per store; the CPU kernel in tensor/toptim.c
// is the same formula):
//   adamw: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//          p = p decay - step_size m / (sqrt(v) rbc2 + eps)
//          decay = 1 - lr wd, step_size = lr / bc1
//   sgd:   d = g + wd p; momentum: buf = mom buf + d, d = nesterov ? d + mom buf : buf;  p -= lr d
//   and, where the parameter has a shadow: shadow = bf16/f16(p)
// Contiguous chunks whose pointers are 16-byte aligned are read and written
// 4 elements at a time (one 16-byte load for f32).
#include "common.cuh"
#include "cuda/graph.h"
#include "tensor/toptim.h"
#include <vector>
#include <cstring>

namespace ncu {
namespace {

constexpr int64_t kChunk = 65536;
constexpr int kGradsPerLaunch = 320;     // 2.5 KiB of pointers: under the 4 KiB launch-argument limit

enum ShadowType : int32_t { kNoShadow = 0, kShadowBf16 = 1, kShadowF16 = 2 };

struct ChunkRow {
  void *p, *m, *v, *s;
  int64_t start, len;
  int32_t k;            // the parameter's index (its gradient: GradList)
  int32_t stype;        // ShadowType
};

struct GradList {
  const void *g[kGradsPerLaunch];
  int32_t k0;           // g[i] is parameter k0 + i's gradient
};

struct DevStep {        // on the device, per cached table
  double step, bc1, rbc2, lr;
  int skip;             // the loss scaler found an inf/nan: this update leaves everything as it is
};

struct Hyper { double lr, b1, b2, eps, wd, mom; int nesterov; };

// t += 1 (or t = reseed when reseed > 0), then the bias corrections; or,
// with device scalars {lr, t} (dev), both from there.  With four device
// scalars {lr, t, found_inf, skipped} (the loss scaler's, toptim.h) a set
// found_inf skips this update and counts it in `skipped`; t - skipped is
// the number of updates applied; found_inf is cleared either way.
__global__ void adamw_prologue(DevStep *st, double reseed, double b1, double b2, double *dev, int ndev, double lr) {
  if (threadIdx.x || blockIdx.x) return;
  int skip = 0;
  if (dev && ndev == NT_OPTIM_DEV_SKIP) {
    skip = dev[2] != 0;
    dev[2] = 0;
    if (skip) dev[3] += 1;
  }
  st->skip = skip;
  double t = dev ? dev[1] - (ndev == NT_OPTIM_DEV_SKIP ? dev[3] : 0) : reseed > 0 ? reseed : st->step + 1;
  st->step = t;
  st->bc1 = 1 - pow(b1, t);
  st->rbc2 = 1 / sqrt(1 - pow(b2, t));
  st->lr = dev ? dev[0] : lr;
}

template <typename T> using CompT = typename Comp<T>::type;

template <typename C>
__device__ inline void store_shadow(void *s, int32_t stype, int64_t i, C x) {
  if (stype == kShadowBf16) ((__nv_bfloat16 *)s)[i] = St<__nv_bfloat16>::from(x);
  else if (stype == kShadowF16) ((__half *)s)[i] = St<__half>::from(x);
}

template <typename T> struct alignas(16) Vec4 { T x[4]; };

// One element of the update (the shared formula); C the compute type.
template <typename C> struct AdamOp {
  C b1, b2, dec, ss, rb, eps;
  __device__ inline void operator()(C &p, C g, C &m, C &v) const {
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    p = p * dec - ss * m / (sqrt(v) * rb + eps);
  }
};

template <typename T, bool kAdam>
__global__ void optim_kernel(const ChunkRow *rows, int64_t row0, GradList gl, const DevStep *st, Hyper hp) {
  typedef CompT<T> C;
  if (kAdam && st->skip) return;      // the same for every block: the scaler skips this step
  const ChunkRow r = rows[row0 + blockIdx.x];
  T *p = (T *)r.p + r.start, *m = r.m ? (T *)r.m + r.start : nullptr, *v = r.v ? (T *)r.v + r.start : nullptr;
  const T *g = (const T *)gl.g[r.k - gl.k0] + r.start;
  AdamOp<C> op{};
  if (kAdam) {
    // hoisted in double, rounded once to C: the CPU kernel's values
    const double lr = st->lr;
    op = AdamOp<C>{ (C)hp.b1, (C)hp.b2, (C)(1 - lr * hp.wd), (C)(lr / st->bc1), (C)st->rbc2, (C)hp.eps };
  }
  const C lr = (C)hp.lr, mu = (C)hp.mom, wd = (C)hp.wd;
  auto one = [&](C &pi, C gi, C &mi, C &vi) {
    if (kAdam) op(pi, gi, mi, vi);
    else {
      C d = gi + wd * pi;
      if (m) { mi = mu * mi + d; mi = ld(St<T>::from(mi)); d = hp.nesterov ? d + mu * mi : mi; }
      pi = pi - lr * d;
    }
  };
  // 4 at a time through 16-byte vectors when every pointer allows it (uniform across the block)
  const bool vec = sizeof(T) == 4 && ((uintptr_t)p | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v) % 16 == 0;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = r.len / 4;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
      Vec4<T> P = ((Vec4<T> *)p)[j], G = ((const Vec4<T> *)g)[j], M{}, V{};
      if (m) M = ((Vec4<T> *)m)[j];
      if (v) V = ((Vec4<T> *)v)[j];
      for (int e = 0; e < 4; e++) {
        C pi = ld(P.x[e]), mi = ld(M.x[e]), vi = ld(V.x[e]);
        one(pi, ld(G.x[e]), mi, vi);
        P.x[e] = St<T>::from(pi); M.x[e] = St<T>::from(mi); V.x[e] = St<T>::from(vi);
        if (r.stype) store_shadow(r.s, r.stype, r.start + 4 * j + e, pi);
      }
      ((Vec4<T> *)p)[j] = P;
      if (m) ((Vec4<T> *)m)[j] = M;
      if (v) ((Vec4<T> *)v)[j] = V;
    }
    done = nv * 4;
  }
  for (int64_t i = done + threadIdx.x; i < r.len; i += blockDim.x) {
    C pi = ld(p[i]), mi = m ? ld(m[i]) : C(0), vi = v ? ld(v[i]) : C(0);
    one(pi, ld(g[i]), mi, vi);
    p[i] = St<T>::from(pi);
    if (m) m[i] = St<T>::from(mi);
    if (v) v[i] = St<T>::from(vi);
    if (r.stype) store_shadow(r.s, r.stype, r.start + i, pi);
  }
}

// ---- the device table cache ---------------------------------------------------------------
struct Table {
  std::vector<ChunkRow> rows;   // host copy: the key
  void *dev = nullptr;          // rows on the device
  DevStep *step = nullptr;      // adamw's device step
  double mirror = -1;           // the host's idea of *step (-1: unknown, the device memory is fresh)
  uint64_t used = 0;
};
constexpr int kTables = 8;      // optimizers (or parameter groups) alive at once
Table tables[kTables];
uint64_t use_clock;

void drop_table(Table &t) {
  if (t.dev) dev_free(t.dev);
  if (t.step) dev_free(t.step);
  t = Table();
}

// the cached table equal to rows, or a new one (uploaded once); nullptr + error
Table *table_for(const std::vector<ChunkRow> &rows, const char *name) {
  Table *lru = &tables[0];
  for (Table &t : tables) {
    if (t.dev && t.rows.size() == rows.size() && !memcmp(t.rows.data(), rows.data(), rows.size() * sizeof(ChunkRow))) {
      t.used = ++use_clock;
      return &t;
    }
    if (!t.dev) { lru = &t; break; }
    if (t.used < lru->used) lru = &t;
  }
  drop_table(*lru);              // stream-ordered free: a queued kernel still reading it finishes first
  Table &t = *lru;
  size_t bytes = rows.size() * sizeof(ChunkRow);
  t.dev = dev_alloc(bytes);
  t.step = (DevStep *)dev_alloc(sizeof(DevStep));
  if (!t.dev || !t.step) { drop_table(t); return nullptr; }
  t.rows = rows;
  t.used = ++use_clock;
  // pageable source: the runtime stages it before returning
  if (cudaMemcpyAsync(t.dev, rows.data(), bytes, cudaMemcpyHostToDevice, stream) != cudaSuccess) {
    cudaGetLastError();
    drop_table(t);
    host->error_set("%s: uploading the chunk table failed", name);
    return nullptr;
  }
  return &t;
}

bool usable(const nt_Tensor *t, const nt_Tensor *p) {
  return t && t->device == NT_CUDA && (t->flags & NT_T_CONTIG) && t->dtype == p->dtype && t->numel == p->numel;
}

template <bool kAdam>
int launch_all(nt_DType dt, const Table &tb, const std::vector<const void *> &grads, const Hyper &hp, const char *name) {
  // rows are in parameter order, so each launch covers the rows of kGradsPerLaunch consecutive parameters
  size_t row = 0;
  const size_t nrows = tb.rows.size();
  while (row < nrows) {
    GradList gl;
    gl.k0 = tb.rows[row].k;
    size_t end = row;
    while (end < nrows && tb.rows[end].k - gl.k0 < kGradsPerLaunch) end++;
    for (int i = 0; i < kGradsPerLaunch; i++) gl.g[i] = gl.k0 + i < (int)grads.size() ? grads[gl.k0 + i] : nullptr;
    unsigned nblk = (unsigned)(end - row);
    const ChunkRow *rows = (const ChunkRow *)tb.dev;
    switch (dt) {
      case NT_F32: optim_kernel<float, kAdam><<<nblk, kThreads, 0, stream>>>(rows, (int64_t)row, gl, tb.step, hp); break;
      case NT_F64: optim_kernel<double, kAdam><<<nblk, kThreads, 0, stream>>>(rows, (int64_t)row, gl, tb.step, hp); break;
      case NT_BF16: optim_kernel<__nv_bfloat16, kAdam><<<nblk, kThreads, 0, stream>>>(rows, (int64_t)row, gl, tb.step, hp); break;
      case NT_F16: optim_kernel<__half, kAdam><<<nblk, kThreads, 0, stream>>>(rows, (int64_t)row, gl, tb.step, hp); break;
      default: host->error_set("%s: dtype %s is not supported", name, nt_dtype_name(dt)); return -1;
    }
    LAUNCHED(name);
    row = end;
  }
  return 0;
}

int k_optim(const nt_KernelArgs *a, bool adam) {
  const char *name = adam ? "adamw_update" : "sgd_update";
  if (!a->extra) { host->error_set("%s: missing arguments", name); return -1; }
  nt_Tensor **shadow;
  const nt_OptimArgs *o = nt_optim_kargs(a, &shadow);
  bool need_m = adam || o->beta1 != 0;
  std::vector<ChunkRow> rows;
  std::vector<const void *> grads((size_t)(o->n > 0 ? o->n : 0), nullptr);
  nt_DType dt = NT_F32;
  for (int k = 0; k < o->n; k++) {
    nt_Tensor *p = o->params[k], *g = o->grads ? o->grads[k] : nullptr;
    if (!g) continue;                                // no gradient: left alone
    if (rows.empty()) dt = p->dtype;
    if (p->device != NT_CUDA || !(p->flags & NT_T_CONTIG) || p->dtype != dt ||
        (dt != NT_F32 && dt != NT_F64 && dt != NT_BF16 && dt != NT_F16)) {
      host->error_set("%s: parameter %d must be a contiguous f32/f64/bf16/f16 cuda tensor (all of one dtype)", name, k);
      return -1;
    }
    nt_Tensor *m = o->exp_avg ? o->exp_avg[k] : nullptr, *v = adam && o->exp_avg_sq ? o->exp_avg_sq[k] : nullptr;
    nt_Tensor *s = shadow ? shadow[k] : nullptr;
    if (!usable(g, p) || (need_m && !usable(m, p)) || (adam && !usable(v, p)) ||
        (s && (s->device != NT_CUDA || !(s->flags & NT_T_CONTIG) || s->numel != p->numel || (s->dtype != NT_BF16 && s->dtype != NT_F16)))) {
      host->error_set("%s: gradient/state/shadow tensors of parameter %d must be contiguous cuda tensors of the parameter's size (and dtype)", name, k);
      return -1;
    }
    grads[k] = base(g);
    int32_t st = !s ? kNoShadow : s->dtype == NT_BF16 ? kShadowBf16 : kShadowF16;
    for (int64_t c = 0; c < p->numel; c += kChunk)
      rows.push_back({ base(p), need_m ? base(m) : nullptr, adam ? base(v) : nullptr, s ? base(s) : nullptr, c,
                       p->numel - c < kChunk ? p->numel - c : kChunk, k, st });
  }
  if (rows.empty()) return 0;
  if (rows.size() > 0x7fffffff) { host->error_set("%s: too many parameters", name); return -1; }
  Table *tb = table_for(rows, name);
  if (!tb) return -1;
  Hyper hp = { o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->beta1, o->nesterov };
  if (adam) {
    const nt_Tensor *L = o->lr_dev;
    if (L && (L->device != NT_CUDA || L->dtype != NT_F64 || (L->numel != 2 && L->numel != NT_OPTIM_DEV_SKIP) || !(L->flags & NT_T_CONTIG))) {
      host->error_set("%s: the device scalars {lr, step} (or {lr, step, found_inf, skipped}) must be a two- or four-element f64 cuda tensor", name);
      return -1;
    }
    // a graph would freeze a host step and lr (every replay the captured
    // values, or a count the host never sees): only the device scalars replay
    if (!L && capture_gate("AdamW with its step count and learning rate as host numbers (optim.adamw keeps them "
                           "as device scalars a compiled step can replay)")) return -1;
    // the device counts the steps; the host's value is used only when its mirror disagrees
    double reseed = tb->mirror >= 0 && tb->mirror + 1 == o->step ? 0 : o->step;
    adamw_prologue<<<1, 32, 0, stream>>>(tb->step, reseed, o->beta1, o->beta2, L ? (double *)base(L) : nullptr,
                                         L ? (int)L->numel : 0, o->lr);
    LAUNCHED(name);
    tb->mirror = L ? -1 : o->step;         // with device scalars the host's count is not known here
    return launch_all<true>(dt, *tb, grads, hp, name);
  }
  return launch_all<false>(dt, *tb, grads, hp, name);
}

int k_adamw(const nt_KernelArgs *a) { return k_optim(a, true); }
int k_sgd(const nt_KernelArgs *a) { return k_optim(a, false); }

// ---- dynamic loss scaling (toptim.h; the CPU reference in tensor/toptim.c) -----------------
// amp_unscale: torch's _amp_foreach_non_finite_check_and_unscale_.  A one-
// thread kernel clears found_inf, then one multi-tensor launch per
// kUnscalePerLaunch gradients: the gradient list (pointer, size, dtype) is a
// launch argument (the gradients are new tensors each step: nothing to
// cache, nothing copied from the host), blockIdx.y picks the gradient and
// the x blocks stride over its elements.  Each element: g = g * (C)(1/scale)
// stored, and a stored inf/nan sets found_inf (every writer writes 1: the
// race is benign).  amp_update_scale: torch's _amp_update_scale_, one thread.
constexpr int kUnscalePerLaunch = 96;    // 96 * 24 bytes: under the 4 KiB launch-argument limit
constexpr unsigned kUnscaleBlocks = 64;  // x blocks per gradient at most

struct UnscaleList {
  void *g[kUnscalePerLaunch];
  int64_t n[kUnscalePerLaunch];
  int32_t dt[kUnscalePerLaunch];
  int count;
};

__global__ void amp_clear_found(double *st) {
  if (threadIdx.x || blockIdx.x) return;
  st[2] = 0;
}

template <typename T>
__device__ inline void unscale_one(void *base_, int64_t n, double scale, double *st) {
  typedef CompT<T> C;
  T *g = (T *)base_;
  const C inv = (C)(1.0 / scale);
  bool bad = false;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    g[i] = St<T>::from(ld(g[i]) * inv);
    C y = ld(g[i]);
    bad |= y - y != (C)0;              // inf - inf and nan - nan are nan
  }
  if (bad) st[2] = 1;
}

__global__ void amp_unscale_kernel(UnscaleList l, double *st) {
  const int k = blockIdx.y;
  if (k >= l.count) return;
  const double scale = st[0];
  switch (l.dt[k]) {
    case NT_F32: unscale_one<float>(l.g[k], l.n[k], scale, st); break;
    case NT_F64: unscale_one<double>(l.g[k], l.n[k], scale, st); break;
    case NT_BF16: unscale_one<__nv_bfloat16>(l.g[k], l.n[k], scale, st); break;
    case NT_F16: unscale_one<__half>(l.g[k], l.n[k], scale, st); break;
    default: break;
  }
}

__global__ void amp_update_kernel(double *st, double growth, double backoff, double interval) {
  if (threadIdx.x || blockIdx.x) return;
  if (st[2] != 0) { st[0] *= backoff; st[1] = 0; return; }
  st[1] += 1;
  if (st[1] >= interval) {
    double grown = st[0] * growth;       // the scale is an f32 in torch: never grows to inf
    if (grown <= 3.4028234663852886e38) st[0] = grown;
    st[1] = 0;
  }
}

int k_amp_unscale(const nt_KernelArgs *a) {
  const nt_AmpArgs *p = (const nt_AmpArgs *)a->extra;
  double *st = (double *)base(p->state);
  amp_clear_found<<<1, 32, 0, stream>>>(st);
  LAUNCHED("amp_unscale");
  UnscaleList l;
  l.count = 0;
  int64_t most = 0;
  for (int k = 0; k <= p->n; k++) {
    const nt_Tensor *g = k < p->n ? p->grads[k] : nullptr;
    if (g && g->numel > 0) {
      l.g[l.count] = base(g); l.n[l.count] = g->numel; l.dt[l.count] = (int32_t)g->dtype;
      l.count++;
      if (g->numel > most) most = g->numel;
    }
    if (l.count == kUnscalePerLaunch || (k == p->n && l.count > 0)) {
      unsigned bx = grid_for(most);
      dim3 grid(bx < kUnscaleBlocks ? bx : kUnscaleBlocks, (unsigned)l.count);
      amp_unscale_kernel<<<grid, kThreads, 0, stream>>>(l, st);
      LAUNCHED("amp_unscale");
      l.count = 0;
      most = 0;
    }
  }
  return 0;
}

int k_amp_update(const nt_KernelArgs *a) {
  const nt_AmpArgs *p = (const nt_AmpArgs *)a->extra;
  amp_update_kernel<<<1, 32, 0, stream>>>((double *)base(p->state), p->growth, p->backoff, p->interval);
  LAUNCHED("amp_update_scale");
  return 0;
}

}  // namespace

void optim_forget_steps(void) {
  for (Table &t : tables) t.mirror = -1;
}

void register_optim(void) {
  host->register_kernel(host->op_register("adamw_update"), NT_CUDA, k_adamw);
  host->register_kernel(host->op_register("sgd_update"), NT_CUDA, k_sgd);
  host->register_kernel(host->op_register("amp_unscale"), NT_CUDA, k_amp_unscale);
  host->register_kernel(host->op_register("amp_update_scale"), NT_CUDA, k_amp_update);
}

}  // namespace ncu
