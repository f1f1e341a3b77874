/*
** fuzz_deserialize.c — libFuzzer target: `deserialize` (lang/lserial.c) on
** arbitrary bytes, the data a worker or a session receives from the wire.
**
** The bytes go to nbZ_deserialize in an exact-size heap copy, so ASan sees any
** read past the end.  A value that decodes is serialized again, printed and
** compared with itself, so what the decoder built is walked by the rest of
** the runtime too (a half-built list or record would show there).
**
** One VM serves every input (importing stdlib modules for 'K'/'M' tags once,
** not per input); its output sink discards everything.
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_deserialize -max_total_time=60 tests/fuzz/corpus_deserialize
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lang/nbapi.h"

static void discard_write(nb_Sink *s, int stream, const char *data, size_t len) {
  (void)s; (void)stream;
  volatile unsigned char sum = 0;   /* touch the bytes: a bad pointer/length shows */
  for (size_t i = 0; i < len; i++) sum += (unsigned char)data[i];
  (void)sum;
}
static void discard_display(nb_Sink *s, const nb_MimeItem *items, int nitems, const char *display_id, int update) {
  (void)display_id; (void)update;
  for (int i = 0; i < nitems; i++) discard_write(s, NB_STDOUT, items[i].data, items[i].len);
}
static void discard_clear(nb_Sink *s, int wait) { (void)s; (void)wait; }
static char *discard_input(nb_Sink *s, const char *prompt, int password) { (void)s; (void)prompt; (void)password; return NULL; }
static nb_Sink discard_sink = { .write = discard_write, .display = discard_display, .clear = discard_clear, .input = discard_input, .ud = NULL };

static nb_VM *vm;

/* walks a decoded value the way a receiver would use it */
static void exercise(nb_Value v) {
  nb_Buf b = {0};
  if (nbZ_serialize(vm, v, &b)) nb_error_clear(vm);
  nbB_free(&b);
  nb_tostring(&b, v, true);
  discard_write(NULL, NB_STDOUT, b.p ? b.p : "", b.n);
  nbB_free(&b);
  bool same;
  if (nbO_equal(vm, v, v, &same)) nb_error_clear(vm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!vm) vm = nb_vm_new(&discard_sink);
  char *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  nb_Value v;
  if (nbZ_deserialize(vm, copy, size, &v) == NB_OK) { exercise(v); nb_decref(v); }
  nb_error_clear(vm);
  free(copy);
  nbO_collect();   /* a closure's self-reference is a cycle: reclaim it per input */
  return 0;
}
