// alloc_guard.cpp — the caching allocator's blocks, told to the emulated device.
//
// allocator.cu carves big cudaMalloc segments into blocks rounded to 512
// bytes, so a kernel reading past its tensor usually lands in memory that IS
// allocated — on a GPU that is a silent wrong value.  In the emulated build
// allocator.cu is compiled with dev_alloc/dev_free renamed to *_unchecked and
// these wrappers stand in: each block is registered at its REQUESTED size, so
// the emulator (and ASan, through poisoning) reports an access one element past
// a tensor.  The allocator's own logic is unchanged.
#include "common.cuh"

extern "C" void emu_note_block(void *p, size_t request, size_t rounded);
extern "C" void emu_forget_block(void *p);

namespace ncu {

void *dev_alloc_unchecked(size_t n);
void dev_free_unchecked(void *p);

void *dev_alloc(size_t n) {
  void *p = dev_alloc_unchecked(n);
  if (p) emu_note_block(p, n ? n : 1, ((n ? n : 1) + 511) & ~(size_t)511);
  return p;
}

void dev_free(void *p) {
  if (p) emu_forget_block(p);
  dev_free_unchecked(p);
}

}  // namespace ncu
