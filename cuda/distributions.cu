// distributions.cu — the GPU kernel of the reparameterisation gradients of
// tensor/index/gammagrad.c (op "gamma_grad": the same nt_KernelArgs layout,
// the same element math, tensor/index/gammamath.h):
//   iarg[0] = 0: out[i] = dx/dalpha for x ~ Gamma(alpha, 1), in = {alpha, x}
//   iarg[0] = 1: out[i] = torch's _dirichlet_grad(x, alpha, total), in = {x, alpha, total}
//   iarg[0] = 2, 3: out[i] = P(a, x), Q(a, x), the regularised incomplete gammas, in = {a, x}
// One thread per element over contiguous f64 data (grid-stride); the front
// end casts, broadcasts and makes the inputs contiguous.  Each element is a
// short branchy series (no memory traffic beyond its inputs), so the kernel
// is compute-bound and divergence between the approximation regions (and
// igamma's iteration counts, O(sqrt a) to O(x)) is the only cost worth noting.
#include "common.cuh"
#include "tensor/index/gammamath.h"

namespace ncu {
namespace {

int op_gamma_grad = -1;

// r is NULL for the two-input kinds
__global__ void gamma_grad_kernel(int64_t n, int kind, const double *p, const double *q, const double *r, double *out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = nt_gm_eval(kind, p[i], q[i], r ? r[i] : 0.0);
}

int k_gamma_grad(const nt_KernelArgs *a) {
  int64_t n = a->out->numel;
  if (n == 0) return 0;
  double *o = (double *)base(a->out);
  const double *p = (const double *)base(a->in[0]), *q = (const double *)base(a->in[1]);
  const double *r = a->nin > 2 ? (const double *)base(a->in[2]) : nullptr;
  gamma_grad_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, (int)a->iarg[0], p, q, r, o);
  LAUNCHED("gamma_grad");
  return 0;
}

}  // namespace

void register_distributions(void) {
  op_gamma_grad = host->op_register("gamma_grad");
  host->register_kernel(op_gamma_grad, NT_CUDA, k_gamma_grad);
}

}  // namespace ncu
