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
/* The first 8 bytes are the tag: the type t and, for numbers, the kind
** (NB_KINT = 0 or NB_KFLOAT), a separate 32-bit field so `v.t == NB_TNUM`
** holds for both kinds; every other type has kind 0.  A number's value is
** always the double u.n: an int is an integral double (past 2^53, or inf/nan
** after overflow, a double that counts as a float wherever a tensor dtype is
** chosen, as before).  Hot paths read t and kind as 32-bit fields: an 8-byte
** read of a tag written as two 4-byte stores would stall store forwarding. */
enum { NB_KINT = 0, NB_KFLOAT = 1 };
typedef struct nb_Value {
  uint32_t t;      /* nb_Type */
  uint32_t kind;   /* numbers: NB_KINT or NB_KFLOAT; 0 for every other type */
  union { bool b; double n; nb_Obj *o; void *p; const nb_Builtin *bi; } u;
} nb_Value;

typedef struct nb_Str {
  nb_Obj h;
  uint32_t len, hash;   /* hash: valid when hashed (nbS_hashof); interned strings always are */
  bool interned, hashed;
  char data[];          /* NUL-terminated; may also contain NULs (bytes) */
} nb_Str;

typedef struct nb_List { nb_Obj h; int n, cap; nb_Value *items; } nb_List;

/* Records keep insertion order; keys are interned so lookup compares pointers. */
/* keys (interned) and vals in insertion order; index: a hash index over the
** first `indexed` keys, kept by lobject.c once a record is used as a
** dictionary (more than a few keys), NULL before */
typedef struct nb_Rec { nb_Obj h; int n, cap; nb_Str **keys; nb_Value *vals; int32_t *index; int icap, indexed; } nb_Rec;

/* start + k*step for k = 0, 1, ... below stop; kind: of the values (float
** when start or step is), stopkind: of stop (for printing) */
typedef struct nb_Range { nb_Obj h; double start, stop, step; uint8_t kind, stopkind; } nb_Range;
typedef struct nb_Cell { nb_Obj h; nb_Value v; } nb_Cell;

/* A native resource (file, worker group, ...): freed by its own finalizer;
** never serialized. */
typedef struct nb_Handle {
  nb_Obj h;
  const char *kind;
  void *ptr;
  void (*finalize)(void *ptr);
} nb_Handle;

struct nb_Proto; struct nb_Module; struct nb_Code;
typedef struct nb_Func {
  nb_Obj h;
  struct nb_Proto *proto;
  struct nb_Module *mod;     /* whose globals the body sees */
  /* proto->code once compiled (NULL before) and what a call needs of it,
  ** copied here (nbV_func_set_code) so that the VM's call reads them all
  ** from the function in parallel, not through proto and code (lexec.c) */
  struct nb_Code *code;
  const uint32_t *entry;     /* code->code + code->body */
  int fastcall;              /* code->fastcall, -1 before compiling */
  int nregs, nlocals;        /* code->nregs, code->nlocals */
  int ncaps;
  nb_Cell *caps[];           /* captured variables of enclosing functions */
} nb_Func;

/* ---- constructors ---- */
static inline nb_Value nb_nil(void) { nb_Value v; v.t = NB_TNIL; v.kind = 0; v.u.p = NULL; return v; }
static inline nb_Value nb_undef(void) { nb_Value v; v.t = NB_TUNDEF; v.kind = 0; v.u.p = NULL; return v; }
static inline nb_Value nb_bool(bool b) { nb_Value v; v.t = NB_TBOOL; v.kind = 0; v.u.p = NULL; v.u.b = b; return v; }
/* numbers: Python's int and float.  nb_int for counts, sizes, indices and
** integer results; nb_flt for measurements and results of float math.  An
** int has no negative zero (Python's 0 * -1 is 0): + 0.0 turns -0 into 0. */
static inline nb_Value nb_int(double n) { nb_Value v; v.t = NB_TNUM; v.kind = NB_KINT; v.u.n = n + 0.0; return v; }
static inline nb_Value nb_flt(double n) { nb_Value v; v.t = NB_TNUM; v.kind = NB_KFLOAT; v.u.n = n; return v; }
static inline nb_Value nb_numk(double n, uint32_t kind) { nb_Value v; v.t = NB_TNUM; v.kind = kind; v.u.n = kind == NB_KINT ? n + 0.0 : n; return v; }
/* before numbers had kinds: an int (kept so code written then still builds) */
__attribute__((deprecated("choose nb_int or nb_flt")))
static inline nb_Value nb_num(double n) { return nb_int(n); }
#define nb_isfloat(v) ((v).kind != NB_KINT)        /* meaningful for numbers */
#define nb_isint(v)   ((v).t == NB_TNUM && (v).kind == NB_KINT)
static inline nb_Value nb_builtinv(const nb_Builtin *bi) { nb_Value v; v.t = NB_TBUILTIN; v.kind = 0; v.u.bi = bi; return v; }
static inline nb_Value nb_obj(uint8_t t, void *o) { nb_Value v; v.t = t; v.kind = 0; v.u.p = o; return v; }
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
static inline void nb_store(nb_Value *slot, nb_Value v) {
  if (nb_isobj(*slot)) { nb_Value old = *slot; *slot = v; nb_decref(old); }   /* the old value read only when it counts */
  else *slot = v;
}

/* ---- cycle collection ----
** Reference counting cannot free a record that contains itself or a local
** recursive function (its cell holds the closure that holds the cell).
** nbO_collect finds containers unreachable from outside the container graph
** (trial deletion, as CPython's gc) and frees them. */
void nbO_track(nb_Obj *o);                 /* called once by container constructors */
size_t nbO_collect(void);                  /* returns the number of objects freed */
size_t nbO_tracked(void);
/* Collection by allocation pressure (see lobject.c): nbO_gc_due says one was
** requested; the request also sets *poll, the running VM's poll flag.  The
** tracked list, counts and thresholds belong to the global state of the VM
** bound to the calling thread (nb_G(), lvm.h), as do the intern table and the
** queue nbO_free drains: the functions below that take no VM reach it that
** way. */
#include <signal.h>
void nbO_gc_attach(volatile sig_atomic_t *poll);
/* Allocation that cannot report failure to a caller: on failure the process's
** reserve is given back and the allocation retried, and the VM's next poll
** raises MemoryError (nbO_memory_low_take); only a failure with the reserve
** already gone stops the process.  nbO_reserve_take (re)takes the reserve. */
void *nbO_xmalloc(size_t n);
void *nbO_xrealloc(void *p, size_t n);
void *nbO_xcalloc(size_t n, size_t size);
void nbO_reserve_take(void);
bool nbO_memory_low_take(void);
bool nbO_gc_due(void);

/* ---- strings ---- */
nb_Str *nbS_new(const char *s, size_t len);
nb_Str *nbS_cstr(const char *s);
nb_Str *nbS_intern(const char *s, size_t len);   /* returns a new reference; the bound VM's table */
nb_Str *nbS_intern_str(nb_Str *s);                /* interned twin of s (new reference) */
nb_Str *nbS_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint32_t nbS_hash(const char *s, size_t len);
/* s's hash, computed on first use: building a long string (s = s + x in a
** loop, str of a large list) must not also pass over all of its bytes
** again to hash them when nothing may ever look it up */
static inline uint32_t nbS_hashof(const nb_Str *s) {
  if (!s->hashed) { nb_Str *w = (nb_Str *)s; w->hash = nbS_hash(s->data, s->len); w->hashed = true; }
  return s->hash;
}
void nbS_intern_free_all(void);   /* the bound state's table (nb_vm_free does it for a VM) */
static inline nb_Value nb_strv(nb_Str *s) { return nb_obj(NB_TSTR, s); }

/* A growable byte buffer used for formatting.  When the memory to grow it
** is not there, the process stops ("out of memory") — unless the buffer is
** `checked` (NB_BUF_CHECKED): then it keeps what it has, drops what comes
** after and sets oom, and its owner must turn that into a MemoryError
** (nbB_check, nbS_from_buf) before it uses the text, never hand on a
** truncated one. */
typedef struct nb_Buf { char *p; size_t n, cap; bool checked, oom; } nb_Buf;
#define NB_BUF_CHECKED { .checked = true }
void nbB_add(nb_Buf *b, const char *s, size_t n);
void nbB_puts(nb_Buf *b, const char *s);
void nbB_printf(nb_Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nbB_putc(nb_Buf *b, char c);
char *nbB_cstr(nb_Buf *b);      /* NUL-terminates and returns b->p (still owned by b) */
void nbB_free(nb_Buf *b);

/* ---- lists and records ---- */
nb_List *nbL_new(int cap);
void nbL_push(nb_List *l, nb_Value v);   /* takes the reference */
/* room for n items in all (geometric growth); false, the list unchanged,
** when the memory is not there */
bool nbL_try_reserve(nb_List *l, size_t n);
nb_Rec *nbR_new(int cap);
/* returns the index of key (interned) or -1 */
int nbR_find(const nb_Rec *r, const nb_Str *key);
int nbR_find_cstr(const nb_Rec *r, const char *key);
void nbR_set(nb_Rec *r, nb_Str *key, nb_Value v);        /* key interned; takes v's reference; retains key */
void nbR_set_cstr(nb_Rec *r, const char *key, nb_Value v);
nb_Value nbR_get_cstr(const nb_Rec *r, const char *key); /* borrowed, NB_TUNDEF if absent */
/* r's special field key (__call, __next) when it holds code: a function, a
** builtin, or a record whose __call is one; else NB_TUNDEF (borrowed).  Only
** such a field makes a record callable or an iterator: data (a JSON key, a
** CSV column named __next) leaves it an ordinary record. */
nb_Value nbR_method_cstr(const nb_Rec *r, const char *key);
bool nbR_remove(nb_Rec *r, const nb_Str *key);

nb_Range *nbG_range(double start, double stop, double step);   /* int kinds */
nb_Range *nbG_range_k(double start, double stop, double step, int kind, int stopkind);
double nbG_range_len(const nb_Range *r);

nb_Handle *nbH_new(const char *kind, void *ptr, void (*finalize)(void *));

/* ---- printing and comparing ---- */
const char *nb_typename(nb_Value v);
/* shortest text that reads back to the same double; integral values
** without a point (an int's form) */
int nb_fmtnum(char *buf, size_t size, double x);
/* a float as Python's repr writes it: 3.0, 0.1, 1e+20, nan, inf */
int nb_fmtflt(char *buf, size_t size, double x);
/* a number value in its kind's form */
int nb_fmtval(char *buf, size_t size, nb_Value v);
/* strtod, and the kind the text was written in: a float when it has a
** point, an exponent, inf or nan (as a literal would); *end as strtod's */
nb_Value nb_parsenum(const char *s, char **end);
/* repr: strings quoted (inside containers, or when top-level quote=true) */
void nb_tostring(nb_Buf *b, nb_Value v, bool quote);
/* The limits on what input controls: string bytes (lengths are 32-bit),
** list items, nesting walked by equality.  Past them, an error names the
** operation and the size. */
#define NB_MAX_STR ((size_t)INT32_MAX)
#define NB_MAX_LIST ((size_t)1 << 28)
#define NB_MAX_NEST 2000000
/* ==: 0 (NB_OK) with *out, or an error (nested past NB_MAX_NEST) */
typedef struct nb_VM nb_VM;
int nbO_equal(nb_VM *vm, nb_Value a, nb_Value b, bool *out);
bool nb_truthy(nb_Value v);

#endif
