/*
** lplot.c — plotting builtins: plot, scatter, hist, imshow.
**
** Each builtin converts its arguments into a Fig (series of finite-checked
** doubles, histogram bins or an image), then renders it as a mime bundle:
**   text/plain     a Unicode rendering for terminals (braille dots for lines
**                  and points, eighth blocks for histograms, shades for images)
**   image/svg+xml  a self-contained SVG with nice 1-2-5 ticks, grid, labels,
**                  title and legend (plot, scatter, hist, imshow)
**   image/png      base64 PNG (imshow only), encoded with libpng in memory
** and hands it to the sink's display() (display_id/update let a training loop
** redraw one plot in place).  file="x.svg"/"x.png"/"x.txt" also writes the
** rendering atomically (a temporary file in the same directory, then rename).
*/
#include "tensor/io/atomicfile.h"
#include "tensor/io/iotypes.h"
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "lang/nbapi.h"
#include "lang/lib/nblib.h"
#include "tensor/tensor.h"

#define T(v) ((nt_Tensor *)(v).u.p)

/* ------------------------------------------------------------ limits */
#define SVG_MAX_POINTS 5000       /* per series; above this the SVG is decimated */
#define SVG_DEF_W 640
#define SVG_DEF_H 400
#define SVG_MIN_SIDE 100
#define SVG_MAX_SIDE 4000
#define IMG_MAX_SIDE 8192          /* PNG output */
#define TEXT_COLS 80               /* the terminal rendering fits this width */
#define TEXT_ROWS 15               /* character rows of the plot area */
#define MAX_BINS 100000

static const char *PALETTE[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf" };
#define NPALETTE 10
/* markers of multi-series scatter plots in the terminal */
static const char *GLYPHS[] = { "\xe2\x80\xa2", "x", "+", "o", "*", "#", "@", "%" };   /* • x + o * # @ % */
#define NGLYPHS 8

/* ------------------------------------------------------------ the figure */
enum { K_LINE, K_SCATTER, K_HIST, K_IMAGE };
enum { CM_VIRIDIS, CM_GRAY };

typedef struct Series { double *x, *y; int64_t n; char *label; } Series;

typedef struct Fig {
  int kind; const char *fname;
  Series *s; int ns;
  char *title, *xlabel, *ylabel;
  bool legend;                 /* labels were given */
  int width, height;           /* SVG/PNG pixels; 0 = default */
  double x0, x1, y0, y1;       /* extents of the finite data */
  /* hist */
  double *edges, *counts; int nbins; int64_t hist_n;
  /* image: ic == 1 raw values (colormapped with vmin/vmax); 3 or 4 channels in [0,1] */
  int ih, iw, ic; double *pix; double vmin, vmax; int cmap;
} Fig;

static void fig_free(Fig *f) {
  for (int i = 0; i < f->ns; i++) { free(f->s[i].x); free(f->s[i].y); free(f->s[i].label); }
  free(f->s); free(f->title); free(f->xlabel); free(f->ylabel);
  free(f->edges); free(f->counts); free(f->pix);
}

static void *xmalloc(size_t n) { void *p = malloc(n ? n : 1); if (!p) abort(); return p; }
static void *xcalloc(size_t n, size_t sz) { void *p = calloc(n ? n : 1, sz ? sz : 1); if (!p) abort(); return p; }
static char *xstrdup(const char *s) { size_t n = strlen(s); char *p = xmalloc(n + 1); memcpy(p, s, n + 1); return p; }

/* ------------------------------------------------------------ number formatting */
/* short label for a data value: 4 significant digits, no "-0" */
static void fmt_short(char *buf, size_t n, double v) {
  if (v == 0) v = 0;   /* -0 */
  if (fabs(v) >= 1e-4 && fabs(v) < 1e6) {
    snprintf(buf, n, "%.4g", v);
  } else snprintf(buf, n, "%.3g", v);
}

/* 1-2-5 tick step for about `target` intervals over [lo, hi] */
static double nice_step(double lo, double hi, int target) {
  double span = hi * 0.5 - lo * 0.5;   /* halved: hi - lo may overflow */
  if (!(span > 0) || !isfinite(span)) return 0;
  double raw = span * 2 / target;
  if (!isfinite(raw)) raw = span / target * 2;
  double mag = pow(10, floor(log10(raw)));
  if (!(mag > 0) || !isfinite(mag)) return 0;
  double r = raw / mag, m = r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10;
  return m * mag;
}
/* tick values k*step inside [lo, hi]; returns the count (at most cap) */
static int nice_ticks(double lo, double hi, int target, double *out, int cap, double *stepp) {
  double step = nice_step(lo, hi, target);
  *stepp = step;
  if (!(step > 0)) return 0;
  double k0 = ceil(lo / step - 1e-9), k1 = floor(hi / step + 1e-9);
  if (!isfinite(k0) || !isfinite(k1) || k1 - k0 > cap - 1) return 0;
  int n = 0;
  for (double k = k0; k <= k1 && n < cap; k++) { double v = k * step; out[n++] = fabs(v) < step * 1e-9 ? 0 : v; }
  return n;
}
/* a tick label with as many decimals as the step needs */
static void fmt_tick(char *buf, size_t n, double v, double step) {
  if (v == 0) { snprintf(buf, n, "0"); return; }
  double a = fabs(v);
  if (step < 1e-4 || a >= 1e7 || (a < 1e-4)) { snprintf(buf, n, "%.3g", v); return; }
  int dec = (int)-floor(log10(step) + 1e-9);
  if (dec < 0) dec = 0;
  if (dec > 10) dec = 10;
  snprintf(buf, n, "%.*f", dec, v);
}

/* a constant range becomes a small interval around the value */
static void widen(double *lo, double *hi) {
  if (*hi > *lo) return;
  double d = *lo == 0 ? 1 : fabs(*lo) * 0.1;
  *lo -= d; *hi += d;
}
/* position of v in [lo, hi] as 0..1 (overflow-safe) */
static double frac(double v, double lo, double hi) {
  double s = hi * 0.5 - lo * 0.5;
  return s > 0 ? (v * 0.5 - lo * 0.5) / s : 0.5;
}

/* ------------------------------------------------------------ argument conversion */
static int err_tensor(nb_VM *vm, const char *fname) {
  const char *m = nt_error_msg();
  return nb_error_kind(vm, "TensorError", "%s: %s", fname, m && *m ? m : "cannot read the tensor");
}

/* a whole tensor as doubles in row-major order */
static int tensor_host(nb_VM *vm, const char *fname, nt_Tensor *t, double **out) {
  double *buf = xmalloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  if (t->numel && nt_to_host(t, buf, NT_F64)) { free(buf); return err_tensor(vm, fname); }
  *out = buf;
  return NB_OK;
}

/* A 1-D sequence of numbers: a 1-D tensor (or 0-d/[n,1]), a list of numbers, a range. */
static int to_vec(nb_VM *vm, const char *fname, const char *what, nb_Value v, double **out, int64_t *n) {
  *out = NULL; *n = 0;
  switch (v.t) {
  case NB_TTENSOR: {
    nt_Tensor *t = T(v);
    bool ok = t->ndim == 1 || (t->ndim == 2 && (t->shape[1] == 1 || t->shape[0] == 1));
    if (!ok) {
      char shp[128]; nt_shape_str(t->shape, t->ndim, shp, sizeof shp);
      return nb_error_kind(vm, "ValueError", "%s: %s must be 1-D, got a tensor of shape %s", fname, what, shp);
    }
    if (tensor_host(vm, fname, t, out)) return NB_ERR;
    *n = t->numel;
    return NB_OK;
  }
  case NB_TLIST: {
    nb_List *l = nb_list(v);
    double *buf = xmalloc(sizeof(double) * (size_t)(l->n ? l->n : 1));
    for (int i = 0; i < l->n; i++) {
      nb_Value it = l->items[i];
      if (it.t == NB_TNUM) buf[i] = it.u.n;
      else if (it.t == NB_TBOOL) buf[i] = it.u.b;
      else if (it.t == NB_TTENSOR && T(it)->numel == 1) {
        if (nt_item(T(it), &buf[i])) { free(buf); return err_tensor(vm, fname); }
      } else {
        free(buf);
        return nb_error_kind(vm, "TypeError", "%s: %s[%d] is a %s, not a number", fname, what, i, nb_typename(it));
      }
    }
    *out = buf; *n = l->n;
    return NB_OK;
  }
  case NB_TRANGE: {
    const nb_Range *r = v.u.p;
    double len = nbG_range_len(r);
    if (len > 1e9) return nb_error_kind(vm, "ValueError", "%s: %s is a range of %.0f values (too many to plot)", fname, what, len);
    int64_t m = (int64_t)len;
    double *buf = xmalloc(sizeof(double) * (size_t)(m ? m : 1));
    for (int64_t i = 0; i < m; i++) buf[i] = r->start + (double)i * r->step;
    *out = buf; *n = m;
    return NB_OK;
  }
  default:
    return nb_error_kind(vm, "TypeError", "%s: %s must be a tensor, a list of numbers or a range, got %s", fname, what, nb_typename(v));
  }
}

/* an optional text option (any value but nil is shown as text) */
static char *opt_text(nb_Value v) {
  if (v.t == NB_TNIL) return NULL;
  nb_Str *s = nbS_tostr(v);
  char *r = xstrdup(s->data);
  nb_decref(nb_strv(s));
  return r;
}

static void add_series(Fig *f, double *x, double *y, int64_t n) {
  f->s = realloc(f->s, sizeof(Series) * (size_t)(f->ns + 1));
  if (!f->s) abort();
  Series *s = &f->s[f->ns++];
  s->x = x; s->y = y; s->n = n; s->label = NULL;
}

static double *iota(int64_t n) {
  double *x = xmalloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) x[i] = (double)i;
  return x;
}

/* ys: a 1-D sequence, a 2-D tensor (one series per column) or a list of sequences.
** xs (may be NULL): shared x values. */
static int build_series(nb_VM *vm, Fig *f, nb_Value xsv, nb_Value ysv) {
  const char *fname = f->fname;
  double *xs = NULL; int64_t nx = -1;
  if (xsv.t != NB_TNIL) {
    if (to_vec(vm, fname, "xs", xsv, &xs, &nx)) return NB_ERR;
    if (nx == 0) { free(xs); return nb_error_kind(vm, "ValueError", "%s: xs is empty (nothing to plot)", fname); }
  }
#define CHECKLEN(n, what) do { \
    if (xs && (n) != nx) { free(xs); return nb_error_kind(vm, "ValueError", "%s: xs has %lld values but %s has %lld", fname, (long long)nx, what, (long long)(n)); } \
  } while (0)
  if (ysv.t == NB_TTENSOR && T(ysv)->ndim == 2 && T(ysv)->shape[1] != 1 && !(xs == NULL && T(ysv)->shape[0] == 1) && !(xs && T(ysv)->shape[0] == 1 && T(ysv)->shape[1] == nx)) {
    nt_Tensor *t = T(ysv);
    int64_t rows = t->shape[0], cols = t->shape[1];
    if (rows == 0 || cols == 0) { free(xs); return nb_error_kind(vm, "ValueError", "%s: ys is empty (nothing to plot)", fname); }
    if (cols > 64) { free(xs); return nb_error_kind(vm, "ValueError", "%s: ys has %lld columns (one line per column; at most 64) — transpose it?", fname, (long long)cols); }
    CHECKLEN(rows, "each column of ys");
    double *all;
    if (tensor_host(vm, fname, t, &all)) { free(xs); return NB_ERR; }
    for (int64_t c = 0; c < cols; c++) {
      double *y = xmalloc(sizeof(double) * (size_t)rows);
      for (int64_t r = 0; r < rows; r++) y[r] = all[r * cols + c];
      double *x;
      if (xs) { x = xmalloc(sizeof(double) * (size_t)rows); memcpy(x, xs, sizeof(double) * (size_t)rows); }
      else x = iota(rows);
      add_series(f, x, y, rows);
    }
    free(all); free(xs);
    return NB_OK;
  }
  if (ysv.t == NB_TLIST && nb_list(ysv)->n > 0) {
    nb_List *l = nb_list(ysv);
    bool nested = false;
    for (int i = 0; i < l->n; i++) {
      nb_Value it = l->items[i];
      if (it.t == NB_TLIST || it.t == NB_TRANGE || (it.t == NB_TTENSOR && T(it)->ndim > 0 && T(it)->numel != 1)) { nested = true; break; }
    }
    if (nested) {
      if (l->n > 64) { free(xs); return nb_error_kind(vm, "ValueError", "%s: ys is a list of %d series (at most 64)", fname, l->n); }
      for (int i = 0; i < l->n; i++) {
        char what[32]; snprintf(what, sizeof what, "ys[%d]", i);
        double *y; int64_t n;
        if (to_vec(vm, fname, what, l->items[i], &y, &n)) { free(xs); return NB_ERR; }
        if (n == 0) { free(y); free(xs); return nb_error_kind(vm, "ValueError", "%s: %s is empty (nothing to plot)", fname, what); }
        if (xs && n != nx) { free(y); CHECKLEN(n, what); }
        double *x;
        if (xs) { x = xmalloc(sizeof(double) * (size_t)n); memcpy(x, xs, sizeof(double) * (size_t)n); }
        else x = iota(n);
        add_series(f, x, y, n);
      }
      free(xs);
      return NB_OK;
    }
  }
  double *y; int64_t n;
  if (to_vec(vm, fname, "ys", ysv, &y, &n)) { free(xs); return NB_ERR; }
  if (n == 0) { free(y); free(xs); return nb_error_kind(vm, "ValueError", "%s: ys is empty (nothing to plot)", fname); }
  if (xs && n != nx) { free(y); CHECKLEN(n, "ys"); }
#undef CHECKLEN
  add_series(f, xs ? xs : iota(n), y, n);
  return NB_OK;
}

/* extents of the finite points of all series */
static int series_bounds(nb_VM *vm, Fig *f) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (int i = 0; i < f->ns; i++) {
    const Series *s = &f->s[i];
    for (int64_t j = 0; j < s->n; j++) {
      double x = s->x[j], y = s->y[j];
      if (!isfinite(x) || !isfinite(y)) continue;
      if (x < x0) x0 = x;
      if (x > x1) x1 = x;
      if (y < y0) y0 = y;
      if (y > y1) y1 = y;
    }
  }
  if (!(x0 <= x1)) return nb_error_kind(vm, "ValueError", "%s: no finite values to plot (every point has a NaN or infinite coordinate)", f->fname);
  widen(&x0, &x1); widen(&y0, &y1);
  f->x0 = x0; f->x1 = x1; f->y0 = y0; f->y1 = y1;
  return NB_OK;
}

static int set_legend(nb_VM *vm, Fig *f, nb_Value lv) {
  if (lv.t == NB_TNIL) return NB_OK;
  if (lv.t == NB_TSTR && f->ns == 1) { f->s[0].label = opt_text(lv); f->legend = true; return NB_OK; }
  if (lv.t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: legend must be a list of labels (one per series), got %s", f->fname, nb_typename(lv));
  nb_List *l = nb_list(lv);
  if (l->n != f->ns) return nb_error_kind(vm, "ValueError", "%s: legend has %d label%s for %d series", f->fname, l->n, l->n == 1 ? "" : "s", f->ns);
  for (int i = 0; i < l->n; i++) f->s[i].label = opt_text(l->items[i]);
  f->legend = true;
  return NB_OK;
}

static int opt_side(nb_VM *vm, const char *fname, const char *what, nb_Value v, int lo, int hi, int *out) {
  *out = 0;
  if (v.t == NB_TNIL) return NB_OK;
  if (v.t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: %s must be a number of pixels, got %s", fname, what, nb_typename(v));
  if (!(v.u.n >= lo && v.u.n <= hi)) return nb_error_kind(vm, "ValueError", "%s: %s must be between %d and %d pixels, got %g", fname, what, lo, hi, v.u.n);
  *out = (int)v.u.n;
  return NB_OK;
}

/* ------------------------------------------------------------ UTF-8 text canvas */
/* display width of a UTF-8 string (every code point counts as one column) */
static int u8width(const char *s) {
  int w = 0;
  for (; *s; s++) if (((unsigned char)*s & 0xC0) != 0x80) w++;
  return w;
}
/* at most `cols` columns of s (whole code points), with "…" when cut */
static void u8clip(nb_Buf *b, const char *s, int cols) {
  if (u8width(s) <= cols) { nbB_puts(b, s); return; }
  int w = 0; const char *p = s;
  while (*p) {
    if (((unsigned char)*p & 0xC0) != 0x80) { if (w == cols - 1) break; w++; }
    p++;
  }
  nbB_add(b, s, (size_t)(p - s));
  nbB_puts(b, "\xe2\x80\xa6");
}
static void spaces(nb_Buf *b, int n) { for (int i = 0; i < n; i++) nbB_putc(b, ' '); }
/* labels and titles: control characters (newlines, tabs) become spaces */
static char *one_line(const char *s) {
  char *r = xstrdup(s);
  for (char *p = r; *p; p++) if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
  return r;
}
static void centered(nb_Buf *b, int indent, int width, const char *s) {
  char *t = one_line(s);
  int w = u8width(t);
  if (w > width) w = width;
  spaces(b, indent + (width - w) / 2);
  u8clip(b, t, width);
  nbB_putc(b, '\n');
  free(t);
}

/* a grid of cells, each a UTF-8 sequence of up to 4 bytes (NUL-terminated if shorter) */
typedef struct Canvas { int cols, rows; char (*cell)[5]; uint8_t *dots; } Canvas;
static void cv_init(Canvas *c, int cols, int rows) {
  c->cols = cols; c->rows = rows;
  c->cell = xcalloc((size_t)cols * (size_t)rows, 5);
  c->dots = xcalloc((size_t)cols * (size_t)rows, 1);
}
static void cv_free(Canvas *c) { free(c->cell); free(c->dots); }
/* braille: dot (px, py) with px in [0, 2*cols), py in [0, 4*rows) */
static void cv_dot(Canvas *c, int px, int py) {
  static const uint8_t bit[4][2] = { { 0x01, 0x08 }, { 0x02, 0x10 }, { 0x04, 0x20 }, { 0x40, 0x80 } };
  if (px < 0 || py < 0 || px >= 2 * c->cols || py >= 4 * c->rows) return;
  c->dots[(size_t)(py / 4) * (size_t)c->cols + (size_t)(px / 2)] |= bit[py % 4][px % 2];
}
static void cv_line(Canvas *c, int x0, int y0, int x1, int y1) {
  int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, e = dx + dy;
  for (;;) {
    cv_dot(c, x0, y0);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * e;
    if (e2 >= dy) { e += dy; x0 += sx; }
    if (e2 <= dx) { e += dx; y0 += sy; }
  }
}
static void cv_set(Canvas *c, int col, int row, const char *s) {
  if (col < 0 || row < 0 || col >= c->cols || row >= c->rows) return;
  snprintf(c->cell[(size_t)row * (size_t)c->cols + (size_t)col], 5, "%s", s);
}
static void cv_emit_cell(nb_Buf *b, const Canvas *c, int col, int row) {
  size_t i = (size_t)row * (size_t)c->cols + (size_t)col;
  if (c->cell[i][0]) { nbB_puts(b, c->cell[i]); return; }
  uint8_t d = c->dots[i];
  if (!d) { nbB_putc(b, ' '); return; }
  char u[3] = { (char)0xE2, (char)(0xA0 | (d >> 6)), (char)(0x80 | (d & 0x3F)) };
  nbB_add(b, u, 3);
}

/* The frame around a canvas: y labels at given rows, x labels under given columns.
** right[row] (may be NULL) is text after the plot area. */
typedef struct Axes {
  const char *ylab[3]; int yrow[3]; int ny;
  const char *xlab[3]; int xcol[3]; int nx;
} Axes;

static void text_frame(nb_Buf *b, const Fig *f, const Canvas *c, const Axes *ax, char **right) {
  int lm = 0;
  for (int i = 0; i < ax->ny; i++) { int w = u8width(ax->ylab[i]); if (w > lm) lm = w; }
  if (f->title) centered(b, lm + 2, c->cols, f->title);
  if (f->ylabel) {
    char *t = one_line(f->ylabel);
    spaces(b, lm > 1 ? lm - 1 : 0); u8clip(b, t, TEXT_COLS - lm); nbB_putc(b, '\n');
    free(t);
  }
  for (int r = 0; r < c->rows; r++) {
    const char *lab = NULL;
    for (int i = 0; i < ax->ny; i++) if (ax->yrow[i] == r) lab = ax->ylab[i];
    nbB_putc(b, ' ');
    if (lab) { spaces(b, lm - u8width(lab)); nbB_puts(b, lab); nbB_puts(b, "\xe2\x94\xa4"); }   /* ┤ */
    else { spaces(b, lm); nbB_puts(b, "\xe2\x94\x82"); }                                     /* │ */
    size_t mark = b->n;
    for (int col = 0; col < c->cols; col++) cv_emit_cell(b, c, col, r);
    if (right && right[r]) nbB_puts(b, right[r]);
    else { while (b->n > mark && b->p[b->n - 1] == ' ') b->n--; }   /* no trailing blanks */
    nbB_putc(b, '\n');
  }
  /* x axis */
  spaces(b, lm + 1); nbB_puts(b, "\xe2\x94\x94");   /* └ */
  for (int col = 0; col < c->cols; col++) {
    bool tick = false;
    for (int i = 0; i < ax->nx; i++) if (ax->xcol[i] == col) tick = true;
    nbB_puts(b, tick ? "\xe2\x94\xac" : "\xe2\x94\x80");   /* ┬ ─ */
  }
  nbB_putc(b, '\n');
  /* x labels: first left-aligned at its column, last right-aligned, middle centered */
  int width = lm + 2 + c->cols + 12;
  char *line = xmalloc((size_t)width + 1);
  memset(line, ' ', (size_t)width); line[width] = 0;
  int used_to = 0;
  nb_Buf lb = {0};
  /* build with byte positions: labels are ASCII (numbers) */
  for (int i = 0; i < ax->nx; i++) {
    int w = (int)strlen(ax->xlab[i]);
    int at = lm + 2 + ax->xcol[i];
    if (i == ax->nx - 1 && ax->nx > 1) at = at - w + 1;
    else if (i > 0) at -= w / 2;
    if (at < used_to + (i ? 2 : 0)) continue;
    if (at + w > width) continue;
    memcpy(line + at, ax->xlab[i], (size_t)w);
    used_to = at + w;
  }
  int end = width; while (end > 0 && line[end - 1] == ' ') end--;
  nbB_add(&lb, line, (size_t)end);
  nbB_add(b, lb.p ? lb.p : "", lb.n); nbB_putc(b, '\n');
  nbB_free(&lb); free(line);
  if (f->xlabel) centered(b, lm + 2, c->cols, f->xlabel);
}

/* the nice (1-2-5) tick value nearest the middle of [lo, hi], or NAN */
static double mid_tick(double lo, double hi, double *step) {
  double t[64]; int n = nice_ticks(lo, hi, 2, t, 64, step);
  double best = NAN, mid = lo * 0.5 + hi * 0.5;
  for (int i = 0; i < n; i++) if (isnan(best) || fabs(t[i] - mid) < fabs(best - mid)) best = t[i];
  return best;
}
/* y labels: the top and bottom rows show the range's ends, a middle row a nice value */
static void y_axis_labels(Axes *ax, char lab[3][32], double lo, double hi, int rows) {
  ax->ny = 0;
  fmt_short(lab[0], 32, hi); ax->ylab[ax->ny] = lab[0]; ax->yrow[ax->ny++] = 0;
  double step, v = mid_tick(lo, hi, &step);
  if (rows >= 7 && !isnan(v)) {
    int row = (int)lround((1 - frac(v, lo, hi)) * (4.0 * rows - 1)) / 4;
    if (row >= 2 && row <= rows - 3) {
      fmt_tick(lab[1], 32, v, step); ax->ylab[ax->ny] = lab[1]; ax->yrow[ax->ny++] = row;
    }
  }
  fmt_short(lab[2], 32, lo); ax->ylab[ax->ny] = lab[2]; ax->yrow[ax->ny++] = rows - 1;
}
static void x_axis_labels(Axes *ax, char lab[3][32], double lo, double hi, int cols) {
  ax->nx = 0;
  fmt_short(lab[0], 32, lo); ax->xlab[ax->nx] = lab[0]; ax->xcol[ax->nx++] = 0;
  double step, v = mid_tick(lo, hi, &step);
  if (cols >= 30 && !isnan(v)) {
    int col = (int)lround(frac(v, lo, hi) * (2.0 * cols - 1)) / 2;
    if (col >= 8 && col <= cols - 9) {
      fmt_tick(lab[1], 32, v, step); ax->xlab[ax->nx] = lab[1]; ax->xcol[ax->nx++] = col;
    }
  }
  fmt_short(lab[2], 32, hi); ax->xlab[ax->nx] = lab[2]; ax->xcol[ax->nx++] = cols - 1;
}
static int max_label_width(char lab[3][32], int n) {
  int m = 0;
  for (int i = 0; i < n; i++) { int w = (int)strlen(lab[i]); if (w > m) m = w; }
  return m;
}

/* plot and scatter: braille dots/lines; several scatter series use glyphs */
static void text_xy(nb_Buf *b, const Fig *f) {
  char ylab[3][32] = { "" }, xlab[3][32] = { "" };
  Axes ax;
  y_axis_labels(&ax, ylab, f->y0, f->y1, TEXT_ROWS);
  int lm = max_label_width(ylab, 3);
  bool multi = f->ns > 1;
  bool direct = f->kind == K_LINE && (multi || f->legend);   /* labels at the lines' right ends */
  int rm = 0;
  if (direct) {
    for (int i = 0; i < f->ns; i++) {
      char tmp[16]; const char *l = f->s[i].label; if (!l) { snprintf(tmp, sizeof tmp, "%d", i); l = tmp; }
      int w = u8width(l); if (w > 14) w = 14;
      if (w + 3 > rm) rm = w + 3;
    }
  }
  int cols = TEXT_COLS - 1 - lm - 1 - rm - 1;
  if (cols > 72) cols = 72;
  if (cols < 20) cols = 20;
  x_axis_labels(&ax, xlab, f->x0, f->x1, cols);
  Canvas c; cv_init(&c, cols, TEXT_ROWS);
  int W = 2 * cols - 1, H = 4 * TEXT_ROWS - 1;
  bool glyphs = f->kind == K_SCATTER && multi;
  int *endrow = xmalloc(sizeof(int) * (size_t)f->ns);
  for (int i = 0; i < f->ns; i++) {
    const Series *s = &f->s[i];
    bool have = false; int px0 = 0, py0 = 0;
    endrow[i] = -1;
    for (int64_t j = 0; j < s->n; j++) {
      double x = s->x[j], y = s->y[j];
      if (!isfinite(x) || !isfinite(y)) { have = false; continue; }
      int px = (int)lround(frac(x, f->x0, f->x1) * W), py = (int)lround((1 - frac(y, f->y0, f->y1)) * H);
      if (glyphs) cv_set(&c, px / 2, py / 4, GLYPHS[i % NGLYPHS]);
      else if (f->kind == K_LINE && have) cv_line(&c, px0, py0, px, py);
      else cv_dot(&c, px, py);
      px0 = px; py0 = py; have = true;
      endrow[i] = py / 4;
    }
  }
  char **right = NULL;
  if (direct) {
    right = xcalloc((size_t)TEXT_ROWS, sizeof(char *));
    for (int i = 0; i < f->ns; i++) {
      int r = endrow[i];
      if (r < 0) continue;
      for (int d = 0; d < TEXT_ROWS; d++) {   /* the nearest free row */
        if (r + d < TEXT_ROWS && !right[r + d]) { r += d; break; }
        if (r - d >= 0 && !right[r - d]) { r -= d; break; }
      }
      if (right[r]) continue;
      char tmp[16]; const char *l = f->s[i].label; if (!l) { snprintf(tmp, sizeof tmp, "%d", i); l = tmp; }
      char *t = one_line(l);
      nb_Buf lb = {0};
      nbB_puts(&lb, " \xe2\x97\x82 ");   /* ◂ */
      u8clip(&lb, t, 14);
      right[r] = xstrdup(nbB_cstr(&lb));
      nbB_free(&lb); free(t);
    }
  }
  text_frame(b, f, &c, &ax, right);
  if (glyphs) {   /* legend line */
    nbB_puts(b, " ");
    for (int i = 0; i < f->ns; i++) {
      char tmp[16]; const char *l = f->s[i].label; if (!l) { snprintf(tmp, sizeof tmp, "%d", i); l = tmp; }
      char *t = one_line(l);
      nbB_printf(b, " %s ", GLYPHS[i % NGLYPHS]); u8clip(b, t, 16); nbB_puts(b, " ");
      free(t);
    }
    while (b->n && b->p[b->n - 1] == ' ') b->n--;
    nbB_putc(b, '\n');
  } else if (f->kind == K_SCATTER && f->legend && f->s[0].label) {
    char *t = one_line(f->s[0].label);
    nbB_puts(b, "  \xe2\xa0\xb6 "); u8clip(b, t, 40); nbB_putc(b, '\n');   /* ⠶ */
    free(t);
  }
  if (right) { for (int r = 0; r < TEXT_ROWS; r++) free(right[r]); free(right); }
  free(endrow);
  cv_free(&c);
}

static void text_hist(nb_Buf *b, const Fig *f) {
  static const char *EIGHTHS[] = { " ", "\xe2\x96\x81", "\xe2\x96\x82", "\xe2\x96\x83", "\xe2\x96\x84",
                                   "\xe2\x96\x85", "\xe2\x96\x86", "\xe2\x96\x87", "\xe2\x96\x88" };
  /* the plot is at most 72 columns; more bins than that are summed into columns */
  int cols = 72;
  double *colcnt = NULL;
  if (f->nbins > cols) {
    colcnt = xcalloc((size_t)cols, sizeof(double));
    for (int i = 0; i < f->nbins; i++) colcnt[(int64_t)i * cols / f->nbins] += f->counts[i];
  }
  double maxc = 0;
  for (int i = 0; i < (colcnt ? cols : f->nbins); i++) { double v = colcnt ? colcnt[i] : f->counts[i]; if (v > maxc) maxc = v; }
  char ylab[3][32] = { "" }, xlab[3][32] = { "" };
  Axes ax;
  y_axis_labels(&ax, ylab, 0, maxc > 0 ? maxc : 1, TEXT_ROWS);
  int lm = max_label_width(ylab, 3);
  if (cols > TEXT_COLS - 1 - lm - 1 - 2) cols = TEXT_COLS - 1 - lm - 1 - 2;
  if (colcnt && cols < 72) {   /* narrower than assumed: sum again */
    memset(colcnt, 0, sizeof(double) * 72);
    for (int i = 0; i < f->nbins; i++) colcnt[(int64_t)i * cols / f->nbins] += f->counts[i];
  }
  /* whole characters per bin when the bins fit */
  if (f->nbins <= cols) cols = (cols / f->nbins) * f->nbins;
  x_axis_labels(&ax, xlab, f->edges[0], f->edges[f->nbins], cols);
  Canvas c; cv_init(&c, cols, TEXT_ROWS);
  int per = f->nbins <= cols ? cols / f->nbins : 0;
  for (int col = 0; col < cols; col++) {
    int bin = per ? col / per : col;
    if (per && bin >= f->nbins) bin = f->nbins - 1;
    if (per >= 3 && col % per == per - 1) continue;   /* a gap between bars */
    double cnt = colcnt ? colcnt[col] : f->counts[bin];
    if (cnt <= 0 || maxc <= 0) continue;
    int h = (int)lround(cnt / maxc * TEXT_ROWS * 8);
    if (h < 1) h = 1;
    for (int r = TEXT_ROWS - 1; r >= 0 && h > 0; r--) {
      int k = h >= 8 ? 8 : h;
      cv_set(&c, col, r, EIGHTHS[k]);
      h -= k;
    }
  }
  text_frame(b, f, &c, &ax, NULL);
  nbB_printf(b, "  %lld value%s in %d bin%s", (long long)f->hist_n, f->hist_n == 1 ? "" : "s", f->nbins, f->nbins == 1 ? "" : "s");
  if (colcnt) nbB_printf(b, " (summed into %d columns here)", cols);
  nbB_putc(b, '\n');
  free(colcnt);
  cv_free(&c);
}

/* ------------------------------------------------------------ colormaps and images */
/* viridis sampled at 10 evenly spaced points, linearly interpolated */
static const uint8_t VIRIDIS[10][3] = {
  { 0x44, 0x01, 0x54 }, { 0x48, 0x28, 0x78 }, { 0x3e, 0x4a, 0x89 }, { 0x31, 0x68, 0x8e }, { 0x26, 0x82, 0x8e },
  { 0x1f, 0x9e, 0x89 }, { 0x35, 0xb7, 0x79 }, { 0x6d, 0xcd, 0x59 }, { 0xb4, 0xde, 0x2c }, { 0xfd, 0xe7, 0x25 },
};
static void colormap(int cmap, double t, uint8_t rgb[3]) {
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  if (cmap == CM_GRAY) { rgb[0] = rgb[1] = rgb[2] = (uint8_t)lround(t * 255); return; }
  double p = t * 9; int i = (int)p; if (i > 8) i = 8;
  double u = p - i;
  for (int k = 0; k < 3; k++) rgb[k] = (uint8_t)lround(VIRIDIS[i][k] + (VIRIDIS[i + 1][k] - VIRIDIS[i][k]) * u);
}
/* normalized value of a 2-D image pixel (NaN stays NaN) */
static double img_norm(const Fig *f, double v) {
  if (!isfinite(v)) return isnan(v) ? NAN : v > 0 ? 1 : 0;
  if (!(f->vmax > f->vmin)) return v > f->vmin ? 1 : 0;
  double t = frac(v, f->vmin, f->vmax);
  return t < 0 ? 0 : t > 1 ? 1 : t;
}
static bool img_has_nan(const Fig *f) {
  if (f->ic != 1) return false;
  for (int64_t i = 0; i < (int64_t)f->ih * f->iw; i++) if (isnan(f->pix[i])) return true;
  return false;
}
/* the image as 8-bit RGB(A) pixels at its own resolution; *chans 3 or 4 */
static uint8_t *img_rgb(const Fig *f, int *chans) {
  int ch = f->ic == 4 || img_has_nan(f) ? 4 : 3;
  size_t n = (size_t)f->ih * (size_t)f->iw;
  uint8_t *px = xmalloc(n * (size_t)ch);
  for (size_t i = 0; i < n; i++) {
    uint8_t *o = px + i * (size_t)ch;
    if (f->ic == 1) {
      double t = img_norm(f, f->pix[i]);
      colormap(f->cmap, isnan(t) ? 0 : t, o);
      if (ch == 4) o[3] = isnan(t) ? 0 : 255;
    } else {
      for (int k = 0; k < f->ic; k++) {
        double v = f->pix[i * (size_t)f->ic + (size_t)k];
        if (!(v >= 0)) v = 0;
        if (v > 1) v = 1;
        o[k] = (uint8_t)lround(v * 255);
      }
    }
  }
  *chans = ch;
  return px;
}
/* the PNG's size: width/height when given, else an integer upscale to about 256 px */
static void img_out_size(const Fig *f, int *ow, int *oh) {
  if (f->width || f->height) {
    *ow = f->width ? f->width : (int)fmax(1, lround((double)f->iw * f->height / f->ih));
    *oh = f->height ? f->height : (int)fmax(1, lround((double)f->ih * f->width / f->iw));
    if (*ow > IMG_MAX_SIDE) *ow = IMG_MAX_SIDE;
    if (*oh > IMG_MAX_SIDE) *oh = IMG_MAX_SIDE;
    return;
  }
  int m = f->ih > f->iw ? f->ih : f->iw;
  int s = m >= 256 ? 1 : 256 / m;
  *ow = f->iw * s; *oh = f->ih * s;
}

static void png_wr(png_structp p, png_bytep d, png_size_t n) { nbB_add((nb_Buf *)png_get_io_ptr(p), (const char *)d, n); }
static void png_fl(png_structp p) { (void)p; }
/* nearest-neighbour resampled to ow x oh, encoded into out */
static int png_encode(const uint8_t *px, int w, int h, int ch, int ow, int oh, nb_Buf *out) {
  png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  if (!p) return -1;
  png_infop info = png_create_info_struct(p);
  if (!info) { png_destroy_write_struct(&p, NULL); return -1; }
  uint8_t *volatile row = xmalloc((size_t)ow * (size_t)ch);
  if (setjmp(png_jmpbuf(p))) { png_destroy_write_struct(&p, &info); free(row); return -1; }
  png_set_write_fn(p, out, png_wr, png_fl);
  png_set_IHDR(p, info, (png_uint_32)ow, (png_uint_32)oh, 8, ch == 4 ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(p, info);
  for (int y = 0; y < oh; y++) {
    int sy = (int)((int64_t)y * h / oh);
    for (int x = 0; x < ow; x++) {
      int sx = (int)((int64_t)x * w / ow);
      memcpy(row + (size_t)x * (size_t)ch, px + ((size_t)sy * (size_t)w + (size_t)sx) * (size_t)ch, (size_t)ch);
    }
    png_write_row(p, row);
  }
  png_write_end(p, NULL);
  png_destroy_write_struct(&p, &info);
  free(row);
  return 0;
}

static void base64(nb_Buf *b, const unsigned char *d, size_t n) {
  static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
    char q[4] = { A[v >> 18 & 63], A[v >> 12 & 63], i + 1 < n ? A[v >> 6 & 63] : '=', i + 2 < n ? A[v & 63] : '=' };
    nbB_add(b, q, 4);
  }
}

static void text_image(nb_Buf *b, const Fig *f) {
  static const char *SHADES[] = { " ", "\xe2\x96\x91", "\xe2\x96\x92", "\xe2\x96\x93", "\xe2\x96\x88" };   /* ░▒▓█ */
  double k = 2;   /* characters per pixel across; a character is about twice as tall as wide */
  if (64.0 / f->iw < k) k = 64.0 / f->iw;
  if (48.0 / f->ih < k) k = 48.0 / f->ih;
  int cols = (int)lround(f->iw * k), rows = (int)lround(f->ih * k / 2);
  if (cols < 1) cols = 1;
  if (rows < 1) rows = 1;
  if (f->title) centered(b, 1, cols + 2, f->title);
  nbB_puts(b, " \xe2\x94\x8c"); for (int c = 0; c < cols; c++) nbB_puts(b, "\xe2\x94\x80"); nbB_puts(b, "\xe2\x94\x90\n");
  for (int r = 0; r < rows; r++) {
    nbB_puts(b, " \xe2\x94\x82");
    int y0 = (int)((int64_t)r * f->ih / rows), y1 = (int)((int64_t)(r + 1) * f->ih / rows);
    if (y1 <= y0) y1 = y0 + 1;
    for (int c = 0; c < cols; c++) {
      int x0 = (int)((int64_t)c * f->iw / cols), x1 = (int)((int64_t)(c + 1) * f->iw / cols);
      if (x1 <= x0) x1 = x0 + 1;
      double sum = 0; int cnt = 0;
      for (int y = y0; y < y1 && y < f->ih; y++)
        for (int x = x0; x < x1 && x < f->iw; x++) {
          size_t i = (size_t)y * (size_t)f->iw + (size_t)x;
          double t;
          if (f->ic == 1) t = img_norm(f, f->pix[i]);
          else {
            const double *p = f->pix + i * (size_t)f->ic;
            t = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
            t = t < 0 ? 0 : t > 1 ? 1 : t;
          }
          if (!isnan(t)) { sum += t; cnt++; }
        }
      int lvl = cnt ? (int)(sum / cnt * 5) : 0;
      nbB_puts(b, SHADES[lvl > 4 ? 4 : lvl < 0 ? 0 : lvl]);
    }
    nbB_puts(b, "\xe2\x94\x82\n");
  }
  nbB_puts(b, " \xe2\x94\x94"); for (int c = 0; c < cols; c++) nbB_puts(b, "\xe2\x94\x80"); nbB_puts(b, "\xe2\x94\x98\n");
  if (f->ic == 1) {
    char lo[32], hi[32]; fmt_short(lo, sizeof lo, f->vmin); fmt_short(hi, sizeof hi, f->vmax);
    nbB_printf(b, "  %d\xc3\x97%d, %s \xe2\x96\x91\xe2\x96\x92\xe2\x96\x93\xe2\x96\x88 %s (%s)\n", f->ih, f->iw, lo, hi, f->cmap == CM_GRAY ? "gray" : "viridis");
  } else nbB_printf(b, "  %d\xc3\x97%d %s\n", f->ih, f->iw, f->ic == 4 ? "RGBA" : "RGB");
  if (f->xlabel) centered(b, 1, cols + 2, f->xlabel);
}

/* ------------------------------------------------------------ SVG */
static void xml_text(nb_Buf *b, const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    switch (ch) {
    case '&': nbB_puts(b, "&amp;"); break;
    case '<': nbB_puts(b, "&lt;"); break;
    case '>': nbB_puts(b, "&gt;"); break;
    case '"': nbB_puts(b, "&quot;"); break;
    case '\'': nbB_puts(b, "&#39;"); break;
    default:
      if (ch < 0x20 || ch == 0x7f) nbB_putc(b, ' ');   /* not allowed in XML 1.0 */
      else nbB_putc(b, (char)ch);
    }
  }
}
/* rough width of text at 12px sans-serif */
static double text_px(const char *s, double size) { return u8width(s) * size * 0.6; }

typedef struct Frame { double l, t, r, b; double vx0, vx1, vy0, vy1; bool yflip; } Frame;
static double fx(const Frame *fr, double x) { return fr->l + frac(x, fr->vx0, fr->vx1) * (fr->r - fr->l); }
static double fy(const Frame *fr, double y) {
  double t = frac(y, fr->vy0, fr->vy1);
  return fr->yflip ? fr->t + t * (fr->b - fr->t) : fr->b - t * (fr->b - fr->t);
}

static void svg_open(nb_Buf *b, int W, int H) {
  nbB_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" "
                "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n", W, H, W, H);
  nbB_printf(b, "<rect class=\"background\" x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
}

/* layout of the plot area from the figure's size and texts */
static void svg_layout(const Fig *f, Frame *fr, int W, int H, double extra_right) {
  fr->l = 58 + (f->ylabel ? 20 : 0);
  fr->r = W - 16 - extra_right;
  fr->t = f->title ? 38 : 14;
  fr->b = H - (f->xlabel ? 48 : 30);
}

static void svg_axes(nb_Buf *b, const Fig *f, const Frame *fr, int W, int H) {
  double xt[64], yt[64], xs, ys;
  int nx = nice_ticks(fmin(fr->vx0, fr->vx1), fmax(fr->vx0, fr->vx1), (int)fmax(2, fmin(10, (fr->r - fr->l) / 90)), xt, 64, &xs);
  int ny = nice_ticks(fmin(fr->vy0, fr->vy1), fmax(fr->vy0, fr->vy1), (int)fmax(2, fmin(10, (fr->b - fr->t) / 60)), yt, 64, &ys);
  if (f->kind != K_IMAGE) {
    nbB_puts(b, "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n");
    for (int i = 0; i < nx; i++) nbB_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", fx(fr, xt[i]), fr->t, fx(fr, xt[i]), fr->b);
    for (int i = 0; i < ny; i++) nbB_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", fr->l, fy(fr, yt[i]), fr->r, fy(fr, yt[i]));
    nbB_puts(b, "</g>\n");
  }
  nbB_puts(b, "<g class=\"xticks\" fill=\"#333333\" text-anchor=\"middle\">\n");
  for (int i = 0; i < nx; i++) {
    char lab[48]; fmt_tick(lab, sizeof lab, xt[i], xs);
    double x = fx(fr, xt[i]);
    nbB_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#333333\"/>", x, fr->b, x, fr->b + 5);
    nbB_printf(b, "<text class=\"xtick\" x=\"%.2f\" y=\"%.2f\">%s</text>\n", x, fr->b + 18, lab);
  }
  nbB_puts(b, "</g>\n<g class=\"yticks\" fill=\"#333333\" text-anchor=\"end\">\n");
  for (int i = 0; i < ny; i++) {
    char lab[48]; fmt_tick(lab, sizeof lab, yt[i], ys);
    double y = fy(fr, yt[i]);
    nbB_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#333333\"/>", fr->l - 5, y, fr->l, y);
    nbB_printf(b, "<text class=\"ytick\" x=\"%.2f\" y=\"%.2f\">%s</text>\n", fr->l - 8, y + 4, lab);
  }
  nbB_puts(b, "</g>\n");
  nbB_printf(b, "<rect class=\"frame\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#333333\"/>\n",
             fr->l, fr->t, fr->r - fr->l, fr->b - fr->t);
  if (f->title) {
    nbB_printf(b, "<text class=\"title\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">", (fr->l + fr->r) / 2, 24.0);
    xml_text(b, f->title); nbB_puts(b, "</text>\n");
  }
  if (f->xlabel) {
    nbB_printf(b, "<text class=\"xlabel\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\">", (fr->l + fr->r) / 2, (double)H - 10);
    xml_text(b, f->xlabel); nbB_puts(b, "</text>\n");
  }
  if (f->ylabel) {
    double cy = (fr->t + fr->b) / 2;
    nbB_printf(b, "<text class=\"ylabel\" x=\"16\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 16 %.2f)\">", cy, cy);
    xml_text(b, f->ylabel); nbB_puts(b, "</text>\n");
  }
  (void)W;
}

static void svg_legend(nb_Buf *b, const Fig *f, const Frame *fr) {
  if (!f->legend) return;
  double w = 0;
  for (int i = 0; i < f->ns; i++) { double t = text_px(f->s[i].label ? f->s[i].label : "", 12); if (t > w) w = t; }
  w += 40;
  double h = 8 + 18.0 * f->ns, x = fr->r - w - 8, y = fr->t + 8;
  nbB_puts(b, "<g class=\"legend\">\n");
  nbB_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#cccccc\" rx=\"3\"/>\n", x, y, w, h);
  for (int i = 0; i < f->ns; i++) {
    double cy = y + 4 + 18.0 * i + 9;
    const char *col = PALETTE[i % NPALETTE];
    if (f->kind == K_SCATTER) nbB_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"4\" fill=\"%s\"/>", x + 18, cy, col);
    else nbB_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\"/>", x + 8, cy, x + 28, cy, col);
    nbB_printf(b, "<text x=\"%.2f\" y=\"%.2f\">", x + 34, cy + 4);
    xml_text(b, f->s[i].label ? f->s[i].label : "");
    nbB_puts(b, "</text>\n");
  }
  nbB_puts(b, "</g>\n");
}

typedef struct Pt { double x, y; } Pt;

/* a run of finite points as a polyline; long runs keep first/min/max/last of each bucket */
static void svg_polyline(nb_Buf *b, const Frame *fr, const Series *s, int64_t from, int64_t to, const char *color, int64_t budget) {
  int64_t n = to - from;
  nbB_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"", color);
  if (n <= budget) {
    for (int64_t j = from; j < to; j++) nbB_printf(b, "%s%.2f,%.2f", j > from ? " " : "", fx(fr, s->x[j]), fy(fr, s->y[j]));
  } else {
    int64_t buckets = budget / 4; bool first = true;
    for (int64_t k = 0; k < buckets; k++) {
      int64_t a = from + n * k / buckets, e = from + n * (k + 1) / buckets;
      if (e <= a) continue;
      int64_t imin = a, imax = a;
      for (int64_t j = a; j < e; j++) { if (s->y[j] < s->y[imin]) imin = j; if (s->y[j] > s->y[imax]) imax = j; }
      int64_t idx[4] = { a, imin < imax ? imin : imax, imin < imax ? imax : imin, e - 1 };
      for (int q = 0; q < 4; q++) {
        if (q && idx[q] == idx[q - 1]) continue;
        nbB_printf(b, "%s%.2f,%.2f", first ? "" : " ", fx(fr, s->x[idx[q]]), fy(fr, s->y[idx[q]]));
        first = false;
      }
    }
  }
  nbB_puts(b, "\"/>\n");
}

static void svg_xy(nb_Buf *b, const Fig *f) {
  int W = f->width ? f->width : SVG_DEF_W, H = f->height ? f->height : SVG_DEF_H;
  Frame fr; svg_layout(f, &fr, W, H, 0);
  double px = (f->x1 - f->x0) * 0.05, py = (f->y1 - f->y0) * 0.05;
  if (!isfinite(px)) px = 0;
  if (!isfinite(py)) py = 0;
  fr.vx0 = f->x0 - px; fr.vx1 = f->x1 + px; fr.vy0 = f->y0 - py; fr.vy1 = f->y1 + py; fr.yflip = false;
  svg_open(b, W, H);
  svg_axes(b, f, &fr, W, H);
  for (int i = 0; i < f->ns; i++) {
    const Series *s = &f->s[i];
    const char *col = PALETTE[i % NPALETTE];
    nbB_printf(b, "<g class=\"series\" data-index=\"%d\"", i);
    if (s->label) { nbB_puts(b, " data-label=\""); xml_text(b, s->label); nbB_putc(b, '"'); }
    nbB_puts(b, ">\n");
    if (f->kind == K_LINE) {
      int64_t finite = 0;
      for (int64_t j = 0; j < s->n; j++) if (isfinite(s->x[j]) && isfinite(s->y[j])) finite++;
      for (int64_t j = 0; j < s->n;) {
        while (j < s->n && !(isfinite(s->x[j]) && isfinite(s->y[j]))) j++;
        int64_t a = j;
        while (j < s->n && isfinite(s->x[j]) && isfinite(s->y[j])) j++;
        if (j > a) {
          /* each run gets its share of the series' point budget */
          int64_t budget = finite <= SVG_MAX_POINTS ? j - a : (int64_t)fmax(8, (double)SVG_MAX_POINTS * (j - a) / finite);
          svg_polyline(b, &fr, s, a, j, col, budget);
        }
      }
    } else {
      /* one circle per point; above the budget, one per occupied pixel */
      bool dedup = s->n > SVG_MAX_POINTS;
      int gw = W + 1, gh = H + 1;
      uint8_t *seen = dedup ? xcalloc((size_t)gw * (size_t)gh, 1) : NULL;
      nbB_printf(b, "<g fill=\"%s\" fill-opacity=\"0.75\">\n", col);
      for (int64_t j = 0; j < s->n; j++) {
        if (!isfinite(s->x[j]) || !isfinite(s->y[j])) continue;
        double cx = fx(&fr, s->x[j]), cy = fy(&fr, s->y[j]);
        if (dedup) {
          int gx = (int)cx, gy = (int)cy;
          if (gx < 0 || gy < 0 || gx >= gw || gy >= gh) continue;
          if (seen[(size_t)gy * (size_t)gw + (size_t)gx]) continue;
          seen[(size_t)gy * (size_t)gw + (size_t)gx] = 1;
        }
        nbB_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%s\"/>\n", cx, cy, dedup ? "2" : "3");
      }
      nbB_puts(b, "</g>\n");
      free(seen);
    }
    nbB_puts(b, "</g>\n");
  }
  svg_legend(b, f, &fr);
  nbB_puts(b, "</svg>\n");
}

static void svg_hist(nb_Buf *b, const Fig *f) {
  int W = f->width ? f->width : SVG_DEF_W, H = f->height ? f->height : SVG_DEF_H;
  Frame fr; svg_layout(f, &fr, W, H, 0);
  double maxc = 0;
  for (int i = 0; i < f->nbins; i++) if (f->counts[i] > maxc) maxc = f->counts[i];
  double e0 = f->edges[0], e1 = f->edges[f->nbins], pad = (e1 * 0.5 - e0 * 0.5) * 0.06;
  fr.vx0 = e0 - pad; fr.vx1 = e1 + pad; fr.vy0 = 0; fr.vy1 = (maxc > 0 ? maxc : 1) * 1.05; fr.yflip = false;
  svg_open(b, W, H);
  svg_axes(b, f, &fr, W, H);
  nbB_printf(b, "<g class=\"bars\" fill=\"%s\" stroke=\"white\" stroke-width=\"%s\">\n", PALETTE[0], f->nbins > 200 ? "0" : "0.8");
  for (int i = 0; i < f->nbins; i++) {
    double x0 = fx(&fr, f->edges[i]), x1 = fx(&fr, f->edges[i + 1]), y = fy(&fr, f->counts[i]);
    nbB_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"><title>[", x0, y, fmax(0, x1 - x0), fmax(0, fr.b - y));
    char a[32], c[32]; fmt_short(a, sizeof a, f->edges[i]); fmt_short(c, sizeof c, f->edges[i + 1]);
    nbB_printf(b, "%s, %s%s: %.0f</title></rect>\n", a, c, i == f->nbins - 1 ? "]" : ")", f->counts[i]);
  }
  nbB_puts(b, "</g>\n</svg>\n");
}

static void svg_image(nb_Buf *b, const Fig *f, const char *png_b64) {
  int W = f->width ? f->width : 0, H = f->height ? f->height : 0;
  /* default: the image area keeps the pixels' aspect ratio, about 360 px on its long side */
  double s = 360.0 / (f->ih > f->iw ? f->ih : f->iw);
  double iwpx = f->iw * s, ihpx = f->ih * s;
  double cbar = f->ic == 1 ? 70 : 0;
  Fig tmp = *f;
  Frame fr;
  if (!W) W = (int)lround(iwpx + 58 + (f->ylabel ? 20 : 0) + 16 + cbar);
  if (!H) H = (int)lround(ihpx + (f->title ? 38 : 14) + (f->xlabel ? 48 : 30));
  svg_layout(&tmp, &fr, W, H, cbar);
  /* fit the image's aspect inside the frame */
  double aw = fr.r - fr.l, ah = fr.b - fr.t, sc = fmin(aw / f->iw, ah / f->ih);
  double cw = f->iw * sc, chh = f->ih * sc;
  fr.l += (aw - cw) / 2; fr.r = fr.l + cw; fr.t += (ah - chh) / 2; fr.b = fr.t + chh;
  fr.vx0 = -0.5; fr.vx1 = f->iw - 0.5; fr.vy0 = -0.5; fr.vy1 = f->ih - 0.5; fr.yflip = true;
  svg_open(b, W, H);
  nbB_printf(b, "<image x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated;image-rendering:crisp-edges\" xlink:href=\"data:image/png;base64,%s\"/>\n",
             fr.l, fr.t, cw, chh, png_b64);
  svg_axes(b, f, &fr, W, H);
  if (f->ic == 1) {   /* colorbar */
    double x = fr.r + 16, w = 14;
    nbB_puts(b, "<g class=\"colorbar\">\n<defs><linearGradient id=\"");
    /* ids are document-global in a notebook: make this one unique */
    static unsigned long counter;
    char id[64]; snprintf(id, sizeof id, "nbcmap-%ld-%lu", (long)getpid(), ++counter);
    nbB_printf(b, "%s\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">", id);
    for (int i = 0; i <= 10; i++) {
      uint8_t rgb[3]; colormap(f->cmap, i / 10.0, rgb);
      nbB_printf(b, "<stop offset=\"%.1f\" stop-color=\"#%02x%02x%02x\"/>", i / 10.0, rgb[0], rgb[1], rgb[2]);
    }
    nbB_printf(b, "</linearGradient></defs>\n<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"url(#%s)\" stroke=\"#333333\"/>\n",
               x, fr.t, w, fr.b - fr.t, id);
    double lo = f->vmin, hi = f->vmax;
    if (!(hi > lo)) { double a = lo, c = hi; widen(&a, &c); lo = a; hi = c; }
    double t[64], st; int n = nice_ticks(lo, hi, 5, t, 64, &st);
    for (int i = 0; i < n; i++) {
      double y = fr.b - frac(t[i], lo, hi) * (fr.b - fr.t);
      char lab[48]; fmt_tick(lab, sizeof lab, t[i], st);
      nbB_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#333333\"/><text class=\"ctick\" x=\"%.2f\" y=\"%.2f\" fill=\"#333333\">%s</text>\n",
                 x + w, y, x + w + 4, y, x + w + 6, y + 4, lab);
    }
    nbB_puts(b, "</g>\n");
  }
  nbB_puts(b, "</svg>\n");
}

/* ------------------------------------------------------------ output */
typedef struct Opts { nb_Value display_id, update, file; } Opts;

static const char *file_ext(const char *path) {
  const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
  return dot && (!slash || dot > slash) ? dot + 1 : "";
}

static int check_opts(nb_VM *vm, const Fig *f, const Opts *o) {
  if (o->display_id.t != NB_TNIL && o->display_id.t != NB_TSTR && o->display_id.t != NB_TNUM)
    return nb_error_kind(vm, "TypeError", "%s: display_id must be a string, got %s", f->fname, nb_typename(o->display_id));
  if (nb_truthy(o->update) && o->display_id.t == NB_TNIL)
    return nb_error_kind(vm, "ValueError", "%s: update=true needs a display_id (the id of the plot to replace)", f->fname);
  if (o->file.t != NB_TNIL) {
    if (o->file.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: file must be a path string, got %s", f->fname, nb_typename(o->file));
    const char *path = nb_str(o->file)->data, *ext = file_ext(path);
    if (!*path || strlen(path) != nb_str(o->file)->len) return nb_error_kind(vm, "ValueError", "%s: file is not a valid path", f->fname);
    bool ok = !strcasecmp(ext, "svg") || !strcasecmp(ext, "txt") || (f->kind == K_IMAGE && !strcasecmp(ext, "png"));
    if (!ok) return nb_error_kind(vm, "ValueError", "%s: cannot write '%s': the file name must end in %s", f->fname, path,
                                  f->kind == K_IMAGE ? ".png, .svg or .txt" : ".svg or .txt (PNG files are for imshow)");
  }
  return NB_OK;
}

/* writes data to path through a temporary file in the same directory */
/* the file, replaced atomically by the one writer every file goes through
** (tensor/io/atomicfile.h: symlinks followed, non-regular targets refused,
** a safe temporary, fsync, rename) */
static int write_atomic(nb_VM *vm, const char *fname, const char *path, const char *data, size_t n) {
  struct iovec iov = { (void *)data, n };
  if (nt_atomic_write(fname, path, &iov, 1)) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  return NB_OK;
}

/* renders the figure, shows it and writes the file; returns nil */
static int emit(nb_VM *vm, Fig *f, const Opts *o, nb_Value *out) {
  nb_Buf text = {0}, svg = {0}, png = {0}, png64 = {0};
  switch (f->kind) {
  case K_LINE: case K_SCATTER: text_xy(&text, f); svg_xy(&svg, f); break;
  case K_HIST: text_hist(&text, f); svg_hist(&svg, f); break;
  case K_IMAGE: {
    int ch, ow, oh;
    uint8_t *px = img_rgb(f, &ch);
    img_out_size(f, &ow, &oh);
    int rc = png_encode(px, f->iw, f->ih, ch, ow, oh, &png);
    /* The SVG embeds the image upscaled by a whole factor (each pixel a k x k
    ** block) to about 720 px on its long side, twice the size it is drawn at:
    ** a viewer that ignores image-rendering:pixelated (a PDF, an SVG editor,
    ** some browsers) then resamples an image that is already sharp-edged,
    ** instead of smoothing 8 x 8 pixels across the whole plot. */
    int m = f->iw > f->ih ? f->iw : f->ih, k = m >= 720 ? 1 : (720 + m - 1) / m;
    while (k > 1 && (int64_t)m * k > 2048) k--;
    nb_Buf small = {0};
    if (rc == 0) rc = png_encode(px, f->iw, f->ih, ch, f->iw * k, f->ih * k, &small);
    free(px);
    if (rc) { nbB_free(&png); nbB_free(&small); return nb_error_kind(vm, "ValueError", "%s: PNG encoding failed", f->fname); }
    base64(&png64, (const unsigned char *)png.p, png.n);
    nb_Buf s64 = {0}; base64(&s64, (const unsigned char *)small.p, small.n);
    text_image(&text, f);
    svg_image(&svg, f, nbB_cstr(&s64));
    nbB_free(&small); nbB_free(&s64);
    break;
  }
  }
  /* the text ends without a newline: sinks add their own */
  while (text.n && text.p[text.n - 1] == '\n') text.n--;
  if (text.p) text.p[text.n] = 0;
  int rc = NB_OK;
  if (o->file.t == NB_TSTR) {
    const char *path = nb_str(o->file)->data, *ext = file_ext(path);
    if (!strcasecmp(ext, "png")) rc = write_atomic(vm, f->fname, path, png.p, png.n);
    else if (!strcasecmp(ext, "svg")) rc = write_atomic(vm, f->fname, path, svg.p, svg.n);
    else { nbB_putc(&text, '\n'); rc = write_atomic(vm, f->fname, path, text.p, text.n); text.p[--text.n] = 0; }
  }
  if (rc == NB_OK) {
    nb_MimeItem items[3];
    int n = 0;
    items[n++] = (nb_MimeItem){ "text/plain", nbB_cstr(&text), text.n };
    items[n++] = (nb_MimeItem){ "image/svg+xml", nbB_cstr(&svg), svg.n };
    if (png64.n) items[n++] = (nb_MimeItem){ "image/png", nbB_cstr(&png64), png64.n };
    char idbuf[64]; const char *id = NULL;
    if (o->display_id.t == NB_TSTR) id = nb_str(o->display_id)->data;
    else if (o->display_id.t == NB_TNUM) { nb_fmtnum(idbuf, sizeof idbuf, o->display_id.u.n); id = idbuf; }
    nb_Sink *k = nb_vm_sink(vm);
    if (k->display) k->display(k, items, n, id, id && nb_truthy(o->update));
    else { k->write(k, NB_STDOUT, text.p, text.n); k->write(k, NB_STDOUT, "\n", 1); }
    *out = nb_nil();
  }
  nbB_free(&text); nbB_free(&svg); nbB_free(&png); nbB_free(&png64);
  return rc;
}

/* title, xlabel, ylabel, width, height from args[first..first+4] */
static int common_opts(nb_VM *vm, Fig *f, nb_Value *a) {
  f->title = opt_text(a[0]); f->xlabel = opt_text(a[1]); f->ylabel = opt_text(a[2]);
  int maxs = f->kind == K_IMAGE ? IMG_MAX_SIDE : SVG_MAX_SIDE;
  if (opt_side(vm, f->fname, "width", a[3], f->kind == K_IMAGE ? 1 : SVG_MIN_SIDE, maxs, &f->width)) return NB_ERR;
  if (opt_side(vm, f->fname, "height", a[4], f->kind == K_IMAGE ? 1 : SVG_MIN_SIDE, maxs, &f->height)) return NB_ERR;
  return NB_OK;
}

/* ------------------------------------------------------------ builtins */
/* plot/scatter: xs, ys, title, xlabel, ylabel, legend, width, height, display_id, update, file */
static int xy_builtin(nb_VM *vm, nb_Value *args, nb_Value *out, int kind, const char *fname) {
  Fig f = {0}; f.kind = kind; f.fname = fname;
  Opts o = { args[8], args[9], args[10] };
  int rc = NB_ERR;
  nb_Value xs = args[0], ys = args[1];
  if (ys.t == NB_TNIL) {
    if (kind == K_SCATTER) return nb_error_kind(vm, "TypeError", "scatter: needs xs and ys (scatter(xs, ys))");
    ys = xs; xs = nb_nil();
  }
  if (check_opts(vm, &f, &o)) goto done;
  nb_Value a[5] = { args[2], args[3], args[4], args[6], args[7] };
  if (common_opts(vm, &f, a)) goto done;
  if (build_series(vm, &f, xs, ys)) goto done;
  if (set_legend(vm, &f, args[5])) goto done;
  if (series_bounds(vm, &f)) goto done;
  rc = emit(vm, &f, &o, out);
done:
  fig_free(&f);
  return rc;
}
static int b_plot(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return xy_builtin(vm, args, out, K_LINE, "plot"); }
static int b_scatter(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return xy_builtin(vm, args, out, K_SCATTER, "scatter"); }

static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

/* hist: x, bins, title, xlabel, ylabel, width, height, display_id, update, file */
static int b_hist(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  const char *fname = "hist";
  Fig f = {0}; f.kind = K_HIST; f.fname = fname;
  Opts o = { args[7], args[8], args[9] };
  int rc = NB_ERR;
  double *v = NULL; int64_t nv = 0;
  if (check_opts(vm, &f, &o)) goto done;
  if (common_opts(vm, &f, args + 2)) goto done;
  if (args[0].t == NB_TTENSOR) {   /* any shape: all elements */
    if (tensor_host(vm, fname, T(args[0]), &v)) goto done;
    nv = T(args[0])->numel;
  } else if (to_vec(vm, fname, "x", args[0], &v, &nv)) goto done;
  if (nv == 0) { nb_error_kind(vm, "ValueError", "hist: x is empty (nothing to count)"); goto done; }
  int64_t nf = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < nv; i++) if (isfinite(v[i])) { v[nf++] = v[i]; if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]; }
  if (nf == 0) { nb_error_kind(vm, "ValueError", "hist: x has no finite values (all %lld are NaN or infinite)", (long long)nv); goto done; }
  nb_Value bins = args[1];
  if (bins.t == NB_TNUM) {
    double k = bins.u.n;
    if (!(k >= 1 && k <= MAX_BINS) || k != floor(k)) { nb_error_kind(vm, "ValueError", "hist: bins must be a whole number from 1 to %d, got %g", MAX_BINS, k); goto done; }
    f.nbins = (int)k;
    widen(&lo, &hi);
    f.edges = xmalloc(sizeof(double) * (size_t)(f.nbins + 1));
    for (int i = 0; i <= f.nbins; i++) {   /* a convex combination: no overflow near ±DBL_MAX */
      double u = (double)i / f.nbins;
      f.edges[i] = i == f.nbins ? hi : lo * (1 - u) + hi * u;
    }
  } else if (bins.t == NB_TLIST || bins.t == NB_TTENSOR) {
    int64_t ne;
    if (to_vec(vm, fname, "bins", bins, &f.edges, &ne)) goto done;
    if (ne < 2 || ne > MAX_BINS + 1) { nb_error_kind(vm, "ValueError", "hist: bins as edges needs 2 to %d values, got %lld", MAX_BINS + 1, (long long)ne); goto done; }
    for (int64_t i = 0; i < ne; i++)
      if (!isfinite(f.edges[i]) || (i && !(f.edges[i] > f.edges[i - 1]))) { nb_error_kind(vm, "ValueError", "hist: bin edges must be finite and increasing (bins[%lld] = %g)", (long long)i, f.edges[i]); goto done; }
    f.nbins = (int)ne - 1;
  } else { nb_error_kind(vm, "TypeError", "hist: bins must be a number of bins or a list of edges, got %s", nb_typename(bins)); goto done; }
  f.counts = xcalloc((size_t)f.nbins, sizeof(double));
  /* numpy semantics: [e_i, e_i+1) except the last bin, which includes its right edge */
  qsort(v, (size_t)nf, sizeof(double), cmp_double);
  int bi = 0;
  for (int64_t i = 0; i < nf; i++) {
    double x = v[i];
    if (x < f.edges[0] || x > f.edges[f.nbins]) continue;
    while (bi < f.nbins - 1 && x >= f.edges[bi + 1]) bi++;
    f.counts[bi]++; f.hist_n++;
  }
  rc = emit(vm, &f, &o, out);
done:
  free(v);
  fig_free(&f);
  return rc;
}

/* imshow: t, title, xlabel, ylabel, cmap, vmin, vmax, width, height, display_id, update, file */
static int b_imshow(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  const char *fname = "imshow";
  Fig f = {0}; f.kind = K_IMAGE; f.fname = fname;
  Opts o = { args[9], args[10], args[11] };
  int rc = NB_ERR;
  nt_Tensor *tmp = NULL;
  nb_Value a[5] = { args[1], args[2], args[3], args[7], args[8] };
  if (check_opts(vm, &f, &o)) goto done;
  if (common_opts(vm, &f, a)) goto done;
  nt_Tensor *t;
  if (args[0].t == NB_TTENSOR) t = T(args[0]);
  else if (args[0].t == NB_TLIST) {   /* a nested list of numbers */
    nb_List *l = nb_list(args[0]);
    int64_t h = l->n, w = -1;
    if (h && l->items[0].t != NB_TLIST && l->items[0].t != NB_TTENSOR) { nb_error_kind(vm, "ValueError", "imshow: expected an image (a list of rows or a [H, W] tensor), got a list of %ss", nb_typename(l->items[0])); goto done; }
    for (int i = 0; i < l->n; i++) {
      double *row; int64_t rn;
      char what[32]; snprintf(what, sizeof what, "image row %d", i);
      if (to_vec(vm, fname, what, l->items[i], &row, &rn)) goto done;
      if (w < 0) { w = rn; f.pix = xmalloc(sizeof(double) * (size_t)(h * (w ? w : 1))); }
      if (rn != w) { free(row); nb_error_kind(vm, "ValueError", "imshow: image row %d has %lld values, row 0 has %lld", i, (long long)rn, (long long)w); goto done; }
      memcpy(f.pix + (size_t)i * (size_t)w, row, sizeof(double) * (size_t)w);
      free(row);
    }
    if (h == 0 || w <= 0) { nb_error_kind(vm, "ValueError", "imshow: the image is empty"); goto done; }
    if (h > IMG_MAX_SIDE * 2 || w > IMG_MAX_SIDE * 2) { nb_error_kind(vm, "ValueError", "imshow: the image is too large"); goto done; }
    f.ih = (int)h; f.iw = (int)w; f.ic = 1;
    t = NULL;
  } else { nb_error_kind(vm, "TypeError", "imshow: expected an image tensor ([H, W] or [H, W, 3]), got %s", nb_typename(args[0])); goto done; }
  if (t) {
    char shp[128]; nt_shape_str(t->shape, t->ndim, shp, sizeof shp);
    int c = t->ndim == 2 ? 1 : t->ndim == 3 ? (int)t->shape[2] : 0;
    if (!(c == 1 || c == 3 || c == 4)) { nb_error_kind(vm, "ValueError", "imshow: expected an image of shape [H, W], [H, W, 3] or [H, W, 4], got %s", shp); goto done; }
    if (t->shape[0] == 0 || t->shape[1] == 0) { nb_error_kind(vm, "ValueError", "imshow: the image is empty (shape %s)", shp); goto done; }
    if (t->shape[0] > IMG_MAX_SIDE * 2 || t->shape[1] > IMG_MAX_SIDE * 2) { nb_error_kind(vm, "ValueError", "imshow: the image is too large (shape %s; at most %d pixels a side)", shp, IMG_MAX_SIDE * 2); goto done; }
    f.ih = (int)t->shape[0]; f.iw = (int)t->shape[1]; f.ic = c;
    if (tensor_host(vm, fname, t, &f.pix)) goto done;
    if (c > 1 && t->dtype != NT_BOOL && !nt_dtype_is_float(t->dtype))   /* integer images are 0..255 */
      for (int64_t i = 0; i < t->numel; i++) f.pix[i] /= 255.0;
  }
  /* colormap range */
  if (f.ic == 1) {
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < (int64_t)f.ih * f.iw; i++) { double v = f.pix[i]; if (isfinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; } }
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    for (int k = 0; k < 2; k++) {
      nb_Value v = args[5 + k];
      if (v.t == NB_TNIL) continue;
      if (v.t != NB_TNUM || !isfinite(v.u.n)) { nb_error_kind(vm, "TypeError", "imshow: %s must be a finite number", k ? "vmax" : "vmin"); goto done; }
      if (k) hi = v.u.n; else lo = v.u.n;
    }
    f.vmin = lo; f.vmax = hi;
    nb_Value cm = args[4];
    if (cm.t == NB_TNIL || (cm.t == NB_TSTR && !strcmp(nb_str(cm)->data, "viridis"))) f.cmap = CM_VIRIDIS;
    else if (cm.t == NB_TSTR && (!strcmp(nb_str(cm)->data, "gray") || !strcmp(nb_str(cm)->data, "grey"))) f.cmap = CM_GRAY;
    else { nb_error_kind(vm, "ValueError", "imshow: unknown cmap (use \"viridis\" or \"gray\")"); goto done; }
  }
  rc = emit(vm, &f, &o, out);
done:
  nt_release(tmp);
  fig_free(&f);
  return rc;
}

#define COMMON "title=nil, xlabel=nil, ylabel=nil"
#define OUTPUT "display_id=nil, update=false, file=nil"
static nb_Builtin plot_builtins[] = {
  { "plot", b_plot, "xs, ys=nil, " COMMON ", legend=nil, width=nil, height=nil, " OUTPUT,
    "plot(ys) or plot(xs, ys, title=, xlabel=, ylabel=, legend=[...], width=, height=, display_id=, update=, file=): line plot; ys may be 2-D (a line per column) or a list of series" },
  { "scatter", b_scatter, "xs, ys=nil, " COMMON ", legend=nil, width=nil, height=nil, " OUTPUT,
    "scatter(xs, ys, title=, xlabel=, ylabel=, legend=, width=, height=, display_id=, update=, file=): scatter plot" },
  { "hist", b_hist, "x, bins=10, " COMMON ", width=nil, height=nil, " OUTPUT,
    "hist(x, bins=10, title=, xlabel=, ylabel=, width=, height=, display_id=, update=, file=): histogram of all values of x (bins: a count or a list of edges)" },
  { "imshow", b_imshow, "t, " COMMON ", cmap='viridis', vmin=nil, vmax=nil, width=nil, height=nil, " OUTPUT,
    "imshow(t, title=, cmap=\"viridis\"|\"gray\", vmin=, vmax=, width=, height=, display_id=, update=, file=): shows a [H, W] tensor through a colormap or an [H, W, 3] image ([0, 1] floats or 0..255 ints)" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_plot(void) {
  static int done;
  if (done) return;
  done = 1;
  nbC_register(plot_builtins);
}
