/*
** npy.h — NumPy .npy reader/writer and .npz (zip of .npy) reader.
**
** .npy: "\x93NUMPY", major, minor, header length (u16 for v1, u32 for v2/v3),
** a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
** padded with spaces and '\n' to a multiple of 64 bytes, then the raw data.
** Supported descr: f2 f4 f8 i4 i8 u1 b1 in any byte order ('<', '>', '=', '|'),
** and i1 i2 u2 (loaded as i4), u4 u8 (loaded as i8; a u8 value >= 2^63 is an
** error, never wrapped);
** big-endian data is byte-swapped on read.  fortran_order=True data is
** transposed into C order on read.
**
** .npz: a zip archive whose members are "<name>.npy"; STORED and DEFLATED
** members are supported (zip64 too), CRCs are verified.  Array names come
** back without the ".npy" suffix, in archive order.  Members whose dtype is
** unsupported (strings, objects, ...) are skipped into the set's `skipped`.
*/
#ifndef NT_IO_NPY_H
#define NT_IO_NPY_H

#include "iotypes.h"

/* One array: a set with n == 1 named "" (load) or the given name (parse). */
nt_io_set *nt_npy_load(const char *path);
nt_io_set *nt_npy_parse(const void *buf, size_t len, const char *label);

/* Writes a version 1.0 .npy atomically (BF16 has no NumPy dtype: error). */
int   nt_npy_save(const char *path, const nt_io_array *a);
void *nt_npy_serialize(const nt_io_array *a, size_t *out_len);

nt_io_set *nt_npz_load(const char *path);
nt_io_set *nt_npz_parse(const void *buf, size_t len, const char *label);

#endif
