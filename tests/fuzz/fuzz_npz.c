/*
** fuzz_npz.c — libFuzzer target: the .npz reader (tensor/io/npz.c: zip, zip64, deflate, CRC).
** The input is the whole file; an accepted set is checked by fuzz_io.h.
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_npz -max_total_time=60 tests/fuzz/corpus_npz
*/
#include <stdint.h>
#include "tensor/io/npy.h"
#include "fuzz_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nt_io_set *s = nt_npz_parse(data, size, "<fuzz>");
  fuzz_check_set(s);
  nt_io_set_free(s);
  return 0;
}
