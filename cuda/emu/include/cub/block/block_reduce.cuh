// cub/block/block_reduce.cuh for the emulated device (cuda/emu/UNEMULATED.md):
// CUB's own implementation is warp-synchronous PTX, so the emulator supplies
// this reference version of the same contract (the block's result is valid in
// thread 0; TempStorage may be reused after a __syncthreads).  It is plain
// CUDA — shared memory and barriers — so the race detector checks its use.
#pragma once
namespace cub {
template <typename T, int BLOCK_DIM_X, int ALGORITHM = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockReduce {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
 public:
  struct TempStorage { T part[kThreads]; };
  __device__ explicit BlockReduce(TempStorage &s) : s_(s) {}
  template <typename Op> __device__ T Reduce(T v, Op op) { return Reduce(v, op, kThreads); }
  template <typename Op> __device__ T Reduce(T v, Op op, int num_valid) {
    const int t = linear_tid();
    if (t < num_valid) s_.part[t] = v;
    __syncthreads();
    T r = v;
    if (t == 0)
      for (int i = 1; i < num_valid; i++) r = op(r, s_.part[i]);
    return r;
  }
  __device__ T Sum(T v) { return Reduce(v, [](T a, T b) { return a + b; }); }
  __device__ T Sum(T v, int num_valid) { return Reduce(v, [](T a, T b) { return a + b; }, num_valid); }
 private:
  __device__ static int linear_tid() { return (int)(threadIdx.x + BLOCK_DIM_X * (threadIdx.y + BLOCK_DIM_Y * threadIdx.z)); }
  TempStorage &s_;
};
}  // namespace cub
