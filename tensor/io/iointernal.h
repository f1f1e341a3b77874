/*
** iointernal.h — helpers shared by the format modules (not public).
*/
#ifndef NT_IO_INTERNAL_H
#define NT_IO_INTERNAL_H

#include "iotypes.h"
#include <stdarg.h>
#include <stdbool.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Sets the thread's io error message (printf-style).  Always returns -1 so
** callers can `return nio_error(...)`.  Will forward to the core's
** nt_error_set once that exists. */
int nio_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* True (with the error "<what>: '<label>': interrupted") once the flag given
** to nt_io_set_interrupt is nonzero; cheap enough for every loop step. */
bool nio_interrupted(const char *what, const char *label);

/* A format's check of a file's first bytes (head: min(size, NIO_HEAD_BYTES)
** of them) against its size before anything else is read: 0, or -1 with a
** message (a header that declares more than the file holds, a wrong magic). */
#define NIO_HEAD_BYTES 4096
typedef int (*nio_head_check)(const unsigned char *head, size_t n, uint64_t size, const char *path);

/* Reads up to n bytes at fd's position, polling the interrupt flag between
** 64 MiB pieces: the count read (short at the end of the file), or -1 with a
** message naming path. */
ssize_t nio_read_fd(const char *what, const char *path, int fd, unsigned char *buf, size_t n);

/* Reads a whole regular file (nt_io_open_regular: anything else is refused
** without blocking) into a malloc'd buffer (+1 NUL byte past the end, not
** counted in *len), polling the interrupt flag between pieces; with a check,
** its header is read and checked first.  `what` prefixes messages. */
void *nio_read_file(const char *what, const char *path, size_t *len, nio_head_check check);

/* Atomically replaces `path` with the concatenation of iov[0..n): the
** format modules' name for nt_atomic_write (atomicfile.h). */
int nio_atomic_writev(const char *what, const char *path, const struct iovec *iov, int n);

/* Decodes one .npy image; takes ownership of the malloc'd buf (freed on
** failure, or kept as a->owned_ with a->data pointing into it).  -1 on a
** bad image, NIO_UNSUPPORTED (message set too) for a well-formed one whose
** dtype the tensors cannot hold, which npz skips. */
#define NIO_UNSUPPORTED (-2)
int nio_npy_decode(unsigned char *buf, size_t len, const char *label, nt_io_array *a);

/* -1 with "<what>: '<label>': duplicate array name 'x'" when two arrays of s
** share a name (sorts a copy of the names: n log n, not n^2). */
int nio_check_unique_names(const nt_io_set *s, const char *what, const char *label);

/* Allocation helpers that report "out of memory" through nio_error. */
void *nio_malloc(size_t n);
void *nio_calloc(size_t n, size_t sz);
char *nio_strdup(const char *s);
char *nio_strndup(const char *s, size_t n);

/* Checked a*b for sizes. */
static inline bool nio_mul_ok(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

#endif
