/*
** fuzz_vm.h — what the fuzz targets that run nabla code over a crafted file
** share (fuzz_load, fuzz_csv, fuzz_json): an output sink that discards
** everything (touching every byte, so a bad pointer or length shows under
** ASan), one VM per process with a step limit, the fuzz input in a memfd
** read through /proc/self/fd/N (the whole path a real file takes), and a run
** whose only allowed errors are the ones bad input may cause.
*/
#ifndef FUZZ_VM_H
#define FUZZ_VM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lang/nabla.h"

static void fuzz_discard_write(nb_Sink *s, int stream, const char *data, size_t len) {
  (void)s; (void)stream;
  volatile unsigned char sum = 0;   /* touch the bytes: a bad pointer/length shows */
  for (size_t i = 0; i < len; i++) sum += (unsigned char)data[i];
  (void)sum;
}
static void fuzz_discard_display(nb_Sink *s, const nb_MimeItem *items, int nitems, const char *display_id, int update) {
  (void)display_id; (void)update;
  for (int i = 0; i < nitems; i++) fuzz_discard_write(s, NB_STDOUT, items[i].data, items[i].len);
}
static void fuzz_discard_clear(nb_Sink *s, int wait) { (void)s; (void)wait; }
static char *fuzz_discard_input(nb_Sink *s, const char *prompt, int password) { (void)s; (void)prompt; (void)password; return NULL; }
static nb_Sink fuzz_discard_sink = { .write = fuzz_discard_write, .display = fuzz_discard_display,
                                     .clear = fuzz_discard_clear, .input = fuzz_discard_input, .ud = NULL };

/* One VM for the process (a fresh one per input would dominate the time);
** the step limit ends a program the input makes loop long. */
static inline nb_VM *fuzz_vm_new(uint64_t step_limit) {
  unsetenv("NABLA_ENGINE");
  unsetenv("NABLA_STEP_LIMIT");
  nb_VM *vm = nb_vm_new(&fuzz_discard_sink);
  if (!vm) abort();
  if (step_limit) nb_vm_set_step_limit(vm, step_limit);
  return vm;
}

/* A memfd for the input; *path gets "/proc/self/fd/N". */
static inline int fuzz_memfd(const char *name, char *path, size_t pathsz) {
  int fd = memfd_create(name, 0);
  if (fd < 0) abort();
  snprintf(path, pathsz, "/proc/self/fd/%d", fd);
  return fd;
}
static inline int fuzz_memfd_set(int fd, const void *data, size_t len) {
  return ftruncate(fd, 0) == 0 && pwrite(fd, data, len, 0) == (ssize_t)len ? 0 : -1;
}

/* Runs src; an error whose kind bad input explains (a ValueError naming the
** problem, an IOError, a MemoryError, the step limit) is fine, any other
** (an AssertionError from an invariant the program checks, a KeyError or
** TypeError from a result of the wrong shape, a syntax error in the program
** the target built) is a finding: printed, then abort().  FUZZ_VM_VERBOSE=1
** prints every error (to see how far the seeds get). */
static inline void fuzz_vm_run_checked(nb_VM *vm, const char *src) {
  if (nb_run(vm, src, strlen(src), "fuzz", 0) == 0) return;
  const nb_ErrorInfo *e = nb_last_error(vm);
  if (!e) return;
  if (getenv("FUZZ_VM_VERBOSE")) fprintf(stderr, "fuzz: %s\n", e->report ? e->report : e->name);   /* why an input stopped */
  static const char *const allowed[] = { "ValueError", "IOError", "MemoryError", "StepLimit", "Interrupted" };
  for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
    if (e->name && !strcmp(e->name, allowed[i])) return;
  fprintf(stderr, "fuzz: unexpected %s\n%s\nprogram:\n%s\n", e->name ? e->name : "?", e->report ? e->report : "", src);
  abort();
}

#endif
