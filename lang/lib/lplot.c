/*
** lib/lplot.c — plotting builtins: plot, scatter, hist, imshow (arguments to a
** Fig, and the mime bundle out; the drawing is lplotdraw.c).
**
** Each builtin converts its arguments into a Fig (series of finite-checked
** doubles, histogram bins or an image), then renders it as a mime bundle:
**   text/plain     a Unicode rendering for terminals (braille dots for lines
**                  and points, eighth blocks for histograms, shades for images)
**   image/svg+xml  a self-contained SVG with nice 1-2-5 ticks, grid, labels,
**                  title and legend (plot, scatter, hist, imshow)
**   image/png      base64 PNG (imshow only), encoded with libpng in memory
** and hands it to the sink's display() (display_id/update let a training loop
** redraw one plot in place).  file="x.svg"/"x.png"/"x.txt" writes the
** rendering atomically (a temporary file in the same directory, then rename)
** instead of showing it; show=true does both.
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
#include "lplot.h"
#include "util/base64.h"

#define T(v) ((nt_Tensor *)(v).u.p)

static void fig_free(Fig *f) {
  for (int i = 0; i < f->ns; i++) { free(f->s[i].x); free(f->s[i].y); free(f->s[i].label); }
  free(f->s); free(f->title); free(f->xlabel); free(f->ylabel);
  free(f->edges); free(f->counts); free(f->pix);
}

/* the base64 text of a rendered PNG, for the mime bundle and the SVG's data URI */
static void base64(nb_Buf *b, const char *d, size_t n) {
  size_t len;
  char *s = nu_base64_dup(d, n, &len);
  if (!s) abort();
  nbB_add(b, s, len);
  free(s);
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
  plot_widen(&x0, &x1); plot_widen(&y0, &y1);
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

/* ------------------------------------------------------------ output */
typedef struct Opts { nb_Value display_id, update, file, show; } Opts;

static const char *file_ext(const char *path) {
  const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
  return dot && (!slash || dot > slash) ? dot + 1 : "";
}

static int check_opts(nb_VM *vm, const Fig *f, const Opts *o) {
  if (o->display_id.t != NB_TNIL && o->display_id.t != NB_TSTR && o->display_id.t != NB_TNUM)
    return nb_error_kind(vm, "TypeError", "%s: display_id must be a string, got %s", f->fname, nb_typename(o->display_id));
  if (o->show.t != NB_TNIL && o->show.t != NB_TBOOL)
    return nb_error_kind(vm, "TypeError", "%s: show must be true, false or nil, got %s", f->fname, nb_typename(o->show));
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
  case K_LINE: case K_SCATTER: plot_text_xy(&text, f); plot_svg_xy(&svg, f); break;
  case K_HIST: plot_text_hist(&text, f); plot_svg_hist(&svg, f); break;
  case K_IMAGE: {
    int ch, ow, oh;
    uint8_t *px = plot_img_rgb(f, &ch);
    plot_img_out_size(f, &ow, &oh);
    int rc = plot_png_encode(px, f->iw, f->ih, ch, ow, oh, &png);
    /* The SVG embeds the image upscaled by a whole factor (each pixel a k x k
    ** block) to about 720 px on its long side, twice the size it is drawn at:
    ** a viewer that ignores image-rendering:pixelated (a PDF, an SVG editor,
    ** some browsers) then resamples an image that is already sharp-edged,
    ** instead of smoothing 8 x 8 pixels across the whole plot. */
    int m = f->iw > f->ih ? f->iw : f->ih, k = m >= 720 ? 1 : (720 + m - 1) / m;
    while (k > 1 && (int64_t)m * k > 2048) k--;
    nb_Buf small = {0};
    if (rc == 0) rc = plot_png_encode(px, f->iw, f->ih, ch, f->iw * k, f->ih * k, &small);
    free(px);
    if (rc) { nbB_free(&png); nbB_free(&small); return nb_error_kind(vm, "ValueError", "%s: PNG encoding failed", f->fname); }
    base64(&png64, png.p, png.n);
    nb_Buf s64 = {0}; base64(&s64, small.p, small.n);
    plot_text_image(&text, f);
    plot_svg_image(&svg, f, nbB_cstr(&s64));
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
  /* file= writes the file instead of showing the plot (a script's output
  ** gets no braille picture), unless show=true asks for both */
  bool show = o->show.t == NB_TBOOL ? o->show.u.b : o->file.t == NB_TNIL;
  if (rc == NB_OK && !show) *out = nb_nil();
  else if (rc == NB_OK) {
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
  Opts o = { args[8], args[9], args[10], args[11] };
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
  Opts o = { args[7], args[8], args[9], args[10] };
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
    plot_widen(&lo, &hi);
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
  Opts o = { args[9], args[10], args[11], args[12] };
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
#define OUTPUT "display_id=nil, update=false, file=nil, show=nil"
static nb_Builtin plot_builtins[] = {
  { "plot", b_plot, "xs, ys=nil, " COMMON ", legend=nil, width=nil, height=nil, " OUTPUT,
    "plot(ys) or plot(xs, ys, title=, xlabel=, ylabel=, legend=[...], width=, height=, display_id=, update=, file=, show=): line plot; ys may be 2-D (a line per column) or a list of series" },
  { "scatter", b_scatter, "xs, ys=nil, " COMMON ", legend=nil, width=nil, height=nil, " OUTPUT,
    "scatter(xs, ys, title=, xlabel=, ylabel=, legend=, width=, height=, display_id=, update=, file=, show=): scatter plot" },
  { "hist", b_hist, "x, bins=10, " COMMON ", width=nil, height=nil, " OUTPUT,
    "hist(x, bins=10, title=, xlabel=, ylabel=, width=, height=, display_id=, update=, file=, show=): histogram of all values of x (bins: a count or a list of edges)" },
  { "imshow", b_imshow, "t, " COMMON ", cmap='viridis', vmin=nil, vmax=nil, width=nil, height=nil, " OUTPUT,
    "imshow(t, title=, cmap=\"viridis\"|\"gray\", vmin=, vmax=, width=, height=, display_id=, update=, file=, show=): shows a [H, W] tensor through a colormap or an [H, W, 3] image ([0, 1] floats or 0..255 ints)" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_plot(void) {
  nbC_register(plot_builtins);
}

