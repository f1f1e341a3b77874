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

/* ---- whole-file read ------------------------------------------------------ */
void *nio_read_file(const char *what, const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) { nio_error("%s: cannot open '%s': %s", what, path, strerror(errno)); return NULL; }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    nio_error("%s: cannot stat '%s': %s", what, path, strerror(errno));
    close(fd); return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    nio_error("%s: '%s' is not a regular file", what, path);
    close(fd); return NULL;
  }
  size_t size = (size_t)st.st_size;
  char *buf = malloc(size + 1);
  if (!buf) {
    nio_error("%s: '%s': out of memory reading %zu bytes", what, path, size);
    close(fd); return NULL;
  }
  size_t got = 0;
  while (got < size) {
    if (nio_interrupted(what, path)) { free(buf); close(fd); return NULL; }
    size_t want = size - got > ((size_t)64 << 20) ? ((size_t)64 << 20) : size - got;   /* chunks: stay interruptible */
    ssize_t r = read(fd, buf + got, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      nio_error("%s: error reading '%s': %s", what, path, strerror(errno));
      free(buf); close(fd); return NULL;
    }
    if (r == 0) break;                 /* shrank under us: use what we got */
    got += (size_t)r;
  }
  close(fd);
  buf[got] = 0;
  *len = got;
  return buf;
}

/* ---- atomic write: atomicfile.c, shared with every other writer ---------- */
int nio_atomic_writev(const char *what, const char *path, const struct iovec *iov, int n) {
  return nt_atomic_write(what, path, iov, n);
}
