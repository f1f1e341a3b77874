/*
** dynload.h — shared libraries loaded on first use, behind their own entry
** points (the one mechanism wire/dynlib.c, tensor/io/iolibs.c,
** lang/lib/lplotpng.c and repl/rldyn.c use).
**
** Why: every library the executable links costs every process at start (the
** dynamic loader maps it and performs its data relocations, which lazy
** binding cannot defer), even a plain script that never calls it.  So the
** executable links only headers of such a library; a shim file defines the
** entry points the code calls (NB_SHIM), each resolving the real one with
** dlsym on its first call, so callers are unchanged.
**
** Missing library: the first call reports which library, why (dlerror) and
** which package provides it, and the process exits (127): nothing that needs
** the library can go on without it.  A long-lived session (the terminal REPL,
** the Jupyter kernel) must not die that way hours in, with the user's work:
** it calls nb_dynlib_require_all() as it starts, which loads every library
** a program's code may need (each NB_DYNLIB registers itself in the section
** nb_dynlibs) and lets it refuse to start, as a linked library would.  A
** library only one front end itself uses (readline: the terminal REPL loads
** it as it starts) is an NB_DYNLIB_UNLISTED.  Thread safety: the load is a
** pthread_once per library; each resolved pointer is published with an
** atomic store.
*/
#ifndef NABLA_UTIL_DYNLOAD_H
#define NABLA_UTIL_DYNLOAD_H

#include <pthread.h>

typedef struct NbDynLib {
  const char *path;    /* the soname dlopen loads */
  const char *what;    /* for the error: the library, its package, its users */
  void (*open)(void);  /* pthread_once's routine for this library */
  void *h;
  pthread_once_t once;
  char err[256];       /* dlerror() of a failed load, for whichever thread reports it */
} NbDynLib;

/* NB_DYNLIB(var, path, what): a library to load on first use */
#define NB_DYNLIB_UNLISTED(VAR, PATH, WHAT) \
  static void VAR##_open_(void); \
  static NbDynLib VAR = { PATH, WHAT, VAR##_open_, NULL, PTHREAD_ONCE_INIT, "" }; \
  static void VAR##_open_(void) { nb_dynlib_open(&VAR); }
#define NB_DYNLIB(VAR, PATH, WHAT) \
  NB_DYNLIB_UNLISTED(VAR, PATH, WHAT) \
  static NbDynLib *const VAR##_reg_ __attribute__((used, section("nb_dynlibs"))) = &VAR;

void nb_dynlib_open(NbDynLib *l);
/* loads every library in nb_dynlibs; prints the "cannot load" line of each
** that fails (once per soname) to stderr and returns how many failed */
int nb_dynlib_require_all(void);
/* the address of name in l, loading l first; exits with the error above if
** either fails */
void *nb_dynsym(NbDynLib *l, const char *name);

/* NB_SHIM(lib, return type, name, (parameters), (arguments)): name's
** definition, calling the library's through a pointer resolved once */
#define NB_SHIM_BODY_(L, NAME, CALL) \
    static __typeof__(NAME) *fp_; \
    __typeof__(NAME) *real_ = __atomic_load_n(&fp_, __ATOMIC_ACQUIRE); \
    if (__builtin_expect(!real_, 0)) { \
      real_ = (__typeof__(NAME) *)nb_dynsym(&L, #NAME); \
      __atomic_store_n(&fp_, real_, __ATOMIC_RELEASE); \
    } \
    CALL;
#define NB_SHIM(L, RT, NAME, PARAMS, ARGS) \
  RT NAME PARAMS { NB_SHIM_BODY_(L, NAME, return real_ ARGS) }
/* the void ones: no `return f(...)` */
#define NB_SHIMV(L, NAME, PARAMS, ARGS) \
  void NAME PARAMS { NB_SHIM_BODY_(L, NAME, real_ ARGS) }

#endif
