// random.cu — Philox4x32-10 random numbers on the GPU, one thread per element:
// the mapping itself is tensor/tphilox.h, the same source the CPU backend
// compiles, so the numbers are element for element identical (see there for
// how bit-exactness is kept: no FMA contraction of the double arithmetic).
//
// Inside a captured step (compile; cuda/graph.cu) the seed and offset cannot
// be launch arguments -- a replay would repeat them, one dropout mask for
// every step -- so the kernel reads the seed and an offset delta from the
// graph's random slot {seed, delta} (graph.h), written before each replay.
// Outside a capture the slot is NULL and the arguments are used.
#include "common.cuh"
#include "cuda/graph.h"
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
__global__ void random_kernel(int64_t n, S *out, int kind, uint64_t seed, uint64_t offset, const uint64_t *slot, double s0, double s1) {
  if (slot) { seed = slot[0]; offset += slot[1]; }
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = from_double<S>(nt_rand_value(kind, seed, offset, i, s0, s1));
}

int k_random(const nt_KernelArgs *a) {
  nt_Tensor *o = a->out;
  int64_t n = o->numel;
  if (n == 0) return 0;
  int kind = (int)a->iarg[0];
  uint64_t seed = (uint64_t)a->iarg[1], off = (uint64_t)a->iarg[2];
  if (capture_rng_seed(seed)) return -1;           // may end the capture (a second seed): then slot is NULL
  const uint64_t *slot = capture_rng_slot;
  auto run = [&]<typename S>() -> int {
    random_kernel<S><<<grid_for(n), kThreads, 0, stream>>>(n, (S *)base(o), kind, seed, off, slot, a->s[0], a->s[1]);
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
