// nn.cu — GPU kernels for the nn ops of tensor/nn (same op names, same
// nt_KernelArgs layouts as the CPU kernels there; see softmax.c, norm.c,
// index.c).  gelu is the unary op (elementwise.cu) and dropout is bernoulli
// + mul (random.cu, elementwise.cu), so they need nothing here.
//
// Block-per-row kernels (softmax rows, cross-entropy rows, layer-norm rows)
// use kThreads threads striding over the row, combining partial results with
// warp shuffles and one shared-memory step (block_sum / block_max).
#include "common.cuh"
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>
#include <vector>

namespace ncu {
namespace {

// Block-wide sum (Max = false) or max (Max = true, NaN-blind like warp_max),
// result in EVERY thread.  All threads must call it.  Each instantiation has
// its own shared scratch, as two separate functions would.
template <bool Max, typename T> __device__ inline T block_reduce(T v) {
  __shared__ T part[32];
  if constexpr (Max) v = warp_max(v); else v = warp_sum(v);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) part[w] = v;
  __syncthreads();
  if constexpr (Max) return warp_max(lane < nw ? part[lane] : (T)-INFINITY);
  else return warp_sum(lane < nw ? part[lane] : (T)0);
}
template <typename T> __device__ inline T block_sum(T v) { return block_reduce<false>(v); }
template <typename T> __device__ inline T block_max(T v) { return block_reduce<true>(v); }

template <typename T> __device__ inline T m_exp(T x) { if constexpr (sizeof(T) == 4) return expf(x); else return exp(x); }
template <typename T> __device__ inline T m_log(T x) { if constexpr (sizeof(T) == 4) return logf(x); else return log(x); }

struct NnOps { int softmax, softmax_bwd, cross_entropy, cross_entropy_bwd, layer_norm, layer_norm_bwd, take, take_bwd, gather, scatter_add; };
NnOps ids;

// ---- softmax / log_softmax -----------------------------------------------------------------
// x viewed as [outer, n, inner]; a row is (o, 0..n-1, j) with stride inner.
//   lse = m + log(sum_i exp(x_i - m)),  m = row max (all -inf: m = 0 → NaN like torch)
//   softmax y_i = exp(x_i - lse)        dx_i = y_i (g_i - sum_k g_k y_k)
//   log_softmax y_i = x_i - lse         dx_i = g_i - exp(y_i) sum_k g_k
// inner == 1: one block per row.  inner > 1: one thread per (o, j) column.
template <typename T>
__global__ void softmax_rows(int64_t rows, int64_t n, const T *x, T *y, int lg) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n;
    T *yr = y + r * n;
    T m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = xr[i] > m ? xr[i] : m;
    m = block_max(m);
    if (m == -INFINITY) m = 0;
    T s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += m_exp(xr[i] - m);
    s = block_sum(s);
    T lse = m + m_log(s);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = lg ? xr[i] - lse : m_exp(xr[i] - lse);
  }
}
template <typename T>
__global__ void softmax_bwd_rows(int64_t rows, int64_t n, const T *g, const T *y, T *dx, int lg) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *gr = g + r * n, *yr = y + r * n;
    T *d = dx + r * n;
    T acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += lg ? gr[i] : gr[i] * yr[i];
    acc = block_sum(acc);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = lg ? gr[i] - m_exp(yr[i]) * acc : yr[i] * (gr[i] - acc);
  }
}
template <typename T>
__global__ void softmax_cols(int64_t outer, int64_t n, int64_t inner, const T *a, const T *b, T *out, int lg, int bwd) {
  int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
    int64_t o = c / inner, j = c % inner, base0 = o * n * inner + j;
    const T *x = a + base0;
    T *yo = out + base0;
    if (!bwd) {
      T m = -INFINITY;
      for (int64_t i = 0; i < n; i++) m = x[i * inner] > m ? x[i * inner] : m;
      if (m == -INFINITY) m = 0;
      T s = 0;
      for (int64_t i = 0; i < n; i++) s += m_exp(x[i * inner] - m);
      T lse = m + m_log(s);
      for (int64_t i = 0; i < n; i++) yo[i * inner] = lg ? x[i * inner] - lse : m_exp(x[i * inner] - lse);
    } else {
      const T *yy = b + base0;
      T acc = 0;
      for (int64_t i = 0; i < n; i++) acc += lg ? x[i * inner] : x[i * inner] * yy[i * inner];
      for (int64_t i = 0; i < n; i++) yo[i * inner] = lg ? x[i * inner] - m_exp(yy[i * inner]) * acc : yy[i * inner] * (x[i * inner] - acc);
    }
  }
}

int k_softmax(const nt_KernelArgs *a) {
  int bwd = a->op == ids.softmax_bwd;
  int64_t outer = a->iarg[0], n = a->iarg[1], inner = a->iarg[2];
  int lg = (int)a->iarg[3];
  int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return 0;
  auto run = [&]<typename T>() -> int {
    const T *x = (const T *)base(a->in[0]), *y = bwd ? (const T *)base(a->in[1]) : nullptr;
    T *o = (T *)base(a->out);
    unsigned blocks = (unsigned)(rows < 65535 * 16 ? rows : 65535 * 16);
    if (inner == 1 && bwd) softmax_bwd_rows<T><<<blocks, kThreads, 0, stream>>>(rows, n, x, y, o, lg);
    else if (inner == 1) softmax_rows<T><<<blocks, kThreads, 0, stream>>>(rows, n, x, o, lg);
    else softmax_cols<T><<<grid_for(rows), kThreads, 0, stream>>>(outer, n, inner, x, y, o, lg, bwd);
    LAUNCHED(bwd ? "softmax_backward" : "softmax");
    return 0;
  };
  if (a->out->dtype == NT_F32) return run.template operator()<float>();
  if (a->out->dtype == NT_F64) return run.template operator()<double>();
  host->error_set("softmax: unsupported dtype %s on cuda", nt_dtype_name(a->out->dtype));
  return -1;
}

// ---- cross entropy ----------------------------------------------------------------------------
// x [N, C] rows, targets t [N] (i64), smoothing e:
//   loss_r = (1-e)(lse_r - x_{r,t}) + e(lse_r - mean_c x_rc);  loss = sum_valid loss_r / count
//   dx_rc  = scale (softmax_rc - (1-e)[c == t_r] - e/C),  scale = g / count
// Forward: one block per row writes lse[r], row_loss[r] (double) and valid[r];
// a one-block kernel sums them (deterministic) into the 0-d output and the
// count, which the front end needs on the host: the forward therefore ends
// with a synchronisation (which also reports a bad target synchronously).
template <typename T>
__global__ void xent_rows(int64_t N, int64_t C, const T *x, const int64_t *t, T *lse, double *row_loss, int *valid,
                          int64_t ignore, double eps, DevError *err, int op) {
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T *xr = x + r * C;
    T m = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = xr[c] > m ? xr[c] : m;
    m = block_max(m);
    if (m == -INFINITY) m = 0;
    double s = 0, xs = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) { s += (double)m_exp(xr[c] - m); xs += (double)xr[c]; }
    s = block_sum(s);
    xs = block_sum(xs);
    if (threadIdx.x == 0) {
      double l = (double)m + log(s);
      lse[r] = (T)l;
      int64_t tr = t[r];
      double loss = 0;
      int ok = 0;
      if (tr != ignore) {
        if (tr < 0 || tr >= C) raise_error(err, DEVERR_TARGET, op, tr, C, r);
        else { loss = (1 - eps) * (l - (double)xr[tr]) + eps * (l - xs / (double)C); ok = 1; }
      }
      row_loss[r] = loss;
      valid[r] = ok;
    }
  }
}
template <typename T>
__global__ void xent_total(int64_t N, const double *row_loss, const int *valid, T *out, long long *count) {
  double s = 0, c = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) { s += row_loss[r]; c += valid[r]; }
  s = block_sum(s);
  c = block_sum(c);
  if (threadIdx.x == 0) { *out = (T)(c > 0 ? s / c : NAN); *count = (long long)c; }
}
template <typename T>
__global__ void xent_bwd(int64_t N, int64_t C, const T *x, const int64_t *t, const T *lse, T *dx, int64_t ignore,
                         T on, T off, T sc) {
  int64_t total = N * C;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = e / C, c = e - r * C, tr = t[r];
    if (tr == ignore) { dx[e] = 0; continue; }
    T d = sc * m_exp(x[e] - lse[r]) - off;
    if (c == tr) d -= on;
    dx[e] = d;
  }
}

int k_cross_entropy(const nt_KernelArgs *a) {
  const nt_Tensor *x = a->in[0];
  int64_t N = x->shape[0], C = x->shape[1], ign = a->iarg[0];
  const int64_t *t = (const int64_t *)base(a->in[1]);
  if (a->op == ids.cross_entropy_bwd) {
    double eps = a->s[0], scale = a->s[1];
    auto run = [&]<typename T>() -> int {
      xent_bwd<T><<<grid_for(N * C), kThreads, 0, stream>>>(N, C, (const T *)base(x), t, (const T *)base(a->in[2]), (T *)base(a->out), ign,
                                                          (T)((1 - eps) * scale), (T)(eps / (double)C * scale), (T)scale);
      LAUNCHED("cross_entropy_backward");
      return 0;
    };
    return x->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
  }
  Scratch rows_buf((size_t)(N ? N : 1) * (sizeof(double) + sizeof(int)) + 16);
  if (!rows_buf.p) return -1;
  double *row_loss = (double *)rows_buf.p;
  int *valid = (int *)(row_loss + (N ? N : 1));
  long long *count_dev = (long long *)((char *)rows_buf.p + (size_t)(N ? N : 1) * (sizeof(double) + sizeof(int)));
  count_dev = (long long *)(((uintptr_t)count_dev + 7) & ~(uintptr_t)7);
  auto run = [&]<typename T>() -> int {
    unsigned blocks = (unsigned)(N < 65535 * 16 ? (N ? N : 1) : 65535 * 16);
    xent_rows<T><<<blocks, kThreads, 0, stream>>>(N, C, (const T *)base(x), t, (T *)base(a->in[2]), row_loss, valid, ign, a->s[0], dev_err, a->op);
    LAUNCHED("cross_entropy");
    xent_total<T><<<1, 1024, 0, stream>>>(N, row_loss, valid, (T *)base(a->out), count_dev);
    LAUNCHED("cross_entropy");
    return 0;
  };
  int rc = x->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
  if (rc) return -1;
  long long cnt = 0;
  CU(cudaMemcpyAsync(&cnt, count_dev, sizeof cnt, cudaMemcpyDeviceToHost, stream));
  if (sync_stream()) return -1;       // reports "cross_entropy: target ... out of bounds"
  *(int64_t *)a->extra = cnt;
  return 0;
}

// ---- layer norm -------------------------------------------------------------------------------
// x [R, D] rows:  mean = sum(x)/D, var = sum((x-mean)^2)/D, rstd = 1/sqrt(var+eps),
//   xhat = (x-mean) rstd, y = xhat w + b;  stats [R, 2] = {mean, rstd}.
// backward (dxhat = g w):  dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
//   dw = sum_rows g xhat, db = sum_rows g: rows split in chunks (grid.y) writing
//   partial column sums, then one pass adds the chunks (deterministic, no atomics).
template <typename T>
__global__ void ln_fwd(int64_t R, int64_t D, const T *x, const T *w, const T *b, T *y, T *st, double eps) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T *xr = x + r * D;
    T *yr = y + r * D;
    T s = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += xr[d];
    T mean = block_sum(s) / (T)D;
    T v = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) { T c = xr[d] - mean; v += c * c; }
    T var = block_sum(v) / (T)D;
    T rs = (T)(1.0 / sqrt((double)var + eps));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      T h = (xr[d] - mean) * rs;
      yr[d] = (w ? h * w[d] : h) + (b ? b[d] : (T)0);
    }
    if (threadIdx.x == 0) { st[2 * r] = mean; st[2 * r + 1] = rs; }
  }
}
template <typename T>
__global__ void ln_bwd_dx(int64_t R, int64_t D, const T *g, const T *x, const T *st, const T *w, T *dx) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T *gr = g + r * D, *xr = x + r * D;
    T m = st[2 * r], rs = st[2 * r + 1], a1 = 0, a2 = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      T dh = w ? gr[d] * w[d] : gr[d];
      a1 += dh; a2 += dh * (xr[d] - m) * rs;
    }
    T m1 = block_sum(a1) / (T)D, m2 = block_sum(a2) / (T)D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      T dh = w ? gr[d] * w[d] : gr[d];
      dx[r * D + d] = rs * (dh - m1 - (xr[d] - m) * rs * m2);
    }
  }
}
// partial[(chunk * 2 + {0: dw, 1: db}) * D + d]
template <typename T>
__global__ void ln_bwd_dwdb_partial(int64_t R, int64_t D, int64_t rows_per_chunk, const T *g, const T *x, const T *st, T *partial) {
  int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (d >= D) return;
  int64_t r0 = (int64_t)blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
  T aw = 0, ab = 0;
  for (int64_t r = r0; r < r1; r++) {
    T gv = g[r * D + d];
    aw += gv * (x[r * D + d] - st[2 * r]) * st[2 * r + 1];
    ab += gv;
  }
  partial[((int64_t)blockIdx.y * 2) * D + d] = aw;
  partial[((int64_t)blockIdx.y * 2 + 1) * D + d] = ab;
}
template <typename T>
__global__ void ln_bwd_dwdb_final(int64_t D, int nchunks, const T *partial, T *dw, T *db) {
  for (int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; d < D; d += (int64_t)gridDim.x * blockDim.x) {
    T aw = 0, ab = 0;
    for (int c = 0; c < nchunks; c++) { aw += partial[(c * 2) * D + d]; ab += partial[(c * 2 + 1) * D + d]; }
    if (dw) dw[d] = aw;
    if (db) db[d] = ab;
  }
}

#define PTR(T, t) ((t) ? (T *)base(t) : (T *)nullptr)

int k_layer_norm(const nt_KernelArgs *a) {
  if (a->op == ids.layer_norm) {
    const nt_Tensor *x = a->in[0];
    int64_t R = x->shape[0], D = x->shape[1];
    if (R == 0 || D == 0) return 0;
    auto run = [&]<typename T>() -> int {
      unsigned blocks = (unsigned)(R < 65535 * 16 ? R : 65535 * 16);
      ln_fwd<T><<<blocks, kThreads, 0, stream>>>(R, D, PTR(const T, a->in[0]), PTR(const T, a->in[1]), PTR(const T, a->in[2]),
                                                 PTR(T, a->out), PTR(T, a->in[3]), a->s[0]);
      LAUNCHED("layer_norm");
      return 0;
    };
    return x->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
  }
  nt_Tensor **wb = (nt_Tensor **)a->extra;
  const nt_Tensor *x = a->in[1];
  int64_t R = x->shape[0], D = x->shape[1];
  auto run = [&]<typename T>() -> int {
    const T *g = PTR(const T, a->in[0]), *xp = PTR(const T, a->in[1]), *st = PTR(const T, a->in[2]), *w = PTR(const T, a->in[3]);
    if (a->out && R && D) {
      unsigned blocks = (unsigned)(R < 65535 * 16 ? R : 65535 * 16);
      ln_bwd_dx<T><<<blocks, kThreads, 0, stream>>>(R, D, g, xp, st, w, PTR(T, a->out));
      LAUNCHED("layer_norm_backward");
    }
    if ((wb[0] || wb[1]) && D) {
      int64_t rows_per_chunk = 64;
      int64_t nchunks = (R + rows_per_chunk - 1) / rows_per_chunk;
      if (nchunks > 1024) { nchunks = 1024; rows_per_chunk = (R + nchunks - 1) / nchunks; }
      if (nchunks < 1) nchunks = 1;
      Scratch part((size_t)nchunks * 2 * D * sizeof(T));
      if (!part.p) return -1;
      dim3 grid((unsigned)((D + kThreads - 1) / kThreads), (unsigned)nchunks);
      ln_bwd_dwdb_partial<T><<<grid, kThreads, 0, stream>>>(R, D, rows_per_chunk, g, xp, st, (T *)part.p);
      LAUNCHED("layer_norm_backward");
      ln_bwd_dwdb_final<T><<<grid_for(D), kThreads, 0, stream>>>(D, (int)nchunks, (const T *)part.p, PTR(T, wb[0]), PTR(T, wb[1]));
      LAUNCHED("layer_norm_backward");
    }
    return 0;
  };
  return x->dtype == NT_F32 ? run.template operator()<float>() : run.template operator()<double>();
}

// ---- take (index_select, embedding, x[idx]) and its backward ----------------------------------
// x [outer, n, inner], idx [m] (negative indices wrap; out of range → error slot):
//   take:     out[q, j, k] = x[q, idx[j], k]
//   backward: dx = 0; dx[q, idx[j], k] += g[q, j, k]   (duplicates add up)
// The backward is DETERMINISTIC and accumulates in f32 (f64 for f64): the
// (index, position) pairs are sorted by index with a stable radix sort, so
// the positions that hit one row form a segment in increasing j; one thread
// per (q, segment, k) sums g over its segment in that fixed order in the
// accumulation type and writes dx once (no atomics, no rounding to f16/bf16
// between additions).  The same inputs give the same bits on every run, and
// a token repeated r times costs one rounding instead of r.
template <typename E>
__global__ void take_kernel(int64_t outer, int64_t n, int64_t m, int64_t inner, const E *x, const int64_t *idx, E *out,
                            DevError *err, int op) {
  int64_t total = outer * m * inner;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t k = e % inner, j = (e / inner) % m, q = e / (inner * m), ix = idx[j];
    if (ix < 0) ix += n;
    if (ix < 0 || ix >= n) { raise_error(err, DEVERR_INDEX, op, idx[j], n, -1); out[e] = E(); continue; }
    out[e] = x[(q * n + ix) * inner + k];
  }
}
// keys[j] = the wrapped row idx[j] hits, n for an out-of-range index (reported;
// its segment is skipped); pos[j] = j.
__global__ void index_keys(int64_t m, int64_t n, const int64_t *idx, unsigned long long *keys, int64_t *pos, DevError *err, int op) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < m; j += (int64_t)gridDim.x * blockDim.x) {
    int64_t ix = idx[j];
    if (ix < 0) ix += n;
    if (ix < 0 || ix >= n) { raise_error(err, DEVERR_INDEX, op, idx[j], n, -1); ix = n; }
    keys[j] = (unsigned long long)ix;
    pos[j] = j;
  }
}
// keys/pos sorted by key (stable: pos increasing within a key).  Thread
// (q, s, k) with s the first position of a segment sums g[q, pos[t], k] over
// the segment in order, in A, and stores dx[q, key, k].
template <typename T, typename A>
__global__ void index_add_sorted(int64_t outer, int64_t n, int64_t m, int64_t inner, const T *g,
                                 const unsigned long long *keys, const int64_t *pos, T *dx) {
  int64_t total = outer * m * inner;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t k = e % inner, s = (e / inner) % m, q = e / (inner * m);
    unsigned long long key = keys[s];
    if (key >= (unsigned long long)n || (s > 0 && keys[s - 1] == key)) continue;
    A acc = 0;
    for (int64_t t = s; t < m && keys[t] == key; t++) acc += (A)ld(g[(q * m + pos[t]) * inner + k]);
    dx[(q * n + (int64_t)key) * inner + k] = St<T>::from(acc);
  }
}

// bits needed for keys in [0, n]
int key_bits(int64_t n) {
  int b = 1;
  while (b < 64 && ((unsigned long long)n >> b) != 0) b++;
  return b;
}

template <typename T, typename A> int take_backward(const nt_KernelArgs *a, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  const int64_t *ix = (const int64_t *)base(a->in[1]);
  Scratch keys(2 * (size_t)m * sizeof(unsigned long long)), pos(2 * (size_t)m * sizeof(int64_t));
  if (!keys.p || !pos.p) return -1;
  unsigned long long *kin = (unsigned long long *)keys.p, *kout = kin + m;
  int64_t *pin = (int64_t *)pos.p, *pout = pin + m;
  index_keys<<<grid_for(m), kThreads, 0, stream>>>(m, n, ix, kin, pin, dev_err, a->op);
  LAUNCHED("take_backward");
  size_t temp_bytes = 0;
  int bits = key_bits(n);
  CU(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, kin, kout, pin, pout, m, 0, bits, stream));
  Scratch temp(temp_bytes);
  if (!temp.p) return -1;
  CU(cub::DeviceRadixSort::SortPairs(temp.p, temp_bytes, kin, kout, pin, pout, m, 0, bits, stream));
  int64_t total = outer * m * inner;
  index_add_sorted<T, A><<<grid_for(total), kThreads, 0, stream>>>(outer, n, m, inner, (const T *)base(a->in[0]), kout, pout,
                                                                   (T *)base(a->out));
  LAUNCHED("take_backward");
  return 0;
}

int k_take(const nt_KernelArgs *a) {
  int64_t outer = a->iarg[0], n = a->iarg[1], m = a->iarg[2], inner = a->iarg[3];
  const int64_t *ix = (const int64_t *)base(a->in[1]);
  int64_t total = outer * m * inner;
  if (a->op == ids.take) {
    if (total == 0) return 0;
    switch (nt_dtype_size(a->out->dtype)) {
#define TAKE(E) take_kernel<E><<<grid_for(total), kThreads, 0, stream>>>(outer, n, m, inner, (const E *)base(a->in[0]), ix, (E *)base(a->out), dev_err, a->op); break;
      case 1: TAKE(uint8_t) case 2: TAKE(uint16_t) case 4: TAKE(uint32_t) default: TAKE(uint64_t)
#undef TAKE
    }
    LAUNCHED("take");
    return 0;
  }
  CU(cudaMemsetAsync(base(a->out), 0, (size_t)a->out->numel * nt_dtype_size(a->out->dtype), stream));
  if (total == 0) return 0;
  if (m > INT32_MAX) { host->error_set("take backward: %lld indices (2^31 and more) are not supported on cuda", (long long)m); return -1; }
  switch (a->out->dtype) {
    case NT_F32: return take_backward<float, float>(a, outer, n, m, inner);
    case NT_F64: return take_backward<double, double>(a, outer, n, m, inner);
    case NT_F16: return take_backward<__half, float>(a, outer, n, m, inner);
    case NT_BF16: return take_backward<__nv_bfloat16, float>(a, outer, n, m, inner);
    default: host->error_set("take backward: unsupported dtype %s on cuda", nt_dtype_name(a->out->dtype)); return -1;
  }
}

// ---- gather / scatter_add -------------------------------------------------------------------------
// MUST match `gs_geom` in tensor/nn/index.c (passed through nt_KernelArgs.extra).
struct GsGeom {
  int ndim, axis;
  int64_t ishape[NT_MAXDIM], xstr[NT_MAXDIM], sstr[NT_MAXDIM];
};
// idx element e (contiguous over ishape) → x offset: sum_{k != axis} c_k xstr_k + idx[e] xstr_axis
__device__ inline int64_t gs_offset(const GsGeom &g, int64_t e, int64_t ix) {
  int64_t off = 0;
  for (int k = g.ndim - 1; k >= 0; k--) {
    int64_t s = g.ishape[k], c = e % s;
    e /= s;
    off += (k == g.axis ? ix : c) * g.xstr[k];
  }
  return off;
}
template <typename E>
__global__ void gather_kernel(int64_t m, GsGeom g, int64_t n, const E *x, const int64_t *idx, E *out, DevError *err, int op) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t ix = idx[e];
    if (ix < 0) ix += n;
    if (ix < 0 || ix >= n) { raise_error(err, DEVERR_INDEX, op, idx[e], n, g.axis); out[e] = E(); continue; }
    out[e] = x[gs_offset(g, e, ix)];
  }
}
template <typename T>
__global__ void scatter_add_kernel(int64_t m, GsGeom g, int64_t n, const T *src, const int64_t *idx, T *out, DevError *err, int op) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t ix = idx[e];
    if (ix < 0) ix += n;
    if (ix < 0 || ix >= n) { raise_error(err, DEVERR_INDEX, op, idx[e], n, g.axis); continue; }
    T v = src[e];
    if constexpr (std::is_same<T, int64_t>::value)
      atomicAdd((unsigned long long *)(out + gs_offset(g, e, ix)), (unsigned long long)v);   // two's complement add
    else
      atomicAdd(out + gs_offset(g, e, ix), v);
  }
}

int k_gather_scatter(const nt_KernelArgs *a) {
  GsGeom g;
  memcpy(&g, a->extra, sizeof g);
  const int64_t *ix = (const int64_t *)base(a->in[1]);
  if (a->op == ids.gather) {
    int64_t m = a->out->numel, n = a->in[0]->shape[g.axis];
    if (m == 0) return 0;
    switch (nt_dtype_size(a->out->dtype)) {
#define GATHER(E) gather_kernel<E><<<grid_for(m), kThreads, 0, stream>>>(m, g, n, (const E *)base(a->in[0]), ix, (E *)base(a->out), dev_err, a->op); break;
      case 1: GATHER(uint8_t) case 2: GATHER(uint16_t) case 4: GATHER(uint32_t) default: GATHER(uint64_t)
#undef GATHER
    }
    LAUNCHED("gather");
    return 0;
  }
  int64_t m = a->in[0]->numel, n = a->out->shape[g.axis];
  if (m == 0) return 0;
  switch (a->out->dtype) {
#define SCAT(T) scatter_add_kernel<T><<<grid_for(m), kThreads, 0, stream>>>(m, g, n, (const T *)base(a->in[0]), ix, (T *)base(a->out), dev_err, a->op); break;
    case NT_F32: SCAT(float)
    case NT_F64: SCAT(double)
    case NT_I32: SCAT(int)
    case NT_I64: SCAT(int64_t)
#undef SCAT
    default: host->error_set("scatter_add: unsupported dtype %s on cuda", nt_dtype_name(a->out->dtype)); return -1;
  }
  LAUNCHED("scatter_add");
  return 0;
}

}  // namespace

void register_nn(void) {
  ids.softmax = host->op_register("softmax");
  ids.softmax_bwd = host->op_register("softmax_backward");
  ids.cross_entropy = host->op_register("cross_entropy");
  ids.cross_entropy_bwd = host->op_register("cross_entropy_backward");
  ids.layer_norm = host->op_register("layer_norm");
  ids.layer_norm_bwd = host->op_register("layer_norm_backward");
  ids.take = host->op_register("take");
  ids.take_bwd = host->op_register("take_backward");
  ids.gather = host->op_register("gather");
  ids.scatter_add = host->op_register("scatter_add");
  host->register_kernel(ids.softmax, NT_CUDA, k_softmax);
  host->register_kernel(ids.softmax_bwd, NT_CUDA, k_softmax);
  host->register_kernel(ids.cross_entropy, NT_CUDA, k_cross_entropy);
  host->register_kernel(ids.cross_entropy_bwd, NT_CUDA, k_cross_entropy);
  host->register_kernel(ids.layer_norm, NT_CUDA, k_layer_norm);
  host->register_kernel(ids.layer_norm_bwd, NT_CUDA, k_layer_norm);
  host->register_kernel(ids.take, NT_CUDA, k_take);
  host->register_kernel(ids.take_bwd, NT_CUDA, k_take);
  host->register_kernel(ids.gather, NT_CUDA, k_gather_scatter);
  host->register_kernel(ids.scatter_add, NT_CUDA, k_gather_scatter);
}

}  // namespace ncu
