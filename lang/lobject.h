/*
** lobject.h — values and heap objects of the language.
** A value is a 16-byte tagged union; heap objects start with a refcount
** header.  Reference counting frees a value (a multi-gigabyte tensor too) the
** moment its last reference goes.  Tensors are owned by tensor/ and counted
** with nt_retain/nt_release; everything else uses nb_Obj.rc.
*/
#ifndef LOBJECT_H
#define LOBJECT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum {
  NB_TUNDEF = 0,   /* internal: an unassigned global slot; never visible to programs */
  NB_TNIL, NB_TBOOL, NB_TNUM, NB_TBUILTIN,   /* unboxed */
  NB_TSTR, NB_TLIST, NB_TREC, NB_TFUNC, NB_TMODULE, NB_TRANGE, NB_TCELL,
  NB_TTENSOR, NB_THANDLE,
} nb_Type;
#define NB_FIRST_OBJ NB_TSTR

/* Containers (lists, records, functions, cells) are also linked into the
** cycle collector's list (gc_prev/gc_next); see nbO_collect. */
typedef struct nb_Obj {
  int32_t rc; uint8_t type; uint8_t gcflags; int32_t gc_refs;
  struct nb_Obj *gc_prev, *gc_next;
} nb_Obj;

typedef struct nb_Builtin nb_Builtin;
typedef struct nb_Value {
  uint64_t t;   /* a full word: writing a byte tag then copying the value stalls store forwarding */
  union { bool b; double n; nb_Obj *o; void *p; const nb_Builtin *bi; } u;
} nb_Value;

typedef struct nb_Str {
  nb_Obj h;
  uint32_t len, hash;
  bool interned;
  char data[];          /* NUL-terminated; may also contain NULs (bytes) */
} nb_Str;

typedef struct nb_List { nb_Obj h; int n, cap; nb_Value *items; } nb_List;

/* Records keep insertion order; keys are interned so lookup compares pointers. */
typedef struct nb_Rec { nb_Obj h; int n, cap; nb_Str **keys; nb_Value *vals; } nb_Rec;

typedef struct nb_Range { nb_Obj h; double start, stop, step; } nb_Range;
typedef struct nb_Cell { nb_Obj h; nb_Value v; } nb_Cell;

/* A native resource (file, worker group, ...): freed by its own finalizer;
** never serialized. */
typedef struct nb_Handle {
  nb_Obj h;
  const char *kind;
  void *ptr;
  void (*finalize)(void *ptr);
} nb_Handle;

struct nb_Proto; struct nb_Module;
typedef struct nb_Func {
  nb_Obj h;
  struct nb_Proto *proto;
  struct nb_Module *mod;     /* whose globals the body sees */
  int ncaps;
  nb_Cell *caps[];           /* captured variables of enclosing functions */
} nb_Func;

/* ---- constructors ---- */
static inline nb_Value nb_nil(void) { nb_Value v; v.t = NB_TNIL; v.u.p = NULL; return v; }
static inline nb_Value nb_undef(void) { nb_Value v; v.t = NB_TUNDEF; v.u.p = NULL; return v; }
static inline nb_Value nb_bool(bool b) { nb_Value v; v.t = NB_TBOOL; v.u.p = NULL; v.u.b = b; return v; }
static inline nb_Value nb_num(double n) { nb_Value v; v.t = NB_TNUM; v.u.n = n; return v; }
static inline nb_Value nb_obj(uint8_t t, void *o) { nb_Value v; v.t = t; v.u.p = o; return v; }
#define nb_isobj(v) ((v).t >= NB_FIRST_OBJ)
#define nb_str(v)   ((nb_Str *)(v).u.p)
#define nb_list(v)  ((nb_List *)(v).u.p)
#define nb_rec(v)   ((nb_Rec *)(v).u.p)
#define nb_func(v)  ((nb_Func *)(v).u.p)

/* ---- reference counting ---- */
void nbO_retain_tensor(void *t);
void nbO_free(nb_Value v);   /* called when a count reaches zero */
static inline void nb_incref(nb_Value v) {
  if (nb_isobj(v)) { if (v.t == NB_TTENSOR) nbO_retain_tensor(v.u.p); else v.u.o->rc++; }
}
void nbO_release_tensor(void *t);
static inline void nb_decref(nb_Value v) {
  if (nb_isobj(v)) {
    if (v.t == NB_TTENSOR) nbO_release_tensor(v.u.p);
    else if (--v.u.o->rc == 0) nbO_free(v);
  }
}
/* replaces *slot by v (taking over v's reference) */
static inline void nb_store(nb_Value *slot, nb_Value v) { nb_Value old = *slot; *slot = v; nb_decref(old); }

/* ---- cycle collection ----
** Reference counting cannot free a record that contains itself or a local
** recursive function (its cell holds the closure that holds the cell).
** nbO_collect finds containers unreachable from outside the container graph
** (trial deletion, as CPython's gc) and frees them. */
void nbO_track(nb_Obj *o);                 /* called once by container constructors */
size_t nbO_collect(void);                  /* returns the number of objects freed */
size_t nbO_tracked(void);

/* ---- strings ---- */
nb_Str *nbS_new(const char *s, size_t len);
nb_Str *nbS_cstr(const char *s);
nb_Str *nbS_intern(const char *s, size_t len);   /* returns a new reference */
nb_Str *nbS_intern_str(nb_Str *s);                /* interned twin of s (new reference) */
nb_Str *nbS_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint32_t nbS_hash(const char *s, size_t len);
void nbS_intern_free_all(void);
static inline nb_Value nb_strv(nb_Str *s) { return nb_obj(NB_TSTR, s); }

/* A growable byte buffer used for formatting. */
typedef struct nb_Buf { char *p; size_t n, cap; } nb_Buf;
void nbB_add(nb_Buf *b, const char *s, size_t n);
void nbB_puts(nb_Buf *b, const char *s);
void nbB_printf(nb_Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nbB_putc(nb_Buf *b, char c);
char *nbB_cstr(nb_Buf *b);      /* NUL-terminates and returns b->p (still owned by b) */
void nbB_free(nb_Buf *b);

/* ---- lists and records ---- */
nb_List *nbL_new(int cap);
void nbL_push(nb_List *l, nb_Value v);   /* takes the reference */
nb_Rec *nbR_new(int cap);
/* returns the index of key (interned) or -1 */
int nbR_find(const nb_Rec *r, const nb_Str *key);
int nbR_find_cstr(const nb_Rec *r, const char *key);
void nbR_set(nb_Rec *r, nb_Str *key, nb_Value v);        /* key interned; takes v's reference; retains key */
void nbR_set_cstr(nb_Rec *r, const char *key, nb_Value v);
nb_Value nbR_get_cstr(const nb_Rec *r, const char *key); /* borrowed, NB_TUNDEF if absent */
bool nbR_remove(nb_Rec *r, const nb_Str *key);

nb_Range *nbG_range(double start, double stop, double step);
double nbG_range_len(const nb_Range *r);

nb_Handle *nbH_new(const char *kind, void *ptr, void (*finalize)(void *));

/* ---- printing and comparing ---- */
const char *nb_typename(nb_Value v);
/* shortest text that reads back to the same double */
int nb_fmtnum(char *buf, size_t size, double x);
/* repr: strings quoted (inside containers, or when top-level quote=true) */
void nb_tostring(nb_Buf *b, nb_Value v, bool quote);
bool nb_equal(nb_Value a, nb_Value b);
bool nb_truthy(nb_Value v);

#endif
