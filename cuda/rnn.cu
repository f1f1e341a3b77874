// rnn.cu — the fused recurrent cell kernels (LSTM, GRU, RNN tanh/relu) on the
// GPU: the same op names ("rnn_cell", "rnn_cell_backward"), arguments
// (tensor/nn/rnncell.h: rnn_cell_args through nt_KernelArgs.extra) and math
// as the CPU kernels in tensor/nn/rnn.c, whose top comment has the
// formulas.  The GEMMs around them (x @ w_ih^T once, h @ w_hh^T per step,
// and backward's) are the front end's cuBLAS matmuls; these kernels do the
// rest of one time step in one launch.
//
// Layout: every buffer is one step's contiguous slice, row b of the batch:
//   gx, gh, dgx, dgh [B, G*H]: gate k of unit j at b*G*H + k*H + j (torch's order)
//   gates (saved)    [B, R*H]: LSTM {i, f, g, o, tanh c'}, GRU {r, z, n, gh_n + b_hn}, RNN {h'}
//   y, h*, c*, d*    [B, H]
// One thread per (b, j): it reads its unit's G gates and writes its unit's
// outputs, so threads never share an output element (no atomics, and the
// in-place dh/dc updates are per element).
#include "common.cuh"
#include "tensor/nn/rnncell.h"

namespace ncu {
namespace {

struct RnnOps { int cell, cell_bwd; };
RnnOps ids;

// f32 math in f32 (expf/tanhf), f64 in f64, as the CPU kernels
template <typename T> __device__ inline T m_exp(T x) { if constexpr (sizeof(T) == 4) return expf(x); else return exp(x); }
template <typename T> __device__ inline T m_tanh(T x) { if constexpr (sizeof(T) == 4) return tanhf(x); else return tanh(x); }
template <typename T> __device__ inline T sigm(T v) { return (T)1 / ((T)1 + m_exp(-v)); }

template <typename T>
__global__ void cell_fwd(int64_t mode, int64_t B, int64_t H, int64_t t, const T *gx, const T *gh, const T *bhh, const T *hp,
                         const T *cp, const int64_t *len, T *y, T *hn, T *cn, T *gs) {
  int64_t G = rnn_gates(mode), R = rnn_saved(mode), total = B * H;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = e / H, j = e - b * H;
    if (len && t >= len[b]) {                 // past this sequence's length: carry the state
      hn[e] = hp[e];
      if (cn) cn[e] = cp[e];
      y[e] = 0;
      continue;
    }
    const T *x = gx + b * G * H, *h = gh + b * G * H;
    T *s = gs + b * R * H, out;
    if (mode == 2) {                          // LSTM
      T v[4];
      for (int k = 0; k < 4; k++) v[k] = x[k * H + j] + h[k * H + j] + (bhh ? bhh[k * H + j] : (T)0);
      T i = sigm(v[0]), f = sigm(v[1]), g = m_tanh(v[2]), o = sigm(v[3]);
      T c = f * cp[e] + i * g, tc = m_tanh(c);
      out = o * tc;
      cn[e] = c;
      s[j] = i; s[H + j] = f; s[2 * H + j] = g; s[3 * H + j] = o; s[4 * H + j] = tc;
    } else if (mode == 3) {                   // GRU
      T r = sigm(x[j] + h[j] + (bhh ? bhh[j] : (T)0));
      T z = sigm(x[H + j] + h[H + j] + (bhh ? bhh[H + j] : (T)0));
      T hn_ = h[2 * H + j] + (bhh ? bhh[2 * H + j] : (T)0);
      T n = m_tanh(x[2 * H + j] + r * hn_);
      out = ((T)1 - z) * n + z * hp[e];
      s[j] = r; s[H + j] = z; s[2 * H + j] = n; s[3 * H + j] = hn_;
    } else {                                  // RNN: tanh (0) or relu (1)
      T v = x[j] + h[j] + (bhh ? bhh[j] : (T)0);
      out = mode == 0 ? m_tanh(v) : (v > (T)0 ? v : (T)0);
      s[j] = out;
    }
    hn[e] = out;
    y[e] = out;
  }
}

template <typename T>
__global__ void cell_bwd(int64_t mode, int64_t B, int64_t H, int64_t t, const T *dy, const T *mm, const T *gs, const T *hp,
                         const T *cp, const int64_t *len, T *dh, T *dc, T *dgx, T *dgh) {
  int64_t G = rnn_gates(mode), R = rnn_saved(mode), total = B * H;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = e / H, j = e - b * H;
    T *gx = dgx + b * G * H, *gh = dgh ? dgh + b * G * H : nullptr;
    T d = dh[e] + (mm ? mm[e] : (T)0);
    if (len && t >= len[b]) {                 // inactive: the gradient passes to the previous state
      dh[e] = d;
      for (int64_t k = 0; k < G; k++) { gx[k * H + j] = 0; if (gh) gh[k * H + j] = 0; }
      continue;
    }
    d += dy[e];
    const T *s = gs + b * R * H;
    if (mode == 2) {
      T i = s[j], f = s[H + j], g = s[2 * H + j], o = s[3 * H + j], tc = s[4 * H + j];
      T dct = dc[e] + d * o * ((T)1 - tc * tc);
      gx[j] = dct * g * i * ((T)1 - i);
      gx[H + j] = dct * cp[e] * f * ((T)1 - f);
      gx[2 * H + j] = dct * i * ((T)1 - g * g);
      gx[3 * H + j] = d * tc * o * ((T)1 - o);
      dc[e] = dct * f;
      dh[e] = 0;
    } else if (mode == 3) {
      T r = s[j], z = s[H + j], n = s[2 * H + j], hn_ = s[3 * H + j];
      T dn = d * ((T)1 - z) * ((T)1 - n * n), dz = d * (hp[e] - n) * z * ((T)1 - z);
      T dr = dn * hn_ * r * ((T)1 - r);
      gx[j] = dr; gh[j] = dr;
      gx[H + j] = dz; gh[H + j] = dz;
      gx[2 * H + j] = dn;
      gh[2 * H + j] = dn * r;
      dh[e] = d * z;
    } else {
      T v = s[j];
      gx[j] = mode == 0 ? d * ((T)1 - v * v) : (v > (T)0 ? d : (T)0);
      dh[e] = 0;
    }
  }
}

#define PTR(T, t) ((t) ? (T *)base(t) : (T *)nullptr)

template <typename T>
int cell(const nt_KernelArgs *ka) {
  const rnn_cell_args *a = (const rnn_cell_args *)ka->extra;
  int64_t total = a->B * a->H;
  if (total == 0) return 0;
  if (ka->op == ids.cell) {
    cell_fwd<T><<<grid_for(total), kThreads, 0, stream>>>(a->mode, a->B, a->H, a->t, PTR(const T, a->gx), PTR(const T, a->gh),
                                                          PTR(const T, a->bhh), PTR(const T, a->hprev), PTR(const T, a->cprev),
                                                          PTR(const int64_t, a->len), PTR(T, a->y), PTR(T, a->hnext),
                                                          PTR(T, a->cnext), PTR(T, a->gates));
    LAUNCHED("rnn_cell");
  } else {
    cell_bwd<T><<<grid_for(total), kThreads, 0, stream>>>(a->mode, a->B, a->H, a->t, PTR(const T, a->dy), PTR(const T, a->mm),
                                                          PTR(const T, a->gates), PTR(const T, a->hprev), PTR(const T, a->cprev),
                                                          PTR(const int64_t, a->len), PTR(T, a->dh), PTR(T, a->dc),
                                                          PTR(T, a->dgx), PTR(T, a->dgh));
    LAUNCHED("rnn_cell_backward");
  }
  return 0;
}

int k_rnn_cell(const nt_KernelArgs *a) {
  nt_DType dt = a->in[0]->dtype;
  if (dt == NT_F32) return cell<float>(a);
  if (dt == NT_F64) return cell<double>(a);
  host->error_set("%s: unsupported dtype %s on cuda (expected f32 or f64)", host->op_name(a->op), nt_dtype_name(dt));
  return -1;
}

}  // namespace

void register_rnn(void) {
  ids.cell = host->op_register("rnn_cell");
  ids.cell_bwd = host->op_register("rnn_cell_backward");
  host->register_kernel(ids.cell, NT_CUDA, k_rnn_cell);
  host->register_kernel(ids.cell_bwd, NT_CUDA, k_rnn_cell);
}

}  // namespace ncu
