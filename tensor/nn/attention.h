/*
** attention.h — the kernel contract of scaled_dot_product_attention, shared by
** the CPU kernel (tensor/nn/attention.c) and the CUDA kernel (cuda/attention.cu).
**
** The front end (nt_scaled_dot_product_attention) brings q, k, v to contiguous
** [B, T, D], [B, S, D], [B, S, DV] (B = the broadcast batch dims flattened)
** of ONE storage dtype: f32 or f64 on the CPU (f16/bf16 are computed in f32
** there); f32, f64, f16 or bf16 on CUDA (half types accumulate in f32).
** On the CPU only, q, k, v (and O, dout, dq, dk, dv) may instead be views
** batch + [rows, cols] with unit column stride, row stride >= cols and
** batch strides >= 0, no broadcasting (e.g. heads permuted out of [B, T, H, d]):
** the kernel reads and writes them in place (attention.c, sdpa_lay).
**
**   forward  op "scaled_dot_product_attention"
**            out = O [B, T, DV] (storage dtype), in = {q, k, v, lse}
**            lse [B, T] is WRITTEN: lse_i = log sum_j exp(s_ij) over the keys row
**            i sees (s = scale q k^T); f64 when the storage is f64, else f32.
**            -inf when the row sees no key (S == 0; O is then 0).
**   backward op "scaled_dot_product_attention_backward"
**            out = NULL, nin = 0, extra = nt_SdpaGrads * (all contiguous, or on
**            the CPU views as above; dq/dk/dv fresh with q/k/v's shape and dtype,
**            on the CPU laid out like q/k/v; every one is written).
**   both:    iarg[NT_SDPA_*] geometry, s[0] = scale.
**   mask:    iarg[NT_SDPA_MASK] = 0 (none), 1 (one [T, S] for every batch
**            matrix) or B; then extra (forward) / nt_SdpaGrads.mask is the
**            contiguous ADDITIVE mask [mask_b, T, S] of the storage dtype.
**            On CUDA only cuDNN's graph adds it (cuda/cudnn.cu: the bias
**            [1 or B*H, T, S]); where cuDNN cannot run, the forward returns 1
**            (nothing written) and the front end composes public ops instead.
** Causal (top-left aligned, as torch): query i sees keys j <= i.
**   views:   iarg[NT_SDPA_VIEWS] = 1 (CUDA only): q, k, v, O (forward) and dout,
**            dq, dk, dv (backward) are views batch + [rows, cols] with 1 or 2 batch
**            dims (no broadcasting), unit column stride, e.g. the heads of a packed
**            [B, T, 3C] qkv (nt_attention_qkv: O a view of [B, T, C], dq/dk/dv
**            views of ONE packed [B, T, 3C] gradient); lse stays contiguous [B, T].
**            cuDNN's graph, the fused kernels (cuda/attention.cu) and the cuBLAS
**            path (attention_gemm.cu: chunks inside one outer batch index) read
**            and write them in place; a path that cannot (cuDNN without an
**            engine for the graph; the cuBLAS one for empty views) writes
**            nothing and returns 1; the front end then retries with contiguous
**            copies.
**   forward extra: NULL or nt_SdpaExtra * (the mask above, the dropout state).
**   dropout: iarg[NT_SDPA_DROPOUT] = 1 (CUDA only: only cuDNN's graph drops out,
**            cuda/cudnn.cu), s[1] = p in (0, 1); P is multiplied by a Bernoulli(1-p)
**            keep mask and 1/(1-p) before P V.  The forward's rng (an i64 [4] CUDA
**            tensor) receives the Philox seed (element 0) and offset (element 2) the
**            graph drew with: iarg[NT_SDPA_SEED] and [NT_SDPA_OFFSET], the host
**            generator's state, or inside a captured step the graph's random slot
**            (a replay draws new masks); nt_SdpaGrads.rng is that tensor again, so
**            the backward regenerates the same mask.  Where cuDNN cannot run the
**            dropout graph the forward returns 1 (nothing drawn) and the front end
**            composes public ops; a backward cannot decline (an error saying why).
**   iarg[NT_SDPA_MASK_GRAD] = 1 (CUDA): the mask requires grad; cuDNN's graph has
**            no dBias, so the forward declines (1, the reason kept) and the front
**            end composes public ops, which give the mask its gradient.
*/
#ifndef NT_NN_ATTENTION_H
#define NT_NN_ATTENTION_H

#include "tensor/tensor.h"

enum { NT_SDPA_B, NT_SDPA_T, NT_SDPA_S, NT_SDPA_D, NT_SDPA_DV, NT_SDPA_CAUSAL, NT_SDPA_MASK, NT_SDPA_VIEWS,
       NT_SDPA_DROPOUT, NT_SDPA_SEED, NT_SDPA_OFFSET, NT_SDPA_MASK_GRAD, NT_SDPA_NIARG };

/* Does cuDNN's fused attention graph (cuda/cudnn.cu) take this dtype and these
** head dims?  One rule for the module and the front end: f16/bf16, d = dv, a
** multiple of 8, at most 128. */
static inline bool nt_sdpa_cudnn_shape_ok(nt_DType dt, int64_t D, int64_t DV) {
  return (dt == NT_F16 || dt == NT_BF16) && D == DV && D % 8 == 0 && D > 0 && D <= 128;
}

typedef struct nt_SdpaGrads {
  nt_Tensor *q, *k, *v, *o, *lse;   /* forward inputs, output and saved logsumexp */
  nt_Tensor *mask;                  /* the additive mask, or NULL */
  nt_Tensor *dout;                  /* gradient of O, [B, T, DV], storage dtype */
  nt_Tensor *dq, *dk, *dv;          /* results */
  nt_Tensor *rng;                   /* the forward's dropout state (i64 [4]), or NULL */
} nt_SdpaGrads;

typedef struct nt_SdpaExtra {
  nt_Tensor *mask;                  /* the additive mask, or NULL */
  nt_Tensor *rng;                   /* dropout: receives the seed and offset drawn with, or NULL */
} nt_SdpaExtra;

#endif
