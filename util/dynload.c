/*
** dynload.c — the loader behind util/dynload.h's shims: dlopen once per
** library, dlsym per entry point, and the clear fatal error when either
** fails (which library, why, which package).
*/
#include "util/dynload.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say_cannot_load(const NbDynLib *l, const char *why) {
  fprintf(stderr, "nabla: cannot load %s (%s): %s\n", l->path, l->what, why && *why ? why : "unknown error");
}

static __attribute__((noreturn)) void fatal(const NbDynLib *l, const char *why) {
  fflush(NULL);
  say_cannot_load(l, why);
  _exit(127);
}

/* RTLD_LOCAL: the library's symbols must not interpose on anything else the
** process loads later; RTLD_NOW: a broken install fails here, not mid-call.
** The reason is kept: dlerror() is per thread, and the thread that reports the
** failure may not be the one that ran this once. */
void nb_dynlib_open(NbDynLib *l) {
  l->h = dlopen(l->path, RTLD_NOW | RTLD_LOCAL);
  if (!l->h) {
    const char *e = dlerror();
    snprintf(l->err, sizeof l->err, "%s", e ? e : "unknown error");
  }
}

void *nb_dynsym(NbDynLib *l, const char *name) {
  pthread_once(&l->once, l->open);
  if (!l->h) fatal(l, l->err);
  void *p = dlsym(l->h, name);
  if (!p) fatal(l, dlerror());
  return p;
}

/* the linker's bounds of the nb_dynlibs section (every NB_DYNLIB's entry);
** weak: an executable that declares none has no such section */
extern NbDynLib *const __start_nb_dynlibs[] __attribute__((weak));
extern NbDynLib *const __stop_nb_dynlibs[] __attribute__((weak));

int nb_dynlib_require_all(void) {
  int missing = 0;
  for (NbDynLib *const *p = __start_nb_dynlibs; p && p < __stop_nb_dynlibs; p++) {
    NbDynLib *l = *p;
    pthread_once(&l->once, l->open);
    if (l->h) continue;
    /* SLEEF is declared once per vector width: one line per library */
    int seen = 0;
    for (NbDynLib *const *q = __start_nb_dynlibs; q < p && !seen; q++) seen = !strcmp((*q)->path, l->path);
    if (!seen) { say_cannot_load(l, l->err); missing++; }
  }
  return missing;
}
