/*
** lib/ltensor.c — tensors as language values: argument conversion, numeric
** literals, operators, indexing and assignment, fields, printing and rich
** display, serialization (the evaluator's hooks of ltvalue.h), and the
** tensor library's opener, nbopen_tensor, which registers the tables of
** ltops.c, ltgrad.c, loptim.c, ltio.c and ltcompose.c.  Everything is glue
** over tensor/tensor.h and the public nbapi.h.
*/
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ltensor.h"
#include "lang/lib/nblib.h"
#include "tensor/nn/nn.h"

void nbO_retain_tensor(void *t) { nt_retain(t); }
void nbO_release_tensor(void *t) { nt_release(t); }

int nbT_err(nb_VM *vm) {
  /* a kernel stopped by the interrupt flag (nt_set_interrupt_flag) */
  if (nb_vm_interrupted(vm)) return nbV_interrupt_error(vm);
  const char *m = nt_error_msg();
  return nb_error_kind(vm, "TensorError", "%s", m && *m ? m : "tensor operation failed");
}
int nbT_settle(nb_VM *vm, nb_Value t) { return nt_settle(T(t)) ? nbT_err(vm) : NB_OK; }

/* wraps a new tensor reference as the result */
int nbT_ret(nb_VM *vm, nt_Tensor *t, nb_Value *out) {
  if (!t) return nbT_err(vm);
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* ------------------------------------------------------------ conversions */
void nbT_tmp_free(Tmp *tp) { for (int i = 0; i < tp->n; i++) nt_release(tp->t[i]); tp->n = 0; }
nt_Tensor *nbT_tmp_keep(Tmp *tp, nt_Tensor *t) { if (t && tp->n < 16) tp->t[tp->n++] = t; return t; }


/* A tensor from a tensor (borrowed), number, bool or (nested) list. */
nt_Tensor *nbT_arg(nb_VM *vm, Tmp *tp, const char *fname, const char *what, nb_Value v) {
  nt_Tensor *t = NULL;
  switch (v.t) {
  case NB_TTENSOR: return T(v);
  case NB_TNUM: t = nt_scalar(v.u.n, nbT_num_isint(v) ? NT_I64 : NT_F32); break;
  case NB_TBOOL: t = nt_scalar(v.u.b, NT_BOOL); break;
  case NB_TLIST: if (nbT_from_list(vm, v, NT_F32, false, &t)) return NULL; break;
  default:
    nb_error_kind(vm, "TypeError", "%s: expected a tensor for '%s', got %s", fname, what, nb_typename(v));
    return NULL;
  }
  if (!t) { nbT_err(vm); return NULL; }
  if (!nbT_tmp_keep(tp, t)) { nt_release(t); nb_error(vm, "%s: too many temporary tensors", fname); return NULL; }
  return t;
}

int nbT_dtype_arg(nb_VM *vm, const char *fname, nb_Value v, nt_DType dflt, nt_DType *out) {
  if (v.t == NB_TNIL) { *out = dflt; return NB_OK; }
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: dtype must be a string like \"f32\", got %s", fname, nb_typename(v));
  int d = nt_dtype_from_name(nb_str(v)->data);
  if (d < 0) return nb_error_kind(vm, "ValueError", "%s: unknown dtype \"%s\" (expected one of f32, f64, f16, bf16, i32, i64, u8, bool)", fname, nb_str(v)->data);
  *out = (nt_DType)d;
  return NB_OK;
}

/* set_default_device is a setting of the program, so it lives per VM
** (nb_vm_libdata): a second VM in the process starts on the CPU.  The
** block is zeroed on first use, and NT_CPU is 0. */
typedef struct TensorVM { nt_Device default_device; } TensorVM;
static const char tensor_vm_key;   /* its address names this library's per-VM block */
_Static_assert(NT_CPU == 0, "a zeroed TensorVM means the CPU");
void nbT_set_default_device(nb_VM *vm, nt_Device d) {
  ((TensorVM *)nb_vm_libdata(vm, &tensor_vm_key, sizeof(TensorVM)))->default_device = d;
}
int nbT_device_arg(nb_VM *vm, const char *fname, nb_Value v, nt_Device *out) {
  if (v.t == NB_TNIL) { *out = ((TensorVM *)nb_vm_libdata(vm, &tensor_vm_key, sizeof(TensorVM)))->default_device; return NB_OK; }
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: device must be \"cpu\" or \"cuda\", got %s", fname, nb_typename(v));
  const char *s = nb_str(v)->data;
  if (!strcmp(s, "cpu")) { *out = NT_CPU; return NB_OK; }
  if (!strncmp(s, "cuda", 4)) { *out = NT_CUDA; return NB_OK; }
  return nb_error_kind(vm, "ValueError", "%s: unknown device \"%s\" (expected \"cpu\" or \"cuda\")", fname, s);
}

int nbT_int_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int64_t *out) {
  double d;
  if (v.t == NB_TNUM) d = v.u.n;
  else if (v.t == NB_TTENSOR && T(v)->numel == 1 && !nt_dtype_is_float(T(v)->dtype)) { if (nt_item(T(v), &d)) return nbT_err(vm); }
  else return nb_error_kind(vm, "TypeError", "%s: '%s' must be an integer, got %s", fname, what, nb_typename(v));
  if (d != floor(d) || fabs(d) > 9e18) return nb_error_kind(vm, "ValueError", "%s: '%s' must be an integer, got %g", fname, what, d);
  *out = (int64_t)d;
  return NB_OK;
}
int nbT_narrow_int(nb_VM *vm, const char *fname, const char *what, int64_t v, int *out) {
  if (v < INT_MIN || v > INT_MAX) return nb_error_kind(vm, "ValueError", "%s: '%s' = %lld is out of range (it must fit in 32 bits)", fname, what, (long long)v);
  *out = (int)v;
  return NB_OK;
}
int nbT_intc_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int *out) {
  int64_t w;
  return nbT_int_arg(vm, fname, what, v, &w) ? NB_ERR : nbT_narrow_int(vm, fname, what, w, out);
}
int nbT_num_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, double *out) {
  if (v.t == NB_TNUM) { *out = v.u.n; return NB_OK; }
  if (v.t == NB_TBOOL) { *out = v.u.b; return NB_OK; }
  if (v.t == NB_TTENSOR && T(v)->numel == 1) return nt_item(T(v), out) ? nbT_err(vm) : NB_OK;
  return nb_error_kind(vm, "TypeError", "%s: '%s' must be a number, got %s", fname, what, nb_typename(v));
}

/* A list of ints from a number, a list of numbers, or an int tensor. */
int nbT_ints_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int64_t *out, int max, int *n) {
  if (v.t == NB_TNUM) { *n = 1; return nbT_int_arg(vm, fname, what, v, out); }
  if (v.t == NB_TLIST) {
    nb_List *l = v.u.p;
    if (l->n > max) return nb_error_kind(vm, "ValueError", "%s: '%s' has %d entries (at most %d)", fname, what, l->n, max);
    for (int i = 0; i < l->n; i++) if (nbT_int_arg(vm, fname, what, l->items[i], &out[i])) return NB_ERR;
    *n = l->n; return NB_OK;
  }
  if (v.t == NB_TTENSOR) {
    nt_Tensor *t = T(v);
    if (t->ndim > 1) return nb_error_kind(vm, "TypeError", "%s: '%s' must be a list of integers", fname, what);
    if (t->numel > max) return nb_error_kind(vm, "ValueError", "%s: '%s' has %lld entries (at most %d)", fname, what, (long long)t->numel, max);
    if (nt_dtype_is_float(t->dtype)) {
      /* a bracket literal with a float in it ([b, t, c / h]) is a float
      ** tensor: its values count when integral and exact in its dtype (as a
      ** single integral float does) */
      double lim = t->dtype == NT_F64 ? 9007199254740992.0 : t->dtype == NT_F32 ? 16777216.0 : t->dtype == NT_F16 ? 2048.0 : 256.0;
      double d[NT_MAXDIM * 4 + 1024];
      if (t->numel > (int64_t)(sizeof d / sizeof d[0])) return nb_error_kind(vm, "TypeError", "%s: '%s' must be a list of integers", fname, what);
      if (nt_to_host(t, d, NT_F64)) return nbT_err(vm);
      for (int64_t i = 0; i < t->numel; i++) {
        if (d[i] != floor(d[i]) || !(fabs(d[i]) <= lim)) return nb_error_kind(vm, "TypeError", "%s: '%s' must be a list of integers, got %g in a %s tensor", fname, what, d[i], nt_dtype_name(t->dtype));
        out[i] = (int64_t)d[i];
      }
      *n = (int)t->numel; return NB_OK;
    }
    if (nt_to_host(t, out, NT_I64)) return nbT_err(vm);
    *n = (int)t->numel; return NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "%s: '%s' must be an integer or a list of integers, got %s", fname, what, nb_typename(v));
}

/* axis=nil → all; a number; or a list */
int nbT_axes_arg(nb_VM *vm, const char *fname, nb_Value v, int *axes, int *n) {
  if (v.t == NB_TNIL) { *n = 0; return NB_OK; }
  int64_t tmp[NT_MAXDIM]; int k;
  if (nbT_ints_arg(vm, fname, "axis", v, tmp, NT_MAXDIM, &k)) return NB_ERR;
  for (int i = 0; i < k; i++) if (nbT_narrow_int(vm, fname, "axis", tmp[i], &axes[i])) return NB_ERR;
  *n = k;
  if (k == 0) return nb_error_kind(vm, "ValueError", "%s: axis list is empty", fname);
  return NB_OK;
}

/* shape from variadic numbers, or one list/tensor argument */
int nbT_shape_arg(nb_VM *vm, const char *fname, nb_Value *vals, int n, int64_t *shape, int *ndim) {
  if (n == 1 && (vals[0].t == NB_TLIST || vals[0].t == NB_TTENSOR)) return nbT_ints_arg(vm, fname, "shape", vals[0], shape, NT_MAXDIM, ndim);
  if (n > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "%s: at most %d dimensions, got %d", fname, NT_MAXDIM, n);
  for (int i = 0; i < n; i++) {
    if (nbT_int_arg(vm, fname, "shape", vals[i], &shape[i])) return NB_ERR;
    if (shape[i] < 0) return nb_error_kind(vm, "ValueError", "%s: negative dimension %lld in shape", fname, (long long)shape[i]);
  }
  *ndim = n;
  return NB_OK;
}

/* view's shape: as nbT_shape_arg, and one size may be -1 (inferred from
** the element count, torch's Tensor.view); other negatives, or a second -1,
** are errors that say which */
int nbT_view_shape_arg(nb_VM *vm, const char *fname, nb_Value *vals, int n, int64_t *shape, int *ndim) {
  if (n == 1 && (vals[0].t == NB_TLIST || vals[0].t == NB_TTENSOR)) { if (nbT_ints_arg(vm, fname, "shape", vals[0], shape, NT_MAXDIM, ndim)) return NB_ERR; }
  else {
    if (n > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "%s: at most %d dimensions, got %d", fname, NT_MAXDIM, n);
    for (int i = 0; i < n; i++) if (nbT_int_arg(vm, fname, "shape", vals[i], &shape[i])) return NB_ERR;
    *ndim = n;
  }
  int infer = -1;
  for (int i = 0; i < *ndim; i++) {
    if (shape[i] == -1 && infer >= 0) return nb_error_kind(vm, "ValueError", "%s: only one dimension can be inferred (-1 at positions %d and %d)", fname, infer, i);
    if (shape[i] == -1) infer = i;
    else if (shape[i] < 0) return nb_error_kind(vm, "ValueError", "%s: invalid shape dimension %lld at position %d (sizes are >= 0, or -1 for one inferred size)", fname, (long long)shape[i], i);
  }
  return NB_OK;
}

/* numeric (nested) list → tensor.  Ints → i64, any float → f32, all bools →
** bool (torch.tensor's inference); nested lists must be rectangular. */
typedef struct Flat { double *v; size_t n, cap; int64_t shape[NT_MAXDIM]; int ndim; bool isfloat, allbool, anybool; } Flat;
static int flatten_list(nb_VM *vm, nb_Value v, Flat *fl, int depth) {
  if (v.t == NB_TLIST) {
    nb_List *l = v.u.p;
    if (depth >= NT_MAXDIM) return nb_error_kind(vm, "ValueError", "tensor: nested more than %d levels", NT_MAXDIM);
    if (depth == fl->ndim) { fl->shape[depth] = l->n; fl->ndim = depth + 1; }
    else if (fl->shape[depth] != l->n || depth >= fl->ndim) return nb_error_kind(vm, "ValueError", "tensor: ragged nested list (length %d where %lld was expected at depth %d)", l->n, (long long)fl->shape[depth], depth);
    for (int i = 0; i < l->n; i++) if (flatten_list(vm, l->items[i], fl, depth + 1)) return NB_ERR;
    return NB_OK;
  }
  if (v.t == NB_TTENSOR) {
    nt_Tensor *t = T(v);
    if (depth + t->ndim > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "tensor: more than %d dimensions", NT_MAXDIM);
    for (int d = 0; d < t->ndim; d++) {
      if (depth + d == fl->ndim) { fl->shape[depth + d] = t->shape[d]; fl->ndim++; }
      else if (fl->shape[depth + d] != t->shape[d]) return nb_error_kind(vm, "ValueError", "tensor: ragged nested tensors");
    }
    if (depth + t->ndim != fl->ndim) return nb_error_kind(vm, "ValueError", "tensor: ragged nested tensors");
    if (nt_dtype_is_float(t->dtype)) fl->isfloat = true;
    if (t->dtype != NT_BOOL) fl->allbool = false;
    if (fl->n + (size_t)t->numel > fl->cap) { fl->cap = (fl->n + (size_t)t->numel) * 2; fl->v = realloc(fl->v, fl->cap * sizeof(double)); if (!fl->v) return nb_error(vm, "out of memory"); }
    if (nt_to_host(t, fl->v + fl->n, NT_F64)) return nbT_err(vm);
    fl->n += (size_t)t->numel;
    return NB_OK;
  }
  if (depth != fl->ndim) return nb_error_kind(vm, "ValueError", "tensor: ragged nested list (a number where a list was expected)");
  double d;
  /* an int only when exactly representable: 10**60 makes a float tensor */
  if (v.t == NB_TNUM) { d = v.u.n; fl->allbool = false; if (!nbT_num_isint(v)) fl->isfloat = true; }
  else if (v.t == NB_TBOOL) { d = v.u.b; fl->anybool = true; }
  else return nb_error_kind(vm, "TypeError", "tensor: elements must be numbers, got %s", nb_typename(v));
  if (fl->n == fl->cap) { fl->cap = fl->cap ? fl->cap * 2 : 16; fl->v = realloc(fl->v, fl->cap * sizeof(double)); if (!fl->v) return nb_error(vm, "out of memory"); }
  fl->v[fl->n++] = d;
  return NB_OK;
}
int nbT_from_list(nb_VM *vm, nb_Value list, nt_DType want, bool have_want, nt_Tensor **out) {
  Flat fl; memset(&fl, 0, sizeof fl);
  fl.allbool = true;
  if (flatten_list(vm, list, &fl, 0)) { free(fl.v); return NB_ERR; }
  nt_DType dt = have_want ? want : fl.isfloat ? NT_F32 : (fl.allbool && fl.n > 0) ? NT_BOOL : NT_I64;
  *out = nt_from_buffer(fl.v ? fl.v : (double[1]){0}, NT_F64, fl.shape, fl.ndim, dt);
  free(fl.v);
  return *out ? NB_OK : nbT_err(vm);
}

int nbT_literal(nb_VM *vm, nb_Value list, nb_Value *out) {
  nt_Tensor *t;
  if (nbT_from_list(vm, list, NT_F32, false, &t)) return NB_ERR;
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* ------------------------------------------------------------ printing */
/* Printing cannot raise, but reading the values can fail: a device tensor's
** copy reports an error the device found earlier (an index out of range in
** the kernel that made it, at this synchronisation: the op itself returned a
** tensor), or memory runs out.  The message is shown in place of the values
** -- a bare "<tensor>" hid it, and the error was consumed. */
void nbT_format(nb_Buf *b, void *t) {
  char *s = nt_format(t);
  if (s) { nbB_puts(b, s); free(s); } else nbB_printf(b, "<tensor: %s>", nt_error_msg());
}

void nbT_display(nb_VM *vm, nb_Value v, nb_Buf *html) {
  (void)vm;
  nt_Tensor *t = T(v);
  char shp[128]; nt_shape_str(t->shape, t->ndim, shp, sizeof shp);
  /* a device tensor's values too (nt_to_host copies them; printing does the
  ** same), its device in the caption */
  if (t->ndim >= 1 && t->ndim <= 2 && t->numel <= 400) {
    int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->shape[t->ndim - 1];
    double *buf = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
    if (!buf || nt_to_host(t, buf, NT_F64)) { free(buf); return; }
    nbB_printf(html, "<table class=\"nabla-tensor\"><caption>tensor %s %s%s%s</caption>", shp, nt_dtype_name(t->dtype),
               t->device == NT_CPU ? "" : " on ", t->device == NT_CPU ? "" : nt_device_name(t->device));
    bool isf = nt_dtype_is_float(t->dtype);
    for (int64_t r = 0; r < rows; r++) {
      nbB_puts(html, "<tr>");
      for (int64_t c = 0; c < cols; c++) {
        double x = buf[r * cols + c];
        if (t->dtype == NT_BOOL) nbB_printf(html, "<td>%s</td>", x != 0 ? "true" : "false");
        else if (isf) nbB_printf(html, "<td>%.4g</td>", x);
        else nbB_printf(html, "<td>%.0f</td>", x);
      }
      nbB_puts(html, "</tr>");
    }
    nbB_puts(html, "</table>");
    free(buf);
  } else {
    nbB_printf(html, "<pre>tensor %s %s on %s</pre>", shp, nt_dtype_name(t->dtype), nt_device_name(t->device));
  }
}

void nbT_describe(nb_VM *vm, nb_Value v, nb_Buf *out) {
  (void)vm;
  nt_Tensor *t = T(v);
  char shp[128]; nt_shape_str(t->shape, t->ndim, shp, sizeof shp);
  nbB_printf(out, "tensor shape=%s dtype=%s device=%s%s\n", shp, nt_dtype_name(t->dtype), nt_device_name(t->device), t->requires_grad ? " requires_grad=true" : "");
  if (t->numel > 0 && t->dtype != NT_BOOL) {
    bool g = nt_set_grad_enabled(false);
    nt_Tensor *mn = nt_min(t, NULL, 0, false), *mx = nt_max(t, NULL, 0, false), *mean = nt_dtype_is_float(t->dtype) ? nt_mean(t, NULL, 0, false) : NULL;
    double a = 0, b = 0, c = 0;
    if (mn && mx && !nt_item(mn, &a) && !nt_item(mx, &b)) {
      nbB_printf(out, "min=%.6g max=%.6g", a, b);
      if (mean && !nt_item(mean, &c)) nbB_printf(out, " mean=%.6g", c);
      nbB_putc(out, '\n');
    }
    nt_release(mn); nt_release(mx); nt_release(mean);
    nt_set_grad_enabled(g);
  }
}

/* ------------------------------------------------------------ operators */
static int binop_id(int op) {
  switch (op) {
  case OP_ADD: return NT_OP_ADD; case OP_SUB: return NT_OP_SUB; case OP_MUL: return NT_OP_MUL;
  case OP_DIV: return NT_OP_DIV; case OP_MOD: return NT_OP_MOD; case OP_POW: return NT_OP_POW; case OP_IDIV: return NT_OP_FLOORDIV;
  case OP_EQ: return NT_OP_EQ; case OP_NE: return NT_OP_NE; case OP_LT: return NT_OP_LT;
  case OP_LE: return NT_OP_LE; case OP_GT: return NT_OP_GT; case OP_GE: return NT_OP_GE;
  default: return -1;
  }
}

int nbT_binop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out) {
  if (op == OP_MATMUL) {
    if (a.t != NB_TTENSOR || b.t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "@ needs two tensors, got %s and %s", nb_typename(a), nb_typename(b));
    return nbT_ret(vm, nt_matmul(T(a), T(b)), out);
  }
  int id = binop_id(op);
  if (a.t == NB_TTENSOR && b.t == NB_TTENSOR) return nbT_ret(vm, nt_binary(id, T(a), T(b)), out);
  nb_Value tv = a.t == NB_TTENSOR ? a : b, sv = a.t == NB_TTENSOR ? b : a;
  if (sv.t == NB_TNUM || sv.t == NB_TBOOL) {
    double s = sv.t == NB_TNUM ? sv.u.n : sv.u.b;
    /* an int scalar promotes as an integer, a float as a float (PyTorch's
    ** rule); a negative int power is taken as a float (x ** -1 of an int
    ** tensor gives f32 where torch raises) */
    bool isint = (sv.t == NB_TBOOL || nbT_num_isint(sv)) && !(op == OP_POW && a.t == NB_TTENSOR && s < 0);
    int flags = (a.t != NB_TTENSOR ? NT_SCALAR_FIRST : 0) | (isint ? NT_SCALAR_INT : NT_SCALAR_FLOAT);
    return nbT_ret(vm, nt_binary_scalar_ex(id, T(tv), s, flags), out);
  }
  if (op == OP_EQ || op == OP_NE) { *out = nb_bool(op == OP_NE); return NB_OK; }
  return nb_error_kind(vm, "TypeError", "unsupported operand types for tensor arithmetic: %s and %s", nb_typename(a), nb_typename(b));
}

/* x op= v where x holds a tensor: x is updated IN PLACE, as PyTorch's
** x += v, so every alias of the tensor (a model's field, a list of
** parameters) sees the update: `no_grad { for p in params { p -= lr * p.grad } }`
** trains the model.  The result is computed out of place, then copied into x
** through nt_copy_, which bumps x's version and records CopySlicesBackward
** when grad mode is on; it refuses a leaf that requires grad (updates belong
** in no_grad), as torch does.  When the operator's backward reads x's old
** values (* / ** % //), they are taken from a clone, so the in-place write
** cannot invalidate them.  Like torch, the result must fit x: its shape
** (v may broadcast to x, not x to v) and its dtype (no float into an int or
** bool tensor, no int into a bool tensor). */
int nbT_update(nb_VM *vm, int op, const char *opname, nb_Value x, nb_Value v) {
  nt_Tensor *t = T(x), *c = NULL;
  bool tracked = nt_grad_enabled() && (t->requires_grad || (v.t == NB_TTENSOR && T(v)->requires_grad));
  bool reads_x = op == OP_MUL || op == OP_DIV || op == OP_POW || op == OP_MOD || op == OP_IDIV;
  /* the result's graph must not hold x itself (x's new history will hold the
  ** result: a reference cycle), so it reads x through an alias (nt_alias) */
  if (tracked && t->grad_fn) {
    nt_Tensor *al = nt_alias(t);
    c = al && reads_x ? nt_clone(al) : al ? nt_retain(al) : NULL;
    nt_release(al);
    if (!c) return nbT_err(vm);
  } else if (tracked && reads_x && !(c = nt_clone(t))) return nbT_err(vm);
  nb_Value r, lhs = c ? nb_obj(NB_TTENSOR, c) : x;
  int st = nbT_binop(vm, op, lhs, v, &r);
  nt_release(c);
  if (st) return st;
  nt_Tensor *rt = T(r);
  char a[128], b[128];
  if (rt->ndim != t->ndim || memcmp(rt->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))
    st = nb_error_kind(vm, "ValueError", "%s on a tensor updates it in place: the result has shape %s, which is not the tensor's shape %s",
                       opname, nt_shape_str(rt->shape, rt->ndim, a, sizeof a), nt_shape_str(t->shape, t->ndim, b, sizeof b));
  else if ((nt_dtype_is_float(rt->dtype) && !nt_dtype_is_float(t->dtype)) || (t->dtype == NT_BOOL && rt->dtype != NT_BOOL))
    st = nb_error_kind(vm, "TypeError", "%s on a tensor updates it in place: the result's dtype %s cannot be stored into a tensor of dtype %s "
                       "(write x = x %c v to make a new tensor)", opname, nt_dtype_name(rt->dtype), nt_dtype_name(t->dtype), opname[0]);
  else if (nt_copy_(t, rt))
    st = nbT_err(vm);
  nb_decref(r);
  return st;
}

int nbT_neg(nb_VM *vm, nb_Value a, nb_Value *out) { return nbT_ret(vm, nt_neg(T(a)), out); }

int nbT_truthy(nb_VM *vm, nb_Value t, bool *out) {
  if (T(t)->numel != 1) return nb_error_kind(vm, "ValueError", "the truth value of a tensor with %lld elements is ambiguous (use any(x) or all(x))", (long long)T(t)->numel);
  double d;
  if (nt_item(T(t), &d)) return nbT_err(vm);
  *out = d != 0;
  return NB_OK;
}

int nbT_len(nb_VM *vm, nb_Value t, double *out) {
  if (T(t)->ndim == 0) return nb_error_kind(vm, "TypeError", "len() of a 0-d tensor");
  *out = (double)T(t)->shape[0];
  return NB_OK;
}

/* ------------------------------------------------------------ indexing */
/* an index, slice bound or step as int64: beyond +-2^62 every value acts the
** same (no axis is that long), and converting a larger double is undefined
** (x[1e300:] was the whole axis) */
static int64_t clamp_index(double d) {
  const double lim = 4611686018427387904.0;
  return d > lim ? (int64_t)lim : d < -lim ? -(int64_t)lim : (int64_t)d;
}
static int64_t slice_part(double d) { return isnan(d) ? NT_NONE : clamp_index(floor(d)); }

/* Fills out[] with the basic entries (ints, ranges, nil, "...") and counts
** them in *nb.  Tensor indices (a 0-d integer tensor is an int) are left out
** of out[]: tidx[j] stands before basic entry tpos[j]; *nt counts them. */
typedef struct TIdx { int nt, tpos[NT_MAXDIM]; nt_Tensor *t[NT_MAXDIM], *own[NT_MAXDIM]; } TIdx;
static int build_index(nb_VM *vm, nb_Value *idx, int n, nt_Index *out, int *nb, TIdx *ti) {
  ti->nt = 0;
  int k = 0;
  for (int i = 0; i < n; i++) {
    nb_Value v = idx[i];
    if (v.t == NB_TNUM) {
      if (v.u.n != floor(v.u.n)) return nb_error_kind(vm, "TypeError", "tensor index must be an integer, got %g", v.u.n);
      out[k].kind = NT_IDX_INT; out[k++].start = clamp_index(v.u.n);
    } else if (v.t == NB_TRANGE) {
      nb_Range *r = v.u.p;
      /* as torch: x[0.5:3] and x[::1.5] are errors, not silently truncated */
      if ((!isnan(r->start) && r->start != floor(r->start)) || (!isnan(r->stop) && r->stop != floor(r->stop)) || (!isnan(r->step) && r->step != floor(r->step)))
        return nb_error_kind(vm, "TypeError", "slice bounds and step of a tensor index must be integers");
      out[k].kind = NT_IDX_SLICE; out[k].start = slice_part(r->start); out[k].stop = slice_part(r->stop);
      out[k].step = isnan(r->step) ? 1 : clamp_index(r->step);
      if (out[k++].step == 0) return nb_error_kind(vm, "ValueError", "slice step must not be zero");
    } else if (v.t == NB_TNIL) {
      out[k++].kind = NT_IDX_NEWAXIS;
    } else if (v.t == NB_TTENSOR) {
      nt_Tensor *t = T(v);
      if (t->ndim == 0 && !nt_dtype_is_float(t->dtype) && t->dtype != NT_BOOL) {
        double d; if (nt_item(t, &d)) return nbT_err(vm);
        out[k].kind = NT_IDX_INT; out[k++].start = clamp_index(d);
      } else {
        if (ti->nt >= NT_MAXDIM) return nb_error_kind(vm, "IndexError", "too many tensor indices (at most %d)", NT_MAXDIM);
        ti->tpos[ti->nt] = k; ti->t[ti->nt++] = t;
      }
    } else if (v.t == NB_TSTR && !strcmp(nb_str(v)->data, "...")) {
      out[k++].kind = NT_IDX_ELLIPSIS;
    } else return nb_error_kind(vm, "TypeError", "cannot index a tensor with a %s", nb_typename(v));
  }
  *nb = k;
  return NB_OK;
}

/* PyTorch's rule for a tensor on a device indexed by integer tensors on the
** CPU (a bracket literal, x[[0, 2]], is one): the indices are moved to its
** device.  ti->own[j] holds the moved copy (released by index_own_free). */
static int index_to_device(nb_VM *vm, TIdx *ti, nt_Device dev) {
  for (int j = 0; j < ti->nt; j++) ti->own[j] = NULL;
  for (int j = 0; j < ti->nt; j++) {
    if (dev == NT_CPU || ti->t[j]->device != NT_CPU || ti->t[j]->dtype == NT_BOOL) continue;
    if (!(ti->own[j] = nt_to_device(ti->t[j], dev))) return nbT_err(vm);
    ti->t[j] = ti->own[j];
  }
  return NB_OK;
}
static void index_own_free(TIdx *ti) { for (int j = 0; j < ti->nt; j++) { nt_release(ti->own[j]); ti->own[j] = NULL; } }

/* x[i, a:b, nil, "...", t, u]: basic entries make a view; integer tensors and
** bool masks among them index like PyTorch (nt_index_adv: a copy) */
int nbT_index(nb_VM *vm, nb_Value tv, nb_Value *idx, int n, nb_Value *out) {
  nt_Index ix[NT_MAXDIM + 2];
  int nb;
  TIdx ti;
  if (n > NT_MAXDIM + 2) return nb_error_kind(vm, "IndexError", "too many indices for a tensor");
  if (build_index(vm, idx, n, ix, &nb, &ti)) return NB_ERR;
  if (!ti.nt) return nbT_ret(vm, nt_index(T(tv), ix, nb), out);
  if (index_to_device(vm, &ti, T(tv)->device)) { index_own_free(&ti); return NB_ERR; }
  int st = nbT_ret(vm, nt_index_adv(T(tv), ix, nb, ti.nt, ti.tpos, ti.t), out);
  index_own_free(&ti);
  return st;
}

/* base[idx] = v or += v (accumulate: tensor indices only); v a tensor, number, bool or list */
static int put_index(nb_VM *vm, nt_Tensor *t, nb_Value *idx, int n, nb_Value v, bool accumulate) {
  nt_Index ix[NT_MAXDIM + 2];
  int nb;
  TIdx ti;
  if (n > NT_MAXDIM + 2) return nb_error_kind(vm, "IndexError", "too many indices for a tensor");
  if (build_index(vm, idx, n, ix, &nb, &ti)) return NB_ERR;
  if (index_to_device(vm, &ti, t->device)) { index_own_free(&ti); return NB_ERR; }
  bool num = v.t == NB_TNUM || v.t == NB_TBOOL;
  double d = v.t == NB_TNUM ? v.u.n : v.t == NB_TBOOL ? v.u.b : 0;
  if (!ti.nt && num && !accumulate) return nt_index_fill(t, ix, nb, d) ? nbT_err(vm) : NB_OK;
  Tmp tp = {0};
  int st = NB_OK;
  /* a number takes the tensor's dtype and device (an f64 tensor keeps its precision) */
  nt_Tensor *src = num ? nbT_tmp_keep(&tp, nt_full(NULL, 0, d, t->dtype, t->device)) : nbT_arg(vm, &tp, "setindex", "value", v);
  if (!src) { nbT_tmp_free(&tp); index_own_free(&ti); return num ? nbT_err(vm) : NB_ERR; }
  if (ti.nt) { if (nt_index_put_adv(t, ix, nb, ti.nt, ti.tpos, ti.t, src, accumulate)) st = nbT_err(vm); }
  else if (!accumulate) { if (nt_index_put(t, ix, nb, src)) st = nbT_err(vm); }
  else {   /* x[basic] += v: the region plus v written back (differentiable like any write) */
    nt_Tensor *r = nt_index(t, ix, nb), *s = r ? nt_binary(NT_OP_ADD, r, src) : NULL;
    nt_release(r);
    if (!s || nt_index_put(t, ix, nb, s)) st = nbT_err(vm);
    nt_release(s);
  }
  nbT_tmp_free(&tp);
  index_own_free(&ti);
  return st;
}

/* x[idx] = v: one tensor-layer call per index form (nt_index_put /
** nt_index_fill; nt_index_put_adv for tensor indices, nt_mask_put for x[mask]),
** which writes and, under autograd, records the write (CopySlicesBackward /
** IndexPutBackward) or refuses it with a clear error. */
int nbT_setindex(nb_VM *vm, nb_Value tv, nb_Value *idx, int n, nb_Value v) {
  return put_index(vm, T(tv), idx, n, v, false);
}

/* index_put(x, idx, v, accumulate): a copy of x with x[idx] = v (or += v);
** idx is one index entry (a tensor) or a list of entries as between x[...] */
int nbT_index_put(nb_VM *vm, nt_Tensor *x, nb_Value idx, nb_Value v, bool accumulate, nb_Value *out) {
  nb_Value *ents = &idx;
  int n = 1;
  if (idx.t == NB_TLIST) { ents = ((nb_List *)idx.u.p)->items; n = ((nb_List *)idx.u.p)->n; }
  nt_Tensor *y = nt_clone(x);      /* differentiable: the write is recorded on the copy */
  if (!y) return nbT_err(vm);
  if (put_index(vm, y, ents, n, v, accumulate)) { nt_release(y); return NB_ERR; }
  *out = nb_obj(NB_TTENSOR, y);
  return NB_OK;
}

/* ------------------------------------------------------------ fields */
static int shape_list(nt_Tensor *t, nb_Value *out) {
  nb_List *l = nbL_new(t->ndim);
  for (int i = 0; i < t->ndim; i++) nbL_push(l, nb_int((double)t->shape[i]));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

static int tolist_rec(nt_Tensor *t, const double *buf, int dim, int64_t *pos, nb_Value *out) {
  if (dim == t->ndim) {
    *out = nbT_elem(t->dtype, buf[(*pos)++]);
    return NB_OK;
  }
  nb_List *l = nbL_new((int)t->shape[dim]);
  for (int64_t i = 0; i < t->shape[dim]; i++) { nb_Value v; tolist_rec(t, buf, dim + 1, pos, &v); nbL_push(l, v); }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
int nbT_tolist(nb_VM *vm, nt_Tensor *t, nb_Value *out) {
  if (t->numel > 100000000) return nb_error_kind(vm, "ValueError", "tolist: tensor too large (%lld elements)", (long long)t->numel);
  double *buf = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  if (!buf) return nb_error(vm, "tolist: out of memory");
  if (nt_to_host(t, buf, NT_F64)) { free(buf); return nbT_err(vm); }
  int64_t pos = 0;
  tolist_rec(t, buf, 0, &pos, out);
  free(buf);
  return NB_OK;
}

int nbT_field(nb_VM *vm, nb_Value tv, nb_Str *name, nb_Value *out) {
  nt_Tensor *t = T(tv);
  const char *s = name->data;
  if (!strcmp(s, "shape")) return shape_list(t, out);
  if (!strcmp(s, "dtype")) { *out = nb_strv(nbS_cstr(nt_dtype_name(t->dtype))); return NB_OK; }
  if (!strcmp(s, "device")) { *out = nb_strv(nbS_cstr(nt_device_name(t->device))); return NB_OK; }
  if (!strcmp(s, "ndim")) { *out = nb_int(t->ndim); return NB_OK; }
  if (!strcmp(s, "numel")) { *out = nb_int((double)t->numel); return NB_OK; }
  if (!strcmp(s, "T")) return nbT_ret(vm, nt_T(t), out);
  if (!strcmp(s, "requires_grad")) { *out = nb_bool(t->requires_grad); return NB_OK; }
  if (!strcmp(s, "is_leaf")) { *out = nb_bool(nt_is_leaf(t)); return NB_OK; }
  if (!strcmp(s, "grad_fn")) { const char *g = nt_grad_fn_name(t); *out = g ? nb_strv(nbS_cstr(g)) : nb_nil(); return NB_OK; }
  if (!strcmp(s, "grad")) {
    nt_Tensor *g = nt_grad(t);
    if (!g) { *out = nb_nil(); return NB_OK; }
    *out = nb_obj(NB_TTENSOR, nt_retain(g)); return NB_OK;
  }
  if (!strcmp(s, "item")) { double d; if (nt_item(t, &d)) return nbT_err(vm); *out = nbT_elem(t->dtype, d); return NB_OK; }
  if (!strcmp(s, "tolist")) return nbT_tolist(vm, t, out);
  return nb_error_kind(vm, "KeyError", "a tensor has no field '%s' (fields: shape, dtype, device, ndim, numel, T, grad, requires_grad, is_leaf, grad_fn)", s);
}

int nbT_setfield(nb_VM *vm, nb_Value tv, nb_Str *name, nb_Value v) {
  nt_Tensor *t = T(tv);
  if (!strcmp(name->data, "requires_grad")) return nt_set_requires_grad(t, nb_truthy(v)) ? nbT_err(vm) : NB_OK;
  if (!strcmp(name->data, "grad")) {
    if (v.t != NB_TNIL && v.t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "grad must be a tensor or nil");
    return nt_set_grad(t, v.t == NB_TNIL ? NULL : T(v)) ? nbT_err(vm) : NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "cannot set field '%s' of a tensor (settable: requires_grad, grad)", name->data);
}

void nbT_set_grad_enabled(bool on) { nt_set_grad_enabled(on); }

/* ------------------------------------------------------------ serialization */
int nbT_serialize(nb_VM *vm, nb_Value tv, nb_Buf *out) {
  nt_Tensor *t = T(tv);
  nt_Tensor *c = nt_contiguous(t);
  if (!c) return nbT_err(vm);
  nt_Tensor *h = c->device == NT_CPU ? nt_retain(c) : nt_to_device(c, NT_CPU);
  nt_release(c);
  if (!h) return nbT_err(vm);
  unsigned char hdr[3] = { (unsigned char)h->dtype, (unsigned char)h->ndim, (unsigned char)(t->device | (t->requires_grad ? 0x80 : 0)) };
  nbB_add(out, (char *)hdr, 3);
  for (int i = 0; i < h->ndim; i++) { int64_t d = h->shape[i]; nbB_add(out, (char *)&d, 8); }
  nbB_add(out, (char *)nt_data_ptr(h), (size_t)h->numel * nt_dtype_size(h->dtype));
  nt_release(h);
  return NB_OK;
}

int nbT_deserialize(nb_VM *vm, const unsigned char **p, const unsigned char *end, nb_Value *out) {
  if (end - *p < 3) return nb_error_kind(vm, "ValueError", "deserialize: truncated tensor");
  nt_DType dt = (nt_DType)(*p)[0]; int nd = (*p)[1]; int dev = (*p)[2] & 0x7f; bool rg = (*p)[2] & 0x80;
  *p += 3;
  if (dt >= NT_NDTYPES || nd > NT_MAXDIM || dev >= NT_NDEVICES) return nb_error_kind(vm, "ValueError", "deserialize: corrupt tensor header");
  int64_t shape[NT_MAXDIM];
  if (end - *p < nd * 8) return nb_error_kind(vm, "ValueError", "deserialize: truncated tensor");
  int64_t numel = 1, span = 1;   /* span: the product of the nonzero sizes, which the strides reach */
  for (int i = 0; i < nd; i++) {
    memcpy(&shape[i], *p, 8); *p += 8;
    if (shape[i] < 0 || (shape[i] && span > INT64_MAX / 16 / shape[i])) return nb_error_kind(vm, "ValueError", "deserialize: corrupt tensor shape");
    numel *= shape[i];
    if (shape[i]) span *= shape[i];
  }
  size_t nbytes = (size_t)numel * nt_dtype_size(dt);
  if ((size_t)(end - *p) < nbytes) return nb_error_kind(vm, "ValueError", "deserialize: truncated tensor data");
  nt_Tensor *t = nt_from_buffer(*p, dt, shape, nd, dt);
  *p += nbytes;
  if (!t) return nbT_err(vm);
  if (dev != NT_CPU) { nt_Tensor *d = nt_to_device(t, (nt_Device)dev); nt_release(t); if (!d) return nbT_err(vm); t = d; }
  if (rg) nt_set_requires_grad(t, true);
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* ---- in-place methods (torch's add_, mul_, copy_, ...): x.add_(v) by
** uniform call syntax.  Each writes into x, bumps its version and is recorded
** by autograd like x op= v (nbT_update, nt_copy_, nt_fill_): a leaf that
** requires grad is refused outside no_grad.  They return x. */
static int inplace_target(nb_VM *vm, const char *fname, nb_Value x) {
  if (x.t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor to update in place, got %s", fname, nb_typename(x));
  return NB_OK;
}
static int ret_self(nb_Value x, nb_Value *out) { nb_incref(x); *out = x; return NB_OK; }
#define INPLACE_ARITH(name, op, spelling)                                              \
  static int b_##name(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {               \
    (void)n;                                                                           \
    if (inplace_target(vm, #name, args[0]) || nbT_update(vm, op, spelling, args[0], args[1])) return NB_ERR; \
    return ret_self(args[0], out);                                                     \
  }
INPLACE_ARITH(add_, OP_ADD, "add_")
INPLACE_ARITH(sub_, OP_SUB, "sub_")
INPLACE_ARITH(mul_, OP_MUL, "mul_")
INPLACE_ARITH(div_, OP_DIV, "div_")

static int b_copy_(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "copy_"; Tmp tp = {0};
  if (inplace_target(vm, fname, args[0])) return NB_ERR;
  nt_Tensor *src = nbT_arg(vm, &tp, fname, "src", args[1]);
  if (!src) { nbT_tmp_free(&tp); return NB_ERR; }
  /* torch's copy_ takes a source on another device or of another dtype */
  nt_Tensor *moved = src->device != T(args[0])->device ? nt_to_device(src, T(args[0])->device) : nt_retain(src);
  int rc = moved ? nt_copy_(T(args[0]), moved) : -1;
  nt_release(moved);
  nbT_tmp_free(&tp);
  return rc ? nbT_err(vm) : ret_self(args[0], out);
}
static int b_fill_(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "fill_";
  double v;
  if (inplace_target(vm, fname, args[0]) || nbT_num_arg(vm, fname, "value", args[1], &v)) return NB_ERR;
  if (nt_fill_(T(args[0]), v)) return nbT_err(vm);
  return ret_self(args[0], out);
}
static int b_zero_(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (inplace_target(vm, "zero_", args[0])) return NB_ERR;
  if (nt_fill_(T(args[0]), 0)) return nbT_err(vm);
  return ret_self(args[0], out);
}
static int b_clamp_(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "clamp_";
  double lo = NAN, hi = NAN;
  if (inplace_target(vm, fname, args[0])) return NB_ERR;
  if (args[1].t != NB_TNIL && nbT_num_arg(vm, fname, "min", args[1], &lo)) return NB_ERR;
  if (args[2].t != NB_TNIL && nbT_num_arg(vm, fname, "max", args[2], &hi)) return NB_ERR;
  nt_Tensor *x = T(args[0]), *c = nt_grad_enabled() && x->requires_grad ? nt_clone(x) : nt_retain(x);
  nt_Tensor *r = c ? nt_clamp(c, lo, hi) : NULL;
  int rc = r ? nt_copy_(x, r) : -1;
  nt_release(c); nt_release(r);
  return rc ? nbT_err(vm) : ret_self(args[0], out);
}
static nb_Builtin inplace_builtins[] = {
  { "add_", b_add_, "x, v", "add_(x, v) / x.add_(v): x += v in place (autograd records it; a leaf that requires grad only under no_grad); returns x" },
  { "sub_", b_sub_, "x, v", "sub_(x, v) / x.sub_(v): x -= v in place; returns x" },
  { "mul_", b_mul_, "x, v", "mul_(x, v) / x.mul_(v): x *= v in place; returns x" },
  { "div_", b_div_, "x, v", "div_(x, v) / x.div_(v): x /= v in place; returns x" },
  { "copy_", b_copy_, "x, src", "copy_(x, src) / x.copy_(src): writes src (broadcast to x's shape; any dtype or device) into x; returns x" },
  { "fill_", b_fill_, "x, value", "fill_(x, value) / x.fill_(value): every element of x set to value; returns x" },
  { "zero_", b_zero_, "x", "zero_(x) / x.zero_(): every element of x set to 0; returns x" },
  { "clamp_", b_clamp_, "x, min=nil, max=nil", "clamp_(x, min=nil, max=nil) / x.clamp_(...): x limited to [min, max] in place; returns x" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_tensor(void) {
  nt_init();
  nbT_register_ops();
  nbT_register_grad();
  nbT_register_optim();
  nbT_register_io();
  nbC_register(inplace_builtins);
  nbT_register_compose();
  nbT_register_norm();
  nbT_register_layers();
}
