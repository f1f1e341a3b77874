/* test_npy.c — .npy round-trips per dtype, hand-written headers (v1/v2/v3,
** Fortran order, big-endian), .npz archives built here with STORED and
** DEFLATED members, and corrupt/truncated inputs of each. */
#include "tn.h"
#include "tensor/io/npy.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static void t_npy_roundtrip(void) {
  float f[6] = {1, 2, 3, 4, 5, 6};
  double d = -7.25;
  int32_t i4[5] = {1, -1, 2, -2, 0x7fffffff};
  int64_t i8[4] = {INT64_MIN, 0, 1, INT64_MAX};
  uint8_t u1[3] = {0, 128, 255}, b1[4] = {1, 0, 0, 1};
  uint16_t h[2] = {0x3c00, 0xc000};
  nt_io_array cases[] = {
    {.name = "f", .dtype = NT_IO_F32, .ndim = 2, .shape = {2, 3}, .data = f, .nbytes = 24},
    {.name = "d", .dtype = NT_IO_F64, .ndim = 0, .data = &d, .nbytes = 8},
    {.name = "i4", .dtype = NT_IO_I32, .ndim = 1, .shape = {5}, .data = i4, .nbytes = 20},
    {.name = "i8", .dtype = NT_IO_I64, .ndim = 2, .shape = {2, 2}, .data = i8, .nbytes = 32},
    {.name = "u1", .dtype = NT_IO_U8, .ndim = 1, .shape = {3}, .data = u1, .nbytes = 3},
    {.name = "b1", .dtype = NT_IO_BOOL, .ndim = 3, .shape = {1, 2, 2}, .data = b1, .nbytes = 4},
    {.name = "h", .dtype = NT_IO_F16, .ndim = 1, .shape = {2}, .data = h, .nbytes = 4},
    {.name = "e", .dtype = NT_IO_F32, .ndim = 2, .shape = {0, 4}, .data = NULL, .nbytes = 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const nt_io_array *a = &cases[i];
    const char *p = tn_path("rt.npy");
    CHECK(nt_npy_save(p, a) == 0, "%s: save: %s", a->name, nt_io_error());
    nt_io_set *s = nt_npy_load(p);
    CHECK(s, "%s: load: %s", a->name, nt_io_error());
    const nt_io_array *g = &s->arrays[0];
    int ok = s->n == 1 && g->dtype == a->dtype && g->ndim == a->ndim && g->nbytes == a->nbytes &&
             !memcmp(g->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim) &&
             (!a->nbytes || !memcmp(g->data, a->data, a->nbytes));
    nt_io_set_free(s);
    CHECK(ok, "%s: round trip differs", a->name);
    size_t len;
    unsigned char *img = nt_npy_serialize(a, &len);
    CHECK(img, "%s", nt_io_error());
    int aligned = (len - a->nbytes) % 64 == 0 && img[len - a->nbytes - 1] == '\n';
    free(img);
    CHECK(aligned, "%s: header not 64-byte aligned", a->name);
  }
  uint16_t bf[1] = {0};
  nt_io_array bad = {.name = "bf", .dtype = NT_IO_BF16, .ndim = 1, .shape = {1}, .data = bf, .nbytes = 2};
  CHECK(nt_npy_save(tn_path("bf.npy"), &bad) < 0 && strstr(nt_io_error(), "no NumPy"), "bf16: %s", nt_io_error());
}

/* Builds a .npy image with a given version, header dict and data. */
static unsigned char *mk_npy(int major, const char *dict, const void *data, size_t dlen, size_t *len) {
  size_t dl = strlen(dict), pre = major == 1 ? 10 : 12;
  unsigned char *b = malloc(pre + dl + dlen + 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major; b[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) b[8 + i] = (unsigned char)(dl >> (8 * i));
  memcpy(b + pre, dict, dl);
  if (dlen) memcpy(b + pre + dl, data, dlen);
  *len = pre + dl + dlen;
  return b;
}

static void t_npy_headers(void) {
  size_t len;
  /* Fortran order, shape (2,3): memory holds columns [a00 a10 a01 a11 a02 a12] */
  float fo[6] = {0, 10, 1, 11, 2, 12};
  unsigned char *b = mk_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", fo, 24, &len);
  nt_io_set *s = nt_npy_parse(b, len, "fo");
  free(b);
  CHECK(s, "fortran: %s", nt_io_error());
  float want[6] = {0, 1, 2, 10, 11, 12};
  int ok = !memcmp(s->arrays[0].data, want, 24);
  nt_io_set_free(s);
  CHECK(ok, "fortran order not transposed to C order");
  /* 3-D Fortran: element (i,j,k) at i + 2j + 6k for shape (2,3,4) */
  float f3[24], w3[24];
  for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) for (int k = 0; k < 4; k++) {
    f3[i + 2 * j + 6 * k] = (float)(100 * i + 10 * j + k);
    w3[(i * 3 + j) * 4 + k] = (float)(100 * i + 10 * j + k);
  }
  b = mk_npy(2, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4)}", f3, 96, &len);
  s = nt_npy_parse(b, len, "f3");
  free(b);
  CHECK(s, "fortran3: %s", nt_io_error());
  ok = !memcmp(s->arrays[0].data, w3, 96);
  nt_io_set_free(s);
  CHECK(ok, "3-D fortran transpose wrong");
  /* big-endian int32, v3 header, double-quoted strings */
  unsigned char be[8] = {0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe};
  b = mk_npy(3, "{\"descr\": \">i4\", \"fortran_order\": False, \"shape\": (2,)}", be, 8, &len);
  s = nt_npy_parse(b, len, "be");
  free(b);
  CHECK(s, "big-endian: %s", nt_io_error());
  int32_t *v = s->arrays[0].data;
  ok = v[0] == 258 && v[1] == -2;
  nt_io_set_free(s);
  CHECK(ok, "big-endian not swapped");

  static const struct { const char *dict; size_t dlen; const char *want; } bad[] = {
    {"{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8, "unsupported dtype"},
    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4, "structured"},
    {"{'descr': '<f4', 'shape': (1,), }", 4, "fortran_order"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8, "truncated"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8, "trailing"},
    {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", 4, "True/False"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1 2), }", 4, "shape"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", 4, "too large"},
    {"['descr']", 0, "not a dict"},
  };
  unsigned char zeros[8] = {0};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    b = mk_npy(1, bad[i].dict, zeros, bad[i].dlen, &len);
    s = nt_npy_parse(b, len, "bad.npy");
    free(b);
    if (s) nt_io_set_free(s);
    CHECK(!s, "case %zu accepted", i);
    CHECK(strstr(nt_io_error(), bad[i].want) && strstr(nt_io_error(), "bad.npy"),
          "case %zu: '%s' lacks '%s'", i, nt_io_error(), bad[i].want);
  }
  CHECK(!nt_npy_parse("\x93NUMPZ\1\0\0\0", 10, "m") && strstr(nt_io_error(), "magic"), "magic: %s", nt_io_error());
  b = mk_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", zeros, 4, &len);
  b[6] = 9;
  s = nt_npy_parse(b, len, "v");
  free(b);
  CHECK(!s && strstr(nt_io_error(), "version"), "version: %s", nt_io_error());
}

static void t_npy_truncations(void) {
  double d[5] = {1, 2, 3, 4, 5};
  nt_io_array a = {.name = "x", .dtype = NT_IO_F64, .ndim = 1, .shape = {5}, .data = d, .nbytes = 40};
  size_t len;
  unsigned char *img = nt_npy_serialize(&a, &len);
  CHECK(img, "%s", nt_io_error());
  for (size_t k = 0; k < len; k++) {
    nt_io_set *s = nt_npy_parse(img, k, "t");
    if (s) { nt_io_set_free(s); free(img); CHECK(0, "prefix %zu accepted", k); }
  }
  for (int it = 0; it < 2000; it++) {
    unsigned char c[256];
    memcpy(c, img, len);
    c[(size_t)(tn_urand() * (double)(len - 40))] = (unsigned char)(tn_urand() * 256);  /* header bytes */
    nt_io_set_free(nt_npy_parse(c, len, "flip"));
  }
  free(img);
}

/* ---- a minimal zip writer (test-only) --------------------------------------- */
typedef struct zmem { const char *name; const void *data; size_t len; int deflate; } zmem;

static void put16(unsigned char **p, unsigned v) { (*p)[0] = (unsigned char)v; (*p)[1] = (unsigned char)(v >> 8); *p += 2; }
static void put32(unsigned char **p, uint32_t v) { put16(p, v & 0xffff); put16(p, v >> 16); }

static unsigned char *mk_zip(const zmem *m, int n, size_t *len) {
  unsigned char *out = malloc(1 << 16), *p = out;
  uint32_t offs[16], crcs[16], cs[16];
  unsigned char *cdata[16];
  for (int i = 0; i < n; i++) {
    crcs[i] = (uint32_t)crc32(0, m[i].data, (uInt)m[i].len);
    if (m[i].deflate) {
      cdata[i] = malloc(compressBound((uLong)m[i].len) + 64);
      z_stream z = {0};
      deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
      z.next_in = (Bytef *)m[i].data; z.avail_in = (uInt)m[i].len;
      z.next_out = cdata[i]; z.avail_out = (uInt)compressBound((uLong)m[i].len) + 64;
      deflate(&z, Z_FINISH);
      cs[i] = (uint32_t)z.total_out;
      deflateEnd(&z);
    } else { cdata[i] = malloc(m[i].len + 1); memcpy(cdata[i], m[i].data, m[i].len); cs[i] = (uint32_t)m[i].len; }
    offs[i] = (uint32_t)(p - out);
    size_t nl = strlen(m[i].name);
    put32(&p, 0x04034b50); put16(&p, 20); put16(&p, 0); put16(&p, m[i].deflate ? 8 : 0);
    put16(&p, 0); put16(&p, 0); put32(&p, crcs[i]); put32(&p, cs[i]); put32(&p, (uint32_t)m[i].len);
    put16(&p, (unsigned)nl); put16(&p, 0);
    memcpy(p, m[i].name, nl); p += nl;
    memcpy(p, cdata[i], cs[i]); p += cs[i];
  }
  unsigned char *cd = p;
  for (int i = 0; i < n; i++) {
    size_t nl = strlen(m[i].name);
    put32(&p, 0x02014b50); put16(&p, 20); put16(&p, 20); put16(&p, 0); put16(&p, m[i].deflate ? 8 : 0);
    put16(&p, 0); put16(&p, 0); put32(&p, crcs[i]); put32(&p, cs[i]); put32(&p, (uint32_t)m[i].len);
    put16(&p, (unsigned)nl); put16(&p, 0); put16(&p, 0); put16(&p, 0); put16(&p, 0); put32(&p, 0);
    put32(&p, offs[i]);
    memcpy(p, m[i].name, nl); p += nl;
    free(cdata[i]);
  }
  uint32_t cdsize = (uint32_t)(p - cd), cdoff = (uint32_t)(cd - out);
  put32(&p, 0x06054b50); put16(&p, 0); put16(&p, 0); put16(&p, (unsigned)n); put16(&p, (unsigned)n);
  put32(&p, cdsize); put32(&p, cdoff); put16(&p, 0);
  *len = (size_t)(p - out);
  return out;
}

static void t_npz(void) {
  float f[4] = {1, 2, 3, 4};
  int64_t i8[3] = {5, 6, 7};
  nt_io_array a = {.name = "a", .dtype = NT_IO_F32, .ndim = 2, .shape = {2, 2}, .data = f, .nbytes = 16};
  nt_io_array b = {.name = "b", .dtype = NT_IO_I64, .ndim = 1, .shape = {3}, .data = i8, .nbytes = 24};
  size_t la, lb, lz;
  unsigned char *na = nt_npy_serialize(&a, &la), *nb = nt_npy_serialize(&b, &lb);
  CHECK(na && nb, "%s", nt_io_error());
  for (int mode = 0; mode < 2; mode++) {
    zmem m[2] = {{"a.npy", na, la, mode}, {"b.npy", nb, lb, !mode}};
    unsigned char *z = mk_zip(m, 2, &lz);
    nt_io_set *s = nt_npz_parse(z, lz, "t.npz");
    if (!s) { free(z); free(na); free(nb); CHECK(0, "mode %d: %s", mode, nt_io_error()); }
    const nt_io_array *ga = nt_io_set_find(s, "a"), *gb = nt_io_set_find(s, "b");
    int ok = s->n == 2 && ga && gb && !strcmp(s->arrays[0].name, "a") && ga->shape[1] == 2 &&
             !memcmp(ga->data, f, 16) && gb->dtype == NT_IO_I64 && !memcmp(gb->data, i8, 24);
    nt_io_set_free(s);
    /* truncations: every prefix fails cleanly */
    int bad_prefix = -1;
    for (size_t k = 0; k < lz && bad_prefix < 0; k++) {
      nt_io_set *t = nt_npz_parse(z, k, "t");
      if (t) { nt_io_set_free(t); bad_prefix = (int)k; }
    }
    /* a flipped data byte must be caught by the CRC (or inflate) */
    z[40] ^= 0x55;
    nt_io_set *c = nt_npz_parse(z, lz, "crc.npz");
    int crc_caught = !c && (strstr(nt_io_error(), "CRC") || strstr(nt_io_error(), "deflate"));
    nt_io_set_free(c);
    for (int it = 0; it < 1000; it++) {
      unsigned char *cz = malloc(lz);
      memcpy(cz, z, lz);
      cz[(size_t)(tn_urand() * (double)lz)] = (unsigned char)(tn_urand() * 256);
      nt_io_set_free(nt_npz_parse(cz, lz, "flip"));
      free(cz);
    }
    free(z);
    if (!ok || bad_prefix >= 0 || !crc_caught) { free(na); free(nb); }
    CHECK(ok, "mode %d: values differ", mode);
    CHECK(bad_prefix < 0, "mode %d: prefix %d accepted", mode, bad_prefix);
    CHECK(crc_caught, "mode %d: corruption not caught: %s", mode, nt_io_error());
  }
  /* non-.npy member, garbage, missing file */
  zmem m[1] = {{"readme.txt", "hi", 2, 0}};
  unsigned char *z = mk_zip(m, 1, &lz);
  nt_io_set *s = nt_npz_parse(z, lz, "t.npz");
  free(z); free(na); free(nb);
  CHECK(!s && strstr(nt_io_error(), "not a .npy"), "txt member: %s", nt_io_error());
  CHECK(!nt_npz_parse("PK\3\4 hello this is not a zip file at all", 40, "g") &&
        strstr(nt_io_error(), "end-of-central-directory"), "garbage: %s", nt_io_error());
  CHECK(!nt_npz_load(tn_path("nope.npz")) && strstr(nt_io_error(), "cannot open"), "missing: %s", nt_io_error());
}

const tn_test tn_tests_npy[] = {
  {"npy_roundtrip_dtypes", t_npy_roundtrip},
  {"npy_headers_fortran_bigendian_bad", t_npy_headers},
  {"npy_truncations_and_flips", t_npy_truncations},
  {"npz_stored_deflated_corrupt", t_npz},
  {NULL, NULL},
};
