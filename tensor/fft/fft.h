/*
** fft/fft.h — torch.fft over tensors ([numerics.md](../../docs/numerics.md)).
**
** Every transform is batched over the axes it does not transform, takes any
** strides, and is differentiable (torch's formulas, complex gradients with
** torch's convention: complex.h).  Real inputs of the complex transforms are
** promoted (f64 -> c128, other reals -> c64); integer inputs of the real
** ones to f32.  CPU: kissfft; CUDA: cuFFT (cuda/fft.cu), or the CPU through
** the host where the device module has no FFT.
**
** n / s: the transformed length per axis: shorter inputs are zero-padded,
** longer ones truncated; -1 (NULL) keeps the input's (irfft: 2 (m - 1)).
** norm: NT_FFT_BACKWARD (forward unscaled, inverse 1/n), ORTHO (1/sqrt(n)
** both), FORWARD (forward 1/n, inverse unscaled).  Arguments borrowed,
** results new references, NULL with the error set.
*/
#ifndef NT_FFT_H
#define NT_FFT_H

#include "tensor/tensor.h"

typedef enum { NT_FFT_BACKWARD, NT_FFT_ORTHO, NT_FFT_FORWARD } nt_FftNorm;
/* "backward" | "ortho" | "forward" (NULL: backward); -1 with the error set */
int nt_fft_norm_from_name(const char *op, const char *name);

/* one axis */
nt_Tensor *nt_fft_fft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm);
nt_Tensor *nt_fft_ifft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm);
nt_Tensor *nt_fft_rfft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm);     /* real -> n/2+1 */
nt_Tensor *nt_fft_irfft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm);    /* -> n real */
nt_Tensor *nt_fft_hfft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm);     /* Hermitian half -> n real */
nt_Tensor *nt_fft_ihfft(nt_Tensor *x, int64_t n, int dim, nt_FftNorm norm);    /* real -> n/2+1 */

/* several axes: dims (ndims of them; NULL: the last len(s) axes, or all
** when s is NULL too); s (ns == ndims entries, -1 = keep) or NULL */
nt_Tensor *nt_fft_fftn(nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm);
nt_Tensor *nt_fft_ifftn(nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm);
nt_Tensor *nt_fft_rfftn(nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm);
nt_Tensor *nt_fft_irfftn(nt_Tensor *x, const int64_t *s, int ns, const int *dims, int ndims, nt_FftNorm norm);

/* helpers: sample frequencies (dtype f32 or f64) and the zero-frequency shift
** (dims NULL: every axis) */
nt_Tensor *nt_fft_fftfreq(int64_t n, double d, nt_DType dt, nt_Device dev);
nt_Tensor *nt_fft_rfftfreq(int64_t n, double d, nt_DType dt, nt_Device dev);
nt_Tensor *nt_fft_fftshift(nt_Tensor *x, const int *dims, int ndims, bool inverse);

#endif
