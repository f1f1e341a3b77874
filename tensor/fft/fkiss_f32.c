/*
** fft/fkiss_f32.c — the single-precision CPU FFT: Debian's libkissfft-float
** (BSD-3), loaded on first use (util/dynload.h) so a script that never
** transforms does not map it.  The kernels are fkiss_tmpl.h's.
*/
#include "finternal.h"
#include "util/dynload.h"
#include <kissfft/kiss_fft.h>
#include <kissfft/kiss_fftr.h>
#include <omp.h>
#include <pthread.h>

#ifndef NABLA_KISSFFT_LIB
#define NABLA_KISSFFT_LIB "libkissfft-float.so.131"
#endif
NB_DYNLIB(kissfft_lib, NABLA_KISSFFT_LIB, "KISS FFT (Debian package libkissfft-float131), the CPU FFT of f32/c64 tensors")
NB_SHIM(kissfft_lib, kiss_fft_cfg, kiss_fft_alloc, (int n, int inv, void *mem, size_t *len), (n, inv, mem, len))
NB_SHIMV(kissfft_lib, kiss_fft, (kiss_fft_cfg c, const kiss_fft_cpx *fin, kiss_fft_cpx *fout), (c, fin, fout))
NB_SHIM(kissfft_lib, kiss_fftr_cfg, kiss_fftr_alloc, (int n, int inv, void *mem, size_t *len), (n, inv, mem, len))
NB_SHIMV(kissfft_lib, kiss_fftr, (kiss_fftr_cfg c, const kiss_fft_scalar *t, kiss_fft_cpx *f), (c, t, f))
NB_SHIMV(kissfft_lib, kiss_fftri, (kiss_fftr_cfg c, const kiss_fft_cpx *f, kiss_fft_scalar *t), (c, f, t))

_Static_assert(sizeof(kiss_fft_scalar) == sizeof(float), "libkissfft-float is built for float");
#define SCALAR float
#define CPX kiss_fft_cpx
#define SFX(x) x##_f32
#define KF_ALLOC kiss_fft_alloc
#define KF_FFT kiss_fft
#define KFR_ALLOC kiss_fftr_alloc
#define KFR_FWD kiss_fftr
#define KFR_INV kiss_fftri
#include "fkiss_tmpl.h"

int fft_kiss_run_f32(int op, const nt_KernelArgs *a, int64_t B, int n) { return run_f32(op, a, B, n); }
