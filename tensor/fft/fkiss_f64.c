/*
** fft/fkiss_f64.c — the double-precision CPU FFT.  Debian packages kissfft
** for float only (libkissfft-float), so the upstream sources of the same
** library (kissfft/: kiss_fft.c, kiss_fftr.c at mborgerding/kissfft 6e9e673,
** 131.1.0 with the CVE-2026-41445 overflow check; BSD-3, kissfft/COPYING) are
** compiled here for double, every external name prefixed nt_kissd_ so they
** cannot meet the float library's.  The kernels are fkiss_tmpl.h's.
*/
#include "finternal.h"
#include <omp.h>
#include <pthread.h>

#define kiss_fft_scalar double
#define kiss_fft_state nt_kissd_fft_state
#define kiss_fftr_state nt_kissd_fftr_state
#define kiss_fft_alloc nt_kissd_fft_alloc
#define kiss_fft nt_kissd_fft
#define kiss_fft_stride nt_kissd_fft_stride
#define kiss_fft_cleanup nt_kissd_fft_cleanup
#define kiss_fft_next_fast_size nt_kissd_fft_next_fast_size
#define kiss_fftr_alloc nt_kissd_fftr_alloc
#define kiss_fftr nt_kissd_fftr
#define kiss_fftri nt_kissd_fftri
#define kf_work nt_kissd_kf_work
#define kf_factor nt_kissd_kf_factor
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wshadow"
#include "kissfft/kiss_fft.c"
#include "kissfft/kiss_fftr.c"
#pragma GCC diagnostic pop

#define SCALAR double
#define CPX kiss_fft_cpx
#define SFX(x) x##_f64
#define KF_ALLOC kiss_fft_alloc
#define KF_FFT kiss_fft
#define KFR_ALLOC kiss_fftr_alloc
#define KFR_FWD kiss_fftr
#define KFR_INV kiss_fftri
#include "fkiss_tmpl.h"

int fft_kiss_run_f64(int op, const nt_KernelArgs *a, int64_t B, int n) { return run_f64(op, a, B, n); }
