// layers.cu — GPU kernels of issue 29's layers (tensor/nn/activation.c: the
// same op names, the same nt_KernelArgs layouts, the same math).
//
// activation / activation_backward: one thread per element over contiguous
// data (grid-stride), the math of tensor/nn/actmath.h computed in double for
// f32 and f64 alike, as the CPU kernel does:
//   y = f_kind(x; p0, p1, p2)          dx = g * f'_kind(x; p0, p1, p2)
// adaptive_max_pool2d (tensor/nn/adaptivemax.c): one thread per output of x
// [P, H, W] scans its window [floor(o H / Ho), ceil((o+1) H / Ho)) x (the
// same for W), writing the max (the first NaN wins, as torch's) and its flat
// position h*W + w; the backward is composed on the core's side.
// The losses and resampling ops (tensor/nn/loss.c, resample.c) are
// compositions of the core's ops and need nothing here.
#include "common.cuh"
#include "tensor/nn/actmath.h"

namespace ncu {
namespace {

struct LayerOps { int act, act_bwd, amp; };
LayerOps ids;

struct ActParams { double p[3]; };

template <typename T>
__global__ void act_fwd(int64_t n, int kind, ActParams p, const T *x, T *y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = (T)nt_act_forward(kind, (double)x[i], p.p);
}
template <typename T>
__global__ void act_bwd(int64_t n, int kind, ActParams p, const T *g, const T *x, T *dx) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dx[i] = (T)((double)g[i] * nt_act_grad(kind, (double)x[i], p.p));
}

int k_activation(const nt_KernelArgs *a) {
  int64_t n = a->out->numel;
  if (n == 0) return 0;
  int kind = (int)a->iarg[0];
  ActParams p = {{a->s[0], a->s[1], a->s[2]}};
  auto run = [&]<typename T>() -> int {
    if (a->op == ids.act) {
      act_fwd<T><<<grid_for(n), kThreads, 0, stream>>>(n, kind, p, (const T *)base(a->in[0]), (T *)base(a->out));
      LAUNCHED("activation");
    } else {
      act_bwd<T><<<grid_for(n), kThreads, 0, stream>>>(n, kind, p, (const T *)base(a->in[0]), (const T *)base(a->in[1]), (T *)base(a->out));
      LAUNCHED("activation_backward");
    }
    return 0;
  };
  return a->out->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
}

template <typename T>
__global__ void amp_fwd(int64_t P, int64_t H, int64_t W, int64_t Ho, int64_t Wo, const T *x, T *y, int64_t *ix) {
  int64_t n = P * Ho * Wo;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t ow = i % Wo, oh = (i / Wo) % Ho, p = i / (Wo * Ho);
    int64_t h0 = oh * H / Ho, h1 = ((oh + 1) * H + Ho - 1) / Ho, w0 = ow * W / Wo, w1 = ((ow + 1) * W + Wo - 1) / Wo;
    const T *xp = x + p * H * W;
    int64_t best = h0 * W + w0;
    T m = xp[best];
    for (int64_t h = h0; h < h1; h++)
      for (int64_t w = w0; w < w1; w++) {
        T v = xp[h * W + w];
        if (m == m && (v > m || v != v)) { m = v; best = h * W + w; }
      }
    y[i] = m;
    ix[i] = best;
  }
}

int k_adaptive_max_pool2d(const nt_KernelArgs *a) {
  int64_t P = a->iarg[0], H = a->iarg[1], W = a->iarg[2], Ho = a->iarg[3], Wo = a->iarg[4], n = P * Ho * Wo;
  if (n == 0) return 0;
  auto run = [&]<typename T>() -> int {
    amp_fwd<T><<<grid_for(n), kThreads, 0, stream>>>(P, H, W, Ho, Wo, (const T *)base(a->in[0]), (T *)base(a->out), (int64_t *)base(a->in[1]));
    LAUNCHED("adaptive_max_pool2d");
    return 0;
  };
  return a->out->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
}

}  // namespace

void register_layers(void) {
  ids.act = host->op_register("activation");
  ids.act_bwd = host->op_register("activation_backward");
  host->register_kernel(ids.act, NT_CUDA, k_activation);
  host->register_kernel(ids.act_bwd, NT_CUDA, k_activation);
  ids.amp = host->op_register("adaptive_max_pool2d");
  host->register_kernel(ids.amp, NT_CUDA, k_adaptive_max_pool2d);
}

}  // namespace ncu
