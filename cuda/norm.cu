// norm.cu — GPU kernels of batch, group and instance normalisation
// (tensor/nn/batchnorm.c, groupnorm.c: the same op names, the same
// nt_KernelArgs layouts, the same math; instance norm is group norm with one
// channel per group).
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
//
// group norm: G groups of K = C/G channels; group (n, g) is row r = n*G + g,
// its D = K*S values contiguous at x[r*D + j], channel c = g*K + j/S.  One
// block per row: mean, var (f64, two passes), y; backward dx per row
// (dxhat = g*w[c]: dx = rstd*(dxhat - sum(dxhat)/D - xhat*sum(dxhat*xhat)/D)),
// then one block per channel sums dw[c] = sum g*xhat, db[c] = sum g over
// (n, s).  stats [N*G, 3] = {mean, rstd, var} per row.
#include "common.cuh"

namespace ncu {
namespace {

struct NormOps { int bn, bn_bwd, gn, gn_bwd; };
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

template <typename T>
__global__ void gn_fwd(int64_t R, int64_t K, int64_t S, int64_t G, const T *x, const T *w, const T *b, T *y, T *st, double eps) {
  int64_t D = K * S;
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T *xr = x + r * D;
    T *yr = y + r * D;
    double s1 = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s1 += (double)xr[j];
    double m = D ? block_sum_f64(s1) / (double)D : 0.0;
    double s2 = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) { double d = (double)xr[j] - m; s2 += d * d; }
    double v = D ? block_sum_f64(s2) / (double)D : 0.0, rs = 1.0 / sqrt(v + eps);
    int64_t c0 = (r % G) * K;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      int64_t c = c0 + j / S;
      double sc = rs * (w ? (double)w[c] : 1.0);
      yr[j] = (T)(((double)xr[j] - m) * sc + (b ? (double)b[c] : 0.0));
    }
    if (threadIdx.x == 0) { st[3 * r] = (T)m; st[3 * r + 1] = (T)rs; st[3 * r + 2] = (T)v; }
  }
}
template <typename T>
__global__ void gn_bwd_dx(int64_t R, int64_t K, int64_t S, int64_t G, const T *g, const T *x, const T *st, const T *w, T *dx) {
  int64_t D = K * S;
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T *xr = x + r * D, *gr = g + r * D;
    double m = (double)st[3 * r], rs = (double)st[3 * r + 1], a1 = 0, a2 = 0;
    int64_t c0 = (r % G) * K;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      double dh = (double)gr[j] * (w ? (double)w[c0 + j / S] : 1.0);
      a1 += dh; a2 += dh * ((double)xr[j] - m) * rs;
    }
    double m1 = block_sum_f64(a1) / (double)D, m2 = block_sum_f64(a2) / (double)D;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      double dh = (double)gr[j] * (w ? (double)w[c0 + j / S] : 1.0), h = ((double)xr[j] - m) * rs;
      dx[r * D + j] = (T)(rs * (dh - m1 - h * m2));
    }
  }
}
template <typename T>
__global__ void gn_bwd_dwdb(int64_t N, int64_t C, int64_t S, int64_t G, const T *g, const T *x, const T *st, T *dw, T *db) {
  int64_t K = C / G, M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double aw = 0, ab = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      int64_t n = i / S, r = n * G + c / K, at = (n * C + c) * S + i % S;
      double gv = (double)g[at];
      aw += gv * ((double)x[at] - (double)st[3 * r]) * (double)st[3 * r + 1];
      ab += gv;
    }
    aw = block_sum_f64(aw);
    ab = block_sum_f64(ab);
    if (threadIdx.x == 0) {
      if (dw) dw[c] = (T)aw;
      if (db) db[c] = (T)ab;
    }
  }
}

#define PTR(T, t) ((t) ? (T *)base(t) : (T *)nullptr)

int k_group_norm(const nt_KernelArgs *a) {
  int64_t N = a->iarg[0], C = a->iarg[1], S = a->iarg[2], G = a->iarg[3], R = N * G, K = C / G;
  if (a->op == ids.gn) {
    if (R == 0) return 0;
    unsigned blocks = (unsigned)(R < 65535 ? R : 65535);
    auto run = [&]<typename T>() -> int {
      gn_fwd<T><<<blocks, kThreads, 0, stream>>>(R, K, S, G, PTR(const T, a->in[0]), PTR(const T, a->in[1]), PTR(const T, a->in[2]),
                                                 PTR(T, a->out), PTR(T, a->in[3]), a->s[0]);
      LAUNCHED("group_norm");
      return 0;
    };
    return a->in[0]->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
  }
  nt_Tensor **wb = (nt_Tensor **)a->extra;
  auto run = [&]<typename T>() -> int {
    const T *g = PTR(const T, a->in[0]), *x = PTR(const T, a->in[1]), *st = PTR(const T, a->in[2]), *w = PTR(const T, a->in[3]);
    if (a->out && R) {
      gn_bwd_dx<T><<<(unsigned)(R < 65535 ? R : 65535), kThreads, 0, stream>>>(R, K, S, G, g, x, st, w, PTR(T, a->out));
      LAUNCHED("group_norm_backward");
    }
    if ((wb[0] || wb[1]) && C) {
      gn_bwd_dwdb<T><<<(unsigned)(C < 65535 ? C : 65535), kThreads, 0, stream>>>(N, C, S, G, g, x, st, PTR(T, wb[0]), PTR(T, wb[1]));
      LAUNCHED("group_norm_backward");
    }
    return 0;
  };
  return a->in[1]->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
}

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
  ids.gn = host->op_register("group_norm");
  ids.gn_bwd = host->op_register("group_norm_backward");
  host->register_kernel(ids.gn, NT_CUDA, k_group_norm);
  host->register_kernel(ids.gn_bwd, NT_CUDA, k_group_norm);
}

}  // namespace ncu
