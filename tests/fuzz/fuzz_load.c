/*
** fuzz_load.c — libFuzzer target: `load()`'s record-building layer
** (lang/lib/ltio.c: the nested record from tensor names and the nabla:*
** metadata — values, empty boxes, ties), which fuzz_safetensors cannot reach
** (its random bytes rarely make a header the parser accepts).
**
** The input is text, one entry a line:
**   @NAME        a tensor called NAME (one u8 element)
**   KEY=VALUE    a metadata entry (no '=': the value is empty)
** so the fuzzer mutates names and metadata directly.  The entries become a
** real safetensors image (nt_st_serialize; an image the writer refuses, e.g.
** duplicate tensor names, is skipped) in a memfd, and `load` reads it through
** /proc/self/fd/N: the whole path a downloaded checkpoint takes.  The result
** is printed (walking what was built) and dropped.
**
** One VM serves every input; its output sink discards everything (fuzz_vm.h).
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_load -max_total_time=60 tests/fuzz/corpus_load
** The corpus holds the crafted file of issue 33 (a path bound as a record,
** then as a number: heap corruption) and random-metadata crashers.
*/
#include "fuzz_vm.h"   /* first: it defines _GNU_SOURCE (memfd_create) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/io/safetensors.h"

static nb_VM *vm;
static int memfd = -1;
static char program[128];

enum { MAX_ENTRIES = 256 };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  char path[64];
  vm = fuzz_vm_new(0);
  memfd = fuzz_memfd("fuzz_load", path, sizeof path);
  /* print the record (walks every value built), then drop it */
  snprintf(program, sizeof program, "print(load(\"%s\"))", path);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nt_io_array arrays[MAX_ENTRIES];
  char *keys[MAX_ENTRIES], *vals[MAX_ENTRIES];
  unsigned char one[MAX_ENTRIES];
  size_t na = 0, nm = 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  for (char *line = text, *next; line && na + nm < MAX_ENTRIES; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    if (!*line) continue;
    if (*line == '@') {
      nt_io_array *a = &arrays[na];
      memset(a, 0, sizeof *a);
      one[na] = (unsigned char)na;
      a->name = line + 1; a->dtype = NT_IO_U8; a->ndim = 1; a->shape[0] = 1;
      a->data = &one[na]; a->nbytes = 1;
      na++;
    } else {
      char *eq = strchr(line, '=');
      if (eq) *eq = 0;
      keys[nm] = line; vals[nm] = eq ? eq + 1 : line + strlen(line);
      nm++;
    }
  }
  size_t len;
  void *img = nt_st_serialize(arrays, na, (const char *const *)keys, (const char *const *)vals, nm, &len);
  free(text);
  if (!img) return 0;   /* an image the writer refuses (duplicate names, bad UTF-8) */
  if (fuzz_memfd_set(memfd, img, len) == 0)
    nb_run(vm, program, strlen(program), "fuzz", 0);
  free(img);
  return 0;
}
