// layers.cu — GPU kernels of issue 29's layers (tensor/nn/activation.c: the
// same op names, the same nt_KernelArgs layouts, the same math).
//
// activation / activation_backward: one thread per element over contiguous
// data (grid-stride), the math of tensor/nn/actmath.h computed in double for
// f32 and f64 alike, as the CPU kernel does:
//   y = f_kind(x; p0, p1, p2)          dx = g * f'_kind(x; p0, p1, p2)
// The losses (tensor/nn/loss.c) are compositions of the core's ops and need
// nothing here.
#include "common.cuh"
#include "tensor/nn/actmath.h"

namespace ncu {
namespace {

struct LayerOps { int act, act_bwd; };
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

}  // namespace

void register_layers(void) {
  ids.act = host->op_register("activation");
  ids.act_bwd = host->op_register("activation_backward");
  host->register_kernel(ids.act, NT_CUDA, k_activation);
  host->register_kernel(ids.act_bwd, NT_CUDA, k_activation);
}

}  // namespace ncu
