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

struct NnOps { int softmax, softmax_bwd, cross_entropy, cross_entropy_bwd, layer_norm, layer_norm_bwd, add_layer_norm, add_layer_norm_bwd, take, take_bwd, gather, scatter_add; };
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

// ---- cross entropy: the fused classifier ------------------------------------------------------
// x [N, C] rows in their storage dtype T (f32, f64, f16, bf16: bf16 logits are
// never copied to f32), targets t [N] (i64), smoothing e; A = accumulation
// type (f64 for f64, else f32).  st [N + 1] of A: st[r] = lse_r, st[N] = count.
//   loss_r = (1-e)(lse_r - x_{r,t}) + e(lse_r - mean_c x_rc);  loss = sum_valid loss_r / count
//   dx_rc  = g/count (exp(x_rc - lse_r) - e/C - (1-e)[c == t_r])   (0 on ignored rows)
// Forward: one block per row reads the row ONCE, keeping an online (max, sum
// of exp(x - max)) pair per thread (rescaled when the max grows) and combining
// the pairs across the block; thread 0 writes lse, the row's loss (double)
// and validity; a one-block kernel sums them in a fixed order (deterministic)
// into the 0-d loss and st[N], dividing on the device.  Backward: one block
// per row writes dx in one pass, reading g and st[N] from device memory.  No
// host wait anywhere: a bad target goes to the error slot and is reported at
// the next synchronisation, as every data error (the epoch rules make the
// loss, st and everything else computed in that epoch unusable).
// Rows are read and written with 16-byte vectors when the row is aligned.

// Calls f(c, value as A) for this thread's elements of the row xr[0..C).
template <typename T, typename A, typename F> __device__ inline void row_each(const T *xr, int64_t C, F f) {
  constexpr int V = 16 / sizeof(T);
  if ((reinterpret_cast<uintptr_t>(xr) & 15) == 0 && C % V == 0) {   // the same for every thread of the block
    const uint4 *xv = reinterpret_cast<const uint4 *>(xr);
    for (int64_t i = threadIdx.x; i < C / V; i += blockDim.x) {
      uint4 u = xv[i];
      const T *e = reinterpret_cast<const T *>(&u);
      for (int k = 0; k < V; k++) f(i * V + k, (A)ld(e[k]));
    }
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) f(c, (A)ld(xr[c]));
  }
}
// Writes dr[c] = f(c, xr[c] as A) for this thread's elements (same split as row_each).
template <typename T, typename A, typename F> __device__ inline void row_map(const T *xr, T *dr, int64_t C, F f) {
  constexpr int V = 16 / sizeof(T);
  if ((reinterpret_cast<uintptr_t>(xr) & 15) == 0 && (reinterpret_cast<uintptr_t>(dr) & 15) == 0 && C % V == 0) {
    const uint4 *xv = reinterpret_cast<const uint4 *>(xr);
    uint4 *dv = reinterpret_cast<uint4 *>(dr);
    for (int64_t i = threadIdx.x; i < C / V; i += blockDim.x) {
      uint4 u = xv[i], o;
      const T *e = reinterpret_cast<const T *>(&u);
      T *w = reinterpret_cast<T *>(&o);
      for (int k = 0; k < V; k++) w[k] = St<T>::from(f(i * V + k, (A)ld(e[k])));
      dv[i] = o;
    }
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dr[c] = St<T>::from(f(c, (A)ld(xr[c])));
  }
}

// online softmax statistics: m = max so far, s = sum exp(x - m).  m stays
// -inf only while every value seen is -inf (s = 0); a NaN makes s NaN.
template <typename A> __device__ inline void ms_add(A &m, A &s, A v) {
  if (v > m) { s = s * a_exp(m - v) + 1; m = v; }   // m = -inf: s is 0, exp(-inf) = 0
  else if (v != -INFINITY) s += a_exp(v - m);
}
template <typename A> __device__ inline void ms_merge(A &m, A &s, A m2, A s2) {
  A mx = m2 > m ? m2 : m;
  // a side whose max is -inf has s = 0 (or NaN, which the product keeps)
  A f1 = m == -INFINITY ? (A)0 : a_exp(m - mx), f2 = m2 == -INFINITY ? (A)0 : a_exp(m2 - mx);
  s = s * f1 + s2 * f2;
  m = mx;
}
// Block-wide merge of (m, s); the result in every thread.  All threads call it.
template <typename A> __device__ inline void block_ms(A &m, A &s) {
  __shared__ A pm[32];   // one declaration per line (cuda/emu/transform.py)
  __shared__ A ps[32];
  for (int d = 16; d > 0; d >>= 1) {
    A m2 = __shfl_xor_sync(0xffffffffu, m, d), s2 = __shfl_xor_sync(0xffffffffu, s, d);
    ms_merge(m, s, m2, s2);
  }
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) { pm[w] = m; ps[w] = s; }
  __syncthreads();
  m = lane < nw ? pm[lane] : (A)-INFINITY;
  s = lane < nw ? ps[lane] : (A)0;
  for (int d = 16; d > 0; d >>= 1) {
    A m2 = __shfl_xor_sync(0xffffffffu, m, d), s2 = __shfl_xor_sync(0xffffffffu, s, d);
    ms_merge(m, s, m2, s2);
  }
}

template <typename T, typename A>
__global__ void xent_rows(int64_t N, int64_t C, const T *x, const int64_t *t, A *st, double *row_loss, int *valid,
                          int64_t ignore, double eps, DevError *err, int op) {
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T *xr = x + r * C;
    A m = -INFINITY, s = 0, xs = 0;
    if (eps != 0) row_each<T, A>(xr, C, [&](int64_t, A v) { ms_add(m, s, v); xs += v; });
    else row_each<T, A>(xr, C, [&](int64_t, A v) { ms_add(m, s, v); });
    block_ms(m, s);
    if (eps != 0) xs = block_sum(xs);
    if (threadIdx.x == 0) {
      double l = (double)m + log((double)s);   // all -inf: -inf + -inf; the loss is then nan, as torch's
      st[r] = (A)l;
      int64_t tr = t[r];
      double loss = 0;
      int ok = 0;
      if (tr != ignore) {
        if (tr < 0 || tr >= C) raise_error(err, DEVERR_TARGET, op, tr, C, r);
        else { loss = (1 - eps) * (l - (double)ld(xr[tr])) + (eps != 0 ? eps * (l - (double)xs / (double)C) : 0); ok = 1; }
      }
      row_loss[r] = loss;
      valid[r] = ok;
    }
  }
}
// loss = sum / count (nan when no row counts), st[N] = count
template <typename A>
__global__ void xent_total(int64_t N, const double *row_loss, const int *valid, A *out, A *st) {
  double s = 0, c = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) { s += row_loss[r]; c += valid[r]; }
  s = block_sum(s);
  c = block_sum(c);
  if (threadIdx.x == 0) { *out = (A)(c > 0 ? s / c : NAN); st[N] = (A)c; }
}
template <typename T, typename A>
__global__ void xent_bwd_rows(int64_t N, int64_t C, const T *x, const int64_t *t, const A *st, const A *g, T *dx,
                              int64_t ignore, double eps) {
  A cnt = st[N], sc = cnt > 0 ? *g / cnt : (A)NAN;
  A off = (A)(eps / (double)C), on = (A)(1 - eps);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    int64_t tr = t[r];
    const T *xr = x + r * C;
    T *dr = dx + r * C;
    if (tr == ignore) { row_map<T, A>(xr, dr, C, [&](int64_t, A) { return (A)0; }); continue; }
    A lse = st[r];
    row_map<T, A>(xr, dr, C, [&](int64_t c, A v) { return sc * (a_exp(v - lse) - off - (c == tr ? on : (A)0)); });
  }
}

int k_cross_entropy(const nt_KernelArgs *a) {
  const nt_Tensor *x = a->in[0];
  int64_t N = x->shape[0], C = x->shape[1], ign = a->iarg[0];
  const int64_t *t = (const int64_t *)base(a->in[1]);
  double eps = a->s[0];
  unsigned blocks = (unsigned)(N < 65535 * 16 ? (N ? N : 1) : 65535 * 16);
  if (a->op == ids.cross_entropy_bwd) {
    auto run = [&]<typename T>() -> int {
      using A = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
      xent_bwd_rows<T, A><<<blocks, kThreads, 0, stream>>>(N, C, (const T *)base(x), t, (const A *)base(a->in[2]),
                                                          (const A *)base(a->in[3]), (T *)base(a->out), ign, eps);
      LAUNCHED("cross_entropy_backward");
      return 0;
    };
    switch (x->dtype) {
      case NT_F32: return run.template operator()<float>();
      case NT_F64: return run.template operator()<double>();
      case NT_F16: return run.template operator()<__half>();
      case NT_BF16: return run.template operator()<__nv_bfloat16>();
      default: break;
    }
  } else {
    Scratch rows_buf((size_t)(N ? N : 1) * (sizeof(double) + sizeof(int)));
    if (!rows_buf.p) return -1;
    double *row_loss = (double *)rows_buf.p;
    int *valid = (int *)(row_loss + (N ? N : 1));
    auto run = [&]<typename T>() -> int {
      using A = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
      if (N) {
        xent_rows<T, A><<<blocks, kThreads, 0, stream>>>(N, C, (const T *)base(x), t, (A *)base(a->in[2]), row_loss, valid, ign, eps,
                                                         dev_err, a->op);
        LAUNCHED("cross_entropy");
      }
      xent_total<A><<<1, 1024, 0, stream>>>(N, row_loss, valid, (A *)base(a->out), (A *)base(a->in[2]));
      LAUNCHED("cross_entropy");
      return 0;
    };
    switch (x->dtype) {
      case NT_F32: return run.template operator()<float>();
      case NT_F64: return run.template operator()<double>();
      case NT_F16: return run.template operator()<__half>();
      case NT_BF16: return run.template operator()<__nv_bfloat16>();
      default: break;
    }
  }
  host->error_set("cross_entropy: unsupported dtype %s on cuda", nt_dtype_name(x->dtype));
  return -1;
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

// ---- add_layer_norm: the fused residual add + layer norm ----------------------------------------
// x, s, y [R, D] of the sum's storage type T (f32, f64, f16, bf16), r of TR (T,
// or f16/bf16 next to an f32 x); weight, bias and the statistics st [R, 2] =
// {mean, rstd} of the accumulation type A (f64 for f64, else f32):
//   s = x + r (rounded to T: the backward reads s as stored, so the forward
//   normalises the stored values too), mean = sum(s)/D, var = sum((s-mean)^2)/D,
//   rstd = 1/sqrt(var+eps), y = (s-mean) rstd w + b.
// Forward: one block per row, three passes over the row (the second and
// third re-read s, which this thread wrote itself: cache-hot).  No r (rr
// null): a plain layer norm of x (s is x, nothing written to s).  y may be
// a half type TY next to an f32 sum (autocast: the next bf16 linear's input,
// so no cast sits between them); the backward reads g in T or TY.
// Backward (dh = g w, xhat = (s-mean) rstd):
//   ds = rstd (dh - mean(dh) - xhat mean(dh xhat)) + res   (res: the residual
//   gradient s already received, or none), one block per row, also written in
//   r's half type as dr when asked (r's gradient: no cast kernel after it);
//   dw = sum_rows g xhat, db = sum_rows g: the rows split in chunks (grid.y)
//   writing partial column sums in A (coalesced: a thread per column), then
//   one pass adds the chunks in order (deterministic, no atomics into bf16).
template <typename T, typename TR, typename TY, typename A>
__global__ void aln_fwd(int64_t R, int64_t D, const T *x, const TR *rr, const A *w, const A *b, T *s, TY *y, A *st, double eps) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T *xr = x + r * D;
    const TR *rw = rr ? rr + r * D : nullptr;
    const T *sr = rr ? s + r * D : xr;
    TY *yr = y + r * D;
    A acc = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      T v = xr[d];
      if (rw) { v = St<T>::from((A)ld(v) + (A)ld(rw[d])); s[r * D + d] = v; }
      acc += (A)ld(v);
    }
    A mean = block_sum(acc) / (A)D, q = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) { A c = (A)ld(sr[d]) - mean; q += c * c; }
    A rs = (A)(1.0 / sqrt((double)(block_sum(q) / (A)D) + eps));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      A h = ((A)ld(sr[d]) - mean) * rs;
      yr[d] = St<TY>::from((w ? h * w[d] : h) + (b ? b[d] : (A)0));
    }
    if (threadIdx.x == 0) { st[2 * r] = mean; st[2 * r + 1] = rs; }
  }
}
// dr (nullable): ds again in r's half type TR (r's gradient, offered to the sum node: nt_node_offer_half_grad, tensor/textend.h)
template <typename T, typename TG, typename TR, typename A>
__global__ void aln_bwd_ds(int64_t R, int64_t D, const TG *g, const T *s, const A *st, const A *w, const T *res, T *ds, TR *dr) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const TG *gr = g + r * D;
    const T *sr = s + r * D;
    A m = st[2 * r], rs = st[2 * r + 1], a1 = 0, a2 = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      A dh = w ? (A)ld(gr[d]) * w[d] : (A)ld(gr[d]);
      a1 += dh; a2 += dh * ((A)ld(sr[d]) - m) * rs;
    }
    A m1 = block_sum(a1) / (A)D, m2 = block_sum(a2) / (A)D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      A dh = w ? (A)ld(gr[d]) * w[d] : (A)ld(gr[d]);
      A v = rs * (dh - m1 - ((A)ld(sr[d]) - m) * rs * m2);
      if (res) v += (A)ld(res[r * D + d]);
      const T out = St<T>::from(v);
      ds[r * D + d] = out;
      if (dr) dr[r * D + d] = St<TR>::from((A)ld(out));
    }
  }
}
// partial[(chunk * 2 + {0: dw, 1: db}) * D + d]
template <typename T, typename TG, typename A>
__global__ void aln_bwd_dwdb_partial(int64_t R, int64_t D, int64_t rows_per_chunk, const TG *g, const T *s, const A *st, A *partial) {
  int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (d >= D) return;
  int64_t r0 = (int64_t)blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
  A aw = 0, ab = 0;
  for (int64_t r = r0; r < r1; r++) {
    A gv = (A)ld(g[r * D + d]);
    aw += gv * ((A)ld(s[r * D + d]) - st[2 * r]) * st[2 * r + 1];
    ab += gv;
  }
  partial[((int64_t)blockIdx.y * 2) * D + d] = aw;
  partial[((int64_t)blockIdx.y * 2 + 1) * D + d] = ab;
}

int k_add_layer_norm(const nt_KernelArgs *a) {
  int64_t R = a->iarg[0], D = a->iarg[1];
  unsigned blocks = (unsigned)(R < 65535 * 16 ? (R ? R : 1) : 65535 * 16);
  if (a->op == ids.add_layer_norm) {
    nt_Tensor **so = (nt_Tensor **)a->extra;
    if (R == 0 || D == 0) return 0;
    auto run = [&]<typename T, typename TR, typename TY>() -> int {
      using A = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
      aln_fwd<T, TR, TY, A><<<blocks, kThreads, 0, stream>>>(R, D, PTR(const T, a->in[0]), PTR(const TR, a->in[1]), PTR(const A, a->in[2]),
                                                              PTR(const A, a->in[3]), PTR(T, so[0]), PTR(TY, a->out), PTR(A, so[1]), a->s[0]);
      LAUNCHED("add_layer_norm");
      return 0;
    };
    // T: the sum (x's dtype), TR: r (T when absent), TY: y
    nt_DType dt = a->in[0]->dtype, rt = a->in[1] ? a->in[1]->dtype : dt, yt = a->out->dtype;
    using bf = __nv_bfloat16;
    if (dt == NT_F32 && rt == NT_F32 && yt == NT_F32) return run.template operator()<float, float, float>();
    if (dt == NT_F32 && rt == NT_BF16 && yt == NT_F32) return run.template operator()<float, bf, float>();
    if (dt == NT_F32 && rt == NT_F16 && yt == NT_F32) return run.template operator()<float, __half, float>();
    if (dt == NT_F32 && rt == NT_F32 && yt == NT_BF16) return run.template operator()<float, float, bf>();
    if (dt == NT_F32 && rt == NT_BF16 && yt == NT_BF16) return run.template operator()<float, bf, bf>();
    if (dt == NT_F32 && rt == NT_F32 && yt == NT_F16) return run.template operator()<float, float, __half>();
    if (dt == NT_F32 && rt == NT_F16 && yt == NT_F16) return run.template operator()<float, __half, __half>();
    if (dt == NT_F64 && rt == NT_F64 && yt == NT_F64) return run.template operator()<double, double, double>();
    if (dt == NT_BF16 && rt == NT_BF16 && yt == NT_BF16) return run.template operator()<bf, bf, bf>();
    if (dt == NT_F16 && rt == NT_F16 && yt == NT_F16) return run.template operator()<__half, __half, __half>();
    host->error_set("add_layer_norm: unsupported dtypes %s + %s -> %s on cuda", nt_dtype_name(dt), nt_dtype_name(rt), nt_dtype_name(yt));
    return -1;
  }
  nt_Tensor **ex = (nt_Tensor **)a->extra;
  auto run = [&]<typename T, typename TG, typename TR>() -> int {
    using A = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
    const TG *g = PTR(const TG, a->in[0]);
    const T *sp = PTR(const T, a->in[1]);
    const A *st = PTR(const A, a->in[2]), *w = PTR(const A, a->in[3]);
    if (a->out && R && D) {
      aln_bwd_ds<T, TG, TR, A><<<blocks, kThreads, 0, stream>>>(R, D, g, sp, st, w, PTR(const T, ex[2]), PTR(T, a->out),
                                                                PTR(TR, ex[3]));
      LAUNCHED("add_layer_norm_backward");
    }
    if ((ex[0] || ex[1]) && D) {
      // enough chunks for ~4 blocks per SM, each of at least 8 rows
      int64_t colblocks = (D + kThreads - 1) / kThreads, want = ((int64_t)num_sms * 4 + colblocks - 1) / colblocks;
      int64_t nchunks = want < (R + 7) / 8 ? want : (R + 7) / 8;
      if (nchunks > 65535) nchunks = 65535;
      if (nchunks < 1) nchunks = 1;
      int64_t rows_per_chunk = R ? (R + nchunks - 1) / nchunks : 1;
      nchunks = R ? (R + rows_per_chunk - 1) / rows_per_chunk : 1;
      Scratch part((size_t)nchunks * 2 * D * sizeof(A));
      if (!part.p) return -1;
      dim3 grid((unsigned)colblocks, (unsigned)nchunks);
      aln_bwd_dwdb_partial<T, TG, A><<<grid, kThreads, 0, stream>>>(R, D, rows_per_chunk, g, sp, st, (A *)part.p);
      LAUNCHED("add_layer_norm_backward");
      ln_bwd_dwdb_final<A><<<grid_for(D), kThreads, 0, stream>>>(D, (int)nchunks, (const A *)part.p, PTR(A, ex[0]), PTR(A, ex[1]));
      LAUNCHED("add_layer_norm_backward");
    }
    return 0;
  };
  // T: s, TG: g (T, or the half y of an f32 s), TR: dr (T when absent, or a half next to an f32 s)
  nt_DType st_ = a->in[1]->dtype, gt = a->in[0]->dtype, rt = ex[3] ? ex[3]->dtype : st_;
  using bf = __nv_bfloat16;
  auto f32_s = [&]<typename TG>() -> int {
    if (rt == NT_BF16) return run.template operator()<float, TG, bf>();
    if (rt == NT_F16) return run.template operator()<float, TG, __half>();
    return run.template operator()<float, TG, float>();
  };
  if (rt != st_ && (st_ != NT_F32 || (rt != NT_BF16 && rt != NT_F16))) {
    host->error_set("add_layer_norm backward: unsupported dtypes s %s, dr %s on cuda", nt_dtype_name(st_), nt_dtype_name(rt));
    return -1;
  }
  if (st_ == NT_F32 && gt == NT_F32) return f32_s.template operator()<float>();
  if (st_ == NT_F32 && gt == NT_BF16) return f32_s.template operator()<bf>();
  if (st_ == NT_F32 && gt == NT_F16) return f32_s.template operator()<__half>();
  if (st_ == NT_F64 && gt == NT_F64) return run.template operator()<double, double, double>();
  if (st_ == NT_F16 && gt == NT_F16) return run.template operator()<__half, __half, __half>();
  if (st_ == NT_BF16 && gt == NT_BF16) return run.template operator()<bf, bf, bf>();
  host->error_set("add_layer_norm backward: unsupported dtypes s %s, g %s on cuda", nt_dtype_name(st_), nt_dtype_name(gt));
  return -1;
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
// An out-of-range index is reported under the public op called (index_select,
// embedding, x[idx]: err_op) and the user's axis, as the CPU reports it.
template <typename E>
__global__ void take_kernel(int64_t outer, int64_t n, int64_t m, int64_t inner, const E *x, const int64_t *idx, E *out,
                            DevError *err, int err_op, int64_t err_axis) {
  int64_t total = outer * m * inner;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t k = e % inner, j = (e / inner) % m, q = e / (inner * m), ix = idx[j];
    if (ix < 0) ix += n;
    if (ix < 0 || ix >= n) { raise_error(err, DEVERR_INDEX, err_op, idx[j], n, err_axis); out[e] = E(); continue; }
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
    int err_op = a->niarg >= 6 && a->iarg[4] >= 0 ? (int)a->iarg[4] : a->op;
    int64_t err_axis = a->niarg >= 6 ? a->iarg[5] : -1;
    switch (nt_dtype_size(a->out->dtype)) {
#define TAKE(E) take_kernel<E><<<grid_for(total), kThreads, 0, stream>>>(outer, n, m, inner, (const E *)base(a->in[0]), ix, (E *)base(a->out), dev_err, err_op, err_axis); break;
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
  ids.add_layer_norm = host->op_register("add_layer_norm");
  ids.add_layer_norm_bwd = host->op_register("add_layer_norm_backward");
  host->register_kernel(ids.add_layer_norm, NT_CUDA, k_add_layer_norm);
  host->register_kernel(ids.add_layer_norm_bwd, NT_CUDA, k_add_layer_norm);
  host->register_kernel(ids.take, NT_CUDA, k_take);
  host->register_kernel(ids.take_bwd, NT_CUDA, k_take);
  host->register_kernel(ids.gather, NT_CUDA, k_gather_scatter);
  host->register_kernel(ids.scatter_add, NT_CUDA, k_gather_scatter);
}

}  // namespace ncu
