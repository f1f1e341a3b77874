/*
** safetensors.h — reader/writer for the safetensors format.
**
** Layout: u64 little-endian N | N bytes of JSON header | data section.
** The header maps each tensor name to {"dtype", "shape", "data_offsets":
** [begin, end]} (offsets relative to the data section) plus an optional
** "__metadata__" object of string -> string.  The header is padded with
** spaces so the data section starts 8-byte aligned.
**
** The reader validates the whole file before returning anything (lengths,
** JSON, dtypes, shapes, offsets: in range, contiguous, non-overlapping,
** matching shape x dtype size, covering the data section; duplicate names):
** it either returns a complete set or NULL with nt_io_error() explaining.
*/
#ifndef NT_IO_SAFETENSORS_H
#define NT_IO_SAFETENSORS_H

#include "iotypes.h"

/* Loads a file.  Arrays come back in data-offset order. */
nt_io_set *nt_st_load(const char *path);

/* Parses an in-memory image.  nt_st_parse copies buf; nt_st_parse_take takes
** ownership of a malloc'd buf (freed even on failure).  `label` names the
** source in messages (a path, or e.g. "<buffer>"). */
nt_io_set *nt_st_parse(const void *buf, size_t len, const char *label);
nt_io_set *nt_st_parse_take(void *buf, size_t len, const char *label);

/* Serializes arrays (each: name, dtype, ndim, shape, data, nbytes) plus
** optional metadata pairs into a malloc'd image; *out_len gets its size.
** Like the reference writer, tensors are laid out by decreasing element
** size, then name, so every tensor's data stays aligned. */
void *nt_st_serialize(const nt_io_array *arrays, size_t n,
                      const char *const *meta_keys, const char *const *meta_values, size_t nmeta,
                      size_t *out_len);

/* Writes a file atomically (temp file + fsync + rename + directory fsync). */
int nt_st_save(const char *path, const nt_io_array *arrays, size_t n,
               const char *const *meta_keys, const char *const *meta_values, size_t nmeta);

#endif
