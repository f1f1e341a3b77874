/*
** lib/lplot.h — the figure the plotting builtins build (lplot.c) and the
** renderers draw (lplotdraw.c): one Fig, converted once from the arguments,
** rendered as text, SVG and PNG.
*/
#ifndef LPLOT_H
#define LPLOT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "lang/nbapi.h"

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

/* allocation that cannot fail (a figure is small): abort when memory is out */
static inline void *xmalloc(size_t n) { void *p = malloc(n ? n : 1); if (!p) abort(); return p; }
static inline void *xcalloc(size_t n, size_t sz) { void *p = calloc(n ? n : 1, sz ? sz : 1); if (!p) abort(); return p; }
static inline char *xstrdup(const char *s) { size_t n = strlen(s); char *p = xmalloc(n + 1); memcpy(p, s, n + 1); return p; }

/* ---- renderers (lplotdraw.c): a Fig to text, SVG and PNG */
void plot_widen(double *lo, double *hi);   /* a constant range becomes a small interval around the value */
void plot_text_xy(nb_Buf *b, const Fig *f);
void plot_text_hist(nb_Buf *b, const Fig *f);
void plot_text_image(nb_Buf *b, const Fig *f);
void plot_colormap(int cmap, double t, uint8_t rgb[3]);
uint8_t *plot_img_rgb(const Fig *f, int *chans);   /* 8-bit pixels, chans 1, 3 or 4 (malloc'd) */
void plot_img_out_size(const Fig *f, int *ow, int *oh);
int  plot_png_encode(const uint8_t *px, int w, int h, int ch, int ow, int oh, nb_Buf *out);
void plot_svg_xy(nb_Buf *b, const Fig *f);
void plot_svg_hist(nb_Buf *b, const Fig *f);
void plot_svg_image(nb_Buf *b, const Fig *f, const char *png_b64);

#endif
