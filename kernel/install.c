/*
** install.c — `nabla kernel install|uninstall`: the kernelspec directory
** (kernel.json plus logo-32x32.png and logo-64x64.png, drawn here with libpng)
** in the place Jupyter looks:
**   (default)      /usr/local/share/jupyter/kernels/NAME
**   --user         $JUPYTER_DATA_DIR or ${XDG_DATA_HOME:-~/.local/share}/jupyter/kernels/NAME
**   --sys-prefix   $VIRTUAL_ENV or $CONDA_PREFIX (else /usr) + /share/jupyter/kernels/NAME
**   --prefix DIR   DIR/share/jupyter/kernels/NAME
*/
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include "kernel/kint.h"

static int mkdirs(const char *path) {
  char buf[PATH_MAX + 256];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(buf, 0755) && errno != EEXIST) return -1;
  return 0;
}

/* A ∇ (nabla) in white on a rounded dark-blue square, anti-aliased by 4x4 supersampling. */
static int write_logo(const char *path, int size) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  unsigned char *img = malloc((size_t)size * (size_t)size * 4);
  png_bytep *rows = malloc(sizeof *rows * (size_t)size);
  if (!png || !info || !img || !rows || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info); free(img); free(rows); fclose(f);
    return -1;
  }
  double S = size;
  /* outer triangle (pointing down) and the inner cut-out */
  double ax = 0.16 * S, ay = 0.22 * S, bx = 0.84 * S, by = 0.22 * S, cx = 0.5 * S, cy = 0.84 * S;
  double t = 0.11 * S;   /* stroke width */
  for (int y = 0; y < size; y++) {
    for (int x = 0; x < size; x++) {
      int in_bg = 0, in_tri = 0;
      for (int sy = 0; sy < 4; sy++) for (int sx = 0; sx < 4; sx++) {
        double px = x + (sx + 0.5) / 4, py = y + (sy + 0.5) / 4;
        /* rounded square */
        double r = 0.18 * S, qx = fmax(fabs(px - S / 2) - (S / 2 - r), 0), qy = fmax(fabs(py - S / 2) - (S / 2 - r), 0);
        if (qx * qx + qy * qy <= r * r) in_bg++;
        /* signed distances to the three edges (inside positive) */
        double d1 = py - ay;
        double ex = cx - bx, ey = cy - by, l2 = sqrt(ex * ex + ey * ey);
        double d2 = ((px - bx) * ey - (py - by) * ex) / l2;
        double fx = ax - cx, fy = ay - cy, l3 = sqrt(fx * fx + fy * fy);
        double d3 = ((px - cx) * fy - (py - cy) * fx) / l3;
        double dmin = fmin(d1, fmin(d2, d3));
        if (dmin >= 0 && dmin <= t) in_tri++;
      }
      unsigned char *p = img + ((size_t)y * (size_t)size + (size_t)x) * 4;
      double a = in_bg / 16.0, w = in_tri / 16.0;
      p[0] = (unsigned char)(0x1f + (255 - 0x1f) * w);
      p[1] = (unsigned char)(0x3a + (255 - 0x3a) * w);
      p[2] = (unsigned char)(0x93 + (255 - 0x93) * w);
      p[3] = (unsigned char)(255 * a);
    }
    rows[y] = img + (size_t)y * (size_t)size * 4;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)size, (png_uint_32)size, 8, PNG_COLOR_TYPE_RGBA, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(img); free(rows);
  return fclose(f) ? -1 : 0;
}

int kernel_install(int argc, char **argv, int uninstall) {
  const char *where = NULL, *prefix = NULL, *name = "nabla", *mode = "message";
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--user") || !strcmp(argv[i], "--sys-prefix")) where = argv[i];
    else if (!strcmp(argv[i], "--prefix") && i + 1 < argc) { where = "--prefix"; prefix = argv[++i]; }
    else if (!strncmp(argv[i], "--prefix=", 9)) { where = "--prefix"; prefix = argv[i] + 9; }
    else if (!strcmp(argv[i], "--name") && i + 1 < argc) name = argv[++i];
    else if (!strcmp(argv[i], "--interrupt-mode") && i + 1 < argc) mode = argv[++i];
    else { fprintf(stderr, "nabla kernel %s: unknown argument %s\n", uninstall ? "uninstall" : "install", argv[i]); return 2; }
  }
  if (strcmp(mode, "message") && strcmp(mode, "signal")) { fprintf(stderr, "nabla kernel install: --interrupt-mode is message or signal\n"); return 2; }
  if (!*name || strchr(name, '/')) { fprintf(stderr, "nabla kernel: bad kernel name '%s'\n", name); return 2; }
  char base[PATH_MAX];
  if (!where) snprintf(base, sizeof base, "/usr/local/share/jupyter");
  else if (!strcmp(where, "--prefix")) snprintf(base, sizeof base, "%s/share/jupyter", prefix);
  else if (!strcmp(where, "--sys-prefix")) {
    const char *p = getenv("VIRTUAL_ENV");
    if (!p || !*p) p = getenv("CONDA_PREFIX");
    snprintf(base, sizeof base, "%s/share/jupyter", p && *p ? p : "/usr");
  } else {
    const char *jd = getenv("JUPYTER_DATA_DIR"), *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (jd && *jd) snprintf(base, sizeof base, "%s", jd);
    else if (xdg && *xdg) snprintf(base, sizeof base, "%s/jupyter", xdg);
    else if (home && *home) snprintf(base, sizeof base, "%s/.local/share/jupyter", home);
    else { fprintf(stderr, "nabla kernel: HOME is not set\n"); return 1; }
  }
  char dir[PATH_MAX + 64], path[PATH_MAX + 128];
  snprintf(dir, sizeof dir, "%s/kernels/%s", base, name);
  static const char *files[] = { "kernel.json", "logo-32x32.png", "logo-64x64.png" };
  if (uninstall) {
    struct stat sb;
    if (stat(dir, &sb) != 0) { fprintf(stderr, "nabla kernel uninstall: %s is not installed\n", dir); return 1; }
    for (int i = 0; i < 3; i++) { snprintf(path, sizeof path, "%s/%s", dir, files[i]); unlink(path); }
    if (rmdir(dir) != 0) { fprintf(stderr, "nabla kernel uninstall: cannot remove %s: %s\n", dir, strerror(errno)); return 1; }
    printf("Removed kernelspec %s from %s\n", name, dir);
    return 0;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) { fprintf(stderr, "nabla kernel install: cannot find this executable\n"); return 1; }
  exe[n] = 0;
  if (mkdirs(dir)) { fprintf(stderr, "nabla kernel install: cannot create %s: %s\n", dir, strerror(errno)); return 1; }
  json_t *spec = json_pack("{s:[s, s, s, s], s:s, s:s, s:s, s:{s:b}}",
                           "argv", exe, "kernel", "-f", "{connection_file}",
                           "display_name", strcmp(name, "nabla") ? name : "Nabla", "language", "nabla",
                           "interrupt_mode", mode, "metadata", "debugger", 0);
  snprintf(path, sizeof path, "%s/kernel.json", dir);
  int bad = !spec || json_dump_file(spec, path, JSON_INDENT(1)) != 0;
  json_decref(spec);
  if (bad) { fprintf(stderr, "nabla kernel install: cannot write %s\n", path); return 1; }
  snprintf(path, sizeof path, "%s/logo-32x32.png", dir);
  if (write_logo(path, 32)) { fprintf(stderr, "nabla kernel install: cannot write %s\n", path); return 1; }
  snprintf(path, sizeof path, "%s/logo-64x64.png", dir);
  if (write_logo(path, 64)) { fprintf(stderr, "nabla kernel install: cannot write %s\n", path); return 1; }
  printf("Installed kernelspec %s in %s\n", name, dir);
  return 0;
}
