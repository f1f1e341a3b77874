// random.cu — Philox4x32-10 random numbers, element for element identical to
// tensor/trandom.c (the mapping is specified in tensor/tensor.h).
//
// Element i of a request with state (seed, offset):
//   block = offset + i/4, counter = {lo32(block), hi32(block), 0, 0},
//   key = {lo32(seed), hi32(seed)}, w = philox4x32_10(counter, key)
//   uniform: (w[i%4] >> 8) * 2^-24;  normal: Box-Muller on lanes (2j, 2j+1)
//   computed in DOUBLE then rounded to the dtype exactly like
//   nt_store_from_double.  One thread per element (counter based: no state).
// Bit-exactness with the CPU needs the same double operations: products and
// sums are written with __dmul_rn/__dadd_rn so nvcc cannot fuse them into FMAs
// (the CPU build does not contract).  sqrt is correctly rounded on both sides;
// log/sin/cos are within 1 ulp of glibc in double, which vanishes when rounding
// to f32 except in astronomically rare cases (f64 randn may differ in the last
// bit: tests compare f64 with a 1e-15 relative tolerance).
#include "common.cuh"
#include <type_traits>

namespace ncu {
namespace {

__device__ inline void philox(uint64_t block, uint64_t seed, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; r++) {
    uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

__device__ inline double u24(uint32_t w) { return __dmul_rn((double)(w >> 8), 1.0 / 16777216.0); }

__device__ inline double rand_value(int kind, uint64_t seed, uint64_t offset, int64_t i, double s0, double s1) {
  uint32_t w[4];
  philox(offset + (uint64_t)i / 4, seed, w);
  int lane = (int)(i % 4);
  switch (kind) {
    case NT_RAND_UNIFORM: return u24(w[lane]);
    case NT_RAND_BERNOULLI: return u24(w[lane]) < s0 ? 1.0 : 0.0;
    case NT_RAND_INT: return __dadd_rn(s0, (double)((uint64_t)w[lane] % (uint64_t)(s1 - s0)));
    case NT_RAND_KEYS: return (double)w[lane];
    default: {
      int j = lane / 2;
      double u1 = __dmul_rn(__dadd_rn((double)(w[2 * j] >> 8), 1.0), 1.0 / 16777216.0), u2 = u24(w[2 * j + 1]);
      double r = sqrt(__dmul_rn(-2.0, log(u1))), th = __dmul_rn(__dmul_rn(2.0, M_PI), u2);
      double z = (i & 1) ? __dmul_rn(r, sin(th)) : __dmul_rn(r, cos(th));
      return __dadd_rn(s0, __dmul_rn(s1, z));
    }
  }
}

// rounding as nt_store_from_double
template <typename S> __device__ inline S from_double(double v) {
  if constexpr (std::is_same<S, uint8_t>::value) return (uint8_t)(int64_t)v;
  else return St<S>::from(v);
}

template <typename S>
__global__ void random_kernel(int64_t n, S *out, int kind, uint64_t seed, uint64_t offset, double s0, double s1) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = from_double<S>(rand_value(kind, seed, offset, i, s0, s1));
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
