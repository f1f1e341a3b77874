/*
** terror.c — thread-local error message and checked allocation.
** Library code never prints or aborts: it sets a message and fails.
*/
#include "tinternal.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static _Thread_local char errbuf[512];

const char *nt_error_msg(void) { return errbuf; }
void nt_error_clear(void) { errbuf[0] = 0; }

void nt_error_set(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
}

/* process-wide: OpenMP worker threads of a kernel read it too */
volatile int *nt_interrupt_flag_;
void nt_set_interrupt_flag(volatile int *flag) { nt_interrupt_flag_ = flag; }
bool nt_interrupt_requested(void) { return NT_INTERRUPTED(); }

void nt_error_oom(size_t nbytes) { nt_error_set("out of memory allocating %zu bytes", nbytes); }

void *nt_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) nt_error_oom(n);
  return p;
}

void *nt_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) nt_error_oom(n * size);
  return p;
}
