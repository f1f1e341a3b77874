/*
** fuzz_npy.c — libFuzzer target: the .npy reader (tensor/io/npy.c).
** The input is the whole file; an accepted set is checked by fuzz_io.h.
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_npy -max_total_time=60 tests/fuzz/corpus_npy
*/
#include <stdint.h>
#include "tensor/io/npy.h"
#include "fuzz_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nt_io_set *s = nt_npy_parse(data, size, "<fuzz>");
  fuzz_check_set(s);
  nt_io_set_free(s);
  return 0;
}
