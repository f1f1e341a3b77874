/*
** safetensors.c — see safetensors.h for the format.
**
** Reading: the header is read and checked first (nt_st_load: its JSON and
** every offset against the file's size), then the whole file is one malloc'd
** block; arrays point into its data section (8-byte aligned because the
** header is padded), except a tensor whose offset is not a multiple of its
** element size, which gets its own aligned copy so callers can always treat
** `data` as a typed pointer.
*/
#include "safetensors.h"
#include "iointernal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ST_MAX_HEADER ((uint64_t)100 << 20)   /* the reference implementation's limit */

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* The 8-byte header length and the header's first byte against the file's
** size: the checks that need no JSON, made before a file is read whole (a
** 3 GB file whose first bytes declare an impossible header costs nothing). */
static int check_head(const unsigned char *b, size_t n, uint64_t size, const char *label) {
  if (size < 8 || n < 8)
    return nio_error("safetensors: '%s': file is too short (%llu bytes) to hold the 8-byte header length", label, (unsigned long long)size);
  uint64_t hlen = le64(b);
  if (hlen > size - 8)
    return nio_error("safetensors: '%s': header length %llu exceeds the file size (%llu bytes); truncated "
                     "or not a safetensors file", label, (unsigned long long)hlen, (unsigned long long)size);
  if (hlen > ST_MAX_HEADER)
    return nio_error("safetensors: '%s': header length %llu is over the 100 MiB limit", label, (unsigned long long)hlen);
  if (hlen < 2 || (n > 8 && b[8] != '{'))
    return nio_error("safetensors: '%s': header does not start with '{' (not a safetensors file?)", label);
  return 0;
}

typedef struct entry {
  const char *name;
  int dtype, ndim;
  int64_t shape[NT_IO_MAX_DIMS];
  uint64_t begin, end;
} entry;

static int entry_cmp(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* Validates one tensor's header object into *e; returns -1 with a message. */
static int parse_entry(const char *label, const char *name, json_t *v, entry *e) {
  e->name = name;
  if (!json_is_object(v))
    return nio_error("safetensors: '%s': tensor '%s': header entry is not an object", label, name);
  json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
         *off = json_object_get(v, "data_offsets");
  if (!json_is_string(dt))
    return nio_error("safetensors: '%s': tensor '%s': missing or non-string \"dtype\"", label, name);
  e->dtype = nt_io_dtype_from_name(json_string_value(dt));
  if (e->dtype < 0)
    return nio_error("safetensors: '%s': tensor '%s': unsupported dtype \"%s\" "
                     "(supported: F32 F64 F16 BF16 I32 I64 U8 BOOL)", label, name, json_string_value(dt));
  if (!json_is_array(sh))
    return nio_error("safetensors: '%s': tensor '%s': missing or non-array \"shape\"", label, name);
  size_t nd = json_array_size(sh);
  if (nd > NT_IO_MAX_DIMS)
    return nio_error("safetensors: '%s': tensor '%s': %zu dimensions (at most %d supported)",
                     label, name, nd, NT_IO_MAX_DIMS);
  e->ndim = (int)nd;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(sh, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0)
      return nio_error("safetensors: '%s': tensor '%s': shape[%zu] is not a non-negative integer",
                       label, name, i);
    e->shape[i] = json_integer_value(d);
  }
  if (!json_is_array(off) || json_array_size(off) != 2 ||
      !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)) ||
      json_integer_value(json_array_get(off, 0)) < 0 || json_integer_value(json_array_get(off, 1)) < 0)
    return nio_error("safetensors: '%s': tensor '%s': \"data_offsets\" must be [begin, end] "
                     "with non-negative integers", label, name);
  e->begin = (uint64_t)json_integer_value(json_array_get(off, 0));
  e->end = (uint64_t)json_integer_value(json_array_get(off, 1));
  if (e->end < e->begin)
    return nio_error("safetensors: '%s': tensor '%s': data_offsets end %llu < begin %llu",
                     label, name, (unsigned long long)e->end, (unsigned long long)e->begin);
  int64_t numel = nt_io_numel(e->ndim, e->shape);
  size_t bytes;
  if (numel < 0 || !nio_mul_ok((size_t)numel, nt_io_dtype_size(e->dtype), &bytes))
    return nio_error("safetensors: '%s': tensor '%s': shape is too large", label, name);
  if (bytes != e->end - e->begin)
    return nio_error("safetensors: '%s': tensor '%s': data_offsets span %llu bytes but shape x %s "
                     "needs %zu", label, name, (unsigned long long)(e->end - e->begin),
                     nt_io_dtype_name(e->dtype), bytes);
  return 0;
}

static int parse_metadata(const char *label, json_t *m, nt_io_set *s) {
  if (!json_is_object(m))
    return nio_error("safetensors: '%s': \"__metadata__\" is not an object", label);
  size_t n = json_object_size(m);
  s->meta_keys = nio_calloc(n, sizeof(char *));
  s->meta_values = nio_calloc(n, sizeof(char *));
  if (!s->meta_keys || !s->meta_values) return -1;
  const char *k; json_t *v;
  json_object_foreach(m, k, v) {
    if (!json_is_string(v))
      return nio_error("safetensors: '%s': __metadata__[\"%s\"] is not a string", label, k);
    s->meta_keys[s->nmeta] = nio_strdup(k);
    s->meta_values[s->nmeta] = nio_strdup(json_string_value(v));
    s->nmeta++;  /* counted before the check so nt_io_set_free frees a partial pair */
    if (!s->meta_keys[s->nmeta - 1] || !s->meta_values[s->nmeta - 1]) return -1;
  }
  return 0;
}

/* The header goes to jansson in 1 MiB pieces so that a huge one (hundreds of
** thousands of tensors: seconds of parsing) can be interrupted in between. */
typedef struct header_feed { const char *p; size_t left; const char *label; bool interrupted; } header_feed;
static size_t feed_header(void *buf, size_t size, void *data) {
  header_feed *f = data;
  if (nio_interrupted("safetensors", f->label)) { f->interrupted = true; return (size_t)-1; }
  size_t n = f->left < size ? f->left : size;
  if (n > ((size_t)1 << 20)) n = (size_t)1 << 20;
  memcpy(buf, f->p, n);
  f->p += n; f->left -= n;
  return n;
}

/* A parsed header: the set (metadata only so far), its tensors sorted by
** offset and checked to tile the data section, and the JSON they point into. */
typedef struct parsed { nt_io_set *s; entry *ents; size_t n; json_t *root; size_t dstart; } parsed;

static void parsed_free(parsed *p) {
  free(p->ents);
  if (p->root) json_decref(p->root);
  nt_io_set_free(p->s);
  memset(p, 0, sizeof *p);
}

/* Parses and checks the header from b (at least its 8 + hlen bytes) against
** a file of `size` bytes: everything but the tensors' bytes, so a file is
** judged before its data is read.  0, or -1 with a message. */
static int parse_header(const unsigned char *b, size_t avail, uint64_t size, const char *label, parsed *out) {
  parsed p = {0};
  if (check_head(b, avail, size, label) != 0) return -1;
  uint64_t hlen = le64(b);
  if (avail < 8 + hlen) return nio_error("safetensors: '%s': truncated header", label);
  json_error_t je;
  header_feed feed = { (const char *)b + 8, hlen, label, false };
  p.root = json_load_callback(feed_header, &feed, JSON_REJECT_DUPLICATES, &je);
  if (!p.root) {
    if (!feed.interrupted)
      nio_error("safetensors: '%s': bad JSON header at byte %d: %s", label, je.position, je.text);
    goto fail;
  }
  if (!json_is_object(p.root)) {
    nio_error("safetensors: '%s': JSON header is not an object", label);
    goto fail;
  }

  p.s = nio_calloc(1, sizeof *p.s);
  if (!p.s) goto fail;
  size_t cap = json_object_size(p.root), n = 0;
  p.ents = nio_calloc(cap, sizeof *p.ents);
  if (!p.ents) goto fail;
  const char *key; json_t *val;
  json_object_foreach(p.root, key, val) {
    if ((n & 1023) == 0 && nio_interrupted("safetensors", label)) goto fail;
    if (strcmp(key, "__metadata__") == 0) {
      if (parse_metadata(label, val, p.s) != 0) goto fail;
      continue;
    }
    if (parse_entry(label, key, val, &p.ents[n]) != 0) goto fail;
    n++;
  }
  p.n = n;

  /* The data section must be tiled exactly: sorted by offset, each tensor
  ** starts where the previous ended, and the last ends at the file's end. */
  p.dstart = 8 + (size_t)hlen;
  const uint64_t dlen = size - p.dstart;
  entry *ents = p.ents;
  qsort(ents, n, sizeof *ents, entry_cmp);
  uint64_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    if (ents[i].begin < pos) {
      nio_error("safetensors: '%s': tensor '%s' (bytes %llu..%llu) overlaps tensor '%s'", label,
                ents[i].name, (unsigned long long)ents[i].begin, (unsigned long long)ents[i].end,
                ents[i - 1].name);
      goto fail;
    }
    if (ents[i].begin > pos) {
      nio_error("safetensors: '%s': gap in the data section before tensor '%s' (bytes %llu..%llu unused)",
                label, ents[i].name, (unsigned long long)pos, (unsigned long long)ents[i].begin);
      goto fail;
    }
    if (ents[i].end > dlen) {
      nio_error("safetensors: '%s': tensor '%s' ends at data byte %llu but the data section has only "
                "%llu bytes (truncated file?)", label, ents[i].name, (unsigned long long)ents[i].end, (unsigned long long)dlen);
      goto fail;
    }
    pos = ents[i].end;
  }
  if (pos != dlen) {
    nio_error("safetensors: '%s': %llu trailing bytes after the last tensor", label,
              (unsigned long long)(dlen - pos));
    goto fail;
  }
  *out = p;
  return 0;
fail:
  parsed_free(&p);
  return -1;
}

/* The parsed tensors' arrays, pointing into buf (the whole file, which the
** set takes); frees p's parts and buf on failure too. */
static nt_io_set *attach(parsed *p, void *buf, const char *label) {
  nt_io_set *s = p->s;
  s->arrays = nio_calloc(p->n, sizeof *s->arrays);
  if (!s->arrays) goto fail;
  for (size_t i = 0; i < p->n; i++) {
    nt_io_array *a = &s->arrays[i];
    const entry *e = &p->ents[i];
    if ((i & 1023) == 0 && nio_interrupted("safetensors", label)) goto fail;
    s->n++;
    a->name = nio_strdup(e->name);
    if (!a->name) goto fail;
    a->dtype = (nt_io_dtype)e->dtype;
    a->ndim = e->ndim;
    memcpy(a->shape, e->shape, sizeof a->shape);
    a->nbytes = (size_t)(e->end - e->begin);
    a->data = (unsigned char *)buf + p->dstart + e->begin;
    if ((uintptr_t)a->data % nt_io_dtype_size(a->dtype) != 0) {
      /* misaligned by the file's writer: give this one its own buffer */
      a->owned_ = nio_malloc(a->nbytes);
      if (!a->owned_) goto fail;
      memcpy(a->owned_, a->data, a->nbytes);
      a->data = a->owned_;
    }
  }
  s->block_ = buf;
  p->s = NULL;
  parsed_free(p);
  return s;
fail:
  parsed_free(p);
  free(buf);
  return NULL;
}

nt_io_set *nt_st_parse_take(void *buf, size_t len, const char *label) {
  if (!label) label = "<buffer>";
  parsed p;
  if (parse_header(buf, len, len, label, &p) != 0) { free(buf); return NULL; }
  return attach(&p, buf, label);
}

nt_io_set *nt_st_parse(const void *buf, size_t len, const char *label) {
  void *copy = nio_malloc(len);
  if (!copy) return NULL;
  memcpy(copy, buf, len);
  return nt_st_parse_take(copy, len, label);
}

/* The header first (its length checked against the file, then the JSON
** parsed and every tensor's offsets checked against the file's size), then
** the data: a file whose header is wrong is never read whole. */
nt_io_set *nt_st_load(const char *path) {
  uint64_t size;
  int fd = nt_io_open_regular("safetensors", path, &size);
  if (fd < 0) return NULL;
  unsigned char first[8];
  ssize_t got = nio_read_fd("safetensors", path, fd, first, size < 8 ? (size_t)size : 8);
  if (got < 0 || check_head(first, (size_t)got, size, path) != 0) { close(fd); return NULL; }
  size_t hend = 8 + (size_t)le64(first);   /* <= 8 + 100 MiB and <= size (check_head) */
  unsigned char *buf = nio_malloc(hend + 1);
  if (!buf) { close(fd); return NULL; }
  memcpy(buf, first, 8);
  got = nio_read_fd("safetensors", path, fd, buf + 8, hend - 8);
  parsed p;
  if (got < 0 || (got < (ssize_t)(hend - 8) && nio_error("safetensors: '%s': truncated header", path)) ||
      parse_header(buf, hend, size, path, &p) != 0) { free(buf); close(fd); return NULL; }
  unsigned char *whole = size < SIZE_MAX ? realloc(buf, (size_t)size + 1) : NULL;
  if (!whole) {
    nio_error("safetensors: '%s': out of memory reading %llu bytes", path, (unsigned long long)size);
    parsed_free(&p); free(buf); close(fd); return NULL;
  }
  got = nio_read_fd("safetensors", path, fd, whole + hend, (size_t)size - hend);
  close(fd);
  if (got < 0 || (size_t)got != (size_t)size - hend) {
    if (got >= 0) nio_error("safetensors: '%s': the file shrank while being read", path);
    parsed_free(&p); free(whole); return NULL;
  }
  return attach(&p, whole, path);
}

/* ---- writing ------------------------------------------------------------- */

static int order_cmp(const void *a, const void *b, void *ctx) {
  const nt_io_array *base = ctx;
  const nt_io_array *x = &base[*(const size_t *)a], *y = &base[*(const size_t *)b];
  size_t sx = nt_io_dtype_size(x->dtype), sy = nt_io_dtype_size(y->dtype);
  if (sx != sy) return sx > sy ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Builds the padded header and the tensor order; returns the header (malloc'd,
** length *hlen, a multiple of 8) and *order (malloc'd indices). */
static char *build_header(const nt_io_array *arrays, size_t n, const char *const *mk,
                          const char *const *mv, size_t nmeta, size_t *hlen, size_t **order_out) {
  json_t *root = NULL;
  char *hdr = NULL;
  size_t *order = NULL;

  for (size_t i = 0; i < n; i++) {
    const nt_io_array *a = &arrays[i];
    if (!a->name || !*a->name) { nio_error("safetensors: array %zu has no name", i); return NULL; }
    if (strcmp(a->name, "__metadata__") == 0) {
      nio_error("safetensors: '__metadata__' is reserved and cannot name a tensor"); return NULL;
    }
    if ((unsigned)a->dtype >= NT_IO_NDTYPES) { nio_error("safetensors: '%s': bad dtype", a->name); return NULL; }
    if (a->ndim < 0 || a->ndim > NT_IO_MAX_DIMS) { nio_error("safetensors: '%s': bad ndim %d", a->name, a->ndim); return NULL; }
    int64_t numel = nt_io_numel(a->ndim, a->shape);
    size_t need;
    if (numel < 0 || !nio_mul_ok((size_t)numel, nt_io_dtype_size(a->dtype), &need) || need != a->nbytes) {
      nio_error("safetensors: '%s': nbytes %zu does not match shape x %s", a->name, a->nbytes,
                nt_io_dtype_name(a->dtype));
      return NULL;
    }
    if (a->nbytes && !a->data) { nio_error("safetensors: '%s': NULL data", a->name); return NULL; }
  }

  order = nio_malloc(n * sizeof *order);
  if (!order) return NULL;
  for (size_t i = 0; i < n; i++) order[i] = i;
  qsort_r(order, n, sizeof *order, order_cmp, (void *)arrays);
  for (size_t i = 1; i < n; i++)
    if (strcmp(arrays[order[i]].name, arrays[order[i - 1]].name) == 0) {
      nio_error("safetensors: duplicate tensor name '%s'", arrays[order[i]].name);
      goto fail;
    }

  root = json_object();
  if (!root) goto oom;
  if (nmeta) {
    json_t *m = json_object();
    if (!m || json_object_set_new(root, "__metadata__", m) != 0) goto oom;
    for (size_t i = 0; i < nmeta; i++)
      if (!mk[i] || !mv[i] || json_object_set_new(m, mk[i], json_string(mv[i])) != 0) {
        nio_error("safetensors: bad metadata pair %zu (NULL or invalid UTF-8)", i);
        goto fail;
      }
  }
  uint64_t off = 0;
  for (size_t k = 0; k < n; k++) {
    const nt_io_array *a = &arrays[order[k]];
    json_t *e = json_object(), *sh = json_array(), *of = json_array();
    if (!e || !sh || !of) { json_decref(e); json_decref(sh); json_decref(of); goto oom; }
    json_object_set_new(e, "dtype", json_string(nt_io_dtype_name(a->dtype)));
    json_object_set_new(e, "shape", sh);
    for (int d = 0; d < a->ndim; d++) json_array_append_new(sh, json_integer(a->shape[d]));
    json_array_append_new(of, json_integer((json_int_t)off));
    json_array_append_new(of, json_integer((json_int_t)(off + a->nbytes)));
    json_object_set_new(e, "data_offsets", of);
    if (json_object_set_new(root, a->name, e) != 0) {
      nio_error("safetensors: tensor name '%s' is not valid UTF-8", a->name);
      goto fail;
    }
    off += a->nbytes;
  }
  char *txt = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!txt) goto oom;
  size_t tl = strlen(txt), padded = (tl + 7) & ~(size_t)7;
  hdr = nio_malloc(padded);
  if (!hdr) { free(txt); goto fail; }
  memcpy(hdr, txt, tl);
  memset(hdr + tl, ' ', padded - tl);   /* spaces: still valid JSON whitespace */
  free(txt);
  json_decref(root);
  *hlen = padded;
  *order_out = order;
  return hdr;

oom:
  nio_error("safetensors: out of memory building the header");
fail:
  if (root) json_decref(root);
  free(order);
  return NULL;
}

static void put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) { p[i] = (unsigned char)v; v >>= 8; }
}

void *nt_st_serialize(const nt_io_array *arrays, size_t n, const char *const *mk,
                      const char *const *mv, size_t nmeta, size_t *out_len) {
  size_t hlen, *order;
  char *hdr = build_header(arrays, n, mk, mv, nmeta, &hlen, &order);
  if (!hdr) return NULL;
  size_t total = 8 + hlen;
  for (size_t i = 0; i < n; i++) total += arrays[i].nbytes;
  unsigned char *out = nio_malloc(total);
  if (out) {
    put_le64(out, hlen);
    memcpy(out + 8, hdr, hlen);
    size_t p = 8 + hlen;
    for (size_t k = 0; k < n; k++) {
      const nt_io_array *a = &arrays[order[k]];
      if (a->nbytes) memcpy(out + p, a->data, a->nbytes);
      p += a->nbytes;
    }
    *out_len = total;
  }
  free(hdr); free(order);
  return out;
}

int nt_st_save(const char *path, const nt_io_array *arrays, size_t n, const char *const *mk,
               const char *const *mv, size_t nmeta) {
  size_t hlen, *order;
  char *hdr = build_header(arrays, n, mk, mv, nmeta, &hlen, &order);
  if (!hdr) return -1;
  unsigned char lenbuf[8];
  put_le64(lenbuf, hlen);
  struct iovec *iov = nio_malloc((n + 2) * sizeof *iov);
  int rc = -1;
  if (iov) {
    iov[0] = (struct iovec){lenbuf, 8};
    iov[1] = (struct iovec){hdr, hlen};
    for (size_t k = 0; k < n; k++)
      iov[k + 2] = (struct iovec){(void *)arrays[order[k]].data, arrays[order[k]].nbytes};
    rc = nio_atomic_writev("safetensors", path, iov, (int)(n + 2));
  }
  free(iov); free(hdr); free(order);
  return rc;
}
