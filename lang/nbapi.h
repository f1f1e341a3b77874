/*
** nbapi.h — the extension API of the language: what a library of builtins
** needs, and nothing of the VM's layout (nb_VM stays opaque).
**
** Two public headers serve the code outside the interpreter's core, as
** Lua's lua.h and lauxlib.h serve its libraries:
**   nabla.h   embedding: create a VM, run source, ask about source (front ends)
**   nbapi.h   extending: values, argument checks, errors, calls, interrupts,
**             globals, builtin registration, serialization (lang/lib/, dist/
**             and anything else that adds builtins)
** lvm.h is the core's private header (syntax tree, frames, the VM struct):
** only the core files of lang/ include it.  A library that finds it needs a
** field of nb_VM asks for an accessor here instead, so the core can change
** its layout without touching the libraries.
**
** Values (lobject.h, included here) are public: a value is a 16-byte tagged
** union and its constructors, accessors and reference counting are static
** inline, because tensor small-op dispatch goes through the libraries and a
** call per accessor would show in its benchmarks.
**
** Conventions every library follows:
**   - a builtin is an nb_CFunc: it returns NB_OK with *out set (a new
**     reference), or NB_ERR after raising with nb_error/nb_error_kind;
**     args are borrowed;
**   - errors name the builtin first ("len: a bool has no length")
**     and the kind says what went wrong (TypeError, ValueError, IOError, ...);
**   - a builtin that runs long polls nb_vm_interrupted and stops with
**     nbV_interrupt_error, so Ctrl-C and a Jupyter interrupt reach it.
*/
#ifndef NBAPI_H
#define NBAPI_H

#include <signal.h>
#include "nabla.h"
#include "lobject.h"

/* ---- status of builtins and calls -------------------------------------- */
enum { NB_OK = 0, NB_ERR = 1 };

/* binary operators, as nbV_binop takes them (also the evaluator's codes) */
typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_POW, OP_MATMUL,
               OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
               OP_IDIV /* // floor division */,
               OP_BAND, OP_BOR, OP_BXOR, OP_SHL, OP_SHR /* & | ^ << >> on ints */, OP_NONE } nb_BinOp;

/* ---- builtins ------------------------------------------------------------
** A library declares a static, NULL-terminated table of nb_Builtin and
** registers it once from its opener (nbopen_<lib>, see lang/lib/linit.c, or
** dist's nbD_init):  { "name", fn, "x, axis=nil, keepdims=false", "doc" }.
** Registration parses params into the table (so it must be writable and
** live as long as the process) and adds the names to the one builtin index
** that evaluation, completion, %help and Jupyter inspect read.  A later
** registration of a name replaces the earlier one.
**
** Rule: the index is written during start-up only.  Every table is
** registered before the first VM is created (nb_vm_new opens lang's own
** libraries; front ends call their openers, e.g. nbD_init, before it);
** after that the index is read-only and may be read from any thread without
** a lock.  Registering after the first VM exists is a programming error and
** aborts with a message naming the table. */
#define NB_MAX_PARAMS 16   /* named parameters of one builtin */
typedef int (*nb_CFunc)(nb_VM *vm, nb_Value *args, int nargs, nb_Value *out);
struct nb_Builtin {
  const char *name;
  nb_CFunc fn;
  const char *params;   /* "x, axis=nil, keepdims=false"; "*args" for variadic; "**kw" collects extra keywords */
  const char *doc;      /* one line */
  /* filled by nbC_register from params: */
  int nparams, nrequired; bool variadic;
  int kwrest;           /* index of a "**name" parameter collecting other keywords into a record, or -1 */
  /* fn == NULL: a named value.  If `value` is set it makes the value (e.g. the
  ** `cuda` record), else params holds a number's text (pi, inf, nan). */
  int (*value)(nb_VM *vm, nb_Value *out);
  const char *pnames[NB_MAX_PARAMS];
  nb_Value pdefaults[NB_MAX_PARAMS];
};
/* Registers a NULL-terminated array of builtins (kept by pointer; must be static). */
void nbC_register(nb_Builtin *table);
/* Parses params of builtins reached only as values (record members such as
** cuda.available), which are not entered in the index.  Start-up only, too. */
void nbC_prepare(nb_Builtin *table);
int  nbC_lookup(const char *name, size_t len);     /* index or -1 */
const nb_Builtin *nbC_at(int idx);
int  nbC_count(void);
const char *nbC_name(const nb_Builtin *b);
/* "name(params)\ndoc" of a builtin or a nabla function (doc(), inspect) */
int  nbC_doc_value(nb_VM *vm, nb_Value f, nb_Value *out);

/* ---- argument checks -----------------------------------------------------
** "f: expected a number for 'x', got string" (TypeError).  The NB_ARG*
** macros check args[i] in a builtin whose locals are vm, args and fname. */
int  nb_arg_type_error(nb_VM *vm, const char *fname, const char *param, const char *expected, nb_Value got);
#define NB_ARGTYPE(i, T, expected, name) do { if (args[i].t != (T)) return nb_arg_type_error(vm, fname, name, expected, args[i]); } while (0)
#define NB_ARGNUM(i, name)  NB_ARGTYPE(i, NB_TNUM, "a number", name)
#define NB_ARGSTR(i, name)  NB_ARGTYPE(i, NB_TSTR, "a string", name)
#define NB_ARGLIST(i, name) NB_ARGTYPE(i, NB_TLIST, "a list", name)
#define NB_ARGREC(i, name)  NB_ARGTYPE(i, NB_TREC, "a record", name)

/* ---- errors -------------------------------------------------------------
** nb_error* set the VM's pending error and return NB_ERR, so a builtin
** writes `return nb_error_kind(vm, "TypeError", "f: ...", ...);`. */
int  nb_error(nb_VM *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int  nb_error_kind(nb_VM *vm, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int  nb_raise(nb_VM *vm, nb_Value errval);       /* takes the reference */
/* the pending error record ({name, message, ...}; borrowed), nil when none */
nb_Value nb_error_value(nb_VM *vm);
/* drops the pending error: for code that turns it into an error of another
** layer (a tensor error in a backward pass) instead of raising it on */
void nb_error_clear(nb_VM *vm);
/* turns the pending error into nb_last_error's (for code that failed
** outside nb_run, e.g. a worker serializing a result) */
void nbE_finish(nb_VM *vm);
/* size limits (lobject.h: NB_MAX_STR, NB_MAX_LIST): the errors naming the
** operation and the size, and a checked buffer -> string.  Memory: a list,
** string or buffer that input makes large is grown through these, so running
** out is a MemoryError naming the operation and the size, never an abort. */
int  nbS_too_long(nb_VM *vm, const char *op, size_t len);
int  nbS_from_buf(nb_VM *vm, const char *op, const nb_Buf *b, nb_Value *out);
int  nbL_too_long(nb_VM *vm, const char *op, size_t n);
/* MemoryError: "op: out of memory allocating N bytes" */
int  nb_memory_error(nb_VM *vm, const char *op, size_t bytes);
/* NB_OK when b holds all that was written to it; else MemoryError (it could
** not grow) or the too-long ValueError */
int  nbB_check(nb_VM *vm, const char *op, const nb_Buf *b);
/* room for n items in all in l: the NB_MAX_LIST ValueError, or MemoryError */
int  nbL_reserve(nb_VM *vm, const char *op, nb_List *l, size_t n);
/* a new list with room for n items (*out), or one of nbL_reserve's errors */
int  nbL_new_checked(nb_VM *vm, const char *op, size_t n, nb_List **out);
/* a new string of len bytes for the caller to write (its hash is computed on
** first use), content undefined but for its final NUL; or the MemoryError */
int  nbS_alloc(nb_VM *vm, const char *op, size_t len, nb_Str **out);

/* ---- interrupts ----------------------------------------------------------
** nb_vm_interrupt (nabla.h) sets the VM's flag from any thread or a signal
** handler; code that runs long checks it and stops. */
bool nb_vm_interrupted(nb_VM *vm);
/* consumes a pending interrupt: raises the uncatchable Interrupted error */
int  nbV_interrupt_error(nb_VM *vm);
/* forgets a pending interrupt (a worker arming the VM for a new command) */
void nb_vm_clear_interrupt(nb_VM *vm);
/* the flag itself, for C code below lang that polls it while it blocks
** (the ring's collectives, file readers): read it, never write it */
volatile sig_atomic_t *nb_vm_interrupt_flag(nb_VM *vm);

/* ---- calling nabla code -------------------------------------------------- */
int  nbV_call(nb_VM *vm, nb_Value fn, nb_Value *args, int nargs, nb_Value *out);
int  nbV_call_kw(nb_VM *vm, nb_Value fn, nb_Value *args, int npos, nb_Str **kwnames, int nkw, nb_Value *out);
/* nbV_call for a caller that is not the evaluator (a backward pass the
** tensor layer runs): on an error it puts the VM's call stack back as
** `try` does, and leaves the error pending (nb_error_value, nb_error_clear) */
int  nb_pcall(nb_VM *vm, nb_Value fn, nb_Value *args, int nargs, nb_Value *out);
int  nbV_truthy(nb_VM *vm, nb_Value v, bool *out);
int  nbV_binop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out);
int  nbV_index(nb_VM *vm, nb_Value obj, nb_Value *idx, int nidx, nb_Value *out);

/* ---- globals of the main module -------------------------------------------
** by slot, as the evaluator keeps them: a slot index stays valid for the
** VM's life (nb_reset empties slots, it does not renumber them) */
int  nb_global_find(nb_VM *vm, const char *name, size_t len);   /* slot or -1 */
int  nb_global_slot(nb_VM *vm, nb_Str *name);   /* creates the slot if needed; name interned */
/* the slot's value (NB_TUNDEF while unassigned); the pointer is valid until
** the next slot is created */
nb_Value *nb_global_at(nb_VM *vm, int slot);
/* the value of a global name or a dotted path of record fields and module
** members (`f`, `model.forward`, `mylib.f`; builtins too), looked up without
** running code: a new reference in *out, or false */
bool nb_lookup_path(nb_VM *vm, const char *path, size_t len, nb_Value *out);
/* the global slots of module m (a function's f->mod, a module value):
** *vals points at its values (NB_TUNDEF while unassigned; valid until the
** module's next slot is created); returns their number.  compile (lcompile.c)
** watches the globals a step could change. */
struct nb_Module;
int  nb_module_globals(struct nb_Module *m, nb_Value **vals);

/* ---- bytecode ------------------------------------------------------------- */
/* appends the disassembly of function fn's bytecode to out (%dis); NB_ERR
** with a TypeError for anything but a nabla function, or the SyntaxError of
** a function too large to compile */
int  nb_disassemble_value(nb_VM *vm, nb_Value fn, nb_Buf *out);

/* ---- output --------------------------------------------------------------- */
void nbW_write(nb_VM *vm, int stream, const char *s, size_t n);
/* a warning from a builtin: "file:line:col: kind: message" on stderr, once per
** call site and message (Python's default filter); kind e.g. "UserWarning" */
void nb_warn(nb_VM *vm, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* as_result: the chunk's value (sink->result); display_id/update: Jupyter display updates */
void nbW_show(nb_VM *vm, nb_Value v, bool as_result, const char *display_id, bool update);
nb_Str *nbS_tostr(nb_Value v);     /* print form as a string object */
int  nbS_split(nb_VM *vm, nb_Value s, nb_Value sep, nb_Value *out);

/* ---- serialization (values to bytes and back: dist, checkpoints) ---------- */
int  nbZ_serialize(nb_VM *vm, nb_Value v, nb_Buf *out);
int  nbZ_deserialize(nb_VM *vm, const char *data, size_t len, nb_Value *out);

/* ---- per-VM state of a library --------------------------------------------
** A library keeps what programs can change (the default device, ...) per
** VM, not in a file-scope variable: two VMs in one process (tests, a kernel
** restarting) must not see each other's settings.  Returns the block of
** `size` bytes this VM keeps for `key` (any unique address: the library's
** own static), zeroed on first use and freed with the VM.  Not thread-safe:
** call it from the thread running the VM. */
void *nb_vm_libdata(nb_VM *vm, const void *key, size_t size);

#endif
