/*
** lib/lplotdraw.c — the renderers of lplot.c's figures: number labels and
** 1-2-5 ticks, the Unicode text canvas (braille dots, eighth blocks,
** shades), colormaps and PNG encoding (libpng, in memory), and SVG.  They
** take a finished Fig and write bytes; no nabla values, no errors raised.
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


static const char *PALETTE[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf" };
#define NPALETTE 10
/* markers of multi-series scatter plots in the terminal */
static const char *GLYPHS[] = { "\xe2\x80\xa2", "x", "+", "o", "*", "#", "@", "%" };   /* • x + o * # @ % */
#define NGLYPHS 8

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
void plot_widen(double *lo, double *hi) {
  if (*hi > *lo) return;
  double d = *lo == 0 ? 1 : fabs(*lo) * 0.1;
  *lo -= d; *hi += d;
}
/* position of v in [lo, hi] as 0..1 (overflow-safe) */
static double frac(double v, double lo, double hi) {
  double s = hi * 0.5 - lo * 0.5;
  return s > 0 ? (v * 0.5 - lo * 0.5) / s : 0.5;
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
void plot_text_xy(nb_Buf *b, const Fig *f) {
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

void plot_text_hist(nb_Buf *b, const Fig *f) {
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
void plot_colormap(int cmap, double t, uint8_t rgb[3]) {
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
uint8_t *plot_img_rgb(const Fig *f, int *chans) {
  int ch = f->ic == 4 || img_has_nan(f) ? 4 : 3;
  size_t n = (size_t)f->ih * (size_t)f->iw;
  uint8_t *px = xmalloc(n * (size_t)ch);
  for (size_t i = 0; i < n; i++) {
    uint8_t *o = px + i * (size_t)ch;
    if (f->ic == 1) {
      double t = img_norm(f, f->pix[i]);
      plot_colormap(f->cmap, isnan(t) ? 0 : t, o);
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
void plot_img_out_size(const Fig *f, int *ow, int *oh) {
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
int plot_png_encode(const uint8_t *px, int w, int h, int ch, int ow, int oh, nb_Buf *out) {
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


void plot_text_image(nb_Buf *b, const Fig *f) {
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

void plot_svg_xy(nb_Buf *b, const Fig *f) {
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

void plot_svg_hist(nb_Buf *b, const Fig *f) {
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

void plot_svg_image(nb_Buf *b, const Fig *f, const char *png_b64) {
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
    static unsigned long counter;   /* process-wide (ids must differ across VMs too); atomic: VMs may run on several threads */
    char id[64]; snprintf(id, sizeof id, "nbcmap-%ld-%lu", (long)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    nbB_printf(b, "%s\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">", id);
    for (int i = 0; i <= 10; i++) {
      uint8_t rgb[3]; plot_colormap(f->cmap, i / 10.0, rgb);
      nbB_printf(b, "<stop offset=\"%.1f\" stop-color=\"#%02x%02x%02x\"/>", i / 10.0, rgb[0], rgb[1], rgb[2]);
    }
    nbB_printf(b, "</linearGradient></defs>\n<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"url(#%s)\" stroke=\"#333333\"/>\n",
               x, fr.t, w, fr.b - fr.t, id);
    double lo = f->vmin, hi = f->vmax;
    if (!(hi > lo)) { double a = lo, c = hi; plot_widen(&a, &c); lo = a; hi = c; }
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
