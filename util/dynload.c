/*
** dynload.c — the loader behind util/dynload.h's shims: dlopen once per
** library, dlsym per entry point, and the clear fatal error when either
** fails (which library, why, which package).
*/
#include "util/dynload.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static __attribute__((noreturn)) void fatal(const NbDynLib *l, const char *why) {
  fflush(NULL);
  fprintf(stderr, "nabla: cannot load %s (%s): %s\n", l->path, l->what, why ? why : "unknown error");
  _exit(127);
}

/* RTLD_LOCAL: the library's symbols must not interpose on anything else the
** process loads later; RTLD_NOW: a broken install fails here, not mid-call */
void nb_dynlib_open(NbDynLib *l) { l->h = dlopen(l->path, RTLD_NOW | RTLD_LOCAL); }

void *nb_dynsym(NbDynLib *l, const char *name) {
  pthread_once(&l->once, l->open);
  if (!l->h) fatal(l, dlerror());
  void *p = dlsym(l->h, name);
  if (!p) fatal(l, dlerror());
  return p;
}
