/*
** tonednn.h — tonednn.c's f32 convolution through oneDNN, for tensor/nn/conv.c
** (the bf16 matmul's declaration is in tinternal.h).
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
#include <stdint.h>

typedef struct nt_OnednnConvGeom { int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, Ho, Wo, dh, dw, G; } nt_OnednnConvGeom;
int nt_onednn_conv_f32(int kind, const nt_OnednnConvGeom *g, const float *a, const float *b, const float *bias, float *out);

#endif
