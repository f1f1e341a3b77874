/*
** tsize.h — the one checked element count that every tensor constructor,
** view and file reader uses (no other dependency, so tensor/io can include it
** without the tensor core).
**
** A shape is acceptable when every dimension is >= 0 and the product of its
** NONZERO dimensions is at most NT_MAX_NUMEL.  Counting only the nonzero ones
** matters: a contiguous stride is the product of the later dimensions, so a
** shape like [0, 2^40, 2^40] holds no element yet its strides would overflow.
** The bound leaves room for bytes: NT_MAX_NUMEL * 16 (the widest element)
** and every offset inside such a tensor still fit in int64 and size_t.
*/
#ifndef NT_SIZE_H
#define NT_SIZE_H

#include <stdbool.h>
#include <stdint.h>

#define NT_MAX_NUMEL (INT64_MAX / 16)

/* *numel = product of shape (1 for ndim 0); false when a dimension is
** negative or the count (of the nonzero dimensions) exceeds NT_MAX_NUMEL. */
static inline bool nt_numel_checked(const int64_t *shape, int ndim, int64_t *numel) {
  int64_t nonzero = 1;
  bool empty = false;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return false;
    if (shape[i] == 0) { empty = true; continue; }
    if (__builtin_mul_overflow(nonzero, shape[i], &nonzero) || nonzero > NT_MAX_NUMEL) return false;
  }
  *numel = empty ? 0 : nonzero;
  return true;
}

#endif
