/*
** iotypes.h — plain structs shared by the file-format readers/writers
** (safetensors, npy/npz, csv).  Deliberately independent of tensor.h: a
** format module hands back named n-d byte buffers and the tensor core builds
** its tensors from them (or the other way round for writing).
**
** Errors: every function returns NULL / -1 on failure and leaves a one-line
** message (naming the file and the problem) readable with nt_io_error().
*/
#ifndef NT_IO_TYPES_H
#define NT_IO_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>

#define NT_IO_MAX_DIMS 16

/* Element types the formats can carry.  Data is always little-endian, C
** (row-major) order, densely packed. */
typedef enum nt_io_dtype {
  NT_IO_F32 = 0, NT_IO_F64, NT_IO_F16, NT_IO_BF16,
  NT_IO_I32, NT_IO_I64, NT_IO_U8, NT_IO_BOOL,
  NT_IO_NDTYPES
} nt_io_dtype;

size_t      nt_io_dtype_size(nt_io_dtype dt);      /* bytes per element; 0 if invalid */
const char *nt_io_dtype_name(nt_io_dtype dt);      /* safetensors spelling: "F32", ... */
int         nt_io_dtype_from_name(const char *s);  /* inverse; -1 if unknown */

/* One named n-d array.  `data` holds nbytes = prod(shape) * dtype_size bytes
** and is aligned to its element size.  When part of an nt_io_set, name and
** data belong to the set. */
typedef struct nt_io_array {
  char       *name;
  nt_io_dtype dtype;
  int         ndim;                    /* 0 = scalar (one element) */
  int64_t     shape[NT_IO_MAX_DIMS];
  void       *data;
  size_t      nbytes;
  void       *owned_;                  /* private: separately allocated data, or NULL */
} nt_io_array;

/* Element count of shape (1 for ndim == 0); -1 for a negative dimension or a
** count the tensor core would refuse (tensor/tsize.h: the same rule). */
int64_t nt_io_numel(int ndim, const int64_t *shape);

/* A loaded file: arrays in file order plus string metadata (safetensors'
** __metadata__; empty for npz). */
typedef struct nt_io_set {
  size_t       n;
  nt_io_array *arrays;
  size_t       nmeta;
  char       **meta_keys;
  char       **meta_values;
  /* npz: members in a dtype the tensors cannot hold (strings, objects,
  ** structured, complex), skipped by name with the reason; 0 elsewhere */
  size_t       nskipped;
  char       **skipped;
  char       **skipped_why;
  void        *block_;                 /* private: the buffer arrays point into */
} nt_io_set;

void               nt_io_set_free(nt_io_set *s);                        /* NULL ok */
const nt_io_array *nt_io_set_find(const nt_io_set *s, const char *name); /* NULL if absent */
const char        *nt_io_set_meta(const nt_io_set *s, const char *key);  /* NULL if absent */

/* Opens path read-only if it is a regular file, without ever blocking: a
** FIFO, a device, a directory or a socket is refused ("<what>: 'path' is not a
** regular file (a FIFO)").  The descriptor (blocking, close-on-exec) and the
** file's size; -1 with the message in nt_io_error().  Every reader opens
** through this (the formats here, lang's read_text/read_bytes/lines). */
int nt_io_open_regular(const char *what, const char *path, uint64_t *size);

/* Message of the last failure in this thread ("" if none). */
const char *nt_io_error(void);

/* While flag is set (per thread; NULL: none), the readers poll *flag between
** entries, rows, members and chunks and fail with "interrupted" once it is
** nonzero, leaving it set for the caller (the interpreter's Ctrl-C flag). */
void nt_io_set_interrupt(volatile sig_atomic_t *flag);

#endif
