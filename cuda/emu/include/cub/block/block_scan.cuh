// cub/block/block_scan.cuh for the emulated device (cuda/emu/UNEMULATED.md):
// a reference version of the CUB contract the module uses (InclusiveSum /
// ExclusiveSum, with or without the block aggregate, InclusiveScan with an op; TempStorage reusable after
// a __syncthreads), in plain CUDA so the race detector checks its use.
// Thread 0 forms the prefix sums in order (O(n), two barriers): emulated
// threads are cheap to run but expensive to switch.
#pragma once
namespace cub {
template <typename T, int BLOCK_DIM_X, int ALGORITHM = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockScan {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
 public:
  struct TempStorage { T in[kThreads], incl[kThreads], excl[kThreads], total; };
  __device__ explicit BlockScan(TempStorage &s) : s_(s) {}
  __device__ void InclusiveSum(T in, T &out, T &aggregate) { scan(in, out, aggregate, true); }
  __device__ void InclusiveSum(T in, T &out) { T a; scan(in, out, a, true); }
  __device__ void ExclusiveSum(T in, T &out, T &aggregate) { scan(in, out, aggregate, false); }
  __device__ void ExclusiveSum(T in, T &out) { T a; scan(in, out, a, false); }
  // any associative op (op(earlier, later), not necessarily commutative): cuda/scan.cu
  template <typename Op> __device__ void InclusiveScan(T in, T &out, Op op, T &aggregate) {
    const int t = (int)(threadIdx.x + BLOCK_DIM_X * (threadIdx.y + BLOCK_DIM_Y * threadIdx.z));
    s_.in[t] = in;
    __syncthreads();
    if (t == 0) {
      T acc = s_.in[0];
      s_.incl[0] = acc;
      for (int i = 1; i < kThreads; i++) { acc = op(acc, s_.in[i]); s_.incl[i] = acc; }
      s_.total = acc;
    }
    __syncthreads();
    out = s_.incl[t];
    aggregate = s_.total;
  }
 private:
  __device__ void scan(T in, T &out, T &aggregate, bool inclusive) {
    const int t = (int)(threadIdx.x + BLOCK_DIM_X * (threadIdx.y + BLOCK_DIM_Y * threadIdx.z));
    s_.in[t] = in;
    __syncthreads();
    if (t == 0) {
      T acc = T(0);
      for (int i = 0; i < kThreads; i++) { s_.excl[i] = acc; acc = acc + s_.in[i]; s_.incl[i] = acc; }
      s_.total = acc;
    }
    __syncthreads();
    out = inclusive ? s_.incl[t] : s_.excl[t];
    aggregate = s_.total;
  }
  TempStorage &s_;
};
}  // namespace cub
