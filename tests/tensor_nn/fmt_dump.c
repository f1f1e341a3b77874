/*
** fmt_dump — driver for test_formats.py.
**   fmt_dump dump FMT FILE               FMT: st npy npz csv
**     prints per array:  "array NAME DTYPE NDIM D0 D1 ..." then one line of
**     values (%.17g; f16/bf16 widened, bool/u8 as integers); "meta K V" lines;
**     for csv: "csv NROWS NCOLS", "names A B ..." (if any), then the values.
**   fmt_dump convert FMT IN OUTFMT OUT [NAME]   OUTFMT: st (all arrays) or
**     npy (array NAME, default the first); exit 1 with the error on stderr.
*/
#include "tensor/io/csv.h"
#include "tensor/io/npy.h"
#include "tensor/io/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}
static double bf16_to_double(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double elem(const nt_io_array *a, size_t i) {
  const void *d = a->data;
  switch (a->dtype) {
  case NT_IO_F32: return ((const float *)d)[i];
  case NT_IO_F64: return ((const double *)d)[i];
  case NT_IO_F16: return half_to_double(((const uint16_t *)d)[i]);
  case NT_IO_BF16: return bf16_to_double(((const uint16_t *)d)[i]);
  case NT_IO_I32: return ((const int32_t *)d)[i];
  case NT_IO_I64: return (double)((const int64_t *)d)[i];
  case NT_IO_U8: case NT_IO_BOOL: return ((const uint8_t *)d)[i];
  default: return NAN;
  }
}

static nt_io_set *load(const char *fmt, const char *path) {
  if (!strcmp(fmt, "st")) return nt_st_load(path);
  if (!strcmp(fmt, "npy")) return nt_npy_load(path);
  if (!strcmp(fmt, "npz")) return nt_npz_load(path);
  fprintf(stderr, "unknown format %s\n", fmt);
  exit(2);
}

int main(int argc, char **argv) {
  if (argc >= 4 && !strcmp(argv[1], "dump") && !strcmp(argv[2], "csv")) {
    nt_csv *c = nt_csv_load(argv[3], 0);
    if (!c) { fprintf(stderr, "error: %s\n", nt_io_error()); return 1; }
    printf("csv %zu %zu\n", c->nrows, c->ncols);
    if (c->names) {
      printf("names");
      for (size_t i = 0; i < c->ncols; i++) printf(" %s", c->names[i]);
      printf("\n");
    }
    for (size_t i = 0; i < c->nrows * c->ncols; i++) printf("%s%.17g", i ? " " : "", c->data[i]);
    printf("\n");
    nt_csv_free(c);
    return 0;
  }
  if (argc >= 4 && !strcmp(argv[1], "dump")) {
    nt_io_set *s = load(argv[2], argv[3]);
    if (!s) { fprintf(stderr, "error: %s\n", nt_io_error()); return 1; }
    for (size_t k = 0; k < s->nmeta; k++) printf("meta %s %s\n", s->meta_keys[k], s->meta_values[k]);
    for (size_t k = 0; k < s->n; k++) {
      const nt_io_array *a = &s->arrays[k];
      printf("array %s %s %d", a->name[0] ? a->name : "-", nt_io_dtype_name(a->dtype), a->ndim);
      for (int d = 0; d < a->ndim; d++) printf(" %lld", (long long)a->shape[d]);
      printf("\n");
      size_t n = a->nbytes / nt_io_dtype_size(a->dtype);
      for (size_t i = 0; i < n; i++) printf("%s%.17g", i ? " " : "", elem(a, i));
      printf("\n");
    }
    nt_io_set_free(s);
    return 0;
  }
  if (argc >= 6 && !strcmp(argv[1], "convert")) {
    nt_io_set *s = load(argv[2], argv[3]);
    if (!s) { fprintf(stderr, "error: %s\n", nt_io_error()); return 1; }
    int rc;
    if (!strcmp(argv[4], "st")) {
      const char *mk[] = {"writer"}, *mv[] = {"nabla fmt_dump"};
      rc = nt_st_save(argv[5], s->arrays, s->n, mk, mv, 1);
    } else {
      const nt_io_array *a = argc >= 7 ? nt_io_set_find(s, argv[6]) : (s->n ? &s->arrays[0] : NULL);
      rc = a ? nt_npy_save(argv[5], a) : -1;
      if (!a) fprintf(stderr, "error: no such array\n");
    }
    if (rc) fprintf(stderr, "error: %s\n", nt_io_error());
    nt_io_set_free(s);
    return rc ? 1 : 0;
  }
  fprintf(stderr, "usage: fmt_dump dump FMT FILE | convert FMT IN OUTFMT OUT [NAME]\n");
  return 2;
}
