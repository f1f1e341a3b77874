// attention_lay.cuh — how the attention kernels see an operand (attention.cu's
// fused kernels and attention_gemm.cu's cuBLAS path share it).
//
// Every operand but L is B = Bo * Bi matrices [rows, cols] with unit column
// stride: matrix b starts at (b / Bi) so + (b % Bi) si and its row r at + r sr.
// The contiguous [B, rows, cols] of the op contract is Bi = B, so = 0,
// si = rows cols, sr = cols; the views of NT_SDPA_VIEWS (tensor/nn/attention.h:
// the heads of a packed [B, T, 3C] qkv permuted to [B, H, T, hd]) are Bi = H,
// so = T 3C, si = hd, sr = 3C.
#pragma once
#include "common.cuh"

namespace ncu {
namespace {

struct Lay {
  int64_t Bi, so, si, sr;
  __host__ __device__ int64_t at(int64_t b, int64_t r) const { return (b / Bi) * so + (b % Bi) * si + r * sr; }
};
// t: contiguous [B, rows, cols] or a view batch + [rows, cols] with 1 or 2 batch dims
// and unit column stride (the front end checks: attention.c view_ok)
inline Lay lay_of(const nt_Tensor *t) {
  const int nd = t->ndim;
  const int64_t rows = t->shape[nd - 2], cols = t->shape[nd - 1];
  const int64_t sr = rows > 1 ? t->strides[nd - 2] : cols;
  if (nd == 4) return Lay{t->shape[1] > 0 ? t->shape[1] : 1, t->strides[0], t->strides[1], sr};
  return Lay{t->shape[0] > 0 ? t->shape[0] : 1, 0, t->strides[0], sr};
}

}  // namespace
}  // namespace ncu
