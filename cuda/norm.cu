// norm.cu — GPU kernels of batch normalisation (tensor/nn/batchnorm.c: the
// same op names, the same nt_KernelArgs layouts, the same math).
//
// x is a contiguous [N, C, S] (S = the product of the spatial axes); channel
// c's M = N*S values are x[(n*C + c)*S + s].  One block per channel strides
// over them (i -> n = i / S, s = i % S), sums in f64 (warp shuffles, then one
// shared-memory step), so f32 statistics carry no accumulation drift:
//   training: mean = sum(x)/M, var = sum((x-mean)^2)/M (two passes), rstd = 1/sqrt(var+eps)
//   eval:     mean, var read from stats (the running statistics), rstd written
//   y = x * (rstd*w) + (b - mean*rstd*w)
// backward (sums over the channel in f64):
//   dw = rstd * sum(g*(x-mean)), db = sum(g)
//   training: dx = wr*g + k1*x + k0 with wr = rstd*w, k1 = -wr*rstd^2*sum(g*(x-mean))/M,
//             k0 = -wr*sum(g)/M - k1*mean;  eval: dx = wr*g
// stats [3, C] = {mean, rstd, var}.
#include "common.cuh"

namespace ncu {
namespace {

struct NormOps { int bn, bn_bwd; };
NormOps ids;

// block-wide f64 sum of v, in every thread; every thread of the block calls it
__device__ inline double block_sum_f64(double v) {
  __shared__ double part[32];
  v = warp_sum(v);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) part[w] = v;
  __syncthreads();
  return warp_sum(lane < nw ? part[lane] : 0.0);
}

template <typename T>
__global__ void bn_fwd(int64_t N, int64_t C, int64_t S, const T *x, const T *w, const T *b, T *y, T *st, int training, double eps) {
  int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double m, v;
    if (training) {
      double s1 = 0;
      for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s1 += (double)x[((i / S) * C + c) * S + i % S];
      m = block_sum_f64(s1) / (double)M;
      double s2 = 0;
      for (int64_t i = threadIdx.x; i < M; i += blockDim.x) { double d = (double)x[((i / S) * C + c) * S + i % S] - m; s2 += d * d; }
      v = block_sum_f64(s2) / (double)M;
    } else { m = (double)st[c]; v = (double)st[2 * C + c]; }
    double r = 1.0 / sqrt(v + eps);
    double sc = r * (w ? (double)w[c] : 1.0), sh = (b ? (double)b[c] : 0.0) - m * sc;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      int64_t at = ((i / S) * C + c) * S + i % S;
      y[at] = (T)((double)x[at] * sc + sh);
    }
    if (threadIdx.x == 0) {
      st[C + c] = (T)r;
      if (training) { st[c] = (T)m; st[2 * C + c] = (T)v; }
    }
  }
}

template <typename T>
__global__ void bn_bwd(int64_t N, int64_t C, int64_t S, const T *g, const T *x, const T *st, const T *w, T *dx, T *dw, T *db, int training) {
  int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double m = (double)st[c], r = (double)st[C + c], sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      int64_t at = ((i / S) * C + c) * S + i % S;
      double gv = (double)g[at];
      sg += gv; sgx += gv * ((double)x[at] - m);
    }
    sg = block_sum_f64(sg);
    sgx = block_sum_f64(sgx);
    if (threadIdx.x == 0) {
      if (dw) dw[c] = (T)(sgx * r);
      if (db) db[c] = (T)sg;
    }
    if (!dx) continue;
    double wr = r * (w ? (double)w[c] : 1.0);
    double k1 = training ? -wr * r * r * sgx / (double)M : 0.0;
    double k0 = training ? -wr * sg / (double)M - k1 * m : 0.0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      int64_t at = ((i / S) * C + c) * S + i % S;
      dx[at] = (T)(wr * (double)g[at] + k1 * (double)x[at] + k0);
    }
  }
}

#define PTR(T, t) ((t) ? (T *)base(t) : (T *)nullptr)

int k_batch_norm(const nt_KernelArgs *a) {
  int64_t N = a->iarg[0], C = a->iarg[1], S = a->iarg[2];
  int training = a->iarg[3] != 0;
  if (C == 0) return 0;
  unsigned blocks = (unsigned)(C < 65535 ? C : 65535);
  if (a->op == ids.bn) {
    auto run = [&]<typename T>() -> int {
      bn_fwd<T><<<blocks, kThreads, 0, stream>>>(N, C, S, PTR(const T, a->in[0]), PTR(const T, a->in[1]), PTR(const T, a->in[2]),
                                                 PTR(T, a->out), PTR(T, a->in[3]), training, a->s[0]);
      LAUNCHED("batch_norm");
      return 0;
    };
    return a->in[0]->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
  }
  nt_Tensor **wb = (nt_Tensor **)a->extra;
  auto run = [&]<typename T>() -> int {
    bn_bwd<T><<<blocks, kThreads, 0, stream>>>(N, C, S, PTR(const T, a->in[0]), PTR(const T, a->in[1]), PTR(const T, a->in[2]),
                                               PTR(const T, a->in[3]), PTR(T, a->out), PTR(T, wb[0]), PTR(T, wb[1]), training);
    LAUNCHED("batch_norm_backward");
    return 0;
  };
  return a->in[1]->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
}

}  // namespace

void register_norm(void) {
  ids.bn = host->op_register("batch_norm");
  ids.bn_bwd = host->op_register("batch_norm_backward");
  host->register_kernel(ids.bn, NT_CUDA, k_batch_norm);
  host->register_kernel(ids.bn_bwd, NT_CUDA, k_batch_norm);
}

}  // namespace ncu
