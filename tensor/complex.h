/*
** complex.h — complex tensors (c64, c128): what FFT results need, as torch.
**
** A complex tensor stores (re, im) pairs of f32 (c64) or f64 (c128).  Every
** op here is built from the real ops on its REAL VIEW, view_as_real(z): the
** same storage seen as [..., 2] of the part dtype.  So each op runs on every
** device the real ops run on, and autograd comes from the real ops' own
** formulas: a complex input's gradient is dL/dRe + i dL/dIm, which is
** torch's convention (the conjugate Wirtinger derivative, times 2).
**
** Other tensor ops refuse complex inputs with an error (the CPU kernels'
** dtype switches; conversions to a real dtype: "would drop the imaginary
** part").  Arguments borrowed, results new references (tensor.h).
*/
#ifndef NT_COMPLEX_H
#define NT_COMPLEX_H

#include "tensor.h"

/* the part dtype of a complex dtype (c64 → f32), and the complex dtype of a
** real floating one (f32/f16/bf16 → c64, f64 → c128) */
nt_DType nt_complex_part_dtype(nt_DType dt);
nt_DType nt_complex_dtype_of(nt_DType dt);

/* views (share storage, differentiable) */
nt_Tensor *nt_view_as_real(nt_Tensor *z);      /* [...] complex → [..., 2] real */
nt_Tensor *nt_view_as_complex(nt_Tensor *x);   /* [..., 2] f32/f64, last stride 1, other strides even */
nt_Tensor *nt_real(nt_Tensor *z);              /* a view; a real tensor: itself */
nt_Tensor *nt_imag(nt_Tensor *z);              /* a view; a real tensor is an error (torch) */

/* new tensors */
nt_Tensor *nt_complex(nt_Tensor *re, nt_Tensor *im);   /* broadcasting; both f32 or f64 (torch) */
nt_Tensor *nt_polar(nt_Tensor *abs, nt_Tensor *angle);
nt_Tensor *nt_conj(nt_Tensor *z);              /* a real tensor: itself */
nt_Tensor *nt_cabs(nt_Tensor *z);              /* |z| (gradient 0 at z = 0, as torch) */
nt_Tensor *nt_angle(nt_Tensor *z);             /* atan2(im, re); real: 0 or pi */

/* the complex paths of the generic front ends (telem.c, treduce.c call them
** when an operand is complex): add sub mul div (a tensor or a real scalar
** on either side, broadcasting, promoting like torch); neg; sum, mean; the
** other ops are refused naming themselves */
nt_Tensor *nt_complex_binary(int op, nt_Tensor *a, nt_Tensor *b);
nt_Tensor *nt_complex_binary_scalar(int op, nt_Tensor *t, double s, bool scalar_first);
nt_Tensor *nt_complex_unary(int op, nt_Tensor *z);
nt_Tensor *nt_complex_reduce(int op, nt_Tensor *z, const int *axes, int naxes, bool keepdims);
nt_Tensor *nt_complex_clone(nt_Tensor *z);
nt_Tensor *nt_complex_to_dtype(nt_Tensor *t, nt_DType dt);   /* to or from a complex dtype */

#endif
