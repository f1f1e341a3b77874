/*
** npz.c — .npz = zip archive of .npy members.  We read the central directory
** (the authoritative list: local headers written by Python's zipfile may carry
** 0xFFFFFFFF sizes with a zip64 extra), then each member's local header only
** to find where its data starts.  Members are STORED or DEFLATED (raw deflate
** via zlib's inflateInit2(-15)); every member's CRC-32 is checked.  A
** well-formed member in a dtype the tensors cannot hold (a string array,
** objects, a structured or complex dtype) is skipped and listed by name in
** the set's `skipped` (a corrupt one fails the whole archive).
*/
#include "npy.h"
#include "iointernal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

typedef struct zent {
  const unsigned char *name; size_t namelen;
  unsigned method, flags;
  uint32_t crc;
  uint64_t csize, usize, loff;
  uint64_t dpos;                 /* where its data starts (past the local header) */
} zent;

/* Locates the central directory: *cd_off, *cd_size, *count.  -1 with message. */
static int find_cd(const unsigned char *b, size_t len, const char *label, uint64_t *cd_off, uint64_t *cd_size, uint64_t *count) {
  if (len < 22) return nio_error("npz: '%s': too short to be a zip archive (%zu bytes)", label, len);
  size_t lo = len > 22 + 65535 ? len - 22 - 65535 : 0;
  for (size_t p = len - 22 + 1; p-- > lo;) {
    if (rd32(b + p) != 0x06054b50) continue;
    if (p + 22 + rd16(b + p + 20) != len) continue;     /* comment length must reach the end */
    *count = rd16(b + p + 10);
    *cd_size = rd32(b + p + 12);
    *cd_off = rd32(b + p + 16);
    if (*count == 0xFFFF || *cd_size == 0xFFFFFFFF || *cd_off == 0xFFFFFFFF) {
      /* zip64: locator (20 bytes) right before the EOCD points at the zip64 EOCD */
      if (p < 20 || rd32(b + p - 20) != 0x07064b50)
        return nio_error("npz: '%s': zip64 end-of-directory locator missing", label);
      uint64_t z = rd64(b + p - 20 + 8);
      if (z > len || len - z < 56 || rd32(b + z) != 0x06064b50)
        return nio_error("npz: '%s': bad zip64 end-of-directory record", label);
      *count = rd64(b + z + 32);
      *cd_size = rd64(b + z + 40);
      *cd_off = rd64(b + z + 48);
    }
    if (*cd_off > len || *cd_size > len - *cd_off)
      return nio_error("npz: '%s': central directory lies outside the file (truncated?)", label);
    return 0;
  }
  return nio_error("npz: '%s': no zip end-of-central-directory record (not a zip file, or truncated)", label);
}

/* Reads the zip64 extra field (id 1) for fields saturated at 0xFFFFFFFF. */
static int zip64_extra(const unsigned char *x, size_t xl, zent *e, const char *label) {
  bool nu = e->usize == 0xFFFFFFFF, nc = e->csize == 0xFFFFFFFF, no = e->loff == 0xFFFFFFFF;
  if (!nu && !nc && !no) return 0;
  for (size_t i = 0; i + 4 <= xl;) {
    unsigned id = rd16(x + i), sz = rd16(x + i + 2);
    if (i + 4 + sz > xl) break;
    if (id == 1) {
      const unsigned char *q = x + i + 4, *qe = q + sz;
      if (nu) { if (qe - q < 8) break; e->usize = rd64(q); q += 8; }
      if (nc) { if (qe - q < 8) break; e->csize = rd64(q); q += 8; }
      if (no) { if (qe - q < 8) break; e->loff = rd64(q); q += 8; }
      return 0;
    }
    i += 4 + sz;
  }
  return nio_error("npz: '%s': member '%.*s' needs a zip64 extra field that is missing or short", label,
                   (int)e->namelen, (const char *)e->name);
}

/* Deflate cannot expand better than about 1032:1, so a member that declares
** more than this from its compressed size is lying; refuse it before
** allocating anything. */
#define DEFLATE_MAX_RATIO 1032

/* Inflates a raw deflate stream of csize bytes that must produce exactly
** usize bytes.  The output buffer grows as data arrives (never past what has
** been produced plus a doubling, never past usize + 1: the spare byte shows
** a stream that produces more than it declared), so a header that lies about
** usize costs at most twice the real output. */
static unsigned char *inflate_member(const unsigned char *src, uint64_t csize, uint64_t usize,
                                     const char *label, int nl, const char *nm) {
  const size_t limit = (size_t)usize + 1, chunk = (size_t)16 << 20;   /* per inflate call: polls in between */
  size_t cap = limit < ((size_t)1 << 20) ? limit : ((size_t)1 << 20);
  unsigned char *out = malloc(cap);
  if (!out) { nio_error("npz: '%s': out of memory for member '%.*s'", label, nl, nm); return NULL; }
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, -15) != Z_OK) { nio_error("npz: '%s': zlib init failed", label); free(out); return NULL; }
  uint64_t in_left = csize;
  zs.next_in = (Bytef *)src;
  int rc = Z_OK;
  for (;;) {
    if (nio_interrupted("npz", label)) { inflateEnd(&zs); free(out); return NULL; }
    if (zs.avail_in == 0 && in_left) {   /* avail_* are 32-bit: feed in chunks */
      zs.avail_in = in_left > chunk ? (uInt)chunk : (uInt)in_left;
      in_left -= zs.avail_in;
    }
    if (zs.avail_out == 0) {
      size_t done = (size_t)zs.total_out;
      if (done == cap) {
        if (cap == limit) break;                       /* produced usize + 1 bytes */
        size_t ncap = cap > limit / 2 ? limit : cap * 2;
        unsigned char *g = realloc(out, ncap);
        if (!g) { inflateEnd(&zs); free(out); nio_error("npz: '%s': out of memory for member '%.*s'", label, nl, nm); return NULL; }
        out = g; cap = ncap;
      }
      zs.next_out = out + done;
      zs.avail_out = cap - done > chunk ? (uInt)chunk : (uInt)(cap - done);
    }
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) break;
    if (rc == Z_OK || (rc == Z_BUF_ERROR && zs.avail_out == 0)) continue;
    break;                                             /* corrupt, or the input ran out */
  }
  uint64_t produced = zs.total_out;
  inflateEnd(&zs);
  if (rc != Z_STREAM_END || produced != usize) {
    nio_error("npz: '%s': member '%.*s': corrupt deflate stream (%s)", label, nl, nm,
              produced > usize ? "more data than its declared size" :
              rc == Z_STREAM_END ? "less data than its declared size" : rc == Z_DATA_ERROR ? "data error" : "ended early");
    free(out); return NULL;
  }
  return out;
}

/* Checks one member's local header, method and sizes against the archive
** (nothing is allocated) and finds where its data starts. */
static int locate(const unsigned char *b, size_t len, zent *e, const char *label) {
  const int nl = (int)e->namelen;
  const char *nm = (const char *)e->name;
  if (e->flags & 1) return nio_error("npz: '%s': member '%.*s' is encrypted", label, nl, nm);
  if (e->loff > len || len - e->loff < 30 || rd32(b + e->loff) != 0x04034b50)
    return nio_error("npz: '%s': member '%.*s': bad local header offset (corrupt or truncated)", label, nl, nm);
  e->dpos = e->loff + 30 + rd16(b + e->loff + 26) + rd16(b + e->loff + 28);
  if (e->dpos > len || e->csize > len - e->dpos)
    return nio_error("npz: '%s': member '%.*s': data runs past the end of the file (truncated?)", label, nl, nm);
  if (e->method != 0 && e->method != 8)
    return nio_error("npz: '%s': member '%.*s': unsupported compression method %u (only stored/deflate)", label, nl, nm, e->method);
  if (e->method == 0 && e->csize != e->usize)
    return nio_error("npz: '%s': member '%.*s': stored sizes disagree", label, nl, nm);
  /* csize <= len here, so the product cannot overflow */
  if (e->method == 8 && e->usize > e->csize * DEFLATE_MAX_RATIO + 1024)
    return nio_error("npz: '%s': member '%.*s' declares %llu bytes, more than its %llu compressed bytes can hold (corrupt archive)",
                     label, nl, nm, (unsigned long long)e->usize, (unsigned long long)e->csize);
  return 0;
}

static int by_offset(const void *x, const void *y) {
  const zent *a = *(const zent *const *)x, *b = *(const zent *const *)y;
  return a->loff < b->loff ? -1 : a->loff > b->loff;
}

/* A zip bomb names the same compressed bytes many times: each member is
** within the deflate ratio, but n entries pointing at one member inflate it n
** times.  So the members' records (local header + data) must not overlap,
** which bounds the sum of their compressed sizes by the archive's size, and
** the sum of what they declare by DEFLATE_MAX_RATIO times it: checked here,
** before anything is inflated. */
static int check_members(zent *ents, size_t n, size_t len, const char *label) {
  if (n == 0) return 0;
  zent **order = nio_malloc(n * sizeof *order);
  if (!order) return -1;
  for (size_t i = 0; i < n; i++) order[i] = &ents[i];
  qsort(order, n, sizeof *order, by_offset);
  int rc = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const zent *e = order[i];
    if (i > 0 && e->loff < order[i - 1]->dpos + order[i - 1]->csize)
      rc = nio_error("npz: '%s': members '%.*s' and '%.*s' overlap in the archive (the same bytes named twice: "
                     "a zip bomb or a corrupt archive)", label, (int)order[i - 1]->namelen,
                     (const char *)order[i - 1]->name, (int)e->namelen, (const char *)e->name);
    total += e->usize;   /* each <= DEFLATE_MAX_RATIO * len + 1024: no overflow */
  }
  if (rc == 0 && total > (uint64_t)len * DEFLATE_MAX_RATIO + 1024 * (uint64_t)n)
    rc = nio_error("npz: '%s': members declare %llu bytes in all, more than a %zu-byte archive can hold (corrupt archive)",
                   label, (unsigned long long)total, len);
  free(order);
  return rc;
}

/* Extracts one located member into a fresh malloc'd buffer of e->usize bytes (+1). */
static unsigned char *extract(const unsigned char *b, const zent *e, const char *label) {
  const int nl = (int)e->namelen;
  const char *nm = (const char *)e->name;
  const unsigned char *src = b + e->dpos;
  unsigned char *out;
  if (e->method == 0) {                                 /* usize == csize: bytes that are in the file */
    out = malloc(e->usize ? e->usize : 1);
    if (!out) { nio_error("npz: '%s': out of memory for member '%.*s'", label, nl, nm); return NULL; }
    memcpy(out, src, e->usize);
  } else if (!(out = inflate_member(src, e->csize, e->usize, label, nl, nm))) return NULL;
  if (crc32_z(0, out, e->usize) != e->crc) {
    nio_error("npz: '%s': member '%.*s': CRC mismatch (corrupt archive)", label, nl, nm);
    free(out); return NULL;
  }
  return out;
}

nt_io_set *nt_npz_parse(const void *vbuf, size_t len, const char *label) {
  const unsigned char *b = vbuf;
  if (!label) label = "<buffer>";
  uint64_t cd_off = 0, cd_size = 0, count = 0;
  if (find_cd(b, len, label, &cd_off, &cd_size, &count) != 0) return NULL;
  if (count > cd_size / 46) { nio_error("npz: '%s': central directory claims %llu entries, too many for its size", label, (unsigned long long)count); return NULL; }
  nt_io_set *s = nio_calloc(1, sizeof *s);
  zent *ents = nio_calloc((size_t)count, sizeof *ents);
  if (!s || !ents) goto fail;
  s->arrays = nio_calloc((size_t)count, sizeof *s->arrays);
  if (!s->arrays) goto fail;
  /* the directory first: every member named, located and checked, the
  ** members together bounded (check_members), before anything is inflated */
  const unsigned char *p = b + cd_off, *pe = p + cd_size;
  for (uint64_t i = 0; i < count; i++) {
    if ((i & 1023) == 0 && nio_interrupted("npz", label)) goto fail;
    if (pe - p < 46 || rd32(p) != 0x02014b50) {
      nio_error("npz: '%s': corrupt central directory entry %llu", label, (unsigned long long)i); goto fail;
    }
    zent e = {.flags = rd16(p + 8), .method = rd16(p + 10), .crc = rd32(p + 16), .csize = rd32(p + 20),
              .usize = rd32(p + 24), .loff = rd32(p + 42)};
    size_t nl = rd16(p + 28), xl = rd16(p + 30), cl = rd16(p + 32);
    if ((size_t)(pe - p) < 46 + nl + xl + cl) {
      nio_error("npz: '%s': corrupt central directory entry %llu", label, (unsigned long long)i); goto fail;
    }
    e.name = p + 46; e.namelen = nl;
    if (zip64_extra(p + 46 + nl, xl, &e, label) != 0) goto fail;
    p += 46 + nl + xl + cl;
    if (nl < 4 || memcmp(e.name + nl - 4, ".npy", 4) != 0) {
      nio_error("npz: '%s': member '%.*s' is not a .npy file", label, (int)nl, (const char *)e.name); goto fail;
    }
    if (memchr(e.name, 0, nl - 4)) {
      nio_error("npz: '%s': invalid member name '%.*s' (contains a NUL byte)", label, (int)strnlen((const char *)e.name, nl), (const char *)e.name); goto fail;
    }
    if (locate(b, len, &e, label) != 0) goto fail;
    ents[i] = e;
  }
  if (check_members(ents, (size_t)count, len, label) != 0) goto fail;
  for (uint64_t i = 0; i < count; i++) {
    const zent *e = &ents[i];
    size_t nl = e->namelen;
    char *name = nio_strndup((const char *)e->name, nl - 4);
    if (!name) goto fail;
    unsigned char *m = extract(b, e, label);
    if (!m) { free(name); goto fail; }
    char mlabel[512];
    snprintf(mlabel, sizeof mlabel, "%s:%s.npy", label, name);
    nt_io_array *a = &s->arrays[s->n];
    int rc = nio_npy_decode(m, (size_t)e->usize, mlabel, a);
    if (rc == NIO_UNSUPPORTED) {   /* kept by name with the reason: the reader asks for them (load_npz) */
      memset(a, 0, sizeof *a);
      char **k = realloc(s->skipped, (s->nskipped + 1) * sizeof *k);
      if (k) s->skipped = k;
      char **w = k ? realloc(s->skipped_why, (s->nskipped + 1) * sizeof *w) : NULL;
      if (w) s->skipped_why = w;
      char *why = w ? nio_strdup(nt_io_error()) : NULL;
      if (!why) { free(name); nio_error("npz: '%s': out of memory", label); goto fail; }
      s->skipped[s->nskipped] = name; s->skipped_why[s->nskipped] = why; s->nskipped++;
      continue;
    }
    if (rc != 0) {
      memset(a, 0, sizeof *a);
      free(name);   /* the message already names archive:member */
      goto fail;
    }
    a->name = name;
    s->n++;
  }
  if (nio_check_unique_names(s, "npz", label) != 0) goto fail;
  free(ents);
  return s;
fail:
  free(ents);
  nt_io_set_free(s);
  return NULL;
}

/* An npz is a zip archive: NumPy's own test (np.load) is its first four
** bytes, a local header or (no members) the end of the directory. */
static int check_file_head(const unsigned char *head, size_t n, uint64_t size, const char *path) {
  (void)size;
  if (n < 4 || (memcmp(head, "PK\x03\x04", 4) != 0 && memcmp(head, "PK\x05\x06", 4) != 0))
    return nio_error("npz: '%s': not a zip archive (the file does not start with a zip signature)", path);
  return 0;
}

nt_io_set *nt_npz_load(const char *path) {
  size_t len;
  unsigned char *buf = nio_read_file("npz", path, &len, check_file_head);
  if (!buf) return NULL;
  nt_io_set *s = nt_npz_parse(buf, len, path);
  free(buf);
  return s;
}
