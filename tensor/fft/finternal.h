/*
** fft/finternal.h — private to tensor/fft/: the transform kernels' op ids
** and their argument layout (the CPU's over kissfft, fkiss_tmpl.h; CUDA's
** over cuFFT register under the same names).
**
**  fft_c2c  out [B, n] complex, in[0] [B, n] complex (same dtype); iarg[0] = 1:
**           forward (exp(-2 pi i jk/n)), 0: inverse (exp(+...)), unnormalized,
**           then times s[0]
**  fft_r2c  out [B, n/2+1] complex, in[0] [B, n] real (f32 -> c64, f64 -> c128);
**           s[0] as above (always forward)
**  fft_c2r  out [B, n] real, in[0] [B, n/2+1] complex; iarg[0] = n; the inverse
**           of the Hermitian extension, real part, times s[0]
** Every buffer is fresh and contiguous, except that a device kernel of
** fft_c2c / fft_r2c may get niarg = 3: in[0] is then a view whose row b,
** element j is at b * iarg[2] + j * iarg[1] (elements, both >= 1; the rows in
** row-major order of in[0]'s leading dims); B >= 1, n >= 1 (the front end
** handles empty batches), n <= INT32_MAX (kissfft's and cuFFT's lengths).
*/
#ifndef NT_FFT_INTERNAL_H
#define NT_FFT_INTERNAL_H

#include "tensor/tinternal.h"
#include "fft.h"

typedef struct { int c2c, r2c, c2r; } fft_op_ids;
extern fft_op_ids fft_ops;
void fft_init(void);              /* registers the CPU kernels once (fcore.c) */
/* fkiss_f32.c / fkiss_f64.c: op 0 c2c, 1 r2c, 2 c2r on B rows of length n */
int fft_kiss_run_f32(int op, const nt_KernelArgs *a, int64_t B, int n);
int fft_kiss_run_f64(int op, const nt_KernelArgs *a, int64_t B, int n);

#endif
