/*
** iocommon.c — dtype tables, the set container, the thread-local error
** message, whole-file reading and the atomic (temp + fsync + rename) writer
** shared by every format module.
*/
#include "iointernal.h"
#include "atomicfile.h"
#include "../tsize.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- dtypes ------------------------------------------------------------ */
static const struct { const char *name; size_t size; } dtype_tab[NT_IO_NDTYPES] = {
  [NT_IO_F32] = {"F32", 4}, [NT_IO_F64] = {"F64", 8}, [NT_IO_F16] = {"F16", 2},
  [NT_IO_BF16] = {"BF16", 2}, [NT_IO_I32] = {"I32", 4}, [NT_IO_I64] = {"I64", 8},
  [NT_IO_U8] = {"U8", 1}, [NT_IO_BOOL] = {"BOOL", 1},
};

size_t nt_io_dtype_size(nt_io_dtype dt) {
  return (unsigned)dt < NT_IO_NDTYPES ? dtype_tab[dt].size : 0;
}
const char *nt_io_dtype_name(nt_io_dtype dt) {
  return (unsigned)dt < NT_IO_NDTYPES ? dtype_tab[dt].name : "?";
}
int nt_io_dtype_from_name(const char *s) {
  for (int i = 0; i < NT_IO_NDTYPES; i++)
    if (strcmp(s, dtype_tab[i].name) == 0) return i;
  return -1;
}

int64_t nt_io_numel(int ndim, const int64_t *shape) {
  int64_t n;
  return nt_numel_checked(shape, ndim, &n) ? n : -1;   /* the tensor core's rule (tsize.h) */
}

/* ---- set container ------------------------------------------------------ */
void nt_io_set_free(nt_io_set *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) {
    free(s->arrays[i].name);
    free(s->arrays[i].owned_);
  }
  for (size_t i = 0; i < s->nmeta; i++) { free(s->meta_keys[i]); free(s->meta_values[i]); }
  for (size_t i = 0; i < s->nskipped; i++) { free(s->skipped[i]); free(s->skipped_why[i]); }
  free(s->skipped); free(s->skipped_why);
  free(s->arrays); free(s->meta_keys); free(s->meta_values); free(s->block_);
  free(s);
}

const nt_io_array *nt_io_set_find(const nt_io_set *s, const char *name) {
  for (size_t i = 0; s && i < s->n; i++)
    if (strcmp(s->arrays[i].name, name) == 0) return &s->arrays[i];
  return NULL;
}

const char *nt_io_set_meta(const nt_io_set *s, const char *key) {
  for (size_t i = 0; s && i < s->nmeta; i++)
    if (strcmp(s->meta_keys[i], key) == 0) return s->meta_values[i];
  return NULL;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int nio_check_unique_names(const nt_io_set *s, const char *what, const char *label) {
  if (s->n < 2) return 0;
  const char **names = nio_malloc(s->n * sizeof *names);
  if (!names) return -1;
  for (size_t i = 0; i < s->n; i++) names[i] = s->arrays[i].name;
  qsort(names, s->n, sizeof *names, name_cmp);
  int rc = 0;
  for (size_t i = 1; i < s->n && rc == 0; i++)
    if (strcmp(names[i - 1], names[i]) == 0) rc = nio_error("%s: '%s': duplicate array name '%s'", what, label, names[i]);
  free(names);
  return rc;
}

/* ---- errors --------------------------------------------------------------
** Thread-local so two threads loading files don't garble each other's text. */
static _Thread_local char errbuf[512];

const char *nt_io_error(void) { return errbuf; }

int nio_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  return -1;
}

static _Thread_local volatile sig_atomic_t *interrupt_flag;

void nt_io_set_interrupt(volatile sig_atomic_t *flag) { interrupt_flag = flag; }

bool nio_interrupted(const char *what, const char *label) {
  if (!interrupt_flag || !*interrupt_flag) return false;
  nio_error("%s: '%s': interrupted", what, label);
  return true;
}

void *nio_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) nio_error("out of memory (%zu bytes)", n);
  return p;
}
void *nio_calloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz ? sz : 1);
  if (!p) nio_error("out of memory (%zu x %zu bytes)", n, sz);
  return p;
}
char *nio_strndup(const char *s, size_t n) {
  char *p = nio_malloc(n + 1);
  if (p) { memcpy(p, s, n); p[n] = 0; }
  return p;
}
char *nio_strdup(const char *s) { return nio_strndup(s, strlen(s)); }

/* ---- opening a file to read ------------------------------------------------
** A FIFO blocks open() until a writer comes (and SIGINT restarts the call, so
** Ctrl-C cannot end it); a device may block reads forever.  So the open does
** not block (O_NONBLOCK: a FIFO with no writer opens at once), fstat decides,
** and only a regular file goes on, made blocking again for its reads. */
int nt_io_open_regular(const char *what, const char *path, uint64_t *size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return nio_error("%s: cannot open '%s': %s", what, path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno; close(fd);
    return nio_error("%s: cannot stat '%s': %s", what, path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return nio_error("%s: '%s' is not a regular file (%s)", what, path,
                     S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" :
                     S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a file");
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
    int e = errno; close(fd);
    return nio_error("%s: cannot read '%s': %s", what, path, strerror(e));
  }
  *size = (uint64_t)st.st_size;
  return fd;
}

ssize_t nio_read_fd(const char *what, const char *path, int fd, unsigned char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    if (nio_interrupted(what, path)) return -1;
    size_t want = n - got > ((size_t)64 << 20) ? ((size_t)64 << 20) : n - got;
    ssize_t r = read(fd, buf + got, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return nio_error("%s: error reading '%s': %s", what, path, strerror(errno));
    if (r == 0) break;                 /* shrank under us: use what we got */
    got += (size_t)r;
  }
  return (ssize_t)got;
}

/* ---- whole-file read ------------------------------------------------------ */
void *nio_read_file(const char *what, const char *path, size_t *len, nio_head_check check) {
  uint64_t size64;
  int fd = nt_io_open_regular(what, path, &size64);
  if (fd < 0) return NULL;
  unsigned char head[NIO_HEAD_BYTES];
  ssize_t nhead = 0;
  if (check) {   /* the header first: a file it refuses is never read whole */
    nhead = nio_read_fd(what, path, fd, head, size64 < sizeof head ? (size_t)size64 : sizeof head);
    if (nhead < 0 || check(head, (size_t)nhead, size64, path) != 0) { close(fd); return NULL; }
  }
  if (size64 >= SIZE_MAX) { close(fd); nio_error("%s: '%s' is too large to read", what, path); return NULL; }
  size_t size = (size_t)size64;
  unsigned char *buf = size >= (size_t)nhead ? malloc(size + 1) : NULL;
  if (!buf) {
    nio_error("%s: '%s': out of memory reading %zu bytes", what, path, size);
    close(fd); return NULL;
  }
  memcpy(buf, head, (size_t)nhead);
  ssize_t rest = nio_read_fd(what, path, fd, buf + nhead, size - (size_t)nhead);
  close(fd);
  if (rest < 0) { free(buf); return NULL; }
  *len = (size_t)nhead + (size_t)rest;
  buf[*len] = 0;
  return buf;
}

/* ---- atomic write: atomicfile.c, shared with every other writer ---------- */
int nio_atomic_writev(const char *what, const char *path, const struct iovec *iov, int n) {
  return nt_atomic_write(what, path, iov, n);
}
