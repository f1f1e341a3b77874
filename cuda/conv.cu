// conv.cu — conv2d (im2col + cuBLAS GEMM) and max/avg pooling on the GPU, NCHW.
// Same op names and nt_KernelArgs layouts as the CPU kernels in
// tensor/nn/conv.c (read that file's comments for the contract).
//
// conv2d with K = C*kh*kw, L = Ho*Wo, a chunk of nb images at a time (dilation dh, dw):
//   col  [K, nb*L]:  col[(c*kh + i)*kw + j, n*L + oh*Wo + ow] = x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]  (0 outside)
//   yp   [O, nb*L] = W [O, K] @ col                         (ONE GEMM per chunk; with G groups one
//                    strided-batched GEMM: group gi's rows of W, col and yp are contiguous blocks)
//   y[n, o, l] = yp[o, n*L + l] + bias[o]                   (permute + bias kernel)
// backward, gp [O, nb*L] = g permuted the same way:
//   dW  = sum over chunks of gp @ col^T                     (beta = 1 after the first chunk)
//   dcol [K, nb*L] = W^T @ gp, then dx = col2im(dcol) as a GATHER: one thread per
//         input element sums the column entries that read it, in the CPU's
//         (i, j) order — deterministic, no atomics;
//   db[o] = sum over n, l of g[n, o, l]                     (one block per o).
// Chunks keep col + yp/gp under 256 MB; cuBLAS runs on ncu::stream.
//
// Pooling works per (n, c) plane (cgeom.N = number of planes): one thread per
// output element forward; backward is a gather over the windows that contain
// each input element (deterministic, same summation order as the CPU scatter):
//   max: dx[p, h, w] = sum of gy[p, oh, ow] over windows whose argmax == h*W + w
//   avg: dx[p, h, w] = sum of gy[p, oh, ow] / (kh*kw)  (padding counts, like the CPU)
// Max pool: the first NaN in a window wins (NaN propagates); argmax is the
// index inside the H*W plane.
#include "common.cuh"
#include <cub/block/block_reduce.cuh>
#include <stdlib.h>

namespace ncu {
namespace {

// MUST match `cgeom` / `conv_bwd_args` in tensor/nn/conv.c (passed through nt_KernelArgs.extra).
struct CGeom { int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, Ho, Wo, dh, dw, G; };   // dh, dw, G: 0 means 1
__host__ __device__ inline int64_t one_if0(int64_t v) { return v > 0 ? v : 1; }
struct ConvBwdArgs { CGeom g; nt_Tensor *d[3]; };

struct ConvOps { int conv2d, conv2d_bwd, max_pool2d, max_pool2d_bwd, avg_pool2d, avg_pool2d_bwd; };
ConvOps ids;

// Column-buffer budget per chunk; NABLA_CUDA_CONV_CHUNK_BYTES overrides it
// (the tests use a tiny value to exercise multi-chunk accumulation).
size_t chunk_bytes(void) {
  const char *e = getenv("NABLA_CUDA_CONV_CHUNK_BYTES");
  long long v = e && *e ? atoll(e) : 0;
  return v > 0 ? (size_t)v : (size_t)256 << 20;
}

#define GRID_LOOP(e, total) for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (total); e += (int64_t)gridDim.x * blockDim.x)

// ---- conv2d -----------------------------------------------------------------------------------
// x points at image n0; col [K, nb*L]
template <typename T>
__global__ void im2col_kernel(const T *x, T *col, CGeom g, int64_t nb) {
  int64_t L = g.Ho * g.Wo, NL = nb * L, total = g.C * g.kh * g.kw * NL;
  GRID_LOOP(e, total) {
    int64_t k = e / NL, r = e - k * NL, n = r / L, l = r - n * L;
    int64_t j = k % g.kw, i = (k / g.kw) % g.kh, c = k / (g.kw * g.kh);
    int64_t oh = l / g.Wo, ow = l - oh * g.Wo;
    int64_t h = oh * g.sh - g.ph + i * one_if0(g.dh), w = ow * g.sw - g.pw + j * one_if0(g.dw);
    col[e] = (h >= 0 && h < g.H && w >= 0 && w < g.W) ? x[((n * g.C + c) * g.H + h) * g.W + w] : (T)0;
  }
}
// dx (image n0 on) [nb, C, H, W] = col2im(dcol [K, nb*L]), every element written
template <typename T>
__global__ void col2im_kernel(const T *dcol, T *dx, CGeom g, int64_t nb) {
  int64_t L = g.Ho * g.Wo, NL = nb * L, total = nb * g.C * g.H * g.W;
  GRID_LOOP(e, total) {
    int64_t w = e % g.W, h = (e / g.W) % g.H, c = (e / (g.W * g.H)) % g.C, n = e / (g.W * g.H * g.C);
    T acc = 0;
    for (int64_t i = 0; i < g.kh; i++) {
      int64_t t = h + g.ph - i * one_if0(g.dh);  // = oh * sh
      if (t < 0 || t % g.sh) continue;
      int64_t oh = t / g.sh;
      if (oh >= g.Ho) continue;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t u = w + g.pw - j * one_if0(g.dw);  // = ow * sw
        if (u < 0 || u % g.sw) continue;
        int64_t ow = u / g.sw;
        if (ow >= g.Wo) continue;
        acc += dcol[((c * g.kh + i) * g.kw + j) * NL + n * L + oh * g.Wo + ow];
      }
    }
    dx[e] = acc;
  }
}
// y [nb, O, L] = yp [O, nb*L] permuted, + bias
template <typename T>
__global__ void unpermute_bias(const T *yp, const T *bias, T *y, int64_t nb, int64_t O, int64_t L) {
  int64_t total = nb * O * L;
  GRID_LOOP(e, total) {
    int64_t l = e % L, o = (e / L) % O, n = e / (L * O);
    y[e] = yp[o * nb * L + n * L + l] + (bias ? bias[o] : (T)0);
  }
}
// gp [O, nb*L] = g [nb, O, L] permuted
template <typename T>
__global__ void permute_grad(const T *gy, T *gp, int64_t nb, int64_t O, int64_t L) {
  int64_t NL = nb * L, total = O * NL;
  GRID_LOOP(e, total) {
    int64_t o = e / NL, r = e - o * NL, n = r / L, l = r - n * L;
    gp[e] = gy[(n * O + o) * L + l];
  }
}
// db[o] = sum_{n, l} g[n, o, l]; one block per o (fixed tree order: deterministic)
template <typename T>
__global__ void bias_grad(const T *gy, T *db, int64_t N, int64_t O, int64_t L) {
  typedef cub::BlockReduce<T, kThreads> Reduce;
  __shared__ typename Reduce::TempStorage tmp;
  for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
    T acc = 0;
    for (int64_t e = threadIdx.x; e < N * L; e += blockDim.x) {
      int64_t n = e / L, l = e - n * L;
      acc += gy[(n * O + o) * L + l];
    }
    T s = Reduce(tmp).Sum(acc);
    if (threadIdx.x == 0) db[o] = s;
    __syncthreads();                            // tmp is reused by the next o
  }
}

// images per chunk so that `per_image` elements each stay under chunk_bytes() (at least 1)
int64_t chunk_images(int64_t N, int64_t per_image, size_t es, int64_t L) {
  int64_t c = per_image > 0 ? (int64_t)(chunk_bytes() / ((size_t)per_image * es)) : N;
  if (c > INT32_MAX / L) c = INT32_MAX / L;     // nb*L is a cuBLAS dimension
  if (c > N) c = N;
  return c < 1 ? 1 : c;
}

#define PTR(T, t) ((t) ? (T *)base(t) : (T *)nullptr)

template <typename T>
int conv_forward(const nt_KernelArgs *a, nt_DType dt) {
  const CGeom g = *(const CGeom *)a->extra;
  int64_t K = g.C * g.kh * g.kw, L = g.Ho * g.Wo, CHW = g.C * g.H * g.W, G = one_if0(g.G), Kg = K / G, Og = g.O / G;
  if (g.N == 0 || g.O == 0 || L == 0) return 0;
  int64_t chunk = chunk_images(g.N, (K + g.O) * L, sizeof(T), L);
  Scratch buf((size_t)chunk * (size_t)(K + g.O) * (size_t)L * sizeof(T));
  if (!buf.p) return -1;
  T *col = (T *)buf.p, *yp = col + K * chunk * L;
  const T *x = PTR(const T, a->in[0]), *w = PTR(const T, a->in[1]), *bias = PTR(const T, a->in[2]);
  T *y = PTR(T, a->out);
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    int64_t nb = g.N - n0 < chunk ? g.N - n0 : chunk, NL = nb * L;
    if (K > 0) {
      im2col_kernel<T><<<grid_for(K * NL), kThreads, 0, stream>>>(x + n0 * CHW, col, g, nb);
      LAUNCHED("conv2d");
    }
    // per group gi (a strided batch): yp[gi*Og.., NL] = W[gi*Og.., Kg] @ col[gi*Kg.., NL]
    if (gemm_rowmajor(dt, false, false, Og, NL, Kg, w, Kg, Og * Kg, col, NL, Kg * NL, 0.0, yp, NL, Og * NL, G, "conv2d")) return -1;
    unpermute_bias<T><<<grid_for(g.O * NL), kThreads, 0, stream>>>(yp, bias, y + n0 * g.O * L, nb, g.O, L);
    LAUNCHED("conv2d");
  }
  return 0;
}

template <typename T>
int conv_backward(const nt_KernelArgs *a, nt_DType dt) {
  const ConvBwdArgs *b = (const ConvBwdArgs *)a->extra;
  const CGeom g = b->g;
  int64_t K = g.C * g.kh * g.kw, L = g.Ho * g.Wo, CHW = g.C * g.H * g.W, G = one_if0(g.G), Kg = K / G, Og = g.O / G;
  const T *gy = PTR(const T, a->in[0]), *x = PTR(const T, a->in[1]), *w = PTR(const T, a->in[2]);
  T *dx = PTR(T, b->d[0]), *dw = PTR(T, b->d[1]), *db = PTR(T, b->d[2]);
  if (db && g.O > 0) {
    unsigned blocks = (unsigned)(g.O < 65535 * 16 ? g.O : 65535 * 16);
    bias_grad<T><<<blocks, kThreads, 0, stream>>>(gy, db, g.N, g.O, L);
    LAUNCHED("conv2d_backward");
  }
  if ((!dx && !dw) || L == 0) return 0;
  if (g.N == 0) {                               // nothing to accumulate: dW = 0 (dx is empty)
    if (dw) CU(cudaMemsetAsync(dw, 0, (size_t)(g.O * Kg) * sizeof(T), stream));
    return 0;
  }
  int64_t chunk = chunk_images(g.N, (K + g.O) * L, sizeof(T), L);
  Scratch buf((size_t)chunk * (size_t)(K + g.O) * (size_t)L * sizeof(T));
  if (!buf.p) return -1;
  T *col = (T *)buf.p, *gp = col + K * chunk * L;
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    int64_t nb = g.N - n0 < chunk ? g.N - n0 : chunk, NL = nb * L;
    if (g.O > 0) {
      permute_grad<T><<<grid_for(g.O * NL), kThreads, 0, stream>>>(gy + n0 * g.O * L, gp, nb, g.O, L);
      LAUNCHED("conv2d_backward");
    }
    if (dw && K > 0) {
      im2col_kernel<T><<<grid_for(K * NL), kThreads, 0, stream>>>(x + n0 * CHW, col, g, nb);
      LAUNCHED("conv2d_backward");
      // per group: dW[gi] [Og, Kg] (+)= gp[gi] [Og, NL] @ col[gi]^T   (col[gi] is [Kg, NL])
      if (gemm_rowmajor(dt, false, true, Og, Kg, NL, gp, NL, Og * NL, col, NL, Kg * NL, n0 ? 1.0 : 0.0, dw, Kg, Og * Kg, G, "conv2d_backward")) return -1;
    }
    if (dx && CHW > 0) {
      // per group: dcol[gi] [Kg, NL] = W[gi]^T @ gp[gi]   (W[gi] is [Og, Kg]); overwrites col after the dW GEMM (same stream)
      if (gemm_rowmajor(dt, true, false, Kg, NL, Og, w, Kg, Og * Kg, gp, NL, Og * NL, 0.0, col, NL, Kg * NL, G, "conv2d_backward")) return -1;
      col2im_kernel<T><<<grid_for(nb * CHW), kThreads, 0, stream>>>(col, dx + n0 * CHW, g, nb);
      LAUNCHED("conv2d_backward");
    }
  }
  return 0;
}

int k_conv2d(const nt_KernelArgs *a) {
  nt_DType dt = a->in[0]->dtype;
  bool bwd = a->op == ids.conv2d_bwd;
  const char *name = bwd ? "conv2d_backward" : "conv2d";
  if (dt == NT_F32) return bwd ? conv_backward<float>(a, dt) : conv_forward<float>(a, dt);
  if (dt == NT_F64) return bwd ? conv_backward<double>(a, dt) : conv_forward<double>(a, dt);
  host->error_set("%s: unsupported dtype %s on cuda (expected f32 or f64)", name, nt_dtype_name(dt));
  return -1;
}

// ---- pooling ----------------------------------------------------------------------------------
template <typename T>
__global__ void maxpool_fwd(const T *x, T *y, int64_t *am, CGeom g) {
  int64_t total = g.N * g.Ho * g.Wo;
  GRID_LOOP(e, total) {
    int64_t ow = e % g.Wo, oh = (e / g.Wo) % g.Ho, p = e / (g.Wo * g.Ho);
    const T *xp = x + p * g.H * g.W;
    T best = -INFINITY;
    int64_t bi = -1;
    bool nan = false;
    for (int64_t i = 0; i < g.kh && !nan; i++) {
      int64_t h = oh * g.sh - g.ph + i;
      if (h < 0 || h >= g.H) continue;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t w = ow * g.sw - g.pw + j;
        if (w < 0 || w >= g.W) continue;
        T v = xp[h * g.W + w];
        if (bi < 0 || v > best || v != v) {
          best = v; bi = h * g.W + w;
          if (v != v) { nan = true; break; }   // the first NaN wins, like the CPU
        }
      }
    }
    y[e] = best;
    am[e] = bi;
  }
}
// output rows/cols whose window contains input coordinate h: [lo, hi] (empty when lo > hi)
__device__ inline void windows_of(int64_t h, int64_t k, int64_t s, int64_t p, int64_t n_out, int64_t *lo, int64_t *hi) {
  int64_t a = h + p - k + 1;                    // oh*s >= a
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  int64_t b = (h + p) / s;                      // oh*s <= h + p  (h + p >= 0)
  *hi = b < n_out - 1 ? b : n_out - 1;
}
template <typename T>
__global__ void maxpool_bwd(const T *gy, const int64_t *am, T *dx, CGeom g) {
  int64_t total = g.N * g.H * g.W;
  GRID_LOOP(e, total) {
    int64_t w = e % g.W, h = (e / g.W) % g.H, p = e / (g.W * g.H), me = h * g.W + w;
    int64_t oh0, oh1, ow0, ow1;
    windows_of(h, g.kh, g.sh, g.ph, g.Ho, &oh0, &oh1);
    windows_of(w, g.kw, g.sw, g.pw, g.Wo, &ow0, &ow1);
    const int64_t *ap = am + p * g.Ho * g.Wo;
    const T *gp = gy + p * g.Ho * g.Wo;
    T acc = 0;
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++)
        if (ap[oh * g.Wo + ow] == me) acc += gp[oh * g.Wo + ow];
    dx[e] = acc;
  }
}
template <typename T>
__global__ void avgpool_fwd(const T *x, T *y, CGeom g) {
  int64_t total = g.N * g.Ho * g.Wo;
  T inv = (T)1 / (T)(g.kh * g.kw);
  GRID_LOOP(e, total) {
    int64_t ow = e % g.Wo, oh = (e / g.Wo) % g.Ho, p = e / (g.Wo * g.Ho);
    const T *xp = x + p * g.H * g.W;
    T acc = 0;
    for (int64_t i = 0; i < g.kh; i++) {
      int64_t h = oh * g.sh - g.ph + i;
      if (h < 0 || h >= g.H) continue;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t w = ow * g.sw - g.pw + j;
        if (w >= 0 && w < g.W) acc += xp[h * g.W + w];
      }
    }
    y[e] = acc * inv;
  }
}
template <typename T>
__global__ void avgpool_bwd(const T *gy, T *dx, CGeom g) {
  int64_t total = g.N * g.H * g.W;
  T inv = (T)1 / (T)(g.kh * g.kw);
  GRID_LOOP(e, total) {
    int64_t w = e % g.W, h = (e / g.W) % g.H, p = e / (g.W * g.H);
    int64_t oh0, oh1, ow0, ow1;
    windows_of(h, g.kh, g.sh, g.ph, g.Ho, &oh0, &oh1);
    windows_of(w, g.kw, g.sw, g.pw, g.Wo, &ow0, &ow1);
    const T *gp = gy + p * g.Ho * g.Wo;
    T acc = 0;
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++) acc += gp[oh * g.Wo + ow] * inv;
    dx[e] = acc;
  }
}

// max fwd: out y; in = {x, argmax i64 (written)}.  max bwd: out dx; in = {g, argmax}.
// avg fwd: out y; in = {x}.  avg bwd: out dx; in = {g}.  extra = CGeom (N = planes).
template <typename T>
int pool(const nt_KernelArgs *a) {
  const CGeom g = *(const CGeom *)a->extra;
  int op = a->op;
  int64_t nout = g.N * g.Ho * g.Wo, nin = g.N * g.H * g.W;
  if (op == ids.max_pool2d) {
    if (!nout) return 0;
    maxpool_fwd<T><<<grid_for(nout), kThreads, 0, stream>>>(PTR(const T, a->in[0]), PTR(T, a->out), PTR(int64_t, a->in[1]), g);
    LAUNCHED("max_pool2d");
  } else if (op == ids.max_pool2d_bwd) {
    if (!nin) return 0;
    maxpool_bwd<T><<<grid_for(nin), kThreads, 0, stream>>>(PTR(const T, a->in[0]), PTR(const int64_t, a->in[1]), PTR(T, a->out), g);
    LAUNCHED("max_pool2d_backward");
  } else if (op == ids.avg_pool2d) {
    if (!nout) return 0;
    avgpool_fwd<T><<<grid_for(nout), kThreads, 0, stream>>>(PTR(const T, a->in[0]), PTR(T, a->out), g);
    LAUNCHED("avg_pool2d");
  } else {
    if (!nin) return 0;
    avgpool_bwd<T><<<grid_for(nin), kThreads, 0, stream>>>(PTR(const T, a->in[0]), PTR(T, a->out), g);
    LAUNCHED("avg_pool2d_backward");
  }
  return 0;
}

int k_pool(const nt_KernelArgs *a) {
  nt_DType dt = a->out->dtype;
  if (dt == NT_F32) return pool<float>(a);
  if (dt == NT_F64) return pool<double>(a);
  host->error_set("%s: unsupported dtype %s on cuda (expected f32 or f64)", host->op_name(a->op), nt_dtype_name(dt));
  return -1;
}

}  // namespace

void register_conv(void) {
  ids.conv2d = host->op_register("conv2d");
  ids.conv2d_bwd = host->op_register("conv2d_backward");
  ids.max_pool2d = host->op_register("max_pool2d");
  ids.max_pool2d_bwd = host->op_register("max_pool2d_backward");
  ids.avg_pool2d = host->op_register("avg_pool2d");
  ids.avg_pool2d_bwd = host->op_register("avg_pool2d_backward");
  host->register_kernel(ids.conv2d, NT_CUDA, k_conv2d);
  host->register_kernel(ids.conv2d_bwd, NT_CUDA, k_conv2d);
  host->register_kernel(ids.max_pool2d, NT_CUDA, k_pool);
  host->register_kernel(ids.max_pool2d_bwd, NT_CUDA, k_pool);
  host->register_kernel(ids.avg_pool2d, NT_CUDA, k_pool);
  host->register_kernel(ids.avg_pool2d_bwd, NT_CUDA, k_pool);
}

}  // namespace ncu
