/*
** fuzz_json.c — libFuzzer target: the JSON reader and writer (lang/lib/ljson.c
** over jansson): load_json (the file form, through a memfd),
** json_parse (the string form) and json_format.
**
** The input is the JSON text.  Checked on every input (abort() when broken):
**   - the file form and the string form agree: both fail, or both give
**     the same value (compared as json_format's text); the string form runs
**     when the bytes are UTF-8 (read_text refuses others, and jansson
**     refuses such a document anyway);
**   - read -> write -> read is a fixed point: json_format(json_parse(t)) is
**     t for t the compact text, and the indented text reads back to it.
** (save_json is json_format plus an atomic file write: not run here, to keep
** the fuzzer off the disk; tests/stdlib/test_readers.py covers it.)
** Errors that bad input explains (ValueError: syntax, depth, an integer
** beyond 2^53, ...) are expected; any other error kind aborts (fuzz_vm.h).
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_json -max_total_time=60 tests/fuzz/corpus_json
*/
#include "fuzz_vm.h"   /* first: it defines _GNU_SOURCE (memfd_create) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static nb_VM *vm;
static int memfd = -1;
static char program[2048];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  char in[64];
  vm = fuzz_vm_new(200000);
  memfd = fuzz_memfd("fuzz_json", in, sizeof in);
  snprintf(program, sizeof program,
    "P = \"%s\"\n"
    "a = try { json_format(load_json(P)) } catch e { \"error \" + e.name }\n"
    "s = try { read_text(P) } catch { nil }\n"
    "if s != nil {\n"
    "  b = try { json_format(json_parse(s)) } catch e { \"error \" + e.name }\n"
    "  assert(a == b, \"the file form and the string form differ: \" + a + \" vs \" + b)\n"
    "}\n"
    "v = load_json(P)\n"    /* a bad document ends the run here, as expected */
    "t = json_format(v)\n"
    "assert(json_format(json_parse(t)) == t, \"compact text does not read back to itself\")\n"
    "assert(json_format(json_parse(json_format(v, 2))) == t, \"indented text reads back differently\")\n"
    , in);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fuzz_memfd_set(memfd, data, size)) return 0;
  fuzz_vm_run_checked(vm, program);
  return 0;
}
