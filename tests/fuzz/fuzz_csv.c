/*
** fuzz_csv.c — libFuzzer target: the numeric CSV reader (tensor/io/csv.c).
** The first byte picks the delimiter (its low two bits: "0" ",", "1" ";",
** "2" tab, "3" "|"); the rest is the
** file.  An accepted table must hold nrows * ncols values (all read here).
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_csv -max_total_time=60 tests/fuzz/corpus_csv
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tensor/io/csv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const char delims[4] = {',', ';', '\t', '|'};
  char delim = delims[data[0] & 3];
  nt_csv *c = nt_csv_parse((const char *)data + 1, size - 1, delim, "<fuzz>");
  if (c) {
    volatile double sum = 0;
    for (size_t i = 0; i < c->nrows * c->ncols; i++) sum += c->data[i];
    if (c->names) for (size_t i = 0; i < c->ncols; i++) sum += (double)strlen(c->names[i]);
    (void)sum;
  }
  nt_csv_free(c);
  return 0;
}
