/*
** lvm.h — the interpreter's internal structures, shared by the files of lang/:
** the syntax tree, function prototypes, modules, the VM and its global state,
** errors.  Front ends use nabla.h, libraries of builtins (lang/lib/, dist/)
** nbapi.h; only the core files of lang/ include this (lang/lib/ does not).
**
** The core's files, in the order a line of source meets them:
**   llex.c      tokens                      lparse.c    tokens -> syntax tree
**   lresolve.c  names -> slots/cells/globals
**   lcode.c     syntax tree -> bytecode     lexec.c     the bytecode VM's loop
**               (lopcodes.h; ldis.c prints it)  lexecslow.c its slow paths
**   lrun.c      running a chunk; the poll
**   lcall.c     calls and closures          lops.c      operators, indexing, fields
**   lobject.c   values, the heap (refcounts, cycle collector), interning
**   lerror.c    error values and reports    lsession.c  the embedding API
**   lstate.c    the global state and its per-thread binding
*/
#ifndef LVM_H
#define LVM_H

#include <math.h>
#include <signal.h>
#include "nbapi.h"    /* the public extension API: values, builtins, errors, calls */
#include "llex.h"
#include "ltvalue.h"

/* ------------------------------------------------------------ syntax tree */
typedef enum {
  N_NUM, N_STR, N_NIL, N_TRUE, N_FALSE, N_INTERP, N_LIST, N_REC,
  N_NAME, N_NEG, N_NOT, N_BINARY, N_AND, N_OR, N_RANGE,
  N_CALL, N_METHOD, N_INDEX, N_SLICE, N_FIELD,
  N_ASSIGN, N_FN, N_IF, N_WHILE, N_FOR, N_BLOCK,
  N_BREAK, N_CONTINUE, N_RETURN, N_TRY, N_IMPORT, N_GLOBAL, N_NOGRAD, N_AUTOCAST,
  N_SPREAD,                     /* *xs among a call's arguments: a = the list */
  N_BNOT,                       /* ~a (after the older kinds: their numbering is unchanged) */
} nb_NodeKind;

/* nb_BinOp, the operator codes: nbapi.h */

/* where a name lives, decided by the resolver */
typedef enum { V_UNRESOLVED, V_LOCAL, V_CELL, V_CAP, V_GLOBAL } nb_VarKind;

typedef struct nb_Proto nb_Proto;
typedef struct nb_Chunk nb_Chunk;
typedef struct nb_Node nb_Node;
struct nb_Node {
  uint8_t kind, op, vkind, flags;
  int32_t idx;          /* slot, capture index or global index; N_NUM: its kind, NB_KINT or NB_KFLOAT */
  int32_t bidx;         /* for globals: builtin of the same name (fallback), or -1 */
  uint32_t pos, end;    /* source span, for carets */
  int line, col;
  nb_Node *a, *b, *c;   /* children: operands, target/value, cond/then/else, ...
                        ** (a bitwise N_BINARY's c: the operator's span, for errors) */
  nb_Node **kids; int nkids;   /* list items, call args (positional first), block statements */
  int npos;             /* calls: number of positional args (the rest are keywords) */
  nb_Str **names;       /* record keys, keyword argument names, global declarations */
  nb_Str *str;          /* string literal, variable name, field name, module name */
  double num;
  nb_Proto *proto;      /* N_FN */
};
enum { NF_EXPRSTMT = 1, NF_FNDEF = 2, NF_TOPLEVEL = 4, NF_FLOATLIT = 8 /* N_NUM: 1.0, .5, 2e3 (a float; else an int) */,
       /* N_LIST inside tensor(...)'s first argument: when the callee (register
       ** bidx) is the builtin tensor, the literal stays a list of numbers so that
       ** tensor() builds it from the exact values (dtype="f64" keeps every digit) */
       NF_RAWLIST = 16 };

/* A parsed unit of source: the nodes live in its arena; the source text is kept
** for error carets and for serializing functions.  Refcounted by the protos
** made from it and by whoever is running it. */
struct nb_Chunk {
  int rc;
  char *src; size_t len;
  char *filename;
  struct ArenaBlock *arena;
  nb_Proto **protos; int nprotos, capprotos;   /* protos created by the parser */
  nb_Str **owned; int nowned, capowned;        /* names and literals the nodes point to */
};

typedef struct nb_CapDesc { uint8_t from_cap; int32_t idx; } nb_CapDesc;

struct nb_Proto {
  int rc;
  nb_Chunk *chunk;
  nb_Str *name, *doc;
  int nparams; nb_Str **params; nb_Node **defaults;   /* defaults[i] may be NULL */
  bool variadic;                /* fn f(a, *rest): the last param gathers extra positional args in a list */
  int nlocals;
  nb_Str **localnames;          /* nlocals entries, for completion and debugging */
  int ncells; int32_t *cellslots;   /* locals that closures capture: hold an nb_Cell */
  int ncaps; nb_CapDesc *caps; nb_Str **capnames;
  nb_Node *body;
  uint32_t src_start, src_end;  /* the text of the `fn ...` form */
  int line;
  int ninner_protos;            /* scratch for the resolver */
  struct nb_Code *code;         /* the body compiled for the VM (lcode.c), or NULL */
  const char *vm_why;           /* the limit it exceeded, so it was not compiled (static text), or NULL */
  const nb_Node *vm_at;         /* where */
  bool resolved;
};

nb_Chunk *nbP_parse(nb_VM *vm, const char *src, size_t len, const char *filename, nb_Node **out_program);
void nbP_chunk_release(nb_Chunk *c);
void nbP_proto_release(nb_Proto *p);
const char *nbP_proto_name(const nb_Proto *p);

/* ------------------------------------------------------------ modules */
typedef struct nb_Module {
  nb_Obj h;
  nb_Str *name, *path;
  int n, cap;
  nb_Str **names;       /* interned */
  nb_Value *vals;       /* NB_TUNDEF until assigned */
  int32_t *index; int icap;   /* open-addressing map name -> slot */
  nb_Chunk **chunks; int nchunks, capchunks;   /* source run in this module */
} nb_Module;

nb_Module *nbM_new(const char *name, const char *path);
void nbM_free(nb_Module *m);
const char *nbM_name(const nb_Module *m);
int nbM_global_slot(nb_Module *m, nb_Str *name);     /* creates the slot if needed */
int nbM_global_find(const nb_Module *m, const char *name, size_t len);

/* ------------------------------------------------------------ builtins */
/* nb_Builtin and its registration (nbC_*): nbapi.h */
void nbC_freeze(void);   /* closes registration (nb_vm_new): the index is read-only from then on */

/* ------------------------------------------------------------ global state
** Everything mutable that the core keeps between calls hangs off one
** nb_Global owned by its VM (vm->g), made by nb_vm_new and freed by
** nb_vm_free, as Lua's global_State hangs off lua_State: the heap (the cycle
** collector's list and thresholds, the queue of values being freed), the
** string-intern table, and the VM's copy of the stdlib directory.  The parser
** keeps its state in its own Parser, the resolver in its FuncState chain.
**
** Binding.  The value constructors and nb_decref (nbS_cstr, nbL_new, nbR_new,
** nbO_free, ...) take no VM -- the libraries, dist/ and kernel/ call them
** everywhere -- so they reach the state through a per-thread binding, nb_G():
** the state of the VM last entered on this thread.  Entry points that take a
** VM bind it (nb_state_bind): nb_vm_new, nb_vm_free (for its teardown, then
** the previous binding comes back), nb_run, nb_run_file, nb_vm_set_argv, nb_reset,
** nb_complete, nb_inspect, nbZ_serialize, nbZ_deserialize, nbV_call.  The
** binding is sticky: it stays after the entry point returns, so a front end
** that owns one VM per thread (every front end today) may create and drop
** values between calls.
**
** The process state (nb_state_process) is what a thread with no VM bound
** uses, and it holds the names interned before any VM ran: the builtin
** libraries register (nbC_register interns parameter names and string
** defaults) with no VM bound, at startup or inside the first nb_vm_new.  A
** VM's intern table falls back to the process table, so a builtin's "sum"
** and a program's "sum" are one string in every VM.  It is written only with
** no VM bound -- library registration, once, before any code runs, and the
** lexer/parser unit tests (nb_is_complete parses in a temporary state of
** its own) -- and is not locked.
**
** The thread rule.  A VM and its values belong to the thread running it
** (in practice the process's main thread); values of one VM must not reach
** another (interned names compare by pointer).  Other threads may call only
** nb_vm_interrupt (async-signal-safe: it stores two flags) and must not make,
** read or drop nabla values:
**   - the worker's I/O thread (dist/, wio_main): signed messages and
**     nb_vm_interrupt only;
**   - the comm threads (dist/ data-parallel reducer comm_main, asynchronous
**     sends asend_main): raw tensor buffers only, no values and no tensor
**     allocation (tensor/'s counts assume the interpreter thread);
**   - the session's reaper and the kernel's heartbeat and control threads:
**     processes, sockets and nb_vm_interrupt only.
** A thread that must run nabla code would need its own VM (and binds it by
** entering it); sharing one VM across threads needs a lock held across the
** whole entry-point call, documented where it is taken.  None exists today. */
typedef struct nb_Global {
  nb_VM *vm;                        /* the owner; NULL for the process state */
  /* heap (lobject.c) */
  nb_Obj gc_head;                   /* circular list of tracked containers */
  size_t gc_count, gc_count_limit;  /* tracked now; a collection is due past the limit */
  bool gc_due, gc_armed;            /* armed: thresholds set by the first run */
  int gc_stress;                    /* NABLA_GC_STRESS, -1 until read */
  volatile sig_atomic_t *gc_poll;   /* the owner's poll flag, raised when a collection is due */
  nb_Value *pending; size_t npending, cappending;   /* values being freed (nbO_free) */
  nb_Obj *pending_overflow;         /* more of them, linked through their own headers when
                                    ** the stack cannot grow (out of memory: lobject.c) */
  int freeing;
  /* strings (lobject.c) */
  nb_Str **itab; size_t icap, icount;
  /* modules (lsession.c): where import looks first, copied from the process
  ** setting (nb_set_stdlib_dir) when the VM is made */
  char *stdlib_dir;
} nb_Global;

nb_Global *nb_state_new(nb_VM *owner);
void nb_state_free(nb_Global *g);
nb_Global *nb_state_process(void);
/* binds vm's state to the calling thread (NULL: the process state) */
void nb_state_bind(nb_VM *vm);
extern _Thread_local nb_Global *nb_state_bound_;
static inline nb_Global *nb_G(void) {
  nb_Global *g = nb_state_bound_;
  return __builtin_expect(g != NULL, 1) ? g : nb_state_process();
}
/* the heap part of a state (lobject.c); NB_GC_MIN_COUNT: see its "When to collect" */
#define NB_GC_MIN_COUNT 10000
void nbO_heap_init(nb_Global *g);
void nbO_heap_free(nb_Global *g);

/* ------------------------------------------------------------ VM */
typedef struct nb_Frame {
  nb_Value *locals;
  nb_Chunk *chunk;      /* source of the running code, for error locations */
  nb_Func *fn;          /* NULL at top level */
  nb_Module *mod;
  const nb_Node *call;  /* the call site, for stack traces; NB_CALL_LAZY in a VM
                        ** frame (lexec.c): read it through nbI_frame_call */
  struct nb_Frame *parent;
} nb_Frame;
#define NB_CALL_LAZY ((const nb_Node *)(uintptr_t)1)
const nb_Node *nbI_frame_call(const nb_Frame *f);

struct nb_VM {
  nb_Global *g;                             /* the global state (see above) */
  nb_Sink *sink;
  nb_Module *main;
  nb_Module **mods; int nmods, capmods;     /* imported modules, by name */
  char **paths; int npaths;
  nb_Value *stack, *sp, *stack_end;        /* locals of active calls */
  int depth, max_depth;                     /* calls through C (lcall.c) nested now; with the VM's
                                            ** frames (nxf) at most max_depth */
  char *cstack_base; size_t cstack_limit;
  volatile sig_atomic_t interrupted;
  volatile sig_atomic_t poll;               /* nonzero: check interrupt/step limit */
  uint64_t steps, step_limit;
  nb_Value err;                             /* the error being raised (a record) */
  bool err_located;
  nb_Frame *frame;                          /* innermost active frame */
  /* the builtin running in `frame` and its call site: a nabla function the
  ** builtin calls back (map's, sorted's key) is called from there, so its
  ** caller's stack-trace line is the builtin's call, not the caller's own
  ** call site (nbV_call_at sets and restores it, nbV_call_kw reads it) */
  nb_Frame *builtin_frame; const nb_Node *builtin_site;
  int grad_disabled;                        /* no_grad nesting */
  nb_ErrorInfo last; char *last_name, *last_msg, *last_report;
  int echo_flags;
  nb_Value tensor_state;                    /* the libraries' per-VM data (nb_vm_libdata, lapi.c) */
  void *xframes; int nxf;                   /* the VM's frames (lexec.c): max_depth of them, made
                                            ** on first use; nxf in use (VM calls: the nesting is
                                            ** depth, calls through C, plus nxf) */
  struct nb_Handler *xh; int nxh, capxh;    /* the VM's try handlers (lexec.c) */
};

/* resolver (lresolve.c) */
int  nbK_resolve(nb_VM *vm, nb_Chunk *c, nb_Node *prog, nb_Module *mod);
int  nbK_resolve_in_scope(nb_VM *vm, nb_Chunk *c, nb_Node *fnexpr, nb_Module *mod, nb_Str **names, int n, nb_Proto *holder);

/* evaluation */
int  nbV_run_program(nb_VM *vm, nb_Chunk *chunk, nb_Node *prog, nb_Module *mod, int flags);
int  nbM_import(nb_VM *vm, nb_Str *name, nb_Value *out);
void nbW_display(nb_VM *vm, nb_Value v);
/* the VM's parts in other files: lcall.c calls (see its calling
** convention), lops.c operates on values */
/* at loop back-edges and calls when vm->poll is set: interrupt, collection, step limit */
int  nbV_poll(nb_VM *vm);
int  nbV_call_at(nb_VM *vm, nb_Frame *f, const nb_Node *site, nb_Value callee, nb_Value *base, int npos, nb_Str **kw, int nkw, nb_Value *out);
/* binds a call's arguments to a function's parameters (lcall.c) */
int  nbV_bind_args(nb_VM *vm, const nb_Proto *p, nb_Value *base, int npos, nb_Str **kw, int nkw);
/* rewrites a binding error of r.field(...) to name the field and the self rule */
void nbV_field_call_error(nb_VM *vm, const nb_Str *field, const nb_Proto *p, bool got_self);
/* *v (a range, a tensor, an iterator) as the list that f(*v) spreads; consumes *v */
/* & | ^ << >> on two values, ~ on one (lops.c; nbV_binop calls nbV_bitop) */
int  nbV_bitop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out);
int  nbV_bnot(nb_VM *vm, nb_Value a, nb_Value *out);
int  nbV_spread_list(nb_VM *vm, nb_Value *v);
int  nbV_set_index(nb_VM *vm, nb_Value obj, nb_Value *idx, int nidx, nb_Value v);
int  nbV_get_field(nb_VM *vm, nb_Value obj, nb_Str *name, nb_Value *out);
int  nbV_set_field(nb_VM *vm, nb_Value obj, nb_Str *name, nb_Value v);

/* x // y as Python's float floor division: the quotient rounded down, exact
** where floor(x / y) would round (fmod-based, as CPython). */
static inline double nbV_floor_div(double x, double y) {
  if (y == 0) return floor(x / y);   /* inf or nan, as / gives */
  double mod = fmod(x, y), div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return copysign(0.0, x / y);
  double f = floor(div);
  return div - f > 0.5 ? f + 1.0 : f;
}

/* Arithmetic on two numbers with Python's kinds: int op int is an int for
** + - * // % and ** with a non-negative exponent; / is always a float; a float
** operand makes a float (or-ing the kinds: NB_KFLOAT is 1, NB_KINT 0).
** Inline: `x += 1` in lexec.c and nbV_binop in lops.c both use it. */
static inline nb_Value nbV_num_arith(int op, nb_Value a, nb_Value b) {
  double x = a.u.n, y = b.u.n;
  nb_Value r; r.t = NB_TNUM; r.kind = a.kind | b.kind;
  switch (op) {
  case OP_ADD: r.u.n = x + y; break;
  case OP_SUB: r.u.n = x - y; break;
  case OP_MUL: r.u.n = x * y; break;
  case OP_DIV: return nb_flt(x / y);
  case OP_IDIV: r.u.n = nbV_floor_div(x, y); break;
  case OP_MOD: {   /* floored, like Python: a zero result takes y's sign (a float's; an int has no -0) */
    double m = fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    else if (m == 0) m = r.kind == NB_KINT ? 0.0 : copysign(0.0, y);
    r.u.n = m; break;
  }
  case OP_POW: r.u.n = pow(x, y); if (y < 0) r.kind = NB_KFLOAT; break;
  default: return nb_flt(NAN);
  }
  if (r.kind == NB_KINT) r.u.n += 0.0;   /* an int has no -0 (0 * -1, -4 % 2, 0 // -1) */
  return r;
}

/* errors (lerror.c).  nb_error* set vm->err and return NB_ERR. */
void nbE_locate(nb_VM *vm, nb_Chunk *chunk, const nb_Node *n);
void nbE_add_frame(nb_VM *vm, const char *fname, nb_Chunk *chunk, const nb_Node *n);
bool nbE_catchable(nb_VM *vm);
char *nbE_syntax_report(const char *filename, const char *src, size_t len, uint32_t pos, uint32_t end, int line, int col, const char *msg);
void nbE_source_caret(nb_Buf *b, const char *src, size_t len, uint32_t pos, uint32_t end, int line);

/* the syntax error produced by the parser: carried as a regular error value */
int  nbP_syntax_error(nb_VM *vm, nb_Chunk *c, uint32_t pos, uint32_t end, int line, int col, const char *fmt, ...);

/* tensor values: the hooks the evaluator calls for tensor operands: ltvalue.h */

int  nbV_make_closure(nb_VM *vm, nb_Frame *f, nb_Proto *p, nb_Value *out);
void nbV_box_cells(const nb_Proto *p, nb_Value *base);
/* the last syntax error when parsing without a VM (for is_complete) */
extern __thread uint32_t nbP_last_error_pos;
extern __thread bool nbP_last_error_at_eof;

/* registers the standard libraries' builtins (lib/linit.c): once, from
** nb_vm_new; the libraries' openers are declared in lib/nblib.h */
void nbopen_libs(void);

/* errors, calls, output, serialization, size limits: nbapi.h (public) */

#endif
