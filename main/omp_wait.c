/*
** omp_wait.c — makes libgomp's idle threads wait (almost) passively, for the
** `nabla` executable only.
**
** Why it exists: OpenMP threads must not spin while they wait.  libgomp's
** default is to busy-wait ~300k iterations (milliseconds) after every
** parallel region; a training step runs hundreds of regions (BLAS calls and
** tensor/'s loops), so an idle worker keeps a core busy all the time.  On a
** machine with other load the spinning thread takes the CPU the main thread
** or a preempted team mate needs and every barrier waits a time slice: 5-10x
** slower steps on 2 cores.
**
** Why it works this way: libgomp reads OMP_WAIT_POLICY once, in its
** constructor, before main (and setenv from a preinit function is undone when
** libc's own init resets environ), so instead the executable interposes
** getenv: ELF resolves libgomp's getenv call to this definition, which
** answers 3000 for GOMP_SPINCOUNT unless the user set OMP_WAIT_POLICY or
** GOMP_SPINCOUNT, and only until main starts (main calls
** nabla_omp_wait_main_started first, so scripts' getenv sees the real
** environment).  Everything else is the plain environment lookup (libc's own
** calls do not come here).  This replaces a re-exec with the variable set,
** which cost a second process start (~5 ms).  3000 spins (tens of
** microseconds) before sleeping: fully passive (0) made back-to-back regions
** pay a futex wake-up each, 15% slower MLP steps on an idle machine, while
** 3000 measured the same as passive on the busy one and as libgomp's default
** on the idle one.
**
** Why it is its own file, linked into the executable and not into libnabla:
** replacing a libc symbol is a program's decision, not a library's; the
** tests and benchmarks that link libnabla keep libgomp's own defaults, as
** they always have, and no other module depends on the front end at link
** time.  tests/repl/test_omp_wait.py checks the policy.
*/
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "main/omp_wait.h"

extern char **environ;

/* the first byte first: libgomp looks up ~60 variables while the process
** starts, and a strncmp per variable and environment entry was a tenth of a
** plain script's startup */
static char *env_lookup(const char *name) {
  size_t n = strlen(name);
  if (!n) return NULL;
  for (char **e = environ; e && *e; e++)
    if ((*e)[0] == name[0] && !strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

static bool main_started;

void nabla_omp_wait_main_started(void) { main_started = true; }

char *getenv(const char *name) {
  char *v = env_lookup(name);
  if (!v && !main_started && !strcmp(name, "GOMP_SPINCOUNT") && !env_lookup("OMP_WAIT_POLICY")) v = (char *)"3000";
  return v;
}
