/*
** rnncell.h — the arguments of the recurrent cell kernels, shared by the CPU
** kernels (rnn.c) and the CUDA ones (cuda/rnn.cu) so the two cannot drift:
** nt_KernelArgs.extra points at one rnn_cell_args.  Plain C, no tensor/
** internals (the CUDA module includes it).
**
** "rnn_cell" (one step t of one layer and direction; every tensor a
** contiguous [B, ...] slice of the step, dtype f32/f64 alike):
**   reads  gx [B, G*H] (x @ w_ih^T + b_ih), gh [B, G*H] (h @ w_hh^T),
**          bhh [G*H] or NULL, hprev [B, H], cprev [B, H] (LSTM),
**          len i64 [B] or NULL (row b active when t < len[b])
**   writes y [B, H] (0 where inactive), hnext, cnext (LSTM) [B, H],
**          gates [B, rnn_saved(mode)*H] (active rows only)
** "rnn_cell_backward" (the same step, backwards):
**   reads  dy [B, H] (gradient of y), mm [B, H] or NULL (dgh of the step
**          processed after this one, @ w_hh), gates, hprev, cprev, len
**   reads and writes dh [B, H] (in: the carried gradient of hnext; out: the
**          part of the gradient of hprev that does not go through w_hh),
**          dc [B, H] (LSTM; in: of cnext, out: of cprev)
**   writes dgx [B, G*H] (the gradient of gx; zero where inactive) and, for
**          GRU only, dgh [B, G*H] (of gh + bhh; other modes: dgh == dgx)
** mode is an nt_RnnMode (rnn.h): 0 tanh, 1 relu, 2 LSTM, 3 GRU.
*/
#ifndef NT_RNNCELL_H
#define NT_RNNCELL_H

#include <stdint.h>

struct nt_Tensor;
typedef struct rnn_cell_args {
  int64_t mode, B, H, t;
  struct nt_Tensor *gx, *gh, *bhh, *hprev, *cprev, *len, *y, *hnext, *cnext, *gates;
  struct nt_Tensor *dy, *mm, *dh, *dc, *dgx, *dgh;
} rnn_cell_args;

/* gates per hidden unit (G) and values saved per hidden unit for backward
** (callable from CUDA kernels too) */
#ifdef __CUDACC__
#define RNN_HOST_DEVICE __host__ __device__
#else
#define RNN_HOST_DEVICE
#endif
static inline RNN_HOST_DEVICE int64_t rnn_gates(int64_t mode) { return mode == 2 ? 4 : mode == 3 ? 3 : 1; }
static inline RNN_HOST_DEVICE int64_t rnn_saved(int64_t mode) { return mode == 2 ? 5 : mode == 3 ? 4 : 1; }

#endif
