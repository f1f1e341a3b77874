/*
** ltensor.c — tensors as language values: operators, indexing, fields,
** printing, serialization, and the tensor builtins (creation, math,
** reductions, shape ops, nn ops, autograd, files, optimizer updates).
**
** Everything here is glue over tensor/tensor.h: argument conversion from
** nabla values (numbers, lists, records, strings for dtypes/devices) and
** error translation.  No kernel math lives here, except the optimizer update
** loops (a stand-in until the tensor layer has fused multi-tensor kernels).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lvm.h"
#include "tensor/tensor.h"
#include "tensor/nn/nn.h"
#include "tensor/io/iotypes.h"
#include "tensor/io/safetensors.h"
#include "tensor/io/npy.h"
#include "tensor/io/csv.h"
#include "tensor/tdevice.h"

#define T(v) ((nt_Tensor *)(v).u.p)

void nbO_retain_tensor(void *t) { nt_retain(t); }
void nbO_release_tensor(void *t) { nt_release(t); }

static int terr(nb_VM *vm) {
  const char *m = nt_error_msg();
  return nb_error_kind(vm, "TensorError", "%s", m && *m ? m : "tensor operation failed");
}
/* wraps a new tensor reference as the result */
static int ret(nb_VM *vm, nt_Tensor *t, nb_Value *out) {
  if (!t) return terr(vm);
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* ------------------------------------------------------------ conversions */
/* Temporaries made while converting arguments; released at the end of a builtin. */
typedef struct Tmp { nt_Tensor *t[16]; int n; } Tmp;
static void tmp_free(Tmp *tp) { for (int i = 0; i < tp->n; i++) nt_release(tp->t[i]); tp->n = 0; }
static nt_Tensor *tmp_keep(Tmp *tp, nt_Tensor *t) { if (t && tp->n < 16) tp->t[tp->n++] = t; return t; }

static int list_to_tensor(nb_VM *vm, nb_Value list, nt_DType want, bool have_want, nt_Tensor **out);

/* A tensor from a tensor (borrowed), number, bool or (nested) list. */
static nt_Tensor *as_tensor(nb_VM *vm, Tmp *tp, const char *fname, const char *what, nb_Value v) {
  nt_Tensor *t = NULL;
  switch (v.t) {
  case NB_TTENSOR: return T(v);
  case NB_TNUM: t = nt_scalar(v.u.n, v.u.n == floor(v.u.n) && fabs(v.u.n) < 9e15 ? NT_I64 : NT_F32); break;
  case NB_TBOOL: t = nt_scalar(v.u.b, NT_BOOL); break;
  case NB_TLIST: if (list_to_tensor(vm, v, NT_F32, false, &t)) return NULL; break;
  default:
    nb_error_kind(vm, "TypeError", "%s: expected a tensor for '%s', got %s", fname, what, nb_typename(v));
    return NULL;
  }
  if (!t) { terr(vm); return NULL; }
  if (!tmp_keep(tp, t)) { nt_release(t); nb_error(vm, "%s: too many temporary tensors", fname); return NULL; }
  return t;
}

static int get_dtype(nb_VM *vm, const char *fname, nb_Value v, nt_DType dflt, nt_DType *out) {
  if (v.t == NB_TNIL) { *out = dflt; return NB_OK; }
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: dtype must be a string like \"f32\", got %s", fname, nb_typename(v));
  int d = nt_dtype_from_name(nb_str(v)->data);
  if (d < 0) return nb_error_kind(vm, "ValueError", "%s: unknown dtype \"%s\" (expected one of f32, f64, f16, bf16, i32, i64, u8, bool)", fname, nb_str(v)->data);
  *out = (nt_DType)d;
  return NB_OK;
}

static nt_Device default_device = NT_CPU;
static int get_device(nb_VM *vm, const char *fname, nb_Value v, nt_Device *out) {
  if (v.t == NB_TNIL) { *out = default_device; return NB_OK; }
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: device must be \"cpu\" or \"cuda\", got %s", fname, nb_typename(v));
  const char *s = nb_str(v)->data;
  if (!strcmp(s, "cpu")) { *out = NT_CPU; return NB_OK; }
  if (!strncmp(s, "cuda", 4)) { *out = NT_CUDA; return NB_OK; }
  return nb_error_kind(vm, "ValueError", "%s: unknown device \"%s\" (expected \"cpu\" or \"cuda\")", fname, s);
}

static int to_int(nb_VM *vm, const char *fname, const char *what, nb_Value v, int64_t *out) {
  double d;
  if (v.t == NB_TNUM) d = v.u.n;
  else if (v.t == NB_TTENSOR && T(v)->numel == 1 && !nt_dtype_is_float(T(v)->dtype)) { if (nt_item(T(v), &d)) return terr(vm); }
  else return nb_error_kind(vm, "TypeError", "%s: '%s' must be an integer, got %s", fname, what, nb_typename(v));
  if (d != floor(d) || fabs(d) > 9e18) return nb_error_kind(vm, "ValueError", "%s: '%s' must be an integer, got %g", fname, what, d);
  *out = (int64_t)d;
  return NB_OK;
}
static int to_num(nb_VM *vm, const char *fname, const char *what, nb_Value v, double *out) {
  if (v.t == NB_TNUM) { *out = v.u.n; return NB_OK; }
  if (v.t == NB_TBOOL) { *out = v.u.b; return NB_OK; }
  if (v.t == NB_TTENSOR && T(v)->numel == 1) return nt_item(T(v), out) ? terr(vm) : NB_OK;
  return nb_error_kind(vm, "TypeError", "%s: '%s' must be a number, got %s", fname, what, nb_typename(v));
}

/* A list of ints from a number, a list of numbers, or an int tensor. */
static int int_list(nb_VM *vm, const char *fname, const char *what, nb_Value v, int64_t *out, int max, int *n) {
  if (v.t == NB_TNUM) { *n = 1; return to_int(vm, fname, what, v, out); }
  if (v.t == NB_TLIST) {
    nb_List *l = v.u.p;
    if (l->n > max) return nb_error_kind(vm, "ValueError", "%s: '%s' has %d entries (at most %d)", fname, what, l->n, max);
    for (int i = 0; i < l->n; i++) if (to_int(vm, fname, what, l->items[i], &out[i])) return NB_ERR;
    *n = l->n; return NB_OK;
  }
  if (v.t == NB_TTENSOR) {
    nt_Tensor *t = T(v);
    if (t->ndim > 1 || nt_dtype_is_float(t->dtype)) return nb_error_kind(vm, "TypeError", "%s: '%s' must be a list of integers", fname, what);
    if (t->numel > max) return nb_error_kind(vm, "ValueError", "%s: '%s' has %lld entries (at most %d)", fname, what, (long long)t->numel, max);
    if (nt_to_host(t, out, NT_I64)) return terr(vm);
    *n = (int)t->numel; return NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "%s: '%s' must be an integer or a list of integers, got %s", fname, what, nb_typename(v));
}

/* axis=nil → all; a number; or a list */
static int axes_arg(nb_VM *vm, const char *fname, nb_Value v, int *axes, int *n) {
  if (v.t == NB_TNIL) { *n = 0; return NB_OK; }
  int64_t tmp[NT_MAXDIM]; int k;
  if (int_list(vm, fname, "axis", v, tmp, NT_MAXDIM, &k)) return NB_ERR;
  for (int i = 0; i < k; i++) axes[i] = (int)tmp[i];
  *n = k;
  if (k == 0) return nb_error_kind(vm, "ValueError", "%s: axis list is empty", fname);
  return NB_OK;
}

/* shape from variadic numbers, or one list/tensor argument */
static int shape_args(nb_VM *vm, const char *fname, nb_Value *vals, int n, int64_t *shape, int *ndim) {
  if (n == 1 && (vals[0].t == NB_TLIST || vals[0].t == NB_TTENSOR)) return int_list(vm, fname, "shape", vals[0], shape, NT_MAXDIM, ndim);
  if (n > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "%s: at most %d dimensions, got %d", fname, NT_MAXDIM, n);
  for (int i = 0; i < n; i++) {
    if (to_int(vm, fname, "shape", vals[i], &shape[i])) return NB_ERR;
    if (shape[i] < 0) return nb_error_kind(vm, "ValueError", "%s: negative dimension %lld in shape", fname, (long long)shape[i]);
  }
  *ndim = n;
  return NB_OK;
}

/* numeric (nested) list → tensor.  Integers → i64, any non-integer → f32,
** all bools → bool; nested lists must be rectangular. */
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
    if (nt_to_host(t, fl->v + fl->n, NT_F64)) return terr(vm);
    fl->n += (size_t)t->numel;
    return NB_OK;
  }
  if (depth != fl->ndim) return nb_error_kind(vm, "ValueError", "tensor: ragged nested list (a number where a list was expected)");
  double d;
  if (v.t == NB_TNUM) { d = v.u.n; fl->allbool = false; if (d != floor(d) || !isfinite(d)) fl->isfloat = true; }
  else if (v.t == NB_TBOOL) { d = v.u.b; fl->anybool = true; }
  else return nb_error_kind(vm, "TypeError", "tensor: elements must be numbers, got %s", nb_typename(v));
  if (fl->n == fl->cap) { fl->cap = fl->cap ? fl->cap * 2 : 16; fl->v = realloc(fl->v, fl->cap * sizeof(double)); if (!fl->v) return nb_error(vm, "out of memory"); }
  fl->v[fl->n++] = d;
  return NB_OK;
}
static int list_to_tensor(nb_VM *vm, nb_Value list, nt_DType want, bool have_want, nt_Tensor **out) {
  Flat fl; memset(&fl, 0, sizeof fl);
  fl.allbool = true;
  if (flatten_list(vm, list, &fl, 0)) { free(fl.v); return NB_ERR; }
  nt_DType dt = have_want ? want : fl.isfloat ? NT_F32 : (fl.allbool && fl.n > 0) ? NT_BOOL : NT_I64;
  *out = nt_from_buffer(fl.v ? fl.v : (double[1]){0}, NT_F64, fl.shape, fl.ndim, dt);
  free(fl.v);
  return *out ? NB_OK : terr(vm);
}

int nbT_literal(nb_VM *vm, nb_Value list, bool floats, nb_Value *out) {
  nt_Tensor *t;
  if (list_to_tensor(vm, list, NT_F32, false, &t)) return NB_ERR;
  if (floats && !nt_dtype_is_float(t->dtype)) {
    nt_Tensor *f = nt_to_dtype(t, NT_F32);
    nt_release(t);
    if (!f) return terr(vm);
    t = f;
  }
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* ------------------------------------------------------------ printing */
void nbT_format(nb_Buf *b, void *t) {
  char *s = nt_format(t);
  if (s) { nbB_puts(b, s); free(s); } else nbB_puts(b, "<tensor>");
}

void nbT_display(nb_VM *vm, nb_Value v, nb_Buf *html) {
  (void)vm;
  nt_Tensor *t = T(v);
  char shp[128]; nt_shape_str(t->shape, t->ndim, shp, sizeof shp);
  if (t->ndim >= 1 && t->ndim <= 2 && t->numel <= 400 && t->device == NT_CPU) {
    int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->shape[t->ndim - 1];
    double *buf = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
    if (!buf || nt_to_host(t, buf, NT_F64)) { free(buf); return; }
    nbB_printf(html, "<table class=\"nabla-tensor\"><caption>tensor %s %s</caption>", shp, nt_dtype_name(t->dtype));
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
  case OP_DIV: return NT_OP_DIV; case OP_MOD: return NT_OP_MOD; case OP_POW: return NT_OP_POW;
  case OP_EQ: return NT_OP_EQ; case OP_NE: return NT_OP_NE; case OP_LT: return NT_OP_LT;
  case OP_LE: return NT_OP_LE; case OP_GT: return NT_OP_GT; case OP_GE: return NT_OP_GE;
  default: return -1;
  }
}

int nbT_binop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out) {
  if (op == OP_MATMUL) {
    if (a.t != NB_TTENSOR || b.t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "@ needs two tensors, got %s and %s", nb_typename(a), nb_typename(b));
    return ret(vm, nt_matmul(T(a), T(b)), out);
  }
  int id = binop_id(op);
  if (a.t == NB_TTENSOR && b.t == NB_TTENSOR) return ret(vm, nt_binary(id, T(a), T(b)), out);
  nb_Value tv = a.t == NB_TTENSOR ? a : b, sv = a.t == NB_TTENSOR ? b : a;
  if (sv.t == NB_TNUM || sv.t == NB_TBOOL) {
    double s = sv.t == NB_TNUM ? sv.u.n : sv.u.b;
    /* numbers carry no int/float distinction at run time: a negative power is
    ** taken as a float (x ** -1 of an int tensor gives f32, not an error) */
    bool isint = s == floor(s) && !(op == OP_POW && a.t == NB_TTENSOR && s < 0);
    int flags = (a.t != NB_TTENSOR ? NT_SCALAR_FIRST : 0) | (isint ? NT_SCALAR_INT : NT_SCALAR_FLOAT);
    return ret(vm, nt_binary_scalar_ex(id, T(tv), s, flags), out);
  }
  if (op == OP_EQ || op == OP_NE) { *out = nb_bool(op == OP_NE); return NB_OK; }
  return nb_error_kind(vm, "TypeError", "unsupported operand types for tensor arithmetic: %s and %s", nb_typename(a), nb_typename(b));
}

int nbT_neg(nb_VM *vm, nb_Value a, nb_Value *out) { return ret(vm, nt_neg(T(a)), out); }

int nbT_truthy(nb_VM *vm, nb_Value t, bool *out) {
  if (T(t)->numel != 1) return nb_error_kind(vm, "ValueError", "the truth value of a tensor with %lld elements is ambiguous (use any(x) or all(x))", (long long)T(t)->numel);
  double d;
  if (nt_item(T(t), &d)) return terr(vm);
  *out = d != 0;
  return NB_OK;
}

int nbT_len(nb_VM *vm, nb_Value t, double *out) {
  if (T(t)->ndim == 0) return nb_error_kind(vm, "TypeError", "len() of a 0-d tensor");
  *out = (double)T(t)->shape[0];
  return NB_OK;
}

/* ------------------------------------------------------------ indexing */
static int64_t slice_part(double d) { return isnan(d) ? NT_NONE : (int64_t)floor(d); }

static int build_index(nb_VM *vm, nb_Value *idx, int n, nt_Index *out, int *tensor_at) {
  *tensor_at = -1;
  for (int i = 0; i < n; i++) {
    nb_Value v = idx[i];
    if (v.t == NB_TNUM) {
      if (v.u.n != floor(v.u.n)) return nb_error_kind(vm, "TypeError", "tensor index must be an integer, got %g", v.u.n);
      out[i].kind = NT_IDX_INT; out[i].start = (int64_t)v.u.n;
    } else if (v.t == NB_TRANGE) {
      nb_Range *r = v.u.p;
      out[i].kind = NT_IDX_SLICE; out[i].start = slice_part(r->start); out[i].stop = slice_part(r->stop);
      out[i].step = isnan(r->step) ? 1 : (int64_t)r->step;
      if (out[i].step == 0) return nb_error_kind(vm, "ValueError", "slice step must not be zero");
    } else if (v.t == NB_TNIL) {
      out[i].kind = NT_IDX_NEWAXIS;
    } else if (v.t == NB_TTENSOR) {
      nt_Tensor *t = T(v);
      if (t->ndim == 0 && !nt_dtype_is_float(t->dtype) && t->dtype != NT_BOOL) {
        double d; if (nt_item(t, &d)) return terr(vm);
        out[i].kind = NT_IDX_INT; out[i].start = (int64_t)d;
      } else {
        if (*tensor_at >= 0) return nb_error_kind(vm, "IndexError", "only one tensor index per indexing expression is supported");
        *tensor_at = i;
        out[i].kind = NT_IDX_SLICE; out[i].start = NT_NONE; out[i].stop = NT_NONE; out[i].step = 1;
      }
    } else if (v.t == NB_TSTR && !strcmp(nb_str(v)->data, "...")) {
      out[i].kind = NT_IDX_ELLIPSIS;
    } else return nb_error_kind(vm, "TypeError", "cannot index a tensor with a %s", nb_typename(v));
  }
  return NB_OK;
}

int nbT_index(nb_VM *vm, nb_Value tv, nb_Value *idx, int n, nb_Value *out) {
  nt_Index ix[NT_MAXDIM + 2];
  int tat;
  if (n > NT_MAXDIM + 2) return nb_error_kind(vm, "IndexError", "too many indices for a tensor");
  if (build_index(vm, idx, n, ix, &tat)) return NB_ERR;
  nt_Tensor *t = T(tv);
  if (tat < 0) return ret(vm, nt_index(t, ix, n), out);
  nt_Tensor *it = T(idx[tat]);
  if (n == 1) return ret(vm, nt_index_tensor(t, it), out);
  /* x[:, idx] style: all other entries must be full slices; idx is 1-D */
  for (int i = 0; i < n; i++)
    if (i != tat && !(ix[i].kind == NT_IDX_SLICE && ix[i].start == NT_NONE && ix[i].stop == NT_NONE && ix[i].step == 1))
      return nb_error_kind(vm, "IndexError", "a tensor index can be combined only with full slices (:)");
  return ret(vm, nt_index_select(t, tat, it), out);
}

int nbT_setindex(nb_VM *vm, nb_Value tv, nb_Value *idx, int n, nb_Value v) {
  nt_Index ix[NT_MAXDIM + 2];
  int tat;
  if (n > NT_MAXDIM + 2) return nb_error_kind(vm, "IndexError", "too many indices for a tensor");
  if (build_index(vm, idx, n, ix, &tat)) return NB_ERR;
  nt_Tensor *t = T(tv);
  Tmp tp = {0};
  int st = NB_OK;
  if (tat >= 0) {
    /* x[mask] = v for a mask of x's shape: x <- where(mask, v, x) */
    nt_Tensor *m = T(idx[tat]);
    if (n != 1 || m->dtype != NT_BOOL) return nb_error_kind(vm, "IndexError", "assignment through a tensor index needs a boolean mask as the only index (x[mask] = v)");
    nt_Tensor *src = as_tensor(vm, &tp, "setindex", "value", v);
    if (!src) return NB_ERR;
    nt_Tensor *w = nt_where(m, src, t);
    if (!w || nt_copy_(t, w)) st = terr(vm);
    nt_release(w); tmp_free(&tp);
    return st;
  }
  nt_Tensor *view = nt_index(t, ix, n);
  if (!view) return terr(vm);
  if (v.t == NB_TNUM || v.t == NB_TBOOL) { if (nt_fill_(view, v.t == NB_TNUM ? v.u.n : v.u.b)) st = terr(vm); }
  else {
    nt_Tensor *src = as_tensor(vm, &tp, "setindex", "value", v);
    if (!src) st = NB_ERR;
    else if (nt_copy_(view, src)) st = terr(vm);
  }
  nt_release(view); tmp_free(&tp);
  return st;
}

/* ------------------------------------------------------------ fields */
static int shape_list(nt_Tensor *t, nb_Value *out) {
  nb_List *l = nbL_new(t->ndim);
  for (int i = 0; i < t->ndim; i++) nbL_push(l, nb_num((double)t->shape[i]));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

static int tolist_rec(nt_Tensor *t, const double *buf, int dim, int64_t *pos, nb_Value *out) {
  if (dim == t->ndim) {
    double d = buf[(*pos)++];
    *out = t->dtype == NT_BOOL ? nb_bool(d != 0) : nb_num(d);
    return NB_OK;
  }
  nb_List *l = nbL_new((int)t->shape[dim]);
  for (int64_t i = 0; i < t->shape[dim]; i++) { nb_Value v; tolist_rec(t, buf, dim + 1, pos, &v); nbL_push(l, v); }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int tolist(nb_VM *vm, nt_Tensor *t, nb_Value *out) {
  if (t->numel > 100000000) return nb_error_kind(vm, "ValueError", "tolist: tensor too large (%lld elements)", (long long)t->numel);
  double *buf = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  if (!buf) return nb_error(vm, "tolist: out of memory");
  if (nt_to_host(t, buf, NT_F64)) { free(buf); return terr(vm); }
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
  if (!strcmp(s, "ndim")) { *out = nb_num(t->ndim); return NB_OK; }
  if (!strcmp(s, "numel")) { *out = nb_num((double)t->numel); return NB_OK; }
  if (!strcmp(s, "T")) return ret(vm, nt_T(t), out);
  if (!strcmp(s, "requires_grad")) { *out = nb_bool(t->requires_grad); return NB_OK; }
  if (!strcmp(s, "is_leaf")) { *out = nb_bool(nt_is_leaf(t)); return NB_OK; }
  if (!strcmp(s, "grad_fn")) { const char *g = nt_grad_fn_name(t); *out = g ? nb_strv(nbS_cstr(g)) : nb_nil(); return NB_OK; }
  if (!strcmp(s, "grad")) {
    nt_Tensor *g = nt_grad(t);
    if (!g) { *out = nb_nil(); return NB_OK; }
    *out = nb_obj(NB_TTENSOR, nt_retain(g)); return NB_OK;
  }
  if (!strcmp(s, "item")) { double d; if (nt_item(t, &d)) return terr(vm); *out = t->dtype == NT_BOOL ? nb_bool(d != 0) : nb_num(d); return NB_OK; }
  if (!strcmp(s, "tolist")) return tolist(vm, t, out);
  return nb_error_kind(vm, "KeyError", "a tensor has no field '%s' (fields: shape, dtype, device, ndim, numel, T, grad, requires_grad, is_leaf, grad_fn)", s);
}

int nbT_setfield(nb_VM *vm, nb_Value tv, nb_Str *name, nb_Value v) {
  nt_Tensor *t = T(tv);
  if (!strcmp(name->data, "requires_grad")) return nt_set_requires_grad(t, nb_truthy(v)) ? terr(vm) : NB_OK;
  if (!strcmp(name->data, "grad")) {
    if (v.t != NB_TNIL && v.t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "grad must be a tensor or nil");
    return nt_set_grad(t, v.t == NB_TNIL ? NULL : T(v)) ? terr(vm) : NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "cannot set field '%s' of a tensor (settable: requires_grad, grad)", name->data);
}

void nbT_set_grad_enabled(bool on) { nt_set_grad_enabled(on); }

/* ------------------------------------------------------------ serialization */
int nbT_serialize(nb_VM *vm, nb_Value tv, nb_Buf *out) {
  nt_Tensor *t = T(tv);
  nt_Tensor *c = nt_contiguous(t);
  if (!c) return terr(vm);
  nt_Tensor *h = c->device == NT_CPU ? nt_retain(c) : nt_to_device(c, NT_CPU);
  nt_release(c);
  if (!h) return terr(vm);
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
  int64_t numel = 1;
  for (int i = 0; i < nd; i++) {
    memcpy(&shape[i], *p, 8); *p += 8;
    if (shape[i] < 0 || (shape[i] && numel > INT64_MAX / 16 / shape[i])) return nb_error_kind(vm, "ValueError", "deserialize: corrupt tensor shape");
    numel *= shape[i];
  }
  size_t nbytes = (size_t)numel * nt_dtype_size(dt);
  if ((size_t)(end - *p) < nbytes) return nb_error_kind(vm, "ValueError", "deserialize: truncated tensor data");
  nt_Tensor *t = nt_from_buffer(*p, dt, shape, nd, dt);
  *p += nbytes;
  if (!t) return terr(vm);
  if (dev != NT_CPU) { nt_Tensor *d = nt_to_device(t, (nt_Device)dev); nt_release(t); if (!d) return terr(vm); t = d; }
  if (rg) nt_set_requires_grad(t, true);
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: creation */
#define TENSOR_ARG(var, i, what) nt_Tensor *var = as_tensor(vm, &tp, fname, what, args[i]); if (!var) { tmp_free(&tp); return NB_ERR; }
#define DONE(expr) do { int st_ = ret(vm, (expr), out); tmp_free(&tp); return st_; } while (0)

static int finish_creation(nb_VM *vm, nt_Tensor *t, nb_Value requires_grad, nb_Value *out) {
  if (!t) return terr(vm);
  if (nb_truthy(requires_grad) && nt_set_requires_grad(t, true)) { nt_release(t); return terr(vm); }
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* tensor(x, dtype=nil, device=nil, requires_grad=false) */
static int b_tensor(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "tensor";
  nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  bool have = args[1].t != NB_TNIL;
  if (get_dtype(vm, fname, args[1], NT_F32, &dt) || get_device(vm, fname, args[2], &dev)) return NB_ERR;
  nt_Tensor *t = NULL;
  nb_Value x = args[0];
  if (x.t == NB_TTENSOR) t = have ? nt_to_dtype(T(x), dt) : nt_clone(T(x));
  else if (x.t == NB_TLIST) { if (list_to_tensor(vm, x, dt, have, &t)) return NB_ERR; }
  else if (x.t == NB_TNUM || x.t == NB_TBOOL) {
    double d = x.t == NB_TNUM ? x.u.n : x.u.b;
    t = nt_scalar(d, have ? dt : x.t == NB_TBOOL ? NT_BOOL : (d == floor(d) ? NT_I64 : NT_F32));
  } else return nb_error_kind(vm, "TypeError", "tensor: cannot make a tensor from a %s", nb_typename(x));
  if (t && t->device != dev) { nt_Tensor *d = nt_to_device(t, dev); nt_release(t); t = d; }
  return finish_creation(vm, t, args[3], out);
}

/* zeros/ones/empty/rand/randn(*shape, dtype=nil, device=nil, requires_grad=false):
** args[0..2] are the keywords, shape values follow. */
typedef nt_Tensor *(*ShapeCtor)(const int64_t *, int, nt_DType, nt_Device);
static int shape_ctor(nb_VM *vm, const char *fname, ShapeCtor fn, nb_Value *args, int n, nb_Value *out) {
  int64_t shape[NT_MAXDIM]; int nd;
  nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (get_dtype(vm, fname, args[0], NT_F32, &dt) || get_device(vm, fname, args[1], &dev)) return NB_ERR;
  if (shape_args(vm, fname, args + 3, n - 3, shape, &nd)) return NB_ERR;
  return finish_creation(vm, fn(shape, nd, dt, dev), args[2], out);
}
static int b_zeros(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "zeros", nt_zeros, a, n, o); }
static int b_ones(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "ones", nt_ones, a, n, o); }
static int b_empty(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "empty", nt_empty, a, n, o); }
static int b_rand(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "rand", nt_rand, a, n, o); }
static int b_randn(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "randn", nt_randn, a, n, o); }

/* full(shape, value, dtype=nil, device=nil, requires_grad=false) */
static int b_full(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "full";
  int64_t shape[NT_MAXDIM]; int nd; double v; nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (int_list(vm, fname, "shape", args[0], shape, NT_MAXDIM, &nd) || to_num(vm, fname, "value", args[1], &v)) return NB_ERR;
  if (get_dtype(vm, fname, args[2], args[1].t == NB_TBOOL ? NT_BOOL : (v == floor(v) && args[2].t == NB_TNIL && 0) ? NT_I64 : NT_F32, &dt) || get_device(vm, fname, args[3], &dev)) return NB_ERR;
  return finish_creation(vm, nt_full(shape, nd, v, dt, dev), args[4], out);
}
/* normal(mean, std, shape, dtype=nil, device=nil, requires_grad=false) */
static int b_normal(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "normal";
  int64_t shape[NT_MAXDIM]; int nd; double m, s; nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (to_num(vm, fname, "mean", args[0], &m) || to_num(vm, fname, "std", args[1], &s)) return NB_ERR;
  if (int_list(vm, fname, "shape", args[2], shape, NT_MAXDIM, &nd)) return NB_ERR;
  if (get_dtype(vm, fname, args[3], NT_F32, &dt) || get_device(vm, fname, args[4], &dev)) return NB_ERR;
  return finish_creation(vm, nt_normal(shape, nd, m, s, dt, dev), args[5], out);
}
/* randint(low, high, shape, dtype="i64", device=nil) */
static int b_randint(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "randint";
  int64_t lo, hi, shape[NT_MAXDIM]; int nd; nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (to_int(vm, fname, "low", args[0], &lo) || to_int(vm, fname, "high", args[1], &hi)) return NB_ERR;
  if (int_list(vm, fname, "shape", args[2], shape, NT_MAXDIM, &nd)) return NB_ERR;
  if (get_dtype(vm, fname, args[3], NT_I64, &dt) || get_device(vm, fname, args[4], &dev)) return NB_ERR;
  return ret(vm, nt_randint(lo, hi, shape, nd, dt, dev), out);
}
static int b_randperm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "randperm";
  int64_t k; nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (to_int(vm, fname, "n", args[0], &k) || get_dtype(vm, fname, args[1], NT_I64, &dt) || get_device(vm, fname, args[2], &dev)) return NB_ERR;
  return ret(vm, nt_randperm(k, dt, dev), out);
}
static int b_seed(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "seed";
  int64_t s;
  if (to_int(vm, fname, "seed", args[0], &s)) return NB_ERR;
  nt_seed((uint64_t)s);
  *out = nb_nil();
  return NB_OK;
}
/* arange(start, stop=nil, step=1, dtype=nil) */
static int b_arange(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "arange";
  double a = 0, b, s = 1; nt_DType dt = NT_F32;
  if (to_num(vm, fname, "start", args[0], &b)) return NB_ERR;
  if (args[1].t != NB_TNIL) { a = b; if (to_num(vm, fname, "stop", args[1], &b)) return NB_ERR; }
  if (args[2].t != NB_TNIL && to_num(vm, fname, "step", args[2], &s)) return NB_ERR;
  bool isint = a == floor(a) && b == floor(b) && s == floor(s);
  if (get_dtype(vm, fname, args[3], isint ? NT_I64 : NT_F32, &dt)) return NB_ERR;
  return ret(vm, nt_arange(a, b, s, dt), out);
}
static int b_linspace(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linspace";
  double a, b; int64_t k; nt_DType dt = NT_F32;
  if (to_num(vm, fname, "start", args[0], &a) || to_num(vm, fname, "stop", args[1], &b) || to_int(vm, fname, "num", args[2], &k)) return NB_ERR;
  if (get_dtype(vm, fname, args[3], NT_F32, &dt)) return NB_ERR;
  return ret(vm, nt_linspace(a, b, k, dt), out);
}
static int b_eye(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "eye";
  int64_t a, b; nt_DType dt = NT_F32;
  if (to_int(vm, fname, "n", args[0], &a)) return NB_ERR;
  b = a;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "m", args[1], &b)) return NB_ERR;
  if (get_dtype(vm, fname, args[2], NT_F32, &dt)) return NB_ERR;
  return ret(vm, nt_eye(a, b, dt), out);
}
/* zeros_like / ones_like / full_like / rand_like / randn_like (x, dtype=nil) */
static int like(nb_VM *vm, const char *fname, int kind, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  nt_DType dt = NT_F32;
  if (get_dtype(vm, fname, args[1], x->dtype, &dt)) { tmp_free(&tp); return NB_ERR; }
  nt_Tensor *r = NULL;
  switch (kind) {
  case 0: r = nt_zeros(x->shape, x->ndim, dt, x->device); break;
  case 1: r = nt_ones(x->shape, x->ndim, dt, x->device); break;
  case 2: r = nt_rand(x->shape, x->ndim, dt, x->device); break;
  case 3: r = nt_randn(x->shape, x->ndim, dt, x->device); break;
  }
  DONE(r);
}
static int b_zeros_like(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return like(vm, "zeros_like", 0, a, o); }
static int b_ones_like(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return like(vm, "ones_like", 1, a, o); }
static int b_rand_like(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return like(vm, "rand_like", 2, a, o); }
static int b_randn_like(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return like(vm, "randn_like", 3, a, o); }
static int b_full_like(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "full_like"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  double v; nt_DType dt = NT_F32;
  if (to_num(vm, fname, "value", args[1], &v) || get_dtype(vm, fname, args[2], x->dtype, &dt)) { tmp_free(&tp); return NB_ERR; }
  DONE(nt_full(x->shape, x->ndim, v, dt, x->device));
}

/* ------------------------------------------------------------ builtins: elementwise */
/* One entry per unary op: numbers get the C function, tensors the op. */
typedef struct UnaryDef { const char *name; int op; double (*num)(double); } UnaryDef;
static double relu_d(double x) { return x > 0 ? x : 0; }
static double sigmoid_d(double x) { return 1 / (1 + exp(-x)); }
static double sign_d(double x) { return (x > 0) - (x < 0); }
static double rsqrt_d(double x) { return 1 / sqrt(x); }
static double silu_d(double x) { return x / (1 + exp(-x)); }
static double neg_d(double x) { return -x; }
static const UnaryDef unary_defs[] = {
  { "exp", NT_OP_EXP, exp }, { "log", NT_OP_LOG, log }, { "log1p", NT_OP_LOG1P, log1p },
  { "sqrt", NT_OP_SQRT, sqrt }, { "rsqrt", NT_OP_RSQRT, rsqrt_d }, { "abs", NT_OP_ABS, fabs },
  { "sign", NT_OP_SIGN, sign_d }, { "neg", NT_OP_NEG, neg_d }, { "tanh", NT_OP_TANH, tanh },
  { "sigmoid", NT_OP_SIGMOID, sigmoid_d }, { "relu", NT_OP_RELU, relu_d }, { "silu", NT_OP_SILU, silu_d },
  { "sin", NT_OP_SIN, sin }, { "cos", NT_OP_COS, cos }, { "floor", NT_OP_FLOOR, floor },
  { "ceil", NT_OP_CEIL, ceil }, { "tan", NT_OP_TAN, tan }, { "erf", NT_OP_ERF, erf },
  { "expm1", NT_OP_EXPM1, expm1 }, { "log2", NT_OP_LOG2, log2 },
};
#define NUNARY ((int)(sizeof unary_defs / sizeof unary_defs[0]))
static int unary(nb_VM *vm, int k, nb_Value *args, nb_Value *out) {
  const UnaryDef *d = &unary_defs[k];
  const char *fname = d->name;
  if (args[0].t == NB_TNUM) { *out = nb_num(d->num(args[0].u.n)); return NB_OK; }
  Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  DONE(nt_unary(d->op, x));
}
#define UNARY_FN(i) static int b_unary##i(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return unary(vm, i, a, o); }
UNARY_FN(0) UNARY_FN(1) UNARY_FN(2) UNARY_FN(3) UNARY_FN(4) UNARY_FN(5) UNARY_FN(6) UNARY_FN(7) UNARY_FN(8) UNARY_FN(9)
UNARY_FN(10) UNARY_FN(11) UNARY_FN(12) UNARY_FN(13) UNARY_FN(14) UNARY_FN(15) UNARY_FN(16) UNARY_FN(17) UNARY_FN(18) UNARY_FN(19)
static nb_CFunc const unary_fns[] = { b_unary0, b_unary1, b_unary2, b_unary3, b_unary4, b_unary5, b_unary6, b_unary7, b_unary8, b_unary9,
  b_unary10, b_unary11, b_unary12, b_unary13, b_unary14, b_unary15, b_unary16, b_unary17, b_unary18, b_unary19 };

static int b_gelu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "gelu"; Tmp tp = {0};
  bool tanh_approx = args[1].t == NB_TSTR && !strcmp(nb_str(args[1])->data, "tanh");
  if (args[1].t != NB_TNIL && !(args[1].t == NB_TSTR && (tanh_approx || !strcmp(nb_str(args[1])->data, "none"))))
    return nb_error_kind(vm, "ValueError", "gelu: approximate must be \"none\" or \"tanh\"");
  TENSOR_ARG(x, 0, "x");
  DONE(nt_gelu(x, tanh_approx));
}
static int b_clamp(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "clamp"; Tmp tp = {0};
  double lo = NAN, hi = NAN;
  if (args[1].t != NB_TNIL && to_num(vm, fname, "min", args[1], &lo)) return NB_ERR;
  if (args[2].t != NB_TNIL && to_num(vm, fname, "max", args[2], &hi)) return NB_ERR;
  if (args[0].t == NB_TNUM) { double x = args[0].u.n; if (!isnan(lo) && x < lo) x = lo; if (!isnan(hi) && x > hi) x = hi; *out = nb_num(x); return NB_OK; }
  TENSOR_ARG(x, 0, "x");
  DONE(nt_clamp(x, lo, hi));
}
static int binary2(nb_VM *vm, const char *fname, int op, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  if (args[0].t == NB_TNUM && args[1].t == NB_TNUM) {
    double a = args[0].u.n, b = args[1].u.n;
    *out = nb_num(op == NT_OP_MAXIMUM ? fmax(a, b) : op == NT_OP_MINIMUM ? fmin(a, b) : pow(a, b));
    return NB_OK;
  }
  if (args[0].t == NB_TTENSOR && (args[1].t == NB_TNUM || args[1].t == NB_TBOOL)) {
    double s = args[1].t == NB_TNUM ? args[1].u.n : args[1].u.b;
    bool isint = s == floor(s) && !(op == NT_OP_POW && s < 0);   /* as the ** operator */
    return ret(vm, nt_binary_scalar_ex(op, T(args[0]), s, isint ? NT_SCALAR_INT : NT_SCALAR_FLOAT), out);
  }
  TENSOR_ARG(a, 0, "a");
  TENSOR_ARG(b, 1, "b");
  DONE(nt_binary(op, a, b));
}
static int b_maximum(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return binary2(vm, "maximum", NT_OP_MAXIMUM, a, o); }
static int b_minimum(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return binary2(vm, "minimum", NT_OP_MINIMUM, a, o); }
static int b_pow(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return binary2(vm, "pow", NT_OP_POW, a, o); }
static int b_where(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "where"; Tmp tp = {0};
  TENSOR_ARG(c, 0, "cond");
  /* a scalar branch takes the other branch's dtype */
  nt_Tensor *a, *b;
  if (args[1].t == NB_TNUM && args[2].t == NB_TTENSOR) { a = tmp_keep(&tp, nt_scalar(args[1].u.n, T(args[2])->dtype)); b = T(args[2]); }
  else if (args[2].t == NB_TNUM && args[1].t == NB_TTENSOR) { a = T(args[1]); b = tmp_keep(&tp, nt_scalar(args[2].u.n, T(args[1])->dtype)); }
  else { a = as_tensor(vm, &tp, fname, "a", args[1]); if (!a) { tmp_free(&tp); return NB_ERR; } b = as_tensor(vm, &tp, fname, "b", args[2]); if (!b) { tmp_free(&tp); return NB_ERR; } }
  if (!a || !b) { tmp_free(&tp); return terr(vm); }
  DONE(nt_where(c, a, b));
}

/* ------------------------------------------------------------ builtins: reductions */
typedef struct RedDef { const char *name; int op; } RedDef;
static const RedDef red_defs[] = {
  { "sum", NT_OP_SUM }, { "mean", NT_OP_MEAN }, { "prod", NT_OP_PROD }, { "max", NT_OP_MAX }, { "min", NT_OP_MIN },
  { "logsumexp", NT_OP_LOGSUMEXP }, { "any", NT_OP_ANY }, { "all", NT_OP_ALL },
};
/* sum of a list adds its elements; max/min of two numbers compares them */
static int reduce_list(nb_VM *vm, int op, nb_Value list, nb_Value *out) {
  nb_List *l = list.u.p;
  if (op != NT_OP_SUM && op != NT_OP_MAX && op != NT_OP_MIN && op != NT_OP_MEAN) return nb_error_kind(vm, "TypeError", "cannot reduce a list with this function");
  if (l->n == 0) { if (op == NT_OP_SUM) { *out = nb_num(0); return NB_OK; } return nb_error_kind(vm, "ValueError", "reduction of an empty list"); }
  nb_Value acc = l->items[0]; nb_incref(acc);
  for (int i = 1; i < l->n; i++) {
    nb_Value r;
    if (op == NT_OP_SUM || op == NT_OP_MEAN) { if (nbV_binop(vm, OP_ADD, acc, l->items[i], &r)) { nb_decref(acc); return NB_ERR; } }
    else {
      nb_Value c;
      if (nbV_binop(vm, op == NT_OP_MAX ? OP_GT : OP_LT, l->items[i], acc, &c)) { nb_decref(acc); return NB_ERR; }
      bool t; int st = nbV_truthy(vm, c, &t); nb_decref(c);
      if (st) { nb_decref(acc); return NB_ERR; }
      r = t ? l->items[i] : acc; nb_incref(r);
    }
    nb_decref(acc); acc = r;
  }
  if (op == NT_OP_MEAN) { nb_Value r; int st = nbV_binop(vm, OP_DIV, acc, nb_num(l->n), &r); nb_decref(acc); if (st) return NB_ERR; acc = r; }
  *out = acc;
  return NB_OK;
}
static int reduce(nb_VM *vm, int k, nb_Value *args, nb_Value *out) {
  const char *fname = red_defs[k].name; int op = red_defs[k].op;
  Tmp tp = {0};
  if (args[0].t == NB_TNUM && args[1].t == NB_TNUM && (op == NT_OP_MAX || op == NT_OP_MIN)) {
    *out = nb_num(op == NT_OP_MAX ? fmax(args[0].u.n, args[1].u.n) : fmin(args[0].u.n, args[1].u.n)); return NB_OK;
  }
  if (args[0].t == NB_TLIST) {
    nb_List *l = args[0].u.p; bool allnum = true;
    for (int i = 0; i < l->n; i++) if (l->items[i].t != NB_TNUM) allnum = false;
    if (!allnum || l->n == 0) return reduce_list(vm, op, args[0], out);
  }
  int axes[NT_MAXDIM], na;
  if (axes_arg(vm, fname, args[1], axes, &na)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_reduce(op, x, na ? axes : NULL, na, nb_truthy(args[2])));
}
#define RED_FN(i) static int b_red##i(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return reduce(vm, i, a, o); }
RED_FN(0) RED_FN(1) RED_FN(2) RED_FN(3) RED_FN(4) RED_FN(5) RED_FN(6) RED_FN(7)
static nb_CFunc const red_fns[] = { b_red0, b_red1, b_red2, b_red3, b_red4, b_red5, b_red6, b_red7 };

static int varstd(nb_VM *vm, const char *fname, bool is_std, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  int axes[NT_MAXDIM], na; int64_t corr = 1;
  if (axes_arg(vm, fname, args[1], axes, &na)) return NB_ERR;
  if (args[3].t != NB_TNIL && to_int(vm, fname, "correction", args[3], &corr)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(is_std ? nt_std(x, na ? axes : NULL, na, (int)corr, nb_truthy(args[2])) : nt_var(x, na ? axes : NULL, na, (int)corr, nb_truthy(args[2])));
}
static int b_var(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return varstd(vm, "var", false, a, o); }
static int b_std(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return varstd(vm, "std", true, a, o); }
static int argminmax(nb_VM *vm, const char *fname, bool is_max, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  int64_t ax = 0; int a = 0;
  if (args[1].t != NB_TNIL) { if (to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR; a = (int)ax; }
  TENSOR_ARG(x, 0, "x");
  const int *ap = args[1].t == NB_TNIL ? NULL : &a;
  DONE(is_max ? nt_argmax(x, ap, nb_truthy(args[2])) : nt_argmin(x, ap, nb_truthy(args[2])));
}
static int b_argmax(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return argminmax(vm, "argmax", true, a, o); }
static int b_argmin(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return argminmax(vm, "argmin", false, a, o); }

/* ------------------------------------------------------------ builtins: linear algebra */
static int b_matmul(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "matmul"; Tmp tp = {0}; TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b"); DONE(nt_matmul(a, b)); }
static int b_dot(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "dot"; Tmp tp = {0}; TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b"); DONE(nt_dot(a, b)); }
static int b_outer(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "outer"; Tmp tp = {0}; TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b"); DONE(nt_outer(a, b)); }

/* ------------------------------------------------------------ builtins: shape */
static int b_reshape(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "reshape"; Tmp tp = {0};
  int64_t shape[NT_MAXDIM]; int nd;
  if (n < 2) return nb_error_kind(vm, "TypeError", "reshape(x, shape): missing the shape");
  if (n == 2 && (args[1].t == NB_TLIST || args[1].t == NB_TTENSOR)) { if (int_list(vm, fname, "shape", args[1], shape, NT_MAXDIM, &nd)) return NB_ERR; }
  else {
    if (n - 1 > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "reshape: too many dimensions");
    for (int i = 1; i < n; i++) if (to_int(vm, fname, "shape", args[i], &shape[i - 1])) return NB_ERR;
    nd = n - 1;
  }
  TENSOR_ARG(x, 0, "x");
  DONE(nt_reshape(x, shape, nd));
}
static int b_permute(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "permute"; Tmp tp = {0};
  int64_t p[NT_MAXDIM]; int np; int perm[NT_MAXDIM];
  if (n == 2) { if (int_list(vm, fname, "dims", args[1], p, NT_MAXDIM, &np)) return NB_ERR; }
  else { if (n - 1 > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "permute: too many axes"); for (int i = 1; i < n; i++) if (to_int(vm, fname, "dims", args[i], &p[i - 1])) return NB_ERR; np = n - 1; }
  for (int i = 0; i < np; i++) perm[i] = (int)p[i];
  TENSOR_ARG(x, 0, "x");
  DONE(nt_permute(x, perm, np));
}
static int b_transpose(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "transpose"; Tmp tp = {0};
  int64_t a = -2, b = -1;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "axis0", args[1], &a)) return NB_ERR;
  if (args[2].t != NB_TNIL && to_int(vm, fname, "axis1", args[2], &b)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  if (x->ndim < 2 && args[1].t == NB_TNIL) DONE(nt_retain(x));
  DONE(nt_transpose(x, (int)a, (int)b));
}
static int b_squeeze(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "squeeze"; Tmp tp = {0};
  int64_t a = NT_ALL_AXES;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "axis", args[1], &a)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_squeeze(x, (int)a));
}
static int b_unsqueeze(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "unsqueeze"; Tmp tp = {0};
  int64_t a;
  if (to_int(vm, fname, "axis", args[1], &a)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_unsqueeze(x, (int)a));
}
static int b_flatten(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "flatten"; Tmp tp = {0};
  int64_t a = 0, b = -1;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "start", args[1], &a)) return NB_ERR;
  if (args[2].t != NB_TNIL && to_int(vm, fname, "end", args[2], &b)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_flatten(x, (int)a, (int)b));
}
static int b_expand(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "expand"; Tmp tp = {0};
  int64_t shape[NT_MAXDIM]; int nd;
  if (int_list(vm, fname, "shape", args[1], shape, NT_MAXDIM, &nd)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_expand(x, shape, nd));
}
static int b_broadcast_to(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "broadcast_to"; Tmp tp = {0};
  int64_t shape[NT_MAXDIM]; int nd;
  if (int_list(vm, fname, "shape", args[1], shape, NT_MAXDIM, &nd)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_broadcast_to(x, shape, nd));
}
static int b_contiguous(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "contiguous"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_contiguous(x)); }
static int b_clone(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "clone"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_clone(x)); }
static int b_detach(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "detach"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_detach(x)); }

/* a list of tensors from a list value */
static int tensor_list(nb_VM *vm, Tmp *tp, const char *fname, nb_Value v, nt_Tensor ***out, int *n) {
  if (v.t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a list of tensors, got %s", fname, nb_typename(v));
  nb_List *l = v.u.p;
  if (l->n == 0) return nb_error_kind(vm, "ValueError", "%s: the list of tensors is empty", fname);
  nt_Tensor **ts = malloc(sizeof(nt_Tensor *) * (size_t)l->n);
  if (!ts) return nb_error(vm, "out of memory");
  for (int i = 0; i < l->n; i++) {
    if (l->items[i].t != NB_TTENSOR) { free(ts); return nb_error_kind(vm, "TypeError", "%s: element %d is a %s, not a tensor", fname, i, nb_typename(l->items[i])); }
    ts[i] = T(l->items[i]);
  }
  (void)tp;
  *out = ts; *n = l->n;
  return NB_OK;
}
static int cat_stack(nb_VM *vm, const char *fname, bool stack, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; nt_Tensor **ts = NULL; int k = 0; int64_t ax = 0;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  if (tensor_list(vm, &tp, fname, args[0], &ts, &k)) return NB_ERR;
  nt_Tensor *r = stack ? nt_stack(ts, k, (int)ax) : nt_concat(ts, k, (int)ax);
  free(ts);
  return ret(vm, r, out);
}
static int b_concat(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return cat_stack(vm, "concat", false, a, o); }
static int b_stack(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return cat_stack(vm, "stack", true, a, o); }
static int pieces(nb_VM *vm, nt_Tensor **ps, int k, nb_Value *out) {
  if (k < 0) return terr(vm);
  nb_List *l = nbL_new(k);
  for (int i = 0; i < k; i++) nbL_push(l, nb_obj(NB_TTENSOR, ps[i]));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
/* split(x, size_or_sizes, axis=0); strings split as text */
static int b_split_t(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "split"; Tmp tp = {0};
  if (args[0].t == NB_TSTR) return nbB_string_split(vm, args[0], args[1], out);
  int64_t ax = 0, sizes[1024]; int ns;
  if (args[2].t != NB_TNIL && to_int(vm, fname, "axis", args[2], &ax)) return NB_ERR;
  if (args[1].t == NB_TNIL) return nb_error_kind(vm, "TypeError", "split(x, size_or_sizes, axis=0): missing the size of the pieces");
  TENSOR_ARG(x, 0, "x");
  int axn = (int)(ax < 0 ? ax + x->ndim : ax);
  if (axn < 0 || axn >= x->ndim) { tmp_free(&tp); return nb_error_kind(vm, "IndexError", "split: axis %lld is out of range for a tensor of dimension %d", (long long)ax, x->ndim); }
  if (args[1].t == NB_TNUM) {
    int64_t sz; if (to_int(vm, fname, "size", args[1], &sz)) { tmp_free(&tp); return NB_ERR; }
    if (sz <= 0) { tmp_free(&tp); return nb_error_kind(vm, "ValueError", "split: size must be positive"); }
    int64_t len = x->shape[axn]; ns = 0;
    for (int64_t s = 0; s < len && ns < 1024; s += sz) sizes[ns++] = len - s < sz ? len - s : sz;
  } else if (int_list(vm, fname, "sizes", args[1], sizes, 1024, &ns)) { tmp_free(&tp); return NB_ERR; }
  nt_Tensor *ps[1024];
  int k = nt_split(x, sizes, ns, (int)ax, ps);
  tmp_free(&tp);
  return pieces(vm, ps, k, out);
}
static int b_chunk(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "chunk"; Tmp tp = {0};
  int64_t c, ax = 0;
  if (to_int(vm, fname, "chunks", args[1], &c) || (args[2].t != NB_TNIL && to_int(vm, fname, "axis", args[2], &ax))) return NB_ERR;
  if (c <= 0 || c > 1024) return nb_error_kind(vm, "ValueError", "chunk: chunks must be in 1..1024");
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *ps[1024];
  int k = nt_chunk(x, (int)c, (int)ax, ps);
  tmp_free(&tp);
  return pieces(vm, ps, k, out);
}
static int b_flip(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "flip"; Tmp tp = {0};
  int axes[NT_MAXDIM], na;
  if (axes_arg(vm, fname, args[1], axes, &na)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  if (na == 0) { for (int i = 0; i < x->ndim; i++) axes[i] = i; na = x->ndim; }
  DONE(nt_flip(x, axes, na));
}
static int b_repeat(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "repeat"; Tmp tp = {0};
  int64_t reps[NT_MAXDIM]; int nr;
  if (int_list(vm, fname, "reps", args[1], reps, NT_MAXDIM, &nr)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_repeat(x, reps, nr));
}
static int trilu(nb_VM *vm, const char *fname, bool upper, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; int64_t k = 0;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "k", args[1], &k)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(upper ? nt_triu(x, k) : nt_tril(x, k));
}
static int b_tril(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return trilu(vm, "tril", false, a, o); }
static int b_triu(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return trilu(vm, "triu", true, a, o); }

/* ------------------------------------------------------------ builtins: conversion */
static int b_to(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "to"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  if (args[1].t != NB_TSTR) { tmp_free(&tp); return nb_error_kind(vm, "TypeError", "to: expected a dtype or device name, got %s", nb_typename(args[1])); }
  const char *s = nb_str(args[1])->data;
  if (!strcmp(s, "cpu") || !strncmp(s, "cuda", 4)) { nt_Device d; get_device(vm, fname, args[1], &d); DONE(d == x->device ? nt_retain(x) : nt_to_device(x, d)); }
  nt_DType dt = NT_F32;
  if (get_dtype(vm, fname, args[1], NT_F32, &dt)) { tmp_free(&tp); return NB_ERR; }
  DONE(nt_to_dtype(x, dt));
}
static int b_cuda(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "cuda"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_to_device(x, NT_CUDA)); }
static int b_cpu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "cpu"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(x->device == NT_CPU ? nt_retain(x) : nt_to_device(x, NT_CPU)); }
static int b_float(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "float"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_to_dtype(x, NT_F32)); }
static int b_item(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "item";
  if (args[0].t == NB_TNUM) { *out = args[0]; return NB_OK; }
  if (args[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor, got %s", fname, nb_typename(args[0]));
  nb_Str *k = nbS_intern("item", 4); int st = nbT_field(vm, args[0], k, out); nb_decref(nb_strv(k)); return st;
}
static int b_tolist(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "tolist";
  if (args[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor, got %s", fname, nb_typename(args[0]));
  return tolist(vm, T(args[0]), out);
}
static int b_numel(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "numel"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); *out = nb_num((double)x->numel); tmp_free(&tp); return NB_OK; }
static int b_is_tensor(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)n; *out = nb_bool(args[0].t == NB_TTENSOR); return NB_OK; }
static int b_set_default_device(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; nt_Device d;
  if (args[0].t == NB_TNIL) return nb_error_kind(vm, "TypeError", "set_default_device: expected \"cpu\" or \"cuda\"");
  if (get_device(vm, "set_default_device", args[0], &d)) return NB_ERR;
  default_device = d;
  *out = nb_nil();
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: nn ops */
static int b_softmax(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "softmax"; Tmp tp = {0}; int64_t ax = -1;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_softmax(x, (int)ax));
}
static int b_log_softmax(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "log_softmax"; Tmp tp = {0}; int64_t ax = -1;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_log_softmax(x, (int)ax));
}
static int b_cross_entropy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cross_entropy"; Tmp tp = {0};
  int64_t ig = -100; double ls = 0;
  if (args[2].t != NB_TNIL && to_int(vm, fname, "ignore_index", args[2], &ig)) return NB_ERR;
  if (args[3].t != NB_TNIL && to_num(vm, fname, "label_smoothing", args[3], &ls)) return NB_ERR;
  TENSOR_ARG(x, 0, "logits"); TENSOR_ARG(t, 1, "targets");
  DONE(nt_cross_entropy(x, t, ig, ls));
}
static int b_mse_loss(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "mse_loss"; Tmp tp = {0}; TENSOR_ARG(a, 0, "input"); TENSOR_ARG(b, 1, "target"); DONE(nt_mse_loss(a, b)); }
static int b_layer_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "layer_norm"; Tmp tp = {0}; double eps = 1e-5;
  if (args[3].t != NB_TNIL && to_num(vm, fname, "eps", args[3], &eps)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *w = NULL, *b = NULL;
  if (args[1].t != NB_TNIL && !(w = as_tensor(vm, &tp, fname, "weight", args[1]))) { tmp_free(&tp); return NB_ERR; }
  if (args[2].t != NB_TNIL && !(b = as_tensor(vm, &tp, fname, "bias", args[2]))) { tmp_free(&tp); return NB_ERR; }
  DONE(nt_layer_norm(x, w, b, eps));
}
static int b_dropout(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "dropout"; Tmp tp = {0}; double p = 0.5;
  if (args[1].t != NB_TNIL && to_num(vm, fname, "p", args[1], &p)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_dropout(x, p, args[2].t == NB_TNIL ? true : nb_truthy(args[2])));
}
static int b_embedding(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "embedding"; Tmp tp = {0}; TENSOR_ARG(w, 0, "weight"); TENSOR_ARG(i, 1, "idx"); DONE(nt_embedding(w, i)); }
static int b_one_hot(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "one_hot"; Tmp tp = {0}; int64_t c = -1;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "num_classes", args[1], &c)) return NB_ERR;
  TENSOR_ARG(i, 0, "idx"); DONE(nt_one_hot(i, c));
}
static int b_take(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "take"; Tmp tp = {0}; int64_t ax = 0;
  if (args[2].t != NB_TNIL && to_int(vm, fname, "axis", args[2], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(i, 1, "idx"); DONE(nt_take(x, i, (int)ax));
}
static int b_index_select(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "index_select"; Tmp tp = {0}; int64_t ax;
  if (to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(i, 2, "idx"); DONE(nt_index_select(x, (int)ax, i));
}
static int b_gather(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "gather"; Tmp tp = {0}; int64_t ax;
  if (to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(i, 2, "idx"); DONE(nt_gather(x, (int)ax, i));
}
static int b_scatter_add(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "scatter_add"; Tmp tp = {0}; int64_t ax;
  if (to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(i, 2, "idx"); TENSOR_ARG(s, 3, "src"); DONE(nt_scatter_add(x, (int)ax, i, s));
}
static int b_masked_select(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "masked_select"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); TENSOR_ARG(m, 1, "mask"); DONE(nt_masked_select(x, m)); }
static int pair(nb_VM *vm, const char *fname, const char *what, nb_Value v, int dflt, int *a, int *b) {
  if (v.t == NB_TNIL) { *a = *b = dflt; return NB_OK; }
  int64_t p[2]; int k;
  if (int_list(vm, fname, what, v, p, 2, &k)) return NB_ERR;
  *a = (int)p[0]; *b = (int)(k == 2 ? p[1] : p[0]);
  return NB_OK;
}
static int b_conv2d(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "conv2d"; Tmp tp = {0};
  int sh, sw, ph, pw;
  if (pair(vm, fname, "stride", args[3], 1, &sh, &sw) || pair(vm, fname, "padding", args[4], 0, &ph, &pw)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(w, 1, "weight");
  nt_Tensor *b = NULL;
  if (args[2].t != NB_TNIL && !(b = as_tensor(vm, &tp, fname, "bias", args[2]))) { tmp_free(&tp); return NB_ERR; }
  DONE(nt_conv2d(x, w, b, sh, sw, ph, pw));
}
static int pool(nb_VM *vm, const char *fname, bool is_max, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; int kh, kw, sh, sw, ph, pw;
  if (pair(vm, fname, "kernel", args[1], 2, &kh, &kw)) return NB_ERR;
  if (args[2].t == NB_TNIL) { sh = kh; sw = kw; } else if (pair(vm, fname, "stride", args[2], 1, &sh, &sw)) return NB_ERR;
  if (pair(vm, fname, "padding", args[3], 0, &ph, &pw)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(is_max ? nt_max_pool2d(x, kh, kw, sh, sw, ph, pw) : nt_avg_pool2d(x, kh, kw, sh, sw, ph, pw));
}
static int b_max_pool2d(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return pool(vm, "max_pool2d", true, a, o); }
static int b_avg_pool2d(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return pool(vm, "avg_pool2d", false, a, o); }
static int two(nb_VM *vm, int rc, nt_Tensor *a, nt_Tensor *b, nb_Value *out) {
  if (rc < 0) return terr(vm);
  nb_List *l = nbL_new(2);
  nbL_push(l, nb_obj(NB_TTENSOR, a)); nbL_push(l, nb_obj(NB_TTENSOR, b));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_sort(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "sort"; Tmp tp = {0}; int64_t ax = -1;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *v = NULL, *i = NULL;
  int rc = nt_sort(x, (int)ax, nb_truthy(args[2]), &v, &i);
  tmp_free(&tp);
  return two(vm, rc, v, i, out);
}
static int b_argsort(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "argsort"; Tmp tp = {0}; int64_t ax = -1;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_argsort(x, (int)ax, nb_truthy(args[2])));
}
static int b_topk(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "topk"; Tmp tp = {0}; int64_t k, ax = -1;
  if (to_int(vm, fname, "k", args[1], &k) || (args[2].t != NB_TNIL && to_int(vm, fname, "axis", args[2], &ax))) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *v = NULL, *i = NULL;
  int rc = nt_topk(x, k, (int)ax, args[3].t == NB_TNIL ? true : nb_truthy(args[3]), &v, &i);
  tmp_free(&tp);
  return two(vm, rc, v, i, out);
}
static int b_cumsum(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cumsum"; Tmp tp = {0}; int64_t ax = 0;
  if (args[1].t != NB_TNIL && to_int(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_cumsum(x, (int)ax));
}

/* ------------------------------------------------------------ pytrees
** Nested records and lists whose leaves are tensors (models, optimizer
** state, gradients).  Non-tensor leaves (functions, numbers) are kept. */
#define MAX_TREE_DEPTH 64
typedef int (*LeafFn)(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out);
static int tree_map(nb_VM *vm, nb_Value v, LeafFn fn, void *ctx, nb_Value *out, int depth) {
  if (depth > MAX_TREE_DEPTH) return nb_error_kind(vm, "ValueError", "tree is nested too deeply (or contains itself)");
  if (v.t == NB_TLIST) {
    nb_List *l = v.u.p, *r = nbL_new(l->n);
    for (int i = 0; i < l->n; i++) {
      nb_Value x;
      if (tree_map(vm, l->items[i], fn, ctx, &x, depth + 1)) { nb_decref(nb_obj(NB_TLIST, r)); return NB_ERR; }
      nbL_push(r, x);
    }
    *out = nb_obj(NB_TLIST, r); return NB_OK;
  }
  if (v.t == NB_TREC) {
    nb_Rec *rec = v.u.p, *r = nbR_new(rec->n);
    for (int i = 0; i < rec->n; i++) {
      nb_Value x;
      if (tree_map(vm, rec->vals[i], fn, ctx, &x, depth + 1)) { nb_decref(nb_obj(NB_TREC, r)); return NB_ERR; }
      nbR_set(r, rec->keys[i], x);
    }
    *out = nb_obj(NB_TREC, r); return NB_OK;
  }
  return fn(vm, ctx, v, out);
}
/* Tensor leaves in order (borrowed). */
typedef struct Leaves { nt_Tensor **t; int n, cap; } Leaves;
static int collect_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  Leaves *ls = ctx;
  if (leaf.t == NB_TTENSOR) {
    if (ls->n == ls->cap) { ls->cap = ls->cap ? ls->cap * 2 : 16; ls->t = realloc(ls->t, sizeof(nt_Tensor *) * (size_t)ls->cap); if (!ls->t) return nb_error(vm, "out of memory"); }
    ls->t[ls->n++] = T(leaf);
  }
  *out = nb_nil();
  return NB_OK;
}
static int leaves(nb_VM *vm, nb_Value tree, Leaves *ls) {
  nb_Value junk = nb_nil();
  if (tree_map(vm, tree, collect_leaf, ls, &junk, 0)) return NB_ERR;
  nb_decref(junk);
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: autograd */
static int b_backward(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "backward"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "loss");
  nt_Tensor *g = NULL;
  if (args[1].t != NB_TNIL && !(g = as_tensor(vm, &tp, fname, "grad", args[1]))) { tmp_free(&tp); return NB_ERR; }
  int rc = nt_backward(x, g, nb_truthy(args[2]));
  tmp_free(&tp);
  if (rc) return terr(vm);
  *out = nb_nil();
  return NB_OK;
}
static int b_zero_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (leaves(vm, args[0], &ls)) { free(ls.t); return NB_ERR; }
  for (int i = 0; i < ls.n; i++) nt_set_grad(ls.t[i], NULL);
  free(ls.t);
  *out = nb_nil();
  return NB_OK;
}
static int b_requires_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; Leaves ls = {0};
  if (leaves(vm, args[0], &ls)) { free(ls.t); return NB_ERR; }
  bool on = args[1].t == NB_TNIL ? true : nb_truthy(args[1]);
  for (int i = 0; i < ls.n; i++) if (nt_dtype_is_float(ls.t[i]->dtype) && nt_set_requires_grad(ls.t[i], on)) { free(ls.t); return terr(vm); }
  free(ls.t);
  nb_incref(args[0]); *out = args[0];
  return NB_OK;
}
static int b_no_grad_enabled(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; *out = nb_bool(nt_grad_enabled()); return NB_OK; }

/* grad(f, argnums=0) and value_and_grad(f, argnums=0) return a callable
** record {__call, f, argnums, with_value}; calling it runs f on fresh leaf
** copies of the chosen arguments, backpropagates, and returns gradients
** shaped like those arguments (nil for non-tensor leaves). */
static int fresh_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  (void)ctx;
  if (leaf.t == NB_TTENSOR && nt_dtype_is_float(T(leaf)->dtype)) {
    nt_Tensor *d = nt_detach(T(leaf));
    if (!d || nt_set_requires_grad(d, true)) { nt_release(d); return terr(vm); }
    *out = nb_obj(NB_TTENSOR, d);
    return NB_OK;
  }
  nb_incref(leaf); *out = leaf;
  return NB_OK;
}
static int grad_of_leaf(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  (void)ctx;
  if (leaf.t == NB_TTENSOR && T(leaf)->requires_grad) {
    nt_Tensor *g = nt_grad(T(leaf));
    nt_Tensor *r = g ? nt_retain(g) : nt_zeros_like(T(leaf));
    if (!r) return terr(vm);
    *out = nb_obj(NB_TTENSOR, r);
    return NB_OK;
  }
  *out = nb_nil();
  return NB_OK;
}
static int grad_call(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  if (n < 1 || args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "grad: bad call");
  nb_Rec *self = args[0].u.p;
  nb_Value f = nbR_get_cstr(self, "f"), an = nbR_get_cstr(self, "argnums");
  bool with_value = nb_truthy(nbR_get_cstr(self, "with_value"));
  nb_Value *fargs = args + 1; int nf = n - 1;
  int64_t nums[16]; int nn;
  bool multi = an.t == NB_TLIST || (an.t == NB_TTENSOR && T(an)->ndim == 1);
  if (int_list(vm, "grad", "argnums", an, nums, 16, &nn)) return NB_ERR;
  nb_Value *call = malloc(sizeof(nb_Value) * (size_t)(nf + 1));
  if (!call) return nb_error(vm, "out of memory");
  for (int i = 0; i < nf; i++) { call[i] = fargs[i]; nb_incref(call[i]); }
  int st = NB_OK;
  for (int k = 0; k < nn && !st; k++) {
    if (nums[k] < 0 || nums[k] >= nf) { st = nb_error_kind(vm, "IndexError", "grad: argnums %lld is out of range for %d arguments", (long long)nums[k], nf); break; }
    nb_Value fresh = nb_nil();
    if ((st = tree_map(vm, fargs[nums[k]], fresh_leaf, NULL, &fresh, 0))) break;
    nb_store(&call[nums[k]], fresh);
  }
  nb_Value val = nb_nil();
  bool prev = nt_set_grad_enabled(true);
  if (!st) st = nbV_call(vm, f, call, nf, &val);
  if (!st) {
    if (val.t != NB_TTENSOR) st = nb_error_kind(vm, "TypeError", "grad: the function must return a tensor (the loss), got %s", nb_typename(val));
    else if (T(val)->numel != 1) st = nb_error_kind(vm, "ValueError", "grad: the function must return a single-element loss, got %lld elements", (long long)T(val)->numel);
    else if (!T(val)->requires_grad) st = nb_error_kind(vm, "ValueError", "grad: the loss does not depend on the differentiated arguments");
    else if (nt_backward(T(val), NULL, false)) st = terr(vm);
  }
  nt_set_grad_enabled(prev);
  nb_Value grads = nb_nil();
  if (!st) {
    if (multi) {
      nb_List *l = nbL_new(nn);
      for (int k = 0; k < nn && !st; k++) { nb_Value g; if ((st = tree_map(vm, call[nums[k]], grad_of_leaf, NULL, &g, 0))) break; nbL_push(l, g); }
      grads = nb_obj(NB_TLIST, l);
    } else st = tree_map(vm, call[nums[0]], grad_of_leaf, NULL, &grads, 0);
  }
  for (int i = 0; i < nf; i++) nb_decref(call[i]);
  free(call);
  if (st) { nb_decref(val); nb_decref(grads); return NB_ERR; }
  if (with_value) {
    nb_List *l = nbL_new(2);
    nt_Tensor *dv = nt_detach(T(val));
    nb_decref(val);
    nbL_push(l, nb_obj(NB_TTENSOR, dv)); nbL_push(l, grads);
    *out = nb_obj(NB_TLIST, l);
  } else { nb_decref(val); *out = grads; }
  return NB_OK;
}
static nb_Builtin grad_call_builtin[] = { { "__grad_call", grad_call, "*args", "internal: applies grad(f)" }, { NULL, NULL, NULL, NULL } };
static int make_grad(nb_VM *vm, nb_Value *args, bool with_value, nb_Value *out) {
  if (args[0].t != NB_TFUNC && args[0].t != NB_TBUILTIN && args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "grad: expected a function, got %s", nb_typename(args[0]));
  nb_Rec *r = nbR_new(4);
  nb_Value call; call.t = NB_TBUILTIN; call.u.bi = &grad_call_builtin[0];
  nbR_set_cstr(r, "__call", call);
  nb_incref(args[0]); nbR_set_cstr(r, "f", args[0]);
  nb_incref(args[1]); nbR_set_cstr(r, "argnums", args[1].t == NB_TNIL ? nb_num(0) : args[1]);
  nbR_set_cstr(r, "with_value", nb_bool(with_value));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return make_grad(vm, args, false, out); }
static int b_value_and_grad(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return make_grad(vm, args, true, out); }

/* gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3): compares autograd's
** gradient of f at inputs (a list of tensors, promoted to f64) with central
** finite differences.  A non-scalar output is reduced with fixed pseudo-random
** weights so every output element matters.  Returns true, or raises an error
** naming the input, the element and both values. */
static int gc_eval(nb_VM *vm, nb_Value f, nb_Value *ins, int n, nt_Tensor *w, double *out, nt_Tensor **graph) {
  nb_Value r;
  if (nbV_call(vm, f, ins, n, &r)) return NB_ERR;
  if (r.t != NB_TTENSOR) { nb_decref(r); return nb_error_kind(vm, "TypeError", "gradcheck: f must return a tensor, got %s", nb_typename(r)); }
  nt_Tensor *y = nt_to_dtype(T(r), NT_F64);
  nb_decref(r);
  if (!y) return terr(vm);
  nt_Tensor *s = NULL;
  if (w && w->numel == y->numel) { nt_Tensor *wy = nt_mul(y, w); s = wy ? nt_sum(wy, NULL, 0, false) : NULL; nt_release(wy); }
  else s = nt_sum(y, NULL, 0, false);
  nt_release(y);
  if (!s) return terr(vm);
  if (nt_item(s, out)) { nt_release(s); return terr(vm); }
  if (graph) *graph = s; else nt_release(s);
  return NB_OK;
}
static int b_gradcheck(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "gradcheck";
  double eps = 1e-6, atol = 1e-5, rtol = 1e-3;
  if ((args[2].t != NB_TNIL && to_num(vm, fname, "eps", args[2], &eps)) || (args[3].t != NB_TNIL && to_num(vm, fname, "atol", args[3], &atol)) ||
      (args[4].t != NB_TNIL && to_num(vm, fname, "rtol", args[4], &rtol))) return NB_ERR;
  nb_Value f = args[0];
  if (args[1].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "gradcheck: inputs must be a list of tensors");
  nb_List *il = args[1].u.p;
  int k = il->n, st = NB_OK;
  nb_Value *ins = calloc((size_t)k + 1, sizeof(nb_Value));
  if (!ins) return nb_error(vm, "out of memory");
  bool prev = nt_set_grad_enabled(true);
  for (int i = 0; i < k && !st; i++) {
    nb_Value v = il->items[i];
    if (v.t == NB_TTENSOR && nt_dtype_is_float(T(v)->dtype)) {
      nt_Tensor *d = nt_to_dtype(T(v), NT_F64), *c = d ? nt_clone(d) : NULL;
      nt_release(d);
      nt_Tensor *leaf = c ? nt_detach(c) : NULL;
      nt_release(c);
      if (!leaf || nt_set_requires_grad(leaf, true)) { nt_release(leaf); st = terr(vm); break; }
      ins[i] = nb_obj(NB_TTENSOR, leaf);
    } else { ins[i] = v; nb_incref(v); }
  }
  /* fixed weights for the output: a deterministic sequence, not the global RNG */
  nt_Tensor *w = NULL;
  double base = 0;
  nt_Tensor *graph = NULL;
  if (!st) {
    nb_Value r;
    if (nbV_call(vm, f, ins, k, &r)) st = NB_ERR;
    else if (r.t != NB_TTENSOR) { st = nb_error_kind(vm, "TypeError", "gradcheck: f must return a tensor, got %s", nb_typename(r)); nb_decref(r); }
    else {
      int64_t m = T(r)->numel;
      double *wv = malloc(sizeof(double) * (size_t)(m ? m : 1));
      uint64_t x = 0x9E3779B97F4A7C15ull;
      for (int64_t i = 0; i < m; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; wv[i] = 0.5 + (double)(x >> 11) / 9007199254740992.0; }
      w = nt_from_buffer(wv, NT_F64, T(r)->shape, T(r)->ndim, NT_F64);
      free(wv);
      nb_decref(r);
      if (!w) st = terr(vm);
    }
  }
  if (!st) st = gc_eval(vm, f, ins, k, w, &base, &graph);
  if (!st && nt_backward(graph, NULL, false)) st = terr(vm);
  nt_release(graph);
  nt_set_grad_enabled(false);
  for (int i = 0; i < k && !st; i++) {
    if (ins[i].t != NB_TTENSOR || !T(ins[i])->requires_grad) continue;
    nt_Tensor *x = T(ins[i]);
    nt_Tensor *g = nt_grad(x);
    double *xd = nt_data_ptr(x);
    double *gd = NULL;
    nt_Tensor *gc = g ? nt_contiguous(g) : NULL;
    if (gc) gd = nt_data_ptr(gc);
    for (int64_t e = 0; e < x->numel && !st; e++) {
      double keep = xd[e], fp, fm;
      xd[e] = keep + eps; st = gc_eval(vm, f, ins, k, w, &fp, NULL);
      if (!st) { xd[e] = keep - eps; st = gc_eval(vm, f, ins, k, w, &fm, NULL); }
      xd[e] = keep;
      if (st) break;
      double num = (fp - fm) / (2 * eps), ana = gd ? gd[e] : 0;
      if (fabs(ana - num) > atol + rtol * fabs(num))
        st = nb_error_kind(vm, "GradcheckError", "gradcheck: input %d, element %lld: autograd %.8g, finite differences %.8g (|diff| %.3g > atol %g + rtol %g * |numeric|)", i, (long long)e, ana, num, fabs(ana - num), atol, rtol);
    }
    nt_release(gc);
  }
  nt_set_grad_enabled(prev);
  nt_release(w);
  for (int i = 0; i < k; i++) nb_decref(ins[i]);
  free(ins);
  if (st) return NB_ERR;
  *out = nb_bool(true);
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: optimizers
** One builtin per optimizer updates every parameter of a pytree in place
** through one fused op (tensor/toptim.c on the CPU, one launch on the GPU).
** params, grads (nil: each parameter's .grad) and state trees share one
** structure. */
static int flat_params(nb_VM *vm, const char *fname, nb_Value *trees, int ntrees, Leaves *ls) {
  for (int i = 0; i < ntrees; i++) {
    if (trees[i].t == NB_TNIL) continue;
    if (leaves(vm, trees[i], &ls[i])) return NB_ERR;
    if (i && ls[i].n != ls[0].n) return nb_error_kind(vm, "ValueError", "%s: the trees have %d and %d tensors (they must match the parameters)", fname, ls[0].n, ls[i].n);
  }
  return NB_OK;
}
/* grads from the grads tree, or each parameter's .grad */
static nt_Tensor **grads_of(Leaves *params, Leaves *grads) {
  nt_Tensor **g = malloc(sizeof(nt_Tensor *) * (size_t)(params->n + 1));
  if (g) for (int k = 0; k < params->n; k++) g[k] = grads->n ? grads->t[k] : nt_grad(params->t[k]);
  return g;
}

/* adamw_update(params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step) */
static int b_adamw_update(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "adamw_update";
  nt_OptimArgs o; memset(&o, 0, sizeof o);
  if (to_num(vm, fname, "lr", args[4], &o.lr) || to_num(vm, fname, "beta1", args[5], &o.beta1) || to_num(vm, fname, "beta2", args[6], &o.beta2) ||
      to_num(vm, fname, "eps", args[7], &o.eps) || to_num(vm, fname, "weight_decay", args[8], &o.weight_decay) || to_num(vm, fname, "step", args[9], &o.step)) return NB_ERR;
  if (args[2].t == NB_TNIL || args[3].t == NB_TNIL) return nb_error_kind(vm, "TypeError", "%s: needs the m and v state trees", fname);
  Leaves ls[4] = {{0}};
  int st = flat_params(vm, fname, args, 4, ls);
  nt_Tensor **g = st ? NULL : grads_of(&ls[0], &ls[1]);
  if (!st && !g) st = nb_error(vm, "out of memory");
  if (!st) {
    o.n = ls[0].n; o.params = ls[0].t; o.grads = g; o.exp_avg = ls[2].t; o.exp_avg_sq = ls[3].t;
    if (nt_optim_adamw(&o)) st = terr(vm);
  }
  free(g);
  for (int i = 0; i < 4; i++) free(ls[i].t);
  *out = nb_nil();
  return st;
}
/* sgd_update(params, grads, bufs, lr, momentum=0, nesterov=false, weight_decay=0) */
static int b_sgd_update(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "sgd_update";
  nt_OptimArgs o; memset(&o, 0, sizeof o);
  if (to_num(vm, fname, "lr", args[3], &o.lr) || (args[4].t != NB_TNIL && to_num(vm, fname, "momentum", args[4], &o.beta1)) ||
      (args[6].t != NB_TNIL && to_num(vm, fname, "weight_decay", args[6], &o.weight_decay))) return NB_ERR;
  o.nesterov = nb_truthy(args[5]);
  if (o.beta1 != 0 && args[2].t == NB_TNIL) return nb_error_kind(vm, "ValueError", "%s: momentum needs a buffer tree", fname);
  Leaves ls[3] = {{0}};
  int st = flat_params(vm, fname, args, 3, ls);
  nt_Tensor **g = st ? NULL : grads_of(&ls[0], &ls[1]);
  if (!st && !g) st = nb_error(vm, "out of memory");
  if (!st) {
    o.n = ls[0].n; o.params = ls[0].t; o.grads = g; o.exp_avg = o.beta1 != 0 ? ls[2].t : NULL;
    if (nt_optim_sgd(&o)) st = terr(vm);
  }
  free(g);
  for (int i = 0; i < 3; i++) free(ls[i].t);
  *out = nb_nil();
  return st;
}
/* clip_grad_norm(grads_or_params, max_norm): scales gradients in place so
** their global L2 norm is at most max_norm; returns the norm before clipping. */
static int b_clip_grad_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "clip_grad_norm";
  double maxn;
  if (to_num(vm, fname, "max_norm", args[1], &maxn)) return NB_ERR;
  Leaves ls = {0};
  if (leaves(vm, args[0], &ls)) { free(ls.t); return NB_ERR; }
  double ss = 0;
  for (int k = 0; k < ls.n; k++) {
    nt_Tensor *g = nt_grad(ls.t[k]) ? nt_grad(ls.t[k]) : ls.t[k];
    if (!nt_dtype_is_float(g->dtype)) continue;
    bool prev = nt_set_grad_enabled(false);
    nt_Tensor *sq = nt_binary_scalar_ex(NT_OP_POW, g, 2, NT_SCALAR_INT);
    nt_Tensor *s = sq ? nt_sum(sq, NULL, 0, false) : NULL;
    double v = 0;
    int bad = !s || nt_item(s, &v);
    nt_release(sq); nt_release(s);
    nt_set_grad_enabled(prev);
    if (bad) { free(ls.t); return terr(vm); }
    ss += v;
  }
  double norm = sqrt(ss);
  if (norm > maxn && norm > 0) {
    double scale = maxn / (norm + 1e-6);
    for (int k = 0; k < ls.n; k++) {
      nt_Tensor *g = nt_grad(ls.t[k]) ? nt_grad(ls.t[k]) : ls.t[k];
      if (!nt_dtype_is_float(g->dtype)) continue;
      bool prev = nt_set_grad_enabled(false);
      nt_Tensor *sc = nt_binary_scalar_ex(NT_OP_MUL, g, scale, NT_SCALAR_FLOAT);
      int bad = !sc || nt_copy_(g, sc);
      nt_release(sc);
      nt_set_grad_enabled(prev);
      if (bad) { free(ls.t); return terr(vm); }
    }
  }
  free(ls.t);
  *out = nb_num(norm);
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: files
** save(path, tree): nested records/lists of tensors as safetensors, keys
** flattened with dots (like a PyTorch state_dict: "layers.0.w").  Numbers,
** strings and bools in the tree go to the metadata ("nabla:num:key", ...) so
** optimizer state round-trips; functions are code, not state, and are skipped.
** The write is atomic (temp file, fsync, rename). */
typedef struct SaveCtx { nt_io_array *arr; int n, cap; char **mk, **mv; int nm, capm; nt_Tensor **hold; int nhold; } SaveCtx;
static void save_free(SaveCtx *s) {
  for (int i = 0; i < s->n; i++) free(s->arr[i].name);
  for (int i = 0; i < s->nm; i++) { free(s->mk[i]); free(s->mv[i]); }
  for (int i = 0; i < s->nhold; i++) nt_release(s->hold[i]);
  free(s->arr); free(s->mk); free(s->mv); free(s->hold);
}
/* metadata entry "nabla:<kind>:<key>" = value (numbers, strings, bools, nil, empty boxes) */
static void add_meta(SaveCtx *s, const char *kind, const char *name, const char *value) {
  if (s->nm == s->capm) { s->capm = s->capm ? s->capm * 2 : 8; s->mk = realloc(s->mk, sizeof(char *) * (size_t)s->capm); s->mv = realloc(s->mv, sizeof(char *) * (size_t)s->capm); if (!s->mk || !s->mv) abort(); }
  nb_Buf k = {0};
  nbB_printf(&k, "nabla:%s:%s", kind, name);
  s->mk[s->nm] = strdup(nbB_cstr(&k)); s->mv[s->nm] = strdup(value); s->nm++;
  nbB_free(&k);
}
static int save_walk(nb_VM *vm, SaveCtx *s, nb_Value v, nb_Buf *key, int depth) {
  if (depth > MAX_TREE_DEPTH) return nb_error_kind(vm, "ValueError", "save: tree nested too deeply (or contains itself)");
  size_t mark = key->n;
  if ((v.t == NB_TREC || v.t == NB_TLIST) && (v.t == NB_TREC ? nb_rec(v)->n : nb_list(v)->n) == 0 && mark) {
    /* an empty container keeps its place */
    add_meta(s, "box", nbB_cstr(key), v.t == NB_TREC ? "rec" : "list");
    return NB_OK;
  }
  if (v.t == NB_TREC || v.t == NB_TLIST) {
    int cnt = v.t == NB_TREC ? nb_rec(v)->n : nb_list(v)->n;
    for (int i = 0; i < cnt; i++) {
      key->n = mark;
      if (mark) nbB_putc(key, '.');
      if (v.t == NB_TREC) {
        nb_Str *k = nb_rec(v)->keys[i];
        if (memchr(k->data, '.', k->len)) return nb_error_kind(vm, "ValueError", "save: record key \"%s\" contains a '.', which is the path separator", k->data);
        nbB_add(key, k->data, k->len);
      } else nbB_printf(key, "%d", i);
      nbB_cstr(key);
      if (save_walk(vm, s, v.t == NB_TREC ? nb_rec(v)->vals[i] : nb_list(v)->items[i], key, depth + 1)) return NB_ERR;
    }
    key->n = mark; if (key->p) key->p[mark] = 0;
    return NB_OK;
  }
  const char *name = nbB_cstr(key);
  if (v.t == NB_TTENSOR) {
    if (!*name) return nb_error_kind(vm, "ValueError", "save: a bare tensor needs a name; save a record like {x: t}");
    nt_Tensor *c = nt_contiguous(T(v));
    if (c && c->device != NT_CPU) { nt_Tensor *h = nt_to_device(c, NT_CPU); nt_release(c); c = h; }
    if (!c) return terr(vm);
    if (s->n == s->cap) { s->cap = s->cap ? s->cap * 2 : 16; s->arr = realloc(s->arr, sizeof(nt_io_array) * (size_t)s->cap); s->hold = realloc(s->hold, sizeof(nt_Tensor *) * (size_t)s->cap); if (!s->arr || !s->hold) abort(); }
    s->hold[s->nhold++] = c;
    nt_io_array *a = &s->arr[s->n++];
    memset(a, 0, sizeof *a);
    a->name = strdup(name); a->dtype = (nt_io_dtype)c->dtype; a->ndim = c->ndim;
    for (int i = 0; i < c->ndim; i++) a->shape[i] = c->shape[i];
    a->data = nt_data_ptr(c); a->nbytes = (size_t)c->numel * nt_dtype_size(c->dtype);
    return NB_OK;
  }
  /* functions and modules are code, not state: they keep their place as nil */
  const char *kind = v.t == NB_TNUM ? "num" : v.t == NB_TSTR ? "str" : v.t == NB_TBOOL ? "bool" : "nil";
  nb_Buf val = {0};
  nb_tostring(&val, v, false);
  add_meta(s, kind, name, nbB_cstr(&val));
  nbB_free(&val);
  return NB_OK;
}
static int b_save(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "save";
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: path must be a string", fname);
  if (args[1].t != NB_TREC && args[1].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "save: expected a record (or list) of tensors, got %s", nb_typename(args[1]));
  SaveCtx s; memset(&s, 0, sizeof s);
  nb_Buf key = {0};
  int st = save_walk(vm, &s, args[1], &key, 0);
  nbB_free(&key);
  if (!st && nt_st_save(nb_str(args[0])->data, s.arr, (size_t)s.n, (const char *const *)s.mk, (const char *const *)s.mv, (size_t)s.nm))
    st = nb_error_kind(vm, "IOError", "%s", nt_io_error());
  save_free(&s);
  *out = nb_nil();
  return st;
}

/* Puts v at the dotted path in the nested record root (creating records). */
static int tree_put(nb_VM *vm, nb_Rec *root, const char *path, nb_Value v) {
  nb_Rec *cur = root;
  const char *p = path;
  for (;;) {
    const char *dot = strchr(p, '.');
    size_t len = dot ? (size_t)(dot - p) : strlen(p);
    nb_Str *k = nbS_intern(p, len);
    if (!dot) { nbR_set(cur, k, v); nb_decref(nb_strv(k)); return NB_OK; }
    int i = nbR_find(cur, k);
    if (i < 0) { nbR_set(cur, k, nb_obj(NB_TREC, nbR_new(4))); i = nbR_find(cur, k); }
    nb_decref(nb_strv(k));
    if (cur->vals[i].t != NB_TREC) { nb_decref(v); return nb_error_kind(vm, "ValueError", "load: key \"%s\" is both a value and a prefix of another key", path); }
    cur = cur->vals[i].u.p;
    p = dot + 1;
  }
}
/* records whose keys are exactly 0..n-1 (in any order) were lists when saved */
static nb_Value listify(nb_Value v) {
  if (v.t != NB_TREC) return v;
  nb_Rec *r = v.u.p;
  for (int i = 0; i < r->n; i++) r->vals[i] = listify(r->vals[i]);
  if (r->n == 0) return v;
  int *pos = malloc(sizeof(int) * (size_t)r->n);
  if (!pos) return v;
  for (int i = 0; i < r->n; i++) pos[i] = -1;
  for (int i = 0; i < r->n; i++) {
    char *end; const char *k = r->keys[i]->data;
    long j = strtol(k, &end, 10);
    if (!*k || *end || (k[0] == '0' && k[1]) || j < 0 || j >= r->n || pos[j] >= 0) { free(pos); return v; }
    pos[j] = i;
  }
  nb_List *l = nbL_new(r->n);
  for (int j = 0; j < r->n; j++) { nbL_push(l, r->vals[pos[j]]); r->vals[pos[j]] = nb_nil(); }
  free(pos);
  nb_decref(v);
  return nb_obj(NB_TLIST, l);
}
static int set_to_record(nb_VM *vm, nt_io_set *set, bool nested, nb_Value *out) {
  nb_Rec *root = nbR_new((int)set->n);
  for (size_t i = 0; i < set->n; i++) {
    nt_io_array *a = &set->arrays[i];
    nt_Tensor *t = nt_from_buffer(a->data, (nt_DType)a->dtype, a->shape, a->ndim, (nt_DType)a->dtype);
    if (!t) { nb_decref(nb_obj(NB_TREC, root)); return terr(vm); }
    nb_Value tv = nb_obj(NB_TTENSOR, t);
    if (nested) { if (tree_put(vm, root, a->name, tv)) { nb_decref(nb_obj(NB_TREC, root)); return NB_ERR; } }
    else nbR_set_cstr(root, a->name, tv);
  }
  for (size_t i = 0; nested && i < set->nmeta; i++) {
    const char *k = set->meta_keys[i], *val = set->meta_values[i];
    if (strncmp(k, "nabla:", 6) != 0) continue;
    const char *kind = k + 6, *colon = strchr(kind, ':');
    if (!colon) continue;
    nb_Value v;
    if (!strncmp(kind, "num:", 4)) v = nb_num(strtod(val, NULL));
    else if (!strncmp(kind, "str:", 4)) v = nb_strv(nbS_cstr(val));
    else if (!strncmp(kind, "bool:", 5)) v = nb_bool(!strcmp(val, "true"));
    else if (!strncmp(kind, "nil:", 4)) v = nb_nil();
    else if (!strncmp(kind, "box:", 4)) v = !strcmp(val, "rec") ? nb_obj(NB_TREC, nbR_new(0)) : nb_obj(NB_TLIST, nbL_new(0));
    else continue;
    if (tree_put(vm, root, colon + 1, v)) { nb_decref(nb_obj(NB_TREC, root)); return NB_ERR; }
  }
  *out = nested ? listify(nb_obj(NB_TREC, root)) : nb_obj(NB_TREC, root);
  return NB_OK;
}
static int b_load(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load: path must be a string");
  nt_io_set *set = nt_st_load(nb_str(args[0])->data);
  if (!set) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  int st = set_to_record(vm, set, true, out);
  nt_io_set_free(set);
  return st;
}
static int b_load_npz(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_npz: path must be a string");
  nt_io_set *set = nt_npz_load(nb_str(args[0])->data);
  if (!set) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  int st = set_to_record(vm, set, false, out);
  nt_io_set_free(set);
  return st;
}
static int b_load_npy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_npy: path must be a string");
  nt_io_set *set = nt_npy_load(nb_str(args[0])->data);
  if (!set) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  nt_io_array *a = &set->arrays[0];
  nt_Tensor *t = nt_from_buffer(a->data, (nt_DType)a->dtype, a->shape, a->ndim, (nt_DType)a->dtype);
  nt_io_set_free(set);
  return ret(vm, t, out);
}
static int b_save_npy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "save_npy"; Tmp tp = {0};
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "save_npy: path must be a string");
  TENSOR_ARG(x, 1, "x");
  nt_Tensor *c = nt_contiguous(x);
  if (!c) { tmp_free(&tp); return terr(vm); }
  nt_io_array a; memset(&a, 0, sizeof a);
  a.name = (char *)""; a.dtype = (nt_io_dtype)c->dtype; a.ndim = c->ndim;
  for (int i = 0; i < c->ndim; i++) a.shape[i] = c->shape[i];
  a.data = nt_data_ptr(c); a.nbytes = (size_t)c->numel * nt_dtype_size(c->dtype);
  int rc = nt_npy_save(nb_str(args[0])->data, &a);
  nt_release(c); tmp_free(&tp);
  if (rc) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  *out = nb_nil();
  return NB_OK;
}
/* load_csv(path, delim=",") → {columns: [names] or nil, data: f64 tensor [rows, cols]} */
static int b_load_csv(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_csv: path must be a string");
  char delim = 0;
  if (args[1].t == NB_TSTR) { if (nb_str(args[1])->len != 1) return nb_error_kind(vm, "ValueError", "load_csv: delim must be one character"); delim = nb_str(args[1])->data[0]; }
  nt_csv *c = nt_csv_load(nb_str(args[0])->data, delim);
  if (!c) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  int64_t shape[2] = { (int64_t)c->nrows, (int64_t)c->ncols };
  nt_Tensor *t = nt_from_buffer(c->data ? (void *)c->data : (void *)(double[1]){0}, NT_F64, shape, 2, NT_F64);
  nb_Value cols = nb_nil();
  if (c->names) {
    nb_List *l = nbL_new((int)c->ncols);
    for (size_t i = 0; i < c->ncols; i++) nbL_push(l, nb_strv(nbS_cstr(c->names[i])));
    cols = nb_obj(NB_TLIST, l);
  }
  nt_csv_free(c);
  if (!t) { nb_decref(cols); return terr(vm); }
  nb_Rec *r = nbR_new(2);
  nbR_set_cstr(r, "columns", cols);
  nbR_set_cstr(r, "data", nb_obj(NB_TTENSOR, t));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: cuda
** `cuda` is a record: callable (`cuda(x)`, `x.cuda()` moves x to the GPU)
** and a namespace (`cuda.available()`, `cuda.memory()`, ...). */
static int b_cuda_available(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; char r[256]; *out = nb_bool(nt_cuda_available(r, sizeof r)); return NB_OK; }
static int b_cuda_reason(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n; char r[512] = "";
  *out = nt_cuda_available(r, sizeof r) ? nb_nil() : nb_strv(nbS_cstr(r));
  return NB_OK;
}
static int b_cuda_device_count(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; *out = nb_num(nt_cuda_device_count()); return NB_OK; }
static int b_cuda_synchronize(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)args; (void)n; if (nt_cuda_synchronize()) return terr(vm); *out = nb_nil(); return NB_OK; }
static int b_cuda_memory(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n; size_t a = 0, c = 0, p = 0;
  nt_cuda_memory(&a, &c, &p);
  nb_Rec *r = nbR_new(3);
  nbR_set_cstr(r, "allocated", nb_num((double)a)); nbR_set_cstr(r, "cached", nb_num((double)c)); nbR_set_cstr(r, "peak", nb_num((double)p));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_cuda_empty_cache(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; nt_cuda_empty_cache(); *out = nb_nil(); return NB_OK; }
static int b_cuda_move(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; nb_Value a[1] = { args[1] }; return b_cuda(vm, a, 1, out); }
static nb_Builtin cuda_members[] = {
  { "cuda.__call", b_cuda_move, "self, x", "cuda(x): x on the GPU" },
  { "cuda.available", b_cuda_available, "", "cuda.available(): whether CUDA tensors can be made here" },
  { "cuda.unavailable_reason", b_cuda_reason, "", "cuda.unavailable_reason(): why CUDA cannot be used (nil when it can)" },
  { "cuda.device_count", b_cuda_device_count, "", "cuda.device_count(): number of visible GPUs" },
  { "cuda.synchronize", b_cuda_synchronize, "", "cuda.synchronize(): waits for queued GPU work; raises a pending asynchronous error" },
  { "cuda.memory", b_cuda_memory, "", "cuda.memory(): {allocated, cached, peak} bytes of the caching allocator" },
  { "cuda.empty_cache", b_cuda_empty_cache, "", "cuda.empty_cache(): returns cached GPU blocks to the driver" },
  { NULL, NULL, NULL, NULL }
};
static int cuda_value(nb_VM *vm, nb_Value *out) {
  (void)vm;
  static const char *const fields[] = { "__call", "available", "unavailable_reason", "device_count", "synchronize", "memory", "empty_cache" };
  nb_Rec *r = nbR_new(8);
  for (int i = 0; i < 7; i++) { nb_Value b; b.t = NB_TBUILTIN; b.u.bi = &cuda_members[i]; nbR_set_cstr(r, fields[i], b); }
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_set_matmul_precision(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "set_matmul_precision: expected \"highest\", \"high\" or \"tf32\"");
  if (nt_set_matmul_precision(nb_str(args[0])->data)) return terr(vm);
  *out = nb_nil();
  return NB_OK;
}

/* ------------------------------------------------------------ the table */
#define KW_CREATE "*shape, dtype=nil, device=nil, requires_grad=false"
static nb_Builtin tensor_builtins[] = {
  { "tensor", b_tensor, "x, dtype=nil, device=nil, requires_grad=false", "tensor(x, dtype=nil, device=nil, requires_grad=false): a tensor from a number, (nested) list or tensor (copied)" },
  { "zeros", b_zeros, KW_CREATE, "zeros(*shape, dtype=\"f32\", device=nil, requires_grad=false): a tensor of zeros; zeros(2, 3) or zeros([2, 3])" },
  { "ones", b_ones, KW_CREATE, "ones(*shape, dtype=\"f32\", ...): a tensor of ones" },
  { "empty", b_empty, KW_CREATE, "empty(*shape, dtype=\"f32\", ...): an uninitialized tensor" },
  { "rand", b_rand, KW_CREATE, "rand(*shape, dtype=\"f32\", ...): uniform [0, 1) from the Philox generator (see seed)" },
  { "randn", b_randn, KW_CREATE, "randn(*shape, dtype=\"f32\", ...): standard normal from the Philox generator" },
  { "full", b_full, "shape, value, dtype=nil, device=nil, requires_grad=false", "full(shape, value, dtype=\"f32\"): a tensor filled with value" },
  { "normal", b_normal, "mean, std, shape, dtype=nil, device=nil, requires_grad=false", "normal(mean, std, shape): normal samples" },
  { "randint", b_randint, "low, high, shape, dtype=nil, device=nil", "randint(low, high, shape, dtype=\"i64\"): uniform integers in [low, high)" },
  { "randperm", b_randperm, "n, dtype=nil, device=nil", "randperm(n): a random permutation of 0..n-1" },
  { "seed", b_seed, "seed", "seed(n): reseeds the random generator (reproducible runs)" },
  { "arange", b_arange, "start, stop=nil, step=nil, dtype=nil", "arange(stop) or arange(start, stop, step=1): evenly spaced values in [start, stop)" },
  { "linspace", b_linspace, "start, stop, num, dtype=nil", "linspace(start, stop, num): num values from start to stop inclusive" },
  { "eye", b_eye, "n, m=nil, dtype=nil", "eye(n, m=n): identity matrix" },
  { "zeros_like", b_zeros_like, "x, dtype=nil", "zeros_like(x): zeros of x's shape, dtype and device" },
  { "ones_like", b_ones_like, "x, dtype=nil", "ones_like(x): ones of x's shape, dtype and device" },
  { "rand_like", b_rand_like, "x, dtype=nil", "rand_like(x): uniform samples of x's shape" },
  { "randn_like", b_randn_like, "x, dtype=nil", "randn_like(x): normal samples of x's shape" },
  { "full_like", b_full_like, "x, value, dtype=nil", "full_like(x, value): x's shape filled with value" },
  { "gelu", b_gelu, "x, approximate=nil", "gelu(x, approximate=\"none\"|\"tanh\"): Gaussian error linear unit" },
  { "clamp", b_clamp, "x, min=nil, max=nil", "clamp(x, min=nil, max=nil): limits values to [min, max]" },
  { "maximum", b_maximum, "a, b", "maximum(a, b): elementwise maximum (broadcasting)" },
  { "minimum", b_minimum, "a, b", "minimum(a, b): elementwise minimum (broadcasting)" },
  { "pow", b_pow, "a, b", "pow(a, b): a ** b elementwise" },
  { "where", b_where, "cond, a, b", "where(cond, a, b): a where cond is true, else b (broadcasting)" },
  { "var", b_var, "x, axis=nil, keepdims=false, correction=1", "var(x, axis=nil, keepdims=false, correction=1): variance (unbiased by default)" },
  { "std", b_std, "x, axis=nil, keepdims=false, correction=1", "std(x, axis=nil, keepdims=false, correction=1): standard deviation" },
  { "argmax", b_argmax, "x, axis=nil, keepdims=false", "argmax(x, axis=nil): index of the maximum (flattened when axis is nil)" },
  { "argmin", b_argmin, "x, axis=nil, keepdims=false", "argmin(x, axis=nil): index of the minimum" },
  { "matmul", b_matmul, "a, b", "matmul(a, b) or a @ b: matrix product with batch broadcasting (BLAS)" },
  { "dot", b_dot, "a, b", "dot(a, b): inner product of two vectors" },
  { "outer", b_outer, "a, b", "outer(a, b): outer product of two vectors" },
  { "reshape", b_reshape, "*args", "reshape(x, shape): same data, new shape (one -1 is inferred); a view when possible" },
  { "permute", b_permute, "*args", "permute(x, dims): reorders axes, e.g. permute(x, [2, 0, 1])" },
  { "transpose", b_transpose, "x, axis0=nil, axis1=nil", "transpose(x, a=-2, b=-1): swaps two axes (a view)" },
  { "squeeze", b_squeeze, "x, axis=nil", "squeeze(x, axis=nil): removes size-1 axes" },
  { "unsqueeze", b_unsqueeze, "x, axis", "unsqueeze(x, axis): inserts a size-1 axis" },
  { "flatten", b_flatten, "x, start=nil, end=nil", "flatten(x, start=0, end=-1): merges axes start..end" },
  { "expand", b_expand, "x, shape", "expand(x, shape): broadcasts size-1 axes (a view; -1 keeps a size)" },
  { "broadcast_to", b_broadcast_to, "x, shape", "broadcast_to(x, shape): NumPy broadcast (a view)" },
  { "contiguous", b_contiguous, "x", "contiguous(x): x, copied to row-major layout if needed" },
  { "clone", b_clone, "x", "clone(x): a copy (differentiable)" },
  { "detach", b_detach, "x", "detach(x): the same data, cut from the autograd graph" },
  { "concat", b_concat, "tensors, axis=0", "concat(ts, axis=0): joins tensors along an existing axis" },
  { "stack", b_stack, "tensors, axis=0", "stack(ts, axis=0): joins tensors along a new axis" },
  { "split", b_split_t, "x, size=nil, axis=nil", "split(x, size_or_sizes, axis=0): pieces along an axis; split(s, sep) splits a string" },
  { "chunk", b_chunk, "x, chunks, axis=nil", "chunk(x, n, axis=0): n nearly equal pieces" },
  { "flip", b_flip, "x, axis=nil", "flip(x, axis=nil): reverses the order along axes (all when nil)" },
  { "repeat", b_repeat, "x, reps", "repeat(x, reps): tiles x (NumPy tile / torch repeat)" },
  { "tril", b_tril, "x, k=0", "tril(x, k=0): lower triangle of the last two axes" },
  { "triu", b_triu, "x, k=0", "triu(x, k=0): upper triangle of the last two axes" },
  { "to", b_to, "x, target", "to(x, \"f64\" | \"cuda\" | ...): converts dtype or moves to a device" },
  { .name = "cuda", .doc = "cuda(x) moves x to the GPU; cuda.available(), cuda.device_count(), cuda.synchronize(), cuda.memory(), cuda.empty_cache()", .value = cuda_value },
  { "set_matmul_precision", b_set_matmul_precision, "precision", "set_matmul_precision(\"highest\" | \"high\" | \"tf32\"): f32 matmuls on TF32 tensor cores when \"high\"/\"tf32\" (GPU)" },
  { "cpu", b_cpu, "x", "cpu(x): x on the CPU" },
  { "float", b_float, "x", "float(x): x as f32" },
  { "item", b_item, "x", "item(x): the number in a one-element tensor" },
  { "tolist", b_tolist, "x", "tolist(x): nested lists of numbers" },
  { "numel", b_numel, "x", "numel(x): number of elements" },
  { "is_tensor", b_is_tensor, "x", "is_tensor(x): whether x is a tensor" },
  { "set_default_device", b_set_default_device, "device", "set_default_device(\"cuda\"): where creation functions put tensors by default" },
  { "softmax", b_softmax, "x, axis=-1", "softmax(x, axis=-1): exp(x) / sum(exp(x)), numerically stable" },
  { "log_softmax", b_log_softmax, "x, axis=-1", "log_softmax(x, axis=-1): x - logsumexp(x), numerically stable" },
  { "cross_entropy", b_cross_entropy, "logits, targets, ignore_index=-100, label_smoothing=0", "cross_entropy(logits [N, C], targets [N] ints): mean negative log-likelihood (fused, stable)" },
  { "mse_loss", b_mse_loss, "input, target", "mse_loss(a, b): mean squared error" },
  { "layer_norm", b_layer_norm, "x, weight=nil, bias=nil, eps=1e-5", "layer_norm(x, weight=nil, bias=nil, eps=1e-5): normalizes the last axis" },
  { "dropout", b_dropout, "x, p=0.5, training=true", "dropout(x, p=0.5, training=true): zeroes elements with probability p, scales by 1/(1-p)" },
  { "embedding", b_embedding, "weight, idx", "embedding(weight [V, D], idx): rows of weight for integer idx" },
  { "one_hot", b_one_hot, "idx, num_classes=-1", "one_hot(idx, num_classes): i64 one-hot encoding" },
  { "take", b_take, "x, idx, axis=0", "take(x, idx, axis=0): elements/rows at integer idx" },
  { "index_select", b_index_select, "x, axis, idx", "index_select(x, axis, idx): slices along axis at 1-D idx" },
  { "gather", b_gather, "x, axis, idx", "gather(x, axis, idx): out[i][j] = x[i][idx[i][j]] (axis=1)" },
  { "scatter_add", b_scatter_add, "x, axis, idx, src", "scatter_add(x, axis, idx, src): x with src added at idx (a copy)" },
  { "masked_select", b_masked_select, "x, mask", "masked_select(x, mask): 1-D tensor of x where mask" },
  { "conv2d", b_conv2d, "x, weight, bias=nil, stride=1, padding=0", "conv2d(x [N,C,H,W], w [O,C,kh,kw], bias=nil, stride=1, padding=0)" },
  { "max_pool2d", b_max_pool2d, "x, kernel=2, stride=nil, padding=0", "max_pool2d(x, kernel=2, stride=kernel, padding=0)" },
  { "avg_pool2d", b_avg_pool2d, "x, kernel=2, stride=nil, padding=0", "avg_pool2d(x, kernel=2, stride=kernel, padding=0)" },
  { "sort", b_sort, "x, axis=-1, descending=false", "sort(x, axis=-1, descending=false): [values, indices]" },
  { "argsort", b_argsort, "x, axis=-1, descending=false", "argsort(x, axis=-1, descending=false): indices that sort x" },
  { "topk", b_topk, "x, k, axis=-1, largest=true", "topk(x, k, axis=-1, largest=true): [values, indices] of the k largest" },
  { "cumsum", b_cumsum, "x, axis=0", "cumsum(x, axis=0): running sum" },
  { "backward", b_backward, "loss, grad=nil, retain_graph=false", "backward(loss): accumulates d loss / d leaf into each leaf's .grad" },
  { "zero_grad", b_zero_grad, "params", "zero_grad(params): clears .grad of every tensor in a tree" },
  { "requires_grad", b_requires_grad, "params, on=true", "requires_grad(tree, on=true): marks every float tensor of a tree as a leaf to differentiate" },
  { "grad_enabled", b_no_grad_enabled, "", "grad_enabled(): false inside no_grad { }" },
  { "grad", b_grad, "f, argnums=0", "grad(f, argnums=0): a function returning d f / d args[argnums], shaped like that argument (a tree)" },
  { "value_and_grad", b_value_and_grad, "f, argnums=0", "value_and_grad(f, argnums=0): like grad, returning [value, grads]" },
  { "gradcheck", b_gradcheck, "f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3", "gradcheck(f, inputs): autograd vs central finite differences in f64; true or an error naming the element" },
  { "adamw_update", b_adamw_update, "params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step", "adamw_update(...): one AdamW step over every tensor of the trees, in place (used by optim)" },
  { "sgd_update", b_sgd_update, "params, grads, bufs, lr, momentum=0, nesterov=false, weight_decay=0", "sgd_update(...): one SGD step over every tensor of the trees, in place (used by optim)" },
  { "clip_grad_norm", b_clip_grad_norm, "tree, max_norm", "clip_grad_norm(tree, max_norm): scales gradients to a global L2 norm <= max_norm; returns the norm" },
  { "save", b_save, "path, tree", "save(path, tree): writes a record of tensors as safetensors (atomic)" },
  { "load", b_load, "path", "load(path): reads a safetensors file into a nested record" },
  { "load_npz", b_load_npz, "path", "load_npz(path): a record of the arrays in a NumPy .npz" },
  { "load_npy", b_load_npy, "path", "load_npy(path): the array in a NumPy .npy" },
  { "save_npy", b_save_npy, "path, x", "save_npy(path, x): writes a NumPy .npy (atomic)" },
  { "load_csv", b_load_csv, "path, delim=nil", "load_csv(path, delim=\",\"): {columns, data} with data an f64 tensor" },
  { NULL, NULL, NULL, NULL }
};

static nb_Builtin unary_builtins[NUNARY + 1];
static nb_Builtin red_builtins[sizeof red_defs / sizeof red_defs[0] + 1];
static char unary_docs[NUNARY][96], red_docs[sizeof red_defs / sizeof red_defs[0]][128];

void nbT_init(void) {
  static int done;
  if (done) return;
  done = 1;
  nt_init();
  for (int i = 0; i < NUNARY; i++) {
    snprintf(unary_docs[i], sizeof unary_docs[i], "%s(x): elementwise %s of a tensor or number", unary_defs[i].name, unary_defs[i].name);
    unary_builtins[i] = (nb_Builtin){ unary_defs[i].name, unary_fns[i], "x", unary_docs[i] };
  }
  int nr = (int)(sizeof red_defs / sizeof red_defs[0]);
  for (int i = 0; i < nr; i++) {
    snprintf(red_docs[i], sizeof red_docs[i], "%s(x, axis=nil, keepdims=false): %s over axes (all when nil); also works on a list", red_defs[i].name, red_defs[i].name);
    red_builtins[i] = (nb_Builtin){ red_defs[i].name, red_fns[i], "x, axis=nil, keepdims=false", red_docs[i] };
  }
  nbB_register(unary_builtins);
  nbB_register(red_builtins);
  nbB_register(tensor_builtins);
  nbB_prepare(grad_call_builtin);
  nbB_prepare(cuda_members);
}
