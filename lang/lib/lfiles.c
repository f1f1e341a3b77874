/*
** lib/lfiles.c — text and bytes files, and strings as bytes:
**   read_text(path)         the file as a string (UTF-8 checked)
**   write_text(path, s)     atomically (nt_atomic_write: temp + fsync + rename)
**   read_bytes(path)        the file as a u8 tensor
**   write_bytes(path, t)    a u8 tensor (or a string's bytes), atomically
**   lines(path)             an iterator over the lines, read lazily in 64 KB
**                           pieces (memory bounded by the longest line)
**   encode(s) / decode(t)   a string's UTF-8 bytes as a u8 tensor and back
** Sizes are checked before anything is allocated: a file larger than the
** string limit is refused with its size, not read.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ltensor.h"
#include "lang/lib/nblib.h"
#include "tensor/io/atomicfile.h"
#include "tensor/io/iotypes.h"

/* strings and byte tensors read here stay below this (a string's length is
** 32-bit in places; reading a 5 GB file into one string is never intended) */
#define MAX_FILE_BYTES ((int64_t)1 << 31)

static bool valid_utf8(const unsigned char *s, size_t n, size_t *bad) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || i + (size_t)len > n) { *bad = i; return false; }
    for (int k = 1; k < len; k++) if ((s[i + k] & 0xC0) != 0x80) { *bad = i; return false; }
    i += (size_t)len;
  }
  return true;
}

int nblib_path_arg(nb_VM *vm, const char *fname, nb_Value v, const char **out) {
  if (v.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: path must be a string, got %s", fname, nb_typename(v));
  if (strlen(nb_str(v)->data) != nb_str(v)->len) return nb_error_kind(vm, "ValueError", "%s: path contains a NUL byte", fname);
  *out = nb_str(v)->data;
  return NB_OK;
}

/* the whole file (malloc'd, *n bytes), size checked before reading */
int nblib_slurp(nb_VM *vm, const char *fname, const char *path, char **data, size_t *n) {
  uint64_t size;
  int fd = nt_io_open_regular(fname, path, &size);   /* a FIFO or device is refused, never waited on */
  if (fd < 0) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  if (size >= (uint64_t)MAX_FILE_BYTES) { close(fd); return nb_error_kind(vm, "ValueError", "%s: %s has %llu bytes, more than the %lld a string or tensor read at once may hold (use lines(path))", fname, path, (unsigned long long)size, (long long)MAX_FILE_BYTES); }
  size_t cap = (size_t)size + 1, len = 0;
  char *buf = malloc(cap);
  if (!buf) { close(fd); return nb_error(vm, "out of memory"); }
  for (;;) {   /* the file may have grown or shrunk since fstat: read to EOF, within the limit */
    if (len == cap) {
      if (cap >= (size_t)MAX_FILE_BYTES) { free(buf); close(fd); return nb_error_kind(vm, "ValueError", "%s: %s grew past %lld bytes while being read", fname, path, (long long)MAX_FILE_BYTES); }
      char *nb = realloc(buf, cap * 2);
      if (!nb) { free(buf); close(fd); return nb_error(vm, "out of memory"); }
      buf = nb; cap *= 2;
    }
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) { int e = errno; free(buf); close(fd); return nb_error_kind(vm, "IOError", "%s: reading %s: %s", fname, path, strerror(e)); }
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  *data = buf; *n = len;
  return NB_OK;
}

static int b_read_text(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *path = NULL; char *data; size_t len, bad;
  if (nblib_path_arg(vm, "read_text", args[0], &path) || nblib_slurp(vm, "read_text", path, &data, &len)) return NB_ERR;
  if (!valid_utf8((const unsigned char *)data, len, &bad)) {
    free(data);
    return nb_error_kind(vm, "ValueError", "read_text: %s is not UTF-8 text (invalid byte at offset %zu; read_bytes reads any file)", path, bad);
  }
  *out = nb_strv(nbS_new(data, len));
  free(data);
  return NB_OK;
}

static int b_read_bytes(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *path = NULL; char *data; size_t len;
  if (nblib_path_arg(vm, "read_bytes", args[0], &path) || nblib_slurp(vm, "read_bytes", path, &data, &len)) return NB_ERR;
  int64_t shape = (int64_t)len;
  nt_Tensor *t = nt_empty(&shape, 1, NT_U8, NT_CPU);
  if (t && len) memcpy(nt_data_ptr(t), data, len);
  free(data);
  return nbT_ret(vm, t, out);
}

/* bytes of a u8 tensor (or a string) for writing: *p into *keep's memory */
static int bytes_of(nb_VM *vm, const char *fname, nb_Value v, nt_Tensor **keep, const void **p, size_t *n) {
  *keep = NULL;
  if (v.t == NB_TSTR) { *p = nb_str(v)->data; *n = nb_str(v)->len; return NB_OK; }
  if (v.t != NB_TTENSOR || T(v)->dtype != NT_U8)
    return nb_error_kind(vm, "TypeError", "%s: expected a u8 tensor or a string, got %s", fname, v.t == NB_TTENSOR ? nt_dtype_name(T(v)->dtype) : nb_typename(v));
  nt_Tensor *t = T(v), *c = t->device == NT_CPU ? nt_contiguous(t) : nt_to_device(t, NT_CPU);
  nt_Tensor *cc = c ? nt_contiguous(c) : NULL;
  nt_release(c);
  if (!cc) return nbT_err(vm);
  *keep = cc; *p = nt_data_ptr(cc); *n = (size_t)cc->numel;
  return NB_OK;
}

static int write_file(nb_VM *vm, const char *fname, nb_Value *args, bool text) {
  const char *path = NULL;
  if (nblib_path_arg(vm, fname, args[0], &path)) return NB_ERR;
  if (text && args[1].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: expected a string to write, got %s (write_bytes writes a u8 tensor)", fname, nb_typename(args[1]));
  nt_Tensor *keep = NULL; const void *p = NULL; size_t n = 0;
  if (bytes_of(vm, fname, args[1], &keep, &p, &n)) return NB_ERR;
  struct iovec iov = { (void *)p, n };
  int rc = nt_atomic_write(fname, path, &iov, 1);
  nt_release(keep);
  if (rc) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  return NB_OK;
}
static int b_write_text(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; *out = nb_nil(); return write_file(vm, "write_text", args, true); }
static int b_write_bytes(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; *out = nb_nil(); return write_file(vm, "write_bytes", args, false); }

static int b_encode(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "encode: expected a string, got %s", nb_typename(args[0]));
  int64_t len = (int64_t)nb_str(args[0])->len;
  nt_Tensor *t = nt_empty(&len, 1, NT_U8, NT_CPU);
  if (t && len) memcpy(nt_data_ptr(t), nb_str(args[0])->data, (size_t)len);
  return nbT_ret(vm, t, out);
}

static int b_decode(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; nt_Tensor *keep = NULL; const void *p = NULL; size_t len = 0, bad;
  if (args[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "decode: expected a u8 tensor, got %s", nb_typename(args[0]));
  if (T(args[0])->ndim > 1) return nb_error_kind(vm, "ValueError", "decode: expected a 1-D u8 tensor, got %d dimensions", T(args[0])->ndim);
  if (bytes_of(vm, "decode", args[0], &keep, &p, &len)) return NB_ERR;
  int st = NB_OK;
  if (!valid_utf8(p, len, &bad)) st = nb_error_kind(vm, "ValueError", "decode: the bytes are not UTF-8 (invalid byte at offset %zu)", bad);
  else *out = nb_strv(nbS_new(p, len));
  nt_release(keep);
  return st;
}

/* ---- lines(path): {__next, path, _off, _buf, _pos}; each refill reads the next
** 64 KB from _off (the file is opened per refill, so nothing stays open when a
** loop stops early); a line is returned without its "\n" (or "\r\n") */
enum { CHUNK = 1 << 16 };

static int b_lines_next(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  nb_Rec *self = args[0].u.p;
  const char *path = nb_str(nbR_get_cstr(self, "path"))->data;
  nb_Value bufv = nbR_get_cstr(self, "_buf");
  double pos = nbR_get_cstr(self, "_pos").u.n, off = nbR_get_cstr(self, "_off").u.n;
  bool eof = nb_truthy(nbR_get_cstr(self, "_eof"));
  nb_Buf acc = {0};
  const char *b = nb_str(bufv)->data; size_t blen = nb_str(bufv)->len, i = (size_t)pos;
  for (;;) {
    const char *nl = i < blen ? memchr(b + i, '\n', blen - i) : NULL;
    if (nl) {
      size_t k = (size_t)(nl - (b + i));
      nbB_add(&acc, b + i, k);
      pos = (double)(i + k + 1);
      nbR_set_cstr(self, "_pos", nb_int(pos));
      break;
    }
    nbB_add(&acc, b + i, blen - i);
    if (acc.n >= (size_t)MAX_FILE_BYTES) { nbB_free(&acc); return nb_error_kind(vm, "ValueError", "lines: %s has a line longer than %lld bytes", path, (long long)MAX_FILE_BYTES); }
    if (eof) {
      nbR_set_cstr(self, "_pos", nb_int((double)blen));
      if (!acc.n && blen == i) { nbB_free(&acc); *out = nb_nil(); return NB_OK; }   /* the end (a last "\n" ends no extra line) */
      break;
    }
    /* refill (a long line is many refills: Ctrl-C stops it) */
    if (nb_vm_interrupted(vm)) { nbB_free(&acc); return nbV_interrupt_error(vm); }
    uint64_t size;
    int fd = nt_io_open_regular("lines", path, &size);
    if (fd < 0) { nbB_free(&acc); return nb_error_kind(vm, "IOError", "%s", nt_io_error()); }
    char *chunk = malloc(CHUNK);
    if (!chunk) { close(fd); nbB_free(&acc); return nb_error(vm, "out of memory"); }
    size_t got = 0;
    int err = 0;
    while (got < CHUNK) {
      ssize_t r = pread(fd, chunk + got, CHUNK - got, (off_t)off + (off_t)got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) { err = errno; break; }
      if (r == 0) break;
      got += (size_t)r;
    }
    close(fd);
    if (err) { free(chunk); nbB_free(&acc); return nb_error_kind(vm, "IOError", "lines: reading %s: %s", path, strerror(err)); }
    off += (double)got;
    eof = got < CHUNK;
    nbR_set_cstr(self, "_off", nb_int(off));
    nbR_set_cstr(self, "_eof", nb_bool(eof));
    nbR_set_cstr(self, "_buf", nb_strv(nbS_new(chunk, got)));
    free(chunk);
    bufv = nbR_get_cstr(self, "_buf");
    b = nb_str(bufv)->data; blen = nb_str(bufv)->len; i = 0;
    nbR_set_cstr(self, "_pos", nb_int(0));
  }
  size_t len = acc.n;
  if (len && acc.p[len - 1] == '\r') len--;
  size_t bad;
  if (!valid_utf8((const unsigned char *)(acc.p ? acc.p : ""), len, &bad)) {
    nbB_free(&acc);
    return nb_error_kind(vm, "ValueError", "lines: %s is not UTF-8 text", path);
  }
  *out = nb_strv(nbS_new(acc.p ? acc.p : "", len));
  nbB_free(&acc);
  return NB_OK;
}
static nb_Builtin lines_member[] = { { "__lines_next", b_lines_next, "self", "internal: the next line of lines(path)" }, { NULL, NULL, NULL, NULL } };

static int b_lines(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *path = NULL;
  if (nblib_path_arg(vm, "lines", args[0], &path)) return NB_ERR;
  uint64_t size;
  int fd = nt_io_open_regular("lines", path, &size);   /* refused now, not at the first line */
  if (fd < 0) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  close(fd);
  nb_Rec *r = nbR_new(6);
  nbR_set_cstr(r, "__next", nb_builtinv(&lines_member[0]));
  nb_incref(args[0]); nbR_set_cstr(r, "path", args[0]);
  nbR_set_cstr(r, "_off", nb_int(0));
  nbR_set_cstr(r, "_pos", nb_int(0));
  nbR_set_cstr(r, "_eof", nb_bool(false));
  nbR_set_cstr(r, "_buf", nb_strv(nbS_new("", 0)));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static nb_Builtin file_builtins[] = {
  { "read_text", b_read_text, "path", "read_text(path): the file as a string (must be UTF-8)" },
  { "write_text", b_write_text, "path, s", "write_text(path, s): writes the string atomically (a temporary renamed over path; a symlink's target is updated)" },
  { "read_bytes", b_read_bytes, "path", "read_bytes(path): the file as a u8 tensor" },
  { "write_bytes", b_write_bytes, "path, data", "write_bytes(path, data): writes a u8 tensor (or a string's bytes) atomically" },
  { "lines", b_lines, "path", "lines(path): iterates over the file's lines (without their \\n), reading it lazily: for line in lines(path) { ... }" },
  { "encode", b_encode, "s", "encode(s): the string's UTF-8 bytes as a u8 tensor" },
  { "decode", b_decode, "t", "decode(t): a 1-D u8 tensor of UTF-8 bytes as a string" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_files(void) {
  nbC_prepare(lines_member);
  nbC_register(file_builtins);
}
