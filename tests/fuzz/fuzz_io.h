/*
** fuzz_io.h — what the file-reader fuzz targets (fuzz_npy, fuzz_npz,
** fuzz_safetensors, fuzz_csv) check on every set a reader accepts: each
** array's byte count matches its shape and dtype, and every byte of its data
** is read (so ASan catches an array that points past its buffer).
*/
#ifndef FUZZ_IO_H
#define FUZZ_IO_H

#include <stdlib.h>
#include <string.h>
#include "tensor/io/iotypes.h"

static void fuzz_check_set(const nt_io_set *s) {
  if (!s) return;
  volatile unsigned sum = 0;
  for (size_t i = 0; i < s->n; i++) {
    const nt_io_array *a = &s->arrays[i];
    int64_t numel = nt_io_numel(a->ndim, a->shape);
    if (numel < 0 || (size_t)numel * nt_io_dtype_size(a->dtype) != a->nbytes) abort();
    if (nt_io_set_find(s, a->name) == NULL) abort();
    const unsigned char *d = a->data;
    for (size_t k = 0; k < a->nbytes; k++) sum += d[k];
  }
  for (size_t i = 0; i < s->nmeta; i++) sum += (unsigned)strlen(s->meta_keys[i]) + (unsigned)strlen(s->meta_values[i]);
  (void)sum;
}

#endif
