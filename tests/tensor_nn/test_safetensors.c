/* test_safetensors.c — round-trips, a hand-built reference image, and every
** kind of corrupt file (each must fail with a message, never crash). */
#include "tn.h"
#include "tensor/io/safetensors.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>

static float f32v[6] = {1, -2.5f, 3, 4e-3f, 5e10f, -0.0f};
static int64_t i64v[4] = {1, -2, (int64_t)1 << 40, INT64_MIN};
static uint8_t u8v[1] = {200};
static double f64v[8] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, M_PI};
static uint16_t bf16v[2] = {0x3f80, 0xc000};

static void sample(nt_io_array a[6]) {
  memset(a, 0, 6 * sizeof *a);
  a[0] = (nt_io_array){.name = "w.f32", .dtype = NT_IO_F32, .ndim = 2, .shape = {2, 3}, .data = f32v, .nbytes = 24};
  a[1] = (nt_io_array){.name = "idx", .dtype = NT_IO_I64, .ndim = 1, .shape = {4}, .data = i64v, .nbytes = 32};
  a[2] = (nt_io_array){.name = "scalar_u8", .dtype = NT_IO_U8, .ndim = 0, .data = u8v, .nbytes = 1};
  a[3] = (nt_io_array){.name = "empty", .dtype = NT_IO_F32, .ndim = 2, .shape = {0, 3}, .data = NULL, .nbytes = 0};
  a[4] = (nt_io_array){.name = "cube", .dtype = NT_IO_F64, .ndim = 3, .shape = {2, 2, 2}, .data = f64v, .nbytes = 64};
  a[5] = (nt_io_array){.name = "b", .dtype = NT_IO_BF16, .ndim = 1, .shape = {2}, .data = bf16v, .nbytes = 4};
}

/* Compares a loaded set against the sample; returns an error string or NULL. */
static const char *same_as_sample(const nt_io_set *s) {
  static char why[256];
  nt_io_array a[6];
  sample(a);
  if (s->n != 6) { snprintf(why, sizeof why, "n = %zu", s->n); return why; }
  for (int i = 0; i < 6; i++) {
    const nt_io_array *g = nt_io_set_find(s, a[i].name);
    if (!g) { snprintf(why, sizeof why, "missing %s", a[i].name); return why; }
    if (g->dtype != a[i].dtype || g->ndim != a[i].ndim || g->nbytes != a[i].nbytes ||
        memcmp(g->shape, a[i].shape, sizeof(int64_t) * (size_t)a[i].ndim) ||
        (a[i].nbytes && memcmp(g->data, a[i].data, a[i].nbytes))) {
      snprintf(why, sizeof why, "%s differs", a[i].name); return why;
    }
    if ((uintptr_t)g->data % nt_io_dtype_size(g->dtype)) {
      snprintf(why, sizeof why, "%s misaligned", a[i].name); return why;
    }
  }
  return NULL;
}

static void t_roundtrip_file(void) {
  nt_io_array a[6];
  sample(a);
  const char *mk[] = {"format", "note"}, *mv[] = {"pt", "héllo"};
  const char *p = tn_path("rt.safetensors");
  CHECK(nt_st_save(p, a, 6, mk, mv, 2) == 0, "save: %s", nt_io_error());
  nt_io_set *s = nt_st_load(p);
  CHECK(s, "load: %s", nt_io_error());
  const char *why = same_as_sample(s);
  int nm = (int)s->nmeta;
  const char *fmt = nt_io_set_meta(s, "format"), *note = nt_io_set_meta(s, "note");
  int ok_meta = nm == 2 && fmt && !strcmp(fmt, "pt") && note && !strcmp(note, "héllo");
  /* layout: biggest element size first, so 8-byte tensors come first */
  int order_ok = s->arrays[0].dtype == NT_IO_F64 || s->arrays[0].dtype == NT_IO_I64;
  nt_io_set_free(s);
  CHECK(!why, "%s", why);
  CHECK(ok_meta, "metadata wrong");
  CHECK(order_ok, "first tensor should be 8-byte");
}

static void t_roundtrip_buffer(void) {
  nt_io_array a[6];
  sample(a);
  size_t len;
  unsigned char *buf = nt_st_serialize(a, 6, NULL, NULL, 0, &len);
  CHECK(buf, "serialize: %s", nt_io_error());
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
  int aligned = hl % 8 == 0 && buf[8] == '{' && !memchr(buf + 8, '\n', hl);
  nt_io_set *s = nt_st_parse(buf, len, "<buf>");
  free(buf);
  CHECK(aligned, "header not padded to 8 bytes");
  CHECK(s, "parse: %s", nt_io_error());
  const char *why = same_as_sample(s);
  int nm = (int)s->nmeta;
  nt_io_set_free(s);
  CHECK(!why, "%s", why);
  CHECK(nm == 0, "unexpected metadata");
}

/* Builds an image from a header string and data bytes (length field given
** explicitly when hl_override != UINT64_MAX). */
static unsigned char *mk_image(const char *hdr, const void *data, size_t dlen, uint64_t hl_override, size_t *len) {
  size_t hl = strlen(hdr);
  unsigned char *b = malloc(8 + hl + dlen);
  uint64_t v = hl_override == UINT64_MAX ? hl : hl_override;
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  memcpy(b + 8, hdr, hl);
  if (dlen) memcpy(b + 8 + hl, data, dlen);
  *len = 8 + hl + dlen;
  return b;
}

static void t_reference_image(void) {
  /* written by hand from the spec: two tensors, no padding needed by the reader */
  float d[3] = {1.5f, -2, 0.25f};
  int32_t e[2] = {7, -9};
  unsigned char data[20];
  memcpy(data, e, 8); memcpy(data + 8, d, 12);
  size_t len;
  unsigned char *img = mk_image("{\"__metadata__\":{\"k\":\"v\"},"
                                "\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]},"
                                "\"e\":{\"dtype\":\"I32\",\"shape\":[1,2],\"data_offsets\":[0,8]}}  ",
                                data, 20, UINT64_MAX, &len);
  nt_io_set *s = nt_st_parse_take(img, len, "ref");
  CHECK(s, "%s", nt_io_error());
  const nt_io_array *x = nt_io_set_find(s, "x"), *y = nt_io_set_find(s, "e");
  int ok = x && y && x->ndim == 1 && x->shape[0] == 3 && ((float *)x->data)[0] == 1.5f &&
           ((float *)x->data)[2] == 0.25f && y->ndim == 2 && y->shape[1] == 2 &&
           ((int32_t *)y->data)[1] == -9 && s->arrays[0].name[0] == 'e';
  const char *m = nt_io_set_meta(s, "k");
  ok = ok && m && !strcmp(m, "v");
  nt_io_set_free(s);
  CHECK(ok, "values wrong");
}

/* Every malformed header must be rejected with a message containing `want`. */
static void t_corrupt(void) {
  static const struct { const char *hdr; size_t dlen; const char *want; } cases[] = {
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "bad JSON"},
    {"[1,2]", 0, "not start with '{'"},
    {"{\"a\":{\"dtype\":\"Q8\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unsupported dtype"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "truncated"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets"},
    {"{\"a\":3}", 0, "not an object"},
    {"{\"__metadata__\":{\"k\":1}}", 0, "not a string"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "too large"},
  };
  unsigned char zeros[16] = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len;
    unsigned char *img = mk_image(cases[i].hdr, zeros, cases[i].dlen, UINT64_MAX, &len);
    nt_io_set *s = nt_st_parse_take(img, len, "bad.safetensors");
    if (s) nt_io_set_free(s);
    CHECK(!s, "case %zu accepted", i);
    CHECK(strstr(nt_io_error(), cases[i].want) && strstr(nt_io_error(), "bad.safetensors"),
          "case %zu: message '%s' lacks '%s'", i, nt_io_error(), cases[i].want);
  }
  /* length field problems */
  size_t len;
  unsigned char *img = mk_image("{}", NULL, 0, 1000, &len);
  nt_io_set *s = nt_st_parse_take(img, len, "x");
  CHECK(!s && strstr(nt_io_error(), "exceeds the file size"), "huge header length: %s", nt_io_error());
  s = nt_st_parse("abc", 3, "x");
  CHECK(!s && strstr(nt_io_error(), "too short"), "short: %s", nt_io_error());
  s = nt_st_load(tn_path("does-not-exist.safetensors"));
  CHECK(!s && strstr(nt_io_error(), "cannot open"), "missing file: %s", nt_io_error());
}

/* Every proper prefix of a valid image, and single-byte corruptions of it,
** must be rejected or parsed cleanly (ASan/UBSan catch any misstep). */
static void t_truncations_and_flips(void) {
  nt_io_array a[6];
  sample(a);
  size_t len;
  unsigned char *buf = nt_st_serialize(a, 6, NULL, NULL, 0, &len);
  CHECK(buf, "%s", nt_io_error());
  for (size_t k = 0; k < len; k++) {
    nt_io_set *s = nt_st_parse(buf, k, "trunc");
    if (s) { nt_io_set_free(s); free(buf); CHECK(0, "prefix of %zu/%zu bytes accepted", k, len); }
  }
  for (int it = 0; it < 2000; it++) {
    unsigned char *c = malloc(len);
    memcpy(c, buf, len);
    size_t pos = (size_t)(tn_urand() * (double)len);
    c[pos] = (unsigned char)(tn_urand() * 256);
    nt_io_set_free(nt_st_parse_take(c, len, "flip"));
  }
  free(buf);
}

static void t_writer_errors_atomic(void) {
  nt_io_array a[2];
  memset(a, 0, sizeof a);
  float v[2] = {1, 2};
  a[0] = (nt_io_array){.name = "x", .dtype = NT_IO_F32, .ndim = 1, .shape = {2}, .data = v, .nbytes = 8};
  a[1] = a[0];
  const char *p = tn_path("w.safetensors");
  CHECK(nt_st_save(p, a, 2, NULL, NULL, 0) < 0 && strstr(nt_io_error(), "duplicate"), "dup: %s", nt_io_error());
  a[1].name = "__metadata__";
  CHECK(nt_st_save(p, a, 2, NULL, NULL, 0) < 0 && strstr(nt_io_error(), "reserved"), "reserved: %s", nt_io_error());
  a[1].name = "y"; a[1].nbytes = 4;
  CHECK(nt_st_save(p, a, 2, NULL, NULL, 0) < 0 && strstr(nt_io_error(), "nbytes"), "nbytes: %s", nt_io_error());
  CHECK(access(p, F_OK) != 0, "failed save left a file");
  CHECK(nt_st_save("/nonexistent-dir/x.safetensors", a, 1, NULL, NULL, 0) < 0 &&
        strstr(nt_io_error(), "cannot write") && strstr(nt_io_error(), "No such file"), "bad dir: %s", nt_io_error());
  /* overwrite an existing file atomically; no temp files left behind */
  CHECK(nt_st_save(p, a, 1, NULL, NULL, 0) == 0, "%s", nt_io_error());
  v[0] = 42;
  CHECK(nt_st_save(p, a, 1, NULL, NULL, 0) == 0, "%s", nt_io_error());
  nt_io_set *s = nt_st_load(p);
  CHECK(s, "%s", nt_io_error());
  float got = ((float *)s->arrays[0].data)[0];
  nt_io_set_free(s);
  CHECK(got == 42, "overwrite not visible");
  DIR *d = opendir(tn_path(""));
  struct dirent *e;
  int tmp_left = 0;
  while (d && (e = readdir(d))) tmp_left |= strstr(e->d_name, ".tmp.") != NULL || strstr(e->d_name, ".nabla-tmp.") != NULL;
  if (d) closedir(d);
  CHECK(!tmp_left, "temp file left behind");
}

const tn_test tn_tests_safetensors[] = {
  {"safetensors_roundtrip_file", t_roundtrip_file},
  {"safetensors_roundtrip_buffer", t_roundtrip_buffer},
  {"safetensors_reference_image", t_reference_image},
  {"safetensors_corrupt_headers", t_corrupt},
  {"safetensors_truncations_and_flips", t_truncations_and_flips},
  {"safetensors_writer_errors_atomic", t_writer_errors_atomic},
  {NULL, NULL},
};
