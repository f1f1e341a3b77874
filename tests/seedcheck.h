/*
** seedcheck.h — the PASS/FAIL line of a standalone C test program
** (tools/run-tests.sh's contract) for programs whose inputs are random: a
** failure names the run's seed.  Header-only; each program sets `seed` and
** returns `fails != 0`.
*/
#ifndef NABLA_TESTS_SEEDCHECK_H
#define NABLA_TESTS_SEEDCHECK_H
#include <stdarg.h>
#include <stdio.h>

static int fails;
static unsigned seed;
static void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *name, const char *fmt, ...) {
  if (ok) { printf("PASS: %s\n", name); return; }
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: %s: ", name);
  vprintf(fmt, ap);
  printf(" (seed %u)\n", seed);
  va_end(ap);
  fails++;
}
#endif
