/*
** npy.c — .npy read/write (see npy.h).  The header is a Python dict literal,
** parsed by the small (iterative) reader below (strings, True/False, int tuples
** only: exactly what NumPy writes).
*/
#include "npy.h"
#include "iointernal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- header dict literal ---------------------------------------------------- */
typedef struct hp { const char *p, *end; } hp;

static void ws(hp *h) { while (h->p < h->end && isspace((unsigned char)*h->p)) h->p++; }
static bool eat(hp *h, char c) { ws(h); if (h->p < h->end && *h->p == c) { h->p++; return true; } return false; }

/* 'text' or "text" into out[cap]; false on syntax error */
static bool pystr(hp *h, char *out, size_t cap) {
  ws(h);
  if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return false;
  char q = *h->p++;
  size_t n = 0;
  while (h->p < h->end && *h->p != q) {
    if (n + 1 >= cap) return false;
    out[n++] = *h->p++;
  }
  if (h->p >= h->end) return false;
  h->p++;
  out[n] = 0;
  return true;
}

static bool pyint(hp *h, int64_t *v) {
  ws(h);
  const char *s = h->p;
  int64_t x = 0;
  while (h->p < h->end && isdigit((unsigned char)*h->p)) {
    if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *h->p - '0', &x)) return false;
    h->p++;
  }
  if (h->p == s) return false;
  if (h->p < h->end && *h->p == 'L') h->p++;     /* Python 2 long suffix */
  *v = x;
  return true;
}

static bool pyword(hp *h, const char *w) {
  ws(h);
  size_t n = strlen(w);
  if ((size_t)(h->end - h->p) >= n && memcmp(h->p, w, n) == 0) { h->p += n; return true; }
  return false;
}

/* The narrow integer types NumPy has and the tensor core does not are widened
** on read to the smallest type that holds every value exactly: i1, i2, u2 ->
** i32; u4 -> i64; u8 -> i64, refusing a value >= 2^63 (named by its index)
** rather than wrapping it. */
enum { W_NONE, W_I1, W_I2, W_U2, W_U4, W_U8 };
typedef struct elem { size_t size; int wide; } elem;   /* the file's element: bytes, widening */

/* descr like '<f4' -> dtype (the loaded one), the file's element, and
** whether bytes need swapping */
static int parse_descr(const char *d, nt_io_dtype *dt, elem *fe, bool *swap) {
  char order = '=';
  if (*d == '<' || *d == '>' || *d == '=' || *d == '|') order = *d++;
  static const struct { const char *s; nt_io_dtype dt; size_t size; int wide; } map[] = {
    {"f2", NT_IO_F16, 2, W_NONE}, {"f4", NT_IO_F32, 4, W_NONE}, {"f8", NT_IO_F64, 8, W_NONE}, {"i4", NT_IO_I32, 4, W_NONE},
    {"i8", NT_IO_I64, 8, W_NONE}, {"u1", NT_IO_U8, 1, W_NONE}, {"b1", NT_IO_BOOL, 1, W_NONE},
    {"i1", NT_IO_I32, 1, W_I1}, {"i2", NT_IO_I32, 2, W_I2}, {"u2", NT_IO_I32, 2, W_U2},
    {"u4", NT_IO_I64, 4, W_U4}, {"u8", NT_IO_I64, 8, W_U8},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(d, map[i].s) == 0) {
      *dt = map[i].dt;
      fe->size = map[i].size; fe->wide = map[i].wide;
      *swap = order == '>' && map[i].size > 1;   /* we only run on little-endian hosts */
      return 0;
    }
  return -1;
}

/* Parses the dict; fills dtype/shape/fortran/swap.  -1 with message. */
static int parse_header(const char *label, const char *txt, size_t n, nt_io_array *a, elem *fe, bool *fortran, bool *swap) {
  hp h = {txt, txt + n};
  bool have_d = false, have_f = false, have_s = false;
  if (!eat(&h, '{')) return nio_error("npy: '%s': header is not a dict literal", label);
  for (;;) {
    if (eat(&h, '}')) break;
    char key[32], val[64];
    if (!pystr(&h, key, sizeof key) || !eat(&h, ':'))
      return nio_error("npy: '%s': malformed header dict near offset %td", label, h.p - txt);
    if (strcmp(key, "descr") == 0) {
      ws(&h);
      if (h.p < h.end && *h.p == '[')
        return nio_error("npy: '%s': structured dtypes are not supported", label), NIO_UNSUPPORTED;
      if (!pystr(&h, val, sizeof val)) return nio_error("npy: '%s': 'descr' is not a string", label);
      if (parse_descr(val, &a->dtype, fe, swap) != 0)
        return nio_error("npy: '%s': unsupported dtype '%s' (supported: f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1)", label, val), NIO_UNSUPPORTED;
      have_d = true;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (pyword(&h, "True")) *fortran = true;
      else if (pyword(&h, "False")) *fortran = false;
      else return nio_error("npy: '%s': 'fortran_order' is not True/False", label);
      have_f = true;
    } else if (strcmp(key, "shape") == 0) {
      if (!eat(&h, '(')) return nio_error("npy: '%s': 'shape' is not a tuple", label);
      a->ndim = 0;
      while (!eat(&h, ')')) {
        if (a->ndim >= NT_IO_MAX_DIMS)
          return nio_error("npy: '%s': more than %d dimensions", label, NT_IO_MAX_DIMS);
        if (!pyint(&h, &a->shape[a->ndim]))
          return nio_error("npy: '%s': bad dimension in 'shape'", label);
        a->ndim++;
        if (!eat(&h, ',') && !(ws(&h), h.p < h.end && *h.p == ')'))
          return nio_error("npy: '%s': malformed 'shape' tuple", label);
      }
      have_s = true;
    } else {
      return nio_error("npy: '%s': unexpected header key '%s'", label, key);
    }
    if (!eat(&h, ',')) { if (!eat(&h, '}')) return nio_error("npy: '%s': malformed header dict", label); break; }
  }
  if (!have_d || !have_f || !have_s)
    return nio_error("npy: '%s': header lacks '%s'", label, !have_d ? "descr" : !have_f ? "fortran_order" : "shape");
  return 0;
}

/* The preamble and header dict of a .npy image whose first n bytes are b and
** whose whole size is `size`: fills a's dtype and shape, *fortran, *swap and
** the data's start and byte count, and checks that the data fills the rest
** exactly.  Needs only the preamble and header, so a file is checked before
** it is read whole. */
static int check_preamble(const unsigned char *b, size_t n, uint64_t size, const char *label, nt_io_array *a,
                          elem *fe, bool *fortran, bool *swap, size_t *dstart, size_t *need) {
  size_t hl, hstart;
  if (size < 10 || n < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
    return nio_error("npy: '%s': not a .npy file (bad magic or shorter than 10 bytes)", label);
  int major = b[6];
  if (major == 1) { hl = b[8] | (size_t)b[9] << 8; hstart = 10; }
  else if (major == 2 || major == 3) {
    if (size < 12 || n < 12) return nio_error("npy: '%s': truncated header", label);
    hl = b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    hstart = 12;
  } else return nio_error("npy: '%s': unsupported format version %d.%d", label, major, b[7]);
  if (hl > size - hstart)
    return nio_error("npy: '%s': header length %zu exceeds the file size (%llu bytes); truncated file?", label, hl, (unsigned long long)size);
  if (hl > n - hstart)   /* a header longer than what the caller read first: checked once the file is read */
    return 1;
  int rc = parse_header(label, (const char *)b + hstart, hl, a, fe, fortran, swap);
  if (rc != 0) return rc;
  size_t es = fe->size;
  int64_t numel = nt_io_numel(a->ndim, a->shape);
  if (numel < 0 || !nio_mul_ok((size_t)numel, es, need))
    return nio_error("npy: '%s': shape is too large", label);
  *dstart = hstart + hl;
  uint64_t have = size - *dstart;
  if (have < *need)
    return nio_error("npy: '%s': truncated: data needs %zu bytes, file has %llu", label, *need, (unsigned long long)have);
  if (have > *need)
    return nio_error("npy: '%s': %llu unexpected trailing bytes after the data", label, (unsigned long long)(have - *need));
  return 0;
}
static int check_file_head(const unsigned char *head, size_t n, uint64_t size, const char *path) {
  nt_io_array a; elem fe; bool fortran = false, swap = false; size_t dstart, need;
  memset(&a, 0, sizeof a);
  return check_preamble(head, n, size, path, &a, &fe, &fortran, &swap, &dstart, &need) < 0 ? -1 : 0;
}

/* ---- decode ------------------------------------------------------------------
** Takes ownership of buf (malloc'd).  On success a->owned_ is buf (data
** aliasing into it when aligned) or a fresh buffer; on failure buf is freed. */
/* widens the n file elements at src (fe) into dst (the loaded dtype) */
static int widen(const unsigned char *src, size_t n, int wide, void *dst, const char *label) {
  int32_t *d32 = dst; int64_t *d64 = dst;
  for (size_t i = 0; i < n; i++) {
    switch (wide) {
    case W_I1: d32[i] = (int8_t)src[i]; break;
    case W_I2: { int16_t v; memcpy(&v, src + 2 * i, 2); d32[i] = v; break; }
    case W_U2: { uint16_t v; memcpy(&v, src + 2 * i, 2); d32[i] = v; break; }
    case W_U4: { uint32_t v; memcpy(&v, src + 4 * i, 4); d64[i] = v; break; }
    case W_U8: {
      uint64_t v; memcpy(&v, src + 8 * i, 8);
      if (v > (uint64_t)INT64_MAX)
        return nio_error("npy: '%s': u8 value %llu at flat index %zu does not fit the i64 it is loaded as", label, (unsigned long long)v, i);
      d64[i] = (int64_t)v; break;
    }
    }
  }
  return 0;
}

int nio_npy_decode(unsigned char *buf, size_t len, const char *label, nt_io_array *a) {
  bool fortran = false, swap = false;
  size_t dstart = 0, need = 0;
  elem fe = {0, W_NONE};
  int rc = check_preamble(buf, len, len, label, a, &fe, &fortran, &swap, &dstart, &need);
  if (rc != 0) { free(buf); return rc < 0 ? rc : -1; }
  size_t es = fe.size;
  int64_t numel = nt_io_numel(a->ndim, a->shape);
  a->nbytes = need;
  unsigned char *src = buf + dstart;

  if (!fortran || a->ndim < 2) {
    if ((uintptr_t)src % es == 0) { a->owned_ = buf; a->data = src; }
    else {
      a->owned_ = nio_malloc(need ? need : 1);
      if (!a->owned_) goto fail;
      memcpy(a->owned_, src, need);
      a->data = a->owned_;
      free(buf);
    }
  } else {
    /* Fortran order: element (i0..in-1) lives at sum_k i_k * fs_k with fs_0 = 1,
    ** fs_k = fs_{k-1} * d_{k-1}.  Walk the C-order index like an odometer,
    ** adjusting the Fortran offset incrementally. */
    unsigned char *dst = nio_malloc(need ? need : 1);
    if (!dst) goto fail;
    int64_t idx[NT_IO_MAX_DIMS] = {0}, fs[NT_IO_MAX_DIMS];
    fs[0] = 1;
    for (int k = 1; k < a->ndim; k++) fs[k] = fs[k - 1] * a->shape[k - 1];
    int64_t off = 0;
    for (int64_t i = 0; i < numel; i++) {
      memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
      for (int k = a->ndim - 1; k >= 0; k--) {
        if (++idx[k] < a->shape[k]) { off += fs[k]; break; }
        off -= fs[k] * (a->shape[k] - 1);
        idx[k] = 0;
      }
    }
    a->owned_ = dst; a->data = dst;
    free(buf);
  }
  if (swap) {
    unsigned char *d = a->data;
    for (size_t i = 0; i < need; i += es)
      for (size_t j = 0; j < es / 2; j++) {
        unsigned char t = d[i + j]; d[i + j] = d[i + es - 1 - j]; d[i + es - 1 - j] = t;
      }
  }
  if (fe.wide != W_NONE) {
    size_t ts = nt_io_dtype_size(a->dtype), tn;
    if (!nio_mul_ok((size_t)numel, ts, &tn)) { nio_error("npy: '%s': shape is too large", label); goto fail_owned; }
    void *w = nio_malloc(tn ? tn : 1);
    if (!w) goto fail_owned;
    if (widen(a->data, (size_t)numel, fe.wide, w, label)) { free(w); goto fail_owned; }
    free(a->owned_);
    a->owned_ = w; a->data = w; a->nbytes = tn;
  }
  return 0;
fail_owned:
  free(a->owned_); a->owned_ = NULL; a->data = NULL;
  return -1;
fail:
  free(buf);
  return -1;
}

static nt_io_set *single(unsigned char *buf, size_t len, const char *label) {
  nt_io_set *s = nio_calloc(1, sizeof *s);
  nt_io_array *a = nio_calloc(1, sizeof *a);
  char *name = nio_strdup("");
  if (!s || !a || !name) { free(s); free(a); free(name); free(buf); return NULL; }
  if (nio_npy_decode(buf, len, label, a) != 0) { free(s); free(a); free(name); return NULL; }
  a->name = name;
  s->arrays = a; s->n = 1;
  return s;
}

nt_io_set *nt_npy_load(const char *path) {
  size_t len;
  unsigned char *buf = nio_read_file("npy", path, &len, check_file_head);
  return buf ? single(buf, len, path) : NULL;
}

nt_io_set *nt_npy_parse(const void *buf, size_t len, const char *label) {
  unsigned char *c = nio_malloc(len);
  if (!c) return NULL;
  memcpy(c, buf, len);
  return single(c, len, label ? label : "<buffer>");
}

/* ---- write --------------------------------------------------------------------- */
static const char *npy_descr(nt_io_dtype dt) {
  switch (dt) {
  case NT_IO_F32: return "<f4"; case NT_IO_F64: return "<f8"; case NT_IO_F16: return "<f2";
  case NT_IO_I32: return "<i4"; case NT_IO_I64: return "<i8"; case NT_IO_U8: return "|u1";
  case NT_IO_BOOL: return "|b1"; default: return NULL;
  }
}

/* Builds the preamble (magic..header) into a malloc'd buffer of *plen bytes. */
static unsigned char *npy_preamble(const nt_io_array *a, size_t *plen) {
  const char *d = npy_descr(a->dtype);
  if (!d) { nio_error("npy: '%s': dtype %s has no NumPy equivalent", a->name ? a->name : "", nt_io_dtype_name(a->dtype)); return NULL; }
  if (a->ndim < 0 || a->ndim > NT_IO_MAX_DIMS) { nio_error("npy: bad ndim %d", a->ndim); return NULL; }
  int64_t numel = nt_io_numel(a->ndim, a->shape);
  size_t need;
  if (numel < 0 || !nio_mul_ok((size_t)numel, nt_io_dtype_size(a->dtype), &need) || need != a->nbytes) {
    nio_error("npy: nbytes %zu does not match shape x %s", a->nbytes, nt_io_dtype_name(a->dtype));
    return NULL;
  }
  char dict[64 + 24 * NT_IO_MAX_DIMS];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", d);
  for (int i = 0; i < a->ndim; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, i ? ", %lld" : "%lld", (long long)a->shape[i]);
  n += snprintf(dict + n, sizeof dict - (size_t)n, a->ndim == 1 ? ",), }" : "), }");
  /* pad with spaces + '\n' so magic+len+header is a multiple of 64 (NumPy >= 1.? convention) */
  size_t total = (10 + (size_t)n + 1 + 63) & ~(size_t)63;
  unsigned char *p = nio_malloc(total);
  if (!p) return NULL;
  memcpy(p, "\x93NUMPY\x01\x00", 8);
  size_t hl = total - 10;
  p[8] = (unsigned char)hl; p[9] = (unsigned char)(hl >> 8);
  memcpy(p + 10, dict, (size_t)n);
  memset(p + 10 + n, ' ', hl - (size_t)n - 1);
  p[total - 1] = '\n';
  *plen = total;
  return p;
}

void *nt_npy_serialize(const nt_io_array *a, size_t *out_len) {
  size_t pl;
  unsigned char *p = npy_preamble(a, &pl);
  if (!p) return NULL;
  unsigned char *out = nio_malloc(pl + a->nbytes);
  if (out) {
    memcpy(out, p, pl);
    if (a->nbytes) memcpy(out + pl, a->data, a->nbytes);
    *out_len = pl + a->nbytes;
  }
  free(p);
  return out;
}

int nt_npy_save(const char *path, const nt_io_array *a) {
  size_t pl;
  unsigned char *p = npy_preamble(a, &pl);
  if (!p) return -1;
  struct iovec iov[2] = {{p, pl}, {a->data, a->nbytes}};
  int rc = nio_atomic_writev("npy", path, iov, 2);
  free(p);
  return rc;
}
