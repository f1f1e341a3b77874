// optim.cu — fused multi-tensor optimizer updates: ONE kernel launch updates
// every parameter of a model (op ids "adamw_update" and "sgd_update"; the
// argument block nt_OptimArgs is documented in tensor/tdevice.h).
//
// multi_tensor_apply, as in apex/PyTorch: the host cuts every parameter into
// chunks of kChunk elements and uploads a table {p, g, m, v, start, len} (one
// row per chunk); block b of the kernel updates chunk b.  Per element:
//   adamw: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//          p = p decay - step_size m / (sqrt(v) rbc2 + eps)
//          decay = 1 - lr wd, step_size = lr / (1 - b1^t), rbc2 = 1 / sqrt(1 - b2^t)
//          (the same hoisted f32 formula as lang's CPU adamw_update)
//   sgd:   d = g + wd p; momentum: buf = mom buf + d, d = nesterov ? d + mom buf : buf;  p -= lr d
#include "common.cuh"
#include <vector>

namespace ncu {
namespace {

constexpr int64_t kChunk = 65536;

struct ChunkRow {
  void *p, *g, *m, *v;
  int64_t start, len;
};

struct AdamParams { double b1, b2, decay, step_size, rbc2, eps; };
struct SgdParams { double lr, mom, wd; int nesterov; };

template <typename T>
__global__ void adamw_kernel(const ChunkRow *rows, AdamParams hp) {
  ChunkRow r = rows[blockIdx.x];
  T *p = (T *)r.p + r.start, *m = (T *)r.m + r.start, *v = (T *)r.v + r.start;
  const T *g = (const T *)r.g + r.start;
  const T b1 = (T)hp.b1, b2 = (T)hp.b2, decay = (T)hp.decay, ss = (T)hp.step_size, rb = (T)hp.rbc2, eps = (T)hp.eps;
  for (int64_t i = threadIdx.x; i < r.len; i += blockDim.x) {
    T gi = g[i];
    T mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
    m[i] = mi; v[i] = vi;
    p[i] = p[i] * decay - ss * mi / (sqrt(vi) * rb + eps);
  }
}

template <typename T>
__global__ void sgd_kernel(const ChunkRow *rows, SgdParams hp) {
  ChunkRow r = rows[blockIdx.x];
  T *p = (T *)r.p + r.start, *m = r.m ? (T *)r.m + r.start : nullptr;
  const T *g = (const T *)r.g + r.start;
  for (int64_t i = threadIdx.x; i < r.len; i += blockDim.x) {
    double d = (double)g[i] + hp.wd * (double)p[i];
    if (hp.mom != 0) {
      m[i] = (T)(hp.mom * (double)m[i] + d);
      d = hp.nesterov ? d + hp.mom * (double)m[i] : (double)m[i];
    }
    p[i] = (T)((double)p[i] - hp.lr * d);
  }
}

bool usable(const nt_Tensor *t, const nt_Tensor *p) {
  return t && t->device == NT_CUDA && (t->flags & NT_T_CONTIG) && t->dtype == p->dtype && t->numel == p->numel;
}

int k_optim(const nt_KernelArgs *a, bool adam) {
  const char *name = adam ? "adamw_update" : "sgd_update";
  const nt_OptimArgs *o = (const nt_OptimArgs *)a->extra;
  if (!o) { host->error_set("%s: missing arguments", name); return -1; }
  bool need_m = adam || o->beta1 != 0;
  std::vector<ChunkRow> rows;
  nt_DType dt = NT_F32;
  for (int k = 0; k < o->n; k++) {
    nt_Tensor *p = o->params[k], *g = o->grads ? o->grads[k] : nullptr;
    if (!g) continue;                                // no gradient: left alone
    if (rows.empty()) dt = p->dtype;
    if (p->device != NT_CUDA || !(p->flags & NT_T_CONTIG) || (p->dtype != NT_F32 && p->dtype != NT_F64) || p->dtype != dt) {
      host->error_set("%s: parameter %d must be a contiguous f32/f64 cuda tensor (all of one dtype)", name, k);
      return -1;
    }
    nt_Tensor *m = o->exp_avg ? o->exp_avg[k] : nullptr, *v = adam && o->exp_avg_sq ? o->exp_avg_sq[k] : nullptr;
    if (!usable(g, p) || (need_m && !usable(m, p)) || (adam && !usable(v, p))) {
      host->error_set("%s: gradient/state tensors of parameter %d must be contiguous cuda tensors of the parameter's dtype and size", name, k);
      return -1;
    }
    for (int64_t s = 0; s < p->numel; s += kChunk)
      rows.push_back({ base(p), base(g), need_m ? base(m) : nullptr, adam ? base(v) : nullptr, s,
                       p->numel - s < kChunk ? p->numel - s : kChunk });
  }
  if (rows.empty()) return 0;
  if (rows.size() > 0x7fffffff) { host->error_set("%s: too many parameters", name); return -1; }
  Scratch table(rows.size() * sizeof(ChunkRow));
  if (!table.p) return -1;
  // pageable source: the runtime stages it before returning, so `rows` may die after this call
  CU(cudaMemcpyAsync(table.p, rows.data(), rows.size() * sizeof(ChunkRow), cudaMemcpyHostToDevice, stream));
  unsigned nblk = (unsigned)rows.size();
  if (adam) {
    double bc1 = 1 - pow(o->beta1, o->step), bc2 = 1 - pow(o->beta2, o->step);
    AdamParams hp = { o->beta1, o->beta2, 1 - o->lr * o->weight_decay, o->lr / bc1, 1 / sqrt(bc2), o->eps };
    if (dt == NT_F32) adamw_kernel<float><<<nblk, kThreads, 0, stream>>>((const ChunkRow *)table.p, hp);
    else adamw_kernel<double><<<nblk, kThreads, 0, stream>>>((const ChunkRow *)table.p, hp);
  } else {
    SgdParams hp = { o->lr, o->beta1, o->weight_decay, o->nesterov };
    if (dt == NT_F32) sgd_kernel<float><<<nblk, kThreads, 0, stream>>>((const ChunkRow *)table.p, hp);
    else sgd_kernel<double><<<nblk, kThreads, 0, stream>>>((const ChunkRow *)table.p, hp);
  }
  LAUNCHED(name);
  return 0;
}

int k_adamw(const nt_KernelArgs *a) { return k_optim(a, true); }
int k_sgd(const nt_KernelArgs *a) { return k_optim(a, false); }

}  // namespace

void register_optim(void) {
  host->register_kernel(host->op_register("adamw_update"), NT_CUDA, k_adamw);
  host->register_kernel(host->op_register("sgd_update"), NT_CUDA, k_sgd);
}

}  // namespace ncu
