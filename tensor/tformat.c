/*
** tformat.c — PyTorch-style printing.
**   tensor([[1.0000, 2.5000],
**           [3.0000, 4.0000]], dtype=f64)
** Pass 1 walks the printed elements (after summarization) to pick one float
** format and a common width; pass 2 emits.  Summarization (numel > 1000):
** axes longer than 6 show their first and last 3 entries around "...".
*/
#include "tinternal.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>

#define SUMMARIZE_OVER 1000
#define EDGE 3

typedef struct { char *s; size_t n, cap; bool oom; } Buf;
static void bput(Buf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  char tmp[256];
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  if (b->n + (size_t)k + 1 > b->cap) {
    size_t cap = (b->cap ? b->cap * 2 : 256) + (size_t)k;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = true; return; }
    b->s = s; b->cap = cap;
  }
  memcpy(b->s + b->n, tmp, (size_t)k + 1);
  b->n += (size_t)k;
}

typedef struct {
  nt_Tensor *t;
  bool summarize, isf, isbool, iscplx;   /* complex: both parts share the float format */
  int mode;            /* floats: 0 integral "1.", 1 fixed "%.4f", 2 sci "%.4e" */
  int width;
  double maxa, mina;   /* over finite nonzero |x| */
  bool all_int, any_finite;
} Fmt;

static double elem(const Fmt *f, const int64_t *idx) {
  nt_Tensor *t = f->t;
  int64_t off = t->offset;
  for (int i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
  return nt_load_as_double(nt_base(t) + (off - t->offset) * (int64_t)nt_dtype_size(t->dtype), t->dtype);
}

/* a complex element's parts (re, im) */
static void elem_c(const Fmt *f, const int64_t *idx, double *re, double *im) {
  nt_Tensor *t = f->t;
  int64_t off = t->offset;
  for (int i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
  const char *p = nt_base(t) + (off - t->offset) * (int64_t)nt_dtype_size(t->dtype);
  if (t->dtype == NT_C64) { *re = ((const float *)p)[0]; *im = ((const float *)p)[1]; }
  else { *re = ((const double *)p)[0]; *im = ((const double *)p)[1]; }
}

static int fmt_value(const Fmt *f, double v, char *out, size_t n) {
  if (f->isbool) return snprintf(out, n, "%s", v != 0 ? "true" : "false");
  if (!f->isf) return snprintf(out, n, "%lld", (long long)nt_sat_i64(v));   /* v came from an integer tensor */
  if (isnan(v)) return snprintf(out, n, "nan");
  if (isinf(v)) return snprintf(out, n, v > 0 ? "inf" : "-inf");
  if (f->mode == 0) return snprintf(out, n, "%.0f.", v);
  if (f->mode == 1) return snprintf(out, n, "%.4f", v);
  return snprintf(out, n, "%.4e", v);
}

static void width_cb(Fmt *f, double v, void *ud);
/* visits printed elements in order; cb gets each value (a complex one's
** parts; the width, which pads the real parts, from those alone) */
static void walk(Fmt *f, int64_t *idx, int d, void (*cb)(Fmt *, double, void *), void *ud) {
  nt_Tensor *t = f->t;
  if (d == t->ndim) {
    if (f->iscplx) { double re, im; elem_c(f, idx, &re, &im); cb(f, re, ud); if (cb != width_cb) cb(f, im, ud); }
    else cb(f, elem(f, idx), ud);
    return;
  }
  int64_t n = t->shape[d];
  for (int64_t i = 0; i < n; i++) {
    if (f->summarize && n > 2 * EDGE && i == EDGE) i = n - EDGE;
    idx[d] = i;
    walk(f, idx, d + 1, cb, ud);
  }
}

static void stat_cb(Fmt *f, double v, void *ud) {
  (void)ud;
  if (!isfinite(v)) return;
  double a = fabs(v);
  f->any_finite = true;
  if (v != floor(v)) f->all_int = false;
  if (a > f->maxa) f->maxa = a;
  if (a != 0 && a < f->mina) f->mina = a;
}
static void width_cb(Fmt *f, double v, void *ud) {
  (void)ud;
  char s[64];
  int w = fmt_value(f, v, s, sizeof s);
  if (w > f->width) f->width = w;
}

static void emit(Fmt *f, Buf *b, int64_t *idx, int d, int indent) {
  nt_Tensor *t = f->t;
  if (d == t->ndim) {
    char s[64];
    if (f->iscplx) {   /* torch's 1.+2.j, 0.5000-1.2500j */
      double re, im; char si[64];
      elem_c(f, idx, &re, &im);
      fmt_value(f, re, s, sizeof s);
      fmt_value(f, isnan(im) ? im : fabs(im), si, sizeof si);
      bput(b, "%*s%c%sj", f->width, s, signbit(im) && !isnan(im) ? '-' : '+', si);
      return;
    }
    fmt_value(f, elem(f, idx), s, sizeof s);
    bput(b, "%*s", f->width, s);
    return;
  }
  bput(b, "[");
  int64_t n = t->shape[d];
  for (int64_t i = 0; i < n; i++) {
    if (i > 0) {
      if (d == t->ndim - 1) bput(b, ", ");
      else {
        bput(b, ",");
        for (int k = 0; k < t->ndim - 1 - d; k++) bput(b, "\n");
        bput(b, "%*s", indent + d + 1, "");
      }
    }
    if (f->summarize && n > 2 * EDGE && i == EDGE) {
      bput(b, "...");
      if (d == t->ndim - 1) bput(b, ", ");
      else {
        bput(b, ",");
        for (int k = 0; k < t->ndim - 1 - d; k++) bput(b, "\n");
        bput(b, "%*s", indent + d + 1, "");
      }
      i = n - EDGE;
    }
    idx[d] = i;
    emit(f, b, idx, d + 1, indent);
  }
  bput(b, "]");
}

char *nt_format(nt_Tensor *t0) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *t = t0->device == NT_CPU ? nt_retain(t0) : nt_to_device(t0, NT_CPU);
  nt_set_grad_enabled(prev);
  if (!t) return NULL;
  Fmt f = { .t = t, .summarize = t->numel > SUMMARIZE_OVER, .isf = nt_dtype_is_float(t->dtype) || nt_dtype_is_complex(t->dtype),
            .iscplx = nt_dtype_is_complex(t->dtype),
            .isbool = t->dtype == NT_BOOL, .mina = INFINITY, .all_int = true };
  int64_t idx[NT_MAXDIM] = {0};
  Buf b = {0};
  bput(&b, "tensor(");
  if (t->numel == 0) bput(&b, "[]");
  else {
    if (f.isf) {
      walk(&f, idx, 0, stat_cb, NULL);
      if (!f.any_finite || f.all_int) f.mode = f.maxa >= 1e8 ? 2 : 0;
      else f.mode = (f.maxa >= 1e8 || f.mina < 1e-4 || f.maxa / f.mina > 1000) ? 2 : 1;
    }
    walk(&f, idx, 0, width_cb, NULL);
    emit(&f, &b, idx, 0, 7);
  }
  bool fdef = f.iscplx ? t->dtype == NT_C64 : f.isf ? t->dtype == NT_DEFAULT_FLOAT : f.isbool || t->dtype == NT_DEFAULT_INT;
  if (t->numel == 0 && t->ndim != 1) {
    char s[128];
    bput(&b, ", size=%s", nt_shape_str(t->shape, t->ndim, s, sizeof s));
  }
  if (!fdef) bput(&b, ", dtype=%s", nt_dtype_name(t->dtype));
  if (t0->device != NT_CPU) bput(&b, ", device=%s", nt_device_name(t0->device));
  if (t0->grad_fn) bput(&b, ", grad_fn=<%s>", t0->grad_fn->name);
  else if (t0->requires_grad) bput(&b, ", requires_grad=true");
  bput(&b, ")");
  nt_release(t);
  if (b.oom) { free(b.s); nt_error_oom(b.cap * 2); return NULL; }
  return b.s;
}
