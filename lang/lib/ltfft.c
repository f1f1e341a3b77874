/*
** lib/ltfft.c — the `fft` record (torch.fft's names: fft.rfft, fft.fftn,
** fft.fftshift, ...) over tensor/fft/, and the complex-tensor builtins
** (complex, polar, real, imag, conj, angle, view_as_real, view_as_complex)
** over tensor/complex.h.  Arithmetic, abs, sum and mean of complex tensors
** are the ordinary operators and builtins.
*/
#include "ltensor.h"
#include "tensor/fft/fft.h"
#include "tensor/complex.h"
#include "lang/lib/nblib.h"
#include <string.h>

/* norm: nil | "backward" | "ortho" | "forward" */
static int norm_arg(nb_VM *vm, const char *fname, nb_Value v, nt_FftNorm *out) {
  if (v.t == NB_TNIL) { *out = NT_FFT_BACKWARD; return NB_OK; }
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: norm must be a string, got %s", fname, nb_typename(v));
  int r = nt_fft_norm_from_name(fname, nb_str(v)->data);
  if (r < 0) return nbT_err(vm);
  *out = (nt_FftNorm)r;
  return NB_OK;
}
/* n: nil (-1) or a positive integer (checked by the transform) */
static int n_arg(nb_VM *vm, const char *fname, nb_Value v, int64_t *out) {
  *out = -1;
  if (v.t == NB_TNIL) return NB_OK;
  if (nbT_int_arg(vm, fname, "n", v, out)) return NB_ERR;
  if (*out < 1) return nb_error_kind(vm, "ValueError", "%s: invalid number of data points (%lld) specified", fname, (long long)*out);
  return NB_OK;
}

typedef nt_Tensor *(*OneAxis)(nt_Tensor *, int64_t, int, nt_FftNorm);
static int one_axis(nb_VM *vm, nb_Value *args, const char *fname, OneAxis f, nb_Value *out) {
  Tmp tp = {0}; int64_t nn; int dim = -1; nt_FftNorm norm = NT_FFT_BACKWARD;
  if (n_arg(vm, fname, args[1], &nn) || nbT_intc_arg(vm, fname, "dim", args[2], &dim) || norm_arg(vm, fname, args[3], &norm)) return NB_ERR;
  TENSOR_ARG(x, 0, "input"); DONE(f(x, nn, dim, norm));
}
#define ONE(name) \
  static int b_##name(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return one_axis(vm, args, "fft." #name, nt_fft_##name, out); }
ONE(fft) ONE(ifft) ONE(rfft) ONE(irfft) ONE(hfft) ONE(ihfft)

typedef nt_Tensor *(*NAxes)(nt_Tensor *, const int64_t *, int, const int *, int, nt_FftNorm);
/* s: nil or a list of sizes; dim: nil, an axis or a list (two = the *2 variants' default) */
static int n_axes(nb_VM *vm, nb_Value *args, const char *fname, NAxes f, bool two, nb_Value *out) {
  Tmp tp = {0}; int64_t s[NT_MAXDIM]; int ns = 0, dims[NT_MAXDIM], nd = 0; nt_FftNorm norm = NT_FFT_BACKWARD;
  if (args[1].t != NB_TNIL && nbT_ints_arg(vm, fname, "s", args[1], s, NT_MAXDIM, &ns)) return NB_ERR;
  if (nbT_axes_arg(vm, fname, args[2], dims, &nd) || norm_arg(vm, fname, args[3], &norm)) return NB_ERR;
  if (args[1].t != NB_TNIL) for (int i = 0; i < ns; i++)
    if (s[i] < 1 && s[i] != -1) return nb_error_kind(vm, "ValueError", "%s: invalid number of data points (%lld) specified", fname, (long long)s[i]);
  if (two && args[2].t == NB_TNIL) { dims[0] = -2; dims[1] = -1; nd = 2; }
  TENSOR_ARG(x, 0, "input");
  DONE(f(x, args[1].t != NB_TNIL ? s : NULL, ns, nd ? dims : NULL, nd, norm));
}
#define NAX(name, fn, two) \
  static int b_##name(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return n_axes(vm, args, "fft." #name, nt_fft_##fn, two, out); }
NAX(fftn, fftn, false) NAX(ifftn, ifftn, false) NAX(rfftn, rfftn, false) NAX(irfftn, irfftn, false)
NAX(fft2, fftn, true) NAX(ifft2, ifftn, true) NAX(rfft2, rfftn, true) NAX(irfft2, irfftn, true)

static int freq(nb_VM *vm, nb_Value *args, const char *fname, bool half, nb_Value *out) {
  int64_t nn; double d = 1; nt_DType dt; nt_Device dev;
  if (nbT_int_arg(vm, fname, "n", args[0], &nn) || nbT_num_arg(vm, fname, "d", args[1], &d) ||
      nbT_dtype_arg(vm, fname, args[2], NT_F32, &dt) || nbT_device_arg(vm, fname, args[3], &dev)) return NB_ERR;
  return nbT_ret(vm, half ? nt_fft_rfftfreq(nn, d, dt, dev) : nt_fft_fftfreq(nn, d, dt, dev), out);
}
static int b_fftfreq(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return freq(vm, args, "fft.fftfreq", false, out); }
static int b_rfftfreq(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return freq(vm, args, "fft.rfftfreq", true, out); }

static int shift(nb_VM *vm, nb_Value *args, const char *fname, bool inverse, nb_Value *out) {
  Tmp tp = {0}; int dims[NT_MAXDIM], nd = 0;
  if (nbT_axes_arg(vm, fname, args[1], dims, &nd)) return NB_ERR;
  TENSOR_ARG(x, 0, "input"); DONE(nt_fft_fftshift(x, nd ? dims : NULL, nd, inverse));
}
static int b_fftshift(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return shift(vm, args, "fft.fftshift", false, out); }
static int b_ifftshift(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return shift(vm, args, "fft.ifftshift", true, out); }

/* ---- complex tensors ------------------------------------------------------------- */
#define C1(name, fn, what) \
  static int b_##name(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { \
    (void)n; const char *fname = #name; Tmp tp = {0}; TENSOR_ARG(x, 0, what); DONE(fn(x)); }
C1(real, nt_real, "input") C1(imag, nt_imag, "input") C1(conj, nt_conj, "input") C1(angle, nt_angle, "input")
C1(view_as_real, nt_view_as_real, "input") C1(view_as_complex, nt_view_as_complex, "input")
static int b_complex(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "complex"; Tmp tp = {0};
  TENSOR_ARG(re, 0, "real"); TENSOR_ARG(im, 1, "imag"); DONE(nt_complex(re, im));
}
static int b_polar(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "polar"; Tmp tp = {0};
  TENSOR_ARG(r, 0, "abs"); TENSOR_ARG(th, 1, "angle"); DONE(nt_polar(r, th));
}

#define ONE_DOC(name, what) "x, n=nil, dim=-1, norm=nil", "fft." #name "(x, n=nil, dim=-1, norm=nil): " what
#define NAX_DOC(name, dflt, what) "x, s=nil, dim=nil, norm=nil", "fft." #name "(x, s=nil, dim=" dflt ", norm=nil): " what
static nb_Builtin fft_members[] = {
  { "fft.fft", b_fft, ONE_DOC(fft, "the discrete Fourier transform along dim (torch.fft.fft); n pads or truncates; norm \"backward\" | \"ortho\" | \"forward\"") },
  { "fft.ifft", b_ifft, ONE_DOC(ifft, "the inverse transform (1/n under norm \"backward\")") },
  { "fft.rfft", b_rfft, ONE_DOC(rfft, "the transform of a real input: the n/2+1 non-negative frequencies") },
  { "fft.irfft", b_irfft, ONE_DOC(irfft, "the inverse of rfft: n real outputs (default 2 (m - 1)) from m one-sided bins") },
  { "fft.hfft", b_hfft, ONE_DOC(hfft, "the transform of a Hermitian-symmetric signal given by its first half: n real outputs") },
  { "fft.ihfft", b_ihfft, ONE_DOC(ihfft, "the inverse of hfft: n/2+1 bins of a real input") },
  { "fft.fftn", b_fftn, NAX_DOC(fftn, "nil", "the transform over dims (all, or the last len(s)); s the sizes") },
  { "fft.ifftn", b_ifftn, NAX_DOC(ifftn, "nil", "the inverse of fftn") },
  { "fft.rfftn", b_rfftn, NAX_DOC(rfftn, "nil", "the transform of a real input over dims; the last one-sided") },
  { "fft.irfftn", b_irfftn, NAX_DOC(irfftn, "nil", "the inverse of rfftn; s[-1] the real output length (default 2 (m - 1))") },
  { "fft.fft2", b_fft2, NAX_DOC(fft2, "[-2, -1]", "fftn over the last two axes") },
  { "fft.ifft2", b_ifft2, NAX_DOC(ifft2, "[-2, -1]", "ifftn over the last two axes") },
  { "fft.rfft2", b_rfft2, NAX_DOC(rfft2, "[-2, -1]", "rfftn over the last two axes") },
  { "fft.irfft2", b_irfft2, NAX_DOC(irfft2, "[-2, -1]", "irfftn over the last two axes") },
  { "fft.fftfreq", b_fftfreq, "n, d=1.0, dtype=nil, device=nil", "fft.fftfreq(n, d=1.0, dtype=f32, device=cpu): the sample frequencies of an n-point transform: [0, 1, ..., -1] / (d n)" },
  { "fft.rfftfreq", b_rfftfreq, "n, d=1.0, dtype=nil, device=nil", "fft.rfftfreq(n, d=1.0, dtype=f32, device=cpu): the n/2+1 non-negative frequencies of rfft" },
  { "fft.fftshift", b_fftshift, "x, dim=nil", "fft.fftshift(x, dim=nil): rolls the zero frequency to the middle of each axis in dim (all when nil)" },
  { "fft.ifftshift", b_ifftshift, "x, dim=nil", "fft.ifftshift(x, dim=nil): the inverse of fftshift" },
  { NULL, NULL, NULL, NULL }
};

static int fft_value(nb_VM *vm, nb_Value *out) {
  (void)vm;
  int nm = 0;
  while (fft_members[nm].name) nm++;
  nb_Rec *r = nbR_new(nm);
  for (int i = 0; i < nm; i++) nbR_set_cstr(r, fft_members[i].name + 4, nb_builtinv(&fft_members[i]));   /* "fft.X" -> X */
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static nb_Builtin fft_builtins[] = {
  { .name = "fft", .doc = "fft: torch.fft's functions (fft, ifft, rfft, irfft, hfft, ihfft, fftn, rfftn, fft2, fftfreq, fftshift, ...); doc(fft.rfft) for each", .value = fft_value },
  { "complex", b_complex, "real, imag", "complex(real, imag): the complex tensor real + i imag (both f32 -> c64, both f64 -> c128), broadcasting" },
  { "polar", b_polar, "abs, angle", "polar(abs, angle): the complex tensor abs (cos angle + i sin angle)" },
  { "real", b_real, "x", "real(x): the real part of a complex tensor (a view); a real tensor itself" },
  { "imag", b_imag, "x", "imag(x): the imaginary part of a complex tensor (a view)" },
  { "conj", b_conj, "x", "conj(x): the complex conjugate (a real tensor itself)" },
  { "angle", b_angle, "x", "angle(x): the argument atan2(imag, real) of each element (real tensors: 0 or pi)" },
  { "view_as_real", b_view_as_real, "x", "view_as_real(x): a complex tensor [...] as its real view [..., 2] (shares memory)" },
  { "view_as_complex", b_view_as_complex, "x", "view_as_complex(x): an f32/f64 tensor [..., 2] with a last stride of 1 as complex [...] (shares memory)" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_fft(void) {
  nbC_register(fft_builtins);
  nbC_prepare(fft_members);
}
