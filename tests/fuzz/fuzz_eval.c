/*
** fuzz_eval.c — libFuzzer target: runs arbitrary bytes as a Nabla program.
**
** Each input gets a fresh VM whose output sink discards everything, with a
** step limit so that `while true {}` ends with an error instead of a hang.
** The source is passed with its exact length and is NOT NUL-terminated, so
** ASan also catches reads past the end of the buffer.
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_eval -max_total_time=60 CORPUS_DIR
** (tools/run-tests.sh does this on a temporary copy of tests/fuzz/corpus/).
** The run goes through the bytecode compiler and VM (the default engine,
** under the step limit); nb_disassemble then compiles every function of the
** input, called or not.  The engine is pinned to the VM whatever the
** environment says (NABLA_ENGINE=walker would leave the compiler untested),
** and NABLA_STEP_LIMIT cannot raise the budget.
**
** The corpus (tests/fuzz/corpus/) has one small program per feature the
** compiler handles separately: closures and captured variables, try/catch and
** re-raise, loops with break/continue, spreads and variadics, defaults and
** keyword arguments, recursion (mutual, deep, unbounded), records with
** uniform call syntax, the walker fallback (no_grad, spread), the step limit.
*/
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "lang/nabla.h"

static void discard_write(nb_Sink *s, int stream, const char *data, size_t len) {
  (void)s; (void)stream;
  /* touch the bytes so that a bad pointer/length is noticed by ASan */
  volatile unsigned char sum = 0;
  for (size_t i = 0; i < len; i++) sum += (unsigned char)data[i];
  (void)sum;
}

static void discard_display(nb_Sink *s, const nb_MimeItem *items, int nitems,
                            const char *display_id, int update) {
  (void)s; (void)display_id; (void)update;
  for (int i = 0; i < nitems; i++) discard_write(s, NB_STDOUT, items[i].data, items[i].len);
}

static void discard_clear(nb_Sink *s, int wait) { (void)s; (void)wait; }

static char *discard_input(nb_Sink *s, const char *prompt, int password) {
  (void)s; (void)prompt; (void)password;
  return NULL;   /* no input available: input() raises an error */
}

static nb_Sink discard_sink = {
  .write = discard_write,
  .display = discard_display,
  .clear = discard_clear,
  .input = discard_input,
  .ud = NULL,
};

/* Each input runs at most this many loop iterations and calls (the step
** limit is an uncatchable error), so `while true {}` and unbounded recursion
** in a loop end quickly. */
enum { FUZZ_STEP_LIMIT = 100000 };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  /* the engine is chosen once per process from the environment: keep it the VM */
  unsetenv("NABLA_ENGINE");
  unsetenv("NABLA_STEP_LIMIT");
  unsetenv("NABLA_VM_STATS");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nb_VM *vm = nb_vm_new(&discard_sink);
  if (!vm) return 0;
  nb_vm_set_step_limit(vm, FUZZ_STEP_LIMIT);
  nb_run(vm, (const char *)data, size, "fuzz", 0);
  /* compile every function and statement of the input, called or not (the
  ** run compiles a function only when it is first called) */
  free(nb_disassemble(vm, (const char *)data, size, "fuzz"));
  nb_vm_free(vm);
  return 0;
}
