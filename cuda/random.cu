// random.cu — Philox4x32-10 random numbers on the GPU, one thread per element:
// the mapping itself is tensor/tphilox.h, the same source the CPU backend
// compiles, so the numbers are element for element identical (see there for
// how bit-exactness is kept: no FMA contraction of the double arithmetic).
#include "common.cuh"
#include "tensor/tphilox.h"
#include <type_traits>

namespace ncu {
namespace {

// rounding as nt_store_from_double
template <typename S> __device__ inline S from_double(double v) {
  if constexpr (std::is_same<S, uint8_t>::value) return (uint8_t)(int64_t)v;
  else return St<S>::from(v);
}

template <typename S>
__global__ void random_kernel(int64_t n, S *out, int kind, uint64_t seed, uint64_t offset, double s0, double s1) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = from_double<S>(nt_rand_value(kind, seed, offset, i, s0, s1));
}

int k_random(const nt_KernelArgs *a) {
  nt_Tensor *o = a->out;
  int64_t n = o->numel;
  if (n == 0) return 0;
  int kind = (int)a->iarg[0];
  uint64_t seed = (uint64_t)a->iarg[1], off = (uint64_t)a->iarg[2];
  auto run = [&]<typename S>() -> int {
    random_kernel<S><<<grid_for(n), kThreads, 0, stream>>>(n, (S *)base(o), kind, seed, off, a->s[0], a->s[1]);
    LAUNCHED("random");
    return 0;
  };
  NCU_DISPATCH_ALL(o->dtype, run);
  host->error_set("random: unsupported dtype on cuda");
  return -1;
}

}  // namespace

void register_random(void) { host->register_kernel(NT_OP_RANDOM, NT_CUDA, k_random); }

}  // namespace ncu
