/*
** tonednn.h — tonednn.c's f32 and bf16 convolutions through oneDNN, for
** tensor/nn/conv.c (the bf16 matmul's declaration is in tinternal.h).
**
** g is conv.c's geometry (dilation dh, dw >= 1; G >= 1); x/y NCHW,
** w [O, C/G, kh, kw], all contiguous f32.
**   kind 0: out y = conv(a = x, b = w) + bias (bias NULL: none)
**   kind 1: out dx = the convolution's input gradient from a = gy, b = w
**   kind 2: out dW from a = x, b = gy (bias unused; db is conv.c's loop)
** Answers 1 done, 0 not available for this call (oneDNN absent or off, a
** geometry it does not take: conv.c's own kernels run), -1 error set.
*/
#ifndef NABLA_TONEDNN_H
#define NABLA_TONEDNN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct nt_OnednnConvGeom { int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, Ho, Wo, dh, dw, G; } nt_OnednnConvGeom;
int nt_onednn_conv_f32(int kind, const nt_OnednnConvGeom *g, const float *a, const float *b, const float *bias, float *out);
/* the same with bf16 x, w, y (and gy, dx, dW): f32 accumulation inside
** oneDNN; the bias bf16 or f32 (bias_bf16) */
int nt_onednn_conv_bf16(int kind, const nt_OnednnConvGeom *g, const void *a, const void *b, const void *bias, bool bias_bf16, void *out);
/* whether bf16 convolutions on the CPU should stay bf16 and run here (oneDNN
** there, conversions on, and the CPU has bf16 dot products, or
** NABLA_ONEDNN_CONV_BF16=1) rather than in f32 (conv.c's f32 path) */
bool nt_onednn_conv_bf16_wanted(void);
/* the thread count of the oneDNN primitive run last (each is made for the
** OpenMP count of its creation, which its cache key holds); 0: none ran */
int nt_onednn_threads(void);
/* the primitive cache (entries, their reorder buffers' bytes, the bound) */
void nt_onednn_conv_cache_stats(size_t *entries, size_t *bytes, size_t *limit);

#endif
