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
** the library can go on without it.  Thread safety: the load is a
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
} NbDynLib;

/* NB_DYNLIB(var, path, what): a library to load on first use */
#define NB_DYNLIB(VAR, PATH, WHAT) \
  static void VAR##_open_(void); \
  static NbDynLib VAR = { PATH, WHAT, VAR##_open_, NULL, PTHREAD_ONCE_INIT }; \
  static void VAR##_open_(void) { nb_dynlib_open(&VAR); }

void nb_dynlib_open(NbDynLib *l);
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
