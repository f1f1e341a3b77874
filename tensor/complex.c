/*
** complex.c — complex tensors through their real views (complex.h says why).
**
** Layout: a complex tensor with shape S, strides st (in complex elements) and
** offset o is, seen as its part dtype, the tensor [S..., 2] with strides
** [2 st..., 1] and offset 2 o: view_as_real is a re-labelling of the header,
** and view_as_complex its inverse where the strides allow it.  The two
** views' backward functions are each other, which is what makes every
** composite below differentiable with torch's convention.
*/
#include "tinternal.h"
#include "textend.h"
#include "complex.h"
#include <math.h>
#include <string.h>

/* ---- the dispatch guard (tbackend.h) ---------------------------------------------- */
int nt_complex_seen_;
static bool kernel_takes_complex(int op) {
  if (op == NT_OP_COPY || op == NT_OP_FILL) return true;
  const char *n = nt_op_name(op);
  return n && !strncmp(n, "fft_", 4);   /* tensor/fft/finternal.h's kernels */
}
int nt_complex_refuse_(int op, const nt_KernelArgs *a) {
  bool c = a->out && nt_dtype_is_complex(a->out->dtype);
  for (int i = 0; i < a->nin && i < 4 && !c; i++) c = a->in[i] && nt_dtype_is_complex(a->in[i]->dtype);
  if (!c || kernel_takes_complex(op)) return 0;
  NT_FAIL("%s is not supported for complex tensors (c64/c128); the complex ops are +, -, *, /, abs, angle, conj, real, "
          "imag, sum, mean, views, and the fft functions", nt_op_name(op));
}

nt_DType nt_complex_part_dtype(nt_DType dt) { return dt == NT_C128 ? NT_F64 : NT_F32; }
nt_DType nt_complex_dtype_of(nt_DType dt) { return dt == NT_F64 || dt == NT_C128 ? NT_C128 : NT_C64; }

/* a small pool of temporaries released together (the composites below) */
typedef struct { nt_Tensor *t[24]; int n; bool bad; } Pool;
static nt_Tensor *P(Pool *p, nt_Tensor *x) {
  if (!x) p->bad = true;
  else if (p->n < 24) p->t[p->n++] = x;
  else { nt_release(x); p->bad = true; nt_error_set("complex: internal temporaries exhausted"); return NULL; }
  return x;
}
static void pool_free(Pool *p) { for (int i = 0; i < p->n; i++) nt_release(p->t[i]); p->n = 0; }
static nt_Tensor *finish(Pool *p, nt_Tensor *r) {   /* r escapes the pool */
  if (r) nt_retain(r);
  pool_free(p);
  return r;
}

/* ---- the two views -------------------------------------------------------- */
static int view_as_real_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  (void)n;
  nt_Tensor *c = nt_contiguous(g);
  gin[0] = c ? nt_view_as_complex(c) : NULL;
  nt_release(c);
  return gin[0] ? 0 : -1;
}
static int view_as_complex_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  (void)n;
  gin[0] = nt_view_as_real(g);
  return gin[0] ? 0 : -1;
}
static nt_Tensor *record_view(nt_Tensor *out, nt_Tensor *in, const char *name, nt_BackwardFn fn) {
  if (nt_needs_grad(1, &in)) {
    nt_Node *n = nt_record(out, name, fn, 1, &in);
    if (!n) { nt_release(out); return NULL; }
    n->flags |= NT_NODE_VIEW;
    nt_node_unchecked(n, 0);
  }
  return out;
}

nt_Tensor *nt_view_as_real(nt_Tensor *z) {
  if (!nt_dtype_is_complex(z->dtype))
    NT_FAIL_NULL("view_as_real: expected a complex tensor, got %s", nt_dtype_name(z->dtype));
  if (z->ndim >= NT_MAXDIM) NT_FAIL_NULL("view_as_real: a %dD tensor has no room for the extra axis (at most %d)", z->ndim, NT_MAXDIM);
  nt_Tensor *v = nt_view_of(z);
  if (!v) return NULL;
  v->dtype = nt_complex_part_dtype(z->dtype);
  for (int i = 0; i < z->ndim; i++) v->strides[i] = 2 * z->strides[i];
  v->shape[z->ndim] = 2; v->strides[z->ndim] = 1;
  v->ndim = z->ndim + 1;
  v->offset = 2 * z->offset;
  nt_update_meta(v);
  return record_view(v, z, "ViewAsRealBackward", view_as_real_backward);
}

nt_Tensor *nt_view_as_complex(nt_Tensor *x) {
  if (x->dtype != NT_F32 && x->dtype != NT_F64)
    NT_FAIL_NULL("view_as_complex: expected an f32 or f64 tensor, got %s", nt_dtype_name(x->dtype));
  if (x->ndim < 1 || x->shape[x->ndim - 1] != 2)
    NT_FAIL_NULL("view_as_complex: expected a last axis of size 2 (real, imaginary)");
  if (x->strides[x->ndim - 1] != 1) NT_FAIL_NULL("view_as_complex: the last axis must have stride 1 (call contiguous() first)");
  for (int i = 0; i < x->ndim - 1; i++)
    if (x->shape[i] != 1 && x->strides[i] % 2)
      NT_FAIL_NULL("view_as_complex: axis %d has an odd stride %lld: the pairs are not complex elements (call contiguous() first)",
                   i, (long long)x->strides[i]);
  if (x->offset % 2) NT_FAIL_NULL("view_as_complex: the view starts inside a complex element (call contiguous() first)");
  nt_Tensor *v = nt_view_of(x);
  if (!v) return NULL;
  nt_complex_seen_ = 1;
  v->dtype = x->dtype == NT_F64 ? NT_C128 : NT_C64;
  v->ndim = x->ndim - 1;
  for (int i = 0; i < v->ndim; i++) v->strides[i] = x->shape[i] == 1 ? 1 : x->strides[i] / 2;
  v->offset = x->offset / 2;
  nt_update_meta(v);
  return record_view(v, x, "ViewAsComplexBackward", view_as_complex_backward);
}

/* view_as_complex of any [..., 2] (a contiguous copy when the strides need it) */
static nt_Tensor *pack(nt_Tensor *x) {
  nt_Tensor *c = nt_contiguous(x);
  nt_Tensor *r = c ? nt_view_as_complex(c) : NULL;
  nt_release(c);
  return r;
}
/* complex from two real tensors of one shape and part dtype */
static nt_Tensor *pack2(nt_Tensor *re, nt_Tensor *im) {
  nt_Tensor *s = nt_stack((nt_Tensor *[]){ re, im }, 2, re->ndim);
  nt_Tensor *r = s ? nt_view_as_complex(s) : NULL;
  nt_release(s);
  return r;
}

nt_Tensor *nt_real(nt_Tensor *z) {
  if (!nt_dtype_is_complex(z->dtype)) return nt_retain(z);
  nt_Tensor *v = nt_view_as_real(z), *r = v ? nt_select(v, z->ndim, 0) : NULL;
  nt_release(v);
  return r;
}
nt_Tensor *nt_imag(nt_Tensor *z) {
  if (!nt_dtype_is_complex(z->dtype)) NT_FAIL_NULL("imag: expected a complex tensor, got %s (imag is not defined for real tensors)", nt_dtype_name(z->dtype));
  nt_Tensor *v = nt_view_as_real(z), *r = v ? nt_select(v, z->ndim, 1) : NULL;
  nt_release(v);
  return r;
}

/* ---- construction ----------------------------------------------------------- */
nt_Tensor *nt_complex(nt_Tensor *re, nt_Tensor *im) {
  if ((re->dtype != NT_F32 && re->dtype != NT_F64) || re->dtype != im->dtype)
    NT_FAIL_NULL("complex: expected real and imag both f32 or both f64, got %s and %s", nt_dtype_name(re->dtype), nt_dtype_name(im->dtype));
  if (re->device != im->device)
    NT_FAIL_NULL("complex: expected both tensors on one device, got %s and %s", nt_device_name(re->device), nt_device_name(im->device));
  int64_t shape[NT_MAXDIM]; int nd;
  if (nt_broadcast_shapes("complex", re->shape, re->ndim, im->shape, im->ndim, shape, &nd)) return NULL;
  if (nd >= NT_MAXDIM) NT_FAIL_NULL("complex: at most %dD", NT_MAXDIM - 1);
  Pool p = {0};
  nt_Tensor *a = P(&p, nt_broadcast_to(re, shape, nd)), *b = a ? P(&p, nt_broadcast_to(im, shape, nd)) : NULL;
  return finish(&p, b ? P(&p, pack2(a, b)) : NULL);
}

nt_Tensor *nt_polar(nt_Tensor *r, nt_Tensor *th) {
  Pool p = {0};
  nt_Tensor *c = P(&p, nt_cos(th)), *s = c ? P(&p, nt_sin(th)) : NULL;
  nt_Tensor *re = s ? P(&p, nt_mul(r, c)) : NULL, *im = re ? P(&p, nt_mul(r, s)) : NULL;
  return finish(&p, im ? P(&p, nt_complex(re, im)) : NULL);
}

/* a real tensor as a complex one: (x, 0) in dtype cd (x converted to its part dtype) */
static nt_Tensor *promote_real(nt_Tensor *x, nt_DType cd) {
  Pool p = {0};
  nt_Tensor *xr = P(&p, nt_to_dtype(x, nt_complex_part_dtype(cd)));
  nt_Tensor *z = xr ? P(&p, nt_zeros_like(xr)) : NULL;
  return finish(&p, z ? P(&p, pack2(xr, z)) : NULL);
}

nt_Tensor *nt_complex_to_dtype(nt_Tensor *t, nt_DType dt) {
  if (t->dtype == dt) return nt_retain(t);
  if (!nt_dtype_is_complex(dt))
    NT_FAIL_NULL("cannot convert %s to %s: it would drop the imaginary part (take real(x), imag(x) or abs(x) first)",
                 nt_dtype_name(t->dtype), nt_dtype_name(dt));
  if (!nt_dtype_is_complex(t->dtype)) return promote_real(t, dt);
  Pool p = {0};   /* c64 <-> c128: both parts */
  nt_Tensor *v = P(&p, nt_view_as_real(t)), *c = v ? P(&p, nt_to_dtype(v, nt_complex_part_dtype(dt))) : NULL;
  return finish(&p, c ? P(&p, pack(c)) : NULL);
}

nt_Tensor *nt_complex_clone(nt_Tensor *z) {
  Pool p = {0};
  nt_Tensor *v = P(&p, nt_view_as_real(z)), *c = v ? P(&p, nt_clone(v)) : NULL;
  return finish(&p, c ? P(&p, nt_view_as_complex(c)) : NULL);
}

nt_Tensor *nt_conj(nt_Tensor *z) {
  if (!nt_dtype_is_complex(z->dtype)) return nt_retain(z);
  Pool p = {0};
  nt_Tensor *re = P(&p, nt_real(z)), *im = re ? P(&p, nt_imag(z)) : NULL, *ni = im ? P(&p, nt_neg(im)) : NULL;
  return finish(&p, ni ? P(&p, pack2(re, ni)) : NULL);
}

/* ---- abs and angle: their own backward (torch's: 0 at z = 0, not NaN) -------- */
/* abs: d|z| = Re(conj(z)/|z| dz), so the gradient is g z/|z| (sgn(z), 0 at 0) */
static int cabs_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *z = n->in[0], *r = n->saved[0];
  Pool p = {0};
  nt_Tensor *zero = P(&p, nt_eq(r, P(&p, nt_zeros_like(r))));
  nt_Tensor *den = zero ? P(&p, nt_where(zero, P(&p, nt_ones_like(r)), r)) : NULL;
  nt_Tensor *w = den ? P(&p, nt_div(g, den)) : NULL;                         /* g / |z| */
  nt_Tensor *re = w ? P(&p, nt_mul(w, P(&p, nt_real(z)))) : NULL;
  nt_Tensor *im = re ? P(&p, nt_mul(w, P(&p, nt_imag(z)))) : NULL;
  gin[0] = im ? pack2(re, im) : NULL;
  pool_free(&p);
  return gin[0] ? 0 : -1;
}
nt_Tensor *nt_cabs(nt_Tensor *z) {
  if (!nt_dtype_is_complex(z->dtype)) return nt_abs(z);
  /* |z| = hypot(re, im) = m sqrt(1 + (n/m)^2), m = max(|re|, |im|), n = min: re^2 + im^2
  ** would overflow above ~1e154 (c128) / ~1e19 (c64) and underflow below their square roots.
  ** As C99's hypot and torch: an infinite part gives inf even beside a NaN; else NaN propagates. */
  bool prev = nt_set_grad_enabled(false);
  Pool p = {0};
  nt_Tensor *a = P(&p, nt_abs(P(&p, nt_real(z)))), *b = a ? P(&p, nt_abs(P(&p, nt_imag(z)))) : NULL;
  nt_Tensor *m = b ? P(&p, nt_binary(NT_OP_MAXIMUM, a, b)) : NULL, *n = m ? P(&p, nt_binary(NT_OP_MINIMUM, a, b)) : NULL;
  nt_Tensor *mz = n ? P(&p, nt_binary_scalar_ex(NT_OP_EQ, m, 0, NT_SCALAR_FLOAT)) : NULL;
  nt_Tensor *ms = mz ? P(&p, nt_where(mz, P(&p, nt_ones_like(m)), m)) : NULL;    /* 0/0 guarded: r = 0 there */
  nt_Tensor *q = ms ? P(&p, nt_div(n, ms)) : NULL;
  nt_Tensor *h = q ? P(&p, nt_mul(m, P(&p, nt_sqrt(P(&p, nt_binary_scalar_ex(NT_OP_ADD, P(&p, nt_mul(q, q)), 1, NT_SCALAR_FLOAT)))))) : NULL;
  nt_Tensor *ia = h ? P(&p, nt_binary_scalar_ex(NT_OP_EQ, a, INFINITY, NT_SCALAR_FLOAT)) : NULL;
  nt_Tensor *ib = ia ? P(&p, nt_binary_scalar_ex(NT_OP_EQ, b, INFINITY, NT_SCALAR_FLOAT)) : NULL;
  nt_Tensor *inf = ib ? P(&p, nt_binary(NT_OP_LOGICAL_OR, ia, ib)) : NULL;
  nt_Tensor *r = inf ? finish(&p, P(&p, nt_where(inf, P(&p, nt_full_like(h, INFINITY)), h))) : finish(&p, NULL);
  nt_set_grad_enabled(prev);
  if (r && nt_needs_grad(1, &z)) {
    nt_Node *n = nt_record(r, "AbsBackward", cabs_backward, 1, &z);
    if (!n || nt_node_save(n, r) < 0) { nt_release(r); return NULL; }
  }
  return r;
}

/* angle = atan2(im, re): computed on the host (no atan2 kernel); gradient
** g (-im + i re)/|z|^2, 0 at z = 0 (torch) */
static int angle_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *z = n->in[0];
  Pool p = {0};
  nt_Tensor *v = P(&p, nt_view_as_real(z)), *sq = v ? P(&p, nt_mul(v, v)) : NULL;
  nt_Tensor *m = sq ? P(&p, nt_sum(sq, (int[]){ z->ndim }, 1, false)) : NULL;
  nt_Tensor *zero = m ? P(&p, nt_eq(m, P(&p, nt_zeros_like(m)))) : NULL;
  nt_Tensor *den = zero ? P(&p, nt_where(zero, P(&p, nt_ones_like(m)), m)) : NULL;
  nt_Tensor *w = den ? P(&p, nt_div(g, den)) : NULL;
  nt_Tensor *re = w ? P(&p, nt_neg(P(&p, nt_mul(w, P(&p, nt_imag(z)))))) : NULL;
  nt_Tensor *im = re ? P(&p, nt_mul(w, P(&p, nt_real(z)))) : NULL;
  gin[0] = im && !p.bad ? pack2(re, im) : NULL;
  pool_free(&p);
  return gin[0] ? 0 : -1;
}
nt_Tensor *nt_angle(nt_Tensor *z) {
  bool cplx = nt_dtype_is_complex(z->dtype);
  if (!cplx && !nt_dtype_is_float(z->dtype)) NT_FAIL_NULL("angle: expected a floating or complex tensor, got %s", nt_dtype_name(z->dtype));
  bool prev = nt_set_grad_enabled(false);
  Pool p = {0};
  nt_Tensor *h = P(&p, nt_to_device(z, NT_CPU)), *c = h ? P(&p, nt_contiguous(h)) : NULL;
  nt_DType od = cplx ? nt_complex_part_dtype(z->dtype) : z->dtype;
  nt_Tensor *o = c ? P(&p, nt_empty(z->shape, z->ndim, od == NT_F64 ? NT_F64 : NT_F32, NT_CPU)) : NULL;
  if (o) {
    const char *src = nt_base(c);
    for (int64_t i = 0; i < z->numel; i++) {
      double re, im;
      if (z->dtype == NT_C64) { re = ((const float *)src)[2 * i]; im = ((const float *)src)[2 * i + 1]; }
      else if (z->dtype == NT_C128) { re = ((const double *)src)[2 * i]; im = ((const double *)src)[2 * i + 1]; }
      else { re = nt_load_as_double(src + i * (int64_t)nt_dtype_size(z->dtype), z->dtype); im = 0; }
      double a = cplx ? atan2(im, re) : re != re ? re : re < 0 ? M_PI : 0;   /* real: torch's 0 / pi, NaN kept */
      if (o->dtype == NT_F64) ((double *)nt_base(o))[i] = a; else ((float *)nt_base(o))[i] = (float)a;
    }
  }
  nt_Tensor *r = o ? P(&p, nt_to_dtype(o, od)) : NULL;
  r = r ? P(&p, nt_to_device(r, z->device)) : NULL;
  r = finish(&p, r);
  nt_set_grad_enabled(prev);
  if (r && cplx && nt_needs_grad(1, &z)) {
    if (!nt_record(r, "AngleBackward", angle_backward, 1, &z)) { nt_release(r); return NULL; }
  }
  /* real input: the gradient is zero (torch), so nothing is recorded */
  return r;
}

/* ---- arithmetic --------------------------------------------------------------- */
/* re/im parts of an operand of the complex result dtype cd (im NULL: a real operand) */
static int parts(Pool *p, nt_Tensor *x, nt_DType cd, nt_Tensor **re, nt_Tensor **im) {
  if (nt_dtype_is_complex(x->dtype)) {
    nt_Tensor *c = P(p, nt_complex_to_dtype(x, cd));
    *re = c ? P(p, nt_real(c)) : NULL;
    *im = c ? P(p, nt_imag(c)) : NULL;
  } else {
    *re = P(p, nt_to_dtype(x, nt_complex_part_dtype(cd)));
    *im = NULL;
  }
  return p->bad ? -1 : 0;
}

static const char *op_word(int op) { return nt_op_name(op); }

/* (ar + i ai) op (br + i bi); a missing imaginary part is 0 and is skipped */
static nt_Tensor *combine(Pool *p, int op, nt_Tensor *ar, nt_Tensor *ai, nt_Tensor *br, nt_Tensor *bi) {
  nt_Tensor *re = NULL, *im = NULL;
  switch (op) {
    case NT_OP_ADD: case NT_OP_SUB:
      re = P(p, nt_binary(op, ar, br));
      im = ai && bi ? P(p, nt_binary(op, ai, bi)) : ai ? ai : bi ? P(p, op == NT_OP_SUB ? nt_neg(bi) : nt_retain(bi)) : NULL;
      break;
    case NT_OP_MUL:
      if (ai && bi) {
        re = P(p, nt_sub(P(p, nt_mul(ar, br)), P(p, nt_mul(ai, bi))));
        im = P(p, nt_add(P(p, nt_mul(ar, bi)), P(p, nt_mul(ai, br))));
      } else if (ai) { re = P(p, nt_mul(ar, br)); im = P(p, nt_mul(ai, br)); }
      else { re = P(p, nt_mul(ar, br)); im = P(p, nt_mul(ar, bi)); }
      break;
    case NT_OP_DIV:
      if (!bi) { re = P(p, nt_div(ar, br)); im = P(p, nt_div(ai, br)); break; }
      {   /* (ar + i ai)(br - i bi) / (br^2 + bi^2) */
        nt_Tensor *d = P(p, nt_add(P(p, nt_mul(br, br)), P(p, nt_mul(bi, bi))));
        nt_Tensor *nr = ai ? P(p, nt_add(P(p, nt_mul(ar, br)), P(p, nt_mul(ai, bi)))) : P(p, nt_mul(ar, br));
        nt_Tensor *ni = ai ? P(p, nt_sub(P(p, nt_mul(ai, br)), P(p, nt_mul(ar, bi)))) : P(p, nt_neg(P(p, nt_mul(ar, bi))));
        if (p->bad) return NULL;
        re = P(p, nt_div(nr, d)); im = P(p, nt_div(ni, d));
      }
      break;
    default:
      nt_error_set("%s is not supported for complex tensors (add, sub, mul, div are)", op_word(op));
      return NULL;
  }
  if (p->bad || !re || !im) return NULL;
  int64_t shape[NT_MAXDIM]; int nd;   /* the parts may broadcast differently: a real operand has no im */
  if (nt_broadcast_shapes(op_word(op), re->shape, re->ndim, im->shape, im->ndim, shape, &nd)) return NULL;
  if (nd >= NT_MAXDIM) { nt_error_set("%s: complex tensors have at most %d axes", op_word(op), NT_MAXDIM - 1); return NULL; }
  nt_Tensor *er = P(p, nt_broadcast_to(re, shape, nd)), *ei = er ? P(p, nt_broadcast_to(im, shape, nd)) : NULL;
  return ei ? P(p, pack2(er, ei)) : NULL;
}

nt_Tensor *nt_complex_binary(int op, nt_Tensor *a, nt_Tensor *b) {
  if (op != NT_OP_ADD && op != NT_OP_SUB && op != NT_OP_MUL && op != NT_OP_DIV)
    NT_FAIL_NULL("%s is not supported for complex tensors (add, sub, mul, div are)", op_word(op));
  if (a->device != b->device && a->ndim && b->ndim)
    NT_FAIL_NULL("%s: expected all tensors on the same device, got %s and %s", op_word(op), nt_device_name(a->device), nt_device_name(b->device));
  nt_DType cd = nt_result_type(a, b);
  if (!nt_dtype_is_complex(cd)) cd = nt_complex_dtype_of(cd);
  Pool p = {0};
  nt_Tensor *ma = a, *mb = b;   /* a 0-d CPU operand joins the other's device */
  if (a->device != b->device) {
    if (a->ndim == 0) ma = P(&p, nt_to_device(a, b->device)); else mb = P(&p, nt_to_device(b, a->device));
    if (p.bad) return finish(&p, NULL);
  }
  nt_Tensor *ar, *ai, *br, *bi;
  if (parts(&p, ma, cd, &ar, &ai) || parts(&p, mb, cd, &br, &bi)) return finish(&p, NULL);
  return finish(&p, combine(&p, op, ar, ai, br, bi));
}

nt_Tensor *nt_complex_binary_scalar(int op, nt_Tensor *t, double s, bool scalar_first) {
  if (op != NT_OP_ADD && op != NT_OP_SUB && op != NT_OP_MUL && op != NT_OP_DIV)
    NT_FAIL_NULL("%s is not supported for complex tensors (add, sub, mul, div are)", op_word(op));
  Pool p = {0};
  nt_Tensor *ar, *ai;
  if (parts(&p, t, t->dtype, &ar, &ai)) return finish(&p, NULL);
  nt_Tensor *sv = P(&p, nt_full(NULL, 0, s, ar->dtype, ar->device));
  if (!sv) return finish(&p, NULL);
  nt_Tensor *r = scalar_first ? combine(&p, op, sv, NULL, ar, ai) : combine(&p, op, ar, ai, sv, NULL);
  return finish(&p, r);
}

nt_Tensor *nt_complex_unary(int op, nt_Tensor *z) {
  if (op == NT_OP_ABS) return nt_cabs(z);
  if (op != NT_OP_NEG) NT_FAIL_NULL("%s is not supported for complex tensors (neg, abs, angle, conj, real, imag are)", nt_op_name(op));
  Pool p = {0};
  nt_Tensor *v = P(&p, nt_view_as_real(z)), *n = v ? P(&p, nt_neg(v)) : NULL;
  return finish(&p, n ? P(&p, pack(n)) : NULL);
}

/* sum/mean over the axes of z = over the same axes of its real view, whose
** last axis (the pair) is kept */
nt_Tensor *nt_complex_reduce(int op, nt_Tensor *z, const int *axes, int naxes, bool keepdims) {
  if (op != NT_OP_SUM && op != NT_OP_MEAN)
    NT_FAIL_NULL("%s is not supported for complex tensors (sum and mean are)", nt_op_name(op));
  int ax[NT_MAXDIM], n = 0;
  if (!axes) { for (int i = 0; i < z->ndim; i++) ax[n++] = i; }
  else {
    if (naxes > NT_MAXDIM) NT_FAIL_NULL("sum: too many axes");
    for (int i = 0; i < naxes; i++) {
      int a = axes[i] < 0 ? axes[i] + z->ndim : axes[i];
      if (a < 0 || a >= z->ndim) NT_FAIL_NULL("sum: axis %d is out of range for a %dD tensor", axes[i], z->ndim);
      ax[n++] = a;
    }
  }
  Pool p = {0};
  nt_Tensor *v = P(&p, nt_view_as_real(z));
  nt_Tensor *s = v ? P(&p, (op == NT_OP_SUM ? nt_sum : nt_mean)(v, ax, n, keepdims)) : NULL;
  return finish(&p, s ? P(&p, pack(s)) : NULL);
}
